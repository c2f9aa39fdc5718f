//! A Maestro-shaped source without a wire: the source side of the CloudEvents work protocol as
//! Maestro's server runs it, for tests, benchmarks and chaos runs. Its front ends put its events on
//! a wire and hand it what arrives: [`crate::mqtt_source`] (Maestro over MQTT topics) and
//! [`crate::grpc_source`] (the CloudEvents gRPC service of OCM's and Maestro's brokers).
//!
//! [`Maestro`] keeps a resource store (consumer, version, ManifestBundle, soft delete, the latest
//! accepted status with its hash and sequence id), sends spec events for what changes in it, and
//! judges the agent's status events with Maestro's rules ([`rules`]):
//!
//! - `originalsource` must be the source id (`pkg/client/cloudevents/codec.go`);
//! - the resource must exist (else skipped) and belong to the event's `clustername`;
//! - `Deleted=True` in the conditions of a soft-deleted resource hard-deletes it, before any
//!   version or sequence check (`event_server.go`);
//! - `resourceversion` must equal the stored version, else the status is stale and disregarded;
//! - a redelivery of the stored status event (same `sequenceid` and data) is a no-op;
//! - `sequenceid` must be a snowflake from the same node as the stored one and newer by
//!   (time, step) (`pkg/services/util.go`).
//!
//! A `spec.resync_request` is answered as the front end's real counterpart does
//! ([`ResyncAnswer`]). Everything the source decides is counted ([`SourceCounters`]) and every
//! agent event is kept ([`Maestro::events`]) for wire assertions; every status event is also kept
//! with its arrival time ([`Maestro::status_arrivals`]) for the benchmark. For chaos runs it
//! injects faults into its traffic ([`Maestro::faults`], see [`crate::wire_faults`]).

mod record;
pub mod rules;
mod source;
pub mod spec;
mod wire;

pub use record::{HardDeletion, SourceCounters, StatusArrival, StatusVerdict};
pub use rules::{
    StatusOutcome, StoredResource, apply_status, check_sequence, condition_true, in_creation_order,
    is_deleted, snowflake_parts,
};
pub use source::{CreateOptions, Maestro, Taken, WAIT_POLL};
pub use spec::{ResyncAnswer, resync_answer, spec_event};
pub use wire::{Error, Wire};

/// A stored resource for unit tests: version, consumer and creation order as given.
#[cfg(test)]
pub(crate) fn stored(id: &str, consumer: &str, version: i64, ordinal: u64) -> StoredResource {
    let bundle = serde_json::json!({"manifests": [{"apiVersion": "v1", "kind": "ConfigMap"}]});
    StoredResource {
        version,
        ..StoredResource::new(
            id,
            consumer,
            serde_json::json!({"name": id}),
            bundle,
            ordinal,
        )
    }
}
