//! The hub behind a broker: a Maestro-shaped source on a private mosquitto (MQTT) or a gRPC source
//! (the broker and the source are one server there, as in Maestro and OCM), the agent's config
//! and command line for it, the faults on that path, and the poll that shows the driver the
//! source's view (completions, TTL deletions) as its watch of the hub's works does for a
//! Kubernetes hub.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cloudevents::codec::ManifestBundleStatus;
use cloudevents::{CloudEvent, EventType};
use serde_json::{Value, json};
use test_support::broker_source::BrokerSource;
pub use test_support::broker_source::Transport;
use test_support::grpc_source::GrpcSourceOptions;
use test_support::maestro::{self, Maestro, StoredResource};
use test_support::mosquitto::Limits;
use test_support::wire_faults::{FaultCounters, WireFaults};
use work_api::ManifestWork;

use crate::rng::Rng;
use crate::world::Shared;

/// A fault on the broker path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokerFault {
    /// MQTT: mosquitto killed and started again on its port after 1-5 s. gRPC: the server
    /// (broker and source in one) stopped, and serving again on its port after 1-5 s.
    BrokerRestart,
    /// MQTT only: the source's connection dropped with what was queued on it, a new client,
    /// then Maestro's status resync request, in batches of 1-3 hashes.
    SourceRestart,
    /// The next 1-3 spec events sent twice.
    Duplicate,
    /// The next 1-2 spec events held back behind the next one.
    Reorder,
    /// An older spec event of a live resource sent again.
    Stale,
    /// The next spec resync answer (to the agent's next subscribe) in 2-4 parts, the later
    /// parts behind later events.
    SplitResync,
    /// The next 1-5 status events lost in flight: MQTT, the source drops them (as one that
    /// crashed before storing them) and restarts 3-8 s later, asking for a status resync;
    /// gRPC, the `Publish` fails with `Unavailable` unapplied.
    LoseStatuses,
}

impl BrokerFault {
    /// Name in reports.
    pub fn name(self, wire: Transport) -> &'static str {
        match (self, wire) {
            (BrokerFault::BrokerRestart, Transport::Mqtt) => "mosquitto restart",
            (BrokerFault::BrokerRestart, Transport::Grpc) => {
                "gRPC server (broker and source) restart"
            }
            (BrokerFault::BrokerRestart, Transport::PubSub) => "fake Pub/Sub server restart",
            (BrokerFault::SourceRestart, _) => "source restart (status resync after)",
            (BrokerFault::Duplicate, _) => "spec events duplicated (armed)",
            (BrokerFault::Reorder, _) => "spec events reordered (armed)",
            (BrokerFault::Stale, _) => "stale spec event sent again",
            (BrokerFault::SplitResync, _) => "spec resync answer split (armed)",
            (BrokerFault::LoseStatuses, _) => "status events lost (armed)",
        }
    }

    /// The broker faults of one cycle on `wire`.
    pub fn all(wire: Transport) -> Vec<BrokerFault> {
        let mut all = vec![
            BrokerFault::BrokerRestart,
            BrokerFault::Duplicate,
            BrokerFault::Duplicate,
            BrokerFault::Reorder,
            BrokerFault::Reorder,
            BrokerFault::Stale,
            BrokerFault::Stale,
            BrokerFault::SplitResync,
            BrokerFault::LoseStatuses,
        ];
        if wire == Transport::Mqtt {
            all.push(BrokerFault::SourceRestart);
        }
        all
    }
}

/// The source, the names it knows the driver's works by, and how the agent reaches it.
pub struct BrokerHub {
    wire: Transport,
    source: tokio::sync::Mutex<BrokerSource>,
    consumer: String,
    /// The `brokerHost` or `url` of the agent's config (the hub hash's input).
    address: String,
    /// Work name → resource id.
    ids: Mutex<BTreeMap<String, String>>,
}

