//! `work-agent run`: flags, logging, API clients, then the agent's controllers.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use cloudevents::error::one_line;
use kube::config::{KubeConfigOptions, Kubeconfig};

use std::sync::Arc;

use agent::hub::broker::BrokerHub;
use agent::hub::broker::kept_store::{ConfigMapStore, DeletionStore};
use agent::{AgentConfig, Clients};
use cloudevents::client::ClientOptions;
use cloudevents::config::{GrpcConfig, MqttConfig, PubSubConfig};
use cloudevents::grpc::{GrpcClientOptions, GrpcTransport};
use cloudevents::mqtt::Topics;
use cloudevents::mqtt::{MqttClientOptions, MqttTransport};
use cloudevents::pubsub::{PubSubClientOptions, PubSubTransport};
use cloudevents::transport::Transport;

use crate::upstream_flags::Driver;

/// Arguments of `work-agent run` (also `work agent`, upstream's command line). Every flag can also
/// be set with a `WORK_AGENT_*` variable; upstream's flag names are accepted as aliases.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Name of the managed cluster; also the hub namespace whose ManifestWorks this agent serves.
    #[arg(
        long,
        env = "WORK_AGENT_SPOKE_CLUSTER_NAME",
        visible_aliases = ["cluster-name", "consumer-name"]
    )]
    pub spoke_cluster_name: String,
    /// Kubeconfig of the hub cluster (upstream: `--workload-source-config`), re-read with the
    /// certificate files it names when it changes; with `--workload-source-driver=mqtt`, `grpc` or
    /// `pubsub`, the transport's config file (upstream's format, see docs/mqtt.md, docs/grpc.md
    /// and docs/pubsub.md).
    #[arg(
        long,
        env = "WORK_AGENT_HUB_KUBECONFIG",
        visible_alias = "workload-source-config"
    )]
    pub hub_kubeconfig: PathBuf,
    /// Kubeconfig of the managed cluster (default: in-cluster config, then `KUBECONFIG`).
    #[arg(
        long,
        env = "WORK_AGENT_SPOKE_KUBECONFIG",
        visible_alias = "kubeconfig"
    )]
    pub spoke_kubeconfig: Option<PathBuf>,
    /// Identity recorded in each AppliedManifestWork (default: the `agent-name` file of
    /// `--hub-kubeconfig-dir`, else generated from the hub hash and the cluster name).
    #[arg(long, env = "WORK_AGENT_AGENT_ID")]
    pub agent_id: Option<String>,
    /// ManifestWorks reconciled at the same time.
    #[arg(long, env = "WORK_AGENT_WORKERS", visible_alias = "workload-agent-workers", default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    pub workers: u16,
    /// Average requests per second to the hub API server.
    #[arg(long, env = "WORK_AGENT_HUB_QPS", visible_alias = "hub-kube-api-qps", default_value_t = 50.0, value_parser = positive_f64)]
    pub hub_qps: f64,
    /// Requests the hub client may send in a burst.
    #[arg(long, env = "WORK_AGENT_HUB_BURST", visible_alias = "hub-kube-api-burst", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub hub_burst: u32,
    /// Average requests per second to the spoke API server.
    #[arg(long, env = "WORK_AGENT_SPOKE_QPS", visible_alias = "kube-api-qps", default_value_t = 50.0, value_parser = positive_f64)]
    pub spoke_qps: f64,
    /// Requests the spoke client may send in a burst.
    #[arg(long, env = "WORK_AGENT_SPOKE_BURST", visible_alias = "kube-api-burst", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub spoke_burst: u32,
    /// Address of the plain HTTP server for `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, env = "WORK_AGENT_HTTP_ADDRESS", default_value = "0.0.0.0:8080")]
    pub http_address: SocketAddr,
    /// Log format.
    #[arg(long, env = "WORK_AGENT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
    /// Log level or filter (`info`, `debug`, `work_agent=debug,kube=info`, ...).
    #[arg(long, env = "WORK_AGENT_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Run only while holding a Lease (default: true in a pod, false elsewhere).
    #[arg(long, env = "WORK_AGENT_LEADER_ELECT", num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: Option<bool>,
    /// Namespace of the leader-election Lease on the spoke (default: the pod's namespace, else
    /// `open-cluster-management-agent`).
    #[arg(long, env = "WORK_AGENT_LEASE_NAMESPACE", visible_alias = "namespace")]
    pub lease_namespace: Option<String>,
    /// How often ReadOnly manifests (which the agent cannot label, so does not watch) are re-read;
    /// 10 s, as often as upstream's agent re-reads every resource (`--status-sync-interval`).
    #[arg(long, env = "WORK_AGENT_READONLY_RESYNC", default_value = "10s", value_parser = parse_duration)]
    pub readonly_resync: Duration,
    /// How often every work is reconciled even without events (a safety net; writes nothing when
    /// nothing changed).
    #[arg(long, env = "WORK_AGENT_STATUS_SYNC_PERIOD", visible_alias = "status-sync-interval", default_value = "5m", value_parser = parse_duration)]
    pub status_sync_period: Duration,
    /// How long reconcile requests of one work are held to fold the ones that follow (default:
    /// 50 ms on a Kubernetes hub, none behind a broker). Efficiency only: `0s` turns it off and
    /// every decision still holds (the integration tests run with `0s`).
    #[arg(long, env = "WORK_AGENT_RECONCILE_DEBOUNCE", value_parser = crate::upstream_flags::parse_go_duration)]
    pub reconcile_debounce: Option<Duration>,
    /// Address of the HTTPS endpoint for `/healthz` and `/readyz` (upstream's probes), with a
    /// self-signed certificate made at start; `off` disables it.
    #[arg(long, env = "WORK_AGENT_HEALTH_ADDRESS", visible_alias = "listen", default_value = "0.0.0.0:8443", value_parser = parse_optional_address)]
    pub health_address: OptionalAddress,
    /// Exit (code 0) when one of these files changes; repeatable.
    #[arg(long, env = "WORK_AGENT_TERMINATE_ON_FILES", value_delimiter = ',')]
    pub terminate_on_files: Vec<PathBuf>,
    /// How long an AppliedManifestWork whose work is gone from the hub (or that belongs to
    /// another hub) is kept before it and its resources are deleted; 100 years or more disables.
    #[arg(long, env = "WORK_AGENT_APPLIEDMANIFESTWORK_EVICTION_GRACE_PERIOD", default_value = "60m", value_parser = crate::upstream_flags::parse_go_duration)]
    pub appliedmanifestwork_eviction_grace_period: Duration,
    /// Also record a `TTLAfterFinishedExpired` Event on the hub for each work deleted by its TTL
    /// (one more hub write per deleted work; the deletion is always logged and counted).
    #[arg(long, env = "WORK_AGENT_TTL_DELETION_EVENTS", num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub ttl_deletion_events: bool,
    /// Upstream's flags that have no equivalent of our own.
    #[command(flatten)]
    pub upstream: UpstreamArgs,
}

