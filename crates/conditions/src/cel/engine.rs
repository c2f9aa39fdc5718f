//! The CEL engine: the environment, the bounded compile cache, and metered runs.

use std::sync::Arc;

use cel::{Context, Env, Value};

use crate::cel::budget::ManifestBudget;
use crate::cel::cache::{Cache, Compiled};
use crate::cel::cost::Program;
use crate::cel::{cel_env, compat};
use crate::error::EvalError;
use crate::limits::{self, Limits, PARSE_STACK_BYTES};

/// Compiles (with a bounded, thread-safe cache) and runs expressions under a budget.
pub(crate) struct Engine {
    env: Option<Arc<Env>>,
    env_error: Option<String>,
    cache: Cache,
    limits: Limits,
}

impl Engine {
    /// An engine with its own cache and these limits.
    pub(crate) fn new(limits: Limits) -> Self {
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

    /// The limits this engine enforces.
    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The compile cache.
    pub(crate) fn cache(&self) -> &Cache {
        &self.cache
    }

    /// The compiled `source`, from the cache.
    pub(crate) fn compile(&self, source: &str) -> Compiled {
        let env = self.env()?;
        // Oversized sources are rejected before the cache, so they are never hashed or stored
        // as keys; the rest of the checks scan the source and run on a miss only (a source that
        // fails them is cached as the error, like any compile error).
        limits::check_length(source, &self.limits)?;
        self.cache.get_or_compile(source, |source| {
            limits::check_source(source, &self.limits)?;
            compile_uncached(env, source, &self.limits)
        })
    }

    /// A root context over this engine's environment.
    pub(crate) fn context<'v>(&self) -> Result<Context<'v, 'v>, EvalError> {
        Ok(cel_env::context(self.env()?))
    }

    /// Runs a compiled expression, charging `budget`.
    pub(crate) fn run(
        &self,
        program: &Program,
        ctx: &Context<'_, '_>,
        budget: &ManifestBudget,
    ) -> Result<Value, EvalError> {
        let result = budget.meter(&self.limits, program.static_cost, || {
            limits::with_stack_for_depth(program.depth, || {
                // cel is third-party code run on user input: a panic in it must not take the
                // agent down.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    // Type values are kept (cel's own conversion makes them strings).
                    Value::resolve_val(&program.expr, ctx)
                        .and_then(|v| crate::cel::k8s_functions::value_keeping_types(v.as_ref()))
                }))
            })
        })?;
        // (A stopped evaluation's result is meaningless, whatever it is: `meter` drops it.)
        result
            .map_err(|_| EvalError::Internal {
                message: "the CEL interpreter panicked".to_string(),
            })?
            .map_err(|e| EvalError::Runtime {
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
/// instruments it for metering.
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
                compat::check_and_rewrite(&mut expr)?;
                Ok(Program::instrument(expr))
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
