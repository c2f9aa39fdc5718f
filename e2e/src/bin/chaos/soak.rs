//! Samples of the agent's memory and metrics over a run (CSV), and the RSS curve as an SVG plot.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// One sample.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// Seconds since the run started.
    pub t: f64,
    /// Agent resident set size, KiB (0 when no agent runs).
    pub rss_kib: u64,
    /// Series on /metrics (all families).
    pub series: u64,
    /// Series of the `work_agent_works` gauge (its label sets).
    pub works_series: u64,
    /// Values of the size gauges the agent exposes, by name, when present.
    pub gauges: Vec<(String, f64)>,
    /// Works the driver has live.
    pub live_works: u64,
    /// Works the driver has created so far.
    pub created: u64,
    /// Agent process id.
    pub pid: u32,
}

/// The agent's size gauges (docs/metrics.md); sampled when present.
pub const SIZE_GAUGES: &[&str] = &[
    "work_agent_watches",
    "work_agent_index_objects",
    "work_agent_resolver_cache_entries",
    "work_agent_work_states",
    "work_agent_trigger_queue_depth",
];

/// VmRSS of a process, KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

/// Fills the metric fields of a sample from a /metrics text.
pub fn read_metrics(text: &str, sample: &mut Sample) {
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        sample.series += 1;
        let name = line.split(['{', ' ']).next().unwrap_or("");
        if name == "work_agent_works" {
            sample.works_series += 1;
        }
        if SIZE_GAUGES.contains(&name) {
            let value = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            match sample.gauges.iter_mut().find(|(n, _)| n == name) {
                Some((_, v)) => *v += value,
                None => sample.gauges.push((name.to_string(), value)),
            }
        }
    }
}

/// Fetches http://127.0.0.1:port/metrics (empty on error).
pub async fn scrape(port: u16) -> String {
    let out = tokio::process::Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "5",
            &format!("http://127.0.0.1:{port}/metrics"),
        ])
        .output()
        .await;
    out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The CSV of the samples (one header line).
pub fn csv(samples: &[Sample]) -> String {
    let mut out = String::from(
        "seconds,rss_kib,metric_series,works_gauge_series,live_works,works_created,agent_pid",
    );
    for g in SIZE_GAUGES {
        let _ = write!(out, ",{g}");
    }
    out.push('\n');
    for s in samples {
        let _ = write!(
            out,
            "{:.0},{},{},{},{},{},{}",
            s.t, s.rss_kib, s.series, s.works_series, s.live_works, s.created, s.pid
        );
        for g in SIZE_GAUGES {
            match s.gauges.iter().find(|(n, _)| n == g) {
                Some((_, v)) => {
                    let _ = write!(out, ",{v}");
                }
                None => out.push(','),
            }
        }
        out.push('\n');
    }
    out
}

/// An SVG line plot of RSS (MiB) and live works over time.
pub fn svg(samples: &[Sample], title: &str) -> String {
    let (w, h, left, bottom, top, right) = (800.0, 400.0, 60.0, 40.0, 30.0, 60.0);
    let t_max = samples.iter().map(|s| s.t).fold(1.0, f64::max);
    let mib = |s: &Sample| s.rss_kib as f64 / 1024.0;
    let y_max = samples.iter().map(mib).fold(1.0, f64::max) * 1.1;
    let n_max = samples
        .iter()
        .map(|s| s.live_works as f64)
        .fold(1.0, f64::max)
        * 1.1;
    let x = |t: f64| left + (w - left - right) * t / t_max;
    let y = |v: f64, max: f64| h - bottom - (h - bottom - top) * v / max;
    let line = |f: &dyn Fn(&Sample) -> Option<(f64, f64)>| {
        samples
            .iter()
            .filter_map(f)
            .map(|(a, b)| format!("{a:.1},{b:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let rss = line(&|s| (s.rss_kib > 0).then(|| (x(s.t), y(mib(s), y_max))));
    let live = line(&|s| Some((x(s.t), y(s.live_works as f64, n_max))));
    let mut out = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{cx}" y="18" text-anchor="middle" font-size="14">{title}</text>
<line x1="{left}" y1="{yb}" x2="{xr}" y2="{yb}" stroke="black"/>
<line x1="{left}" y1="{top}" x2="{left}" y2="{yb}" stroke="black"/>
<line x1="{xr}" y1="{top}" x2="{xr}" y2="{yb}" stroke="gray"/>
<text x="{cx}" y="{xl}" text-anchor="middle">seconds</text>
<text x="14" y="{cy}" transform="rotate(-90 14 {cy})" text-anchor="middle" fill="#1f77b4">agent RSS (MiB)</text>
<text x="{rl}" y="{cy}" transform="rotate(90 {rl} {cy})" text-anchor="middle" fill="#ff7f0e">live works</text>
<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{rss}"/>
<polyline fill="none" stroke="#ff7f0e" stroke-width="1" points="{live}"/>
"##,
        cx = w / 2.0,
        cy = (h - bottom + top) / 2.0,
        yb = h - bottom,
        xr = w - right,
        xl = h - 8.0,
        rl = w - 14.0,
    );
    for i in 0..=4 {
        let f = i as f64 / 4.0;
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#1f77b4">{:.0}</text><text x="{:.1}" y="{:.1}" fill="#ff7f0e">{:.0}</text><text x="{:.1}" y="{:.1}" text-anchor="middle">{:.0}</text>"##,
            left - 4.0,
            y(y_max * f, y_max) + 4.0,
            y_max * f,
            w - right + 4.0,
            y(n_max * f, n_max) + 4.0,
            n_max * f,
            x(t_max * f),
            h - bottom + 16.0,
            t_max * f
        );
    }
    out.push_str("</svg>\n");
    out
}

/// Writes `text` to `path`, creating its directory.
pub fn write(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)
}

/// Seconds since `start`.
pub fn since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_counted_by_family() {
        let mut s = Sample::default();
        read_metrics(
            "# HELP x\nwork_agent_works{state=\"a\"} 1\nwork_agent_works{state=\"b\"} 2\nwork_agent_watches 7\nother 1\n",
            &mut s,
        );
        assert_eq!((s.series, s.works_series), (4, 2));
        assert_eq!(s.gauges, vec![("work_agent_watches".to_string(), 7.0)]);
        let text = csv(&[s.clone()]);
        assert_eq!(text.lines().count(), 2);
        assert!(svg(&[s], "t").contains("<polyline"));
    }
}
