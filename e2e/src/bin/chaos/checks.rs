//! The invariant checks: a periodic one while faults run (resources lost or not restored within
//! the recovery window) and the final ones after the last fault (convergence, duplicates,
//! survivors, panics).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ListParams};
use work_api::AppliedManifestWork;

use crate::history::SPOKE_KINDS;
use crate::hub::Hub;
use crate::kubeops::{api, api_all, is_true, obj_ref};
use crate::workload::{Deletion, ObjRef, Phase, RUN_LABEL, object_gen};
use crate::world::Shared;

/// What the spoke has of the run's objects: generation carried and whether being deleted, by ref.
type SpokeState = BTreeMap<ObjRef, (Option<String>, bool, String)>;

/// Lists the run's labelled objects on the spoke: the watched kinds, and the custom kinds of
/// live works (a listing error of those is ignored: the kind may be going away).
pub async fn spoke_state(
    shared: &Shared,
    spoke: &Client,
    run: &str,
) -> Result<SpokeState, kube::Error> {
    let mut state = BTreeMap::new();
    let lp = ListParams::default().labels(&format!("{RUN_LABEL}={run}"));
    let custom: BTreeSet<(String, String, String)> = shared
        .lock()
        .works
        .values()
        .filter_map(|m| m.custom.clone())
        .collect();
    let mut kinds: Vec<(String, String, String, String, bool)> = SPOKE_KINDS
        .iter()
        .map(|(g, v, k, p)| {
            (
                g.to_string(),
                v.to_string(),
                k.to_string(),
                p.to_string(),
                true,
            )
        })
        .collect();
    kinds.extend(
        custom
            .into_iter()
            .map(|(g, k, p)| (g, "v1".to_string(), k, p, false)),
    );
    for (group, version, kind, plural, required) in &kinds {
        let listed = match api_all(spoke, group, version, kind, plural).list(&lp).await {
            Ok(l) => l,
            Err(e) if *required => return Err(e),
            Err(_) => continue,
        };
        for o in listed {
            let value = serde_json::to_value(&o).unwrap_or_default();
            state.insert(
                obj_ref(&o, group, version, kind, plural),
                (
                    object_gen(&value),
                    o.metadata.deletion_timestamp.is_some(),
                    o.metadata.uid.clone().unwrap_or_default(),
                ),
            );
        }
    }
    Ok(state)
}

/// Watches, every few seconds until `stop`, that every object of a live, not completed work is
/// present with its work's content, and counts those that stay missing (or edited) longer than
/// `window` after the later of: first seen so, the work's last change, the hub's return.
pub async fn watch_recovery(
    shared: Shared,
    spoke: Client,
    run: String,
    window: Duration,
    stop: Instant,
) {
    // (work, object) → (since, reported)
    let mut missing: BTreeMap<(String, ObjRef), (Instant, bool)> = BTreeMap::new();
    let mut drifted: BTreeMap<(String, ObjRef), (Instant, bool)> = BTreeMap::new();
    while Instant::now() < stop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let Ok(state) = spoke_state(&shared, &spoke, &run).await else {
            continue;
        };
        let now = Instant::now();
        let mut w = shared.lock();
        if !w.hub_up() {
            continue;
        }
        let mut seen_missing = BTreeSet::new();
        let mut seen_drifted = BTreeSet::new();
        let works: Vec<_> = w
            .works
            .values()
            .filter(|m| m.phase == Phase::Live && !w.completions.contains_key(&m.name))
            .cloned()
            .collect();
        for m in &works {
            for obj in m.objects() {
                let key = (m.name.clone(), obj.clone());
                match state.get(&obj) {
                    None | Some((_, true, _)) => {
                        seen_missing.insert(key.clone());
                        missing.entry(key).or_insert((now, false));
                    }
                    Some((generation, false, _)) if *generation != m.expected_generation(&obj) => {
                        seen_drifted.insert(key.clone());
                        drifted.entry(key).or_insert((now, false));
                    }
                    _ => {}
                }
            }
        }
        missing.retain(|k, _| seen_missing.contains(k));
        drifted.retain(|k, _| seen_drifted.contains(k));
        let hub_up_at = w.hub_up_at;
        for (table, lost) in [(&mut missing, true), (&mut drifted, false)] {
            for ((name, obj), (since, reported)) in table.iter_mut() {
                let changed = w.works.get(name).map(|m| m.changed_at);
                let from = [Some(*since), changed, hub_up_at]
                    .into_iter()
                    .flatten()
                    .max();
                if *reported || from.is_none_or(|f| now.duration_since(f) < window) {
                    continue;
                }
                *reported = true;
                if lost {
                    w.counts.resources_lost += 1;
                } else {
                    w.counts.resources_not_restored += 1;
                }
                let what = if lost { "missing" } else { "not restored" };
                w.violation(format!(
                    "{} of live work {name} {what} for over {window:?}",
                    obj.describe()
                ));
            }
        }
    }
}

