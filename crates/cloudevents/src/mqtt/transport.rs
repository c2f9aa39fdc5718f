//! The MQTT 5 transport on `rumqttc`: connect (clean start, QoS from the config, TLS 1.3 with a
//! reloading client certificate), subscribe to the source's topics, hand over what arrives, and
//! publish an event as one PUBLISH whose PUBACK says what became of it. The client
//! ([`crate::client::Client`]) does the rest.
//!
//! Every PUBLISH stays within the broker's Maximum Packet Size, which rumqttc would otherwise
//! answer by failing the connection (`OutgoingPacketTooLarge`) and the client by sending the
//! event again on the next one, forever: the transport's [`Ceiling`] takes the broker's figure
//! from each CONNACK (else `maxPacketSize` of the config, else MQTT's largest packet) and
//! measures an event as the whole packet rumqttc writes for it.
//!
//! With a clean start the broker and rumqttc both forget unacknowledged publishes when the
//! connection ends, so a send that has no PUBACK by then counts as lost (the client queues it
//! again). A PUBACK with reason 0x10 (no matching subscribers) means the source was away.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{
    Packet, PubAckReason, Publish, PublishProperties, SubscribeReasonCode,
};
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};
use tokio::sync::oneshot;

use crate::Error;
use crate::ceiling::{Ceiling, CeilingOrigin, ReducedMetadataLog, fit_attribute_values};
use crate::client::ClientOptions;
use crate::config::{MQTT_MAX_PACKET, MqttConfig, mqtt_client_id};
use crate::error::one_line;
use crate::event::CloudEvent;
use crate::mqtt::binding::{self, Message};
use crate::mqtt::topics::Topics;
use crate::tls::ReloadingClientCert;
use crate::transport::{EventSender, Received, Sent, Transport};
use crate::types::{self, EventType};

/// Room for a ~1 MiB bundle plus attributes (rumqttc's default is 10 KiB).
pub const MAX_PACKET: u32 = 2 * 1024 * 1024;

/// Publishes awaiting their PUBACK at most (fewer when the broker's Receive Maximum is lower:
/// mosquitto's default is 20). rumqttc keeps a slot per possible packet in flight from the
/// start, and its default (65,535 slots) held 14 MiB before the first publish.
pub const MAX_INFLIGHT: u16 = 256;

/// Room in rumqttc's request channel: every send the client may have on its way, the
/// subscriptions and a DISCONNECT, so that queuing a request never has to wait.
const REQUESTS: usize = MAX_INFLIGHT as usize + 64;

/// The longest string MQTT carries (a two-byte length): the longest attribute value. rumqttc
/// would write a longer one with a wrong length, which the broker calls malformed.
const MAX_STRING: usize = u16::MAX as usize;

/// How long a DISCONNECT for a rotation may take before the socket is dropped anyway.
const DISCONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The senders waiting for their PUBACK, in the order rumqttc numbers their packets.
#[derive(Default)]
struct Acks {
    /// Requested, waiting for their packet id (rumqttc sends in request order).
    awaiting_pkid: VecDeque<oneshot::Sender<Sent>>,
    /// Sent, waiting for their PUBACK.
    inflight: HashMap<u16, oneshot::Sender<Sent>>,
    /// Counts the connections that ended: a sender of an earlier one publishes nothing.
    connection: u64,
}

/// Shared by the transport and its senders.
#[derive(Default)]
struct Pending {
    /// Held while a publish is requested, and while a lost connection's requests are dropped:
    /// a sender's place in `awaiting_pkid` is always its request's place in rumqttc's channel.
    acks: Mutex<Acks>,
}

