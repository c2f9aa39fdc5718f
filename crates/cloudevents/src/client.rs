//! The agent's MQTT client on `rumqttc` v5: connect (MQTT 5, clean start, QoS from the config),
//! subscribe, decode spec events into a stream, publish status events from a bounded queue that
//! keeps only the latest event per work while the broker is away, and call a hook after every
//! (re)subscribe. Reconnects with jittered exponential backoff (upstream: 5 s to 1 min).
//!
//! With TLS, a task reads the client certificate files again every refresh period (upstream's
//! `clientCertRotating`); when the certificate changed and the connection presented the old one,
//! it closes the connection (an MQTT DISCONNECT, then the socket) and the client reconnects at
//! once, without backoff, presenting the new certificate.
//!
//! Loss-free across broker restarts: with a clean start the broker and rumqttc both forget
//! unacknowledged publishes, so every event stays ours until its PUBACK; on a connection error the
//! unacknowledged ones go back into the queue (unless a newer event for the same work is there).
//! An event the broker acknowledges as heard by nobody (MQTT 5 reason 0x10: the source was away)
//! is held and sent again once the source is back ([`Unheard`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PubAckReason, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};
use tokio::sync::{Notify, mpsc};

use crate::Error;
use crate::codec::{Decoder, Incoming};
use crate::config::{MqttConfig, mqtt_client_id};
use crate::event::CloudEvent;
use crate::mqtt::{self, Message, Topics};
use crate::queue::{LatestQueue, Unheard, event_key, reconnect_backoff};
use crate::tls::ReloadingClientCert;
use crate::types::{self, EventType};

/// Room for a ~1 MiB bundle plus attributes (rumqttc's default is 10 KiB).
pub const MAX_PACKET: u32 = 2 * 1024 * 1024;

/// Publishes awaiting their PUBACK at most (fewer when the broker's Receive Maximum is lower:
/// mosquitto's default is 20). rumqttc keeps a slot per possible packet in flight from the
/// start, and its default (65,535 slots) held 14 MiB before the first publish.
pub const MAX_INFLIGHT: u16 = 256;

/// What a client needs besides the config file (`C`: [`MqttConfig`], or the gRPC config for
/// [`crate::grpc::GrpcClient`]).
#[derive(Clone, Debug)]
pub struct ClientOptions<C = MqttConfig> {
    /// The parsed config.
    pub config: C,
    /// This agent's cluster.
    pub cluster: String,
    /// `--cloudevents-client-id`: status events' source; the MQTT client id is `<id>-client`.
    pub cloudevents_client_id: String,
    /// Largest spec payload accepted.
    pub max_payload: usize,
    /// Works whose latest status may wait while the broker is away; beyond, publish fails.
    pub queue_capacity: usize,
    /// First reconnect delay (upstream 5 s).
    pub reconnect_min: Duration,
    /// Largest reconnect delay (upstream 1 min).
    pub reconnect_max: Duration,
    /// How often the TLS client certificate files are read again (upstream's
    /// `CertCallbackRefreshDuration`: 5 min, or `CERT_CALLBACK_REFRESH_DURATION`).
    pub cert_refresh: Duration,
}

impl<C> ClientOptions<C> {
    /// Upstream's defaults for `config`.
    pub fn new(
        config: C,
        cluster: impl Into<String>,
        cloudevents_client_id: impl Into<String>,
    ) -> Self {
        Self {
            config,
            cluster: cluster.into(),
            cloudevents_client_id: cloudevents_client_id.into(),
            max_payload: crate::codec::DEFAULT_MAX_PAYLOAD,
            queue_capacity: 100_000,
            reconnect_min: Duration::from_secs(5),
            reconnect_max: Duration::from_secs(60),
            cert_refresh: crate::tls::refresh_from_env(),
        }
    }
}

