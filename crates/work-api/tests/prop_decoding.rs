//! Hostile input to ManifestWork decoding: random JSON and YAML shapes built from the real field
//! names (so wrong types land on real fields), huge and deep values. Decoding must return a value
//! or an error with a message, never panic; what decodes must encode again and decode to the same
//! thing (unknown enum values and odd `celExpressions` items are written back as they came).
//!
//! Cases per property: `PROPTEST_CASES` (default [`DEFAULT_CASES`]).

#[path = "common/prop_config.rs"]
mod prop_config;

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use serde_json::{Map, Value, json};
use work_api::{AppliedManifestWork, ManifestWork};

/// Cases per property when `PROPTEST_CASES` is unset (`make prop` runs 100,000).
const DEFAULT_CASES: u32 = 5_000;

fn config() -> proptest::test_runner::Config {
    prop_config::config(DEFAULT_CASES)
}

/// Field names of the API (camelCase, as on the wire), plus a few that are not.
const KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "namespace",
    "uid",
    "finalizers",
    "spec",
    "workload",
    "manifests",
    "deleteOption",
    "propagationPolicy",
    "selectivelyOrphans",
    "orphaningRules",
    "ttlSecondsAfterFinished",
    "manifestConfigs",
    "resourceIdentifier",
    "group",
    "resource",
    "feedbackRules",
    "type",
    "jsonPaths",
    "path",
    "version",
    "updateStrategy",
    "serverSideApply",
    "force",
    "fieldManager",
    "ignoreFields",
    "jsonPointers",
    "condition",
    "conditionRules",
    "celExpressions",
    "expression",
    "message",
    "messageExpression",
    "executor",
    "subject",
    "serviceAccount",
    "status",
    "conditions",
    "resourceStatus",
    "resourceMeta",
    "ordinal",
    "statusFeedback",
    "values",
    "fieldValue",
    "integer",
    "string",
    "boolean",
    "jsonRaw",
    "feedbackScrapeType",
    "hubHash",
    "agentID",
    "manifestWorkName",
    "appliedResources",
    "evictionStartTime",
    "future",
    "",
];

/// Enum spellings, valid and not.
const WORDS: &[&str] = &[
    "Orphan",
    "Foreground",
    "SelectivelyOrphan",
    "Shred",
    "ServerSideApply",
    "Update",
    "CreateOnly",
    "ReadOnly",
    "CEL",
    "WellKnownConditions",
    "WellKnownCompletions",
    "WellKnownStatus",
    "JSONPaths",
    "Complete",
    "Available",
    "Applied",
    "OnSpokePresent",
    "OnSpokeChange",
    "Poll",
    "Watch",
    "ServiceAccount",
    "true",
    "v1",
    "apps",
    "batch",
    "ConfigMap",
    "Job",
    "",
    "\u{0}",
    "\u{1F600}",
    "a\"b",
    "-1",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => Just(Value::Null),
        4 => any::<bool>().prop_map(Value::Bool),
        4 => any::<i64>().prop_map(Value::from),
        4 => any::<u64>().prop_map(Value::from),
        4 => any::<f64>()
            .prop_filter("JSON numbers are finite", |f| f.is_finite())
            .prop_map(Value::from),
        8 => prop::sample::select(WORDS).prop_map(|w| Value::from(w.to_string())),
        8 => ".{0,40}".prop_map(Value::String),
        // A huge string, as a hostile hub may send (rare: it dominates the run time).
        1 => (1usize..100_000).prop_map(|n| Value::String("x".repeat(n))),
    ]
}

/// Any JSON value whose object keys are mostly API field names.
fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(6, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        4 => prop::sample::select(KEYS).prop_map(str::to_string),
                        1 => ".{0,12}",
                    ],
                    inner
                ),
                0..8
            )
            .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A well-formed ManifestWork with some of its fields replaced by random values.
