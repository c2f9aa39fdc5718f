//! The CloudEvents work protocol as OCM agents speak it to a source (Maestro, OCM's gRPC server):
//! the event model, the ManifestBundle codec, the MQTT 5, gRPC and Pub/Sub bindings, the transport config
//! files, the `sequenceid` generator, and one client with reconnect, resubscribe hook and a
//! loss-free, latest-per-work publish queue that drives a transport per wire (MQTT, gRPC, Pub/Sub).
//! Layered like OCM's sdk-go: model → codec → binding → transport → client.

#![warn(missing_docs)]

pub mod ceiling;
pub mod client;
pub mod codec;
pub mod config;
pub mod error;
pub mod event;
pub mod grpc;
pub mod mqtt;
pub mod pubsub;
pub mod queue;
pub mod snowflake;
#[cfg(test)]
mod test_events;
pub mod tls;
pub mod transport;
pub mod types;

pub use error::Error;
pub use event::{CloudEvent, ExtValue};
pub use types::{EventType, SubResource};