/// Counters and readiness as plain data, for metrics and probes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Subscribed to every topic now.
    pub ready: bool,
    /// Events received, by type (unknown types under their type string).
    pub received: BTreeMap<String, u64>,
    /// Events acknowledged by the broker, by type.
    pub sent: BTreeMap<String, u64>,
    /// Messages that could not be decoded (binding, codec or wrong cluster).
    pub rejected: u64,
    /// Connection losses followed by a new attempt.
    pub reconnects: u64,
    /// Events waiting to be published, including unacknowledged ones.
    pub queue_depth: usize,
    /// Events the source refused as malformed; dropped, as retrying cannot help.
    pub dropped: u64,
    /// Events the broker took while no source was subscribed (held and sent again).
    pub unheard: u64,
}

/// Called after every successful (re)subscribe with the client, e.g. to send the spec resync request.
pub type SubscribedHook = Arc<dyn Fn(&Publisher) + Send + Sync>;

/// First delay before an unheard event is sent again as a probe.
const UNHEARD_RETRY_MIN: Duration = Duration::from_secs(1);
/// Longest delay between two probes while no source listens: how late at most a returning
/// source hears what it missed (one held event is sent per period while it is away).
const UNHEARD_RETRY_MAX: Duration = Duration::from_secs(10);

struct State {
    ready: bool,
    /// What waits to be published, with its topic: the latest event per work.
    queue: LatestQueue<(String, CloudEvent)>,
    /// Handed to rumqttc, waiting for their packet id (rumqttc sends in request order).
    awaiting_pkid: VecDeque<(String, String, CloudEvent)>,
    /// Sent, waiting for PUBACK.
    inflight: HashMap<u16, (String, String, CloudEvent)>,
    /// Acknowledged, but no source was subscribed: sent again when one is.
    unheard: Unheard<(String, CloudEvent)>,
    /// The broker's last answer was "no matching subscribers" (logged once per outage).
    nobody_listens: bool,
    stats: Stats,
}

impl Default for State {
    fn default() -> Self {
        Self {
            ready: false,
            queue: LatestQueue::default(),
            awaiting_pkid: VecDeque::new(),
            inflight: HashMap::new(),
            unheard: Unheard::new(UNHEARD_RETRY_MIN, UNHEARD_RETRY_MAX),
            nobody_listens: false,
            stats: Stats::default(),
        }
    }
}

impl State {
    fn depth(&self) -> usize {
        self.queue.len() + self.awaiting_pkid.len() + self.inflight.len() + self.unheard.len()
    }

    /// Whether an event of `key` is still ours: queued, on its way, or held unheard.
    fn is_pending(&self, key: &str) -> bool {
        self.has_newer(key) || self.unheard.contains(key)
    }

    /// Whether an event of `key` newer than an acknowledged one is queued or on its way.
    fn has_newer(&self, key: &str) -> bool {
        self.queue.contains(key)
            || self.awaiting_pkid.iter().any(|(k, _, _)| k == key)
            || self.inflight.values().any(|(k, _, _)| k == key)
    }

    /// The broker's answer to the publish `entry`.
    fn acknowledged(&mut self, entry: (String, String, CloudEvent), reason: PubAckReason) {
        let (key, topic, ev) = entry;
        match reason {
            PubAckReason::Success => {
                *self.stats.sent.entry(ev.type_).or_default() += 1;
                // Someone listens again: what nobody heard goes out (behind anything newer).
                let again = self.unheard.heard();
                if std::mem::take(&mut self.nobody_listens) {
                    tracing::info!(
                        events = again.len(),
                        "a source listens again; sending the events nobody heard"
                    );
                }
                for (key, item) in again {
                    self.queue.retry_later(key, item);
                }
            }
            PubAckReason::NoMatchingSubscribers => {
                if !std::mem::replace(&mut self.nobody_listens, true) {
                    tracing::info!(
                        event_type = %ev.type_,
                        "the MQTT broker says no source is subscribed; holding events until one is"
                    );
                }
                self.stats.unheard += 1;
                if !self.has_newer(&key) {
                    self.unheard
                        .hold(key, (topic, ev), std::time::Instant::now());
                }
            }
            other => {
                self.stats.dropped += 1;
                tracing::warn!(reason = ?other, event_type = %ev.type_, "the MQTT broker refused an event; dropped");
            }
        }
    }

