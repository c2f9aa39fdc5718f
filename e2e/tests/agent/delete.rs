//! Deleting a ManifestWork with each deletion policy, against real API servers.

use crate::agent_common::*;
use kube::api::{Patch, PatchParams};
use serde_json::json;

#[tokio::test]
async fn foreground_deletes_the_resources_then_the_finalizers() {
    let env = Env::start("delete-fg").await;
    let name = env.work_name("fg");
    env.create_work(
        &name,
        json!({"workload": {"manifests": [
            configmap(&env.ns, "a", json!({"k": "v"})),
            job(&env.ns, "j"),
        ]}}),
    )
    .await;
    env.wait_work(&name, "Applied", |w| work_is(w, "Applied", "True"))
        .await;
    let cms = env.configmaps();
    let jobs = env.spoke_api("batch", "v1", "Job", "jobs");
    env.wait_object(&jobs, "j", "exists", |_| true).await;
    env.delete_work(&name).await;
    env.wait_work_gone(&name).await;
    // The finalizer is removed only once the resources are gone.
    assert!(cms.get_opt("a").await.expect("get").is_none());
    assert!(jobs.get_opt("j").await.expect("get").is_none());
    assert!(
        env.applied_works()
            .get_opt(&env.applied_name(&name))
            .await
            .expect("get")
            .is_none(),
        "AppliedManifestWork left behind"
    );
}

#[tokio::test]
async fn orphan_keeps_every_resource_without_our_owner() {
    let env = Env::start("delete-orphan").await;
    let name = env.work_name("orphan");
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [configmap(&env.ns, "kept", json!({"k": "v"}))]},
            "deleteOption": {"propagationPolicy": "Orphan"}
        }),
    )
    .await;
    env.wait_work(&name, "Applied", |w| work_is(w, "Applied", "True"))
        .await;
    env.delete_work(&name).await;
    env.wait_work_gone(&name).await;
    let kept = env
        .configmaps()
        .get("kept")
        .await
        .expect("orphaned ConfigMap still exists");
    assert!(kept.metadata.deletion_timestamp.is_none());
    assert!(owners(&kept).is_empty(), "{:?}", owners(&kept));
}

#[tokio::test]
async fn a_resource_the_watch_cache_no_longer_has_is_still_deleted_with_the_work() {
    let env = Env::start("delete-unseen").await;
    // Another work keeps the agent's ConfigMap watch (and its store) running throughout.
    let keeper = env.work_name("keeper");
    env.create_configmaps(&keeper, &["keeper"], "Available")
        .await;
    let name = env.work_name("unseen");
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [configmap(&env.ns, "unseen", json!({"k": "v"}))]},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "", "resource": "configmaps", "name": "unseen", "namespace": env.ns},
                "conditionRules": [{"condition": "Complete", "type": "CEL", "celExpressions": ["true"]}]
            }]
        }),
    )
    .await;
    // Complete: the agent no longer writes the ConfigMap, so the label stays off once removed.
    env.wait_work(&name, "Complete", |w| work_is(w, "Complete", "True"))
        .await;
    let before = reconciles(&metrics_text(env.http_port).await);
    // Without the agent's label the object leaves the agent's label-filtered watch cache, while
    // it still exists and is still owned by the work: the cache's "absent" is wrong.
    env.configmaps()
        .patch(
            "unseen",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {applier::AGENT_LABEL: null}}})),
        )
        .await
        .expect("removing the agent's label");
    // The watch's delete event re-queues the work: the cache has dropped the object by then.
    wait_reconciled_after(env.http_port, before).await;
    let before = metrics_text(env.http_port).await;
    env.delete_work(&name).await;
    env.wait_work_gone(&name).await;
    let after = metrics_text(env.http_port).await;
    // The agent deleted the ConfigMap itself (and then the AppliedManifestWork), rather than
    // trusting the cache and leaving it to the garbage collector after the work was gone.
    assert_eq!(
        api_requests(&after, "spoke", "delete") - api_requests(&before, "spoke", "delete"),
        2.0,
        "spoke deletes"
    );
    let cms = env.configmaps();
    env.wait_object_gone(&cms, "unseen").await;
}

