//! The ManifestBundle codec: spec events → what the agent needs to build a ManifestWork, work
//! status → status events, and the resync payloads.

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use work_api::{
    DeleteOption, Manifest, ManifestCondition, ManifestConfigOption, ManifestResourceStatus,
    ManifestWorkExecutor, ManifestWorkSpec, ManifestWorkStatus, ManifestsTemplate,
};

use crate::Error;
use crate::event::{CloudEvent, ExtValue};
use crate::types::{self, EventType, SubResource};

/// Default payload limit: Maestro's `--max-json-raw-length` and the size of a large bundle.
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024 + 64 * 1024;
/// Label carrying the source a work came from (upstream sets it at decode).
pub const LABEL_ORIGINAL_SOURCE: &str = "cloudevents.open-cluster-management.io/originalsource";
/// The source a work came from, as its labels say ([`LABEL_ORIGINAL_SOURCE`]); empty when they
/// do not.
pub fn original_source(labels: Option<&std::collections::BTreeMap<String, String>>) -> String {
    labels
        .and_then(|l| l.get(LABEL_ORIGINAL_SOURCE))
        .cloned()
        .unwrap_or_default()
}

/// Annotation carrying the data type (upstream sets it at decode).
pub const ANNOTATION_DATA_TYPE: &str = "cloudevents.open-cluster-management.io/datatype";

/// The spec payload (`executer` is upstream's spelling).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManifestBundle {
    /// Raw objects.
    #[serde(default)]
    pub manifests: Vec<Manifest>,
    /// Deletion behaviour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_option: Option<DeleteOption>,
    /// Per-resource configuration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifest_configs: Vec<ManifestConfigOption>,
    /// The executor.
    #[serde(default, rename = "executer", skip_serializing_if = "Option::is_none")]
    pub executor: Option<ManifestWorkExecutor>,
}

impl ManifestBundle {
    /// The ManifestWork spec this bundle maps onto (1:1).
    pub fn into_spec(self) -> ManifestWorkSpec {
        ManifestWorkSpec {
            workload: ManifestsTemplate {
                manifests: self.manifests,
            },
            delete_option: self.delete_option,
            manifest_configs: self.manifest_configs,
            executor: self.executor,
        }
    }

    /// The bundle of a ManifestWork spec (what a test source sends).
    pub fn from_spec(spec: &ManifestWorkSpec) -> Self {
        Self {
            manifests: spec.workload.manifests.clone(),
            delete_option: spec.delete_option.clone(),
            manifest_configs: spec.manifest_configs.clone(),
            executor: spec.executor.clone(),
        }
    }
}

/// The status payload; the agent never sends `manifestBundle`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManifestBundleStatus {
    /// Work conditions.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Per-manifest status.
    #[serde(default)]
    pub resource_status: Vec<ManifestCondition>,
    /// The bundle, only in source-side copies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_bundle: Option<ManifestBundle>,
}

impl ManifestBundleStatus {
    /// The payload of a work status.
    pub fn from_status(status: &ManifestWorkStatus) -> Self {
        Self {
            conditions: status.conditions.clone(),
            resource_status: status
                .resource_status
                .as_ref()
                .map(|r| r.manifests.clone())
                .unwrap_or_default(),
            manifest_bundle: None,
        }
    }

    /// Back to a work status (what a test source checks).
    pub fn into_status(self) -> ManifestWorkStatus {
        ManifestWorkStatus {
            conditions: self.conditions,
            resource_status: Some(ManifestResourceStatus {
                manifests: self.resource_status,
            }),
        }
    }
}

/// One entry of a spec resync request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ResourceVersion {
    /// The work's UID.
    #[serde(rename = "resourceID")]
    pub resource_id: String,
    /// The generation the agent holds.
    #[serde(rename = "resourceVersion")]
    pub resource_version: i64,
}