    /// Puts an event back after a connection loss unless a newer one for the key is queued.
    fn requeue(&mut self, key: String, topic: String, ev: CloudEvent) {
        self.queue.requeue(key, (topic, ev));
    }
}

/// The publishing half, cheap to clone.
#[derive(Clone)]
pub struct Publisher {
    shared: Arc<Shared>,
}

/// Between the connection loop and the certificate rotation task.
#[derive(Default)]
struct Rotation {
    /// CONNACK seen, no connection loss since.
    connected: AtomicBool,
    /// A DISCONNECT for a rotation is on its way; the loop clears it with the connection.
    disconnecting: AtomicBool,
    /// A rotation wants a new connection: the next one is made without backoff.
    requested: AtomicBool,
    /// Wakes the connection loop out of its backoff when the certificate changed.
    rotated: Notify,
    /// Asks the rotation task to check again (a CONNACK for a connection with an old certificate).
    check: Notify,
}

struct Shared {
    state: Mutex<State>,
    rotation: Rotation,
    wake: Notify,
    /// Told whenever a source took an event (see [`Publisher::taken`]).
    taken: Notify,
    topics: Topics,
    cluster: String,
    source: String,
    capacity: usize,
    qos: QoS,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves consistent-enough data to keep publishing.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn qos(q: u8) -> QoS {
    match q {
        0 => QoS::AtMostOnce,
        2 => QoS::ExactlyOnce,
        _ => QoS::AtLeastOnce,
    }
}

impl Publisher {
    /// Queues `event` for publishing. A status event replaces any queued, unsent status of the
    /// same work; events without `resourceid` (resync requests) queue on their own.
    pub fn publish(&self, event: CloudEvent) -> Result<(), Error> {
        let ty = event.event_type()?;
        let topic = match (ty, event.ext_string(types::EXT_ORIGINAL_SOURCE).as_deref()) {
            (EventType::SpecResyncRequest, Some("") | None) => {
                self.shared.topics.agent_resync_all(&self.shared.cluster)
            }
            _ => self.shared.topics.agent_publish(&self.shared.cluster),
        };
        let key = event_key(&event);
        let mut st = self.shared.lock();
        st.unheard.forget(&key);
        let held = st.awaiting_pkid.len() + st.inflight.len() + st.unheard.len();
        st.queue
            .push(key, (topic, event), self.shared.capacity, held)?;
        st.stats.queue_depth = st.depth();
        drop(st);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Readiness and counters now.
    pub fn stats(&self) -> Stats {
        self.shared.lock().stats.clone()
    }

    /// Whether the event of `key` ([`event_key`]) published last is not yet heard: queued, sent
    /// and unacknowledged, or acknowledged as heard by nobody. False once a source heard it (or
    /// the broker refused it for good: sending it again could not help).
    pub fn is_pending(&self, key: &str) -> bool {
        self.shared.lock().is_pending(key)
    }

    /// Resolves when a source next takes an event (then [`Publisher::is_pending`] may have
    /// changed). Made before looking, it misses no event taken after it was made.
    pub fn taken(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.taken.notified()
    }

    /// The source attribute of the agent's events (`--cloudevents-client-id`).
    pub fn source(&self) -> &str {
        &self.shared.source
    }
}

/// A running client: the incoming spec events, and the publisher.
pub struct MqttClient {
    /// Decoded events from the source, and decode errors (already counted) for logging.
    pub incoming: mpsc::Receiver<Result<Incoming, Error>>,
    /// Publishing and stats.
    pub publisher: Publisher,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for MqttClient {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl MqttClient {
    /// Starts the connection and publishing tasks on the current tokio runtime.
    pub fn start(opts: ClientOptions, on_subscribed: SubscribedHook) -> Result<Self, Error> {
        Topics::check_cluster(&opts.cluster)?;
        let cfg = &opts.config;
        let mut mo = MqttOptions::new(
            mqtt_client_id(&opts.cloudevents_client_id)?,
            cfg.host.clone(),
            cfg.port,
        );
        mo.set_clean_start(true)
            .set_keep_alive(cfg.keep_alive.max(Duration::from_secs(1)))
            .set_connection_timeout(cfg.dial_timeout.as_secs().max(1))
            .set_max_packet_size(Some(MAX_PACKET))
            .set_outgoing_inflight_upper_limit(MAX_INFLIGHT);
        // Each event is sent as soon as it is written, as Go's agent does (Go sockets have Nagle's
        // algorithm off): with it on, a status written while the previous packet waits for its
        // ACK waited for the broker's delayed ACK, about 40 ms on Linux, for every event.
        let mut network = rumqttc::NetworkOptions::new();
        network.set_tcp_nodelay(true);
        mo.set_network_options(network);
        if let (Some(u), p) = (&cfg.username, &cfg.password) {
            mo.set_credentials(u.clone(), p.clone().unwrap_or_default());
        }
        let mut client_cert = None;
        if cfg.uses_tls() {
            // TLS 1.3 only, system roots plus the CA, reloading client certificate (`crate::tls`);
            // rumqttc verifies the broker against `cfg.host`.
            let tls = crate::tls::client_tls(&cfg.certs, opts.cert_refresh)?;
            mo.set_transport(rumqttc::Transport::tls_with_config(
                rumqttc::TlsConfiguration::Rustls(tls.config),
            ));
            client_cert = Some(tls.cert);
        }
        let (client, eventloop) = AsyncClient::new(mo, 64);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            rotation: Rotation::default(),
            wake: Notify::new(),
            taken: Notify::new(),
            topics: cfg.topics.clone(),
            cluster: opts.cluster.clone(),
            source: opts.cloudevents_client_id.clone(),
            capacity: opts.queue_capacity,
            qos: qos(cfg.pub_qos),
        });
        let publisher = Publisher {
            shared: shared.clone(),
        };
        let (tx, rx) = mpsc::channel(100);
        let decoder = Decoder {
            cluster: opts.cluster.clone(),
            max_payload: opts.max_payload,
        };
        let conn = tokio::spawn(connection_loop(
            eventloop,
            client.clone(),
            publisher.clone(),
            decoder,
            tx,
            on_subscribed,
            opts.clone(),
            client_cert.clone(),
        ));
        let mut tasks = vec![conn];
        if let Some(cert) = client_cert {
            tasks.push(tokio::spawn(rotation_loop(
                cert,
                opts.cert_refresh,
                client.clone(),
                shared.clone(),
            )));
        }
        tasks.push(tokio::spawn(publish_loop(client, shared)));
        Ok(Self {
            incoming: rx,
            publisher,
            tasks,
        })
    }
}

fn backoff(opts: &ClientOptions) -> impl Iterator<Item = Duration> {
    reconnect_backoff(opts.reconnect_min, opts.reconnect_max)
}

fn to_message(p: &rumqttc::v5::mqttbytes::v5::Publish) -> Message {
    let props = p.properties.clone().unwrap_or_default();
    Message {
        content_type: props.content_type,
        user_properties: props.user_properties,
        payload: p.payload.to_vec(),
    }
}

/// The shortest period of the certificate polling, whatever the refresh period.
const MIN_CERT_POLL: Duration = Duration::from_millis(100);

/// Every `period` reads the client certificate again; when it changed and the connection presented
/// the old one, closes the connection (upstream's `loadClientCert`: the first load is no rotation).
async fn rotation_loop(
    cert: Arc<ReloadingClientCert>,
    period: Duration,
    client: AsyncClient,
    shared: Arc<Shared>,
) {
    let rotation = &shared.rotation;
    let period = period.max(MIN_CERT_POLL);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                // Small local files: read in place, as the handshake does.
                match cert.reload() {
                    Ok(true) => {
                        rotation.requested.store(true, Ordering::SeqCst);
                        // Out of a backoff sleep: the next attempt presents the new certificate.
                        rotation.rotated.notify_waiters();
                    }
                    Ok(false) => {}
                    Err(e) => tracing::warn!(
                        error = %e,
                        "reloading the MQTT client certificate failed; keeping the last good one"
                    ),
                }
            }
            _ = rotation.check.notified() => {}
        }
        if cert.outdated()
            && rotation.connected.load(Ordering::SeqCst)
            && !rotation.disconnecting.swap(true, Ordering::SeqCst)
        {
            tracing::info!(
                "MQTT client certificate rotated; closing the connection to reconnect with it"
            );
            rotation.requested.store(true, Ordering::SeqCst);
            if client.disconnect().await.is_err() {
                return; // the event loop is gone
            }
        }
    }
}

