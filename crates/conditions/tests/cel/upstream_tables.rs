//! Upstream's own test tables, answered by cel-go v0.26 with the Kubernetes environment: every
//! expression of cel-go's ext and cel tests, k8s.io/apiserver/pkg/cel/library's tests and
//! apiextensions-apiserver's validation rule tables that cel-go compiles without the tests'
//! variables, with cel-go's answer (tests/fixtures/celgo_tables.jsonl, written by
//! `benches/cel-conformance.sh --update`). Ours must give the same value (compared in the
//! canonical rendering of [`conditions::TypedValue`]) or an error where cel-go gives one: every
//! case of the table agrees.

use conditions::{Bindings, Evaluator};
use serde_json::{Value, json};

#[test]
fn upstream_tables_agree_with_cel_go() {
    let text = include_str!("../fixtures/celgo_tables.jsonl");
    let empty = json!({});
    let bindings = Bindings::TopLevel(&empty);
    let (mut agree, mut disagreements) = (0, Vec::new());
    for line in text.lines() {
        let case: Value = serde_json::from_str(line).expect("a fixture line is JSON");
        let expr = case["expr"].as_str().unwrap_or_default();
        let celgo_err = case["err"].as_str().unwrap_or_default();
        let ours = Evaluator::shared().eval_expression_typed(expr, &bindings);
        let same = match (&ours, case["out"].as_str()) {
            (Ok(v), Some(out)) => v.canonical == out,
            (Err(_), None) => true,
            _ => false,
        };
        let ours = match ours {
            Ok(v) => v.canonical,
            Err(e) => format!("error: {e}"),
        };
        if same {
            agree += 1;
        } else {
            disagreements.push(format!(
                "{} {expr}\n    cel-go: {}\n    ours:   {ours}",
                case["source"].as_str().unwrap_or_default(),
                case["out"].as_str().unwrap_or(celgo_err)
            ));
        }
    }
    let total = text.lines().count();
    println!("{agree} of {total} cases agree with cel-go");
    assert!(
        disagreements.is_empty(),
        "{} of {total} cases disagree with cel-go:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    // The table is upstream's: a fixture that lost its cases would pass vacuously.
    assert!(agree >= 1_000, "only {agree} cases agree");
}
