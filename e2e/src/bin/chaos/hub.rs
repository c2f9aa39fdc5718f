//! Where the works live, seen one way by the workload and the checks: a Kubernetes hub (the
//! ManifestWorks of the cluster namespace) or a source behind a broker (`broker.rs`), whose
//! resources are shown as the ManifestWorks they stand for.

use std::sync::Arc;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use work_api::ManifestWork;

use crate::broker::BrokerHub;

/// Why a hub operation failed.
#[derive(Debug)]
pub enum HubError {
    /// No such work (collected by its TTL, or already gone).
    NotFound,
    /// The outcome is unknown (a timeout, a conflict): the operation may have happened.
    Unknown(String),
    /// Clearly refused: nothing happened.
    Refused(String),
}

impl std::fmt::Display for HubError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HubError::NotFound => f.write_str("not found"),
            HubError::Unknown(e) | HubError::Refused(e) => f.write_str(e),
        }
    }
}

/// The hub of a run.
#[derive(Clone)]
pub enum Hub {
    /// A Kubernetes hub: the ManifestWorks of the cluster namespace.
    Kube {
        /// The works API of the cluster namespace.
        works: Box<Api<ManifestWork>>,
        /// sha256 of the hub's URL (AppliedManifestWork names).
        hub_hash: String,
    },
    /// A source behind a broker.
    Broker(Arc<BrokerHub>),
}

fn kube_error(e: kube::Error) -> HubError {
    match &e {
        kube::Error::Api(s) if s.code == 404 => HubError::NotFound,
        kube::Error::Api(s) if s.code != 409 && s.code < 500 => HubError::Refused(e.to_string()),
        _ => HubError::Unknown(e.to_string()),
    }
}

/// A broker hub's answer: done, not held by the source, or refused.
fn found(result: Result<bool, String>) -> Result<(), HubError> {
    match result {
        Ok(true) => Ok(()),
        Ok(false) => Err(HubError::NotFound),
        Err(e) => Err(HubError::Refused(e)),
    }
}

impl Hub {
    /// Creates work `name` with `spec`.
    pub async fn create(&self, name: &str, spec: &Value) -> Result<(), HubError> {
        match self {
            Hub::Kube { works, .. } => {
                let namespace = works.namespace().unwrap_or_default().to_string();
                let body: ManifestWork = serde_json::from_value(json!({
                    "apiVersion": "work.open-cluster-management.io/v1",
                    "kind": "ManifestWork",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": spec,
                }))
                .map_err(|e| HubError::Refused(e.to_string()))?;
                // Any answer of the API server but a conflict says the work was not created.
                works
                    .create(&PostParams::default(), &body)
                    .await
                    .map(|_| ())
                    .map_err(|e| match &e {
                        kube::Error::Api(s) if s.code != 409 => HubError::Refused(e.to_string()),
                        _ => HubError::Unknown(e.to_string()),
                    })
            }
            Hub::Broker(b) => b.create(name, spec).await.map_err(HubError::Refused),
        }
    }

    /// Replaces the spec of work `name`.
    pub async fn edit(&self, name: &str, spec: &Value) -> Result<(), HubError> {
        match self {
            Hub::Kube { works, .. } => works
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": spec })),
                )
                .await
                .map(|_| ())
                .map_err(kube_error),
            Hub::Broker(b) => found(b.edit(name, spec).await),
        }
    }

    /// Deletes work `name` (the default propagation of the hub).
    pub async fn delete(&self, name: &str) -> Result<(), HubError> {
        match self {
            Hub::Kube { works, .. } => works
                .delete(name, &DeleteParams::default())
                .await
                .map(|_| ())
                .map_err(kube_error),
            Hub::Broker(b) => found(b.delete(name).await),
        }
    }

    /// Work `name` as the hub holds it now (None: gone).
    pub async fn get(&self, name: &str) -> Result<Option<ManifestWork>, String> {
        match self {
            Hub::Kube { works, .. } => works.get_opt(name).await.map_err(|e| e.to_string()),
            Hub::Broker(b) => Ok(b.get(name).await),
        }
    }

    /// Every work the hub holds.
    pub async fn list(&self) -> Result<Vec<ManifestWork>, String> {
        match self {
            Hub::Kube { works, .. } => works
                .list(&Default::default())
                .await
                .map(|l| l.items)
                .map_err(|e| e.to_string()),
            Hub::Broker(b) => Ok(b.list().await),
        }
    }

    /// The `manifestWorkName` the agent's AppliedManifestWork of work `name` carries (the
    /// resource id behind a broker: Maestro names works by it).
    pub fn applied_work_name(&self, name: &str) -> String {
        match self {
            Hub::Kube { .. } => name.to_string(),
            Hub::Broker(b) => b.id_of(name).unwrap_or_else(|| name.to_string()),
        }
    }

    /// The name of the AppliedManifestWork of work `name`: `<hub hash>-<manifestWorkName>`.
    pub fn applied_name(&self, name: &str) -> String {
        let hash = match self {
            Hub::Kube { hub_hash, .. } => hub_hash.clone(),
            Hub::Broker(b) => b.hub_hash(),
        };
        work_api::applied_manifest_work_name(&hash, &self.applied_work_name(name))
    }
}
