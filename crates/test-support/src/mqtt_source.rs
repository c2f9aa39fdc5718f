//! A test source that speaks the source side of the CloudEvents work protocol the way Maestro
//! does, over a real MQTT 5 broker (`e2e/scripts/mosquitto.sh run ...` exports `MQTT_BROKER`).
//!
//! [`MaestroSource`] keeps a resource store (consumer, version, ManifestBundle, soft delete, the
//! latest accepted status with its hash and sequence id), publishes spec events to
//! `sources/<source>/consumers/<consumer>/sourceevents` in binary mode, and judges the agent's
//! events from `sources/<source>/consumers/+/agentevents` with Maestro's rules
//! (read from Maestro's server code):
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
//! A `spec.resync_request` is answered as sdk-go's source client does (see
//! [`spec_resync_answer`]). Everything the source decides is counted ([`SourceCounters`]) and
//! every agent event is kept ([`MaestroSource::events`]) for wire assertions; every status event
//! is also kept with its arrival time ([`MaestroSource::status_arrivals`]) for the benchmark.
//!
//! For chaos runs the source can restart as a crashed Maestro server would
//! ([`MaestroSource::restart`]: a new connection, then Maestro's status resync request), and
//! inject faults into its traffic ([`MaestroSource::arm_faults`], see [`crate::wire_faults`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cloudevents::codec::{ResourceStatusHash, ResourceStatusHashList, ResourceVersionList};
use cloudevents::mqtt::{self, Message};
use cloudevents::snowflake::EPOCH_MS;
use cloudevents::types::{self, EventType};
use cloudevents::{CloudEvent, ExtValue};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties, SubscribeReasonCode};
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::wire_faults::{Addressed, WireFaults};

/// Largest MQTT packet the source accepts (and asks the broker for): 8 MiB.
pub const MAX_PACKET: u32 = 8 * 1024 * 1024;
/// Pause before the event loop reconnects after losing the broker.
pub const RECONNECT_DELAY: Duration = Duration::from_millis(100);
/// How long [`MaestroSource::connect`] waits for its first subscription.
pub const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often [`MaestroSource::wait_until`] re-evaluates its condition.
pub const WAIT_POLL: Duration = Duration::from_millis(50);

/// Why a source operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The broker address is not `host:port`.
    #[error("broker address {0:?} is not host:port")]
    BadBroker(String),
    /// A source id or consumer name cannot appear in an MQTT topic.
    #[error("{0:?} cannot appear in an MQTT topic (it must match [a-z0-9-]+)")]
    BadName(String),
    /// The source was not subscribed to the agent events in time.
    #[error("not subscribed at {broker} within {timeout:?}; last broker error: {last_error}")]
    NotSubscribed {
        /// The broker address.
        broker: String,
        /// How long the source waited.
        timeout: Duration,
        /// The last error the event loop saw (or "none").
        last_error: String,
    },
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
    /// The source's publishing task has stopped.
    #[error("the source's publishing task has stopped")]
    Closed,
}

/// The topic a source publishes a consumer's spec events (and status resync requests) to.
pub fn source_events_topic(source_id: &str, consumer: &str) -> String {
    format!("sources/{source_id}/consumers/{consumer}/sourceevents")
}

/// The topic an agent of `consumer` publishes its events to.
pub fn agent_events_topic(source_id: &str, consumer: &str) -> String {
    format!("sources/{source_id}/consumers/{consumer}/agentevents")
}

/// One resource as the source stores it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredResource {
    /// The resource id (a uuid unless given): the `resourceid` extension, the work's UID.
    pub id: String,
    /// The consumer (cluster) it is placed on: the `clustername` extension.
    pub consumer: String,
    /// The spec version, starting at 1: the `resourceversion` extension.
    pub version: i64,
    /// The ObjectMeta JSON sent in the `metadata` extension (at least `name`).
    pub metadata: Value,
    /// The ManifestBundle JSON sent as data.
    pub bundle: Value,
    /// Set by a soft delete ([`MaestroSource::delete`]); sent as `deletiontimestamp`.
    pub deleted_at: Option<DateTime<Utc>>,
    /// The latest accepted status (the ManifestBundleStatus JSON of the agent's event).
    pub status: Option<Value>,
    /// The `statushash` of the latest accepted status event.
    pub status_hash: Option<String>,
    /// The `sequenceid` of the latest accepted status event.
    pub sequence_id: Option<String>,
    /// How many status events were accepted for it.
    pub statuses_accepted: u64,
    /// How many spec events the source published for it (resync answers included).
    pub spec_events_sent: u64,
    /// Creation order within the source (resync answers follow it).
    pub ordinal: u64,
}

/// What the source decided about one agent status event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatusOutcome {
    /// Stored as the resource's latest status.
    Accepted,
    /// The same event as the stored one (same `sequenceid` and data): a no-op.
    Unchanged,
    /// `Deleted=True` on a soft-deleted resource: the resource was hard-deleted.
    Deleted,
    /// `resourceversion` is not the stored version: disregarded.
    Stale {
        /// The version the source holds.
        stored: i64,
        /// The version the event carried.
        got: i64,
    },
    /// `sequenceid` missing, malformed, from another node or not newer.
    RejectedSequence(String),
    /// `originalsource` is missing or not this source's id (the value, "" when missing).
    RejectedSource(String),
    /// The event's `clustername` is not the resource's consumer.
    RejectedConsumer {
        /// The resource's consumer.
        stored: String,
        /// The event's `clustername`.
        got: String,
    },
    /// No such resource (never created or already hard-deleted): skipped.
    UnknownResource,
    /// A required extension or the status data is missing or malformed.
    Malformed(String),
}

/// A resource the source forgot after the agent's `Deleted=True` status.
#[derive(Clone, Debug, PartialEq)]
pub struct HardDeletion {
    /// The resource id.
    pub id: String,
    /// When the source took the `Deleted` status.
    pub at: DateTime<Utc>,
    /// Whether the source had asked for the deletion (false: the agent's TTL collection).
    pub requested: bool,
    /// The status that carried `Deleted=True` (the work's last conditions).
    pub status: Value,
}

/// One judged status event: which event, about which resource, and the decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusVerdict {
    /// The event's `id`.
    pub event_id: String,
    /// The event's `resourceid` ("" when missing).
    pub resource_id: String,
    /// The decision.
    pub outcome: StatusOutcome,
}

/// One status event as it arrived, for latency measurements (`make bench-mqtt`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusArrival {
    /// When the source's event loop took the message off the connection.
    pub at: Instant,
    /// The event's `resourceid` ("" when missing).
    pub resource_id: String,
    /// `status.update_request` or `status.resync_response`.
    pub event_type: EventType,
    /// The status has `Applied` = `True`.
    pub applied: bool,
    /// The status has `Available` = `True`.
    pub available: bool,
    /// The status has `Deleted` = `True`.
    pub deleted: bool,
    /// What the source decided about it.
    pub outcome: StatusOutcome,
}

