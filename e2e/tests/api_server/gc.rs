//! TTL garbage collection on real API servers.
//!
//! First `gc::next_action` / `agent::work::ttl::collect` directly against the hub (the work's `Complete` status
//! is written by the test through the status subresource, no agent runs), then the whole agent:
//! restarts during the wait, Foreground vs Orphan, and the metrics.

use std::time::Duration;

use crate::agent_common::*;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use test_support::{AgentProcess, TestCluster, free_port, unique_name, wait_for};
use work_api::ManifestWork;

// ------------------------------------------------------------------------------------------
// Direct: the TTL deletion against the hub

struct Hub {
    cluster: TestCluster,
    ns: String,
}

impl Hub {
    async fn new(prefix: &str) -> Hub {
        let cluster = TestCluster::hub().await;
        let ns = cluster.namespace(prefix).await;
        Hub { cluster, ns }
    }

    fn works(&self) -> Api<ManifestWork> {
        Api::namespaced(self.cluster.client.clone(), &self.ns)
    }

    /// Creates a work with an optional TTL and no finalizer (no agent serves this namespace, so a
    /// delete removes it at once).
    async fn create(&self, name: &str, ttl: Option<i64>) -> ManifestWork {
        let mut spec = json!({"workload": {"manifests": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}}
        ]}});
        if let Some(ttl) = ttl {
            spec["deleteOption"] = json!({"ttlSecondsAfterFinished": ttl});
        }
        let work: ManifestWork = serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": name, "namespace": self.ns}, "spec": spec,
        }))
        .expect("test ManifestWork decodes");
        self.works()
            .create(&PostParams::default(), &work)
            .await
            .unwrap_or_else(|e| panic!("creating ManifestWork {name}: {e}"))
    }

    /// Writes a work-level `Complete` condition through the status subresource.
    async fn set_complete(&self, name: &str, status: &str, at: Timestamp) -> ManifestWork {
        let at = at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let patch = json!({"status": {"conditions": [{
            "type": "Complete", "status": status, "reason": "ConditionRulesAggregated",
            "message": "set by the test", "lastTransitionTime": at,
        }]}});
        self.works()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("writing status of {name}: {e}"))
    }

    async fn collect(&self, work: &ManifestWork) -> gc::GcOutcome {
        let uid = work.uid().expect("stored work has a uid");
        let hub = agent::hub::KubeHub::new(
            self.cluster.client.clone(),
            &self.ns,
            gc::event_reporter(None),
        );
        agent::work::ttl::collect(&hub, true, &work.name_any(), &uid)
            .await
            .unwrap_or_else(|e| panic!("collect {}: {e}", work.name_any()))
    }

    async fn exists(&self, name: &str) -> bool {
        self.works()
            .get_opt(name)
            .await
            .unwrap_or_else(|e| panic!("reading {name}: {e}"))
            .is_some()
    }

    /// Asserts that `work` is not eligible for TTL deletion, that collecting it deletes nothing
    /// (it is not complete with a TTL) and that it is still there.
    async fn assert_kept(&self, work: &ManifestWork) {
        assert_eq!(
            gc::next_action(work, Timestamp::now()),
            gc::GcAction::NotEligible
        );
        assert_eq!(self.collect(work).await, gc::GcOutcome::NoLongerComplete);
        assert!(self.exists(&work.name_any()).await);
    }

    async fn ttl_events(&self, name: &str) -> Vec<Event> {
        let events: Api<Event> = Api::namespaced(self.cluster.client.clone(), &self.ns);
        events
            .list(&ListParams::default())
            .await
            .expect("listing events")
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .filter(|e| e.reason.as_deref() == Some(gc::EVENT_REASON))
            .collect()
    }
}

/// Now, truncated to the second (what a condition's lastTransitionTime can hold).
fn now_seconds() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).expect("now is in range")
}

