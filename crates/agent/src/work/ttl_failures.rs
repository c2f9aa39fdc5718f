//! Failed TTL deletions: a hub that forbids them (an OCM hub with only upstream's RBAC) gets a
//! Warning Event (recorded by the gc crate), a log line naming the work, a metric, and retries
//! with capped exponential backoff; never a crash or a tight loop.

use kube::runtime::controller::Action;

use crate::metrics::ReasonLabels;
use crate::work::context::Context;

/// Handles the outcome of a TTL deletion attempt: for [`gc::GcOutcome::Forbidden`] counts it,
/// logs it and returns the requeue after the backoff; any other outcome clears the work's
/// failure count and returns `None` (the caller goes on as usual).
pub fn observe(ctx: &Context, work: &str, outcome: gc::GcOutcome) -> Option<Action> {
    if outcome != gc::GcOutcome::Forbidden {
        ctx.states.clear_ttl_failures(work);
        return None;
    }
    count(ctx, "forbidden");
    let failures = ctx.states.record_ttl_failure(work);
    let retry = gc::forbidden_retry_after(failures);
    tracing::warn!(
        work = %work,
        namespace = %ctx.config.cluster_name,
        failures,
        retry_in_seconds = retry.as_secs(),
        "TTL deletion forbidden by the hub: the agent has no delete permission on manifestworks \
         there (see 'Replacing the upstream work agent' in docs/operations.md)"
    );
    Some(Action::requeue(retry))
}

/// Counts a TTL deletion that failed for another reason (the controller's error policy logs it
/// and retries).
pub fn failed(ctx: &Context) {
    count(ctx, "error");
}

fn count(ctx: &Context, reason: &'static str) {
    ctx.metrics
        .ttl_deletion_failures_total
        .get_or_create(&ReasonLabels { reason })
        .inc();
}
