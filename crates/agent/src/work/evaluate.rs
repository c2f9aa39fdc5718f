//! Condition rules on the blocking pool: CEL never runs on an async runtime worker, so a heavy
//! rule cannot stall lease renewal, health probes or other works' reconciles.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use conditions::{ConditionUpdate, Evaluator, Status, reasons};
use serde_json::Value;
use work_api::ConditionRule;

use crate::metrics::{Metrics, RuleResultLabels};

/// The conditions `rules` yield on `object`, evaluated on the blocking pool (and metered).
pub async fn evaluate_rules(
    evaluator: &'static Evaluator,
    metrics: &Metrics,
    rules: Vec<ConditionRule>,
    object: Value,
) -> Vec<ConditionUpdate> {
    let started = Instant::now();
    let joined =
        tokio::task::spawn_blocking(move || evaluator.evaluate_manifest(&rules, &object)).await;
    let updates = match joined {
        Ok(updates) => updates,
        // The evaluator catches its own panics; a join error means the task was cancelled.
        Err(e) => {
            tracing::warn!(error = %e, "rule evaluation did not finish");
            return Vec::new();
        }
    };
    metrics
        .rule_evaluation_duration_seconds
        .observe(started.elapsed().as_secs_f64());
    for u in &updates {
        metrics
            .rule_evaluations_total
            .get_or_create(&RuleResultLabels {
                result: rule_result_label(u),
            })
            .inc();
    }
    updates
}

fn rule_result_label(u: &ConditionUpdate) -> &'static str {
    match u.status {
        Status::True => "true",
        Status::False if u.reason == reasons::CONDITION_RULE_EXPRESSION_ERROR => "error",
        Status::False => "false",
        Status::Unknown => "unknown",
    }
}

/// The rules of a manifest that decide its `Complete` condition.
pub fn complete_rules(rules: &[ConditionRule]) -> Vec<ConditionRule> {
    applier::manifests::complete_rules(rules).cloned().collect()
}

/// The applier's pre-update check: the manifest's `Complete` rules on the live object, on the
/// blocking pool.
pub struct CompleteRules {
    evaluator: &'static Evaluator,
    rules: Vec<ConditionRule>,
}

impl CompleteRules {
    /// The check for these rules; None when none of them decides `Complete`.
    pub fn of(evaluator: &'static Evaluator, rules: &[ConditionRule]) -> Option<Self> {
        let rules = complete_rules(rules);
        (!rules.is_empty()).then_some(Self { evaluator, rules })
    }
}

impl applier::CompleteCheck for CompleteRules {
    fn is_complete<'a>(
        &'a self,
        live: &'a Value,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        let evaluator = self.evaluator;
        let rules = self.rules.clone();
        let live = live.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || evaluator.is_complete(&rules, &live))
                .await
                .ok()
                .flatten()
                == Some(true)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use applier::CompleteCheck;
    use serde_json::json;
    use work_api::ConditionRuleType;

    #[test]
    fn complete_rules_include_unnamed_well_known_rules() {
        let rules = vec![
            ConditionRule {
                type_: ConditionRuleType::WellKnownConditions,
                ..Default::default()
            },
            ConditionRule {
                condition: "Ready".into(),
                type_: ConditionRuleType::Cel,
                ..Default::default()
            },
        ];
        assert_eq!(complete_rules(&rules).len(), 1);
        assert!(CompleteRules::of(Evaluator::shared(), &rules[1..]).is_none());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn rules_run_off_the_runtime_and_give_their_conditions() {
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "status": {"conditions": [{"type": "Complete", "status": "True"}]}});
        let rules = vec![ConditionRule {
            type_: ConditionRuleType::WellKnownConditions,
            ..Default::default()
        }];
        let metrics = Metrics::new();
        let out = evaluate_rules(Evaluator::shared(), &metrics, rules.clone(), job.clone()).await;
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].status, Status::True);
        let check = CompleteRules::of(Evaluator::shared(), &rules).expect("a Complete rule");
        assert!(check.is_complete(&job).await);
        assert!(
            !check
                .is_complete(&json!({"apiVersion": "batch/v1", "kind": "Job"}))
                .await
        );
    }
}
