//! Heavy condition rules run off the async runtime: while many manifests' expensive (but
//! allowed) rules are evaluated again and again, `/healthz` keeps answering and the agent keeps
//! renewing its leader-election Lease.

use std::time::Duration;

use crate::agent_common::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const MANIFESTS: usize = 40;

/// Nested comprehensions over a literal list: hundreds of iterations per evaluation, well under
/// the iteration limit.
fn heavy_expression() -> String {
    let list = format!(
        "[{}]",
        (0..30).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
    );
    format!("{list}.all(i, {list}.all(j, i + j >= 0))")
}

/// Rule evaluations that ran to a result (True, or stopped by a limit on a loaded machine).
fn evaluations(text: &str) -> f64 {
    metric_value(text, r#"work_agent_rule_evaluations_total{result="true"}"#)
        + metric_value(text, r#"work_agent_rule_evaluations_total{result="error"}"#)
}

#[tokio::test]
async fn heavy_rules_neither_starve_health_probes_nor_lease_renewal() {
    let env = Env::start_elected("heavy").await;
    let name = env.work_name("heavy");
    let manifests: Vec<_> = (0..MANIFESTS)
        .map(|i| configmap(&env.ns, &format!("cm-{i}"), json!({"k": "v"})))
        .collect();
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": manifests},
            "manifestConfigs": [{
                "resourceIdentifier": {"resource": "configmaps", "name": "cm-*", "namespace": env.ns},
                "conditionRules": [{"condition": "Heavy", "type": "CEL",
                                    "celExpressions": [heavy_expression()]}]
            }]
        }),
    )
    .await;
    env.wait_work(&name, "every manifest evaluated", |w| {
        (0..MANIFESTS as i32).all(|i| manifest_condition(w, i, "Heavy").is_some())
    })
    .await;

    let leases: Api<Lease> = Api::namespaced(env.spoke.client.clone(), &env.ns);
    let lease_name = format!("work-agent-{}", env.cluster);
    let holder_before = leases
        .get(&lease_name)
        .await
        .expect("the agent's Lease")
        .spec
        .and_then(|s| s.holder_identity);
    assert!(holder_before.is_some(), "the agent holds its Lease");
    let evaluations_before = evaluations(&metrics_text(env.http_port).await);

    // Probes in the background while every ConfigMap edit re-evaluates all the rules.
    let port = env.http_port;
    let probes = tokio::spawn(async move {
        let (mut answered, mut failed) = (0u32, Vec::new());
        for _ in 0..40 {
            match http_get(port, "/healthz").await {
                Ok(_) => answered += 1,
                Err(e) => failed.push(e),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        (answered, failed)
    });
    let configmaps = env.configmaps();
    let mut renew_times = Vec::new();
    for round in 0..10 {
        configmaps
            .patch(
                &format!("cm-{}", round % MANIFESTS),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"round": round.to_string()}}})),
            )
            .await
            .expect("touch a ConfigMap");
        let lease = leases.get(&lease_name).await.expect("the Lease");
        renew_times.push(lease.spec.and_then(|s| s.renew_time).map(|t| t.0));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (answered, failed) = probes.await.expect("the probe task");

    let text = metrics_text(env.http_port).await;
    let evaluations_after = evaluations(&text);
    assert!(
        evaluations_after >= evaluations_before + MANIFESTS as f64,
        "the rules ran again: {evaluations_before} -> {evaluations_after}"
    );
    assert!(
        failed.is_empty(),
        "/healthz failed {} times: {failed:?}",
        failed.len()
    );
    assert_eq!(answered, 40);
    let distinct: std::collections::BTreeSet<_> = renew_times.iter().flatten().collect();
    assert!(
        distinct.len() >= 2,
        "the Lease was not renewed while the rules ran: {renew_times:?}"
    );
    let holder_after = leases
        .get(&lease_name)
        .await
        .expect("the Lease")
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(holder_after, holder_before, "the agent lost its Lease");
    assert!(
        env.agent.log().contains("leading"),
        "the agent led throughout"
    );
}
