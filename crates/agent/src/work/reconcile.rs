//! The ManifestWork reconcile: finalizer, AppliedManifestWork, apply (see `apply`), prune, status,
//! retry, TTL.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::PropagationPolicy;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use work_api::{
    AppliedManifestResourceMeta, AppliedManifestWork, MANIFEST_WORK_FINALIZER, ManifestWork,
    ManifestWorkStatus,
};

use crate::error::Error;
use crate::finalizer_patch::with_finalizer;
use crate::hub::SourceHearing;
use crate::hub::stored_work::StoredWork;
use crate::latest::is_newer;
use crate::metrics::ControllerLabels;
use crate::spoke::applied_work::AppliedState;
use crate::spoke::watches::ObjectKey;
use crate::work::completion_memory::{self, Remembered};
use crate::work::context::Context;
use crate::work::status::{self, DesiredStatus, StatusPlan};
use crate::work::{apply, deletion, ttl};
use applier::{manifests, record};

/// Delay before retrying a manifest whose apply failed for a reason that may pass by itself.
const TRANSIENT_RETRY: Duration = Duration::from_secs(5);

/// Added to the wait for a hold to be over, so the reconcile it brings sees it over.
const HOLD_MARGIN: Duration = Duration::from_millis(20);

/// Delay before looking again for the kind of a CustomResourceDefinition that is Established but
/// not in discovery yet (the API server adds it within moments, and no event says when).
const DISCOVERY_RETRY: Duration = Duration::from_millis(100);

/// Reconciles one stored ManifestWork: decodes it (a work that does not decode is logged with
/// its name and waits for its next change), then [`reconcile`].
pub async fn reconcile_stored(stored: Arc<StoredWork>, ctx: Arc<Context>) -> Result<Action, Error> {
    let stored = newest_stored(stored, &ctx);
    match stored.decode() {
        Ok(work) => reconcile(Arc::new(work), ctx).await,
        Err(e) => {
            tracing::warn!(work = %stored.name_any(), error = %e, "the ManifestWork cannot be decoded; waiting for it to change");
            Ok(Action::await_change())
        }
    }
}

/// The store's copy of `stored` if the store has a newer one now. The controller hands over the
/// copy it read when it queued the work; the store may have taken a newer version since (the
/// agent's own last status write), and the agent's record of that write is dropped once the
/// store has it — so the copy handed over would be older than both and its write would conflict.
fn newest_stored(stored: Arc<StoredWork>, ctx: &Context) -> Arc<StoredWork> {
    match ctx.work_store.get(&ObjectRef::from_obj(stored.as_ref())) {
        Some(current)
            if is_newer(
                current.resource_version().as_deref(),
                stored.resource_version().as_deref(),
            ) =>
        {
            current
        }
        _ => stored,
    }
}

/// Reconciles one ManifestWork (counted and timed when it ends).
pub async fn reconcile(work: Arc<ManifestWork>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_work(work, &ctx).await;
    ctx.metrics
        .reconcile_duration_seconds
        .observe(started.elapsed().as_secs_f64());
    ctx.metrics
        .reconciles_total
        .get_or_create(&ControllerLabels {
            controller: "manifestwork",
        })
        .inc();
    result
}

