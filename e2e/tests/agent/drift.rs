//! Drift (`work.open-cluster-management.io/drift`) and conditions that hold
//! (`work.open-cluster-management.io/holds`) on the local control plane, Kubernetes hub: a hand
//! edit reported (and kept, or written back), an object that is not the work's left alone until
//! it matches, Secret values nowhere but on the spoke, a flapping readiness that never flips a
//! held condition, and a new generation that restarts `Progressing`. Each test fails without the
//! feature: today's agent writes every edit back silently, takes over any object, and reports
//! every flip at once.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::agent_common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use work_api::ManifestWork;

const DRIFT: &str = "work.open-cluster-management.io/drift";
const HOLDS: &str = "work.open-cluster-management.io/holds";

/// What the issue asks: a hand edit reported within a second.
const REPORT_WITHIN: Duration = Duration::from_secs(1);
/// A correction writes the object back before it reports: bounded more loosely.
const CORRECTED_WITHIN: Duration = Duration::from_secs(5);

/// Every version of one work the hub's watch delivered, with when it arrived.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(Instant, ManifestWork)>>>);

impl Seen {
    /// Watches the work `name` of `env` from now on.
    fn watch(env: &Env, name: &str) -> (Seen, tokio::task::JoinHandle<()>) {
        let seen = Seen::default();
        let log = seen.clone();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let works = env.works();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(works, config));
            while let Some(event) = events.next().await {
                if let Ok(watcher::Event::Apply(w) | watcher::Event::InitApply(w)) = event {
                    log.0.lock().expect("seen").push((Instant::now(), w));
                }
            }
        });
        (seen, task)
    }

    /// When a version satisfying `pred` first arrived at or after `after`.
    fn first_after(&self, after: Instant, pred: impl Fn(&ManifestWork) -> bool) -> Option<Instant> {
        self.0
            .lock()
            .expect("seen")
            .iter()
            .find(|(t, w)| *t >= after && pred(w))
            .map(|(t, _)| *t)
    }

    /// Whether any version arrived at or after `after` satisfies `pred`.
    fn any_after(&self, after: Instant, pred: impl Fn(&ManifestWork) -> bool) -> bool {
        self.first_after(after, pred).is_some()
    }

    /// Waits until a version satisfying `pred` arrived at or after `after`; when.
    async fn wait(
        &self,
        after: Instant,
        what: &str,
        pred: impl Fn(&ManifestWork) -> bool,
    ) -> Instant {
        let pred = &pred;
        test_support::wait_for(what, TIMEOUT, || async move {
            self.first_after(after, pred).ok_or_else(|| {
                let last = self
                    .0
                    .lock()
                    .expect("seen")
                    .last()
                    .map(|(_, w)| status_text(w));
                format!("last status: {}", last.unwrap_or_default())
            })
        })
        .await
    }
}

/// The agent's share of a report's delay: from the spoke's dispatch of the edit (`seen`) to the
/// report on the hub; and the whole delay from the edit call.
fn delays(
    edited: Instant,
    seen: &Arc<Mutex<Option<Instant>>>,
    reported: Instant,
) -> (Duration, Duration) {
    let seen = seen.lock().expect("seen").unwrap_or(edited);
    (reported.saturating_duration_since(seen), reported - edited)
}

fn status_text(w: &ManifestWork) -> String {
    serde_json::to_string(&w.status).unwrap_or_default()
}

fn drifted(w: &ManifestWork, ordinal: i32) -> Option<&Condition> {
    manifest_condition(w, ordinal, "Drifted")
}

fn drifted_is(w: &ManifestWork, ordinal: i32, status: &str, reason: &str, words: &str) -> bool {
    drifted(w, ordinal)
        .is_some_and(|c| c.status == status && c.reason == reason && c.message.contains(words))
}

/// Writes the agent sent the hub (every verb that changes something).
fn hub_writes(text: &str) -> f64 {
    ["create", "update", "patch", "delete"]
        .iter()
        .map(|v| api_requests(text, "hub", v))
        .sum()
}

/// Requests the agent sent the spoke besides its watches.
fn spoke_requests(text: &str) -> f64 {
    ["get", "list", "create", "update", "patch", "delete"]
        .iter()
        .map(|v| api_requests(text, "spoke", v))
        .sum()
}

async fn create_annotated(env: &Env, name: &str, annotations: Value, spec: Value) {
    env.create_work_annotated(name, annotations, spec).await;
}

