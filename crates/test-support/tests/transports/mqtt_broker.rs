//! The MQTT client of `cloudevents` against a real broker (mosquitto): subscribe, spec in, status out, a broker
//! restart losing nothing (latest status per work), a 1 MiB bundle. Needs MQTT_BROKER=host:port
//! and MOSQUITTO_SCRIPT (to restart it); `e2e/scripts/mosquitto.sh run cargo test ...` sets both.

use std::collections::BTreeMap;
use std::time::Duration;

use cloudevents::client::ClientOptions;
use cloudevents::codec::Incoming;
use cloudevents::config::MqttConfig;
use cloudevents::mqtt;
use cloudevents::types::{self, EventType};
use cloudevents::{CloudEvent, ExtValue};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use test_support::agent_events::{self, client_id, resync_hook};
use test_support::mosquitto::agent_config;
use test_support::mqtt_source::{message_of, publish_message};
use tokio::sync::mpsc;
use tokio::time::timeout;

fn broker() -> (String, u16) {
    let addr = std::env::var("MQTT_BROKER").unwrap_or_default();
    let Some((h, p)) = addr
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_string(), p.parse().ok()?)))
    else {
        panic!(
            "MQTT_BROKER=host:port is not set (got {addr:?}): these tests need a real broker; run them with \
             `e2e/scripts/mosquitto.sh run cargo test -p test-support --test transports -- mqtt_broker::` (or `make test`)"
        );
    };
    (h, p)
}

fn stop_broker() {
    let script = std::env::var("MOSQUITTO_SCRIPT").expect("MOSQUITTO_SCRIPT");
    assert!(
        std::process::Command::new(&script)
            .arg("stop")
            .status()
            .expect("stop")
            .success()
    );
}

