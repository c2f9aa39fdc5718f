//! Connecting to a control plane named by an environment variable, and per-test namespaces.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::config::{Cluster, KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::wait::poll_until;
use crate::{Error, apply_yaml};

/// Kubeconfig of the hub that serves our own CRDs.
pub const HUB_KUBECONFIG_ENV: &str = "WORK_AGENT_HUB_KUBECONFIG";
/// Kubeconfig of the hub that serves the upstream OCM CRDs.
pub const HUB_UPSTREAM_KUBECONFIG_ENV: &str = "WORK_AGENT_HUB_UPSTREAM_KUBECONFIG";
/// Kubeconfig of the spoke (controller-manager, scheduler, kwok node).
pub const SPOKE_KUBECONFIG_ENV: &str = "WORK_AGENT_SPOKE_KUBECONFIG";

/// How long connecting and single setup steps may take on a loaded 2-core machine.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Label on every namespace the harness creates, so leftovers are easy to find.
const HARNESS_LABEL: &str = "work-agent.test/harness";
/// Set to keep test namespaces for debugging instead of deleting them.
const KEEP_NAMESPACES_ENV: &str = "WORK_AGENT_KEEP_NAMESPACES";

const HOW_TO_START: &str = "start the control planes with `make cluster-up` and run the tests with \
     `make integration`, or run everything with `make test` (integration tests never skip)";

/// A running control plane the test talks to as cluster admin.
pub struct TestCluster {
    /// Admin client.
    pub client: Client,
    /// The admin kubeconfig file.
    pub kubeconfig: PathBuf,
    /// The API server URL exactly as the kubeconfig spells it (hub hashes derive from it).
    pub server_url: String,
    namespaces: Mutex<Vec<String>>,
}

impl TestCluster {
    /// The hub with our CRDs (`WORK_AGENT_HUB_KUBECONFIG`); panics with instructions if unusable.
    pub async fn hub() -> Self {
        Self::from_env(HUB_KUBECONFIG_ENV).await
    }

    /// The hub with the upstream OCM CRDs (`WORK_AGENT_HUB_UPSTREAM_KUBECONFIG`).
    pub async fn hub_upstream() -> Self {
        Self::from_env(HUB_UPSTREAM_KUBECONFIG_ENV).await
    }

    /// The spoke (`WORK_AGENT_SPOKE_KUBECONFIG`).
    pub async fn spoke() -> Self {
        Self::from_env(SPOKE_KUBECONFIG_ENV).await
    }

    /// Connects through the kubeconfig named by `var`; panics with a clear message otherwise.
    pub async fn from_env(var: &str) -> Self {
        match Self::try_from_env(var).await {
            Ok(cluster) => cluster,
            Err(e) => panic!("integration test cannot reach its control plane: {e}"),
        }
    }

    /// Connects through the kubeconfig named by `var`.
    pub async fn try_from_env(var: &str) -> Result<Self, Error> {
        let path = match std::env::var_os(var) {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => {
                return Err(Error::MissingEnv {
                    var: var.to_string(),
                    hint: HOW_TO_START.to_string(),
                });
            }
        };
        Self::connect(&path).await
    }

    /// Connects through a kubeconfig file and checks that the API server answers.
    pub async fn connect(kubeconfig: &Path) -> Result<Self, Error> {
        let kc = read_kubeconfig(kubeconfig)?;
        let server_url = current_cluster(&kc, kubeconfig)?
            .server
            .clone()
            .ok_or_else(|| Error::KubeconfigContent {
                path: kubeconfig.to_path_buf(),
                reason: "the current cluster has no server".into(),
            })?;
        let client = client_from(kc, kubeconfig).await?;
        let context = format!(
            "connecting to {server_url} (kubeconfig {}); {HOW_TO_START}",
            kubeconfig.display()
        );
        match tokio::time::timeout(SETUP_TIMEOUT, client.apiserver_version()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(Error::kube(context, e)),
            Err(_) => {
                return Err(Error::KubeconfigContent {
                    path: kubeconfig.to_path_buf(),
                    reason: format!(
                        "no answer from {server_url} within {SETUP_TIMEOUT:?}; {HOW_TO_START}"
                    ),
                });
            }
        }
        Ok(Self {
            client,
            kubeconfig: kubeconfig.to_path_buf(),
            server_url,
            namespaces: Mutex::new(Vec::new()),
        })
    }

