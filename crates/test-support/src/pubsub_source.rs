//! The Pub/Sub front end of the Maestro-shaped source ([`crate::maestro`]): Maestro over Google
//! Pub/Sub, on Google's own fake server (`pstest`, wrapped by `e2e/pubsub-fake`; the scripts
//! build it and `e2e/scripts/pubsub-fake.sh run ...` exports its path as [`FAKE_BIN_ENV`]).
//!
//! As Maestro's source does, it publishes spec events to the topic `sourceevents` and status
//! resync requests to `sourcebroadcast`, and pulls `agentevents-<source>` (filtered on
//! `ce-originalsource`) and `agentbroadcast-<source>`; spec resync requests are answered as
//! sdk-go's source client does ([`ResyncAnswer::SourceClient`]). It also creates each consumer's
//! subscriptions, as Maestro's agent chart does (`sourceevents-<consumer>` filtered on
//! `ce-clustername`, `sourcebroadcast-<consumer>`).
//!
//! The fake keeps everything in memory: [`PubSubFake::restart`] brings back an empty server on
//! the same port, with the topics and the source's subscriptions the wrapper creates, and
//! [`PubSubSource::start_hub`] creates the consumers' subscriptions again.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::ops::Deref;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cloudevents::CloudEvent;
use cloudevents::pubsub::{from_message, to_message};
use cloudevents::types::EventType;
use googleapis_tonic_google_pubsub_v1::google::pubsub::v1 as pb;
use pb::publisher_client::PublisherClient;
use pb::subscriber_client::SubscriberClient;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

pub use crate::maestro::Error;
use crate::maestro::{Maestro, ResyncAnswer, Wire};
use crate::mqtt_source::check_name;

/// Calls retried while a restarted fake server's channel connects anew (100 ms apart).
const CONNECT_RETRIES: u32 = 50;
/// The environment variable with the path of the built fake server.
pub const FAKE_BIN_ENV: &str = "PUBSUB_FAKE_BIN";
/// The project of the fake's topics and subscriptions (Maestro's test project).
pub const PROJECT: &str = "maestro-test";
/// Pause before a failed publish or pull is tried again.
const RETRY: Duration = Duration::from_millis(100);
/// How long the fake may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(20);

fn topic(name: &str) -> String {
    format!("projects/{PROJECT}/topics/{name}")
}

fn subscription(name: &str) -> String {
    format!("projects/{PROJECT}/subscriptions/{name}")
}

/// The agent's config file for `consumer` on the fake at `address`, as Maestro's agent chart
/// renders it (its Secret `maestro-agent-pubsub`, key `config.yaml`) for the emulator.
pub fn agent_config(address: &str, consumer: &str) -> String {
    format!(
        "projectID: {PROJECT}\nendpoint: {address}\ndisableTLS: true\ntopics:\n  agentEvents: {}\n  agentBroadcast: {}\nsubscriptions:\n  sourceEvents: {}\n  sourceBroadcast: {}\n",
        topic("agentevents"),
        topic("agentbroadcast"),
        subscription(&format!("sourceevents-{consumer}")),
        subscription(&format!("sourcebroadcast-{consumer}")),
    )
}

/// A running fake Pub/Sub server on 127.0.0.1; killed when dropped.
pub struct PubSubFake {
    port: u16,
    source_id: String,
    child: Option<Child>,
}

impl PubSubFake {
    /// Starts the fake (the binary of [`FAKE_BIN_ENV`]) on a free port, with the topics and
    /// the subscriptions of source `source_id`.
    pub fn start(source_id: &str) -> Result<Self, Error> {
        let mut fake = Self {
            port: crate::free_port(),
            source_id: source_id.to_string(),
            child: None,
        };
        fake.restart()?;
        Ok(fake)
    }

    /// `127.0.0.1:<port>`, the agent config's `endpoint`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stops the server: every stream and call fails, everything it held is gone.
    pub fn stop(&mut self) {
        crate::mosquitto::stop_child(&mut self.child);
    }

