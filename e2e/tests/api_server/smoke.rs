//! Smoke tests proving the local control plane is a real one: controllers, scheduler and the
//! kwok node make Jobs complete, the API server enforces server-side-apply ownership and RBAC,
//! and the garbage collector honours foreground deletion. If these fail, every other
//! integration test is suspect.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use test_support::{
    AgentProcess, TestCluster, apply_yaml_in, client_from_kubeconfig, our_crds_dir,
    parse_yaml_documents, service_account_kubeconfig, upstream_crds_dir, wait_for,
};

/// Generous: two cores shared by three control planes and parallel tests.
const TIMEOUT: Duration = Duration::from_secs(90);

fn conditions_summary(job: &Job) -> String {
    let conds = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|cs| {
            cs.iter()
                .map(|c| format!("{}={}", c.type_, c.status))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    format!("conditions [{conds}]")
}

#[tokio::test]
async fn job_created_through_the_api_runs_to_complete() {
    let spoke = TestCluster::spoke().await;
    let ns = spoke.namespace("smoke-job").await;
    let jobs: Api<Job> = Api::namespaced(spoke.client.clone(), &ns);
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "hello"},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.invalid/noop:1", "command": ["true"]}]
            }}
        }
    }))
    .expect("static Job manifest");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create Job");

    wait_for("Job hello to be Complete", TIMEOUT, || async {
        let job = jobs.get("hello").await.map_err(|e| e.to_string())?;
        let complete = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Complete" && c.status == "True")
            });
        if complete {
            Ok(job)
        } else {
            Err(conditions_summary(&job))
        }
    })
    .await;

    // The pod was bound by the scheduler to the kwok node, and kwok ran it to success.
    let pods: Api<Pod> = Api::namespaced(spoke.client.clone(), &ns);
    let list = pods
        .list(&ListParams::default().labels("job-name=hello"))
        .await
        .expect("list pods");
    assert_eq!(list.items.len(), 1, "one pod for the Job");
    let pod = &list.items[0];
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("kwok-node-0")
    );
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded")
    );
    spoke.cleanup().await;
}

#[tokio::test]
async fn server_side_apply_by_two_managers_conflicts() {
    let hub = TestCluster::hub().await;
    let ns = hub.namespace("smoke-ssa").await;
    let cms: Api<ConfigMap> = Api::namespaced(hub.client.clone(), &ns);
    let cm = |value: &str| {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "shared"},
            "data": {"owner-field": value}
        })
    };
    cms.patch(
        "shared",
        &PatchParams::apply("alice"),
        &Patch::Apply(cm("a")),
    )
    .await
    .expect("first apply by alice");

    let err = cms
        .patch("shared", &PatchParams::apply("bob"), &Patch::Apply(cm("b")))
        .await
        .expect_err("bob must conflict with alice over data.owner-field");
    match &err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409, "{status:?}");
            assert_eq!(status.reason, "Conflict", "{status:?}");
            assert!(status.message.contains("alice"), "{status:?}");
        }
        other => panic!("expected an API conflict, got {other:?}"),
    }

    // Forcing takes the field over; the server records bob as its manager.
    let forced = cms
        .patch(
            "shared",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(cm("b")),
        )
        .await
        .expect("forced apply by bob");
    assert_eq!(
        forced
            .data
            .as_ref()
            .and_then(|d| d.get("owner-field"))
            .map(String::as_str),
        Some("b")
    );
    let managers: Vec<String> = forced
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.to_string().contains("owner-field"))
        })
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, ["bob"]);
    hub.cleanup().await;
}

