//! One record per manifest of what a reconcile found (what apply did, what the live object is,
//! what each rule said, what feedback gave), and the pure derivation of the manifest's status
//! from it. Every manifest condition the agent writes comes from [`ManifestOutcome::desired`].

use conditions::{Availability, ConditionUpdate};
use serde_json::Value;
use work_api::{FeedbackValue, ManifestResourceMeta, StatusFeedbackResult};

use crate::work::status::ManifestDesired;

/// The live object of a manifest, as the agent sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Live {
    /// The object exists.
    Found(Value),
    /// The object does not exist.
    Absent,
    /// The spoke does not serve the kind (or the manifest cannot even be identified).
    UnknownKind,
    /// Reading it failed; the error says why.
    Unreadable(String),
}

/// What status feedback gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Feedback {
    /// The manifest has no feedback rules.
    NoRules,
    /// The manifest has feedback rules but no object to read them from.
    NotRead,
    /// The values read, and the errors met (joined) if any.
    Read(Vec<FeedbackValue>, Option<String>),
}

/// Everything a reconcile found about one manifest.
#[derive(Clone, Debug, PartialEq)]
pub struct ManifestOutcome {
    /// Identity in status.
    pub meta: ManifestResourceMeta,
    /// Whether the manifest is applied as the work asks (`Err`: why not, for `Applied`).
    pub applied: Result<(), String>,
    /// Whether `applied` failed because the manifest's `ignoreFields` cannot be used (`Applied`
    /// then has its own reason).
    pub ignore_fields_error: bool,
    /// The live object.
    pub live: Live,
    /// The rule conditions: evaluated on the live object, or not evaluated (see
    /// [`ManifestOutcome::not_evaluated_because`]).
    pub rules: Vec<ConditionUpdate>,
    /// Status feedback.
    pub feedback: Feedback,
    /// What the manifest waits for, if it is not applied yet because another manifest of the
    /// work is not ready (its `Applied` and `Available` then say so, Unknown).
    pub waiting: Option<String>,
    /// Why the manifest is never applied while the work is as it is: a gate of it can never hold
    /// (its `Applied` is then False `GateInvalid`, saying why).
    pub invalid_gate: Option<String>,
    /// The manifest's `Drifted` condition (`work::drift`), if it carries one.
    pub drift: Option<ConditionUpdate>,
}

/// Why a manifest's rules cannot be evaluated, if they cannot: its object was never applied, is
/// absent, or cannot be read. Rules are evaluated only on an object the agent applied (or a
/// ReadOnly object it read), never on a stale one left from before a failed write.
pub fn not_evaluated_because(applied: &Result<(), String>, live: &Live) -> Option<String> {
    match (applied, live) {
        (Err(e), _) => Some(format!("resource was not applied: {e}")),
        (Ok(()), Live::Found(_)) => None,
        (Ok(()), Live::Absent) => Some("resource does not exist".to_string()),
        (Ok(()), Live::UnknownKind) => Some("resource kind is not served".to_string()),
        (Ok(()), Live::Unreadable(e)) => Some(format!("resource could not be read: {e}")),
    }
}

impl ManifestOutcome {
    /// The manifest's status: `Applied` from apply, `Available` from the live object only,
    /// `StatusFeedbackSynced` from feedback, then the rule conditions.
    pub fn desired(&self) -> ManifestDesired {
        if let Some(waits_for) = &self.waiting {
            let mut updates = conditions::waiting_conditions(waits_for).to_vec();
            updates.extend(self.rules.iter().cloned());
            return ManifestDesired::Conditions {
                meta: self.meta.clone(),
                updates,
                feedback: None,
            };
        }
        let applied = match &self.applied {
            Err(_) if self.invalid_gate.is_some() => {
                conditions::gate_invalid_condition(self.invalid_gate.as_deref().unwrap_or_default())
            }
            Err(e) if self.ignore_fields_error => conditions::ignore_fields_failed_condition(e),
            result => {
                conditions::applied_condition(result.as_ref().map(|_| ()).map_err(String::as_str))
            }
        };
        let mut updates = vec![
            applied,
            conditions::available_condition(match &self.live {
                Live::Found(_) => Availability::Exists,
                Live::Absent => Availability::Missing,
                Live::UnknownKind => Availability::IncompleteMeta,
                Live::Unreadable(e) => Availability::FetchFailed(e),
            }),
        ];
        let feedback = match &self.feedback {
            // As upstream: feedback is only spoken of for an object that was read.
            Feedback::NoRules => {
                if matches!(self.live, Live::Found(_)) {
                    updates.push(conditions::no_feedback_condition());
                }
                None
            }
            // As upstream: nothing is said about feedback of an object that is not there.
            Feedback::NotRead => None,
            Feedback::Read(values, error) => {
                updates.push(conditions::feedback_condition(match error {
                    Some(e) => Err(e.as_str()),
                    None => Ok(()),
                }));
                Some(StatusFeedbackResult {
                    values: values.clone(),
                })
            }
        };
        updates.extend(self.drift.iter().cloned());
        updates.extend(self.rules.iter().cloned());
        ManifestDesired::Conditions {
            meta: self.meta.clone(),
            updates,
            feedback,
        }
    }

