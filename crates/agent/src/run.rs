//! Starting and stopping the agent: the HTTP endpoints, leader election, then the controller
//! with its context, until a signal, a lost Lease or a fatal error.

use std::sync::Arc;
use std::time::Duration;

use kube::Api;
use kube::runtime::reflector;

use crate::backoff;
use crate::config::AgentConfig;
use crate::controller::run_controller;
use crate::hub::stored_work::StoredWork;
use crate::hub::{Hub, KubeHub};
use crate::metrics::Metrics;
use crate::serve::http::{HttpServer, HttpState, Readiness};
use crate::serve::leader::{self, LeaderConfig, LeaderHandle};
use crate::spoke::{applied_work, blockers, cleanup_memory, executor, triggers, watches};
use crate::work::context::Context;
use crate::work::{eviction, states, status_writer};

/// The two API clients.
pub struct Clients {
    /// Hub client (ManifestWorks).
    pub hub: kube::Client,
    /// Spoke client (AppliedManifestWorks and the applied resources).
    pub spoke: kube::Client,
}

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The metrics/health listener could not start.
    #[error(transparent)]
    Http(#[from] crate::serve::http::HttpError),
    /// The HTTPS probe endpoint could not start.
    #[error(transparent)]
    Health(#[from] crate::serve::health::HealthError),
    /// Leader election could not start.
    #[error(transparent)]
    Leader(#[from] leader::LeaderError),
    /// Another replica took the Lease: exit so the Deployment restarts this one as a standby.
    #[error("lost leadership")]
    LostLeadership,
}

/// Runs the agent against a Kubernetes hub until SIGTERM/SIGINT (Ok) or a fatal error.
pub async fn run(config: AgentConfig, clients: Clients) -> Result<(), RunError> {
    let hub = KubeHub::new(
        clients.hub,
        &config.cluster_name,
        gc::event_reporter(std::env::var("POD_NAME").ok()),
    );
    run_until(config, Arc::new(hub), clients.spoke, shutdown_signal()).await
}

/// Runs the agent against `hub` (a broker's, say) until SIGTERM/SIGINT (Ok) or a fatal error.
pub async fn run_with_hub(
    config: AgentConfig,
    hub: Arc<dyn Hub>,
    spoke: kube::Client,
) -> Result<(), RunError> {
    run_until(config, hub, spoke, shutdown_signal()).await
}

/// Runs the agent against `hub` until `shutdown` completes (Ok) or a fatal error.
pub async fn run_until(
    config: AgentConfig,
    hub: Arc<dyn Hub>,
    spoke: kube::Client,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let mut metrics = Metrics::new();
    hub.register_metrics(&mut metrics.registry);
    let metrics = Arc::new(metrics);
    let readiness = Readiness::new();
    let server = HttpServer::bind(
        config.http_address,
        HttpState {
            metrics: metrics.clone(),
            readiness: readiness.clone(),
        },
    )
    .await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });
    let http_stop = wait_true(stop_rx.clone());
    tokio::spawn(server.run(http_stop));
    crate::serve::health::spawn_for(&config, &hub, &metrics, &readiness, stop_rx.clone()).await?;
    tokio::spawn(probe_api_servers(
        hub.clone(),
        spoke.clone(),
        readiness.clone(),
    ));

    let leader = if config.leader_elect {
        let lease = LeaderConfig::new(
            config.lease_namespace.clone(),
            format!("work-agent-{}", config.cluster_name),
            leader::default_identity(),
        )
        .with_timing(config.leader_timing);
        leader::spawn(spoke.clone(), lease)?
    } else {
        LeaderHandle::always_leader()
    };
    let mut leading = leader.subscribe();
    // A standby runs no controllers, so it is ready without synced caches; otherwise the new pod
    // of a rolling update, waiting for the old leader's Lease, never gets ready.
    readiness.set_standby(true);
    tokio::select! {
        _ = wait_true(stop_rx.clone()) => { leader.shutdown().await; return Ok(()); }
        // Only whether it led: a held `Ref` would make the future not `Send`.
        led = async { leading.wait_for(|l| *l).await.is_ok() } => if !led { return Err(RunError::LostLeadership); },
    }
    tracing::info!(cluster = %config.cluster_name, hub_hash = %config.hub_hash, "leading; starting controllers");
    readiness.set_standby(false);

    let (triggers, trigger_rx) = triggers::Triggers::channel(
        metrics.trigger_overflows_total.clone(),
        metrics.trigger_queue_depth.clone(),
    );
    let backoff = Arc::new(backoff::Backoff::default());
    let resolver_size = metrics.resolver_cache_entries.clone();
    let resolver = applier::Resolver::new(spoke.clone()).with_size_observer(Arc::new(move |n| {
        resolver_size.set(i64::try_from(n).unwrap_or(i64::MAX));
    }));
    let blocker_watches = blockers::spawn(
        spoke.clone(),
        backoff.clone(),
        triggers.clone(),
        resolver.clone(),
    );
    let applied_store = crate::spoke::object_store::ObjectStore::default();
    let applied_synced = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let applied = applied_work::AppliedWorks::new(
        Api::all(spoke.clone()),
        applied_store.clone(),
        applied_synced.clone(),
    );
    let (work_store, work_writer) = reflector::store::<StoredWork>();
    let watch_gauges = (metrics.watches.clone(), metrics.index_objects.clone());
    let ctx = Arc::new(Context {
        applier: applier::Applier::new(spoke.clone(), resolver.clone()),
        resolver,
        evaluator: conditions::Evaluator::shared(),
        metrics,
        status: status_writer::StatusWriter::new(hub.clone()),
        executor: executor::ExecutorCheck::new(spoke.clone(), Some(triggers.clone())),
        watches: watches::Watches::new(
            spoke.clone(),
            format!("{}={}", applier::AGENT_LABEL, config.label_value),
            triggers,
        )
        .with_size_gauges(watch_gauges.0, watch_gauges.1),
        states: states::WorkStates::default(),
        backoff,
        applied,
        cleanups: cleanup_memory::CleanupMemory::default(),
        work_store,
        works_synced: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        hub,
        spoke,
        config,
    });
    let _eviction = eviction::spawn(ctx.clone());
    let lost = async move {
        // An error means the elector is gone without ever losing (e.g. no election at all).
        if leading.wait_for(|l| !*l).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let result = tokio::select! {
        () = run_controller(ctx, trigger_rx, readiness, work_writer, applied_store, applied_synced) => Ok(()),
        _ = wait_true(stop_rx) => Ok(()),
        () = lost => Err(RunError::LostLeadership),
    };
    for handle in blocker_watches {
        handle.abort();
    }
    leader.shutdown().await;
    result
}

async fn wait_true(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Marks hub and spoke reached once each answers (retrying), for `/readyz`.
async fn probe_api_servers(hub: Arc<dyn Hub>, spoke: kube::Client, readiness: Readiness) {
    let mut hub_ok = false;
    let mut spoke_ok = false;
    while !(hub_ok && spoke_ok) {
        if !hub_ok && hub.reachable().await {
            hub_ok = true;
            readiness.set_hub_reached();
        }
        if !spoke_ok && spoke.apiserver_version().await.is_ok() {
            spoke_ok = true;
            readiness.set_spoke_reached();
        }
        if !(hub_ok && spoke_ok) {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}
