//! The MQTT benchmark's report (`make bench-mqtt`): what was measured, as JSON and Markdown, and
//! the pure part of the measurement (latencies from the source's status arrivals). A report of
//! Maestro's Go agent given as the baseline adds its figures and the targets' ratios.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use test_support::maestro::StatusArrival;

use super::stats::Summary;
use super::system::Machine;

/// Burst p50 (publish to first status) must be at most this share of the Go agent's.
pub const TARGET_BURST_RATIO: f64 = 0.5;
/// Delete round trip (publish delete to `Deleted=True`) target, in milliseconds.
pub const TARGET_DELETE_MS: f64 = 500.0;
/// Status events per minute allowed while 1,000 works sit idle.
pub const TARGET_IDLE_PER_MINUTE: f64 = 0.0;
/// RSS must be at most this share of the Go agent's.
pub const TARGET_RSS_RATIO: f64 = 0.3;

/// AppliedManifestWork writes the agent makes for a new work behind a broker, whatever its
/// manifests: the create, which carries the record of the resources it is about to create, and
/// the record of those it applied, written after the status. A run of one ConfigMap a work counts
/// 3 spoke writes a work (2 creates, 1 patch): these 2 and the ConfigMap's create.
pub const APPLIED_WORK_WRITES_PER_WORK: u64 = 2;

/// The spoke client's QPS and burst of either agent when its command line sets none (the
/// defaults of OCM's agent options, which Maestro's agent and ours keep).
pub const DEFAULT_CLIENT_BUDGET: (f64, u32) = (50.0, 100);

/// The spoke client's QPS and burst an agent's command line sets: `--kube-api-qps` and
/// `--kube-api-burst` (ours also takes `--spoke-qps` and `--spoke-burst`), as `--flag=V` or
/// `--flag V`, the last one winning; [`DEFAULT_CLIENT_BUDGET`] for what it leaves unset.
pub fn client_budget(args: &[String]) -> (f64, u32) {
    let (mut qps, mut burst) = DEFAULT_CLIENT_BUDGET;
    let mut it = args.iter().peekable();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        let is_qps = matches!(flag, "--kube-api-qps" | "--spoke-qps");
        let is_burst = matches!(flag, "--kube-api-burst" | "--spoke-burst");
        if !is_qps && !is_burst {
            continue;
        }
        let Some(value) = inline.or_else(|| it.next().cloned()) else {
            break;
        };
        if is_qps {
            qps = value.parse().unwrap_or(qps);
        } else {
            burst = value.parse().unwrap_or(burst);
        }
    }
    (qps, burst)
}

/// The shortest time the agent's client rate limit allows for applying new works of ConfigMaps.
/// The agent keeps one rate-limit bucket per API, as upstream's clients do: the ConfigMap creates
/// go through the manifests' bucket, the AppliedManifestWork writes through the work API's, and
/// each bucket lets `burst` requests go at once, then `qps` a second. So the floor is the busier
/// bucket's requests less the burst, over the QPS.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApplyFloor {
    /// Works applied.
    pub works: usize,
    /// ConfigMaps in each.
    pub configmaps_per_work: usize,
    /// The spoke client's QPS.
    pub qps: f64,
    /// The spoke client's burst.
    pub burst: u32,
    /// ConfigMap creates: one per ConfigMap.
    pub configmap_creates: u64,
    /// AppliedManifestWork writes: [`APPLIED_WORK_WRITES_PER_WORK`] per work.
    pub applied_work_writes: u64,
    /// The floor, in seconds.
    pub seconds: f64,
    /// The same if every request went through one bucket, in seconds.
    pub one_bucket_seconds: f64,
}

impl ApplyFloor {
    /// The floor for `works` new works of `configmaps_per_work` ConfigMaps at `qps` and `burst`.
    pub fn new(works: usize, configmaps_per_work: usize, qps: f64, burst: u32) -> Self {
        let mut floor = Self {
            works,
            configmaps_per_work,
            qps,
            burst,
            configmap_creates: (works * configmaps_per_work) as u64,
            applied_work_writes: works as u64 * APPLIED_WORK_WRITES_PER_WORK,
            seconds: 0.0,
            one_bucket_seconds: 0.0,
        };
        floor.seconds = floor.configmap_seconds().max(floor.applied_work_seconds());
        floor.one_bucket_seconds = floor.paced(floor.configmap_creates + floor.applied_work_writes);
        floor
    }

    /// How long `requests` take through one bucket: those beyond the burst at the QPS.
    fn paced(&self, requests: u64) -> f64 {
        requests.saturating_sub(u64::from(self.burst)) as f64 / self.qps
    }

    /// The ConfigMap creates' bucket alone, in seconds.
    pub fn configmap_seconds(&self) -> f64 {
        self.paced(self.configmap_creates)
    }

    /// The AppliedManifestWork writes' bucket alone, in seconds.
    pub fn applied_work_seconds(&self) -> f64 {
        self.paced(self.applied_work_writes)
    }

    /// Spoke writes of one new work.
    pub fn writes_per_work(&self) -> u64 {
        self.configmaps_per_work as u64 + APPLIED_WORK_WRITES_PER_WORK
    }
}

/// What the counters `after` grew by since `before`, by key (keys that did not grow left out).
pub fn counted_since(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, n)| {
            (
                k.clone(),
                n.saturating_sub(before.get(k).copied().unwrap_or(0)),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// "N works x C ConfigMaps".
pub fn shape(works: usize, configmaps_per_work: usize) -> String {
    format!(
        "{works} works x {configmaps_per_work} ConfigMap{}",
        if configmaps_per_work == 1 { "" } else { "s" }
    )
}

/// Which agent ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flavor {
    /// This project's `work-agent`.
    Ours,
    /// Maestro's Go agent (`maestro agent`).
    MaestroGo,
}

impl Flavor {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Ours => "ours",
            Flavor::MaestroGo => "maestro-go",
        }
    }
}

