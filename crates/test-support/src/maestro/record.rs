//! What a source keeps of what it decided, for tests and benchmarks to read: counters, verdicts,
//! status arrivals, the resources it forgot.

use std::collections::BTreeMap;
use std::time::Instant;

use chrono::{DateTime, Utc};
use cloudevents::types::EventType;
use serde_json::Value;

use super::rules::StatusOutcome;

/// A resource the source forgot after the agent's `Deleted=True` status.
#[derive(Clone, Debug, PartialEq)]
pub struct HardDeletion {
    /// The resource id.
    pub id: String,
    /// When the source took the `Deleted` status.
    pub at: DateTime<Utc>,
    /// Whether the source had asked for the deletion (false: the agent's TTL collection).
    pub requested: bool,
    /// The status that carried `Deleted=True` (the work's last conditions).
    pub status: Value,
}

/// One judged status event: which event, about which resource, and the decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusVerdict {
    /// The event's `id`.
    pub event_id: String,
    /// The event's `resourceid` ("" when missing).
    pub resource_id: String,
    /// The decision.
    pub outcome: StatusOutcome,
}

/// One status event as it arrived, for latency measurements (`make bench-mqtt`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusArrival {
    /// When the source's event loop took the message off the connection.
    pub at: Instant,
    /// The event's `resourceid` ("" when missing).
    pub resource_id: String,
    /// `status.update_request` or `status.resync_response`.
    pub event_type: EventType,
    /// The status has `Applied` = `True`.
    pub applied: bool,
    /// The status has `Available` = `True`.
    pub available: bool,
    /// The status has `Deleted` = `True`.
    pub deleted: bool,
    /// What the source decided about it.
    pub outcome: StatusOutcome,
}

/// What the source counted since it started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceCounters {
    /// MQTT messages received from agents.
    pub received: u64,
    /// Messages that were no CloudEvent, of an unknown type, or missing what their type needs.
    pub malformed: u64,
    /// Status events stored.
    pub accepted: u64,
    /// Status events equal to the stored one (redeliveries): no-ops.
    pub unchanged: u64,
    /// Status events whose `resourceversion` was not the stored version.
    pub stale: u64,
    /// Status events refused for their `sequenceid`.
    pub rejected_sequence: u64,
    /// Status events refused for their `originalsource`.
    pub rejected_source: u64,
    /// Status events whose `clustername` was not the resource's consumer.
    pub rejected_consumer: u64,
    /// Status events about resources the source does not have.
    pub unknown_resource: u64,
    /// Resources hard-deleted after a `Deleted=True` status.
    pub deleted: u64,
    /// `Deleted=True` statuses for resources that were not soft-deleted (then judged normally).
    pub deleted_unrequested: u64,
    /// `spec.resync_request` events received.
    pub spec_resync_requests: u64,
    /// `spec.resync_response` events published in answer.
    pub spec_resync_responses: u64,
    /// Agent events of a known type the source does not act on.
    pub ignored: u64,
    /// Status events received, by type (`status.update_request`, `status.resync_response`).
    pub status_events_by_type: BTreeMap<EventType, u64>,
    /// CloudEvents published by the source, by type (raw publishes not included).
    pub sent_by_type: BTreeMap<EventType, u64>,
    /// Successful subscriptions to the agent events (1 + resubscriptions after broker loss).
    pub subscriptions: u64,
}

impl SourceCounters {
    /// Counts one judged status event.
    pub fn count(&mut self, outcome: &StatusOutcome) {
        match outcome {
            StatusOutcome::Accepted => self.accepted += 1,
            StatusOutcome::Unchanged => self.unchanged += 1,
            StatusOutcome::Deleted => self.deleted += 1,
            StatusOutcome::Stale { .. } => self.stale += 1,
            StatusOutcome::RejectedSequence(_) => self.rejected_sequence += 1,
            StatusOutcome::RejectedSource(_) => self.rejected_source += 1,
            StatusOutcome::RejectedConsumer { .. } => self.rejected_consumer += 1,
            StatusOutcome::UnknownResource => self.unknown_resource += 1,
            StatusOutcome::Malformed(_) => self.malformed += 1,
        }
    }
}
