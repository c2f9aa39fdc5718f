//! The gRPC front end of the Maestro-shaped source ([`crate::maestro`]): it serves the source side
//! of the CloudEvents gRPC protocol (`io.cloudevents.v1.CloudEventService`) the way OCM's gRPC
//! server and Maestro's gRPC broker do (both are sdk-go's `GRPCBroker`), on 127.0.0.1:
//!
//! - `Subscribe(cluster_name, data_type)` answers with the `subscription-id` header before any
//!   event, then streams the spec events of that cluster, and a heartbeat
//!   (`io.open-cluster-management.cloudevents.heartbeat`: id, specversion and type only) every
//!   heartbeat interval;
//! - `Publish` of a `spec.resync_request` is answered through the subscription streams as the
//!   broker does: every deleting resource, every resource newer than the agent's version (or at
//!   version 0), and a delete without data for every id the agent listed that the source does not
//!   hold (also when it holds none for that cluster);
//! - `Publish` of a status is judged with Maestro's rules ([`crate::maestro::apply_status`]):
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

use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cloudevents::grpc::proto;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use crate::maestro::Error;
use crate::maestro::{Maestro, ResyncAnswer};

mod front;
mod service;
mod tls;

use front::Front;
pub use front::{Handshake, SourceTls};

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

/// The running server: its task and how to stop it.
struct Running {
    task: JoinHandle<()>,
    stop: tokio::sync::oneshot::Sender<()>,
}

/// A gRPC source on 127.0.0.1; the server stops when it is dropped. It is the source
/// ([`Maestro`], through `Deref`) plus its server.
pub struct GrpcSource {
    maestro: Arc<Maestro>,
    front: Arc<Front>,
    addr: SocketAddr,
    running: Option<Running>,
}

impl Deref for GrpcSource {
    type Target = Maestro;

    fn deref(&self) -> &Maestro {
        &self.maestro
    }
}

impl Drop for GrpcSource {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            r.task.abort();
        }
        self.front.lock().subscribers.clear();
    }
}

impl GrpcSource {
    /// Starts serving on 127.0.0.1 (`options.port`, or a free port).
    pub async fn start(options: GrpcSourceOptions) -> Result<Self, Error> {
        let tls = options.tls.as_ref().map(tls::server_config).transpose()?;
        let front = Arc::new(Front {
            heartbeat_interval: options.heartbeat_interval,
            registration_delay: options.registration_delay,
            state: Mutex::default(),
            heartbeats: watch::channel(true).0,
            subscription_header: AtomicBool::new(true),
            tls,
            bearer: options.token.map(|t| format!("Bearer {t}")),
        });
        let maestro = Arc::new(Maestro::new(
            &options.source_id,
            ResyncAnswer::GrpcBroker,
            front.clone(),
        ));
        let mut source = Self {
            maestro,
            front,
            addr: SocketAddr::from(([127, 0, 0, 1], options.port)),
            running: None,
        };
        source.serve().await?;
        Ok(source)
    }

    async fn serve(&mut self) -> Result<(), Error> {
        // On a restart the previous listener closes when its acceptor task, aborted as the server
        // stopped, is next scheduled: the port can still be taken for a moment.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(e)
                    if e.kind() == std::io::ErrorKind::AddrInUse
                        && self.addr.port() != 0
                        && std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(source) => {
                    return Err(Error::Listen {
                        addr: self.addr,
                        source,
                    });
                }
            }
        };
        self.addr = listener.local_addr().map_err(|source| Error::Listen {
            addr: self.addr,
            source,
        })?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = service::Service {
            server: service::Server {
                front: self.front.clone(),
                maestro: self.maestro.clone(),
            },
        };
        let incoming = tls::accept(listener, self.front.clone());
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
        self.front.lock().subscribers.clear();
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
        self.front.heartbeats.send_replace(on);
    }

    /// Whether subscriptions get the `subscription-id` header (off: not a valid source).
    pub fn set_subscription_header(&self, on: bool) {
        self.front.subscription_header.store(on, Ordering::SeqCst);
    }

    /// Refuses the next `n` status publishes with `FailedPrecondition`, as the broker answers a
    /// failing handler.
    pub fn refuse_publishes(&self, n: u64) {
        self.front.lock().publishes_to_refuse = n;
    }

    /// Refuses the next `n` statuses of resource `id` (`FailedPrecondition`); 0 stops refusing.
    pub fn refuse_resource(&self, id: &str, n: u64) {
        self.front
            .lock()
            .refused_resources
            .insert(id.to_string(), n);
    }

    /// Publishes refused so far.
    pub fn publishes_refused(&self) -> u64 {
        self.front.lock().publishes_refused
    }

    /// Every successful TLS handshake, in order.
    pub fn handshakes(&self) -> Vec<Handshake> {
        self.front.lock().handshakes.clone()
    }

    /// Every failed TLS handshake (the error), in order.
    pub fn failed_handshakes(&self) -> Vec<String> {
        self.front.lock().failed_handshakes.clone()
    }

    /// Calls refused for their bearer token.
    pub fn unauthenticated(&self) -> u64 {
        self.front.lock().unauthenticated
    }

    /// Heartbeats sent so far, over all subscriptions.
    pub fn heartbeats_sent(&self) -> u64 {
        self.front.lock().heartbeats_sent
    }

    /// Open subscriptions of `cluster`.
    pub fn subscribers(&self, cluster: &str) -> usize {
        let mut st = self.front.lock();
        st.subscribers.retain(|_, s| !s.tx.is_closed());
        st.subscribers
            .values()
            .filter(|s| s.cluster == cluster)
            .count()
    }

    /// Sends a raw protobuf event to the subscribers of `cluster` (malformed-event tests); it is
    /// not recorded in [`Maestro::sent`].
    pub fn send_raw(&self, cluster: &str, pb: proto::CloudEvent) {
        self.front.stream(cluster, &pb);
    }

    /// Polls `cond` until it holds; after `timeout` the error describes the subscriptions, the
    /// counters and the last status decisions.
    pub async fn wait_until(
        &self,
        cond: impl Fn(&GrpcSource) -> bool,
        timeout: Duration,
    ) -> Result<(), String> {
        let subscribers = || format!("subscribers: {}", self.front.lock().subscribers.len());
        self.maestro
            .wait_for(|| cond(self), timeout, subscribers)
            .await
    }
}
