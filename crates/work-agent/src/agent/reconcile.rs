//! The ManifestWork reconcile: finalizer, AppliedManifestWork, apply, prune, status, TTL.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use conditions::{Availability, ConditionUpdate, Status, reasons};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use work_api::{
    APPLIED_MANIFEST_WORK_FINALIZER, AppliedManifestResourceMeta, AppliedManifestWork,
    AppliedManifestWorkSpec, MANIFEST_WORK_FINALIZER, ManifestWork, StatusFeedbackResult,
    UpdateStrategyType,
};

use super::context::Context;
use super::error::Error;
use super::manifests::{self, ManifestId};
use super::status::{self, DesiredStatus, ManifestDesired};
use super::watches::ObjectKey;
use super::{deletion, executor, feedback, states};
use crate::metrics::{ApplyLabels, RuleResultLabels, StrategyLabels};

/// Delay before retrying a manifest whose apply failed for a reason that may pass by itself.
const TRANSIENT_RETRY: Duration = Duration::from_secs(5);

/// Reconciles one ManifestWork.
pub async fn reconcile(work: Arc<ManifestWork>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = work.name_any();
    if work.metadata.deletion_timestamp.is_some() {
        return deletion::finalize_work(&work, &ctx).await;
    }
    // The patched object (new resourceVersion) saves the status writer a conflict.
    let work = match ensure_finalizer(&ctx.works(), work.as_ref(), MANIFEST_WORK_FINALIZER)
        .await
        .map_err(Error::Hub)?
    {
        Some(patched) => Arc::new(patched),
        None => work,
    };
    let Some(applied) = ensure_applied_work(&work, &ctx).await? else {
        // Its AppliedManifestWork is being deleted on the spoke: re-create it once it is gone.
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    if manifests::work_is_complete(work.status.as_ref()) {
        // Nothing of a completed work is written again; only its TTL is watched.
        states::set(&ctx, &name, Some("complete"));
        ctx.watches.remove_work(&name);
        return ttl_step(&work, &ctx).await;
    }

    let outcome = apply_manifests(&work, &applied, &ctx).await;
    let before = applied
        .status
        .as_ref()
        .map(|s| s.applied_resources.clone())
        .unwrap_or_default();
    let not_pruned = prune(&work, &applied, &before, &outcome.applied, &ctx).await;
    let mut now_applied = outcome.applied.clone();
    now_applied.extend(not_pruned.iter().cloned());
    let now_applied = manifests::normalize_applied(now_applied);
    if manifests::normalize_applied(before) != now_applied {
        write_applied_resources(&ctx, &applied, &now_applied).await?;
    }

    let generation = work.metadata.generation;
    let desired = outcome.desired;
    let written = ctx
        .status
        .write(&work, |current| {
            let new = status::build_status(
                current.status.as_ref(),
                &desired,
                generation,
                Time(Timestamp::now()),
            );
            status::differs(current.status.as_ref(), &new).then_some(new)
        })
        .await?;
    let current_status = written.as_ref().or(work.status.as_ref());
    states::set(&ctx, &name, Some(status::work_state(current_status, false)));
    if let Some(new) = &written
        && status::became_complete(work.status.as_ref(), new)
    {
        record_completion(&work, &ctx);
    }
    ctx.watches.set_work(&name, outcome.keys);

    if !not_pruned.is_empty() || outcome.transient_failure {
        return Ok(Action::requeue(TRANSIENT_RETRY));
    }
    if written
        .as_ref()
        .is_some_and(|s| manifests::work_is_complete(Some(s)))
    {
        // The status write re-queues the work through the watch; TTL is handled then.
        return Ok(Action::requeue(resync_after(&ctx, &name)));
    }
    if outcome.has_readonly {
        return Ok(Action::requeue(ctx.config.readonly_resync));
    }
    Ok(Action::requeue(resync_after(&ctx, &name)))
}

/// The safety-net resync period plus a per-work spread of up to 10 %, so that works created
/// together do not all resync at the same moment.
fn resync_after(ctx: &Context, work: &str) -> Duration {
    let period = ctx.config.status_sync_period;
    spread(period, work)
}

fn spread(period: Duration, key: &str) -> Duration {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let max_extra = period.as_millis() as u64 / 10;
    if max_extra == 0 {
        return period;
    }
    period + Duration::from_millis(hash % max_extra)
}

fn record_completion(work: &ManifestWork, ctx: &Context) {
    ctx.metrics.completions_total.inc();
    if let Some(created) = &work.metadata.creation_timestamp {
        let secs = Timestamp::now().duration_since(created.0).as_secs_f64();
        ctx.metrics.time_to_complete_seconds.observe(secs.max(0.0));
    }
    tracing::info!(work = %work.name_any(), "work is Complete");
}

/// TTL garbage collection of a completed work: requeue for exactly the time left, or delete.
async fn ttl_step(work: &ManifestWork, ctx: &Context) -> Result<Action, Error> {
    let name = work.name_any();
    match gc::next_action(work, Timestamp::now()) {
        gc::GcAction::NotEligible => {
            states::set_ttl_pending(ctx, &name, false);
            Ok(Action::await_change())
        }
        gc::GcAction::WaitFor(left) => {
            states::set_ttl_pending(ctx, &name, true);
            Ok(Action::requeue(left))
        }
        gc::GcAction::DeleteNow { .. } => {
            let uid = work.metadata.uid.clone().unwrap_or_default();
            let outcome = gc::collect(&ctx.works(), &ctx.recorder, &name, &uid)
                .await
                .inspect_err(|_| super::ttl_failures::failed(ctx))?;
            if let Some(retry) = super::ttl_failures::observe(ctx, &name, outcome) {
                return Ok(retry);
            }
            match outcome {
                gc::GcOutcome::Deleted { lag } => {
                    states::set_ttl_pending(ctx, &name, false);
                    ctx.metrics.ttl_deletions_total.inc();
                    ctx.metrics
                        .ttl_deletion_lag_seconds
                        .observe(lag.as_secs_f64());
                    tracing::info!(work = %name, "deleted by TTL after completion");
                    Ok(Action::await_change())
                }
                gc::GcOutcome::NotYetDue(left) => Ok(Action::requeue(left)),
                _ => {
                    states::set_ttl_pending(ctx, &name, false);
                    Ok(Action::await_change())
                }
            }
        }
    }
}

/// Adds a finalizer if missing (optimistic locking on resourceVersion); returns the patched
/// object when it wrote.
pub(super) async fn ensure_finalizer<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if obj.finalizers().iter().any(|f| f == finalizer) {
        return Ok(None);
    }
    let mut finalizers = obj.finalizers().to_vec();
    finalizers.push(finalizer.to_string());
    set_finalizers(api, obj, finalizers).await.map(Some)
}

