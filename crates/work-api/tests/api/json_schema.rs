//! The JSON Schema for editors: committed file is current, it accepts every ManifestWork
//! fixture and rejects wrong types and unknown fields.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn committed_schema_matches_the_types() {
    let path = root().join(work_api::JSON_SCHEMA_PATH);
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `make crds`", path.display()));
    assert!(
        committed == work_api::manifest_work_json_schema_text(),
        "{} is stale; run `make crds` and commit the result",
        path.display()
    );
}

fn validator() -> jsonschema::Validator {
    jsonschema::validator_for(&work_api::manifest_work_json_schema()).expect("the schema compiles")
}

fn fixtures() -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    for sub in ["aliases", "seed002", "upstream"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(sub);
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, serde_norway::from_str(&text).unwrap()));
            }
        }
    }
    out
}

#[test]
fn every_fixture_is_accepted() {
    let v = validator();
    let fixtures = fixtures();
    assert!(fixtures.len() >= 10);
    for (path, doc) in fixtures {
        let errors: Vec<String> = v
            .iter_errors(&doc)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", path.display());
    }
}

#[test]
fn the_shipped_examples_are_accepted() {
    let v = validator();
    let dir = root().join("deploy/examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in serde_norway::Deserializer::from_str(&text) {
            let doc: Value = serde::Deserialize::deserialize(doc).unwrap();
            if doc["kind"] != "ManifestWork" {
                continue;
            }
            let errors: Vec<String> = v
                .iter_errors(&doc)
                .map(|e| format!("{} at {}", e, e.instance_path()))
                .collect();
            assert!(errors.is_empty(), "{}: {errors:?}", path.display());
            checked += 1;
        }
    }
    assert!(checked >= 4, "only {checked} examples");
}

fn minimal() -> Value {
    json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
           "metadata": {"name": "w", "namespace": "cluster1"},
           "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}]},
                    "manifestConfigs": [{"resourceIdentifier": {"group": "", "resource": "configmaps", "name": "c", "namespace": "default"},
                                          "conditionRules": [{"condition": "Ready", "type": "CEL", "celExpressions": ["true"]}]}]}})
}

#[test]
fn wrong_types_and_unknown_fields_are_rejected() {
    let v = validator();
    assert!(v.is_valid(&minimal()));
    let mut wrong = minimal();
    wrong["spec"]["deleteOption"] =
        json!({"propagationPolicy": "Orphan", "ttlSecondsAfterFinished": "ten"});
    assert!(!v.is_valid(&wrong), "a string TTL is accepted");
    let mut wrong = minimal();
    wrong["spec"]["manifestConfigs"][0]["conditionRules"][0]["type"] = json!("Celery");
    assert!(!v.is_valid(&wrong), "an unknown rule type is accepted");
    let mut typo = minimal();
    typo["spec"]["manifestConfigs"][0]["conditionRule"] = json!([]);
    assert!(!v.is_valid(&typo), "a misspelt field is accepted");
    let mut kind = minimal();
    kind["kind"] = json!("ManifestWorkReplicaSet");
    assert!(!v.is_valid(&kind));
}
