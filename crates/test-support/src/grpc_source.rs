//! A test source that serves the source side of the CloudEvents gRPC protocol
//! (`io.cloudevents.v1.CloudEventService`) the way OCM's gRPC server and Maestro's gRPC broker do
//! (both are sdk-go's `GRPCBroker`), on 127.0.0.1:
//!
//! - `Subscribe(cluster_name, data_type)` answers with the `subscription-id` header before any
//!   event, then streams the spec events of that cluster, and a heartbeat
//!   (`io.open-cluster-management.cloudevents.heartbeat`: id, specversion and type only) every
//!   heartbeat interval;
//! - `Publish` of a `spec.resync_request` is answered through the subscription streams as the
//!   broker does: every deleting resource, every resource newer than the agent's version (or at
//!   version 0), and a delete without data for every id the agent listed that the source does not
//!   hold (also when it holds none for that cluster);
//! - `Publish` of a status is judged with Maestro's rules ([`crate::mqtt_source::apply_status`]):
//!   `Deleted=True` hard-deletes the resource. A malformed event is `InvalidArgument`; the source
//!   can be told to refuse publishes (`FailedPrecondition`, as the broker answers a failing
//!   handler).
//!
//! With [`SourceTls`] it serves TLS (ALPN h2) and can require client certificates of a CA; it
//! records the protocol version and client certificate of every handshake. With a token it
//! refuses calls without `authorization: Bearer <token>` (`Unauthenticated`).
//!
//! The store survives [`GrpcSource::stop`] and [`GrpcSource::restart`] (same port), like a
//! server backed by a database; spec events sent while no agent is subscribed are lost, as with
//! the real broker, so the agent's resync after its next subscribe is what brings them.
//!
//! For chaos runs it injects faults into its traffic ([`GrpcSource::arm_faults`], see
//! [`crate::wire_faults`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use chrono::{DateTime, Utc};
use cloudevents::codec::ResourceVersionList;
use cloudevents::grpc::proto::{self, PublishRequest, SubscriptionRequest};
use cloudevents::grpc::{from_proto, to_proto};
use cloudevents::types::{self, EventType};
use cloudevents::{CloudEvent, ExtValue};
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_rustls::rustls;
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

use crate::mqtt_source::{
    HardDeletion, SourceCounters, StatusOutcome, StatusVerdict, StoredResource, apply_status,
    spec_event,
};
use crate::wire_faults::{Addressed, WireFaults};

/// How often [`GrpcSource::wait_until`] re-evaluates its condition.
pub const WAIT_POLL: Duration = Duration::from_millis(50);

/// Why a source operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listening socket could not be opened.
    #[error("listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No such resource.
    #[error("unknown resource {0}")]
    UnknownResource(String),
    /// The resource is being deleted.
    #[error("resource {0} is being deleted")]
    Deleting(String),
    /// An event could not be put on the wire.
    #[error("encode: {0}")]
    Encode(#[from] cloudevents::Error),
    /// The TLS material is unusable.
    #[error("tls: {0}")]
    Tls(String),
}

/// TLS of the source.
#[derive(Clone, Debug)]
pub struct SourceTls {
    /// The server certificate chain (PEM).
    pub cert_pem: String,
    /// Its key (PEM).
    pub key_pem: String,
    /// Require client certificates signed by this CA (PEM); none: no client certificates.
    pub client_ca_pem: Option<String>,
}

/// What a TLS handshake with the source negotiated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handshake {
    /// The protocol version, e.g. `TLSv1_3`.
    pub version: String,
    /// The client certificate (DER), when one was presented.
    pub client_cert: Option<Vec<u8>>,
}

