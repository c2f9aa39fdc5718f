//! Applying a work's manifests, each to one [`ManifestOutcome`]: identify, resolve, check the
//! executor, write with its strategy, observe the live object, evaluate the rules and feedback.
//! Failures of one manifest do not stop the others.

use std::collections::BTreeMap;
use std::time::Instant;

use conditions::{Condition, ConditionUpdate};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde_json::Value;
use work_api::{
    AppliedManifestResourceMeta, AppliedManifestWork, ManifestResourceMeta, ManifestWork,
    ManifestWorkStatus, UpdateStrategyType, condition_types,
};

use crate::metrics::{ApplyLabels, StrategyLabels};
use crate::spoke::watches::{Cached, ObjectKey};
use crate::work::context::Context;
use crate::work::drift::{self, Seen};
use crate::work::evaluate::{self, CompleteRules};
use crate::work::holds as hold_rules;
use crate::work::outcome::{Feedback, Live, ManifestOutcome, not_evaluated_because};
use crate::work::status::ManifestDesired;
use crate::{spoke::executor, spoke::feedback};
use applier::drift::{FieldDrift, Mode, diff};
use applier::gates;
use applier::holds::Hold;
use applier::manifests::{self, ManifestId, ManifestSettings};
use applier::readiness::{self, Need};
use applier::record;

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
    /// Whether a custom resource waits for the API server to serve its kind, its
    /// CustomResourceDefinition being Established (discovery follows within moments).
    pub awaiting_discovery: bool,
    /// The objects the work watches by name (they carry no label of the agent's).
    pub object_watches: Vec<ObjectKey>,
    /// When the earliest hold of a rule condition is over (the work is looked at again then).
    pub recheck_at: Option<Timestamp>,
}

/// Everything about one manifest a reconcile needs besides its outcome.
struct ManifestResult {
    desired: ManifestDesired,
    applied: Vec<AppliedManifestResourceMeta>,
    key: Option<ObjectKey>,
    readonly: bool,
    transient: bool,
    failure: Option<String>,
    /// What the manifests depending on this one see of it.
    as_dependency: AsDependency,
    /// Whether its kind is not served (discovery does not know it).
    unknown_kind: bool,
    /// The object watched by name for it, if any.
    object_watch: Option<ObjectKey>,
}

/// What the manifests that depend on a manifest see of it after its turn.
#[derive(Clone, Debug, Default)]
enum AsDependency {
    /// Not applied, its object not there, or nothing depends on it.
    #[default]
    NotThere,
    /// Applied, with its live object and the conditions the agent computed for it (type,
    /// status) in this pass, for declared gates.
    Live(Value, Vec<(String, String)>),
    /// Complete (sticky, never applied again): whatever needed it had it; a declared gate reads
    /// the conditions it keeps.
    Kept(Vec<(String, String)>),
}

impl AsDependency {
    /// Whether what a dependant needs of this manifest holds: a built-in need from its live
    /// object, a declared gate from its conditions (no request either way).
    fn meets(&self, need: &Need) -> bool {
        let has = |conditions: &[(String, String)], condition: &str, status: &str| {
            conditions
                .iter()
                .any(|(t, s)| t == condition && s == status)
        };
        match (self, need) {
            (AsDependency::NotThere, _) => false,
            (
                AsDependency::Live(_, conditions) | AsDependency::Kept(conditions),
                Need::Condition { condition, status },
            ) => has(conditions, condition, status),
            (AsDependency::Live(object, _), need) => readiness::is_ready(need, object),
            (AsDependency::Kept(_), _) => true,
        }
    }
}

/// The (type, status) of the conditions a manifest's status will carry.
fn condition_pairs(desired: &ManifestDesired) -> Vec<(String, String)> {
    match desired {
        ManifestDesired::Conditions { updates, .. } => updates
            .iter()
            .map(|u| (u.type_.clone(), u.status.as_str().to_string()))
            .collect(),
        ManifestDesired::Keep(entry) => entry
            .conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect(),
    }
}

/// What a work's manifests share while being applied.
struct WorkScope<'a> {
    work: &'a ManifestWork,
    name: String,
    previously: Vec<AppliedManifestResourceMeta>,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    labels: BTreeMap<String, String>,
    /// Each manifest's drift mode, or why it cannot be known.
    modes: Vec<Result<Mode, String>>,
    /// Whether the work declares drift modes (its manifests then always carry `Drifted`).
    declared_modes: bool,
    /// Each manifest's holds, or why they cannot be read.
    holds: Vec<Result<Vec<Hold>, String>>,
    /// The time the reconcile decides with (drift reports, holds).
    now: Timestamp,
    ctx: &'a Context,
}

/// What taking over an object that exists found.
enum TakeOver {
    /// Write as `Correct` would, from this view of the object; the object watch kept, if any.
    Proceed(Cached, Option<ObjectKey>),
    /// Not taken over (it differs), or not readable: the manifest's result.
    Refused(Box<ManifestResult>),
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

impl Target {
    /// The object as the watches and the object → work index know it.
    fn key(&self) -> ObjectKey {
        ObjectKey {
            group: self.resolved.group.clone(),
            resource: self.resolved.plural.clone(),
            namespace: self.id.namespace.clone(),
            name: self.id.name.clone(),
        }
    }