impl Pending {
    fn lock(&self) -> MutexGuard<'_, Acks> {
        self.acks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Options of the MQTT client.
pub type MqttClientOptions = ClientOptions<MqttConfig>;

/// The MQTT wire to a source.
pub struct MqttTransport {
    eventloop: EventLoop,
    client: AsyncClient,
    pending: Arc<Pending>,
    subscriptions: Vec<String>,
    sub_qos: QoS,
    sender: MqttSender,
    client_cert: Option<Arc<ReloadingClientCert>>,
    /// Messages that arrived while the subscriptions were made, handed over first.
    early: VecDeque<Received>,
    /// The subscriptions are in place and the client has not been told yet.
    announce: bool,
    /// A connection is up (a DISCONNECT can be sent on it).
    up: bool,
    /// The largest PUBLISH, set from each CONNACK.
    ceiling: Arc<Ceiling>,
    /// `maxPacketSize` of the config.
    configured_max: Option<usize>,
}

/// Publishes on the current MQTT connection.
#[derive(Clone)]
pub struct MqttSender {
    client: AsyncClient,
    pending: Arc<Pending>,
    shape: Arc<PublishShape>,
    ceiling: Arc<Ceiling>,
    reduced: Arc<ReducedMetadataLog>,
    /// The connection it was made for ([`Acks::connection`]).
    connection: u64,
}

/// What besides the event decides its PUBLISH packet: the topic and the QoS.
struct PublishShape {
    /// `agentEvents` for the cluster: statuses, and resync requests to one source.
    events_topic: String,
    /// Where a spec resync request to all sources goes.
    resync_all_topic: String,
    qos: QoS,
}

impl PublishShape {
    /// The topic `event` goes to (upstream's `AgentPubTopic`).
    fn topic(&self, event: &CloudEvent) -> &str {
        match (
            event.event_type(),
            event.ext_string(types::EXT_ORIGINAL_SOURCE).as_deref(),
        ) {
            (Ok(EventType::SpecResyncRequest), Some("") | None) => &self.resync_all_topic,
            _ => &self.events_topic,
        }
    }

    /// The size of `event`'s PUBLISH packet, once fitted to MQTT ([`wire_event`]).
    fn packet_size(&self, event: &CloudEvent) -> usize {
        let event = wire_event(event).unwrap_or(Cow::Borrowed(event));
        packet_size(&event, self.topic(&event), self.qos)
    }
}

/// `event` as it goes in a PUBLISH: a `metadata` extension longer than an MQTT string reduced;
/// any other attribute that long refuses it.
fn wire_event(event: &CloudEvent) -> Result<Cow<'_, CloudEvent>, Error> {
    fit_attribute_values(event, MAX_STRING, "MQTT")
}

