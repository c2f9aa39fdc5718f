//! The CRD's `x-kubernetes-validations` rules, evaluated offline with the agent's CEL evaluator
//! (`self` bound as the API server binds it), so their logic is tested without a cluster. That
//! the API server accepts them (structural schema, cost estimate) is shown by installing
//! `deploy/crds/` on a real kube-apiserver, which the e2e harness does.

use conditions::{Bindings, Evaluator};
use serde_json::{Value, json};

fn holds(rule: &str, self_: Value) -> bool {
    let vars = json!({ "self": self_ });
    match Evaluator::shared().eval_expression(rule, &Bindings::TopLevel(&vars)) {
        Ok(Value::Bool(b)) => b,
        other => panic!("{rule} on {vars}: {other:?}"),
    }
}

/// The rules exactly as they appear in the generated CRD.
fn crd_rules() -> Vec<String> {
    let crd = work_api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == "ManifestWork")
        .unwrap();
    let tree = serde_json::to_value(crd).unwrap();
    let mut rules = Vec::new();
    collect(&tree, &mut rules);
    rules
}

fn collect(node: &Value, out: &mut Vec<String>) {
    match node {
        Value::Object(map) => {
            if let Some(Value::Array(vs)) = map.get("x-kubernetes-validations") {
                out.extend(
                    vs.iter()
                        .filter_map(|v| v["rule"].as_str().map(String::from)),
                );
            }
            map.values().for_each(|v| collect(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
        _ => {}
    }
}

#[test]
fn the_crd_carries_exactly_the_two_rules() {
    let rules = crd_rules();
    assert_eq!(rules.len(), 2, "{rules:?}");
    assert!(rules.contains(&work_api::RULE_CEL_NEEDS_CONDITION.to_string()));
    assert!(rules.contains(&work_api::RULE_UNIQUE_CONDITIONS.to_string()));
}

#[test]
fn a_cel_rule_needs_a_condition() {
    let rule = work_api::RULE_CEL_NEEDS_CONDITION;
    assert!(holds(rule, json!({"type": "CEL", "condition": "Ready"})));
    assert!(!holds(rule, json!({"type": "CEL", "condition": ""})));
    assert!(!holds(rule, json!({"type": "CEL"})));
    assert!(holds(rule, json!({"type": "WellKnownCompletions"})));
    assert!(holds(
        rule,
        json!({"type": "WellKnownConditions", "condition": ""})
    ));
}

#[test]
fn an_unnamed_well_known_rule_collides_with_complete() {
    let rule = work_api::RULE_UNIQUE_CONDITIONS;
    assert!(!holds(
        rule,
        json!([{"type": "WellKnownCompletions"}, {"condition": "Complete", "type": "CEL"}])
    ));
    assert!(!holds(
        rule,
        json!([{"condition": "", "type": "WellKnownConditions"}, {"condition": "Complete", "type": "WellKnownConditions"}])
    ));
    assert!(holds(
        rule,
        json!([{"type": "WellKnownCompletions"}, {"condition": "Healthy", "type": "WellKnownConditions"}])
    ));
    assert!(holds(
        rule,
        json!([{"condition": "Complete", "type": "CEL"}, {"condition": "Ready", "type": "CEL"}])
    ));
    assert!(holds(rule, json!([])));
}
