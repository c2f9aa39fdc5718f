//! The agent's gRPC client on tonic: dial (plain, or TLS 1.3 with a client certificate and/or a
//! bearer token), `Subscribe(cluster, data type)` and check the `subscription-id` header, decode
//! spec events into a stream, drop heartbeats but use them for `serverHealthinessTimeout`, and
//! `Publish` status events from the latest-per-work queue shared with the MQTT client. After every
//! subscribe a hook runs (the agent's spec resync request).
//!
//! A session ends when the stream fails or ends, when no heartbeat came in time, when a publish
//! fails for a transport reason, or when the client certificate was rotated; the next one starts
//! after upstream's backoff (5 s to 1 min, jittered) with a fresh channel, and at once after a
//! rotation. Loss-free across server restarts: an event stays queued until its `Publish` returned
//! OK; one whose call failed for the connection goes back to the queue (unless a newer one for the
//! same work is there). A `Publish` the source answered with an error was delivered but not
//! applied: it is tried again with a growing delay (the source's handler may fail for a moment,
//! e.g. a conflict on its API server), unless the source called it malformed
//! (`InvalidArgument`): then it is dropped and counted.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http::uri::PathAndQuery;
use hyper_util::rt::TokioIo;
use tokio::sync::{Notify, mpsc};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::rustls::pki_types::ServerName;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};
use tonic_prost::ProstCodec;

use crate::Error;
use crate::client::{ClientOptions, Stats};
use crate::codec::{Decoder, Incoming};
use crate::config::{GrpcConfig, Pem};
use crate::error::one_line;
use crate::event::CloudEvent;
use crate::grpc::binding;
use crate::grpc::proto::{self, PublishRequest, SubscriptionRequest};
use crate::queue::{LatestQueue, event_key, goes_after, reconnect_backoff};
use crate::tls::ReloadingClientCert;
use crate::types;

/// How long dialing and subscribing may take before the attempt counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait after the `subscription-id` header before the resync request goes out when no
/// message has come yet (see `run_session`).
const SUBSCRIBE_SETTLE: Duration = Duration::from_millis(200);
/// How long one `Publish` may take before the connection counts as broken.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(30);
/// Room for a ~1 MiB bundle (tonic's default limit is 4 MiB; never less than that).
const MIN_MESSAGE_SIZE: usize = 4 * 1024 * 1024;
/// Shortest keepalive interval, as Go's gRPC client enforces.
const MIN_KEEPALIVE: Duration = Duration::from_secs(10);
/// First wait before an event the source refused is tried again; it doubles per refusal in a row.
const REFUSED_DELAY: Duration = Duration::from_millis(100);
/// Longest wait between tries of an event the source refused.
const MAX_REFUSED_DELAY: Duration = Duration::from_secs(5);
/// `Publish` calls at a time (of different works): a source that writes each status to an API
/// server answers in milliseconds, and one call at a time would queue a burst behind them.
const MAX_INFLIGHT: usize = 8;

/// Options of the gRPC client.
pub type GrpcClientOptions = ClientOptions<GrpcConfig>;

/// Called after every successful (re)subscribe, e.g. to send the spec resync request.
pub type GrpcSubscribedHook = Arc<dyn Fn(&GrpcPublisher) + Send + Sync>;

#[derive(Default)]
struct State {
    queue: LatestQueue<proto::CloudEvent>,
    /// Keys of the events handed to a `Publish` call that has not returned (one per key at a
    /// time, so a work's statuses arrive in order).
    inflight: HashSet<String>,
    /// Events the source refused for now, by key, with when to try them again.
    delayed: HashMap<String, (tokio::time::Instant, proto::CloudEvent)>,
    /// Refusals in a row per key, for the retry delay.
    refusals: HashMap<String, u32>,
    /// The channel of the current subscription, with its session number.
    channel: Option<(u64, Channel)>,
    stats: Stats,
}

impl State {
    fn depth(&self) -> usize {
        self.queue.len() + self.inflight.len() + self.delayed.len()
    }

