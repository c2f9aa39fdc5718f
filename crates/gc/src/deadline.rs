//! Pure deadline arithmetic: when a completed work becomes due for deletion.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use work_api::{ManifestWork, condition_types};

/// What the garbage collector should do with a work right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcAction {
    /// No TTL, or the work is not Complete: never collect (until that changes).
    NotEligible,
    /// Requeue after exactly this long; the deadline has not been reached.
    WaitFor(Duration),
    /// The deadline has passed (or is now); `lag` is how far past it we are.
    DeleteNow {
        /// Time since the deadline, for the deletion lag histogram.
        lag: Duration,
    },
}

/// The work's `ttlSecondsAfterFinished`, with a negative value read as 0.
///
/// Our CRD forbids negative values, but a hub with the upstream CRD accepts them; deleting at once
/// is the closest meaning ("no time to keep it").
pub fn ttl_seconds(work: &ManifestWork) -> Option<i64> {
    work.spec
        .delete_option
        .as_ref()?
        .ttl_seconds_after_finished
        .map(|ttl| ttl.max(0))
}

/// When the work became Complete: the `lastTransitionTime` of its `Complete` condition, if that
/// condition is True.
pub fn complete_since(work: &ManifestWork) -> Option<Timestamp> {
    work.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == condition_types::COMPLETE)
        .filter(|c| c.status == "True")
        .map(|c| c.last_transition_time.0)
}

/// The TTL deadline: completion time + TTL. `None` when the work has no TTL or is not Complete.
///
/// A TTL so large that the sum leaves the representable range (beyond year 9999) saturates to the
/// latest representable instant, i.e. effectively never.
pub fn deadline(work: &ManifestWork) -> Option<Timestamp> {
    let ttl = ttl_seconds(work)?;
    let since = complete_since(work)?;
    Some(add_saturating(since, ttl))
}

/// Whether the work was deleted once its TTL had run out: Complete, with a TTL, and its
/// deletionTimestamp at or after the deadline. Read from the hub state alone, so it holds after
/// an agent restart; the agent then skips the short-lived `Deleting` status write (see
/// `docs/operations.md`, "TTL garbage collection").
pub fn deleted_by_ttl(work: &ManifestWork) -> bool {
    let Some(deleted_at) = work.metadata.deletion_timestamp.as_ref() else {
        return false;
    };
    deadline(work).is_some_and(|due| deleted_at.0 >= due)
}

fn add_saturating(at: Timestamp, secs: i64) -> Timestamp {
    at.checked_add(SignedDuration::from_secs(secs))
        .unwrap_or(Timestamp::MAX)
}

/// Label the hub's ManifestWorkReplicaSet controller puts on the works it manages. Such a work is
/// never collected by TTL: the controller would re-create it at once, and again after each
/// deletion (as upstream, which skips these works for the same reason).
pub const MANIFESTWORKREPLICASET_LABEL: &str =
    "work.open-cluster-management.io/manifestworkreplicaset";

/// Decides what to do with `work` at `now`.
pub fn next_action(work: &ManifestWork, now: Timestamp) -> GcAction {
    let from_replica_set = work
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(MANIFESTWORKREPLICASET_LABEL));
    if from_replica_set {
        return GcAction::NotEligible;
    }
    match deadline(work) {
        None => GcAction::NotEligible,
        Some(due) => action_for(due, now),
    }
}

fn action_for(due: Timestamp, now: Timestamp) -> GcAction {
    let left = due.duration_since(now);
    if left.is_positive() {
        GcAction::WaitFor(to_std(left))
    } else {
        GcAction::DeleteNow {
            lag: to_std(left.checked_neg().unwrap_or(SignedDuration::MAX)),
        }
    }
}