fn mutated_work() -> impl Strategy<Value = Value> {
    let base = json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {"name": "w", "namespace": "c1"},
        "spec": {
            "workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                                         "metadata": {"name": "x", "namespace": "y"}}]},
            "deleteOption": {"propagationPolicy": "Foreground", "ttlSecondsAfterFinished": 5},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "", "resource": "configmaps", "name": "x",
                                       "namespace": "y"},
                "updateStrategy": {"type": "ServerSideApply",
                                   "serverSideApply": {"force": true, "fieldManager": "m"}},
                "feedbackRules": [{"type": "JSONPaths",
                                   "jsonPaths": [{"name": "n", "path": ".data"}]}],
                "conditionRules": [{"condition": "Complete", "type": "CEL",
                                    "celExpressions": ["true"]}]
            }],
            "executor": {"subject": {"type": "ServiceAccount",
                                     "serviceAccount": {"name": "sa", "namespace": "y"}}}
        }
    });
    let paths: Vec<Vec<&'static str>> = vec![
        vec!["spec"],
        vec!["spec", "workload"],
        vec!["spec", "workload", "manifests"],
        vec!["spec", "deleteOption"],
        vec!["spec", "deleteOption", "propagationPolicy"],
        vec!["spec", "deleteOption", "ttlSecondsAfterFinished"],
        vec!["spec", "manifestConfigs"],
        vec!["spec", "executor"],
        vec!["metadata"],
        vec!["status"],
    ];
    let config_fields: Vec<&'static str> = vec![
        "resourceIdentifier",
        "updateStrategy",
        "feedbackRules",
        "conditionRules",
    ];
    (
        prop::collection::vec((prop::sample::select(paths), value()), 0..4),
        prop::collection::vec((prop::sample::select(config_fields), value()), 0..3),
    )
        .prop_map(move |(top, inner)| {
            let mut work = base.clone();
            for (field, v) in inner {
                if let Some(c) = work.pointer_mut("/spec/manifestConfigs/0")
                    && let Some(o) = c.as_object_mut()
                {
                    o.insert(field.to_string(), v);
                }
            }
            for (path, v) in top {
                set(&mut work, &path, v);
            }
            work
        })
}

fn set(root: &mut Value, path: &[&str], v: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = root;
    for p in parents {
        match node.get_mut(*p) {
            Some(n) => node = n,
            None => return,
        }
    }
    if let Some(o) = node.as_object_mut() {
        o.insert(last.to_string(), v);
    }
}

/// Deepest YAML nesting tried: the YAML parser's time grows with the square of the depth (40 ms
/// at 1,000 levels, minutes at 100,000 in a debug build) before its recursion limit refuses the
/// document. YAML is read only by the CLI (`eval`, `lint`); the agent decodes JSON from the API.
const YAML_DEPTH_TESTED: usize = 10_000;

/// A value nested `depth` levels (arrays or objects), as a hostile hub may send.
fn deep(depth: usize, objects: bool) -> String {
    let (open, close) = if objects {
        ("{\"a\":", "}")
    } else {
        ("[", "]")
    };
    format!("{}1{}", open.repeat(depth), close.repeat(depth))
}

/// Decoding returned either a work that round-trips, or an error that says something.
fn check_decoded<E: std::fmt::Display>(
    decoded: Result<ManifestWork, E>,
) -> Result<(), TestCaseError> {
    match decoded {
        Ok(work) => {
            let encoded = serde_json::to_value(&work)
                .map_err(|e| TestCaseError::fail(format!("a decoded work does not encode: {e}")))?;
            let again: ManifestWork = serde_json::from_value(encoded.clone()).map_err(|e| {
                TestCaseError::fail(format!("an encoded work does not decode: {e}: {encoded}"))
            })?;
            let encoded_again = serde_json::to_value(&again).map_err(|e| {
                TestCaseError::fail(format!("a re-decoded work does not encode: {e}"))
            })?;
            prop_assert_eq!(
                encoded,
                encoded_again,
                "decode(encode(work)) changed the work"
            );
        }
        Err(e) => prop_assert!(
            !e.to_string().trim().is_empty(),
            "an error without a message"
        ),
    }
    Ok(())
}

#[test]
fn mutated_works_decode_or_fail_with_a_message() {
    let mut runner = TestRunner::new(config());
    runner
        .run(&mutated_work(), |work| {
            check_decoded(serde_json::from_value::<ManifestWork>(work.clone()))?;
            let text =
                serde_json::to_string(&work).map_err(|e| TestCaseError::fail(e.to_string()))?;
            check_decoded(serde_json::from_str::<ManifestWork>(&text))?;
            Ok(())
        })
        .unwrap();
}

