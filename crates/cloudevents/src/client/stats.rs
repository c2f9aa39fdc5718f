//! What a client reports of itself, as plain data: counters and readiness, and the wire's
//! ceiling.

use std::collections::BTreeMap;

use crate::ceiling::CeilingOrigin;

/// Counters and readiness as plain data, for metrics and probes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Subscribed now.
    pub ready: bool,
    /// Events received, by type (unknown types under their type string).
    pub received: BTreeMap<String, u64>,
    /// Events the source took, by type.
    pub sent: BTreeMap<String, u64>,
    /// Messages that could not be decoded (binding, codec or wrong cluster).
    pub rejected: u64,
    /// Connection losses followed by a new attempt.
    pub reconnects: u64,
    /// Events waiting to be published, including those on their way, unheard or refused for now.
    pub queue_depth: usize,
    /// Events the source or broker refused as malformed; dropped, as retrying cannot help.
    pub dropped: u64,
    /// Events the broker took while no source was subscribed (held and sent again).
    pub unheard: u64,
}

/// The wire's ceiling and what it kept off the wire, for metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CeilingStats {
    /// The largest event the wire takes now, in its own bytes (`usize::MAX`: no ceiling).
    pub max_event_bytes: usize,
    /// Where that figure comes from.
    pub origin: CeilingOrigin,
    /// Events dropped when they were to be sent, as over the ceiling then (a reconnect brought a
    /// lower one); those refused when published are the publisher's errors, not counted here.
    pub too_large: u64,
}
