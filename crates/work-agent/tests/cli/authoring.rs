//! The authoring commands through the real binary: `eval --explain`, `rules`, `convert`, the
//! lint checks of CEL rules and `crd --json-schema`.

use crate::common;

use common::{assert_contains, assert_refused, eval_work, fixture, run};
use serde_json::Value;

fn authoring(name: &str) -> String {
    fixture(&format!("authoring/{name}"))
}

/// Writes a work holding `manifest` with `configs`, and evaluates it for the authoring fixture
/// `object`; returns the work's path and the `eval --output json` document.
fn eval_in_work(
    name: &str,
    manifest: Value,
    configs: Value,
    object: &str,
) -> (std::path::PathBuf, Value) {
    let work = serde_json::json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": "w", "namespace": "c"},
        "spec": {"workload": {"manifests": [manifest]}, "manifestConfigs": configs}});
    let path = common::scratch(name).join("work.json");
    std::fs::write(&path, work.to_string()).unwrap();
    let r = run(&[
        "eval",
        "--output",
        "json",
        "--work",
        path.to_str().unwrap(),
        "--object",
        &authoring(object),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    (path, serde_json::from_str(&r.stdout).unwrap())
}

#[test]
fn explain_work_in_text_names_every_step() {
    let r = run(&[
        "eval",
        "--explain",
        "--work",
        &fixture("work-job.yaml"),
        "--object",
        &fixture("job-running.json"),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for needle in [
        "spec.manifestConfigs[0].conditionRules[0]: condition Complete, type WellKnownConditions",
        "well-known rule: did not pass (Job is not finished)",
        "celExpressions[0]: object.status.?succeeded.orValue(0) >= object.spec.completions",
        "value: false",
        "AND stopped at celExpressions[0]",
        "message from: messageExpression",
        "result: Succeeded False ConditionRuleEvaluated \"running\"",
        "error: evaluation error: No such key: nope",
        "message from: the expression error",
    ] {
        assert!(
            r.stdout.contains(needle),
            "missing {needle:?} in\n{}",
            r.stdout
        );
    }
}

/// `eval --explain --output json` of `work-job.yaml` on the object fixture `object`.
fn explain_json(object: &str) -> Value {
    let r = eval_work(
        &fixture("work-job.yaml"),
        &fixture(object),
        &["--explain", "--output", "json"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    serde_json::from_str(&r.stdout).expect("one JSON document")
}

/// A condition's type, status, reason and message.
fn condition_fields(c: &Value) -> [Value; 4] {
    ["type", "status", "reason", "message"].map(|k| c[k].clone())
}

#[test]
fn explain_json_gives_the_same_conditions_as_eval_work() {
    for object in ["job-running.json", "job-complete.yaml", "job-stale.yaml"] {
        let explained = explain_json(object);
        let plain = eval_work(
            &fixture("work-job.yaml"),
            &fixture(object),
            &["--output", "json"],
        );
        let plain: Value = serde_json::from_str(&plain.stdout).unwrap();
        let from_explain: Vec<_> = explained["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| !r["result"].is_null())
            .map(|r| condition_fields(&r["result"]))
            .collect();
        let from_eval: Vec<_> = plain["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(condition_fields)
            .collect();
        assert_eq!(from_explain, from_eval, "{object}");
    }
}

#[test]
fn explain_json_shows_the_stale_guard_and_map_fields() {
    let doc = explain_json("job-stale.yaml");
    assert_eq!(doc["rules"][1]["staleStatus"]["observedGeneration"], 2);
    assert_eq!(doc["rules"][1]["staleStatus"]["withheld"], true);
    assert_eq!(doc["rules"][1]["messageSource"], "staleStatus");
    assert_eq!(doc["rules"][2]["staleStatus"]["withheld"], false);
    assert_eq!(doc["rules"][2]["messageSource"], "expressionError");
    let r = run(&[
        "eval",
        "--explain",
        "--output",
        "json",
        "--object",
        &fixture("job-running.json"),
        "--condition",
        "Done",
        "-e",
        "{'status': 'False', 'reason': 'Running', 'message': 'still running'}",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(doc["expressions"][0]["fields"]["reason"], "Running");
    assert_eq!(doc["messageSource"], "resultMap");
    assert_eq!(doc["result"]["type"], "Done");
    assert_eq!(doc["result"]["reason"], "ConditionRuleRunning");
}

#[test]
fn explain_refuses_toplevel_binding() {
    let r = run(&[
        "eval",
        "--explain",
        "--bind",
        "toplevel",
        "-e",
        "true",
        "--object",
        &fixture("job-running.json"),
    ]);
    assert_refused(&r, "--explain");
}

#[test]
fn rules_list_and_show() {
    let r = run(&["rules", "list"]);
    assert_eq!(r.code, 0);
    for name in [
        "cert-manager-certificate",
        "kstatus-ready",
        "strimzi-kafka",
        "argocd-application",
    ] {
        assert_contains(&r.stdout, name);
    }
    let r = run(&[
        "rules",
        "show",
        "cert-manager-certificate",
        "--output",
        "yaml",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let configs: Vec<work_api::ManifestConfigOption> = serde_norway::from_str(&r.stdout).unwrap();
    assert_eq!(configs[0].resource_identifier.resource, "certificates");
    assert_eq!(configs[0].condition_rules[0].condition, "Healthy");
    let text = run(&["rules", "show", "cert-manager-certificate"]);
    assert!(
        text.stdout.starts_with("# cert-manager Certificate"),
        "{}",
        text.stdout
    );
    let missing = run(&["rules", "show", "no-such-rule"]);
    assert_eq!(missing.code, 1);
    assert_contains(&missing.stderr, "kstatus-ready");
}

#[test]
fn a_shown_rule_pasted_into_a_work_gives_the_library_verdict() {
    let show = run(&[
        "rules",
        "show",
        "cert-manager-certificate",
        "--output",
        "yaml",
    ]);
    let configs: Value = serde_norway::from_str(&show.stdout).unwrap();
    let manifest = serde_json::json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "app-tls", "namespace": "apps"}});
    let (path, doc) = eval_in_work("pasted", manifest, configs, "certificate-healthy.yaml");
    assert_eq!(doc["conditions"][0]["status"], "True");
    assert_eq!(doc["conditions"][0]["reason"], "ConditionRuleReady");
    let lint = run(&["lint", path.to_str().unwrap()]);
    assert_eq!(lint.code, 0, "{}{}", lint.stdout, lint.stderr);
    assert!(
        !lint.stdout.contains("warning"),
        "library rules lint clean: {}",
        lint.stdout
    );
}

#[test]
fn convert_flux_writes_rules_against_object() {
    let r = run(&["convert", &authoring("flux-kustomization.yaml")]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let configs: Vec<work_api::ManifestConfigOption> = serde_norway::from_str(&r.stdout).unwrap();
    assert_eq!(configs.len(), 2);
    assert_eq!(configs[1].resource_identifier.group, "bitnami.com");
    assert_eq!(configs[1].resource_identifier.resource, "sealedsecrets");
    let expression = &configs[0].condition_rules[0].cel_expressions[0].expression;
    assert!(
        expression.starts_with("(object.status.conditions.filter(e, e.type == 'Issuing')"),
        "{expression}"
    );
}

#[test]
fn convert_cartographer_then_eval_reports_the_matched_field() {
    let r = run(&["convert", &authoring("cartographer-template.yaml")]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let configs: Value = serde_norway::from_str(&r.stdout).unwrap();
    let rule = &configs[0]["conditionRules"][0];
    let manifest = serde_json::json!({"apiVersion": "kappctrl.k14s.io/v1alpha1", "kind": "App", "metadata": {"name": "shop", "namespace": "apps"}});
    let configs = serde_json::json!([{"resourceIdentifier": configs[0]["resourceIdentifier"], "conditionRules": [rule]}]);
    let (_, doc) = eval_in_work("carto", manifest, configs, "app-failed.yaml");
    assert_eq!(doc["conditions"][0]["status"], "False");
    assert_eq!(doc["conditions"][0]["reason"], "ConditionRuleMatchedField");
    assert!(
        doc["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("admission webhook denied")
    );
}

#[test]
fn convert_kapp_uses_the_well_known_rule_and_notes_the_rest() {
    let r = run(&[
        "convert",
        "--from",
        "kapp",
        &authoring("kapp-manifests.yaml"),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_contains(&r.stdout, "type: WellKnownConditions");
    assert_contains(&r.stdout, "resource: deployments");
    assert_contains(&r.stderr, "v1 ConfigMap: kapp counts it as healthy");
}

#[test]
fn convert_rejects_what_it_cannot_convert() {
    let dir = common::scratch("convert-bad");
    let path = dir.join("bad.yaml");
    std::fs::write(&path, "healthCheckExprs:\n- apiVersion: a/v1\n  kind: A\n  current: \"status.x.exists(status, status)\"\n").unwrap();
    let r = run(&["convert", path.to_str().unwrap()]);
    assert_refused(&r, "comprehension variable");
    let r = run(&[
        "convert",
        "--from",
        "cartographer",
        &authoring("kapp-manifests.yaml"),
    ]);
    assert_refused(&r, "healthRule");
}

#[test]
fn lint_finds_the_common_rule_mistakes() {
    let r = run(&["lint", &authoring("lint-authoring.yaml")]);
    assert_eq!(r.code, 0, "only warnings: {}", r.stdout);
    let file = authoring("lint-authoring.yaml");
    for (path, needle) in [
        (
            "spec.manifestConfigs[0].conditionRules[0].celExpressions[0]",
            "reads object.status without a guard",
        ),
        (
            "spec.manifestConfigs[0].conditionRules[1].celExpressions[0]",
            "object.spec.replicas is an int in the manifest but is compared with a string",
        ),
        (
            "spec.manifestConfigs[0].conditionRules[2].celExpressions[1]",
            "c.status is compared with a bool",
        ),
        (
            "spec.manifestConfigs[0].conditionRules[3].celExpressions[0]",
            "is always false",
        ),
        (
            "spec.manifestConfigs[1].resourceIdentifier",
            "matches no manifest",
        ),
        (
            "spec.workload.manifests[0]",
            "work-agent rules show cert-manager-certificate",
        ),
    ] {
        let line = format!("{file}: {path}: warning: ");
        assert!(
            r.stdout
                .lines()
                .any(|l| l.starts_with(&line) && l.contains(needle)),
            "no {needle:?} at {path} in\n{}",
            r.stdout
        );
    }
    // The guarded read in rule 2 (has() in an earlier expression) is not reported.
    assert!(
        !r.stdout
            .contains("conditionRules[2].celExpressions[1]: warning: reads"),
        "{}",
        r.stdout
    );
    assert_eq!(r.stdout.lines().count(), 6, "{}", r.stdout);
}

#[test]
fn crd_json_schema_prints_the_committed_schema() {
    let r = run(&["crd", "--json-schema"]);
    assert_eq!(r.code, 0);
    let schema: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(schema["properties"]["kind"]["enum"][0], "ManifestWork");
    let committed = std::fs::read_to_string(format!(
        "{}/../../{}",
        env!("CARGO_MANIFEST_DIR"),
        work_api::JSON_SCHEMA_PATH
    ))
    .unwrap();
    assert_eq!(r.stdout, committed);
}

#[test]
fn rules_add_writes_the_file_and_rules_docs_prints_the_catalog() {
    let dir = std::env::temp_dir().join(format!("work-agent-rules-add-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let work = dir.join("work.yaml");
    let text = "apiVersion: work.open-cluster-management.io/v1\nkind: ManifestWork\nmetadata: {name: backup, namespace: cluster1}\n# the nightly backup\nspec:\n  workload:\n    manifests:\n      - {apiVersion: velero.io/v1, kind: Backup, metadata: {name: shop, namespace: velero}, spec: {includedNamespaces: [shop]}}\n";
    std::fs::write(&work, text).unwrap();
    let path = work.display().to_string();
    let r = run(&["rules", "add", &path, "--stdout"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with(text), "{}", r.stdout);
    assert_eq!(
        std::fs::read_to_string(&work).unwrap(),
        text,
        "--stdout writes nothing"
    );
    let r = run(&["rules", "add", &path]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_contains(&r.stderr, "added velero (Healthy, Complete)");
    let written = std::fs::read_to_string(&work).unwrap();
    assert!(
        written.contains("resource: backups") && written.contains("condition: Complete"),
        "{written}"
    );
    let r = run(&["lint", &path]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);

    std::fs::write(&work, "kind: ManifestWork\nspec: [\n").unwrap();
    let r = run(&["rules", "add", &path]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let r = run(&[
        "rules",
        "add",
        &dir.join("absent.yaml").display().to_string(),
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&dir);

    let r = run(&["rules", "docs"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.starts_with("# The rule library"), "{}", r.stdout);
}
