//! The Maestro-shaped test source against a real broker, with the agent played by hand on a raw
//! rumqttc client: a create arrives, a valid status is accepted, a stale one is disregarded, a
//! bad sequence id and a foreign source are refused, a spec resync listing an unknown id gets the
//! deletion answer, a status resync request goes out, a delete ends in a hard delete, and the
//! source reconnects and resubscribes after a broker restart.
//! Needs MQTT_BROKER=host:port: run with
//! `e2e/scripts/mosquitto.sh run cargo test -p test-support --test transports -- mqtt_source::`.

use std::time::Duration;

use cloudevents::codec::{self, ResourceVersion};
use cloudevents::mqtt::{self, Message};
use cloudevents::snowflake::Snowflake;
use cloudevents::types::{self, EventType};
use cloudevents::{CloudEvent, ExtValue};
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use serde_json::json;
use test_support::mqtt_source::{
    MqttSource, StatusOutcome, agent_events_topic, message_of, publish_message,
    source_events_topic, subscribe_from_task,
};
use tokio::sync::mpsc;
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(10);

fn broker() -> String {
    match std::env::var("MQTT_BROKER") {
        Ok(b) if !b.is_empty() => b,
        _ => panic!(
            "MQTT_BROKER=host:port is not set: this test needs a real broker; run it with \
             `e2e/scripts/mosquitto.sh run cargo test -p test-support --test transports -- mqtt_source::`"
        ),
    }
}

/// The agent, by hand: subscribed to the consumer's source events, publishing to its agent events.
struct HandAgent {
    client: AsyncClient,
    incoming: mpsc::UnboundedReceiver<(Message, CloudEvent)>,
    subscribed: mpsc::UnboundedReceiver<()>,
    topic: String,
}

