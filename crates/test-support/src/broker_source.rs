//! The Maestro-shaped source on any transport, for harnesses that run one case behind MQTT, gRPC
//! and Pub/Sub: a private mosquitto with the MQTT front end, the gRPC front end (broker and source
//! are one server there, as in Maestro and OCM), or a private fake Pub/Sub server with the Pub/Sub
//! front end; the agent's config file and command line for each.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::certs::{Ca, Leaf};
use crate::grpc_source::{GrpcSource, GrpcSourceOptions, SourceTls};
use crate::maestro::Maestro;
use crate::mosquitto::{self, Broker, Limits};
use crate::mqtt_source::MqttSource;
use crate::pubsub_source::{self, PubSubSource};

/// The source id the front ends use, Maestro's.
pub const SOURCE_ID: &str = "maestro";

/// Which wire between the source and the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Maestro over MQTT topics (mosquitto).
    Mqtt,
    /// CloudEvents over gRPC.
    Grpc,
    /// Maestro over Google Pub/Sub (Google's fake server).
    PubSub,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Mqtt => "mqtt",
            Transport::Grpc => "grpc",
            Transport::PubSub => "pubsub",
        })
    }
}

impl Transport {
    /// The agent's command line for `consumer` as each hub's deployment runs it: Maestro's
    /// chart (MQTT, Pub/Sub), the klusterlet's (gRPC); without addresses and logging, which the caller
    /// adds.
    pub fn agent_args(self, consumer: &str, config: &Path, spoke_kubeconfig: &Path) -> Vec<String> {
        let c = consumer;
        let mut args = match self {
            Transport::Mqtt | Transport::PubSub => vec![
                "agent".to_string(),
                format!("--consumer-name={c}"),
                format!("--workload-source-driver={self}"),
                format!("--kubeconfig={}", spoke_kubeconfig.display()),
                "--leader-elect=false".into(),
            ],
            Transport::Grpc => vec![
                "agent".to_string(),
                format!("--spoke-cluster-name={c}"),
                "--workload-source-driver=grpc".into(),
                "--cloudevents-client-codecs=manifestbundle".into(),
                format!("--spoke-kubeconfig={}", spoke_kubeconfig.display()),
                "--disable-leader-election".into(),
            ],
        };
        args.extend([
            format!("--workload-source-config={}", config.display()),
            format!("--cloudevents-client-id={c}-work-agent"),
        ]);
        args
    }
}

/// The source behind its front end.
pub enum BrokerSource {
    /// A private mosquitto and the MQTT front end on it.
    Mqtt {
        /// The broker.
        broker: Broker,
        /// The source, connected to it.
        source: MqttSource,
    },
    /// The gRPC front end.
    Grpc(GrpcSource),
    /// A private fake Pub/Sub server and the Pub/Sub front end on it.
    PubSub(PubSubSource),
}

impl BrokerSource {
    /// Starts the source on `transport`: for MQTT a mosquitto named after `name` first; for gRPC
    /// the server with `grpc` (its source id is set to [`SOURCE_ID`]); for Pub/Sub a fake server.
    pub async fn start(
        transport: Transport,
        name: &str,
        grpc: GrpcSourceOptions,
    ) -> Result<Self, String> {
        Self::start_limited(transport, name, grpc, Limits::default()).await
    }

    /// Starts the source as [`BrokerSource::start`], on MQTT behind a mosquitto with `limits`.
    pub async fn start_limited(
        transport: Transport,
        name: &str,
        grpc: GrpcSourceOptions,
        limits: Limits,
    ) -> Result<Self, String> {
        match transport {
            Transport::Mqtt => {
                let broker =
                    Broker::start_with(name, limits).map_err(|e| format!("mosquitto: {e}"))?;
                let source = MqttSource::connect(&broker.address(), SOURCE_ID)
                    .await
                    .map_err(|e| format!("the MQTT source: {e}"))?;
                Ok(Self::Mqtt { broker, source })
            }
            Transport::Grpc => GrpcSource::start(GrpcSourceOptions {
                source_id: SOURCE_ID.into(),
                ..grpc
            })
            .await
            .map(Self::Grpc)
            .map_err(|e| format!("the gRPC source: {e}")),
            Transport::PubSub => PubSubSource::start(SOURCE_ID)
                .await
                .map(Self::PubSub)
                .map_err(|e| format!("the Pub/Sub source: {e}")),
        }
    }

