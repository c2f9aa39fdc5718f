//! Benchmark of declared gates (docs/performance.md, "Gates"): GATED_WORKS works, each a
//! ConfigMap gated on another ConfigMap's CEL condition `Ready` (an annotation the benchmark
//! sets on the spoke). Measures what the agent asks of the API servers while every work waits,
//! then the delay from each gate turning true on the spoke to its dependant's create, both seen
//! by one spoke watch: half the gates opened one at a time, the other half at once. Asserts the
//! waiting works cost no request; reports the delays (they depend on the machine's load).
//! `WORK_AGENT_BIN` names the agent measured (run-integration.sh sets the debug build). Writes `target/bench/<label>.{md,json}` (label `gates-<works>`, or
//! `GATES_BENCH_LABEL`). Run:
//! `RUN_ROOT=... e2e/scripts/run-integration.sh --test agent_gates_bench -- --nocapture`.

mod agent_common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_common::*;
use e2e::bench::stats::Summary;
use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;

/// Gated works (the target is stated at 100).
const GATED_WORKS: usize = 100;
/// How long the waiting works are watched for requests.
const WAITING_WINDOW: Duration = Duration::from_secs(20);

/// Every `work_agent_api_requests_total` series of `api`, summed.
fn requests(text: &str, api: &str) -> f64 {
    let label = format!("api=\"{api}\"");
    text.lines()
        .filter(|l| l.starts_with("work_agent_api_requests_total{") && l.contains(&label))
        .filter_map(|l| {
            l.rsplit_once(' ')
                .and_then(|(_, v)| v.trim().parse::<f64>().ok())
        })
        .sum()
}