/// The first status events of one work after its publish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FirstSeen {
    /// Any status event.
    pub any: Option<Instant>,
    /// The first with `Applied` = `True`.
    pub applied: Option<Instant>,
    /// The first with both `Applied` and `Available` = `True`.
    pub applied_available: Option<Instant>,
    /// The first with `Deleted` = `True`.
    pub deleted: Option<Instant>,
}

/// Folds status arrivals into first-seen times per work, incrementally.
#[derive(Debug, Default)]
pub struct Firsts {
    /// Per resource id.
    pub by_id: BTreeMap<String, FirstSeen>,
    /// Status events folded in so far.
    pub events: usize,
    /// Arrival time of the newest event folded in.
    pub last_event: Option<Instant>,
}

impl Firsts {
    /// Folds in new arrivals (in arrival order).
    pub fn add(&mut self, arrivals: &[StatusArrival]) {
        for a in arrivals {
            let f = self.by_id.entry(a.resource_id.clone()).or_default();
            f.any.get_or_insert(a.at);
            if a.applied {
                f.applied.get_or_insert(a.at);
            }
            if a.applied && a.available {
                f.applied_available.get_or_insert(a.at);
            }
            if a.deleted {
                f.deleted.get_or_insert(a.at);
            }
            self.events += 1;
            self.last_event = Some(a.at);
        }
    }

    /// The first-seen times of one work.
    pub fn of(&self, id: &str) -> FirstSeen {
        self.by_id.get(id).copied().unwrap_or_default()
    }
}

/// Latencies from each publish to the chosen first event; works without one are left out (the
/// caller waited for all of them, so a missing one is a failed run, reported elsewhere).
pub fn latencies(
    published: &[(String, Instant)],
    firsts: &Firsts,
    pick: impl Fn(&FirstSeen) -> Option<Instant>,
) -> Vec<Duration> {
    published
        .iter()
        .filter_map(|(id, at)| Some(pick(&firsts.of(id))?.saturating_duration_since(*at)))
        .collect()
}

/// One burst of creates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Burst {
    /// Bundles published at once.
    pub size: usize,
    /// Publish to the first status event of the work (any status).
    pub first_status: Option<Summary>,
    /// Publish to the first status with `Applied` = `True`.
    pub applied: Option<Summary>,
    /// Publish to the first status with `Applied` and `Available` = `True`.
    pub applied_available: Option<Summary>,
    /// Status events received for the burst's works until they settled.
    pub status_events: usize,
    /// Publish of the first to the last work Applied and Available, in milliseconds.
    pub wall_ms: f64,
}

/// Creating the rest of the idle works.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopUp {
    /// Works created in this phase.
    pub works: usize,
    /// Bundles published at once in each batch.
    pub batch: usize,
    /// Wall time until all were Applied and Available, in seconds.
    pub seconds: f64,
    /// The shortest time the agent's client rate limit allows for them (absent in reports from
    /// before it was counted).
    #[serde(default)]
    pub floor: Option<ApplyFloor>,
    /// The agent's spoke requests by verb in this phase, from its own counter (ours only).
    #[serde(default)]
    pub spoke_requests: BTreeMap<String, u64>,
}

/// The idle phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Idle {
    /// Works applied on the spoke.
    pub works: usize,
    /// Whether the status events stopped for the quiet period before the timeout.
    pub settled: bool,
    /// From the last create to the start of the window, in seconds.
    pub settle_seconds: f64,
    /// Length of the counting window, in seconds.
    pub window_seconds: f64,
    /// Status events in the window.
    pub status_events: usize,
    /// Status events per minute in the window.
    pub per_minute: f64,
    /// Distinct works those events were about.
    pub works_touched: usize,
    /// The window's events by CloudEvent type.
    pub by_type: BTreeMap<String, usize>,
}

/// The restart over the idle works (`--restart`): the agent killed with SIGKILL and started again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Restart {
    /// Works the source held.
    pub works: usize,
    /// From the new process's start to its spec resync request, in seconds.
    pub spec_resync_seconds: f64,
    /// Versions the new process's first spec resync request listed (it keeps no works across a
    /// restart).
    pub start_versions: usize,
    /// Works with a status event from the new process until settled.
    pub reported: usize,
    /// Versions the spec resync request listed when the agent reconnected after a broker
    /// restart (every work it holds).
    pub spec_resync_versions: usize,
    /// Bytes of that request's data (the JSON list of versions).
    pub spec_resync_data_bytes: usize,
    /// Bytes of the whole MQTT message in structured mode (attributes and data).
    pub spec_resync_message_bytes: usize,
    /// Whether the status events stopped for the quiet period before the timeout.
    pub settled: bool,
    /// From the new process's start until settled, in seconds (includes the quiet period).
    pub settle_seconds: f64,
    /// Status events the source received until settled.
    pub status_events: usize,
    /// Of those, the ones whose status the source already had.
    pub status_unchanged: u64,
    /// Of those, the ones the source took as news.
    pub status_accepted: u64,
    /// The new process's spoke requests by verb until settled (ours only).
    pub spoke_requests: BTreeMap<String, u64>,
    /// Hashes per status resync request.
    pub resync_part: usize,
    /// Requests the full list took.
    pub resync_parts: usize,
    /// Status events answering the full list of current hashes (the source lacks nothing).
    pub current_answers: usize,
    /// Works listed with a stale hash (one per part, the last part not sent).
    pub stale_listed: usize,
    /// Of those, the ones answered.
    pub stale_answered: usize,
    /// Works of the part not sent.
    pub unlisted: usize,
    /// Status events about them (a partial list must leave them alone).
    pub unlisted_answered: usize,
    /// Status events about listed works whose hash was current.
    pub other_answered: usize,
    /// After the broker restart: what crossed the broker, and what it cost.
    #[serde(default)]
    pub broker_restart: BrokerRestart,
}

