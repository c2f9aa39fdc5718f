//! Writing condition updates into existing conditions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::condition::{Condition, ConditionUpdate};

/// Merges `updates` into `existing`: an updated condition keeps its `lastTransitionTime`
/// unless its status changed, every updated condition gets `observed_generation`, new ones are
/// appended in update order, and conditions not in `updates` are kept as they are.
pub fn merge_conditions(
    existing: &[Condition],
    updates: &[ConditionUpdate],
    observed_generation: Option<i64>,
    now: Time,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = existing.to_vec();
    for update in updates {
        let status = update.status.as_str();
        match out.iter_mut().find(|c| c.type_ == update.type_) {
            Some(current) => {
                if current.status != status {
                    current.status = status.to_string();
                    current.last_transition_time = now.clone();
                }
                current.reason.clone_from(&update.reason);
                current.message.clone_from(&update.message);
                current.observed_generation = observed_generation;
            }
            None => out.push(Condition {
                type_: update.type_.clone(),
                status: status.to_string(),
                reason: update.reason.clone(),
                message: update.message.clone(),
                observed_generation,
                last_transition_time: now.clone(),
            }),
        }
    }
    out
}

/// Like [`merge_conditions`], but drops existing conditions whose type is not in `updates`.
pub fn replace_conditions(
    existing: &[Condition],
    updates: &[ConditionUpdate],
    observed_generation: Option<i64>,
    now: Time,
) -> Vec<Condition> {
    let mut out = merge_conditions(existing, updates, observed_generation, now);
    out.retain(|c| updates.iter().any(|u| u.type_ == c.type_));
    out
}

/// Work-level merge: [`merge_conditions`], then drops only the conditions the agent made and no
/// longer makes (`agent_owned` types and rule aggregates absent from `updates`). Conditions
/// others wrote on the work (a hub controller's, a user's) are kept as they are.
pub fn merge_work_conditions(
    existing: &[Condition],
    updates: &[ConditionUpdate],
    agent_owned: &[&str],
    observed_generation: Option<i64>,
    now: Time,
) -> Vec<Condition> {
    let mut out = merge_conditions(existing, updates, observed_generation, now);
    out.retain(|c| {
        let ours = agent_owned.contains(&c.type_.as_str())
            || c.reason == crate::condition::reasons::CONDITION_RULES_AGGREGATED;
        !ours || updates.iter().any(|u| u.type_ == c.type_)
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::condition::Status;

    fn time(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap_or_default())
    }

    fn existing() -> Vec<Condition> {
        vec![
            Condition {
                type_: "Applied".into(),
                status: "True".into(),
                reason: "AppliedManifestComplete".into(),
                message: "Apply manifest complete".into(),
                observed_generation: Some(1),
                last_transition_time: time(100),
            },
            Condition {
                type_: "Complete".into(),
                status: "False".into(),
                reason: "ConditionRuleEvaluated".into(),
                message: "Job is not finished".into(),
                observed_generation: Some(1),
                last_transition_time: time(100),
            },
        ]
    }

    #[test]
    fn same_status_keeps_transition_time_but_updates_the_rest() {
        let update =
            ConditionUpdate::new("Applied", Status::True, "AppliedManifestComplete", "again");
        let out = merge_conditions(&existing(), &[update], Some(2), time(200));
        assert_eq!(out[0].last_transition_time, time(100));
        assert_eq!(out[0].message, "again");
        assert_eq!(out[0].observed_generation, Some(2));
        // untouched conditions keep their generation
        assert_eq!(out[1].observed_generation, Some(1));
    }

    #[test]
    fn status_change_moves_transition_time() {
        let update = ConditionUpdate::new(
            "Complete",
            Status::True,
            "ConditionRuleEvaluated",
            "Job is finished",
        );
        let out = merge_conditions(&existing(), &[update], Some(2), time(200));
        assert_eq!(out[1].status, "True");
        assert_eq!(out[1].last_transition_time, time(200));
    }

    #[test]
    fn new_conditions_are_appended_and_others_kept() {
        let update = ConditionUpdate::new("Healthy", Status::False, "ConditionRuleEvaluated", "x");
        let out = merge_conditions(&existing(), std::slice::from_ref(&update), None, time(300));
        assert_eq!(out.len(), 3);
        assert_eq!(out[2].type_, "Healthy");
        assert_eq!(out[2].last_transition_time, time(300));
        let out = replace_conditions(&existing(), &[update], None, time(300));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].type_, "Healthy");
    }

    #[test]
    fn work_merge_keeps_foreign_conditions_and_drops_stale_aggregates() {
        let mut existing = existing();
        existing[1].reason = crate::condition::reasons::CONDITION_RULES_AGGREGATED.into();
        existing.push(Condition {
            type_: "Placed".into(),
            status: "True".into(),
            reason: "HubSaid".into(),
            message: "".into(),
            observed_generation: None,
            last_transition_time: time(50),
        });
        let update =
            ConditionUpdate::new("Applied", Status::True, "AppliedManifestWorkComplete", "x");
        let out = merge_work_conditions(&existing, &[update], &["Applied"], Some(3), time(400));
        let types: Vec<&str> = out.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Applied", "Placed"]);
        assert_eq!(out[1].last_transition_time, time(50));
    }
}
