//! Shared setup of the agent integration tests: a hub namespace (= the spoke cluster name) and a
//! spoke namespace per test, the real `work-agent` binary started against them, and waits on the
//! ManifestWork status.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::watcher;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use test_support::{AgentProcess, TestCluster, free_port, unique_name, wait_for};
use work_api::{AppliedManifestWork, ManifestCondition, ManifestWork};

/// Generous: two cores shared by three control planes and parallel tests.
pub const TIMEOUT: Duration = Duration::from_secs(90);

/// One test's world: hub and spoke, a cluster namespace on the hub, a namespace on the spoke,
/// and a running agent.
pub struct Env {
    /// The hub the agent serves.
    pub hub: TestCluster,
    /// The spoke.
    pub spoke: TestCluster,
    /// Hub namespace = managed cluster name.
    pub cluster: String,
    /// Spoke namespace for the test's objects.
    pub ns: String,
    /// The agent process.
    pub agent: AgentProcess,
    /// Port of the agent's `/metrics`, `/healthz`, `/readyz`.
    pub http_port: u16,
    extra_args: Vec<String>,
}

/// The arguments the OCM klusterlet operator renders after `/work` (v1.3.1,
/// klusterlet-work-deployment.yaml, every optional flag set). With a `spoke` kubeconfig, Hosted
/// mode's; without, Default mode's (the spoke is the pod's own cluster).
pub fn klusterlet_args(
    cluster: &str,
    hub: &Path,
    spoke: Option<&Path>,
    agent_id: &str,
) -> Vec<String> {
    let hub = hub.display();
    let mut args: Vec<String> = vec![
        "agent".to_string(),
        format!("--spoke-cluster-name={cluster}"),
        "--workload-source-driver=kube".into(),
        format!("--workload-source-config={hub}"),
        format!("--agent-id={agent_id}"),
        "--feature-gates=ExecutorValidatingCaches=true".into(),
        "--feature-gates=RawFeedbackJsonString=false".into(),
    ];
    if let Some(spoke) = spoke {
        args.push(format!("--spoke-kubeconfig={}", spoke.display()));
        args.push(format!("--terminate-on-files={}", spoke.display()));
    }
    args.extend([
        format!("--terminate-on-files={hub}"),
        "--status-sync-interval=60s".into(),
        "--kube-api-qps=20".into(),
        "--kube-api-burst=40".into(),
        "--hub-kube-api-qps=20".into(),
        "--hub-kube-api-burst=40".into(),
        "--appliedmanifestwork-eviction-grace-period=1h0m0s".into(),
        "--tls-min-version=VersionTLS12".into(),
    ]);
    args
}

