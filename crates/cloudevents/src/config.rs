//! The transport config files (`--workload-source-config`), as upstream reads them: keys,
//! defaults and TLS rules. Parse and validate only; a bad key is an error naming it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;

use crate::Error;
use crate::mqtt::Topics;

/// `from_file` and `parse` of a config: YAML (or JSON) read into its raw keys `$raw`, named `$what`
/// in a decoding error, then validated by its `from_raw`.
macro_rules! yaml_config {
    ($config:ty, $raw:ty, $what:literal) => {
        impl $config {
            /// Reads and validates a YAML or JSON file.
            pub fn from_file(path: &Path) -> Result<Self, Error> {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Error::config(path.display().to_string(), e))?;
                Self::parse(&text)
            }

            /// Parses and validates YAML (JSON is YAML too).
            pub fn parse(text: &str) -> Result<Self, Error> {
                let raw: $raw =
                    serde_norway::from_str(text).map_err(|e| Error::config($what, e))?;
                Self::from_raw(raw)
            }
        }
    };
}

/// A key that must be given and not empty.
fn required(value: Option<String>, key: &str) -> Result<String, Error> {
    value
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Error::config(key, "required"))
}

/// MQTT client id for a `--cloudevents-client-id`.
pub fn mqtt_client_id(cloudevents_client_id: &str) -> Result<String, Error> {
    if cloudevents_client_id.is_empty() {
        return Err(Error::config(
            "--cloudevents-client-id",
            "required for the cloudevents drivers",
        ));
    }
    Ok(format!("{cloudevents_client_id}-client"))
}

/// PEM material given as a file or inline base64 (`*Data`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pem {
    /// Read from this file (re-read on rotation).
    File(PathBuf),
    /// Decoded from the base64 `*Data` key.
    Inline(Vec<u8>),
}

impl Pem {
    /// The PEM bytes now.
    pub fn load(&self, key: &str) -> Result<Vec<u8>, Error> {
        match self {
            Self::File(p) => {
                std::fs::read(p).map_err(|e| Error::config(key, format!("{}: {e}", p.display())))
            }
            Self::Inline(b) => Ok(b.clone()),
        }
    }
}

fn pem(
    file_key: &str,
    file: Option<String>,
    data_key: &str,
    data: Option<String>,
) -> Result<Option<Pem>, Error> {
    match (
        file.filter(|f| !f.is_empty()),
        data.filter(|d| !d.is_empty()),
    ) {
        (Some(_), Some(_)) => Err(Error::config(
            file_key,
            format!("set either {file_key} or {data_key}, not both"),
        )),
        (Some(f), None) => Ok(Some(Pem::File(PathBuf::from(f)))),
        (None, Some(d)) => base64::engine::general_purpose::STANDARD
            .decode(d.trim())
            .map(|b| Some(Pem::Inline(b)))
            .map_err(|e| Error::config(data_key, format!("not base64: {e}"))),
        (None, None) => Ok(None),
    }
}

/// TLS material of either config (`cert.CertConfig` upstream).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertConfig {
    /// CA bundle, added to the system roots.
    pub ca: Option<Pem>,
    /// Client certificate.
    pub client_cert: Option<Pem>,
    /// Client key.
    pub client_key: Option<Pem>,
}

/// A PEM given as a file path or inline data (the config's `*File` and `*Data` keys).
type PemFields = (Option<String>, Option<String>);

impl CertConfig {
    /// From the config's CA, client certificate and client key fields, each a file or data; a
    /// client certificate and key go together.
    fn from_fields(ca: PemFields, cert: PemFields, key: PemFields) -> Result<Self, Error> {
        let certs = Self {
            ca: pem("caFile", ca.0, "caData", ca.1)?,
            client_cert: pem("clientCertFile", cert.0, "clientCertData", cert.1)?,
            client_key: pem("clientKeyFile", key.0, "clientKeyData", key.1)?,
        };
        if certs.client_cert.is_some() != certs.client_key.is_some() {
            return Err(Error::config(
                "clientKeyFile",
                "a client certificate and key go together",
            ));
        }
        Ok(certs)
    }

