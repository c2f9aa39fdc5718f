//! `work-agent lint`: checks ManifestWork files before they are shipped.
//!
//! Findings name the file and the field path, e.g.
//! `work.yaml: spec.manifestConfigs[0].conditionRules[1].celExpressions[0]: error: ...`.
//! Exit codes: 1 when any error was found, 0 with only warnings (or nothing), 2 when a file
//! cannot be read or is not YAML.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;

use conditions::Evaluator;
use serde_json::Value;
use work_api::{
    ConditionRule, ConditionRuleType, ManifestConfigOption, ManifestWork, condition_types,
};

use crate::eval::parse_documents;
use crate::locate::guess_plural;
use crate::{lint_cel, rule_library};
use work_semantics::manifests::{ManifestId, glob_match};

/// Largest total size of a work's manifests the hub accepts (upstream OCM's limit).
pub const MAX_MANIFESTS_BYTES: usize = 500 * 1024;

/// Arguments of `work-agent lint`.
#[derive(clap::Args, Debug)]
pub struct LintArgs {
    /// ManifestWork files (YAML or JSON; each document of a multi-document file is checked).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Probably not what the author meant, but valid.
    Warning,
    /// The work is rejected, or does not do what it says.
    Error,
}

/// One problem found in a work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// Field path inside the document, e.g. `spec.manifestConfigs[0]`.
    pub path: String,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong.
    pub message: String,
}

impl Finding {
    fn error(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            severity: Severity::Error,
            message: message.into(),
        }
    }

    fn warning(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            severity: Severity::Warning,
            message: message.into(),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        let path = if self.path.is_empty() {
            "."
        } else {
            &self.path
        };
        // One finding per line, so tools can split the output; CEL errors span several lines.
        let message: Vec<&str> = self.message.lines().map(str::trim).collect();
        write!(f, "{path}: {severity}: {}", message.join(" "))
    }
}

/// Checks one document; `doc` is the decoded YAML/JSON value.
pub fn lint_document(doc: &Value) -> Vec<Finding> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
    if kind != "ManifestWork" {
        return vec![Finding::warning(
            "kind",
            format!("not a ManifestWork (kind {kind:?}); skipped"),
        )];
    }
    let work: ManifestWork = match serde_json::from_value(doc.clone()) {
        Ok(w) => w,
        Err(e) => return vec![Finding::error("", format!("not a valid ManifestWork: {e}"))],
    };
    let manifests = identify_manifests(&work);
    let mut findings = manifests.findings.clone();
    findings.extend(check_size(doc));
    for (i, config) in work.spec.manifest_configs.iter().enumerate() {
        let path = format!("spec.manifestConfigs[{i}]");
        findings.extend(check_config(&path, config, &manifests.ids));
    }
    findings.extend(check_ttl(&work, &manifests.ids));
    findings.extend(crate::order::held(&work).into_iter().map(|(i, why)| {
        Finding::error(
            format!(
                "metadata.annotations[{}]",
                work_semantics::gates::ANNOTATION
            ),
            format!("spec.workload.manifests[{i}] is never applied: {why}"),
        )
    }));
    findings.extend(check_drift_and_holds(&work, &manifests.ids));
    findings.extend(suggest_library_rules(&work, &manifests.ids));
    findings
}

