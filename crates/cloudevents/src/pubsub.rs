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
//! A publish stays within Pub/Sub's limits: the encoded publish request within 10 MB (or
//! `maxMessageSize` of the config, when lower), at most 100 attributes, keys of at most 256
//! bytes and values of at most 1,024. A work's `metadata` over that is sent reduced to what a
//! source reads back (name, namespace, uid, resourceVersion, generation, and the creation and
//! deletion timestamps when they fit); any other attribute over it refuses the event.
//!
//! Unlike MQTT and gRPC, Pub/Sub keeps what is published to a topic for every subscription, so
//! nothing published while the agent was away is lost, and a spec resync request sent right
//! after the subscriptions were checked cannot miss its answer: the subscribe hook runs as soon
//! as both subscriptions exist.

use std::borrow::Cow;
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
use crate::ceiling::{Ceiling, CeilingOrigin, ReducedMetadataLog, fit_attribute_values};
use crate::client::{ClientOptions, SubscribedHook};
use crate::config::{KeepAlive, PUBSUB_MAX_MESSAGE, PubSubConfig};
use crate::event::CloudEvent;
use crate::grpc::binding::FIELD_KEY;
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
/// Pub/Sub's limits on a message's attributes: how many, a key's bytes, a value's bytes.
pub const MAX_ATTRIBUTES: usize = 100;
/// The longest attribute key Pub/Sub takes, in bytes.
pub const MAX_ATTRIBUTE_KEY: usize = 256;
/// The longest attribute value Pub/Sub takes, in bytes.
pub const MAX_ATTRIBUTE_VALUE: usize = 1024;

/// A CloudEvent as sdk-go's `Encode` writes it into a Pub/Sub message.
pub fn to_message(ev: &CloudEvent) -> pb::PubsubMessage {
    pb::PubsubMessage {
        data: ev.data.clone().unwrap_or_default(),
        attributes: attributes(ev),
        ..Default::default()
    }
}

/// The attributes of `ev`'s message: `ce-<name>` for each attribute, `Content-Type`.
fn attributes(ev: &CloudEvent) -> BTreeMap<String, String> {
    let mut attributes: BTreeMap<String, String> = mqtt::binding::binary_attributes(ev)
        .into_iter()
        .map(|(name, value)| {
            (
                format!("{}{name}", mqtt::binding::PREFIX),
                value.into_owned(),
            )
        })
        .collect();
    if let Some(ct) = &ev.datacontenttype {
        attributes.insert(CONTENT_TYPE.to_string(), ct.clone());
    }
    attributes
}

/// `ev` as it goes on Pub/Sub: a `metadata` attribute over Pub/Sub's value limit reduced; an
/// event with too many attributes, too long a key, or any other value over the limit refused.
pub fn wire_event(ev: &CloudEvent) -> Result<Cow<'_, CloudEvent>, Error> {
    let names = mqtt::binding::binary_attributes(ev);
    let count = names.len() + usize::from(ev.datacontenttype.is_some());
    if count > MAX_ATTRIBUTES {
        return Err(Error::Binding(format!(
            "{count} attributes; Pub/Sub takes at most {MAX_ATTRIBUTES} in a message"
        )));
    }
    if let Some((name, _)) = names
        .iter()
        .find(|(name, _)| mqtt::binding::PREFIX.len() + name.len() > MAX_ATTRIBUTE_KEY)
    {
        return Err(Error::bad_attr(
            name.as_ref(),
            format!("Pub/Sub takes attribute keys of at most {MAX_ATTRIBUTE_KEY} bytes"),
        ));
    }
    fit_attribute_values(ev, MAX_ATTRIBUTE_VALUE, "Pub/Sub")
}

