//! Upstream's own test tables, answered by cel-go v0.26 with the Kubernetes environment: every
//! expression of cel-go's ext and cel tests, k8s.io/apiserver/pkg/cel/library's tests and
//! apiextensions-apiserver's validation rule tables that cel-go compiles without the tests'
//! variables, with cel-go's answer (tests/fixtures/celgo_tables.jsonl, written by
//! `benches/cel-conformance.sh --update`). Ours must give the same value (compared in the
//! canonical rendering of [`conditions::TypedValue`]) or an error where cel-go gives one, except
//! for the differences [`known_difference`] names, of which there must be exactly
//! [`KNOWN_DIFFERENCES`] (so that closing one, or opening one, is noticed).

use conditions::{Bindings, Evaluator};
use serde_json::{Value, json};

/// How many cases of the table ours knowingly answers otherwise.
const KNOWN_DIFFERENCES: usize = 61;

/// Why ours may knowingly answer otherwise, or `None`.
fn known_difference(expr: &str, celgo_out: &str) -> Option<&'static str> {
    let two_variables = regex::Regex::new(
        r"\.(all|exists|existsOne|exists_one|transformList|transformMap|transformMapEntry)\(\s*\w+\s*,\s*\w+\s*,",
    )
    .ok()?;
    if two_variables.is_match(expr) {
        return Some("two-variable comprehensions (cel-go's TwoVarComprehensions) are not offered");
    }
    if expr.contains(".reverse()") {
        return Some("ours offers strings version 3 (`reverse`); Kubernetes' version 2 does not");
    }
    if expr.contains("type(") && (expr.contains("format(") || celgo_out.starts_with("type(")) {
        return Some("type values print as their names (cel 0.15 gives no type values)");
    }
    if celgo_out.starts_with("kubernetes.Quantity(") {
        return Some("a quantity result prints in canonical units, not as written");
    }
    None
}

#[test]
fn upstream_tables_agree_with_cel_go() {
    let text = include_str!("fixtures/celgo_tables.jsonl");
    let empty = json!({});
    let bindings = Bindings::TopLevel(&empty);
    let (mut agree, mut known, mut disagreements) = (0, 0, Vec::new());
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
        let celgo_out = case["out"].as_str().unwrap_or_default();
        match (same, known_difference(expr, celgo_out)) {
            (true, _) => agree += 1,
            (false, Some(_)) => known += 1,
            (false, None) => disagreements.push(format!(
                "{} {expr}\n    cel-go: {}\n    ours:   {ours}",
                case["source"].as_str().unwrap_or_default(),
                case["out"].as_str().unwrap_or(celgo_err)
            )),
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} of {} cases disagree with cel-go:\n{}",
        disagreements.len(),
        text.lines().count(),
        disagreements.join("\n")
    );
    assert_eq!(
        known, KNOWN_DIFFERENCES,
        "known differences changed: update KNOWN_DIFFERENCES (and known_difference)"
    );
    // The table is upstream's: a fixture that lost its cases would pass vacuously.
    assert!(
        agree >= 850,
        "only {agree} cases agree ({known} known differences)"
    );
}