/// What crossed the broker from its restart until the agent and the source were quiet again.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BrokerRestart {
    /// The broker's `max_packet_size` in bytes.
    pub max_packet: u32,
    /// From the broker's restart until no status event came for the quiet period, in seconds.
    pub seconds: f64,
    /// Spec resync requests the agent sent, and their MQTT packets' bytes in all.
    pub requests: usize,
    /// Bytes of those requests' packets.
    pub request_bytes: usize,
    /// Works those requests listed (an end marker, when there is one, included).
    pub listed: usize,
    /// `spec.resync_response` events the source sent in answer, and their packets' bytes.
    pub answers: usize,
    /// Bytes of those answers' packets.
    pub answer_bytes: usize,
    /// The largest MQTT packet the agent sent, and the largest the source sent, in bytes.
    pub largest_from_agent: usize,
    /// The largest packet the source sent.
    pub largest_from_source: usize,
    /// Spoke writes the agent made in that time.
    pub spoke_writes: u64,
    /// Works the agent counted unconfirmed in that time (`work_agent_source_desync_total`).
    pub unconfirmed: u64,
    /// Reconnects the agent counted in that time (the restart's own included).
    pub reconnects: u64,
}

/// Resident memory at one moment of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemorySample {
    /// The moment (`ready`, `after bursts`, `settled`, `idle end`).
    pub at: String,
    /// Works held at that moment.
    pub works: usize,
    /// VmRSS in MiB.
    pub rss_mib: f64,
    /// VmHWM (peak RSS so far) in MiB.
    pub hwm_mib: f64,
    /// RssAnon (heap and stacks; VmRSS less the mapped binary and libraries) in MiB.
    #[serde(default)]
    pub rss_anon_mib: Option<f64>,
}

/// Deleting every work left at the end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cleanup {
    /// Works deleted at once.
    pub works: usize,
    /// Until every one was hard-deleted at the source (or the timeout), in seconds.
    pub seconds: f64,
    /// Works that got no `Deleted=True` in time.
    pub left: usize,
}

/// The run's conditions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// Where and when it ran.
    #[serde(flatten)]
    pub machine: Machine,
    /// Which agent.
    pub flavor: Flavor,
    /// Its binary.
    pub agent_bin: String,
    /// The commit or version it was built from.
    pub agent_commit: String,
    /// The agent's command line (after the binary).
    pub agent_args: Vec<String>,
}

/// What was asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Parameters {
    /// Burst sizes, in order.
    pub bursts: Vec<usize>,
    /// Bytes of one bundle as published (ManifestBundle JSON).
    pub bundle_bytes: usize,
    /// Works deleted one at a time.
    pub deletions: usize,
    /// Works held in the idle phase.
    pub idle_works: usize,
    /// The counting window, in seconds.
    pub idle_seconds: f64,
    /// No status event for this long counts as settled, in seconds.
    pub quiet_seconds: f64,
    /// The broker's `max_packet_size` (bytes) and `max_queued_messages` per client (0: none);
    /// absent in reports from before they could be set (4 MiB and 1,000).
    #[serde(default)]
    pub broker_limits: Option<(u32, u32)>,
    /// ConfigMaps in each bundle (absent in reports from before it could be set: 1).
    #[serde(default = "one")]
    pub configmaps_per_work: usize,
}

fn one() -> usize {
    1
}

/// One benchmark run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Report name.
    pub label: String,
    /// Machine, load and agent.
    pub environment: Environment,
    /// What was asked for.
    pub parameters: Parameters,
    /// The bursts, in order.
    pub bursts: Vec<Burst>,
    /// Publish delete to `Deleted=True` received, one work at a time.
    pub delete: Option<Summary>,
    /// Creating the rest of the idle works.
    pub top_up: TopUp,
    /// The idle phase.
    pub idle: Idle,
    /// Resident memory over the run.
    pub memory: Vec<MemorySample>,
    /// CPU seconds (user + system) of the agent over the whole run.
    pub cpu_seconds_total: f64,
    /// CPU seconds of the agent in the idle window.
    pub cpu_seconds_idle: f64,
    /// Deleting what was left.
    pub cleanup: Cleanup,
    /// The source's counters at the end (status events accepted, stale, rejected, ...).
    pub source_counters: BTreeMap<String, u64>,
    /// Spoke requests by verb from the agent's own `work_agent_api_requests_total`, read at the
    /// end of the idle window (ours only: the Go agent has no such counter).
    #[serde(default)]
    pub spoke_requests: BTreeMap<String, u64>,
    /// Works created over the run up to that reading.
    #[serde(default)]
    pub works_created: usize,
    /// The restart over the idle works, when asked for.
    #[serde(default)]
    pub restart: Option<Restart>,
    /// The file of the agent's resident set and CPU time every few seconds, by phase (beside the
    /// report; absent in reports from before it was written).
    #[serde(default)]
    pub rss_csv: Option<String>,
}

/// The `api="spoke"` samples of `work_agent_api_requests_total` in a Prometheus text, by verb.
pub fn spoke_requests(metrics: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("work_agent_api_requests_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        if !labels.contains("api=\"spoke\"") {
            continue;
        }
        let verb = labels
            .split(',')
            .find_map(|l| l.strip_prefix("verb=\""))
            .and_then(|v| v.strip_suffix('"'));
        if let (Some(verb), Ok(n)) = (verb, value.trim().parse::<f64>()) {
            *out.entry(verb.to_string()).or_insert(0) += n as u64;
        }
    }
    out
}

impl Report {
    /// The burst of `size`, if it ran.
    pub fn burst(&self, size: usize) -> Option<&Burst> {
        self.bursts.iter().find(|b| b.size == size)
    }

    /// Highest VmRSS seen at the samples, in MiB.
    pub fn rss_max(&self) -> Option<f64> {
        self.memory.iter().map(|m| m.rss_mib).reduce(f64::max)
    }

    /// The sample taken at `at`.
    pub fn memory_at(&self, at: &str) -> Option<&MemorySample> {
        self.memory.iter().find(|m| m.at == at)
    }

