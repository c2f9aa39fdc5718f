//! The agent against real API servers: apply with each update strategy, status, ownership,
//! shared resources, pruning, and an idle resync that writes nothing.

use std::time::Duration;

use crate::agent_common::*;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn applies_a_work_reports_status_and_an_idle_resync_writes_nothing() {
    // A 1 s safety-net resync, so the test sees several resyncs of an unchanged work.
    let env = Env::start_with(
        test_support::TestCluster::hub().await,
        "apply-idle",
        &["--status-sync-period", "1s"],
    )
    .await;
    let name = env.work_name("idle");
    env.create_work(
        &name,
        json!({"workload": {"manifests": [
            configmap(&env.ns, "a", json!({"k": "v"})),
            configmap(&env.ns, "b", json!({"k": "v"})),
        ]}}),
    )
    .await;
    let work = env
        .wait_work(&name, "Applied and Available", |w| {
            work_is(w, "Applied", "True") && work_is(w, "Available", "True")
        })
        .await;
    let applied = work_condition(&work, "Applied").expect("Applied");
    assert_eq!(applied.reason, "AppliedManifestWorkComplete");
    assert_eq!(applied.observed_generation, work.metadata.generation);
    assert_eq!(
        manifest_condition(&work, 1, "Applied").map(|c| c.reason.as_str()),
        Some("AppliedManifestComplete")
    );
    assert!(
        work.finalizers()
            .iter()
            .any(|f| f == work_api::MANIFEST_WORK_FINALIZER)
    );

    let cms = env.configmaps();
    let a = env
        .wait_object(&cms, "a", "owned by the AppliedManifestWork", |o| {
            owners(o) == vec![env.applied_name(&name)]
        })
        .await;
    assert!(
        a.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(applier::AGENT_LABEL)),
        "applied objects carry the agent label: {:?}",
        a.metadata.labels
    );
    // Both recorded, with their UIDs (they follow the status): the record is complete.
    let applied = env.applied_works();
    let applied_name = env.applied_name(&name);
    let amw = test_support::wait_for(
        "both resources recorded with their UIDs",
        Duration::from_secs(30),
        || async {
            let amw = applied
                .get(&applied_name)
                .await
                .map_err(|e| e.to_string())?;
            let listed = amw
                .status
                .as_ref()
                .map(|s| s.applied_resources.clone())
                .unwrap_or_default();
            if listed.len() == 2 && listed.iter().all(|r| !r.uid.is_empty()) {
                Ok(amw)
            } else {
                Err(format!("{listed:?}"))
            }
        },
    )
    .await;
    assert_eq!(amw.spec.manifest_work_name, name);

    // Several resyncs of an unchanged work: nothing is written anywhere.
    let before = (
        rv_of_work(&env, &name).await,
        rv(&cms.get("a").await.expect("a")),
        rv(&cms.get("b").await.expect("b")),
        amw.resource_version().unwrap_or_default(),
    );
    let resyncs_before = env.agent.log().matches("outcome=\"unchanged\"").count();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = (
        rv_of_work(&env, &name).await,
        rv(&cms.get("a").await.expect("a")),
        rv(&cms.get("b").await.expect("b")),
        env.applied_works()
            .get(&env.applied_name(&name))
            .await
            .expect("AppliedManifestWork")
            .resource_version()
            .unwrap_or_default(),
    );
    assert_eq!(
        before,
        after,
        "an idle resync wrote something; agent log {}",
        env.agent.log_path().display()
    );
    let resyncs_after = env.agent.log().matches("outcome=\"unchanged\"").count();
    assert!(
        resyncs_after >= resyncs_before + 2,
        "the work was not resynced during the idle period (agent log {})",
        env.agent.log_path().display()
    );
}

use kube::ResourceExt;

async fn rv_of_work(env: &Env, name: &str) -> String {
    env.works()
        .get(name)
        .await
        .expect("work")
        .resource_version()
        .unwrap_or_default()
}

