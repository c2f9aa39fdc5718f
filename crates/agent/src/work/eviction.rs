//! Eviction of unmanaged AppliedManifestWorks, as upstream's work agent does: an
//! AppliedManifestWork of this agent (same `agentID`) whose ManifestWork is gone from the hub, or
//! that belongs to another hub (the cluster moved to a new hub), gets `status.evictionStartTime`;
//! after the eviction grace period it is deleted (UID precondition) and its resources with it. If
//! the work reappears first, the start time is cleared. A grace period of 100 years or more
//! disables eviction (start times are then cleared).
//!
//! The controller scans periodically, reading both sides from the agent's watch stores (no
//! request). An empty store that has not finished its initial list would look like "the hub
//! has no works", so a scan is skipped until both stores are synced, and behind a broker until
//! the source's answer to the spec resync request is in (`SourceHearing::works_listed`). It is also
//! skipped while the ManifestWork watch is failing, so an unreachable hub never starts an
//! eviction: a store keeps its last full list while its watch fails (and swaps in a new list
//! only whole, after a re-list), so it never shows fewer works than the hub had at its last
//! successful list or event; and the agent creates an AppliedManifestWork only for a work it saw
//! in that store.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use work_api::{APPLIED_MANIFEST_WORK_FINALIZER, AppliedManifestWork};

use crate::config::{AgentConfig, EVICTION_DISABLED_AT};
use crate::hub::stored_work::StoredWork;
use crate::hub::{GoneWork, SourceHearing};
use crate::work::completion_memory::Remembered;
use crate::work::context::Context;
use crate::work::deletion;

/// Longest time between two scans.
const MAX_SCAN_PERIOD: Duration = Duration::from_secs(30);
/// Shortest time between two scans.
const MIN_SCAN_PERIOD: Duration = Duration::from_secs(1);

/// What to do with one AppliedManifestWork now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionStep {
    /// Not ours, or nothing to change.
    Nothing,
    /// Unmanaged and not yet marked: set `evictionStartTime`.
    Start,
    /// Unmanaged, marked, grace period not over.
    Wait,
    /// Unmanaged and the grace period is over: delete it and its resources.
    Evict,
    /// Managed again (or eviction disabled) but still marked: clear `evictionStartTime`.
    Clear,
    /// Being deleted while unmanaged: remove its resources, then its finalizer (the ManifestWork
    /// controller no longer sees it).
    FinishDeletion,
    /// Kept for a completed work deleted in an earlier run, whose source may not have heard the
    /// deletion: tell it again, and release the record once it is heard.
    Retell,
}

/// What the hub says of an AppliedManifestWork's work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HubView {
    /// The hub has the ManifestWork.
    pub has_work: bool,
    /// The hub's source must hear a deletion, and keeps no status (see `Hub::source_hearing`).
    pub source_must_hear: bool,
}

/// Decides the step for `amw` given what the hub says of its ManifestWork.
pub fn decide(
    amw: &AppliedManifestWork,
    hub: HubView,
    config: &AgentConfig,
    now: Timestamp,
) -> EvictionStep {
    if !config.is_own_agent_id(&amw.spec.agent_id) {
        return EvictionStep::Nothing;
    }
    let unmanaged = !hub.has_work || !of_this_hub(amw, config);
    let disabled = config.eviction_grace_period >= EVICTION_DISABLED_AT;
    if let Some(deleted) = amw.metadata.deletion_timestamp.as_ref() {
        let ours = amw
            .finalizers()
            .iter()
            .any(|f| f == APPLIED_MANIFEST_WORK_FINALIZER);
        if !(unmanaged && ours) {
            return EvictionStep::Nothing;
        }
        if deletion::keeps_record_until_heard(hub.source_must_hear, amw) {
            // It keeps a completed work's completion until its source heard the deletion; a
            // deletion heard by this process releases it at once (`finish_heard`). One told
            // before a restart may not have been heard: the source would then send the work
            // back, and the record must be there. So it waits as an unmanaged one does.
            // Told again when the record says who the work is to its source: once that is heard,
            // the record goes (`finish_heard`). Else it waits out the grace period.
            let known = Remembered::from_annotations(amw.metadata.annotations.as_ref())
                .is_some_and(|r| r.work.is_some());
            return if !disabled && now >= grace_over(deleted.0, config) {
                EvictionStep::FinishDeletion
            } else if known {
                EvictionStep::Retell
            } else {
                EvictionStep::Wait
            };
        }
        return EvictionStep::FinishDeletion;
    }
    let started = amw
        .status
        .as_ref()
        .and_then(|s| s.eviction_start_time.as_ref());
    match (unmanaged && !disabled, started) {
        (false, None) => EvictionStep::Nothing,
        (false, Some(_)) => EvictionStep::Clear,
        (true, None) => EvictionStep::Start,
        (true, Some(start)) => {
            if now >= grace_over(start.0, config) {
                EvictionStep::Evict
            } else {
                EvictionStep::Wait
            }
        }
    }
}

