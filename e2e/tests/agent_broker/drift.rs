//! Drift behind a message broker (the Maestro-shaped test source of `agent_broker`, on MQTT and
//! on gRPC): the drift annotation travels in the work's metadata, a hand edit to a ReportOnly
//! manifest is reported to the source within a second and kept, and one to a manifest of the
//! default mode is written back and reported. Decided on the spoke as behind a Kubernetes hub.

use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use test_support::broker_source::Transport;
use test_support::maestro::{CreateOptions, Maestro};

use crate::agent_common::configmap;
use crate::env::{BrokerEnv, manifest_condition};

const DRIFT: &str = "work.open-cluster-management.io/drift";

fn drifted_is(
    source: &Maestro,
    id: &str,
    ordinal: usize,
    status: &str,
    reason: &str,
    words: &str,
) -> bool {
    manifest_condition(source, id, ordinal, "Drifted").is_some_and(|c| {
        c["status"] == status
            && c["reason"] == reason
            && c["message"].as_str().is_some_and(|m| m.contains(words))
    })
}

async fn report_only_kept_and_default_written_back(t: Transport) {
    let env = BrokerEnv::start(t, "drift").await;
    let cms = env.configmaps();
    // The ReportOnly manifest's object exists before the work, as the work wants it.
    let kept: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(configmap(&env.ns, "kept", json!({"color": "red"}))).expect("cm");
    cms.create(&PostParams::default(), &kept)
        .await
        .expect("create kept");
    let bundle = json!({"manifests": [
        configmap(&env.ns, "kept", json!({"color": "red"})),
        configmap(&env.ns, "fixed", json!({"color": "red"})),
    ]});
    let modes = json!([{"manifest": 0, "mode": "ReportOnly"}]).to_string();
    let id = env
        .source()
        .create_with(
            &env.consumer,
            bundle,
            CreateOptions {
                metadata: Some(json!({"annotations": {DRIFT: modes}})),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("create at the source: {e}"));
    env.wait_applied(&id).await;
    env.wait_source("kept matches", |s| {
        drifted_is(s, &id, 0, "False", "NoDrift", "matches")
    })
    .await;
    // When the spoke dispatched each edit (its watch and the agent's get it at once).
    let blue = |o: &kube::api::DynamicObject| o.data["data"]["color"] == "blue";
    let ar = kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let dynamic = || kube::Api::namespaced_with(env.spoke.client.clone(), &env.ns, &ar);
    let watches = [
        crate::agent_common::spoke_seen(dynamic(), "kept", blue).await,
        crate::agent_common::spoke_seen(dynamic(), "fixed", blue).await,
    ];
    let edited = Instant::now();
    for name in ["kept", "fixed"] {
        cms.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"color": "blue"}})),
        )
        .await
        .expect("hand edit");
    }
    let what = r#"data.color is "blue", the work has "red""#;
    // The ReportOnly edit within a second (the source is polled every 50 ms: at most that late).
    env.wait_source("the ReportOnly edit reported", |s| {
        drifted_is(s, &id, 0, "True", "DriftDetected", what)
            && s.condition_status(&id, "Drifted").as_deref() == Some("True")
    })
    .await;
    let reported = Instant::now();
    let since = |(seen, _): &(std::sync::Arc<std::sync::Mutex<Option<Instant>>>, _)| {
        seen.lock().expect("seen").unwrap_or(edited)
    };
    let latency = reported.saturating_duration_since(since(&watches[0]));
    println!(
        "{t}: the ReportOnly hand edit reported at the source {latency:?} after the spoke's watch event ({:?} after the edit calls)",
        reported - edited
    );
    assert!(
        latency < Duration::from_secs(1),
        "reported after {latency:?}"
    );
    env.wait_source(
        "the default manifest's edit written back and reported",
        |s| drifted_is(s, &id, 1, "False", "DriftCorrected", what),
    )
    .await;
    println!(
        "{t}: the default manifest's edit written back and reported {:?} after the spoke's watch event",
        Instant::now().saturating_duration_since(since(&watches[1]))
    );
    env.wait_data("fixed", "color", "red").await;
    let kept = cms.get("kept").await.expect("kept");
    assert_eq!(
        kept.data.and_then(|d| d.get("color").cloned()).as_deref(),
        Some("blue"),
        "the ReportOnly object was written back"
    );
}

#[tokio::test]
async fn mqtt_report_only_kept_and_default_written_back() {
    report_only_kept_and_default_written_back(Transport::Mqtt).await;
}

#[tokio::test]
async fn grpc_report_only_kept_and_default_written_back() {
    report_only_kept_and_default_written_back(Transport::Grpc).await;
}
