//! `spec.executor`: before a manifest is applied, the executor ServiceAccount must be allowed to
//! create, update, patch and get it (and delete it, when the work will own it), checked with
//! SubjectAccessReviews; an RBAC object must not grant more than the ServiceAccount holds
//! (checked by a dry-run create as the ServiceAccount). Answers are cached until RBAC changes.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use work_api::{ExecutorSubjectType, ManifestWorkExecutor};

use crate::spoke::triggers::Triggers;

/// How long an "allowed" answer is reused.
const ALLOWED_TTL: Duration = Duration::from_secs(300);
/// How long a "denied" answer is reused (short: a grant should take effect soon).
const DENIED_TTL: Duration = Duration::from_secs(10);

/// The resource a manifest writes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// API group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (plural).
    pub resource: String,
    /// Namespace (empty for cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// Verbs the executor needs on a resource.
pub fn verbs(owned_by_work: bool) -> &'static [&'static str] {
    if owned_by_work {
        &["create", "update", "patch", "get", "delete"]
    } else {
        &["create", "update", "patch", "get"]
    }
}

/// The ServiceAccount `(namespace, name)` of an executor, or why it cannot be used.
pub fn service_account(
    executor: &ManifestWorkExecutor,
) -> Result<Option<(String, String)>, String> {
    let Some(subject) = &executor.subject else {
        return Ok(None);
    };
    if subject.type_ != ExecutorSubjectType::ServiceAccount {
        return Err(format!(
            "only the ServiceAccount executor type is supported, not {:?}",
            subject.type_.as_str()
        ));
    }
    match &subject.service_account {
        Some(sa) if !sa.name.is_empty() && !sa.namespace.is_empty() => {
            Ok(Some((sa.namespace.clone(), sa.name.clone())))
        }
        _ => Err("the executor service account is not set".to_string()),
    }
}

