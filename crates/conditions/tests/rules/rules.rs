//! CEL condition rules: AND with short-circuit, results, reasons, messages, errors, guards.

use conditions::{ConditionUpdate, Evaluator, MAX_MESSAGE_BYTES, Status};
use serde_json::{Value, json};
use work_api::{CelExpression, ConditionRule, ConditionRuleType};

fn cel(condition: &str, exprs: &[&str]) -> ConditionRule {
    ConditionRule::cel(condition, exprs.iter().copied())
}

fn one(rule: ConditionRule, object: &Value) -> ConditionUpdate {
    let mut out = Evaluator::shared().evaluate_manifest(&[rule], object);
    assert_eq!(out.len(), 1, "{out:?}");
    out.remove(0)
}

fn obj() -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "generation": 2},
           "spec": {"replicas": 3}, "status": {"observedGeneration": 2, "ready": 3, "phase": "Done"}})
}

#[test]
fn true_rule_has_default_message() {
    let c = one(
        cel("Ready", &["object.status.ready == object.spec.replicas"]),
        &obj(),
    );
    assert_eq!(
        c.parts(),
        (
            "Ready",
            Status::True,
            "ConditionRuleEvaluated",
            "Manifest is Ready"
        )
    );
}

#[test]
fn false_rule_has_default_not_message() {
    let c = one(
        cel("Ready", &["object.status.ready > object.spec.replicas"]),
        &obj(),
    );
    assert_eq!(
        c.parts(),
        (
            "Ready",
            Status::False,
            "ConditionRuleEvaluated",
            "Manifest is not Ready"
        )
    );
}

#[test]
fn empty_expression_list_is_true() {
    let c = one(cel("Anything", &[]), &obj());
    assert_eq!(
        (c.status, c.reason.as_str()),
        (Status::True, "ConditionRuleEvaluated")
    );
}

#[test]
fn expressions_are_anded_and_stop_at_first_false() {
    let c = one(cel("Ready", &["true", "object.spec.replicas == 3"]), &obj());
    assert_eq!(c.status, Status::True);
    let c = one(cel("Ready", &["true", "false", "true"]), &obj());
    assert_eq!(c.status, Status::False);
    // The erroring third expression is never reached.
    let c = one(
        cel("Ready", &["true", "false", "object.no.such.field"]),
        &obj(),
    );
    assert_eq!(
        (c.status, c.reason.as_str()),
        (Status::False, "ConditionRuleEvaluated")
    );
    // ...but it is when the earlier ones pass.
    let c = one(cel("Ready", &["true", "object.no.such.field"]), &obj());
    assert_eq!(
        (c.status, c.reason.as_str()),
        (Status::False, "ConditionRuleExpressionError")
    );
    assert!(
        c.message
            .starts_with("celExpressions[1]: evaluation error:"),
        "{}",
        c.message
    );
    assert!(c.message.contains("no"), "{}", c.message);
}

#[test]
fn compile_error_says_which_expression_and_what() {
    let c = one(cel("Ready", &["true", "object.status.ready =="]), &obj());
    assert_eq!(
        (c.status, c.reason.as_str()),
        (Status::False, "ConditionRuleExpressionError")
    );
    assert!(
        c.message.starts_with("celExpressions[1]: compile error:"),
        "{}",
        c.message
    );
}

#[test]
fn wrong_result_type_is_an_expression_error() {
    let c = one(cel("Ready", &["object.spec.replicas"]), &obj());
    assert_eq!(
        (c.status, c.reason.as_str()),
        (Status::False, "ConditionRuleExpressionError")
    );
    assert!(
        c.message
            .contains("celExpressions[0]: expected bool or map"),
        "{}",
        c.message
    );
    assert!(c.message.contains("got int"), "{}", c.message);
    let c = one(cel("Ready", &["'True'"]), &obj());
    assert!(c.message.contains("got string"), "{}", c.message);
}

#[test]
fn map_result_sets_status_reason_and_message() {
    let expr = "object.status.ready >= object.spec.replicas \
        ? {'status': true, 'reason': 'CountReached', 'message': 'Count matches expected'} \
        : {'status': 'False', 'reason': 'CountNotReached', 'message': 'Count is only ' + string(object.status.ready)}";
    let c = one(cel("ExpectedCount", &[expr]), &obj());
    assert_eq!(
        c.parts(),
        (
            "ExpectedCount",
            Status::True,
            "ConditionRuleCountReached",
            "Count matches expected"
        )
    );
    let mut lagging = obj();
    lagging["status"]["ready"] = json!(1);
    let c = one(cel("ExpectedCount", &[expr]), &lagging);
    assert_eq!(
        c.parts(),
        (
            "ExpectedCount",
            Status::False,
            "ConditionRuleCountNotReached",
            "Count is only 1"
        )
    );
}