/// Flags of upstream's `work agent` command line that are accepted for drop-in use.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct UpstreamArgs {
    /// Where works come from: `kube` (a Kubernetes hub), `mqtt` (CloudEvents over an MQTT broker,
    /// as Maestro sends them), `grpc` (CloudEvents from OCM's gRPC server or Maestro's broker) or
    /// `pubsub` (CloudEvents through Google Pub/Sub, Maestro on GCP).
    #[arg(long, default_value = crate::upstream_flags::KUBE_DRIVER)]
    pub workload_source_driver: String,
    /// The agent's CloudEvents client id (required with `mqtt`, `grpc` and `pubsub`): the source of its
    /// events; the MQTT client id is `<id>-client`.
    #[arg(long)]
    pub cloudevents_client_id: Option<String>,
    /// The mount path of the hub kubeconfig Secret: its `agent-name` file gives the agent ID when
    /// `--agent-id` is not set (as upstream's).
    #[arg(long, default_value = "/spoke/hub-kubeconfig")]
    pub hub_kubeconfig_dir: PathBuf,
    /// Accepted and ignored, as upstream (the ManifestBundle codec is the only one).
    #[arg(long, value_delimiter = ',')]
    pub cloudevents_client_codecs: Vec<String>,
    /// Longest JSON text a `RawFeedbackJsonString` status feedback value may have (default 1024;
    /// 1 MiB on Maestro's agent command line, see `maestro_agent`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_json_raw_length: Option<u32>,
    /// klog verbosity of upstream's agent: accepted; `--log-level` sets this agent's logging.
    #[arg(short = 'v', long = "v")]
    pub verbosity: Option<String>,
    /// Upstream feature gates (`Name=bool,...`; repeatable). Known gates are logged, unknown ones
    /// are an error.
    #[arg(long)]
    pub feature_gates: Vec<String>,
    /// Run without leader election (same as `--leader-elect=false`).
    #[arg(long)]
    pub disable_leader_election: bool,
    /// Leader election: how long a Lease stays valid without renewal.
    #[arg(long, value_parser = crate::upstream_flags::parse_positive_go_duration)]
    pub leader_election_lease_duration: Option<Duration>,
    /// Leader election: how long the leader keeps leading without a successful renewal.
    #[arg(long, value_parser = crate::upstream_flags::parse_positive_go_duration)]
    pub leader_election_renew_deadline: Option<Duration>,
    /// Leader election: time between attempts to acquire or renew the Lease.
    #[arg(long, value_parser = crate::upstream_flags::parse_positive_go_duration)]
    pub leader_election_retry_period: Option<Duration>,
    /// Minimum TLS version of the HTTPS endpoint: `VersionTLS12` or `VersionTLS13`.
    #[arg(long)]
    pub tls_min_version: Option<String>,
    /// Cipher suites of the HTTPS endpoint (IANA names, comma-separated).
    #[arg(long)]
    pub tls_cipher_suites: Option<String>,
    /// Whether the command line is Maestro's agent's (`--consumer-name`): set from the process
    /// arguments, it selects `maestro agent`'s raw feedback settings.
    #[arg(skip)]
    pub maestro_command_line: bool,
}

