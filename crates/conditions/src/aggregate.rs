//! Work-level conditions from the manifests' conditions (semantics §3).

use work_api::condition_types::{APPLIED, AVAILABLE, PROGRESSING};

use crate::condition::{Condition, ConditionUpdate, Status, cap_message, is_rule_made, reasons};

/// Work-level `Applied`, `Available`, and one condition per rule-made type (reason
/// `ConditionRulesAggregated`). `manifests` are the per-manifest condition lists as they will be
/// written. A manifest condition is rule-made iff its reason starts with `ConditionRule`.
pub fn aggregate_work_conditions(manifests: &[&[Condition]]) -> Vec<ConditionUpdate> {
    let mut out = vec![applied(manifests), available(manifests)];
    let mut types: Vec<&str> = Vec::new();
    for condition in manifests.iter().flat_map(|m| m.iter()) {
        if is_rule_made(condition) && !types.contains(&condition.type_.as_str()) {
            types.push(&condition.type_);
        }
    }
    // A work with a manifest still waiting (or held) is not Complete: the manifest is yet to be
    // applied, and a Complete work is never written again.
    let pending = manifests
        .iter()
        .filter_map(|m| find(m, APPLIED))
        .any(|c| c.reason == reasons::WAITING_FOR_DEPENDENCY || c.reason == reasons::GATE_INVALID);
    out.extend(types.into_iter().map(|t| {
        let mut update = rule_made(manifests, t);
        if pending && t == work_api::condition_types::COMPLETE && update.status == Status::True {
            update.status = Status::Unknown;
            update.message = "Some manifests are not applied yet".to_string();
        }
        update
    }));
    out
}

fn status_of(condition: &Condition) -> Status {
    Status::parse(&condition.status).unwrap_or(Status::Unknown)
}

fn find<'a>(manifest: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    manifest.iter().find(|c| c.type_ == type_)
}

fn applied(manifests: &[&[Condition]]) -> ConditionUpdate {
    let failed = manifests
        .iter()
        .filter(|m| find(m, APPLIED).is_some_and(|c| status_of(c) == Status::False))
        .count();
    let waiting: Vec<&Condition> = manifests
        .iter()
        .filter_map(|m| find(m, APPLIED))
        .filter(|c| c.reason == reasons::WAITING_FOR_DEPENDENCY)
        .collect();
    let invalid_gate = manifests
        .iter()
        .filter_map(|m| find(m, APPLIED))
        .find(|c| c.reason == reasons::GATE_INVALID);
    if let Some(gate) = invalid_gate {
        // Upstream's reason, with what no retry will fix said on the work itself.
        ConditionUpdate::new(
            APPLIED,
            Status::False,
            reasons::APPLIED_MANIFEST_WORK_FAILED,
            cap_message(format!("Failed to apply manifest work: {}", gate.message)),
        )
    } else if failed > 0 {
        ConditionUpdate::new(
            APPLIED,
            Status::False,
            reasons::APPLIED_MANIFEST_WORK_FAILED,
            "Failed to apply manifest work",
        )
    } else if let Some(first) = waiting.first() {
        ConditionUpdate::new(
            APPLIED,
            Status::Unknown,
            reasons::APPLIED_MANIFEST_WORK_WAITING,
            cap_message(format!(
                "{} of {} manifests wait for what they depend on: {}",
                waiting.len(),
                manifests.len(),
                first.message
            )),
        )
    } else {
        ConditionUpdate::new(
            APPLIED,
            Status::True,
            reasons::APPLIED_MANIFEST_WORK_COMPLETE,
            "Apply manifest work complete",
        )
    }
}

fn available(manifests: &[&[Condition]]) -> ConditionUpdate {
    let total = manifests.len();
    let count = |s: Status| {
        manifests
            .iter()
            .filter(|m| find(m, AVAILABLE).is_some_and(|c| status_of(c) == s))
            .count()
    };
    let (available, unavailable, unknown) = (
        count(Status::True),
        count(Status::False),
        count(Status::Unknown),
    );
    if unavailable > 0 {
        ConditionUpdate::new(
            AVAILABLE,
            Status::False,
            reasons::RESOURCES_NOT_AVAILABLE,
            format!("{unavailable} of {total} resources are not available"),
        )
    } else if unknown > 0 {
        ConditionUpdate::new(
            AVAILABLE,
            Status::Unknown,
            reasons::RESOURCES_STATUS_UNKNOWN,
            format!("{unknown} of {total} resources have unknown status"),
        )
    } else if available == 0 {
        // Upstream's words (and its trailing space), for a work with no manifest reporting.
        ConditionUpdate::new(
            AVAILABLE,
            Status::Unknown,
            reasons::RESOURCES_STATUS_UNKNOWN,
            "cannot get any available resource ",
        )
    } else {
        ConditionUpdate::new(
            AVAILABLE,
            Status::True,
            reasons::RESOURCES_AVAILABLE,
            "All resources are available",
        )
    }
}

