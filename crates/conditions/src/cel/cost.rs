//! The deterministic cost of an expression, fixed at compile time by instrumenting its tree.
//!
//! Cost units (see the crate docs): one per syntax-tree node evaluated, one more per
//! comprehension iteration, and for the functions whose work grows with their input, one per
//! element of a list or map argument and one per [`BYTES_PER_UNIT`] bytes of a string
//! argument. Nodes outside comprehension bodies are charged once per evaluation, up front
//! ([`Program::static_cost`]); a comprehension body's nodes are charged on every iteration by
//! the metered range ([`BUDGET_FUNCTION`]); argument sizes are charged when the
//! argument is evaluated ([`SIZE_FUNCTION`]); [`crate::cel::budget`] implements both. A literal argument is charged
//! statically instead (its size is known), so common shapes such as `s.startsWith('x')` pay
//! nothing at run time for metering.

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue, operators};
use cel::common::types::CelInt;

use crate::cel::object_reads::Reads;

/// Name of the internal function that meters a comprehension range (`(range, units per
/// iteration)`; not callable from CEL source: `@` is not an identifier character).
pub(crate) const BUDGET_FUNCTION: &str = "@budget";
/// Name of the internal function that charges an operand's size.
pub(crate) const SIZE_FUNCTION: &str = "@size_cost";

/// Bytes of a string argument that cost one unit.
pub(crate) const BYTES_PER_UNIT: u64 = 10;

/// Functions whose work grows with the size of their target or arguments.
const SIZED_FUNCTIONS: &[&str] = &[
    operators::IN,
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "find",
    "findAll",
    "split",
    "replace",
    "join",
    "lowerAscii",
    "upperAscii",
    "trim",
    "indexOf",
    "lastIndexOf",
    crate::cel::internal_names::INDEX_OF_OFFSET,
    crate::cel::internal_names::LAST_INDEX_OF_OFFSET,
    crate::cel::internal_names::FORMAT,
    crate::cel::internal_names::UNWRAP,
    crate::cel::internal_names::REVERSE,
    crate::cel::internal_names::PAIRS,
    crate::cel::internal_names::MERGE_MAPS,
    "unwrapOpt",
    "substring",
    "charAt",
    "reverse",
    "format",
    "quote",
    "size",
    "sort",
    "distinct",
    "flatten",
    "slice",
    "sum",
    "min",
    "max",
    "isSorted",
    "equivalent",
    "intersects",
    "encode",
    "decode",
    "quantity",
    "isQuantity",
    "url",
    "isURL",
];

/// The namespaces of the environment's qualified functions (`strings.quote`, `base64.encode`,
/// `math.abs`, `optional.of`, ...). A call such as `strings.quote(s)` parses as the member call
/// `quote` on the identifier `strings`; the interpreter resolves it to the function only while
/// that target is still the bare identifier, so it must not be wrapped for size charging.
const FUNCTION_NAMESPACES: &[&str] = &[
    "base64", "format", "ip", "lists", "math", "optional", "sets", "strings",
];

/// True when `target` is a function namespace (see [`FUNCTION_NAMESPACES`]).
fn is_namespace(target: &IdedExpr) -> bool {
    matches!(&target.expr, Expr::Ident(name) if FUNCTION_NAMESPACES.contains(&name.as_str()))
}

/// A parsed, instrumented expression, what one evaluation of it costs before any iteration, and
/// what it reads of the live object.
#[derive(Debug)]
pub(crate) struct Program {
    /// The instrumented tree.
    pub(crate) expr: IdedExpr,
    /// Units charged up front on every evaluation.
    pub(crate) static_cost: u64,
    /// Depth of the instrumented tree (what evaluating it needs of the stack).
    pub(crate) depth: usize,
    /// What it reads of the live object (so that only that is converted).
    pub(crate) reads: Reads,
}

impl Program {
    /// Instruments `expr`: comprehension ranges are metered, arguments of sized functions are
    /// charged by size.
    pub(crate) fn instrument(mut expr: IdedExpr) -> Program {
        let reads = Reads::of(&expr);
        let static_cost = instrument(&mut expr);
        let depth = crate::limits::ast_depth(&expr);
        Program {
            expr,
            static_cost,
            depth,
            reads,
        }
    }
}

