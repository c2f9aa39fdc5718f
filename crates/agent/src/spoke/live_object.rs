//! An applied object as a watch event brings it: its identity as metadata (for the watch) and the
//! object as compact JSON text, packed ([`crate::packed`]), which is what the agent's store keeps
//! ([`crate::spoke::object_store`]). A parsed `serde_json::Value` costs several times its text in
//! map nodes and small strings; the text is parsed only when a reconcile reads the object.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::ApiResource;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::packed::PackedJson;

/// The annotation `kubectl apply` keeps a whole copy of the object in; nothing here reads it.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The resource type of a store's objects, shared: kube-runtime's store keys each object with its
/// own copy of the type, and an [`ApiResource`] is five strings (four of them allocated) per
/// object; this is one pointer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SharedResource(Arc<ApiResource>);

impl SharedResource {
    /// Shares `resource`.
    pub fn new(resource: ApiResource) -> Self {
        Self(Arc::new(resource))
    }
}

impl std::ops::Deref for SharedResource {
    type Target = ApiResource;

    fn deref(&self) -> &ApiResource {
        &self.0
    }
}

/// A live object: name, namespace, uid and resourceVersion, and its JSON without `managedFields`
/// and `kubectl`'s last-applied copy.
#[derive(Clone, Debug)]
pub struct LiveObject {
    /// Name, namespace, uid and resourceVersion only.
    pub metadata: ObjectMeta,
    /// The object as JSON text, packed.
    json: PackedJson,
}

impl LiveObject {
    /// Keeps `object`, dropping what nothing reads; `None` when it is not a JSON object.
    pub fn from_value(mut object: Value) -> Option<Self> {
        let map = object.as_object_mut()?;
        let meta = map.get_mut("metadata").and_then(Value::as_object_mut);
        let text = |m: &serde_json::Map<String, Value>, key: &str| {
            m.get(key).and_then(Value::as_str).map(str::to_string)
        };
        let metadata = match meta {
            Some(meta) => {
                meta.remove("managedFields");
                if let Some(annotations) =
                    meta.get_mut("annotations").and_then(Value::as_object_mut)
                {
                    annotations.remove(LAST_APPLIED_ANNOTATION);
                }
                ObjectMeta {
                    name: text(meta, "name"),
                    namespace: text(meta, "namespace"),
                    uid: text(meta, "uid"),
                    resource_version: text(meta, "resourceVersion"),
                    ..ObjectMeta::default()
                }
            }
            None => ObjectMeta::default(),
        };
        let json = serde_json::to_string(&object).ok()?;
        Some(Self {
            metadata,
            json: PackedJson::pack(&json),
        })
    }

    /// The object's packed JSON, identity included.
    pub fn json(&self) -> &PackedJson {
        &self.json
    }

    /// The object as JSON, with the `apiVersion` and `kind` list items lack.
    pub fn to_value(&self, resource: &ApiResource) -> Option<Value> {
        object_value(&self.json, resource)
    }
}

/// An object kept as packed JSON, as JSON, with the `apiVersion` and `kind` list items lack.
pub fn object_value(json: &PackedJson, resource: &ApiResource) -> Option<Value> {
    let mut value: Value = serde_json::from_slice(&json.unpack().ok()?).ok()?;
    let map = value.as_object_mut()?;
    map.entry("apiVersion")
        .or_insert_with(|| Value::String(resource.api_version.clone()));
    map.entry("kind")
        .or_insert_with(|| Value::String(resource.kind.clone()));
    Some(value)
}

impl<'de> Deserialize<'de> for LiveObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::from_value(value).ok_or_else(|| serde::de::Error::custom("not a JSON object"))
    }
}

impl Resource for LiveObject {
    type DynamicType = SharedResource;
    type Scope = kube::core::DynamicResourceScope;

    fn kind(dt: &SharedResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &SharedResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &SharedResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &SharedResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &SharedResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn configmaps() -> ApiResource {
        ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        }
    }

    #[test]
    fn keeps_identity_and_content_but_not_managed_fields() {
        let object: LiveObject = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "labels": {"l": "v"},
                "annotations": {"keep": "1", LAST_APPLIED_ANNOTATION: "{\"big\": true}"},
                "managedFields": [{"manager": "x", "fieldsV1": {"f:data": {}}}]},
            "data": {"k": "v"}
        }))
        .expect("an object");
        assert_eq!(object.metadata.name.as_deref(), Some("a"));
        assert_eq!(object.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(object.metadata.resource_version.as_deref(), Some("7"));
        let value = object.to_value(&configmaps()).expect("parses");
        assert_eq!(value["kind"], "ConfigMap");
        assert_eq!(value["apiVersion"], "v1");
        assert_eq!(value["data"]["k"], "v");
        assert_eq!(value["metadata"]["labels"]["l"], "v");
        assert_eq!(value["metadata"]["annotations"], json!({"keep": "1"}));
        assert!(value["metadata"].get("managedFields").is_none());
        assert_eq!(value["metadata"]["uid"], "u1");
    }

    #[test]
    fn gives_back_the_object_it_was_given() {
        let original = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "creationTimestamp": "2026-11-27T05:00:00Z", "labels": {"l": "v"}},
            "data": {"k": "v"}
        });
        let object: LiveObject = serde_json::from_value(original.clone()).expect("an object");
        assert_eq!(object.to_value(&configmaps()), Some(original));
        let cluster_scoped = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "n"}});
        let object: LiveObject = serde_json::from_value(cluster_scoped.clone()).expect("an object");
        let namespaces = ApiResource {
            kind: "Namespace".into(),
            plural: "namespaces".into(),
            ..configmaps()
        };
        assert_eq!(object.to_value(&namespaces), Some(cluster_scoped));
        let no_metadata = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {}});
        let object: LiveObject = serde_json::from_value(no_metadata.clone()).expect("an object");
        assert_eq!(object.to_value(&configmaps()), Some(no_metadata));
    }

    #[test]
    fn a_non_object_is_an_error_not_a_panic() {
        assert!(serde_json::from_value::<LiveObject>(json!([1, 2])).is_err());
        assert!(serde_json::from_value::<LiveObject>(json!("text")).is_err());
    }
}
