//! Where cel 0.15 answers differently from cel-go v0.26 with the Kubernetes environment, the
//! parsed expression is checked and rewritten at compile time so that it answers as upstream:
//!
//! - Checks cel-go's compiler makes that an interpreter without a type checker skips: list
//!   literals must be homogeneous (the Kubernetes environment sets
//!   `HomogeneousAggregateLiterals`; literals under `format` are exempt, as there), judged on
//!   the elements whose type is known from the source alone (`optional.of(x)` is
//!   `optional_type(<x's type>)`; of map literals only the keys are checked: a rule's map
//!   result, our extension, mixes value types); a literal format string given a literal list
//!   of more arguments than it has clauses; and a literal pattern of
//!   `matches`, `find` or `findAll` must be a valid Go (RE2) pattern: stacked repetition
//!   operators (`x++`, `a**`) are an error there, while the `regex` crate accepts them. A
//!   conditional's condition known not to be a bool, or its branches known to be of different
//!   types (neither a map: a rule's map result may stand beside a bool), is an error too.
//!   Comprehension variables over a range whose type is known have the element's type
//!   (`[1, 2].map(v, [v, 'a'])` is an error, as in cel-go).
//! - Calls whose cel 0.15 implementation differs are renamed to ours ([`RENAMES`]; names
//!   starting with `@` cannot be written in CEL source): `s.indexOf(t, n)` and
//!   `s.lastIndexOf(t, n)` give -1 for an offset past the end, `optional.ofNonZeroValue` knows
//!   the zero timestamp, `s.format(list)` formats as cel-go's (Kubernetes') strings
//!   library does, and `x.reverse()` reverses lists only: the Kubernetes environment has
//!   strings library version 2, whose strings have no `reverse` (cel 0.15 offers version 3's).

use cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue, operators};

use crate::cel::internal_names::{
    FORMAT, INDEX_OF_OFFSET, LAST_INDEX_OF_OFFSET, OF_NON_ZERO_VALUE, PAIRS, REVERSE, UNWRAP,
};
use crate::error::EvalError;

/// (function, receiver namespace or "" for a member call, arguments, our function).
const RENAMES: &[(&str, &str, usize, &str)] = &[
    ("indexOf", "", 2, INDEX_OF_OFFSET),
    ("lastIndexOf", "", 2, LAST_INDEX_OF_OFFSET),
    ("format", "", 1, FORMAT),
    ("ofNonZeroValue", "optional", 1, OF_NON_ZERO_VALUE),
    ("unwrap", "optional", 1, UNWRAP),
    ("reverse", "", 0, REVERSE),
];

/// Checks `expr` as cel-go's compiler would, then renames the calls we implement ourselves.
pub(crate) fn check_and_rewrite(expr: &mut IdedExpr) -> Result<(), EvalError> {
    check(expr, false, None)?;
    rewrite(expr);
    Ok(())
}

/// A static type known from the source alone.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Static {
    Named(&'static str),
    List(Box<Static>),
    Map(Box<Static>, Box<Static>),
    Optional(Box<Static>),
    /// A two-variable comprehension's `[k, v]` pair (see [`crate::cel::k8s_functions`]).
    Pair(Box<Static>, Box<Static>),
}

impl Static {
    /// Whether a map is part of this type.
    fn has_map(&self) -> bool {
        match self {
            Static::Named(_) => false,
            Static::Map(..) => true,
            Static::List(e) | Static::Optional(e) => e.has_map(),
            Static::Pair(k, v) => k.has_map() || v.has_map(),
        }
    }

    /// The type of one iteration variable over a range of this type: a list's element, a
    /// map's key.
    fn element(&self) -> Option<Static> {
        match self {
            Static::List(e) => Some((**e).clone()),
            Static::Map(k, _) => Some((**k).clone()),
            _ => None,
        }
    }
}

/// The variables in scope where an expression is checked, each with its type when known.
struct Scope<'a> {
    name: &'a str,
    ty: Option<Static>,
    parent: Option<&'a Scope<'a>>,
}

/// The type of the variable `name` in `scope`: `None` when unknown or not a variable.
fn variable_type(mut scope: Option<&Scope<'_>>, name: &str) -> Option<Static> {
    while let Some(frame) = scope {
        if frame.name == name {
            return frame.ty.clone();
        }
        scope = frame.parent;
    }
    None
}

