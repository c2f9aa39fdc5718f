//! Pure shaping of manifests into request bodies, and the "is this update a no-op" decision.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::ApplyError;
use crate::owner::merge_owner_references;
use work_semantics::SERVER_METADATA;

/// Kind of the owners the agent writes (AppliedManifestWork).
const APPLIED_MANIFEST_WORK_KIND: &str = "AppliedManifestWork";

/// Lowercase hex SHA-256 (first 32 digits) of a JSON value with object keys sorted, so the hash
/// does not depend on key order.
pub fn content_hash(value: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(value, &mut canonical);
    let digest = hex::encode(Sha256::digest(canonical.as_bytes()));
    digest[..32].to_string()
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, &Value> = map.iter().collect();
            out.push('{');
            for (i, (k, v)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The manifest with server-populated metadata removed, the namespace cleared for cluster-scoped
/// kinds, and `labels` added.
pub(crate) fn clean_manifest(
    manifest: &Value,
    namespaced: bool,
    labels: &BTreeMap<String, String>,
) -> Value {
    let mut body = manifest.clone();
    remove_null_creation_timestamps(&mut body);
    let meta = metadata_mut(&mut body);
    for key in SERVER_METADATA {
        meta.remove(*key);
    }
    if !namespaced {
        meta.remove("namespace");
    }
    if !labels.is_empty() {
        let map = string_map_mut(meta, "labels");
        for (k, v) in labels {
            map.insert(k.clone(), Value::String(v.clone()));
        }
    }
    body
}

/// Removes `creationTimestamp: null` from every nested `metadata` (a pod template's, as Go
/// clients serialise typed objects): sent in an apply, the server records the field as owned by
/// the applier, and two managers sending it conflict over a field neither sets.
fn remove_null_creation_timestamps(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(meta)) = map.get_mut("metadata")
                && meta.get("creationTimestamp").is_some_and(Value::is_null)
            {
                meta.remove("creationTimestamp");
            }
            map.values_mut().for_each(remove_null_creation_timestamps);
        }
        Value::Array(items) => items.iter_mut().for_each(remove_null_creation_timestamps),
        _ => {}
    }
}

/// The body to create an object with: the cleaned manifest, our ownerReference added to any the
/// manifest has.
pub(crate) fn create_body(
    manifest: &Value,
    namespaced: bool,
    labels: &BTreeMap<String, String>,
    owner: Option<&OwnerReference>,
) -> Result<Value, ApplyError> {
    let mut body = clean_manifest(manifest, namespaced, labels);
    let meta = metadata_mut(&mut body);
    if let Some(owner) = owner {
        let existing = owner_references_of_meta(meta)?;
        set_owner_references(meta, &merge_owner_references(&existing, owner))?;
    }
    Ok(body)
}

/// An update of a live object under the Update strategy.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct UpdatePlan {
    /// The body to replace the object with.
    pub body: Value,
    /// The fields the manifest sets (see [`applied_fields`]), to remember as written.
    pub fields: Vec<String>,
    /// Whether the body leaves out fields `live` has that an earlier write set and this manifest
    /// no longer does (then the update is needed even when every manifest field matches).
    pub drops: bool,
}