/// The size of the encoded publish request of `ev` on `topic`, which Pub/Sub holds to 10 MB
/// (Google's client library checks a message against the same figure), computed without
/// copying the data. `ev` as it goes ([`wire_event`]).
fn request_size(ev: &CloudEvent, topic: &str) -> usize {
    use prost::Message as _;
    let without_data = pb::PubsubMessage {
        attributes: attributes(ev),
        ..Default::default()
    };
    // Empty data, like an empty topic, is not written at all (proto3).
    let field = |len: usize| match len {
        0 => 0,
        n => FIELD_KEY + prost::length_delimiter_len(n) + n,
    };
    let message = without_data.encoded_len() + field(ev.data.as_ref().map_or(0, Vec::len));
    field(topic.len()) + FIELD_KEY + prost::length_delimiter_len(message) + message
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

/// Google's scopes for Pub/Sub, as its Go client asks for them (`DefaultAuthScopes`).
const SCOPES: &str =
    "https://www.googleapis.com/auth/cloud-platform https://www.googleapis.com/auth/pubsub";
/// How long a signed token is valid (Google's auth library: one hour).
const TOKEN_LIFETIME: Duration = Duration::from_secs(3600);
/// A token is signed anew this long before it expires.
const TOKEN_MARGIN: Duration = Duration::from_secs(300);

/// The keys of a service account key file that signing needs.
#[derive(serde::Deserialize)]
struct ServiceAccountFile {
    #[serde(rename = "type")]
    kind: String,
    client_email: String,
    private_key: String,
    #[serde(default)]
    private_key_id: String,
}

/// Google's self-signed JWTs for a service account (`credentialsFile`), as its Go auth library
/// makes them for Pub/Sub: RS256, `kid` the key id, `iss` and `sub` the account, Pub/Sub's scopes,
/// one hour; sent as a bearer token on every call, without a token exchange.
pub struct ServiceAccount {
    email: String,
    key_id: String,
    key: ring::signature::RsaKeyPair,
    current: std::sync::Mutex<Option<(std::time::SystemTime, Bearer)>>,
}

/// An `authorization` header value.
type Bearer = tonic::metadata::MetadataValue<tonic::metadata::Ascii>;

impl ServiceAccount {
    /// Reads a service account key file (JSON, `type: service_account`).
    pub fn from_file(path: &std::path::Path) -> Result<Self, Error> {
        let key = "credentialsFile";
        let text = std::fs::read(path)
            .map_err(|e| Error::config(key, format!("{}: {e}", path.display())))?;
        let file: ServiceAccountFile = serde_json::from_slice(&text).map_err(|e| {
            Error::config(
                key,
                format!("{}: not a service account key file: {e}", path.display()),
            )
        })?;
        if file.kind != "service_account" {
            return Err(Error::config(
                key,
                format!(
                    "{}: type {:?}: only service account keys are supported",
                    path.display(),
                    file.kind
                ),
            ));
        }
        let der = pem_body(&file.private_key, "PRIVATE KEY")
            .ok_or_else(|| Error::config(key, "private_key is not a PEM PRIVATE KEY"))?;
        let rsa = ring::signature::RsaKeyPair::from_pkcs8(&der)
            .map_err(|e| Error::config(key, format!("private_key is not an RSA key: {e}")))?;
        Ok(Self {
            email: file.client_email,
            key_id: file.private_key_id,
            key: rsa,
            current: std::sync::Mutex::new(None),
        })
    }

    /// A JWT signed now, valid for an hour from `now`.
    fn sign(&self, now: std::time::SystemTime) -> Result<String, String> {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let iat = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| format!("clock before 1970: {e}"))?
            .as_secs();
        let header = serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": self.key_id});
        let claims = serde_json::json!({
            "iss": self.email,
            "sub": self.email,
            "scope": SCOPES,
            "iat": iat,
            "exp": iat + TOKEN_LIFETIME.as_secs(),
        });
        let input = format!(
            "{}.{}",
            b64.encode(header.to_string()),
            b64.encode(claims.to_string())
        );
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &ring::signature::RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                input.as_bytes(),
                &mut signature,
            )
            .map_err(|e| format!("signing the token: {e}"))?;
        Ok(format!("{input}.{}", b64.encode(signature)))
    }

    /// The bearer header of a token that is valid for a while yet (signed anew when it is not).
    fn bearer(&self) -> Result<Bearer, String> {
        let now = std::time::SystemTime::now();
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((until, bearer)) = current.as_ref()
            && now < *until
        {
            return Ok(bearer.clone());
        }
        let bearer: Bearer = format!("Bearer {}", self.sign(now)?)
            .parse()
            .map_err(|e| format!("the token is no header value: {e}"))?;
        *current = Some((now + TOKEN_LIFETIME - TOKEN_MARGIN, bearer.clone()));
        Ok(bearer)
    }
}

