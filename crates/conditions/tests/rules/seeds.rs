//! The examples of the design documents the project started from: OCM's Workload Completion
//! enhancement ("002" below) and Flux's CEL health checks ("000").

use conditions::{Bindings, Evaluator, Status};
use serde_json::{Value, json};
use work_api::ConditionRule;

fn rules(yaml_like: Value) -> Vec<ConditionRule> {
    serde_json::from_value(yaml_like).expect("rules decode")
}

fn job(conditions: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "some-job"}, "status": {"conditions": conditions}})
}

/// 002: the enhancement's Job rule, written in CEL, agrees with the built-in one.
#[test]
fn enhancement_job_rule_matches_well_known() {
    let cel = rules(
        json!([{"condition": "Complete", "type": "CEL", "celExpressions": [{"expression":
        "object.status.conditions.filter(c, c.type == 'Complete' || c.type == 'Failed').exists(c, c.status == 'True')"}]}]),
    );
    // Upstream OCM guards with hasConditions so that a Job without conditions is just not finished.
    let upstream = rules(
        json!([{"condition": "Complete", "type": "CEL", "celExpressions": [
        "hasConditions(object.status) ? object.status.conditions.filter(c, c.type == 'Complete' || c.type == 'Failed').exists(c, c.status == 'True') : false"],
        "messageExpression": "result ? \"Job is finished\" : \"Job is not finished\""}]),
    );
    let builtin = rules(json!([{"type": "WellKnownCompletions"}]));
    let ev = Evaluator::shared();
    for (conditions, done) in [
        (json!([{"type": "Complete", "status": "True"}]), true),
        (json!([{"type": "Failed", "status": "True"}]), true),
        (json!([{"type": "Complete", "status": "False"}]), false),
        (json!([]), false),
    ] {
        let object = job(conditions);
        let expected = if done { Status::True } else { Status::False };
        assert_eq!(
            ev.evaluate_manifest(&cel, &object)[0].status,
            expected,
            "{object}"
        );
        let up = &ev.evaluate_manifest(&upstream, &object)[0];
        let wk = &ev.evaluate_manifest(&builtin, &object)[0];
        assert_eq!(
            (up.status, up.message.as_str()),
            (wk.status, wk.message.as_str()),
            "{object}"
        );
        assert_eq!(wk.status, expected);
    }
    // Without status.conditions the unguarded expression is an error, the guarded one is not.
    let bare = json!({"apiVersion": "batch/v1", "kind": "Job", "status": {}});
    assert_eq!(
        ev.evaluate_manifest(&cel, &bare)[0].reason,
        "ConditionRuleExpressionError"
    );
    assert_eq!(
        ev.evaluate_manifest(&upstream, &bare)[0].status,
        Status::False
    );
}

/// 002: the enhancement's Pod rule.
#[test]
fn enhancement_pod_rule() {
    let rule = rules(
        json!([{"condition": "Complete", "type": "CEL", "celExpressions": [
        {"expression": "object.status.phase in ['Succeeded', 'Failed']"}]}]),
    );
    let ev = Evaluator::shared();
    for (phase, expected) in [
        ("Running", Status::False),
        ("Succeeded", Status::True),
        ("Failed", Status::True),
    ] {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": phase}});
        let c = &ev.evaluate_manifest(&rule, &pod)[0];
        assert_eq!(c.status, expected);
        let default = if expected == Status::True {
            "Manifest is Complete"
        } else {
            "Manifest is not Complete"
        };
        assert_eq!(c.message, default);
    }
}

/// 002: CEL conditions for a custom resource (Complete and MyCondition).
#[test]
fn enhancement_custom_resource_rules() {
    let rules = rules(json!([
        {"condition": "Complete", "type": "CEL", "celExpressions": [{"expression":
            "object.status.conditions.filter(\n  c, c.type == 'Complete' || c.type == 'Failed'\n).exists(\n  c, c.status == 'True'\n)\n"}]},
        {"condition": "MyCondition", "type": "CEL", "celExpressions": [{"expression":
            "object.status.conditions.exists(\n  c, c.type == 'MyCondition' && c.status == 'True'\n)\n"}]}
    ]));
    let object = json!({"apiVersion": "example.com/v1", "kind": "MyCustomResource", "metadata": {"name": "some-custom-resource"},
        "status": {"conditions": [{"type": "Complete", "status": "True"}, {"type": "MyCondition", "status": "False"}]}});
    let out = Evaluator::shared().evaluate_manifest(&rules, &object);
    let summary: Vec<_> = out
        .iter()
        .map(|c| (c.type_.as_str(), c.status, c.message.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("Complete", Status::True, "Manifest is Complete"),
            ("MyCondition", Status::False, "Manifest is not MyCondition")
        ]
    );
    // A typo in a field name is reported in the message (the enhancement's "no such key").
    let typo = self::rules(
        json!([{"condition": "Initialized", "type": "CEL", "celExpressions": ["object.status.initialzed"]}]),
    );
    let c = &Evaluator::shared().evaluate_manifest(&typo, &object)[0];
    assert_eq!(
        (c.status, c.reason.as_str()),
        (Status::False, "ConditionRuleExpressionError")
    );
    assert!(c.message.contains("initialzed"), "{}", c.message);
}

