//! Never-premature completion: a manifest that cannot be applied or read (missing namespace, a
//! kind the spoke does not serve, an absent ReadOnly object, a manifest the API server rejects)
//! keeps its rule conditions Unknown `ConditionRuleNotEvaluated`, so the work does not complete
//! while another manifest finishes; once the blocker is gone, the work completes. Also the exact
//! `Available` and `StatusFeedbackSynced` strings of each case.

use crate::agent_common::*;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use work_api::ManifestWork;

/// A `Complete` rule that passes as soon as there is an object to evaluate it on.
fn complete_when_there(group: &str, resource: &str, ns: &str, name: &str) -> Value {
    json!({
        "resourceIdentifier": {"group": group, "resource": resource, "name": name, "namespace": ns},
        "conditionRules": [{"condition": "Complete", "type": "CEL", "celExpressions": ["true"]}]
    })
}

fn strings(c: Option<&Condition>) -> (String, String, String) {
    let c = c.expect("condition present");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn s(status: &str, reason: &str, message: &str) -> (String, String, String) {
    (status.into(), reason.into(), message.into())
}

/// The good Job (ordinal 0) finished while the blocked manifest (ordinal 1) was not evaluated.
fn good_done_blocked_waiting(w: &ManifestWork) -> bool {
    manifest_is(w, 0, "Complete", "True")
        && manifest_condition(w, 1, "Complete")
            .is_some_and(|c| c.reason == "ConditionRuleNotEvaluated")
}

/// What every blocked case shares: work `Complete` Unknown (never True), the blocked manifest's
/// `Complete` Unknown with a message saying why, and the good Job's conditions as upstream's.
fn assert_blocked(work: &ManifestWork, why_starts_with: &str) {
    let complete = strings(work_condition(work, "Complete"));
    assert_eq!(
        (complete.0.as_str(), complete.1.as_str()),
        ("Unknown", "ConditionRulesAggregated"),
        "work Complete"
    );
    let blocked = strings(manifest_condition(work, 1, "Complete"));
    assert_eq!(blocked.0, "Unknown");
    assert!(
        blocked.2.starts_with(why_starts_with),
        "message {:?} should start with {why_starts_with:?}",
        blocked.2
    );
    assert_eq!(
        strings(manifest_condition(work, 0, "Available")),
        s("True", "ResourceAvailable", "Resource is available")
    );
    assert_eq!(
        strings(manifest_condition(work, 0, "StatusFeedbackSynced")),
        s("True", "NoStatusFeedbackSynced", ""),
        "manifest 0"
    );
    // As upstream: nothing is said of the feedback of an object that is not there.
    assert!(
        manifest_condition(work, 1, "StatusFeedbackSynced").is_none(),
        "the blocked manifest has no object, so no StatusFeedbackSynced"
    );
}

#[tokio::test]
async fn a_job_in_a_missing_namespace_blocks_completion_until_the_namespace_exists() {
    let env = Env::start("block-ns").await;
    let missing = test_support::unique_name("block-missing");
    let name = env.work_name("ns");
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [job(&env.ns, "good"), job(&missing, "blocked")]},
            "manifestConfigs": [
                job_complete_config(&env.ns, "good"),
                job_complete_config(&missing, "blocked")
            ]
        }),
    )
    .await;
    let work = env
        .wait_work(
            &name,
            "good Job complete, blocked Job not evaluated",
            good_done_blocked_waiting,
        )
        .await;
    assert_blocked(&work, "resource was not applied: ");
    let blocked = strings(manifest_condition(&work, 1, "Complete"));
    assert!(
        blocked
            .2
            .contains(&format!("namespaces \"{missing}\" not found")),
        "{blocked:?}"
    );
    assert_eq!(
        strings(manifest_condition(&work, 1, "Available")),
        s("False", "ResourceNotAvailable", "Resource is not available")
    );
    assert_eq!(
        manifest_condition(&work, 1, "Applied")
            .expect("Applied")
            .status,
        "False"
    );
    assert_eq!(
        strings(work_condition(&work, "Available")),
        s(
            "False",
            "ResourcesNotAvailable",
            "1 of 2 resources are not available"
        )
    );

    let namespaces: Api<Namespace> = Api::all(env.spoke.client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": missing}})).expect("namespace");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("create the missing namespace");
    let work = env
        .wait_work(&name, "Complete once the namespace exists", |w| {
            work_is(w, "Complete", "True")
        })
        .await;
    assert_eq!(
        strings(manifest_condition(&work, 1, "Available")),
        s("True", "ResourceAvailable", "Resource is available")
    );
    let _ = namespaces.delete(&missing, &DeleteParams::default()).await;
}