/// The SubjectAccessReview asking whether the ServiceAccount may `verb` the target.
pub fn review(
    sa_namespace: &str,
    sa_name: &str,
    target: &Target,
    verb: &str,
) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{sa_namespace}:{sa_name}")),
            groups: Some(vec![
                "system:serviceaccounts".to_string(),
                "system:authenticated".to_string(),
                format!("system:serviceaccounts:{sa_namespace}"),
            ]),
            resource_attributes: Some(ResourceAttributes {
                group: Some(target.group.clone()),
                version: Some(target.version.clone()),
                resource: Some(target.resource.clone()),
                namespace: (!target.namespace.is_empty()).then(|| target.namespace.clone()),
                name: Some(target.name.clone()),
                verb: Some(verb.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// What a permission answer is about: the ServiceAccount, the object, whether delete is asked
/// too, and for RBAC objects a hash of the object (what it grants decides escalation).
type Key = (String, String, Target, bool, Option<String>);

/// A cached answer: when it was given, in which RBAC epoch, and whether the write is allowed.
#[derive(Clone, Copy, Debug)]
struct Answer {
    at: Instant,
    epoch: u64,
    allowed: bool,
}

/// Whether a cached answer still holds: given in the current RBAC epoch and younger than its
/// time to live.
fn still_valid(answer: &Answer, epoch: u64, now: Instant) -> bool {
    let ttl = if answer.allowed {
        ALLOWED_TTL
    } else {
        DENIED_TTL
    };
    answer.epoch == epoch && now.duration_since(answer.at) < ttl
}

/// RBAC resources: objects whose creation the API server checks for privilege escalation.
const RBAC_RESOURCES: [&str; 4] = [
    "roles",
    "rolebindings",
    "clusterroles",
    "clusterrolebindings",
];

/// Whether the target is an RBAC object, which may grant more than the executor holds.
pub fn is_rbac(target: &Target) -> bool {
    target.group == "rbac.authorization.k8s.io"
        && RBAC_RESOURCES.contains(&target.resource.as_str())
}

/// Checks executor permissions on the spoke: SubjectAccessReviews for the verbs, and for RBAC
/// objects a dry-run create as the ServiceAccount (the API server refuses one that grants more
/// than the ServiceAccount holds). Answers are cached until an RBAC object on the spoke changes
/// (an RBAC watch, started with the first check, moves the epoch and wakes the works that asked).
pub struct ExecutorCheck {
    spoke: kube::Client,
    api: Api<SubjectAccessReview>,
    cache: Mutex<HashMap<Key, Answer>>,
    epoch: Arc<AtomicU64>,
    /// Works that asked since the last RBAC change: woken when RBAC changes.
    asking: Arc<Mutex<HashSet<String>>>,
    rbac_watch: OnceLock<tokio::task::JoinHandle<()>>,
    triggers: Option<Triggers>,
}

impl ExecutorCheck {
    /// A checker using the spoke client; `triggers` receives the works to re-check when RBAC
    /// changes (none: nothing is woken).
    pub fn new(spoke: kube::Client, triggers: Option<Triggers>) -> Self {
        Self {
            api: Api::all(spoke.clone()),
            spoke,
            cache: Mutex::default(),
            epoch: Arc::default(),
            asking: Arc::default(),
            rbac_watch: OnceLock::new(),
            triggers,
        }
    }

    /// Drops what is kept for a work that is gone.
    pub fn forget_work(&self, work: &str) {
        self.asking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(work);
    }

    /// `Ok(())` when the work has no executor or it may apply `manifest` to the target;
    /// `Err(message)` for the `Applied` condition otherwise (also when a check itself fails).
    pub async fn check(
        &self,
        work: &str,
        executor: Option<&ManifestWorkExecutor>,
        target: &Target,
        owned_by_work: bool,
        manifest: &serde_json::Value,
    ) -> Result<(), String> {
        let Some(executor) = executor else {
            return Ok(());
        };
        let Some((ns, name)) = service_account(executor)? else {
            return Ok(());
        };
        self.start_rbac_watch();
        self.asking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(work.to_string());
        let rbac = is_rbac(target);
        let key = (
            ns.clone(),
            name.clone(),
            target.clone(),
            owned_by_work,
            rbac.then(|| applier::content_hash(manifest)),
        );
        let epoch = self.epoch.load(Ordering::Acquire);
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .copied()
            .filter(|a| still_valid(a, epoch, Instant::now()));
        let verdict = match cached {
            Some(answer) if answer.allowed => Verdict::Allowed,
            Some(_) => Verdict::Denied,
            None => {
                let verdict = self
                    .ask(&ns, &name, target, owned_by_work, rbac, manifest)
                    .await?;
                let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
                if cache.len() > 10_000 {
                    cache.clear();
                }
                cache.insert(
                    key,
                    Answer {
                        at: Instant::now(),
                        epoch,
                        allowed: verdict == Verdict::Allowed,
                    },
                );
                verdict
            }
        };
        match verdict {
            Verdict::Allowed => Ok(()),
            Verdict::Denied | Verdict::Escalation => Err(format!(
                "not allowed to apply the resource {} {}, {} {} with executor {ns}/{name}{}",
                target.group,
                target.resource,
                target.namespace,
                target.name,
                if verdict == Verdict::Escalation {
                    ": permission escalation"
                } else {
                    ""
                }
            )),
        }
    }

    /// Asks the API server: the verbs, then (RBAC objects) the dry-run create.
    async fn ask(
        &self,
        ns: &str,
        name: &str,
        target: &Target,
        owned_by_work: bool,
        rbac: bool,
        manifest: &serde_json::Value,
    ) -> Result<Verdict, String> {
        for verb in verbs(owned_by_work) {
            let answer = self
                .api
                .create(&crate::params::post(), &review(ns, name, target, verb))
                .await
                .map_err(|e| format!("checking the executor's permissions: {e}"))?;
            if !answer.status.is_some_and(|s| s.allowed) {
                return Ok(Verdict::Denied);
            }
        }
        if !rbac {
            return Ok(Verdict::Allowed);
        }
        let request = dry_run_create(ns, name, target, manifest)
            .map_err(|e| format!("checking the executor's permissions: {e}"))?;
        match self.spoke.request::<serde_json::Value>(request).await {
            Ok(_) => Ok(Verdict::Allowed),
            // The agent itself may not impersonate: its RBAC lacks what the check needs.
            Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("impersonate") => {
                Err(format!(
                    "checking the executor's permissions: the agent may not impersonate \
                     ServiceAccounts: {}",
                    s.message
                ))
            }
            Err(kube::Error::Api(s)) if s.code == 403 => Ok(Verdict::Escalation),
            // The escalation check comes before the existence check: an object that exists
            // passed it.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Verdict::Allowed),
            Err(e) => Err(format!(
                "checking the executor's permissions (dry-run create): {e}"
            )),
        }
    }

    /// Starts the RBAC watch once: any change of a Role, ClusterRole or binding after the initial
    /// list moves the epoch (every cached answer is asked again) and wakes the works that asked.
    fn start_rbac_watch(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.rbac_watch.get_or_init(|| {
            runtime.spawn(watch_rbac(
                self.spoke.clone(),
                self.epoch.clone(),
                self.asking.clone(),
                self.triggers.clone(),
            ))
        });
    }
}

impl Drop for ExecutorCheck {
    fn drop(&mut self) {
        if let Some(handle) = self.rbac_watch.get() {
            handle.abort();
        }
    }
}

/// The answer of a permission check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Allowed,
    Denied,
    Escalation,
}

/// A dry-run create of `manifest` as the ServiceAccount (impersonated): the API server's own
/// escalation check of RBAC objects.
fn dry_run_create(
    sa_namespace: &str,
    sa_name: &str,
    target: &Target,
    manifest: &serde_json::Value,
) -> Result<::http::Request<Vec<u8>>, String> {
    let mut path = format!("/apis/{}/{}", target.group, target.version);
    if !target.namespace.is_empty() {
        path.push_str(&format!("/namespaces/{}", target.namespace));
    }
    path.push_str(&format!("/{}?dryRun=All", target.resource));
    let mut body = manifest.clone();
    if let Some(meta) = body.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        for key in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "managedFields",
        ] {
            meta.remove(key);
        }
    }
    let body = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
    ::http::Request::post(path)
        .header(::http::header::CONTENT_TYPE, "application/json")
        .header(
            "Impersonate-User",
            format!("system:serviceaccount:{sa_namespace}:{sa_name}"),
        )
        .body(body)
        .map_err(|e| e.to_string())
}

