//! The MQTT benchmark (`make bench-mqtt`): one agent (ours or Maestro's Go agent, started with
//! Maestro's agent command line) between the Maestro-shaped test source on a private mosquitto
//! and a spoke. Bursts of creates (publish to first status), deletes one at a time (publish to
//! `Deleted=True`), status events while many works sit idle, and the agent's memory and CPU
//! (also every few seconds, as `<label>-rss.csv`). Bundles hold one ConfigMap or more.
//! Documented in docs/performance.md ("CloudEvents over MQTT").

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use test_support::mosquitto::{Broker, Limits};
use test_support::mqtt_source::MqttSource;
use test_support::{AgentProcess, SPOKE_KUBECONFIG_ENV, TestCluster, free_port, unique_name};

use cloudevents::{CloudEvent, EventType};

use super::mqtt_report::{
    ApplyFloor, BrokerRestart, Burst, Cleanup, Environment, Firsts, Flavor, Idle, MemorySample,
    Parameters, Report, Restart, TopUp, client_budget, counted_since, latencies, spoke_requests,
    writes_of,
};
use super::run::{interrupted, scaled, utc_now};
use super::samples::{self, Sampler};
use super::stats::Summary;
use super::system::{self, Machine};

/// The source id Maestro uses.
const SOURCE_ID: &str = "maestro";
/// How often the harness looks at the source's status arrivals (the latencies come from the
/// arrival times the source recorded, not from this poll).
const POLL: Duration = Duration::from_millis(10);
/// How long the agent may take from start to its first spec resync request.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long one burst or batch may take to be Applied and Available, at least.
const PHASE_TIMEOUT: Duration = Duration::from_secs(300);
/// What a burst or batch may take per manifest beyond that: 10 a second, slower than either
/// agent applied on a busy machine.
const PER_MANIFEST: Duration = Duration::from_millis(100);
/// How long one delete may take.
const DELETE_TIMEOUT: Duration = Duration::from_secs(60);
/// After a burst, no status event for this long ends it (the Go agent sends a second status a
/// moment after the first; it belongs to the burst).
const BURST_QUIET: Duration = Duration::from_secs(5);
/// How long the idle works may take to settle before the window starts anyway.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long deleting the works left at the end may take.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(300);

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which agent.
    pub flavor: Flavor,
    /// Its binary (`work-agent` or `maestro`).
    pub agent_bin: PathBuf,
    /// Extra agent arguments, last.
    pub agent_args: Vec<String>,
    /// Commit or version of the agent (for the report).
    pub agent_commit: String,
    /// Burst sizes, in order.
    pub bursts: Vec<usize>,
    /// ConfigMaps in each bundle.
    pub configmaps_per_work: usize,
    /// Bytes of data in each ConfigMap.
    pub configmap_bytes: usize,
    /// Works deleted one at a time.
    pub deletions: usize,
    /// Works held in the idle phase.
    pub idle_works: usize,
    /// Bundles published at once while topping up to `idle_works`.
    pub batch: usize,
    /// The idle counting window.
    pub idle: Duration,
    /// No status event for this long counts as settled.
    pub quiet: Duration,
    /// After the idle window, kill the agent (SIGKILL), start it again over the idle works and
    /// measure its recovery (`Restart`).
    pub restart: bool,
    /// Status hashes per status resync request after a restart (Maestro sends at most 1,000).
    pub resync_part: usize,
    /// The broker's packet and queue limits.
    pub broker: Limits,
    /// Report name.
    pub label: String,
    /// Where the report and the samples (`<label>-rss.csv`) go.
    pub out_dir: PathBuf,
}

/// How long `manifests` new manifests may take to be Applied and Available.
fn apply_timeout(manifests: usize) -> Duration {
    PHASE_TIMEOUT.max(PER_MANIFEST.saturating_mul(u32::try_from(manifests).unwrap_or(u32::MAX)))
}

/// The agent's command line after the binary: Maestro's chart line plus loopback listeners.
pub fn agent_args(
    flavor: Flavor,
    consumer: &str,
    config: &Path,
    spoke_kubeconfig: &Path,
    listen_port: u16,
    http_port: u16,
    extra: &[String],
) -> Vec<String> {
    let mut args = vec![
        "agent".to_string(),
        format!("--consumer-name={consumer}"),
        "--workload-source-driver=mqtt".into(),
        format!("--workload-source-config={}", config.display()),
        format!("--cloudevents-client-id={consumer}-work-agent"),
        format!("--kubeconfig={}", spoke_kubeconfig.display()),
        "-v=2".into(),
        // Both serve HTTPS probes on :8443 by default; another agent on the machine may hold it.
        format!("--listen=127.0.0.1:{listen_port}"),
    ];
    if flavor == Flavor::Ours {
        // Ours also serves /metrics over plain HTTP (default :8080).
        args.push(format!("--http-address=127.0.0.1:{http_port}"));
    }
    args.extend(extra.iter().cloned());
    args
}

/// The agent's config file (upstream's MQTT options) for `consumer` on `broker`.
pub fn agent_config(broker: &str, consumer: &str) -> String {
    format!(
        "brokerHost: {broker}\ntopics:\n  sourceEvents: sources/{SOURCE_ID}/consumers/{consumer}/sourceevents\n  agentEvents: sources/{SOURCE_ID}/consumers/{consumer}/agentevents\n"
    )
}

