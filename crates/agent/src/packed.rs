//! JSON text kept packed: the stores hold every work, AppliedManifestWork and applied object of
//! the cluster for the agent's lifetime, and most of their text is what every such object
//! repeats (field names, the conditions the agent writes, the API group). Packed as an LZ4 block
//! against a dictionary of that vocabulary, a single-ConfigMap work's 1.6 KB of text keeps about
//! a fifth. Unpacking costs a few microseconds, next to parsing the text it gives back.
//!
//! The dictionary is built in the process and never leaves it: nothing packed is written
//! anywhere, so it may change from one build to the next.

use std::sync::{Arc, LazyLock};

use serde_json::{Value, json};

/// The vocabulary packing refers to.
static DICTIONARY: LazyLock<Vec<u8>> = LazyLock::new(dictionary);

/// JSON text, packed.
#[derive(Clone, PartialEq, Eq)]
pub struct PackedJson(Arc<[u8]>);

impl PackedJson {
    /// Packs `text`.
    pub fn pack(text: &str) -> Self {
        Self(lz4_flex::block::compress_prepend_size_with_dict(text.as_bytes(), &DICTIONARY).into())
    }

    /// The text back; an error only if the bytes were not made by [`PackedJson::pack`].
    pub fn unpack(&self) -> Result<Vec<u8>, lz4_flex::block::DecompressError> {
        lz4_flex::block::decompress_size_prepended_with_dict(&self.0, &DICTIONARY)
    }

    /// The text back, as a string; `None` as [`PackedJson::unpack`]'s error, or if it is not UTF-8.
    pub fn text(&self) -> Option<String> {
        String::from_utf8(self.unpack().ok()?).ok()
    }

    /// Bytes kept.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether nothing is kept (never: the packed form holds at least the text's length).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for PackedJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.text() {
            Some(text) => f.write_str(&text),
            None => write!(f, "<{} bytes that do not unpack>", self.0.len()),
        }
    }
}

/// A condition as the agent writes it, keys in the order the stores' text has them (sorted).
fn condition(kind: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"lastTransitionTime": "2026-01-01T00:00:00Z", "message": message,
        "observedGeneration": 1, "reason": reason, "status": status, "type": kind})
}