    /// Upstream's `HasCerts`: a client certificate and key are both present.
    pub fn has_certs(&self) -> bool {
        self.client_cert.is_some() && self.client_key.is_some()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawMqtt {
    broker_host: Option<String>,
    username: Option<String>,
    password: Option<String>,
    keep_alive: Option<u64>,
    dial_timeout: Option<String>,
    #[serde(rename = "pubQoS")]
    pub_qos: Option<u8>,
    #[serde(rename = "subQoS")]
    sub_qos: Option<u8>,
    topics: Option<Topics>,
    ca_file: Option<String>,
    ca_data: Option<String>,
    client_cert_file: Option<String>,
    client_cert_data: Option<String>,
    client_key_file: Option<String>,
    client_key_data: Option<String>,
}

/// A validated MQTT config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MqttConfig {
    /// Broker host.
    pub host: String,
    /// Broker port.
    pub port: u16,
    /// `brokerHost` exactly as written (the hub hash is derived from it).
    pub broker_host: String,
    /// Basic authentication.
    pub username: Option<String>,
    /// Basic authentication.
    pub password: Option<String>,
    /// Keep-alive (default 60 s).
    pub keep_alive: Duration,
    /// Dial timeout (default 60 s).
    pub dial_timeout: Duration,
    /// QoS of publishes (default 1).
    pub pub_qos: u8,
    /// QoS of subscriptions (default 1).
    pub sub_qos: u8,
    /// The topics.
    pub topics: Topics,
    /// TLS material.
    pub certs: CertConfig,
}

yaml_config!(MqttConfig, RawMqtt, "mqtt config");

impl MqttConfig {
    /// Validates the file's keys.
    fn from_raw(raw: RawMqtt) -> Result<Self, Error> {
        let broker_host = required(raw.broker_host, "brokerHost")?;
        let (host, port) = broker_host
            .rsplit_once(':')
            .and_then(|(h, p)| {
                Some((
                    h.trim_matches(['[', ']']).to_string(),
                    p.parse::<u16>().ok()?,
                ))
            })
            .filter(|(h, _)| !h.is_empty())
            .ok_or_else(|| {
                Error::config("brokerHost", format!("{broker_host:?} is not host:port"))
            })?;
        let dial_timeout = match raw.dial_timeout.as_deref() {
            None | Some("") => Duration::from_secs(60),
            Some(d) => go_duration(d).ok_or_else(|| {
                Error::config("dialTimeout", format!("{d:?} is not a duration like 30s"))
            })?,
        };
        let qos = |key: &str, v: Option<u8>| match v.unwrap_or(1) {
            q @ 0..=2 => Ok(q),
            q => Err(Error::config(key, format!("{q} is not 0, 1 or 2"))),
        };
        let topics = raw
            .topics
            .ok_or_else(|| Error::config("topics", "required"))?;
        topics.validate()?;
        let certs = CertConfig::from_fields(
            (raw.ca_file, raw.ca_data),
            (raw.client_cert_file, raw.client_cert_data),
            (raw.client_key_file, raw.client_key_data),
        )?;
        Ok(Self {
            host,
            port,
            broker_host,
            username: raw.username.filter(|u| !u.is_empty()),
            password: raw.password.filter(|p| !p.is_empty()),
            keep_alive: Duration::from_secs(raw.keep_alive.unwrap_or(60)),
            dial_timeout,
            pub_qos: qos("pubQoS", raw.pub_qos)?,
            sub_qos: qos("subQoS", raw.sub_qos)?,
            topics,
            certs,
        })
    }