#[tokio::test]
async fn gated_works_wait_for_free_and_go_at_once() {
    // No resync sweep during the run: what is counted is what waiting costs.
    let env = Env::start_with(
        test_support::TestCluster::hub().await,
        "gates-bench",
        &["--status-sync-period", "1h"],
    )
    .await;
    let gates = json!([{"manifest": 0, "waitFor": {"manifest": 1, "condition": "Ready"}}]);
    let mut names = Vec::new();
    for i in 0..GATED_WORKS {
        let name = env.work_name(&format!("g{i}"));
        let spec = json!({
            "workload": {"manifests": [
                configmap(&env.ns, &format!("dep-{i}"), json!({"k": "v"})),
                configmap(&env.ns, &format!("gate-{i}"), json!({"k": "v"}))
            ]},
            "manifestConfigs": [{
                "resourceIdentifier": {"resource": "configmaps", "name": format!("gate-{i}"), "namespace": env.ns},
                "conditionRules": [{"condition": "Ready", "type": "CEL",
                    "celExpressions": ["has(object.metadata.annotations) && object.metadata.annotations[?'ready'].orValue('') == 'true'"]}]
            }]
        });
        env.create_work_annotated(
            &name,
            json!({"work.open-cluster-management.io/gates": gates.to_string()}),
            spec,
        )
        .await;
        names.push(name);
    }
    let works = env.works();
    test_support::wait_for("every work waiting", TIMEOUT, || {
        let works = works.clone();
        let names = names.clone();
        async move {
            let list = works
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let waiting = list
                .items
                .iter()
                .filter(|w| names.iter().any(|n| Some(n) == w.metadata.name.as_ref()))
                .filter(|w| {
                    manifest_condition(w, 0, "Applied")
                        .is_some_and(|c| c.reason == "WaitingForDependency")
                        && manifest_is(w, 1, "Ready", "False")
                })
                .count();
            if waiting == names.len() {
                Ok(())
            } else {
                Err(format!("{waiting} of {} waiting", names.len()))
            }
        }
    })
    .await;
    // Idle: two reads a second apart with the same reconcile count.
    test_support::wait_for("the agent idle", TIMEOUT, || async {
        let first = http_get(env.http_port, "/metrics").await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let second = http_get(env.http_port, "/metrics").await?;
        (reconciles(&first) == reconciles(&second))
            .then_some(())
            .ok_or("still reconciling".to_string())
    })
    .await;
    let before = metrics_text(env.http_port).await;
    tokio::time::sleep(WAITING_WINDOW).await;
    let after = metrics_text(env.http_port).await;
    let spoke_while_waiting = requests(&after, "spoke") - requests(&before, "spoke");
    let hub_while_waiting = requests(&after, "hub") - requests(&before, "hub");
    let reconciles_while_waiting = reconciles(&after) - reconciles(&before);

    // One watch sees both: the gate's annotation and the dependant's first event.
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let into = seen.clone();
    let configmaps = env.configmaps();
    let watch = tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher::watcher(configmaps, watcher::Config::default()));
        while let Some(event) = events.next().await {
            let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = event else {
                continue;
            };
            let name = o.metadata.name.clone().unwrap_or_default();
            let ready = o
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.get("ready").is_some_and(|v| v == "true"));
            let key = if name.starts_with("gate-") && ready {
                format!("{name} ready")
            } else if name.starts_with("dep-") {
                format!("{name} created")
            } else {
                continue;
            };
            into.lock()
                .expect("seen")
                .entry(key)
                .or_insert_with(Instant::now);
        }
    });
    let cms = env.configmaps();
    let open = |i: usize| {
        let cms = cms.clone();
        async move {
            cms.patch(
                &format!("gate-{i}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"ready": "true"}}})),
            )
            .await
            .expect("open the gate");
        }
    };
    let created = |upto: usize| {
        let seen = seen.clone();
        async move {
            let n = seen
                .lock()
                .expect("seen")
                .keys()
                .filter(|k| k.ends_with(" created"))
                .count();
            (n >= upto).then_some(()).ok_or(format!("{n} created"))
        }
    };
    // One at a time: each gate opened once the previous dependant is there (the delay alone).
    let half = GATED_WORKS / 2;
    for i in 0..half {
        open(i).await;
        test_support::wait_for("the dependant created", TIMEOUT, || created(i + 1)).await;
    }
    // The other half at once (20 in flight): the delay with a queue of work.
    futures::stream::iter(half..GATED_WORKS)
        .for_each_concurrent(20, open)
        .await;
    test_support::wait_for("every dependant created", TIMEOUT, || created(GATED_WORKS)).await;
    watch.abort();
    let seen = seen.lock().expect("seen").clone();
    let delays = |range: std::ops::Range<usize>| -> Vec<Duration> {
        range
            .filter_map(|i| {
                let open = seen.get(&format!("gate-{i} ready"))?;
                let created = seen.get(&format!("dep-{i} created"))?;
                Some(created.saturating_duration_since(*open))
            })
            .collect()
    };
    let one = Summary::of(&delays(0..half)).expect("delays");
    let burst = Summary::of(&delays(half..GATED_WORKS)).expect("delays");
    let label =
        std::env::var("GATES_BENCH_LABEL").unwrap_or_else(|_| format!("gates-{GATED_WORKS}"));
    let row = |what: &str, s: &Summary| {
        format!(
            "| {what} | {} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms |\n",
            s.count, s.min_ms, s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms, s.mean_ms
        )
    };
    let agent_bin = std::env::var("WORK_AGENT_BIN").unwrap_or_default();
    let profile = if agent_bin.contains("/release/") {
        "release"
    } else {
        "debug"
    };
    let md = format!(
        "# Gates: {GATED_WORKS} gated works\n\n\
         Each work: a ConfigMap gated on another ConfigMap's CEL condition `Ready`, set true on the \
         spoke by an annotation. {profile} agent, 10 workers, `--status-sync-period 1h`; load \
         average at the end {load:?} (2 shared cores).\n\n\
         ## While every work waits ({window} s)\n\n\
         | agent requests | count |\n|---|---|\n\
         | spoke | {spoke_while_waiting} |\n| hub | {hub_while_waiting} |\n\
         | reconciles | {reconciles_while_waiting} |\n\n\
         ## Gate true on the spoke → dependant created (one spoke watch sees both)\n\n\
         | gates opened | samples | min | p50 | p90 | p99 | max | mean |\n|---|---|---|---|---|---|---|---|\n\
         {}{}\n\
         Target: p50 ≤ 200 ms, p99 ≤ 1 s; 0 requests while waiting.\n",
        row("one at a time, 100 works waiting", &one),
        row("50 at once (20 in flight)", &burst),
        load = e2e::bench::system::loadavg(),
        window = WAITING_WINDOW.as_secs(),
    );
    let report = json!({
        "gated_works": GATED_WORKS,
        "agent_profile": profile,
        "waiting_window_s": WAITING_WINDOW.as_secs(),
        "spoke_requests_while_waiting": spoke_while_waiting,
        "hub_requests_while_waiting": hub_while_waiting,
        "reconciles_while_waiting": reconciles_while_waiting,
        "gate_to_apply_one_at_a_time": one,
        "gate_to_apply_at_once": burst,
    });
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    let _ = e2e::bench::cli::write_report("agent_gates_bench", &out, &label, &md, &report);
    assert_eq!(
        (spoke_while_waiting, hub_while_waiting),
        (0.0, 0.0),
        "waiting works cost requests"
    );
    // The delays are reported, not asserted: they depend on the machine's load.
}
