//! The machine and the agent process as /proc shows them: load, CPU, resident memory.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The machine a run measured on, and how busy it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// UTC date and time of the start.
    pub date: String,
    /// Logical CPUs.
    pub cores: usize,
    /// CPU model name.
    pub cpu_model: String,
    /// 1, 5 and 15 minute load averages at the start.
    pub load_start: [f64; 3],
    /// The same at the end.
    pub load_end: [f64; 3],
    /// Highest 1-minute load average seen during the run.
    pub load_max: f64,
}

impl Machine {
    /// This machine now, at the end of a run that started at `date` under `load_start` and saw
    /// `load_max` at most.
    pub fn at_end(date: String, load_start: [f64; 3], load_max: f64) -> Self {
        Self {
            date,
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            cpu_model: machine_cpu(),
            load_start,
            load_end: loadavg(),
            load_max,
        }
    }

    /// A machine for report tests: two cores, loads `load` throughout and `load_max` at most.
    #[cfg(test)]
    pub(crate) fn example(load: [f64; 3], load_max: f64) -> Self {
        Self {
            date: "2026-01-01T00:00:00Z".into(),
            cores: 2,
            cpu_model: "cpu".into(),
            load_start: load,
            load_end: load,
            load_max,
        }
    }

    /// The report's line naming the date and the machine.
    pub fn date_line(&self) -> String {
        format!(
            "- Date: {}; machine: {} cores ({}).",
            self.date, self.cores, self.cpu_model
        )
    }
}

/// A `kB` field of /proc/PID/status (`VmRSS`, `VmHWM`), in MiB.
pub fn status_mib(status: &str, field: &str) -> Option<f64> {
    let line = status
        .lines()
        .find(|l| l.split(':').next() == Some(field))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// The three load averages of /proc/loadavg text.
pub fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut it = text.split_whitespace().map(str::parse::<f64>);
    Some([it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?])
}

/// The first `model name` of /proc/cpuinfo text.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// The current load averages (zeros if /proc is unreadable).
pub fn loadavg() -> [f64; 3] {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| parse_loadavg(&t))
        .unwrap_or_default()
}

/// The machine's CPU model, or `unknown`.
pub fn machine_cpu() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| cpu_model(&t))
        .unwrap_or_else(|| "unknown".into())
}

/// `VmRSS` and `VmHWM` of a process in MiB (`None` when it has ended).
pub fn memory_mib(pid: u32) -> Option<(f64, f64)> {
    let status =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("status")).ok()?;
    Some((status_mib(&status, "VmRSS")?, status_mib(&status, "VmHWM")?))
}

/// One sample of a process: resident set, its anonymous part, and CPU time so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessSample {
    /// `VmRSS`, MiB.
    pub rss_mib: f64,
    /// `RssAnon` (heap and stacks, not the mapped binary), MiB.
    pub rss_anon_mib: Option<f64>,
    /// User + system CPU seconds since the process started.
    pub cpu_seconds: Option<f64>,
}

/// Resident set and CPU time of a process (`None` when it has ended).
pub fn process_sample(pid: u32) -> Option<ProcessSample> {
    let dir = Path::new("/proc").join(pid.to_string());
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    let stat = std::fs::read_to_string(dir.join("stat")).ok();
    Some(ProcessSample {
        rss_mib: status_mib(&status, "VmRSS")?,
        rss_anon_mib: status_mib(&status, "RssAnon"),
        cpu_seconds: stat.as_deref().and_then(cpu_seconds_of_stat),
    })
}

/// Linux's USER_HZ: /proc/PID/stat counts CPU time in these ticks.
const CLOCK_TICKS: f64 = 100.0;

/// User + system CPU seconds of a process from its /proc/PID/stat text.
pub fn cpu_seconds_of_stat(stat: &str) -> Option<f64> {
    // The command name is in parentheses and may hold spaces: count fields after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is fields[0]; utime and stime are fields 14 and 15.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / CLOCK_TICKS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let status = "Name:\twork-agent\nVmHWM:\t   65536 kB\nVmRSS:\t   32768 kB\n";
        assert_eq!(status_mib(status, "VmRSS"), Some(32.0));
        assert_eq!(status_mib(status, "VmHWM"), Some(64.0));
        assert_eq!(status_mib(status, "VmSwap"), None);
        assert_eq!(
            parse_loadavg("4.50 3.00 1.25 3/456 789\n"),
            Some([4.5, 3.0, 1.25])
        );
        assert_eq!(parse_loadavg("x"), None);
        let cpuinfo = "processor\t: 0\nmodel name\t: Some CPU @ 2.0GHz\n";
        assert_eq!(cpu_model(cpuinfo).as_deref(), Some("Some CPU @ 2.0GHz"));
    }

    #[test]
    fn reads_this_process() {
        let (rss, hwm) = memory_mib(std::process::id()).expect("own /proc status");
        assert!(rss > 0.0 && hwm >= rss, "rss {rss} hwm {hwm}");
        let sample = process_sample(std::process::id()).expect("own /proc files");
        assert!(sample.rss_mib > 0.0 && sample.cpu_seconds.is_some());
    }
}