/// Payload of `spec.resync_request`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceVersionList {
    /// The works the agent holds.
    #[serde(default)]
    pub resource_versions: Vec<ResourceVersion>,
}

/// One entry of a status resync request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ResourceStatusHash {
    /// The work's UID.
    #[serde(rename = "resourceID")]
    pub resource_id: String,
    /// The hash the source holds.
    #[serde(rename = "statusHash")]
    pub status_hash: String,
}

/// Payload of `status.resync_request`; empty means "send every status".
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatusHashList {
    /// The source's hashes.
    #[serde(default)]
    pub status_hashes: Vec<ResourceStatusHash>,
}

/// A decoded spec event: everything the agent needs to create, update or delete its copy of a work.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecUpdate {
    /// Which spec event it was.
    pub event_type: EventType,
    /// `resourceid`: the work's UID.
    pub uid: String,
    /// The work's name: `metadata.name`, else the UID.
    pub name: String,
    /// The work's namespace: the cluster name.
    pub namespace: String,
    /// `resourceversion`: becomes the work's generation.
    pub generation: i64,
    /// The event's `source`: the `originalsource` label and the status events' `originalsource`.
    pub source: String,
    /// Labels from `metadata`.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Annotations from `metadata`.
    pub annotations: std::collections::BTreeMap<String, String>,
    /// Set when the work is being deleted (then `spec` may be absent).
    pub deletion_timestamp: Option<DateTime<Utc>>,
    /// `metadata.creationTimestamp` (Maestro sends its resource's creation time, to the second):
    /// tells a work created again under the same UID from the one before it. `None` when absent
    /// or not an RFC 3339 time (nothing depends on it but that distinction).
    pub creation_timestamp: Option<DateTime<Utc>>,
    /// The spec, absent on a delete without data.
    pub spec: Option<ManifestWorkSpec>,
}

/// Limits and identity the decoder checks events against.
#[derive(Clone, Debug)]
pub struct Decoder {
    /// This agent's cluster; events for another are [`Error::WrongCluster`].
    pub cluster: String,
    /// Largest payload accepted, in bytes.
    pub max_payload: usize,
}

/// What a source→agent event turned out to be.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// A spec create/update/delete/resync_response.
    Spec(Box<SpecUpdate>),
    /// A status resync request with the source's hashes (empty = all).
    StatusResync(ResourceStatusHashList),
}

#[derive(Deserialize, Default)]
struct MetaView {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    labels: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default, rename = "creationTimestamp")]
    creation_timestamp: Option<String>,
}

impl Decoder {
    /// A decoder for `cluster` with the default payload limit.
    pub fn new(cluster: impl Into<String>) -> Self {
        Self {
            cluster: cluster.into(),
            max_payload: DEFAULT_MAX_PAYLOAD,
        }
    }

    /// Decodes an event from the source. Agent→source types are [`Error::UnknownType`] here.
    pub fn decode(&self, ev: &CloudEvent) -> Result<Incoming, Error> {
        let size = ev.data.as_ref().map_or(0, Vec::len);
        if size > self.max_payload {
            return Err(Error::TooLarge {
                size,
                limit: self.max_payload,
            });
        }
        let ty = ev.event_type()?;
        match ty {
            EventType::StatusResyncRequest => {
                let list = match ev.data.as_deref() {
                    None | Some([]) => ResourceStatusHashList::default(),
                    Some(d) => serde_json::from_slice(d).map_err(|source| Error::Payload {
                        what: "status hash list",
                        source,
                    })?,
                };
                Ok(Incoming::StatusResync(list))
            }
            EventType::SpecCreate
            | EventType::SpecUpdate
            | EventType::SpecDelete
            | EventType::SpecResyncResponse => self
                .decode_spec(ev, ty)
                .map(|s| Incoming::Spec(Box::new(s))),
            _ => Err(Error::UnknownType(ev.type_.clone())),
        }
    }

