//! The messages of `io.cloudevents.v1.CloudEventService` (OCM's `cloudevent.proto`), derived by
//! hand with prost so that the build needs no `protoc`. Field numbers and types are the proto's;
//! the attribute map is ordered so that an encoding is deterministic (what Go's deterministic
//! marshalling gives, and what golden tests can compare).

use std::collections::BTreeMap;

/// Full name of the service.
pub const SERVICE: &str = "io.cloudevents.v1.CloudEventService";
/// Path of `Publish`.
pub const PUBLISH_PATH: &str = "/io.cloudevents.v1.CloudEventService/Publish";
/// Path of `Subscribe`.
pub const SUBSCRIBE_PATH: &str = "/io.cloudevents.v1.CloudEventService/Subscribe";
/// The response header the source sends before any event of a subscription.
pub const SUBSCRIPTION_ID_HEADER: &str = "subscription-id";

/// A CloudEvent in the protobuf format.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CloudEvent {
    /// `id`.
    #[prost(string, tag = "1")]
    pub id: String,
    /// `source`.
    #[prost(string, tag = "2")]
    pub source: String,
    /// `specversion`.
    #[prost(string, tag = "3")]
    pub spec_version: String,
    /// `type`.
    #[prost(string, tag = "4")]
    pub r#type: String,
    /// Optional attributes and extensions, keyed as OCM's Go binding keys them (`ce-<name>`,
    /// and `contenttype` for the data content type).
    #[prost(btree_map = "string, message", tag = "5")]
    pub attributes: BTreeMap<String, CloudEventAttributeValue>,
    /// The data.
    #[prost(oneof = "Data", tags = "6, 7, 8")]
    pub data: Option<Data>,
}

/// The data of a [`CloudEvent`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Data {
    /// Bytes: what OCM's Go binding always writes.
    #[prost(bytes, tag = "6")]
    BinaryData(Vec<u8>),
    /// Text.
    #[prost(string, tag = "7")]
    TextData(String),
    /// A protobuf message (never used by the work protocol).
    #[prost(message, tag = "8")]
    ProtoData(Any),
}

/// One attribute value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CloudEventAttributeValue {
    /// The value.
    #[prost(oneof = "Attr", tags = "1, 2, 3, 4, 5, 6, 7")]
    pub attr: Option<Attr>,
}

/// The typed value of a [`CloudEventAttributeValue`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Attr {
    /// `ce_boolean`.
    #[prost(bool, tag = "1")]
    CeBoolean(bool),
    /// `ce_integer`: 32 bits, as the CloudEvents type system says.
    #[prost(int32, tag = "2")]
    CeInteger(i32),
    /// `ce_string`.
    #[prost(string, tag = "3")]
    CeString(String),
    /// `ce_bytes`.
    #[prost(bytes, tag = "4")]
    CeBytes(Vec<u8>),
    /// `ce_uri`.
    #[prost(string, tag = "5")]
    CeUri(String),
    /// `ce_uri_ref`.
    #[prost(string, tag = "6")]
    CeUriRef(String),
    /// `ce_timestamp`.
    #[prost(message, tag = "7")]
    CeTimestamp(Timestamp),
}

/// `google.protobuf.Timestamp`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Timestamp {
    /// Seconds since the Unix epoch.
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    /// Nanoseconds within the second (0..=999,999,999).
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Any {
    /// The message's type URL.
    #[prost(string, tag = "1")]
    pub type_url: String,
    /// The encoded message.
    #[prost(bytes, tag = "2")]
    pub value: Vec<u8>,
}

/// `Publish`'s request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PublishRequest {
    /// The event.
    #[prost(message, optional, tag = "1")]
    pub event: Option<CloudEvent>,
}

/// `Subscribe`'s request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SubscriptionRequest {
    /// Original source of the events wanted; empty for all (what agents send).
    #[prost(string, tag = "1")]
    pub source: String,
    /// The agent's cluster.
    #[prost(string, tag = "2")]
    pub cluster_name: String,
    /// The data type, e.g. `io.open-cluster-management.works.v1alpha1.manifestbundles`.
    #[prost(string, tag = "3")]
    pub data_type: String,
}
