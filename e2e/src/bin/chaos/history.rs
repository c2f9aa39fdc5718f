//! The driver's own watches: ManifestWorks on the hub (completions, TTL deletions; behind a
//! broker, a poll of the source's store and of the works it forgot) and the labelled objects on
//! the spoke (writes after Complete, deletions of objects the agent does not
//! own). Watches re-list after API server restarts and compactions; what a gap hides (a work that
//! completed and was collected inside it), the final checks find or report as unverified.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use work_api::ManifestWork;

use crate::broker::BrokerHub;
use crate::hub::Hub;
use crate::kubeops::{agent_fingerprint, api, api_all, condition, obj_ref};
use crate::workload::{Phase, RUN_LABEL};
use crate::world::{Completion, Shared};

/// Pause after a watch error before the watcher retries.
const RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// Kinds watched on the spoke: (group, version, kind, plural).
pub const SPOKE_KINDS: &[(&str, &str, &str, &str)] = &[
    ("", "v1", "ConfigMap", "configmaps"),
    ("batch", "v1", "Job", "jobs"),
    ("apps", "v1", "Deployment", "deployments"),
];

/// How often the source behind a broker is polled.
const POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// Starts the watches; they run until the process ends.
pub fn start(shared: &Shared, hub: &Hub, spoke: Client, run: &str) {
    match hub {
        Hub::Kube { works, .. } => {
            tokio::spawn(watch_works(
                shared.clone(),
                (**works).clone(),
                spoke.clone(),
            ));
        }
        Hub::Broker(b) => {
            tokio::spawn(poll_source(shared.clone(), b.clone(), spoke.clone()));
        }
    }
    for (group, version, kind, plural) in SPOKE_KINDS {
        let api = api_all(&spoke, group, version, kind, plural);
        let cfg = watcher::Config::default().labels(&format!("{RUN_LABEL}={run}"));
        tokio::spawn(watch_spoke(
            shared.clone(),
            api,
            cfg,
            (group, version, kind, plural),
        ));
    }
}

async fn watch_works(shared: Shared, works: Api<ManifestWork>, spoke: Client) {
    let mut stream = watcher(works, watcher::Config::default()).boxed();
    loop {
        match stream.try_next().await {
            Ok(Some(watcher::Event::Apply(w) | watcher::Event::InitApply(w))) => {
                on_work(&shared, &w, &spoke).await;
            }
            Ok(Some(watcher::Event::Delete(w))) => {
                on_work(&shared, &w, &spoke).await;
                on_gone(&shared, &w);
            }
            Ok(Some(_)) => {}
            Ok(None) => return,
            // The watcher retries on the next poll (API server down, 410 Gone re-lists); a short
            // pause keeps the gaps in the history short.
            Err(_) => tokio::time::sleep(RETRY).await,
        }
    }
}

