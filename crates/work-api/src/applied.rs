//! The spoke-side AppliedManifestWork: which resources a work applied, for ownership and pruning.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Spec of an AppliedManifestWork.
#[derive(CustomResource, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "work.open-cluster-management.io",
    version = "v1",
    kind = "AppliedManifestWork",
    status = "AppliedManifestWorkStatus",
    shortname = "amw",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct AppliedManifestWorkSpec {
    /// SHA-256 (lowercase hex) of the hub API server URL.
    pub hub_hash: String,
    /// Identity of the agent that applied the work.
    #[serde(default, rename = "agentID", skip_serializing_if = "String::is_empty")]
    pub agent_id: String,
    /// Name of the ManifestWork on the hub.
    pub manifest_work_name: String,
}

/// Like [`crate::ManifestWorkSpec`]: a missing or null spec (valid under the upstream CRD)
/// decodes as an empty one instead of failing a whole list.
impl<'de> Deserialize<'de> for AppliedManifestWorkSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Repr {
            hub_hash: String,
            #[serde(default, rename = "agentID")]
            agent_id: String,
            manifest_work_name: String,
        }
        let repr = Option::<Repr>::deserialize(d)?;
        Ok(repr.map_or_else(Self::default, |r| Self {
            hub_hash: r.hub_hash,
            agent_id: r.agent_id,
            manifest_work_name: r.manifest_work_name,
        }))
    }
}

/// Status of an AppliedManifestWork.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedManifestWorkStatus {
    /// Every resource the work applied and owns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_resources: Vec<AppliedManifestResourceMeta>,
    /// When eviction of this work's resources started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_start_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// One resource the work applied.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct AppliedManifestResourceMeta {
    /// API group.
    #[serde(default)]
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (plural).
    pub resource: String,
    /// Object name.
    pub name: String,
    /// Object namespace; empty for cluster-scoped.
    #[serde(default)]
    pub namespace: String,
    /// UID of the object when it was applied.
    #[serde(default)]
    pub uid: String,
}

/// The hub hash: lowercase hex SHA-256 of the hub API server URL.
pub fn hub_hash(hub_server_url: &str) -> String {
    hex::encode(Sha256::digest(hub_server_url.as_bytes()))
}

/// Name of the AppliedManifestWork for a work: `<hubHash>-<workName>`.
pub fn applied_manifest_work_name(hub_hash: &str, work_name: &str) -> String {
    format!("{hub_hash}-{work_name}")
}
