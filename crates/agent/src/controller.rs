//! The ManifestWork controller: one queue of work names, merged from the hub's work events, the
//! AppliedManifestWorks' watch and the triggers of the resource watches, reconciled by
//! kube-runtime's applier over the works' store.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::controller::{self, Action, ReconcileRequest};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use crate::error::Error;
use crate::hub::stored_work::StoredWork;
use crate::metrics::ControllerLabels;
use crate::serve::http::Readiness;
use crate::spoke::applied_work;
use crate::spoke::live_object::LiveObject;
use crate::spoke::object_store::ObjectStore;
use crate::spoke::triggers;
use crate::work::admission::{self, Admission};
use crate::work::context::Context;
use crate::work::{reconcile, resync};

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

/// Whether `work` re-queues itself from its own watch: a new work, or a change of its spec
/// (generation), finalizers, deletion or labels against the copy `store` holds; not its status.
/// So the agent's own status writes do not re-trigger it. Compared with the store's copy, not a
/// cache of its own: nothing more is kept per work.
fn changes_spec_or_lifecycle(store: &reflector::Store<StoredWork>, work: &StoredWork) -> bool {
    let Some(old) = store.get(&ObjectRef::from_obj(work)) else {
        return true;
    };
    let labels_differ = old.labels_differ(work);
    let (old, new) = (&old.metadata, &work.metadata);
    old.uid != new.uid
        || old.generation != new.generation
        || old.finalizers != new.finalizers
        || old.deletion_timestamp != new.deletion_timestamp
        || labels_differ
}

/// The works a watch event asks to reconcile, held back while a list is under way. A store takes
/// a list's works only at its end (`InitDone`), so a reconcile asked for by one of them
/// (`InitApply`) could otherwise run first, on the copy from before the list, and the change it
/// was asked for would wait for the next event: with no debounce, a re-list after a watch gap
/// lost a spec update that way.
#[derive(Default)]
struct Relist {
    /// The changed works of the list under way, if one is (their names only: a restart's list
    /// may hold every work).
    held: Option<Vec<ObjectRef<StoredWork>>>,
}

