//! TLS of the MQTT and gRPC transports as upstream builds it (sdk-go `cert/rotation.go`): TLS 1.3
//! only, the system roots plus the configured CA, and a client certificate that is rotated. Every
//! refresh period (5 minutes, or `CERT_CALLBACK_REFRESH_DURATION`) the client ([`crate::client`],
//! whatever its transport) asks [`ReloadingClientCert::reload`] to read the files again; when the certificate changed, it closes
//! the connection so that the reconnect presents the new one. A handshake also reads the files
//! again once the loaded copy is older than the refresh period. A failed reload keeps the last
//! good certificate. No session resumption, so every connection presents the current certificate.
//! rustls with the ring provider, as everywhere in the workspace.
//!
//! Keys may be PKCS#8 (`PRIVATE KEY`), PKCS#1 (`RSA PRIVATE KEY`) or SEC1 (`EC PRIVATE KEY`) PEM.
//! Unreadable or invalid material is an error at start naming its config key.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio_rustls::rustls;

use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, InconsistentKeys, RootCertStore, SignatureScheme};

use crate::Error;
use crate::config::{CertConfig, Pem, go_duration};

/// The environment variable overriding the refresh period (a Go duration such as `30s`).
pub const REFRESH_ENV: &str = "CERT_CALLBACK_REFRESH_DURATION";

/// Upstream's `CertCallbackRefreshDuration`.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(5 * 60);

/// The refresh period for a value of [`REFRESH_ENV`]: unset or empty means the default; a Go
/// duration sets it. Anything else logs a warning and keeps the default, as upstream does.
pub fn refresh_period(value: Option<&str>) -> Duration {
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        None => DEFAULT_REFRESH,
        Some(v) => go_duration(v).unwrap_or_else(|| {
            tracing::warn!(
                variable = REFRESH_ENV,
                value = v,
                default = ?DEFAULT_REFRESH,
                "invalid {REFRESH_ENV} ({v:?}): not a duration like 30s or 5m; using the default"
            );
            DEFAULT_REFRESH
        }),
    }
}

/// The refresh period from the environment, read once per process (upstream reads it in `init`).
pub fn refresh_from_env() -> Duration {
    static PERIOD: OnceLock<Duration> = OnceLock::new();
    *PERIOD.get_or_init(|| match std::env::var(REFRESH_ENV) {
        Ok(v) => refresh_period(Some(&v)),
        Err(std::env::VarError::NotPresent) => refresh_period(None),
        Err(e) => {
            tracing::warn!(
                variable = REFRESH_ENV,
                error = %e,
                default = ?DEFAULT_REFRESH,
                "invalid {REFRESH_ENV}; using the default"
            );
            DEFAULT_REFRESH
        }
    })
}

/// The client config for `certs`, refreshing the client certificate per [`REFRESH_ENV`].
pub fn client_config(certs: &CertConfig) -> Result<Arc<ClientConfig>, Error> {
    client_config_with_refresh(certs, refresh_from_env())
}

/// The client config for `certs`: TLS 1.3 only, system roots plus the CA, and the client
/// certificate re-read when older than `refresh`. Needs a client certificate and key.
pub fn client_config_with_refresh(
    certs: &CertConfig,
    refresh: Duration,
) -> Result<Arc<ClientConfig>, Error> {
    client_tls(certs, refresh).map(|tls| tls.config)
}

/// A client config and its client certificate, for rotating it.
#[derive(Debug, Clone)]
pub struct ClientTls {
    /// TLS 1.3 only, system roots plus the CA, `cert` as the client certificate.
    pub config: Arc<ClientConfig>,
    /// The client certificate the handshakes present.
    pub cert: Arc<ReloadingClientCert>,
}

/// As [`client_config_with_refresh`], with the client certificate for [`ReloadingClientCert::reload`].
pub fn client_tls(certs: &CertConfig, refresh: Duration) -> Result<ClientTls, Error> {
    if !certs.has_certs() {
        return Err(Error::config(
            "clientCertFile",
            "TLS needs a client certificate and key",
        ));
    }
    let (config, cert) = build_client_config(certs, refresh, &[])?;
    let cert = cert.ok_or_else(|| Error::config("clientCertFile", "no client certificate"))?;
    Ok(ClientTls { config, cert })
}

