//! The agent on a hub set up as OCM sets it up: the agent authenticates with a client certificate
//! issued by the hub's CA for `system:open-cluster-management:<cluster>:<agent>` (group
//! `system:open-cluster-management:<cluster>`), bound to upstream's work ClusterRole only. The
//! certificate rotates under the running agent; TTL deletion needs the `deploy/hub-ocm` addition
//! and without it fails visibly and harmlessly.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::agent_common::*;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use test_support::{
    AgentProcess, CertIdentity, TestCluster, apply_yaml, free_port, parse_yaml_documents,
    repo_root, run_dir, unique_name, wait_for, write_client_cert_kubeconfig,
};
use work_api::ManifestWork;

/// Upstream's `open-cluster-management:managedcluster:work` ClusterRole (what an OCM hub grants
/// every work agent), written out for the test.
const UPSTREAM_WORK_CLUSTERROLE: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: open-cluster-management:managedcluster:work
rules:
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch", "update"]
- apiGroups: ["work.open-cluster-management.io"]
  resources: ["manifestworks"]
  verbs: ["get", "list", "watch", "update", "patch"]
- apiGroups: ["work.open-cluster-management.io"]
  resources: ["manifestworks/status"]
  verbs: ["patch", "update"]
"#;

fn group(cluster: &str) -> String {
    format!("system:open-cluster-management:{cluster}")
}

/// The ClusterRole and its per-cluster RoleBinding to the cluster's group, as the OCM hub makes
/// them.
async fn apply_upstream_rbac(hub: &TestCluster, cluster: &str) {
    apply_yaml(&hub.client, UPSTREAM_WORK_CLUSTERROLE)
        .await
        .expect("upstream work ClusterRole");
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": format!("open-cluster-management:managedcluster:{cluster}:work"), "namespace": cluster},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "open-cluster-management:managedcluster:work"},
        "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": group(cluster)}],
    });
    apply_yaml(&hub.client, &binding.to_string())
        .await
        .expect("upstream work RoleBinding");
}

/// `deploy/hub-ocm` for `cluster`: namespace and group substituted as its comments say.
async fn apply_hub_ocm_addition(hub: &TestCluster, cluster: &str) {
    for file in [
        "deploy/hub-ocm/role.yaml",
        "deploy/hub-ocm/rolebinding.yaml",
    ] {
        let text = std::fs::read_to_string(repo_root().join(file)).expect("deploy/hub-ocm file");
        for mut doc in parse_yaml_documents(&text).expect("deploy/hub-ocm parses") {
            doc["metadata"]["namespace"] = json!(cluster);
            if let Some(subjects) = doc.get_mut("subjects").and_then(Value::as_array_mut) {
                for s in subjects {
                    assert_eq!(
                        s["kind"], "Group",
                        "{file}: the subject is the cluster's group"
                    );
                    s["name"] = json!(group(cluster));
                }
            }
            apply_yaml(&hub.client, &doc.to_string())
                .await
                .unwrap_or_else(|e| panic!("applying {file}: {e}"));
        }
    }
}

/// A directory for one agent's hub credentials, as the hub kubeconfig Secret is mounted.
fn credentials_dir(cluster: &str) -> PathBuf {
    run_dir().join("hub-credentials").join(cluster)
}

/// Hub with upstream RBAC, a certificate for the cluster's agent, the agent started with it.
async fn start_as_ocm_agent(prefix: &str, valid_for: Duration) -> (Env, PathBuf) {
    let hub = TestCluster::hub_upstream().await;
    let spoke = TestCluster::spoke().await;
    let cluster = hub.namespace(prefix).await;
    let ns = spoke.namespace(prefix).await;
    apply_upstream_rbac(&hub, &cluster).await;
    let dir = credentials_dir(&cluster);
    let kubeconfig = write_client_cert_kubeconfig(
        &hub,
        &dir,
        &CertIdentity::ocm_agent(&cluster, "agent"),
        valid_for,
    )
    .expect("client certificate from the hub's CA");
    let port = free_port();
    let agent = AgentProcess::start(agent_args_on(
        &kubeconfig,
        &spoke.kubeconfig,
        &cluster,
        port,
        &[],
    ));
    (Env::with_agent(hub, spoke, cluster, ns, agent, port), dir)
}

/// A work with one ConfigMap of a fresh name.
fn configmap_work(env: &Env) -> Value {
    json!({"workload": {"manifests": [configmap(&env.ns, &unique_name("cm"), json!({"a": "1"}))]}})
}

/// A work that completes at once (a rule that is true on any ConfigMap) with a TTL of 0.
fn completing_work(env: &Env, ttl: i64) -> Value {
    let cm = unique_name("cm");
    json!({
        "workload": {"manifests": [configmap(&env.ns, &cm, json!({"a": "1"}))]},
        "deleteOption": {"ttlSecondsAfterFinished": ttl},
        "manifestConfigs": [{
            "resourceIdentifier": {"group": "", "resource": "configmaps", "name": cm, "namespace": env.ns},
            "conditionRules": [{"type": "CEL", "condition": "Complete", "celExpressions": ["has(object.data)"]}]
        }]
    })
}

