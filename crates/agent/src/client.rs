//! API clients with a client-side request rate limit (QPS and burst), like client-go's, a
//! deadline on every request that is not a watch, and a count of requests by verb
//! (`work_agent_api_requests_total`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use tower::{Layer, Service};

use crate::metrics::{self, ApiRequestLabels};

/// How long a request (other than a watch) may wait for its response before it fails. The
/// API server ends its own requests after 60 s; without a client-side limit, a request lost on
/// a broken connection would hold its reconcile, and so its work, forever.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(70);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Which API server a client talks to (the `api` label of the request counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiServer {
    /// The hub (ManifestWorks).
    Hub,
    /// The spoke (applied resources, AppliedManifestWorks, Lease).
    Spoke,
}

impl ApiServer {
    fn label(self) -> &'static str {
        match self {
            Self::Hub => "hub",
            Self::Spoke => "spoke",
        }
    }
}

/// Builds a client that sends on average `qps` requests per second, with bursts of up to
/// `burst` (client-go's token bucket). Requests other than watches fail after
/// [`REQUEST_TIMEOUT`]. Every request is counted under `api`.
pub fn build(
    config: kube::Config,
    qps: f64,
    burst: u32,
    api: ApiServer,
) -> Result<kube::Client, String> {
    build_with_timeout(config, qps, burst, REQUEST_TIMEOUT, api)
}

/// [`build`] with another request timeout.
pub fn build_with_timeout(
    config: kube::Config,
    qps: f64,
    burst: u32,
    timeout: Duration,
    api: ApiServer,
) -> Result<kube::Client, String> {
    // client-go's `host` label: the URL's host and port as configured.
    let host = config
        .cluster_url
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_default();
    let builder = kube::client::ClientBuilder::try_from(config).map_err(|e| e.to_string())?;
    // Innermost: the rest_client metrics time the request itself, not its wait for a token.
    Ok(builder
        .with_layer(&RestClientMetricsLayer {
            host: Arc::from(host),
        })
        .with_layer(&TokenBucketLayer::<kube::client::Body>::new(qps, burst))
        .with_layer(&RequestTimeoutLayer { timeout })
        .with_layer(&RequestCountLayer { api: api.label() })
        .build())
}

/// The Kubernetes verb of a request, from its HTTP method and URI: a GET is a `watch` with
/// `watch=true`, a `list` on a collection, else a `get`.
fn verb(method: &hyper::Method, uri: &hyper::Uri) -> &'static str {
    match *method {
        hyper::Method::GET if is_watch(uri) => "watch",
        hyper::Method::GET if is_collection(uri.path()) => "list",
        hyper::Method::GET => "get",
        hyper::Method::POST => "create",
        hyper::Method::PUT => "update",
        hyper::Method::PATCH => "patch",
        hyper::Method::DELETE if is_collection(uri.path()) => "deletecollection",
        hyper::Method::DELETE => "delete",
        _ => "other",
    }
}

/// Whether a resource path names a collection rather than one object: `/api/v1/<resource>`,
/// `/api/v1/namespaces/<ns>/<resource>`, `/apis/<g>/<v>/<resource>` and the namespaced form.
/// `/api/v1/namespaces` itself is a collection, `/api/v1/namespaces/<ns>` an object.
fn is_collection(path: &str) -> bool {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match parts.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        // /version, /openapi, discovery documents: reads of one thing.
        _ => return false,
    };
    match rest {
        [] => false,
        ["namespaces", _ns, resource_path @ ..] if !resource_path.is_empty() => {
            resource_path.len() == 1
        }
        [_resource] => true,
        _ => false,
    }
}

/// Counts every request in `work_agent_api_requests_total{api, verb}`.
#[derive(Clone, Copy, Debug)]
struct RequestCountLayer {
    api: &'static str,
}

impl<S> Layer<S> for RequestCountLayer {
    type Service = RequestCount<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestCount {
            inner,
            api: self.api,
        }
    }
}

/// See [`RequestCountLayer`].
#[derive(Clone, Debug)]
struct RequestCount<S> {
    inner: S,
    api: &'static str,
}

impl<S, B> Service<hyper::Request<B>> for RequestCount<S>
where
    S: Service<hyper::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: hyper::Request<B>) -> Self::Future {
        metrics::api_requests()
            .get_or_create(&ApiRequestLabels {
                api: self.api,
                verb: verb(request.method(), request.uri()),
            })
            .inc();
        self.inner.call(request)
    }
}

