//! A JSON Schema for ManifestWork files, derived from the CRD's openAPIV3Schema, for YAML
//! editors (validation and completion). `status` is left open (agents write it). OpenAPI's `nullable` becomes a `null` type; objects
//! with declared properties reject unknown fields (which the API server would prune silently:
//! in an editor that is a typo); `metadata` gets the fields authors write.

use serde_json::{Map, Value, json};

/// Where the generated schema is committed, relative to the repository root.
pub const JSON_SCHEMA_PATH: &str = "deploy/schema/manifestwork.schema.json";

/// The JSON Schema (draft-07) of a ManifestWork document.
pub fn manifest_work_json_schema() -> Value {
    let crd = crate::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == "ManifestWork")
        .map(|c| serde_json::to_value(c).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    let mut schema = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    translate(&mut schema);
    if let Some(root) = schema.as_object_mut() {
        let properties = root
            .entry("properties")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(properties) = properties {
            properties.insert(
                "apiVersion".into(),
                json!({"type": "string", "enum": [format!("{}/{}", crate::GROUP, crate::VERSION)]}),
            );
            properties.insert(
                "kind".into(),
                json!({"type": "string", "enum": ["ManifestWork"]}),
            );
            properties.insert("metadata".into(), metadata_schema());
            // Written by the agents, not by authors: left open so pasted objects still validate.
            properties.insert(
                "status".into(),
                json!({"type": "object", "description": "Written by the work agent; not authored."}),
            );
        }
        root.insert(
            "required".into(),
            json!(["apiVersion", "kind", "metadata", "spec"]),
        );
        root.insert("additionalProperties".into(), json!(false));
        let mut head = Map::new();
        head.insert(
            "$schema".into(),
            json!("http://json-schema.org/draft-07/schema#"),
        );
        head.insert(
            "$id".into(),
            json!("https://work.open-cluster-management.io/manifestwork.schema.json"),
        );
        head.insert("title".into(), json!("ManifestWork"));
        head.extend(std::mem::take(root));
        *root = head;
    }
    schema
}

fn metadata_schema() -> Value {
    let string_map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    json!({
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "description": "Name of the ManifestWork."},
            "namespace": {"type": "string", "description": "The managed cluster's namespace on the hub."},
            "generateName": {"type": "string"},
            "generation": {"type": "integer"},
            "labels": string_map,
            "annotations": string_map,
            "finalizers": {"type": "array", "items": {"type": "string"}},
        }
    })
}

/// OpenAPI v3 (Kubernetes flavour) to JSON Schema, in place.
fn translate(node: &mut Value) {
    let Some(map) = node.as_object_mut() else {
        return;
    };
    if map.remove("nullable") == Some(Value::Bool(true))
        && let Some(Value::String(t)) = map.get("type").cloned()
    {
        map.insert("type".into(), json!([t, "null"]));
    }
    if map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        map.insert("type".into(), json!(["integer", "string"]));
    }
    let preserve = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if map.contains_key("properties") && !preserve && !map.contains_key("additionalProperties") {
        map.insert("additionalProperties".into(), Value::Bool(false));
    }
    for (key, child) in map.iter_mut() {
        match key.as_str() {
            "properties" | "patternProperties" => {
                if let Some(props) = child.as_object_mut() {
                    props.values_mut().for_each(translate);
                }
            }
            "items" | "additionalProperties" | "not" => translate(child),
            "allOf" | "anyOf" | "oneOf" => {
                if let Some(items) = child.as_array_mut() {
                    items.iter_mut().for_each(translate);
                }
            }
            _ => {}
        }
    }
}

/// The schema as the committed file holds it (pretty JSON and a final newline).
pub fn manifest_work_json_schema_text() -> String {
    let text = serde_json::to_string_pretty(&manifest_work_json_schema()).unwrap_or_default();
    format!("{text}\n")
}
