//! The seam between the one CloudEvents client ([`crate::client`]) and a wire (MQTT, gRPC): a
//! transport connects and subscribes, hands over what the source sends, and sends one event at a
//! time, saying what became of it. Everything else (the latest-per-work queue, retries, the events
//! nobody heard, the subscribe hook, reconnects, certificate rotation, stats) is the client's, as
//! in sdk-go, where one base client drives an `EventTransport`.

use std::future::Future;
use std::sync::Arc;

use crate::Error;
use crate::ceiling::Ceiling;
use crate::event::CloudEvent;
use crate::tls::ReloadingClientCert;

/// What the source's side of a connection produced.
#[derive(Debug)]
pub enum Received {
    /// An event from the source (not yet decoded).
    Event(CloudEvent),
    /// A message that is no CloudEvent on this wire (counted as rejected, logged by the agent).
    Malformed(Error),
    /// The subscription is in place (again): the client runs its subscribe hook (the spec resync
    /// request). A transport may say so more than once per connection when it cannot be sure the
    /// first answer reached it.
    Subscribed,
}

/// What became of one event handed to [`EventSender::send`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// The source took it.
    Taken,
    /// The broker took it but no source was subscribed (MQTT 5's "no matching subscribers"):
    /// held and sent again once a source listens.
    NobodyListens,
    /// The source got it but could not apply it now: tried again after a growing delay.
    Refused(String),
    /// The source called it malformed: dropped, as sending it again cannot help.
    Malformed(String),
    /// The connection failed on the way: queued again, and the connection is made anew.
    Lost(String),
    /// Over the wire's ceiling now (why): dropped and counted, as sending it would fail the
    /// connection or be refused every time. The connection stays up.
    TooLarge(String),
}

/// Sends events on one connection; cheap to clone, one clone per event on its way.
pub trait EventSender: Clone + Send + Sync + 'static {
    /// Sends `event` and waits for what became of it.
    fn send(&self, event: CloudEvent) -> impl Future<Output = Sent> + Send;
}

/// One wire to a source, driven by [`crate::client::Client`].
pub trait Transport: Send + 'static {
    /// Sends on the connection [`Transport::connect`] made.
    type Sender: EventSender;

    /// The wire's name in logs ("MQTT", "gRPC").
    fn name(&self) -> &'static str;

    /// Events sent at a time (each of another work).
    fn max_inflight(&self) -> usize;

    /// Refuses, when it is queued, an event this wire cannot carry.
    fn check(_event: &CloudEvent) -> Result<(), Error>
    where
        Self: Sized,
    {
        Ok(())
    }

    /// The wire's ceiling, which the transport keeps current (an MQTT broker names its own at
    /// each connect); the client refuses events over it. Called once, when the client starts.
    fn ceiling(&self) -> Arc<Ceiling> {
        Arc::new(Ceiling::unlimited())
    }

    /// The client certificate the connection presents, when it is read again from files (the
    /// client reconnects when it changed).
    fn client_cert(&self) -> Option<Arc<ReloadingClientCert>> {
        None
    }

    /// Connects and subscribes; the error says why not, for the log (the client backs off).
    fn connect(&mut self) -> impl Future<Output = Result<Self::Sender, String>> + Send;

    /// The next thing the connection produced; an error ends the connection. Cancelled only
    /// when the client ends the connection anyway.
    fn next(&mut self) -> impl Future<Output = Result<Received, String>> + Send;

    /// Ends the connection (a rotated certificate, a failed send); the next
    /// [`Transport::connect`] makes a new one.
    fn close(&mut self) -> impl Future<Output = ()> + Send;
}
