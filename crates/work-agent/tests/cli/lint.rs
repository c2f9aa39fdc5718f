//! `work-agent lint` through the real binary: each finding, exit codes, file and path naming.

use crate::common;

use common::{assert_contains, fixture, run, scratch};

fn lint(name: &str) -> common::Run {
    run(&["lint", &fixture(&format!("lint/{name}"))])
}

/// Asserts a finding line `<file>: <path>: <severity>: ...containing needle` is printed.
fn assert_finding(r: &common::Run, file: &str, path: &str, severity: &str, needle: &str) {
    let prefix = format!("{file}: {path}: {severity}: ");
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with(&prefix) && l.contains(needle)),
        "no `{prefix}...{needle}` in:\n{}",
        r.stdout
    );
}

#[test]
fn a_clean_work_passes_silently() {
    let r = lint("clean.yaml");
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{}", r.stderr);
    assert!(r.stderr.contains("0 error(s), 0 warning(s)"));
}

#[test]
fn expressions_that_do_not_compile_are_errors_with_their_path() {
    let r = lint("bad-expression.yaml");
    assert_eq!(r.code, 1);
    let file = fixture("lint/bad-expression.yaml");
    assert_finding(
        &r,
        &file,
        "spec.manifestConfigs[0].conditionRules[1].celExpressions[0]",
        "error",
        "compile error",
    );
    assert_finding(
        &r,
        &file,
        "spec.manifestConfigs[0].conditionRules[1].messageExpression",
        "error",
        "compile error",
    );
    assert_eq!(
        r.stdout.lines().count(),
        2,
        "only the bad ones:\n{}",
        r.stdout
    );
}

#[test]
fn a_rule_named_like_an_agent_condition_is_an_error() {
    let r = lint("agent-owned.yaml");
    assert_eq!(r.code, 1);
    assert_finding(
        &r,
        &fixture("lint/agent-owned.yaml"),
        "spec.manifestConfigs[0].conditionRules[0].condition",
        "error",
        "\"Available\"",
    );
}

#[test]
fn a_ttl_without_a_complete_rule_is_a_warning() {
    let r = lint("ttl-no-complete.yaml");
    assert_eq!(r.code, 0, "warnings only");
    assert_finding(
        &r,
        &fixture("lint/ttl-no-complete.yaml"),
        "spec.deleteOption.ttlSecondsAfterFinished",
        "warning",
        "never collected",
    );
}

#[test]
fn a_config_that_matches_no_manifest_is_a_warning_with_a_hint() {
    let r = lint("unmatched-config.yaml");
    assert_eq!(r.code, 0);
    assert_finding(
        &r,
        &fixture("lint/unmatched-config.yaml"),
        "spec.manifestConfigs[0].resourceIdentifier",
        "warning",
        "did you mean group \"batch\"",
    );
}

#[test]
fn duplicate_manifests_are_errors() {
    let r = lint("duplicates.yaml");
    assert_eq!(r.code, 1);
    assert_finding(
        &r,
        &fixture("lint/duplicates.yaml"),
        "spec.workload.manifests[2]",
        "error",
        "manifests[0]",
    );
    // Same name, different kind: not a duplicate.
    assert!(!r.stdout.contains("manifests[1]: error"), "{}", r.stdout);
}

#[test]
fn a_well_known_rule_for_an_unknown_kind_is_a_warning() {
    let r = lint("wellknown-unknown-kind.yaml");
    assert_eq!(r.code, 0);
    assert_finding(
        &r,
        &fixture("lint/wellknown-unknown-kind.yaml"),
        "spec.manifestConfigs[0].conditionRules[0].type",
        "warning",
        "ConfigMap",
    );
}

#[test]
fn every_document_of_a_multi_document_file_is_checked() {
    let r = lint("multi.yaml");
    assert_eq!(r.code, 1);
    let file = fixture("lint/multi.yaml");
    assert_finding(
        &r,
        &format!("{file} (document 2)"),
        "spec.manifestConfigs[0].conditionRules[0].celExpressions[0]",
        "error",
        "compile error",
    );
    assert!(!r.stdout.contains("(document 1)"), "{}", r.stdout);
}

#[test]
fn manifests_over_500_kib_are_an_error() {
    let dir = scratch("lint-size");
    let big = "x".repeat(300 * 1024);
    let work = format!(
        "apiVersion: work.open-cluster-management.io/v1\nkind: ManifestWork\nmetadata: {{name: big, namespace: c}}\nspec:\n  workload:\n    manifests:\n      - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: a, namespace: d}}, data: {{k: {big}}}}}\n      - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: b, namespace: d}}, data: {{k: {big}}}}}\n"
    );
    let path = dir.join("big.yaml");
    std::fs::write(&path, work).unwrap();
    let path = path.display().to_string();
    let r = run(&["lint", &path]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert_finding(&r, &path, "spec.workload.manifests", "error", "500 KiB");
}

#[test]
fn several_files_are_all_checked_and_errors_win() {
    let r = run(&[
        "lint",
        &fixture("lint/clean.yaml"),
        &fixture("lint/ttl-no-complete.yaml"),
        &fixture("lint/agent-owned.yaml"),
    ]);
    assert_eq!(r.code, 1);
    assert_contains(&r.stderr, "1 error(s), 1 warning(s)");
}

#[test]
fn unreadable_input_exits_two() {
    assert_eq!(run(&["lint", &fixture("lint/nope.yaml")]).code, 2);
    assert_eq!(run(&["lint", &fixture("not-yaml.yaml")]).code, 2);
    // Even when another file has errors.
    assert_eq!(
        run(&[
            "lint",
            &fixture("lint/agent-owned.yaml"),
            &fixture("not-yaml.yaml")
        ])
        .code,
        2
    );
    assert_eq!(run(&["lint"]).code, 2, "no files is a usage error");
}

#[test]
fn the_shipped_examples_lint_clean_of_errors() {
    // Every upstream-valid fixture of work-api is a realistic work: none may have lint errors.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../work-api/tests/fixtures/upstream");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    files.sort();
    let mut args = vec!["lint"];
    args.extend(files.iter().map(String::as_str));
    let r = run(&args);
    assert!(!r.stdout.contains(": error: "), "{}", r.stdout);
    assert_eq!(r.code, 0, "{}", r.stdout);
}

#[test]
fn the_examples_in_the_authoring_guide_lint_without_errors() {
    let guide = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/authoring.md");
    let text = std::fs::read_to_string(&guide).expect("docs/authoring.md");
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```yaml") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), l) => {
                block.push_str(l);
                block.push('\n');
            }
            _ => {}
        }
    }
    assert!(blocks.len() >= 6, "found {} yaml blocks", blocks.len());
    let dir = scratch("lint-guide");
    for (i, block) in blocks.iter().enumerate() {
        let path = dir.join(format!("example-{i}.yaml"));
        std::fs::write(&path, block).unwrap();
        let path = path.display().to_string();
        let r = run(&["lint", &path]);
        assert_eq!(
            r.code, 0,
            "example {i} of docs/authoring.md:\n{}{}",
            r.stdout, block
        );
        assert!(!r.stdout.contains(": error: "), "{}", r.stdout);
    }
}
