//! Built-in readiness inside one work: a custom resource waits until its CRD is Established, an
//! object in a namespace until that Namespace is Active, whatever order the work lists them in,
//! and the wait is written as such (`Applied` Unknown `WaitingForDependency`), never as a failed
//! apply. Every status the hub holds on the way is watched, so one `Applied` False fails the test.
//! Each test prints how long the dependant took after its dependency turned ready, as seen by
//! the same watch client (docs/performance.md, "Readiness inside a work").

mod agent_common;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use agent_common::*;
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use work_api::ManifestWork;

/// Every status of a work the hub's watch delivers, kept by a background task.
struct StatusHistory {
    seen: Arc<Mutex<Vec<(Instant, ManifestWork)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl StatusHistory {
    /// Starts watching the work `name` (before it exists, so nothing is missed).
    fn watch(env: &Env, name: &str) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let events = watcher::watcher(env.works(), config);
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                if let Ok(watcher::Event::Apply(work) | watcher::Event::InitApply(work)) = event {
                    into.lock().expect("history").push((Instant::now(), work));
                }
            }
        });
        Self { seen, task }
    }

    /// Every `Applied` False the work or one of its manifests carried, described.
    fn failures(&self) -> Vec<String> {
        let seen = self.seen.lock().expect("history");
        let mut out = Vec::new();
        for (_, work) in seen.iter() {
            let Some(status) = &work.status else { continue };
            for c in status.conditions.iter().filter(|c| c.type_ == "Applied") {
                if c.status == "False" {
                    out.push(format!("work: {} {}", c.reason, c.message));
                }
            }
            let manifests = status.resource_status.iter().flat_map(|r| &r.manifests);
            for m in manifests {
                for c in m.conditions.iter().filter(|c| c.type_ == "Applied") {
                    if c.status == "False" {
                        out.push(format!(
                            "manifest {}: {} {}",
                            m.resource_meta.ordinal, c.reason, c.message
                        ));
                    }
                }
            }
        }
        out
    }

    /// When the hub first showed manifest `ordinal` Applied True.
    fn applied_at(&self, ordinal: i32) -> Option<Instant> {
        let seen = self.seen.lock().expect("history");
        seen.iter()
            .find(|(_, w)| manifest_is(w, ordinal, "Applied", "True"))
            .map(|(at, _)| *at)
    }
}

impl Drop for StatusHistory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn crd_api(env: &Env) -> Api<DynamicObject> {
    Api::all_with(
        env.spoke.client.clone(),
        &ApiResource::erase::<CustomResourceDefinition>(&()),
    )
}

fn widgets(env: &Env, group: &str, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    Api::namespaced_with(env.spoke.client.clone(), ns, &ar)
}

fn widget(group: &str, ns: &str, name: &str) -> Value {
    json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
           "metadata": {"name": name, "namespace": ns}, "spec": {"size": 1}})
}

/// Prints how long after its CRD turned Established (the spoke's watch) the custom resource at
/// `ordinal` was reported Applied on the hub (the hub's watch): the apply and the status write.
fn print_delay(test: &str, moments: &Moments, history: &StatusHistory, ordinal: i32) {
    if let (Some(ready), Some(applied)) =
        (moments.at("crd Established"), history.applied_at(ordinal))
    {
        let ms = applied.saturating_duration_since(ready).as_secs_f64() * 1000.0;
        println!(
            "readiness-delay {test}: custom resource Applied on the hub {ms:.0} ms after its CRD was Established"
        );
    }
}

/// Starts the watches a test reads its verdict and its delay from: every status of work `name`
/// on the hub, and the moment the `widgets.<group>` CRD turns Established on the spoke.
fn watch_work_and_crd(
    env: &Env,
    name: &str,
    group: &str,
) -> (StatusHistory, Moments, tokio::task::JoinHandle<()>) {
    let history = StatusHistory::watch(env, name);
    let moments = Moments::default();
    let crd_watch = moments.watch(
        crd_api(env),
        &format!("widgets.{group}"),
        "crd",
        Some("Established"),
    );
    (history, moments, crd_watch)
}

/// Deletes the work (orphaning what it applied) and then the test's CRD.
async fn clean_up(env: &Env, work: &str, group: &str) {
    env.delete_work(work).await;
    env.wait_work_gone(work).await;
    let _ = crd_api(env)
        .delete(&format!("widgets.{group}"), &DeleteParams::default())
        .await;
}

#[tokio::test]
async fn a_custom_resource_listed_before_its_crd_waits_for_it_without_failing() {
    let env = Env::start("ready-crd").await;
    let name = env.work_name("crd");
    let group = format!("{}.example.com", test_support::unique_name("g"));
    let (history, moments, crd_watch) = watch_work_and_crd(&env, &name, &group);
    let started = Instant::now();
    env.create_work(
        &name,
        json!({"workload": {"manifests": [widget(&group, &env.ns, "w"), widget_crd(&group)]},
               "deleteOption": {"propagationPolicy": "Orphan"}}),
    )
    .await;
    let work = env
        .wait_work(&name, "Applied", |w| work_is(w, "Applied", "True"))
        .await;
    let took = started.elapsed();
    assert!(manifest_is(&work, 0, "Applied", "True"));
    let live = widgets(&env, &group, &env.ns)
        .get("w")
        .await
        .expect("the custom resource exists");
    assert!(live.metadata.creation_timestamp.is_some());
    assert_eq!(
        history.failures(),
        Vec::<String>::new(),
        "Applied False written on the way"
    );
    println!(
        "readiness-work a_custom_resource_listed_before_its_crd: Applied True after {} ms",
        took.as_millis()
    );
    print_delay(
        "a_custom_resource_listed_before_its_crd",
        &moments,
        &history,
        0,
    );
    crd_watch.abort();
    clean_up(&env, &name, &group).await;
}

