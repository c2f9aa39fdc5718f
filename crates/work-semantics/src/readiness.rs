//! What a manifest needs of another manifest of the same work before it is applied, with no
//! configuration: a custom resource needs its CustomResourceDefinition Established, an object in
//! a namespace needs that Namespace Active, an object of an aggregated API needs the APIService
//! that serves it Available. Read from the manifests alone (no discovery), so a waiting manifest
//! costs no request; the order the manifests go in follows from it ([`order`]).

use std::borrow::Borrow;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use serde_json::Value;

use crate::ManifestId;

/// What a manifest waits for in the object of another manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Need {
    /// A CustomResourceDefinition `Established` (and its kind served).
    Established,
    /// A Namespace in phase `Active`.
    Active,
    /// An APIService `Available`.
    Available,
    /// A declared gate ([`crate::gates`]): the manifest's condition `condition` (as the agent
    /// computes it) with status `status`.
    Condition {
        /// The condition type.
        condition: String,
        /// `True`, `False` or `Unknown`.
        status: String,
    },
}

impl Need {
    /// What a waiting manifest's status says after "to ": "be Established", "have Complete True
    /// (gate)".
    pub fn words(&self) -> String {
        match self {
            Need::Established => "be Established".to_string(),
            Need::Active => "be Active".to_string(),
            Need::Available => "be Available".to_string(),
            Need::Condition { condition, status } => format!("have {condition} {status} (gate)"),
        }
    }

    /// Whether the need is a declared gate rather than a built-in one.
    pub fn is_declared(&self) -> bool {
        matches!(self, Need::Condition { .. })
    }
}

/// One manifest's dependency on another of the same work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependency {
    /// The index in the work of the manifest depended on.
    pub on: usize,
    /// What its object must be.
    pub need: Need,
}

/// What a dependency is, for the others to find it by.
enum Provides {
    /// A CRD: its group and kind.
    Kind(String, String),
    /// A Namespace: its name.
    Namespace(String),
    /// An APIService: the group and version it serves.
    GroupVersion(String, String),
}

fn string_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

fn provides(id: &ManifestId, manifest: &Value) -> Option<Provides> {
    match (id.group.as_str(), id.kind.as_str()) {
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            let group = string_at(manifest, "/spec/group")?;
            let kind = string_at(manifest, "/spec/names/kind")?;
            Some(Provides::Kind(group.to_string(), kind.to_string()))
        }
        ("", "Namespace") => Some(Provides::Namespace(id.name.clone())),
        ("apiregistration.k8s.io", "APIService") => {
            let group = string_at(manifest, "/spec/group").unwrap_or_default();
            let version = string_at(manifest, "/spec/version")?;
            Some(Provides::GroupVersion(
                group.to_string(),
                version.to_string(),
            ))
        }
        _ => None,
    }
}

/// Each manifest's dependencies on the others, by index (a manifest that cannot be identified
/// has none, and nothing depends on it). A manifest never depends on itself.
pub fn dependencies<M: Borrow<Value>>(manifests: &[M]) -> Vec<Vec<Dependency>> {
    let ids: Vec<Option<ManifestId>> = manifests
        .iter()
        .map(|m| ManifestId::of(m.borrow()).ok())
        .collect();
    // Who provides what, found by key: a work of thousands of manifests is not compared pairwise.
    let mut kinds: HashMap<(String, String), Vec<usize>> = HashMap::new();
    let mut namespaces: HashMap<String, Vec<usize>> = HashMap::new();
    let mut group_versions: HashMap<(String, String), Vec<usize>> = HashMap::new();
    for (i, (id, m)) in ids.iter().zip(manifests).enumerate() {
        match id.as_ref().and_then(|id| provides(id, m.borrow())) {
            Some(Provides::Kind(group, kind)) => kinds.entry((group, kind)).or_default().push(i),
            Some(Provides::Namespace(name)) => namespaces.entry(name).or_default().push(i),
            Some(Provides::GroupVersion(group, version)) => {
                group_versions.entry((group, version)).or_default().push(i);
            }
            None => {}
        }
    }
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            let Some(id) = id else {
                return Vec::new();
            };
            let is_namespace = id.group.is_empty() && id.kind == "Namespace";
            let mut deps: Vec<Dependency> = Vec::new();
            let mut add = |found: Option<&Vec<usize>>, need: Need| {
                let found = found.map(Vec::as_slice).unwrap_or_default();
                deps.extend(found.iter().filter(|&&on| on != i).map(|&on| Dependency {
                    on,
                    need: need.clone(),
                }));
            };
            add(
                kinds.get(&(id.group.clone(), id.kind.clone())),
                Need::Established,
            );
            if !id.namespace.is_empty() && !is_namespace {
                add(namespaces.get(&id.namespace), Need::Active);
            }
            add(
                group_versions.get(&(id.group.clone(), id.version.clone())),
                Need::Available,
            );
            deps
        })
        .collect()
}