#[tokio::test]
async fn ttl_zero_is_deleted_at_once_with_an_event() {
    let hub = Hub::new("gc-zero").await;
    hub.create("w", Some(0)).await;
    let work = hub.set_complete("w", "True", now_seconds()).await;
    assert!(matches!(
        gc::next_action(&work, Timestamp::now()),
        gc::GcAction::DeleteNow { .. }
    ));
    assert!(matches!(
        hub.collect(&work).await,
        gc::GcOutcome::Deleted { .. }
    ));
    assert!(!hub.exists("w").await);
    let events = hub.ttl_events("w").await;
    assert_eq!(events.len(), 1, "one TTL Event: {events:?}");
    assert_eq!(
        events[0].regarding.as_ref().and_then(|r| r.uid.clone()),
        work.uid()
    );
    // Collecting again finds nothing to do.
    assert_eq!(hub.collect(&work).await, gc::GcOutcome::AlreadyGone);
}

#[tokio::test]
async fn ttl_five_seconds_is_deleted_after_five_seconds_and_not_before() {
    let hub = Hub::new("gc-five").await;
    hub.create("w", Some(5)).await;
    let completed = now_seconds();
    let work = hub.set_complete("w", "True", completed).await;
    let due = completed + SignedDuration::from_secs(5);

    // Before the deadline: wait exactly the time left; collecting early deletes nothing.
    let gc::GcAction::WaitFor(left) = gc::next_action(&work, Timestamp::now()) else {
        panic!("a work completed just now with TTL 5 s must wait");
    };
    assert!(left <= Duration::from_secs(5), "{left:?}");
    assert!(matches!(
        hub.collect(&work).await,
        gc::GcOutcome::NotYetDue(_)
    ));
    assert!(hub.exists("w").await, "deleted before its deadline");

    tokio::time::sleep(left).await;
    let outcome = hub.collect(&work).await;
    let deleted_at = Timestamp::now();
    let gc::GcOutcome::Deleted { lag } = outcome else {
        panic!("expected Deleted at the deadline, got {outcome:?}");
    };
    assert!(deleted_at >= due, "deleted at {deleted_at}, due {due}");
    assert!(lag < Duration::from_secs(5), "lag {lag:?}");
    assert!(!hub.exists("w").await);
}

#[tokio::test]
async fn without_ttl_a_complete_work_is_never_deleted() {
    let hub = Hub::new("gc-nottl").await;
    hub.create("w", None).await;
    let work = hub
        .set_complete("w", "True", now_seconds() - SignedDuration::from_hours(24))
        .await;
    hub.assert_kept(&work).await;
}

#[tokio::test]
async fn a_work_that_is_not_complete_is_never_deleted() {
    let hub = Hub::new("gc-incomplete").await;
    let created = hub.create("w", Some(0)).await;
    assert_eq!(
        gc::next_action(&created, Timestamp::now()),
        gc::GcAction::NotEligible
    );
    let work = hub.set_complete("w", "False", now_seconds()).await;
    hub.assert_kept(&work).await;
}

#[tokio::test]
async fn a_work_recreated_under_the_same_name_is_not_deleted_by_the_old_deadline() {
    let hub = Hub::new("gc-recreate").await;
    hub.create("w", Some(2)).await;
    let old = hub.set_complete("w", "True", now_seconds()).await;
    let gc::GcAction::WaitFor(left) = gc::next_action(&old, Timestamp::now()) else {
        panic!("must wait");
    };

    // During the wait the work is deleted and re-created, already Complete and due.
    hub.works()
        .delete("w", &Default::default())
        .await
        .expect("delete old work");
    wait_for("old work gone", TIMEOUT, || async {
        (!hub.exists("w").await).then_some(())
    })
    .await;
    hub.create("w", Some(0)).await;
    let new = hub.set_complete("w", "True", now_seconds()).await;
    assert_ne!(old.uid(), new.uid());

    tokio::time::sleep(left).await;
    assert_eq!(hub.collect(&old).await, gc::GcOutcome::Replaced);
    let still = hub.works().get("w").await.expect("new work still there");
    assert_eq!(still.uid(), new.uid());
}

// ------------------------------------------------------------------------------------------
// Full agent

fn job_work(env: &Env, job_name: &str, ttl: i64, policy: &str) -> Value {
    json!({
        "workload": {"manifests": [job(&env.ns, job_name)]},
        "manifestConfigs": [{
            "resourceIdentifier": {"group": "batch", "resource": "jobs", "name": job_name, "namespace": env.ns},
            "conditionRules": [{"type": "WellKnownConditions", "condition": "Complete"}]
        }],
        "deleteOption": {"propagationPolicy": policy, "ttlSecondsAfterFinished": ttl},
    })
}

