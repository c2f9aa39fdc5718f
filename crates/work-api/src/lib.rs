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
mod bounds;
mod crd;
mod json_schema;
mod manifestwork;
mod names;
mod rule;
mod string_enum;

pub use applied::*;
pub use bounds::{
    MAX_CEL_EXPRESSIONS, MAX_CONDITION_RULES, MAX_CONDITION_TYPE_LEN, MAX_MANIFEST_CONFIGS,
    RULE_CEL_NEEDS_CONDITION, RULE_UNIQUE_CONDITIONS,
};
pub use crd::{GENERATED_HEADER, crd_file_name, crd_yaml, crds};
pub use json_schema::{
    JSON_SCHEMA_PATH, manifest_work_json_schema, manifest_work_json_schema_text,
};
pub use manifestwork::*;
pub use rule::*;

pub use names::{
    APPLIED_MANIFEST_WORK_FINALIZER, GROUP, MANIFEST_WORK_FINALIZER, VERSION, condition_types,
};
