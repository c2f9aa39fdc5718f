//! Pure status building: from what a reconcile found to the ManifestWork status to write.

use conditions::{Condition, ConditionUpdate, Status, reasons};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use work_api::{
    ManifestCondition, ManifestResourceMeta, ManifestResourceStatus, ManifestWorkStatus,
    StatusFeedbackResult, condition_types,
};

/// Work-level condition types the agent writes itself (besides the rule aggregates); others on
/// the work are someone else's and are kept.
const AGENT_WORK_CONDITIONS: &[&str] = &[
    condition_types::APPLIED,
    condition_types::AVAILABLE,
    condition_types::DELETING,
    condition_types::DRIFTED,
];

/// What one manifest's status should say.
#[derive(Clone, Debug, PartialEq)]
pub enum ManifestDesired {
    /// Fresh conditions, merged into the previous ones (timestamps kept when status is unchanged).
    Conditions {
        /// Identity in status.
        meta: ManifestResourceMeta,
        /// The conditions now.
        updates: Vec<ConditionUpdate>,
        /// Status feedback values, when the manifest has feedback rules.
        feedback: Option<StatusFeedbackResult>,
    },
    /// Sticky: a completed manifest's entry is kept as it is (only its ordinal follows the spec).
    Keep(ManifestCondition),
}

/// What the whole status should say.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredStatus {
    /// One per manifest, in spec order.
    pub manifests: Vec<ManifestDesired>,
    /// `Some(..)`: the work is being deleted (adds `Deleting` True / `WorkDeleting`).
    pub deleting: bool,
}

/// The status to write given the current one. `observed_generation` is the generation the
/// reconcile worked from.
pub fn build_status(
    old: Option<&ManifestWorkStatus>,
    desired: &DesiredStatus,
    observed_generation: Option<i64>,
    now: Time,
) -> ManifestWorkStatus {
    let old_manifests: &[ManifestCondition] = old
        .and_then(|s| s.resource_status.as_ref())
        .map(|r| r.manifests.as_slice())
        .unwrap_or_default();
    let manifests: Vec<ManifestCondition> = desired
        .manifests
        .iter()
        .map(|d| match d {
            ManifestDesired::Keep(entry) => entry.clone(),
            ManifestDesired::Conditions {
                meta,
                updates,
                feedback,
            } => {
                let old_entry = old_manifests
                    .iter()
                    .find(|m| same_manifest(&m.resource_meta, meta));
                let previous = old_entry
                    .map(|m| m.conditions.as_slice())
                    .unwrap_or_default();
                let mut conditions = conditions::replace_conditions(
                    previous,
                    updates,
                    observed_generation,
                    now.clone(),
                );
                restart_progressing(previous, &mut conditions, observed_generation, &now);
                if feedback.is_some()
                    && feedback_values(feedback.as_ref())
                        != feedback_values(old_entry.and_then(|m| m.status_feedback.as_ref()))
                {
                    // New values are a transition of the feedback, even when the sync's status
                    // stays True: readers tell fresh values from old ones by this time.
                    if let Some(c) = conditions
                        .iter_mut()
                        .find(|c| c.type_ == condition_types::STATUS_FEEDBACK_SYNCED)
                    {
                        c.last_transition_time = now.clone();
                    }
                }
                ManifestCondition {
                    resource_meta: meta.clone(),
                    status_feedback: feedback.clone(),
                    conditions,
                }
            }
        })
        .collect();
    let lists: Vec<&[Condition]> = manifests.iter().map(|m| m.conditions.as_slice()).collect();
    let mut work_updates = conditions::aggregate_work_conditions(&lists);
    work_updates.extend(crate::work::drift::work_condition(&lists));
    if desired.deleting {
        work_updates.push(deleting_condition());
    }
    let old_work: &[Condition] = old.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let mut work_conditions = conditions::merge_work_conditions(
        old_work,
        &work_updates,
        AGENT_WORK_CONDITIONS,
        observed_generation,
        now.clone(),
    );
    restart_progressing(old_work, &mut work_conditions, observed_generation, &now);
    ManifestWorkStatus {
        conditions: work_conditions,
        resource_status: Some(ManifestResourceStatus { manifests }),
    }
}

