//! The work-agent binary as a child process of a test.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

/// Names the agent binary (set by `e2e/scripts/run-integration.sh`).
pub const AGENT_BIN_ENV: &str = "WORK_AGENT_BIN";
/// Variables of the test environment that the spawned agent must not inherit.
/// The agent's arguments: anything that lists strings.
pub trait Args: IntoIterator<Item: AsRef<OsStr>> {}
impl<T: IntoIterator<Item: AsRef<OsStr>>> Args for T {}

/// Environment variables for the agent: `(name, value)` pairs.
pub trait Envs: IntoIterator<Item = (Self::Name, Self::Value)> {
    /// A variable's name.
    type Name: AsRef<OsStr>;
    /// A variable's value.
    type Value: AsRef<OsStr>;
}
impl<T, K: AsRef<OsStr>, V: AsRef<OsStr>> Envs for T
where
    T: IntoIterator<Item = (K, V)>,
{
    type Name = K;
    type Value = V;
}

const HARNESS_ENV: [&str; 3] = [
    crate::HUB_KUBECONFIG_ENV,
    crate::HUB_UPSTREAM_KUBECONFIG_ENV,
    crate::SPOKE_KUBECONFIG_ENV,
];
/// How long [`AgentProcess::stop`] waits after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A running `work-agent`, logging to a file; killed when dropped.
pub struct AgentProcess {
    child: Child,
    log_path: PathBuf,
    pid_path: PathBuf,
    status: Option<ExitStatus>,
}

impl AgentProcess {
    /// Spawns `$WORK_AGENT_BIN args...`; panics with the reason if it cannot be started.
    pub fn start(args: impl Args) -> Self {
        Self::start_with_env(args, std::iter::empty::<(&str, &str)>())
    }

    /// Like [`start`](Self::start) with extra environment variables.
    pub fn start_with_env(args: impl Args, envs: impl Envs) -> Self {
        match Self::try_start(args, envs) {
            Ok(p) => p,
            Err(e) => panic!("starting the work-agent: {e}"),
        }
    }

    /// Fallible form of [`start_with_env`](Self::start_with_env).
    pub fn try_start(args: impl Args, envs: impl Envs) -> Result<Self, Error> {
        Self::spawn(agent_bin()?, args, envs)
    }

    /// Like [`try_start`](Self::try_start), but through a file named `name` (a hard link to the
    /// agent binary, or a copy), as a container image that installs the binary under another
    /// name (upstream's `/work`) runs it.
    pub fn try_start_as(name: &str, args: impl Args, envs: impl Envs) -> Result<Self, Error> {
        Self::spawn(named_agent_bin(name)?, args, envs)
    }

    /// Like [`try_start`](Self::try_start) with a given binary instead of `$WORK_AGENT_BIN`
    /// (the benchmark runs any build of the agent).
    pub fn try_start_binary(bin: &Path, args: impl Args, envs: impl Envs) -> Result<Self, Error> {
        // The reaper compares /proc/PID/exe with this path, so store it canonical.
        let bin = std::fs::canonicalize(bin).map_err(|e| Error::io(bin, e))?;
        Self::spawn(bin, args, envs)
    }

