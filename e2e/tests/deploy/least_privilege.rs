//! Least privilege, checked: the shipped Roles list exactly the verbs the code calls (a table
//! test on the YAML), and the whole flow (apply, status, completion, TTL, deletion, eviction)
//! runs as ServiceAccounts holding exactly the shipped RBAC on the hub and on the spoke.

use std::collections::BTreeMap;

use crate::agent_common::*;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use test_support::{
    AgentProcess, TestCluster, apply_yaml, free_port, parse_yaml_documents, repo_root,
    service_account_kubeconfig, unique_name, wait_for,
};

/// `(apiGroups, resources) -> verbs` of every rule of every Role/ClusterRole in `file`, keyed by
/// `<role name>: <groups> <resources>`.
fn rules_of(file: &str) -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(repo_root().join(file)).expect("RBAC file");
    let mut out = BTreeMap::new();
    for doc in parse_yaml_documents(&text).expect("RBAC parses") {
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let join = |v: &Value| {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .map(|x| x.as_str().unwrap_or_default().to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default()
        };
        for rule in doc["rules"].as_array().cloned().unwrap_or_default() {
            let key = format!(
                "{name}: [{}] [{}]",
                join(&rule["apiGroups"]),
                join(&rule["resources"])
            );
            let verbs = rule["verbs"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            out.insert(key, verbs);
        }
    }
    out
}

fn expect(entries: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
        .collect()
}

#[test]
fn the_shipped_roles_grant_exactly_the_verbs_the_agent_uses() {
    let table: [(&str, BTreeMap<String, Vec<String>>); 4] = [
        (
            "deploy/hub/role.yaml",
            expect(&[
                (
                    "open-cluster-management:work-agent: [work.open-cluster-management.io] [manifestworks]",
                    &["get", "list", "watch", "patch", "delete"],
                ),
                (
                    "open-cluster-management:work-agent: [work.open-cluster-management.io] [manifestworks/status]",
                    &["patch"],
                ),
                (
                    "open-cluster-management:work-agent: [events.k8s.io] [events]",
                    &["create", "patch"],
                ),
            ]),
        ),
        (
            "deploy/hub-ocm/role.yaml",
            expect(&[(
                "open-cluster-management:work-agent:ttl: [work.open-cluster-management.io] [manifestworks]",
                &["delete"],
            )]),
        ),
        (
            "deploy/base/role.yaml",
            expect(&[
                (
                    "work-agent: [coordination.k8s.io] [leases]",
                    &["get", "create", "update"],
                ),
                ("work-agent: [] [configmaps]", &["get", "create", "patch"]),
            ]),
        ),
        (
            "deploy/base/clusterrole.yaml",
            expect(&[
                (
                    "open-cluster-management:work-agent: [work.open-cluster-management.io] [appliedmanifestworks]",
                    &["get", "list", "watch", "create", "patch", "delete"],
                ),
                (
                    "open-cluster-management:work-agent: [work.open-cluster-management.io] [appliedmanifestworks/status]",
                    &["patch"],
                ),
                (
                    "open-cluster-management:work-agent: [authorization.k8s.io] [subjectaccessreviews]",
                    &["create"],
                ),
                (
                    "open-cluster-management:work-agent: [] [serviceaccounts]",
                    &["impersonate"],
                ),
                (
                    "open-cluster-management:work-agent: [rbac.authorization.k8s.io] [roles,rolebindings,clusterroles,clusterrolebindings]",
                    &["list", "watch"],
                ),
                (
                    "open-cluster-management:work-agent: [] [namespaces]",
                    &["list", "watch"],
                ),
                (
                    "open-cluster-management:work-agent: [apiextensions.k8s.io] [customresourcedefinitions]",
                    &["list", "watch"],
                ),
                (
                    "open-cluster-management:work-agent:execution-default: [*] [*]",
                    &[
                        "get", "list", "watch", "create", "update", "patch", "delete",
                    ],
                ),
                (
                    "open-cluster-management:work-agent:execution-default: [rbac.authorization.k8s.io] [roles,rolebindings,clusterroles,clusterrolebindings]",
                    &["escalate", "bind"],
                ),
            ]),
        ),
    ];
    for (file, expected) in table {
        assert_eq!(rules_of(file), expected, "{file}");
    }
    for (file, rules) in [
        (
            "deploy/base/clusterrole.yaml",
            rules_of("deploy/base/clusterrole.yaml"),
        ),
        ("deploy/hub/role.yaml", rules_of("deploy/hub/role.yaml")),
    ] {
        for (rule, verbs) in &rules {
            assert!(!verbs.iter().any(|v| v == "*"), "{file}: {verbs:?}");
            // Impersonation only of ServiceAccounts (an executor's dry-run escalation check),
            // never of users or groups.
            assert!(
                !verbs.iter().any(|v| v == "impersonate") || rule.ends_with("[] [serviceaccounts]"),
                "{file}: {rule}: {verbs:?}"
            );
        }
    }
}

/// Applies every document of `file` after `edit`, as admin.
async fn apply_file(cluster: &TestCluster, file: &str, edit: impl Fn(&mut Value)) {
    let text = std::fs::read_to_string(repo_root().join(file)).expect("deploy file");
    for mut doc in parse_yaml_documents(&text).expect("deploy file parses") {
        edit(&mut doc);
        apply_yaml(&cluster.client, &doc.to_string())
            .await
            .unwrap_or_else(|e| panic!("applying {file}: {e}"));
    }
}

/// Points every subject of a binding at ServiceAccount `ns/sa`.
fn bind_to(doc: &mut Value, ns: &str, sa: &str) {
    if let Some(subjects) = doc.get_mut("subjects").and_then(Value::as_array_mut) {
        for s in subjects {
            s["namespace"] = json!(ns);
            s["name"] = json!(sa);
        }
    }
}

/// The Role `role-writer` in `ns` (YAML): `verbs` on Roles, for the executor `deployer`.
fn role_writer(ns: &str, verbs: &str) -> String {
    format!(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: role-writer, namespace: {ns}}}
rules:
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles]
  verbs: [{verbs}]
