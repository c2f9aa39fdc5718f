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
    /// The object as JSON text, its metadata only what `metadata` leaves out (annotations and
    /// owner references): each other field is held once, in `metadata`.
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
        if let Some(meta) = meta.as_object_mut() {
            meta.retain(|key, _| matches!(key.as_str(), "annotations" | "ownerReferences"));
        }
        let json = serde_json::to_string(&object).ok()?;
        Some(Self {
            metadata,
            json: json.into(),
        })
    }

    /// The work itself; an error names what in the stored JSON is not a valid ManifestWork.
    pub fn decode(&self) -> Result<ManifestWork, serde_json::Error> {
        let mut work: ManifestWork = serde_json::from_str(&self.json)?;
        work.metadata = ObjectMeta {
            annotations: work.metadata.annotations.take(),
            owner_references: work.metadata.owner_references.take(),
            ..self.metadata.clone()
        };
        Ok(work)
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
        assert_eq!(work.metadata.name.as_deref(), Some("w"));
        assert_eq!(work.metadata.namespace.as_deref(), Some("c1"));
        assert_eq!(work.metadata.uid.as_deref(), Some("u"));
        assert_eq!(work.metadata.resource_version.as_deref(), Some("5"));
        assert_eq!(work.metadata.generation, Some(2));
        assert_eq!(work.metadata.finalizers, Some(vec!["f".to_string()]));
        assert_eq!(
            work.metadata.labels.as_ref().and_then(|l| l.get("l")),
            Some(&"v".to_string())
        );
        assert!(
            !stored.json.contains("\"uid\""),
            "the text does not hold the metadata twice: {}",
            stored.json
        );
        assert_eq!(
            work.metadata.annotations.as_ref().and_then(|a| a.get("a")),
            Some(&"b".to_string())
        );
        assert!(work.metadata.managed_fields.is_none());
    }

    #[test]
    fn decodes_to_the_work_it_was_given() {
        let mut original = json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": "w", "namespace": "c1", "uid": "u", "resourceVersion": "5",
                "generation": 3, "creationTimestamp": "2026-11-27T05:00:00Z",
                "deletionTimestamp": "2026-11-27T06:00:00Z", "deletionGracePeriodSeconds": 0,
                "finalizers": ["f", "g"], "labels": {"l": "v"}, "annotations": {"a": "b"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "ou"}],
                "managedFields": [{"manager": "m", "operation": "Update"}]},
            "spec": {"workload": {"manifests": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}}]}},
            "status": {"conditions": [{"type": "Applied", "status": "True", "reason": "r",
                "message": "m", "lastTransitionTime": "2026-11-27T05:00:01Z", "observedGeneration": 3}]}
        });
        let stored: StoredWork = serde_json::from_value(original.clone()).expect("a work");
        let decoded = serde_json::to_value(stored.decode().expect("decodes")).expect("encodes");
        if let Some(meta) = original["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
        let expected: ManifestWork = serde_json::from_value(original).expect("a work");
        assert_eq!(decoded, serde_json::to_value(expected).expect("encodes"));
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
