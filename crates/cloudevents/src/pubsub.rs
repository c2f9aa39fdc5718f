//! The Google Cloud Pub/Sub transport (`google.pubsub.v1` over gRPC), as sdk-go's
//! `options/v2/pubsub` speaks it to Maestro: the agent publishes its status events to
//! `topics.agentEvents` and its spec resync requests (any `*.resync_request`) to
//! `topics.agentBroadcast`, and pulls `subscriptions.sourceEvents` (the source's spec events and
//! status resync requests for this cluster, which the subscription's filter
//! `attributes.ce-clustername="<cluster>"` selects) and `subscriptions.sourceBroadcast` (status
//! resync requests to every agent). Topics and subscriptions exist beforehand (Maestro's charts
//! create them); the agent creates none.
//!
//! A message is sdk-go's `Encode`: the data as it is, `datacontenttype` in the attribute
//! `Content-Type`, every other attribute and extension in an attribute `ce-<name>` with its
//! canonical string (the MQTT binding's binary mode); no ordering key. A pulled message is
//! acknowledged once the client has handed its event to the agent (sdk-go acks after its handler
//! ran), so one that arrived while the agent was away or slow is delivered again, never lost.
//!
//! Unlike MQTT and gRPC, Pub/Sub keeps what is published to a topic for every subscription, so
//! nothing published while the agent was away is lost, and a spec resync request sent right
//! after the subscriptions were checked cannot miss its answer: the subscribe hook runs as soon
//! as both subscriptions exist.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use googleapis_tonic_google_pubsub_v1::google::pubsub::v1 as pb;
use pb::publisher_client::PublisherClient;
use pb::subscriber_client::SubscriberClient;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::Code;
use tonic::transport::Channel;

use crate::Error;
use crate::client::{ClientOptions, SubscribedHook};
use crate::config::{KeepAlive, PubSubConfig};
use crate::event::CloudEvent;
use crate::grpc::transport::{Dialer, describe, failed};
use crate::mqtt::{self, Message};
use crate::transport::{EventSender, Received, Sent, Transport};
use crate::types::EventType;

/// Options of the Pub/Sub client.
pub type PubSubClientOptions = ClientOptions<PubSubConfig>;

/// The attribute of `datacontenttype` (sdk-go's `contentType`, without the `ce-` prefix).
pub const CONTENT_TYPE: &str = "Content-Type";
/// Google's global endpoint, when the config names none.
pub const DEFAULT_ENDPOINT: &str = "pubsub.googleapis.com:443";
/// The environment variable of Google's client libraries that points them at an emulator:
/// plain HTTP/2, no credentials, and this address unless the config names an endpoint.
pub const EMULATOR_HOST_ENV: &str = "PUBSUB_EMULATOR_HOST";

/// How long dialing and checking a subscription may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one `Publish` may take before the connection counts as broken.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(30);
/// Room for a ~1 MiB bundle (Pub/Sub's own limit is 10 MB per message).
const MIN_MESSAGE_SIZE: usize = 4 * 1024 * 1024;
/// `Publish` calls at a time (of different works), as on gRPC.
const MAX_INFLIGHT: usize = 8;
/// The stream's ack deadline without `receiveSettings` (Google's client: 60 s at first).
const DEFAULT_ACK_DEADLINE: Duration = Duration::from_secs(60);
/// Google's client's defaults for the flow control of a stream.
const DEFAULT_MAX_MESSAGES: i64 = 1000;
const DEFAULT_MAX_BYTES: i64 = 1_000_000_000;
/// Pulled messages waiting for the agent: few, so that they are not held past their deadline.
const PULLED_BUFFER: usize = 16;

/// A CloudEvent as sdk-go's `Encode` writes it into a Pub/Sub message.
pub fn to_message(ev: &CloudEvent) -> pb::PubsubMessage {
    let binary = mqtt::to_binary(ev);
    let mut attributes: BTreeMap<String, String> = binary.user_properties.into_iter().collect();
    if let Some(ct) = binary.content_type {
        attributes.insert(CONTENT_TYPE.to_string(), ct);
    }
    pb::PubsubMessage {
        data: binary.payload,
        attributes,
        ..Default::default()
    }
}

