//! Applying a work's manifests, each to one [`ManifestOutcome`]: identify, resolve, check the
//! executor, write with its strategy, observe the live object, evaluate the rules and feedback.
//! Failures of one manifest do not stop the others.

use std::collections::BTreeMap;
use std::time::Instant;

use kube::ResourceExt;
use serde_json::Value;
use work_api::{
    AppliedManifestResourceMeta, AppliedManifestWork, ManifestResourceMeta, ManifestWork,
    ManifestWorkStatus, UpdateStrategyType,
};

use crate::context::Context;
use crate::metrics::{ApplyLabels, StrategyLabels};
use crate::spoke::watches::{Cached, ObjectKey};
use crate::work::evaluate::{self, CompleteRules};
use crate::work::outcome::{Feedback, Live, ManifestOutcome, not_evaluated_because};
use crate::work::status::ManifestDesired;
use crate::{spoke::executor, spoke::feedback};
use applier::manifests::{self, ManifestId, ManifestSettings};

/// What applying a work's manifests found.
pub struct WorkOutcome {
    /// One status entry per manifest, in spec order.
    pub manifests: Vec<ManifestDesired>,
    /// The resources the work owns now (for the AppliedManifestWork).
    pub applied: Vec<AppliedManifestResourceMeta>,
    /// The objects the work uses (for the object → work index).
    pub keys: Vec<ObjectKey>,
    /// Whether some manifest is ReadOnly (read by polling: it carries no label to watch).
    pub has_readonly: bool,
    /// Whether some failure may pass by itself soon (retried after a short delay).
    pub transient_failure: bool,
    /// Why manifests are blocked (not applied, absent or unreadable), one line each.
    pub failures: Vec<String>,
}

/// Everything about one manifest a reconcile needs besides its outcome.
struct ManifestResult {
    desired: ManifestDesired,
    applied: Vec<AppliedManifestResourceMeta>,
    key: Option<ObjectKey>,
    readonly: bool,
    transient: bool,
    failure: Option<String>,
}

/// What a work's manifests share while being applied.
struct WorkScope<'a> {
    work: &'a ManifestWork,
    name: String,
    previously: Vec<AppliedManifestResourceMeta>,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    labels: BTreeMap<String, String>,
    ctx: &'a Context,
}

/// A manifest resolved to the object it names, with its settings.
struct Target {
    id: ManifestId,
    resolved: applier::ResolvedResource,
    settings: ManifestSettings,
    meta: ManifestResourceMeta,
    readonly: bool,
    orphan: bool,
}

/// The resources the work would own once applied that `applied_work` does not record yet (without
/// UIDs: they may not exist yet). Recorded before the apply, they are listed whenever they exist.
pub async fn unrecorded(
    work: &ManifestWork,
    applied_work: &AppliedManifestWork,
    ctx: &Context,
) -> Vec<AppliedManifestResourceMeta> {
    let scope = WorkScope::new(work, applied_work, ctx);
    let mut out = Vec::new();
    for (idx, manifest) in work.spec.workload.manifests.iter().enumerate() {
        let Ok(target) = scope.target(idx, &manifest.0).await else {
            continue;
        };
        if target.readonly
            || target.orphan
            || !scope
                .carry_over(&target.id, Some(&target.resolved.plural))
                .is_empty()
        {
            continue;
        }
        out.push(AppliedManifestResourceMeta {
            group: target.resolved.group.clone(),
            version: target.resolved.version.clone(),
            resource: target.resolved.plural.clone(),
            name: target.id.name.clone(),
            namespace: target.id.namespace.clone(),
            uid: String::new(),
        });
    }
    out
}

