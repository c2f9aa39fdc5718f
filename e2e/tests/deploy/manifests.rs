//! What `deploy/` promises, on real API servers: the manifests pass server-side validation, the
//! agent works with exactly the hub Role from `deploy/hub/` (and that Role refuses other writes),
//! and two agents with leader election never both run controllers.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::agent_common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use test_support::{
    AgentProcess, TestCluster, apply_yaml, client_from_kubeconfig, free_port, parse_yaml_documents,
    repo_root, service_account_kubeconfig, unique_name, wait_for,
};
use work_api::ManifestWork;

// ------------------------------------------------------------------------------------------
// Server-side validation of the kustomizations

/// `kubectl kustomize DIR` (offline rendering, as documented).
fn kustomize(dir: &str) -> String {
    test_support::kustomize(dir).unwrap_or_else(|e| panic!("{e}"))
}

/// `kubectl apply --dry-run=server -f -` of `yaml` against `kubeconfig`.
fn server_dry_run(kubeconfig: &Path, yaml: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "-f",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning kubectl");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(yaml.as_bytes())
        .expect("writing to kubectl");
    let out = child.wait_with_output().expect("kubectl finishes");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

async fn ensure_namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace decodes");
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_already_exists() => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

#[tokio::test]
async fn the_spoke_base_and_the_hub_role_pass_server_side_validation() {
    let spoke = TestCluster::spoke().await;
    // Dry-run does not create the Namespace the other objects go into.
    ensure_namespace(&spoke.client, "open-cluster-management-agent").await;
    let (ok, out) = server_dry_run(&spoke.kubeconfig, &kustomize("deploy/base"));
    assert!(ok, "deploy/base on the spoke:\n{out}");
    for kind in [
        "deployment.apps/work-agent",
        "role.rbac.authorization.k8s.io/work-agent",
    ] {
        assert!(out.contains(kind), "{kind} missing from:\n{out}");
    }
    // The network policies of each transport (their rules are checked in network_policies.rs).
    for transport in ["kube", "mqtt", "grpc", "pubsub"] {
        let dir = format!("deploy/network-policies/{transport}");
        let (ok, out) = server_dry_run(&spoke.kubeconfig, &kustomize(&dir));
        assert!(ok, "{dir} on the spoke:\n{out}");
        assert!(
            out.contains("networkpolicy.networking.k8s.io/work-agent-default-deny"),
            "{dir}:\n{out}"
        );
    }

    let hub = TestCluster::hub().await;
    ensure_namespace(&hub.client, "cluster1").await;
    let (ok, out) = server_dry_run(&hub.kubeconfig, &kustomize("deploy/hub"));
    assert!(ok, "deploy/hub on the hub:\n{out}");
}

/// The one YAML document of a file under the repository.
fn yaml_file(path: &str) -> Value {
    let text = std::fs::read_to_string(repo_root().join(path))
        .unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let mut docs = parse_yaml_documents(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(docs.len(), 1, "{path} holds one document");
    docs.remove(0)
}

/// `deploy/maestro/`: on Maestro's chart's Deployment (as the chart renders it), the patch swaps
/// the image and hardens the pod while the chart's command, env and mounts stay; the Helm
/// values name the same image.
#[tokio::test]
async fn the_maestro_patch_swaps_the_image_of_maestros_chart_and_keeps_its_command() {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Patch, PatchParams};
    let spoke = TestCluster::spoke().await;
    let ns = spoke.namespace("maestro-chart").await;
    let mut rendered = yaml_file("e2e/fixtures/maestro-agent-deployment.yaml");
    // No pods: only the Deployment's spec is under test.
    rendered["spec"]["replicas"] = json!(0);
    let chart: Deployment = serde_json::from_value(rendered).expect("the chart's Deployment");
    let deployments: Api<Deployment> = Api::namespaced(spoke.client.clone(), &ns);
    deployments
        .create(&PostParams::default(), &chart)
        .await
        .expect("create the chart's Deployment");
    let patch = yaml_file("deploy/maestro/deployment-patch.yaml");
    let patched = deployments
        .patch(
            "maestro-agent",
            &PatchParams::default(),
            &Patch::Strategic(patch.clone()),
        )
        .await
        .expect("the strategic merge patch applies");
    let pod = patched
        .spec
        .and_then(|s| s.template.spec)
        .expect("pod spec");
    assert_eq!(
        pod.containers.len(),
        1,
        "the patch merges into the chart's container"
    );
    let container = &pod.containers[0];
    let before = &chart
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod")
        .containers[0];
    assert_eq!(
        container.image.as_deref(),
        patch["spec"]["template"]["spec"]["containers"][0]["image"].as_str()
    );
    assert_eq!(
        container.command, before.command,
        "the chart's command line stays"
    );
    assert_eq!(container.env, before.env);
    assert_eq!(container.volume_mounts, before.volume_mounts);
    let security = container.security_context.clone().unwrap_or_default();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(
        pod.security_context.and_then(|s| s.run_as_user),
        Some(65532),
        "the image's user"
    );
    let probe = container
        .liveness_probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref())
        .expect("liveness probe");
    assert_eq!(
        (probe.scheme.as_deref(), probe.path.as_deref()),
        (Some("HTTPS"), Some("/healthz"))
    );
    // The Helm values compose the same reference (registry/repository:tag, as the chart does).
    let values = yaml_file("deploy/maestro/values.yaml");
    let image = &values["image"];
    let from_values = format!(
        "{}/{}:{}",
        image["registry"].as_str().unwrap_or_default(),
        image["repository"].as_str().unwrap_or_default(),
        image["tag"].as_str().unwrap_or_default()
    );
    assert_eq!(container.image.as_deref(), Some(from_values.as_str()));
}