#[tokio::test]
async fn update_and_create_only_strategies() {
    let env = Env::start("apply-strategies").await;
    let name = env.work_name("strategies");
    let spec = |value: &str| {
        json!({
            "workload": {"manifests": [
                configmap(&env.ns, "upd", json!({"k": value})),
                configmap(&env.ns, "once", json!({"k": value})),
            ]},
            "manifestConfigs": [{
                "resourceIdentifier": {"resource": "configmaps", "name": "once", "namespace": env.ns},
                "updateStrategy": {"type": "CreateOnly"}
            }]
        })
    };
    env.create_work(&name, spec("1")).await;
    env.wait_work(&name, "Applied", |w| work_is(w, "Applied", "True"))
        .await;
    let cms = env.configmaps();
    env.wait_object(&cms, "once", "created", |o| data(o)["k"] == "1")
        .await;

    env.patch_work_spec(&name, spec("2")).await;
    env.wait_object(&cms, "upd", "updated to the new value", |o| {
        data(o).get("k").map(String::as_str) == Some("2")
    })
    .await;
    // CreateOnly: the new value is never written.
    env.wait_work(&name, "generation 2 observed", |w| {
        work_condition(w, "Applied").and_then(|c| c.observed_generation) == Some(2)
    })
    .await;
    let once = cms.get("once").await.expect("once");
    assert_eq!(data(&once)["k"], "1", "CreateOnly object was updated");

    // Update: an edit on the spoke is reverted (optimistic update from a fresh read).
    cms.patch(
        "upd",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "edited"}})),
    )
    .await
    .expect("edit on the spoke");
    env.wait_object(&cms, "upd", "spoke edit reverted", |o| data(o)["k"] == "2")
        .await;
}

#[tokio::test]
async fn server_side_apply_conflicts_with_another_manager_unless_forced() {
    let env = Env::start("apply-ssa").await;
    let cms = env.configmaps();
    // Another manager owns data.k first.
    let theirs: kube::api::DynamicObject =
        serde_json::from_value(configmap(&env.ns, "shared-field", json!({"k": "theirs"})))
            .expect("ConfigMap");
    cms.patch(
        "shared-field",
        &PatchParams::apply("someone-else"),
        &Patch::Apply(&theirs),
    )
    .await
    .expect("other manager applies");

    let name = env.work_name("ssa");
    let spec = |force: bool| {
        json!({
            "workload": {"manifests": [configmap(&env.ns, "shared-field", json!({"k": "ours"}))]},
            "manifestConfigs": [{
                "resourceIdentifier": {"resource": "configmaps", "name": "shared-field", "namespace": env.ns},
                "updateStrategy": {"type": "ServerSideApply", "serverSideApply": {"force": force}}
            }]
        })
    };
    env.create_work(&name, spec(false)).await;
    let work = env
        .wait_work(&name, "Applied False with the conflict", |w| {
            manifest_is(w, 0, "Applied", "False")
        })
        .await;
    let applied = manifest_condition(&work, 0, "Applied").expect("Applied");
    assert_eq!(applied.reason, "AppliedManifestFailed");
    assert!(
        applied.message.starts_with("Failed to apply manifest: ")
            && applied.message.to_lowercase().contains("conflict"),
        "{}",
        applied.message
    );
    assert_eq!(
        data(&cms.get("shared-field").await.expect("cm"))["k"],
        "theirs"
    );
    assert!(work_is(&work, "Applied", "False"));
    // The object exists (created by the other manager, without the agent's label): Available.
    let work = env
        .wait_work(&name, "Available True although not applied", |w| {
            manifest_is(w, 0, "Available", "True")
        })
        .await;
    assert!(manifest_is(&work, 0, "Applied", "False"));

    env.patch_work_spec(&name, spec(true)).await;
    env.wait_work(&name, "Applied True once forced", |w| {
        manifest_is(w, 0, "Applied", "True")
    })
    .await;
    let cm = env
        .wait_object(&cms, "shared-field", "forced value", |o| {
            data(o)["k"] == "ours"
        })
        .await;
    let managers: Vec<String> = cm
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(managers.iter().any(|m| m == "work-agent"), "{managers:?}");
}

#[tokio::test]
async fn read_only_manifests_are_read_never_written() {
    let env = Env::start("apply-readonly").await;
    let cms = env.configmaps();
    let existing: kube::api::DynamicObject =
        serde_json::from_value(configmap(&env.ns, "ro", json!({"k": "spoke"}))).expect("cm");
    cms.create(&PostParams::default(), &existing)
        .await
        .expect("create");
    let name = env.work_name("ro");
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [
                configmap(&env.ns, "ro", json!({"k": "hub"})),
                configmap(&env.ns, "ro-missing", json!({"k": "hub"})),
            ]},
            "manifestConfigs": [{
                "resourceIdentifier": {"resource": "configmaps", "name": "ro*", "namespace": env.ns},
                "updateStrategy": {"type": "ReadOnly"},
                "conditionRules": [{"condition": "FromSpoke", "type": "CEL",
                    "celExpressions": ["object.data.k == 'spoke'"]}]
            }]
        }),
    )
    .await;
    let work = env
        .wait_work(&name, "read-only manifests evaluated", |w| {
            manifest_is(w, 0, "FromSpoke", "True") && manifest_is(w, 1, "Available", "False")
        })
        .await;
    assert!(manifest_is(&work, 0, "Available", "True"));
    let ro = cms.get("ro").await.expect("ro");
    assert_eq!(data(&ro)["k"], "spoke");
    assert!(owners(&ro).is_empty(), "ReadOnly objects get no owner");
    assert!(cms.get_opt("ro-missing").await.expect("get").is_none());
}

