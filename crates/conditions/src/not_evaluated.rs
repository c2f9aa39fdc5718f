//! The rule conditions of a manifest whose object cannot be evaluated (never applied, not
//! readable): each rule that would yield a condition yields Unknown
//! [`reasons::CONDITION_RULE_NOT_EVALUATED`], so a manifest with a rule for X always carries X and
//! work-level aggregation cannot turn True while such a manifest is blocked.

use serde_json::json;
use work_api::{ConditionRule, ConditionRuleType, condition_types};

use crate::condition::{ConditionUpdate, Status, cap_message, reasons};
use crate::evaluator::Evaluator;
use crate::well_known;

/// One condition per rule of the manifest (`api_version`, `kind`) that would yield one on a live
/// object: Unknown / `ConditionRuleNotEvaluated` with `why` as the message. Invalid rules keep
/// their `ConditionRuleInvalid` condition, and well-known rules for kinds they do not know still
/// yield nothing.
pub fn not_evaluated_conditions(
    evaluator: &Evaluator,
    rules: &[ConditionRule],
    api_version: &str,
    kind: &str,
    why: &str,
) -> Vec<ConditionUpdate> {
    // Only apiVersion and kind: enough for the well-known kind check and for a rule that is
    // invalid whatever the object, never enough to pass a rule.
    let identity = json!({ "apiVersion": api_version, "kind": kind });
    rules
        .iter()
        .filter_map(|rule| {
            let condition = rule.condition_type();
            if condition.is_empty() {
                return None;
            }
            let invalid = condition_types::AGENT_OWNED.contains(&condition)
                || matches!(rule.type_, ConditionRuleType::Unknown(_));
            if invalid {
                return evaluator
                    .evaluate_manifest(std::slice::from_ref(rule), &identity)
                    .into_iter()
                    .next();
            }
            if rule.type_ == ConditionRuleType::WellKnownConditions
                && well_known::evaluate(condition, &identity).is_none()
            {
                return None;
            }
            Some(ConditionUpdate::new(
                condition,
                Status::Unknown,
                reasons::CONDITION_RULE_NOT_EVALUATED,
                cap_message(why.to_string()),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(condition: &str, type_: ConditionRuleType) -> ConditionRule {
        ConditionRule {
            condition: condition.into(),
            type_,
            ..Default::default()
        }
    }

    #[test]
    fn every_rule_that_would_yield_a_condition_is_unknown_with_the_reason() {
        let rules = vec![
            rule("", ConditionRuleType::WellKnownConditions),
            rule("Healthy", ConditionRuleType::WellKnownConditions),
            rule("Ready", ConditionRuleType::Cel),
        ];
        let why = "resource was not applied: namespaces \"x\" not found";
        let out = not_evaluated_conditions(Evaluator::shared(), &rules, "batch/v1", "Job", why);
        // Healthy has no well-known rule for Job: nothing, as on a live Job.
        assert_eq!(
            out,
            vec![
                ConditionUpdate::new(
                    "Complete",
                    Status::Unknown,
                    "ConditionRuleNotEvaluated",
                    why
                ),
                ConditionUpdate::new("Ready", Status::Unknown, "ConditionRuleNotEvaluated", why),
            ]
        );
    }

    #[test]
    fn invalid_rules_stay_invalid() {
        let rules = vec![
            rule("Applied", ConditionRuleType::Cel),
            rule("X", ConditionRuleType::Unknown("Other".into())),
        ];
        let out = not_evaluated_conditions(Evaluator::shared(), &rules, "v1", "ConfigMap", "why");
        assert_eq!(out.len(), 2);
        assert!(
            out.iter()
                .all(|c| c.reason == reasons::CONDITION_RULE_INVALID),
            "{out:?}"
        );
    }
}
