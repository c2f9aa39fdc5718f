//! Fault-injection driver: runs a realistic mix of ManifestWorks against the local control
//! planes while it kills the agent, restarts and stops API servers, compacts etcd and tampers
//! with applied objects; then checks invariants and prints them as counts (exit 1 unless all 0).
//! With `--hub mqtt|grpc` the works come from a source behind a broker instead of a Kubernetes
//! hub, and the faults of that path join in (`broker.rs`); the invariants are the same checks.
//!
//! `chaos [--hub kube|mqtt|grpc] [--seed N] [--duration S] [--long] [--soak] [--report FILE]
//! [--csv FILE] [--svg FILE]`. Needs WORK_AGENT_SPOKE_KUBECONFIG (and WORK_AGENT_HUB_KUBECONFIG
//! for a Kubernetes hub), WORK_AGENT_BIN and RUN_ROOT (see e2e/scripts/chaos.sh).

mod broker;
mod checks;
mod faults;
mod history;
mod hub;
mod kubeops;
mod ops;
mod rng;
mod soak;
mod supervisor;
mod workload;
mod world;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use test_support::{TestCluster, free_port, repo_root, unique_name};

use crate::broker::{BrokerHub, Transport};
use crate::faults::{ControlPlanes, Fault};
use crate::hub::Hub;
use crate::rng::Rng;
use crate::supervisor::Supervisor;
use crate::world::Shared;

/// How a run is shaped.
#[derive(Clone, Debug)]
struct Plan {
    seed: u64,
    /// Length of the fault phase.
    duration: Duration,
    /// Range of the pause between two agent kills (none in soak mode).
    kill_every: Option<(u64, u64)>,
    /// Range of the pause between two other faults (none in soak mode).
    fault_every: Option<(u64, u64)>,
    /// Length of a hub outage.
    outage: Duration,
    /// Longest a manifest may stay missing before it counts as lost.
    recovery_window: Duration,
    /// Longest the works may take to converge after the last fault.
    converge_bound: Duration,
    /// Live works the workload keeps.
    live_works: usize,
    /// Pause range between workload operations, ms.
    op_every_ms: (u64, u64),
    /// Fewest kills the run must make (a shorter run fails rather than passes weakly).
    min_kills: u64,
    /// Soak: new kinds, namespaces and names; memory sampled.
    soak: bool,
    /// The broker the works come through; none: a Kubernetes hub.
    wire: Option<Transport>,
    /// The largest event the broker's wire takes, in bytes (MQTT: mosquitto's
    /// `max_packet_size`; gRPC and Pub/Sub: the agent's config key).
    ceiling: u32,
    mode: &'static str,
    report: Option<PathBuf>,
    csv: Option<PathBuf>,
    svg: Option<PathBuf>,
}

/// The broker's ceiling when none is given: a production broker's kind of limit, scaled to the
/// run's few works (a status of a few manifests is 2-4 KB; AWS IoT Core takes 128 KB a packet).
const DEFAULT_CEILING: u32 = 16_384;