/// After a connection loss: not ready, unacknowledged events back in the queue.
fn connection_lost(shared: &Shared) {
    shared.rotation.connected.store(false, Ordering::SeqCst);
    shared.rotation.disconnecting.store(false, Ordering::SeqCst);
    let mut st = shared.lock();
    st.ready = false;
    st.stats.ready = false;
    st.stats.reconnects += 1;
    let mut lost: Vec<_> = st.inflight.drain().collect();
    lost.sort_by_key(|(pkid, _)| std::cmp::Reverse(*pkid));
    let awaiting: Vec<_> = st.awaiting_pkid.drain(..).rev().collect();
    for (k, t, ev) in awaiting.into_iter().chain(lost.into_iter().map(|(_, x)| x)) {
        st.requeue(k, t, ev);
    }
    st.stats.queue_depth = st.depth();
}

#[allow(clippy::too_many_arguments)]
async fn connection_loop(
    mut eventloop: EventLoop,
    client: AsyncClient,
    publisher: Publisher,
    decoder: Decoder,
    tx: mpsc::Sender<Result<Incoming, Error>>,
    hook: SubscribedHook,
    opts: ClientOptions,
    client_cert: Option<Arc<ReloadingClientCert>>,
) {
    let shared = publisher.shared.clone();
    let rotation = &shared.rotation;
    let subs = opts.config.topics.agent_subscriptions(&opts.cluster);
    let sub_qos = qos(opts.config.sub_qos);
    let mut delays = backoff(&opts);
    let mut acks_pending = 0usize;
    loop {
        match eventloop.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                delays = backoff(&opts);
                rotation.connected.store(true, Ordering::SeqCst);
                if client_cert.as_ref().is_some_and(|c| c.outdated()) {
                    // Rotated during the handshake: the rotation task closes this connection.
                    rotation.check.notify_one();
                } else {
                    rotation.requested.store(false, Ordering::SeqCst);
                }
                acks_pending = subs.len();
                for t in &subs {
                    if let Err(e) = client.subscribe(t.clone(), sub_qos).await {
                        tracing::warn!(topic = %t, error = %e, "subscribe request failed");
                    }
                }
            }
            Ok(Event::Incoming(Packet::SubAck(ack))) => {
                let failed = ack.return_codes.iter().any(|c| {
                    !matches!(
                        c,
                        rumqttc::v5::mqttbytes::v5::SubscribeReasonCode::Success(_)
                    )
                });
                if failed {
                    tracing::warn!(codes = ?ack.return_codes, "broker refused a subscription");
                    continue;
                }
                acks_pending = acks_pending.saturating_sub(1);
                if acks_pending == 0 {
                    shared.lock().stats.ready = true;
                    hook(&publisher);
                    shared.wake.notify_one();
                }
            }
            Ok(Event::Incoming(Packet::Publish(p))) => {
                let result = mqtt::from_message(&to_message(&p)).and_then(|ev| {
                    let mut st = shared.lock();
                    *st.stats.received.entry(ev.type_.clone()).or_default() += 1;
                    drop(st);
                    decoder.decode(&ev)
                });
                if result.is_err() {
                    shared.lock().stats.rejected += 1;
                }
                if tx.send(result).await.is_err() {
                    return; // nobody listens any more
                }
            }
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) => {
                let mut st = shared.lock();
                if let Some(entry) = st.awaiting_pkid.pop_front() {
                    if pkid == 0 {
                        // QoS 0: no PUBACK will come; written is as sent as it gets.
                        *st.stats.sent.entry(entry.2.type_).or_default() += 1;
                    } else {
                        st.inflight.insert(pkid, entry);
                    }
                }
                st.stats.queue_depth = st.depth();
            }
            Ok(Event::Incoming(Packet::PubAck(ack))) => {
                let mut st = shared.lock();
                let heard = ack.reason == PubAckReason::Success;
                if let Some(entry) = st.inflight.remove(&ack.pkid) {
                    st.acknowledged(entry, ack.reason);
                }
                st.stats.queue_depth = st.depth();
                drop(st);
                if heard {
                    shared.taken.notify_waiters();
                }
            }
            Ok(Event::Outgoing(Outgoing::Disconnect)) => {
                // Only the rotation task disconnects. rumqttc keeps the socket after sending
                // DISCONNECT: drop it (unacknowledged publishes move to rumqttc's pending list,
                // which the clean start discards; ours go back into the queue) and reconnect now.
                eventloop.clean();
                connection_lost(&shared);
                rotation.requested.store(false, Ordering::SeqCst);
                tracing::info!(
                    "MQTT connection closed for the rotated client certificate; reconnecting"
                );
            }
            Ok(_) => {}
            Err(e) => {
                connection_lost(&shared);
                // A rotation (also one arriving during the sleep) skips the backoff once.
                let rotated = rotation.rotated.notified();
                tokio::pin!(rotated);
                rotated.as_mut().enable();
                if rotation.requested.swap(false, Ordering::SeqCst) {
                    tracing::warn!(error = %e, "MQTT connection lost after a certificate rotation; reconnecting now");
                } else {
                    let delay = delays.next().unwrap_or(opts.reconnect_max);
                    tracing::warn!(error = %e, ?delay, "MQTT connection lost; reconnecting");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = rotated => {
                            rotation.requested.store(false, Ordering::SeqCst);
                            tracing::info!("MQTT client certificate rotated; reconnecting now");
                        }
                    }
                }
            }
        }
        // `ready` for the publisher follows the stats flag set on the last SUBACK.
        let mut st = shared.lock();
        st.ready = st.stats.ready;
    }
}