"#
    )
}

/// Applies `role.yaml` and `rolebinding.yaml` of `dir` in `namespace`, bound to its
/// ServiceAccount `work-agent`.
async fn apply_role(cluster: &TestCluster, dir: &str, namespace: &str) {
    for file in ["role.yaml", "rolebinding.yaml"] {
        apply_file(cluster, &format!("{dir}/{file}"), |doc| {
            doc["metadata"]["namespace"] = json!(namespace);
            bind_to(doc, namespace, "work-agent");
        })
        .await;
    }
}

/// The spoke's shipped RBAC: deploy/base's ClusterRoles as shipped, the bindings renamed per
/// test (they are cluster-wide) and bound to the ServiceAccount `work-agent` of `agent_ns`, the
/// Role in `agent_ns`; the ServiceAccount's kubeconfig once the execution ClusterRole is
/// aggregated. With `execution`, the execution binding names that ClusterRole instead (a team
/// that narrowed it to what its works contain).
async fn ship_spoke_rbac(
    spoke: &TestCluster,
    agent_ns: &str,
    execution: Option<&str>,
) -> std::path::PathBuf {
    apply_file(spoke, "deploy/base/clusterrole.yaml", |_| {}).await;
    let binding_suffix = unique_name("least");
    apply_file(spoke, "deploy/base/clusterrolebinding.yaml", |doc| {
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        doc["metadata"]["name"] = json!(format!("{name}:{binding_suffix}"));
        bind_to(doc, agent_ns, "work-agent");
        if let Some(role) = execution
            && name.ends_with(":execution")
        {
            doc["roleRef"]["name"] = json!(role);
        }
    })
    .await;
    apply_role(spoke, "deploy/base", agent_ns).await;
    let spoke_kubeconfig = service_account_kubeconfig(spoke, agent_ns, "work-agent").await;
    // The execution ClusterRole is aggregated by the controller manager.
    let roles: Api<ClusterRole> = Api::all(spoke.client.clone());
    wait_for("the execution ClusterRole aggregated", TIMEOUT, || {
        let roles = roles.clone();
        async move {
            let role = roles
                .get_opt("open-cluster-management:work-agent:execution")
                .await
                .ok()??;
            role.rules.filter(|r| !r.is_empty()).map(|_| ())
        }
    })
    .await;
    spoke_kubeconfig
}