/// Whether `c` only binds a variable (`cel.bind`): it iterates over an empty list literal.
fn is_bind(c: &ComprehensionExpr) -> bool {
    matches!(&c.iter_range.expr, Expr::List(l) if l.elements.is_empty())
}

impl std::fmt::Display for Static {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Static::Named(n) => f.write_str(n),
            Static::List(e) => write!(f, "list({e})"),
            Static::Map(k, v) => write!(f, "map({k}, {v})"),
            Static::Optional(v) => write!(f, "optional_type({v})"),
            Static::Pair(..) => f.write_str("list(dyn)"),
        }
    }
}

/// The type of `expr` when the source alone tells it (`scope`: the comprehension variables
/// around it).
fn static_type(expr: &IdedExpr, scope: Option<&Scope<'_>>) -> Option<Static> {
    match &expr.expr {
        Expr::Literal(lit) => Some(Static::Named(match lit {
            LiteralValue::Boolean(_) => "bool",
            LiteralValue::Bytes(_) => "bytes",
            LiteralValue::Double(_) => "double",
            LiteralValue::Int(_) => "int",
            LiteralValue::Null => "null",
            LiteralValue::String(_) => "string",
            LiteralValue::UInt(_) => "uint",
        })),
        Expr::Ident(name) => variable_type(scope, name),
        Expr::Call(call) if call.func_name == "dyn" && call.target.is_none() => {
            Some(Static::Named("dyn"))
        }
        Expr::Call(call)
            if call.func_name == "of" && is_ident(call.target.as_deref(), "optional") =>
        {
            let [value] = call.args.as_slice() else {
                return None;
            };
            Some(Static::Optional(Box::new(static_type(value, scope)?)))
        }
        Expr::Call(call) if call.target.is_none() => call_type(call, scope),
        Expr::Comprehension(c) if is_bind(c) => {
            let frame = Scope {
                name: &c.accu_var,
                ty: static_type(&c.accu_init, scope),
                parent: scope,
            };
            static_type(&c.result, Some(&frame))
        }
        Expr::List(list) if list.optional_indices.is_empty() => {
            // Each element's type is computed once: nested literals stay linear.
            let mut types = list.elements.iter().map(|e| static_type(e, scope));
            let first = types.next()??;
            types
                .all(|t| t.as_ref() == Some(&first))
                .then(|| Static::List(Box::new(first)))
        }
        Expr::Map(map) => {
            let mut entries = map.entries.iter().map(|e| match &e.expr {
                EntryExpr::MapEntry(m) if !m.optional => {
                    Some((static_type(&m.key, scope)?, static_type(&m.value, scope)?))
                }
                _ => None,
            });
            let first = entries.next()??;
            entries
                .all(|e| e.as_ref() == Some(&first))
                .then(|| Static::Map(Box::new(first.0), Box::new(first.1)))
        }
        _ => None,
    }
}

/// The type of a global call's result, for the operators whose result type their operands
/// tell, and for the pairs of a two-variable comprehension's range.
fn call_type(call: &cel::common::ast::CallExpr, scope: Option<&Scope<'_>>) -> Option<Static> {
    let name = call.func_name.as_str();
    let args = call.args.as_slice();
    match name {
        operators::EQUALS
        | operators::NOT_EQUALS
        | operators::LESS
        | operators::LESS_EQUALS
        | operators::GREATER
        | operators::GREATER_EQUALS
        | operators::LOGICAL_AND
        | operators::LOGICAL_OR
        | operators::LOGICAL_NOT
        | operators::IN => Some(Static::Named("bool")),
        operators::ADD
        | operators::SUBSTRACT
        | operators::MULTIPLY
        | operators::DIVIDE
        | operators::MODULO => {
            let [a, b] = args else { return None };
            let t = static_type(a, scope)?;
            let numeric = matches!(t, Static::Named("int" | "uint" | "double"));
            let text = name == operators::ADD && matches!(t, Static::Named("string"));
            ((numeric || text) && static_type(b, scope).as_ref() == Some(&t)).then_some(t)
        }
        operators::INDEX => {
            let [container, index] = args else {
                return None;
            };
            match static_type(container, scope)? {
                Static::List(e) => Some(*e),
                Static::Map(_, v) => Some(*v),
                Static::Pair(k, v) => match &index.expr {
                    Expr::Literal(LiteralValue::Int(i)) if *i.inner() == 0 => Some(*k),
                    Expr::Literal(LiteralValue::Int(i)) if *i.inner() == 1 => Some(*v),
                    _ => None,
                },
                _ => None,
            }
        }
        PAIRS => {
            let [range] = args else { return None };
            let (k, v) = match static_type(range, scope)? {
                Static::List(e) => (Static::Named("int"), *e),
                Static::Map(k, v) => (*k, *v),
                _ => return None,
            };
            Some(Static::List(Box::new(Static::Pair(
                Box::new(k),
                Box::new(v),
            ))))
        }
        _ => None,
    }
}