/// Whether `amw` is unmanaged because this hub does not have its work (not because it belongs to
/// another hub): the hub's list may have lost it on the way.
fn names_a_missing_work(amw: &AppliedManifestWork, hub: HubView, config: &AgentConfig) -> bool {
    !hub.has_work && of_this_hub(amw, config)
}

/// Whether `amw` was made for a work of this hub (its name starts with the hub hash).
fn of_this_hub(amw: &AppliedManifestWork, config: &AgentConfig) -> bool {
    amw.name_any().starts_with(config.hub_hash.as_str())
}

/// When the eviction grace period that started at `start` is over.
fn grace_over(start: Timestamp, config: &AgentConfig) -> Timestamp {
    let grace =
        SignedDuration::try_from(config.eviction_grace_period).unwrap_or(SignedDuration::MAX);
    start.checked_add(grace).unwrap_or(Timestamp::MAX)
}

/// Time between scans: a quarter of the grace period, within 1 s .. 30 s.
pub fn scan_period(grace: Duration) -> Duration {
    (grace / 4).clamp(MIN_SCAN_PERIOD, MAX_SCAN_PERIOD)
}

/// Stops the eviction controller when dropped.
#[derive(Debug)]
pub struct EvictionTask(tokio::task::JoinHandle<()>);

impl Drop for EvictionTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the eviction controller; it runs until the returned handle is dropped.
pub fn spawn(ctx: Arc<Context>) -> EvictionTask {
    EvictionTask(tokio::spawn(run(ctx)))
}

/// How often the hub is asked which deletions it heard while some are unheard.
const HEARD_PERIOD: Duration = Duration::from_secs(1);

/// Runs the eviction controller.
async fn run(ctx: Arc<Context>) {
    // Asked once: the hub's source stays what it is for the life of the loop.
    let source = ctx.hub.source_hearing();
    let period = scan_period(ctx.config.eviction_grace_period);
    let mut next_scan = tokio::time::Instant::now();
    let mut released = BTreeSet::new();
    loop {
        // Made before looking: a deletion heard while this turn looks still wakes the next one.
        let heard_wake: BoxFuture<'_, ()> = match source {
            Some(source) => source.events_taken(),
            // A hub without a source to hear has no news of hearing to wake for.
            None => Box::pin(std::future::pending()),
        };
        let waiting = match source {
            Some(source) => finish_heard(&ctx, source, &mut released).await,
            None => false,
        };
        let now = tokio::time::Instant::now();
        if now >= next_scan {
            // Until the stores are synced (and after a hub outage), look again soon.
            next_scan = now
                + if scan(&ctx, source).await {
                    period
                } else {
                    MIN_SCAN_PERIOD
                };
        }
        // The source's next acknowledgement wakes the loop, so a record goes as soon as its
        // deletion is heard (a turn without one to release costs a lock); while some are
        // unheard, the period is the safety net.
        let wake = if waiting {
            next_scan.min(now + HEARD_PERIOD)
        } else {
            next_scan
        };
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            () = heard_wake => {}
        }
    }
}