/// Why each work has not converged (empty when all have).
pub async fn unconverged(
    shared: &Shared,
    hub: &Hub,
    spoke: &Client,
    run: &str,
    unverified: &mut BTreeSet<String>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let amws: Api<AppliedManifestWork> = Api::all(spoke.clone());
    let state = match spoke_state(shared, spoke, run).await {
        Ok(s) => s,
        Err(e) => {
            out.insert("<spoke>".into(), format!("listing spoke objects: {e}"));
            return out;
        }
    };
    let (models, completions) = {
        let w = shared.lock();
        (w.works.clone(), w.completions.clone())
    };
    let live_owned: BTreeSet<ObjRef> = models
        .values()
        .filter(|m| m.phase == Phase::Live)
        .flat_map(|m| m.objects())
        .collect();
    let now_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    for m in models.values() {
        let hub_work = match hub.get(&m.name).await {
            Ok(w) => w,
            Err(e) => {
                out.insert(m.name.clone(), format!("reading the work: {e}"));
                continue;
            }
        };
        let amw_name = hub.applied_name(&m.name);
        let reason = match (&m.phase, hub_work) {
            (Phase::Live, None) => {
                // Gone without the driver deleting it: only the TTL collection may do that. When
                // its completion fell into a gap of the watch (an outage, a re-list after a
                // compaction) the deadline cannot be checked: reported, not counted.
                if m.ttl.is_none() {
                    Some("work vanished from the hub".to_string())
                } else {
                    if !completions.contains_key(&m.name) {
                        unverified.insert(m.name.clone());
                    }
                    None
                }
            }
            (Phase::Live, Some(work)) => {
                let completion = completions.get(&m.name);
                if let Some(c) = completion {
                    match m.ttl {
                        Some(ttl) if now_unix > c.since_unix + ttl + 5 => Some(format!(
                            "Complete since {} with TTL {ttl}s, not deleted",
                            c.since_unix
                        )),
                        _ => None,
                    }
                } else if is_true(&work, "Complete") {
                    None
                } else {
                    let generation = work.metadata.generation;
                    let applied = crate::kubeops::condition(&work, "Applied");
                    let applied_ok = applied
                        .as_ref()
                        .is_some_and(|(s, _, g)| s == "True" && (g.is_none() || *g == generation));
                    let mut why = Vec::new();
                    if !applied_ok {
                        why.push(format!("Applied {applied:?} at generation {generation:?}"));
                    }
                    if !m.completes() && !is_true(&work, "Available") {
                        why.push("not Available".to_string());
                    }
                    for obj in m.objects() {
                        match state.get(&obj) {
                            None => why.push(format!("{} missing", obj.describe())),
                            Some((_, true, _)) => {
                                why.push(format!("{} being deleted", obj.describe()))
                            }
                            Some((generation, _, _))
                                if *generation != m.expected_generation(&obj) =>
                            {
                                why.push(format!("{} at generation {generation:?}", obj.describe()))
                            }
                            _ => {}
                        }
                    }
                    (!why.is_empty()).then(|| why.join("; "))
                }
            }
            (_, Some(_)) => Some("deleted by the driver, still on the hub".to_string()),
            (_, None) => {
                let mut why = Vec::new();
                if let Ok(Some(_)) = amws.get_opt(&amw_name).await {
                    why.push(format!("AppliedManifestWork {amw_name} still there"));
                }
                for obj in m.objects() {
                    let present = state.get(&obj).is_some_and(|(_, deleting, _)| !deleting);
                    // A shared object goes with the last of its works, unless one of them was
                    // deleted with Orphan (then whether it stays depends on the order).
                    let twin_orphans = models.values().any(|t| {
                        t.shared.as_deref() == Some(obj.name.as_str())
                            && t.namespace == obj.namespace
                            && t.deletion == Deletion::Orphan
                    });
                    let shared = m.shared.as_deref() == Some(obj.name.as_str());
                    let kept = m.deletion == Deletion::Orphan
                        || live_owned.contains(&obj)
                        || (shared && twin_orphans);
                    if present && !kept {
                        why.push(format!("{} not deleted", obj.describe()));
                    }
                }
                (!why.is_empty()).then(|| why.join("; "))
            }
        };
        if let Some(r) = reason {
            out.insert(m.name.clone(), r);
        }
    }
    out
}

