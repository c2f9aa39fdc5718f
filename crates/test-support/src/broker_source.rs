//! The Maestro-shaped source on either transport, for harnesses that run one case behind MQTT
//! and behind gRPC: a private mosquitto with the MQTT front end, or the gRPC front end (broker
//! and source are one server there, as in Maestro and OCM); the agent's config file and command
//! line for each.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::grpc_source::{GrpcSource, GrpcSourceOptions};
use crate::maestro::Maestro;
use crate::mosquitto::{self, Broker};
use crate::mqtt_source::MqttSource;

/// The source id the front ends use, Maestro's.
pub const SOURCE_ID: &str = "maestro";

/// Which wire between the source and the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Maestro over MQTT topics (mosquitto).
    Mqtt,
    /// CloudEvents over gRPC.
    Grpc,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Mqtt => "mqtt",
            Transport::Grpc => "grpc",
        })
    }
}

impl Transport {
    /// The agent's command line for `consumer` as each hub's deployment runs it: Maestro's
    /// chart (MQTT), the klusterlet's (gRPC); without addresses and logging, which the caller
    /// adds.
    pub fn agent_args(self, consumer: &str, config: &Path, spoke_kubeconfig: &Path) -> Vec<String> {
        let c = consumer;
        let mut args = match self {
            Transport::Mqtt => vec![
                "agent".to_string(),
                format!("--consumer-name={c}"),
                "--workload-source-driver=mqtt".into(),
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
}

impl BrokerSource {
    /// Starts the source on `transport`: for MQTT a mosquitto named after `name` first; for gRPC
    /// the server with `grpc` (its source id is set to [`SOURCE_ID`]).
    pub async fn start(
        transport: Transport,
        name: &str,
        grpc: GrpcSourceOptions,
    ) -> Result<Self, String> {
        match transport {
            Transport::Mqtt => {
                let broker = Broker::start(name).map_err(|e| format!("mosquitto: {e}"))?;
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
        }
    }

    /// Which transport it is on.
    pub fn transport(&self) -> Transport {
        match self {
            Self::Mqtt { .. } => Transport::Mqtt,
            Self::Grpc(_) => Transport::Grpc,
        }
    }

    /// The source behind the front end.
    pub fn maestro(&self) -> &Maestro {
        match self {
            Self::Mqtt { source, .. } => source,
            Self::Grpc(source) => source,
        }
    }

    /// The `brokerHost` or `url` of the agent's config (the input of the agent's hub hash).
    pub fn address(&self) -> String {
        match self {
            Self::Mqtt { broker, .. } => broker.address(),
            Self::Grpc(source) => source.url(),
        }
    }

    /// The agent's config file for `consumer`: Maestro's chart's (MQTT), upstream's (gRPC).
    pub fn agent_config(&self, consumer: &str) -> String {
        match self {
            Self::Mqtt { broker, .. } => mosquitto::agent_config(&broker.address(), consumer),
            Self::Grpc(source) => format!("url: {}\n", source.url()),
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
        });
        let text = format!("{}{extra}", self.agent_config(consumer));
        std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
        Ok(config)
    }

    /// Takes the hub away: mosquitto stopped (every connection drops), or the gRPC server
    /// stopped (every stream ends, the port closes). The store stays.
    pub async fn stop_hub(&mut self) {
        match self {
            Self::Mqtt { broker, .. } => broker.stop(),
            Self::Grpc(source) => source.stop().await,
        }
    }

    /// Brings the hub back on its port after [`BrokerSource::stop_hub`]; the MQTT source
    /// reconnects by itself.
    pub async fn start_hub(&mut self) -> Result<(), String> {
        match self {
            Self::Mqtt { broker, .. } => broker.restart().map_err(|e| e.to_string()),
            Self::Grpc(source) => source.restart().await.map_err(|e| e.to_string()),
        }
    }
}
