//! Conditions that hold: a rule's condition may be reported with a status only once the rule
//! has given that status for a while (`Degraded` True only after 30 s of failing readiness, a
//! rollout's soak before `Progressing` False). Declared in the work's annotation
//! [`ANNOTATION`], so upstream's CRD takes the work unchanged. Decided from times alone: when the
//! rule first gave the status (kept in the reported condition's message while it is held) and
//! now; a timer only brings the work back to look again.

use std::borrow::Borrow;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use work_api::ManifestWork;

use crate::annotations;
use crate::gates::find_manifest;

/// The work annotation holding the holds: a JSON list of `{"manifest": <ref>, "condition":
/// "<type>", "status": "True", "for": "30s"}`; without `manifest` the hold is every manifest's
/// (those with a rule for that condition), `status` defaults to `True`, `for` is a duration as
/// Kubernetes writes one (`30s`, `1m30s`, `2h`), at most 24 hours.
pub const ANNOTATION: &str = "work.open-cluster-management.io/holds";

/// The reason of a condition whose rule gave a status that has not held long enough yet; the
/// condition keeps the status it had.
pub const HELD_REASON: &str = "ConditionRuleHeld";

/// The most entries the annotation may hold.
pub const MAX_HOLDS: usize = 1000;

/// The longest hold.
pub const MAX_HOLD: Duration = Duration::from_secs(24 * 3600);

/// One hold: `condition` is reported `status` only after the rule gave it for `duration`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// The condition type.
    pub condition: String,
    /// The status held back (`True`, `False` or `Unknown`).
    pub status: String,
    /// How long the rule must give it first.
    pub duration: Duration,
}

/// The holds `work` declares: the value of its [`ANNOTATION`], if any.
pub fn annotation_of(work: &ManifestWork) -> Option<&str> {
    annotations::value(work, ANNOTATION)
}

/// Each manifest's holds for `work` (see [`holds`]).
pub fn holds_of(work: &ManifestWork) -> Vec<Result<Vec<Hold>, String>> {
    let raw: Vec<&Value> = work.spec.workload.manifests.iter().map(|m| &m.0).collect();
    holds(annotation_of(work), &raw)
}

/// Each manifest's holds under `annotation`; `Err` says why the annotation cannot give them (the
/// agent then reports the manifest's rule conditions Unknown rather than report a status early).
pub fn holds<M: Borrow<Value>>(
    annotation: Option<&str>,
    manifests: &[M],
) -> Vec<Result<Vec<Hold>, String>> {
    let n = manifests.len();
    let Some(text) = annotation else {
        return vec![Ok(Vec::new()); n];
    };
    let all_fail = |why: String| vec![Err(why); n];
    let entries = match annotations::entries(text, ANNOTATION, MAX_HOLDS, "holds") {
        Ok(entries) => entries,
        Err(why) => return all_fail(why),
    };
    let ids = annotations::ids(manifests);
    let mut out: Vec<Result<Vec<Hold>, String>> = vec![Ok(Vec::new()); n];
    for (k, entry) in entries.iter().enumerate() {
        let why = |what: &str| format!("entry {k} of {ANNOTATION}: {what}");
        let targets: Vec<usize> = match entry.get("manifest") {
            None => (0..n).collect(),
            Some(reference) => match find_manifest(reference, &ids) {
                Ok(i) => vec![i],
                Err(e) => return all_fail(why(&e)),
            },
        };
        let hold = hold_of(entry).map_err(|e| why(&e));
        for i in targets {
            let slot = &mut out[i];
            match (&hold, slot.as_mut()) {
                (Ok(hold), Ok(list)) => {
                    if list
                        .iter()
                        .any(|h| h.condition == hold.condition && h.status == hold.status)
                    {
                        *slot = Err(why(&format!(
                            "a second hold of {} {} for manifest {i}",
                            hold.condition, hold.status
                        )));
                    } else {
                        list.push(hold.clone());
                    }
                }
                (Err(e), Ok(_)) => *slot = Err(e.clone()),
                (_, Err(_)) => {}
            }
        }
    }
    out
}

fn hold_of(entry: &Value) -> Result<Hold, String> {
    let condition = match entry.get("condition").and_then(Value::as_str) {
        Some(c) if !c.is_empty() && c.len() <= 316 => c.to_string(),
        _ => return Err("\"condition\" is not a condition type".to_string()),
    };
    let status = match entry.get("status") {
        None => "True".to_string(),
        Some(Value::String(s)) if matches!(s.as_str(), "True" | "False" | "Unknown") => s.clone(),
        Some(_) => return Err("\"status\" is not True, False or Unknown".to_string()),
    };
    let duration = entry
        .get("for")
        .and_then(Value::as_str)
        .and_then(parse_duration)
        .filter(|d| *d <= MAX_HOLD)
        .ok_or_else(|| "\"for\" is not a duration of at most 24h (30s, 1m30s, 2h)".to_string())?;
    Ok(Hold {
        condition,
        status,
        duration,
    })
}