/// The drift modes and holds the work declares: a mode that cannot be known (the agent writes
/// nothing of those manifests), holds that cannot be read (their rule conditions are Unknown),
/// and holds of a condition no rule of the work produces (they never hold anything).
fn check_drift_and_holds(
    work: &ManifestWork,
    manifests: &[(usize, ManifestId, Value)],
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut reported: Vec<String> = Vec::new();
    let mut once = |path: String, message: String, findings: &mut Vec<Finding>| {
        if !reported.contains(&message) {
            reported.push(message.clone());
            findings.push(Finding::error(path, message));
        }
    };
    // Manifests whose mode cannot be known, grouped by why.
    let mut unknown: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, mode) in work_semantics::drift::modes_of(work)
        .into_iter()
        .enumerate()
    {
        if let Err(why) = mode {
            match unknown.iter_mut().find(|(w, _)| *w == why) {
                Some((_, list)) => list.push(i),
                None => unknown.push((why, vec![i])),
            }
        }
    }
    for (why, list) in unknown {
        let list: Vec<String> = list.iter().map(usize::to_string).collect();
        findings.push(Finding::error(
            format!(
                "metadata.annotations[{}]",
                work_semantics::drift::ANNOTATION
            ),
            format!(
                "spec.workload.manifests[{}] never written: {why}",
                list.join(", ")
            ),
        ));
    }
    let holds_path = format!(
        "metadata.annotations[{}]",
        work_semantics::holds::ANNOTATION
    );
    let produced: Vec<&str> = work
        .spec
        .manifest_configs
        .iter()
        .filter(|c| manifests.iter().any(|(_, id, _)| selects(c, id)))
        .flat_map(|c| c.condition_rules.iter().map(|r| r.condition_type()))
        .collect();
    let mut warned: Vec<String> = Vec::new();
    for holds in work_semantics::holds::holds_of(work) {
        let holds = match holds {
            Ok(holds) => holds,
            Err(why) => {
                once(
                    holds_path.clone(),
                    format!(
                        "the holds cannot be read, so the rule conditions they may mean are Unknown: {why}"
                    ),
                    &mut findings,
                );
                continue;
            }
        };
        for hold in holds {
            let name = hold.condition;
            if produced.contains(&name.as_str()) || warned.contains(&name) {
                continue;
            }
            let message = if condition_types::AGENT_OWNED.contains(&name.as_str()) {
                format!(
                    "{name} is a condition the agent writes itself: holds apply to rule-made conditions only"
                )
            } else {
                format!("no rule of the work produces {name}: the hold holds nothing")
            };
            findings.push(Finding::warning(holds_path.clone(), message));
            warned.push(name);
        }
    }
    findings
}

/// A manifest of a kind the rule library knows, that no config gives condition rules.
fn suggest_library_rules(
    work: &ManifestWork,
    manifests: &[(usize, ManifestId, Value)],
) -> Vec<Finding> {
    manifests
        .iter()
        .filter(|(_, id, _)| {
            !work
                .spec
                .manifest_configs
                .iter()
                .any(|c| !c.condition_rules.is_empty() && selects(c, id))
        })
        .filter_map(|(i, id, _)| {
            let names: Vec<String> = rule_library::for_kind(&id.group, &id.kind)
                .into_iter()
                .map(|r| r.name)
                .collect();
            let first = names.first()?;
            Some(Finding::warning(
                format!("spec.workload.manifests[{i}]"),
                format!(
                    "{} {} has no condition rules; the rule library has {}: `work-agent rules show {first}` prints them ready to paste",
                    id.kind,
                    display_name(id),
                    names.join(", ")
                ),
            ))
        })
        .collect()
}

struct Manifests {
    /// Ordinal, identity and raw object of every identifiable manifest.
    ids: Vec<(usize, ManifestId, Value)>,
    findings: Vec<Finding>,
}

fn identify_manifests(work: &ManifestWork) -> Manifests {
    let mut ids: Vec<(usize, ManifestId, Value)> = Vec::new();
    let mut findings = Vec::new();
    let mut seen: HashMap<(String, String, String, String), usize> = HashMap::new();
    for (i, manifest) in work.spec.workload.manifests.iter().enumerate() {
        let path = format!("spec.workload.manifests[{i}]");
        match ManifestId::of(&manifest.0) {
            Ok(id) => {
                let key = (
                    id.group.clone(),
                    id.kind.clone(),
                    id.namespace.clone(),
                    id.name.clone(),
                );
                if let Some(first) = seen.get(&key) {
                    findings.push(Finding::error(
                        &path,
                        format!(
                            "duplicate manifest: {} {} is also spec.workload.manifests[{first}]",
                            id.kind,
                            display_name(&id)
                        ),
                    ));
                } else {
                    seen.insert(key, i);
                }
                ids.push((i, id, manifest.0.clone()));
            }
            Err(e) => findings.push(Finding::error(&path, e.to_string())),
        }
    }
    Manifests { ids, findings }
}

