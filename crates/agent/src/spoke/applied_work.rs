//! The works' AppliedManifestWorks on the spoke: read from their watch store (with the agent's
//! own latest write overlaid), created with the finalizer when missing, and their applied
//! resources written when they change. The store keeps each as its packed text only
//! ([`ObjectStore`]): a kube-runtime reflector store held its `ObjectMeta` and a key of four
//! strings beside the text, about 700 bytes a work more.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, Patch};
use kube::{Api, ResourceExt};
use serde_json::json;
use work_api::{
    APPLIED_MANIFEST_WORK_FINALIZER, AppliedManifestResourceMeta, AppliedManifestWork,
    AppliedManifestWorkSpec,
};

use crate::config::AgentConfig;
use crate::latest::Latest;
use crate::packed::PackedJson;
use crate::spoke::live_object::{LiveObject, SharedResource};
use crate::spoke::object_store::ObjectStore;
use crate::{finalizer_patch, params};
use applier::record;

/// Where a work's AppliedManifestWork stands.
#[derive(Debug)]
pub enum AppliedState {
    /// It exists (with our finalizer) and is not being deleted.
    Ready(AppliedManifestWork),
    /// It is being deleted: its resources are cleaned up before it is re-created.
    Deleting(AppliedManifestWork),
}

/// The AppliedManifestWork resource, for its watch as [`LiveObject`]s.
pub static RESOURCE: LazyLock<SharedResource> =
    LazyLock::new(|| SharedResource::new(ApiResource::erase::<AppliedManifestWork>(&())));

/// The AppliedManifestWork a watch event or the store holds; an error names what in its text
/// is not a valid AppliedManifestWork (only an object the API server should have refused).
pub fn decode(json: &PackedJson) -> Result<AppliedManifestWork, String> {
    let text = json.unpack().map_err(|e| e.to_string())?;
    serde_json::from_slice(&text).map_err(|e| e.to_string())
}

/// The AppliedManifestWork of `object`, logged when it does not decode.
pub fn decoded(object: &LiveObject) -> Option<AppliedManifestWork> {
    decode(object.json())
        .inspect_err(|e| {
            let name = object.metadata.name.as_deref().unwrap_or_default();
            tracing::warn!(applied = %name, error = %e, "the AppliedManifestWork cannot be decoded");
        })
        .ok()
}

/// Reads and writes AppliedManifestWorks.
pub struct AppliedWorks {
    api: Api<AppliedManifestWork>,
    store: ObjectStore,
    synced: Arc<AtomicBool>,
    latest: Latest<AppliedManifestWork>,
}

impl AppliedWorks {
    /// Over the store their watch fills; `synced` turns true after its initial list.
    pub fn new(api: Api<AppliedManifestWork>, store: ObjectStore, synced: Arc<AtomicBool>) -> Self {
        Self {
            api,
            store,
            synced,
            latest: Latest::default(),
        }
    }

    /// The API (for the writes of deletion).
    pub fn api(&self) -> &Api<AppliedManifestWork> {
        &self.api
    }

    /// The AppliedManifestWork: from the store once it is synced (no request), else read. A miss
    /// may be wrong while the store is behind; where that matters, use [`AppliedWorks::confirmed`].
    pub async fn get(&self, name: &str) -> Result<Option<AppliedManifestWork>, kube::Error> {
        if !self.synced.load(Ordering::Acquire) {
            return self.api.get_opt(name).await;
        }
        Ok(self.stored(name))
    }

    /// [`AppliedWorks::get`], with a miss confirmed by a read: the store can be behind (a watch
    /// re-listing after an API server restart), and a deletion that believed the miss would
    /// leave the work's resources behind.
    pub async fn confirmed(&self, name: &str) -> Result<Option<AppliedManifestWork>, kube::Error> {
        let stored = self
            .synced
            .load(Ordering::Acquire)
            .then(|| self.stored(name))
            .flatten();
        match stored {
            Some(amw) => Ok(Some(amw)),
            None => self.api.get_opt(name).await,
        }
    }