impl BrokerHub {
    /// Starts the broker and the source for `consumer`; writes the agent's config into `dir`.
    /// Every event on the wire is at most `ceiling` bytes: on MQTT the broker says so in its
    /// CONNACK; on gRPC and Pub/Sub the agent's config file does.
    pub async fn start(
        wire: Transport,
        consumer: &str,
        dir: &Path,
        ceiling: u32,
    ) -> Result<(Self, PathBuf), String> {
        let limits = Limits {
            max_packet_bytes: ceiling,
            ..Limits::default()
        };
        let source =
            BrokerSource::start_limited(wire, "chaos", GrpcSourceOptions::default(), limits)
                .await?;
        // On Pub/Sub the consumer's subscriptions, as Maestro's agent chart makes them.
        source.add_consumer(consumer).await?;
        let extra = match wire {
            Transport::Mqtt => String::new(),
            Transport::Grpc => format!("maxSendMessageSize: {ceiling}\n"),
            Transport::PubSub => format!("maxMessageSize: {ceiling}\n"),
        };
        let config = source.write_agent_config(consumer, &extra, dir)?;
        Ok((
            Self {
                wire,
                address: source.address(),
                source: tokio::sync::Mutex::new(source),
                consumer: consumer.to_string(),
                ids: Mutex::default(),
            },
            config,
        ))
    }

    /// sha256 of the address in the agent's config.
    pub fn hub_hash(&self) -> String {
        work_api::hub_hash(&self.address)
    }