    fn decode_spec(&self, ev: &CloudEvent, ty: EventType) -> Result<SpecUpdate, Error> {
        let cluster = ev.require_string(types::EXT_CLUSTER_NAME)?;
        if cluster != self.cluster {
            return Err(Error::WrongCluster {
                got: cluster,
                want: self.cluster.clone(),
            });
        }
        let uid = ev.require_string(types::EXT_RESOURCE_ID)?;
        if uid.is_empty() {
            return Err(Error::bad_attr(types::EXT_RESOURCE_ID, "empty"));
        }
        let deletion_timestamp = ev.ext_time(types::EXT_DELETION_TIMESTAMP)?;
        let without_data = matches!(ev.data.as_deref(), None | Some([]));
        // sdk-go's gRPC broker (OCM's gRPC server, Maestro's gRPC broker) answers an id the agent
        // listed in a spec resync request that it does not hold with a deletion without data and
        // without a version: taken at version 0.
        let generation = match ev.ext_integer(types::EXT_RESOURCE_VERSION)? {
            Some(version) => version,
            None if deletion_timestamp.is_some() && without_data => 0,
            None => return Err(Error::MissingAttribute(types::EXT_RESOURCE_VERSION)),
        };
        let meta: MetaView = match ev.ext_string(types::EXT_METADATA) {
            Some(m) if !m.is_empty() => serde_json::from_str(&m).map_err(|e| {
                Error::bad_attr(types::EXT_METADATA, format!("not ObjectMeta JSON: {e}"))
            })?,
            _ => MetaView::default(),
        };
        let spec = match ev.data.as_deref() {
            None | Some([]) if deletion_timestamp.is_some() => None,
            None | Some([]) => return Err(Error::MissingAttribute("data")),
            Some(d) => Some(decode_bundle(d)?.into_spec()),
        };
        let creation_timestamp = meta
            .creation_timestamp
            .as_deref()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc));
        let mut labels = meta.labels.unwrap_or_default();
        labels.insert(LABEL_ORIGINAL_SOURCE.to_string(), ev.source.clone());
        let mut annotations = meta.annotations.unwrap_or_default();
        annotations.insert(
            ANNOTATION_DATA_TYPE.to_string(),
            types::MANIFEST_BUNDLE_DATA_TYPE.to_string(),
        );
        Ok(SpecUpdate {
            event_type: ty,
            name: meta
                .name
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| uid.clone()),
            uid,
            namespace: cluster,
            generation,
            source: ev.source.clone(),
            labels,
            annotations,
            deletion_timestamp,
            creation_timestamp,
            spec,
        })
    }
}

/// Decodes a ManifestBundle as Go's sources write it. Go marshals a nil list without
/// `omitempty` as `null` (`celExpressions` of a condition rule is one); the API server prunes such
/// nulls from a ManifestWork, so the agent prunes them too, everywhere but inside the manifests,
/// whose nulls are the user's data.
pub fn decode_bundle(data: &[u8]) -> Result<ManifestBundle, Error> {
    let payload = |source| Error::Payload {
        what: "ManifestBundle",
        source,
    };
    let mut doc: serde_json::Value = serde_json::from_slice(data).map_err(payload)?;
    if let serde_json::Value::Object(fields) = &mut doc {
        for (key, value) in fields.iter_mut() {
            if key != "manifests" {
                prune_nulls(value);
            }
        }
        fields.retain(|_, v| !v.is_null());
    }
    serde_json::from_value(doc).map_err(payload)
}

