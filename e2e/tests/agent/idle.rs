//! An idle agent costs the hub nothing besides its ManifestWork watch: the liveness probe reads
//! the credentials' fate from the watch, the eviction scan reads the watch stores, and the
//! periodic status sync writes nothing when nothing changed.

use crate::agent_common::*;
use serde_json::json;
use std::time::Duration;
use test_support::wait_for;

/// Every hub verb but `watch`.
const HUB_VERBS: [&str; 7] = [
    "get",
    "list",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

fn hub_requests(text: &str) -> Vec<f64> {
    HUB_VERBS
        .iter()
        .map(|verb| api_requests(text, "hub", verb))
        .collect()
}

fn count(log: &str, marker: &str) -> usize {
    log.matches(marker).count()
}

const EVICTION_SCAN: &str = "eviction scan done";
const WATCH_PROBE: &str = "liveness probe round from the ManifestWork watch";

#[tokio::test]
async fn an_idle_agent_sends_the_hub_nothing_but_its_watch() {
    let env = Env::start_with(
        test_support::TestCluster::hub().await,
        "idle",
        // A scan every second and a status sync every two: plenty of chances in the window.
        &[
            "--appliedmanifestwork-eviction-grace-period=4s",
            "--status-sync-period=2s",
        ],
    )
    .await;
    let name = env.work_name("idle");
    env.create_work(
        &name,
        json!({"workload": {"manifests": [configmap(&env.ns, "idle", json!({"k": "v"}))]}}),
    )
    .await;
    env.wait_work(&name, "Applied and Available", |w| {
        work_is(w, "Applied", "True") && work_is(w, "Available", "True")
    })
    .await;
    // Settled: the hub counts stand still over a few status syncs.
    let before = wait_for("the agent's hub requests to settle", TIMEOUT, || async {
        let first = http_get(env.http_port, "/metrics").await.ok()?;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let second = http_get(env.http_port, "/metrics").await.ok()?;
        (hub_requests(&first) == hub_requests(&second)).then_some(second)
    })
    .await;
    let log = env.agent.log();
    let (scans, probes) = (count(&log, EVICTION_SCAN), count(&log, WATCH_PROBE));
    let reconciled = reconciles(&before);

    // The agent had its chances: eviction scans, a liveness probe round, status syncs.
    let after = wait_for(
        &format!(
            "an eviction scan, a probe round and status syncs (log {})",
            env.agent.log_path().display()
        ),
        TIMEOUT,
        || async {
            let log = env.agent.log();
            let text = http_get(env.http_port, "/metrics").await.ok()?;
            (count(&log, EVICTION_SCAN) > scans
                && count(&log, WATCH_PROBE) > probes
                && reconciles(&text) >= reconciled + 2.0)
                .then_some(text)
        },
    )
    .await;
    for (verb, (b, a)) in HUB_VERBS
        .iter()
        .zip(hub_requests(&before).into_iter().zip(hub_requests(&after)))
    {
        assert_eq!(
            a,
            b,
            "hub {verb} requests while idle (agent log {})",
            env.agent.log_path().display()
        );
    }
    assert!(
        api_requests(&after, "hub", "watch") >= 1.0,
        "the ManifestWork watch is counted"
    );
}
