//! Hostile input to the condition evaluator's public API: random CEL programs within (and just
//! over) the length limit, random token soup, random objects, the quantity and URL parsers
//! (through `quantity('...')` and `url('...')`), and random rules through `evaluate_manifest`.
//! Every call must return a value or an error that says what went wrong: no panic (caught or
//! not), no internal error, no hang (evaluation is bounded by the evaluator's limits).
//!
//! Cases per property: `PROPTEST_CASES`, else [`COSTLY`] (see docs/testing.md).

use std::time::{Duration, Instant};

use conditions::{Bindings, EvalError, Evaluator, Status};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use serde_json::{Map, Value, json};
use work_api::{CelExpression, ConditionRule, ConditionRuleType};

/// Cases per property when `PROPTEST_CASES` is unset: every case compiles new expressions on a
/// parser thread, so `make test` (a debug build) runs fewer; `make prop` runs 100,000.
const COSTLY: u32 = 2_000;

#[path = "../../work-api/tests/common/prop_config.rs"]
mod prop_config;
use prop_config::config;

/// Runs `property` over `strategy`, and reports the slowest case (a figure, not a bound: the
/// evaluator's own limits bound it, and an unbounded case would hang the test).
fn run<S: Strategy>(
    name: &str,
    default_cases: u32,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let slowest = std::sync::Mutex::new(Duration::ZERO);
    let started = Instant::now();
    let done = std::sync::atomic::AtomicU64::new(0);
    let mut runner = TestRunner::new(config(default_cases));
    let result = runner.run(&strategy, |input| {
        let t0 = Instant::now();
        let outcome = property(input);
        let took = t0.elapsed();
        // Long runs show they are alive: a line every 10,000 cases.
        let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if n.is_multiple_of(10_000) {
            eprintln!("{name}: {n} cases after {:.0?}", started.elapsed());
        }
        if let Ok(mut s) = slowest.lock()
            && took > *s
        {
            *s = took;
        }
        outcome
    });
    eprintln!(
        "{name}: {} cases in {:.1?}, slowest case {:.1?}",
        runner.config().cases,
        started.elapsed(),
        slowest.lock().map(|s| *s).unwrap_or_default()
    );
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

/// The error is one a user can act on: it has a message and is not the evaluator's own failure.
fn check_error(source: &str, e: &EvalError) -> Result<(), TestCaseError> {
    prop_assert!(
        !e.to_string().trim().is_empty(),
        "empty error for {source:?}"
    );
    if let EvalError::Internal { message } = e {
        return Err(TestCaseError::fail(format!(
            "internal error for {source:?}: {message}"
        )));
    }
    Ok(())
}

fn eval(source: &str, object: &Value) -> Result<(), TestCaseError> {
    match Evaluator::shared().eval_expression(source, &Bindings::Object(object)) {
        Ok(_) => Ok(()),
        Err(e) => check_error(source, &e),
    }
}

/// `s` as a CEL string literal (CEL's escapes, not Rust's).
fn cel_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c if c.is_control() || !c.is_ascii() => out.push_str(&format!("\\U{:08x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Random JSON, with some Kubernetes-shaped parts.
fn object() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        prop::sample::select(
            &[
                "True",
                "False",
                "Unknown",
                "Complete",
                "Ready",
                "100m",
                "1Gi",
                "1e3",
                "-0",
                "https://a.b:8080/p?q=1",
                "",
                "\u{1F600}",
            ][..]
        )
        .prop_map(|s| Value::from(s.to_string())),
        ".{0,16}".prop_map(Value::String),
    ];
    let tree = leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        prop::sample::select(
                            &[
                                "spec",
                                "status",
                                "conditions",
                                "type",
                                "status",
                                "replicas",
                                "metadata",
                                "name",
                                "data",
                                "items",
                                "succeeded",
                                "x"
                            ][..]
                        )
                        .prop_map(str::to_string),
                        "[a-z]{0,6}",
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|e| Value::Object(e.into_iter().collect::<Map<_, _>>())),
        ]
    });
    prop_oneof![
        tree.clone(),
        (tree.clone(), prop::collection::vec(tree, 0..4)).prop_map(|(spec, conditions)| {
            json!({"metadata": {"name": "x", "generation": 2},
                   "spec": spec, "status": {"observedGeneration": 2, "conditions": conditions}})
        }),
    ]
}

/// Atoms of the grammar.
fn atom() -> impl Strategy<Value = String> {
    let literal = prop_oneof![
        any::<i64>().prop_map(|i| i.to_string()),
        any::<u32>().prop_map(|u| format!("{u}u")),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:?}")),
        "[ -~]{0,12}".prop_map(|s| cel_str(&s)),
        Just("true".to_string()),
        Just("null".to_string()),
        Just("b'\\x00\\xff'".to_string()),
        Just("9223372036854775807".to_string()),
        Just("-9223372036854775808".to_string()),
        Just("18446744073709551615u".to_string()),
    ];
    let path = prop::collection::vec(
        prop::sample::select(
            &[
                "spec",
                "status",
                "conditions",
                "replicas",
                "metadata",
                "data",
                "x",
                "type",
            ][..],
        ),
        0..4,
    )
    .prop_map(|p| {
        let mut s = "object".to_string();
        for f in p {
            s.push('.');
            s.push_str(f);
        }
        s
    });
    prop_oneof![
        3 => literal,
        3 => path,
        1 => quantity_text().prop_map(|q| format!("quantity({})", cel_str(&q))),
        1 => url_text().prop_map(|u| format!("url({})", cel_str(&u))),
        1 => Just("x".to_string()),
        1 => Just("[1, 2, 3]".to_string()),
        1 => Just("{'a': 1}".to_string()),
    ]
}

