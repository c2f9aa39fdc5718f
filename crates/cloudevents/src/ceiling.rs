//! How large an event may be on a wire now, and how large one is there. A broker refuses, or
//! drops the connection over, a packet or message above its limit (Azure Event Grid: 512 KB an
//! MQTT packet; AWS IoT Core: 128 KB; a gRPC server: 4 MiB by default; Pub/Sub: 10 MB a
//! message and 1,024 bytes an attribute value). The transport owns the figure and updates it
//! when it connects (an MQTT broker says its limit in the CONNACK); the client reads it to
//! refuse an event when it is published and again when it is sent.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Mutex;

use crate::Error;
use crate::event::{CloudEvent, ExtValue};
use crate::mqtt::binding;
use crate::types;

/// Where a wire's ceiling comes from (said in the log at connect and in a refusal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CeilingOrigin {
    /// The transport names no ceiling.
    Unlimited,
    /// The broker said so when it accepted the connection (MQTT CONNACK's Maximum Packet Size).
    Broker,
    /// A key of the config file.
    Config(&'static str),
    /// The protocol's or the service's own limit, when neither the broker nor the config names one.
    Default(&'static str),
}

impl std::fmt::Display for CeilingOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unlimited => f.write_str("no ceiling"),
            Self::Broker => f.write_str("the broker's Maximum Packet Size"),
            Self::Config(key) => write!(f, "{key} in the config file"),
            Self::Default(what) => f.write_str(what),
        }
    }
}

/// Bytes one event takes on a wire.
type Measure = Box<dyn Fn(&CloudEvent) -> usize + Send + Sync>;

/// A wire's ceiling now and how to measure an event against it; shared by the transport, which
/// sets it, and the client, which checks against it.
pub struct Ceiling {
    wire: &'static str,
    now: Mutex<(usize, CeilingOrigin)>,
    measure: Measure,
}

impl std::fmt::Debug for Ceiling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (limit, origin) = self.now();
        f.debug_struct("Ceiling")
            .field("wire", &self.wire)
            .field("limit", &limit)
            .field("origin", &origin)
            .finish_non_exhaustive()
    }
}

impl Ceiling {
    /// The ceiling of `wire` (its name in logs): `limit` bytes from `origin`, events measured by
    /// `measure` in the wire's own bytes.
    pub fn new(
        wire: &'static str,
        limit: usize,
        origin: CeilingOrigin,
        measure: impl Fn(&CloudEvent) -> usize + Send + Sync + 'static,
    ) -> Self {
        Self {
            wire,
            now: Mutex::new((limit, origin)),
            measure: Box::new(measure),
        }
    }

    /// No ceiling (a transport that names none); an event measures its data and attributes.
    pub fn unlimited() -> Self {
        Self::new("", usize::MAX, CeilingOrigin::Unlimited, event_bytes)
    }

    fn now(&self) -> (usize, CeilingOrigin) {
        // Plain data: a panic elsewhere cannot leave it half-written.
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The largest event the wire takes now, in its own bytes.
    pub fn limit(&self) -> usize {
        self.now().0
    }

    /// Where [`Ceiling::limit`] comes from.
    pub fn origin(&self) -> CeilingOrigin {
        self.now().1
    }

    /// The wire's name in logs ("MQTT", "gRPC", "Pub/Sub"; empty when unlimited).
    pub fn wire(&self) -> &'static str {
        self.wire
    }

    /// Sets the ceiling (a transport on connect).
    pub fn set(&self, limit: usize, origin: CeilingOrigin) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = (limit, origin);
    }

    /// How many bytes `event` takes on the wire (a whole MQTT PUBLISH packet, an encoded gRPC
    /// or Pub/Sub publish request).
    pub fn wire_size(&self, event: &CloudEvent) -> usize {
        (self.measure)(event)
    }

    /// [`Error::EventTooLarge`] when `event` is over the ceiling now.
    pub fn fits(&self, event: &CloudEvent) -> Result<(), Error> {
        let size = self.wire_size(event);
        let (limit, origin) = self.now();
        if size <= limit {
            return Ok(());
        }
        Err(Error::EventTooLarge {
            event_type: event.type_.clone(),
            resource_id: event.ext_string(types::EXT_RESOURCE_ID),
            size,
            limit,
            wire: self.wire,
            origin,
        })
    }
}

