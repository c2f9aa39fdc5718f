//! Deleting a work: `Deleting` condition, delete or release its resources, wait until they are
//! gone, then remove the finalizers (AppliedManifestWork, then ManifestWork). An
//! AppliedManifestWork that holds a completion for a broker's source keeps its finalizer until
//! the source heard the deletion ([`keeps_record_until_heard`]).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::PropagationPolicy;
use kube::runtime::controller::Action;
use work_api::{
    APPLIED_MANIFEST_WORK_FINALIZER, AppliedManifestResourceMeta, AppliedManifestWork,
    MANIFEST_WORK_FINALIZER, ManifestWork,
};

use crate::error::Error;
use crate::finalizer_patch::set_finalizers;
use crate::hub::SourceHearing;
use crate::spoke::watches::{Cached, ObjectKey};
use crate::work::completion_memory::Remembered;
use crate::work::context::Context;
use crate::work::status;
use applier::readiness::{self, Need};
use applier::{ManifestId, gates, manifests};

/// Safety net for a deletion that waits for resources to go away: their watch events re-queue
/// the work as soon as they are gone, so this only matters if an event is lost.
const WAIT_FOR_GONE: Duration = Duration::from_secs(10);

/// How long the cleanup of a work deleted by its TTL may take before the work shows `Deleting`.
/// Cleanup usually ends within a second and the work then vanishes, so writing `Deleting` first
/// would be a hub write nobody sees; a cleanup that waits longer is shown.
const TTL_DELETING_SHOWN_AFTER: Duration = Duration::from_secs(5);

/// Whether the `Deleting` condition is written now. Always for a deletion by a hub user (as
/// upstream); for a work deleted once its TTL ran out, only when its cleanup lasts longer than
/// [`TTL_DELETING_SHOWN_AFTER`], counted from the deletionTimestamp.
pub fn shows_deleting(work: &ManifestWork, now: Timestamp) -> bool {
    if !gc::deleted_by_ttl(work) {
        return true;
    }
    let Some(deleted_at) = work.metadata.deletion_timestamp.as_ref() else {
        return true;
    };
    now.duration_since(deleted_at.0)
        .try_into()
        .is_ok_and(|waited: Duration| waited >= TTL_DELETING_SHOWN_AFTER)
}

/// Handles a ManifestWork with a deletionTimestamp; `source` is what the hub's source must hear,
/// when it must (`Hub::source_hearing`).
pub async fn finalize_work(
    work: &ManifestWork,
    source: Option<&dyn SourceHearing>,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = work.name_any();
    if !work
        .finalizers()
        .iter()
        .any(|f| f == MANIFEST_WORK_FINALIZER)
    {
        return Ok(Action::await_change());
    }
    ctx.states.set(&ctx.metrics, &name, Some("deleting"));
    let now = Timestamp::now();
    if shows_deleting(work, now) {
        let generation = work.metadata.generation;
        ctx.status
            .write(work, |current| {
                let new = status::with_deleting(current.status.as_ref(), generation, Time(now));
                status::differs(current.status.as_ref(), &new).then_some(new)
            })
            .await?;
    }

    let applied_name = ctx.config.applied_name(&name);
    let amw = ctx
        .applied
        .confirmed(&applied_name)
        .await
        .map_err(Error::Spoke)?;
    if let Some(amw) = amw {
        if amw.metadata.deletion_timestamp.is_none() {
            // As upstream's agent: the hub has taken the work's last status (`Deleting`) before
            // the cleanup starts; behind a broker, that is the source's answer to its event.
            if !status_taken(&name, source).await {
                return Ok(Action::requeue(STATUS_TAKEN_RETRY));
            }
            // As upstream's agent: the AppliedManifestWork goes first, and its resources are
            // cleaned up once its deletion is seen (its watch wakes this work). The spoke then
            // shows the cleanup under way, and a restarted agent finds it there, whatever the hub.
            delete_applied(&amw, ctx).await?;
            return Ok(Action::requeue(WAIT_FOR_GONE));
        }
        if !cleanup_resources(&amw, Some(work), ctx).await? {
            return Ok(Action::requeue(WAIT_FOR_GONE));
        }
        if keeps_record_until_heard(source.is_some(), &amw) {
            // The record holds the work's completion, and a source that has not heard the
            // deletion would send the work back after a restart: it stays until the hub heard
            // it (the eviction controller then releases it).
            tracing::debug!(work = %name, "resources removed; the AppliedManifestWork stays until the source hears the deletion");
        } else {
            release_applied(&amw, ctx).await?;
        }
    }

    let remaining: Vec<String> = work
        .finalizers()
        .iter()
        .filter(|f| *f != MANIFEST_WORK_FINALIZER)
        .cloned()
        .collect();
    // Released before the write: a hub that keeps its works in the process (a broker hub)
    // delivers the deletion to the watch during the write, and the watch's "gone" must come after
    // this mark, or the mark would outlive the work and hide a later copy of it (the same work
    // deleted again by its source) from its cleanup.
    ctx.status.forget(&name);
    match ctx.hub.set_finalizers(work, remaining).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_not_found() => {}
        Err(e) => {
            ctx.status.unrelease(&name);
            return Err(Error::Hub(e));
        }
    }
    ctx.watches.remove_work(&name);
    ctx.applied.forget(&applied_name);
    ctx.states.set(&ctx.metrics, &name, None);
    ctx.states.set_ttl_pending(&ctx.metrics, &name, false);
    tracing::info!(work = %name, "work deleted");
    Ok(Action::await_change())
}

