//! The ManifestWork API (`work.open-cluster-management.io/v1`) as Rust types.
//!
//! Decoding is lenient where hubs in the field differ, so that one odd object never fails a
//! whole list or watch:
//! - the enhancement's `WellKnownCompletions` spelling ([`ConditionRuleType::WellKnownConditions`]);
//!   an unnamed well-known rule sets `Complete` ([`ConditionRule::condition_type`]);
//! - `celExpressions` items as strings or `{expression: ...}`; any other item decodes to an
//!   expression that never compiles and says why ([`CelExpression::is_invalid_item`]);
//! - unknown fields are ignored; unknown enum values decode to `Unknown(..)` and are written back
//!   as they came;
//! - a missing or null `spec` decodes as an empty spec (the upstream CRD allows it).
//!
//! [`crds`] gives the CustomResourceDefinitions shipped in `deploy/crds/` (`make crds`): the
//! schema generated from these types, plus the admission rules of semantics §1
//! ([`RULE_CEL_NEEDS_CONDITION`], [`RULE_UNIQUE_CONDITIONS`], TTL >= 0, fieldManager pattern) and
//! the list bounds that keep their CEL cost under the API server's budget
//! ([`MAX_MANIFEST_CONFIGS`], [`MAX_CONDITION_RULES`], [`MAX_CONDITION_TYPE_LEN`]), plus
//! [`MAX_CEL_EXPRESSIONS`], which bounds what one rule asks of the agent. They accept
//! everything the upstream OCM CRDs accept except beyond those bounds.

mod applied;
mod crd;
mod json_schema;
mod manifestwork;
mod rule;
mod string_enum;

pub use applied::*;
pub use crd::{
    GENERATED_HEADER, MAX_CEL_EXPRESSIONS, MAX_CONDITION_RULES, MAX_CONDITION_TYPE_LEN,
    MAX_MANIFEST_CONFIGS, RULE_CEL_NEEDS_CONDITION, RULE_UNIQUE_CONDITIONS, crd_file_name,
    crd_yaml, crds,
};
pub use json_schema::{
    JSON_SCHEMA_PATH, manifest_work_json_schema, manifest_work_json_schema_text,
};
pub use manifestwork::*;
pub use rule::*;

/// API group of both kinds.
pub const GROUP: &str = "work.open-cluster-management.io";
/// API version of both kinds.
pub const VERSION: &str = "v1";
/// Finalizer the agent puts on each ManifestWork it serves.
pub const MANIFEST_WORK_FINALIZER: &str =
    "cluster.open-cluster-management.io/manifest-work-cleanup";
/// Finalizer the agent puts on each AppliedManifestWork.
pub const APPLIED_MANIFEST_WORK_FINALIZER: &str =
    "cluster.open-cluster-management.io/applied-manifest-work-cleanup";

/// Condition types the agent owns; a condition rule must not use these names.
pub mod condition_types {
    /// Resources applied.
    pub const APPLIED: &str = "Applied";
    /// Resources exist on the spoke.
    pub const AVAILABLE: &str = "Available";
    /// Status feedback collected.
    pub const STATUS_FEEDBACK_SYNCED: &str = "StatusFeedbackSynced";
    /// The work is being deleted.
    pub const DELETING: &str = "Deleting";
    /// The well-known completion condition.
    pub const COMPLETE: &str = "Complete";
    /// The well-known health condition (beyond upstream).
    pub const HEALTHY: &str = "Healthy";
    /// Condition aggregated with "any True wins".
    pub const PROGRESSING: &str = "Progressing";

    /// Condition types written by the agent itself, never by a rule.
    pub const AGENT_OWNED: &[&str] = &[APPLIED, AVAILABLE, STATUS_FEEDBACK_SYNCED, DELETING];
}
