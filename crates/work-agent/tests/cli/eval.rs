//! `work-agent eval` through the real binary: every exit code and output shape.

use crate::common;

use common::{Run, assert_contains, assert_refused, eval_work, fixture, run, run_with_stdin};
use serde_json::{Value, json};

fn json_line(stdout: &str) -> Value {
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line, got {stdout:?}");
    serde_json::from_str(lines[0]).expect("the line is JSON")
}

/// `work-agent eval -e <expression>`, on `--object <object>` when given, with `more` after.
fn eval(expression: &str, object: Option<&str>, more: &[&str]) -> Run {
    let mut args = vec!["eval", "-e", expression];
    if let Some(object) = object {
        args.extend(["--object", object]);
    }
    args.extend(more);
    run(&args)
}

/// [`eval`] with `--output json`: the exit code and the one JSON line.
fn eval_json(expression: &str, object: Option<&str>, more: &[&str]) -> (i32, Value) {
    let r = eval(expression, object, &[more, &["--output", "json"]].concat());
    (r.code, json_line(&r.stdout))
}

/// The error of an eval's JSON line, which must have no value.
fn error_of(line: &Value) -> &str {
    assert_eq!(line["value"], Value::Null, "{line}");
    line["error"].as_str().unwrap_or_default()
}

#[test]
fn integer_arithmetic_on_object_fields_prints_the_value() {
    let job = fixture("job-complete.yaml");
    let r = run(&[
        "eval",
        "--expression",
        "object.spec.completions + 1",
        "--object",
        &job,
    ]);
    assert_eq!((r.code, r.stdout.trim()), (0, "2"), "{}", r.stderr);
}

#[test]
fn a_false_result_still_exits_zero() {
    let job = fixture("job-running.json");
    let r = eval("has(object.status.succeeded)", Some(&job), &[]);
    assert_eq!((r.code, r.stdout.trim()), (0, "false"), "{}", r.stderr);
}

#[test]
fn json_output_is_one_line_with_value_then_error() {
    let job = fixture("job-complete.yaml");
    let r = eval("object.status.succeeded", Some(&job), &["--output", "json"]);
    assert_eq!(r.code, 0);
    assert_eq!(r.stdout, "{\"value\": 1, \"error\": null}\n");
}

#[test]
fn ip_cidr_and_semver_results_print_their_string_form_and_type() {
    for (expr, text, type_name) in [
        ("ip('2001:DB8::1')", "2001:db8::1", "net.IP"),
        ("cidr('10.0.0.0/8')", "10.0.0.0/8", "net.CIDR"),
        ("semver('1.2.3-rc.1')", "1.2.3-rc.1", "kubernetes.Semver"),
    ] {
        let r = eval(expr, None, &[]);
        assert_eq!(
            (r.code, r.stdout.trim()),
            (0, format!("{text} ({type_name})").as_str()),
            "{}",
            r.stderr
        );
        let r = eval(expr, None, &["--output", "json"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(
            r.stdout,
            format!("{{\"value\": \"{text}\", \"type\": \"{type_name}\", \"error\": null}}\n")
        );
    }
    // A type identifier of the library: `net.IP` is declared.
    let (_, line) = eval_json("type(ip('1.2.3.4')) == net.IP", None, &[]);
    assert_eq!(line, json!({"value": true, "error": null}));
}

#[test]
fn toplevel_binding_exposes_each_field() {
    let job = fixture("job-complete.yaml");
    let expr = "status.conditions.exists(c, c.type == 'Complete' && c.status == 'True') && metadata.name == 'pi'";
    let (code, line) = eval_json(expr, Some(&job), &["--bind", "toplevel"]);
    assert_eq!(code, 0, "{line}");
    assert_eq!(line, json!({"value": true, "error": null}));
    // `object` is not bound in that mode.
    let (code, _) = eval_json("object.status", Some(&job), &["--bind", "toplevel"]);
    assert_ne!(code, 0);
}

#[test]
fn a_map_result_is_printed_as_json() {
    let job = fixture("job-complete.yaml");
    let expr = "{'status': object.status.succeeded >= 1, 'reason': 'Counted', 'message': 'n=' + string(object.status.succeeded)}";
    let (code, line) = eval_json(expr, Some(&job), &[]);
    assert_eq!(code, 0);
    assert_eq!(
        line,
        json!({"value": {"status": true, "reason": "Counted", "message": "n=1"}, "error": null})
    );
}

#[test]
fn a_runtime_error_exits_one() {
    let job = fixture("job-running.json");
    let (code, line) = eval_json("object.status.succeeded > 0", Some(&job), &[]);
    assert_eq!(code, 1);
    assert!(error_of(&line).contains("succeeded"), "{line}");
    // Text mode: nothing on stdout, the error on stderr.
    let r = eval("object.status.succeeded > 0", Some(&job), &[]);
    assert_eq!((r.code, r.stdout.as_str()), (1, ""));
    assert!(r.stderr.starts_with("error: "), "{}", r.stderr);
}

#[test]
fn a_compile_error_exits_two() {
    let job = fixture("job-complete.yaml");
    let (code, line) = eval_json("object.status.((", Some(&job), &[]);
    assert_eq!(code, 2);
    assert!(error_of(&line).starts_with("compile error"), "{line}");
}

#[test]
fn bad_input_exits_two_with_a_json_error() {
    for (object, needle) in [
        (fixture("does-not-exist.yaml"), "does-not-exist.yaml"),
        (fixture("not-yaml.yaml"), "not valid YAML"),
        (fixture("two-objects.yaml"), "2 documents"),
    ] {
        let (code, line) = eval_json("true", Some(&object), &[]);
        assert_eq!(code, 2, "{object}");
        assert!(error_of(&line).contains(needle), "{line}");
    }
}

#[test]
fn usage_errors_exit_two() {
    let job = fixture("job-complete.yaml");
    assert_eq!(run(&["eval", "--object", &job]).code, 2);
    assert_eq!(run(&["eval", "--explain", "-e", "true"]).code, 2);
    assert_eq!(eval("true", Some(&job), &["--bind", "nope"]).code, 2);
}

#[test]
fn the_object_can_come_from_stdin() {
    let r = run_with_stdin(
        &["eval", "-e", "object.spec.replicas * 2", "--object", "-"],
        Some("spec: {replicas: 21}\n"),
    );
    assert_eq!((r.code, r.stdout.trim()), (0, "42"), "{}", r.stderr);
}

fn conditions_of(status: &Value) -> Vec<(String, String, String, String)> {
    status["conditions"]
        .as_array()
        .expect("conditions list")
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("type"), s("status"), s("reason"), s("message"))
        })
        .collect()
}