/// What the source counted since it started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceCounters {
    /// MQTT messages received from agents.
    pub received: u64,
    /// Messages that were no CloudEvent, of an unknown type, or missing what their type needs.
    pub malformed: u64,
    /// Status events stored.
    pub accepted: u64,
    /// Status events equal to the stored one (redeliveries): no-ops.
    pub unchanged: u64,
    /// Status events whose `resourceversion` was not the stored version.
    pub stale: u64,
    /// Status events refused for their `sequenceid`.
    pub rejected_sequence: u64,
    /// Status events refused for their `originalsource`.
    pub rejected_source: u64,
    /// Status events whose `clustername` was not the resource's consumer.
    pub rejected_consumer: u64,
    /// Status events about resources the source does not have.
    pub unknown_resource: u64,
    /// Resources hard-deleted after a `Deleted=True` status.
    pub deleted: u64,
    /// `Deleted=True` statuses for resources that were not soft-deleted (then judged normally).
    pub deleted_unrequested: u64,
    /// `spec.resync_request` events received.
    pub spec_resync_requests: u64,
    /// `spec.resync_response` events published in answer.
    pub spec_resync_responses: u64,
    /// Agent events of a known type the source does not act on.
    pub ignored: u64,
    /// Status events received, by type (`status.update_request`, `status.resync_response`).
    pub status_events_by_type: BTreeMap<EventType, u64>,
    /// CloudEvents published by the source, by type (raw publishes not included).
    pub sent_by_type: BTreeMap<EventType, u64>,
    /// Successful subscriptions to the agent events (1 + resubscriptions after broker loss).
    pub subscriptions: u64,
}

/// Whether a ManifestBundleStatus JSON has the condition `Deleted` = `True` (Maestro's
/// `meta.IsStatusConditionTrue(conditions, "Deleted")`: the first condition of that type counts).
pub fn is_deleted(status: &Value) -> bool {
    condition_true(status, "Deleted")
}

/// Whether a ManifestBundleStatus JSON has the condition `ty` = `True` (the first of that type).
pub fn condition_true(status: &Value, ty: &str) -> bool {
    status
        .get("conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
        })
        .and_then(|c| c.get("status").and_then(Value::as_str))
        == Some("True")
}

/// The parts of a snowflake id Maestro compares: (Unix ms, node, step).
pub fn snowflake_parts(id: u64) -> (u64, u64, u64) {
    ((id >> 22) + EPOCH_MS, (id >> 12) & 0x3ff, id & 0xfff)
}

/// Maestro's sequence check (`compareSequenceIDs`): `new` must be a snowflake; with a stored
/// `last`, it must come from the same node and be newer by (time, step). The error says why not.
pub fn check_sequence(new: Option<&str>, last: Option<&str>) -> Result<(), String> {
    let parse = |s: &str| -> Result<u64, String> {
        // Go parses with strconv.ParseInt: a non-negative decimal int64.
        s.parse::<i64>()
            .ok()
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| format!("sequenceid {s:?} is not a snowflake id"))
    };
    let new = match new {
        Some(s) if !s.is_empty() => parse(s)?,
        _ => return Err("no sequenceid".into()),
    };
    let Some(last) = last.filter(|s| !s.is_empty()) else {
        return Ok(());
    };
    let last = parse(last)?;
    let (nt, nn, ns) = snowflake_parts(new);
    let (lt, ln, ls) = snowflake_parts(last);
    if nn != ln {
        return Err(format!(
            "sequenceid {new} is from node {nn}, the stored {last} from node {ln}"
        ));
    }
    if (nt, ns) > (lt, ls) {
        Ok(())
    } else {
        Err(format!(
            "sequenceid {new} is not newer than the stored {last}"
        ))
    }
}

/// The spec event Maestro publishes for `r`: `resourceid`, `resourceversion`, `clustername`,
/// `metadata`, `deletiontimestamp` when soft-deleted, and the bundle as `application/json` data.
pub fn spec_event(source_id: &str, ty: EventType, r: &StoredResource) -> CloudEvent {
    let mut ev = CloudEvent::new(ty, source_id)
        .with_ext(types::EXT_RESOURCE_ID, ExtValue::String(r.id.clone()))
        .with_ext(types::EXT_RESOURCE_VERSION, ExtValue::Integer(r.version))
        .with_ext(
            types::EXT_CLUSTER_NAME,
            ExtValue::String(r.consumer.clone()),
        )
        .with_ext(
            types::EXT_METADATA,
            ExtValue::String(r.metadata.to_string()),
        );
    if let Some(t) = r.deleted_at {
        ev = ev.with_ext(types::EXT_DELETION_TIMESTAMP, ExtValue::Time(t));
    }
    ev.data = Some(r.bundle.to_string().into_bytes());
    ev
}

/// The source's answer to a `spec.resync_request` of `consumer` (sdk-go `respondResyncSpecRequest`),
/// in order:
///
/// - each resource of the consumer (creation order) that is soft-deleted, regardless of version,
///   as `spec.resync_response` with data and `deletiontimestamp`;
/// - each other resource of the consumer whose version is 0 or greater than the one the agent
///   listed (an unlisted resource counts as listed at 0), with data;
/// - for each id the agent listed that the consumer has no resource for, a `spec.resync_response`
///   with only `resourceid`, the listed `resourceversion`, `clustername` and
///   `deletiontimestamp` = `now`: no data, no content type.
///
/// Like sdk-go, a consumer without any resource gets no answer at all, not even deletions.
pub fn spec_resync_answer<'a>(
    source_id: &str,
    consumer: &str,
    resources: impl IntoIterator<Item = &'a StoredResource>,
    request: &ResourceVersionList,
    now: DateTime<Utc>,
) -> Vec<CloudEvent> {
    let mut ours: Vec<&StoredResource> = resources
        .into_iter()
        .filter(|r| r.consumer == consumer)
        .collect();
    if ours.is_empty() {
        return vec![];
    }
    ours.sort_by_key(|r| r.ordinal);
    let listed = |id: &str| {
        request
            .resource_versions
            .iter()
            .find(|v| v.resource_id == id)
            .map_or(0, |v| v.resource_version)
    };
    let mut out = Vec::new();
    for r in &ours {
        if r.deleted_at.is_some() || r.version == 0 || r.version > listed(&r.id) {
            out.push(spec_event(source_id, EventType::SpecResyncResponse, r));
        }
    }
    for v in &request.resource_versions {
        if ours.iter().any(|r| r.id == v.resource_id) {
            continue;
        }
        let mut ev = CloudEvent::new(EventType::SpecResyncResponse, source_id)
            .with_ext(
                types::EXT_RESOURCE_ID,
                ExtValue::String(v.resource_id.clone()),
            )
            .with_ext(
                types::EXT_RESOURCE_VERSION,
                ExtValue::Integer(v.resource_version),
            )
            .with_ext(
                types::EXT_CLUSTER_NAME,
                ExtValue::String(consumer.to_string()),
            )
            .with_ext(types::EXT_DELETION_TIMESTAMP, ExtValue::Time(now));
        ev.datacontenttype = None;
        ev.data = None;
        out.push(ev);
    }
    out
}

