//! Each conversion against the original semantics: the examples of the Flux RFC-0009 and the
//! Cartographer health-rule RFC, evaluated by a small reference implementation of the
//! original (Flux: its three expressions with top-level variables; Cartographer: its
//! documented matching) and by the converted rule through the agent's evaluator.

use authoring::convert::cartographer::{self, HealthRule, PathStep, parse_path};
use authoring::convert::flux::{self, HealthCheckExpr};
use authoring::convert::kapp;
use conditions::{Bindings, Evaluator, Status};
use serde_json::{Value, json};

// ---- Flux ----

/// RFC-0009: stale status is InProgress; then inProgress, failed, current, first true wins;
/// none true is InProgress; an error is an error.
fn flux_reference(entry: &HealthCheckExpr, object: &Value) -> Result<&'static str, String> {
    let observed = object
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    if let (Some(o), Some(g)) = (observed, generation)
        && o != g
    {
        return Ok("InProgress");
    }
    let checks = [
        (entry.in_progress.as_deref(), "InProgress"),
        (entry.failed.as_deref(), "Failed"),
        (Some(entry.current.as_str()), "Current"),
    ];
    for (expr, status) in checks {
        let Some(expr) = expr.filter(|e| !e.is_empty()) else {
            continue;
        };
        match Evaluator::shared().eval_expression(expr, &Bindings::TopLevel(object)) {
            Ok(Value::Bool(true)) => return Ok(status),
            Ok(Value::Bool(false)) => {}
            Ok(other) => return Err(format!("not a bool: {other}")),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok("InProgress")
}

/// The converted rule's verdict in Flux's terms.
fn flux_converted(entry: &HealthCheckExpr, object: &Value) -> Result<&'static str, String> {
    let rule = flux::convert_entry(0, entry, "Healthy").unwrap();
    let c = Evaluator::shared()
        .evaluate_manifest(&[rule], object)
        .remove(0);
    match (c.status, c.reason.as_str()) {
        (Status::True, "ConditionRuleCurrent") => Ok("Current"),
        (Status::False, "ConditionRuleFailed") => Ok("Failed"),
        (Status::False, "ConditionRuleInProgress") => Ok("InProgress"),
        (Status::Unknown, "ConditionRuleStaleStatus") => Ok("InProgress"),
        (_, "ConditionRuleExpressionError") => Err(c.message),
        other => panic!("unexpected condition {other:?}: {}", c.message),
    }
}

fn flux_entries() -> Vec<HealthCheckExpr> {
    let kustomization = serde_norway::from_str::<Value>(
        r#"
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: certs}
spec:
  interval: 5m
  healthCheckExprs:
  - apiVersion: cert-manager.io/v1
    kind: Certificate
    inProgress: "status.conditions.filter(e, e.type == 'Issuing').all(e, e.observedGeneration == metadata.generation && e.status == 'True')"
    failed: "status.conditions.filter(e, e.type == 'Ready').all(e, e.observedGeneration == metadata.generation && e.status == 'False')"
    current: "status.conditions.filter(e, e.type == 'Ready').all(e, e.observedGeneration == metadata.generation && e.status == 'True')"
  - apiVersion: bitnami.com/v1alpha1
    kind: SealedSecret
    failed: "status.conditions.filter(e, e.type == 'Synced').all(e, e.status == 'False')"
    current: "status.conditions.filter(e, e.type == 'Synced').all(e, e.status == 'True')"
  - apiVersion: cluster.x-k8s.io/v1beta1
    kind: Cluster
    failed: "status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'False')"
    current: "status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'True')"
"#,
    )
    .unwrap();
    flux::entries(&kustomization).unwrap()
}

fn object(api_version: &str, kind: &str, generation: i64, status: Value) -> Value {
    let mut o = json!({"apiVersion": api_version, "kind": kind,
        "metadata": {"name": "x", "namespace": "ns", "generation": generation}, "spec": {}});
    if !status.is_null() {
        o["status"] = status;
    }
    o
}

fn cond(type_: &str, status: &str, observed: i64) -> Value {
    json!({"type": type_, "status": status, "observedGeneration": observed, "reason": "R", "message": "m"})
}

