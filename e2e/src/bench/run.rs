//! One benchmark run against live control planes: create the works, time and count what the
//! agent does in each phase, and clean up on every exit path.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use test_support::{HUB_KUBECONFIG_ENV, SPOKE_KUBECONFIG_ENV, TestCluster};

use super::agent::{Agent, AgentSpec, Flavor, tail};
use super::hub_watch::{FEEDBACK_NAME, HubWatch, Seen};
use super::prometheus::{self, Counts};
use super::report::{self, Environment, Memory, Parameters, Phase, Report};
use super::samples::Sampler;
use super::stats::Summary;
use super::system::{self, Machine};

/// Requests the harness keeps in flight while creating works: its own client must not be the
/// bottleneck (kube clients have no client-side rate limit).
const CREATE_CONCURRENCY: usize = 64;
/// Annotation the status-latency phase sets on the spoke; no manifest sets it.
const FLAG_ANNOTATION: &str = "benchflag";
/// How long one status change or one deletion may take before the run fails.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The agent is idle once its request counters have not moved for this long.
const QUIET: Duration = Duration::from_secs(5);
/// How long to wait for the agent to go idle after a phase.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long cleanup may take.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(300);
/// `--status-sync-period` of the agent that does the first apply: long, so that no safety-net
/// resync mixes into the first-apply counts.
const FIRST_AGENT_SYNC_PERIOD: Duration = Duration::from_secs(3600);
/// Spoke resources the agent touches with ConfigMap works; other resources on the spoke are the
/// controller-manager's, the scheduler's and kwok's.
const SPOKE_AGENT_RESOURCES: [&str; 2] = [
    "configmaps",
    "appliedmanifestworks.work.open-cluster-management.io",
];

/// Hub resources that are not the agent's: the API server renews its own identity lease (the
/// agent runs with `--leader-elect=false`) and lists services for its `kubernetes` service.
const HUB_NOISE_RESOURCES: [&str; 2] = ["leases.coordination.k8s.io", "services"];
/// The ManifestWork resource as the API server's metrics name it.
const MANIFESTWORKS: &str = "manifestworks.work.open-cluster-management.io";

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which agent: ours or upstream's.
    pub flavor: Flavor,
    /// ManifestWorks to create.
    pub works: usize,
    /// ConfigMaps per work.
    pub configmaps_per_work: usize,
    /// Agent QPS (hub and spoke).
    pub qps: f64,
    /// Agent burst (hub and spoke).
    pub burst: u32,
    /// The agent binary.
    pub agent_bin: PathBuf,
    /// Extra agent arguments.
    pub agent_args: Vec<String>,
    /// Commit of the agent build (for the report).
    pub agent_commit: String,
    /// Build profile of the agent (for the report).
    pub agent_profile: String,
    /// `--status-sync-period` in the idle-resync phase.
    pub resync_period: Duration,
    /// Spoke changes to time.
    pub latency_samples: usize,
    /// Works to delete and time.
    pub deletion_samples: usize,
    /// Report name.
    pub label: String,
    /// Where the report goes.
    pub out_dir: PathBuf,
    /// How long the first apply may take.
    pub apply_timeout: Duration,
}

/// Counters of both API servers and of the agent at one moment.
#[derive(Debug, Clone)]
struct Snapshot {
    at: Instant,
    hub: Counts,
    spoke: Counts,
    agent_hub: Option<Counts>,
    agent_spoke: Option<Counts>,
    /// The harness's own `/metrics` scrapes so far (hub, spoke), which the servers count too.
    scrapes: (u64, u64),
}

/// The live state of a run.
struct Bench {
    opts: Options,
    hub: TestCluster,
    spoke: TestCluster,
    cluster: String,
    spoke_ns: String,
    works: Api<DynamicObject>,
    configmaps: Api<DynamicObject>,
    applied: Api<DynamicObject>,
    watch: HubWatch,
    agent: tokio::sync::Mutex<Option<Agent>>,
    hub_scrapes: AtomicU64,
    spoke_scrapes: AtomicU64,
    load_max: Mutex<f64>,
    started: Instant,
    /// The command line of every agent started, in order (for the report).
    commands: Mutex<Vec<String>>,
    /// The agent's resident set and CPU time over the run, by phase.
    samples: Sampler,
}