/// A bundle of `configmaps` ConfigMaps in `ns` whose data hold `bytes` characters each: the
/// first is named `name`, the others `name-1`, `name-2`, ...
pub fn bundle(ns: &str, name: &str, configmaps: usize, bytes: usize) -> Value {
    let payload = "x".repeat(bytes);
    let manifests: Vec<Value> = (0..configmaps)
        .map(|j| {
            let name = if j == 0 {
                name.to_string()
            } else {
                format!("{name}-{j}")
            };
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns},
                "data": {"payload": payload},
            })
        })
        .collect();
    json!({ "manifests": manifests })
}

fn cpu_seconds(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| super::system::cpu_seconds_of_stat(&s))
        .unwrap_or_default()
}

/// The live state of a run.
struct Bench {
    opts: Options,
    spoke: TestCluster,
    spoke_kubeconfig: PathBuf,
    ns: String,
    broker: Broker,
    source: MqttSource,
    consumer: String,
    agent: Option<AgentProcess>,
    agent_args: Vec<String>,
    http_port: u16,
    firsts: Firsts,
    /// Works the source holds, oldest first.
    live: Vec<String>,
    next_name: usize,
    memory: Vec<MemorySample>,
    /// The agent's resident set and CPU time every few seconds, by phase.
    samples: Arc<Sampler>,
    /// CPU seconds of the agent processes killed for a restart.
    cpu_killed: f64,
    load_max: f64,
    started: Instant,
}

/// Runs the benchmark against the spoke of `WORK_AGENT_SPOKE_KUBECONFIG`; stops the agent and
/// the broker and removes what it made on the spoke on every exit path, also on Ctrl-C/SIGTERM.
pub async fn run(opts: Options) -> Result<Report, String> {
    let spoke_kubeconfig = std::env::var_os(SPOKE_KUBECONFIG_ENV)
        .map(PathBuf::from)
        .ok_or_else(|| format!("{SPOKE_KUBECONFIG_ENV} is not set (the spoke's kubeconfig)"))?;
    let spoke = TestCluster::try_from_env(SPOKE_KUBECONFIG_ENV)
        .await
        .map_err(|e| e.to_string())?;
    let ns = spoke
        .try_namespace("bench-mqtt")
        .await
        .map_err(|e| e.to_string())?;
    let broker = match Broker::start_with("bench-mqtt", opts.broker) {
        Ok(b) => b,
        Err(e) => {
            spoke.cleanup().await;
            return Err(e.to_string());
        }
    };
    let source = match MqttSource::connect(&broker.address(), SOURCE_ID).await {
        Ok(s) => s,
        Err(e) => {
            spoke.cleanup().await;
            return Err(e.to_string());
        }
    };
    let started = Instant::now();
    let samples = Arc::new(Sampler::new(started));
    let mut bench = Bench {
        opts,
        spoke,
        spoke_kubeconfig,
        ns,
        broker,
        source,
        consumer: unique_name("bench-mqtt"),
        agent: None,
        agent_args: Vec::new(),
        http_port: free_port(),
        firsts: Firsts::default(),
        live: Vec::new(),
        next_name: 0,
        memory: Vec::new(),
        samples: Arc::clone(&samples),
        cpu_killed: 0.0,
        load_max: 0.0,
        started,
    };
    let result = tokio::select! {
        r = bench.measure() => r,
        never = samples.run() => match never {},
        s = interrupted() => Err(format!("interrupted by {s}; cleaning up")),
    };
    match samples.write(&bench.opts.out_dir, &bench.opts.label) {
        Ok(path) => bench.progress(&format!("memory samples: {}", path.display())),
        Err(e) => bench.progress(&format!("WARNING: {e}")),
    }
    if let Err(e) = &result {
        bench.progress(&format!("FAILED: {e}"));
        if let Some(agent) = &bench.agent {
            bench.progress(&format!("agent log: {}", agent.log_path().display()));
        }
    }
    bench.teardown().await;
    result
}

impl Bench {
    fn progress(&mut self, msg: &str) {
        eprintln!(
            "[bench-mqtt {:>6.1}s] {msg}",
            self.started.elapsed().as_secs_f64()
        );
        self.load_max = self.load_max.max(system::loadavg()[0]);
    }

    fn pid(&self) -> Option<u32> {
        self.agent.as_ref().map(AgentProcess::pid)
    }

    /// Fails when the agent has exited.
    fn check_agent(&mut self) -> Result<(), String> {
        let Some(agent) = self.agent.as_mut() else {
            return Err("the agent is not running".into());
        };
        if agent.is_running() {
            return Ok(());
        }
        Err(format!(
            "the agent exited ({:?}); log {}:\n{}",
            agent.exit_status(),
            agent.log_path().display(),
            super::agent::tail(&agent.log(), 30)
        ))
    }

    /// Folds in the status events that arrived since the last call.
    fn poll(&mut self) {
        let new = self.source.status_arrivals_from(self.firsts.events);
        self.firsts.add(&new);
    }

