//! TTL garbage collection of a completed work: wait for exactly the time left, then delete it.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::Event;
use work_api::ManifestWork;

use crate::error::Error;
use crate::hub::Hub;
use crate::work::context::Context;

/// TTL garbage collection of a completed work: requeue for exactly the time left, or delete.
pub async fn ttl_step(work: &ManifestWork, ctx: &Context) -> Result<Action, Error> {
    let name = work.name_any();
    match gc::next_action(work, Timestamp::now()) {
        gc::GcAction::NotEligible => {
            ctx.states.set_ttl_pending(&ctx.metrics, &name, false);
            Ok(Action::await_change())
        }
        gc::GcAction::WaitFor(left) => {
            ctx.states.set_ttl_pending(&ctx.metrics, &name, true);
            Ok(Action::requeue(left))
        }
        gc::GcAction::DeleteNow { .. } => {
            let uid = work.metadata.uid.clone().unwrap_or_default();
            let outcome = collect(
                ctx.hub.as_ref(),
                ctx.config.ttl_deletion_events,
                &name,
                &uid,
            )
            .await
            .inspect_err(|_| crate::work::ttl_failures::failed(ctx))?;
            if let Some(retry) = crate::work::ttl_failures::observe(ctx, &name, outcome) {
                return Ok(retry);
            }
            match outcome {
                gc::GcOutcome::Deleted { lag } => {
                    ctx.states.set_ttl_pending(&ctx.metrics, &name, false);
                    ctx.metrics.ttl_deletions_total.inc();
                    ctx.metrics
                        .ttl_deletion_lag_seconds
                        .observe(lag.as_secs_f64());
                    Ok(Action::await_change())
                }
                gc::GcOutcome::NotYetDue(left) => Ok(Action::requeue(left)),
                _ => {
                    ctx.states.set_ttl_pending(&ctx.metrics, &name, false);
                    Ok(Action::await_change())
                }
            }
        }
    }
}

/// Deletes work `name` through the hub if it is still the object `expected_uid`, still Complete
/// and past its TTL deadline by the clock now. The delete carries a UID precondition, so a work
/// re-created under the same name in between is never deleted by the old deadline. With
/// `deletion_event`, an Event is recorded on the deleted work (one more hub write; a failure to
/// record it is logged, not returned: the work is gone). A refused deletion always gets a
/// Warning Event.
pub async fn collect(
    hub: &dyn Hub,
    deletion_event: bool,
    name: &str,
    expected_uid: &str,
) -> Result<gc::GcOutcome, gc::GcError> {
    collect_at(hub, deletion_event, name, expected_uid, Timestamp::now).await
}

/// [`collect`] with an injected clock, read after the work is fetched.
pub async fn collect_at(
    hub: &dyn Hub,
    deletion_event: bool,
    name: &str,
    expected_uid: &str,
    now: impl Fn() -> Timestamp,
) -> Result<gc::GcOutcome, gc::GcError> {
    let work = hub
        .get_work(name)
        .await
        .map_err(|source| gc::GcError::Read {
            name: name.to_owned(),
            source,
        })?;
    let (work, lag) = match gc::recheck(work.as_ref(), expected_uid, now()) {
        Ok(lag) => match work {
            Some(work) => (work, lag),
            None => return Ok(gc::GcOutcome::AlreadyGone),
        },
        Err(outcome) => return Ok(outcome),
    };
    match gc::delete_answered(hub.delete_work(name, expected_uid).await) {
        gc::DeleteAnswer::Deleted => {}
        gc::DeleteAnswer::AlreadyGone => return Ok(gc::GcOutcome::AlreadyGone),
        gc::DeleteAnswer::Replaced => return Ok(gc::GcOutcome::Replaced),
        gc::DeleteAnswer::Forbidden(message) => {
            record(hub, &work, gc::forbidden_event(&message)).await;
            return Ok(gc::GcOutcome::Forbidden);
        }
        gc::DeleteAnswer::Failed(source) => {
            return Err(gc::GcError::Delete {
                name: name.to_owned(),
                source,
            });
        }
    }
    tracing::info!(
        namespace = work.namespace().unwrap_or_default(),
        name,
        lag_seconds = lag.as_secs_f64(),
        "deleted ManifestWork after its TTL"
    );
    if deletion_event {
        record(hub, &work, gc::deletion_event(&work, lag)).await;
    }
    Ok(gc::GcOutcome::Deleted { lag })
}

/// Records `event` on `work`; a failure is logged, not returned (the deletion stands).
async fn record(hub: &dyn Hub, work: &ManifestWork, event: Event) {
    let reason = event.reason.clone();
    if let Err(e) = hub.record_event(work, event).await {
        tracing::warn!(name = work.name_any(), reason, error = %e, "recording the TTL deletion Event failed");
    }
}

#[cfg(test)]
#[path = "ttl_tests.rs"]
mod tests;