fn display_name(id: &ManifestId) -> String {
    if id.namespace.is_empty() {
        id.name.clone()
    } else {
        format!("{}/{}", id.namespace, id.name)
    }
}

fn check_size(doc: &Value) -> Option<Finding> {
    let manifests = doc.pointer("/spec/workload/manifests")?.as_array()?;
    let total: usize = manifests
        .iter()
        .map(|m| serde_json::to_vec(m).map_or(0, |b| b.len()))
        .sum();
    (total > MAX_MANIFESTS_BYTES).then(|| {
        Finding::error(
            "spec.workload.manifests",
            format!(
                "manifests total {total} bytes, over the hub's limit of {MAX_MANIFESTS_BYTES} (500 KiB)"
            ),
        )
    })
}

pub use crate::locate::selects;

fn check_config(
    path: &str,
    config: &ManifestConfigOption,
    manifests: &[(usize, ManifestId, Value)],
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let matched: Vec<&(usize, ManifestId, Value)> = manifests
        .iter()
        .filter(|(_, id, _)| selects(config, id))
        .collect();
    if matched.is_empty() {
        let rid = &config.resource_identifier;
        let mut message = format!(
            "matches no manifest (group {:?}, resource {:?}, namespace {:?}, name {:?})",
            rid.group, rid.resource, rid.namespace, rid.name
        );
        // The usual mistake: the group left out (jobs are in "batch", deployments in "apps").
        if let Some((_, id, _)) = manifests.iter().find(|(_, id, _)| {
            guess_plural(&id.kind) == rid.resource
                && glob_match(&rid.name, &id.name)
                && glob_match(&rid.namespace, &id.namespace)
        }) {
            message.push_str(&format!(
                "; did you mean group {:?} ({})?",
                id.group, id.kind
            ));
        }
        findings.push(Finding::warning(
            format!("{path}.resourceIdentifier"),
            message,
        ));
    }
    let mut names: HashMap<String, usize> = HashMap::new();
    for (j, rule) in config.condition_rules.iter().enumerate() {
        let rule_path = format!("{path}.conditionRules[{j}]");
        findings.extend(check_rule(&rule_path, rule, &matched));
        let name = rule.condition_type().to_string();
        if let Some(first) = names.get(&name) {
            findings.push(Finding::error(
                format!("{rule_path}.condition"),
                format!("a second rule for condition {name:?} (first is conditionRules[{first}])"),
            ));
        } else {
            names.insert(name, j);
        }
    }
    findings
}

