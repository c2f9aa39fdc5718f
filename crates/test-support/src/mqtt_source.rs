//! The MQTT front end of the Maestro-shaped source ([`crate::maestro`]): Maestro over a real MQTT
//! 5 broker (`e2e/scripts/mosquitto.sh run ...` exports `MQTT_BROKER`). It publishes the source's
//! events to `sources/<source>/consumers/<consumer>/sourceevents` in binary mode and hands it
//! what agents publish to `sources/<source>/consumers/+/agentevents`; spec resync requests are
//! answered as sdk-go's source client does ([`ResyncAnswer::SourceClient`]).
//!
//! For chaos runs the source can go away and restart as a crashed Maestro server would
//! ([`MqttSource::go_away`], [`MqttSource::restart`]: a new connection, then Maestro's status
//! resync request).

use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use cloudevents::CloudEvent;
use cloudevents::mqtt::{self, Message};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, Publish, PublishProperties, SubscribeReasonCode};
use rumqttc::v5::{AsyncClient, ClientError, Event, EventLoop, MqttOptions};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use crate::maestro::Error;
// Where the gRPC client's tests (`tests/transports/grpc_client.rs`) import it from.
pub use crate::maestro::StatusOutcome;
use crate::maestro::{Maestro, ResyncAnswer, Wire};

/// Largest MQTT packet the source accepts (and asks the broker for): 8 MiB.
pub const MAX_PACKET: u32 = 8 * 1024 * 1024;
/// Pause before the event loop reconnects after losing the broker.
pub const RECONNECT_DELAY: Duration = Duration::from_millis(100);
/// How long [`MqttSource::connect`] waits for its first subscription.
pub const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The topic a source publishes a consumer's spec events (and status resync requests) to.
pub fn source_events_topic(source_id: &str, consumer: &str) -> String {
    format!("sources/{source_id}/consumers/{consumer}/sourceevents")
}

/// The topic an agent of `consumer` publishes its events to.
pub fn agent_events_topic(source_id: &str, consumer: &str) -> String {
    format!("sources/{source_id}/consumers/{consumer}/agentevents")
}

/// The CloudEvents binding's view of a received PUBLISH: content type, user properties, payload.
pub fn message_of(publish: &Publish) -> Message {
    let props = publish.properties.clone().unwrap_or_default();
    Message {
        content_type: props.content_type,
        user_properties: props.user_properties,
        payload: publish.payload.to_vec(),
    }
}

/// Publishes `message` to `topic` at QoS 1.
pub async fn publish_message(
    client: &AsyncClient,
    topic: String,
    message: Message,
) -> Result<(), ClientError> {
    let props = PublishProperties {
        content_type: message.content_type,
        user_properties: message.user_properties,
        ..Default::default()
    };
    client
        .publish_with_properties(topic, QoS::AtLeastOnce, false, message.payload, props)
        .await
}

/// Subscribes to `filter` at QoS 1 from another task: called on a CONNACK, the event loop that
/// reported it is the one that drains the client's requests.
pub fn subscribe_from_task(client: &AsyncClient, filter: &str) {
    let (client, filter) = (client.clone(), filter.to_string());
    tokio::spawn(async move { client.subscribe(filter, QoS::AtLeastOnce).await });
}

/// An MQTT topic id, also a Pub/Sub subscription suffix: `[a-z0-9-]+`.
pub(crate) fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(Error::BadName(name.to_string()));
    }
    Ok(())
}

fn host_port(broker: &str) -> Result<(String, u16), Error> {
    broker
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
        .filter(|(h, _)| !h.is_empty())
        .ok_or_else(|| Error::BadBroker(broker.to_string()))
}

struct Outgoing {
    topic: String,
    message: Message,
}

/// The publishing side: a queue to the current client's publishing task.
struct MqttWire {
    source_id: String,
    /// The publishing task's queue; replaced when the source restarts.
    tx: Mutex<mpsc::UnboundedSender<Outgoing>>,
}

impl MqttWire {
    fn queue(&self, consumer: &str, message: Message) -> Result<(), Error> {
        self.tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Outgoing {
                topic: source_events_topic(&self.source_id, consumer),
                message,
            })
            .map_err(|_| Error::Closed)
    }
}