/// Replaces the finalizer list (optimistic locking on resourceVersion); returns the new object.
pub(super) async fn set_finalizers<K>(
    api: &Api<K>,
    obj: &K,
    finalizers: Vec<String>,
) -> Result<K, kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": obj.resource_version(),
        }
    });
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
}

/// The work's AppliedManifestWork, created with its finalizer when missing. `None` while it is
/// being deleted (its resources are cleaned up first).
async fn ensure_applied_work(
    work: &ManifestWork,
    ctx: &Context,
) -> Result<Option<AppliedManifestWork>, Error> {
    let api = ctx.applied_works();
    let name = ctx.config.applied_name(&work.name_any());
    match api.get_opt(&name).await.map_err(Error::Spoke)? {
        Some(amw) if amw.metadata.deletion_timestamp.is_some() => {
            deletion::cleanup_applied(&amw, work.spec.delete_option.as_ref(), ctx).await?;
            Ok(None)
        }
        Some(amw) => {
            let patched = ensure_finalizer(&api, &amw, APPLIED_MANIFEST_WORK_FINALIZER)
                .await
                .map_err(Error::Spoke)?;
            Ok(Some(patched.unwrap_or(amw)))
        }
        None => {
            let amw = AppliedManifestWork {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    finalizers: Some(vec![APPLIED_MANIFEST_WORK_FINALIZER.to_string()]),
                    ..Default::default()
                },
                spec: AppliedManifestWorkSpec {
                    hub_hash: ctx.config.hub_hash.clone(),
                    agent_id: ctx.config.agent_id.clone(),
                    manifest_work_name: work.name_any(),
                },
                status: None,
            };
            match api.create(&PostParams::default(), &amw).await {
                Ok(created) => Ok(Some(created)),
                Err(kube::Error::Api(s)) if s.is_already_exists() => {
                    api.get_opt(&name).await.map_err(Error::Spoke)
                }
                Err(e) => Err(Error::Spoke(e)),
            }
        }
    }
}

