//! Client certificate rotation against servers that refuse expired client certificates: a
//! mosquitto requiring certificates of a test CA (OpenSSL checks their validity at every
//! handshake) and the gRPC source requiring the same (rustls checks it). The real `work-agent`
//! binary gets a certificate that expires within seconds, in a directory laid out and updated as
//! the kubelet does a Secret volume, and `CERT_CALLBACK_REFRESH_DURATION` set short. Once the
//! certificate has expired, a fresh connection with it is refused (the server's alert says
//! `CertificateExpired`), and so is every reconnect of the agent after the server dropped it;
//! after the files are swapped for a fresh certificate, the agent connects with the new one within
//! the refresh period and works again: a work created while it was locked out and one created
//! after both reach the spoke and their status reaches the source.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use crate::agent_common::{TIMEOUT, configmap, tail};
use serde_json::json;
use test_support::broker_source::{BrokerSource, Transport};
use test_support::certs::{Ca, CertAndKey, Leaf};
use test_support::grpc_source::GrpcSourceOptions;
use test_support::tls_probe::{Protocol, try_client_certificate};
use test_support::{
    AgentProcess, SecretVolume, TestCluster, free_port, run_dir, unique_name, wait_for,
};

/// How long the first certificate is valid: long enough for the agent to start and connect on a
/// loaded machine, short enough to expire while the test runs.
const SHORT_VALIDITY: Duration = Duration::from_secs(20);

/// The agent's `CERT_CALLBACK_REFRESH_DURATION`.
const REFRESH: Duration = Duration::from_secs(2);
const REFRESH_ENV: &str = "2s";

/// What a reconnect takes on top of noticing the new files: a TCP and TLS handshake on loopback,
/// and a subscription.
const CONNECT_SLACK: Duration = Duration::from_secs(3);

/// How long a probe connection waits for the server's answer.
const PROBE_WAIT: Duration = Duration::from_secs(20);

/// The files of the agent's certificate volume.
const CA_FILE: &str = "ca.crt";
const CERT_FILE: &str = "tls.crt";
const KEY_FILE: &str = "tls.key";

/// A client certificate for `cn`, valid for `valid_for`, and when it stops being valid (at the
/// latest: the certificate's end is a whole second at or before it).
fn client_cert(ca: &Ca, cn: &str, valid_for: Duration) -> (CertAndKey, SystemTime) {
    let leaf = Leaf {
        valid_for: Some(valid_for),
        ..Leaf::client(cn)
    };
    let cert = ca.sign(&leaf).expect("a client certificate");
    (cert, SystemTime::now() + valid_for)
}

/// The files of the volume for `cert`.
fn volume_files<'a>(ca: &'a Ca, cert: &'a CertAndKey) -> [(&'static str, &'a str); 3] {
    [
        (CA_FILE, ca.pem()),
        (CERT_FILE, &cert.cert_pem),
        (KEY_FILE, &cert.key_pem),
    ]
}

/// The source behind TLS, a spoke namespace, the agent and its certificate volume.
struct Rig {
    transport: Transport,
    hub: BrokerSource,
    spoke: TestCluster,
    ns: String,
    consumer: String,
    ca: Ca,
    volume: SecretVolume,
    agent: AgentProcess,
}

impl Rig {
    /// Starts the source on `transport` and the agent with `cert`.
    async fn start(transport: Transport, cert: &CertAndKey, ca: Ca) -> Self {
        let prefix = format!("{transport}-expiry");
        let options = GrpcSourceOptions {
            heartbeat_interval: Duration::from_millis(500),
            ..Default::default()
        };
        let hub = BrokerSource::start_tls(transport, &prefix, options, &ca)
            .await
            .unwrap_or_else(|e| panic!("the test source: {e}"));
        let spoke = TestCluster::spoke().await;
        let ns = spoke.namespace(&prefix).await;
        let consumer = unique_name(&prefix);
        let dir = run_dir().join(format!("expiry-{consumer}"));
        let volume = SecretVolume::create(&dir.join("certs"), &volume_files(&ca, cert))
            .unwrap_or_else(|e| panic!("the certificate volume: {e}"));
        let extra = format!(
            "caFile: {}\nclientCertFile: {}\nclientKeyFile: {}\n",
            volume.path(CA_FILE).display(),
            volume.path(CERT_FILE).display(),
            volume.path(KEY_FILE).display()
        );
        let config = hub
            .write_agent_config(&consumer, &extra, &dir)
            .unwrap_or_else(|e| panic!("agent config: {e}"));
        let kubeconfig = std::env::var(test_support::SPOKE_KUBECONFIG_ENV).expect("spoke");
        let mut args = transport.agent_args(&consumer, &config, Path::new(&kubeconfig));
        args.extend([
            format!("--http-address=127.0.0.1:{}", free_port()),
            "--health-address=off".into(),
            "--log-level=debug,kube=info,hyper=info,hyper_util=info,rustls=info,tower=info,rumqttc=info,h2=info,tonic=info".into(),
        ]);
        let agent =
            AgentProcess::start_with_env(args, [(cloudevents::tls::REFRESH_ENV, REFRESH_ENV)]);
        Self {
            transport,
            hub,
            spoke,
            ns,
            consumer,
            ca,
            volume,
            agent,
        }
    }

