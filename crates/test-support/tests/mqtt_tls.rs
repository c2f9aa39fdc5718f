//! The MQTT client against a real TLS broker: a mosquitto of its own (child process, killed on every
//! exit path) with a TLS 1.3 listener that requires client certificates, and certificates made
//! with rcgen. A client with a certificate of the broker's CA gets subscribed and publishes; a
//! client whose certificate the broker does not trust never gets ready. A client whose certificate
//! files are rotated closes its connection and reconnects at once with the new certificate (the
//! broker takes the certificate's CN as the username and logs it). A source subscribed to the
//! agent's events, as Maestro's server is, hears what the client publishes. Needs the `mosquitto` binary
//! (`e2e/scripts/mosquitto.sh install`), not a running broker.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cloudevents::client::{Client, ClientOptions, SubscribedHook};
use cloudevents::codec::{self, StatusReport};
use cloudevents::config::MqttConfig;
use cloudevents::types::EventType;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

fn mosquitto_bin() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("mosquitto"))
            .find(|p| p.is_file())
    });
    on_path
        .or_else(|| Some(PathBuf::from("/usr/sbin/mosquitto")).filter(|p| p.is_file()))
        .unwrap_or_else(|| {
            panic!(
                "the mosquitto binary is not installed (neither on PATH nor /usr/sbin/mosquitto): \
                 run `e2e/scripts/mosquitto.sh install` (as root) and run the tests again"
            )
        })
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let dir = std::env::temp_dir().join(format!(
            "cloudevents-mqtt-tls-{name}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }

    fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).expect("write");
        p
    }

    /// Replaces a file atomically, as a certificate rotation (e.g. a Secret volume) would.
    fn replace(&self, name: &str, contents: impl AsRef<[u8]>) {
        let tmp = self.0.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, contents).expect("write");
        std::fs::rename(&tmp, self.0.join(name)).expect("rename");
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

fn new_ca(name: &str) -> Ca {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let pem = params.self_signed(&key).expect("CA").pem();
    Ca {
        issuer: Issuer::new(params, key),
        pem,
    }
}

/// Certificate and key PEM of a leaf signed by `ca`.
fn leaf(ca: &Ca, cn: &str, sans: &[&str], usage: ExtendedKeyUsagePurpose) -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .expect("params");
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![usage];
    let cert = params.signed_by(&key, &ca.issuer).expect("leaf");
    (cert.pem(), key.serialize_pem())
}

/// A mosquitto with a TLS 1.3 listener requiring client certificates of `ca`, taking their CN as
/// the username (logged at connect as `u'<CN>'`); killed on drop.
struct TlsBroker {
    child: Child,
    port: u16,
    log: PathBuf,
    ca_file: PathBuf,
}