/// The update of `live` under the Update strategy: the live object with the manifest laid over it
/// (objects merged key by key, lists and scalars replaced), minus the fields of `previous` (the
/// fields an earlier write set, as JSON pointers) this manifest no longer sets; labels,
/// annotations and ownerReferences of others are kept, finalizers are the live object's (the
/// manifest's are set at creation only); the live resourceVersion gives optimistic locking.
///
/// Starting from the live object keeps what the server generated or defaulted (a Job's selector
/// and template labels, a Service's clusterIP): a PUT without them is refused or changes them.
pub(crate) fn update_body(
    manifest: &Value,
    live: &Value,
    namespaced: bool,
    labels: &BTreeMap<String, String>,
    owner: Option<&OwnerReference>,
    previous: &[String],
) -> Result<UpdatePlan, ApplyError> {
    let mut ours = clean_manifest(manifest, namespaced, labels);
    let fields = applied_fields(&ours);
    let mut body = live.clone();
    let live_meta = live.get("metadata").and_then(Value::as_object);
    {
        let meta = metadata_mut(&mut body);
        for key in SERVER_METADATA {
            if *key != "resourceVersion" {
                meta.remove(*key);
            }
        }
    }
    let mut drops = false;
    for pointer in previous.iter().filter(|p| fields.binary_search(p).is_err()) {
        drops |= remove_pointer(&mut body, pointer);
    }

    // Lists of metadata are merged, not replaced by the overlay.
    let mut refs = match live_meta {
        Some(m) => owner_references_of_meta(m)?,
        None => Vec::new(),
    };
    let ours_meta = metadata_mut(&mut ours);
    for r in owner_references_of_meta(ours_meta)? {
        refs = merge_owner_references(&refs, &r);
    }
    if let Some(owner) = owner {
        refs = merge_owner_references(&refs, owner);
    }
    // Finalizers are the manifest's at creation only; an update keeps the live ones as they are,
    // as upstream's Update strategy does. Whoever removes a finalizer on the spoke (a controller
    // that finished its cleanup, a user unblocking a deletion) is not undone: restoring it would
    // be a write racing that actor, and it would block the object's deletion for good.
    let finalizers: Vec<Value> = live_meta
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    ours_meta.remove("finalizers");
    ours_meta.remove("ownerReferences");

    overlay(&mut body, &ours);
    let meta = metadata_mut(&mut body);
    set_owner_references(meta, &refs)?;
    if finalizers.is_empty() {
        meta.remove("finalizers");
    } else {
        meta.insert("finalizers".into(), Value::Array(finalizers));
    }
    Ok(UpdatePlan {
        body,
        fields,
        drops,
    })
}

/// Lays `top` over `base` as a JSON merge patch (RFC 7386): objects merge key by key, a `null`
/// removes the key, anything else replaces.
fn overlay(base: &mut Value, top: &Value) {
    json_patch::merge(base, top);
}

/// JSON pointers of every object key a cleaned manifest sets (descending into objects, not into
/// lists, which are replaced whole), leaving out identity, status and metadata other than labels
/// and annotations.
pub(crate) fn applied_fields(manifest: &Value) -> Vec<String> {
    fn walk(value: &Value, prefix: &str, out: &mut Vec<String>) {
        if let Value::Object(map) = value {
            for (k, v) in map {
                let pointer = format!("{prefix}/{}", escape_pointer(k));
                out.push(pointer.clone());
                walk(v, &pointer, out);
            }
        }
    }
    let mut out = Vec::new();
    let Some(obj) = manifest.as_object() else {
        return out;
    };
    for (k, v) in obj {
        match k.as_str() {
            "apiVersion" | "kind" | "status" => {}
            "metadata" => {
                for key in ["labels", "annotations"] {
                    if let Some(map) = v.get(key) {
                        walk(map, &format!("/metadata/{key}"), &mut out);
                    }
                }
            }
            _ => {
                let pointer = format!("/{}", escape_pointer(k));
                out.push(pointer.clone());
                walk(v, &pointer, &mut out);
            }
        }
    }
    out.sort();
    out
}

/// A key as one token of an RFC 6901 JSON pointer (`~` as `~0`, `/` as `~1`).
pub(crate) fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Removes the object key at an RFC 6901 pointer; whether it was there.
fn remove_pointer(doc: &mut Value, pointer: &str) -> bool {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return false;
    };
    let unescape = |t: &str| t.replace("~1", "/").replace("~0", "~");
    let parent = if parent.is_empty() {
        Some(doc)
    } else {
        doc.pointer_mut(parent)
    };
    match parent {
        Some(Value::Object(map)) => map.remove(&unescape(last)).is_some(),
        _ => false,
    }
}

