//! The applier against a real API server: every update strategy, server-side apply conflicts,
//! shared ownership, UID-guarded deletion, ignoreFields, no-op updates and error messages.
//! Each test works in its own namespace and owns its own AppliedManifestWorks (real objects, so
//! the garbage collector does not remove what they own).

use std::collections::BTreeMap;
use std::time::Duration;

use applier::{
    AGENT_LABEL, Applied, Applier, ApplyError, ApplyOutcome, ApplyRequest, CompleteCheck,
    DeleteOutcome, Resolver, owner_reference,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::{Value, json};
use test_support::{TestCluster, unique_name, wait_for};
use work_api::{
    AppliedManifestResourceMeta, AppliedManifestWork, AppliedManifestWorkSpec, CelExpression,
    ConditionRule, ConditionRuleType, IgnoreField, IgnoreFieldsCondition, ServerSideApplyConfig,
    UpdateStrategy, UpdateStrategyType,
};

const TIMEOUT: Duration = Duration::from_secs(60);

/// The pre-update check as the agent makes it: the manifest's `Complete` rules on the live object.
struct CompleteRules(Vec<ConditionRule>);

impl CompleteCheck for CompleteRules {
    fn is_complete<'a>(
        &'a self,
        live: &'a Value,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>> {
        Box::pin(
            async move { conditions::Evaluator::shared().is_complete(&self.0, live) == Some(true) },
        )
    }
}

struct Env {
    spoke: TestCluster,
    applier: Applier,
    ns: String,
    labels: BTreeMap<String, String>,
    owners: Vec<String>,
}

impl Env {
    async fn new(prefix: &str) -> Self {
        let spoke = TestCluster::spoke().await;
        let ns = spoke.namespace(prefix).await;
        let applier = Applier::new(spoke.client.clone(), Resolver::new(spoke.client.clone()));
        let labels = [(AGENT_LABEL.to_string(), "test-agent".to_string())].into();
        Self {
            spoke,
            applier,
            ns,
            labels,
            owners: Vec::new(),
        }
    }

    /// Creates an AppliedManifestWork to own objects and returns our ownerReference to it.
    async fn owner(&mut self) -> OwnerReference {
        let name = unique_name("applier-amw");
        let amw = AppliedManifestWork {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            spec: AppliedManifestWorkSpec {
                hub_hash: "test".into(),
                agent_id: String::new(),
                manifest_work_name: name.clone(),
            },
            status: None,
        };
        let created = Api::<AppliedManifestWork>::all(self.spoke.client.clone())
            .create(&PostParams::default(), &amw)
            .await
            .expect("create AppliedManifestWork (is its CRD installed on the spoke?)");
        self.owners.push(name);
        owner_reference(&created)
    }

    fn cm(&self, name: &str, data: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": self.ns},
            "data": data
        })
    }

    async fn apply(
        &self,
        manifest: &Value,
        strategy: &UpdateStrategy,
        owner: Option<&OwnerReference>,
    ) -> Result<Applied, ApplyError> {
        self.apply_with_rules(manifest, strategy, owner, &[]).await
    }

    async fn apply_with_rules(
        &self,
        manifest: &Value,
        strategy: &UpdateStrategy,
        owner: Option<&OwnerReference>,
        rules: &[ConditionRule],
    ) -> Result<Applied, ApplyError> {
        let check = CompleteRules(rules.to_vec());
        self.applier
            .apply(ApplyRequest {
                manifest,
                strategy,
                owner: owner.cloned(),
                labels: &self.labels,
                complete_check: (!rules.is_empty()).then_some(&check as &dyn CompleteCheck),
                cached: None,
                write_gate: None,
            })
            .await
    }

    fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.spoke.client.clone(), &self.ns)
    }

    async fn live_cm(&self, name: &str) -> Option<ConfigMap> {
        self.configmaps()
            .get_opt(name)
            .await
            .expect("read ConfigMap")
    }

    fn meta(&self, name: &str, uid: &str) -> AppliedManifestResourceMeta {
        AppliedManifestResourceMeta {
            group: String::new(),
            version: "v1".into(),
            resource: "configmaps".into(),
            name: name.into(),
            namespace: self.ns.clone(),
            uid: uid.into(),
        }
    }

    async fn cleanup(self) {
        let amws = Api::<AppliedManifestWork>::all(self.spoke.client.clone());
        for name in &self.owners {
            let _ = amws.delete(name, &DeleteParams::default()).await;
        }
        self.spoke.cleanup().await;
    }
}