    /// Moves the refused events that are due back into the queue (unless a newer event of the
    /// work is queued or on its way); returns when the next one is due.
    fn promote_due(&mut self, now: tokio::time::Instant) -> Option<tokio::time::Instant> {
        let due: Vec<String> = self
            .delayed
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            if let Some((_, pb)) = self.delayed.remove(&key)
                && !self.inflight.contains(&key)
            {
                self.queue.retry_later(key, pb);
            }
        }
        self.delayed.values().map(|(at, _)| *at).min()
    }
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the publish loop (an event queued, a subscription up).
    wake: Notify,
    /// Told whenever the source took an event (see [`GrpcPublisher::taken`]).
    taken: Notify,
    /// The publish loop saw the connection of session `broken_session` fail: the connection loop
    /// starts a new session.
    broken: Notify,
    broken_session: AtomicU64,
    /// The client certificate changed: reconnect now to present it.
    rotated: Notify,
    source: String,
    capacity: usize,
    /// `authorization: Bearer …` for every call, when a token is configured.
    bearer: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves consistent-enough data to keep publishing.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn request<T>(&self, message: T) -> Request<T> {
        let mut req = Request::new(message);
        if let Some(b) = &self.bearer {
            req.metadata_mut().insert("authorization", b.clone());
        }
        req
    }
}

/// The publishing half, cheap to clone.
#[derive(Clone)]
pub struct GrpcPublisher {
    shared: Arc<Shared>,
}

