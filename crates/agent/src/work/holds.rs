//! Pure: a manifest's rule conditions under the holds its work declares
//! (`work_semantics::holds`): a verdict that has not held long enough is reported as the status
//! the condition had, with reason `ConditionRuleHeld` and a message saying what is pending since
//! when; the reconcile comes back when the earliest hold is over (a timer that only looks again:
//! the decision is made from the times).

use applier::holds::{self, Decision, Hold, Reported};
use conditions::{Condition, ConditionUpdate, Status};
use k8s_openapi::jiff::Timestamp;

/// The reason of a rule condition whose holds cannot be read: it is Unknown rather than reported
/// early.
pub const HOLD_INVALID: &str = "ConditionRuleHoldInvalid";

/// Lays `holds` (the manifest's, or why they cannot be read) over the rule conditions in
/// `updates`, given the manifest's conditions as last reported (`previous`); the time the
/// earliest pending hold is over, if any.
pub fn apply(
    updates: &mut [ConditionUpdate],
    holds: &Result<Vec<Hold>, String>,
    previous: &[Condition],
    now: Timestamp,
) -> Option<Timestamp> {
    let rule_made = |u: &ConditionUpdate| u.reason.starts_with("ConditionRule");
    let holds = match holds {
        Ok(holds) if holds.is_empty() => return None,
        Ok(holds) => holds,
        Err(why) => {
            for u in updates.iter_mut().filter(|u| rule_made(u)) {
                u.status = Status::Unknown;
                u.reason = HOLD_INVALID.to_string();
                u.message = why.clone();
            }
            return None;
        }
    };
    let mut due: Option<Timestamp> = None;
    for u in updates.iter_mut().filter(|u| rule_made(u)) {
        let before = previous
            .iter()
            .find(|c| c.type_ == u.type_)
            .map(|c| Reported {
                status: &c.status,
                reason: &c.reason,
                message: &c.message,
            });
        for hold in holds.iter().filter(|h| h.condition == u.type_) {
            if let Decision::Held {
                status,
                message,
                due: over,
                ..
            } = holds::decide(hold, u.status.as_str(), &u.message, before, now)
            {
                u.status = Status::parse(&status).unwrap_or(Status::Unknown);
                u.reason = holds::HELD_REASON.to_string();
                u.message = message;
                due = Some(due.map_or(over, |d| d.min(over)));
                break;
            }
        }
    }
    due
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::work::test_conditions::{at, written};
    use std::time::Duration;

    fn verdict(status: Status) -> Vec<ConditionUpdate> {
        vec![
            conditions::applied_condition(Ok(())),
            ConditionUpdate::new("Degraded", status, "ConditionRuleEvaluated", "0 of 1 ready"),
        ]
    }

    fn degraded_for(secs: u64) -> Result<Vec<Hold>, String> {
        Ok(vec![Hold {
            condition: "Degraded".into(),
            status: "True".into(),
            duration: Duration::from_secs(secs),
        }])
    }

    #[test]
    fn a_failing_verdict_is_held_then_reported_and_the_agent_conditions_never() {
        let mut first = verdict(Status::False);
        assert_eq!(apply(&mut first, &degraded_for(30), &[], at(0)), None);
        let previous: Vec<Condition> = first.iter().map(written).collect();
        let mut failing = verdict(Status::True);
        let due = apply(&mut failing, &degraded_for(30), &previous, at(1));
        assert_eq!(due, Some(at(31)));
        assert_eq!(failing[1].status, Status::False);
        assert_eq!(failing[1].reason, "ConditionRuleHeld");
        assert_eq!(failing[0], conditions::applied_condition(Ok(())));
        let previous: Vec<Condition> = failing.iter().map(written).collect();
        let mut still = verdict(Status::True);
        assert_eq!(
            apply(&mut still, &degraded_for(30), &previous, at(20)),
            Some(at(31))
        );
        assert_eq!(still, failing, "the same held condition: nothing to write");
        let mut over = verdict(Status::True);
        assert_eq!(apply(&mut over, &degraded_for(30), &previous, at(31)), None);
        assert_eq!(over[1].status, Status::True);
        assert_eq!(over[1].reason, "ConditionRuleEvaluated");
    }

    #[test]
    fn unreadable_holds_make_the_rule_conditions_unknown() {
        let mut updates = verdict(Status::True);
        apply(&mut updates, &Err("bad holds".into()), &[], at(0));
        assert_eq!(updates[1].status, Status::Unknown);
        assert_eq!(updates[1].reason, HOLD_INVALID);
        assert_eq!(updates[0].status, Status::True);
    }
}
