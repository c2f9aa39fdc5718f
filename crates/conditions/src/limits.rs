//! Bounds on expressions, checked before and after parsing.
//!
//! cel 0.15 has no cost budget and its parser and interpreter recurse. So:
//! 1. before parsing, a lexical scan rejects sources that are too long, nest brackets or
//!    unary operators too deeply, or chain too many operators (the shapes that recurse, and
//!    are slow, in the parser);
//! 2. parsing runs on a thread with a large stack ([`PARSE_STACK_BYTES`]), and the parsed AST's
//!    depth is checked there, so that nothing deep reaches the caller's stack;
//! 3. evaluation is metered at run time against a cost budget: see [`crate::cel::cost`] and
//!    [`crate::cel::budget`].

use std::time::Duration;

use cel::common::ast::{EntryExpr, Expr, IdedExpr};

use crate::error::EvalError;

/// Stack of the thread that parses an expression.
pub(crate) const PARSE_STACK_BYTES: usize = 256 * 1024 * 1024;

/// Stack one syntax-tree level may take while evaluating. Measured on nested list literals and
/// `+` chains (the deepest-framed shapes) at depth 64: under 128 KiB in total in release builds,
/// 2-4 MiB in debug builds; these constants leave room to spare.
const STACK_PER_LEVEL: usize = if cfg!(debug_assertions) {
    96 * 1024
} else {
    16 * 1024
};
/// Stack an evaluation needs besides its levels.
const STACK_BASE: usize = 256 * 1024;

/// Runs `f` (an evaluation) on the current stack when enough of it is left for an expression
/// at the depth limit, and on a freshly allocated stack otherwise. The interpreter recurses once
/// per level, and callers (e.g. tokio workers with 2 MiB) may not have room.
pub(crate) fn with_stack<R>(limits: &Limits, f: impl FnOnce() -> R) -> R {
    with_stack_for_depth(limits.max_nesting_depth, f)
}

/// [`with_stack`] for a tree of this depth (metering wrappers make an instrumented tree deeper
/// than its source; checking costs a read of the stack pointer).
pub(crate) fn with_stack_for_depth<R>(depth: usize, f: impl FnOnce() -> R) -> R {
    let needed = STACK_BASE.saturating_add(depth.saturating_mul(STACK_PER_LEVEL));
    stacker::maybe_grow(needed, needed.saturating_mul(2), f)
}

/// The default deadline of one expression: a safety net far above what the cost budget lets
/// an expression do, also in debug builds (which the e2e suite and the demo run, and where the
/// interpreter is 20-50 times slower).
const DEFAULT_EVALUATION_TIME: Duration = if cfg!(debug_assertions) {
    Duration::from_secs(60)
} else {
    Duration::from_secs(5)
};

/// Limits on expressions and evaluation.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Longest accepted expression, in bytes.
    pub max_expression_len: usize,
    /// Deepest accepted nesting: brackets plus runs of unary operators before parsing, and the
    /// depth of the parsed syntax tree after.
    pub max_nesting_depth: usize,
    /// Longest one expression may run before it is stopped: a safety net for work the cost
    /// count misses, generous so that a loaded machine does not fail a good rule.
    pub max_evaluation_time: Duration,
    /// Most comprehension iterations (all nesting levels together) one expression may run.
    pub max_iterations: u64,
    /// Cost units (see the crate docs) all the rules of one manifest may spend together.
    pub manifest_cost_budget: u64,
    /// Most distinct expressions kept compiled.
    pub cache_capacity: usize,
    /// Most live objects whose converted parts are kept (by uid and resourceVersion); 0 keeps
    /// none.
    pub object_cache_capacity: usize,
    /// Most bytes (estimated) the kept converted parts may weigh together.
    pub object_cache_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_expression_len: 10 * 1024,
            max_nesting_depth: 64,
            max_evaluation_time: DEFAULT_EVALUATION_TIME,
            max_iterations: 1_000_000,
            manifest_cost_budget: 10_000_000,
            cache_capacity: 4096,
            // Off: converting only what the rules read costs less than a cache insert
            // (docs/performance.md); callers that evaluate one version many times turn it on.
            object_cache_capacity: 0,
            object_cache_bytes: 32 * 1024 * 1024,
        }
    }
}