/// Whether replacing `live` with `desired` would change nothing we care about: every field of
/// `desired` (bar status and server-populated metadata) is present in `live` with an equal value.
/// Fields only in `live` (server defaults, other controllers' additions) are ignored; numbers
/// compare by value (`1` equals `1.0`); a `null` in `desired` matches an absent field.
pub fn is_noop_update(desired: &Value, live: &Value) -> bool {
    let (Some(desired), Some(live)) = (desired.as_object(), live.as_object()) else {
        return false;
    };
    desired.iter().all(|(key, value)| match key.as_str() {
        "status" => true,
        "metadata" => {
            let empty = Map::new();
            let live_meta = live
                .get("metadata")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            match value.as_object() {
                Some(meta) => meta
                    .iter()
                    .filter(|(k, _)| !SERVER_METADATA.contains(&k.as_str()))
                    .all(|(k, v)| contained_field(v, live_meta.get(k))),
                None => value.is_null(),
            }
        }
        _ => contained_field(value, live.get(key)),
    })
}

fn contained_field(desired: &Value, live: Option<&Value>) -> bool {
    match live {
        Some(live) => contained(desired, live),
        None => desired.is_null(),
    }
}

fn contained(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d.iter().all(|(k, v)| contained_field(v, l.get(k))),
        (Value::Array(d), Value::Array(l)) => {
            d.len() == l.len() && d.iter().zip(l).all(|(d, l)| contained(d, l))
        }
        (Value::Number(d), Value::Number(l)) => numbers_equal(d, l),
        (d, l) => d == l,
    }
}

fn numbers_equal(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    if let (Some(a), Some(b)) = (a.as_i64(), b.as_i64()) {
        return a == b;
    }
    if let (Some(a), Some(b)) = (a.as_u64(), b.as_u64()) {
        return a == b;
    }
    match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// The ownerReferences of an object (empty when it has none).
pub(crate) fn owner_references_of(object: &Value) -> Result<Vec<OwnerReference>, ApplyError> {
    match object.get("metadata").and_then(Value::as_object) {
        Some(meta) => owner_references_of_meta(meta),
        None => Ok(Vec::new()),
    }
}

fn owner_references_of_meta(meta: &Map<String, Value>) -> Result<Vec<OwnerReference>, ApplyError> {
    match meta.get("ownerReferences") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(refs) => serde_json::from_value(refs.clone())
            .map_err(|e| ApplyError::InvalidManifest(format!("metadata.ownerReferences: {e}"))),
    }
}

fn set_owner_references(
    meta: &mut Map<String, Value>,
    refs: &[OwnerReference],
) -> Result<(), ApplyError> {
    if refs.is_empty() {
        meta.remove("ownerReferences");
        return Ok(());
    }
    let value = serde_json::to_value(refs)
        .map_err(|e| ApplyError::InvalidManifest(format!("metadata.ownerReferences: {e}")))?;
    meta.insert("ownerReferences".into(), value);
    Ok(())
}

/// Puts the ownerReferences a server-side apply patch must carry: the manifest's own, those of
/// every AppliedManifestWork already on the live object (two works sharing an object apply with
/// the same field manager; leaving the other's entry out would make the server drop it), and
/// `owner`. Written in the apply itself, so no second write (and no second manager) is needed.
pub(crate) fn set_apply_owner_references(
    patch: &mut Value,
    live: Option<&Value>,
    owner: Option<&OwnerReference>,
) -> Result<(), ApplyError> {
    let mut refs = owner_references_of(patch)?;
    if let Some(live) = live {
        for other in owner_references_of(live)? {
            if other.kind == APPLIED_MANIFEST_WORK_KIND && !refs.iter().any(|r| r.uid == other.uid)
            {
                refs.push(other);
            }
        }
    }
    if let Some(owner) = owner {
        refs = merge_owner_references(&refs, owner);
    }
    set_owner_references(metadata_mut(patch), &refs)
}

