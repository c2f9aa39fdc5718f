//! The agent under test, ours or upstream's: started with the benchmark's flags, asked for
//! readiness (and, ours, for metrics) over its listener, stopped gracefully.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use test_support::{AgentProcess, free_port};

use super::system;

/// How long an agent may take to answer its readiness probe after it was started.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Which agent runs: the command lines and probes differ, the load and the counting do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    /// This repository's `work-agent`.
    Ours,
    /// Upstream's OCM work agent (`work agent`, open-cluster-management-io/ocm).
    Ocm,
}

impl Flavor {
    /// Whether the agent counts its own API requests on `/metrics` (upstream's has no such
    /// counter, and its `/metrics` needs a token).
    pub fn has_request_counter(self) -> bool {
        self == Flavor::Ours
    }

    /// The agent's flag for its status sync period.
    pub fn sync_period_flag(self) -> &'static str {
        match self {
            Flavor::Ours => "--status-sync-period",
            Flavor::Ocm => "--status-sync-interval",
        }
    }

    /// What the report calls it.
    pub fn describe(self) -> &'static str {
        match self {
            Flavor::Ours => "ours (work-agent)",
            Flavor::Ocm => "upstream's OCM work agent",
        }
    }
}

/// A running agent and the port of its listener.
pub struct Agent {
    /// The process.
    pub process: AgentProcess,
    /// Ours: port of `/metrics`, `/healthz`, `/readyz` (HTTP). Upstream: its `--listen` port
    /// (HTTPS, self-signed; `/healthz`).
    pub port: u16,
    /// Which agent it is.
    pub flavor: Flavor,
    /// The exact command line it was started with, binary first.
    pub command: String,
}

/// Everything needed to start one agent.
pub struct AgentSpec<'a> {
    /// Ours or upstream's.
    pub flavor: Flavor,
    /// The binary.
    pub bin: &'a Path,
    /// Managed cluster name (= hub namespace).
    pub cluster: &'a str,
    /// Hub kubeconfig.
    pub hub_kubeconfig: &'a Path,
    /// Spoke kubeconfig.
    pub spoke_kubeconfig: &'a Path,
    /// Client QPS for hub and spoke.
    pub qps: f64,
    /// Client burst for hub and spoke.
    pub burst: u32,
    /// Ours: `--status-sync-period`; upstream: `--status-sync-interval`.
    pub status_sync_period: Duration,
    /// Extra arguments, last.
    pub extra: &'a [String],
}

impl AgentSpec<'_> {
    /// The agent's arguments, with its listener on `port`.
    pub fn args(&self, port: u16) -> Vec<String> {
        match self.flavor {
            Flavor::Ours => self.ours_args(port),
            Flavor::Ocm => self.ocm_args(port),
        }
    }

    /// Upstream's `work agent` as the klusterlet runs it with the kube driver, with the budgets
    /// ours gets: `--kube-api-qps/-burst` are the spoke client's, `--hub-kube-api-qps/-burst`
    /// the hub client's (pkg/common/options). The kube driver reads the hub kubeconfig from
    /// `--workload-source-config`; `--hub-kubeconfig` is given too, as the klusterlet does.
    /// `--kubeconfig` is the spoke (its controller framework's client, used for the health
    /// server's delegated auth). `--listen` puts the health server on a free port (default
    /// 8443, which another agent on this machine may hold).
    fn ocm_args(&self, port: u16) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        let hub = path(self.hub_kubeconfig);
        let spoke = path(self.spoke_kubeconfig);
        let mut args: Vec<String> = vec![
            "agent".into(),
            format!("--spoke-cluster-name={}", self.cluster),
            format!("--hub-kubeconfig={hub}"),
            "--workload-source-driver=kube".into(),
            format!("--workload-source-config={hub}"),
            format!("--kubeconfig={spoke}"),
            format!("--spoke-kubeconfig={spoke}"),
            "--disable-leader-election".into(),
            format!("--listen=127.0.0.1:{port}"),
            format!(
                "--status-sync-interval={}s",
                self.status_sync_period.as_secs()
            ),
            format!("--kube-api-qps={}", self.qps),
            format!("--kube-api-burst={}", self.burst),
            format!("--hub-kube-api-qps={}", self.qps),
            format!("--hub-kube-api-burst={}", self.burst),
        ];
        args.extend(self.extra.iter().cloned());
        args
    }

    fn ours_args(&self, port: u16) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        let mut args: Vec<String> = vec![
            "run".into(),
            "--spoke-cluster-name".into(),
            self.cluster.into(),
            "--hub-kubeconfig".into(),
            path(self.hub_kubeconfig),
            "--spoke-kubeconfig".into(),
            path(self.spoke_kubeconfig),
            "--http-address".into(),
            format!("127.0.0.1:{port}"),
            "--leader-elect=false".into(),
            // The HTTPS probe port is fixed (8443) by default: another agent on this machine
            // (a test, a soak) may hold it.
            "--health-address=127.0.0.1:0".into(),
            "--status-sync-period".into(),
            format!("{}s", self.status_sync_period.as_secs()),
        ];
        for (flag, value) in [
            ("--hub-qps", self.qps.to_string()),
            ("--spoke-qps", self.qps.to_string()),
            ("--hub-burst", self.burst.to_string()),
            ("--spoke-burst", self.burst.to_string()),
        ] {
            args.push(flag.into());
            args.push(value);
        }
        args.extend(self.extra.iter().cloned());
        args
    }
}

