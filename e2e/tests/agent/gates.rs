//! Declared gates (`work.open-cluster-management.io/gates`): a manifest applied only once a
//! condition of another manifest of its work holds, against real API servers (kwok runs the Job's
//! and the Deployment's pods). Each test watches the spoke and checks the dependant was created
//! only after the gate held; without gates the dependant is created at once and the test fails.

use crate::agent_common::*;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use work_api::ManifestWork;

const GATES: &str = "work.open-cluster-management.io/gates";

/// Creates a work with the gates annotation.
async fn create_gated_work(env: &Env, name: &str, gates: Value, spec: Value) {
    env.create_work_annotated(name, json!({GATES: gates.to_string()}), spec)
        .await;
}

/// The manifest `ordinal`'s `Applied` says it waits (Unknown `WaitingForDependency`) with words
/// containing `words`.
fn waits(work: &ManifestWork, ordinal: i32, words: &str) -> bool {
    manifest_condition(work, ordinal, "Applied").is_some_and(|c| {
        c.status == "Unknown" && c.reason == "WaitingForDependency" && c.message.contains(words)
    })
}

#[tokio::test]
async fn the_deployment_is_applied_only_once_the_migration_job_is_complete() {
    let env = Env::start("gate-migration").await;
    let name = env.work_name("migration");
    let seen = Moments::default();
    let jobs = env.spoke_api("batch", "v1", "Job", "jobs");
    let deployments = env.spoke_api("apps", "v1", "Deployment", "deployments");
    let _job = seen.watch(jobs, "migrate", "job", Some("Complete"));
    let _deployment = seen.watch(deployments.clone(), "web", "deployment", Some("Available"));
    // The Deployment is listed first: only the gate puts it after the Job.
    let gates = json!([{"manifest": 0, "waitFor": {"manifest": 1, "condition": "Complete"}}]);
    let spec = json!({
        "workload": {"manifests": [deployment(&env.ns, "web"), job(&env.ns, "migrate")]},
        "manifestConfigs": [job_complete_config(&env.ns, "migrate")]
    });
    create_gated_work(&env, &name, gates, spec).await;
    let work = env
        .wait_work(&name, "the Deployment waiting for the Job", |w| {
            waits(w, 0, "Job") || manifest_is(w, 0, "Applied", "True")
        })
        .await;
    assert!(
        waits(&work, 0, "to have Complete True (gate)"),
        "the Deployment did not wait for the Job: {:?}",
        manifest_condition(&work, 0, "Applied")
    );
    assert!(
        deployments.get_opt("web").await.expect("get").is_none()
            || seen.at("job Complete").is_some(),
        "the Deployment exists before the Job is Complete"
    );
    env.wait_work(&name, "the Deployment applied", |w| {
        manifest_is(w, 0, "Applied", "True") && manifest_is(w, 1, "Complete", "True")
    })
    .await;
    env.wait_object(&deployments, "web", "the Deployment", |_| true)
        .await;
    let complete = seen.at("job Complete").expect("the Job was seen Complete");
    let created = seen
        .at("deployment created")
        .expect("the Deployment was seen");
    assert!(
        created >= complete,
        "the Deployment was created {:?} before the Job was Complete",
        complete - created
    );
    println!(
        "gate → dependant created: {} ms (Job Complete to Deployment created, spoke watch)",
        (created - complete).as_millis()
    );
}