#[test]
fn flux_examples_give_the_same_verdicts() {
    let entries = flux_entries();
    assert_eq!(entries.len(), 3);
    let (certificate, sealed, cluster) = (&entries[0], &entries[1], &entries[2]);
    let cert = |g, s| object("cert-manager.io/v1", "Certificate", g, s);
    let cases: Vec<(&HealthCheckExpr, Value, Result<&str, ()>)> = vec![
        // Issuing for this generation: in progress, whatever Ready says.
        (
            certificate,
            cert(
                1,
                json!({"conditions": [cond("Issuing", "True", 1), cond("Ready", "False", 1)]}),
            ),
            Ok("InProgress"),
        ),
        (
            certificate,
            cert(
                1,
                json!({"conditions": [cond("Issuing", "False", 1), cond("Ready", "True", 1)]}),
            ),
            Ok("Current"),
        ),
        (
            certificate,
            cert(
                1,
                json!({"conditions": [cond("Issuing", "False", 1), cond("Ready", "False", 1)]}),
            ),
            Ok("Failed"),
        ),
        // Without an Issuing condition the inProgress filter is empty, and all() of nothing is
        // true: the RFC's expression reports InProgress (both forms agree).
        (
            certificate,
            cert(1, json!({"conditions": [cond("Ready", "True", 1)]})),
            Ok("InProgress"),
        ),
        // Ready for an older generation: neither failed nor current.
        (
            certificate,
            cert(
                2,
                json!({"conditions": [cond("Issuing", "False", 2), cond("Ready", "True", 1)]}),
            ),
            Ok("InProgress"),
        ),
        // No conditions at all: every filter is empty, so inProgress (first) is true.
        (
            certificate,
            cert(1, json!({"conditions": []})),
            Ok("InProgress"),
        ),
        // Stale status.observedGeneration: in progress without evaluating.
        (
            certificate,
            cert(
                2,
                json!({"observedGeneration": 1, "conditions": [cond("Ready", "True", 2)]}),
            ),
            Ok("InProgress"),
        ),
        // No status: status is not a variable / object.status is not a key.
        (certificate, cert(1, Value::Null), Err(())),
        (
            sealed,
            object(
                "bitnami.com/v1alpha1",
                "SealedSecret",
                1,
                json!({"conditions": [cond("Synced", "True", 1)]}),
            ),
            Ok("Current"),
        ),
        (
            sealed,
            object(
                "bitnami.com/v1alpha1",
                "SealedSecret",
                1,
                json!({"conditions": [cond("Synced", "False", 1)]}),
            ),
            Ok("Failed"),
        ),
        // No Synced condition: failed and current are both true; failed wins.
        (
            sealed,
            object(
                "bitnami.com/v1alpha1",
                "SealedSecret",
                1,
                json!({"conditions": []}),
            ),
            Ok("Failed"),
        ),
        (
            cluster,
            object(
                "cluster.x-k8s.io/v1beta1",
                "Cluster",
                1,
                json!({"conditions": [cond("Ready", "Unknown", 1)]}),
            ),
            Ok("InProgress"),
        ),
        (
            cluster,
            object(
                "cluster.x-k8s.io/v1beta1",
                "Cluster",
                1,
                json!({"conditions": [cond("Ready", "True", 1)]}),
            ),
            Ok("Current"),
        ),
        (
            cluster,
            object(
                "cluster.x-k8s.io/v1beta1",
                "Cluster",
                1,
                json!({"conditions": [cond("Ready", "False", 1)]}),
            ),
            Ok("Failed"),
        ),
        (
            cluster,
            object(
                "cluster.x-k8s.io/v1beta1",
                "Cluster",
                1,
                json!({"phase": "Provisioning"}),
            ),
            Err(()),
        ),
    ];
    for (i, (entry, obj, expected)) in cases.iter().enumerate() {
        let reference = flux_reference(entry, obj);
        let converted = flux_converted(entry, obj);
        assert_eq!(
            reference.is_ok(),
            converted.is_ok(),
            "case {i}: {reference:?} vs {converted:?}"
        );
        assert_eq!(reference.clone().ok(), converted.clone().ok(), "case {i}");
        assert_eq!(reference.map_err(|_| ()), *expected, "case {i}");
    }
}

