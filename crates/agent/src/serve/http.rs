//! The agent's HTTP listeners: `/metrics` (Prometheus), `/healthz` (the agent is alive: see
//! [`Readiness::liveness_problem`]) and `/readyz` (both API servers reached and the caches synced).
//! The same routes are served over plain HTTP and, for upstream's probes, over HTTPS.
//!
//! Routing is a plain function over plain data ([`route`]) so it is tested without sockets;
//! [`HttpServer`] only moves bytes.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// Content type of `/metrics`: prometheus-client writes OpenMetrics text.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A client that has not sent its request headers by then is dropped (slow-loris guard).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Readiness of the agent, set by the controllers and read by `/readyz`. Cheap to clone; every
/// clone shares the same flags.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    flags: Arc<Flags>,
}

#[derive(Debug, Default)]
struct Flags {
    hub_reached: AtomicBool,
    spoke_reached: AtomicBool,
    caches_synced: AtomicBool,
    standby: AtomicBool,
    liveness: Mutex<LivenessMarks>,
}

/// What `/healthz` judges from: when the liveness probe last completed a round, and since when
/// the hub has refused the agent's credentials.
#[derive(Debug, Default)]
struct LivenessMarks {
    last_round: Option<Instant>,
    hub_unauthorized_since: Option<Instant>,
}

/// `/healthz` fails once the hub has refused the agent's credentials (401) for this long: a
/// restart re-reads the hub kubeconfig from its Secret.
pub const HUB_UNAUTHORIZED_LIMIT: Duration = Duration::from_secs(300);
/// `/healthz` fails when the liveness probe has not completed a round for this long (each round
/// ends within the request timeout): the runtime or the agent's clients are wedged.
pub const PROBE_STALL_LIMIT: Duration = Duration::from_secs(180);

impl Readiness {
    /// Not ready: nothing reached, nothing synced.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that the hub API server answered.
    pub fn set_hub_reached(&self) {
        self.flags.hub_reached.store(true, Ordering::Release);
    }

    /// Records that the spoke API server answered.
    pub fn set_spoke_reached(&self) {
        self.flags.spoke_reached.store(true, Ordering::Release);
    }

    /// Records whether the informer caches are synced (false again after a lost watch, if the
    /// caller wants `/readyz` to say so).
    pub fn set_caches_synced(&self, synced: bool) {
        self.flags.caches_synced.store(synced, Ordering::Release);
    }

    /// Marks this replica as a leader-election standby: it runs no controllers, so it is ready
    /// without synced caches. Without this a new pod of a rolling update, which waits for the
    /// old leader, would never become ready and the rollout would stall.
    pub fn set_standby(&self, standby: bool) {
        self.flags.standby.store(standby, Ordering::Release);
    }

    /// Records one round of the liveness probe: whether the hub refused the credentials (401).
    pub fn record_probe_round(&self, hub_unauthorized: bool, now: Instant) {
        let mut marks = self.liveness_marks();
        marks.last_round = Some(now);
        if !hub_unauthorized {
            marks.hub_unauthorized_since = None;
        } else if marks.hub_unauthorized_since.is_none() {
            marks.hub_unauthorized_since = Some(now);
        }
    }

    /// Why the agent should be restarted, if it should: the liveness probe stalled (once it has
    /// run at all) or the hub refused the credentials for longer than [`HUB_UNAUTHORIZED_LIMIT`].
    pub fn liveness_problem(&self, now: Instant) -> Option<String> {
        let marks = self.liveness_marks();
        if let Some(last) = marks.last_round
            && now.saturating_duration_since(last) > PROBE_STALL_LIMIT
        {
            return Some(format!(
                "no liveness probe round for {}s",
                now.saturating_duration_since(last).as_secs()
            ));
        }
        match marks.hub_unauthorized_since {
            Some(since) if now.saturating_duration_since(since) > HUB_UNAUTHORIZED_LIMIT => {
                Some(format!(
                    "the hub has refused the agent's credentials (401) for {}s",
                    now.saturating_duration_since(since).as_secs()
                ))
            }
            _ => None,
        }
    }

    fn liveness_marks(&self) -> std::sync::MutexGuard<'_, LivenessMarks> {
        // The marks stay consistent even if a holder panicked: each write is one assignment.
        self.flags
            .liveness
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// True once both API servers were reached and the caches are synced (or we are standby).
    pub fn is_ready(&self) -> bool {
        self.missing().is_empty()
    }

