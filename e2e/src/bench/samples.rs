//! The agent's resident set and CPU time over a run: sampled every [`SAMPLE_EVERY`], by phase,
//! and written as `OUT_DIR/LABEL-rss.csv` (`seconds,phase,pid,vm_rss_mib,rss_anon_mib,cpu_seconds`),
//! the file `e2e/scripts/plot-scale.py` draws. Both benchmarks (`bench_agent`, `bench_mqtt`)
//! write it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::system::{self, ProcessSample};

/// How often the agent is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// The CSV's header line.
pub const CSV_HEADER: &str = "seconds,phase,pid,vm_rss_mib,rss_anon_mib,cpu_seconds";

/// One sample of the agent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    /// Seconds since the run started.
    pub seconds: f64,
    /// The phase the run was in.
    pub phase: &'static str,
    /// The agent's process id (a restart starts a new one).
    pub pid: u32,
    /// Its /proc figures.
    pub sample: ProcessSample,
}

/// Samples whichever agent process the run names ([`Sampler::watch`]) in the phase it names
/// ([`Sampler::phase`]); shared between the run and [`Sampler::run`], which samples beside it.
#[derive(Debug)]
pub struct Sampler {
    started: Instant,
    /// The agent's pid; 0 while none runs.
    pid: AtomicU32,
    phase: Mutex<&'static str>,
    rows: Mutex<Vec<Row>>,
}

impl Sampler {
    /// A sampler whose seconds count from `started`, in the phase `start`, with no agent yet.
    pub fn new(started: Instant) -> Self {
        Self {
            started,
            pid: AtomicU32::new(0),
            phase: Mutex::new("start"),
            rows: Mutex::new(Vec::new()),
        }
    }

    /// The agent process to sample from now on (`None`: none runs).
    pub fn watch(&self, pid: Option<u32>) {
        self.pid.store(pid.unwrap_or(0), Ordering::SeqCst);
    }

    /// Names the phase the following samples belong to.
    pub fn phase(&self, phase: &'static str) {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner()) = phase;
    }

    /// Adds a sample at `seconds` (after the start) of process `pid` in the current phase.
    pub fn record(&self, seconds: f64, pid: u32, sample: ProcessSample) {
        let phase = *self.phase.lock().unwrap_or_else(|p| p.into_inner());
        self.rows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Row {
                seconds,
                phase,
                pid,
                sample,
            });
    }

    /// Samples the watched agent now, if one runs.
    fn sample_now(&self) {
        let pid = self.pid.load(Ordering::SeqCst);
        if pid == 0 {
            return;
        }
        if let Some(sample) = system::process_sample(pid) {
            self.record(self.started.elapsed().as_secs_f64(), pid, sample);
        }
    }

    /// Samples every [`SAMPLE_EVERY`] for as long as it is polled (select it beside the run).
    pub async fn run(&self) -> std::convert::Infallible {
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        loop {
            tick.tick().await;
            self.sample_now();
        }
    }

    /// The samples so far, oldest first.
    pub fn rows(&self) -> Vec<Row> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Writes the samples to [`csv_path`] (also after a failed run: what was sampled is still
    /// worth a look); the path written.
    pub fn write(&self, out_dir: &Path, label: &str) -> Result<PathBuf, String> {
        let path = csv_path(out_dir, label);
        std::fs::create_dir_all(out_dir)
            .and_then(|()| std::fs::write(&path, csv(&self.rows())))
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(path)
    }
}

/// Where a run labelled `label` writes its samples.
pub fn csv_path(out_dir: &Path, label: &str) -> PathBuf {
    out_dir.join(csv_name(label))
}

/// The file name of a run's samples (as reports name it).
pub fn csv_name(label: &str) -> String {
    format!("{label}-rss.csv")
}

/// The samples as CSV, header first; a figure /proc did not give is left empty.
pub fn csv(rows: &[Row]) -> String {
    let opt = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_default();
    let mut out = format!("{CSV_HEADER}\n");
    for r in rows {
        out.push_str(&format!(
            "{:.1},{},{},{:.2},{},{}\n",
            r.seconds,
            r.phase,
            r.pid,
            r.sample.rss_mib,
            opt(r.sample.rss_anon_mib),
            opt(r.sample.cpu_seconds)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rss: f64, anon: Option<f64>, cpu: Option<f64>) -> ProcessSample {
        ProcessSample {
            rss_mib: rss,
            rss_anon_mib: anon,
            cpu_seconds: cpu,
        }
    }

    #[test]
    fn rows_carry_the_phase_they_were_taken_in() {
        let s = Sampler::new(Instant::now());
        s.record(0.5, 7, sample(14.0, Some(1.25), Some(0.1)));
        s.phase("top_up");
        s.record(2.04, 7, sample(20.456, None, Some(1.0)));
        s.phase("restart");
        s.record(4.0, 8, sample(30.0, Some(16.0), None));
        assert_eq!(
            csv(&s.rows()),
            "seconds,phase,pid,vm_rss_mib,rss_anon_mib,cpu_seconds\n\
             0.5,start,7,14.00,1.25,0.10\n\
             2.0,top_up,7,20.46,,1.00\n\
             4.0,restart,8,30.00,16.00,\n"
        );
    }

    #[test]
    fn no_agent_no_sample_and_a_watched_one_is_read_from_proc() {
        let s = Sampler::new(Instant::now());
        s.sample_now();
        assert!(s.rows().is_empty());
        s.watch(Some(std::process::id()));
        s.phase("idle");
        s.sample_now();
        let rows = s.rows();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].pid, rows[0].phase), (std::process::id(), "idle"));
        assert!(rows[0].sample.rss_mib > 0.0);
        s.watch(None);
        s.sample_now();
        assert_eq!(s.rows().len(), 1);
    }

    #[test]
    fn the_csv_is_written_under_the_label() {
        let dir = std::env::temp_dir().join(format!("bench-samples-test-{}", std::process::id()));
        let s = Sampler::new(Instant::now());
        s.record(1.0, 3, sample(10.0, Some(5.0), Some(0.5)));
        let path = s.write(&dir, "run-1").expect("written");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(path, dir.join("run-1-rss.csv"));
        assert_eq!(text.lines().count(), 2);
        assert!(text.starts_with(CSV_HEADER), "{text}");
    }
}
