//! Pure evaluation of ManifestWork condition rules (CEL and well-known) and condition aggregation.
//!
//! Plain data in, conditions out: nothing here does I/O. The agent and the CLI call
//! [`Evaluator`] for per-manifest rule conditions ([`not_evaluated_conditions`] when there is no
//! object to evaluate them on), the builders ([`applied_condition`], [`available_condition`],
//! [`feedback_condition`], [`no_feedback_condition`]) for the agent's own manifest conditions,
//! [`aggregate_work_conditions`] for the work level and [`merge_conditions`] /
//! [`merge_work_conditions`] to write them.
//!
//! Behaviour (the contract is `docs/semantics.md` §3-§4):
//! - CEL expressions of a rule are AND-ed and stop at the first result that is not True;
//!   an empty list is True. A result is a bool, or a map `{status?, reason?, message?}` where
//!   `status` is a bool or "True"/"False"/"Unknown" (absent means True). A map's `reason` must match
//!   the Kubernetes reason pattern; it is written as `ConditionRule<reason>` (unless it already
//!   starts with `ConditionRule`) so that every rule-made reason starts with `ConditionRule`,
//!   which is how rule-made conditions are recognised (upstream OCM does the same).
//! - Message precedence: a map result's `message`, else `messageExpression` (variables `object`
//!   and `result`), else the rule's `message`, else the default `"Manifest is <C>"` / `"Manifest is
//!   not <C>"` (for well-known rules, their own message). A failing `messageExpression` does not
//!   change the status (as upstream): the message then says what failed. Messages are capped at
//!   32768 bytes.
//! - Stale status (`status.observedGeneration` != `metadata.generation`, both integers): every
//!   rule is evaluated, and a True verdict becomes Unknown /
//!   [`reasons::CONDITION_RULE_STALE_STATUS`] (a status written for another generation claims
//!   nothing); a False or Unknown verdict stands, so a failure the controller reports while it
//!   keeps `observedGeneration` at the generation it last reconciled is seen.
//! - CEL environment: the standard library with optional types (`a.?b`, `optional.of`), the
//!   `strings` (version 2: no string `reverse`), `lists`, `math` and `base64` extensions of cel
//!   0.15, cel-go's `sets` and two-variable comprehensions (`all(k, v, p)`, `transformList`,
//!   `transformMap`, `transformMapEntry`, ...), and the Kubernetes
//!   libraries: `hasConditions(map)` (OCM: true iff the map's `conditions` is a non-empty list),
//!   list `sum()`, `min()`, `max()`, `isSorted()`, `indexOf(x)`, `lastIndexOf(x)`, regex
//!   `string.find(re)`, `string.findAll(re[, limit])`, and `quantity(s)`, `isQuantity(s)` with
//!   `compareTo`, `isLessThan`, `isGreaterThan`, `add`, `sub` (quantity or int), `asInteger`,
//!   `asApproximateFloat`, `isInteger`, `sign`, and `url(s)`, `isURL(s)` with `getScheme`,
//!   `getHost`, `getHostname`, `getPort`, `getEscapedPath`, `getQuery`. JSON integers are
//!   CEL `int`s. Where cel 0.15 answers otherwise than cel-go v0.26 with the Kubernetes
//!   environment, `compat` makes it answer as upstream; `tests/cel/upstream_tables.rs` holds us to
//!   upstream's own test tables.
//! - Bounds ([`Limits`], defaults in parentheses): sources longer than `max_expression_len`
//!   (10 KiB) or nested (brackets plus runs of unary operators) deeper than `max_nesting_depth`
//!   (64) are rejected before parsing; parsing runs on a thread with a 256 MiB (virtual) stack
//!   and the parsed tree's depth is checked against the same limit. Compiled expressions (and
//!   compile errors) are cached, at most `cache_capacity` (4096), oldest evicted first.
//! - Cost budget: all the rules of one manifest (their expressions and message expressions)
//!   share `manifest_cost_budget` (10,000,000) cost units, as upstream OCM does. The count is
//!   deterministic, fixed by the expression and the input, never by the clock: one unit per
//!   syntax-tree node evaluated (charged up front, once per evaluation, for the nodes outside
//!   comprehension bodies), one unit per comprehension iteration plus the nodes of the body it
//!   runs, and for the functions whose work grows with their input (`contains`, `matches`,
//!   `find`, `split`, `join`, `sort`, `in`, `size`, ...) one unit per list or map element and
//!   per 10 bytes of string of each operand; a regex pattern costs one unit per byte. A rule
//!   whose evaluation runs out gives `ConditionRuleExpressionError` False ("the manifest's CEL
//!   cost budget of N units is exhausted"), and the rules after it give the same without
//!   being evaluated ("not evaluated: ... (exhausted by rule "X" celExpressions[i])").
//!   Well-known rules cost nothing. For scale: the rules users write cost tens to hundreds of
//!   units; 10,000,000 is about a million comprehension iterations, well under a second.
//! - Safety nets: a comprehension may run at most `max_iterations` (1,000,000) iterations and
//!   one expression at most `max_evaluation_time` (5 s, read at every iteration) before it
//!   gives [`EvalError::Timeout`]; both sit far above what the budget allows for ordinary
//!   rules, so a loaded machine does not turn a good rule into an error. A stopped evaluation
//!   stops itself on the caller's thread: no worker threads, nothing left running.
//! - Every entry point runs on a freshly allocated stack when the caller's thread has too
//!   little left for an expression at the depth limit (tokio threads have 2 MiB). A panic
//!   inside the interpreter becomes [`EvalError::Internal`].
//! - Conversion: only the parts of a live object that the rules read are converted to CEL. At
//!   compile time each expression records the chains of field selections it reads from
//!   `object` (`object.status.conditions`, `has(object.spec.replicas)`, literal keys such as
//!   `['app']`, `.?f`); the value at a chain's end is used whole, and any other use of `object`
//!   (alone, passed to a function or macro, indexed with a non-literal, shadowed by a
//!   comprehension variable) reads all of it. An evaluation converts the union over the
//!   manifest's expressions and message expressions: the maps along the chains keep only the
//!   selected keys (absent keys stay absent, so `has()` and missing-key errors are unchanged)
//!   and the chains' ends are whole. With `object_cache_capacity` set (0, off, by default: converting
//!   what rules read costs less than a cache insert), the conversion is kept per `metadata.uid`
//!   and `metadata.resourceVersion` (a cache of that many objects, at most
//!   `object_cache_bytes` (32 MiB) of converted parts), so the rules of every evaluation of one
//!   object version share one conversion; a rule set that reads more converts again, for both.
//!   Objects without both fields are converted on every call. As on the API server, one uid and
//!   resourceVersion must mean one content: a caller that edits an object must drop its
//!   resourceVersion (or evaluate with a fresh [`Evaluator`]).
//!
//! Which entry point: [`Evaluator::evaluate_manifest`] and [`Evaluator::is_complete`] take the
//! JSON and use the cache; a caller that wants to hold an object can call [`Evaluator::prepare`]
//! once and then [`Evaluator::evaluate_prepared`] / [`Evaluator::is_complete_prepared`] (the
//! same conversion and cache). All of them are
//! synchronous and CPU-bound: async callers run them on a blocking pool.
//!
//! Deviations from the contract sketch: [`merge_conditions`] keeps conditions that are not in
//! `updates`; [`replace_conditions`] drops them.

mod aggregate;
mod cel;
mod condition;
mod error;
mod evaluator;
mod explain;
mod limits;
mod manifest;
mod merge;
mod not_evaluated;
mod rules;
mod well_known;

pub use aggregate::aggregate_work_conditions;
pub use cel::convert::TypedValue;
pub use cel::prepared::PreparedObject;
pub use condition::{
    CONDITION_RULE_REASON_PREFIX, Condition, ConditionUpdate, MAX_MESSAGE_BYTES, Status,
    is_rule_made, reasons,
};
pub use error::EvalError;
pub use evaluator::{Bindings, Evaluator};
pub use explain::{ExpressionStep, MessageSource, RuleExplanation, Stale, WellKnownStep};
pub use limits::Limits;
pub use manifest::{
    Availability, applied_condition, available_condition, feedback_condition,
    gate_invalid_condition, ignore_fields_failed_condition, no_feedback_condition,
    waiting_conditions,
};
pub use merge::{merge_conditions, merge_work_conditions, replace_conditions};
pub use not_evaluated::not_evaluated_conditions;