fn strategy(type_: UpdateStrategyType) -> UpdateStrategy {
    UpdateStrategy {
        type_,
        server_side_apply: None,
    }
}

fn ssa(force: bool, ignore_fields: Vec<IgnoreField>) -> UpdateStrategy {
    UpdateStrategy {
        type_: UpdateStrategyType::ServerSideApply,
        server_side_apply: Some(ServerSideApplyConfig {
            force,
            field_manager: None,
            ignore_fields,
        }),
    }
}

fn data(cm: &ConfigMap, key: &str) -> Option<String> {
    cm.data.as_ref().and_then(|d| d.get(key)).cloned()
}

fn owner_uids(cm: &ConfigMap) -> Vec<String> {
    cm.metadata
        .owner_references
        .iter()
        .flatten()
        .map(|r| r.uid.clone())
        .collect()
}

fn rv(applied: &Applied) -> String {
    applied
        .object
        .as_ref()
        .and_then(|o| o["metadata"]["resourceVersion"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn uid_of(applied: &Applied) -> String {
    applied
        .object
        .as_ref()
        .and_then(|o| o["metadata"]["uid"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Changes a ConfigMap key as another actor would (a different field manager, Update operation).
async fn spoke_edit(env: &Env, name: &str, key: &str, value: &str) {
    env.configmaps()
        .patch(
            name,
            &PatchParams {
                field_manager: Some("spoke-user".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"data": {key: value}})),
        )
        .await
        .expect("spoke edit");
}

#[tokio::test]
async fn update_creates_updates_skips_noops_and_repairs_drift() {
    let mut env = Env::new("applier-update").await;
    let owner = env.owner().await;
    let update = strategy(UpdateStrategyType::Update);

    let created = env
        .apply(&env.cm("cfg", json!({"a": "1"})), &update, Some(&owner))
        .await
        .expect("create");
    assert_eq!(created.outcome, ApplyOutcome::Created);
    assert_eq!(created.resource.plural, "configmaps");
    let live = env.live_cm("cfg").await.expect("created");
    assert_eq!(owner_uids(&live), vec![owner.uid.clone()]);
    assert_eq!(
        live.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(AGENT_LABEL))
            .map(String::as_str),
        Some("test-agent")
    );

    let again = env
        .apply(&env.cm("cfg", json!({"a": "1"})), &update, Some(&owner))
        .await
        .expect("re-apply");
    assert_eq!(again.outcome, ApplyOutcome::Unchanged);
    assert_eq!(rv(&again), rv(&created), "a no-op update must not write");
    let live = env.live_cm("cfg").await.expect("exists");
    assert_eq!(
        live.metadata.resource_version.as_deref(),
        Some(rv(&created).as_str())
    );

    let changed = env
        .apply(&env.cm("cfg", json!({"a": "2"})), &update, Some(&owner))
        .await
        .expect("update");
    assert_eq!(changed.outcome, ApplyOutcome::Updated);
    assert_ne!(rv(&changed), rv(&created));
    assert_eq!(
        data(&env.live_cm("cfg").await.expect("exists"), "a").as_deref(),
        Some("2")
    );

    // Drift on the spoke is repaired; fields others added are kept.
    spoke_edit(&env, "cfg", "a", "drifted").await;
    spoke_edit(&env, "cfg", "extra", "theirs").await;
    let repaired = env
        .apply(&env.cm("cfg", json!({"a": "2"})), &update, Some(&owner))
        .await
        .expect("repair");
    assert_eq!(repaired.outcome, ApplyOutcome::Updated);
    let live = env.live_cm("cfg").await.expect("exists");
    assert_eq!(data(&live, "a").as_deref(), Some("2"));

    // A key removed from the manifest is removed from the object.
    env.apply(
        &env.cm("cfg", json!({"a": "2", "b": "x"})),
        &update,
        Some(&owner),
    )
    .await
    .expect("add b");
    let removed = env
        .apply(&env.cm("cfg", json!({"a": "2"})), &update, Some(&owner))
        .await
        .expect("drop b");
    assert_eq!(removed.outcome, ApplyOutcome::Updated);
    assert_eq!(data(&env.live_cm("cfg").await.expect("exists"), "b"), None);

    // After a restart (a new applier remembers nothing) a dropped key is still noticed: the
    // fields the agent's manager changed are in managedFields.
    env.apply(
        &env.cm("cfg", json!({"a": "2", "c": "y"})),
        &update,
        Some(&owner),
    )
    .await
    .expect("add c");
    env.applier = Applier::new(
        env.spoke.client.clone(),
        Resolver::new(env.spoke.client.clone()),
    );
    let removed = env
        .apply(&env.cm("cfg", json!({"a": "2"})), &update, Some(&owner))
        .await
        .expect("drop c after a restart");
    assert_eq!(removed.outcome, ApplyOutcome::Updated);
    let live = env.live_cm("cfg").await.expect("exists");
    assert_eq!(data(&live, "c"), None);
    assert_eq!(
        data(&live, "extra").as_deref(),
        Some("theirs"),
        "others' keys kept"
    );
    assert_no_annotations_of_ours(&live);
    let idle = env
        .apply(&env.cm("cfg", json!({"a": "2"})), &update, Some(&owner))
        .await
        .expect("resync");
    assert_eq!(idle.outcome, ApplyOutcome::Unchanged);
    env.cleanup().await;
}

/// The agent leaves nothing of its own on the objects it applies (its label and
/// ownerReference aside).
fn assert_no_annotations_of_ours(live: &ConfigMap) {
    let ours: Vec<&String> = live
        .metadata
        .annotations
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("work.open-cluster-management.io/"))
        .collect();
    assert!(ours.is_empty(), "annotations of the agent: {ours:?}");
}

#[tokio::test]
async fn update_of_a_defaulted_object_is_a_no_op_once_known() {
    // A Deployment's defaults are owned by the creating manager: after a restart the applier
    // may send one needless update (the server defaults the fields again, nothing changes),
    // then resyncs send nothing.
    let mut env = Env::new("applier-defaults").await;
    let owner = env.owner().await;
    let update = strategy(UpdateStrategyType::Update);
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "namespace": env.ns},
        "spec": {"selector": {"matchLabels": {"app": "d"}},
                 "template": {"metadata": {"labels": {"app": "d"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
    let created = env
        .apply(&deploy, &update, Some(&owner))
        .await
        .expect("create");
    let again = env
        .apply(&deploy, &update, Some(&owner))
        .await
        .expect("resync");
    assert_eq!(again.outcome, ApplyOutcome::Unchanged);
    env.applier = Applier::new(
        env.spoke.client.clone(),
        Resolver::new(env.spoke.client.clone()),
    );
    let first = env
        .apply(&deploy, &update, Some(&owner))
        .await
        .expect("after restart");
    assert_eq!(
        first.outcome,
        ApplyOutcome::Unchanged,
        "defaults came back: no change"
    );
    // The controller writes status (so the resourceVersion moves); the spec is untouched.
    let generation = |a: &Applied| {
        a.object
            .as_ref()
            .and_then(|o| o.pointer("/metadata/generation"))
            .cloned()
    };
    assert_eq!(generation(&first), generation(&created));
    let second = env
        .apply(&deploy, &update, Some(&owner))
        .await
        .expect("resync");
    assert_eq!(second.outcome, ApplyOutcome::Unchanged);
    env.cleanup().await;
}

#[tokio::test]
async fn concurrent_updates_retry_conflicts_from_a_fresh_read() {
    let mut env = Env::new("applier-conflict").await;
    let owner = env.owner().await;
    let update = strategy(UpdateStrategyType::Update);
    env.apply(&env.cm("busy", json!({"v": "0"})), &update, Some(&owner))
        .await
        .expect("create");
    // Eight writers race on one object: every one must succeed (409s retried), none may fail.
    let manifests: Vec<Value> = (1..=8)
        .map(|i| env.cm("busy", json!({"v": i.to_string()})))
        .collect();
    let results = futures::future::join_all(
        manifests
            .iter()
            .map(|m| env.apply(m, &update, Some(&owner))),
    )
    .await;
    for r in &results {
        assert!(
            r.is_ok(),
            "concurrent update failed: {:?}",
            r.as_ref().err().map(ToString::to_string)
        );
    }
    let v = data(&env.live_cm("busy").await.expect("exists"), "v").unwrap_or_default();
    assert!(
        (1..=8).any(|i| v == i.to_string()),
        "final value {v:?} is one of the writers'"
    );
    env.cleanup().await;
}

#[tokio::test]
async fn create_only_never_updates() {
    let mut env = Env::new("applier-createonly").await;
    let owner = env.owner().await;
    let create_only = strategy(UpdateStrategyType::CreateOnly);
    let first = env
        .apply(
            &env.cm("once", json!({"a": "1"})),
            &create_only,
            Some(&owner),
        )
        .await
        .expect("create");
    assert_eq!(first.outcome, ApplyOutcome::Created);
    assert_eq!(
        owner_uids(&env.live_cm("once").await.expect("created")),
        vec![owner.uid.clone()]
    );
    let second = env
        .apply(
            &env.cm("once", json!({"a": "2"})),
            &create_only,
            Some(&owner),
        )
        .await
        .expect("second apply");
    assert_eq!(second.outcome, ApplyOutcome::CreateOnlyExists);
    assert_eq!(rv(&second), rv(&first));
    assert_eq!(
        data(&env.live_cm("once").await.expect("exists"), "a").as_deref(),
        Some("1")
    );
    env.cleanup().await;
}

#[tokio::test]
async fn read_only_never_writes() {
    let env = Env::new("applier-readonly").await;
    let read_only = strategy(UpdateStrategyType::ReadOnly);
    let manifest = env.cm("watched", json!({"a": "mine"}));
    let absent = env
        .apply(&manifest, &read_only, None)
        .await
        .expect("read absent");
    assert_eq!(absent.outcome, ApplyOutcome::ReadOnly);
    assert!(absent.object.is_none());
    assert!(
        env.live_cm("watched").await.is_none(),
        "ReadOnly must not create"
    );

    let theirs = ConfigMap {
        metadata: ObjectMeta {
            name: Some("watched".into()),
            ..ObjectMeta::default()
        },
        data: Some([("a".to_string(), "theirs".to_string())].into()),
        ..ConfigMap::default()
    };
    env.configmaps()
        .create(&PostParams::default(), &theirs)
        .await
        .expect("create theirs");
    let present = env
        .apply(&manifest, &read_only, None)
        .await
        .expect("read present");
    assert_eq!(present.outcome, ApplyOutcome::ReadOnly);
    assert_eq!(
        present.object.as_ref().map(|o| o["data"]["a"].clone()),
        Some(json!("theirs"))
    );
    let live = env.live_cm("watched").await.expect("exists");
    assert_eq!(data(&live, "a").as_deref(), Some("theirs"));
    assert!(live.metadata.labels.is_none(), "ReadOnly must not label");
    env.cleanup().await;
}

#[tokio::test]
async fn server_side_apply_uses_the_field_manager_and_owner() {
    let mut env = Env::new("applier-ssa").await;
    let owner = env.owner().await;
    let plain = ssa(false, Vec::new());
    let created = env
        .apply(&env.cm("ssa", json!({"a": "1"})), &plain, Some(&owner))
        .await
        .expect("apply");
    assert_eq!(created.outcome, ApplyOutcome::Created);
    let live = env.live_cm("ssa").await.expect("created");
    assert_eq!(owner_uids(&live), vec![owner.uid.clone()]);
    let managers: Vec<(String, String)> = live
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("work-agent".to_string(), "Apply".to_string())),
        "managers: {managers:?}"
    );
    let again = env
        .apply(&env.cm("ssa", json!({"a": "1"})), &plain, Some(&owner))
        .await
        .expect("re-apply");
    assert_eq!(again.outcome, ApplyOutcome::Unchanged);
    // A key the manifest drops is noticed from managedFields and removed by the server.
    env.apply(
        &env.cm("ssa", json!({"a": "1", "b": "x"})),
        &plain,
        Some(&owner),
    )
    .await
    .expect("add b");
    let dropped = env
        .apply(&env.cm("ssa", json!({"a": "1"})), &plain, Some(&owner))
        .await
        .expect("drop b");
    assert_eq!(dropped.outcome, ApplyOutcome::Updated);
    let live = env.live_cm("ssa").await.expect("exists");
    assert_eq!(data(&live, "b"), None);
    assert_no_annotations_of_ours(&live);
    let changed = env
        .apply(&env.cm("ssa", json!({"a": "2"})), &plain, Some(&owner))
        .await
        .expect("change");
    assert_eq!(changed.outcome, ApplyOutcome::Updated);
    assert_eq!(
        data(&env.live_cm("ssa").await.expect("exists"), "a").as_deref(),
        Some("2")
    );

    // Drift is noticed although the patch is unchanged: a spoke edit (which takes the field
    // over, so repairing it needs `force`) and a lost ownerReference.
    spoke_edit(&env, "ssa", "a", "drifted").await;
    let manifest = env.cm("ssa", json!({"a": "2"}));
    let repaired = env
        .apply(&manifest, &ssa(true, Vec::new()), Some(&owner))
        .await
        .expect("repair drift");
    assert_eq!(repaired.outcome, ApplyOutcome::Updated);
    assert_eq!(
        data(&env.live_cm("ssa").await.expect("exists"), "a").as_deref(),
        Some("2")
    );
    env.configmaps()
        .patch(
            "ssa",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"ownerReferences": null}})),
        )
        .await
        .expect("drop owner");
    let reowned = env
        .apply(&manifest, &ssa(true, Vec::new()), Some(&owner))
        .await
        .expect("re-own");
    assert_eq!(reowned.outcome, ApplyOutcome::Updated);
    assert_eq!(
        owner_uids(&env.live_cm("ssa").await.expect("exists")),
        vec![owner.uid.clone()]
    );
    let settled = env
        .apply(&manifest, &ssa(true, Vec::new()), Some(&owner))
        .await
        .expect("settled");
    assert_eq!(settled.outcome, ApplyOutcome::Unchanged);
    assert_eq!(rv(&settled), rv(&reowned));
    env.cleanup().await;
}

