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
    Ok(proto::CloudEvent {
        data: ev.data.clone().map(Data::BinaryData),
        ..without_data(ev)?
    })
}

/// The bytes a protobuf field of number below 16 takes for its number and wire type.
pub(crate) const FIELD_KEY: usize = 1;

/// The size of the encoded `PublishRequest` of `ev`, which a gRPC server holds to its receive
/// limit (4 MiB unless told otherwise), computed without copying the data.
pub fn publish_request_size(ev: &CloudEvent) -> Result<usize, Error> {
    // `binary_data` is set whenever the event has data, even empty data (a oneof).
    let data = ev.data.as_ref().map_or(0, |d| {
        FIELD_KEY + prost::length_delimiter_len(d.len()) + d.len()
    });
    let event = prost::Message::encoded_len(&without_data(ev)?) + data;
    Ok(FIELD_KEY + prost::length_delimiter_len(event) + event)
}

/// [`to_proto`] without the data.
fn without_data(ev: &CloudEvent) -> Result<proto::CloudEvent, Error> {
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
        data: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Decoder, Incoming};
    use crate::types::{self, EventType};
    use prost::Message;

    // Written by sdk-go's binding (testdata/grpc-golden), deterministic protobuf encoding.
    const SPEC_CREATE: &str = concat!(
        "0a2437636437326232322d303030302d343030302d383030302d30303030303030303030303112076d616573",
        "74726f1a03312e30224d696f2e6f70656e2d636c75737465722d6d616e6167656d656e742e776f726b732e76",
        "31616c706861312e6d616e696665737462756e646c65732e737065632e6372656174655f726571756573742a",
        "1c0a0e63652d636c75737465726e616d65120a1a08636c7573746572312a1e0a0b63652d6d65746164617461",
        "120f1a0d7b226e616d65223a227731227d2a370a0d63652d7265736f75726365696412261a24343731376438",
        "65302d303030302d343030302d383030302d3030303030303030303030322a180a1263652d7265736f757263",
        "6576657273696f6e120210012a180a0763652d74696d65120d3a0b08a0c095d80610959aef3a2a210a0b636f",
        "6e74656e747479706512121a106170706c69636174696f6e2f6a736f6e32657b226d616e696665737473223a",
        "5b7b2261706956657273696f6e223a227631222c226b696e64223a22436f6e6669674d6170222c226d657461",
        "64617461223a7b226e616d65223a226331222c226e616d657370616365223a2264656661756c74227d7d5d7d"
    );
    const STATUS_UPDATE: &str = concat!(
        "0a01791213636c7573746572312d776f726b2d6167656e741a03312e30224f696f2e6f70656e2d636c757374",
        "65722d6d616e6167656d656e742e776f726b732e7631616c706861312e6d616e696665737462756e646c6573",
        "2e7374617475732e7570646174655f726571756573742a1c0a0e63652d636c75737465726e616d65120a1a08",
        "636c7573746572312a1e0a1163652d6f726967696e616c736f7572636512091a076d61657374726f2a170a0d",
        "63652d7265736f75726365696412061a04306131612a1c0a1263652d7265736f7572636576657273696f6e12",
        "0610ffffffff072a260a0d63652d73657175656e6365696412151a1332313235313734333135333530343935",
        "3233322a150a0d63652d7374617475736861736812041a0261622a180a0763652d74696d65120d3a0b08a0c0",
        "95d80610959aef3a2a210a0b636f6e74656e747479706512121a106170706c69636174696f6e2f6a736f6e32",
        "257b22636f6e646974696f6e73223a5b5d2c227265736f75726365537461747573223a5b5d7d"
    );
    const SPEC_RESYNC_REQUEST: &str = concat!(
        "0a01721213636c7573746572312d776f726b2d6167656e741a03312e30224d696f2e6f70656e2d636c757374",
        "65722d6d616e6167656d656e742e776f726b732e7631616c706861312e6d616e696665737462756e646c6573",
        "2e737065632e726573796e635f726571756573742a1c0a0e63652d636c75737465726e616d65120a1a08636c",
        "7573746572312a170a1163652d6f726967696e616c736f7572636512021a002a180a0763652d74696d65120d",
        "3a0b08a0c095d80610959aef3a2a210a0b636f6e74656e747479706512121a106170706c69636174696f6e2f",
        "6a736f6e32407b227265736f7572636556657273696f6e73223a5b7b227265736f757263654944223a223061",
        "3161222c227265736f7572636556657273696f6e223a337d5d7d"
    );
    const SPEC_RESYNC_DELETE: &str = concat!(
        "0a01641206736f757263651a03312e30224e696f2e6f70656e2d636c75737465722d6d616e6167656d656e74",
        "2e776f726b732e7631616c706861312e6d616e696665737462756e646c65732e737065632e726573796e635f",
        "726573706f6e73652a1c0a0e63652d636c75737465726e616d65120a1a08636c7573746572312a260a146365",
        "2d64656c6574696f6e74696d657374616d70120e3a0c08aacc95d80610a0e4b8b0032a170a1163652d6f7269",
        "67696e616c736f7572636512021a002a370a0d63652d7265736f75726365696412261a243030303030303030",
        "2d303030302d303030302d303030302d3030303030303030303030312a180a0763652d74696d65120d3a0b08",
        "a0c095d80610959aef3a"
    );

    fn time() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-24T10:00:00.123456789Z")
            .expect("time")
            .with_timezone(&Utc)
    }

    fn event(id: &str, source: &str, ty: EventType) -> CloudEvent {
        let mut ev = CloudEvent::new(ty, source);
        ev.id = id.into();
        ev.time = Some(time());
        ev
    }

    fn string(v: &str) -> ExtValue {
        ExtValue::String(v.into())
    }

    fn spec_create() -> CloudEvent {
        let mut ev = event(
            "7cd72b22-0000-4000-8000-000000000001",
            "maestro",
            EventType::SpecCreate,
        )
        .with_ext(
            types::EXT_RESOURCE_ID,
            string("4717d8e0-0000-4000-8000-000000000002"),
        )
        .with_ext(types::EXT_RESOURCE_VERSION, ExtValue::Integer(1))
        .with_ext(types::EXT_CLUSTER_NAME, string("cluster1"))
        .with_ext(types::EXT_METADATA, string(r#"{"name":"w1"}"#));
        ev.data = Some(
            br#"{"manifests":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1","namespace":"default"}}]}"#
                .to_vec(),
        );
        ev
    }

    fn status_update() -> CloudEvent {
        let mut ev = event("y", "cluster1-work-agent", EventType::StatusUpdate)
            .with_ext(types::EXT_RESOURCE_ID, string("0a1a"))
            .with_ext(
                types::EXT_RESOURCE_VERSION,
                ExtValue::Integer(2_147_483_647),
            )
            .with_ext(types::EXT_CLUSTER_NAME, string("cluster1"))
            .with_ext(types::EXT_ORIGINAL_SOURCE, string("maestro"))
            .with_ext(types::EXT_SEQUENCE_ID, string("2125174315350495232"))
            .with_ext(types::EXT_STATUS_HASH, string("ab"));
        ev.data = Some(br#"{"conditions":[],"resourceStatus":[]}"#.to_vec());
        ev
    }

    fn spec_resync_request() -> CloudEvent {
        let mut ev = event("r", "cluster1-work-agent", EventType::SpecResyncRequest)
            .with_ext(types::EXT_CLUSTER_NAME, string("cluster1"))
            .with_ext(types::EXT_ORIGINAL_SOURCE, string(""));
        ev.data =
            Some(br#"{"resourceVersions":[{"resourceID":"0a1a","resourceVersion":3}]}"#.to_vec());
        ev
    }

    fn spec_resync_delete() -> CloudEvent {
        let deleted = DateTime::parse_from_rfc3339("2026-11-24T10:25:46.9069Z")
            .expect("time")
            .with_timezone(&Utc);
        let mut ev = event("d", "source", EventType::SpecResyncResponse)
            .with_ext(
                types::EXT_RESOURCE_ID,
                string("00000000-0000-0000-0000-000000000001"),
            )
            .with_ext(types::EXT_CLUSTER_NAME, string("cluster1"))
            .with_ext(types::EXT_ORIGINAL_SOURCE, string(""))
            .with_ext(types::EXT_DELETION_TIMESTAMP, ExtValue::Time(deleted));
        ev.datacontenttype = None;
        ev
    }

    fn golden(hex_text: &str) -> Vec<u8> {
        hex::decode(hex_text).expect("hex")
    }

    #[test]
    fn encodings_match_sdk_go_byte_for_byte_and_read_back() {
        for (name, ev, bytes) in [
            ("spec create", spec_create(), SPEC_CREATE),
            ("status update", status_update(), STATUS_UPDATE),
            (
                "spec resync request",
                spec_resync_request(),
                SPEC_RESYNC_REQUEST,
            ),
            (
                "spec resync delete",
                spec_resync_delete(),
                SPEC_RESYNC_DELETE,
            ),
        ] {
            let ours = to_proto(&ev).expect("encodes").encode_to_vec();
            assert_eq!(hex::encode(&ours), bytes, "{name}");
            let pb = proto::CloudEvent::decode(golden(bytes).as_slice()).expect("decodes");
            assert_eq!(from_proto(&pb).expect("reads"), ev, "{name}");
        }
    }

    #[test]
    fn golden_events_decode_as_the_agent_needs() {
        let pb = proto::CloudEvent::decode(golden(SPEC_CREATE).as_slice()).expect("decodes");
        let ev = from_proto(&pb).expect("reads");
        let Incoming::Spec(s) = Decoder::new("cluster1").decode(&ev).expect("spec") else {
            panic!("a spec event");
        };
        assert_eq!((s.name.as_str(), s.generation), ("w1", 1));
        assert!(s.spec.is_some());
        // The broker's delete for an id it does not hold has no resourceversion. sdk-go's agent
        // codec refuses it, and the work stays; ours takes it at version 0: the source says it
        // does not hold the work (and, for a work the agent deleted, that it heard the deletion).
        let pb = proto::CloudEvent::decode(golden(SPEC_RESYNC_DELETE).as_slice()).expect("decodes");
        let ev = from_proto(&pb).expect("reads");
        assert!(ev.data.is_none() && ev.datacontenttype.is_none());
        let Incoming::Spec(s) = Decoder::new("cluster1").decode(&ev).expect("spec") else {
            panic!("a spec event");
        };
        assert_eq!(s.generation, 0);
        assert!(s.deletion_timestamp.is_some() && s.spec.is_none());
    }

    #[test]
    fn integers_beyond_32_bits_are_refused_as_go_refuses_them() {
        let ev = status_update().with_ext(
            types::EXT_RESOURCE_VERSION,
            ExtValue::Integer(2_147_483_648),
        );
        let err = to_proto(&ev).expect_err("out of range").to_string();
        assert!(
            err.contains("resourceversion") && err.contains("32-bit"),
            "{err}"
        );
        let ev = status_update().with_ext(
            types::EXT_RESOURCE_VERSION,
            ExtValue::Integer(-2_147_483_649),
        );
        assert!(to_proto(&ev).is_err());
    }

    #[test]
    fn hostile_messages_are_errors_not_panics() {
        let good = || proto::CloudEvent::decode(golden(SPEC_CREATE).as_slice()).expect("decodes");
        let mut pb = good();
        pb.spec_version.clear();
        assert!(matches!(
            from_proto(&pb),
            Err(Error::MissingAttribute("specversion"))
        ));
        let mut pb = good();
        pb.spec_version = "0.3".into();
        assert!(from_proto(&pb).is_err());
        let mut pb = good();
        pb.id.clear();
        assert!(matches!(
            from_proto(&pb),
            Err(Error::MissingAttribute("id"))
        ));
        let mut pb = good();
        pb.attributes.insert(
            "ce-time".into(),
            CloudEventAttributeValue {
                attr: Some(Attr::CeTimestamp(proto::Timestamp {
                    seconds: 0,
                    nanos: -1,
                })),
            },
        );
        assert!(from_proto(&pb).is_err());
        let mut pb = good();
        pb.attributes.insert(
            "ce-time".into(),
            CloudEventAttributeValue {
                attr: Some(Attr::CeTimestamp(proto::Timestamp {
                    seconds: i64::MAX,
                    nanos: 0,
                })),
            },
        );
        assert!(from_proto(&pb).is_err());
        let mut pb = good();
        pb.attributes
            .insert("ce-x".into(), CloudEventAttributeValue { attr: None });
        assert!(from_proto(&pb).is_err());
        let mut pb = good();
        pb.attributes.insert(
            CONTENT_TYPE.into(),
            CloudEventAttributeValue {
                attr: Some(Attr::CeBoolean(true)),
            },
        );
        assert!(from_proto(&pb).is_err());
        let mut pb = good();
        pb.data = Some(Data::ProtoData(proto::Any::default()));
        assert!(from_proto(&pb).is_err());
        // Truncated bytes are a decode error of the message itself.
        let bytes = golden(SPEC_CREATE);
        assert!(proto::CloudEvent::decode(&bytes[..bytes.len() / 2]).is_err());
    }

    #[test]
    fn structured_mode_and_text_data_are_read_too() {
        let doc = br#"{"specversion":"1.0","id":"1","source":"s","type":"t","resourceversion":7,"data":{"a":1}}"#;
        let pb = proto::CloudEvent {
            attributes: [(
                CONTENT_TYPE.to_string(),
                CloudEventAttributeValue {
                    attr: Some(Attr::CeString(STRUCTURED.into())),
                },
            )]
            .into(),
            data: Some(Data::BinaryData(doc.to_vec())),
            ..Default::default()
        };
        let ev = from_proto(&pb).expect("structured");
        assert_eq!(ev.ext_integer("resourceversion").expect("int"), Some(7));
        let mut pb = proto::CloudEvent::decode(golden(STATUS_UPDATE).as_slice()).expect("decodes");
        pb.data = Some(Data::TextData("{}".into()));
        assert_eq!(
            from_proto(&pb).expect("reads").data.as_deref(),
            Some(&b"{}"[..])
        );
    }

    /// The measure is prost's length of the whole `PublishRequest`, for status events (with and
    /// without metadata and data) and resync requests, across the length prefix's byte counts.
    #[test]
    fn the_measure_is_the_encoded_publish_request() {
        let metadata = serde_json::json!({"name": "w1", "labels": {"a": "b"}});
        let mut events = Vec::new();
        for metadata in [None, Some(metadata)] {
            for data in [
                None,
                Some(0),
                Some(1),
                Some(100),
                Some(1_000),
                Some(20_000),
                Some(3_000_000),
            ] {
                events.push(crate::test_events::status(metadata.clone(), data));
            }
        }
        events.extend([0, 3_000].map(crate::test_events::resync_request));
        for ev in &events {
            let request = proto::PublishRequest {
                event: Some(to_proto(ev).expect("encodes")),
            };
            assert_eq!(
                publish_request_size(ev).expect("measures"),
                request.encoded_len(),
                "{} with {:?} bytes of data",
                ev.type_,
                ev.data.as_ref().map(Vec::len)
            );
            assert_eq!(request.encode_to_vec().len(), request.encoded_len());
        }
    }
}