/// The data and every attribute's name and value, in bytes: a measure of an event for a wire
/// that names no ceiling.
fn event_bytes(event: &CloudEvent) -> usize {
    let attributes: usize = binding::binary_attributes(event)
        .iter()
        .map(|(name, value)| binding::PREFIX.len() + name.len() + value.len())
        .sum();
    attributes
        + event.datacontenttype.as_ref().map_or(0, String::len)
        + event.data.as_ref().map_or(0, Vec::len)
}

/// The keys of a work's ObjectMeta kept when its `metadata` extension is over a wire's attribute
/// limit, most needed last: what a source reads back from a status event (sdk-go's source codec
/// restores name, namespace, uid, resourceVersion and generation; Maestro keeps the metadata of
/// its spec instead), then the timestamps that say when it was made and whether it goes.
const METADATA_KEPT: [&str; 7] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
];

/// How many of [`METADATA_KEPT`] a source needs at least.
const METADATA_NEEDED: usize = 5;

/// The work's ObjectMeta JSON `metadata` cut down to at most `limit` bytes: labels,
/// annotations, finalizers, owner references and every other key dropped first (keeping
/// name, namespace, uid, resourceVersion, generation and the creation and deletion
/// timestamps), then the timestamps too. `None` when even that is over, or `metadata` is no
/// JSON object.
pub fn reduce_metadata(metadata: &str, limit: usize) -> Option<String> {
    let serde_json::Value::Object(full) = serde_json::from_str(metadata).ok()? else {
        return None;
    };
    [METADATA_KEPT.len(), METADATA_NEEDED]
        .into_iter()
        .find_map(|keep| {
            let reduced: serde_json::Map<String, serde_json::Value> = METADATA_KEPT[..keep]
                .iter()
                .filter_map(|k| Some((k.to_string(), full.get(*k)?.clone())))
                .collect();
            Some(serde_json::Value::Object(reduced).to_string()).filter(|s| s.len() <= limit)
        })
}

/// `event` as it goes on a wire whose attribute values take at most `max_value` bytes: a
/// `metadata` extension over it reduced by [`reduce_metadata`]; any other value over it
/// refuses the event, naming the attribute.
pub(crate) fn fit_attribute_values<'a>(
    event: &'a CloudEvent,
    max_value: usize,
    wire: &str,
) -> Result<Cow<'a, CloudEvent>, Error> {
    let too_long = |name: &str, len: usize| {
        Error::bad_attr(
            name,
            format!("{len} bytes; {wire} takes at most {max_value} bytes in an attribute value"),
        )
    };
    if let Some(ct) = &event.datacontenttype
        && ct.len() > max_value
    {
        return Err(too_long("datacontenttype", ct.len()));
    }
    let mut metadata = None;
    for (name, value) in binding::binary_attributes(event) {
        if value.len() <= max_value {
            continue;
        }
        if name != types::EXT_METADATA {
            return Err(too_long(&name, value.len()));
        }
        metadata =
            Some(reduce_metadata(&value, max_value).ok_or_else(|| too_long(&name, value.len()))?);
    }
    Ok(match metadata {
        None => Cow::Borrowed(event),
        Some(reduced) => {
            let mut event = event.clone();
            event
                .extensions
                .insert(types::EXT_METADATA.into(), ExtValue::String(reduced));
            Cow::Owned(event)
        }
    })
}

/// Works whose `metadata` a wire reduced, so that each is logged once; forgotten wholesale when
/// it holds this many (then each is logged once more), so that it stays small.
const REDUCED_REMEMBERED: usize = 10_000;

/// Logs, once per work, that a wire sent a work's `metadata` reduced.
#[derive(Default)]
pub(crate) struct ReducedMetadataLog(Mutex<HashSet<String>>);

