//! Pure: a manifest's `Drifted` condition from what the apply saw of its object, and the work's
//! own `Drifted` from its manifests'. The comparison itself is `work_semantics::drift::diff`.
//!
//! One hub write per drift episode: the condition says what differs and (its transition time)
//! since when; it is written when the drift starts, again only when what differs changes, and
//! once more when it ends. A drift corrected in the same reconcile that saw it is one write
//! (`Drifted` False `DriftCorrected`), and the same fields corrected again (a controller that
//! fights the work) write nothing more.

use applier::drift::{self, FieldDrift};
use conditions::{Condition, ConditionUpdate, Status};
use k8s_openapi::jiff::Timestamp;
use work_api::condition_types::DRIFTED;

/// `Drifted` False: the object is as the work wants it.
pub const NO_DRIFT: &str = "NoDrift";
/// `Drifted` True: the object differs and the agent does not write it back.
pub const DRIFT_DETECTED: &str = "DriftDetected";
/// `Drifted` False: the object differed and the agent wrote the work's fields back.
pub const DRIFT_CORRECTED: &str = "DriftCorrected";
/// `Drifted` True: a ReportOnly manifest's object does not exist.
pub const OBJECT_ABSENT: &str = "ObjectAbsent";
/// `Drifted` True: an object that is not the work's differs, so it is not taken over.
pub const TAKE_OVER_REFUSED: &str = "TakeOverRefused";
/// The work's `Drifted` True: some manifest's object differs.
pub const MANIFESTS_DRIFTED: &str = "ManifestsDrifted";

/// What an apply saw of a manifest's object, for its `Drifted` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Not looked at (the manifest is complete, or its write failed without a drift seen
    /// first): the condition stays as it was.
    NotChecked,
    /// The object is as the work wants it.
    Matches,
    /// The object differs and stays so (ReportOnly, CreateOnly, ReadOnly, or a failed write).
    Differs(Vec<FieldDrift>),
    /// A ReportOnly manifest's object does not exist.
    Absent,
    /// The object differed and the agent wrote it back.
    Corrected(Vec<FieldDrift>),
    /// An object that is not the work's differs from it and was left alone.
    NotTakenOver(Vec<FieldDrift>),
}

/// The field list that stands for a deleted object (corrected by creating it again).
pub fn deleted() -> Vec<FieldDrift> {
    vec![FieldDrift {
        path: String::new(),
        live: None,
        wanted: None,
        hidden: false,
    }]
}

/// What the fields say in a message; a deleted object in words.
fn described(fields: &[FieldDrift]) -> String {
    if fields == deleted().as_slice() {
        "the object was deleted".to_string()
    } else {
        drift::describe(fields)
    }
}

/// The manifest's `Drifted` condition now, from what was seen, whether its mode is declared
/// (`declared`: a manifest under the drift annotation always carries the condition; one
/// without carries it once drift was seen), the condition it had (`previous`) and the time.
/// `None`: no `Drifted` condition.
pub fn condition(
    seen: &Seen,
    declared: bool,
    previous: Option<&Condition>,
    now: Timestamp,
) -> Option<ConditionUpdate> {
    let keep = |c: &Condition| ConditionUpdate {
        type_: DRIFTED.to_string(),
        status: Status::parse(&c.status).unwrap_or(Status::Unknown),
        reason: c.reason.clone(),
        message: c.message.clone(),
    };
    let matches = || {
        ConditionUpdate::new(
            DRIFTED,
            Status::False,
            NO_DRIFT,
            "The object matches the work",
        )
    };
    match seen {
        Seen::NotChecked => previous.map(keep),
        Seen::Matches => match previous {
            Some(p) if p.status == "False" => Some(keep(p)),
            Some(_) => Some(matches()),
            None => declared.then(matches),
        },
        Seen::Differs(fields) => Some(ConditionUpdate::new(
            DRIFTED,
            Status::True,
            DRIFT_DETECTED,
            format!("Differs from the work: {}", described(fields)),
        )),
        Seen::Absent => Some(ConditionUpdate::new(
            DRIFTED,
            Status::True,
            OBJECT_ABSENT,
            "The object does not exist",
        )),
        Seen::NotTakenOver(fields) => Some(ConditionUpdate::new(
            DRIFTED,
            Status::True,
            TAKE_OVER_REFUSED,
            format!(
                "Exists and is not the work's; left alone because it differs from the work: {}",
                described(fields)
            ),
        )),
        Seen::Corrected(fields) => {
            let what = described(fields);
            // The same fields corrected again: the report stands, nothing to write.
            if let Some(p) = previous
                && p.reason == DRIFT_CORRECTED
                && p.message.split_once(": ").map(|(_, rest)| rest) == Some(what.as_str())
            {
                return Some(keep(p));
            }
            Some(ConditionUpdate::new(
                DRIFTED,
                Status::False,
                DRIFT_CORRECTED,
                format!(
                    "Corrected at {}: {what}",
                    now.round(k8s_openapi::jiff::Unit::Second).unwrap_or(now)
                ),
            ))
        }
    }
}

