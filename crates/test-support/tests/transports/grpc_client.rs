//! The gRPC client against the test gRPC source on 127.0.0.1: subscribe with the
//! `subscription-id` header, spec in, status out, resync after every subscribe, a server restart
//! losing nothing, heartbeats and the healthiness timeout, a source refusing publishes, a 1 MiB
//! bundle; TLS 1.3 with a client certificate (and its rotation), a bearer token, and a CA alone
//! meaning plain TCP as upstream. No cluster and no external server needed.

use std::sync::Arc;
use std::time::Duration;

use cloudevents::client::{Client, Publisher};
use cloudevents::codec::{self, Incoming, ResourceVersion};
use cloudevents::config::GrpcConfig;
use cloudevents::grpc::GrpcClientOptions;
use cloudevents::types::EventType;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use std::sync::Mutex;
use test_support::grpc_source::{GrpcSource, GrpcSourceOptions};
use test_support::mqtt_source::StatusOutcome;
use tokio::time::timeout;
use work_api::ManifestWorkStatus;

const CLUSTER: &str = "cluster1";
const WAIT: Duration = Duration::from_secs(20);

async fn source() -> GrpcSource {
    GrpcSource::start(GrpcSourceOptions {
        heartbeat_interval: Duration::from_millis(100),
        ..Default::default()
    })
    .await
    .expect("source starts")
}

/// The versions the client's "agent" holds: what its resync hook lists.
type Held = Arc<Mutex<Vec<ResourceVersion>>>;

fn client(url: &str, extra: &str) -> (Client, Held) {
    client_with(url, extra, Duration::from_secs(300))
}

fn client_with(url: &str, extra: &str, cert_refresh: Duration) -> (Client, Held) {
    let config = GrpcConfig::parse(&format!("url: {url}\n{extra}")).expect("config");
    let mut opts = GrpcClientOptions::new(config, CLUSTER, "cluster1-work-agent");
    opts.reconnect_min = Duration::from_millis(50);
    opts.reconnect_max = Duration::from_millis(200);
    opts.cert_refresh = cert_refresh;
    let held: Held = Arc::default();
    let list = held.clone();
    let hook = Arc::new(move |p: &Publisher| {
        let versions = list.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let ev = codec::encode_spec_resync_request(versions, CLUSTER, p.source())
            .expect("resync request");
        p.publish(ev).expect("queued");
    });
    (
        cloudevents::grpc::start(&opts, hook).expect("client starts"),
        held,
    )
}