/// The DER inside the first PEM block labelled `label`.
fn pem_body(pem: &str, label: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = pem.find(&begin)? + begin.len();
    let stop = start + pem[start..].find(&end)?;
    let body: String = pem[start..stop].split_whitespace().collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

/// `message` as a request, with the service account's token when there is one.
fn authorized<T>(
    account: Option<&ServiceAccount>,
    message: T,
) -> Result<tonic::Request<T>, String> {
    let mut request = tonic::Request::new(message);
    if let Some(account) = account {
        request
            .metadata_mut()
            .insert("authorization", account.bearer()?);
    }
    Ok(request)
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
    account: Option<Arc<ServiceAccount>>,
    session: Option<Session>,
    /// The largest publish request.
    ceiling: Arc<Ceiling>,
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
        event: Box<Result<CloudEvent, Error>>,
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
    /// The largest publish request (the ceiling's, which does not change on this wire).
    max_message: usize,
    account: Option<Arc<ServiceAccount>>,
    reduced: Arc<ReducedMetadataLog>,
}

impl PubSubTransport {
    /// The transport for the Pub/Sub config of `opts`. Plain HTTP/2 with `disableTLS` or when
    /// `PUBSUB_EMULATOR_HOST` is set (as Google's client does), without credentials; TLS 1.3 with
    /// the system roots otherwise, with the service account of `credentialsFile` when given.
    pub fn new(opts: &PubSubClientOptions) -> Result<Self, Error> {
        Self::with_emulator(opts, std::env::var(EMULATOR_HOST_ENV).ok())
    }

    fn with_emulator(opts: &PubSubClientOptions, emulator: Option<String>) -> Result<Self, Error> {
        if opts.cluster.is_empty() {
            return Err(Error::config("--spoke-cluster-name", "required"));
        }
        let cfg = &opts.config;
        let emulator = emulator.filter(|e| !e.is_empty());
        // As Google's client: an emulator gets no credentials; a token needs TLS.
        let account = match (&cfg.credentials_file, &emulator) {
            (Some(file), None) => {
                if cfg.disable_tls {
                    return Err(Error::config(
                        "credentialsFile",
                        "a token is not sent without TLS: remove disableTLS or the credentials",
                    ));
                }
                Some(Arc::new(ServiceAccount::from_file(file)?))
            }
            _ => None,
        };
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
        let topics = Arc::new((
            cfg.topics.agent_events.clone(),
            cfg.topics.agent_broadcast.clone(),
        ));
        let (limit, origin) = match cfg.max_message_size {
            Some(max) => (max, CeilingOrigin::Config("maxMessageSize")),
            None => (
                PUBSUB_MAX_MESSAGE,
                CeilingOrigin::Default("Pub/Sub's publish request limit"),
            ),
        };
        let measured = topics.clone();
        let ceiling = Arc::new(Ceiling::new(
            "Pub/Sub",
            limit,
            origin,
            move |e: &CloudEvent| {
                // An event refused by `check` is measured as it is.
                let e = wire_event(e).unwrap_or(Cow::Borrowed(e));
                request_size(&e, topic_of(&e, &measured.0, &measured.1))
            },
        ));
        Ok(Self {
            dialer: Dialer::new("endpoint", &address, &keep_alive, tls)?,
            address,
            topics,
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
            account,
            session: None,
            ceiling,
        })
    }

    /// Checks that a subscription exists (the agent creates none).
    async fn check_subscription(&self, channel: &Channel, name: &str) -> Result<(), String> {
        let mut client = SubscriberClient::new(channel.clone());
        let request = authorized(
            self.account.as_deref(),
            pb::GetSubscriptionRequest {
                subscription: name.to_string(),
            },
        )?;
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

/// A stream that lived this long before the server ended it is opened again at once (Pub/Sub
/// ends its streams from time to time, after about 30 minutes); one that ended sooner ends the
/// connection, and the client backs off.
const STREAM_REOPEN_AFTER: Duration = Duration::from_secs(2);

/// Pulls `subscription` on one stream at a time, handing over what arrives and acknowledging
/// what `acks` names, until a stream fails or cannot be opened again.
#[allow(clippy::too_many_arguments)]
async fn pull(
    stream: usize,
    channel: Channel,
    subscription: String,
    settings: PullSettings,
    max_message: usize,
    account: Option<Arc<ServiceAccount>>,
    mut acks: mpsc::UnboundedReceiver<String>,
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
    let mut client = SubscriberClient::new(channel).max_decoding_message_size(max_message);
    let why = loop {
        // The stream's requests: the first, then acknowledgements (an ack id stays valid on
        // the next stream of the subscription).
        let (requests, rx) = mpsc::unbounded_channel();
        let _ = requests.send(first.clone());
        let request_stream =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) });
        let request = match authorized(account.as_deref(), request_stream) {
            Ok(r) => r,
            Err(why) => break why,
        };
        let opened = tokio::time::Instant::now();
        let mut messages = match client.streaming_pull(request).await {
            Ok(response) => response.into_inner(),
            Err(status) => break describe(&status),
        };
        let ended = loop {
            tokio::select! {
                message = messages.message() => match message {
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
                                event: Box::new(event),
                            };
                            if out.send(pulled).await.is_err() {
                                return;
                            }
                        }
                    }
                    Ok(None) => break "the server ended the stream".to_string(),
                    Err(status) => break describe(&status),
                },
                Some(id) = acks.recv() => {
                    let mut ack_ids = vec![id];
                    while let Ok(more) = acks.try_recv() {
                        ack_ids.push(more);
                    }
                    let _ = requests.send(pb::StreamingPullRequest {
                        ack_ids,
                        ..Default::default()
                    });
                }
            }
        };
        if opened.elapsed() < STREAM_REOPEN_AFTER {
            break ended;
        }
        tracing::debug!(%subscription, why = %ended, "the Pub/Sub stream ended; opening it again");
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

    /// Too many attributes, too long a key, or a value over the limit that cannot be reduced.
    fn check(event: &CloudEvent) -> Result<(), Error> {
        wire_event(event).map(drop)
    }

    fn ceiling(&self) -> Arc<Ceiling> {
        self.ceiling.clone()
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
                self.account.clone(),
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
            max_message: self.ceiling.limit(),
            account: self.account.clone(),
            reduced: Arc::default(),
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
                Ok(match *event {
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
        let fitted = match wire_event(&event) {
            Ok(fitted) => fitted,
            Err(e) => return Sent::Malformed(e.to_string()),
        };
        if let Cow::Owned(sent) = &fitted {
            self.reduced.note(&event, sent, "Pub/Sub");
        }
        let topic = topic_of(&fitted, &self.topics.0, &self.topics.1).to_string();
        let request = match authorized(
            self.account.as_deref(),
            pb::PublishRequest {
                topic,
                messages: vec![to_message(&fitted)],
            },
        ) {
            Ok(r) => r,
            Err(why) => return Sent::Refused(why),
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

    /// A status event whose `metadata` is the work's ObjectMeta with `annotation` bytes of
    /// annotation.
    fn status_with_metadata(annotation: usize) -> CloudEvent {
        let metadata = serde_json::json!({
            "name": "w1",
            "namespace": "cluster1",
            "uid": "4717d8e0",
            "resourceVersion": "12",
            "generation": 3,
            "labels": {"cloudevents.open-cluster-management.io/originalsource": "maestro"},
            "annotations": {"note": "x".repeat(annotation)},
        });
        status().with_ext("metadata", ExtValue::String(metadata.to_string()))
    }

    /// The measure is prost's length of the publish request the sender makes, for statuses with
    /// and without (reduced) metadata, with data across the length prefix's byte counts, and
    /// resync requests on the broadcast topic.
    #[test]
    fn the_measure_is_the_encoded_publish_request() {
        let mut events = vec![
            status(),
            status_with_metadata(10),
            status_with_metadata(2_000),
            crate::codec::encode_spec_resync_request(vec![], "cluster1", "a").expect("encodes"),
        ];
        for n in [0, 1, 127, 128, 16_384, 2_097_152] {
            let mut ev = status();
            ev.data = Some(vec![b'x'; n]);
            events.push(ev);
        }
        let mut no_data = status();
        no_data.data = None;
        events.push(no_data);
        let (agent_events, broadcast) = (
            "projects/p/topics/agentevents",
            "projects/p/topics/agentbroadcast",
        );
        for ev in &events {
            let fitted = wire_event(ev).expect("fits");
            let topic = topic_of(&fitted, agent_events, broadcast);
            let request = pb::PublishRequest {
                topic: topic.to_string(),
                messages: vec![to_message(&fitted)],
            };
            assert_eq!(
                request_size(&fitted, topic),
                prost::Message::encoded_len(&request),
                "{} with {:?} bytes of data",
                ev.type_,
                ev.data.as_ref().map(Vec::len)
            );
        }
    }

    #[test]
    fn metadata_over_the_value_limit_goes_reduced() {
        let ev = status_with_metadata(2_000);
        let fitted = wire_event(&ev).expect("fits reduced");
        let message = to_message(&fitted);
        let metadata = &message.attributes["ce-metadata"];
        assert!(metadata.len() <= MAX_ATTRIBUTE_VALUE, "{}", metadata.len());
        let metadata: serde_json::Value = serde_json::from_str(metadata).expect("JSON");
        assert_eq!(
            metadata,
            serde_json::json!({
                "name": "w1",
                "namespace": "cluster1",
                "uid": "4717d8e0",
                "resourceVersion": "12",
                "generation": 3,
            })
        );
        assert!(
            message
                .attributes
                .values()
                .all(|v| v.len() <= MAX_ATTRIBUTE_VALUE)
        );
        // Within the limit it goes as it is.
        let small = status_with_metadata(10);
        assert_eq!(
            to_message(&wire_event(&small).expect("fits")),
            to_message(&small)
        );
    }

    #[test]
    fn attributes_pubsub_cannot_take_refuse_the_event() {
        let long_value = status().with_ext("logtracing", ExtValue::String("{}".repeat(600)));
        let e = PubSubTransport::check(&long_value)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("logtracing") && e.contains("1024"), "{e}");
        let long_key = status().with_ext(&"k".repeat(254), ExtValue::String("v".into()));
        let e = PubSubTransport::check(&long_key)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("256"), "{e}");
        let mut many = status();
        for i in 0..100 {
            many = many.with_ext(&format!("x{i}"), ExtValue::Bool(true));
        }
        let e = PubSubTransport::check(&many)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("at most 100"), "{e}");
        assert!(PubSubTransport::check(&status_with_metadata(2_000)).is_ok());
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
        let e = PubSubTransport::with_emulator(
            &options("credentialsFile: /nonexistent/k.json\n"),
            None,
        )
        .err()
        .expect("no such file");
        assert!(e.to_string().contains("credentialsFile"), "{e}");
        let e = PubSubTransport::with_emulator(
            &options("credentialsFile: /nonexistent/k.json\nendpoint: a:1\ndisableTLS: true\n"),
            None,
        )
        .err()
        .expect("a token without TLS");
        assert!(e.to_string().contains("without TLS"), "{e}");
        assert!(
            PubSubTransport::with_emulator(
                &options("credentialsFile: /nonexistent/k.json\n"),
                Some("127.0.0.1:8085".into())
            )
            .is_ok(),
            "an emulator gets no credentials"
        );
        assert_eq!(t.pull.ack_deadline_seconds, 60);
        assert_eq!(t.pull.max_messages, DEFAULT_MAX_MESSAGES);
    }

    /// A service account key file with a fresh RSA key (made by `openssl`, which the project's
    /// scripts need anyway); its path.
    fn key_file(dir: &std::path::Path) -> std::path::PathBuf {
        let pem = std::process::Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
            ])
            .output()
            .expect("openssl runs");
        assert!(pem.status.success(), "openssl genpkey failed");
        let file = serde_json::json!({
            "type": "service_account",
            "project_id": "maestro-test",
            "private_key_id": "k1",
            "private_key": String::from_utf8(pem.stdout).expect("PEM text"),
            "client_email": "agent@maestro-test.iam.gserviceaccount.com",
        });
        let path = dir.join("key.json");
        std::fs::write(&path, file.to_string()).expect("write");
        path
    }

    /// The token is Google's self-signed JWT: RS256 over header and claims, verifiable with the
    /// key's public half; bad files are errors naming `credentialsFile`.
    #[test]
    fn service_account_tokens_as_googles_auth_library_signs_them() {
        use base64::Engine;
        let dir = std::env::temp_dir().join(format!("pubsub-sa-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let account = ServiceAccount::from_file(&key_file(&dir)).expect("a service account");
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let jwt = account.sign(now).expect("signs");
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let json = |p: &str| -> serde_json::Value {
            serde_json::from_slice(&b64.decode(p).expect("base64url")).expect("json")
        };
        let header = json(parts[0]);
        assert_eq!(
            header,
            serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": "k1"})
        );
        let claims = json(parts[1]);
        assert_eq!(claims["iss"], "agent@maestro-test.iam.gserviceaccount.com");
        assert_eq!(claims["sub"], claims["iss"]);
        assert_eq!(claims["scope"], SCOPES);
        assert_eq!(claims["iat"], 1_800_000_000u64);
        assert_eq!(claims["exp"], 1_800_003_600u64);
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            account.key.public().as_ref(),
        );
        let signed = format!("{}.{}", parts[0], parts[1]);
        public
            .verify(signed.as_bytes(), &b64.decode(parts[2]).expect("signature"))
            .expect("the signature verifies");
        let first = account.bearer().expect("bearer");
        assert!(first.to_str().expect("ascii").starts_with("Bearer ey"));
        assert_eq!(
            account.bearer().expect("bearer"),
            first,
            "kept until near expiry"
        );

        for (text, why) in [
            ("{", "not a service account key file"),
            (
                r#"{"type":"authorized_user","client_email":"a","private_key":""}"#,
                "only service account keys",
            ),
            (
                r#"{"type":"service_account","client_email":"a","private_key":"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}"#,
                "not an RSA key",
            ),
            (
                r#"{"type":"service_account","client_email":"a","private_key":"none"}"#,
                "not a PEM",
            ),
        ] {
            let path = dir.join("bad.json");
            std::fs::write(&path, text).expect("write");
            let e = ServiceAccount::from_file(&path)
                .err()
                .expect(text)
                .to_string();
            assert!(
                e.contains("credentialsFile") && e.contains(why),
                "{text}: {e}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
