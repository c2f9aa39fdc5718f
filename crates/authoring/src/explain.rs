//! `work-agent eval --explain`: how each rule reached its condition, step by step.

use conditions::{Evaluator, MessageSource, RuleExplanation};
use serde_json::{Value, json};
use work_api::{CelExpression, ConditionRule, ConditionRuleType, ManifestWork};

use crate::locate::locate;
use work_semantics::manifests::resource_meta;

/// Condition type used when a single expression is explained.
pub const EXPRESSION_CONDITION: &str = "Expression";

/// The explanation of a work's rules for one object.
#[derive(Debug)]
pub struct WorkExplanation {
    /// Which manifest the object is (as the agent reports it).
    pub resource_meta: work_api::ManifestResourceMeta,
    /// Index of the manifestConfig whose rules apply.
    pub config_index: Option<usize>,
    /// Notes for the author.
    pub notes: Vec<String>,
    /// One explanation per rule, in rule order.
    pub rules: Vec<RuleExplanation>,
}

/// Explains every rule of the manifestConfig that applies to `object` in `work`.
pub fn explain_work(work: &ManifestWork, object: &Value) -> Result<WorkExplanation, String> {
    let located = locate(work, object)?;
    Ok(WorkExplanation {
        resource_meta: resource_meta(located.ordinal, &located.id, &located.resource),
        config_index: located.config_index,
        rules: Evaluator::shared().explain_manifest(&located.rules, object),
        notes: located.notes,
    })
}

/// Explains one expression as a one-expression CEL rule setting `condition`.
pub fn explain_expression(expression: &str, condition: &str, object: &Value) -> RuleExplanation {
    let rule = ConditionRule {
        condition: condition.to_string(),
        type_: ConditionRuleType::Cel,
        cel_expressions: vec![CelExpression::new(expression)],
        ..Default::default()
    };
    Evaluator::shared().explain_rule(&rule, object)
}

/// One rule's explanation as JSON (`--output json`).
pub fn rule_json(index: usize, rule: &RuleExplanation) -> Value {
    let expressions: Vec<Value> = rule
        .steps
        .iter()
        .map(|s| {
            json!({
                "index": s.index,
                "expression": s.expression,
                "value": s.value,
                "error": s.error,
                "status": s.status.as_str(),
                "reason": s.reason,
                "message": s.message,
                "fields": s.value.as_ref().filter(|v| v.is_object()),
            })
        })
        .collect();
    json!({
        "index": index,
        "condition": rule.condition,
        "type": rule.rule_type,
        "staleStatus": rule.stale.map(|s| json!({
            "observedGeneration": s.observed_generation,
            "generation": s.generation,
            "withheld": s.withheld,
        })),
        "wellKnown": rule.well_known.as_ref().map(|w| json!({"passed": w.passed, "message": w.message})),
        "expressions": expressions,
        "stoppedAt": rule.stopped_at,
        "notEvaluated": rule.not_evaluated,
        "messageSource": rule.message_source.as_ref().map(MessageSource::as_str),
        "messageSourceExpression": match rule.message_source {
            Some(MessageSource::ResultMap(i)) => Some(i),
            _ => None,
        },
        "noCondition": rule.no_condition,
        "result": rule.result.as_ref().map(|c| json!({
            "type": c.type_,
            "status": c.status.as_str(),
            "reason": c.reason,
            "message": c.message,
        })),
    })
}

/// The whole work explanation as JSON.
pub fn work_json(explanation: &WorkExplanation) -> Value {
    json!({
        "resourceMeta": explanation.resource_meta,
        "manifestConfig": explanation.config_index,
        "notes": explanation.notes,
        "rules": explanation
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| rule_json(i, r))
            .collect::<Vec<_>>(),
    })
}