/// The RBAC watch behind [`ExecutorCheck`]: metadata only, on the four RBAC resources.
async fn watch_rbac(
    spoke: kube::Client,
    epoch: Arc<AtomicU64>,
    asking: Arc<Mutex<HashSet<String>>>,
    triggers: Option<Triggers>,
) {
    use futures::StreamExt;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use kube::core::PartialObjectMeta;
    use kube::runtime::watcher::{self, Event};

    /// Whether a watch event is a change of an object (not a restart of the watch).
    fn changed<O>(event: watcher::Result<Event<O>>) -> bool {
        matches!(event, Ok(Event::Apply(_) | Event::Delete(_)))
    }
    let mut events = futures::stream::select_all([
        crate::spoke::metadata_events(Api::<PartialObjectMeta<Role>>::all(spoke.clone()))
            .map(changed)
            .boxed(),
        crate::spoke::metadata_events(Api::<PartialObjectMeta<RoleBinding>>::all(spoke.clone()))
            .map(changed)
            .boxed(),
        crate::spoke::metadata_events(Api::<PartialObjectMeta<ClusterRole>>::all(spoke.clone()))
            .map(changed)
            .boxed(),
        crate::spoke::metadata_events(Api::<PartialObjectMeta<ClusterRoleBinding>>::all(spoke))
            .map(changed)
            .boxed(),
    ]);
    while let Some(changed) = events.next().await {
        if !changed {
            continue;
        }
        epoch.fetch_add(1, Ordering::AcqRel);
        let works: Vec<String> = asking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .collect();
        if let Some(triggers) = &triggers {
            for work in works {
                if !triggers.send(work) {
                    return;
                }
            }
        }
    }
}