/// How long a deletion waits in its reconcile for the source to take the work's last status.
const STATUS_TAKEN_WAIT: Duration = Duration::from_secs(1);
/// When a deletion whose last status the source has not taken is looked at again (the source is
/// away: the deletion waits for it, as upstream's agent's does).
const STATUS_TAKEN_RETRY: Duration = Duration::from_secs(2);

/// Whether the hub has taken work `name`'s last status, waiting up to [`STATUS_TAKEN_WAIT`] for
/// its source to hear it (a source answers in milliseconds). A hub without a source to hear
/// (`source` is `None`) took it with the write.
async fn status_taken(name: &str, source: Option<&dyn SourceHearing>) -> bool {
    let Some(source) = source else {
        return true;
    };
    let deadline = tokio::time::Instant::now() + STATUS_TAKEN_WAIT;
    loop {
        // Made before looking: an event taken while this looks still wakes the wait.
        let taken = source.events_taken();
        if source.status_heard(name) {
            return true;
        }
        if tokio::time::timeout_at(deadline, taken).await.is_err() {
            return source.status_heard(name);
        }
    }
}

/// Whether the AppliedManifestWork of a deleted work keeps its finalizer until the hub heard the
/// deletion: when it holds the work's `Complete` and the hub's source must hear the deletion
/// (`source_must_hear`: a broker's source, which keeps no status). Were it gone first, an agent
/// restarted before the source heard `Deleted` of a work its TTL deleted would get the work back
/// from the source and apply it again. (A work its source deleted comes back as deleting:
/// nothing is applied.)
pub fn keeps_record_until_heard(source_must_hear: bool, amw: &AppliedManifestWork) -> bool {
    source_must_hear
        && Remembered::from_annotations(amw.metadata.annotations.as_ref())
            .is_some_and(|r| r.complete.is_some())
}

/// [`cleanup_resources`], then, once they are gone, [`release_applied`]. Returns whether all is
/// done.
pub async fn cleanup_applied(
    amw: &AppliedManifestWork,
    work: Option<&ManifestWork>,
    ctx: &Context,
) -> Result<bool, Error> {
    if !cleanup_resources(amw, work, ctx).await? {
        return Ok(false);
    }
    release_applied(amw, ctx).await?;
    Ok(true)
}

