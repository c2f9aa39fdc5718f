//! One fresh TLS connection with a given client certificate, to learn whether a server takes it
//! now: a TLS 1.3 server judges the client's certificate after the client has finished its side of
//! the handshake, so the answer is the first thing the server sends after the client's first
//! message: the protocol's reply (accepted), or an alert such as `CertificateExpired` (refused).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;

use crate::certs::CertAndKey;

/// The protocol spoken after the handshake: what the probe sends and what counts as a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// MQTT 3.1.1: a CONNECT, answered by a CONNACK.
    Mqtt,
    /// HTTP/2 (gRPC): the client preface, answered by the server's SETTINGS frame.
    Http2,
}

/// An MQTT 3.1.1 CONNECT of client `probe`, clean session, 60 s keep-alive.
const MQTT_CONNECT: &[u8] = &[
    0x10, 0x11, 0x00, 0x04, b'M', b'Q', b'T', b'T', 0x04, 0x02, 0x00, 0x3c, 0x00, 0x05, b'p', b'r',
    b'o', b'b', b'e',
];

/// The HTTP/2 client preface and an empty SETTINGS frame.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

impl Protocol {
    fn hello(self) -> &'static [u8] {
        match self {
            Self::Mqtt => MQTT_CONNECT,
            Self::Http2 => H2_PREFACE,
        }
    }

    /// Whether `reply` (the first bytes read) is the server taking the connection.
    fn accepts(self, reply: &[u8]) -> bool {
        match self {
            // CONNACK, return code 0.
            Self::Mqtt => reply.len() >= 4 && reply[0] == 0x20 && reply[3] == 0,
            // A frame of type SETTINGS.
            Self::Http2 => reply.len() >= 9 && reply[3] == 0x04,
        }
    }
}

/// Connects to `address` (`127.0.0.1:<port>`) over TLS 1.3, trusting `ca_pem` and presenting
/// `client`, sends the protocol's first message and reads the answer: `Ok` when the server
/// replies, `Err` with what happened otherwise (the alert it sent, the connection closed, no
/// answer within `within`).
pub async fn try_client_certificate(
    address: &str,
    ca_pem: &str,
    client: &CertAndKey,
    protocol: Protocol,
    within: Duration,
) -> Result<(), String> {
    match tokio::time::timeout(within, attempt(address, ca_pem, client, protocol)).await {
        Ok(answer) => answer,
        Err(_) => Err(format!("no answer from {address} within {within:?}")),
    }
}

async fn attempt(
    address: &str,
    ca_pem: &str,
    client: &CertAndKey,
    protocol: Protocol,
) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let text = |e: &dyn std::fmt::Display| e.to_string();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).map_err(|e| text(&e))?)
        .map_err(|e| text(&e))?;
    let chain = CertificateDer::pem_slice_iter(client.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| text(&e))?;
    let key = PrivateKeyDer::from_pem_slice(client.key_pem.as_bytes()).map_err(|e| text(&e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| text(&e))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| text(&e))?;
    if protocol == Protocol::Http2 {
        config.alpn_protocols = vec![b"h2".to_vec()];
    }
    let host = address
        .rsplit_once(':')
        .map(|(h, _)| h.to_string())
        .unwrap_or_default();
    let name = ServerName::try_from(host).map_err(|e| text(&e))?;
    let tcp = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| format!("connecting to {address}: {e}"))?;
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    // A refused certificate may close the connection before this write lands; the read says why.
    let written = tls.write_all(protocol.hello()).await;
    let mut reply = [0u8; 64];
    match tls.read(&mut reply).await {
        Ok(n) if protocol.accepts(&reply[..n]) => Ok(()),
        Ok(0) => Err(format!("closed without a reply (write: {written:?})")),
        Ok(n) => Err(format!("unexpected reply {:02x?}", &reply[..n])),
        Err(e) => Err(format!("{e} (write: {written:?})")),
    }
}
