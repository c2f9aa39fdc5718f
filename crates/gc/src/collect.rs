//! The I/O side: re-read, re-check and delete a due work on the hub, then record an Event.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Resource, ResourceExt};
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

/// What [`collect`] did.
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

/// What a TTL deletion needs from the hub: read the work, delete it under a UID precondition,
/// record an Event on it.
pub trait WorkDeleter: Sync {
    /// Reads work `name`; `None` when it is gone.
    fn get(
        &self,
        name: &str,
    ) -> impl std::future::Future<Output = Result<Option<ManifestWork>, kube::Error>> + Send;
    /// Deletes work `name` if it is still the object `uid` (a 409 Conflict otherwise).
    fn delete(
        &self,
        name: &str,
        uid: &str,
    ) -> impl std::future::Future<Output = Result<(), kube::Error>> + Send;
    /// Records `event` on `work`.
    fn publish(
        &self,
        work: &ManifestWork,
        event: Event,
    ) -> impl std::future::Future<Output = Result<(), kube::Error>> + Send;
}

/// A Kubernetes hub: the ManifestWork API of a namespace and an Event recorder.
pub struct KubeWorks<'a> {
    /// The works.
    pub api: &'a Api<ManifestWork>,
    /// Records Events on them.
    pub recorder: &'a Recorder,
}

impl WorkDeleter for KubeWorks<'_> {
    async fn get(&self, name: &str) -> Result<Option<ManifestWork>, kube::Error> {
        self.api.get_opt(name).await
    }

    async fn delete(&self, name: &str, uid: &str) -> Result<(), kube::Error> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        self.api.delete(name, &params).await.map(|_| ())
    }

    async fn publish(&self, work: &ManifestWork, event: Event) -> Result<(), kube::Error> {
        self.recorder.publish(&event, &work.object_ref(&())).await
    }
}

/// The Event reporter the agent uses: controller `work-agent`, instance e.g. the pod name.
pub fn event_reporter(instance: Option<String>) -> Reporter {
    Reporter {
        controller: "work-agent".into(),
        instance,
    }
}

/// Deletes the work `name` if it is still the object `expected_uid`, still Complete and past its
/// TTL deadline by the clock now. The delete carries a UID precondition, so a work re-created
/// under the same name in between is never deleted by the old deadline. With `deletion_event`,
/// an Event is recorded on the deleted work (one more hub write; a failure to record it is logged,
/// not returned: the work is gone). A refused deletion always gets a Warning Event.
pub async fn collect(
    hub: &impl WorkDeleter,
    deletion_event: bool,
    name: &str,
    expected_uid: &str,
) -> Result<GcOutcome, GcError> {
    collect_at(hub, deletion_event, name, expected_uid, Timestamp::now).await
}

/// [`collect`] with an injected clock, read after the work is fetched.
pub async fn collect_at(
    hub: &impl WorkDeleter,
    deletion_event: bool,
    name: &str,
    expected_uid: &str,
    now: impl Fn() -> Timestamp,
) -> Result<GcOutcome, GcError> {
    let read = |source| GcError::Read {
        name: name.to_owned(),
        source,
    };
    let Some(work) = hub.get(name).await.map_err(read)? else {
        return Ok(GcOutcome::AlreadyGone);
    };
    if work.metadata.uid.as_deref() != Some(expected_uid) {
        return Ok(GcOutcome::Replaced);
    }
    if work.metadata.deletion_timestamp.is_some() {
        return Ok(GcOutcome::AlreadyGone);
    }
    let lag = match next_action(&work, now()) {
        GcAction::NotEligible => return Ok(GcOutcome::NoLongerComplete),
        GcAction::WaitFor(left) => return Ok(GcOutcome::NotYetDue(left)),
        GcAction::DeleteNow { lag } => lag,
    };
    match hub.delete(name, expected_uid).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(GcOutcome::AlreadyGone),
        // A failed UID precondition is a 409: the name now belongs to another object.
        Err(kube::Error::Api(s)) if s.is_conflict() => return Ok(GcOutcome::Replaced),
        Err(kube::Error::Api(s)) if s.is_forbidden() => {
            record_forbidden_event(hub, &work, &s.message).await;
            return Ok(GcOutcome::Forbidden);
        }
        Err(source) => {
            return Err(GcError::Delete {
                name: name.to_owned(),
                source,
            });
        }
    }
    tracing::info!(
        namespace = work.namespace().unwrap_or_default(),
        name,
        lag_seconds = lag.as_secs_f64(),
        "deleted ManifestWork after its TTL"
    );
    if deletion_event {
        record_event(hub, &work, lag).await;
    }
    Ok(GcOutcome::Deleted { lag })
}

async fn record_event(hub: &impl WorkDeleter, work: &ManifestWork, lag: Duration) {
    let event = Event {
        type_: EventType::Normal,
        reason: EVENT_REASON.into(),
        note: Some(event_note(ttl_seconds(work).unwrap_or(0), lag)),
        action: EVENT_ACTION.into(),
        secondary: None,
    };
    if let Err(e) = hub.publish(work, event).await {
        tracing::warn!(name = work.name_any(), error = %e, "recording the TTL deletion Event failed");
    }
}

async fn record_forbidden_event(hub: &impl WorkDeleter, work: &ManifestWork, message: &str) {
    let event = Event {
        type_: EventType::Warning,
        reason: FORBIDDEN_EVENT_REASON.into(),
        note: Some(forbidden_note(message)),
        action: EVENT_ACTION.into(),
        secondary: None,
    };
    if let Err(e) = hub.publish(work, event).await {
        tracing::warn!(name = work.name_any(), error = %e, "recording the forbidden TTL deletion Event failed");
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
