//! One rule on one live object: CEL evaluation, result interpretation, messages, and the stale
//! guard over the verdict.

use std::cell::OnceCell;
use std::sync::LazyLock;

use cel::common::types::CelBool;
use cel::objects::Key;
use cel::{Context, Value};
use regex::Regex;
use work_api::{ConditionRule, ConditionRuleType, condition_types};

use crate::cel::budget::ManifestBudget;
use crate::cel::cache::Compiled;
use crate::cel::convert;
use crate::cel::engine::Engine;
use crate::cel::prepared::ObjectVariable;
use crate::condition::{
    CONDITION_RULE_REASON_PREFIX, ConditionUpdate, Status, cap_message, reasons,
};
use crate::error::EvalError;
use crate::well_known;

/// The Kubernetes condition reason pattern.
static REASON_PATTERN: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$").ok());
/// Longest reason Kubernetes accepts.
const MAX_REASON_LEN: usize = 1024;

/// A live object, the CEL context over it (built once and only if a rule needs it), and the
/// cost budget its rules share.
pub(crate) struct ObjectScope<'a> {
    engine: &'a Engine,
    object: &'a serde_json::Value,
    variable: &'a ObjectVariable<'a>,
    ctx: OnceCell<Result<Context<'a, 'a>, EvalError>>,
    /// The rules' sources, compiled before the object was converted (for their reads).
    compiled: &'a [(&'a str, Compiled)],
    /// `(observedGeneration, generation)` when the status is stale and the guard is on.
    stale: Option<(i64, i64)>,
    budget: ManifestBudget,
}

/// What a rule's expressions decided.
struct Outcome {
    status: Status,
    reason: Option<String>,
    message: Option<String>,
}

