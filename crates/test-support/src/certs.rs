//! Certificates for tests, as PEM: a CA made on the spot (or a control plane's, from its key),
//! and the server and client certificates it signs. The one way tests make TLS material in Rust
//! (`e2e/scripts/pki.sh` is the scripts' counterpart).

use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair,
};

use crate::Error;

fn bad(what: &str, e: impl std::fmt::Display) -> Error {
    Error::InvalidManifest(format!("{what}: {e}"))
}

/// A certificate and its private key, both PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertAndKey {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

impl CertAndKey {
    /// The certificate in DER, as a TLS server records the one a client presented.
    pub fn cert_der(&self) -> Result<Vec<u8>, Error> {
        use tokio_rustls::rustls::pki_types::CertificateDer;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(self.cert_pem.as_bytes())
            .map(|c| c.to_vec())
            .map_err(|e| bad("the certificate", e))
    }
}

/// What a certificate is for and whom it names.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// The subject's CN (a client's user name).
    pub common_name: String,
    /// The subject's O entries (a client's groups).
    pub organizations: Vec<String>,
    /// Subject alternative names: DNS names or IP addresses.
    pub names: Vec<String>,
    /// Server or client authentication.
    pub usage: ExtendedKeyUsagePurpose,
    /// Valid from a minute ago for this long; `None`: rcgen's default (until 4096).
    pub valid_for: Option<Duration>,
}

impl Leaf {
    /// A serving certificate for `names` (e.g. `127.0.0.1`, `localhost`).
    pub fn server(common_name: &str, names: &[&str]) -> Self {
        Self {
            common_name: common_name.to_string(),
            organizations: Vec::new(),
            names: names.iter().map(|n| n.to_string()).collect(),
            usage: ExtendedKeyUsagePurpose::ServerAuth,
            valid_for: None,
        }
    }

    /// A client certificate for user `common_name`.
    pub fn client(common_name: &str) -> Self {
        Self {
            common_name: common_name.to_string(),
            organizations: Vec::new(),
            names: Vec::new(),
            usage: ExtendedKeyUsagePurpose::ClientAuth,
            valid_for: None,
        }
    }
}

/// A certificate authority that signs [`Leaf`]s.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Ca {
    /// A new self-signed CA named `common_name`.
    pub fn new(common_name: &str) -> Result<Self, Error> {
        let key = KeyPair::generate().map_err(|e| bad("generating the CA key", e))?;
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let pem = params
            .self_signed(&key)
            .map_err(|e| bad("self-signing the CA", e))?
            .pem();
        Ok(Self {
            issuer: Issuer::new(params, key),
            pem,
        })
    }

    /// An existing CA: its certificate (`cert_pem`), its subject's CN (chains are built by
    /// subject) and its key.
    pub fn existing(cert_pem: &str, common_name: &str, key_pem: &str) -> Result<Self, Error> {
        let key = KeyPair::from_pem(key_pem).map_err(|e| bad("the CA key", e))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        Ok(Self {
            issuer: Issuer::new(params, key),
            pem: cert_pem.to_string(),
        })
    }

    /// The CA's certificate (PEM), for trust stores.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A fresh key and a certificate for `leaf`, signed by this CA.
    pub fn sign(&self, leaf: &Leaf) -> Result<CertAndKey, Error> {
        let key = KeyPair::generate().map_err(|e| bad("generating a key", e))?;
        let mut params =
            CertificateParams::new(leaf.names.clone()).map_err(|e| bad("the names", e))?;
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, leaf.common_name.clone());
        for o in &leaf.organizations {
            params
                .distinguished_name
                .push(DnType::OrganizationName, o.clone());
        }
        params.extended_key_usages = vec![leaf.usage.clone()];
        if let Some(valid_for) = leaf.valid_for {
            let now = time::OffsetDateTime::now_utc();
            params.not_before = now - time::Duration::minutes(1);
            params.not_after =
                now + time::Duration::try_from(valid_for).map_err(|e| bad("validity", e))?;
        }
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| bad("signing the certificate", e))?;
        Ok(CertAndKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::client::danger::ServerCertVerifier;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).expect("one certificate")
    }

    fn roots(ca: &Ca) -> std::sync::Arc<rustls::RootCertStore> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der(ca.pem())).expect("the CA is a trust anchor");
        std::sync::Arc::new(roots)
    }

    #[test]
    fn a_server_and_a_client_certificate_verify_against_their_ca_only() {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let ca = Ca::new("test-ca").expect("CA");
        let other = Ca::new("other-ca").expect("CA");
        let server = ca
            .sign(&Leaf::server("source", &["127.0.0.1", "localhost"]))
            .expect("server");
        PrivateKeyDer::from_pem_slice(server.key_pem.as_bytes()).expect("a key");
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots(&ca),
            provider.clone(),
        )
        .build()
        .expect("verifier");
        let now = rustls::pki_types::UnixTime::now();
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        assert!(
            verifier
                .verify_server_cert(&der(&server.cert_pem), &[], &name, &[], now)
                .is_ok()
        );
        let stranger = rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots(&other),
            provider.clone(),
        )
        .build()
        .expect("verifier");
        assert!(
            stranger
                .verify_server_cert(&der(&server.cert_pem), &[], &name, &[], now)
                .is_err(),
            "another CA's server certificate is refused"
        );
        let mut client = Leaf::client("system:admin");
        client.organizations = vec!["system:masters".into()];
        client.valid_for = Some(Duration::from_secs(60));
        let client = ca.sign(&client).expect("client");
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots(&ca), provider)
                .build()
                .expect("verifier");
        assert!(
            verifier
                .verify_client_cert(&der(&client.cert_pem), &[], now)
                .is_ok()
        );
    }

    #[test]
    fn an_existing_ca_signs_what_its_certificate_verifies() {
        let made = Ca::new("cluster-ca").expect("CA");
        // Only the CA's key and name are needed to sign: as a control plane's `pki/ca.key`.
        let key_pem = made.issuer.key().serialize_pem();
        let ca = Ca::existing(made.pem(), "cluster-ca", &key_pem).expect("CA");
        let client = ca.sign(&Leaf::client("someone")).expect("client");
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots(&made), provider)
                .build()
                .expect("verifier");
        let now = rustls::pki_types::UnixTime::now();
        assert!(
            verifier
                .verify_client_cert(&der(&client.cert_pem), &[], now)
                .is_ok()
        );
    }
}