/// Runs the benchmark and writes the report; cleans up whatever happens, also on Ctrl-C/SIGTERM.
pub async fn run(opts: Options) -> Result<Report, String> {
    let hub = TestCluster::try_from_env(HUB_KUBECONFIG_ENV)
        .await
        .map_err(|e| e.to_string())?;
    let spoke = TestCluster::try_from_env(SPOKE_KUBECONFIG_ENV)
        .await
        .map_err(|e| e.to_string())?;
    let cluster = hub
        .try_namespace("bench")
        .await
        .map_err(|e| e.to_string())?;
    let spoke_ns = match spoke.try_namespace("bench").await {
        Ok(ns) => ns,
        Err(e) => {
            hub.cleanup().await;
            return Err(e.to_string());
        }
    };
    let works = Api::namespaced_with(hub.client.clone(), &cluster, &manifestwork_resource());
    let configmaps = Api::namespaced_with(
        spoke.client.clone(),
        &spoke_ns,
        &ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        },
    );
    let applied = Api::all_with(spoke.client.clone(), &applied_resource());
    let started = Instant::now();
    let bench = Bench {
        watch: HubWatch::start(works.clone()),
        opts,
        hub,
        spoke,
        cluster,
        spoke_ns,
        works,
        configmaps,
        applied,
        agent: tokio::sync::Mutex::new(None),
        hub_scrapes: AtomicU64::new(0),
        spoke_scrapes: AtomicU64::new(0),
        load_max: Mutex::new(0.0),
        started,
        commands: Mutex::new(Vec::new()),
        samples: Sampler::new(started),
    };
    let result = tokio::select! {
        r = bench.measure() => r,
        never = bench.samples.run() => match never {},
        s = interrupted() => Err(format!("interrupted by {s}; cleaning up")),
    };
    match bench.samples.write(&bench.opts.out_dir, &bench.opts.label) {
        Ok(path) => bench.progress(&format!("memory samples: {}", path.display())),
        Err(e) => bench.progress(&format!("WARNING: {e}")),
    }
    if let Err(e) = &result {
        bench.progress(&format!("FAILED: {e}"));
    }
    bench.cleanup().await;
    result
}

/// `base`, or 20 ms a work when that is longer: settling, restarting and deleting take longer
/// with more works, and a phase that runs out of time measures nothing.
pub fn scaled(base: Duration, works: usize) -> Duration {
    base.max(Duration::from_millis(20).saturating_mul(u32::try_from(works).unwrap_or(u32::MAX)))
}

/// Resolves on SIGINT or SIGTERM with the signal's name.
pub async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        // Without signal handlers the run simply cannot be interrupted cleanly.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

impl Bench {
    fn progress(&self, msg: &str) {
        eprintln!(
            "[bench-agent {:>6.1}s] {msg}",
            self.started.elapsed().as_secs_f64()
        );
        let load = system::loadavg()[0];
        let mut max = self.load_max.lock().unwrap_or_else(|p| p.into_inner());
        *max = max.max(load);
    }

    fn work_name(&self, i: usize) -> String {
        format!("{}-{i:05}", self.cluster)
    }