#[test]
fn work_mode_prints_the_manifest_status_as_yaml() {
    let r = eval_work(
        &fixture("work-job.yaml"),
        &fixture("job-complete.yaml"),
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let status: Value = serde_norway::from_str(&r.stdout).expect("YAML output");
    assert_eq!(
        status["resourceMeta"],
        json!({"ordinal": 1, "group": "batch", "version": "v1", "kind": "Job",
               "resource": "jobs", "name": "pi", "namespace": "default"})
    );
    let conditions = conditions_of(&status);
    // The first matching config wins: the second config's NeverUsed rule does not appear.
    let types: Vec<&str> = conditions.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(types, ["Complete", "Succeeded", "Broken"]);
    assert_eq!(conditions[0].1, "True");
    assert_eq!(conditions[0].2, "ConditionRuleEvaluated");
    assert_eq!(
        conditions[1],
        (
            "Succeeded".into(),
            "True".into(),
            "ConditionRuleEvaluated".into(),
            "done".into()
        )
    );
    assert_eq!(
        (conditions[2].1.as_str(), conditions[2].2.as_str()),
        ("False", "ConditionRuleExpressionError")
    );
    for c in status["conditions"].as_array().unwrap() {
        assert_eq!(c["observedGeneration"], 4, "the work's generation");
        assert!(c["lastTransitionTime"].is_string());
    }
}

#[test]
fn work_mode_json_output() {
    let r = eval_work(
        &fixture("work-job.yaml"),
        &fixture("job-running.json"),
        &["--output", "json"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let status = json_line(&r.stdout);
    let conditions = conditions_of(&status);
    assert_eq!(conditions[0].0, "Complete");
    assert_eq!(conditions[0].1, "False");
    assert_eq!(conditions[1].3, "running");
}

#[test]
fn work_mode_does_not_trust_a_stale_status_to_make_a_condition_true() {
    let r = eval_work(&fixture("work-job.yaml"), &fixture("job-stale.yaml"), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let status: Value = serde_norway::from_str(&r.stdout).unwrap();
    let conditions = conditions_of(&status);
    // Complete and Succeeded would be True: withheld. Broken fails whatever the generation.
    for (type_, status, reason, _) in &conditions[..2] {
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("Unknown", "ConditionRuleStaleStatus"),
            "{type_}"
        );
    }
    assert_eq!(
        (conditions[2].1.as_str(), conditions[2].2.as_str()),
        ("False", "ConditionRuleExpressionError")
    );
}

#[test]
fn work_mode_with_no_matching_config_says_so() {
    let r = run_with_stdin(
        &["eval", "--work", &fixture("work-job.yaml"), "--object", "-"],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: default}\n"),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let status: Value = serde_norway::from_str(&r.stdout).unwrap();
    assert_eq!(status["resourceMeta"]["ordinal"], 0);
    assert_eq!(status["resourceMeta"]["resource"], "configmaps");
    assert_eq!(status["conditions"], json!([]));
    assert_contains(&r.stderr, "no manifestConfig");
}

#[test]
fn work_mode_bad_input_exits_two() {
    let job = fixture("job-complete.yaml");
    // A Job is not a ManifestWork... but it decodes leniently; a list does not.
    let r = eval_work(&fixture("not-yaml.yaml"), &job, &["--output", "json"]);
    assert_eq!(r.code, 2);
    assert_eq!(json_line(&r.stdout)["value"], Value::Null);
    let r = run_with_stdin(
        &["eval", "--work", &fixture("work-job.yaml"), "--object", "-"],
        Some("kind: Job\n"),
    );
    assert_eq!(r.code, 2, "an object without apiVersion/name: {}", r.stdout);
    assert_contains(&r.stderr, "apiVersion");
}

#[test]
fn an_expression_may_start_with_a_minus() {
    let job = fixture("job-complete.yaml");
    for flag in ["-e", "--expression"] {
        let r = run(&["eval", flag, "-1 < 0", "--object", &job]);
        assert_eq!(
            (r.code, r.stdout.trim()),
            (0, "true"),
            "{flag}: {}",
            r.stderr
        );
    }
    let r = run(&["eval", "-e=-object.spec.completions", "--object", &job]);
    assert_eq!((r.code, r.stdout.trim()), (0, "-1"), "{}", r.stderr);
}

#[test]
fn an_expression_needs_no_object() {
    let r = eval("-1 < 0", None, &[]);
    assert_eq!((r.code, r.stdout.trim()), (0, "true"), "{}", r.stderr);
    let r = eval("object.kind == 'Job'", None, &[]);
    assert_ne!(r.code, 0, "no object: `object` is undeclared");
    assert_contains(&r.stderr, "object");
    let r = run(&["eval", "--work", &fixture("work-job.yaml")]);
    assert_refused(&r, "--work needs --object");
}
