//! One test's world behind a broker: the Maestro-shaped source on one transport, a spoke
//! namespace, and the agent of one consumer, started with the command line of that transport's
//! deployment (Maestro's chart for MQTT and Pub/Sub, the klusterlet's for gRPC).

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::{Value, json};
use test_support::broker_source::{BrokerSource, Transport};
use test_support::grpc_source::{GrpcSource, GrpcSourceOptions};
use test_support::maestro::{Maestro, StatusOutcome};
use test_support::mosquitto::Limits;
use test_support::mqtt_source::MqttSource;
use test_support::{AgentProcess, TestCluster, free_port, unique_name, wait_for};

use crate::agent_common::{
    TIMEOUT, configmap, http_get, tail, wait_configmap_data, wait_configmap_gone,
};

/// The gRPC config file's key for the largest message the agent sends.
const GRPC_CEILING_KEY: &str = "maxSendMessageSize";
/// The Pub/Sub config file's key for the largest message the agent sends.
const PUBSUB_CEILING_KEY: &str = "maxMessageSize";

/// Heartbeats of the gRPC source: often enough for a 3 s healthiness timeout.
const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(500);

/// The source, a spoke namespace, the agent of one consumer.
pub struct BrokerEnv {
    pub hub: BrokerSource,
    pub spoke: TestCluster,
    pub ns: String,
    pub consumer: String,
    dir: PathBuf,
    config: PathBuf,
    pub port: u16,
    pub agent: Option<AgentProcess>,
}

impl BrokerEnv {
    /// A source on `transport` and its agent.
    pub async fn start(transport: Transport, prefix: &str) -> Self {
        Self::start_with(transport, prefix, "").await
    }

    /// A source on `transport` and an agent whose config file has the `extra` lines.
    pub async fn start_with(transport: Transport, prefix: &str, extra: &str) -> Self {
        Self::start_limited(transport, prefix, extra, Limits::default()).await
    }

    /// A source on `transport` whose wire takes events of at most `ceiling` bytes: on MQTT the
    /// broker's `max_packet_size` (its CONNACK tells the agent), elsewhere the agent's config
    /// key for it.
    pub async fn start_with_ceiling(transport: Transport, prefix: &str, ceiling: u32) -> Self {
        match transport {
            Transport::Mqtt => {
                let limits = Limits {
                    max_packet_bytes: ceiling,
                    ..Limits::default()
                };
                Self::start_limited(transport, prefix, "", limits).await
            }
            Transport::Grpc => {
                let extra = format!("{GRPC_CEILING_KEY}: {ceiling}\n");
                Self::start_with(transport, prefix, &extra).await
            }
            Transport::PubSub => {
                let extra = format!("{PUBSUB_CEILING_KEY}: {ceiling}\n");
                Self::start_with(transport, prefix, &extra).await
            }
        }
    }

    async fn start_limited(
        transport: Transport,
        prefix: &str,
        extra: &str,
        limits: Limits,
    ) -> Self {
        let prefix = format!("{transport}-{prefix}");
        let options = GrpcSourceOptions {
            heartbeat_interval: HEARTBEAT_INTERVAL,
            ..Default::default()
        };
        let hub = BrokerSource::start_limited(transport, &prefix, options, limits)
            .await
            .unwrap_or_else(|e| panic!("the test source: {e}"));
        let spoke = TestCluster::spoke().await;
        let ns = spoke.namespace(&prefix).await;
        let consumer = unique_name(&prefix);
        hub.add_consumer(&consumer)
            .await
            .unwrap_or_else(|e| panic!("the test source: {e}"));
        let dir = test_support::run_dir().join(format!("broker-{consumer}"));
        let config = hub
            .write_agent_config(&consumer, extra, &dir)
            .unwrap_or_else(|e| panic!("agent config: {e}"));
        let mut env = Self {
            hub,
            spoke,
            ns,
            consumer,
            dir,
            config,
            port: free_port(),
            agent: None,
        };
        env.start_agent();
        env
    }