    /// The report as Markdown; with `baseline` (a run of Maestro's Go agent) the results table
    /// shows both and the targets' ratios.
    pub fn markdown(&self, baseline: Option<&Report>) -> String {
        let e = &self.environment;
        let p = &self.parameters;
        let mut md = String::new();
        let _ = writeln!(
            md,
            "# MQTT benchmark: {} ({})\n",
            self.label,
            shape(p.idle_works, p.configmaps_per_work)
        );
        let _ = writeln!(md, "{}", e.machine.date_line());
        let _ = writeln!(
            md,
            "- Load average (1/5/15 min): {} at the start, {} at the end, {:.2} at most (1 min).{}",
            loads(e.machine.load_start),
            loads(e.machine.load_end),
            e.machine.load_max,
            if e.machine.load_max > 2.0 {
                " Above 2: the machine was busy, timings are noisy."
            } else {
                ""
            }
        );
        let _ = writeln!(
            md,
            "- Agent: {} (`{}`, {}), started as `{}`.",
            e.flavor.name(),
            e.agent_bin,
            e.agent_commit,
            e.agent_args.join(" ")
        );
        let _ = writeln!(
            md,
            "- Run: bursts of {} {} ({} bytes each), {} deletes one at a time, \
             {} works idle for {:.0} s (settled = no status event for {:.0} s). Source: the \
             Maestro-shaped test source on a private mosquitto{}; spoke: a local control plane.\n",
            p.bursts
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            if p.configmaps_per_work == 1 {
                "single-ConfigMap bundles".to_string()
            } else {
                format!("bundles of {} ConfigMaps", p.configmaps_per_work)
            },
            p.bundle_bytes,
            p.deletions,
            p.idle_works,
            p.idle_seconds,
            p.quiet_seconds,
            p.broker_limits
                .map_or(String::new(), |(packet, queued)| format!(
                    " (max_packet_size {packet}, max_queued_messages {queued})"
                ))
        );

        md.push_str("## Results\n\n");
        match baseline {
            Some(b) => self.comparison_table(&mut md, b),
            None => self.results_table(&mut md),
        }

        md.push_str("\n## Bursts\n\n");
        md.push_str("| Burst | First status p50 / p99 / max | Applied p50 / p99 | Applied+Available p50 / p99 / max | Status events per work | Wall |\n");
        md.push_str("|---:|---|---|---|---:|---:|\n");
        for b in &self.bursts {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {:.2} | {:.0} ms |",
                b.size,
                p50_p99_max(b.first_status.as_ref()),
                p50_p99(b.applied.as_ref()),
                p50_p99_max(b.applied_available.as_ref()),
                b.status_events as f64 / b.size.max(1) as f64,
                b.wall_ms
            );
        }

