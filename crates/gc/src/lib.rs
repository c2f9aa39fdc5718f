//! TTL garbage collection of completed ManifestWorks (semantics §6).
//!
//! Plain functions over plain data; the agent does the reads and writes through its hub seam.
//! The controller asks [`next_action`] what to do with a work it has just reconciled: nothing
//! ([`GcAction::NotEligible`]), requeue for exactly the time left ([`GcAction::WaitFor`]), or
//! delete now ([`GcAction::DeleteNow`]). At the deadline the agent re-reads the work and asks
//! [`recheck`] whether it is still due, deletes it with a UID precondition, classifies the answer
//! ([`delete_answered`]) and records the Event ([`deletion_event`], [`forbidden_event`]).
//! Deadlines are derived only from the hub state, so after a restart nothing is deleted early and
//! nothing is forgotten.

mod collect;
mod deadline;

pub use collect::{
    DeleteAnswer, EVENT_ACTION, EVENT_REASON, FORBIDDEN_EVENT_REASON, FORBIDDEN_RETRY_FIRST,
    FORBIDDEN_RETRY_MAX, GcError, GcOutcome, delete_answered, deletion_event, event_reporter,
    forbidden_event, forbidden_retry_after, recheck,
};
pub use deadline::{
    GcAction, MANIFESTWORKREPLICASET_LABEL, complete_since, deadline, deleted_by_ttl, next_action,
    ttl_seconds,
};