    /// The object as the AppliedManifestWork records it (`uid` empty while it is unknown).
    fn applied_meta(&self, uid: &str) -> AppliedManifestResourceMeta {
        AppliedManifestResourceMeta {
            group: self.resolved.group.clone(),
            version: self.resolved.version.clone(),
            resource: self.resolved.plural.clone(),
            name: self.id.name.clone(),
            namespace: self.id.namespace.clone(),
            uid: uid.to_string(),
        }
    }

    /// Whether the work owns the object: it is written with the work's ownerReference.
    fn owned(&self) -> bool {
        !self.readonly && !self.orphan
    }
}

/// The resources the work would own once applied (without UIDs: they may not exist yet). A custom
/// resource whose CustomResourceDefinition is in the work is known from that CRD, without asking
/// discovery for a kind that may not be served yet.
pub async fn owned_resources(
    work: &ManifestWork,
    ctx: &Context,
) -> Vec<AppliedManifestResourceMeta> {
    let raw: Vec<&Value> = work.spec.workload.manifests.iter().map(|m| &m.0).collect();
    let deps = readiness::dependencies(&raw);
    let scope = WorkScope::new(work, &AppliedManifestWork::default(), ctx);
    let mut out = Vec::new();
    for (idx, manifest) in raw.iter().enumerate() {
        let from_crd = deps
            .get(idx)
            .into_iter()
            .flatten()
            .find(|d| d.need == Need::Established)
            .and_then(|d| raw.get(d.on))
            .and_then(|crd| {
                let id = ManifestId::of(manifest).ok()?;
                let (plural, namespaced) = readiness::crd_resource(crd, &id.version)?;
                let resolved = applier::ResolvedResource {
                    group: id.group.clone(),
                    version: id.version.clone(),
                    kind: id.kind.clone(),
                    plural,
                    namespaced,
                };
                Some(scope.target_of(idx, id, resolved))
            });
        let target = match from_crd {
            Some(target) => Ok(target),
            None => scope.target(idx, manifest).await,
        };
        // A ReportOnly manifest (or one whose mode is unknown) writes nothing, so it is not
        // recorded before: what its record held is carried over by the apply.
        let writes = matches!(
            scope.modes.get(idx),
            Some(Ok(Mode::Correct | Mode::TakeOverIfIdentical))
        );
        if let Ok(target) = target
            && target.owned()
            && writes
        {
            out.push(target.applied_meta(""));
        }
    }
    out
}

/// The resources the work would own once applied that `applied_work` does not record yet (without
/// UIDs: they may not exist yet). Recorded before the apply, they are listed whenever they exist.
pub async fn unrecorded(
    work: &ManifestWork,
    applied_work: &AppliedManifestWork,
    ctx: &Context,
) -> Vec<AppliedManifestResourceMeta> {
    let recorded = record::recorded(applied_work);
    owned_resources(work, ctx)
        .await
        .into_iter()
        .filter(|r| {
            !recorded.iter().any(|p| {
                p.group == r.group
                    && p.resource == r.resource
                    && p.namespace == r.namespace
                    && p.name == r.name
            })
        })
        .collect()
}

/// Applies every manifest that is not already complete, in apply order with each after what it
/// needs ([`readiness`]), and collects its outcome. A manifest whose dependency in the work is not
/// ready yet is not applied and says what it waits for; the dependency's own watch event brings
/// the work back once it is.
pub async fn apply_work(
    work: &ManifestWork,
    applied_work: &AppliedManifestWork,
    ctx: &Context,
) -> WorkOutcome {
    let raw: Vec<&Value> = work.spec.workload.manifests.iter().map(|m| &m.0).collect();
    let scope = WorkScope::new(work, applied_work, ctx);
    // Built-in needs and declared gates, one graph: a manifest in a circle of built-in needs goes
    // as if it had none (better applied and failing on its own than waiting forever); one held by
    // a gate that can never hold is not applied and says why.
    let gates::Plan { deps, order, held } = gates::plan_work(work, |i, condition| {
        raw.get(i)
            .and_then(|m| ManifestId::of(m).ok())
            .is_some_and(|id| {
                let settings = scope.settings(&id, &guessed_plural(&id));
                gates::produces(settings.rules.iter(), condition)
            })
    });
    let mut depended_on = vec![false; raw.len()];
    for dep in deps.iter().flatten() {
        if let Some(flag) = depended_on.get_mut(dep.on) {
            *flag = true;
        }
    }
    let mut seen: Vec<AsDependency> = vec![AsDependency::NotThere; raw.len()];
    let mut slots: Vec<Option<ManifestDesired>> = vec![None; raw.len()];
    let mut out = WorkOutcome {
        manifests: Vec::new(),
        applied: Vec::new(),
        keys: Vec::new(),
        has_readonly: false,
        transient_failure: false,
        failures: Vec::new(),
        awaiting_discovery: false,
        object_watches: Vec::new(),
        recheck_at: None,
    };
    for idx in order {
        // The order is a permutation of the indexes; anything else is skipped, not a panic.
        let Some(manifest) = raw.get(idx) else {
            continue;
        };
        let needs = deps.get(idx).map(Vec::as_slice).unwrap_or_default();
        let mut unmet = needs
            .iter()
            .find(|d| !seen.get(d.on).is_some_and(|s| s.meets(&d.need)));
        // A manifest applied once its gates held is not held back again while it is unchanged
        // (the object on the spoke is what it asks): only a changed manifest re-checks its gates.
        if unmet.is_some_and(|d| d.need.is_declared())
            && needs
                .iter()
                .all(|d| d.need.is_declared() || seen.get(d.on).is_some_and(|s| s.meets(&d.need)))
            && scope.applied_unchanged(idx, manifest).await
        {
            unmet = None;
        }
        let held_because = held.get(idx).and_then(Option::as_deref);
        let mut result = match (held_because, unmet) {
            (Some(why), _) => scope.held(idx, manifest, why),
            (None, Some(dep)) => scope.waiting(idx, manifest, &waits_for(&raw, dep)),
            (None, None) => {
                let keep = depended_on.get(idx).copied().unwrap_or(false);
                // A kind whose CRD is in the work may be brand new: its store's first list is
                // not waited for (it can take seconds while the API server starts serving it).
                let new_kind = needs.iter().any(|d| d.need == Need::Established);
                scope.manifest(idx, manifest, keep, new_kind).await
            }
        };
        if result.unknown_kind
            && let Some(crd) = needs.iter().find(|d| d.need == Need::Established)
        {
            // Its CRD is Established but discovery does not serve the kind yet: still waiting,
            // not failed.
            let why = format!("{}, and its kind to be served", waits_for(&raw, crd));
            result = scope.waiting(idx, manifest, &why);
            out.awaiting_discovery = true;
        }
        // Holds on the rule conditions, before dependants read them: a gate sees what is reported.
        if let ManifestDesired::Conditions { meta, updates, .. } = &mut result.desired
            && let Some(holds) = scope.holds.get(idx)
        {
            let previous = scope.previous_conditions(meta);
            if let Some(due) = hold_rules::apply(updates, holds, previous, scope.now) {
                out.recheck_at = Some(out.recheck_at.map_or(due, |d| d.min(due)));
            }
        }
        out.object_watches.extend(result.object_watch);
        out.applied.extend(result.applied);
        out.keys.extend(result.key);
        out.has_readonly |= result.readonly;
        out.transient_failure |= result.transient;
        out.failures.extend(result.failure);
        if let Some(slot) = seen.get_mut(idx) {
            *slot = match result.as_dependency {
                AsDependency::Live(object, _) => {
                    AsDependency::Live(object, condition_pairs(&result.desired))
                }
                AsDependency::Kept(_) => AsDependency::Kept(condition_pairs(&result.desired)),
                AsDependency::NotThere => AsDependency::NotThere,
            };
        }
        if let Some(slot) = slots.get_mut(idx) {
            *slot = Some(result.desired);
        }
    }
    out.manifests = slots.into_iter().flatten().collect();
    out
}

/// What a manifest waiting on `dep` says: "Waiting for <Kind> <namespace/name> (manifest <i>) to
/// be <Established|Active|Available>" or "to have <Condition> <Status> (gate)".
fn waits_for(raw: &[&Value], dep: &readiness::Dependency) -> String {
    let what = raw
        .get(dep.on)
        .and_then(|m| ManifestId::of(m).ok())
        .map(|id| {
            if id.namespace.is_empty() {
                format!("{} {}", id.kind, id.name)
            } else {
                format!("{} {}/{}", id.kind, id.namespace, id.name)
            }
        })
        .unwrap_or_default();
    format!(
        "Waiting for {what} (manifest {}) to {}",
        dep.on,
        dep.need.words()
    )
}

impl<'a> WorkScope<'a> {
    fn new(work: &'a ManifestWork, applied_work: &AppliedManifestWork, ctx: &'a Context) -> Self {
        WorkScope {
            work,
            name: work.name_any(),
            previously: record::recorded(applied_work),
            owner: applier::owner_reference(applied_work),
            labels: BTreeMap::from([(
                applier::AGENT_LABEL.to_string(),
                ctx.config.label_value.clone(),
            )]),
            modes: applier::drift::modes_of(work),
            declared_modes: applier::drift::annotation_of(work).is_some(),
            holds: applier::holds::holds_of(work),
            now: Timestamp::now(),
            ctx,
        }
    }

