//! The transport config files (`--workload-source-config`), as upstream reads them: keys,
//! defaults and TLS rules. Parse and validate only; a bad key is an error naming it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use regex::Regex;
use serde::Deserialize;

use crate::Error;
use crate::mqtt::topics::Topics;

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
    /// Not sdk-go's: Go's YAML reader ignores keys it does not know, so a file with it still
    /// works for OCM's and Maestro's agents.
    max_packet_size: Option<u64>,
}

/// MQTT's largest packet: the largest Remaining Length (268,435,455), the fixed header aside.
pub const MQTT_MAX_PACKET: usize = 268_435_455;
/// gRPC servers' default limit on a received message (grpc-go's 4 MiB, which OCM's and Maestro's
/// servers keep).
pub const GRPC_DEFAULT_MAX_MESSAGE: usize = 4 * 1024 * 1024;
/// Pub/Sub's limit on a publish request (Google's client library checks a message against it).
pub const PUBSUB_MAX_MESSAGE: usize = 10_000_000;

/// A size in bytes from `key`, at least 1 and at most `max`.
fn byte_limit(key: &str, value: Option<u64>, max: usize) -> Result<Option<usize>, Error> {
    value
        .map(|v| {
            usize::try_from(v)
                .ok()
                .filter(|v| (1..=max).contains(v))
                .ok_or_else(|| Error::config(key, format!("{v} is not a size of 1 to {max} bytes")))
        })
        .transpose()
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
    /// `maxPacketSize`: the largest PUBLISH packet the agent sends, in bytes, for a broker that
    /// does not say its limit in the CONNACK (the lower of the two counts when it does).
    pub max_packet_size: Option<usize>,
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
            max_packet_size: byte_limit("maxPacketSize", raw.max_packet_size, MQTT_MAX_PACKET)?,
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
    /// Not sdk-go's (its client has no such key; Go's YAML reader ignores it).
    max_send_message_size: Option<u64>,
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
    /// `maxSendMessageSize`: the largest encoded `Publish` request the agent sends, in bytes
    /// (default [`GRPC_DEFAULT_MAX_MESSAGE`], what the server takes unless told otherwise).
    pub max_send_message_size: Option<usize>,
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
            max_send_message_size: byte_limit(
                "maxSendMessageSize",
                raw.max_send_message_size,
                u32::MAX as usize,
            )?,
        })
    }

    /// Upstream's rule: TLS (1.3 only) when a token or a client certificate and key are present.
    /// A CA alone dials without TLS, as upstream does; callers should warn about it.
    pub fn uses_tls(&self) -> bool {
        self.token.is_some() || self.certs.has_certs()
    }
}

/// `topics` or `subscriptions` of the Pub/Sub config (sdk-go's `types.Topics` and
/// `types.Subscriptions`: the same four keys, full resource names).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PubSubNames {
    /// `sourceEvents`.
    #[serde(default)]
    pub source_events: String,
    /// `agentEvents`.
    #[serde(default)]
    pub agent_events: String,
    /// `sourceBroadcast`.
    #[serde(default)]
    pub source_broadcast: String,
    /// `agentBroadcast`.
    #[serde(default)]
    pub agent_broadcast: String,
}

/// A duration as Go's yaml.v2 reads a `time.Duration`: a Go duration string, or nanoseconds.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawDuration {
    Nanos(u64),
    Text(String),
}