#[tokio::test]
async fn the_custom_resource_waits_for_its_crd_and_the_healthy_webhook_deployment() {
    let env = Env::start("gate-webhook").await;
    let name = env.work_name("webhook");
    let group = format!("{}.gates.example.com", env.ns);
    let seen = Moments::default();
    let deployments = env.spoke_api("apps", "v1", "Deployment", "deployments");
    let widgets = env.spoke_api(&group, "v1", "Widget", "widgets");
    let _deployment = seen.watch(deployments, "webhook", "webhook", Some("Available"));
    // The webhook's pod is scheduled (and kwok makes it ready) only once the test labels the
    // node: until then the gate cannot hold, whatever the timing.
    let node_label = format!("gates.example.com/{}", env.ns);
    let mut webhook = deployment(&env.ns, "webhook");
    webhook["spec"]["template"]["spec"]["nodeSelector"] = json!({&node_label: "ready"});
    let widget = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
                        "metadata": {"name": "issuer", "namespace": env.ns}, "spec": {"ca": "x"}});
    // The CR first, its CRD last: the CRD is a built-in need, the webhook a declared gate.
    let gates = json!([{
        "manifest": {"group": group, "kind": "Widget", "namespace": env.ns, "name": "issuer"},
        "waitFor": {"manifest": {"group": "apps", "kind": "Deployment", "namespace": env.ns, "name": "webhook"},
                    "condition": "Healthy", "status": "True"}
    }]);
    let spec = json!({
        "workload": {"manifests": [widget, webhook, widget_crd(&group)]},
        "manifestConfigs": [{
            "resourceIdentifier": {"group": "apps", "resource": "deployments", "name": "webhook", "namespace": env.ns},
            "conditionRules": [{"type": "WellKnownConditions", "condition": "Healthy"}]
        }]
    });
    create_gated_work(&env, &name, gates, spec).await;
    // Once its CRD is Established, the CR waits for the webhook, and says so.
    let work = env
        .wait_work(&name, "the CR waiting for the gate", |w| {
            waits(w, 0, "to have Healthy True (gate)")
        })
        .await;
    assert!(work_is(&work, "Applied", "Unknown"), "{:?}", work.status);
    assert!(
        widgets.get_opt("issuer").await.expect("get").is_none(),
        "the CR exists before the webhook is Healthy"
    );
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.spoke.client.clone());
    let label = |value: Value| {
        let nodes = nodes.clone();
        let patch = json!({"metadata": {"labels": {&node_label: value}}});
        async move {
            nodes
                .patch("kwok-node-0", &PatchParams::default(), &Patch::Merge(patch))
                .await
                .expect("label the node");
        }
    };
    label(json!("ready")).await;
    env.wait_work(&name, "the CR applied", |w| {
        manifest_is(w, 0, "Applied", "True") && manifest_is(w, 1, "Healthy", "True")
    })
    .await;
    label(Value::Null).await;
    let _widget = seen.watch(widgets, "issuer", "widget", None);
    test_support::wait_for("the CR seen", TIMEOUT, || {
        let seen = seen.clone();
        async move { seen.at("widget created").map(|_| ()) }
    })
    .await;
    let cr = env
        .spoke_api(&group, "v1", "Widget", "widgets")
        .get("issuer")
        .await
        .expect("the CR");
    let dep = env
        .spoke_api("apps", "v1", "Deployment", "deployments")
        .get("webhook")
        .await
        .expect("the webhook");
    let available_since = dep.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Available")
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(str::to_string)
        .expect("Available since");
    let created = cr
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .expect("created");
    // RFC 3339 to the second, both in UTC: they compare as text.
    assert!(
        created.as_str() >= available_since.as_str(),
        "the CR was created at {created}, before the webhook was Available at {available_since}"
    );
}

#[tokio::test]
async fn gates_in_a_circle_fail_the_work_and_apply_nothing_in_it() {
    let env = Env::start("gate-circle").await;
    let name = env.work_name("circle");
    let gates = json!([
        {"manifest": 0, "waitFor": {"manifest": 1, "condition": "Available"}},
        {"manifest": 1, "waitFor": {"manifest": 0, "condition": "Available"}},
        {"manifest": 2, "waitFor": {"manifest": 9, "condition": "Available"}}
    ]);
    let spec = json!({"workload": {"manifests": [
        configmap(&env.ns, "a", json!({})),
        configmap(&env.ns, "b", json!({})),
        configmap(&env.ns, "nowhere", json!({})),
        configmap(&env.ns, "free", json!({}))
    ]}});
    create_gated_work(&env, &name, gates, spec).await;
    let work = env
        .wait_work(&name, "Applied False", |w| work_is(w, "Applied", "False"))
        .await;
    let applied = work_condition(&work, "Applied").expect("Applied");
    assert!(
        applied
            .message
            .contains("gates in a circle: manifests 0, 1"),
        "{}",
        applied.message
    );
    for (ordinal, words) in [
        (0, "gates in a circle"),
        (1, "gates in a circle"),
        (2, "no manifest 9"),
    ] {
        let c = manifest_condition(&work, ordinal, "Applied").expect("Applied");
        assert_eq!(c.reason, "GateInvalid");
        assert!(c.message.contains(words), "{}", c.message);
    }
    env.wait_work(&name, "the free ConfigMap applied", |w| {
        manifest_is(w, 3, "Applied", "True")
    })
    .await;
    let configmaps = env.configmaps();
    for held in ["a", "b", "nowhere"] {
        assert!(
            configmaps.get_opt(held).await.expect("get").is_none(),
            "{held} was applied"
        );
    }
}