fn start_broker(port: u16) {
    let script = std::env::var("MOSQUITTO_SCRIPT").expect("MOSQUITTO_SCRIPT");
    let out = std::process::Command::new(&script)
        .args(["start", &port.to_string()])
        .output()
        .expect("start");
    assert!(
        out.status.success(),
        "mosquitto.sh start failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test source: publishes spec events, collects the agent's events; reconnects quickly.
struct Source {
    client: AsyncClient,
    events: mpsc::UnboundedReceiver<CloudEvent>,
    spec_topic: String,
}

fn source(host: &str, port: u16, cluster: &str) -> Source {
    let mut mo = MqttOptions::new(format!("source-{cluster}"), host, port);
    mo.set_max_packet_size(Some(4 * 1024 * 1024));
    let (client, mut el) = AsyncClient::new(mo, 16);
    let (tx, rx) = mpsc::unbounded_channel();
    let sub = format!("sources/maestro/consumers/{cluster}/agentevents");
    let c = client.clone();
    tokio::spawn(async move {
        loop {
            match el.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    let _ = c.subscribe(sub.clone(), QoS::AtLeastOnce).await;
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    if let Ok(ev) = mqtt::from_message(&message_of(&p)) {
                        let _ = tx.send(ev);
                    }
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    Source {
        client,
        events: rx,
        spec_topic: format!("sources/maestro/consumers/{cluster}/sourceevents"),
    }
}

impl Source {
    async fn send_spec(&self, ev: &CloudEvent) {
        publish_message(&self.client, self.spec_topic.clone(), mqtt::to_binary(ev))
            .await
            .expect("source publishes");
    }

    async fn next_of(&mut self, ty: EventType) -> CloudEvent {
        loop {
            let ev = timeout(Duration::from_secs(20), self.events.recv())
                .await
                .unwrap_or_else(|_| panic!("no {ty:?} event from the agent within 20 s"))
                .expect("source channel open");
            if ev.event_type().ok() == Some(ty) {
                return ev;
            }
        }
    }

    /// The next status updates until `works` works were heard from, each work's version; a work
    /// heard from twice fails the test.
    async fn status_versions(&mut self, works: usize) -> BTreeMap<String, i64> {
        let mut seen = BTreeMap::new();
        while seen.len() < works {
            let ev = self.next_of(EventType::StatusUpdate).await;
            let uid = ev.ext_string(types::EXT_RESOURCE_ID).expect("resourceid");
            let version = ev
                .ext_integer(types::EXT_RESOURCE_VERSION)
                .expect("int")
                .expect("version");
            assert!(seen.insert(uid.clone(), version).is_none(), "{uid} twice");
        }
        seen
    }
}

fn spec_event(cluster: &str, uid: &str, version: i64, data: Vec<u8>) -> CloudEvent {
    let mut ev = CloudEvent::new(EventType::SpecCreate, "maestro")
        .with_ext(types::EXT_RESOURCE_ID, ExtValue::String(uid.into()))
        .with_ext(types::EXT_RESOURCE_VERSION, ExtValue::Integer(version))
        .with_ext(types::EXT_CLUSTER_NAME, ExtValue::String(cluster.into()));
    ev.data = Some(data);
    ev
}

fn status_event(cluster: &str, uid: &str, generation: i64, seq: u64) -> CloudEvent {
    agent_events::status_update(cluster, uid, generation, seq, &Default::default())
        .expect("encodes")
}

/// The agent's client options for `cluster` on the broker, with Maestro's topics.
fn agent_options(host: &str, port: u16, cluster: &str) -> ClientOptions<MqttConfig> {
    let cfg = MqttConfig::parse(&agent_config(&format!("{host}:{port}"), cluster)).expect("config");
    ClientOptions::new(cfg, cluster.to_string(), client_id(cluster))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_in_status_out_broker_restart_and_a_large_bundle() {
    let (host, port) = broker();
    // Unique in the process: other transport tests share this binary and the broker.
    let cluster = test_support::unique_name("broker-restart");
    let mut src = source(&host, port, &cluster);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut opts = agent_options(&host, port, &cluster);
    // Slower than the source's 100 ms so the source is subscribed again first after a restart.
    opts.reconnect_min = Duration::from_secs(2);
    opts.reconnect_max = Duration::from_secs(3);
    let mut agent = cloudevents::mqtt::start(&opts, resync_hook(&cluster)).expect("starts");

    // Subscribed: the hook's resync request arrives.
    let resync = src.next_of(EventType::SpecResyncRequest).await;
    assert_eq!(
        resync.data.as_deref(),
        Some(&br#"{"resourceVersions":[]}"#[..])
    );
    assert!(agent.publisher.stats().ready);

    // Spec in.
    src.send_spec(&spec_event(
        &cluster,
        "u1",
        1,
        br#"{"manifests":[{"apiVersion":"v1","kind":"ConfigMap"}]}"#.to_vec(),
    ))
    .await;
    let got = timeout(Duration::from_secs(10), agent.incoming.recv())
        .await
        .expect("spec in time")
        .expect("open");
    let Ok(Incoming::Spec(s)) = got else {
        panic!("expected a spec event, got {got:?}")
    };
    assert_eq!((s.uid.as_str(), s.generation), ("u1", 1));

    // Status out.
    agent
        .publisher
        .publish(status_event(&cluster, "u1", 1, 1))
        .expect("queues");
    let st = src.next_of(EventType::StatusUpdate).await;
    assert_eq!(st.ext_string(types::EXT_RESOURCE_ID).as_deref(), Some("u1"));

    // Broker away: three statuses of u1 and one of u2; only the latest of each goes out afterwards.
    stop_broker();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (g, seq) in [(2, 2), (3, 3), (4, 4)] {
        agent
            .publisher
            .publish(status_event(&cluster, "u1", g, seq))
            .expect("queues");
    }
    agent
        .publisher
        .publish(status_event(&cluster, "u2", 1, 5))
        .expect("queues");
    let stats = agent.publisher.stats();
    assert!(!stats.ready, "not ready while the broker is down");
    assert_eq!(stats.queue_depth, 2, "latest per work only: {stats:?}");
    start_broker(port);

    let seen = src.status_versions(2).await;
    assert_eq!(seen.get("u1"), Some(&4));
    assert_eq!(seen.get("u2"), Some(&1));
    let stats = agent.publisher.stats();
    assert!(stats.reconnects >= 1, "{stats:?}");
    assert!(stats.ready);

    // Another cluster's event and a message that is no CloudEvent: typed errors, counted.
    src.send_spec(&spec_event(
        "other",
        "u9",
        1,
        br#"{"manifests":[]}"#.to_vec(),
    ))
    .await;
    src.client
        .publish(
            src.spec_topic.clone(),
            QoS::AtLeastOnce,
            false,
            b"garbage".to_vec(),
        )
        .await
        .expect("source publishes");
    for _ in 0..2 {
        let got = timeout(Duration::from_secs(10), agent.incoming.recv())
            .await
            .expect("in time")
            .expect("open");
        assert!(
            matches!(
                got,
                Err(cloudevents::Error::WrongCluster { .. } | cloudevents::Error::Binding(_))
            ),
            "{got:?}"
        );
    }
    assert_eq!(agent.publisher.stats().rejected, 2);

    // A status resync request from the source reaches the agent decoded.
    let mut req = CloudEvent::new(EventType::StatusResyncRequest, "maestro");
    req.data = Some(br#"{"statusHashes":[]}"#.to_vec());
    src.send_spec(&req).await;
    let got = timeout(Duration::from_secs(10), agent.incoming.recv())
        .await
        .expect("in time")
        .expect("open");
    assert!(
        matches!(got, Ok(Incoming::StatusResync(ref l)) if l.status_hashes.is_empty()),
        "{got:?}"
    );

    // A 1 MiB bundle.
    let big = "x".repeat(1024 * 1024);
    let data = serde_json::to_vec(&serde_json::json!({"manifests":[{"apiVersion":"v1","kind":"ConfigMap","data":{"big":big}}]}))
        .expect("json");
    assert!(data.len() > 1024 * 1024);
    src.send_spec(&spec_event(&cluster, "u3", 1, data)).await;
    loop {
        let got = timeout(Duration::from_secs(20), agent.incoming.recv())
            .await
            .expect("bundle in time")
            .expect("open");
        if let Ok(Incoming::Spec(s)) = got
            && s.uid == "u3"
        {
            assert_eq!(s.spec.expect("spec").workload.manifests.len(), 1);
            break;
        }
    }
    let stats = agent.publisher.stats();
    assert!(stats.received.values().sum::<u64>() >= 2, "{stats:?}");
    assert!(
        stats
            .sent
            .get(&EventType::StatusUpdate.as_type())
            .copied()
            .unwrap_or(0)
            >= 3,
        "{stats:?}"
    );
}

/// A source that subscribes with a clean start (Maestro's server) hears nothing published while
/// it was away, and asks nobody for it: the broker acknowledges such a publish with "no matching
/// subscribers", and the agent sends the latest of each again once a source listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_nobody_heard_go_again_once_the_source_is_back() {
    let (host, port) = broker();
    let cluster = test_support::unique_name("unheard");
    // No source yet: the resync request and three statuses (two of u1) reach nobody.
    let agent =
        cloudevents::mqtt::start(&agent_options(&host, port, &cluster), resync_hook(&cluster))
            .expect("starts");
    for (uid, g, seq) in [("u1", 1, 1), ("u1", 2, 2), ("u2", 1, 3)] {
        agent
            .publisher
            .publish(status_event(&cluster, uid, g, seq))
            .expect("queues");
        // One at a time, so each is acknowledged (and held) before the next replaces it.
        for _ in 0..100 {
            if agent.publisher.stats().unheard > seq {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let stats = agent.publisher.stats();
    assert!(stats.ready, "{stats:?}");
    assert!(
        stats.unheard >= 4,
        "the broker said nobody heard the resync request and the statuses: {stats:?}"
    );
    assert_eq!(
        stats.queue_depth, 3,
        "held: the resync request and the latest status of each work: {stats:?}"
    );
    assert!(stats.sent.is_empty(), "{stats:?}");

    // The source comes (back): it hears the resync request and each work's latest status once.
    let mut src = source(&host, port, &cluster);
    let resync = src.next_of(EventType::SpecResyncRequest).await;
    assert_eq!(
        resync.ext_string(types::EXT_CLUSTER_NAME).as_deref(),
        Some(cluster.as_str())
    );
    let seen = src.status_versions(2).await;
    assert_eq!(
        seen.get("u1"),
        Some(&2),
        "the older status of u1 is not sent"
    );
    assert_eq!(seen.get("u2"), Some(&1));
    let more = timeout(Duration::from_secs(2), src.events.recv()).await;
    assert!(more.is_err(), "nothing else: {more:?}");
    let stats = agent.publisher.stats();
    assert_eq!(stats.queue_depth, 0, "{stats:?}");
}
