//! Why a rule gives the condition it gives: each step of its evaluation, for `eval --explain`.
//!
//! The explanation is built from the same evaluator the agent uses. Each expression is judged
//! alone (as a one-expression rule through the evaluator the agent uses, without the stale
//! guard, so its result is
//! interpreted exactly as the agent interprets it); the explanation then combines the steps
//! (AND with short-circuit, the last True result that carried a reason or message, message
//! precedence) into its own resulting condition. Tests check that condition against
//! [`Evaluator::evaluate_manifest`] on the whole rule.

use cel::Value;
use cel::common::types::CelBool;
use work_api::{CelExpression, ConditionRule, ConditionRuleType, condition_types};

use crate::cel::convert;
use crate::condition::{ConditionUpdate, Status, cap_message, reasons};
use crate::error::EvalError;
use crate::evaluator::{Bindings, Evaluator};
use crate::{rules, well_known};

/// Condition type given to the one-expression rules that judge a single step; its default
/// messages cannot be confused with a message a result map returns.
const STEP_CONDITION: &str = "\u{1}explain-step";

/// One expression of a rule and what it gave.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpressionStep {
    /// Position in `celExpressions`.
    pub index: usize,
    /// The source.
    pub expression: String,
    /// The value it evaluated to, as JSON (None when it failed).
    pub value: Option<serde_json::Value>,
    /// Why it failed to compile, run or give a usable result.
    pub error: Option<String>,
    /// The status this step stands for.
    pub status: Status,
    /// The reason a result map returned (as written, with the `ConditionRule` prefix).
    pub reason: Option<String>,
    /// The message a result map returned.
    pub message: Option<String>,
}

/// Where the condition's message came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageSource {
    /// A result map's `message` (of the expression at this index).
    ResultMap(usize),
    /// The rule's `messageExpression`.
    MessageExpression,
    /// The rule's `messageExpression` failed; the message says why.
    MessageExpressionFailed,
    /// The rule's `message`.
    Message,
    /// The default for CEL rules ("Manifest is <C>" / "Manifest is not <C>").
    Default,
    /// The well-known rule's own message.
    WellKnown,
    /// The message of an expression error.
    ExpressionError,
    /// The stale-status guard's message (it withheld a True verdict).
    StaleStatus,
    /// The rule is invalid; the message says why.
    InvalidRule,
}

impl MessageSource {
    /// A short name for tools (`result-map`, `messageExpression`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::ResultMap(_) => "resultMap",
            Self::MessageExpression => "messageExpression",
            Self::MessageExpressionFailed => "messageExpressionFailed",
            Self::Message => "message",
            Self::Default => "default",
            Self::WellKnown => "wellKnown",
            Self::ExpressionError => "expressionError",
            Self::StaleStatus => "staleStatus",
            Self::InvalidRule => "invalidRule",
        }
    }
}

/// A stale status: the generations, and whether the guard withheld a True verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stale {
    /// `status.observedGeneration`.
    pub observed_generation: i64,
    /// `metadata.generation`.
    pub generation: i64,
    /// The rule gave True and the guard made it Unknown `ConditionRuleStaleStatus`; a False or
    /// Unknown verdict stands.
    pub withheld: bool,
}

/// What a well-known rule decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WellKnownStep {
    /// Whether the condition holds.
    pub passed: bool,
    /// The rule's own message.
    pub message: String,
}

/// How one rule went on one object.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleExplanation {
    /// The condition type the rule sets.
    pub condition: String,
    /// `CEL`, `WellKnownConditions` or what the rule said.
    pub rule_type: String,
    /// Set when the object's status is stale (the rule is still evaluated).
    pub stale: Option<Stale>,
    /// For a well-known rule of a known kind: its verdict.
    pub well_known: Option<WellKnownStep>,
    /// The expressions evaluated, in order (those after `stopped_at` are not run).
    pub steps: Vec<ExpressionStep>,
    /// Index of the expression where the AND stopped (its status was not True).
    pub stopped_at: Option<usize>,
    /// Expressions left unevaluated after the stop.
    pub not_evaluated: usize,
    /// Where the message came from (None when the rule yields no condition).
    pub message_source: Option<MessageSource>,
    /// Why the rule yields no condition, when it does not.
    pub no_condition: Option<String>,
    /// The resulting condition (None when the rule yields none).
    pub result: Option<ConditionUpdate>,
}

impl RuleExplanation {
    fn new(rule: &ConditionRule) -> Self {
        Self {
            condition: rule.condition_type().to_string(),
            rule_type: rule.type_.as_str().to_string(),
            stale: None,
            well_known: None,
            steps: Vec::new(),
            stopped_at: None,
            not_evaluated: 0,
            message_source: None,
            no_condition: None,
            result: None,
        }
    }

