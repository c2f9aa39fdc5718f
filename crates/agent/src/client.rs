//! API clients with a client-side request rate limit (QPS and burst), like client-go's, a
//! deadline on every request that is not a watch, and a count of requests by verb
//! (`work_agent_api_requests_total`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use tower::{Layer, Service};

use crate::serve::metrics::{self, ApiRequestLabels};

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
    let builder = kube::client::ClientBuilder::try_from(config).map_err(|e| e.to_string())?;
    Ok(builder
        .with_layer(&TokenBucketLayer { qps, burst })
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

/// client-go's rate limit: a bucket of `burst` tokens refilled at `qps` per second; each
/// request takes one. Once a burst has emptied it, the next request waits 1/qps, not until a
/// whole window of `burst / qps` seconds has passed (a fixed window held the 101st request of a
/// burst of creates for 2 s at the defaults).
#[derive(Clone, Debug)]
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

    /// Takes a token at `now`, or says how long until one is there.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                ((1.0 - self.tokens) / self.qps).max(0.0005),
            ))
        }
    }
}

/// Layer of [`TokenBucket`]: kube's client runs its stack behind one buffer, so one bucket
/// limits every request of the client.
struct TokenBucketLayer {
    qps: f64,
    burst: u32,
}

impl<S> Layer<S> for TokenBucketLayer {
    type Service = TokenBucketService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TokenBucketService {
            inner,
            bucket: TokenBucket::new(self.qps, self.burst, Instant::now()),
            wait: None,
            has_token: false,
        }
    }
}

/// Ready once it holds a token (and the inner service is ready); the call spends the token.
struct TokenBucketService<S> {
    inner: S,
    bucket: TokenBucket,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    has_token: bool,
}

impl<S, R> Service<R> for TokenBucketService<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.has_token {
            if let Some(wait) = self.wait.as_mut() {
                if wait.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            match self.bucket.take(Instant::now()) {
                Ok(()) => self.has_token = true,
                Err(delay) => self.wait = Some(Box::pin(tokio::time::sleep(delay))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.has_token = false;
        self.inner.call(request)
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
            assert_eq!(b.take(t0), Ok(()));
        }
        // Empty: the 101st waits one refill (20 ms at 50 QPS), not a 2 s window.
        let wait = b.take(t0).expect_err("empty");
        assert!(
            wait > Duration::from_millis(19) && wait <= Duration::from_millis(20),
            "{wait:?}"
        );
        let t1 = t0 + Duration::from_millis(20);
        assert_eq!(b.take(t1), Ok(()));
        assert!(b.take(t1).is_err());
        // A long pause refills up to the burst, no more.
        let t2 = t1 + Duration::from_secs(3600);
        for _ in 0..100 {
            assert_eq!(b.take(t2), Ok(()));
        }
        assert!(b.take(t2).is_err());
        // Nonsense settings still give a working limit: 1 request per second.
        let mut b = TokenBucket::new(0.0, 0, t0);
        assert_eq!(b.take(t0), Ok(()));
        let wait = b.take(t0).expect_err("empty");
        assert!(wait > Duration::from_millis(990), "{wait:?}");
    }

    #[tokio::test]
    async fn the_service_waits_for_a_token() {
        use tower::ServiceExt;
        let svc = tower::service_fn(|x: u32| async move { Ok::<u32, BoxError>(x) });
        let mut svc = TokenBucketLayer {
            qps: 20.0,
            burst: 2,
        }
        .layer(svc);
        let started = Instant::now();
        for i in 0..4 {
            let got = svc
                .ready()
                .await
                .expect("ready")
                .call(i)
                .await
                .expect("call");
            assert_eq!(got, i);
        }
        // Two at once, then one per 50 ms: the last two cannot have gone sooner.
        assert!(started.elapsed() >= Duration::from_millis(95));
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
        server.abort();
    }
}
