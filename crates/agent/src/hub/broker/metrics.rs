//! The transport's metrics under upstream's names (sdk-go's client metrics): events received and
//! sent by type, reconnects, the publish queue, and how long a status resync takes. Counters are
//! read from the transport's own statistics at each scrape, so the transport needs no metrics
//! library.

use cloudevents::client::{CeilingStats, Stats};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::desync::DesyncCounts;

/// Where the collector reads the transport's statistics and its ceiling.
pub type StatsSource = std::sync::Arc<dyn Fn() -> (Stats, CeilingStats) + Send + Sync>;

/// Upstream's resync-duration buckets (seconds).
const RESYNC_BUCKETS: [f64; 7] = [0.1, 0.2, 0.5, 1.0, 2.0, 10.0, 30.0];

/// The labels of one event type: `type` (the data type), `subresource`, `action`, as upstream
/// splits `<data type>.<subresource>.<action>`.
fn type_labels(event_type: &str) -> Vec<(&'static str, String)> {
    let mut parts = event_type.rsplitn(3, '.');
    let action = parts.next().unwrap_or_default().to_string();
    let subresource = parts.next().unwrap_or_default().to_string();
    let data_type = parts.next().unwrap_or_default().to_string();
    vec![
        ("type", data_type),
        ("subresource", subresource),
        ("action", action),
    ]
}

/// Reads a transport's [`Stats`] at scrape time.
pub struct TransportCollector {
    stats: StatsSource,
    client_id: String,
}

impl std::fmt::Debug for TransportCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportCollector")
            .field("client_id", &self.client_id)
            .finish()
    }
}

fn counters(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: &std::collections::BTreeMap<String, u64>,
    extra: &[(&'static str, String)],
) -> Result<(), std::fmt::Error> {
    let mut family =
        encoder.encode_descriptor(name, help, None, ConstCounter::new(0u64).metric_type())?;
    for (event_type, value) in values {
        let mut labels = extra.to_vec();
        labels.extend(type_labels(event_type));
        ConstCounter::new(*value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for TransportCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (stats, ceiling) = (self.stats)();
        let source = [("source", self.client_id.clone())];
        counters(
            &mut encoder,
            "cloudevents_received",
            "The total number of CloudEvents received by client.",
            &stats.received,
            &[],
        )?;
        counters(
            &mut encoder,
            "cloudevents_sent",
            "The total number of CloudEvents sent from client (acknowledged by the broker).",
            &stats.sent,
            &source,
        )?;
        let reconnects = ConstCounter::new(stats.reconnects);
        let mut family = encoder.encode_descriptor(
            "cloudevents_client_reconnected",
            "The total number of reconnects for the CloudEvents client.",
            None,
            reconnects.metric_type(),
        )?;
        reconnects.encode(family.encode_family(&[("client_id", self.client_id.clone())])?)?;
        let rejected = ConstCounter::new(stats.rejected);
        rejected.encode(encoder.encode_descriptor(
            "cloudevents_rejected",
            "CloudEvents received that could not be used (malformed, too large, another cluster's).",
            None,
            rejected.metric_type(),
        )?)?;
        let dropped = ConstCounter::new(stats.dropped);
        dropped.encode(encoder.encode_descriptor(
            "cloudevents_publish_dropped",
            "Events to the source that it (or the MQTT broker) refused; dropped, as retrying cannot help.",
            None,
            dropped.metric_type(),
        )?)?;
        let unheard = ConstCounter::new(stats.unheard);
        unheard.encode(encoder.encode_descriptor(
            "cloudevents_publish_unheard",
            "Events the MQTT broker took while no source was subscribed; held and sent again once one is.",
            None,
            unheard.metric_type(),
        )?)?;
        let depth = ConstGauge::new(i64::try_from(stats.queue_depth).unwrap_or(i64::MAX));
        depth.encode(encoder.encode_descriptor(
            "cloudevents_publish_queue_depth",
            "Events waiting to be published or acknowledged (latest status per work).",
            None,
            depth.metric_type(),
        )?)?;
        let too_large = ConstCounter::new(ceiling.too_large);
        too_large.encode(encoder.encode_descriptor(
            "cloudevents_publish_too_large",
            "Events dropped before sending as over the wire's ceiling (a reconnect brought a lower one); logged with their type and id.",
            None,
            too_large.metric_type(),
        )?)?;
        if ceiling.max_event_bytes != usize::MAX {
            let max = ConstGauge::new(i64::try_from(ceiling.max_event_bytes).unwrap_or(i64::MAX));
            let mut family = encoder.encode_descriptor(
                "cloudevents_max_event_bytes",
                "The largest event the wire takes now, in its own bytes (an MQTT packet, a gRPC or Pub/Sub publish request), and where the figure comes from.",
                None,
                max.metric_type(),
            )?;
            max.encode(family.encode_family(&[("origin", ceiling.origin.to_string())])?)?;
        }
        let ready = ConstGauge::new(i64::from(stats.ready));
        ready.encode(encoder.encode_descriptor(
            "cloudevents_subscribed",
            "1 while the client is connected and subscribed.",
            None,
            ready.metric_type(),
        )?)?;
        Ok(())
    }
}

/// Labels of `manifestworks_processed_total`, as sdk-go's work agent client sets them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProcessedLabels {
    /// What the agent asked of its copy of the works: `list`, `watch`, `get`, `patch` (status
    /// or finalizers) or `delete`.
    pub action: &'static str,
    /// `Success`, or the reason of the refusal (`NotFound`, `Conflict`, ...).
    pub code: String,
}

/// `manifestworks_processed_total`: the agent's reads and writes of the works it holds.
pub type Processed = Family<ProcessedLabels, Counter>;

/// The `code` label of an answer: `Success`, or the API reason that refused it (sdk-go's
/// `metav1.StatusReason`; `Unknown` when there is none).
pub fn processed_code<T>(result: &Result<T, kube::Error>) -> String {
    match result {
        Ok(_) => "Success".to_string(),
        Err(kube::Error::Api(status)) if !status.reason.is_empty() => status.reason.clone(),
        Err(_) => "Unknown".to_string(),
    }
}

/// The histogram of status resync durations, with upstream's buckets.
pub fn status_resync_histogram() -> Histogram {
    Histogram::new(RESYNC_BUCKETS)
}

/// Where the collector reads the desync counts and how many works are unconfirmed now.
pub type DesyncSource = std::sync::Arc<dyn Fn() -> (DesyncCounts, usize) + Send + Sync>;

/// Desync between the source and the agent ([`super::desync`]), read at scrape time.
pub struct DesyncCollector {
    /// The counts' source.
    pub counts: DesyncSource,
}

impl std::fmt::Debug for DesyncCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DesyncCollector").finish()
    }
}

