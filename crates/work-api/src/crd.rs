//! CustomResourceDefinitions generated from the types, finished by hand where the generator
//! cannot express what the API server needs (see [`crds`]).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;

use crate::{AppliedManifestWork, ManifestWork};

/// The CRDs of both kinds, as shipped in `deploy/crds/`.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        finish(ManifestWork::crd()),
        finish(AppliedManifestWork::crd()),
    ]
}

/// File name of a CRD in `deploy/crds/`, ordered so the hub CRD comes first.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    let order = if crd.spec.names.kind == "ManifestWork" {
        "00"
    } else {
        "01"
    };
    let name = crd.metadata.name.as_deref().unwrap_or("unnamed");
    format!("{order}_{name}.yaml")
}

/// Header of every generated CRD file.
pub const GENERATED_HEADER: &str = "# Generated from crates/work-api by `make crds` (work-agent crd --output-dir deploy/crds). Do not edit.\n";

/// One CRD as the YAML document written to `deploy/crds/`.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_norway::Error> {
    Ok(format!(
        "{GENERATED_HEADER}{}",
        serde_norway::to_string(crd)?
    ))
}

fn finish(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(props) = version.schema.as_mut() else {
            continue;
        };
        // Edit the schema as a JSON tree: easier than as typed props. Both conversions are of
        // values we generated, so a failure (never seen) leaves the schema as generated.
        let Some(mut tree) = props
            .open_api_v3_schema
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok())
        else {
            continue;
        };
        clean(&mut tree);
        set_rule_condition_default(&mut tree);
        if let Value::Object(root) = &mut tree {
            // Upstream does not require spec, and both specs decode a missing one as empty.
            root.remove("required");
        }
        if let Ok(finished) = serde_json::from_value(tree) {
            props.open_api_v3_schema = Some(finished);
        }
    }
    crd
}

/// Removes what the generator adds from serde but upstream does not have: zero-value defaults
/// (they would make the API server write `group: ""` into every stored object) and `null` in
/// enums of optional fields.
fn clean(node: &mut Value) {
    let Value::Object(map) = node else { return };
    if map.get("default").is_some_and(is_zero) {
        map.remove("default");
    }
    if let Some(Value::Array(values)) = map.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    for child in map.values_mut() {
        match child {
            Value::Object(_) => clean(child),
            Value::Array(items) => items.iter_mut().for_each(clean),
            _ => {}
        }
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// A list-map key must be required or defaulted; `condition` may be omitted on well-known rules,
/// so it defaults to "" (which the agent reads as `Complete`).
fn set_rule_condition_default(root: &mut Value) {
    let path = ["spec", "manifestConfigs", "conditionRules", "condition"];
    if let Some(Value::Object(condition)) = property(root, &path) {
        condition.insert("default".into(), Value::String(String::new()));
    }
}

/// The schema of a property, stepping through array items transparently.
fn property<'a>(mut node: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    for name in path {
        if node.get("type").and_then(Value::as_str) == Some("array") {
            node = node.get_mut("items")?;
        }
        node = node.get_mut("properties")?.get_mut(*name)?;
    }
    Some(node)
}