/// One rule's explanation for people.
pub fn rule_text(label: &str, rule: &RuleExplanation) -> String {
    let mut out = format!(
        "{label}: condition {}, type {}\n",
        rule.condition, rule.rule_type
    );
    let mut line = |text: String| {
        out.push_str("  ");
        out.push_str(&text);
        out.push('\n');
    };
    if let Some(reason) = &rule.no_condition {
        line(format!("no condition: {reason}"));
        return out;
    }
    match rule.stale {
        Some(s) if s.withheld => line(format!(
            "stale-status guard: applied (status.observedGeneration {} != metadata.generation {}); the rule's True verdict is withheld",
            s.observed_generation, s.generation
        )),
        Some(s) => line(format!(
            "stale-status guard: status.observedGeneration {} != metadata.generation {}; the rule's verdict is not True, so it stands",
            s.observed_generation, s.generation
        )),
        None if rule.message_source != Some(MessageSource::InvalidRule) => {
            line("stale-status guard: did not apply".to_string())
        }
        None => {}
    }
    if let Some(wk) = &rule.well_known {
        line(format!(
            "well-known rule: {} ({})",
            if wk.passed { "passed" } else { "did not pass" },
            wk.message
        ));
    }
    for step in &rule.steps {
        line(format!(
            "celExpressions[{}]: {}",
            step.index,
            one_line(&step.expression)
        ));
        match (&step.value, &step.error) {
            (_, Some(error)) => line(format!("  error: {}", one_line(error))),
            (Some(Value::Object(fields)), None) => {
                let shown: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
                line(format!("  returned map: {}", shown.join(", ")));
            }
            (Some(value), None) => line(format!("  value: {value}")),
            (None, None) => {}
        }
        let mut verdict = format!("  -> {}", step.status);
        if let Some(reason) = &step.reason {
            verdict.push_str(&format!(", reason {reason}"));
        }
        if let Some(message) = &step.message {
            verdict.push_str(&format!(", message {message:?}"));
        }
        line(verdict);
    }
    if let Some(at) = rule.stopped_at {
        line(format!(
            "AND stopped at celExpressions[{at}]{}",
            match rule.not_evaluated {
                0 => String::new(),
                1 => "; 1 expression not evaluated".to_string(),
                n => format!("; {n} expressions not evaluated"),
            }
        ));
    } else if !rule.steps.is_empty() {
        line("AND: every expression was True".to_string());
    }
    if let Some(source) = &rule.message_source {
        line(format!("message from: {}", message_source_text(source)));
    }
    if let Some(c) = &rule.result {
        line(format!(
            "result: {} {} {} {:?}",
            c.type_, c.status, c.reason, c.message
        ));
    }
    out
}

/// The whole work explanation for people.
pub fn work_text(explanation: &WorkExplanation) -> String {
    let meta = &explanation.resource_meta;
    let name = if meta.namespace.is_empty() {
        meta.name.clone()
    } else {
        format!("{}/{}", meta.namespace, meta.name)
    };
    let mut out = format!(
        "manifest {} {} {name} (ordinal {}, resource {:?})\n",
        if meta.group.is_empty() {
            meta.version.clone()
        } else {
            format!("{}/{}", meta.group, meta.version)
        },
        meta.kind,
        meta.ordinal,
        meta.resource
    );
    for note in &explanation.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    let prefix = explanation
        .config_index
        .map(|i| format!("spec.manifestConfigs[{i}]."))
        .unwrap_or_default();
    for (i, rule) in explanation.rules.iter().enumerate() {
        out.push_str(&rule_text(&format!("{prefix}conditionRules[{i}]"), rule));
    }
    out
}

fn message_source_text(source: &MessageSource) -> String {
    match source {
        MessageSource::ResultMap(i) => format!("the result map of celExpressions[{i}]"),
        MessageSource::MessageExpression => "messageExpression".to_string(),
        MessageSource::MessageExpressionFailed => "messageExpression (it failed)".to_string(),
        MessageSource::Message => "message".to_string(),
        MessageSource::Default => "the default".to_string(),
        MessageSource::WellKnown => "the well-known rule".to_string(),
        MessageSource::ExpressionError => "the expression error".to_string(),
        MessageSource::StaleStatus => "the stale-status guard".to_string(),
        MessageSource::InvalidRule => "the rule being invalid".to_string(),
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
