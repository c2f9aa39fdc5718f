//! `collect` through a Kubernetes hub on a scripted fake API server: which requests it sends and
//! what it concludes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gc::{EVENT_REASON, GcOutcome, event_reporter};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use serde_json::{Value, json};

use super::collect_at;
use crate::hub::KubeHub;

const WORK_PATH: &str = "/apis/work.open-cluster-management.io/v1/namespaces/c1/manifestworks/w";
const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/c1/events";

/// What the fake hub holds and what it was asked.
#[derive(Default)]
struct Hub {
    work: Option<Value>,
    /// Replaces `work` right after the first read: a delete and re-create racing with us.
    replace_after_get: Option<Value>,
    /// (method, path, body) of every request.
    seen: Vec<(String, String, Value)>,
}

fn status(code: u16, reason: &str) -> Value {
    test_support::status_failure(code, reason, reason)
}

fn respond(hub: &mut Hub, method: &str, path: &str, body: &Value) -> (u16, Value) {
    match (method, path) {
        ("GET", WORK_PATH) => {
            let reply = match &hub.work {
                Some(w) => (200, w.clone()),
                None => (404, status(404, "NotFound")),
            };
            if let Some(next) = hub.replace_after_get.take() {
                hub.work = Some(next);
            }
            reply
        }
        ("DELETE", WORK_PATH) => match hub.work.take() {
            None => (404, status(404, "NotFound")),
            Some(w) => {
                let want = &body["preconditions"]["uid"];
                if !want.is_null() && *want != w["metadata"]["uid"] {
                    hub.work = Some(w);
                    (409, status(409, "Conflict"))
                } else {
                    (200, w)
                }
            }
        },
        ("POST", EVENTS_PATH) => (201, body.clone()),
        _ => (404, status(404, "NotFound")),
    }
}

fn fake_client(hub: Arc<Mutex<Hub>>) -> Client {
    test_support::fake_client("c1", move |method, path, body| {
        let mut h = hub
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let out = respond(&mut h, method, path, &body);
        h.seen.push((method.to_owned(), path.to_owned(), body));
        out
    })
}

fn work(uid: &str, ttl: Option<i64>, complete: &str, deleting: bool) -> Value {
    let mut w = json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": "w", "namespace": "c1", "uid": uid, "resourceVersion": "7"},
        "spec": {"workload": {"manifests": []}},
        "status": {"conditions": [{"type": "Complete", "status": complete,
            "reason": "ConditionRulesAggregated", "message": "",
            "lastTransitionTime": "2026-01-01T10:00:00Z"}]},
    });
    if let Some(ttl) = ttl {
        w["spec"]["deleteOption"] = json!({"ttlSecondsAfterFinished": ttl});
    }
    if deleting {
        w["metadata"]["deletionTimestamp"] = json!("2026-01-01T10:00:01Z");
        w["metadata"]["finalizers"] = json!(["x"]);
    }
    w
}

async fn run(start: Option<Value>, uid: &str, now: &str) -> (GcOutcome, Hub) {
    run_hub(
        Hub {
            work: start,
            ..Hub::default()
        },
        uid,
        now,
        true,
    )
    .await
}

async fn run_hub(hub: Hub, uid: &str, now: &str, deletion_event: bool) -> (GcOutcome, Hub) {
    let hub = Arc::new(Mutex::new(hub));
    let client = fake_client(hub.clone());
    let kube_hub = KubeHub::new(client, "c1", event_reporter(None));
    let now: Timestamp = now.parse().expect("test timestamp");
    let outcome = collect_at(&kube_hub, deletion_event, "w", uid, || now)
        .await
        .expect("the fake hub answers every request");
    let hub = std::mem::take(&mut *hub.lock().expect("not poisoned"));
    (outcome, hub)
}

fn methods(hub: &Hub) -> Vec<(&str, &str)> {
    hub.seen
        .iter()
        .map(|(m, p, _)| (m.as_str(), p.as_str()))
        .collect()
}