impl TlsBroker {
    fn start(dir: &TempDir, ca: &Ca) -> Self {
        let bin = mosquitto_bin();
        let (cert, key) = leaf(
            ca,
            "broker",
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let ca_file = dir.write("ca.crt", &ca.pem);
        let cert_file = dir.write("server.crt", cert);
        let key_file = dir.write("server.key", key);
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let conf = dir.write(
            "mosquitto.conf",
            format!(
                "listener {port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\nrequire_certificate true\n\
                 use_identity_as_username true\ntls_version tlsv1.3\nallow_anonymous true\npersistence false\nlog_dest stderr\nlog_type all\n",
                ca_file.display(),
                cert_file.display(),
                key_file.display()
            ),
        );
        let log = dir.0.join("mosquitto.log");
        let out = std::fs::File::create(&log).expect("log file");
        let child = Command::new(&bin)
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut broker = Self {
            child,
            port,
            log,
            ca_file,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = broker.child.try_wait() {
                panic!(
                    "mosquitto exited ({status}) at start:\n{}",
                    broker.log_text()
                );
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return broker;
            }
            if Instant::now() > deadline {
                panic!(
                    "mosquitto did not listen on 127.0.0.1:{port}:\n{}",
                    broker.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for TlsBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An agent's MQTT config file for `cluster` on `host:port` with the given TLS files.
fn config(
    dir: &TempDir,
    cluster: &str,
    host: &str,
    port: u16,
    ca: &Path,
    cert: &Path,
    key: &Path,
) -> MqttConfig {
    let file = dir.write(
        &format!("{cluster}.yaml"),
        format!(
            "brokerHost: {host}:{port}\ncaFile: {}\nclientCertFile: {}\nclientKeyFile: {}\ndialTimeout: 5s\n\
             topics:\n  sourceEvents: sources/maestro/consumers/{cluster}/sourceevents\n  \
             agentEvents: sources/maestro/consumers/{cluster}/agentevents\n",
            ca.display(),
            cert.display(),
            key.display()
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
async fn listen(dir: &TempDir, ca: &Ca, broker: &TlsBroker, cluster: &str) {
    use rumqttc::v5::{AsyncClient, Event, MqttOptions, mqttbytes::QoS, mqttbytes::v5::Packet};
    let (cert, key) = leaf(ca, "source", &[], ExtendedKeyUsagePurpose::ClientAuth);
    let name = format!("source-{cluster}");
    let cfg = config(
        dir,
        &name,
        "127.0.0.1",
        broker.port,
        &broker.ca_file,
        &dir.write(&format!("{name}.crt"), cert),
        &dir.write(&format!("{name}.key"), key),
    );
    let tls = cloudevents::tls::client_config(&cfg.certs).expect("source TLS");
    let mut mo = MqttOptions::new(name, "127.0.0.1", broker.port);
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
    let mut opts = ClientOptions::new(cfg, cluster, format!("{cluster}-work-agent"));
    opts.reconnect_min = Duration::from_millis(200);
    opts.reconnect_max = Duration::from_millis(500);
    start_with(opts, cluster)
}

fn start_with(opts: ClientOptions, cluster: &str) -> Client {
    let hook_cluster = cluster.to_string();
    let hook: SubscribedHook = Arc::new(move |p| {
        let ev =
            codec::encode_spec_resync_request(vec![], &hook_cluster, p.source()).expect("encodes");
        p.publish(ev).expect("queues");
    });
    cloudevents::mqtt::start(&opts, hook).expect("starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_of_the_brokers_ca_connects_over_tls13() {
    let dir = TempDir::new("ok");
    let ca = new_ca("mqtt test CA");
    let broker = TlsBroker::start(&dir, &ca);
    let (cert, key) = leaf(&ca, "agent", &[], ExtendedKeyUsagePurpose::ClientAuth);
    let cert = dir.write("agent.crt", cert);
    let key = dir.write("agent.key", key);

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
            let cfg = config(
                &dir,
                &cluster,
                host,
                broker.port,
                &broker.ca_file,
                &cert,
                &key,
            );
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
    let dir = TempDir::new("refused");
    let ca = new_ca("mqtt test CA");
    let broker = TlsBroker::start(&dir, &ca);
    // The client trusts the broker, but its own certificate comes from a CA the broker does not know.
    let rogue = new_ca("rogue CA");
    let (cert, key) = leaf(&rogue, "intruder", &[], ExtendedKeyUsagePurpose::ClientAuth);
    let cert = dir.write("rogue.crt", cert);
    let key = dir.write("rogue.key", key);
    let cluster = format!("tls-rogue-{}", std::process::id());
    let cfg = config(
        &dir,
        &cluster,
        "127.0.0.1",
        broker.port,
        &broker.ca_file,
        &cert,
        &key,
    );
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
    let status = work_api::ManifestWorkStatus::default();
    let report = StatusReport {
        uid,
        generation: 1,
        cluster,
        original_source: "maestro",
        metadata: None,
        status: &status,
    };
    codec::encode_status(
        &report,
        EventType::StatusUpdate,
        &format!("{cluster}-work-agent"),
        seq,
    )
    .expect("encodes")
}

/// Polls `done` on the client's stats every 20 ms until it holds; panics after `within`.
async fn wait_for(
    client: &Client,
    broker: &TlsBroker,
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
    let dir = TempDir::new("rotate");
    let ca = new_ca("mqtt test CA");
    let broker = TlsBroker::start(&dir, &ca);
    let (cert, key) = leaf(
        &ca,
        "agent-before",
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let cert = dir.write("rotating.crt", cert);
    let key = dir.write("rotating.key", key);
    let cluster = format!("tls-rotate-{}", std::process::id());
    let cfg = config(
        &dir,
        &cluster,
        "127.0.0.1",
        broker.port,
        &broker.ca_file,
        &cert,
        &key,
    );
    // Upstream's 5 s minimum backoff: the reconnect after a rotation does not wait for it.
    let mut opts = ClientOptions::new(cfg, &cluster, format!("{cluster}-work-agent"));
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

    let (new_cert, new_key) = leaf(&ca, "agent-after", &[], ExtendedKeyUsagePurpose::ClientAuth);
    let rotated_at = Instant::now();
    dir.replace("rotating.key", new_key);
    dir.replace("rotating.crt", new_cert);
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
