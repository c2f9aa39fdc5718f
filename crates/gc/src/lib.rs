//! TTL garbage collection of completed ManifestWorks (semantics §6).
//!
//! The controller asks [`next_action`] what to do with a work it has just reconciled: nothing
//! ([`GcAction::NotEligible`]), requeue for exactly the time left ([`GcAction::WaitFor`]), or
//! delete now ([`GcAction::DeleteNow`]). At the deadline it calls [`collect`], which re-reads the
//! work on the hub, re-checks it, deletes it with a UID precondition and records an Event.
//! Deadlines are derived only from the hub state, so after a restart nothing is deleted early and
//! nothing is forgotten.

mod collect;
mod deadline;

#[cfg(test)]
mod collect_tests;

pub use collect::{
    EVENT_ACTION, EVENT_REASON, FORBIDDEN_EVENT_REASON, FORBIDDEN_RETRY_FIRST, FORBIDDEN_RETRY_MAX,
    GcError, GcOutcome, KubeWorks, WorkDeleter, collect, collect_at, event_reporter,
    forbidden_retry_after,
};
pub use deadline::{
    GcAction, MANIFESTWORKREPLICASET_LABEL, complete_since, deadline, deleted_by_ttl, next_action,
    ttl_seconds,
};