/// Rejects a source longer than the limit.
pub(crate) fn check_length(source: &str, limits: &Limits) -> Result<(), EvalError> {
    if source.len() > limits.max_expression_len {
        return Err(EvalError::TooLong {
            len: source.len(),
            limit: limits.max_expression_len,
        });
    }
    Ok(())
}

/// Rejects a source that is too long or nests too deeply, without parsing it.
pub(crate) fn check_source(source: &str, limits: &Limits) -> Result<(), EvalError> {
    check_length(source, limits)?;
    let depth = lexical_depth(source, limits.max_nesting_depth);
    if depth > limits.max_nesting_depth {
        return Err(EvalError::TooDeep {
            depth,
            limit: limits.max_nesting_depth,
        });
    }
    // Operator chains parse into trees as deep as they are long, and the parser is slow on
    // them (about a millisecond per operator in debug builds): reject long ones unparsed. The
    // estimate over-counts, hence the slack; the parsed tree is checked exactly afterwards.
    let chain = chain_depth(source);
    if chain > limits.max_nesting_depth.saturating_mul(CHAIN_SLACK) {
        return Err(EvalError::TooDeep {
            depth: chain,
            limit: limits.max_nesting_depth,
        });
    }
    Ok(())
}

/// How much longer than the depth limit an operator chain may look before parsing.
const CHAIN_SLACK: usize = 2;

/// An over-estimate of the syntax-tree depth that operator chains add: binary operators,
/// member selections and ternaries count one each, `&&`, `||` and `,` start a new chain (the
/// parser balances logical chains), and a bracketed group adds its own deepest chain plus one to
/// the chain it is in.
fn chain_depth(source: &str) -> usize {
    let bytes = source.as_bytes();
    // (ops in the current chain, deepest chain closed so far) per open bracket
    let mut frames: Vec<(usize, usize)> = vec![(0, 0)];
    let mut max = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let next = bytes.get(i + 1).copied();
        let mut step = 1;
        match c {
            b'\'' | b'"' => {
                i = skip_string(bytes, i);
                continue;
            }
            b'(' | b'[' | b'{' => frames.push((0, 0)),
            b')' | b']' | b'}' => {
                if frames.len() > 1
                    && let Some((ops, deepest)) = frames.pop()
                    && let Some(top) = frames.last_mut()
                {
                    top.0 += ops.max(deepest) + 1;
                }
            }
            b'&' | b'|' if next == Some(c) => {
                step = 2;
                if let Some(top) = frames.last_mut() {
                    top.1 = top.1.max(top.0);
                    top.0 = 0;
                }
            }
            b',' => {
                if let Some(top) = frames.last_mut() {
                    top.1 = top.1.max(top.0);
                    top.0 = 0;
                }
            }
            b'.' if i > 0
                && bytes[i - 1].is_ascii_digit()
                && next.is_some_and(|n| n.is_ascii_digit()) => {}
            b'+' | b'-' | b'*' | b'/' | b'%' | b'<' | b'>' | b'.' | b'?' | b':' => {
                if matches!(next, Some(b'=')) {
                    step = 2;
                }
                if let Some(top) = frames.last_mut() {
                    top.0 += 1;
                }
            }
            b'=' | b'!' if next == Some(b'=') => {
                step = 2;
                if let Some(top) = frames.last_mut() {
                    top.0 += 1;
                }
            }
            _ => {}
        }
        if let Some(top) = frames.last() {
            max = max.max(top.0);
        }
        i += step;
    }
    max
}

/// Deepest bracket nesting plus unary-operator run, outside string literals; stops counting
/// once over `stop_after`.
fn lexical_depth(source: &str, stop_after: usize) -> usize {
    let bytes = source.as_bytes();
    let mut brackets = 0usize;
    let mut unary = 0usize;
    let mut max = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b'\'' | b'"' => {
                i = skip_string(bytes, i);
                unary = 0;
                continue;
            }
            b'(' | b'[' | b'{' => {
                brackets += 1;
                unary = 0;
            }
            b')' | b']' | b'}' => {
                brackets = brackets.saturating_sub(1);
                unary = 0;
            }
            b'!' | b'-' => {
                // `!=` is binary.
                if !(c == b'!' && bytes.get(i + 1) == Some(&b'=')) {
                    unary += 1;
                }
            }
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => unary = 0,
        }
        max = max.max(brackets + unary);
        if max > stop_after {
            return max;
        }
        i += 1;
    }
    max
}