/// An agent that records TTL deletions as Events (`--ttl-deletion-events`), for the tests that
/// use the Event's time as the deletion time.
async fn with_ttl_events(prefix: &str) -> Env {
    Env::start_with(TestCluster::hub().await, prefix, &["--ttl-deletion-events"]).await
}

fn complete_since(work: &ManifestWork) -> Timestamp {
    gc::complete_since(work).expect("work is Complete")
}

/// The TTL Event of a deleted work, recorded by the agent.
async fn ttl_event(env: &Env, name: &str) -> Event {
    let events: Api<Event> = Api::namespaced(env.hub.client.clone(), &env.cluster);
    wait_for(&format!("TTL Event for {name}"), TIMEOUT, || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some(gc::EVENT_REASON)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
        }
    })
    .await
}

#[tokio::test]
async fn an_agent_restarted_during_the_wait_still_deletes_on_time() {
    let mut env = with_ttl_events("gc-restart").await;
    let name = env.work_name("job");
    env.create_work(&name, job_work(&env, "once", 12, "Foreground"))
        .await;
    let work = env
        .wait_work(&name, "Complete", |w| work_is(w, "Complete", "True"))
        .await;
    let due = complete_since(&work) + SignedDuration::from_secs(12);

    env.agent.kill();
    env.restart_agent();
    // The restarted agent reconciles the work before its deadline and must not delete it then.
    wait_reconciled_after(env.http_port, 0.0).await;
    let there = env.works().get_opt(&name).await.expect("read").is_some();
    assert!(
        there || Timestamp::now() >= due,
        "deleted before its deadline {due}"
    );
    env.wait_work_gone(&name).await;
    let event = ttl_event(&env, &name).await;
    let at = event.event_time.expect("eventTime").0;
    assert!(at >= due, "deleted at {at}, before the deadline {due}");
    assert!(
        at.duration_since(due) < SignedDuration::from_secs(10),
        "deleted at {at}, {:?} after the deadline {due} (agent log {})",
        at.duration_since(due),
        env.agent.log_path().display()
    );
}

/// One hub write the watch saw: a version of the work, or its removal.
#[derive(Debug)]
enum Seen {
    Modified(Box<ManifestWork>),
    Deleted,
}

/// Collects every change of the work `name` from the resourceVersion `from` until it is deleted.
async fn watch_writes(works: Api<ManifestWork>, name: String, from: String) -> Vec<Seen> {
    use futures::{StreamExt, TryStreamExt};
    use kube::api::{WatchEvent, WatchParams};
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(290);
    let mut seen = Vec::new();
    let stream = works
        .watch(&params, &from)
        .await
        .expect("watching the work");
    let mut stream = stream.boxed();
    while let Ok(Some(event)) = stream.try_next().await {
        match event {
            WatchEvent::Modified(w) => seen.push(Seen::Modified(Box::new(w))),
            WatchEvent::Deleted(_) => {
                seen.push(Seen::Deleted);
                break;
            }
            _ => {}
        }
    }
    seen
}

