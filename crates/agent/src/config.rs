//! Settings of a running agent, fixed at startup.

use std::net::SocketAddr;
use std::time::Duration;

/// What the agent serves and how.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// Managed cluster name = the hub namespace served.
    pub cluster_name: String,
    /// Recorded in each AppliedManifestWork's `spec.agentID`.
    pub agent_id: String,
    /// Whether `agent_id` was generated (no `--agent-id`, no `agent-name` file): AppliedManifestWorks
    /// recorded with the hub hash as their ID are then this agent's too, as they are for upstream's
    /// agent in that case (its ID is then the hub hash).
    pub agent_id_generated: bool,
    /// `work_api::hub_hash` of the hub server URL.
    pub hub_hash: String,
    /// Value of `applier::AGENT_LABEL` on every object this agent writes.
    pub label_value: String,
    /// Works reconciled concurrently.
    pub workers: u16,
    /// Address of the metrics/health server.
    pub http_address: SocketAddr,
    /// Whether to hold a Lease before reconciling.
    pub leader_elect: bool,
    /// Namespace of the Lease on the spoke.
    pub lease_namespace: String,
    /// Period for re-reading ReadOnly manifests.
    pub readonly_resync: Duration,
    /// Period of the safety-net full reconcile of each work.
    pub status_sync_period: Duration,
    /// Address of the HTTPS probe endpoint (`/healthz`, `/readyz`); none: not served.
    pub health_address: Option<SocketAddr>,
    /// TLS settings of the probe endpoint.
    pub health_tls: crate::tls::TlsSettings,
    /// How long an AppliedManifestWork whose work is gone from the hub is kept before it (and so
    /// its resources) is deleted; at least [`EVICTION_DISABLED_AT`] disables eviction.
    pub eviction_grace_period: Duration,
    /// Lease duration, renew deadline and retry period of leader election (none: defaults).
    pub leader_timing: Option<(Duration, Duration, Duration)>,
    /// Whether each TTL deletion also records a `TTLAfterFinishedExpired` Event on the hub.
    pub ttl_deletion_events: bool,
    /// Feature gates that change behaviour (`--feature-gates`).
    pub gates: FeatureGates,
    /// Longest JSON text a `RawFeedbackJsonString` feedback value may have.
    pub max_json_raw_length: usize,
    /// How long reconcile requests of one work are held to fold those that follow (hub echoes of
    /// the agent's own writes, bursts of spoke changes); `None`: the hub's and the spoke's
    /// defaults. Efficiency only: every decision holds with zero, which the tests run with.
    pub reconcile_debounce: Option<Duration>,
}

/// The feature gates of `--feature-gates` that change what the agent does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// `RawFeedbackJsonString`: a feedback JSONPath may report a structure (or several values) as
    /// a JSON text; off, such a path is an error and only scalars are reported.
    pub raw_feedback_json: bool,
    /// `ExecutorValidatingCaches`: executor permission answers are kept until an RBAC object on
    /// the spoke changes; off, they are asked again for every new generation of a work.
    pub executor_validating_caches: bool,
}

/// The agent ID generated when none is given: 24 hex digits of a SHA-256 of hub hash and cluster
/// name (the agent label's value, which names the same pair).
pub fn generated_agent_id(hub_hash: &str, cluster_name: &str) -> String {
    applier::agent_label_value(hub_hash, cluster_name)
}

/// The default `--max-json-raw-length`: the longest JSON a `RawJsonString` feedback value may
/// have (upstream's default).
pub const MAX_JSON_RAW: usize = 1024;

