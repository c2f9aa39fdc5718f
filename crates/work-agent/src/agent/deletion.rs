//! Deleting a work: `Deleting` condition, delete or release its resources, wait until they are
//! gone, then remove the finalizers (AppliedManifestWork, then ManifestWork).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{DeleteParams, PropagationPolicy};
use kube::runtime::controller::Action;
use work_api::{
    APPLIED_MANIFEST_WORK_FINALIZER, AppliedManifestWork, DeleteOption, MANIFEST_WORK_FINALIZER,
    ManifestWork,
};

use super::context::Context;
use super::error::Error;
use super::reconcile::set_finalizers;
use super::{manifests, states, status};

/// How often a deletion that waits for resources to go away is re-checked (watch events on the
/// resources also re-queue it sooner).
const WAIT_FOR_GONE: Duration = Duration::from_secs(2);

/// Handles a ManifestWork with a deletionTimestamp.
pub async fn finalize_work(work: &ManifestWork, ctx: &Context) -> Result<Action, Error> {
    let name = work.name_any();
    if !work
        .finalizers()
        .iter()
        .any(|f| f == MANIFEST_WORK_FINALIZER)
    {
        return Ok(Action::await_change());
    }
    states::set(ctx, &name, Some("deleting"));
    let generation = work.metadata.generation;
    ctx.status
        .write(work, |current| {
            let new =
                status::with_deleting(current.status.as_ref(), generation, Time(Timestamp::now()));
            status::differs(current.status.as_ref(), &new).then_some(new)
        })
        .await?;

    let applied_name = ctx.config.applied_name(&name);
    let amw = ctx
        .applied_works()
        .get_opt(&applied_name)
        .await
        .map_err(Error::Spoke)?;
    if let Some(amw) = amw
        && !cleanup_applied(&amw, work.spec.delete_option.as_ref(), ctx).await?
    {
        return Ok(Action::requeue(WAIT_FOR_GONE));
    }

    let remaining: Vec<String> = work
        .finalizers()
        .iter()
        .filter(|f| *f != MANIFEST_WORK_FINALIZER)
        .cloned()
        .collect();
    match set_finalizers(&ctx.works(), work, remaining).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_not_found() => {}
        Err(e) => return Err(Error::Hub(e)),
    }
    ctx.watches.remove_work(&name);
    states::set(ctx, &name, None);
    states::set_ttl_pending(ctx, &name, false);
    tracing::info!(work = %name, "work deleted");
    Ok(Action::await_change())
}

/// Deletes (Foreground) or releases (orphaned) every resource the AppliedManifestWork owns. Once
/// all deleted ones are gone, deletes the AppliedManifestWork and removes its finalizer.
/// Returns whether that is done.
pub async fn cleanup_applied(
    amw: &AppliedManifestWork,
    option: Option<&DeleteOption>,
    ctx: &Context,
) -> Result<bool, Error> {
    let owner_uid = amw.metadata.uid.clone().unwrap_or_default();
    let resources = amw
        .status
        .as_ref()
        .map(|s| s.applied_resources.as_slice())
        .unwrap_or_default();
    let mut waiting = 0usize;
    for res in resources {
        if manifests::is_orphaned(option, &res.group, &res.resource, &res.namespace, &res.name) {
            match ctx.applier.release(res, &owner_uid).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        if still_terminating(res, &owner_uid, ctx).await? {
            waiting += 1;
            continue;
        }
        match ctx
            .applier
            .delete_owned(res, &owner_uid, PropagationPolicy::Foreground)
            .await
        {
            Ok(applier::DeleteOutcome::Deleted) => waiting += 1,
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    if waiting > 0 {
        tracing::debug!(applied = %amw.name_any(), waiting, "waiting for resources to be deleted");
        return Ok(false);
    }
    let api = ctx.applied_works();
    let name = amw.name_any();
    if amw.metadata.deletion_timestamp.is_none() {
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(true),
            Err(e) => return Err(Error::Spoke(e)),
        }
    }
    // Re-read: the delete changed its resourceVersion.
    let Some(current) = api.get_opt(&name).await.map_err(Error::Spoke)? else {
        return Ok(true);
    };
    let remaining: Vec<String> = current
        .finalizers()
        .iter()
        .filter(|f| *f != APPLIED_MANIFEST_WORK_FINALIZER)
        .cloned()
        .collect();
    if remaining.len() != current.finalizers().len() {
        match set_finalizers(&api, &current, remaining).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(Error::Spoke(e)),
        }
    }
    Ok(true)
}

/// Whether the object we deleted still exists (same UID, deletion in progress): then we wait.
async fn still_terminating(
    res: &work_api::AppliedManifestResourceMeta,
    owner_uid: &str,
    ctx: &Context,
) -> Result<bool, Error> {
    let resolved = match ctx
        .resolver
        .resolve_resource(&res.group, &res.version, &res.resource)
        .await
    {
        Ok(r) => r,
        // A type no longer served has no objects left to wait for.
        Err(applier::ApplyError::UnknownResource { .. }) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let namespace = (!res.namespace.is_empty()).then_some(res.namespace.as_str());
    let live = match ctx.applier.get(&resolved, namespace, &res.name).await {
        Ok(Some(live)) => live,
        Ok(None) => return Ok(false),
        // Also a type whose CRD went away with the work (the discovery cache still has it).
        Err(e) if e.is_not_found() => return Ok(false),
        Err(e) => return Err(e.into()),
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
    Ok(uid == Some(res.uid.as_str()) && deleting && ours)
}
