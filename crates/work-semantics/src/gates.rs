//! Declared gates: a manifest may wait for a condition of another manifest of the same work (its
//! `Complete`, a library rule's `Healthy`, any CEL rule's condition). Declared in the work's
//! annotation [`ANNOTATION`], so upstream's ManifestWork CRD takes the work unchanged and an
//! agent that does not know it still applies the work. With the built-in needs
//! ([`crate::readiness`]) they make one graph ([`plan`]): one order, one cycle check.

use std::borrow::Borrow;

use serde_json::Value;
use work_api::{ConditionRule, ManifestWork};

use crate::ManifestId;
use crate::annotations;
use crate::order::apply_order;
use crate::readiness::{self, Dependency, Need};

/// The work annotation holding the gates: a JSON list of
/// `{"manifest": <ref>, "waitFor": {"manifest": <ref>, "condition": "<type>", "status": "True"}}`,
/// where a `<ref>` is a manifest's ordinal or `{"group", "kind", "namespace", "name"}`.
pub const ANNOTATION: &str = "work.open-cluster-management.io/gates";

/// The most gates one work may declare: more is refused as a whole (a hostile annotation does not
/// cost the agent more than a work of this many manifests).
pub const MAX_GATES: usize = 1000;

/// One declared gate, resolved to manifest indexes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gate {
    /// The index of the manifest that waits.
    pub manifest: usize,
    /// The index of the manifest waited for.
    pub on: usize,
    /// The condition type of `on` waited for.
    pub condition: String,
    /// The status it must have (`True` unless said).
    pub status: String,
}

/// What a work's annotation declares: the gates that can be used, and why the others cannot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Declared {
    /// Gates naming existing manifests.
    pub gates: Vec<Gate>,
    /// Gates that can never hold: the waiting manifest (None: which one is not known, so every
    /// manifest of the work is held) and why.
    pub invalid: Vec<(Option<usize>, String)>,
}

/// Reads the gates of `annotation` against the work's manifests. Never fails: what cannot be
/// used is in [`Declared::invalid`], with the reason a user reads on the work.
pub fn declared<M: Borrow<Value>>(annotation: &str, manifests: &[M]) -> Declared {
    let mut out = Declared::default();
    let entries = match annotations::entries(annotation, ANNOTATION, MAX_GATES, "gates") {
        Ok(entries) => entries,
        Err(why) => {
            out.invalid.push((None, why));
            return out;
        }
    };
    let ids = annotations::ids(manifests);
    for (n, entry) in entries.iter().enumerate() {
        match gate_of(entry, &ids) {
            Ok(gate) => out.gates.push(gate),
            Err((manifest, why)) => out
                .invalid
                .push((manifest, format!("gate {n} of {ANNOTATION}: {why}"))),
        }
    }
    out
}

/// One entry as a gate; else the waiting manifest if known, and why.
fn gate_of(entry: &Value, ids: &[Option<ManifestId>]) -> Result<Gate, (Option<usize>, String)> {
    let manifest = match entry.get("manifest") {
        Some(r) => find_manifest(r, ids).map_err(|e| (None, e))?,
        None => return Err((None, "no \"manifest\"".to_string())),
    };
    let held = |why: String| (Some(manifest), why);
    let wait_for = entry
        .get("waitFor")
        .ok_or_else(|| held("no \"waitFor\"".to_string()))?;
    let on = match wait_for.get("manifest") {
        Some(r) => find_manifest(r, ids).map_err(held)?,
        None => return Err(held("no \"waitFor.manifest\"".to_string())),
    };
    let condition = match wait_for.get("condition").and_then(Value::as_str) {
        Some(c) if !c.is_empty() && c.len() <= 316 => c.to_string(),
        _ => {
            return Err(held(
                "\"waitFor.condition\" is not a condition type".to_string(),
            ));
        }
    };
    let status = match wait_for.get("status") {
        None => "True".to_string(),
        Some(Value::String(s)) if matches!(s.as_str(), "True" | "False" | "Unknown") => s.clone(),
        Some(_) => {
            return Err(held(
                "\"waitFor.status\" is not True, False or Unknown".to_string(),
            ));
        }
    };
    if on == manifest {
        return Err(held(format!("manifest {manifest} waits for itself")));
    }
    Ok(Gate {
        manifest,
        on,
        condition,
        status,
    })
}