#[tokio::test]
async fn the_whole_flow_runs_with_exactly_the_shipped_rbac_on_both_sides() {
    let hub = TestCluster::hub().await;
    let spoke = TestCluster::spoke().await;
    let cluster = hub.namespace("least").await;
    let ns = spoke.namespace("least").await;
    let agent_ns = spoke.namespace("least-agent").await;

    // Hub: deploy/hub's Role and RoleBinding in the cluster namespace.
    apply_role(&hub, "deploy/hub", &cluster).await;
    let hub_kubeconfig = service_account_kubeconfig(&hub, &cluster, "work-agent").await;

    let spoke_kubeconfig = ship_spoke_rbac(&spoke, &agent_ns, None).await;

    let port = free_port();
    let mut args = agent_args_on(
        &hub_kubeconfig,
        &spoke_kubeconfig,
        &cluster,
        port,
        &[
            format!("--lease-namespace={agent_ns}"),
            "--appliedmanifestwork-eviction-grace-period=3s".to_string(),
        ],
    );
    for arg in &mut args {
        if arg == "--leader-elect=false" {
            *arg = "--leader-elect=true".to_string();
        }
    }
    let agent = AgentProcess::start(&args);
    let mut env = Env::with_agent(hub, spoke, cluster, ns, agent, port);

    // Apply, status, completion and TTL.
    let ttl = env.work_name("ttl");
    env.create_work(
        &ttl,
        json!({
            "workload": {"manifests": [configmap(&env.ns, "ttl-cm", json!({"a": "1"})), job(&env.ns, "j")]},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "batch", "resource": "jobs", "name": "j", "namespace": env.ns},
                "conditionRules": [{"type": "WellKnownCompletions"}]
            }],
            "deleteOption": {"ttlSecondsAfterFinished": 2},
        }),
    )
    .await;
    env.wait_work(&ttl, "Applied, Available and Complete", |w| {
        work_is(w, "Applied", "True") && work_is(w, "Complete", "True")
    })
    .await;
    env.wait_work_gone(&ttl).await;
    env.wait_object_gone(&env.configmaps(), "ttl-cm").await;

    // Deletion by the user.
    let deleted = env.work_name("delete");
    env.create_configmaps(&deleted, &["deleted-cm"], "Applied")
        .await;
    env.delete_work(&deleted).await;
    env.wait_work_gone(&deleted).await;
    env.wait_object_gone(&env.configmaps(), "deleted-cm").await;

    // Eviction: the work disappears from the hub while the agent is down.
    let evicted = env.work_name("evict");
    env.create_configmaps(&evicted, &["evicted-cm"], "Applied")
        .await;
    env.agent.stop();
    env.works()
        .patch(
            &evicted,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("drop the finalizer as admin");
    env.delete_work(&evicted).await;
    env.wait_work_gone(&evicted).await;
    env.agent = AgentProcess::start(&args);
    env.wait_object_gone(&env.configmaps(), "evicted-cm").await;
    env.wait_applied_work_gone(&evicted).await;
    let log = env.agent.log();
    assert!(
        // A refusal reads "403 Forbidden" or "forbidden: ..."; "403" alone also matches the
        // milliseconds of a timestamp.
        !log.to_lowercase().contains("forbidden"),
        "no request was refused: {log}"
    );

    // Executor checks of an RBAC manifest (a dry-run create as the executor, which needs the
    // shipped `impersonate` on ServiceAccounts): a Role granting more than the executor holds is
    // refused, and allowed once the executor may escalate, without an edit of the work.
    let sa_and_role = format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: deployer, namespace: {ns}}}