    fn agent_spec(&self, period: Duration) -> AgentSpec<'_> {
        AgentSpec {
            flavor: self.opts.flavor,
            bin: &self.opts.agent_bin,
            cluster: &self.cluster,
            hub_kubeconfig: &self.hub.kubeconfig,
            spoke_kubeconfig: &self.spoke.kubeconfig,
            qps: self.opts.qps,
            burst: self.opts.burst,
            status_sync_period: period,
            extra: &self.opts.agent_args,
        }
    }

    async fn start_agent(&self, period: Duration) -> Result<(), String> {
        let agent = Agent::start(&self.agent_spec(period)).await?;
        self.progress(&format!(
            "agent pid {} ready (log {}): {}",
            agent.process.pid(),
            agent.process.log_path().display(),
            agent.command
        ));
        self.commands
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(agent.command.clone());
        self.samples.watch(Some(agent.process.pid()));
        *self.agent.lock().await = Some(agent);
        Ok(())
    }

    /// Stops the agent (SIGTERM, then SIGKILL if it lingers).
    async fn stop_agent(&self) {
        if let Some(mut agent) = self.take_agent().await {
            agent.stop();
        }
    }

    /// Kills the agent with SIGKILL, the restart the benchmark measures.
    async fn kill_agent(&self) {
        if let Some(mut agent) = self.take_agent().await {
            agent.kill();
        }
    }

    /// The running agent, no longer sampled.
    async fn take_agent(&self) -> Option<Agent> {
        let agent = self.agent.lock().await.take();
        if agent.is_some() {
            self.samples.watch(None);
        }
        agent
    }

    /// Fails with the log tail if the agent has died.
    async fn check_agent(&self) -> Result<(), String> {
        let mut guard = self.agent.lock().await;
        let Some(agent) = guard.as_mut() else {
            return Ok(());
        };
        if agent.process.is_running() {
            return Ok(());
        }
        Err(format!(
            "the agent exited ({:?}); log {}:\n{}",
            agent.process.exit_status(),
            agent.process.log_path().display(),
            tail(&agent.process.log(), 20)
        ))
    }

    async fn memory(&self) -> Option<(f64, f64)> {
        self.agent.lock().await.as_ref()?.memory_mib()
    }

    async fn scrape_apiserver(client: &Client, scrapes: &AtomicU64) -> Result<Counts, String> {
        scrapes.fetch_add(1, Ordering::SeqCst);
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        let text = tokio::time::timeout(Duration::from_secs(60), client.request_text(request))
            .await
            .map_err(|_| "GET /metrics took longer than 60 s".to_string())?
            .map_err(|e| format!("GET /metrics: {e}"))?;
        Ok(Counts::from_apiserver(&prometheus::parse(&text)?))
    }

    async fn snapshot(&self) -> Result<Snapshot, String> {
        let scrapes = (
            self.hub_scrapes.load(Ordering::SeqCst),
            self.spoke_scrapes.load(Ordering::SeqCst),
        );
        let (hub, spoke) = tokio::try_join!(
            Self::scrape_apiserver(&self.hub.client, &self.hub_scrapes),
            Self::scrape_apiserver(&self.spoke.client, &self.spoke_scrapes),
        )?;
        let agent_text = match self.agent.lock().await.as_ref() {
            Some(agent) => agent.metrics().await?,
            None => None,
        };
        let agent_samples = match agent_text {
            Some(t) => Some(prometheus::parse(&t)?),
            None => None,
        };
        Ok(Snapshot {
            at: Instant::now(),
            hub,
            spoke,
            agent_hub: agent_samples
                .as_ref()
                .and_then(|s| Counts::from_agent(s, "hub")),
            agent_spoke: agent_samples
                .as_ref()
                .and_then(|s| Counts::from_agent(s, "spoke")),
            scrapes,
        })
    }

    /// The agent's requests between two snapshots, less the harness's own.
    fn phase(
        &self,
        name: &str,
        description: String,
        span: (&Snapshot, &Snapshot),
        per: (&str, u64),
        harness: &Harness,
    ) -> Phase {
        let (before, after) = span;
        let mut own_hub = harness.hub.clone();
        own_hub.add("GET", "-", after.scrapes.0 - before.scrapes.0);
        let hub_all = after
            .hub
            .since(&before.hub)
            .minus(&own_hub)
            .without_watches();
        let spoke_all = after
            .spoke
            .since(&before.spoke)
            .minus(&harness.spoke)
            .without_watches();
        let agent_delta = |a: &Option<Counts>, b: &Option<Counts>| match (a, b) {
            (Some(a), Some(b)) => Some(a.since(b).without_watches()),
            // An agent started inside the phase counts from zero.
            (Some(a), None) => Some(a.without_watches()),
            _ => None,
        };
        Phase {
            name: name.into(),
            description,
            seconds: after.at.duration_since(before.at).as_secs_f64(),
            unit: per.0.into(),
            units: per.1,
            hub: hub_all.filter(|r| !is_hub_noise(r)),
            hub_other: hub_all.filter(is_hub_noise),
            spoke: spoke_all.filter(is_spoke_agent_resource),
            spoke_other: spoke_all.filter(|r| !is_spoke_agent_resource(r)),
            agent_hub: agent_delta(&after.agent_hub, &before.agent_hub),
            agent_spoke: agent_delta(&after.agent_spoke, &before.agent_spoke),
        }
    }

    /// Waits until the agent's requests (hub: all resources; spoke: its resources) stop for
    /// [`QUIET`], at least `min` and at most `max`; whether it went quiet.
    async fn settle(&self, min: Duration, max: Duration) -> Result<bool, String> {
        let start = Instant::now();
        let mut last: Option<(u64, u64)> = None;
        let mut since = Instant::now();
        loop {
            self.check_agent().await?;
            let hub = Self::scrape_apiserver(&self.hub.client, &self.hub_scrapes).await?;
            let spoke = Self::scrape_apiserver(&self.spoke.client, &self.spoke_scrapes).await?;
            let now = (
                hub.filter(|r| r != "-" && !is_hub_noise(r)).requests(),
                spoke.filter(is_spoke_agent_resource).requests(),
            );
            if last != Some(now) {
                last = Some(now);
                since = Instant::now();
            }
            let elapsed = start.elapsed();
            if since.elapsed() >= QUIET && elapsed >= min {
                return Ok(true);
            }
            if elapsed >= max {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn measure(&self) -> Result<Report, String> {
        let o = &self.opts;
        let load_start = system::loadavg();
        let date = utc_now();
        self.progress(&format!(
            "hub namespace {}, spoke namespace {}; {} works x {} ConfigMaps, QPS {} burst {}",
            self.cluster, self.spoke_ns, o.works, o.configmaps_per_work, o.qps, o.burst
        ));
        self.watch
            .wait("the hub watch to list the works", SAMPLE_TIMEOUT, |s| {
                if s.synced {
                    Ok(())
                } else {
                    Err("not listed yet".into())
                }
            })
            .await?;
        let mut notes = Vec::new();

        // First apply.
        self.samples.phase("first_apply");
        self.start_agent(FIRST_AGENT_SYNC_PERIOD).await?;
        self.settle(QUIET, SETTLE_TIMEOUT).await?;
        let s0 = self.snapshot().await?;
        let t0 = Instant::now();
        let mut harness = Harness::default();
        self.create_works().await?;
        harness.hub.add("POST", MANIFESTWORKS, o.works as u64);
        let create_seconds = t0.elapsed().as_secs_f64();
        self.progress(&format!(
            "created {} works in {create_seconds:.1} s",
            o.works
        ));
        let ready_at = self.wait_all_ready(t0).await?;
        let apply_seconds = ready_at.duration_since(t0).as_secs_f64();
        self.samples.phase("settle_after_apply");
        self.progress(&format!(
            "all works Applied and Available after {apply_seconds:.1} s"
        ));
        if !self.settle(QUIET, SETTLE_TIMEOUT).await? {
            notes.push("After the first apply the agent did not go idle within 5 minutes.".into());
        }
        let s1 = self.snapshot().await?;
        let steady = self.memory().await;
        let first_apply_cpu = self
            .agent
            .lock()
            .await
            .as_ref()
            .and_then(Agent::cpu_seconds);
        self.samples.phase("status_changes");
        let manifests = (o.works * o.configmaps_per_work) as u64;
        let mut phases = vec![self.phase(
            report::FIRST_APPLY,
            format!(
                "All {} works created at once (agent started beforehand with {} {}s, so no resync), until every work was Applied and Available and the agent idle.",
                o.works,
                o.flavor.sync_period_flag(),
                FIRST_AGENT_SYNC_PERIOD.as_secs()
            ),
            (&s0, &s1),
            ("manifest", manifests),
            &harness,
        )];

        // Status latency with every work idle.
        let (latencies, changed) = self.status_latency().await?;
        self.settle(QUIET, SETTLE_TIMEOUT).await?;
        let s2 = self.snapshot().await?;
        let mut harness = Harness::default();
        harness.spoke.add("PATCH", "configmaps", changed);
        phases.push(self.phase(
            "status_changes",
            format!(
                "{changed} spoke changes, one at a time: an annotation on a work's first ConfigMap that its JSONPaths feedback rule reports, timed until the hub watch showed the new value."
            ),
            (&s1, &s2),
            ("change", changed),
            &harness,
        ));

        // Deletions.
        self.samples.phase("deletions");
        let (deletions, deleted) = self.deletions().await?;
        self.settle(QUIET, SETTLE_TIMEOUT).await?;
        let s3 = self.snapshot().await?;
        let mut harness = Harness::default();
        harness.hub.add("DELETE", MANIFESTWORKS, deleted);
        phases.push(self.phase(
            "deletions",
            format!("{deleted} works deleted one at a time, each after the previous was gone."),
            (&s2, &s3),
            ("work", deleted),
            &harness,
        ));
        let peak = self.memory().await.map(|(_, hwm)| hwm);
        self.kill_agent().await;
        let remaining = (o.works as u64).saturating_sub(deleted);

        // Restart, then an idle resync period.
        let s4 = self.snapshot().await?;
        self.samples.phase("restart");
        let restarted = Instant::now();
        self.start_agent(o.resync_period).await?;
        let quiet = self.settle(QUIET * 2, o.resync_period).await?;
        if !quiet {
            notes.push(format!(
                "The restarted agent was still sending requests {}s after it started: its start-up pass ran into its first periodic resync, so the two phases overlap.",
                o.resync_period.as_secs()
            ));
        }
        let s5 = self.snapshot().await?;
        phases.push(self.phase(
            "restart",
            format!(
                "The agent killed (SIGKILL) and started again (with {} {}s) over {remaining} idle works, until it went idle.",
                o.flavor.sync_period_flag(),
                o.resync_period.as_secs()
            ),
            (&s4, &s5),
            ("work", remaining),
            &Harness::default(),
        ));
        // Our agent's resync sweep visits every work once between P and 2 P after its start (an
        // agent with a timer per work: between P and 1.1 P): until 2.05 P, one resync per work.
        let window_started = Instant::now();
        let deadline = (restarted + o.resync_period.mul_f64(2.05)).max(window_started);
        self.samples.phase("idle_resync");
        self.progress(&format!(
            "idle resync window: {:.0} s",
            (deadline - Instant::now()).as_secs_f64()
        ));
        while Instant::now() < deadline {
            self.check_agent().await?;
            tokio::time::sleep(Duration::from_secs(5).min(deadline - Instant::now())).await;
        }
        let s6 = self.snapshot().await?;
        let resync = self.phase(
            report::IDLE_RESYNC,
            format!(
                "Nothing changed for {:.0} s, until 2.05 x the resync period after the restart: one safety-net resync per work (ours sweeps every work once between 1 and 2 periods after its start), if the agent keeps up.",
                window_started.elapsed().as_secs_f64()
            ),
            (&s5, &s6),
            ("work", remaining),
            &Harness::default(),
        );
        let limit = o.qps * resync.seconds;
        if resync.spoke.requests() as f64 >= 0.9 * limit {
            notes.push(format!(
                "In the idle-resync window the agent sent {} spoke requests, at least 90 % of what QPS {} allows ({limit:.0}): its resync could not keep up, so the per-work figures undercount the cost of one resync.",
                resync.spoke.requests(),
                o.qps
            ));
        }
        phases.push(resync);

        // Every remaining work deleted at once.
        self.samples.phase("delete_all");
        let deleted_all = self.delete_all().await?;
        if deleted_all.left == 0 {
            self.settle(QUIET, SETTLE_TIMEOUT).await?;
        } else {
            notes.push(format!(
                "Deleting every work at once ran out of the harness's {:.0} s: {} of {} works were gone, {} still held by their finalizer. The phase's requests are those until then.",
                deleted_all.seconds,
                deleted_all.gone(),
                deleted_all.requested,
                deleted_all.left
            ));
        }
        let s7 = self.snapshot().await?;
        let mut harness = Harness::default();
        harness
            .hub
            .add("DELETE", MANIFESTWORKS, deleted_all.requested);
        phases.push(self.phase(
            "delete_all",
            deleted_all.describe(),
            (&s6, &s7),
            ("work", deleted_all.gone()),
            &harness,
        ));
        self.stop_agent().await;
        let spoke_noise: u64 = phases.iter().map(|p| p.spoke_other.requests()).sum();
        notes.push(format!(
            "Server-side counts come from apiserver_request_total, less the harness's own requests (its creates, deletes, spoke patches and /metrics scrapes). Spoke figures count only {} ({spoke_noise} requests on other spoke resources, from the controller-manager, scheduler and kwok, including discovery, are listed per phase but not attributed); hub figures leave out {}, the API server's own requests. WATCH requests are left out: the servers count them when they end, so they belong to no phase.",
            SPOKE_AGENT_RESOURCES.join(" and "),
            HUB_NOISE_RESOURCES.join(" and ")
        ));
        if !status_latency_measurable(o.flavor) && o.latency_samples > 0 {
            notes.push(format!(
                "Status latency not measured: upstream's agent reads status feedback (JSONPaths rules, scrape type Poll) when it requeues a work, every --status-sync-interval with jitter up to 1.9x (availablestatus_controller.go), not on spoke events; with the first agent's interval of {}s each of the {} samples would wait up to {:.0} s, beyond the harness's {}s per sample.",
                FIRST_AGENT_SYNC_PERIOD.as_secs(),
                o.latency_samples,
                FIRST_AGENT_SYNC_PERIOD.as_secs_f64() * 1.9,
                SAMPLE_TIMEOUT.as_secs()
            ));
        }
        if !o.flavor.has_request_counter() {
            notes.push("Upstream's agent has no counter of its own requests: every request figure here is the API servers' (apiserver_request_total); the agent-counter columns are n/a.".into());
        }
        let load_max = *self.load_max.lock().unwrap_or_else(|p| p.into_inner());
        let report = Report {
            label: o.label.clone(),
            environment: Environment {
                machine: Machine::at_end(date, load_start, load_max),
                flavor: o.flavor,
                agent_bin: o.agent_bin.display().to_string(),
                agent_source_commit: source_commit(o.flavor, &o.agent_bin),
                agent_commands: self
                    .commands
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone(),
                agent_commit: o.agent_commit.clone(),
                agent_profile: o.agent_profile.clone(),
                agent_args: o.agent_args.clone(),
            },
            parameters: Parameters {
                works: o.works,
                configmaps_per_work: o.configmaps_per_work,
                qps: o.qps,
                burst: o.burst,
                resync_period_seconds: o.resync_period.as_secs_f64(),
                latency_samples: latencies.len(),
                deletion_samples: deletions.len(),
            },
            apply_seconds,
            create_seconds,
            status_latency: Summary::of(&latencies),
            deletion: Summary::of(&deletions),
            memory: Memory {
                steady_rss_mib: steady.map(|(rss, _)| rss),
                peak_rss_mib: peak,
                first_apply_cpu_seconds: first_apply_cpu,
            },
            phases,
            notes,
        };
        Ok(report)
    }

    async fn create_works(&self) -> Result<(), String> {
        let o = &self.opts;
        futures::stream::iter(0..o.works)
            .map(|i| async move {
                let name = self.work_name(i);
                let work =
                    work_object(&self.cluster, &self.spoke_ns, &name, o.configmaps_per_work)?;
                self.works
                    .create(&PostParams::default(), &work)
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("creating ManifestWork {name}: {e}"))
            })
            .buffer_unordered(CREATE_CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// Waits for every work to be Applied and Available; the moment the last one was.
    async fn wait_all_ready(&self, t0: Instant) -> Result<Instant, String> {
        let total = self.opts.works;
        let check = |s: &Seen| -> Result<Instant, String> {
            let ready = s.ready();
            if ready >= total {
                return s
                    .works
                    .values()
                    .filter_map(|w| w.ready_at)
                    .max()
                    .ok_or_else(|| "no work".to_string());
            }
            Err(format!("{ready} of {total} works Applied and Available"))
        };
        let deadline = t0 + self.opts.apply_timeout;
        loop {
            self.check_agent().await?;
            let left = deadline.saturating_duration_since(Instant::now());
            let step = left.min(Duration::from_secs(15));
            match self
                .watch
                .wait("every work Applied and Available", step, check)
                .await
            {
                Ok(at) => return Ok(at),
                Err(e) if left <= step => {
                    return Err(format!(
                        "{e} (after {:?}; agent log in {})",
                        self.opts.apply_timeout,
                        self.agent_log().await
                    ));
                }
                Err(_) => {
                    let ready = self.watch.seen().ready();
                    self.progress(&format!("{ready} of {total} works Applied and Available"));
                }
            }
        }
    }

    async fn agent_log(&self) -> String {
        self.agent
            .lock()
            .await
            .as_ref()
            .map(|a| a.process.log_path().display().to_string())
            .unwrap_or_default()
    }

    /// Annotates the first ConfigMap of a sample of works, one at a time, and times each change
    /// until the hub watch shows it in the work's status feedback.
    async fn status_latency(&self) -> Result<(Vec<Duration>, u64), String> {
        let o = &self.opts;
        if !status_latency_measurable(o.flavor) {
            self.progress("status latency: not measured for upstream's agent (it polls feedback)");
            return Ok((Vec::new(), 0));
        }
        let n = o.latency_samples.min(o.works);
        let mut samples = Vec::with_capacity(n);
        for k in 0..n {
            self.check_agent().await?;
            let work = self.work_name(k * o.works / n);
            let value = format!("v{k}");
            let cm = format!("{work}-0");
            let start = Instant::now();
            self.configmaps
                .patch(
                    &cm,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {FLAG_ANNOTATION: value}}})),
                )
                .await
                .map_err(|e| format!("annotating ConfigMap {}/{cm}: {e}", self.spoke_ns))?;
            let what = format!("ManifestWork {work} to report feedback {FEEDBACK_NAME}={value}");
            let seen_at = self
                .watch
                .wait(&what, SAMPLE_TIMEOUT, |s| {
                    let w = s.works.get(&work);
                    match w.map(|w| (w.flag.as_deref(), w.flag_at)) {
                        Some((Some(f), Some(at))) if f == value => Ok(at),
                        other => Err(format!(
                            "feedback {FEEDBACK_NAME} is {:?}",
                            other.and_then(|o| o.0)
                        )),
                    }
                })
                .await;
            let seen_at = match seen_at {
                Ok(at) => at,
                Err(e) => return Err(format!("{e} (agent log {})", self.agent_log().await)),
            };
            samples.push(seen_at.saturating_duration_since(start));
        }
        if let Some(s) = Summary::of(&samples) {
            self.progress(&format!(
                "status latency over {n} changes: p50 {:.0} ms, p99 {:.0} ms",
                s.p50_ms, s.p99_ms
            ));
        }
        Ok((samples, n as u64))
    }

    /// Deletes a sample of works one at a time; each is timed from the moment the delete call
    /// returned (the API server set deletionTimestamp then) to the watch's deletion event.
    async fn deletions(&self) -> Result<(Vec<Duration>, u64), String> {
        let o = &self.opts;
        // At most half the works, so that the resync phases still have works to resync.
        let n = o.deletion_samples.min(o.works / 2);
        let mut samples = Vec::with_capacity(n);
        for k in 0..n {
            self.check_agent().await?;
            // From the end, so the latency sample (from the start) is mostly spared.
            let work = self.work_name(o.works - 1 - k * o.works / n.max(1));
            let marked = self
                .works
                .delete(&work, &DeleteParams::default())
                .await
                .map_err(|e| format!("deleting ManifestWork {work}: {e}"))?;
            let marked_at = Instant::now();
            if marked.is_right() {
                return Err(format!(
                    "ManifestWork {work} was deleted at once: the agent had not put its finalizer on it"
                ));
            }
            let gone = self
                .watch
                .wait(
                    &format!("ManifestWork {work} to be gone"),
                    SAMPLE_TIMEOUT,
                    |s| match s.works.get(&work).and_then(|w| w.gone_at) {
                        Some(at) => Ok(at),
                        None => Err("still there".into()),
                    },
                )
                .await;
            let gone_at = match gone {
                Ok(at) => at,
                Err(e) => return Err(format!("{e} (agent log {})", self.agent_log().await)),
            };
            samples.push(gone_at.saturating_duration_since(marked_at));
        }
        if let Some(s) = Summary::of(&samples) {
            self.progress(&format!(
                "deletion over {n} works: p50 {:.0} ms, p99 {:.0} ms",
                s.p50_ms, s.p99_ms
            ));
        }
        Ok((samples, n as u64))
    }

    /// Deletes every remaining work at once and waits until the hub holds none of them, or until
    /// the harness's time for it runs out: then what was gone by that time is the measure.
    async fn delete_all(&self) -> Result<DeletedAll, String> {
        let names: Vec<String> = self
            .watch
            .seen()
            .works
            .iter()
            .filter(|(_, w)| w.gone_at.is_none())
            .map(|(name, _)| name.clone())
            .collect();
        let t0 = Instant::now();
        futures::stream::iter(&names)
            .map(|name| async move {
                match self.works.delete(name, &DeleteParams::default()).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
                    Err(e) => Err(format!("deleting ManifestWork {name}: {e}")),
                }
            })
            .buffer_unordered(CREATE_CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        let timeout = scaled(SETTLE_TIMEOUT, names.len());
        let waited = self
            .watch
            .wait("every work to be gone", timeout, |s| {
                let left = still_there(s, &names);
                if left == 0 {
                    Ok(())
                } else {
                    Err(format!("{left} of {} still there", names.len()))
                }
            })
            .await;
        let seconds = t0.elapsed().as_secs_f64();
        let left = match waited {
            Ok(()) => 0,
            Err(e) => {
                self.progress(&format!(
                    "WARNING: {e} (agent log {})",
                    self.agent_log().await
                ));
                still_there(&self.watch.seen(), &names) as u64
            }
        };
        let deleted = DeletedAll {
            requested: names.len() as u64,
            left,
            seconds,
        };
        self.progress(&deleted.describe());
        Ok(deleted)
    }

    /// Stops the agents, then removes every work and AppliedManifestWork of the run (finalizers
    /// stripped: the agent is gone) and both namespaces. Best effort, bounded, and loud about
    /// what it could not remove.
    async fn cleanup(&self) {
        self.stop_agent().await;
        self.progress("cleaning up");
        let r = tokio::time::timeout(CLEANUP_TIMEOUT, async {
            let hub_hash = work_api::hub_hash(&self.hub.server_url);
            let works = self
                .works
                .list(&ListParams::default())
                .await
                .map_err(|e| format!("listing works: {e}"))?;
            let names: Vec<String> = works
                .items
                .iter()
                .filter_map(|w| w.metadata.name.clone())
                .collect();
            let applied: Vec<String> = (0..self.opts.works)
                .map(|i| work_api::applied_manifest_work_name(&hub_hash, &self.work_name(i)))
                .collect();
            remove_all(&self.works, &names).await;
            remove_all(&self.applied, &applied).await;
            Ok::<_, String>(())
        })
        .await;
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.progress(&format!("WARNING: cleanup: {e}")),
            Err(_) => self.progress(&format!(
                "WARNING: cleanup took longer than {CLEANUP_TIMEOUT:?}"
            )),
        }
        self.hub.cleanup().await;
        self.spoke.cleanup().await;
    }
}

