//! The I/O half: reads and writes objects on the spoke with each update strategy.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy,
};
use serde_json::Value;
use work_api::{AppliedManifestResourceMeta, UpdateStrategy, UpdateStrategyType};

use crate::ignore::plan_ignore_fields;
use crate::managed_fields::{covers, object_pointers, owned_fields};
use crate::manifest::{
    applied_fields, clean_manifest, create_body, is_noop_update, meta_str, owner_references_of,
    owner_references_patch, set_apply_owner_references, update_body,
};
use crate::owner::{has_owner_reference, remove_owner_reference};
use crate::{ApplyError, ResolvedResource, Resolver};
use work_semantics::ManifestId;

/// Field manager for the agent's own (non-apply) writes.
const WRITER: &str = "work-agent";

/// Most objects [`WrittenFields`] remembers; past that it starts over (each object then costs
/// one update that may be needless, see [`Applier::apply`]).
const MAX_REMEMBERED: usize = 100_000;

/// What the agent's last Update-strategy write (or no-op decision) set on each object, by UID:
/// the fields of the manifest, as JSON pointers. A later manifest that drops one of them has it
/// removed. Kept in memory, not on the object: after a restart the fields the agent's manager
/// changed (`managedFields`) stand in, which also name what the server defaulted at creation;
/// removing those once is harmless (the server sets them again, nothing changes).
///
/// Every applied object has an entry, so each is one text (the pointers as a JSON array): a
/// list of strings cost an allocation per pointer, some 150 bytes an object more.
#[derive(Clone, Default)]
struct WrittenFields {
    by_uid: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<Box<str>, Box<str>>>>,
}

impl WrittenFields {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<Box<str>, Box<str>>> {
        self.by_uid
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The fields last written on `live`: remembered, else those our manager changed.
    fn previous(&self, live: &Value) -> Vec<String> {
        let remembered = meta_str(live, "uid").and_then(|uid| {
            let map = self.lock();
            let text = map.get(uid)?;
            // Written by `remember` from a list of strings: it always parses.
            serde_json::from_str(text).ok()
        });
        if let Some(fields) = remembered {
            return fields;
        }
        owned_fields(live, WRITER, "Update")
            .map(|f| object_pointers(&f))
            .unwrap_or_default()
    }

    fn remember(&self, object: &Value, fields: Vec<String>) {
        let Some(uid) = meta_str(object, "uid") else {
            return;
        };
        let Ok(text) = serde_json::to_string(&fields) else {
            return;
        };
        let mut map = self.lock();
        if map.len() >= MAX_REMEMBERED && !map.contains_key(uid) {
            map.clear();
        }
        map.insert(uid.into(), text.into_boxed_str());
    }
}

/// Decides whether a manifest is already complete on its live object (the check before any
/// update). The agent supplies it, so the applier does not evaluate rules itself; it may run the
/// evaluation wherever it likes (the agent uses the blocking pool).
pub trait CompleteCheck: Send + Sync {
    /// Whether the manifest's `Complete` rules pass on `live` (false when it has none).
    fn is_complete<'a>(
        &'a self,
        live: &'a Value,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>>;
}

/// Decides whether the applier may write the object (the work's executor permissions): asked
/// only when a write is about to be sent, so an unchanged object costs no check.
pub trait WriteGate: Send + Sync {
    /// `Ok(())` to write; `Err(message)` to refuse (the apply fails with that message).
    fn may_write<'a>(&'a self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;
}

/// Asks the gate, if there is one.
async fn gate(gate: Option<&dyn WriteGate>) -> Result<(), ApplyError> {
    match gate {
        Some(gate) => gate.may_write().await.map_err(ApplyError::NotPermitted),
        None => Ok(()),
    }
}

/// One manifest to apply.
#[derive(Clone)]
pub struct ApplyRequest<'a> {
    /// The raw object from the ManifestWork.
    pub manifest: &'a Value,
    /// How to write it.
    pub strategy: &'a UpdateStrategy,
    /// The ownerReference to the AppliedManifestWork; None for ReadOnly and orphaned manifests
    /// (no reference is added; an existing one is left for [`Applier::release`] to remove).
    pub owner: Option<OwnerReference>,
    /// Labels added to the object (for filtered watches).
    pub labels: &'a BTreeMap<String, String>,
    /// Whether the manifest is complete on the live object: when it is, no update is written.
    /// None: the manifest has no `Complete` rules.
    pub complete_check: Option<&'a dyn CompleteCheck>,
    /// What the caller's watch cache says about the live object: `None`, not known (the applier
    /// reads it); `Some(None)`, absent (a create is sent without a read); `Some(Some(object))`,
    /// that object (an update carries its resourceVersion). Used for the first attempt only: a
    /// conflict (a stale cache) is retried from a fresh read.
    pub cached: Option<Option<&'a Value>>,
    /// Asked before any write; None: every write is allowed.
    pub write_gate: Option<&'a dyn WriteGate>,
}

