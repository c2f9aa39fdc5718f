//! Keeping a ManifestWork status within what the hub stores or the broker carries. A work with
//! hundreds of manifests and dozens of rule conditions each makes a status of several MB;
//! kube-apiserver refuses to send more than 2 MiB to etcd, and a broker's packet ceiling (128 KB
//! on AWS IoT Core) is lower still. Such a status is reduced before it is written: the
//! work-level conditions and each manifest's own conditions (`Applied`, `Available`,
//! `StatusFeedbackSynced`, `Deleting`, `Complete`) stay; feedback values go first and rule-made
//! manifest conditions after them (each kept in spec order while it fits the byte budget); and
//! the work's `Applied` turns False with reason `StatusTooLarge` and a message naming how many of
//! each were left out.

use conditions::{Condition, ConditionUpdate, Status};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use work_api::{FeedbackValue, ManifestWorkStatus, condition_types};

/// Largest status, in bytes of JSON, the agent writes.
pub const STATUS_BUDGET: usize = 1 << 20;

/// Largest object kube-apiserver sends to etcd (its client's message limit).
pub const OBJECT_LIMIT: usize = 2 << 20;

/// Smallest budget tried after the API server refused a status as too large.
pub const MIN_STATUS_BUDGET: usize = 64 << 10;

/// Reason of the work's `Applied` False when rule conditions were dropped.
pub const STATUS_TOO_LARGE: &str = "StatusTooLarge";

/// Room kept for the `Applied` condition that says what was dropped.
const NOTE_ROOM: usize = 512;

/// Whether a manifest condition is one the agent writes itself (kept whatever the size). A
/// manifest's `Drifted` (up to a kilobyte of fields) goes with the rule-made conditions: the
/// work's own `Drifted` still says how many manifests differ.
fn always_kept(type_: &str) -> bool {
    type_ == condition_types::COMPLETE
        || (condition_types::AGENT_OWNED.contains(&type_) && type_ != condition_types::DRIFTED)
}

fn json_len<T: serde::Serialize>(value: &T) -> usize {
    serde_json::to_vec(value)
        .map(|v| v.len())
        .unwrap_or(usize::MAX)
}

/// `status` if its JSON fits `budget` bytes, else the reduced status (see the module). `old` is
/// the status on the hub: the `Applied` condition keeps its `lastTransitionTime` from there when
/// it already said the same, so an unchanged reduced status is not written again.
pub fn fit_status(
    status: ManifestWorkStatus,
    old: Option<&ManifestWorkStatus>,
    budget: usize,
    observed_generation: Option<i64>,
    now: Time,
) -> ManifestWorkStatus {
    if json_len(&status) <= budget {
        return status;
    }
    let mut reduced = status;
    let mut rule_made: Vec<Vec<Condition>> = Vec::new();
    let mut feedback: Vec<Vec<FeedbackValue>> = Vec::new();
    let mut total = 0usize;
    let mut total_values = 0usize;
    if let Some(resources) = reduced.resource_status.as_mut() {
        for manifest in &mut resources.manifests {
            let (kept, dropped): (Vec<Condition>, Vec<Condition>) =
                std::mem::take(&mut manifest.conditions)
                    .into_iter()
                    .partition(|c| always_kept(&c.type_));
            manifest.conditions = kept;
            total += dropped.len();
            rule_made.push(dropped);
            let values = manifest
                .status_feedback
                .as_mut()
                .map(|f| std::mem::take(&mut f.values))
                .unwrap_or_default();
            total_values += values.len();
            feedback.push(values);
        }
    }
    // Refill in spec order while they fit: the rule-made conditions first, then the feedback
    // values (a dashboard reads them again at the next sync; a condition may gate a rollout).
    let mut room = budget.saturating_sub(json_len(&reduced) + NOTE_ROOM);
    let mut dropped = 0usize;
    let mut dropped_values = 0usize;
    if let Some(resources) = reduced.resource_status.as_mut() {
        for (manifest, conditions) in resources.manifests.iter_mut().zip(rule_made) {
            for condition in conditions {
                let size = json_len(&condition) + 1;
                if dropped == 0 && size <= room {
                    room -= size;
                    manifest.conditions.push(condition);
                } else {
                    dropped += 1;
                }
            }
        }
        for (manifest, values) in resources.manifests.iter_mut().zip(feedback) {
            for value in values {
                let size = json_len(&value) + 1;
                match manifest.status_feedback.as_mut() {
                    Some(kept) if dropped == 0 && dropped_values == 0 && size <= room => {
                        room -= size;
                        kept.values.push(value);
                    }
                    _ => dropped_values += 1,
                }
            }
        }
    }
    let note = ConditionUpdate {
        type_: condition_types::APPLIED.to_string(),
        status: Status::False,
        reason: STATUS_TOO_LARGE.to_string(),
        message: format!(
            "the status is over the {} KiB the agent writes for this work: {dropped_values} of {total_values} feedback values and {dropped} of {total} rule-made manifest conditions were left out (each manifest keeps Applied, Available and Complete)",
            budget / 1024
        ),
    };
    // Against the hub's Applied, so the transition time moves only when Applied changes.
    let mut base: Vec<Condition> = reduced
        .conditions
        .iter()
        .filter(|c| c.type_ != condition_types::APPLIED)
        .cloned()
        .collect();
    if let Some(previous) = old.and_then(|o| {
        o.conditions
            .iter()
            .find(|c| c.type_ == condition_types::APPLIED)
    }) {
        base.push(previous.clone());
    }
    reduced.conditions = conditions::merge_conditions(&base, &[note], observed_generation, now);
    reduced
}

