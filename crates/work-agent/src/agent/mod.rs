//! The agent: one controller over the ManifestWorks of one hub namespace, triggered by the
//! works themselves, by their AppliedManifestWorks and by label-filtered watches on the applied
//! resources. See `docs/architecture.md`.

pub mod applied_work;
pub mod apply;
pub mod backoff;
pub mod blockers;
pub mod cleanup_memory;
pub mod client;
pub mod config;
pub mod context;
pub mod deletion;
pub mod error;
pub mod evaluate;
pub mod eviction;
pub mod executor;
pub mod feedback;
pub mod finalizers;
pub mod latest;
pub mod live_object;
pub mod manifests;
pub mod outcome;
pub mod params;
pub mod reconcile;
pub mod states;
pub mod status;
pub mod status_size;
pub mod status_writer;
pub mod stored_work;
pub mod triggers;
pub mod ttl;
pub mod ttl_failures;
pub mod watches;

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::controller::{self, Action, ReconcileRequest, trigger_self};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use work_api::AppliedManifestWork;

use stored_work::StoredWork;

pub use config::AgentConfig;
pub use context::Context;
pub use error::Error;

use crate::http::{HttpServer, HttpState, Readiness};
use crate::leader::{self, LeaderConfig, LeaderHandle};
use crate::metrics::{ControllerLabels, Metrics};

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
    Http(#[from] crate::http::HttpError),
    /// The HTTPS probe endpoint could not start.
    #[error(transparent)]
    Health(#[from] crate::health::HealthError),
    /// Leader election could not start.
    #[error(transparent)]
    Leader(#[from] leader::LeaderError),
    /// Another replica took the Lease: exit so the Deployment restarts this one as a standby.
    #[error("lost leadership")]
    LostLeadership,
}

/// Runs the agent until SIGTERM/SIGINT (Ok) or a fatal error.
pub async fn run(config: AgentConfig, clients: Clients) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::new());
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
        shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });
    let http_stop = wait_true(stop_rx.clone());
    tokio::spawn(server.run(http_stop));
    let hub_auth = crate::hub_auth::HubAuth::new();
    crate::health::spawn_for(
        &config,
        &clients.hub,
        &metrics,
        &readiness,
        &hub_auth,
        stop_rx.clone(),
    )
    .await?;
    tokio::spawn(probe_api_servers(
        clients.hub.clone(),
        clients.spoke.clone(),
        readiness.clone(),
    ));

    let leader = if config.leader_elect {
        let lease = LeaderConfig::new(
            config.lease_namespace.clone(),
            format!("work-agent-{}", config.cluster_name),
            leader::default_identity(),
        )
        .with_timing(config.leader_timing);
        leader::spawn(clients.spoke.clone(), lease)?
    } else {
        LeaderHandle::always_leader()
    };
    let mut leading = leader.subscribe();
    // A standby runs no controllers, so it is ready without synced caches; otherwise the new pod
    // of a rolling update, waiting for the old leader's Lease, never gets ready.
    readiness.set_standby(true);
    tokio::select! {
        _ = wait_true(stop_rx.clone()) => { leader.shutdown().await; return Ok(()); }
        r = leading.wait_for(|l| *l) => if r.is_err() { return Err(RunError::LostLeadership); },
    }
    tracing::info!(cluster = %config.cluster_name, hub_hash = %config.hub_hash, "leading; starting controllers");
    readiness.set_standby(false);

    let (triggers, trigger_rx) = triggers::Triggers::channel(
        metrics.trigger_overflows_total.clone(),
        metrics.trigger_queue_depth.clone(),
    );
    let backoff = Arc::new(backoff::Backoff::default());
    let resolver_size = metrics.resolver_cache_entries.clone();
    let resolver =
        applier::Resolver::new(clients.spoke.clone()).with_size_observer(Arc::new(move |n| {
            resolver_size.set(i64::try_from(n).unwrap_or(i64::MAX));
        }));
    let blocker_watches = blockers::spawn(
        clients.spoke.clone(),
        backoff.clone(),
        triggers.clone(),
        resolver.clone(),
    );
    let applied_writer = reflector::store::Writer::<AppliedManifestWork>::default();
    let applied_synced = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let applied = applied_work::AppliedWorks::new(
        Api::all(clients.spoke.clone()),
        applied_writer.as_reader(),
        applied_synced.clone(),
    );
    let (work_store, work_writer) = reflector::store::<StoredWork>();
    let watch_gauges = (metrics.watches.clone(), metrics.index_objects.clone());
    let ctx = Arc::new(Context {
        applier: applier::Applier::new(clients.spoke.clone(), resolver.clone()),
        resolver,
        evaluator: conditions::Evaluator::shared(),
        metrics,
        status: status_writer::StatusWriter::new(Api::namespaced(
            clients.hub.clone(),
            &config.cluster_name,
        )),
        executor: executor::ExecutorCheck::new(clients.spoke.clone(), Some(triggers.clone())),
        watches: watches::Watches::new(
            clients.spoke.clone(),
            format!("{}={}", applier::AGENT_LABEL, config.label_value),
            triggers,
        )
        .with_size_gauges(watch_gauges.0, watch_gauges.1),
        recorder: kube::runtime::events::Recorder::new(
            clients.hub.clone(),
            gc::event_reporter(std::env::var("POD_NAME").ok()),
        ),
        states: states::WorkStates::default(),
        backoff,
        applied,
        cleanups: cleanup_memory::CleanupMemory::default(),
        work_store,
        works_synced: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        hub_auth,
        hub: clients.hub,
        spoke: clients.spoke,
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
        () = run_controller(ctx, trigger_rx, readiness, work_writer, applied_writer, applied_synced) => Ok(()),
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

/// Marks each API server reached once it answers (retrying), for `/readyz`.
async fn probe_api_servers(hub: kube::Client, spoke: kube::Client, readiness: Readiness) {
    let mut hub_ok = false;
    let mut spoke_ok = false;
    while !(hub_ok && spoke_ok) {
        if !hub_ok && hub.apiserver_version().await.is_ok() {
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

type Queue = std::pin::Pin<
    Box<dyn Stream<Item = Result<ReconcileRequest<StoredWork>, watcher::Error>> + Send>,
>;

/// What of a work re-queues it from its own watch: its spec (generation), finalizers, deletion
/// and labels, not its status. So the agent's own status writes do not re-trigger it.
fn spec_or_lifecycle(work: &StoredWork) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    work.metadata.uid.hash(&mut hasher);
    work.metadata.generation.hash(&mut hasher);
    work.metadata.finalizers.hash(&mut hasher);
    work.metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut hasher);
    work.metadata.labels.hash(&mut hasher);
    Some(hasher.finish())
}

/// Forgets everything kept per work once the work is gone from the hub.
fn forget_work(ctx: &Context, work: &StoredWork) {
    let name = work.metadata.name.clone().unwrap_or_default();
    ctx.watches.remove_work(&name);
    ctx.backoff.clear(&name);
    ctx.executor.forget_work(&name);
    ctx.cleanups.forget(&ctx.config.applied_name(&name));
    ctx.status.gone(&name);
    ctx.states.set(&ctx.metrics, &name, None);
    ctx.states.set_ttl_pending(&ctx.metrics, &name, false);
}

/// The ManifestWork controller: kube-runtime's applier over a queue merged from the works'
/// own watch (spec and lifecycle changes only), their AppliedManifestWorks' watch (deletions
/// and lost finalizers only; it also fills the AppliedManifestWork store), and the resource
/// watches' triggers.
async fn run_controller(
    ctx: Arc<Context>,
    triggers: tokio::sync::mpsc::Receiver<String>,
    readiness: Readiness,
    work_writer: reflector::store::Writer<StoredWork>,
    applied_writer: reflector::store::Writer<AppliedManifestWork>,
    applied_synced: Arc<std::sync::atomic::AtomicBool>,
) {
    let namespace = ctx.config.cluster_name.clone();
    let gone = ctx.clone();
    let hub_auth = ctx.hub_auth.clone();
    hub_auth.watch_started();
    let works_api: Api<StoredWork> = Api::namespaced(ctx.hub.clone(), &namespace);
    let works = watcher(works_api, watcher::Config::default())
        .default_backoff()
        .inspect(move |e| {
            hub_auth.observe(e);
            match e {
                Ok(watcher::Event::Delete(work)) => forget_work(&gone, work),
                Ok(watcher::Event::Apply(work) | watcher::Event::InitApply(work))
                    if work.metadata.deletion_timestamp.is_none() =>
                {
                    gone.status.unrelease(&work.name_any());
                }
                _ => {}
            }
        });
    let synced = ctx.clone();
    // After the store took the event: "synced" then means the store has the full list.
    let works = reflector::reflector(work_writer, works).inspect(move |e| match e {
        Ok(watcher::Event::InitDone) => {
            readiness.set_caches_synced(true);
            synced
                .works_synced
                .store(true, std::sync::atomic::Ordering::Release);
        }
        // The store has this version now: the agent's own copy of it is not needed.
        Ok(watcher::Event::Apply(work)) => synced
            .status
            .observe(&work.name_any(), work.resource_version().as_deref()),
        _ => {}
    });
    let own: Queue = trigger_self(
        works
            .applied_objects()
            .predicate_filter(spec_or_lifecycle, Default::default()),
        (),
    )
    .boxed();

    let ns = namespace.clone();
    let depth = ctx.metrics.trigger_queue_depth.clone();
    let external: Queue = futures::stream::unfold(triggers, move |mut rx| {
        let depth = depth.clone();
        async move {
            triggers::Triggers::receive(&mut rx, &depth)
                .await
                .map(|name| (name, rx))
        }
    })
    .map(move |name| {
        Ok(ReconcileRequest::from(
            ObjectRef::<StoredWork>::new(&name).within(&ns),
        ))
    })
    .boxed();

    let config = ctx.config.clone();
    let observed = ctx.clone();
    let applied_api: Api<AppliedManifestWork> = ctx.applied_works();
    let ns = namespace.clone();
    let applied: Queue = watcher(applied_api, watcher::Config::default())
        .default_backoff()
        .modify(|a| a.managed_fields_mut().clear())
        .reflect(applied_writer)
        // After the store took the event: "synced" then means the store has the full list.
        .inspect(move |e| match e {
            Ok(watcher::Event::InitDone) => {
                applied_synced.store(true, std::sync::atomic::Ordering::Release);
            }
            Ok(watcher::Event::Apply(a)) => observed.applied.observe(a),
            _ => {}
        })
        .filter_map(move |event| {
            let request = match event {
                // Deleted, being deleted, or stripped of our finalizer: the work must act. Its
                // own status writes (and the initial list) need nothing.
                Ok(watcher::Event::Apply(a) | watcher::Event::Delete(a))
                    if a.metadata.deletion_timestamp.is_some()
                        || !a
                            .finalizers()
                            .iter()
                            .any(|f| f == work_api::APPLIED_MANIFEST_WORK_FINALIZER) =>
                {
                    // Not filtered on agentID: a restart with another --agent-id still owns
                    // its works. A name that maps to a work not in our namespace is dropped by
                    // the controller (it is not in the store).
                    let mine = a.spec.hub_hash == config.hub_hash;
                    let work = a
                        .metadata
                        .name
                        .as_deref()
                        .and_then(|n| config.work_name_of_applied(n));
                    match work {
                        Some(work) if mine => Some(Ok(ReconcileRequest::from(
                            ObjectRef::<StoredWork>::new(work).within(&ns),
                        ))),
                        _ => None,
                    }
                }
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            };
            std::future::ready(request)
        })
        .boxed();

    let queue = futures::stream::select_all([own, external, applied]);
    let controller_config = controller::Config::default()
        .concurrency(ctx.config.workers)
        .debounce(Duration::from_millis(50));
    controller::applier(
        |work, ctx| {
            let task = tokio::spawn(reconcile::reconcile_stored(work, ctx));
            Box::pin(async move {
                task.await
                    .unwrap_or_else(|e| Err(Error::Task(e.to_string())))
            })
        },
        error_policy,
        ctx.clone(),
        ctx.work_store.clone(),
        queue,
        controller_config,
    )
    .for_each(|result| async move {
        match result {
            Ok(_) => {}
            Err(controller::Error::QueueError(e)) => {
                tracing::warn!(error = %e, "watch error");
            }
            Err(e) => tracing::debug!(error = %e, "controller"),
        }
    })
    .await;
}

fn error_policy(work: Arc<StoredWork>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics
        .reconcile_errors_total
        .get_or_create(&ControllerLabels {
            controller: "manifestwork",
        })
        .inc();
    let name = work.metadata.name.as_deref().unwrap_or_default();
    if error.is_work_gone() {
        tracing::debug!(work = %name, error = %error, "work gone from the hub during its reconcile");
        return Action::await_change();
    }
    if error.is_conflict() {
        tracing::debug!(work = %name, error = %error, "conflict; retrying");
        return Action::requeue(Duration::from_millis(200));
    }
    tracing::warn!(work = %name, error = %error, "reconcile failed");
    Action::requeue(Duration::from_secs(5))
}