/// `deploy/klusterlet/`: the override and its revert against the operator's own Klusterlet
/// schema (a misspelt field would be pruned, and the image would not change).
#[tokio::test]
async fn the_klusterlet_override_sets_the_work_image_and_the_revert_removes_it() {
    use kube::api::{DynamicObject, Patch, PatchParams};
    use kube::discovery::ApiResource;
    let spoke = TestCluster::spoke().await;
    spoke
        .install_crds(&repo_root().join("e2e/upstream-crds/operator"))
        .await
        .expect("the Klusterlet CRD");
    let resource = ApiResource {
        group: "operator.open-cluster-management.io".into(),
        version: "v1".into(),
        api_version: "operator.open-cluster-management.io/v1".into(),
        kind: "Klusterlet".into(),
        plural: "klusterlets".into(),
    };
    let klusterlets: Api<DynamicObject> = Api::all_with(spoke.client.clone(), &resource);
    let name = unique_name("klusterlet");
    let klusterlet: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "operator.open-cluster-management.io/v1",
        "kind": "Klusterlet",
        "metadata": {"name": name},
        "spec": {"clusterName": "cluster1"}
    }))
    .expect("a Klusterlet");
    klusterlets
        .create(&PostParams::default(), &klusterlet)
        .await
        .expect("create the Klusterlet");
    let patch = yaml_file("deploy/klusterlet/klusterlet-patch.yaml");
    let swapped = klusterlets
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("the override applies");
    assert_eq!(
        swapped.data["spec"]["workImagePullSpec"], patch["spec"]["workImagePullSpec"],
        "the operator's schema keeps the field"
    );
    let revert = yaml_file("deploy/klusterlet/klusterlet-revert.yaml");
    let back = klusterlets
        .patch(&name, &PatchParams::default(), &Patch::Merge(&revert))
        .await
        .expect("the revert applies");
    assert!(
        back.data["spec"].get("workImagePullSpec").is_none(),
        "{:?}",
        back.data
    );
    assert_eq!(back.data["spec"]["clusterName"], "cluster1");
    klusterlets
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete the Klusterlet");
}

#[tokio::test]
async fn the_examples_are_accepted_by_our_crd_and_the_upstream_one() {
    for hub in [TestCluster::hub().await, TestCluster::hub_upstream().await] {
        ensure_namespace(&hub.client, "cluster1").await;
        let dir = repo_root().join("deploy/examples");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .expect("deploy/examples exists")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        assert!(files.len() >= 4, "examples: {files:?}");
        for f in files {
            let yaml = std::fs::read_to_string(&f).expect("example readable");
            let (ok, out) = server_dry_run(&hub.kubeconfig, &yaml);
            assert!(ok, "{} on {}:\n{out}", f.display(), hub.server_url);
        }
    }
}

// ------------------------------------------------------------------------------------------
// The agent with exactly the hub Role of deploy/hub

