//! The gRPC transport (`io.cloudevents.v1.CloudEventService`, OCM's gRPC server and Maestro's gRPC
//! broker): the protobuf messages, the binding of a CloudEvent onto them, and the agent's client.

pub mod binding;
pub mod client;
pub mod proto;

pub use binding::{from_proto, to_proto};
pub use client::{GrpcClient, GrpcClientOptions, GrpcPublisher, GrpcSubscribedHook};
