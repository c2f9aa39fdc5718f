//! TLS of the gRPC front end: the server config, plain or TLS connections, and the accept loop
//! that records every handshake.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::rustls;

use super::front::{Front, Handshake, SourceTls};
use crate::maestro::Error;

/// The rustls server config of `tls`: ALPN h2, client certificates of the CA when given.
pub(super) fn server_config(tls: &SourceTls) -> Result<Arc<rustls::ServerConfig>, Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |e: &dyn std::fmt::Display| Error::Tls(e.to_string());
    let chain = CertificateDer::pem_slice_iter(tls.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    let key = PrivateKeyDer::from_pem_slice(tls.key_pem.as_bytes()).map_err(|e| bad(&e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(&e))?;
    let builder = match &tls.client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|e| bad(&e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| bad(&e))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// A connection of the source, plain or TLS.
pub(super) enum SourceIo {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl tonic::transport::server::Connected for SourceIo {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for SourceIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for SourceIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The connections of `listener`, after their TLS handshake when the source serves TLS (each
/// handshake on its own task, so that a slow or failing one holds up nobody); they end with the
/// listener's task when the server stops.
pub(super) fn accept(
    listener: tokio::net::TcpListener,
    front: Arc<Front>,
) -> futures::stream::BoxStream<'static, std::io::Result<SourceIo>> {
    let (tx, rx) = mpsc::channel::<SourceIo>(16);
    let acceptor = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let Some(config) = front.tls.clone() else {
                if tx.send(SourceIo::Plain(tcp)).await.is_err() {
                    return;
                }
                continue;
            };
            let (tx, front) = (tx.clone(), front.clone());
            tokio::spawn(async move {
                match tokio_rustls::TlsAcceptor::from(config).accept(tcp).await {
                    Ok(tls) => {
                        let (_, conn) = tls.get_ref();
                        let handshake = Handshake {
                            version: format!("{:?}", conn.protocol_version()),
                            client_cert: conn
                                .peer_certificates()
                                .and_then(|c| c.first())
                                .map(|c| c.to_vec()),
                        };
                        front.lock().handshakes.push(handshake);
                        let _ = tx.send(SourceIo::Tls(Box::new(tls))).await;
                    }
                    Err(e) => front.lock().failed_handshakes.push(e.to_string()),
                }
            });
        }
    });
    // The acceptor stops with the stream (the server dropping it at shutdown).
    struct StopOnDrop(JoinHandle<()>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let guard = StopOnDrop(acceptor);
    Box::pin(futures::stream::unfold(
        (rx, guard),
        |(mut rx, guard)| async move { rx.recv().await.map(|io| (Ok(io), (rx, guard))) },
    ))
}