/// The index a reference names: an ordinal, or the one manifest of that identity.
pub(crate) fn find_manifest(
    reference: &Value,
    ids: &[Option<ManifestId>],
) -> Result<usize, String> {
    if let Some(n) = reference.as_u64() {
        return usize::try_from(n)
            .ok()
            .filter(|&i| i < ids.len())
            .ok_or_else(|| format!("no manifest {n} (the work has {})", ids.len()));
    }
    let Some(fields) = reference.as_object() else {
        return Err(format!("{reference} is neither an ordinal nor an identity"));
    };
    let field = |name: &str| fields.get(name).and_then(Value::as_str).unwrap_or_default();
    let (group, kind, namespace, name) = (
        field("group"),
        field("kind"),
        field("namespace"),
        field("name"),
    );
    if kind.is_empty() || name.is_empty() {
        return Err("an identity needs a \"kind\" and a \"name\"".to_string());
    }
    let mut found = ids.iter().enumerate().filter(|(_, id)| {
        id.as_ref().is_some_and(|id| {
            id.group == group && id.kind == kind && id.namespace == namespace && id.name == name
        })
    });
    let described = describe(group, kind, namespace, name);
    match (found.next(), found.next()) {
        (Some((i, _)), None) => Ok(i),
        (None, _) => Err(format!("no manifest is {described}")),
        (Some(_), Some(_)) => Err(format!("more than one manifest is {described}")),
    }
}

fn describe(group: &str, kind: &str, namespace: &str, name: &str) -> String {
    let kind = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    if namespace.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {namespace}/{name}")
    }
}

/// How a work's manifests go: each one's dependencies (built-in and declared), the order to
/// apply them in, and the manifests held because a gate can never hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Each manifest's dependencies, by index; those of a built-in circle broken (cleared).
    pub deps: Vec<Vec<Dependency>>,
    /// The order to apply in (a permutation of the indexes).
    pub order: Vec<usize>,
    /// Per manifest, why it is never applied while the work is as it is (None: it may be).
    pub held: Vec<Option<String>>,
}

impl Plan {
    /// Whether some manifest of the work is held by a gate that can never hold.
    pub fn has_invalid_gates(&self) -> bool {
        self.held.iter().any(Option::is_some)
    }
}

/// The gates `work` declares: the value of its [`ANNOTATION`], if any.
pub fn annotation_of(work: &ManifestWork) -> Option<&str> {
    annotations::value(work, ANNOTATION)
}

/// Whether a manifest with `rules` writes `condition`: one of its rules' types, or the agent's own
/// `Applied` or `Available`. A gate on anything else can never hold.
pub fn produces<'a>(mut rules: impl Iterator<Item = &'a ConditionRule>, condition: &str) -> bool {
    condition == "Applied"
        || condition == "Available"
        || rules.any(|r| r.condition_type() == condition)
}

/// [`plan`] for `work`: its manifests after the kind order ([`apply_order`]), its annotation.
pub fn plan_work(work: &ManifestWork, produces: impl Fn(usize, &str) -> bool) -> Plan {
    let raw: Vec<&Value> = work.spec.workload.manifests.iter().map(|m| &m.0).collect();
    plan(&raw, &apply_order(&raw), annotation_of(work), produces)
}

