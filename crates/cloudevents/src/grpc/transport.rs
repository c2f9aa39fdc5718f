//! The gRPC transport on tonic (`io.cloudevents.v1.CloudEventService`): dial (plain, or TLS 1.3
//! with a client certificate and/or a bearer token), `Subscribe(cluster, data type)` and check the
//! `subscription-id` header, hand over what the stream brings (heartbeats only keep
//! `serverHealthinessTimeout`), and send an event as one `Publish` call whose answer says what
//! became of it. The client ([`crate::client::Client`]) does the rest.
//!
//! A connection ends when the stream fails or ends, when no heartbeat came in time, or when a
//! publish fails for a transport reason. A `Publish` the source answered with an error was
//! delivered but not applied: the client tries it again (the source's handler may fail for a
//! moment, e.g. a conflict on its API server), unless the source called it malformed
//! (`InvalidArgument`).
//!
//! A `Publish` request stays within the server's receive limit: `maxSendMessageSize` of the
//! config, else gRPC's default 4 MiB, which OCM's and Maestro's servers keep. One the server
//! still calls too large is dropped, as sending it again cannot help.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::uri::PathAndQuery;
use hyper_util::rt::TokioIo;
use tokio::time::{Instant, Sleep};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::rustls::pki_types::ServerName;
use tonic::codec::Streaming;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};
use tonic_prost::ProstCodec;

use crate::Error;
use crate::ceiling::{Ceiling, CeilingOrigin};
use crate::client::ClientOptions;
use crate::config::{GRPC_DEFAULT_MAX_MESSAGE, GrpcConfig, KeepAlive, Pem};
use crate::error::one_line;
use crate::event::CloudEvent;
use crate::grpc::binding;
use crate::grpc::proto::{self, PublishRequest, SubscriptionRequest};
use crate::tls::ReloadingClientCert;
use crate::transport::{EventSender, Received, Sent, Transport};
use crate::types;

/// How long dialing and subscribing may take before the attempt counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait after the `subscription-id` header before the resync request goes out when no
/// message has come yet (see [`Session`]).
const SUBSCRIBE_SETTLE: Duration = Duration::from_millis(200);
/// How long one `Publish` may take before the connection counts as broken.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(30);
/// Room for a ~1 MiB bundle (tonic's default limit is 4 MiB; never less than that).
const MIN_MESSAGE_SIZE: usize = 4 * 1024 * 1024;
/// Shortest keepalive interval, as Go's gRPC client enforces.
const MIN_KEEPALIVE: Duration = Duration::from_secs(10);
/// `Publish` calls at a time (of different works): a source that writes each status to an API
/// server answers in milliseconds, and one call at a time would queue a burst behind them.
const MAX_INFLIGHT: usize = 8;

/// Options of the gRPC client.
pub type GrpcClientOptions = ClientOptions<GrpcConfig>;

/// An authorization header value.
type Bearer = Option<MetadataValue<tonic::metadata::Ascii>>;

/// A request with the bearer token, when one is configured.
fn request<T>(bearer: &Bearer, message: T) -> Request<T> {
    let mut req = Request::new(message);
    if let Some(b) = bearer {
        req.metadata_mut().insert("authorization", b.clone());
    }
    req
}

/// How to reach a gRPC server: the endpoint and, with TLS, the connector's parts (the Pub/Sub
/// transport dials with it too).
pub(crate) struct Dialer {
    endpoint: Endpoint,
    host: String,
    port: u16,
    tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
}

impl Dialer {
    /// A dialer of `url` (`host:port`; the error names `key`), with keepalive `ka` and, when
    /// `tls` is given, TLS by that config.
    pub(crate) fn new(
        key: &str,
        url: &str,
        ka: &KeepAlive,
        tls: Option<Arc<ClientConfig>>,
    ) -> Result<Self, Error> {
        let (host, port) = split_url(key, url)?;
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let uri = |scheme: &str| {
            format!("{scheme}://{authority}")
                .parse::<http::Uri>()
                .map_err(|e| Error::config(key, format!("{url:?}: {e}")))
        };
        // The connector below does TLS itself: tonic sees plain HTTP/2, whatever TLS features
        // other crates enable on it; the requests say `https` when they go over TLS.
        let origin = uri(if tls.is_some() { "https" } else { "http" })?;
        let mut endpoint = Endpoint::from(uri("http")?)
            .origin(origin)
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        if ka.enable {
            endpoint = endpoint
                .http2_keep_alive_interval(ka.time.max(MIN_KEEPALIVE))
                .keep_alive_timeout(ka.timeout)
                .keep_alive_while_idle(ka.permit_without_stream);
        }
        let tls = match tls {
            None => None,
            Some(cfg) => {
                let name = ServerName::try_from(host.clone())
                    .map_err(|e| Error::config(key, format!("{host:?}: {e}")))?;
                Some((cfg, name))
            }
        };
        Ok(Self {
            endpoint,
            host,
            port,
            tls,
        })
    }

