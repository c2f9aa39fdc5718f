//! Eviction of unmanaged AppliedManifestWorks (upstream's behaviour): when a work disappears from
//! the hub without the agent seeing its deletion, its AppliedManifestWork is marked, then deleted
//! with its resources after `--appliedmanifestwork-eviction-grace-period`; a work that reappears
//! in time clears the mark.

use crate::agent_common::*;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use test_support::{TestCluster, wait_for};
use work_api::AppliedManifestWork;

/// Removes the work from the hub behind the agent's back (agent stopped, finalizer dropped), as
/// when a hub loses it or the cluster is moved; then starts the agent again.
async fn remove_work_while_the_agent_is_down(env: &mut Env, name: &str) {
    env.agent.kill();
    env.works()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("drop the work's finalizer");
    env.delete_work(name).await;
    env.wait_work_gone(name).await;
    env.restart_agent();
}

async fn wait_marked(env: &Env, applied: &str) -> AppliedManifestWork {
    let api = env.applied_works();
    wait_for(
        &format!(
            "evictionStartTime on {applied} (log {})",
            env.agent.log_path().display()
        ),
        TIMEOUT,
        || {
            let api = api.clone();
            let applied = applied.to_string();
            async move {
                api.get_opt(&applied).await.ok().flatten().filter(|a| {
                    a.status
                        .as_ref()
                        .is_some_and(|s| s.eviction_start_time.is_some())
                })
            }
        },
    )
    .await
}

#[tokio::test]
async fn a_work_gone_from_the_hub_is_evicted_with_its_resources_after_the_grace_period() {
    let mut env = Env::start_with(
        TestCluster::hub().await,
        "evict",
        &["--appliedmanifestwork-eviction-grace-period=4s"],
    )
    .await;
    let name = env.work_name("evict");
    env.create_configmaps(&name, &["evicted"], "Applied").await;
    let cms = env.configmaps();
    env.wait_object(&cms, "evicted", "exists", |_| true).await;
    let applied = env.applied_name(&name);

    remove_work_while_the_agent_is_down(&mut env, &name).await;
    wait_marked(&env, &applied).await;
    env.wait_applied_work_gone(&name).await;
    env.wait_object_gone(&cms, "evicted").await;
}

#[tokio::test]
async fn a_work_that_reappears_within_the_grace_period_clears_the_mark() {
    let mut env = Env::start_with(
        TestCluster::hub().await,
        "unevict",
        &["--appliedmanifestwork-eviction-grace-period=10m"],
    )
    .await;
    let name = env.work_name("unevict");
    let spec = json!({"workload": {"manifests": [configmap(&env.ns, "kept", json!({"a": "1"}))]}});
    env.create_work(&name, spec.clone()).await;
    env.wait_work(&name, "Applied", |w| work_is(w, "Applied", "True"))
        .await;
    let applied = env.applied_name(&name);

    remove_work_while_the_agent_is_down(&mut env, &name).await;
    let marked = wait_marked(&env, &applied).await;

    env.create_work(&name, spec).await;
    let api = env.applied_works();
    let cleared = wait_for("evictionStartTime cleared", TIMEOUT, || {
        let api = api.clone();
        let applied = applied.clone();
        async move {
            api.get_opt(&applied).await.ok().flatten().filter(|a| {
                a.status
                    .as_ref()
                    .is_none_or(|s| s.eviction_start_time.is_none())
            })
        }
    })
    .await;
    assert_eq!(
        cleared.metadata.uid, marked.metadata.uid,
        "the same AppliedManifestWork"
    );
    let cm = env
        .wait_object(&env.configmaps(), "kept", "exists", |_| true)
        .await;
    assert_eq!(data(&cm)["a"], "1");
}
