//! Keeps one agent running, as a kubelet would: restarts it after the driver's `kill -9` and after
//! any exit the driver did not cause (counted), and keeps every log for the panic check.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use test_support::AgentProcess;

use crate::world::Shared;

struct Inner {
    agent: Option<AgentProcess>,
    args: Vec<String>,
    logs: Vec<PathBuf>,
    kills: u64,
    stopped: bool,
}

/// The supervised agent.
#[derive(Clone)]
pub struct Supervisor(Arc<Mutex<Inner>>);

impl Supervisor {
    /// Starts the agent with `args` (for `$WORK_AGENT_BIN`).
    pub fn start(args: Vec<String>) -> Result<Self, test_support::Error> {
        let agent = AgentProcess::try_start(&args, std::iter::empty::<(&str, &str)>())?;
        let logs = vec![agent.log_path().to_path_buf()];
        Ok(Self(Arc::new(Mutex::new(Inner {
            agent: Some(agent),
            args,
            logs,
            kills: 0,
            stopped: false,
        }))))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// SIGKILL, then a new process.
    pub fn kill_and_restart(&self) {
        let mut inner = self.lock();
        if let Some(a) = inner.agent.as_mut() {
            a.kill();
        }
        inner.kills += 1;
        respawn(&mut inner);
    }

    /// The running agent's pid.
    pub fn pid(&self) -> Option<u32> {
        self.lock().agent.as_ref().map(AgentProcess::pid)
    }

    /// Every log file of every agent process so far.
    pub fn logs(&self) -> Vec<PathBuf> {
        self.lock().logs.clone()
    }

    /// Kills sent so far.
    pub fn kills(&self) -> u64 {
        self.lock().kills
    }

    /// Stops the agent (SIGTERM, then SIGKILL).
    pub fn stop(&self) {
        let mut inner = self.lock();
        inner.stopped = true;
        if let Some(a) = inner.agent.as_mut() {
            a.stop();
        }
    }

    /// Restarts the agent whenever it exits on its own (counted in the tally), every second.
    pub fn watch(&self, shared: Shared) {
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let mut inner = this.lock();
                if inner.stopped {
                    return;
                }
                let exited = match inner.agent.as_mut() {
                    Some(a) => a.exit_status(),
                    None => continue,
                };
                if let Some(status) = exited {
                    let log = inner.logs.last().cloned().unwrap_or_default();
                    eprintln!(
                        "[chaos] agent exited on its own ({status}); restarting (log {})",
                        log.display()
                    );
                    shared.lock().tally.agent_unexpected_exits += 1;
                    respawn(&mut inner);
                }
            }
        });
    }
}

fn respawn(inner: &mut Inner) {
    match AgentProcess::try_start(&inner.args, std::iter::empty::<(&str, &str)>()) {
        Ok(a) => {
            inner.logs.push(a.log_path().to_path_buf());
            inner.agent = Some(a);
        }
        Err(e) => eprintln!("[chaos] cannot restart the agent: {e}"),
    }
}
