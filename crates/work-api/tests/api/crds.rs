//! The generated CRDs: committed files are current, and the schema carries the admission rules.

use std::path::Path;

use serde_json::Value;

fn deploy_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds")
}

#[test]
fn committed_crds_match_the_types() {
    let crds = work_api::crds();
    assert_eq!(crds.len(), 2);
    for crd in &crds {
        let path = deploy_dir().join(work_api::crd_file_name(crd));
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run `make crds`", path.display()));
        let fresh = work_api::crd_yaml(crd).expect("renders");
        assert!(
            committed == fresh,
            "{} is stale; run `make crds` and commit the result",
            path.display()
        );
    }
    let files = std::fs::read_dir(deploy_dir())
        .expect("deploy/crds exists")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "yaml"))
        })
        .count();
    assert_eq!(
        files,
        crds.len(),
        "deploy/crds holds files no type generates"
    );
}

fn manifest_work_schema() -> Value {
    let crd = work_api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == "ManifestWork")
        .unwrap();
    serde_json::to_value(crd).unwrap()["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn admission_rules_are_in_the_schema() {
    let schema = manifest_work_schema();
    let spec = &schema["properties"]["spec"]["properties"];
    let configs = &spec["manifestConfigs"];
    assert_eq!(configs["maxItems"], work_api::MAX_MANIFEST_CONFIGS);
    let rules = &configs["items"]["properties"]["conditionRules"];
    assert_eq!(rules["maxItems"], work_api::MAX_CONDITION_RULES);
    assert_eq!(rules["x-kubernetes-list-type"], "map");
    assert_eq!(
        rules["x-kubernetes-validations"][0]["rule"],
        work_api::RULE_UNIQUE_CONDITIONS
    );
    let rule = &rules["items"];
    assert_eq!(
        rule["properties"]["celExpressions"]["maxItems"],
        work_api::MAX_CEL_EXPRESSIONS
    );
    assert_eq!(
        rule["x-kubernetes-validations"][0]["rule"],
        work_api::RULE_CEL_NEEDS_CONDITION
    );
    // A list-map key must be defaulted when it is optional.
    assert_eq!(rule["properties"]["condition"]["default"], "");
    assert_eq!(
        rule["properties"]["type"]["enum"],
        serde_json::json!(["WellKnownConditions", "WellKnownCompletions", "CEL"])
    );
    let ttl = &spec["deleteOption"]["properties"]["ttlSecondsAfterFinished"];
    assert_eq!(ttl["minimum"].as_f64(), Some(0.0));
    let ssa = &configs["items"]["properties"]["updateStrategy"]["properties"]["serverSideApply"];
    assert_eq!(ssa["properties"]["fieldManager"]["pattern"], "^work-agent");
}

fn walk(node: &Value, path: &str, check: &mut dyn FnMut(&str, &serde_json::Map<String, Value>)) {
    if let Value::Object(map) = node {
        check(path, map);
        for (k, v) in map {
            walk(v, &format!("{path}/{k}"), check);
        }
    } else if let Value::Array(items) = node {
        for (i, v) in items.iter().enumerate() {
            walk(v, &format!("{path}/{i}"), check);
        }
    }
}

#[test]
fn schema_is_structural_enough_for_the_api_server() {
    for crd in work_api::crds() {
        let tree = serde_json::to_value(&crd).unwrap();
        let schema = &tree["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        walk(schema, "", &mut |path, map| {
            // The API server forbids these in CRD schemas.
            for banned in ["$ref", "$schema", "definitions", "$defs", "oneOf", "anyOf"] {
                assert!(!map.contains_key(banned), "{path} has {banned}");
            }
            if let Some(Value::Array(values)) = map.get("enum") {
                assert!(
                    values.iter().all(|v| !v.is_null()),
                    "{path} has null in enum"
                );
            }
            // Zero defaults would be written into every stored object.
            if let Some(d) = map.get("default") {
                let list_key = path.ends_with("conditionRules/items/properties/condition");
                assert!(list_key || d != "", "{path} has an empty default");
            }
        });
    }
}

