//! The benchmark report: the figures of one run as JSON and as Markdown. Pure.

use std::collections::BTreeSet;
use std::fmt::Write;

use serde::Serialize;

use super::agent::Flavor;
use super::prometheus::Counts;
use super::stats::Summary;
use super::system::Machine;

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Name of the run (file name of the report).
    pub label: String,
    /// Machine, date, load and the agent build.
    pub environment: Environment,
    /// What was run.
    pub parameters: Parameters,
    /// Seconds from the first create to the moment the hub showed every work Applied and
    /// Available.
    pub apply_seconds: f64,
    /// Seconds the harness took to create every work (part of `apply_seconds`).
    pub create_seconds: f64,
    /// Spoke-change to hub-status latency.
    pub status_latency: Option<Summary>,
    /// deletionTimestamp to work gone.
    pub deletion: Option<Summary>,
    /// Agent memory.
    pub memory: Memory,
    /// Requests per phase.
    pub phases: Vec<Phase>,
    /// Anything the reader should know about this run (load, phases that overlapped).
    pub notes: Vec<String>,
}

/// Where and what ran.
#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    /// Where and when it ran.
    #[serde(flatten)]
    pub machine: Machine,
    /// Which agent ran: ours or upstream's.
    pub flavor: Flavor,
    /// The agent binary.
    pub agent_bin: String,
    /// Upstream's agent: the OCM commit its binary was built from, when known.
    pub agent_source_commit: Option<String>,
    /// The exact command line of each agent started (first apply, then the restart).
    pub agent_commands: Vec<String>,
    /// The commit it was built from, as given.
    pub agent_commit: String,
    /// Its build profile, as given.
    pub agent_profile: String,
    /// Extra agent arguments.
    pub agent_args: Vec<String>,
}

/// The run's parameters.
#[derive(Debug, Clone, Serialize)]
pub struct Parameters {
    /// ManifestWorks created.
    pub works: usize,
    /// ConfigMaps per work.
    pub configmaps_per_work: usize,
    /// Agent client QPS (hub and spoke).
    pub qps: f64,
    /// Agent client burst (hub and spoke).
    pub burst: u32,
    /// `--status-sync-period` of the agent in the resync phase, seconds.
    pub resync_period_seconds: f64,
    /// Spoke changes timed.
    pub latency_samples: usize,
    /// Works deleted and timed.
    pub deletion_samples: usize,
}

/// Agent memory from /proc.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Memory {
    /// VmRSS once every work was applied and the agent was idle, MiB.
    pub steady_rss_mib: Option<f64>,
    /// VmHWM (peak resident set) of the agent that did the first apply, MiB.
    pub peak_rss_mib: Option<f64>,
    /// CPU time (user + system) of the agent that did the first apply, from its start until
    /// it was idle after the first apply, seconds.
    pub first_apply_cpu_seconds: Option<f64>,
}

/// The agent's requests in one phase.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// Short name (`first_apply`, `idle_resync`, ...).
    pub name: String,
    /// What happened in it.
    pub description: String,
    /// Length, seconds.
    pub seconds: f64,
    /// What the per-unit figures divide by (`manifest`, `work`, `change`).
    pub unit: String,
    /// How many units.
    pub units: u64,
    /// Hub requests on the agent's resources (server side, the harness's own subtracted).
    pub hub: Counts,
    /// Hub requests on other resources (the API server's own identity lease): noise.
    pub hub_other: Counts,
    /// Spoke requests on the resources the agent touches (server side, harness's subtracted).
    pub spoke: Counts,
    /// Spoke requests on other resources (controller-manager, scheduler, kwok): noise.
    pub spoke_other: Counts,
    /// The agent's own counter for the hub, when it has one.
    pub agent_hub: Option<Counts>,
    /// The agent's own counter for the spoke, when it has one.
    pub agent_spoke: Option<Counts>,
}

impl Phase {
    fn per_unit(&self, n: u64) -> f64 {
        if self.units == 0 {
            0.0
        } else {
            n as f64 / self.units as f64
        }
    }
}

/// Headline figures, read from the phases.
#[derive(Debug, Clone, Serialize)]
pub struct Headline {
    /// Spoke requests per manifest on first apply (server side).
    pub spoke_requests_per_manifest: Option<f64>,
    /// The same from the agent's counter.
    pub spoke_requests_per_manifest_agent: Option<f64>,
    /// Hub writes per work on first apply.
    pub hub_writes_per_work: Option<f64>,
    /// Hub GETs per work on first apply.
    pub hub_gets_per_work: Option<f64>,
    /// Idle resync: spoke writes, spoke GETs, hub writes, hub GETs.
    pub resync: Option<[u64; 4]>,
}

impl Report {
    /// The phase of that name.
    pub fn phase(&self, name: &str) -> Option<&Phase> {
        self.phases.iter().find(|p| p.name == name)
    }