    /// Creates a uniquely named namespace starting with `prefix`; it is deleted by
    /// [`cleanup`](Self::cleanup) or, best effort, when the cluster handle is dropped.
    pub async fn namespace(&self, prefix: &str) -> String {
        match self.try_namespace(prefix).await {
            Ok(name) => name,
            Err(e) => panic!("creating a test namespace on {}: {e}", self.server_url),
        }
    }

    /// Fallible form of [`namespace`](Self::namespace).
    pub async fn try_namespace(&self, prefix: &str) -> Result<String, Error> {
        let name = crate::unique_name(prefix);
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([(HARNESS_LABEL.to_string(), "true".to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .map_err(|e| Error::kube(format!("creating namespace {name}"), e))?;
        self.lock_namespaces().push(name.clone());
        Ok(name)
    }

    /// Deletes the namespaces this handle created (already-gone ones are fine).
    pub async fn cleanup(&self) {
        let names = std::mem::take(&mut *self.lock_namespaces());
        if keep_namespaces() {
            return;
        }
        delete_namespaces(&self.client, &names).await;
    }

    /// Applies CRD files (a file, or every `*.yaml`/`*.yml` in a directory) and waits until each
    /// is Established. Returns the CRD names; an empty directory installs nothing.
    pub async fn install_crds(&self, path: &Path) -> Result<Vec<String>, Error> {
        let mut names = Vec::new();
        for file in yaml_files(path)? {
            let text = std::fs::read_to_string(&file).map_err(|e| Error::io(&file, e))?;
            for obj in apply_yaml(&self.client, &text).await? {
                let is_crd = obj
                    .types
                    .as_ref()
                    .is_some_and(|t| t.kind == "CustomResourceDefinition");
                if let (true, Some(name)) = (is_crd, obj.metadata.name) {
                    names.push(name);
                }
            }
        }
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for name in &names {
            poll_until(
                &format!("CRD {name} to be Established"),
                SETUP_TIMEOUT,
                || async {
                    let crd = crds.get(name).await.map_err(|e| e.to_string())?;
                    let established = crd
                        .status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True");
                    if established {
                        Ok(())
                    } else {
                        Err("not Established yet".to_string())
                    }
                },
            )
            .await?;
        }
        Ok(names)
    }

    fn lock_namespaces(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        // A panicking test may poison the lock; the list itself is still valid.
        self.namespaces.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let names = std::mem::take(&mut *self.lock_namespaces());
        if names.is_empty() || keep_namespaces() {
            return;
        }
        // The test's runtime may be shutting down, so delete from a private runtime on a thread
        // of our own, and never wait long: this is best effort.
        let kubeconfig = self.kubeconfig.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(async {
                    if let Ok(client) = client_from_kubeconfig(&kubeconfig).await {
                        delete_namespaces(&client, &names).await;
                    }
                });
            }
            let _ = tx.send(());
        });
        let _ = rx.recv_timeout(Duration::from_secs(15));
    }
}

