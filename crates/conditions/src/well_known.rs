//! Built-in rules: `Complete` for Job and Pod (upstream OCM), `Healthy` for the workload kinds
//! of seeds/001 (kapp-controller's health rules).

use serde_json::Value;
use work_api::condition_types::{COMPLETE, HEALTHY};

/// What a well-known rule decided, with its own message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WellKnown {
    /// Whether the condition holds.
    pub(crate) passed: bool,
    /// Why, in words.
    pub(crate) message: String,
}

impl WellKnown {
    fn new(passed: bool, message: impl Into<String>) -> Self {
        Self {
            passed,
            message: message.into(),
        }
    }
}

/// The well-known `condition` for `object`; None for a condition or kind without a rule.
pub(crate) fn evaluate(condition: &str, object: &Value) -> Option<WellKnown> {
    let group = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .map(|v| v.rsplit_once('/').map_or("", |(group, _)| group))?;
    let kind = object.get("kind").and_then(Value::as_str)?;
    match (condition, group, kind) {
        (COMPLETE, "batch", "Job") => Some(job_complete(object)),
        (COMPLETE, "", "Pod") => Some(pod_complete(object)),
        (HEALTHY, "", "Pod") => Some(pod_healthy(object)),
        (HEALTHY, "apps", "Deployment") => Some(deployment_healthy(object)),
        (HEALTHY, "apps", "StatefulSet") => Some(replicas_healthy(object, "StatefulSet")),
        (HEALTHY, "apps", "ReplicaSet") => Some(replica_set_healthy(object, "ReplicaSet")),
        (HEALTHY, "", "ReplicationController") => {
            Some(replica_set_healthy(object, "ReplicationController"))
        }
        (HEALTHY, "apps", "DaemonSet") => Some(daemon_set_healthy(object)),
        (HEALTHY, "apiregistration.k8s.io", "APIService") => Some(api_service_healthy(object)),
        (HEALTHY, "apiextensions.k8s.io", "CustomResourceDefinition") => Some(crd_healthy(object)),
        _ => None,
    }
}

/// The status of the condition of `type_` in `status.conditions`, if there is one.
fn condition_status<'a>(object: &'a Value, type_: &str) -> Option<&'a str> {
    object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))?
        .get("status")?
        .as_str()
}

fn int_at(object: &Value, pointer: &str) -> Option<i64> {
    object.pointer(pointer).and_then(Value::as_i64)
}

fn phase(object: &Value) -> Option<&str> {
    object.pointer("/status/phase").and_then(Value::as_str)
}

/// A Job is complete when its `Complete` or `Failed` condition is True.
fn job_complete(object: &Value) -> WellKnown {
    let finished = ["Complete", "Failed"]
        .iter()
        .any(|t| condition_status(object, t) == Some("True"));
    if finished {
        WellKnown::new(true, "Job is finished")
    } else {
        WellKnown::new(false, "Job is not finished")
    }
}

fn phase_message(object: &Value) -> String {
    match phase(object) {
        Some(p) => format!("Pod is in phase {p}"),
        None => "Pod has no phase yet".to_string(),
    }
}

/// A Pod is complete in phase Succeeded or Failed.
fn pod_complete(object: &Value) -> WellKnown {
    let passed = matches!(phase(object), Some("Succeeded" | "Failed"));
    WellKnown::new(passed, phase_message(object))
}

/// A Pod is healthy when Succeeded, or Running with its `Ready` condition True.
fn pod_healthy(object: &Value) -> WellKnown {
    match phase(object) {
        Some("Succeeded") => WellKnown::new(true, "Pod is in phase Succeeded"),
        Some("Running") if condition_status(object, "Ready") == Some("True") => {
            WellKnown::new(true, "Pod is Running and Ready")
        }
        Some("Running") => WellKnown::new(false, "Pod is Running but not Ready"),
        _ => WellKnown::new(false, phase_message(object)),
    }
}

/// `spec.replicas` (default 1) against `status.availableReplicas` (default 0).
fn replicas(object: &Value) -> (i64, i64) {
    (
        int_at(object, "/spec/replicas").unwrap_or(1),
        int_at(object, "/status/availableReplicas").unwrap_or(0),
    )
}

fn replicas_check(object: &Value, kind: &str) -> Result<(), String> {
    let (desired, available) = replicas(object);
    if desired == available {
        Ok(())
    } else {
        Err(format!(
            "{kind} has {available} of {desired} replicas available"
        ))
    }
}

fn verdict(kind: &str, result: Result<(), String>) -> WellKnown {
    match result {
        Ok(()) => WellKnown::new(true, format!("{kind} is healthy")),
        Err(why) => WellKnown::new(false, why),
    }
}

/// Healthy when all replicas are available and `Available` is True.
fn deployment_healthy(object: &Value) -> WellKnown {
    let result = replicas_check(object, "Deployment").and_then(|()| {
        if condition_status(object, "Available") == Some("True") {
            Ok(())
        } else {
            Err("Deployment is not Available".to_string())
        }
    });
    verdict("Deployment", result)
}

/// Healthy when all replicas are available.
fn replicas_healthy(object: &Value, kind: &str) -> WellKnown {
    verdict(kind, replicas_check(object, kind))
}

/// Healthy when all replicas are available and no `ReplicaFailure` condition is True.
fn replica_set_healthy(object: &Value, kind: &str) -> WellKnown {
    let result = replicas_check(object, kind).and_then(|()| {
        if condition_status(object, "ReplicaFailure") == Some("True") {
            Err(format!("{kind} has a ReplicaFailure"))
        } else {
            Ok(())
        }
    });
    verdict(kind, result)
}

/// Healthy when every scheduled daemon pod is available.
fn daemon_set_healthy(object: &Value) -> WellKnown {
    let desired = int_at(object, "/status/desiredNumberScheduled").unwrap_or(0);
    let available = int_at(object, "/status/numberAvailable").unwrap_or(0);
    let result = if desired == available {
        Ok(())
    } else {
        Err(format!(
            "DaemonSet has {available} of {desired} scheduled pods available"
        ))
    };
    verdict("DaemonSet", result)
}

/// Healthy when `Available` is True.
fn api_service_healthy(object: &Value) -> WellKnown {
    let result = if condition_status(object, "Available") == Some("True") {
        Ok(())
    } else {
        Err("APIService is not Available".to_string())
    };
    verdict("APIService", result)
}

/// Healthy when the storage version of `spec.versions` is in `status.storedVersions`.
fn crd_healthy(object: &Value) -> WellKnown {
    let storage = object
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|versions| {
            versions
                .iter()
                .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        })
        .and_then(|v| v.get("name"))
        .and_then(Value::as_str);
    let stored: Vec<&str> = object
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .map(|vs| vs.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let result = match storage {
        None => Err("CustomResourceDefinition has no storage version".to_string()),
        Some(v) if stored.contains(&v) => Ok(()),
        Some(v) => Err(format!(
            "CustomResourceDefinition storage version {v} is not in status.storedVersions"
        )),
    };
    verdict("CustomResourceDefinition", result)
}