#[tokio::test]
async fn server_side_apply_conflict_fails_without_force_and_wins_with_it() {
    let mut env = Env::new("applier-ssa-conflict").await;
    let owner = env.owner().await;
    // Another manager owns data.key.
    let theirs = env.cm("contested", json!({"key": "theirs"}));
    env.configmaps()
        .patch(
            "contested",
            &PatchParams::apply("someone-else"),
            &Patch::Apply(&theirs),
        )
        .await
        .expect("other manager applies");

    let ours = env.cm("contested", json!({"key": "ours"}));
    let err = env
        .apply(&ours, &ssa(false, Vec::new()), Some(&owner))
        .await
        .expect_err("conflict without force");
    assert!(err.is_conflict(), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("Conflict") && text.contains("someone-else"),
        "{text}"
    );
    assert_eq!(
        data(&env.live_cm("contested").await.expect("exists"), "key").as_deref(),
        Some("theirs")
    );

    let forced = env
        .apply(&ours, &ssa(true, Vec::new()), Some(&owner))
        .await
        .expect("forced apply");
    assert_eq!(forced.outcome, ApplyOutcome::Updated);
    let live = env.live_cm("contested").await.expect("exists");
    assert_eq!(data(&live, "key").as_deref(), Some("ours"));
    assert_eq!(owner_uids(&live), vec![owner.uid.clone()]);
    env.cleanup().await;
}