/// The permission check of one manifest of a work with an executor.
pub struct ExecutorGate<'a> {
    /// The checker (with its cache).
    pub check: &'a ExecutorCheck,
    /// The work asking.
    pub work: &'a str,
    /// The manifest to write.
    pub manifest: &'a serde_json::Value,
    /// The work's executor.
    pub executor: &'a ManifestWorkExecutor,
    /// The object to write.
    pub target: Target,
    /// Whether the work owns the object (then delete is checked too).
    pub owned_by_work: bool,
}

impl applier::WriteGate for ExecutorGate<'_> {
    fn may_write<'a>(
        &'a self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>> {
        Box::pin(self.check.check(
            self.work,
            Some(self.executor),
            &self.target,
            self.owned_by_work,
            self.manifest,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use work_api::{ManifestWorkExecutorSubject, ManifestWorkSubjectServiceAccount};

    fn executor(sa: Option<(&str, &str)>) -> ManifestWorkExecutor {
        ManifestWorkExecutor {
            subject: Some(ManifestWorkExecutorSubject {
                type_: ExecutorSubjectType::ServiceAccount,
                service_account: sa.map(|(ns, name)| ManifestWorkSubjectServiceAccount {
                    namespace: ns.into(),
                    name: name.into(),
                }),
            }),
        }
    }

    #[test]
    fn service_account_is_required_and_typed() {
        assert_eq!(
            service_account(&executor(Some(("ns", "sa")))),
            Ok(Some(("ns".to_string(), "sa".to_string())))
        );
        assert!(service_account(&executor(None)).is_err());
        assert_eq!(service_account(&ManifestWorkExecutor::default()), Ok(None));
        let mut other = executor(Some(("ns", "sa")));
        if let Some(s) = other.subject.as_mut() {
            s.type_ = ExecutorSubjectType::Unknown("User".into());
        }
        assert!(service_account(&other).is_err_and(|e| e.contains("User")));
    }

    #[test]
    fn an_answer_holds_within_its_epoch_and_time_to_live() {
        let now = Instant::now();
        let allowed = Answer {
            at: now,
            epoch: 3,
            allowed: true,
        };
        assert!(still_valid(&allowed, 3, now + Duration::from_secs(60)));
        assert!(!still_valid(&allowed, 4, now), "RBAC changed since");
        assert!(!still_valid(&allowed, 3, now + ALLOWED_TTL));
        let denied = Answer {
            allowed: false,
            ..allowed
        };
        assert!(!still_valid(&denied, 3, now + DENIED_TTL));
    }

    #[test]
    fn rbac_objects_get_a_dry_run_create_as_the_service_account() {
        let target = Target {
            group: "rbac.authorization.k8s.io".into(),
            version: "v1".into(),
            resource: "roles".into(),
            namespace: "ns1".into(),
            name: "r".into(),
        };
        assert!(is_rbac(&target));
        let manifest = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role", "metadata": {"name": "r", "namespace": "ns1",
            "resourceVersion": "5"}, "rules": []});
        let request = dry_run_create("ns", "sa", &target, &manifest).expect("request");
        assert_eq!(
            request.uri().to_string(),
            "/apis/rbac.authorization.k8s.io/v1/namespaces/ns1/roles?dryRun=All"
        );
        assert_eq!(
            request
                .headers()
                .get("Impersonate-User")
                .map(|v| v.as_bytes()),
            Some(&b"system:serviceaccount:ns:sa"[..])
        );
        let body: serde_json::Value = serde_json::from_slice(request.body()).expect("JSON body");
        assert!(body.pointer("/metadata/resourceVersion").is_none());
        let configmaps = Target {
            group: String::new(),
            resource: "configmaps".into(),
            ..target
        };
        assert!(!is_rbac(&configmaps));
    }

    #[test]
    fn reviews_name_the_service_account_and_the_object() {
        let target = Target {
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments".into(),
            namespace: "".into(),
            name: "d".into(),
        };
        let r = review("ns", "sa", &target, "delete");
        assert_eq!(r.spec.user.as_deref(), Some("system:serviceaccount:ns:sa"));
        let attrs = r.spec.resource_attributes.expect("attributes");
        assert_eq!(attrs.verb.as_deref(), Some("delete"));
        assert_eq!(attrs.namespace, None);
        assert_eq!(verbs(true).len(), 5);
        assert!(!verbs(false).contains(&"delete"));
    }
}