/// HTTPS GET with the certificate unchecked (as the kubelet probes); the status code.
pub fn https_status(port: u16, path: &str) -> Result<u16, String> {
    let out = std::process::Command::new("curl")
        .args([
            "-sk",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .map_err(|e| format!("running curl: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| format!("curl: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Arguments to run the agent for `cluster` against the two control planes.
pub fn agent_args(hub: &Path, spoke: &Path, cluster: &str, extra: &[String]) -> Vec<String> {
    agent_args_on(hub, spoke, cluster, free_port(), extra)
}

/// [`agent_args`] with a given metrics/health port.
pub fn agent_args_on(
    hub: &Path,
    spoke: &Path,
    cluster: &str,
    port: u16,
    extra: &[String],
) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "--spoke-cluster-name",
        cluster,
        // Many agents of one hub share this spoke: each needs its own ID (the default, the hub
        // hash, would make every agent take the others' AppliedManifestWorks for its own).
        "--agent-id",
        cluster,
        "--hub-kubeconfig",
        &hub.display().to_string(),
        "--spoke-kubeconfig",
        &spoke.display().to_string(),
        "--http-address",
        &format!("127.0.0.1:{port}"),
        "--leader-elect=false",
        // Parallel agents: an ephemeral port each for the HTTPS probe endpoint.
        "--health-address=127.0.0.1:0",
        "--log-level",
        "debug,kube=info,hyper=info,hyper_util=info,rustls=info,tower=info",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().cloned());
    args
}

impl Env {
    /// Hub with our CRDs, default agent flags.
    pub async fn start(prefix: &str) -> Env {
        Self::start_with(TestCluster::hub().await, prefix, &[]).await
    }

    /// A given hub and extra agent flags.
    pub async fn start_with(hub: TestCluster, prefix: &str, extra: &[&str]) -> Env {
        let spoke = TestCluster::spoke().await;
        let cluster = hub.namespace(prefix).await;
        let ns = spoke.namespace(prefix).await;
        let extra_args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let http_port = free_port();
        let agent = AgentProcess::start(agent_args_on(
            &hub.kubeconfig,
            &spoke.kubeconfig,
            &cluster,
            http_port,
            &extra_args,
        ));
        Env {
            extra_args,
            ..Self::with_agent(hub, spoke, cluster, ns, agent, http_port)
        }
    }

    /// A world around an agent the test started itself.
    pub fn with_agent(
        hub: TestCluster,
        spoke: TestCluster,
        cluster: String,
        ns: String,
        agent: AgentProcess,
        http_port: u16,
    ) -> Env {
        Env {
            hub,
            spoke,
            cluster,
            ns,
            agent,
            http_port,
            extra_args: Vec::new(),
        }
    }

    /// Like [`Env::start`], with leader election on and the Lease in the spoke namespace.
    pub async fn start_elected(prefix: &str) -> Env {
        let hub = TestCluster::hub().await;
        let spoke = TestCluster::spoke().await;
        let cluster = hub.namespace(prefix).await;
        let ns = spoke.namespace(prefix).await;
        let extra_args = vec!["--lease-namespace".to_string(), ns.clone()];
        let http_port = free_port();
        let mut args = agent_args_on(
            &hub.kubeconfig,
            &spoke.kubeconfig,
            &cluster,
            http_port,
            &extra_args,
        );
        for a in &mut args {
            if a == "--leader-elect=false" {
                *a = "--leader-elect=true".into();
            }
        }
        let agent = AgentProcess::start(args);
        Env {
            extra_args,
            ..Env::with_agent(hub, spoke, cluster, ns, agent, http_port)
        }
    }

    /// Starts the agent again (after `agent.kill()`).
    pub fn restart_agent(&mut self) {
        self.agent = AgentProcess::start(agent_args_on(
            &self.hub.kubeconfig,
            &self.spoke.kubeconfig,
            &self.cluster,
            self.http_port,
            &self.extra_args,
        ));
    }

    /// ManifestWorks of the test's cluster namespace.
    pub fn works(&self) -> Api<ManifestWork> {
        Api::namespaced(self.hub.client.clone(), &self.cluster)
    }

    /// AppliedManifestWorks on the spoke.
    pub fn applied_works(&self) -> Api<AppliedManifestWork> {
        Api::all(self.spoke.client.clone())
    }

    /// The AppliedManifestWork name of a work.
    pub fn applied_name(&self, work: &str) -> String {
        work_api::applied_manifest_work_name(&work_api::hub_hash(&self.hub.server_url), work)
    }

    /// A unique work name (the hub and spoke are shared by parallel tests, and AppliedManifestWork
    /// names only carry the hub hash and the work name).
    pub fn work_name(&self, prefix: &str) -> String {
        unique_name(prefix)
    }

    /// Creates a ManifestWork in the cluster namespace from a JSON spec.
    pub async fn create_work(&self, name: &str, spec: Value) -> ManifestWork {
        self.create_work_annotated(name, json!({}), spec).await
    }

    /// Creates a ManifestWork with `annotations` (a JSON object) in the cluster namespace.
    pub async fn create_work_annotated(
        &self,
        name: &str,
        annotations: Value,
        spec: Value,
    ) -> ManifestWork {
        let work: ManifestWork = serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1",
            "kind": "ManifestWork",
            "metadata": {"name": name, "namespace": self.cluster, "annotations": annotations},
            "spec": spec,
        }))
        .expect("test ManifestWork decodes");
        self.works()
            .create(&PostParams::default(), &work)
            .await
            .unwrap_or_else(|e| panic!("creating ManifestWork {name}: {e}"))
    }

    /// Replaces a work's spec (merge patch of `spec`).
    pub async fn patch_work_spec(&self, name: &str, spec: Value) {
        self.works()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await
            .unwrap_or_else(|e| panic!("patching ManifestWork {name}: {e}"));
    }

    /// Creates the work `name` of one ConfigMap (data `k: v`) per name in `configmaps`, and waits
    /// until its `condition` is True.
    pub async fn create_configmaps(
        &self,
        name: &str,
        configmaps: &[&str],
        condition: &str,
    ) -> ManifestWork {
        let manifests: Vec<Value> = configmaps
            .iter()
            .map(|cm| configmap(&self.ns, cm, json!({"k": "v"})))
            .collect();
        self.create_work(name, json!({"workload": {"manifests": manifests}}))
            .await;
        self.wait_work(name, condition, |w| work_is(w, condition, "True"))
            .await
    }

    /// Deletes a work on the hub.
    pub async fn delete_work(&self, name: &str) {
        self.works()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting ManifestWork {name}: {e}"));
    }

    /// Waits until the work satisfies `pred`; the panic names `what` and shows the last status.
    pub async fn wait_work<F>(&self, name: &str, what: &str, pred: F) -> ManifestWork
    where
        F: Fn(&ManifestWork) -> bool,
    {
        self.wait_work_for(name, what, TIMEOUT, pred).await
    }

    /// [`wait_work`](Self::wait_work) with a given bound (for works at the size limits).
    pub async fn wait_work_for(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&ManifestWork) -> bool,
    ) -> ManifestWork {
        let status = |w: &ManifestWork| serde_json::to_string(&w.status).unwrap_or_default();
        let check = matching(pred, |w| format!("status: {}", status(w)));
        self.wait_on("ManifestWork", &self.works(), name, what, timeout, check)
            .await
    }

    /// Waits until the agent answers `/readyz`.
    pub async fn wait_ready(&self) {
        let port = self.http_port;
        let description = format!("agent /readyz (log {})", self.agent.log_path().display());
        wait_for(&description, TIMEOUT, || async move {
            http_get(port, "/readyz").await
        })
        .await;
    }

    /// Waits until the work is gone from the hub.
    pub async fn wait_work_gone(&self, name: &str) {
        self.wait_gone("ManifestWork", &self.works(), name, |w: &ManifestWork| {
            format!(
                "finalizers {:?}, status {}",
                w.metadata.finalizers,
                serde_json::to_string(&w.status).unwrap_or_default()
            )
        })
        .await
    }

    /// Waits until `api` has no object `name` (a `kind`); `holds` says what keeps one there.
    async fn wait_gone<K>(&self, kind: &str, api: &Api<K>, name: &str, holds: impl Fn(&K) -> String)
    where
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let check = |found: Option<K>| match found {
            None => Ok(()),
            Some(o) => Err(format!("still there; {}", holds(&o))),
        };
        self.wait_on(kind, api, name, "gone", TIMEOUT, check).await
    }

    /// Waits until `check` accepts what `api` holds under `name` (None: nothing), for at most
    /// `timeout`; the wait is described as `<kind> <name>: <what>`, and what `check` answers
    /// until then says why not.
    async fn wait_on<K, T>(
        &self,
        kind: &str,
        api: &Api<K>,
        name: &str,
        what: &str,
        timeout: Duration,
        check: impl Fn(Option<K>) -> Result<T, String>,
    ) -> T
    where
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let description = format!(
            "{kind} {name}: {what} (agent log {})",
            self.agent.log_path().display()
        );
        let check = &check;
        wait_for(&description, timeout, || {
            let api = api.clone();
            async move {
                api.get_opt(name)
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(check)
            }
        })
        .await
    }

    /// A dynamic API for a spoke resource in the test namespace.
    pub fn spoke_api(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
    ) -> Api<DynamicObject> {
        let ar = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: if group.is_empty() {
                version.into()
            } else {
                format!("{group}/{version}")
            },
            kind: kind.into(),
            plural: plural.into(),
        };
        Api::namespaced_with(self.spoke.client.clone(), &self.ns, &ar)
    }

    /// Waits until the AppliedManifestWork of `work` is gone from the spoke.
    pub async fn wait_applied_work_gone(&self, work: &str) {
        let api = self.applied_works();
        let applied = self.applied_name(work);
        wait_for(
            &format!(
                "AppliedManifestWork {applied} deleted (agent log {})",
                self.agent.log_path().display()
            ),
            TIMEOUT,
            || {
                let api = api.clone();
                let applied = applied.clone();
                async move { matches!(api.get_opt(&applied).await, Ok(None)).then_some(()) }
            },
        )
        .await;
    }

    /// ConfigMaps in the spoke namespace.
    pub fn configmaps(&self) -> Api<DynamicObject> {
        self.spoke_api("", "v1", "ConfigMap", "configmaps")
    }

    /// Waits until a spoke object exists and satisfies `pred`.
    pub async fn wait_object(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        what: &str,
        pred: impl Fn(&DynamicObject) -> bool,
    ) -> DynamicObject {
        let object = |o: &DynamicObject| serde_json::to_string(o).unwrap_or_default();
        let check = matching(pred, |o| format!("object: {}", object(o)));
        self.wait_on("spoke object", api, name, what, TIMEOUT, check)
            .await
    }

    /// Waits until a spoke object is gone.
    pub async fn wait_object_gone(&self, api: &Api<DynamicObject>, name: &str) {
        self.wait_gone("spoke object", api, name, |o: &DynamicObject| {
            format!(
                "ownerReferences {:?}, deletionTimestamp {:?}",
                o.metadata.owner_references, o.metadata.deletion_timestamp
            )
        })
        .await
    }
}