async fn wait_applied(env: &Env, name: &str) -> ManifestWork {
    env.wait_work(name, "Applied and Available", |w| {
        work_is(w, "Applied", "True") && work_is(w, "Available", "True")
    })
    .await
}

#[tokio::test]
async fn a_rotated_client_certificate_is_picked_up_before_the_old_one_expires() {
    const FIRST_VALIDITY: Duration = Duration::from_secs(60);
    let issued = Instant::now();
    let (mut env, dir) = start_as_ocm_agent("rotate", FIRST_VALIDITY).await;
    let first = env.work_name("before");
    env.create_work(&first, configmap_work(&env)).await;
    wait_applied(&env, &first).await;

    // The registration agent rewrites tls.crt/tls.key well before expiry.
    write_client_cert_kubeconfig(
        &env.hub,
        &dir,
        &CertIdentity::ocm_agent(&env.cluster, "agent"),
        Duration::from_secs(3600),
    )
    .expect("rotated certificate");
    wait_for("the agent logs the rebuilt hub client", TIMEOUT, || {
        let log = env.agent.log();
        async move { log.contains("hub client rebuilt").then_some(()) }
    })
    .await;

    // Let the first certificate expire, then give the agent new work.
    let expiry = FIRST_VALIDITY + Duration::from_secs(5);
    if let Some(left) = expiry.checked_sub(issued.elapsed()) {
        tokio::time::sleep(left).await;
    }
    let second = env.work_name("after");
    env.create_work(&second, configmap_work(&env)).await;
    let work = wait_applied(&env, &second).await;
    assert!(
        work.status
            .and_then(|s| s.resource_status)
            .is_some_and(|r| !r.manifests.is_empty()),
        "status written with the new certificate"
    );
    assert!(env.agent.is_running(), "log: {}", env.agent.log());
}

#[tokio::test]
async fn with_the_hub_ocm_addition_ttl_deletes_the_work() {
    let (env, _dir) = start_as_ocm_agent("ttl-ocm", Duration::from_secs(3600)).await;
    apply_hub_ocm_addition(&env.hub, &env.cluster).await;
    let name = env.work_name("ttl");
    env.create_work(&name, completing_work(&env, 1)).await;
    env.wait_work_gone(&name).await;
}

#[tokio::test]
async fn without_the_addition_a_forbidden_ttl_delete_is_visible_and_other_works_still_apply() {
    let (env, _dir) = start_as_ocm_agent("ttl-403", Duration::from_secs(3600)).await;
    let name = env.work_name("ttl");
    env.create_work(&name, completing_work(&env, 0)).await;
    env.wait_work(&name, "Complete", |w| work_is(w, "Complete", "True"))
        .await;

    let events: Api<Event> = Api::namespaced(env.hub.client.clone(), &env.cluster);
    let event = wait_for("a TTLDeletionForbidden Event on the work", TIMEOUT, || {
        let events = events.clone();
        let name = name.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some(gc::FORBIDDEN_EVENT_REASON)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
            })
        }
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let metrics = wait_for("the forbidden failure counted", TIMEOUT, || async {
        let body = http_get(env.http_port, "/metrics").await.ok()?;
        body.contains(r#"work_agent_ttl_deletion_failures_total{reason="forbidden"}"#)
            .then_some(body)
    })
    .await;
    assert!(!metrics.contains(r#"reason="forbidden"} 0"#), "{metrics}");
    let log = env.agent.log();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("forbidden") && l.contains(&name)),
        "a WARN line names the work: {log}"
    );

    // Nothing else breaks: the work stays, a new work applies, the agent runs on.
    let other = env.work_name("other");
    env.create_work(&other, configmap_work(&env)).await;
    wait_applied(&env, &other).await;
    assert!(env.works().get_opt(&name).await.expect("read").is_some());
    let mut agent = env.agent;
    assert!(agent.is_running(), "log: {}", agent.log());
    // Backoff, not a tight loop: the retries so far are few.
    let attempts = agent
        .log()
        .matches("TTL deletion forbidden by the hub")
        .count();
    assert!(attempts >= 1, "{}", agent.log());
}

#[tokio::test]
async fn works_of_a_manifestworkreplicaset_are_never_deleted_by_ttl() {
    let env = Env::start("mwrs").await;
    let owned = env.work_name("mwrs");
    let mut spec = completing_work(&env, 0);
    let work: ManifestWork = serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": owned, "namespace": env.cluster,
                     "labels": {gc::MANIFESTWORKREPLICASET_LABEL: "default.mwrs"}},
        "spec": spec.take(),
    }))
    .expect("work decodes");
    env.works()
        .create(&PostParams::default(), &work)
        .await
        .expect("create the replica set's work");
    env.wait_work(&owned, "Complete", |w| work_is(w, "Complete", "True"))
        .await;
    // A plain work with the same TTL, created after: once the agent has collected it, it had
    // every chance to collect the first one too.
    let plain = env.work_name("plain");
    env.create_work(&plain, completing_work(&env, 0)).await;
    env.wait_work_gone(&plain).await;
    let kept = env
        .works()
        .get_opt(&owned)
        .await
        .expect("read the replica set's work");
    assert!(
        kept.is_some_and(|w| work_is(&w, "Complete", "True")),
        "the replica set's work is kept"
    );
}
