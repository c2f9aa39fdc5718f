//! TTL garbage collection of a completed work: wait for exactly the time left, then delete it.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::Event;
use work_api::ManifestWork;

use crate::context::Context;
use crate::error::Error;
use crate::hub::Hub;

/// The hub as the TTL deletion sees it.
struct HubWorks<'a>(&'a dyn Hub);

impl gc::WorkDeleter for HubWorks<'_> {
    async fn get(&self, name: &str) -> Result<Option<ManifestWork>, kube::Error> {
        self.0.get_work(name).await
    }

    async fn delete(&self, name: &str, uid: &str) -> Result<(), kube::Error> {
        self.0.delete_work(name, uid).await
    }

    async fn publish(&self, work: &ManifestWork, event: Event) -> Result<(), kube::Error> {
        self.0.record_event(work, event).await
    }
}

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
            let outcome = gc::collect(
                &HubWorks(ctx.hub.as_ref()),
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