/// Whether `expr` is the identifier `name` (a namespace such as `optional`).
fn is_ident(expr: Option<&IdedExpr>, name: &str) -> bool {
    matches!(expr, Some(IdedExpr { expr: Expr::Ident(n), .. }) if n == name)
}

/// The clauses of a format string (`%%` is an escaped percent sign, not a clause).
fn format_clauses(pattern: &str) -> usize {
    let mut clauses = 0;
    let mut rest = pattern;
    while let Some(at) = rest.find('%') {
        let after = &rest[at + 1..];
        if let Some(escaped) = after.strip_prefix('%') {
            rest = escaped;
        } else {
            clauses += 1;
            rest = after;
        }
    }
    clauses
}

/// cel-go's compile-time check of `'...'.format([...])` with both literal: more arguments than
/// the string has clauses is an error (fewer is one too, when the missing one is formatted).
fn check_format_arguments(call: &cel::common::ast::CallExpr) -> Result<(), EvalError> {
    let (
        Some(IdedExpr {
            expr: Expr::Literal(LiteralValue::String(pattern)),
            ..
        }),
        [
            IdedExpr {
                expr: Expr::List(list),
                ..
            },
        ],
    ) = (call.target.as_deref(), call.args.as_slice())
    else {
        return Ok(());
    };
    let expected = format_clauses(pattern.inner());
    let got = list.elements.len();
    if call.func_name == "format" && list.optional_indices.is_empty() && got > expected {
        return Err(EvalError::Compile {
            message: format!(
                "too many arguments supplied to string.format (expected {expected}, got {got})"
            ),
        });
    }
    Ok(())
}

/// The first element whose known type differs from the first element's.
fn mismatch<'e>(
    items: impl Iterator<Item = &'e IdedExpr>,
    scope: Option<&Scope<'_>>,
) -> Option<(Static, Static)> {
    let mut expected = None;
    for item in items {
        let Some(found) = static_type(item, scope) else {
            // The first element's type unknown: nothing to compare with.
            expected.as_ref()?;
            continue;
        };
        match &expected {
            None => expected = Some(found),
            Some(e) if *e != found => return Some((e.clone(), found)),
            Some(_) => {}
        }
    }
    None
}

fn mismatch_error((expected, found): (Static, Static)) -> EvalError {
    EvalError::Compile {
        message: format!("expected type '{expected}' but found '{found}'"),
    }
}

/// cel-go's check of `c ? a : b`: `c` must be a bool and `a` and `b` of one type (here: when
/// the source tells their types; not when a map is involved, as a rule's map result may
/// stand beside a bool, nor for `null` or `dyn`).
fn check_conditional(
    call: &cel::common::ast::CallExpr,
    scope: Option<&Scope<'_>>,
) -> Result<(), EvalError> {
    let [cond, a, b] = call.args.as_slice() else {
        return Ok(());
    };
    let types = [cond, a, b].map(|e| static_type(e, scope));
    let loose = |t: &Static| t.has_map() || matches!(t, Static::Named("null" | "dyn"));
    let bad_condition = matches!(&types[0], Some(t) if !loose(t) && *t != Static::Named("bool"));
    let bad_branches = match (&types[1], &types[2]) {
        (Some(x), Some(y)) => x != y && !loose(x) && !loose(y),
        _ => false,
    };
    if bad_condition || bad_branches {
        let shown: Vec<String> = types
            .iter()
            .map(|t| t.as_ref().map_or("dyn".to_string(), Static::to_string))
            .collect();
        return Err(EvalError::Compile {
            message: format!(
                "found no matching overload for '_?_:_' applied to '({})'",
                shown.join(", ")
            ),
        });
    }
    Ok(())
}

