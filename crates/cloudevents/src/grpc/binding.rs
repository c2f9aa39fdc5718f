//! CloudEvent ↔ protobuf `CloudEvent`, as OCM's Go binding (sdk-go `grpc/protocol`) writes and
//! reads it, which is not quite the CloudEvents protobuf format: every optional attribute and
//! extension is keyed `ce-<name>` and the data content type `contenttype`; the data always goes in
//! `binary_data`. Integers are 32-bit on this wire: an extension beyond `i32` is refused, as Go
//! refuses it, rather than sent truncated.

use std::collections::BTreeMap;

use base64::Engine;
use chrono::{DateTime, Utc};

use crate::Error;
use crate::event::{CloudEvent, ExtValue, SPEC_VERSION, parse_time};
use crate::grpc::proto::{self, Attr, CloudEventAttributeValue, Data};
use crate::mqtt::binding::{self as mqtt_binding, STRUCTURED};

/// Prefix of attribute keys.
pub const PREFIX: &str = "ce-";
/// Key of the data content type (no prefix, as Go writes it).
pub const CONTENT_TYPE: &str = "contenttype";

fn value(attr: Attr) -> CloudEventAttributeValue {
    CloudEventAttributeValue { attr: Some(attr) }
}

fn string(s: &str) -> CloudEventAttributeValue {
    value(Attr::CeString(s.to_string()))
}

fn timestamp(t: &DateTime<Utc>) -> Attr {
    Attr::CeTimestamp(proto::Timestamp {
        seconds: t.timestamp(),
        // A leap second's 10^9.. nanoseconds are not a valid protobuf Timestamp: clamp.
        nanos: i32::try_from(t.timestamp_subsec_nanos().min(999_999_999)).unwrap_or(0),
    })
}

/// The protobuf form of `ev`; an integer extension outside `i32` is [`Error::BadAttribute`].
pub fn to_proto(ev: &CloudEvent) -> Result<proto::CloudEvent, Error> {
    let mut attributes = BTreeMap::new();
    if let Some(ct) = &ev.datacontenttype {
        attributes.insert(CONTENT_TYPE.to_string(), string(ct));
    }
    if let Some(t) = &ev.time {
        attributes.insert(format!("{PREFIX}time"), value(timestamp(t)));
    }
    if let Some(s) = &ev.subject {
        attributes.insert(format!("{PREFIX}subject"), string(s));
    }
    if let Some(s) = &ev.dataschema {
        attributes.insert(format!("{PREFIX}dataschema"), value(Attr::CeUri(s.clone())));
    }
    for (name, v) in &ev.extensions {
        let attr = match v {
            ExtValue::String(s) => Attr::CeString(s.clone()),
            ExtValue::Integer(i) => Attr::CeInteger(i32::try_from(*i).map_err(|_| {
                Error::bad_attr(
                    name.as_str(),
                    format!("{i} is out of the 32-bit integer range of CloudEvents"),
                )
            })?),
            ExtValue::Time(t) => timestamp(t),
            ExtValue::Bool(b) => Attr::CeBoolean(*b),
        };
        attributes.insert(format!("{PREFIX}{name}"), value(attr));
    }
    Ok(proto::CloudEvent {
        id: ev.id.clone(),
        source: ev.source.clone(),
        spec_version: SPEC_VERSION.to_string(),
        r#type: ev.type_.clone(),
        attributes,
        data: ev.data.clone().map(Data::BinaryData),
    })
}

/// The text of an attribute value that should be a string (URIs count).
fn text(name: &str, v: &CloudEventAttributeValue) -> Result<String, Error> {
    match &v.attr {
        Some(Attr::CeString(s) | Attr::CeUri(s) | Attr::CeUriRef(s)) => Ok(s.clone()),
        other => Err(Error::bad_attr(name, format!("not a string: {other:?}"))),
    }
}

fn time_of(name: &str, v: &CloudEventAttributeValue) -> Result<DateTime<Utc>, Error> {
    match &v.attr {
        Some(Attr::CeTimestamp(ts)) => from_timestamp(name, ts),
        Some(Attr::CeString(s)) => parse_time(name, s),
        other => Err(Error::bad_attr(name, format!("not a timestamp: {other:?}"))),
    }
}