/// Judges one status event (`status.update_request` or `status.resync_response`) against the
/// store in Maestro's order and applies it. `Deleted=True` hard-deletes the resource, as Maestro
/// does; the flag says the source had not asked for that deletion (the agent's TTL did).
pub fn apply_status(
    resources: &mut BTreeMap<String, StoredResource>,
    source_id: &str,
    ev: &CloudEvent,
) -> (StatusOutcome, bool) {
    let malformed = |why: String| (StatusOutcome::Malformed(why), false);
    let Some(id) = ev.ext_string(types::EXT_RESOURCE_ID) else {
        return malformed("no resourceid".into());
    };
    let version = match ev.ext_integer(types::EXT_RESOURCE_VERSION) {
        Ok(Some(v)) => v,
        Ok(None) => return malformed("no resourceversion".into()),
        Err(e) => return malformed(e.to_string()),
    };
    let Some(cluster) = ev.ext_string(types::EXT_CLUSTER_NAME) else {
        return malformed("no clustername".into());
    };
    let original = ev
        .ext_string(types::EXT_ORIGINAL_SOURCE)
        .unwrap_or_default();
    if original != source_id {
        return (StatusOutcome::RejectedSource(original), false);
    }
    let Some(r) = resources.get_mut(&id) else {
        return (StatusOutcome::UnknownResource, false);
    };
    if r.consumer != cluster {
        return (
            StatusOutcome::RejectedConsumer {
                stored: r.consumer.clone(),
                got: cluster,
            },
            false,
        );
    }
    let status: Value = match ev.data.as_deref().map(serde_json::from_slice::<Value>) {
        Some(Ok(v @ Value::Object(_))) => v,
        Some(Ok(other)) => return malformed(format!("status data is not an object: {other}")),
        Some(Err(e)) => return malformed(format!("status data is not JSON: {e}")),
        None => return malformed("no status data".into()),
    };
    // Maestro hard-deletes on Deleted=True whether or not it asked for the deletion (a work
    // deleted by the agent's TTL); the flag tells tests which case it was.
    if is_deleted(&status) {
        let unrequested = r.deleted_at.is_none();
        resources.remove(&id);
        return (StatusOutcome::Deleted, unrequested);
    }
    if r.version != version {
        return (
            StatusOutcome::Stale {
                stored: r.version,
                got: version,
            },
            false,
        );
    }
    let seq = ev.ext_string(types::EXT_SEQUENCE_ID);
    if r.status.as_ref() == Some(&status) && r.sequence_id.is_some() && r.sequence_id == seq {
        return (StatusOutcome::Unchanged, false);
    }
    if let Err(why) = check_sequence(seq.as_deref(), r.sequence_id.as_deref()) {
        return (StatusOutcome::RejectedSequence(why), false);
    }
    r.status = Some(status);
    r.status_hash = ev.ext_string(types::EXT_STATUS_HASH);
    r.sequence_id = seq;
    r.statuses_accepted += 1;
    (StatusOutcome::Accepted, false)
}

/// Copies of the resources of a store, in creation order.
pub fn in_creation_order(resources: &BTreeMap<String, StoredResource>) -> Vec<StoredResource> {
    let mut all: Vec<_> = resources.values().cloned().collect();
    all.sort_by_key(|r| r.ordinal);
    all
}

/// How to create a resource ([`MaestroSource::create_with`]).
#[derive(Clone, Debug, Default)]
pub struct CreateOptions {
    /// The resource id; a fresh uuid when `None`.
    pub id: Option<String>,
    /// `metadata.name`; the resource id when `None` (Maestro forces the id).
    pub name: Option<String>,
    /// Further ObjectMeta fields (labels, annotations, ...) for the `metadata` extension.
    pub metadata: Option<Value>,
}

struct Outgoing {
    topic: String,
    message: Message,
}

#[derive(Default)]
struct State {
    resources: BTreeMap<String, StoredResource>,
    hard_deleted: BTreeSet<String>,
    deletions: Vec<HardDeletion>,
    faults: WireFaults,
    counters: SourceCounters,
    events: Vec<CloudEvent>,
    sent: Vec<CloudEvent>,
    verdicts: Vec<StatusVerdict>,
    arrivals: Vec<StatusArrival>,
    next_ordinal: u64,
    subscribed: bool,
    last_error: Option<String>,
}

struct Shared {
    source_id: String,
    state: Mutex<State>,
    /// The publishing task's queue; replaced when the source restarts.
    tx: Mutex<mpsc::UnboundedSender<Outgoing>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a test thread panicked mid-update; the data is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `ev` for `consumer` in binary mode, through the armed wire faults; called with
    /// the state locked so the wire order is the store's order.
    fn send(&self, st: &mut State, consumer: &str, ev: CloudEvent) -> Result<(), Error> {
        let out = st.faults.outgoing(consumer, ev);
        self.send_all(st, out)
    }

    /// Queues events as they are (the wire faults already applied).
    fn send_all(&self, st: &mut State, out: Vec<Addressed>) -> Result<(), Error> {
        for (consumer, ev) in out {
            self.wire(st, &consumer, ev)?;
        }
        Ok(())
    }

    /// Queues one event for `consumer`'s topic and records it.
    fn wire(&self, st: &mut State, consumer: &str, ev: CloudEvent) -> Result<(), Error> {
        let message = mqtt::to_binary(&ev);
        self.tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Outgoing {
                topic: source_events_topic(&self.source_id, consumer),
                message,
            })
            .map_err(|_| Error::Closed)?;
        if let Ok(ty) = ev.event_type() {
            *st.counters.sent_by_type.entry(ty).or_default() += 1;
        }
        if let Some(r) = ev
            .ext_string(types::EXT_RESOURCE_ID)
            .and_then(|id| st.resources.get_mut(&id))
            && ev.data.is_some()
        {
            r.spec_events_sent += 1;
        }
        st.sent.push(ev);
        Ok(())
    }
}

/// A Maestro-shaped source on an MQTT 5 broker; its tasks stop when it is dropped.
pub struct MaestroSource {
    shared: Arc<Shared>,
    broker: String,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for MaestroSource {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(Error::BadName(name.to_string()));
    }
    Ok(())
}