fn keep_namespaces() -> bool {
    std::env::var_os(KEEP_NAMESPACES_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

async fn delete_namespaces(client: &Client, names: &[String]) {
    let api = Api::<Namespace>::all(client.clone());
    for name in names {
        // Best effort: a namespace that is already gone, or a hub without a namespace
        // controller leaving it Terminating, is not a test failure.
        let _ = api.delete(name, &DeleteParams::background()).await;
    }
}

fn yaml_files(path: &Path) -> Result<Vec<PathBuf>, Error> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path).map_err(|e| Error::io(path, e))?;
    let mut files = Vec::new();
    for entry in entries {
        let p = entry.map_err(|e| Error::io(path, e))?.path();
        let yaml = p
            .extension()
            .is_some_and(|ext| ext == "yaml" || ext == "yml");
        if yaml && p.is_file() {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

fn read_kubeconfig(path: &Path) -> Result<Kubeconfig, Error> {
    Kubeconfig::read_from(path).map_err(|source| Error::Kubeconfig {
        path: path.to_path_buf(),
        source,
    })
}

/// The cluster entry the kubeconfig's current context points at.
pub(crate) fn current_cluster<'a>(kc: &'a Kubeconfig, path: &Path) -> Result<&'a Cluster, Error> {
    let missing = |reason: String| Error::KubeconfigContent {
        path: path.to_path_buf(),
        reason,
    };
    let ctx_name = kc
        .current_context
        .as_deref()
        .ok_or_else(|| missing("no current-context".into()))?;
    let ctx = kc
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| missing(format!("context {ctx_name} not found")))?;
    kc.clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| missing(format!("cluster {} not found", ctx.cluster)))
}

/// Reads the admin kubeconfig of `path` (for CA data and server).
pub(crate) fn load_current_cluster(path: &Path) -> Result<Cluster, Error> {
    let kc = read_kubeconfig(path)?;
    current_cluster(&kc, path).cloned()
}

async fn client_from(kc: Kubeconfig, path: &Path) -> Result<Client, Error> {
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|source| Error::Kubeconfig {
            path: path.to_path_buf(),
            source,
        })?;
    Client::try_from(config)
        .map_err(|e| Error::kube(format!("building a client from {}", path.display()), e))
}

/// A client for any kubeconfig file (for example one from
/// [`service_account_kubeconfig`](crate::service_account_kubeconfig)).
pub async fn client_from_kubeconfig(path: &Path) -> Result<Client, Error> {
    let kc = read_kubeconfig(path)?;
    client_from(kc, path).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn missing_env_var_names_the_variable_and_the_fix() {
        let var = "WORK_AGENT_TEST_SUPPORT_SURELY_UNSET_VAR";
        let err = TestCluster::try_from_env(var)
            .await
            .err()
            .expect("must fail");
        let msg = err.to_string();
        assert!(
            msg.contains(var) && msg.contains("make cluster-up"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn unreadable_kubeconfig_is_an_error_naming_the_file() {
        let err = TestCluster::connect(Path::new("/nonexistent/kubeconfig"))
            .await
            .err()
            .expect("must fail");
        assert!(err.to_string().contains("/nonexistent/kubeconfig"), "{err}");
    }

    #[test]
    fn current_cluster_follows_the_current_context() {
        let kc = Kubeconfig::from_yaml(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: a\n  cluster: {server: 'https://a:1'}\n- name: b\n  cluster: {server: 'https://b:2'}\ncontexts:\n- name: x\n  context: {cluster: b, user: u}\ncurrent-context: x\nusers:\n- name: u\n  user: {token: t}\n",
        )
        .expect("valid kubeconfig");
        let c = current_cluster(&kc, Path::new("k")).expect("found");
        assert_eq!(c.server.as_deref(), Some("https://b:2"));
        let mut broken = kc.clone();
        broken.current_context = Some("nope".into());
        assert!(current_cluster(&broken, Path::new("k")).is_err());
    }

    #[test]
    fn yaml_files_lists_only_yaml_sorted() {
        let dir = std::env::temp_dir().join(crate::unique_name("ts-yaml-files"));
        std::fs::create_dir_all(&dir).expect("temp dir");
        for f in ["b.yaml", "a.yml", "README.md"] {
            std::fs::write(dir.join(f), "x: 1\n").expect("write");
        }
        let files = yaml_files(&dir).expect("listed");
        let names: Vec<_> = files
            .iter()
            .filter_map(|p| p.file_name()?.to_str())
            .collect();
        assert_eq!(names, ["a.yml", "b.yaml"]);
        assert!(yaml_files(&dir.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