/// An address, or none (`off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionalAddress(pub Option<SocketAddr>);

fn parse_optional_address(s: &str) -> Result<OptionalAddress, String> {
    if s == "off" {
        return Ok(OptionalAddress(None));
    }
    // Go's form without a host (`:8443`) listens on every address.
    let s = match s.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => s.to_string(),
    };
    let s = s.as_str();
    s.parse()
        .map(|a| OptionalAddress(Some(a)))
        .map_err(|e| format!("{s:?} is not an address (e.g. 0.0.0.0:8443) or \"off\": {e}"))
}

/// Format of log lines.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line.
    Json,
}

const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
const DEFAULT_LEASE_NAMESPACE: &str = "open-cluster-management-agent";

/// Runs the subcommand.
pub fn main(mut args: RunArgs) -> ExitCode {
    args.upstream.maestro_command_line =
        crate::maestro_agent::is_maestro_command_line(std::env::args_os());
    if let Err(e) = init_logging(args.log_format, &args.log_level) {
        eprintln!("work-agent run: {e}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Rule evaluation runs on the blocking pool: a small bound keeps a burst of works from
        // spawning hundreds of threads (each with its stack and allocator cache).
        .max_blocking_threads(8)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("work-agent run: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        let (config, hub, spoke) = match prepare(&args).await {
            Ok(v) => v,
            Err(e) => {
                eprintln!("work-agent run: {e}");
                return ExitCode::from(2);
            }
        };
        agent::serve::terminate_on_files::spawn(&args.terminate_on_files);
        // Deletions behind a broker are kept beside the leader-election Lease.
        let store: Arc<dyn DeletionStore> = Arc::new(ConfigMapStore::new(
            spoke.clone(),
            &config.lease_namespace,
            &config.cluster_name,
        ));
        let broker = match hub {
            HubChoice::Kube(hub) => {
                let result = agent::run(config, Clients { hub, spoke }).await;
                return finish(result);
            }
            HubChoice::Mqtt(options) => start_broker(MqttTransport::new(&options), &options, store),
            HubChoice::Grpc(options) => start_broker(GrpcTransport::new(&options), &options, store),
            HubChoice::PubSub(options) => {
                start_broker(PubSubTransport::new(&options), &options, store)
            }
        };
        match broker {
            Ok(hub) => finish(agent::run_with_hub(config, hub, spoke).await),
            Err(code) => code,
        }
    })
}

/// The broker hub on `transport`, made from `options`' config file, keeping deletions in
/// `store`; exit code 2 when the
/// transport cannot start with it.
fn start_broker<C, T: Transport>(
    transport: Result<T, cloudevents::Error>,
    options: &ClientOptions<C>,
    store: Arc<dyn DeletionStore>,
) -> Result<Arc<BrokerHub>, ExitCode> {
    transport
        .map(|t| Arc::new(BrokerHub::start(t, options, store)))
        .map_err(|e| source_config_error(&e))
}

/// The exit code of the agent's run.
fn finish<E: std::fmt::Display>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "agent stopped");
            eprintln!("work-agent run: {e}");
            ExitCode::from(1)
        }
    }
}

