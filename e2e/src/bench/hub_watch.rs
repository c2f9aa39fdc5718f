//! One watch on the hub's ManifestWorks of the benchmark namespace, recording when each work was
//! first Applied and Available, when its feedback value changed and when it was gone. Timing from
//! watch events (not polling) keeps the harness's own delay out of the figures as far as it can.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::Notify;

/// Name of the feedback value the benchmark reads (a JSONPaths rule on the first manifest).
pub const FEEDBACK_NAME: &str = "flag";

/// What the watch has seen of one work.
#[derive(Debug, Clone, Default)]
pub struct WorkSeen {
    /// When it was first seen with `Applied` and `Available` both True.
    pub ready_at: Option<Instant>,
    /// The current value of the `flag` feedback of manifest 0.
    pub flag: Option<String>,
    /// When `flag` took its current value.
    pub flag_at: Option<Instant>,
    /// When it was first seen with a deletionTimestamp.
    pub deleting_at: Option<Instant>,
    /// When its deletion was seen.
    pub gone_at: Option<Instant>,
}

/// The works seen so far.
#[derive(Debug, Default)]
pub struct Seen {
    /// By name.
    pub works: HashMap<String, WorkSeen>,
    /// Whether the initial list is done.
    pub synced: bool,
    /// Watch errors so far and the last one (the watcher retries with backoff).
    pub errors: u64,
    /// The last watch error.
    pub last_error: Option<String>,
    relist: Option<HashSet<String>>,
}

impl Seen {
    /// Works seen Applied and Available (ever).
    pub fn ready(&self) -> usize {
        self.works.values().filter(|w| w.ready_at.is_some()).count()
    }

    fn observe(&mut self, obj: &DynamicObject, now: Instant) {
        let Some(name) = obj.metadata.name.clone() else {
            return;
        };
        if let Some(relist) = self.relist.as_mut() {
            relist.insert(name.clone());
        }
        let seen = self.works.entry(name).or_default();
        seen.gone_at = None;
        if seen.ready_at.is_none() && applied_and_available(&obj.data) {
            seen.ready_at = Some(now);
        }
        let flag = feedback_value(&obj.data, 0, FEEDBACK_NAME);
        if flag != seen.flag || seen.flag_at.is_none() {
            seen.flag = flag;
            seen.flag_at = Some(now);
        }
        if obj.metadata.deletion_timestamp.is_some() && seen.deleting_at.is_none() {
            seen.deleting_at = Some(now);
        }
    }

    fn gone(&mut self, name: &str, now: Instant) {
        if let Some(seen) = self.works.get_mut(name)
            && seen.gone_at.is_none()
        {
            seen.gone_at = Some(now);
        }
    }

    fn apply(&mut self, event: Event<DynamicObject>, now: Instant) {
        match event {
            Event::Apply(obj) | Event::InitApply(obj) => self.observe(&obj, now),
            Event::Delete(obj) => {
                if let Some(name) = obj.metadata.name.as_deref() {
                    self.gone(name, now);
                }
            }
            Event::Init => self.relist = Some(HashSet::new()),
            Event::InitDone => {
                // A work missing from a re-list was deleted while the watch was down.
                let listed = self.relist.take().unwrap_or_default();
                let missing: Vec<String> = self
                    .works
                    .keys()
                    .filter(|n| !listed.contains(*n))
                    .cloned()
                    .collect();
                for name in missing {
                    self.gone(&name, now);
                }
                self.synced = true;
            }
        }
    }
}

/// Whether work-level `Applied` and `Available` are both True.
pub fn applied_and_available(work: &Value) -> bool {
    ["Applied", "Available"]
        .iter()
        .all(|t| condition_status(work, t) == Some("True"))
}

fn condition_status<'a>(work: &'a Value, type_: &str) -> Option<&'a str> {
    work.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))?
        .get("status")?
        .as_str()
}

/// A feedback value of the manifest with this ordinal, as text.
pub fn feedback_value(work: &Value, ordinal: i64, name: &str) -> Option<String> {
    let manifest = work
        .pointer("/status/resourceStatus/manifests")?
        .as_array()?
        .iter()
        .find(|m| m.pointer("/resourceMeta/ordinal").and_then(Value::as_i64) == Some(ordinal))?;
    let field = manifest
        .pointer("/statusFeedback/values")?
        .as_array()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(name))?
        .get("fieldValue")?;
    ["string", "integer", "boolean", "jsonRaw"]
        .iter()
        .find_map(|k| field.get(*k))
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
}