/// Requests the harness itself makes in a phase (the servers count them too).
#[derive(Debug, Default)]
struct Harness {
    hub: Counts,
    spoke: Counts,
}

/// How many of `names` the hub watch has not seen gone.
fn still_there(seen: &Seen, names: &[String]) -> usize {
    names
        .iter()
        .filter(|n| seen.works.get(*n).and_then(|w| w.gone_at).is_none())
        .count()
}

/// What deleting every remaining work at once came to.
#[derive(Debug, Clone, Copy, PartialEq)]
struct DeletedAll {
    /// Works the harness deleted.
    requested: u64,
    /// Of those, still on the hub when the harness stopped waiting.
    left: u64,
    /// From the first deletion to every work gone, or to the end of the wait.
    seconds: f64,
}

impl DeletedAll {
    /// Works gone from the hub.
    fn gone(&self) -> u64 {
        self.requested - self.left.min(self.requested)
    }

    /// The phase's description in the report.
    fn describe(&self) -> String {
        if self.left == 0 {
            format!(
                "The {} remaining works deleted at once, until the hub held none of them: {:.1} s (the agent removes a work's ConfigMaps and AppliedManifestWork before its finalizer).",
                self.requested, self.seconds
            )
        } else {
            format!(
                "The {} remaining works deleted at once: {} were gone from the hub after {:.1} s ({:.1} a second), when the harness stopped waiting; {} were still there.",
                self.requested,
                self.gone(),
                self.seconds,
                self.gone() as f64 / self.seconds.max(f64::EPSILON),
                self.left
            )
        }
    }
}