impl Wire for MqttWire {
    fn send(&self, consumer: &str, ev: &CloudEvent) -> Result<(), Error> {
        self.queue(consumer, mqtt::to_binary(ev))
    }

    fn check_consumer(&self, consumer: &str) -> Result<(), Error> {
        check_name(consumer)
    }
}

/// The connection as the event loop last saw it.
#[derive(Default)]
struct Link {
    subscribed: bool,
    last_error: Option<String>,
}

/// The event loop's view of the link, shared with the source.
#[derive(Default)]
struct SharedLink(Mutex<Link>);

impl SharedLink {
    fn lock(&self) -> MutexGuard<'_, Link> {
        // A poisoned lock only means a test thread panicked mid-update; the data is still usable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lost(&self, why: String) {
        let mut link = self.lock();
        link.subscribed = false;
        link.last_error = Some(why);
    }
}

/// A Maestro-shaped source on an MQTT 5 broker; its tasks stop when it is dropped. It is the
/// source ([`Maestro`], through `Deref`) plus its connection.
pub struct MqttSource {
    maestro: Arc<Maestro>,
    wire: Arc<MqttWire>,
    link: Arc<SharedLink>,
    broker: String,
    tasks: Vec<JoinHandle<()>>,
}

impl Deref for MqttSource {
    type Target = Maestro;

    fn deref(&self) -> &Maestro {
        &self.maestro
    }
}

impl Drop for MqttSource {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl MqttSource {
    /// Connects to `broker` (`host:port`) as source `source_id` (Maestro's is `maestro`), spawns
    /// the event loop on the current tokio runtime and waits until it is subscribed to
    /// `sources/<source_id>/consumers/+/agentevents` (at most [`SUBSCRIBE_TIMEOUT`]).
    pub async fn connect(broker: &str, source_id: &str) -> Result<Self, Error> {
        host_port(broker)?;
        check_name(source_id)?;
        let wire = Arc::new(MqttWire {
            source_id: source_id.to_string(),
            tx: Mutex::new(mpsc::unbounded_channel().0),
        });
        let maestro = Arc::new(Maestro::new(
            source_id,
            ResyncAnswer::SourceClient,
            wire.clone(),
        ));
        let mut source = Self {
            maestro,
            wire,
            link: Arc::default(),
            broker: broker.to_string(),
            tasks: Vec::new(),
        };
        source.tasks = source.spawn_client()?;
        source.wait_subscribed().await?;
        Ok(source)
    }

