//! What a due work's deletion decides, as plain functions: re-check the work read back from the
//! hub, classify the delete's answer, the Events to record. The reads and writes are the agent's
//! (through its hub seam).

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Event, EventType, Reporter};
use work_api::ManifestWork;

use crate::deadline::{GcAction, next_action, ttl_seconds};

/// Reason of the Event recorded on a ManifestWork deleted by TTL.
pub const EVENT_REASON: &str = "TTLAfterFinishedExpired";
/// Action of that Event.
pub const EVENT_ACTION: &str = "DeleteManifestWork";
/// Reason of the Warning Event recorded when the hub forbids the TTL deletion.
pub const FORBIDDEN_EVENT_REASON: &str = "TTLDeletionForbidden";

/// First retry of a forbidden TTL deletion; each further failure doubles it.
pub const FORBIDDEN_RETRY_FIRST: Duration = Duration::from_secs(5);
/// Longest wait between two attempts at a forbidden TTL deletion.
pub const FORBIDDEN_RETRY_MAX: Duration = Duration::from_secs(300);

/// What a TTL deletion did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcOutcome {
    /// Deleted on the hub; `lag` is the time between the deadline and the delete call.
    Deleted {
        /// Time past the deadline when the delete was sent.
        lag: Duration,
    },
    /// The work is no longer Complete, or its TTL was removed: nothing to do.
    NoLongerComplete,
    /// The deadline moved into the future (the TTL was raised, or `Complete` transitioned
    /// again): requeue after this long.
    NotYetDue(Duration),
    /// A different object (another UID) now has the name: the old deadline does not apply to it.
    Replaced,
    /// The work is gone, or already being deleted.
    AlreadyGone,
    /// The hub refused the delete (403): the agent lacks `delete` on manifestworks there (an
    /// OCM hub with only upstream's RBAC). A Warning Event was recorded on the work.
    Forbidden,
}

/// How long to wait before attempt `failures + 1` at a forbidden deletion: exponential from
/// [`FORBIDDEN_RETRY_FIRST`], capped at [`FORBIDDEN_RETRY_MAX`].
pub fn forbidden_retry_after(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FORBIDDEN_RETRY_FIRST
        .saturating_mul(1u32 << doublings)
        .min(FORBIDDEN_RETRY_MAX)
}

