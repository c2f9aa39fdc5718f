//! What the source and its front ends share: its errors, and how a front end puts events on its
//! wire.

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
    #[error(
        "{0:?} cannot appear in an MQTT topic or a Pub/Sub subscription (it must match [a-z0-9-]+)"
    )]
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
    /// The fake Pub/Sub server did not start, or refused a topic or subscription.
    #[error("pubsub: {0}")]
    PubSub(String),
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