/// Applies every manifest (in apply order) that is not already complete, and collects its
/// outcome.
pub async fn apply_work(
    work: &ManifestWork,
    applied_work: &AppliedManifestWork,
    ctx: &Context,
) -> WorkOutcome {
    let raw: Vec<&Value> = work.spec.workload.manifests.iter().map(|m| &m.0).collect();
    let scope = WorkScope::new(work, applied_work, ctx);
    let owned: Vec<Value> = raw.iter().map(|v| (*v).clone()).collect();
    let mut slots: Vec<Option<ManifestDesired>> = vec![None; raw.len()];
    let mut out = WorkOutcome {
        manifests: Vec::new(),
        applied: Vec::new(),
        keys: Vec::new(),
        has_readonly: false,
        transient_failure: false,
        failures: Vec::new(),
    };
    for idx in applier::apply_order(&owned) {
        // apply_order returns a permutation of the indexes; anything else is skipped, not a panic.
        let Some(manifest) = raw.get(idx) else {
            continue;
        };
        let result = scope.manifest(idx, manifest).await;
        out.applied.extend(result.applied);
        out.keys.extend(result.key);
        out.has_readonly |= result.readonly;
        out.transient_failure |= result.transient;
        out.failures.extend(result.failure);
        if let Some(slot) = slots.get_mut(idx) {
            *slot = Some(result.desired);
        }
    }
    out.manifests = slots.into_iter().flatten().collect();
    out
}

impl<'a> WorkScope<'a> {
    fn new(work: &'a ManifestWork, applied_work: &AppliedManifestWork, ctx: &'a Context) -> Self {
        WorkScope {
            work,
            name: work.name_any(),
            previously: applied_work
                .status
                .as_ref()
                .map(|s| s.applied_resources.clone())
                .unwrap_or_default(),
            owner: applier::owner_reference(applied_work),
            labels: BTreeMap::from([(
                applier::AGENT_LABEL.to_string(),
                ctx.config.label_value.clone(),
            )]),
            ctx,
        }
    }

    /// Previously recorded resources of this object: kept while it cannot be applied, so it is
    /// not pruned.
    fn carry_over(
        &self,
        id: &ManifestId,
        resource: Option<&str>,
    ) -> Vec<AppliedManifestResourceMeta> {
        self.previously
            .iter()
            .filter(|p| {
                p.group == id.group
                    && p.namespace == id.namespace
                    && p.name == id.name
                    && resource.is_none_or(|r| r.is_empty() || p.resource == r)
            })
            .cloned()
            .collect()
    }