    /// Upstream's rule: TLS (1.3 only) when a client certificate and key are present; a CA alone
    /// means plain TCP.
    pub fn uses_tls(&self) -> bool {
        self.certs.has_certs()
    }
}

/// gRPC keepalive (`keepAliveConfig`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeepAlive {
    /// Whether keepalive pings are on (default off).
    pub enable: bool,
    /// Ping interval (default 30 s).
    pub time: Duration,
    /// Ping timeout (default 10 s).
    pub timeout: Duration,
    /// Ping without active streams.
    pub permit_without_stream: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawKeepAlive {
    enable: Option<bool>,
    time: Option<String>,
    timeout: Option<String>,
    permit_without_stream: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawGrpc {
    url: Option<String>,
    ca_file: Option<String>,
    ca_data: Option<String>,
    client_cert_file: Option<String>,
    client_cert_data: Option<String>,
    client_key_file: Option<String>,
    client_key_data: Option<String>,
    token: Option<String>,
    token_file: Option<String>,
    keep_alive_config: Option<RawKeepAlive>,
    server_healthiness_timeout: Option<String>,
}

/// A validated gRPC config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrpcConfig {
    /// `host:port` (the hub hash is derived from it).
    pub url: String,
    /// TLS material.
    pub certs: CertConfig,
    /// Bearer token (inline, or the file it is read from).
    pub token: Option<Pem>,
    /// Keepalive.
    pub keep_alive: KeepAlive,
    /// Reconnect after this long without a heartbeat.
    pub server_healthiness_timeout: Option<Duration>,
}

yaml_config!(GrpcConfig, RawGrpc, "grpc config");

impl GrpcConfig {
    /// Validates the file's keys.
    fn from_raw(raw: RawGrpc) -> Result<Self, Error> {
        let url = required(raw.url, "url")?;
        let certs = CertConfig::from_fields(
            (raw.ca_file, raw.ca_data),
            (raw.client_cert_file, raw.client_cert_data),
            (raw.client_key_file, raw.client_key_data),
        )?;
        // Upstream's precedence: `token` wins over `tokenFile`.
        let token = match (
            raw.token.filter(|t| !t.is_empty()),
            raw.token_file.filter(|t| !t.is_empty()),
        ) {
            (Some(t), _) => Some(Pem::Inline(t.into_bytes())),
            (None, Some(f)) => Some(Pem::File(PathBuf::from(f))),
            (None, None) => None,
        };
        if token.is_some() && certs.ca.is_none() {
            return Err(Error::config("token", "a token needs caFile or caData"));
        }
        let dur = |key: &str, v: Option<String>, default: Duration| match v.as_deref() {
            None | Some("") => Ok(default),
            Some(d) => go_duration(d)
                .ok_or_else(|| Error::config(key, format!("{d:?} is not a duration like 30s"))),
        };
        let ka = raw.keep_alive_config;
        let keep_alive = KeepAlive {
            enable: ka.as_ref().and_then(|k| k.enable).unwrap_or(false),
            permit_without_stream: ka
                .as_ref()
                .and_then(|k| k.permit_without_stream)
                .unwrap_or(false),
            time: dur(
                "keepAliveConfig.time",
                ka.as_ref().and_then(|k| k.time.clone()),
                Duration::from_secs(30),
            )?,
            timeout: dur(
                "keepAliveConfig.timeout",
                ka.and_then(|k| k.timeout),
                Duration::from_secs(10),
            )?,
        };
        let server_healthiness_timeout = match raw.server_healthiness_timeout {
            None => None,
            Some(d) => Some(dur("serverHealthinessTimeout", Some(d), Duration::ZERO)?),
        };
        Ok(Self {
            url,
            certs,
            token,
            keep_alive,
            server_healthiness_timeout,
        })
    }