/// The resource (plural) of a custom resource and whether it is namespaced, read from the
/// manifest of the CustomResourceDefinition it depends on: what discovery will say once the CRD
/// is Established, known before (`None` when the CRD does not say, or does not serve `version`).
pub fn crd_resource(crd: &Value, version: &str) -> Option<(String, bool)> {
    let plural = string_at(crd, "/spec/names/plural").filter(|p| !p.is_empty())?;
    let serves = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .is_some_and(|versions| {
            versions
                .iter()
                .any(|v| v.get("name").and_then(Value::as_str) == Some(version))
        });
    if !serves {
        return None;
    }
    let namespaced = string_at(crd, "/spec/scope") != Some("Cluster");
    Some((plural.to_string(), namespaced))
}

/// Whether `object`, the live object of a manifest depended on, is what `need` asks. A declared
/// gate is not read from the object (the agent's conditions of the manifest decide it): false.
pub fn is_ready(need: &Need, object: &Value) -> bool {
    match need {
        Need::Established => condition_is_true(object, "Established"),
        Need::Active => string_at(object, "/status/phase") == Some("Active"),
        Need::Available => condition_is_true(object, "Available"),
        Need::Condition { .. } => false,
    }
}

fn condition_is_true(object: &Value, type_: &str) -> bool {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(type_)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// The order to apply in: `preferred` (a permutation of the indexes, the kind order) with every
/// manifest after what it depends on, others keeping their place. Dependencies in a circle
/// cannot all be met: the circle's first manifest in `preferred` goes as if it had none, and is
/// in the second list returned, so a hostile work still gets an order. Indexes `preferred` holds
/// twice or that `deps` does not know go once, with no dependencies.
pub fn order(preferred: &[usize], deps: &[Vec<Dependency>]) -> (Vec<usize>, Vec<usize>) {
    let n = deps.len();
    // Each index's place in `preferred`, once.
    let mut place = vec![usize::MAX; n];
    let mut listed = Vec::with_capacity(preferred.len().min(n));
    for &i in preferred {
        if let Some(p) = place.get_mut(i)
            && *p == usize::MAX
        {
            *p = listed.len();
            listed.push(i);
        }
    }
    let mut waiting_on = vec![0usize; n];
    let mut dependants: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &i in &listed {
        let mut ons: Vec<usize> = deps[i]
            .iter()
            .map(|d| d.on)
            .filter(|&on| on < n && place[on] != usize::MAX && on != i)
            .collect();
        ons.sort_unstable();
        ons.dedup();
        waiting_on[i] = ons.len();
        for on in ons {
            dependants[on].push(i);
        }
    }
    let mut ready: BinaryHeap<Reverse<usize>> = listed
        .iter()
        .filter(|&&i| waiting_on[i] == 0)
        .map(|&i| Reverse(place[i]))
        .collect();
    let mut done = vec![false; n];
    let mut out = Vec::with_capacity(listed.len());
    let mut broken = Vec::new();
    let mut cursor = 0;
    while out.len() < listed.len() {
        let next = match ready.pop() {
            Some(Reverse(p)) => listed[p],
            None => {
                // Only circles are left: the first of them in `preferred` goes without them.
                while cursor < listed.len() && done[listed[cursor]] {
                    cursor += 1;
                }
                let Some(&first) = listed.get(cursor) else {
                    break;
                };
                broken.push(first);
                first
            }
        };
        if done[next] {
            continue;
        }
        done[next] = true;
        out.push(next);
        for &d in &dependants[next] {
            waiting_on[d] = waiting_on[d].saturating_sub(1);
            if waiting_on[d] == 0 && !done[d] {
                ready.push(Reverse(place[d]));
            }
        }
    }
    (out, broken)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(group: &str, kind: &str) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": format!("{}s.{group}", kind.to_lowercase())},
               "spec": {"group": group, "names": {"kind": kind, "plural": format!("{}s", kind.to_lowercase())},
                        "scope": "Namespaced", "versions": [{"name": "v1", "served": true, "storage": true}]}})
    }

    /// A dependency on manifest `index` for `need`, written short.
    fn on(index: usize, need: Need) -> Dependency {
        Dependency { on: index, need }
    }

    fn object(api_version: &str, kind: &str, namespace: &str, name: &str) -> Value {
        let mut v = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}});
        if !namespace.is_empty() {
            v["metadata"]["namespace"] = json!(namespace);
        }
        v
    }

    #[test]
    fn a_stack_listed_backwards_is_ordered_by_what_each_needs() {
        let manifests = vec![
            object("example.com/v1", "Widget", "app", "w"),
            object("apps/v1", "Deployment", "app", "d"),
            object("v1", "ServiceAccount", "app", "sa"),
            crd("example.com", "Widget"),
            object("v1", "Namespace", "", "app"),
        ];
        let deps = dependencies(&manifests);
        assert_eq!(deps[0], vec![on(3, Need::Established), on(4, Need::Active)]);
        assert_eq!(deps[1], vec![on(4, Need::Active)]);
        assert!(deps[3].is_empty() && deps[4].is_empty());
        let (order, broken) = order(&[4, 3, 2, 1, 0], &deps);
        assert_eq!(order, [4, 3, 2, 1, 0]);
        assert!(broken.is_empty());
        // A kind order that puts dependants first is corrected, the rest keep their place.
        let (order, _) = super::order(&[0, 1, 2, 3, 4], &deps);
        assert_eq!(order, [3, 4, 0, 1, 2]);
    }

    #[test]
    fn a_custom_resource_is_known_from_its_crd_before_discovery() {
        let mut c = crd("example.com", "Widget");
        assert_eq!(crd_resource(&c, "v1"), Some(("widgets".to_string(), true)));
        assert_eq!(crd_resource(&c, "v2"), None, "a version it does not serve");
        c["spec"]["scope"] = json!("Cluster");
        assert_eq!(crd_resource(&c, "v1"), Some(("widgets".to_string(), false)));
        assert_eq!(
            crd_resource(&json!({"spec": {"names": {"plural": 3}}}), "v1"),
            None
        );
    }

    #[test]
    fn an_aggregated_api_waits_for_its_apiservice() {
        let manifests = vec![
            object("metrics.example.io/v1beta1", "Usage", "", "u"),
            json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                   "metadata": {"name": "v1beta1.metrics.example.io"},
                   "spec": {"group": "metrics.example.io", "version": "v1beta1"}}),
            object("metrics.example.io/v1", "Usage", "", "other-version"),
        ];
        let deps = dependencies(&manifests);
        assert_eq!(deps[0], vec![on(1, Need::Available)]);
        assert!(deps[2].is_empty(), "another version is not served by it");
    }

    #[test]
    fn nothing_outside_the_work_and_nothing_unreadable_is_a_dependency() {
        let manifests = vec![
            object("example.com/v1", "Widget", "elsewhere", "w"),
            json!({"kind": "Broken"}),
            json!("not an object"),
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "metadata": {"name": "x"}, "spec": {"group": 7}}),
        ];
        assert!(dependencies(&manifests).iter().all(Vec::is_empty));
    }

    #[test]
    fn readiness_is_read_from_the_live_object() {
        let established = json!({"status": {"conditions": [
            {"type": "NamesAccepted", "status": "True"}, {"type": "Established", "status": "True"}]}});
        assert!(is_ready(&Need::Established, &established));
        assert!(!is_ready(
            &Need::Established,
            &json!({"status": {"conditions": [
            {"type": "Established", "status": "False"}]}})
        ));
        assert!(!is_ready(&Need::Established, &json!({})));
        assert!(!is_ready(
            &Need::Established,
            &json!({"status": {"conditions": "bad"}})
        ));
        assert!(is_ready(
            &Need::Active,
            &json!({"status": {"phase": "Active"}})
        ));
        assert!(!is_ready(
            &Need::Active,
            &json!({"status": {"phase": "Terminating"}})
        ));
        assert!(is_ready(
            &Need::Available,
            &json!({"status": {"conditions": [
            {"type": "Available", "status": "True"}]}})
        ));
        assert!(!is_ready(&Need::Available, &json!(null)));
    }

    #[test]
    fn a_circle_is_broken_rather_than_looping() {
        // Two APIServices that each claim to serve the other's group and version.
        let apiservice = |name: &str| {
            json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                   "metadata": {"name": name},
                   "spec": {"group": "apiregistration.k8s.io", "version": "v1"}})
        };
        let manifests = vec![apiservice("a"), apiservice("b")];
        let deps = dependencies(&manifests);
        assert_eq!(deps[0], vec![on(1, Need::Available)]);
        let (order, broken) = order(&[0, 1], &deps);
        assert_eq!(order, [0, 1]);
        assert_eq!(broken, [0]);
        // A preferred order that is not a permutation is taken as it comes, without a panic.
        let (order, _) = super::order(&[5, 1, 1, 0], &deps);
        assert_eq!(order.len(), 2);
    }
}
