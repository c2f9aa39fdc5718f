//! A progressive rollout over three clusters, decided as ManifestWorkReplicaSet decides it: each
//! cluster's rollout status from its work's conditions (OCM's `clusterRolloutStatusFunc`) and the
//! progressive step (sdk-go's `progressivePerCluster` with `maxConcurrency` 1, `maxFailures` 0 and
//! a `minSuccessTime`), ported below. Three agents serve three cluster namespaces of one hub on
//! one spoke; a test "controller" sets each Widget's readiness. The first cluster's readiness
//! flaps after a new version: the rollout must never count a failure for it (a held `Degraded`),
//! and never move on before `minSuccessTime` of steady health at the new generation. With the
//! agent of `main` it moves on at once: `Progressing` False kept its transition time from the
//! previous generation, so the soak had long passed (ocm#1237).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::agent_common::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use test_support::{AgentProcess, TestCluster, unique_name};
use work_api::ManifestWork;

const HOLDS: &str = "work.open-cluster-management.io/holds";
/// The annotation the driver marks a work's template version with (ManifestWorkReplicaSet
/// compares the work's spec with its template; a version says the same).
const TEMPLATE: &str = "rollout.example.com/template";

/// The rollout's `minSuccessTime`.
const MIN_SUCCESS: Duration = Duration::from_secs(3);

/// A cluster's rollout status, as sdk-go's `RolloutStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rollout {
    ToApply,
    Progressing,
    Succeeded,
    Failed,
}

/// `isConditionReady`: there, for the work's generation, and True when asked.
fn ready(c: Option<&Condition>, generation: Option<i64>, require_true: bool) -> bool {
    c.is_some_and(|c| c.observed_generation == generation && (!require_true || c.status == "True"))
}

/// OCM's `clusterRolloutStatusFunc` over a work that matches the template: the status and its
/// transition time.
fn cluster_status(work: &ManifestWork) -> (Rollout, Option<Time>) {
    let generation = work.metadata.generation;
    let (applied, progressing, degraded, available) = (
        work_condition(work, "Applied"),
        work_condition(work, "Progressing"),
        work_condition(work, "Degraded"),
        work_condition(work, "Available"),
    );
    let to_apply = !ready(applied, generation, true)
        || (!ready(progressing, generation, false) && !ready(available, generation, false))
        || degraded.is_some_and(|d| d.observed_generation != generation);
    if to_apply {
        return (Rollout::ToApply, None);
    }
    let since = |c: &Condition| Some(c.last_transition_time.clone());
    let is = |c: Option<&Condition>, s: &str| c.is_some_and(|c| c.status == s);
    let Some(p) = progressing.filter(|p| p.observed_generation == generation) else {
        // `determineStatusFromAvailable`
        return match (degraded, available) {
            (Some(d), _) if d.status == "True" => (Rollout::Failed, since(d)),
            (_, Some(a)) if a.status == "True" => (Rollout::Succeeded, since(a)),
            (_, Some(a)) => (Rollout::Progressing, since(a)),
            _ => (Rollout::Progressing, None),
        };
    };
    match p.status.as_str() {
        "True" if is(degraded, "True") => (Rollout::Failed, degraded.and_then(since)),
        "True" => (Rollout::Progressing, since(p)),
        "False" => (Rollout::Succeeded, since(p)),
        _ => (Rollout::Progressing, since(p)),
    }
}

/// sdk-go's `progressivePerCluster` with rollout size 1, no failure allowed and no timeout: the
/// clusters to (re)apply the template to now. `existing` are the clusters whose work matches the
/// template, with their status; `all` every cluster of the placement.
fn to_roll_out(
    existing: &[(String, Rollout, Option<Time>)],
    all: &[String],
    now: Timestamp,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut failures = 0;
    let mut sorted = existing.to_vec();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    for (cluster, status, since) in &sorted {
        match status {
            Rollout::ToApply | Rollout::Progressing | Rollout::Failed => out.push(cluster.clone()),
            Rollout::Succeeded => {
                // Still soaking: `RolloutClock.Now().Before(since + minSuccessTime)`.
                let soaked = since.as_ref().is_some_and(|t| {
                    now >= t.0
                        + k8s_openapi::jiff::SignedDuration::try_from(MIN_SUCCESS)
                            .unwrap_or_default()
                });
                if !soaked {
                    out.push(cluster.clone());
                }
            }
        }
        if *status == Rollout::Failed {
            failures += 1;
        }
        // The rollout size is 1, and no failure is allowed.
        if !out.is_empty() || failures > 0 {
            return out;
        }
    }
    let mut rest: Vec<&String> = all
        .iter()
        .filter(|c| !sorted.iter().any(|(e, _, _)| e == *c))
        .collect();
    rest.sort();
    out.extend(rest.into_iter().take(1).cloned());
    out
}