/// The TLS client config of the gRPC transport: TLS 1.3 only, system roots plus the CA, ALPN
/// `h2` (gRPC servers require it), and the reloading client certificate when one is configured (a
/// bearer token alone authenticates without one).
pub fn grpc_client_tls(
    certs: &CertConfig,
    refresh: Duration,
) -> Result<(Arc<ClientConfig>, Option<Arc<ReloadingClientCert>>), Error> {
    build_client_config(certs, refresh, &[b"h2"])
}

fn build_client_config(
    certs: &CertConfig,
    refresh: Duration,
    alpn: &[&[u8]],
) -> Result<(Arc<ClientConfig>, Option<Arc<ReloadingClientCert>>), Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = system_roots();
    if let Some(ca) = &certs.ca {
        add_ca(&mut roots, ca)?;
    }
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| Error::config("tls", e))?
        .with_root_certificates(roots);
    let (mut config, resolver) = match (&certs.client_cert, &certs.client_key) {
        (Some(cert), Some(key)) => {
            let resolver = Arc::new(ReloadingClientCert::new(
                cert.clone(),
                key.clone(),
                refresh,
                provider,
            )?);
            (
                builder.with_client_cert_resolver(resolver.clone()),
                Some(resolver),
            )
        }
        _ => (builder.with_no_client_auth(), None),
    };
    // No session resumption (Go's client has no session cache by default): a resumed session
    // would skip the client certificate, so a reconnect would not present a rotated one.
    config.resumption = rustls::client::Resumption::disabled();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok((Arc::new(config), resolver))
}

/// The operating system's trust store (`SSL_CERT_FILE`/`SSL_CERT_DIR` honoured), as Go's
/// `x509.SystemCertPool`. None at all is fine when a CA is configured.
fn system_roots() -> RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::debug!(error = %e, "reading the system CA certificates");
    }
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(found.certs);
    tracing::debug!(added, ignored, "system CA certificates");
    roots
}

/// The config key a PEM came from: the `*File` key or the `*Data` one.
fn key_of<'a>(pem: &Pem, file_key: &'a str, data_key: &'a str) -> &'a str {
    match pem {
        Pem::File(_) => file_key,
        Pem::Inline(_) => data_key,
    }
}

/// Where a PEM came from, for messages.
fn origin(pem: &Pem) -> String {
    match pem {
        Pem::File(p) => p.display().to_string(),
        Pem::Inline(_) => "inline data".to_string(),
    }
}

/// Every `CERTIFICATE` block of `pem`; at least one.
fn certificates(pem: &Pem, key: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let bytes = pem.load(key)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::config(key, format!("{}: invalid PEM: {e}", origin(pem))))?;
    if certs.is_empty() {
        return Err(Error::config(
            key,
            format!("{}: no PEM CERTIFICATE block", origin(pem)),
        ));
    }
    Ok(certs)
}

fn add_ca(roots: &mut RootCertStore, ca: &Pem) -> Result<(), Error> {
    let key = key_of(ca, "caFile", "caData");
    for cert in certificates(ca, key)? {
        roots.add(cert).map_err(|e| {
            Error::config(key, format!("{}: invalid CA certificate: {e}", origin(ca)))
        })?;
    }
    Ok(())
}

/// The first private key of `pem` in PKCS#8, PKCS#1 or SEC1 form.
fn private_key(pem: &Pem, key: &str) -> Result<PrivateKeyDer<'static>, Error> {
    let bytes = pem.load(key)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => Error::config(
            key,
            format!(
                "{}: no PEM PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block (encrypted keys are not supported)",
                origin(pem)
            ),
        ),
        e => Error::config(key, format!("{}: invalid PEM: {e}", origin(pem))),
    })
}

/// What tells two loads of a certificate and key apart (upstream's `certsEqual`): a digest of the
/// chain and the key.
type Fingerprint = [u8; 32];