        let i = &self.idle;
        let _ = writeln!(
            md,
            "\n## Idle\n\n{} works (the top-up of {} took {:.1} s in batches of {}); {} after {:.1} s; \
             then {} status events in {:.0} s ({:.2} per minute) about {} works{}.",
            i.works,
            self.top_up.works,
            self.top_up.seconds,
            self.top_up.batch,
            if i.settled {
                "settled"
            } else {
                "NOT settled (status events never stopped for the quiet period)"
            },
            i.settle_seconds,
            i.status_events,
            i.window_seconds,
            i.per_minute,
            i.works_touched,
            if i.by_type.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    i.by_type
                        .iter()
                        .map(|(t, n)| format!("{t}: {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        );
        let _ = writeln!(
            md,
            "\nAgent CPU time: {:.1} s over the run, {:.2} s in the idle window.",
            self.cpu_seconds_total, self.cpu_seconds_idle
        );
        if let Some(f) = &self.top_up.floor {
            apply_section(&mut md, &self.top_up, f, e.flavor);
        }

        md.push_str("\n## Memory\n\n");
        if let Some(csv) = &self.rss_csv {
            let _ = writeln!(
                md,
                "VmRSS, RssAnon and CPU seconds every {} s, by phase: `{csv}` \
                 (`e2e/scripts/plot-scale.py` draws it).\n",
                super::samples::SAMPLE_EVERY.as_secs()
            );
        }
        md.push_str(
            "| Moment | Works | VmRSS | of which RssAnon | VmHWM |\n|---|---:|---:|---:|---:|\n",
        );
        for m in &self.memory {
            let _ = writeln!(
                md,
                "| {} | {} | {:.1} MiB | {} | {:.1} MiB |",
                m.at,
                m.works,
                m.rss_mib,
                mib(m.rss_anon_mib),
                m.hwm_mib
            );
        }

        if let Some(r) = &self.restart {
            restart_section(&mut md, r);
        }

        let c = &self.cleanup;
        let _ = writeln!(
            md,
            "\n## Cleanup\n\n{} works deleted at once: {:.1} s until {}.",
            c.works,
            c.seconds,
            if c.left == 0 {
                "every one was hard-deleted at the source".to_string()
            } else {
                format!("the timeout; {} got no Deleted=True", c.left)
            }
        );
        if !self.spoke_requests.is_empty() {
            let writes = writes_of(&self.spoke_requests);
            let _ = writeln!(
                md,
                "\nSpoke requests of the agent (its own counter) by the end of the idle window, for {} works created and {} deleted: {} ({:.2} writes per work created).",
                self.works_created,
                self.parameters.deletions,
                by_verb(&self.spoke_requests),
                writes as f64 / self.works_created.max(1) as f64
            );
        }
        let counters: Vec<String> = self
            .source_counters
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(md, "\nSource counters at the end: {}.", counters.join(", "));
        md
    }

    fn results_table(&self, md: &mut String) {
        md.push_str("| Measure | Value | Target |\n|---|---|---|\n");
        for b in &self.bursts {
            let _ = writeln!(
                md,
                "| Burst of {}: publish to first status, p50 / p99 | {} | p50 <= {TARGET_BURST_RATIO}x the Go agent's |",
                b.size,
                p50_p99(b.first_status.as_ref())
            );
        }
        let _ = writeln!(
            md,
            "| Delete round trip, p50 / p99 | {} | <= {TARGET_DELETE_MS:.0} ms |",
            p50_p99(self.delete.as_ref())
        );
        let _ = writeln!(
            md,
            "| Status events per idle minute, {} works | {:.2} | {TARGET_IDLE_PER_MINUTE:.0} |",
            self.idle.works, self.idle.per_minute
        );
        let _ = writeln!(
            md,
            "| RSS at idle end / highest sample | {} | <= {TARGET_RSS_RATIO}x the Go agent's |",
            rss_pair(self)
        );
    }

    fn comparison_table(&self, md: &mut String, go: &Report) {
        md.push_str("| Measure | This run | Go agent | Ratio | Target | Met |\n|---|---|---|---:|---|---|\n");
        for b in &self.bursts {
            let ours = b.first_status.as_ref().map(|s| s.p50_ms);
            let theirs = go
                .burst(b.size)
                .and_then(|g| g.first_status.as_ref())
                .map(|s| s.p50_ms);
            let ratio = ratio(ours, theirs);
            let _ = writeln!(
                md,
                "| Burst of {}: publish to first status, p50 / p99 | {} | {} | {} | p50 <= {TARGET_BURST_RATIO}x | {} |",
                b.size,
                p50_p99(b.first_status.as_ref()),
                p50_p99(go.burst(b.size).and_then(|g| g.first_status.as_ref())),
                fmt_ratio(ratio),
                met(ratio.map(|r| r <= TARGET_BURST_RATIO))
            );
        }
        for b in &self.bursts {
            let theirs = go.burst(b.size).and_then(|g| g.applied_available.as_ref());
            let ratio = ratio(
                b.applied_available.as_ref().map(|s| s.p50_ms),
                theirs.map(|s| s.p50_ms),
            );
            let _ = writeln!(
                md,
                "| Burst of {}: publish to Applied+Available, p50 / p99 | {} | {} | {} | | |",
                b.size,
                p50_p99(b.applied_available.as_ref()),
                p50_p99(theirs),
                fmt_ratio(ratio),
            );
        }
        let ours = self.delete.as_ref().map(|s| s.p50_ms);
        let _ = writeln!(
            md,
            "| Delete round trip, p50 / p99 | {} | {} | {} | <= {TARGET_DELETE_MS:.0} ms | {} |",
            p50_p99(self.delete.as_ref()),
            p50_p99(go.delete.as_ref()),
            fmt_ratio(ratio(ours, go.delete.as_ref().map(|s| s.p50_ms))),
            met(self
                .delete
                .as_ref()
                .map(|s| s.p99_ms.max(s.p50_ms) <= TARGET_DELETE_MS))
        );
        let _ = writeln!(
            md,
            "| Status events per idle minute, {} works | {:.2} | {:.2} | | {TARGET_IDLE_PER_MINUTE:.0} | {} |",
            self.idle.works,
            self.idle.per_minute,
            go.idle.per_minute,
            met(Some(self.idle.per_minute <= TARGET_IDLE_PER_MINUTE))
        );
        let ours = self.rss_max();
        let theirs = go.rss_max();
        let ratio = ratio(ours, theirs);
        let _ = writeln!(
            md,
            "| RSS at idle end / highest sample | {} | {} | {} | <= {TARGET_RSS_RATIO}x | {} |",
            rss_pair(self),
            rss_pair(go),
            fmt_ratio(ratio),
            met(ratio.map(|r| r <= TARGET_RSS_RATIO))
        );
        let anon = |r: &Report| r.memory_at("idle end").and_then(|m| m.rss_anon_mib);
        let _ = writeln!(
            md,
            "| RssAnon at idle end (RSS less mapped files) | {} | {} | {} | | |",
            mib(anon(self)),
            mib(anon(go)),
            fmt_ratio(self::ratio(anon(self), anon(go))),
        );
        let _ = writeln!(
            md,
            "| Agent CPU, whole run / idle window | {:.1} s / {:.2} s | {:.1} s / {:.2} s | {} | | |",
            self.cpu_seconds_total,
            self.cpu_seconds_idle,
            go.cpu_seconds_total,
            go.cpu_seconds_idle,
            fmt_ratio(ratio_f(self.cpu_seconds_total, go.cpu_seconds_total)),
        );
        let _ = writeln!(
            md,
            "\nGo agent run: {} ({}; load at most {:.2}).",
            go.label, go.environment.machine.date, go.environment.machine.load_max
        );
    }
}

/// The writes among requests counted by verb (all but get, list and watch).
pub fn writes_of(by_verb: &BTreeMap<String, u64>) -> u64 {
    by_verb
        .iter()
        .filter(|(v, _)| !matches!(v.as_str(), "get" | "list" | "watch"))
        .map(|(_, n)| n)
        .sum()
}

/// The top-up's section of the Markdown: its time against the floor the client QPS sets, and the
/// requests the agent counted.
fn apply_section(md: &mut String, t: &TopUp, f: &ApplyFloor, flavor: Flavor) {
    let _ = writeln!(
        md,
        "\n## Apply time and its floor\n\n\
         Top-up of {} in batches of {}: {:.1} s to Applied and Available. The floor at the \
         agent's client QPS {} and burst {}: **{:.1} s**. A new work costs this project's agent \
         {} spoke writes: {} ConfigMap create{} and {APPLIED_WORK_WRITES_PER_WORK} AppliedManifestWork writes \
         (a create carrying the record, and a patch). The agent paces the two kinds in buckets of their own, so \
         the floor is the busier bucket's requests less the burst, over the QPS: {} ConfigMap \
         creates take {:.1} s, {} AppliedManifestWork writes {:.1} s. Through one bucket \
         ({} requests): {:.1} s.",
        shape(t.works, f.configmaps_per_work),
        t.batch,
        t.seconds,
        f.qps,
        f.burst,
        f.seconds,
        f.writes_per_work(),
        f.configmaps_per_work,
        if f.configmaps_per_work == 1 { "" } else { "s" },
        f.configmap_creates,
        f.configmap_seconds(),
        f.applied_work_writes,
        f.applied_work_seconds(),
        f.configmap_creates + f.applied_work_writes,
        f.one_bucket_seconds,
    );
    if flavor == Flavor::MaestroGo {
        md.push_str(
            "\nThe Go agent counts no requests of its own; it creates the same ConfigMaps through \
             a client of their own, so the ConfigMap creates bound it the same way.\n",
        );
    }
    if !t.spoke_requests.is_empty() {
        let writes = writes_of(&t.spoke_requests);
        let _ = writeln!(
            md,
            "\nSpoke requests the agent counted in the top-up: {} ({writes} writes, {:.2} a work; \
             {} expected).",
            by_verb(&t.spoke_requests),
            writes as f64 / t.works.max(1) as f64,
            f.writes_per_work()
        );
    }
}

/// Counts by verb as `create 10, patch 2`.
fn by_verb(counts: &BTreeMap<String, u64>) -> String {
    counts
        .iter()
        .map(|(v, n)| format!("{v} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The restart's section of the Markdown.
fn restart_section(md: &mut String, r: &Restart) {
    let writes = writes_of(&r.spoke_requests);
    let _ = writeln!(
        md,
        "\n## Restart\n\nThe agent killed (SIGKILL) over {} idle works and started again.\n\n\
         | Measure | Value |\n|---|---|\n\
         | Start to the spec resync request (versions listed) | {:.2} s ({}) |\n\
         | Start to settled (no status event for the quiet period) | {:.1} s{} |\n\
         | Status events until settled (accepted as news / unchanged), works reported | {} ({} / {}), {} |\n\
         | Spoke requests until settled (agent counter) | {} |\n\
         | Spoke writes until settled | {} |\n\
         | After a broker restart, the spec resync request: versions, data, whole MQTT message | {}, {} bytes, {} bytes |\n\
         | The source restarted, every current hash in {} requests of {}: answers | {} |\n\
         | Parts with one stale hash each: stale works answered | {} of {} |\n\
         | Works of the part not sent (unlisted): answers | {} of {} works |\n\
         | Listed works with a current hash: answers | {} |\n\
         | Broker restart (`max_packet_size` {} bytes): quiet again after | {:.1} s |\n\
         | Spec resync requests, works listed, bytes | {}, {}, {} bytes |\n\
         | Works the source sent back in answer, bytes | {}, {} bytes |\n\
         | Largest packet from the agent / from the source | {} / {} bytes |\n\
         | Spoke writes, works unconfirmed, reconnects (the restart's included) | {}, {}, {} |",
        r.works,
        r.spec_resync_seconds,
        r.start_versions,
        r.settle_seconds,
        if r.settled { "" } else { " (NOT settled)" },
        r.status_events,
        r.status_accepted,
        r.status_unchanged,
        r.reported,
        if r.spoke_requests.is_empty() {
            "not counted".to_string()
        } else {
            by_verb(&r.spoke_requests)
        },
        if r.spoke_requests.is_empty() {
            "not counted".to_string()
        } else {
            writes.to_string()
        },
        r.spec_resync_versions,
        r.spec_resync_data_bytes,
        r.spec_resync_message_bytes,
        r.resync_parts,
        r.resync_part,
        r.current_answers,
        r.stale_answered,
        r.stale_listed,
        r.unlisted_answered,
        r.unlisted,
        r.other_answered,
        r.broker_restart.max_packet,
        r.broker_restart.seconds,
        r.broker_restart.requests,
        r.broker_restart.listed,
        r.broker_restart.request_bytes,
        r.broker_restart.answers,
        r.broker_restart.answer_bytes,
        r.broker_restart.largest_from_agent,
        r.broker_restart.largest_from_source,
        r.broker_restart.spoke_writes,
        r.broker_restart.unconfirmed,
        r.broker_restart.reconnects,
    );
}

fn loads(l: [f64; 3]) -> String {
    format!("{:.2} / {:.2} / {:.2}", l[0], l[1], l[2])
}

fn ms(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1} s", v / 1000.0)
    } else {
        format!("{v:.0} ms")
    }
}

fn p50_p99(s: Option<&Summary>) -> String {
    s.map_or_else(
        || "–".into(),
        |s| format!("{} / {}", ms(s.p50_ms), ms(s.p99_ms)),
    )
}

fn p50_p99_max(s: Option<&Summary>) -> String {
    s.map_or_else(
        || "–".into(),
        |s| {
            format!(
                "{} / {} / {} (n = {})",
                ms(s.p50_ms),
                ms(s.p99_ms),
                ms(s.max_ms),
                s.count
            )
        },
    )
}

fn mib(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |a| format!("{a:.1} MiB"))
}

fn rss_pair(r: &Report) -> String {
    let end = r.memory_at("idle end").map(|m| m.rss_mib);
    match (end, r.rss_max()) {
        (Some(e), Some(m)) => format!("{e:.1} / {m:.1} MiB"),
        (None, Some(m)) => format!("– / {m:.1} MiB"),
        _ => "–".into(),
    }
}

fn ratio(ours: Option<f64>, theirs: Option<f64>) -> Option<f64> {
    ratio_f(ours?, theirs?)
}

fn ratio_f(ours: f64, theirs: f64) -> Option<f64> {
    (theirs > 0.0).then(|| ours / theirs)
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "–".into(), |r| format!("{r:.2}x"))
}

fn met(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "yes",
        Some(false) => "**no**",
        None => "–",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloudevents::types::EventType;
    use test_support::maestro::StatusOutcome;

    fn arrival(
        id: &str,
        at: Instant,
        applied: bool,
        available: bool,
        deleted: bool,
    ) -> StatusArrival {
        StatusArrival {
            at,
            resource_id: id.into(),
            event_type: EventType::StatusUpdate,
            applied,
            available,
            deleted,
            outcome: StatusOutcome::Accepted,
        }
    }

    #[test]
    fn firsts_take_the_earliest_event_of_each_kind() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut f = Firsts::default();
        f.add(&[
            arrival("a", at(10), false, false, false),
            arrival("b", at(15), true, true, false),
        ]);
        f.add(&[
            arrival("a", at(20), true, false, false),
            arrival("a", at(30), true, true, false),
            arrival("a", at(40), true, true, false),
            arrival("a", at(50), false, false, true),
        ]);
        let a = f.of("a");
        assert_eq!(
            (a.any, a.applied, a.applied_available, a.deleted),
            (Some(at(10)), Some(at(20)), Some(at(30)), Some(at(50)))
        );
        assert_eq!((f.events, f.last_event), (6, Some(at(50))));
        assert_eq!(f.of("zz"), FirstSeen::default());

        let published = vec![
            ("a".to_string(), at(5)),
            ("b".to_string(), at(5)),
            ("c".to_string(), at(5)),
        ];
        assert_eq!(
            latencies(&published, &f, |s| s.any),
            [Duration::from_millis(5), Duration::from_millis(10)]
        );
        assert_eq!(
            latencies(&published, &f, |s| s.applied_available),
            [Duration::from_millis(25), Duration::from_millis(10)]
        );
    }