#[test]
fn flux_output_targets_the_kind_by_group_and_plural() {
    let configs = flux::convert(&flux_entries(), "Healthy").unwrap();
    let ids = group_and_resource(&configs);
    assert_eq!(
        ids,
        vec![
            ("cert-manager.io", "certificates"),
            ("bitnami.com", "sealedsecrets"),
            ("cluster.x-k8s.io", "clusters")
        ]
    );
    let expression = &configs[0].condition_rules[0].cel_expressions[0].expression;
    assert!(
        expression.contains("object.status.conditions.filter(e, e.type == 'Issuing')"),
        "{expression}"
    );
    assert!(
        expression.contains("== object.metadata.generation"),
        "{expression}"
    );
    assert!(!expression.contains(" status.conditions"), "{expression}");
}

fn group_and_resource(configs: &[work_api::ManifestConfigOption]) -> Vec<(&str, &str)> {
    configs
        .iter()
        .map(|c| {
            (
                c.resource_identifier.group.as_str(),
                c.resource_identifier.resource.as_str(),
            )
        })
        .collect()
}

// ---- Cartographer ----

fn json_at<'a>(object: &'a Value, steps: &[PathStep]) -> Option<&'a Value> {
    let mut cur = object;
    for step in steps {
        cur = match step {
            PathStep::Field(name) => cur.get(name)?,
            PathStep::Index(n) => cur.get(*n)?,
            PathStep::Filter(fields, value) => cur.as_array()?.iter().find(|item| {
                let mut v = *item;
                for f in fields {
                    match v.get(f) {
                        Some(next) => v = next,
                        None => return false,
                    }
                }
                v.as_str() == Some(value.as_str())
            })?,
        };
    }
    Some(cur)
}

fn string_form(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn first_condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

fn field(c: &Value, name: &str) -> String {
    c.get(name).map(string_form).unwrap_or_default()
}

/// Cartographer's documented matching: (status, reason, message for condition matches).
fn cartographer_reference(rule: &HealthRule, object: &Value) -> (String, String, Option<String>) {
    let out = |s: &str, r: &str, m: Option<String>| (s.to_string(), r.to_string(), m);
    if rule.always_healthy.is_some() {
        return out("True", "AlwaysHealthy", Some(String::new()));
    }
    if let Some(t) = &rule.single_condition_type {
        let reason = format!("{t}Condition");
        return match first_condition(object, t) {
            Some(c) => {
                let status = field(c, "status");
                let status = if status == "True" || status == "False" {
                    status
                } else {
                    "Unknown".into()
                };
                out(&status, &reason, Some(field(c, "message")))
            }
            None => out(
                "Unknown",
                &reason,
                Some(format!(
                    "condition with type [{t}] not found on resource status"
                )),
            ),
        };
    }
    let multi = rule.multi_match.as_ref().unwrap();
    let condition_holds = |type_: &str, status: &str| {
        first_condition(object, type_).filter(|c| field(c, "status") == status)
    };
    let field_holds = |m: &cartographer::MatchField| {
        let value = json_at(object, &parse_path(&m.key).unwrap());
        match m.operator.as_str() {
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            "In" => value.is_some_and(|v| m.values.contains(&string_form(v))),
            "NotIn" => value.is_some_and(|v| !m.values.contains(&string_form(v))),
            _ => false,
        }
    };
    for m in &multi.unhealthy.match_conditions {
        if let Some(c) = condition_holds(&m.type_, &m.status) {
            let message = format!(
                "condition status: {}, message: {}",
                field(c, "status"),
                field(c, "message")
            );
            return out("False", "MatchedCondition", Some(message));
        }
    }
    if multi.unhealthy.match_fields.iter().any(field_holds) {
        return out("False", "MatchedField", None);
    }
    let all = multi
        .healthy
        .match_conditions
        .iter()
        .all(|m| condition_holds(&m.type_, &m.status).is_some())
        && multi.healthy.match_fields.iter().all(field_holds);
    if all {
        return match multi.healthy.match_conditions.first() {
            Some(m) => {
                let c = condition_holds(&m.type_, &m.status).unwrap();
                let message = format!(
                    "condition status: {}, message: {}",
                    field(c, "status"),
                    field(c, "message")
                );
                out("True", "MatchedCondition", Some(message))
            }
            None => out("True", "MatchedField", None),
        };
    }
    out("Unknown", "NoMatchesFulfilled", Some(String::new()))
}

fn cartographer_converted(rule: &HealthRule, object: &Value) -> (String, String, String) {
    let converted = cartographer::convert(rule, "Healthy").unwrap();
    let c = Evaluator::shared()
        .evaluate_manifest(&[converted], object)
        .remove(0);
    let reason = c
        .reason
        .strip_prefix("ConditionRule")
        .unwrap_or(&c.reason)
        .to_string();
    (c.status.as_str().to_string(), reason, c.message)
}

fn rule(yaml: &str) -> HealthRule {
    let doc: Value = serde_norway::from_str(yaml).unwrap();
    cartographer::from_document(&doc).unwrap().0
}

fn check_cartographer(rule: &HealthRule, objects: &[(Value, &str)]) {
    for (i, (obj, expected)) in objects.iter().enumerate() {
        let (status, reason, message) = cartographer_reference(rule, obj);
        let converted = cartographer_converted(rule, obj);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            (converted.0.as_str(), converted.1.as_str()),
            "case {i}: {}",
            converted.2
        );
        assert_eq!(&status, expected, "case {i}");
        if let Some(message) = message {
            assert_eq!(message, converted.2, "case {i}");
        }
    }
}