impl<'a> ObjectScope<'a> {
    /// A scope over `object`, whose CEL value `variable` binds, with a fresh manifest budget;
    /// `compiled` holds sources of the rules already compiled. With `stale_guard` off, a stale
    /// status is judged like any other (for `eval --explain`'s steps, which the guard of the
    /// whole rule covers).
    pub(crate) fn new(
        engine: &'a Engine,
        object: &'a serde_json::Value,
        variable: &'a ObjectVariable<'a>,
        compiled: &'a [(&'a str, Compiled)],
        stale_guard: bool,
    ) -> Self {
        Self {
            engine,
            object,
            variable,
            ctx: OnceCell::new(),
            compiled,
            stale: stale_guard.then(|| stale_generation(object)).flatten(),
            budget: ManifestBudget::new(engine.limits()),
        }
    }

    /// `source` compiled: from `compiled` when it is one of those very strings, else from the
    /// engine's cache.
    fn compile(&self, source: &str) -> Compiled {
        self.compiled
            .iter()
            .find(|(s, _)| std::ptr::eq(*s, source))
            .map(|(_, compiled)| compiled.clone())
            .unwrap_or_else(|| self.engine.compile(source))
    }

    fn ctx(&self) -> Result<&Context<'a, 'a>, EvalError> {
        self.ctx
            .get_or_init(|| {
                let mut ctx = self.engine.context()?;
                ctx.set_variable_resolver(self.variable);
                Ok(ctx)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The condition `rule` yields on this object, if any, after the stale guard.
    pub(crate) fn evaluate_rule(&self, rule: &ConditionRule) -> Option<ConditionUpdate> {
        let update = self.judge(rule)?;
        Some(match self.stale {
            Some((observed, generation)) => guard_stale(update, observed, generation),
            None => update,
        })
    }

    /// The condition `rule` yields on this object, if any, as if its status were current.
    fn judge(&self, rule: &ConditionRule) -> Option<ConditionUpdate> {
        let condition = rule.condition_type();
        let invalid = |message: String| {
            Some(ConditionUpdate::new(
                condition,
                Status::Unknown,
                reasons::CONDITION_RULE_INVALID,
                message,
            ))
        };
        if condition.is_empty() {
            // A condition without a type cannot be written; the CRD rejects such CEL rules.
            return None;
        }
        if condition_types::AGENT_OWNED.contains(&condition) {
            return invalid(format!(
                "Condition {condition} is owned by the work agent and cannot be set by a condition rule"
            ));
        }
        let well_known = match &rule.type_ {
            ConditionRuleType::Unknown(t) => {
                return invalid(format!(
                    "Unknown condition rule type {t:?}: expected WellKnownConditions or CEL"
                ));
            }
            ConditionRuleType::WellKnownConditions => {
                // Unknown kinds and conditions yield nothing.
                Some(well_known::evaluate(condition, self.object)?)
            }
            ConditionRuleType::Cel => None,
        };
        if well_known.is_none()
            && let Some(at) = self.budget.exhausted_at()
        {
            return Some(ConditionUpdate::new(
                condition,
                Status::False,
                reasons::CONDITION_RULE_EXPRESSION_ERROR,
                format!(
                    "not evaluated: {} (exhausted by {at})",
                    self.budget.exceeded()
                ),
            ));
        }
        let (outcome, default_message) = match well_known {
            Some(wk) => (
                Outcome {
                    status: if wk.passed {
                        Status::True
                    } else {
                        Status::False
                    },
                    reason: None,
                    message: None,
                },
                wk.message,
            ),
            None => match self.evaluate_expressions(rule) {
                Ok(outcome) => {
                    let default = if outcome.status == Status::True {
                        format!("Manifest is {condition}")
                    } else {
                        format!("Manifest is not {condition}")
                    };
                    (outcome, default)
                }
                Err(update) => return Some(update.with_type(condition)),
            },
        };
        let reason = match outcome.reason {
            Some(r) if r.starts_with(CONDITION_RULE_REASON_PREFIX) => r,
            Some(r) => format!("{}{r}", CONDITION_RULE_REASON_PREFIX),
            None => reasons::CONDITION_RULE_EVALUATED.to_string(),
        };
        let message = match outcome.message {
            Some(m) => m,
            None => self.message(rule, outcome.status == Status::True, default_message),
        };
        Some(ConditionUpdate::new(
            condition,
            outcome.status,
            reason,
            cap_message(message),
        ))
    }

    /// AND of the rule's expressions, stopping at the first that is not True.
    fn evaluate_expressions(&self, rule: &ConditionRule) -> Result<Outcome, ConditionUpdate> {
        let mut last_true = Outcome {
            status: Status::True,
            reason: None,
            message: None,
        };
        for (index, expression) in rule.cel_expressions.iter().enumerate() {
            let outcome = self
                .compile(&expression.expression)
                .and_then(|compiled| self.engine.run(&compiled, self.ctx()?, &self.budget))
                .and_then(interpret)
                .map_err(|err| {
                    let where_ = format!("celExpressions[{index}]");
                    self.note_exhaustion(&err, rule, &where_);
                    error_condition(&where_, err)
                })?;
            if outcome.status != Status::True {
                return Ok(outcome);
            }
            if outcome.reason.is_some() || outcome.message.is_some() {
                last_true = outcome;
            }
        }
        Ok(last_true)
    }

    /// `messageExpression`, else `message`, else `default`. A failing `messageExpression`
    /// gives a message saying so (the status stands, as upstream).
    fn message(&self, rule: &ConditionRule, result: bool, default: String) -> String {
        if let Some(source) = rule
            .message_expression
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            match self.message_expression(source, result) {
                Ok(Some(message)) => return message,
                Ok(None) => {}
                Err(err) => {
                    self.note_exhaustion(&err, rule, "messageExpression");
                    return format!("messageExpression failed: {err}");
                }
            }
        }
        match rule.message.as_deref() {
            Some(m) if !m.is_empty() => m.to_string(),
            _ => default,
        }
    }

    /// Remembers where the manifest's budget ran out, for the rules after it.
    fn note_exhaustion(&self, err: &EvalError, rule: &ConditionRule, where_: &str) {
        if matches!(err, EvalError::BudgetExceeded { .. }) {
            self.budget
                .mark_exhausted(&format!("rule {:?} {where_}", rule.condition_type()));
        }
    }

    fn message_expression(&self, source: &str, result: bool) -> Result<Option<String>, EvalError> {
        let compiled = self.compile(source)?;
        let mut scope = self.ctx()?.new_inner_scope();
        scope.add_variable_as_val("result", Box::new(CelBool::from(result)));
        match self.engine.run(&compiled, &scope, &self.budget)? {
            Value::String(s) if s.is_empty() => Ok(None),
            Value::String(s) => Ok(Some(s.to_string())),
            other => Err(EvalError::WrongType {
                expected: "string".to_string(),
                got: convert::type_name(&other),
            }),
        }
    }
}

impl ConditionUpdate {
    fn with_type(mut self, type_: &str) -> Self {
        self.type_ = type_.to_string();
        self
    }
}

/// The condition for an expression that failed (`where_` says which).
fn error_condition(where_: &str, err: EvalError) -> ConditionUpdate {
    let (status, reason) = match err {
        EvalError::Internal { .. } => (Status::Unknown, reasons::CONDITION_RULE_INTERNAL_ERROR),
        _ => (Status::False, reasons::CONDITION_RULE_EXPRESSION_ERROR),
    };
    ConditionUpdate::new("", status, reason, cap_message(format!("{where_}: {err}")))
}

/// The stale guard: a status written for another generation cannot make a condition True (the
/// verdict becomes Unknown `ConditionRuleStaleStatus`), but a False or Unknown verdict stands,
/// so a failure the controller reports without moving `observedGeneration` (it often keeps the
/// last generation it reconciled while it refuses the new spec) is seen.
pub(crate) fn guard_stale(
    update: ConditionUpdate,
    observed: i64,
    generation: i64,
) -> ConditionUpdate {
    if update.status != Status::True {
        return update;
    }
    ConditionUpdate::new(
        update.type_,
        Status::Unknown,
        reasons::CONDITION_RULE_STALE_STATUS,
        format!(
            "Status is stale (status.observedGeneration {observed}, metadata.generation {generation}): the rule holds only on a status written for another generation"
        ),
    )
}

/// `(observedGeneration, generation)` when both are integers and differ.
pub(crate) fn stale_generation(object: &serde_json::Value) -> Option<(i64, i64)> {
    let observed = object.pointer("/status/observedGeneration")?.as_i64()?;
    let generation = object.pointer("/metadata/generation")?.as_i64()?;
    (observed != generation).then_some((observed, generation))
}

/// A bool result, or a map `{status?, reason?, message?}`.
fn interpret(value: Value) -> Result<Outcome, EvalError> {
    let invalid = |message: String| EvalError::InvalidResult { message };
    match value {
        Value::Bool(b) => Ok(Outcome {
            status: if b { Status::True } else { Status::False },
            reason: None,
            message: None,
        }),
        Value::Map(map) => {
            let mut outcome = Outcome {
                status: Status::True,
                reason: None,
                message: None,
            };
            for (key, value) in map.map.iter() {
                let Key::String(key) = key else {
                    return Err(invalid(format!("result map key {key:?} is not a string")));
                };
                match (key.as_str(), value) {
                    ("status", Value::Bool(b)) => {
                        outcome.status = if *b { Status::True } else { Status::False }
                    }
                    ("status", Value::String(s)) => {
                        outcome.status = Status::parse(s).ok_or_else(|| {
                            invalid(format!("status {s:?} is not one of True, False, Unknown"))
                        })?
                    }
                    ("reason", Value::String(s)) => {
                        let valid = REASON_PATTERN.as_ref().is_some_and(|re| re.is_match(s))
                            && s.len() + CONDITION_RULE_REASON_PREFIX.len() <= MAX_REASON_LEN;
                        if !valid {
                            return Err(invalid(format!(
                                "reason {s:?} does not match ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$ (at most {} bytes)",
                                MAX_REASON_LEN - CONDITION_RULE_REASON_PREFIX.len()
                            )));
                        }
                        outcome.reason = Some(s.to_string());
                    }
                    ("message", Value::String(s)) => outcome.message = Some(s.to_string()),
                    ("status" | "reason" | "message", other) => {
                        return Err(invalid(format!(
                            "{key} has type {}, expected {}",
                            convert::type_name(other),
                            if key.as_str() == "status" {
                                "bool or string"
                            } else {
                                "string"
                            }
                        )));
                    }
                    (other, _) => {
                        return Err(invalid(format!(
                            "unexpected key {other:?} in result map (allowed: status, reason, message)"
                        )));
                    }
                }
            }
            Ok(outcome)
        }
        other => Err(EvalError::WrongType {
            expected: "bool or map {status, reason, message}".to_string(),
            got: convert::type_name(&other),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_errors_are_unknown_and_others_false() {
        let c = error_condition(
            "celExpressions[2]",
            EvalError::Internal {
                message: "boom".into(),
            },
        );
        assert_eq!(
            (c.status, c.reason.as_str()),
            (Status::Unknown, reasons::CONDITION_RULE_INTERNAL_ERROR)
        );
        assert_eq!(c.message, "celExpressions[2]: internal error: boom");
        let c = error_condition(
            "celExpressions[0]",
            EvalError::Timeout {
                message: "ran longer than 1ms".into(),
            },
        );
        assert_eq!(
            (c.status, c.reason.as_str()),
            (Status::False, reasons::CONDITION_RULE_EXPRESSION_ERROR)
        );
    }

    #[test]
    fn stale_generation_needs_two_differing_integers() {
        let object = |observed: serde_json::Value, generation: serde_json::Value| serde_json::json!({"metadata": {"generation": generation}, "status": {"observedGeneration": observed}});
        assert_eq!(stale_generation(&object(1.into(), 2.into())), Some((1, 2)));
        assert_eq!(stale_generation(&object(2.into(), 2.into())), None);
        assert_eq!(stale_generation(&object("1".into(), 2.into())), None);
        assert_eq!(stale_generation(&object(1.5.into(), 2.into())), None);
        assert_eq!(stale_generation(&serde_json::json!({})), None);
    }
}
