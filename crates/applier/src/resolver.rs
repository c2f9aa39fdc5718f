//! apiVersion+kind <-> resource resolution through API discovery, cached per group version.
//!
//! The cache holds only group versions the API server serves (a group version it does not serve
//! is asked again at the next lookup, which a failing work's backoff spaces out), a group version
//! found gone is dropped, and at most [`MAX_CACHED_GROUP_VERSIONS`] are kept (least recently used
//! first out): whatever a hub sends, the cache stays bounded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::discovery::ApiResource;

use crate::ApplyError;
use work_semantics::ManifestId;

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

/// Most group versions the discovery cache keeps.
pub const MAX_CACHED_GROUP_VERSIONS: usize = 256;

/// Called with the number of cached group versions whenever it changes.
pub type SizeObserver = Arc<dyn Fn(usize) + Send + Sync>;

/// Discovery documents by `group/version`, each with a use stamp for least-recently-used
/// eviction. Pure data: the resolver locks it and never holds the lock across an await.
#[derive(Debug, Default)]
pub(crate) struct DiscoveryCache {
    entries: HashMap<String, (Arc<Vec<ResolvedResource>>, u64)>,
    clock: u64,
}

impl DiscoveryCache {
    /// The cached document of a group version, marked as just used.
    pub fn get(&mut self, key: &str) -> Option<Arc<Vec<ResolvedResource>>> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(key).map(|(list, used)| {
            *used = clock;
            list.clone()
        })
    }

    /// Stores what discovery said: an empty document (not served) removes the entry; over the
    /// cap, the least recently used entry goes.
    pub fn put(&mut self, key: String, list: Arc<Vec<ResolvedResource>>) {
        if list.is_empty() {
            self.entries.remove(&key);
            return;
        }
        self.clock += 1;
        self.entries.insert(key, (list, self.clock));
        while self.entries.len() > MAX_CACHED_GROUP_VERSIONS {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => self.entries.remove(&k),
                None => break,
            };
        }
    }

    /// Number of cached group versions.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Forgets every version of one API group (`group/version` keys).
    pub fn forget_group(&mut self, group: &str) {
        self.entries
            .retain(|key, _| key.rsplit_once('/').map(|(g, _)| g) != Some(group));
    }
}

/// Resolves apiVersion+kind and group+version+resource via discovery; cached, refreshed on a miss
/// so a CRD installed a moment ago resolves without restarting the agent.
#[derive(Clone)]
pub struct Resolver {
    client: kube::Client,
    // An Arc per document so lookups never hold the lock across an await.
    cache: Arc<Mutex<DiscoveryCache>>,
    observer: Option<SizeObserver>,
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
            observer: None,
        }
    }

    /// Reports the number of cached group versions to `observer` whenever it changes.
    pub fn with_size_observer(mut self, observer: SizeObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Number of cached group versions.
    pub fn cached_group_versions(&self) -> usize {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn observe(&self, size: usize) {
        if let Some(observer) = &self.observer {
            observer(size);
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

    /// Forgets what was discovered for one API group: its CRD was deleted, so the cache holds
    /// only what the spoke still serves (and stays bounded by it, however many kinds come and go).
    pub fn forget_group(&self, group: &str) {
        let size = {
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            cache.forget_group(group);
            cache.len()
        };
        self.observe(size);
    }

    /// Forgets everything discovered, e.g. after a CRD was deleted.
    pub fn invalidate(&self) {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.observe(0);
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
            .get(&key);
        if let Some(found) = cached
            .as_ref()
            .and_then(|list| list.iter().find(|r| matches(r)))
        {
            return Ok(Some(found.clone()));
        }
        // A miss may be a CRD installed since we last looked: ask the server again.
        let fresh = Arc::new(self.discover(group, version).await?);
        let found = fresh.iter().find(|r| matches(r)).cloned();
        let size = {
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            cache.put(key, fresh);
            cache.len()
        };
        self.observe(size);
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

/// The identity of object `namespace`/`name` of `resource`.
pub fn manifest_id_of(resource: &ResolvedResource, namespace: &str, name: &str) -> ManifestId {
    ManifestId {
        api_version: resource.api_version(),
        group: resource.group.clone(),
        version: resource.version.clone(),
        kind: resource.kind.clone(),
        name: name.to_string(),
        namespace: namespace.to_string(),
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

    fn doc(kind: &str) -> Arc<Vec<ResolvedResource>> {
        Arc::new(vec![ResolvedResource {
            group: "g".into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: kind.to_lowercase(),
            namespaced: true,
        }])
    }

    #[test]
    fn group_versions_not_served_are_not_cached_and_gone_ones_are_dropped() {
        let mut cache = DiscoveryCache::default();
        cache.put("missing.example/v1".into(), Arc::new(Vec::new()));
        assert_eq!(cache.len(), 0, "a miss takes no entry");
        cache.put("g/v1".into(), doc("Widget"));
        assert_eq!(cache.len(), 1);
        cache.put("g/v1".into(), Arc::new(Vec::new()));
        assert_eq!(cache.len(), 0, "a group version found gone is dropped");
    }

    #[test]
    fn a_deleted_group_takes_all_its_versions_and_nothing_else() {
        let mut cache = DiscoveryCache::default();
        cache.put("g.example/v1".into(), doc("Widget"));
        cache.put("g.example/v2".into(), doc("Widget"));
        cache.put("other.example/v1".into(), doc("Gadget"));
        cache.put("v1".into(), doc("ConfigMap"));
        cache.forget_group("g.example");
        assert_eq!(cache.len(), 2);
        assert!(cache.get("g.example/v1").is_none());
        assert!(cache.get("other.example/v1").is_some());
        assert!(
            cache.get("v1").is_some(),
            "core has no group prefix and is kept"
        );
    }

    #[test]
    fn the_cache_is_capped_and_evicts_the_least_recently_used() {
        let mut cache = DiscoveryCache::default();
        for i in 0..MAX_CACHED_GROUP_VERSIONS {
            cache.put(format!("g{i}/v1"), doc("Widget"));
        }
        assert!(cache.get("g0/v1").is_some(), "g0 used again");
        for i in 0..10 {
            cache.put(format!("new{i}/v1"), doc("Widget"));
        }
        assert_eq!(cache.len(), MAX_CACHED_GROUP_VERSIONS);
        assert!(cache.get("g0/v1").is_some(), "recently used: kept");
        assert!(cache.get("g1/v1").is_none(), "least recently used: evicted");
        assert!(cache.get("new9/v1").is_some());
        cache.clear();
        assert_eq!(cache.len(), 0);
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