impl Relist {
    /// The works to queue for `event`; `changed` says whether it changes a work's spec or
    /// lifecycle against the store's copy.
    fn requests(
        &mut self,
        event: watcher::Event<StoredWork>,
        changed: bool,
    ) -> Vec<ObjectRef<StoredWork>> {
        match event {
            watcher::Event::Init => {
                self.held = Some(Vec::new());
                Vec::new()
            }
            watcher::Event::InitApply(work) if changed => {
                let work = ObjectRef::from_obj(&work);
                match &mut self.held {
                    Some(held) => held.push(work),
                    // A list's work without its start: the store has taken it already.
                    None => return vec![work],
                }
                Vec::new()
            }
            watcher::Event::InitDone => self.held.take().unwrap_or_default(),
            watcher::Event::Apply(work) if changed => vec![ObjectRef::from_obj(&work)],
            _ => Vec::new(),
        }
    }
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
/// and lost finalizers only; it also fills the AppliedManifestWork store), the resource
/// watches' triggers and the resync sweep.
pub async fn run_controller(
    ctx: Arc<Context>,
    triggers: tokio::sync::mpsc::Receiver<String>,
    readiness: Readiness,
    work_writer: reflector::store::Writer<StoredWork>,
    applied_store: ObjectStore,
    applied_synced: Arc<std::sync::atomic::AtomicBool>,
) {
    let (hub_debounce, spoke_debounce) =
        debounces(ctx.config.reconcile_debounce, ctx.hub.reconcile_debounce());
    let sources = [
        hub_works(&ctx, readiness, work_writer),
        spoke_changes(&ctx, triggers, spoke_debounce.saturating_sub(hub_debounce)),
        applied_changes(&ctx, applied_store, applied_synced),
        resync_sweep(&ctx),
    ];
    // Every source's requests wait in the admission, each work once, until the controller has
    // room: its scheduler then holds a few works at a time, not a burst of thousands.
    let admission = Arc::new(Admission::new(
        usize::from(ctx.config.workers.max(1)) * admission::PER_WORKER,
    ));
    let offered = admission.clone();
    let workqueue = ctx.metrics.workqueue.clone();
    let offers = futures::stream::select_all(sources).for_each(move |request| {
        match request {
            Ok(request) => {
                workqueue.added(&request.obj_ref.name);
                offered.offer(&request.obj_ref.name)
            }
            Err(e) => tracing::warn!(error = %e, "watch error"),
        }
        std::future::ready(())
    });
    futures::future::join(offers, reconcile_admitted(ctx, admission, hub_debounce)).await;
}

/// Requests from the hub's works: a new work, or a change of its spec or lifecycle (not its
/// status). Fills the works' store, and forgets what was kept for a work once it is gone.
fn hub_works(
    ctx: &Arc<Context>,
    readiness: Readiness,
    mut writer: reflector::store::Writer<StoredWork>,
) -> Queue {
    let gone = ctx.clone();
    let synced = ctx.clone();
    let stored = ctx.work_store.clone();
    let mut relist = Relist::default();
    ctx.hub
        .watch_works()
        .inspect(move |e| match e {
            Ok(watcher::Event::Delete(work)) => forget_work(&gone, work),
            Ok(watcher::Event::Apply(work) | watcher::Event::InitApply(work))
                if work.metadata.deletion_timestamp.is_none() =>
            {
                gone.status.unrelease(&work.name_any());
            }
            _ => {}
        })
        .map(move |event| match event {
            Ok(event) => {
                // Decided on the stored copy, before the store takes the new one.
                let changed = match &event {
                    watcher::Event::Apply(work) | watcher::Event::InitApply(work) => {
                        changes_spec_or_lifecycle(&stored, work)
                    }
                    _ => false,
                };
                writer.apply_watcher_event(&event);
                // After the store took the event: "synced" then means the store has the full list.
                match &event {
                    watcher::Event::InitDone => {
                        readiness.set_caches_synced(true);
                        synced
                            .works_synced
                            .store(true, std::sync::atomic::Ordering::Release);
                    }
                    watcher::Event::Apply(work) | watcher::Event::InitApply(work) => {
                        // The store has this version now: the agent's own copy is not needed.
                        synced
                            .status
                            .observe(&work.name_any(), work.resource_version().as_deref());
                    }
                    _ => {}
                }
                let queued = relist.requests(event, changed).into_iter();
                queued
                    .map(|work| Ok(ReconcileRequest::from(work)))
                    .collect()
            }
            Err(e) => vec![Err(e)],
        })
        .flat_map(futures::stream::iter)
        .boxed()
}

/// Requests from the resource watches' triggers. A spoke change asks for a reconcile once no
/// other change of the same work came for `delay` beyond the hub's own debounce: a hub event
/// that arrives with it (the work deleted or updated just after its objects were edited) is
/// acted on first, and a burst of edits (finalizers taken off one object after another) is
/// answered once, after it.
fn spoke_changes(
    ctx: &Arc<Context>,
    triggers: tokio::sync::mpsc::Receiver<String>,
    delay: Duration,
) -> Queue {
    let ns = ctx.config.cluster_name.clone();
    let depth = ctx.metrics.trigger_queue_depth.clone();
    triggers::debounced(triggers, depth, delay)
        .map(move |name| {
            Ok(ReconcileRequest::from(
                ObjectRef::<StoredWork>::new(&name).within(&ns),
            ))
        })
        .boxed()
}

/// Requests from the AppliedManifestWorks' watch: one deleted, being deleted or stripped of our
/// finalizer makes its work act (its own status writes and the initial list need nothing).
/// Fills the AppliedManifestWork store.
fn applied_changes(
    ctx: &Arc<Context>,
    store: ObjectStore,
    synced: Arc<std::sync::atomic::AtomicBool>,
) -> Queue {
    let config = ctx.config.clone();
    let observed = ctx.clone();
    let ns = ctx.config.cluster_name.clone();
    // Read as packed text (managedFields dropped), which is what the store keeps.
    let api: Api<LiveObject> = Api::all_with(ctx.spoke.clone(), &*applied_work::RESOURCE);
    watcher(api, watcher::Config::default())
        .default_backoff()
        .inspect(move |e| {
            if let Ok(event) = e {
                store.apply(event);
            }
            // After the store took the event: "synced" then means the store has the full list.
            match e {
                Ok(watcher::Event::InitDone) => {
                    synced.store(true, std::sync::atomic::Ordering::Release);
                }
                Ok(watcher::Event::Apply(a)) => observed.applied.observe(a),
                _ => {}
            }
        })
        .filter_map(move |event| {
            let request = match event {
                Ok(watcher::Event::Apply(a) | watcher::Event::Delete(a)) => {
                    applied_work::decoded(&a)
                        .filter(|a| {
                            a.metadata.deletion_timestamp.is_some()
                                || !a
                                    .finalizers()
                                    .iter()
                                    .any(|f| f == work_api::APPLIED_MANIFEST_WORK_FINALIZER)
                        })
                        // Not filtered on agentID: a restart with another --agent-id still owns
                        // its works. A name that maps to a work not in our namespace is dropped
                        // by the controller (it is not in the store).
                        .filter(|a| a.spec.hub_hash == config.hub_hash)
                        .and_then(|a| {
                            let name = a.metadata.name.as_deref()?;
                            let work = config.work_name_of_applied(name)?;
                            Some(Ok(ReconcileRequest::from(
                                ObjectRef::<StoredWork>::new(work).within(&ns),
                            )))
                        })
                }
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            };
            std::future::ready(request)
        })
        .boxed()
}

/// The safety net: every work once a status-sync period, from one sweep over the store.
fn resync_sweep(ctx: &Arc<Context>) -> Queue {
    resync::sweep(
        ctx.work_store.clone(),
        ctx.config.cluster_name.clone(),
        ctx.config.status_sync_period,
    )
    .map(|key| Ok(ReconcileRequest::from(key)))
    .boxed()
}

/// Runs kube-runtime's applier over the works `admission` admits, each reconcile in a task of
/// its own, and tells the admission when each is done.
async fn reconcile_admitted(ctx: Arc<Context>, admission: Arc<Admission>, debounce: Duration) {
    let ns = ctx.config.cluster_name.clone();
    let queue = admission.clone().admitted().map(move |name| {
        Ok::<_, watcher::Error>(ReconcileRequest::from(
            ObjectRef::<StoredWork>::new(&name).within(&ns),
        ))
    });
    let controller_config = controller::Config::default()
        .concurrency(ctx.config.workers)
        .debounce(debounce);
    let dropped = ctx.metrics.workqueue.clone();
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
    .for_each(move |result| {
        // Every request the controller ran ends here, named: its work may be admitted again.
        match &result {
            Ok((work, _)) => admission.done(&work.name),
            Err(controller::Error::ReconcilerFailed(_, work)) => admission.done(&work.name),
            // A request for a work no longer in the store leaves the queue unreconciled.
            Err(controller::Error::ObjectNotFound(work)) => {
                dropped.dropped(&work.name);
                tracing::debug!(work = %work.name, "work gone before its reconcile");
                admission.done(&work.name)
            }
            Err(_) => {}
        }
        if let Err(e) = result {
            tracing::debug!(error = %e, "controller");
        }
        std::future::ready(())
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
    use serde_json::{Value, json};

    fn work(meta: Value, status: &str) -> StoredWork {
        let mut metadata = json!({"name": "w", "namespace": "c1", "uid": "u1", "generation": 1,
            "finalizers": ["f"], "labels": {"l": "1"}, "resourceVersion": "1"});
        if let (Some(m), Some(extra)) = (metadata.as_object_mut(), meta.as_object()) {
            m.extend(extra.clone());
        }
        serde_json::from_value(json!({"metadata": metadata,
            "status": {"conditions": [{"type": "Applied", "status": status}]}}))
        .expect("a work")
    }

    #[test]
    fn only_spec_and_lifecycle_changes_queue_a_work_not_its_status() {
        let mut writer = reflector::store::Writer::<StoredWork>::default();
        let store = writer.as_reader();
        let stored = work(json!({}), "True");
        assert!(changes_spec_or_lifecycle(&store, &stored), "a new work");
        writer.apply_watcher_event(&watcher::Event::Apply(stored));
        let unchanged = [
            work(json!({"resourceVersion": "2"}), "False"),
            work(json!({"annotations": {"a": "b"}}), "True"),
        ];
        for w in unchanged {
            assert!(!changes_spec_or_lifecycle(&store, &w), "{:?}", w.metadata);
        }
        let changed = [
            work(json!({"generation": 2}), "True"),
            work(json!({"uid": "u2"}), "True"),
            work(json!({"finalizers": []}), "True"),
            work(json!({"labels": {"l": "2"}}), "True"),
            work(json!({"deletionTimestamp": "2026-11-27T05:00:00Z"}), "True"),
        ];
        for w in changed {
            assert!(changes_spec_or_lifecycle(&store, &w), "{:?}", w.metadata);
        }
    }

    #[test]
    fn a_listed_work_is_queued_once_the_store_has_the_whole_list() {
        let mut writer = reflector::store::Writer::<StoredWork>::default();
        let store = writer.as_reader();
        let mut relist = Relist::default();
        let mut feed = |event: watcher::Event<StoredWork>| {
            let changed = match &event {
                watcher::Event::Apply(w) | watcher::Event::InitApply(w) => {
                    changes_spec_or_lifecycle(&store, w)
                }
                _ => false,
            };
            writer.apply_watcher_event(&event);
            let queued = relist.requests(event, changed);
            // Whatever is queued, the store already holds that version of it.
            queued
                .iter()
                .map(|w| store.get(w).and_then(|s| s.metadata.generation))
                .collect::<Vec<_>>()
        };
        // Each queued work's generation as the store holds it when it is queued.
        let none: Vec<Option<i64>> = Vec::new();
        assert_eq!(feed(watcher::Event::Init), none);
        assert_eq!(
            feed(watcher::Event::InitApply(work(json!({}), "True"))),
            none
        );
        assert_eq!(
            feed(watcher::Event::InitDone),
            [Some(1)],
            "queued at the list's end"
        );
        let update = work(json!({"generation": 2}), "True");
        assert_eq!(feed(watcher::Event::Apply(update)), [Some(2)]);
        // A re-list after a gap that missed a spec change: queued once the store has it.
        assert_eq!(feed(watcher::Event::Init), none);
        let newer = work(json!({"generation": 3}), "True");
        assert_eq!(
            feed(watcher::Event::InitApply(newer)),
            none,
            "not before the store has it"
        );
        assert_eq!(feed(watcher::Event::InitDone), [Some(3)]);
        // Nothing changed in the next list: nothing queued.
        assert_eq!(feed(watcher::Event::Init), none);
        let same = work(json!({"generation": 3}), "False");
        assert_eq!(feed(watcher::Event::InitApply(same)), none);
        assert_eq!(feed(watcher::Event::InitDone), none);
    }

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