#[test]
fn random_json_decodes_or_fails_with_a_message() {
    let mut runner = TestRunner::new(config());
    runner
        .run(&value(), |v| {
            check_decoded(serde_json::from_value::<ManifestWork>(v.clone()))?;
            if let Err(e) = serde_json::from_value::<AppliedManifestWork>(v) {
                prop_assert!(!e.to_string().is_empty());
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn random_yaml_decodes_or_fails_with_a_message() {
    let mut runner = TestRunner::new(config());
    // YAML is slower to render and parse; the shapes are the same as the JSON property's.
    runner
        .run(&mutated_work(), |work| {
            let yaml = serde_norway::to_string(&work)
                .map_err(|e| TestCaseError::fail(format!("rendering YAML: {e}")))?;
            check_decoded(serde_norway::from_str::<ManifestWork>(&yaml))
        })
        .unwrap();
}

#[test]
fn random_text_as_yaml_or_json_never_panics() {
    let mut runner = TestRunner::new(config());
    runner
        .run(&"(?s).{0,300}", |text| {
            if let Err(e) = serde_norway::from_str::<ManifestWork>(&text) {
                prop_assert!(!e.to_string().is_empty());
            }
            if let Err(e) = serde_json::from_str::<ManifestWork>(&text) {
                prop_assert!(!e.to_string().is_empty());
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn deeply_nested_values_fail_with_a_message_not_a_stack_overflow() {
    for depth in [100, 127, 128, 129, 1_000, 10_000, 100_000] {
        for objects in [false, true] {
            let value = deep(depth, objects);
            for at in ["manifests", "spec"] {
                let text = if at == "manifests" {
                    format!(
                        r#"{{"metadata":{{"name":"w"}},"spec":{{"workload":{{"manifests":[{value}]}}}}}}"#
                    )
                } else {
                    format!(r#"{{"metadata":{{"name":"w"}},"spec":{value}}}"#)
                };
                let t0 = std::time::Instant::now();
                // Decoded (a lenient field may skip the value) or refused with a message; a
                // stack overflow would abort the whole test binary.
                if let Err(e) = serde_json::from_str::<ManifestWork>(&text) {
                    assert!(!e.to_string().is_empty());
                }
                let json_took = t0.elapsed();
                // JSON is YAML; the YAML decoder has its own recursion limit.
                let t0 = std::time::Instant::now();
                if depth > YAML_DEPTH_TESTED {
                    continue;
                }
                match serde_norway::from_str::<ManifestWork>(&text) {
                    Ok(_) => {}
                    Err(e) => assert!(!e.to_string().is_empty()),
                }
                eprintln!(
                    "depth {depth} ({}) in {at}: JSON {json_took:.1?}, YAML {:.1?}",
                    if objects { "objects" } else { "arrays" },
                    t0.elapsed()
                );
            }
        }
    }
}

#[test]
fn a_work_with_the_largest_lists_decodes() {
    let configs: Vec<Value> = (0..work_api::MAX_MANIFEST_CONFIGS)
        .map(|i| {
            json!({
                "resourceIdentifier": {"resource": "configmaps", "name": format!("c{i}"),
                                       "namespace": "ns"},
                "conditionRules": (0..work_api::MAX_CONDITION_RULES).map(|r| json!({
                    "condition": format!("C{r}"), "type": "CEL",
                    "celExpressions": [format!("object.data.k{r} == 'v'")]
                })).collect::<Vec<_>>()
            })
        })
        .collect();
    let work = json!({"metadata": {"name": "big"}, "spec": {"manifestConfigs": configs}});
    let decoded: ManifestWork = serde_json::from_value(work).unwrap();
    assert_eq!(decoded.spec.manifest_configs.len(), 256);
    assert!(
        decoded
            .spec
            .manifest_configs
            .iter()
            .all(|c| c.condition_rules.len() == 64)
    );
}

#[test]
fn a_manifest_nested_past_the_limit_is_refused() {
    // A manifest (free-form JSON) is decoded into a tree: 1,000 levels must be refused, not
    // recursed into.
    let text = format!(
        r#"{{"metadata":{{"name":"w"}},"spec":{{"workload":{{"manifests":[{}]}}}}}}"#,
        deep(1_000, true)
    );
    let err = serde_json::from_str::<ManifestWork>(&text)
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("recursion"), "{err}");
}