/// The source's view, as the watch of a Kubernetes hub's works reports it: every work it holds,
/// then every work it forgot (deleted at the time it took the agent's `Deleted`).
async fn poll_source(shared: Shared, broker: Arc<BrokerHub>, spoke: Client) {
    let mut seen = 0;
    loop {
        let (works, gone) = broker.snapshot(seen).await;
        seen += gone.len();
        for w in &works {
            on_work(&shared, w, &spoke).await;
        }
        for w in &gone {
            on_work(&shared, w, &spoke).await;
            on_gone(&shared, w);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Marks a work gone from the hub.
fn on_gone(shared: &Shared, work: &ManifestWork) {
    let name = work.metadata.name.clone().unwrap_or_default();
    if let Some(m) = shared.lock().works.get_mut(&name) {
        m.phase = Phase::Gone;
    }
}

/// Records what a work's hub copy says: its completion (with the fingerprints of the agent's
/// writes to its objects at that time) and a deletion the driver did not make (TTL, checked
/// against its deadline).
async fn on_work(shared: &Shared, work: &ManifestWork, spoke: &Client) {
    let name = work.metadata.name.clone().unwrap_or_default();
    let Some(model) = shared.lock().works.get(&name).cloned() else {
        return;
    };
    let complete = condition(work, "Complete").filter(|(s, _, _)| s == "True");
    if let Some((_, since, _)) = complete
        && !shared.lock().completions.contains_key(&name)
    {
        // The agent's writes to the objects as they are now: none may follow.
        let mut fingerprints = BTreeMap::new();
        for obj in model.objects() {
            if let Ok(Some(live)) = api(spoke, &obj).get_opt(&obj.name).await {
                fingerprints.insert(obj, agent_fingerprint(&live));
            }
        }
        let mut w = shared.lock();
        w.tally.completed += 1;
        w.completions.insert(
            name.clone(),
            Completion {
                since_unix: since,
                fingerprints,
            },
        );
    }
    let Some(deleted_at) = work
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
    else {
        return;
    };
    let mut w = shared.lock();
    if !matches!(model.phase, Phase::Live) || w.ttl_seen.contains(&name) {
        return;
    }
    // Deleted while the driver had not deleted it: the TTL collection did.
    w.tally.ttl_deleted += 1;
    w.ttl_seen.insert(name.clone());
    let completion = w
        .completions
        .get(&name)
        .map(|c| c.since_unix)
        .or(complete.map(|c| c.1));
    match (completion, model.ttl) {
        (Some(since), Some(ttl)) if deleted_at >= since + ttl => {}
        (since, ttl) => {
            w.counts.early_ttl_deletions += 1;
            w.violation(format!(
                "work {name} deleted at {deleted_at} (Unix s) by someone else than the driver; \
                 Complete since {since:?}, TTL {ttl:?}"
            ));
        }
    }
}

async fn watch_spoke(
    shared: Shared,
    api: Api<DynamicObject>,
    cfg: watcher::Config,
    (group, version, kind, plural): (&str, &str, &str, &str),
) {
    let mut stream = watcher(api, cfg).boxed();
    loop {
        match stream.try_next().await {
            Ok(Some(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                let obj = obj_ref(&o, group, version, kind, plural);
                let print = agent_fingerprint(&o);
                let mut w = shared.lock();
                let completed_owners: Vec<String> = w
                    .works_of(&obj)
                    .iter()
                    .filter(|m| matches!(m.phase, Phase::Live))
                    .map(|m| m.name.clone())
                    .filter(|n| w.completions.contains_key(n))
                    .collect();
                for name in completed_owners {
                    let before = w
                        .completions
                        .get(&name)
                        .and_then(|c| c.fingerprints.get(&obj))
                        .cloned();
                    let Some(before) = before.filter(|b| *b != print) else {
                        continue;
                    };
                    if print.written_since(&before) && o.metadata.deletion_timestamp.is_none() {
                        let line = format!(
                            "{} of completed work {name} written: {before:?} -> {print:?}",
                            obj.describe()
                        );
                        w.counts.writes_after_complete += 1;
                        w.violation(line);
                    }
                    // The new baseline, also after fields were only taken away (the driver's
                    // forced edit): an agent write giving them back is then a gain.
                    if let Some(c) = w.completions.get_mut(&name) {
                        c.fingerprints.insert(obj.clone(), print.clone());
                    }
                }
            }
            Ok(Some(watcher::Event::Delete(o))) => {
                let uid = o.metadata.uid.clone().unwrap_or_default();
                let mut w = shared.lock();
                if w.deleted_by_driver.contains(&uid) {
                    continue;
                }
                let foreign = w.foreign.get(&uid).map(|r| ("foreign", r.describe()));
                let orphaned = w.orphaned.get(&uid).map(|r| ("orphaned", r.describe()));
                if let Some((what, obj)) = foreign.or(orphaned) {
                    w.counts.foreign_deletions += 1;
                    w.violation(format!("{what} object {obj} (uid {uid}) was deleted"));
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(_) => tokio::time::sleep(RETRY).await,
        }
    }
}