/// The phases of a reconcile: finalize a work being deleted; otherwise hold the finalizer, find
/// the work's AppliedManifestWork, lay a remembered completion over it, and then either watch a
/// completed work's TTL or apply the work and report.
async fn reconcile_work(work: Arc<ManifestWork>, ctx: &Context) -> Result<Action, Error> {
    // Asked once: whether the hub's source must hear the agent's writes decides in every phase.
    let source = ctx.hub.source_hearing();
    let work = ctx.status.fresher(work);
    if work.metadata.deletion_timestamp.is_some() {
        return finalize(&work, source, ctx).await;
    }
    let work = hold_finalizer(work, ctx).await?;
    let Some(applied) = applied_record(&work, source, ctx).await? else {
        // Its AppliedManifestWork is being deleted: re-created once it is gone (its deletion
        // event re-queues the work).
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    let remembered = remembered_completion(&applied, source);
    let restored = remembered
        .as_ref()
        .and_then(|r| completion_memory::restore(&work, r));
    let hub_copy = work;
    let work = restored.map_or_else(|| hub_copy.clone(), Arc::new);
    if manifests::work_is_complete(work.status.as_ref()) {
        if let Some(remembered) = &remembered {
            republish_completion(&hub_copy, remembered, ctx).await?;
        }
        // Nothing of a completed work is written again; only its TTL is watched.
        let name = work.name_any();
        ctx.states.set(&ctx.metrics, &name, Some("complete"));
        ctx.backoff.clear(&name);
        return ttl::ttl_step(&work, ctx).await;
    }
    apply_and_report(&work, applied, remembered, source, ctx).await
}

/// A work being deleted: its cleanup, unless the agent released it already.
async fn finalize(
    work: &ManifestWork,
    source: Option<&dyn SourceHearing>,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = work.name_any();
    ctx.backoff.clear(&name);
    if ctx.status.is_released(&name) {
        // Finalized already; the store has not seen the deletion yet.
        return Ok(Action::await_change());
    }
    deletion::finalize_work(work, source, ctx).await
}

/// `work` with the agent's finalizer, written when it lacks it. The patched object (new
/// resourceVersion) saves the status writer a conflict.
async fn hold_finalizer(
    work: Arc<ManifestWork>,
    ctx: &Context,
) -> Result<Arc<ManifestWork>, Error> {
    let Some(finalizers) = with_finalizer(work.finalizers(), MANIFEST_WORK_FINALIZER) else {
        return Ok(work);
    };
    let patched = ctx
        .hub
        .set_finalizers(work.as_ref(), finalizers)
        .await
        .map_err(Error::Hub)?;
    ctx.status.record(patched.clone());
    Ok(Arc::new(patched))
}

/// The work's AppliedManifestWork, created when missing; `None` when it is being deleted on the
/// spoke (its resources are cleaned up first).
async fn applied_record(
    work: &ManifestWork,
    source: Option<&dyn SourceHearing>,
    ctx: &Context,
) -> Result<Option<AppliedManifestWork>, Error> {
    let labels = work.metadata.labels.clone().unwrap_or_default();
    // A new AppliedManifestWork is created with the resources the work is about to own: no write
    // of the record needs to precede their creates. A completed work applies nothing.
    let initial = async {
        if manifests::work_is_complete(work.status.as_ref()) {
            Vec::new()
        } else {
            apply::owned_resources(work, ctx).await
        }
    };
    let state = ctx
        .applied
        .ensure(&ctx.config, &work.name_any(), &labels, initial)
        .await
        .map_err(Error::Spoke)?;
    match state {
        AppliedState::Ready(applied) => Ok(Some(applied)),
        AppliedState::Deleting(amw)
            if deletion::keeps_record_until_heard(source.is_some(), &amw) =>
        {
            // Deleted on the spoke, but it holds the work's completion, which nothing else
            // keeps: its resources go, the record stays (until the work is deleted and its source
            // heard it), and the work stays complete. So it is for a completed work the source
            // sends back after a restart because it never heard its deletion.
            deletion::cleanup_resources(&amw, Some(work), ctx).await?;
            Ok(Some(amw))
        }
        AppliedState::Deleting(amw) => {
            deletion::cleanup_applied(&amw, Some(work), ctx).await?;
            Ok(None)
        }
    }
}

/// Behind a hub that does not give the status back after a restart, the completion kept on the
/// spoke: it is laid over the work first, so nothing completed is applied again.
fn remembered_completion(
    applied: &AppliedManifestWork,
    source: Option<&dyn SourceHearing>,
) -> Option<Remembered> {
    source.and_then(|_| Remembered::from_annotations(applied.metadata.annotations.as_ref()))
}

/// Applies the work, prunes what left it, writes its status (a completion kept on the spoke
/// first, behind a broker) and its AppliedManifestWork's record, and says when to come back.
async fn apply_and_report(
    work: &ManifestWork,
    applied: AppliedManifestWork,
    remembered: Option<Remembered>,
    source: Option<&dyn SourceHearing>,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = work.name_any();
    let applied = record_before_creating(work, applied, ctx).await?;
    let outcome = apply::apply_work(work, &applied, ctx).await;
    let before = record::recorded(&applied);
    let not_pruned = prune(work, &applied, &before, &outcome.applied, ctx).await;
    let mut now_applied = outcome.applied.clone();
    now_applied.extend(not_pruned.iter().cloned());
    let now_applied = manifests::normalize_applied(now_applied);

    let generation = work.metadata.generation;
    // One instant for the whole status: what is kept on the spoke and what the hub is sent carry
    // the same completion time.
    let plan = StatusPlan {
        desired: DesiredStatus {
            manifests: outcome.manifests,
            deleting: false,
        },
        observed_generation: generation,
        at: Time(Timestamp::now()),
        // Only where the hub keeps no status: over a kept one nothing is dated anew.
        applied_since: source.and_then(|_| applied.metadata.creation_timestamp.clone()),
    };
    // Behind a broker the completion is kept on the spoke before the source hears of it: an agent
    // stopped between the two would otherwise apply the completed work again after a restart.
    let mut remembered = remembered.unwrap_or_default();
    if source.is_some() {
        let planned = plan.over(work.status.as_ref());
        remembered = remember(work, &applied, remembered, Some(&planned), ctx).await?;
    }
    let written = ctx
        .status
        .write(work, |current| {
            let new = plan.over(current.status.as_ref());
            status::differs(current.status.as_ref(), &new).then_some(new)
        })
        .await?;
    // The status goes first, as upstream's agent writes it before its AppliedManifestWork
    // controller records the resources: new resources are recorded already (before they were
    // created), and what follows here (their UIDs, pruned ones dropped) is not worth a status
    // waiting behind it. Should the agent stop in between, the next reconcile writes it.
    if manifests::normalize_applied(before) != now_applied {
        ctx.applied
            .write_resources(&applied, &now_applied)
            .await
            .map_err(Error::Spoke)?;
    }
    let current_status = written
        .as_ref()
        .and_then(|w| w.status.as_ref())
        .or(work.status.as_ref());
    if source.is_some() {
        // The written status may hold more than planned (it was built on the hub's latest copy).
        remember(work, &applied, remembered, current_status, ctx).await?;
    }
    ctx.states.set(
        &ctx.metrics,
        &name,
        Some(status::work_state(current_status, false)),
    );
    // Resources still being pruned stay indexed: their going wakes the work.
    let mut keys = outcome.keys;
    keys.extend(not_pruned.iter().map(|res| ObjectKey {
        group: res.group.clone(),
        resource: res.resource.clone(),
        namespace: res.namespace.clone(),
        name: res.name.clone(),
    }));
    ctx.watches.set_work(&name, keys);
    ctx.watches
        .keep_object_watches(&name, &outcome.object_watches);
    if let Some(new) = &written
        && let Some(new_status) = &new.status
        && status::became_complete(work.status.as_ref(), new_status)
    {
        record_completion(work, ctx);
        // The agent's own status write does not re-queue the work: its TTL starts here.
        ctx.states.set(&ctx.metrics, &name, Some("complete"));
        ctx.backoff.clear(&name);
        return ttl::ttl_step(new, ctx).await;
    }
    let retry = Retry {
        failures: &outcome.failures,
        pruning: !not_pruned.is_empty(),
        transient_failure: outcome.transient_failure,
        has_readonly: outcome.has_readonly,
        awaiting_discovery: outcome.awaiting_discovery,
        recheck_at: outcome.recheck_at,
    };
    Ok(retry.action(&name, generation, ctx))
}

/// What an applied work may need to come back for.
struct Retry<'a> {
    failures: &'a [String],
    pruning: bool,
    transient_failure: bool,
    has_readonly: bool,
    awaiting_discovery: bool,
    /// When a held rule condition is due (looked at again then; the decision is the times').
    recheck_at: Option<Timestamp>,
}