    /// The manifest's conditions as the work's status last reported them (matched by object).
    fn previous_conditions(&self, meta: &ManifestResourceMeta) -> &[Condition] {
        status_entry(self.work.status.as_ref(), meta, |m| m.group == meta.group)
            .map(|m| m.conditions.as_slice())
            .unwrap_or_default()
    }

    /// The manifest's `Drifted` condition now, from what was seen of its object.
    fn drift_condition(&self, meta: &ManifestResourceMeta, seen: &Seen) -> Option<ConditionUpdate> {
        let previous = self
            .previous_conditions(meta)
            .iter()
            .find(|c| c.type_ == condition_types::DRIFTED);
        drift::condition(seen, self.declared_modes, previous, self.now)
    }

    /// The manifest's drift mode (`Correct` when the work declares none).
    fn mode(&self, idx: usize) -> Result<Mode, String> {
        self.modes.get(idx).cloned().unwrap_or(Ok(Mode::Correct))
    }

    /// Whether the live object is the work's: it carries the work's ownerReference, or (for an
    /// orphaned manifest, which gets none) the agent's label.
    fn is_ours(&self, target: &Target, live: &Value) -> bool {
        if target.orphan {
            return live
                .get("metadata")
                .and_then(|m| m.get("labels"))
                .and_then(|l| l.get(applier::AGENT_LABEL))
                .and_then(Value::as_str)
                == Some(self.ctx.config.label_value.as_str());
        }
        live.pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|refs| {
                refs.iter().any(|r| {
                    !self.owner.uid.is_empty()
                        && r.get("uid").and_then(Value::as_str) == Some(self.owner.uid.as_str())
                })
            })
    }