    fn report(label: &str, p50: f64, delete_ms: f64, idle: f64, rss: f64) -> Report {
        let s = |v: f64| Summary {
            count: 20,
            min_ms: v,
            p50_ms: v,
            p90_ms: v,
            p99_ms: v,
            max_ms: v,
            mean_ms: v,
        };
        Report {
            label: label.into(),
            environment: Environment {
                machine: Machine::example([0.5; 3], 0.7),
                flavor: Flavor::Ours,
                agent_bin: "/tmp/wa".into(),
                agent_commit: "abc".into(),
                agent_args: vec!["agent".into()],
            },
            parameters: Parameters {
                bursts: vec![20],
                bundle_bytes: 4000,
                broker_limits: None,
                configmaps_per_work: 1,
                deletions: 20,
                idle_works: 1000,
                idle_seconds: 120.0,
                quiet_seconds: 20.0,
            },
            bursts: vec![Burst {
                size: 20,
                first_status: Some(s(p50)),
                applied: Some(s(p50)),
                applied_available: Some(s(p50)),
                status_events: 20,
                wall_ms: 100.0,
            }],
            delete: Some(s(delete_ms)),
            top_up: TopUp {
                works: 900,
                batch: 100,
                seconds: 30.0,
                floor: None,
                spoke_requests: BTreeMap::new(),
            },
            idle: Idle {
                works: 1000,
                settled: true,
                settle_seconds: 20.0,
                window_seconds: 120.0,
                status_events: (idle * 2.0) as usize,
                per_minute: idle,
                works_touched: 0,
                by_type: BTreeMap::new(),
            },
            memory: vec![MemorySample {
                at: "idle end".into(),
                works: 1000,
                rss_mib: rss,
                hwm_mib: rss,
                rss_anon_mib: Some(rss / 2.0),
            }],
            cpu_seconds_total: 10.0,
            cpu_seconds_idle: 0.1,
            cleanup: Cleanup {
                works: 1000,
                seconds: 5.0,
                left: 0,
            },
            source_counters: BTreeMap::from([("accepted".to_string(), 3000)]),
            spoke_requests: BTreeMap::new(),
            works_created: 1020,
            restart: None,
            rss_csv: None,
        }
    }