async fn publish_loop(client: AsyncClient, shared: Arc<Shared>) {
    loop {
        let sent_one = {
            let mut st = shared.lock();
            if st.ready
                && st.queue.is_empty()
                && st.awaiting_pkid.is_empty()
                && st.inflight.is_empty()
                && let Some((key, item)) = st.unheard.probe(std::time::Instant::now())
            {
                // Nothing else is on its way that could tell whether a source listens again.
                st.queue.requeue(key, item);
            }
            if !st.ready {
                false
            } else if let Some((key, (topic, ev))) = st.queue.pop() {
                let msg = mqtt::to_binary(&ev);
                let props = PublishProperties {
                    content_type: msg.content_type,
                    user_properties: msg.user_properties,
                    ..Default::default()
                };
                match client.try_publish_with_properties(
                    topic.clone(),
                    shared.qos,
                    false,
                    msg.payload,
                    props,
                ) {
                    Ok(()) => {
                        st.awaiting_pkid.push_back((key, topic, ev));
                        true
                    }
                    Err(_) => {
                        // rumqttc's request channel is full: keep the event and retry shortly.
                        st.requeue(key, topic, ev);
                        false
                    }
                }
            } else {
                false
            }
        };
        if !sent_one {
            tokio::select! {
                _ = shared.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    }
}