impl Retry<'_> {
    /// When to reconcile the work again: the soonest of its backoff, a transient retry and the
    /// read-only resync; else on its next change (the resync sweep, `resync`, visits every work
    /// once a status-sync period).
    fn action(&self, name: &str, generation: Option<i64>, ctx: &Context) -> Action {
        let mut next: Option<Duration> = None;
        let mut sooner = |wait: Duration| next = Some(next.map_or(wait, |n| n.min(wait)));
        if self.failures.is_empty() {
            ctx.backoff.clear(name);
        } else {
            let (wait, new) = ctx.backoff.blocked(name, generation, self.failures);
            for failure in new {
                tracing::warn!(work = %name, error = %failure, "manifest not applied; retrying with backoff");
            }
            sooner(wait);
        }
        if self.pruning || self.transient_failure {
            sooner(TRANSIENT_RETRY);
        }
        if self.has_readonly {
            sooner(ctx.config.readonly_resync);
        }
        if self.awaiting_discovery {
            sooner(DISCOVERY_RETRY);
        }
        if let Some(due) = self.recheck_at {
            let left = due.duration_since(Timestamp::now());
            // A few milliseconds late rather than early: a look before the hold is over finds it
            // still held and only comes back again.
            let wait = Duration::try_from(left).unwrap_or(Duration::ZERO) + HOLD_MARGIN;
            sooner(wait);
        }
        next.map_or_else(Action::await_change, Action::requeue)
    }
}

