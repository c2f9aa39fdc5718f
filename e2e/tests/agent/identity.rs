//! The agent's ID when `--agent-id` is not given: two agents of one hub on one spoke (two managed
//! clusters' agents, as OCM's own suite runs them) must not take each other's
//! AppliedManifestWorks for their own. With upstream's standalone default (the hub hash, the same
//! for both) the second agent marked the first one's AppliedManifestWorks for eviction and, after
//! the grace period, deleted them with their resources.

use crate::agent_common::*;
use kube::api::PostParams;
use serde_json::json;
use test_support::{AgentProcess, TestCluster, free_port, wait_for};
use work_api::AppliedManifestWork;

/// The agent's arguments without `--agent-id` (the shared helper always sets one).
fn args_without_agent_id(env_hub: &TestCluster, spoke: &TestCluster, cluster: &str) -> Vec<String> {
    let extra = ["--appliedmanifestwork-eviction-grace-period=2s".to_string()];
    let mut args = agent_args(&env_hub.kubeconfig, &spoke.kubeconfig, cluster, &extra);
    let at = args
        .iter()
        .position(|a| a == "--agent-id")
        .expect("the shared arguments set --agent-id");
    args.drain(at..at + 2);
    args
}

#[tokio::test]
async fn agents_of_two_clusters_without_an_agent_id_leave_each_others_applied_works_alone() {
    let hub = TestCluster::hub().await;
    let spoke = TestCluster::spoke().await;
    let first = hub.namespace("ident-a").await;
    let second = hub.namespace("ident-b").await;
    let ns = spoke.namespace("ident").await;
    let agent = AgentProcess::start(args_without_agent_id(&hub, &spoke, &first));
    let env = Env::with_agent(hub, spoke, first, ns, agent, free_port());
    let mut other = AgentProcess::start(args_without_agent_id(&env.hub, &env.spoke, &second));

    let name = env.work_name("ident");
    env.create_configmaps(&name, &["mine"], "Applied").await;
    let cm = env
        .wait_object(&env.configmaps(), "mine", "exists", |_| true)
        .await;
    let applied_name = env.applied_name(&name);
    let applied = env
        .applied_works()
        .get(&applied_name)
        .await
        .expect("the first agent's AppliedManifestWork");
    let first_id = applied.spec.agent_id.clone();
    assert!(!first_id.is_empty(), "an agent ID is recorded");
    assert_ne!(
        first_id,
        work_api::hub_hash(&env.hub.server_url),
        "not the hub hash every agent of this hub shares"
    );

    // The second agent had its chance: an AppliedManifestWork of its own whose work does not
    // exist is evicted by it within the grace period, so its scans ran meanwhile.
    let hub_hash = work_api::hub_hash(&env.hub.server_url);
    let second_id = agent::config::generated_agent_id(&hub_hash, &second);
    let ghost_work = env.work_name("ghost");
    let ghost: AppliedManifestWork = serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "AppliedManifestWork",
        "metadata": {"name": env.applied_name(&ghost_work)},
        "spec": {"hubHash": hub_hash, "agentID": second_id, "manifestWorkName": ghost_work},
    }))
    .expect("test AppliedManifestWork decodes");
    env.applied_works()
        .create(&PostParams::default(), &ghost)
        .await
        .expect("create the second agent's unmanaged AppliedManifestWork");
    env.wait_applied_work_gone(&ghost_work).await;
    assert!(other.is_running(), "log: {}", other.log());

    // The first agent's AppliedManifestWork and resource: untouched, never marked.
    let api = env.applied_works();
    let now = wait_for("the first AppliedManifestWork read", TIMEOUT, || {
        let api = api.clone();
        let applied_name = applied_name.clone();
        async move { api.get_opt(&applied_name).await.ok().flatten() }
    })
    .await;
    assert_eq!(
        now.metadata.uid, applied.metadata.uid,
        "the same AppliedManifestWork"
    );
    assert!(
        now.status
            .as_ref()
            .is_none_or(|s| s.eviction_start_time.is_none()),
        "never marked for eviction by the other agent (log: {})",
        other.log()
    );
    let still = env
        .wait_object(&env.configmaps(), "mine", "exists", |_| true)
        .await;
    assert_eq!(still.metadata.uid, cm.metadata.uid, "the same ConfigMap");
    other.stop();
}