/// A grace period this long (100 years) or longer disables eviction, as upstream.
pub const EVICTION_DISABLED_AT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl AgentConfig {
    /// A config with defaults for everything but the identity.
    pub fn new(cluster_name: String, agent_id: String, hub_server_url: &str) -> Self {
        let hub_hash = work_api::hub_hash(hub_server_url);
        let label_value = applier::agent_label_value(&hub_hash, &cluster_name);
        Self {
            cluster_name,
            agent_id,
            agent_id_generated: false,
            hub_hash,
            label_value,
            workers: 10,
            http_address: SocketAddr::from(([0, 0, 0, 0], 8080)),
            leader_elect: false,
            lease_namespace: "open-cluster-management-agent".into(),
            readonly_resync: Duration::from_secs(10),
            status_sync_period: Duration::from_secs(300),
            health_address: None,
            health_tls: crate::tls::TlsSettings::default(),
            eviction_grace_period: Duration::from_secs(3600),
            leader_timing: None,
            ttl_deletion_events: false,
            gates: FeatureGates::default(),
            max_json_raw_length: MAX_JSON_RAW,
            reconcile_debounce: None,
        }
    }

    /// Sets the reconcile debounce of hub and spoke events (`None`: their defaults).
    pub fn with_reconcile_debounce(mut self, debounce: Option<Duration>) -> Self {
        self.reconcile_debounce = debounce;
        self
    }

    /// Marks the agent ID as generated (see [`AgentConfig::agent_id_generated`]).
    pub fn with_generated_agent_id(mut self, generated: bool) -> Self {
        self.agent_id_generated = generated;
        self
    }

    /// Whether an AppliedManifestWork recorded with `agent_id` is this agent's to evict: its own
    /// ID, or, when that was generated, the hub hash (upstream's agent's ID in that case).
    pub fn is_own_agent_id(&self, agent_id: &str) -> bool {
        agent_id == self.agent_id || (self.agent_id_generated && agent_id == self.hub_hash)
    }

    /// Sets the feature gates.
    pub fn with_gates(mut self, gates: FeatureGates) -> Self {
        self.gates = gates;
        self
    }

    /// Sets the longest JSON text of a raw feedback value (`--max-json-raw-length`).
    pub fn with_max_json_raw_length(mut self, length: usize) -> Self {
        self.max_json_raw_length = length;
        self
    }

    /// Sets the HTTPS probe endpoint.
    pub fn with_health(
        mut self,
        address: Option<SocketAddr>,
        tls: crate::tls::TlsSettings,
    ) -> Self {
        self.health_address = address;
        self.health_tls = tls;
        self
    }

    /// Sets the eviction grace period of AppliedManifestWorks whose work is gone.
    pub fn with_eviction_grace_period(mut self, grace: Duration) -> Self {
        self.eviction_grace_period = grace;
        self
    }

    /// Sets whether TTL deletions are recorded as Events on the hub.
    pub fn with_ttl_deletion_events(mut self, enabled: bool) -> Self {
        self.ttl_deletion_events = enabled;
        self
    }

    /// Sets the leader-election timing: lease duration, renew deadline, retry period.
    pub fn with_leader_timing(mut self, timing: Option<(Duration, Duration, Duration)>) -> Self {
        self.leader_timing = timing;
        self
    }

    /// Sets the worker count.
    pub fn with_workers(mut self, workers: u16) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Sets the metrics/health address.
    pub fn with_http_address(mut self, address: SocketAddr) -> Self {
        self.http_address = address;
        self
    }

    /// Sets leader election.
    pub fn with_leader_election(mut self, enabled: bool, namespace: String) -> Self {
        self.leader_elect = enabled;
        self.lease_namespace = namespace;
        self
    }

    /// Sets the resync periods.
    pub fn with_periods(mut self, readonly_resync: Duration, status_sync_period: Duration) -> Self {
        self.readonly_resync = readonly_resync;
        self.status_sync_period = status_sync_period;
        self
    }

    /// Name of the AppliedManifestWork of a work.
    pub fn applied_name(&self, work_name: &str) -> String {
        work_api::applied_manifest_work_name(&self.hub_hash, work_name)
    }

    /// The work name an AppliedManifestWork name stands for, if it belongs to this hub.
    pub fn work_name_of_applied<'a>(&self, applied_name: &'a str) -> Option<&'a str> {
        applied_name
            .strip_prefix(self.hub_hash.as_str())
            .and_then(|rest| rest.strip_prefix('-'))
            .filter(|rest| !rest.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applied_names_round_trip() {
        let c = AgentConfig::new("c1".into(), "a".into(), "https://127.0.0.1:6443");
        let name = c.applied_name("work-1");
        assert_eq!(name.len(), 64 + 1 + 6);
        assert_eq!(c.work_name_of_applied(&name), Some("work-1"));
        assert_eq!(c.work_name_of_applied("deadbeef-work-1"), None);
        assert_eq!(c.work_name_of_applied(&c.hub_hash), None);
    }

    #[test]
    fn label_values_are_valid_and_distinct_per_cluster() {
        let a = AgentConfig::new("c1".into(), "a".into(), "https://hub");
        let b = AgentConfig::new("c2".into(), "a".into(), "https://hub");
        assert_ne!(a.label_value, b.label_value);
        assert!(a.label_value.len() <= 63);
        assert!(a.label_value.chars().all(|c| c.is_ascii_alphanumeric()));
    }
}