#[tokio::test]
async fn shared_resource_is_deleted_only_when_the_last_owner_lets_go() {
    let mut env = Env::new("applier-shared").await;
    let a = env.owner().await;
    let b = env.owner().await;
    for strategy in [strategy(UpdateStrategyType::Update), ssa(false, Vec::new())] {
        let name = format!("shared-{}", strategy.type_.as_str().to_lowercase());
        let manifest = env.cm(&name, json!({"k": "v"}));
        let first = env
            .apply(&manifest, &strategy, Some(&a))
            .await
            .expect("apply for a");
        env.apply(&manifest, &strategy, Some(&b))
            .await
            .expect("apply for b");
        let live = env.live_cm(&name).await.expect("exists");
        assert_eq!(
            owner_uids(&live),
            vec![a.uid.clone(), b.uid.clone()],
            "{name}"
        );
        // Re-applying for a must not drop b's reference (and vice versa).
        env.apply(&manifest, &strategy, Some(&a))
            .await
            .expect("re-apply for a");
        assert_eq!(
            owner_uids(&env.live_cm(&name).await.expect("exists")).len(),
            2,
            "{name}"
        );

        let meta = env.meta(&name, &uid_of(&first));
        let out = env
            .applier
            .delete_owned(&meta, &a.uid, PropagationPolicy::Foreground)
            .await
            .expect("delete for a");
        assert_eq!(out, DeleteOutcome::OwnerRemoved, "{name}");
        let live = env.live_cm(&name).await.expect("still there for b");
        assert_eq!(owner_uids(&live), vec![b.uid.clone()], "{name}");
        assert!(live.metadata.deletion_timestamp.is_none());

        // a no longer owns it: a second delete for a touches nothing.
        let again = env
            .applier
            .delete_owned(&meta, &a.uid, PropagationPolicy::Foreground)
            .await
            .expect("delete for a again");
        assert_eq!(again, DeleteOutcome::NotOwned);

        let out = env
            .applier
            .delete_owned(&meta, &b.uid, PropagationPolicy::Background)
            .await
            .expect("delete for b");
        assert_eq!(out, DeleteOutcome::Deleted, "{name}");
        wait_for(&format!("{name} to be gone"), TIMEOUT, || async {
            env.live_cm(&name).await.is_none().then_some(())
        })
        .await;
        let gone = env
            .applier
            .delete_owned(&meta, &b.uid, PropagationPolicy::Background)
            .await
            .expect("delete gone");
        assert_eq!(gone, DeleteOutcome::AlreadyGone);
    }
    env.cleanup().await;
}

