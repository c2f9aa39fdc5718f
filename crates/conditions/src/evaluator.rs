//! The evaluator: the public entry points, over the engine, the object cache and the rules.

use std::sync::{Arc, OnceLock};

use cel::common::types::CelNull;
use work_api::{ConditionRule, ConditionRuleType};

use crate::cel::budget::ManifestBudget;
use crate::cel::cache::Compiled;
use crate::cel::convert::TypedValue;
use crate::cel::engine::Engine;
use crate::cel::object_reads::Reads;
use crate::cel::prepared::{ObjectCache, ObjectVariable, PreparedObject};
use crate::cel::{convert, projection};
use crate::condition::{ConditionUpdate, Status};
use crate::error::EvalError;
use crate::limits::{self, Limits};
use crate::rules::ObjectScope;

/// Variables bound for [`Evaluator::eval_expression`].
#[derive(Clone, Copy, Debug)]
pub enum Bindings<'a> {
    /// Binds the value as `object`.
    Object(&'a serde_json::Value),
    /// Binds each top-level field of a JSON object as a variable of its name.
    TopLevel(&'a serde_json::Value),
}

/// Compiles (with a bounded, thread-safe cache) and evaluates rules. `Send + Sync`: share one.
///
/// Every entry point evaluates synchronously on the caller's thread (the agent calls it from a
/// blocking pool), on a grown stack when the thread has too little left, and within a cost
/// budget per manifest ([`Limits::manifest_cost_budget`]) shared by all of its rules.
pub struct Evaluator {
    pub(crate) engine: Engine,
    objects: ObjectCache,
}

impl std::fmt::Debug for Evaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evaluator")
            .field("limits", self.engine.limits())
            .finish_non_exhaustive()
    }
}

impl Default for Evaluator {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl Evaluator {
    /// An evaluator with its own caches and these limits.
    pub fn new(limits: Limits) -> Self {
        Self {
            objects: ObjectCache::new(limits.object_cache_capacity, limits.object_cache_bytes),
            engine: Engine::new(limits),
        }
    }

    /// The process-wide evaluator with default limits.
    pub fn shared() -> &'static Evaluator {
        static SHARED: OnceLock<Evaluator> = OnceLock::new();
        SHARED.get_or_init(Evaluator::default)
    }

    /// The limits this evaluator enforces.
    pub fn limits(&self) -> &Limits {
        self.engine.limits()
    }

    /// How many times this evaluator has compiled an expression (cache misses).
    pub fn compile_count(&self) -> u64 {
        self.engine.cache().compile_count()
    }

    /// How many distinct expressions are cached.
    pub fn cached_expressions(&self) -> usize {
        self.engine.cache().len()
    }

    /// How many live objects this evaluator has converted to CEL (the parts their rules read;
    /// once per uid and resourceVersion while cached, every time for objects without them).
    pub fn object_conversions(&self) -> u64 {
        self.objects.conversions()
    }

    /// A copy of `object` to hold for evaluations; each evaluation converts only what its rules
    /// read, from the cache keyed by `metadata.uid` and `metadata.resourceVersion` (as
    /// [`Evaluator::evaluate_manifest`] does).
    pub fn prepare(&self, object: &serde_json::Value) -> Arc<PreparedObject> {
        Arc::new(PreparedObject::new(object.clone()))
    }

    /// The conditions one manifest's rules produce for its live object (one per rule that
    /// yields a condition, in rule order). Well-known rules for kinds they don't know yield
    /// nothing. Includes the stale-status guard. Only the parts of the object that the rules'
    /// expressions read are converted to CEL, once per resourceVersion while cached, and only
    /// when a rule evaluates CEL.
    pub fn evaluate_manifest(
        &self,
        rules: &[ConditionRule],
        object: &serde_json::Value,
    ) -> Vec<ConditionUpdate> {
        limits::with_stack(self.limits(), || {
            self.evaluate_on_json(rules.iter(), object, true)
        })
    }