#[tokio::test]
async fn a_ttl_lifecycle_costs_five_hub_writes_without_a_deleting_status_or_event() {
    let env = Env::start("gc-writes").await;
    let name = env.work_name("job");
    let from = env
        .works()
        .list_metadata(&ListParams::default())
        .await
        .expect("listing works")
        .metadata
        .resource_version
        .expect("a list has a resourceVersion");
    let watch = tokio::spawn(watch_writes(env.works(), name.clone(), from));
    env.create_work(&name, job_work(&env, "counted", 0, "Orphan"))
        .await;
    env.wait_work_gone(&name).await;
    let seen = tokio::time::timeout(TIMEOUT, watch)
        .await
        .expect("the watch ends with the deletion")
        .expect("the watch task does not panic");
    // The agent had the chance to record an Event: it deleted the work by TTL itself.
    let metrics = scrape(format!("127.0.0.1:{}", env.http_port)).await;
    assert_eq!(
        sample(&metrics, "work_agent_ttl_deletions_total"),
        Some(1.0),
        "{metrics}"
    );

    let versions: Vec<&ManifestWork> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Modified(w) => Some(w.as_ref()),
            Seen::Deleted => None,
        })
        .collect();
    assert!(matches!(seen.last(), Some(Seen::Deleted)), "{seen:#?}");
    assert!(
        versions
            .iter()
            .any(|w| w.metadata.deletion_timestamp.is_some()),
        "the DELETE was seen: {seen:#?}"
    );
    // `Deleting` is written only when the cleanup outlasts 5 s (a machine under heavy load).
    let mut shown_deleting = 0;
    for w in &versions {
        let deleting = w.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == work_api::condition_types::DELETING)
        });
        if let (Some(c), Some(at)) = (deleting, w.metadata.deletion_timestamp.as_ref()) {
            assert!(
                c.last_transition_time.0.duration_since(at.0) >= SignedDuration::from_secs(5),
                "Deleting shown before the cleanup lasted 5 s: {w:#?}"
            );
            shown_deleting = 1;
        }
    }
    // Finalizer added, Applied+Available, Complete, the TTL DELETE, finalizer removed.
    assert!(
        seen.len() <= 5 + shown_deleting,
        "{} hub writes: {seen:#?}",
        seen.len()
    );
    let events: Api<Event> = Api::namespaced(env.hub.client.clone(), &env.cluster);
    let recorded = events.list(&ListParams::default()).await.expect("events");
    assert!(
        !recorded
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some(gc::EVENT_REASON)),
        "no TTL Event without --ttl-deletion-events: {:?}",
        recorded.items
    );
}

#[tokio::test]
async fn a_ttl_deletion_whose_cleanup_lingers_shows_deleting() {
    let env = Env::start("gc-linger").await;
    let name = env.work_name("held");
    let mut held = configmap(&env.ns, "held", json!({"k": "v"}));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [held]},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "", "resource": "configmaps", "name": "held", "namespace": env.ns},
                "conditionRules": [{"condition": "Complete", "type": "CEL", "celExpressions": ["true"]}]
            }],
            "deleteOption": {"propagationPolicy": "Foreground", "ttlSecondsAfterFinished": 0},
        }),
    )
    .await;
    // The ConfigMap's own finalizer holds the cleanup: after 5 s the work says why it lingers.
    let work = env
        .wait_work(&name, "Deleting True", |w| work_is(w, "Deleting", "True"))
        .await;
    let deleted_at = work
        .metadata
        .deletion_timestamp
        .as_ref()
        .expect("deleted by TTL")
        .0;
    let shown = work
        .status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == work_api::condition_types::DELETING)
        })
        .expect("Deleting condition")
        .last_transition_time
        .0;
    assert!(
        shown.duration_since(deleted_at) >= SignedDuration::from_secs(5),
        "Deleting shown at {shown}, deleted at {deleted_at}"
    );
    let cms = env.configmaps();
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("removing the test's finalizer");
    env.wait_work_gone(&name).await;
}

fn job_pods_selector(job_name: &str) -> ListParams {
    ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job_name}"))
}