    fn protocol(&self) -> Protocol {
        match self.transport {
            Transport::Mqtt => Protocol::Mqtt,
            _ => Protocol::Http2,
        }
    }

    /// A fresh connection with `cert` to the port the agent uses: `Ok` when the server takes it.
    async fn try_cert(&self, cert: &CertAndKey) -> Result<(), String> {
        try_client_certificate(
            &self.hub.address(),
            self.ca.pem(),
            cert,
            self.protocol(),
            PROBE_WAIT,
        )
        .await
    }

    /// The client certificates the server took from the agent so far, newest last (on MQTT
    /// their CN, as the broker logs it; on gRPC the certificate itself).
    fn presented(&self) -> Vec<Vec<u8>> {
        match &self.hub {
            BrokerSource::Mqtt { broker, .. } => broker
                .log_text()
                .lines()
                .filter(|l| l.contains("New client connected") && l.contains("-work-agent"))
                .filter_map(|l| l.split("u'").nth(1)?.split('\'').next())
                .map(|cn| cn.as_bytes().to_vec())
                .collect(),
            BrokerSource::Grpc(source) => source
                .handshakes()
                .into_iter()
                .filter_map(|h| h.client_cert)
                .collect(),
            BrokerSource::PubSub(_) => Vec::new(),
        }
    }

    /// Handshakes the server refused for the client's certificate so far (every client's): on
    /// gRPC those refused for expiry; mosquitto logs no reason (the alert it sends has it).
    fn refused_as_expired(&self) -> usize {
        match &self.hub {
            BrokerSource::Mqtt { broker, .. } => broker
                .log_text()
                .lines()
                .filter(|l| l.contains("certificate verify failed"))
                .count(),
            BrokerSource::Grpc(source) => source
                .failed_handshakes()
                .iter()
                .filter(|e| e.contains("certificate expired"))
                .count(),
            BrokerSource::PubSub(_) => 0,
        }
    }

    /// What identifies `cert` in [`Rig::presented`].
    fn identity(&self, cert: &CertAndKey, cn: &str) -> Vec<u8> {
        match self.transport {
            Transport::Mqtt => cn.as_bytes().to_vec(),
            _ => cert.cert_der().expect("DER"),
        }
    }

    fn server_log(&self) -> String {
        match &self.hub {
            BrokerSource::Mqtt { broker, .. } => tail(&broker.log_text()),
            BrokerSource::Grpc(source) => format!(
                "handshakes {}, refused {:?}",
                source.handshakes().len(),
                source.failed_handshakes()
            ),
            BrokerSource::PubSub(_) => String::new(),
        }
    }

    /// Creates a work of one ConfigMap `name` at the source; its id.
    fn create(&self, name: &str) -> String {
        let bundle = json!({"manifests": [configmap(&self.ns, name, json!({"k": name}))]});
        self.hub
            .maestro()
            .create(&self.consumer, bundle)
            .unwrap_or_else(|e| panic!("create at the source: {e}"))
    }

    fn applied(&self, id: &str) -> bool {
        let source = self.hub.maestro();
        source.condition_status(id, "Applied").as_deref() == Some("True")
            && source.condition_status(id, "Available").as_deref() == Some("True")
    }

    /// Waits until work `id` went round: applied on the spoke, its status back at the source.
    async fn wait_round_trip(&self, id: &str, name: &str) {
        let waited = self
            .hub
            .maestro()
            .wait_until(|_| self.applied(id), TIMEOUT)
            .await;
        if let Err(e) = waited {
            panic!(
                "work {id} Applied at the source: {e}\nagent log:\n{}\nserver:\n{}",
                tail(&self.agent.log()),
                self.server_log()
            );
        }
        let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(self.spoke.client.clone(), &self.ns);
        assert!(
            cms.get_opt(name).await.expect("read").is_some(),
            "{name} on the spoke"
        );
    }