    /// Starts the agent with its transport's command line, plus loopback addresses for a test.
    pub fn start_agent(&mut self) {
        let spoke = std::env::var(test_support::SPOKE_KUBECONFIG_ENV).expect("spoke kubeconfig");
        let transport = self.hub.transport();
        let mut args = transport.agent_args(&self.consumer, &self.config, Path::new(&spoke));
        args.push(match transport {
            Transport::Mqtt | Transport::PubSub => "-v=2".into(),
            Transport::Grpc => "--status-sync-interval=3s".into(),
        });
        args.extend([
            format!("--http-address=127.0.0.1:{}", self.port),
            "--health-address=off".into(),
            "--log-level=debug,kube=info,hyper=info,hyper_util=info,rustls=info,tower=info,rumqttc=info,h2=info,tonic=info".into(),
        ]);
        // The test's namespace stands for the agent's own: the deletions kept across restarts
        // go there.
        self.agent = Some(AgentProcess::start_with_env(
            args,
            [("WORK_AGENT_LEASE_NAMESPACE", self.ns.as_str())],
        ));
    }

    /// The ConfigMap of the deletions the agent keeps across restarts.
    pub async fn kept_deletions(&self) -> std::collections::BTreeMap<String, String> {
        self.configmaps()
            .get_opt(&format!("work-agent-{}-deleted", self.consumer))
            .await
            .expect("read the kept deletions")
            .and_then(|cm| cm.data)
            .unwrap_or_default()
    }

