//! Well-known rules: `Complete` for Job and Pod, `Healthy` for the workload kinds.

use conditions::{ConditionUpdate, Evaluator, Status};
use serde_json::{Value, json};
use work_api::{ConditionRule, ConditionRuleType};

fn well_known(condition: &str) -> ConditionRule {
    ConditionRule {
        condition: condition.into(),
        type_: ConditionRuleType::from("WellKnownCompletions"),
        ..Default::default()
    }
}

fn eval(condition: &str, object: &Value) -> Option<ConditionUpdate> {
    let mut out = Evaluator::shared().evaluate_manifest(&[well_known(condition)], object);
    assert!(out.len() <= 1);
    out.pop()
}

fn expect(condition: &str, object: &Value, status: Status, message: &str) {
    let c = eval(condition, object).unwrap_or_else(|| panic!("no condition for {object}"));
    let expected_type = if condition.is_empty() {
        "Complete"
    } else {
        condition
    };
    assert_eq!(
        c.parts(),
        (expected_type, status, "ConditionRuleEvaluated", message),
        "{object}"
    );
}

fn job(conditions: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "generation": 1},
           "status": {"conditions": conditions}})
}

fn pod(phase: Option<&str>, ready: Option<&str>) -> Value {
    let mut status = json!({});
    if let Some(p) = phase {
        status["phase"] = json!(p);
    }
    if let Some(r) = ready {
        status["conditions"] = json!([{"type": "Ready", "status": r}]);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": status})
}

#[test]
fn job_complete_in_each_state() {
    // Unnamed well-known rule means Complete.
    expect(
        "",
        &job(json!([{"type": "Complete", "status": "True"}])),
        Status::True,
        "Job is finished",
    );
    expect(
        "Complete",
        &job(json!([{"type": "Failed", "status": "True"}])),
        Status::True,
        "Job is finished",
    );
    expect(
        "Complete",
        &job(json!([{"type": "Complete", "status": "False"}])),
        Status::False,
        "Job is not finished",
    );
    expect(
        "Complete",
        &job(json!([{"type": "Suspended", "status": "True"}])),
        Status::False,
        "Job is not finished",
    );
    expect(
        "Complete",
        &job(json!([])),
        Status::False,
        "Job is not finished",
    );
    let no_status = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}});
    expect("Complete", &no_status, Status::False, "Job is not finished");
}

#[test]
fn pod_complete_in_each_phase() {
    for (phase, status) in [
        ("Pending", Status::False),
        ("Running", Status::False),
        ("Succeeded", Status::True),
        ("Failed", Status::True),
        ("Unknown", Status::False),
    ] {
        expect(
            "Complete",
            &pod(Some(phase), None),
            status,
            &format!("Pod is in phase {phase}"),
        );
    }
    expect(
        "Complete",
        &pod(None, None),
        Status::False,
        "Pod has no phase yet",
    );
}

#[test]
fn pod_healthy() {
    expect(
        "Healthy",
        &pod(Some("Succeeded"), None),
        Status::True,
        "Pod is in phase Succeeded",
    );
    expect(
        "Healthy",
        &pod(Some("Running"), Some("True")),
        Status::True,
        "Pod is Running and Ready",
    );
    expect(
        "Healthy",
        &pod(Some("Running"), Some("False")),
        Status::False,
        "Pod is Running but not Ready",
    );
    expect(
        "Healthy",
        &pod(Some("Running"), None),
        Status::False,
        "Pod is Running but not Ready",
    );
    expect(
        "Healthy",
        &pod(Some("Pending"), None),
        Status::False,
        "Pod is in phase Pending",
    );
    expect(
        "Healthy",
        &pod(Some("Failed"), None),
        Status::False,
        "Pod is in phase Failed",
    );
}

fn workload(api_version: &str, kind: &str, spec: Value, status: Value) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "w"}, "spec": spec, "status": status})
}

#[test]
fn deployment_healthy() {
    let healthy = workload(
        "apps/v1",
        "Deployment",
        json!({"replicas": 3}),
        json!({"availableReplicas": 3, "conditions": [{"type": "Available", "status": "True"}]}),
    );
    expect("Healthy", &healthy, Status::True, "Deployment is healthy");
    let short = workload(
        "apps/v1",
        "Deployment",
        json!({"replicas": 3}),
        json!({"availableReplicas": 1, "conditions": [{"type": "Available", "status": "True"}]}),
    );
    expect(
        "Healthy",
        &short,
        Status::False,
        "Deployment has 1 of 3 replicas available",
    );
    let unavailable = workload(
        "apps/v1",
        "Deployment",
        json!({"replicas": 1}),
        json!({"availableReplicas": 1, "conditions": [{"type": "Available", "status": "False"}]}),
    );
    expect(
        "Healthy",
        &unavailable,
        Status::False,
        "Deployment is not Available",
    );
    // spec.replicas defaults to 1, status.availableReplicas to 0.
    let fresh = workload("apps/v1", "Deployment", json!({}), json!({}));
    expect(
        "Healthy",
        &fresh,
        Status::False,
        "Deployment has 0 of 1 replicas available",
    );
}

#[test]
fn stateful_set_healthy() {
    let ok = workload(
        "apps/v1",
        "StatefulSet",
        json!({"replicas": 2}),
        json!({"availableReplicas": 2}),
    );
    expect("Healthy", &ok, Status::True, "StatefulSet is healthy");
    let bad = workload(
        "apps/v1",
        "StatefulSet",
        json!({"replicas": 2}),
        json!({"availableReplicas": 0}),
    );
    expect(
        "Healthy",
        &bad,
        Status::False,
        "StatefulSet has 0 of 2 replicas available",
    );
}

