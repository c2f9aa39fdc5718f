//! The watch cache as the source of live objects: a status change on an applied object is
//! observed without a request to the spoke, and server-side apply leaves only the agent's field
//! manager.

use crate::agent_common::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const SPOKE_VERBS: [&str; 5] = ["get", "create", "update", "patch", "delete"];

/// Waits until a reconcile in flight has ended: two reads a second apart show the same
/// reconcile and spoke request counts.
async fn settle(port: u16) {
    test_support::wait_for("the agent to be idle", TIMEOUT, || async move {
        let first = http_get(port, "/metrics").await?;
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let second = http_get(port, "/metrics").await?;
        let same = reconciles(&first) == reconciles(&second)
            && SPOKE_VERBS
                .iter()
                .all(|v| api_requests(&first, "spoke", v) == api_requests(&second, "spoke", v));
        if same {
            Ok(())
        } else {
            Err("still busy".to_string())
        }
    })
    .await
}

#[tokio::test]
async fn a_status_change_of_an_applied_deployment_costs_no_spoke_request() {
    let env = Env::start("cache-deploy").await;
    let name = env.work_name("deploy");
    env.create_work(
        &name,
        json!({"workload": {"manifests": [deployment(&env.ns, "web")]}}),
    )
    .await;
    env.wait_work(&name, "Available", |w| work_is(w, "Available", "True"))
        .await;

    settle(env.http_port).await;
    let deployments: Api<Deployment> = Api::namespaced(env.spoke.client.clone(), &env.ns);
    // Each round: a status change, then at least one reconcile after it. A round that saw a
    // reconcile but whose requests moved may have overlapped the controller-manager's own
    // status writes being observed; the claim is that the watch-triggered reconciles send
    // nothing, so every round must show zero.
    for round in 0..3 {
        let before = metrics_text(env.http_port).await;
        deployments
            .patch_status(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"collisionCount": round + 1}})),
            )
            .await
            .expect("patch the Deployment's status");
        let after = wait_reconciled_after(env.http_port, reconciles(&before)).await;
        for verb in SPOKE_VERBS {
            assert_eq!(
                api_requests(&after, "spoke", verb),
                api_requests(&before, "spoke", verb),
                "round {round}: spoke {verb} requests moved on a status change (agent log {})",
                env.agent.log_path().display()
            );
        }
        assert_eq!(
            api_requests(&after, "hub", "get"),
            api_requests(&before, "hub", "get"),
            "round {round}: the hub was read"
        );
    }
}

#[tokio::test]
async fn server_side_apply_leaves_only_the_agent_field_manager() {
    let env = Env::start("cache-ssa").await;
    let name = env.work_name("ssa");
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [configmap(&env.ns, "cm", json!({"k": "v"}))]},
            "manifestConfigs": [{
                "resourceIdentifier": {"resource": "configmaps", "name": "cm", "namespace": env.ns},
                "updateStrategy": {"type": "ServerSideApply"}
            }]
        }),
    )
    .await;
    env.wait_work(&name, "Applied", |w| work_is(w, "Applied", "True"))
        .await;
    let cm = env
        .wait_object(&env.configmaps(), "cm", "owned by the work", |o| {
            !owners(o).is_empty()
        })
        .await;
    let managers: Vec<String> = cm
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| m.manager.clone().unwrap_or_default())
        .collect();
    assert!(!managers.is_empty());
    assert!(
        managers.iter().all(|m| m == "work-agent"),
        "managers {managers:?}"
    );
    assert_eq!(owners(&cm), vec![env.applied_name(&name)]);
}

#[tokio::test]
async fn a_new_work_costs_a_spoke_write_per_object_two_more_and_two_hub_writes() {
    let env = Env::start("cache-first").await;
    // A first work makes the agent's ConfigMap store and discovery warm.
    let warm = env.work_name("warm");
    env.create_configmaps(&warm, &["warm"], "Available").await;
    settle(env.http_port).await;
    let before = metrics_text(env.http_port).await;

    let name = env.work_name("five");
    let manifests: Vec<_> = (0..5)
        .map(|i| configmap(&env.ns, &format!("cm-{i}"), json!({"k": "v"})))
        .collect();
    env.create_work(&name, json!({"workload": {"manifests": manifests}}))
        .await;
    env.wait_work(&name, "Available", |w| work_is(w, "Available", "True"))
        .await;
    settle(env.http_port).await;
    let after = metrics_text(env.http_port).await;
    let delta =
        |api: &str, verb: &str| api_requests(&after, api, verb) - api_requests(&before, api, verb);
    // Five ConfigMaps and the AppliedManifestWork (created recording them); its
    // appliedResources once, with their UIDs; nothing read.
    assert_eq!(delta("spoke", "create"), 6.0, "spoke creates");
    assert_eq!(delta("spoke", "patch"), 1.0, "spoke patches");
    assert_eq!(delta("spoke", "get"), 0.0, "spoke reads");
    assert_eq!(delta("spoke", "update"), 0.0, "spoke updates");
    // The finalizer and one status.
    assert_eq!(delta("hub", "patch"), 2.0, "hub writes");
    assert_eq!(delta("hub", "get"), 0.0, "hub reads");

    // One manifest: three spoke writes in all.
    let before = after;
    let single = env.work_name("one");
    env.create_work(
        &single,
        json!({"workload": {"manifests": [configmap(&env.ns, "only", json!({"k": "v"}))]}}),
    )
    .await;
    env.wait_work(&single, "Available", |w| work_is(w, "Available", "True"))
        .await;
    settle(env.http_port).await;
    let after = metrics_text(env.http_port).await;
    let writes: f64 = ["create", "update", "patch", "delete"]
        .iter()
        .map(|verb| api_requests(&after, "spoke", verb) - api_requests(&before, "spoke", verb))
        .sum();
    assert_eq!(writes, 3.0, "spoke writes of a one-manifest work");
    let amw = env
        .applied_works()
        .get(&env.applied_name(&single))
        .await
        .expect("AppliedManifestWork");
    let listed = amw.status.map(|s| s.applied_resources).unwrap_or_default();
    assert!(
        listed.len() == 1 && !listed[0].uid.is_empty(),
        "recorded with its UID: {listed:?}"
    );
}
