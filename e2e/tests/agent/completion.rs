//! Condition rules and sticky completion against real API servers (kwok runs the Jobs).

use crate::agent_common::*;
use kube::api::{DeleteParams, PropagationPolicy};
use serde_json::json;

#[tokio::test]
async fn a_job_run_to_completion_completes_the_work_and_is_never_touched_again() {
    let env = Env::start("complete-job").await;
    let name = env.work_name("job");
    let spec = |label: Option<&str>| {
        let mut job = job(&env.ns, "once");
        if let Some(l) = label {
            job["metadata"]["labels"] = json!({"edited": l});
        }
        json!({
            "workload": {"manifests": [job, configmap(&env.ns, "side", json!({"k": "v"}))]},
            "manifestConfigs": [job_complete_config(&env.ns, "once")]
        })
    };
    env.create_work(&name, spec(None)).await;
    let work = env
        .wait_work(&name, "Complete", |w| work_is(w, "Complete", "True"))
        .await;
    let complete = work_condition(&work, "Complete").expect("Complete");
    assert_eq!(complete.reason, "ConditionRulesAggregated");
    let manifest = manifest_condition(&work, 0, "Complete").expect("manifest Complete");
    assert_eq!(manifest.reason, "ConditionRuleEvaluated");
    assert_eq!(manifest.message, "Job is finished");
    // The ConfigMap has no Complete rule: it takes no part.
    assert!(manifest_condition(&work, 1, "Complete").is_none());

    let jobs = env.spoke_api("batch", "v1", "Job", "jobs");
    let before = jobs.get("once").await.expect("job");
    let status_before = work.status.clone();

    // Editing the Job's manifest in the work changes nothing on the spoke (checked once the
    // edit has been reconciled).
    let reconciled = reconciles(&metrics_text(env.http_port).await);
    env.patch_work_spec(&name, spec(Some("yes"))).await;
    wait_reconciled_after(env.http_port, reconciled).await;
    let after = jobs.get("once").await.expect("job");
    assert_eq!(rv(&before), rv(&after), "completed Job was written");
    assert!(
        after
            .metadata
            .labels
            .as_ref()
            .is_none_or(|l| !l.contains_key("edited"))
    );
    let work_after = env.works().get(&name).await.expect("work");
    assert_eq!(
        work_after.status, status_before,
        "a Complete work's status was rewritten"
    );

    // Deleting the Job does not re-create it (checked once its deletion has been reconciled:
    // a completed manifest's object stays indexed, so its deletion wakes the work).
    let reconciled = reconciles(&metrics_text(env.http_port).await);
    jobs.delete(
        "once",
        &DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        },
    )
    .await
    .expect("delete job");
    env.wait_object_gone(&jobs, "once").await;
    wait_reconciled_after(env.http_port, reconciled).await;
    assert!(
        jobs.get_opt("once").await.expect("get").is_none(),
        "completed Job was re-created (agent log {})",
        env.agent.log_path().display()
    );
}

#[tokio::test]
async fn a_completed_manifest_stays_complete_while_others_are_pending() {
    let env = Env::start("complete-sticky").await;
    let name = env.work_name("sticky");
    // The ConfigMap opts the work out of completion with a `false` rule.
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [job(&env.ns, "j"), configmap(&env.ns, "never", json!({"k": "v"}))]},
            "manifestConfigs": [
                job_complete_config(&env.ns, "j"),
                {"resourceIdentifier": {"resource": "configmaps", "name": "never", "namespace": env.ns},
                 "conditionRules": [{"condition": "Complete", "type": "CEL", "celExpressions": ["false"]}]}
            ]
        }),
    )
    .await;
    let work = env
        .wait_work(&name, "Job complete, work not", |w| {
            manifest_is(w, 0, "Complete", "True") && manifest_is(w, 1, "Complete", "False")
        })
        .await;
    assert!(work_is(&work, "Complete", "False"));
    let jobs = env.spoke_api("batch", "v1", "Job", "jobs");
    jobs.delete(
        "j",
        &DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        },
    )
    .await
    .expect("delete job");
    env.wait_object_gone(&jobs, "j").await;
    // Touch the work so it is reconciled for sure.
    env.patch_work_spec(
        &name,
        json!({"workload": {"manifests": [job(&env.ns, "j"), configmap(&env.ns, "never", json!({"k": "v2"}))]}}),
    )
    .await;
    env.wait_object(&env.configmaps(), "never", "updated", |o| {
        data(o)["k"] == "v2"
    })
    .await;
    let work = env.works().get(&name).await.expect("work");
    assert!(
        manifest_is(&work, 0, "Complete", "True"),
        "sticky Complete lost"
    );
    assert!(
        jobs.get_opt("j").await.expect("get").is_none(),
        "Job re-created"
    );
}