    /// (Re)starts an empty server on the same port and waits until it listens.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.stop();
        let bin = std::env::var_os(FAKE_BIN_ENV).map(PathBuf::from).ok_or_else(|| {
            Error::PubSub(format!(
                "{FAKE_BIN_ENV} is not set: run under `e2e/scripts/pubsub-fake.sh run ...`, which builds the fake Pub/Sub server"
            ))
        })?;
        let mut child = Command::new(&bin)
            .arg(format!("--address={}", self.address()))
            .arg(format!("--project={PROJECT}"))
            .arg(format!("--source={}", self.source_id))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::PubSub(format!("starting {}: {e}", bin.display())))?;
        // The wrapper prints its address once the topics and subscriptions exist.
        let stdout = child.stdout.take();
        self.child = Some(child);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            if let Some(out) = stdout {
                let _ = BufReader::new(out).read_line(&mut line);
            }
            let _ = tx.send(line);
        });
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(line) if line.trim() == self.address() => Ok(()),
            Ok(line) => Err(Error::PubSub(format!(
                "the fake Pub/Sub server did not start on {} (it said {line:?})",
                self.address()
            ))),
            Err(_) => Err(Error::PubSub(format!(
                "the fake Pub/Sub server did not start within {START_TIMEOUT:?}"
            ))),
        }
    }
}

impl Drop for PubSubFake {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An event on its way to a topic.
struct Outgoing {
    topic: String,
    message: pb::PubsubMessage,
}

/// The publishing side: a queue to the publishing task, which tries each message until the
/// server takes it (Google's publisher retries too).
struct PubSubWire {
    tx: mpsc::UnboundedSender<Outgoing>,
}

impl Wire for PubSubWire {
    fn send(&self, _consumer: &str, ev: &CloudEvent) -> Result<(), Error> {
        // The subscription's filter on `ce-clustername` routes it; resync requests go to all.
        let name = match ev.event_type() {
            Ok(EventType::StatusResyncRequest | EventType::SpecResyncRequest) => "sourcebroadcast",
            _ => "sourceevents",
        };
        self.tx
            .send(Outgoing {
                topic: topic(name),
                message: to_message(ev),
            })
            .map_err(|_| Error::Closed)
    }

    fn check_consumer(&self, consumer: &str) -> Result<(), Error> {
        check_name(consumer)
    }
}

/// A Maestro-shaped source on a fake Pub/Sub server it starts; its tasks and the server stop
/// when it is dropped. It is the source ([`Maestro`], through `Deref`) plus its server.
pub struct PubSubSource {
    maestro: Arc<Maestro>,
    fake: PubSubFake,
    channel: Channel,
    /// The publishing task's queue (also the wire's).
    tx: mpsc::UnboundedSender<Outgoing>,
    consumers: Mutex<BTreeSet<String>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Deref for PubSubSource {
    type Target = Maestro;

    fn deref(&self) -> &Maestro {
        &self.maestro
    }
}

impl Drop for PubSubSource {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl PubSubSource {
    /// Starts a fake server and the source `source_id` on it (Maestro's is `maestro`).
    pub async fn start(source_id: &str) -> Result<Self, Error> {
        let fake = PubSubFake::start(source_id)?;
        let channel = Endpoint::from_shared(format!("http://{}", fake.address()))
            .map_err(|e| Error::PubSub(e.to_string()))?
            .connect_lazy();
        let (tx, rx) = mpsc::unbounded_channel();
        let maestro = Arc::new(Maestro::new(
            source_id,
            ResyncAnswer::SourceClient,
            Arc::new(PubSubWire { tx: tx.clone() }),
        ));
        let mut tasks = vec![tokio::spawn(publish_loop(channel.clone(), rx))];
        for name in ["agentevents", "agentbroadcast"] {
            tasks.push(tokio::spawn(pull_loop(
                channel.clone(),
                subscription(&format!("{name}-{source_id}")),
                maestro.clone(),
            )));
        }
        Ok(Self {
            maestro,
            fake,
            channel,
            tx,
            consumers: Mutex::default(),
            tasks,
        })
    }

    /// The server's address (the agent config's `endpoint`).
    pub fn address(&self) -> String {
        self.fake.address()
    }

    /// Creates the subscriptions of `consumer`, as Maestro's agent chart does before the agent
    /// starts; they are created again after [`PubSubSource::start_hub`].
    pub async fn add_consumer(&self, consumer: &str) -> Result<(), Error> {
        check_name(consumer)?;
        self.consumers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(consumer.to_string());
        self.create_subscriptions(consumer).await
    }