    fn finish(
        mut self,
        source: MessageSource,
        status: Status,
        reason: &str,
        message: String,
    ) -> Self {
        self.result = Some(ConditionUpdate::new(
            self.condition.clone(),
            status,
            reason,
            cap_message(message),
        ));
        self.message_source = Some(source);
        self
    }
}

impl RuleExplanation {
    fn invalid(self, message: String) -> Self {
        self.finish(
            MessageSource::InvalidRule,
            Status::Unknown,
            reasons::CONDITION_RULE_INVALID,
            message,
        )
    }
}

impl Evaluator {
    /// Each rule's evaluation on `object`, step by step; the resulting conditions equal those
    /// of [`Evaluator::evaluate_manifest`].
    pub fn explain_manifest(
        &self,
        rules: &[ConditionRule],
        object: &serde_json::Value,
    ) -> Vec<RuleExplanation> {
        rules
            .iter()
            .map(|rule| self.explain_rule(rule, object))
            .collect()
    }

    /// One rule's evaluation on `object`, step by step, and the stale guard over its verdict.
    pub fn explain_rule(
        &self,
        rule: &ConditionRule,
        object: &serde_json::Value,
    ) -> RuleExplanation {
        let mut out = self.explain_unguarded(rule, object);
        let Some((observed, generation)) = rules::stale_generation(object) else {
            return out;
        };
        let Some(verdict) = out.result.take() else {
            return out;
        };
        let withheld = verdict.status == Status::True;
        if withheld {
            out.message_source = Some(MessageSource::StaleStatus);
        }
        out.stale = Some(Stale {
            observed_generation: observed,
            generation,
            withheld,
        });
        out.result = Some(rules::guard_stale(verdict, observed, generation));
        out
    }

    /// One rule's evaluation on `object` as if its status were current.
    fn explain_unguarded(
        &self,
        rule: &ConditionRule,
        object: &serde_json::Value,
    ) -> RuleExplanation {
        let mut out = RuleExplanation::new(rule);
        let condition = out.condition.clone();
        if condition.is_empty() {
            out.no_condition = Some("the rule names no condition".to_string());
            return out;
        }
        if condition_types::AGENT_OWNED.contains(&condition.as_str()) {
            return out.invalid(format!(
                "Condition {condition} is owned by the work agent and cannot be set by a condition rule"
            ));
        }
        let well_known = match &rule.type_ {
            ConditionRuleType::Unknown(t) => {
                return out.invalid(format!(
                    "Unknown condition rule type {t:?}: expected WellKnownConditions or CEL"
                ));
            }
            ConditionRuleType::WellKnownConditions => {
                match well_known::evaluate(&condition, object) {
                    Some(wk) => Some(wk),
                    None => {
                        out.no_condition = Some(format!(
                            "no well-known {condition} rule for this kind: the rule yields no condition"
                        ));
                        return out;
                    }
                }
            }
            ConditionRuleType::Cel => None,
        };
        if let Some(wk) = well_known {
            out.well_known = Some(WellKnownStep {
                passed: wk.passed,
                message: wk.message.clone(),
            });
            let status = if wk.passed {
                Status::True
            } else {
                Status::False
            };
            let (source, message) = self.message(rule, object, wk.passed, wk.message);
            let source = if source == MessageSource::Default {
                MessageSource::WellKnown
            } else {
                source
            };
            return out.finish(source, status, reasons::CONDITION_RULE_EVALUATED, message);
        }
        self.explain_expressions(out, rule, object)
    }

    /// The AND of the expressions, stopping at the first whose status is not True.
    fn explain_expressions(
        &self,
        mut out: RuleExplanation,
        rule: &ConditionRule,
        object: &serde_json::Value,
    ) -> RuleExplanation {
        // The outcome of the last True step that carried a reason or message.
        let mut carried: Option<usize> = None;
        for (index, expression) in rule.cel_expressions.iter().enumerate() {
            let (step, error) = self.step(index, &expression.expression, object);
            out.steps.push(step.clone());
            if let Some(error) = error {
                out.stopped_at = Some(index);
                out.not_evaluated = rule.cel_expressions.len() - index - 1;
                return out.finish(
                    MessageSource::ExpressionError,
                    error.status,
                    &error.reason,
                    error.message,
                );
            }
            if step.status != Status::True {
                out.stopped_at = Some(index);
                out.not_evaluated = rule.cel_expressions.len() - index - 1;
                carried = Some(index);
                break;
            }
            if step.reason.is_some() || step.message.is_some() {
                carried = Some(index);
            }
        }
        let decisive = carried.and_then(|i| out.steps.get(i)).cloned();
        let status = decisive.as_ref().map_or(Status::True, |s| s.status);
        let reason = decisive
            .as_ref()
            .and_then(|s| s.reason.clone())
            .unwrap_or_else(|| reasons::CONDITION_RULE_EVALUATED.to_string());
        let (source, message) = match decisive
            .as_ref()
            .and_then(|s| s.message.clone().map(|m| (s.index, m)))
        {
            Some((index, message)) => (MessageSource::ResultMap(index), message),
            None => {
                let condition = &out.condition;
                let default = if status == Status::True {
                    format!("Manifest is {condition}")
                } else {
                    format!("Manifest is not {condition}")
                };
                self.message(rule, object, status == Status::True, default)
            }
        };
        out.finish(source, status, &reason, message)
    }