    pub fn kill_agent(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            agent.kill();
        }
    }

    pub fn stop_agent(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            agent.stop();
        }
    }

    pub fn log(&self) -> String {
        self.agent
            .as_ref()
            .map(AgentProcess::log)
            .unwrap_or_default()
    }

    /// The source, whichever front end it is behind.
    pub fn source(&self) -> &Maestro {
        self.hub.maestro()
    }

    /// The MQTT front end; a case that asks for it runs on MQTT only.
    pub fn mqtt(&mut self) -> &mut MqttSource {
        match &mut self.hub {
            BrokerSource::Mqtt { source, .. } => source,
            _ => panic!("an MQTT case runs behind MQTT"),
        }
    }

    /// The gRPC front end; a case that asks for it runs on gRPC only.
    pub fn grpc(&mut self) -> &mut GrpcSource {
        match &mut self.hub {
            BrokerSource::Grpc(source) => source,
            _ => panic!("a gRPC case runs behind gRPC"),
        }
    }

    pub fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.spoke.client.clone(), &self.ns)
    }

    /// Panics with `what` and the agent's log when a wait of the source failed.
    pub fn expect_source(&self, what: &str, waited: Result<(), String>) {
        if let Err(e) = waited {
            panic!("{what}: {e}\nagent log:\n{}", tail(&self.log()));
        }
    }

    pub async fn wait_source(&self, what: &str, cond: impl Fn(&Maestro) -> bool) {
        let waited = self.source().wait_until(cond, TIMEOUT).await;
        self.expect_source(what, waited);
    }

    pub async fn wait_applied(&self, id: &str) {
        self.wait_source(&format!("{id} Applied and Available at the source"), |s| {
            s.condition_status(id, "Applied").as_deref() == Some("True")
                && s.condition_status(id, "Available").as_deref() == Some("True")
        })
        .await;
    }

    /// Waits until work `id` is `Complete` at the source.
    pub async fn wait_complete(&self, id: &str) {
        self.wait_source("Complete=True at the source", |s| {
            s.condition_status(id, "Complete").as_deref() == Some("True")
        })
        .await;
    }

    /// Creates a work of `bundle` at the source for this test's consumer; its id.
    pub fn create(&self, bundle: Value) -> String {
        self.source()
            .create(&self.consumer, bundle)
            .unwrap_or_else(|e| panic!("create at the source: {e}"))
    }

    /// Creates two works, `a` and `b` (one ConfigMap each), and waits until both are applied;
    /// their ids.
    pub async fn two_applied_works(&self) -> (String, String) {
        let [a, b] = ["a", "b"].map(|name| self.create(bundle(&self.ns, name, json!({"v": "1"}))));
        self.wait_applied(&a).await;
        self.wait_applied(&b).await;
        (a, b)
    }

    /// What the source changes while the agent does not hear it: `a` updated to v2, `b`
    /// deleted, a new work `c` created; the id of `c`.
    pub fn change_a_delete_b_create_c(&self, a: &str, b: &str) -> String {
        self.source()
            .update(a, bundle(&self.ns, "a", json!({"v": "2"})))
            .expect("update a");
        self.source().delete(b).expect("delete b");
        self.create(bundle(&self.ns, "c", json!({"v": "1"})))
    }

    /// Waits until the spoke and the source show those changes: `a` at v2 with an accepted
    /// status of version 2, `b` gone and hard-deleted at the source, `c` applied.
    pub async fn wait_changes_converged(&self, a: &str, b: &str, c: &str) {
        self.wait_data("a", "v", "2").await;
        self.wait_gone("b").await;
        self.wait_data("c", "v", "1").await;
        self.wait_applied(c).await;
        self.wait_source("b is Deleted at the source", |s| s.hard_deleted(b))
            .await;
        self.wait_source("a's status is of version 2", |s| {
            s.resource(a).is_some_and(|r| r.version == 2)
                && s.status_verdicts()
                    .iter()
                    .any(|v| v.resource_id == a && v.outcome == StatusOutcome::Accepted)
                && s.condition_status(a, "Applied").as_deref() == Some("True")
        })
        .await;
    }

    pub async fn wait_log(&self, what: &str, needle: &str) {
        test_support::wait_for(what, TIMEOUT, || async {
            self.log().contains(needle).then_some(())
        })
        .await;
    }

    pub async fn wait_data(&self, name: &str, key: &str, value: &str) {
        wait_configmap_data(&self.configmaps(), name, key, value).await;
    }

    pub async fn wait_gone(&self, name: &str) {
        wait_configmap_gone(&self.configmaps(), name).await;
    }

    pub async fn metrics(&self) -> String {
        http_get(self.port, "/metrics").await.unwrap_or_default()
    }

    /// Waits until the AppliedManifestWork of resource `id` is gone from the spoke.
    pub async fn wait_record_released(&self, id: &str) {
        let amws: Api<work_api::AppliedManifestWork> = Api::all(self.spoke.client.clone());
        let name = self.amw_name(id);
        wait_for("the AppliedManifestWork is released", TIMEOUT, || async {
            amws.get_opt(&name).await.ok()?.is_none().then_some(())
        })
        .await;
    }

    /// The AppliedManifestWork of resource `id`, named as upstream's agent names it:
    /// sha256(brokerHost or url)-<id>.
    pub fn amw_name(&self, id: &str) -> String {
        format!("{}-{id}", work_api::hub_hash(&self.hub.address()))
    }
}

impl Drop for BrokerEnv {
    fn drop(&mut self) {
        self.stop_agent();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `manifestConfigs` entry of ConfigMap `ns/name` with the fields of `config` (rules,
/// strategies).
pub fn configmap_config(ns: &str, name: &str, config: Value) -> Value {
    let mut entry = json!({
        "resourceIdentifier": {"group": "", "resource": "configmaps", "name": name, "namespace": ns}
    });
    if let (Some(entry), Value::Object(fields)) = (entry.as_object_mut(), config) {
        entry.extend(fields);
    }
    entry
}

/// The manifest `ordinal`'s condition `ty` in the status the source holds for `id`.
pub fn manifest_condition(source: &Maestro, id: &str, ordinal: usize, ty: &str) -> Option<Value> {
    source.status(id)?["resourceStatus"]
        .as_array()?
        .get(ordinal)?["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
        .cloned()
}

/// A bundle of one ConfigMap.
pub fn bundle(ns: &str, name: &str, data: Value) -> Value {
    json!({"manifests": [configmap(ns, name, data)]})
}

/// The value of the first sample whose line starts with `name` (include the space or `{`).
pub fn metric(metrics: &str, name: &str) -> Option<u64> {
    metrics
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}