/// The running watch.
pub struct HubWatch {
    seen: Arc<Mutex<Seen>>,
    changed: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl HubWatch {
    /// Starts watching `works` (with backoff on errors).
    pub fn start(works: Api<DynamicObject>) -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let changed = Arc::new(Notify::new());
        let (s, c) = (seen.clone(), changed.clone());
        let task = tokio::spawn(async move {
            let mut stream = watcher::watcher(works, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = stream.next().await {
                let now = Instant::now();
                {
                    let mut seen = lock(&s);
                    match event {
                        Ok(event) => seen.apply(event, now),
                        Err(e) => {
                            seen.errors += 1;
                            seen.last_error = Some(e.to_string());
                        }
                    }
                }
                c.notify_waiters();
            }
        });
        Self {
            seen,
            changed,
            task,
        }
    }

    /// A look at what was seen.
    pub fn seen(&self) -> MutexGuard<'_, Seen> {
        lock(&self.seen)
    }

    /// What was seen of one work.
    pub fn work(&self, name: &str) -> WorkSeen {
        self.seen().works.get(name).cloned().unwrap_or_default()
    }

    /// Waits until `check` returns `Ok`, re-checking on every watch event; on timeout the error
    /// names `what` and the last state `check` described.
    pub async fn wait<T>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&Seen) -> Result<T, String>,
    ) -> Result<T, String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let last = {
                let seen = self.seen();
                match check(&seen) {
                    Ok(v) => return Ok(v),
                    Err(state) => match &seen.last_error {
                        Some(e) => format!("{state}; last watch error: {e}"),
                        None => state,
                    },
                }
            };
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(format!(
                    "timed out after {timeout:?} waiting for {what}; last state: {last}"
                ));
            }
        }
    }
}

impl Drop for HubWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(m: &Mutex<Seen>) -> MutexGuard<'_, Seen> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn work(name: &str, status: Value, deleting: bool) -> DynamicObject {
        let mut meta = json!({"name": name, "namespace": "c"});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1",
            "kind": "ManifestWork",
            "metadata": meta,
            "status": status,
        }))
        .expect("valid object")
    }

    fn ready_status(flag: Option<&str>) -> Value {
        let values = flag
            .map(|f| json!([{"name": "flag", "fieldValue": {"type": "String", "string": f}}]))
            .unwrap_or(json!([]));
        json!({
            "conditions": [
                {"type": "Applied", "status": "True"},
                {"type": "Available", "status": "True"}
            ],
            "resourceStatus": {"manifests": [
                {"resourceMeta": {"ordinal": 1}, "statusFeedback": {"values": []}},
                {"resourceMeta": {"ordinal": 0}, "statusFeedback": {"values": values}}
            ]}
        })
    }

    #[test]
    fn reads_conditions_and_feedback_of_the_right_manifest() {
        let status = ready_status(Some("on"));
        let w = json!({ "status": status });
        assert!(applied_and_available(&w));
        assert_eq!(feedback_value(&w, 0, "flag").as_deref(), Some("on"));
        assert_eq!(feedback_value(&w, 1, "flag"), None);
        let int = json!({"status": {"resourceStatus": {"manifests": [{"resourceMeta": {"ordinal": 0},
            "statusFeedback": {"values": [{"name": "n", "fieldValue": {"type": "Integer", "integer": 3}}]}}]}}});
        assert_eq!(feedback_value(&int, 0, "n").as_deref(), Some("3"));
        let half = json!({"status": {"conditions": [{"type": "Applied", "status": "True"},
            {"type": "Available", "status": "Unknown"}]}});
        assert!(!applied_and_available(&half));
    }

    #[test]
    fn records_first_ready_flag_changes_deletion_and_relist_losses() {
        let t0 = Instant::now();
        let t = |ms| t0 + Duration::from_millis(ms);
        let mut seen = Seen::default();
        seen.apply(Event::Init, t(0));
        seen.apply(Event::InitApply(work("a", json!({}), false)), t(0));
        seen.apply(Event::InitDone, t(0));
        assert!(seen.synced);
        seen.apply(Event::Apply(work("a", ready_status(None), false)), t(10));
        seen.apply(
            Event::Apply(work("a", ready_status(Some("x")), false)),
            t(20),
        );
        seen.apply(
            Event::Apply(work("a", ready_status(Some("x")), false)),
            t(30),
        );
        let a = &seen.works["a"];
        assert_eq!(
            (a.ready_at, a.flag.as_deref(), a.flag_at),
            (Some(t(10)), Some("x"), Some(t(20)))
        );
        seen.apply(Event::Apply(work("b", ready_status(None), true)), t(40));
        assert_eq!(seen.works["b"].deleting_at, Some(t(40)));
        seen.apply(Event::Delete(work("b", json!({}), true)), t(50));
        assert_eq!(seen.works["b"].gone_at, Some(t(50)));
        assert_eq!(seen.ready(), 2);
        // "a" disappears while the watch is down: the re-list reports it gone.
        seen.apply(Event::Init, t(60));
        seen.apply(Event::InitDone, t(70));
        assert_eq!(seen.works["a"].gone_at, Some(t(70)));
    }
}