    /// Dials; the error is one line for the log.
    pub(crate) async fn connect(&self) -> Result<Channel, String> {
        let Some((config, name)) = &self.tls else {
            return self.endpoint.connect().await.map_err(|e| one_line(&e));
        };
        let connector = TlsConnector::from(config.clone());
        let (host, port, name) = (self.host.clone(), self.port, name.clone());
        let dial = tower::service_fn(move |_: http::Uri| {
            let (connector, host, name) = (connector.clone(), host.clone(), name.clone());
            async move {
                let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
                tcp.set_nodelay(true)?;
                let tls = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(TokioIo::new(tls))
            }
        });
        self.endpoint
            .connect_with_connector(dial)
            .await
            .map_err(|e| one_line(&e))
    }
}

/// `host:port` (or `[v6]:port`), optionally with gRPC's `dns:///` scheme, as upstream dials it.
fn split_url(key: &str, url: &str) -> Result<(String, u16), Error> {
    let bare = url.strip_prefix("dns:///").unwrap_or(url);
    bare.rsplit_once(':')
        .and_then(|(h, p)| Some((h.trim_matches(['[', ']']).to_string(), p.parse().ok()?)))
        .filter(|(h, _)| !h.is_empty() && !h.contains('/'))
        .ok_or_else(|| Error::config(key, format!("{url:?} is not host:port")))
}

/// The bearer token of the config, read once at start as upstream does (surrounding whitespace,
/// such as a file's final newline, is not part of it).
fn bearer(token: Option<&Pem>) -> Result<Option<MetadataValue<tonic::metadata::Ascii>>, Error> {
    let Some(token) = token else { return Ok(None) };
    let key = match token {
        Pem::File(_) => "tokenFile",
        Pem::Inline(_) => "token",
    };
    let bytes = token.load(key)?;
    let text =
        String::from_utf8(bytes).map_err(|_| Error::config(key, "the token is not UTF-8 text"))?;
    let text = text.trim();
    if text.is_empty() {
        return Err(Error::config(key, "the token is empty"));
    }
    format!("Bearer {text}")
        .parse()
        .map(Some)
        .map_err(|_| Error::config(key, "the token is not a valid header value"))
}

/// The gRPC wire to a source.
pub struct GrpcTransport {
    dialer: Dialer,
    bearer: Bearer,
    url: String,
    cluster: String,
    max_message: usize,
    health: Option<Duration>,
    client_cert: Option<Arc<ReloadingClientCert>>,
    session: Option<Session>,
    /// The largest `Publish` request.
    ceiling: Arc<Ceiling>,
}

/// One subscription's stream and what is due on it.
struct Session {
    subscription: String,
    stream: Streaming<proto::CloudEvent>,
    /// sdk-go's broker sends the header before it registers the subscriber, and answers a resync
    /// request through the subscribers it has: a request sent the moment the header arrives can
    /// find none and its answer is lost. The first message of the stream (an event, or the
    /// broker's heartbeat) proves the registration, so the subscribe hook (the resync request)
    /// runs on it. So that an agent does not wait for a heartbeat to start, it also runs after a
    /// short settling time; then it runs once more on the first message, since that first answer
    /// may have gone to nobody. The settling time only makes the start quicker, never correct.
    settle: Pin<Box<Sleep>>,
    hook_pending: bool,
    hook_unconfirmed: bool,
    /// When the stream counts as dead without a heartbeat (`serverHealthinessTimeout`).
    deadline: Pin<Box<Sleep>>,
    /// The first message, handed over after the hook it triggered.
    after_hook: Option<Received>,
}

/// Sends `Publish` calls on the current connection.
#[derive(Clone)]
pub struct GrpcSender {
    channel: Channel,
    bearer: Bearer,
    /// The largest `Publish` request (the ceiling's, which does not change on this wire).
    max_message: usize,
}