/// Removes the null fields of every object in `v`.
fn prune_nulls(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(fields) => {
            fields.retain(|_, f| !f.is_null());
            fields.values_mut().for_each(prune_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(prune_nulls),
        _ => {}
    }
}

/// A work's status to publish, with the identity the source needs.
#[derive(Clone, Debug)]
pub struct StatusReport<'a> {
    /// The work's UID.
    pub uid: &'a str,
    /// The work's generation (the `resourceversion` it was applied at).
    pub generation: i64,
    /// The cluster (the work's namespace).
    pub cluster: &'a str,
    /// The source the work came from (`originalsource`).
    pub original_source: &'a str,
    /// JSON of the work's ObjectMeta, if the agent sends it (optional for Maestro).
    pub metadata: Option<serde_json::Value>,
    /// The status.
    pub status: &'a ManifestWorkStatus,
}

/// Encodes a status as `status.update_request` (or `status.resync_response`) from `client_id`.
pub fn encode_status(
    report: &StatusReport<'_>,
    ty: EventType,
    client_id: &str,
    sequence_id: u64,
) -> Result<CloudEvent, Error> {
    if ty.sub_resource() != SubResource::Status || ty == EventType::StatusResyncRequest {
        return Err(Error::UnknownType(ty.as_type()));
    }
    let payload = ManifestBundleStatus::from_status(report.status);
    let data = serde_json::to_vec(&payload).map_err(|source| Error::Payload {
        what: "ManifestBundleStatus",
        source,
    })?;
    let mut ev = CloudEvent::new(ty, client_id)
        .with_ext(
            types::EXT_RESOURCE_ID,
            ExtValue::String(report.uid.to_string()),
        )
        .with_ext(
            types::EXT_RESOURCE_VERSION,
            ExtValue::Integer(report.generation),
        )
        .with_ext(
            types::EXT_CLUSTER_NAME,
            ExtValue::String(report.cluster.to_string()),
        )
        .with_ext(
            types::EXT_ORIGINAL_SOURCE,
            ExtValue::String(report.original_source.to_string()),
        )
        .with_ext(
            types::EXT_SEQUENCE_ID,
            ExtValue::String(sequence_id.to_string()),
        )
        .with_ext(
            types::EXT_STATUS_HASH,
            ExtValue::String(status_hash(report.status)?),
        );
    if let Some(m) = &report.metadata {
        ev = ev.with_ext(types::EXT_METADATA, ExtValue::String(m.to_string()));
    }
    ev.data = Some(data);
    Ok(ev)
}

/// The spec resync request the agent sends after every subscribe, to all sources (`originalsource` "").
pub fn encode_spec_resync_request(
    versions: Vec<ResourceVersion>,
    cluster: &str,
    client_id: &str,
) -> Result<CloudEvent, Error> {
    let data = serde_json::to_vec(&ResourceVersionList {
        resource_versions: versions,
    })
    .map_err(|source| Error::Payload {
        what: "ResourceVersionList",
        source,
    })?;
    let mut ev = CloudEvent::new(EventType::SpecResyncRequest, client_id)
        .with_ext(
            types::EXT_CLUSTER_NAME,
            ExtValue::String(cluster.to_string()),
        )
        .with_ext(types::EXT_ORIGINAL_SOURCE, ExtValue::String(String::new()));
    ev.data = Some(data);
    Ok(ev)
}

/// sha256 hex of the status as Go's `json.Marshal` writes it (sorted keys, HTML escaped), so
/// the hash a source stores matches the one the agent recomputes.
pub fn status_hash(status: &ManifestWorkStatus) -> Result<String, Error> {
    let value = serde_json::to_value(status).map_err(|source| Error::Payload {
        what: "status",
        source,
    })?;
    let mut out = String::new();
    go_json(&value, &mut out);
    Ok(hex::encode(Sha256::digest(out.as_bytes())))
}

/// Writes `v` as Go's encoding/json does for unstructured data.
fn go_json(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_string(k, out);
                out.push(':');
                go_json(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json(x, out);
            }
            out.push(']');
        }
        Value::String(s) => go_string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