    /// Upstream's rule: TLS (1.3 only) when a token or a client certificate and key are present.
    /// A CA alone dials without TLS, as upstream does; callers should warn about it.
    pub fn uses_tls(&self) -> bool {
        self.token.is_some() || self.certs.has_certs()
    }
}

/// Parses Go durations of the common forms (`90s`, `1m30s`, `500ms`, `2h`).
pub fn go_duration(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let secs = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += Duration::try_from_secs_f64(value * secs).ok()?;
        rest = &rest[u..];
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAESTRO: &str = "brokerHost: maestro-mqtt.maestro:1883\ntopics:\n  sourceEvents: sources/maestro/consumers/cluster1/sourceevents\n  agentEvents: sources/maestro/consumers/cluster1/agentevents\n";

    #[test]
    fn maestro_secret_with_defaults() {
        let c = MqttConfig::parse(MAESTRO).expect("parses");
        assert_eq!((c.host.as_str(), c.port), ("maestro-mqtt.maestro", 1883));
        assert_eq!(c.keep_alive, Duration::from_secs(60));
        assert_eq!(c.dial_timeout, Duration::from_secs(60));
        assert_eq!((c.pub_qos, c.sub_qos), (1, 1));
        assert!(!c.uses_tls());
        assert_eq!(
            mqtt_client_id("cluster1-work-agent").expect("id"),
            "cluster1-work-agent-client"
        );
        assert!(mqtt_client_id("").is_err());
    }

    #[test]
    fn tls_only_with_client_cert() {
        let ca = format!(
            "{MAESTRO}caData: {}\n",
            base64::engine::general_purpose::STANDARD.encode("PEM")
        );
        let c = MqttConfig::parse(&ca).expect("parses");
        assert_eq!(c.certs.ca, Some(Pem::Inline(b"PEM".to_vec())));
        assert!(!c.uses_tls());
        let c = MqttConfig::parse(&format!(
            "{ca}clientCertFile: /c\nclientKeyFile: /k\ndialTimeout: 1m30s\n"
        ))
        .expect("parses");
        assert!(c.uses_tls());
        assert_eq!(c.dial_timeout, Duration::from_secs(90));
    }

    #[test]
    fn errors_name_the_key() {
        for (text, key) in [
            ("topics: {}\n", "brokerHost"),
            ("brokerHost: nohost\n", "brokerHost"),
            ("broker: a:1\n", "broker"),
            ("brokerHost: a:1\n", "topics"),
            (&format!("{MAESTRO}pubQoS: 3\n"), "pubQoS"),
            (&format!("{MAESTRO}dialTimeout: soon\n"), "dialTimeout"),
            (&format!("{MAESTRO}caData: '!!'\n"), "caData"),
            (&format!("{MAESTRO}clientCertFile: /c\n"), "clientKeyFile"),
            (&format!("{MAESTRO}keepAlive: x\n"), "keepAlive"),
            (
                "brokerHost: a:1\ntopics:\n  sourceEvents: x\n  agentEvents: y\n",
                "topics.sourceEvents",
            ),
        ] {
            let e = MqttConfig::parse(text).expect_err(text).to_string();
            assert!(e.contains(key), "{text:?}: {e}");
        }
    }

    /// Asserts that `text` is refused as a gRPC config, saying `needle`.
    fn assert_grpc_refused(text: &str, needle: &str) {
        let e = GrpcConfig::parse(text).expect_err(text).to_string();
        assert!(e.contains(needle), "{text:?}: {e}");
    }

    #[test]
    fn grpc_config() {
        let c = GrpcConfig::parse("url: maestro-grpc-broker.maestro:8091\n").expect("parses");
        assert!(!c.uses_tls());
        assert!(!c.keep_alive.enable);
        assert_eq!(c.keep_alive.time, Duration::from_secs(30));
        assert_grpc_refused("url: a:1\ntoken: t\n", "token");
        let c = GrpcConfig::parse("url: a:1\ntoken: t\ncaFile: /ca\nkeepAliveConfig:\n  enable: true\n  timeout: 5s\nserverHealthinessTimeout: 20s\n")
            .expect("parses");
        assert!(c.uses_tls());
        assert_eq!(c.keep_alive.timeout, Duration::from_secs(5));
        assert_eq!(c.server_healthiness_timeout, Some(Duration::from_secs(20)));
        assert_grpc_refused("token: t\n", "url");
        let both = GrpcConfig::parse("url: a:1\ntoken: t\ntokenFile: /t\ncaFile: /ca\n")
            .expect("token wins, as upstream");
        assert_eq!(both.token, Some(Pem::Inline(b"t".to_vec())));
        assert_grpc_refused("url: a:1\nclientCertFile: /c\n", "clientKeyFile");
    }

    /// The file OCM's integration suite writes for its gRPC mode (Go's yaml.v2 marshalling of
    /// upstream's config struct: base64 data, an empty token).
    #[test]
    fn grpc_config_as_ocms_suite_writes_it() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let text = format!(
            "caData: {}\nclientCertData: {}\nclientKeyData: {}\nurl: 127.0.0.1:40123\ntoken: \"\"\n",
            b64("CA PEM"),
            b64("CERT PEM"),
            b64("KEY PEM")
        );
        let c = GrpcConfig::parse(&text).expect("parses");
        assert_eq!(c.url, "127.0.0.1:40123");
        assert!(c.token.is_none());
        assert!(c.uses_tls());
        assert_eq!(c.certs.ca, Some(Pem::Inline(b"CA PEM".to_vec())));
        let ca_only = GrpcConfig::parse("url: a:1\ncaFile: /ca\n").expect("parses");
        assert!(!ca_only.uses_tls(), "upstream dials without TLS");
    }
}