    /// Whether the manifest is blocked: not applied, or its object absent or unreadable. A
    /// blocked work is retried with backoff and when a namespace or CRD appears.
    pub fn is_blocked(&self) -> bool {
        self.waiting.is_none() && not_evaluated_because(&self.applied, &self.live).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conditions::Status;
    use serde_json::json;

    fn outcome(applied: Result<(), String>, live: Live, feedback: Feedback) -> ManifestOutcome {
        ManifestOutcome {
            meta: ManifestResourceMeta::default(),
            applied,
            ignore_fields_error: false,
            live,
            rules: Vec::new(),
            feedback,
            waiting: None,
            invalid_gate: None,
            drift: None,
        }
    }

    fn updates(o: &ManifestOutcome) -> Vec<(String, Status, String, String)> {
        match o.desired() {
            ManifestDesired::Conditions { updates, .. } => updates
                .into_iter()
                .map(|u| (u.type_, u.status, u.reason, u.message))
                .collect(),
            ManifestDesired::Keep(_) => panic!("an outcome is never kept"),
        }
    }

    fn row(t: &str, s: Status, r: &str, m: &str) -> (String, Status, String, String) {
        (t.into(), s, r.into(), m.into())
    }

    #[test]
    fn a_waiting_manifest_says_what_it_waits_for_and_is_not_blocked() {
        let mut waiting = outcome(
            Err("not applied".into()),
            Live::UnknownKind,
            Feedback::NotRead,
        );
        waiting.waiting = Some("Waiting for Namespace app (manifest 4) to be Active".into());
        let why = "Waiting for Namespace app (manifest 4) to be Active";
        assert_eq!(
            updates(&waiting),
            vec![
                row("Applied", Status::Unknown, "WaitingForDependency", why),
                row("Available", Status::Unknown, "WaitingForDependency", why),
            ]
        );
        assert!(!waiting.is_blocked());
    }

    #[test]
    fn available_follows_the_live_object_only() {
        let available = row(
            "Available",
            Status::True,
            "ResourceAvailable",
            "Resource is available",
        );
        let cases = [
            (Ok(()), Live::Found(json!({})), available.clone()),
            (
                Err("namespaces \"x\" not found".to_string()),
                Live::Absent,
                row(
                    "Available",
                    Status::False,
                    "ResourceNotAvailable",
                    "Resource is not available",
                ),
            ),
            (
                Err("no matches for kind".to_string()),
                Live::UnknownKind,
                row(
                    "Available",
                    Status::Unknown,
                    "IncompleteResourceMeta",
                    "Resource meta is incomplete",
                ),
            ),
            (
                Ok(()),
                Live::Unreadable("timeout".into()),
                row(
                    "Available",
                    Status::Unknown,
                    "FetchingResourceFailed",
                    "Failed to fetch resource: timeout",
                ),
            ),
            // An SSA conflict on an existing object: not applied, but available.
            (
                Err("apply: Conflict".to_string()),
                Live::Found(json!({})),
                available.clone(),
            ),
        ];
        for (applied, live, expected) in cases {
            let got = updates(&outcome(applied, live, Feedback::NoRules));
            assert_eq!(got[1], expected);
        }
    }

    #[test]
    fn feedback_condition_per_case() {
        let never_applied = updates(&outcome(Err("x".into()), Live::Absent, Feedback::NoRules));
        assert!(never_applied.iter().all(|u| u.0 != "StatusFeedbackSynced"));
        // On an applied object that is there: the condition says how the rules were read.
        let cases = [
            (
                Feedback::NoRules,
                Status::True,
                "NoStatusFeedbackSynced",
                "",
            ),
            (
                Feedback::Read(Vec::new(), None),
                Status::True,
                "StatusFeedbackSynced",
                "",
            ),
            (
                Feedback::Read(Vec::new(), Some("bad path".into())),
                Status::False,
                "StatusFeedbackSyncFailed",
                "Sync status feedback failed with error bad path",
            ),
        ];
        for (feedback, status, reason, message) in cases {
            let got = updates(&outcome(Ok(()), Live::Found(json!({})), feedback));
            assert_eq!(
                got[2],
                row("StatusFeedbackSynced", status, reason, message),
                "{reason}"
            );
        }
        let not_read = updates(&outcome(Ok(()), Live::Absent, Feedback::NotRead));
        assert!(not_read.iter().all(|u| u.0 != "StatusFeedbackSynced"));
    }

    #[test]
    fn rules_are_evaluated_only_on_an_applied_object_that_is_there() {
        assert_eq!(
            not_evaluated_because(&Ok(()), &Live::Found(json!({}))),
            None
        );
        assert_eq!(
            not_evaluated_because(&Err("namespaces \"x\" not found".into()), &Live::Absent)
                .as_deref(),
            Some("resource was not applied: namespaces \"x\" not found")
        );
        // A failed write over an existing object: the object is not the manifest's.
        assert!(not_evaluated_because(&Err("x".into()), &Live::Found(json!({}))).is_some());
        assert_eq!(
            not_evaluated_because(&Ok(()), &Live::Absent).as_deref(),
            Some("resource does not exist")
        );
        assert!(outcome(Ok(()), Live::Absent, Feedback::NoRules).is_blocked());
        assert!(!outcome(Ok(()), Live::Found(json!({})), Feedback::NoRules).is_blocked());
    }

    #[test]
    fn rule_conditions_come_last_and_applied_first() {
        let mut o = outcome(
            Err("denied".into()),
            Live::Found(json!({})),
            Feedback::NoRules,
        );
        o.rules = vec![ConditionUpdate::new(
            "Complete",
            Status::Unknown,
            "ConditionRuleNotEvaluated",
            "resource was not applied: denied",
        )];
        let got = updates(&o);
        assert_eq!(
            got[0],
            row(
                "Applied",
                Status::False,
                "AppliedManifestFailed",
                "Failed to apply manifest: denied"
            )
        );
        assert_eq!(got.len(), 4);
        assert_eq!(got[3].2, "ConditionRuleNotEvaluated");
    }
}
