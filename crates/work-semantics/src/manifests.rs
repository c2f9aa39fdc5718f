//! Pure decisions about a work's manifests: identity, which config applies, sticky completion,
//! orphaning and pruning. No I/O.

use std::collections::BTreeSet;

use work_api::{
    AppliedManifestResourceMeta, ConditionRule, DeleteOption, DeletePropagationPolicy,
    FeedbackRule, ManifestCondition, ManifestConfigOption, ManifestResourceMeta,
    ManifestWorkStatus, UpdateStrategy, condition_types,
};

pub use crate::identity::ManifestId;

/// Status identity of a manifest; `resource` is empty when it could not be resolved.
pub fn resource_meta(ordinal: usize, id: &ManifestId, resource: &str) -> ManifestResourceMeta {
    ManifestResourceMeta {
        ordinal: i32::try_from(ordinal).unwrap_or(i32::MAX),
        group: id.group.clone(),
        version: id.version.clone(),
        kind: id.kind.clone(),
        resource: resource.to_string(),
        name: id.name.clone(),
        namespace: id.namespace.clone(),
    }
}

/// The rules of a manifest that decide its `Complete` condition (those whose condition type is
/// `Complete`, the well-known completions among them).
pub fn complete_rules(rules: &[ConditionRule]) -> impl Iterator<Item = &ConditionRule> {
    rules
        .iter()
        .filter(|r| r.condition_type() == condition_types::COMPLETE)
}

/// The settings a manifest gets from `manifestConfigs`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ManifestSettings {
    /// Write strategy (default Update).
    pub strategy: UpdateStrategy,
    /// Condition rules (empty when none).
    pub rules: Vec<ConditionRule>,
    /// Status feedback rules (empty when none).
    pub feedback_rules: Vec<FeedbackRule>,
}

/// For each setting, the first matching config that sets it wins.
pub fn settings_for(
    configs: &[ManifestConfigOption],
    group: &str,
    resource: &str,
    namespace: &str,
    name: &str,
) -> ManifestSettings {
    let matching: Vec<&ManifestConfigOption> = configs
        .iter()
        .filter(|c| {
            let id = &c.resource_identifier;
            id.group == group
                && id.resource == resource
                && glob_match(&id.name, name)
                && glob_match(&id.namespace, namespace)
        })
        .collect();
    ManifestSettings {
        strategy: matching
            .iter()
            .find_map(|c| c.update_strategy.clone())
            .unwrap_or_default(),
        rules: matching
            .iter()
            .find(|c| !c.condition_rules.is_empty())
            .map(|c| c.condition_rules.clone())
            .unwrap_or_default(),
        feedback_rules: matching
            .iter()
            .find(|c| !c.feedback_rules.is_empty())
            .map(|c| c.feedback_rules.clone())
            .unwrap_or_default(),
    }
}

/// `*` matches any run of characters (including none); everything else matches itself.
pub fn glob_match(pattern: &str, value: &str) -> bool {
    let p = pattern.as_bytes();
    let v = value.as_bytes();
    let (mut pi, mut vi) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while vi < v.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, vi));
            pi += 1;
        } else if pi < p.len() && p[pi] == v[vi] {
            pi += 1;
            vi += 1;
        } else if let Some((sp, sv)) = star {
            pi = sp + 1;
            vi = sv + 1;
            star = Some((sp, sv + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

fn same_object(a: &ManifestResourceMeta, id: &ManifestId) -> bool {
    a.group == id.group && a.kind == id.kind && a.name == id.name && a.namespace == id.namespace
}

fn is_true(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    t: &str,
) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == t && c.status == "True")
}

/// Sticky completion: the status entry of this object if its `Complete` is already True. Matched
/// by object identity (not ordinal or version), so editing or reordering manifests keeps it.
pub fn completed_entry<'a>(
    status: Option<&'a ManifestWorkStatus>,
    id: &ManifestId,
) -> Option<&'a ManifestCondition> {
    existing_entry(status, id).filter(|m| is_true(&m.conditions, condition_types::COMPLETE))
}

