//! The agent's CloudEvents client, one for every wire: it drives a [`Transport`] (MQTT, gRPC),
//! decodes the source's spec events into a stream, publishes status events from a bounded queue
//! that keeps only the latest event per work while the source is away, and calls a hook after
//! every (re)subscribe (the agent's spec resync request). Reconnects with jittered exponential
//! backoff (upstream: 5 s to 1 min); at once, without backoff, when the client certificate was
//! rotated (its files are read again every refresh period, upstream's `clientCertRotating`).
//!
//! Loss-free across broker and server restarts: an event stays the client's until the source has
//! taken it ([`crate::transport::Sent::Taken`]); one lost with its connection goes back to the queue (unless a newer
//! event of the same work is there), one the broker took while no source listened is held and sent
//! again once a source is back, one the source could not apply now is tried again after a growing
//! delay, one the source called malformed is dropped and counted.
//!
//! Within the wire's ceiling ([`Ceiling`]): an event larger than the broker takes is refused when
//! it is published, and checked again before it is sent (a reconnect may have brought a lower
//! ceiling); one over it then is dropped and counted, and never reaches the transport, so the
//! connection stays up.

mod outbox;
mod stats;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, watch};

use crate::Error;
use crate::ceiling::Ceiling;
use crate::codec::{Decoder, Incoming};
use crate::event::CloudEvent;
use crate::queue::{event_key, reconnect_backoff};
use crate::tls::ReloadingClientCert;
use crate::transport::{EventSender, Received, Sent, Transport};
use outbox::Outbox;
pub use stats::{CeilingStats, Stats};

/// What a client needs besides its transport (`C`: the wire's parsed config file, which the
/// transport is made from; each transport names its own, e.g. `mqtt::MqttClientOptions`, so
/// the client knows no wire).
#[derive(Clone, Debug)]
pub struct ClientOptions<C> {
    /// The parsed config.
    pub config: C,
    /// This agent's cluster.
    pub cluster: String,
    /// `--cloudevents-client-id`: status events' source; the MQTT client id is `<id>-client`.
    pub cloudevents_client_id: String,
    /// Largest spec payload accepted.
    pub max_payload: usize,
    /// Works whose latest status may wait while the source is away; beyond, publish fails.
    pub queue_capacity: usize,
    /// First reconnect delay (upstream 5 s).
    pub reconnect_min: Duration,
    /// Largest reconnect delay (upstream 1 min).
    pub reconnect_max: Duration,
    /// How often the TLS client certificate files are read again (upstream's
    /// `CertCallbackRefreshDuration`: 5 min, or `CERT_CALLBACK_REFRESH_DURATION`).
    pub cert_refresh: Duration,
}

impl<C> ClientOptions<C> {
    /// Upstream's defaults for `config`.
    pub fn new(
        config: C,
        cluster: impl Into<String>,
        cloudevents_client_id: impl Into<String>,
    ) -> Self {
        Self {
            config,
            cluster: cluster.into(),
            cloudevents_client_id: cloudevents_client_id.into(),
            max_payload: crate::codec::DEFAULT_MAX_PAYLOAD,
            queue_capacity: 100_000,
            reconnect_min: Duration::from_secs(5),
            reconnect_max: Duration::from_secs(60),
            cert_refresh: crate::tls::refresh_from_env(),
        }
    }
}

/// Called after every successful (re)subscribe with the client, e.g. to send the spec resync request.
pub type SubscribedHook = Arc<dyn Fn(&Publisher) + Send + Sync>;

