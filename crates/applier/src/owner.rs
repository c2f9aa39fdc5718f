//! Ownership of applied objects: ownerReferences to AppliedManifestWorks and the agent label.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use sha2::{Digest, Sha256};
use work_api::AppliedManifestWork;

/// Label put on every object the agent writes, so it can watch only its own objects.
pub const AGENT_LABEL: &str = "work.open-cluster-management.io/applied-by";

/// The value for [`AGENT_LABEL`], identifying one agent (hub + managed cluster): 24 hex digits
/// of a SHA-256 of both. The same on every work of the agent, so an object shared by two works
/// carries one value; different for two agents of one hub on one spoke. A hub hash itself (64
/// characters) is longer than a label value may be (63).
pub fn agent_label_value(hub_hash: &str, cluster_name: &str) -> String {
    let digest = Sha256::digest(format!("{hub_hash}/{cluster_name}").as_bytes());
    hex::encode(&digest[..12])
}

/// The ownerReference an applied object gets: to its AppliedManifestWork, not a controller, and
/// not blocking the owner's deletion (the agent deletes owned objects itself). Written exactly as
/// upstream's agent writes it (`controller` and `blockOwnerDeletion` left out, which means false),
/// so an object applied by one agent needs no update from the other when a cluster switches.
pub fn owner_reference(applied_work: &AppliedManifestWork) -> OwnerReference {
    OwnerReference {
        api_version: AppliedManifestWork::api_version(&()).into_owned(),
        kind: AppliedManifestWork::kind(&()).into_owned(),
        name: applied_work.metadata.name.clone().unwrap_or_default(),
        uid: applied_work.metadata.uid.clone().unwrap_or_default(),
        controller: None,
        block_owner_deletion: None,
    }
}

/// `existing` with `ours` added (or replacing an entry with the same UID); other owners kept in
/// place, so a resource shared by several works carries all of them.
pub fn merge_owner_references(
    existing: &[OwnerReference],
    ours: &OwnerReference,
) -> Vec<OwnerReference> {
    let mut merged = existing.to_vec();
    match merged.iter_mut().find(|r| r.uid == ours.uid) {
        Some(entry) => *entry = ours.clone(),
        None => merged.push(ours.clone()),
    }
    merged
}

/// `existing` without the entry whose UID is `owner_uid`.
pub fn remove_owner_reference(existing: &[OwnerReference], owner_uid: &str) -> Vec<OwnerReference> {
    existing
        .iter()
        .filter(|r| r.uid != owner_uid)
        .cloned()
        .collect()
}

/// Whether `existing` has an entry with UID `owner_uid`.
pub fn has_owner_reference(existing: &[OwnerReference], owner_uid: &str) -> bool {
    existing.iter().any(|r| r.uid == owner_uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use work_api::AppliedManifestWorkSpec;

    fn amw(name: &str, uid: &str) -> AppliedManifestWork {
        AppliedManifestWork {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: AppliedManifestWorkSpec::default(),
            status: None,
        }
    }

    fn owner(uid: &str) -> OwnerReference {
        owner_reference(&amw(&format!("amw-{uid}"), uid))
    }

    #[test]
    fn owner_reference_points_at_the_applied_work_without_control() {
        let r = owner_reference(&amw("hash-work", "uid-1"));
        assert_eq!(r.api_version, "work.open-cluster-management.io/v1");
        assert_eq!(r.kind, "AppliedManifestWork");
        assert_eq!(r.name, "hash-work");
        assert_eq!(r.uid, "uid-1");
        // Upstream's form: the two fields absent (upstream's agent rewrites an entry that has
        // them, and this agent would rewrite one that lacks them).
        assert_eq!(r.controller, None);
        assert_eq!(r.block_owner_deletion, None);
        let json = serde_json::to_value(&r).expect("serializable");
        assert_eq!(
            json,
            serde_json::json!({
                "apiVersion": "work.open-cluster-management.io/v1",
                "kind": "AppliedManifestWork",
                "name": "hash-work",
                "uid": "uid-1"
            })
        );
    }

    #[test]
    fn merge_keeps_other_owners_and_is_idempotent() {
        let other = owner("a");
        let ours = owner("b");
        let once = merge_owner_references(std::slice::from_ref(&other), &ours);
        assert_eq!(once, vec![other.clone(), ours.clone()]);
        let twice = merge_owner_references(&once, &ours);
        assert_eq!(twice, once);
    }

    #[test]
    fn merge_replaces_an_entry_with_the_same_uid() {
        let mut stale = owner("b");
        stale.name = "old-name".into();
        let ours = owner("b");
        assert_eq!(merge_owner_references(&[stale], &ours), vec![ours]);
    }

    #[test]
    fn remove_drops_only_ours() {
        let refs = vec![owner("a"), owner("b")];
        assert_eq!(remove_owner_reference(&refs, "b"), vec![owner("a")]);
        assert_eq!(remove_owner_reference(&refs, "zzz"), refs);
        assert!(has_owner_reference(&refs, "a"));
        assert!(!has_owner_reference(&refs, "c"));
    }

    #[test]
    fn label_value_is_short_stable_and_valid() {
        let hub_hash = work_api::hub_hash("https://hub.example:6443");
        let v = agent_label_value(&hub_hash, "cluster1");
        assert_eq!(v.len(), 24);
        assert_eq!(v, agent_label_value(&hub_hash, "cluster1"));
        assert_ne!(v, agent_label_value(&hub_hash, "cluster2"));
        assert_ne!(v, agent_label_value("other", "cluster1"));
        assert!(v.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