/// The existing status entry of this object, if any.
pub fn existing_entry<'a>(
    status: Option<&'a ManifestWorkStatus>,
    id: &ManifestId,
) -> Option<&'a ManifestCondition> {
    status?
        .resource_status
        .as_ref()?
        .manifests
        .iter()
        .find(|m| same_object(&m.resource_meta, id))
}

/// Whether the work-level `Complete` is True: then nothing of the work is written again.
pub fn work_is_complete(status: Option<&ManifestWorkStatus>) -> bool {
    status.is_some_and(|s| is_true(&s.conditions, condition_types::COMPLETE))
}

/// Whether a resource is kept (released, not deleted) per the work's deleteOption.
pub fn is_orphaned(
    option: Option<&DeleteOption>,
    group: &str,
    resource: &str,
    namespace: &str,
    name: &str,
) -> bool {
    let Some(option) = option else { return false };
    match &option.propagation_policy {
        DeletePropagationPolicy::Orphan => true,
        DeletePropagationPolicy::SelectivelyOrphan => {
            option.selectively_orphans.as_ref().is_some_and(|s| {
                s.orphaning_rules.iter().any(|r| {
                    r.group == group
                        && r.resource == resource
                        && r.namespace == namespace
                        && r.name == name
                })
            })
        }
        // Foreground, and policies this agent does not know: delete (the safe default upstream uses).
        _ => false,
    }
}

/// Key of an applied resource, ignoring version and UID.
pub fn applied_key(m: &AppliedManifestResourceMeta) -> (&str, &str, &str, &str) {
    (&m.group, &m.resource, &m.namespace, &m.name)
}

/// Applied resources recorded before that are no longer applied: to delete or release.
pub fn removed_resources(
    before: &[AppliedManifestResourceMeta],
    now: &[AppliedManifestResourceMeta],
) -> Vec<AppliedManifestResourceMeta> {
    let keep: BTreeSet<_> = now.iter().map(applied_key).collect();
    let mut seen = BTreeSet::new();
    before
        .iter()
        .filter(|m| !keep.contains(&applied_key(m)) && seen.insert(applied_key(m)))
        .cloned()
        .collect()
}