/// Patches the ConfigMap `name`'s data as someone on the spoke would.
async fn edit_configmap(env: &Env, name: &str, data: Value) {
    env.configmaps()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": data})),
        )
        .await
        .unwrap_or_else(|e| panic!("editing ConfigMap {name}: {e}"));
}

/// Creates the ConfigMap `name` as someone else would (no label, no owner).
async fn create_configmap(env: &Env, name: &str, data: Value) {
    let cm = serde_json::from_value(configmap(&env.ns, name, data)).expect("a ConfigMap");
    env.configmaps()
        .create(&PostParams::default(), &cm)
        .await
        .unwrap_or_else(|e| panic!("creating ConfigMap {name}: {e}"));
}

fn color(obj: &kube::api::DynamicObject) -> String {
    data(obj).get("color").cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_hand_edit_to_a_report_only_manifest_is_reported_within_a_second_and_kept() {
    let env = Env::start("drift-report").await;
    let name = env.work_name("report");
    let (seen, _watch) = Seen::watch(&env, &name);
    let spec = json!({"workload": {"manifests": [configmap(&env.ns, "watched", json!({"color": "red"}))]}});
    create_annotated(&env, &name, json!({DRIFT: "ReportOnly"}), spec).await;
    // ReportOnly never writes: the object is not created, and its absence is reported.
    let start = Instant::now();
    seen.wait(start, "absent reported", |w| {
        drifted_is(w, 0, "True", "ObjectAbsent", "does not exist")
    })
    .await;
    assert!(
        env.configmaps()
            .get_opt("watched")
            .await
            .expect("get")
            .is_none(),
        "a ReportOnly manifest created its object"
    );
    // Someone creates it as the work wants it: no drift (its own watch, by name, saw it).
    let created = Instant::now();
    create_configmap(&env, "watched", json!({"color": "red"})).await;
    let matched = seen
        .wait(created, "matches", |w| {
            drifted_is(w, 0, "False", "NoDrift", "matches the work")
                && manifest_is(w, 0, "Applied", "True")
                && manifest_is(w, 0, "Available", "True")
        })
        .await;
    println!(
        "report-only: a created object matched in {:?}",
        matched - created
    );
    let before = metrics_text(env.http_port).await;
    let (dispatched, _spoke) =
        spoke_seen(env.configmaps(), "watched", |o| color(o) == "blue").await;
    // The hand edit.
    let edited_at = k8s_openapi::jiff::Timestamp::now();
    let edited = Instant::now();
    edit_configmap(&env, "watched", json!({"color": "blue"})).await;
    let reported = seen
        .wait(edited, "the edit reported", |w| {
            drifted_is(
                w,
                0,
                "True",
                "DriftDetected",
                r#"data.color is "blue", the work has "red""#,
            ) && work_is(w, "Drifted", "True")
        })
        .await;
    let (latency, whole) = delays(edited, &dispatched, reported);
    println!(
        "report-only: hand edit to Drifted on the hub: {latency:?} from the spoke's watch event ({whole:?} from the edit call)"
    );
    assert!(latency < REPORT_WITHIN, "reported after {latency:?}");
    let after = wait_reconciled_after(env.http_port, reconciles(&before)).await;
    assert_eq!(
        hub_writes(&after) - hub_writes(&before),
        1.0,
        "one hub write for the drift episode's report"
    );
    assert_eq!(
        spoke_requests(&after) - spoke_requests(&before),
        0.0,
        "the drift was seen on the watch: no request to the spoke"
    );
    let cm = env
        .configmaps()
        .get("watched")
        .await
        .expect("the ConfigMap");
    assert_eq!(color(&cm), "blue", "a ReportOnly manifest was written back");
    assert!(
        owners(&cm).is_empty(),
        "a ReportOnly manifest took the object over"
    );
    // Since when: the condition's transition time, from the edit's second on.
    let work = env.works().get(&name).await.expect("the work");
    let since = drifted(&work, 0).expect("Drifted").last_transition_time.0;
    assert!(
        since.as_second() >= edited_at.as_second(),
        "Drifted since {since}, before the edit at {edited_at}"
    );
    // Put back by hand: the drift is over.
    let fixed = Instant::now();
    edit_configmap(&env, "watched", json!({"color": "red"})).await;
    seen.wait(fixed, "the drift cleared", |w| {
        drifted_is(w, 0, "False", "NoDrift", "matches the work") && work_is(w, "Drifted", "False")
    })
    .await;
}

#[tokio::test]
async fn a_hand_edit_to_a_default_manifest_is_written_back_and_reported() {
    let env = Env::start("drift-correct").await;
    let name = env.work_name("correct");
    let (seen, _watch) = Seen::watch(&env, &name);
    let spec =
        json!({"workload": {"manifests": [configmap(&env.ns, "fixed", json!({"color": "red"}))]}});
    env.create_work(&name, spec).await;
    let work = env
        .wait_work(&name, "applied", |w| work_is(w, "Applied", "True"))
        .await;
    assert!(
        drifted(&work, 0).is_none() && work_condition(&work, "Drifted").is_none(),
        "no Drifted before any drift: the status is upstream's"
    );
    let before = metrics_text(env.http_port).await;
    let (dispatched, _spoke) = spoke_seen(env.configmaps(), "fixed", |o| color(o) == "blue").await;
    let edited = Instant::now();
    edit_configmap(&env, "fixed", json!({"color": "blue"})).await;
    let reported = seen
        .wait(edited, "the correction reported", |w| {
            drifted_is(
                w,
                0,
                "False",
                "DriftCorrected",
                r#"data.color is "blue", the work has "red""#,
            )
        })
        .await;
    let (latency, whole) = delays(edited, &dispatched, reported);
    println!(
        "correct: hand edit to DriftCorrected on the hub: {latency:?} from the spoke's watch event ({whole:?} from the edit call)"
    );
    // Written back, then reported: two requests, not bounded by the 1 s a report alone is.
    assert!(latency < CORRECTED_WITHIN, "reported after {latency:?}");
    env.wait_object(&env.configmaps(), "fixed", "written back", |o| {
        color(o) == "red"
    })
    .await;
    let after = wait_reconciled_after(env.http_port, reconciles(&before)).await;
    assert_eq!(
        hub_writes(&after) - hub_writes(&before),
        1.0,
        "one hub write for the episode"
    );
    assert_eq!(
        metric_value(&after, "work_agent_drift_corrections_total"),
        1.0
    );
    // The same edit again: written back, and the report stands (no second write).
    let again = metrics_text(env.http_port).await;
    edit_configmap(&env, "fixed", json!({"color": "blue"})).await;
    env.wait_object(&env.configmaps(), "fixed", "written back again", |o| {
        color(o) == "red"
    })
    .await;
    let later = wait_reconciled_after(env.http_port, reconciles(&again)).await;
    assert_eq!(
        metric_value(&later, "work_agent_drift_corrections_total"),
        2.0
    );
    assert_eq!(
        hub_writes(&later) - hub_writes(&again),
        0.0,
        "the same fields corrected again write nothing"
    );
}

#[tokio::test]
async fn an_object_that_is_not_the_works_is_taken_over_only_once_it_matches() {
    let env = Env::start("drift-takeover").await;
    let name = env.work_name("takeover");
    let (seen, _watch) = Seen::watch(&env, &name);
    create_configmap(&env, "theirs", json!({"color": "blue"})).await;
    create_configmap(&env, "same", json!({"color": "red"})).await;
    let spec = json!({"workload": {"manifests": [
        configmap(&env.ns, "theirs", json!({"color": "red"})),
        configmap(&env.ns, "same", json!({"color": "red"})),
        configmap(&env.ns, "new", json!({"color": "red"})),
    ]}});
    create_annotated(&env, &name, json!({DRIFT: "TakeOverIfIdentical"}), spec).await;
    let start = Instant::now();
    seen.wait(start, "the different object left alone", |w| {
        drifted_is(
            w,
            0,
            "True",
            "TakeOverRefused",
            r#"data.color is "blue", the work has "red""#,
        ) && manifest_is(w, 0, "Applied", "False")
            && manifest_is(w, 1, "Applied", "True")
            && manifest_is(w, 2, "Applied", "True")
    })
    .await;
    let theirs = env.configmaps().get("theirs").await.expect("theirs");
    assert_eq!(color(&theirs), "blue", "a different object was overwritten");
    assert!(
        owners(&theirs).is_empty(),
        "a different object was taken over"
    );
    let applied = env.applied_name(&name);
    for cm in ["same", "new"] {
        let obj = env.configmaps().get(cm).await.expect("adopted or created");
        assert_eq!(
            owners(&obj),
            std::slice::from_ref(&applied),
            "{cm} is the work's"
        );
    }
    // Whoever owns it makes it match: now it is taken over.
    let fixed = Instant::now();
    edit_configmap(&env, "theirs", json!({"color": "red"})).await;
    seen.wait(fixed, "taken over once identical", |w| {
        manifest_is(w, 0, "Applied", "True") && drifted_is(w, 0, "False", "NoDrift", "")
    })
    .await;
    env.wait_object(&env.configmaps(), "theirs", "owned by the work", |o| {
        owners(o) == [applied.clone()]
    })
    .await;
}

#[tokio::test]
async fn secret_values_never_leave_the_spoke() {
    let env = Env::start("drift-secret").await;
    let name = env.work_name("secret");
    let (seen, _watch) = Seen::watch(&env, &name);
    let unique = test_support::unique_name("v");
    let values: Vec<String> = (1..=4).map(|i| format!("{unique}-secret-{i}")).collect();
    // As the API server writes Secret data: base64, through the type that encodes it.
    let b64 = |s: &str| {
        serde_json::to_value(k8s_openapi::ByteString(s.as_bytes().to_vec()))
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let secrets: Api<Secret> = Api::namespaced(env.spoke.client.clone(), &env.ns);
    // The ReportOnly Secret exists before the work, as it wants it.
    let reported = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "reported", "namespace": env.ns},
        "data": {"password": b64(&values[2])}});
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(reported.clone()).expect("Secret"),
        )
        .await
        .expect("create the Secret");
    let corrected = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "corrected", "namespace": env.ns},
        "stringData": {"token": values[0]}});
    let modes = json!([{"manifest": 1, "mode": "ReportOnly"}]);
    let spec = json!({"workload": {"manifests": [corrected, reported]}});
    create_annotated(&env, &name, json!({DRIFT: modes.to_string()}), spec).await;
    let start = Instant::now();
    seen.wait(start, "both matching", |w| {
        manifest_is(w, 0, "Applied", "True") && drifted_is(w, 1, "False", "NoDrift", "")
    })
    .await;
    let set = |key: &str, value: &str| json!({"data": {key: b64(value)}});
    let edited = Instant::now();
    for (secret, patch) in [
        ("corrected", set("token", &values[1])),
        ("reported", set("password", &values[3])),
    ] {
        secrets
            .patch(secret, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect("edit the Secret");
    }
    let last = seen
        .wait(edited, "both edits reported", |w| {
            drifted_is(
                w,
                0,
                "False",
                "DriftCorrected",
                "stringData.token differs (Secret data, value not shown)",
            ) && drifted_is(
                w,
                1,
                "True",
                "DriftDetected",
                "data.password differs (Secret data, value not shown)",
            )
        })
        .await;
    println!("secret edits reported in {:?}", last - edited);
    let corrected_now = secrets.get("corrected").await.expect("the Secret");
    let token = corrected_now
        .data
        .as_ref()
        .and_then(|d| d.get("token"))
        .map(|b| b.0.clone())
        .unwrap_or_default();
    assert_eq!(
        token,
        values[0].as_bytes(),
        "the Correct Secret was written back"
    );
    // Nowhere in any status the hub saw, nor in the agent's log (debug level).
    let statuses: Vec<String> = seen
        .0
        .lock()
        .expect("seen")
        .iter()
        .map(|(_, w)| status_text(w))
        .collect();
    let log = env.agent.log();
    for value in &values {
        for form in [value.clone(), b64(value)] {
            assert!(
                statuses.iter().all(|s| !s.contains(&form)),
                "a Secret value is in a status"
            );
            assert!(!log.contains(&form), "a Secret value is in the agent's log");
        }
    }
}