/// How to run the source.
#[derive(Clone, Debug)]
pub struct GrpcSourceOptions {
    /// The source id (`source` of spec events, the `originalsource` statuses must carry).
    pub source_id: String,
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Interval of the heartbeats on every subscription (the broker's default is 10 s).
    pub heartbeat_interval: Duration,
    /// How long after the `subscription-id` header a subscriber is registered: sdk-go's broker
    /// sends the header first, so a resync request sent on the header can be answered to nobody.
    pub registration_delay: Duration,
    /// Serve TLS.
    pub tls: Option<SourceTls>,
    /// Require this bearer token on every call.
    pub token: Option<String>,
}

impl Default for GrpcSourceOptions {
    fn default() -> Self {
        Self {
            source_id: "maestro".into(),
            port: 0,
            heartbeat_interval: Duration::from_secs(10),
            registration_delay: Duration::ZERO,
            tls: None,
            token: None,
        }
    }
}

/// One open subscription.
struct Subscriber {
    cluster: String,
    tx: mpsc::UnboundedSender<Result<proto::CloudEvent, Status>>,
}

#[derive(Default)]
struct State {
    resources: BTreeMap<String, StoredResource>,
    hard_deleted: BTreeSet<String>,
    deletions: Vec<HardDeletion>,
    faults: WireFaults,
    subscribers: BTreeMap<String, Subscriber>,
    counters: SourceCounters,
    events: Vec<CloudEvent>,
    sent: Vec<CloudEvent>,
    verdicts: Vec<StatusVerdict>,
    next_ordinal: u64,
    heartbeats_sent: u64,
    publishes_to_refuse: u64,
    publishes_refused: u64,
    /// Statuses of these resources are refused, so many times each.
    refused_resources: BTreeMap<String, u64>,
    handshakes: Vec<Handshake>,
    failed_handshakes: Vec<String>,
    unauthenticated: u64,
}

struct Shared {
    source_id: String,
    heartbeat_interval: Duration,
    registration_delay: Duration,
    state: Mutex<State>,
    /// Heartbeats are sent while true.
    heartbeats: watch::Sender<bool>,
    /// The `subscription-id` header is sent while true.
    subscription_header: std::sync::atomic::AtomicBool,
    tls: Option<Arc<rustls::ServerConfig>>,
    /// `Bearer <token>` every call must carry.
    bearer: Option<String>,
}

impl Shared {
    /// Refuses a call without the configured bearer token.
    fn authorize<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let Some(want) = &self.bearer else {
            return Ok(());
        };
        let got = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if got == Some(want.as_str()) {
            return Ok(());
        }
        self.lock().unauthenticated += 1;
        Err(Status::unauthenticated("no or a wrong bearer token"))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a test thread panicked mid-update; the data is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `ev` to every subscriber of `cluster` (none subscribed: lost, as with the broker),
    /// through the armed wire faults; called with the state locked so that the wire order is
    /// the store's order.
    fn send(&self, st: &mut State, cluster: &str, ev: CloudEvent) -> Result<(), Error> {
        let out = st.faults.outgoing(cluster, ev);
        self.send_all(st, out)
    }

    /// Sends events as they are (the wire faults already applied).
    fn send_all(&self, st: &mut State, out: Vec<Addressed>) -> Result<(), Error> {
        for (cluster, ev) in out {
            self.wire(st, &cluster, ev)?;
        }
        Ok(())
    }

    /// Sends one event to the subscribers of `cluster` and records it.
    fn wire(&self, st: &mut State, cluster: &str, ev: CloudEvent) -> Result<(), Error> {
        let pb = to_proto(&ev)?;
        st.subscribers
            .retain(|_, s| s.cluster != cluster || s.tx.send(Ok(pb.clone())).is_ok());
        if let Ok(ty) = ev.event_type() {
            *st.counters.sent_by_type.entry(ty).or_default() += 1;
        }
        if let Some(r) = ev
            .ext_string(types::EXT_RESOURCE_ID)
            .and_then(|id| st.resources.get_mut(&id))
            && ev.data.is_some()
        {
            r.spec_events_sent += 1;
        }
        st.sent.push(ev);
        Ok(())
    }
}

/// The running server: its task and how to stop it.
struct Running {
    task: JoinHandle<()>,
    stop: tokio::sync::oneshot::Sender<()>,
}

/// A gRPC source on 127.0.0.1; the server stops when it is dropped.
pub struct GrpcSource {
    shared: Arc<Shared>,
    addr: SocketAddr,
    running: Option<Running>,
}

impl Drop for GrpcSource {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            r.task.abort();
        }
        self.shared.lock().subscribers.clear();
    }
}

