//! The MQTT client of `cloudevents` against a real TLS broker: a mosquitto of its own
//! ([`Broker::start_tls`], killed on every exit path) with a TLS 1.3 listener that requires client
//! certificates, and certificates made by [`test_support::certs`]. A client with a certificate of
//! the broker's CA gets subscribed and publishes; a client whose certificate the broker does not
//! trust never gets ready. A client whose certificate files are rotated closes its connection and
//! reconnects at once with the new certificate (the broker takes the certificate's CN as the
//! username and logs it). A source subscribed to the agent's events, as Maestro's server is,
//! hears what the client publishes. Needs the `mosquitto` binary (`e2e/scripts/mosquitto.sh
//! install`), not a running broker.

use std::time::{Duration, Instant};

use cloudevents::client::{Client, ClientOptions};
use cloudevents::config::MqttConfig;
use cloudevents::types::EventType;
use test_support::TempDir;
use test_support::agent_events::{self, client_id, resync_hook};
use test_support::certs::{Ca, CertAndKey, Leaf};
use test_support::mosquitto::{self, Broker};

fn new_ca(name: &str) -> Ca {
    Ca::new(name).expect("a CA")
}

/// A client certificate for `cn`, signed by `ca`.
fn client_cert(ca: &Ca, cn: &str) -> CertAndKey {
    ca.sign(&Leaf::client(cn)).expect("a client certificate")
}

/// A TLS broker trusting `ca`. Needs the `mosquitto` binary (`e2e/scripts/mosquitto.sh install`).
fn tls_broker(ca: &Ca) -> Broker {
    Broker::start_tls("mqtt-tls", ca).unwrap_or_else(|e| panic!("{e}"))
}

/// An MQTT config of `cluster` for the broker at `host`, with `cert` written to `<cluster>.crt`
/// and `.key` in `dir` (where a rotation replaces them).
fn config(
    dir: &TempDir,
    cluster: &str,
    host: &str,
    broker: &Broker,
    cert: &CertAndKey,
) -> MqttConfig {
    let cert_file = dir.write(&format!("{cluster}.crt"), &cert.cert_pem);
    let key_file = dir.write(&format!("{cluster}.key"), &cert.key_pem);
    let file = dir.write(
        &format!("{cluster}.yaml"),
        format!(
            "{}caFile: {}\nclientCertFile: {}\nclientKeyFile: {}\ndialTimeout: 5s\n",
            mosquitto::agent_config(&format!("{host}:{}", broker.port()), cluster),
            broker.ca_file().display(),
            cert_file.display(),
            key_file.display()
        ),
    );
    let cfg = MqttConfig::from_file(&file).expect("config");
    assert!(cfg.uses_tls());
    cfg
}