/// Between the client's tasks.
struct Shared {
    outbox: Mutex<Outbox>,
    /// Wakes the publish loop (an event queued, a send settled, a connection up).
    wake: Notify,
    /// Told whenever a source took an event (see [`Publisher::taken`]).
    taken: Notify,
    /// Told whenever the queue may have shrunk or the connection went (see [`Publisher::room`]).
    room: Notify,
    /// A send found the connection of a session failed (the session, why): the connection loop
    /// ends it when it is the current one.
    lost: Notify,
    lost_session: Mutex<Option<(u64, String)>>,
    /// Refuses events the wire cannot carry, when they are queued.
    check: fn(&CloudEvent) -> Result<(), Error>,
    /// The wire's ceiling, kept current by the transport.
    ceiling: Arc<Ceiling>,
    source: String,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Outbox> {
        // A panic elsewhere while holding the lock leaves consistent-enough data to keep publishing.
        self.outbox.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The publishing half, cheap to clone.
#[derive(Clone)]
pub struct Publisher {
    shared: Arc<Shared>,
}

impl Publisher {
    /// Queues `event` for publishing. A status event replaces any queued, unsent status of the
    /// same work; events without `resourceid` (resync requests) queue on their own. An event the
    /// wire cannot carry is refused here, one over the wire's ceiling with
    /// [`Error::EventTooLarge`].
    pub fn publish(&self, event: CloudEvent) -> Result<(), Error> {
        event.event_type()?;
        (self.shared.check)(&event)?;
        self.shared.ceiling.fits(&event)?;
        let key = event_key(&event);
        self.shared.lock().push(key, event)?;
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Readiness and counters now.
    pub fn stats(&self) -> Stats {
        self.shared.lock().stats.clone()
    }

    /// The largest event the wire takes now, in its own bytes (`usize::MAX`: no ceiling); it may
    /// change at a reconnect.
    pub fn ceiling(&self) -> usize {
        self.shared.ceiling.limit()
    }

    /// How many bytes `event` takes on the wire, to compare with [`Publisher::ceiling`]: exact,
    /// and computed without encoding the data.
    pub fn wire_size(&self, event: &CloudEvent) -> usize {
        self.shared.ceiling.wire_size(event)
    }

    /// Whether `event` is within the wire's ceiling now ([`Error::EventTooLarge`] when not).
    pub fn fits(&self, event: &CloudEvent) -> Result<(), Error> {
        self.shared.ceiling.fits(event)
    }

    /// The ceiling, where it comes from, and the events dropped as over it.
    pub fn ceiling_stats(&self) -> CeilingStats {
        let too_large = self.shared.lock().too_large;
        CeilingStats {
            max_event_bytes: self.shared.ceiling.limit(),
            origin: self.shared.ceiling.origin(),
            too_large,
        }
    }

    /// Whether the event of `key` ([`event_key`]) published last is not yet taken by a source:
    /// queued, on its way, held unheard, or refused for now. False once a source took it (or it
    /// was refused as malformed: sending it again could not help).
    pub fn is_pending(&self, key: &str) -> bool {
        self.shared.lock().is_pending(key)
    }

    /// Resolves when a source next takes an event (then [`Publisher::is_pending`] may have
    /// changed). Made before looking, it misses no event taken after it was made.
    pub fn taken(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.taken.notified()
    }

    /// Resolves once fewer than `below` events wait to be sent, or no connection is up (then
    /// events wait anyway, the latest per work). A producer that would publish many events awaits
    /// this first, so that it runs no further ahead of the wire than `below` events: a burst of
    /// statuses for every work (a restart, a status resync) then costs `below` events of memory,
    /// not one per work.
    pub async fn room(&self, below: usize) {
        loop {
            let freed = self.shared.room.notified();
            tokio::pin!(freed);
            // Registered before looking, so a pop between the look and the wait is not missed.
            freed.as_mut().enable();
            {
                let outbox = self.shared.lock();
                if !outbox.stats.ready || outbox.waiting() < below {
                    return;
                }
            }
            freed.await;
        }
    }

    /// The source attribute of the agent's events (`--cloudevents-client-id`).
    pub fn source(&self) -> &str {
        &self.shared.source
    }
}

/// A running client: the incoming spec events, and the publisher.
pub struct Client {
    /// Decoded events from the source, and decode errors (already counted) for logging.
    pub incoming: mpsc::Receiver<Result<Incoming, Error>>,
    /// Publishing and stats.
    pub publisher: Publisher,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Client {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Client {
    /// Starts driving `transport` on the current tokio runtime, with the cluster, payload limit,
    /// queue capacity, backoff and certificate refresh of `options`.
    pub fn start<C, T: Transport>(
        transport: T,
        options: &ClientOptions<C>,
        on_subscribed: SubscribedHook,
    ) -> Self {
        let shared = Arc::new(Shared {
            outbox: Mutex::new(Outbox::new(options.queue_capacity)),
            wake: Notify::new(),
            taken: Notify::new(),
            room: Notify::new(),
            lost: Notify::new(),
            lost_session: Mutex::new(None),
            check: T::check,
            ceiling: transport.ceiling(),
            source: options.cloudevents_client_id.clone(),
        });
        let publisher = Publisher {
            shared: shared.clone(),
        };
        let (tx, rx) = mpsc::channel(100);
        let decoder = Decoder {
            cluster: options.cluster.clone(),
            max_payload: options.max_payload,
        };
        let (current_tx, current_rx) = watch::channel(None);
        let max_inflight = transport.max_inflight().max(1);
        let cert = transport.client_cert();
        let connection = Connection {
            name: transport.name(),
            publisher: publisher.clone(),
            decoder,
            incoming: tx,
            hook: on_subscribed,
            backoff: (options.reconnect_min, options.reconnect_max),
            client_cert: cert.clone(),
            current: current_tx,
        };
        let (rotated, rotations) = watch::channel(0);
        let mut tasks = vec![tokio::spawn(connection.run(transport, rotations))];
        if let Some(cert) = cert {
            tasks.push(tokio::spawn(rotation_loop(
                cert,
                options.cert_refresh,
                rotated,
            )));
        }
        tasks.push(tokio::spawn(publish_loop(shared, current_rx, max_inflight)));
        Self {
            incoming: rx,
            publisher,
            tasks,
        }
    }
}

/// The sender of the connection that is up, with its session number.
type Current<S> = Option<(u64, S)>;

/// The connection loop's state.
struct Connection<S> {
    name: &'static str,
    publisher: Publisher,
    decoder: Decoder,
    incoming: mpsc::Sender<Result<Incoming, Error>>,
    hook: SubscribedHook,
    backoff: (Duration, Duration),
    client_cert: Option<Arc<ReloadingClientCert>>,
    current: watch::Sender<Current<S>>,
}

/// Why a connection ended.
enum End {
    /// Nobody reads the incoming events any more: stop.
    Stopped,
    /// Reconnect after the backoff.
    Lost(String),
    /// The client certificate changed: reconnect at once.
    Rotated,
}

impl<S: EventSender> Connection<S> {
    fn shared(&self) -> &Shared {
        &self.publisher.shared
    }

    async fn run<T: Transport<Sender = S>>(
        self,
        mut transport: T,
        mut rotations: watch::Receiver<u64>,
    ) {
        let (min, max) = self.backoff;
        let mut delays = reconnect_backoff(min, max);
        let mut session = 0u64;
        loop {
            // A rotation from here on (during the attempt or the backoff) ends a backoff at once.
            rotations.borrow_and_update();
            let end = match transport.connect().await {
                Err(why) => End::Lost(why),
                Ok(sender) => {
                    session += 1;
                    delays = reconnect_backoff(min, max);
                    let end = self
                        .serve(&mut transport, session, sender, &mut rotations)
                        .await;
                    let _ = self.current.send(None);
                    transport.close().await;
                    end
                }
            };
            // A failed attempt counts as a reconnect too: the next one follows.
            self.shared().lock().disconnected();
            self.shared().room.notify_waiters();
            match end {
                End::Stopped => return,
                End::Rotated => {
                    tracing::info!("{} client certificate rotated; reconnecting now", self.name);
                }
                End::Lost(why) => {
                    let delay = delays.next().unwrap_or(max);
                    tracing::warn!(error = %why, ?delay, "{} connection lost; reconnecting", self.name);
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        Ok(()) = rotations.changed() => {
                            tracing::info!("{} client certificate rotated; reconnecting now", self.name);
                        }
                    }
                }
            }
        }
    }

    /// Hands a decoded event (or why it is none, counted) to the agent; an error when nobody
    /// takes them any more.
    async fn forward(&self, result: Result<Incoming, Error>) -> Result<(), ()> {
        if result.is_err() {
            self.shared().lock().stats.rejected += 1;
        }
        self.incoming.send(result).await.map_err(drop)
    }

    /// Takes what one connection produces until it ends.
    async fn serve<T: Transport<Sender = S>>(
        &self,
        transport: &mut T,
        session: u64,
        sender: S,
        rotations: &mut watch::Receiver<u64>,
    ) -> End {
        self.shared().lock().stats.ready = true;
        let _ = self.current.send(Some((session, sender)));
        self.shared().wake.notify_one();
        let ceiling = &self.shared().ceiling;
        tracing::info!(
            max_event_bytes = ceiling.limit(),
            ceiling_origin = %ceiling.origin(),
            "{} connected and subscribed",
            self.name
        );
        loop {
            let received = tokio::select! {
                received = transport.next() => received,
                _ = self.shared().lost.notified() => {
                    // A late word about an earlier connection changes nothing.
                    let lost = self.shared().lost_session.lock().unwrap_or_else(|e| e.into_inner()).take();
                    match lost {
                        Some((s, why)) if s == session => return End::Lost(format!("publish: {why}")),
                        _ => continue,
                    }
                }
                Ok(()) = rotations.changed() => {
                    // A rotation before this connection's handshake needs no new connection.
                    if self.client_cert.as_deref().is_some_and(ReloadingClientCert::outdated) {
                        return End::Rotated;
                    }
                    continue;
                }
            };
            match received {
                Ok(Received::Subscribed) => (self.hook)(&self.publisher),
                Ok(Received::Event(event)) => {
                    let result = {
                        let mut outbox = self.shared().lock();
                        *outbox
                            .stats
                            .received
                            .entry(event.type_.clone())
                            .or_default() += 1;
                        drop(outbox);
                        self.decoder.decode(&event)
                    };
                    if self.forward(result).await.is_err() {
                        return End::Stopped;
                    }
                }
                Ok(Received::Malformed(e)) => {
                    if self.forward(Err(e)).await.is_err() {
                        return End::Stopped;
                    }
                }
                Err(why) => return End::Lost(why),
            }
        }
    }
}

/// The shortest period of the certificate polling, whatever the refresh period.
const MIN_CERT_POLL: Duration = Duration::from_millis(100);

/// Every `period` reads the client certificate again; when it changed, counts a rotation, which
/// the connection loop answers with a new connection (upstream's `loadClientCert`: the first load
/// is no rotation).
async fn rotation_loop(
    cert: Arc<ReloadingClientCert>,
    period: Duration,
    rotations: watch::Sender<u64>,
) {
    let period = period.max(MIN_CERT_POLL);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        // Small local files: read in place, as the handshake does.
        match cert.reload() {
            Ok(true) => {
                rotations.send_modify(|n| *n = n.wrapping_add(1));
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(
                error = %e,
                "reloading the client certificate failed; keeping the last good one"
            ),
        }
    }
}

/// Sends queued events, up to `max_inflight` at a time and one per work, while a connection is
/// up; refused and unheard events wait for their retry without holding up the others.
async fn publish_loop<S: EventSender>(
    shared: Arc<Shared>,
    current: watch::Receiver<Current<S>>,
    max_inflight: usize,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(max_inflight));
    loop {
        let connection = current.borrow().clone();
        let (next, due) = match (connection, slots.clone().try_acquire_owned()) {
            (Some((session, sender)), Ok(slot)) => {
                let (next, due) = shared.lock().next(tokio::time::Instant::now());
                (next.map(|n| (session, sender, n, slot)), due)
            }
            _ => (None, None),
        };
        if next.is_some() {
            shared.room.notify_waiters();
        }
        let Some((session, sender, (key, event), slot)) = next else {
            // Woken by a new event, a settled send or a new connection; or a retry is due.
            let wake = shared.wake.notified();
            match due {
                Some(at) => {
                    tokio::select! {
                        _ = wake => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => wake.await,
            }
            continue;
        };
        // Checked again at the last moment: a reconnect may have lowered the ceiling since the
        // event was published, and an event over it would fail the connection (MQTT).
        if let Err(e) = shared.ceiling.fits(&event) {
            shared.lock().settle(
                key,
                Sent::TooLarge(e.to_string()),
                tokio::time::Instant::now(),
            );
            drop(slot);
            continue;
        }
        let shared = shared.clone();
        tokio::spawn(async move {
            let outcome = sender.send(event).await;
            let settled = shared
                .lock()
                .settle(key, outcome, tokio::time::Instant::now());
            if settled.taken {
                shared.taken.notify_waiters();
            }
            if let Some(why) = settled.lost {
                tracing::debug!(error = %why, "a publish found the connection failed");
                *shared
                    .lost_session
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some((session, why));
                shared.lost.notify_one();
            }
            drop(slot);
            shared.room.notify_waiters();
            shared.wake.notify_one();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ceiling::CeilingOrigin;
    use crate::types::{self, EventType};
    use crate::{CloudEvent, ExtValue};

    /// A wire whose connection comes up when the test lets it, whose ceiling the test sets, and
    /// whose source takes everything sent.
    #[derive(Clone)]
    struct Gated(Arc<GatedWire>);

    struct GatedWire {
        ceiling: Arc<Ceiling>,
        connections: tokio::sync::Semaphore,
        sent: Mutex<Vec<CloudEvent>>,
        arrived: Notify,
        /// When set, each send takes a permit first: the test says when the wire takes one.
        sends: Option<tokio::sync::Semaphore>,
    }

    impl EventSender for Gated {
        async fn send(&self, event: CloudEvent) -> Sent {
            if let Some(sends) = &self.0.sends
                && let Ok(permit) = sends.acquire().await
            {
                permit.forget();
            }
            self.0
                .sent
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(event);
            self.0.arrived.notify_one();
            Sent::Taken
        }
    }

    impl Transport for Gated {
        type Sender = Gated;

        fn name(&self) -> &'static str {
            "gated"
        }

        fn max_inflight(&self) -> usize {
            4
        }

        fn ceiling(&self) -> Arc<Ceiling> {
            self.0.ceiling.clone()
        }

        async fn connect(&mut self) -> Result<Gated, String> {
            let permit = self
                .0
                .connections
                .acquire()
                .await
                .map_err(|e| e.to_string())?;
            permit.forget();
            Ok(self.clone())
        }

        async fn next(&mut self) -> Result<Received, String> {
            std::future::pending().await
        }

        async fn close(&mut self) {}
    }

    fn status(uid: &str, bytes: usize) -> CloudEvent {
        let mut ev = CloudEvent::new(EventType::StatusUpdate, "agent")
            .with_ext(types::EXT_RESOURCE_ID, ExtValue::String(uid.into()));
        ev.data = Some(vec![b'x'; bytes]);
        ev
    }

    /// Refused when published over the ceiling; dropped, counted and never sent when a
    /// reconnect lowered the ceiling below an event already queued; the connection stays up
    /// and the next event goes.
    #[tokio::test]
    async fn events_over_the_ceiling_never_reach_the_wire() {
        let data_bytes = |e: &CloudEvent| e.data.as_ref().map_or(0, Vec::len);
        let wire = Arc::new(GatedWire {
            ceiling: Arc::new(Ceiling::new(
                "gated",
                1000,
                CeilingOrigin::Config("maxPacketSize"),
                data_bytes,
            )),
            connections: tokio::sync::Semaphore::new(0),
            sent: Mutex::new(Vec::new()),
            arrived: Notify::new(),
            sends: None,
        });
        let options = ClientOptions::new((), "cluster1", "cluster1-work-agent");
        let client = Client::start(Gated(wire.clone()), &options, Arc::new(|_: &Publisher| {}));
        let publisher = &client.publisher;
        assert_eq!(publisher.ceiling(), 1000);
        assert_eq!(publisher.wire_size(&status("a", 800)), 800);

        let refused = publisher
            .publish(status("a", 1001))
            .expect_err("over the ceiling");
        assert!(
            matches!(
                refused,
                Error::EventTooLarge {
                    size: 1001,
                    limit: 1000,
                    ..
                }
            ),
            "{refused}"
        );
        let big = status("a", 800);
        let big_key = crate::queue::event_key(&big);
        publisher.publish(big).expect("within the ceiling then");
        publisher.publish(status("b", 10)).expect("small");

        // The broker of the next connection takes less.
        wire.ceiling.set(500, CeilingOrigin::Broker);
        let arrived = wire.arrived.notified();
        wire.connections.add_permits(1);
        tokio::time::timeout(Duration::from_secs(5), arrived)
            .await
            .expect("the small event is sent");

        let sent: Vec<String> = wire
            .sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|e| e.ext_string(types::EXT_RESOURCE_ID))
            .collect();
        assert_eq!(sent, vec!["b".to_string()]);
        assert!(!publisher.is_pending(&big_key), "dropped");
        assert_eq!(
            publisher.ceiling_stats(),
            CeilingStats {
                max_event_bytes: 500,
                origin: CeilingOrigin::Broker,
                too_large: 1,
            }
        );
        let stats = publisher.stats();
        assert_eq!((stats.reconnects, stats.dropped), (0, 0), "{stats:?}");
    }

    /// A producer awaiting room runs no further ahead of the wire than asked: with 4 sends on
    /// their way and 6 events waiting, room for fewer than 6 comes only once the wire takes one;
    /// with no connection up, there is room at once (events wait anyway).
    #[tokio::test]
    async fn room_waits_for_the_wire_while_a_connection_is_up() {
        use futures::FutureExt;
        let wire = Arc::new(GatedWire {
            ceiling: Arc::new(Ceiling::unlimited()),
            connections: tokio::sync::Semaphore::new(0),
            sent: Mutex::new(Vec::new()),
            arrived: Notify::new(),
            sends: Some(tokio::sync::Semaphore::new(0)),
        });
        let options = ClientOptions::new((), "cluster1", "cluster1-work-agent");
        let client = Client::start(Gated(wire.clone()), &options, Arc::new(|_: &Publisher| {}));
        let publisher = &client.publisher;
        for i in 0..10 {
            publisher
                .publish(status(&format!("w{i}"), 10))
                .expect("queued");
        }
        assert!(
            publisher.room(6).now_or_never().is_some(),
            "no connection: room at once"
        );

        wire.connections.add_permits(1);
        tokio::time::timeout(Duration::from_secs(5), async {
            while publisher.stats().queue_depth != 10 || publisher.shared.lock().waiting() != 6 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("4 sends on their way, 6 waiting");
        assert!(publisher.stats().ready);
        assert!(publisher.room(7).now_or_never().is_some(), "6 < 7 wait");
        let mut room = Box::pin(publisher.room(6));
        assert!(
            (&mut room).now_or_never().is_none(),
            "6 wait: no room for fewer than 6"
        );
        // The test checked the state it waited for, so the pending poll above is no race.
        wire.sends.as_ref().expect("held sends").add_permits(1);
        tokio::time::timeout(Duration::from_secs(5), room)
            .await
            .expect("room once the wire took one");
        assert_eq!(publisher.shared.lock().waiting(), 5);
    }
}