async fn write_applied_resources(
    ctx: &Context,
    applied: &AppliedManifestWork,
    resources: &[AppliedManifestResourceMeta],
) -> Result<(), Error> {
    let patch = json!({ "status": { "appliedResources": resources } });
    ctx.applied_works()
        .patch_status(
            &applied.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(Error::Spoke)?;
    Ok(())
}

/// Deletes (or releases, when orphaned) resources no longer in the work. Returns the entries
/// that could not be handled yet, so they stay recorded and are retried.
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
        let result = if orphan {
            ctx.applier
                .release(&res, &owner_uid)
                .await
                .map(|_| "released")
        } else {
            ctx.applier
                .delete_owned(&res, &owner_uid, PropagationPolicy::Background)
                .await
                .map(|_| "deleted")
        };
        match result {
            Ok(what) => tracing::info!(work = %work.name_any(), resource = %res.resource,
                namespace = %res.namespace, name = %res.name, "{what} a resource no longer in the work"),
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

/// What applying a work's manifests found.
struct ApplyOutcome {
    desired: DesiredStatus,
    applied: Vec<AppliedManifestResourceMeta>,
    keys: Vec<ObjectKey>,
    has_readonly: bool,
    transient_failure: bool,
}

fn strategy_label(t: &UpdateStrategyType) -> &'static str {
    match t {
        UpdateStrategyType::Update => "Update",
        UpdateStrategyType::CreateOnly => "CreateOnly",
        UpdateStrategyType::ServerSideApply => "ServerSideApply",
        UpdateStrategyType::ReadOnly => "ReadOnly",
        _ => "Unknown",
    }
}

fn outcome_label(o: &applier::ApplyOutcome) -> &'static str {
    match o {
        applier::ApplyOutcome::Created => "created",
        applier::ApplyOutcome::Updated => "updated",
        applier::ApplyOutcome::CompleteBeforeUpdate => "skipped_complete",
        _ => "unchanged",
    }
}

fn rule_result_label(u: &ConditionUpdate) -> &'static str {
    match u.status {
        Status::True => "true",
        Status::False if u.reason == reasons::CONDITION_RULE_EXPRESSION_ERROR => "error",
        Status::False => "false",
        Status::Unknown => "unknown",
    }
}

