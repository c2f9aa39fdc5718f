//! Lenient decoding: unknown fields, unknown enum values, odd celExpressions items.

use work_api::{
    AppliedManifestWork, ConditionRuleType, DeletePropagationPolicy, FeedbackScrapeType,
    ManifestWork, UpdateStrategyType,
};

fn decode(yaml: &str) -> ManifestWork {
    serde_norway::from_str(yaml).expect("decodes")
}

/// The work `w` in `c1` with this `spec` (YAML lines indented by two).
fn decode_spec(spec: &str) -> ManifestWork {
    decode(&format!(
        "metadata: {{name: w, namespace: c1}}\nspec:{spec}"
    ))
}

#[test]
fn unknown_fields_are_ignored_at_every_level() {
    let work = decode(
        r#"
apiVersion: work.open-cluster-management.io/v1
kind: ManifestWork
metadata: {name: w, namespace: c1}
futureTopLevel: 1
spec:
  futureSpecField: {a: b}
  deleteOption: {propagationPolicy: Orphan, futureDelete: true}
  workload:
    futureWorkload: []
    manifests:
      - {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: y}}
  manifestConfigs:
    - resourceIdentifier: {resource: configmaps, name: x, namespace: y, futureId: 3}
      futureConfig: z
      conditionRules:
        - {condition: Ready, type: CEL, celExpressions: ["true"], futureRule: 1}
status:
  futureStatus: {}
  resourceStatus:
    futureResourceStatus: 1
    manifests:
      - resourceMeta: {ordinal: 0, futureMeta: 1}
        conditions: []
"#,
    );
    assert_eq!(
        work.spec.delete_option.unwrap().propagation_policy,
        DeletePropagationPolicy::Orphan
    );
    assert_eq!(work.spec.workload.manifests.len(), 1);
    let rule = &work.spec.manifest_configs[0].condition_rules[0];
    assert_eq!(rule.condition, "Ready");
    assert_eq!(rule.cel_expressions[0].expression, "true");
}

#[test]
fn unknown_enum_values_decode_to_unknown() {
    let work = decode_spec(
        r#"
  deleteOption: {propagationPolicy: Shred}
  manifestConfigs:
    - resourceIdentifier: {resource: jobs, name: j}
      updateStrategy: {type: Teleport}
      feedbackScrapeType: Stream
      conditionRules:
        - {condition: Done, type: Rego}
"#,
    );
    assert_eq!(
        work.spec.delete_option.as_ref().unwrap().propagation_policy,
        DeletePropagationPolicy::Unknown("Shred".into())
    );
    let config = &work.spec.manifest_configs[0];
    assert_eq!(
        config.update_strategy.as_ref().unwrap().type_,
        UpdateStrategyType::Unknown("Teleport".into())
    );
    assert_eq!(
        config.feedback_scrape_type,
        Some(FeedbackScrapeType::Unknown("Stream".into()))
    );
    assert_eq!(
        config.condition_rules[0].type_,
        ConditionRuleType::Unknown("Rego".into())
    );
    // Unknown values are written back as they came.
    let back = serde_json::to_value(&work).unwrap();
    assert_eq!(back["spec"]["deleteOption"]["propagationPolicy"], "Shred");
    assert_eq!(
        back["spec"]["manifestConfigs"][0]["conditionRules"][0]["type"],
        "Rego"
    );
}

#[test]
fn defaults_apply_when_fields_are_missing() {
    let work = decode_spec(
        r#"
  deleteOption: {ttlSecondsAfterFinished: 5}
  manifestConfigs:
    - resourceIdentifier: {resource: jobs, name: j}
      updateStrategy: {serverSideApply: {}}
"#,
    );
    let delete = work.spec.delete_option.unwrap();
    assert_eq!(
        delete.propagation_policy,
        DeletePropagationPolicy::Foreground
    );
    assert_eq!(delete.ttl_seconds_after_finished, Some(5));
    let strategy = work.spec.manifest_configs[0]
        .update_strategy
        .clone()
        .unwrap();
    assert_eq!(strategy.type_, UpdateStrategyType::Update);
    assert_eq!(
        strategy.server_side_apply.unwrap().field_manager(),
        "work-agent"
    );
}

#[test]
fn a_bad_cel_item_is_kept_as_an_invalid_expression_not_a_decode_failure() {
    let work = decode_spec(
        r#"
  manifestConfigs:
    - resourceIdentifier: {resource: jobs, name: j}
      conditionRules:
        - condition: Done
          type: CEL
          celExpressions: [42, {expr: "true"}, "true", {expression: "false", note: x}]
"#,
    );
    let items = &work.spec.manifest_configs[0].condition_rules[0].cel_expressions;
    assert_eq!(items.len(), 4);
    assert!(items[0].is_invalid_item());
    assert!(items[0].expression.contains("42"));
    assert!(items[1].is_invalid_item());
    assert!(!items[2].is_invalid_item());
    assert_eq!(items[3].expression, "false");
}

#[test]
fn applied_manifest_work_round_trips() {
    let amw: AppliedManifestWork = serde_norway::from_str(
        r#"
apiVersion: work.open-cluster-management.io/v1
kind: AppliedManifestWork
metadata: {name: abc-w}
spec: {hubHash: abc, agentID: agent-1, manifestWorkName: w, futureField: 1}
status:
  evictionStartTime: "2026-01-01T00:00:00Z"
  appliedResources:
    - {group: apps, version: v1, resource: deployments, name: web, namespace: default, uid: u-1}
    - {version: v1, resource: namespaces, name: team-a, uid: u-2}
"#,
    )
    .expect("decodes");
    let again: AppliedManifestWork =
        serde_json::from_value(serde_json::to_value(&amw).unwrap()).unwrap();
    assert_eq!(amw, again);
    assert_eq!(amw.spec.agent_id, "agent-1");
    assert_eq!(amw.status.unwrap().applied_resources[1].group, "");
}

#[test]
fn hub_hash_and_applied_name() {
    let hash = work_api::hub_hash("https://hub.example.com:6443");
    assert_eq!(hash.len(), 64);
    assert!(
        hash.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_ne!(hash, work_api::hub_hash("https://other:6443"));
    assert_eq!(
        work_api::applied_manifest_work_name(&hash, "w"),
        format!("{hash}-w")
    );
}

#[test]
fn a_work_without_spec_decodes_as_empty() {
    for yaml in [
        "metadata: {name: w, namespace: c1}\n",
        "metadata: {name: w, namespace: c1}\nspec: null\n",
        "metadata: {name: w, namespace: c1}\nspec: {}\nstatus: {}\n",
    ] {
        let work = decode(yaml);
        assert_eq!(work.spec, work_api::ManifestWorkSpec::default(), "{yaml}");
    }
    // A spec of the wrong shape is still an error.
    assert!(serde_norway::from_str::<ManifestWork>("metadata: {name: w}\nspec: [1]\n").is_err());
}

#[test]
fn an_applied_manifest_work_without_spec_decodes_as_empty() {
    let amw: AppliedManifestWork = serde_norway::from_str("metadata: {name: x}\n").unwrap();
    assert_eq!(amw.spec, work_api::AppliedManifestWorkSpec::default());
    // Within a spec, hubHash and manifestWorkName stay required, as upstream.
    assert!(
        serde_norway::from_str::<AppliedManifestWork>("metadata: {name: x}\nspec: {hubHash: h}\n")
            .is_err()
    );
}