impl GrpcSource {
    /// Starts serving on 127.0.0.1 (`options.port`, or a free port).
    pub async fn start(options: GrpcSourceOptions) -> Result<Self, Error> {
        let tls = options.tls.as_ref().map(server_config).transpose()?;
        let shared = Arc::new(Shared {
            source_id: options.source_id,
            heartbeat_interval: options.heartbeat_interval,
            registration_delay: options.registration_delay,
            state: Mutex::new(State::default()),
            heartbeats: watch::channel(true).0,
            subscription_header: std::sync::atomic::AtomicBool::new(true),
            tls,
            bearer: options.token.map(|t| format!("Bearer {t}")),
        });
        let addr = SocketAddr::from(([127, 0, 0, 1], options.port));
        let mut source = Self {
            shared,
            addr,
            running: None,
        };
        source.serve().await?;
        Ok(source)
    }

    async fn serve(&mut self) -> Result<(), Error> {
        let listener = tokio::net::TcpListener::bind(self.addr)
            .await
            .map_err(|source| Error::Listen {
                addr: self.addr,
                source,
            })?;
        self.addr = listener.local_addr().map_err(|source| Error::Listen {
            addr: self.addr,
            source,
        })?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = Service {
            shared: self.shared.clone(),
        };
        let incoming = accept(listener, self.shared.clone());
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .serve_with_incoming_shutdown(service, incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        self.running = Some(Running { task, stop });
        Ok(())
    }

    /// `127.0.0.1:<port>`: the `url` of the agent's config file.
    pub fn url(&self) -> String {
        self.addr.to_string()
    }

    /// Stops serving: every subscription stream ends, the port is closed. The store stays.
    pub async fn stop(&mut self) {
        // The streams end first, so that the graceful shutdown has nothing to wait for.
        self.shared.lock().subscribers.clear();
        if let Some(r) = self.running.take() {
            let _ = r.stop.send(());
            let mut task = r.task;
            if tokio::time::timeout(Duration::from_secs(5), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
    }

    /// Serves again on the same port, with the same store.
    pub async fn restart(&mut self) -> Result<(), Error> {
        self.stop().await;
        self.serve().await
    }

    /// Turns the heartbeats on or off (off: an agent with `serverHealthinessTimeout` reconnects).
    pub fn set_heartbeats(&self, on: bool) {
        self.shared.heartbeats.send_replace(on);
    }

    /// Whether subscriptions get the `subscription-id` header (off: not a valid source).
    pub fn set_subscription_header(&self, on: bool) {
        self.shared
            .subscription_header
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// Refuses the next `n` status publishes with `FailedPrecondition`, as the broker answers a
    /// failing handler.
    pub fn refuse_publishes(&self, n: u64) {
        self.shared.lock().publishes_to_refuse = n;
    }

    /// Refuses the next `n` statuses of resource `id` (`FailedPrecondition`); 0 stops refusing.
    pub fn refuse_resource(&self, id: &str, n: u64) {
        self.shared
            .lock()
            .refused_resources
            .insert(id.to_string(), n);
    }

    /// Arms or reads the wire faults (see [`WireFaults`]); armed faults apply to the events
    /// sent from now on. A lost status is a `Publish` that fails with `Unavailable` unapplied (the
    /// connection broke).
    pub fn faults<R>(&self, f: impl FnOnce(&mut WireFaults) -> R) -> R {
        f(&mut self.shared.lock().faults)
    }

    /// Sends the oldest batch of spec events the wire faults hold back; false when none.
    pub fn release_held(&self) -> Result<bool, Error> {
        let mut st = self.shared.lock();
        let batch = st.faults.release();
        let any = !batch.is_empty();
        self.shared.send_all(&mut st, batch)?;
        Ok(any)
    }

    /// Every resource forgotten after a `Deleted` status, in order.
    pub fn hard_deletions(&self) -> Vec<HardDeletion> {
        self.shared.lock().deletions.clone()
    }

    /// Copies of every stored resource, in creation order.
    pub fn resources(&self) -> Vec<StoredResource> {
        crate::mqtt_source::in_creation_order(&self.shared.lock().resources)
    }

    /// Publishes refused so far.
    pub fn publishes_refused(&self) -> u64 {
        self.shared.lock().publishes_refused
    }

    /// Every successful TLS handshake, in order.
    pub fn handshakes(&self) -> Vec<Handshake> {
        self.shared.lock().handshakes.clone()
    }

    /// Every failed TLS handshake (the error), in order.
    pub fn failed_handshakes(&self) -> Vec<String> {
        self.shared.lock().failed_handshakes.clone()
    }

    /// Calls refused for their bearer token.
    pub fn unauthenticated(&self) -> u64 {
        self.shared.lock().unauthenticated
    }

    /// Heartbeats sent so far, over all subscriptions.
    pub fn heartbeats_sent(&self) -> u64 {
        self.shared.lock().heartbeats_sent
    }

    /// Open subscriptions of `cluster`.
    pub fn subscribers(&self, cluster: &str) -> usize {
        let mut st = self.shared.lock();
        st.subscribers.retain(|_, s| !s.tx.is_closed());
        st.subscribers
            .values()
            .filter(|s| s.cluster == cluster)
            .count()
    }

    /// The source id.
    pub fn source_id(&self) -> &str {
        &self.shared.source_id
    }

    /// Creates a resource on `cluster` (id a fresh uuid, `metadata.name` = id, version 1) and
    /// sends `spec.create_request`; returns the id.
    pub fn create(&self, cluster: &str, bundle: Value) -> Result<String, Error> {
        let id = uuid::Uuid::new_v4().to_string();
        let mut st = self.shared.lock();
        st.next_ordinal += 1;
        let r = StoredResource {
            id: id.clone(),
            consumer: cluster.to_string(),
            version: 1,
            metadata: serde_json::json!({ "name": id }),
            bundle,
            deleted_at: None,
            status: None,
            status_hash: None,
            sequence_id: None,
            statuses_accepted: 0,
            spec_events_sent: 0,
            ordinal: st.next_ordinal,
        };
        let ev = spec_event(&self.shared.source_id, EventType::SpecCreate, &r);
        st.resources.insert(id.clone(), r);
        self.shared.send(&mut st, cluster, ev)?;
        Ok(id)
    }

    /// Replaces the bundle, bumps the version and sends `spec.update_request`; returns the new
    /// version.
    pub fn update(&self, id: &str, bundle: Value) -> Result<i64, Error> {
        let mut st = self.shared.lock();
        let r = st
            .resources
            .get_mut(id)
            .ok_or_else(|| Error::UnknownResource(id.to_string()))?;
        if r.deleted_at.is_some() {
            return Err(Error::Deleting(id.to_string()));
        }
        r.version += 1;
        r.bundle = bundle;
        let (version, cluster) = (r.version, r.consumer.clone());
        let ev = spec_event(&self.shared.source_id, EventType::SpecUpdate, r);
        self.shared.send(&mut st, &cluster, ev)?;
        Ok(version)
    }

    /// Marks the resource deleting and sends `spec.delete_request` with `deletiontimestamp`; the
    /// resource goes when the agent reports `Deleted=True`. A second delete sends nothing.
    pub fn delete(&self, id: &str) -> Result<(), Error> {
        let mut st = self.shared.lock();
        let r = st
            .resources
            .get_mut(id)
            .ok_or_else(|| Error::UnknownResource(id.to_string()))?;
        if r.deleted_at.is_some() {
            return Ok(());
        }
        r.deleted_at = Some(Utc::now());
        let cluster = r.consumer.clone();
        let ev = spec_event(&self.shared.source_id, EventType::SpecDelete, r);
        self.shared.send(&mut st, &cluster, ev)
    }

    /// Forgets a resource without telling the agent (a source that lost it): the agent learns
    /// it from the resync answer to its next subscribe.
    pub fn forget(&self, id: &str) -> bool {
        self.shared.lock().resources.remove(id).is_some()
    }

    /// Sends any event to the subscribers of `cluster`, as is.
    pub fn send_event(&self, cluster: &str, ev: CloudEvent) -> Result<(), Error> {
        let mut st = self.shared.lock();
        self.shared.send(&mut st, cluster, ev)
    }

    /// Sends a raw protobuf event to the subscribers of `cluster` (malformed-event tests).
    pub fn send_raw(&self, cluster: &str, pb: proto::CloudEvent) {
        let mut st = self.shared.lock();
        st.subscribers
            .retain(|_, s| s.cluster != cluster || s.tx.send(Ok(pb.clone())).is_ok());
    }

    /// The `status` of the work condition `ty` in the latest accepted status.
    pub fn condition_status(&self, id: &str, ty: &str) -> Option<String> {
        let st = self.shared.lock();
        let status = st.resources.get(id)?.status.as_ref()?;
        status
            .get("conditions")?
            .as_array()?
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))?
            .get("status")?
            .as_str()
            .map(str::to_string)
    }

    /// A copy of one stored resource.
    pub fn resource(&self, id: &str) -> Option<StoredResource> {
        self.shared.lock().resources.get(id).cloned()
    }

    /// Whether the source holds the resource.
    pub fn exists(&self, id: &str) -> bool {
        self.shared.lock().resources.contains_key(id)
    }

    /// Whether the resource was hard-deleted after a `Deleted=True` status.
    pub fn hard_deleted(&self, id: &str) -> bool {
        self.shared.lock().hard_deleted.contains(id)
    }

    /// The counters so far.
    pub fn counters(&self) -> SourceCounters {
        self.shared.lock().counters.clone()
    }

    /// Every agent event received, in arrival order.
    pub fn events(&self) -> Vec<CloudEvent> {
        self.shared.lock().events.clone()
    }

    /// Every event the source sent, in order.
    pub fn sent(&self) -> Vec<CloudEvent> {
        self.shared.lock().sent.clone()
    }

    /// The decision on every status event, in arrival order.
    pub fn status_verdicts(&self) -> Vec<StatusVerdict> {
        self.shared.lock().verdicts.clone()
    }

    /// Polls `cond` every [`WAIT_POLL`] until it holds; after `timeout` the error describes the
    /// counters and the last status decisions.
    pub async fn wait_until(
        &self,
        cond: impl Fn(&GrpcSource) -> bool,
        timeout: Duration,
    ) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if cond(self) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                let st = self.shared.lock();
                let last: Vec<_> = st.verdicts.iter().rev().take(5).collect();
                return Err(format!(
                    "condition not met within {timeout:?}; subscribers: {}, counters: {:?}, last status verdicts (newest first): {last:?}",
                    st.subscribers.len(),
                    st.counters
                ));
            }
            tokio::time::sleep(WAIT_POLL).await;
        }
    }
}

