//! An API object as a watch store keeps it: the metadata the queue and the scans look at, and
//! the whole object as compact JSON text, packed ([`crate::packed`]), decoded when a reconcile
//! reads it. A decoded object (a work's manifests as `serde_json::Value` maps, every field its
//! own allocation) weighs several times its text, and the stores hold every work and every
//! AppliedManifestWork of the cluster for the agent's lifetime.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::packed::PackedJson;

/// A stored `K`: its metadata (without managedFields) and its JSON. A clone shares both: behind
/// a broker the works' own map and the controller's watch store hold the same work, and a
/// watch store keeps its own clone of each object it is given.
#[derive(Debug)]
pub struct Stored<K> {
    /// Name, namespace, uid, resourceVersion, generation, finalizers, deletion.
    pub metadata: Arc<ObjectMeta>,
    /// A digest of the labels and of the annotations that change what the agent does with the
    /// object (gates, drift modes, holds), which stay in the text: a map of even one label costs
    /// a 544-byte B-tree node, and the queue only asks whether they changed.
    labels: u64,
    /// The object as JSON text, packed, its metadata only what `metadata` leaves out
    /// (labels, annotations and owner references): each other field is held once, in `metadata`.
    json: PackedJson,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Stored<K> {
    fn clone(&self) -> Self {
        Self {
            metadata: self.metadata.clone(),
            labels: self.labels,
            json: self.json.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: DeserializeOwned + Resource> Stored<K> {
    /// Keeps `object` as text; `None` when it is not a JSON object or its metadata is invalid.
    pub fn from_value(mut object: Value) -> Option<Self> {
        let meta = object.as_object_mut()?.get_mut("metadata")?;
        if let Some(meta) = meta.as_object_mut() {
            meta.remove("managedFields");
        }
        let mut metadata: ObjectMeta = serde_json::from_value(meta.clone()).ok()?;
        // The queue and the scans need none of these; the decoded object has them all.
        let labels = labels_digest(
            metadata.labels.take().as_ref(),
            metadata.annotations.as_ref(),
        );
        metadata.annotations = None;
        metadata.owner_references = None;
        if let Some(meta) = meta.as_object_mut() {
            meta.retain(|key, _| {
                matches!(key.as_str(), "labels" | "annotations" | "ownerReferences")
            });
        }
        let json = serde_json::to_string(&object).ok()?;
        Some(Self {
            metadata: Arc::new(metadata),
            labels,
            json: PackedJson::pack(&json),
            kind: PhantomData,
        })
    }

    /// Bytes of the packed text: what the object weighs in memory, and about how its size on a
    /// wire compares with another's.
    pub fn packed_len(&self) -> usize {
        self.json.len()
    }

    /// Whether `other`'s labels, or its annotations that change what the agent does, differ from
    /// these (by digest: two that differ collide with a chance of one in 2^64).
    pub fn labels_differ(&self, other: &Self) -> bool {
        self.labels != other.labels
    }

    /// The object itself; an error names what in the stored JSON is not a valid `K`.
    pub fn decode(&self) -> Result<K, serde_json::Error> {
        let text = self.json.unpack().map_err(serde::de::Error::custom)?;
        let mut object: K = serde_json::from_slice(&text)?;
        let meta = object.meta_mut();
        *meta = ObjectMeta {
            labels: meta.labels.take(),
            annotations: meta.annotations.take(),
            owner_references: meta.owner_references.take(),
            ..self.metadata.as_ref().clone()
        };
        Ok(object)
    }
}

/// Annotations whose change changes what the agent does with a work: a work re-queues itself
/// when one changes, as when its labels do.
const ACTING_ANNOTATIONS: &[&str] = &[
    applier::gates::ANNOTATION,
    applier::drift::ANNOTATION,
    applier::holds::ANNOTATION,
];

/// A digest of a label map and of the [`ACTING_ANNOTATIONS`] (0 for none of either).
fn labels_digest(
    labels: Option<&BTreeMap<String, String>>,
    annotations: Option<&BTreeMap<String, String>>,
) -> u64 {
    let acting: Vec<(&str, &str)> = ACTING_ANNOTATIONS
        .iter()
        .filter_map(|k| Some((*k, annotations?.get(*k)?.as_str())))
        .collect();
    let labels = labels.filter(|l| !l.is_empty());
    if labels.is_none() && acting.is_empty() {
        return 0;
    }
    let mut hasher = std::hash::DefaultHasher::new();
    labels.hash(&mut hasher);
    acting.hash(&mut hasher);
    hasher.finish().max(1)
}

impl<'de, K: DeserializeOwned + Resource> Deserialize<'de> for Stored<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::from_value(value)
            .ok_or_else(|| serde::de::Error::custom("not an API object: no valid metadata"))
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Stored<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        Arc::make_mut(&mut self.metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use work_api::{AppliedManifestWork, ManifestWork};

    type StoredWork = Stored<ManifestWork>;

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
        let text = stored.json.text().expect("unpacks");
        assert!(
            !text.contains("\"uid\""),
            "the text does not hold the metadata twice: {text}"
        );
        assert_eq!(
            work.metadata.annotations.as_ref().and_then(|a| a.get("a")),
            Some(&"b".to_string())
        );
        assert!(work.metadata.managed_fields.is_none());
    }

    #[test]
    fn labels_stay_in_the_text_and_their_change_is_seen() {
        let with = |labels: Value| -> StoredWork {
            serde_json::from_value(json!({
                "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                "metadata": {"name": "w", "namespace": "c1", "labels": labels},
                "spec": {}
            }))
            .expect("a work")
        };
        let a = with(json!({"l": "1"}));
        assert!(
            a.metadata.labels.is_none(),
            "no label map per stored object"
        );
        assert_eq!(
            a.decode().expect("decodes").metadata.labels,
            Some([("l".to_string(), "1".to_string())].into())
        );
        assert!(!a.labels_differ(&with(json!({"l": "1"}))));
        assert!(a.labels_differ(&with(json!({"l": "2"}))));
        assert!(a.labels_differ(&with(json!({}))));
        assert!(!with(json!({})).labels_differ(&with(Value::Null)));
        let shared = a.clone();
        assert!(
            Arc::ptr_eq(&a.metadata, &shared.metadata),
            "a clone shares the metadata"
        );
    }

    #[test]
    fn a_change_of_an_annotation_that_changes_what_the_agent_does_is_seen() {
        let with = |annotations: Value| -> StoredWork {
            serde_json::from_value(json!({
                "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                "metadata": {"name": "w", "namespace": "c1", "annotations": annotations},
                "spec": {}
            }))
            .expect("a work")
        };
        let plain = with(json!({"note": "a"}));
        assert!(
            !plain.labels_differ(&with(json!({"note": "b"}))),
            "other annotations"
        );
        assert!(!plain.labels_differ(&with(Value::Null)));
        let report = with(json!({applier::drift::ANNOTATION: "ReportOnly"}));
        assert!(plain.labels_differ(&report));
        assert!(report.labels_differ(&with(json!({applier::drift::ANNOTATION: "Correct"}))));
        assert!(plain.labels_differ(&with(json!({applier::holds::ANNOTATION: "[]"}))));
        assert!(plain.labels_differ(&with(json!({applier::gates::ANNOTATION: "[]"}))));
    }

    /// `original` stored and decoded is `original` as a `K`, without its managedFields.
    fn assert_round_trip<K>(mut original: Value)
    where
        K: DeserializeOwned + Resource + serde::Serialize,
    {
        let stored: Stored<K> = serde_json::from_value(original.clone()).expect("an object");
        let decoded = serde_json::to_value(stored.decode().expect("decodes")).expect("encodes");
        if let Some(meta) = original["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
        let expected: K = serde_json::from_value(original).expect("valid");
        assert_eq!(decoded, serde_json::to_value(expected).expect("encodes"));
    }

    #[test]
    fn decodes_to_the_object_it_was_given() {
        assert_round_trip::<ManifestWork>(json!({
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
        }));
        assert_round_trip::<AppliedManifestWork>(json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "AppliedManifestWork",
            "metadata": {"name": "h-w", "uid": "u", "resourceVersion": "5",
                "creationTimestamp": "2026-11-27T05:00:00Z", "finalizers": ["f"],
                "labels": {"l": "v"}, "annotations": {"a": "b"},
                "managedFields": [{"manager": "m", "operation": "Update"}]},
            "spec": {"hubHash": "h", "agentID": "a", "manifestWorkName": "w"},
            "status": {"appliedResources": [{"group": "", "version": "v1",
                "resource": "configmaps", "namespace": "n", "name": "c", "uid": "cu"}]}
        }));
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
