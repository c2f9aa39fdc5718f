//! CloudEvent ↔ MQTT 5 PUBLISH. Binary mode puts `datacontenttype` in the Content Type property
//! and every other attribute in a `ce-<name>` user property (Go's form, not the binding spec's
//! bare names); structured mode is one `application/cloudevents+json` document.

use std::borrow::Cow;
use std::collections::BTreeMap;

use base64::Engine;

use crate::Error;
use crate::event::{CloudEvent, ExtValue, SPEC_VERSION, format_time, parse_time};

/// Content type of structured mode.
pub const STRUCTURED: &str = "application/cloudevents+json";
/// Prefix of attribute user properties.
pub const PREFIX: &str = "ce-";

/// The parts of a PUBLISH the binding reads and writes, independent of the MQTT library.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// The Content Type property.
    pub content_type: Option<String>,
    /// The user properties, in order.
    pub user_properties: Vec<(String, String)>,
    /// The payload.
    pub payload: Vec<u8>,
}

/// Binary mode, what the agent sends.
pub fn to_binary(ev: &CloudEvent) -> Message {
    Message {
        content_type: ev.datacontenttype.clone(),
        user_properties: binary_attributes(ev)
            .into_iter()
            .map(|(name, value)| (format!("{PREFIX}{name}"), value.into_owned()))
            .collect(),
        payload: ev.data.clone().unwrap_or_default(),
    }
}

/// Every attribute but `datacontenttype` as binary mode writes it, in its order: the name
/// (without [`PREFIX`]) and the canonical value. Measuring an event on a wire reads these
/// instead of encoding it.
pub fn binary_attributes(ev: &CloudEvent) -> Vec<(Cow<'_, str>, Cow<'_, str>)> {
    let mut attributes: Vec<(Cow<'_, str>, Cow<'_, str>)> = vec![
        ("specversion".into(), SPEC_VERSION.into()),
        ("id".into(), ev.id.as_str().into()),
        ("source".into(), ev.source.as_str().into()),
        ("type".into(), ev.type_.as_str().into()),
    ];
    if let Some(t) = &ev.time {
        attributes.push(("time".into(), format_time(t).into()));
    }
    if let Some(s) = &ev.dataschema {
        attributes.push(("dataschema".into(), s.as_str().into()));
    }
    if let Some(s) = &ev.subject {
        attributes.push(("subject".into(), s.as_str().into()));
    }
    for (k, v) in &ev.extensions {
        let value = match v {
            ExtValue::String(s) => Cow::Borrowed(s.as_str()),
            other => Cow::Owned(other.to_canonical()),
        };
        attributes.push((k.as_str().into(), value));
    }
    attributes
}

/// Structured mode: the event as one JSON document; JSON data is inlined, other data is base64.
pub fn to_structured(ev: &CloudEvent) -> Result<Message, Error> {
    let mut doc = serde_json::Map::new();
    doc.insert("specversion".into(), SPEC_VERSION.into());
    doc.insert("id".into(), ev.id.clone().into());
    doc.insert("source".into(), ev.source.clone().into());
    doc.insert("type".into(), ev.type_.clone().into());
    if let Some(t) = &ev.time {
        doc.insert("time".into(), format_time(t).into());
    }
    for (k, v) in [
        ("datacontenttype", &ev.datacontenttype),
        ("dataschema", &ev.dataschema),
        ("subject", &ev.subject),
    ] {
        if let Some(v) = v {
            doc.insert(k.into(), v.clone().into());
        }
    }
    for (k, v) in &ev.extensions {
        doc.insert(k.clone(), v.to_json());
    }
    if let Some(d) = &ev.data {
        let json_data = ev
            .datacontenttype
            .as_deref()
            .is_none_or(|c| c.contains("json"));
        match serde_json::from_slice::<serde_json::Value>(d) {
            Ok(v) if json_data => {
                doc.insert("data".into(), v);
            }
            _ => {
                doc.insert(
                    "data_base64".into(),
                    base64::engine::general_purpose::STANDARD.encode(d).into(),
                );
            }
        }
    }
    let payload = serde_json::to_vec(&doc).map_err(|e| Error::Binding(e.to_string()))?;
    Ok(Message {
        content_type: Some(STRUCTURED.into()),
        user_properties: vec![],
        payload,
    })
}

/// Reads either mode: binary when `ce-specversion` is present, structured when the content type
/// says so; anything else is [`Error::Binding`].
pub fn from_message(msg: &Message) -> Result<CloudEvent, Error> {
    if msg
        .user_properties
        .iter()
        .any(|(k, _)| k == "ce-specversion")
    {
        return from_binary(msg);
    }
    if msg
        .content_type
        .as_deref()
        .is_some_and(|c| c.starts_with(STRUCTURED))
    {
        return from_structured(&msg.payload);
    }
    Err(Error::Binding(
        "neither a ce-specversion user property nor a cloudevents+json content type".into(),
    ))
}