/// A namespaced Widget `name` with `spec` (its CRD is [`widget_crd`]).
fn widget(group: &str, ns: &str, name: &str) -> Value {
    json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
           "metadata": {"name": name, "namespace": ns}, "spec": {"size": 1}})
}

/// Sets the Widget's `status.ready`, as its controller would.
async fn set_ready(widgets: &Api<kube::api::DynamicObject>, name: &str, ready: bool) {
    widgets
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": ready}})),
        )
        .await
        .unwrap_or_else(|e| panic!("setting {name} ready={ready}: {e}"));
}

#[tokio::test]
async fn a_flapping_readiness_does_not_flip_a_held_condition() {
    let env = Env::start("holds").await;
    let group = format!("{}.holds.example.com", env.ns);
    install_widget_crd(&env, &group).await;
    let widgets = env.spoke_api(&group, "v1", "Widget", "widgets");
    let name = env.work_name("flap");
    let (seen, _watch) = Seen::watch(&env, &name);
    let hold = Duration::from_secs(6);
    let holds = json!([{"condition": "Degraded", "status": "True", "for": "6s"}]);
    let spec = json!({
        "workload": {"manifests": [widget(&group, &env.ns, "w")]},
        "manifestConfigs": [{
            "resourceIdentifier": {"group": group, "resource": "widgets", "name": "w", "namespace": env.ns},
            "conditionRules": [{"condition": "Degraded", "type": "CEL",
                "celExpressions": ["object.?status.?ready.orValue(true) == false"],
                "message": "the widget is not ready"}]
        }]
    });
    create_annotated(&env, &name, json!({HOLDS: holds.to_string()}), spec).await;
    let start = Instant::now();
    seen.wait(start, "Degraded False", |w| work_is(w, "Degraded", "False"))
        .await;
    // Readiness flaps: failing 1.5 s, then ready 1.5 s, four times (12 s, twice the hold).
    let flapping = Instant::now();
    for _ in 0..4 {
        set_ready(&widgets, "w", false).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        set_ready(&widgets, "w", true).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let degraded =
        |w: &ManifestWork| work_is(w, "Degraded", "True") || manifest_is(w, 0, "Degraded", "True");
    assert!(
        !seen.any_after(flapping, degraded),
        "a flapping readiness flipped Degraded"
    );
    assert!(
        seen.any_after(flapping, |w| {
            manifest_condition(w, 0, "Degraded").is_some_and(|c| c.reason == "ConditionRuleHeld")
        }),
        "the agent never saw the readiness fail (the test proves nothing)"
    );
    // Then it fails for good: reported once it held, never before.
    let failing = Instant::now();
    set_ready(&widgets, "w", false).await;
    let reported = seen.wait(failing, "Degraded True", degraded).await;
    let after = reported - failing;
    println!(
        "held Degraded reported {after:?} after the readiness failed for good (hold {hold:?})"
    );
    assert!(
        after >= hold,
        "reported after {after:?}, before the {hold:?} hold was over"
    );
    assert!(
        after < hold + Duration::from_secs(5),
        "reported {after:?} after, long past the hold"
    );
    let work = env.works().get(&name).await.expect("the work");
    let c = manifest_condition(&work, 0, "Degraded").expect("Degraded");
    assert_eq!(c.reason, "ConditionRuleEvaluated");
    assert_eq!(c.message, "the widget is not ready");
}

#[tokio::test]
async fn a_new_generation_restarts_progressing() {
    let env = Env::start("progressing").await;
    let name = env.work_name("gen");
    let rules = |data: Value| {
        json!({
            "workload": {"manifests": [configmap(&env.ns, "app", data)]},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "", "resource": "configmaps", "name": "app", "namespace": env.ns},
                "conditionRules": [{"condition": "Progressing", "type": "CEL", "celExpressions": ["false"]}]
            }]
        })
    };
    env.create_work(&name, rules(json!({"v": "1"}))).await;
    let first = env
        .wait_work(&name, "Progressing False", |w| {
            work_is(w, "Progressing", "False")
        })
        .await;
    let since = work_condition(&first, "Progressing")
        .expect("Progressing")
        .last_transition_time
        .clone();
    // Transition times are written to the second: let one go by so a new one shows.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    env.patch_work_spec(&name, rules(json!({"v": "2"}))).await;
    let next = env
        .wait_work(&name, "Progressing of generation 2", |w| {
            work_condition(w, "Progressing").is_some_and(|c| c.observed_generation == Some(2))
        })
        .await;
    let progressing = work_condition(&next, "Progressing").expect("Progressing");
    assert_eq!(progressing.status, "False");
    assert!(
        progressing.last_transition_time.0 > since.0,
        "Progressing kept its time from generation 1: a rollout would count its soak from there"
    );
    let applied = work_condition(&next, "Applied").expect("Applied");
    assert!(
        applied.last_transition_time.0 <= since.0,
        "only Progressing restarts"
    );
}
