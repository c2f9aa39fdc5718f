//! Small helpers over the API: dynamic APIs for the objects works name, condition reads, and the
//! fingerprint of the writes the agent made to an object.

use std::collections::BTreeMap;

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;
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

/// The writes to an object's main resource by managers other than the driver and the spoke's
/// controllers: per manager and operation, the time of its last write and the fields it owns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentFields(BTreeMap<String, (i64, Value)>);

impl AgentFields {
    /// Whether someone of these managers wrote the object after `before` was taken: an entry
    /// that is new, has a later time, or owns a field it did not own. Fields only taken away (a
    /// forced apply by the driver steals them, leaving the entry's time as it was) are no write.
    pub fn written_since(&self, before: &AgentFields) -> bool {
        self.0
            .iter()
            .any(|(who, (time, fields))| match before.0.get(who) {
                None => true,
                Some((was_time, was_fields)) => time != was_time || !within(fields, was_fields),
            })
    }
}

/// Whether every field of the fieldsV1 tree `inner` is also in `outer`.
fn within(inner: &Value, outer: &Value) -> bool {
    match (inner, outer) {
        (Value::Object(i), Value::Object(o)) => i
            .iter()
            .all(|(k, v)| o.get(k).is_some_and(|ov| within(v, ov))),
        (i, o) => i == o,
    }
}

/// [`AgentFields`] of an object.
pub fn agent_fingerprint(obj: &DynamicObject) -> AgentFields {
    AgentFields(
        obj.metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|e| e.subresource.as_deref().unwrap_or("").is_empty())
            .filter(|e| !NOT_AGENT.contains(&e.manager.as_deref().unwrap_or("")))
            .map(|e| {
                (
                    format!(
                        "{}/{}",
                        e.manager.as_deref().unwrap_or(""),
                        e.operation.as_deref().unwrap_or("")
                    ),
                    (
                        e.time.as_ref().map(|t| t.0.as_second()).unwrap_or(0),
                        e.fields_v1
                            .as_ref()
                            .map(|f| f.0.clone())
                            .unwrap_or(Value::Null),
                    ),
                )
            })
            .collect(),
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(entries: &[(&str, i64, Value)]) -> AgentFields {
        AgentFields(
            entries
                .iter()
                .map(|(w, t, f)| (w.to_string(), (*t, f.clone())))
                .collect(),
        )
    }

    #[test]
    fn a_field_taken_by_another_manager_is_no_write() {
        let labels = json!({"f:metadata": {"f:labels": {"f:gen": {}, "f:run": {}}}});
        let fewer = json!({"f:metadata": {"f:labels": {"f:run": {}}}});
        let before = fields(&[("work-agent/Apply", 100, labels.clone())]);
        assert!(!fields(&[("work-agent/Apply", 100, fewer.clone())]).written_since(&before));
        assert!(!fields(&[]).written_since(&before), "every field taken");
        assert!(!before.written_since(&before));
        // A later write, a field gained, or a new writer is a write.
        assert!(fields(&[("work-agent/Apply", 101, fewer)]).written_since(&before));
        let more = json!({"f:metadata": {"f:labels": {"f:gen": {}, "f:run": {}, "f:x": {}}}});
        assert!(fields(&[("work-agent/Apply", 100, more)]).written_since(&before));
        assert!(
            fields(&[
                ("work-agent/Apply", 100, labels),
                ("other/Update", 90, json!({}))
            ])
            .written_since(&before)
        );
    }
}