    /// [`Evaluator::evaluate_manifest`] on an object already converted.
    pub fn evaluate_prepared(
        &self,
        rules: &[ConditionRule],
        object: &PreparedObject,
    ) -> Vec<ConditionUpdate> {
        limits::with_stack(self.limits(), || {
            self.evaluate_on_json(rules.iter(), object.json(), true)
        })
    }

    /// Some(true) when the manifest has rules for `Complete` and its `Complete` condition would
    /// be True on this object; Some(false) when it has such rules and they do not pass; None
    /// when it has none.
    pub fn is_complete(&self, rules: &[ConditionRule], object: &serde_json::Value) -> Option<bool> {
        let complete = complete_rules(rules);
        if complete.is_empty() {
            return None;
        }
        limits::with_stack(self.limits(), || {
            let updates = self.evaluate_on_json(complete.iter().copied(), object, true);
            Some(all_true(&updates, complete.len()))
        })
    }

    /// [`Evaluator::is_complete`] on an object already converted.
    pub fn is_complete_prepared(
        &self,
        rules: &[ConditionRule],
        object: &PreparedObject,
    ) -> Option<bool> {
        let complete = complete_rules(rules);
        if complete.is_empty() {
            return None;
        }
        limits::with_stack(self.limits(), || {
            let updates = self.evaluate_on_json(complete.iter().copied(), object.json(), true);
            Some(all_true(&updates, complete.len()))
        })
    }

    /// [`Evaluator::evaluate_manifest`] without the stale guard: each rule judged as if the
    /// status were current (the steps of `eval --explain`, whose rule the guard covers).
    pub(crate) fn evaluate_unguarded(
        &self,
        rules: &[ConditionRule],
        object: &serde_json::Value,
    ) -> Vec<ConditionUpdate> {
        limits::with_stack(self.limits(), || {
            self.evaluate_on_json(rules.iter(), object, false)
        })
    }

    /// One expression, for the CLI: the result converted to JSON, or an error saying what
    /// failed and where. It runs within one manifest's budget.
    pub fn eval_expression(
        &self,
        expression: &str,
        bindings: &Bindings,
    ) -> Result<serde_json::Value, EvalError> {
        self.eval_with(expression, bindings, convert::value_to_json)
    }

    /// [`Evaluator::eval_expression`] with the result's type, string form and canonical
    /// rendering: a result without a JSON form (an IP, a CIDR, a semver, ...) is a value here,
    /// not an error.
    pub fn eval_expression_typed(
        &self,
        expression: &str,
        bindings: &Bindings,
    ) -> Result<TypedValue, EvalError> {
        self.eval_with(expression, bindings, |value| Ok(TypedValue::of(value)))
    }

    /// Evaluates `expression` on `bindings` and hands the CEL result to `finish`.
    fn eval_with<R>(
        &self,
        expression: &str,
        bindings: &Bindings,
        finish: impl FnOnce(&cel::Value) -> Result<R, EvalError>,
    ) -> Result<R, EvalError> {
        let compiled = self.engine.compile(expression)?;
        limits::with_stack(self.limits(), || {
            let object;
            let variable;
            let mut ctx = self.engine.context()?;
            match bindings {
                Bindings::Object(json) => {
                    object = convert::json_to_val(json);
                    variable = ObjectVariable(object.as_ref());
                    ctx.set_variable_resolver(&variable);
                }
                Bindings::TopLevel(serde_json::Value::Object(fields)) => {
                    for (name, value) in fields {
                        ctx.add_variable_as_val(name.as_str(), convert::json_to_val(value));
                    }
                }
                Bindings::TopLevel(other) => {
                    return Err(EvalError::WrongType {
                        expected: "a JSON object of variables".to_string(),
                        got: json_type(other).to_string(),
                    });
                }
            }
            let budget = ManifestBudget::new(self.limits());
            let value = self.engine.run(&compiled, &ctx, &budget)?;
            finish(&value)
        })
    }