fn parse_args() -> Result<Plan, String> {
    let mut args = std::env::args().skip(1);
    let seed_default = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let mut plan = Plan {
        seed: seed_default,
        duration: Duration::from_secs(240),
        kill_every: Some((1, 6)),
        fault_every: Some((2, 6)),
        outage: Duration::from_secs(20),
        recovery_window: Duration::from_secs(90),
        converge_bound: Duration::from_secs(180),
        live_works: 14,
        op_every_ms: (500, 2500),
        min_kills: 50,
        soak: false,
        wire: None,
        ceiling: DEFAULT_CEILING,
        mode: "default",
        report: None,
        csv: None,
        svg: None,
    };
    let mut duration = None;
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--seed" => {
                plan.seed = value("--seed")?
                    .parse()
                    .map_err(|e| format!("--seed: {e}"))?
            }
            "--duration" => {
                duration = Some(Duration::from_secs(
                    value("--duration")?
                        .parse()
                        .map_err(|e| format!("--duration: {e}"))?,
                ))
            }
            "--long" => {
                plan.mode = "long";
                plan.duration = Duration::from_secs(3600);
                plan.kill_every = Some((20, 100));
                plan.fault_every = Some((20, 60));
                plan.outage = Duration::from_secs(60);
                plan.live_works = 30;
                plan.soak = true;
            }
            "--soak" => {
                plan.mode = "soak";
                plan.duration = Duration::from_secs(3600);
                plan.kill_every = None;
                plan.fault_every = None;
                plan.min_kills = 0;
                plan.live_works = 30;
                plan.soak = true;
            }
            "--hub" => {
                plan.wire = match value("--hub")?.as_str() {
                    "kube" => None,
                    "mqtt" => Some(Transport::Mqtt),
                    "grpc" => Some(Transport::Grpc),
                    "pubsub" => Some(Transport::PubSub),
                    other => {
                        return Err(format!(
                            "--hub: {other:?} is not kube, mqtt, grpc or pubsub"
                        ));
                    }
                }
            }
            "--ceiling" => {
                plan.ceiling = value("--ceiling")?
                    .parse()
                    .map_err(|e| format!("--ceiling: {e}"))?;
            }
            "--report" => plan.report = Some(PathBuf::from(value("--report")?)),
            "--csv" => plan.csv = Some(PathBuf::from(value("--csv")?)),
            "--svg" => plan.svg = Some(PathBuf::from(value("--svg")?)),
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if plan.wire.is_some() {
        if plan.mode == "soak" {
            return Err("--soak runs on a Kubernetes hub only".into());
        }
        // Shorter than on a Kubernetes hub (its runs come after that one in `make chaos`).
        if plan.mode == "default" {
            plan.duration = Duration::from_secs(120);
            plan.min_kills = 25;
        } else {
            // Twenty minutes each, at a higher rate than the hour on a Kubernetes hub.
            plan.duration = Duration::from_secs(1200);
            plan.kill_every = Some((10, 40));
            plan.fault_every = Some((10, 30));
        }
        plan.mode = match (plan.wire, plan.mode) {
            (Some(Transport::Mqtt), "default") => "mqtt",
            (Some(Transport::Mqtt), _) => "mqtt-long",
            (Some(Transport::PubSub), "default") => "pubsub",
            (Some(Transport::PubSub), _) => "pubsub-long",
            (_, "default") => "grpc",
            _ => "grpc-long",
        };
    }
    if let Some(d) = duration {
        // A shorter (or longer) run keeps the kill rate: the minimum scales with the length.
        if plan.kill_every.is_some() && !plan.mode.ends_with("long") {
            plan.min_kills =
                (plan.min_kills as f64 * d.as_secs_f64() / plan.duration.as_secs_f64()) as u64;
        }
        plan.duration = d;
    }
    if plan.mode == "long" {
        plan.min_kills = 50;
    }
    if plan.mode.ends_with("-long") {
        plan.min_kills = 10;
    }
    Ok(plan)
}

fn env_path(var: &str) -> Result<PathBuf, String> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| {
            format!("{var} is not set (run through e2e/scripts/chaos.sh or `make chaos`)")
        })
}

#[tokio::main]
async fn main() -> ExitCode {
    let plan = match parse_args() {
        Ok(p) => p,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("chaos: {e}");
            }
            eprintln!("{}", USAGE);
            return ExitCode::from(2);
        }
    };
    match run(plan).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("chaos: {e}");
            ExitCode::from(2)
        }
    }
}

const USAGE: &str = "usage: chaos [--hub kube|mqtt|grpc] [--seed N] [--duration SECONDS] [--long | --soak] [--report FILE] [--csv FILE] [--svg FILE]";

