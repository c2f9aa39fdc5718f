//! Benchmark of drift (docs/semantics.md 2c): DRIFT_BENCH_WORKS works (10,000 unless set) of one
//! ConfigMap each on one agent, Kubernetes hub, then 1 % of their objects edited by hand at once,
//! twice: under the default mode (written back and reported) and under `ReportOnly` (reported
//! and kept), half of them one at a time and half at once. Measures, from one hub watch over
//! every work: the time from each edit to its
//! report on the hub (p50, p99), the agent's hub writes per drift episode, its requests while
//! idle before and after (0 asserted), and its RSS. `WORK_AGENT_BIN` names the agent measured
//! (run-integration.sh sets the debug build). Writes `target/bench/drift-<works>-<label>.{md,json}`.
//! A benchmark, not a test of the suite (it leaves its works behind: run it on control planes
//! that are stopped afterwards):
//! `RUN_ROOT=... e2e/scripts/run-integration.sh --test agent -- drift_bench:: --ignored --nocapture`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::agent_common::*;
use e2e::bench::stats::Summary;
use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use work_api::ManifestWork;

const DRIFT: &str = "work.open-cluster-management.io/drift";
/// How long the idle agent is watched for requests.
const IDLE_WINDOW: Duration = Duration::from_secs(60);
/// Generous: 10,000 works on two shared cores.
const LONG: Duration = Duration::from_secs(1800);

/// What the hub watch saw of each work: when its `Applied` was first True, and every change of
/// its first manifest's `Drifted` (reason), with when it arrived.
#[derive(Default)]
struct Hub {
    applied: HashMap<String, Instant>,
    drifted: HashMap<String, Vec<(Instant, String)>>,
}

fn drift_reason(w: &ManifestWork) -> Option<String> {
    manifest_condition(w, 0, "Drifted").map(|c| format!("{} {}", c.status, c.reason))
}

/// Every `work_agent_api_requests_total` series of `api` but watches, summed.
fn requests(text: &str, api: &str) -> f64 {
    ["get", "list", "create", "update", "patch", "delete"]
        .iter()
        .map(|v| api_requests(text, api, v))
        .sum()
}

/// The agent's writes to the hub.
fn hub_writes(text: &str) -> f64 {
    ["create", "update", "patch", "delete"]
        .iter()
        .map(|v| api_requests(text, "hub", v))
        .sum()
}

/// Waits until the agent's reconcile count has not moved for `quiet`; the metrics then.
async fn settled(port: u16, quiet: Duration) -> String {
    let mut last = reconciles(&metrics_text(port).await);
    let mut since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let text = metrics_text(port).await;
        let now = reconciles(&text);
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return text;
        }
    }
}

/// Waits until every work of `names` shows the Drifted `reason` after `after[name]`; each one's
/// delay from its edit.
async fn reported(
    hub: &Arc<Mutex<Hub>>,
    names: &[String],
    after: &HashMap<String, Instant>,
    reason: &str,
) -> Vec<Duration> {
    let delays = || {
        let hub = hub.lock().expect("hub");
        names
            .iter()
            .filter_map(|n| {
                let edited = after.get(n)?;
                let (t, _) = hub
                    .drifted
                    .get(n)?
                    .iter()
                    .find(|(t, r)| t >= edited && r == reason)?;
                Some(t.saturating_duration_since(*edited))
            })
            .collect::<Vec<_>>()
    };
    test_support::wait_for(&format!("{} works {reason}", names.len()), LONG, || async {
        let d = delays();
        (d.len() == names.len())
            .then_some(())
            .ok_or(format!("{} of {}", d.len(), names.len()))
    })
    .await;
    delays()
}

fn row(what: &str, s: &Summary) -> String {
    format!(
        "| {what} | {} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms |\n",
        s.count, s.min_ms, s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms
    )
}

