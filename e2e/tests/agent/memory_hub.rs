//! The whole agent runtime against a hub kept in memory (`agent::hub::MemoryHub`) and a real
//! spoke API server: no hub API server is involved, so this is the work logic behind the hub
//! seam — create, update, complete, TTL deletion, deletion by the owner — and the requests it
//! makes of the hub.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent::AgentConfig;
use agent::hub::{Hub, MemoryHub};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use test_support::{TestCluster, free_port, unique_name, wait_for};
use work_api::ManifestWork;

const WAIT: Duration = Duration::from_secs(60);

fn work(name: &str, ns: &str, phase: &str, ttl: Option<i64>) -> ManifestWork {
    let mut spec = json!({
        "workload": {"manifests": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns},
            "data": {"phase": phase},
        }]},
        "manifestConfigs": [{
            "resourceIdentifier": {"group": "", "resource": "configmaps", "name": name, "namespace": ns},
            "conditionRules": [{"condition": "Complete", "type": "CEL",
                "celExpressions": ["object.data.phase == 'done'"]}],
        }],
    });
    if let Some(ttl) = ttl {
        spec["deleteOption"] =
            json!({"propagationPolicy": "Foreground", "ttlSecondsAfterFinished": ttl});
    }
    serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("test ManifestWork decodes")
}

fn condition<'a>(work: &'a ManifestWork, type_: &str) -> Option<&'a str> {
    crate::agent_common::work_condition(work, type_).map(|c| c.status.as_str())
}

async fn configmap_phase(api: &Api<ConfigMap>, name: &str) -> Option<String> {
    let cm = api.get_opt(name).await.ok()??;
    cm.data?.get("phase").cloned()
}

/// Every `phase` the named ConfigMap has been seen with, from a watch started now: a state the
/// agent passes through on its way (applied, then deleted by the TTL) is seen however short.
fn phases_seen(api: Api<ConfigMap>, name: &str) -> Arc<Mutex<BTreeSet<String>>> {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let into = seen.clone();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher::watcher(api, config).applied_objects());
        while let Some(event) = events.next().await {
            let Ok(cm) = event else { continue };
            if let Some(phase) = cm.data.and_then(|d| d.get("phase").cloned()) {
                into.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(phase);
            }
        }
    });
    seen
}

async fn wait_gone(api: &Api<ConfigMap>, name: &str, description: &str) {
    wait_for(description, WAIT, || async {
        api.get_opt(name)
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_agent_runs_a_work_lifecycle_against_a_hub_in_memory() {
    // The agent's log goes with the test's output, shown when it fails.
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("agent=debug,applier=debug")
        .try_init();
    let spoke = TestCluster::spoke().await;
    let ns = spoke.namespace("memhub").await;
    let cluster = unique_name("memory-cluster");
    let hub = MemoryHub::new(&cluster);
    let config = AgentConfig::new(
        cluster.clone(),
        "memory-agent".into(),
        "https://hub.invalid",
    )
    .with_http_address(([127, 0, 0, 1], free_port()).into())
    .with_ttl_deletion_events(true);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(agent::run_until(
        config,
        Arc::new(hub.clone()) as Arc<dyn Hub>,
        spoke.client.clone(),
        async move {
            let _ = stop_rx.await;
        },
    ));
    let configmaps: Api<ConfigMap> = Api::namespaced(spoke.client.clone(), &ns);

    // Create: applied on the spoke, finalizer and status on the hub, not complete yet.
    let name = unique_name("job");
    let phases = phases_seen(configmaps.clone(), &name);
    hub.apply(work(&name, &ns, "running", Some(1)));
    wait_for("ConfigMap applied on the spoke", WAIT, || async {
        (configmap_phase(&configmaps, &name).await.as_deref() == Some("running")).then_some(())
    })
    .await;
    let applied = wait_for("Applied True on the hub", WAIT, || async {
        hub.work(&name).filter(|w| {
            condition(w, "Applied") == Some("True") && condition(w, "Available") == Some("True")
        })
    })
    .await;
    assert!(
        applied
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == work_api::MANIFEST_WORK_FINALIZER),
        "the agent put its finalizer on the work: {:?}",
        applied.metadata.finalizers
    );
    assert_ne!(
        condition(&applied, "Complete"),
        Some("True"),
        "not complete while running"
    );

    // Update: the new spec reaches the spoke and makes the rule true: Complete. The TTL may
    // delete the ConfigMap moments later, so the update is looked for in what the watch saw.
    hub.apply(work(&name, &ns, "done", Some(1)));
    wait_for("ConfigMap updated on the spoke", WAIT, || async {
        phases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains("done")
            .then_some(())
    })
    .await;

    // Complete, then the TTL: the agent deletes the work on the hub, cleans up the spoke and
    // releases its finalizer, so the work is gone.
    wait_for("the work deleted by its TTL", WAIT, || async {
        hub.work(&name).is_none().then_some(())
    })
    .await;
    wait_gone(&configmaps, &name, "its ConfigMap removed from the spoke").await;
    let events = hub.events();
    assert!(
        events
            .iter()
            .any(|e| e.work == name && e.reason == gc::EVENT_REASON),
        "a TTL deletion Event was recorded: {events:?}"
    );

    // Deleted by its owner: the spoke's object goes, then the work.
    let other = unique_name("service");
    hub.apply(work(&other, &ns, "running", None));
    wait_for("second work applied", WAIT, || async {
        hub.work(&other)
            .filter(|w| condition(w, "Applied") == Some("True"))
    })
    .await;
    assert!(hub.delete(&other), "the owner deletes the work");
    wait_gone(&configmaps, &other, "second work's ConfigMap removed").await;
    wait_for("second work gone from the hub", WAIT, || async {
        hub.work(&other).is_none().then_some(())
    })
    .await;

    // Idle: with every work settled, the agent asks nothing more of the hub. It had the chance:
    // it is running, and it wrote to this hub moments ago.
    let settled = hub.requests();
    assert!(
        settled.status_writes > 0 && settled.finalizer_writes >= 4,
        "{settled:?}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(hub.requests(), settled, "no hub request while idle");
    assert!(!running.is_finished(), "the agent is still running");

    let _ = stop_tx.send(());
    let stopped = tokio::time::timeout(WAIT, running).await;
    assert!(
        matches!(stopped, Ok(Ok(Ok(())))),
        "the agent stops cleanly on shutdown: {stopped:?}"
    );
}