/// One cluster of the placement: its hub namespace, spoke namespace, agent and work name.
struct Member {
    cluster: String,
    ns: String,
    work: String,
    _agent: AgentProcess,
}

/// What the driver and the controller share with the test.
#[derive(Default)]
struct World {
    /// (cluster, template version, when the driver wrote it)
    applied: Mutex<Vec<(String, u32, Instant)>>,
    /// (cluster, status, when seen) for every status change the driver saw
    seen: Mutex<Vec<(String, Rollout, Instant)>>,
}

fn widget_manifest(group: &str, ns: &str, size: u32) -> Value {
    json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
           "metadata": {"name": "app", "namespace": ns}, "spec": {"size": size}})
}

/// The work template for a cluster: the Widget with its rules, and the holds.
fn template(group: &str, ns: &str, version: u32) -> (Value, Value) {
    let spec = json!({
        "workload": {"manifests": [widget_manifest(group, ns, version)]},
        "manifestConfigs": [{
            "resourceIdentifier": {"group": group, "resource": "widgets", "name": "app", "namespace": ns},
            "conditionRules": [
                {"condition": "Progressing", "type": "CEL",
                 "celExpressions": ["object.?status.?ready.orValue(false) == false"], "message": "not ready yet"},
                {"condition": "Degraded", "type": "CEL",
                 "celExpressions": ["object.?status.?ready.orValue(true) == false"], "message": "not ready"}
            ]
        }]
    });
    let holds = json!([
        {"condition": "Degraded", "status": "True", "for": "4s"},
        {"condition": "Progressing", "status": "False", "for": "2s"}
    ]);
    let annotations = json!({HOLDS: holds.to_string(), TEMPLATE: version.to_string()});
    (spec, annotations)
}

/// One pass of the driver: reads the works, decides, writes the template where it must.
async fn drive(hub: &TestCluster, group: &str, members: &[Member], version: u32, world: &World) {
    let mut existing = Vec::new();
    for m in members {
        let works: Api<ManifestWork> = Api::namespaced(hub.client.clone(), &m.cluster);
        let Ok(Some(work)) = works.get_opt(&m.work).await else {
            continue;
        };
        let current = work
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TEMPLATE))
            .is_some_and(|v| *v == version.to_string());
        if !current {
            continue;
        }
        let (status, since) = cluster_status(&work);
        let mut seen = world.seen.lock().expect("seen");
        if seen
            .iter()
            .rev()
            .find(|(c, _, _)| *c == m.cluster)
            .map(|(_, s, _)| *s)
            != Some(status)
        {
            seen.push((m.cluster.clone(), status, Instant::now()));
        }
        existing.push((m.cluster.clone(), status, since));
    }
    let all: Vec<String> = members.iter().map(|m| m.cluster.clone()).collect();
    for cluster in to_roll_out(&existing, &all, Timestamp::now()) {
        if existing.iter().any(|(c, _, _)| *c == cluster) {
            continue; // its work is the template already: it rolls on by itself
        }
        let Some(m) = members.iter().find(|m| m.cluster == cluster) else {
            continue;
        };
        let (spec, annotations) = template(group, &m.ns, version);
        let works: Api<ManifestWork> = Api::namespaced(hub.client.clone(), &m.cluster);
        let written = match works.get_opt(&m.work).await {
            Ok(Some(_)) => works
                .patch(
                    &m.work,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": annotations}, "spec": spec})),
                )
                .await
                .map(|_| ()),
            _ => {
                let work: ManifestWork = serde_json::from_value(json!({
                    "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                    "metadata": {"name": m.work, "namespace": m.cluster, "annotations": annotations},
                    "spec": spec
                }))
                .expect("a work");
                works
                    .create(&PostParams::default(), &work)
                    .await
                    .map(|_| ())
            }
        };
        written.unwrap_or_else(|e| panic!("writing the template to {cluster}: {e}"));
        world
            .applied
            .lock()
            .expect("applied")
            .push((cluster.clone(), version, Instant::now()));
    }
}

/// When the driver wrote `version` to `cluster`, if it did.
fn applied_at(world: &World, cluster: &str, version: u32) -> Option<Instant> {
    world
        .applied
        .lock()
        .expect("applied")
        .iter()
        .find(|(c, v, _)| c == cluster && *v == version)
        .map(|(_, _, t)| *t)
}