impl MaestroSource {
    /// Connects to `broker` (`host:port`) as source `source_id` (Maestro's is `maestro`), spawns
    /// the event loop on the current tokio runtime and waits until it is subscribed to
    /// `sources/<source_id>/consumers/+/agentevents` (at most [`SUBSCRIBE_TIMEOUT`]).
    pub async fn connect(broker: &str, source_id: &str) -> Result<Self, Error> {
        let (host, port) = broker
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
            .filter(|(h, _)| !h.is_empty())
            .ok_or_else(|| Error::BadBroker(broker.to_string()))?;
        check_name(source_id)?;
        let (tx, _) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            source_id: source_id.to_string(),
            state: Mutex::new(State::default()),
            tx: Mutex::new(tx),
        });
        let mut source = Self {
            shared,
            broker: broker.to_string(),
            tasks: Vec::new(),
        };
        source.tasks = source.spawn_client(host, port);
        source.wait_subscribed().await?;
        Ok(source)
    }

    /// A new MQTT client (new client id, clean start) with its event loop and publishing task.
    fn spawn_client(&self, host: String, port: u16) -> Vec<JoinHandle<()>> {
        let client_id = format!(
            "{}-source-{}",
            self.shared.source_id,
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let mut mo = MqttOptions::new(client_id, host, port);
        mo.set_clean_start(true)
            .set_keep_alive(Duration::from_secs(5))
            .set_connection_timeout(5)
            .set_max_packet_size(Some(MAX_PACKET));
        let (client, eventloop) = AsyncClient::new(mo, 256);
        let (tx, rx) = mpsc::unbounded_channel();
        *self.shared.tx.lock().unwrap_or_else(|e| e.into_inner()) = tx;
        vec![
            tokio::spawn(event_loop(eventloop, client.clone(), self.shared.clone())),
            tokio::spawn(publish_loop(client, rx)),
        ]
    }

    /// Restarts the source as a crashed and restarted Maestro server would: the connection and
    /// everything queued on it are dropped (spec events not yet on the wire and status events
    /// the broker had not delivered are lost), the store stays (it is a database), a new client
    /// subscribes; then, as Maestro does when its subscription comes up, it asks every consumer
    /// it holds resources of for a status resync with the hashes it has, `batch` hashes per
    /// request (Maestro: 1,000).
    pub async fn restart(&mut self, batch: usize) -> Result<(), Error> {
        self.go_away();
        let (host, port) = self
            .broker
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
            .ok_or_else(|| Error::BadBroker(self.broker.clone()))?;
        self.tasks = self.spawn_client(host, port);
        self.wait_subscribed().await?;
        let consumers: BTreeSet<String> =
            self.resources().into_iter().map(|r| r.consumer).collect();
        for consumer in consumers {
            let hashes = self.status_hashes(&consumer);
            for chunk in hashes.chunks(batch.max(1)) {
                self.request_status_resync(&consumer, chunk.to_vec())?;
            }
        }
        Ok(())
    }

    /// Disconnects, as a source that crashed and is not back yet: nothing is subscribed to the
    /// agents' events until [`MaestroSource::restart`], so the broker acknowledges them as heard
    /// by nobody and keeps none. The store stays.
    pub fn go_away(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.shared.lock().subscribed = false;
    }

    async fn wait_subscribed(&self) -> Result<(), Error> {
        let source = self;
        let deadline = tokio::time::Instant::now() + SUBSCRIBE_TIMEOUT;
        while !source.is_subscribed() {
            if tokio::time::Instant::now() >= deadline {
                let last_error = source
                    .shared
                    .lock()
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "none".into());
                return Err(Error::NotSubscribed {
                    broker: source.broker.clone(),
                    timeout: SUBSCRIBE_TIMEOUT,
                    last_error,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Arms or reads the wire faults (see [`WireFaults`]); armed faults apply to the events
    /// sent from now on.
    pub fn faults<R>(&self, f: impl FnOnce(&mut WireFaults) -> R) -> R {
        f(&mut self.shared.lock().faults)
    }

    /// Sends the oldest batch of spec events the wire faults hold back; false when none.
    pub fn release_held(&self) -> Result<bool, Error> {
        let mut st = self.shared.lock();
        let batch = st.faults.release();
        let any = !batch.is_empty();
        self.shared.send_all(&mut st, batch)?;
        Ok(any)
    }

    /// Every resource forgotten after a `Deleted` status, in order.
    pub fn hard_deletions(&self) -> Vec<HardDeletion> {
        self.shared.lock().deletions.clone()
    }

    /// The source id (the `source` of spec events, the `originalsource` statuses must carry).
    pub fn source_id(&self) -> &str {
        &self.shared.source_id
    }

    /// The broker address it was connected to.
    pub fn broker(&self) -> &str {
        &self.broker
    }

    /// Whether the source is currently subscribed to the agent events.
    pub fn is_subscribed(&self) -> bool {
        self.shared.lock().subscribed
    }

    /// Creates a resource on `consumer` (id a fresh uuid, `metadata.name` = id, version 1) and
    /// publishes `spec.create_request`; returns the id.
    pub fn create(&self, consumer: &str, bundle: Value) -> Result<String, Error> {
        self.create_with(consumer, bundle, CreateOptions::default())
    }

    /// Creates a resource with a chosen id, name or further metadata, and publishes
    /// `spec.create_request`; returns the id.
    pub fn create_with(
        &self,
        consumer: &str,
        bundle: Value,
        opts: CreateOptions,
    ) -> Result<String, Error> {
        check_name(consumer)?;
        let id = opts.id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let mut metadata = match opts.metadata {
            None => serde_json::Map::new(),
            Some(Value::Object(m)) => m,
            Some(other) => return Err(Error::BadMetadata(other.to_string())),
        };
        metadata.insert(
            "name".into(),
            Value::String(opts.name.unwrap_or_else(|| id.clone())),
        );
        let mut st = self.shared.lock();
        if st.resources.contains_key(&id) || st.hard_deleted.contains(&id) {
            return Err(Error::Exists(id));
        }
        st.next_ordinal += 1;
        let r = StoredResource {
            id: id.clone(),
            consumer: consumer.to_string(),
            version: 1,
            metadata: Value::Object(metadata),
            bundle,
            deleted_at: None,
            status: None,
            status_hash: None,
            sequence_id: None,
            statuses_accepted: 0,
            spec_events_sent: 0,
            ordinal: st.next_ordinal,
        };
        let ev = spec_event(&self.shared.source_id, EventType::SpecCreate, &r);
        st.resources.insert(id.clone(), r);
        self.shared.send(&mut st, consumer, ev)?;
        Ok(id)
    }

    /// Replaces the bundle, bumps the version and publishes `spec.update_request`; returns the
    /// new version. A soft-deleted resource is [`Error::Deleting`].
    pub fn update(&self, id: &str, bundle: Value) -> Result<i64, Error> {
        let mut st = self.shared.lock();
        let r = st
            .resources
            .get_mut(id)
            .ok_or_else(|| Error::UnknownResource(id.to_string()))?;
        if r.deleted_at.is_some() {
            return Err(Error::Deleting(id.to_string()));
        }
        r.version += 1;
        r.bundle = bundle;
        let (version, consumer) = (r.version, r.consumer.clone());
        let ev = spec_event(&self.shared.source_id, EventType::SpecUpdate, r);
        self.shared.send(&mut st, &consumer, ev)?;
        Ok(version)
    }

    /// Soft-deletes the resource (sets `deleted_at`) and publishes `spec.delete_request` with
    /// `deletiontimestamp` and the bundle. Idempotent like Maestro: a second delete sends nothing
    /// (use [`MaestroSource::republish`] to send the delete again).
    pub fn delete(&self, id: &str) -> Result<(), Error> {
        let mut st = self.shared.lock();
        let r = st
            .resources
            .get_mut(id)
            .ok_or_else(|| Error::UnknownResource(id.to_string()))?;
        if r.deleted_at.is_some() {
            return Ok(());
        }
        r.deleted_at = Some(Utc::now());
        let consumer = r.consumer.clone();
        let ev = spec_event(&self.shared.source_id, EventType::SpecDelete, r);
        self.shared.send(&mut st, &consumer, ev)
    }

    /// Publishes the resource's current spec again: `spec.delete_request` when soft-deleted,
    /// else `spec.create_request` at version 1 and `spec.update_request` after.
    pub fn republish(&self, id: &str) -> Result<(), Error> {
        let mut st = self.shared.lock();
        let r = st
            .resources
            .get(id)
            .ok_or_else(|| Error::UnknownResource(id.to_string()))?;
        let ty = match (r.deleted_at, r.version) {
            (Some(_), _) => EventType::SpecDelete,
            (None, 1) => EventType::SpecCreate,
            (None, _) => EventType::SpecUpdate,
        };
        let consumer = r.consumer.clone();
        let ev = spec_event(&self.shared.source_id, ty, r);
        self.shared.send(&mut st, &consumer, ev)
    }

    /// Publishes any CloudEvent (binary mode) to `consumer`'s source-events topic, as is.
    pub fn publish_event(&self, consumer: &str, ev: CloudEvent) -> Result<(), Error> {
        check_name(consumer)?;
        let mut st = self.shared.lock();
        self.shared.send(&mut st, consumer, ev)
    }

    /// Publishes a raw MQTT message to `consumer`'s source-events topic (malformed or
    /// wrong-cluster tests); it is not recorded in [`MaestroSource::sent`].
    pub fn publish_raw(
        &self,
        consumer: &str,
        content_type: Option<String>,
        user_properties: Vec<(String, String)>,
        payload: Vec<u8>,
    ) -> Result<(), Error> {
        check_name(consumer)?;
        self.shared
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Outgoing {
                topic: source_events_topic(&self.shared.source_id, consumer),
                message: Message {
                    content_type,
                    user_properties,
                    payload,
                },
            })
            .map_err(|_| Error::Closed)
    }

    /// Publishes `status.resync_request` to `consumer` with `{"statusHashes":[...]}` from
    /// `(resource id, status hash)` pairs; an empty list asks for every status.
    pub fn request_status_resync(
        &self,
        consumer: &str,
        hashes: Vec<(String, String)>,
    ) -> Result<(), Error> {
        check_name(consumer)?;
        let list = ResourceStatusHashList {
            status_hashes: hashes
                .into_iter()
                .map(|(resource_id, status_hash)| ResourceStatusHash {
                    resource_id,
                    status_hash,
                })
                .collect(),
        };
        let mut ev = CloudEvent::new(EventType::StatusResyncRequest, self.source_id()).with_ext(
            types::EXT_CLUSTER_NAME,
            ExtValue::String(consumer.to_string()),
        );
        ev.data = Some(json_bytes(&list));
        let mut st = self.shared.lock();
        self.shared.send(&mut st, consumer, ev)
    }

    /// The `(id, status hash)` of every resource of `consumer` (hash "" without a status), as
    /// Maestro lists them for its own status resync request.
    pub fn status_hashes(&self, consumer: &str) -> Vec<(String, String)> {
        self.resources()
            .into_iter()
            .filter(|r| r.consumer == consumer)
            .map(|r| (r.id, r.status_hash.unwrap_or_default()))
            .collect()
    }

    /// The latest accepted status (ManifestBundleStatus JSON) of a resource.
    pub fn status(&self, id: &str) -> Option<Value> {
        self.shared.lock().resources.get(id)?.status.clone()
    }

    /// The `statushash` of the latest accepted status of a resource.
    pub fn status_hash(&self, id: &str) -> Option<String> {
        self.shared.lock().resources.get(id)?.status_hash.clone()
    }

    /// The `sequenceid` of the latest accepted status of a resource.
    pub fn sequence_id(&self, id: &str) -> Option<String> {
        self.shared.lock().resources.get(id)?.sequence_id.clone()
    }

    /// The `status` of the work condition `ty` (e.g. "Applied") in the latest accepted status.
    pub fn condition_status(&self, id: &str, ty: &str) -> Option<String> {
        let status = self.status(id)?;
        status
            .get("conditions")?
            .as_array()?
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))?
            .get("status")?
            .as_str()
            .map(str::to_string)
    }

    /// Whether the source holds the resource (false before create and after a hard delete).
    pub fn exists(&self, id: &str) -> bool {
        self.shared.lock().resources.contains_key(id)
    }

    /// Whether the resource was hard-deleted after a `Deleted=True` status.
    pub fn hard_deleted(&self, id: &str) -> bool {
        self.shared.lock().hard_deleted.contains(id)
    }

    /// Whether the resource is soft-deleted (waiting for the agent's `Deleted`).
    pub fn is_deleting(&self, id: &str) -> bool {
        self.shared
            .lock()
            .resources
            .get(id)
            .is_some_and(|r| r.deleted_at.is_some())
    }

    /// The resource's spec version.
    pub fn version(&self, id: &str) -> Option<i64> {
        Some(self.shared.lock().resources.get(id)?.version)
    }

    /// A copy of one stored resource.
    pub fn resource(&self, id: &str) -> Option<StoredResource> {
        self.shared.lock().resources.get(id).cloned()
    }

    /// Copies of every stored resource, in creation order.
    pub fn resources(&self) -> Vec<StoredResource> {
        in_creation_order(&self.shared.lock().resources)
    }

    /// The counters so far.
    pub fn counters(&self) -> SourceCounters {
        self.shared.lock().counters.clone()
    }

    /// Every agent event received (decoded as a CloudEvent), in arrival order.
    pub fn events(&self) -> Vec<CloudEvent> {
        self.shared.lock().events.clone()
    }

    /// Every CloudEvent the source published (spec events, resync answers, status resync
    /// requests), in publishing order.
    pub fn sent(&self) -> Vec<CloudEvent> {
        self.shared.lock().sent.clone()
    }

    /// The decision on every status event, in arrival order.
    pub fn status_verdicts(&self) -> Vec<StatusVerdict> {
        self.shared.lock().verdicts.clone()
    }

    /// Every status event with its arrival time, in arrival order.
    pub fn status_arrivals(&self) -> Vec<StatusArrival> {
        self.status_arrivals_from(0)
    }

    /// The status events from the `from`-th on (0-based), so a poller copies only what is new.
    pub fn status_arrivals_from(&self, from: usize) -> Vec<StatusArrival> {
        let st = self.shared.lock();
        st.arrivals.get(from..).unwrap_or_default().to_vec()
    }

    /// Polls `cond` every [`WAIT_POLL`] until it holds; after `timeout` the error describes the
    /// counters and the last status decisions.
    pub async fn wait_until(
        &self,
        cond: impl Fn(&MaestroSource) -> bool,
        timeout: Duration,
    ) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if cond(self) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                let st = self.shared.lock();
                let last: Vec<_> = st.verdicts.iter().rev().take(5).collect();
                return Err(format!(
                    "condition not met within {timeout:?}; subscribed: {}, counters: {:?}, last status verdicts (newest first): {last:?}, last broker error: {:?}",
                    st.subscribed, st.counters, st.last_error
                ));
            }
            tokio::time::sleep(WAIT_POLL).await;
        }
    }
}