/// The Role and RoleBinding of `deploy/hub`, moved into `cluster`, applied as admin.
async fn apply_hub_rbac(hub: &TestCluster, cluster: &str) {
    for file in ["deploy/hub/role.yaml", "deploy/hub/rolebinding.yaml"] {
        let text = std::fs::read_to_string(repo_root().join(file)).expect("hub RBAC file");
        for mut doc in parse_yaml_documents(&text).expect("hub RBAC parses") {
            doc["metadata"]["namespace"] = json!(cluster);
            if let Some(subjects) = doc.get_mut("subjects").and_then(Value::as_array_mut) {
                for s in subjects {
                    s["namespace"] = json!(cluster);
                }
            }
            let yaml = serde_json::to_string(&doc).expect("JSON is YAML");
            apply_yaml(&hub.client, &yaml)
                .await
                .unwrap_or_else(|e| panic!("applying {file}: {e}"));
        }
    }
}

fn forbidden<T: std::fmt::Debug>(what: &str, r: Result<T, kube::Error>) {
    match r {
        Err(kube::Error::Api(s)) if s.is_forbidden() => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    }
}

#[tokio::test]
async fn the_agent_works_with_exactly_the_hub_role_and_that_role_refuses_other_writes() {
    let hub = TestCluster::hub().await;
    let spoke = TestCluster::spoke().await;
    let cluster = hub.namespace("rbac").await;
    let ns = spoke.namespace("rbac").await;
    apply_hub_rbac(&hub, &cluster).await;
    let sa_kubeconfig = service_account_kubeconfig(&hub, &cluster, "work-agent").await;
    let agent = AgentProcess::start(agent_args(
        &sa_kubeconfig,
        &spoke.kubeconfig,
        &cluster,
        &["--ttl-deletion-events".to_string()],
    ));
    let log = agent.log_path().display().to_string();

    // Apply, status, completion, TTL delete and its Event: everything the agent does.
    let works: Api<ManifestWork> = Api::namespaced(hub.client.clone(), &cluster);
    let name = unique_name("rbac");
    let work: ManifestWork = serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": name, "namespace": cluster},
        "spec": {
            "workload": {"manifests": [configmap(&ns, "cm", json!({"a": "1"})), job(&ns, "j")]},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "batch", "resource": "jobs", "name": "j", "namespace": ns},
                "conditionRules": [{"type": "WellKnownConditions", "condition": "Complete"}]
            }],
            "deleteOption": {"ttlSecondsAfterFinished": 3},
        },
    }))
    .expect("work decodes");
    works
        .create(&PostParams::default(), &work)
        .await
        .expect("admin creates the work");
    let seen = wait_for(
        &format!("work {name} Applied, Available and Complete (agent log {log})"),
        TIMEOUT,
        || {
            let works = works.clone();
            let name = name.clone();
            async move {
                match works.get_opt(&name).await {
                    Ok(Some(w))
                        if work_is(&w, "Applied", "True")
                            && work_is(&w, "Available", "True")
                            && work_is(&w, "Complete", "True") =>
                    {
                        Ok(w)
                    }
                    Ok(Some(w)) => Err(format!("{:?}", w.status)),
                    Ok(None) => Err("gone too early".into()),
                    Err(e) => Err(e.to_string()),
                }
            }
        },
    )
    .await;
    assert!(
        seen.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == work_api::MANIFEST_WORK_FINALIZER)),
        "the agent added its finalizer"
    );
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(spoke.client.clone(), &ns);
    assert!(cms.get_opt("cm").await.expect("read cm").is_some());
    wait_for(
        &format!("work {name} deleted by TTL (agent log {log})"),
        TIMEOUT,
        || {
            let works = works.clone();
            let name = name.clone();
            async move { works.get_opt(&name).await.ok()?.is_none().then_some(()) }
        },
    )
    .await;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(hub.client.clone(), &cluster);
    let recorded = events.list(&ListParams::default()).await.expect("events");
    assert!(
        recorded
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some(gc::EVENT_REASON)),
        "no TTL Event recorded with the Role's rights (agent log {log})"
    );
    let log_text = agent.log();
    assert!(
        !log_text.contains("forbidden") && !log_text.contains("Forbidden"),
        "the agent hit a permission error with the documented Role:\n{log_text}"
    );

    // And nothing more: the same identity may not create works, touch Secrets, or other namespaces.
    let sa = client_from_kubeconfig(&sa_kubeconfig)
        .await
        .expect("ServiceAccount client");
    let sa_works: Api<ManifestWork> = Api::namespaced(sa.clone(), &cluster);
    let mut intruder = work.clone();
    intruder.metadata.name = Some(unique_name("intruder"));
    forbidden(
        "creating a ManifestWork",
        sa_works.create(&PostParams::default(), &intruder).await,
    );
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}}))
            .expect("secret decodes");
    Api::<Secret>::namespaced(hub.client.clone(), &cluster)
        .create(&PostParams::default(), &secret)
        .await
        .expect("admin creates a Secret");
    let sa_secrets: Api<Secret> = Api::namespaced(sa.clone(), &cluster);
    forbidden("reading a Secret", sa_secrets.get("s").await);
    forbidden(
        "deleting a Secret",
        sa_secrets.delete("s", &DeleteParams::default()).await,
    );
    let other: Api<ManifestWork> = Api::namespaced(sa, "default");
    forbidden(
        "listing ManifestWorks of another namespace",
        other.list(&ListParams::default()).await,
    );
}