fn from_binary(msg: &Message) -> Result<CloudEvent, Error> {
    let mut attrs: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in &msg.user_properties {
        if let Some(name) = k.strip_prefix(PREFIX) {
            attrs.insert(name.to_ascii_lowercase(), v.clone());
        }
    }
    let ev = build(&mut attrs, msg.content_type.clone(), |name, v| {
        ExtValue::from_canonical(name, v)
    })?;
    Ok(CloudEvent {
        data: if msg.payload.is_empty() {
            None
        } else {
            Some(msg.payload.clone())
        },
        ..ev
    })
}

fn from_structured(payload: &[u8]) -> Result<CloudEvent, Error> {
    let doc: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(payload)
        .map_err(|e| Error::Binding(format!("structured event: {e}")))?;
    let mut attrs = BTreeMap::new();
    let mut data = None;
    for (k, v) in doc {
        match (k.as_str(), v) {
            ("data", serde_json::Value::Null) => {}
            ("data", v) => {
                data = Some(serde_json::to_vec(&v).map_err(|e| Error::Binding(e.to_string()))?)
            }
            ("data_base64", serde_json::Value::String(s)) => {
                data = Some(
                    base64::engine::general_purpose::STANDARD
                        .decode(s)
                        .map_err(|e| Error::bad_attr("data_base64", e))?,
                )
            }
            (_, serde_json::Value::String(s)) => {
                attrs.insert(k, s);
            }
            (_, serde_json::Value::Number(n)) => {
                attrs.insert(k, n.to_string());
            }
            (_, serde_json::Value::Bool(b)) => {
                attrs.insert(k, b.to_string());
            }
            (_, serde_json::Value::Null) => {}
            (_, other) => return Err(Error::bad_attr(k, format!("not a scalar: {other}"))),
        }
    }
    let ct = attrs.remove("datacontenttype");
    let ev = build(&mut attrs, ct, ExtValue::from_canonical)?;
    Ok(CloudEvent { data, ..ev })
}