impl Collector for DesyncCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (counts, unconfirmed) = (self.counts)();
        let mut family = encoder.encode_descriptor(
            "work_agent_source_desync",
            "Works on which the source and the agent disagreed: unconfirmed (held here, not confirmed by the source's answer) or resent_after_deletion (sent again by the source after the agent deleted it).",
            None,
            ConstCounter::new(0u64).metric_type(),
        )?;
        for (kind, value) in [
            ("unconfirmed", counts.unconfirmed),
            ("resent_after_deletion", counts.resent_after_deletion),
        ] {
            ConstCounter::new(value).encode(family.encode_family(&[("kind", kind)])?)?;
        }
        let mut family = encoder.encode_descriptor(
            "work_agent_source_desync_healed",
            "Unconfirmed works settled by the source's answer to the agent's question: deleted (the source no longer held them) or confirmed (it did).",
            None,
            ConstCounter::new(0u64).metric_type(),
        )?;
        for (outcome, value) in [
            ("deleted", counts.healed_deleted),
            ("confirmed", counts.healed_confirmed),
        ] {
            ConstCounter::new(value).encode(family.encode_family(&[("outcome", outcome)])?)?;
        }
        let asked = ConstCounter::new(counts.asked);
        asked.encode(encoder.encode_descriptor(
            "work_agent_source_desync_questions",
            "Spec resync requests sent to ask the source about unconfirmed works.",
            None,
            asked.metric_type(),
        )?)?;
        let now = ConstGauge::new(i64::try_from(unconfirmed).unwrap_or(i64::MAX));
        now.encode(encoder.encode_descriptor(
            "work_agent_source_unconfirmed_works",
            "Works held here that the source's last answer did not confirm, asked about again.",
            None,
            now.metric_type(),
        )?)?;
        Ok(())
    }
}