/// Strings shaped like quantities, and not.
fn quantity_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[-+]?[0-9]{0,30}(\\.[0-9]{0,30})?([eE][-+]?[0-9]{0,5})?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|n|u)?",
        "[0-9.eEkKmMiGnu+-]{0,40}",
        ".{0,20}",
    ]
}

/// Strings shaped like URLs, and not.
fn url_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "(https?|ftp|[a-z]{0,5})://([a-z0-9.-]{0,20}|\\[[0-9a-f:]{0,20}\\])(:[0-9]{0,7})?(/[ -~]{0,20})?(\\?[ -~]{0,20})?(#.{0,5})?",
        "/[ -~]{0,30}",
        ".{0,30}",
    ]
}

/// Random programs from a CEL-shaped grammar (most parse; many fail to type or run).
fn program() -> impl Strategy<Value = String> {
    atom().prop_recursive(6, 48, 4, |inner| {
        let binary = prop::sample::select(
            &[
                "+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "in",
            ][..],
        );
        let method = prop::sample::select(
            &[
                "size()",
                "all(e, e == e)",
                "exists(e, true)",
                "exists_one(e, false)",
                "map(e, e)",
                "filter(e, true)",
                "all(k, v, v == v)",
                "exists(k, v, k == k)",
                "existsOne(k, v, true)",
                "transformList(k, v, v)",
                "transformList(k, v, false, k)",
                "transformMap(k, v, [v])",
                "transformMapEntry(k, v, {v: k})",
                "reverse()",
                "isQuantity()",
                "asInteger()",
                "isLessThan(quantity('1'))",
                "add(quantity('1k'))",
                "sign()",
                "getHost()",
                "getPort()",
                "getScheme()",
                "getQuery()",
                "getEscapedPath()",
                "startsWith('a')",
                "matches('a+b*')",
                "contains('x')",
                "lowerAscii()",
                "split(',')",
                "isSorted()",
                "sum()",
                "min()",
                "indexOf(1)",
                "compareTo(quantity('1'))",
            ][..],
        );
        let function = prop::sample::select(
            &[
                "size",
                "string",
                "int",
                "uint",
                "double",
                "bool",
                "type",
                "has",
                "hasConditions",
                "quantity",
                "isQuantity",
                "url",
                "isURL",
                "dyn",
                "duration",
                "timestamp",
            ][..],
        );
        prop_oneof![
            (inner.clone(), binary, inner.clone()).prop_map(|(a, op, b)| format!("{a} {op} {b}")),
            (inner.clone(), inner.clone(), inner.clone())
                .prop_map(|(c, a, b)| format!("{c} ? {a} : {b}")),
            inner.clone().prop_map(|a| format!("({a})")),
            inner.clone().prop_map(|a| format!("!{a}")),
            inner.clone().prop_map(|a| format!("-{a}")),
            (inner.clone(), method).prop_map(|(a, m)| format!("{a}.{m}")),
            (function, inner.clone()).prop_map(|(f, a)| format!("{f}({a})")),
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", "))),
            (inner.clone(), inner.clone()).prop_map(|(k, v)| format!("{{{k}: {v}}}")),
            (inner.clone(), inner).prop_map(|(a, i)| format!("{a}[{i}]")),
        ]
    })
}

/// Random text over the characters CEL's lexer cares about.
fn token_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(
            &[
                "(",
                ")",
                "[",
                "]",
                "{",
                "}",
                ".",
                ",",
                ":",
                "?",
                "!",
                "-",
                "+",
                "*",
                "/",
                "%",
                "==",
                "&&",
                "||",
                "<",
                ">",
                "'",
                "\"",
                "\"\"\"",
                "r'",
                "b'",
                "\\",
                "0x",
                "1",
                "1.5e300",
                "u",
                " ",
                "\n",
                "object",
                "x",
                "in",
                "has",
                "all",
                "e",
                "quantity",
                "url",
                "\u{0}",
                "\u{1F600}",
                "\u{200B}",
            ][..],
        ),
        0..64,
    )
    .prop_map(|t| t.concat())
}

#[test]
fn random_programs_on_random_objects_give_a_value_or_a_clear_error() {
    run(
        "programs",
        COSTLY,
        (program(), object()),
        |(source, object)| eval(&source, &object),
    );
}

