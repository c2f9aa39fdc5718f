//! ManifestWork fixtures: decoding, round trips, and acceptance by the upstream and our CRD schemas.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;
use work_api::{ConditionRuleType, ManifestWork};

fn fixture_dir(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(sub)
}

/// Every YAML file of a fixture directory, sorted, with its decoded JSON value.
fn fixtures(sub: &str) -> Vec<(String, Value)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixture_dir(sub))
        .unwrap_or_else(|e| panic!("reading fixtures/{sub}: {e}"))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("fixture is readable");
            let value: Value = serde_norway::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not YAML: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().into_owned(), value)
        })
        .collect()
}

fn open_api_schema(crd: &Value) -> Value {
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

fn upstream_schema() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/upstream-crds/0000_00_work.open-cluster-management.io_manifestworks.crd.yaml");
    let text = std::fs::read_to_string(path).expect("vendored upstream CRD");
    open_api_schema(&serde_norway::from_str(&text).expect("upstream CRD is YAML"))
}

fn our_schema() -> Value {
    let crd = work_api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == "ManifestWork")
        .expect("a ManifestWork CRD");
    open_api_schema(&serde_json::to_value(crd).expect("CRD serializes"))
}

fn schema_errors(schema: &Value, instance: &Value) -> Vec<String> {
    let validator = jsonschema::validator_for(schema).expect("schema compiles");
    validator
        .iter_errors(instance)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

fn round_trip(name: &str, value: &Value) -> ManifestWork {
    let first: ManifestWork = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{name}: does not decode: {e}"));
    let encoded = serde_json::to_value(&first).expect("encodes");
    let second: ManifestWork = serde_json::from_value(encoded)
        .unwrap_or_else(|e| panic!("{name}: re-encoded form does not decode: {e}"));
    assert_eq!(
        first, second,
        "{name}: decode -> encode -> decode changed it"
    );
    first
}

#[test]
fn there_are_at_least_fifteen_upstream_fixtures() {
    assert!(fixtures("upstream").len() >= 15);
}

#[test]
fn every_fixture_round_trips() {
    for sub in ["upstream", "aliases", "seed002"] {
        for (name, value) in fixtures(sub) {
            round_trip(&format!("{sub}/{name}"), &value);
        }
    }
}

#[test]
fn upstream_fixtures_are_accepted_by_both_schemas() {
    let (upstream, ours) = (upstream_schema(), our_schema());
    for (name, value) in fixtures("upstream") {
        let errors = schema_errors(&upstream, &value);
        assert!(errors.is_empty(), "upstream CRD rejects {name}: {errors:?}");
        let errors = schema_errors(&ours, &value);
        assert!(errors.is_empty(), "our CRD rejects {name}: {errors:?}");
    }
}

#[test]
fn alias_fixtures_are_accepted_by_ours_and_rejected_by_upstream() {
    let (upstream, ours) = (upstream_schema(), our_schema());
    let aliases = fixtures("aliases");
    assert!(aliases.len() >= 3);
    for (name, value) in aliases {
        let errors = schema_errors(&ours, &value);
        assert!(errors.is_empty(), "our CRD rejects {name}: {errors:?}");
        assert!(
            !schema_errors(&upstream, &value).is_empty(),
            "upstream CRD accepts alias fixture {name}: it proves nothing about the aliases"
        );
    }
}

#[test]
fn seed_examples_decode_and_are_accepted_by_our_schema() {
    let ours = our_schema();
    let seeds = fixtures("seed002");
    assert_eq!(seeds.len(), 5);
    for (name, value) in seeds {
        let work = round_trip(&name, &value);
        assert_eq!(work.metadata.namespace.as_deref(), Some("cluster1"));
        let errors = schema_errors(&ours, &value);
        assert!(errors.is_empty(), "our CRD rejects seed {name}: {errors:?}");
    }
}

#[test]
fn aliases_decode_to_the_canonical_forms() {
    let all = fixtures("aliases");
    let get = |n: &str| {
        let (_, v) = all
            .iter()
            .find(|(name, _)| name.starts_with(n))
            .expect("fixture");
        serde_json::from_value::<ManifestWork>(v.clone()).expect("decodes")
    };
    let rule = &get("01").spec.manifest_configs[0].condition_rules[0];
    assert_eq!(rule.type_, ConditionRuleType::WellKnownConditions);
    assert_eq!(rule.condition_type(), "Complete");

    let rule = &get("02").spec.manifest_configs[0].condition_rules[0];
    assert_eq!(rule.condition, "");
    assert_eq!(rule.condition_type(), "Complete");

    let rule = &get("03").spec.manifest_configs[0].condition_rules[0];
    let sources: Vec<&str> = rule
        .cel_expressions
        .iter()
        .map(|e| e.expression.as_str())
        .collect();
    assert_eq!(
        sources,
        ["has(object.status)", "object.status.?ready.orValue(false)"]
    );
}

/// Property paths (`spec.deleteOption.propagationPolicy`) of a schema, with the enum values of
/// each leaf, skipping the insides of embedded raw objects.
fn schema_paths(node: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let Some(values) = node.get("enum").and_then(Value::as_array) {
        for v in values {
            out.insert(format!("{prefix}={}", v.as_str().unwrap_or_default()));
        }
    }
    if node.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true)) {
        return;
    }
    if let Some(items) = node.get("items") {
        schema_paths(items, prefix, out);
    }
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            out.insert(path.clone());
            schema_paths(child, &path, out);
        }
    }
}

/// The same paths as they occur in an instance, guided by the schema.
fn instance_paths(schema: &Value, value: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    if schema.get("enum").is_some()
        && let Some(s) = value.as_str()
    {
        out.insert(format!("{prefix}={s}"));
    }
    if schema.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Array(items) => {
            for item in items {
                instance_paths(&schema["items"], item, prefix, out);
            }
        }
        Value::Object(map) => {
            for (name, child) in map {
                let Some(child_schema) = schema.get("properties").and_then(|p| p.get(name)) else {
                    continue;
                };
                let path = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}.{name}")
                };
                out.insert(path.clone());
                instance_paths(child_schema, child, &path, out);
            }
        }
        _ => {}
    }
}

#[test]
fn fixtures_together_use_every_field_and_enum_value() {
    let ours = our_schema();
    let mut wanted = BTreeSet::new();
    for top in ["spec", "status"] {
        schema_paths(&ours["properties"][top], top, &mut wanted);
    }
    let mut used = BTreeSet::new();
    for sub in ["upstream", "aliases"] {
        for (_, value) in fixtures(sub) {
            instance_paths(&ours, &value, "", &mut used);
        }
    }
    // Guards the walker itself: the schema has about a hundred paths and enum values.
    assert!(
        wanted.len() >= 90,
        "schema walk found only {}",
        wanted.len()
    );
    let missing: Vec<&String> = wanted.difference(&used).collect();
    assert!(missing.is_empty(), "no fixture uses: {missing:?}");
}