/// A source subscribed to `cluster`'s agent-events topic with a certificate of `ca`, as Maestro's
/// server is: without one the broker answers every publish "no matching subscribers" and the
/// client holds the event for a source that listens again. Returns once the broker acknowledged
/// the subscription; the connection lives until the test's runtime ends.
async fn listen(dir: &TempDir, ca: &Ca, broker: &Broker, cluster: &str) {
    use rumqttc::v5::{AsyncClient, Event, MqttOptions, mqttbytes::QoS, mqttbytes::v5::Packet};
    let name = format!("source-{cluster}");
    let cfg = config(dir, &name, "127.0.0.1", broker, &client_cert(ca, "source"));
    let tls = cloudevents::tls::client_config(&cfg.certs).expect("source TLS");
    let mut mo = MqttOptions::new(name, "127.0.0.1", broker.port());
    mo.set_transport(rumqttc::Transport::tls_with_config(
        rumqttc::TlsConfiguration::Rustls(tls),
    ));
    let (client, mut eventloop) = AsyncClient::new(mo, 16);
    let topic = format!("sources/maestro/consumers/{cluster}/agentevents");
    client
        .subscribe(topic, QoS::AtLeastOnce)
        .await
        .expect("subscribe queued");
    let (subscribed, on_suback) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let _client = client;
        let mut subscribed = Some(subscribed);
        while let Ok(ev) = eventloop.poll().await {
            if let Event::Incoming(Packet::SubAck(_)) = ev
                && let Some(tx) = subscribed.take()
            {
                let _ = tx.send(());
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(20), on_suback)
        .await
        .unwrap_or_else(|_| panic!("the source was not subscribed:\n{}", broker.log_text()))
        .expect("the source's connection ended before its subscription");
}

/// Starts a client whose subscribed hook sends the spec resync request.
fn start(cfg: MqttConfig, cluster: &str) -> Client {
    let mut opts = ClientOptions::new(cfg, cluster, client_id(cluster));
    opts.reconnect_min = Duration::from_millis(200);
    opts.reconnect_max = Duration::from_millis(500);
    start_with(opts, cluster)
}

fn start_with(opts: ClientOptions<MqttConfig>, cluster: &str) -> Client {
    cloudevents::mqtt::start(&opts, resync_hook(cluster)).expect("starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_of_the_brokers_ca_connects_over_tls13() {
    let dir = TempDir::new("mqtt-tls-ok");
    let ca = new_ca("mqtt test CA");
    let broker = tls_broker(&ca);
    let cert = client_cert(&ca, "agent");

    // The broker's certificate is checked against an IP address and against a DNS name.
    for name in ["tls-ip", "tls-dns"] {
        listen(
            &dir,
            &ca,
            &broker,
            &format!("{name}-{}", std::process::id()),
        )
        .await;
    }
    let clients: Vec<(String, Client)> = [("127.0.0.1", "tls-ip"), ("localhost", "tls-dns")]
        .into_iter()
        .map(|(host, name)| {
            let cluster = format!("{name}-{}", std::process::id());
            let cfg = config(&dir, &cluster, host, &broker, &cert);
            (host.to_string(), start(cfg, &cluster))
        })
        .collect();

    let deadline = Instant::now() + Duration::from_secs(20);
    for (host, client) in &clients {
        loop {
            let stats = client.publisher.stats();
            // Subscribed, and the resync request published and acknowledged.
            if stats.ready && stats.sent.values().sum::<u64>() >= 1 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{host}: not subscribed over TLS within 20 s: {stats:?}\nbroker log:\n{}",
                broker.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let log = broker.log_text();
    assert!(log.contains("agent"), "the broker saw our client:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_of_another_ca_is_refused() {
    let dir = TempDir::new("mqtt-tls-refused");
    let ca = new_ca("mqtt test CA");
    let broker = tls_broker(&ca);
    // The client trusts the broker, but its own certificate comes from a CA the broker does not know.
    let rogue = client_cert(&new_ca("rogue CA"), "intruder");
    let cluster = format!("tls-rogue-{}", std::process::id());
    let cfg = config(&dir, &cluster, "127.0.0.1", &broker, &rogue);
    let client = start(cfg, &cluster);

    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let stats = client.publisher.stats();
        assert!(!stats.ready, "a rogue client got subscribed: {stats:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = client.publisher.stats();
    assert!(
        stats.reconnects >= 1,
        "the refused connection was retried: {stats:?}"
    );
    assert!(stats.sent.is_empty(), "{stats:?}");
}

fn status_event(cluster: &str, uid: &str, seq: u64) -> cloudevents::CloudEvent {
    agent_events::status_update(cluster, uid, 1, seq, &Default::default()).expect("encodes")
}

/// Polls `done` on the client's stats every 20 ms until it holds; panics after `within`.
async fn wait_for(
    client: &Client,
    broker: &Broker,
    within: Duration,
    what: &str,
    done: impl Fn(&cloudevents::client::Stats, &str) -> bool,
) -> cloudevents::client::Stats {
    let deadline = Instant::now() + within;
    loop {
        let stats = client.publisher.stats();
        if done(&stats, &broker.log_text()) {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {within:?}: {stats:?}\nbroker log:\n{}",
            broker.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_client_certificate_closes_the_connection_and_the_new_one_is_presented() {
    let dir = TempDir::new("mqtt-tls-rotate");
    let ca = new_ca("mqtt test CA");
    let broker = tls_broker(&ca);
    let cluster = format!("tls-rotate-{}", std::process::id());
    let cfg = config(
        &dir,
        &cluster,
        "127.0.0.1",
        &broker,
        &client_cert(&ca, "agent-before"),
    );
    // Upstream's 5 s minimum backoff: the reconnect after a rotation does not wait for it.
    let mut opts = ClientOptions::new(cfg, &cluster, client_id(&cluster));
    assert_eq!(opts.reconnect_min, Duration::from_secs(5));
    // Instead of CERT_CALLBACK_REFRESH_DURATION (read once per process).
    opts.cert_refresh = Duration::from_millis(300);
    listen(&dir, &ca, &broker, &cluster).await;
    let client = start_with(opts, &cluster);

    let before = wait_for(
        &client,
        &broker,
        Duration::from_secs(20),
        "subscribed with the first certificate",
        |s, log| s.ready && s.sent.values().sum::<u64>() >= 1 && log.contains("u'agent-before'"),
    )
    .await;

    // Unchanged files: several polls, no reconnect.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stats = client.publisher.stats();
    assert_eq!(stats.reconnects, before.reconnects, "{stats:?}");
    assert!(stats.ready);

    // Status events keep flowing while the certificate is rotated: none may be lost.
    let publisher = client.publisher.clone();
    let status_type = EventType::StatusUpdate.as_type();
    let feeder_cluster = cluster.clone();
    let feeder = tokio::spawn(async move {
        let mut n = 0u64;
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            n += 1;
            publisher
                .publish(status_event(&feeder_cluster, &format!("work-{n}"), n))
                .expect("queues");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        n
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    let rotated = client_cert(&ca, "agent-after");
    let rotated_at = Instant::now();
    dir.write(&format!("{cluster}.key"), &rotated.key_pem);
    dir.write(&format!("{cluster}.crt"), &rotated.cert_pem);
    let after = wait_for(
        &client,
        &broker,
        Duration::from_secs(10),
        "reconnected with the rotated certificate",
        |s, log| s.ready && s.reconnects > before.reconnects && log.contains("u'agent-after'"),
    )
    .await;
    // Within a poll period and a connect: far less than the 5 s backoff.
    let took = rotated_at.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "the reconnect waited {took:?}: {after:?}"
    );

    let published = feeder.await.expect("feeder");
    let done = wait_for(
        &client,
        &broker,
        Duration::from_secs(20),
        "every status event acknowledged",
        |s, _| s.sent.get(&status_type).copied() == Some(published) && s.queue_depth == 0,
    )
    .await;
    assert_eq!(
        done.reconnects,
        before.reconnects + 1,
        "one reconnect for one rotation: {done:?}"
    );
    // Subscribed again, so the resync request went out again.
    assert!(done.sent.values().sum::<u64>() >= published + 2, "{done:?}");
    let log = broker.log_text();
    let last_connect = log
        .lines()
        .rfind(|l| l.contains("New client connected"))
        .unwrap_or_default();
    assert!(
        last_connect.contains("u'agent-after'"),
        "the latest connection presents the new certificate: {last_connect}\n{log}"
    );
}
