//! The front end's own state: its subscriptions, what it was told to refuse, the handshakes it saw,
//! and the wire it gives the source.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use cloudevents::CloudEvent;
use cloudevents::grpc::{proto, to_proto};
use tokio::sync::{mpsc, watch};
use tokio_rustls::rustls;
use tonic::{Request, Status};

use crate::maestro::{Error, Wire};

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

/// One open subscription.
pub(super) struct Subscriber {
    pub(super) cluster: String,
    pub(super) tx: mpsc::UnboundedSender<Result<proto::CloudEvent, Status>>,
}

/// What the front end itself records and is told.
#[derive(Default)]
pub(super) struct FrontState {
    pub(super) subscribers: BTreeMap<String, Subscriber>,
    pub(super) heartbeats_sent: u64,
    pub(super) publishes_to_refuse: u64,
    pub(super) publishes_refused: u64,
    /// Statuses of these resources are refused, so many times each.
    pub(super) refused_resources: BTreeMap<String, u64>,
    pub(super) handshakes: Vec<Handshake>,
    pub(super) failed_handshakes: Vec<String>,
    pub(super) unauthenticated: u64,
}

/// The front end: its settings and state, and the wire of the source (its subscriptions).
pub(super) struct Front {
    pub(super) heartbeat_interval: Duration,
    pub(super) registration_delay: Duration,
    pub(super) state: Mutex<FrontState>,
    /// Heartbeats are sent while true.
    pub(super) heartbeats: watch::Sender<bool>,
    /// The `subscription-id` header is sent while true.
    pub(super) subscription_header: AtomicBool,
    pub(super) tls: Option<Arc<rustls::ServerConfig>>,
    /// `Bearer <token>` every call must carry.
    pub(super) bearer: Option<String>,
}

impl Front {
    pub(super) fn lock(&self) -> MutexGuard<'_, FrontState> {
        // A poisoned lock only means a test thread panicked mid-update; the data is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuses a call without the configured bearer token.
    pub(super) fn authorize<T>(&self, request: &Request<T>) -> Result<(), Status> {
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

    /// Whether the status of resource `id` now published is refused (counted).
    pub(super) fn refuse(&self, id: &str) -> bool {
        let mut st = self.lock();
        if let Some(n) = st.refused_resources.get_mut(id).filter(|n| **n > 0) {
            *n -= 1;
        } else if st.publishes_to_refuse > 0 {
            st.publishes_to_refuse -= 1;
        } else {
            return false;
        }
        st.publishes_refused += 1;
        true
    }

    /// Sends `pb` to every subscriber of `cluster` (none subscribed: lost, as with the broker).
    pub(super) fn stream(&self, cluster: &str, pb: &proto::CloudEvent) {
        self.lock()
            .subscribers
            .retain(|_, s| s.cluster != cluster || s.tx.send(Ok(pb.clone())).is_ok());
    }
}

impl Wire for Front {
    fn send(&self, cluster: &str, ev: &CloudEvent) -> Result<(), Error> {
        self.stream(cluster, &to_proto(ev)?);
        Ok(())
    }
}
