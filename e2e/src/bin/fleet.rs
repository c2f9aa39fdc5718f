//! Fleet load on the hub: N agents (processes), each serving its own cluster namespace on one hub
//! and sharing one spoke (objects and AppliedManifestWork names unique per cluster). Measures, on
//! the hub API server, the requests per work lifecycle (create → Applied → Available → Complete →
//! TTL delete) and, with every agent idle with M works, its request rate, watch count and CPU.
//!
//! `fleet [--agents N] [--works M] [--lifecycles K] [--idle SECONDS] [--report FILE]`
//! Needs WORK_AGENT_{HUB,SPOKE}_KUBECONFIG, WORK_AGENT_BIN and RUN_ROOT (see e2e/scripts/fleet.sh).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use test_support::{AgentProcess, TestCluster, free_port, unique_name};
use work_api::ManifestWork;

struct Plan {
    agents: usize,
    works: usize,
    lifecycles: usize,
    idle: Duration,
    report: Option<PathBuf>,
}

fn parse() -> Result<Plan, String> {
    let mut plan = Plan {
        agents: 50,
        works: 20,
        lifecycles: 2,
        idle: Duration::from_secs(120),
        report: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            args.next()
                .ok_or(format!("{name} needs a value"))?
                .parse()
                .map_err(|e| format!("{name}: {e}"))
        };
        match a.as_str() {
            "--agents" => plan.agents = num("--agents")? as usize,
            "--works" => plan.works = num("--works")? as usize,
            "--lifecycles" => plan.lifecycles = num("--lifecycles")? as usize,
            "--idle" => plan.idle = Duration::from_secs(num("--idle")?),
            "--report" => {
                plan.report = Some(PathBuf::from(args.next().ok_or("--report needs a value")?))
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(plan)
}

/// The hub API server's request counters and long-running (watch) gauge, by (verb, resource).
#[derive(Clone, Default)]
struct HubMetrics {
    requests: BTreeMap<(String, String), f64>,
    watches: BTreeMap<String, f64>,
}

fn label<'a>(labels: &'a str, name: &str) -> &'a str {
    labels
        .split(',')
        .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or("")
}

fn parse_metrics(text: &str) -> HubMetrics {
    let mut m = HubMetrics::default();
    for line in text.lines() {
        let Some((head, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match head.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (head, ""),
        };
        let resource = {
            let r = label(labels, "resource");
            let s = label(labels, "subresource");
            if s.is_empty() {
                r.to_string()
            } else {
                format!("{r}/{s}")
            }
        };
        match name {
            "apiserver_request_total" => {
                *m.requests
                    .entry((label(labels, "verb").to_string(), resource))
                    .or_default() += value;
            }
            "apiserver_longrunning_requests" if label(labels, "verb") == "WATCH" => {
                *m.watches.entry(resource).or_default() += value;
            }
            _ => {}
        }
    }
    m
}

async fn hub_metrics(hub: &Client) -> Result<HubMetrics, String> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    hub.request_text(req)
        .await
        .map(|t| parse_metrics(&t))
        .map_err(|e| format!("hub /metrics: {e}"))
}

/// Requests between two snapshots, by verb (watches excluded: they are counted as connections).
fn delta(before: &HubMetrics, after: &HubMetrics) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for (k, v) in &after.requests {
        let d = v - before.requests.get(k).copied().unwrap_or(0.0);
        if d > 0.0 {
            out.insert(k.clone(), d);
        }
    }
    out
}

fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "POST" | "PUT" | "PATCH" | "DELETE" | "DELETECOLLECTION" | "APPLY"
    )
}

/// CPU seconds (user + system) of a process.
fn cpu_seconds(pid: u32) -> f64 {
    let ticks = 100.0; // USER_HZ on Linux
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / ticks)
        })
        .unwrap_or(0.0)
}

fn job_work(cluster: &str, name: &str, ns: &str) -> serde_json::Value {
    json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": name, "namespace": cluster, "labels": {"fleet": "lifecycle"}},
        "spec": {
            "workload": {"manifests": [{
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "registry.invalid/noop:1", "command": ["true"]}]}}}
            }]},
            "deleteOption": {"ttlSecondsAfterFinished": 0},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "batch", "resource": "jobs", "name": name, "namespace": ns},
                "conditionRules": [{"type": "WellKnownCompletions"}]
            }]
        }
    })
}