impl GrpcTransport {
    /// The transport for the gRPC config of `opts`. With a CA but neither a token nor a client
    /// certificate the connection is plain TCP, as upstream's; the caller warns about it
    /// ([`GrpcConfig::uses_tls`]).
    pub fn new(opts: &GrpcClientOptions) -> Result<Self, Error> {
        if opts.cluster.is_empty() {
            return Err(Error::config("--spoke-cluster-name", "required"));
        }
        let cfg = &opts.config;
        let (tls, client_cert) = if cfg.uses_tls() {
            let (config, cert) = crate::tls::grpc_client_tls(&cfg.certs, opts.cert_refresh)?;
            (Some(config), cert)
        } else {
            (None, None)
        };
        let (limit, origin) = match cfg.max_send_message_size {
            Some(max) => (max, CeilingOrigin::Config("maxSendMessageSize")),
            None => (
                GRPC_DEFAULT_MAX_MESSAGE,
                CeilingOrigin::Default("gRPC's default message limit"),
            ),
        };
        // An event this wire cannot carry at all (a 64-bit integer) is refused by `check`
        // before it is measured.
        let ceiling = Arc::new(Ceiling::new("gRPC", limit, origin, |e: &CloudEvent| {
            binding::publish_request_size(e).unwrap_or(usize::MAX)
        }));
        Ok(Self {
            dialer: Dialer::new("url", &cfg.url, &cfg.keep_alive, tls)?,
            bearer: bearer(cfg.token.as_ref())?,
            url: cfg.url.clone(),
            cluster: opts.cluster.clone(),
            max_message: MIN_MESSAGE_SIZE.max(opts.max_payload.saturating_mul(2)),
            health: cfg.server_healthiness_timeout,
            client_cert,
            session: None,
            ceiling,
        })
    }

    /// Dials and subscribes.
    async fn subscribe(&self) -> Result<(Channel, String, Streaming<proto::CloudEvent>), String> {
        let channel = self
            .dialer
            .connect()
            .await
            .map_err(|e| format!("dial {}: {e}", self.url))?;
        let request = request(
            &self.bearer,
            SubscriptionRequest {
                source: String::new(),
                cluster_name: self.cluster.clone(),
                data_type: types::MANIFEST_BUNDLE_DATA_TYPE.to_string(),
            },
        );
        let mut grpc =
            tonic::client::Grpc::new(channel.clone()).max_decoding_message_size(self.max_message);
        let response = tokio::time::timeout(CONNECT_TIMEOUT, async {
            grpc.ready()
                .await
                .map_err(|e| Status::unavailable(one_line(&e)))?;
            grpc.server_streaming(
                request,
                PathAndQuery::from_static(proto::SUBSCRIBE_PATH),
                ProstCodec::<SubscriptionRequest, proto::CloudEvent>::default(),
            )
            .await
        })
        .await
        .map_err(|_| "subscribe: no answer in time".to_string())?
        .map_err(|status| format!("subscribe: {}", describe(&status)))?;
        let ids: Vec<_> = response
            .metadata()
            .get_all(proto::SUBSCRIPTION_ID_HEADER)
            .iter()
            .collect();
        let [id] = ids.as_slice() else {
            return Err(format!(
                "subscribe: the server sent {} {} headers, not one; not a CloudEvents gRPC source",
                ids.len(),
                proto::SUBSCRIPTION_ID_HEADER
            ));
        };
        let subscription = id.to_str().unwrap_or("(not text)").to_string();
        Ok((channel, subscription, response.into_inner()))
    }

    fn far_off() -> Instant {
        Instant::now() + Duration::from_secs(365 * 24 * 3600)
    }
}

impl Transport for GrpcTransport {
    type Sender = GrpcSender;

    fn name(&self) -> &'static str {
        "gRPC"
    }

    fn max_inflight(&self) -> usize {
        MAX_INFLIGHT
    }

    /// An integer beyond 32 bits cannot go on this wire.
    fn check(event: &CloudEvent) -> Result<(), Error> {
        binding::to_proto(event).map(drop)
    }

    fn ceiling(&self) -> Arc<Ceiling> {
        self.ceiling.clone()
    }

    fn client_cert(&self) -> Option<Arc<ReloadingClientCert>> {
        self.client_cert.clone()
    }

    async fn connect(&mut self) -> Result<GrpcSender, String> {
        self.session = None;
        let (channel, subscription, stream) = self.subscribe().await?;
        tracing::info!(url = %self.url, %subscription, cluster = %self.cluster, "subscribed to the gRPC source");
        let deadline = self
            .health
            .map_or_else(Self::far_off, |h| Instant::now() + h);
        self.session = Some(Session {
            subscription,
            stream,
            settle: Box::pin(tokio::time::sleep(SUBSCRIBE_SETTLE)),
            hook_pending: true,
            hook_unconfirmed: false,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            after_hook: None,
        });
        Ok(GrpcSender {
            channel,
            bearer: self.bearer.clone(),
            max_message: self.ceiling.limit(),
        })
    }

    async fn next(&mut self) -> Result<Received, String> {
        let health = self.health;
        let Some(s) = self.session.as_mut() else {
            return Err("not connected".into());
        };
        if let Some(received) = s.after_hook.take() {
            return Ok(received);
        }
        loop {
            tokio::select! {
                // Messages first: after a slow hand-over to the agent, heartbeats waiting in the
                // stream are read before the healthiness deadline is looked at.
                biased;
                message = s.stream.message() => {
                    let first = matches!(message, Ok(Some(_)))
                        && (std::mem::take(&mut s.hook_pending)
                            || std::mem::take(&mut s.hook_unconfirmed));
                    match message {
                        Ok(Some(pb)) if pb.r#type == types::HEARTBEAT_TYPE => {
                            if let Some(h) = health {
                                s.deadline.as_mut().reset(Instant::now() + h);
                            }
                        }
                        Ok(Some(pb)) => {
                            let received = match binding::from_proto(&pb) {
                                Ok(ev) => Received::Event(ev),
                                Err(e) => Received::Malformed(e),
                            };
                            if first {
                                // The hook first; the event comes on the next call.
                                s.after_hook = Some(received);
                                return Ok(Received::Subscribed);
                            }
                            return Ok(received);
                        }
                        Ok(None) => return Err(format!("subscription {} ended by the server", s.subscription)),
                        Err(status) => return Err(format!("subscription {}: {}", s.subscription, describe(&status))),
                    }
                    if first {
                        return Ok(Received::Subscribed);
                    }
                },
                _ = &mut s.settle, if s.hook_pending => {
                    s.hook_pending = false;
                    s.hook_unconfirmed = true;
                    return Ok(Received::Subscribed);
                }
                _ = &mut s.deadline, if health.is_some() => {
                    return Err(format!(
                        "no heartbeat from the server for {:?} (serverHealthinessTimeout)",
                        health.unwrap_or_default()
                    ));
                }
            }
        }
    }

    async fn close(&mut self) {
        self.session = None;
    }
}