    /// Identifies and resolves a manifest; for one that stops there (unreadable, complete, of an
    /// unknown kind), its result instead.
    async fn target(&self, idx: usize, manifest: &Value) -> Result<Target, ManifestResult> {
        let ctx = self.ctx;
        let id = match ManifestId::of(manifest) {
            Ok(id) => id,
            Err(e) => {
                let meta = ManifestResourceMeta {
                    ordinal: i32::try_from(idx).unwrap_or(i32::MAX),
                    ..Default::default()
                };
                let message = e.to_string();
                let outcome = ManifestOutcome {
                    meta,
                    applied: Err(message.clone()),
                    ignore_fields_error: false,
                    live: Live::UnknownKind,
                    rules: Vec::new(),
                    feedback: Feedback::NoRules,
                };
                return Err(blocked(outcome, Vec::new(), None, false, message));
            }
        };
        if let Some(entry) = manifests::completed_entry(self.work.status.as_ref(), &id) {
            // Sticky: never evaluated, updated or re-created again. Still indexed, so the
            // deletion of its object wakes the work while it is being deleted.
            let mut kept = entry.clone();
            kept.resource_meta.ordinal = i32::try_from(idx).unwrap_or(i32::MAX);
            let resource = kept.resource_meta.resource.clone();
            let key = (!resource.is_empty()).then(|| ObjectKey {
                group: id.group.clone(),
                resource: resource.clone(),
                namespace: id.namespace.clone(),
                name: id.name.clone(),
            });
            return Err(ManifestResult {
                desired: ManifestDesired::Keep(kept),
                applied: self.carry_over(&id, Some(&resource)),
                key,
                readonly: false,
                transient: false,
                failure: None,
            });
        }
        let resolved = match ctx.resolver.resolve(&id.api_version, &id.kind).await {
            Ok(r) => r,
            Err(e) => {
                let unknown = matches!(
                    e,
                    applier::ApplyError::UnknownKind { .. }
                        | applier::ApplyError::UnknownResource { .. }
                );
                // The rules are matched by resource, which discovery did not give: guess the
                // plural as upstream does, so a rule for the kind is still found.
                let plural = guessed_plural(&id);
                let settings = manifests::settings_for(
                    &self.work.spec.manifest_configs,
                    &id.group,
                    &plural,
                    &id.namespace,
                    &id.name,
                );
                let message = e.to_string();
                let live = if unknown {
                    Live::UnknownKind
                } else {
                    Live::Unreadable(message.clone())
                };
                let outcome = self.unapplied(
                    manifests::resource_meta(idx, &id, ""),
                    &id,
                    &settings,
                    Err(message.clone()),
                    live,
                );
                return Err(blocked(
                    outcome,
                    self.carry_over(&id, None),
                    None,
                    e.is_transient(),
                    message,
                ));
            }
        };
        // A cluster-scoped object has no namespace, whatever the manifest says: it is recorded
        // (status, appliedResources, manifestConfigs matching) and watched without one.
        let id = if resolved.namespaced {
            id
        } else {
            ManifestId {
                namespace: String::new(),
                ..id
            }
        };
        let settings = manifests::settings_for(
            &self.work.spec.manifest_configs,
            &id.group,
            &resolved.plural,
            &id.namespace,
            &id.name,
        );
        let meta = manifests::resource_meta(idx, &id, &resolved.plural);
        let readonly = settings.strategy.type_ == UpdateStrategyType::ReadOnly;
        let orphan = manifests::is_orphaned(
            self.work.spec.delete_option.as_ref(),
            &id.group,
            &resolved.plural,
            &id.namespace,
            &id.name,
        );
        Ok(Target {
            id,
            resolved,
            settings,
            meta,
            readonly,
            orphan,
        })
    }