/// The broker's answer to a spec resync request of `cluster`: deleting resources, resources newer
/// than the agent's version (or at version 0), then a delete without data for each id the agent
/// listed that the source does not hold.
pub fn broker_resync_answer<'a>(
    source_id: &str,
    cluster: &str,
    resources: impl IntoIterator<Item = &'a StoredResource>,
    request: &ResourceVersionList,
    now: DateTime<Utc>,
) -> Vec<CloudEvent> {
    let mut ours: Vec<&StoredResource> = resources
        .into_iter()
        .filter(|r| r.consumer == cluster)
        .collect();
    ours.sort_by_key(|r| r.ordinal);
    let listed = |id: &str| {
        request
            .resource_versions
            .iter()
            .find(|v| v.resource_id == id)
            .map_or(0, |v| v.resource_version)
    };
    let mut out: Vec<CloudEvent> = ours
        .iter()
        .filter(|r| r.deleted_at.is_some() || r.version == 0 || r.version > listed(&r.id))
        .map(|r| spec_event(source_id, EventType::SpecResyncResponse, r))
        .collect();
    for v in &request.resource_versions {
        if ours.iter().any(|r| r.id == v.resource_id) {
            continue;
        }
        // As the broker builds it: source "source", no data, no content type.
        let mut ev = CloudEvent::new(EventType::SpecResyncResponse, "source")
            .with_ext(
                types::EXT_RESOURCE_ID,
                ExtValue::String(v.resource_id.clone()),
            )
            .with_ext(types::EXT_CLUSTER_NAME, ExtValue::String(cluster.into()))
            .with_ext(types::EXT_DELETION_TIMESTAMP, ExtValue::Time(now));
        ev.datacontenttype = None;
        out.push(ev);
    }
    out
}

