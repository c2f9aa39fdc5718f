//! `bench_mqtt`: the MQTT benchmark. Run it through `make bench-mqtt` (which builds the agent,
//! starts a spoke control plane if none is named, and passes its kubeconfig in
//! `WORK_AGENT_SPOKE_KUBECONFIG`); the broker is a private mosquitto the benchmark starts.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use e2e::bench::cli::{AgentArgs, parse_duration, write_report};
use e2e::bench::mqtt::{Options, run};
use e2e::bench::mqtt_report::{Flavor, Report};
use test_support::mosquitto::Limits;

/// Which agent runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FlavorArg {
    /// This project's work-agent.
    Ours,
    /// Maestro's Go agent (`maestro agent`).
    MaestroGo,
}

/// One agent behind the Maestro-shaped test source on a private mosquitto: bursts of creates,
/// deletes, an idle phase with many works, memory.
#[derive(Debug, Parser)]
// A later option wins over an earlier one: the make targets' own `--label` and others can be
// overridden through BENCH_ARGS / BENCH_MQTT_ARGS.
#[command(name = "bench_mqtt", args_override_self = true)]
struct Cli {
    /// Which agent `--agent-bin` is (they differ in one flag: ours also gets `--http-address`).
    #[arg(long, value_enum, default_value = "ours")]
    flavor: FlavorArg,
    #[command(flatten)]
    agent: AgentArgs,
    /// Burst sizes, comma-separated, run in order.
    #[arg(long, value_delimiter = ',', default_value = "20,50,100")]
    bursts: Vec<usize>,
    /// ConfigMaps in each bundle (each work).
    #[arg(long, default_value_t = 1)]
    configmaps_per_work: usize,
    /// Bytes of data in each ConfigMap (a bundle of one is about 4 KB).
    #[arg(long, default_value_t = 3800)]
    configmap_bytes: usize,
    /// Works deleted one at a time (taken from the bursts' works).
    #[arg(long, default_value_t = 20)]
    deletions: usize,
    /// Works held in the idle phase.
    #[arg(long, default_value_t = 1000)]
    idle_works: usize,
    /// Bundles published at once while topping up to --idle-works.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// How long to count status events while the works sit idle (`2m`).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    idle: Duration,
    /// No status event for this long counts as settled (`20s`: two of the Go agent's 10 s
    /// status syncs).
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    quiet: Duration,
    /// After the idle window, kill the agent (SIGKILL), start it again over the idle works and
    /// measure its recovery and the status resync in parts.
    #[arg(long)]
    restart: bool,
    /// Status hashes per status resync request after the restart (Maestro sends at most 1,000).
    #[arg(long, default_value_t = 1000)]
    resync_part: usize,
    /// The broker's `max_packet_size` in bytes (the spec resync request of N works is about
    /// 74 N bytes).
    #[arg(long, default_value_t = Limits::default().max_packet_bytes)]
    broker_max_packet: u32,
    /// The broker's `max_queued_messages` per client (mosquitto's default 1,000; 0: no limit).
    #[arg(long, default_value_t = Limits::default().max_queued_messages)]
    broker_max_queued: u32,
    /// A report of Maestro's Go agent (JSON) to compare with: the Markdown then shows both and
    /// whether each target is met.
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Report name: the files are OUT_DIR/LABEL.md and OUT_DIR/LABEL.json.
    #[arg(long, default_value = "bench-mqtt")]
    label: String,
    /// Directory of the report.
    #[arg(long, default_value = "target/bench")]
    out_dir: PathBuf,
}

fn read_baseline(path: &PathBuf) -> Result<Report, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading the baseline {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| {
        format!(
            "the baseline {} is no bench_mqtt report: {e}",
            path.display()
        )
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.bursts.contains(&0)
        || cli.batch == 0
        || cli.idle.is_zero()
        || cli.resync_part == 0
        || cli.configmaps_per_work == 0
    {
        eprintln!(
            "bench_mqtt: burst sizes, --batch, --idle, --resync-part and --configmaps-per-work must be positive"
        );
        return ExitCode::from(2);
    }
    // Read first: a bad baseline should fail before a run of several minutes.
    let baseline = match cli.baseline.as_ref().map(read_baseline).transpose() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("bench_mqtt: {e}");
            return ExitCode::from(2);
        }
    };
    let out_dir = cli.out_dir.clone();
    let label = cli.label.clone();
    let opts = Options {
        flavor: match cli.flavor {
            FlavorArg::Ours => Flavor::Ours,
            FlavorArg::MaestroGo => Flavor::MaestroGo,
        },
        agent_bin: cli.agent.agent_bin,
        agent_args: cli.agent.agent_args,
        agent_commit: cli.agent.agent_commit,
        bursts: cli.bursts,
        configmaps_per_work: cli.configmaps_per_work,
        configmap_bytes: cli.configmap_bytes,
        deletions: cli.deletions,
        idle_works: cli.idle_works,
        batch: cli.batch,
        idle: cli.idle,
        quiet: cli.quiet,
        restart: cli.restart,
        resync_part: cli.resync_part,
        broker: Limits {
            max_packet_bytes: cli.broker_max_packet,
            max_queued_messages: cli.broker_max_queued,
        },
        label: cli.label,
        out_dir: cli.out_dir,
    };
    let report = match run(opts).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bench_mqtt: {e}");
            return ExitCode::FAILURE;
        }
    };
    let md = report.markdown(baseline.as_ref());
    write_report("bench_mqtt", &out_dir, &label, &md, &report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_issues_run() {
        let cli = Cli::try_parse_from(["bench_mqtt", "--agent-bin", "/a"]).expect("parses");
        assert_eq!(cli.flavor, FlavorArg::Ours);
        assert_eq!(cli.bursts, [20, 50, 100]);
        assert_eq!((cli.deletions, cli.idle_works), (20, 1000));
        assert_eq!((cli.configmaps_per_work, cli.configmap_bytes), (1, 3800));
        assert_eq!(cli.idle, Duration::from_secs(120));
        let cli = Cli::try_parse_from([
            "bench_mqtt",
            "--agent-bin",
            "/m",
            "--flavor",
            "maestro-go",
            "--bursts",
            "5,10",
            "--agent-arg",
            "--status-sync-interval=10s",
            "--configmaps-per-work",
            "10",
        ])
        .expect("parses");
        assert_eq!(cli.configmaps_per_work, 10);
        assert_eq!(cli.flavor, FlavorArg::MaestroGo);
        assert_eq!(cli.bursts, [5, 10]);
        assert_eq!(cli.agent.agent_args, ["--status-sync-interval=10s"]);
        // The make targets' options can be overridden; repeated agent arguments all count.
        let cli = Cli::try_parse_from([
            "bench_mqtt",
            "--agent-bin",
            "/a",
            "--label",
            "mqtt-1000x10-abc",
            "--agent-arg=--kube-api-qps=200",
            "--agent-arg=--kube-api-burst=400",
            "--label",
            "mine",
        ])
        .expect("parses");
        assert_eq!(cli.label, "mine");
        assert_eq!(
            cli.agent.agent_args,
            ["--kube-api-qps=200", "--kube-api-burst=400"]
        );
        assert!(parse_duration("1d").is_err());
    }

    #[test]
    fn a_bad_baseline_is_an_error() {
        let dir = std::env::temp_dir().join(format!("bench-mqtt-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("bad.json");
        std::fs::write(&path, "{}").expect("write");
        let err = read_baseline(&path).expect_err("not a report");
        assert!(err.contains("no bench_mqtt report"), "{err}");
        assert!(read_baseline(&dir.join("missing.json")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