/// A failed call's code and message, with its cause, on one line.
pub(crate) fn describe(status: &Status) -> String {
    let mut out = format!("{:?}: {}", status.code(), status.message());
    if let Some(source) = std::error::Error::source(status) {
        out.push_str(": ");
        out.push_str(&one_line(source));
    }
    out
}

/// Whether a failed call says the connection is unusable (rather than the source refusing).
fn connection_failure(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable
            | Code::Cancelled
            | Code::DeadlineExceeded
            | Code::Unknown
            | Code::Internal
    )
}

/// What a failed `Publish` says became of the event (the Pub/Sub transport reads its `Publish`
/// answers the same way).
pub(crate) fn failed(status: &Status) -> Sent {
    let why = describe(status);
    match status.code() {
        // grpc-go's answer to a message over its receive limit: sending it again cannot help.
        Code::ResourceExhausted if status.message().contains("larger than max") => {
            Sent::TooLarge(why)
        }
        code if connection_failure(code) => Sent::Lost(why),
        Code::InvalidArgument => Sent::Malformed(why),
        _ => Sent::Refused(why),
    }
}

impl EventSender for GrpcSender {
    async fn send(&self, event: CloudEvent) -> Sent {
        let pb = match binding::to_proto(&event) {
            Ok(pb) => pb,
            Err(e) => return Sent::Malformed(e.to_string()),
        };
        let mut grpc = tonic::client::Grpc::new(self.channel.clone())
            .max_encoding_message_size(self.max_message);
        let request = request(&self.bearer, PublishRequest { event: Some(pb) });
        let result = tokio::time::timeout(PUBLISH_TIMEOUT, async {
            grpc.ready()
                .await
                .map_err(|e| Status::unavailable(one_line(&e)))?;
            grpc.unary::<_, (), _>(
                request,
                PathAndQuery::from_static(proto::PUBLISH_PATH),
                ProstCodec::<PublishRequest, ()>::default(),
            )
            .await
        })
        .await
        .unwrap_or_else(|_| Err(Status::deadline_exceeded("publish: no answer in time")));
        match result {
            Ok(_) => Sent::Taken,
            Err(status) => failed(&status),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_as_upstream_dials_them() {
        assert_eq!(
            split_url("url", "maestro-grpc-broker.maestro:8091").expect("url"),
            ("maestro-grpc-broker.maestro".to_string(), 8091)
        );
        assert_eq!(
            split_url("url", "dns:///127.0.0.1:1").expect("url"),
            ("127.0.0.1".to_string(), 1)
        );
        assert_eq!(
            split_url("url", "[::1]:2").expect("url"),
            ("::1".to_string(), 2)
        );
        for bad in ["nohost", ":1", "a:b", "http://a:1/x"] {
            assert!(split_url("url", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tokens_are_trimmed_and_checked() {
        let ok = bearer(Some(&Pem::Inline(b"abc\n".to_vec()))).expect("token");
        assert_eq!(ok.expect("some").to_str().expect("ascii"), "Bearer abc");
        assert!(bearer(Some(&Pem::Inline(b" \n".to_vec()))).is_err());
        assert!(bearer(Some(&Pem::Inline(b"a\x01b".to_vec()))).is_err());
        assert!(bearer(None).expect("none").is_none());
    }
}