impl RawDuration {
    fn get(&self, key: &str) -> Result<Duration, Error> {
        match self {
            Self::Nanos(n) => Ok(Duration::from_nanos(*n)),
            Self::Text(t) => go_duration(t)
                .ok_or_else(|| Error::config(key, format!("{t:?} is not a duration like 30s"))),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawPubSubKeepAlive {
    time: Option<RawDuration>,
    timeout: Option<RawDuration>,
    permit_without_stream: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawReceiveSettings {
    max_extension: Option<RawDuration>,
    max_duration_per_ack_extension: Option<RawDuration>,
    min_duration_per_ack_extension: Option<RawDuration>,
    max_outstanding_messages: Option<i64>,
    max_outstanding_bytes: Option<i64>,
    num_goroutines: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawPubSub {
    #[serde(rename = "projectID")]
    project_id: Option<String>,
    endpoint: Option<String>,
    credentials_file: Option<String>,
    topics: Option<PubSubNames>,
    subscriptions: Option<PubSubNames>,
    keepalive_settings: Option<RawPubSubKeepAlive>,
    receive_settings: Option<RawReceiveSettings>,
    #[serde(rename = "disableTLS")]
    disable_tls: Option<bool>,
    /// Not sdk-go's (Go's YAML reader ignores it).
    max_message_size: Option<u64>,
}

/// Pub/Sub's gRPC keepalive (`keepaliveSettings`); a zero `time` sends no pings (gRPC's
/// "infinity"), a zero `timeout` waits gRPC's default 20 s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PubSubKeepAlive {
    /// Ping after this long without activity (default 5 min; at least 10 s, as gRPC enforces).
    pub time: Duration,
    /// Wait this long for the ping's answer (default 20 s).
    pub timeout: Duration,
    /// Ping without active calls (default false).
    pub permit_without_stream: bool,
}

/// The subscriber's flow control (`receiveSettings`); zero or absent means the client's default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiveSettings {
    /// Longest time a message's lease is extended (read, not used: the agent acks on hand-over).
    pub max_extension: Option<Duration>,
    /// Longest ack deadline of the stream (`stream_ack_deadline_seconds`, 10 s to 600 s).
    pub max_duration_per_ack_extension: Option<Duration>,
    /// Shortest ack deadline of the stream.
    pub min_duration_per_ack_extension: Option<Duration>,
    /// Unacknowledged messages the server may hand out at once (default 1,000).
    pub max_outstanding_messages: Option<i64>,
    /// Unacknowledged bytes the server may hand out at once (default 1 GB).
    pub max_outstanding_bytes: Option<i64>,
    /// Streams per subscription upstream opens (read, not used: one stream each is enough).
    pub num_goroutines: Option<i64>,
}

/// A validated Pub/Sub config, the agent's half: it publishes to `topics.agentEvents` and
/// `topics.agentBroadcast` and pulls `subscriptions.sourceEvents` and `sourceBroadcast`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PubSubConfig {
    /// `projectID`.
    pub project_id: String,
    /// `endpoint` as written (empty: Google's global endpoint).
    pub endpoint: String,
    /// `credentialsFile`: a service account key file.
    pub credentials_file: Option<PathBuf>,
    /// The topics.
    pub topics: PubSubNames,
    /// The subscriptions.
    pub subscriptions: PubSubNames,
    /// gRPC keepalive (upstream's default: on, 5 min, 20 s).
    pub keep_alive: PubSubKeepAlive,
    /// Flow control of the subscriptions.
    pub receive: ReceiveSettings,
    /// `disableTLS`: plain HTTP/2, for an emulator or a test server (needs `endpoint`).
    pub disable_tls: bool,
    /// `maxMessageSize`: the largest encoded publish request the agent sends, in bytes (at most,
    /// and by default, Pub/Sub's [`PUBSUB_MAX_MESSAGE`]).
    pub max_message_size: Option<usize>,
}

/// sdk-go's `PubSubTopicPattern` and `PubSubSubscriptionPattern` for `project`.
fn pubsub_name_re(project: &str, subscription: bool) -> Result<Regex, Error> {
    let tail = if subscription {
        "subscriptions/(sourceevents|agentevents|sourcebroadcast|agentbroadcast)-[a-z0-9-]+"
    } else {
        "topics/(sourceevents|agentevents|sourcebroadcast|agentbroadcast)"
    };
    Regex::new(&format!("^projects/{}/{tail}$", regex::escape(project)))
        .map_err(|e| Error::config("projectID", e))
}

yaml_config!(PubSubConfig, RawPubSub, "pubsub config");

impl PubSubConfig {
    /// Validates the file's keys with sdk-go's rules; an agent's file needs the agent's two
    /// topics and two subscriptions.
    fn from_raw(raw: RawPubSub) -> Result<Self, Error> {
        let project_id = raw.project_id.unwrap_or_default();
        check_project_id(&project_id)?;
        let endpoint = raw.endpoint.unwrap_or_default();
        let disable_tls = raw.disable_tls.unwrap_or(false);
        if disable_tls && endpoint.is_empty() {
            return Err(Error::config(
                "endpoint",
                "required when disableTLS is true",
            ));
        }
        let topics = raw
            .topics
            .ok_or_else(|| Error::config("topics", "required"))?;
        let subscriptions = raw
            .subscriptions
            .ok_or_else(|| Error::config("subscriptions", "required"))?;
        for (key, value) in [
            ("topics.agentEvents", &topics.agent_events),
            ("topics.agentBroadcast", &topics.agent_broadcast),
            ("subscriptions.sourceEvents", &subscriptions.source_events),
            (
                "subscriptions.sourceBroadcast",
                &subscriptions.source_broadcast,
            ),
        ] {
            if value.is_empty() {
                return Err(Error::config(
                    key,
                    "required: an agent publishes to topics agentEvents and agentBroadcast and \
                     pulls subscriptions sourceEvents and sourceBroadcast",
                ));
            }
        }
        for (subscription, prefix, names) in [
            (false, "topics", &topics),
            (true, "subscriptions", &subscriptions),
        ] {
            let re = pubsub_name_re(&project_id, subscription)?;
            for (key, value) in [
                ("sourceEvents", &names.source_events),
                ("agentEvents", &names.agent_events),
                ("sourceBroadcast", &names.source_broadcast),
                ("agentBroadcast", &names.agent_broadcast),
            ] {
                if !value.is_empty() && !re.is_match(value) {
                    return Err(Error::config(
                        format!("{prefix}.{key}"),
                        format!("{value:?} does not match {}", re.as_str()),
                    ));
                }
            }
        }
        let keep_alive = match raw.keepalive_settings {
            // Upstream's default when the key is absent; a given block replaces it whole.
            None => PubSubKeepAlive {
                time: Duration::from_secs(300),
                timeout: Duration::from_secs(20),
                permit_without_stream: false,
            },
            Some(k) => PubSubKeepAlive {
                time: opt_duration("keepaliveSettings.time", k.time.as_ref())?
                    .unwrap_or(Duration::ZERO),
                timeout: opt_duration("keepaliveSettings.timeout", k.timeout.as_ref())?
                    .filter(|t| !t.is_zero())
                    .unwrap_or(Duration::from_secs(20)),
                permit_without_stream: k.permit_without_stream.unwrap_or(false),
            },
        };
        let receive = match raw.receive_settings {
            None => ReceiveSettings::default(),
            Some(r) => {
                // Upstream takes only positive values; zero or less keeps the default.
                let positive = |v: Option<i64>| v.filter(|n| *n > 0);
                let dur = |key: &str, v: Option<&RawDuration>| {
                    opt_duration(key, v).map(|d| d.filter(|d| !d.is_zero()))
                };
                ReceiveSettings {
                    max_extension: dur("receiveSettings.maxExtension", r.max_extension.as_ref())?,
                    max_duration_per_ack_extension: dur(
                        "receiveSettings.maxDurationPerAckExtension",
                        r.max_duration_per_ack_extension.as_ref(),
                    )?,
                    min_duration_per_ack_extension: dur(
                        "receiveSettings.minDurationPerAckExtension",
                        r.min_duration_per_ack_extension.as_ref(),
                    )?,
                    max_outstanding_messages: positive(r.max_outstanding_messages),
                    max_outstanding_bytes: positive(r.max_outstanding_bytes),
                    num_goroutines: positive(r.num_goroutines),
                }
            }
        };
        Ok(Self {
            project_id,
            endpoint,
            credentials_file: raw
                .credentials_file
                .filter(|f| !f.is_empty())
                .map(PathBuf::from),
            topics,
            subscriptions,
            keep_alive,
            receive,
            disable_tls,
            max_message_size: byte_limit(
                "maxMessageSize",
                raw.max_message_size,
                PUBSUB_MAX_MESSAGE,
            )?,
        })
    }
}

fn opt_duration(key: &str, v: Option<&RawDuration>) -> Result<Option<Duration>, Error> {
    v.map(|d| d.get(key)).transpose()
}

/// sdk-go's `validateProjectID`: 6 to 30 characters, lowercase letters, digits and hyphens,
/// starting with a letter and not ending with a hyphen.
fn check_project_id(id: &str) -> Result<(), Error> {
    if id.is_empty() {
        return Err(Error::config("projectID", "required"));
    }
    if !(6..=30).contains(&id.len()) {
        return Err(Error::config(
            "projectID",
            format!("must be 6-30 characters long, got {} characters", id.len()),
        ));
    }
    let first_ok = id.starts_with(|c: char| c.is_ascii_lowercase());
    let last_ok = !id.ends_with('-');
    let chars_ok = id
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !(first_ok && last_ok && chars_ok) {
        return Err(Error::config(
            "projectID",
            format!(
                "{id:?} must start with a lowercase letter, contain only lowercase letters, \
                 digits and hyphens, and not end with a hyphen"
            ),
        ));
    }
    Ok(())
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

    /// The ceilings' keys are optional (old files lack them), sizes in bytes within the wire's
    /// own limit; a bad one is an error naming the key.
    #[test]
    fn ceiling_keys() {
        let mqtt = |extra: &str| MqttConfig::parse(&format!("{MAESTRO}{extra}"));
        assert_eq!(mqtt("").expect("old file").max_packet_size, None);
        let c = mqtt("maxPacketSize: 131072\n").expect("parses");
        assert_eq!(c.max_packet_size, Some(131_072));
        for bad in ["0", "268435456", "-1", "big"] {
            let e = mqtt(&format!("maxPacketSize: {bad}\n")).expect_err(bad);
            assert!(e.to_string().contains("maxPacketSize"), "{bad}: {e}");
        }
        let grpc = |extra: &str| GrpcConfig::parse(&format!("url: a:1\n{extra}"));
        assert_eq!(grpc("").expect("old file").max_send_message_size, None);
        let c = grpc("maxSendMessageSize: 1048576\n").expect("parses");
        assert_eq!(c.max_send_message_size, Some(1_048_576));
        assert_grpc_refused("url: a:1\nmaxSendMessageSize: 0\n", "maxSendMessageSize");
        let pubsub = |extra: &str| PubSubConfig::parse(&format!("{PUBSUB}{extra}"));
        assert_eq!(pubsub("").expect("old file").max_message_size, None);
        let c = pubsub("maxMessageSize: 1000000\n").expect("parses");
        assert_eq!(c.max_message_size, Some(1_000_000));
        let e = pubsub("maxMessageSize: 10000001\n").expect_err("over Pub/Sub's limit");
        assert!(
            e.to_string().contains("maxMessageSize") && e.to_string().contains("10000000"),
            "{e}"
        );
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

    /// The agent's file as Maestro's agent chart writes it for the Pub/Sub emulator.
    const PUBSUB: &str = "projectID: maestro-test\nendpoint: localhost:8085\ndisableTLS: true\ntopics:\n  agentEvents: projects/maestro-test/topics/agentevents\n  agentBroadcast: projects/maestro-test/topics/agentbroadcast\nsubscriptions:\n  sourceEvents: projects/maestro-test/subscriptions/sourceevents-cluster1\n  sourceBroadcast: projects/maestro-test/subscriptions/sourcebroadcast-cluster1\n";

    #[test]
    fn pubsub_config_as_maestros_chart_writes_it() {
        let c = PubSubConfig::parse(PUBSUB).expect("parses");
        assert_eq!(c.project_id, "maestro-test");
        assert_eq!(c.endpoint, "localhost:8085");
        assert!(c.disable_tls);
        assert_eq!(c.credentials_file, None);
        assert_eq!(
            c.subscriptions.source_broadcast,
            "projects/maestro-test/subscriptions/sourcebroadcast-cluster1"
        );
        assert_eq!(
            c.topics.agent_events,
            "projects/maestro-test/topics/agentevents"
        );
        assert_eq!(
            c.keep_alive,
            PubSubKeepAlive {
                time: Duration::from_secs(300),
                timeout: Duration::from_secs(20),
                permit_without_stream: false
            },
            "upstream's default keepalive"
        );
        assert_eq!(c.receive, ReceiveSettings::default());
        // JSON, as Maestro's Makefile writes its file, is YAML too.
        let json = r#"{"projectID":"maestro-test","endpoint":"localhost:8085","disableTLS":true,"credentialsFile":"/secrets/pubsub/credentials.json","topics":{"agentEvents":"projects/maestro-test/topics/agentevents","agentBroadcast":"projects/maestro-test/topics/agentbroadcast"},"subscriptions":{"sourceEvents":"projects/maestro-test/subscriptions/sourceevents-c1","sourceBroadcast":"projects/maestro-test/subscriptions/sourcebroadcast-c1"}}"#;
        let c = PubSubConfig::parse(json).expect("json");
        assert_eq!(
            c.credentials_file.as_deref(),
            Some(Path::new("/secrets/pubsub/credentials.json"))
        );
    }

    #[test]
    fn pubsub_keepalive_and_receive_settings() {
        let c = PubSubConfig::parse(&format!(
            "{PUBSUB}keepaliveSettings:\n  time: 1m\n  permitWithoutStream: true\nreceiveSettings:\n  maxOutstandingMessages: 10\n  maxOutstandingBytes: 0\n  maxDurationPerAckExtension: 30s\n  maxExtension: 600000000000\n  numGoroutines: 2\n"
        ))
        .expect("parses");
        assert_eq!(
            c.keep_alive,
            PubSubKeepAlive {
                time: Duration::from_secs(60),
                timeout: Duration::from_secs(20),
                permit_without_stream: true
            }
        );
        assert_eq!(c.receive.max_outstanding_messages, Some(10));
        assert_eq!(c.receive.max_outstanding_bytes, None, "0 keeps the default");
        assert_eq!(
            c.receive.max_duration_per_ack_extension,
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            c.receive.max_extension,
            Some(Duration::from_secs(600)),
            "an integer is nanoseconds, as yaml.v2 reads a time.Duration"
        );
        assert_eq!(c.receive.num_goroutines, Some(2));
        let off =
            PubSubConfig::parse(&format!("{PUBSUB}keepaliveSettings: {{}}\n")).expect("parses");
        assert_eq!(off.keep_alive.time, Duration::ZERO, "no pings");
    }

    #[test]
    fn pubsub_errors_name_the_key() {
        let without = |line: &str| PUBSUB.replace(line, "");
        let swap = |from: &str, to: &str| PUBSUB.replace(from, to);
        for (text, key, why) in [
            (
                without("projectID: maestro-test\n"),
                "projectID",
                "required",
            ),
            (
                swap("projectID: maestro-test", "projectID: short"),
                "projectID",
                "6-30 characters",
            ),
            (
                swap("projectID: maestro-test", "projectID: Maestro-Test"),
                "projectID",
                "lowercase",
            ),
            (
                swap("projectID: maestro-test", "projectID: maestro-test-"),
                "projectID",
                "hyphen",
            ),
            (
                without("endpoint: localhost:8085\n"),
                "endpoint",
                "disableTLS",
            ),
            (
                without("  agentBroadcast: projects/maestro-test/topics/agentbroadcast\n"),
                "topics.agentBroadcast",
                "required",
            ),
            (
                without(
                    "  sourceEvents: projects/maestro-test/subscriptions/sourceevents-cluster1\n",
                ),
                "subscriptions.sourceEvents",
                "required",
            ),
            (
                swap("topics/agentevents", "topics/agent-events"),
                "topics.agentEvents",
                "does not match",
            ),
            (
                swap(
                    "projects/maestro-test/topics/agentbroadcast",
                    "projects/other-project/topics/agentbroadcast",
                ),
                "topics.agentBroadcast",
                "does not match",
            ),
            (
                swap("sourcebroadcast-cluster1", "sourcebroadcast"),
                "subscriptions.sourceBroadcast",
                "does not match",
            ),
            (
                format!("{PUBSUB}insecure: true\n"),
                "insecure",
                "unknown field",
            ),
            (
                format!("{PUBSUB}keepaliveSettings:\n  time: soon\n"),
                "keepaliveSettings",
                "",
            ),
            (
                format!("{PUBSUB}receiveSettings:\n  maxExtension: 1 hour\n"),
                "receiveSettings.maxExtension",
                "duration",
            ),
            (format!("{PUBSUB}disableTLS: maybe\n"), "disableTLS", ""),
            ("projectID: [a\n".to_string(), "pubsub config", ""),
        ] {
            let e = PubSubConfig::parse(&text).expect_err(&text).to_string();
            assert!(e.contains(key) && e.contains(why), "{text:?}: {e}");
        }
        let topics_only = "projectID: maestro-test\ntopics:\n  agentEvents: projects/maestro-test/topics/agentevents\n";
        let e = PubSubConfig::parse(topics_only).expect_err("no subscriptions");
        assert!(e.to_string().contains("subscriptions"), "{e}");
        let e = PubSubConfig::parse("projectID: maestro-test\n").expect_err("no topics");
        assert!(e.to_string().contains("topics"), "{e}");
    }
}