/// A transport that cannot start with its config file: one line, exit code 2.
fn source_config_error(e: &cloudevents::Error) -> ExitCode {
    eprintln!("work-agent run: --workload-source-config: {e}");
    ExitCode::from(2)
}

/// The hub the command line chose.
pub enum HubChoice {
    /// ManifestWorks on a Kubernetes hub, through this client.
    Kube(kube::Client),
    /// CloudEvents from a source behind an MQTT broker.
    Mqtt(Box<MqttClientOptions>),
    /// CloudEvents from a gRPC source.
    Grpc(Box<GrpcClientOptions>),
    /// CloudEvents through Google Pub/Sub topics and subscriptions.
    PubSub(Box<PubSubClientOptions>),
}

/// A startup problem: reported as one line, exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The hub kubeconfig cannot be read or used.
    #[error("hub kubeconfig {path}: {reason}")]
    HubKubeconfig {
        /// File given.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The spoke kubeconfig (or in-cluster config) cannot be read or used.
    #[error("spoke kubeconfig {path}: {reason}")]
    SpokeKubeconfig {
        /// File given, or where the config was looked for.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The broker config file cannot be read or is invalid.
    #[error("workload source config {path}: {reason}")]
    SourceConfig {
        /// File given.
        path: String,
        /// What failed, naming the key.
        reason: String,
    },
    /// A flag value is invalid.
    #[error("{0}")]
    Flag(String),
    /// The log filter is invalid.
    #[error("invalid --log-level {0:?}: {1}")]
    LogLevel(String, String),
}

async fn prepare(args: &RunArgs) -> Result<(AgentConfig, HubChoice, kube::Client), SetupError> {
    if args.spoke_cluster_name.is_empty() {
        return Err(SetupError::Flag(
            "--spoke-cluster-name must not be empty".into(),
        ));
    }
    let upstream = &args.upstream;
    let driver = crate::upstream_flags::parse_driver(&upstream.workload_source_driver)
        .map_err(SetupError::Flag)?;
    let gates = crate::upstream_flags::parse_feature_gates(&upstream.feature_gates)
        .map_err(SetupError::Flag)?;
    let health_tls = agent::tls::TlsSettings::from_flags(
        upstream.tls_min_version.as_deref(),
        upstream.tls_cipher_suites.as_deref(),
    )
    .map_err(SetupError::Flag)?;
    let leader_timing = leader_timing(upstream)?;
    let (raw_feedback_json, max_json_raw_length) = crate::maestro_agent::raw_feedback_settings(
        upstream.maestro_command_line,
        &gates,
        upstream.max_json_raw_length,
    );
    let (hub, hub_server) = match driver {
        Driver::Kube => kube_hub(args).await?,
        Driver::Mqtt => mqtt_hub(args)?,
        Driver::Grpc => grpc_hub(args)?,
        Driver::PubSub => pubsub_hub(args)?,
    };
    let (spoke_config, in_cluster) = load_spoke_config(args.spoke_kubeconfig.as_deref()).await?;
    let spoke = agent::client::build(
        spoke_config,
        args.spoke_qps,
        args.spoke_burst,
        agent::client::ApiServer::Spoke,
    )
    .map_err(|reason| SetupError::SpokeKubeconfig {
        path: spoke_path_for_errors(args.spoke_kubeconfig.as_deref()),
        reason,
    })?;
    let lease_namespace = args.lease_namespace.clone().unwrap_or_else(|| {
        std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_LEASE_NAMESPACE.to_string())
    });
    let agent_name_file = crate::agent_id::read_agent_name_file(&upstream.hub_kubeconfig_dir);
    let (agent_id, agent_id_source) = crate::agent_id::choose(
        args.agent_id.as_deref(),
        agent_name_file
            .as_ref()
            .map(|(path, content)| (path.as_path(), content.as_str())),
        &work_api::hub_hash(&hub_server),
        &args.spoke_cluster_name,
    );
    let config = AgentConfig::new(args.spoke_cluster_name.clone(), agent_id, &hub_server)
        .with_generated_agent_id(agent_id_source == crate::agent_id::AgentIdSource::Generated)
        .with_workers(args.workers)
        .with_http_address(args.http_address)
        .with_leader_election(
            !upstream.disable_leader_election && args.leader_elect.unwrap_or(in_cluster),
            lease_namespace,
        )
        .with_leader_timing(leader_timing)
        .with_periods(args.readonly_resync, args.status_sync_period)
        .with_reconcile_debounce(args.reconcile_debounce)
        .with_health(args.health_address.0, health_tls)
        .with_eviction_grace_period(args.appliedmanifestwork_eviction_grace_period)
        .with_max_json_raw_length(max_json_raw_length as usize)
        .with_ttl_deletion_events(args.ttl_deletion_events)
        .with_gates(agent::config::FeatureGates {
            raw_feedback_json,
            executor_validating_caches: gates
                .get("ExecutorValidatingCaches")
                .copied()
                .unwrap_or(false),
        });
    // Logged once setup succeeded, so that a startup error stays the only line on stderr.
    tracing::info!(?gates, "feature gates (see docs/operations.md)");
    tracing::info!(agent_id = %config.agent_id, from = %agent_id_source, "agent ID");
    if upstream.maestro_command_line {
        tracing::info!(
            max_json_raw_length,
            "Maestro's agent command line (--consumer-name): RawFeedbackJsonString on, as `maestro agent`"
        );
    }
    Ok((config, hub, spoke))
}

