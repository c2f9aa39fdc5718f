//! Prometheus metrics of the agent (`/metrics`). Names follow Prometheus conventions and label
//! sets stay small: no per-object labels, so cardinality does not grow with the number of works.

pub mod workqueue;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use workqueue::WorkQueueMetrics;

/// Label: the state of a work (`applying`, `available`, `complete`, `deleting`, `failed`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// Work state.
    pub state: &'static str,
}

/// Labels of an apply: strategy and result.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApplyLabels {
    /// `Update`, `CreateOnly`, `ServerSideApply` or `ReadOnly`.
    pub strategy: &'static str,
    /// `created`, `updated`, `unchanged`, `skipped_complete`, `conflict` or `error`.
    pub result: &'static str,
}

/// Label: the apply strategy.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StrategyLabels {
    /// `Update`, `CreateOnly`, `ServerSideApply` or `ReadOnly`.
    pub strategy: &'static str,
}

/// Label: the result of a rule evaluation (`true`, `false`, `unknown`, `error`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleResultLabels {
    /// Outcome.
    pub result: &'static str,
}

/// Label: which controller failed (`manifestwork`, `applied`, `gc`, `status`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// Controller name.
    pub controller: &'static str,
}

/// Labels of an API request the agent sent: which API server, and the Kubernetes verb.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiRequestLabels {
    /// `hub` or `spoke`.
    pub api: &'static str,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`, or
    /// `other`.
    pub verb: &'static str,
}

/// Requests sent to the API servers, counted by the client layer. Process-wide: the clients are
/// built before the agent's metrics, and one process has one pair of clients.
pub fn api_requests() -> &'static Family<ApiRequestLabels, Counter> {
    static REQUESTS: std::sync::OnceLock<Family<ApiRequestLabels, Counter>> =
        std::sync::OnceLock::new();
    REQUESTS.get_or_init(Family::default)
}

/// Labels of `rest_client_requests_total`, as client-go sets them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RestRequestLabels {
    /// The HTTP status code, or `<error>` when no response came (refused, timed out).
    pub code: String,
    /// The API server's `host:port`.
    pub host: String,
    /// The HTTP method (`GET`, `POST`, ...).
    pub method: String,
}

/// Labels of `rest_client_request_duration_seconds`, as client-go sets them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RestLatencyLabels {
    /// The API server's `host:port`.
    pub host: String,
    /// The HTTP method (client-go calls it the verb).
    pub verb: String,
}

/// client-go's request latency buckets (seconds); Maestro's SLO selects `le="0.5"`.
const REST_LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

fn rest_latency_histogram() -> Histogram {
    Histogram::new(REST_LATENCY_BUCKETS)
}

/// client-go's `rest_client_requests_total`: requests sent to the API servers by status code.
/// Process-wide, as [`api_requests`].
pub fn rest_client_requests() -> &'static Family<RestRequestLabels, Counter> {
    static REQUESTS: std::sync::OnceLock<Family<RestRequestLabels, Counter>> =
        std::sync::OnceLock::new();
    REQUESTS.get_or_init(Family::default)
}

/// Histograms by host and verb, each with client-go's buckets.
pub type RestLatency = Family<RestLatencyLabels, Histogram, fn() -> Histogram>;

/// client-go's `rest_client_request_duration_seconds`: from sending a request (after the rate
/// limit) to its response headers. Process-wide, as [`api_requests`].
pub fn rest_client_request_duration() -> &'static RestLatency {
    static LATENCY: std::sync::OnceLock<RestLatency> = std::sync::OnceLock::new();
    LATENCY.get_or_init(|| Family::new_with_constructor(rest_latency_histogram))
}

/// Label: why a TTL deletion failed (`forbidden`: the hub's RBAC refused it; `error`: any other
/// failure).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Failure reason.
    pub reason: &'static str,
}