// ------------------------------------------------------------------------------------------
// Leader election

/// Agent args with leader election on, the Lease in `lease_ns`.
fn elected_args(
    hub: &TestCluster,
    spoke: &TestCluster,
    cluster: &str,
    lease_ns: &str,
) -> Vec<String> {
    let mut args = agent_args(&hub.kubeconfig, &spoke.kubeconfig, cluster, &[]);
    for a in &mut args {
        if a == "--leader-elect=false" {
            *a = "--leader-elect=true".into();
        }
    }
    args.extend(["--lease-namespace".to_string(), lease_ns.to_string()]);
    args
}

/// Starts one candidate with its own identity prefix and its own HTTP address (returned).
fn start_candidate(args: &[String], pod: &str) -> (AgentProcess, String) {
    let mut args = args.to_vec();
    let addr = format!("127.0.0.1:{}", free_port());
    if let Some(at) = args.iter().position(|a| a == "--http-address") {
        args[at + 1] = addr.clone();
    }
    (
        AgentProcess::start_with_env(args, [("POD_NAME", pod)]),
        addr,
    )
}

/// `GET path` over plain HTTP/1.1; the whole response (status line, headers, body).
async fn http_get(addr: String, path: &'static str) -> String {
    tokio::task::spawn_blocking(move || -> std::io::Result<String> {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(&addr)?;
        conn.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(
            conn,
            "GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n"
        )?;
        let mut out = String::new();
        conn.read_to_string(&mut out)?;
        Ok(out)
    })
    .await
    .expect("http task")
    .unwrap_or_else(|e| format!("(no answer: {e})"))
}

async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

const LEADING: &str = "leading; starting controllers";
const APPLIED: &str = "applied manifest";

struct Pair {
    hub: TestCluster,
    spoke: TestCluster,
    cluster: String,
    ns: String,
    a: AgentProcess,
    b: AgentProcess,
    a_addr: String,
    b_addr: String,
    leases: Api<Lease>,
    lease: String,
}

impl Pair {
    async fn start(prefix: &str) -> Pair {
        let hub = TestCluster::hub().await;
        let spoke = TestCluster::spoke().await;
        let cluster = hub.namespace(prefix).await;
        let ns = spoke.namespace(prefix).await;
        let args = elected_args(&hub, &spoke, &cluster, &ns);
        let (a, a_addr) = start_candidate(&args, "agent-a");
        let (b, b_addr) = start_candidate(&args, "agent-b");
        let leases = Api::namespaced(spoke.client.clone(), &ns);
        let lease = format!("work-agent-{cluster}");
        Pair {
            hub,
            spoke,
            cluster,
            ns,
            a,
            b,
            a_addr,
            b_addr,
            leases,
            lease,
        }
    }

    /// Which candidate holds the Lease: 'a' or 'b'.
    async fn leader(&self) -> char {
        let leases = self.leases.clone();
        let lease = self.lease.clone();
        let h = wait_for("a Lease holder", TIMEOUT, || {
            let leases = leases.clone();
            let lease = lease.clone();
            async move { holder(&leases, &lease).await }
        })
        .await;
        if h.starts_with("agent-a_") {
            'a'
        } else if h.starts_with("agent-b_") {
            'b'
        } else {
            panic!("unexpected holder {h}")
        }
    }