/// Instruments `expr` in place; returns the units one evaluation costs outside the bodies of
/// the comprehensions it contains.
fn instrument(expr: &mut IdedExpr) -> u64 {
    let own = 1;
    match &mut expr.expr {
        Expr::Call(call) => {
            let sized = SIZED_FUNCTIONS.contains(&call.func_name.as_str());
            let mut cost = own;
            if let Some(target) = call.target.as_mut() {
                cost += instrument(target);
                if sized && !is_namespace(target) {
                    cost += charge_size(target);
                }
            }
            for arg in &mut call.args {
                cost += instrument(arg);
                if sized {
                    cost += charge_size(arg);
                }
            }
            cost
        }
        Expr::Comprehension(c) => {
            let outside = instrument(&mut c.iter_range)
                + instrument(&mut c.accu_init)
                + instrument(&mut c.result);
            // One for the iteration itself, plus the body evaluated on it.
            let per_iteration = 1 + instrument(&mut c.loop_cond) + instrument(&mut c.loop_step);
            let range = std::mem::take(&mut c.iter_range);
            let id = range.id;
            c.iter_range = call(
                id,
                BUDGET_FUNCTION,
                vec![range, int_literal(id, per_iteration)],
            );
            own + outside
        }
        Expr::List(list) => own + list.elements.iter_mut().map(instrument).sum::<u64>(),
        Expr::Map(map) => own + map.entries.iter_mut().map(instrument_entry).sum::<u64>(),
        Expr::Struct(s) => own + s.entries.iter_mut().map(instrument_entry).sum::<u64>(),
        Expr::Select(select) => own + instrument(&mut select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => own,
    }
}

fn instrument_entry(entry: &mut cel::common::ast::IdedEntryExpr) -> u64 {
    match &mut entry.expr {
        EntryExpr::StructField(f) => instrument(&mut f.value),
        EntryExpr::MapEntry(m) => instrument(&mut m.key) + instrument(&mut m.value),
    }
}

/// The size cost of a sized function's operand: static for a literal, otherwise the operand is
/// wrapped so that its size is charged when it is evaluated.
fn charge_size(operand: &mut IdedExpr) -> u64 {
    match &operand.expr {
        Expr::Literal(LiteralValue::String(s)) => string_units(s.inner().len()),
        Expr::Literal(LiteralValue::Bytes(b)) => string_units(b.inner().len()),
        Expr::Literal(_) => 0,
        Expr::List(list) => list.elements.len() as u64,
        Expr::Map(map) => map.entries.len() as u64,
        _ => {
            let inner = std::mem::take(operand);
            let id = inner.id;
            *operand = call(id, SIZE_FUNCTION, vec![inner]);
            // The wrapping call itself.
            1
        }
    }
}

/// Units for a string or bytes value of `len` bytes.
pub(crate) fn string_units(len: usize) -> u64 {
    (len as u64).div_ceil(BYTES_PER_UNIT)
}

fn call(id: u64, name: &str, args: Vec<IdedExpr>) -> IdedExpr {
    IdedExpr {
        id,
        expr: Expr::Call(CallExpr {
            func_name: name.to_string(),
            target: None,
            args,
        }),
    }
}

fn int_literal(id: u64, value: u64) -> IdedExpr {
    IdedExpr {
        id,
        expr: Expr::Literal(LiteralValue::Int(CelInt::from(
            i64::try_from(value).unwrap_or(i64::MAX),
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(source: &str) -> Program {
        let env = cel::Env::stdlib();
        Program::instrument(env.parser().parse(source).expect("parses"))
    }

    fn calls_to(program: &Program, name: &str) -> usize {
        format!("{:?}", program.expr)
            .matches(&format!("func_name: {name:?}"))
            .count()
    }

    #[test]
    fn every_comprehension_range_is_metered() {
        let p = program("[1, 2].map(x, [3].exists(y, y == x))");
        assert_eq!(calls_to(&p, BUDGET_FUNCTION), 2);
    }

    #[test]
    fn static_cost_counts_nodes_outside_comprehension_bodies() {
        // _==_(select(select(object)), literal): five nodes.
        assert_eq!(program("object.a.b == 1").static_cost, 5);
        // The body of `all` is charged per iteration, not up front.
        let short = program("object.items.all(x, x == 1)").static_cost;
        let long = program("object.items.all(x, x == 1 && x + 1 == 2 && x * 2 == 2)").static_cost;
        assert_eq!(short, long);
    }

    #[test]
    fn sized_functions_charge_non_literal_operands_at_run_time() {
        let p = program("object.name.startsWith('abc')");
        assert_eq!(calls_to(&p, SIZE_FUNCTION), 1);
        let literal = program("'0123456789abc'.startsWith('a')");
        assert_eq!(calls_to(&literal, SIZE_FUNCTION), 0);
        // call + two literals + 2 units for the 13-byte target + 1 unit for the 1-byte argument
        assert_eq!(literal.static_cost, 1 + 2 + 2 + 1);
        let plain = program("object.a + object.b");
        assert_eq!(calls_to(&plain, SIZE_FUNCTION), 0);
    }

    #[test]
    fn a_function_namespace_is_not_wrapped() {
        // Only the argument is charged: `strings` stays the identifier naming the namespace.
        let p = program("strings.quote(object.name) + base64.encode(object.data)");
        assert_eq!(calls_to(&p, SIZE_FUNCTION), 2);
        assert!(format!("{:?}", p.expr).contains("Ident(\"strings\")"));
    }
}
