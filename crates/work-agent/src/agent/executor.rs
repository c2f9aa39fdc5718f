//! `spec.executor`: before a manifest is applied, the executor ServiceAccount must be allowed to
//! create, update, patch and get it (and delete it, when the work will own it), as upstream
//! checks with SubjectAccessReviews. Answers are cached briefly so that resyncs stay cheap.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use work_api::{ExecutorSubjectType, ManifestWorkExecutor};

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

type Key = (String, String, Target, bool);

/// Checks executor permissions with SubjectAccessReviews on the spoke, with a small cache.
pub struct ExecutorCheck {
    api: Api<SubjectAccessReview>,
    cache: Mutex<HashMap<Key, (Instant, bool)>>,
}

impl ExecutorCheck {
    /// A checker using the spoke client.
    pub fn new(spoke: kube::Client) -> Self {
        Self {
            api: Api::all(spoke),
            cache: Mutex::default(),
        }
    }

    /// `Ok(())` when the work has no executor or it may apply the target; `Err(message)` for
    /// the `Applied` condition otherwise (also when the review itself fails).
    pub async fn check(
        &self,
        executor: Option<&ManifestWorkExecutor>,
        target: &Target,
        owned_by_work: bool,
    ) -> Result<(), String> {
        let Some(executor) = executor else {
            return Ok(());
        };
        let Some((ns, name)) = service_account(executor)? else {
            return Ok(());
        };
        let key = (ns.clone(), name.clone(), target.clone(), owned_by_work);
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .copied();
        let allowed = match cached {
            Some((at, allowed))
                if at.elapsed() < if allowed { ALLOWED_TTL } else { DENIED_TTL } =>
            {
                allowed
            }
            _ => {
                let mut allowed = true;
                for verb in verbs(owned_by_work) {
                    let answer = self
                        .api
                        .create(&super::params::post(), &review(&ns, &name, target, verb))
                        .await
                        .map_err(|e| format!("checking the executor's permissions: {e}"))?;
                    if !answer.status.is_some_and(|s| s.allowed) {
                        allowed = false;
                        break;
                    }
                }
                let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
                if cache.len() > 10_000 {
                    cache.clear();
                }
                cache.insert(key, (Instant::now(), allowed));
                allowed
            }
        };
        if allowed {
            Ok(())
        } else {
            Err(format!(
                "not allowed to apply the resource {} {}, {} {} with executor {ns}/{name}",
                target.group, target.resource, target.namespace, target.name
            ))
        }
    }
}

/// The applier's write gate for one manifest of a work with an executor: the permission check
/// runs only when a write is about to be sent.
pub struct ExecutorGate<'a> {
    /// The checker (with its cache).
    pub check: &'a ExecutorCheck,
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
        Box::pin(
            self.check
                .check(Some(self.executor), &self.target, self.owned_by_work),
        )
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