/// The client certificate chain and its key, checked to belong together, and their fingerprint.
fn load_certified_key(
    cert: &Pem,
    key: &Pem,
    provider: &CryptoProvider,
) -> Result<(Arc<CertifiedKey>, Fingerprint), Error> {
    let cert_key = key_of(cert, "clientCertFile", "clientCertData");
    let key_key = key_of(key, "clientKeyFile", "clientKeyData");
    let chain = certificates(cert, cert_key)?;
    let private = private_key(key, key_key)?;
    let mut digest = Sha256::new();
    for c in &chain {
        digest.update((c.len() as u64).to_be_bytes());
        digest.update(c);
    }
    digest.update(private.secret_der());
    let fingerprint: Fingerprint = digest.finalize().into();
    let signing = provider
        .key_provider
        .load_private_key(private)
        .map_err(|e| {
            Error::config(
                key_key,
                format!("{}: unusable private key: {e}", origin(key)),
            )
        })?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            return Err(Error::config(
                key_key,
                format!(
                    "{}: the key does not belong to the client certificate ({})",
                    origin(key),
                    origin(cert)
                ),
            ));
        }
        Err(e) => {
            return Err(Error::config(
                cert_key,
                format!("{}: invalid certificate: {e}", origin(cert)),
            ));
        }
    }
    Ok((Arc::new(certified), fingerprint))
}

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    fingerprint: Fingerprint,
    /// Counts the changes of certificate since start.
    generation: u64,
    at: Instant,
}

/// The client certificate for handshakes (upstream's `GetClientCertificate` callback). It is read
/// again by [`reload`](Self::reload), and during a handshake when the loaded copy is older than the
/// refresh period. A failed reload logs a warning and keeps the last good certificate.
#[derive(Debug)]
pub struct ReloadingClientCert {
    cert: Pem,
    key: Pem,
    refresh: Duration,
    provider: Arc<CryptoProvider>,
    loaded: Mutex<Loaded>,
    /// The generation presented by the latest handshake.
    presented: AtomicU64,
}

impl ReloadingClientCert {
    /// Loads the certificate and key now; an error names the config key.
    pub fn new(
        cert: Pem,
        key: Pem,
        refresh: Duration,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, Error> {
        let (key_now, fingerprint) = load_certified_key(&cert, &key, &provider)?;
        Ok(Self {
            cert,
            key,
            refresh,
            provider,
            loaded: Mutex::new(Loaded {
                key: key_now,
                fingerprint,
                generation: 0,
                at: Instant::now(),
            }),
            presented: AtomicU64::new(0),
        })
    }

    /// The refresh period.
    pub fn refresh(&self) -> Duration {
        self.refresh
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Loaded> {
        // A panic while holding the lock cannot leave a half-written `Loaded`.
        self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the certificate and key into `loaded`; true when they differ from the loaded ones.
    fn load_into(&self, loaded: &mut Loaded) -> Result<bool, Error> {
        let (key, fingerprint) = load_certified_key(&self.cert, &self.key, &self.provider)?;
        let changed = fingerprint != loaded.fingerprint;
        if changed {
            tracing::info!(
                cert = %origin(&self.cert),
                "loaded a new client certificate"
            );
        }
        *loaded = Loaded {
            key,
            fingerprint,
            generation: loaded.generation + u64::from(changed),
            at: Instant::now(),
        };
        Ok(changed)
    }

    /// Reads the certificate and key again now (upstream's periodic `loadClientCert`): true when
    /// they changed. An error keeps the loaded certificate.
    pub fn reload(&self) -> Result<bool, Error> {
        self.load_into(&mut self.lock())
    }

    /// The certificate to present now, reloaded first when it is due.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current_generation().0
    }

    fn current_generation(&self) -> (Arc<CertifiedKey>, u64) {
        let mut loaded = self.lock();
        if loaded.at.elapsed() >= self.refresh
            && let Err(e) = self.load_into(&mut loaded)
        {
            tracing::warn!(
                error = %e,
                "reloading the client certificate failed; keeping the last good one"
            );
        }
        (loaded.key.clone(), loaded.generation)
    }

    /// Whether the latest handshake presented an older certificate than the loaded one: the
    /// connection it opened should be closed to present the new one.
    pub fn outdated(&self) -> bool {
        self.presented.load(Ordering::SeqCst) != self.lock().generation
    }
}

impl ResolvesClientCert for ReloadingClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        let (key, generation) = self.current_generation();
        self.presented.store(generation, Ordering::SeqCst);
        Some(key)
    }