/// Records the resources the work is about to own that are not recorded yet, before any is
/// written: whenever a resource of the work exists, its AppliedManifestWork lists it, so a cleanup
/// (prune, deletion, eviction) or whoever reads the record never misses one, whenever it looks
/// and whenever the agent stops. Their UIDs follow with the record after the apply. One write
/// for a work that adds resources; none when nothing is new.
async fn record_before_creating(
    work: &ManifestWork,
    applied: AppliedManifestWork,
    ctx: &Context,
) -> Result<AppliedManifestWork, Error> {
    let new = apply::unrecorded(work, &applied, ctx).await;
    if new.is_empty() {
        return Ok(applied);
    }
    let mut all = record::recorded(&applied);
    all.extend(new);
    ctx.applied
        .write_resources(&applied, &manifests::normalize_applied(all))
        .await
        .map_err(Error::Spoke)
}

/// Keeps on the spoke the completion in `status` that `remembered` lacks; the memory now.
async fn remember(
    work: &ManifestWork,
    applied: &AppliedManifestWork,
    remembered: Remembered,
    status: Option<&ManifestWorkStatus>,
    ctx: &Context,
) -> Result<Remembered, Error> {
    let now = Remembered::of_status(status).of_work(work);
    if !now.adds_to(&remembered) {
        return Ok(remembered);
    }
    let text = serde_json::to_string(&now).map_err(|e| Error::Spoke(kube::Error::SerdeError(e)))?;
    ctx.applied
        .annotate(applied, completion_memory::ANNOTATION, &text)
        .await
        .map_err(Error::Spoke)?;
    Ok(now)
}

/// Gives a hub that lost the work's status (a restarted agent behind a broker) the completion
/// kept on the spoke, with its original times (the TTL counts from them). `work` is the hub's
/// copy, without what was restored.
async fn republish_completion(
    work: &ManifestWork,
    remembered: &Remembered,
    ctx: &Context,
) -> Result<(), Error> {
    ctx.status
        .write(work, |current| {
            completion_memory::restore(current, remembered).and_then(|restored| restored.status)
        })
        .await?;
    Ok(())
}

fn record_completion(work: &ManifestWork, ctx: &Context) {
    ctx.metrics.completions_total.inc();
    if let Some(created) = &work.metadata.creation_timestamp {
        let secs = Timestamp::now().duration_since(created.0).as_secs_f64();
        ctx.metrics.time_to_complete_seconds.observe(secs.max(0.0));
    }
    tracing::info!(work = %work.name_any(), "work is Complete");
}

/// Deletes (or releases, when orphaned) resources no longer in the work. Returns the entries
/// that stay recorded: those whose deletion failed (retried) and those still terminating
/// (finalizers hold them; indexed, so their going wakes the work, and dropped once gone).
async fn prune(
    work: &ManifestWork,
    applied: &AppliedManifestWork,
    before: &[AppliedManifestResourceMeta],
    now: &[AppliedManifestResourceMeta],
    ctx: &Context,
) -> Vec<AppliedManifestResourceMeta> {
    let owner_uid = applied.metadata.uid.clone().unwrap_or_default();
    let option = work.spec.delete_option.as_ref();
    let mut failed = Vec::new();
    for res in manifests::removed_resources(before, now) {
        let orphan =
            manifests::is_orphaned(option, &res.group, &res.resource, &res.namespace, &res.name);
        // Whether our deletion is still under way: the cache may say so (then the work waits);
        // whether to delete at all is decided on the live object by the applier.
        let cached = deletion::cached_of(ctx, &res).await.doubting_absence();
        if !orphan && deletion::still_terminating(&res, &owner_uid, &cached) {
            deletion::watch_for_gone(ctx, &work.name_any(), &res);
            failed.push(res);
            continue;
        }
        let result = if orphan {
            ctx.applier
                .release(&res, &owner_uid)
                .await
                .map(|()| "released")
        } else {
            ctx.applier
                .delete_owned(&res, &owner_uid, PropagationPolicy::Background)
                .await
                .map(|outcome| {
                    if outcome == applier::DeleteOutcome::Terminating {
                        deletion::watch_for_gone(ctx, &work.name_any(), &res);
                        failed.push(res.clone());
                    }
                    outcome.describe()
                })
        };
        match result {
            Ok(what) => tracing::info!(work = %work.name_any(), resource = %res.resource,
                namespace = %res.namespace, name = %res.name, "{what}: a resource no longer in the work"),
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                tracing::warn!(work = %work.name_any(), resource = %res.resource,
                    namespace = %res.namespace, name = %res.name, error = %e, "pruning failed");
                failed.push(res);
            }
        }
    }
    failed
}