#[tokio::test]
async fn due_work_is_deleted_with_a_uid_precondition_and_an_event() {
    let (outcome, hub) = run(
        Some(work("u1", Some(5), "True", false)),
        "u1",
        "2026-01-01T10:00:06Z",
    )
    .await;
    assert_eq!(
        outcome,
        GcOutcome::Deleted {
            lag: Duration::from_secs(1)
        }
    );
    assert_eq!(
        methods(&hub),
        [
            ("GET", WORK_PATH),
            ("DELETE", WORK_PATH),
            ("POST", EVENTS_PATH)
        ]
    );
    assert_eq!(hub.seen[1].2["preconditions"]["uid"], "u1");
    let event = &hub.seen[2].2;
    assert_eq!(event["reason"], EVENT_REASON);
    assert_eq!(event["regarding"]["kind"], "ManifestWork");
    assert_eq!(event["regarding"]["uid"], "u1");
    assert!(hub.work.is_none());
}

#[tokio::test]
async fn without_deletion_events_a_due_work_costs_one_hub_write() {
    let hub = Hub {
        work: Some(work("u1", Some(5), "True", false)),
        ..Hub::default()
    };
    let (outcome, hub) = run_hub(hub, "u1", "2026-01-01T10:00:06Z", false).await;
    assert_eq!(
        outcome,
        GcOutcome::Deleted {
            lag: Duration::from_secs(1)
        }
    );
    assert_eq!(methods(&hub), [("GET", WORK_PATH), ("DELETE", WORK_PATH)]);
    assert!(hub.work.is_none());
}

#[tokio::test]
async fn not_yet_due_is_not_deleted() {
    let (outcome, hub) = run(
        Some(work("u1", Some(5), "True", false)),
        "u1",
        "2026-01-01T10:00:03Z",
    )
    .await;
    assert_eq!(outcome, GcOutcome::NotYetDue(Duration::from_secs(2)));
    assert_eq!(methods(&hub), [("GET", WORK_PATH)]);
}

#[tokio::test]
async fn no_longer_complete_or_ttl_removed_is_not_deleted() {
    for w in [
        work("u1", Some(0), "False", false),
        work("u1", None, "True", false),
    ] {
        let (outcome, hub) = run(Some(w), "u1", "2026-01-02T00:00:00Z").await;
        assert_eq!(outcome, GcOutcome::NoLongerComplete);
        assert_eq!(methods(&hub), [("GET", WORK_PATH)]);
    }
}

#[tokio::test]
async fn a_recreated_work_is_not_deleted_by_the_old_deadline() {
    let (outcome, hub) = run(
        Some(work("u2", Some(0), "True", false)),
        "u1",
        "2026-01-02T00:00:00Z",
    )
    .await;
    assert_eq!(outcome, GcOutcome::Replaced);
    assert_eq!(methods(&hub), [("GET", WORK_PATH)]);
    assert!(hub.work.is_some());
}

#[tokio::test]
async fn gone_or_deleting_work_is_left_alone() {
    let (outcome, hub) = run(None, "u1", "2026-01-02T00:00:00Z").await;
    assert_eq!(outcome, GcOutcome::AlreadyGone);
    assert_eq!(methods(&hub), [("GET", WORK_PATH)]);

    let (outcome, hub) = run(
        Some(work("u1", Some(0), "True", true)),
        "u1",
        "2026-01-02T00:00:00Z",
    )
    .await;
    assert_eq!(outcome, GcOutcome::AlreadyGone);
    assert_eq!(methods(&hub), [("GET", WORK_PATH)]);
}

#[tokio::test]
async fn a_work_recreated_between_read_and_delete_survives() {
    let hub = Hub {
        work: Some(work("u1", Some(0), "True", false)),
        replace_after_get: Some(work("u2", Some(0), "True", false)),
        ..Hub::default()
    };
    let (outcome, hub) = run_hub(hub, "u1", "2026-01-02T00:00:00Z", true).await;
    assert_eq!(outcome, GcOutcome::Replaced);
    assert_eq!(methods(&hub), [("GET", WORK_PATH), ("DELETE", WORK_PATH)]);
    assert_eq!(
        hub.work.as_ref().map(|w| &w["metadata"]["uid"]),
        Some(&json!("u2"))
    );
}
