//! Completion remembered on the spoke, for hubs that do not give a work's status back after an
//! agent restart. Behind a broker, spec events carry no status and the agent keeps its works in
//! memory: a restarted agent would not know a work (or one of its manifests) is Complete, and
//! would apply it once more before finding out, writing an edit made after completion. So the
//! completion-relevant part of the status (the work's `Complete` condition and the entries of
//! completed manifests, with their times) is kept in an annotation of the work's
//! AppliedManifestWork, written when it grows and laid back over a status that lacks it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::{Deserialize, Serialize};
use work_api::{ManifestCondition, ManifestResourceStatus, ManifestWork, ManifestWorkStatus};

/// The AppliedManifestWork annotation holding what is remembered (JSON).
pub const ANNOTATION: &str = "work.open-cluster-management.io/completion";

/// The condition type of completion.
const COMPLETE: &str = "Complete";

/// What is remembered of a work's completion.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Remembered {
    /// The work-level `Complete` condition, once True.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete: Option<Condition>,
    /// The status entries of the manifests whose `Complete` is True.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<ManifestCondition>,
    /// Who the work is to its source, so that a restarted agent can tell the source the work is
    /// gone without having it (see `work::eviction`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work: Option<WorkIdentity>,
}

/// A work as its source knows it: enough for a `Deleted` status event.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkIdentity {
    /// Its UID (the source's resource id).
    pub uid: String,
    /// The source that sent it (`originalsource`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// Its generation when this was written (the source's resource version).
    #[serde(default)]
    pub generation: i64,
}

impl Remembered {
    /// The completion-relevant part of `status`.
    pub fn of_status(status: Option<&ManifestWorkStatus>) -> Self {
        let Some(status) = status else {
            return Self::default();
        };
        let complete = status
            .conditions
            .iter()
            .find(|c| is_complete(std::slice::from_ref(c)))
            .cloned();
        let manifests = status
            .resource_status
            .as_ref()
            .map(|r| {
                r.manifests
                    .iter()
                    .filter(|m| is_complete(&m.conditions))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        Self {
            complete,
            manifests,
            work: None,
        }
    }

    /// `self` with `work`'s identity.
    pub fn of_work(mut self, work: &ManifestWork) -> Self {
        self.work = work.metadata.uid.clone().map(|uid| WorkIdentity {
            uid,
            source: cloudevents::codec::original_source(work.metadata.labels.as_ref()),
            generation: work.metadata.generation.unwrap_or(0),
        });
        self
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.complete.is_none() && self.manifests.is_empty()
    }

    /// What the annotation says; `None` when absent or unreadable (then nothing is remembered:
    /// the agent behaves as before the annotation, it never invents a completion).
    pub fn from_annotations(
        annotations: Option<&std::collections::BTreeMap<String, String>>,
    ) -> Option<Self> {
        let text = annotations?.get(ANNOTATION)?;
        match serde_json::from_str(text) {
            Ok(remembered) => Some(remembered),
            Err(e) => {
                tracing::warn!(annotation = ANNOTATION, error = %e, "unreadable completion annotation; ignored");
                None
            }
        }
    }

    /// Whether `self` knows something `before` does not (then it is written).
    pub fn adds_to(&self, before: &Self) -> bool {
        (self.complete.is_some() && before.complete.is_none())
            || self.manifests.iter().any(|m| {
                !before
                    .manifests
                    .iter()
                    .any(|b| same_object(&b.resource_meta, &m.resource_meta))
            })
    }
}

fn is_complete(conditions: &[Condition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == COMPLETE && c.status == "True")
}

fn same_object(a: &work_api::ManifestResourceMeta, b: &work_api::ManifestResourceMeta) -> bool {
    a.group == b.group && a.kind == b.kind && a.namespace == b.namespace && a.name == b.name
}

/// `work` with what is remembered laid over its status where the status lacks it: the work-level
/// `Complete` when the status has none, and each completed manifest's entry when the status has
/// no completed entry for that object. `None` when there is nothing to add.
pub fn restore(work: &ManifestWork, remembered: &Remembered) -> Option<ManifestWork> {
    let current = Remembered::of_status(work.status.as_ref());
    if !remembered.adds_to(&current) {
        return None;
    }
    let mut restored = work.clone();
    let status = restored
        .status
        .get_or_insert_with(ManifestWorkStatus::default);
    if current.complete.is_none()
        && let Some(complete) = &remembered.complete
    {
        status.conditions.retain(|c| c.type_ != COMPLETE);
        status.conditions.push(complete.clone());
    }
    let resources = status
        .resource_status
        .get_or_insert_with(ManifestResourceStatus::default);
    for entry in &remembered.manifests {
        let known = resources.manifests.iter().any(|m| {
            same_object(&m.resource_meta, &entry.resource_meta) && is_complete(&m.conditions)
        });
        if known {
            continue;
        }
        resources
            .manifests
            .retain(|m| !same_object(&m.resource_meta, &entry.resource_meta));
        resources.manifests.push(entry.clone());
    }
    Some(restored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn work(status: serde_json::Value) -> ManifestWork {
        serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1",
            "kind": "ManifestWork",
            "metadata": {"name": "w", "namespace": "c1"},
            "spec": {"workload": {"manifests": []}},
            "status": status,
        }))
        .expect("test ManifestWork")
    }