/// Strips the finalizers of the named objects and deletes them (missing ones are fine).
async fn remove_all(api: &Api<DynamicObject>, names: &[String]) {
    futures::stream::iter(names)
        .for_each_concurrent(CREATE_CONCURRENCY, |name| async move {
            let strip = Patch::Merge(json!({"metadata": {"finalizers": null}}));
            let _ = api.patch(name, &PatchParams::default(), &strip).await;
            let _ = api.delete(name, &DeleteParams::background()).await;
        })
        .await;
}

/// Whether the status-latency phase can time a spoke change: our agent reports feedback on the
/// spoke's watch events; upstream's polls it at its status sync interval (hours in the first
/// agent's run, see [`FIRST_AGENT_SYNC_PERIOD`]).
fn status_latency_measurable(flavor: Flavor) -> bool {
    flavor == Flavor::Ours
}

/// For upstream's agent, the OCM commit its binary was built from: `ocm-bins.sh` writes it to
/// `commit` beside the binaries. Ours names its commit with `--agent-commit`.
fn source_commit(flavor: Flavor, bin: &std::path::Path) -> Option<String> {
    if flavor != Flavor::Ocm {
        return None;
    }
    let text = std::fs::read_to_string(bin.parent()?.join("commit")).ok()?;
    let commit = text.trim();
    (!commit.is_empty()).then(|| commit.to_string())
}