/// A duration as Kubernetes writes one: numbers with units `h`, `m`, `s`, `ms` (`1m30s`,
/// `0.5s`), or `0`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (seconds, unit_len) = if rest.starts_with("ms") {
            (0.001, 2)
        } else if rest.starts_with('h') {
            (3600.0, 1)
        } else if rest.starts_with('m') {
            (60.0, 1)
        } else if rest.starts_with('s') {
            (1.0, 1)
        } else {
            return None;
        };
        total += value * seconds;
        rest = &rest[unit_len..];
    }
    (total.is_finite() && total <= MAX_HOLD.as_secs_f64() * 2.0)
        .then(|| Duration::from_secs_f64(total))
}

/// A duration as [`parse_duration`] reads it back: `30s`, `1m30s`, `2h`, `1.5s`.
pub fn format_duration(d: Duration) -> String {
    let millis = d.as_millis();
    if !millis.is_multiple_of(1000) {
        return format!("{}s", d.as_secs_f64());
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// A reported condition, as the previous status has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reported<'a> {
    /// Its status.
    pub status: &'a str,
    /// Its reason.
    pub reason: &'a str,
    /// Its message.
    pub message: &'a str,
}

/// What to report for a rule's verdict under a hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The verdict, as the rule gave it.
    Report,
    /// Not yet: report the status it had (`status`, reason [`HELD_REASON`], `message`), and look
    /// again at `due`.
    Held {
        /// The status reported meanwhile: the one reported before, else `Unknown`.
        status: String,
        /// The message saying what is held and since when.
        message: String,
        /// When the rule first gave the held status.
        since: Timestamp,
        /// When the hold is over.
        due: Timestamp,
    },
}

/// Whether the rule's `verdict` (status and message) for `hold.condition` is reported now,
/// given what was reported before (`previous`) and the time `now`. Only a change to
/// `hold.status` is held: a verdict of another status, or one already reported, goes at once.
/// The time the rule first gave it is read back from a held condition's message, so the hold
/// counts across reconciles and restarts of an agent whose hub keeps the status; without it the
/// hold starts now (never early).
pub fn decide(
    hold: &Hold,
    verdict_status: &str,
    verdict_message: &str,
    previous: Option<Reported<'_>>,
    now: Timestamp,
) -> Decision {
    if verdict_status != hold.status || hold.duration.is_zero() {
        return Decision::Report;
    }
    let since = match previous {
        Some(p) if p.reason != HELD_REASON && p.status == verdict_status => {
            return Decision::Report;
        }
        Some(p) if p.reason == HELD_REASON => match pending_of(p.message) {
            Some((status, since)) if status == verdict_status && since <= now => since,
            _ => now,
        },
        _ => now,
    };
    let hold_for = SignedDuration::try_from(hold.duration).unwrap_or(SignedDuration::MAX);
    let due = since.checked_add(hold_for).unwrap_or(Timestamp::MAX);
    if now >= due {
        return Decision::Report;
    }
    let status = match previous {
        Some(p) => p.status.to_string(),
        None => "Unknown".to_string(),
    };
    Decision::Held {
        status,
        message: pending_message(verdict_status, since, hold.duration, verdict_message),
        since,
        due,
    }
}

/// The message of a held condition: `True since 2026-11-30T10:00:03.25Z, reported once it has
/// held for 30s: <the rule's message>`.
fn pending_message(status: &str, since: Timestamp, hold: Duration, message: &str) -> String {
    format!(
        "{status} since {since}, reported once it has held for {}: {message}",
        format_duration(hold)
    )
}

