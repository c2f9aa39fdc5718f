//! A private MQTT 5 broker (Debian's mosquitto) for one test: its own port, config and log, so
//! tests can stop and restart it without disturbing each other. Killed when dropped.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;
use crate::certs::{Ca, Leaf};

/// How long a broker may take to accept connections: a restart reloads the broker's persisted
/// queues (tens of thousands of messages in the benchmarks), which takes more than a few seconds
/// on a loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(60);

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
    tls: bool,
    /// A second, plain listener beside the TLS one.
    plain_port: Option<u16>,
    limits: Limits,
}

/// The broker's limits that decide what reaches a slow or large client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `max_packet_size`: the largest MQTT packet the broker takes or sends, and says in its
    /// CONNACK (0: no limit, and none said; mosquitto refuses `max_packet_size 0`, so the line
    /// is left out).
    pub max_packet_bytes: u32,
    /// `max_queued_messages`: QoS 1 messages kept per client beyond those in flight; the rest are
    /// dropped (mosquitto's default is 1,000; 0: no limit).
    pub max_queued_messages: u32,
}

impl Default for Limits {
    /// 4 MiB packets, mosquitto's default queue.
    fn default() -> Self {
        Self {
            max_packet_bytes: 4 * 1024 * 1024,
            max_queued_messages: 1000,
        }
    }
}

/// The files of a TLS listener in the broker's directory: the CA's certificate, the broker's.
const CA_FILE: &str = "ca.crt";
const CERT_FILE: &str = "server.crt";
const KEY_FILE: &str = "server.key";

impl Broker {
    /// Starts a broker on a free port, anonymous, without persistence, 4 MiB packets.
    pub fn start(name: &str) -> Result<Self, Error> {
        Self::start_with(name, Limits::default())
    }

    /// Starts a broker as [`Broker::start`] with other `limits` (a benchmark's large works).
    pub fn start_with(name: &str, limits: Limits) -> Result<Self, Error> {
        let mut broker = Self::stopped(name)?;
        broker.limits = limits;
        broker.restart()?;
        Ok(broker)
    }

    /// Starts a broker as [`Broker::start`] whose listener speaks TLS 1.3 only and requires a
    /// client certificate of `ca`, taking its CN as the user name (logged at connect as
    /// `u'<CN>'`). Its own certificate, from `ca`, names 127.0.0.1 and localhost.
    pub fn start_tls(name: &str, ca: &Ca) -> Result<Self, Error> {
        Self::start_tls_on(name, ca, None)
    }

    /// Starts a broker as [`Broker::start_tls`] with a second listener, plain and anonymous, on
    /// [`Broker::plain_address`]: for a test's source, as Maestro's server reaches its broker
    /// inside its cluster, so that only the agent's certificates are at stake.
    pub fn start_tls_with_plain_listener(name: &str, ca: &Ca) -> Result<Self, Error> {
        Self::start_tls_on(name, ca, Some(crate::free_port()))
    }

    fn start_tls_on(name: &str, ca: &Ca, plain_port: Option<u16>) -> Result<Self, Error> {
        let mut broker = Self::stopped(name)?;
        broker.plain_port = plain_port;
        let server = ca.sign(&Leaf::server("broker", &["localhost", "127.0.0.1"]))?;
        for (file, pem) in [
            (CA_FILE, ca.pem()),
            (CERT_FILE, &server.cert_pem),
            (KEY_FILE, &server.key_pem),
        ] {
            let path = broker.dir.join(file);
            std::fs::write(&path, pem).map_err(|e| Error::io(&path, e))?;
        }
        broker.tls = true;
        broker.restart()?;
        Ok(broker)
    }

    fn stopped(name: &str) -> Result<Self, Error> {
        let dir = std::env::temp_dir().join(format!(
            "mosquitto-{name}-{}-{}",
            std::process::id(),
            crate::free_port()
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::Setup(format!("creating {}: {e}", dir.display())))?;
        Ok(Self {
            port: crate::free_port(),
            dir,
            child: None,
            tls: false,
            plain_port: None,
            limits: Limits::default(),
        })
    }

    /// The port it listens on, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The certificate of the CA a TLS broker trusts (and was signed by), for clients' `caFile`.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join(CA_FILE)
    }

    /// What the broker logged so far (empty when it logged nothing yet).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// `127.0.0.1:<port>`, the config file's `brokerHost`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:<port>` of the plain listener of [`Broker::start_tls_with_plain_listener`].
    pub fn plain_address(&self) -> Option<String> {
        self.plain_port.map(|p| format!("127.0.0.1:{p}"))
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

    /// Restarts the broker as [`Broker::restart`] with other `limits` (a broker that takes
    /// smaller packets after a reconnect).
    pub fn restart_with(&mut self, limits: Limits) -> Result<(), Error> {
        self.limits = limits;
        self.restart()
    }

    /// (Re)starts the broker on the same port and waits until it accepts connections.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.stop();
        let conf = self.dir.join("mosquitto.conf");
        // The log goes to stderr, appended to the log file as it is written: mosquitto's own
        // `log_dest file` buffers, and tests read the log while the broker runs.
        let mut text = format!(
            "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n\
             max_queued_messages {queued}\nlog_dest stderr\nlog_type all\n",
            port = self.port,
            queued = self.limits.max_queued_messages,
        );
        if self.limits.max_packet_bytes > 0 {
            text.push_str(&format!(
                "max_packet_size {}\n",
                self.limits.max_packet_bytes
            ));
        }
        if self.tls {
            text.push_str(&format!(
                "cafile {}\ncertfile {}\nkeyfile {}\nrequire_certificate true\n\
                 use_identity_as_username true\ntls_version tlsv1.3\n",
                self.ca_file().display(),
                self.dir.join(CERT_FILE).display(),
                self.dir.join(KEY_FILE).display()
            ));
        }
        // After the TLS listener's settings: those apply to the listener they follow.
        if let Some(port) = self.plain_port {
            text.push_str(&format!("listener {port} 127.0.0.1\n"));
        }
        std::fs::write(&conf, text)
            .map_err(|e| Error::Setup(format!("writing {}: {e}", conf.display())))?;
        let log = self.log_path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| Error::io(&log, e))?;
        let child = Command::new(mosquitto_bin()?)
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
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
