//! The cases that hold behind every transport, each written once (`main.rs` runs each on all).

use std::time::Instant;

use cloudevents::EventType;
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use serde_json::{Value, json};
use test_support::broker_source::{BrokerSource, Transport};
use test_support::maestro::{CreateOptions, spec_event};
use test_support::wait_for;
use work_api::AppliedManifestWork;

use crate::agent_common::{
    TIMEOUT, configmap, http_get, job, job_complete_config, metrics_text, tail,
};
use crate::env::{BrokerEnv, bundle, configmap_config, manifest_condition, metric};

pub async fn create_update_delete_round_trip_and_a_stale_generation(t: Transport) {
    let mut env = BrokerEnv::start(t, "crud").await;
    env.wait_source("the agent asks for a spec resync once subscribed", |s| {
        s.counters().spec_resync_requests >= 1
    })
    .await;
    if t == Transport::Grpc {
        let consumer = env.consumer.clone();
        let waited = env
            .grpc()
            .wait_until(|s| s.subscribers(&consumer) == 1, TIMEOUT)
            .await;
        env.expect_source("one subscription of the agent", waited);
    }
    wait_for("/readyz 200 once subscribed", TIMEOUT, || async {
        http_get(env.port, "/readyz").await
    })
    .await;

    let id = env.create(bundle(&env.ns, "crud", json!({"v": "1"})));
    env.wait_data("crud", "v", "1").await;
    env.wait_applied(&id).await;
    let applied: Api<AppliedManifestWork> = Api::all(env.spoke.client.clone());
    let amw = applied
        .get(&env.amw_name(&id))
        .await
        .expect("AppliedManifestWork");
    // No --agent-id and no agent-name file: generated from hub hash and consumer, not the hub
    // hash every agent of this broker shares.
    assert_eq!(
        amw.spec.agent_id,
        agent::config::generated_agent_id(&work_api::hub_hash(&env.hub.address()), &env.consumer)
    );

    env.source()
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
    let mut stale = env.source().resource(&id).expect("stored");
    stale.version = 1;
    stale.bundle = bundle(&env.ns, "crud", json!({"v": "stale"}));
    let ev = spec_event("maestro", EventType::SpecUpdate, &stale);
    env.source()
        .publish_event(&env.consumer, ev)
        .expect("stale event");
    env.wait_log("the agent saw the stale event", "stale generation")
        .await;
    env.source()
        .update(&id, bundle(&env.ns, "crud", json!({"v": "3"})))
        .expect("update");
    env.wait_data("crud", "v", "3").await;

    let started = Instant::now();
    env.source().delete(&id).expect("delete");
    env.wait_source("Deleted reported, the source forgets the work", |s| {
        s.hard_deleted(&id)
    })
    .await;
    let round_trip = started.elapsed();
    env.wait_gone("crud").await;
    assert!(
        applied
            .get_opt(&env.amw_name(&id))
            .await
            .expect("get")
            .is_none(),
        "the AppliedManifestWork is gone"
    );
    eprintln!("delete round trip (source delete -> Deleted status): {round_trip:?}");

    let c = env.source().counters();
    assert_eq!(
        (
            c.stale,
            c.rejected_sequence,
            c.rejected_source,
            c.rejected_consumer,
            c.malformed
        ),
        (0, 0, 0, 0, 0),
        "every status the agent sent met Maestro's checks: {c:?}"
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

pub async fn a_restarted_agent_converges_on_what_changed_while_it_was_away(t: Transport) {
    let mut env = BrokerEnv::start(t, "restart").await;
    let (a, b) = env.two_applied_works().await;
    let applied: Api<AppliedManifestWork> = Api::all(env.spoke.client.clone());
    let uid_before = applied
        .get(&env.amw_name(&a))
        .await
        .expect("amw a")
        .metadata
        .uid;

    env.stop_agent();
    let c = env.change_a_delete_b_create_c(&a, &b);
    env.start_agent();
    env.wait_changes_converged(&a, &b, &c).await;
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
    let counters = env.source().counters();
    assert_eq!(
        counters.rejected_sequence, 0,
        "sequence ids grow across restarts: {counters:?}"
    );
}

/// A late part of the source's answer to a spec resync request of the previous process (a copy
/// of a work made before its deletion) reaches a restarted agent: the deletion was kept on the
/// spoke before the cleanup began, so the restarted agent knows it and does not apply the work
/// again.
pub async fn a_late_copy_of_a_work_deleted_before_a_restart_stays_deleted(t: Transport) {
    let mut env = BrokerEnv::start(t, "late").await;
    // Not the cluster's only work: a source holding none for it answers nothing.
    let other = env.create(bundle(&env.ns, "other", json!({"v": "1"})));
    env.wait_applied(&other).await;
    let id = env.create(bundle(&env.ns, "late", json!({"v": "1"})));
    env.wait_applied(&id).await;
    let late_copy = env.source().resource(&id).expect("held at the source");
    env.source().delete(&id).expect("delete");
    env.wait_source("the deletion is heard", |s| s.hard_deleted(&id))
        .await;
    env.wait_gone("late").await;
    let kept = env.kept_deletions().await;
    assert!(kept.contains_key(&id), "the deletion is kept: {kept:?}");

    env.kill_agent();
    let created = configmaps_created(&env);
    env.start_agent();
    env.wait_log(
        "the restarted agent subscribed",
        "subscribed; spec resync requested",
    )
    .await;
    let copy = spec_event(
        env.source().source_id(),
        EventType::SpecResyncResponse,
        &late_copy,
    );
    env.source()
        .publish_event(&env.consumer, copy)
        .expect("send the late copy");
    // The agent had its chance: it took the copy, and either said why it ignored it or applied
    // it.
    wait_for("the late copy is taken", TIMEOUT, || async {
        (env.log()
            .contains("desync: the source sent again a work deleted here; ignored")
            || created.names().iter().any(|n| n == "late"))
        .then_some(())
    })
    .await;
    let amws: Api<AppliedManifestWork> = Api::all(env.spoke.client.clone());
    assert!(
        amws.get_opt(&env.amw_name(&id))
            .await
            .expect("read")
            .is_none(),
        "no AppliedManifestWork for the deleted work"
    );
    let created = created.stop();
    assert!(
        !created.iter().any(|n| n == "late"),
        "the deleted work was applied again after the restart: {created:?}\n{}",
        tail(&env.log())
    );
}

/// Every ConfigMap the spoke gets in the test's namespace from now on, until `stop`.
struct Seen {
    names: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    watch: tokio::task::JoinHandle<()>,
}

impl Seen {
    fn names(&self) -> Vec<String> {
        self.names
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn stop(self) -> Vec<String> {
        self.watch.abort();
        self.names()
    }
}

fn configmaps_created(env: &BrokerEnv) -> Seen {
    use futures::StreamExt;
    let names = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = names.clone();
    let watch = tokio::spawn(
        kube::runtime::watcher(env.configmaps(), kube::runtime::watcher::Config::default())
            .for_each(move |event| {
                if let Ok(kube::runtime::watcher::Event::Apply(cm)) = event {
                    seen.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(cm.metadata.name.unwrap_or_default());
                }
                std::future::ready(())
            }),
    );
    Seen { names, watch }
}

pub async fn a_one_mebibyte_bundle_and_a_burst_of_two_hundred(t: Transport) {
    let env = BrokerEnv::start(t, "big").await;
    let chunk = "x".repeat(250 * 1024);
    let manifests: Vec<Value> = (0..4)
        .map(|i| configmap(&env.ns, &format!("big-{i}"), json!({"blob": chunk})))
        .collect();
    let big = env.create(json!({"manifests": manifests}));
    env.wait_applied(&big).await;
    env.wait_data("big-3", "blob", &chunk).await;

    let ids: Vec<String> = (0..200)
        .map(|i| {
            env.create(bundle(
                &env.ns,
                &format!("burst-{i}"),
                json!({"i": i.to_string()}),
            ))
        })
        .collect();
    env.wait_source("all 200 bundles Applied at the source", |s| {
        ids.iter()
            .all(|id| s.condition_status(id, "Applied").as_deref() == Some("True"))
    })
    .await;
    env.wait_data("burst-199", "i", "199").await;
    let c = env.source().counters();
    assert_eq!(
        (c.stale, c.rejected_sequence, c.malformed),
        (0, 0, 0),
        "{c:?}"
    );
}

pub async fn a_job_completes_and_its_ttl_deletes_the_work(t: Transport) {
    let env = BrokerEnv::start(t, "job").await;
    // Not the cluster's only work: a source holding none answers nothing (sdk-go's source client)
    // and the record of a TTL deletion then waits out the eviction grace period.
    let other = env.create(bundle(&env.ns, "other", json!({"v": "1"})));
    env.wait_applied(&other).await;
    let id = env.create(json!({
        "manifests": [job(&env.ns, "once")],
        "manifestConfigs": [job_complete_config(&env.ns, "once")],
        "deleteOption": {"propagationPolicy": "Foreground", "ttlSecondsAfterFinished": 2}
    }));
    env.wait_complete(&id).await;
    env.wait_source("the TTL deletes the work: Deleted at the source", |s| {
        s.hard_deleted(&id)
    })
    .await;
    let jobs: Api<Job> = Api::namespaced(env.spoke.client.clone(), &env.ns);
    wait_for("the Job is gone from the spoke", TIMEOUT, || async {
        jobs.get_opt("once").await.ok()?.is_none().then_some(())
    })
    .await;
    // The record that held the completion goes once the source has shown it heard Deleted.
    env.wait_record_released(&id).await;
    assert_eq!(
        env.source().counters().deleted_unrequested,
        1,
        "the source did not ask for this deletion: the TTL did"
    );
    assert!(
        env.log().contains("TTL"),
        "the TTL deletion is logged:\n{}",
        tail(&env.log())
    );
}

/// A spec event the agent cannot read, on the transport's wire.
fn send_malformed(hub: &BrokerSource, consumer: &str) {
    match hub {
        // Binary mode with a broken payload.
        BrokerSource::Mqtt { source, .. } => source
            .publish_raw(
                consumer,
                Some("application/json".into()),
                vec![
                    ("ce-specversion".into(), "1.0".into()),
                    ("ce-id".into(), "x".into()),
                    ("ce-source".into(), "maestro".into()),
                    ("ce-type".into(), EventType::SpecCreate.as_type()),
                    ("ce-resourceid".into(), "bad".into()),
                    ("ce-resourceversion".into(), "1".into()),
                    ("ce-clustername".into(), consumer.to_string()),
                ],
                b"{not json".to_vec(),
            )
            .expect("malformed"),
        // No spec version, no resource version.
        BrokerSource::Grpc(source) => source.send_raw(
            consumer,
            cloudevents::grpc::proto::CloudEvent {
                id: "x".into(),
                source: "maestro".into(),
                r#type: EventType::SpecCreate.as_type(),
                ..Default::default()
            },
        ),
        // sdk-go's attributes with a broken payload, routed to the consumer by `ce-clustername`.
        BrokerSource::PubSub(source) => source
            .publish_raw(
                b"{not json".to_vec(),
                [
                    ("Content-Type", "application/json"),
                    ("ce-specversion", "1.0"),
                    ("ce-id", "x"),
                    ("ce-source", "maestro"),
                    ("ce-type", &EventType::SpecCreate.as_type()),
                    ("ce-resourceid", "bad"),
                    ("ce-resourceversion", "1"),
                    ("ce-clustername", consumer),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            )
            .expect("malformed"),
    }
}

pub async fn malformed_and_other_clusters_events_are_refused_and_counted(t: Transport) {
    let mut env = BrokerEnv::start(t, "hostile").await;
    env.wait_source("subscribed", |s| s.counters().spec_resync_requests >= 1)
        .await;
    send_malformed(&env.hub, &env.consumer);
    let mine = env.create(bundle(&env.ns, "mine", json!({"v": "1"})));
    let mut other = env.source().resource(&mine).expect("stored");
    other.consumer = "someone-else".into();
    other.id = "00000000-0000-0000-0000-000000000042".into();
    other.bundle = bundle(&env.ns, "not-mine", json!({"v": "1"}));
    let ev = spec_event("maestro", EventType::SpecCreate, &other);
    env.source()
        .publish_event(&env.consumer, ev)
        .expect("other cluster");

    env.wait_data("mine", "v", "1").await;
    // On Pub/Sub the subscription's filter on `ce-clustername` keeps another cluster's event
    // from the agent: only the malformed one reaches it.
    let refused = if t == Transport::PubSub { 1 } else { 2 };
    wait_for("the refused events counted", TIMEOUT, || async {
        metric(&env.metrics().await, "cloudevents_rejected_total ").filter(|n| *n >= refused)
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
/// (`docs/metrics.md` maps them); behind a broker the agent serves each, with the labels those
/// queries select, and they move while a bundle is applied, updated and deleted.
pub async fn maestros_dashboard_metrics_move_while_a_bundle_is_applied(t: Transport) {
    let env = BrokerEnv::start(t, "maestro-metrics").await;
    let id = env.create(bundle(&env.ns, "dash", json!({"v": "1"})));
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
        std::time::Duration::from_secs(30),
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
    env.source()
        .update(&id, bundle(&env.ns, "dash", json!({"v": "2"})))
        .expect("update");
    env.wait_data("dash", "v", "2").await;
    env.source().delete(&id).expect("delete");
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

/// Behind a broker, spec events carry no status and the agent keeps its works in memory: a
/// restarted agent once applied a completed work's manifests again before finding it Complete,
/// so an edit made after completion reached the spoke (found by `chaos --hub mqtt`). The
/// completion is now kept on the spoke (`work::completion_memory`).
pub async fn a_restarted_agent_does_not_apply_an_edit_to_a_completed_work(t: Transport) {
    let mut env = BrokerEnv::start(t, "done").await;
    let bundle = |v: &str| {
        json!({
            "manifests": [job(&env.ns, "once"), configmap(&env.ns, "side", json!({"v": v}))],
            "manifestConfigs": [job_complete_config(&env.ns, "once")],
        })
    };
    let id = env.create(bundle("1"));
    env.wait_complete(&id).await;
    env.wait_data("side", "v", "1").await;
    env.source().update(&id, bundle("2")).expect("edit");
    env.stop_agent();
    let arrived_before = env.source().status_arrivals().len();
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

/// Complete at once (a CEL rule on a ConfigMap) with a TTL of zero: the agent deletes the work
/// itself and reports Deleted; OCM's hub then deletes it too (its own TTL collection) and sends
/// the deletion, which the agent must clean up and answer again (the hub waits for that Deleted
/// to release its finalizer).
pub async fn a_work_deleted_by_its_ttl_and_then_by_its_source_is_reported_deleted_twice(
    t: Transport,
) {
    let env = BrokerEnv::start(t, "ttl-then-source").await;
    let ns = env.ns.clone();
    let id = env.create(json!({
                "manifests": [configmap(&ns, "ttl", json!({"v": "1"}))],
                "manifestConfigs": [configmap_config(&ns, "ttl", json!({
                    "conditionRules": [{"condition": "Complete", "type": "CEL", "celExpressions": ["object.metadata.name == 'ttl'"]}]
                }))],
                "deleteOption": {"propagationPolicy": "Foreground", "ttlSecondsAfterFinished": 0}
            }));
    let snapshot = env.source().resource(&id).expect("stored");
    env.wait_source("Deleted after the TTL", |s| s.hard_deleted(&id))
        .await;
    let mut deleting = snapshot;
    deleting.version += 1;
    deleting.deleted_at = Some(
        cloudevents::event::parse_time("deletiontimestamp", "2026-01-01T00:00:00Z").expect("time"),
    );
    let ev = spec_event("maestro", EventType::SpecDelete, &deleting);
    env.source()
        .publish_event(&env.consumer, ev)
        .expect("the source's deletion");
    let deleted = |s: &test_support::maestro::Maestro| {
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

/// Found by `chaos-long` behind MQTT (seed 1795828324128649324, work w71): the `Deleted` of a
/// work whose TTL ran out was lost after the broker took it, the agent released the
/// AppliedManifestWork holding the work's completion, and a restarted agent got the work back
/// from the source, which still had it, and applied it again. The record now stays until the
/// source shows it no longer has the work (it answers a spec resync request listing it with a
/// deletion), and the agent tells the deletion again until then.
pub async fn a_ttl_deletion_the_source_lost_keeps_its_record_until_the_source_heard_it(
    t: Transport,
) {
    let env = BrokerEnv::start(t, "ttl-lost").await;
    let ns = env.ns.clone();
    // Another work of the cluster: a source holding none at all answers nothing (sdk-go's source
    // client), and the record then waits out the eviction grace period.
    let other = env.create(bundle(&ns, "other", json!({"v": "1"})));
    env.wait_applied(&other).await;
    env.source().faults(|f| f.lose_next_deleted(1));
    let id = env.create(json!({
        "manifests": [configmap(&ns, "ttl", json!({"v": "1"}))],
        "manifestConfigs": [configmap_config(&ns, "ttl", json!({
            "conditionRules": [{"condition": "Complete", "type": "CEL", "celExpressions": ["object.metadata.name == 'ttl'"]}]
        }))],
        "deleteOption": {"propagationPolicy": "Foreground", "ttlSecondsAfterFinished": 0}
    }));
    env.wait_source("the first Deleted is lost after the broker took it", |s| {
        s.faults(|f| f.counters().statuses_lost) == 1
    })
    .await;
    // (Over gRPC the lost event fails its call, and the agent sends it again at once.)
    // The agent had its chance: the record goes once the agent takes the deletion as heard.
    env.wait_record_released(&id).await;
    assert!(
        env.source().hard_deleted(&id),
        "the record of the completion was released while the source still had the work\n{}",
        tail(&env.log())
    );
    assert!(
        env.configmaps()
            .get_opt("ttl")
            .await
            .expect("read")
            .is_none(),
        "the completed work was applied again"
    );
}

/// A restarted agent marks no AppliedManifestWork for eviction while the source prepares its
/// answer to the spec resync request (the answer comes one event per work, with no end marker),
/// nor when answers lose events on the way (it asks again while they bring missing works): only
/// the one of a work the source forgot is marked.
pub async fn a_restart_marks_no_applied_work_of_a_work_the_source_still_has(t: Transport) {
    let mut env = BrokerEnv::start(t, "evictmark").await;
    let kept: Vec<String> = (0..5)
        .map(|i| env.create(bundle(&env.ns, &format!("kept-{i}"), json!({"v": "1"}))))
        .collect();
    let forgotten = env.create(bundle(&env.ns, "forgotten", json!({"v": "1"})));
    for id in kept.iter().chain([&forgotten]) {
        env.wait_applied(id).await;
    }
    env.kill_agent();
    assert!(env.source().forget(&forgotten), "the source had the work");
    let marked = marks_seen(Api::all(env.spoke.client.clone()));
    // The answer waits longer than a scan's retry period (1 s), shorter than the agent's wait
    // for an answer that has not begun (5 s).
    // Every answer: an agent may ask twice (gRPC: on the stream's start and on its subscribe).
    // Each loses all but two of its five works.
    env.source().faults(|f| {
        f.hold_next_answers(u64::MAX);
        f.cut_next_answers(u64::MAX, 2);
    });
    env.start_agent();
    env.wait_source("the restarted agent asked for a spec resync", |s| {
        s.faults(|f| f.holding())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    // The first answer to asking again loses events too: the agent asks as long as answers
    // bring missing works.
    env.source().faults(|f| {
        f.disarm();
        f.cut_next_answers(1, 2);
    });
    assert!(env.source().release_held().expect("release the answer"));
    while env.source().release_held().expect("release the answer") {}

    let forgotten_amw = env.amw_name(&forgotten);
    wait_for(
        "the AppliedManifestWork of the forgotten work is marked",
        TIMEOUT,
        || async {
            marked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains(&forgotten_amw)
                .then_some(())
        },
    )
    .await;
    // The spoke is shared with other tests: only this test's AppliedManifestWorks count.
    let ours: std::collections::BTreeSet<String> = kept.iter().map(|id| env.amw_name(id)).collect();
    let marked: std::collections::BTreeSet<String> = marked
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|name| ours.contains(*name) || **name == forgotten_amw)
        .cloned()
        .collect();
    assert_eq!(
        marked,
        std::collections::BTreeSet::from([forgotten_amw]),
        "only the forgotten work's AppliedManifestWork was marked"
    );
    for id in &kept {
        env.wait_applied(id).await;
    }
    assert!(
        env.source().faults(|f| f.counters().answer_events_lost) > 0,
        "the answer lost events on the way"
    );
}

/// The names of the AppliedManifestWorks seen with `status.evictionStartTime`, from a watch
/// started now and kept until the test ends.
fn marks_seen(
    api: Api<AppliedManifestWork>,
) -> std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>> {
    use futures::StreamExt;
    use kube::ResourceExt;
    use kube::runtime::watcher;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let into = seen.clone();
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
        while let Some(event) = events.next().await {
            let (watcher::Event::Apply(amw) | watcher::Event::InitApply(amw)) = (match event {
                Ok(e) => e,
                Err(_) => continue,
            }) else {
                continue;
            };
            if amw
                .status
                .as_ref()
                .is_some_and(|s| s.eviction_start_time.is_some())
            {
                into.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(amw.name_any());
            }
        }
    });
    seen
}

/// Behind a wire whose ceiling cannot carry a request listing every work, a reconnect still
/// learns what changed: the request lists what fits (never over the ceiling), the source sends
/// back the works left out, and a work the source lost while the agent was away — one it does not
/// send back — is noticed at the end of the answer, counted, asked about, and deleted on the
/// source's answer.
pub async fn a_resync_behind_a_small_ceiling_fits_and_heals_a_work_the_source_lost(t: Transport) {
    const CEILING: u32 = 4096;
    const WORKS: usize = 80;
    let mut env = BrokerEnv::start_with_ceiling(t, "ceiling", CEILING).await;
    // Heavier works are listed first, so the lightest — the one the source will lose — is left
    // out of the request.
    let heavy: Vec<String> = (0..WORKS)
        .map(|i| {
            let noise = incompressible(i as u64, 256);
            env.create(bundle(&env.ns, &format!("h{i}"), json!({"noise": noise})))
        })
        .collect();
    let lost = env.create(bundle(&env.ns, "lost", json!({"v": "1"})));
    for id in heavy.iter().chain([&lost]) {
        env.wait_applied(id).await;
    }
    env.wait_data("lost", "v", "1").await;
    let requests_before = env.source().counters().spec_resync_requests;

    // The source loses a work, and the wire goes away and comes back: the agent's next request
    // cannot list all 81 works.
    assert!(env.source().forget(&lost), "the source held the work");
    env.hub.stop_hub().await;
    env.hub.start_hub().await.expect("the hub back");

    env.wait_gone("lost").await;
    // Settled: nothing left unconfirmed (on Pub/Sub, which keeps no order, works of the answer
    // that came after its marker may have been asked about too, and confirmed).
    wait_for("the desync settled", TIMEOUT, || async {
        let metrics = env.metrics().await;
        (metric(&metrics, "work_agent_source_unconfirmed_works ") == Some(0)).then_some(metrics)
    })
    .await;
    let metrics = env.metrics().await;
    assert!(
        metric(
            &metrics,
            "work_agent_source_desync_total{kind=\"unconfirmed\"}"
        )
        .unwrap_or(0)
            >= 1,
        "the lost work counted as unconfirmed:\n{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            "work_agent_source_desync_healed_total{outcome=\"deleted\"}"
        ),
        Some(1),
        "healed by the source's deletion, and nothing else deleted:\n{metrics}"
    );
    assert!(
        metric(&metrics, "work_agent_source_desync_questions_total").unwrap_or(0) >= 1,
        "the agent asked about it:\n{metrics}"
    );
    assert!(
        env.log().contains(&format!("uid={lost}"))
            || env.log().contains(&format!("\"uid\":\"{lost}\"")),
        "the log names the work's id"
    );
    // Every other work is still there.
    for i in 0..WORKS {
        let name = format!("h{i}");
        let kept = env.configmaps().get_opt(&name).await.ok().flatten();
        assert!(kept.is_some(), "ConfigMap {name} kept");
    }

    // What the wire carried: every request the source got since fits the ceiling, and one of
    // them left works out (listed fewer than the agent held).
    let requests: Vec<usize> = env
        .source()
        .events()
        .iter()
        .filter(|e| e.event_type().ok() == Some(EventType::SpecResyncRequest))
        .map(|e| e.data.as_ref().map_or(0, Vec::len))
        .collect();
    assert!(
        requests.len() as u64 > requests_before,
        "a request after the restart: {requests:?}"
    );
    assert!(
        requests.iter().all(|&bytes| bytes <= CEILING as usize),
        "every request within {CEILING} bytes: {requests:?}"
    );
    env.stop_agent();
}

/// `len` hex digits that no compressor shortens much (a linear congruential sequence from
/// `seed`), so that a work's stored size follows its data.
fn incompressible(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            char::from_digit(((x >> 60) & 0xf) as u32, 16).unwrap_or('0')
        })
        .collect()
}

/// A status whose event would not fit the wire's ceiling is trimmed by the documented rule
/// (feedback values first) and says so, instead of never reaching the source.
pub async fn a_status_over_the_ceiling_is_trimmed_and_says_so(t: Transport) {
    const CEILING: u32 = 8192;
    const VALUES: usize = 60;
    let env = BrokerEnv::start_with_ceiling(t, "trim", CEILING).await;
    // A small spec (under 3 KB) whose feedback values, 60 copies of one 180-byte string, make
    // a status of about 15 KB.
    let paths: Vec<Value> = (0..VALUES)
        .map(|i| json!({"name": format!("v{i}"), "path": ".data.big"}))
        .collect();
    let config = configmap_config(
        &env.ns,
        "fat",
        json!({"feedbackRules": [{"type": "JSONPaths", "jsonPaths": paths}]}),
    );
    let id = env.create(json!({
        "manifests": [configmap(&env.ns, "fat", json!({"big": incompressible(7, 180)}))],
        "manifestConfigs": [config],
    }));
    env.wait_data("fat", "big", &incompressible(7, 180)).await;
    env.wait_source("a trimmed status at the source", |s| {
        applied_reason(s, &id).as_deref() == Some("StatusTooLarge")
    })
    .await;
    let status = env.source().status(&id).unwrap_or_default();
    let kept = status["resourceStatus"][0]["statusFeedback"]["values"]
        .as_array()
        .map_or(0, Vec::len);
    assert!(
        kept > 0 && kept < VALUES,
        "some feedback values kept, not all: {kept}"
    );
    let message = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Applied"))
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains(&format!("{} of {VALUES} feedback values", VALUES - kept)),
        "the condition says what was left out: {message}"
    );
    let manifest_conditions = status["resourceStatus"][0]["conditions"]
        .as_array()
        .map_or(0, Vec::len);
    assert!(
        manifest_conditions >= 2,
        "the manifest's own conditions kept: {status}"
    );
    let largest = env
        .source()
        .events()
        .iter()
        .filter(|e| {
            e.ext_string(cloudevents::types::EXT_RESOURCE_ID).as_deref() == Some(id.as_str())
        })
        .map(|e| e.data.as_ref().map_or(0, Vec::len))
        .max()
        .unwrap_or(0);
    assert!(
        largest > 0 && largest <= CEILING as usize,
        "every status event within {CEILING} bytes: {largest}"
    );
}

/// The reason of work `id`'s `Applied` condition at the source.
fn applied_reason(source: &test_support::maestro::Maestro, id: &str) -> Option<String> {
    let status = source.status(id)?;
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Applied")?["reason"]
        .as_str()
        .map(str::to_string)
}

/// A declared gate (`work.open-cluster-management.io/gates`) travels in the work's metadata and
/// holds behind the broker as behind a Kubernetes hub: the dependant ConfigMap waits, and says so
/// at the source, until a CEL condition of the other manifest holds (an annotation the test sets
/// on the spoke); then it is applied and the work is `Applied`.
pub async fn a_gated_manifest_waits_for_its_gate(t: Transport) {
    let env = BrokerEnv::start(t, "gate").await;
    let ready = "has(object.metadata.annotations) && object.metadata.annotations[?'ready'].orValue('') == 'true'";
    let spec = json!({
        "manifests": [
            configmap(&env.ns, "dependant", json!({"v": "1"})),
            configmap(&env.ns, "gate", json!({"v": "1"})),
        ],
        "manifestConfigs": [configmap_config(&env.ns, "gate", json!({
            "conditionRules": [{"condition": "Ready", "type": "CEL", "celExpressions": [ready]}]
        }))]
    });
    let gates = json!([{"manifest": 0, "waitFor": {"manifest": 1, "condition": "Ready"}}]);
    let id = env
        .source()
        .create_with(
            &env.consumer,
            spec,
            CreateOptions {
                metadata: Some(
                    json!({"annotations": {"work.open-cluster-management.io/gates": gates.to_string()}}),
                ),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("create at the source: {e}"));
    // The agent had its chance: the gate's object is applied and the wait is reported.
    env.wait_source("the dependant waits for the gate, at the source", |s| {
        manifest_condition(s, &id, 0, "Applied").is_some_and(|c| {
            c["status"] == "Unknown"
                && c["reason"] == "WaitingForDependency"
                && c["message"].as_str().is_some_and(|m| m.contains("Ready"))
        }) && manifest_condition(s, &id, 1, "Ready").is_some_and(|c| c["status"] == "False")
    })
    .await;
    assert_ne!(
        env.source().condition_status(&id, "Applied").as_deref(),
        Some("True"),
        "a work with a waiting manifest is not Applied"
    );
    let cms = env.configmaps();
    assert!(cms.get_opt("gate").await.expect("get").is_some());
    assert!(
        cms.get_opt("dependant").await.expect("get").is_none(),
        "the dependant exists before its gate holds"
    );

    cms.patch(
        "gate",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"annotations": {"ready": "true"}}})),
    )
    .await
    .expect("the gate turns true");
    env.wait_data("dependant", "v", "1").await;
    env.wait_applied(&id).await;
    env.wait_source("the dependant applied, at the source", |s| {
        manifest_condition(s, &id, 0, "Applied").is_some_and(|c| c["status"] == "True")
    })
    .await;
}