/// Sorted, without duplicate keys (the last entry for a key wins: it has the newest UID).
pub fn normalize_applied(
    mut list: Vec<AppliedManifestResourceMeta>,
) -> Vec<AppliedManifestResourceMeta> {
    let mut out: Vec<AppliedManifestResourceMeta> = Vec::with_capacity(list.len());
    list.reverse();
    let mut seen = BTreeSet::new();
    for m in list {
        if seen.insert((
            m.group.clone(),
            m.resource.clone(),
            m.namespace.clone(),
            m.name.clone(),
        )) {
            out.push(m);
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use serde_json::json;
    use work_api::{
        ConditionRuleType, ManifestResourceStatus, OrphaningRule, ResourceIdentifier,
        SelectivelyOrphan, UpdateStrategyType,
    };

    fn cond(t: &str, s: &str) -> Condition {
        Condition {
            type_: t.into(),
            status: s.into(),
            reason: "R".into(),
            message: "m".into(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
            observed_generation: None,
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match("*", "anything"));
        assert!(glob_match("*", ""));
        assert!(glob_match("job-*", "job-1"));
        assert!(glob_match("*-1", "job-1"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("job-*", "pod-1"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exact2"));
        assert!(glob_match("", ""));
        assert!(!glob_match("", "x"));
    }

    #[test]
    fn first_matching_config_wins_per_setting() {
        let rule = ConditionRule {
            condition: "Complete".into(),
            type_: ConditionRuleType::WellKnownConditions,
            ..Default::default()
        };
        // A config of Jobs named `name` in `namespace` with a strategy.
        let jobs =
            |name: &str, namespace: &str, strategy: UpdateStrategyType| ManifestConfigOption {
                resource_identifier: ResourceIdentifier {
                    group: "batch".into(),
                    resource: "jobs".into(),
                    name: name.into(),
                    namespace: namespace.into(),
                },
                update_strategy: Some(UpdateStrategy {
                    type_: strategy,
                    server_side_apply: None,
                }),
                ..Default::default()
            };
        let configs = vec![
            jobs("other", "*", UpdateStrategyType::ReadOnly),
            jobs("j*", "*", UpdateStrategyType::ServerSideApply),
            ManifestConfigOption {
                condition_rules: vec![rule.clone()],
                ..jobs("*", "ns", UpdateStrategyType::default())
            },
        ];
        let s = settings_for(&configs, "batch", "jobs", "ns", "job");
        assert_eq!(s.strategy.type_, UpdateStrategyType::ServerSideApply);
        assert_eq!(s.rules, vec![rule]);
        let none = settings_for(&configs, "", "configmaps", "ns", "job");
        assert_eq!(none, ManifestSettings::default());
    }

    #[test]
    fn sticky_completion_matches_by_object_not_ordinal() {
        let id = ManifestId::of(&json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns"}}))
        .expect("valid");
        let mut entry = ManifestCondition {
            resource_meta: resource_meta(3, &id, "jobs"),
            status_feedback: None,
            conditions: vec![cond("Applied", "True"), cond("Complete", "True")],
        };
        let status = ManifestWorkStatus {
            conditions: vec![],
            resource_status: Some(ManifestResourceStatus {
                manifests: vec![entry.clone()],
            }),
        };
        assert!(completed_entry(Some(&status), &id).is_some());
        let mut other = id.clone();
        other.name = "k".into();
        assert!(completed_entry(Some(&status), &other).is_none());
        entry.conditions[1].status = "False".into();
        let not_done = ManifestWorkStatus {
            conditions: vec![],
            resource_status: Some(ManifestResourceStatus {
                manifests: vec![entry],
            }),
        };
        assert!(completed_entry(Some(&not_done), &id).is_none());
        assert!(existing_entry(Some(&not_done), &id).is_some());
        assert!(completed_entry(None, &id).is_none());
    }

    #[test]
    fn orphaning_follows_delete_option() {
        assert!(!is_orphaned(None, "", "configmaps", "ns", "a"));
        let orphan = DeleteOption {
            propagation_policy: DeletePropagationPolicy::Orphan,
            ..Default::default()
        };
        assert!(is_orphaned(Some(&orphan), "", "configmaps", "ns", "a"));
        let selective = DeleteOption {
            propagation_policy: DeletePropagationPolicy::SelectivelyOrphan,
            selectively_orphans: Some(SelectivelyOrphan {
                orphaning_rules: vec![OrphaningRule {
                    group: "".into(),
                    resource: "configmaps".into(),
                    name: "a".into(),
                    namespace: "ns".into(),
                }],
            }),
            ttl_seconds_after_finished: None,
        };
        assert!(is_orphaned(Some(&selective), "", "configmaps", "ns", "a"));
        assert!(!is_orphaned(Some(&selective), "", "configmaps", "ns", "b"));
        assert!(!is_orphaned(
            Some(&DeleteOption::default()),
            "",
            "configmaps",
            "ns",
            "a"
        ));
    }

    fn applied(resource: &str, name: &str, uid: &str) -> AppliedManifestResourceMeta {
        AppliedManifestResourceMeta {
            group: "".into(),
            version: "v1".into(),
            resource: resource.into(),
            name: name.into(),
            namespace: "ns".into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn pruning_is_the_difference_by_key() {
        let before = vec![
            applied("configmaps", "a", "1"),
            applied("configmaps", "b", "2"),
        ];
        let now = vec![applied("configmaps", "a", "3")];
        assert_eq!(
            removed_resources(&before, &now),
            vec![applied("configmaps", "b", "2")]
        );
        assert!(removed_resources(&now, &before).is_empty());
        assert!(removed_resources(&[], &now).is_empty());
    }

    #[test]
    fn normalize_keeps_newest_uid_per_key() {
        let list = vec![
            applied("secrets", "z", "1"),
            applied("configmaps", "a", "1"),
            applied("configmaps", "a", "2"),
        ];
        let out = normalize_applied(list);
        assert_eq!(
            out,
            vec![
                applied("configmaps", "a", "2"),
                applied("secrets", "z", "1")
            ]
        );
    }
}