#[tokio::test]
async fn foreground_ttl_deletion_removes_the_job_and_its_pods() {
    let env = with_ttl_events("gc-foreground").await;
    let name = env.work_name("job");
    env.create_work(&name, job_work(&env, "fg", 0, "Foreground"))
        .await;
    // With a TTL of 0 the work goes as soon as it completes: being deleted by TTL (its
    // Event) is the proof that it completed.
    env.wait_work_gone(&name).await;
    ttl_event(&env, &name).await;
    let jobs = env.spoke_api("batch", "v1", "Job", "jobs");
    env.wait_object_gone(&jobs, "fg").await;
    let pods = env.spoke_api("", "v1", "Pod", "pods");
    wait_for("the Job's Pods gone", TIMEOUT, || {
        let pods = pods.clone();
        async move {
            match pods.list(&job_pods_selector("fg")).await {
                Ok(l) if l.items.is_empty() => Ok(()),
                Ok(l) => Err(format!("{} pods left", l.items.len())),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await;
}

#[tokio::test]
async fn orphan_ttl_deletion_keeps_the_job_and_its_pods() {
    let env = with_ttl_events("gc-orphan").await;
    let name = env.work_name("job");
    env.create_work(&name, job_work(&env, "kept", 0, "Orphan"))
        .await;
    // With a TTL of 0 the work goes as soon as it completes: being deleted by TTL (its
    // Event) is the proof that it completed.
    env.wait_work_gone(&name).await;
    ttl_event(&env, &name).await;
    // The agent released the Job (its last act on it) and the Job is still there.
    let jobs = env.spoke_api("batch", "v1", "Job", "jobs");
    let job = env
        .wait_object(&jobs, "kept", "released, not deleted", |o| {
            owners(o).is_empty()
        })
        .await;
    assert!(job.metadata.deletion_timestamp.is_none());
    assert!(
        owners(&job).is_empty(),
        "orphaned Job still owned: {:?}",
        owners(&job)
    );
    let pods = env.spoke_api("", "v1", "Pod", "pods");
    let left = pods.list(&job_pods_selector("kept")).await.expect("pods");
    assert!(
        !left.items.is_empty(),
        "the orphaned Job's Pods were deleted"
    );
}

/// GETs `/metrics` with a plain HTTP/1.1 request (no client library needed).
async fn scrape(addr: String) -> String {
    tokio::task::spawn_blocking(move || -> std::io::Result<String> {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(&addr)?;
        conn.set_read_timeout(Some(Duration::from_secs(10)))?;
        conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")?;
        let mut out = String::new();
        conn.read_to_string(&mut out)?;
        Ok(out)
    })
    .await
    .expect("scrape task")
    .unwrap_or_default()
}

/// The value of an unlabelled sample, e.g. `work_agent_completions_total`.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .find_map(|v| v.trim().parse().ok())
}

#[tokio::test]
async fn completion_and_ttl_metrics_move_when_a_work_completes_and_is_collected() {
    let mut env = Env::start("gc-metrics").await;
    // Restart the agent on a port the test knows (its default args pick a random one).
    env.agent.kill();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut args = agent_args(
        &env.hub.kubeconfig,
        &env.spoke.kubeconfig,
        &env.cluster,
        &[],
    );
    let at = args
        .iter()
        .position(|a| a == "--http-address")
        .expect("agent_args sets --http-address");
    args[at + 1] = addr.clone();
    env.agent = AgentProcess::start(args);
    let before = wait_for("the agent serves /metrics", TIMEOUT, || {
        let addr = addr.clone();
        async move {
            let text = scrape(addr).await;
            text.contains("work_agent_completions_total")
                .then_some(text)
        }
    })
    .await;
    for counter in [
        "work_agent_completions_total",
        "work_agent_ttl_deletions_total",
        "work_agent_time_to_complete_seconds_count",
        "work_agent_ttl_deletion_lag_seconds_count",
    ] {
        assert_eq!(sample(&before, counter), Some(0.0), "{counter} in {before}");
    }

    let name = unique_name("job");
    env.create_work(&name, job_work(&env, "metered", 0, "Foreground"))
        .await;
    env.wait_work_gone(&name).await;
    let after = wait_for("metrics after the TTL deletion", TIMEOUT, || {
        let addr = addr.clone();
        async move {
            let text = scrape(addr).await;
            (sample(&text, "work_agent_ttl_deletions_total") == Some(1.0)).then_some(text)
        }
    })
    .await;
    assert_eq!(
        sample(&after, "work_agent_completions_total"),
        Some(1.0),
        "{after}"
    );
    assert_eq!(
        sample(&after, "work_agent_time_to_complete_seconds_count"),
        Some(1.0),
        "{after}"
    );
    let took = sample(&after, "work_agent_time_to_complete_seconds_sum").expect("sum");
    assert!(
        took > 0.0 && took < TIMEOUT.as_secs_f64(),
        "time to complete {took}"
    );
    assert_eq!(
        sample(&after, "work_agent_ttl_deletion_lag_seconds_count"),
        Some(1.0),
        "{after}"
    );
    assert_eq!(
        sample(&after, "work_agent_ttl_pending_deletions"),
        Some(0.0),
        "{after}"
    );
}