/// A CloudEvent from a Pub/Sub message as sdk-go's `Decode` reads it: `ce-` attributes (empty
/// values ignored), `specversion` 1.0 when absent, `Content-Type` (`application/json` when
/// absent and there is data); other attributes are not the event's.
pub fn from_message(
    data: &[u8],
    attributes: &BTreeMap<String, String>,
) -> Result<CloudEvent, Error> {
    let mut user_properties: Vec<(String, String)> = attributes
        .iter()
        .filter(|(k, v)| k.starts_with(mqtt::binding::PREFIX) && !v.is_empty())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let spec = format!("{}specversion", mqtt::binding::PREFIX);
    if !user_properties.iter().any(|(k, _)| *k == spec) {
        user_properties.push((spec, crate::event::SPEC_VERSION.to_string()));
    }
    let content_type = attributes
        .get(CONTENT_TYPE)
        .filter(|c| !c.is_empty())
        .cloned()
        .or_else(|| (!data.is_empty()).then(|| crate::types::JSON.to_string()));
    mqtt::from_message(&Message {
        content_type,
        user_properties,
        payload: data.to_vec(),
    })
}

/// The topic of `event`: resync requests go to the broadcast topic, as sdk-go sends them.
fn topic_of<'a>(event: &CloudEvent, events: &'a str, broadcast: &'a str) -> &'a str {
    match event.event_type() {
        Ok(EventType::SpecResyncRequest | EventType::StatusResyncRequest) => broadcast,
        _ => events,
    }
}

/// `endpoint` as `host:port`: a URL's scheme and path dropped, port 443 when none is given.
fn endpoint_address(endpoint: &str) -> String {
    let bare = endpoint
        .strip_prefix("https://")
        .or_else(|| endpoint.strip_prefix("http://"))
        .unwrap_or(endpoint)
        .trim_end_matches('/');
    let has_port = bare
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.ends_with(':') && p.parse::<u16>().is_ok());
    if has_port {
        bare.to_string()
    } else {
        format!("{bare}:443")
    }
}

/// The Pub/Sub wire to a source.
pub struct PubSubTransport {
    dialer: Dialer,
    address: String,
    /// `topics.agentEvents`, `topics.agentBroadcast`.
    topics: Arc<(String, String)>,
    /// `subscriptions.sourceEvents`, `subscriptions.sourceBroadcast`.
    subscriptions: [String; 2],
    pull: PullSettings,
    max_message: usize,
    session: Option<Session>,
}

/// The first request of every stream.
#[derive(Clone)]
struct PullSettings {
    ack_deadline_seconds: i32,
    max_messages: i64,
    max_bytes: i64,
    client_id: String,
}

/// What a pulling task hands over.
enum Pulled {
    /// A message of stream `stream`, to acknowledge by `ack_id` once handed over.
    Message {
        stream: usize,
        ack_id: String,
        event: Result<CloudEvent, Error>,
    },
    /// The stream failed: the connection ends.
    Failed(String),
}

/// One connection: the pulling tasks, their messages, and where acknowledgements go.
struct Session {
    pulled: mpsc::Receiver<Pulled>,
    acks: [mpsc::UnboundedSender<String>; 2],
    tasks: Vec<JoinHandle<()>>,
    hook_pending: bool,
    handed_over: Option<(usize, String)>,
}

impl Drop for Session {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Sends `Publish` calls on the current connection.
#[derive(Clone)]
pub struct PubSubSender {
    channel: Channel,
    topics: Arc<(String, String)>,
    max_message: usize,
}

impl PubSubTransport {
    /// The transport for the Pub/Sub config of `opts`. Plain HTTP/2 with `disableTLS` or when
    /// `PUBSUB_EMULATOR_HOST` is set (as Google's client does); TLS 1.3 with the system roots
    /// otherwise. A `credentialsFile` is refused: this agent does not sign Google's tokens.
    pub fn new(opts: &PubSubClientOptions) -> Result<Self, Error> {
        Self::with_emulator(opts, std::env::var(EMULATOR_HOST_ENV).ok())
    }