#[tokio::test]
async fn a_stack_listed_backwards_is_applied_without_a_failure() {
    let env = Env::start("ready-stack").await;
    let name = env.work_name("stack");
    let ns = test_support::unique_name("stack-ns");
    let group = format!("{}.example.com", test_support::unique_name("g"));
    let (history, moments, crd_watch) = watch_work_and_crd(&env, &name, &group);
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "app", "namespace": ns},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "app"}},
                 "template": {"metadata": {"labels": {"app": "app"}},
                              "spec": {"serviceAccountName": "app",
                                       "containers": [{"name": "main", "image": "registry.invalid/app:1"}]}}}
    });
    let started = Instant::now();
    env.create_work(
        &name,
        json!({"workload": {"manifests": [
            widget(&group, &ns, "w"),
            deployment,
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app", "namespace": ns}},
            widget_crd(&group),
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        ]},
        // Orphan: the test is about applying; waiting for a namespace to terminate is slow.
        "deleteOption": {"propagationPolicy": "Orphan"}}),
    )
    .await;
    let work = env
        .wait_work(&name, "Applied", |w| work_is(w, "Applied", "True"))
        .await;
    println!(
        "readiness-work a_stack_listed_backwards: Applied True after {} ms",
        started.elapsed().as_millis()
    );
    assert!((0..5).all(|i| manifest_is(&work, i, "Applied", "True")));
    widgets(&env, &group, &ns)
        .get("w")
        .await
        .expect("the custom resource exists");
    assert_eq!(
        history.failures(),
        Vec::<String>::new(),
        "Applied False written on the way"
    );
    print_delay("a_stack_listed_backwards", &moments, &history, 0);
    crd_watch.abort();
    clean_up(&env, &name, &group).await;
}

/// A CRD whose kind another CRD of the group holds is not Established while that one exists: the
/// custom resource waits, says for what, is not created, and is applied once the other CRD is
/// gone and its own is Established, woken by that CRD's watch event.
#[tokio::test]
async fn a_custom_resource_waits_while_its_crd_is_not_established_and_says_so() {
    let env = Env::start("ready-wait").await;
    let name = env.work_name("wait");
    let group = format!("{}.example.com", test_support::unique_name("g"));
    // The blocker: kind Widget under another plural, installed first, so the work's CRD has a
    // kind conflict (NamesAccepted False, not Established).
    let mut blocker = widget_crd(&group);
    blocker["metadata"]["name"] = json!(format!("gizmos.{group}"));
    blocker["spec"]["names"] = json!({"kind": "Widget", "plural": "gizmos", "singular": "gizmo", "listKind": "WidgetList"});
    let crds = crd_api(&env);
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(blocker).expect("CRD"),
    )
    .await
    .expect("install the blocking CRD");
    let (history, moments, crd_watch) = watch_work_and_crd(&env, &name, &group);
    env.create_work(
        &name,
        json!({"workload": {"manifests": [widget(&group, &env.ns, "w"), widget_crd(&group)]},
               "deleteOption": {"propagationPolicy": "Orphan"}}),
    )
    .await;
    let waiting = env
        .wait_work(&name, "the custom resource waiting", |w| {
            manifest_condition(w, 0, "Applied").is_some_and(|c| c.reason == "WaitingForDependency")
                && manifest_is(w, 1, "Applied", "True")
        })
        .await;
    let expected = format!(
        "Waiting for CustomResourceDefinition widgets.{group} (manifest 1) to be Established"
    );
    let applied = manifest_condition(&waiting, 0, "Applied").expect("Applied");
    assert_eq!(
        (applied.status.as_str(), applied.message.as_str()),
        ("Unknown", expected.as_str())
    );
    let available = manifest_condition(&waiting, 0, "Available").expect("Available");
    assert_eq!(
        (available.status.as_str(), available.reason.as_str()),
        ("Unknown", "WaitingForDependency")
    );
    let work_applied = work_condition(&waiting, "Applied").expect("work Applied");
    assert_eq!(
        (
            work_applied.status.as_str(),
            work_applied.reason.as_str(),
            work_applied.message.as_str()
        ),
        (
            "Unknown",
            "AppliedManifestWorkWaiting",
            format!("1 of 2 manifests wait for what they depend on: {expected}").as_str()
        )
    );
    // The wait was decided (the status says so) and the kind is served (by the blocker), yet
    // nothing was created.
    assert!(
        widgets(&env, &group, &env.ns)
            .get_opt("w")
            .await
            .unwrap_or(None)
            .is_none(),
        "created while its CRD is not Established"
    );

    crds.delete(&format!("gizmos.{group}"), &DeleteParams::default())
        .await
        .expect("remove the blocker");
    env.wait_work(&name, "Applied", |w| work_is(w, "Applied", "True"))
        .await;
    widgets(&env, &group, &env.ns)
        .get("w")
        .await
        .expect("the custom resource exists");
    print_delay(
        "a_custom_resource_waits_while_its_crd_is_not_established",
        &moments,
        &history,
        0,
    );
    assert_eq!(
        history.failures(),
        Vec::<String>::new(),
        "Applied False written on the way"
    );
    crd_watch.abort();
    clean_up(&env, &name, &group).await;
}
