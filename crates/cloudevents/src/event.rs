//! A CloudEvent (spec 1.0): the required attributes, the optional ones the work protocol uses,
//! typed extensions and the raw data.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::Error;
use crate::types::{self, EventType};

/// The only spec version the protocol uses.
pub const SPEC_VERSION: &str = "1.0";

/// The value of an extension attribute, with the CloudEvents type it has on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExtValue {
    /// A string (also JSON-valued extensions such as `metadata`).
    String(String),
    /// An integer (`resourceversion`); Go writes it in decimal on MQTT.
    Integer(i64),
    /// A timestamp (`deletiontimestamp`); RFC3339Nano in UTC on MQTT.
    Time(DateTime<Utc>),
    /// A boolean.
    Bool(bool),
}

impl ExtValue {
    /// The canonical string form CloudEvents bindings put on the wire.
    pub fn to_canonical(&self) -> String {
        match self {
            Self::String(s) => s.clone(),
            Self::Integer(i) => i.to_string(),
            Self::Time(t) => format_time(t),
            Self::Bool(b) => b.to_string(),
        }
    }

    /// Parses the canonical string of a known extension into its type; unknown ones stay strings.
    pub fn from_canonical(name: &str, value: &str) -> Result<Self, Error> {
        Ok(match name {
            types::EXT_RESOURCE_VERSION => Self::Integer(
                value
                    .parse()
                    .map_err(|e| Error::bad_attr(name, format!("not an integer: {e}")))?,
            ),
            types::EXT_DELETION_TIMESTAMP => Self::Time(parse_time(name, value)?),
            _ => Self::String(value.to_string()),
        })
    }

    /// The value as JSON (structured mode): integers as numbers, the rest as strings.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Self::Integer(i) => (*i).into(),
            Self::Bool(b) => (*b).into(),
            other => other.to_canonical().into(),
        }
    }
}

/// RFC3339 with nanoseconds trimmed as Go's RFC3339Nano does, always `Z`.
pub fn format_time(t: &DateTime<Utc>) -> String {
    let full = t.to_rfc3339_opts(SecondsFormat::Nanos, true);
    // Go's RFC3339Nano drops trailing zeros of the fraction, and the dot with them.
    match full.strip_suffix('Z').and_then(|s| s.split_once('.')) {
        Some((secs, frac)) => {
            let frac = frac.trim_end_matches('0');
            if frac.is_empty() {
                format!("{secs}Z")
            } else {
                format!("{secs}.{frac}Z")
            }
        }
        None => full,
    }
}

/// Parses an RFC3339 timestamp attribute.
pub fn parse_time(name: &str, value: &str) -> Result<DateTime<Utc>, Error> {
    DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| Error::bad_attr(name, format!("not an RFC3339 time: {e}")))
}

/// One CloudEvent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudEvent {
    /// `id`: unique per source.
    pub id: String,
    /// `source`: the source id, or the agent's client id on status events.
    pub source: String,
    /// `type`: the full type string (kept as text so unknown types can be reported).
    pub type_: String,
    /// `time`, when present.
    pub time: Option<DateTime<Utc>>,
    /// `datacontenttype`, when present.
    pub datacontenttype: Option<String>,
    /// `dataschema`, when present.
    pub dataschema: Option<String>,
    /// `subject`, when present.
    pub subject: Option<String>,
    /// Extension attributes by name (lower case).
    pub extensions: BTreeMap<String, ExtValue>,
    /// The data, as bytes (JSON for this protocol); `None` when the event has none.
    pub data: Option<Vec<u8>>,
}

impl CloudEvent {
    /// A new event of `ty` from `source` with a fresh uuid id, the current time and JSON content type.
    pub fn new(ty: EventType, source: impl Into<String>) -> Self {
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            source: source.into(),
            type_: ty.as_type(),
            time: Some(Utc::now()),
            datacontenttype: Some(types::JSON.to_string()),
            dataschema: None,
            subject: None,
            extensions: BTreeMap::new(),
            data: None,
        }
    }

    /// The parsed event type.
    pub fn event_type(&self) -> Result<EventType, Error> {
        EventType::parse(&self.type_)
    }

    /// Sets an extension (builder style).
    pub fn with_ext(mut self, name: &str, value: ExtValue) -> Self {
        self.extensions.insert(name.to_string(), value);
        self
    }

    /// A string extension, if present (any type is rendered canonically).
    pub fn ext_string(&self, name: &str) -> Option<String> {
        self.extensions.get(name).map(ExtValue::to_canonical)
    }

    /// A required string extension.
    pub fn require_string(&self, name: &'static str) -> Result<String, Error> {
        self.ext_string(name).ok_or(Error::MissingAttribute(name))
    }

    /// An integer extension; a string holding a decimal also counts (structured mode may carry either).
    pub fn ext_integer(&self, name: &str) -> Result<Option<i64>, Error> {
        match self.extensions.get(name) {
            None => Ok(None),
            Some(ExtValue::Integer(i)) => Ok(Some(*i)),
            Some(ExtValue::String(s)) => s
                .parse()
                .map(Some)
                .map_err(|e| Error::bad_attr(name, format!("not an integer: {e}"))),
            Some(other) => Err(Error::bad_attr(name, format!("not an integer: {other:?}"))),
        }
    }

    /// A timestamp extension.
    pub fn ext_time(&self, name: &str) -> Result<Option<DateTime<Utc>>, Error> {
        match self.extensions.get(name) {
            None => Ok(None),
            Some(ExtValue::Time(t)) => Ok(Some(*t)),
            Some(ExtValue::String(s)) => parse_time(name, s).map(Some),
            Some(other) => Err(Error::bad_attr(name, format!("not a timestamp: {other:?}"))),
        }
    }
}