/// Releases the AppliedManifestWorks kept for deletions the hub's source has now heard
/// (`deletion::keeps_record_until_heard`); `released` holds the works whose release failed, for
/// the next turn. Returns whether some deletion is still unheard or some release still to do.
async fn finish_heard(
    ctx: &Context,
    source: &dyn SourceHearing,
    released: &mut BTreeSet<String>,
) -> bool {
    let heard = source.deletions_heard();
    released.extend(heard.heard);
    let namespace = ctx.config.cluster_name.as_str();
    for work in std::mem::take(released) {
        let key = ObjectRef::<StoredWork>::new(&work).within(namespace);
        match ctx.work_store.get(&key) {
            // The store has not taken the work's removal yet: look again next turn.
            Some(w) if w.metadata.deletion_timestamp.is_some() => {
                released.insert(work);
                continue;
            }
            // The work is back (created again): its own reconcile decides.
            Some(_) => continue,
            None => {}
        }
        let applied = ctx.config.applied_name(&work);
        let step = match ctx.applied.confirmed(&applied).await {
            Ok(Some(amw))
                if amw.metadata.deletion_timestamp.is_some()
                    && amw.spec.manifest_work_name == work =>
            {
                deletion::cleanup_applied(&amw, None, ctx).await.map(|_| ())
            }
            Ok(_) => Ok(()),
            Err(e) => Err(crate::error::Error::Spoke(e)),
        };
        match step {
            Ok(()) => {
                tracing::debug!(work = %work, "the source heard the deletion; AppliedManifestWork released")
            }
            Err(e) => {
                tracing::warn!(work = %work, error = %e, "AppliedManifestWork of a heard deletion not released yet");
                released.insert(work);
            }
        }
    }
    heard.unheard > 0 || !released.is_empty()
}

/// Why a scan cannot decide anything now, if it cannot.
pub fn scan_blocker(
    works_synced: bool,
    applied_synced: bool,
    hub_watch_healthy: bool,
    works_listed: bool,
) -> Option<&'static str> {
    if !works_synced {
        Some("the ManifestWork store has not finished its initial list")
    } else if !applied_synced {
        Some("the AppliedManifestWork store has not finished its initial list")
    } else if !hub_watch_healthy {
        Some("the ManifestWork watch is failing (hub unreachable?)")
    } else if !works_listed {
        Some("the source is still answering the spec resync request")
    } else {
        None
    }
}

/// One pass over the AppliedManifestWorks, from the watch stores; false if it was skipped or
/// holds marks for a new answer (the next pass comes soon).
async fn scan(ctx: &Context, source: Option<&dyn SourceHearing>) -> bool {
    if let Some(why) = scan_blocker(
        ctx.works_are_synced(),
        ctx.applied.is_synced(),
        ctx.hub.watch_is_healthy(),
        // A hub without a source to hear lists its works whole.
        source.is_none_or(|s| s.works_listed()),
    ) {
        tracing::debug!(reason = why, "eviction scan skipped");
        return false;
    }
    let namespace = ctx.config.cluster_name.as_str();
    // Only the ones with something to do are kept: a pass over 100,000 works holds a handful.
    let steps: Vec<_> = ctx.applied.scan(|amw| {
        let key = ObjectRef::<StoredWork>::new(&amw.spec.manifest_work_name).within(namespace);
        let hub = HubView {
            has_work: ctx.work_store.get(&key).is_some(),
            source_must_hear: source.is_some(),
        };
        let step = decide(&amw, hub, &ctx.config, Timestamp::now());
        if matches!(step, EvictionStep::Nothing | EvictionStep::Wait) {
            return None;
        }
        let missing = step == EvictionStep::Start && names_a_missing_work(&amw, hub, &ctx.config);
        Some((amw, step, missing))
    });
    let missing = steps.iter().filter(|(_, _, missing)| *missing).count();
    // The new answer may bring them; the next scan waits for it.
    let hold_marks = missing > 0 && source.is_some_and(|s| s.ask_again_for_missing_works(missing));
    for (amw, step, missing) in steps {
        if hold_marks && missing {
            continue;
        }
        if let Err(e) = act(ctx, source, &amw, step).await {
            tracing::warn!(applied = %amw.name_any(), error = %e, "AppliedManifestWork eviction step failed");
        }
    }
    tracing::debug!("eviction scan done");
    // Waiting for a new answer: look again soon.
    !hold_marks
}