fn configmap_work(cluster: &str, name: &str, ns: &str) -> serde_json::Value {
    json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": name, "namespace": cluster, "labels": {"fleet": "idle"}},
        "spec": {"workload": {"manifests": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns}, "data": {"k": "v"}
        }]}}
    })
}

async fn wait_until(
    what: &str,
    bound: Duration,
    mut probe: impl AsyncFnMut() -> Result<bool, String>,
) -> Result<Duration, String> {
    let t0 = Instant::now();
    loop {
        match probe().await {
            Ok(true) => return Ok(t0.elapsed()),
            Ok(false) | Err(_) if t0.elapsed() < bound => {
                tokio::time::sleep(Duration::from_secs(2)).await
            }
            Ok(false) => return Err(format!("{what}: not done within {bound:?}")),
            Err(e) => return Err(format!("{what}: {e}")),
        }
    }
}

fn condition_true(w: &ManifestWork, t: &str) -> bool {
    w.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == t && c.status == "True")
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let plan = parse()?;
    let env = |v: &str| {
        std::env::var_os(v)
            .map(PathBuf::from)
            .ok_or(format!("{v} is not set (use e2e/scripts/fleet.sh)"))
    };
    let hub = TestCluster::connect(&env("WORK_AGENT_HUB_KUBECONFIG")?)
        .await
        .map_err(|e| e.to_string())?;
    let spoke = TestCluster::connect(&env("WORK_AGENT_SPOKE_KUBECONFIG")?)
        .await
        .map_err(|e| e.to_string())?;
    let run_root = env("RUN_ROOT")?;
    let pid_text = std::fs::read_to_string(run_root.join("hub/kube-apiserver.pid"))
        .map_err(|e| format!("hub pid: {e}"))?;
    let hub_pid: u32 = pid_text
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or("bad hub pid file")?;

    // One hub namespace (cluster) and one spoke namespace per agent.
    let mut clusters = Vec::new();
    for _ in 0..plan.agents {
        let cluster = hub
            .try_namespace("fleet")
            .await
            .map_err(|e| e.to_string())?;
        let ns = spoke
            .try_namespace("fleet")
            .await
            .map_err(|e| e.to_string())?;
        clusters.push((cluster, ns));
    }
    let before_agents = hub_metrics(&hub.client).await?;
    let t_start = Instant::now();
    let mut agents = Vec::new();
    for (i, (cluster, _)) in clusters.iter().enumerate() {
        let args = [
            "run".to_string(),
            "--spoke-cluster-name".into(),
            cluster.clone(),
            "--hub-kubeconfig".into(),
            hub.kubeconfig.display().to_string(),
            "--spoke-kubeconfig".into(),
            spoke.kubeconfig.display().to_string(),
            "--agent-id".into(),
            format!("fleet-agent-{i}"),
            "--http-address".into(),
            format!("127.0.0.1:{}", free_port()),
            "--leader-elect=false".into(),
            // Many agents on one machine: an ephemeral port each for the HTTPS probe endpoint.
            "--health-address=127.0.0.1:0".into(),
            "--log-level".into(),
            std::env::var("FLEET_AGENT_LOG").unwrap_or_else(|_| "warn".into()),
        ];
        agents.push(
            AgentProcess::try_start(&args, std::iter::empty::<(&str, &str)>())
                .map_err(|e| e.to_string())?,
        );
    }
    eprintln!("[fleet] {} agents started", agents.len());
    // Started when each holds its watch.
    let n = plan.agents as f64;
    wait_until(
        "every agent watching",
        Duration::from_secs(300),
        async || {
            let m = hub_metrics(&hub.client).await?;
            Ok(m.watches.get("manifestworks").copied().unwrap_or(0.0) >= n)
        },
    )
    .await?;
    let after_start = hub_metrics(&hub.client).await?;
    let startup = delta(&before_agents, &after_start);
    eprintln!("[fleet] all watching after {:.0?}", t_start.elapsed());

    // Lifecycles: K works per cluster, each a Job that completes and is deleted by TTL 0.
    let lc_before = hub_metrics(&hub.client).await?;
    let t_lc = Instant::now();
    let mut created = 0u64;
    for k in 0..plan.lifecycles {
        for (cluster, ns) in &clusters {
            let name = unique_name(&format!("lc{k}"));
            let work: ManifestWork =
                serde_json::from_value(job_work(cluster, &name, ns)).map_err(|e| e.to_string())?;
            Api::<ManifestWork>::namespaced(hub.client.clone(), cluster)
                .create(&PostParams::default(), &work)
                .await
                .map_err(|e| format!("creating {name}: {e}"))?;
            created += 1;
        }
    }
    let all: Api<ManifestWork> = Api::all(hub.client.clone());
    let lp = ListParams::default().labels("fleet=lifecycle");
    let lc_took = wait_until(
        "every lifecycle work deleted by TTL",
        Duration::from_secs(900),
        async || {
            all.list(&lp)
                .await
                .map(|l| l.items.is_empty())
                .map_err(|e| e.to_string())
        },
    )
    .await?;
    // The finalizer removal lands just before the object goes; a short settle for status writes racing it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let lc_after = hub_metrics(&hub.client).await?;
    let mut lc = delta(&lc_before, &lc_after);
    // Our own requests: one create per work, and the lists polling for the end.
    if let Some(v) = lc.get_mut(&("POST".to_string(), "manifestworks".to_string())) {
        *v -= created as f64;
    }
    lc.retain(|(verb, r), v| {
        *v > 0.0 && !(verb == "LIST" && r == "manifestworks") && verb != "WATCH"
    });
    eprintln!("[fleet] {created} lifecycles in {:.0?}", t_lc.elapsed());

    // Idle: M ConfigMap works per cluster, all Available, then a quiet window.
    for (cluster, ns) in &clusters {
        for j in 0..plan.works {
            let name = format!("idle-{j}-{}", &cluster[cluster.len().saturating_sub(8)..]);
            let work: ManifestWork = serde_json::from_value(configmap_work(cluster, &name, ns))
                .map_err(|e| e.to_string())?;
            Api::<ManifestWork>::namespaced(hub.client.clone(), cluster)
                .create(&PostParams::default(), &work)
                .await
                .map_err(|e| format!("creating {name}: {e}"))?;
        }
    }
    let idle_lp = ListParams::default().labels("fleet=idle");
    let total = plan.agents * plan.works;
    wait_until(
        "every idle work Available",
        Duration::from_secs(900),
        async || {
            let l = all.list(&idle_lp).await.map_err(|e| e.to_string())?;
            Ok(l.items.len() == total
                && l.items
                    .iter()
                    .all(|w| condition_true(w, "Available") && condition_true(w, "Applied")))
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let idle_before = hub_metrics(&hub.client).await?;
    let cpu0 = cpu_seconds(hub_pid);
    let t_idle = Instant::now();
    tokio::time::sleep(plan.idle).await;
    let idle_after = hub_metrics(&hub.client).await?;
    let cpu = cpu_seconds(hub_pid) - cpu0;
    let idle_secs = t_idle.elapsed().as_secs_f64();
    let mut idle = delta(&idle_before, &idle_after);
    // Our /metrics reads are GETs of no resource.
    idle.retain(|(verb, r), _| !(verb == "GET" && r.is_empty()) && verb != "WATCH");
    // Watches the agents added (the API server holds some of its own).
    let watches: f64 =
        idle_after.watches.values().sum::<f64>() - before_agents.watches.values().sum::<f64>();
    let work_watches = idle_after
        .watches
        .get("manifestworks")
        .copied()
        .unwrap_or(0.0)
        - before_agents
            .watches
            .get("manifestworks")
            .copied()
            .unwrap_or(0.0);
    // The API server renews its own identity lease (kube-system) every 10 s: not the agents'.
    let own_leases = idle
        .remove(&("PUT".to_string(), "leases".to_string()))
        .unwrap_or(0.0);
    lc.remove(&("PUT".to_string(), "leases".to_string()));
    let alive = agents
        .iter_mut()
        .map(|a| a.is_running())
        .filter(|r| *r)
        .count();

    let mut out = String::new();
    let lifecycles = created as f64;
    let writes: f64 = lc
        .iter()
        .filter(|((v, _), _)| is_write(v))
        .map(|(_, n)| n)
        .sum();
    let reads: f64 = lc
        .iter()
        .filter(|((v, _), _)| !is_write(v))
        .map(|(_, n)| n)
        .sum();
    // A fold from +0: an empty float sum is -0, printed "-0.0".
    let idle_total: f64 = idle.values().fold(0.0, |a, b| a + b);
    let _ = writeln!(
        out,
        "{} agents ({} still running at the end), {} lifecycles, {} idle works per agent, idle window {:.0} s.\n",
        plan.agents, alive, created, plan.works, idle_secs
    );
    let _ = writeln!(out, "| figure | value |\n| --- | ---: |");
    let _ = writeln!(
        out,
        "| hub writes per work lifecycle | {:.2} |",
        writes / lifecycles
    );
    let _ = writeln!(
        out,
        "| hub reads per work lifecycle (get/list) | {:.2} |",
        reads / lifecycles
    );
    let _ = writeln!(
        out,
        "| lifecycles done in | {:.0} s |",
        lc_took.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "| hub watches per agent (manifestworks) | {:.2} |",
        (work_watches - 0.0) / n
    );
    let _ = writeln!(
        out,
        "| hub watches per agent (all resources) | {:.2} |",
        watches / n
    );
    let _ = writeln!(
        out,
        "| hub requests per idle minute, all agents (watches excluded) | {:.1} |",
        idle_total * 60.0 / idle_secs
    );
    let _ = writeln!(
        out,
        "| the hub API server's own lease renewals per minute (not counted above) | {:.1} |",
        own_leases * 60.0 / idle_secs
    );
    let _ = writeln!(
        out,
        "| hub requests per idle minute per agent | {:.3} |",
        idle_total * 60.0 / idle_secs / n
    );
    let _ = writeln!(
        out,
        "| hub kube-apiserver CPU while idle | {:.1} % of one core |",
        cpu * 100.0 / idle_secs
    );
    let _ = writeln!(
        out,
        "| agent start-up requests per agent | {:.1} |",
        startup.values().sum::<f64>() / n
    );
    let _ = writeln!(
        out,
        "\nPer lifecycle, by verb and resource:\n\n| verb | resource | per lifecycle |\n| --- | --- | ---: |"
    );
    for ((verb, r), v) in &lc {
        let _ = writeln!(out, "| {verb} | {r} | {:.2} |", v / lifecycles);
    }
    if !idle.is_empty() {
        let _ = writeln!(
            out,
            "\nWhile idle, by verb and resource (per minute, all agents):\n\n| verb | resource | per minute |\n| --- | --- | ---: |"
        );
        for ((verb, r), v) in &idle {
            let _ = writeln!(out, "| {verb} | {r} | {:.2} |", v * 60.0 / idle_secs);
        }
    }
    let per_agent_rps = idle_total / idle_secs / n;
    let _ = writeln!(
        out,
        "\nExtrapolated to 5,000 clusters: {:.0} watches on the hub; {:.2} requests/s while idle (watches excluded); \
        a churn of one work lifecycle per cluster per minute adds {:.0} writes/s and {:.0} reads/s.",
        work_watches / n * 5000.0,
        per_agent_rps * 5000.0,
        writes / lifecycles * 5000.0 / 60.0,
        reads / lifecycles * 5000.0 / 60.0
    );
    println!("{out}");
    if let Some(p) = &plan.report {
        if let Some(d) = p.parent() {
            let _ = std::fs::create_dir_all(d);
        }
        std::fs::write(p, &out).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    // The agents remove their finalizers, so the works go before the agents stop.
    for (cluster, _) in &clusters {
        let _ = Api::<ManifestWork>::namespaced(hub.client.clone(), cluster)
            .delete_collection(&Default::default(), &idle_lp)
            .await;
    }
    let _ = wait_until(
        "every idle work deleted",
        Duration::from_secs(300),
        async || {
            all.list(&idle_lp)
                .await
                .map(|l| l.items.is_empty())
                .map_err(|e| e.to_string())
        },
    )
    .await;
    for a in &mut agents {
        a.stop();
    }
    hub.cleanup().await;
    spoke.cleanup().await;
    Ok(())
}