    /// Whether the manifest was applied as it is now: its `Applied` is True for the work's
    /// generation. A difference then is drift, not a change of the work.
    fn applied_at_generation(&self, meta: &ManifestResourceMeta) -> bool {
        let generation = self.work.metadata.generation;
        self.previous_conditions(meta).iter().any(|c| {
            c.type_ == condition_types::APPLIED
                && c.status == "True"
                && generation.is_some()
                && c.observed_generation == generation
        })
    }

    /// How the cached object differed from the manifest before the write, when that is drift:
    /// the manifest was applied at this generation and the object changed since (or went).
    fn drift_before(&self, manifest: &Value, target: &Target, cached: &Cached) -> Vec<FieldDrift> {
        if !self.applied_at_generation(&target.meta) {
            return Vec::new();
        }
        match cached {
            Cached::Present(live) => diff(manifest, live),
            Cached::Absent => {
                let was_there = self
                    .previous_conditions(&target.meta)
                    .iter()
                    .any(|c| c.type_ == condition_types::AVAILABLE && c.status == "True");
                if was_there {
                    drift::deleted()
                } else {
                    Vec::new()
                }
            }
            Cached::Unknown => Vec::new(),
        }
    }

    /// The object as its own watch (by name) has it, the watch started for this work; read when
    /// the watch cannot say. The key of the object watch, and the object (`Err`: unreadable).
    async fn unlabelled(&self, target: &Target) -> (ObjectKey, Result<Option<Value>, String>) {
        let ctx = self.ctx;
        let (namespace, name) = (&target.id.namespace, &target.id.name);
        ctx.watches
            .watch_object(&self.name, &target.resolved, namespace, name);
        // A cluster-scoped target has no namespace already (`target_of`).
        let key = target.key();
        let found = match ctx
            .watches
            .object_cached_when_synced(&target.resolved, namespace, name)
            .await
        {
            Cached::Present(live) => Ok(Some(live)),
            Cached::Absent => Ok(None),
            Cached::Unknown => {
                let ns = (!namespace.is_empty()).then_some(namespace.as_str());
                match ctx.applier.get(&target.resolved, ns, name).await {
                    Ok(found) => Ok(found),
                    Err(e) if e.is_not_found() => Ok(None),
                    Err(e) => Err(e.to_string()),
                }
            }
        };
        (key, found)
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

    /// Applies one manifest, phase by phase: identify, the sticky-completion check and resolve
    /// ([`Self::target`]), watch, the executor gate and the write, then observe the live object
    /// and evaluate its rules and feedback.
    async fn manifest(
        &self,
        idx: usize,
        manifest: &Value,
        depended_on: bool,
        new_kind: bool,
    ) -> ManifestResult {
        let target = match self.target(idx, manifest).await {
            Ok(target) => target,
            Err(result) => return result,
        };
        let mode = match self.mode(idx) {
            Ok(mode) => mode,
            Err(why) => return self.mode_unknown(target, new_kind, &why).await,
        };
        let mut cached = self.watch(&target, new_kind).await;
        let mut object_watch = None;
        // ReadOnly never writes: its drift is reported whatever the mode.
        if !target.readonly {
            match mode {
                Mode::ReportOnly => {
                    return self
                        .report_only(manifest, target, cached, depended_on)
                        .await;
                }
                Mode::TakeOverIfIdentical => {
                    match self.take_over(manifest, &target, cached).await {
                        TakeOver::Proceed(view, watch) => {
                            cached = view;
                            object_watch = watch;
                        }
                        TakeOver::Refused(result) => return *result,
                    }
                }
                Mode::Correct => {}
            }
        }
        let before = self.drift_before(manifest, &target, &cached);
        let started = Instant::now();
        // The executor is checked on every pass, not only before a write: a permission taken
        // away shows as Applied False even for an object that needs no write (answers are
        // cached until RBAC changes, so this costs nothing while nothing changes).
        let written = match self.executor_gate(manifest, &target).await {
            Ok(()) => self.write(manifest, &target, &cached).await,
            Err(e) => Err(e),
        };
        self.count_apply(&target, &written, started);
        let seen = seen_after(manifest, &written, before);
        if matches!(seen, Seen::Corrected(_)) {
            self.ctx.metrics.drift_corrections_total.inc();
        }
        let mut result = match written {
            Ok(done) => self.observe_written(target, done, depended_on, seen).await,
            Err(e) => self.observe_unwritten(target, cached, e, seen).await,
        };
        result.object_watch = object_watch;
        result
    }

    /// A ReportOnly manifest: never written; its object read from the watch cache (its own watch
    /// by name when it carries no label of the agent's), its rules evaluated on it, and how it
    /// differs reported. Its record is kept as it was: switching a manifest to ReportOnly
    /// neither adopts nor deletes its object.
    async fn report_only(
        &self,
        manifest: &Value,
        target: Target,
        cached: Cached,
        depended_on: bool,
    ) -> ManifestResult {
        let (live, object_watch) = match cached {
            Cached::Present(live) => (Ok(Some(live)), None),
            Cached::Absent | Cached::Unknown => {
                let (key, found) = self.unlabelled(&target).await;
                (found, Some(key))
            }
        };
        let live = match live {
            Ok(live) => live,
            Err(e) => {
                let outcome = self
                    .observed(&target, Ok(()), Live::Unreadable(e.clone()))
                    .await;
                let mut result = blocked(
                    outcome,
                    self.carry_over(&target.id, Some(&target.resolved.plural)),
                    Some(target.key()),
                    true,
                    e,
                );
                result.object_watch = object_watch;
                return result;
            }
        };
        let seen = match &live {
            Some(live) => seen_on(manifest, live),
            None => Seen::Absent,
        };
        let carried = self.carry_over(&target.id, Some(&target.resolved.plural));
        let done = applier::Applied {
            outcome: applier::ApplyOutcome::ReadOnly,
            resource: target.resolved.clone(),
            object: live,
        };
        let mut result = self.observe_written(target, done, depended_on, seen).await;
        result.applied = carried;
        // An absent object is reported (`Drifted`), not retried: its watch brings the work back.
        result.failure = None;
        result.object_watch = object_watch;
        result
    }

    /// TakeOverIfIdentical: the work's own object (or none) goes on as `Correct`; an object that
    /// is not the work's is adopted only when it matches the manifest, else left alone and
    /// reported, watched by name until it matches.
    async fn take_over(&self, manifest: &Value, target: &Target, cached: Cached) -> TakeOver {
        if let Cached::Present(live) = &cached
            && self.is_ours(target, live)
        {
            return TakeOver::Proceed(cached, None);
        }
        let (key, found) = match cached {
            // Labelled by another work of this agent: not this work's either.
            Cached::Present(live) => (None, Ok(Some(live))),
            Cached::Absent | Cached::Unknown => {
                let (key, found) = self.unlabelled(target).await;
                (Some(key), found)
            }
        };
        let live = match found {
            Ok(Some(live)) => live,
            Ok(None) => return TakeOver::Proceed(Cached::Absent, key),
            Err(e) => {
                // Unread, it might be someone else's: nothing is written until it is read.
                let why = format!("resource could not be read to decide a take-over: {e}");
                let outcome = self
                    .observed(target, Err(why.clone()), Live::Unreadable(e))
                    .await;
                return self.refused(target, outcome, true, why, key);
            }
        };
        if self.is_ours(target, &live) {
            return TakeOver::Proceed(Cached::Present(live), key);
        }
        let fields = diff(manifest, &live);
        if fields.is_empty() {
            tracing::info!(work = %self.name, manifest = %target.id.describe(), "taking over an object that matches the work");
            return TakeOver::Proceed(Cached::Present(live), key);
        }
        let why = format!(
            "{} exists, is not the work's and differs from it in {} field(s): left alone (TakeOverIfIdentical; see Drifted)",
            target.id.describe(),
            fields.len()
        );
        let mut outcome = self
            .observed(target, Err(why.clone()), Live::Found(live))
            .await;
        outcome.drift = self.drift_condition(&outcome.meta, &Seen::NotTakenOver(fields));
        self.refused(target, outcome, false, why, key)
    }

    /// A take-over refused (`transient`: retried), the object watched by `object_watch`.
    fn refused(
        &self,
        target: &Target,
        outcome: ManifestOutcome,
        transient: bool,
        why: String,
        object_watch: Option<ObjectKey>,
    ) -> TakeOver {
        let mut result = blocked(
            outcome,
            self.carry_over(&target.id, Some(&target.resolved.plural)),
            Some(target.key()),
            transient,
            why,
        );
        result.object_watch = object_watch;
        TakeOver::Refused(Box::new(result))
    }

    /// A manifest whose drift mode cannot be known: not written (which mode was meant is not
    /// known, and `Correct` could overwrite what the author meant to keep), `Applied` False
    /// saying why; what the cache has of its object still read.
    async fn mode_unknown(&self, target: Target, new_kind: bool, why: &str) -> ManifestResult {
        let message = format!("invalid drift mode: {why}");
        let live = match self.watch(&target, new_kind).await {
            Cached::Present(live) => Live::Found(live),
            Cached::Absent => Live::Absent,
            Cached::Unknown => Live::Unreadable("not read: the drift mode is invalid".into()),
        };
        let outcome = self.observed(&target, Err(message.clone()), live).await;
        blocked(
            outcome,
            self.carry_over(&target.id, Some(&target.resolved.plural)),
            Some(target.key()),
            false,
            message,
        )
    }

    /// The result of a manifest that waits for another manifest of the work (`why` says which
    /// and for what): not applied, nothing asked of the spoke (its kind is not even resolved),
    /// its record kept. A complete manifest stays as it is.
    fn waiting(&self, idx: usize, manifest: &Value, why: &str) -> ManifestResult {
        let id = match ManifestId::of(manifest) {
            Ok(id) => id,
            Err(e) => return unidentified(idx, e.to_string()),
        };
        if let Some(kept) = self.completed(idx, &id) {
            return kept;
        }
        let settings = self.settings(&id, &guessed_plural(&id));
        let mut outcome = self.unapplied(
            manifests::resource_meta(idx, &id, ""),
            &id,
            &settings,
            Err(why.to_string()),
            Live::UnknownKind,
        );
        outcome.waiting = Some(why.to_string());
        ManifestResult {
            desired: outcome.desired(),
            applied: self.carry_over(&id, None),
            key: None,
            readonly: false,
            transient: false,
            failure: None,
            as_dependency: AsDependency::NotThere,
            unknown_kind: false,
            object_watch: None,
        }
    }

    /// The result of a manifest held by a gate that can never hold (`why`): not applied, nothing
    /// asked of the spoke, `Applied` False saying why, its record kept. A complete manifest stays
    /// as it is.
    fn held(&self, idx: usize, manifest: &Value, why: &str) -> ManifestResult {
        let mut result = self.waiting(idx, manifest, why);
        if let ManifestDesired::Conditions { meta, .. } = &result.desired
            && let Ok(id) = ManifestId::of(manifest)
        {
            let settings = self.settings(&id, &guessed_plural(&id));
            let mut outcome = self.unapplied(
                meta.clone(),
                &id,
                &settings,
                Err(why.to_string()),
                Live::UnknownKind,
            );
            outcome.invalid_gate = Some(why.to_string());
            result.desired = outcome.desired();
        }
        result
    }

    /// Whether the manifest's object is on the spoke already as the manifest asks (from the watch
    /// cache: no request), so a gate that held when it was applied is not asked again.
    async fn applied_unchanged(&self, idx: usize, manifest: &Value) -> bool {
        let Ok(target) = self.target(idx, manifest).await else {
            return false;
        };
        if target.readonly {
            return false;
        }
        match self
            .ctx
            .watches
            .cached(&target.resolved, &target.id.namespace, &target.id.name)
        {
            Cached::Present(live) => applier::is_noop_update(manifest, &live),
            _ => false,
        }
    }

    /// Identifies and resolves a manifest; for one that stops there (unreadable, complete, of an
    /// unknown kind), its result instead.
    async fn target(&self, idx: usize, manifest: &Value) -> Result<Target, ManifestResult> {
        let id = match ManifestId::of(manifest) {
            Ok(id) => id,
            Err(e) => return Err(unidentified(idx, e.to_string())),
        };
        if let Some(kept) = self.completed(idx, &id) {
            return Err(kept);
        }
        self.resolve(idx, id).await
    }

    /// The result of a manifest whose `Complete` condition is True: sticky, never evaluated,
    /// updated or re-created again. Still indexed, so the deletion of its object wakes the work
    /// while it is being deleted. None while it is not complete.
    fn completed(&self, idx: usize, id: &ManifestId) -> Option<ManifestResult> {
        let entry = manifests::completed_entry(self.work.status.as_ref(), id)?;
        let mut kept = entry.clone();
        kept.resource_meta.ordinal = ordinal(idx);
        let resource = kept.resource_meta.resource.clone();
        let key = (!resource.is_empty()).then(|| ObjectKey {
            group: id.group.clone(),
            resource: resource.clone(),
            namespace: id.namespace.clone(),
            name: id.name.clone(),
        });
        Some(ManifestResult {
            desired: ManifestDesired::Keep(kept),
            applied: self.carry_over(id, Some(&resource)),
            key,
            readonly: false,
            transient: false,
            failure: None,
            as_dependency: AsDependency::Kept(Vec::new()),
            unknown_kind: false,
            object_watch: None,
        })
    }

    /// Resolves the manifest's kind to its resource, and finds its settings; a kind discovery
    /// does not give (or cannot answer for) blocks the manifest.
    async fn resolve(&self, idx: usize, id: ManifestId) -> Result<Target, ManifestResult> {
        let resolved = match self.ctx.resolver.resolve(&id.api_version, &id.kind).await {
            Ok(r) => r,
            Err(e) => return Err(self.unresolved(idx, &id, e)),
        };
        Ok(self.target_of(idx, id, resolved))
    }

    /// The manifest as `resolved`, with its settings.
    fn target_of(&self, idx: usize, id: ManifestId, resolved: applier::ResolvedResource) -> Target {
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
        let settings = self.settings(&id, &resolved.plural);
        let meta = manifests::resource_meta(idx, &id, &resolved.plural);
        let readonly = settings.strategy.type_ == UpdateStrategyType::ReadOnly;
        let orphan = manifests::is_orphaned(
            self.work.spec.delete_option.as_ref(),
            &id.group,
            &resolved.plural,
            &id.namespace,
            &id.name,
        );
        Target {
            id,
            resolved,
            settings,
            meta,
            readonly,
            orphan,
        }
    }

    /// The `manifestConfigs` settings of an object of `resource`.
    fn settings(&self, id: &ManifestId, resource: &str) -> ManifestSettings {
        manifests::settings_for(
            &self.work.spec.manifest_configs,
            &id.group,
            resource,
            &id.namespace,
            &id.name,
        )
    }

    /// The result of a manifest whose kind did not resolve: blocked, its rules not evaluated.
    fn unresolved(&self, idx: usize, id: &ManifestId, e: applier::ApplyError) -> ManifestResult {
        let unknown = matches!(
            e,
            applier::ApplyError::UnknownKind { .. } | applier::ApplyError::UnknownResource { .. }
        );
        // The rules are matched by resource, which discovery did not give: guess the plural as
        // upstream does, so a rule for the kind is still found.
        let settings = self.settings(id, &guessed_plural(id));
        let message = e.to_string();
        let live = if unknown {
            Live::UnknownKind
        } else {
            Live::Unreadable(message.clone())
        };
        let outcome = self.unapplied(
            manifests::resource_meta(idx, id, ""),
            id,
            &settings,
            Err(message.clone()),
            live,
        );
        let mut result = blocked(
            outcome,
            self.carry_over(id, None),
            None,
            e.is_transient(),
            message,
        );
        result.unknown_kind = unknown;
        result
    }

    /// Indexes and watches the object before the write (its first events then find the work),
    /// and gives what the watch cache knows of it; of a `new_kind`, without waiting for its
    /// store's first list (unknown until then: the applier reads the object instead).
    async fn watch(&self, target: &Target, new_kind: bool) -> Cached {
        let ctx = self.ctx;
        ctx.watches.add(&self.name, target.key());
        // ReadOnly objects carry no label of ours, so no label-filtered store has them.
        if target.readonly {
            return Cached::Unknown;
        }
        ctx.watches.ensure(&target.resolved);
        if new_kind {
            return ctx
                .watches
                .cached(&target.resolved, &target.id.namespace, &target.id.name);
        }
        ctx.watches
            .cached_when_synced(&target.resolved, &target.id.namespace, &target.id.name)
            .await
    }

    /// Whether the work's executor may write the object. ReadOnly only reads, which the agent
    /// does with its own identity.
    async fn executor_gate(
        &self,
        manifest: &Value,
        target: &Target,
    ) -> Result<(), applier::ApplyError> {
        let Some(executor) = self
            .work
            .spec
            .executor
            .as_ref()
            .filter(|_| !target.readonly)
        else {
            return Ok(());
        };
        let gate = executor::ExecutorGate {
            check: &self.ctx.executor,
            work: &self.name,
            manifest,
            executor,
            target: executor::Target {
                group: target.resolved.group.clone(),
                version: target.resolved.version.clone(),
                resource: target.resolved.plural.clone(),
                namespace: target.id.namespace.clone(),
                name: target.id.name.clone(),
            },
            owned_by_work: !target.orphan,
        };
        applier::WriteGate::may_write(&gate)
            .await
            .map_err(applier::ApplyError::NotPermitted)
    }

    /// Writes the manifest with its strategy (a complete object is not updated).
    async fn write(
        &self,
        manifest: &Value,
        target: &Target,
        cached: &Cached,
    ) -> Result<applier::Applied, applier::ApplyError> {
        let complete_check = CompleteRules::of(self.ctx.evaluator, &target.settings.rules);
        self.ctx
            .applier
            .apply(applier::ApplyRequest {
                manifest,
                strategy: &target.settings.strategy,
                owner: target.owned().then(|| self.owner.clone()),
                labels: &self.labels,
                complete_check: complete_check
                    .as_ref()
                    .map(|c| c as &dyn applier::CompleteCheck),
                cached: cached.hint(),
                write_gate: None,
            })
            .await
    }

    /// Counts the apply and its duration (the executor check included) by strategy and result.
    fn count_apply(
        &self,
        target: &Target,
        written: &Result<applier::Applied, applier::ApplyError>,
        started: Instant,
    ) {
        let metrics = &self.ctx.metrics;
        let strategy = strategy_label(&target.settings.strategy.type_);
        metrics
            .apply_duration_seconds
            .get_or_create(&StrategyLabels { strategy })
            .observe(started.elapsed().as_secs_f64());
        metrics
            .applies_total
            .get_or_create(&ApplyLabels {
                strategy,
                result: match written {
                    Ok(done) => outcome_label(&done.outcome),
                    Err(e) if e.is_conflict() => "conflict",
                    Err(_) => "error",
                },
            })
            .inc();
    }

    /// The result of a written (or read, for ReadOnly) manifest: the live object the write gave,
    /// recorded when the work owns it, and its rules and feedback.
    async fn observe_written(
        &self,
        target: Target,
        done: applier::Applied,
        depended_on: bool,
        seen: Seen,
    ) -> ManifestResult {
        let live = match done.object {
            Some(object) => Live::Found(object),
            None => Live::Absent,
        };
        let mut applied = Vec::new();
        if let Live::Found(object) = &live
            && target.owned()
        {
            let uid = object
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default();
            applied.push(target.applied_meta(uid));
        }
        let key = target.key();
        let readonly = target.readonly;
        let mut outcome = self.observed(&target, Ok(()), live).await;
        outcome.drift = self.drift_condition(&outcome.meta, &seen);
        let failure = not_evaluated_because(&outcome.applied, &outcome.live);
        let as_dependency = match &outcome.live {
            Live::Found(object) if depended_on => AsDependency::Live(object.clone(), Vec::new()),
            _ => AsDependency::NotThere,
        };
        ManifestResult {
            desired: outcome.desired(),
            applied,
            key: Some(key),
            readonly,
            transient: false,
            failure,
            as_dependency,
            unknown_kind: false,
            object_watch: None,
        }
    }

    /// The result of a manifest the write failed for: blocked, with what is there read.
    async fn observe_unwritten(
        &self,
        target: Target,
        cached: Cached,
        e: applier::ApplyError,
        seen: Seen,
    ) -> ManifestResult {
        let message = e.to_string();
        let ignore_fields_error = e.is_ignore_field_error();
        let unknown_kind = matches!(
            e,
            applier::ApplyError::UnknownKind { .. } | applier::ApplyError::UnknownResource { .. }
        );
        let live = match e {
            applier::ApplyError::UnknownKind { .. }
            | applier::ApplyError::UnknownResource { .. } => Live::UnknownKind,
            applier::ApplyError::InvalidManifest(_) => Live::UnknownKind,
            // Available does not depend on apply: what is there is read. The store holds only
            // objects with the agent's label, so an object the agent could not write (a
            // conflict, a refused executor) may be there without it.
            _ => {
                let namespace =
                    (!target.id.namespace.is_empty()).then_some(target.id.namespace.as_str());
                read_live(
                    self.ctx,
                    &cached.doubting_absence(),
                    &target.resolved,
                    namespace,
                    &target.id.name,
                )
                .await
            }
        };
        let mut outcome = self.observed(&target, Err(message.clone()), live).await;
        outcome.ignore_fields_error = ignore_fields_error;
        outcome.drift = self.drift_condition(&outcome.meta, &seen);
        let mut result = blocked(
            outcome,
            self.carry_over(&target.id, Some(&target.resolved.plural)),
            Some(target.key()),
            e.is_transient(),
            message,
        );
        result.unknown_kind = unknown_kind;
        result
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
            waiting: None,
            invalid_gate: None,
            drift: None,
        }
    }

