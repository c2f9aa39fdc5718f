//! Adding and removing finalizers, conditional on the object's resourceVersion.

use kube::api::Patch;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::params;

/// Adds a finalizer if missing (optimistic locking on resourceVersion); returns the patched
/// object when it wrote.
pub async fn ensure_finalizer<K>(
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
pub async fn set_finalizers<K>(
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
    api.patch(&obj.name_any(), &params::patch(), &Patch::Merge(&patch))
        .await
}