/// The Kubernetes hub of `--hub-kubeconfig`, and its server URL as written (the hub hash's input).
async fn kube_hub(args: &RunArgs) -> Result<(HubChoice, String), SetupError> {
    let bad = |reason| SetupError::HubKubeconfig {
        path: args.hub_kubeconfig.display().to_string(),
        reason,
    };
    let (hub_config, hub_server) = load_kubeconfig(&args.hub_kubeconfig).await.map_err(bad)?;
    let hub = agent::hub::credentials::reloading_client(
        &args.hub_kubeconfig,
        hub_config,
        &hub_server,
        args.hub_qps,
        args.hub_burst,
    )
    .map_err(bad)?;
    Ok((HubChoice::Kube(hub), hub_server))
}

/// The MQTT broker of the config file, and its `brokerHost` as written (the hub hash's input,
/// as upstream's agent derives it, so both agents name AppliedManifestWorks alike).
fn mqtt_hub(args: &RunArgs) -> Result<(HubChoice, String), SetupError> {
    let client_id = cloudevents_client_id(args, "mqtt")?;
    let config =
        MqttConfig::from_file(&args.hub_kubeconfig).map_err(|e| source_config(args, &e))?;
    Topics::check_cluster(&args.spoke_cluster_name)
        .map_err(|e| SetupError::Flag(format!("--spoke-cluster-name: {e}")))?;
    let server = config.broker_host.clone();
    let options = ClientOptions::new(config, args.spoke_cluster_name.clone(), client_id);
    Ok((HubChoice::Mqtt(Box::new(options)), server))
}

/// `--cloudevents-client-id`, required with the CloudEvents drivers.
fn cloudevents_client_id(args: &RunArgs, driver: &str) -> Result<String, SetupError> {
    args.upstream
        .cloudevents_client_id
        .clone()
        .filter(|id| !id.is_empty())
        .ok_or_else(|| {
            SetupError::Flag(format!(
                "--cloudevents-client-id is required with --workload-source-driver={driver}"
            ))
        })
}

/// A config file error naming the file.
fn source_config(args: &RunArgs, e: &cloudevents::Error) -> SetupError {
    SetupError::SourceConfig {
        path: args.hub_kubeconfig.display().to_string(),
        reason: e.to_string(),
    }
}

/// The gRPC source of the config file, and its `url` as written (the hub hash's input, as
/// upstream's agent derives it).
fn grpc_hub(args: &RunArgs) -> Result<(HubChoice, String), SetupError> {
    let client_id = cloudevents_client_id(args, "grpc")?;
    let config =
        GrpcConfig::from_file(&args.hub_kubeconfig).map_err(|e| source_config(args, &e))?;
    if !config.uses_tls() && (config.certs.ca.is_some() || config.certs.client_cert.is_some()) {
        // Upstream's rule, kept for drop-in use (see docs/grpc.md): TLS only with a token or a
        // client certificate and key.
        tracing::warn!(
            url = %config.url,
            "the gRPC config has TLS material but neither a token nor a client certificate and \
             key: connecting WITHOUT TLS, as upstream's agent does; the CA is not used"
        );
    }
    let server = config.url.clone();
    let options = GrpcClientOptions::new(config, args.spoke_cluster_name.clone(), client_id);
    Ok((HubChoice::Grpc(Box::new(options)), server))
}