fn go_string(s: &str, out: &mut String) {
    let quoted = serde_json::Value::String(s.to_string()).to_string();
    for c in quoted.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What OCM's gRPC server sends for a work with a well-known condition rule: Go writes the
    /// rule's nil `celExpressions` as null.
    #[test]
    fn go_nulls_outside_the_manifests_are_pruned() {
        let data = br#"{"manifests":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"d","labels":null},"data":{"k":null}}],"deleteOption":{"propagationPolicy":"Foreground","selectivelyOrphans":null,"ttlSecondsAfterFinished":null},"manifestConfigs":[{"resourceIdentifier":{"group":"batch","resource":"jobs","name":"j","namespace":"d"},"feedbackRules":null,"updateStrategy":null,"conditionRules":[{"condition":"Complete","type":"WellKnownConditions","celExpressions":null}]}],"executer":null}"#;
        let bundle = decode_bundle(data).expect("decodes");
        assert_eq!(bundle.manifest_configs.len(), 1);
        assert!(bundle.executor.is_none());
        let manifest = serde_json::to_value(&bundle.manifests[0]).expect("json");
        assert_eq!(
            manifest["data"]["k"],
            serde_json::Value::Null,
            "the manifest's own nulls are kept"
        );
        assert!(decode_bundle(b"[1]").is_err());
        assert!(
            decode_bundle(b"{\"manifests\":null}")
                .expect("a nil list")
                .manifests
                .is_empty()
        );
        assert!(decode_bundle(b"{\"manifestConfigs\":\"x\"}").is_err());
    }

    fn create_event(cluster: &str, data: &str) -> CloudEvent {
        let mut ev = CloudEvent::new(EventType::SpecCreate, "maestro")
            .with_ext(
                types::EXT_RESOURCE_ID,
                ExtValue::String("4717d8e0-aaaa".into()),
            )
            .with_ext(types::EXT_RESOURCE_VERSION, ExtValue::Integer(1))
            .with_ext(types::EXT_CLUSTER_NAME, ExtValue::String(cluster.into()));
        ev.data = Some(data.as_bytes().to_vec());
        ev
    }

    const BUNDLE: &str = r#"{"manifests":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"default"},"data":{"k":"v"}}],"deleteOption":{"propagationPolicy":"Orphan"},"manifestConfigs":[{"resourceIdentifier":{"group":"","resource":"configmaps","name":"c","namespace":"default"},"updateStrategy":{"type":"ServerSideApply"}}],"executer":{"subject":{"type":"ServiceAccount","serviceAccount":{"namespace":"default","name":"sa"}}}}"#;

    #[test]
    fn decodes_a_bundle_and_reencodes_it_identically() {
        let d = Decoder::new("cluster1");
        let Incoming::Spec(s) = d
            .decode(&create_event("cluster1", BUNDLE))
            .expect("decodes")
        else {
            panic!("not spec")
        };
        assert_eq!(s.name, "4717d8e0-aaaa");
        assert_eq!(s.namespace, "cluster1");
        assert_eq!(s.generation, 1);
        assert_eq!(s.labels[LABEL_ORIGINAL_SOURCE], "maestro");
        let spec = s.spec.expect("spec");
        assert_eq!(spec.workload.manifests.len(), 1);
        assert!(spec.executor.is_some());
        let again = serde_json::to_value(ManifestBundle::from_spec(&spec)).expect("encodes");
        assert_eq!(
            again,
            serde_json::from_str::<serde_json::Value>(BUNDLE).expect("json")
        );
    }

    #[test]
    fn name_comes_from_metadata() {
        let ev = create_event("cluster1", r#"{"manifests":[]}"#).with_ext(
            types::EXT_METADATA,
            ExtValue::String(r#"{"name":"w1","labels":{"a":"b"}}"#.into()),
        );
        let Ok(Incoming::Spec(s)) = Decoder::new("cluster1").decode(&ev) else {
            panic!("decodes")
        };
        assert_eq!(s.name, "w1");
        assert_eq!(s.labels["a"], "b");
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        let d = Decoder {
            cluster: "cluster1".into(),
            max_payload: 64,
        };
        assert!(matches!(
            d.decode(&create_event("cluster2", "{}")),
            Err(Error::WrongCluster { .. })
        ));
        assert!(matches!(
            d.decode(&create_event("cluster1", "{not json")),
            Err(Error::Payload { .. })
        ));
        assert!(matches!(
            d.decode(&create_event("cluster1", r#"{"manifests":"x"}"#)),
            Err(Error::Payload { .. })
        ));
        assert!(matches!(
            d.decode(&create_event("cluster1", &"x".repeat(65))),
            Err(Error::TooLarge { .. })
        ));
        let mut ev = create_event("cluster1", "{}");
        ev.type_ = "io.open-cluster-management.works.v1alpha1.manifests.spec.create_request".into();
        assert!(matches!(d.decode(&ev), Err(Error::UnknownType(_))));
        let mut ev = create_event("cluster1", "{}");
        ev.extensions.remove(types::EXT_RESOURCE_ID);
        assert!(matches!(
            d.decode(&ev),
            Err(Error::MissingAttribute("resourceid"))
        ));
        let ev = create_event("cluster1", "{}")
            .with_ext(types::EXT_RESOURCE_VERSION, ExtValue::String("one".into()));
        assert!(matches!(d.decode(&ev), Err(Error::BadAttribute { .. })));
        let mut ev = create_event("cluster1", "");
        ev.data = None;
        assert!(matches!(
            d.decode(&ev),
            Err(Error::MissingAttribute("data"))
        ));
        let mut ev = create_event("cluster1", "{}");
        ev.extensions.remove(types::EXT_RESOURCE_VERSION);
        assert!(matches!(
            d.decode(&ev),
            Err(Error::MissingAttribute("resourceversion"))
        ));
    }

    /// sdk-go's gRPC broker answers an id it does not hold with a deletion that has neither data
    /// nor a version; a deletion with data still needs its version.
    #[test]
    fn a_deletion_without_data_needs_no_version() {
        let d = Decoder::new("cluster1");
        let mut ev = CloudEvent::new(EventType::SpecResyncResponse, "source")
            .with_ext(
                types::EXT_RESOURCE_ID,
                ExtValue::String("4717d8e0-aaaa".into()),
            )
            .with_ext(types::EXT_CLUSTER_NAME, ExtValue::String("cluster1".into()))
            .with_ext(types::EXT_DELETION_TIMESTAMP, ExtValue::Time(Utc::now()));
        ev.data = None;
        match d.decode(&ev) {
            Ok(Incoming::Spec(s)) => {
                assert_eq!(s.generation, 0);
                assert!(s.deletion_timestamp.is_some() && s.spec.is_none());
            }
            other => panic!("decodes: {other:?}"),
        }
        ev.data = Some(BUNDLE.as_bytes().to_vec());
        assert!(matches!(
            d.decode(&ev),
            Err(Error::MissingAttribute("resourceversion"))
        ));
    }

    #[test]
    fn a_spec_event_carries_its_creation_time_when_the_source_sends_one() {
        let d = Decoder::new("cluster1");
        let created = |metadata: &str| {
            let ev = create_event("cluster1", BUNDLE)
                .with_ext(types::EXT_METADATA, ExtValue::String(metadata.into()));
            match d.decode(&ev) {
                Ok(Incoming::Spec(s)) => s.creation_timestamp.map(|t| t.timestamp()),
                other => panic!("decodes: {other:?}"),
            }
        };
        let at = r#"{"name":"w","creationTimestamp":"2025-12-16T06:00:17Z"}"#;
        assert_eq!(created(at), Some(1_765_864_817));
        assert_eq!(created(r#"{"name":"w"}"#), None);
        assert_eq!(
            created(r#"{"name":"w","creationTimestamp":"yesterday"}"#),
            None,
            "an unreadable time is no time"
        );
    }

    #[test]
    fn delete_without_data() {
        let mut ev = create_event("cluster1", "");
        ev.type_ = EventType::SpecResyncResponse.as_type();
        ev.data = None;
        let ev = ev.with_ext(
            types::EXT_DELETION_TIMESTAMP,
            ExtValue::from_canonical(types::EXT_DELETION_TIMESTAMP, "2026-11-24T10:25:46.9069Z")
                .expect("time"),
        );
        let Ok(Incoming::Spec(s)) = Decoder::new("cluster1").decode(&ev) else {
            panic!("decodes")
        };
        assert!(s.deletion_timestamp.is_some());
        assert!(s.spec.is_none());
    }

    #[test]
    fn status_round_trip_and_hash() {
        let status: ManifestWorkStatus = serde_json::from_str(
            r#"{"conditions":[{"type":"Applied","status":"True","reason":"AppliedManifestWorkComplete","message":"a<b","lastTransitionTime":"2026-11-24T10:00:00Z","observedGeneration":1}],
               "resourceStatus":{"manifests":[{"resourceMeta":{"ordinal":0,"group":"","version":"v1","kind":"ConfigMap","resource":"configmaps","name":"c","namespace":"default"},"conditions":[]}]}}"#,
        )
        .expect("status");
        let report = StatusReport {
            uid: "u1",
            generation: 3,
            cluster: "cluster1",
            original_source: "maestro",
            metadata: None,
            status: &status,
        };
        let ev = encode_status(&report, EventType::StatusUpdate, "cluster1-work-agent", 42)
            .expect("encodes");
        assert_eq!(
            ev.ext_integer(types::EXT_RESOURCE_VERSION).expect("int"),
            Some(3)
        );
        assert_eq!(ev.ext_string(types::EXT_SEQUENCE_ID).as_deref(), Some("42"));
        let back: ManifestBundleStatus =
            serde_json::from_slice(ev.data.as_deref().expect("data")).expect("json");
        assert_eq!(back.into_status(), status);
        // Go escapes '<' and sorts keys: the hash is over that form, and stable.
        let h = status_hash(&status).expect("hash");
        assert_eq!(h.len(), 64);
        assert_eq!(ev.ext_string(types::EXT_STATUS_HASH), Some(h));
        let mut s = String::new();
        go_json(&serde_json::json!({"b":1,"a":"x<y&z"}), &mut s);
        assert_eq!(s, r#"{"a":"x\u003cy\u0026z","b":1}"#);
        assert!(encode_status(&report, EventType::SpecCreate, "c", 1).is_err());
    }

    #[test]
    fn resync_payloads() {
        let ev = encode_spec_resync_request(
            vec![ResourceVersion {
                resource_id: "u1".into(),
                resource_version: 2,
            }],
            "cluster1",
            "cluster1-work-agent",
        )
        .expect("encodes");
        assert_eq!(
            std::str::from_utf8(ev.data.as_deref().expect("data")).expect("utf8"),
            r#"{"resourceVersions":[{"resourceID":"u1","resourceVersion":2}]}"#
        );
        assert_eq!(
            ev.ext_string(types::EXT_ORIGINAL_SOURCE).as_deref(),
            Some("")
        );
        let empty = encode_spec_resync_request(vec![], "c", "c").expect("encodes");
        assert_eq!(
            empty.data.as_deref(),
            Some(&br#"{"resourceVersions":[]}"#[..])
        );
        let mut req = CloudEvent::new(EventType::StatusResyncRequest, "maestro");
        req.data = Some(br#"{"statusHashes":[{"resourceID":"u1","statusHash":"ab"}]}"#.to_vec());
        let Ok(Incoming::StatusResync(l)) = Decoder::new("c").decode(&req) else {
            panic!("decodes")
        };
        assert_eq!(l.status_hashes[0].status_hash, "ab");
    }
}