    /// Starts the source as [`BrokerSource::start`] behind TLS that requires a client
    /// certificate of `ca` (the server's own certificate is from `ca` too, for 127.0.0.1): on MQTT
    /// the mosquitto's listener for agents (the source itself connects through a plain one), on
    /// gRPC the server. Pub/Sub authenticates with tokens, not client certificates: an error.
    pub async fn start_tls(
        transport: Transport,
        name: &str,
        grpc: GrpcSourceOptions,
        ca: &Ca,
    ) -> Result<Self, String> {
        match transport {
            Transport::Mqtt => {
                let broker = Broker::start_tls_with_plain_listener(name, ca)
                    .map_err(|e| format!("mosquitto: {e}"))?;
                let plain = broker
                    .plain_address()
                    .ok_or("mosquitto has no plain listener")?;
                let source = MqttSource::connect(&plain, SOURCE_ID)
                    .await
                    .map_err(|e| format!("the MQTT source: {e}"))?;
                Ok(Self::Mqtt { broker, source })
            }
            Transport::Grpc => {
                let server = ca
                    .sign(&Leaf::server("source", &["127.0.0.1", "localhost"]))
                    .map_err(|e| format!("the source's certificate: {e}"))?;
                let tls = SourceTls {
                    cert_pem: server.cert_pem,
                    key_pem: server.key_pem,
                    client_ca_pem: Some(ca.pem().to_string()),
                };
                Self::start(
                    transport,
                    name,
                    GrpcSourceOptions {
                        tls: Some(tls),
                        ..grpc
                    },
                )
                .await
            }
            Transport::PubSub => Err("Pub/Sub takes no client certificates".into()),
        }
    }

    /// Prepares the wire for the agent of `consumer` before it starts: on Pub/Sub its
    /// subscriptions, as Maestro's agent chart creates them; nothing on MQTT and gRPC.
    pub async fn add_consumer(&self, consumer: &str) -> Result<(), String> {
        match self {
            Self::PubSub(source) => source
                .add_consumer(consumer)
                .await
                .map_err(|e| format!("the consumer's subscriptions: {e}")),
            Self::Mqtt { .. } | Self::Grpc(_) => Ok(()),
        }
    }

    /// Which transport it is on.
    pub fn transport(&self) -> Transport {
        match self {
            Self::Mqtt { .. } => Transport::Mqtt,
            Self::Grpc(_) => Transport::Grpc,
            Self::PubSub(_) => Transport::PubSub,
        }
    }

    /// The source behind the front end.
    pub fn maestro(&self) -> &Maestro {
        match self {
            Self::Mqtt { source, .. } => source,
            Self::Grpc(source) => source,
            Self::PubSub(source) => source,
        }
    }

    /// The input of the agent's hub hash: the config's `brokerHost` or `url`; "" on Pub/Sub, as
    /// upstream's config loader gives no host for it.
    pub fn address(&self) -> String {
        match self {
            Self::Mqtt { broker, .. } => broker.address(),
            Self::Grpc(source) => source.url(),
            Self::PubSub(_) => String::new(),
        }
    }

    /// The agent's config file for `consumer`: Maestro's chart's (MQTT, Pub/Sub), upstream's
    /// (gRPC).
    pub fn agent_config(&self, consumer: &str) -> String {
        match self {
            Self::Mqtt { broker, .. } => mosquitto::agent_config(&broker.address(), consumer),
            Self::Grpc(source) => format!("url: {}\n", source.url()),
            Self::PubSub(source) => pubsub_source::agent_config(&source.address(), consumer),
        }
    }

    /// Writes [`BrokerSource::agent_config`] plus `extra` lines into `dir`; the file's path.
    pub fn write_agent_config(
        &self,
        consumer: &str,
        extra: &str,
        dir: &Path,
    ) -> Result<PathBuf, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let config = dir.join(match self.transport() {
            Transport::Mqtt => "mqtt-config.yaml",
            Transport::Grpc => "grpcconfig",
            Transport::PubSub => "pubsub-config.yaml",
        });
        let text = format!("{}{extra}", self.agent_config(consumer));
        std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
        Ok(config)
    }

    /// Takes the hub away: mosquitto stopped (every connection drops), the gRPC server stopped
    /// (every stream ends, the port closes), or the fake Pub/Sub server stopped (and with it
    /// every topic, subscription and message it held). The store stays.
    pub async fn stop_hub(&mut self) {
        match self {
            Self::Mqtt { broker, .. } => broker.stop(),
            Self::Grpc(source) => source.stop().await,
            Self::PubSub(source) => source.stop_hub(),
        }
    }

    /// Brings the hub back on its port after [`BrokerSource::stop_hub`]; the MQTT and Pub/Sub
    /// sources reconnect by themselves (on Pub/Sub the consumers' subscriptions are created
    /// again first).
    pub async fn start_hub(&mut self) -> Result<(), String> {
        match self {
            Self::Mqtt { broker, .. } => broker.restart().map_err(|e| e.to_string()),
            Self::Grpc(source) => source.restart().await.map_err(|e| e.to_string()),
            Self::PubSub(source) => source.start_hub().await.map_err(|e| e.to_string()),
        }
    }
}
