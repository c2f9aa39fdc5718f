//! The evaluator: compiles (cached, bounded) and runs expressions, and evaluates rules.

use std::sync::{Arc, OnceLock};

use cel::{Context, Env, IdedExpr, Value};
use work_api::ConditionRule;

use crate::budget::{self, Budget};
use crate::cache::{Cache, Compiled};
use crate::limits::{self, Limits, PARSE_STACK_BYTES};
use crate::{ConditionUpdate, EvalError, cel_env, convert, rules};

/// Variables bound for [`Evaluator::eval_expression`].
#[derive(Clone, Copy, Debug)]
pub enum Bindings<'a> {
    /// Binds the value as `object`.
    Object(&'a serde_json::Value),
    /// Binds each top-level field of a JSON object as a variable of its name.
    TopLevel(&'a serde_json::Value),
}

/// Compiles (with a bounded, thread-safe cache) and evaluates rules. `Send + Sync`: share one.
pub struct Evaluator {
    env: Option<Arc<Env>>,
    env_error: Option<String>,
    cache: Cache,
    limits: Limits,
}

impl std::fmt::Debug for Evaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evaluator")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Default for Evaluator {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl Evaluator {
    /// An evaluator with its own cache and these limits.
    pub fn new(limits: Limits) -> Self {
        // Building the environment only fails if two of our own declarations clash (a bug);
        // it is reported on every evaluation as an internal error rather than a panic.
        let (env, env_error) = match cel_env::build() {
            Ok(env) => (Some(env), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Self {
            env,
            env_error,
            cache: Cache::new(limits.cache_capacity),
            limits,
        }
    }

    /// The process-wide evaluator with default limits.
    pub fn shared() -> &'static Evaluator {
        static SHARED: OnceLock<Evaluator> = OnceLock::new();
        SHARED.get_or_init(Evaluator::default)
    }

    /// The limits this evaluator enforces.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// How many times this evaluator has compiled an expression (cache misses).
    pub fn compile_count(&self) -> u64 {
        self.cache.compile_count()
    }

    /// How many distinct expressions are cached.
    pub fn cached_expressions(&self) -> usize {
        self.cache.len()
    }

    /// The conditions one manifest's rules produce for its live object (one per rule that
    /// yields a condition, in rule order). Well-known rules for kinds they don't know yield
    /// nothing. Includes the stale-status guard.
    pub fn evaluate_manifest(
        &self,
        rules: &[ConditionRule],
        object: &serde_json::Value,
    ) -> Vec<ConditionUpdate> {
        let scope = rules::ObjectScope::new(self, object);
        rules
            .iter()
            .filter_map(|rule| scope.evaluate_rule(rule))
            .collect()
    }

    /// Some(true) when the manifest has rules for `Complete` and its `Complete` condition would
    /// be True on this object; Some(false) when it has such rules and they do not pass; None
    /// when it has none.
    pub fn is_complete(&self, rules: &[ConditionRule], object: &serde_json::Value) -> Option<bool> {
        let complete: Vec<&ConditionRule> = rules
            .iter()
            .filter(|r| r.condition_type() == work_api::condition_types::COMPLETE)
            .collect();
        if complete.is_empty() {
            return None;
        }
        limits::with_stack(&self.limits, || {
            let scope = rules::ObjectScope::new(self, object);
            Some(complete.iter().all(|rule| {
                scope
                    .evaluate_rule(rule)
                    .is_some_and(|c| c.status == crate::Status::True)
            }))
        })
    }

    /// One expression, for the CLI: the result converted to JSON, or an error saying what
    /// failed and where.
    pub fn eval_expression(
        &self,
        expression: &str,
        bindings: &Bindings,
    ) -> Result<serde_json::Value, EvalError> {
        let compiled = self.compile(expression)?;
        let mut ctx = self.context()?;
        match bindings {
            Bindings::Object(object) => {
                ctx.add_variable_as_val("object", convert::json_to_val(object))
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
        let value = limits::with_stack(&self.limits, || self.run(&compiled, &ctx))?;
        convert::value_to_json(&value)
    }

    /// Compile-check only (for `work-agent lint`).
    pub fn check_expression(&self, expression: &str) -> Result<(), EvalError> {
        self.compile(expression).map(|_| ())
    }

    /// The compiled `source`, from the cache.
    pub(crate) fn compile(&self, source: &str) -> Compiled {
        let env = self.env()?;
        // Checked before the cache so that oversized sources are never stored as keys.
        limits::check_source(source, &self.limits)?;
        self.cache
            .get_or_compile(source, |source| compile_uncached(env, source, &self.limits))
    }

    /// A root context over this evaluator's environment.
    pub(crate) fn context<'v>(&self) -> Result<Context<'v, 'v>, EvalError> {
        Ok(cel_env::context(self.env()?))
    }

    /// Runs a compiled expression within the evaluation budget.
    pub(crate) fn run(&self, expr: &IdedExpr, ctx: &Context<'_, '_>) -> Result<Value, EvalError> {
        let budget = Budget::start(&self.limits);
        // cel is third-party code run on user input: a panic in it must not take the agent down.
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Value::resolve(expr, ctx)))
                .map_err(|_| EvalError::Internal {
                    message: "the CEL interpreter panicked".to_string(),
                })?;
        // A stopped evaluation's result is meaningless, whatever it is.
        budget.finish()?;
        result.map_err(|e| EvalError::Runtime {
            message: e.to_string(),
        })
    }

    fn env(&self) -> Result<&Arc<Env>, EvalError> {
        self.env.as_ref().ok_or_else(|| EvalError::Internal {
            message: format!(
                "CEL environment unavailable: {}",
                self.env_error.as_deref().unwrap_or("unknown error")
            ),
        })
    }
}

/// Parses `source` (on a thread with a large stack: the parser recurses), checks its depth and
/// meters its comprehensions.
fn compile_uncached(env: &Env, source: &str, limits: &Limits) -> Compiled {
    let parser = env.parser();
    let parsed = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("cel-parse".to_string())
            .stack_size(PARSE_STACK_BYTES)
            .spawn_scoped(scope, || {
                let mut expr = parser.parse(source).map_err(|e| EvalError::Compile {
                    message: e.to_string(),
                })?;
                let depth = limits::ast_depth(&expr);
                if depth > limits.max_nesting_depth {
                    // Dropping a deep tree recurses too: it happens here, on the big stack.
                    return Err(EvalError::TooDeep {
                        depth,
                        limit: limits.max_nesting_depth,
                    });
                }
                budget::meter_comprehensions(&mut expr);
                Ok(expr)
            })
            .map_err(|e| EvalError::Internal {
                message: format!("cannot start the parser thread: {e}"),
            })?
            .join()
            .map_err(|_| EvalError::Internal {
                message: "the CEL parser panicked".to_string(),
            })?
    })?;
    Ok(Arc::new(parsed))
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