fn json_bytes<T: serde::Serialize>(v: &T) -> Vec<u8> {
    // The payload types are plain structs of strings and integers: serializing cannot fail.
    serde_json::to_vec(v).unwrap_or_default()
}

async fn publish_loop(client: AsyncClient, mut rx: mpsc::UnboundedReceiver<Outgoing>) {
    while let Some(o) = rx.recv().await {
        let props = PublishProperties {
            content_type: o.message.content_type,
            user_properties: o.message.user_properties,
            ..Default::default()
        };
        if client
            .publish_with_properties(o.topic, QoS::AtLeastOnce, false, o.message.payload, props)
            .await
            .is_err()
        {
            return; // the event loop is gone
        }
    }
}

async fn event_loop(mut eventloop: EventLoop, client: AsyncClient, shared: Arc<Shared>) {
    let filter = agent_events_topic(&shared.source_id, "+");
    loop {
        match eventloop.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                // Subscribe from another task: the request channel is drained by this loop.
                let (c, f) = (client.clone(), filter.clone());
                tokio::spawn(async move { c.subscribe(f, QoS::AtLeastOnce).await });
            }
            Ok(Event::Incoming(Packet::SubAck(ack))) => {
                let ok = ack
                    .return_codes
                    .iter()
                    .all(|c| matches!(c, SubscribeReasonCode::Success(_)));
                let mut st = shared.lock();
                if ok {
                    st.subscribed = true;
                    st.counters.subscriptions += 1;
                } else {
                    st.last_error = Some(format!("subscription refused: {:?}", ack.return_codes));
                }
            }
            Ok(Event::Incoming(Packet::Publish(p))) => {
                let props = p.properties.clone().unwrap_or_default();
                let msg = Message {
                    content_type: props.content_type,
                    user_properties: props.user_properties,
                    payload: p.payload.to_vec(),
                };
                handle_message(&shared, &msg);
            }
            Ok(Event::Incoming(Packet::Disconnect(d))) => {
                let mut st = shared.lock();
                st.subscribed = false;
                st.last_error = Some(format!("broker disconnected: {:?}", d.reason_code));
            }
            Ok(_) => {}
            Err(e) => {
                {
                    let mut st = shared.lock();
                    st.subscribed = false;
                    st.last_error = Some(e.to_string());
                }
                tokio::time::sleep(RECONNECT_DELAY).await;
            }
        }
    }
}

