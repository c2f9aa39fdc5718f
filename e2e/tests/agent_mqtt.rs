//! The agent behind a message broker: the real `work-agent` binary started with Maestro's agent
//! command line (`--workload-source-driver=mqtt`), a real mosquitto per test, a test source that
//! speaks the source side as Maestro does (`test_support::mqtt_source`), and a real spoke.

mod agent_common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agent_common::{
    TIMEOUT, configmap, http_get, job, job_complete_config, metrics_text, tail,
    wait_configmap_data, wait_configmap_gone,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use test_support::mosquitto::Broker;
use test_support::mqtt_source::MaestroSource;
use test_support::{AgentProcess, TestCluster, free_port, unique_name, wait_for};
use work_api::AppliedManifestWork;

/// One test's world: a broker, a source, a spoke namespace, and the agent of one consumer.
struct MqttEnv {
    broker: Broker,
    source: MaestroSource,
    spoke: TestCluster,
    ns: String,
    consumer: String,
    config: PathBuf,
    port: u16,
    agent: Option<AgentProcess>,
}

impl MqttEnv {
    async fn start(prefix: &str) -> Self {
        let broker = Broker::start(prefix).expect("a private mosquitto");
        let source = MaestroSource::connect(&broker.address(), "maestro")
            .await
            .expect("the test source subscribes");
        let spoke = TestCluster::spoke().await;
        let ns = spoke.namespace(prefix).await;
        let consumer = unique_name(prefix);
        let config = broker
            .write_agent_config(&consumer, "agent-config.yaml")
            .expect("agent config");
        let mut env = Self {
            broker,
            source,
            spoke,
            ns,
            consumer,
            config,
            port: free_port(),
            agent: None,
        };
        env.start_agent();
        env
    }

    /// Starts the agent as Maestro's chart runs it (plus loopback addresses for a test).
    fn start_agent(&mut self) {
        let spoke = std::env::var(test_support::SPOKE_KUBECONFIG_ENV).expect("spoke kubeconfig");
        self.agent = Some(AgentProcess::start([
            "agent".to_string(),
            format!("--consumer-name={}", self.consumer),
            "--workload-source-driver=mqtt".into(),
            format!("--workload-source-config={}", self.config.display()),
            format!("--cloudevents-client-id={}-work-agent", self.consumer),
            format!("--kubeconfig={spoke}"),
            "-v=2".into(),
            format!("--http-address=127.0.0.1:{}", self.port),
            "--health-address=off".into(),
            "--leader-elect=false".into(),
            "--log-level=debug,kube=info,hyper=info,hyper_util=info,rustls=info,tower=info,rumqttc=info".into(),
        ]));
    }

    fn kill_agent(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            agent.kill();
        }
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

