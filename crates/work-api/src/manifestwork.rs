//! The hub-side ManifestWork.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ConditionRule;
use crate::string_enum::string_enum;

/// Spec of a ManifestWork: what to apply on the spoke and how.
#[derive(CustomResource, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "work.open-cluster-management.io",
    version = "v1",
    kind = "ManifestWork",
    namespaced,
    status = "ManifestWorkStatus",
    shortname = "mw",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkSpec {
    /// The manifests to apply.
    #[serde(default)]
    pub workload: ManifestsTemplate,
    /// How the work's resources are deleted, and its TTL after completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_option: Option<DeleteOption>,
    /// Per-resource configuration: update strategy, feedback and condition rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = crate::bounds::MAX_MANIFEST_CONFIGS))]
    pub manifest_configs: Vec<ManifestConfigOption>,
    /// Identity the agent applies the manifests as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<ManifestWorkExecutor>,
}

/// A ManifestWork without `spec` (or with `spec: null`) is valid under the upstream CRD, so it
/// decodes as an empty spec: one odd object must not fail a whole list or watch. The derived
/// root type asks a missing field for `deserialize_option`, which is what makes this work.
impl<'de> Deserialize<'de> for ManifestWorkSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Repr {
            #[serde(default)]
            workload: ManifestsTemplate,
            #[serde(default)]
            delete_option: Option<DeleteOption>,
            #[serde(default)]
            manifest_configs: Vec<ManifestConfigOption>,
            #[serde(default)]
            executor: Option<ManifestWorkExecutor>,
        }
        let repr = Option::<Repr>::deserialize(d)?;
        Ok(repr.map_or_else(Self::default, |r| Self {
            workload: r.workload,
            delete_option: r.delete_option,
            manifest_configs: r.manifest_configs,
            executor: r.executor,
        }))
    }
}

/// The list of raw manifests.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ManifestsTemplate {
    /// Raw Kubernetes objects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<Manifest>,
}

/// One raw Kubernetes object of a work.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(transparent)]
pub struct Manifest(pub serde_json::Value);

impl JsonSchema for Manifest {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Manifest".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "description": "A raw Kubernetes object.",
            "x-kubernetes-embedded-resource": true,
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}

/// Deletion behaviour of a work.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeleteOption {
    /// Foreground (default), Orphan or SelectivelyOrphan.
    #[serde(default)]
    pub propagation_policy: DeletePropagationPolicy,
    /// Resources kept on the spoke when the policy is SelectivelyOrphan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selectively_orphans: Option<SelectivelyOrphan>,
    /// Seconds after the work is Complete before the agent deletes it; 0 means at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "int64", "minimum" = 0))]
    pub ttl_seconds_after_finished: Option<i64>,
}

string_enum! {
    /// How a work's resources are treated when the work is deleted.
    DeletePropagationPolicy {
        /// Delete the resources (default).
        Foreground = "Foreground",
        /// Keep every resource.
        Orphan = "Orphan",
        /// Keep the resources matched by `selectivelyOrphans`.
        SelectivelyOrphan = "SelectivelyOrphan",
    }
    default Foreground
}

/// Rules naming the resources to orphan.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SelectivelyOrphan {
    /// Resources to keep on the spoke.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub orphaning_rules: Vec<OrphaningRule>,
}

/// Identifies one resource to orphan.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrphaningRule {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// Resource (plural), e.g. `configmaps`.
    pub resource: String,
    /// Object name.
    pub name: String,
    /// Object namespace; empty for cluster-scoped resources.
    #[serde(default)]
    pub namespace: String,
}

/// Configuration for the manifests a resource identifier matches.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestConfigOption {
    /// Which manifest this configures; `name` and `namespace` accept `*` globs.
    pub resource_identifier: ResourceIdentifier,
    /// Status fields to report back to the hub.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feedback_rules: Vec<FeedbackRule>,
    /// How the manifest is written to the spoke.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
    /// Rules that turn the live object into conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["condition"],
        "maxItems" = crate::bounds::MAX_CONDITION_RULES,
        "x-kubernetes-validations" = [{
            "rule": crate::bounds::RULE_UNIQUE_CONDITIONS,
            "message": "at most one rule per condition; a well-known rule without a condition sets Complete"
        }]
    ))]
    pub condition_rules: Vec<ConditionRule>,
    /// How feedback is collected: Poll (default) or Watch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback_scrape_type: Option<FeedbackScrapeType>,
}

/// Identifies a resource by group, resource, name and namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceIdentifier {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// Resource (plural), e.g. `jobs`.
    pub resource: String,
    /// Object name; `*` globs accepted.
    pub name: String,
    /// Object namespace; `*` globs accepted; empty for cluster-scoped resources.
    #[serde(default)]
    pub namespace: String,
}

/// One status feedback rule.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackRule {
    /// WellKnownStatus or JSONPaths.
    #[serde(rename = "type")]
    pub type_: FeedbackType,
    /// Paths to report when the type is JSONPaths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub json_paths: Vec<JsonPath>,
}

string_enum! {
    /// Kind of feedback rule.
    FeedbackType {
        /// Built-in status fields of well-known kinds.
        WellKnownStatus = "WellKnownStatus",
        /// User-named JSON paths.
        JsonPaths = "JSONPaths",
    }
    default WellKnownStatus
}

/// A named JSON path into the live object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonPath {
    /// Name the value is reported under.
    pub name: String,
    /// API version the path applies to; empty for any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The JSON path, e.g. `.status.replicas`.
    pub path: String,
}

string_enum! {
    /// How feedback is collected.
    FeedbackScrapeType {
        /// Periodic polling (default).
        Poll = "Poll",
        /// From watch events.
        Watch = "Watch",
    }
    default Poll
}

