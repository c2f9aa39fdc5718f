//! Hub credentials that follow their files. An OCM registration agent rotates the hub client
//! certificate before it expires by rewriting `tls.crt`/`tls.key` (and perhaps `kubeconfig`) in
//! the mounted Secret. The hub client handed to the agent delegates every request to an inner
//! client that is rebuilt whenever the kubeconfig or a file it names changes; requests already
//! sent (and open watches) finish on the old one, the next ones use the new credentials.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// How often the credential files are compared with what the client was built from.
pub const POLL_PERIOD: Duration = Duration::from_secs(5);

/// Builds the hub client from `config` (read from `path`, whose current server is `server`)
/// and starts the task that rebuilds it when the files change.
pub fn reloading_client(
    path: &Path,
    config: kube::Config,
    server: &str,
    qps: f64,
    burst: u32,
) -> Result<kube::Client, String> {
    let inner = crate::client::build(config, qps, burst, crate::client::ApiServer::Hub)?;
    let default_namespace = inner.default_namespace().to_string();
    let current = Arc::new(RwLock::new(inner));
    let for_requests = current.clone();
    let service = tower::service_fn(move |request: hyper::Request<kube::client::Body>| {
        let client = for_requests
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        async move { client.send(request).await }
    });
    let watch = CredentialFiles {
        path: path.to_path_buf(),
        server: server.to_string(),
        qps,
        burst,
        seen: fingerprint(path),
    };
    tokio::spawn(watch.run(current));
    Ok(kube::Client::new(service, default_namespace))
}

/// What the current inner client was built from.
struct CredentialFiles {
    path: PathBuf,
    server: String,
    qps: f64,
    burst: u32,
    seen: Vec<u8>,
}

impl CredentialFiles {
    async fn run(mut self, current: Arc<RwLock<kube::Client>>) {
        loop {
            tokio::time::sleep(POLL_PERIOD).await;
            let now = fingerprint(&self.path);
            if now == self.seen {
                continue;
            }
            match self.rebuild().await {
                Ok(client) => {
                    *current.write().unwrap_or_else(PoisonError::into_inner) = client;
                    self.seen = now;
                    tracing::info!(kubeconfig = %self.path.display(), "hub credentials changed; hub client rebuilt");
                }
                // Perhaps caught mid-rewrite: tried again at the next poll.
                Err(e) => {
                    tracing::warn!(kubeconfig = %self.path.display(), error = %e, "hub credentials changed but cannot be used yet")
                }
            }
        }
    }

    async fn rebuild(&self) -> Result<kube::Client, String> {
        let kubeconfig = Kubeconfig::read_from(&self.path).map_err(|e| e.to_string())?;
        let server = current_server(&kubeconfig)
            .ok_or_else(|| "no server URL for the current context".to_string())?;
        if server != self.server {
            // The hub hash (part of every AppliedManifestWork name) derives from the URL: a new
            // hub needs a restart, which --terminate-on-files gives.
            return Err(format!(
                "the hub server changed from {} to {server}; restart the agent to serve the new hub",
                self.server
            ));
        }
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| e.to_string())?;
        crate::client::build(config, self.qps, self.burst, crate::client::ApiServer::Hub)
    }
}

/// The bytes of the kubeconfig and of every file it names (certificates, keys, CA bundles),
/// relative paths resolved against the kubeconfig's directory. Unreadable files count as empty.
fn fingerprint(path: &Path) -> Vec<u8> {
    let mut out = std::fs::read(path).unwrap_or_default();
    let Ok(kubeconfig) = Kubeconfig::read_from(path) else {
        return out;
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let users = kubeconfig
        .auth_infos
        .iter()
        .filter_map(|a| a.auth_info.as_ref())
        .flat_map(|a| [a.client_certificate.clone(), a.client_key.clone()]);
    let clusters = kubeconfig
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref())
        .map(|c| c.certificate_authority.clone());
    for file in users.chain(clusters).flatten() {
        out.extend_from_slice(b"\0");
        out.extend(std::fs::read(dir.join(file)).unwrap_or_default());
    }
    out
}

/// The server URL of the kubeconfig's current context (else its first context).
pub fn current_server(kubeconfig: &Kubeconfig) -> Option<String> {
    let context_name = kubeconfig.current_context.as_deref();
    let context = kubeconfig
        .contexts
        .iter()
        .find(|c| Some(c.name.as_str()) == context_name)
        .or_else(|| kubeconfig.contexts.first())?;
    let cluster_name = &context.context.as_ref()?.cluster;
    kubeconfig
        .clusters
        .iter()
        .find(|c| &c.name == cluster_name)?
        .cluster
        .as_ref()?
        .server
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_follows_the_files_the_kubeconfig_names() {
        let dir = std::env::temp_dir().join(format!("hub-credentials-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            "apiVersion: v1\nkind: Config\nclusters: [{name: hub, cluster: {server: 'https://hub'}}]\n\
             users: [{name: a, user: {client-certificate: tls.crt, client-key: tls.key}}]\n\
             contexts: [{name: c, context: {cluster: hub, user: a}}]\ncurrent-context: c\n",
        )
        .expect("write kubeconfig");
        std::fs::write(dir.join("tls.crt"), "cert-1").expect("write");
        std::fs::write(dir.join("tls.key"), "key-1").expect("write");
        std::fs::write(dir.join("unrelated"), "x").expect("write");
        let first = fingerprint(&kubeconfig);
        assert_eq!(fingerprint(&kubeconfig), first);
        std::fs::write(dir.join("unrelated"), "y").expect("write");
        assert_eq!(fingerprint(&kubeconfig), first, "only named files count");
        std::fs::write(dir.join("tls.crt"), "cert-2").expect("write");
        let second = fingerprint(&kubeconfig);
        assert_ne!(second, first);
        std::fs::write(dir.join("tls.key"), "key-2").expect("write");
        assert_ne!(fingerprint(&kubeconfig), second);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
