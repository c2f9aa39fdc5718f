//! Typed errors of every layer: bad input is reported, never a panic.

/// Everything that can go wrong decoding, encoding or configuring.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A required CloudEvents attribute or extension is absent.
    #[error("missing attribute {0:?}")]
    MissingAttribute(&'static str),
    /// An attribute is present but its value is not of the expected form.
    #[error("attribute {name:?}: {reason}")]
    BadAttribute {
        /// The attribute name.
        name: String,
        /// Why it was refused.
        reason: String,
    },
    /// The event type is not one of the work protocol's.
    #[error("unknown event type {0:?}")]
    UnknownType(String),
    /// The event is addressed to another cluster.
    #[error("event for cluster {got:?}, this agent is {want:?}")]
    WrongCluster {
        /// The event's `clustername`.
        got: String,
        /// This agent's cluster.
        want: String,
    },
    /// The payload is larger than the configured limit.
    #[error("payload of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Size of the payload.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// An event is larger than its wire takes now: the broker's packet limit, a configured one,
    /// or the protocol's. Sending it would fail the connection (MQTT) or be refused every time.
    #[error(
        "{event_type} event{} is {size} bytes on {wire}, over its ceiling of {limit} bytes ({origin})",
        of_resource(.resource_id.as_deref())
    )]
    EventTooLarge {
        /// The event's type.
        event_type: String,
        /// The event's `resourceid`, when it has one (resync requests have none).
        resource_id: Option<String>,
        /// Its size on the wire.
        size: usize,
        /// The wire's ceiling.
        limit: usize,
        /// The wire's name.
        wire: &'static str,
        /// Where the ceiling comes from.
        origin: crate::ceiling::CeilingOrigin,
    },
    /// The payload is not the JSON the event type calls for.
    #[error("malformed {what} payload: {source}")]
    Payload {
        /// Which payload.
        what: &'static str,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// An MQTT message is not a CloudEvent in either mode.
    #[error("not a CloudEvent: {0}")]
    Binding(String),
    /// A config file is unreadable or a key is invalid; `key` names it.
    #[error("config {key}: {reason}")]
    Config {
        /// The offending key (or the file).
        key: String,
        /// Why.
        reason: String,
    },
}

impl Error {
    /// A config error naming `key`.
    pub fn config(key: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        Self::Config {
            key: key.into(),
            reason: reason.to_string(),
        }
    }
    /// A bad-attribute error naming `name`.
    pub fn bad_attr(name: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        Self::BadAttribute {
            name: name.into(),
            reason: reason.to_string(),
        }
    }
}

/// " of resource <id>", or nothing for an event of no resource.
fn of_resource(id: Option<&str>) -> String {
    id.map(|id| format!(" of resource {id}"))
        .unwrap_or_default()
}

/// An error and its sources on one line, each source once (for logs and start-up errors).
pub fn one_line(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out.replace('\n', " ")
}