    /// What is still missing, in a fixed order, for the `/readyz` body.
    pub fn missing(&self) -> Vec<&'static str> {
        let f = &self.flags;
        let set = |flag: &AtomicBool| flag.load(Ordering::Acquire);
        let mut out = Vec::new();
        if !set(&f.hub_reached) {
            out.push("hub API server not reached");
        }
        if !set(&f.spoke_reached) {
            out.push("spoke API server not reached");
        }
        if !set(&f.caches_synced) && !set(&f.standby) {
            out.push("caches not synced");
        }
        out
    }
}

/// What the handlers read: the metrics registry and the readiness flags.
#[derive(Clone)]
pub struct HttpState {
    /// The registry encoded on `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Flags behind `/readyz`.
    pub readiness: Readiness,
}

/// Answers one request. `GET` and `HEAD` only; unknown paths are 404.
pub fn route(method: &Method, path: &str, state: &HttpState) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed\n".into(),
        );
    }
    let resp = match path {
        "/healthz" | "/livez" => match state.readiness.liveness_problem(Instant::now()) {
            None => text(StatusCode::OK, "ok\n".into()),
            Some(problem) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("unhealthy: {problem}\n"),
            ),
        },
        "/readyz" => match state.readiness.missing().as_slice() {
            [] => text(StatusCode::OK, "ok\n".into()),
            missing => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {}\n", missing.join(", ")),
            ),
        },
        "/metrics" => match state.metrics.encode() {
            Ok(body) => {
                let mut r = text(StatusCode::OK, body);
                r.headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE));
                r
            }
            Err(e) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("encoding metrics failed: {e}\n"),
            ),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
    };
    if method == Method::HEAD {
        let (parts, _) = resp.into_parts();
        return Response::from_parts(parts, Full::new(Bytes::new()));
    }
    resp
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Errors of the listener.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The address could not be bound (in use, no permission, bad address).
    #[error("listening on {addr}: {source}")]
    Bind {
        /// The requested address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// A bound listener; [`HttpServer::run`] serves it until shutdown.
pub struct HttpServer {
    listener: TcpListener,
    state: HttpState,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl HttpServer {
    /// Binds `addr` (port 0 picks a free port; see [`HttpServer::local_addr`]).
    pub async fn bind(addr: SocketAddr, state: HttpState) -> Result<Self, HttpError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| HttpError::Bind { addr, source })?;
        Ok(Self {
            listener,
            state,
            tls: None,
        })
    }

    /// Serves HTTPS instead of plain HTTP, with the given TLS setup.
    pub fn with_tls(mut self, acceptor: tokio_rustls::TlsAcceptor) -> Self {
        self.tls = Some(acceptor);
        self
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves connections until `shutdown` completes. Connections in flight finish on their own.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                () = &mut shutdown => return,
                accepted = self.listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, _peer)) => self.spawn_connection(stream),
                Err(e) => {
                    // e.g. out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn spawn_connection(&self, stream: tokio::net::TcpStream) {
        let state = self.state.clone();
        let tls = self.tls.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, state).await,
                Some(acceptor) => {
                    match tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => serve_connection(stream, state).await,
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                }
            }
        });
    }
}

