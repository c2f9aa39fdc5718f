//! The agent against a CloudEvents gRPC source: the real `work-agent` binary started with the
//! klusterlet's command line and `--workload-source-driver=grpc` (upstream's config file), a test
//! source that serves the source side as sdk-go's broker does (`test_support::grpc_source`:
//! `subscription-id` header, heartbeats, resync answers, Maestro's status rules), and a real
//! spoke.

mod agent_common;

use std::path::PathBuf;
use std::time::Duration;

use agent_common::{TIMEOUT, configmap, http_get, tail, wait_configmap_data, wait_configmap_gone};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::{Value, json};
use test_support::grpc_source::{GrpcSource, GrpcSourceOptions};
use test_support::mqtt_source::StatusOutcome;
use test_support::{AgentProcess, TestCluster, free_port, unique_name, wait_for};
use work_api::AppliedManifestWork;

/// One test's world: a source, a spoke namespace, and the agent of one cluster.
struct GrpcEnv {
    source: GrpcSource,
    spoke: TestCluster,
    ns: String,
    cluster: String,
    dir: PathBuf,
    config: PathBuf,
    port: u16,
    agent: Option<AgentProcess>,
}

impl GrpcEnv {
    /// A source with heartbeats every 500 ms and an agent whose config is `extra` after `url`.
    async fn start(prefix: &str, extra: &str) -> Self {
        let source = GrpcSource::start(GrpcSourceOptions {
            heartbeat_interval: Duration::from_millis(500),
            ..Default::default()
        })
        .await
        .expect("the test source serves");
        let spoke = TestCluster::spoke().await;
        let ns = spoke.namespace(prefix).await;
        let cluster = unique_name(prefix);
        let dir = test_support::run_dir().join(format!("grpc-{cluster}"));
        std::fs::create_dir_all(&dir).expect("test dir");
        let config = dir.join("grpcconfig");
        std::fs::write(&config, format!("url: {}\n{extra}", source.url())).expect("agent config");
        let mut env = Self {
            source,
            spoke,
            ns,
            cluster,
            dir,
            config,
            port: free_port(),
            agent: None,
        };
        env.start_agent();
        env
    }

    /// Starts the agent with the klusterlet's command line for the gRPC driver (plus loopback
    /// addresses for a test).
    fn start_agent(&mut self) {
        let spoke = std::env::var(test_support::SPOKE_KUBECONFIG_ENV).expect("spoke kubeconfig");
        self.agent = Some(AgentProcess::start([
            "agent".to_string(),
            format!("--spoke-cluster-name={}", self.cluster),
            "--workload-source-driver=grpc".into(),
            format!("--workload-source-config={}", self.config.display()),
            format!("--cloudevents-client-id={}-work-agent", self.cluster),
            "--cloudevents-client-codecs=manifestbundle".into(),
            format!("--spoke-kubeconfig={spoke}"),
            "--status-sync-interval=3s".into(),
            "--disable-leader-election".into(),
            format!("--http-address=127.0.0.1:{}", self.port),
            "--health-address=off".into(),
            "--log-level=debug,kube=info,hyper=info,hyper_util=info,rustls=info,tower=info,h2=info,tonic=info".into(),
        ]));
    }

    fn stop_agent(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            agent.stop();
        }
    }

    fn log(&self) -> String {
        self.agent
            .as_ref()
            .map(AgentProcess::log)
            .unwrap_or_default()
    }

    fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.spoke.client.clone(), &self.ns)
    }

    async fn wait_source(&self, what: &str, cond: impl Fn(&GrpcSource) -> bool) {
        if let Err(e) = self.source.wait_until(cond, TIMEOUT).await {
            panic!("{what}: {e}\nagent log:\n{}", tail(&self.log()));
        }
    }

    async fn wait_log(&self, what: &str, needle: &str) {
        wait_for(what, TIMEOUT, || async {
            self.log().contains(needle).then_some(())
        })
        .await;
    }

    async fn wait_applied(&self, id: &str) {
        self.wait_source(&format!("{id} Applied and Available at the source"), |s| {
            s.condition_status(id, "Applied").as_deref() == Some("True")
                && s.condition_status(id, "Available").as_deref() == Some("True")
        })
        .await;
    }

    async fn wait_data(&self, name: &str, key: &str, value: &str) {
        wait_configmap_data(&self.configmaps(), name, key, value).await;
    }

    async fn wait_gone(&self, name: &str) {
        wait_configmap_gone(&self.configmaps(), name).await;
    }

    async fn metrics(&self) -> String {
        http_get(self.port, "/metrics").await.unwrap_or_default()
    }

    fn amw_name(&self, id: &str) -> String {
        format!("{}-{id}", work_api::hub_hash(&self.source.url()))
    }
}