#[test]
fn replica_set_and_replication_controller_healthy() {
    for (api_version, kind) in [("apps/v1", "ReplicaSet"), ("v1", "ReplicationController")] {
        let ok = workload(
            api_version,
            kind,
            json!({"replicas": 2}),
            json!({"availableReplicas": 2}),
        );
        expect("Healthy", &ok, Status::True, &format!("{kind} is healthy"));
        let short = workload(
            api_version,
            kind,
            json!({"replicas": 2}),
            json!({"availableReplicas": 1}),
        );
        expect(
            "Healthy",
            &short,
            Status::False,
            &format!("{kind} has 1 of 2 replicas available"),
        );
        let failing = workload(
            api_version,
            kind,
            json!({"replicas": 0}),
            json!({"conditions": [{"type": "ReplicaFailure", "status": "True"}]}),
        );
        expect(
            "Healthy",
            &failing,
            Status::False,
            &format!("{kind} has a ReplicaFailure"),
        );
    }
}

#[test]
fn daemon_set_healthy() {
    let ok = workload(
        "apps/v1",
        "DaemonSet",
        json!({}),
        json!({"desiredNumberScheduled": 3, "numberAvailable": 3}),
    );
    expect("Healthy", &ok, Status::True, "DaemonSet is healthy");
    let bad = workload(
        "apps/v1",
        "DaemonSet",
        json!({}),
        json!({"desiredNumberScheduled": 3, "numberAvailable": 2}),
    );
    expect(
        "Healthy",
        &bad,
        Status::False,
        "DaemonSet has 2 of 3 scheduled pods available",
    );
}

#[test]
fn api_service_healthy() {
    let gv = "apiregistration.k8s.io/v1";
    let ok = workload(
        gv,
        "APIService",
        json!({}),
        json!({"conditions": [{"type": "Available", "status": "True"}]}),
    );
    expect("Healthy", &ok, Status::True, "APIService is healthy");
    let bad = workload(
        gv,
        "APIService",
        json!({}),
        json!({"conditions": [{"type": "Available", "status": "False"}]}),
    );
    expect(
        "Healthy",
        &bad,
        Status::False,
        "APIService is not Available",
    );
}

#[test]
fn crd_healthy() {
    let gv = "apiextensions.k8s.io/v1";
    let spec = json!({"versions": [{"name": "v1alpha1", "storage": false}, {"name": "v1", "storage": true}]});
    let ok = workload(
        gv,
        "CustomResourceDefinition",
        spec.clone(),
        json!({"storedVersions": ["v1"]}),
    );
    expect(
        "Healthy",
        &ok,
        Status::True,
        "CustomResourceDefinition is healthy",
    );
    let bad = workload(
        gv,
        "CustomResourceDefinition",
        spec,
        json!({"storedVersions": ["v1alpha1"]}),
    );
    expect(
        "Healthy",
        &bad,
        Status::False,
        "CustomResourceDefinition storage version v1 is not in status.storedVersions",
    );
}

#[test]
fn unknown_kinds_and_conditions_yield_nothing() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    assert!(eval("Complete", &cm).is_none());
    assert!(eval("Healthy", &cm).is_none());
    // Job has no Healthy rule; Deployment has no Complete rule.
    assert!(eval("Healthy", &job(json!([]))).is_none());
    let deploy = workload("apps/v1", "Deployment", json!({}), json!({}));
    assert!(eval("Complete", &deploy).is_none());
    assert!(eval("Ready", &pod(Some("Running"), None)).is_none());
    // A Job in another group is not a batch Job.
    let other = json!({"apiVersion": "example.com/v1", "kind": "Job"});
    assert!(eval("Complete", &other).is_none());
    assert!(eval("Complete", &json!("not an object")).is_none());
}

#[test]
fn overrides_of_message_apply_to_well_known_rules() {
    let mut rule = well_known("Complete");
    rule.message_expression = Some("result ? 'done: ' + object.status.phase : 'waiting'".into());
    let out = Evaluator::shared().evaluate_manifest(&[rule.clone()], &pod(Some("Succeeded"), None));
    assert_eq!(out[0].message, "done: Succeeded");
    rule.message_expression = None;
    rule.message = Some("custom".into());
    let out = Evaluator::shared().evaluate_manifest(&[rule], &pod(Some("Running"), None));
    assert_eq!(
        (out[0].status, out[0].message.as_str()),
        (Status::False, "custom")
    );
}

#[test]
fn well_known_rules_respect_the_stale_guard() {
    let stale = workload(
        "apps/v1",
        "Deployment",
        json!({"replicas": 1}),
        json!({"observedGeneration": 1, "availableReplicas": 1, "conditions": [{"type": "Available", "status": "True"}]}),
    );
    let mut stale = stale;
    stale["metadata"]["generation"] = json!(2);
    let c = eval("Healthy", &stale).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str()),
        (Status::Unknown, "ConditionRuleStaleStatus")
    );
    // A rollout the status already shows as short of replicas stays False.
    stale["status"]["availableReplicas"] = json!(0);
    let c = eval("Healthy", &stale).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str()),
        (Status::False, "ConditionRuleEvaluated")
    );
}

#[test]
fn is_complete_for_job_and_pod() {
    let ev = Evaluator::shared();
    let rules = [well_known("")];
    assert_eq!(
        ev.is_complete(
            &rules,
            &job(json!([{"type": "Complete", "status": "True"}]))
        ),
        Some(true)
    );
    assert_eq!(ev.is_complete(&rules, &job(json!([]))), Some(false));
    assert_eq!(
        ev.is_complete(&rules, &pod(Some("Failed"), None)),
        Some(true)
    );
    assert_eq!(
        ev.is_complete(&[well_known("Healthy")], &pod(Some("Failed"), None)),
        None
    );
}