    #[test]
    fn comparison_marks_each_target() {
        let ours = report("ours", 20.0, 100.0, 0.0, 20.0);
        let go = report("go", 60.0, 2000.0, 3.0, 100.0);
        let md = ours.markdown(Some(&go));
        assert!(md.contains("| Burst of 20: publish to first status, p50 / p99 | 20 ms / 20 ms | 60 ms / 60 ms | 0.33x | p50 <= 0.5x | yes |"), "{md}");
        assert!(md.contains("| Delete round trip, p50 / p99 | 100 ms / 100 ms | 2000 ms / 2000 ms | 0.05x | <= 500 ms | yes |"), "{md}");
        assert!(md.contains("| 0.00 | 3.00 | | 0 | yes |"), "{md}");
        assert!(
            md.contains("| 20.0 / 20.0 MiB | 100.0 / 100.0 MiB | 0.20x | <= 0.3x | yes |"),
            "{md}"
        );
        let slow = report("slow", 40.0, 600.0, 1.0, 40.0);
        let md = slow.markdown(Some(&go));
        assert_eq!(md.matches("**no**").count(), 4, "{md}");
        // Alone, the report names the targets without judging them.
        let alone = ours.markdown(None);
        assert!(
            alone.contains("| Delete round trip, p50 / p99 | 100 ms / 100 ms | <= 500 ms |"),
            "{alone}"
        );
        assert!(!alone.contains("**no**"));
    }

    #[test]
    fn spoke_requests_by_verb() {
        let text = "# HELP work_agent_api_requests_total x\n\
            work_agent_api_requests_total{api=\"spoke\",verb=\"create\"} 2040\n\
            work_agent_api_requests_total{api=\"spoke\",verb=\"patch\"} 1020\n\
            work_agent_api_requests_total{api=\"hub\",verb=\"patch\"} 5\n\
            work_agent_api_requests_total{api=\"spoke\",verb=\"watch\"} 3\n";
        let got = spoke_requests(text);
        assert_eq!(
            got,
            BTreeMap::from([
                ("create".to_string(), 2040),
                ("patch".to_string(), 1020),
                ("watch".to_string(), 3)
            ])
        );
        let mut r = report("ours", 20.0, 100.0, 0.0, 20.0);
        r.spoke_requests = got;
        assert!(r.markdown(None).contains("(3.00 writes per work created)"));
    }