    fn spawn(bin: PathBuf, args: impl Args, envs: impl Envs) -> Result<Self, Error> {
        let dir = crate::run_dir().join("agent-logs");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let name = crate::unique_name(&current_test_name());
        let log_path = dir.join(format!("{name}.log"));
        let pid_path = dir.join(format!("{name}.pid"));
        let log = File::create(&log_path).map_err(|e| Error::io(&log_path, e))?;
        let log_err = log.try_clone().map_err(|e| Error::io(&log_path, e))?;
        let child = command(&bin, args, envs)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| Error::io(&bin, e))?;
        // with-cluster.sh reaps agents a hard-killed test left behind, checking the binary. It
        // leaves alone an agent whose parent is still this test process: that test still runs
        // (perhaps in another run sharing the directory) and will stop its agent itself.
        let pid_line = format!("{} {} {}\n", child.id(), std::process::id(), bin.display());
        std::fs::write(&pid_path, pid_line).map_err(|e| Error::io(&pid_path, e))?;
        Ok(Self {
            child,
            log_path,
            pid_path,
            status: None,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The file that receives the agent's stdout and stderr (name it in failure messages).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The log so far (lossy UTF-8; empty if unreadable).
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Whether the process still runs; records its exit status once it has ended.
    pub fn is_running(&mut self) -> bool {
        if self.status.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.status = Some(status);
                false
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// The exit status, if the process has ended.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.is_running();
        self.status
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if self.is_running() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
        let _ = std::fs::remove_file(&self.pid_path);
    }

    /// SIGTERM (graceful shutdown), then SIGKILL if it has not exited within 10 s.
    /// Returns the exit status.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        if self.is_running() {
            self.signal(libc::SIGTERM);
            let deadline = Instant::now() + STOP_GRACE;
            while self.is_running() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.kill();
        self.status
    }

    /// Sends a signal (for tests of signal handling). Does nothing once the process has ended.
    pub fn signal(&mut self, signal: i32) {
        if !self.is_running() {
            return;
        }
        match i32::try_from(self.child.id()) {
            // SAFETY: kill(2) has no memory-safety preconditions; the pid is our unreaped child,
            // so it cannot have been recycled for another process.
            Ok(pid) => unsafe {
                libc::kill(pid, signal);
            },
            Err(_) => {
                let _ = self.child.kill();
            }
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The agent's command line and environment.
fn command(bin: &Path, args: impl Args, envs: impl Envs) -> Command {
    let mut cmd = Command::new(bin);
    // The harness's kubeconfig variables share their names with the agent's env-backed flags;
    // inherited, they would silently fill in any flag a test left out. Explicit `envs` still apply.
    for var in HARNESS_ENV {
        cmd.env_remove(var);
    }
    // Debouncing is for efficiency only: every test runs without it, so that no ordering or
    // ownership decision can rest on it. A test may still set it through `envs`.
    cmd.env(RECONCILE_DEBOUNCE_ENV, "0s");
    cmd.args(args).envs(envs);
    cmd
}

/// The agent's reconcile debounce variable (`--reconcile-debounce`).
const RECONCILE_DEBOUNCE_ENV: &str = "WORK_AGENT_RECONCILE_DEBOUNCE";

fn agent_bin() -> Result<PathBuf, Error> {
    match std::env::var_os(AGENT_BIN_ENV) {
        Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
        _ => Err(Error::MissingEnv {
            var: AGENT_BIN_ENV.into(),
            hint: "run the integration tests through `make integration` or `make test` \
                   (e2e/scripts/run-integration.sh builds the agent and sets it)"
                .into(),
        }),
    }
}

/// The agent binary under another file name: `<run dir>/bin/<name>`, refreshed from
/// `$WORK_AGENT_BIN` when that is newer. Under a lock-free rename so parallel tests never see a
/// half-written file.
fn named_agent_bin(name: &str) -> Result<PathBuf, Error> {
    let source = agent_bin()?;
    let dir = crate::run_dir().join("bin");
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let target = dir.join(name);
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if modified(&target).is_some() && modified(&target) >= modified(&source) {
        return Ok(target);
    }
    let staging = dir.join(format!(".{name}.{}", std::process::id()));
    let _ = std::fs::remove_file(&staging);
    if std::fs::hard_link(&source, &staging).is_err() {
        std::fs::copy(&source, &staging).map_err(|e| Error::io(&staging, e))?;
    }
    std::fs::rename(&staging, &target).map_err(|e| Error::io(&target, e))?;
    Ok(target)
}

/// libtest names each test's thread after the test; that makes log files easy to match.
fn current_test_name() -> String {
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("agent");
    let short = name.rsplit("::").next().unwrap_or(name);
    format!("agent-{short}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harness_kubeconfig_variables_are_not_inherited_unless_given() {
        let cmd = command(
            Path::new("/bin/agent"),
            ["run"],
            [(crate::HUB_KUBECONFIG_ENV, "/explicit")],
        );
        let envs: Vec<(String, Option<String>)> = cmd
            .get_envs()
            .map(|(k, v)| {
                let v = v.map(|v| v.to_string_lossy().into_owned());
                (k.to_string_lossy().into_owned(), v)
            })
            .collect();
        let get = |k: &str| {
            envs.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            get(crate::HUB_KUBECONFIG_ENV),
            Some(Some("/explicit".into()))
        );
        assert_eq!(get(crate::SPOKE_KUBECONFIG_ENV), Some(None));
        assert_eq!(get(crate::HUB_UPSTREAM_KUBECONFIG_ENV), Some(None));
        let args: Vec<_> = cmd.get_args().collect();
        assert_eq!(args, ["run"]);
    }

    #[test]
    fn log_name_comes_from_the_test_thread() {
        assert_eq!(
            current_test_name(),
            "agent-log_name_comes_from_the_test_thread"
        );
    }
}
