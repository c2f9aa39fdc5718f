//! Property: evaluating an expression on the projection of an object (only what the expression
//! reads, [`crate::cel::projection`]) gives exactly what evaluating it on the whole object gives:
//! the same value, or an error with the same text (cost-budget errors included), with the
//! projection borrowing the object's strings or owning copies (as the object cache keeps it).
//!
//! Cases: `PROPTEST_CASES`, else [`CASES`].

use std::sync::OnceLock;

use cel::Value;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value as Json};

use crate::cel::budget::ManifestBudget;
use crate::cel::engine::Engine;
use crate::cel::prepared::ObjectVariable;
use crate::cel::{convert, projection};
use crate::error::EvalError;
use crate::limits::Limits;

/// Cases when `PROPTEST_CASES` is unset: each case compiles a new expression.
const CASES: u32 = 1_000;

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| Engine::new(Limits::default()))
}

const KEYS: &[&str] = &["a", "b", "c", "items", "k"];

/// Random JSON over a few keys, so that expressions find (and miss) fields.
fn object() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        (-3i64..4).prop_map(Json::from),
        prop::sample::select(&["a", "b", "x", "True", ""][..]).prop_map(Json::from),
    ];
    leaf.prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..5).prop_map(|fields| {
                Json::Object(
                    fields
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

/// A chain from `object`: field selections, literal and non-literal indexes, optional selects.
fn path() -> impl Strategy<Value = String> {
    let step = prop_oneof![
        4 => prop::sample::select(KEYS).prop_map(|k| format!(".{k}")),
        1 => prop::sample::select(KEYS).prop_map(|k| format!("['{k}']")),
        1 => (0u8..2).prop_map(|i| format!("[{i}]")),
        1 => prop::sample::select(KEYS).prop_map(|k| format!(".?{k}")),
        1 => Just("[object.k]".to_string()),
    ];
    prop::collection::vec(step, 0..4).prop_map(|steps| format!("object{}", steps.concat()))
}

fn literal() -> impl Strategy<Value = String> {
    prop::sample::select(&["1", "0", "'a'", "'x'", "true", "null", "[]", "{}"][..])
        .prop_map(str::to_string)
}

/// One expression that reads the object in one way.
fn atom() -> impl Strategy<Value = String> {
    let field = prop::sample::select(KEYS);
    prop_oneof![
        path(),
        (path(), field).prop_map(|(p, f)| format!("has({p}.{f})")),
        path().prop_map(|p| format!("size({p})")),
        (path(), literal()).prop_map(|(p, l)| format!("{p} == {l}")),
        (path(), literal()).prop_map(|(p, l)| format!("{p}.exists(x, x == {l})")),
        (path(), literal()).prop_map(|(p, l)| format!("{p}.all(x, x != {l})")),
        (path(), literal()).prop_map(|(p, l)| format!("size({p}.filter(x, x == {l}))")),
        path().prop_map(|p| format!("size({p}.map(x, x))")),
        path().prop_map(|p| format!("string({p})")),
        path().prop_map(|p| format!("type({p}) == map")),
        path().prop_map(|p| format!("{p} + 1")),
        path().prop_map(|p| format!("hasConditions({p})")),
        path().prop_map(|p| format!("'a' in {p}")),
        (path(), path()).prop_map(|(p, q)| format!("{p} == {q}")),
        (path(), path()).prop_map(|(p, q)| format!("{{'k': {p}, 'l': [{q}]}}")),
        path().prop_map(|p| format!("{p}.orValue(0)")),
        path().prop_map(|p| format!("[1].exists(object, object == 1) && {p} == 1")),
        Just("object".to_string()),
    ]
}

/// Atoms combined with boolean operators and conditionals.
fn expression() -> impl Strategy<Value = String> {
    atom().prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) && ({b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) || ({b})")),
            inner.clone().prop_map(|a| format!("!({a})")),
            (inner.clone(), inner.clone(), inner)
                .prop_map(|(a, b, c)| format!("({a}) ? ({b}) : ({c})")),
        ]
    })
}

/// `source` run on `object` bound as `variable`, with a fresh budget.
fn run(source: &str, variable: &ObjectVariable<'_>) -> Result<Value, EvalError> {
    let engine = engine();
    let program = engine.compile(source)?;
    let mut ctx = engine.context()?;
    ctx.set_variable_resolver(variable);
    engine.run(&program, &ctx, &ManifestBudget::new(engine.limits()))
}

/// The error's text; when it prints a map, its characters sorted (a map's entries print in
/// hash order, which differs between two conversions of the same object).
fn error_text(e: &EvalError) -> String {
    let text = e.to_string();
    if !text.contains("Map {") {
        return text;
    }
    let mut chars: Vec<char> = text.chars().collect();
    chars.sort_unstable();
    chars.into_iter().collect()
}

fn same(source: &str, object: &Json) -> Result<(), TestCaseError> {
    let Ok(program) = engine().compile(source) else {
        return Ok(());
    };
    let full = convert::json_to_val(object);
    let projected = projection::project(object, &program.reads);
    let owned = projection::project_owned(object, &program.reads);
    let whole = run(source, &ObjectVariable(full.as_ref()));
    for (how, part) in [("projected", &projected), ("owned", &owned)] {
        let got = run(source, &ObjectVariable(part.as_ref()));
        match (&whole, &got) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "{} {} on {}", how, source, object),
            (Err(a), Err(b)) => prop_assert_eq!(
                error_text(a),
                error_text(b),
                "{} {} on {}",
                how,
                source,
                object
            ),
            (a, b) => {
                return Err(TestCaseError::fail(format!(
                    "{how} {source} on {object}: whole gave {a:?}, projection {b:?}"
                )));
            }
        }
    }
    Ok(())
}

#[test]
fn projection_evaluates_like_the_whole_object() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&(expression(), object()), |(source, object)| {
        same(&source, &object)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn known_shapes_evaluate_like_the_whole_object() {
    let object = serde_json::json!({
        "metadata": {"name": "n", "labels": {"app": "x"}},
        "spec": {"replicas": 3, "containers": [{"image": "a:1"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "replicas": 2},
    });
    for source in [
        "object.status.conditions.exists(c, c.type == 'Ready')",
        "has(object.spec.paused) || object.spec.replicas > object.status.replicas",
        "object.status.missing",
        "object.spec.replicas.missing",
        "object.metadata.labels['app'] == 'x' && object.metadata.labels[object.metadata.name] == 'y'",
        "object.spec.containers[0].image.startsWith('a')",
        "size(object.status) == 2 && size(object.metadata.labels) == 1",
        "object.?spec.?paused.orValue(false)",
        "hasConditions(object.status)",
        "object",
    ] {
        if let Err(e) = same(source, &object) {
            panic!("{e}");
        }
    }
}
