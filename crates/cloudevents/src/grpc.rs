//! The gRPC transport (`io.cloudevents.v1.CloudEventService`, OCM's gRPC server and Maestro's gRPC
//! broker): the protobuf messages, the binding of a CloudEvent onto them, and the transport the
//! agent's client drives.

pub mod binding;
pub mod proto;
pub mod transport;

pub use binding::{from_proto, to_proto};
pub use transport::{GrpcClientOptions, GrpcSender, GrpcTransport};

use crate::Error;
use crate::client::{Client, SubscribedHook};

/// Starts the agent's client on the gRPC source of `opts`.
pub fn start(opts: &GrpcClientOptions, on_subscribed: SubscribedHook) -> Result<Client, Error> {
    Ok(Client::start(
        GrpcTransport::new(opts)?,
        opts,
        on_subscribed,
    ))
}