    fn with_emulator(opts: &PubSubClientOptions, emulator: Option<String>) -> Result<Self, Error> {
        if opts.cluster.is_empty() {
            return Err(Error::config("--spoke-cluster-name", "required"));
        }
        let cfg = &opts.config;
        let emulator = emulator.filter(|e| !e.is_empty());
        if let Some(file) = &cfg.credentials_file
            && emulator.is_none()
        {
            return Err(Error::config(
                "credentialsFile",
                format!(
                    "{}: service account credentials are not supported by this agent; reach \
                     Pub/Sub through an emulator or a test server (disableTLS, or {EMULATOR_HOST_ENV})",
                    file.display()
                ),
            ));
        }
        let endpoint = match (&emulator, cfg.endpoint.is_empty()) {
            (Some(host), true) => host.clone(),
            (_, false) => cfg.endpoint.clone(),
            (None, true) => DEFAULT_ENDPOINT.to_string(),
        };
        let address = endpoint_address(&endpoint);
        let tls = if cfg.disable_tls || emulator.is_some() {
            None
        } else {
            Some(crate::tls::grpc_client_tls(&Default::default(), opts.cert_refresh)?.0)
        };
        let ka = &cfg.keep_alive;
        let keep_alive = KeepAlive {
            enable: !ka.time.is_zero(),
            time: ka.time,
            timeout: ka.timeout,
            permit_without_stream: ka.permit_without_stream,
        };
        let receive = &cfg.receive;
        let ack_deadline = receive
            .max_duration_per_ack_extension
            .unwrap_or(DEFAULT_ACK_DEADLINE)
            .max(receive.min_duration_per_ack_extension.unwrap_or_default())
            .clamp(Duration::from_secs(10), Duration::from_secs(600));
        Ok(Self {
            dialer: Dialer::new("endpoint", &address, &keep_alive, tls)?,
            address,
            topics: Arc::new((
                cfg.topics.agent_events.clone(),
                cfg.topics.agent_broadcast.clone(),
            )),
            subscriptions: [
                cfg.subscriptions.source_events.clone(),
                cfg.subscriptions.source_broadcast.clone(),
            ],
            pull: PullSettings {
                ack_deadline_seconds: i32::try_from(ack_deadline.as_secs()).unwrap_or(600),
                max_messages: receive
                    .max_outstanding_messages
                    .unwrap_or(DEFAULT_MAX_MESSAGES),
                max_bytes: receive.max_outstanding_bytes.unwrap_or(DEFAULT_MAX_BYTES),
                client_id: opts.cloudevents_client_id.clone(),
            },
            max_message: MIN_MESSAGE_SIZE.max(opts.max_payload.saturating_mul(2)),
            session: None,
        })
    }

    /// Checks that a subscription exists (the agent creates none).
    async fn check_subscription(&self, channel: &Channel, name: &str) -> Result<(), String> {
        let mut client = SubscriberClient::new(channel.clone());
        let request = pb::GetSubscriptionRequest {
            subscription: name.to_string(),
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, client.get_subscription(request)).await {
            Err(_) => Err(format!("subscription {name}: no answer in time")),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(status)) if status.code() == Code::NotFound => Err(format!(
                "subscription {name} does not exist; create it on topic sourceevents (filter \
                 attributes.ce-clustername=\"<cluster>\") or sourcebroadcast, as Maestro's agent chart does"
            )),
            Ok(Err(status)) => Err(format!("subscription {name}: {}", describe(&status))),
        }
    }
}