    /// The headline figures.
    pub fn headline(&self) -> Headline {
        let first = self.phase(FIRST_APPLY);
        let works = self.parameters.works.max(1) as f64;
        Headline {
            spoke_requests_per_manifest: first.map(|p| p.per_unit(p.spoke.requests())),
            spoke_requests_per_manifest_agent: first
                .and_then(|p| Some(p.per_unit(p.agent_spoke.as_ref()?.requests()))),
            hub_writes_per_work: first.map(|p| p.hub.writes() as f64 / works),
            hub_gets_per_work: first.map(|p| p.hub.gets() as f64 / works),
            resync: self.phase(IDLE_RESYNC).map(|p| {
                [
                    p.spoke.writes(),
                    p.spoke.gets(),
                    p.hub.writes(),
                    p.hub.gets(),
                ]
            }),
        }
    }

    /// The report as Markdown.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        self.write_markdown(&mut md)
            .expect("writing to a String cannot fail");
        md
    }

    fn write_markdown(&self, md: &mut String) -> std::fmt::Result {
        let e = &self.environment;
        let p = &self.parameters;
        writeln!(md, "# Agent benchmark: {}\n", self.label)?;
        writeln!(md, "{}", e.machine.date_line())?;
        writeln!(
            md,
            "- Load average (1/5/15 min): {} at the start, {} at the end, {:.2} at most (1 min). \
             The machine is shared with other builds: timings are noisy.",
            load(e.machine.load_start),
            load(e.machine.load_end),
            e.machine.load_max
        )?;
        writeln!(
            md,
            "- Agent: {}, `{}`, commit {}{}, {} build{}.",
            e.flavor.describe(),
            e.agent_bin,
            e.agent_commit,
            e.agent_source_commit
                .as_ref()
                .map(|c| format!(" (source commit {c})"))
                .unwrap_or_default(),
            e.agent_profile,
            if e.agent_args.is_empty() {
                String::new()
            } else {
                format!(", extra arguments `{}`", e.agent_args.join(" "))
            }
        )?;
        for (i, command) in e.agent_commands.iter().enumerate() {
            let which = if i == 0 { "first apply" } else { "restart" };
            writeln!(md, "- Command line ({which}): `{command}`")?;
        }
        writeln!(
            md,
            "- Run: {} works x {} ConfigMaps, agent QPS {} / burst {} (hub and spoke), resync \
             phase with `{} {}s`.\n",
            p.works,
            p.configmaps_per_work,
            p.qps,
            p.burst,
            e.flavor.sync_period_flag(),
            p.resync_period_seconds
        )?;
        self.write_headline(md)?;
        for phase in &self.phases {
            write_phase(md, phase)?;
        }
        if !self.notes.is_empty() {
            writeln!(md, "## Notes\n")?;
            for n in &self.notes {
                writeln!(md, "- {n}")?;
            }
            writeln!(md)?;
        }
        Ok(())
    }

    fn write_headline(&self, md: &mut String) -> std::fmt::Result {
        let h = self.headline();
        writeln!(md, "## Results\n")?;
        writeln!(md, "| Measure | Value | Target |")?;
        writeln!(md, "|---|---|---|")?;
        writeln!(
            md,
            "| Time to all Applied+Available | {:.1} s (creating the works took {:.1} s) | <= 0.6x the baseline |",
            self.apply_seconds, self.create_seconds
        )?;
        let agent = match h.spoke_requests_per_manifest_agent {
            Some(v) => format!(" (agent counter: {v:.2})"),
            None if !self.environment.flavor.has_request_counter() => {
                " (agent counter: n/a)".into()
            }
            None => String::new(),
        };
        writeln!(
            md,
            "| Spoke requests per manifest, first apply | {}{agent} | <= 1.1 |",
            opt(h.spoke_requests_per_manifest)
        )?;
        writeln!(
            md,
            "| Hub writes per work, first apply | {} | <= 2 |",
            opt(h.hub_writes_per_work)
        )?;
        writeln!(
            md,
            "| Hub GETs per work, first apply | {} | |",
            opt(h.hub_gets_per_work)
        )?;
        let resync = |i: usize| h.resync.map(|r| r[i].to_string()).unwrap_or("-".into());
        writeln!(
            md,
            "| Idle resync: spoke writes / GETs | {} / {} | 0 / 0 |",
            resync(0),
            resync(1)
        )?;
        writeln!(
            md,
            "| Idle resync: hub writes / GETs | {} / {} | 0 / 0 |",
            resync(2),
            resync(3)
        )?;
        writeln!(
            md,
            "| Status latency, spoke change to hub status, p50 / p99 | {} | p99 <= 300 ms |",
            match (&self.status_latency, self.environment.flavor) {
                (None, Flavor::Ocm) => "n/a (polled at the status sync interval; notes)".into(),
                (s, _) => summary(s),
            }
        )?;
        writeln!(
            md,
            "| Deletion, deletionTimestamp to work gone, p50 / p99 | {} | p50 <= 1 s |",
            summary(&self.deletion)
        )?;
        writeln!(
            md,
            "| Agent RSS steady / peak | {} / {} MiB | <= 64 MiB |",
            opt(self.memory.steady_rss_mib),
            opt(self.memory.peak_rss_mib)
        )?;
        writeln!(
            md,
            "| Agent CPU, start to idle after the first apply | {} s | |\n",
            opt(self.memory.first_apply_cpu_seconds)
        )?;
        Ok(())
    }
}