/// The service: routes the two methods by path.
#[derive(Clone)]
struct Service {
    shared: Arc<Shared>,
}

impl tower::Service<http::Request<tonic::body::Body>> for Service {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let shared = self.shared.clone();
        match req.uri().path() {
            proto::PUBLISH_PATH => Box::pin(async move {
                let mut grpc =
                    tonic::server::Grpc::new(ProstCodec::<(), PublishRequest>::default());
                Ok(grpc.unary(Publish { shared }, req).await)
            }),
            proto::SUBSCRIBE_PATH => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(ProstCodec::<
                    proto::CloudEvent,
                    SubscriptionRequest,
                >::default());
                Ok(grpc.server_streaming(Subscribe { shared }, req).await)
            }),
            other => {
                let status = Status::unimplemented(format!("no method {other}"));
                Box::pin(async move { Ok(status.into_http()) })
            }
        }
    }
}

struct Publish {
    shared: Arc<Shared>,
}

impl tonic::server::UnaryService<PublishRequest> for Publish {
    type Response = ();
    type Future = BoxFuture<'static, Result<Response<()>, Status>>;

    fn call(&mut self, request: Request<PublishRequest>) -> Self::Future {
        let result = self
            .shared
            .authorize(&request)
            .and_then(|()| publish(&self.shared, request.into_inner()));
        Box::pin(async move { result.map(Response::new) })
    }
}