    /// The outcome of a resolved manifest: rules evaluated (on the blocking pool) and feedback
    /// read when the object is applied and there; otherwise not evaluated, saying why.
    async fn observed(
        &self,
        target: &Target,
        applied: Result<(), String>,
        live: Live,
    ) -> ManifestOutcome {
        let Target {
            id,
            resolved,
            settings,
            meta,
            ..
        } = target;
        let meta = meta.clone();
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
            waiting: None,
            invalid_gate: None,
            drift: None,
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

/// The entry of `status` for the manifest `meta` names (same kind, namespace and name, and
/// `also`).
fn status_entry<'a>(
    status: Option<&'a ManifestWorkStatus>,
    meta: &ManifestResourceMeta,
    also: impl Fn(&ManifestResourceMeta) -> bool,
) -> Option<&'a work_api::ManifestCondition> {
    status?
        .resource_status
        .as_ref()?
        .manifests
        .iter()
        .find(|m| {
            let m = &m.resource_meta;
            m.kind == meta.kind && m.namespace == meta.namespace && m.name == meta.name && also(m)
        })
}

/// Whether `status` already reports this feedback error for the manifest: its
/// `StatusFeedbackSynced` condition is False with the message the error gives.
fn feedback_already_reported(
    status: Option<&ManifestWorkStatus>,
    meta: &ManifestResourceMeta,
    error: &str,
) -> bool {
    let expected = conditions::feedback_condition(Err(error));
    status_entry(status, meta, |m| m.ordinal == meta.ordinal)
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

/// The result of a manifest whose identity (apiVersion, kind, namespace, name) cannot be read:
/// blocked with the reason, at its place in the spec.
fn unidentified(idx: usize, message: String) -> ManifestResult {
    let outcome = ManifestOutcome {
        meta: ManifestResourceMeta {
            ordinal: ordinal(idx),
            ..Default::default()
        },
        applied: Err(message.clone()),
        ignore_fields_error: false,
        live: Live::UnknownKind,
        rules: Vec::new(),
        feedback: Feedback::NoRules,
        waiting: None,
        invalid_gate: None,
        drift: None,
    };
    blocked(outcome, Vec::new(), None, false, message)
}

/// A manifest's index in the spec as its status reports it.
fn ordinal(idx: usize) -> i32 {
    i32::try_from(idx).unwrap_or(i32::MAX)
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
        as_dependency: AsDependency::NotThere,
        unknown_kind: false,
        object_watch: None,
    }
}