/// Deletes (Background, as upstream: dependents are the garbage collector's) or releases
/// (orphaned, by `work`'s delete option) every resource the AppliedManifestWork owns, dependants
/// before what they depend on when `work` says ([`DeletionOrder`]): a resource is deleted once
/// everything of the work that depends on it is gone. Returns whether all deleted ones are gone.
/// A failure on one resource does not stop the others; the failures are returned together.
pub async fn cleanup_resources(
    amw: &AppliedManifestWork,
    manifest_work: Option<&ManifestWork>,
    ctx: &Context,
) -> Result<bool, Error> {
    let option = manifest_work.and_then(|w| w.spec.delete_option.as_ref());
    let order = manifest_work.map(DeletionOrder::of).unwrap_or_default();
    let owner_uid = amw.metadata.uid.clone().unwrap_or_default();
    let work = amw.spec.manifest_work_name.as_str();
    let applied = amw.name_any();
    let mut resources = applier::record::recorded(amw);
    // Shallowest first: what nothing depends on goes first, and what is still there holds back
    // what it depends on.
    resources.sort_by_key(|r| order.depth(r));
    let mut going_at: Option<usize> = None;
    let mut waiting = 0usize;
    let mut errors: Vec<String> = Vec::new();
    // What is still there to wait for (or failed): the AppliedManifestWork keeps recording it.
    let mut pending: Vec<work_api::AppliedManifestResourceMeta> = Vec::new();
    for res in &resources {
        let orphan =
            manifests::is_orphaned(option, &res.group, &res.resource, &res.namespace, &res.name);
        if !orphan {
            // Watched and indexed first: its deletion event then wakes this work.
            watch_for_gone(ctx, work, res);
        }
        let depth = order.depth(res);
        if !orphan && going_at.is_some_and(|d| depth > d) {
            // Something that depends on it is still going: its turn comes when that is gone
            // (whose deletion event wakes the work).
            waiting += 1;
            pending.push(res.clone());
            continue;
        }
        let before = pending.len();
        let cached = trusted(
            cached_of(ctx, res).await,
            ctx.cleanups.saw_going(&applied, &res.uid),
        );
        // Only what the store shows can later be seen going by it (a resource without the
        // agent's label, for one, never enters the store).
        let in_store = matches!(cached, Cached::Present(_));
        let going = || {
            if in_store {
                ctx.cleanups.remember(&applied, &res.uid);
            }
        };
        if orphan {
            match ctx.applier.release(res, &owner_uid).await {
                Ok(()) => going(),
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    errors.push(e.to_string());
                    pending.push(res.clone());
                }
            }
            continue;
        }
        let cached = match known(res, cached, ctx).await {
            Ok(c) => c,
            Err(e) => {
                errors.push(e.to_string());
                pending.push(res.clone());
                going_at.get_or_insert(depth);
                continue;
            }
        };
        if still_terminating(res, &owner_uid, &cached) {
            going();
            waiting += 1;
            pending.push(res.clone());
            going_at.get_or_insert(depth);
            continue;
        }
        match ctx
            .applier
            .delete_owned(res, &owner_uid, PropagationPolicy::Background)
            .await
        {
            // Gone at once: nothing to wait for.
            Ok(applier::DeleteOutcome::Deleted) => going(),
            Ok(applier::DeleteOutcome::Terminating) => {
                going();
                waiting += 1;
                pending.push(res.clone());
            }
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                errors.push(e.to_string());
                pending.push(res.clone());
            }
        }
        if pending.len() > before {
            going_at.get_or_insert(depth);
        }
    }
    if pending.len() < resources.len() && (waiting > 0 || !errors.is_empty()) {
        // Resources gone (or released) leave the record now, as they go, not all at the end.
        ctx.applied
            .write_resources(amw, &pending)
            .await
            .map_err(Error::Spoke)?;
    }
    if !errors.is_empty() {
        return Err(Error::Cleanup(errors.join("; ")));
    }
    if waiting > 0 {
        tracing::debug!(applied = %applied, waiting, "waiting for resources to be deleted");
        return Ok(false);
    }
    ctx.cleanups.forget(&applied);
    Ok(true)
}

/// Where each of a work's resources goes in its deletion: its depth in the work's graph of
/// built-in needs and declared gates ([`gates::deletion_depths`]), found by group, resource,
/// namespace and name (the resource as Kubernetes guesses it from the kind, or as the work's CRD
/// names it). A resource the work's manifests do not name goes first.
#[derive(Debug, Default)]
pub struct DeletionOrder {
    depths: Vec<(AppliedManifestResourceMeta, usize)>,
}