    /// Waits until candidate `which` ('a' or 'b') holds the Lease.
    async fn wait_holder(&self, which: char) {
        let leases = self.leases.clone();
        let lease = self.lease.clone();
        let prefix = format!("agent-{which}_");
        wait_for(&format!("agent {which} holds the Lease"), TIMEOUT, || {
            let (leases, lease, prefix) = (leases.clone(), lease.clone(), prefix.clone());
            async move {
                holder(&leases, &lease)
                    .await
                    .filter(|h| h.starts_with(&prefix))
            }
        })
        .await;
    }

    fn addr(&self, which: char) -> String {
        if which == 'a' {
            self.a_addr.clone()
        } else {
            self.b_addr.clone()
        }
    }

    fn agent(&mut self, which: char) -> &mut AgentProcess {
        if which == 'a' {
            &mut self.a
        } else {
            &mut self.b
        }
    }

    async fn create_configmap_work(&self, cm: &str) -> String {
        let works: Api<ManifestWork> = Api::namespaced(self.hub.client.clone(), &self.cluster);
        let name = unique_name("le");
        let work: ManifestWork = serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": name, "namespace": self.cluster},
            "spec": {"workload": {"manifests": [configmap(&self.ns, cm, json!({"k": "v"}))]}},
        }))
        .expect("work decodes");
        works
            .create(&PostParams::default(), &work)
            .await
            .expect("create work");
        name
    }

    async fn wait_configmap(&self, cm: &str) {
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(self.spoke.client.clone(), &self.ns);
        let logs = format!(
            "{} {}",
            self.a.log_path().display(),
            self.b.log_path().display()
        );
        wait_for(
            &format!("ConfigMap {cm} applied (agent logs {logs})"),
            TIMEOUT,
            || {
                let cms = cms.clone();
                async move { cms.get_opt(cm).await.ok()?.map(|_| ()) }
            },
        )
        .await;
    }
}

#[tokio::test]
async fn of_two_agents_only_the_leader_applies_and_the_other_takes_over_when_it_stops() {
    let mut pair = Pair::start("le-stop").await;
    let first = pair.leader().await;
    let second = if first == 'a' { 'b' } else { 'a' };
    pair.create_configmap_work("one").await;
    pair.wait_configmap("one").await;
    let standby_log = pair.agent(second).log();
    assert!(pair.agent(first).log().contains(LEADING));
    assert!(
        !standby_log.contains(LEADING) && !standby_log.contains(APPLIED),
        "the standby ran controllers:\n{standby_log}"
    );

    // Both are ready: the standby runs no controllers, and a rolling update waits for readiness.
    for which in [first, second] {
        let addr = pair.addr(which);
        wait_for(&format!("agent {which} /readyz is 200"), TIMEOUT, || {
            let addr = addr.clone();
            async move {
                let reply = http_get(addr, "/readyz").await;
                if reply.starts_with("HTTP/1.1 200") {
                    Ok(())
                } else {
                    Err(reply)
                }
            }
        })
        .await;
    }

    // A graceful stop releases the Lease: the standby takes over within a few retry periods.
    let stopped = Instant::now();
    pair.agent(first).stop();
    pair.wait_holder(second).await;
    let took = stopped.elapsed();
    assert!(
        took < Duration::from_secs(12),
        "takeover after a graceful stop took {took:?} (the Lease was not released?)"
    );
    pair.create_configmap_work("two").await;
    pair.wait_configmap("two").await;
    assert!(pair.agent(second).log().contains(LEADING));
}

#[tokio::test]
async fn a_killed_leader_is_replaced_only_after_its_lease_expires() {
    let mut pair = Pair::start("le-kill").await;
    let first = pair.leader().await;
    let second = if first == 'a' { 'b' } else { 'a' };
    pair.create_configmap_work("one").await;
    pair.wait_configmap("one").await;

    let killed = Instant::now();
    pair.agent(first).kill();
    pair.wait_holder(second).await;
    let took = killed.elapsed();
    // Lease 15 s; the standby counts from the last renewal it saw (at most one retry period, 2 s,
    // before the kill). Taking over sooner would mean two writers.
    assert!(
        took >= Duration::from_secs(12),
        "the standby took over {took:?} after the kill, before the 15 s lease could expire"
    );
    pair.create_configmap_work("two").await;
    pair.wait_configmap("two").await;
}