/// How a manifest is written to the spoke.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategy {
    /// Update (default), CreateOnly, ServerSideApply or ReadOnly.
    #[serde(rename = "type", default)]
    pub type_: UpdateStrategyType,
    /// Options when the type is ServerSideApply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_side_apply: Option<ServerSideApplyConfig>,
}

string_enum! {
    /// Write strategy for a manifest.
    UpdateStrategyType {
        /// Create, or update with resourceVersion (default).
        Update = "Update",
        /// Create if missing, never update.
        CreateOnly = "CreateOnly",
        /// Server-side apply with a field manager.
        ServerSideApply = "ServerSideApply",
        /// Never write; only read for status.
        ReadOnly = "ReadOnly",
    }
    default Update
}

/// Default field manager of server-side apply.
pub const DEFAULT_FIELD_MANAGER: &str = "work-agent";

/// Server-side apply options.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerSideApplyConfig {
    /// Take ownership of fields another manager owns.
    #[serde(default)]
    pub force: bool,
    /// Field manager name; must start with `work-agent` (default `work-agent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^work-agent", "default" = "work-agent"))]
    pub field_manager: Option<String>,
    /// Fields the agent leaves alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["condition"]))]
    pub ignore_fields: Vec<IgnoreField>,
}

impl ServerSideApplyConfig {
    /// The field manager to apply with.
    pub fn field_manager(&self) -> &str {
        self.field_manager
            .as_deref()
            .filter(|m| !m.is_empty())
            .unwrap_or(DEFAULT_FIELD_MANAGER)
    }
}

/// Fields to leave alone in server-side apply.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnoreField {
    /// OnSpokePresent (default): never overwrite once present; OnSpokeChange: keep spoke edits.
    #[serde(default)]
    pub condition: IgnoreFieldsCondition,
    /// JSON paths of the ignored fields, e.g. `.spec.replicas`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json_paths: Vec<String>,
    /// JSON pointers (RFC 6901) of the ignored fields, e.g. `/spec/replicas`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json_pointers: Vec<String>,
    /// jq path expressions of the ignored fields (accepted for compatibility).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jq_path_expressions: Vec<String>,
}

string_enum! {
    /// When an ignored field is left alone.
    IgnoreFieldsCondition {
        /// Once the field exists on the spoke (default).
        OnSpokePresent = "OnSpokePresent",
        /// When the spoke value differs from the last applied one.
        OnSpokeChange = "OnSpokeChange",
    }
    default OnSpokePresent
}

/// Who the agent acts as when applying.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkExecutor {
    /// The subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<ManifestWorkExecutorSubject>,
}

/// The executor's subject.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkExecutorSubject {
    /// Only `ServiceAccount`.
    #[serde(rename = "type")]
    pub type_: ExecutorSubjectType,
    /// The ServiceAccount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ManifestWorkSubjectServiceAccount>,
}

string_enum! {
    /// Kind of executor subject.
    ExecutorSubjectType {
        /// A ServiceAccount on the spoke.
        ServiceAccount = "ServiceAccount",
    }
    default ServiceAccount
}

/// A ServiceAccount on the spoke.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkSubjectServiceAccount {
    /// Namespace of the ServiceAccount.
    #[schemars(extend("minLength" = 1, "maxLength" = 253, "pattern" = crate::bounds::DNS1123_SUBDOMAIN))]
    pub namespace: String,
    /// Name of the ServiceAccount.
    #[schemars(extend("minLength" = 1, "maxLength" = 253, "pattern" = crate::bounds::DNS1123_SUBDOMAIN))]
    pub name: String,
}

/// Status of a ManifestWork.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkStatus {
    /// Work-level conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Per-manifest status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_status: Option<ManifestResourceStatus>,
}

/// Status of every manifest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestResourceStatus {
    /// One entry per manifest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<ManifestCondition>,
}

/// Status of one manifest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestCondition {
    /// Which manifest this is.
    pub resource_meta: ManifestResourceMeta,
    /// Values collected by the feedback rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_feedback: Option<StatusFeedbackResult>,
    /// Manifest-level conditions.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Identity of a manifest in status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestResourceMeta {
    /// Index of the manifest in `spec.workload.manifests`.
    pub ordinal: i32,
    /// API group.
    #[serde(default)]
    pub group: String,
    /// API version.
    #[serde(default)]
    pub version: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
    /// Resource (plural).
    #[serde(default)]
    pub resource: String,
    /// Object name.
    #[serde(default)]
    pub name: String,
    /// Object namespace.
    #[serde(default)]
    pub namespace: String,
}

/// Feedback values of one manifest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusFeedbackResult {
    /// Named values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub values: Vec<FeedbackValue>,
}

/// One named feedback value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackValue {
    /// Name of the value.
    pub name: String,
    /// The value.
    pub field_value: FieldValue,
}

/// A typed feedback value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldValue {
    /// Integer, String, Boolean or JsonRaw.
    #[serde(rename = "type")]
    pub type_: ValueType,
    /// Set when the type is Integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integer: Option<i64>,
    /// Set when the type is String.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    /// Set when the type is Boolean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boolean: Option<bool>,
    /// Set when the type is JsonRaw (at most 1024 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 1024))]
    pub json_raw: Option<String>,
}

string_enum! {
    /// Type of a feedback value.
    ValueType {
        /// An int64.
        Integer = "Integer",
        /// A string.
        String = "String",
        /// A bool.
        Boolean = "Boolean",
        /// Raw JSON.
        JsonRaw = "JsonRaw",
    }
    default String
}