/// What the apply saw of a manifest's object for its `Drifted` condition: `before` is how the
/// cached object differed from the manifest when that was drift (`WorkScope::drift_before`).
/// A write that changed the object corrected it; a strategy that does not write (CreateOnly on
/// an existing object, ReadOnly) reports how the object differs; a failed write leaves the drift.
fn seen_after(
    manifest: &Value,
    written: &Result<applier::Applied, applier::ApplyError>,
    before: Vec<FieldDrift>,
) -> Seen {
    use applier::ApplyOutcome as Outcome;
    match written {
        Ok(done) => match done.outcome {
            Outcome::Created | Outcome::Updated if !before.is_empty() => Seen::Corrected(before),
            Outcome::Created | Outcome::Updated | Outcome::Unchanged => Seen::Matches,
            Outcome::CompleteBeforeUpdate => Seen::NotChecked,
            Outcome::CreateOnlyExists | Outcome::ReadOnly => match &done.object {
                Some(live) => seen_on(manifest, live),
                None => Seen::NotChecked,
            },
        },
        Err(_) if !before.is_empty() => Seen::Differs(before),
        Err(_) => Seen::NotChecked,
    }
}

/// How `live` compares with the manifest, for an object the agent does not write now.
fn seen_on(manifest: &Value, live: &Value) -> Seen {
    let fields = diff(manifest, live);
    if fields.is_empty() {
        Seen::Matches
    } else {
        Seen::Differs(fields)
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