    fn stored(&self, name: &str) -> Option<AppliedManifestWork> {
        let seen = self.store.get("", name)?;
        self.fresher(&seen).map(|amw| amw.as_ref().clone())
    }

    /// `seen`, decoded, or the agent's own later write of it; `None` (logged) if the stored
    /// text does not decode, which only an object the API server should have refused can do.
    fn fresher(&self, seen: &PackedJson) -> Option<Arc<AppliedManifestWork>> {
        let amw = decode(seen)
            .inspect_err(
                |e| tracing::warn!(error = %e, "a stored AppliedManifestWork cannot be decoded"),
            )
            .ok()?;
        let name = amw.name_any();
        Some(self.latest.fresher(&name, Arc::new(amw)))
    }

    /// The watch delivered `applied`: drops the agent's own copy once the store has caught up.
    pub fn observe(&self, applied: &LiveObject) {
        if let Some(name) = applied.metadata.name.as_deref() {
            self.latest
                .observe(name, applied.metadata.resource_version.as_deref());
        }
    }

    /// Whether the store holds the watch's full initial list.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// What `keep` keeps of each AppliedManifestWork in the store (each with the agent's own
    /// later write overlaid). They are decoded one at a time, so a scan holds only what it
    /// keeps: every one decoded at once was some 2 KB a work, 200 MB at 100,000.
    pub fn scan<T>(&self, keep: impl FnMut(Arc<AppliedManifestWork>) -> Option<T>) -> Vec<T> {
        self.store
            .all()
            .iter()
            .filter_map(|seen| self.fresher(seen))
            .filter_map(keep)
            .collect()
    }

    /// Forgets the agent's own copy (the object is gone).
    pub fn forget(&self, name: &str) {
        self.latest.forget(name);
    }

