//! The order manifests are applied in, so that what others depend on exists first.

use std::borrow::Borrow;

use serde_json::Value;

/// Kinds everything else may live in or be defined by.
const FIRST: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
];

/// Kinds that intercept or serve API requests: applied last so they cannot block the rest.
const LAST: &[(&str, &str)] = &[
    ("apiregistration.k8s.io", "APIService"),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
];

/// Built-in kinds in dependency order (policies and identities before workloads that use them).
const KNOWN: &[&str] = &[
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
];

/// The indices of `manifests` in apply order: Namespaces, then CRDs, then built-in kinds in
/// dependency order, then other kinds (custom resources) by kind name, then APIServices and
/// admission webhooks. Manifests of the same kind keep their relative order. Takes the manifests
/// or references to them, so a caller need not copy a work's manifests to order them.
pub fn apply_order<M: Borrow<Value>>(manifests: &[M]) -> Vec<usize> {
    let mut keyed: Vec<((usize, usize, &str), usize)> = manifests
        .iter()
        .enumerate()
        .map(|(i, m)| (rank(m.borrow()), i))
        .collect();
    // sort_by_key is stable, so equal kinds stay in manifest order.
    keyed.sort_by_key(|(key, _)| *key);
    keyed.into_iter().map(|(_, i)| i).collect()
}

/// (tier, position within the tier, kind) for one manifest.
fn rank(manifest: &Value) -> (usize, usize, &str) {
    let kind = manifest.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = manifest
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if let Some(pos) = FIRST.iter().position(|&(g, k)| g == group && k == kind) {
        return (0, pos, "");
    }
    if let Some(pos) = LAST.iter().position(|&(g, k)| g == group && k == kind) {
        return (3, pos, "");
    }
    if let Some(pos) = KNOWN.iter().position(|&k| k == kind) {
        return (1, pos, "");
    }
    (2, 0, kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn m(api_version: &str, kind: &str) -> Value {
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}})
    }

    fn kinds(manifests: &[Value]) -> Vec<String> {
        apply_order(manifests)
            .into_iter()
            .map(|i| manifests[i]["kind"].as_str().unwrap_or("").to_string())
            .collect()
    }

    #[test]
    fn namespaces_and_crds_first_webhooks_and_apiservices_last() {
        let manifests = vec![
            m(
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
            ),
            m("apps/v1", "Deployment"),
            m("apiregistration.k8s.io/v1", "APIService"),
            m("example.com/v1", "Widget"),
            m("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            m("v1", "ConfigMap"),
            m(
                "admissionregistration.k8s.io/v1",
                "MutatingWebhookConfiguration",
            ),
            m("v1", "Namespace"),
        ];
        assert_eq!(
            kinds(&manifests),
            [
                "Namespace",
                "CustomResourceDefinition",
                "ConfigMap",
                "Deployment",
                "Widget",
                "APIService",
                "MutatingWebhookConfiguration",
                "ValidatingWebhookConfiguration",
            ]
        );
    }

    #[test]
    fn same_kind_keeps_manifest_order() {
        let mut manifests = vec![
            m("v1", "ConfigMap"),
            m("v1", "Namespace"),
            m("v1", "ConfigMap"),
        ];
        manifests[0]["metadata"]["name"] = json!("first");
        manifests[2]["metadata"]["name"] = json!("second");
        assert_eq!(apply_order(&manifests), vec![1, 0, 2]);
    }

    #[test]
    fn custom_kinds_sorted_by_name_after_builtins() {
        let manifests = vec![
            m("b.example.com/v1", "Zebra"),
            m("a.example.com/v1", "Apple"),
            m("batch/v1", "Job"),
            m("v1", "ServiceAccount"),
        ];
        assert_eq!(
            kinds(&manifests),
            ["ServiceAccount", "Job", "Apple", "Zebra"]
        );
    }

    #[test]
    fn a_namespace_kind_in_another_group_is_not_a_namespace() {
        let manifests = vec![m("v1", "ConfigMap"), m("example.com/v1", "Namespace")];
        assert_eq!(apply_order(&manifests), vec![0, 1]);
    }

    #[test]
    fn malformed_manifests_do_not_panic_and_every_index_appears_once() {
        let manifests = vec![
            json!(null),
            json!({"kind": 3}),
            m("v1", "Namespace"),
            json!("x"),
        ];
        let mut order = apply_order(&manifests);
        assert_eq!(order[0], 2);
        order.sort_unstable();
        assert_eq!(order, vec![0, 1, 2, 3]);
    }

    #[test]
    fn empty_input_gives_empty_order() {
        assert!(apply_order::<Value>(&[]).is_empty());
    }
}
