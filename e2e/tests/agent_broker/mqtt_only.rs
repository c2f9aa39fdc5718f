//! The cases that hold behind MQTT only: Maestro's status resync request, Maestro's agent
//! command line, a source that goes away while the broker stays.

use std::time::Duration;

use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use test_support::broker_source::Transport;
use test_support::maestro::Maestro;
use test_support::wait_for;
use work_api::AppliedManifestWork;

use crate::agent_common::{TIMEOUT, configmap, job, job_complete_config, tail};
use crate::env::{BrokerEnv, bundle, configmap_config};

#[tokio::test]
async fn status_resync_and_a_broker_restart_lose_nothing() {
    status_resync_and_a_broker_restart_lose_nothing_on(Transport::Mqtt).await;
}

/// Maestro's status resync requests are answered (only for a hash that differs), and a status
/// produced while the broker was away (a feedback value) reaches the source once it is back.
pub async fn status_resync_and_a_broker_restart_lose_nothing_on(t: Transport) {
    let mut env = BrokerEnv::start(t, "resync").await;
    let ns = env.ns.clone();
    let id = env.create(json!({
                "manifests": [configmap(&ns, "fb", json!({"k": "v"}))],
                "manifestConfigs": [configmap_config(&ns, "fb", json!({
                    "updateStrategy": {"type": "ServerSideApply"},
                    "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [{"name": "note", "path": ".metadata.annotations.note"}]}]
                }))]
            }));
    env.wait_applied(&id).await;

    // A status resync listing a hash the agent's status does not have is answered...
    let answered = |s: &Maestro| {
        s.counters()
            .status_events_by_type
            .get(&cloudevents::EventType::StatusResyncResponse)
            .copied()
            .unwrap_or(0)
    };
    env.source()
        .request_status_resync(&env.consumer, vec![(id.clone(), "not-the-hash".into())])
        .expect("resync");
    env.wait_source("the status resync is answered", |s| answered(s) == 1)
        .await;
    // ... one listing the current hash is not (checked after a later request that is answered).
    let hash = env.source().status_hash(&id).expect("hash");
    env.source()
        .request_status_resync(&env.consumer, vec![(id.clone(), hash)])
        .expect("resync");
    env.source()
        .request_status_resync(&env.consumer, vec![])
        .expect("resync all");
    env.wait_source("the resync of all is answered", |s| answered(s) == 2)
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(answered(env.source()), 2, "a current hash is not answered");

    // The broker goes away; a status produced meanwhile is sent once it is back.
    env.hub.stop_hub().await;
    let cms = env.configmaps();
    cms.patch(
        "fb",
        &PatchParams::apply("someone-else").force(),
        &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "fb", "annotations": {"note": "while-away"}}
        })),
    )
    .await
    .expect("annotate");
    wait_for(
        "the agent reconciled the change while the broker was away",
        TIMEOUT,
        || async {
            env.metrics()
                .await
                .lines()
                .any(|l| l.starts_with("cloudevents_publish_queue_depth ") && !l.ends_with(" 0"))
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.hub.start_hub().await.expect("broker back");
    env.wait_source("the feedback produced while away reaches the source", |s| {
        s.status(&id)
            .is_some_and(|st| st.to_string().contains("while-away"))
    })
    .await;
    // And new work still flows.
    let after = env.create(bundle(&env.ns, "after", json!({"v": "1"})));
    env.wait_applied(&after).await;
    assert!(
        env.metrics()
            .await
            .contains("cloudevents_client_reconnected_total")
    );
}

/// Maestro's agent chart line (`--consumer-name`) gets `maestro agent`'s raw feedback settings:
/// a JSONPath that selects an object reaches the source as a JsonRaw value, as it does from
/// Maestro's Go agent (upstream's defaults would drop it and report StatusFeedbackSynced=False).
#[tokio::test]
async fn maestros_command_line_reports_raw_json_feedback_as_maestros_agent_does() {
    let env = BrokerEnv::start(Transport::Mqtt, "rawfb").await;
    let mut b = bundle(&env.ns, "rawfb", json!({"k": "v"}));
    b["manifestConfigs"] = json!([configmap_config(
        &env.ns,
        "rawfb",
        json!({
            "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [{"name": "data", "path": ".data"}]}]
        })
    )]);
    let id = env.create(b);
    env.wait_source("the raw JSON feedback value at the source", |s| {
        s.resource(&id)
            .and_then(|r| r.status)
            .is_some_and(|status| {
                status["resourceStatus"][0]["statusFeedback"]["values"]
                    .as_array()
                    .is_some_and(|values| {
                        values.iter().any(|v| {
                            v["name"] == "data"
                                && v["fieldValue"]["type"] == "JsonRaw"
                                && v["fieldValue"]["jsonRaw"] == r#"{"k":"v"}"#
                        })
                    })
            })
    })
    .await;
}

/// Found by `chaos --hub grpc` (and in CI): the agent deleted a completed work at its TTL and
/// cleaned it up, the source did not hear `Deleted` (it was away), and the agent was killed.
/// The restarted agent got the work back from the source, which still had it, and must not apply
/// it again: the AppliedManifestWork that holds its completion stays until the source heard the
/// deletion.
#[tokio::test]
async fn a_ttl_deletion_the_source_did_not_hear_is_not_undone_by_a_restart() {
    let mut env = BrokerEnv::start(Transport::Mqtt, "unheard").await;
    // Not the cluster's only work (see `a_job_completes_and_its_ttl_deletes_the_work`).
    let other = env.create(bundle(&env.ns, "other", json!({"v": "1"})));
    env.wait_applied(&other).await;
    let id = env.create(json!({
        "manifests": [job(&env.ns, "once"), configmap(&env.ns, "side", json!({"v": "1"}))],
        "manifestConfigs": [job_complete_config(&env.ns, "once")],
        "deleteOption": {"propagationPolicy": "Foreground", "ttlSecondsAfterFinished": 5}
    }));
    env.wait_source("Complete=True at the source", |s| {
        s.condition_status(&id, "Complete").as_deref() == Some("True")
    })
    .await;
    env.mqtt().go_away();
    wait_for(
        "the TTL deletion cleaned up while the source is away",
        TIMEOUT,
        || async {
            env.log()
                .contains("cleanup done; Deleted sent to the source")
                .then_some(())
        },
    )
    .await;
    env.wait_gone("side").await;
    let amws: Api<AppliedManifestWork> = Api::all(env.spoke.client.clone());
    let amw_name = env.amw_name(&id);
    let kept = amws.get_opt(&amw_name).await.expect("read").expect(
        "the AppliedManifestWork holding the completion stays until the source hears the deletion",
    );
    assert!(
        kept.metadata.deletion_timestamp.is_some(),
        "its deletion has started"
    );
    env.kill_agent();
    assert!(
        !env.source().hard_deleted(&id),
        "the source never heard Deleted"
    );

    // Every ConfigMap the spoke gets in the namespace from now on.
    use futures::StreamExt;
    let created = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = created.clone();
    let watch = tokio::spawn(
        kube::runtime::watcher(env.configmaps(), kube::runtime::watcher::Config::default())
            .for_each(move |event| {
                if let Ok(
                    kube::runtime::watcher::Event::Apply(cm)
                    | kube::runtime::watcher::Event::InitApply(cm),
                ) = event
                {
                    seen.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(cm.metadata.name.unwrap_or_default());
                }
                std::future::ready(())
            }),
    );
    env.mqtt().restart(1000).await.expect("the source is back");
    env.start_agent();
    // The restarted agent had its chance: the source sends it the work (it never heard the
    // deletion), and it is gone from the source only once the new agent sent `Deleted`.
    env.wait_source("the restarted agent deletes the work again", |s| {
        s.hard_deleted(&id)
    })
    .await;
    wait_for(
        "the AppliedManifestWork is released once Deleted was heard",
        TIMEOUT,
        || async { amws.get_opt(&amw_name).await.ok()?.is_none().then_some(()) },
    )
    .await;
    watch.abort();
    let created = created
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    assert!(
        !created.iter().any(|n| n == "side"),
        "the completed work was applied again after the restart: {created:?}\n{}",
        tail(&env.log())
    );
    let jobs: Api<k8s_openapi::api::batch::v1::Job> =
        Api::namespaced(env.spoke.client.clone(), &env.ns);
    assert!(jobs.get_opt("once").await.expect("read").is_none());
}
