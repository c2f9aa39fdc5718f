//! The agent under test: started with the benchmark's flags, asked for readiness and metrics
//! over its HTTP listener, stopped gracefully.

use std::path::Path;
use std::time::{Duration, Instant};

use test_support::{AgentProcess, free_port};

use super::system;

/// How long an agent may take to answer `/readyz` after it was started.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// A running agent and the port of its HTTP listener.
pub struct Agent {
    /// The process.
    pub process: AgentProcess,
    /// Port of `/metrics`, `/healthz`, `/readyz`.
    pub port: u16,
}

/// Everything needed to start one agent.
pub struct AgentSpec<'a> {
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
    /// `--status-sync-period`.
    pub status_sync_period: Duration,
    /// Extra arguments, last.
    pub extra: &'a [String],
}

impl AgentSpec<'_> {
    fn args(&self, port: u16) -> Vec<String> {
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
    /// Starts the agent and waits until `/readyz` answers 200.
    pub async fn start(spec: &AgentSpec<'_>) -> Result<Agent, String> {
        let port = free_port();
        let process = AgentProcess::try_start_binary(
            spec.bin,
            spec.args(port),
            std::iter::empty::<(&str, &str)>(),
        )
        .map_err(|e| format!("starting {}: {e}", spec.bin.display()))?;
        let mut agent = Agent { process, port };
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
            if http_get(port, "/readyz").await.is_ok() {
                return Ok(agent);
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(format!(
                    "the agent did not answer /readyz on port {port} within {READY_TIMEOUT:?}; log {}:\n{}",
                    agent.process.log_path().display(),
                    tail(&agent.process.log(), 20)
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The agent's `/metrics` text.
    pub async fn metrics(&self) -> Result<String, String> {
        http_get(self.port, "/metrics").await
    }

    /// VmRSS and VmHWM in MiB.
    pub fn memory_mib(&self) -> Option<(f64, f64)> {
        system::memory_mib(self.process.pid())
    }

    /// SIGTERM, then SIGKILL after a grace period.
    pub fn stop(&mut self) {
        self.process.stop();
    }
}

/// The last `n` lines of a log.
pub fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
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
}
