//! The Pub/Sub client against Google's fake server (pstest, `e2e/pubsub-fake`): the subscribe
//! hook's resync request on the broadcast topic, spec in through the cluster's filtered
//! subscription (another cluster's event filtered out, a malformed one refused), status out with
//! sdk-go's attributes, a missing subscription named in the error, and pull streams the server
//! ends (as Pub/Sub does every half hour) opened again without a reconnect. Needs
//! PUBSUB_FAKE=host:port and PUBSUB_FAKE_BIN; `e2e/scripts/pubsub-fake.sh run cargo test ...` sets
//! both (`make unit` runs under it).

use std::sync::Arc;
use std::time::Duration;

use cloudevents::client::ClientOptions;
use cloudevents::codec::{self, Incoming, StatusReport};
use cloudevents::config::PubSubConfig;
use cloudevents::pubsub::{from_message, to_message};
use cloudevents::types::{self, EventType};
use cloudevents::{CloudEvent, ExtValue};
use googleapis_tonic_google_pubsub_v1::google::pubsub::v1 as pb;
use pb::publisher_client::PublisherClient;
use pb::subscriber_client::SubscriberClient;
use tokio::time::timeout;
use tonic::transport::Channel;

const PROJECT: &str = "maestro-test";
const WAIT: Duration = Duration::from_secs(20);

fn fake() -> String {
    std::env::var("PUBSUB_FAKE").unwrap_or_else(|_| {
        panic!(
            "PUBSUB_FAKE=host:port is not set: these tests need Google's fake Pub/Sub server; run them \
             with `e2e/scripts/pubsub-fake.sh run cargo test -p cloudevents --test pubsub_fake` (or `make test`)"
        )
    })
}

fn name(kind: &str, n: &str) -> String {
    format!("projects/{PROJECT}/{kind}/{n}")
}

async fn channel(addr: &str) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("the fake listens")
}

/// The cluster's subscriptions, as Maestro's agent chart creates them.
async fn create_subscriptions(ch: &Channel, cluster: &str) {
    let mut sub = SubscriberClient::new(ch.clone());
    for (kind, filter) in [
        (
            "sourceevents",
            format!("attributes.ce-clustername=\"{cluster}\""),
        ),
        ("sourcebroadcast", String::new()),
    ] {
        sub.create_subscription(pb::Subscription {
            name: name("subscriptions", &format!("{kind}-{cluster}")),
            topic: name("topics", kind),
            filter,
            ack_deadline_seconds: 10,
            ..Default::default()
        })
        .await
        .expect("create subscription");
    }
}

