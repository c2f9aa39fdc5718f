//! The MQTT 5 transport on `rumqttc`: connect (clean start, QoS from the config, TLS 1.3 with a
//! reloading client certificate), subscribe to the source's topics, hand over what arrives, and
//! publish an event as one PUBLISH whose PUBACK says what became of it. The client
//! ([`crate::client::Client`]) does the rest.
//!
//! With a clean start the broker and rumqttc both forget unacknowledged publishes when the
//! connection ends, so a send that has no PUBACK by then counts as lost (the client queues it
//! again). A PUBACK with reason 0x10 (no matching subscribers) means the source was away.

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
use crate::client::ClientOptions;
use crate::config::{MqttConfig, mqtt_client_id};
use crate::error::one_line;
use crate::event::CloudEvent;
use crate::mqtt::{self, Message, Topics};
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

/// How long a DISCONNECT for a rotation may take before the socket is dropped anyway.
const DISCONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The senders waiting for their PUBACK, in the order rumqttc numbers their packets.
#[derive(Default)]
struct Acks {
    /// Requested, waiting for their packet id (rumqttc sends in request order).
    awaiting_pkid: VecDeque<oneshot::Sender<Sent>>,
    /// Sent, waiting for their PUBACK.
    inflight: HashMap<u16, oneshot::Sender<Sent>>,
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
}

/// Publishes on the current MQTT connection.
#[derive(Clone)]
pub struct MqttSender {
    client: AsyncClient,
    pending: Arc<Pending>,
    topics: Topics,
    cluster: String,
    qos: QoS,
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
    pub fn new(opts: &ClientOptions<MqttConfig>) -> Result<Self, Error> {
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
        let sender = MqttSender {
            client: client.clone(),
            pending: pending.clone(),
            topics: cfg.topics.clone(),
            cluster: opts.cluster.clone(),
            qos: qos(cfg.pub_qos),
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
        })
    }

    /// Books what rumqttc reports of the publishes; returns what the client should be told.
    fn handle(&mut self, event: Event) -> Option<Received> {
        match event {
            Event::Incoming(Packet::Publish(p)) => {
                Some(match mqtt::from_message(&to_message(&p)) {
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
                Event::Incoming(Packet::ConnAck(_)) => {
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
                        return Ok(self.sender.clone());
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
        let topic = match (
            event.event_type(),
            event.ext_string(types::EXT_ORIGINAL_SOURCE).as_deref(),
        ) {
            (Ok(EventType::SpecResyncRequest), Some("") | None) => {
                self.topics.agent_resync_all(&self.cluster)
            }
            _ => self.topics.agent_publish(&self.cluster),
        };
        let msg = mqtt::to_binary(&event);
        let props = PublishProperties {
            content_type: msg.content_type,
            user_properties: msg.user_properties,
            ..Default::default()
        };
        let (tx, rx) = oneshot::channel();
        {
            let mut acks = self.pending.lock();
            if let Err(e) =
                self.client
                    .try_publish_with_properties(topic, self.qos, false, msg.payload, props)
            {
                return Sent::Lost(format!("the publish could not be queued: {e}"));
            }
            acks.awaiting_pkid.push_back(tx);
        }
        rx.await
            .unwrap_or_else(|_| Sent::Lost("the connection ended before the PUBACK".into()))
    }
}