    fn has_certs(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use base64::Engine;
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    use rustls::pki_types::ServerName;
    use rustls::server::WebPkiClientVerifier;
    use rustls::{ClientConnection, ProtocolVersion, ServerConfig, ServerConnection};

    use super::*;

    /// A throw-away RSA-2048 key in PKCS#1 form (`openssl genrsa -traditional 2048`), only for
    /// checking that PKCS#1 keys load: ring cannot generate RSA keys.
    const RSA_PKCS1: &str = "-----BEGIN RSA PRIVATE KEY-----
MIIEpAIBAAKCAQEArIeifiqx5DRgAAHcawJlbnJedlIe4jJSmPm5iHrh1YxNRFF5
XqRjQjwIdI1un3BUsDpPbSraa4ZVRUfKDVgVvytU3rFNCnQRbd0fn2kGtnPQokSY
2Gt4wVuwEJ9D2RRXleTLMO104+LTGsfHtrmz5XObsl9jGOJOcOAycmpNduZmaftX
lQsAy43vl58IXeu6jFi9gwAP7IuZ+rCYP7g3GmkPQfJNZqG9athW34aU0Pfmqfk7
RayRPE1wKAx4Xlq4IxUoMlzWqebJUjDSMazZRWaISZUfYNw28f6ZSGM8NSYYhPn+
FVyIssVw443BNd26Y9bYxq1R2ztMs2FqpJVydwIDAQABAoIBABnBxgh/5z7ictKN
dJKlMO9kM6YGbIXobVxZK9GsRrrSz1Y7s5rlf8wLmleMJc+3vWzxx5nMo/8ZdvF4
3jlPxS9dELaOUaoV2eRE9sudqlriv2r6QrdMlCKJxac1n7NwzgKavZr4WFMNMeb1
nGMzJiBDOiNPCkRUxNElJ2Lda+MsE4QFgf+zv3n0Qy8V2y+w4K2MveYgD+pO7uE2
tbHh538Yr/v8eL0UDzAOl2wIYjQ1dwdPszH+SOMwHbkFavvQrSoyv5VLHqzsPfhs
lVJP5jl4iA2OBzgVrbultZIN2eqJoambhdiyvolpzR7h7gB1b8jXo9Z2n4D127LM
0GIMwEECgYEA4ePL8sAHq26sYBi1L7MxNqKs8CfW18TN7Ffh0TLyiOcVeo2NBe9g
qGNTz7abmrZ6BrWqLyb/8PnKFr2bf1d3DPZ3dpMTAzc2NnD48YQkjcnRCe7Lr4O/
MMsjrbjxX4WXe6Zq0Z/+/GA4sphJ+TMhWx3hOvyrF/PUHo7BaSIqkaMCgYEAw4b+
4hRJekN0lDj5ET9zIIa6yHd5BaWSvH5y6f22J5Sn9iBJ8ZqBBdm8AwJoaBYax/d7
W54cvzNqaozlq1YgWKBfepHSMxtTjzL/AFB1BfPEV3iPihQJZ6ksGt+GeyHA8wZn
arnMTJR6Ju/Q8gWTjFKIpZVnl0Wqq0zNItI+cR0CgYEAiEqfZWoDtqXiD2EZARzH
FsX0PjprYGh4Lp+fuk9ZEs0KopUBf5E86pxzlyIApMpwudemRSjsyAKOskXYqm6l
gAa9caevkwMfDJ4BNgea3onkPG/+KXn+Q3xtnIW37QB3s71nOe+lM7UCwI8uItN8
zrMqkCKfQKZ3V7CedcaNlK0CgYB2AILS7mtp3kv9KGUog6J3ftg7I99mCQcFu0qe
7P+B47V6VQJLTXOQlFdjeZCJQM3o4PMR19qBigYvR9lUDiZ3VlJJJrg1H8jOI3jC
N8xoSzWzlI8MRgtnBDIaBcyjgztvb+35+yfRD8qotRLk/XiOt0DArepW4TSfLTqg
SUJmAQKBgQCo9p+SMrzFwZ/DBKzHaiOR6Xj4aobYsn1Xh9zwi7D17u9dFkonZNSS
vSSDqWlxoj8vrQ8Ft2A5Id6ONgGda8bpW09WFPLEfh89U5KVeuRQeu+8JBHLiRr+
7hkNWRqqVgLn2nCN1OZcAH5JriXjLEu0DrF1Gf4ALJ510sq6CXCWEg==
-----END RSA PRIVATE KEY-----
";

    /// A temporary directory removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default();
            let dir = std::env::temp_dir().join(format!(
                "cloudevents-tls-{name}-{}-{nanos}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).expect("temp dir");
            Self(dir)
        }

        fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
            let p = self.0.join(name);
            // Replace atomically, as a certificate rotation would.
            let tmp = self.0.join(format!(".{name}.tmp"));
            std::fs::write(&tmp, contents).expect("write");
            std::fs::rename(&tmp, &p).expect("rename");
            p
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    struct Ca {
        issuer: Issuer<'static, KeyPair>,
        pem: String,
        der: CertificateDer<'static>,
    }

    fn new_ca(name: &str) -> Ca {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA");
        Ca {
            issuer: Issuer::new(params, key),
            pem: cert.pem(),
            der: cert.der().clone(),
        }
    }

    /// A leaf certificate for `key` (PEM), signed by `ca`.
    fn leaf(ca: &Ca, key: &KeyPair, cn: &str, sans: &[&str], client: bool) -> String {
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans).expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        params.signed_by(key, &ca.issuer).expect("leaf").pem()
    }

    fn pem_block(label: &str, der: &[u8]) -> String {
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).expect("ascii"))
            .collect();
        format!(
            "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
            lines.join("\n")
        )
    }

    /// The tag's contents and what follows, of the DER element at the start of `der`.
    fn der_element(der: &[u8]) -> (u8, &[u8], &[u8]) {
        let (len, header) = if der[1] < 0x80 {
            (der[1] as usize, 2)
        } else {
            let n = (der[1] & 0x7f) as usize;
            let len = der[2..2 + n]
                .iter()
                .fold(0usize, |a, b| (a << 8) | *b as usize);
            (len, 2 + n)
        };
        (der[0], &der[header..header + len], &der[header + len..])
    }

    fn der_wrap(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let len = contents.len();
        if len < 0x80 {
            out.push(len as u8);
        } else {
            let bytes: Vec<u8> = len
                .to_be_bytes()
                .into_iter()
                .skip_while(|b| *b == 0)
                .collect();
            out.push(0x80 | bytes.len() as u8);
            out.extend(bytes);
        }
        out.extend_from_slice(contents);
        out
    }

    /// The SEC1 `ECPrivateKey` inside a PKCS#8 EC key.
    fn sec1_of(pkcs8: &[u8]) -> Vec<u8> {
        let (_, info, _) = der_element(pkcs8);
        let (_, _version, rest) = der_element(info);
        let (_, _algorithm, rest) = der_element(rest);
        let (tag, key, _) = der_element(rest);
        assert_eq!(tag, 0x04, "privateKey OCTET STRING");
        key.to_vec()
    }

    /// A PKCS#1 RSA key wrapped as PKCS#8 (rcgen with ring reads only PKCS#8).
    fn pkcs8_of_rsa(pkcs1: &[u8]) -> Vec<u8> {
        const RSA_ALGORITHM: &[u8] = &[
            0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05,
            0x00,
        ];
        let body = [
            &[0x02, 0x01, 0x00][..],
            RSA_ALGORITHM,
            &der_wrap(0x04, pkcs1),
        ]
        .concat();
        der_wrap(0x30, &body)
    }

    /// A TLS server on `ca`'s certificate for localhost, requiring client certificates of `ca`.
    fn server(
        ca: &Ca,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Arc<ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = KeyPair::generate().expect("key");
        let cert = leaf(ca, &key, "broker", &["localhost", "127.0.0.1"], false);
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<_, _>>()
            .expect("chain");
        let mut roots = RootCertStore::empty();
        roots.add(ca.der.clone()).expect("CA root");
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .expect("verifier");
        let config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .expect("versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, PrivateKeyDer::Pkcs8(key.serialize_der().into()))
            .expect("server config");
        Arc::new(config)
    }

    /// Runs a handshake in memory; the negotiated version and the client chain the server saw.
    fn handshake(
        client: Arc<ClientConfig>,
        server: Arc<ServerConfig>,
    ) -> Result<(ProtocolVersion, Vec<CertificateDer<'static>>), rustls::Error> {
        let name = ServerName::try_from("localhost").expect("name");
        let mut c = ClientConnection::new(client, name)?;
        let mut s = ServerConnection::new(server)?;
        for _ in 0..20 {
            if !c.is_handshaking() && !s.is_handshaking() {
                let version = c.protocol_version().expect("version");
                let chain = s.peer_certificates().unwrap_or_default().to_vec();
                return Ok((version, chain));
            }
            let mut buf = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut buf).expect("client writes");
            }
            let mut rd = &buf[..];
            while !rd.is_empty() {
                s.read_tls(&mut rd).expect("server reads");
                s.process_new_packets()?;
            }
            let mut buf = Vec::new();
            while s.wants_write() {
                s.write_tls(&mut buf).expect("server writes");
            }
            let mut rd = &buf[..];
            while !rd.is_empty() {
                c.read_tls(&mut rd).expect("client reads");
                c.process_new_packets()?;
            }
        }
        panic!("handshake did not finish");
    }

    /// CA, client certificate and key files for a client of `ca`.
    fn client_files(dir: &TempDir, ca: &Ca, cn: &str) -> CertConfig {
        let key = KeyPair::generate().expect("key");
        CertConfig {
            ca: Some(Pem::File(dir.write("ca.crt", &ca.pem))),
            client_cert: Some(Pem::File(
                dir.write("tls.crt", leaf(ca, &key, cn, &[], true)),
            )),
            client_key: Some(Pem::File(dir.write("tls.key", key.serialize_pem()))),
        }
    }

    fn cn_of(chain: &[CertificateDer<'_>], cn: &str) -> bool {
        chain
            .first()
            .is_some_and(|c| c.windows(cn.len()).any(|w| w == cn.as_bytes()))
    }

    #[test]
    fn tls13_only_with_the_ca_appended_and_the_client_certificate() {
        let dir = TempDir::new("config");
        let ca = new_ca("test CA");
        let certs = client_files(&dir, &ca, "agent-one");
        let config = client_config_with_refresh(&certs, DEFAULT_REFRESH).expect("config");

        let (version, chain) =
            handshake(config.clone(), server(&ca, &[&rustls::version::TLS13])).expect("1.3");
        assert_eq!(version, ProtocolVersion::TLSv1_3);
        assert!(
            cn_of(&chain, "agent-one"),
            "server saw the client certificate"
        );

        let err = handshake(config.clone(), server(&ca, &[&rustls::version::TLS12]))
            .expect_err("a TLS 1.2-only server is refused");
        assert!(
            format!("{err:?}").contains("Incompatible")
                || format!("{err:?}").contains("ProtocolVersion"),
            "{err:?}"
        );

        // Without the CA the broker's certificate is not trusted (it is not a system root).
        let no_ca = CertConfig {
            ca: None,
            ..certs.clone()
        };
        let config = client_config_with_refresh(&no_ca, DEFAULT_REFRESH).expect("config");
        let err = handshake(config, server(&ca, &[&rustls::version::TLS13]))
            .expect_err("untrusted broker");
        assert!(format!("{err:?}").contains("UnknownIssuer"), "{err:?}");

        // The CA as inline data works the same.
        let inline = CertConfig {
            ca: Some(Pem::Inline(ca.pem.clone().into_bytes())),
            ..certs
        };
        let config = client_config_with_refresh(&inline, DEFAULT_REFRESH).expect("config");
        handshake(config, server(&ca, &[&rustls::version::TLS13])).expect("inline CA");
    }

    #[test]
    fn pkcs8_sec1_and_pkcs1_keys_load() {
        let dir = TempDir::new("keys");
        let ca = new_ca("test CA");
        let provider = rustls::crypto::ring::default_provider();

        let ec = KeyPair::generate().expect("key");
        let cert = dir.write("ec.crt", leaf(&ca, &ec, "ec", &[], true));
        let pkcs8 = dir.write("pkcs8.key", ec.serialize_pem());
        let sec1 = dir.write(
            "sec1.key",
            pem_block("EC PRIVATE KEY", &sec1_of(&ec.serialize_der())),
        );
        for key in [pkcs8, sec1] {
            load_certified_key(&Pem::File(cert.clone()), &Pem::File(key.clone()), &provider)
                .unwrap_or_else(|e| panic!("{}: {e}", key.display()));
        }

        let pkcs1_pem = RSA_PKCS1;
        let pkcs1_der = PrivateKeyDer::from_pem_slice(pkcs1_pem.as_bytes()).expect("PEM");
        assert!(matches!(pkcs1_der, PrivateKeyDer::Pkcs1(_)));
        let rsa = KeyPair::from_pkcs8_der_and_sign_algo(
            &pkcs8_of_rsa(pkcs1_der.secret_der()).into(),
            &rcgen::PKCS_RSA_SHA256,
        )
        .expect("RSA key");
        let rsa_cert = dir.write("rsa.crt", leaf(&ca, &rsa, "rsa", &[], true));
        let rsa_key = dir.write("rsa.key", pkcs1_pem);
        let certs = CertConfig {
            ca: Some(Pem::Inline(ca.pem.clone().into_bytes())),
            client_cert: Some(Pem::File(rsa_cert)),
            client_key: Some(Pem::File(rsa_key)),
        };
        let config = client_config_with_refresh(&certs, DEFAULT_REFRESH).expect("PKCS#1");
        let (_, chain) =
            handshake(config, server(&ca, &[&rustls::version::TLS13])).expect("RSA client");
        assert!(cn_of(&chain, "rsa"));
    }

    #[test]
    fn bad_material_errors_name_the_key() {
        let dir = TempDir::new("bad");
        let ca = new_ca("test CA");
        let good = client_files(&dir, &ca, "agent");
        let garbage = dir.write("garbage.pem", "not a PEM file\n");
        let broken = dir.write(
            "broken.pem",
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        );
        let not_x509 = dir.write("not-x509.pem", pem_block("CERTIFICATE", b"nonsense"));
        let missing = Pem::File(dir.0.join("missing.pem"));
        let other_key = dir.write(
            "other.key",
            KeyPair::generate().expect("key").serialize_pem(),
        );
        let with = |f: &dyn Fn(&mut CertConfig)| {
            let mut c = good.clone();
            f(&mut c);
            c
        };
        let cases: Vec<(CertConfig, &str, &str)> = vec![
            (
                with(&|c| c.ca = Some(Pem::File(garbage.clone()))),
                "caFile",
                "no PEM CERTIFICATE",
            ),
            (
                with(&|c| c.ca = Some(Pem::File(broken.clone()))),
                "caFile",
                "invalid PEM",
            ),
            (
                with(&|c| c.ca = Some(Pem::File(not_x509.clone()))),
                "caFile",
                "invalid CA certificate",
            ),
            (
                with(&|c| c.ca = Some(missing.clone())),
                "caFile",
                "missing.pem",
            ),
            (
                with(&|c| c.ca = Some(Pem::Inline(b"junk".to_vec()))),
                "caData",
                "inline data",
            ),
            (
                with(&|c| c.client_cert = Some(Pem::File(garbage.clone()))),
                "clientCertFile",
                "no PEM CERTIFICATE",
            ),
            (
                with(&|c| c.client_cert = Some(missing.clone())),
                "clientCertFile",
                "missing.pem",
            ),
            (
                with(&|c| c.client_cert = Some(Pem::File(not_x509.clone()))),
                "clientCertFile",
                "invalid certificate",
            ),
            (
                with(&|c| c.client_key = Some(Pem::File(garbage.clone()))),
                "clientKeyFile",
                "no PEM PRIVATE KEY",
            ),
            (
                with(&|c| c.client_key = Some(missing.clone())),
                "clientKeyFile",
                "missing.pem",
            ),
            (
                with(&|c| c.client_key = Some(Pem::File(other_key.clone()))),
                "clientKeyFile",
                "does not belong",
            ),
            (
                with(&|c| {
                    c.client_key = Some(Pem::Inline(
                        pem_block("PRIVATE KEY", b"nonsense").into_bytes(),
                    ))
                }),
                "clientKeyData",
                "unusable private key",
            ),
            (
                with(&|c| c.client_key = None),
                "clientCertFile",
                "client certificate and key",
            ),
        ];
        for (certs, key, what) in cases {
            let err = client_config_with_refresh(&certs, DEFAULT_REFRESH)
                .expect_err(key)
                .to_string();
            assert!(
                err.contains(&format!("config {key}:")) && err.contains(what),
                "{key}/{what}: {err}"
            );
        }
    }

    #[test]
    fn refresh_period_from_the_environment_value() {
        assert_eq!(refresh_period(None), DEFAULT_REFRESH);
        assert_eq!(refresh_period(Some("")), DEFAULT_REFRESH);
        assert_eq!(refresh_period(Some("30s")), Duration::from_secs(30));
        assert_eq!(refresh_period(Some("1m")), Duration::from_secs(60));
        assert_eq!(refresh_period(Some("1h30m")), Duration::from_secs(5400));
        // Invalid values are not errors: a warning, and the default (as upstream).
        assert_eq!(refresh_period(Some("soon")), DEFAULT_REFRESH);
        assert_eq!(
            refresh_period(Some("30")),
            DEFAULT_REFRESH,
            "a unit is required"
        );
        assert_eq!(refresh_period(Some("-1s")), DEFAULT_REFRESH);
    }

    fn rotate(dir: &TempDir, ca: &Ca, cn: &str) {
        let key = KeyPair::generate().expect("key");
        dir.write("tls.crt", leaf(ca, &key, cn, &[], true));
        dir.write("tls.key", key.serialize_pem());
    }

    fn resolver_cn(r: &ReloadingClientCert, cn: &str) -> bool {
        cn_of(&r.current().cert, cn)
    }

    #[test]
    fn reload_reports_a_change_once_and_whether_the_connection_is_outdated() {
        let dir = TempDir::new("reload");
        let ca = new_ca("test CA");
        let certs = client_files(&dir, &ca, "first");
        let tls = client_tls(&certs, DEFAULT_REFRESH).expect("config");
        let srv = server(&ca, &[&rustls::version::TLS13]);
        assert!(
            !tls.cert.reload().expect("reads"),
            "the first load is no rotation"
        );
        let (_, chain) = handshake(tls.config.clone(), srv.clone()).expect("handshake");
        assert!(cn_of(&chain, "first"));
        assert!(!tls.cert.outdated());

        // The same files written again are not a change.
        let same = std::fs::read(dir.0.join("tls.crt")).expect("read");
        dir.write("tls.crt", same);
        assert!(!tls.cert.reload().expect("reads"));

        rotate(&dir, &ca, "second");
        assert!(tls.cert.reload().expect("reads"), "rotated");
        assert!(tls.cert.outdated(), "the connection presented the first");
        assert!(!tls.cert.reload().expect("reads"), "reported once");
        let (_, chain) = handshake(tls.config.clone(), srv).expect("handshake");
        assert!(cn_of(&chain, "second"));
        assert!(
            !tls.cert.outdated(),
            "the new connection presented the second"
        );

        // A broken rotation is an error and keeps the last good certificate.
        dir.write("tls.key", "half-written");
        assert!(tls.cert.reload().is_err());
        assert!(!tls.cert.outdated());
        assert!(resolver_cn(&tls.cert, "second"));
    }

    #[test]
    fn resolver_reloads_a_rotated_certificate_after_the_period() {
        let dir = TempDir::new("rotate");
        let ca = new_ca("test CA");
        let certs = client_files(&dir, &ca, "first");
        let period = Duration::from_millis(300);
        let r = ReloadingClientCert::new(
            certs.client_cert.clone().expect("cert"),
            certs.client_key.clone().expect("key"),
            period,
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .expect("loads");
        assert!(resolver_cn(&r, "first"));

        rotate(&dir, &ca, "second");
        assert!(resolver_cn(&r, "first"), "not due yet: the loaded copy");
        std::thread::sleep(period + Duration::from_millis(50));
        assert!(resolver_cn(&r, "second"), "due: the rotated certificate");

        // A broken rotation keeps the last good certificate, also on the next attempts.
        dir.write("tls.key", "half-written");
        std::thread::sleep(period + Duration::from_millis(50));
        assert!(resolver_cn(&r, "second"));
        assert!(resolver_cn(&r, "second"));
        std::fs::remove_file(dir.0.join("tls.crt")).expect("rm");
        assert!(resolver_cn(&r, "second"));

        // Repaired: picked up at the next handshake.
        rotate(&dir, &ca, "third");
        assert!(resolver_cn(&r, "third"));

        // And through a handshake: the server sees the certificate of the moment.
        let config = client_config_with_refresh(&certs, period).expect("config");
        let srv = server(&ca, &[&rustls::version::TLS13]);
        let (_, chain) = handshake(config.clone(), srv.clone()).expect("handshake");
        assert!(cn_of(&chain, "third"));
        rotate(&dir, &ca, "fourth");
        std::thread::sleep(period + Duration::from_millis(50));
        let (_, chain) = handshake(config, srv).expect("handshake");
        assert!(cn_of(&chain, "fourth"));
    }
}
