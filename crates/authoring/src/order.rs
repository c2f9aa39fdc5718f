//! The order a work's manifests are applied in and why (built-in needs and the gates of its
//! `work.open-cluster-management.io/gates` annotation), as the agent decides it: for
//! `work-agent eval --explain --work` and `work-agent lint`.

use serde_json::Value;
use work_api::ManifestWork;
use work_semantics::ManifestId;
use work_semantics::gates::{self, Plan};

use crate::locate::selects;

/// The work's graph, a gate allowed on the conditions a manifest produces (its rules' types as
/// the configs that select it give them, `Applied`, `Available`), after the agent's kind order.
pub fn plan_of(work: &ManifestWork) -> Plan {
    let configs = &work.spec.manifest_configs;
    gates::plan_work(work, |i, condition| {
        work.spec
            .workload
            .manifests
            .get(i)
            .and_then(|m| ManifestId::of(&m.0).ok())
            .is_some_and(|id| {
                let rules = configs
                    .iter()
                    .filter(|c| selects(c, &id))
                    .flat_map(|c| &c.condition_rules);
                gates::produces(rules, condition)
            })
    })
}

/// Why each manifest held by a gate that can never hold is not applied: (ordinal, reason).
pub fn held(work: &ManifestWork) -> Vec<(usize, String)> {
    plan_of(work)
        .held
        .into_iter()
        .enumerate()
        .filter_map(|(i, why)| why.map(|why| (i, why)))
        .collect()
}

/// The apply order in words, one line a manifest: what it waits for, or why it is never applied.
pub fn order_text(work: &ManifestWork) -> String {
    let raw: Vec<&Value> = work.spec.workload.manifests.iter().map(|m| &m.0).collect();
    let plan = plan_of(work);
    let name = |i: usize| {
        raw.get(i).and_then(|m| ManifestId::of(m).ok()).map_or_else(
            || format!("manifest {i}"),
            |id| {
                if id.namespace.is_empty() {
                    format!("manifest {i} {} {}", id.kind, id.name)
                } else {
                    format!("manifest {i} {} {}/{}", id.kind, id.namespace, id.name)
                }
            },
        )
    };
    let mut out = String::from("apply order:\n");
    for (step, &i) in plan.order.iter().enumerate() {
        out.push_str(&format!("{:>3}. {}\n", step + 1, name(i)));
        if let Some(why) = plan.held.get(i).cloned().flatten() {
            out.push_str(&format!("       never applied: {why}\n"));
            continue;
        }
        for d in plan.deps.get(i).into_iter().flatten() {
            let built_in = if d.need.is_declared() {
                ""
            } else {
                " (built in)"
            };
            out.push_str(&format!(
                "       after {}, waiting for it to {}{built_in}\n",
                name(d.on),
                d.need.words()
            ));
        }
    }
    let depths = gates::deletion_depths(&plan.deps);
    let mut deletion: Vec<usize> = (0..raw.len()).collect();
    deletion.sort_by_key(|&i| depths.get(i).copied().unwrap_or_default());
    let listed: Vec<String> = deletion.iter().map(|i| i.to_string()).collect();
    out.push_str(&format!(
        "deletion order (dependants first): manifests {}\n",
        listed.join(", ")
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn work(annotation: &str) -> ManifestWork {
        serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": "w", "annotations": {gates::ANNOTATION: annotation}},
            "spec": {
                "workload": {"manifests": [
                    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "app"}},
                    {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate", "namespace": "app"}}
                ]},
                "manifestConfigs": [{"resourceIdentifier": {"group": "batch", "resource": "jobs", "name": "migrate", "namespace": "app"},
                                     "conditionRules": [{"type": "WellKnownCompletions"}]}]
            }
        }))
        .expect("work")
    }

    #[test]
    fn the_order_says_what_waits_for_what() {
        let w = work(r#"[{"manifest": 0, "waitFor": {"manifest": 1, "condition": "Complete"}}]"#);
        assert!(held(&w).is_empty());
        let text = order_text(&w);
        assert!(text.starts_with("apply order:\n  1. manifest 1 Job app/migrate\n  2. manifest 0 Deployment app/web\n"), "{text}");
        assert!(
            text.contains(
                "after manifest 1 Job app/migrate, waiting for it to have Complete True (gate)"
            ),
            "{text}"
        );
        assert!(
            text.contains("deletion order (dependants first): manifests 0, 1"),
            "{text}"
        );
    }

    #[test]
    fn a_condition_no_rule_produces_is_found() {
        let w = work(r#"[{"manifest": 0, "waitFor": {"manifest": 1, "condition": "Healthy"}}]"#);
        assert_eq!(
            held(&w),
            [(
                0,
                "manifest 0 waits for Healthy of manifest 1, which no rule of it produces"
                    .to_string()
            )]
        );
    }
}