impl Drop for GrpcEnv {
    fn drop(&mut self) {
        self.stop_agent();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn bundle(ns: &str, name: &str, data: Value) -> Value {
    json!({"manifests": [configmap(ns, name, data)]})
}

fn metric(metrics: &str, name: &str) -> Option<u64> {
    metrics
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn create_update_delete_round_trip() {
    let env = GrpcEnv::start("grpc-crud", "").await;
    env.wait_source("the agent subscribes and asks for a spec resync", |s| {
        s.subscribers(&env.cluster) == 1 && s.counters().spec_resync_requests >= 1
    })
    .await;
    wait_for("/readyz 200 once subscribed", TIMEOUT, || async {
        http_get(env.port, "/readyz").await
    })
    .await;

    let id = env
        .source
        .create(&env.cluster, bundle(&env.ns, "crud", json!({"v": "1"})))
        .expect("create");
    env.wait_data("crud", "v", "1").await;
    env.wait_applied(&id).await;
    // The AppliedManifestWork is named as upstream's agent names it: sha256(url)-<name>.
    let applied: Api<AppliedManifestWork> = Api::all(env.spoke.client.clone());
    let amw = applied
        .get(&env.amw_name(&id))
        .await
        .expect("AppliedManifestWork");
    // No --agent-id and no agent-name file: generated from hub hash and cluster, not the hub
    // hash every agent of this broker shares.
    assert_eq!(
        amw.spec.agent_id,
        agent::config::generated_agent_id(&work_api::hub_hash(&env.source.url()), &env.cluster)
    );

    env.source
        .update(&id, bundle(&env.ns, "crud", json!({"v": "2"})))
        .expect("update");
    env.wait_data("crud", "v", "2").await;
    env.wait_source("status of version 2", |s| {
        s.resource(&id)
            .is_some_and(|r| r.version == 2 && r.statuses_accepted >= 2)
    })
    .await;

    env.source.delete(&id).expect("delete");
    env.wait_source("Deleted reported, the source forgets the work", |s| {
        s.hard_deleted(&id)
    })
    .await;
    env.wait_gone("crud").await;
    assert!(
        applied
            .get_opt(&env.amw_name(&id))
            .await
            .expect("get")
            .is_none(),
        "the AppliedManifestWork is gone"
    );
    let c = env.source.counters();
    assert_eq!(
        (c.stale, c.rejected_sequence, c.rejected_source, c.malformed),
        (0, 0, 0, 0),
        "every status the agent sent met the source's checks: {c:?}"
    );
    let metrics = env.metrics().await;
    assert!(metrics.contains("cloudevents_received_total{"), "{metrics}");
    assert!(metrics.contains("cloudevents_sent_total{"), "{metrics}");
    assert!(metrics.contains("cloudevents_subscribed 1"), "{metrics}");
    assert!(
        !metrics.contains("heartbeat"),
        "heartbeats are not counted as events: {metrics}"
    );
}

#[tokio::test]
async fn a_server_restart_loses_nothing() {
    let mut env = GrpcEnv::start("grpc-server-restart", "").await;
    let a = env
        .source
        .create(&env.cluster, bundle(&env.ns, "a", json!({"v": "1"})))
        .expect("create a");
    let b = env
        .source
        .create(&env.cluster, bundle(&env.ns, "b", json!({"v": "1"})))
        .expect("create b");
    env.wait_applied(&a).await;
    env.wait_applied(&b).await;

    env.source.stop().await;
    env.wait_log(
        "the agent notices the server is gone",
        "gRPC connection lost; reconnecting",
    )
    .await;
    // While the server is away: a spoke change the agent must report, and the source updates
    // a, deletes b and creates c (its store survives, its events reach nobody).
    let cms = env.configmaps();
    cms.delete("a", &Default::default())
        .await
        .expect("delete a's ConfigMap");
    env.source
        .update(&a, bundle(&env.ns, "a", json!({"v": "2"})))
        .expect("update a");
    env.source.delete(&b).expect("delete b");
    let c = env
        .source
        .create(&env.cluster, bundle(&env.ns, "c", json!({"v": "1"})))
        .expect("create c");
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.source
        .restart()
        .await
        .expect("the server comes back on its port");

    env.wait_data("a", "v", "2").await;
    env.wait_gone("b").await;
    env.wait_data("c", "v", "1").await;
    env.wait_applied(&c).await;
    env.wait_source("b is Deleted at the source", |s| s.hard_deleted(&b))
        .await;
    env.wait_source("a's status is of version 2", |s| {
        s.resource(&a).is_some_and(|r| r.version == 2)
            && s.status_verdicts()
                .iter()
                .any(|v| v.resource_id == a && v.outcome == StatusOutcome::Accepted)
            && s.condition_status(&a, "Applied").as_deref() == Some("True")
    })
    .await;
    assert!(env.source.counters().spec_resync_requests >= 2);
    let metrics = env.metrics().await;
    assert!(
        metric(&metrics, "cloudevents_client_reconnected_total").is_some_and(|n| n >= 1),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_restarted_agent_converges_by_resync() {
    let mut env = GrpcEnv::start("grpc-agent-restart", "").await;
    let a = env
        .source
        .create(&env.cluster, bundle(&env.ns, "a", json!({"v": "1"})))
        .expect("create a");
    let b = env
        .source
        .create(&env.cluster, bundle(&env.ns, "b", json!({"v": "1"})))
        .expect("create b");
    env.wait_applied(&a).await;
    env.wait_applied(&b).await;
    let applied: Api<AppliedManifestWork> = Api::all(env.spoke.client.clone());
    let uid_before = applied
        .get(&env.amw_name(&a))
        .await
        .expect("amw a")
        .metadata
        .uid;

    env.stop_agent();
    env.source
        .update(&a, bundle(&env.ns, "a", json!({"v": "2"})))
        .expect("update a");
    env.source.delete(&b).expect("delete b");
    let c = env
        .source
        .create(&env.cluster, bundle(&env.ns, "c", json!({"v": "1"})))
        .expect("create c");
    env.start_agent();

    env.wait_data("a", "v", "2").await;
    env.wait_gone("b").await;
    env.wait_data("c", "v", "1").await;
    env.wait_applied(&c).await;
    env.wait_source("b is Deleted at the source", |s| s.hard_deleted(&b))
        .await;
    assert_eq!(
        applied
            .get(&env.amw_name(&a))
            .await
            .expect("amw a")
            .metadata
            .uid,
        uid_before,
        "the AppliedManifestWork of a survived the restart, not re-created"
    );
    assert_eq!(env.source.counters().rejected_sequence, 0);
}

#[tokio::test]
async fn no_heartbeat_within_the_healthiness_timeout_means_reconnect() {
    let env = GrpcEnv::start("grpc-heartbeat", "serverHealthinessTimeout: 3s\n").await;
    env.wait_source("subscribed", |s| s.counters().spec_resync_requests >= 1)
        .await;
    env.wait_source("heartbeats flow", |s| s.heartbeats_sent() >= 4)
        .await;
    assert_eq!(
        env.source.counters().subscriptions,
        1,
        "heartbeats every 500 ms keep a 3 s timeout quiet"
    );
    env.source.set_heartbeats(false);
    env.wait_source("the agent subscribes again", |s| {
        s.counters().subscriptions >= 2 && s.counters().spec_resync_requests >= 2
    })
    .await;
    assert!(
        env.log().contains("serverHealthinessTimeout"),
        "the reason is logged:\n{}",
        tail(&env.log())
    );
    env.source.set_heartbeats(true);
    let id = env
        .source
        .create(&env.cluster, bundle(&env.ns, "after", json!({"v": "1"})))
        .expect("create");
    env.wait_applied(&id).await;
}

#[tokio::test]
async fn a_one_mebibyte_bundle_and_a_burst_of_a_hundred() {
    let env = GrpcEnv::start("grpc-big", "").await;
    let chunk = "x".repeat(250 * 1024);
    let manifests: Vec<Value> = (0..4)
        .map(|i| configmap(&env.ns, &format!("big-{i}"), json!({"blob": chunk})))
        .collect();
    let big = env
        .source
        .create(&env.cluster, json!({"manifests": manifests}))
        .expect("big bundle");
    env.wait_applied(&big).await;
    env.wait_data("big-3", "blob", &chunk).await;

    let ids: Vec<String> = (0..100)
        .map(|i| {
            env.source
                .create(
                    &env.cluster,
                    bundle(&env.ns, &format!("burst-{i}"), json!({"i": i.to_string()})),
                )
                .expect("burst")
        })
        .collect();
    env.wait_source("all 100 bundles Applied at the source", |s| {
        ids.iter()
            .all(|id| s.condition_status(id, "Applied").as_deref() == Some("True"))
    })
    .await;
    let c = env.source.counters();
    assert_eq!(
        (c.stale, c.rejected_sequence, c.malformed),
        (0, 0, 0),
        "{c:?}"
    );
}

#[tokio::test]
async fn a_work_deleted_by_its_ttl_and_then_by_its_source_is_reported_deleted_twice() {
    let env = GrpcEnv::start("grpc-ttl-then-source", "").await;
    // Complete at once (a CEL rule on a ConfigMap) with a TTL of zero: the agent deletes the work
    // itself and reports Deleted; OCM's hub then deletes it too (its own TTL collection) and
    // sends the deletion, which the agent must clean up and answer again (the hub waits for that
    // Deleted to release its finalizer).
    let ns = env.ns.clone();
    let id = env
        .source
        .create(
            &env.cluster,
            json!({
                "manifests": [configmap(&ns, "ttl", json!({"v": "1"}))],
                "manifestConfigs": [{
                    "resourceIdentifier": {"group": "", "resource": "configmaps", "name": "ttl", "namespace": ns},
                    "conditionRules": [{"condition": "Complete", "type": "CEL", "celExpressions": ["object.metadata.name == 'ttl'"]}]
                }],
                "deleteOption": {"propagationPolicy": "Foreground", "ttlSecondsAfterFinished": 0}
            }),
        )
        .expect("create");
    let snapshot = env.source.resource(&id).expect("stored");
    env.wait_source("Deleted after the TTL", |s| s.hard_deleted(&id))
        .await;
    let mut deleting = snapshot;
    deleting.version += 1;
    deleting.deleted_at = Some(
        cloudevents::event::parse_time("deletiontimestamp", "2026-01-01T00:00:00Z").expect("time"),
    );
    let ev = test_support::mqtt_source::spec_event(
        "maestro",
        cloudevents::EventType::SpecDelete,
        &deleting,
    );
    env.source
        .send_event(&env.cluster, ev)
        .expect("the source's deletion");
    let deleted = |s: &GrpcSource| {
        s.events()
            .iter()
            .filter(|e| {
                e.ext_string(cloudevents::types::EXT_RESOURCE_ID).as_deref() == Some(id.as_str())
                    && e.data
                        .as_deref()
                        .is_some_and(|d| String::from_utf8_lossy(d).contains(r#""type":"Deleted""#))
            })
            .count()
    };
    env.wait_source("a second Deleted for the source's deletion", |s| {
        deleted(s) >= 2
    })
    .await;
}

#[tokio::test]
async fn malformed_and_other_clusters_events_are_refused_and_counted() {
    let mut env = GrpcEnv::start("grpc-hostile", "").await;
    env.wait_source("subscribed", |s| s.counters().spec_resync_requests >= 1)
        .await;
    // No spec version; a resource version out of the bundle's JSON; another cluster's work.
    env.source.send_raw(
        &env.cluster,
        cloudevents::grpc::proto::CloudEvent {
            id: "x".into(),
            source: "maestro".into(),
            r#type: cloudevents::EventType::SpecCreate.as_type(),
            ..Default::default()
        },
    );
    let mine = env
        .source
        .create(&env.cluster, bundle(&env.ns, "mine", json!({"v": "1"})))
        .expect("create");
    let mut other = env.source.resource(&mine).expect("stored");
    other.consumer = "someone-else".into();
    other.id = "00000000-0000-0000-0000-000000000042".into();
    other.bundle = bundle(&env.ns, "not-mine", json!({"v": "1"}));
    let ev = test_support::mqtt_source::spec_event(
        "maestro",
        cloudevents::EventType::SpecCreate,
        &other,
    );
    env.source
        .send_event(&env.cluster, ev)
        .expect("other cluster");

    env.wait_data("mine", "v", "1").await;
    wait_for("both refused events counted", TIMEOUT, || async {
        metric(&env.metrics().await, "cloudevents_rejected_total ").filter(|n| *n >= 2)
    })
    .await;
    assert!(
        env.configmaps()
            .get_opt("not-mine")
            .await
            .expect("get")
            .is_none(),
        "another cluster's work is not applied"
    );
    let agent = env.agent.as_mut().expect("agent");
    assert!(agent.is_running(), "the agent survives bad events");
}

#[test]
fn a_config_without_a_url_or_client_id_is_a_one_line_error() {
    let dir = std::env::temp_dir().join(unique_name("grpc-bad-config"));
    std::fs::create_dir_all(&dir).expect("dir");
    let bad = dir.join("grpcconfig");
    std::fs::write(&bad, "caFile: /nonexistent\n").expect("write");
    let bin = std::env::var(test_support::AGENT_BIN_ENV).expect("WORK_AGENT_BIN");
    for (args, expected) in [
        (
            vec![
                "--cloudevents-client-id=c1-work-agent".to_string(),
                format!("--workload-source-config={}", bad.display()),
            ],
            "url",
        ),
        (
            vec![format!("--workload-source-config={}", bad.display())],
            "--cloudevents-client-id",
        ),
    ] {
        let out = std::process::Command::new(&bin)
            .args([
                "agent",
                "--spoke-cluster-name=c1",
                "--workload-source-driver=grpc",
            ])
            .args(&args)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// As upstream's agent orders a deletion: the source takes the work's `Deleting` before the
/// cleanup starts. While the source refuses that status, the AppliedManifestWork is not deleted
/// and the resources stay; once it takes it, the cleanup runs and `Deleted` follows.
#[tokio::test]
async fn the_cleanup_starts_once_the_source_took_deleting() {
    let env = GrpcEnv::start("grpc-deleting", "").await;
    let id = env
        .source
        .create(&env.cluster, bundle(&env.ns, "held", json!({"v": "1"})))
        .expect("create");
    env.wait_data("held", "v", "1").await;
    env.wait_applied(&id).await;
    let refused_before = env.source.publishes_refused();
    // Four refusals: about 1.5 s of retries (100 ms, doubling).
    env.source.refuse_resource(&id, 4);
    env.source.delete(&id).expect("delete");
    // The agent had its chance: it heard the deletion and sent `Deleting` three times already.
    env.wait_source("Deleting refused three times", |s| {
        s.publishes_refused() >= refused_before + 3
    })
    .await;
    let applied: Api<AppliedManifestWork> = Api::all(env.spoke.client.clone());
    let amw = applied
        .get(&env.amw_name(&id))
        .await
        .expect("the AppliedManifestWork is there");
    assert!(
        amw.metadata.deletion_timestamp.is_none(),
        "the cleanup started before the source took Deleting\n{}",
        tail(&env.log())
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.spoke.client.clone(), &env.ns);
    assert!(cms.get_opt("held").await.expect("read").is_some());
    env.wait_source("Deleted reported once Deleting was taken", |s| {
        s.hard_deleted(&id)
    })
    .await;
    env.wait_gone("held").await;
}