impl DeletionOrder {
    /// The order of `work`'s manifests (none when nothing depends on anything).
    pub fn of(work: &ManifestWork) -> Self {
        let raw: Vec<&serde_json::Value> =
            work.spec.workload.manifests.iter().map(|m| &m.0).collect();
        // Every gate is kept here, valid or not: a deletion does not check conditions.
        let plan = gates::plan_work(work, |_, _| true);
        let depths = gates::deletion_depths(&plan.deps);
        if depths.iter().all(|&d| d == 0) {
            return Self::default();
        }
        let out = raw
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let id = ManifestId::of(m).ok()?;
                let resource = plan
                    .deps
                    .get(i)
                    .into_iter()
                    .flatten()
                    .find(|d| d.need == Need::Established)
                    .and_then(|d| raw.get(d.on))
                    .and_then(|crd| readiness::crd_resource(crd, &id.version))
                    .map(|(plural, _)| plural)
                    .unwrap_or_else(|| {
                        let gvk =
                            kube::api::GroupVersionKind::gvk(&id.group, &id.version, &id.kind);
                        kube::api::ApiResource::from_gvk(&gvk).plural
                    });
                let meta = AppliedManifestResourceMeta {
                    group: id.group,
                    resource,
                    namespace: id.namespace,
                    name: id.name,
                    ..Default::default()
                };
                Some((meta, depths.get(i).copied().unwrap_or_default()))
            })
            .collect();
        DeletionOrder { depths: out }
    }

    /// The depth of a recorded resource: 0 goes first.
    pub fn depth(&self, res: &AppliedManifestResourceMeta) -> usize {
        self.depths
            .iter()
            .find(|(m, _)| {
                m.group == res.group
                    && m.resource == res.resource
                    && m.name == res.name
                    // A cluster-scoped object is recorded without the namespace its manifest may say.
                    && (m.namespace == res.namespace || res.namespace.is_empty())
            })
            .map_or(0, |(_, depth)| *depth)
    }
}

/// Deletes the AppliedManifestWork (UID precondition) unless it is being deleted, and removes
/// its finalizer.
pub async fn release_applied(amw: &AppliedManifestWork, ctx: &Context) -> Result<(), Error> {
    let api = ctx.applied.api();
    // The object to remove the finalizer from: the delete's answer (it has the new
    // resourceVersion), or the one at hand when it was already being deleted.
    let current = if amw.metadata.deletion_timestamp.is_none() {
        match delete_applied(amw, ctx).await? {
            Some(deleting) => deleting,
            None => return Ok(()),
        }
    } else {
        amw.clone()
    };
    if current.metadata.uid != amw.metadata.uid {
        return Ok(());
    }
    let remaining: Vec<String> = current
        .finalizers()
        .iter()
        .filter(|f| *f != APPLIED_MANIFEST_WORK_FINALIZER)
        .cloned()
        .collect();
    if remaining.len() != current.finalizers().len() {
        match set_finalizers(api, &current, remaining).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(Error::Spoke(e)),
        }
    }
    Ok(())
}

/// Deletes the AppliedManifestWork (Background, UID precondition): the object being deleted, or
/// None when it is gone (at once, already, or another object of that name now: not ours).
async fn delete_applied(
    amw: &AppliedManifestWork,
    ctx: &Context,
) -> Result<Option<AppliedManifestWork>, Error> {
    let params = crate::params::delete_background_of(amw.metadata.uid.clone());
    match ctx.applied.api().delete(&amw.name_any(), &params).await {
        Ok(answer) => Ok(answer.left()),
        Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 409 => Ok(None),
        Err(e) => Err(Error::Spoke(e)),
    }
}

/// Makes sure the deletion of an applied resource wakes `work`: the object in the index (its
/// type's watch is started by [`cached_of`]).
pub(crate) fn watch_for_gone(
    ctx: &Context,
    work: &str,
    res: &work_api::AppliedManifestResourceMeta,
) {
    ctx.watches.add(
        work,
        ObjectKey {
            group: res.group.clone(),
            resource: res.resource.clone(),
            namespace: res.namespace.clone(),
            name: res.name.clone(),
        },
    );
}

