//! A ManifestWork at the limits (500 KiB of manifests, 256 manifestConfigs with 64 CEL rules
//! each) is processed without stalling the agent: a small work created right after it still
//! becomes Applied, and `/healthz` answers every probe meanwhile, while every manifest of the big
//! one is applied and every rule evaluated.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::agent_common::*;
use serde_json::{Value, json};

/// Total size of the big work's manifests (serialized JSON).
const MANIFEST_BYTES: usize = 500 * 1024;
const CONFIGS: usize = work_api::MAX_MANIFEST_CONFIGS as usize;
const RULES: usize = work_api::MAX_CONDITION_RULES as usize;

/// Short CEL expressions of various costs (the object must stay under etcd's request limit with
/// 16,384 rules); one comprehension per rule keeps the evaluator's metering busy.
const EXPRESSIONS: &[&str] = &[
    "object.data.pad.size()>0",
    "has(object.data.k)",
    "[1,2,3].all(x,x>0)",
    "object.data.k=='v'",
];

fn big_spec(ns: &str) -> Value {
    let empty = configmap(ns, "big-000", json!({"k": "v", "pad": ""}));
    let per_manifest = MANIFEST_BYTES / CONFIGS;
    let pad = per_manifest.saturating_sub(empty.to_string().len());
    let manifests: Vec<Value> = (0..CONFIGS)
        .map(|i| {
            configmap(
                ns,
                &format!("big-{i:03}"),
                json!({"k": "v", "pad": "a".repeat(pad)}),
            )
        })
        .collect();
    let configs: Vec<Value> = (0..CONFIGS)
        .map(|i| {
            json!({
                "resourceIdentifier": {"resource": "configmaps", "name": format!("big-{i:03}"), "namespace": ns},
                "conditionRules": (0..RULES).map(|r| json!({
                    "condition": format!("C{r}"), "type": "CEL",
                    "celExpressions": [EXPRESSIONS[r % EXPRESSIONS.len()]]
                })).collect::<Vec<_>>()
            })
        })
        .collect();
    json!({"workload": {"manifests": manifests}, "manifestConfigs": configs})
}

#[tokio::test]
async fn a_work_at_the_limits_does_not_stall_other_works_or_health() {
    let env = Env::start("hostile-big").await;
    let spec = big_spec(&env.ns);
    let manifest_bytes: usize = spec["workload"]["manifests"]
        .as_array()
        .map(|m| m.iter().map(|v| v.to_string().len()).sum())
        .unwrap_or(0);
    assert!(manifest_bytes <= MANIFEST_BYTES && manifest_bytes > MANIFEST_BYTES * 95 / 100);

    // /healthz probed every 250 ms with a kubelet-like 10 s read timeout, from before the big
    // work exists until both works are done.
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let prober = {
        let (stop, answered, failed, port) = (
            stop.clone(),
            answered.clone(),
            failed.clone(),
            env.http_port,
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match http_get(port, "/healthz").await {
                    Ok(_) => answered.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    // The agent is up before the big work arrives (a probe answered).
    env.wait_ready().await;

    let big = env.work_name("big");
    let small = env.work_name("small");
    env.create_work(&big, spec).await;
    env.create_configmaps(&small, &["small"], "Applied").await;
    let answered_by_small = answered.load(Ordering::Relaxed);

    // The big work is processed too: every manifest applied and every rule evaluated.
    let configmaps = env.configmaps();
    env.wait_object(
        &configmaps,
        &format!("big-{:03}", CONFIGS - 1),
        "applied",
        |_| true,
    )
    .await;
    let port = env.http_port;
    let evaluations = || async move {
        let text = http_get(port, "/metrics").await?;
        let total: f64 = text
            .lines()
            .filter(|l| l.starts_with("work_agent_rule_evaluations_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if total >= (CONFIGS * RULES) as f64 {
            Ok(total)
        } else {
            Err(format!("{total} rule evaluations so far"))
        }
    };
    test_support::wait_for(
        "every rule of the big work evaluated",
        Duration::from_secs(600),
        evaluations,
    )
    .await;
    // Its full status (16,384 rule conditions, about 4.5 MB) is more than an API server stores:
    // the agent writes a reduced one and says so.
    let reduced = env
        .wait_work_for(
            &big,
            "Applied False with reason StatusTooLarge",
            Duration::from_secs(300),
            |w| {
                work_condition(w, "Applied")
                    .is_some_and(|c| c.status == "False" && c.reason == "StatusTooLarge")
            },
        )
        .await;
    let note = work_condition(&reduced, "Applied").expect("Applied");
    assert!(
        note.message.contains(&format!(
            "of {} rule-made manifest conditions were left out",
            CONFIGS * RULES
        )),
        "{}",
        note.message
    );
    let manifests = reduced
        .status
        .as_ref()
        .and_then(|s| s.resource_status.as_ref())
        .map(|r| r.manifests.clone())
        .unwrap_or_default();
    assert_eq!(manifests.len(), CONFIGS, "every manifest has its entry");
    assert!(
        manifests
            .iter()
            .all(|m| m.conditions.iter().any(|c| c.type_ == "Applied")),
        "every manifest keeps its Applied condition"
    );
    stop.store(true, Ordering::Relaxed);
    let _ = prober.await;
    assert!(
        answered_by_small > 0,
        "no /healthz probe answered before the small work was Applied"
    );
    assert!(
        answered.load(Ordering::Relaxed) > answered_by_small,
        "no /healthz probe answered while the big work was processed"
    );
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "/healthz probes failed while the big work was processed"
    );
    env.delete_work(&big).await;
    env.delete_work(&small).await;
    env.wait_work_gone(&big).await;
}