fn build(
    attrs: &mut BTreeMap<String, String>,
    content_type: Option<String>,
    ext: impl Fn(&str, &str) -> Result<ExtValue, Error>,
) -> Result<CloudEvent, Error> {
    let spec = attrs
        .remove("specversion")
        .ok_or(Error::MissingAttribute("specversion"))?;
    if spec != SPEC_VERSION {
        return Err(Error::bad_attr(
            "specversion",
            format!("{spec:?} is not 1.0"),
        ));
    }
    let id = attrs.remove("id").ok_or(Error::MissingAttribute("id"))?;
    let source = attrs
        .remove("source")
        .ok_or(Error::MissingAttribute("source"))?;
    let type_ = attrs
        .remove("type")
        .ok_or(Error::MissingAttribute("type"))?;
    let time = attrs
        .remove("time")
        .map(|t| parse_time("time", &t))
        .transpose()?;
    let dataschema = attrs.remove("dataschema");
    let subject = attrs.remove("subject");
    let mut extensions = BTreeMap::new();
    for (k, v) in std::mem::take(attrs) {
        let value = ext(&k, &v)?;
        extensions.insert(k, value);
    }
    Ok(CloudEvent {
        id,
        source,
        type_,
        time,
        datacontenttype: content_type,
        dataschema,
        subject,
        extensions,
        data: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Decoder, Incoming};
    use crate::types::EventType;

    fn props(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The create event Maestro published (docs/cloudevents.md, "on the wire").
    fn golden_create() -> Message {
        Message {
            content_type: Some("application/json".into()),
            user_properties: props(&[
                ("ce-specversion", "1.0"),
                ("ce-id", "7cd72b22-0000-4000-8000-000000000001"),
                ("ce-source", "maestro"),
                ("ce-type", "io.open-cluster-management.works.v1alpha1.manifestbundles.spec.create_request"),
                ("ce-clustername", "cluster1"),
                ("ce-resourceid", "4717d8e0-0000-4000-8000-000000000002"),
                ("ce-resourceversion", "1"),
            ]),
            payload: br#"{"manifests":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1","namespace":"default"}}]}"#
                .to_vec(),
        }
    }

    fn sorted(mut p: Vec<(String, String)>) -> Vec<(String, String)> {
        p.sort();
        p
    }

    #[test]
    fn golden_create_decodes_and_reencodes_identically() {
        let msg = golden_create();
        let ev = from_message(&msg).expect("binary event");
        assert_eq!(ev.event_type().expect("type"), EventType::SpecCreate);
        assert!(ev.time.is_none());
        let Incoming::Spec(s) = Decoder::new("cluster1").decode(&ev).expect("decodes") else {
            panic!("spec")
        };
        assert_eq!(s.generation, 1);
        assert_eq!(s.name, "4717d8e0-0000-4000-8000-000000000002");
        let again = to_binary(&ev);
        assert_eq!(again.content_type, msg.content_type);
        assert_eq!(sorted(again.user_properties), sorted(msg.user_properties));
        assert_eq!(again.payload, msg.payload);
    }

    #[test]
    fn golden_resync_delete_without_content_type_or_payload() {
        let msg = Message {
            content_type: None,
            user_properties: props(&[
                ("ce-specversion", "1.0"),
                ("ce-id", "x"),
                ("ce-source", "maestro"),
                (
                    "ce-type",
                    "io.open-cluster-management.works.v1alpha1.manifestbundles.spec.resync_response",
                ),
                ("ce-resourceid", "00000000-0000-0000-0000-000000000001"),
                ("ce-resourceversion", "3"),
                ("ce-clustername", "cluster1"),
                ("ce-deletiontimestamp", "2026-11-24T10:25:46.9069Z"),
            ]),
            payload: vec![],
        };
        let ev = from_message(&msg).expect("event");
        let Incoming::Spec(s) = Decoder::new("cluster1").decode(&ev).expect("decodes") else {
            panic!("spec")
        };
        assert!(s.spec.is_none());
        assert_eq!(s.generation, 3);
        let again = to_binary(&ev);
        assert_eq!(sorted(again.user_properties), sorted(msg.user_properties));
        assert!(again.payload.is_empty());
    }

    #[test]
    fn golden_status_event_shape() {
        // The status update the Go agent sent to Maestro: these attributes, binary mode.
        let msg = Message {
            content_type: Some("application/json".into()),
            user_properties: props(&[
                ("ce-specversion", "1.0"),
                ("ce-id", "y"),
                ("ce-source", "cluster1-work-agent"),
                (
                    "ce-type",
                    "io.open-cluster-management.works.v1alpha1.manifestbundles.status.update_request",
                ),
                ("ce-time", "2026-11-24T10:00:00.123456789Z"),
                ("ce-clustername", "cluster1"),
                ("ce-originalsource", "maestro"),
                ("ce-resourceid", "0a1a"),
                ("ce-resourceversion", "1"),
                ("ce-sequenceid", "2125174315350495232"),
                ("ce-statushash", "ab"),
                ("ce-logtracing", "{}"),
            ]),
            payload: br#"{"conditions":[],"resourceStatus":[]}"#.to_vec(),
        };
        let ev = from_message(&msg).expect("event");
        assert_eq!(ev.event_type().expect("type"), EventType::StatusUpdate);
        let again = to_binary(&ev);
        assert_eq!(sorted(again.user_properties), sorted(msg.user_properties));
    }

    #[test]
    fn structured_round_trip() {
        let ev = from_message(&golden_create()).expect("event");
        let s = to_structured(&ev).expect("structured");
        assert_eq!(s.content_type.as_deref(), Some(STRUCTURED));
        let back = from_message(&s).expect("reads");
        assert_eq!(back.extensions, ev.extensions);
        let d1: serde_json::Value =
            serde_json::from_slice(back.data.as_deref().expect("data")).expect("json");
        let d2: serde_json::Value =
            serde_json::from_slice(ev.data.as_deref().expect("data")).expect("json");
        assert_eq!(d1, d2);
        assert_eq!((back.id, back.type_), (ev.id, ev.type_));
        // Integer extensions come as JSON numbers from other producers too.
        let doc = br#"{"specversion":"1.0","id":"1","source":"s","type":"t","resourceversion":7,"data_base64":"e30="}"#;
        let ev = from_message(&Message {
            content_type: Some(STRUCTURED.into()),
            payload: doc.to_vec(),
            ..Default::default()
        })
        .expect("reads");
        assert_eq!(ev.ext_integer("resourceversion").expect("int"), Some(7));
        assert_eq!(ev.data.as_deref(), Some(&b"{}"[..]));
    }

    #[test]
    fn malformed_messages_are_errors() {
        let plain = Message {
            content_type: Some("application/json".into()),
            payload: b"{}".to_vec(),
            ..Default::default()
        };
        assert!(matches!(from_message(&plain), Err(Error::Binding(_))));
        let bad = Message {
            content_type: Some(STRUCTURED.into()),
            payload: b"[1".to_vec(),
            ..Default::default()
        };
        assert!(matches!(from_message(&bad), Err(Error::Binding(_))));
        let mut m = golden_create();
        m.user_properties.retain(|(k, _)| k != "ce-id");
        assert!(matches!(
            from_message(&m),
            Err(Error::MissingAttribute("id"))
        ));
        let mut m = golden_create();
        m.user_properties
            .push(("ce-resourceversion".into(), "x".into()));
        assert!(from_message(&m).is_err());
        let mut m = golden_create();
        m.user_properties
            .push(("ce-time".into(), "yesterday".into()));
        assert!(from_message(&m).is_err());
    }
}