#[tokio::test]
async fn delete_refuses_a_stale_uid_and_objects_we_do_not_own() {
    let mut env = Env::new("applier-uid").await;
    let owner = env.owner().await;
    let applied = env
        .apply(
            &env.cm("guarded", json!({"k": "v"})),
            &strategy(UpdateStrategyType::Update),
            Some(&owner),
        )
        .await
        .expect("apply");
    let stale = env.meta("guarded", "00000000-0000-0000-0000-000000000000");
    let out = env
        .applier
        .delete_owned(&stale, &owner.uid, PropagationPolicy::Background)
        .await
        .expect("delete with stale uid");
    assert_eq!(out, DeleteOutcome::NotOwned);
    assert!(
        env.live_cm("guarded").await.is_some(),
        "a stale UID must not delete"
    );

    // Not ours: an object without our ownerReference.
    let theirs = ConfigMap {
        metadata: ObjectMeta {
            name: Some("theirs".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    let theirs = env
        .configmaps()
        .create(&PostParams::default(), &theirs)
        .await
        .expect("create");
    let meta = env.meta("theirs", theirs.metadata.uid.as_deref().unwrap_or_default());
    let out = env
        .applier
        .delete_owned(&meta, &owner.uid, PropagationPolicy::Background)
        .await
        .expect("delete not ours");
    assert_eq!(out, DeleteOutcome::NotOwned);
    assert!(env.live_cm("theirs").await.is_some());

    // Release keeps the object and drops only our reference.
    let meta = env.meta("guarded", &uid_of(&applied));
    env.applier
        .release(&meta, &owner.uid)
        .await
        .expect("release");
    let live = env.live_cm("guarded").await.expect("kept");
    assert!(owner_uids(&live).is_empty());
    env.cleanup().await;
}

#[tokio::test]
async fn ignore_fields_on_spoke_present_keeps_the_spoke_value() {
    let mut env = Env::new("applier-ignore-present").await;
    let owner = env.owner().await;
    let strategy = ssa(
        false,
        vec![IgnoreField {
            condition: IgnoreFieldsCondition::OnSpokePresent,
            json_paths: vec![".data.replicas".into()],
            json_pointers: Vec::new(),
            jq_path_expressions: Vec::new(),
        }],
    );
    env.apply(
        &env.cm("present", json!({"replicas": "1", "other": "a"})),
        &strategy,
        Some(&owner),
    )
    .await
    .expect("create");
    assert_eq!(
        data(&env.live_cm("present").await.expect("exists"), "replicas").as_deref(),
        Some("1")
    );

    // Neither the manifest changing it nor a spoke edit gets overwritten once present, and the
    // field is never removed; other fields still follow the manifest.
    env.apply(
        &env.cm("present", json!({"replicas": "2", "other": "b"})),
        &strategy,
        Some(&owner),
    )
    .await
    .expect("manifest change");
    let live = env.live_cm("present").await.expect("exists");
    assert_eq!(data(&live, "replicas").as_deref(), Some("1"));
    assert_eq!(data(&live, "other").as_deref(), Some("b"));

    spoke_edit(&env, "present", "replicas", "5").await;
    env.apply(
        &env.cm("present", json!({"replicas": "2", "other": "c"})),
        &strategy,
        Some(&owner),
    )
    .await
    .expect("after spoke edit");
    let live = env.live_cm("present").await.expect("exists");
    assert_eq!(data(&live, "replicas").as_deref(), Some("5"));
    assert_eq!(data(&live, "other").as_deref(), Some("c"));
    env.cleanup().await;
}

#[tokio::test]
async fn ignore_fields_on_spoke_change_keeps_spoke_edits_until_the_manifest_changes() {
    let mut env = Env::new("applier-ignore-change").await;
    let owner = env.owner().await;
    let strategy = ssa(
        false,
        vec![IgnoreField {
            condition: IgnoreFieldsCondition::OnSpokeChange,
            json_paths: Vec::new(),
            json_pointers: vec!["/data/replicas".into()],
            jq_path_expressions: Vec::new(),
        }],
    );
    let v1 = env.cm("change", json!({"replicas": "1"}));
    env.apply(&v1, &strategy, Some(&owner))
        .await
        .expect("create");
    // Unchanged on the spoke: the manifest value is applied (and re-applying is a no-op).
    let again = env
        .apply(&v1, &strategy, Some(&owner))
        .await
        .expect("re-apply");
    assert_eq!(again.outcome, ApplyOutcome::Unchanged);

    let live = env.live_cm("change").await.expect("exists");
    assert!(
        live.metadata
            .annotations
            .iter()
            .flatten()
            .any(|(k, _)| k == applier::CONFIG_SPEC_HASH_ANNOTATION),
        "ignoreFields: the object carries the config spec hash"
    );
    spoke_edit(&env, "change", "replicas", "7").await;
    env.apply(&v1, &strategy, Some(&owner))
        .await
        .expect("after spoke edit");
    assert_eq!(
        data(&env.live_cm("change").await.expect("exists"), "replicas").as_deref(),
        Some("7")
    );

    // The hub asks for a new value: that new intent is applied. The spoke edit made another
    // manager own the field, so as with any server-side apply this needs `force`.
    let v3 = env.cm("change", json!({"replicas": "3"}));
    let err = env
        .apply(&v3, &strategy, Some(&owner))
        .await
        .expect_err("conflict");
    assert!(err.is_conflict(), "{err}");
    let mut forced = strategy.clone();
    if let Some(config) = forced.server_side_apply.as_mut() {
        config.force = true;
    }
    env.apply(&v3, &forced, Some(&owner))
        .await
        .expect("manifest change");
    assert_eq!(
        data(&env.live_cm("change").await.expect("exists"), "replicas").as_deref(),
        Some("3")
    );
    env.cleanup().await;
}

#[tokio::test]
async fn errors_carry_the_reason() {
    let env = Env::new("applier-errors").await;
    let update = strategy(UpdateStrategyType::Update);
    let unknown = json!({"apiVersion": "nope.example.com/v1", "kind": "Widget",
                         "metadata": {"name": "w", "namespace": env.ns}});
    let err = env
        .apply(&unknown, &update, None)
        .await
        .expect_err("unknown kind");
    assert_eq!(
        err.to_string(),
        "no matches for kind \"Widget\" in version \"nope.example.com/v1\""
    );
    let unknown_core = json!({"apiVersion": "v1", "kind": "Gizmo", "metadata": {"name": "g", "namespace": env.ns}});
    let err = env
        .apply(&unknown_core, &update, None)
        .await
        .expect_err("unknown core kind");
    assert!(
        err.to_string().contains("no matches for kind \"Gizmo\""),
        "{err}"
    );

    // The server rejects the object: its reason and message come through.
    let invalid = env.cm("Not_A_Valid_Name", json!({"a": "1"}));
    let err = env
        .apply(&invalid, &update, None)
        .await
        .expect_err("invalid name");
    let text = err.to_string();
    assert!(
        text.contains("Invalid") && text.contains("Not_A_Valid_Name"),
        "{text}"
    );

    let wrong_type = env.cm("typed", json!({"a": 1}));
    let err = env
        .apply(&wrong_type, &ssa(false, Vec::new()), None)
        .await
        .expect_err("bad type");
    assert!(matches!(err, ApplyError::Api { .. }), "{err:?}");
    assert!(err.to_string().contains("ConfigMap"), "{err}");

    let int_label = json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "lbl", "namespace": env.ns, "labels": {"n": 1}}});
    let err = env
        .apply(&int_label, &update, None)
        .await
        .expect_err("int label");
    assert!(
        err.to_string()
            .starts_with("invalid manifest: metadata: invalid type: integer"),
        "{err}"
    );

    let no_ns = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
    let err = env
        .apply(&no_ns, &update, None)
        .await
        .expect_err("no namespace");
    assert!(
        err.to_string().contains("metadata.namespace is required"),
        "{err}"
    );

    let odd = UpdateStrategy {
        type_: UpdateStrategyType::Unknown("Sometimes".into()),
        server_side_apply: None,
    };
    let err = env
        .apply(&env.cm("odd", json!({})), &odd, None)
        .await
        .expect_err("unknown strategy");
    assert_eq!(
        err.to_string(),
        "unsupported update strategy type \"Sometimes\""
    );
    env.cleanup().await;
}