/// A check for [`Env::wait_on`] that takes an object satisfying `pred`; `show` says what another
/// is.
fn matching<K>(
    pred: impl Fn(&K) -> bool,
    show: impl Fn(&K) -> String,
) -> impl Fn(Option<K>) -> Result<K, String> {
    move |found| match found {
        Some(o) if pred(&o) => Ok(o),
        Some(o) => Err(show(&o)),
        None => Err("absent".to_string()),
    }
}

/// A ConfigMap manifest in `ns`.
pub fn configmap(ns: &str, name: &str, data: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": data,
    })
}

/// A Job manifest in `ns` that kwok runs to completion.
pub fn job(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.invalid/noop:1", "command": ["true"]}]
            }}
        }
    })
}

/// A work-level condition.
pub fn work_condition<'a>(work: &'a ManifestWork, type_: &str) -> Option<&'a Condition> {
    work.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// A manifest's status entry (by ordinal).
pub fn manifest_status(work: &ManifestWork, ordinal: i32) -> Option<&ManifestCondition> {
    work.status
        .as_ref()?
        .resource_status
        .as_ref()?
        .manifests
        .iter()
        .find(|m| m.resource_meta.ordinal == ordinal)
}

/// A manifest-level condition (by ordinal).
pub fn manifest_condition<'a>(
    work: &'a ManifestWork,
    ordinal: i32,
    type_: &str,
) -> Option<&'a Condition> {
    manifest_status(work, ordinal)?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// Whether a work-level condition has this status.