#[tokio::test]
async fn two_works_share_a_resource_until_the_last_lets_go() {
    let env = Env::start("apply-shared").await;
    let cms = env.configmaps();
    let w1 = env.work_name("shared-1");
    let w2 = env.work_name("shared-2");
    let manifest = configmap(&env.ns, "common", json!({"k": "v"}));
    env.create_work(&w1, json!({"workload": {"manifests": [manifest.clone()]}}))
        .await;
    env.create_work(&w2, json!({"workload": {"manifests": [manifest]}}))
        .await;
    let both = {
        let mut v = vec![env.applied_name(&w1), env.applied_name(&w2)];
        v.sort();
        v
    };
    env.wait_object(&cms, "common", "owned by both works", |o| {
        let mut o = owners(o);
        o.sort();
        o == both
    })
    .await;

    env.delete_work(&w1).await;
    env.wait_work_gone(&w1).await;
    let common = env
        .wait_object(&cms, "common", "owned by the second work only", |o| {
            owners(o) == vec![env.applied_name(&w2)]
        })
        .await;
    assert!(common.metadata.deletion_timestamp.is_none());

    env.delete_work(&w2).await;
    env.wait_work_gone(&w2).await;
    env.wait_object_gone(&cms, "common").await;
}

/// The spoke's API server refuses to create a ConfigMap in the test namespace unless the work's
/// AppliedManifestWork lists it already (a ValidatingAdmissionPolicy with the AppliedManifestWork
/// as its parameter): the work gets Applied only because each resource is recorded before it is
/// created, and the UIDs follow once they exist.
#[tokio::test]
async fn each_resource_is_recorded_before_it_is_created() {
    let env = Env::start("apply-record").await;
    let name = env.work_name("record");
    let applied = env.applied_name(&name);
    let admission = |kind: &str, plural: &str| {
        let ar = kube::api::ApiResource {
            group: "admissionregistration.k8s.io".into(),
            version: "v1".into(),
            api_version: "admissionregistration.k8s.io/v1".into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        kube::Api::<kube::api::DynamicObject>::all_with(env.spoke.client.clone(), &ar)
    };
    let policies = admission("ValidatingAdmissionPolicy", "validatingadmissionpolicies");
    let bindings = admission(
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    );
    let policy = format!("{}-recorded-first", env.ns);
    // Listed in appliedResources, or (nothing written since the create) in the list the
    // AppliedManifestWork was created with.
    let recorded = "(has(params.status) && has(params.status.appliedResources) && \
        params.status.appliedResources.exists(r, r.resource == 'configmaps' && \
        r.namespace == object.metadata.namespace && r.name == object.metadata.name)) || \
        (has(params.metadata.annotations) && \
        'work.open-cluster-management.io/resources-at-creation' in params.metadata.annotations && \
        params.metadata.annotations['work.open-cluster-management.io/resources-at-creation']\
        .split('\\n').exists(l, l == '/v1/configmaps/' + object.metadata.namespace + '/' + \
        object.metadata.name))";
    let object = |v: serde_json::Value| -> kube::api::DynamicObject {
        serde_json::from_value(v).expect("object")
    };
    policies
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": policy},
                "spec": {
                    "failurePolicy": "Fail",
                    "paramKind": {
                        "apiVersion": "work.open-cluster-management.io/v1",
                        "kind": "AppliedManifestWork",
                    },
                    "matchConstraints": {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": env.ns}},
                        "resourceRules": [{
                            "apiGroups": [""], "apiVersions": ["v1"],
                            "operations": ["CREATE"], "resources": ["configmaps"],
                        }],
                    },
                    "validations": [{
                        "expression": recorded,
                        "message": "not recorded in the AppliedManifestWork",
                    }],
                },
            })),
        )
        .await
        .expect("policy");
    bindings
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": policy},
                "spec": {
                    "policyName": policy,
                    "paramRef": {"name": applied, "parameterNotFoundAction": "Deny"},
                    "validationActions": ["Deny"],
                },
            })),
        )
        .await
        .expect("binding");
    // The policy is in force once it refuses a ConfigMap nobody recorded.
    let cms = env.configmaps();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let probe = object(configmap(&env.ns, "probe", json!({"k": "v"})));
        match cms.create(&PostParams::default(), &probe).await {
            // An API server that has not discovered the parameter's kind yet refuses everything
            // ("failed to configure policy"): not in force yet.
            Err(kube::Error::Api(s)) if s.message.contains("failed to configure policy") => {}
            Err(kube::Error::Api(s))
                if s.message.contains("not recorded") || s.message.contains("params") =>
            {
                break;
            }
            Err(e) => panic!("probe: {e}"),
            Ok(_) => {
                cms.delete("probe", &Default::default())
                    .await
                    .expect("delete probe");
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the policy never took effect"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    env.create_configmaps(&name, &["first", "second"], "Applied")
        .await;
    // Each recorded with the UID of the object that exists (the record follows the status).
    let mut uids = Vec::new();
    for cm in ["first", "second"] {
        let live = cms.get(cm).await.expect("created");
        uids.push((cm, live.metadata.uid.clone().unwrap_or_default()));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let amw = env
            .applied_works()
            .get(&applied)
            .await
            .expect("AppliedManifestWork");
        let listed = amw.status.map(|s| s.applied_resources).unwrap_or_default();
        if uids
            .iter()
            .all(|(cm, uid)| listed.iter().any(|r| r.name == *cm && r.uid == *uid))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not recorded with their UIDs {uids:?}: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = bindings.delete(&policy, &Default::default()).await;
    let _ = policies.delete(&policy, &Default::default()).await;
}

#[tokio::test]
async fn a_manifest_removed_from_the_work_is_deleted() {
    let env = Env::start("apply-prune").await;
    let cms = env.configmaps();
    let name = env.work_name("prune");
    env.create_work(
        &name,
        json!({"workload": {"manifests": [
            configmap(&env.ns, "keep", json!({"k": "v"})),
            configmap(&env.ns, "drop", json!({"k": "v"})),
        ]}}),
    )
    .await;
    env.wait_object(&cms, "drop", "applied", |_| true).await;
    env.patch_work_spec(
        &name,
        json!({"workload": {"manifests": [configmap(&env.ns, "keep", json!({"k": "v"}))]}}),
    )
    .await;
    env.wait_object_gone(&cms, "drop").await;
    assert!(cms.get_opt("keep").await.expect("get").is_some());
    let amw = env
        .applied_works()
        .get(&env.applied_name(&name))
        .await
        .expect("AppliedManifestWork");
    let names: Vec<String> = amw
        .status
        .map(|s| s.applied_resources.into_iter().map(|r| r.name).collect())
        .unwrap_or_default();
    assert_eq!(names, vec!["keep".to_string()]);
}

#[tokio::test]
async fn a_bad_manifest_fails_alone() {
    let env = Env::start("apply-partial").await;
    let name = env.work_name("partial");
    env.create_work(
        &name,
        json!({"workload": {"manifests": [
            configmap(&env.ns, "good", json!({"k": "v"})),
            // Invalid: a ConfigMap's data values must be strings.
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "bad", "namespace": env.ns}, "data": {"k": 1}},
        ]}}),
    )
    .await;
    let work = env
        .wait_work(&name, "second manifest failed", |w| {
            manifest_is(w, 1, "Applied", "False") && manifest_is(w, 0, "Applied", "True")
        })
        .await;
    let failed = manifest_condition(&work, 1, "Applied").expect("Applied");
    assert!(
        failed.message.starts_with("Failed to apply manifest: "),
        "{}",
        failed.message
    );
    assert!(work_is(&work, "Applied", "False"));
    assert_eq!(
        work_condition(&work, "Applied").map(|c| c.reason.as_str()),
        Some("AppliedManifestWorkFailed")
    );
    assert!(
        env.configmaps()
            .get_opt("good")
            .await
            .expect("get")
            .is_some()
    );
}