fn histogram_seconds() -> Histogram {
    // 1 ms .. ~65 s
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn histogram_long_seconds() -> Histogram {
    // 1 s .. ~9 h: workloads and TTLs run for minutes to hours
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

/// Every metric of the agent, registered in one registry.
pub struct Metrics {
    /// The registry `/metrics` encodes.
    pub registry: Registry,
    /// Works served, by state.
    pub works: Family<StateLabels, Gauge>,
    /// Works that became Complete.
    pub completions_total: Counter,
    /// Drifted objects the agent wrote back (Correct mode).
    pub drift_corrections_total: Counter,
    /// Time from a work's creation to its Complete condition.
    pub time_to_complete_seconds: Histogram,
    /// Completed works waiting for their TTL deadline.
    pub ttl_pending_deletions: Gauge,
    /// Works deleted by TTL garbage collection.
    pub ttl_deletions_total: Counter,
    /// Delay between a work's TTL deadline and its deletion.
    pub ttl_deletion_lag_seconds: Histogram,
    /// TTL deletions that failed, by reason.
    pub ttl_deletion_failures_total: Family<ReasonLabels, Counter>,
    /// Manifest applies by strategy and result.
    pub applies_total: Family<ApplyLabels, Counter>,
    /// Latency of one manifest apply, by strategy.
    pub apply_duration_seconds: Family<StrategyLabels, Histogram, fn() -> Histogram>,
    /// Condition rule evaluations by result.
    pub rule_evaluations_total: Family<RuleResultLabels, Counter>,
    /// Latency of evaluating one manifest's rules.
    pub rule_evaluation_duration_seconds: Histogram,
    /// Reconcile errors by controller.
    pub reconcile_errors_total: Family<ControllerLabels, Counter>,
    /// Reconciles run, by controller (also a "the agent had its chance" marker for tests).
    pub reconciles_total: Family<ControllerLabels, Counter>,
    /// Latency of one ManifestWork reconcile.
    pub reconcile_duration_seconds: Histogram,
    /// Work names dropped from the watch-event queue because it was full (the works are
    /// still reconciled by their safety-net resync).
    pub trigger_overflows_total: Counter,
    /// Resource-type watches open on the spoke.
    pub watches: Gauge,
    /// Objects in the index from applied objects to the works using them.
    pub index_objects: Gauge,
    /// Group versions in the discovery cache.
    pub resolver_cache_entries: Gauge,
    /// Works whose state the agent holds (the `works` gauge's entries).
    pub work_states: Gauge,
    /// Work names waiting in the trigger queue.
    pub trigger_queue_depth: Gauge,
    /// The controller queue under client-go's `workqueue_*` names.
    pub workqueue: WorkQueueMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric of the agent under the `work_agent` prefix.
    pub fn new() -> Self {
        // The agent's own metrics under `work_agent_`; the root keeps room for the hub's
        // transport metrics under upstream's names (see `Hub::register_metrics`).
        let mut root = Registry::default();
        let registry = root.sub_registry_with_prefix("work_agent");
        let m = Self {
            works: Family::default(),
            completions_total: Counter::default(),
            drift_corrections_total: Counter::default(),
            time_to_complete_seconds: histogram_long_seconds(),
            ttl_pending_deletions: Gauge::default(),
            ttl_deletions_total: Counter::default(),
            ttl_deletion_lag_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 16)),
            ttl_deletion_failures_total: Family::default(),
            applies_total: Family::default(),
            apply_duration_seconds: Family::new_with_constructor(histogram_seconds),
            rule_evaluations_total: Family::default(),
            rule_evaluation_duration_seconds: Histogram::new(exponential_buckets(
                0.000_001, 4.0, 12,
            )),
            reconcile_errors_total: Family::default(),
            reconciles_total: Family::default(),
            reconcile_duration_seconds: histogram_seconds(),
            trigger_overflows_total: Counter::default(),
            watches: Gauge::default(),
            index_objects: Gauge::default(),
            resolver_cache_entries: Gauge::default(),
            work_states: Gauge::default(),
            trigger_queue_depth: Gauge::default(),
            workqueue: WorkQueueMetrics::default(),
            registry: Registry::default(),
        };
        registry.register(
            "works",
            "ManifestWorks served by this agent, by state",
            m.works.clone(),
        );
        registry.register(
            "completions",
            "ManifestWorks that became Complete",
            m.completions_total.clone(),
        );
        registry.register(
            "drift_corrections",
            "Objects that differed from their ManifestWork and were written back",
            m.drift_corrections_total.clone(),
        );
        registry.register(
            "time_to_complete_seconds",
            "Time from ManifestWork creation to its Complete condition",
            m.time_to_complete_seconds.clone(),
        );
        registry.register(
            "ttl_pending_deletions",
            "Completed ManifestWorks waiting for their TTL deadline",
            m.ttl_pending_deletions.clone(),
        );
        registry.register(
            "ttl_deletions",
            "ManifestWorks deleted by TTL garbage collection",
            m.ttl_deletions_total.clone(),
        );
        registry.register(
            "ttl_deletion_lag_seconds",
            "Delay between a ManifestWork's TTL deadline and its deletion",
            m.ttl_deletion_lag_seconds.clone(),
        );
        registry.register(
            "ttl_deletion_failures",
            "TTL deletions of ManifestWorks that failed, by reason",
            m.ttl_deletion_failures_total.clone(),
        );
        registry.register(
            "applies",
            "Manifest applies by strategy and result",
            m.applies_total.clone(),
        );
        registry.register(
            "apply_duration_seconds",
            "Latency of applying one manifest, by strategy",
            m.apply_duration_seconds.clone(),
        );
        registry.register(
            "rule_evaluations",
            "Condition rule evaluations by result",
            m.rule_evaluations_total.clone(),
        );
        registry.register(
            "rule_evaluation_duration_seconds",
            "Latency of evaluating one manifest's condition rules",
            m.rule_evaluation_duration_seconds.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconcile errors by controller",
            m.reconcile_errors_total.clone(),
        );
        registry.register(
            "reconciles",
            "Reconciles run, by controller",
            m.reconciles_total.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Latency of one ManifestWork reconcile",
            m.reconcile_duration_seconds.clone(),
        );
        registry.register(
            "trigger_overflows",
            "Watch-event triggers dropped because the queue was full",
            m.trigger_overflows_total.clone(),
        );
        registry.register(
            "watches",
            "Resource-type watches open on the spoke",
            m.watches.clone(),
        );
        registry.register(
            "index_objects",
            "Applied objects in the index from objects to the works using them",
            m.index_objects.clone(),
        );
        registry.register(
            "resolver_cache_entries",
            "Group versions in the discovery cache",
            m.resolver_cache_entries.clone(),
        );
        registry.register(
            "work_states",
            "Works whose state the agent holds",
            m.work_states.clone(),
        );
        registry.register(
            "trigger_queue_depth",
            "Work names waiting in the trigger queue",
            m.trigger_queue_depth.clone(),
        );
        registry.register(
            "api_requests",
            "Requests sent to the hub and spoke API servers, by verb",
            api_requests().clone(),
        );
        // client-go's names, unprefixed, as upstream's and Maestro's agents expose them, so
        // their dashboards and SLOs work unchanged.
        root.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host",
            rest_client_requests().clone(),
        );
        root.register(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host",
            rest_client_request_duration().clone(),
        );
        root.register_collector(Box::new(m.workqueue.clone()));
        Self {
            registry: root,
            ..m
        }
    }

    /// The registry in Prometheus text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_exposed_with_total_suffix_and_prefix() {
        let m = Metrics::new();
        m.completions_total.inc();
        m.applies_total
            .get_or_create(&ApplyLabels {
                strategy: "Update",
                result: "created",
            })
            .inc();
        let text = m.encode().expect("encoding to a String cannot fail");
        for expected in [
            "work_agent_completions_total 1",
            r#"work_agent_applies_total{strategy="Update",result="created"} 1"#,
            "# TYPE work_agent_time_to_complete_seconds histogram",
        ] {
            assert!(text.contains(expected), "{expected:?} not in:\n{text}");
        }
    }
}