/// Name of the first-apply phase.
pub const FIRST_APPLY: &str = "first_apply";
/// Name of the idle-resync phase.
pub const IDLE_RESYNC: &str = "idle_resync";

fn write_phase(md: &mut String, p: &Phase) -> std::fmt::Result {
    writeln!(md, "## Phase `{}` ({:.1} s)\n", p.name, p.seconds)?;
    writeln!(md, "{}\n", p.description)?;
    let verbs: BTreeSet<String> = [&p.hub, &p.spoke]
        .into_iter()
        .chain(p.agent_hub.iter())
        .chain(p.agent_spoke.iter())
        .flat_map(|c| c.by_verb().into_keys())
        .collect();
    if verbs.is_empty() {
        writeln!(md, "No requests from the agent.\n")?;
    } else {
        let agent = p.agent_hub.is_some() || p.agent_spoke.is_some();
        write!(
            md,
            "| Verb | Hub | Hub per {u} | Spoke | Spoke per {u} |",
            u = p.unit
        )?;
        if agent {
            write!(md, " Agent counter hub | Agent counter spoke |")?;
        }
        writeln!(md)?;
        writeln!(
            md,
            "|---|---:|---:|---:|---:|{}",
            if agent { "---:|---:|" } else { "" }
        )?;
        for verb in &verbs {
            let hub = p.hub.by_verb().get(verb).copied().unwrap_or(0);
            let spoke = p.spoke.by_verb().get(verb).copied().unwrap_or(0);
            write!(
                md,
                "| {verb} | {hub} | {:.2} | {spoke} | {:.2} |",
                p.per_unit(hub),
                p.per_unit(spoke)
            )?;
            if agent {
                let count = |c: &Option<Counts>| {
                    c.as_ref()
                        .map(|c| c.by_verb().get(verb).copied().unwrap_or(0).to_string())
                        .unwrap_or("-".into())
                };
                write!(md, " {} | {} |", count(&p.agent_hub), count(&p.agent_spoke))?;
            }
            writeln!(md)?;
        }
        writeln!(
            md,
            "| all | {} | {:.2} | {} | {:.2} |{}\n",
            p.hub.requests(),
            p.per_unit(p.hub.requests()),
            p.spoke.requests(),
            p.per_unit(p.spoke.requests()),
            if agent {
                let total = |c: &Option<Counts>| {
                    c.as_ref()
                        .map(|c| c.requests().to_string())
                        .unwrap_or("-".into())
                };
                format!(" {} | {} |", total(&p.agent_hub), total(&p.agent_spoke))
            } else {
                String::new()
            }
        )?;
    }
    writeln!(
        md,
        "By resource: hub {}; spoke {}. Not the agent's: hub {}; spoke {}.\n",
        by_resource(&p.hub),
        by_resource(&p.spoke),
        by_resource(&p.hub_other),
        by_resource(&p.spoke_other)
    )?;
    Ok(())
}

fn by_resource(c: &Counts) -> String {
    let parts: Vec<String> =
        c.0.iter()
            .flat_map(|(verb, r)| {
                r.iter()
                    .filter(|(_, n)| **n > 0)
                    .map(move |(res, n)| format!("{verb} {res} {n}"))
            })
            .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn load(l: [f64; 3]) -> String {
    format!("{:.2} / {:.2} / {:.2}", l[0], l[1], l[2])
}

fn opt(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.2}")).unwrap_or("-".into())
}