/// Converts a non-negative signed duration; the caller guarantees the sign.
fn to_std(d: SignedDuration) -> Duration {
    Duration::try_from(d).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn work(ttl: Option<i64>, complete: Option<(&str, &str)>) -> ManifestWork {
        let mut v = json!({
            "apiVersion": "work.open-cluster-management.io/v1",
            "kind": "ManifestWork",
            "metadata": {"name": "w", "namespace": "cluster1", "uid": "u1"},
            "spec": {"workload": {"manifests": []}},
        });
        if let Some(ttl) = ttl {
            v["spec"]["deleteOption"] = json!({"ttlSecondsAfterFinished": ttl});
        }
        if let Some((status, at)) = complete {
            v["status"] = json!({"conditions": [
                {"type": "Applied", "status": "True", "reason": "AppliedManifestWorkComplete",
                 "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Complete", "status": status, "reason": "ConditionRulesAggregated",
                 "message": "", "lastTransitionTime": at},
            ]});
        }
        serde_json::from_value(v).expect("test fixture is a valid ManifestWork")
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("test timestamp")
    }

    const DONE: &str = "2026-01-01T10:00:00Z";

    fn deleted_at(mut w: ManifestWork, at: &str) -> ManifestWork {
        w.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts(at)));
        w
    }

    #[test]
    fn a_deletion_at_or_after_the_deadline_is_a_ttl_deletion() {
        let due = || work(Some(30), Some(("True", DONE)));
        assert!(deleted_by_ttl(&deleted_at(due(), "2026-01-01T10:00:30Z")));
        assert!(deleted_by_ttl(&deleted_at(due(), "2026-01-01T11:00:00Z")));
    }

    #[test]
    fn a_deletion_before_the_deadline_or_without_ttl_is_not_a_ttl_deletion() {
        let due = || work(Some(30), Some(("True", DONE)));
        assert!(!deleted_by_ttl(&deleted_at(due(), "2026-01-01T10:00:29Z")));
        assert!(!deleted_by_ttl(&due()), "not deleted at all");
        let no_ttl = work(None, Some(("True", DONE)));
        assert!(!deleted_by_ttl(&deleted_at(no_ttl, "2026-01-01T11:00:00Z")));
        let not_complete = work(Some(0), Some(("False", DONE)));
        assert!(!deleted_by_ttl(&deleted_at(
            not_complete,
            "2026-01-01T11:00:00Z"
        )));
    }

    #[test]
    fn a_work_of_a_manifestworkreplicaset_is_never_eligible() {
        let mut w = work(Some(0), Some(("True", DONE)));
        w.metadata.labels = Some(
            [(
                MANIFESTWORKREPLICASET_LABEL.to_string(),
                "default.mwrs1".to_string(),
            )]
            .into(),
        );
        assert_eq!(
            next_action(&w, ts("2030-01-01T00:00:00Z")),
            GcAction::NotEligible
        );
        w.metadata.labels = Some([("app".to_string(), "x".to_string())].into());
        assert!(matches!(
            next_action(&w, ts("2030-01-01T00:00:00Z")),
            GcAction::DeleteNow { .. }
        ));
    }

    #[test]
    fn no_ttl_is_never_eligible() {
        let w = work(None, Some(("True", DONE)));
        assert_eq!(deadline(&w), None);
        assert_eq!(next_action(&w, ts(DONE)), GcAction::NotEligible);
    }

    #[test]
    fn not_complete_is_never_eligible() {
        for cond in [None, Some(("False", DONE)), Some(("Unknown", DONE))] {
            let w = work(Some(0), cond);
            assert_eq!(
                next_action(&w, ts("2030-01-01T00:00:00Z")),
                GcAction::NotEligible
            );
        }
    }

    #[test]
    fn ttl_zero_deletes_at_once() {
        let w = work(Some(0), Some(("True", DONE)));
        assert_eq!(deadline(&w), Some(ts(DONE)));
        assert_eq!(
            next_action(&w, ts(DONE)),
            GcAction::DeleteNow {
                lag: Duration::ZERO
            }
        );
    }

    #[test]
    fn negative_ttl_is_read_as_zero() {
        let w = work(Some(-30), Some(("True", DONE)));
        assert_eq!(ttl_seconds(&w), Some(0));
        assert_eq!(deadline(&w), Some(ts(DONE)));
    }

    #[test]
    fn before_the_deadline_waits_exactly_the_time_left() {
        let w = work(Some(15), Some(("True", DONE)));
        assert_eq!(deadline(&w), Some(ts("2026-01-01T10:00:15Z")));
        assert_eq!(
            next_action(&w, ts("2026-01-01T10:00:04.250Z")),
            GcAction::WaitFor(Duration::from_millis(10_750))
        );
    }

    #[test]
    fn clock_already_past_reports_the_lag() {
        let w = work(Some(15), Some(("True", DONE)));
        assert_eq!(
            next_action(&w, ts("2026-01-01T10:01:15.5Z")),
            GcAction::DeleteNow {
                lag: Duration::from_millis(60_500)
            }
        );
    }

    #[test]
    fn clock_behind_the_completion_time_still_waits_the_full_ttl_and_more() {
        // The hub's clock stamped the transition; ours may lag behind it.
        let w = work(Some(10), Some(("True", DONE)));
        assert_eq!(
            next_action(&w, ts("2026-01-01T09:59:58Z")),
            GcAction::WaitFor(Duration::from_secs(12))
        );
    }

    #[test]
    fn far_future_ttl_saturates_instead_of_overflowing() {
        let w = work(Some(i64::MAX), Some(("True", DONE)));
        assert_eq!(deadline(&w), Some(Timestamp::MAX));
        match next_action(&w, ts(DONE)) {
            GcAction::WaitFor(d) => assert!(d > Duration::from_secs(7000 * 365 * 86_400)),
            other => panic!("expected a long wait, got {other:?}"),
        }
    }

    #[test]
    fn lag_from_the_distant_past_does_not_overflow() {
        assert_eq!(
            action_for(Timestamp::MIN, Timestamp::MAX),
            GcAction::DeleteNow {
                lag: to_std(Timestamp::MAX.duration_since(Timestamp::MIN))
            }
        );
    }
}
