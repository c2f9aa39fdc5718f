//! TLS of the HTTPS probe endpoint: upstream's `--tls-min-version` and `--tls-cipher-suites`, and
//! the self-signed certificate it serves.

use std::sync::Arc;

use tokio_rustls::rustls;

/// TLS settings of the probe endpoint (upstream's `--tls-min-version`/`--tls-cipher-suites`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// Only TLS 1.3 (`VersionTLS13`); otherwise 1.2 and 1.3.
    pub tls13_only: bool,
    /// IANA names of the allowed cipher suites; empty: rustls' defaults.
    pub cipher_suites: Vec<String>,
}

impl TlsSettings {
    /// Reads upstream's flag values (`VersionTLS12`/`VersionTLS13`, a comma list of suites).
    pub fn from_flags(
        min_version: Option<&str>,
        cipher_suites: Option<&str>,
    ) -> Result<Self, String> {
        let tls13_only = match min_version.map(str::trim).filter(|v| !v.is_empty()) {
            None | Some("VersionTLS12") => false,
            Some("VersionTLS13") => true,
            Some(other) => {
                return Err(format!(
                    "--tls-min-version={other}: supported values are VersionTLS12 and VersionTLS13"
                ));
            }
        };
        let cipher_suites: Vec<String> = cipher_suites
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let settings = Self {
            tls13_only,
            cipher_suites,
        };
        settings.provider()?;
        Ok(settings)
    }

    /// rustls' ring provider restricted to the chosen suites.
    fn provider(&self) -> Result<rustls::crypto::CryptoProvider, String> {
        let mut provider = rustls::crypto::ring::default_provider();
        if self.cipher_suites.is_empty() {
            return Ok(provider);
        }
        let supported: Vec<String> = provider
            .cipher_suites
            .iter()
            .map(|s| format!("{:?}", s.suite()))
            .collect();
        if let Some(unknown) = self.cipher_suites.iter().find(|s| !supported.contains(s)) {
            return Err(format!(
                "--tls-cipher-suites: unsupported cipher suite {unknown} (supported: {})",
                supported.join(", ")
            ));
        }
        provider
            .cipher_suites
            .retain(|s| self.cipher_suites.contains(&format!("{:?}", s.suite())));
        Ok(provider)
    }

    /// A TLS acceptor with a fresh self-signed certificate for `localhost`.
    pub fn self_signed_acceptor(&self) -> Result<tokio_rustls::TlsAcceptor, String> {
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
                .map_err(|e| format!("generating the probe certificate: {e}"))?;
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(signing_key.serialize_der().into());
        let versions: &[&rustls::SupportedProtocolVersion] = if self.tls13_only {
            &[&rustls::version::TLS13]
        } else {
            &[&rustls::version::TLS12, &rustls::version::TLS13]
        };
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(self.provider()?))
            .with_protocol_versions(versions)
            .map_err(|e| format!("TLS settings of the probe endpoint: {e}"))?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .map_err(|e| format!("TLS settings of the probe endpoint: {e}"))?;
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_flags_are_checked() {
        assert_eq!(
            TlsSettings::from_flags(None, None),
            Ok(TlsSettings::default())
        );
        assert!(
            TlsSettings::from_flags(Some("VersionTLS13"), None)
                .expect("1.3")
                .tls13_only
        );
        let err = TlsSettings::from_flags(Some("VersionTLS10"), None).expect_err("1.0");
        assert!(err.contains("VersionTLS12"), "{err}");
        let ok = TlsSettings::from_flags(
            None,
            Some("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS13_AES_128_GCM_SHA256"),
        )
        .expect("known suites");
        assert_eq!(ok.cipher_suites.len(), 2);
        let err = TlsSettings::from_flags(None, Some("TLS_RSA_WITH_RC4_128_SHA")).expect_err("rc4");
        assert!(
            err.contains("unsupported cipher suite TLS_RSA_WITH_RC4_128_SHA"),
            "{err}"
        );
    }

    #[test]
    fn a_self_signed_acceptor_is_made_in_memory() {
        TlsSettings::default()
            .self_signed_acceptor()
            .expect("certificate and TLS config");
    }
}
