//! Hostile status-feedback JSON paths through `agent::feedback::collect`: random paths (valid,
//! nearly valid and garbage) on random live objects. Every rule must give values or an error
//! naming the path, never a panic; each value is reported once and is small enough for status.
//!
//! Cases per property: `PROPTEST_CASES` (default [`DEFAULT_CASES`]).

#[path = "../../work-api/tests/common/prop_config.rs"]
mod prop_config;

use std::time::Instant;

use agent::spoke::feedback::{MAX_JSON_RAW, collect, joined};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use serde_json::{Map, Value};
use work_api::{FeedbackRule, FeedbackType, JsonPath, ValueType};

/// Cases per property when `PROPTEST_CASES` is unset (`make prop` runs 100,000).
const DEFAULT_CASES: u32 = 100_000;

fn config() -> proptest::test_runner::Config {
    prop_config::config(DEFAULT_CASES)
}

const FIELDS: &[&str] = &[
    "status",
    "spec",
    "conditions",
    "type",
    "replicas",
    "readyReplicas",
    "metadata",
    "labels",
    "app",
    "containers",
    "image",
    "a",
    "",
];

fn segment() -> impl Strategy<Value = String> {
    let field = prop::sample::select(FIELDS);
    prop_oneof![
        4 => field.clone().prop_map(|f| format!(".{f}")),
        2 => (0usize..4).prop_map(|i| format!("[{i}]")),
        1 => Just("[*]".to_string()),
        1 => field.clone().prop_map(|f| format!("['{f}']")),
        1 => field.clone().prop_map(|f| format!("[\"{f}\"]")),
        2 => (field, prop::sample::select(&["Ready", "Complete", "", "x]"][..]))
            .prop_map(|(f, v)| format!("[?(@.{f}==\"{v}\")]")),
        // Nearly valid and plain wrong.
        1 => prop::sample::select(&[
            "[", "]", "[?(", "[?(@.a)]", "[?(@.a==b)]", "[?(a==\"b\")]", "[-1]", "[99999999999999999999]",
            "..", "$", "{", "}", "['", "[\"]", "[?(@.==\"\")]", "[ * ]", ".\u{1F600}", "[\u{1F600}]",
        ][..]).prop_map(str::to_string),
        1 => "[ -~]{0,6}",
        1 => ".{0,4}",
    ]
}

fn path() -> impl Strategy<Value = String> {
    (
        prop::sample::select(&["", "$", "{", "{$", " "][..]),
        prop::collection::vec(segment(), 0..8),
        prop::sample::select(&["", "}", " "][..]),
    )
        .prop_map(|(pre, segs, post)| format!("{pre}{}{post}", segs.concat()))
}

fn object() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        prop::sample::select(&["Ready", "Complete", "True", "x]"][..])
            .prop_map(|s| Value::from(s.to_string())),
        ".{0,8}".prop_map(Value::String),
        (1usize..4096).prop_map(|n| Value::String("y".repeat(n))),
    ];
    leaf.prop_recursive(6, 128, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (prop::sample::select(FIELDS).prop_map(str::to_string), inner),
                0..6
            )
            .prop_map(|e| Value::Object(e.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn rules() -> impl Strategy<Value = Vec<FeedbackRule>> {
    prop::collection::vec(
        (
            prop::sample::select(&["JSONPaths", "WellKnownStatus", "Other"][..]),
            prop::collection::vec(
                (
                    prop::sample::select(&["a", "b", "c"][..]),
                    prop::option::of(prop::sample::select(&["v1", "v2", ""][..])),
                    path(),
                ),
                0..4,
            ),
        ),
        0..3,
    )
    .prop_map(|rules| {
        rules
            .into_iter()
            .map(|(type_, paths)| FeedbackRule {
                type_: serde_json::from_value(Value::from(type_))
                    .unwrap_or(FeedbackType::JsonPaths),
                json_paths: paths
                    .into_iter()
                    .map(|(name, version, path)| JsonPath {
                        name: name.to_string(),
                        version: version.map(str::to_string),
                        path,
                    })
                    .collect(),
            })
            .collect()
    })
}

#[test]
fn random_paths_on_random_objects_give_values_or_errors() {
    let started = Instant::now();
    let mut runner = TestRunner::new(config());
    let kinds = prop::sample::select(
        &[
            ("apps", "Deployment"),
            ("batch", "Job"),
            ("", "Pod"),
            ("", "ConfigMap"),
        ][..],
    );
    runner
        .run(
            &(rules(), object(), kinds),
            |(rules, object, (group, kind))| {
                let (values, errors) =
                    collect(&rules, group, "v1", kind, &object, Some(MAX_JSON_RAW));
                let error = joined(&errors);
                let mut names = std::collections::BTreeSet::new();
                for v in &values {
                    prop_assert!(names.insert(v.name.clone()), "{} reported twice", v.name);
                    let fv = &v.field_value;
                    match fv.type_ {
                        ValueType::Integer => prop_assert!(fv.integer.is_some()),
                        ValueType::String => prop_assert!(fv.string.is_some()),
                        ValueType::Boolean => prop_assert!(fv.boolean.is_some()),
                        ValueType::JsonRaw => prop_assert!(
                            fv.json_raw
                                .as_ref()
                                .is_some_and(|r| r.len() <= MAX_JSON_RAW),
                            "raw value over the limit"
                        ),
                        _ => return Err(TestCaseError::fail(format!("unexpected type {fv:?}"))),
                    }
                }
                if let Some(e) = &error {
                    prop_assert!(!e.trim().is_empty());
                }
                // A JSONPaths rule whose path is not reported and did not error found nothing, so
                // every bad path must be named in the error.
                for rule in &rules {
                    if rule.type_ != FeedbackType::JsonPaths {
                        continue;
                    }
                    for p in &rule.json_paths {
                        if p.version
                            .as_deref()
                            .is_some_and(|v| !v.is_empty() && v != "v1")
                        {
                            prop_assert!(
                                error.as_deref().is_some_and(|e| e.contains(&p.name)),
                                "the version mismatch of {} is not reported",
                                p.name
                            );
                        }
                    }
                }
                Ok(())
            },
        )
        .unwrap();
    eprintln!(
        "feedback paths: {} cases in {:.1?}",
        runner.config().cases,
        started.elapsed()
    );
}