#[tokio::test]
async fn a_just_installed_crd_resolves() {
    let env = Env::new("applier-crd").await;
    let group = format!("{}.applier.example.com", unique_name("g").replace('-', ""));
    let cr = json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget",
                    "metadata": {"name": "g1", "namespace": env.ns}, "spec": {"size": 3}});
    let update = strategy(UpdateStrategyType::Update);
    let err = env
        .apply(&cr, &update, None)
        .await
        .expect_err("before the CRD");
    assert!(matches!(err, ApplyError::UnknownKind { .. }), "{err}");

    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    }))
    .expect("static CRD");
    let crds: Api<CustomResourceDefinition> = Api::all(env.spoke.client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create CRD");
    let applied = wait_for(
        "the CR to apply once its CRD is served",
        TIMEOUT,
        || async { env.apply(&cr, &update, None).await },
    )
    .await;
    assert_eq!(applied.outcome, ApplyOutcome::Created);
    assert_eq!(applied.resource.plural, "gadgets");
    assert!(applied.resource.namespaced);
    let _ = crds
        .delete(&format!("gadgets.{group}"), &DeleteParams::default())
        .await;
    env.cleanup().await;
}

#[tokio::test]
async fn complete_objects_are_not_updated() {
    let mut env = Env::new("applier-complete").await;
    let owner = env.owner().await;
    let rules = vec![ConditionRule {
        condition: "Complete".into(),
        type_: ConditionRuleType::Cel,
        cel_expressions: vec![CelExpression::new("object.data.done == 'true'")],
        message: None,
        message_expression: None,
    }];
    for strategy in [strategy(UpdateStrategyType::Update), ssa(false, Vec::new())] {
        let name = format!("job-{}", strategy.type_.as_str().to_lowercase());
        let running = env.cm(&name, json!({"done": "false", "v": "1"}));
        let first = env
            .apply_with_rules(&running, &strategy, Some(&owner), &rules)
            .await
            .expect("create");
        assert_eq!(first.outcome, ApplyOutcome::Created);
        // Not complete yet: updates go through.
        let done = env.cm(&name, json!({"done": "true", "v": "2"}));
        let second = env
            .apply_with_rules(&done, &strategy, Some(&owner), &rules)
            .await
            .expect("update");
        assert_eq!(second.outcome, ApplyOutcome::Updated);
        // Complete on the spoke: the next update writes nothing.
        let later = env.cm(&name, json!({"done": "false", "v": "3"}));
        let third = env
            .apply_with_rules(&later, &strategy, Some(&owner), &rules)
            .await
            .expect("skipped");
        assert_eq!(third.outcome, ApplyOutcome::CompleteBeforeUpdate, "{name}");
        assert_eq!(rv(&third), rv(&second));
        let live = env.live_cm(&name).await.expect("exists");
        assert_eq!(data(&live, "v").as_deref(), Some("2"));
    }
    env.cleanup().await;
}

