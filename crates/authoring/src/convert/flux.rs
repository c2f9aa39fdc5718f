//! Flux `healthCheckExprs` (RFC-0009) to one CEL rule per kind.
//!
//! Flux evaluates, for an object whose status is not stale, `inProgress`, then `failed`, then
//! `current` (each optional but `current`), with the object's top-level fields as variables;
//! the first that is true decides (InProgress, Failed, Current), and none true means
//! InProgress. The converted rule is one expression of nested conditionals in that order,
//! rewritten to the `object` variable, returning a map with `status`, `reason` and `message`.
//! The stale-status check is the agent's own guard: on a status whose
//! `status.observedGeneration` differs from `metadata.generation`, a Current verdict is Unknown
//! / `ConditionRuleStaleStatus` (Flux says InProgress); a Failed or InProgress verdict stands
//! (Flux says InProgress for both), so a failure reported on a stale status is seen.

use serde::Deserialize;
use work_api::{CelExpression, ConditionRule, ConditionRuleType, ManifestConfigOption};

use super::cel_rewrite::{RewriteError, rewrite_free_variables};
use super::{cel_string, manifest_config};

/// One `healthCheckExprs` entry.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckExpr {
    /// The custom resource's apiVersion.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Expression for "reached the desired state".
    pub current: String,
    /// Expression for "not there yet".
    #[serde(default)]
    pub in_progress: Option<String>,
    /// Expression for "failed to get there".
    #[serde(default)]
    pub failed: Option<String>,
}

/// Reason of the converted rule when `inProgress` is true or nothing matched.
pub const REASON_IN_PROGRESS: &str = "InProgress";
/// Reason when `failed` is true.
pub const REASON_FAILED: &str = "Failed";
/// Reason when `current` is true.
pub const REASON_CURRENT: &str = "Current";

/// Why an entry could not be converted.
#[derive(Debug, thiserror::Error)]
#[error("healthCheckExprs[{index}] ({kind}) {field}: {source}")]
pub struct FluxError {
    /// The entry's position.
    pub index: usize,
    /// Its kind.
    pub kind: String,
    /// Which expression.
    pub field: &'static str,
    /// What failed.
    pub source: RewriteError,
}

/// The `healthCheckExprs` entries of a document: a Kustomization, `{healthCheckExprs: [...]}`
/// or a bare list.
pub fn entries(doc: &serde_json::Value) -> Result<Vec<HealthCheckExpr>, String> {
    let list = doc
        .pointer("/spec/healthCheckExprs")
        .or_else(|| doc.get("healthCheckExprs"))
        .unwrap_or(doc);
    serde_json::from_value(list.clone())
        .map_err(|e| format!("not a list of healthCheckExprs entries: {e}"))
}

/// The rule for one entry, setting `condition`.
pub fn convert_entry(
    index: usize,
    entry: &HealthCheckExpr,
    condition: &str,
) -> Result<ConditionRule, FluxError> {
    let rewrite = |field: &'static str, source: &str| {
        rewrite_free_variables(source, "object").map_err(|source| FluxError {
            index,
            kind: entry.kind.clone(),
            field,
            source,
        })
    };
    let kind = &entry.kind;
    let verdict = |status: &str, reason: &str, message: String| {
        format!(
            "{{'status': '{status}', 'reason': '{reason}', 'message': {}}}",
            cel_string(&message)
        )
    };
    // Built from the last branch outwards: current, then failed, then inProgress in front.
    let mut expression = verdict(
        "False",
        REASON_IN_PROGRESS,
        format!("{kind}: no health expression is true yet"),
    );
    expression = format!(
        "({})\n  ? {}\n  : {expression}",
        rewrite("current", &entry.current)?,
        verdict("True", REASON_CURRENT, format!("{kind} is current"))
    );
    if let Some(failed) = entry.failed.as_deref().filter(|s| !s.trim().is_empty()) {
        expression = format!(
            "({})\n  ? {}\n  : {expression}",
            rewrite("failed", failed)?,
            verdict("False", REASON_FAILED, format!("{kind} has failed"))
        );
    }
    if let Some(in_progress) = entry
        .in_progress
        .as_deref()
        .filter(|s| !s.trim().is_empty())
    {
        expression = format!(
            "({})\n  ? {}\n  : {expression}",
            rewrite("inProgress", in_progress)?,
            verdict(
                "False",
                REASON_IN_PROGRESS,
                format!("{kind} is in progress")
            )
        );
    }
    Ok(ConditionRule {
        condition: condition.to_string(),
        type_: ConditionRuleType::Cel,
        cel_expressions: vec![CelExpression::new(expression)],
        ..Default::default()
    })
}

/// One `manifestConfigs` entry per `healthCheckExprs` entry.
pub fn convert(
    entries: &[HealthCheckExpr],
    condition: &str,
) -> Result<Vec<ManifestConfigOption>, FluxError> {
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            Ok(manifest_config(
                &e.api_version,
                &e.kind,
                vec![convert_entry(i, e, condition)?],
            ))
        })
        .collect()
}