/// Serves the routes on one accepted connection (plain or TLS) until it closes.
async fn serve_connection<S>(stream: S, state: HttpState)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
        let resp = route(req.method(), req.uri().path(), &state);
        async move { Ok::<_, Infallible>(resp) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), svc);
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "HTTP connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::io::{Read, Write};

    fn state() -> HttpState {
        HttpState {
            metrics: Arc::new(Metrics::new()),
            readiness: Readiness::new(),
        }
    }

    async fn body(resp: Response<Full<Bytes>>) -> String {
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[tokio::test]
    async fn healthz_is_ok_until_the_hub_refuses_the_credentials_for_long() {
        let s = state();
        let resp = route(&Method::GET, "/healthz", &s);
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(body(resp).await, "ok\n");

        let start = Instant::now();
        s.readiness.record_probe_round(true, start);
        let still_within = start + HUB_UNAUTHORIZED_LIMIT - Duration::from_secs(1);
        s.readiness.record_probe_round(true, still_within);
        assert_eq!(s.readiness.liveness_problem(still_within), None);
        let later = start + HUB_UNAUTHORIZED_LIMIT + Duration::from_secs(1);
        s.readiness.record_probe_round(true, later);
        let problem = s
            .readiness
            .liveness_problem(later)
            .expect("401 for too long");
        assert!(problem.contains("401"), "{problem}");

        // One accepted request clears it.
        s.readiness.record_probe_round(false, later);
        assert_eq!(s.readiness.liveness_problem(later), None);
    }

    #[test]
    fn healthz_fails_when_the_probe_stalls() {
        let r = Readiness::new();
        let start = Instant::now();
        assert_eq!(
            r.liveness_problem(start + PROBE_STALL_LIMIT * 2),
            None,
            "not started yet"
        );
        r.record_probe_round(false, start);
        assert_eq!(r.liveness_problem(start + PROBE_STALL_LIMIT), None);
        let problem = r
            .liveness_problem(start + PROBE_STALL_LIMIT + Duration::from_secs(1))
            .expect("stalled");
        assert!(problem.contains("no liveness probe round"), "{problem}");
    }

    #[tokio::test]
    async fn readyz_lists_what_is_missing_until_everything_is_set() {
        let s = state();
        let resp = route(&Method::GET, "/readyz", &s);
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body(resp).await,
            "not ready: hub API server not reached, spoke API server not reached, caches not synced\n"
        );

        s.readiness.set_hub_reached();
        s.readiness.set_spoke_reached();
        let resp = route(&Method::GET, "/readyz", &s);
        assert_eq!(body(resp).await, "not ready: caches not synced\n");

        // A clone is the handle the controllers hold.
        s.readiness.clone().set_caches_synced(true);
        let resp = route(&Method::GET, "/readyz", &s);
        assert_eq!(resp.status(), StatusCode::OK);

        s.readiness.set_caches_synced(false);
        assert!(!s.readiness.is_ready());
    }

    #[test]
    fn a_standby_is_ready_without_synced_caches_but_not_without_api_servers() {
        let r = Readiness::new();
        r.set_standby(true);
        assert_eq!(
            r.missing(),
            ["hub API server not reached", "spoke API server not reached"]
        );
        r.set_hub_reached();
        r.set_spoke_reached();
        assert!(r.is_ready());
        r.set_standby(false);
        assert_eq!(r.missing(), ["caches not synced"]);
    }

    #[tokio::test]
    async fn metrics_serves_the_registry_as_openmetrics() {
        let s = state();
        s.metrics.ttl_deletions_total.inc();
        let resp = route(&Method::GET, "/metrics", &s);
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()[CONTENT_TYPE], METRICS_CONTENT_TYPE);
        let text = body(resp).await;
        assert!(text.contains("work_agent_ttl_deletions_total 1"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[tokio::test]
    async fn head_has_no_body_and_other_methods_and_paths_are_refused() {
        let s = state();
        let resp = route(&Method::HEAD, "/healthz", &s);
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(body(resp).await, "");
        assert_eq!(
            route(&Method::POST, "/healthz", &s).status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            route(&Method::GET, "/nope", &s).status(),
            StatusCode::NOT_FOUND
        );
    }

    #[tokio::test]
    async fn server_answers_over_tcp_and_stops_on_shutdown() {
        let server = HttpServer::bind(([127, 0, 0, 1], 0).into(), state())
            .await
            .expect("binding an ephemeral loopback port");
        let addr = server.local_addr().expect("bound address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));

        // A plain blocking client: what a kubelet probe or Prometheus does on the wire.
        let reply = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
            let mut conn = std::net::TcpStream::connect(addr)?;
            conn.set_read_timeout(Some(Duration::from_secs(5)))?;
            conn.write_all(
                b"GET /healthz?verbose=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            )?;
            let mut reply = String::new();
            conn.read_to_string(&mut reply)?;
            Ok(reply)
        })
        .await
        .expect("client task did not panic")
        .expect("request over loopback");
        assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
        assert!(reply.ends_with("ok\n"), "{reply}");

        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("server stops after shutdown")
            .expect("server task did not panic");
    }

    #[tokio::test]
    async fn binding_a_used_port_is_a_clear_error() {
        let first = HttpServer::bind(([127, 0, 0, 1], 0).into(), state())
            .await
            .expect("binding an ephemeral loopback port");
        let addr = first.local_addr().expect("bound address");
        let err = HttpServer::bind(addr, state())
            .await
            .err()
            .expect("second bind of the same port fails");
        assert!(
            err.to_string()
                .starts_with(&format!("listening on {addr}: ")),
            "{err}"
        );
    }
}