/// What a strategy writes: the request, and where its object goes.
#[derive(Clone, Copy)]
struct Write<'a> {
    api: &'a Api<DynamicObject>,
    resource: &'a ResolvedResource,
    target: &'a ManifestId,
    req: &'a ApplyRequest<'a>,
}

/// What a strategy did, and the object as the API server left it (None: absent).
type Written = (ApplyOutcome, Option<Value>);

impl ApplyRequest<'_> {
    /// The object to create for this manifest (of a namespaced kind or not).
    fn create_body(&self, namespaced: bool) -> Result<Value, ApplyError> {
        create_body(self.manifest, namespaced, self.labels, self.owner.as_ref())
    }
}

/// The live object for each attempt: the caller's cached view the first time, a read after.
struct LiveSource<'a> {
    cached: std::sync::Mutex<Option<Option<&'a Value>>>,
}

impl<'a> LiveSource<'a> {
    fn new(cached: Option<Option<&'a Value>>) -> Self {
        Self {
            cached: std::sync::Mutex::new(cached),
        }
    }

    async fn read(
        &self,
        api: &Api<DynamicObject>,
        target: &ManifestId,
    ) -> Result<Option<Value>, ApplyError> {
        let cached = self
            .cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        match cached {
            Some(known) => Ok(known.cloned()),
            None => get_value(api, target).await,
        }
    }
}

impl std::fmt::Debug for ApplyRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApplyRequest")
            .field("manifest", &self.manifest)
            .field("strategy", &self.strategy)
            .field("owner", &self.owner)
            .field("labels", &self.labels)
            .field("complete_check", &self.complete_check.is_some())
            .field("cached", &self.cached)
            .field("write_gate", &self.write_gate.is_some())
            .finish()
    }
}

/// A live object the work owns: its UID and resourceVersion (the version the decision was made
/// on) and the ownerReferences of its other owners.
struct OurShare {
    uid: String,
    resource_version: Option<String>,
    other_owners: Vec<OwnerReference>,
}

impl OurShare {
    /// `None` when `live` is not the object `meta` names or carries no reference of ours.
    fn of(
        live: &Value,
        meta: &AppliedManifestResourceMeta,
        owner_uid: &str,
    ) -> Result<Option<Self>, ApplyError> {
        let Some(uid) = owned_uid(live, meta, owner_uid)? else {
            return Ok(None);
        };
        let refs = owner_references_of(live)?;
        Ok(Some(Self {
            uid,
            resource_version: meta_str(live, "resourceVersion").map(str::to_string),
            other_owners: remove_owner_reference(&refs, owner_uid),
        }))
    }

    /// Removes our ownerReference, keeping the others (conditional on the resourceVersion).
    async fn release(
        &self,
        api: &Api<DynamicObject>,
        target: &ManifestId,
    ) -> Result<(), ApplyError> {
        set_owner_references(
            api,
            target,
            &self.other_owners,
            self.resource_version.as_deref(),
        )
        .await
    }
}

/// What applying one manifest did.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    /// What happened.
    pub outcome: ApplyOutcome,
    /// The resource the manifest resolved to.
    pub resource: ResolvedResource,
    /// The live object after the apply; None only for ReadOnly when the object is absent.
    pub object: Option<Value>,
}