    async fn manifest(&self, idx: usize, manifest: &Value) -> ManifestResult {
        let ctx = self.ctx;
        let Target {
            id,
            resolved,
            settings,
            meta,
            readonly,
            orphan,
        } = match self.target(idx, manifest).await {
            Ok(target) => target,
            Err(result) => return result,
        };
        let key = ObjectKey {
            group: resolved.group.clone(),
            resource: resolved.plural.clone(),
            namespace: id.namespace.clone(),
            name: id.name.clone(),
        };
        // Indexed and watched before the write: its first events then find the work.
        ctx.watches.add(&self.name, key.clone());
        if !readonly {
            ctx.watches.ensure(&resolved);
        }
        let namespace = (!id.namespace.is_empty()).then_some(id.namespace.as_str());
        // ReadOnly objects carry no label of ours, so no label-filtered store has them.
        let cached = if readonly {
            Cached::Unknown
        } else {
            ctx.watches
                .cached_when_synced(&resolved, &id.namespace, &id.name)
                .await
        };

        // ReadOnly only reads, which the agent does with its own identity.
        let gate = self
            .work
            .spec
            .executor
            .as_ref()
            .filter(|_| !readonly)
            .map(|executor| executor::ExecutorGate {
                check: &ctx.executor,
                work: &self.name,
                manifest,
                executor,
                target: executor::Target {
                    group: resolved.group.clone(),
                    version: resolved.version.clone(),
                    resource: resolved.plural.clone(),
                    namespace: id.namespace.clone(),
                    name: id.name.clone(),
                },
                owned_by_work: !orphan,
            });

        let strategy = strategy_label(&settings.strategy.type_);
        let complete_check = CompleteRules::of(ctx.evaluator, &settings.rules);
        let started = Instant::now();
        // The executor is checked on every pass, not only before a write: a permission taken
        // away shows as Applied False even for an object that needs no write (answers are
        // cached until RBAC changes, so this costs nothing while nothing changes).
        let permitted = match &gate {
            Some(gate) => applier::WriteGate::may_write(gate)
                .await
                .map_err(applier::ApplyError::NotPermitted),
            None => Ok(()),
        };
        let result = match permitted {
            Err(e) => Err(e),
            Ok(()) => {
                ctx.applier
                    .apply(applier::ApplyRequest {
                        manifest,
                        strategy: &settings.strategy,
                        owner: (!readonly && !orphan).then(|| self.owner.clone()),
                        labels: &self.labels,
                        complete_check: complete_check
                            .as_ref()
                            .map(|c| c as &dyn applier::CompleteCheck),
                        cached: cached.hint(),
                        write_gate: None,
                    })
                    .await
            }
        };
        ctx.metrics
            .apply_duration_seconds
            .get_or_create(&StrategyLabels { strategy })
            .observe(started.elapsed().as_secs_f64());
        ctx.metrics
            .applies_total
            .get_or_create(&ApplyLabels {
                strategy,
                result: match &result {
                    Ok(done) => outcome_label(&done.outcome),
                    Err(e) if e.is_conflict() => "conflict",
                    Err(_) => "error",
                },
            })
            .inc();
        match result {
            Ok(done) => {
                let live = match done.object {
                    Some(object) => Live::Found(object),
                    None => Live::Absent,
                };
                let mut applied = Vec::new();
                if let Live::Found(object) = &live
                    && !readonly
                    && !orphan
                {
                    let uid = object
                        .pointer("/metadata/uid")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    applied.push(AppliedManifestResourceMeta {
                        group: resolved.group.clone(),
                        version: resolved.version.clone(),
                        resource: resolved.plural.clone(),
                        name: id.name.clone(),
                        namespace: id.namespace.clone(),
                        uid: uid.to_string(),
                    });
                }
                let outcome = self
                    .observed(meta, &id, &settings, &resolved, Ok(()), live)
                    .await;
                let failure = not_evaluated_because(&outcome.applied, &outcome.live);
                ManifestResult {
                    desired: outcome.desired(),
                    applied,
                    key: Some(key),
                    readonly,
                    transient: false,
                    failure,
                }
            }
            Err(e) => {
                let message = e.to_string();
                let ignore_fields_error = e.is_ignore_field_error();
                let live = match e {
                    applier::ApplyError::UnknownKind { .. }
                    | applier::ApplyError::UnknownResource { .. } => Live::UnknownKind,
                    applier::ApplyError::InvalidManifest(_) => Live::UnknownKind,
                    // Available does not depend on apply: what is there is read. The store
                    // holds only objects with the agent's label, so an object the agent could
                    // not write (a conflict, a refused executor) may be there without it.
                    _ => {
                        let cached = cached.clone().doubting_absence();
                        read_live(ctx, &cached, &resolved, namespace, &id.name).await
                    }
                };
                let mut outcome = self
                    .observed(meta, &id, &settings, &resolved, Err(message.clone()), live)
                    .await;
                outcome.ignore_fields_error = ignore_fields_error;
                blocked(
                    outcome,
                    self.carry_over(&id, Some(&resolved.plural)),
                    Some(key),
                    e.is_transient(),
                    message,
                )
            }
        }
    }

    /// The outcome of a manifest that was not applied and has no resolved kind: no feedback, and
    /// its rules not evaluated.
    fn unapplied(
        &self,
        meta: ManifestResourceMeta,
        id: &ManifestId,
        settings: &ManifestSettings,
        applied: Result<(), String>,
        live: Live,
    ) -> ManifestOutcome {
        let why = not_evaluated_because(&applied, &live).unwrap_or_default();
        ManifestOutcome {
            meta,
            ignore_fields_error: false,
            rules: conditions::not_evaluated_conditions(
                self.ctx.evaluator,
                &settings.rules,
                &id.api_version,
                &id.kind,
                &why,
            ),
            feedback: if settings.feedback_rules.is_empty() {
                Feedback::NoRules
            } else {
                Feedback::NotRead
            },
            applied,
            live,
        }
    }