fn is_hub_noise(resource: &str) -> bool {
    HUB_NOISE_RESOURCES.contains(&resource)
}

fn is_spoke_agent_resource(resource: &str) -> bool {
    let base = resource.split('/').next().unwrap_or(resource);
    SPOKE_AGENT_RESOURCES.contains(&base)
}

fn manifestwork_resource() -> ApiResource {
    work_resource("ManifestWork", "manifestworks")
}

fn applied_resource() -> ApiResource {
    work_resource("AppliedManifestWork", "appliedmanifestworks")
}

fn work_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "work.open-cluster-management.io".into(),
        version: "v1".into(),
        api_version: "work.open-cluster-management.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// A work of `configmaps` ConfigMaps in `spoke_ns`; the first one has a JSONPaths feedback rule
/// on an annotation no manifest sets.
pub fn work_object(
    cluster: &str,
    spoke_ns: &str,
    name: &str,
    configmaps: usize,
) -> Result<DynamicObject, String> {
    let manifests: Vec<Value> = (0..configmaps)
        .map(|j| {
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-{j}"), "namespace": spoke_ns},
                "data": {"work": name, "index": j.to_string()},
            })
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {"name": name, "namespace": cluster},
        "spec": {
            "workload": {"manifests": manifests},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "", "resource": "configmaps", "name": format!("{name}-0"), "namespace": spoke_ns},
                "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [
                    {"name": FEEDBACK_NAME, "path": format!(".metadata.annotations.{FLAG_ANNOTATION}")}
                ]}]
            }]
        }
    }))
    .map_err(|e| format!("building ManifestWork {name}: {e}"))
}