/// One graph of a work's built-in needs and its declared gates (`annotation`, the value of
/// [`ANNOTATION`] if any): the order after `preferred` (the kind order), and what is held.
/// `produces(i, condition)` says whether manifest `i` writes that condition (its rules' types,
/// `Applied`, `Available`); a gate on a condition it does not produce can never hold. A circle
/// with a declared gate in it holds all its manifests; a circle of built-in needs only is
/// broken as [`readiness::order`] does. A manifest depending on a held one is held too.
pub fn plan<M: Borrow<Value>>(
    manifests: &[M],
    preferred: &[usize],
    annotation: Option<&str>,
    produces: impl Fn(usize, &str) -> bool,
) -> Plan {
    let n = manifests.len();
    let mut deps = readiness::dependencies(manifests);
    let mut held: Vec<Option<String>> = vec![None; n];
    let hold = |held: &mut Vec<Option<String>>, i: usize, why: String| {
        if let Some(slot) = held.get_mut(i)
            && slot.is_none()
        {
            *slot = Some(why);
        }
    };
    if let Some(text) = annotation {
        let declared = declared(text, manifests);
        for (manifest, why) in declared.invalid {
            match manifest {
                Some(i) => hold(&mut held, i, why),
                None => (0..n).for_each(|i| hold(&mut held, i, why.clone())),
            }
        }
        for gate in declared.gates {
            if !produces(gate.on, &gate.condition) {
                let why = format!(
                    "manifest {} waits for {} of manifest {}, which no rule of it produces",
                    gate.manifest, gate.condition, gate.on
                );
                hold(&mut held, gate.manifest, why);
                continue;
            }
            if let Some(d) = deps.get_mut(gate.manifest) {
                d.push(Dependency {
                    on: gate.on,
                    need: Need::Condition {
                        condition: gate.condition,
                        status: gate.status,
                    },
                });
            }
        }
    }
    for circle in circles(&deps) {
        let declared_in_it = circle.iter().any(|&i| {
            deps[i]
                .iter()
                .any(|d| d.need.is_declared() && circle.contains(&d.on))
        });
        if declared_in_it {
            let path: Vec<String> = circle.iter().map(usize::to_string).collect();
            let why = format!("gates in a circle: manifests {}", path.join(", "));
            for &i in &circle {
                hold(&mut held, i, why.clone());
            }
        }
    }
    let (order, broken) = readiness::order(preferred, &deps);
    for i in broken {
        if held.get(i).is_some_and(Option::is_none)
            && let Some(d) = deps.get_mut(i)
        {
            d.retain(|d| d.need.is_declared());
        }
    }
    // What depends on a held manifest is held too: it could never be applied either.
    for &i in &order {
        if held[i].is_some() {
            continue;
        }
        if let Some(on) = deps[i].iter().map(|d| d.on).find(|&on| held[on].is_some()) {
            held[i] = Some(format!(
                "manifest {i} depends on manifest {on}, which is held: {}",
                held[on].as_deref().unwrap_or_default()
            ));
        }
    }
    // Held manifests in a circle come out of `order` in any sequence: a second pass settles
    // dependants listed before them.
    for _ in 0..n.min(64) {
        let mut changed = false;
        for i in 0..n {
            if held[i].is_none()
                && let Some(on) = deps[i].iter().map(|d| d.on).find(|&on| held[on].is_some())
            {
                held[i] = Some(format!("manifest {i} depends on held manifest {on}"));
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    Plan { deps, order, held }
}

/// The circles of the graph (strongly connected components of more than one manifest), each
/// sorted; iterative Tarjan, so a long chain does not overflow the stack.
fn circles(deps: &[Vec<Dependency>]) -> Vec<Vec<usize>> {
    let n = deps.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<usize> = Vec::new();
    let mut next = 0usize;
    let mut out = Vec::new();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        // (node, position in its edge list)
        let mut work: Vec<(usize, usize)> = vec![(root, 0)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut edge)) = work.last_mut() {
            if let Some(d) = deps[v].get(*edge) {
                *edge += 1;
                let w = d.on;
                if w >= n {
                    continue;
                }
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort_unstable();
                    out.push(component);
                }
            }
        }
    }
    out
}