async fn hand_agent(broker: &str, source: &str, consumer: &str) -> HandAgent {
    let (host, port) = broker.rsplit_once(':').expect("MQTT_BROKER is host:port");
    let mut mo = MqttOptions::new(
        format!("{consumer}-work-agent-client"),
        host,
        port.parse().expect("port"),
    );
    mo.set_clean_start(true)
        .set_max_packet_size(Some(4 * 1024 * 1024));
    let (client, mut el) = AsyncClient::new(mo, 16);
    let (tx, incoming) = mpsc::unbounded_channel();
    let (sub_tx, subscribed) = mpsc::unbounded_channel();
    let (c, sub) = (client.clone(), source_events_topic(source, consumer));
    tokio::spawn(async move {
        loop {
            match el.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(_))) => subscribe_from_task(&c, &sub),
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    let _ = sub_tx.send(());
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let msg = message_of(&p);
                    if let Ok(ev) = mqtt::from_message(&msg) {
                        let _ = tx.send((msg, ev));
                    }
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    let mut agent = HandAgent {
        client,
        incoming,
        subscribed,
        topic: agent_events_topic(source, consumer),
    };
    agent.wait_subscribed().await;
    agent
}

impl HandAgent {
    async fn wait_subscribed(&mut self) {
        timeout(WAIT, self.subscribed.recv())
            .await
            .expect("the hand agent subscribes in time")
            .expect("event loop alive");
    }

    async fn publish(&self, ev: &CloudEvent) {
        publish_message(&self.client, self.topic.clone(), mqtt::to_binary(ev))
            .await
            .expect("agent publishes");
    }

    async fn next(&mut self) -> (Message, CloudEvent) {
        timeout(WAIT, self.incoming.recv())
            .await
            .expect("an event from the source in time")
            .expect("event loop alive")
    }
}

fn status(conditions: serde_json::Value) -> work_api::ManifestWorkStatus {
    serde_json::from_value(json!({ "conditions": conditions })).expect("status")
}

fn condition(ty: &str) -> serde_json::Value {
    json!({"type": ty, "status": "True", "reason": "R", "message": "m",
           "lastTransitionTime": "2026-11-25T10:00:00Z", "observedGeneration": 1})
}

fn status_event(
    consumer: &str,
    id: &str,
    version: i64,
    seq: u64,
    st: &work_api::ManifestWorkStatus,
) -> CloudEvent {
    test_support::agent_events::status_update(consumer, id, version, seq, st).expect("encodes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maestro_source_speaks_the_source_side() {
    let broker = broker();
    // Unique in the process: other transport tests share this binary and the broker.
    let consumer = test_support::unique_name("source-side");
    let source = MqttSource::connect(&broker, "maestro")
        .await
        .expect("source connects and subscribes");
    let mut agent = hand_agent(&broker, "maestro", &consumer).await;

    // A create arrives, shaped like Maestro's.
    let bundle = json!({"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "default"}, "data": {"k": "v"}}]});
    let id = source.create(&consumer, bundle.clone()).expect("create");
    let (msg, ev) = agent.next().await;
    assert_eq!(ev.event_type().expect("type"), EventType::SpecCreate);
    assert_eq!(msg.content_type.as_deref(), Some("application/json"));
    for k in ["ce-specversion", "ce-id", "ce-source", "ce-type", "ce-time"] {
        assert!(
            msg.user_properties.iter().any(|(n, _)| n == k),
            "{k} missing"
        );
    }
    assert_eq!(ev.source, "maestro");
    assert_eq!(ev.ext_string(types::EXT_RESOURCE_ID), Some(id.clone()));
    assert_eq!(
        ev.ext_integer(types::EXT_RESOURCE_VERSION).expect("int"),
        Some(1)
    );
    assert_eq!(
        ev.ext_string(types::EXT_CLUSTER_NAME),
        Some(consumer.clone())
    );
    let meta: serde_json::Value =
        serde_json::from_str(&ev.ext_string(types::EXT_METADATA).expect("metadata"))
            .expect("metadata json");
    assert_eq!(meta["name"], json!(id));
    let data: serde_json::Value =
        serde_json::from_slice(ev.data.as_deref().expect("data")).expect("data json");
    assert_eq!(data, bundle);

    // A valid status is accepted.
    let seq = Snowflake::new();
    let applied = status(json!([condition("Applied")]));
    agent
        .publish(&status_event(&consumer, &id, 1, seq.next_id(), &applied))
        .await;
    source
        .wait_until(|s| s.counters().accepted == 1, WAIT)
        .await
        .expect("status accepted");
    assert_eq!(
        source.condition_status(&id, "Applied").as_deref(),
        Some("True")
    );
    assert_eq!(
        source.status_hash(&id),
        Some(codec::status_hash(&applied).expect("hash"))
    );

    // A stale resourceversion is disregarded.
    let available = status(json!([condition("Applied"), condition("Available")]));
    agent
        .publish(&status_event(&consumer, &id, 7, seq.next_id(), &available))
        .await;
    source
        .wait_until(|s| s.counters().stale == 1, WAIT)
        .await
        .expect("stale status counted");
    assert_eq!(source.condition_status(&id, "Available"), None);

    // An older sequence id and a foreign originalsource are refused.
    agent
        .publish(&status_event(
            &consumer,
            &id,
            1,
            (1 << 22) | (1 << 12),
            &available,
        ))
        .await;
    let foreign = status_event(&consumer, &id, 1, seq.next_id(), &available).with_ext(
        types::EXT_ORIGINAL_SOURCE,
        ExtValue::String("someone-else".into()),
    );
    agent.publish(&foreign).await;
    source
        .wait_until(
            |s| {
                let c = s.counters();
                c.rejected_sequence == 1 && c.rejected_source == 1
            },
            WAIT,
        )
        .await
        .expect("bad sequence id and foreign source refused");
    assert_eq!(source.counters().accepted, 1);
    assert_eq!(
        source.counters().status_events_by_type[&EventType::StatusUpdate],
        4
    );

    // A spec resync listing the current resource and an unknown id: only the deletion answer.
    let unknown = "00000000-0000-0000-0000-000000000001";
    let req = codec::encode_spec_resync_request(
        vec![
            ResourceVersion {
                resource_id: id.clone(),
                resource_version: 1,
            },
            ResourceVersion {
                resource_id: unknown.into(),
                resource_version: 3,
            },
        ],
        &consumer,
        &format!("{consumer}-work-agent"),
    )
    .expect("encodes");
    agent.publish(&req).await;
    let (msg, ev) = agent.next().await;
    assert_eq!(
        ev.event_type().expect("type"),
        EventType::SpecResyncResponse
    );
    assert_eq!(
        ev.ext_string(types::EXT_RESOURCE_ID).as_deref(),
        Some(unknown)
    );
    assert_eq!(
        ev.ext_integer(types::EXT_RESOURCE_VERSION).expect("int"),
        Some(3)
    );
    assert_eq!(
        ev.ext_string(types::EXT_CLUSTER_NAME),
        Some(consumer.clone())
    );
    assert!(
        ev.ext_time(types::EXT_DELETION_TIMESTAMP)
            .expect("time")
            .is_some()
    );
    assert!(msg.content_type.is_none() && msg.payload.is_empty());
    let c = source.counters();
    assert_eq!((c.spec_resync_requests, c.spec_resync_responses), (1, 1));

    // A status resync request goes out with the hashes given.
    source
        .request_status_resync(&consumer, source.status_hashes(&consumer))
        .expect("status resync request");
    let (_, ev) = agent.next().await;
    assert_eq!(
        ev.event_type().expect("type"),
        EventType::StatusResyncRequest
    );
    let hashes: codec::ResourceStatusHashList =
        serde_json::from_slice(ev.data.as_deref().expect("data")).expect("hash list");
    assert_eq!(hashes.status_hashes.len(), 1);
    assert_eq!(hashes.status_hashes[0].resource_id, id);

    // Delete: a delete request with deletiontimestamp and the bundle; Deleted=True hard-deletes.
    source.delete(&id).expect("delete");
    let (_, ev) = agent.next().await;
    assert_eq!(ev.event_type().expect("type"), EventType::SpecDelete);
    assert!(
        ev.ext_time(types::EXT_DELETION_TIMESTAMP)
            .expect("time")
            .is_some()
    );
    assert!(ev.data.is_some());
    assert!(source.is_deleting(&id));
    let deleted = status(json!([condition("Deleted")]));
    agent
        .publish(&status_event(&consumer, &id, 1, seq.next_id(), &deleted))
        .await;
    source
        .wait_until(|s| !s.exists(&id), WAIT)
        .await
        .expect("hard delete");
    assert!(source.hard_deleted(&id));
    assert_eq!(source.counters().deleted, 1);
    let verdicts = source.status_verdicts();
    assert_eq!(
        verdicts.last().map(|v| &v.outcome),
        Some(&StatusOutcome::Deleted)
    );
    assert_eq!(source.events().len(), 6, "every agent event is kept");
    assert_eq!(source.counters().malformed, 0);

    // Broker loss: the source reconnects and resubscribes on its own, then works as before.
    mosquitto("stop", None);
    source
        .wait_until(|s| !s.is_subscribed(), WAIT)
        .await
        .expect("the source notices the broker is gone");
    let port = broker.rsplit_once(':').map(|(_, p)| p.to_string());
    mosquitto("start", port.as_deref());
    source
        .wait_until(|s| s.counters().subscriptions >= 2, WAIT)
        .await
        .expect("the source resubscribes");
    agent.wait_subscribed().await;
    let id2 = source.create(&consumer, bundle).expect("create");
    let (_, ev) = agent.next().await;
    assert_eq!(ev.ext_string(types::EXT_RESOURCE_ID), Some(id2.clone()));
    agent
        .publish(&status_event(&consumer, &id2, 1, seq.next_id(), &applied))
        .await;
    source
        .wait_until(|s| s.status(&id2).is_some(), WAIT)
        .await
        .expect("status accepted after the restart");
}

/// Runs `mosquitto.sh stop` or `start PORT` through MOSQUITTO_SCRIPT (set by `mosquitto.sh run`).
fn mosquitto(cmd: &str, port: Option<&str>) {
    let script = std::env::var("MOSQUITTO_SCRIPT").unwrap_or_else(|_| {
        panic!(
            "MOSQUITTO_SCRIPT is not set: run this test with \
             `e2e/scripts/mosquitto.sh run cargo test -p test-support --test transports -- mqtt_source::`"
        )
    });
    let out = std::process::Command::new(&script)
        .arg(cmd)
        .args(port)
        .output()
        .expect("runs mosquitto.sh");
    assert!(
        out.status.success(),
        "mosquitto.sh {cmd} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