/// Applies every manifest (in apply order) that is not already complete, and collects what status
/// each should have. Failures of one manifest do not stop the others.
async fn apply_manifests(
    work: &ManifestWork,
    applied_work: &AppliedManifestWork,
    ctx: &Context,
) -> ApplyOutcome {
    let raw: Vec<serde_json::Value> = work
        .spec
        .workload
        .manifests
        .iter()
        .map(|m| m.0.clone())
        .collect();
    let old_status = work.status.as_ref();
    let previously: Vec<AppliedManifestResourceMeta> = applied_work
        .status
        .as_ref()
        .map(|s| s.applied_resources.clone())
        .unwrap_or_default();
    let owner = applier::owner_reference(applied_work);
    let labels = BTreeMap::from([(
        applier::AGENT_LABEL.to_string(),
        ctx.config.label_value.clone(),
    )]);
    let mut slots: Vec<Option<ManifestDesired>> = vec![None; raw.len()];
    let mut out = ApplyOutcome {
        desired: DesiredStatus {
            manifests: Vec::new(),
            deleting: false,
        },
        applied: Vec::new(),
        keys: Vec::new(),
        has_readonly: false,
        transient_failure: false,
    };
    let carry_over =
        |id: &ManifestId, resource: Option<&str>| -> Vec<AppliedManifestResourceMeta> {
            previously
                .iter()
                .filter(|p| {
                    p.group == id.group
                        && p.namespace == id.namespace
                        && p.name == id.name
                        && resource.is_none_or(|r| r.is_empty() || p.resource == r)
                })
                .cloned()
                .collect()
        };

    for idx in applier::apply_order(&raw) {
        // apply_order returns a permutation of the indexes; anything else is skipped, not a panic.
        let Some(manifest) = raw.get(idx) else {
            continue;
        };
        let id = match manifests::identify(manifest) {
            Ok(id) => id,
            Err(e) => {
                let meta = work_api::ManifestResourceMeta {
                    ordinal: i32::try_from(idx).unwrap_or(i32::MAX),
                    ..Default::default()
                };
                let msg = e.to_string();
                slots_set(
                    &mut slots,
                    idx,
                    ManifestDesired::Conditions {
                        meta,
                        updates: vec![conditions::applied_condition(Err(&msg))],
                        feedback: None,
                    },
                );
                continue;
            }
        };
        if let Some(entry) = manifests::completed_entry(old_status, &id) {
            // Sticky: never evaluated, updated or re-created again.
            let mut kept = entry.clone();
            kept.resource_meta.ordinal = i32::try_from(idx).unwrap_or(i32::MAX);
            out.applied
                .extend(carry_over(&id, Some(kept.resource_meta.resource.as_str())));
            slots_set(&mut slots, idx, ManifestDesired::Keep(kept));
            continue;
        }
        let resolved = match ctx.resolver.resolve(&id.api_version, &id.kind).await {
            Ok(r) => r,
            Err(e) => {
                out.transient_failure |= e.is_transient();
                out.applied.extend(carry_over(&id, None));
                let msg = e.to_string();
                slots_set(
                    &mut slots,
                    idx,
                    ManifestDesired::Conditions {
                        meta: manifests::resource_meta(idx, &id, ""),
                        updates: vec![conditions::applied_condition(Err(&msg))],
                        feedback: None,
                    },
                );
                continue;
            }
        };
        let settings = manifests::settings_for(
            &work.spec.manifest_configs,
            &id.group,
            &resolved.plural,
            &id.namespace,
            &id.name,
        );
        let readonly = settings.strategy.type_ == UpdateStrategyType::ReadOnly;
        let orphan = manifests::is_orphaned(
            work.spec.delete_option.as_ref(),
            &id.group,
            &resolved.plural,
            &id.namespace,
            &id.name,
        );
        // ReadOnly only reads, which the agent does with its own identity.
        let permitted = if readonly {
            Ok(())
        } else {
            ctx.executor
                .check(
                    work.spec.executor.as_ref(),
                    &executor::Target {
                        group: resolved.group.clone(),
                        version: resolved.version.clone(),
                        resource: resolved.plural.clone(),
                        namespace: id.namespace.clone(),
                        name: id.name.clone(),
                    },
                    !orphan,
                )
                .await
        };
        if let Err(msg) = permitted {
            // Re-checked soon: a grant of the missing permission takes effect without an edit.
            out.transient_failure = true;
            out.applied
                .extend(carry_over(&id, Some(resolved.plural.as_str())));
            slots_set(
                &mut slots,
                idx,
                ManifestDesired::Conditions {
                    meta: manifests::resource_meta(idx, &id, &resolved.plural),
                    updates: vec![conditions::applied_condition(Err(&msg))],
                    feedback: None,
                },
            );
            continue;
        }
        let complete_rules = manifests::complete_rules(&settings.rules);
        let strategy = strategy_label(&settings.strategy.type_);
        let started = Instant::now();
        let result = ctx
            .applier
            .apply(applier::ApplyRequest {
                manifest,
                strategy: &settings.strategy,
                owner: (!readonly && !orphan).then(|| owner.clone()),
                labels: &labels,
                complete_rules: &complete_rules,
            })
            .await;
        ctx.metrics
            .apply_duration_seconds
            .get_or_create(&StrategyLabels { strategy })
            .observe(started.elapsed().as_secs_f64());
        let meta = manifests::resource_meta(idx, &id, &resolved.plural);
        out.keys.push(ObjectKey {
            group: resolved.group.clone(),
            resource: resolved.plural.clone(),
            namespace: id.namespace.clone(),
            name: id.name.clone(),
        });
        if readonly {
            out.has_readonly = true;
        } else {
            ctx.watches.ensure(&resolved);
        }
        let mut updates = Vec::new();
        let mut feedback = None;
        match result {
            Ok(done) => {
                ctx.metrics
                    .applies_total
                    .get_or_create(&ApplyLabels {
                        strategy,
                        result: outcome_label(&done.outcome),
                    })
                    .inc();
                updates.push(conditions::applied_condition(Ok(())));
                updates.push(conditions::available_condition(if done.object.is_some() {
                    Availability::Exists
                } else {
                    Availability::Missing
                }));
                if let Some(object) = &done.object {
                    if !readonly && !orphan {
                        let uid = object
                            .pointer("/metadata/uid")
                            .and_then(|v| v.as_str())
                            .unwrap_or_default();
                        out.applied.push(AppliedManifestResourceMeta {
                            group: resolved.group.clone(),
                            version: resolved.version.clone(),
                            resource: resolved.plural.clone(),
                            name: id.name.clone(),
                            namespace: id.namespace.clone(),
                            uid: uid.to_string(),
                        });
                    }
                    if !settings.rules.is_empty() {
                        let started = Instant::now();
                        let rule_updates = ctx.evaluator.evaluate_manifest(&settings.rules, object);
                        ctx.metrics
                            .rule_evaluation_duration_seconds
                            .observe(started.elapsed().as_secs_f64());
                        for u in &rule_updates {
                            ctx.metrics
                                .rule_evaluations_total
                                .get_or_create(&RuleResultLabels {
                                    result: rule_result_label(u),
                                })
                                .inc();
                        }
                        updates.extend(rule_updates);
                    }
                }
                if !settings.feedback_rules.is_empty() {
                    let (values, error) = match &done.object {
                        Some(object) => feedback::collect(
                            &settings.feedback_rules,
                            &resolved.group,
                            &resolved.version,
                            &resolved.kind,
                            object,
                        ),
                        None => (Vec::new(), Some("the resource does not exist".to_string())),
                    };
                    updates.push(conditions::feedback_condition(match &error {
                        Some(e) => Err(e.as_str()),
                        None => Ok(()),
                    }));
                    feedback = Some(StatusFeedbackResult { values });
                }
            }
            Err(e) => {
                ctx.metrics
                    .applies_total
                    .get_or_create(&ApplyLabels {
                        strategy,
                        result: if e.is_conflict() { "conflict" } else { "error" },
                    })
                    .inc();
                tracing::warn!(work = %work.name_any(), manifest = idx, error = %e, "apply failed");
                out.transient_failure |= e.is_transient();
                out.applied
                    .extend(carry_over(&id, Some(resolved.plural.as_str())));
                let msg = e.to_string();
                updates.push(conditions::applied_condition(Err(&msg)));
            }
        }
        slots_set(
            &mut slots,
            idx,
            ManifestDesired::Conditions {
                meta,
                updates,
                feedback,
            },
        );
    }
    out.desired.manifests = slots.into_iter().flatten().collect();
    out
}

fn slots_set(slots: &mut [Option<ManifestDesired>], idx: usize, desired: ManifestDesired) {
    if let Some(slot) = slots.get_mut(idx) {
        *slot = Some(desired);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resync_spread_stays_within_ten_percent_and_differs_per_work() {
        let period = Duration::from_secs(300);
        let a = spread(period, "work-a");
        let b = spread(period, "work-b");
        for d in [a, b] {
            assert!(d >= period && d < period + Duration::from_secs(30), "{d:?}");
        }
        assert_ne!(a, b);
        assert_eq!(
            spread(Duration::from_millis(5), "x"),
            Duration::from_millis(5)
        );
    }
}