/// One reconcile's status, built at one instant over whichever copy of the old status is at hand.
/// Behind a broker the completion is kept on the spoke (from the status planned over the copy the
/// reconcile read) before the status is written (over the hub's latest copy): both must carry the
/// same transition times, or the TTL would count from one and the source from the other.
#[derive(Clone, Debug)]
pub struct StatusPlan {
    /// What the reconcile found.
    pub desired: DesiredStatus,
    /// The generation it worked from.
    pub observed_generation: Option<i64>,
    /// When: every transition in a status built from this plan carries this time.
    pub at: Time,
    /// Since when the work's manifests have been applied (its AppliedManifestWork's creation),
    /// when the agent has no status of it to build on: see [`StatusPlan::over`].
    pub applied_since: Option<Time>,
}

impl StatusPlan {
    /// The status to write over `old`. Over no status at all, with `applied_since` set, its
    /// conditions date from `applied_since` rather than now, but for `Complete`: a TTL counts
    /// from that, and a completion first seen now happened no earlier than the last look. Behind
    /// a broker the source keeps the status and a restarted agent starts without it: dated so,
    /// the status it reports for a work nothing happened to is the one it reported before (the
    /// source's hash matches: no news), where dated now every work would be news. For a new work
    /// the AppliedManifestWork was created a moment ago, so the times are the same.
    pub fn over(&self, old: Option<&ManifestWorkStatus>) -> ManifestWorkStatus {
        let mut status = build_status(
            old,
            &self.desired,
            self.observed_generation,
            self.at.clone(),
        );
        if let Some(since) = &self.applied_since
            && is_blank(old)
        {
            date_from(&mut status, since);
        }
        status
    }
}

/// A new generation starts `Progressing` anew: its transition time moves to `now` even when its
/// status stays, so a rollout that times its soak from it (ManifestWorkReplicaSet's
/// `minSuccessTime` counts from `Progressing` False's transition) never counts time spent on
/// the previous generation. Only a condition that was there for another generation moves.
fn restart_progressing(
    previous: &[Condition],
    conditions: &mut [Condition],
    observed_generation: Option<i64>,
    now: &Time,
) {
    let Some(before) = previous
        .iter()
        .find(|c| c.type_ == condition_types::PROGRESSING)
    else {
        return;
    };
    if observed_generation.is_none() || before.observed_generation == observed_generation {
        return;
    }
    if let Some(c) = conditions
        .iter_mut()
        .find(|c| c.type_ == condition_types::PROGRESSING)
    {
        c.last_transition_time = now.clone();
    }
}

/// Whether `status` says nothing yet: none at all, or one without conditions or manifests.
fn is_blank(status: Option<&ManifestWorkStatus>) -> bool {
    status.is_none_or(|s| !differs(None, s))
}

/// Dates the conditions of `status` but `Complete` from `since`.
fn date_from(status: &mut ManifestWorkStatus, since: &Time) {
    let manifests = status
        .resource_status
        .iter_mut()
        .flat_map(|r| r.manifests.iter_mut())
        .flat_map(|m| m.conditions.iter_mut());
    for c in status.conditions.iter_mut().chain(manifests) {
        if c.type_ != condition_types::COMPLETE {
            c.last_transition_time = since.clone();
        }
    }
}

/// The feedback values of a manifest's status (none when it has no feedback).
fn feedback_values(feedback: Option<&StatusFeedbackResult>) -> &[work_api::FeedbackValue] {
    feedback.map(|f| f.values.as_slice()).unwrap_or_default()
}

/// `Deleting` True / `WorkDeleting`.
pub fn deleting_condition() -> ConditionUpdate {
    ConditionUpdate {
        type_: condition_types::DELETING.to_string(),
        status: Status::True,
        reason: reasons::WORK_DELETING.to_string(),
        message: "Delete resources and finalizers of the ManifestWork".to_string(),
    }
}

/// Keeps the previous status on deletion and only adds `Deleting` (nothing is applied then).
pub fn with_deleting(
    old: Option<&ManifestWorkStatus>,
    observed_generation: Option<i64>,
    now: Time,
) -> ManifestWorkStatus {
    let mut status = old.cloned().unwrap_or_default();
    status.conditions = conditions::merge_conditions(
        &status.conditions,
        &[deleting_condition()],
        observed_generation,
        now,
    );
    status
}

/// Same object and ordinal: a manifest moved to another ordinal starts from its own old entry
/// only when identity matches.
fn same_manifest(a: &ManifestResourceMeta, b: &ManifestResourceMeta) -> bool {
    a.group == b.group && a.kind == b.kind && a.name == b.name && a.namespace == b.namespace
}

/// Whether a status change is worth a write.
pub fn differs(old: Option<&ManifestWorkStatus>, new: &ManifestWorkStatus) -> bool {
    match old {
        Some(old) => old != new,
        None => {
            !new.conditions.is_empty()
                || new
                    .resource_status
                    .as_ref()
                    .is_some_and(|r| !r.manifests.is_empty())
        }
    }
}

