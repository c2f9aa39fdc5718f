//! The ManifestWork controller: one queue of work names, merged from the hub's work events, the
//! AppliedManifestWorks' watch and the triggers of the resource watches, reconciled by
//! kube-runtime's applier over the works' store.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::controller::{self, Action, ReconcileRequest, trigger_self};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use work_api::AppliedManifestWork;

use crate::context::Context;
use crate::error::Error;
use crate::serve::http::Readiness;
use crate::serve::metrics::ControllerLabels;
use crate::work::stored_work::StoredWork;
use crate::work::{reconcile, triggers};

/// How long a work's spoke changes must be quiet before they ask for a reconcile (counting the
/// hub's debounce, which also holds them).
const SPOKE_DEBOUNCE: Duration = Duration::from_millis(50);

/// The controller's debounce and the spoke changes' debounce: both the configured one when set
/// (zero turns both off), else the hub's and [`SPOKE_DEBOUNCE`].
fn debounces(configured: Option<Duration>, hub_default: Duration) -> (Duration, Duration) {
    match configured {
        Some(d) => (d, d),
        None => (hub_default, SPOKE_DEBOUNCE),
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
pub async fn run_controller(
    ctx: Arc<Context>,
    triggers: tokio::sync::mpsc::Receiver<String>,
    readiness: Readiness,
    work_writer: reflector::store::Writer<StoredWork>,
    applied_writer: reflector::store::Writer<AppliedManifestWork>,
    applied_synced: Arc<std::sync::atomic::AtomicBool>,
) {
    let namespace = ctx.config.cluster_name.clone();
    let gone = ctx.clone();
    let works = ctx.hub.watch_works().inspect(move |e| match e {
        Ok(watcher::Event::Delete(work)) => forget_work(&gone, work),
        Ok(watcher::Event::Apply(work) | watcher::Event::InitApply(work))
            if work.metadata.deletion_timestamp.is_none() =>
        {
            gone.status.unrelease(&work.name_any());
        }
        _ => {}
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
    // A spoke change asks for a reconcile once no other change of the same work came for the
    // spoke debounce, whatever the hub's own debounce is: a hub event that arrives with it (the
    // work deleted or updated just after its objects were edited) is acted on first, and a burst
    // of edits (finalizers taken off one object after another) is answered once, after it.
    let (hub_debounce, spoke_debounce) =
        debounces(ctx.config.reconcile_debounce, ctx.hub.reconcile_debounce());
    let delay = spoke_debounce.saturating_sub(hub_debounce);
    let external: Queue = triggers::debounced(triggers, depth, delay)
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

    let workqueue = ctx.metrics.workqueue.clone();
    let queue = futures::stream::select_all([own, external, applied]).inspect(move |request| {
        if let Ok(request) = request {
            workqueue.added(&request.obj_ref.name);
        }
    });
    let controller_config = controller::Config::default()
        .concurrency(ctx.config.workers)
        .debounce(hub_debounce);
    let dropped = &ctx.metrics.workqueue;
    controller::applier(
        |work, ctx| {
            let name = work.metadata.name.clone().unwrap_or_default();
            let workqueue = ctx.metrics.workqueue.clone();
            workqueue.started(&name);
            let task = tokio::spawn(reconcile::reconcile_stored(work, ctx));
            Box::pin(async move {
                let result = task
                    .await
                    .unwrap_or_else(|e| Err(Error::Task(e.to_string())));
                workqueue.finished(&name);
                result
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
            // A request for a work no longer in the store leaves the queue unreconciled.
            Err(controller::Error::ObjectNotFound(obj_ref)) => {
                dropped.dropped(&obj_ref.name);
                tracing::debug!(work = %obj_ref.name, "work gone before its reconcile");
            }
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
        // Not queued again: no retry.
        tracing::debug!(work = %name, error = %error, "work gone from the hub during its reconcile");
        return Action::await_change();
    }
    if error.is_conflict() {
        tracing::debug!(work = %name, error = %error, "conflict; retrying");
        ctx.metrics.workqueue.retried();
        return Action::requeue(Duration::from_millis(200));
    }
    ctx.metrics.workqueue.retried();
    tracing::warn!(work = %name, error = %error, "reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_debounce_replaces_both_defaults() {
        let hub = Duration::from_millis(50);
        assert_eq!(debounces(None, hub), (hub, SPOKE_DEBOUNCE));
        assert_eq!(
            debounces(Some(Duration::ZERO), hub),
            (Duration::ZERO, Duration::ZERO)
        );
        let d = Duration::from_millis(7);
        assert_eq!(debounces(Some(d), Duration::ZERO), (d, d));
    }
}