fn with_conditions(api_version: &str, kind: &str, conditions: Value) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "ns"},
           "status": {"conditions": conditions}})
}

#[test]
fn cartographer_single_condition_type() {
    let r = rule(
        "apiVersion: carto.run/v1alpha1\nkind: ClusterSourceTemplate\nmetadata: {name: source}\nspec:\n  urlPath: .status.artifact.url\n  healthRule:\n    singleConditionType: Ready\n  template:\n    apiVersion: source.toolkit.fluxcd.io/v1beta1\n    kind: GitRepository\n",
    );
    let git = |conditions: Value| {
        with_conditions(
            "source.toolkit.fluxcd.io/v1beta1",
            "GitRepository",
            conditions,
        )
    };
    check_cartographer(
        &r,
        &[
            (
                git(
                    json!([{"type": "Ready", "status": "True", "message": "Fetched revision: main/abc"}]),
                ),
                "True",
            ),
            (
                git(json!([{"type": "Ready", "status": "False", "message": "auth failed"}])),
                "False",
            ),
            (
                git(json!([{"type": "Ready", "status": "Unknown", "message": "reconciling"}])),
                "Unknown",
            ),
            (
                git(json!([{"type": "Reconciling", "status": "True"}])),
                "Unknown",
            ),
            (
                json!({"apiVersion": "source.toolkit.fluxcd.io/v1beta1", "kind": "GitRepository", "metadata": {"name": "x"}}),
                "Unknown",
            ),
        ],
    );
}

#[test]
fn cartographer_multi_match_conditions_and_fields() {
    let r = rule(
        r#"
apiVersion: carto.run/v1alpha1
kind: ClusterTemplate
metadata: {name: deploy}
spec:
  healthRule:
    multiMatch:
      healthy:
        matchConditions:
          - type: ReconcileSucceeded
            status: 'True'
      unhealthy:
        matchFields:
          - key: 'status.conditions[?(@.type=="ReconcileFailed")].status'
            operator: 'In'
            values: ['True']
            messagePath: '.status.usefulErrorMessage'
  template:
    apiVersion: kappctrl.k14s.io/v1alpha1
    kind: App
"#,
    );
    let app = |conditions: Value| with_conditions("kappctrl.k14s.io/v1alpha1", "App", conditions);
    let mut failed = app(json!([{"type": "ReconcileFailed", "status": "True"}]));
    failed["status"]["usefulErrorMessage"] = json!("Some kapp useful error message");
    check_cartographer(
        &r,
        &[
            (
                app(json!([{"type": "ReconcileSucceeded", "status": "True", "message": "ok"}])),
                "True",
            ),
            (failed.clone(), "False"),
            (
                app(json!([{"type": "Reconciling", "status": "True"}])),
                "Unknown",
            ),
            (
                app(json!([{"type": "ReconcileFailed", "status": "False"}])),
                "Unknown",
            ),
        ],
    );
    let (_, _, message) = cartographer_converted(&r, &failed);
    assert!(
        message.ends_with("message: Some kapp useful error message"),
        "{message}"
    );
}