pub fn work_is(work: &ManifestWork, type_: &str, status: &str) -> bool {
    work_condition(work, type_).is_some_and(|c| c.status == status)
}

/// Whether a manifest-level condition has this status.
pub fn manifest_is(work: &ManifestWork, ordinal: i32, type_: &str, status: &str) -> bool {
    manifest_condition(work, ordinal, type_).is_some_and(|c| c.status == status)
}

/// Names of the AppliedManifestWorks owning an object.
pub fn owners(obj: &DynamicObject) -> Vec<String> {
    obj.metadata
        .owner_references
        .as_ref()
        .map(|refs| {
            refs.iter()
                .filter(|r| r.kind == "AppliedManifestWork")
                .map(|r| r.name.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// `data` of a ConfigMap.
pub fn data(obj: &DynamicObject) -> BTreeMap<String, String> {
    obj.data
        .get("data")
        .and_then(|d| serde_json::from_value(d.clone()).ok())
        .unwrap_or_default()
}

/// resourceVersion of an object.
pub fn rv(obj: &DynamicObject) -> String {
    obj.metadata.resource_version.clone().unwrap_or_default()
}

/// GET `path` from the agent's HTTP listener (plain HTTP/1.0 over a socket); the body.
pub async fn http_get(port: u16, path: &str) -> Result<String, String> {
    e2e::bench::agent::http_get(port, path).await
}

/// The value of one series in Prometheus text (`name{labels}` exactly as the agent writes it,
/// labels in declaration order, or a bare name); 0 when the series is not there yet.
pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .filter_map(|line| line.strip_prefix(series))
        .filter_map(|rest| rest.strip_prefix(' '))
        .find_map(|value| value.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The agent's `/metrics` text (retried until the listener answers).
pub async fn metrics_text(port: u16) -> String {
    test_support::wait_for("agent /metrics answers", TIMEOUT, || async move {
        http_get(port, "/metrics").await
    })
    .await
}

/// `work_agent_reconciles_total{controller="manifestwork"}`: moves when a reconcile ends, so a
/// test can prove the agent had its chance before asserting that nothing happened.
pub fn reconciles(text: &str) -> f64 {
    metric_value(
        text,
        r#"work_agent_reconciles_total{controller="manifestwork"}"#,
    )
}

/// Waits until the agent has finished more than `after` reconciles; returns the metrics text.
pub async fn wait_reconciled_after(port: u16, after: f64) -> String {
    test_support::wait_for("a reconcile ran", TIMEOUT, || async move {
        let text = http_get(port, "/metrics").await?;
        if reconciles(&text) > after {
            Ok(text)
        } else {
            Err(format!("reconciles_total still {after}"))
        }
    })
    .await
}

/// Requests the agent sent to `api` (`hub` or `spoke`) with `verb`.
pub fn api_requests(text: &str, api: &str, verb: &str) -> f64 {
    metric_value(
        text,
        &format!(r#"work_agent_api_requests_total{{api="{api}",verb="{verb}"}}"#),
    )
}

/// A `manifestConfigs` entry giving the Job `name` in `ns` the well-known `Complete` rule.
pub fn job_complete_config(ns: &str, name: &str) -> Value {
    json!({
        "resourceIdentifier": {"group": "batch", "resource": "jobs", "name": name, "namespace": ns},
        "conditionRules": [{"type": "WellKnownCompletions"}]
    })
}

/// Installs [`widget_crd`] of `group` on the spoke; returns the CRD API.
pub async fn install_widget_crd(
    env: &Env,
    group: &str,
) -> Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(env.spoke.client.clone());
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(widget_crd(group)).expect("CRD"),
    )
    .await
    .expect("install the CRD");
    crds
}

/// A namespaced CustomResourceDefinition of kind `Widget` (plural `widgets`) in `group`, any
/// content accepted.
pub fn widget_crd(group: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    })
}

/// The last 40 lines of an agent's log, for failure messages.
pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Waits until the ConfigMap `name` of `api` has `key` = `value`.
pub async fn wait_configmap_data(
    api: &Api<k8s_openapi::api::core::v1::ConfigMap>,
    name: &str,
    key: &str,
    value: &str,
) {
    wait_for(
        &format!("ConfigMap {name} has {key}={value}"),
        TIMEOUT,
        || async {
            let cm = api.get_opt(name).await.ok()??;
            (cm.data?.get(key)?.as_str() == value).then_some(())
        },
    )
    .await;
}

/// Waits until the ConfigMap `name` of `api` is gone.
pub async fn wait_configmap_gone(api: &Api<k8s_openapi::api::core::v1::ConfigMap>, name: &str) {
    wait_for(&format!("ConfigMap {name} deleted"), TIMEOUT, || async {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// When the spoke's watch first showed something: a CRD Established, an object created.
#[derive(Clone, Default)]
pub struct Moments(Arc<Mutex<Vec<(String, Instant)>>>);

impl Moments {
    pub fn note(&self, what: &str) {
        let mut list = self.0.lock().expect("moments");
        if !list.iter().any(|(w, _)| w == what) {
            list.push((what.to_string(), Instant::now()));
        }
    }

    pub fn at(&self, what: &str) -> Option<Instant> {
        let list = self.0.lock().expect("moments");
        list.iter().find(|(w, _)| w == what).map(|(_, t)| *t)
    }

    /// Watches objects of `api` named `name`; notes `<label> created` on the first event and
    /// `<label> <condition>` when a condition of that type is first True.
    pub fn watch(
        &self,
        api: Api<DynamicObject>,
        name: &str,
        label: &str,
        condition: Option<&str>,
    ) -> tokio::task::JoinHandle<()> {
        let moments = self.clone();
        let label = label.to_string();
        let condition = condition.map(str::to_string);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(api, config));
            while let Some(event) = events.next().await {
                let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = event else {
                    continue;
                };
                moments.note(&format!("{label} created"));
                if let Some(condition) = &condition {
                    let holds = o.data["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == condition.as_str() && c["status"] == "True");
                    if holds {
                        moments.note(&format!("{label} {condition}"));
                    }
                }
            }
        })
    }
}

/// A one-replica Deployment `name` in `ns` (kwok runs its pod).
pub fn deployment(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "registry.invalid/noop:1"}]}
            }
        }
    })
}

/// When the spoke's watch (the test's own, by name) first showed the object `name` of `api`
/// satisfying `pred`: the moment the API server dispatched the edit, which the agent's watch gets
/// too. Timing a report from there leaves out how long the API server took to take the edit.
/// Returns once the watch has listed (so an edit made then is seen as an event).
pub async fn spoke_seen(
    api: Api<DynamicObject>,
    name: &str,
    pred: impl Fn(&DynamicObject) -> bool + Send + 'static,
) -> (Arc<Mutex<Option<Instant>>>, tokio::task::JoinHandle<()>) {
    let seen: Arc<Mutex<Option<Instant>>> = Arc::default();
    let at = seen.clone();
    let (listed, mut is_listed) = tokio::sync::watch::channel(false);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let task = tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher::watcher(api, config));
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) if pred(&o) => {
                    at.lock().expect("seen").get_or_insert_with(Instant::now);
                }
                Ok(watcher::Event::InitDone) => {
                    listed.send_replace(true);
                }
                _ => {}
            }
        }
    });
    let _ = tokio::time::timeout(TIMEOUT, is_listed.wait_for(|l| *l)).await;
    (seen, task)
}
