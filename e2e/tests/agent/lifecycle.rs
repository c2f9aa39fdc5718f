//! The agent's life: a hub with the upstream OCM CRDs, a restart mid-apply, TTL garbage
//! collection, and startup errors.

use std::collections::BTreeSet;
use std::process::Command;

use crate::agent_common::*;
use kube::api::ListParams;
use serde_json::json;
use test_support::{TestCluster, wait_for};

#[tokio::test]
async fn runs_unchanged_against_a_hub_with_the_upstream_crds() {
    let env = Env::start_with(TestCluster::hub_upstream().await, "upstream", &[]).await;
    let name = env.work_name("upstream");
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [job(&env.ns, "j"), configmap(&env.ns, "c", json!({"k": "v"}))]},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "batch", "resource": "jobs", "name": "j", "namespace": env.ns},
                "conditionRules": [{"type": "WellKnownCompletions"}]
            }]
        }),
    )
    .await;
    let work = env
        .wait_work(&name, "Applied, Available and Complete", |w| {
            work_is(w, "Applied", "True")
                && work_is(w, "Available", "True")
                && work_is(w, "Complete", "True")
        })
        .await;
    assert_eq!(
        manifest_condition(&work, 0, "Complete").map(|c| c.reason.as_str()),
        Some("ConditionRuleEvaluated")
    );
    env.delete_work(&name).await;
    env.wait_work_gone(&name).await;
    env.wait_object_gone(&env.configmaps(), "c").await;
}

#[tokio::test]
async fn killed_mid_apply_and_restarted_it_converges_without_duplicates() {
    // A slow spoke client (10 requests/s) makes "mid-apply" a wide window.
    let mut env = Env::start_with(
        TestCluster::hub().await,
        "restart",
        &["--spoke-qps", "10", "--spoke-burst", "1"],
    )
    .await;
    let name = env.work_name("restart");
    let count = 40;
    let manifests: Vec<serde_json::Value> = (0..count)
        .map(|i| configmap(&env.ns, &format!("cm-{i:02}"), json!({"i": i.to_string()})))
        .collect();
    env.create_work(&name, json!({"workload": {"manifests": manifests}}))
        .await;
    // Kill it as soon as the first objects appear, i.e. in the middle of applying the work.
    let cms = env.configmaps();
    wait_for("first objects applied", TIMEOUT, || {
        let cms = cms.clone();
        async move {
            let n = cms
                .list(&ListParams::default().labels(applier::AGENT_LABEL))
                .await
                .map(|l| l.items.len())
                .unwrap_or(0);
            (n > 0).then_some(n)
        }
    })
    .await;
    env.agent.kill();
    let partial = cms
        .list(&ListParams::default().labels(applier::AGENT_LABEL))
        .await
        .expect("list")
        .items
        .len();

    assert!(
        partial < count,
        "the agent was not killed mid-apply ({partial} of {count})"
    );
    env.restart_agent();
    let work = env
        .wait_work(&name, "Applied and Available after the restart", |w| {
            work_is(w, "Applied", "True")
                && work_is(w, "Available", "True")
                && w.status
                    .as_ref()
                    .and_then(|s| s.resource_status.as_ref())
                    .is_some_and(|r| r.manifests.len() == count)
        })
        .await;
    assert!(work.status.is_some());
    let listed = cms
        .list(&ListParams::default().labels(applier::AGENT_LABEL))
        .await
        .expect("list")
        .items;
    let names: BTreeSet<String> = listed
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    let expected: BTreeSet<String> = (0..count).map(|i| format!("cm-{i:02}")).collect();
    assert_eq!(names, expected, "killed after {partial} objects");
    for o in &listed {
        assert_eq!(
            owners(o),
            vec![env.applied_name(&name)],
            "one owner reference, no duplicates"
        );
    }
    let amw = env
        .applied_works()
        .get(&env.applied_name(&name))
        .await
        .expect("one AppliedManifestWork");
    assert_eq!(
        amw.status.map(|s| s.applied_resources.len()),
        Some(count),
        "every applied resource recorded once"
    );
}

#[tokio::test]
async fn a_completed_work_with_a_ttl_is_deleted_after_it() {
    let env = Env::start("ttl").await;
    let name = env.work_name("ttl");
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [job(&env.ns, "j")]},
            "deleteOption": {"ttlSecondsAfterFinished": 2},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "batch", "resource": "jobs", "name": "j", "namespace": env.ns},
                "conditionRules": [{"type": "WellKnownCompletions"}]
            }]
        }),
    )
    .await;
    let work = env
        .wait_work(&name, "Complete", |w| work_is(w, "Complete", "True"))
        .await;
    let completed_at = work_condition(&work, "Complete")
        .expect("Complete")
        .last_transition_time
        .0;
    env.wait_work_gone(&name).await;
    let gone_at = k8s_openapi::jiff::Timestamp::now();
    assert!(
        gone_at.duration_since(completed_at) >= k8s_openapi::jiff::SignedDuration::from_secs(2),
        "deleted before its TTL: complete at {completed_at}, gone at {gone_at}"
    );
    // Foreground policy: the Job went with it.
    env.wait_object_gone(&env.spoke_api("batch", "v1", "Job", "jobs"), "j")
        .await;
}

fn agent_bin() -> String {
    std::env::var(test_support::AGENT_BIN_ENV).unwrap_or_else(|_| {
        panic!(
            "{} is not set: run the tests through e2e/scripts/run-integration.sh",
            test_support::AGENT_BIN_ENV
        )
    })
}

#[test]
fn an_unreadable_kubeconfig_is_a_one_line_error_and_exit_2() {
    let out = Command::new(agent_bin())
        .args([
            "run",
            "--spoke-cluster-name",
            "c1",
            "--hub-kubeconfig",
            "/nonexistent/hub.kubeconfig",
            "--spoke-kubeconfig",
            "/nonexistent/spoke.kubeconfig",
        ])
        .output()
        .expect("run the agent");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("/nonexistent/hub.kubeconfig"), "{stderr}");
}

#[test]
fn a_bad_flag_is_exit_2_and_flags_come_from_the_environment() {
    let out = Command::new(agent_bin())
        .args(["run", "--workers", "zero"])
        .output()
        .expect("run the agent");
    assert_eq!(out.status.code(), Some(2));

    // All required flags from WORK_AGENT_* variables: it gets as far as reading the kubeconfig.
    let out = Command::new(agent_bin())
        .arg("run")
        .env("WORK_AGENT_SPOKE_CLUSTER_NAME", "c1")
        .env(
            "WORK_AGENT_HUB_KUBECONFIG",
            "/nonexistent/from-env.kubeconfig",
        )
        .env(
            "WORK_AGENT_SPOKE_KUBECONFIG",
            "/nonexistent/spoke.kubeconfig",
        )
        .output()
        .expect("run the agent");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/from-env.kubeconfig"),
        "{stderr}"
    );
}