/// seeds/002 "Optional Enhancement": a map result with reason and message. The seed's map has
/// no `status`; ours says it explicitly (an absent status means True).
#[test]
fn enhancement_map_result() {
    let rule = rules(
        json!([{"condition": "ExpectedCount", "type": "CEL", "celExpressions": [{"expression":
        "object.status.count >= object.status.expectedCount\n  ? {\n    \"status\": true,\n    \"message\": \"Count matches expected\",\n    \"reason\": \"CountReached\",\n  }\n  : {\n    \"status\": false,\n    \"message\": \"Count is only \" + string(object.status.count) + \", expected \" + string(object.status.expectedCount),\n    \"reason\": \"CountNotReached\",\n  }\n"}]}]),
    );
    let ev = Evaluator::shared();
    let c = &ev.evaluate_manifest(&rule, &json!({"status": {"count": 3, "expectedCount": 4}}))[0];
    assert_eq!(
        c.parts(),
        (
            "ExpectedCount",
            Status::False,
            "ConditionRuleCountNotReached",
            "Count is only 3, expected 4"
        )
    );
    let c = &ev.evaluate_manifest(&rule, &json!({"status": {"count": 4, "expectedCount": 4}}))[0];
    assert_eq!(
        (c.status, c.reason.as_str(), c.message.as_str()),
        (
            Status::True,
            "ConditionRuleCountReached",
            "Count matches expected"
        )
    );
}

fn certificate(issuing: &str, ready: &str, observed: i64) -> Value {
    json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "app-certificate", "generation": 1},
        "status": {"conditions": [
            {"type": "Issuing", "status": issuing, "observedGeneration": observed},
            {"type": "Ready", "status": ready, "observedGeneration": observed}]}})
}

/// 000: Flux's Certificate expressions, bound at top level as Flux does.
#[test]
fn flux_certificate_health_checks() {
    let in_progress = "status.conditions.filter(e, e.type == 'Issuing').all(e, e.observedGeneration == metadata.generation && e.status == 'True')";
    let failed = "status.conditions.filter(e, e.type == 'Ready').all(e, e.observedGeneration == metadata.generation && e.status == 'False')";
    let current = "status.conditions.filter(e, e.type == 'Ready').all(e, e.observedGeneration == metadata.generation && e.status == 'True')";
    let ev = Evaluator::shared();
    let eval = |expr: &str, object: &Value| {
        ev.eval_expression(expr, &Bindings::TopLevel(object))
            .unwrap()
    };
    let issuing = certificate("True", "False", 1);
    assert_eq!(eval(in_progress, &issuing), json!(true));
    let ready = certificate("False", "True", 1);
    assert_eq!(
        (
            eval(in_progress, &ready),
            eval(failed, &ready),
            eval(current, &ready)
        ),
        (json!(false), json!(false), json!(true))
    );
    let broken = certificate("False", "False", 1);
    assert_eq!(eval(failed, &broken), json!(true));
    // Conditions from an older generation match none of them.
    let old = certificate("True", "True", 0);
    assert_eq!(
        (eval(in_progress, &old), eval(current, &old)),
        (json!(false), json!(false))
    );
}

/// 000: the same checks as condition rules on `object`, and the stale-status guard.
#[test]
fn flux_checks_as_rules_and_stale_guard() {
    let rule = rules(
        json!([{"condition": "Ready", "type": "CEL", "celExpressions": [
        "object.status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'True')"]}]),
    );
    let ev = Evaluator::shared();
    let mut cluster = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
        "metadata": {"generation": 4}, "status": {"observedGeneration": 4, "conditions": [{"type": "Ready", "status": "True"}]}});
    assert_eq!(
        ev.evaluate_manifest(&rule, &cluster)[0].status,
        Status::True
    );
    cluster["metadata"]["generation"] = json!(5);
    let c = &ev.evaluate_manifest(&rule, &cluster)[0];
    assert_eq!(
        (c.status, c.reason.as_str()),
        (Status::Unknown, "ConditionRuleStaleStatus")
    );
    // SealedSecret: Synced condition.
    let sealed = rules(
        json!([{"condition": "Healthy", "type": "CEL", "celExpressions": [
        "object.status.conditions.filter(e, e.type == 'Synced').all(e, e.status == 'True')"]}]),
    );
    let secret = json!({"apiVersion": "bitnami.com/v1alpha1", "kind": "SealedSecret",
        "status": {"conditions": [{"type": "Synced", "status": "False"}]}});
    assert_eq!(
        ev.evaluate_manifest(&sealed, &secret)[0].status,
        Status::False
    );
}