#[tokio::test]
async fn selectively_orphan_keeps_only_the_matched_resources() {
    let env = Env::start("delete-selective").await;
    let name = env.work_name("selective");
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [
                configmap(&env.ns, "kept", json!({"k": "v"})),
                configmap(&env.ns, "gone", json!({"k": "v"})),
            ]},
            "deleteOption": {"propagationPolicy": "SelectivelyOrphan", "selectivelyOrphans": {
                "orphaningRules": [{"group": "", "resource": "configmaps", "name": "kept", "namespace": env.ns}]
            }}
        }),
    )
    .await;
    env.wait_work(&name, "Applied", |w| work_is(w, "Applied", "True"))
        .await;
    let cms = env.configmaps();
    let gone = env.wait_object(&cms, "gone", "applied", |_| true).await;
    assert_eq!(owners(&gone), vec![env.applied_name(&name)]);
    env.delete_work(&name).await;
    env.wait_work_gone(&name).await;
    env.wait_object_gone(&cms, "gone").await;
    let kept = cms.get("kept").await.expect("orphaned ConfigMap");
    assert!(owners(&kept).is_empty());
}

#[tokio::test]
async fn the_work_shows_deleting_while_resources_wait_on_a_finalizer() {
    let env = Env::start("delete-wait").await;
    let name = env.work_name("wait");
    let mut cm = configmap(&env.ns, "held", json!({"k": "v"}));
    cm["metadata"]["finalizers"] = json!(["example.com/hold"]);
    env.create_work(&name, json!({"workload": {"manifests": [cm]}}))
        .await;
    env.wait_work(&name, "Applied", |w| work_is(w, "Applied", "True"))
        .await;
    env.delete_work(&name).await;
    let work = env
        .wait_work(&name, "Deleting True", |w| work_is(w, "Deleting", "True"))
        .await;
    assert_eq!(
        work_condition(&work, "Deleting").map(|c| c.reason.as_str()),
        Some("WorkDeleting")
    );
    // The resource cannot go away yet, so neither can the work: checked after a reconcile that
    // saw it (an edit of the held object wakes the work).
    let reconciled = reconciles(&metrics_text(env.http_port).await);
    env.configmaps()
        .patch(
            "held",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {"poke": "1"}}})),
        )
        .await
        .expect("touch the held object");
    wait_reconciled_after(env.http_port, reconciled).await;
    assert!(env.works().get_opt(&name).await.expect("get").is_some());
    env.configmaps()
        .patch(
            "held",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("release the test finalizer");
    env.wait_work_gone(&name).await;
    assert!(
        env.configmaps()
            .get_opt("held")
            .await
            .expect("get")
            .is_none()
    );
}

/// A finalizer taken off an applied object on the spoke stays off (upstream's Update strategy
/// keeps the live finalizers): the agent once put the manifest's finalizer back within
/// milliseconds, racing whoever removed it, and the object's later deletion then waited for ever
/// on the finalizer the agent had restored.
#[tokio::test]
async fn a_finalizer_removed_on_the_spoke_is_not_put_back_and_deletion_completes() {
    let env = Env::start("finalizer-off").await;
    let name = env.work_name("fin");
    let mut cm = configmap(&env.ns, "unheld", json!({"k": "v"}));
    cm["metadata"]["finalizers"] = json!(["example.com/hold"]);
    env.create_work(&name, json!({"workload": {"manifests": [cm]}}))
        .await;
    env.wait_work(&name, "Applied", |w| work_is(w, "Applied", "True"))
        .await;
    let cms = env.configmaps();
    let created = env.wait_object(&cms, "unheld", "applied", |_| true).await;
    assert_eq!(
        created.metadata.finalizers,
        Some(vec!["example.com/hold".to_string()]),
        "the manifest's finalizer is set at creation"
    );
    // One edit takes the finalizer off and drifts the data: the agent's answer to it (the data
    // restored) proves it re-applied after the edit.
    cms.patch(
        "unheld",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}, "data": {"k": "drift"}})),
    )
    .await
    .expect("edit the object");
    let restored = env
        .wait_object(&cms, "unheld", "data restored", |o| {
            data(o).get("k").map(String::as_str) == Some("v")
        })
        .await;
    assert_eq!(
        restored.metadata.finalizers, None,
        "the finalizer removed on the spoke stays off"
    );
    env.delete_work(&name).await;
    env.wait_work_gone(&name).await;
    env.wait_object_gone(&cms, "unheld").await;
}
