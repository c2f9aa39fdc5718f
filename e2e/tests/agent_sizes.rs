//! The size gauges follow what is live: a work's watch, index entries, state and discovery
//! entry appear with it and (but the discovery entry, which is a cache) go with it.

mod agent_common;

use agent_common::*;
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
    env.create_work(
        &name,
        json!({"workload": {"manifests": [
            configmap(&env.ns, "a", json!({"k": "v"})),
            configmap(&env.ns, "b", json!({"k": "v"})),
        ]}}),
    )
    .await;
    env.wait_work(&name, "Available", |w| work_is(w, "Available", "True"))
        .await;
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