fn rule_made(manifests: &[&[Condition]], type_: &str) -> ConditionUpdate {
    let contributors: Vec<&Condition> = manifests
        .iter()
        .filter_map(|m| m.iter().find(|c| c.type_ == type_ && is_rule_made(c)))
        .collect();
    let any = |s: Status| contributors.iter().any(|c| status_of(c) == s);
    let status = if type_ == PROGRESSING {
        if any(Status::True) {
            Status::True
        } else if any(Status::Unknown) {
            Status::Unknown
        } else {
            Status::False
        }
    } else if any(Status::False) {
        Status::False
    } else if any(Status::Unknown) || !any(Status::True) {
        Status::Unknown
    } else {
        Status::True
    };
    let message = match contributors.as_slice() {
        [single] => single.message.clone(),
        many => format!("Aggregated from {} manifest conditions", many.len()),
    };
    ConditionUpdate::new(type_, status, reasons::CONDITION_RULES_AGGREGATED, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn c(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: Some(1),
            last_transition_time: Time(Default::default()),
        }
    }

    fn applied_ok() -> Condition {
        c(
            "Applied",
            "True",
            "AppliedManifestComplete",
            "Apply manifest complete",
        )
    }

    fn avail(status: &str) -> Condition {
        c("Available", status, "ResourceAvailable", "")
    }

    fn rule(type_: &str, status: &str, message: &str) -> Condition {
        c(type_, status, "ConditionRuleEvaluated", message)
    }

    fn get<'a>(out: &'a [ConditionUpdate], t: &str) -> &'a ConditionUpdate {
        out.iter()
            .find(|c| c.type_ == t)
            .unwrap_or_else(|| panic!("no {t} in {out:?}"))
    }

    #[test]
    fn applied_true_when_all_applied_false_when_any_failed() {
        let a = [applied_ok(), avail("True")];
        let out = aggregate_work_conditions(&[&a, &a]);
        let applied = get(&out, "Applied");
        assert_eq!(
            (applied.status, applied.reason.as_str()),
            (Status::True, "AppliedManifestWorkComplete")
        );
        let b = [
            c("Applied", "False", "AppliedManifestFailed", "x"),
            avail("True"),
        ];
        let out = aggregate_work_conditions(&[&a, &b]);
        let applied = get(&out, "Applied");
        assert_eq!(
            (applied.status, applied.reason.as_str()),
            (Status::False, "AppliedManifestWorkFailed")
        );
    }

    #[test]
    fn applied_unknown_while_manifests_wait_and_nothing_failed() {
        let a = [applied_ok(), avail("True")];
        let [applied, available] = crate::manifest::waiting_conditions(
            "Waiting for CustomResourceDefinition widgets.example.com (manifest 3) to be Established",
        );
        let as_condition =
            |u: &ConditionUpdate| c(&u.type_, u.status.as_str(), &u.reason, &u.message);
        let w = [as_condition(&applied), as_condition(&available)];
        let out = aggregate_work_conditions(&[&a, &w]);
        let applied = get(&out, "Applied");
        assert_eq!(
            (
                applied.status,
                applied.reason.as_str(),
                applied.message.as_str()
            ),
            (
                Status::Unknown,
                "AppliedManifestWorkWaiting",
                "1 of 2 manifests wait for what they depend on: Waiting for \
                 CustomResourceDefinition widgets.example.com (manifest 3) to be Established"
            )
        );
        assert_eq!(get(&out, "Available").status, Status::Unknown);
        // A failure wins over waiting.
        let f = [c("Applied", "False", "AppliedManifestFailed", "x")];
        let out = aggregate_work_conditions(&[&f, &w]);
        assert_eq!(get(&out, "Applied").status, Status::False);
        // A Job Complete while the Deployment gated on it has not been applied: not Complete.
        let job = [applied_ok(), rule("Complete", "True", "done")];
        let out = aggregate_work_conditions(&[&job, &w]);
        assert_eq!(get(&out, "Complete").status, Status::Unknown);
        let out = aggregate_work_conditions(&[&job, &a]);
        assert_eq!(get(&out, "Complete").status, Status::True);
    }

    #[test]
    fn a_gate_that_can_never_hold_fails_the_work_saying_why() {
        let held = crate::manifest::gate_invalid_condition("gates in a circle: manifests 0, 1");
        let held = c(
            &held.type_,
            held.status.as_str(),
            &held.reason,
            &held.message,
        );
        let out = aggregate_work_conditions(&[&[applied_ok()], &[held]]);
        let applied = get(&out, "Applied");
        assert_eq!(
            (
                applied.status,
                applied.reason.as_str(),
                applied.message.as_str()
            ),
            (
                Status::False,
                "AppliedManifestWorkFailed",
                "Failed to apply manifest work: Invalid gate: gates in a circle: manifests 0, 1"
            )
        );
    }

    #[test]
    fn available_rows() {
        let t = [avail("True")];
        let f = [avail("False")];
        let u = [avail("Unknown")];
        let out = aggregate_work_conditions(&[&t, &t]);
        let a = get(&out, "Available");
        assert_eq!(
            (a.status, a.reason.as_str(), a.message.as_str()),
            (
                Status::True,
                "ResourcesAvailable",
                "All resources are available"
            )
        );
        let out = aggregate_work_conditions(&[&t, &f, &f, &u]);
        let a = get(&out, "Available");
        assert_eq!(
            (a.status, a.reason.as_str(), a.message.as_str()),
            (
                Status::False,
                "ResourcesNotAvailable",
                "2 of 4 resources are not available"
            )
        );
        let out = aggregate_work_conditions(&[&t, &u]);
        let a = get(&out, "Available");
        assert_eq!(
            (a.status, a.reason.as_str()),
            (Status::Unknown, "ResourcesStatusUnknown")
        );
        let a = get(&out, "Available");
        assert_eq!(a.message, "1 of 2 resources have unknown status");
        let out = aggregate_work_conditions(&[]);
        let a = get(&out, "Available");
        assert_eq!(
            (a.status, a.message.as_str()),
            (Status::Unknown, "cannot get any available resource ")
        );
        // As upstream: a manifest without an Available condition does not count.
        let none: [Condition; 0] = [];
        let out = aggregate_work_conditions(&[&t, &none]);
        assert_eq!(get(&out, "Available").status, Status::True);
    }

    #[test]
    fn rule_made_types_aggregate_false_then_unknown_then_true() {
        let t = [rule("Complete", "True", "done a")];
        let t2 = [rule("Complete", "True", "done b")];
        let f = [rule("Complete", "False", "not yet")];
        let u = [c(
            "Complete",
            "Unknown",
            "ConditionRuleStaleStatus",
            "stale",
        )];
        let none: [Condition; 0] = [];
        let status = |ms: &[&[Condition]]| get(&aggregate_work_conditions(ms), "Complete").status;
        assert_eq!(status(&[&t, &f, &u]), Status::False);
        assert_eq!(status(&[&t, &u]), Status::Unknown);
        assert_eq!(status(&[&t, &t2]), Status::True);
        // A manifest without a rule for the type does not take part.
        assert_eq!(status(&[&t, &none]), Status::True);
        let out = aggregate_work_conditions(&[&t, &none]);
        let complete = get(&out, "Complete");
        assert_eq!(complete.reason, "ConditionRulesAggregated");
        assert_eq!(complete.message, "done a", "single contributor's message");
        let out = aggregate_work_conditions(&[&t, &t2]);
        assert_eq!(
            get(&out, "Complete").message,
            "Aggregated from 2 manifest conditions"
        );
    }

    #[test]
    fn progressing_any_true_wins() {
        let t = [rule("Progressing", "True", "")];
        let f = [rule("Progressing", "False", "")];
        let u = [rule("Progressing", "Unknown", "")];
        let status =
            |ms: &[&[Condition]]| get(&aggregate_work_conditions(ms), "Progressing").status;
        assert_eq!(status(&[&f, &t, &u]), Status::True);
        assert_eq!(status(&[&f, &u]), Status::Unknown);
        assert_eq!(status(&[&f, &f]), Status::False);
    }

    #[test]
    fn agent_conditions_are_not_rule_made() {
        let m = [
            applied_ok(),
            avail("True"),
            c("StatusFeedbackSynced", "True", "StatusFeedbackSynced", ""),
        ];
        let out = aggregate_work_conditions(&[&m]);
        assert_eq!(
            out.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            ["Applied", "Available"]
        );
    }
}