/// Index just past the string literal starting at `start` (handles triple quotes and escapes).
fn skip_string(bytes: &[u8], start: usize) -> usize {
    let quote = bytes[start];
    let triple = bytes.get(start + 1) == Some(&quote) && bytes.get(start + 2) == Some(&quote);
    let mut i = start + if triple { 3 } else { 1 };
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if bytes[i] == quote {
            if !triple {
                return i + 1;
            }
            if bytes.get(i + 1) == Some(&quote) && bytes.get(i + 2) == Some(&quote) {
                return i + 3;
            }
        }
        i += 1;
    }
    bytes.len()
}

/// Depth of a parsed syntax tree.
pub(crate) fn ast_depth(expr: &IdedExpr) -> usize {
    let children = children(expr);
    1 + children.into_iter().map(ast_depth).max().unwrap_or(0)
}

fn children(expr: &IdedExpr) -> Vec<&IdedExpr> {
    match &expr.expr {
        Expr::Call(call) => call
            .target
            .iter()
            .map(|t| &**t)
            .chain(call.args.iter())
            .collect(),
        Expr::Comprehension(c) => vec![
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ],
        Expr::List(list) => list.elements.iter().collect(),
        Expr::Map(map) => entries(&map.entries),
        Expr::Struct(s) => entries(&s.entries),
        Expr::Select(select) => vec![&select.operand],
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => vec![],
    }
}

fn entries(entries: &[cel::common::ast::IdedEntryExpr]) -> Vec<&IdedExpr> {
    entries
        .iter()
        .flat_map(|e| match &e.expr {
            EntryExpr::StructField(f) => vec![&f.value],
            EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(depth: usize) -> Limits {
        Limits {
            max_nesting_depth: depth,
            ..Limits::default()
        }
    }

    #[test]
    fn too_long_is_rejected() {
        let source = "1 + ".repeat(5000) + "1";
        let err = check_source(&source, &Limits::default()).unwrap_err();
        assert!(matches!(err, EvalError::TooLong { .. }), "{err:?}");
    }

    #[test]
    fn brackets_and_unary_runs_count_as_depth() {
        assert!(check_source("((((1))))", &limits(4)).is_ok());
        assert!(matches!(
            check_source("(((((1)))))", &limits(4)),
            Err(EvalError::TooDeep { depth: 5, .. })
        ));
        assert!(check_source("!!!!true", &limits(4)).is_ok());
        assert!(check_source("!!!!!true", &limits(4)).is_err());
        assert!(check_source("[[[[[1]]]]]", &limits(4)).is_err());
        assert!(check_source("- - - - -1", &limits(4)).is_err());
    }

    #[test]
    fn brackets_inside_strings_do_not_count() {
        assert!(check_source("'((((((((' == \"]]]]]]]]]\" && '''(((((('''", &limits(2)).is_ok());
        assert!(check_source(r"'\'((((((' == 'a'", &limits(2)).is_ok());
    }

    #[test]
    fn long_operator_chains_are_rejected_unparsed() {
        let chain = vec!["1"; 200].join(" + ");
        assert!(matches!(
            check_source(&chain, &Limits::default()),
            Err(EvalError::TooDeep { .. })
        ));
        let selects = format!("object{}", ".a".repeat(200));
        assert!(check_source(&selects, &Limits::default()).is_err());
    }

    #[test]
    fn logical_chains_and_lists_do_not_add_up() {
        let clauses = vec!["object.status.a.b == object.spec.c.d + 1"; 100].join(" && ");
        assert!(check_source(&clauses, &Limits::default()).is_ok());
        let list = format!("[{}]", vec!["1 + 2"; 500].join(", "));
        assert!(check_source(&list, &Limits::default()).is_ok());
        assert_eq!(chain_depth("a.b + (c.d * e)"), 5);
        assert_eq!(chain_depth("1.5 + 2.25"), 1);
        assert_eq!(chain_depth("'a.b.c.d' + x"), 1);
    }

    #[test]
    fn not_equal_is_not_unary() {
        assert_eq!(lexical_depth("1 != 2 && 3 != 4", 10), 0);
        assert_eq!(lexical_depth("!(1 != 2)", 10), 1);
    }
}