/// The bytes of MQTT's Variable Byte Integer of `n` (rumqttc's `len_len`).
fn variable_int_len(n: usize) -> usize {
    match n {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// The size of the PUBLISH packet rumqttc writes for `event` in binary mode on `topic` at `qos`
/// (`Publish::size` once the packet has its id), computed without copying the data: the fixed
/// header, the topic, the packet id, the properties (Content Type and one user property per
/// attribute) and the payload.
fn packet_size(event: &CloudEvent, topic: &str, qos: QoS) -> usize {
    // A string: its two-byte length and its bytes; a property: an identifier byte too.
    let string = |s: usize| 2 + s;
    let content_type = event
        .datacontenttype
        .as_ref()
        .map_or(0, |ct| 1 + string(ct.len()));
    let user_properties: usize = binding::binary_attributes(event)
        .iter()
        .map(|(name, value)| 1 + string(binding::PREFIX.len() + name.len()) + string(value.len()))
        .sum();
    let properties = content_type + user_properties;
    let packet_id = if qos == QoS::AtMostOnce { 0 } else { 2 };
    let remaining = string(topic.len())
        + packet_id
        + variable_int_len(properties)
        + properties
        + event.data.as_ref().map_or(0, Vec::len);
    1 + variable_int_len(remaining) + remaining
}

/// The ceiling a connection has: the lower of the broker's Maximum Packet Size (`broker`) and
/// the config's `maxPacketSize` (`configured`), either when the other is absent, MQTT's largest
/// packet when both are.
fn ceiling_of(broker: Option<u32>, configured: Option<usize>) -> (usize, CeilingOrigin) {
    let broker = broker.map(|b| usize::try_from(b).unwrap_or(usize::MAX));
    match (broker, configured) {
        (Some(b), Some(c)) if c < b => (c, CeilingOrigin::Config("maxPacketSize")),
        (Some(b), _) => (b, CeilingOrigin::Broker),
        (None, Some(c)) => (c, CeilingOrigin::Config("maxPacketSize")),
        (None, None) => (
            MQTT_MAX_PACKET,
            CeilingOrigin::Default("MQTT's largest packet"),
        ),
    }
}

fn qos(q: u8) -> QoS {
    match q {
        0 => QoS::AtMostOnce,
        2 => QoS::ExactlyOnce,
        _ => QoS::AtLeastOnce,
    }
}

impl MqttTransport {
    /// The transport for the MQTT config of `opts`; connects on the client's first attempt.
    pub fn new(opts: &MqttClientOptions) -> Result<Self, Error> {
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
        let (client, eventloop) = AsyncClient::new(mo, REQUESTS);
        let pending = Arc::new(Pending::default());
        let shape = Arc::new(PublishShape {
            events_topic: cfg.topics.agent_publish(&opts.cluster),
            resync_all_topic: cfg.topics.agent_resync_all(&opts.cluster),
            qos: qos(cfg.pub_qos),
        });
        let (limit, origin) = ceiling_of(None, cfg.max_packet_size);
        let measure = shape.clone();
        let ceiling = Arc::new(Ceiling::new(
            "MQTT",
            limit,
            origin,
            move |e: &CloudEvent| measure.packet_size(e),
        ));
        let sender = MqttSender {
            client: client.clone(),
            pending: pending.clone(),
            shape,
            ceiling: ceiling.clone(),
            reduced: Arc::default(),
            connection: 0,
        };
        Ok(Self {
            eventloop,
            client,
            pending,
            subscriptions: cfg.topics.agent_subscriptions(&opts.cluster),
            sub_qos: qos(cfg.sub_qos),
            sender,
            client_cert,
            early: VecDeque::new(),
            announce: false,
            up: false,
            ceiling,
            configured_max: cfg.max_packet_size,
        })
    }

    /// Books what rumqttc reports of the publishes; returns what the client should be told.
    fn handle(&mut self, event: Event) -> Option<Received> {
        match event {
            Event::Incoming(Packet::Publish(p)) => {
                Some(match binding::from_message(&to_message(&p)) {
                    Ok(ev) => Received::Event(ev),
                    Err(e) => Received::Malformed(e),
                })
            }
            Event::Outgoing(Outgoing::Publish(pkid)) => {
                let mut acks = self.pending.lock();
                if let Some(tx) = acks.awaiting_pkid.pop_front() {
                    if pkid == 0 {
                        // QoS 0: no PUBACK will come; written is as taken as it gets.
                        let _ = tx.send(Sent::Taken);
                    } else {
                        acks.inflight.insert(pkid, tx);
                    }
                }
                None
            }
            Event::Incoming(Packet::PubAck(ack)) => {
                if let Some(tx) = self.pending.lock().inflight.remove(&ack.pkid) {
                    let _ = tx.send(outcome(ack.reason));
                }
                None
            }
            _ => None,
        }
    }

    /// The connection is gone: rumqttc's queued requests and the senders waiting for them with
    /// it (the senders hear [`Sent::Lost`]; the client queues their events again).
    fn drop_connection(&mut self) {
        self.up = false;
        let mut acks = self.pending.lock();
        // Requests that entered the channel since rumqttc cleaned up: with the clean start they
        // would never be sent, or be sent under another sender's place.
        self.eventloop.clean();
        acks.awaiting_pkid.clear();
        acks.inflight.clear();
        acks.connection = acks.connection.wrapping_add(1);
    }
}

/// What a PUBACK's reason says became of the event.
fn outcome(reason: PubAckReason) -> Sent {
    match reason {
        PubAckReason::Success => Sent::Taken,
        PubAckReason::NoMatchingSubscribers => Sent::NobodyListens,
        other => Sent::Malformed(format!("the MQTT broker refused it: {other:?}")),
    }
}

fn to_message(p: &Publish) -> Message {
    let props = p.properties.clone().unwrap_or_default();
    Message {
        content_type: props.content_type,
        user_properties: props.user_properties,
        payload: p.payload.to_vec(),
    }
}

impl Transport for MqttTransport {
    type Sender = MqttSender;

    fn name(&self) -> &'static str {
        "MQTT"
    }

    fn max_inflight(&self) -> usize {
        usize::from(MAX_INFLIGHT)
    }

    /// An attribute longer than an MQTT string (the work's metadata aside, which is reduced).
    fn check(event: &CloudEvent) -> Result<(), Error> {
        wire_event(event).map(drop)
    }

    fn ceiling(&self) -> Arc<Ceiling> {
        self.ceiling.clone()
    }

    fn client_cert(&self) -> Option<Arc<ReloadingClientCert>> {
        self.client_cert.clone()
    }

    async fn connect(&mut self) -> Result<MqttSender, String> {
        self.early.clear();
        let mut subacks_due = None;
        loop {
            let event = match self.eventloop.poll().await {
                Ok(event) => event,
                Err(e) => {
                    self.drop_connection();
                    return Err(one_line(&e));
                }
            };
            match event {
                Event::Incoming(Packet::ConnAck(ack)) => {
                    // Before any publish goes out on this connection (rumqttc hands over the
                    // CONNACK before it takes a request): rumqttc holds every PUBLISH to the
                    // broker's figure from now on.
                    let broker = ack.properties.as_ref().and_then(|p| p.max_packet_size);
                    let (limit, origin) = ceiling_of(broker, self.configured_max);
                    self.ceiling.set(limit, origin);
                    self.up = true;
                    let refused = self.subscriptions.iter().find_map(|t| {
                        let e = self.client.try_subscribe(t.clone(), self.sub_qos).err()?;
                        Some(format!("subscribe to {t}: {e}"))
                    });
                    if let Some(why) = refused {
                        self.drop_connection();
                        return Err(why);
                    }
                    subacks_due = Some(self.subscriptions.len());
                }
                Event::Incoming(Packet::SubAck(ack)) => {
                    let refused = ack
                        .return_codes
                        .iter()
                        .any(|c| !matches!(c, SubscribeReasonCode::Success(_)));
                    if refused {
                        self.drop_connection();
                        return Err(format!(
                            "the broker refused a subscription: {:?}",
                            ack.return_codes
                        ));
                    }
                    let due = subacks_due.get_or_insert(0);
                    *due = due.saturating_sub(1);
                    if *due == 0 {
                        self.announce = true;
                        return Ok(MqttSender {
                            connection: self.pending.lock().connection,
                            ..self.sender.clone()
                        });
                    }
                }
                other => {
                    if let Some(received) = self.handle(other) {
                        self.early.push_back(received);
                    }
                }
            }
        }
    }

    async fn next(&mut self) -> Result<Received, String> {
        if std::mem::take(&mut self.announce) {
            return Ok(Received::Subscribed);
        }
        if let Some(received) = self.early.pop_front() {
            return Ok(received);
        }
        loop {
            match self.eventloop.poll().await {
                Ok(Event::Outgoing(Outgoing::Disconnect)) => {
                    self.drop_connection();
                    return Err("the connection was closed".into());
                }
                Ok(event) => {
                    if let Some(received) = self.handle(event) {
                        return Ok(received);
                    }
                }
                Err(e) => {
                    self.drop_connection();
                    return Err(one_line(&e));
                }
            }
        }
    }

    async fn close(&mut self) {
        if self.up && self.client.try_disconnect().is_ok() {
            // A DISCONNECT first, so that the broker sees a clean end; rumqttc keeps the socket
            // after sending it, which `drop_connection` drops.
            let _ = tokio::time::timeout(DISCONNECT_TIMEOUT, async {
                loop {
                    match self.eventloop.poll().await {
                        Ok(Event::Outgoing(Outgoing::Disconnect)) | Err(_) => return,
                        Ok(event) => {
                            self.handle(event);
                        }
                    }
                }
            })
            .await;
        }
        self.drop_connection();
    }
}

impl EventSender for MqttSender {
    async fn send(&self, event: CloudEvent) -> Sent {
        let fitted = match wire_event(&event) {
            Ok(fitted) => fitted,
            Err(e) => return Sent::Malformed(e.to_string()),
        };
        if let Cow::Owned(sent) = &fitted {
            self.reduced.note(&event, sent, "MQTT");
        }
        // The client checked it before, against the ceiling then; this connection's broker may
        // take less.
        if let Err(e) = self.ceiling.fits(&fitted) {
            return Sent::TooLarge(e.to_string());
        }
        let topic = self.shape.topic(&fitted).to_string();
        let msg = binding::to_binary(&fitted);
        let props = PublishProperties {
            content_type: msg.content_type,
            user_properties: msg.user_properties,
            ..Default::default()
        };
        let (tx, rx) = oneshot::channel();
        {
            let mut acks = self.pending.lock();
            // A send that outlived its connection: rumqttc would write it on the next one,
            // past the ceiling checks (its broker may take less); the client queues it again.
            if acks.connection != self.connection {
                return Sent::Lost("the connection ended before the publish".into());
            }
            if let Err(e) = self.client.try_publish_with_properties(
                topic,
                self.shape.qos,
                false,
                msg.payload,
                props,
            ) {
                return Sent::Lost(format!("the publish could not be queued: {e}"));
            }
            acks.awaiting_pkid.push_back(tx);
        }
        rx.await
            .unwrap_or_else(|_| Sent::Lost("the connection ended before the PUBACK".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ExtValue;
    use crate::test_events::{self, resync_request};

    /// The shape of a transport with `topics` for `cluster1` at `qos`.
    fn shape(topics: &Topics, qos: QoS) -> PublishShape {
        PublishShape {
            events_topic: topics.agent_publish("cluster1"),
            resync_all_topic: topics.agent_resync_all("cluster1"),
            qos,
        }
    }

    /// The PUBLISH rumqttc makes of `event` (as [`MqttSender::send`] asks for it, with the packet
    /// id its state gives it): `Publish::size`, and the bytes it writes.
    fn rumqttc_sizes(event: &CloudEvent, topic: &str, qos: QoS) -> (usize, usize) {
        let msg = binding::to_binary(event);
        let props = PublishProperties {
            content_type: msg.content_type,
            user_properties: msg.user_properties,
            ..Default::default()
        };
        let mut publish = Publish::new(topic, qos, msg.payload, Some(props));
        if qos != QoS::AtMostOnce {
            publish.pkid = 1;
        }
        let mut written = bytes::BytesMut::new();
        publish.write(&mut written).expect("encodes");
        (publish.size(), written.len())
    }

    fn status(metadata: Option<serde_json::Value>, data_bytes: usize) -> CloudEvent {
        test_events::status(metadata, Some(data_bytes))
    }

    /// The topics of Maestro's agent chart for `cluster1`.
    fn maestro_topics() -> Topics {
        Topics {
            source_events: "sources/maestro/consumers/cluster1/sourceevents".into(),
            agent_events: "sources/maestro/consumers/cluster1/agentevents".into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_measure_is_the_packet_rumqttc_writes() {
        let maestro = maestro_topics();
        let broadcast = Topics {
            source_events: "sources/+/clusters/+/sourceevents".into(),
            agent_events: "sources/+/clusters/+/agentevents".into(),
            source_broadcast: Some("sources/+/sourcebroadcast".into()),
            agent_broadcast: Some("clusters/+/agentbroadcast".into()),
        };
        let metadata =
            serde_json::json!({"name": "w1", "namespace": "cluster1", "labels": {"a": "b"}});
        let mut events: Vec<CloudEvent> = [0, 1, 100, 20_000, 3_000_000]
            .into_iter()
            .flat_map(|n| [status(None, n), status(Some(metadata.clone()), n)])
            .collect();
        events.extend([resync_request(0), resync_request(3_000)]);
        let mut for_one_source = resync_request(2);
        for_one_source.extensions.insert(
            types::EXT_ORIGINAL_SOURCE.into(),
            ExtValue::String("maestro".into()),
        );
        events.push(for_one_source);
        for topics in [&maestro, &broadcast] {
            for qos in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce] {
                let shape = shape(topics, qos);
                for ev in &events {
                    let topic = shape.topic(ev);
                    let (size, written) = rumqttc_sizes(ev, topic, qos);
                    assert_eq!(size, written);
                    assert_eq!(
                        shape.packet_size(ev),
                        size,
                        "{} on {topic} at {qos:?}",
                        ev.type_
                    );
                }
            }
        }
        let shape = shape(&broadcast, QoS::AtLeastOnce);
        assert_eq!(shape.topic(&resync_request(1)), "clusters/+/agentbroadcast");
        assert_eq!(
            shape.topic(&status(None, 1)),
            "sources/+/clusters/cluster1/agentevents"
        );
        assert!(shape.packet_size(&resync_request(3_000)) > 131_072);
    }

    /// Where the Remaining Length, or the properties' length, grows a byte: every size around
    /// each of those steps, where an off-by-one would hide.
    #[test]
    fn the_measure_is_exact_where_the_length_prefixes_grow() {
        let topics = maestro_topics();
        let shape = shape(&topics, QoS::AtLeastOnce);
        let check = |ev: &CloudEvent| {
            let (size, _) = rumqttc_sizes(ev, shape.topic(ev), QoS::AtLeastOnce);
            assert_eq!(
                shape.packet_size(ev),
                size,
                "{:?} bytes of data",
                ev.data.as_ref().map(Vec::len)
            );
        };
        // Without data the Remaining Length is under 16,384, so it takes two bytes.
        let (empty, _) = rumqttc_sizes(&status(None, 0), &shape.events_topic, QoS::AtLeastOnce);
        let overhead = empty - 3;
        assert!((128..16_384).contains(&overhead), "{overhead}");
        for step in [16_384, 2_097_152] {
            for remaining in step - 3..step + 3 {
                check(&status(None, remaining - overhead));
            }
        }
        // A metadata value across the properties' step from two bytes of length to three: one
        // more byte of it makes the packet two bytes larger there.
        let sizes: Vec<usize> = (15_500..16_500)
            .map(|annotation| {
                let metadata =
                    serde_json::json!({"name": "w1", "annotations": {"a": "x".repeat(annotation)}});
                let ev = status(Some(metadata), 0);
                check(&ev);
                shape.packet_size(&ev)
            })
            .collect();
        assert!(
            sizes.windows(2).any(|w| w[1] - w[0] == 2),
            "the step is crossed"
        );
    }

    #[test]
    fn metadata_longer_than_an_mqtt_string_is_reduced_and_measured_so() {
        let long = serde_json::json!({
            "name": "w1",
            "namespace": "cluster1",
            "annotations": {"a": "x".repeat(70_000)},
        });
        let ev = status(Some(long), 10);
        let fitted = wire_event(&ev).expect("fits reduced");
        assert_eq!(
            fitted.ext_string(types::EXT_METADATA).as_deref(),
            Some(r#"{"name":"w1","namespace":"cluster1"}"#)
        );
        let topics = maestro_topics();
        let shape = shape(&topics, QoS::AtLeastOnce);
        let (size, _) = rumqttc_sizes(&fitted, shape.topic(&fitted), QoS::AtLeastOnce);
        assert_eq!(shape.packet_size(&ev), size);
        let refused = ev.with_ext(types::EXT_LOG_TRACING, ExtValue::String("t".repeat(70_000)));
        assert!(MqttTransport::check(&refused).is_err());
    }

    #[test]
    fn the_broker_the_config_or_the_protocol_sets_the_ceiling() {
        assert_eq!(
            ceiling_of(Some(131_072), None),
            (131_072, CeilingOrigin::Broker)
        );
        assert_eq!(
            ceiling_of(None, Some(65_536)),
            (65_536, CeilingOrigin::Config("maxPacketSize"))
        );
        assert_eq!(
            ceiling_of(Some(131_072), Some(65_536)),
            (65_536, CeilingOrigin::Config("maxPacketSize")),
            "the lower counts"
        );
        assert_eq!(
            ceiling_of(Some(131_072), Some(524_288)),
            (131_072, CeilingOrigin::Broker)
        );
        assert_eq!(ceiling_of(None, None).0, 268_435_455);
    }
}