    /// The outcome of a resolved manifest: rules evaluated (on the blocking pool) and feedback
    /// read when the object is applied and there; otherwise not evaluated, saying why.
    async fn observed(
        &self,
        meta: ManifestResourceMeta,
        id: &ManifestId,
        settings: &ManifestSettings,
        resolved: &applier::ResolvedResource,
        applied: Result<(), String>,
        live: Live,
    ) -> ManifestOutcome {
        let object = match (&applied, &live) {
            (Ok(()), Live::Found(object)) => object,
            _ => {
                let mut outcome = self.unapplied(meta, id, settings, applied, live);
                if !settings.feedback_rules.is_empty()
                    && let Live::Found(object) = &outcome.live
                {
                    // Feedback reads whatever is there, as upstream.
                    outcome.feedback =
                        self.read_feedback(&outcome.meta, settings, resolved, object);
                }
                return outcome;
            }
        };
        let rules = if settings.rules.is_empty() {
            Vec::new()
        } else {
            evaluate::evaluate_rules(
                self.ctx.evaluator,
                &self.ctx.metrics,
                settings.rules.clone(),
                object.clone(),
            )
            .await
        };
        let feedback = if settings.feedback_rules.is_empty() {
            Feedback::NoRules
        } else {
            self.read_feedback(&meta, settings, resolved, object)
        };
        ManifestOutcome {
            meta,
            applied,
            ignore_fields_error: false,
            live,
            rules,
            feedback,
        }
    }
}

impl WorkScope<'_> {
    /// Reads a manifest's feedback. A failing rule is logged when the work's status does not
    /// already report the same error, so once per change and not on every resync.
    fn read_feedback(
        &self,
        meta: &ManifestResourceMeta,
        settings: &ManifestSettings,
        resolved: &applier::ResolvedResource,
        object: &Value,
    ) -> Feedback {
        let ctx = self.ctx;
        let (values, errors) = feedback::collect(
            &settings.feedback_rules,
            &resolved.group,
            &resolved.version,
            &resolved.kind,
            object,
            ctx.config
                .gates
                .raw_feedback_json
                .then_some(ctx.config.max_json_raw_length),
        );
        let error = feedback::joined(&errors);
        if let Some(message) = &error
            && !feedback_already_reported(self.work.status.as_ref(), meta, message)
        {
            for e in &errors {
                tracing::warn!(
                    work = %self.name,
                    manifest = %describe(meta),
                    rule = %e.rule,
                    error = %e.error,
                    "status feedback rule failed"
                );
            }
        }
        Feedback::Read(values, error)
    }
}

/// A manifest as logs name it: `group/kind namespace/name` (`kind name` where there are none).
fn describe(meta: &ManifestResourceMeta) -> String {
    let kind = if meta.group.is_empty() {
        meta.kind.clone()
    } else {
        format!("{}/{}", meta.group, meta.kind)
    };
    if meta.namespace.is_empty() {
        format!("{kind} {}", meta.name)
    } else {
        format!("{kind} {}/{}", meta.namespace, meta.name)
    }
}

/// Whether `status` already reports this feedback error for the manifest: its
/// `StatusFeedbackSynced` condition is False with the message the error gives.
fn feedback_already_reported(
    status: Option<&ManifestWorkStatus>,
    meta: &ManifestResourceMeta,
    error: &str,
) -> bool {
    let expected = conditions::feedback_condition(Err(error));
    status
        .and_then(|s| s.resource_status.as_ref())
        .and_then(|r| {
            r.manifests.iter().find(|m| {
                let m = &m.resource_meta;
                m.ordinal == meta.ordinal
                    && m.kind == meta.kind
                    && m.namespace == meta.namespace
                    && m.name == meta.name
            })
        })
        .and_then(|m| m.conditions.iter().find(|c| c.type_ == expected.type_))
        .is_some_and(|c| c.status == expected.status.as_str() && c.message == expected.message)
}