fn handle_message(shared: &Shared, msg: &Message) {
    let received_at = Instant::now();
    let mut st = shared.lock();
    st.counters.received += 1;
    let ev = match mqtt::from_message(msg) {
        Ok(ev) => ev,
        Err(_) => {
            st.counters.malformed += 1;
            return;
        }
    };
    let Ok(ty) = ev.event_type() else {
        st.events.push(ev);
        st.counters.malformed += 1;
        return;
    };
    if matches!(
        ty,
        EventType::StatusUpdate | EventType::StatusResyncResponse
    ) && st.faults.lose_status()
    {
        return;
    }
    st.events.push(ev.clone());
    match ty {
        EventType::StatusUpdate | EventType::StatusResyncResponse => {
            *st.counters.status_events_by_type.entry(ty).or_default() += 1;
            let (outcome, deleted_unrequested) =
                apply_status(&mut st.resources, &shared.source_id, &ev);
            let id = ev.ext_string(types::EXT_RESOURCE_ID).unwrap_or_default();
            let c = &mut st.counters;
            if deleted_unrequested {
                c.deleted_unrequested += 1;
            }
            match &outcome {
                StatusOutcome::Accepted => c.accepted += 1,
                StatusOutcome::Unchanged => c.unchanged += 1,
                StatusOutcome::Deleted => c.deleted += 1,
                StatusOutcome::Stale { .. } => c.stale += 1,
                StatusOutcome::RejectedSequence(_) => c.rejected_sequence += 1,
                StatusOutcome::RejectedSource(_) => c.rejected_source += 1,
                StatusOutcome::RejectedConsumer { .. } => c.rejected_consumer += 1,
                StatusOutcome::UnknownResource => c.unknown_resource += 1,
                StatusOutcome::Malformed(_) => c.malformed += 1,
            }
            let status = ev
                .data
                .as_deref()
                .and_then(|d| serde_json::from_slice::<Value>(d).ok())
                .unwrap_or(Value::Null);
            if outcome == StatusOutcome::Deleted {
                st.hard_deleted.insert(id.clone());
                st.deletions.push(HardDeletion {
                    id: id.clone(),
                    at: Utc::now(),
                    requested: !deleted_unrequested,
                    status: status.clone(),
                });
            }
            st.arrivals.push(StatusArrival {
                at: received_at,
                resource_id: id.clone(),
                event_type: ty,
                applied: condition_true(&status, "Applied"),
                available: condition_true(&status, "Available"),
                deleted: is_deleted(&status),
                outcome: outcome.clone(),
            });
            st.verdicts.push(StatusVerdict {
                event_id: ev.id.clone(),
                resource_id: id,
                outcome,
            });
        }
        EventType::SpecResyncRequest => {
            st.counters.spec_resync_requests += 1;
            let Some(consumer) = ev.ext_string(types::EXT_CLUSTER_NAME) else {
                st.counters.malformed += 1;
                return;
            };
            let request: ResourceVersionList = match ev.data.as_deref() {
                None => ResourceVersionList::default(),
                Some(d) => match serde_json::from_slice(d) {
                    Ok(l) => l,
                    Err(_) => {
                        st.counters.malformed += 1;
                        return;
                    }
                },
            };
            let answer = spec_resync_answer(
                &shared.source_id,
                &consumer,
                st.resources.values(),
                &request,
                Utc::now(),
            );
            st.counters.spec_resync_responses += answer.len() as u64;
            let now = st.faults.answer(&consumer, answer);
            let _ = shared.send_all(&mut st, now);
        }
        _ => st.counters.ignored += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloudevents::codec::ResourceVersion;
    use cloudevents::snowflake::Snowflake;
    use serde_json::json;

    fn stored(id: &str, consumer: &str, version: i64, ordinal: u64) -> StoredResource {
        StoredResource {
            id: id.into(),
            consumer: consumer.into(),
            version,
            metadata: json!({"name": id}),
            bundle: json!({"manifests": [{"apiVersion": "v1", "kind": "ConfigMap"}]}),
            deleted_at: None,
            status: None,
            status_hash: None,
            sequence_id: None,
            statuses_accepted: 0,
            spec_events_sent: 0,
            ordinal,
        }
    }

    fn request(list: &[(&str, i64)]) -> ResourceVersionList {
        ResourceVersionList {
            resource_versions: list
                .iter()
                .map(|(id, v)| ResourceVersion {
                    resource_id: id.to_string(),
                    resource_version: *v,
                })
                .collect(),
        }
    }

    fn id_of(ev: &CloudEvent) -> String {
        ev.ext_string(types::EXT_RESOURCE_ID).unwrap_or_default()
    }

    #[test]
    fn spec_resync_answer_follows_sdk_go() {
        let now = Utc::now();
        let mut deleting = stored("b", "c1", 1, 2);
        deleting.deleted_at = Some(now);
        let store = [
            stored("a", "c1", 2, 1),
            deleting,
            stored("other", "c2", 1, 3),
            stored("d", "c1", 3, 4),
            stored("e", "c1", 1, 5),
        ];
        let req = request(&[
            ("a", 1),
            ("b", 1),
            ("d", 3),
            ("x", 5),
            ("other", 1),
            ("e", 0),
        ]);
        let answer = spec_resync_answer("maestro", "c1", &store, &req, now);
        let ids: Vec<_> = answer.iter().map(id_of).collect();
        // a: newer; b: deleting regardless; d: same version, skipped; e: listed at 0;
        // x unknown and "other" belongs to another consumer: deletions, in request order.
        assert_eq!(ids, ["a", "b", "e", "x", "other"]);
        for ev in &answer {
            assert_eq!(
                ev.event_type().expect("type"),
                EventType::SpecResyncResponse
            );
            assert_eq!(ev.source, "maestro");
            assert_eq!(
                ev.ext_string(types::EXT_CLUSTER_NAME).as_deref(),
                Some("c1")
            );
        }
        let a = &answer[0];
        assert_eq!(
            a.ext_integer(types::EXT_RESOURCE_VERSION).expect("int"),
            Some(2)
        );
        assert!(!a.extensions.contains_key(types::EXT_DELETION_TIMESTAMP));
        assert_eq!(a.datacontenttype.as_deref(), Some(types::JSON));
        let b = &answer[1];
        assert!(
            b.ext_time(types::EXT_DELETION_TIMESTAMP)
                .expect("time")
                .is_some()
        );
        assert!(
            b.data.is_some(),
            "a deleting resource is sent with its bundle"
        );
        let x = &answer[3];
        assert_eq!(
            x.ext_integer(types::EXT_RESOURCE_VERSION).expect("int"),
            Some(5)
        );
        assert_eq!(
            x.ext_time(types::EXT_DELETION_TIMESTAMP).expect("time"),
            Some(now)
        );
        assert!(x.data.is_none() && x.datacontenttype.is_none());
        assert!(!x.extensions.contains_key(types::EXT_METADATA));
        let wire = mqtt::to_binary(x);
        assert!(wire.payload.is_empty() && wire.content_type.is_none());

        // An empty request: everything of the consumer goes out, nothing is deleted.
        let all = spec_resync_answer("maestro", "c1", &store, &request(&[]), now);
        assert_eq!(
            all.iter().map(id_of).collect::<Vec<_>>(),
            ["a", "b", "d", "e"]
        );
        // sdk-go answers nothing at all to a consumer without resources.
        assert!(spec_resync_answer("maestro", "c9", &store, &req, now).is_empty());
    }

    #[test]
    fn sequence_ids_must_grow_on_one_node() {
        let ids = Snowflake::new();
        let a = ids.next_at(EPOCH_MS + 1_000).to_string();
        let b = ids.next_at(EPOCH_MS + 1_000).to_string(); // same ms, next step
        let c = ids.next_at(EPOCH_MS + 2_000).to_string();
        assert_eq!(check_sequence(Some(&a), None), Ok(()));
        assert_eq!(check_sequence(Some(&b), Some(&a)), Ok(()));
        assert_eq!(check_sequence(Some(&c), Some(&b)), Ok(()));
        assert!(check_sequence(Some(&a), Some(&b)).is_err());
        assert!(check_sequence(Some(&b), Some(&b)).is_err());
        assert!(check_sequence(Some(&a), Some(&c)).is_err());
        assert!(check_sequence(None, Some(&a)).is_err());
        assert!(check_sequence(None, None).is_err());
        assert!(check_sequence(Some(""), None).is_err());
        assert!(check_sequence(Some("x1"), None).is_err());
        assert!(check_sequence(Some("-5"), None).is_err());
        assert!(check_sequence(Some(&c), Some("garbage")).is_err());
        // A newer id from node 2 is refused.
        let node2 = (((2_000u64) << 22) | (2 << 12)).to_string();
        let err = check_sequence(Some(&node2), Some(&a)).expect_err("other node");
        assert!(err.contains("node 2"), "{err}");
        // The id the Go agent sent decodes to node 1.
        assert_eq!(snowflake_parts(2_125_174_315_350_495_232).1, 1);
    }

    #[test]
    fn deleted_detection() {
        let cond = |ty: &str, st: &str| json!({"type": ty, "status": st, "reason": "r"});
        assert!(is_deleted(
            &json!({"conditions": [cond("Applied", "True"), cond("Deleted", "True")]})
        ));
        assert!(!is_deleted(
            &json!({"conditions": [cond("Deleted", "False")]})
        ));
        assert!(!is_deleted(
            &json!({"conditions": [cond("Applied", "True")]})
        ));
        assert!(!is_deleted(&json!({"conditions": "Deleted"})));
        assert!(!is_deleted(&json!({})));
        // The first condition of the type counts, as in meta.IsStatusConditionTrue.
        assert!(!is_deleted(
            &json!({"conditions": [cond("Deleted", "False"), cond("Deleted", "True")]})
        ));
    }

    fn status_event(id: &str, version: i64, seq: Option<u64>, status: Value) -> CloudEvent {
        let mut ev = CloudEvent::new(EventType::StatusUpdate, "c1-work-agent")
            .with_ext(types::EXT_RESOURCE_ID, ExtValue::String(id.into()))
            .with_ext(types::EXT_RESOURCE_VERSION, ExtValue::Integer(version))
            .with_ext(types::EXT_CLUSTER_NAME, ExtValue::String("c1".into()))
            .with_ext(
                types::EXT_ORIGINAL_SOURCE,
                ExtValue::String("maestro".into()),
            )
            .with_ext(types::EXT_STATUS_HASH, ExtValue::String("h".into()));
        if let Some(s) = seq {
            ev = ev.with_ext(types::EXT_SEQUENCE_ID, ExtValue::String(s.to_string()));
        }
        ev.data = Some(status.to_string().into_bytes());
        ev
    }

    #[test]
    fn status_judgement_in_maestros_order() {
        let ids = Snowflake::new();
        let mut store = BTreeMap::new();
        store.insert("a".to_string(), stored("a", "c1", 2, 1));
        let applied = json!({"conditions": [{"type": "Applied", "status": "True"}]});
        let deleted = json!({"conditions": [{"type": "Deleted", "status": "True"}]});

        let s1 = ids.next_id();
        let ok = status_event("a", 2, Some(s1), applied.clone());
        assert_eq!(
            apply_status(&mut store, "maestro", &ok),
            (StatusOutcome::Accepted, false)
        );
        assert_eq!(store["a"].sequence_id, Some(s1.to_string()));
        assert_eq!(store["a"].status_hash.as_deref(), Some("h"));
        // The same event again: a no-op.
        assert_eq!(
            apply_status(&mut store, "maestro", &ok).0,
            StatusOutcome::Unchanged
        );
        // Stale version.
        let stale = status_event("a", 1, Some(ids.next_id()), json!({"conditions": []}));
        assert_eq!(
            apply_status(&mut store, "maestro", &stale).0,
            StatusOutcome::Stale { stored: 2, got: 1 }
        );
        // Old or missing sequence id.
        let old = status_event("a", 2, Some(s1 - 1), json!({"conditions": []}));
        assert!(matches!(
            apply_status(&mut store, "maestro", &old).0,
            StatusOutcome::RejectedSequence(_)
        ));
        let none = status_event("a", 2, None, json!({"conditions": []}));
        assert!(matches!(
            apply_status(&mut store, "maestro", &none).0,
            StatusOutcome::RejectedSequence(_)
        ));
        // Wrong original source, consumer, unknown resource, bad data.
        let wrong = status_event("a", 2, Some(ids.next_id()), applied.clone())
            .with_ext(types::EXT_ORIGINAL_SOURCE, ExtValue::String("other".into()));
        assert_eq!(
            apply_status(&mut store, "maestro", &wrong).0,
            StatusOutcome::RejectedSource("other".into())
        );
        let wrong = status_event("a", 2, Some(ids.next_id()), applied.clone())
            .with_ext(types::EXT_CLUSTER_NAME, ExtValue::String("c2".into()));
        assert!(matches!(
            apply_status(&mut store, "maestro", &wrong).0,
            StatusOutcome::RejectedConsumer { .. }
        ));
        let unknown = status_event("zz", 2, Some(ids.next_id()), applied.clone());
        assert_eq!(
            apply_status(&mut store, "maestro", &unknown).0,
            StatusOutcome::UnknownResource
        );
        let bad = status_event("a", 2, Some(ids.next_id()), json!([1]));
        assert!(matches!(
            apply_status(&mut store, "maestro", &bad).0,
            StatusOutcome::Malformed(_)
        ));
        // Deleted on a soft-deleted resource: hard delete, even with a stale version.
        let mut soft = store.clone();
        soft.get_mut("a")
            .map(|r| r.deleted_at = Some(Utc::now()))
            .expect("present");
        let gone = status_event("a", 1, Some(ids.next_id()), deleted.clone());
        assert_eq!(
            apply_status(&mut soft, "maestro", &gone),
            (StatusOutcome::Deleted, false)
        );
        assert!(soft.is_empty());
        // Deleted on a live resource (the agent's TTL): hard delete too, flagged as unrequested.
        let early = status_event("a", 2, Some(ids.next_id()), deleted);
        assert_eq!(
            apply_status(&mut store, "maestro", &early),
            (StatusOutcome::Deleted, true)
        );
        assert!(store.is_empty());
    }

    #[test]
    fn status_events_are_kept_with_their_arrival_and_conditions() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let shared = Shared {
            source_id: "maestro".into(),
            state: Mutex::new(State::default()),
            tx: Mutex::new(tx),
        };
        shared
            .lock()
            .resources
            .insert("a".into(), stored("a", "c1", 1, 1));
        let ids = Snowflake::new();
        let cond = |ty: &str| json!({"type": ty, "status": "True"});
        let before = Instant::now();
        for status in [
            json!({"conditions": [cond("Applied")]}),
            json!({"conditions": [cond("Applied"), cond("Available")]}),
            json!({"conditions": [cond("Deleted")]}),
        ] {
            let ev = status_event("a", 1, Some(ids.next_id()), status);
            handle_message(&shared, &mqtt::to_binary(&ev));
        }
        // Not a CloudEvent: counted as malformed, no arrival.
        handle_message(
            &shared,
            &Message {
                content_type: None,
                user_properties: vec![],
                payload: b"x".to_vec(),
            },
        );
        let st = shared.lock();
        let seen: Vec<_> = st
            .arrivals
            .iter()
            .map(|a| (a.resource_id.as_str(), a.applied, a.available, a.deleted))
            .collect();
        assert_eq!(
            seen,
            [
                ("a", true, false, false),
                ("a", true, true, false),
                ("a", false, false, true)
            ]
        );
        assert!(st.arrivals.iter().all(|a| a.at >= before));
        assert!(st.arrivals.windows(2).all(|w| w[0].at <= w[1].at));
        assert_eq!(st.arrivals[2].outcome, StatusOutcome::Deleted);
        assert_eq!(st.counters.malformed, 1);
    }

    #[test]
    fn spec_events_look_like_maestros() {
        let mut r = stored("4717d8e0", "cluster1", 3, 1);
        r.metadata = json!({"name": "4717d8e0", "labels": {"a": "b"}});
        let msg = mqtt::to_binary(&spec_event("maestro", EventType::SpecUpdate, &r));
        assert_eq!(msg.content_type.as_deref(), Some("application/json"));
        let props: BTreeMap<_, _> = msg.user_properties.iter().cloned().collect();
        for k in ["ce-specversion", "ce-id", "ce-source", "ce-type", "ce-time"] {
            assert!(props.contains_key(k), "{k} missing: {props:?}");
        }
        assert_eq!(props["ce-source"], "maestro");
        assert_eq!(props["ce-type"], EventType::SpecUpdate.as_type());
        assert_eq!(props["ce-resourceid"], "4717d8e0");
        assert_eq!(props["ce-resourceversion"], "3");
        assert_eq!(props["ce-clustername"], "cluster1");
        assert!(!props.contains_key("ce-deletiontimestamp"));
        let meta: Value = serde_json::from_str(&props["ce-metadata"]).expect("metadata json");
        assert_eq!(meta["name"], "4717d8e0");
        let data: Value = serde_json::from_slice(&msg.payload).expect("data json");
        assert_eq!(data, r.bundle);
        // The agent-side decoder takes it as a spec.
        let ev = mqtt::from_message(&msg).expect("event");
        assert!(
            cloudevents::codec::Decoder::new("cluster1")
                .decode(&ev)
                .is_ok()
        );
        r.deleted_at = Some(Utc::now());
        let msg = mqtt::to_binary(&spec_event("maestro", EventType::SpecDelete, &r));
        assert!(
            msg.user_properties
                .iter()
                .any(|(k, _)| k == "ce-deletiontimestamp")
        );
        assert_eq!(
            check_name("Cluster.1").err().map(|e| e.to_string()),
            Some(Error::BadName("Cluster.1".into()).to_string())
        );
    }
}