    /// Polls until `done` holds for the folded-in events; fails after `timeout` or when the agent
    /// exits.
    async fn wait(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Firsts) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            self.poll();
            if done(&self.firsts) {
                return Ok(());
            }
            self.check_agent()?;
            if Instant::now() >= deadline {
                return Err(format!(
                    "{what}: not within {timeout:?}; source counters: {:?}",
                    self.source.counters()
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until no status event arrived for `quiet` (counting from `since` at the earliest);
    /// returns whether that happened before `timeout`.
    async fn wait_quiet(
        &mut self,
        since: Instant,
        quiet: Duration,
        timeout: Duration,
    ) -> Result<bool, String> {
        let deadline = Instant::now() + timeout;
        loop {
            self.poll();
            let last = self.firsts.last_event.map_or(since, |t| t.max(since));
            if last.elapsed() >= quiet {
                return Ok(true);
            }
            self.check_agent()?;
            if Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn sample_memory(&mut self, at: &str) {
        let Some(pid) = self.pid() else { return };
        if let Some((rss, hwm)) = system::memory_mib(pid) {
            // RssFile is mostly the binary's own code pages; RssAnon is the heap and stacks.
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let anon = system::status_mib(&status, "RssAnon");
            self.progress(&format!(
                "memory {at}: VmRSS {rss:.1} MiB (anonymous {:.1} MiB), VmHWM {hwm:.1} MiB",
                anon.unwrap_or_default()
            ));
            self.memory.push(MemorySample {
                at: at.into(),
                works: self.live.len(),
                rss_mib: rss,
                hwm_mib: hwm,
                rss_anon_mib: anon,
            });
        }
    }

    /// Publishes `n` creates at once; returns each id with the moment just before its publish.
    fn create(&mut self, n: usize) -> Result<Vec<(String, Instant)>, String> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            self.next_name += 1;
            let b = bundle(
                &self.ns,
                &format!("w{}", self.next_name),
                self.opts.configmaps_per_work,
                self.opts.configmap_bytes,
            );
            let at = Instant::now();
            let id = self
                .source
                .create(&self.consumer, b)
                .map_err(|e| e.to_string())?;
            self.live.push(id.clone());
            out.push((id, at));
        }
        Ok(out)
    }

    async fn wait_applied(&mut self, what: &str, ids: &[(String, Instant)]) -> Result<(), String> {
        let ids: Vec<String> = ids.iter().map(|(id, _)| id.clone()).collect();
        let timeout = apply_timeout(ids.len() * self.opts.configmaps_per_work);
        self.wait(what, timeout, |f| {
            ids.iter().all(|id| f.of(id).applied_available.is_some())
        })
        .await
    }

    async fn start_agent(&mut self) -> Result<(), String> {
        let requests_before = self.source.counters().spec_resync_requests;
        let config = self.broker.dir().join("agent-config.yaml");
        std::fs::write(
            &config,
            agent_config(&self.broker.address(), &self.consumer),
        )
        .map_err(|e| format!("writing {}: {e}", config.display()))?;
        self.agent_args = agent_args(
            self.opts.flavor,
            &self.consumer,
            &config,
            &self.spoke_kubeconfig,
            free_port(),
            self.http_port,
            &self.opts.agent_args,
        );
        let process = AgentProcess::try_start_binary(
            &self.opts.agent_bin,
            &self.agent_args,
            std::iter::empty::<(&str, &str)>(),
        )
        .map_err(|e| format!("starting {}: {e}", self.opts.agent_bin.display()))?;
        let log = process.log_path().display().to_string();
        self.samples.watch(Some(process.pid()));
        self.agent = Some(process);
        self.progress(&format!(
            "started {} {} (log {log})",
            self.opts.agent_bin.display(),
            self.agent_args.join(" ")
        ));
        // Both agents ask for a spec resync as soon as they are subscribed: that is "ready".
        let deadline = Instant::now() + READY_TIMEOUT;
        while self.source.counters().spec_resync_requests == requests_before {
            self.check_agent()?;
            if Instant::now() >= deadline {
                return Err(format!(
                    "the agent sent no spec resync request within {READY_TIMEOUT:?}; log {log}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    async fn measure(&mut self) -> Result<Report, String> {
        let load_start = system::loadavg();
        let date = utc_now();
        self.progress(&format!(
            "flavor {}, load {:.2} / {:.2} / {:.2}, spoke namespace {}, broker {}",
            self.opts.flavor.name(),
            load_start[0],
            load_start[1],
            load_start[2],
            self.ns,
            self.broker.address()
        ));
        self.start_agent().await?;
        let ready_at = Instant::now();
        self.progress(&format!(
            "ready: spec resync request after {:.2} s",
            self.started.elapsed().as_secs_f64()
        ));
        // Let start-up work (caches, informers) finish before the first sample and burst.
        tokio::time::sleep(Duration::from_secs(3)).await;
        self.sample_memory("ready");

        let mut bursts = Vec::new();
        self.samples.phase("bursts");
        for size in self.opts.bursts.clone() {
            let from = self.firsts.events;
            let published = self.create(size)?;
            self.wait_applied(&format!("burst of {size}"), &published)
                .await?;
            let last_applied = published
                .iter()
                .filter_map(|(id, _)| self.firsts.of(id).applied_available)
                .max();
            let first_publish = published.iter().map(|(_, at)| *at).min();
            self.wait_quiet(Instant::now(), BURST_QUIET, Duration::from_secs(60))
                .await?;
            let ids: BTreeSet<&str> = published.iter().map(|(id, _)| id.as_str()).collect();
            let status_events = self
                .source
                .status_arrivals_from(from)
                .iter()
                .filter(|a| ids.contains(a.resource_id.as_str()))
                .count();
            let burst = Burst {
                size,
                first_status: Summary::of(&latencies(&published, &self.firsts, |f| f.any)),
                applied: Summary::of(&latencies(&published, &self.firsts, |f| f.applied)),
                applied_available: Summary::of(&latencies(&published, &self.firsts, |f| {
                    f.applied_available
                })),
                status_events,
                wall_ms: match (first_publish, last_applied) {
                    (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64() * 1000.0,
                    _ => 0.0,
                },
            };
            self.progress(&format!(
                "burst of {size}: first status p50 {:.0} ms p99 {:.0} ms; Applied+Available p50 {:.0} ms p99 {:.0} ms; {status_events} status events",
                burst.first_status.as_ref().map_or(0.0, |s| s.p50_ms),
                burst.first_status.as_ref().map_or(0.0, |s| s.p99_ms),
                burst.applied_available.as_ref().map_or(0.0, |s| s.p50_ms),
                burst.applied_available.as_ref().map_or(0.0, |s| s.p99_ms),
            ));
            bursts.push(burst);
        }
        self.sample_memory("after bursts");

        let mut deletes = Vec::new();
        self.samples.phase("deletes");
        for _ in 0..self.opts.deletions.min(self.live.len()) {
            let id = self.live.remove(0);
            let at = Instant::now();
            self.source.delete(&id).map_err(|e| e.to_string())?;
            let target = id.clone();
            self.wait(&format!("Deleted=True for {id}"), DELETE_TIMEOUT, |f| {
                f.of(&target).deleted.is_some()
            })
            .await?;
            if let Some(t) = self.firsts.of(&id).deleted {
                deletes.push(t.saturating_duration_since(at));
            }
        }
        let delete = Summary::of(&deletes);
        if let Some(d) = &delete {
            self.progress(&format!(
                "{} deletes: p50 {:.0} ms, p99 {:.0} ms",
                d.count, d.p50_ms, d.p99_ms
            ));
        }

        let need = self.opts.idle_works.saturating_sub(self.live.len());
        self.samples.phase("top_up");
        let requests_before = self.spoke_requests_now().await;
        let top_up_start = Instant::now();
        let mut done = 0;
        while done < need {
            let n = self.opts.batch.min(need - done);
            let published = self.create(n)?;
            self.wait_applied(&format!("top-up batch of {n}"), &published)
                .await?;
            done += n;
        }
        let seconds = top_up_start.elapsed().as_secs_f64();
        let (qps, burst) = client_budget(&self.opts.agent_args);
        let top_up = TopUp {
            works: need,
            batch: self.opts.batch,
            seconds,
            floor: Some(ApplyFloor::new(
                need,
                self.opts.configmaps_per_work,
                qps,
                burst,
            )),
            spoke_requests: counted_since(&requests_before, &self.spoke_requests_now().await),
        };
        self.progress(&format!(
            "{} works applied (top-up of {need} in {:.1} s); settling",
            self.live.len(),
            top_up.seconds
        ));

        self.samples.phase("settle");
        let settle_start = Instant::now();
        let settled = self
            .wait_quiet(
                settle_start,
                self.opts.quiet,
                scaled(SETTLE_TIMEOUT, self.opts.idle_works),
            )
            .await?;
        let settle_seconds = settle_start.elapsed().as_secs_f64();
        self.sample_memory("settled");
        let pid = self.pid().unwrap_or_default();
        let cpu_idle_start = cpu_seconds(pid);
        let from = self.firsts.events;
        self.progress(&format!(
            "counting status events for {:.0} s",
            self.opts.idle.as_secs_f64()
        ));
        self.samples.phase("idle");
        let window_start = Instant::now();
        while window_start.elapsed() < self.opts.idle {
            self.check_agent()?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            self.load_max = self.load_max.max(system::loadavg()[0]);
        }
        let window = window_start.elapsed();
        let cpu_idle = cpu_seconds(pid) - cpu_idle_start;
        self.poll();
        let in_window = self.source.status_arrivals_from(from);
        let mut by_type = BTreeMap::new();
        for a in &in_window {
            *by_type
                .entry(a.event_type.as_type().to_string())
                .or_insert(0) += 1;
        }
        let works_touched = in_window
            .iter()
            .map(|a| a.resource_id.as_str())
            .collect::<BTreeSet<_>>()
            .len();
        let idle = Idle {
            works: self.live.len(),
            settled,
            settle_seconds,
            window_seconds: window.as_secs_f64(),
            status_events: in_window.len(),
            per_minute: in_window.len() as f64 * 60.0 / window.as_secs_f64().max(1.0),
            works_touched,
            by_type,
        };
        self.progress(&format!(
            "idle: {} status events in {:.0} s ({:.2} per minute)",
            idle.status_events, idle.window_seconds, idle.per_minute
        ));
        self.sample_memory("idle end");
        let spoke_requests = self.spoke_requests_now().await;

        let restart = if self.opts.restart {
            Some(self.restart().await?)
        } else {
            None
        };

        self.samples.phase("cleanup");
        let cleanup_ids = std::mem::take(&mut self.live);
        let cleanup_start = Instant::now();
        for id in &cleanup_ids {
            self.source.delete(id).map_err(|e| e.to_string())?;
        }
        let waited = self
            .wait("cleanup", CLEANUP_TIMEOUT, |f| {
                cleanup_ids.iter().all(|id| f.of(id).deleted.is_some())
            })
            .await;
        let left = cleanup_ids
            .iter()
            .filter(|id| self.firsts.of(id).deleted.is_none())
            .count();
        if let Err(e) = waited {
            self.progress(&format!("cleanup incomplete: {e}"));
        }
        // The processes started in this run: their CPU time so far is the run's.
        let cpu_total = self.cpu_killed + self.pid().map_or(0.0, cpu_seconds);
        let cleanup = Cleanup {
            works: cleanup_ids.len(),
            seconds: cleanup_start.elapsed().as_secs_f64(),
            left,
        };
        self.progress(&format!(
            "cleanup: {} works deleted in {:.1} s ({left} left); agent up {:.0} s",
            cleanup.works,
            cleanup.seconds,
            ready_at.elapsed().as_secs_f64()
        ));

        let c = self.source.counters();
        let source_counters = BTreeMap::from([
            ("received".to_string(), c.received),
            ("malformed".into(), c.malformed),
            ("accepted".into(), c.accepted),
            ("unchanged".into(), c.unchanged),
            ("stale".into(), c.stale),
            ("rejected_sequence".into(), c.rejected_sequence),
            ("rejected_source".into(), c.rejected_source),
            ("rejected_consumer".into(), c.rejected_consumer),
            ("unknown_resource".into(), c.unknown_resource),
            ("deleted".into(), c.deleted),
            ("deleted_unrequested".into(), c.deleted_unrequested),
            ("spec_resync_requests".into(), c.spec_resync_requests),
            ("spec_resync_responses".into(), c.spec_resync_responses),
            ("ignored".into(), c.ignored),
        ]);
        let p = &self.opts;
        let bundle_bytes = bundle(&self.ns, "w1", p.configmaps_per_work, p.configmap_bytes)
            .to_string()
            .len();
        let environment = Environment {
            machine: Machine::at_end(date, load_start, self.load_max),
            flavor: p.flavor,
            agent_bin: p.agent_bin.display().to_string(),
            agent_commit: p.agent_commit.clone(),
            agent_args: self.agent_args.clone(),
        };
        let parameters = Parameters {
            bursts: p.bursts.clone(),
            bundle_bytes,
            deletions: p.deletions,
            idle_works: p.idle_works,
            idle_seconds: p.idle.as_secs_f64(),
            quiet_seconds: p.quiet.as_secs_f64(),
            broker_limits: Some((p.broker.max_packet_bytes, p.broker.max_queued_messages)),
            configmaps_per_work: p.configmaps_per_work,
        };
        Ok(Report {
            label: p.label.clone(),
            environment,
            parameters,
            bursts,
            delete,
            top_up,
            idle,
            memory: std::mem::take(&mut self.memory),
            cpu_seconds_total: cpu_total,
            cpu_seconds_idle: cpu_idle,
            cleanup,
            source_counters,
            spoke_requests,
            works_created: self.next_name,
            restart,
            rss_csv: Some(samples::csv_name(&p.label)),
        })
    }

    /// The agent's spoke requests by verb so far (ours only; empty for the Go agent).
    async fn spoke_requests_now(&self) -> BTreeMap<String, u64> {
        match self.opts.flavor {
            Flavor::Ours => super::agent::http_get(self.http_port, "/metrics")
                .await
                .map(|m| spoke_requests(&m))
                .unwrap_or_default(),
            Flavor::MaestroGo => BTreeMap::new(),
        }
    }

    /// The agent's metrics now (empty for Maestro's agent, which the harness does not scrape).
    async fn metrics_now(&self) -> String {
        match self.opts.flavor {
            Flavor::Ours => super::agent::http_get(self.http_port, "/metrics")
                .await
                .unwrap_or_default(),
            Flavor::MaestroGo => String::new(),
        }
    }

    /// What crossed the broker since its restart at `restarted` (the source's events from
    /// `received_from`, its sends from `sent_from`), with the agent's counters against
    /// `metrics_before`.
    async fn broker_restart_figures(
        &self,
        received_from: usize,
        sent_from: usize,
        metrics_before: &str,
        restarted: Instant,
    ) -> BrokerRestart {
        let to_source = format!(
            "sources/{SOURCE_ID}/consumers/{}/agentevents",
            self.consumer
        );
        let to_agent = format!(
            "sources/{SOURCE_ID}/consumers/{}/sourceevents",
            self.consumer
        );
        let received: Vec<CloudEvent> = self
            .source
            .events()
            .into_iter()
            .skip(received_from)
            .collect();
        let sent: Vec<CloudEvent> = self.source.sent().into_iter().skip(sent_from).collect();
        let requests: Vec<&CloudEvent> = received
            .iter()
            .filter(|e| e.type_ == EventType::SpecResyncRequest.as_type())
            .collect();
        let answers: Vec<&CloudEvent> = sent
            .iter()
            .filter(|e| e.type_ == EventType::SpecResyncResponse.as_type())
            .collect();
        let metrics_after = self.metrics_now().await;
        let counter = |metrics: &str, name: &str| -> u64 {
            metrics
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.rsplit(' ').next()?.parse().ok())
                .unwrap_or(0)
        };
        let grew = |name: &str| {
            counter(&metrics_after, name).saturating_sub(counter(metrics_before, name))
        };
        BrokerRestart {
            max_packet: self.opts.broker.max_packet_bytes,
            seconds: restarted.elapsed().as_secs_f64(),
            requests: requests.len(),
            request_bytes: requests
                .iter()
                .map(|e| mqtt_packet_bytes(&to_source, e))
                .sum(),
            listed: requests
                .iter()
                .filter_map(|e| serde_json::from_slice::<Value>(e.data.as_deref()?).ok())
                .filter_map(|v| v["resourceVersions"].as_array().map(Vec::len))
                .sum(),
            answers: answers.len(),
            answer_bytes: answers
                .iter()
                .map(|e| mqtt_packet_bytes(&to_agent, e))
                .sum(),
            largest_from_agent: received
                .iter()
                .map(|e| mqtt_packet_bytes(&to_source, e))
                .max()
                .unwrap_or(0),
            largest_from_source: sent
                .iter()
                .map(|e| mqtt_packet_bytes(&to_agent, e))
                .max()
                .unwrap_or(0),
            spoke_writes: writes_of(&spoke_requests(&metrics_after))
                .saturating_sub(writes_of(&spoke_requests(metrics_before))),
            unconfirmed: grew("work_agent_source_desync_total{kind=\"unconfirmed\"}"),
            reconnects: grew("cloudevents_client_reconnected_total"),
        }
    }

    /// The newest spec resync request the source received after event `received_from`: its
    /// versions, the bytes of its data and of the whole MQTT message (structured mode).
    fn spec_resync_request_since(&self, received_from: usize) -> (usize, usize, usize) {
        let request = self
            .source
            .events()
            .into_iter()
            .skip(received_from)
            .rev()
            .find(|e| e.type_ == EventType::SpecResyncRequest.as_type());
        let data = request.as_ref().and_then(|e| e.data.as_deref());
        let versions = data
            .and_then(|d| serde_json::from_slice::<Value>(d).ok())
            .and_then(|v| v["resourceVersions"].as_array().map(Vec::len))
            .unwrap_or(0);
        let message = request
            .as_ref()
            .and_then(|e| cloudevents::mqtt::to_structured(e).ok())
            .map_or(0, |m| m.payload.len());
        (versions, data.map_or(0, <[u8]>::len), message)
    }

    /// Waits for the first status event after event `from` (at most `first`), then until none
    /// came for the quiet period; returns whether it went quiet and the works reported.
    async fn settle_after(
        &mut self,
        from: usize,
        first: Duration,
    ) -> Result<(bool, usize), String> {
        let deadline = Instant::now() + first;
        while self.source.status_arrivals_from(from).is_empty() && Instant::now() < deadline {
            self.check_agent()?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let settled = self
            .wait_quiet(
                Instant::now(),
                self.opts.quiet,
                scaled(SETTLE_TIMEOUT, self.opts.idle_works),
            )
            .await?;
        let reported = self
            .source
            .status_arrivals_from(from)
            .iter()
            .map(|a| a.resource_id.as_str())
            .collect::<BTreeSet<_>>()
            .len();
        Ok((settled, reported))
    }

    /// Waits until every live work has a status event from arrival `from` on (at most `timeout`);
    /// returns how many have.
    async fn wait_reported_again(
        &mut self,
        from: usize,
        timeout: Duration,
    ) -> Result<usize, String> {
        let deadline = Instant::now() + timeout;
        let mut heard = BTreeSet::new();
        let mut cursor = from;
        loop {
            let new = self.source.status_arrivals_from(cursor);
            cursor += new.len();
            heard.extend(new.into_iter().map(|a| a.resource_id));
            let reported = self.live.iter().filter(|id| heard.contains(*id)).count();
            if reported == self.live.len() || Instant::now() >= deadline {
                self.progress(&format!(
                    "{reported} of {} works reported again",
                    self.live.len()
                ));
                return Ok(reported);
            }
            self.check_agent()?;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Kills the agent (SIGKILL), starts it again over the idle works and measures its recovery
    /// (status events, spoke requests); restarts the broker, so that the agent, reconnecting,
    /// lists every work it holds in its spec resync request (its size is measured); restarts the
    /// source as Maestro does, asking for every status in requests of `resync_part` hashes (the
    /// source has every status: none should be answered); then sends one stale hash in each part
    /// but the last, which is not sent (only the stale ones should be answered).
    async fn restart(&mut self) -> Result<Restart, String> {
        self.samples.phase("restart");
        if let Some(agent) = self.agent.as_mut() {
            self.cpu_killed += cpu_seconds(agent.pid());
            self.samples.watch(None);
            agent.kill();
        }
        self.progress("agent killed (SIGKILL); starting it again");
        let before = self.source.counters();
        let from = self.firsts.events;
        let received_from = self.source.events().len();
        let started = Instant::now();
        self.start_agent().await?;
        let spec_resync_seconds = started.elapsed().as_secs_f64();
        let (start_versions, _, _) = self.spec_resync_request_since(received_from);
        // Every work reported again, then quiet: a restart is over when the source has heard of
        // every work (the broker restart below would otherwise cut the source's answer short).
        let reported = self
            .wait_reported_again(from, scaled(SETTLE_TIMEOUT, self.live.len()))
            .await?;
        let (settled, _) = self.settle_after(from, Duration::from_secs(1)).await?;
        let settle_seconds = started.elapsed().as_secs_f64();
        self.sample_memory("restarted, settled");
        let spoke_requests = self.spoke_requests_now().await;
        let after = self.source.counters();
        let status_events = self.source.status_arrivals_from(from).len();
        self.progress(&format!(
            "restart: settled {settled} after {settle_seconds:.1} s, {status_events} status events about {reported} works, spoke {spoke_requests:?}"
        ));

        // The broker restarts: the agent reconnects and lists what it holds.
        self.samples.phase("resync");
        let received_from = self.source.events().len();
        let sent_from = self.source.sent().len();
        let metrics_before = self.metrics_now().await;
        let requests_before = self.source.counters().spec_resync_requests;
        let broker_restarted = Instant::now();
        self.broker.restart().map_err(|e| e.to_string())?;
        // The source reconnects as a restarted Maestro server: its status resync in parts.
        let from = self.firsts.events;
        let asked = Instant::now();
        self.source
            .restart(self.opts.resync_part)
            .await
            .map_err(|e| e.to_string())?;
        let deadline = Instant::now() + READY_TIMEOUT;
        while self.source.counters().spec_resync_requests == requests_before
            && Instant::now() < deadline
        {
            self.check_agent()?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (spec_resync_versions, spec_resync_data_bytes, spec_resync_message_bytes) =
            self.spec_resync_request_since(received_from);
        self.wait_quiet(
            asked,
            BURST_QUIET,
            scaled(SETTLE_TIMEOUT, self.opts.idle_works),
        )
        .await?;
        let broker_restart = self
            .broker_restart_figures(received_from, sent_from, &metrics_before, broker_restarted)
            .await;
        self.progress(&format!("broker restart: {broker_restart:?}"));
        let hashes = self.source.status_hashes(&self.consumer);
        let parts = hashes.len().div_ceil(self.opts.resync_part.max(1));
        let current_answers = self.source.status_arrivals_from(from).len();

        // One stale hash per part; the last part is not sent: its works must get no answer.
        let mut stale = BTreeSet::new();
        let mut unlisted = BTreeSet::new();
        let from = self.firsts.events;
        let chunks: Vec<Vec<(String, String)>> = hashes
            .chunks(self.opts.resync_part.max(1))
            .map(<[_]>::to_vec)
            .collect();
        let sent_parts = chunks.len().saturating_sub(1).max(1);
        let asked = Instant::now();
        for (i, mut part) in chunks.into_iter().enumerate() {
            if i >= sent_parts {
                unlisted.extend(part.into_iter().map(|(id, _)| id));
                continue;
            }
            if let Some(first) = part.first_mut() {
                first.1 = "stale".into();
                stale.insert(first.0.clone());
            }
            self.source
                .request_status_resync(&self.consumer, part)
                .map_err(|e| e.to_string())?;
        }
        self.wait_quiet(
            asked,
            BURST_QUIET,
            scaled(SETTLE_TIMEOUT, self.opts.idle_works),
        )
        .await?;
        let answers = self.source.status_arrivals_from(from);
        let stale_answered = answers
            .iter()
            .filter(|a| stale.contains(&a.resource_id))
            .map(|a| a.resource_id.as_str())
            .collect::<BTreeSet<_>>()
            .len();
        let unlisted_answered = answers
            .iter()
            .filter(|a| unlisted.contains(&a.resource_id))
            .count();
        let other_answered = answers
            .iter()
            .filter(|a| !stale.contains(&a.resource_id) && !unlisted.contains(&a.resource_id))
            .count();
        self.sample_memory("after the status resyncs");
        let restart = Restart {
            works: self.live.len(),
            spec_resync_seconds,
            start_versions,
            reported,
            spec_resync_versions,
            spec_resync_data_bytes,
            spec_resync_message_bytes,
            settled,
            settle_seconds,
            status_events,
            status_unchanged: after.unchanged.saturating_sub(before.unchanged),
            status_accepted: after.accepted.saturating_sub(before.accepted),
            spoke_requests,
            resync_part: self.opts.resync_part,
            resync_parts: parts,
            current_answers,
            stale_listed: stale.len(),
            stale_answered,
            unlisted: unlisted.len(),
            unlisted_answered,
            other_answered,
            broker_restart,
        };
        self.progress(&format!("restart: {restart:?}"));
        Ok(restart)
    }

    /// Stops the agent, then removes what is left on the spoke: AppliedManifestWorks of this run
    /// (their finalizer dropped, since no agent will clean them up any more) and the namespace;
    /// nothing when the spoke is stopped after the run (`BENCH_MQTT_SPOKE_DISPOSABLE=1`).
    async fn teardown(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            self.samples.watch(None);
            agent.stop();
        }
        if std::env::var("BENCH_MQTT_SPOKE_DISPOSABLE").is_ok_and(|v| v == "1") {
            // bench-mqtt.sh stops this spoke after the run: nothing on it needs removing.
            return;
        }
        let applied: Api<DynamicObject> = Api::all_with(
            self.spoke.client.clone(),
            &ApiResource {
                group: "work.open-cluster-management.io".into(),
                version: "v1".into(),
                api_version: "work.open-cluster-management.io/v1".into(),
                kind: "AppliedManifestWork".into(),
                plural: "appliedmanifestworks".into(),
            },
        );
        let prefix = format!("{}-", work_api::hub_hash(&self.broker.address()));
        let names: Vec<String> = match applied.list(&ListParams::default()).await {
            Ok(list) => list
                .items
                .into_iter()
                .filter_map(|o| o.metadata.name)
                .filter(|n| n.starts_with(&prefix))
                .collect(),
            Err(e) => {
                self.progress(&format!("listing AppliedManifestWorks: {e}"));
                Vec::new()
            }
        };
        if !names.is_empty() {
            self.progress(&format!(
                "removing {} AppliedManifestWorks left behind",
                names.len()
            ));
        }
        let unfinalize = Patch::Merge(json!({"metadata": {"finalizers": null}}));
        for n in &names {
            let _ = applied.patch(n, &PatchParams::default(), &unfinalize).await;
            let _ = applied.delete(n, &DeleteParams::default()).await;
        }
        self.spoke.cleanup().await;
    }
}

/// Bytes of the MQTT 5 PUBLISH that carries `event` on `topic` in binary mode (as the agent and
/// Maestro send it; QoS 1, so with a packet id): what a broker's `max_packet_size` counts.
pub fn mqtt_packet_bytes(topic: &str, event: &CloudEvent) -> usize {
    let message = cloudevents::mqtt::to_binary(event);
    let properties = rumqttc::v5::mqttbytes::v5::PublishProperties {
        content_type: message.content_type,
        user_properties: message.user_properties,
        ..Default::default()
    };
    let mut publish = rumqttc::v5::mqttbytes::v5::Publish::new(
        topic,
        rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
        message.payload,
        Some(properties),
    );
    publish.pkid = 1;
    publish.size()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_flavors_get_maestros_line() {
        let line = |f| {
            agent_args(
                f,
                "c1",
                Path::new("/cfg.yaml"),
                Path::new("/spoke"),
                8443,
                8080,
                &["--status-sync-interval=10s".to_string()],
            )
            .join(" ")
        };
        let go = line(Flavor::MaestroGo);
        assert_eq!(
            go,
            "agent --consumer-name=c1 --workload-source-driver=mqtt --workload-source-config=/cfg.yaml --cloudevents-client-id=c1-work-agent --kubeconfig=/spoke -v=2 --listen=127.0.0.1:8443 --status-sync-interval=10s"
        );
        let ours = line(Flavor::Ours);
        assert!(
            ours.ends_with(
                "--listen=127.0.0.1:8443 --http-address=127.0.0.1:8080 --status-sync-interval=10s"
            ),
            "{ours}"
        );
    }

    #[test]
    fn config_and_bundle() {
        let cfg = agent_config("127.0.0.1:1883", "c1");
        assert!(cfg.starts_with("brokerHost: 127.0.0.1:1883\n"), "{cfg}");
        assert!(cfg.contains("sourceEvents: sources/maestro/consumers/c1/sourceevents"));
        assert!(cfg.contains("agentEvents: sources/maestro/consumers/c1/agentevents"));
        let b = bundle("ns", "w1", 1, 100);
        assert_eq!(b["manifests"].as_array().map(Vec::len), Some(1));
        assert_eq!(b["manifests"][0]["metadata"]["name"], "w1");
        assert_eq!(b["manifests"][0]["metadata"]["namespace"], "ns");
        assert_eq!(
            b["manifests"][0]["data"]["payload"].as_str().map(str::len),
            Some(100)
        );
    }

    #[test]
    fn a_bundle_of_several_configmaps_names_each_once() {
        let b = bundle("ns", "w7", 10, 50);
        let manifests = b["manifests"].as_array().cloned().unwrap_or_default();
        let names: Vec<&str> = manifests
            .iter()
            .filter_map(|m| m["metadata"]["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "w7", "w7-1", "w7-2", "w7-3", "w7-4", "w7-5", "w7-6", "w7-7", "w7-8", "w7-9"
            ]
        );
        for m in &manifests {
            assert_eq!(
                (m["kind"].as_str(), m["metadata"]["namespace"].as_str()),
                (Some("ConfigMap"), Some("ns"))
            );
            assert_eq!(m["data"]["payload"].as_str().map(str::len), Some(50));
        }
    }

    #[test]
    fn a_large_batch_gets_time_for_each_manifest() {
        assert_eq!(apply_timeout(100), PHASE_TIMEOUT);
        assert_eq!(apply_timeout(1_000), PHASE_TIMEOUT);
        assert_eq!(apply_timeout(850 * 10), Duration::from_secs(850));
    }

    #[test]
    fn cpu_time_from_proc_stat() {
        // pid (comm with spaces) state ppid ... utime(14) stime(15)
        let stat = "42 (maestro agent) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0";
        assert_eq!(super::super::system::cpu_seconds_of_stat(stat), Some(3.0));
        assert_eq!(super::super::system::cpu_seconds_of_stat("garbage"), None);
        assert!(cpu_seconds(std::process::id()) >= 0.0);
    }
}