    /// Compile-check only (for `work-agent lint`).
    pub fn check_expression(&self, expression: &str) -> Result<(), EvalError> {
        self.engine.compile(expression).map(|_| ())
    }

    /// The conditions `rules` yield on `object`, of which only what their expressions read is
    /// converted, and only if a rule evaluates CEL: from the object cache when it can be keyed,
    /// else borrowing the JSON.
    fn evaluate_on_json<'r>(
        &self,
        rules: impl Iterator<Item = &'r ConditionRule> + Clone,
        object: &serde_json::Value,
        stale_guard: bool,
    ) -> Vec<ConditionUpdate> {
        if !needs_cel(rules.clone()) {
            return self.evaluate_rules(rules, object, &NO_OBJECT, &[], stale_guard);
        }
        // Compiled first for their reads, and handed to the rules; expressions that do not
        // compile read nothing: they never run.
        let compiled: Vec<(&str, Compiled)> = cel_sources(rules.clone())
            .map(|source| (source, self.engine.compile(source)))
            .collect();
        let reads = Reads::union(
            compiled
                .iter()
                .filter_map(|(_, c)| c.as_ref().ok().map(|p| &p.reads)),
        );
        if let Some(projected) = self.objects.cached(object, &reads) {
            return self.evaluate_rules(
                rules,
                object,
                &projected.variable(),
                &compiled,
                stale_guard,
            );
        }
        self.objects.count_conversion();
        let converted = projection::project(object, &reads);
        self.evaluate_rules(
            rules,
            object,
            &ObjectVariable(converted.as_ref()),
            &compiled,
            stale_guard,
        )
    }

    /// The conditions `rules` yield on one object, sharing one budget.
    fn evaluate_rules<'r>(
        &self,
        rules: impl Iterator<Item = &'r ConditionRule>,
        json: &serde_json::Value,
        variable: &ObjectVariable<'_>,
        compiled: &[(&str, Compiled)],
        stale_guard: bool,
    ) -> Vec<ConditionUpdate> {
        let scope = ObjectScope::new(&self.engine, json, variable, compiled, stale_guard);
        rules.filter_map(|rule| scope.evaluate_rule(rule)).collect()
    }
}

/// Stands for the object when no rule is a CEL rule (nothing reads it).
static NO_OBJECT: ObjectVariable<'static> = ObjectVariable(&CelNull);

/// Whether any rule evaluates CEL: a CEL rule, or any rule with a `messageExpression`.
fn needs_cel<'r>(mut rules: impl Iterator<Item = &'r ConditionRule>) -> bool {
    rules.any(|r| {
        matches!(r.type_, ConditionRuleType::Cel)
            || r.message_expression
                .as_deref()
                .is_some_and(|m| !m.trim().is_empty())
    })
}

/// Every CEL source the rules run on the object: CEL rules' expressions and message expressions.
fn cel_sources<'r>(
    rules: impl Iterator<Item = &'r ConditionRule>,
) -> impl Iterator<Item = &'r str> {
    rules.flat_map(|r| {
        let expressions = matches!(r.type_, ConditionRuleType::Cel)
            .then_some(r.cel_expressions.iter().map(|e| e.expression.as_str()))
            .into_iter()
            .flatten();
        expressions.chain(
            r.message_expression
                .as_deref()
                .filter(|m| !m.trim().is_empty()),
        )
    })
}

fn complete_rules(rules: &[ConditionRule]) -> Vec<&ConditionRule> {
    work_semantics::manifests::complete_rules(rules).collect()
}

/// Whether each of `expected` rules yielded a True condition.
fn all_true(updates: &[ConditionUpdate], expected: usize) -> bool {
    updates.len() == expected && updates.iter().all(|c| c.status == Status::True)
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}