impl Agent {
    /// Starts the agent and waits until its readiness probe answers 200: ours `/readyz`,
    /// upstream's `/healthz` (its controller framework has no readiness endpoint; the
    /// benchmark waits for the agent's requests to stop before each phase anyway).
    pub async fn start(spec: &AgentSpec<'_>) -> Result<Agent, String> {
        let port = free_port();
        let args = spec.args(port);
        let command = std::iter::once(spec.bin.display().to_string())
            .chain(args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ");
        let process =
            AgentProcess::try_start_binary(spec.bin, args, std::iter::empty::<(&str, &str)>())
                .map_err(|e| format!("starting {}: {e}", spec.bin.display()))?;
        let mut agent = Agent {
            process,
            port,
            flavor: spec.flavor,
            command,
        };
        let started = Instant::now();
        loop {
            if !agent.process.is_running() {
                return Err(format!(
                    "the agent exited ({:?}) before it was ready; log {}:\n{}",
                    agent.process.exit_status(),
                    agent.process.log_path().display(),
                    tail(&agent.process.log(), 20)
                ));
            }
            if agent.ready().await.is_ok() {
                return Ok(agent);
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(format!(
                    "the agent did not answer its readiness probe on port {port} within {READY_TIMEOUT:?}; log {}:\n{}",
                    agent.process.log_path().display(),
                    tail(&agent.process.log(), 20)
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn ready(&self) -> Result<String, String> {
        match self.flavor {
            Flavor::Ours => http_get(self.port, "/readyz").await,
            Flavor::Ocm => https_get_insecure(self.port, "/healthz").await,
        }
    }

    /// The agent's `/metrics` text; `None` for an agent without request counters.
    pub async fn metrics(&self) -> Result<Option<String>, String> {
        if !self.flavor.has_request_counter() {
            return Ok(None);
        }
        http_get(self.port, "/metrics").await.map(Some)
    }

    /// The agent's CPU time so far (user + system), seconds.
    pub fn cpu_seconds(&self) -> Option<f64> {
        system::process_sample(self.process.pid())?.cpu_seconds
    }

    /// VmRSS and VmHWM in MiB.
    pub fn memory_mib(&self) -> Option<(f64, f64)> {
        system::memory_mib(self.process.pid())
    }

    /// SIGTERM, then SIGKILL after a grace period.
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// Kills the agent (SIGKILL): nothing of it gets the chance to tidy up, as in a crash.
    pub fn kill(&mut self) {
        self.process.kill();
    }
}

/// The last `n` lines of a log.
pub fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// GET `path` from a local HTTPS listener with a self-signed certificate (upstream's health
/// server makes its own at start, so there is no CA to check against), through `curl`: the
/// harness has no TLS client of its own. The body of a 2xx.
pub async fn https_get_insecure(port: u16, path: &str) -> Result<String, String> {
    let url = format!("https://127.0.0.1:{port}{path}");
    let out = tokio::process::Command::new("curl")
        .args(["-ksSf", "--max-time", "10", &url])
        .output()
        .await
        .map_err(|e| format!("running curl for {url}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "GET {url}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// GET `path` from a local HTTP listener (HTTP/1.0, 10 s read timeout); the body of a 200.
pub async fn http_get(port: u16, path: &str) -> Result<String, String> {
    let path = path.to_string();
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.lines().next().unwrap_or_default();
        if status.split_whitespace().nth(1) != Some("200") {
            return Err(format!("GET {path}: {status}"));
        }
        Ok(body.to_string())
    })
    .await
    .map_err(|e| e.to_string())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_flags_carry_qps_period_and_extra_arguments_last() {
        let extra = vec!["--workers".to_string(), "10".to_string()];
        let spec = AgentSpec {
            flavor: Flavor::Ours,
            bin: Path::new("/bin/agent"),
            cluster: "c1",
            hub_kubeconfig: Path::new("/h"),
            spoke_kubeconfig: Path::new("/s"),
            qps: 50.0,
            burst: 100,
            status_sync_period: Duration::from_secs(60),
            extra: &extra,
        };
        let args = spec.args(8081).join(" ");
        assert!(args.starts_with("run --spoke-cluster-name c1 --hub-kubeconfig /h --spoke-kubeconfig /s --http-address 127.0.0.1:8081"), "{args}");
        assert!(args.contains("--status-sync-period 60s"), "{args}");
        assert!(
            args.contains("--hub-qps 50 --spoke-qps 50 --hub-burst 100 --spoke-burst 100"),
            "{args}"
        );
        assert!(args.ends_with("--workers 10"), "{args}");
        assert_eq!(tail("a\nb\nc", 2), "b\nc");
    }

    #[test]
    fn upstream_gets_its_own_flags_with_the_same_budgets_and_period() {
        let extra = vec!["--workload-agent-workers=20".to_string()];
        let spec = AgentSpec {
            flavor: Flavor::Ocm,
            bin: Path::new("/ocm/work"),
            cluster: "c1",
            hub_kubeconfig: Path::new("/h"),
            spoke_kubeconfig: Path::new("/s"),
            qps: 200.0,
            burst: 400,
            status_sync_period: Duration::from_secs(3600),
            extra: &extra,
        };
        let args = spec.args(9443);
        assert_eq!(
            args,
            [
                "agent",
                "--spoke-cluster-name=c1",
                "--hub-kubeconfig=/h",
                "--workload-source-driver=kube",
                "--workload-source-config=/h",
                "--kubeconfig=/s",
                "--spoke-kubeconfig=/s",
                "--disable-leader-election",
                "--listen=127.0.0.1:9443",
                "--status-sync-interval=3600s",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--hub-kube-api-qps=200",
                "--hub-kube-api-burst=400",
                "--workload-agent-workers=20",
            ]
        );
        // None of our agent's flags leak into upstream's command line (it would refuse them).
        assert!(!args.iter().any(|a| a.starts_with("--hub-qps")
            || a.starts_with("--status-sync-period")
            || a.starts_with("--http-address")));
        // A fractional QPS is passed as such (upstream's flag is a float32).
        let spec = AgentSpec { qps: 12.5, ..spec };
        assert!(spec.args(1).contains(&"--kube-api-qps=12.5".to_string()));
    }

    #[test]
    fn only_ours_has_a_request_counter() {
        assert!(Flavor::Ours.has_request_counter());
        assert!(!Flavor::Ocm.has_request_counter());
        assert_eq!(
            serde_json::to_value(Flavor::Ocm).unwrap_or_default(),
            serde_json::json!("ocm")
        );
    }
}
