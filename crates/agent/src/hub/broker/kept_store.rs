//! Where the kept deletions live ([`super::kept`]): a ConfigMap in the agent's namespace on the
//! spoke, `work-agent-<cluster>-deleted`, beside the leader-election Lease.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch};

use super::kept::DataPatch;
use crate::params;

/// The store of the kept deletions.
pub trait DeletionStore: Send + Sync {
    /// What the store holds (empty when it holds nothing yet).
    fn read(&self) -> BoxFuture<'_, Result<BTreeMap<String, String>, String>>;

    /// Writes `patch` (the store is created when it does not exist).
    fn write<'a>(&'a self, patch: &'a DataPatch) -> BoxFuture<'a, Result<(), String>>;
}

/// The kept deletions in one ConfigMap: read once at start, written by merge patch.
pub struct ConfigMapStore {
    api: Api<ConfigMap>,
    name: String,
}

impl ConfigMapStore {
    /// The store of `cluster`'s agent in `namespace`.
    pub fn new(spoke: kube::Client, namespace: &str, cluster: &str) -> Self {
        Self {
            api: Api::namespaced(spoke, namespace),
            name: format!("work-agent-{cluster}-deleted"),
        }
    }

    /// Creates the ConfigMap with the values of `patch`; false when it exists already.
    async fn create(&self, patch: &DataPatch) -> Result<bool, kube::Error> {
        let data: BTreeMap<String, String> = patch
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
            .collect();
        let config_map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_string(),
                    "work-agent".to_string(),
                )])),
                ..ObjectMeta::default()
            },
            data: Some(data),
            ..ConfigMap::default()
        };
        match self.api.create(&params::post(), &config_map).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Whether `e` says the object does not exist.
fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 404)
}

impl DeletionStore for ConfigMapStore {
    fn read(&self) -> BoxFuture<'_, Result<BTreeMap<String, String>, String>> {
        Box::pin(async move {
            match self.api.get_opt(&self.name).await {
                Ok(found) => Ok(found.and_then(|cm| cm.data).unwrap_or_default()),
                Err(e) => Err(format!("ConfigMap {}: {e}", self.name)),
            }
        })
    }

    fn write<'a>(&'a self, patch: &'a DataPatch) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let body = serde_json::json!({ "data": patch });
            let patched = self
                .api
                .patch(&self.name, &params::patch(), &Patch::Merge(&body))
                .await;
            let result = match patched {
                Ok(_) => Ok(()),
                // The first deletion: the ConfigMap is created with it; if another writer
                // created it meanwhile, the patch applies.
                Err(e) if is_not_found(&e) => match self.create(patch).await {
                    Ok(true) => Ok(()),
                    Ok(false) => self
                        .api
                        .patch(&self.name, &params::patch(), &Patch::Merge(&body))
                        .await
                        .map(drop),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            result.map_err(|e| format!("ConfigMap {}: {e}", self.name))
        })
    }
}