    fn entry(name: &str, complete: &str) -> serde_json::Value {
        json!({"resourceMeta": {"ordinal": 0, "group": "batch", "version": "v1", "kind": "Job",
                "resource": "jobs", "namespace": "ns", "name": name},
               "conditions": [{"type": "Complete", "status": complete, "reason": "r",
                "message": "", "lastTransitionTime": "2026-01-01T10:00:00Z"}]})
    }

    fn completed() -> ManifestWork {
        work(json!({
            "conditions": [{"type": "Complete", "status": "True", "reason": "ConditionRulesAggregated",
                "message": "", "lastTransitionTime": "2026-01-01T10:00:05Z"},
                {"type": "Applied", "status": "True", "reason": "x", "message": "",
                "lastTransitionTime": "2026-01-01T09:00:00Z"}],
            "resourceStatus": {"manifests": [entry("done", "True"), entry("running", "False")]},
        }))
    }

    #[test]
    fn only_what_completion_needs_is_remembered() {
        let r = Remembered::of_status(completed().status.as_ref());
        assert_eq!(
            r.complete.as_ref().map(|c| c.reason.as_str()),
            Some("ConditionRulesAggregated")
        );
        assert_eq!(r.manifests.len(), 1);
        assert_eq!(r.manifests[0].resource_meta.name, "done");
        let text = serde_json::to_string(&r).expect("serializable");
        let annotations = std::collections::BTreeMap::from([(ANNOTATION.to_string(), text)]);
        assert_eq!(Remembered::from_annotations(Some(&annotations)), Some(r));
    }

    #[test]
    fn a_status_lost_with_a_restart_gets_the_completion_back_with_its_times() {
        let remembered = Remembered::of_status(completed().status.as_ref());
        let fresh = work(json!({}));
        let restored = restore(&fresh, &remembered).expect("something to restore");
        assert!(applier::manifests::work_is_complete(
            restored.status.as_ref()
        ));
        assert_eq!(Remembered::of_status(restored.status.as_ref()), remembered);
        // Nothing to add to a status that has it all: no rewrite.
        assert!(restore(&completed(), &remembered).is_none());
        assert!(restore(&fresh, &Remembered::default()).is_none());
    }

    #[test]
    fn the_memory_names_the_work_as_its_source_knows_it() {
        let mut w = completed();
        w.metadata.uid = Some("u1".into());
        w.metadata.generation = Some(4);
        w.metadata.labels = Some(
            [(
                cloudevents::codec::LABEL_ORIGINAL_SOURCE.to_string(),
                "maestro".to_string(),
            )]
            .into(),
        );
        let remembered = Remembered::of_status(w.status.as_ref()).of_work(&w);
        let text = serde_json::to_string(&remembered).expect("text");
        let annotations = [(ANNOTATION.to_string(), text)].into();
        let back = Remembered::from_annotations(Some(&annotations)).expect("read back");
        assert_eq!(
            back.work,
            Some(WorkIdentity {
                uid: "u1".into(),
                source: "maestro".into(),
                generation: 4
            })
        );
        // Written before it named the work: read as not naming it.
        let old = r#"{"complete":{"type":"Complete","status":"True","reason":"r","message":"","lastTransitionTime":"2026-01-01T10:00:05Z"}}"#;
        let annotations = [(ANNOTATION.to_string(), old.to_string())].into();
        let back = Remembered::from_annotations(Some(&annotations)).expect("read");
        assert_eq!(back.work, None);
        assert!(back.complete.is_some());
    }

    #[test]
    fn a_manifest_completed_before_the_restart_is_sticky_again() {
        let remembered = Remembered {
            complete: None,
            manifests: vec![serde_json::from_value(entry("done", "True")).expect("entry")],
            work: None,
        };
        let after_restart =
            work(json!({"resourceStatus": {"manifests": [entry("done", "False")]}}));
        let restored = restore(&after_restart, &remembered).expect("the completed entry returns");
        let manifests = &restored
            .status
            .expect("status")
            .resource_status
            .expect("manifests")
            .manifests;
        assert_eq!(manifests.len(), 1, "replaces the entry, no duplicate");
        assert!(is_complete(&manifests[0].conditions));
        assert!(!applier::manifests::work_is_complete(
            after_restart.status.as_ref()
        ));
    }

    #[test]
    fn growth_is_what_triggers_a_write() {
        let all = Remembered::of_status(completed().status.as_ref());
        let none = Remembered::default();
        assert!(all.adds_to(&none));
        assert!(!all.adds_to(&all));
        assert!(
            !none.adds_to(&all),
            "a status that lost something never erases the memory"
        );
    }

    #[test]
    fn an_unreadable_annotation_remembers_nothing() {
        let annotations =
            std::collections::BTreeMap::from([(ANNOTATION.to_string(), "{not json".to_string())]);
        assert_eq!(Remembered::from_annotations(Some(&annotations)), None);
        assert_eq!(Remembered::from_annotations(None), None);
    }
}
