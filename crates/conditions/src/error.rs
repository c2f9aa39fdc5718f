//! What went wrong evaluating one expression.

/// What went wrong evaluating one expression.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// The source does not parse.
    #[error("compile error: {message}")]
    Compile {
        /// The parser's message.
        message: String,
    },
    /// The source is longer than [`crate::Limits::max_expression_len`].
    #[error("expression is {len} bytes long, over the limit of {limit}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The source nests deeper than [`crate::Limits::max_nesting_depth`].
    #[error("expression is nested at least {depth} levels deep, over the limit of {limit}")]
    TooDeep {
        /// The depth found (a lower bound when found before parsing).
        depth: usize,
        /// The limit.
        limit: usize,
    },
    /// Evaluation failed (no such key, no matching overload, ...).
    #[error("evaluation error: {message}")]
    Runtime {
        /// CEL's message.
        message: String,
    },
    /// Evaluation ran over its iteration limit or its deadline and was stopped.
    #[error("evaluation stopped: {message}")]
    Timeout {
        /// Which bound was hit.
        message: String,
    },
    /// The manifest's cost budget ([`crate::Limits::manifest_cost_budget`]), shared by all of
    /// its rules, ran out.
    #[error("the manifest's CEL cost budget of {limit} units is exhausted")]
    BudgetExceeded {
        /// The budget.
        limit: u64,
    },
    /// The result has a type the caller cannot use.
    #[error("expected {expected}, got {got}")]
    WrongType {
        /// What was expected.
        expected: String,
        /// What came.
        got: String,
    },
    /// The result has the right type but an unusable value (e.g. a bad reason).
    #[error("invalid result: {message}")]
    InvalidResult {
        /// What is wrong with it.
        message: String,
    },
    /// The evaluator itself failed (not the expression's fault).
    #[error("internal error: {message}")]
    Internal {
        /// What failed.
        message: String,
    },
}

impl EvalError {
    /// Whether the expression was rejected before running (compile, too long, too deep):
    /// the CLI exits 2 for these, 1 for the others.
    pub fn is_compile_error(&self) -> bool {
        matches!(
            self,
            EvalError::Compile { .. } | EvalError::TooLong { .. } | EvalError::TooDeep { .. }
        )
    }
}