    /// One expression judged alone; the second value is its error condition when it failed.
    fn step(
        &self,
        index: usize,
        expression: &str,
        object: &serde_json::Value,
    ) -> (ExpressionStep, Option<ConditionUpdate>) {
        let value = self.eval_expression(expression, &Bindings::Object(object));
        let alone = ConditionRule {
            condition: STEP_CONDITION.to_string(),
            type_: ConditionRuleType::Cel,
            cel_expressions: vec![CelExpression::new(expression)],
            message: None,
            message_expression: None,
        };
        // The guard judges the whole rule, not its steps.
        let judged = self
            .evaluate_unguarded(std::slice::from_ref(&alone), object)
            .pop();
        let mut step = ExpressionStep {
            index,
            expression: expression.to_string(),
            value: value.as_ref().ok().cloned(),
            error: value.as_ref().err().map(ToString::to_string),
            status: Status::Unknown,
            reason: None,
            message: None,
        };
        let Some(judged) = judged else {
            step.error = Some("the evaluator gave no condition".to_string());
            return (step, None);
        };
        step.status = judged.status;
        let error_prefix = "celExpressions[0]: ";
        let failed = matches!(
            judged.reason.as_str(),
            reasons::CONDITION_RULE_EXPRESSION_ERROR | reasons::CONDITION_RULE_INTERNAL_ERROR
        ) && judged.message.starts_with(error_prefix);
        if failed {
            let what = judged.message[error_prefix.len()..].to_string();
            step.error = Some(what.clone());
            let error = ConditionUpdate::new(
                "",
                judged.status,
                judged.reason,
                format!("celExpressions[{index}]: {what}"),
            );
            return (step, Some(error));
        }
        if judged.reason != reasons::CONDITION_RULE_EVALUATED {
            step.reason = Some(judged.reason);
        }
        let is_default = judged.message == format!("Manifest is {STEP_CONDITION}")
            || judged.message == format!("Manifest is not {STEP_CONDITION}");
        if !is_default {
            step.message = Some(judged.message);
        }
        (step, None)
    }

    /// `messageExpression`, else `message`, else `default`, and which one it was.
    fn message(
        &self,
        rule: &ConditionRule,
        object: &serde_json::Value,
        result: bool,
        default: String,
    ) -> (MessageSource, String) {
        if let Some(source) = rule
            .message_expression
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            match self.message_expression(source, object, result) {
                Ok(Some(message)) => return (MessageSource::MessageExpression, message),
                Ok(None) => {}
                Err(err) => {
                    return (
                        MessageSource::MessageExpressionFailed,
                        format!("messageExpression failed: {err}"),
                    );
                }
            }
        }
        match rule.message.as_deref() {
            Some(m) if !m.is_empty() => (MessageSource::Message, m.to_string()),
            _ => (MessageSource::Default, default),
        }
    }

    fn message_expression(
        &self,
        source: &str,
        object: &serde_json::Value,
        result: bool,
    ) -> Result<Option<String>, EvalError> {
        let compiled = self.engine.compile(source)?;
        crate::limits::with_stack(self.limits(), || {
            let mut ctx = self.engine.context()?;
            ctx.add_variable_as_val("object", convert::json_to_val(object));
            ctx.add_variable_as_val("result", Box::new(CelBool::from(result)));
            let budget = crate::cel::budget::ManifestBudget::new(self.limits());
            match self.engine.run(&compiled, &ctx, &budget)? {
                Value::String(s) if s.is_empty() => Ok(None),
                Value::String(s) => Ok(Some(s.to_string())),
                other => Err(EvalError::WrongType {
                    expected: "string".to_string(),
                    got: convert::type_name(&other),
                }),
            }
        })
    }
}