/// What happened to one manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApplyOutcome {
    /// The object did not exist and was created.
    Created,
    /// The object existed and was changed.
    Updated,
    /// The object existed and already matched the manifest; nothing changed.
    Unchanged,
    /// The object's `Complete` rules pass on the live object, so nothing was written.
    CompleteBeforeUpdate,
    /// ReadOnly: nothing written; `object` is the live object or None if absent.
    ReadOnly,
    /// CreateOnly and the object already exists: nothing written.
    CreateOnlyExists,
}

impl ApplyOutcome {
    /// Lowercase name, for metrics labels and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Updated => "updated",
            Self::Unchanged => "unchanged",
            Self::CompleteBeforeUpdate => "complete_before_update",
            Self::ReadOnly => "read_only",
            Self::CreateOnlyExists => "create_only_exists",
        }
    }
}

/// What deleting one applied resource did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeleteOutcome {
    /// We were the only owner: the object was deleted and is gone.
    Deleted,
    /// We were the only owner: its deletion started, and finalizers keep it for now.
    Terminating,
    /// Other owners remain: only our ownerReference was removed.
    OwnerRemoved,
    /// The object has no ownerReference of ours, or its UID is not the one we applied: untouched.
    NotOwned,
    /// The object (or its resource type) no longer exists.
    AlreadyGone,
}

impl DeleteOutcome {
    /// What happened, as a log line says it.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::Deleted => "deleted",
            Self::Terminating => "started deleting",
            Self::OwnerRemoved => "released (another owner keeps it)",
            Self::NotOwned => "left alone (not ours)",
            Self::AlreadyGone => "found gone",
        }
    }
}

/// Applies manifests to the spoke and deletes what the agent applied.
#[derive(Clone)]
pub struct Applier {
    client: kube::Client,
    resolver: Resolver,
    retry: ExponentialBuilder,
    written: WrittenFields,
}

impl std::fmt::Debug for Applier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Applier").finish_non_exhaustive()
    }
}

