//! The works' AppliedManifestWorks on the spoke: read from their watch store (with the agent's
//! own latest write overlaid), created with the finalizer when missing, and their applied
//! resources written when they change.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Patch;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use serde_json::json;
use work_api::{
    APPLIED_MANIFEST_WORK_FINALIZER, AppliedManifestResourceMeta, AppliedManifestWork,
    AppliedManifestWorkSpec,
};

use super::config::AgentConfig;
use super::latest::Latest;
use super::{finalizers, params};

/// Where a work's AppliedManifestWork stands.
#[derive(Debug)]
pub enum AppliedState {
    /// It exists (with our finalizer) and is not being deleted.
    Ready(AppliedManifestWork),
    /// It is being deleted: its resources are cleaned up before it is re-created.
    Deleting(AppliedManifestWork),
}

/// Reads and writes AppliedManifestWorks.
pub struct AppliedWorks {
    api: Api<AppliedManifestWork>,
    store: Store<AppliedManifestWork>,
    synced: Arc<AtomicBool>,
    latest: Latest<AppliedManifestWork>,
}

impl AppliedWorks {
    /// Over the store a reflector fills; `synced` turns true after its initial list.
    pub fn new(
        api: Api<AppliedManifestWork>,
        store: Store<AppliedManifestWork>,
        synced: Arc<AtomicBool>,
    ) -> Self {
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

    /// The AppliedManifestWork: from the store once it is synced (no request), else read.
    pub async fn get(&self, name: &str) -> Result<Option<AppliedManifestWork>, kube::Error> {
        if !self.synced.load(Ordering::Acquire) {
            return self.api.get_opt(name).await;
        }
        Ok(self
            .store
            .get(&ObjectRef::new(name))
            .map(|seen| self.latest.fresher(name, seen).as_ref().clone()))
    }

    /// The watch delivered `applied`: drops the agent's own copy once the store has caught up.
    pub fn observe(&self, applied: &AppliedManifestWork) {
        self.latest
            .observe(&applied.name_any(), applied.resource_version().as_deref());
    }

    /// Whether the store holds the watch's full initial list.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Every AppliedManifestWork in the store (each with the agent's own later write overlaid).
    pub fn all(&self) -> Vec<Arc<AppliedManifestWork>> {
        self.store
            .state()
            .into_iter()
            .map(|seen| self.latest.fresher(&seen.name_any(), seen))
            .collect()
    }

    /// Forgets the agent's own copy (the object is gone).
    pub fn forget(&self, name: &str) {
        self.latest.forget(name);
    }

    /// The work's AppliedManifestWork, created with its finalizer when missing.
    pub async fn ensure(
        &self,
        config: &AgentConfig,
        work_name: &str,
    ) -> Result<AppliedState, kube::Error> {
        let name = config.applied_name(work_name);
        match self.get(&name).await? {
            Some(amw) if amw.metadata.deletion_timestamp.is_some() => {
                Ok(AppliedState::Deleting(amw))
            }
            Some(amw) => {
                match finalizers::ensure_finalizer(&self.api, &amw, APPLIED_MANIFEST_WORK_FINALIZER)
                    .await?
                {
                    Some(patched) => {
                        self.latest.record(&name, patched.clone());
                        Ok(AppliedState::Ready(patched))
                    }
                    None => Ok(AppliedState::Ready(amw)),
                }
            }
            None => {
                let amw = AppliedManifestWork {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        finalizers: Some(vec![APPLIED_MANIFEST_WORK_FINALIZER.to_string()]),
                        ..Default::default()
                    },
                    spec: AppliedManifestWorkSpec {
                        hub_hash: config.hub_hash.clone(),
                        agent_id: config.agent_id.clone(),
                        manifest_work_name: work_name.to_string(),
                    },
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

    /// Records the resources the work owns now.
    pub async fn write_resources(
        &self,
        applied: &AppliedManifestWork,
        resources: &[AppliedManifestResourceMeta],
    ) -> Result<(), kube::Error> {
        let name = applied.name_any();
        let patch = json!({ "status": { "appliedResources": resources } });
        let written = self
            .api
            .patch_status(&name, &params::patch(), &Patch::Merge(&patch))
            .await?;
        self.latest.record(&name, written);
        Ok(())
    }
}