#[tokio::test]
async fn a_kind_the_spoke_does_not_serve_blocks_completion_until_its_crd_is_installed() {
    let env = Env::start("block-crd").await;
    let group = format!("{}.example.com", test_support::unique_name("blk"));
    let widget = json!({
        "apiVersion": format!("{group}/v1"),
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": env.ns},
        "spec": {"size": 1}
    });
    let name = env.work_name("crd");
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [job(&env.ns, "good"), widget]},
            "manifestConfigs": [
                job_complete_config(&env.ns, "good"),
                complete_when_there(&group, "widgets", &env.ns, "w")
            ]
        }),
    )
    .await;
    let work = env
        .wait_work(
            &name,
            "good Job complete, Widget not evaluated",
            good_done_blocked_waiting,
        )
        .await;
    assert_blocked(&work, "resource was not applied: ");
    assert_eq!(
        strings(manifest_condition(&work, 1, "Available")),
        s(
            "Unknown",
            "IncompleteResourceMeta",
            "Resource meta is incomplete"
        )
    );
    assert_eq!(
        strings(work_condition(&work, "Available")),
        s(
            "Unknown",
            "ResourcesStatusUnknown",
            "1 of 2 resources have unknown status"
        )
    );

    let crds = install_widget_crd(&env, &group).await;
    let result = tokio::spawn({
        let works = env.works();
        let name = name.clone();
        let log = env.agent.log_path().display().to_string();
        async move {
            test_support::wait_for(
                &format!("{name} Complete once the CRD is installed (agent log {log})"),
                TIMEOUT,
                || {
                    let works = works.clone();
                    let name = name.clone();
                    async move {
                        match works.get(&name).await {
                            Ok(w) if work_is(&w, "Complete", "True") => Ok(w),
                            Ok(w) => Err(serde_json::to_string(&w.status).unwrap_or_default()),
                            Err(e) => Err(e.to_string()),
                        }
                    }
                },
            )
            .await
        }
    })
    .await;
    // Remove the CRD whatever the outcome (the spoke is shared).
    let _ = crds
        .delete(&format!("widgets.{group}"), &DeleteParams::default())
        .await;
    let work = result.expect("the wait did not panic");
    assert_eq!(
        strings(manifest_condition(&work, 1, "Available")),
        s("True", "ResourceAvailable", "Resource is available")
    );
}

#[tokio::test]
async fn an_absent_read_only_object_blocks_completion_until_it_exists() {
    let env = Env::start("block-ro").await;
    let name = env.work_name("ro");
    let mut ro = complete_when_there("", "configmaps", &env.ns, "ro");
    ro["updateStrategy"] = json!({"type": "ReadOnly"});
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [job(&env.ns, "good"), configmap(&env.ns, "ro", json!({}))]},
            "manifestConfigs": [job_complete_config(&env.ns, "good"), ro]
        }),
    )
    .await;
    let work = env
        .wait_work(
            &name,
            "good Job complete, ReadOnly not evaluated",
            good_done_blocked_waiting,
        )
        .await;
    assert_blocked(&work, "resource does not exist");
    assert_eq!(
        strings(manifest_condition(&work, 1, "Available")),
        s("False", "ResourceNotAvailable", "Resource is not available")
    );

    let cm: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(configmap(&env.ns, "ro", json!({"k": "v"}))).expect("ConfigMap");
    Api::namespaced(env.spoke.client.clone(), &env.ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create the ReadOnly object");
    env.wait_work(&name, "Complete once the object exists", |w| {
        work_is(w, "Complete", "True")
    })
    .await;
}

#[tokio::test]
async fn a_manifest_the_api_server_rejects_blocks_completion_until_it_is_fixed() {
    let env = Env::start("block-invalid").await;
    let name = env.work_name("invalid");
    let spec = |key: &str| {
        json!({
            "workload": {"manifests": [
                job(&env.ns, "good"),
                configmap(&env.ns, "cm", json!({key: "v"}))
            ]},
            "manifestConfigs": [
                job_complete_config(&env.ns, "good"),
                complete_when_there("", "configmaps", &env.ns, "cm")
            ]
        })
    };
    // A data key with a space is refused by the API server's validation.
    env.create_work(&name, spec("not a valid key")).await;
    let work = env
        .wait_work(
            &name,
            "good Job complete, rejected ConfigMap not evaluated",
            good_done_blocked_waiting,
        )
        .await;
    assert_blocked(&work, "resource was not applied: ");
    let applied = strings(manifest_condition(&work, 1, "Applied"));
    assert_eq!(
        (applied.0.as_str(), applied.1.as_str()),
        ("False", "AppliedManifestFailed")
    );
    assert!(applied.2.contains("Invalid"), "{applied:?}");
    assert_eq!(
        strings(manifest_condition(&work, 1, "Available")),
        s("False", "ResourceNotAvailable", "Resource is not available")
    );

    env.patch_work_spec(&name, spec("valid-key")).await;
    env.wait_work(&name, "Complete once the manifest is fixed", |w| {
        work_is(w, "Complete", "True")
    })
    .await;
}

#[tokio::test]
async fn feedback_conditions_read_as_upstream() {
    let env = Env::start("feedback-strings").await;
    let name = env.work_name("fb");
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [
                configmap(&env.ns, "plain", json!({"k": "v"})),
                configmap(&env.ns, "fed", json!({"k": "v"})),
                configmap(&env.ns, "bad", json!({"k": "v"}))
            ]},
            "manifestConfigs": [
                {"resourceIdentifier": {"resource": "configmaps", "name": "fed", "namespace": env.ns},
                 "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [{"name": "k", "path": ".data.k"}]}]},
                {"resourceIdentifier": {"resource": "configmaps", "name": "bad", "namespace": env.ns},
                 "feedbackRules": [{"type": "WellKnownStatus"}]}
            ]
        }),
    )
    .await;
    let work = env
        .wait_work(&name, "feedback synced on every manifest", |w| {
            (0..3).all(|i| manifest_condition(w, i, "StatusFeedbackSynced").is_some())
        })
        .await;
    assert_eq!(
        strings(manifest_condition(&work, 0, "StatusFeedbackSynced")),
        s("True", "NoStatusFeedbackSynced", "")
    );
    assert_eq!(
        strings(manifest_condition(&work, 1, "StatusFeedbackSynced")),
        s("True", "StatusFeedbackSynced", "")
    );
    let bad = strings(manifest_condition(&work, 2, "StatusFeedbackSynced"));
    assert_eq!(
        (bad.0.as_str(), bad.1.as_str()),
        ("False", "StatusFeedbackSyncFailed")
    );
    assert!(
        bad.2.starts_with("Sync status feedback failed with error "),
        "{bad:?}"
    );
    assert_eq!(
        strings(work_condition(&work, "Available")),
        s("True", "ResourcesAvailable", "All resources are available")
    );
}