/// What the stored objects repeat, as the stores' text spells it: general Kubernetes object
/// text first, then the AppliedManifestWork's, then the ManifestWork's (LZ4 finds any of it; the
/// order only keeps related text together). Made of the APIs' field names and the texts the agent
/// writes itself, nothing of any one user's objects.
fn dictionary() -> Vec<u8> {
    let metadata = json!({"annotations": {}, "creationTimestamp": "2026-01-01T00:00:00Z",
        "finalizers": [], "generation": 1, "labels": {"app.kubernetes.io/name": "",
        "app.kubernetes.io/instance": "", "app.kubernetes.io/managed-by": "", "app": ""},
        "name": "", "namespace": "default", "ownerReferences": [{
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "AppliedManifestWork",
            "name": "", "uid": ""}], "resourceVersion": "", "uid": ""});
    let objects = [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {}}),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": {}}),
        json!({"apiVersion": "v1", "kind": "Namespace"}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount"}),
        json!({"apiVersion": "v1", "kind": "Service",
            "spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}],
            "selector": {}, "type": "ClusterIP"}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 1,
            "selector": {"matchLabels": {}}, "template": {"metadata": {"labels": {}},
            "spec": {"containers": [{"name": "", "image": "", "imagePullPolicy": "IfNotPresent",
            "args": [], "command": [], "env": [{"name": "", "value": ""}],
            "ports": [{"containerPort": 8080, "protocol": "TCP"}], "resources": {
            "limits": {"cpu": "", "memory": ""}, "requests": {"cpu": "", "memory": ""}}}],
            "restartPolicy": "Never", "serviceAccountName": ""}}},
            "status": {"availableReplicas": 1, "readyReplicas": 1, "replicas": 1,
            "updatedReplicas": 1, "observedGeneration": 1}}),
        json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"succeeded": 1,
            "conditions": [{"type": "Complete", "status": "True"}]}}),
        json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "AppliedManifestWork",
            "metadata": {"finalizers": [
                "cluster.open-cluster-management.io/applied-manifest-work-cleanup"]},
            "spec": {"agentID": "", "hubHash": "", "manifestWorkName": ""},
            "status": {"appliedResources": [{"group": "", "name": "", "namespace": "",
                "resource": "configmaps", "uid": "", "version": "v1"}]}}),
    ];
    let config = json!({"conditionRules": [{"celExpressions": [], "condition": "Complete",
        "messageExpression": "", "type": "WellKnownConditions"}],
        "feedbackRules": [{"jsonPaths": [{"name": "", "path": ".status"}], "type": "JSONPaths"},
            {"type": "WellKnownStatus"}],
        "resourceIdentifier": {"group": "apps", "name": "", "namespace": "",
            "resource": "deployments"},
        "updateStrategy": {"serverSideApply": {"fieldManager": "work-agent", "force": false},
            "type": "ServerSideApply"}});
    let manifest_conditions = [
        condition(
            "Applied",
            "True",
            "AppliedManifestComplete",
            "Apply manifest complete",
        ),
        condition(
            "Applied",
            "False",
            "AppliedManifestFailed",
            "Failed to apply manifest",
        ),
        condition(
            "Available",
            "False",
            "ResourceNotAvailable",
            "Resource is not available",
        ),
        condition(
            "Available",
            "Unknown",
            "IncompleteResourceMeta",
            "Resource meta is incomplete",
        ),
        condition("Complete", "True", "ConditionRuleEvaluated", ""),
        condition("Complete", "Unknown", "ConditionRuleNotEvaluated", ""),
        condition(
            "StatusFeedbackSynced",
            "False",
            "StatusFeedbackSyncFailed",
            "",
        ),
        condition("StatusFeedbackSynced", "True", "NoStatusFeedbackSynced", ""),
        condition(
            "Available",
            "True",
            "ResourceAvailable",
            "Resource is available",
        ),
        condition("StatusFeedbackSynced", "True", "StatusFeedbackSynced", ""),
    ];
    let work = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"finalizers": ["cluster.open-cluster-management.io/manifest-work-cleanup"]},
        "spec": {"deleteOption": {"propagationPolicy": "Foreground",
            "ttlSecondsAfterFinished": 0}, "manifestConfigs": [config],
            "workload": {"manifests": []}},
        "status": {"conditions": [
            condition("Applied", "False", "AppliedManifestWorkFailed", "Failed to apply manifest work"),
            condition("Available", "False", "ResourcesNotAvailable", ""),
            condition("Available", "Unknown", "ResourcesStatusUnknown", ""),
            condition("Complete", "True", "", ""),
            condition("Applied", "True", "AppliedManifestWorkComplete", "Apply manifest work complete"),
            condition("Available", "True", "ResourcesAvailable", "All resources are available")],
        "resourceStatus": {"manifests": [{"conditions": manifest_conditions,
            "resourceMeta": {"group": "", "kind": "ConfigMap", "name": "", "namespace": "",
                "ordinal": 0, "resource": "configmaps", "version": "v1"},
            "statusFeedback": {"values": [{"fieldValue": {"integer": 1, "type": "Integer"},
                "name": "ReadyReplicas"}, {"fieldValue": {"string": "", "type": "String"},
                "name": ""}]}}]}}});
    let mut text = String::new();
    for part in objects.iter().chain([&work]) {
        text.push_str(&part.to_string());
    }
    text.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_vocabulary_packs_small_and_the_text_comes_back_whole() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm-1", "namespace": "ns-1"}, "data": {"key": "value"}});
        let work = json!({"apiVersion": "work.open-cluster-management.io/v1",
            "kind": "ManifestWork", "metadata": {"name": "w-1"},
            "spec": {"workload": {"manifests": [cm]}},
            "status": {"conditions": [condition("Applied", "True",
                "AppliedManifestWorkComplete", "Apply manifest work complete")]}})
        .to_string();
        let packed = PackedJson::pack(&work);
        assert_eq!(packed.text().as_deref(), Some(work.as_str()));
        assert!(
            packed.len() * 3 < work.len(),
            "{} of {} bytes kept",
            packed.len(),
            work.len()
        );
    }

    #[test]
    fn bytes_not_packed_here_are_an_error_not_a_panic() {
        for bytes in [
            &b""[..],
            b"\x05\0\0\0",
            b"\xff\xff\xff\x7f\x10abc",
            b"\x03\0\0\0\xf0",
        ] {
            assert!(PackedJson(bytes.into()).unpack().is_err(), "{bytes:?}");
        }
    }

    proptest! {
        #[test]
        fn any_text_comes_back_whole(text in any::<String>()) {
            prop_assert_eq!(PackedJson::pack(&text).text(), Some(text));
        }
    }
}
