//! The record of what a work owns on the spoke: its AppliedManifestWork's
//! `status.appliedResources`, or, until that status lists anything, the resources the
//! AppliedManifestWork was created with in its annotation [`ANNOTATION`].
//!
//! A resource is recorded before it is created, so whenever it exists a cleanup finds it. A new
//! work's resources go into the create of its AppliedManifestWork (a create cannot carry a
//! status: the status subresource drops it), which saves the status patch that would record them
//! before their creates; the status patch after them adds the UIDs and is the record from then on.

use std::collections::BTreeMap;

use work_api::{AppliedManifestResourceMeta, AppliedManifestWork};

/// The annotation of an AppliedManifestWork listing the resources its work was about to own
/// when it was created: one `group/version/resource/namespace/name` a line.
pub const ANNOTATION: &str = "work.open-cluster-management.io/resources-at-creation";

/// The largest annotation written, in bytes: a work with more resources records them with a
/// status patch instead (the API server allows 256 KiB of annotations in all).
pub const MAX_ANNOTATION_BYTES: usize = 64 * 1024;

/// The annotation's text for `resources`; `None` when it would be larger than
/// [`MAX_ANNOTATION_BYTES`].
pub fn annotation_text(resources: &[AppliedManifestResourceMeta]) -> Option<String> {
    let lines: Vec<String> = resources
        .iter()
        .map(|r| {
            format!(
                "{}/{}/{}/{}/{}",
                r.group, r.version, r.resource, r.namespace, r.name
            )
        })
        .collect();
    let text = lines.join("\n");
    (text.len() <= MAX_ANNOTATION_BYTES).then_some(text)
}

/// The resources listed in an annotation's text (without UIDs). A line that is not five
/// `/`-separated parts with a version, a resource and a name is skipped: none of those parts can
/// hold a `/`, and the agent never writes such a line.
pub fn parse_annotation(text: &str) -> Vec<AppliedManifestResourceMeta> {
    text.lines()
        .filter_map(|line| {
            let parts: Vec<&str> = line.split('/').collect();
            let [group, version, resource, namespace, name] = parts.as_slice() else {
                return None;
            };
            if version.is_empty() || resource.is_empty() || name.is_empty() {
                return None;
            }
            Some(AppliedManifestResourceMeta {
                group: (*group).to_string(),
                version: (*version).to_string(),
                resource: (*resource).to_string(),
                namespace: (*namespace).to_string(),
                name: (*name).to_string(),
                uid: String::new(),
            })
        })
        .collect()
}

/// What the AppliedManifestWork records: its `appliedResources`, or the annotation's list while
/// that is empty (nothing written since the create).
pub fn recorded(amw: &AppliedManifestWork) -> Vec<AppliedManifestResourceMeta> {
    let listed = amw
        .status
        .as_ref()
        .map(|s| s.applied_resources.clone())
        .unwrap_or_default();
    if !listed.is_empty() {
        return listed;
    }
    annotations_record(amw.metadata.annotations.as_ref())
}

/// The list in [`ANNOTATION`] of `annotations`, empty without one.
pub fn annotations_record(
    annotations: Option<&BTreeMap<String, String>>,
) -> Vec<AppliedManifestResourceMeta> {
    annotations
        .and_then(|a| a.get(ANNOTATION))
        .map(|text| parse_annotation(text))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use work_api::AppliedManifestWorkStatus;

    fn meta(
        group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> AppliedManifestResourceMeta {
        AppliedManifestResourceMeta {
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
            uid: String::new(),
        }
    }

    #[test]
    fn the_annotation_reads_back_what_was_written() {
        let resources = vec![
            meta("", "configmaps", "ns", "cm"),
            meta(
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "",
                "w.example.com",
            ),
        ];
        let text = annotation_text(&resources).expect("small");
        assert_eq!(
            text,
            "/v1/configmaps/ns/cm\napiextensions.k8s.io/v1/customresourcedefinitions//w.example.com"
        );
        assert_eq!(parse_annotation(&text), resources);
    }

    #[test]
    fn a_hostile_annotation_is_read_without_its_malformed_lines() {
        let text = "garbage\n/v1/configmaps/ns\n//configmaps/ns/x\n/v1//ns/x\n/v1/configmaps/ns/\n\
                    a/b/c/d/e/f\n/v1/configmaps/ns/ok";
        assert_eq!(
            parse_annotation(text),
            vec![meta("", "configmaps", "ns", "ok")]
        );
        assert!(parse_annotation("").is_empty());
    }

    #[test]
    fn too_many_resources_are_not_put_in_an_annotation() {
        let many: Vec<_> = (0..5000)
            .map(|i| meta("", "configmaps", "namespace", &format!("configmap-{i:05}")))
            .collect();
        assert_eq!(annotation_text(&many), None);
        assert!(annotation_text(&many[..100]).is_some());
    }

    #[test]
    fn the_status_is_the_record_once_it_lists_anything() {
        let mut amw = AppliedManifestWork::default();
        assert!(recorded(&amw).is_empty());
        amw.metadata.annotations = Some(BTreeMap::from([(
            ANNOTATION.to_string(),
            "/v1/configmaps/ns/a\n/v1/configmaps/ns/b".to_string(),
        )]));
        assert_eq!(recorded(&amw).len(), 2, "nothing written since the create");
        let mut a = meta("", "configmaps", "ns", "a");
        a.uid = "u1".into();
        amw.status = Some(AppliedManifestWorkStatus {
            applied_resources: vec![a.clone()],
            eviction_start_time: None,
        });
        assert_eq!(recorded(&amw), vec![a]);
        // A status with only an eviction time does not hide the annotation's list.
        amw.status = Some(AppliedManifestWorkStatus::default());
        assert_eq!(recorded(&amw).len(), 2);
    }
}
