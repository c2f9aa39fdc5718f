//! apiVersion+kind <-> resource resolution through API discovery, cached per group version.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::discovery::ApiResource;

use crate::ApplyError;

/// A resolved API resource: what the API server serves for a kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResolvedResource {
    /// API group; empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Resource (plural).
    pub plural: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
}

impl ResolvedResource {
    /// The kube `ApiResource` for building `Api<DynamicObject>`.
    pub fn api_resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: self.api_version(),
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }

    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        group_version(&self.group, &self.version)
    }
}

/// Resolves apiVersion+kind and group+version+resource via discovery; cached, refreshed on a miss
/// so a CRD installed a moment ago resolves without restarting the agent.
#[derive(Clone)]
pub struct Resolver {
    client: kube::Client,
    // Keyed by `group/version`; an Arc so lookups never hold the lock across an await.
    cache: Arc<Mutex<HashMap<String, Arc<Vec<ResolvedResource>>>>>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver").finish_non_exhaustive()
    }
}

impl Resolver {
    /// A resolver with an empty cache.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            cache: Arc::default(),
        }
    }

    /// Resolves an apiVersion (`v1`, `apps/v1`) and kind.
    pub async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<ResolvedResource, ApplyError> {
        let (group, version) = split_api_version(api_version)?;
        if kind.is_empty() {
            return Err(ApplyError::InvalidManifest("kind is empty".into()));
        }
        let found = self.lookup(group, version, |r| r.kind == kind).await?;
        found.ok_or_else(|| ApplyError::UnknownKind {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        })
    }

    /// Resolves a group, version and resource (plural), e.g. from an AppliedManifestWork entry.
    pub async fn resolve_resource(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Result<ResolvedResource, ApplyError> {
        if version.is_empty() || resource.is_empty() {
            return Err(ApplyError::InvalidManifest(format!(
                "resource \"{resource}\" in \"{}\" needs a version and a resource name",
                group_version(group, version)
            )));
        }
        let found = self
            .lookup(group, version, |r| r.plural == resource)
            .await?;
        found.ok_or_else(|| ApplyError::UnknownResource {
            group_version: group_version(group, version),
            resource: resource.to_string(),
        })
    }

    /// Forgets everything discovered, e.g. after a CRD was deleted.
    pub fn invalidate(&self) {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    async fn lookup(
        &self,
        group: &str,
        version: &str,
        matches: impl Fn(&ResolvedResource) -> bool,
    ) -> Result<Option<ResolvedResource>, ApplyError> {
        let key = group_version(group, version);
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        if let Some(found) = cached
            .as_ref()
            .and_then(|list| list.iter().find(|r| matches(r)))
        {
            return Ok(Some(found.clone()));
        }
        // A miss may be a CRD installed since we last looked: ask the server again.
        let fresh = Arc::new(self.discover(group, version).await?);
        let found = fresh.iter().find(|r| matches(r)).cloned();
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, fresh);
        Ok(found)
    }

    async fn discover(
        &self,
        group: &str,
        version: &str,
    ) -> Result<Vec<ResolvedResource>, ApplyError> {
        let gv = group_version(group, version);
        let listed = if group.is_empty() {
            self.client.list_core_api_resources(version).await
        } else {
            self.client.list_api_group_resources(&gv).await
        };
        match listed {
            Ok(list) => Ok(resources_of(group, version, &list)),
            // The group version is not served at all (yet): nothing resolves in it.
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(Vec::new()),
            Err(err) => Err(ApplyError::from_kube("discover", gv, err)),
        }
    }
}

/// The top-level resources of one discovery document (subresources like `pods/status` skipped).
pub(crate) fn resources_of(
    group: &str,
    version: &str,
    list: &APIResourceList,
) -> Vec<ResolvedResource> {
    list.resources
        .iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| ResolvedResource {
            group: r
                .group
                .clone()
                .filter(|g| !g.is_empty())
                .unwrap_or_else(|| group.to_string()),
            version: r
                .version
                .clone()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| version.to_string()),
            kind: r.kind.clone(),
            plural: r.name.clone(),
            namespaced: r.namespaced,
        })
        .collect()
}

/// Splits `apps/v1` into (`apps`, `v1`) and `v1` into (``, `v1`).
pub(crate) fn split_api_version(api_version: &str) -> Result<(&str, &str), ApplyError> {
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    };
    if version.is_empty()
        || version.contains('/')
        || (api_version.contains('/') && group.is_empty())
    {
        return Err(ApplyError::InvalidManifest(format!(
            "apiVersion \"{api_version}\" is not of the form <version> or <group>/<version>"
        )));
    }
    Ok((group, version))
}

/// `group/version`, or `version` for the core group.
pub(crate) fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

    #[test]
    fn splits_api_versions() {
        assert_eq!(split_api_version("v1").ok(), Some(("", "v1")));
        assert_eq!(split_api_version("apps/v1").ok(), Some(("apps", "v1")));
        for bad in ["", "/v1", "apps/", "a/b/c"] {
            let err = split_api_version(bad).err().map(|e| e.to_string());
            assert!(
                err.as_deref()
                    .is_some_and(|e| e.contains("is not of the form")),
                "{bad:?} gave {err:?}"
            );
        }
    }

    #[test]
    fn discovery_document_skips_subresources_and_keeps_scope() {
        let res = |name: &str, kind: &str, namespaced: bool| APIResource {
            name: name.into(),
            kind: kind.into(),
            namespaced,
            ..Default::default()
        };
        let list = APIResourceList {
            group_version: "apps/v1".into(),
            resources: vec![
                res("deployments", "Deployment", true),
                res("deployments/status", "Deployment", true),
                res("deployments/scale", "Scale", true),
                res("controllerrevisions", "ControllerRevision", true),
            ],
        };
        let got = resources_of("apps", "v1", &list);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0],
            ResolvedResource {
                group: "apps".into(),
                version: "v1".into(),
                kind: "Deployment".into(),
                plural: "deployments".into(),
                namespaced: true,
            }
        );
        assert_eq!(got[0].api_version(), "apps/v1");
        assert_eq!(got[0].api_resource().api_version, "apps/v1");
    }

    #[test]
    fn core_group_api_version_has_no_slash() {
        let r = ResolvedResource {
            group: String::new(),
            version: "v1".into(),
            kind: "Namespace".into(),
            plural: "namespaces".into(),
            namespaced: false,
        };
        assert_eq!(r.api_version(), "v1");
    }
}
