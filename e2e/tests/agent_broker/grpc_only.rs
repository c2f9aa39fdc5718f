//! The cases that hold behind gRPC only: the server (broker and source in one) going away,
//! heartbeats, upstream's config file, a source that refuses a publish.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::json;
use test_support::broker_source::Transport;
use test_support::unique_name;
use work_api::AppliedManifestWork;

use crate::agent_common::{TIMEOUT, tail};
use crate::env::{BrokerEnv, bundle, metric};

#[tokio::test]
async fn a_server_restart_loses_nothing() {
    a_server_restart_loses_nothing_on(Transport::Grpc, "gRPC").await;
}

/// The server goes away (on Pub/Sub with every topic, subscription and message it held) while
/// the spoke and the source change; once it is back, both converge. `wire` is the transport's
/// name in the agent's log.
pub async fn a_server_restart_loses_nothing_on(t: Transport, wire: &str) {
    let mut env = BrokerEnv::start(t, "server-restart").await;
    let (a, b) = env.two_applied_works().await;

    env.hub.stop_hub().await;
    env.wait_log(
        "the agent notices the server is gone",
        &format!("{wire} connection lost; reconnecting"),
    )
    .await;
    // While the server is away: a spoke change the agent must report, and the source updates
    // a, deletes b and creates c (its store survives, its events reach nobody).
    let cms = env.configmaps();
    cms.delete("a", &Default::default())
        .await
        .expect("delete a's ConfigMap");
    let c = env.change_a_delete_b_create_c(&a, &b);
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.hub
        .start_hub()
        .await
        .expect("the server comes back on its port");

    env.wait_changes_converged(&a, &b, &c).await;
    assert!(env.source().counters().spec_resync_requests >= 2);
    let metrics = env.metrics().await;
    assert!(
        metric(&metrics, "cloudevents_client_reconnected_total").is_some_and(|n| n >= 1),
        "{metrics}"
    );
}

#[tokio::test]
async fn no_heartbeat_within_the_healthiness_timeout_means_reconnect() {
    let mut env = BrokerEnv::start_with(
        Transport::Grpc,
        "heartbeat",
        "serverHealthinessTimeout: 3s\n",
    )
    .await;
    env.wait_source("subscribed", |s| s.counters().spec_resync_requests >= 1)
        .await;
    let waited = env
        .grpc()
        .wait_until(|s| s.heartbeats_sent() >= 4, TIMEOUT)
        .await;
    env.expect_source("heartbeats flow", waited);
    assert_eq!(
        env.source().counters().subscriptions,
        1,
        "heartbeats every 500 ms keep a 3 s timeout quiet"
    );
    env.grpc().set_heartbeats(false);
    env.wait_source("the agent subscribes again", |s| {
        s.counters().subscriptions >= 2 && s.counters().spec_resync_requests >= 2
    })
    .await;
    assert!(
        env.log().contains("serverHealthinessTimeout"),
        "the reason is logged:\n{}",
        tail(&env.log())
    );
    env.grpc().set_heartbeats(true);
    let id = env.create(bundle(&env.ns, "after", json!({"v": "1"})));
    env.wait_applied(&id).await;
}

#[test]
fn a_config_without_a_url_or_client_id_is_a_one_line_error() {
    let dir = std::env::temp_dir().join(unique_name("grpc-bad-config"));
    std::fs::create_dir_all(&dir).expect("dir");
    let bad = dir.join("grpcconfig");
    std::fs::write(&bad, "caFile: /nonexistent\n").expect("write");
    let bin = std::env::var(test_support::AGENT_BIN_ENV).expect("WORK_AGENT_BIN");
    for (args, expected) in [
        (
            vec![
                "--cloudevents-client-id=c1-work-agent".to_string(),
                format!("--workload-source-config={}", bad.display()),
            ],
            "url",
        ),
        (
            vec![format!("--workload-source-config={}", bad.display())],
            "--cloudevents-client-id",
        ),
    ] {
        let out = std::process::Command::new(&bin)
            .args([
                "agent",
                "--spoke-cluster-name=c1",
                "--workload-source-driver=grpc",
            ])
            .args(&args)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// As upstream's agent orders a deletion: the source takes the work's `Deleting` before the
/// cleanup starts. While the source refuses that status, the AppliedManifestWork is not deleted
/// and the resources stay; once it takes it, the cleanup runs and `Deleted` follows.
#[tokio::test]
async fn the_cleanup_starts_once_the_source_took_deleting() {
    let mut env = BrokerEnv::start(Transport::Grpc, "deleting").await;
    let id = env.create(bundle(&env.ns, "held", json!({"v": "1"})));
    env.wait_data("held", "v", "1").await;
    env.wait_applied(&id).await;
    let refused_before = env.grpc().publishes_refused();
    // Four refusals: about 1.5 s of retries (100 ms, doubling).
    env.grpc().refuse_resource(&id, 4);
    env.source().delete(&id).expect("delete");
    // The agent had its chance: it heard the deletion and sent `Deleting` three times already.
    let waited = env
        .grpc()
        .wait_until(|s| s.publishes_refused() >= refused_before + 3, TIMEOUT)
        .await;
    env.expect_source("Deleting refused three times", waited);
    let applied: Api<AppliedManifestWork> = Api::all(env.spoke.client.clone());
    let amw = applied
        .get(&env.amw_name(&id))
        .await
        .expect("the AppliedManifestWork is there");
    assert!(
        amw.metadata.deletion_timestamp.is_none(),
        "the cleanup started before the source took Deleting\n{}",
        tail(&env.log())
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.spoke.client.clone(), &env.ns);
    assert!(cms.get_opt("held").await.expect("read").is_some());
    env.wait_source("Deleted reported once Deleting was taken", |s| {
        s.hard_deleted(&id)
    })
    .await;
    env.wait_gone("held").await;
}