    /// The agent's command line for this wire: Maestro's chart (MQTT), the klusterlet's (gRPC).
    pub fn agent_args(&self, config: &Path, spoke_kubeconfig: &Path, http: u16) -> Vec<String> {
        let mut args = self
            .wire
            .agent_args(&self.consumer, config, spoke_kubeconfig);
        args.extend([
            format!("--http-address=127.0.0.1:{http}"),
            "--health-address=off".into(),
            // CHAOS_AGENT_LOG (e.g. `info,agent::hub::broker=debug,cloudevents=debug`) for a
            // reproduction that needs more than the default.
            format!(
                "--log-level={}",
                std::env::var("CHAOS_AGENT_LOG").unwrap_or_else(|_| "info".into())
            ),
        ]);
        args
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.ids.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The resource id of work `name`.
    pub fn id_of(&self, name: &str) -> Option<String> {
        self.ids().get(name).cloned()
    }

    fn name_of(&self, id: &str) -> Option<String> {
        self.ids()
            .iter()
            .find(|(_, i)| i.as_str() == id)
            .map(|(n, _)| n.clone())
    }

    /// Creates the resource of work `name` (Maestro names it by its id; the driver keeps the map).
    pub async fn create(&self, name: &str, spec: &Value) -> Result<(), String> {
        let bundle = bundle(spec);
        let id = self
            .source
            .lock()
            .await
            .maestro()
            .create(&self.consumer, bundle)
            .map_err(|e| e.to_string())?;
        self.ids().insert(name.to_string(), id);
        Ok(())
    }

    /// A new version of the resource of work `name`; false when the source does not hold it.
    pub async fn edit(&self, name: &str, spec: &Value) -> Result<bool, String> {
        let bundle = bundle(spec);
        self.on_held(name, |source, id| source.update(id, bundle).map(drop))
            .await
    }

    /// Soft-deletes the resource of work `name` (gone once the agent reports `Deleted`); false
    /// when the source does not hold it.
    pub async fn delete(&self, name: &str) -> Result<bool, String> {
        self.on_held(name, |source, id| source.delete(id)).await
    }

    /// Runs `op` on the resource of work `name`; false (and `op` not run) when the source does
    /// not hold it.
    async fn on_held(
        &self,
        name: &str,
        op: impl FnOnce(&Maestro, &str) -> Result<(), maestro::Error>,
    ) -> Result<bool, String> {
        let Some(id) = self.id_of(name) else {
            return Ok(false);
        };
        let source = self.source.lock().await;
        let source = source.maestro();
        if source.resource(&id).is_none() {
            return Ok(false);
        }
        op(source, &id).map(|()| true).map_err(|e| e.to_string())
    }

    /// Work `name` as the source holds it.
    pub async fn get(&self, name: &str) -> Option<ManifestWork> {
        let id = self.id_of(name)?;
        let r = self.source.lock().await.maestro().resource(&id)?;
        Some(as_work(name, &r))
    }

    /// Every work the source holds (of the driver's names).
    pub async fn list(&self) -> Vec<ManifestWork> {
        let resources = self.source.lock().await.maestro().resources();
        self.list_of(&resources)
    }

    /// Sends the oldest batch of held spec events; false when none.
    pub async fn release_held(&self) -> bool {
        self.source
            .lock()
            .await
            .maestro()
            .release_held()
            .unwrap_or(false)
    }

    /// Disarms the wire faults and sends everything they still hold.
    pub async fn calm(&self) {
        let source = self.source.lock().await;
        let source = source.maestro();
        source.faults(WireFaults::disarm);
        while source.release_held().unwrap_or(false) {}
    }

    /// The wire history of work `name`, for a violation's report: its resource id, every spec
    /// event the source sent for it (type, version, deleting, time) and every status it received.
    pub async fn history(&self, name: &str) -> String {
        let Some(id) = self.id_of(name) else {
            return "no resource".into();
        };
        let source = self.source.lock().await;
        let source = source.maestro();
        let line = |ev: &CloudEvent| {
            let ty = ev.type_.rsplit('.').next().unwrap_or_default().to_string();
            let version = ev
                .ext_integer(cloudevents::types::EXT_RESOURCE_VERSION)
                .ok()
                .flatten()
                .unwrap_or(-1);
            let deleting = ev
                .extensions
                .contains_key(cloudevents::types::EXT_DELETION_TIMESTAMP);
            let time = ev.time.map(|t| t.format("%H:%M:%S%.3f").to_string());
            format!(
                "{ty} v{version}{} {}",
                if deleting { " deleting" } else { "" },
                time.unwrap_or_default()
            )
        };
        let of_id = |ev: &&CloudEvent| {
            ev.ext_string(cloudevents::types::EXT_RESOURCE_ID)
                .as_deref()
                == Some(id.as_str())
        };
        let sent: Vec<String> = source.sent().iter().filter(of_id).map(line).collect();
        let received: Vec<String> = source.events().iter().filter(of_id).map(line).collect();
        format!(
            "resource {id}; sent: [{}]; received: [{}]",
            sent.join(", "),
            received.join(", ")
        )
    }

    /// What the wire faults injected.
    pub async fn fault_counters(&self) -> FaultCounters {
        self.source.lock().await.maestro().faults(|f| f.counters())
    }

    /// Injects one fault; Ok says what it did.
    pub async fn inject(
        &self,
        fault: BrokerFault,
        shared: &Shared,
        rng: &mut Rng,
    ) -> Result<String, String> {
        match fault {
            BrokerFault::BrokerRestart => {
                let down = Duration::from_millis(rng.range(1000, 5000));
                hub_down(shared, self.restart_broker(down, rng))
                    .await
                    .map(|()| format!("down for {down:?}"))
            }
            BrokerFault::SourceRestart => {
                let batch = rng.range(1, 4) as usize;
                hub_down(shared, self.restart_source(batch))
                    .await
                    .map(|()| format!("status resync in batches of {batch}"))
            }
            BrokerFault::Duplicate => {
                let n = rng.range(1, 4);
                self.source
                    .lock()
                    .await
                    .maestro()
                    .faults(|f| f.duplicate_next(n));
                Ok(format!("next {n}"))
            }
            BrokerFault::Reorder => {
                let n = rng.range(1, 3);
                self.source
                    .lock()
                    .await
                    .maestro()
                    .faults(|f| f.reorder_next(n));
                Ok(format!("next {n}"))
            }
            BrokerFault::SplitResync => {
                let parts = rng.range(2, 5) as usize;
                self.source
                    .lock()
                    .await
                    .maestro()
                    .faults(|f| f.split_next_answers(1, parts));
                Ok(format!("next answer in {parts} parts"))
            }
            BrokerFault::Stale => self.send_stale(rng).await,
            BrokerFault::LoseStatuses => {
                let n = rng.range(1, 6);
                self.source
                    .lock()
                    .await
                    .maestro()
                    .faults(|f| f.lose_next_statuses(n));
                let window = Duration::from_millis(rng.range(3000, 8000));
                tokio::time::sleep(window).await;
                self.source
                    .lock()
                    .await
                    .maestro()
                    .faults(|f| f.lose_next_statuses(0));
                if self.wire == Transport::Mqtt {
                    let batch = rng.range(1, 4) as usize;
                    hub_down(shared, self.restart_source(batch)).await?;
                }
                Ok(format!("up to {n} for {window:?}"))
            }
        }
    }

    async fn restart_broker(&self, down: Duration, rng: &mut Rng) -> Result<(), String> {
        let mut source = self.source.lock().await;
        source.stop_hub().await;
        tokio::time::sleep(down).await;
        source.start_hub().await?;
        let BrokerSource::Mqtt { source, .. } = &*source else {
            return Ok(());
        };
        // The source reconnects by itself; then, as Maestro does when its subscription comes
        // up, it asks for the statuses it may have missed.
        let deadline = Instant::now() + Duration::from_secs(15);
        while !source.is_subscribed() {
            if Instant::now() > deadline {
                return Err("the source did not resubscribe within 15 s".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let batch = rng.range(1, 4) as usize;
        source
            .request_status_resyncs(batch)
            .map_err(|e| e.to_string())
    }

    async fn restart_source(&self, batch: usize) -> Result<(), String> {
        match &mut *self.source.lock().await {
            BrokerSource::Mqtt { source, .. } => {
                source.restart(batch).await.map_err(|e| e.to_string())
            }
            // One process with the broker: a source restart is a server restart.
            BrokerSource::Grpc(s) => s.restart().await.map_err(|e| e.to_string()),
            BrokerSource::PubSub(_) => {
                Err("chaos runs no Pub/Sub source (--hub kube, mqtt or grpc)".into())
            }
        }
    }

    /// Sends again an older spec event (with data) of a live resource, as a late redelivery.
    async fn send_stale(&self, rng: &mut Rng) -> Result<String, String> {
        let source = self.source.lock().await;
        let source = source.maestro();
        let live: BTreeMap<String, i64> = source
            .resources()
            .into_iter()
            .filter(|r| r.deleted_at.is_none() && r.version > 1)
            .map(|r| (r.id, r.version))
            .collect();
        let older: Vec<CloudEvent> = source
            .sent()
            .into_iter()
            .filter(|ev| {
                matches!(
                    ev.event_type(),
                    Ok(EventType::SpecCreate | EventType::SpecUpdate)
                ) && ev.data.is_some()
            })
            .filter(|ev| {
                let id = ev
                    .ext_string(cloudevents::types::EXT_RESOURCE_ID)
                    .unwrap_or_default();
                let version = ev
                    .ext_integer(cloudevents::types::EXT_RESOURCE_VERSION)
                    .ok()
                    .flatten();
                live.get(&id)
                    .is_some_and(|v| version.is_some_and(|old| old < *v))
            })
            .collect();
        let Some(ev) = rng.pick(&older).cloned() else {
            return Ok("no live resource at version 2 or more".into());
        };
        let what = format!(
            "{} version {:?}",
            ev.ext_string(cloudevents::types::EXT_RESOURCE_ID)
                .unwrap_or_default(),
            ev.ext_integer(cloudevents::types::EXT_RESOURCE_VERSION)
                .ok()
                .flatten()
        );
        source
            .publish_event(&self.consumer, ev)
            .map_err(|e| e.to_string())?;
        Ok(what)
    }

    /// The works the source holds, and the works it forgot after a `Deleted` status from the
    /// `from`-th such deletion on (0-based), each as it went: its last conditions, deleted when
    /// the source took its `Deleted` (the agent's TTL collection, unless the driver asked).
    pub async fn snapshot(&self, from: usize) -> (Vec<ManifestWork>, Vec<ManifestWork>) {
        let source = self.source.lock().await;
        let source = source.maestro();
        let deletions = source.hard_deletions();
        let works = self.list_of(&source.resources());
        let gone = deletions
            .iter()
            .skip(from)
            .map(|d| {
                let name = self.name_of(&d.id).unwrap_or_default();
                let last = StoredResource {
                    version: 0,
                    deleted_at: Some(d.at),
                    status: Some(d.status.clone()),
                    ..StoredResource::new(&d.id, &self.consumer, Value::Null, Value::Null, 0)
                };
                as_work(&name, &last)
            })
            .collect();
        (works, gone)
    }

    fn list_of(&self, resources: &[StoredResource]) -> Vec<ManifestWork> {
        resources
            .iter()
            .filter_map(|r| self.name_of(&r.id).map(|n| as_work(&n, r)))
            .collect()
    }
}

/// Runs `restart` with the hub marked down (the workload pauses, the recovery window restarts).
async fn hub_down<T>(shared: &Shared, restart: impl Future<Output = T>) -> T {
    shared.lock().hub_down_since = Some(Instant::now());
    let result = restart.await;
    let mut w = shared.lock();
    w.hub_down_since = None;
    w.hub_up_at = Some(Instant::now());
    result
}

/// The ManifestBundle of a ManifestWork spec.
fn bundle(spec: &Value) -> Value {
    let mut b = json!({"manifests": spec["workload"]["manifests"].clone()});
    for key in ["deleteOption", "manifestConfigs"] {
        if let Some(v) = spec.get(key) {
            b[key] = v.clone();
        }
    }
    b
}

/// The ManifestWork a stored resource stands for: named `name`, its version as generation,
/// deleting when soft-deleted, the latest accepted status.
fn as_work(name: &str, r: &StoredResource) -> ManifestWork {
    let status = r
        .status
        .clone()
        .and_then(|s| serde_json::from_value::<ManifestBundleStatus>(s).ok())
        .map(ManifestBundleStatus::into_status);
    let mut metadata = json!({
        "name": name,
        "namespace": r.consumer,
        "uid": r.id,
        "generation": r.version,
    });
    if let Some(t) = r.deleted_at {
        metadata["deletionTimestamp"] = json!(t.to_rfc3339());
    }
    let value = json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": metadata,
        "spec": {"workload": {"manifests": []}},
        "status": status,
    });
    serde_json::from_value(value).unwrap_or_else(|_| ManifestWork::new(name, Default::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(status: Option<Value>) -> StoredResource {
        StoredResource {
            version: 3,
            status,
            statuses_accepted: 1,
            spec_events_sent: 3,
            ..StoredResource::new(
                "4717d8e0",
                "c1",
                json!({"name": "4717d8e0"}),
                json!({"manifests": []}),
                1,
            )
        }
    }

    #[test]
    fn a_resource_is_shown_as_the_work_it_stands_for() {
        let status = json!({
            "conditions": [{"type": "Applied", "status": "True", "reason": "r", "message": "",
                            "lastTransitionTime": "2026-11-27T01:00:00Z", "observedGeneration": 3}],
            "resourceStatus": [{"resourceMeta": {"ordinal": 0, "group": "", "version": "v1",
                                "kind": "ConfigMap", "resource": "configmaps", "name": "a",
                                "namespace": "ns"}, "conditions": []}]
        });
        let w = as_work("w7", &stored(Some(status)));
        assert_eq!(w.metadata.name.as_deref(), Some("w7"));
        assert_eq!(w.metadata.generation, Some(3));
        assert_eq!(w.metadata.uid.as_deref(), Some("4717d8e0"));
        assert!(w.metadata.deletion_timestamp.is_none());
        let st = w.status.expect("status");
        assert_eq!(st.conditions[0].observed_generation, Some(3));
        let manifests = st.resource_status.expect("resource status").manifests;
        assert_eq!(manifests.len(), 1);

        let mut deleting = stored(None);
        deleting.deleted_at = Some("2026-11-27T01:02:03Z".parse().expect("time"));
        let w = as_work("w8", &deleting);
        assert!(w.status.is_none());
        assert_eq!(
            w.metadata.deletion_timestamp.map(|t| t.0.as_second()),
            Some(1_795_741_323)
        );
    }

    #[test]
    fn a_bundle_carries_the_specs_manifests_and_options() {
        let spec = json!({"workload": {"manifests": [{"kind": "ConfigMap"}]},
                          "manifestConfigs": [{"x": 1}],
                          "deleteOption": {"propagationPolicy": "Orphan"}});
        assert_eq!(
            bundle(&spec),
            json!({"manifests": [{"kind": "ConfigMap"}], "manifestConfigs": [{"x": 1}],
                   "deleteOption": {"propagationPolicy": "Orphan"}})
        );
        let bare = json!({"workload": {"manifests": []}});
        assert_eq!(bundle(&bare), json!({"manifests": []}));
    }
}
