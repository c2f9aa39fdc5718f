//! Reading `metadata.managedFields`: the API server's record of which fields each field manager
//! set. The agent reads its own entries there instead of keeping records on the objects it
//! applies: what its server-side applies own (to tell whether a manifest dropped a field), and
//! what its updates changed (to find fields an earlier manifest set).
//!
//! A `fieldsV1` tree has keys `f:<field>` (an object field), `k:<json>` (a list item by its
//! keys), `v:<json>` (a set item), `i:<n>` (a list item by index) and `.` (the item itself).

use serde_json::{Map, Value};

use crate::manifest::escape_pointer;

/// The merged `fieldsV1` trees of the entries of `manager` with `operation` (`Apply` or
/// `Update`) on the object itself (not on a subresource such as `status`); None when there is
/// no such entry.
pub(crate) fn owned_fields(live: &Value, manager: &str, operation: &str) -> Option<Value> {
    let entries = live
        .get("metadata")?
        .get("managedFields")?
        .as_array()?
        .iter()
        .filter(|e| {
            e.get("manager").and_then(Value::as_str) == Some(manager)
                && e.get("operation").and_then(Value::as_str) == Some(operation)
                && e.get("subresource")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
        })
        .filter_map(|e| e.get("fieldsV1"));
    let mut merged: Option<Value> = None;
    for fields in entries {
        match &mut merged {
            None => merged = Some(fields.clone()),
            Some(m) => json_patch::merge(m, fields),
        }
    }
    merged
}

/// JSON pointers of the object fields in `fields`, descending into objects but not into list
/// items (lists are replaced whole by an update), as `manifest::applied_fields` lists a
/// manifest's; only the fields a manifest can set (labels, annotations, and everything outside
/// `metadata` but `status`, `apiVersion` and `kind`).
pub(crate) fn object_pointers(fields: &Value) -> Vec<String> {
    fn walk(fields: &Map<String, Value>, prefix: &str, out: &mut Vec<String>) {
        for (key, sub) in fields {
            let Some(name) = key.strip_prefix("f:") else {
                continue;
            };
            let pointer = format!("{prefix}/{}", escape_pointer(name));
            out.push(pointer.clone());
            if let Some(sub) = sub.as_object() {
                walk(sub, &pointer, out);
            }
        }
    }
    let mut out = Vec::new();
    let Some(top) = fields.as_object() else {
        return out;
    };
    for (key, sub) in top {
        let Some(sub_map) = sub.as_object() else {
            continue;
        };
        match key.as_str() {
            "f:apiVersion" | "f:kind" | "f:status" | "." => {}
            "f:metadata" => {
                for part in ["labels", "annotations"] {
                    if let Some(Value::Object(m)) = sub_map.get(&format!("f:{part}")) {
                        walk(m, &format!("/metadata/{part}"), &mut out);
                    }
                }
            }
            _ => {
                let single = Map::from_iter([(key.clone(), sub.clone())]);
                walk(&single, "", &mut out);
            }
        }
    }
    out.sort();
    out
}

/// Whether every field in `fields` is set in `doc`: what a server-side apply of `doc` needs so
/// that it drops nothing the manager owns. Unknown key forms count as not set (the apply is then
/// sent, which is always correct). A list item key field missing from `doc`'s item matches (the
/// server fills in defaulted keys, such as a port's `protocol`).
pub(crate) fn covers(doc: &Value, fields: &Value) -> bool {
    let Some(fields) = fields.as_object() else {
        return true;
    };
    fields.iter().all(|(key, sub)| {
        if key == "." {
            return true;
        }
        let child = if let Some(name) = key.strip_prefix("f:") {
            doc.as_object()
                .and_then(|m| m.get(name))
                .filter(|v| !v.is_null())
        } else if let Some(json) = key.strip_prefix("k:") {
            let Ok(Value::Object(item_keys)) = serde_json::from_str::<Value>(json) else {
                return false;
            };
            doc.as_array().and_then(|items| {
                items.iter().find(|item| {
                    item_keys
                        .iter()
                        .all(|(k, v)| item.get(k).is_none_or(|iv| same(iv, v)))
                })
            })
        } else if let Some(json) = key.strip_prefix("v:") {
            let Ok(value) = serde_json::from_str::<Value>(json) else {
                return false;
            };
            doc.as_array()
                .and_then(|items| items.iter().find(|item| same(item, &value)))
        } else if let Some(index) = key.strip_prefix("i:") {
            let Ok(index) = index.parse::<usize>() else {
                return false;
            };
            doc.as_array().and_then(|items| items.get(index))
        } else {
            None
        };
        match child {
            Some(child) => covers(child, sub),
            None => false,
        }
    })
}