/// Errors talking to the hub. Not-found and UID conflicts are outcomes, not errors.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// Reading the ManifestWork failed.
    #[error("reading ManifestWork {name}: {source}")]
    Read {
        /// Work name.
        name: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// Deleting the ManifestWork failed.
    #[error("deleting ManifestWork {name}: {source}")]
    Delete {
        /// Work name.
        name: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
}

/// The Event reporter the agent uses: controller `work-agent`, instance e.g. the pod name.
pub fn event_reporter(instance: Option<String>) -> Reporter {
    Reporter {
        controller: "work-agent".into(),
        instance,
    }
}

/// What the work read back from the hub says of a TTL deletion that was due: delete it now
/// (`Ok`, with the time past the deadline by the clock `now`), or the outcome that stops it. A
/// work that is another object (`expected_uid` differs), being deleted, no longer Complete or
/// given more time is not deleted.
pub fn recheck(
    work: Option<&ManifestWork>,
    expected_uid: &str,
    now: Timestamp,
) -> Result<Duration, GcOutcome> {
    let Some(work) = work else {
        return Err(GcOutcome::AlreadyGone);
    };
    if work.metadata.uid.as_deref() != Some(expected_uid) {
        return Err(GcOutcome::Replaced);
    }
    if work.metadata.deletion_timestamp.is_some() {
        return Err(GcOutcome::AlreadyGone);
    }
    match next_action(work, now) {
        GcAction::NotEligible => Err(GcOutcome::NoLongerComplete),
        GcAction::WaitFor(left) => Err(GcOutcome::NotYetDue(left)),
        GcAction::DeleteNow { lag } => Ok(lag),
    }
}

/// The hub's answer to the UID-preconditioned delete of a due work.
#[derive(Debug)]
pub enum DeleteAnswer {
    /// Deleted (or marked for deletion).
    Deleted,
    /// Already gone.
    AlreadyGone,
    /// The UID precondition failed (409): the name belongs to another object now.
    Replaced,
    /// The hub refused (403), with its message.
    Forbidden(String),
    /// Any other failure.
    Failed(kube::Error),
}

/// Classifies the delete's answer.
pub fn delete_answered(answer: Result<(), kube::Error>) -> DeleteAnswer {
    match answer {
        Ok(()) => DeleteAnswer::Deleted,
        Err(kube::Error::Api(s)) if s.is_not_found() => DeleteAnswer::AlreadyGone,
        Err(kube::Error::Api(s)) if s.is_conflict() => DeleteAnswer::Replaced,
        Err(kube::Error::Api(s)) if s.is_forbidden() => DeleteAnswer::Forbidden(s.message),
        Err(e) => DeleteAnswer::Failed(e),
    }
}

/// The Normal Event recorded on a work deleted `lag` past its deadline.
pub fn deletion_event(work: &ManifestWork, lag: Duration) -> Event {
    Event {
        type_: EventType::Normal,
        reason: EVENT_REASON.into(),
        note: Some(event_note(ttl_seconds(work).unwrap_or(0), lag)),
        action: EVENT_ACTION.into(),
        secondary: None,
    }
}

/// The Warning Event recorded on a work whose deletion the hub forbade with `message`.
pub fn forbidden_event(message: &str) -> Event {
    Event {
        type_: EventType::Warning,
        reason: FORBIDDEN_EVENT_REASON.into(),
        note: Some(forbidden_note(message)),
        action: EVENT_ACTION.into(),
        secondary: None,
    }
}

/// The Warning Event's message: what the hub said and what grants the permission.
fn forbidden_note(message: &str) -> String {
    let mut note = format!(
        "TTL deletion forbidden by the hub ({message}); grant delete on manifestworks in this \
         namespace (deploy/hub-ocm in the work agent's manifests). Retrying with backoff."
    );
    // Event notes are limited to 1 kB by the API server.
    if note.len() > 1000 {
        let mut end = 1000;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
    }
    note
}

/// The Event message, e.g. "Deleted 30s after completion (ttlSecondsAfterFinished), 0.120s past
/// the deadline".
fn event_note(ttl: i64, lag: Duration) -> String {
    format!(
        "Deleted {ttl}s after completion (ttlSecondsAfterFinished), {:.3}s past the deadline",
        lag.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_note_names_ttl_and_lag() {
        assert_eq!(
            event_note(15, Duration::from_millis(120)),
            "Deleted 15s after completion (ttlSecondsAfterFinished), 0.120s past the deadline"
        );
    }

    #[test]
    fn forbidden_retries_back_off_exponentially_up_to_a_cap() {
        let secs = |n| forbidden_retry_after(n).as_secs();
        assert_eq!(
            [secs(0), secs(1), secs(2), secs(3), secs(4)],
            [5, 5, 10, 20, 40]
        );
        assert_eq!(secs(7), 300);
        assert_eq!(secs(u32::MAX), 300);
    }

    #[test]
    fn forbidden_note_names_the_fix_and_stays_short() {
        let note =
            forbidden_note("manifestworks.work.open-cluster-management.io \"w\" is forbidden");
        assert!(
            note.contains("is forbidden") && note.contains("deploy/hub-ocm"),
            "{note}"
        );
        assert!(forbidden_note(&"é".repeat(2000)).len() <= 1000);
    }

    #[test]
    fn reporter_is_the_agent() {
        let r = event_reporter(Some("pod-1".into()));
        assert_eq!(r.controller, "work-agent");
        assert_eq!(r.instance.as_deref(), Some("pod-1"));
    }
}
