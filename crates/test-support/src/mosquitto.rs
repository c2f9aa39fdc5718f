//! A private MQTT 5 broker (Debian's mosquitto) for one test: its own port, config and log, so
//! tests can stop and restart it without disturbing each other. Killed when dropped.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

/// How long a broker may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The mosquitto binary: on `PATH`, else Debian's `/usr/sbin/mosquitto`.
pub fn mosquitto_bin() -> Result<PathBuf, Error> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("mosquitto"))
            .find(|p| p.is_file())
    });
    on_path
        .or_else(|| Some(PathBuf::from("/usr/sbin/mosquitto")).filter(|p| p.is_file()))
        .ok_or_else(|| {
            Error::Setup(
                "mosquitto is not installed: run `e2e/scripts/mosquitto.sh install` (as root), \
                 or `apt-get install -y mosquitto`"
                    .into(),
            )
        })
}

/// The agent's config file for `consumer` of the broker at `address`, as Maestro's chart renders
/// it (its Secret `maestro-agent-mqtt`, key `config.yaml`), for the source `maestro`.
pub fn agent_config(address: &str, consumer: &str) -> String {
    format!(
        "brokerHost: {address}\ntopics:\n  sourceEvents: sources/maestro/consumers/{consumer}/sourceevents\n  agentEvents: sources/maestro/consumers/{consumer}/agentevents\n"
    )
}

/// Kills and reaps a server process the harness started, if it runs.
pub(crate) fn stop_child(child: &mut Option<Child>) {
    if let Some(mut child) = child.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A running mosquitto on 127.0.0.1.
pub struct Broker {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Broker {
    /// Starts a broker on a free port, anonymous, without persistence, 4 MiB packets.
    pub fn start(name: &str) -> Result<Self, Error> {
        let dir = std::env::temp_dir().join(format!(
            "mosquitto-{name}-{}-{}",
            std::process::id(),
            crate::free_port()
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::Setup(format!("creating {}: {e}", dir.display())))?;
        let mut broker = Self {
            port: crate::free_port(),
            dir,
            child: None,
        };
        broker.restart()?;
        Ok(broker)
    }

    /// `127.0.0.1:<port>`, the config file's `brokerHost`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Writes the agent's config file for `consumer` as Maestro's chart renders it (its Secret
    /// `maestro-agent-mqtt`, key `config.yaml`) into the broker's directory as `file`; its path.
    pub fn write_agent_config(&self, consumer: &str, file: &str) -> Result<PathBuf, Error> {
        let path = self.dir.join(file);
        let text = agent_config(&self.address(), consumer);
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
        Ok(path)
    }

    /// The broker's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("mosquitto.log")
    }

    /// Stops the broker (every connection drops); [`Broker::restart`] brings it back.
    pub fn stop(&mut self) {
        stop_child(&mut self.child);
    }

    /// (Re)starts the broker on the same port and waits until it accepts connections.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.stop();
        let conf = self.dir.join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!(
                "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n\
                 max_packet_size 4194304\nlog_dest file {log}\nlog_type all\n",
                port = self.port,
                log = self.log_path().display()
            ),
        )
        .map_err(|e| Error::Setup(format!("writing {}: {e}", conf.display())))?;
        let child = Command::new(mosquitto_bin()?)
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::Setup(format!("starting mosquitto: {e}")))?;
        self.child = Some(child);
        let started = Instant::now();
        while started.elapsed() < START_TIMEOUT {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(Error::Setup(format!(
                    "mosquitto exited at start ({status}); log: {}",
                    self.log_path().display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(Error::Setup(format!(
            "mosquitto did not listen on {} within {START_TIMEOUT:?}",
            self.address()
        )))
    }

    /// The broker's directory (config and log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