/// The state of a work for the `works` gauge.
pub fn work_state(status: Option<&ManifestWorkStatus>, deleting: bool) -> &'static str {
    if deleting {
        return "deleting";
    }
    let Some(status) = status else {
        return "applying";
    };
    let has = |t: &str, s: &str| {
        status
            .conditions
            .iter()
            .any(|c| c.type_ == t && c.status == s)
    };
    if has(condition_types::COMPLETE, "True") {
        "complete"
    } else if has(condition_types::APPLIED, "False") {
        "failed"
    } else if has(condition_types::AVAILABLE, "True") {
        "available"
    } else {
        "applying"
    }
}

/// Whether this status made the work Complete (it was not before).
pub fn became_complete(old: Option<&ManifestWorkStatus>, new: &ManifestWorkStatus) -> bool {
    let complete = |s: &ManifestWorkStatus| {
        s.conditions
            .iter()
            .any(|c| c.type_ == condition_types::COMPLETE && c.status == "True")
    };
    complete(new) && !old.is_some_and(complete)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).expect("valid timestamp"))
    }

    fn meta(ordinal: i32, name: &str) -> ManifestResourceMeta {
        ManifestResourceMeta {
            ordinal,
            group: "".into(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            resource: "configmaps".into(),
            name: name.into(),
            namespace: "ns".into(),
        }
    }

    fn update(t: &str, s: Status, reason: &str) -> ConditionUpdate {
        ConditionUpdate {
            type_: t.into(),
            status: s,
            reason: reason.into(),
            message: "m".into(),
        }
    }

    fn desired(status: Status) -> DesiredStatus {
        DesiredStatus {
            manifests: vec![ManifestDesired::Conditions {
                meta: meta(0, "a"),
                updates: vec![
                    conditions::applied_condition(Ok(())),
                    update("Ready", status, reasons::CONDITION_RULE_EVALUATED),
                ],
                feedback: None,
            }],
            deleting: false,
        }
    }

    #[test]
    fn a_plan_gives_the_same_transitions_over_any_copy_of_the_old_status() {
        // The copy the reconcile read, and the hub's newer copy written meanwhile by a status
        // write that saw the manifest not ready yet: the transition to ready has one time.
        let read = build_status(None, &desired(Status::False), Some(1), t(100));
        let mut latest = read.clone();
        latest.conditions.retain(|c| c.type_ != "Available");
        let plan = StatusPlan {
            desired: desired(Status::True),
            observed_generation: Some(1),
            at: t(201),
            applied_since: None,
        };
        let ready_at = |s: &ManifestWorkStatus| {
            s.resource_status.as_ref().expect("set").manifests[0]
                .conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.last_transition_time.clone())
        };
        assert_eq!(ready_at(&plan.over(Some(&read))), Some(t(201)));
        assert_eq!(
            ready_at(&plan.over(Some(&read))),
            ready_at(&plan.over(Some(&latest)))
        );
    }

    #[test]
    fn a_first_status_dates_applied_and_available_from_the_applied_record() {
        let plan = |at: i64| StatusPlan {
            desired: desired(Status::True),
            observed_generation: Some(1),
            at: t(at),
            applied_since: Some(t(50)),
        };
        // Reported at 100, then again at 900 by a restarted agent that had no status to build on.
        let before = plan(100).over(None);
        let after = plan(900).over(None);
        assert_eq!(
            before, after,
            "nothing changed: the same status, the same hash"
        );
        let manifest = &after.resource_status.as_ref().expect("set").manifests[0];
        let time_of = |conditions: &[Condition], ty: &str| {
            conditions
                .iter()
                .find(|c| c.type_ == ty)
                .map(|c| c.last_transition_time.clone())
        };
        assert_eq!(time_of(&manifest.conditions, "Applied"), Some(t(50)));
        assert_eq!(time_of(&after.conditions, "Applied"), Some(t(50)));
        assert_eq!(time_of(&after.conditions, "Available"), Some(t(50)));
        assert_eq!(time_of(&manifest.conditions, "Ready"), Some(t(50)));
        // A completion dates from when the agent saw it: a TTL counts from it.
        let complete = |at: i64| {
            let mut desired = desired(Status::True);
            if let ManifestDesired::Conditions { updates, .. } = &mut desired.manifests[0] {
                updates.push(update(
                    "Complete",
                    Status::True,
                    reasons::CONDITION_RULE_EVALUATED,
                ));
            }
            StatusPlan {
                desired,
                ..plan(at)
            }
            .over(None)
        };
        let completed = complete(700);
        let manifest = &completed.resource_status.as_ref().expect("set").manifests[0];
        assert_eq!(time_of(&manifest.conditions, "Complete"), Some(t(700)));
        assert_eq!(time_of(&completed.conditions, "Complete"), Some(t(700)));
        assert_eq!(time_of(&completed.conditions, "Applied"), Some(t(50)));
        // Over a status it has, the agent dates a transition from now as always.
        let later = StatusPlan {
            desired: desired(Status::False),
            ..plan(1000)
        }
        .over(Some(&after));
        let manifest = &later.resource_status.as_ref().expect("set").manifests[0];
        assert_eq!(time_of(&manifest.conditions, "Ready"), Some(t(1000)));
        assert_eq!(time_of(&manifest.conditions, "Applied"), Some(t(50)));
        // Without an applied record's time, a first status dates from now.
        let undated = StatusPlan {
            applied_since: None,
            ..plan(100)
        }
        .over(None);
        assert_eq!(time_of(&undated.conditions, "Applied"), Some(t(100)));
    }

    #[test]
    fn a_new_generation_restarts_progressing_but_nothing_else() {
        let progressing = |status: Status| DesiredStatus {
            manifests: vec![ManifestDesired::Conditions {
                meta: meta(0, "a"),
                updates: vec![
                    conditions::applied_condition(Ok(())),
                    update("Progressing", status, reasons::CONDITION_RULE_EVALUATED),
                ],
                feedback: None,
            }],
            deleting: false,
        };
        let time_of = |s: &ManifestWorkStatus, manifest: bool, ty: &str| {
            let list = if manifest {
                &s.resource_status.as_ref().expect("set").manifests[0].conditions
            } else {
                &s.conditions
            };
            list.iter()
                .find(|c| c.type_ == ty)
                .map(|c| c.last_transition_time.clone())
        };
        let first = build_status(None, &progressing(Status::False), Some(1), t(100));
        // The same generation later: nothing moves.
        let same = build_status(Some(&first), &progressing(Status::False), Some(1), t(500));
        assert_eq!(same, first);
        // Generation 2, still not progressing: Progressing's transition is now, at both levels;
        // Applied keeps its time.
        let next = build_status(Some(&first), &progressing(Status::False), Some(2), t(900));
        assert_eq!(time_of(&next, true, "Progressing"), Some(t(900)));
        assert_eq!(time_of(&next, false, "Progressing"), Some(t(900)));
        assert_eq!(time_of(&next, true, "Applied"), Some(t(100)));
        assert_eq!(time_of(&next, false, "Applied"), Some(t(100)));
        // Without the restart a rollout would count its soak from 100, before generation 2.
        let again = build_status(Some(&next), &progressing(Status::False), Some(2), t(950));
        assert_eq!(time_of(&again, false, "Progressing"), Some(t(900)));
    }

    #[test]
    fn the_work_carries_drifted_while_a_manifest_does() {
        let with = |drift: Option<ConditionUpdate>| DesiredStatus {
            manifests: vec![ManifestDesired::Conditions {
                meta: meta(0, "a"),
                updates: std::iter::once(conditions::applied_condition(Ok(())))
                    .chain(drift)
                    .collect(),
                feedback: None,
            }],
            deleting: false,
        };
        let drifted = ConditionUpdate::new(
            "Drifted",
            Status::True,
            "DriftDetected",
            "Differs from the work: x",
        );
        let s = build_status(None, &with(Some(drifted)), Some(1), t(1));
        let work = s
            .conditions
            .iter()
            .find(|c| c.type_ == "Drifted")
            .expect("work Drifted");
        assert_eq!(work.status, "True");
        assert_eq!(work.reason, "ManifestsDrifted");
        let gone = build_status(Some(&s), &with(None), Some(1), t(2));
        assert!(gone.conditions.iter().all(|c| c.type_ != "Drifted"));
    }

    #[test]
    fn unchanged_inputs_give_an_identical_status() {
        let first = build_status(None, &desired(Status::True), Some(1), t(100));
        let second = build_status(Some(&first), &desired(Status::True), Some(1), t(200));
        assert!(!differs(Some(&first), &second));
        assert_eq!(first, second);
    }

    #[test]
    fn a_status_change_moves_only_that_transition_time() {
        let first = build_status(None, &desired(Status::True), Some(1), t(100));
        let second = build_status(Some(&first), &desired(Status::False), Some(1), t(200));
        assert!(differs(Some(&first), &second));
        let manifest = &second.resource_status.as_ref().expect("set").manifests[0];
        let ready = manifest
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .expect("rule condition");
        assert_eq!(ready.last_transition_time, t(200));
        let applied = manifest
            .conditions
            .iter()
            .find(|c| c.type_ == "Applied")
            .expect("applied");
        assert_eq!(applied.last_transition_time, t(100));
        let work_ready = second
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .expect("aggregated");
        assert_eq!(work_ready.status, "False");
        assert_eq!(work_ready.reason, reasons::CONDITION_RULES_AGGREGATED);
    }

    #[test]
    fn new_feedback_values_move_the_feedback_transition_time() {
        let with_value = |n: i64| DesiredStatus {
            manifests: vec![ManifestDesired::Conditions {
                meta: meta(0, "a"),
                updates: vec![
                    conditions::applied_condition(Ok(())),
                    conditions::feedback_condition(Ok(())),
                ],
                feedback: Some(StatusFeedbackResult {
                    values: vec![work_api::FeedbackValue {
                        name: "ReadyReplicas".into(),
                        field_value: work_api::FieldValue {
                            type_: work_api::ValueType::Integer,
                            integer: Some(n),
                            ..Default::default()
                        },
                    }],
                }),
            }],
            deleting: false,
        };
        let synced = |s: &ManifestWorkStatus| {
            s.resource_status.as_ref().expect("set").manifests[0]
                .conditions
                .iter()
                .find(|c| c.type_ == condition_types::STATUS_FEEDBACK_SYNCED)
                .map(|c| c.last_transition_time.clone())
                .expect("feedback condition")
        };
        let first = build_status(None, &with_value(1), Some(1), t(100));
        let same = build_status(Some(&first), &with_value(1), Some(1), t(150));
        assert_eq!(synced(&same), t(100), "same values: no transition");
        assert!(!differs(Some(&first), &same));
        let changed = build_status(Some(&first), &with_value(5), Some(1), t(200));
        assert_eq!(synced(&changed), t(200));
    }

    #[test]
    fn generation_is_observed_everywhere() {
        let s = build_status(None, &desired(Status::True), Some(7), t(1));
        assert!(
            s.conditions
                .iter()
                .all(|c| c.observed_generation == Some(7))
        );
        let m = &s.resource_status.as_ref().expect("set").manifests[0];
        assert!(
            m.conditions
                .iter()
                .all(|c| c.observed_generation == Some(7))
        );
    }

    #[test]
    fn kept_entries_are_written_verbatim_and_deleting_is_added() {
        let first = build_status(None, &desired(Status::True), Some(1), t(100));
        let kept = first.resource_status.as_ref().expect("set").manifests[0].clone();
        let d = DesiredStatus {
            manifests: vec![ManifestDesired::Keep(kept.clone())],
            deleting: true,
        };
        let s = build_status(Some(&first), &d, Some(2), t(300));
        assert_eq!(s.resource_status.as_ref().expect("set").manifests[0], kept);
        let del = s
            .conditions
            .iter()
            .find(|c| c.type_ == condition_types::DELETING)
            .expect("deleting");
        assert_eq!(del.reason, "WorkDeleting");
        assert_eq!(del.status, "True");
    }

    #[test]
    fn work_conditions_of_others_are_kept() {
        let mut first = build_status(None, &desired(Status::True), Some(1), t(100));
        first.conditions.push(Condition {
            type_: "Placed".into(),
            status: "True".into(),
            reason: "ByHub".into(),
            message: "".into(),
            last_transition_time: t(1),
            observed_generation: None,
        });
        let second = build_status(Some(&first), &desired(Status::True), Some(1), t(200));
        assert!(second.conditions.iter().any(|c| c.type_ == "Placed"));
        assert!(!differs(Some(&first), &second));
    }

    #[test]
    fn states_and_completion() {
        let mut s = build_status(None, &desired(Status::True), Some(1), t(1));
        assert_eq!(work_state(Some(&s), true), "deleting");
        assert_eq!(work_state(None, false), "applying");
        let before = s.clone();
        s.conditions.push(Condition {
            type_: "Complete".into(),
            status: "True".into(),
            reason: "x".into(),
            message: "x".into(),
            last_transition_time: t(1),
            observed_generation: None,
        });
        assert_eq!(work_state(Some(&s), false), "complete");
        assert!(became_complete(Some(&before), &s));
        assert!(!became_complete(Some(&s), &s));
    }
}