fn check_rule(
    path: &str,
    rule: &ConditionRule,
    matched: &[&(usize, ManifestId, Value)],
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let name = rule.condition_type();
    if condition_types::AGENT_OWNED.contains(&name) {
        findings.push(Finding::error(
            format!("{path}.condition"),
            format!("{name:?} is a condition the agent writes itself; a rule must not set it"),
        ));
    }
    match &rule.type_ {
        ConditionRuleType::Cel => {
            if rule.condition.is_empty() {
                findings.push(Finding::error(
                    format!("{path}.condition"),
                    "a CEL rule needs a condition",
                ));
            }
            if rule.cel_expressions.is_empty() {
                findings.push(Finding::warning(
                    format!("{path}.celExpressions"),
                    "no expressions: the condition is always True",
                ));
            }
        }
        ConditionRuleType::WellKnownConditions => {
            if !rule.cel_expressions.is_empty() {
                findings.push(Finding::warning(
                    format!("{path}.celExpressions"),
                    "ignored: a well-known rule has its own expressions",
                ));
            }
            // A well-known rule yields nothing for kinds it does not know; evaluating it on the
            // manifest itself (no status) tells which kinds those are.
            for (ordinal, id, manifest) in matched {
                let produced =
                    Evaluator::shared().evaluate_manifest(std::slice::from_ref(rule), manifest);
                if produced.is_empty() {
                    findings.push(Finding::warning(
                        format!("{path}.type"),
                        format!(
                            "no well-known {name:?} rule for kind {} (spec.workload.manifests[{ordinal}]): it yields no condition",
                            id.kind
                        ),
                    ));
                }
            }
        }
        ConditionRuleType::Unknown(t) => findings.push(Finding::error(
            format!("{path}.type"),
            format!("unknown rule type {t:?} (WellKnownConditions, WellKnownCompletions or CEL)"),
        )),
    }
    // An earlier expression's guard protects the later ones: the AND stops at it.
    let mut status_guarded = false;
    let sources: Vec<&str> = rule
        .cel_expressions
        .iter()
        .map(|e| e.expression.as_str())
        .collect();
    for (k, expr) in rule.cel_expressions.iter().enumerate() {
        let expr_path = format!("{path}.celExpressions[{k}]");
        if expr.is_invalid_item() {
            findings.push(Finding::error(
                expr_path,
                "must be a string or an object {expression: <string>}",
            ));
        } else if let Err(e) = Evaluator::shared().check_expression(&expr.expression) {
            findings.push(Finding::error(expr_path, e.to_string()));
        } else {
            findings.extend(check_cel(
                &expr_path,
                &expr.expression,
                matched.first().map(|(_, _, m)| m),
                &mut status_guarded,
            ));
            for f in lint_cel::vacuous(&expr.expression, &sources) {
                findings.push(Finding::warning(&expr_path, f.message));
            }
        }
    }
    if let Some(expr) = &rule.message_expression
        && let Err(e) = Evaluator::shared().check_expression(expr)
    {
        findings.push(Finding::error(
            format!("{path}.messageExpression"),
            e.to_string(),
        ));
    }
    findings
}

/// The tree checks of one compiled expression.
fn check_cel(
    path: &str,
    source: &str,
    manifest: Option<&Value>,
    status_guarded: &mut bool,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    if let Some(used) = lint_cel::status_use(source) {
        if used.reads && !used.guards && !*status_guarded {
            findings.push(Finding::warning(
                path,
                "reads object.status without a guard: an object with no status yet makes this an expression error, not False; guard with has(object.status) (or has() on the field) or read it as object.?status...",
            ));
        }
        *status_guarded |= used.guards;
    }
    if lint_cel::constant_false(source) {
        findings.push(Finding::warning(
            path,
            "is always false: the condition can never be True",
        ));
    }
    for f in lint_cel::never_true(source, manifest) {
        findings.push(Finding::warning(path, f.message));
    }
    findings
}

fn check_ttl(work: &ManifestWork, manifests: &[(usize, ManifestId, Value)]) -> Vec<Finding> {
    let Some(ttl) = work
        .spec
        .delete_option
        .as_ref()
        .and_then(|d| d.ttl_seconds_after_finished)
    else {
        return Vec::new();
    };
    let path = "spec.deleteOption.ttlSecondsAfterFinished";
    if ttl < 0 {
        return vec![Finding::error(path, format!("{ttl} is negative"))];
    }
    let has_complete = work.spec.manifest_configs.iter().any(|c| {
        c.condition_rules
            .iter()
            .any(|r| r.condition_type() == condition_types::COMPLETE)
            && manifests.iter().any(|(_, id, _)| selects(c, id))
    });
    if has_complete {
        Vec::new()
    } else {
        vec![Finding::warning(
            path,
            "no manifest has a Complete rule: the work never completes, so it is never collected",
        )]
    }
}

/// What linting one file gave: findings per document label, or why it could not be read.
pub fn lint_file(path: &std::path::Path) -> Result<Vec<(String, Finding)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let docs = parse_documents(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let file = path.display().to_string();
    let many = docs.len() > 1;
    let mut out = Vec::new();
    for (n, doc) in docs.iter().enumerate() {
        let label = if many {
            format!("{file} (document {})", n + 1)
        } else {
            file.clone()
        };
        out.extend(lint_document(doc).into_iter().map(|f| (label.clone(), f)));
    }
    Ok(out)
}