#[test]
fn cartographer_multi_match_fields_without_conditions() {
    let r = rule(
        r#"
apiVersion: carto.run/v1alpha1
kind: ClusterTemplate
metadata: {name: servicer}
spec:
  healthRule:
    multiMatch:
      healthy:
        matchFields:
          - key: '.status.loadBalancer'
            operator: 'Exists'
      unhealthy:
        matchFields:
          - key: '.status.loadBalancer'
            operator: 'DoesNotExist'
  template:
    apiVersion: v1
    kind: Service
"#,
    );
    let svc = |status: Value| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "ns"}, "spec": {"type": "LoadBalancer"}, "status": status});
    check_cartographer(
        &r,
        &[
            (svc(json!({"loadBalancer": {}})), "True"),
            (
                svc(json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}})),
                "True",
            ),
            (svc(json!({})), "False"),
        ],
    );
}

#[test]
fn cartographer_unhealthy_wins_and_healthy_needs_all() {
    let r = rule(
        r#"
healthRule:
  multiMatch:
    healthy:
      matchConditions:
        - {type: Ready, status: 'True'}
      matchFields:
        - {key: '.status.phase', operator: In, values: [Running, Succeeded]}
    unhealthy:
      matchConditions:
        - {type: Failed, status: 'True'}
      matchFields:
        - {key: '.status.phase', operator: NotIn, values: [Running, Succeeded, Pending]}
"#,
    );
    let obj = |phase: &str, conditions: Value| json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}, "status": {"phase": phase, "conditions": conditions}});
    check_cartographer(
        &r,
        &[
            (
                obj(
                    "Running",
                    json!([{"type": "Ready", "status": "True", "message": "up"}]),
                ),
                "True",
            ),
            (
                obj(
                    "Running",
                    json!([{"type": "Ready", "status": "True"}, {"type": "Failed", "status": "True", "message": "boom"}]),
                ),
                "False",
            ),
            (
                obj("Crashed", json!([{"type": "Ready", "status": "True"}])),
                "False",
            ),
            (
                obj("Pending", json!([{"type": "Ready", "status": "True"}])),
                "Unknown",
            ),
            (
                obj("Running", json!([{"type": "Ready", "status": "False"}])),
                "Unknown",
            ),
        ],
    );
}

#[test]
fn cartographer_always_healthy() {
    let r = rule("healthRule:\n  alwaysHealthy: {}\n");
    check_cartographer(
        &r,
        &[(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}),
            "True",
        )],
    );
}

// ---- kapp ----

#[test]
fn kapp_kinds_map_to_the_well_known_healthy_rule() {
    let manifests: Vec<Value> = vec![
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "a"}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": "a"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}}),
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "a"}}),
    ];
    let converted = kapp::convert(&manifests);
    let ids = group_and_resource(&converted.configs);
    assert_eq!(
        ids,
        vec![
            ("apps", "deployments"),
            ("", "pods"),
            ("apiextensions.k8s.io", "customresourcedefinitions")
        ]
    );
    assert_eq!(converted.always_healthy, vec!["v1 ConfigMap"]);
    // kapp's Deployment criteria, through the converted rule.
    let rule = &converted.configs[0].condition_rules;
    let deployment = |available: i64, cond: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2}, "status": {"availableReplicas": available, "conditions": [{"type": "Available", "status": cond}]}})
    };
    let status = |o: &Value| Evaluator::shared().evaluate_manifest(rule, o)[0].status;
    assert_eq!(status(&deployment(2, "True")), Status::True);
    assert_eq!(status(&deployment(1, "True")), Status::False);
    assert_eq!(status(&deployment(2, "False")), Status::False);
}