/// The work's `Drifted`: True while some manifest's is True (naming how many and the first),
/// False when manifests carry it and none is True; `None` when none carries it.
pub fn work_condition(manifests: &[&[Condition]]) -> Option<ConditionUpdate> {
    let carried: Vec<&Condition> = manifests
        .iter()
        .filter_map(|m| m.iter().find(|c| c.type_ == DRIFTED))
        .collect();
    if carried.is_empty() {
        return None;
    }
    let drifted: Vec<&&Condition> = carried.iter().filter(|c| c.status == "True").collect();
    Some(match drifted.first() {
        None => ConditionUpdate::new(
            DRIFTED,
            Status::False,
            NO_DRIFT,
            "No manifest's object differs from the work",
        ),
        Some(first) => ConditionUpdate::new(
            DRIFTED,
            Status::True,
            MANIFESTS_DRIFTED,
            // The manifest's message is bounded (`drift::DESCRIPTION_LEN`), so this one is.
            format!(
                "{} of {} manifests differ from the work: {}",
                drifted.len(),
                manifests.len(),
                first.message
            ),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::work::test_conditions::{at, written};

    fn field(path: &str, live: &str, wanted: &str) -> FieldDrift {
        FieldDrift {
            path: path.into(),
            live: Some(live.into()),
            wanted: Some(wanted.into()),
            hidden: false,
        }
    }

    #[test]
    fn a_manifest_without_a_declared_mode_carries_drifted_only_once_it_drifted() {
        assert_eq!(condition(&Seen::Matches, false, None, at(0)), None);
        let declared = condition(&Seen::Matches, true, None, at(0)).expect("declared");
        assert_eq!(
            (declared.status, declared.reason.as_str()),
            (Status::False, NO_DRIFT)
        );
        let replicas = vec![field("spec.replicas", "5", "2")];
        let corrected =
            condition(&Seen::Corrected(replicas.clone()), false, None, at(10)).expect("reported");
        assert_eq!(corrected.status, Status::False);
        assert_eq!(
            corrected.message,
            "Corrected at 2027-01-15T08:00:10Z: spec.replicas is 5, the work has 2"
        );
        // Matching again afterwards keeps the report: no second write for the episode.
        let kept = condition(&Seen::Matches, false, Some(&written(&corrected)), at(11));
        assert_eq!(kept.as_ref(), Some(&corrected));
        // The same fields corrected again later: the first report stands.
        let again = condition(
            &Seen::Corrected(replicas),
            false,
            Some(&written(&corrected)),
            at(50),
        );
        assert_eq!(again.as_ref(), Some(&corrected));
        // Other fields: a new report.
        let other = condition(
            &Seen::Corrected(vec![field("data.k", "\"x\"", "\"y\"")]),
            false,
            Some(&written(&corrected)),
            at(60),
        )
        .expect("reported");
        assert!(
            other
                .message
                .starts_with("Corrected at 2027-01-15T08:01:00Z: data.k"),
            "{}",
            other.message
        );
    }

    #[test]
    fn a_drift_left_in_place_is_true_until_the_object_matches_again() {
        let fields = vec![field("data.color", "\"blue\"", "\"red\"")];
        let detected = condition(&Seen::Differs(fields.clone()), true, None, at(0)).expect("set");
        assert_eq!(detected.status, Status::True);
        assert_eq!(detected.reason, DRIFT_DETECTED);
        assert_eq!(
            detected.message,
            "Differs from the work: data.color is \"blue\", the work has \"red\""
        );
        // Seen again, the same: an identical update (nothing to write).
        let same = condition(
            &Seen::Differs(fields),
            true,
            Some(&written(&detected)),
            at(5),
        );
        assert_eq!(same.as_ref(), Some(&detected));
        let cleared =
            condition(&Seen::Matches, false, Some(&written(&detected)), at(9)).expect("set");
        assert_eq!(
            (cleared.status, cleared.reason.as_str()),
            (Status::False, NO_DRIFT)
        );
        let refused = condition(
            &Seen::NotTakenOver(vec![field("data.k", "1", "2")]),
            true,
            None,
            at(0),
        )
        .expect("set");
        assert_eq!(
            (refused.status, refused.reason.as_str()),
            (Status::True, TAKE_OVER_REFUSED)
        );
        let absent = condition(&Seen::Absent, true, None, at(0)).expect("set");
        assert_eq!(absent.reason, OBJECT_ABSENT);
        assert_eq!(condition(&Seen::NotChecked, true, None, at(0)), None);
        assert_eq!(
            condition(&Seen::NotChecked, true, Some(&written(&absent)), at(0)).as_ref(),
            Some(&absent)
        );
        let recreated = condition(&Seen::Corrected(deleted()), false, None, at(0)).expect("set");
        assert!(
            recreated.message.ends_with("the object was deleted"),
            "{}",
            recreated.message
        );
    }

    #[test]
    fn the_work_says_how_many_manifests_drifted() {
        let detected = written(&ConditionUpdate::new(
            DRIFTED,
            Status::True,
            DRIFT_DETECTED,
            "Differs from the work: x",
        ));
        let fine = written(&ConditionUpdate::new(DRIFTED, Status::False, NO_DRIFT, "m"));
        assert_eq!(work_condition(&[&[], &[]]), None);
        let none = work_condition(&[std::slice::from_ref(&fine), &[]]).expect("carried");
        assert_eq!(none.status, Status::False);
        let some = work_condition(&[&[fine], &[detected], &[]]).expect("carried");
        assert_eq!(some.status, Status::True);
        assert_eq!(
            some.message,
            "1 of 3 manifests differ from the work: Differs from the work: x"
        );
    }
}