    /// Waits until `what` holds of the rig, failing with the agent's and the server's logs.
    async fn wait(&self, what: &str, within: Duration, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + within;
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "{what}: not within {within:?}\nagent log:\n{}\nserver:\n{}",
                tail(&self.agent.log()),
                self.server_log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn an_expired_certificate_is_refused_and_a_rotated_one_restores_the_agent(t: Transport) {
    let ca = Ca::new(&format!("{t} expiry CA")).expect("a CA");
    let (old, old_expires) = client_cert(&ca, "agent-old", SHORT_VALIDITY);
    let mut rig = Rig::start(t, &old, ca).await;
    let old_id = rig.identity(&old, "agent-old");

    // Before expiry: the agent connects with the short-lived certificate and works.
    let first = rig.create("before");
    rig.wait_round_trip(&first, "before").await;
    assert_eq!(
        rig.presented().last(),
        Some(&old_id),
        "the agent connected with the first certificate"
    );
    assert!(
        SystemTime::now() < old_expires,
        "the first certificate expired before the agent had connected: raise SHORT_VALIDITY"
    );

    // (a) Once it has expired, the server refuses it on a fresh connection.
    wait_for("the first certificate to expire", TIMEOUT, || async {
        // A second past the end: the certificate's end is a whole second, the servers' clocks
        // are this machine's.
        (SystemTime::now() > old_expires + Duration::from_secs(1)).then_some(())
    })
    .await;
    let refused_before = rig.refused_as_expired();
    let refusal = rig
        .try_cert(&old)
        .await
        .expect_err("the server took an expired client certificate");
    assert!(
        refusal.contains("CertificateExpired"),
        "refused, but not for expiry: {refusal}\n{}",
        rig.server_log()
    );
    rig.wait("the server to record the refusal", TIMEOUT, |r| {
        r.refused_as_expired() > refused_before
    })
    .await;

    // The agent's connection predates the expiry and servers check certificates only at the
    // handshake: drop it. Every reconnect now presents the expired certificate, and is refused.
    rig.hub.stop_hub().await;
    let refused_at_restart = rig.refused_as_expired();
    rig.hub
        .start_hub()
        .await
        .unwrap_or_else(|e| panic!("restarting the server: {e}"));
    rig.wait("the agent's reconnects refused for expiry", TIMEOUT, |r| {
        r.refused_as_expired() >= refused_at_restart + 2
    })
    .await;
    if t == Transport::Mqtt {
        // The agent says why (over gRPC the transport error it gets has lost the server's alert).
        let log = rig.agent.log();
        assert!(
            log.contains("CertificateExpired"),
            "the agent's log names the refusal:\n{}",
            tail(&log)
        );
    }
    // Created while the agent is locked out: it can only arrive after the rotation.
    let locked_out = rig.create("locked-out");

    // (b) The kubelet swaps the volume's files for a fresh certificate: the agent reads them
    // within a refresh period and reconnects at once, whatever its backoff.
    let (new, _) = client_cert(&rig.ca, "agent-new", Duration::from_secs(3600));
    let new_id = rig.identity(&new, "agent-new");
    let rotated_at = Instant::now();
    let files = volume_files(&rig.ca, &new);
    rig.volume
        .update(&files)
        .unwrap_or_else(|e| panic!("rotating the volume: {e}"));
    rig.wait(
        "the agent connected with the new certificate",
        TIMEOUT,
        |r| r.presented().last() == Some(&new_id),
    )
    .await;
    let took = rotated_at.elapsed();
    eprintln!("{t}: the new certificate was presented {took:?} after the rotation");
    assert!(
        took < REFRESH + CONNECT_SLACK,
        "the agent took {took:?} to present the new certificate (refresh period {REFRESH:?})"
    );

    // And keeps working: the work it missed, and a new one.
    rig.wait_round_trip(&locked_out, "locked-out").await;
    let after = rig.create("after");
    rig.wait_round_trip(&after, "after").await;
    // The old certificate stays refused; the new one is taken on a fresh connection too.
    let again = rig.try_cert(&old).await.expect_err("expired, still");
    assert!(again.contains("CertificateExpired"), "{again}");
    rig.try_cert(&new)
        .await
        .unwrap_or_else(|e| panic!("the new certificate on a fresh connection: {e}"));
}

#[tokio::test]
async fn mqtt_an_expired_certificate_is_refused_and_a_rotated_one_restores_the_agent() {
    an_expired_certificate_is_refused_and_a_rotated_one_restores_the_agent(Transport::Mqtt).await;
}

#[tokio::test]
async fn grpc_an_expired_certificate_is_refused_and_a_rotated_one_restores_the_agent() {
    an_expired_certificate_is_refused_and_a_rotated_one_restores_the_agent(Transport::Grpc).await;
}