    async fn create_subscriptions(&self, consumer: &str) -> Result<(), Error> {
        let mut client = SubscriberClient::new(self.channel.clone());
        for (name, filter) in [
            (
                "sourceevents",
                format!("attributes.ce-clustername=\"{consumer}\""),
            ),
            ("sourcebroadcast", String::new()),
        ] {
            let request = pb::Subscription {
                name: subscription(&format!("{name}-{consumer}")),
                topic: topic(name),
                filter,
                ack_deadline_seconds: 10,
                ..Default::default()
            };
            // The channel's connection to a server stopped a moment ago fails the first call
            // (a broken pipe); the channel connects anew on the next.
            let mut attempts = 0;
            loop {
                match client.create_subscription(request.clone()).await {
                    Ok(_) => break,
                    Err(s)
                        if attempts < CONNECT_RETRIES
                            && matches!(
                                s.code(),
                                tonic::Code::Unknown | tonic::Code::Unavailable
                            ) =>
                    {
                        attempts += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                    Err(s) => {
                        return Err(Error::PubSub(format!(
                            "create subscription {name}-{consumer}: {s}"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Stops the fake server; the store stays.
    pub fn stop_hub(&mut self) {
        self.fake.stop();
    }

    /// Starts an empty fake server on the same port and creates the consumers' subscriptions
    /// again (the wrapper creates the topics and the source's subscriptions).
    pub async fn start_hub(&mut self) -> Result<(), Error> {
        self.fake.restart()?;
        let consumers: Vec<String> = self
            .consumers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect();
        for consumer in consumers {
            self.create_subscriptions(&consumer).await?;
        }
        Ok(())
    }

    /// Publishes a raw message to the topic `sourceevents` (malformed or wrong-cluster tests);
    /// it is not recorded in [`Maestro::sent`].
    pub fn publish_raw(
        &self,
        data: Vec<u8>,
        attributes: std::collections::BTreeMap<String, String>,
    ) -> Result<(), Error> {
        self.tx
            .send(Outgoing {
                topic: topic("sourceevents"),
                message: pb::PubsubMessage {
                    data,
                    attributes,
                    ..Default::default()
                },
            })
            .map_err(|_| Error::Closed)
    }

    /// Polls `cond` until it holds; after `timeout` the error describes the counters and the
    /// last status decisions.
    pub async fn wait_until(
        &self,
        cond: impl Fn(&PubSubSource) -> bool,
        timeout: Duration,
    ) -> Result<(), String> {
        let address = self.address();
        self.maestro
            .wait_for(
                || cond(self),
                timeout,
                || format!("fake Pub/Sub at {address}"),
            )
            .await
    }
}

/// Publishes what the source queues, in order, each until the server takes it.
async fn publish_loop(channel: Channel, mut rx: mpsc::UnboundedReceiver<Outgoing>) {
    let mut client = PublisherClient::new(channel);
    while let Some(o) = rx.recv().await {
        let request = pb::PublishRequest {
            topic: o.topic,
            messages: vec![o.message],
        };
        while client.publish(request.clone()).await.is_err() {
            tokio::time::sleep(RETRY).await;
        }
    }
}

/// Pulls `subscription` for the source, acknowledging each message once the source took it;
/// opens the stream again whenever it fails (the server restarted).
async fn pull_loop(channel: Channel, subscription: String, maestro: Arc<Maestro>) {
    let mut client = SubscriberClient::new(channel);
    loop {
        let (ack_tx, ack_rx) = mpsc::unbounded_channel::<String>();
        let first = pb::StreamingPullRequest {
            subscription: subscription.clone(),
            stream_ack_deadline_seconds: 10,
            ..Default::default()
        };
        let acks = futures::stream::unfold(ack_rx, |mut rx| async move {
            let id = rx.recv().await?;
            let request = pb::StreamingPullRequest {
                ack_ids: vec![id],
                ..Default::default()
            };
            Some((request, rx))
        });
        let requests = futures::StreamExt::chain(futures::stream::iter([first]), acks);
        if let Ok(response) = client.streaming_pull(requests).await {
            maestro.count_subscription();
            let mut stream = response.into_inner();
            while let Ok(Some(batch)) = stream.message().await {
                for received in batch.received_messages {
                    let decoded = received
                        .message
                        .as_ref()
                        .ok_or_else(|| "a pulled message without message".to_string())
                        .and_then(|m| {
                            from_message(&m.data, &m.attributes).map_err(|e| e.to_string())
                        });
                    // Nothing to answer on Pub/Sub: what the source took shows in its records.
                    let _ = maestro.receive(decoded, |_| false);
                    let _ = ack_tx.send(received.ack_id);
                }
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}