async fn act(
    ctx: &Context,
    source: Option<&dyn SourceHearing>,
    amw: &AppliedManifestWork,
    step: EvictionStep,
) -> Result<(), crate::error::Error> {
    let name = amw.name_any();
    let api = ctx.applied_works();
    match step {
        EvictionStep::Nothing | EvictionStep::Wait => Ok(()),
        EvictionStep::Start | EvictionStep::Clear => {
            let start = (step == EvictionStep::Start).then(|| Time(Timestamp::now()));
            let patch = json!({
                "metadata": {"uid": amw.metadata.uid, "resourceVersion": amw.metadata.resource_version},
                "status": {"evictionStartTime": start},
            });
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(crate::error::Error::Spoke)?;
            tracing::info!(
                applied = %name,
                work = %amw.spec.manifest_work_name,
                grace_seconds = ctx.config.eviction_grace_period.as_secs(),
                "{}",
                if start.is_some() {
                    "AppliedManifestWork is unmanaged (its work is gone from the hub, or it belongs to another hub); eviction starts"
                } else {
                    "AppliedManifestWork is managed again; eviction stopped"
                }
            );
            Ok(())
        }
        EvictionStep::Evict => {
            let params = crate::params::delete_background_of(amw.metadata.uid.clone());
            match api.delete(&name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => return Ok(()),
                Err(e) => return Err(crate::error::Error::Spoke(e)),
            }
            tracing::info!(applied = %name, agent_id = %ctx.config.agent_id, "AppliedManifestWork evicted after the eviction grace period");
            Ok(())
        }
        EvictionStep::Retell => {
            let remembered = Remembered::from_annotations(amw.metadata.annotations.as_ref());
            // Only decided where the source must hear it; a hub without one heard it already.
            let (Some(source), Some(work)) = (source, remembered.and_then(|r| r.work)) else {
                return Ok(());
            };
            source
                .retell_deletion(GoneWork {
                    name: &amw.spec.manifest_work_name,
                    uid: &work.uid,
                    source: &work.source,
                    generation: work.generation,
                })
                .map_err(crate::error::Error::Hub)
        }
        EvictionStep::FinishDeletion => {
            if deletion::cleanup_applied(amw, None, ctx).await? {
                tracing::info!(applied = %name, "evicted AppliedManifestWork and its resources removed");
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HUB: &str = "https://hub.example:6443";

    fn config(grace: Duration) -> AgentConfig {
        AgentConfig::new("c1".into(), "agent-1".into(), HUB).with_eviction_grace_period(grace)
    }

    fn amw(config: &AgentConfig, agent: &str, started: Option<&str>) -> AppliedManifestWork {
        let mut v = json!({
            "apiVersion": "work.open-cluster-management.io/v1",
            "kind": "AppliedManifestWork",
            "metadata": {"name": config.applied_name("w1"), "uid": "u1"},
            "spec": {"hubHash": config.hub_hash, "agentID": agent, "manifestWorkName": "w1"},
        });
        if let Some(at) = started {
            v["status"] = json!({"evictionStartTime": at});
        }
        serde_json::from_value(v).expect("valid AppliedManifestWork")
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    const NOW: &str = "2026-01-01T10:00:00Z";

    /// A Kubernetes hub that has the work.
    const MANAGED: HubView = HubView {
        has_work: true,
        source_must_hear: false,
    };
    /// A Kubernetes hub without the work.
    const GONE: HubView = HubView {
        has_work: false,
        source_must_hear: false,
    };

    #[test]
    fn a_work_gone_from_the_hub_is_marked_then_evicted_after_the_grace_period() {
        let c = config(Duration::from_secs(60));
        assert_eq!(
            decide(&amw(&c, "agent-1", None), GONE, &c, ts(NOW)),
            EvictionStep::Start
        );
        let marked = amw(&c, "agent-1", Some("2026-01-01T09:59:30Z"));
        assert_eq!(decide(&marked, GONE, &c, ts(NOW)), EvictionStep::Wait);
        let old = amw(&c, "agent-1", Some("2026-01-01T09:59:00Z"));
        assert_eq!(decide(&old, GONE, &c, ts(NOW)), EvictionStep::Evict);
    }

    #[test]
    fn a_work_back_on_the_hub_clears_the_mark_and_a_managed_one_is_left_alone() {
        let c = config(Duration::from_secs(60));
        let marked = amw(&c, "agent-1", Some("2026-01-01T09:00:00Z"));
        assert_eq!(decide(&marked, MANAGED, &c, ts(NOW)), EvictionStep::Clear);
        assert_eq!(
            decide(&amw(&c, "agent-1", None), MANAGED, &c, ts(NOW)),
            EvictionStep::Nothing
        );
    }

    #[test]
    fn another_agents_work_is_never_touched() {
        let c = config(Duration::from_secs(60));
        let other = amw(&c, "agent-2", Some("2020-01-01T00:00:00Z"));
        assert_eq!(decide(&other, GONE, &c, ts(NOW)), EvictionStep::Nothing);
    }

    #[test]
    fn the_hub_hash_is_an_own_id_only_when_the_agent_id_was_generated() {
        let given = config(Duration::from_secs(60));
        let upstream_default = amw(&given, &given.hub_hash, None);
        assert_eq!(
            decide(&upstream_default, GONE, &given, ts(NOW)),
            EvictionStep::Nothing,
            "--agent-id given: only that ID, as upstream"
        );
        let generated = config(Duration::from_secs(60)).with_generated_agent_id(true);
        assert_eq!(
            decide(&upstream_default, GONE, &generated, ts(NOW)),
            EvictionStep::Start,
            "no ID given: upstream's agent would have had the hub hash"
        );
        let other = amw(&generated, "agent-2", None);
        assert_eq!(
            decide(&other, GONE, &generated, ts(NOW)),
            EvictionStep::Nothing
        );
    }

    #[test]
    fn another_hubs_work_is_evicted_even_if_a_work_of_that_name_exists_here() {
        let c = config(Duration::from_secs(60));
        let other_hub = config(Duration::from_secs(60));
        let mut foreign = amw(&other_hub, "agent-1", None);
        foreign.metadata.name = Some(format!("{}-w1", "0".repeat(64)));
        assert_eq!(decide(&foreign, MANAGED, &c, ts(NOW)), EvictionStep::Start);
    }

    #[test]
    fn a_hundred_years_disables_eviction_and_clears_marks() {
        let c = config(EVICTION_DISABLED_AT);
        assert_eq!(
            decide(&amw(&c, "agent-1", None), GONE, &c, ts(NOW)),
            EvictionStep::Nothing
        );
        let marked = amw(&c, "agent-1", Some("2020-01-01T00:00:00Z"));
        assert_eq!(decide(&marked, GONE, &c, ts(NOW)), EvictionStep::Clear);
    }

    #[test]
    fn a_deleted_unmanaged_one_with_our_finalizer_is_finished() {
        let c = config(Duration::from_secs(60));
        let mut deleting = amw(&c, "agent-1", Some("2026-01-01T09:00:00Z"));
        deleting.metadata.deletion_timestamp = Some(Time(ts(NOW)));
        assert_eq!(
            decide(&deleting, GONE, &c, ts(NOW)),
            EvictionStep::Nothing,
            "no finalizer"
        );
        deleting.metadata.finalizers = Some(vec![APPLIED_MANIFEST_WORK_FINALIZER.to_string()]);
        assert_eq!(
            decide(&deleting, GONE, &c, ts(NOW)),
            EvictionStep::FinishDeletion
        );
        assert_eq!(
            decide(&deleting, MANAGED, &c, ts(NOW)),
            EvictionStep::Nothing,
            "the work controller's"
        );
    }

    /// Found by `chaos --hub grpc` (seed 1795770553760893524, work w3, and in CI): an agent
    /// killed after the TTL deletion of a completed work, before the source took `Deleted`, got
    /// the work back after its restart, found no record of the completion and applied it again.
    #[test]
    fn a_deleted_record_of_a_completion_waits_for_its_source_after_a_restart() {
        let c = config(Duration::from_secs(600));
        let mut deleting = amw(&c, "agent-1", None);
        deleting.metadata.deletion_timestamp = Some(Time(ts(NOW)));
        deleting.metadata.finalizers = Some(vec![APPLIED_MANIFEST_WORK_FINALIZER.to_string()]);
        deleting.metadata.annotations = Some(
            [(
                crate::work::completion_memory::ANNOTATION.to_string(),
                json!({"complete": {"type": "Complete", "status": "True", "reason": "Done",
                    "message": "", "lastTransitionTime": "2026-01-01T09:00:00Z"}})
                .to_string(),
            )]
            .into(),
        );
        let broker_gone = HubView {
            has_work: false,
            source_must_hear: true,
        };
        assert_eq!(
            decide(&deleting, broker_gone, &c, ts(NOW)),
            EvictionStep::Wait,
            "the source may send the work back"
        );
        assert_eq!(
            decide(&deleting, broker_gone, &c, ts("2026-01-01T10:10:00Z")),
            EvictionStep::FinishDeletion,
            "after the grace period, as any unmanaged record"
        );
        assert_eq!(
            decide(&deleting, GONE, &c, ts(NOW)),
            EvictionStep::FinishDeletion,
            "a Kubernetes hub keeps the completion itself"
        );
        let mut plain = deleting.clone();
        plain.metadata.annotations = None;
        assert_eq!(
            decide(&plain, broker_gone, &c, ts(NOW)),
            EvictionStep::FinishDeletion,
            "nothing completed to remember"
        );
    }

    /// Found by `chaos --hub grpc` (seed 1795799655657392606, work w5): the agent was killed
    /// after the source took the `Deleted` of a completed work and before it released the
    /// record; the new process kept the record for the whole grace period (an hour by default).
    /// A record that says who the work is to its source is told again at once instead.
    #[test]
    fn a_deleted_record_that_names_its_work_is_told_again_not_left_waiting() {
        let c = config(Duration::from_secs(600));
        let mut deleting = amw(&c, "agent-1", None);
        deleting.metadata.deletion_timestamp = Some(Time(ts(NOW)));
        deleting.metadata.finalizers = Some(vec![APPLIED_MANIFEST_WORK_FINALIZER.to_string()]);
        let memory = |work: serde_json::Value| {
            let mut m = json!({"complete": {"type": "Complete", "status": "True", "reason": "Done",
                "message": "", "lastTransitionTime": "2026-01-01T09:00:00Z"}});
            m["work"] = work;
            Some(
                [(
                    crate::work::completion_memory::ANNOTATION.to_string(),
                    m.to_string(),
                )]
                .into(),
            )
        };
        deleting.metadata.annotations =
            memory(json!({"uid": "u1", "source": "maestro", "generation": 2}));
        let broker_gone = HubView {
            has_work: false,
            source_must_hear: true,
        };
        assert_eq!(
            decide(&deleting, broker_gone, &c, ts(NOW)),
            EvictionStep::Retell
        );
        assert_eq!(
            decide(&deleting, broker_gone, &c, ts("2026-01-01T10:10:00Z")),
            EvictionStep::FinishDeletion,
            "after the grace period, as any unmanaged record"
        );
        deleting.metadata.annotations = memory(serde_json::Value::Null);
        assert_eq!(
            decide(&deleting, broker_gone, &c, ts(NOW)),
            EvictionStep::Wait,
            "a record written before it named its work"
        );
    }

    #[test]
    fn a_scan_waits_for_both_full_lists_a_working_hub_watch_and_the_sources_answer() {
        assert!(
            scan_blocker(false, true, true, true).is_some_and(|w| w.contains("ManifestWork store"))
        );
        assert!(
            scan_blocker(true, false, true, true)
                .is_some_and(|w| w.contains("AppliedManifestWork"))
        );
        assert!(scan_blocker(true, true, false, true).is_some_and(|w| w.contains("failing")));
        assert!(scan_blocker(true, true, true, false).is_some_and(|w| w.contains("resync")));
        assert_eq!(scan_blocker(true, true, true, true), None);
    }

    #[test]
    fn scans_follow_the_grace_period_within_bounds() {
        assert_eq!(scan_period(Duration::from_secs(4)), Duration::from_secs(1));
        assert_eq!(scan_period(Duration::from_secs(8)), Duration::from_secs(2));
        assert_eq!(
            scan_period(Duration::from_secs(3600)),
            Duration::from_secs(30)
        );
    }
}