/// Pulls `subscription` on one stream, handing over what arrives, until the stream fails.
async fn pull(
    stream: usize,
    channel: Channel,
    subscription: String,
    settings: PullSettings,
    max_message: usize,
    acks: mpsc::UnboundedReceiver<String>,
    out: mpsc::Sender<Pulled>,
) {
    let first = pb::StreamingPullRequest {
        subscription: subscription.clone(),
        stream_ack_deadline_seconds: settings.ack_deadline_seconds,
        client_id: settings.client_id,
        max_outstanding_messages: settings.max_messages,
        max_outstanding_bytes: settings.max_bytes,
        ..Default::default()
    };
    // Acknowledgements go on the same stream, as many as are due in one request.
    let acks = futures::stream::unfold(acks, |mut rx| async move {
        let first = rx.recv().await?;
        let mut ack_ids = vec![first];
        while let Ok(more) = rx.try_recv() {
            ack_ids.push(more);
        }
        let request = pb::StreamingPullRequest {
            ack_ids,
            ..Default::default()
        };
        Some((request, rx))
    });
    let requests = futures::StreamExt::chain(futures::stream::iter([first]), acks);
    let mut client = SubscriberClient::new(channel).max_decoding_message_size(max_message);
    let why = match client.streaming_pull(requests).await {
        Err(status) => describe(&status),
        Ok(response) => {
            let mut messages = response.into_inner();
            loop {
                match messages.message().await {
                    Ok(Some(batch)) => {
                        for received in batch.received_messages {
                            let event = received
                                .message
                                .as_ref()
                                .ok_or_else(|| {
                                    Error::Binding("a pulled message without message".into())
                                })
                                .and_then(|m| from_message(&m.data, &m.attributes));
                            let pulled = Pulled::Message {
                                stream,
                                ack_id: received.ack_id,
                                event,
                            };
                            if out.send(pulled).await.is_err() {
                                return;
                            }
                        }
                    }
                    Ok(None) => break "the server ended the stream".to_string(),
                    Err(status) => break describe(&status),
                }
            }
        }
    };
    let _ = out
        .send(Pulled::Failed(format!("pull {subscription}: {why}")))
        .await;
}

impl Transport for PubSubTransport {
    type Sender = PubSubSender;

    fn name(&self) -> &'static str {
        "Pub/Sub"
    }

    fn max_inflight(&self) -> usize {
        MAX_INFLIGHT
    }

    async fn connect(&mut self) -> Result<PubSubSender, String> {
        self.session = None;
        let channel = self
            .dialer
            .connect()
            .await
            .map_err(|e| format!("dial {}: {e}", self.address))?;
        for name in &self.subscriptions {
            self.check_subscription(&channel, name).await?;
        }
        let (out, pulled) = mpsc::channel(PULLED_BUFFER);
        let mut tasks = Vec::new();
        let acks = [0, 1].map(|stream| {
            let (ack_tx, ack_rx) = mpsc::unbounded_channel();
            tasks.push(tokio::spawn(pull(
                stream,
                channel.clone(),
                self.subscriptions[stream].clone(),
                self.pull.clone(),
                self.max_message,
                ack_rx,
                out.clone(),
            )));
            ack_tx
        });
        tracing::info!(
            endpoint = %self.address,
            subscriptions = ?self.subscriptions,
            "pulling the Pub/Sub subscriptions"
        );
        self.session = Some(Session {
            pulled,
            acks,
            tasks,
            hook_pending: true,
            handed_over: None,
        });
        Ok(PubSubSender {
            channel,
            topics: self.topics.clone(),
            max_message: self.max_message,
        })
    }

    async fn next(&mut self) -> Result<Received, String> {
        let Some(s) = self.session.as_mut() else {
            return Err("not connected".into());
        };
        // The client asks for the next thing once it handed the last one to the agent.
        if let Some((stream, ack_id)) = s.handed_over.take() {
            let _ = s.acks[stream].send(ack_id);
        }
        if std::mem::take(&mut s.hook_pending) {
            return Ok(Received::Subscribed);
        }
        match s.pulled.recv().await {
            Some(Pulled::Message {
                stream,
                ack_id,
                event,
            }) => {
                // A message that is no CloudEvent is acknowledged too: sending it again cannot help.
                s.handed_over = Some((stream, ack_id));
                Ok(match event {
                    Ok(ev) => Received::Event(ev),
                    Err(e) => Received::Malformed(e),
                })
            }
            Some(Pulled::Failed(why)) => Err(why),
            None => Err("the pulling tasks ended".into()),
        }
    }

    async fn close(&mut self) {
        self.session = None;
    }
}