/// The live object of a manifest that was not written: from the watch cache, else read.
async fn read_live(
    ctx: &Context,
    cached: &Cached,
    resolved: &applier::ResolvedResource,
    namespace: Option<&str>,
    name: &str,
) -> Live {
    match cached {
        Cached::Present(object) => return Live::Found(object.clone()),
        Cached::Absent => return Live::Absent,
        Cached::Unknown => {}
    }
    match ctx.applier.get(resolved, namespace, name).await {
        Ok(Some(object)) => Live::Found(object),
        Ok(None) => Live::Absent,
        Err(e) if e.is_not_found() => Live::Absent,
        Err(e) => Live::Unreadable(e.to_string()),
    }
}

fn blocked(
    outcome: ManifestOutcome,
    applied: Vec<AppliedManifestResourceMeta>,
    key: Option<ObjectKey>,
    transient: bool,
    failure: String,
) -> ManifestResult {
    ManifestResult {
        desired: outcome.desired(),
        applied,
        key,
        readonly: false,
        transient,
        failure: Some(failure),
    }
}

/// The plural Kubernetes guesses for a kind (lower case, English plural rules), for matching
/// `manifestConfigs` of a kind discovery does not know yet.
fn guessed_plural(id: &ManifestId) -> String {
    let gvk = kube::api::GroupVersionKind::gvk(&id.group, &id.version, &id.kind);
    kube::api::ApiResource::from_gvk(&gvk).plural
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feedback_error_is_new_until_the_status_reports_it() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
        use k8s_openapi::jiff::Timestamp;
        use work_api::{ManifestCondition, ManifestResourceStatus};
        let meta = ManifestResourceMeta {
            ordinal: 1,
            kind: "Deployment".into(),
            namespace: "default".into(),
            name: "nginx".into(),
            ..Default::default()
        };
        let reported = conditions::feedback_condition(Err("resource: bad"));
        let status =
            |meta: &ManifestResourceMeta, status: &str, message: &str| ManifestWorkStatus {
                resource_status: Some(ManifestResourceStatus {
                    manifests: vec![ManifestCondition {
                        resource_meta: meta.clone(),
                        status_feedback: None,
                        conditions: vec![Condition {
                            type_: reported.type_.clone(),
                            status: status.into(),
                            reason: reported.reason.clone(),
                            message: message.into(),
                            last_transition_time: Time(Timestamp::UNIX_EPOCH),
                            observed_generation: None,
                        }],
                    }],
                }),
                ..Default::default()
            };
        let same = status(&meta, "False", &reported.message);
        assert!(feedback_already_reported(
            Some(&same),
            &meta,
            "resource: bad"
        ));
        // A different error, a synced condition, another manifest or no status: log it.
        assert!(!feedback_already_reported(
            Some(&same),
            &meta,
            "resource: worse"
        ));
        let synced = status(&meta, "True", &reported.message);
        assert!(!feedback_already_reported(
            Some(&synced),
            &meta,
            "resource: bad"
        ));
        let other = ManifestResourceMeta {
            ordinal: 0,
            ..meta.clone()
        };
        assert!(!feedback_already_reported(
            Some(&same),
            &other,
            "resource: bad"
        ));
        assert!(!feedback_already_reported(None, &meta, "resource: bad"));
        assert_eq!(describe(&meta), "Deployment default/nginx");
    }

    #[test]
    fn plurals_are_guessed_like_kubernetes() {
        let id = |kind: &str| ManifestId {
            api_version: "example.com/v1".into(),
            group: "example.com".into(),
            version: "v1".into(),
            kind: kind.into(),
            name: "n".into(),
            namespace: String::new(),
        };
        assert_eq!(guessed_plural(&id("Widget")), "widgets");
        assert_eq!(guessed_plural(&id("Policy")), "policies");
    }
}