    /// A new MQTT client (new client id, clean start) with its event loop and publishing task.
    fn spawn_client(&self) -> Result<Vec<JoinHandle<()>>, Error> {
        let (host, port) = host_port(&self.broker)?;
        let client_id = format!(
            "{}-source-{}",
            self.source_id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let mut mo = MqttOptions::new(client_id, host, port);
        mo.set_clean_start(true)
            .set_keep_alive(Duration::from_secs(5))
            .set_connection_timeout(5)
            .set_max_packet_size(Some(MAX_PACKET));
        let (client, eventloop) = AsyncClient::new(mo, 256);
        let (tx, rx) = mpsc::unbounded_channel();
        *self.wire.tx.lock().unwrap_or_else(|e| e.into_inner()) = tx;
        let filter = agent_events_topic(self.source_id(), "+");
        Ok(vec![
            tokio::spawn(event_loop(
                eventloop,
                client.clone(),
                filter,
                self.maestro.clone(),
                self.link.clone(),
            )),
            tokio::spawn(publish_loop(client, rx)),
        ])
    }

    /// Restarts the source as a crashed and restarted Maestro server would: the connection and
    /// everything queued on it are dropped (spec events not yet on the wire and status events
    /// the broker had not delivered are lost), the store stays (it is a database), a new client
    /// subscribes; then, as Maestro does when its subscription comes up, it asks every consumer
    /// it holds resources of for a status resync with the hashes it has, `batch` hashes per
    /// request (Maestro: 1,000).
    pub async fn restart(&mut self, batch: usize) -> Result<(), Error> {
        self.go_away();
        self.tasks = self.spawn_client()?;
        self.wait_subscribed().await?;
        self.maestro.request_status_resyncs(batch)
    }

    /// Disconnects, as a source that crashed and is not back yet: nothing is subscribed to the
    /// agents' events until [`MqttSource::restart`], so the broker acknowledges them as heard
    /// by nobody and keeps none. The store stays.
    pub fn go_away(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.link.lock().subscribed = false;
    }

    async fn wait_subscribed(&self) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + SUBSCRIBE_TIMEOUT;
        while !self.is_subscribed() {
            if tokio::time::Instant::now() >= deadline {
                let last_error = self
                    .link
                    .lock()
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "none".into());
                return Err(Error::NotSubscribed {
                    broker: self.broker.clone(),
                    timeout: SUBSCRIBE_TIMEOUT,
                    last_error,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// The broker address it was connected to.
    pub fn broker(&self) -> &str {
        &self.broker
    }

    /// Whether the source is currently subscribed to the agent events.
    pub fn is_subscribed(&self) -> bool {
        self.link.lock().subscribed
    }

    /// Publishes a raw MQTT message to `consumer`'s source-events topic (malformed or
    /// wrong-cluster tests); it is not recorded in [`Maestro::sent`].
    pub fn publish_raw(
        &self,
        consumer: &str,
        content_type: Option<String>,
        user_properties: Vec<(String, String)>,
        payload: Vec<u8>,
    ) -> Result<(), Error> {
        check_name(consumer)?;
        self.wire.queue(
            consumer,
            Message {
                content_type,
                user_properties,
                payload,
            },
        )
    }

    /// Polls `cond` until it holds; after `timeout` the error describes the connection, the
    /// counters and the last status decisions.
    pub async fn wait_until(
        &self,
        cond: impl Fn(&MqttSource) -> bool,
        timeout: Duration,
    ) -> Result<(), String> {
        let link = || {
            let link = self.link.lock();
            format!(
                "subscribed: {}, last broker error: {:?}",
                link.subscribed, link.last_error
            )
        };
        self.maestro.wait_for(|| cond(self), timeout, link).await
    }
}

async fn publish_loop(client: AsyncClient, mut rx: mpsc::UnboundedReceiver<Outgoing>) {
    while let Some(o) = rx.recv().await {
        if publish_message(&client, o.topic, o.message).await.is_err() {
            return; // the event loop is gone
        }
    }
}

async fn event_loop(
    mut eventloop: EventLoop,
    client: AsyncClient,
    filter: String,
    maestro: Arc<Maestro>,
    link: Arc<SharedLink>,
) {
    loop {
        match eventloop.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(_))) => subscribe_from_task(&client, &filter),
            Ok(Event::Incoming(Packet::SubAck(ack))) => {
                let ok = ack
                    .return_codes
                    .iter()
                    .all(|c| matches!(c, SubscribeReasonCode::Success(_)));
                if ok {
                    link.lock().subscribed = true;
                    maestro.count_subscription();
                } else {
                    link.lock().last_error =
                        Some(format!("subscription refused: {:?}", ack.return_codes));
                }
            }
            Ok(Event::Incoming(Packet::Publish(p))) => {
                // Nothing to answer on MQTT: what the source took shows in its records.
                let event = mqtt::from_message(&message_of(&p)).map_err(|e| e.to_string());
                let _ = maestro.receive(event, |_| false);
            }
            Ok(Event::Incoming(Packet::Disconnect(d))) => {
                link.lost(format!("broker disconnected: {:?}", d.reason_code));
            }
            Ok(_) => {}
            Err(e) => {
                link.lost(e.to_string());
                tokio::time::sleep(RECONNECT_DELAY).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chrono::Utc;
    use cloudevents::types::EventType;
    use serde_json::{Value, json};

    use super::*;
    use crate::maestro::{spec_event, stored};

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

    #[test]
    fn a_deletion_without_data_goes_out_without_payload_or_content_type() {
        let mut r = stored("x", "c1", 5, 1);
        r.deleted_at = Some(Utc::now());
        let mut ev = spec_event("maestro", EventType::SpecResyncResponse, &r);
        ev.datacontenttype = None;
        ev.data = None;
        let wire = mqtt::to_binary(&ev);
        assert!(wire.payload.is_empty() && wire.content_type.is_none());
    }
}