impl EventSender for PubSubSender {
    async fn send(&self, event: CloudEvent) -> Sent {
        let topic = topic_of(&event, &self.topics.0, &self.topics.1).to_string();
        let request = pb::PublishRequest {
            topic,
            messages: vec![to_message(&event)],
        };
        let mut client =
            PublisherClient::new(self.channel.clone()).max_encoding_message_size(self.max_message);
        match tokio::time::timeout(PUBLISH_TIMEOUT, client.publish(request)).await {
            Err(_) => Sent::Lost("publish: no answer in time".into()),
            Ok(Ok(_)) => Sent::Taken,
            Ok(Err(status)) => failed(&status),
        }
    }
}

/// Starts the agent's client on the Pub/Sub source of `opts`.
pub fn start(
    opts: &PubSubClientOptions,
    on_subscribed: SubscribedHook,
) -> Result<crate::client::Client, Error> {
    Ok(crate::client::Client::start(
        PubSubTransport::new(opts)?,
        opts,
        on_subscribed,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PubSubConfig;
    use crate::event::ExtValue;

    /// A status event as the agent sends it.
    fn status() -> CloudEvent {
        let mut ev = CloudEvent::new(EventType::StatusUpdate, "cluster1-work-agent");
        ev.id = "0f3c".into();
        ev.time = None;
        ev.datacontenttype = Some("application/json".into());
        ev.data = Some(br#"{"conditions":[]}"#.to_vec());
        ev.with_ext("resourceid", ExtValue::String("4717d8e0".into()))
            .with_ext("resourceversion", ExtValue::Integer(3))
            .with_ext("clustername", ExtValue::String("cluster1".into()))
            .with_ext("originalsource", ExtValue::String("maestro".into()))
    }

    /// The attributes sdk-go's `Encode` gives this event: `Content-Type`, `ce-` names,
    /// canonical strings, no ordering key.
    #[test]
    fn messages_as_sdk_go_encodes_them() {
        let ev = status();
        let m = to_message(&ev);
        let expected: BTreeMap<String, String> = [
            ("Content-Type", "application/json"),
            ("ce-clustername", "cluster1"),
            ("ce-id", "0f3c"),
            ("ce-originalsource", "maestro"),
            ("ce-resourceid", "4717d8e0"),
            ("ce-resourceversion", "3"),
            ("ce-source", "cluster1-work-agent"),
            ("ce-specversion", "1.0"),
            ("ce-type", &EventType::StatusUpdate.as_type()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(m.attributes, expected);
        assert_eq!(m.data, br#"{"conditions":[]}"#.to_vec());
        assert!(m.ordering_key.is_empty());
        let back = from_message(&m.data, &m.attributes).expect("decodes");
        assert_eq!(back.id, ev.id);
        assert_eq!(back.type_, ev.type_);
        assert_eq!(back.datacontenttype, ev.datacontenttype);
        assert_eq!(back.data, ev.data);
        assert_eq!(
            back.extensions.get("resourceid"),
            Some(&ExtValue::String("4717d8e0".into()))
        );
    }

    /// sdk-go's `Decode`: `specversion` defaults to 1.0, `Content-Type` to JSON, empty values
    /// and attributes without the prefix are not the event's; id, source and type are required.
    #[test]
    fn messages_as_sdk_go_decodes_them() {
        let attrs = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let spec_type = EventType::SpecCreate.as_type();
        let spec = spec_type.as_str();
        let ev = from_message(
            b"{}",
            &attrs(&[
                ("ce-id", "1"),
                ("ce-source", "maestro"),
                ("ce-type", spec),
                ("ce-subject", ""),
                ("googclient_schemaencoding", "JSON"),
                ("ce-clustername", "cluster1"),
            ]),
        )
        .expect("decodes");
        assert_eq!(ev.datacontenttype.as_deref(), Some("application/json"));
        assert_eq!(ev.subject, None);
        assert_eq!(ev.extensions.len(), 1, "{:?}", ev.extensions);
        let no_data = from_message(
            b"",
            &attrs(&[("ce-id", "1"), ("ce-source", "m"), ("ce-type", spec)]),
        )
        .expect("a deletion without data");
        assert_eq!((no_data.data, no_data.datacontenttype), (None, None));
        for missing in ["ce-id", "ce-source", "ce-type"] {
            let mut a = attrs(&[("ce-id", "1"), ("ce-source", "m"), ("ce-type", spec)]);
            a.remove(missing);
            assert!(from_message(b"{}", &a).is_err(), "{missing}");
        }
        let wrong = attrs(&[
            ("ce-id", "1"),
            ("ce-source", "m"),
            ("ce-type", spec),
            ("ce-specversion", "0.3"),
        ]);
        assert!(from_message(b"{}", &wrong).is_err());
    }

    #[test]
    fn resync_requests_go_to_the_broadcast_topic() {
        let resync = CloudEvent::new(EventType::SpecResyncRequest, "a");
        assert_eq!(topic_of(&resync, "events", "broadcast"), "broadcast");
        assert_eq!(topic_of(&status(), "events", "broadcast"), "events");
    }

    #[test]
    fn endpoints_as_google_clients_take_them() {
        assert_eq!(endpoint_address("localhost:8085"), "localhost:8085");
        assert_eq!(
            endpoint_address("https://us-west1-pubsub.googleapis.com"),
            "us-west1-pubsub.googleapis.com:443"
        );
        assert_eq!(
            endpoint_address("pubsub.googleapis.com"),
            "pubsub.googleapis.com:443"
        );
        assert_eq!(endpoint_address("[::1]:8085"), "[::1]:8085");
    }

    const CONFIG: &str = "projectID: maestro-test\ntopics:\n  agentEvents: projects/maestro-test/topics/agentevents\n  agentBroadcast: projects/maestro-test/topics/agentbroadcast\nsubscriptions:\n  sourceEvents: projects/maestro-test/subscriptions/sourceevents-c1\n  sourceBroadcast: projects/maestro-test/subscriptions/sourcebroadcast-c1\n";

    fn options(extra: &str) -> PubSubClientOptions {
        let config = PubSubConfig::parse(&format!("{CONFIG}{extra}")).expect("config");
        ClientOptions::new(config, "c1", "c1-work-agent")
    }

    #[test]
    fn the_emulator_variable_and_credentials() {
        let t = PubSubTransport::with_emulator(&options(""), None).expect("global endpoint");
        assert_eq!(t.address, DEFAULT_ENDPOINT);
        let t = PubSubTransport::with_emulator(&options(""), Some("127.0.0.1:8085".into()))
            .expect("emulator");
        assert_eq!(t.address, "127.0.0.1:8085");
        let t = PubSubTransport::with_emulator(
            &options("endpoint: localhost:9\n"),
            Some("127.0.0.1:8085".into()),
        )
        .expect("the config's endpoint wins");
        assert_eq!(t.address, "localhost:9");
        let e = PubSubTransport::with_emulator(&options("credentialsFile: /k.json\n"), None)
            .err()
            .expect("no credentials");
        assert!(e.to_string().contains("credentialsFile"), "{e}");
        assert_eq!(t.pull.ack_deadline_seconds, 60);
        assert_eq!(t.pull.max_messages, DEFAULT_MAX_MESSAGES);
    }
}