/// For a deletion: each manifest's depth, 0 for what nothing depends on, else one more than the
/// deepest of its dependants. Deleting by rising depth takes dependants before what they depend
/// on (CRs before their CRD, the app before the operator it is gated on). Manifests in a circle
/// share a depth.
pub fn deletion_depths(deps: &[Vec<Dependency>]) -> Vec<usize> {
    let n = deps.len();
    let mut depth = vec![0usize; n];
    // Relaxation bounded by n rounds: a circle stops rising there instead of looping.
    for _ in 0..n {
        let mut changed = false;
        for (i, ds) in deps.iter().enumerate() {
            for d in ds {
                if d.on < n && d.on != i && depth[d.on] < depth[i] + 1 && depth[i] < n {
                    depth[d.on] = depth[i] + 1;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    depth
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(api_version: &str, kind: &str, namespace: &str, name: &str) -> Value {
        json!({"apiVersion": api_version, "kind": kind,
               "metadata": {"name": name, "namespace": namespace}})
    }

    fn migration() -> Vec<Value> {
        vec![
            object("apps/v1", "Deployment", "app", "web"),
            object("batch/v1", "Job", "app", "migrate"),
        ]
    }

    fn all(_: usize, _: &str) -> bool {
        true
    }

    #[test]
    fn a_deployment_gated_on_a_job_goes_after_it_and_waits_for_its_condition() {
        let gates = r#"[{"manifest": 0, "waitFor": {"manifest": 1, "condition": "Complete"}}]"#;
        let plan = plan(&migration(), &[0, 1], Some(gates), all);
        assert_eq!(plan.order, [1, 0]);
        assert_eq!(
            plan.deps[0],
            vec![Dependency {
                on: 1,
                need: Need::Condition {
                    condition: "Complete".into(),
                    status: "True".into()
                }
            }]
        );
        assert!(!plan.has_invalid_gates());
        // The same gate by identity.
        let by_id = r#"[{"manifest": {"group": "apps", "kind": "Deployment", "namespace": "app", "name": "web"},
            "waitFor": {"manifest": {"group": "batch", "kind": "Job", "namespace": "app", "name": "migrate"},
                        "condition": "Complete", "status": "True"}}]"#;
        assert_eq!(super::plan(&migration(), &[0, 1], Some(by_id), all), plan);
    }

    #[test]
    fn a_gate_that_can_never_hold_holds_its_manifest_with_the_reason() {
        let cases = [
            (
                r#"[{"manifest": 0, "waitFor": {"manifest": 7, "condition": "Complete"}}]"#,
                "gate 0 of work.open-cluster-management.io/gates: no manifest 7 (the work has 2)",
            ),
            (
                r#"[{"manifest": 0, "waitFor": {"manifest": {"kind": "Job", "name": "x"}, "condition": "Complete"}}]"#,
                "gate 0 of work.open-cluster-management.io/gates: no manifest is Job x",
            ),
            (
                r#"[{"manifest": 0, "waitFor": {"manifest": 0, "condition": "Complete"}}]"#,
                "gate 0 of work.open-cluster-management.io/gates: manifest 0 waits for itself",
            ),
            (
                r#"[{"manifest": 0, "waitFor": {"manifest": 1, "condition": "Complete", "status": "yes"}}]"#,
                "gate 0 of work.open-cluster-management.io/gates: \"waitFor.status\" is not True, False or Unknown",
            ),
        ];
        for (gates, why) in cases {
            let plan = plan(&migration(), &[0, 1], Some(gates), all);
            assert_eq!(plan.held, [Some(why.to_string()), None], "{gates}");
        }
        let unproduced = r#"[{"manifest": 0, "waitFor": {"manifest": 1, "condition": "Healthy"}}]"#;
        let plan = plan(&migration(), &[0, 1], Some(unproduced), |_, c| {
            c == "Complete"
        });
        assert_eq!(
            plan.held[0].as_deref(),
            Some("manifest 0 waits for Healthy of manifest 1, which no rule of it produces")
        );
    }

    #[test]
    fn a_hostile_annotation_holds_the_whole_work_without_a_panic() {
        let too_many = format!("[{}]", vec![r#"{"manifest": 0}"#; MAX_GATES + 1].join(","));
        for text in [
            "not json",
            "{}",
            "[1, null, \"x\"]",
            too_many.as_str(),
            r#"[{"manifest": 18446744073709551615, "waitFor": {}}]"#,
        ] {
            let plan = plan(&migration(), &[0, 1], Some(text), all);
            assert!(plan.held[0].is_some(), "{text}");
            assert_eq!(plan.order.len(), 2);
        }
        // A bad entry whose waiting manifest is unknown holds everything; a list of such
        // entries is reported, not applied around.
        let plan = plan(&migration(), &[0, 1], Some("[1]"), all);
        assert!(plan.held.iter().all(Option::is_some));
    }

    #[test]
    fn a_circle_through_a_gate_holds_every_manifest_in_it_and_what_follows() {
        let manifests = vec![
            object("apps/v1", "Deployment", "app", "a"),
            object("apps/v1", "Deployment", "app", "b"),
            object("v1", "ConfigMap", "app", "after"),
            object("v1", "ConfigMap", "app", "free"),
        ];
        let gates = r#"[
            {"manifest": 0, "waitFor": {"manifest": 1, "condition": "Available"}},
            {"manifest": 1, "waitFor": {"manifest": 0, "condition": "Available"}},
            {"manifest": 2, "waitFor": {"manifest": 1, "condition": "Available"}}]"#;
        let plan = plan(&manifests, &[0, 1, 2, 3], Some(gates), all);
        assert_eq!(
            plan.held[0].as_deref(),
            Some("gates in a circle: manifests 0, 1")
        );
        assert_eq!(plan.held[1], plan.held[0]);
        assert!(
            plan.held[2]
                .as_deref()
                .unwrap_or_default()
                .contains("depends on manifest 1")
        );
        assert_eq!(plan.held[3], None);
        assert_eq!(plan.order.len(), 4);
    }

    #[test]
    fn gates_and_built_in_needs_make_one_graph() {
        // The CR waits for its CRD (built in) and for the webhook Deployment (declared); the
        // Deployment for its Namespace.
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "issuers.example.com"},
            "spec": {"group": "example.com", "names": {"kind": "Issuer", "plural": "issuers"}, "scope": "Cluster",
                     "versions": [{"name": "v1", "served": true, "storage": true}]}});
        let manifests = vec![
            json!({"apiVersion": "example.com/v1", "kind": "Issuer", "metadata": {"name": "ca"}}),
            object("apps/v1", "Deployment", "certs", "webhook"),
            crd,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "certs"}}),
        ];
        let gates = r#"[{"manifest": {"group": "example.com", "kind": "Issuer", "name": "ca"},
            "waitFor": {"manifest": {"group": "apps", "kind": "Deployment", "namespace": "certs", "name": "webhook"},
                        "condition": "Healthy"}}]"#;
        let plan = plan(&manifests, &[0, 1, 2, 3], Some(gates), all);
        let pos = |i: usize| plan.order.iter().position(|&o| o == i);
        assert!(pos(3) < pos(1) && pos(1) < pos(0) && pos(2) < pos(0));
        assert_eq!(plan.deps[0].len(), 2);
        // Deleted the other way: the CR first, then the Deployment and the CRD, the Namespace last.
        let depth = deletion_depths(&plan.deps);
        assert_eq!(depth[0], 0);
        assert!(depth[1] > depth[0] && depth[2] > depth[0] && depth[3] > depth[1]);
    }

    #[test]
    fn deletion_depths_stop_rising_in_a_circle() {
        let deps = vec![
            vec![Dependency {
                on: 1,
                need: Need::Available,
            }],
            vec![Dependency {
                on: 0,
                need: Need::Available,
            }],
        ];
        let depth = deletion_depths(&deps);
        assert!(depth.iter().all(|&d| d <= 2));
    }
}