fn publish(shared: &Shared, request: PublishRequest) -> Result<(), Status> {
    let pb = request
        .event
        .ok_or_else(|| Status::invalid_argument("no event"))?;
    let mut st = shared.lock();
    st.counters.received += 1;
    let ev = match from_proto(&pb) {
        Ok(ev) => ev,
        Err(e) => {
            st.counters.malformed += 1;
            return Err(Status::invalid_argument(format!(
                "failed to convert protobuf to cloudevent: {e}"
            )));
        }
    };
    st.events.push(ev.clone());
    let ty = match ev.event_type() {
        Ok(ty) => ty,
        Err(e) => {
            st.counters.malformed += 1;
            return Err(Status::invalid_argument(e.to_string()));
        }
    };
    match ty {
        EventType::SpecResyncRequest => {
            st.counters.spec_resync_requests += 1;
            let request: ResourceVersionList = ev
                .data
                .as_deref()
                .map(serde_json::from_slice)
                .transpose()
                .map_err(|e| Status::failed_precondition(e.to_string()))?
                .unwrap_or_default();
            let cluster = ev.ext_string(types::EXT_CLUSTER_NAME).unwrap_or_default();
            let answer = broker_resync_answer(
                &shared.source_id,
                &cluster,
                st.resources.values(),
                &request,
                Utc::now(),
            );
            st.counters.spec_resync_responses += answer.len() as u64;
            let now = st.faults.answer(&cluster, answer);
            shared
                .send_all(&mut st, now)
                .map_err(|e| Status::failed_precondition(e.to_string()))?;
            Ok(())
        }
        EventType::StatusUpdate | EventType::StatusResyncResponse => {
            let id = ev.ext_string(types::EXT_RESOURCE_ID).unwrap_or_default();
            let for_resource = st.refused_resources.get_mut(&id).filter(|n| **n > 0);
            if let Some(n) = for_resource {
                *n -= 1;
                st.publishes_refused += 1;
                return Err(Status::failed_precondition("refused by the test"));
            }
            if st.faults.lose_status() {
                // As a connection that broke before the call was answered: nothing applied.
                return Err(Status::unavailable("lost in flight (test fault)"));
            }
            if st.publishes_to_refuse > 0 {
                st.publishes_to_refuse -= 1;
                st.publishes_refused += 1;
                return Err(Status::failed_precondition("refused by the test"));
            }
            *st.counters.status_events_by_type.entry(ty).or_default() += 1;
            let (outcome, unrequested) = apply_status(&mut st.resources, &shared.source_id, &ev);
            let id = ev.ext_string(types::EXT_RESOURCE_ID).unwrap_or_default();
            match &outcome {
                StatusOutcome::Accepted => st.counters.accepted += 1,
                StatusOutcome::Unchanged => st.counters.unchanged += 1,
                StatusOutcome::Stale { .. } => st.counters.stale += 1,
                StatusOutcome::Deleted => {
                    st.counters.deleted += 1;
                    st.hard_deleted.insert(id.clone());
                    let status = ev
                        .data
                        .as_deref()
                        .and_then(|d| serde_json::from_slice::<Value>(d).ok())
                        .unwrap_or(Value::Null);
                    st.deletions.push(HardDeletion {
                        id: id.clone(),
                        at: Utc::now(),
                        requested: !unrequested,
                        status,
                    });
                }
                StatusOutcome::UnknownResource => st.counters.unknown_resource += 1,
                _ => st.counters.ignored += 1,
            }
            st.verdicts.push(StatusVerdict {
                event_id: ev.id.clone(),
                resource_id: id,
                outcome: outcome.clone(),
            });
            match outcome {
                StatusOutcome::Malformed(why) => Err(Status::invalid_argument(why)),
                _ => Ok(()),
            }
        }
        _ => {
            st.counters.ignored += 1;
            Err(Status::invalid_argument(format!(
                "unsupported event type {}",
                ev.type_
            )))
        }
    }
}