#[tokio::test]
async fn a_deleted_work_deletes_the_custom_resource_before_its_crd() {
    let env = Env::start("gate-delete").await;
    let name = env.work_name("reverse");
    let group = format!("{}.reverse.example.com", env.ns);
    // The CR holds a finalizer nobody removes but the test: while it is there, the CRD stays.
    let widget = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
                        "metadata": {"name": "held", "namespace": env.ns,
                                     "finalizers": ["example.com/hold"]}});
    let spec = json!({"workload": {"manifests": [widget_crd(&group), widget]}});
    env.create_work(&name, spec).await;
    env.wait_work(&name, "Applied", |w| work_is(w, "Applied", "True"))
        .await;
    let widgets = env.spoke_api(&group, "v1", "Widget", "widgets");
    let crds: Api<DynamicObject> = Api::all_with(
        env.spoke.client.clone(),
        &kube::api::ApiResource {
            group: "apiextensions.k8s.io".into(),
            version: "v1".into(),
            api_version: "apiextensions.k8s.io/v1".into(),
            kind: "CustomResourceDefinition".into(),
            plural: "customresourcedefinitions".into(),
        },
    );
    let crd_name = format!("widgets.{group}");
    env.delete_work(&name).await;
    test_support::wait_for("the CR terminating", TIMEOUT, || {
        let widgets = widgets.clone();
        async move {
            match widgets.get_opt("held").await {
                Ok(Some(o)) => o.metadata.deletion_timestamp.map(|_| ()),
                _ => None,
            }
        }
    })
    .await;
    // A reconcile after the CR's deletion has been seen: the CRD is still not being deleted.
    let reconciled = reconciles(&metrics_text(env.http_port).await);
    wait_reconciled_after(env.http_port, reconciled).await;
    let crd = crds.get(&crd_name).await.expect("the CRD");
    assert!(
        crd.metadata.deletion_timestamp.is_none(),
        "the CRD is being deleted while its CR is still there"
    );
    widgets
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("release the CR");
    env.wait_work_gone(&name).await;
    env.wait_object_gone(&crds, &crd_name).await;
}

#[tokio::test]
async fn an_update_re_checks_the_gates_of_changed_manifests_only() {
    let env = Env::start("gate-update").await;
    let name = env.work_name("update");
    let cms = env.configmaps();
    let gates = json!([{"manifest": 0, "waitFor": {"manifest": 1, "condition": "Ready"}}]);
    let spec = |dep: &str, side: &str| {
        json!({
            "workload": {"manifests": [
                configmap(&env.ns, "dep", json!({"v": dep})),
                configmap(&env.ns, "gate", json!({})),
                configmap(&env.ns, "side", json!({"v": side}))
            ]},
            "manifestConfigs": [{
                "resourceIdentifier": {"resource": "configmaps", "name": "gate", "namespace": env.ns},
                "conditionRules": [{"condition": "Ready", "type": "CEL",
                    "celExpressions": ["has(object.metadata.annotations) && object.metadata.annotations[?'ready'].orValue('') == 'true'"]}]
            }]
        })
    };
    let set_gate = |ready: &str| {
        let cms = cms.clone();
        let patch = json!({"metadata": {"annotations": {"ready": ready}}});
        async move {
            cms.patch("gate", &PatchParams::default(), &Patch::Merge(patch))
                .await
                .expect("set the gate");
        }
    };
    create_gated_work(&env, &name, gates, spec("1", "1")).await;
    env.wait_work(&name, "dep waiting", |w| {
        waits(w, 0, "to have Ready True (gate)")
    })
    .await;
    set_gate("true").await;
    env.wait_work(&name, "dep applied", |w| {
        manifest_is(w, 0, "Applied", "True")
    })
    .await;
    // The gate closes: the applied, unchanged dependant is not held back, even when another
    // manifest of the work changes.
    set_gate("false").await;
    env.wait_work(&name, "the gate closed", |w| {
        manifest_is(w, 1, "Ready", "False")
    })
    .await;
    env.patch_work_spec(&name, spec("1", "2")).await;
    let work = env
        .wait_work(&name, "side updated", |w| {
            w.metadata.generation
                == w.status.as_ref().and_then(|s| {
                    s.conditions
                        .iter()
                        .find(|c| c.type_ == "Applied")
                        .and_then(|c| c.observed_generation)
                })
                && manifest_is(w, 2, "Applied", "True")
        })
        .await;
    assert!(
        manifest_is(&work, 0, "Applied", "True"),
        "the unchanged dependant was held back: {:?}",
        manifest_condition(&work, 0, "Applied")
    );
    env.wait_object(&cms, "side", "side updated", |o| {
        data(o).get("v").map(String::as_str) == Some("2")
    })
    .await;
    // The dependant changes: it waits for its gate again, and keeps what it had meanwhile.
    env.patch_work_spec(&name, spec("2", "2")).await;
    env.wait_work(&name, "the changed dependant waiting", |w| {
        waits(w, 0, "to have Ready True (gate)")
    })
    .await;
    let dep = cms.get("dep").await.expect("dep");
    assert_eq!(data(&dep).get("v").map(String::as_str), Some("1"));
    set_gate("true").await;
    env.wait_object(&cms, "dep", "dep updated", |o| {
        data(o).get("v").map(String::as_str) == Some("2")
    })
    .await;
}