    /// The work's AppliedManifestWork, created with its finalizer when missing.
    /// Its labels are the work's, and its spec names this agent (an AppliedManifestWork left by
    /// an agent with another ID is taken over). A new one is created recording what `initial`
    /// gives (awaited only then): the resources the work is about to own, so no write of the
    /// record needs to precede their creates (see [`applier::record`]).
    pub async fn ensure(
        &self,
        config: &AgentConfig,
        work_name: &str,
        labels: &BTreeMap<String, String>,
        initial: impl Future<Output = Vec<AppliedManifestResourceMeta>>,
    ) -> Result<AppliedState, kube::Error> {
        let name = config.applied_name(work_name);
        let spec = AppliedManifestWorkSpec {
            hub_hash: config.hub_hash.clone(),
            agent_id: config.agent_id.clone(),
            manifest_work_name: work_name.to_string(),
        };
        match self.get(&name).await? {
            Some(amw) if amw.metadata.deletion_timestamp.is_some() => {
                Ok(AppliedState::Deleting(amw))
            }
            Some(amw) => {
                let amw = match finalizer_patch::ensure_finalizer(
                    &self.api,
                    &amw,
                    APPLIED_MANIFEST_WORK_FINALIZER,
                )
                .await?
                {
                    Some(patched) => {
                        self.latest.record(&name, patched.clone());
                        patched
                    }
                    None => amw,
                };
                let spec = kept_identity(config, &amw.spec, spec);
                match identity_patch(&amw, &spec, labels) {
                    Some(patch) => {
                        let patched = self
                            .api
                            .patch(&name, &params::patch(), &Patch::Merge(&patch))
                            .await?;
                        self.latest.record(&name, patched.clone());
                        Ok(AppliedState::Ready(patched))
                    }
                    None => Ok(AppliedState::Ready(amw)),
                }
            }
            None => {
                let annotations = record::annotation_text(&initial.await)
                    .filter(|text| !text.is_empty())
                    .map(|text| BTreeMap::from([(record::ANNOTATION.to_string(), text)]));
                let amw = AppliedManifestWork {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        labels: (!labels.is_empty()).then(|| labels.clone()),
                        annotations,
                        finalizers: Some(vec![APPLIED_MANIFEST_WORK_FINALIZER.to_string()]),
                        ..Default::default()
                    },
                    spec,
                    status: None,
                };
                match self.api.create(&params::post(), &amw).await {
                    Ok(created) => {
                        self.latest.record(&name, created.clone());
                        Ok(AppliedState::Ready(created))
                    }
                    // The store was behind: read what is there.
                    Err(kube::Error::Api(s)) if s.is_already_exists() => {
                        match self.api.get_opt(&name).await? {
                            Some(amw) if amw.metadata.deletion_timestamp.is_some() => {
                                Ok(AppliedState::Deleting(amw))
                            }
                            Some(amw) => Ok(AppliedState::Ready(amw)),
                            None => Err(kube::Error::Api(s)),
                        }
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Records the resources the work owns now; the written AppliedManifestWork. An empty list
    /// also drops the list the AppliedManifestWork was created with, which an empty status
    /// would otherwise leave standing as the record.
    pub async fn write_resources(
        &self,
        applied: &AppliedManifestWork,
        resources: &[AppliedManifestResourceMeta],
    ) -> Result<AppliedManifestWork, kube::Error> {
        let name = applied.name_any();
        let patch = json!({ "status": { "appliedResources": resources } });
        let mut written = self
            .api
            .patch_status(&name, &params::patch(), &Patch::Merge(&patch))
            .await?;
        let created_with = written
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(record::ANNOTATION));
        if resources.is_empty() && created_with {
            let patch = json!({
                "metadata": {
                    "uid": written.metadata.uid,
                    "annotations": {record::ANNOTATION: null},
                },
            });
            written = self
                .api
                .patch(&name, &params::patch(), &Patch::Merge(&patch))
                .await?;
        }
        self.latest.record(&name, written.clone());
        Ok(written)
    }
}

impl AppliedWorks {
    /// Sets annotation `key` of the AppliedManifestWork to `value` (UID precondition: never on
    /// another object of that name).
    pub async fn annotate(
        &self,
        applied: &AppliedManifestWork,
        key: &str,
        value: &str,
    ) -> Result<(), kube::Error> {
        let name = applied.name_any();
        let patch = json!({
            "metadata": {
                "uid": applied.metadata.uid,
                "annotations": {key: value},
            },
        });
        let written = self
            .api
            .patch(&name, &params::patch(), &Patch::Merge(&patch))
            .await?;
        self.latest.record(&name, written);
        Ok(())
    }
}

/// `wanted`, with the agent ID `existing` records when this agent counts it as its own (the hub
/// hash, as upstream's and Maestro's agents record it): taking a cluster over from those agents
/// then rewrites none of their AppliedManifestWorks.
pub fn kept_identity(
    config: &AgentConfig,
    existing: &AppliedManifestWorkSpec,
    wanted: AppliedManifestWorkSpec,
) -> AppliedManifestWorkSpec {
    if config.is_own_agent_id(&existing.agent_id) {
        AppliedManifestWorkSpec {
            agent_id: existing.agent_id.clone(),
            ..wanted
        }
    } else {
        wanted
    }
}

/// The merge patch that gives an AppliedManifestWork the work's labels and this agent's spec,
/// if it lacks either (with its UID and resourceVersion, so a stale view writes nothing).
pub fn identity_patch(
    amw: &AppliedManifestWork,
    spec: &AppliedManifestWorkSpec,
    labels: &BTreeMap<String, String>,
) -> Option<serde_json::Value> {
    let current = amw.metadata.labels.clone().unwrap_or_default();
    if &current == labels && &amw.spec == spec {
        return None;
    }
    let mut label_patch = serde_json::Map::new();
    for key in current.keys().filter(|k| !labels.contains_key(*k)) {
        label_patch.insert(key.clone(), serde_json::Value::Null);
    }
    for (k, v) in labels {
        if current.get(k) != Some(v) {
            label_patch.insert(k.clone(), serde_json::Value::String(v.clone()));
        }
    }
    Some(json!({
        "metadata": {
            "uid": amw.metadata.uid,
            "resourceVersion": amw.metadata.resource_version,
            "labels": label_patch,
        },
        "spec": spec,
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use serde_json::json;

    use super::*;

    /// An API server that has the AppliedManifestWork `a1` and counts the requests it answers.
    fn api_with_a1(requests: Arc<AtomicUsize>) -> Api<AppliedManifestWork> {
        let client = test_support::fake_client("default", move |_, path, _| {
            requests.fetch_add(1, Ordering::SeqCst);
            if path.ends_with("/appliedmanifestworks/a1") {
                let amw = json!({
                    "apiVersion": "work.open-cluster-management.io/v1",
                    "kind": "AppliedManifestWork",
                    "metadata": {"name": "a1", "uid": "u1"},
                    "spec": {"hubHash": "h", "agentID": "x", "manifestWorkName": "w1"},
                });
                (200, amw)
            } else {
                (
                    404,
                    test_support::status_failure(404, "NotFound", "not found"),
                )
            }
        });
        Api::all(client)
    }

    #[test]
    fn identity_follows_the_work_labels_and_this_agent() {
        let spec = AppliedManifestWorkSpec {
            hub_hash: "h".into(),
            agent_id: "a".into(),
            manifest_work_name: "w".into(),
        };
        let mut amw: AppliedManifestWork = serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1",
            "kind": "AppliedManifestWork",
            "metadata": {"name": "h-w", "uid": "u1", "resourceVersion": "7",
                         "labels": {"old": "x", "keep": "1"}},
            "spec": {"hubHash": "h", "agentID": "a", "manifestWorkName": "w"},
        }))
        .expect("valid AppliedManifestWork");
        let labels: BTreeMap<String, String> = [
            ("keep".to_string(), "1".to_string()),
            ("new".into(), "2".into()),
        ]
        .into();
        let patch = identity_patch(&amw, &spec, &labels).expect("labels differ");
        assert_eq!(
            patch["metadata"]["labels"],
            json!({"old": null, "new": "2"})
        );
        assert_eq!(patch["metadata"]["uid"], "u1");
        amw.metadata.labels = Some(labels.clone());
        assert_eq!(identity_patch(&amw, &spec, &labels), None);
        amw.spec.agent_id = "another".into();
        let taken = identity_patch(&amw, &spec, &labels).expect("another agent's");
        assert_eq!(taken["spec"]["agentID"], "a");
    }

    #[test]
    fn an_applied_work_recorded_with_the_hub_hash_keeps_it_under_a_generated_id() {
        let config = AgentConfig::new("c1".into(), "generated".into(), "https://hub")
            .with_generated_agent_id(true);
        let wanted = AppliedManifestWorkSpec {
            hub_hash: config.hub_hash.clone(),
            agent_id: "generated".into(),
            manifest_work_name: "w".into(),
        };
        let by_upstream = AppliedManifestWorkSpec {
            agent_id: config.hub_hash.clone(),
            ..wanted.clone()
        };
        assert_eq!(
            kept_identity(&config, &by_upstream, wanted.clone()),
            by_upstream
        );
        let by_another = AppliedManifestWorkSpec {
            agent_id: "another".into(),
            ..wanted.clone()
        };
        assert_eq!(kept_identity(&config, &by_another, wanted.clone()), wanted);
        // An ID given by flag or file takes over the hub hash's.
        let given = AgentConfig::new("c1".into(), "given".into(), "https://hub");
        let wanted = AppliedManifestWorkSpec {
            agent_id: "given".into(),
            ..wanted
        };
        let by_upstream = AppliedManifestWorkSpec {
            agent_id: given.hub_hash.clone(),
            ..wanted.clone()
        };
        assert_eq!(kept_identity(&given, &by_upstream, wanted.clone()), wanted);
    }

    #[tokio::test]
    async fn a_miss_of_a_synced_store_is_confirmed_by_a_read() {
        let requests = Arc::new(AtomicUsize::new(0));
        // Synced, but behind: it has not seen `a1` yet.
        let works = AppliedWorks::new(
            api_with_a1(requests.clone()),
            ObjectStore::default(),
            Arc::new(AtomicBool::new(true)),
        );
        let seen = works.get("a1").await.expect("the store answers");
        assert!(seen.is_none(), "the store alone says it is not there");
        assert_eq!(requests.load(Ordering::SeqCst), 0);
        let confirmed = works.confirmed("a1").await.expect("the read answers");
        assert_eq!(
            confirmed.and_then(|a| a.metadata.uid).as_deref(),
            Some("u1")
        );
        assert_eq!(requests.load(Ordering::SeqCst), 1);
        let gone = works.confirmed("a2").await.expect("the read answers");
        assert!(gone.is_none());
    }

    #[tokio::test]
    async fn a_stored_work_is_read_without_a_request_and_the_agents_newer_write_wins() {
        let requests = Arc::new(AtomicUsize::new(0));
        let store = ObjectStore::default();
        let works = AppliedWorks::new(
            api_with_a1(requests.clone()),
            store.clone(),
            Arc::new(AtomicBool::new(true)),
        );
        let seen = |rv: &str, uid: &str| {
            LiveObject::from_value(json!({
                "apiVersion": "work.open-cluster-management.io/v1",
                "kind": "AppliedManifestWork",
                "metadata": {"name": "h-w", "uid": "u1", "resourceVersion": rv,
                    "finalizers": [APPLIED_MANIFEST_WORK_FINALIZER],
                    "managedFields": [{"manager": "m", "operation": "Update"}]},
                "spec": {"hubHash": "h", "agentID": "a", "manifestWorkName": "w"},
                "status": {"appliedResources": [{"group": "", "version": "v1",
                    "resource": "configmaps", "namespace": "n", "name": "c", "uid": uid}]},
            }))
            .expect("an object")
        };
        store.apply(&kube::runtime::watcher::Event::Apply(seen("5", "c1")));
        let amw = works
            .get("h-w")
            .await
            .expect("the store answers")
            .expect("held");
        assert_eq!(amw.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(amw.spec.manifest_work_name, "w");
        let uids = |amw: &AppliedManifestWork| {
            amw.status.as_ref().map(|s| {
                s.applied_resources
                    .iter()
                    .map(|r| r.uid.clone())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(uids(&amw), Some(vec!["c1".to_string()]));
        assert_eq!(amw.metadata.finalizers.as_ref().map(Vec::len), Some(1));
        assert_eq!(works.scan(|amw| Some(amw.name_any())), ["h-w"]);
        assert!(works.scan(|_| None::<()>).is_empty());
        assert_eq!(
            requests.load(Ordering::SeqCst),
            0,
            "no read: the store had it"
        );

        // The agent wrote version 6; the store still has 5: the write is what a reconcile reads.
        let mut ours = amw.clone();
        ours.metadata.resource_version = Some("6".into());
        ours.status = None;
        works.latest.record("h-w", ours);
        let read = works.get("h-w").await.expect("answers").expect("held");
        assert_eq!(read.metadata.resource_version.as_deref(), Some("6"));
        // The watch brings 6: the store's copy is read again, and the agent's is dropped.
        let caught_up = seen("6", "c2");
        store.apply(&kube::runtime::watcher::Event::Apply(caught_up.clone()));
        works.observe(&caught_up);
        assert_eq!(works.latest.len(), 0);
        let read = works.get("h-w").await.expect("answers").expect("held");
        assert_eq!(uids(&read), Some(vec!["c2".to_string()]));

        store.apply(&kube::runtime::watcher::Event::Delete(caught_up));
        assert!(works.get("h-w").await.expect("answers").is_none());
        assert_eq!(requests.load(Ordering::SeqCst), 0);
    }
}