impl ReducedMetadataLog {
    /// Notes that `sent` went instead of `original` (logged at debug the first time for the work).
    pub(crate) fn note(&self, original: &CloudEvent, sent: &CloudEvent, wire: &str) {
        let Some(id) = original.ext_string(types::EXT_RESOURCE_ID) else {
            return;
        };
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= REDUCED_REMEMBERED {
            seen.clear();
        }
        if seen.insert(id.clone()) {
            let len = |e: &CloudEvent| e.ext_string(types::EXT_METADATA).map_or(0, |m| m.len());
            tracing::debug!(
                resource_id = %id,
                event_type = %original.type_,
                from = len(original),
                to = len(sent),
                "{wire}: the work's metadata is over the attribute limit; sent with name, \
                 namespace, uid, resourceVersion and generation only"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::EventType;

    fn with_metadata(metadata: &serde_json::Value) -> CloudEvent {
        CloudEvent::new(EventType::StatusUpdate, "agent")
            .with_ext(types::EXT_RESOURCE_ID, ExtValue::String("uid-1".into()))
            .with_ext(types::EXT_METADATA, ExtValue::String(metadata.to_string()))
    }

    /// What a source reads back from a work's metadata: `core`, and with `timestamps`.
    fn kept(timestamps: bool) -> serde_json::Value {
        let mut kept = serde_json::json!({
            "name": "w1",
            "namespace": "cluster1",
            "uid": "6b8e0a52-5d3e-4c1e-9d8a-0f0e3c1b2a44",
            "resourceVersion": "17",
            "generation": 3,
        });
        if timestamps {
            kept["creationTimestamp"] = "2026-01-01T00:00:00Z".into();
        }
        kept
    }

    /// A work's metadata with 2,000 bytes of annotation besides what is kept.
    fn big_metadata() -> serde_json::Value {
        let mut full = kept(true);
        full["labels"] =
            serde_json::json!({"cloudevents.open-cluster-management.io/originalsource": "maestro"});
        full["annotations"] = serde_json::json!({"note": "x".repeat(2000)});
        full["finalizers"] =
            serde_json::json!(["cluster.open-cluster-management.io/manifest-work-cleanup"]);
        full
    }

    fn parsed(json: &str) -> serde_json::Value {
        serde_json::from_str(json).expect("JSON")
    }

    #[test]
    fn metadata_over_the_limit_keeps_what_a_source_reads() {
        let ev = with_metadata(&big_metadata());
        let fitted = fit_attribute_values(&ev, 1024, "Pub/Sub").expect("fits reduced");
        let sent = fitted.ext_string(types::EXT_METADATA).expect("metadata");
        assert!(sent.len() <= 1024, "{}", sent.len());
        assert_eq!(parsed(&sent), kept(true));
        // Only what is over is touched.
        let small = with_metadata(&serde_json::json!({"name": "w1", "labels": {"a": "b"}}));
        assert!(matches!(
            fit_attribute_values(&small, 1024, "Pub/Sub"),
            Ok(Cow::Borrowed(_))
        ));
    }

    #[test]
    fn the_timestamps_go_too_when_the_rest_is_still_over() {
        let meta = big_metadata().to_string();
        let with_timestamps = reduce_metadata(&meta, 1024).expect("fits");
        let core = reduce_metadata(&meta, with_timestamps.len() - 1).expect("the core fits");
        assert_eq!(parsed(&core), kept(false));
        assert_eq!(reduce_metadata(&meta, 20), None);
        assert_eq!(reduce_metadata("[1]", 1024), None, "no object");
    }

    #[test]
    fn any_other_attribute_over_the_limit_refuses_the_event() {
        let ev = with_metadata(&serde_json::json!({"name": "w1"}))
            .with_ext(types::EXT_LOG_TRACING, ExtValue::String("t".repeat(1025)));
        let e = fit_attribute_values(&ev, 1024, "Pub/Sub")
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("logtracing") && e.contains("1025 bytes") && e.contains("1024"),
            "{e}"
        );
        let ev = with_metadata(&serde_json::json!({"name": "n".repeat(2000)}));
        assert!(fit_attribute_values(&ev, 1024, "Pub/Sub").is_err());
    }

    #[test]
    fn an_event_over_the_ceiling_is_refused_naming_sizes_and_origin() {
        let ceiling = Ceiling::new("MQTT", 100, CeilingOrigin::Broker, |e: &CloudEvent| {
            e.data.as_ref().map_or(0, Vec::len)
        });
        let mut ev = with_metadata(&serde_json::json!({}));
        ev.data = Some(vec![b'x'; 100]);
        assert!(ceiling.fits(&ev).is_ok(), "at the ceiling is within it");
        ev.data = Some(vec![b'x'; 101]);
        let e = ceiling.fits(&ev).expect_err("over").to_string();
        assert_eq!(
            e,
            "io.open-cluster-management.works.v1alpha1.manifestbundles.status.update_request \
             event of resource uid-1 is 101 bytes on MQTT, over its ceiling of 100 bytes \
             (the broker's Maximum Packet Size)"
        );
        ceiling.set(200, CeilingOrigin::Config("maxPacketSize"));
        assert!(ceiling.fits(&ev).is_ok());
        assert_eq!(ceiling.origin(), CeilingOrigin::Config("maxPacketSize"));
        assert_eq!(Ceiling::unlimited().limit(), usize::MAX);
    }
}
