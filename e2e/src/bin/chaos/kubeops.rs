//! Small helpers over the API: dynamic APIs for the objects works name, condition reads, and the
//! fingerprint of the writes the agent made to an object.

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use work_api::ManifestWork;

use crate::workload::ObjRef;

/// Field manager of the driver's own writes (excluded from the agent's writes).
pub const DRIVER_MANAGER: &str = "chaos-driver";

/// Managers whose writes are not the agent's: the driver and the spoke's controllers.
const NOT_AGENT: &[&str] = &[DRIVER_MANAGER, "kube-controller-manager"];

/// The API resource of an object.
pub fn resource(obj: &ObjRef) -> ApiResource {
    let gvk = GroupVersionKind::gvk(&obj.group, &obj.version, &obj.kind);
    ApiResource::from_gvk_with_plural(&gvk, &obj.plural)
}

/// The namespaced API of an object's kind.
pub fn api(client: &Client, obj: &ObjRef) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), &obj.namespace, &resource(obj))
}

/// The cluster-wide API of a kind.
pub fn api_all(
    client: &Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

/// The reference of a spoke object as the driver names it.
pub fn obj_ref(
    obj: &DynamicObject,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> ObjRef {
    ObjRef {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        namespace: obj.metadata.namespace.clone().unwrap_or_default(),
        name: obj.metadata.name.clone().unwrap_or_default(),
    }
}

/// Every write to the object's main resource by a manager other than the driver and the spoke's
/// controllers, with its time: it changes exactly when the agent (or another writer) changes the
/// object.
pub fn agent_fingerprint(obj: &DynamicObject) -> String {
    let entries: Vec<String> = obj
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.subresource.as_deref().unwrap_or("").is_empty())
        .filter(|e| !NOT_AGENT.contains(&e.manager.as_deref().unwrap_or("")))
        .map(|e| {
            format!(
                "{}/{}/{}/{}",
                e.manager.as_deref().unwrap_or(""),
                e.operation.as_deref().unwrap_or(""),
                e.time.as_ref().map(|t| t.0.as_second()).unwrap_or(0),
                e.fields_v1
                    .as_ref()
                    .map(|f| f.0.to_string())
                    .unwrap_or_default()
            )
        })
        .collect();
    entries.join(";")
}

/// A work-level condition's status and `lastTransitionTime` (Unix seconds).
pub fn condition(work: &ManifestWork, type_: &str) -> Option<(String, i64, Option<i64>)> {
    work.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                c.status.clone(),
                c.last_transition_time.0.as_second(),
                c.observed_generation,
            )
        })
}

/// Whether a work-level condition is True.
pub fn is_true(work: &ManifestWork, type_: &str) -> bool {
    condition(work, type_).is_some_and(|(s, _, _)| s == "True")
}