fn from_timestamp(name: &str, ts: &proto::Timestamp) -> Result<DateTime<Utc>, Error> {
    u32::try_from(ts.nanos)
        .ok()
        .filter(|n| *n < 1_000_000_000)
        .and_then(|n| DateTime::from_timestamp(ts.seconds, n))
        .ok_or_else(|| Error::bad_attr(name, format!("timestamp out of range: {ts:?}")))
}

fn extension(name: &str, v: &CloudEventAttributeValue) -> Result<ExtValue, Error> {
    Ok(match &v.attr {
        Some(Attr::CeBoolean(b)) => ExtValue::Bool(*b),
        Some(Attr::CeInteger(i)) => ExtValue::Integer(i64::from(*i)),
        Some(Attr::CeString(s) | Attr::CeUri(s) | Attr::CeUriRef(s)) => ExtValue::String(s.clone()),
        // Bytes are carried in their canonical CloudEvents string form.
        Some(Attr::CeBytes(b)) => {
            ExtValue::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        Some(Attr::CeTimestamp(ts)) => ExtValue::Time(from_timestamp(name, ts)?),
        None => return Err(Error::bad_attr(name, "an attribute without a value")),
    })
}

/// Reads an event as OCM's Go binding does: structured when `contenttype` is
/// `application/cloudevents+json` (the event is the JSON in the data), else binary, which needs a
/// spec version.
pub fn from_proto(pb: &proto::CloudEvent) -> Result<CloudEvent, Error> {
    let data = match &pb.data {
        None => None,
        Some(Data::BinaryData(b)) => Some(b.clone()),
        Some(Data::TextData(t)) => Some(t.clone().into_bytes()),
        Some(Data::ProtoData(_)) => {
            return Err(Error::Binding(
                "proto_data is not a payload of the work protocol".into(),
            ));
        }
    }
    .filter(|d| !d.is_empty());
    let content_type = pb
        .attributes
        .get(CONTENT_TYPE)
        .map(|v| text(CONTENT_TYPE, v))
        .transpose()?;
    if content_type
        .as_deref()
        .is_some_and(|c| c.starts_with(STRUCTURED))
    {
        return mqtt_binding::from_message(&mqtt_binding::Message {
            content_type,
            user_properties: vec![],
            payload: data.unwrap_or_default(),
        });
    }
    if pb.spec_version.is_empty() {
        return Err(Error::MissingAttribute("specversion"));
    }
    if pb.spec_version != SPEC_VERSION {
        return Err(Error::bad_attr(
            "specversion",
            format!("{:?} is not 1.0", pb.spec_version),
        ));
    }
    let required = |v: &str, name: &'static str| {
        if v.is_empty() {
            Err(Error::MissingAttribute(name))
        } else {
            Ok(v.to_string())
        }
    };
    let mut ev = CloudEvent {
        id: required(&pb.id, "id")?,
        source: required(&pb.source, "source")?,
        type_: required(&pb.r#type, "type")?,
        time: None,
        datacontenttype: content_type,
        dataschema: None,
        subject: None,
        extensions: BTreeMap::new(),
        data,
    };
    for (key, v) in &pb.attributes {
        // Go ignores keys without the prefix, except the content type read above.
        let Some(name) = key.strip_prefix(PREFIX) else {
            continue;
        };
        let name = name.to_ascii_lowercase();
        match name.as_str() {
            // The message's own fields are authoritative.
            "specversion" | "id" | "source" | "type" => {}
            "time" => ev.time = Some(time_of(&name, v)?),
            "subject" => ev.subject = Some(text(&name, v)?),
            "dataschema" => ev.dataschema = Some(text(&name, v)?),
            "datacontenttype" => ev.datacontenttype = Some(text(&name, v)?),
            _ => {
                let value = extension(&name, v)?;
                ev.extensions.insert(name, value);
            }
        }
    }
    Ok(ev)
}
