//! `bench_agent`: the agent benchmark. Run it through `make bench-agent` (which builds the agent,
//! starts the control planes if none run, and passes their kubeconfigs in
//! `WORK_AGENT_HUB_KUBECONFIG` and `WORK_AGENT_SPOKE_KUBECONFIG`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use e2e::bench::agent::Flavor;
use e2e::bench::cli::{AgentArgs, parse_duration, write_report};
use e2e::bench::run::{Options, run};

/// Creates N ManifestWorks of C ConfigMaps at once and measures what the agent does with them.
#[derive(Debug, Parser)]
// A later option wins over an earlier one: the make targets' own `--label` and others can be
// overridden through BENCH_ARGS / BENCH_MQTT_ARGS.
#[command(name = "bench_agent", args_override_self = true)]
struct Cli {
    /// Which agent `--agent-bin` is: `ours` (work-agent) or `ocm` (upstream's `work` binary,
    /// started as `work agent` with its own flags for the same QPS, burst and sync period).
    #[arg(long, value_enum, default_value_t = Flavor::Ours)]
    flavor: Flavor,
    /// ManifestWorks to create.
    #[arg(long, default_value_t = 1000)]
    works: usize,
    /// ConfigMaps per ManifestWork.
    #[arg(long, default_value_t = 5)]
    configmaps_per_work: usize,
    /// Client QPS of the agent, for hub and spoke.
    #[arg(long, default_value_t = 50.0)]
    qps: f64,
    /// Client burst of the agent, for hub and spoke.
    #[arg(long, default_value_t = 100)]
    burst: u32,
    #[command(flatten)]
    agent: AgentArgs,
    /// Build profile of the agent (for the report).
    #[arg(long, default_value = "unknown")]
    agent_profile: String,
    /// `--status-sync-period` (upstream: `--status-sync-interval`) of the agent in the
    /// idle-resync phase (`60s`, `2m`).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    resync_period: Duration,
    /// Spoke changes to time (status latency).
    #[arg(long, default_value_t = 100)]
    latency_samples: usize,
    /// Works to delete and time (at most half of --works).
    #[arg(long, default_value_t = 100)]
    deletion_samples: usize,
    /// How long the first apply may take before the run fails (`30m`).
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    apply_timeout: Duration,
    /// Report name: the files are OUT_DIR/LABEL.md and OUT_DIR/LABEL.json.
    #[arg(long, default_value = "bench-agent")]
    label: String,
    /// Directory of the report.
    #[arg(long, default_value = "target/bench")]
    out_dir: PathBuf,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.works == 0 || cli.configmaps_per_work == 0 || cli.qps <= 0.0 {
        eprintln!("bench_agent: --works, --configmaps-per-work and --qps must be positive");
        return ExitCode::from(2);
    }
    let out_dir = cli.out_dir.clone();
    let label = cli.label.clone();
    let opts = Options {
        flavor: cli.flavor,
        works: cli.works,
        configmaps_per_work: cli.configmaps_per_work,
        qps: cli.qps,
        burst: cli.burst,
        agent_bin: cli.agent.agent_bin,
        agent_args: cli.agent.agent_args,
        agent_commit: cli.agent.agent_commit,
        agent_profile: cli.agent_profile,
        resync_period: cli.resync_period,
        latency_samples: cli.latency_samples,
        deletion_samples: cli.deletion_samples,
        label: cli.label,
        out_dir: cli.out_dir,
        apply_timeout: cli.apply_timeout,
    };
    let report = match run(opts).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bench_agent: {e}");
            return ExitCode::FAILURE;
        }
    };
    let md = report.markdown();
    write_report("bench_agent", &out_dir, &label, &md, &report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_defaults_match_the_documented_run() {
        let cli = Cli::try_parse_from([
            "bench_agent",
            "--agent-bin",
            "/a",
            "--agent-arg",
            "--workers=10",
        ])
        .expect("parses");
        assert_eq!(
            (cli.works, cli.configmaps_per_work, cli.qps, cli.burst),
            (1000, 5, 50.0, 100)
        );
        assert_eq!(cli.agent.agent_args, ["--workers=10"]);
        assert_eq!(cli.resync_period, Duration::from_secs(60));
        assert_eq!(cli.flavor, Flavor::Ours);
        // `make bench-scale`'s options can be overridden through BENCH_ARGS.
        let cli = Cli::try_parse_from([
            "bench_agent",
            "--agent-bin",
            "/a",
            "--works",
            "10000",
            "--label",
            "scale-10000x1-abc",
            "--works",
            "50",
            "--label",
            "mine",
        ])
        .expect("parses");
        assert_eq!((cli.works, cli.label.as_str()), (50, "mine"));
    }

    #[test]
    fn flavor_ocm_is_accepted_and_an_unknown_one_refused() {
        let cli = Cli::try_parse_from([
            "bench_agent",
            "--flavor",
            "ocm",
            "--agent-bin",
            "/ocm/work",
            "--agent-commit",
            "ocm-v1.3.1",
        ])
        .expect("parses");
        assert_eq!(cli.flavor, Flavor::Ocm);
        assert_eq!(cli.agent.agent_commit, "ocm-v1.3.1");
        assert!(
            Cli::try_parse_from(["bench_agent", "--flavor", "maestro", "--agent-bin", "/a"])
                .is_err()
        );
    }
}