/// What the watch cache says about an applied resource (its type's watch started if needed);
/// `Unknown` when the type cannot be resolved or its store is not synced yet.
pub(crate) async fn cached_of(
    ctx: &Context,
    res: &work_api::AppliedManifestResourceMeta,
) -> Cached {
    match ctx
        .resolver
        .resolve_resource(&res.group, &res.version, &res.resource)
        .await
    {
        Ok(resolved) => {
            ctx.watches.ensure(&resolved);
            ctx.watches.cached(&resolved, &res.namespace, &res.name)
        }
        Err(_) => Cached::Unknown,
    }
}

/// What a cleanup may believe of the cache: absence only for a resource it saw going (deleted,
/// released or terminating). Any other may be missing only because the store is behind (a watch
/// re-listing after an API server restart, or an event still on its way), and giving it up would
/// leave it on the cluster.
fn trusted(cached: Cached, saw_going: bool) -> Cached {
    if saw_going {
        cached
    } else {
        cached.doubting_absence()
    }
}

/// The cache's answer, or the API server's when the cache does not know (one read).
async fn known(
    res: &work_api::AppliedManifestResourceMeta,
    cached: Cached,
    ctx: &Context,
) -> Result<Cached, Error> {
    match cached {
        Cached::Unknown => Ok(match read_live(res, ctx).await? {
            Some(live) => Cached::Present(live),
            None => Cached::Absent,
        }),
        known => Ok(known),
    }
}

/// Whether the object we deleted still exists (same UID, deletion in progress): then we wait.
pub(crate) fn still_terminating(
    res: &work_api::AppliedManifestResourceMeta,
    owner_uid: &str,
    cached: &Cached,
) -> bool {
    let Cached::Present(live) = cached else {
        return false;
    };
    let uid = live.pointer("/metadata/uid").and_then(|v| v.as_str());
    let deleting = live.pointer("/metadata/deletionTimestamp").is_some();
    let ours = live
        .pointer("/metadata/ownerReferences")
        .and_then(|v| v.as_array())
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r.get("uid").and_then(|u| u.as_str()) == Some(owner_uid))
        });
    uid == Some(res.uid.as_str()) && deleting && ours
}

