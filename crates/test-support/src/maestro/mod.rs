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

pub use record::{HardDeletion, SourceCounters, StatusArrival, StatusVerdict};
pub use rules::{
    StatusOutcome, StoredResource, apply_status, check_sequence, condition_true, in_creation_order,
    is_deleted, snowflake_parts,
};
pub use source::{CreateOptions, Maestro, Taken, WAIT_POLL};
pub use spec::{ResyncAnswer, resync_answer, spec_event};

use cloudevents::CloudEvent;

/// Why a source operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No resource with this id (never created, or hard-deleted).
    #[error("no resource {0:?}")]
    UnknownResource(String),
    /// A resource with this id already exists.
    #[error("resource {0:?} already exists")]
    Exists(String),
    /// The resource is soft-deleted; its spec cannot change any more.
    #[error("resource {0:?} is being deleted")]
    Deleting(String),
    /// The metadata given for a resource is not a JSON object.
    #[error("metadata must be a JSON object, got {0}")]
    BadMetadata(String),
    /// A source id or consumer name cannot be addressed on the wire.
    #[error("{0:?} cannot appear in an MQTT topic (it must match [a-z0-9-]+)")]
    BadName(String),
    /// The MQTT broker address is not `host:port`.
    #[error("broker address {0:?} is not host:port")]
    BadBroker(String),
    /// The MQTT front end was not subscribed to the agent events in time.
    #[error("not subscribed at {broker} within {timeout:?}; last broker error: {last_error}")]
    NotSubscribed {
        /// The broker address.
        broker: String,
        /// How long the source waited.
        timeout: std::time::Duration,
        /// The last error the event loop saw (or "none").
        last_error: String,
    },
    /// The MQTT front end's publishing task has stopped.
    #[error("the source's publishing task has stopped")]
    Closed,
    /// The gRPC front end's listening socket could not be opened.
    #[error("listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An event could not be put on the wire.
    #[error("encode: {0}")]
    Encode(#[from] cloudevents::Error),
    /// The gRPC front end's TLS material is unusable.
    #[error("tls: {0}")]
    Tls(String),
}

/// How a front end puts the source's events on its wire.
pub trait Wire: Send + Sync {
    /// Sends `ev` to the agents of `consumer`. Called with the store locked, so that the wire
    /// order is the store's order: it must not block.
    fn send(&self, consumer: &str, ev: &CloudEvent) -> Result<(), Error>;

    /// Whether `consumer` can be addressed on this wire.
    fn check_consumer(&self, consumer: &str) -> Result<(), Error> {
        let _ = consumer;
        Ok(())
    }
}

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