/// The status a held condition's message says is pending, and since when.
pub fn pending_of(message: &str) -> Option<(&str, Timestamp)> {
    let (status, rest) = message.split_once(" since ")?;
    let (since, _) = rest.split_once(", reported once it has held for ")?;
    Some((status, since.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn degraded(secs: u64) -> Hold {
        Hold {
            condition: "Degraded".into(),
            status: "True".into(),
            duration: Duration::from_secs(secs),
        }
    }

    #[test]
    fn durations_read_as_kubernetes_writes_them() {
        for (text, secs) in [
            ("30s", 30.0),
            ("1m30s", 90.0),
            ("2h", 7200.0),
            ("0.5s", 0.5),
            ("250ms", 0.25),
            ("0", 0.0),
        ] {
            assert_eq!(
                parse_duration(text).map(|d| d.as_secs_f64()),
                Some(secs),
                "{text}"
            );
        }
        for text in ["", "30", "s", "1d", "-1s", "1m30", "nan"] {
            assert_eq!(parse_duration(text), None, "{text}");
        }
        for secs in [30, 90, 3600, 3661] {
            let d = Duration::from_secs(secs);
            assert_eq!(parse_duration(&format_duration(d)), Some(d));
        }
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
    }

    #[test]
    fn holds_are_read_per_manifest() {
        let manifests = [
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "a"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "a"}}),
        ];
        let text = r#"[{"condition": "Degraded", "for": "30s"},
            {"manifest": 0, "condition": "Progressing", "status": "False", "for": "1m"}]"#;
        let got = holds(Some(text), &manifests);
        assert_eq!(got[0].as_ref().map(Vec::len), Ok(2), "{got:?}");
        assert_eq!(got[1], Ok(vec![degraded(30)]));
        assert_eq!(holds(None, &manifests), vec![Ok(Vec::new()); 2]);
        for bad in [
            "x",
            "{}",
            r#"[{"manifest": 5, "condition": "Degraded", "for": "1s"}]"#,
        ] {
            assert!(
                holds(Some(bad), &manifests).iter().all(Result::is_err),
                "{bad}"
            );
        }
        let bad_entry = r#"[{"manifest": 1, "condition": "Degraded", "for": "soon"}]"#;
        let got = holds(Some(bad_entry), &manifests);
        assert!(got[0].is_ok() && got[1].is_err(), "{got:?}");
        let too_long = r#"[{"condition": "Degraded", "for": "25h"}]"#;
        assert!(holds(Some(too_long), &manifests).iter().all(Result::is_err));
        let twice =
            r#"[{"condition": "Degraded", "for": "1s"}, {"condition": "Degraded", "for": "2s"}]"#;
        assert!(holds(Some(twice), &manifests).iter().all(Result::is_err));
    }

    /// Reports the rule's verdicts at the given seconds under `hold`, each decision made over the
    /// condition the one before reported: what was reported at each.
    fn run(hold: &Hold, verdicts: &[(i64, &str)]) -> Vec<(i64, String, String)> {
        let mut reported: Option<(String, String, String)> = None;
        let mut out = Vec::new();
        for &(t, verdict) in verdicts {
            let previous = reported.as_ref().map(|(s, r, m)| Reported {
                status: s,
                reason: r,
                message: m,
            });
            let now = match decide(hold, verdict, "rule says so", previous, at(t)) {
                Decision::Report => (
                    verdict.to_string(),
                    "ConditionRuleEvaluated".to_string(),
                    "rule says so".to_string(),
                ),
                Decision::Held {
                    status, message, ..
                } => (status, HELD_REASON.to_string(), message),
            };
            out.push((t, now.0.clone(), now.1.clone()));
            reported = Some(now);
        }
        out
    }

    #[test]
    fn a_flapping_verdict_never_reaches_the_held_status() {
        // Failing for 10 s at a time, healthy in between: Degraded stays False.
        let mut verdicts = vec![(0, "False")];
        for cycle in 0..6 {
            verdicts.push((cycle * 20 + 5, "True"));
            verdicts.push((cycle * 20 + 15, "True"));
            verdicts.push((cycle * 20 + 20, "False"));
        }
        let got = run(&degraded(30), &verdicts);
        assert!(
            got.iter().all(|(_, status, _)| status == "False"),
            "{got:?}"
        );
        // Without the hold it flips every time.
        let flips = verdicts.iter().filter(|(_, v)| *v == "True").count();
        assert_eq!(flips, 12);
    }

    #[test]
    fn a_steady_verdict_is_reported_once_the_hold_is_over_never_before() {
        let got = run(
            &degraded(30),
            &[
                (0, "False"),
                (1, "True"),
                (20, "True"),
                (30, "True"),
                (31, "True"),
                (40, "True"),
            ],
        );
        let statuses: Vec<&str> = got.iter().map(|(_, s, _)| s.as_str()).collect();
        assert_eq!(
            statuses,
            ["False", "False", "False", "False", "True", "True"]
        );
        assert_eq!(got[1].2, HELD_REASON);
        assert_eq!(got[4].2, "ConditionRuleEvaluated");
    }

    #[test]
    fn the_held_message_says_since_when_and_reads_back() {
        let Decision::Held {
            message,
            since,
            due,
            status,
        } = decide(&degraded(30), "True", "0 of 3 ready", None, at(0))
        else {
            panic!("held");
        };
        assert_eq!(status, "Unknown", "nothing was reported before");
        assert_eq!(since, at(0));
        assert_eq!(due, at(30));
        assert!(
            message.ends_with("reported once it has held for 30s: 0 of 3 ready"),
            "{message}"
        );
        assert_eq!(pending_of(&message), Some(("True", at(0))));
        // A held message from the future (a clock set back) starts the hold again.
        let from_future = Reported {
            status: "False",
            reason: HELD_REASON,
            message: &message,
        };
        let Decision::Held { since, .. } =
            decide(&degraded(30), "True", "x", Some(from_future), at(-100))
        else {
            panic!("held");
        };
        assert_eq!(since, at(-100));
    }

    #[test]
    fn other_statuses_and_zero_holds_go_at_once() {
        assert_eq!(
            decide(&degraded(30), "False", "", None, at(0)),
            Decision::Report
        );
        assert_eq!(
            decide(&degraded(0), "True", "", None, at(0)),
            Decision::Report
        );
        let reported = Reported {
            status: "True",
            reason: "ConditionRuleEvaluated",
            message: "",
        };
        assert_eq!(
            decide(&degraded(30), "True", "", Some(reported), at(0)),
            Decision::Report,
            "already reported: no new hold"
        );
    }
}
