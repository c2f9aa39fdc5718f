//! Client-certificate credentials issued by a control plane's own CA, as an OCM registration
//! agent writes them: `tls.crt`, `tls.key` and a `kubeconfig` naming both files by path, in one
//! directory. Short validity and re-issuing in place let tests rotate and expire them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::certs::{Ca, Leaf};
use crate::{Error, TestCluster};

/// Who a certificate authenticates as: the user (CN) and its groups (O).
#[derive(Clone, Debug)]
pub struct CertIdentity {
    /// The user name (certificate CN).
    pub user: String,
    /// The groups (certificate O entries).
    pub groups: Vec<String>,
}

impl CertIdentity {
    /// The identity an OCM registration agent gets for `cluster`: user
    /// `system:open-cluster-management:<cluster>:<agent>` in group
    /// `system:open-cluster-management:<cluster>`.
    pub fn ocm_agent(cluster: &str, agent: &str) -> Self {
        Self {
            user: format!("system:open-cluster-management:{cluster}:{agent}"),
            groups: vec![format!("system:open-cluster-management:{cluster}")],
        }
    }
}

/// Issues a certificate for `who`, valid from a minute ago for `valid_for`, and writes
/// `dir/tls.crt`, `dir/tls.key` and `dir/kubeconfig` (the last naming the first two by path).
/// Called again on the same directory it rotates the certificate in place (each file replaced
/// atomically). Returns the kubeconfig path.
pub fn write_client_cert_kubeconfig(
    cluster: &TestCluster,
    dir: &Path,
    who: &CertIdentity,
    valid_for: Duration,
) -> Result<PathBuf, Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let (cert_pem, key_pem) = issue(cluster, who, valid_for)?;
    let crt = dir.join("tls.crt");
    let key = dir.join("tls.key");
    replace(&key, &key_pem)?;
    replace(&crt, &cert_pem)?;
    let ca = crate::kubeconfig::ca_data(cluster)?;
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "hub", "cluster": {"server": cluster.server_url, "certificate-authority-data": ca}}],
        "users": [{"name": "agent", "user": {
            "client-certificate": crt.display().to_string(),
            "client-key": key.display().to_string(),
        }}],
        "contexts": [{"name": "default", "context": {"cluster": "hub", "user": "agent"}}],
        "current-context": "default",
    });
    let kubeconfig = dir.join("kubeconfig");
    replace(&kubeconfig, &serde_norway::to_string(&doc)?)?;
    Ok(kubeconfig)
}

/// A fresh key and a certificate for it signed by the cluster's CA (`<run dir>/<name>/pki`).
fn issue(
    cluster: &TestCluster,
    who: &CertIdentity,
    valid_for: Duration,
) -> Result<(String, String), Error> {
    let pki = cluster
        .kubeconfig
        .parent()
        .map(|p| p.join("pki"))
        .unwrap_or_else(|| PathBuf::from("pki"));
    let read = |name: &str| {
        let path = pki.join(name);
        std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))
    };
    let ca_pem = read("ca.crt")?;
    // The CA's subject as e2e/scripts/controlplane.sh makes it; chains are built by subject.
    let ca_name = ca_common_name(&ca_pem, &cluster.kubeconfig)?;
    let ca = Ca::existing(&ca_pem, &ca_name, &read("ca.key")?)?;
    let leaf = Leaf {
        organizations: who.groups.clone(),
        valid_for: Some(valid_for),
        ..Leaf::client(&who.user)
    };
    let signed = ca.sign(&leaf)?;
    Ok((signed.cert_pem, signed.key_pem))
}

/// The CN of the CA certificate, read with openssl (already required by the control-plane
/// scripts).
fn ca_common_name(ca_pem: &str, kubeconfig: &Path) -> Result<String, Error> {
    use std::io::Write;
    let mut child = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-nameopt", "multiline"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| Error::io("openssl", e))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(ca_pem.as_bytes())
            .map_err(|e| Error::io("openssl", e))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| Error::io("openssl", e))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("commonName").map(str::trim))
        .and_then(|l| l.strip_prefix('='))
        .map(|cn| cn.trim().to_string())
        .ok_or_else(|| Error::KubeconfigContent {
            path: kubeconfig.to_path_buf(),
            reason: "cannot read the CN of the cluster's CA certificate".into(),
        })
}

/// Writes a file atomically (temp file + rename), owner-readable only.
fn replace(path: &Path, contents: &str) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, contents).map_err(|e| Error::io(&tmp, e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}
