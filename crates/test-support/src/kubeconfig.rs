//! Kubeconfigs for ServiceAccounts, so tests can act with restricted rights.

use std::io::Write;
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::json;

use crate::cluster::load_current_cluster;
use crate::{Error, TestCluster};

/// Lifetime of the tokens: longer than any test, short enough to be harmless.
const TOKEN_SECONDS: i64 = 3600;

/// Creates ServiceAccount `namespace/sa_name` if missing and writes a kubeconfig that
/// authenticates as it with a TokenRequest token; panics with the reason on failure.
pub async fn service_account_kubeconfig(
    cluster: &TestCluster,
    namespace: &str,
    sa_name: &str,
) -> PathBuf {
    match try_service_account_kubeconfig(cluster, namespace, sa_name).await {
        Ok(path) => path,
        Err(e) => panic!("kubeconfig for serviceaccount {namespace}/{sa_name}: {e}"),
    }
}

/// Fallible form of [`service_account_kubeconfig`].
pub async fn try_service_account_kubeconfig(
    cluster: &TestCluster,
    namespace: &str,
    sa_name: &str,
) -> Result<PathBuf, Error> {
    let api: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), namespace);
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(sa_name.to_string()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    match api.create(&PostParams::default(), &sa).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => {
            return Err(Error::kube(
                format!("creating serviceaccount {namespace}/{sa_name}"),
                e,
            ));
        }
    }
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(TOKEN_SECONDS),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let token = api
        .create_token_request(sa_name, &PostParams::default(), &request)
        .await
        .map_err(|e| Error::kube(format!("requesting a token for {namespace}/{sa_name}"), e))?
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::InvalidManifest("TokenRequest answered without a token".into()))?;

    let ca = ca_data(cluster)?;
    let yaml = render(
        &cluster.server_url,
        &ca,
        &format!("{namespace}-{sa_name}"),
        &token,
    )?;
    let dir = crate::run_dir().join("kubeconfigs");
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let path = dir.join(format!(
        "{}.kubeconfig",
        crate::unique_name(&format!("{namespace}-{sa_name}"))
    ));
    write_private(&path, &yaml)?;
    Ok(path)
}

/// The cluster CA bundle (base64) from the admin kubeconfig, for kubeconfigs of other users.
pub(crate) fn ca_data(cluster: &TestCluster) -> Result<String, Error> {
    load_current_cluster(&cluster.kubeconfig)?
        .certificate_authority_data
        .ok_or_else(|| Error::KubeconfigContent {
            path: cluster.kubeconfig.clone(),
            reason: "no certificate-authority-data to copy".into(),
        })
}

/// A single-context kubeconfig with bearer-token auth.
fn render(server: &str, ca_data: &str, name: &str, token: &str) -> Result<String, Error> {
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": {"server": server, "certificate-authority-data": ca_data}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "cluster", "user": name}}],
        "current-context": name,
    });
    Ok(serde_norway::to_string(&doc)?)
}

/// Tokens are credentials: the file is readable by its owner only.
fn write_private(path: &Path, contents: &str) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    f.write_all(contents.as_bytes())
        .map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::config::Kubeconfig;

    #[test]
    fn rendered_kubeconfig_parses_and_carries_the_token() {
        let yaml = render("https://127.0.0.1:6443", "Q0E=", "ns-sa", "tok").expect("renders");
        let kc = Kubeconfig::from_yaml(&yaml).expect("parses");
        let cluster = crate::cluster::current_cluster(&kc, Path::new("x")).expect("cluster");
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some("Q0E="));
        assert_eq!(kc.auth_infos.len(), 1);
        assert!(yaml.contains("token: tok"), "{yaml}");
    }
}