#[tokio::test]
async fn update_of_a_job_keeps_server_generated_fields() {
    let mut env = Env::new("applier-job").await;
    let owner = env.owner().await;
    let update = strategy(UpdateStrategyType::Update);
    let job = |note: &str| {
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "j", "namespace": env.ns, "annotations": {"note": note}},
               "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
                   "containers": [{"name": "c", "image": "registry.invalid/x:1",
                                   "resources": {"requests": {"cpu": 0.5}}}]}}}})
    };
    let created = env
        .apply(&job("a"), &update, Some(&owner))
        .await
        .expect("create Job");
    assert_eq!(created.outcome, ApplyOutcome::Created);
    let again = env
        .apply(&job("a"), &update, Some(&owner))
        .await
        .expect("re-apply Job");
    // `cpu: 0.5` reads back as "500m", so this is not recognised as a no-op locally; the PUT
    // of the merged object still changes nothing.
    assert_eq!(again.outcome, ApplyOutcome::Unchanged);
    let changed = env
        .apply(&job("b"), &update, Some(&owner))
        .await
        .expect("update Job");
    assert_eq!(changed.outcome, ApplyOutcome::Updated);
    let object = changed.object.unwrap_or_default();
    assert_eq!(object["metadata"]["annotations"]["note"], json!("b"));
    assert!(
        object["spec"]["selector"].is_object(),
        "generated selector kept"
    );
    env.cleanup().await;
}