async fn run(plan: Plan) -> Result<bool, String> {
    eprintln!(
        "[chaos] seed {} (reproduce with --seed {}); mode {}; faults for {:?}",
        plan.seed, plan.seed, plan.mode, plan.duration
    );
    let spoke = TestCluster::connect(&env_path("WORK_AGENT_SPOKE_KUBECONFIG")?)
        .await
        .map_err(|e| e.to_string())?;
    let planes = ControlPlanes {
        script: repo_root().join("e2e/scripts/controlplane.sh"),
        run_root: env_path("RUN_ROOT").unwrap_or_else(|_| repo_root().join(".run")),
    };
    let http_port = free_port();
    // The hub, the cluster's name on it and the agent's command line.
    let (hub, kube_hub, cluster, args) = match plan.wire {
        None => {
            let kube_hub = TestCluster::connect(&env_path("WORK_AGENT_HUB_KUBECONFIG")?)
                .await
                .map_err(|e| e.to_string())?;
            let cluster = kube_hub
                .try_namespace("chaos")
                .await
                .map_err(|e| e.to_string())?;
            let args = kube_agent_args(&cluster, &kube_hub, &spoke, http_port);
            let hub = Hub::Kube {
                works: Box::new(kube::Api::namespaced(kube_hub.client.clone(), &cluster)),
                hub_hash: work_api::hub_hash(&kube_hub.server_url),
            };
            (hub, Some(kube_hub), cluster, args)
        }
        Some(wire) => {
            let cluster = unique_name("chaos");
            let dir = planes.run_root.join(format!("chaos-{}-broker", plan.mode));
            let (broker, config) = BrokerHub::start(wire, &cluster, &dir, plan.ceiling).await?;
            let args = broker.agent_args(&config, &spoke.kubeconfig, http_port);
            eprintln!(
                "[chaos] {wire:?} source for consumer {cluster}; agent config {}",
                config.display()
            );
            (
                Hub::Broker(std::sync::Arc::new(broker)),
                None,
                cluster,
                args,
            )
        }
    };
    let mut namespaces = Vec::new();
    for _ in 0..3 {
        namespaces.push(
            spoke
                .try_namespace("chaos")
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let run_id = unique_name("run");
    let target = ops::Target {
        hub: hub.clone(),
        spoke: spoke.client.clone(),
        namespaces,
        run: run_id.clone(),
    };
    let shared = Shared::default();
    let foreign = ops::seed_foreign(&shared, &target)
        .await
        .map_err(|e| format!("seeding foreign objects: {e}"))?;
    eprintln!(
        "[chaos] cluster {cluster}, spoke namespaces {:?}, {foreign} foreign objects",
        target.namespaces
    );
    history::start(&shared, &hub, spoke.client.clone(), &run_id);
    let agent = Supervisor::start(args).map_err(|e| format!("starting the agent: {e}"))?;
    // The fault phase starts with the agent.
    let started = Instant::now();
    agent.watch(shared.clone());

    let mut rng = Rng::new(plan.seed);
    let fault_end = started + plan.duration;
    let mut tasks = Vec::new();
    // Workload.
    {
        let (shared, mut rng, plan) = (shared.clone(), Rng::new(rng.next_u64()), plan.clone());
        let target = ops::Target {
            namespaces: target.namespaces.clone(),
            run: run_id.clone(),
            hub: hub.clone(),
            spoke: spoke.client.clone(),
        };
        tasks.push(tokio::spawn(async move {
            let mut serial = 0;
            let mut extra_ns = 0u64;
            let mut target = target;
            while Instant::now() < fault_end {
                ops::step(
                    &shared,
                    &target,
                    &mut rng,
                    plan.live_works,
                    &mut serial,
                    plan.soak,
                )
                .await;
                if plan.soak {
                    ops::remove_unused_kinds(&shared, &target).await;
                    // New namespaces now and then: every name the agent sees is new.
                    if serial / 50 > extra_ns {
                        extra_ns = serial / 50;
                        let name = format!("{}-n{extra_ns}", target.run);
                        if create_namespace(&target.spoke, &name).await.is_ok() {
                            target.namespaces.remove(0);
                            target.namespaces.push(name);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(
                    rng.range(plan.op_every_ms.0, plan.op_every_ms.1),
                ))
                .await;
            }
        }));
    }
    // Kills.
    if let Some((lo, hi)) = plan.kill_every {
        let (agent, shared, mut rng) = (agent.clone(), shared.clone(), Rng::new(rng.next_u64()));
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(rng.range(lo * 1000, hi * 1000))).await;
                if Instant::now() >= fault_end {
                    return;
                }
                agent.kill_and_restart();
                shared.lock().fault("agent kill -9");
            }
        }));
    }
    // Spec events the wire faults hold back go out at the latest 1-3 s later (they also go
    // behind the next spec event), so that a held event never waits for the end of the run.
    if let Hub::Broker(b) = &hub {
        let (b, mut rng) = (b.clone(), Rng::new(rng.next_u64()));
        tasks.push(tokio::spawn(async move {
            while Instant::now() < fault_end {
                tokio::time::sleep(Duration::from_millis(rng.range(1000, 3000))).await;
                b.release_held().await;
            }
        }));
    }
    // Other faults.
    if let Some((lo, hi)) = plan.fault_every {
        let (shared, mut rng, spoke_client, outage, hub, wire) = (
            shared.clone(),
            Rng::new(rng.next_u64()),
            spoke.client.clone(),
            plan.outage,
            hub.clone(),
            plan.wire,
        );
        tasks.push(tokio::spawn(async move {
            let mut queue: Vec<Fault> = Vec::new();
            loop {
                tokio::time::sleep(Duration::from_millis(rng.range(lo * 1000, hi * 1000))).await;
                if Instant::now() >= fault_end {
                    return;
                }
                if queue.is_empty() {
                    queue = Fault::cycle(&mut rng, wire);
                }
                let Some(fault) = queue.pop() else { continue };
                let t0 = Instant::now();
                let result = faults::inject(
                    fault,
                    &shared,
                    &planes,
                    &spoke_client,
                    &hub,
                    &mut rng,
                    outage,
                )
                .await;
                shared.lock().fault(fault.name());
                match result {
                    Ok(what) => eprintln!(
                        "[chaos] {:>5.0}s {}: {what} ({:.1?})",
                        started.elapsed().as_secs_f64(),
                        fault.name(),
                        t0.elapsed()
                    ),
                    Err(e) => eprintln!(
                        "[chaos] {:>5.0}s {} failed: {e}",
                        started.elapsed().as_secs_f64(),
                        fault.name()
                    ),
                }
            }
        }));
    }
    // Recovery watch, until the convergence phase ends.
    tasks.push(tokio::spawn(checks::watch_recovery(
        shared.clone(),
        spoke.client.clone(),
        run_id.clone(),
        plan.recovery_window,
        fault_end + plan.converge_bound,
    )));
    // Memory and metrics samples.
    let samples = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let (agent, shared, samples) = (agent.clone(), shared.clone(), samples.clone());
        let every = if plan.soak {
            Duration::from_secs(10)
        } else {
            Duration::from_secs(5)
        };
        tokio::spawn(async move {
            loop {
                let mut s = soak::Sample {
                    t: soak::since(started),
                    ..Default::default()
                };
                if let Some(pid) = agent.pid() {
                    s.pid = pid;
                    s.rss_kib = soak::rss_kib(pid);
                }
                soak::read_metrics(&soak::scrape(http_port).await, &mut s);
                {
                    let w = shared.lock();
                    s.live_works = w
                        .works
                        .values()
                        .filter(|m| m.phase == workload::Phase::Live)
                        .count() as u64;
                    s.created = w.tally.created;
                }
                if let Ok(mut v) = samples.lock() {
                    v.push(s);
                }
                tokio::time::sleep(every).await;
            }
        });
    }
    // The last task is the recovery watch: it runs on through the convergence phase.
    let recovery = tasks.pop();
    for t in tasks {
        let _ = t.await;
    }
    eprintln!(
        "[chaos] fault phase over after {:.0?}; releasing holds and waiting for convergence",
        started.elapsed()
    );

    // Convergence after the last fault: the wire faults disarmed, what they held sent.
    if let Hub::Broker(b) = &hub {
        b.calm().await;
    }
    let held: Vec<_> = shared.lock().held.iter().cloned().collect();
    for obj in held {
        let _ = faults::set_hold(&spoke.client, &obj, false).await;
        shared.lock().held.remove(&obj);
    }
    let last_fault = shared.lock().last_fault_at.unwrap_or_else(Instant::now);
    let mut pending = Default::default();
    let mut unverified = std::collections::BTreeSet::new();
    let converge_started = Instant::now();
    while last_fault.elapsed() < plan.converge_bound
        || converge_started.elapsed() < Duration::from_secs(5)
    {
        pending = checks::unconverged(&shared, &hub, &spoke.client, &run_id, &mut unverified).await;
        if pending.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let converged_in = last_fault.elapsed();
    if let Some(r) = recovery {
        r.abort();
    }
    {
        let mut w = shared.lock();
        w.counts.works_stuck = pending.len() as u64;
    }
    for (work, why) in &pending {
        // Behind a broker, what went over the wire for the work says where it stopped.
        let wire = match &hub {
            Hub::Broker(b) => format!(" ({})", b.history(work).await),
            Hub::Kube { .. } => String::new(),
        };
        shared.lock().violation(format!(
            "work {work} not converged {:?} after the last fault: {why}{wire}",
            plan.converge_bound
        ));
    }
    let dups = checks::duplicates(&shared, &hub, &spoke.client).await;
    let lost = checks::survivors(&shared, &spoke.client).await;
    let panics = checks::panics(&agent.logs());
    {
        let mut w = shared.lock();
        w.counts.duplicates += dups.len() as u64;
        for d in dups {
            w.violation(d);
        }
        // A deletion seen by the watch is counted there; the final check adds those it missed.
        let seen = w.counts.foreign_deletions as usize;
        if lost.len() > seen {
            w.counts.foreign_deletions = lost.len() as u64;
        }
        for l in lost {
            w.violation(l);
        }
        w.counts.agent_panics = panics.len() as u64;
        for p in panics.iter().take(20) {
            w.violation(p.clone());
        }
    }
    let kills = agent.kills();
    if let Hub::Broker(b) = &hub {
        // What the armed wire faults actually did (an armed fault may find nothing to act on).
        let c = b.fault_counters().await;
        let mut w = shared.lock();
        for (name, n) in [
            ("spec events sent twice", c.duplicated),
            ("spec events held behind a later one", c.reordered),
            ("spec resync answers split", c.split_answers),
            ("parts of the split answers", c.split_parts),
            ("status events lost in flight", c.statuses_lost),
        ] {
            w.tally.wire.push((name, n));
        }
    }
    let samples: Vec<soak::Sample> = samples.lock().map(|v| v.clone()).unwrap_or_default();
    shared.lock().tally.ttl_unverified = unverified.len() as u64;
    // The report is made before the cleanup, whose deletions are not part of the run.
    let (report, all_zero) = {
        let w = shared.lock();
        (
            report(&plan, &w, kills, started.elapsed(), converged_in, &samples),
            w.counts.all_zero(),
        )
    };
    ops::delete_all(&shared, &target, Duration::from_secs(60)).await;
    agent.stop();
    if let Some(h) = &kube_hub {
        h.cleanup().await;
    }
    spoke.cleanup().await;
    for ns in target.namespaces.iter().filter(|n| n.starts_with(&run_id)) {
        let _ = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(spoke.client.clone())
            .delete(ns, &Default::default())
            .await;
    }
    println!("{report}");
    if let Some(path) = &plan.report {
        soak::write(path, &report).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &plan.csv {
        soak::write(path, &soak::csv(&samples)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &plan.svg {
        let title = format!(
            "work-agent RSS during a {} run ({:.0} min, seed {})",
            plan.mode,
            started.elapsed().as_secs_f64() / 60.0,
            plan.seed
        );
        soak::write(path, &soak::svg(&samples, &title))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let enough_kills = kills >= plan.min_kills;
    if !enough_kills {
        eprintln!(
            "[chaos] FAILED: only {kills} kills, fewer than the {} this run must make",
            plan.min_kills
        );
    }
    Ok(all_zero && enough_kills)
}

/// The agent's command line for a Kubernetes hub.
fn kube_agent_args(
    cluster: &str,
    hub: &TestCluster,
    spoke: &TestCluster,
    http_port: u16,
) -> Vec<String> {
    [
        "run",
        "--spoke-cluster-name",
        cluster,
        "--hub-kubeconfig",
        &hub.kubeconfig.display().to_string(),
        "--spoke-kubeconfig",
        &spoke.kubeconfig.display().to_string(),
        "--http-address",
        &format!("127.0.0.1:{http_port}"),
        "--leader-elect=false",
        // The HTTPS probe port is fixed (8443) by default; another run may hold it.
        "--health-address=127.0.0.1:0",
        "--log-level",
        "info",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

async fn create_namespace(spoke: &kube::Client, name: &str) -> Result<(), kube::Error> {
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap_or_default();
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(spoke.clone())
        .create(&Default::default(), &ns)
        .await
        .map(|_| ())
}

/// The run's report (Markdown): the invariant counts, the faults and the workload figures.
fn report(
    plan: &Plan,
    w: &world::World,
    kills: u64,
    took: Duration,
    converged_in: Duration,
    samples: &[soak::Sample],
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let hub = match plan.wire {
        None => "Kubernetes hub".to_string(),
        Some(Transport::Mqtt) => "Maestro-shaped source over MQTT (mosquitto)".to_string(),
        Some(Transport::Grpc) => "CloudEvents gRPC source".to_string(),
        Some(Transport::PubSub) => "Maestro-shaped source over Pub/Sub (fake server)".to_string(),
    };
    let hub = match plan.wire {
        Some(_) => format!("{hub}, events of at most {} bytes", plan.ceiling),
        None => hub,
    };
    let _ = writeln!(out, "Hub: {hub}.");
    let _ = writeln!(
        out,
        "Seed {} ({} mode), {:.1} min in total ({:.0} s of workload{}), recovery window {:.0} s, convergence bound {:.0} s.\n",
        plan.seed,
        plan.mode,
        took.as_secs_f64() / 60.0,
        plan.duration.as_secs_f64(),
        if plan.kill_every.is_some() {
            " and faults"
        } else {
            ", no faults"
        },
        plan.recovery_window.as_secs_f64(),
        plan.converge_bound.as_secs_f64()
    );
    let _ = writeln!(out, "| invariant | count |\n| --- | ---: |");
    for (name, n) in w.counts.rows() {
        let _ = writeln!(out, "| {name} | {n} |");
    }
    let _ = writeln!(out, "\n| fault | injected |\n| --- | ---: |");
    let _ = writeln!(out, "| agent kill -9 | {kills} |");
    for (name, n) in &w.tally.faults {
        if *name != "agent kill -9" {
            let _ = writeln!(out, "| {name} | {n} |");
        }
    }
    if !w.tally.wire.is_empty() {
        let _ = writeln!(
            out,
            "\nWhat the armed wire faults did (counted by the source):\n\n| on the wire | count |\n| --- | ---: |"
        );
        for (name, n) in &w.tally.wire {
            let _ = writeln!(out, "| {name} | {n} |");
        }
    }
    let t = &w.tally;
    let _ = writeln!(
        out,
        "\nWorkload: {} works created, {} edits, {} deleted by the driver, {} seen Complete, {} deleted by TTL; {} foreign objects seeded, {} objects orphaned; {} agent exits not caused by the driver; {} driver operations refused (hub down).",
        t.created,
        t.edited,
        t.deleted,
        t.completed,
        t.ttl_deleted,
        w.foreign.len(),
        w.orphaned.len(),
        t.agent_unexpected_exits,
        t.op_errors
    );
    let _ = writeln!(
        out,
        "Converged {:.0} s after the last fault.",
        converged_in.as_secs_f64()
    );
    let rss: Vec<u64> = samples
        .iter()
        .map(|s| s.rss_kib)
        .filter(|r| *r > 0)
        .collect();
    if let (Some(min), Some(max)) = (rss.iter().min(), rss.iter().max()) {
        let series_max = samples.iter().map(|s| s.series).max().unwrap_or(0);
        let _ = writeln!(
            out,
            "Agent RSS {:.1}-{:.1} MiB over {} samples; at most {series_max} series on /metrics.",
            *min as f64 / 1024.0,
            *max as f64 / 1024.0,
            rss.len()
        );
    }
    if !w.violations.is_empty() {
        let _ = writeln!(out, "\nViolations:");
        for v in w.violations.iter().take(50) {
            let _ = writeln!(out, "- {v}");
        }
    }
    out
}