fn summary(s: &Option<Summary>) -> String {
    match s {
        Some(s) => format!(
            "{:.0} / {:.0} ms (n = {}, max {:.0} ms)",
            s.p50_ms, s.p99_ms, s.count, s.max_ms
        ),
        None => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn counts(entries: &[(&str, &str, u64)]) -> Counts {
        let mut c = Counts::default();
        for (v, r, n) in entries {
            c.add(v, r, *n);
        }
        c
    }

    fn report(agent_counter: bool) -> Report {
        let phase = |name: &str, units, spoke: Counts, hub: Counts| Phase {
            name: name.into(),
            description: "d".into(),
            seconds: 1.0,
            unit: "manifest".into(),
            units,
            hub,
            spoke: spoke.clone(),
            hub_other: Counts::default(),
            spoke_other: counts(&[("PUT", "leases.coordination.k8s.io", 3)]),
            agent_hub: None,
            agent_spoke: agent_counter.then_some(spoke),
        };
        Report {
            label: "t".into(),
            environment: Environment {
                machine: Machine::example([1.0, 2.0, 3.0], 4.0),
                flavor: Flavor::Ours,
                agent_bin: "/bin/agent".into(),
                agent_source_commit: None,
                agent_commands: vec!["/bin/agent run --spoke-cluster-name c".into()],
                agent_commit: "abc".into(),
                agent_profile: "release".into(),
                agent_args: vec![],
            },
            parameters: Parameters {
                works: 2,
                configmaps_per_work: 5,
                qps: 50.0,
                burst: 100,
                resync_period_seconds: 60.0,
                latency_samples: 1,
                deletion_samples: 0,
            },
            apply_seconds: 3.0,
            create_seconds: 0.5,
            status_latency: Summary::of(&[Duration::from_millis(120)]),
            deletion: None,
            memory: Memory::default(),
            phases: vec![
                phase(
                    FIRST_APPLY,
                    10,
                    counts(&[("POST", "configmaps", 10), ("GET", "configmaps", 12)]),
                    counts(&[
                        ("PATCH", "manifestworks/status", 3),
                        ("GET", "manifestworks", 2),
                    ]),
                ),
                phase(IDLE_RESYNC, 2, Counts::default(), Counts::default()),
            ],
            notes: vec!["a note".into()],
        }
    }

    #[test]
    fn headline_divides_by_manifests_and_works() {
        let h = report(false).headline();
        assert_eq!(h.spoke_requests_per_manifest, Some(2.2));
        assert_eq!(h.spoke_requests_per_manifest_agent, None);
        assert_eq!(h.hub_writes_per_work, Some(1.5));
        assert_eq!(h.hub_gets_per_work, Some(1.0));
        assert_eq!(h.resync, Some([0, 0, 0, 0]));
        assert_eq!(
            report(true).headline().spoke_requests_per_manifest_agent,
            Some(2.2)
        );
    }

    #[test]
    fn markdown_has_the_headline_the_phases_and_the_agent_counter_only_when_present() {
        let md = report(false).markdown();
        assert!(
            md.contains("| Spoke requests per manifest, first apply | 2.20 | <= 1.1 |"),
            "{md}"
        );
        assert!(md.contains("| 120 / 120 ms (n = 1, max 120 ms)"), "{md}");
        assert!(md.contains("| POST | 0 | 0.00 | 10 | 1.00 |"), "{md}");
        assert!(md.contains("No requests from the agent."), "{md}");
        assert!(md.contains("PUT leases.coordination.k8s.io 3"), "{md}");
        assert!(!md.contains("Agent counter"), "{md}");
        let with = report(true).markdown();
        assert!(with.contains("Agent counter spoke"), "{with}");
        assert!(with.contains("(agent counter: 2.20)"), "{with}");
        assert!(
            with.contains("- Command line (first apply): `/bin/agent run --spoke-cluster-name c`"),
            "{with}"
        );
    }

    #[test]
    fn upstream_report_names_flavor_source_and_commands_and_says_n_a_for_agent_figures() {
        let mut r = report(false);
        r.environment.flavor = Flavor::Ocm;
        r.environment.agent_bin = "/ocm/work".into();
        r.environment.agent_commit = "ocm-v1.3.1".into();
        r.environment.agent_source_commit = Some("805fa61".into());
        r.environment.agent_commands =
            vec!["/ocm/work agent --a".into(), "/ocm/work agent --b".into()];
        r.status_latency = None;
        r.memory.first_apply_cpu_seconds = Some(12.345);
        let md = r.markdown();
        assert!(
            md.contains("- Agent: upstream's OCM work agent, `/ocm/work`, commit ocm-v1.3.1 (source commit 805fa61)"),
            "{md}"
        );
        assert!(
            md.contains("- Command line (first apply): `/ocm/work agent --a`"),
            "{md}"
        );
        assert!(
            md.contains("- Command line (restart): `/ocm/work agent --b`"),
            "{md}"
        );
        assert!(md.contains("| 2.20 (agent counter: n/a) |"), "{md}");
        assert!(
            md.contains("| n/a (polled at the status sync interval; notes) |"),
            "{md}"
        );
        assert!(md.contains("| 12.35 s |"), "{md}");
        let json = serde_json::to_value(&r).unwrap_or_default();
        assert_eq!(json["environment"]["flavor"], "ocm");
        assert_eq!(
            json["environment"]["agent_commands"][1],
            "/ocm/work agent --b"
        );
    }
}