/// client-go's request metrics under its names (`rest_client_requests_total{code, host,
/// method}`, `rest_client_request_duration_seconds{host, verb}`), which Maestro's agent SLOs
/// query.
#[derive(Clone, Debug)]
struct RestClientMetricsLayer {
    host: Arc<str>,
}

impl<S> Layer<S> for RestClientMetricsLayer {
    type Service = RestClientMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RestClientMetrics {
            inner,
            host: self.host.clone(),
        }
    }
}

/// See [`RestClientMetricsLayer`].
#[derive(Clone, Debug)]
struct RestClientMetrics<S> {
    inner: S,
    host: Arc<str>,
}

/// One request in flight: recorded when its response comes, or as `<error>` when it ends
/// without one (an error, or dropped by the request deadline).
struct RestRequestRecord {
    host: Arc<str>,
    method: hyper::Method,
    started: Instant,
    code: Option<hyper::StatusCode>,
}

impl RestRequestRecord {
    /// The request ended with `code` (none: without a response).
    fn answered(&mut self, code: Option<hyper::StatusCode>) {
        self.code = code;
    }
}

impl Drop for RestRequestRecord {
    fn drop(&mut self) {
        let host = self.host.to_string();
        let method = self.method.as_str().to_string();
        let code = self
            .code
            .map_or_else(|| "<error>".to_string(), |c| c.as_u16().to_string());
        metrics::rest_client_request_duration()
            .get_or_create(&metrics::RestLatencyLabels {
                host: host.clone(),
                verb: method.clone(),
            })
            .observe(self.started.elapsed().as_secs_f64());
        metrics::rest_client_requests()
            .get_or_create(&metrics::RestRequestLabels { code, host, method })
            .inc();
    }
}

impl<S, B, RB> Service<hyper::Request<B>> for RestClientMetrics<S>
where
    S: Service<hyper::Request<B>, Response = hyper::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: hyper::Request<B>) -> Self::Future {
        let mut record = RestRequestRecord {
            host: self.host.clone(),
            method: request.method().clone(),
            started: Instant::now(),
            code: None,
        };
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            record.answered(result.as_ref().ok().map(hyper::Response::status));
            result
        })
    }
}

/// client-go's rate limit: a bucket of `burst` tokens refilled at `qps` per second; each
/// request takes one. Once a burst has emptied it, the next request waits 1/qps, not until a
/// whole window of `burst / qps` seconds has passed (a fixed window held the 101st request of a
/// burst of creates for 2 s at the defaults). A request reserves its token when it is made, so
/// waiting requests go in the order they came, as with client-go's limiter.
#[derive(Clone, Copy, Debug)]
struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket; a QPS that is not a positive number counts as 1.
    fn new(qps: f64, burst: u32, now: Instant) -> Self {
        let qps = if qps.is_finite() && qps > 0.0 {
            qps
        } else {
            1.0
        };
        let burst = f64::from(burst.max(1));
        Self {
            qps,
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Reserves a token at `now`: how long the request waits for it (zero when one is there).
    fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now;
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

/// Which of upstream's API clients a request would go through. Upstream's agent builds one
/// client per API (client-go gives each its own rate limiter): AppliedManifestWorks and
/// ManifestWorks, its own checks (access reviews, leases, events), and the applied manifests
/// (the dynamic client). The agent keeps one bucket for each, so `--kube-api-qps` and
/// `--kube-api-burst` allow what they allow upstream, and a burst of applies does not wait behind
/// the AppliedManifestWork writes of the works before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RateBudget {
    /// `work.open-cluster-management.io`.
    Works = 0,
    /// Access reviews, leases and events.
    Own = 1,
    /// Everything else: the manifests and discovery.
    Manifests = 2,
}

/// How many [`RateBudget`]s there are: the buckets a client keeps.
const BUDGETS: usize = 3;

impl RateBudget {
    fn of(path: &str) -> Self {
        const OWN: [&str; 3] = [
            "/apis/authorization.k8s.io/",
            "/apis/coordination.k8s.io/",
            "/apis/events.k8s.io/",
        ];
        if path.starts_with("/apis/work.open-cluster-management.io/") {
            Self::Works
        } else if OWN.iter().any(|p| path.starts_with(p))
            || (path.starts_with("/api/v1/namespaces/") && path.split('/').nth(5) == Some("events"))
        {
            Self::Own
        } else {
            Self::Manifests
        }
    }
}

/// Layer of [`TokenBucketService`] for requests with bodies of type `B`: one bucket per
/// [`RateBudget`], shared by every clone of the service.
struct TokenBucketLayer<B> {
    qps: f64,
    burst: u32,
    body: std::marker::PhantomData<fn(B)>,
}

impl<B> TokenBucketLayer<B> {
    fn new(qps: f64, burst: u32) -> Self {
        Self {
            qps,
            burst,
            body: std::marker::PhantomData,
        }
    }
}

/// Requests a client's stack takes at once from the rate limit: kube's own buffer in front of
/// the stack holds the rest.
const LIMITED_IN_FLIGHT: usize = 1024;

impl<S, B> Layer<S> for TokenBucketLayer<B>
where
    S: Service<hyper::Request<B>> + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError> + Send + Sync,
    B: Send + 'static,
{
    type Service = TokenBucketService<tower::buffer::Buffer<hyper::Request<B>, S::Future>>;

    fn layer(&self, inner: S) -> Self::Service {
        let now = Instant::now();
        let bucket = TokenBucket::new(self.qps, self.burst, now);
        TokenBucketService {
            // A request waits for its token without holding up the others (the stack's
            // service is not `Clone`; the buffer gives each request its own handle).
            inner: tower::buffer::Buffer::new(inner, LIMITED_IN_FLIGHT),
            buckets: Arc::new(Mutex::new([bucket; BUDGETS])),
        }
    }
}

/// Reserves a token of the request's budget, waits for it, then sends the request.
#[derive(Clone)]
struct TokenBucketService<S> {
    inner: S,
    buckets: Arc<Mutex<[TokenBucket; BUDGETS]>>,
}

impl<S, B> Service<hyper::Request<B>> for TokenBucketService<S>
where
    S: Service<hyper::Request<B>> + Clone + Send + 'static,
    S::Future: Send,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is the inner service's, awaited once the token is there.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: hyper::Request<B>) -> Self::Future {
        use tower::ServiceExt;
        let budget = RateBudget::of(request.uri().path());
        let wait = self.buckets.lock().unwrap_or_else(PoisonError::into_inner)[budget as usize]
            .reserve(Instant::now());
        let inner = self.inner.clone();
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            inner.oneshot(request).await
        })
    }
}