impl GrpcPublisher {
    /// Queues `event` for publishing. A status event replaces any queued, unsent status of the
    /// same work. An event the wire cannot carry (an integer beyond 32 bits) is refused here.
    pub fn publish(&self, event: CloudEvent) -> Result<(), Error> {
        event.event_type()?;
        let key = event_key(&event);
        let pb = binding::to_proto(&event)?;
        let mut st = self.shared.lock();
        let held = st.inflight.len() + st.delayed.len();
        st.queue.push(key.clone(), pb, self.shared.capacity, held)?;
        // A refused older event of the work waits no more: this one replaces it.
        st.delayed.remove(&key);
        st.stats.queue_depth = st.depth();
        drop(st);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Readiness and counters now.
    pub fn stats(&self) -> Stats {
        self.shared.lock().stats.clone()
    }

    /// Whether the event of `key` ([`event_key`]) published last is not yet taken: queued, in a
    /// `Publish` call that has not returned, or refused for now. False once the source answered
    /// the call (or refused the event as malformed: sending it again could not help).
    pub fn is_pending(&self, key: &str) -> bool {
        let st = self.shared.lock();
        st.queue.contains(key) || st.inflight.contains(key) || st.delayed.contains_key(key)
    }

    /// Resolves when the source next takes an event (then [`GrpcPublisher::is_pending`] may
    /// have changed). Made before looking, it misses no event taken after it was made.
    pub fn taken(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.taken.notified()
    }

    /// The source attribute of the agent's events (`--cloudevents-client-id`).
    pub fn source(&self) -> &str {
        &self.shared.source
    }
}

/// A running client: the incoming spec events, and the publisher.
pub struct GrpcClient {
    /// Decoded events from the source, and decode errors (already counted) for logging.
    pub incoming: mpsc::Receiver<Result<Incoming, Error>>,
    /// Publishing and stats.
    pub publisher: GrpcPublisher,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for GrpcClient {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// How to reach the server: the endpoint and, with TLS, the connector's parts.
struct Dialer {
    endpoint: Endpoint,
    host: String,
    port: u16,
    tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
}

impl Dialer {
    fn new(config: &GrpcConfig, tls: Option<Arc<ClientConfig>>) -> Result<Self, Error> {
        let (host, port) = split_url(&config.url)?;
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let uri = |scheme: &str| {
            format!("{scheme}://{authority}")
                .parse::<http::Uri>()
                .map_err(|e| Error::config("url", format!("{:?}: {e}", config.url)))
        };
        // The connector below does TLS itself: tonic sees plain HTTP/2, whatever TLS features
        // other crates enable on it; the requests say `https` when they go over TLS.
        let origin = uri(if tls.is_some() { "https" } else { "http" })?;
        let mut endpoint = Endpoint::from(uri("http")?)
            .origin(origin)
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        let ka = &config.keep_alive;
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
                    .map_err(|e| Error::config("url", format!("{host:?}: {e}")))?;
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

    async fn connect(&self) -> Result<Channel, String> {
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
fn split_url(url: &str) -> Result<(String, u16), Error> {
    let bare = url.strip_prefix("dns:///").unwrap_or(url);
    bare.rsplit_once(':')
        .and_then(|(h, p)| Some((h.trim_matches(['[', ']']).to_string(), p.parse().ok()?)))
        .filter(|(h, _)| !h.is_empty() && !h.contains('/'))
        .ok_or_else(|| Error::config("url", format!("{url:?} is not host:port")))
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

impl GrpcClient {
    /// Starts the connection and publishing tasks on the current tokio runtime. With a CA but
    /// neither a token nor a client certificate the connection is plain TCP, as upstream's; the
    /// caller warns about it ([`GrpcConfig::uses_tls`]).
    pub fn start(
        opts: GrpcClientOptions,
        on_subscribed: GrpcSubscribedHook,
    ) -> Result<Self, Error> {
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
        let dialer = Dialer::new(cfg, tls)?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            taken: Notify::new(),
            broken: Notify::new(),
            broken_session: AtomicU64::new(0),
            rotated: Notify::new(),
            source: opts.cloudevents_client_id.clone(),
            capacity: opts.queue_capacity,
            bearer: bearer(cfg.token.as_ref())?,
        });
        let publisher = GrpcPublisher {
            shared: shared.clone(),
        };
        let (tx, rx) = mpsc::channel(100);
        let decoder = Decoder {
            cluster: opts.cluster.clone(),
            max_payload: opts.max_payload,
        };
        let mut tasks = vec![tokio::spawn(connection_loop(
            dialer,
            publisher.clone(),
            decoder,
            tx,
            on_subscribed,
            opts.clone(),
            client_cert.clone(),
        ))];
        if let Some(cert) = client_cert {
            tasks.push(tokio::spawn(rotation_loop(
                cert,
                opts.cert_refresh,
                shared.clone(),
            )));
        }
        let max_message = MIN_MESSAGE_SIZE.max(opts.max_payload.saturating_mul(2));
        tasks.push(tokio::spawn(publish_loop(shared, max_message)));
        Ok(Self {
            incoming: rx,
            publisher,
            tasks,
        })
    }
}

/// The shortest period of the certificate polling, whatever the refresh period.
const MIN_CERT_POLL: Duration = Duration::from_millis(100);

/// Every `period` reads the client certificate again; when it changed, asks for a new session.
async fn rotation_loop(cert: Arc<ReloadingClientCert>, period: Duration, shared: Arc<Shared>) {
    let period = period.max(MIN_CERT_POLL);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match cert.reload() {
            Ok(true) => shared.rotated.notify_one(),
            Ok(false) => {}
            Err(e) => tracing::warn!(
                error = %e,
                "reloading the gRPC client certificate failed; keeping the last good one"
            ),
        }
    }
}

/// Why a session ended.
enum End {
    /// Nobody reads the incoming events any more: stop.
    Stopped,
    /// Reconnect after the backoff.
    Lost(String),
    /// The client certificate changed: reconnect at once.
    Rotated,
}

async fn connection_loop(
    dialer: Dialer,
    publisher: GrpcPublisher,
    decoder: Decoder,
    tx: mpsc::Sender<Result<Incoming, Error>>,
    hook: GrpcSubscribedHook,
    opts: GrpcClientOptions,
    client_cert: Option<Arc<ReloadingClientCert>>,
) {
    let shared = publisher.shared.clone();
    let mut delays = reconnect_backoff(opts.reconnect_min, opts.reconnect_max);
    let mut session = 0u64;
    loop {
        session += 1;
        let mut subscribed = false;
        let end = run_session(
            session,
            &dialer,
            &publisher,
            &decoder,
            &tx,
            &hook,
            &opts,
            client_cert.as_deref(),
            &mut subscribed,
        )
        .await;
        {
            let mut st = shared.lock();
            st.channel = None;
            if subscribed {
                st.stats.reconnects += 1;
            }
            st.stats.ready = false;
        }
        if subscribed {
            delays = reconnect_backoff(opts.reconnect_min, opts.reconnect_max);
        }
        match end {
            End::Stopped => return,
            End::Rotated => {
                tracing::info!("gRPC client certificate rotated; reconnecting now");
            }
            End::Lost(why) => {
                let delay = delays.next().unwrap_or(opts.reconnect_max);
                tracing::warn!(error = %why, ?delay, "gRPC connection lost; reconnecting");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shared.rotated.notified() => {
                        tracing::info!("gRPC client certificate rotated; reconnecting now");
                    }
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_session(
    session: u64,
    dialer: &Dialer,
    publisher: &GrpcPublisher,
    decoder: &Decoder,
    tx: &mpsc::Sender<Result<Incoming, Error>>,
    hook: &GrpcSubscribedHook,
    opts: &GrpcClientOptions,
    client_cert: Option<&ReloadingClientCert>,
    subscribed: &mut bool,
) -> End {
    let shared = &publisher.shared;
    let channel = match dialer.connect().await {
        Ok(c) => c,
        Err(e) => return End::Lost(format!("dial {}: {e}", opts.config.url)),
    };
    let request = shared.request(SubscriptionRequest {
        source: String::new(),
        cluster_name: opts.cluster.clone(),
        data_type: types::MANIFEST_BUNDLE_DATA_TYPE.to_string(),
    });
    let max_message = MIN_MESSAGE_SIZE.max(opts.max_payload.saturating_mul(2));
    let mut grpc = tonic::client::Grpc::new(channel.clone()).max_decoding_message_size(max_message);
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
    .await;
    let response = match response {
        Err(_) => return End::Lost("subscribe: no answer in time".into()),
        Ok(Err(status)) => return End::Lost(format!("subscribe: {}", describe(&status))),
        Ok(Ok(r)) => r,
    };
    let ids: Vec<_> = response
        .metadata()
        .get_all(proto::SUBSCRIPTION_ID_HEADER)
        .iter()
        .collect();
    let [id] = ids.as_slice() else {
        return End::Lost(format!(
            "subscribe: the server sent {} {} headers, not one; not a CloudEvents gRPC source",
            ids.len(),
            proto::SUBSCRIPTION_ID_HEADER
        ));
    };
    let subscription = id.to_str().unwrap_or("(not text)").to_string();
    let mut stream = response.into_inner();
    *subscribed = true;
    {
        let mut st = shared.lock();
        st.channel = Some((session, channel));
        st.stats.ready = true;
    }
    tracing::info!(url = %opts.config.url, %subscription, cluster = %opts.cluster, "subscribed to the gRPC source");
    shared.wake.notify_one();

    // sdk-go's broker sends the header before it registers the subscriber, and answers a resync
    // request through the subscribers it has: a request sent the moment the header arrives can
    // find none and its answer is lost. The first message of the stream (an event, or the
    // broker's heartbeat) proves the registration, so the hook (the resync request) runs on it.
    // So that an agent does not wait for a heartbeat to start, it also runs after a short
    // settling time; then it runs once more on the first message, since that first answer may
    // have gone to nobody. The settling time only makes the start quicker, never correct.
    let settle = tokio::time::sleep(SUBSCRIBE_SETTLE);
    tokio::pin!(settle);
    let mut hook_pending = true;
    let mut hook_unconfirmed = false;
    let health = opts.config.server_healthiness_timeout;
    let deadline = tokio::time::sleep(health.unwrap_or(Duration::MAX / 4));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            // Messages first: after a slow hand-over to the agent, heartbeats waiting in the
            // stream are read before the healthiness deadline is looked at.
            biased;
            message = stream.message() => {
                if matches!(message, Ok(Some(_)))
                    && (std::mem::take(&mut hook_pending) || std::mem::take(&mut hook_unconfirmed))
                {
                    hook(publisher);
                }
                match message {
                Ok(Some(pb)) if pb.r#type == types::HEARTBEAT_TYPE => {
                    if let Some(h) = health {
                        deadline.as_mut().reset(tokio::time::Instant::now() + h);
                    }
                }
                Ok(Some(pb)) => {
                    let result = binding::from_proto(&pb).and_then(|ev| {
                        let mut st = shared.lock();
                        *st.stats.received.entry(ev.type_.clone()).or_default() += 1;
                        drop(st);
                        decoder.decode(&ev)
                    });
                    if result.is_err() {
                        shared.lock().stats.rejected += 1;
                    }
                    if tx.send(result).await.is_err() {
                        return End::Stopped;
                    }
                }
                Ok(None) => return End::Lost(format!("subscription {subscription} ended by the server")),
                Err(status) => return End::Lost(format!("subscription {subscription}: {}", describe(&status))),
                }
            },
            _ = &mut settle, if hook_pending => {
                hook_pending = false;
                hook_unconfirmed = true;
                hook(publisher);
            }
            _ = &mut deadline, if health.is_some() => {
                return End::Lost(format!(
                    "no heartbeat from the server for {:?} (serverHealthinessTimeout)",
                    health.unwrap_or_default()
                ));
            }
            _ = shared.broken.notified() => {
                // A late word about an earlier session changes nothing.
                if shared.broken_session.load(Ordering::SeqCst) == session {
                    return End::Lost("a publish failed on this connection".into());
                }
            }
            _ = shared.rotated.notified() => {
                // A rotation before this connection's handshake needs no new connection.
                if client_cert.is_some_and(ReloadingClientCert::outdated) {
                    return End::Rotated;
                }
            }
        }
    }
}

fn describe(status: &Status) -> String {
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

/// Sends queued events, up to [`MAX_INFLIGHT`] at a time and one per work, while a subscription
/// is up; refused events wait for their retry without holding up the others.
async fn publish_loop(shared: Arc<Shared>, max_message: usize) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_INFLIGHT));
    loop {
        let (next, due) = {
            let mut guard = shared.lock();
            let st = &mut *guard;
            let due = st.promote_due(tokio::time::Instant::now());
            let next = match (st.channel.clone(), slots.clone().try_acquire_owned()) {
                (Some((session, channel)), Ok(slot)) => {
                    let (inflight, delayed) = (&st.inflight, &st.delayed);
                    // One call per work at a time, and a work's final status only once its
                    // last one is through.
                    let popped = st.queue.pop_first(|k| {
                        !inflight.contains(k)
                            && goes_after(k)
                                .is_none_or(|b| !inflight.contains(b) && !delayed.contains_key(b))
                    });
                    popped.map(|(key, pb)| {
                        st.inflight.insert(key.clone());
                        (session, channel, key, pb, slot)
                    })
                }
                _ => None,
            };
            (next, due)
        };
        let Some((session, channel, key, pb, slot)) = next else {
            // Woken by a new event, a finished call or a new subscription; or a retry is due.
            match due {
                Some(at) => {
                    tokio::select! {
                        _ = shared.wake.notified() => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => shared.wake.notified().await,
            }
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let ty = pb.r#type.clone();
            let mut grpc = tonic::client::Grpc::new(channel).max_encoding_message_size(max_message);
            let request = shared.request(PublishRequest {
                event: Some(pb.clone()),
            });
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
            settle(&shared, session, key, pb, ty, result);
            drop(slot);
            shared.wake.notify_one();
        });
    }
}

/// Books the outcome of one `Publish`.
fn settle(
    shared: &Shared,
    session: u64,
    key: String,
    pb: proto::CloudEvent,
    ty: String,
    result: Result<tonic::Response<()>, Status>,
) {
    let mut st = shared.lock();
    st.inflight.remove(&key);
    match result {
        Ok(_) => {
            st.refusals.remove(&key);
            *st.stats.sent.entry(ty).or_default() += 1;
            shared.taken.notify_waiters();
        }
        Err(status) if connection_failure(status.code()) => {
            st.queue.requeue(key, pb);
            if st.channel.as_ref().is_some_and(|(s, _)| *s == session) {
                st.channel = None;
                st.stats.ready = false;
                tracing::warn!(error = %describe(&status), "gRPC publish failed; reconnecting");
                shared.broken_session.store(session, Ordering::SeqCst);
                shared.broken.notify_one();
            }
        }
        Err(status) if status.code() == Code::InvalidArgument => {
            st.refusals.remove(&key);
            st.stats.dropped += 1;
            tracing::error!(
                event_type = %ty,
                key = %key,
                error = %describe(&status),
                "the gRPC source refused the event as malformed; dropped"
            );
        }
        Err(status) => {
            let refusals = st.refusals.entry(key.clone()).or_default();
            *refusals = refusals.saturating_add(1);
            let delay = REFUSED_DELAY
                .saturating_mul(1 << (*refusals - 1).min(16))
                .min(MAX_REFUSED_DELAY);
            tracing::warn!(
                event_type = %ty,
                key = %key,
                error = %describe(&status),
                ?delay,
                "the gRPC source could not apply the event; trying again"
            );
            // Unless a newer event of the work came meanwhile: that one goes instead.
            if !st.queue.contains(&key) {
                st.delayed
                    .insert(key, (tokio::time::Instant::now() + delay, pb));
            }
        }
    }
    st.stats.queue_depth = st.depth();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_as_upstream_dials_them() {
        assert_eq!(
            split_url("maestro-grpc-broker.maestro:8091").expect("url"),
            ("maestro-grpc-broker.maestro".to_string(), 8091)
        );
        assert_eq!(
            split_url("dns:///127.0.0.1:1").expect("url"),
            ("127.0.0.1".to_string(), 1)
        );
        assert_eq!(split_url("[::1]:2").expect("url"), ("::1".to_string(), 2));
        for bad in ["nohost", ":1", "a:b", "http://a:1/x"] {
            assert!(split_url(bad).is_err(), "{bad}");
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