/// The status budget for `work`: [`STATUS_BUDGET`], or less when the rest of the object leaves
/// less room under [`OBJECT_LIMIT`]. Half of that room goes to the status, the other half is left
/// for what the API server adds (the status writer's `managedFields` entry lists every field the
/// status sets). Never below [`MIN_STATUS_BUDGET`].
pub fn budget_for(work: &work_api::ManifestWork) -> usize {
    let mut rest = work.clone();
    rest.status = None;
    let room = OBJECT_LIMIT.saturating_sub(json_len(&rest)) / 2;
    room.clamp(MIN_STATUS_BUDGET, STATUS_BUDGET)
}

/// Whether the API server refused a write because the object is too large.
pub fn is_too_large(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(s) => {
            s.code == 413
                || (s.code == 500
                    && (s.message.contains("request is too large")
                        || s.message.contains("larger than max")))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    fn now(s: &str) -> Time {
        Time(s.parse::<Timestamp>().expect("timestamp"))
    }

    fn condition(type_: &str, message_len: usize) -> serde_json::Value {
        json!({"type": type_, "status": "True", "reason": "R", "message": "m".repeat(message_len),
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    /// `manifests` manifests with Applied, Available, Complete and `rules` rule conditions each.
    fn big_status(manifests: usize, rules: usize) -> ManifestWorkStatus {
        let entries: Vec<serde_json::Value> = (0..manifests)
            .map(|i| {
                let mut conditions = vec![
                    condition("Applied", 10),
                    condition("Available", 10),
                    condition("Complete", 10),
                ];
                conditions.extend((0..rules).map(|r| condition(&format!("Rule{r}"), 200)));
                json!({
                    "resourceMeta": {"ordinal": i, "group": "", "version": "v1", "kind": "ConfigMap",
                                     "resource": "configmaps", "name": format!("cm-{i}"), "namespace": "ns"},
                    "conditions": conditions,
                })
            })
            .collect();
        serde_json::from_value(json!({
            "conditions": [condition("Applied", 10), condition("Available", 10), condition("Complete", 10)],
            "resourceStatus": {"manifests": entries},
        }))
        .expect("valid status")
    }

    fn applied(status: &ManifestWorkStatus) -> &Condition {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == "Applied")
            .expect("Applied")
    }

    #[test]
    fn a_status_within_the_budget_is_unchanged() {
        let status = big_status(3, 2);
        let fitted = fit_status(
            status.clone(),
            None,
            STATUS_BUDGET,
            Some(1),
            now("2026-01-02T00:00:00Z"),
        );
        assert_eq!(fitted, status);
    }

    #[test]
    fn an_oversized_status_keeps_the_agents_conditions_and_says_what_was_dropped() {
        let status = big_status(256, 64);
        assert!(
            json_len(&status) > 4 * STATUS_BUDGET,
            "{}",
            json_len(&status)
        );
        let fitted = fit_status(
            status,
            None,
            STATUS_BUDGET,
            Some(1),
            now("2026-01-02T00:00:00Z"),
        );
        assert!(json_len(&fitted) <= STATUS_BUDGET, "{}", json_len(&fitted));
        let manifests = &fitted
            .resource_status
            .as_ref()
            .expect("manifests")
            .manifests;
        assert_eq!(manifests.len(), 256);
        for m in manifests {
            for t in ["Applied", "Available", "Complete"] {
                assert!(m.conditions.iter().any(|c| c.type_ == t), "{t} kept");
            }
        }
        let kept: usize = manifests.iter().map(|m| m.conditions.len() - 3).sum();
        assert!(kept > 0, "rule conditions that fit are kept");
        let note = applied(&fitted);
        assert_eq!(note.status, "False");
        assert_eq!(note.reason, STATUS_TOO_LARGE);
        let dropped = 256 * 64 - kept;
        assert!(
            note.message
                .contains(&format!("{dropped} of 16384 rule-made")),
            "{}",
            note.message
        );
        assert!(
            fitted.conditions.iter().any(|c| c.type_ == "Complete"),
            "work conditions kept"
        );
        // Kept in spec order: a manifest keeps rule conditions only if every earlier one did.
        let counts: Vec<usize> = manifests.iter().map(|m| m.conditions.len()).collect();
        assert!(counts.windows(2).all(|w| w[0] >= w[1]), "{counts:?}");
    }

    #[test]
    fn a_manifests_drift_report_goes_with_the_rule_conditions() {
        let mut status = big_status(200, 0);
        let long = "x".repeat(1024);
        if let Some(r) = status.resource_status.as_mut() {
            for m in &mut r.manifests {
                let mut drifted = m.conditions[0].clone();
                drifted.type_ = "Drifted".into();
                drifted.message = long.clone();
                m.conditions.push(drifted);
            }
        }
        let budget = 160 << 10;
        assert!(
            json_len(&status) > budget + (40 << 10),
            "{}",
            json_len(&status)
        );
        let fitted = fit_status(status, None, budget, Some(1), now("2026-01-02T00:00:00Z"));
        assert!(json_len(&fitted) <= budget, "{}", json_len(&fitted));
        let manifests = &fitted.resource_status.as_ref().expect("set").manifests;
        assert!(
            manifests
                .iter()
                .all(|m| m.conditions.iter().any(|c| c.type_ == "Applied"))
        );
        assert!(
            manifests
                .iter()
                .any(|m| m.conditions.iter().all(|c| c.type_ != "Drifted"))
        );
    }

    #[test]
    fn feedback_values_go_before_rule_conditions() {
        let mut status = big_status(4, 2);
        if let Some(resources) = status.resource_status.as_mut() {
            for m in &mut resources.manifests {
                m.status_feedback = Some(
                    serde_json::from_value(json!({"values": (0..20).map(|v| json!({
                        "name": format!("value{v}"),
                        "fieldValue": {"type": "String", "string": "v".repeat(100)},
                    })).collect::<Vec<_>>()}))
                    .expect("feedback"),
                );
            }
        }
        let full = json_len(&status);
        let without_values = {
            let mut s = status.clone();
            if let Some(r) = s.resource_status.as_mut() {
                for m in &mut r.manifests {
                    m.status_feedback = Some(Default::default());
                }
            }
            json_len(&s)
        };
        // Room for every condition and the note, and for some of the values only.
        let budget = without_values + NOTE_ROOM + (full - without_values) / 2;
        let fitted = fit_status(status, None, budget, Some(1), now("2026-01-02T00:00:00Z"));
        assert!(
            json_len(&fitted) <= budget,
            "{} > {budget}",
            json_len(&fitted)
        );
        let manifests = &fitted
            .resource_status
            .as_ref()
            .expect("manifests")
            .manifests;
        assert!(
            manifests.iter().all(|m| m.conditions.len() == 5),
            "every rule condition kept"
        );
        let values: Vec<usize> = manifests
            .iter()
            .map(|m| m.status_feedback.as_ref().map_or(0, |f| f.values.len()))
            .collect();
        let kept: usize = values.iter().sum();
        assert!(
            kept > 0 && kept < 80,
            "some values kept, in spec order: {values:?}"
        );
        assert!(values.windows(2).all(|w| w[0] >= w[1]), "{values:?}");
        let note = applied(&fitted);
        assert_eq!(note.reason, STATUS_TOO_LARGE);
        assert!(
            note.message.contains(&format!(
                "{} of 80 feedback values and 0 of 8 rule-made",
                80 - kept
            )),
            "{}",
            note.message
        );
    }

    #[test]
    fn the_same_reduction_again_keeps_its_transition_time() {
        let first = fit_status(
            big_status(256, 64),
            None,
            STATUS_BUDGET,
            Some(1),
            now("2026-01-02T00:00:00Z"),
        );
        let again = fit_status(
            big_status(256, 64),
            Some(&first),
            STATUS_BUDGET,
            Some(1),
            now("2026-01-03T00:00:00Z"),
        );
        assert_eq!(again, first, "nothing to write");
    }

    #[test]
    fn a_big_spec_leaves_less_room_for_the_status() {
        let work = |pad: usize| -> work_api::ManifestWork {
            serde_json::from_value(json!({
                "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                "metadata": {"name": "w", "namespace": "c"},
                "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "a"}, "data": {"pad": "x".repeat(pad)}}]}},
            }))
            .expect("valid work")
        };
        let small = budget_for(&work(10));
        assert!(
            small <= STATUS_BUDGET && small > STATUS_BUDGET - 1024,
            "{small}"
        );
        let big = budget_for(&work(1_700_000));
        assert!(big < 250_000 && big > MIN_STATUS_BUDGET, "{big}");
        assert_eq!(budget_for(&work(3_000_000)), MIN_STATUS_BUDGET);
    }

    #[test]
    fn refusals_for_size_are_recognised() {
        let error = |code: u16, message: &str| {
            let mut s = kube::core::Status::failure(message, "");
            s.code = code;
            kube::Error::Api(Box::new(s))
        };
        assert!(is_too_large(&error(413, "")));
        assert!(is_too_large(&error(
            500,
            "rpc error: code = ResourceExhausted desc = trying to send message larger than max"
        )));
        assert!(is_too_large(&error(
            500,
            "etcdserver: request is too large"
        )));
        assert!(!is_too_large(&error(500, "internal error")));
        assert!(!is_too_large(&error(409, "conflict")));
    }
}