---
{role}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: role-writer, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: role-writer}}
subjects:
- {{kind: ServiceAccount, name: deployer, namespace: {ns}}}
"#,
        ns = env.ns,
        role = role_writer(&env.ns, "create, update, patch, get, delete")
    );
    test_support::apply_yaml(&env.spoke.client, &sa_and_role)
        .await
        .expect("executor ServiceAccount and its Role");
    let granting = env.work_name("executor-rbac");
    env.create_work(
        &granting,
        json!({
            "workload": {"manifests": [{
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "cm-admin", "namespace": env.ns},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}],
            }]},
            "executor": {"subject": {"type": "ServiceAccount",
                "serviceAccount": {"namespace": env.ns, "name": "deployer"}}}
        }),
    )
    .await;
    let work = env
        // The API server's authorizer takes a moment to see new RBAC: until then the verbs
        // themselves are refused.
        .wait_work(&granting, "Applied False: escalation", |w| {
            manifest_condition(w, 0, "Applied")
                .is_some_and(|c| c.status == "False" && c.message.contains("permission escalation"))
        })
        .await;
    let applied = manifest_condition(&work, 0, "Applied").expect("Applied");
    assert!(
        applied.message.contains("permission escalation"),
        "{}",
        applied.message
    );
    let escalate = role_writer(&env.ns, "create, update, patch, get, delete, escalate");
    test_support::apply_yaml(&env.spoke.client, &escalate)
        .await
        .expect("let the executor escalate");
    env.wait_work(&granting, "Applied True once it may escalate", |w| {
        manifest_is(w, 0, "Applied", "True")
    })
    .await;
}

/// Behind a broker the agent also keeps the works its source deletes in a ConfigMap of its
/// namespace: that runs with exactly the shipped spoke RBAC too, with the execution ClusterRole
/// narrowed to Secrets (so nothing but the shipped Role lets the agent write ConfigMaps).
#[tokio::test]
async fn a_broker_agent_runs_with_exactly_the_shipped_spoke_rbac() {
    use test_support::broker_source::{BrokerSource, Transport};
    let spoke = TestCluster::spoke().await;
    let ns = spoke.namespace("least-broker").await;
    let agent_ns = spoke.namespace("least-broker-agent").await;
    let secrets_only = unique_name("least-secrets");
    apply_yaml(
        &spoke.client,
        &format!(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {secrets_only}}}
rules:
  - apiGroups: [""]
    resources: ["secrets"]
    verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
"#
        ),
    )
    .await
    .expect("the narrowed execution ClusterRole");
    let spoke_kubeconfig = ship_spoke_rbac(&spoke, &agent_ns, Some(&secrets_only)).await;

    let source = BrokerSource::start(Transport::Mqtt, "least", Default::default())
        .await
        .unwrap_or_else(|e| panic!("the test source: {e}"));
    let consumer = unique_name("least");
    source
        .add_consumer(&consumer)
        .await
        .unwrap_or_else(|e| panic!("the test source: {e}"));
    let dir = test_support::run_dir().join(format!("least-{consumer}"));
    let config = source
        .write_agent_config(&consumer, "", &dir)
        .unwrap_or_else(|e| panic!("agent config: {e}"));
    let args = source
        .transport()
        .agent_args(&consumer, &config, &spoke_kubeconfig);
    let agent = AgentProcess::start_with_env(
        args.iter()
            .map(String::as_str)
            .chain(["--health-address=off", "--http-address=127.0.0.1:0"]),
        [("WORK_AGENT_LEASE_NAMESPACE", agent_ns.as_str())],
    );
    let maestro = source.maestro();
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "via-broker", "namespace": ns}, "stringData": {"a": "1"}});
    let bundle = json!({"manifests": [secret]});
    let id = maestro.create(&consumer, bundle).expect("create");
    let applied = maestro
        .wait_until(
            |s| s.condition_status(&id, "Applied").as_deref() == Some("True"),
            TIMEOUT,
        )
        .await;
    assert!(applied.is_ok(), "{applied:?}\n{}", agent.log());
    maestro.delete(&id).expect("delete");
    let heard = maestro.wait_until(|s| s.hard_deleted(&id), TIMEOUT).await;
    assert!(heard.is_ok(), "{heard:?}\n{}", agent.log());
    let kept =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(spoke.client.clone(), &agent_ns)
            .get(&format!("work-agent-{consumer}-deleted"))
            .await
            .expect("the kept deletions");
    assert!(
        kept.data.unwrap_or_default().contains_key(&id),
        "the deletion is kept"
    );
    let log = agent.log();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "no request was refused: {log}"
    );
}
