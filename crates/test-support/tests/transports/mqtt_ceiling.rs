//! The MQTT client of `cloudevents` within the broker's Maximum Packet Size, on private
//! mosquittos with `max_packet_size` (AWS IoT Core's 128 KB): the ceiling read from the CONNACK,
//! an event over it refused while the connection stays up, one queued before a reconnect to a
//! broker that takes less dropped when it was to be sent, and the config's `maxPacketSize` for a
//! broker that names no limit. Needs mosquitto (`e2e/scripts/mosquitto.sh install`).

use std::sync::Arc;
use std::time::Duration;

use cloudevents::CloudEvent;
use cloudevents::ceiling::CeilingOrigin;
use cloudevents::client::{Client, ClientOptions};
use cloudevents::config::MqttConfig;
use cloudevents::types;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use test_support::agent_events::{client_id, status_update};
use test_support::mosquitto::{Broker, Limits, agent_config};
use test_support::mqtt_source::MqttSource;
use test_support::wait_for;

const WAIT: Duration = Duration::from_secs(20);
/// AWS IoT Core's packet limit.
const SMALL_BROKER: u32 = 131_072;

/// A status of `uid` whose one condition's message takes `bytes` bytes.
fn status(cluster: &str, uid: &str, bytes: usize) -> CloudEvent {
    let status = work_api::ManifestWorkStatus {
        conditions: vec![Condition {
            type_: "Applied".into(),
            status: "True".into(),
            reason: "AppliedManifestWorkComplete".into(),
            message: "x".repeat(bytes),
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            observed_generation: Some(1),
        }],
        ..Default::default()
    };
    status_update(cluster, uid, 1, 1, &status).expect("encodes")
}

/// The agent's client for `cluster` on `broker`, with `extra` config lines; reconnects quickly.
fn start_agent(broker: &Broker, cluster: &str, extra: &str) -> Client {
    let text = format!("{}{extra}", agent_config(&broker.address(), cluster));
    let config = MqttConfig::parse(&text).expect("config");
    let mut options = ClientOptions::new(config, cluster, client_id(cluster));
    options.reconnect_min = Duration::from_millis(200);
    options.reconnect_max = Duration::from_millis(500);
    cloudevents::mqtt::start(&options, Arc::new(|_| {})).expect("starts")
}

async fn wait_ready(agent: &Client) {
    wait_for("the agent to be subscribed", WAIT, || async {
        agent.publisher.stats().ready.then_some(())
    })
    .await;
}

/// Waits until the source got a status of `uid`.
async fn wait_status_of(source: &MqttSource, uid: &str) {
    wait_for(
        &format!("the source to get the status of {uid}"),
        WAIT,
        || async {
            source
                .events()
                .iter()
                .any(|e| e.ext_string(types::EXT_RESOURCE_ID).as_deref() == Some(uid))
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_brokers_packet_limit_is_the_ceiling() {
    let limits = Limits {
        max_packet_bytes: SMALL_BROKER,
        ..Limits::default()
    };
    let broker = Broker::start_with("ceiling", limits).expect("mosquitto");
    let cluster = "ceiling-c1";
    let source = MqttSource::connect(&broker.address(), "maestro")
        .await
        .expect("source");
    let agent = start_agent(&broker, cluster, "");
    wait_ready(&agent).await;
    let publisher = &agent.publisher;
    assert_eq!(publisher.ceiling(), 131_072);
    assert_eq!(publisher.ceiling_stats().origin, CeilingOrigin::Broker);

    let big = status(cluster, "big", 200 * 1024);
    assert!(publisher.wire_size(&big) > 200 * 1024);
    let refused = publisher.publish(big).expect_err("over the broker's limit");
    let text = refused.to_string();
    assert!(
        matches!(
            refused,
            cloudevents::Error::EventTooLarge { limit: 131_072, .. }
        ) && text.contains("resource big")
            && text.contains("the broker's Maximum Packet Size"),
        "{text}"
    );

    publisher
        .publish(status(cluster, "small", 100))
        .expect("within the limit");
    wait_status_of(&source, "small").await;
    let stats = publisher.stats();
    assert!(stats.ready && stats.reconnects == 0, "{stats:?}");
}

/// An event queued while the broker was away, within the ceiling of the last connection, is
/// over the one of the next: it is dropped when it is to be sent, and the connection stays up
/// (rumqttc would fail every connection on it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smaller_broker_after_a_reconnect_drops_what_it_cannot_take() {
    let mut broker = Broker::start("ceiling-restart").expect("mosquitto");
    let cluster = "ceiling-c2";
    let agent = start_agent(&broker, cluster, "");
    wait_ready(&agent).await;
    let publisher = &agent.publisher;
    assert_eq!(publisher.ceiling(), 4 * 1024 * 1024);

    broker.stop();
    wait_for("the agent to see the broker gone", WAIT, || async {
        (!publisher.stats().ready).then_some(())
    })
    .await;
    publisher
        .publish(status(cluster, "big", 200 * 1024))
        .expect("within the last broker's limit");
    broker
        .restart_with(Limits {
            max_packet_bytes: SMALL_BROKER,
            ..Limits::default()
        })
        .expect("mosquitto again");
    wait_for("the big status to be dropped", WAIT, || async {
        let stats = publisher.ceiling_stats();
        (stats.too_large == 1)
            .then_some(())
            .ok_or(format!("{stats:?}"))
    })
    .await;
    assert_eq!(publisher.ceiling(), 131_072);
    let reconnects = publisher.stats().reconnects;

    let source = MqttSource::connect(&broker.address(), "maestro")
        .await
        .expect("source");
    publisher
        .publish(status(cluster, "small", 100))
        .expect("within the limit");
    wait_status_of(&source, "small").await;
    let stats = publisher.stats();
    assert!(
        stats.ready && stats.reconnects == reconnects,
        "the connection stayed up: {stats:?}"
    );
    assert!(
        !source
            .events()
            .iter()
            .any(|e| e.ext_string(types::EXT_RESOURCE_ID).as_deref() == Some("big"))
    );
}

/// Whether `broker` says a Maximum Packet Size in its CONNACK.
async fn connack_max_packet_size(broker: &Broker) -> Option<u32> {
    let options = MqttOptions::new("ceiling-probe", "127.0.0.1", broker.port());
    let (_client, mut eventloop) = AsyncClient::new(options, 1);
    loop {
        match tokio::time::timeout(WAIT, eventloop.poll()).await {
            Ok(Ok(Event::Incoming(Packet::ConnAck(ack)))) => {
                return ack.properties.and_then(|p| p.max_packet_size);
            }
            Ok(Ok(_)) => {}
            other => panic!("no CONNACK from the broker: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configs_max_packet_size_when_the_broker_names_none() {
    let limits = Limits {
        max_packet_bytes: 0,
        ..Limits::default()
    };
    let broker = Broker::start_with("ceiling-config", limits).expect("mosquitto");
    assert_eq!(connack_max_packet_size(&broker).await, None);
    let cluster = "ceiling-c3";
    let agent = start_agent(&broker, cluster, "maxPacketSize: 65536\n");
    wait_ready(&agent).await;
    let publisher = &agent.publisher;
    assert_eq!(publisher.ceiling(), 65_536);
    assert_eq!(
        publisher.ceiling_stats().origin,
        CeilingOrigin::Config("maxPacketSize")
    );
    let refused = publisher
        .publish(status(cluster, "big", 100 * 1024))
        .expect_err("over the configured limit");
    assert!(
        refused
            .to_string()
            .contains("maxPacketSize in the config file"),
        "{refused}"
    );
}