/// JSON equality with numbers compared by value (`80` equals `80.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn live() -> Value {
        json!({"metadata": {"name": "d", "managedFields": [
            {"manager": "work-agent", "operation": "Apply", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}, "f:ownerReferences": {"k:{\"uid\":\"u1\"}": {}}},
                          "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                              "k:{\"name\":\"c\"}": {".": {}, "f:name": {}, "f:image": {},
                                  "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}}}}},
            {"manager": "work-agent", "operation": "Update", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:annotations": {"f:x/y": {}}, "f:ownerReferences": {}}}},
            {"manager": "work-agent", "operation": "Update", "subresource": "status", "fieldsV1": {"f:status": {"f:x": {}}}},
            {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:data": {"f:c": {}}}}
        ]}})
    }

    fn patch(replicas: Option<i64>) -> Value {
        let mut p = json!({"metadata": {"labels": {"app": "a"}, "ownerReferences": [{"uid": "u1", "name": "amw"}]},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]}}}});
        if let Some(r) = replicas {
            p["spec"]["replicas"] = json!(r);
        }
        p
    }

    #[test]
    fn entries_are_found_by_manager_operation_and_main_resource() {
        let live = live();
        let update = owned_fields(&live, "work-agent", "Update").unwrap_or_default();
        assert!(
            update.get("f:status").is_none(),
            "status subresource left out"
        );
        assert_eq!(
            object_pointers(&update),
            ["/data", "/data/a", "/data/b", "/metadata/annotations/x~1y"]
        );
        assert!(owned_fields(&live, "other", "Apply").is_none());
        assert!(owned_fields(&json!({"metadata": {}}), "work-agent", "Apply").is_none());
    }

    #[test]
    fn a_patch_covers_what_its_manager_owns_unless_it_dropped_a_field() {
        let live = live();
        let apply = owned_fields(&live, "work-agent", "Apply").unwrap_or_default();
        assert!(covers(&patch(Some(1)), &apply));
        assert!(!covers(&patch(None), &apply), "replicas dropped");
        let mut renamed = patch(Some(1));
        renamed["spec"]["template"]["spec"]["containers"][0]["name"] = json!("d");
        assert!(!covers(&renamed, &apply), "list item dropped");
        let mut no_port = patch(Some(1));
        no_port["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([]);
        assert!(!covers(&no_port, &apply));
        assert!(covers(&json!({}), &json!({})));
        assert!(
            !covers(&patch(Some(1)), &json!({"x:odd": {}})),
            "unknown forms are not covered"
        );
        assert!(covers(
            &json!({"f": ["a"]}),
            &json!({"f:f": {"v:\"a\"": {}}})
        ));
        assert!(!covers(
            &json!({"f": ["b"]}),
            &json!({"f:f": {"v:\"a\"": {}}})
        ));
        assert!(covers(&json!({"f": [1, 2]}), &json!({"f:f": {"i:1": {}}})));
    }

    #[test]
    fn object_pointers_skip_identity_status_and_list_items() {
        let fields = json!({"f:apiVersion": {}, "f:kind": {}, "f:status": {"f:a": {}},
            "f:metadata": {"f:name": {}, "f:labels": {"f:a": {}}},
            "f:spec": {"f:list": {"k:{\"name\":\"x\"}": {"f:name": {}}}, "f:m": {"f:k~": {}}}});
        assert_eq!(
            object_pointers(&fields),
            [
                "/metadata/labels/a",
                "/spec",
                "/spec/list",
                "/spec/m",
                "/spec/m/k~0"
            ]
        );
    }
}