struct Subscribe {
    shared: Arc<Shared>,
}

type EventStream = futures::stream::BoxStream<'static, Result<proto::CloudEvent, Status>>;

impl tonic::server::ServerStreamingService<SubscriptionRequest> for Subscribe {
    type Response = proto::CloudEvent;
    type ResponseStream = EventStream;
    type Future = BoxFuture<'static, Result<Response<EventStream>, Status>>;

    fn call(&mut self, request: Request<SubscriptionRequest>) -> Self::Future {
        let shared = self.shared.clone();
        let authorized = shared.authorize(&request);
        let sub = request.into_inner();
        Box::pin(async move {
            authorized?;
            if sub.cluster_name.is_empty() {
                return Err(Status::invalid_argument(
                    "invalid subscription request: missing cluster name",
                ));
            }
            if sub.data_type != types::MANIFEST_BUNDLE_DATA_TYPE {
                return Err(Status::invalid_argument(format!(
                    "invalid subscription request: invalid data type {:?}",
                    sub.data_type
                )));
            }
            let id = uuid::Uuid::new_v4().to_string();
            let (tx, rx) = mpsc::unbounded_channel();
            let register = {
                let (shared, id, tx) = (shared.clone(), id.clone(), tx.clone());
                async move {
                    tokio::time::sleep(shared.registration_delay).await;
                    let mut st = shared.lock();
                    st.counters.subscriptions += 1;
                    st.subscribers.insert(
                        id,
                        Subscriber {
                            cluster: sub.cluster_name,
                            tx: tx.clone(),
                        },
                    );
                    drop(st);
                    // A weak sender: dropping the subscriber ends the stream.
                    tokio::spawn(heartbeats(shared, tx.downgrade()));
                }
            };
            if shared.registration_delay.is_zero() {
                register.await;
            } else {
                tokio::spawn(register);
            }
            let stream: EventStream = Box::pin(futures::stream::unfold(rx, |mut rx| async {
                rx.recv().await.map(|item| (item, rx))
            }));
            let mut response = Response::new(stream);
            if shared
                .subscription_header
                .load(std::sync::atomic::Ordering::SeqCst)
            {
                let value = id
                    .parse()
                    .map_err(|_| Status::internal("subscription id"))?;
                response
                    .metadata_mut()
                    .insert(proto::SUBSCRIPTION_ID_HEADER, value);
            }
            Ok(response)
        })
    }
}

/// Sends a heartbeat every interval while heartbeats are on, until the stream is gone.
async fn heartbeats(
    shared: Arc<Shared>,
    tx: mpsc::WeakUnboundedSender<Result<proto::CloudEvent, Status>>,
) {
    let mut on = shared.heartbeats.subscribe();
    let mut ticks = tokio::time::interval(shared.heartbeat_interval);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(tx) = tx.upgrade() else { return };
        if !*on.borrow_and_update() {
            continue;
        }
        let beat = proto::CloudEvent {
            id: uuid::Uuid::new_v4().to_string(),
            spec_version: "1.0".into(),
            r#type: types::HEARTBEAT_TYPE.into(),
            ..Default::default()
        };
        if tx.send(Ok(beat)).is_err() {
            return;
        }
        shared.lock().heartbeats_sent += 1;
    }
}

/// The rustls server config of `tls`: ALPN h2, client certificates of the CA when given.
fn server_config(tls: &SourceTls) -> Result<Arc<rustls::ServerConfig>, Error> {
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
enum SourceIo {
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
fn accept(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
) -> futures::stream::BoxStream<'static, std::io::Result<SourceIo>> {
    let (tx, rx) = mpsc::channel::<SourceIo>(16);
    let acceptor = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let Some(config) = shared.tls.clone() else {
                if tx.send(SourceIo::Plain(tcp)).await.is_err() {
                    return;
                }
                continue;
            };
            let (tx, shared) = (tx.clone(), shared.clone());
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
                        shared.lock().handshakes.push(handshake);
                        let _ = tx.send(SourceIo::Tls(Box::new(tls))).await;
                    }
                    Err(e) => shared.lock().failed_handshakes.push(e.to_string()),
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