/// A JSON merge patch setting ownerReferences, conditional on `resource_version`.
pub(crate) fn owner_references_patch(
    refs: &[OwnerReference],
    resource_version: Option<&str>,
) -> Result<Value, ApplyError> {
    let refs = if refs.is_empty() {
        Value::Null
    } else {
        serde_json::to_value(refs)
            .map_err(|e| ApplyError::InvalidManifest(format!("metadata.ownerReferences: {e}")))?
    };
    Ok(json!({"metadata": {"resourceVersion": resource_version, "ownerReferences": refs}}))
}

/// A string field of `metadata` (uid, resourceVersion, ...), if set.
pub(crate) fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// An annotation of an object, if set.
pub(crate) fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// Sets one annotation on a request body.
pub(crate) fn set_annotation(body: &mut Value, key: &str, value: &str) {
    string_map_mut(metadata_mut(body), "annotations")
        .insert(key.into(), Value::String(value.into()));
}

/// `metadata` as a map, created (or replaced when not an object; `ManifestId::of` rejects those).
pub(crate) fn metadata_mut(body: &mut Value) -> &mut Map<String, Value> {
    if !body.is_object() {
        *body = Value::Object(Map::new());
    }
    let Value::Object(obj) = body else {
        unreachable!("just made an object")
    };
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    match meta {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

/// A string-map field of `metadata` (labels, annotations), created when missing.
pub(crate) fn string_map_mut<'a>(
    meta: &'a mut Map<String, Value>,
    key: &str,
) -> &'a mut Map<String, Value> {
    let entry = meta.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    match entry {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn owner(uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "work.open-cluster-management.io/v1".into(),
            kind: "AppliedManifestWork".into(),
            name: format!("amw-{uid}"),
            uid: uid.into(),
            controller: Some(false),
            block_owner_deletion: Some(false),
        }
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
        })
    }

    /// What the API server returns for `deployment()` after a create: defaults and server metadata.
    fn live_deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
                "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"app": "web", "other": "x"},
                "annotations": {"deployment.kubernetes.io/revision": "1"},
                "managedFields": [{"manager": "work-agent"}]
            },
            "spec": {
                "replicas": 2, "progressDeadlineSeconds": 600,
                "template": {"spec": {"containers": [
                    {"name": "c", "image": "nginx", "imagePullPolicy": "Always", "terminationMessagePath": "/dev/termination-log"}
                ], "restartPolicy": "Always"}}
            },
            "status": {"replicas": 2}
        })
    }

    #[test]
    fn update_body_keeps_server_generated_fields_and_removes_dropped_ones() {
        let job = |extra: Value| {
            let mut m = json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "j", "namespace": "ns", "labels": {"keep": "1"}},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
            overlay(&mut m, &extra);
            m
        };
        let previous =
            job(json!({"spec": {"parallelism": 2}, "metadata": {"labels": {"old": "x"}}}));
        let live = job(json!({
            "metadata": {"uid": "u", "resourceVersion": "5", "managedFields": [{}],
                         "labels": {"old": "x", "server": "y"}},
            "spec": {"parallelism": 2, "selector": {"matchLabels": {"controller-uid": "u"}},
                     "template": {"metadata": {"labels": {"controller-uid": "u"}}}}
        }));
        let previous = applied_fields(&clean_manifest(&previous, true, &BTreeMap::new()));

        let plan = update_body(
            &job(json!({})),
            &live,
            true,
            &BTreeMap::new(),
            None,
            &previous,
        );
        let Ok(plan) = plan else { panic!("{plan:?}") };
        assert!(plan.drops);
        let body = plan.body;
        assert_eq!(
            body["spec"]["selector"],
            json!({"matchLabels": {"controller-uid": "u"}})
        );
        assert_eq!(
            body["spec"]["template"]["metadata"]["labels"],
            json!({"controller-uid": "u"})
        );
        assert!(
            body["spec"].get("parallelism").is_none(),
            "dropped by the manifest"
        );
        assert_eq!(
            body["metadata"]["labels"],
            json!({"keep": "1", "server": "y"})
        );
        assert_eq!(body["metadata"]["resourceVersion"], json!("5"));
        assert!(body["metadata"].get("managedFields").is_none());
        assert!(
            body["metadata"].get("annotations").is_none(),
            "nothing of ours"
        );
        assert!(
            plan.fields.contains(&"/spec/template".to_string())
                && !plan.fields.iter().any(|f| f.contains("parallelism")),
            "{:?}",
            plan.fields
        );
    }

    #[test]
    fn applied_fields_cover_object_keys_but_not_identity_status_or_list_items() {
        let m = json!({"apiVersion": "v1", "kind": "X", "status": {"a": 1},
                       "metadata": {"name": "n", "labels": {"a/b": "1"}},
                       "spec": {"list": [{"x": 1}], "m": {"k~": 1}}});
        assert_eq!(
            applied_fields(&m),
            [
                "/metadata/labels/a~1b",
                "/spec",
                "/spec/list",
                "/spec/m",
                "/spec/m/k~0"
            ]
        );
    }

    #[test]
    fn overlay_merges_objects_and_replaces_the_rest() {
        let mut base = json!({"a": {"b": 1, "c": 2}, "l": [1, 2], "s": "x", "gone": 1});
        overlay(
            &mut base,
            &json!({"a": {"c": 3}, "l": [3], "s": {"o": 1}, "gone": null}),
        );
        assert_eq!(
            base,
            json!({"a": {"b": 1, "c": 3}, "l": [3], "s": {"o": 1}})
        );
    }

    #[test]
    fn content_hash_ignores_key_order_but_not_values() {
        let a: Value =
            serde_json::from_str(r#"{"a":1,"b":{"c":[1,2],"d":"x"}}"#).unwrap_or_default();
        let b: Value =
            serde_json::from_str(r#"{"b":{"d":"x","c":[1,2]},"a":1}"#).unwrap_or_default();
        let c: Value =
            serde_json::from_str(r#"{"b":{"d":"x","c":[2,1]},"a":1}"#).unwrap_or_default();
        assert_eq!(content_hash(&a), content_hash(&b));
        assert_ne!(content_hash(&a), content_hash(&c));
        assert_eq!(content_hash(&a).len(), 32);
    }

    #[test]
    fn clean_manifest_strips_server_fields_and_adds_labels() {
        let mut m = deployment();
        m["metadata"]["resourceVersion"] = json!("7");
        m["metadata"]["uid"] = json!("u");
        m["metadata"]["creationTimestamp"] = Value::Null;
        let body = clean_manifest(&m, true, &labels(&[("agent", "a1")]));
        let meta = &body["metadata"];
        assert!(meta.get("resourceVersion").is_none());
        assert!(meta.get("uid").is_none());
        assert!(meta.get("creationTimestamp").is_none());
        assert_eq!(meta["labels"], json!({"app": "web", "agent": "a1"}));
        assert_eq!(meta["namespace"], json!("ns"));
    }

    #[test]
    fn clean_manifest_drops_null_creation_timestamps_at_any_depth() {
        let m = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "creationTimestamp": null},
            "spec": {"template": {"metadata": {"creationTimestamp": null, "labels": {"a": "b"}},
                     "spec": {"volumes": [{"ephemeral": {"volumeClaimTemplate": {"metadata": {"creationTimestamp": null}}}}]}},
                     "keep": {"creationTimestamp": null}}});
        let body = clean_manifest(&m, true, &BTreeMap::new());
        assert_eq!(
            body["spec"]["template"]["metadata"],
            json!({"labels": {"a": "b"}})
        );
        assert_eq!(
            body["spec"]["template"]["spec"]["volumes"][0]["ephemeral"]["volumeClaimTemplate"],
            json!({"metadata": {}})
        );
        assert_eq!(
            body["spec"]["keep"],
            json!({"creationTimestamp": null}),
            "only in metadata"
        );
    }

    #[test]
    fn clean_manifest_drops_namespace_of_cluster_scoped_kinds() {
        let m = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "namespace": "x"}});
        let body = clean_manifest(&m, false, &BTreeMap::new());
        assert!(body["metadata"].get("namespace").is_none());
        assert!(body["metadata"].get("labels").is_none());
    }

    #[test]
    fn create_body_merges_owner_and_adds_nothing_else() {
        let mut m = deployment();
        m["metadata"]["ownerReferences"] = json!([owner("theirs")]);
        let body = create_body(&m, true, &BTreeMap::new(), Some(&owner("ours"))).ok();
        let body = body.unwrap_or_default();
        let refs = owner_references_of(&body).unwrap_or_default();
        assert_eq!(refs, vec![owner("theirs"), owner("ours")]);
        assert!(body["metadata"].get("annotations").is_none());
    }

    #[test]
    fn an_update_keeps_the_live_finalizers_whatever_the_manifest_says() {
        let mut manifest = deployment();
        manifest["metadata"]["finalizers"] = json!(["ours/finalizer"]);
        let created = create_body(&manifest, true, &BTreeMap::new(), None).unwrap_or_default();
        assert_eq!(created["metadata"]["finalizers"], json!(["ours/finalizer"]));

        let mut live = live_deployment();
        let removed = update_body(&manifest, &live, true, &BTreeMap::new(), None, &[])
            .map(|p| p.body)
            .unwrap_or_default();
        assert!(
            removed["metadata"].get("finalizers").is_none(),
            "a finalizer removed on the spoke is not put back"
        );
        live["metadata"]["finalizers"] = json!(["theirs/finalizer"]);
        let kept = update_body(&manifest, &live, true, &BTreeMap::new(), None, &[])
            .map(|p| p.body)
            .unwrap_or_default();
        assert_eq!(kept["metadata"]["finalizers"], json!(["theirs/finalizer"]));
    }

    #[test]
    fn update_body_merges_metadata_and_carries_resource_version() {
        let mut live = live_deployment();
        live["metadata"]["ownerReferences"] = json!([owner("other-work")]);
        live["metadata"]["finalizers"] = json!(["keep.me/finalizer"]);
        let body = update_body(
            &deployment(),
            &live,
            true,
            &labels(&[("agent", "a1")]),
            Some(&owner("ours")),
            &[],
        )
        .map(|p| p.body)
        .unwrap_or_default();
        let meta = &body["metadata"];
        assert_eq!(meta["resourceVersion"], json!("42"));
        assert_eq!(
            meta["labels"],
            json!({"app": "web", "other": "x", "agent": "a1"})
        );
        assert_eq!(
            meta["annotations"]["deployment.kubernetes.io/revision"],
            json!("1")
        );
        assert_eq!(meta["annotations"].as_object().map(|a| a.len()), Some(1));
        assert_eq!(meta["finalizers"], json!(["keep.me/finalizer"]));
        let refs = owner_references_of(&body).unwrap_or_default();
        assert_eq!(refs, vec![owner("other-work"), owner("ours")]);
        assert!(meta.get("uid").is_none());
        assert!(meta.get("managedFields").is_none());
        assert_eq!(body["status"], json!({"replicas": 2}));
    }

    #[test]
    fn noop_when_live_has_everything_plus_server_defaults() {
        let mut live = live_deployment();
        live["metadata"]["labels"]["agent"] = json!("a1");
        let previous = applied_fields(&clean_manifest(
            &deployment(),
            true,
            &labels(&[("agent", "a1")]),
        ));
        let plan = update_body(
            &deployment(),
            &live,
            true,
            &labels(&[("agent", "a1")]),
            None,
            &previous,
        );
        let Ok(plan) = plan else { panic!("{plan:?}") };
        assert!(!plan.drops);
        assert!(is_noop_update(&plan.body, &live));
    }

    #[test]
    fn not_noop_when_a_field_differs_or_is_missing_or_was_dropped() {
        let live = live_deployment();
        let body = |manifest: &Value,
                    labels: &BTreeMap<String, String>,
                    owner: Option<&OwnerReference>| {
            update_body(
                manifest,
                &live,
                true,
                labels,
                owner,
                &applied_fields(&clean_manifest(&deployment(), true, &BTreeMap::new())),
            )
        };
        let Ok(plan) = body(&deployment(), &BTreeMap::new(), None) else {
            panic!("update_body failed")
        };
        assert!(!plan.drops && is_noop_update(&plan.body, &live));
        let desired = plan.body;

        let mut drifted = live.clone();
        drifted["spec"]["replicas"] = json!(5);
        assert!(
            !is_noop_update(&desired, &drifted),
            "spoke drift of a manifest field"
        );

        let mut image = live.clone();
        image["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
        assert!(
            !is_noop_update(&desired, &image),
            "change inside a list item"
        );

        let mut extra = live.clone();
        if let Some(containers) = extra["spec"]["template"]["spec"]["containers"].as_array_mut() {
            containers.push(json!({"name": "sidecar", "image": "x"}));
        }
        assert!(!is_noop_update(&desired, &extra), "list length differs");

        let mut fewer = deployment();
        fewer["spec"].as_object_mut().map(|s| s.remove("replicas"));
        let dropped = body(&fewer, &BTreeMap::new(), None).map(|p| p.drops);
        assert_eq!(dropped.ok(), Some(true), "the manifest dropped replicas");

        let with_owner = body(&deployment(), &BTreeMap::new(), Some(&owner("ours")))
            .map(|p| p.body)
            .unwrap_or_default();
        assert!(
            !is_noop_update(&with_owner, &live),
            "our ownerReference is missing"
        );

        let new_label = body(&deployment(), &labels(&[("agent", "a1")]), None)
            .map(|p| p.body)
            .unwrap_or_default();
        assert!(!is_noop_update(&new_label, &live), "agent label is missing");
    }

    #[test]
    fn noop_ignores_status_and_server_metadata_and_compares_numbers_by_value() {
        let desired = json!({"metadata": {"name": "a", "resourceVersion": "1", "uid": "x"}, "spec": {"n": 1, "f": 2.0, "z": null}, "status": {"s": 1}});
        let live = json!({"metadata": {"name": "a", "resourceVersion": "9", "uid": "y"}, "spec": {"n": 1.0, "f": 2}, "status": {"s": 2}});
        assert!(is_noop_update(&desired, &live));
        let live_null = json!({"metadata": {"name": "a"}, "spec": {"n": 1, "f": 2, "z": 3}});
        assert!(
            !is_noop_update(&desired, &live_null),
            "null in desired does not match a set field"
        );
        assert!(!is_noop_update(&json!("x"), &live));
        assert!(
            !is_noop_update(&json!({"spec": {"n": "1"}}), &json!({"spec": {"n": 1}})),
            "types differ"
        );
    }

    #[test]
    fn owner_references_patch_is_conditional_and_null_when_empty() {
        let p = owner_references_patch(&[owner("a")], Some("5")).unwrap_or_default();
        assert_eq!(p["metadata"]["resourceVersion"], json!("5"));
        assert_eq!(p["metadata"]["ownerReferences"][0]["uid"], json!("a"));
        let p = owner_references_patch(&[], Some("5")).unwrap_or_default();
        assert!(p["metadata"]["ownerReferences"].is_null());
    }

    #[test]
    fn malformed_owner_references_give_an_error_not_a_panic() {
        let obj = json!({"metadata": {"ownerReferences": "nope"}});
        let err = owner_references_of(&obj)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("metadata.ownerReferences"), "{err}");
    }
}