    #[test]
    fn the_client_budget_comes_from_the_agents_command_line() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(client_budget(&[]), DEFAULT_CLIENT_BUDGET);
        assert_eq!(
            client_budget(&args(&["--kube-api-qps=200", "--kube-api-burst=400"])),
            (200.0, 400)
        );
        assert_eq!(
            client_budget(&args(&[
                "--spoke-qps",
                "12.5",
                "-v=2",
                "--spoke-burst",
                "30"
            ])),
            (12.5, 30)
        );
        // The last one wins; what is not set keeps its default; a bad value is ignored.
        assert_eq!(
            client_budget(&args(&[
                "--kube-api-qps=20",
                "--kube-api-qps=300",
                "--kube-api-burst=x"
            ])),
            (300.0, DEFAULT_CLIENT_BUDGET.1)
        );
        // The hub's flags are not the spoke client's.
        assert_eq!(
            client_budget(&args(&["--hub-kube-api-qps=500", "--kube-api-qps"])),
            DEFAULT_CLIENT_BUDGET
        );
    }

    #[test]
    fn the_floor_is_the_busier_buckets_requests_beyond_the_burst() {
        // Ten ConfigMaps a work: the ConfigMap creates decide.
        let f = ApplyFloor::new(850, 10, 200.0, 400);
        assert_eq!((f.configmap_creates, f.applied_work_writes), (8_500, 1_700));
        assert_eq!(f.writes_per_work(), 12);
        assert_eq!(f.configmap_seconds(), 40.5);
        assert_eq!(f.applied_work_seconds(), 6.5);
        assert_eq!(f.seconds, 40.5);
        assert_eq!(f.one_bucket_seconds, 49.0);
        // One ConfigMap a work: the AppliedManifestWork writes decide (3 writes a work).
        let f = ApplyFloor::new(9_850, 1, 200.0, 400);
        assert_eq!(f.writes_per_work(), 3);
        assert_eq!((f.seconds, f.one_bucket_seconds), (96.5, 145.75));
        // Fewer requests than the burst: no wait at all.
        assert_eq!(ApplyFloor::new(10, 1, 50.0, 100).seconds, 0.0);
    }

    #[test]
    fn counters_since_a_reading_and_the_shape() {
        let before = BTreeMap::from([("create".to_string(), 10), ("get".to_string(), 3)]);
        let after = BTreeMap::from([
            ("create".to_string(), 25),
            ("get".to_string(), 3),
            ("patch".to_string(), 4),
        ]);
        assert_eq!(
            counted_since(&before, &after),
            BTreeMap::from([("create".to_string(), 15), ("patch".to_string(), 4)])
        );
        assert_eq!(shape(1000, 10), "1000 works x 10 ConfigMaps");
        assert_eq!(shape(10000, 1), "10000 works x 1 ConfigMap");
    }

    #[test]
    fn the_report_states_shape_floor_requests_and_samples() {
        let mut r = report("ten", 20.0, 100.0, 0.0, 20.0);
        r.parameters.configmaps_per_work = 10;
        r.top_up = TopUp {
            works: 850,
            batch: 1000,
            seconds: 61.0,
            floor: Some(ApplyFloor::new(850, 10, 200.0, 400)),
            spoke_requests: BTreeMap::from([
                ("create".to_string(), 9_350),
                ("get".to_string(), 2),
                ("patch".to_string(), 850),
            ]),
        };
        r.rss_csv = Some("ten-rss.csv".into());
        let md = r.markdown(None);
        assert!(
            md.starts_with("# MQTT benchmark: ten (1000 works x 10 ConfigMaps)"),
            "{md}"
        );
        for want in [
            "bursts of 20 bundles of 10 ConfigMaps (",
            "Top-up of 850 works x 10 ConfigMaps in batches of 1000: 61.0 s",
            "client QPS 200 and burst 400: **40.5 s**",
            "A new work costs this project's agent 12 spoke writes: 10 ConfigMap creates and 2 \
             AppliedManifestWork writes",
            "8500 ConfigMap creates take 40.5 s, 1700 AppliedManifestWork writes 6.5 s. Through \
             one bucket (10200 requests): 49.0 s.",
            "in the top-up: create 9350, get 2, patch 850 (10200 writes, 12.00 a work; 12 \
             expected)",
            "by phase: `ten-rss.csv`",
        ] {
            assert!(md.contains(want), "{want}\n{md}");
        }
        assert!(!md.contains("The Go agent counts no requests"), "{md}");
        r.environment.flavor = Flavor::MaestroGo;
        r.top_up.spoke_requests.clear();
        let go = r.markdown(None);
        assert!(
            go.contains("The Go agent counts no requests of its own"),
            "{go}"
        );
        assert!(!go.contains("Spoke requests the agent counted"), "{go}");
        // A report of one ConfigMap a work without these parts reads as before.
        let plain = report("one", 20.0, 100.0, 0.0, 20.0).markdown(None);
        assert!(
            plain.contains("bursts of 20 single-ConfigMap bundles (4000 bytes each)"),
            "{plain}"
        );
        assert!(
            !plain.contains("## Apply time") && !plain.contains("rss.csv"),
            "{plain}"
        );
    }

    #[test]
    fn a_report_from_before_the_shape_was_set_reads_as_one_configmap() {
        let r = report("old", 20.0, 100.0, 0.0, 20.0);
        let mut json = serde_json::to_value(&r).expect("encodes");
        for (section, key) in [
            ("parameters", "configmaps_per_work"),
            ("top_up", "floor"),
            ("top_up", "spoke_requests"),
        ] {
            json[section].as_object_mut().map(|o| o.remove(key));
        }
        json.as_object_mut().map(|o| o.remove("rss_csv"));
        let back: Report = serde_json::from_value(json).expect("decodes");
        assert_eq!(back, r);
    }

    #[test]
    fn the_json_reads_back() {
        let r = report("ours", 20.0, 100.0, 0.0, 20.0);
        let json = serde_json::to_string(&r).expect("encodes");
        assert!(json.contains("\"flavor\":\"ours\""), "{json}");
        let back: Report = serde_json::from_str(&json).expect("decodes");
        assert_eq!(back, r);
        let go: Flavor = serde_json::from_str("\"maestro-go\"").expect("flavor");
        assert_eq!(go, Flavor::MaestroGo);
    }
}