#[test]
fn map_result_defaults() {
    // No status: True. No reason: ConditionRuleEvaluated. No message: the default.
    let c = one(cel("X", &["{'message': 'hello'}"]), &obj());
    assert_eq!(
        c.parts(),
        ("X", Status::True, "ConditionRuleEvaluated", "hello")
    );
    let c = one(cel("X", &["{'status': 'Unknown'}"]), &obj());
    assert_eq!(
        c.parts(),
        (
            "X",
            Status::Unknown,
            "ConditionRuleEvaluated",
            "Manifest is not X"
        )
    );
    // A reason already prefixed is kept as is.
    let c = one(cel("X", &["{'reason': 'ConditionRuleMine'}"]), &obj());
    assert_eq!(c.reason, "ConditionRuleMine");
    // A map stops the AND when not True; a True map's detail survives later bools.
    let c = one(
        cel(
            "X",
            &["{'status': false, 'message': 'first'}", "object.no.such"],
        ),
        &obj(),
    );
    assert_eq!((c.status, c.message.as_str()), (Status::False, "first"));
    let c = one(
        cel("X", &["{'status': true, 'reason': 'Fine'}", "true"]),
        &obj(),
    );
    assert_eq!(
        (c.status, c.reason.as_str()),
        (Status::True, "ConditionRuleFine")
    );
}

#[test]
fn invalid_map_results_are_expression_errors() {
    for (expr, needle) in [
        ("{'reason': 'has space'}", "does not match"),
        ("{'reason': '1starts'}", "does not match"),
        ("{'reason': 'endsWith,'}", "does not match"),
        ("{'status': 'Maybe'}", "not one of True, False, Unknown"),
        ("{'status': 1}", "status has type int"),
        ("{'message': 1}", "message has type int"),
        ("{'colour': 'red'}", "unexpected key \"colour\""),
        ("{1: 'x'}", "is not a string"),
    ] {
        let c = one(cel("X", &[expr]), &obj());
        assert_eq!(
            (c.status, c.reason.as_str()),
            (Status::False, "ConditionRuleExpressionError"),
            "{expr}"
        );
        assert!(
            c.message.starts_with("celExpressions[0]: invalid result:"),
            "{expr}: {}",
            c.message
        );
        assert!(c.message.contains(needle), "{expr}: {}", c.message);
    }
    let ok = one(cel("X", &["{'reason': 'A_b:c,D9'}"]), &obj());
    assert_eq!(ok.reason, "ConditionRuleA_b:c,D9");
}

#[test]
fn message_precedence() {
    let mut rule = cel("Ready", &["true"]);
    rule.message = Some("static".into());
    assert_eq!(one(rule.clone(), &obj()).message, "static");
    rule.message_expression = Some("result ? 'yes ' + object.status.phase : 'no'".into());
    assert_eq!(one(rule.clone(), &obj()).message, "yes Done");
    rule.cel_expressions = vec![CelExpression::new("false")];
    assert_eq!(one(rule.clone(), &obj()).message, "no");
    // An empty string from messageExpression falls back.
    rule.message_expression = Some("''".into());
    assert_eq!(one(rule.clone(), &obj()).message, "static");
    // A map's message wins over both.
    rule.cel_expressions = vec![CelExpression::new(
        "{'status': false, 'message': 'from map'}",
    )];
    rule.message_expression = Some("'from messageExpression'".into());
    assert_eq!(one(rule, &obj()).message, "from map");
}

#[test]
fn failing_message_expression_keeps_status_and_says_why() {
    let mut rule = cel("Ready", &["true"]);
    rule.message_expression = Some("object.nope".into());
    let c = one(rule.clone(), &obj());
    assert_eq!(
        (c.status, c.reason.as_str()),
        (Status::True, "ConditionRuleEvaluated")
    );
    assert!(
        c.message
            .starts_with("messageExpression failed: evaluation error:"),
        "{}",
        c.message
    );
    rule.message_expression = Some("1 + 1".into());
    let c = one(rule.clone(), &obj());
    assert!(
        c.message.contains("expected string, got int"),
        "{}",
        c.message
    );
    rule.message_expression = Some("'unclosed".into());
    let c = one(rule, &obj());
    assert!(
        c.message
            .starts_with("messageExpression failed: compile error"),
        "{}",
        c.message
    );
}

#[test]
fn messages_are_capped() {
    let object = json!({"long": "y".repeat(100_000)});
    let c = one(cel("Big", &["{'message': object.long}"]), &object);
    assert!(c.message.len() <= MAX_MESSAGE_BYTES);
    assert!(c.message.len() > MAX_MESSAGE_BYTES - 10);
    let mut rule = cel("Big", &["true"]);
    rule.message_expression = Some("object.long + object.long".into());
    assert!(one(rule, &object).message.len() <= MAX_MESSAGE_BYTES);
}

#[test]
fn agent_owned_condition_names_are_invalid() {
    for name in ["Applied", "Available", "StatusFeedbackSynced", "Deleting"] {
        let c = one(cel(name, &["true"]), &obj());
        assert_eq!(
            (c.type_.as_str(), c.status, c.reason.as_str()),
            (name, Status::Unknown, "ConditionRuleInvalid")
        );
        assert!(
            c.message.contains("owned by the work agent"),
            "{}",
            c.message
        );
    }
}