/// The next event on the source's subscription `sub` that satisfies `pick` (others acked and
/// skipped: the fake is shared by every test of the run).
async fn next_event(ch: &Channel, sub: &str, pick: impl Fn(&CloudEvent) -> bool) -> CloudEvent {
    let mut client = SubscriberClient::new(ch.clone());
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        #[allow(deprecated)]
        let request = pb::PullRequest {
            subscription: name("subscriptions", sub),
            max_messages: 10,
            return_immediately: true,
        };
        let pulled = client.pull(request).await.expect("pull").into_inner();
        let ack_ids = pulled
            .received_messages
            .iter()
            .map(|m| m.ack_id.clone())
            .collect::<Vec<_>>();
        let mut found = None;
        for m in pulled.received_messages {
            let msg = m.message.expect("message");
            let ev = from_message(&msg.data, &msg.attributes).expect("a CloudEvent");
            if found.is_none() && pick(&ev) {
                found = Some(ev);
            }
        }
        if !ack_ids.is_empty() {
            client
                .acknowledge(pb::AcknowledgeRequest {
                    subscription: name("subscriptions", sub),
                    ack_ids,
                })
                .await
                .expect("ack");
        }
        if let Some(ev) = found {
            return ev;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no matching event on {sub} within {WAIT:?}");
}

async fn publish(ch: &Channel, topic: &str, message: pb::PubsubMessage) {
    PublisherClient::new(ch.clone())
        .publish(pb::PublishRequest {
            topic: name("topics", topic),
            messages: vec![message],
        })
        .await
        .expect("publish");
}

fn agent_options(addr: &str, cluster: &str) -> ClientOptions<PubSubConfig> {
    let cfg = PubSubConfig::parse(&format!(
        "projectID: {PROJECT}\nendpoint: {addr}\ndisableTLS: true\ntopics:\n  agentEvents: {}\n  agentBroadcast: {}\nsubscriptions:\n  sourceEvents: {}\n  sourceBroadcast: {}\n",
        name("topics", "agentevents"),
        name("topics", "agentbroadcast"),
        name("subscriptions", &format!("sourceevents-{cluster}")),
        name("subscriptions", &format!("sourcebroadcast-{cluster}")),
    ))
    .expect("config");
    let mut opts = ClientOptions::new(cfg, cluster.to_string(), format!("{cluster}-work-agent"));
    opts.reconnect_min = Duration::from_millis(200);
    opts.reconnect_max = Duration::from_secs(1);
    opts
}

fn spec_event(cluster: &str, uid: &str) -> CloudEvent {
    let mut ev = CloudEvent::new(EventType::SpecCreate, "maestro")
        .with_ext(types::EXT_RESOURCE_ID, ExtValue::String(uid.into()))
        .with_ext(types::EXT_RESOURCE_VERSION, ExtValue::Integer(1))
        .with_ext(types::EXT_CLUSTER_NAME, ExtValue::String(cluster.into()));
    ev.data = Some(br#"{"manifests":[{"apiVersion":"v1","kind":"ConfigMap"}]}"#.to_vec());
    ev
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_in_status_out_through_the_fake() {
    let addr = fake();
    let ch = channel(&addr).await;
    let cluster = format!("c{}", std::process::id());
    create_subscriptions(&ch, &cluster).await;
    let opts = agent_options(&addr, &cluster);
    let hook_cluster = cluster.clone();
    let hook: cloudevents::client::SubscribedHook = Arc::new(move |p| {
        let ev =
            codec::encode_spec_resync_request(vec![], &hook_cluster, p.source()).expect("encodes");
        p.publish(ev).expect("queues");
    });
    let mut agent = cloudevents::pubsub::start(&opts, hook).expect("starts");

    // Subscribed: the hook's spec resync request arrives on the broadcast topic.
    let source_id = format!("{cluster}-work-agent");
    let resync = next_event(&ch, "agentbroadcast-maestro", |ev| ev.source == source_id).await;
    assert_eq!(resync.event_type().ok(), Some(EventType::SpecResyncRequest));
    assert_eq!(
        resync.data.as_deref(),
        Some(&br#"{"resourceVersions":[]}"#[..])
    );

    // Another cluster's event is filtered out by the subscription; a malformed one is refused;
    // the cluster's own arrives.
    publish(
        &ch,
        "sourceevents",
        to_message(&spec_event("someone-else", "other")),
    )
    .await;
    let mut broken = to_message(&spec_event(&cluster, "broken"));
    broken.attributes.remove("ce-id");
    publish(&ch, "sourceevents", broken).await;
    publish(
        &ch,
        "sourceevents",
        to_message(&spec_event(&cluster, "mine")),
    )
    .await;
    // Pub/Sub keeps no order without ordering keys (sdk-go sets none; the fake hands out in any
    // order): both arrive, in either order.
    let mut refused = 0;
    let mut specs = Vec::new();
    for _ in 0..2 {
        match timeout(WAIT, agent.incoming.recv()).await.expect("in time") {
            Some(Ok(Incoming::Spec(spec))) => specs.push(spec.uid),
            Some(Err(_)) => refused += 1,
            other => panic!("expected the spec of mine or a refusal, got {other:?}"),
        }
    }
    assert_eq!((refused, specs), (1, vec!["mine".to_string()]));

    // A status goes to agentevents with sdk-go's attributes and passes Maestro's filter.
    let status = work_api::ManifestWorkStatus::default();
    let report = StatusReport {
        uid: "mine",
        generation: 1,
        cluster: &cluster,
        original_source: "maestro",
        metadata: None,
        status: &status,
    };
    let ev =
        codec::encode_status(&report, EventType::StatusUpdate, &source_id, 7).expect("encodes");
    agent.publisher.publish(ev).expect("queues");
    let got = next_event(&ch, "agentevents-maestro", |ev| ev.source == source_id).await;
    assert_eq!(got.event_type().ok(), Some(EventType::StatusUpdate));
    assert_eq!(
        got.extensions.get(types::EXT_RESOURCE_ID),
        Some(&ExtValue::String("mine".into()))
    );
    assert_eq!(got.datacontenttype.as_deref(), Some("application/json"));
    let stats = agent.publisher.stats();
    assert!(stats.ready);
    assert_eq!(stats.rejected, 1, "{stats:?}");
}

/// A status whose `metadata` is over Pub/Sub's 1,024 bytes an attribute value arrives with it
/// reduced to what a source reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_over_the_attribute_limit_arrives_reduced() {
    // A private fake: the shared one's `agentevents-maestro` is read by other tests too, and
    // `next_event` acknowledges what it skips.
    let cluster = "big-metadata";
    let (_fake, addr) = private_fake("1h", cluster);
    let ch = channel(&addr).await;
    let agent = cloudevents::pubsub::start(&agent_options(&addr, cluster), Arc::new(|_| {}))
        .expect("starts");
    let source_id = format!("{cluster}-work-agent");
    let metadata = serde_json::json!({
        "name": "big-meta",
        "namespace": cluster,
        "uid": "big-meta",
        "resourceVersion": "3",
        "generation": 2,
        "labels": {"cloudevents.open-cluster-management.io/originalsource": "maestro"},
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x".repeat(3000)},
    });
    let status = work_api::ManifestWorkStatus::default();
    let report = StatusReport {
        uid: "big-meta",
        generation: 2,
        cluster,
        original_source: "maestro",
        metadata: Some(metadata),
        status: &status,
    };
    let ev =
        codec::encode_status(&report, EventType::StatusUpdate, &source_id, 9).expect("encodes");
    agent.publisher.publish(ev).expect("queues");
    let got = next_event(&ch, "agentevents-maestro", |ev| {
        ev.ext_string(types::EXT_RESOURCE_ID).as_deref() == Some("big-meta")
    })
    .await;
    let sent = got.ext_string(types::EXT_METADATA).expect("metadata");
    assert!(sent.len() <= 1024, "{} bytes", sent.len());
    let sent: serde_json::Value = serde_json::from_str(&sent).expect("JSON");
    assert_eq!(
        sent,
        serde_json::json!({
            "name": "big-meta",
            "namespace": cluster,
            "uid": "big-meta",
            "resourceVersion": "3",
            "generation": 2,
        })
    );
    assert_eq!(agent.publisher.ceiling(), 10_000_000);
}

#[tokio::test]
async fn a_missing_subscription_is_named() {
    let addr = fake();
    let cluster = "nobody-made-mine";
    let opts = agent_options(&addr, cluster);
    let mut transport = cloudevents::pubsub::PubSubTransport::new(&opts).expect("transport");
    let err = cloudevents::transport::Transport::connect(&mut transport)
        .await
        .err()
        .expect("no subscriptions");
    assert!(
        err.contains(&format!("sourceevents-{cluster} does not exist")),
        "{err}"
    );
}

/// A private fake whose pull streams end after `timeout`; killed when dropped.
struct PrivateFake(std::process::Child);

impl Drop for PrivateFake {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn private_fake(stream_timeout: &str, consumer: &str) -> (PrivateFake, String) {
    use std::io::BufRead;
    let bin = std::env::var("PUBSUB_FAKE_BIN")
        .expect("PUBSUB_FAKE_BIN: run under e2e/scripts/pubsub-fake.sh run");
    let mut child = std::process::Command::new(bin)
        .args([
            "--address=127.0.0.1:0".to_string(),
            format!("--stream-timeout={stream_timeout}"),
            format!("--consumers={consumer}"),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the fake starts");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout");
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the fake prints its address");
    (PrivateFake(child), line.trim().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_the_server_ends_are_opened_again_without_a_reconnect() {
    let cluster = "short-streams";
    let (_fake, addr) = private_fake("3s", cluster);
    let ch = channel(&addr).await;
    let opts = agent_options(&addr, cluster);
    let mut agent = cloudevents::pubsub::start(&opts, Arc::new(|_| {})).expect("starts");
    // Past the first stream's end: the event published then arrives on the next stream.
    let waited = tokio::time::Instant::now();
    while waited.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    publish(
        &ch,
        "sourceevents",
        to_message(&spec_event(cluster, "later")),
    )
    .await;
    match timeout(WAIT, agent.incoming.recv()).await.expect("in time") {
        Some(Ok(Incoming::Spec(spec))) => assert_eq!(spec.uid, "later"),
        other => panic!("expected the spec of later, got {other:?}"),
    }
    let stats = agent.publisher.stats();
    assert!(stats.ready, "{stats:?}");
    assert_eq!(stats.reconnects, 0, "{stats:?}");
}