#[tokio::test]
#[ignore = "a benchmark of 10,000 works: run with --ignored"]
async fn ten_thousand_works_one_percent_drifting() {
    let works: usize = std::env::var("DRIFT_BENCH_WORKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let drifting = (works / 100).max(1);
    let env = Env::start_with(
        test_support::TestCluster::hub().await,
        "drift-bench",
        &[
            "--status-sync-period",
            "1h",
            "--kube-api-qps",
            "200",
            "--kube-api-burst",
            "400",
            "--hub-kube-api-qps",
            "200",
            "--hub-kube-api-burst",
            "400",
        ],
    )
    .await;
    let hub = Arc::new(Mutex::new(Hub::default()));
    let watch = {
        let (hub, api) = (hub.clone(), env.works());
        tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
            while let Some(event) = events.next().await {
                let Ok(watcher::Event::Apply(w) | watcher::Event::InitApply(w)) = event else {
                    continue;
                };
                let now = Instant::now();
                let name = w.metadata.name.clone().unwrap_or_default();
                let mut hub = hub.lock().expect("hub");
                if work_is(&w, "Applied", "True") {
                    hub.applied.entry(name.clone()).or_insert(now);
                }
                if let Some(reason) = drift_reason(&w) {
                    let seen = hub.drifted.entry(name).or_default();
                    if seen.last().map(|(_, r)| r) != Some(&reason) {
                        seen.push((now, reason));
                    }
                }
            }
        })
    };
    let names: Vec<String> = (0..works)
        .map(|i| env.work_name(&format!("d{i}")))
        .collect();
    let started = Instant::now();
    futures::stream::iter(names.iter().enumerate())
        .for_each_concurrent(32, |(i, name)| {
            let env = &env;
            async move {
                let spec = json!({"workload": {"manifests": [configmap(&env.ns, &format!("cm-{i}"), json!({"v": "1"}))]}});
                env.create_work(name, spec).await;
            }
        })
        .await;
    let created = started.elapsed();
    test_support::wait_for(&format!("{works} works applied"), LONG, || async {
        let n = hub.lock().expect("hub").applied.len();
        (n >= works).then_some(()).ok_or(format!("{n} applied"))
    })
    .await;
    let applied = started.elapsed();
    println!("{works} works created in {created:?}, applied in {applied:?}");
    let pid = env.agent.pid();
    // Idle: nothing changes, nothing is asked.
    let before_idle = settled(env.http_port, Duration::from_secs(10)).await;
    let rss_idle = e2e::bench::system::memory_mib(pid);
    tokio::time::sleep(IDLE_WINDOW).await;
    let after_idle = metrics_text(env.http_port).await;
    let idle_hub = requests(&after_idle, "hub") - requests(&before_idle, "hub");
    let idle_spoke = requests(&after_idle, "spoke") - requests(&before_idle, "spoke");
    println!("idle {IDLE_WINDOW:?}: hub {idle_hub}, spoke {idle_spoke} requests; RSS {rss_idle:?}");
    // The drifting 1 %: every 100th work.
    let chosen: Vec<(usize, String)> = (0..works)
        .step_by(works / drifting)
        .take(drifting)
        .map(|i| (i, names[i].clone()))
        .collect();
    let chosen_names: Vec<String> = chosen.iter().map(|(_, n)| n.clone()).collect();
    let edit_all = |chosen: Vec<(usize, String)>, value: &'static str| {
        let cms = env.configmaps();
        async move {
            let edited: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
            futures::stream::iter(chosen)
                .for_each_concurrent(20, |(i, name)| {
                    let (cms, edited) = (cms.clone(), edited.clone());
                    async move {
                        let at = Instant::now();
                        cms.patch(
                            &format!("cm-{i}"),
                            &PatchParams::default(),
                            &Patch::Merge(json!({"data": {"v": value}})),
                        )
                        .await
                        .expect("hand edit");
                        edited.lock().expect("edited").insert(name, at);
                    }
                })
                .await;
            Arc::try_unwrap(edited)
                .map(|m| m.into_inner().unwrap_or_default())
                .unwrap_or_default()
        }
    };
    let half = drifting / 2;
    // Half the drifting works edited one at a time (each report waited for: the delay alone),
    // the other half at once (the delay behind a queue of reports).
    let episode = |value: &'static str, reason: &'static str| {
        let (chosen, hub, names) = (chosen.clone(), hub.clone(), chosen_names.clone());
        let edit_all = &edit_all;
        async move {
            let mut alone = Vec::new();
            for one in chosen.iter().take(half) {
                let edits = edit_all(vec![one.clone()], value).await;
                alone.extend(reported(&hub, std::slice::from_ref(&one.1), &edits, reason).await);
            }
            let rest: Vec<(usize, String)> = chosen.iter().skip(half).cloned().collect();
            let edits = edit_all(rest, value).await;
            let burst = reported(&hub, &names[half..], &edits, reason).await;
            (alone, burst)
        }
    };
    // Episode 1, the default mode: written back and reported.
    let before = metrics_text(env.http_port).await;
    let (corrected_alone, corrected) = episode("hand", "False DriftCorrected").await;
    let after = settled(env.http_port, Duration::from_secs(5)).await;
    let writes_correct = (hub_writes(&after) - hub_writes(&before)) / drifting as f64;
    let spoke_correct = requests(&after, "spoke") - requests(&before, "spoke");
    // Episode 2: the same works ReportOnly, edited again: reported and kept.
    futures::stream::iter(chosen_names.clone())
        .for_each_concurrent(20, |name| {
            let works = env.works();
            async move {
                works
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"annotations": {DRIFT: "ReportOnly"}}})),
                    )
                    .await
                    .expect("ReportOnly");
            }
        })
        .await;
    // Each switched work is looked at again (the annotation re-queues it); its object is as the
    // work wants it, so its report of the last episode stands and nothing is written.
    let before = settled(env.http_port, Duration::from_secs(5)).await;
    let (detected_alone, detected) = episode("hand-again", "True DriftDetected").await;
    let after = settled(env.http_port, Duration::from_secs(5)).await;
    let writes_report = (hub_writes(&after) - hub_writes(&before)) / drifting as f64;
    let spoke_report = requests(&after, "spoke") - requests(&before, "spoke");
    let kept = env
        .configmaps()
        .get(&format!("cm-{}", chosen[0].0))
        .await
        .map(|o| data(&o).get("v").cloned().unwrap_or_default())
        .unwrap_or_default();
    // Idle again.
    let before_idle2 = after;
    tokio::time::sleep(IDLE_WINDOW).await;
    let after_idle2 = metrics_text(env.http_port).await;
    let idle2_hub = requests(&after_idle2, "hub") - requests(&before_idle2, "hub");
    let idle2_spoke = requests(&after_idle2, "spoke") - requests(&before_idle2, "spoke");
    let rss_end = e2e::bench::system::memory_mib(pid);
    watch.abort();
    let correct = Summary::of(&corrected).expect("samples");
    let report_only = Summary::of(&detected).expect("samples");
    let correct_alone = Summary::of(&corrected_alone).expect("samples");
    let report_only_alone = Summary::of(&detected_alone).expect("samples");
    let agent_bin = std::env::var("WORK_AGENT_BIN").unwrap_or_default();
    let profile = if agent_bin.contains("/release/") {
        "release"
    } else {
        "debug"
    };
    let mib = |m: Option<(f64, f64)>| {
        m.map_or("n/a".to_string(), |(rss, hwm)| {
            format!("{rss:.1} MiB (VmHWM {hwm:.1} MiB)")
        })
    };
    let md = format!(
        "# Drift: {works} works, {drifting} drifting\n\n\
         {works} works of one ConfigMap each on one agent ({profile} build, QPS 200 / burst 400 \
         to hub and spoke, `--status-sync-period 1h`), Kubernetes hub; load average at the end \
         {load:?} (2 shared cores). Created in {created:.0?}, all `Applied` after {applied:.0?}. \
         Then the ConfigMaps of {drifting} works (1 %) edited by hand, twice: half one at a \
         time (each report waited for), half at once (20 in flight); edit to report timed on \
         one hub watch over every work.\n\n\
         | | samples | min | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|---|\n\
         {}{}{}{}\n\
         | | default mode (written back) | ReportOnly (kept) |\n|---|---|---|\n\
         | agent hub writes per drift episode | {writes_correct:.2} | {writes_report:.2} |\n\
         | agent spoke requests, whole episode | {spoke_correct} | {spoke_report} |\n\n\
         | idle {idle} s | hub requests | spoke requests |\n|---|---|---|\n\
         | before the edits | {idle_hub} | {idle_spoke} |\n| after | {idle2_hub} | {idle2_spoke} |\n\n\
         RSS idle before the edits: {rss_idle}; at the end: {rss_end}.\n",
        row(
            "one at a time: edit → `Drifted` False `DriftCorrected` (written back)",
            &correct_alone
        ),
        row(
            "one at a time: edit → `Drifted` True `DriftDetected` (ReportOnly)",
            &report_only_alone
        ),
        row(
            "at once: edit → `Drifted` False `DriftCorrected` (written back)",
            &correct
        ),
        row(
            "at once: edit → `Drifted` True `DriftDetected` (ReportOnly)",
            &report_only
        ),
        load = e2e::bench::system::loadavg(),
        idle = IDLE_WINDOW.as_secs(),
        rss_idle = mib(rss_idle),
        rss_end = mib(rss_end),
    );
    println!("{md}");
    let report: Value = json!({
        "works": works,
        "drifting": drifting,
        "agent_profile": profile,
        "created_s": created.as_secs_f64(),
        "applied_s": applied.as_secs_f64(),
        "correct_edit_to_report_one_at_a_time": correct_alone,
        "report_only_edit_to_report_one_at_a_time": report_only_alone,
        "correct_edit_to_report_at_once": correct,
        "report_only_edit_to_report_at_once": report_only,
        "hub_writes_per_episode_correct": writes_correct,
        "hub_writes_per_episode_report_only": writes_report,
        "spoke_requests_episode_correct": spoke_correct,
        "spoke_requests_episode_report_only": spoke_report,
        "idle_hub_requests": [idle_hub, idle2_hub],
        "idle_spoke_requests": [idle_spoke, idle2_spoke],
        "rss_idle_mib": rss_idle.map(|m| m.0),
        "rss_end_mib": rss_end.map(|m| m.0),
    });
    let label = std::env::var("DRIFT_BENCH_LABEL").unwrap_or_else(|_| format!("drift-{works}"));
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    let _ = e2e::bench::cli::write_report("drift_bench", &out, &label, &md, &report);
    assert_eq!(kept, "hand-again", "a ReportOnly object was written back");
    assert_eq!(
        (idle_hub, idle_spoke, idle2_hub, idle2_spoke),
        (0.0, 0.0, 0.0, 0.0),
        "an idle agent sent requests"
    );
}