#[tokio::test]
async fn a_progressive_rollout_never_moves_on_before_min_success_time_of_steady_health() {
    let hub = TestCluster::hub().await;
    let spoke = TestCluster::spoke().await;
    let suffix = unique_name("g");
    let group = format!("{suffix}.rollout.example.com");
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(spoke.client.clone());
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(widget_crd(&group)).expect("CRD"),
    )
    .await
    .expect("install the CRD");
    let mut members = Vec::new();
    for i in 0..3 {
        let cluster = hub.namespace(&format!("rollout-{i}")).await;
        let ns = spoke.namespace(&format!("rollout-{i}")).await;
        let agent = AgentProcess::start(agent_args(
            &hub.kubeconfig,
            &spoke.kubeconfig,
            &cluster,
            &[],
        ));
        members.push(Member {
            cluster,
            ns,
            work: unique_name("web"),
            _agent: agent,
        });
    }
    // The clusters in the order the rollout takes them (it sorts their names).
    members.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    let members = Arc::new(members);
    let world = Arc::new(World::default());
    let readiness: Arc<Vec<AtomicBool>> = Arc::new((0..3).map(|_| AtomicBool::new(true)).collect());
    // The Widgets' controller: their status.ready as the test says.
    let controller = {
        let (spoke, members, readiness, group) = (
            spoke.client.clone(),
            members.clone(),
            readiness.clone(),
            group.clone(),
        );
        tokio::spawn(async move {
            let ar = kube::discovery::ApiResource {
                group: group.clone(),
                version: "v1".into(),
                api_version: format!("{group}/v1"),
                kind: "Widget".into(),
                plural: "widgets".into(),
            };
            loop {
                for (i, m) in members.iter().enumerate() {
                    let widgets: Api<DynamicObject> =
                        Api::namespaced_with(spoke.clone(), &m.ns, &ar);
                    let want = readiness[i].load(Ordering::SeqCst);
                    if let Ok(Some(w)) = widgets.get_opt("app").await
                        && w.data["status"]["ready"].as_bool() != Some(want)
                    {
                        let _ = widgets
                            .patch(
                                "app",
                                &PatchParams::default(),
                                &Patch::Merge(json!({"status": {"ready": want}})),
                            )
                            .await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let version = Arc::new(std::sync::atomic::AtomicU32::new(1));
    let driver = {
        let (hub, members, world, group, version) = (
            TestCluster::hub().await,
            members.clone(),
            world.clone(),
            group.clone(),
            version.clone(),
        );
        tokio::spawn(async move {
            loop {
                drive(
                    &hub,
                    &group,
                    &members,
                    version.load(Ordering::SeqCst),
                    &world,
                )
                .await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let last = members[2].cluster.clone();
    let wait_applied = |cluster: String, v: u32| {
        let world = world.clone();
        async move {
            test_support::wait_for(
                &format!("version {v} written to {cluster}"),
                TIMEOUT,
                || {
                    let world = world.clone();
                    let cluster = cluster.clone();
                    async move { applied_at(&world, &cluster, v) }
                },
            )
            .await
        }
    };
    // Version 1 rolls out over the three clusters.
    wait_applied(last.clone(), 1).await;
    let first = members[0].cluster.clone();
    let second = members[1].cluster.clone();
    // Version 2: the first cluster's Widget stays ready a moment (its controller has not seen
    // the new spec yet), then flaps, then is steadily ready.
    version.store(2, Ordering::SeqCst);
    wait_applied(first.clone(), 2).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for _ in 0..3 {
        readiness[0].store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(1)).await;
        readiness[0].store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // The last flip to ready was set a second ago; the controller writes it within 50 ms.
    let steady = Instant::now() - Duration::from_secs(1);
    let moved_on = wait_applied(second.clone(), 2).await;
    driver.abort();
    controller.abort();
    let seen = world.seen.lock().expect("seen").clone();
    let timeline: BTreeMap<String, Vec<(Rollout, u128)>> =
        seen.iter().fold(BTreeMap::new(), |mut m, (c, s, t)| {
            m.entry(c.clone())
                .or_default()
                .push((*s, t.elapsed().as_millis()));
            m
        });
    println!("rollout statuses (ms ago): {timeline:?}");
    let written_first = applied_at(&world, &first, 2).expect("written");
    println!(
        "version 2: first cluster written, then steady after {:?}, next cluster written {:?} after steady health (minSuccessTime {MIN_SUCCESS:?})",
        steady.saturating_duration_since(written_first),
        moved_on.saturating_duration_since(steady)
    );
    assert!(
        moved_on >= steady && moved_on - steady >= MIN_SUCCESS,
        "the rollout moved on {:?} after the first cluster was steadily healthy, before minSuccessTime {MIN_SUCCESS:?}",
        moved_on.saturating_duration_since(steady)
    );
    assert!(
        !seen
            .iter()
            .any(|(c, s, _)| *c == first && *s == Rollout::Failed),
        "a flapping readiness counted as a failure: {timeline:?}"
    );
}