fn bundle(name: &str) -> serde_json::Value {
    json!({"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}, "data": {"k": "v"}}]})
}

async fn next_spec(client: &mut Client) -> Box<codec::SpecUpdate> {
    match timeout(WAIT, client.incoming.recv()).await {
        Ok(Some(Ok(Incoming::Spec(s)))) => s,
        Ok(Some(other)) => panic!("not a spec event: {other:?}"),
        Ok(None) => panic!("the client stopped"),
        Err(_) => panic!("no spec event within {WAIT:?}"),
    }
}

fn applied_status(uid: &str, generation: i64, sequence: u64) -> cloudevents::CloudEvent {
    let mut status = ManifestWorkStatus::default();
    status.conditions.push(Condition {
        type_: "Applied".into(),
        status: "True".into(),
        reason: "AppliedManifestWorkComplete".into(),
        message: String::new(),
        last_transition_time: Time(Timestamp::now()),
        observed_generation: Some(generation),
    });
    test_support::agent_events::status_update(CLUSTER, uid, generation, sequence, &status)
        .expect("status")
}

/// Publishes an `Applied` status of `id` and waits until the source accepted it.
async fn publish_applied(src: &GrpcSource, client: &Client, id: &str, what: &str) {
    client
        .publisher
        .publish(applied_status(id, 1, sequence()))
        .expect("queued");
    src.wait_until(
        |s| s.condition_status(id, "Applied").as_deref() == Some("True"),
        WAIT,
    )
    .await
    .expect(what);
}

fn sequence() -> u64 {
    cloudevents::snowflake::Snowflake::new().next_id()
}

#[tokio::test]
async fn spec_in_status_out_and_a_resync_after_each_subscribe() {
    let src = source().await;
    let (mut client, _) = client(&src.url(), "");
    src.wait_until(|s| s.subscribers(CLUSTER) == 1, WAIT)
        .await
        .expect("subscribed");
    src.wait_until(|s| s.counters().spec_resync_requests >= 1, WAIT)
        .await
        .expect("a spec resync request after the subscribe");
    assert!(client.publisher.stats().ready);

    let id = src.create(CLUSTER, bundle("c1")).expect("create");
    let spec = next_spec(&mut client).await;
    assert_eq!((spec.uid.as_str(), spec.generation), (id.as_str(), 1));
    assert_eq!(spec.event_type, EventType::SpecCreate);
    assert!(spec.spec.is_some());

    publish_applied(&src, &client, &id, "status accepted").await;
    src.wait_until(|s| s.heartbeats_sent() > 2, WAIT)
        .await
        .expect("heartbeats");
    let stats = client.publisher.stats();
    assert!(
        stats.received.keys().all(|t| !t.contains("heartbeat")),
        "heartbeats are not events: {stats:?}"
    );
    assert_eq!(
        stats.sent.get(&EventType::StatusUpdate.as_type()),
        Some(&1),
        "{stats:?}"
    );

    src.update(&id, bundle("c2")).expect("update");
    let spec = next_spec(&mut client).await;
    assert_eq!(
        (spec.generation, spec.event_type),
        (2, EventType::SpecUpdate)
    );
    src.delete(&id).expect("delete");
    let spec = next_spec(&mut client).await;
    assert!(spec.deletion_timestamp.is_some());
}

#[tokio::test]
async fn a_final_status_does_not_replace_the_last_one() {
    let src = source().await;
    let (mut client, _) = client(&src.url(), "");
    src.wait_until(|s| s.subscribers(CLUSTER) == 1, WAIT)
        .await
        .expect("subscribed");
    let id = src.create(CLUSTER, bundle("final")).expect("create");
    next_spec(&mut client).await;
    // The last status is refused once (a conflict at the source) and waits for its retry when
    // the work's final status comes: both arrive, the last status first.
    src.refuse_publishes(1);
    let last = applied_status(&id, 1, sequence());
    let last_id = last.id.clone();
    client.publisher.publish(last).expect("queued");
    src.wait_until(|s| s.publishes_refused() == 1, WAIT)
        .await
        .expect("refused once");
    let mut deleted = applied_status(&id, 1, sequence());
    deleted.data = Some(
        br#"{"conditions":[{"type":"Deleted","status":"True","reason":"ManifestsDeleted","message":"","lastTransitionTime":"2026-11-26T00:00:00Z"}],"resourceStatus":[]}"#
            .to_vec(),
    );
    let deleted_id = deleted.id.clone();
    client.publisher.publish(deleted).expect("queued");
    src.wait_until(|s| s.hard_deleted(&id), WAIT)
        .await
        .expect("the final status arrives");
    let order: Vec<String> = src
        .events()
        .into_iter()
        .map(|e| e.id)
        .filter(|e| *e == last_id || *e == deleted_id)
        .collect();
    assert_eq!(order, [last_id.clone(), last_id, deleted_id]);
}

#[tokio::test]
async fn keepalive_pings_as_configured() {
    let src = source().await;
    let (client, _) = client(
        &src.url(),
        "keepAliveConfig:\n  enable: true\n  time: 1s\n  timeout: 5s\n  permitWithoutStream: true\n",
    );
    src.wait_until(|s| s.counters().spec_resync_requests >= 1, WAIT)
        .await
        .expect("subscribed with keepalive on (the interval raised to Go's 10 s floor)");
    assert!(client.publisher.stats().ready);
}

#[tokio::test]
async fn a_server_restart_loses_nothing() {
    let mut src = source().await;
    let (mut client, held) = client(&src.url(), "");
    src.wait_until(|s| s.subscribers(CLUSTER) == 1, WAIT)
        .await
        .expect("subscribed");
    let a = src.create(CLUSTER, bundle("a")).expect("create a");
    let b = src.create(CLUSTER, bundle("b")).expect("create b");
    for _ in 0..2 {
        let spec = next_spec(&mut client).await;
        held.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ResourceVersion {
                resource_id: spec.uid.clone(),
                resource_version: spec.generation,
            });
    }

    src.stop().await;
    timeout(WAIT, async {
        while client.publisher.stats().ready {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the client notices the server is gone");
    // While the server is away: statuses wait in the queue (latest per work), the source
    // changes a work and forgets another, and gets a new one.
    client
        .publisher
        .publish(applied_status(&a, 1, sequence()))
        .expect("queued while away");
    let newer = applied_status(&a, 1, sequence());
    let newer_id = newer.id.clone();
    client.publisher.publish(newer).expect("replaces the first");
    assert_eq!(client.publisher.stats().queue_depth, 1);
    src.update(&a, bundle("a2")).expect("update a");
    assert!(src.forget(&b));
    let c = src.create(CLUSTER, bundle("c")).expect("create c");

    src.restart().await.expect("restart on the same port");
    src.wait_until(|s| s.subscribers(CLUSTER) == 1, WAIT)
        .await
        .expect("resubscribed");
    // The resync answer: a's new version, the new c, and for the forgotten b the broker's
    // delete without data and without `resourceversion`, taken at version 0 (sdk-go's codec
    // refuses it, and upstream's agent keeps the work the source no longer holds).
    let mut got = Vec::new();
    let mut deleted = Vec::new();
    while got.len() < 2 || deleted.is_empty() {
        match timeout(WAIT, client.incoming.recv()).await {
            Ok(Some(Ok(Incoming::Spec(s)))) if s.deletion_timestamp.is_some() => {
                assert!(s.spec.is_none(), "{s:?}");
                deleted.push((s.uid.clone(), s.generation));
            }
            Ok(Some(Ok(Incoming::Spec(s)))) => got.push((s.uid.clone(), s.generation)),
            other => panic!("resync answer incomplete: {got:?} {deleted:?} {other:?}"),
        }
    }
    got.sort();
    let mut want = vec![(a.clone(), 2), (c.clone(), 1)];
    want.sort();
    assert_eq!(got, want);
    assert_eq!(deleted, [(b.clone(), 0)]);
    assert_eq!(client.publisher.stats().rejected, 0);
    src.wait_until(|s| s.events().iter().any(|e| e.id == newer_id), WAIT)
        .await
        .expect("the status queued while away arrives after the restart");
    let stats = client.publisher.stats();
    assert!(stats.reconnects >= 1, "{stats:?}");
    assert_eq!(stats.queue_depth, 0, "{stats:?}");
    assert_eq!(src.counters().spec_resync_requests, 2);
}

#[tokio::test]
async fn no_heartbeat_within_the_healthiness_timeout_means_reconnect() {
    let src = source().await;
    let (client, _) = client(&src.url(), "serverHealthinessTimeout: 1s\n");
    src.wait_until(|s| s.counters().subscriptions == 1, WAIT)
        .await
        .expect("subscribed");
    // Heartbeats every 100 ms keep a 1 s timeout quiet.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(src.counters().subscriptions, 1);
    src.set_heartbeats(false);
    src.wait_until(|s| s.counters().subscriptions >= 2, WAIT)
        .await
        .expect("resubscribed after the healthiness timeout");
    assert!(client.publisher.stats().reconnects >= 1);
    src.wait_until(|s| s.counters().spec_resync_requests >= 2, WAIT)
        .await
        .expect("a resync after the new subscribe");
}

#[tokio::test]
async fn a_subscription_without_the_subscription_id_header_is_not_a_subscription() {
    let src = source().await;
    src.set_subscription_header(false);
    let (client, _) = client(&src.url(), "");
    src.wait_until(|s| s.counters().subscriptions >= 2, WAIT)
        .await
        .expect("the client tries again");
    assert!(!client.publisher.stats().ready);
    assert_eq!(
        src.counters().spec_resync_requests,
        0,
        "not subscribed: no resync"
    );
    src.set_subscription_header(true);
    // One request, or two when the settling time ran out before the first heartbeat.
    src.wait_until(|s| s.counters().spec_resync_requests >= 1, WAIT)
        .await
        .expect("subscribed once the header comes");
    assert!(client.publisher.stats().ready);
}

#[tokio::test]
async fn a_refused_status_is_tried_again_and_a_1_mib_bundle_arrives() {
    let src = source().await;
    let (mut client, _) = client(&src.url(), "");
    src.wait_until(|s| s.subscribers(CLUSTER) == 1, WAIT)
        .await
        .expect("subscribed");
    let big = "x".repeat(1024 * 1024);
    let id = src
        .create(
            CLUSTER,
            json!({"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "big", "namespace": "default"}, "data": {"big": big}}]}),
        )
        .expect("create");
    let spec = next_spec(&mut client).await;
    let manifests = &spec.spec.as_ref().expect("spec").workload.manifests;
    assert_eq!(manifests.len(), 1);
    assert!(serde_json::to_string(&manifests[0]).expect("json").len() > 1024 * 1024);

    src.refuse_publishes(2);
    publish_applied(&src, &client, &id, "accepted after two refusals").await;
    assert_eq!(src.publishes_refused(), 2);
    assert!(
        src.status_verdicts()
            .iter()
            .all(|v| v.outcome == StatusOutcome::Accepted)
    );
    assert_eq!(client.publisher.stats().dropped, 0);

    // A refused status waits for its retry alone: another work's status goes meanwhile.
    let other = src.create(CLUSTER, bundle("other")).expect("create");
    next_spec(&mut client).await;
    src.refuse_resource(&id, u64::MAX);
    client
        .publisher
        .publish(applied_status(&id, 1, sequence()))
        .expect("queued");
    src.wait_until(|s| s.publishes_refused() >= 4, WAIT)
        .await
        .expect("refused, tried again");
    publish_applied(
        &src,
        &client,
        &other,
        "the other work's status goes while the first one is refused",
    )
    .await;
    src.refuse_resource(&id, 0);
    src.wait_until(|s| s.status_verdicts().len() == 3, WAIT)
        .await
        .expect("the refused one goes once accepted");
}

mod tls {
    use super::*;
    use base64::Engine;
    use test_support::TempDir;
    use test_support::certs::{Ca, CertAndKey, Leaf};
    use test_support::grpc_source::SourceTls;

    fn new_ca(name: &str) -> Ca {
        Ca::new(name).expect("a CA")
    }

    fn client_cert(ca: &Ca, cn: &str) -> (String, String) {
        let CertAndKey { cert_pem, key_pem } =
            ca.sign(&Leaf::client(cn)).expect("a client certificate");
        (cert_pem, key_pem)
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    /// The config keys of a CA and a client certificate given inline (base64), as OCM's suite
    /// writes them.
    fn inline_certs(ca: &str, cert: &str, key: &str) -> String {
        format!(
            "caData: {}\nclientCertData: {}\nclientKeyData: {}\n",
            b64(ca),
            b64(cert),
            b64(key)
        )
    }

    fn der(pem: &str) -> Vec<u8> {
        use tokio_rustls::rustls::pki_types::CertificateDer;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(pem.as_bytes())
            .expect("pem")
            .to_vec()
    }

    /// A TLS source whose server certificate (for 127.0.0.1) is signed by `ca`, requiring client
    /// certificates of `client_ca` when given.
    async fn tls_source(ca: &Ca, client_ca: Option<&Ca>, token: Option<&str>) -> GrpcSource {
        let CertAndKey { cert_pem, key_pem } = ca
            .sign(&Leaf::server("source", &["127.0.0.1", "localhost"]))
            .expect("a server certificate");
        GrpcSource::start(GrpcSourceOptions {
            heartbeat_interval: Duration::from_millis(100),
            tls: Some(SourceTls {
                cert_pem,
                key_pem,
                client_ca_pem: client_ca.map(|c| c.pem().to_string()),
            }),
            token: token.map(str::to_string),
            ..Default::default()
        })
        .await
        .expect("source starts")
    }

    #[tokio::test]
    async fn tls_1_3_with_a_client_certificate_as_the_suite_configures_it() {
        let ca = new_ca("grpc-ca");
        let src = tls_source(&ca, Some(&ca), None).await;
        let (cert, key) = client_cert(&ca, "cluster1-work-agent");
        // The suite's file: base64 data, an empty token.
        let (mut client, _) = client(
            &src.url(),
            &format!("{}token: \"\"\n", inline_certs(ca.pem(), &cert, &key)),
        );
        src.wait_until(|s| s.counters().spec_resync_requests >= 1, WAIT)
            .await
            .expect("subscribed over TLS");
        let handshakes = src.handshakes();
        assert!(!handshakes.is_empty());
        for h in &handshakes {
            assert_eq!(h.version, "Some(TLSv1_3)");
            assert_eq!(h.client_cert.as_deref(), Some(der(&cert).as_slice()));
        }
        let id = src.create(CLUSTER, bundle("tls")).expect("create");
        assert_eq!(next_spec(&mut client).await.uid, id);
        publish_applied(&src, &client, &id, "status over TLS").await;
    }

    #[tokio::test]
    async fn certificates_of_another_ca_are_refused_both_ways() {
        let ca = new_ca("grpc-ca");
        let other = new_ca("other-ca");
        // (who signs the server's certificate, who signs the client's): the source refuses the
        // client's, or the client refuses the server's.
        for (server_ca, client_ca) in [(&ca, &other), (&other, &ca)] {
            let src = tls_source(server_ca, Some(&ca), None).await;
            let (cert, key) = client_cert(client_ca, "cluster1-work-agent");
            let (client, _) = client(&src.url(), &inline_certs(ca.pem(), &cert, &key));
            src.wait_until(|s| s.failed_handshakes().len() >= 2, WAIT)
                .await
                .expect("refused, tried again");
            assert_eq!(src.counters().subscriptions, 0);
            assert!(!client.publisher.stats().ready);
        }
    }

    #[tokio::test]
    async fn a_bearer_token_over_tls_without_a_client_certificate() {
        let ca = new_ca("grpc-ca");
        let src = tls_source(&ca, None, Some("s3cret")).await;
        let dir = TempDir::new("grpc-token");
        let ca_file = dir.write("ca.crt", ca.pem());
        let token_file = dir.write("token", "s3cret\n");
        let (mut client, _) = client(
            &src.url(),
            &format!(
                "caFile: {}\ntokenFile: {}\n",
                ca_file.display(),
                token_file.display()
            ),
        );
        src.wait_until(|s| s.counters().spec_resync_requests >= 1, WAIT)
            .await
            .expect("subscribed with the token");
        assert!(src.handshakes().iter().all(|h| h.client_cert.is_none()));
        let id = src.create(CLUSTER, bundle("token")).expect("create");
        assert_eq!(next_spec(&mut client).await.uid, id);
        assert_eq!(src.unauthenticated(), 0);

        let (wrong, _) = client_with(
            &src.url(),
            &format!("caFile: {}\ntoken: guess\n", ca_file.display()),
            Duration::from_secs(300),
        );
        src.wait_until(|s| s.unauthenticated() >= 2, WAIT)
            .await
            .expect("a wrong token is refused, and tried again");
        assert!(!wrong.publisher.stats().ready);
    }

    #[tokio::test]
    async fn a_ca_alone_means_plain_tcp_as_upstream() {
        let ca = new_ca("grpc-ca");
        let src = source().await;
        let (client, _) = client(&src.url(), &format!("caData: {}\n", b64(ca.pem())));
        src.wait_until(|s| s.counters().spec_resync_requests >= 1, WAIT)
            .await
            .expect("subscribed without TLS");
        assert!(client.publisher.stats().ready);
    }

    #[tokio::test]
    async fn a_rotated_client_certificate_is_presented_after_a_reconnect() {
        let ca = new_ca("grpc-ca");
        let src = tls_source(&ca, Some(&ca), None).await;
        let dir = TempDir::new("grpc-rotate");
        let (cert1, key1) = client_cert(&ca, "first");
        let ca_file = dir.write("ca.crt", ca.pem());
        let cert_file = dir.write("tls.crt", &cert1);
        let key_file = dir.write("tls.key", &key1);
        let (_client, _) = client_with(
            &src.url(),
            &format!(
                "caFile: {}\nclientCertFile: {}\nclientKeyFile: {}\n",
                ca_file.display(),
                cert_file.display(),
                key_file.display()
            ),
            Duration::from_millis(200),
        );
        src.wait_until(|s| s.counters().subscriptions == 1, WAIT)
            .await
            .expect("subscribed");
        let requests_before = src.counters().spec_resync_requests;
        let (cert2, key2) = client_cert(&ca, "second");
        // Key first: a reload between the two files fails and keeps the old pair.
        dir.write("tls.key", &key2);
        dir.write("tls.crt", &cert2);
        let second = der(&cert2);
        src.wait_until(
            |s| {
                s.counters().subscriptions >= 2
                    && s.handshakes()
                        .last()
                        .is_some_and(|h| h.client_cert.as_deref() == Some(second.as_slice()))
            },
            WAIT,
        )
        .await
        .expect("a new connection presenting the new certificate");
        src.wait_until(
            |s| s.counters().spec_resync_requests > requests_before,
            WAIT,
        )
        .await
        .expect("a resync after the new subscription");
    }
}

/// sdk-go's broker sends the `subscription-id` header before it registers the subscriber and
/// answers a resync request only to the subscribers it has: a request sent before the
/// registration is answered to nobody. The client asks again on the stream's first message
/// (the heartbeat here), which proves the registration, so a work the source held before the
/// agent subscribed arrives however slow the registration.
#[tokio::test]
async fn a_resync_answered_before_the_registration_is_asked_again() {
    let src = GrpcSource::start(GrpcSourceOptions {
        heartbeat_interval: Duration::from_millis(300),
        registration_delay: Duration::from_millis(700),
        ..Default::default()
    })
    .await
    .expect("source starts");
    let id = src.create(CLUSTER, bundle("before")).expect("create");
    let (mut client, _) = client(&src.url(), "");
    let spec = next_spec(&mut client).await;
    assert_eq!(spec.uid, id, "the work held before the subscribe arrives");
    let counters = src.counters();
    assert!(
        counters.spec_resync_requests >= 2,
        "the first request went before the registration and was asked again: {counters:?}"
    );
}