impl Applier {
    /// An applier using `client` for writes and `resolver` for discovery.
    pub fn new(client: kube::Client, resolver: Resolver) -> Self {
        Self {
            client,
            resolver,
            retry: ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(20))
                .with_max_delay(Duration::from_millis(500))
                .with_max_times(5)
                .with_jitter(),
            written: WrittenFields::default(),
        }
    }

    /// The resolver, for callers that need to resolve kinds themselves.
    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    /// Applies one manifest with its strategy. Before ANY update of an existing object (Update and
    /// ServerSideApply), asks `complete_check` about the live object; if the manifest is
    /// complete, nothing is written and the outcome is `CompleteBeforeUpdate`.
    pub async fn apply(&self, req: ApplyRequest<'_>) -> Result<Applied, ApplyError> {
        let target = ManifestId::of(req.manifest)?;
        let resource = self
            .resolver
            .resolve(&target.api_version, &target.kind)
            .await?;
        let api = self.api(&resource, target.namespace(), &target)?;
        let write = Write {
            api: &api,
            resource: &resource,
            target: &target,
            req: &req,
        };
        let (outcome, object) = match &req.strategy.type_ {
            UpdateStrategyType::Update => self.apply_update(write).await?,
            UpdateStrategyType::CreateOnly => self.apply_create_only(write).await?,
            UpdateStrategyType::ServerSideApply => self.apply_server_side(write).await?,
            UpdateStrategyType::ReadOnly => {
                (ApplyOutcome::ReadOnly, get_value(&api, &target).await?)
            }
            UpdateStrategyType::Unknown(other) => {
                return Err(ApplyError::UnsupportedStrategy(other.clone()));
            }
        };
        tracing::debug!(target = %target.describe(), outcome = outcome.as_str(), "applied manifest");
        Ok(Applied {
            outcome,
            resource,
            object,
        })
    }

    /// Runs `attempt` again, with the applier's backoff, while it ends in a conflict: the object
    /// changed between the attempt's read and its write, so it starts over from a fresh read.
    async fn again_on_conflict<T, F, Fut>(&self, attempt: F) -> Result<T, ApplyError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ApplyError>>,
    {
        attempt
            .retry(self.retry)
            .when(ApplyError::is_conflict)
            .await
    }

    /// Deletes an applied resource the work owns: if other owners remain, only removes our
    /// ownerReference; if we are the only owner, deletes with a UID precondition (`meta.uid`, or
    /// the live UID when `meta.uid` is empty) and the given propagation. Never deletes an object
    /// without our ownerReference, nor one whose UID differs from `meta.uid`.
    ///
    /// The decision is made on the object read from the API server, never on a watch cache: a
    /// cache can lag behind another work's apply that just added its ownerReference. Both writes
    /// carry the read's resourceVersion as a precondition, so a change between the read and the
    /// write is a conflict, answered by a fresh read and a new decision.
    pub async fn delete_owned(
        &self,
        meta: &AppliedManifestResourceMeta,
        owner_uid: &str,
        propagation: PropagationPolicy,
    ) -> Result<DeleteOutcome, ApplyError> {
        let Some((api, target)) = self.api_for_meta(meta).await? else {
            return Ok(DeleteOutcome::AlreadyGone);
        };
        let attempt = || async {
            let Some(live) = get_value(&api, &target).await? else {
                return Ok(DeleteOutcome::AlreadyGone);
            };
            let Some(share) = OurShare::of(&live, meta, owner_uid)? else {
                return Ok(DeleteOutcome::NotOwned);
            };
            if !share.other_owners.is_empty() {
                share.release(&api, &target).await?;
                return Ok(DeleteOutcome::OwnerRemoved);
            }
            // The resourceVersion too: the decision was made on this version (maybe a cached
            // one), so any change since (another owner added) is a conflict and a fresh read.
            let params = DeleteParams {
                propagation_policy: Some(propagation.clone()),
                preconditions: Some(Preconditions {
                    uid: Some(share.uid),
                    resource_version: share.resource_version,
                }),
                ..DeleteParams::default()
            };
            match api.delete(&target.name, &params).await {
                // The API server answers with the object while finalizers hold it.
                Ok(answer) if answer.is_left() => Ok(DeleteOutcome::Terminating),
                Ok(_) => Ok(DeleteOutcome::Deleted),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(DeleteOutcome::AlreadyGone),
                Err(e) => Err(ApplyError::from_kube("delete", target.describe(), e)),
            }
        };
        // A conflict means the object changed under us (or its UID did): decide again from a
        // fresh read, which then sees a new UID as NotOwned.
        self.again_on_conflict(attempt).await
    }

    /// Orphans an applied resource: removes our ownerReference and keeps the object. Does nothing
    /// when the object is gone, has another UID, or carries no reference of ours. Decided on the
    /// object read from the API server, written with its resourceVersion as a precondition (a
    /// conflict is a fresh read), as [`Applier::delete_owned`].
    pub async fn release(
        &self,
        meta: &AppliedManifestResourceMeta,
        owner_uid: &str,
    ) -> Result<(), ApplyError> {
        let Some((api, target)) = self.api_for_meta(meta).await? else {
            return Ok(());
        };
        let attempt = || async {
            let Some(live) = get_value(&api, &target).await? else {
                return Ok(());
            };
            match OurShare::of(&live, meta, owner_uid)? {
                Some(share) => share.release(&api, &target).await,
                None => Ok(()),
            }
        };
        self.again_on_conflict(attempt).await
    }

    /// Reads the live object (None if absent) — for ReadOnly manifests and status.
    pub async fn get(
        &self,
        resource: &ResolvedResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, ApplyError> {
        let target = crate::resolver::manifest_id_of(resource, namespace.unwrap_or_default(), name);
        let api = self.api(resource, target.namespace(), &target)?;
        get_value(&api, &target).await
    }

    fn api(
        &self,
        resource: &ResolvedResource,
        namespace: Option<&str>,
        target: &ManifestId,
    ) -> Result<Api<DynamicObject>, ApplyError> {
        let ar = resource.api_resource();
        match (resource.namespaced, namespace) {
            (true, Some(ns)) => Ok(Api::namespaced_with(self.client.clone(), ns, &ar)),
            (true, None) => Err(ApplyError::InvalidManifest(format!(
                "{} is namespaced: metadata.namespace is required",
                target.describe()
            ))),
            (false, _) => Ok(Api::all_with(self.client.clone(), &ar)),
        }
    }

    /// The API and target for an AppliedManifestWork entry; None when its resource type is no
    /// longer served (a deleted CRD takes its objects with it).
    async fn api_for_meta(
        &self,
        meta: &AppliedManifestResourceMeta,
    ) -> Result<Option<(Api<DynamicObject>, ManifestId)>, ApplyError> {
        let resource = match self
            .resolver
            .resolve_resource(&meta.group, &meta.version, &meta.resource)
            .await
        {
            Ok(r) => r,
            Err(ApplyError::UnknownResource { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let namespace =
            Some(meta.namespace.as_str()).filter(|ns| resource.namespaced && !ns.is_empty());
        let target =
            crate::resolver::manifest_id_of(&resource, namespace.unwrap_or_default(), &meta.name);
        let api = self.api(&resource, namespace, &target)?;
        Ok(Some((api, target)))
    }

    async fn apply_update(&self, write: Write<'_>) -> Result<Written, ApplyError> {
        let source = LiveSource::new(write.req.cached);
        let attempt = || async {
            let Some(live) = source.read(write.api, write.target).await? else {
                let body = write.req.create_body(write.resource.namespaced)?;
                gate(write.req.write_gate).await?;
                let created = create(write.api, write.target, &body).await?;
                self.written.remember(&created, applied_fields(&body));
                return Ok((ApplyOutcome::Created, Some(created)));
            };
            if complete_on_spoke(write.req.complete_check, &live).await {
                return Ok((ApplyOutcome::CompleteBeforeUpdate, Some(live)));
            }
            let plan = update_body(
                write.req.manifest,
                &live,
                write.resource.namespaced,
                write.req.labels,
                write.req.owner.as_ref(),
                &self.written.previous(&live),
            )?;
            if !plan.drops && is_noop_update(&plan.body, &live) {
                self.written.remember(&live, plan.fields);
                return Ok((ApplyOutcome::Unchanged, Some(live)));
            }
            let object = to_dynamic(&plan.body)?;
            gate(write.req.write_gate).await?;
            let updated = write
                .api
                .replace(&write.target.name, &post_params(), &object)
                .await
                .map_err(|e| ApplyError::from_kube("update", write.target.describe(), e))?;
            let updated = from_dynamic(&updated)?;
            self.written.remember(&updated, plan.fields);
            Ok((changed_outcome(&live, &updated), Some(updated)))
        };
        // 409: a stale resourceVersion, or a create racing another writer; start from a fresh read.
        self.again_on_conflict(attempt).await
    }

    async fn apply_create_only(&self, write: Write<'_>) -> Result<Written, ApplyError> {
        if let Some(live) = LiveSource::new(write.req.cached)
            .read(write.api, write.target)
            .await?
        {
            return Ok((ApplyOutcome::CreateOnlyExists, Some(live)));
        }
        let body = write.req.create_body(write.resource.namespaced)?;
        gate(write.req.write_gate).await?;
        match create(write.api, write.target, &body).await {
            Ok(created) => Ok((ApplyOutcome::Created, Some(created))),
            Err(ApplyError::Api { code: 409, .. }) => {
                // Someone created it between our read and our create: it exists, leave it.
                Ok((
                    ApplyOutcome::CreateOnlyExists,
                    get_value(write.api, write.target).await?,
                ))
            }
            Err(e) => Err(e),
        }
    }

    async fn apply_server_side(&self, write: Write<'_>) -> Result<Written, ApplyError> {
        let config = write
            .req
            .strategy
            .server_side_apply
            .clone()
            .unwrap_or_default();
        let live = LiveSource::new(write.req.cached)
            .read(write.api, write.target)
            .await?;
        if let Some(live) = &live
            && complete_on_spoke(write.req.complete_check, live).await
        {
            return Ok((ApplyOutcome::CompleteBeforeUpdate, Some(live.clone())));
        }
        let base = clean_manifest(
            write.req.manifest,
            write.resource.namespaced,
            write.req.labels,
        );
        let mut patch = plan_ignore_fields(&base, live.as_ref(), &config.ignore_fields)?.patch;
        set_apply_owner_references(&mut patch, live.as_ref(), write.req.owner.as_ref())?;
        if let Some(live) = &live
            && ssa_is_noop(
                &patch,
                live,
                config.field_manager(),
                write.req.owner.as_ref(),
            )?
        {
            // The server would change nothing.
            return Ok((ApplyOutcome::Unchanged, Some(live.clone())));
        }
        gate(write.req.write_gate).await?;
        let mut params = PatchParams::apply(config.field_manager());
        params.force = config.force;
        let applied = write
            .api
            .patch(&write.target.name, &params, &Patch::Apply(&patch))
            .await
            .map_err(|e| ApplyError::from_kube("apply", write.target.describe(), e))?;
        let applied = from_dynamic(&applied)?;
        let outcome = match &live {
            None => ApplyOutcome::Created,
            Some(live) => changed_outcome(live, &applied),
        };
        Ok((outcome, Some(applied)))
    }
}

/// Whether the manifest's `Complete` rules pass on the live object (the pre-update check).
async fn complete_on_spoke(check: Option<&dyn CompleteCheck>, live: &Value) -> bool {
    match check {
        Some(check) => check.is_complete(live).await,
        None => false,
    }
}

/// Whether a server-side apply of `patch` by `manager` would change nothing: the manager has
/// applied the object before and still sends every field it owns (per `managedFields`; a dropped
/// field would be deleted), every field of the patch has its value on the spoke, and our
/// ownerReference is in place.
fn ssa_is_noop(
    patch: &Value,
    live: &Value,
    manager: &str,
    owner: Option<&OwnerReference>,
) -> Result<bool, ApplyError> {
    let Some(owned) = owned_fields(live, manager, "Apply") else {
        return Ok(false);
    };
    if !covers(patch, &owned) || !is_noop_update(patch, live) {
        return Ok(false);
    }
    Ok(match owner {
        Some(owner) => has_owner_reference(&owner_references_of(live)?, &owner.uid),
        None => true,
    })
}

/// The live UID when `live` is the object we applied and carries our ownerReference.
fn owned_uid(
    live: &Value,
    meta: &AppliedManifestResourceMeta,
    owner_uid: &str,
) -> Result<Option<String>, ApplyError> {
    let Some(live_uid) = meta_str(live, "uid") else {
        return Ok(None);
    };
    if !meta.uid.is_empty() && meta.uid != live_uid {
        return Ok(None);
    }
    if owner_uid.is_empty() || !has_owner_reference(&owner_references_of(live)?, owner_uid) {
        return Ok(None);
    }
    Ok(Some(live_uid.to_string()))
}

/// Updated when the write changed the object (its resourceVersion moved), else Unchanged.
fn changed_outcome(before: &Value, after: &Value) -> ApplyOutcome {
    if meta_str(before, "resourceVersion") == meta_str(after, "resourceVersion") {
        ApplyOutcome::Unchanged
    } else {
        ApplyOutcome::Updated
    }
}

async fn set_owner_references(
    api: &Api<DynamicObject>,
    target: &ManifestId,
    refs: &[OwnerReference],
    resource_version: Option<&str>,
) -> Result<(), ApplyError> {
    let patch = owner_references_patch(refs, resource_version)?;
    match api
        .patch(&target.name, &patch_params(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(ApplyError::from_kube("patch", target.describe(), e)),
    }
}

async fn get_value(
    api: &Api<DynamicObject>,
    target: &ManifestId,
) -> Result<Option<Value>, ApplyError> {
    match api.get_opt(&target.name).await {
        Ok(Some(obj)) => Ok(Some(from_dynamic(&obj)?)),
        Ok(None) => Ok(None),
        Err(e) => Err(ApplyError::from_kube("get", target.describe(), e)),
    }
}

async fn create(
    api: &Api<DynamicObject>,
    target: &ManifestId,
    body: &Value,
) -> Result<Value, ApplyError> {
    let object = to_dynamic(body)?;
    let created = api
        .create(&post_params(), &object)
        .await
        .map_err(|e| ApplyError::from_kube("create", target.describe(), e))?;
    from_dynamic(&created)
}

/// Merge patches (ownerReferences) name the agent's field manager too, so no write of ours shows
/// up as `unknown` in `managedFields`.
fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(WRITER.to_string()),
        ..PatchParams::default()
    }
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(WRITER.to_string()),
        ..PostParams::default()
    }
}

fn to_dynamic(body: &Value) -> Result<DynamicObject, ApplyError> {
    // Only apiVersion, kind and metadata are typed (the rest stays raw JSON), so a decoding
    // error is about one of them; ManifestId::of already checked apiVersion and kind.
    serde_json::from_value(body.clone())
        .map_err(|e| ApplyError::InvalidManifest(format!("metadata: {e}")))
}

fn from_dynamic(object: &DynamicObject) -> Result<Value, ApplyError> {
    serde_json::to_value(object)
        .map_err(|e| ApplyError::InvalidManifest(format!("cannot encode the live object: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn live(uid: &str, owners: &[&str], rv: &str) -> Value {
        let refs: Vec<Value> = owners
            .iter()
            .map(|o| json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "AppliedManifestWork", "name": o, "uid": o}))
            .collect();
        json!({"metadata": {"name": "x", "uid": uid, "resourceVersion": rv, "ownerReferences": refs}})
    }

    fn meta(uid: &str) -> AppliedManifestResourceMeta {
        AppliedManifestResourceMeta {
            version: "v1".into(),
            resource: "configmaps".into(),
            name: "x".into(),
            uid: uid.into(),
            ..Default::default()
        }
    }

    #[test]
    fn written_fields_are_given_back_as_remembered_else_from_managed_fields() {
        let written = WrittenFields::default();
        let object = json!({"metadata": {"name": "x", "uid": "u1"}});
        let fields = vec![
            "/data".to_string(),
            "/data/a~1b".into(),
            "/spec/odd \"key\"\nwith a newline".into(),
        ];
        written.remember(&object, fields.clone());
        assert_eq!(written.previous(&object), fields);
        written.remember(&object, vec!["/data".into()]);
        assert_eq!(written.previous(&object), ["/data"]);
        // Not remembered (another UID): the fields our manager owns on the object.
        let other = json!({"metadata": {"name": "x", "uid": "u2", "managedFields": [
            {"manager": WRITER, "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:k": {}}}}]}});
        assert_eq!(written.previous(&other), ["/data", "/data/k"]);
        // No UID: nothing remembered, nothing owned.
        let anonymous = json!({"metadata": {"name": "x"}});
        written.remember(&anonymous, vec!["/data".into()]);
        assert!(written.previous(&anonymous).is_empty());
    }

    #[test]
    fn owned_only_with_our_reference_and_the_recorded_uid() {
        let obj = live("u1", &["ours", "theirs"], "1");
        assert_eq!(
            owned_uid(&obj, &meta("u1"), "ours")
                .ok()
                .flatten()
                .as_deref(),
            Some("u1")
        );
        assert_eq!(
            owned_uid(&obj, &meta(""), "ours").ok().flatten().as_deref(),
            Some("u1"),
            "no recorded uid: the live one"
        );
        assert_eq!(
            owned_uid(&obj, &meta("u0"), "ours").ok().flatten(),
            None,
            "recreated object"
        );
        assert_eq!(
            owned_uid(&obj, &meta("u1"), "stranger").ok().flatten(),
            None,
            "not our reference"
        );
        assert_eq!(
            owned_uid(&obj, &meta("u1"), "").ok().flatten(),
            None,
            "an empty owner uid owns nothing"
        );
        let no_uid = json!({"metadata": {"name": "x"}});
        assert_eq!(owned_uid(&no_uid, &meta(""), "ours").ok().flatten(), None);
    }

    #[test]
    fn outcome_follows_the_resource_version() {
        assert_eq!(
            changed_outcome(&live("u", &[], "1"), &live("u", &[], "1")),
            ApplyOutcome::Unchanged
        );
        assert_eq!(
            changed_outcome(&live("u", &[], "1"), &live("u", &[], "2")),
            ApplyOutcome::Updated
        );
    }

    #[test]
    fn outcome_names_are_distinct() {
        let all = [
            ApplyOutcome::Created,
            ApplyOutcome::Updated,
            ApplyOutcome::Unchanged,
            ApplyOutcome::CompleteBeforeUpdate,
            ApplyOutcome::ReadOnly,
            ApplyOutcome::CreateOnlyExists,
        ];
        let names: std::collections::BTreeSet<&str> =
            all.iter().map(ApplyOutcome::as_str).collect();
        assert_eq!(names.len(), all.len());
    }
}
