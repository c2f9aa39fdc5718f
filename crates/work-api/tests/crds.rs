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