/// Now in UTC, RFC 3339, from the `date` command (the report needs no date library).
pub fn utc_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delete_all_that_ran_out_of_time_reports_what_was_gone() {
        let done = DeletedAll {
            requested: 10,
            left: 0,
            seconds: 2.0,
        };
        assert_eq!(done.gone(), 10);
        assert!(
            done.describe()
                .contains("until the hub held none of them: 2.0 s")
        );
        let partial = DeletedAll {
            requested: 100,
            left: 60,
            seconds: 8.0,
        };
        assert_eq!(partial.gone(), 40);
        let text = partial.describe();
        assert!(
            text.contains("40 were gone from the hub after 8.0 s (5.0 a second)")
                && text.contains("60 were still there"),
            "{text}"
        );
    }

    #[test]
    fn work_has_the_configmaps_and_one_feedback_rule() {
        let w = work_object("c", "ns", "w1", 3).expect("builds");
        let spec = &w.data["spec"];
        assert_eq!(
            spec["workload"]["manifests"].as_array().map(Vec::len),
            Some(3)
        );
        assert_eq!(spec["workload"]["manifests"][2]["metadata"]["name"], "w1-2");
        assert_eq!(
            spec["manifestConfigs"][0]["resourceIdentifier"]["name"],
            "w1-0"
        );
        assert_eq!(
            spec["manifestConfigs"][0]["feedbackRules"][0]["jsonPaths"][0]["path"],
            ".metadata.annotations.benchflag"
        );
    }

    #[test]
    fn upstream_source_commit_is_read_beside_its_binary_only() {
        let dir = std::env::temp_dir().join(format!("bench-commit-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join("commit"), "805fa61\n");
        let bin = dir.join("work");
        let ocm = source_commit(Flavor::Ocm, &bin);
        let ours = source_commit(Flavor::Ours, &bin);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(ocm.as_deref(), Some("805fa61"));
        assert_eq!(ours, None);
        assert!(status_latency_measurable(Flavor::Ours));
        assert!(!status_latency_measurable(Flavor::Ocm));
    }

    #[test]
    fn spoke_agent_resources_include_subresources_only_of_those() {
        assert!(is_spoke_agent_resource("configmaps"));
        assert!(is_spoke_agent_resource(
            "appliedmanifestworks.work.open-cluster-management.io/status"
        ));
        assert!(!is_spoke_agent_resource("leases.coordination.k8s.io"));
        assert!(!is_spoke_agent_resource("-"));
    }
}