/// The compile-time checks, over the whole tree; `exempt` under a `format` call; `scope` the
/// comprehension variables around `expr`.
fn check(expr: &IdedExpr, exempt: bool, scope: Option<&Scope<'_>>) -> Result<(), EvalError> {
    match &expr.expr {
        Expr::Call(call) => {
            if call.func_name == operators::CONDITIONAL && call.target.is_none() {
                check_conditional(call, scope)?;
            }
            if matches!(call.func_name.as_str(), "matches" | "find" | "findAll") {
                let pattern = if call.target.is_some() || call.args.len() == 1 {
                    call.args.first()
                } else {
                    call.args.get(1)
                };
                if let Some(IdedExpr {
                    expr: Expr::Literal(LiteralValue::String(p)),
                    ..
                }) = pattern
                    && let Some(op) = stacked_repetition(p.inner())
                {
                    return Err(EvalError::Compile {
                        message: format!(
                            "invalid {} argument: invalid nested repetition operator: `{op}`",
                            call.func_name
                        ),
                    });
                }
            }
            check_format_arguments(call)?;
            let exempt = exempt || call.func_name == "format";
            if let Some(target) = &call.target {
                check(target, exempt, scope)?;
            }
            call.args.iter().try_for_each(|a| check(a, exempt, scope))
        }
        Expr::List(list) => {
            if !exempt {
                let plain = list
                    .elements
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !list.optional_indices.contains(i))
                    .map(|(_, e)| e);
                if let Some(m) = mismatch(plain, scope) {
                    return Err(mismatch_error(m));
                }
            }
            list.elements
                .iter()
                .try_for_each(|e| check(e, exempt, scope))
        }
        Expr::Map(map) => {
            // Map literals' values are not held to homogeneity: a rule's map result
            // (`{'status': false, 'message': '...'}`, our extension) mixes value types. Their
            // keys are, as cel-go holds them.
            let entries: Vec<_> = map
                .entries
                .iter()
                .filter_map(|e| match &e.expr {
                    EntryExpr::MapEntry(m) => Some(m),
                    EntryExpr::StructField(_) => None,
                })
                .collect();
            if !exempt
                && let Some(m) = mismatch(
                    entries.iter().filter(|m| !m.optional).map(|m| &m.key),
                    scope,
                )
            {
                return Err(mismatch_error(m));
            }
            for m in entries {
                check(&m.key, exempt, scope)?;
                check(&m.value, exempt, scope)?;
            }
            Ok(())
        }
        Expr::Struct(s) => s.entries.iter().try_for_each(|e| match &e.expr {
            EntryExpr::StructField(f) => check(&f.value, exempt, scope),
            EntryExpr::MapEntry(m) => {
                check(&m.key, exempt, scope).and(check(&m.value, exempt, scope))
            }
        }),
        Expr::Select(select) => check(&select.operand, exempt, scope),
        Expr::Comprehension(c) => {
            check(&c.iter_range, exempt, scope)?;
            check(&c.accu_init, exempt, scope)?;
            // The accumulator keeps its initial type only in a bind, which never steps.
            let accu = Scope {
                name: &c.accu_var,
                ty: is_bind(c)
                    .then(|| static_type(&c.accu_init, scope))
                    .flatten(),
                parent: scope,
            };
            let element = static_type(&c.iter_range, scope).and_then(|t| t.element());
            let iteration = Scope {
                name: &c.iter_var,
                ty: element,
                parent: Some(&accu),
            };
            check(&c.loop_cond, exempt, Some(&iteration))?;
            check(&c.loop_step, exempt, Some(&iteration))?;
            check(&c.result, exempt, Some(&accu))
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Ok(()),
    }
}

