//! The size gauges follow what is live: a work's watch, index entries, state and discovery
//! entry appear with it and go with it (the discovery entry with the CRD that serves it).

use crate::agent_common::*;
use serde_json::json;
use test_support::wait_for;

async fn wait_gauges(env: &Env, what: &str, expected: &[(&str, f64)]) -> String {
    wait_for(
        &format!("{what} (agent log {})", env.agent.log_path().display()),
        TIMEOUT,
        || async {
            let text = http_get(env.http_port, "/metrics").await.ok()?;
            expected
                .iter()
                .all(|(name, value)| metric_value(&text, name) == *value)
                .then_some(text)
        },
    )
    .await
}

#[tokio::test]
async fn size_gauges_grow_with_a_work_and_shrink_when_it_is_gone() {
    let env = Env::start("sizes").await;
    let name = env.work_name("sizes");
    env.create_configmaps(&name, &["a", "b"], "Available").await;
    let live = wait_gauges(
        &env,
        "one watch, two indexed objects, one work state",
        &[
            ("work_agent_watches", 1.0),
            ("work_agent_index_objects", 2.0),
            ("work_agent_work_states", 1.0),
            ("work_agent_trigger_queue_depth", 0.0),
        ],
    )
    .await;
    assert!(
        metric_value(&live, "work_agent_resolver_cache_entries") >= 1.0,
        "the core group version is cached"
    );

    env.delete_work(&name).await;
    env.wait_work_gone(&name).await;
    wait_gauges(
        &env,
        "no watch, no index entry, no work state",
        &[
            ("work_agent_watches", 0.0),
            ("work_agent_index_objects", 0.0),
            ("work_agent_work_states", 0.0),
        ],
    )
    .await;
}

/// The discovery cache holds only what the spoke serves: deleting a CRD takes its group's entry
/// out (the cache would otherwise keep every kind ever seen, up to its cap).
#[tokio::test]
async fn a_deleted_crd_leaves_the_discovery_cache() {
    use kube::api::DeleteParams;

    let env = Env::start("sizes-crd").await;
    let group = format!("{}.example.com", test_support::unique_name("sz"));
    let crds = install_widget_crd(&env, &group).await;
    let name = env.work_name("sizes-crd");
    let widget = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": {"name": "w", "namespace": env.ns}, "spec": {"size": 1}});
    // The kind may take a moment to be served after its CRD is created: the agent retries.
    env.create_work(&name, json!({"workload": {"manifests": [widget]}}))
        .await;
    env.wait_work(&name, "Applied", |w| work_is(w, "Applied", "True"))
        .await;
    let with_crd = wait_for(
        &format!(
            "the Widget group cached (agent log {})",
            env.agent.log_path().display()
        ),
        TIMEOUT,
        || async {
            let text = http_get(env.http_port, "/metrics").await.ok()?;
            let n = metric_value(&text, "work_agent_resolver_cache_entries");
            (n >= 1.0).then_some(n)
        },
    )
    .await;

    env.delete_work(&name).await;
    env.wait_work_gone(&name).await;
    crds.delete(&format!("widgets.{group}"), &DeleteParams::default())
        .await
        .expect("delete the CRD");
    wait_for(
        &format!(
            "one discovery entry fewer than {with_crd} once the CRD is gone (agent log {})",
            env.agent.log_path().display()
        ),
        TIMEOUT,
        || async {
            let text = http_get(env.http_port, "/metrics").await.ok()?;
            (metric_value(&text, "work_agent_resolver_cache_entries") <= with_crd - 1.0)
                .then_some(())
        },
    )
    .await;
}