#[test]
fn random_token_soup_gives_a_value_or_a_clear_error() {
    run("token soup", COSTLY, token_soup(), |source| {
        eval(&source, &json!({}))?;
        if let Err(e) = Evaluator::shared().check_expression(&source) {
            check_error(&source, &e)?;
        }
        Ok(())
    });
}

#[test]
fn programs_at_and_over_the_length_limit_are_refused_or_run() {
    let limit = Evaluator::shared().limits().max_expression_len;
    run(
        "long programs",
        COSTLY,
        (program(), limit - 64..limit + 64),
        move |(unit, target)| {
            // Repeats a program with `||` up to about the limit: a long, flat expression.
            let mut source = unit.clone();
            while source.len() + unit.len() + 4 <= target {
                source.push_str(" || ");
                source.push_str(&unit);
            }
            match Evaluator::shared().eval_expression(&source, &Bindings::Object(&json!({}))) {
                Ok(_) => Ok(()),
                Err(EvalError::TooLong { len, limit: l }) => {
                    prop_assert!(len > l);
                    Ok(())
                }
                Err(e) => check_error(&source, &e),
            }
        },
    );
}

#[test]
fn quantity_parser_gives_a_value_or_a_clear_error() {
    run("quantity", COSTLY, quantity_text(), |text| {
        let literal = cel_str(&text);
        let source = format!("quantity({literal}).isInteger()");
        let parsed = Evaluator::shared().eval_expression(&source, &Bindings::Object(&json!({})));
        let valid = Evaluator::shared().eval_expression(
            &format!("isQuantity({literal})"),
            &Bindings::Object(&json!({})),
        );
        match (&parsed, &valid) {
            // isQuantity agrees with whether quantity() parses.
            (Ok(_), Ok(v)) => prop_assert_eq!(v, &json!(true), "{} parses", text),
            (Err(e), Ok(v)) => {
                check_error(&source, e)?;
                prop_assert_eq!(v, &json!(false), "{} does not parse: {}", text, e);
            }
            (_, Err(e)) => return Err(TestCaseError::fail(format!("isQuantity({text:?}): {e}"))),
        }
        Ok(())
    });
}

#[test]
fn url_parser_gives_a_value_or_a_clear_error() {
    run("url", COSTLY, url_text(), |text| {
        for accessor in [
            "getScheme()",
            "getHost()",
            "getHostname()",
            "getPort()",
            "getEscapedPath()",
            "getQuery()",
        ] {
            let source = format!("url({}).{accessor}", cel_str(&text));
            if let Err(e) =
                Evaluator::shared().eval_expression(&source, &Bindings::Object(&json!({})))
            {
                check_error(&source, &e)?;
            }
        }
        match Evaluator::shared().eval_expression(
            &format!("isURL({})", cel_str(&text)),
            &Bindings::Object(&json!({})),
        ) {
            Ok(v) => prop_assert!(v.is_boolean()),
            Err(e) => return Err(TestCaseError::fail(format!("isURL({text:?}): {e}"))),
        }
        Ok(())
    });
}

fn rule() -> impl Strategy<Value = ConditionRule> {
    (
        prop::sample::select(&["Complete", "Available", "Ready", "", "x", "Applied"][..]),
        prop::sample::select(
            &[
                "CEL",
                "WellKnownConditions",
                "WellKnownCompletions",
                "Bogus",
            ][..],
        ),
        prop::collection::vec(prop_oneof![program(), token_soup()], 0..4),
        prop::option::of(".{0,20}"),
        prop::option::of(prop_oneof![program(), token_soup()]),
    )
        .prop_map(
            |(condition, type_, expressions, message, message_expression)| ConditionRule {
                condition: condition.to_string(),
                type_: serde_json::from_value::<ConditionRuleType>(json!(type_))
                    .unwrap_or(ConditionRuleType::Cel),
                cel_expressions: expressions.into_iter().map(CelExpression::new).collect(),
                message,
                message_expression,
            },
        )
}

#[test]
fn random_rules_on_random_objects_give_conditions() {
    run(
        "evaluate_manifest",
        COSTLY,
        (prop::collection::vec(rule(), 0..6), object()),
        |(rules, object)| {
            let updates = Evaluator::shared().evaluate_manifest(&rules, &object);
            prop_assert!(updates.len() <= rules.len());
            for u in &updates {
                prop_assert!(!u.type_.is_empty(), "a condition without a type: {u:?}");
                prop_assert!(!u.reason.is_empty(), "a condition without a reason: {u:?}");
                // A rule that could not be evaluated says why in the condition it sets.
                if u.status == Status::Unknown {
                    prop_assert!(!u.message.is_empty(), "Unknown without a message: {u:?}");
                }
                prop_assert!(
                    !u.message.contains("internal error"),
                    "an internal error reached a condition: {u:?}"
                );
            }
            // is_complete agrees with evaluate_manifest on the Complete condition.
            let complete = Evaluator::shared().is_complete(&rules, &object);
            let has_complete_rule = rules.iter().any(|r| r.condition_type() == "Complete");
            prop_assert_eq!(complete.is_some(), has_complete_rule);
            Ok(())
        },
    );
}