#[tokio::test]
async fn status_feedback_reports_well_known_and_json_path_values() {
    let env = Env::start("apply-feedback").await;
    let name = env.work_name("feedback");
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [
                job(&env.ns, "fb"),
                configmap(&env.ns, "fb", json!({"k": "v"})),
            ]},
            "manifestConfigs": [
                {"resourceIdentifier": {"group": "batch", "resource": "jobs", "name": "fb", "namespace": env.ns},
                 "feedbackRules": [{"type": "WellKnownStatus"}]},
                {"resourceIdentifier": {"resource": "configmaps", "name": "fb", "namespace": env.ns},
                 "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [
                     {"name": "value", "path": ".data.k"},
                     {"name": "absent", "path": ".data.nothing"}]}]}
            ]
        }),
    )
    .await;
    let work = env
        .wait_work(&name, "Job feedback JobComplete=True", |w| {
            feedback_value(w, 0, "JobComplete").is_some_and(|v| v.string.as_deref() == Some("True"))
        })
        .await;
    assert!(manifest_is(&work, 0, "StatusFeedbackSynced", "True"));
    assert_eq!(
        feedback_value(&work, 0, "JobSucceeded").and_then(|v| v.integer),
        Some(1)
    );
    assert_eq!(
        feedback_value(&work, 1, "value").and_then(|v| v.string.clone()),
        Some("v".to_string())
    );
    assert!(feedback_value(&work, 1, "absent").is_none());
    assert!(manifest_is(&work, 1, "StatusFeedbackSynced", "True"));
}