/// Whether a request URI asks for a watch (`watch=true` or `watch=1`): a watch's response is
/// open-ended, so it gets no deadline (the watcher's own server-side timeout ends it).
fn is_watch(uri: &hyper::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"))
    })
}

/// A request that got no response in time.
#[derive(Debug, thiserror::Error)]
#[error("no response from the API server within {0:?}")]
pub struct RequestTimedOut(pub Duration);

/// Puts a deadline on every request that is not a watch (until its response headers arrive).
#[derive(Clone, Copy, Debug)]
struct RequestTimeoutLayer {
    timeout: Duration,
}

impl<S> Layer<S> for RequestTimeoutLayer {
    type Service = RequestTimeout<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestTimeout {
            inner,
            timeout: self.timeout,
        }
    }
}

/// See [`RequestTimeoutLayer`].
#[derive(Clone, Debug)]
struct RequestTimeout<S> {
    inner: S,
    timeout: Duration,
}

impl<S, B> Service<hyper::Request<B>> for RequestTimeout<S>
where
    S: Service<hyper::Request<B>>,
    S::Error: Into<BoxError>,
    S::Response: Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: hyper::Request<B>) -> Self::Future {
        let limit = (!is_watch(request.uri())).then_some(self.timeout);
        let response = self.inner.call(request);
        Box::pin(async move {
            match limit {
                Some(limit) => match tokio::time::timeout(limit, response).await {
                    Ok(result) => result.map_err(Into::into),
                    Err(_) => Err(Box::new(RequestTimedOut(limit)) as BoxError),
                },
                None => response.await.map_err(Into::into),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use kube::api::WatchParams;
    use tokio::net::TcpListener;

    #[test]
    fn the_bucket_refills_at_qps_after_a_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(50.0, 100, t0);
        for _ in 0..100 {
            assert_eq!(b.reserve(t0), Duration::ZERO);
        }
        // Empty: the 101st waits one refill (20 ms at 50 QPS), not a 2 s window; the 102nd
        // waits behind it.
        let wait = b.reserve(t0);
        assert!(
            wait > Duration::from_millis(19) && wait <= Duration::from_millis(20),
            "{wait:?}"
        );
        let wait = b.reserve(t0);
        assert!(
            wait > Duration::from_millis(39) && wait <= Duration::from_millis(40),
            "{wait:?}"
        );
        // Both reserved tokens are paid back by t0 + 40 ms: the next one waits one refill.
        let t1 = t0 + Duration::from_millis(40);
        let wait = b.reserve(t1);
        assert!(wait > Duration::from_millis(19), "{wait:?}");
        // A long pause refills up to the burst, no more.
        let t2 = t1 + Duration::from_secs(3600);
        for _ in 0..100 {
            assert_eq!(b.reserve(t2), Duration::ZERO);
        }
        assert!(b.reserve(t2) > Duration::ZERO);
        // Nonsense settings still give a working limit: 1 request per second.
        let mut b = TokenBucket::new(0.0, 0, t0);
        assert_eq!(b.reserve(t0), Duration::ZERO);
        assert!(b.reserve(t0) > Duration::from_millis(990));
    }

    #[test]
    fn requests_are_budgeted_per_upstream_client() {
        use RateBudget::*;
        for (path, want) in [
            (
                "/apis/work.open-cluster-management.io/v1/appliedmanifestworks/h-w",
                Works,
            ),
            (
                "/apis/work.open-cluster-management.io/v1/namespaces/c1/manifestworks",
                Works,
            ),
            ("/apis/authorization.k8s.io/v1/subjectaccessreviews", Own),
            ("/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", Own),
            ("/api/v1/namespaces/ns/events", Own),
            ("/api/v1/namespaces/ns/configmaps/events", Manifests),
            ("/api/v1/namespaces/events", Manifests),
            ("/api/v1/namespaces/ns/configmaps", Manifests),
            ("/apis/apps/v1/namespaces/ns/deployments/d", Manifests),
            ("/apis", Manifests),
        ] {
            assert_eq!(RateBudget::of(path), want, "{path}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_service_waits_for_a_token_of_its_budget() {
        use tower::ServiceExt;
        let svc = tower::service_fn(|r: hyper::Request<()>| async move {
            Ok::<String, BoxError>(r.uri().path().to_string())
        });
        let svc = TokenBucketLayer::<()>::new(20.0, 2).layer(svc);
        let request = |path: &str| {
            hyper::Request::builder()
                .uri(path)
                .body(())
                .expect("test request")
        };
        let started = Instant::now();
        for _ in 0..4 {
            let got = svc
                .clone()
                .oneshot(request("/api/v1/namespaces/n/configmaps"))
                .await
                .expect("call");
            assert_eq!(got, "/api/v1/namespaces/n/configmaps");
        }
        // Two at once, then one per 50 ms (the clock is paused: only the waits move it).
        assert_eq!(started.elapsed(), Duration::from_millis(100));
        // Another budget's burst is untouched by the manifests'.
        let started = Instant::now();
        for _ in 0..2 {
            svc.clone()
                .oneshot(request(
                    "/apis/work.open-cluster-management.io/v1/appliedmanifestworks",
                ))
                .await
                .expect("call");
        }
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[test]
    fn only_watch_requests_count_as_watches() {
        let uri = |s: &str| s.parse::<hyper::Uri>().expect("test URI");
        assert!(is_watch(&uri(
            "/api/v1/configmaps?labelSelector=a%3Db&watch=true&resourceVersion=1"
        )));
        assert!(is_watch(&uri("/api/v1/configmaps?watch=1")));
        assert!(!is_watch(&uri("/api/v1/configmaps?limit=500")));
        assert!(!is_watch(&uri("/api/v1/configmaps?watch=false")));
        assert!(!is_watch(&uri("/api/v1/namespaces/watch=true/configmaps")));
        assert!(!is_watch(&uri("/version")));
    }

    #[test]
    fn verbs_from_method_and_path() {
        let uri = |s: &str| s.parse::<hyper::Uri>().expect("test URI");
        let get = hyper::Method::GET;
        assert_eq!(
            verb(&get, &uri("/api/v1/namespaces/ns/configmaps/a")),
            "get"
        );
        assert_eq!(verb(&get, &uri("/api/v1/namespaces/ns/configmaps")), "list");
        assert_eq!(
            verb(&get, &uri("/api/v1/configmaps?labelSelector=x")),
            "list"
        );
        assert_eq!(verb(&get, &uri("/api/v1/namespaces")), "list");
        assert_eq!(verb(&get, &uri("/api/v1/namespaces/ns")), "get");
        assert_eq!(
            verb(
                &get,
                &uri("/apis/apps/v1/namespaces/ns/deployments?watch=true")
            ),
            "watch"
        );
        assert_eq!(
            verb(
                &get,
                &uri("/apis/work.open-cluster-management.io/v1/appliedmanifestworks/x")
            ),
            "get"
        );
        assert_eq!(
            verb(
                &get,
                &uri("/apis/apps/v1/namespaces/ns/deployments/d/status")
            ),
            "get"
        );
        assert_eq!(verb(&get, &uri("/version")), "get");
        assert_eq!(verb(&get, &uri("/apis/apps/v1")), "get");
        assert_eq!(
            verb(
                &hyper::Method::POST,
                &uri("/api/v1/namespaces/ns/configmaps")
            ),
            "create"
        );
        assert_eq!(
            verb(
                &hyper::Method::PATCH,
                &uri("/api/v1/namespaces/ns/configmaps/a")
            ),
            "patch"
        );
        assert_eq!(
            verb(
                &hyper::Method::PUT,
                &uri("/api/v1/namespaces/ns/configmaps/a")
            ),
            "update"
        );
        assert_eq!(
            verb(
                &hyper::Method::DELETE,
                &uri("/api/v1/namespaces/ns/configmaps/a")
            ),
            "delete"
        );
    }

    /// A server that accepts connections and never answers (a request lost on a dead link).
    async fn silent_server() -> (String, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        (format!("http://{addr}"), task)
    }

    #[tokio::test]
    async fn a_request_without_response_fails_after_the_timeout_but_a_watch_waits() {
        let (url, server) = silent_server().await;
        let config = kube::Config::new(url.parse().expect("url"));
        let client = build_with_timeout(
            config,
            100.0,
            100,
            Duration::from_millis(300),
            ApiServer::Spoke,
        )
        .expect("client");

        let started = std::time::Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(20), client.apiserver_version())
            .await
            .expect("the request must end by itself, not hang");
        let error = result.expect_err("no response is an error");
        assert!(
            error
                .to_string()
                .contains("no response from the API server"),
            "{error}"
        );
        assert!(started.elapsed() < Duration::from_secs(10));

        let api: Api<ConfigMap> = Api::all(client);
        let watch = tokio::time::timeout(
            Duration::from_secs(1),
            api.watch(&WatchParams::default(), "0"),
        )
        .await;
        assert!(
            watch.is_err(),
            "a watch must not be cut off by the request timeout"
        );
        // The request cut off by the deadline, and the watch this test gave up on, count as
        // client-go counts requests that end without a response.
        let host = url.trim_start_matches("http://").to_string();
        let requests = metrics::rest_client_requests()
            .get_or_create(&metrics::RestRequestLabels {
                code: "<error>".into(),
                host,
                method: "GET".into(),
            })
            .get();
        assert_eq!(requests, 2);
        server.abort();
    }

    /// A server that answers every request with 404 and a Kubernetes Status.
    async fn not_found_server() -> (String, tokio::task::JoinHandle<()>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let task = tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#;
                    let mut buf = [0u8; 4096];
                    // One request per connection is enough for the test's single GET.
                    if socket.read(&mut buf).await.is_ok() {
                        let response = format!(
                            "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = socket.write_all(response.as_bytes()).await;
                    }
                });
            }
        });
        (format!("http://{addr}"), task)
    }

    #[tokio::test]
    async fn requests_are_counted_under_client_gos_names_with_code_host_and_method() {
        let (url, server) = not_found_server().await;
        let host = url.trim_start_matches("http://").to_string();
        let client = build(
            kube::Config::new(url.parse().expect("url")),
            100.0,
            100,
            ApiServer::Spoke,
        )
        .expect("client");
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let error = api
            .get("missing")
            .await
            .expect_err("the server answers 404");
        assert!(error.to_string().contains("NotFound"), "{error}");
        let requests = metrics::rest_client_requests()
            .get_or_create(&metrics::RestRequestLabels {
                code: "404".into(),
                host: host.clone(),
                method: "GET".into(),
            })
            .get();
        assert_eq!(requests, 1);
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register(
            "rest_client_request_duration_seconds",
            "latency",
            metrics::rest_client_request_duration().clone(),
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert!(
            text.contains(&format!(
                r#"rest_client_request_duration_seconds_count{{host="{host}",verb="GET"}} 1"#
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                r#"rest_client_request_duration_seconds_bucket{{le="0.5",host="{host}",verb="GET"}} 1"#
            )),
            "{text}"
        );
        server.abort();
    }
}
