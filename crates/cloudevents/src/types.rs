//! Event types and extension names of the work protocol.

use crate::Error;

/// Data type prefix of every work event (`<group>.<version>.<resource>`).
pub const MANIFEST_BUNDLE_DATA_TYPE: &str =
    "io.open-cluster-management.works.v1alpha1.manifestbundles";
/// Heartbeat events of the gRPC broker; filtered out by clients.
pub const HEARTBEAT_TYPE: &str = "io.open-cluster-management.cloudevents.heartbeat";
/// Content type of every payload.
pub const JSON: &str = "application/json";

/// Extension: the work's UID.
pub const EXT_RESOURCE_ID: &str = "resourceid";
/// Extension: the spec version (the work's generation).
pub const EXT_RESOURCE_VERSION: &str = "resourceversion";
/// Extension: the target cluster.
pub const EXT_CLUSTER_NAME: &str = "clustername";
/// Extension: the source a status is meant for.
pub const EXT_ORIGINAL_SOURCE: &str = "originalsource";
/// Extension: snowflake id ordering status events.
pub const EXT_SEQUENCE_ID: &str = "sequenceid";
/// Extension: sha256 of the status JSON.
pub const EXT_STATUS_HASH: &str = "statushash";
/// Extension: JSON of the work's ObjectMeta.
pub const EXT_METADATA: &str = "metadata";
/// Extension: set when the work is being deleted.
pub const EXT_DELETION_TIMESTAMP: &str = "deletiontimestamp";
/// Extension: log tracing context, passed through.
pub const EXT_LOG_TRACING: &str = "logtracing";

/// Which half of the work an event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SubResource {
    /// The work's spec (source → agent, and the agent's spec resync request).
    Spec,
    /// The work's status (agent → source, and the source's status resync request).
    Status,
}

/// The work protocol's event types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    /// `spec.create_request`
    SpecCreate,
    /// `spec.update_request`
    SpecUpdate,
    /// `spec.delete_request`
    SpecDelete,
    /// `spec.resync_request` (agent → source)
    SpecResyncRequest,
    /// `spec.resync_response` (source → agent)
    SpecResyncResponse,
    /// `status.update_request` (agent → source)
    StatusUpdate,
    /// `status.resync_request` (source → agent)
    StatusResyncRequest,
    /// `status.resync_response` (agent → source)
    StatusResyncResponse,
}

impl EventType {
    /// Every type, for counters.
    pub const ALL: [EventType; 8] = [
        Self::SpecCreate,
        Self::SpecUpdate,
        Self::SpecDelete,
        Self::SpecResyncRequest,
        Self::SpecResyncResponse,
        Self::StatusUpdate,
        Self::StatusResyncRequest,
        Self::StatusResyncResponse,
    ];

    /// `<subresource>.<action>` as it appears after the data type.
    pub fn suffix(self) -> &'static str {
        match self {
            Self::SpecCreate => "spec.create_request",
            Self::SpecUpdate => "spec.update_request",
            Self::SpecDelete => "spec.delete_request",
            Self::SpecResyncRequest => "spec.resync_request",
            Self::SpecResyncResponse => "spec.resync_response",
            Self::StatusUpdate => "status.update_request",
            Self::StatusResyncRequest => "status.resync_request",
            Self::StatusResyncResponse => "status.resync_response",
        }
    }

    /// The full `type` attribute.
    pub fn as_type(self) -> String {
        format!("{MANIFEST_BUNDLE_DATA_TYPE}.{}", self.suffix())
    }

    /// Spec or status.
    pub fn sub_resource(self) -> SubResource {
        match self {
            Self::SpecCreate
            | Self::SpecUpdate
            | Self::SpecDelete
            | Self::SpecResyncRequest
            | Self::SpecResyncResponse => SubResource::Spec,
            _ => SubResource::Status,
        }
    }

    /// Parses a `type` attribute; another data type or action is [`Error::UnknownType`].
    pub fn parse(s: &str) -> Result<Self, Error> {
        let suffix = s
            .strip_prefix(MANIFEST_BUNDLE_DATA_TYPE)
            .and_then(|r| r.strip_prefix('.'))
            .ok_or_else(|| Error::UnknownType(s.to_string()))?;
        Self::ALL
            .into_iter()
            .find(|t| t.suffix() == suffix)
            .ok_or_else(|| Error::UnknownType(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_type() {
        for t in EventType::ALL {
            assert_eq!(EventType::parse(&t.as_type()).expect("parses"), t);
        }
        assert_eq!(
            EventType::parse(
                "io.open-cluster-management.works.v1alpha1.manifestbundles.spec.create_request"
            )
            .expect("parses"),
            EventType::SpecCreate
        );
    }

    #[test]
    fn unknown_types_are_errors() {
        for s in [
            "",
            "io.open-cluster-management.works.v1alpha1.manifests.spec.create_request",
            "io.open-cluster-management.works.v1alpha1.manifestbundles.spec.explode",
            HEARTBEAT_TYPE,
        ] {
            assert!(
                matches!(EventType::parse(s), Err(Error::UnknownType(_))),
                "{s}"
            );
        }
    }
}