#[tokio::test]
async fn custom_cel_rules_messages_maps_errors_and_progressing() {
    let env = Env::start("rules-cel").await;
    let name = env.work_name("cel");
    let cm_config = |cm: &str, rules: serde_json::Value| {
        json!({"resourceIdentifier": {"resource": "configmaps", "name": cm, "namespace": env.ns},
               "conditionRules": rules})
    };
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [
                configmap(&env.ns, "plain", json!({"count": "3"})),
                configmap(&env.ns, "mapped", json!({"count": "1"})),
                configmap(&env.ns, "broken", json!({"count": "1"})),
            ]},
            "manifestConfigs": [
                cm_config("plain", json!([
                    {"condition": "Counted", "type": "CEL",
                     "celExpressions": [{"expression": "int(object.data['count']) >= 3"}],
                     "messageExpression": "result ? 'count is ' + object.data['count'] : 'too few'"},
                    {"condition": "Progressing", "type": "CEL", "celExpressions": ["true"]}
                ])),
                cm_config("mapped", json!([
                    {"condition": "Counted", "type": "CEL",
                     "celExpressions": ["int(object.data['count']) >= 3 ? {'status': true} : {'status': false, 'reason': 'CountLow', 'message': 'only ' + object.data['count']}"]},
                    {"condition": "Progressing", "type": "CEL", "celExpressions": ["false"]}
                ])),
                cm_config("broken", json!([
                    {"condition": "Broken", "type": "CEL", "celExpressions": ["object.data.missing.field == 1"]}
                ])),
            ]
        }),
    )
    .await;
    let work = env
        .wait_work(&name, "rules evaluated", |w| {
            manifest_condition(w, 0, "Counted").is_some()
                && manifest_condition(w, 1, "Counted").is_some()
                && manifest_condition(w, 2, "Broken").is_some()
        })
        .await;
    let plain = manifest_condition(&work, 0, "Counted").expect("plain");
    assert_eq!(
        (
            plain.status.as_str(),
            plain.reason.as_str(),
            plain.message.as_str()
        ),
        ("True", "ConditionRuleEvaluated", "count is 3")
    );
    let mapped = manifest_condition(&work, 1, "Counted").expect("mapped");
    assert_eq!(mapped.status, "False");
    assert!(
        mapped.reason.starts_with("ConditionRule"),
        "{}",
        mapped.reason
    );
    assert!(mapped.reason.ends_with("CountLow"), "{}", mapped.reason);
    assert_eq!(mapped.message, "only 1");
    let broken = manifest_condition(&work, 2, "Broken").expect("broken");
    assert_eq!(broken.status, "False");
    assert_eq!(broken.reason, "ConditionRuleExpressionError");
    assert!(!broken.message.is_empty());
    // The broken rule does not stop the rest of the work.
    assert!(work_is(&work, "Applied", "True"));
    assert!(work_is(&work, "Available", "True"));
    // Aggregation: Counted is False (one False), Progressing is True (any True wins).
    let counted = work_condition(&work, "Counted").expect("work Counted");
    assert_eq!(
        (counted.status.as_str(), counted.reason.as_str()),
        ("False", "ConditionRulesAggregated")
    );
    assert_eq!(
        work_condition(&work, "Progressing").map(|c| c.status.as_str()),
        Some("True")
    );
    assert!(work_is(&work, "Broken", "False"));
}

#[tokio::test]
async fn a_spoke_status_change_reaches_the_hub_from_the_watch() {
    // Resync far away: only watch events can explain a fast status change.
    let env = Env::start_with(
        test_support::TestCluster::hub().await,
        "rules-watch",
        &["--status-sync-period", "1h"],
    )
    .await;
    let name = env.work_name("watch");
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [configmap(&env.ns, "w", json!({"k": "v"}))]},
            "manifestConfigs": [{
                "resourceIdentifier": {"resource": "configmaps", "name": "w", "namespace": env.ns},
                "updateStrategy": {"type": "ServerSideApply"},
                "conditionRules": [{"condition": "Flagged", "type": "CEL",
                    "celExpressions": ["has(object.metadata.annotations) && 'flag' in object.metadata.annotations"]}]
            }]
        }),
    )
    .await;
    env.wait_work(&name, "Flagged False", |w| {
        manifest_is(w, 0, "Flagged", "False")
    })
    .await;
    // Another field manager adds an annotation the work does not own: SSA keeps it.
    env.configmaps()
        .patch(
            "w",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {"flag": "1"}}})),
        )
        .await
        .expect("annotate");
    env.wait_work(&name, "Flagged True from the watch", |w| {
        manifest_is(w, 0, "Flagged", "True")
    })
    .await;
}

#[tokio::test]
async fn metrics_count_applies_evaluations_and_completions() {
    let env = Env::start("metrics").await;
    let name = env.work_name("metrics");
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [job(&env.ns, "m")]},
            "manifestConfigs": [job_complete_config(&env.ns, "m")]
        }),
    )
    .await;
    env.wait_work(&name, "Complete", |w| work_is(w, "Complete", "True"))
        .await;
    let port = env.http_port;
    let text = test_support::wait_for("metrics show the completion", TIMEOUT, || async move {
        match http_get(port, "/metrics").await {
            Ok(t) if t.contains("work_agent_completions_total 1") => Ok(t),
            Ok(t) => Err(t),
            Err(e) => Err(e),
        }
    })
    .await;
    for expected in [
        r#"work_agent_applies_total{strategy="Update",result="created"} 1"#,
        r#"work_agent_rule_evaluations_total{result="true"}"#,
        r#"work_agent_works{state="complete"} 1"#,
        "work_agent_time_to_complete_seconds_count 1",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
    let ready = http_get(port, "/readyz").await;
    assert!(ready.is_ok(), "{ready:?}");
}