fn feedback_value(
    work: &work_api::ManifestWork,
    ordinal: i32,
    name: &str,
) -> Option<work_api::FieldValue> {
    manifest_status(work, ordinal)?
        .status_feedback
        .as_ref()?
        .values
        .iter()
        .find(|v| v.name == name)
        .map(|v| v.field_value.clone())
}

#[tokio::test]
async fn namespaces_and_crds_are_applied_before_what_needs_them() {
    let env = Env::start("apply-order").await;
    let name = env.work_name("order");
    let ns = test_support::unique_name("order-ns");
    let group = format!("{}.example.com", test_support::unique_name("g"));
    let crd = widget_crd(&group);
    // Listed in the "wrong" order: the objects before the namespace and the CRD they need.
    env.create_work(
        &name,
        json!({"workload": {"manifests": [
            {"apiVersion": format!("{group}/v1"), "kind": "Widget",
             "metadata": {"name": "w", "namespace": ns}, "spec": {"size": 1}},
            configmap(&ns, "in-new-ns", json!({"k": "v"})),
            crd,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        ]},
        // Orphan: the test is about order; waiting for a namespace to terminate is slow.
        "deleteOption": {"propagationPolicy": "Orphan"}}),
    )
    .await;
    let work = env
        .wait_work(&name, "every manifest applied", |w| {
            (0..4).all(|i| manifest_is(w, i, "Applied", "True"))
        })
        .await;
    assert!(work_is(&work, "Available", "True"));
    env.delete_work(&name).await;
    env.wait_work_gone(&name).await;
}

#[tokio::test]
async fn an_executor_without_permission_gets_applied_false_until_granted() {
    let env = Env::start("apply-executor").await;
    let sa: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "deployer"}})).expect("sa");
    kube::Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(
        env.spoke.client.clone(),
        &env.ns,
    )
    .create(&PostParams::default(), &sa)
    .await
    .expect("create ServiceAccount");
    let name = env.work_name("executor");
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [configmap(&env.ns, "by-executor", json!({"k": "v"}))]},
            "executor": {"subject": {"type": "ServiceAccount",
                "serviceAccount": {"namespace": env.ns, "name": "deployer"}}}
        }),
    )
    .await;
    let work = env
        .wait_work(&name, "Applied False: not allowed", |w| {
            manifest_is(w, 0, "Applied", "False")
        })
        .await;
    let applied = manifest_condition(&work, 0, "Applied").expect("Applied");
    assert!(
        applied.message.contains("not allowed"),
        "{}",
        applied.message
    );
    assert!(
        env.configmaps()
            .get_opt("by-executor")
            .await
            .expect("get")
            .is_none()
    );

    // Grant the ServiceAccount what it needs: the agent notices without any edit of the work.
    let rbac = format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: cm-writer, namespace: {ns}}}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create, update, patch, get, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: cm-writer, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm-writer}}
subjects:
- {{kind: ServiceAccount, name: deployer, namespace: {ns}}}
"#,
        ns = env.ns
    );
    test_support::apply_yaml(&env.spoke.client, &rbac)
        .await
        .expect("grant");
    env.wait_work(&name, "Applied True once granted", |w| {
        manifest_is(w, 0, "Applied", "True")
    })
    .await;
    assert!(
        env.configmaps()
            .get_opt("by-executor")
            .await
            .expect("get")
            .is_some()
    );
}