#[test]
fn unknown_rule_type_is_invalid() {
    let mut rule = cel("Ready", &["true"]);
    rule.type_ = ConditionRuleType::from("Magic");
    let c = one(rule, &obj());
    assert_eq!(
        (c.status, c.reason.as_str()),
        (Status::Unknown, "ConditionRuleInvalid")
    );
    assert!(c.message.contains("\"Magic\""), "{}", c.message);
}

#[test]
fn unnamed_cel_rule_yields_nothing() {
    assert!(
        Evaluator::shared()
            .evaluate_manifest(&[cel("", &["true"])], &obj())
            .is_empty()
    );
}

#[test]
fn stale_status_never_makes_a_condition_true_but_a_reported_failure_stands() {
    let mut stale = obj();
    stale["metadata"]["generation"] = json!(3);
    let c = one(cel("Ready", &["true"]), &stale);
    assert_eq!(
        (c.status, c.reason.as_str()),
        (Status::Unknown, "ConditionRuleStaleStatus")
    );
    assert!(c.reason.starts_with("ConditionRule"));
    assert!(
        c.message.contains("observedGeneration 2") && c.message.contains("generation 3"),
        "{}",
        c.message
    );
    // The rule is still evaluated: a False or Unknown verdict (a failure the controller reports
    // without moving observedGeneration) stands, an error is an error.
    let failed = one(
        cel(
            "Ready",
            &["{'status': 'False', 'reason': 'Failed', 'message': 'scale-down refused'}"],
        ),
        &stale,
    );
    assert_eq!(
        (
            failed.status,
            failed.reason.as_str(),
            failed.message.as_str()
        ),
        (Status::False, "ConditionRuleFailed", "scale-down refused")
    );
    assert_eq!(
        one(
            cel("Ready", &["{'status': 'Unknown', 'reason': 'Paused'}"]),
            &stale
        )
        .reason,
        "ConditionRulePaused"
    );
    assert_eq!(
        one(cel("Ready", &["object.status.nope"]), &stale).reason,
        "ConditionRuleExpressionError"
    );
    // A True verdict carried by a map is withheld too, whatever reason it gives.
    let carried = one(
        cel("Ready", &["{'status': 'True', 'reason': 'Ready'}"]),
        &stale,
    );
    assert_eq!(
        (carried.status, carried.reason.as_str()),
        (Status::Unknown, "ConditionRuleStaleStatus")
    );
    // observedGeneration ahead of generation (a recreated object) is stale too.
    let mut ahead = obj();
    ahead["status"]["observedGeneration"] = json!(5);
    assert_eq!(
        one(cel("Ready", &["true"]), &ahead).reason,
        "ConditionRuleStaleStatus"
    );
    // Only when both are integers.
    let mut odd = obj();
    odd["status"]["observedGeneration"] = json!("2");
    odd["metadata"]["generation"] = json!(3);
    assert_eq!(one(cel("Ready", &["true"]), &odd).status, Status::True);
    let mut missing = obj();
    missing["status"]
        .as_object_mut()
        .map(|s| s.remove("observedGeneration"));
    missing["metadata"]["generation"] = json!(9);
    assert_eq!(one(cel("Ready", &["true"]), &missing).status, Status::True);
}

#[test]
fn rules_yield_conditions_in_rule_order() {
    let rules = [
        cel("B", &["true"]),
        cel("A", &["false"]),
        cel("Applied", &["true"]),
    ];
    let out = Evaluator::shared().evaluate_manifest(&rules, &obj());
    let types: Vec<_> = out.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["B", "A", "Applied"]);
    assert!(out.iter().all(|c| c.reason.starts_with("ConditionRule")));
}

#[test]
fn is_complete_only_looks_at_complete_rules() {
    let ev = Evaluator::shared();
    let object = obj();
    assert_eq!(ev.is_complete(&[cel("Ready", &["true"])], &object), None);
    assert_eq!(
        ev.is_complete(
            &[cel("Complete", &["true"]), cel("Ready", &["false"])],
            &object
        ),
        Some(true)
    );
    assert_eq!(
        ev.is_complete(&[cel("Complete", &["false"])], &object),
        Some(false)
    );
    assert_eq!(
        ev.is_complete(&[cel("Complete", &["object.nope"])], &object),
        Some(false)
    );
    let mut stale = obj();
    stale["metadata"]["generation"] = json!(5);
    assert_eq!(
        ev.is_complete(&[cel("Complete", &["true"])], &stale),
        Some(false)
    );
    // A well-known Complete rule on a kind without one never completes.
    let wk = ConditionRule {
        type_: ConditionRuleType::WellKnownConditions,
        ..Default::default()
    };
    assert_eq!(ev.is_complete(&[wk], &object), Some(false));
}

#[test]
fn expression_object_form_and_string_form_decode_alike() {
    let rules: Vec<ConditionRule> = serde_json::from_value(json!([
        {"condition": "A", "type": "CEL", "celExpressions": ["object.spec.replicas == 3"]},
        {"condition": "B", "type": "CEL", "celExpressions": [{"expression": "object.spec.replicas == 3"}]}
    ]))
    .unwrap();
    let out = Evaluator::shared().evaluate_manifest(&rules, &obj());
    assert!(out.iter().all(|c| c.status == Status::True), "{out:?}");
}