fn upstream(file: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/upstream-crds")
        .join(file);
    let text = std::fs::read_to_string(path).expect("vendored upstream CRD");
    let crd: Value = serde_norway::from_str(&text).expect("YAML");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

fn ours(kind: &str) -> Value {
    let crd = work_api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap();
    serde_json::to_value(crd).unwrap()["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// Restrictions we add on purpose (task and semantics §1), by schema path and keyword.
const DELIBERATE: &[(&str, &str)] = &[
    ("spec.deleteOption.ttlSecondsAfterFinished", "minimum"),
    ("spec.manifestConfigs", "maxItems"),
    ("spec.manifestConfigs.conditionRules", "maxItems"),
    (
        "spec.manifestConfigs.conditionRules.celExpressions",
        "maxItems",
    ),
    ("spec.manifestConfigs.conditionRules.condition", "maxLength"),
];

/// Everything an upstream node accepts, ours accepts: same type, no extra required field, a
/// superset of enum values, no new pattern or bound unless listed in [`DELIBERATE`].
fn assert_accepts_at_least(up: &Value, ours: &Value, path: &str, problems: &mut Vec<String>) {
    let untyped_open = ours.get("type").is_none()
        && ours.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if !untyped_open && up.get("type") != ours.get("type") {
        problems.push(format!(
            "{path}: type {:?} vs ours {:?}",
            up.get("type"),
            ours.get("type")
        ));
    }
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let up_required = strings(up.get("required"));
    for r in strings(ours.get("required")) {
        if !up_required.contains(&r) {
            problems.push(format!("{path}: we require {r}, upstream does not"));
        }
    }
    if ours.get("enum").is_some() {
        let our_enum = strings(ours.get("enum"));
        for v in strings(up.get("enum")) {
            if !our_enum.contains(&v) {
                problems.push(format!("{path}: enum lacks {v}"));
            }
        }
        if up.get("enum").is_none() {
            problems.push(format!("{path}: enum added"));
        }
    }
    for key in [
        "pattern",
        "maxLength",
        "minLength",
        "maxItems",
        "minimum",
        "maximum",
    ] {
        if let Some(v) = ours.get(key)
            && up.get(key) != Some(v)
            && !DELIBERATE.contains(&(path, key))
        {
            problems.push(format!("{path}: {key} {v} (upstream {:?})", up.get(key)));
        }
    }
    if let (Some(up_props), Some(our_props)) = (
        up.get("properties").and_then(Value::as_object),
        ours.get("properties").and_then(Value::as_object),
    ) {
        for (name, up_child) in up_props {
            let child_path = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            match our_props.get(name) {
                Some(our_child) => {
                    assert_accepts_at_least(up_child, our_child, &child_path, problems)
                }
                // Standard fields the API server handles itself.
                None if ["apiVersion", "kind", "metadata"].contains(&name.as_str()) => {}
                None => problems.push(format!("{child_path}: missing (pruned on our CRD)")),
            }
        }
    }
    if let (Some(up_items), Some(our_items)) = (up.get("items"), ours.get("items")) {
        assert_accepts_at_least(up_items, our_items, path, problems);
    }
}

#[test]
fn our_schemas_accept_whatever_upstream_accepts() {
    for (file, kind) in [
        (
            "0000_00_work.open-cluster-management.io_manifestworks.crd.yaml",
            "ManifestWork",
        ),
        (
            "0000_01_work.open-cluster-management.io_appliedmanifestworks.crd.yaml",
            "AppliedManifestWork",
        ),
    ] {
        let mut problems = Vec::new();
        assert_accepts_at_least(&upstream(file), &ours(kind), "", &mut problems);
        assert!(problems.is_empty(), "{kind}: {problems:#?}");
    }
}