/// The first repetition operator that follows another in `pattern` (Go's RE2 parser, in its
/// Perl mode, rejects `a**`, `a+*`, `a{2}+`; a `?` right after one makes it non-greedy).
fn stacked_repetition(pattern: &str) -> Option<String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    let mut last_repeat: Option<usize> = None;
    while i < chars.len() {
        let start = i;
        let repeat_len = match chars[i] {
            '*' | '+' | '?' => Some(1),
            '{' => counted_repeat(&chars[i..]),
            _ => None,
        };
        if let Some(len) = repeat_len {
            let mut end = i + len;
            if chars.get(end) == Some(&'?') {
                end += 1;
            }
            if let Some(prev) = last_repeat {
                return Some(chars[prev..end].iter().collect());
            }
            last_repeat = Some(start);
            i = end;
            continue;
        }
        last_repeat = None;
        match chars[i] {
            '\\' => i += 2,
            '[' => i = class_end(&chars, i),
            _ => i += 1,
        }
    }
    None
}

/// Length of a counted repetition `{n}`, `{n,}` or `{n,m}` at the start of `chars`.
fn counted_repeat(chars: &[char]) -> Option<usize> {
    let close = chars.iter().position(|&c| c == '}')?;
    let inner: String = chars[1..close].iter().collect();
    let (min, max) = inner.split_once(',').unwrap_or((inner.as_str(), "0"));
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    (digits(min) && (max.is_empty() || digits(max))).then_some(close + 1)
}

/// Index just past the character class starting at `start` (`[`).
fn class_end(chars: &[char], start: usize) -> usize {
    let mut i = start + 1;
    if chars.get(i) == Some(&'^') {
        i += 1;
    }
    // A `]` first in the class is a literal.
    if chars.get(i) == Some(&']') {
        i += 1;
    }
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '[' if chars.get(i + 1) == Some(&':') => {
                // A named class such as [:alpha:].
                i += 2;
                while i < chars.len() && !(chars[i] == ':' && chars.get(i + 1) == Some(&']')) {
                    i += 1;
                }
                i += 2;
            }
            ']' => return i + 1,
            _ => i += 1,
        }
    }
    chars.len()
}

/// Renames the calls of [`RENAMES`] in the whole tree.
fn rewrite(expr: &mut IdedExpr) {
    match &mut expr.expr {
        Expr::Call(call) => {
            if let Some(target) = call.target.as_mut() {
                rewrite(target);
            }
            call.args.iter_mut().for_each(rewrite);
            let namespace = match call.target.as_deref() {
                Some(IdedExpr {
                    expr: Expr::Ident(name),
                    ..
                }) => Some(name.as_str()),
                _ => None,
            };
            let found = RENAMES.iter().find(|(name, ns, arity, _)| {
                *name == call.func_name
                    && *arity == call.args.len()
                    && (ns.is_empty() && call.target.is_some() || namespace == Some(ns))
            });
            if let Some((_, ns, _, ours)) = found {
                if !ns.is_empty() {
                    call.target = None;
                }
                call.func_name = (*ours).to_string();
            }
        }
        Expr::List(list) => list.elements.iter_mut().for_each(rewrite),
        Expr::Map(map) => map.entries.iter_mut().for_each(rewrite_entry),
        Expr::Struct(s) => s.entries.iter_mut().for_each(rewrite_entry),
        Expr::Select(select) => rewrite(&mut select.operand),
        Expr::Comprehension(c) => {
            for e in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                rewrite(e);
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn rewrite_entry(entry: &mut cel::common::ast::IdedEntryExpr) {
    match &mut entry.expr {
        EntryExpr::StructField(f) => rewrite(&mut f.value),
        EntryExpr::MapEntry(m) => {
            rewrite(&mut m.key);
            rewrite(&mut m.value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacked_repetitions_are_found_as_go_finds_them() {
        for bad in ["x++", "a**", "a+*", "a{2}{3}", "a*?+", "(a)?*"] {
            assert!(stacked_repetition(bad).is_some(), "{bad}");
        }
        for good in [
            "a*?", "a+b*", r"\++", "[+*]+", "a{x}*", "(?i)a+", "[]+]*", "a{2,}?",
        ] {
            assert_eq!(stacked_repetition(good), None, "{good}");
        }
    }
}
