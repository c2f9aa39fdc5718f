//! A ManifestWork as the controller's watch store keeps it: the metadata the queue and the
//! eviction scan look at, and the whole object as compact JSON text, decoded when a reconcile
//! starts. A decoded work (manifests as `serde_json::Value` maps) weighs several times its text,
//! and the store holds every work of the cluster for the agent's lifetime.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use work_api::ManifestWork;

/// A stored ManifestWork: its metadata (without managedFields) and its JSON.
#[derive(Clone, Debug)]
pub struct StoredWork {
    /// Name, namespace, uid, resourceVersion, generation, labels, finalizers, deletion.
    pub metadata: ObjectMeta,
    /// The object (without managedFields) as JSON text.
    json: Arc<str>,
}

impl StoredWork {
    /// Keeps `object` as text; `None` when it is not a JSON object or its metadata is invalid.
    pub fn from_value(mut object: Value) -> Option<Self> {
        let meta = object.as_object_mut()?.get_mut("metadata")?;
        if let Some(meta) = meta.as_object_mut() {
            meta.remove("managedFields");
        }
        let mut metadata: ObjectMeta = serde_json::from_value(meta.clone()).ok()?;
        // The queue and the eviction scan need none of these; the decoded work has them all.
        metadata.annotations = None;
        metadata.owner_references = None;
        let json = serde_json::to_string(&object).ok()?;
        Some(Self {
            metadata,
            json: json.into(),
        })
    }

    /// The work itself; an error names what in the stored JSON is not a valid ManifestWork.
    pub fn decode(&self) -> Result<ManifestWork, serde_json::Error> {
        serde_json::from_str(&self.json)
    }
}

impl<'de> Deserialize<'de> for StoredWork {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::from_value(value)
            .ok_or_else(|| serde::de::Error::custom("not a ManifestWork: no valid metadata"))
    }
}

impl Resource for StoredWork {
    type DynamicType = ();
    type Scope = <ManifestWork as Resource>::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        ManifestWork::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        ManifestWork::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        ManifestWork::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        ManifestWork::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_the_queue_metadata_and_decodes_the_whole_work() {
        let stored: StoredWork = serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": "w", "namespace": "c1", "uid": "u", "resourceVersion": "5",
                "generation": 2, "finalizers": ["f"], "labels": {"l": "v"},
                "annotations": {"a": "b"},
                "managedFields": [{"manager": "m", "operation": "Update"}]},
            "spec": {"workload": {"manifests": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}}]}}
        }))
        .expect("a work");
        assert_eq!(stored.metadata.name.as_deref(), Some("w"));
        assert_eq!(stored.metadata.generation, Some(2));
        assert_eq!(stored.metadata.finalizers, Some(vec!["f".to_string()]));
        assert!(stored.metadata.annotations.is_none());
        let work = stored.decode().expect("decodes");
        assert_eq!(work.spec.workload.manifests.len(), 1);
        assert_eq!(
            work.metadata.annotations.as_ref().and_then(|a| a.get("a")),
            Some(&"b".to_string())
        );
        assert!(work.metadata.managed_fields.is_none());
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(serde_json::from_value::<StoredWork>(json!([1])).is_err());
        assert!(serde_json::from_value::<StoredWork>(json!({"metadata": {"name": 3}})).is_err());
        let stored: StoredWork = serde_json::from_value(json!({
            "metadata": {"name": "w"}, "spec": {"workload": {"manifests": "not a list"}}
        }))
        .expect("metadata is valid");
        assert!(stored.decode().is_err());
    }
}