fn sar_for(ns: &str, sa: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{ns}:{sa}")),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(ns.to_string()),
                verb: Some("list".into()),
                resource: Some("configmaps".into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

async fn sar_allowed(client: &Client, review: &SubjectAccessReview) -> Result<bool, String> {
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer = api
        .create(&PostParams::default(), review)
        .await
        .map_err(|e| e.to_string())?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

#[tokio::test]
async fn subject_access_review_denies_a_serviceaccount_without_rights() {
    let spoke = TestCluster::spoke().await;
    let ns = spoke.namespace("smoke-rbac").await;
    let kubeconfig = service_account_kubeconfig(&spoke, &ns, "nobody").await;

    let review = sar_for(&ns, "nobody");
    assert!(
        !sar_allowed(&spoke.client, &review)
            .await
            .expect("SubjectAccessReview"),
        "a ServiceAccount without bindings must be denied"
    );
    // The same denial when the ServiceAccount itself asks (authentication by TokenRequest token).
    let as_sa = client_from_kubeconfig(&kubeconfig)
        .await
        .expect("client for the ServiceAccount");
    let denied = Api::<ConfigMap>::namespaced(as_sa.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect_err("listing configmaps must be forbidden");
    assert!(
        matches!(&denied, kube::Error::Api(s) if s.code == 403),
        "{denied:?}"
    );

    // Granting the right flips both answers, so the denial above came from RBAC.
    apply_yaml_in(
        &spoke.client,
        &ns,
        &format!(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: read-configmaps}}
rules:
- {{apiGroups: [""], resources: [configmaps], verbs: [get, list]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: nobody-reads}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: read-configmaps}}
subjects:
- {{kind: ServiceAccount, name: nobody, namespace: {ns}}}
"#
        ),
    )
    .await
    .expect("apply Role and RoleBinding");
    wait_for(
        "the RoleBinding to allow listing configmaps",
        TIMEOUT,
        || {
            let review = review.clone();
            let client = spoke.client.clone();
            async move {
                match sar_allowed(&client, &review).await? {
                    true => Ok(()),
                    false => Err("still denied".to_string()),
                }
            }
        },
    )
    .await;
    Api::<ConfigMap>::namespaced(as_sa, &ns)
        .list(&ListParams::default())
        .await
        .expect("listing configmaps is allowed after the binding");
    spoke.cleanup().await;
}

#[tokio::test]
async fn foreground_deletion_of_a_deployment_removes_its_replicasets_and_pods() {
    let spoke = TestCluster::spoke().await;
    let ns = spoke.namespace("smoke-gc").await;
    apply_yaml_in(
        &spoke.client,
        &ns,
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: registry.invalid/web:1}]
"#,
    )
    .await
    .expect("apply Deployment");
    let deployments: Api<Deployment> = Api::namespaced(spoke.client.clone(), &ns);
    let replicasets: Api<ReplicaSet> = Api::namespaced(spoke.client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(spoke.client.clone(), &ns);
    let by_app = ListParams::default().labels("app=web");

    wait_for(
        "Deployment web to have 2 available replicas",
        TIMEOUT,
        || async {
            let d = deployments.get("web").await.map_err(|e| e.to_string())?;
            let available = d
                .status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0);
            if available == 2 {
                Ok(())
            } else {
                Err(format!("{available} available"))
            }
        },
    )
    .await;
    assert_eq!(
        replicasets
            .list(&by_app)
            .await
            .expect("list rs")
            .items
            .len(),
        1
    );
    assert_eq!(pods.list(&by_app).await.expect("list pods").items.len(), 2);

    deployments
        .delete("web", &DeleteParams::foreground())
        .await
        .expect("foreground delete");
    wait_for("Deployment web to be gone", TIMEOUT, || async {
        match deployments.get_opt("web").await {
            Ok(None) => Ok(()),
            Ok(Some(d)) => Err(format!(
                "still present, finalizers {:?}",
                d.metadata.finalizers.unwrap_or_default()
            )),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    // Foreground: the owner disappears only after its blocking dependents, so nothing is left.
    let rs_left = replicasets.list(&by_app).await.expect("list rs").items;
    let pods_left = pods.list(&by_app).await.expect("list pods").items;
    assert!(rs_left.is_empty(), "ReplicaSets left: {}", rs_left.len());
    assert!(pods_left.is_empty(), "Pods left: {}", pods_left.len());
    spoke.cleanup().await;
}

/// CRD names declared in a directory of YAML files.
fn crd_names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).expect("CRD directory is readable") {
        let path = entry.expect("directory entry").path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("CRD file is readable");
        for doc in parse_yaml_documents(&text).expect("CRD file is YAML") {
            if doc["kind"] == "CustomResourceDefinition" {
                names.push(
                    doc["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                );
            }
        }
    }
    names.sort();
    names
}

async fn established(client: &Client, name: &str) -> bool {
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("CRD {name} is not installed: {e}"));
    crd.status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True")
}

#[tokio::test]
async fn crds_are_installed_as_the_harness_contract_says() {
    let upstream = TestCluster::hub_upstream().await;
    let names = crd_names_in(&upstream_crds_dir());
    assert_eq!(
        names,
        [
            "appliedmanifestworks.work.open-cluster-management.io",
            "manifestworks.work.open-cluster-management.io"
        ]
    );
    for name in &names {
        assert!(
            established(&upstream.client, name).await,
            "{name} on hub-upstream"
        );
    }
    // The Rust installer is idempotent and reports what it installed (the scripts used kubectl).
    let mut installed = upstream
        .install_crds(&upstream_crds_dir())
        .await
        .expect("re-installing the upstream CRDs");
    installed.sort();
    assert_eq!(installed, names);

    // Our generated CRDs: every one on the hub, the AppliedManifestWork one on the spoke.
    let hub = TestCluster::hub().await;
    let spoke = TestCluster::spoke().await;
    for name in crd_names_in(&our_crds_dir()) {
        assert!(established(&hub.client, &name).await, "{name} on hub");
        if name.starts_with("appliedmanifestworks.") {
            assert!(established(&spoke.client, &name).await, "{name} on spoke");
        }
    }
}

#[tokio::test]
async fn agent_process_runs_the_binary_and_captures_its_output() {
    let mut agent = AgentProcess::start(["--help"]);
    let status = wait_for("work-agent --help to exit", TIMEOUT, || {
        let status = agent.exit_status();
        async move { status }
    })
    .await;
    let log = agent.log();
    assert!(
        status.success(),
        "exit {status:?}; log {}",
        agent.log_path().display()
    );
    assert!(log.to_lowercase().contains("usage"), "{log}");
}
