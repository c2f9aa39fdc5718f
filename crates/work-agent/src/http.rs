//! The agent's HTTP listener: `/metrics` (Prometheus), `/healthz` (the process is alive) and
//! `/readyz` (both API servers reached and the caches synced).
//!
//! Routing is a plain function over plain data ([`route`]) so it is tested without sockets;
//! [`HttpServer`] only moves bytes.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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
}

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
        "/healthz" | "/livez" => text(StatusCode::OK, "ok\n".into()),
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
}

impl HttpServer {
    /// Binds `addr` (port 0 picks a free port; see [`HttpServer::local_addr`]).
    pub async fn bind(addr: SocketAddr, state: HttpState) -> Result<Self, HttpError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| HttpError::Bind { addr, source })?;
        Ok(Self { listener, state })
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
        tokio::spawn(async move {
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
        });
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
    async fn healthz_is_always_ok() {
        let resp = route(&Method::GET, "/healthz", &state());
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(body(resp).await, "ok\n");
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