/// The Pub/Sub topics and subscriptions of the config file; the hub hash's input is "", as
/// upstream's config loader gives no host for Pub/Sub.
fn pubsub_hub(args: &RunArgs) -> Result<(HubChoice, String), SetupError> {
    let client_id = cloudevents_client_id(args, "pubsub")?;
    let config =
        PubSubConfig::from_file(&args.hub_kubeconfig).map_err(|e| source_config(args, &e))?;
    let options = PubSubClientOptions::new(config, args.spoke_cluster_name.clone(), client_id);
    Ok((HubChoice::PubSub(Box::new(options)), String::new()))
}

/// Upstream's `--leader-election-*` durations (defaults 137 s, 107 s, 26 s as upstream's when
/// only some are given); none given: the agent's own timing.
fn leader_timing(
    upstream: &UpstreamArgs,
) -> Result<Option<(Duration, Duration, Duration)>, SetupError> {
    let (lease, renew, retry) = (
        upstream.leader_election_lease_duration,
        upstream.leader_election_renew_deadline,
        upstream.leader_election_retry_period,
    );
    if lease.is_none() && renew.is_none() && retry.is_none() {
        return Ok(None);
    }
    let timing = (
        lease.unwrap_or(Duration::from_secs(137)),
        renew.unwrap_or(Duration::from_secs(107)),
        retry.unwrap_or(Duration::from_secs(26)),
    );
    if !(timing.0 > timing.1 && timing.1 > timing.2) {
        return Err(SetupError::Flag(format!(
            "leader election needs --leader-election-lease-duration ({:?}) > \
             --leader-election-renew-deadline ({:?}) > --leader-election-retry-period ({:?})",
            timing.0, timing.1, timing.2
        )));
    }
    Ok(Some(timing))
}

fn spoke_path_for_errors(path: Option<&Path>) -> String {
    match path {
        Some(p) => p.display().to_string(),
        None => std::env::var("KUBECONFIG").unwrap_or_else(|_| "(in-cluster)".into()),
    }
}

/// Reads a kubeconfig file; returns the client config and the server URL as written in the file
/// (the hub hash is computed from that string, like upstream does).
async fn load_kubeconfig(path: &Path) -> Result<(kube::Config, String), String> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| one_line(&e))?;
    let server = agent::hub::credentials::current_server(&kubeconfig)
        .ok_or_else(|| "no server URL for the current context".to_string())?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| one_line(&e))?;
    Ok((config, server))
}

/// The spoke config: the file given, else in-cluster, else `KUBECONFIG`/`~/.kube/config`.
/// Returns whether the agent runs in a pod (the default for leader election).
async fn load_spoke_config(path: Option<&Path>) -> Result<(kube::Config, bool), SetupError> {
    if let Some(path) = path {
        let (config, _) =
            load_kubeconfig(path)
                .await
                .map_err(|reason| SetupError::SpokeKubeconfig {
                    path: path.display().to_string(),
                    reason,
                })?;
        return Ok((config, false));
    }
    if let Ok(config) = kube::Config::incluster() {
        return Ok((config, true));
    }
    let config = kube::Config::from_kubeconfig(&KubeConfigOptions::default())
        .await
        .map_err(|e| SetupError::SpokeKubeconfig {
            path: spoke_path_for_errors(None),
            reason: one_line(&e),
        })?;
    Ok((config, false))
}

fn init_logging(format: LogFormat, level: &str) -> Result<(), SetupError> {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .map_err(|e| SetupError::LogLevel(level.to_string(), e.to_string()))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    result.map_err(|e| SetupError::Flag(format!("cannot set up logging: {e}")))
}

/// Parses `90`, `500ms`, `30s`, `5m`, `1h`, `1h30m` (a bare number is seconds); zero is refused.
fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::upstream_flags::parse_positive_go_duration(s)
}

fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    /// The `run` flags of a command line (after the program name) that must parse.
    fn run_args(args: &[&str]) -> RunArgs {
        let argv = std::iter::once("x").chain(args.iter().copied());
        Cli::try_parse_from(argv)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
            .run
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn flags_parse_and_bad_values_are_rejected() {
        let cli = Cli::try_parse_from([
            "x",
            "--spoke-cluster-name",
            "c1",
            "--hub-kubeconfig",
            "/tmp/hub",
            "--leader-elect",
            "--hub-qps",
            "5",
        ])
        .expect("valid flags");
        assert_eq!(cli.run.spoke_cluster_name, "c1");
        assert_eq!(cli.run.leader_elect, Some(true));
        assert_eq!(cli.run.hub_qps, 5.0);
        assert_eq!(cli.run.readonly_resync, Duration::from_secs(10));

        let off = Cli::try_parse_from([
            "x",
            "--spoke-cluster-name=c1",
            "--hub-kubeconfig=/tmp/hub",
            "--leader-elect=false",
        ])
        .expect("valid flags");
        assert_eq!(off.run.leader_elect, Some(false));

        for bad in [
            vec!["--hub-qps", "-1"],
            vec!["--workers", "0"],
            vec!["--log-format", "xml"],
            vec!["--readonly-resync", "soon"],
        ] {
            let mut argv = vec!["x", "--spoke-cluster-name=c1", "--hub-kubeconfig=/tmp/hub"];
            argv.extend(bad.iter().copied());
            assert!(Cli::try_parse_from(&argv).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_klusterlet_operators_flags_map_onto_ours() {
        let r = &run_args(&[
            "--cluster-name=c1",
            "--workload-source-driver=kube",
            "--workload-source-config=/spoke/hub-kubeconfig/kubeconfig",
            "--agent-id=a1",
            "--feature-gates=RawFeedbackJsonString=true",
            "--spoke-kubeconfig=/spoke/config/kubeconfig",
            "--terminate-on-files=/spoke/config/kubeconfig",
            "--terminate-on-files=/spoke/hub-kubeconfig/kubeconfig",
            "--status-sync-interval=60s",
            "--kube-api-qps=20",
            "--kube-api-burst=40",
            "--hub-kube-api-qps=30",
            "--hub-kube-api-burst=60",
            "--appliedmanifestwork-eviction-grace-period=1h30m0s",
            "--disable-leader-election",
            "--leader-election-lease-duration=137s",
        ]);
        assert_eq!(r.spoke_cluster_name, "c1");
        assert_eq!(
            r.hub_kubeconfig,
            Path::new("/spoke/hub-kubeconfig/kubeconfig")
        );
        assert_eq!(r.agent_id.as_deref(), Some("a1"));
        assert_eq!(r.terminate_on_files.len(), 2);
        assert_eq!(r.status_sync_period, Duration::from_secs(60));
        assert_eq!(
            (r.spoke_qps, r.spoke_burst, r.hub_qps, r.hub_burst),
            (20.0, 40, 30.0, 60)
        );
        assert_eq!(
            r.appliedmanifestwork_eviction_grace_period,
            Duration::from_secs(5400)
        );
        assert!(r.upstream.disable_leader_election);
        assert_eq!(
            leader_timing(&r.upstream).expect("valid timing"),
            Some((
                Duration::from_secs(137),
                Duration::from_secs(107),
                Duration::from_secs(26)
            ))
        );
        assert_eq!(
            r.health_address,
            OptionalAddress(Some(([0, 0, 0, 0], 8443).into()))
        );

        let bad = UpstreamArgs {
            leader_election_lease_duration: Some(Duration::from_secs(10)),
            ..UpstreamArgs::default()
        };
        assert!(
            leader_timing(&bad).is_err(),
            "lease shorter than the renew deadline"
        );
    }

    #[test]
    fn maestros_agent_chart_command_line_maps_onto_ours() {
        let r = &run_args(&[
            "--consumer-name=cluster1",
            "--workload-source-driver=mqtt",
            "--workload-source-config=/secrets/mqtt/config.yaml",
            "--cloudevents-client-id=cluster1-work-agent",
            "--cloudevents-client-codecs=manifestbundle",
            "--kubeconfig=/spoke/kubeconfig",
            "--namespace=maestro-agent",
            "--listen=:8443",
            "--max-json-raw-length=1048576",
            "--disable-leader-election",
            "-v=2",
        ]);
        assert_eq!(r.spoke_cluster_name, "cluster1");
        assert_eq!(r.upstream.workload_source_driver, "mqtt");
        assert_eq!(r.hub_kubeconfig, Path::new("/secrets/mqtt/config.yaml"));
        assert_eq!(
            r.upstream.cloudevents_client_id.as_deref(),
            Some("cluster1-work-agent")
        );
        assert_eq!(
            r.spoke_kubeconfig.as_deref(),
            Some(Path::new("/spoke/kubeconfig"))
        );
        assert_eq!(r.lease_namespace.as_deref(), Some("maestro-agent"));
        assert_eq!(
            r.health_address,
            OptionalAddress(Some(([0, 0, 0, 0], 8443).into()))
        );
        assert_eq!(r.upstream.max_json_raw_length, Some(1_048_576));
        assert!(
            Cli::try_parse_from(["x", "--consumer-name=c", "--hub-kubeconfig=f", "--v=4"]).is_ok()
        );
    }

    /// Maestro's agent chart line for `driver` with config `file` and client id `id`.
    fn broker_args(driver: &str, file: &Path, id: Option<&str>) -> RunArgs {
        let mut argv = vec![
            "x".to_string(),
            "--consumer-name=cluster1".into(),
            format!("--workload-source-driver={driver}"),
            format!("--workload-source-config={}", file.display()),
        ];
        argv.extend(id.map(|id| format!("--cloudevents-client-id={id}")));
        Cli::try_parse_from(argv).expect("flags").run
    }

    #[test]
    fn the_mqtt_driver_needs_a_client_id_and_a_valid_config_file() {
        let dir = std::env::temp_dir().join(format!("wa-mqtt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let good = dir.join("good.yaml");
        std::fs::write(
            &good,
            "brokerHost: 127.0.0.1:1883\ntopics:\n  sourceEvents: sources/maestro/consumers/cluster1/sourceevents\n  agentEvents: sources/maestro/consumers/cluster1/agentevents\n",
        )
        .expect("write");
        let bad = dir.join("bad.yaml");
        std::fs::write(&bad, "brokerHost: 127.0.0.1:1883\n").expect("write");
        let args = |file: &Path, id: Option<&str>| broker_args("mqtt", file, id);
        let Ok((HubChoice::Mqtt(options), server)) =
            mqtt_hub(&args(&good, Some("cluster1-work-agent")))
        else {
            panic!("a valid MQTT setup");
        };
        assert_eq!(
            server, "127.0.0.1:1883",
            "the hub hash is taken from brokerHost as written"
        );
        assert_eq!(options.cloudevents_client_id, "cluster1-work-agent");
        let err = mqtt_hub(&args(&good, None))
            .err()
            .expect("no client id")
            .to_string();
        assert!(err.contains("--cloudevents-client-id"), "{err}");
        let err = mqtt_hub(&args(&bad, Some("id")))
            .err()
            .expect("no topics")
            .to_string();
        assert!(err.contains("topics") && err.contains("bad.yaml"), "{err}");
        assert!(!err.contains('\n'));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_pubsub_driver_needs_a_client_id_and_a_valid_config_file() {
        let dir = std::env::temp_dir().join(format!("wa-pubsub-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let good = dir.join("good.yaml");
        let p = "projects/maestro-test";
        std::fs::write(
            &good,
            format!(
                "projectID: maestro-test\nendpoint: 127.0.0.1:8085\ndisableTLS: true\ntopics:\n  agentEvents: {p}/topics/agentevents\n  agentBroadcast: {p}/topics/agentbroadcast\nsubscriptions:\n  sourceEvents: {p}/subscriptions/sourceevents-cluster1\n  sourceBroadcast: {p}/subscriptions/sourcebroadcast-cluster1\n"
            ),
        )
        .expect("write");
        let bad = dir.join("bad.yaml");
        std::fs::write(&bad, "projectID: maestro-test\ninsecure: true\n").expect("write");
        let args = |file: &Path, id: Option<&str>| broker_args("pubsub", file, id);
        let Ok((HubChoice::PubSub(options), server)) =
            pubsub_hub(&args(&good, Some("cluster1-work-agent")))
        else {
            panic!("a valid Pub/Sub setup");
        };
        assert_eq!(
            server, "",
            "upstream's config loader gives no host for Pub/Sub"
        );
        assert_eq!(options.config.endpoint, "127.0.0.1:8085");
        let err = pubsub_hub(&args(&good, None))
            .err()
            .expect("no client id")
            .to_string();
        assert!(err.contains("--cloudevents-client-id"), "{err}");
        let err = pubsub_hub(&args(&bad, Some("id")))
            .err()
            .expect("an unknown key")
            .to_string();
        assert!(
            err.contains("insecure") && err.contains("bad.yaml"),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn an_unreadable_kubeconfig_is_a_one_line_error() {
        let err = load_kubeconfig(Path::new("/nonexistent/kubeconfig"))
            .await
            .expect_err("missing file");
        assert!(!err.contains('\n'), "{err}");
        assert!(!err.is_empty());
    }
}