    async fn wait_source(&self, what: &str, cond: impl Fn(&MaestroSource) -> bool) {
        if let Err(e) = self.source.wait_until(cond, TIMEOUT).await {
            panic!("{what}: {e}\nagent log:\n{}", tail(&self.log()));
        }
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
}

fn bundle(ns: &str, name: &str, data: Value) -> Value {
    json!({"manifests": [configmap(ns, name, data)]})
}

fn hub_hash(broker: &str) -> String {
    work_api::hub_hash(broker)
}

#[tokio::test]
async fn create_update_delete_round_trip_and_a_stale_generation() {
    let env = MqttEnv::start("mqtt-crud").await;
    env.wait_source("the agent asks for a spec resync once subscribed", |s| {
        s.counters().spec_resync_requests >= 1
    })
    .await;
    wait_for("/readyz 200 once subscribed", TIMEOUT, || async {
        http_get(env.port, "/readyz").await
    })
    .await;

    let id = env
        .source
        .create(&env.consumer, bundle(&env.ns, "crud", json!({"v": "1"})))
        .expect("create");
    env.wait_data("crud", "v", "1").await;
    env.wait_applied(&id).await;
    // The AppliedManifestWork is named as upstream's agent names it: sha256(brokerHost)-<name>.
    let applied: Api<AppliedManifestWork> = Api::all(env.spoke.client.clone());
    let amw_name = format!("{}-{id}", hub_hash(&env.broker.address()));
    let amw = applied.get(&amw_name).await.expect("AppliedManifestWork");
    // No --agent-id and no agent-name file: generated from hub hash and consumer, not the hub
    // hash every agent of this broker shares.
    assert_eq!(
        amw.spec.agent_id,
        agent::config::generated_agent_id(&hub_hash(&env.broker.address()), &env.consumer)
    );

    env.source
        .update(&id, bundle(&env.ns, "crud", json!({"v": "2"})))
        .expect("update");
    env.wait_data("crud", "v", "2").await;
    env.wait_source("status of version 2", |s| {
        s.resource(&id)
            .is_some_and(|r| r.version == 2 && r.statuses_accepted >= 2)
            && s.condition_status(&id, "Applied").as_deref() == Some("True")
    })
    .await;

    // A spec event of an older version is ignored: once a newer one is applied, the old one
    // never shows on the spoke.
    let mut stale = env.source.resource(&id).expect("stored");
    stale.version = 1;
    stale.bundle = bundle(&env.ns, "crud", json!({"v": "stale"}));
    let ev = test_support::mqtt_source::spec_event(
        "maestro",
        cloudevents::EventType::SpecUpdate,
        &stale,
    );
    env.source
        .publish_event(&env.consumer, ev)
        .expect("stale event");
    wait_for("the agent saw the stale event", TIMEOUT, || async {
        env.log().contains("stale generation").then_some(())
    })
    .await;
    env.source
        .update(&id, bundle(&env.ns, "crud", json!({"v": "3"})))
        .expect("update");
    env.wait_data("crud", "v", "3").await;

    let started = Instant::now();
    env.source.delete(&id).expect("delete");
    env.wait_source("Deleted reported, the source forgets the work", |s| {
        s.hard_deleted(&id)
    })
    .await;
    let round_trip = started.elapsed();
    env.wait_gone("crud").await;
    assert!(
        applied.get_opt(&amw_name).await.expect("get").is_none(),
        "the AppliedManifestWork is gone"
    );
    eprintln!("delete round trip (source delete -> Deleted status): {round_trip:?}");

    let c = env.source.counters();
    assert_eq!(
        (
            c.stale,
            c.rejected_sequence,
            c.rejected_source,
            c.rejected_consumer
        ),
        (0, 0, 0, 0),
        "every status the agent sent met Maestro's checks: {c:?}"
    );
    let metrics = env.metrics().await;
    assert!(metrics.contains("cloudevents_received_total{"), "{metrics}");
    assert!(metrics.contains("cloudevents_sent_total{"), "{metrics}");
    assert!(metrics.contains("cloudevents_subscribed 1"), "{metrics}");
}

#[tokio::test]
async fn a_restarted_agent_converges_on_what_changed_while_it_was_away() {
    let mut env = MqttEnv::start("mqtt-restart").await;
    let a = env
        .source
        .create(&env.consumer, bundle(&env.ns, "a", json!({"v": "1"})))
        .expect("create a");
    let b = env
        .source
        .create(&env.consumer, bundle(&env.ns, "b", json!({"v": "1"})))
        .expect("create b");
    env.wait_applied(&a).await;
    env.wait_applied(&b).await;
    let applied: Api<AppliedManifestWork> = Api::all(env.spoke.client.clone());
    let amw_a = format!("{}-{a}", hub_hash(&env.broker.address()));
    let uid_before = applied.get(&amw_a).await.expect("amw a").metadata.uid;

    env.stop_agent();
    env.source
        .update(&a, bundle(&env.ns, "a", json!({"v": "2"})))
        .expect("update a");
    env.source.delete(&b).expect("delete b");
    let c = env
        .source
        .create(&env.consumer, bundle(&env.ns, "c", json!({"v": "1"})))
        .expect("create c");
    env.start_agent();

    env.wait_data("a", "v", "2").await;
    env.wait_gone("b").await;
    env.wait_data("c", "v", "1").await;
    env.wait_applied(&c).await;
    env.wait_source("b is Deleted at the source", |s| s.hard_deleted(&b))
        .await;
    env.wait_source("a's status is of version 2", |s| {
        s.resource(&a).is_some_and(|r| r.version == 2)
            && s.status_verdicts().iter().any(|v| {
                v.resource_id == a
                    && matches!(
                        v.outcome,
                        test_support::mqtt_source::StatusOutcome::Accepted
                    )
            })
    })
    .await;
    assert_eq!(
        applied.get(&amw_a).await.expect("amw a").metadata.uid,
        uid_before,
        "the AppliedManifestWork of a survived the restart, not re-created"
    );
    let counters = env.source.counters();
    assert_eq!(
        counters.rejected_sequence, 0,
        "sequence ids grow across restarts: {counters:?}"
    );
}

#[tokio::test]
async fn status_resync_and_a_broker_restart_lose_nothing() {
    let mut env = MqttEnv::start("mqtt-resync").await;
    let ns = env.ns.clone();
    let id = env
        .source
        .create(
            &env.consumer,
            json!({
                "manifests": [configmap(&ns, "fb", json!({"k": "v"}))],
                "manifestConfigs": [{
                    "resourceIdentifier": {"group": "", "resource": "configmaps", "name": "fb", "namespace": ns},
                    "updateStrategy": {"type": "ServerSideApply"},
                    "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [{"name": "note", "path": ".metadata.annotations.note"}]}]
                }]
            }),
        )
        .expect("create");
    env.wait_applied(&id).await;

    // A status resync listing a hash the agent's status does not have is answered...
    let answered = |s: &MaestroSource| {
        s.counters()
            .status_events_by_type
            .get(&cloudevents::EventType::StatusResyncResponse)
            .copied()
            .unwrap_or(0)
    };
    env.source
        .request_status_resync(&env.consumer, vec![(id.clone(), "not-the-hash".into())])
        .expect("resync");
    env.wait_source("the status resync is answered", |s| answered(s) == 1)
        .await;
    // ... one listing the current hash is not (checked after a later request that is answered).
    let hash = env.source.status_hash(&id).expect("hash");
    env.source
        .request_status_resync(&env.consumer, vec![(id.clone(), hash)])
        .expect("resync");
    env.source
        .request_status_resync(&env.consumer, vec![])
        .expect("resync all");
    env.wait_source("the resync of all is answered", |s| answered(s) == 2)
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(answered(&env.source), 2, "a current hash is not answered");

    // The broker goes away; a status produced meanwhile is sent once it is back.
    env.broker.stop();
    let cms = env.configmaps();
    cms.patch(
        "fb",
        &PatchParams::apply("someone-else").force(),
        &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "fb", "annotations": {"note": "while-away"}}
        })),
    )
    .await
    .expect("annotate");
    wait_for(
        "the agent reconciled the change while the broker was away",
        TIMEOUT,
        || async {
            env.metrics()
                .await
                .lines()
                .any(|l| l.starts_with("cloudevents_publish_queue_depth ") && !l.ends_with(" 0"))
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.broker.restart().expect("broker back");
    env.wait_source("the feedback produced while away reaches the source", |s| {
        s.status(&id)
            .is_some_and(|st| st.to_string().contains("while-away"))
    })
    .await;
    // And new work still flows.
    let after = env
        .source
        .create(&env.consumer, bundle(&env.ns, "after", json!({"v": "1"})))
        .expect("create after restart");
    env.wait_applied(&after).await;
    assert!(
        env.metrics()
            .await
            .contains("cloudevents_client_reconnected_total")
    );
}

#[tokio::test]
async fn a_one_mebibyte_bundle_and_a_burst_of_two_hundred() {
    let env = MqttEnv::start("mqtt-big").await;
    let chunk = "x".repeat(250 * 1024);
    let manifests: Vec<Value> = (0..4)
        .map(|i| configmap(&env.ns, &format!("big-{i}"), json!({"blob": chunk})))
        .collect();
    let big = env
        .source
        .create(&env.consumer, json!({"manifests": manifests}))
        .expect("big bundle");
    env.wait_applied(&big).await;
    env.wait_data("big-3", "blob", &chunk).await;

    let ids: Vec<String> = (0..200)
        .map(|i| {
            env.source
                .create(
                    &env.consumer,
                    bundle(&env.ns, &format!("burst-{i}"), json!({"i": i.to_string()})),
                )
                .expect("burst")
        })
        .collect();
    env.wait_source("all 200 bundles Applied at the source", |s| {
        ids.iter()
            .all(|id| s.condition_status(id, "Applied").as_deref() == Some("True"))
    })
    .await;
    env.wait_data("burst-199", "i", "199").await;
    let c = env.source.counters();
    assert_eq!((c.stale, c.rejected_sequence), (0, 0), "{c:?}");
}

#[tokio::test]
async fn a_job_completes_and_its_ttl_deletes_the_work() {
    let env = MqttEnv::start("mqtt-job").await;
    let id = env
        .source
        .create(
            &env.consumer,
            json!({
                "manifests": [job(&env.ns, "once")],
                "manifestConfigs": [job_complete_config(&env.ns, "once")],
                "deleteOption": {"propagationPolicy": "Foreground", "ttlSecondsAfterFinished": 2}
            }),
        )
        .expect("job bundle");
    env.wait_source("Complete=True at the source", |s| {
        s.condition_status(&id, "Complete").as_deref() == Some("True")
    })
    .await;
    env.wait_source("the TTL deletes the work: Deleted at the source", |s| {
        s.hard_deleted(&id)
    })
    .await;
    let jobs: Api<k8s_openapi::api::batch::v1::Job> =
        Api::namespaced(env.spoke.client.clone(), &env.ns);
    wait_for("the Job is gone from the spoke", TIMEOUT, || async {
        jobs.get_opt("once").await.ok()?.is_none().then_some(())
    })
    .await;
    // The record that held the completion goes once the source has taken Deleted.
    let amws: Api<AppliedManifestWork> = Api::all(env.spoke.client.clone());
    let amw_name = format!("{}-{id}", hub_hash(&env.broker.address()));
    wait_for("the AppliedManifestWork is released", TIMEOUT, || async {
        amws.get_opt(&amw_name).await.ok()?.is_none().then_some(())
    })
    .await;
    assert_eq!(
        env.source.counters().deleted_unrequested,
        1,
        "the source did not ask for this deletion: the TTL did"
    );
    assert!(
        env.log().contains("TTL"),
        "the TTL deletion is logged:\n{}",
        tail(&env.log())
    );
}

#[tokio::test]
async fn malformed_and_other_clusters_events_are_refused_and_counted() {
    let mut env = MqttEnv::start("mqtt-hostile").await;
    env.wait_source("subscribed", |s| s.counters().spec_resync_requests >= 1)
        .await;
    // Binary mode with a broken payload, and a spec event for another cluster.
    env.source
        .publish_raw(
            &env.consumer,
            Some("application/json".into()),
            vec![
                ("ce-specversion".into(), "1.0".into()),
                ("ce-id".into(), "x".into()),
                ("ce-source".into(), "maestro".into()),
                (
                    "ce-type".into(),
                    "io.open-cluster-management.works.v1alpha1.manifestbundles.spec.create_request"
                        .into(),
                ),
                ("ce-resourceid".into(), "bad".into()),
                ("ce-resourceversion".into(), "1".into()),
                ("ce-clustername".into(), env.consumer.clone()),
            ],
            b"{not json".to_vec(),
        )
        .expect("malformed");
    let mut other = test_support::mqtt_source::StoredResource {
        consumer: "someone-else".into(),
        ..env
            .source
            .resource(
                &env.source
                    .create(&env.consumer, bundle(&env.ns, "mine", json!({"v": "1"})))
                    .expect("create"),
            )
            .expect("stored")
    };
    other.id = "00000000-0000-0000-0000-000000000042".into();
    other.bundle = bundle(&env.ns, "not-mine", json!({"v": "1"}));
    let ev = test_support::mqtt_source::spec_event(
        "maestro",
        cloudevents::EventType::SpecCreate,
        &other,
    );
    env.source
        .publish_event(&env.consumer, ev)
        .expect("other cluster");

    env.wait_data("mine", "v", "1").await;
    wait_for("both refused events counted", TIMEOUT, || async {
        env.metrics()
            .await
            .lines()
            .find(|l| l.starts_with("cloudevents_rejected_total "))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .filter(|n| *n >= 2)
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

/// The samples of metric `name` (no suffix added) whose labels include every pair of `labels`,
/// whatever their order; their sum (0 when none).
fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter_map(|line| line.strip_prefix(name))
        .filter_map(|rest| {
            let (set, value) = match rest.strip_prefix('{') {
                Some(rest) => rest.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            let pairs: Vec<&str> = set.split(',').collect();
            labels
                .iter()
                .all(|(k, v)| pairs.contains(&format!("{k}=\"{v}\"").as_str()))
                .then(|| value.trim().parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// Maestro's agent dashboards, SLOs and runbooks query client-go's and sdk-go's metric names
/// (`docs/metrics.md` maps them); behind MQTT the agent serves each, with the labels those
/// queries select, and they move while a bundle is applied, updated and deleted.
#[tokio::test]
async fn maestros_dashboard_metrics_move_while_a_bundle_is_applied() {
    let env = MqttEnv::start("mqtt-maestro-metrics").await;
    let id = env
        .source
        .create(&env.consumer, bundle(&env.ns, "dash", json!({"v": "1"})))
        .expect("create");
    // Scraped while the bundle is on its way: every name is there once the agent has sent its
    // first requests (a family without samples is not written, as client-go's registry does not).
    let names = [
        "# TYPE workqueue_depth gauge",
        "# TYPE workqueue_adds counter",
        "# TYPE workqueue_retries counter",
        "# TYPE workqueue_queue_duration_seconds histogram",
        "# TYPE workqueue_work_duration_seconds histogram",
        "# TYPE rest_client_requests counter",
        "# TYPE rest_client_request_duration_seconds histogram",
        "# TYPE manifestworks_processed counter",
        "# TYPE cloudevents_sent counter",
        "# TYPE cloudevents_received counter",
    ];
    let port = env.port;
    wait_for(
        "every dashboard metric name",
        Duration::from_secs(30),
        || async move {
            let text = metrics_text(port).await;
            match names.iter().find(|name| !text.contains(*name)) {
                None => Ok(()),
                Some(name) => Err(format!("{name} missing:\n{text}")),
            }
        },
    )
    .await;
    env.wait_data("dash", "v", "1").await;
    env.wait_applied(&id).await;
    env.source
        .update(&id, bundle(&env.ns, "dash", json!({"v": "2"})))
        .expect("update");
    env.wait_data("dash", "v", "2").await;
    env.source.delete(&id).expect("delete");
    env.wait_source("Deleted reported", |s| s.hard_deleted(&id))
        .await;
    env.wait_gone("dash").await;

    let text = env.metrics().await;
    let q = [("name", "ManifestWorkAgent")];
    // The dashboard: sum by(name) (rate(workqueue_adds_total{name="ManifestWorkAgent"}[5m])),
    // max by(name) (workqueue_depth{name="ManifestWorkAgent"}).
    assert!(
        metric_sum(&text, "workqueue_adds_total", &q) >= 3.0,
        "{text}"
    );
    assert!(
        text.contains(r#"workqueue_depth{name="ManifestWorkAgent"} "#),
        "{text}"
    );
    // The SLOs: the share of queue waits and reconciles under le="1.0" of all (+Inf).
    for histogram in [
        "workqueue_queue_duration_seconds_bucket",
        "workqueue_work_duration_seconds_bucket",
    ] {
        let all = metric_sum(&text, histogram, &[("le", "+Inf"), q[0]]);
        let fast = metric_sum(&text, histogram, &[("le", "1.0"), q[0]]);
        assert!(
            all >= 3.0 && fast >= 1.0,
            "{histogram}: {fast}/{all}\n{text}"
        );
    }
    assert!(
        text.contains(r#"workqueue_retries_total{name="ManifestWorkAgent"} "#),
        "{text}"
    );
    // sdk-go's store answers: the informer's list and watch, status patches, no failure.
    for action in ["list", "watch", "patch"] {
        let done = metric_sum(
            &text,
            "manifestworks_processed_total",
            &[("action", action), ("code", "Success")],
        );
        assert!(done >= 1.0, "{action}: {text}");
    }
    // client-go's request metrics for the spoke: the ConfigMap created (POST 201) and deleted,
    // by host as the SLO and runbooks break them down.
    let host = env
        .spoke
        .server_url
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string();
    let created = metric_sum(
        &text,
        "rest_client_requests_total",
        &[("code", "201"), ("host", &host), ("method", "POST")],
    );
    assert!(created >= 1.0, "POST 201 on {host}: {text}");
    let ok = metric_sum(&text, "rest_client_requests_total", &[("host", &host)]);
    assert!(ok >= created, "{text}");
    let fast = metric_sum(
        &text,
        "rest_client_request_duration_seconds_bucket",
        &[("le", "0.5"), ("host", &host), ("verb", "POST")],
    );
    assert!(fast >= 1.0, "{text}");
    // sdk-go's event counters, which the dashboard sums per instance. (The bundle itself may
    // come as a create or in the answer to the agent's first resync request, whichever is first.)
    for (counter, subresource, action) in [
        ("cloudevents_received_total", "spec", "update_request"),
        ("cloudevents_received_total", "spec", "delete_request"),
        ("cloudevents_sent_total", "status", "update_request"),
    ] {
        let events = metric_sum(
            &text,
            counter,
            &[("subresource", subresource), ("action", action)],
        );
        assert!(events >= 1.0, "{counter} {action}: {text}");
    }
}

/// Maestro's agent chart line (`--consumer-name`) gets `maestro agent`'s raw feedback settings:
/// a JSONPath that selects an object reaches the source as a JsonRaw value, as it does from
/// Maestro's Go agent (upstream's defaults would drop it and report StatusFeedbackSynced=False).
#[tokio::test]
async fn maestros_command_line_reports_raw_json_feedback_as_maestros_agent_does() {
    let env = MqttEnv::start("mqtt-rawfb").await;
    let mut b = bundle(&env.ns, "rawfb", json!({"k": "v"}));
    b["manifestConfigs"] = json!([{
        "resourceIdentifier": {"group": "", "resource": "configmaps", "name": "rawfb", "namespace": env.ns},
        "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [{"name": "data", "path": ".data"}]}]
    }]);
    let id = env.source.create(&env.consumer, b).expect("create");
    env.wait_source("the raw JSON feedback value at the source", |s| {
        s.resource(&id)
            .and_then(|r| r.status)
            .is_some_and(|status| {
                status["resourceStatus"][0]["statusFeedback"]["values"]
                    .as_array()
                    .is_some_and(|values| {
                        values.iter().any(|v| {
                            v["name"] == "data"
                                && v["fieldValue"]["type"] == "JsonRaw"
                                && v["fieldValue"]["jsonRaw"] == r#"{"k":"v"}"#
                        })
                    })
            })
    })
    .await;
}

/// Behind a broker, spec events carry no status and the agent keeps its works in memory: a
/// restarted agent once applied a completed work's manifests again before finding it Complete,
/// so an edit made after completion reached the spoke (found by `chaos --hub mqtt`). The
/// completion is now kept on the spoke (`work::completion_memory`).
#[tokio::test]
async fn a_restarted_agent_does_not_apply_an_edit_to_a_completed_work() {
    let mut env = MqttEnv::start("mqtt-done").await;
    let bundle = |v: &str| {
        json!({
            "manifests": [job(&env.ns, "once"), configmap(&env.ns, "side", json!({"v": v}))],
            "manifestConfigs": [job_complete_config(&env.ns, "once")],
        })
    };
    let id = env
        .source
        .create(&env.consumer, bundle("1"))
        .expect("create");
    env.wait_source("Complete=True at the source", |s| {
        s.condition_status(&id, "Complete").as_deref() == Some("True")
    })
    .await;
    env.wait_data("side", "v", "1").await;
    env.source.update(&id, bundle("2")).expect("edit");
    env.stop_agent();
    let arrived_before = env.source.status_arrivals().len();
    env.start_agent();
    // The restarted agent had its chance: it reconciled the work (version 2) and reported it.
    env.wait_source("a status of the work from the restarted agent", |s| {
        s.status_arrivals()
            .iter()
            .skip(arrived_before)
            .any(|a| a.resource_id == id)
            && s.condition_status(&id, "Complete").as_deref() == Some("True")
    })
    .await;
    let side = env.configmaps().get("side").await.expect("side ConfigMap");
    assert_eq!(
        side.data.unwrap_or_default().get("v").map(String::as_str),
        Some("1"),
        "an edit made after Complete reached the spoke"
    );
}

/// Found by `chaos --hub grpc` (and in CI): the agent deleted a completed work at its TTL and
/// cleaned it up, the source did not hear `Deleted` (it was away), and the agent was killed.
/// The restarted agent got the work back from the source, which still had it, and must not apply
/// it again: the AppliedManifestWork that holds its completion stays until the source heard the
/// deletion.
#[tokio::test]
async fn a_ttl_deletion_the_source_did_not_hear_is_not_undone_by_a_restart() {
    let mut env = MqttEnv::start("mqtt-unheard").await;
    let id = env
        .source
        .create(
            &env.consumer,
            json!({
                "manifests": [job(&env.ns, "once"), configmap(&env.ns, "side", json!({"v": "1"}))],
                "manifestConfigs": [job_complete_config(&env.ns, "once")],
                "deleteOption": {"propagationPolicy": "Foreground", "ttlSecondsAfterFinished": 5}
            }),
        )
        .expect("job bundle");
    env.wait_source("Complete=True at the source", |s| {
        s.condition_status(&id, "Complete").as_deref() == Some("True")
    })
    .await;
    env.source.go_away();
    wait_for(
        "the TTL deletion cleaned up while the source is away",
        TIMEOUT,
        || async {
            env.log()
                .contains("cleanup done; Deleted sent to the source")
                .then_some(())
        },
    )
    .await;
    env.wait_gone("side").await;
    let amws: Api<AppliedManifestWork> = Api::all(env.spoke.client.clone());
    let amw_name = format!("{}-{id}", hub_hash(&env.broker.address()));
    let kept = amws.get_opt(&amw_name).await.expect("read").expect(
        "the AppliedManifestWork holding the completion stays until the source hears the deletion",
    );
    assert!(
        kept.metadata.deletion_timestamp.is_some(),
        "its deletion has started"
    );
    env.kill_agent();
    assert!(
        !env.source.hard_deleted(&id),
        "the source never heard Deleted"
    );

    // Every ConfigMap the spoke gets in the namespace from now on.
    use futures::StreamExt;
    let created = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = created.clone();
    let watch = tokio::spawn(
        kube::runtime::watcher(env.configmaps(), kube::runtime::watcher::Config::default())
            .for_each(move |event| {
                if let Ok(
                    kube::runtime::watcher::Event::Apply(cm)
                    | kube::runtime::watcher::Event::InitApply(cm),
                ) = event
                {
                    seen.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(cm.metadata.name.unwrap_or_default());
                }
                std::future::ready(())
            }),
    );
    env.source.restart(1000).await.expect("the source is back");
    env.start_agent();
    // The restarted agent had its chance: the source sends it the work (it never heard the
    // deletion), and it is gone from the source only once the new agent sent `Deleted`.
    env.wait_source("the restarted agent deletes the work again", |s| {
        s.hard_deleted(&id)
    })
    .await;
    wait_for(
        "the AppliedManifestWork is released once Deleted was heard",
        TIMEOUT,
        || async { amws.get_opt(&amw_name).await.ok()?.is_none().then_some(()) },
    )
    .await;
    watch.abort();
    let created = created
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    assert!(
        !created.iter().any(|n| n == "side"),
        "the completed work was applied again after the restart: {created:?}\n{}",
        tail(&env.log())
    );
    let jobs: Api<k8s_openapi::api::batch::v1::Job> =
        Api::namespaced(env.spoke.client.clone(), &env.ns);
    assert!(jobs.get_opt("once").await.expect("read").is_none());
}