/// Runs the subcommand.
pub fn main(args: LintArgs) -> ExitCode {
    let (mut errors, mut warnings, mut unreadable) = (0, 0, 0);
    for path in &args.files {
        match lint_file(path) {
            Ok(findings) => {
                for (label, finding) in findings {
                    match finding.severity {
                        Severity::Error => errors += 1,
                        Severity::Warning => warnings += 1,
                    }
                    println!("{label}: {finding}");
                }
            }
            Err(e) => {
                unreadable += 1;
                eprintln!("{e}");
            }
        }
    }
    eprintln!("{errors} error(s), {warnings} warning(s)");
    if unreadable > 0 {
        ExitCode::from(2)
    } else if errors > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn work(spec: Value) -> Value {
        json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
               "metadata": {"name": "w", "namespace": "c"}, "spec": spec})
    }

    fn job(name: &str) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"}})
    }

    #[test]
    fn a_clean_work_has_no_findings() {
        let doc = work(json!({
            "deleteOption": {"ttlSecondsAfterFinished": 10},
            "workload": {"manifests": [job("a")]},
            "manifestConfigs": [{"resourceIdentifier": {"group": "batch", "resource": "jobs", "name": "a", "namespace": "default"},
                                 "conditionRules": [{"type": "WellKnownCompletions"}]}]
        }));
        assert_eq!(lint_document(&doc), vec![]);
    }

    #[test]
    fn duplicate_names_count_an_unnamed_well_known_rule_as_complete() {
        let doc = work(json!({
            "workload": {"manifests": [job("a")]},
            "manifestConfigs": [{"resourceIdentifier": {"group": "batch", "resource": "jobs", "name": "a", "namespace": "default"},
                                 "conditionRules": [{"type": "WellKnownCompletions"},
                                                    {"condition": "Complete", "type": "CEL", "celExpressions": ["true"]}]}]
        }));
        let findings = lint_document(&doc);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(
            findings[0].path,
            "spec.manifestConfigs[0].conditionRules[1].condition"
        );
        assert_eq!(findings[0].severity, Severity::Error);
    }

    #[test]
    fn missing_group_gets_a_hint() {
        let doc = work(json!({
            "workload": {"manifests": [job("a")]},
            "manifestConfigs": [{"resourceIdentifier": {"resource": "jobs", "name": "a", "namespace": "default"}}]
        }));
        let findings = lint_document(&doc);
        assert_eq!(findings.len(), 1);
        assert!(
            findings[0].message.contains("did you mean group \"batch\""),
            "{}",
            findings[0].message
        );
    }

    #[test]
    fn drift_modes_and_holds_that_cannot_be_used_are_found() {
        let mut doc = work(json!({
            "workload": {"manifests": [job("a"), job("b")]},
            "manifestConfigs": [{"resourceIdentifier": {"group": "batch", "resource": "jobs", "name": "*", "namespace": "default"},
                                 "conditionRules": [{"type": "WellKnownCompletions"}]}]
        }));
        doc["metadata"]["annotations"] = json!({
            work_semantics::drift::ANNOTATION: "Reportonly",
            work_semantics::holds::ANNOTATION:
                r#"[{"condition": "Complete", "for": "30s"}, {"condition": "Degraded", "for": "1m"}, {"condition": "Applied", "for": "1m"}]"#,
        });
        let findings = lint_document(&doc);
        let shown: Vec<String> = findings.iter().map(ToString::to_string).collect();
        assert_eq!(findings.len(), 3, "{shown:#?}");
        assert_eq!(
            findings[0].severity,
            Severity::Error,
            "one error for the whole annotation"
        );
        assert!(
            findings[0]
                .message
                .contains("manifests[0, 1] never written: not a mode"),
            "{shown:#?}"
        );
        assert!(
            findings[1]
                .message
                .contains("no rule of the work produces Degraded")
        );
        assert!(
            findings[2]
                .message
                .contains("holds apply to rule-made conditions only")
        );
        doc["metadata"]["annotations"] =
            json!({work_semantics::holds::ANNOTATION: "[{\"condition\": 1}]"});
        let findings = lint_document(&doc);
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].severity, Severity::Error);
    }

    #[test]
    fn other_kinds_are_skipped_with_a_warning() {
        let findings = lint_document(&job("x"));
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].severity, Severity::Warning);
    }
}