/// Reads an applied resource; `None` when it or its type is gone.
async fn read_live(
    res: &work_api::AppliedManifestResourceMeta,
    ctx: &Context,
) -> Result<Option<serde_json::Value>, Error> {
    let resolved = match ctx
        .resolver
        .resolve_resource(&res.group, &res.version, &res.resource)
        .await
    {
        Ok(r) => r,
        // A type no longer served has no objects left to wait for.
        Err(applier::ApplyError::UnknownResource { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let namespace = (!res.namespace.is_empty()).then_some(res.namespace.as_str());
    match ctx.applier.get(&resolved, namespace, &res.name).await {
        Ok(live) => Ok(live),
        // Also a type whose CRD went away with the work (the discovery cache still has it).
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DONE: &str = "2026-01-01T10:00:00Z";

    #[test]
    fn custom_resources_and_gated_apps_are_deleted_before_what_they_need() {
        let work: ManifestWork = serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": "w", "namespace": "c", "annotations": {gates::ANNOTATION:
                r#"[{"manifest": 2, "waitFor": {"manifest": 3, "condition": "Healthy"}}]"#}},
            "spec": {"workload": {"manifests": [
                {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                 "metadata": {"name": "widgets.example.com"},
                 "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"},
                          "scope": "Cluster", "versions": [{"name": "v1"}]}},
                {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}},
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app", "namespace": "ns"}},
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "operator", "namespace": "ns"}}
            ]}}
        }))
        .expect("work");
        let order = DeletionOrder::of(&work);
        let res = |group: &str, resource: &str, namespace: &str, name: &str| {
            AppliedManifestResourceMeta {
                group: group.into(),
                resource: resource.into(),
                namespace: namespace.into(),
                name: name.into(),
                ..Default::default()
            }
        };
        let crd = order.depth(&res(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "",
            "widgets.example.com",
        ));
        let cr = order.depth(&res("example.com", "widgets", "", "w"));
        let app = order.depth(&res("apps", "deployments", "ns", "app"));
        let operator = order.depth(&res("apps", "deployments", "ns", "operator"));
        assert!(cr < crd, "the CR ({cr}) goes before its CRD ({crd})");
        assert!(
            app < operator,
            "the app ({app}) goes before the operator ({operator})"
        );
        // What the work does not name goes first; a work without needs has no order.
        assert_eq!(order.depth(&res("", "configmaps", "ns", "other")), 0);
        let plain = ManifestWork {
            spec: work_api::ManifestWorkSpec::default(),
            ..work.clone()
        };
        assert!(DeletionOrder::of(&plain).depths.is_empty());
    }

    fn work(ttl: Option<i64>, deleted: &str) -> ManifestWork {
        let mut v = json!({
            "apiVersion": "work.open-cluster-management.io/v1",
            "kind": "ManifestWork",
            "metadata": {"name": "w", "namespace": "c1", "uid": "u1",
                         "deletionTimestamp": deleted},
            "spec": {"workload": {"manifests": []}},
            "status": {"conditions": [
                {"type": "Complete", "status": "True", "reason": "ConditionRulesAggregated",
                 "message": "", "lastTransitionTime": DONE},
            ]},
        });
        if let Some(ttl) = ttl {
            v["spec"]["deleteOption"] = json!({"ttlSecondsAfterFinished": ttl});
        }
        serde_json::from_value(v).expect("test fixture is a valid ManifestWork")
    }

    fn at(s: &str) -> Timestamp {
        s.parse().expect("test timestamp")
    }

    fn applied(uid: &str) -> work_api::AppliedManifestResourceMeta {
        serde_json::from_value(json!({
            "group": "", "version": "v1", "resource": "configmaps",
            "namespace": "ns", "name": "cm", "uid": uid,
        }))
        .expect("test fixture is a valid resource meta")
    }

    fn live(uid: &str, deleting: bool, owner: &str) -> Cached {
        let mut o = json!({"metadata": {"name": "cm", "namespace": "ns", "uid": uid,
            "ownerReferences": [{"apiVersion": "work.open-cluster-management.io/v1",
                "kind": "AppliedManifestWork", "name": "a", "uid": owner}]}});
        if deleting {
            o["metadata"]["deletionTimestamp"] = json!("2026-01-01T10:00:00Z");
        }
        Cached::Present(o)
    }

    #[test]
    fn absence_is_believed_only_for_a_resource_seen_going() {
        assert_eq!(trusted(Cached::Absent, false), Cached::Unknown);
        assert_eq!(trusted(Cached::Absent, true), Cached::Absent);
        assert_eq!(trusted(Cached::Unknown, true), Cached::Unknown);
        let present = live("u1", false, "o1");
        assert_eq!(trusted(present.clone(), false), present);
    }

    #[test]
    fn only_our_object_under_deletion_is_waited_for() {
        let res = applied("u1");
        assert!(still_terminating(&res, "o1", &live("u1", true, "o1")));
        assert!(!still_terminating(&res, "o1", &live("u1", false, "o1")));
        assert!(
            !still_terminating(&res, "o1", &live("u2", true, "o1")),
            "another object of that name"
        );
        assert!(
            !still_terminating(&res, "o1", &live("u1", true, "o2")),
            "no longer ours"
        );
        assert!(!still_terminating(&res, "o1", &Cached::Absent));
    }

    #[test]
    fn a_deletion_by_a_user_shows_deleting_at_once() {
        let w = work(None, "2026-01-01T10:01:00Z");
        assert!(shows_deleting(&w, at("2026-01-01T10:01:00Z")));
        let early = work(Some(3600), "2026-01-01T10:01:00Z");
        assert!(shows_deleting(&early, at("2026-01-01T10:01:00Z")));
    }

    #[test]
    fn a_ttl_deletion_shows_deleting_only_when_cleanup_lingers() {
        let w = work(Some(30), "2026-01-01T10:00:30Z");
        assert!(!shows_deleting(&w, at("2026-01-01T10:00:30Z")));
        assert!(!shows_deleting(&w, at("2026-01-01T10:00:34Z")));
        assert!(shows_deleting(&w, at("2026-01-01T10:00:35Z")));
        // A clock behind the hub's: shown later, when it catches up.
        assert!(!shows_deleting(&w, at("2026-01-01T10:00:20Z")));
    }
}