/// Registers the transport's metrics and the status resync histogram.
pub fn register(
    registry: &mut Registry,
    stats: StatsSource,
    client_id: &str,
    status_resync: Histogram,
    processed: Processed,
    desync: DesyncSource,
) {
    registry.register_collector(Box::new(DesyncCollector { counts: desync }));
    registry.register_collector(Box::new(TransportCollector {
        stats,
        client_id: client_id.to_string(),
    }));
    registry.register(
        "resources_status_resync_duration_seconds",
        "The duration of the resource status resync in seconds.",
        status_resync,
    );
    registry.register(
        "manifestworks_processed",
        "The total number of processed manifestworks.",
        processed,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloudevents::types;
    use std::sync::Arc;

    #[test]
    fn event_types_split_into_upstreams_labels() {
        let labels = type_labels(&format!(
            "{}.status.update_request",
            types::MANIFEST_BUNDLE_DATA_TYPE
        ));
        assert_eq!(labels[0].1, types::MANIFEST_BUNDLE_DATA_TYPE);
        assert_eq!(labels[1].1, "status");
        assert_eq!(labels[2].1, "update_request");
    }

    #[test]
    fn the_transports_counters_are_scraped_under_upstreams_names() {
        let mut registry = Registry::default();
        let stats = Stats {
            ready: true,
            received: [(
                format!("{}.spec.create_request", types::MANIFEST_BUNDLE_DATA_TYPE),
                3,
            )]
            .into(),
            sent: [(
                format!("{}.status.update_request", types::MANIFEST_BUNDLE_DATA_TYPE),
                5,
            )]
            .into(),
            rejected: 1,
            reconnects: 2,
            queue_depth: 4,
            dropped: 6,
            unheard: 7,
        };
        let histogram = status_resync_histogram();
        let processed = Processed::default();
        register(
            &mut registry,
            Arc::new(move || {
                let ceiling = CeilingStats {
                    max_event_bytes: 131_072,
                    origin: cloudevents::ceiling::CeilingOrigin::Broker,
                    too_large: 2,
                };
                (stats.clone(), ceiling)
            }),
            "c1-work-agent",
            histogram.clone(),
            processed.clone(),
            Arc::new(|| {
                let counts = DesyncCounts {
                    unconfirmed: 3,
                    resent_after_deletion: 1,
                    asked: 2,
                    healed_deleted: 2,
                    healed_confirmed: 0,
                };
                (counts, 1)
            }),
        );
        histogram.observe(0.01);
        let conflict: Result<(), kube::Error> = Err(crate::hub::local_works::api_error(
            409,
            "Conflict",
            "stale".into(),
        ));
        processed
            .get_or_create(&ProcessedLabels {
                action: "patch",
                code: processed_code(&conflict),
            })
            .inc();
        processed
            .get_or_create(&ProcessedLabels {
                action: "patch",
                code: processed_code(&Ok::<(), kube::Error>(())),
            })
            .inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert!(
            text.contains(r#"cloudevents_received_total{type="io.open-cluster-management.works.v1alpha1.manifestbundles",subresource="spec",action="create_request"} 3"#),
            "{text}"
        );
        assert!(
            text.contains(r#"cloudevents_sent_total{source="c1-work-agent","#),
            "{text}"
        );
        assert!(
            text.contains(r#"cloudevents_client_reconnected_total{client_id="c1-work-agent"} 2"#),
            "{text}"
        );
        assert!(text.contains("cloudevents_publish_queue_depth 4"), "{text}");
        for line in [
            r#"work_agent_source_desync_total{kind="unconfirmed"} 3"#,
            r#"work_agent_source_desync_total{kind="resent_after_deletion"} 1"#,
            r#"work_agent_source_desync_healed_total{outcome="deleted"} 2"#,
            "work_agent_source_desync_questions_total 2",
            "work_agent_source_unconfirmed_works 1",
            "cloudevents_publish_too_large_total 2",
            r#"cloudevents_max_event_bytes{origin="the broker's Maximum Packet Size"} 131072"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(text.contains("cloudevents_subscribed 1"), "{text}");
        assert!(
            text.contains("cloudevents_publish_unheard_total 7"),
            "{text}"
        );
        assert!(
            text.contains("cloudevents_publish_dropped_total 6"),
            "{text}"
        );
        assert!(
            text.contains("resources_status_resync_duration_seconds_count 1"),
            "{text}"
        );
        assert!(text.contains("cloudevents_rejected_total 1"), "{text}");
        assert!(
            text.contains(r#"manifestworks_processed_total{action="patch",code="Conflict"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"manifestworks_processed_total{action="patch",code="Success"} 1"#),
            "{text}"
        );
        assert!(
            text.contains("cloudevents_publish_dropped_total 6"),
            "{text}"
        );
    }
}
