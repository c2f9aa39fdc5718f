//! What the benchmark binaries (`bench_agent`, `bench_mqtt`) share on their command line: the
//! duration arguments, and writing the report they print.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

/// The agent a benchmark runs, as its command line names it.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// The agent binary (bench_mqtt: `work-agent`, or `maestro` for `--flavor maestro-go`).
    #[arg(long)]
    pub agent_bin: PathBuf,
    /// An extra agent argument (repeat for several).
    #[arg(long = "agent-arg", allow_hyphen_values = true)]
    pub agent_args: Vec<String>,
    /// Commit or version the agent was built from (for the report).
    #[arg(long, default_value = "unknown")]
    pub agent_commit: String,
}

/// `90`, `90s`, `2m` or `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (number, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 90s, 2m or 1h"))?;
    let seconds = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use s, m or h)")),
    };
    Ok(Duration::from_secs(seconds))
}

/// Prints the Markdown report `md` and writes it with the JSON `report` to
/// `OUT_DIR/LABEL.{md,json}`; says on stderr, as `tool`, where or why not. The exit code of the
/// run: a report that cannot be encoded or written fails it.
pub fn write_report(
    tool: &str,
    out_dir: &Path,
    label: &str,
    md: &str,
    report: &impl Serialize,
) -> ExitCode {
    let json = match serde_json::to_string_pretty(report) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("{tool}: encoding the report: {e}");
            return ExitCode::FAILURE;
        }
    };
    let written = std::fs::create_dir_all(out_dir)
        .and_then(|()| std::fs::write(out_dir.join(format!("{label}.md")), md))
        .and_then(|()| std::fs::write(out_dir.join(format!("{label}.json")), json + "\n"));
    println!("{md}");
    match written {
        Ok(()) => {
            eprintln!(
                "{tool}: report written to {}/{label}.{{md,json}}",
                out_dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{tool}: writing the report to {}: {e}", out_dir.display());
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("1d").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn a_report_is_written_as_markdown_and_json() {
        let dir = std::env::temp_dir().join(format!("bench-cli-test-{}", std::process::id()));
        let code = write_report("test", &dir, "r", "# R", &serde_json::json!({"n": 1}));
        assert_eq!(code, ExitCode::SUCCESS);
        let md = std::fs::read_to_string(dir.join("r.md")).unwrap_or_default();
        let json = std::fs::read_to_string(dir.join("r.json")).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(md, "# R");
        assert_eq!(json, "{\n  \"n\": 1\n}\n");
        // Under a file, no directory can be made: the run fails.
        let file = std::env::temp_dir().join(format!("bench-cli-file-{}", std::process::id()));
        std::fs::write(&file, "x").unwrap_or_default();
        let code = write_report("test", &file.join("sub"), "r", "# R", &1);
        let _ = std::fs::remove_file(&file);
        assert_eq!(code, ExitCode::FAILURE);
    }
}