/// Counts duplicate entries: resources listed twice in an AppliedManifestWork, two
/// AppliedManifestWorks for one work, resource status ordinals reported twice.
pub async fn duplicates(shared: &Shared, hub: &Hub, spoke: &Client) -> Vec<String> {
    let mut found = Vec::new();
    // The AppliedManifestWorks name the works as the hub does (behind a broker: resource ids).
    let names: BTreeMap<String, String> = shared
        .lock()
        .works
        .keys()
        .map(|n| (hub.applied_work_name(n), n.clone()))
        .collect();
    if let Ok(list) = Api::<AppliedManifestWork>::all(spoke.clone())
        .list(&ListParams::default())
        .await
    {
        let mut per_work: BTreeMap<String, u32> = BTreeMap::new();
        for amw in list {
            let Some(work) = names.get(&amw.spec.manifest_work_name).cloned() else {
                continue;
            };
            *per_work.entry(work.clone()).or_default() += 1;
            let mut seen = BTreeSet::new();
            for r in amw.status.iter().flat_map(|s| s.applied_resources.iter()) {
                let key = (
                    r.group.clone(),
                    r.resource.clone(),
                    r.namespace.clone(),
                    r.name.clone(),
                );
                if !seen.insert(key.clone()) {
                    found.push(format!("AppliedManifestWork of {work} lists {key:?} twice"));
                }
            }
        }
        for (work, n) in per_work {
            if n > 1 {
                found.push(format!("{n} AppliedManifestWorks for work {work}"));
            }
        }
    }
    if let Ok(list) = hub.list().await {
        for work in list {
            let name = work.metadata.name.clone().unwrap_or_default();
            let mut seen = BTreeSet::new();
            for m in work
                .status
                .iter()
                .flat_map(|s| s.resource_status.iter())
                .flat_map(|r| r.manifests.iter())
            {
                if !seen.insert(m.resource_meta.ordinal) {
                    found.push(format!(
                        "work {name} reports ordinal {} twice",
                        m.resource_meta.ordinal
                    ));
                }
            }
        }
    }
    found
}

/// Foreign and orphaned objects that are gone (or replaced) though the driver did not delete them.
pub async fn survivors(shared: &Shared, spoke: &Client) -> Vec<String> {
    let (foreign, orphaned, by_driver) = {
        let w = shared.lock();
        (
            w.foreign.clone(),
            w.orphaned.clone(),
            w.deleted_by_driver.clone(),
        )
    };
    let mut lost = Vec::new();
    for (what, set) in [("foreign", foreign), ("orphaned", orphaned)] {
        for (uid, obj) in set {
            if by_driver.contains(&uid) {
                continue;
            }
            match api(spoke, &obj).get_opt(&obj.name).await {
                Ok(Some(o)) if o.metadata.uid.as_deref() == Some(uid.as_str()) => {}
                Ok(_) => lost.push(format!(
                    "{what} object {} (uid {uid}) is gone",
                    obj.describe()
                )),
                Err(e) => lost.push(format!("{what} object {}: {e}", obj.describe())),
            }
        }
    }
    lost
}

/// Lines of the agent logs that report a panic.
pub fn panics(logs: &[PathBuf]) -> Vec<String> {
    let mut found = Vec::new();
    for path in logs {
        let text = std::fs::read(path).map(|b| String::from_utf8_lossy(&b).into_owned());
        for line in text.unwrap_or_default().lines() {
            if line.contains("panicked") {
                found.push(format!("{}: {line}", path.display()));
            }
        }
    }
    found
}
