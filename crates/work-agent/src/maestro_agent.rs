//! Maestro's agent (`maestro agent`) is upstream's work agent with settings of its own: the
//! `RawFeedbackJsonString` gate always on and `--max-json-raw-length` defaulting to 1 MiB. Its
//! chart names the cluster with `--consumer-name`, a flag only Maestro's agent has. Given that
//! flag this agent takes Maestro's settings, so a cluster switched between Maestro's agent and
//! this one reports the same status feedback (raw JSON values included).

use std::collections::BTreeMap;
use std::ffi::OsStr;

/// `--max-json-raw-length` of Maestro's agent: 1 MiB.
pub const MAESTRO_MAX_JSON_RAW_LENGTH: u32 = 1024 * 1024;

/// `--max-json-raw-length` of upstream's work agent.
pub const UPSTREAM_MAX_JSON_RAW_LENGTH: u32 = 1024;

/// The flag that only Maestro's agent command line has.
const CONSUMER_NAME: &str = "--consumer-name";

/// Whether the command line `args` is Maestro's agent's (it names the cluster with
/// `--consumer-name`).
pub fn is_maestro_command_line<I, S>(args: I) -> bool
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    args.into_iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .take_while(|a| a != "--")
        .any(|a| {
            a == CONSUMER_NAME
                || a.strip_prefix(CONSUMER_NAME)
                    .is_some_and(|rest| rest.starts_with('='))
        })
}

/// The effective `RawFeedbackJsonString` gate and raw JSON length limit: Maestro's agent forces
/// the gate on and defaults the limit to 1 MiB; otherwise upstream's defaults. A limit given on
/// the command line always wins.
pub fn raw_feedback_settings(
    maestro: bool,
    gates: &BTreeMap<&'static str, bool>,
    max_json_raw_length: Option<u32>,
) -> (bool, u32) {
    let gate = maestro || gates.get("RawFeedbackJsonString").copied().unwrap_or(false);
    let default = if maestro {
        MAESTRO_MAX_JSON_RAW_LENGTH
    } else {
        UPSTREAM_MAX_JSON_RAW_LENGTH
    };
    (gate, max_json_raw_length.unwrap_or(default))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd_run::RunArgs;
    use crate::upstream_flags::parse_feature_gates;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    /// The settings a command line ends up with, as `cmd_run` derives them.
    fn settings(argv: &[&str]) -> (bool, u32) {
        let cli = Cli::try_parse_from(argv).expect("a valid command line");
        let gates = parse_feature_gates(&cli.run.upstream.feature_gates).expect("gates");
        raw_feedback_settings(
            is_maestro_command_line(argv),
            &gates,
            cli.run.upstream.max_json_raw_length,
        )
    }

    #[test]
    fn maestros_chart_command_line_gets_maestros_raw_feedback_settings() {
        let chart = [
            "work-agent",
            "--consumer-name=cluster1",
            "--workload-source-driver=mqtt",
            "--workload-source-config=/secrets/mqtt/config.yaml",
            "--cloudevents-client-id=cluster1-work-agent",
            "-v=2",
        ];
        assert_eq!(settings(&chart), (true, 1_048_576));
        let spaced = [
            "work-agent",
            "--consumer-name",
            "cluster1",
            "--hub-kubeconfig=f",
        ];
        assert_eq!(settings(&spaced), (true, 1_048_576));
        let limited = [
            "work-agent",
            "--consumer-name=cluster1",
            "--hub-kubeconfig=f",
            "--max-json-raw-length=4096",
        ];
        assert_eq!(settings(&limited), (true, 4096));
    }

    #[test]
    fn upstreams_command_line_keeps_upstreams_defaults() {
        let upstream = [
            "work-agent",
            "--spoke-cluster-name=cluster1",
            "--workload-source-driver=mqtt",
            "--workload-source-config=/secrets/mqtt/config.yaml",
            "--cloudevents-client-id=cluster1-work-agent",
        ];
        assert_eq!(settings(&upstream), (false, 1024));
        let gated = [
            "work-agent",
            "--spoke-cluster-name=cluster1",
            "--hub-kubeconfig=f",
            "--feature-gates=RawFeedbackJsonString=true",
        ];
        assert_eq!(settings(&gated), (true, 1024));
    }

    #[test]
    fn only_the_consumer_name_flag_itself_counts() {
        assert!(!is_maestro_command_line([
            "x",
            "--consumer-names=a",
            "--cluster-name=--consumer-name"
        ]));
        assert!(!is_maestro_command_line(["x", "--", "--consumer-name=a"]));
        assert!(is_maestro_command_line(["x", "--consumer-name="]));
    }
}
