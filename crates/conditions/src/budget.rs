//! Run-time metering of evaluations.
//!
//! Every comprehension's range is wrapped in a call to [`BUDGET_FUNCTION`], which returns an
//! iterable that counts each iteration against a per-evaluation budget and checks the deadline.
//! When either runs out the iteration ends early, the evaluation unwinds within one loop body,
//! and the (meaningless) result is replaced by [`EvalError::Timeout`]. Nothing keeps running
//! after the caller gets its answer, and no thread is needed. Work outside comprehensions is
//! not metered: it is bounded by the expression size times the input size.

use std::cell::Cell;
use std::time::{Duration, Instant};

use cel::ExecutionError;
use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr};
use cel::common::traits::{Iterable, Iterator as CelIterator, Sizer};
use cel::common::types::{DYN_TYPE, Type};
use cel::common::value::{CowVal, Val};

use crate::{EvalError, Limits};

/// Name of the internal function that meters comprehension ranges (not callable from CEL
/// source: `@` is not an identifier character).
pub(crate) const BUDGET_FUNCTION: &str = "@budget";

/// Wraps every comprehension's range in a call to [`BUDGET_FUNCTION`].
pub(crate) fn meter_comprehensions(expr: &mut IdedExpr) {
    match &mut expr.expr {
        Expr::Call(call) => {
            if let Some(target) = call.target.as_mut() {
                meter_comprehensions(target);
            }
            call.args.iter_mut().for_each(meter_comprehensions);
        }
        Expr::Comprehension(c) => {
            for child in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                meter_comprehensions(child);
            }
            let range = std::mem::take(&mut c.iter_range);
            c.iter_range = IdedExpr {
                id: range.id,
                expr: Expr::Call(CallExpr {
                    func_name: BUDGET_FUNCTION.to_string(),
                    target: None,
                    args: vec![range],
                }),
            };
        }
        Expr::List(list) => list.elements.iter_mut().for_each(meter_comprehensions),
        Expr::Map(map) => map.entries.iter_mut().for_each(meter_entry),
        Expr::Struct(s) => s.entries.iter_mut().for_each(meter_entry),
        Expr::Select(select) => meter_comprehensions(&mut select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn meter_entry(entry: &mut cel::common::ast::IdedEntryExpr) {
    match &mut entry.expr {
        EntryExpr::StructField(f) => meter_comprehensions(&mut f.value),
        EntryExpr::MapEntry(m) => {
            meter_comprehensions(&mut m.key);
            meter_comprehensions(&mut m.value);
        }
    }
}

/// Why a metered evaluation was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Iterations,
    Deadline,
}

thread_local! {
    static REMAINING: Cell<u64> = const { Cell::new(u64::MAX) };
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    static STOPPED: Cell<Option<Stop>> = const { Cell::new(None) };
}

/// The budget of one evaluation on this thread; ends (and reports) with [`Budget::finish`].
pub(crate) struct Budget {
    limits_iterations: u64,
    limits_time: Duration,
}

impl Budget {
    /// Starts metering the evaluations run on this thread until `finish` or drop.
    pub(crate) fn start(limits: &Limits) -> Budget {
        REMAINING.with(|r| r.set(limits.max_iterations));
        DEADLINE.with(|d| d.set(Instant::now().checked_add(limits.max_evaluation_time)));
        STOPPED.with(|s| s.set(None));
        Budget {
            limits_iterations: limits.max_iterations,
            limits_time: limits.max_evaluation_time,
        }
    }

    /// Ends metering; an error when the evaluation was stopped.
    pub(crate) fn finish(self) -> Result<(), EvalError> {
        let stopped = STOPPED.with(|s| s.get());
        match stopped {
            None => Ok(()),
            Some(Stop::Iterations) => Err(EvalError::Timeout {
                message: format!(
                    "more than {} comprehension iterations",
                    self.limits_iterations
                ),
            }),
            Some(Stop::Deadline) => Err(EvalError::Timeout {
                message: format!("ran longer than {:?}", self.limits_time),
            }),
        }
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        REMAINING.with(|r| r.set(u64::MAX));
        DEADLINE.with(|d| d.set(None));
        STOPPED.with(|s| s.set(None));
    }
}

/// Counts one iteration; false once the budget or the deadline is exhausted.
fn tick() -> bool {
    if STOPPED.with(|s| s.get()).is_some() {
        return false;
    }
    let remaining = REMAINING.with(|r| r.get());
    if remaining == 0 {
        STOPPED.with(|s| s.set(Some(Stop::Iterations)));
        return false;
    }
    REMAINING.with(|r| r.set(remaining - 1));
    // Every iteration: one iteration's body can itself be slow (a big list built and sorted),
    // and reading the clock (~25 ns) is small next to an iteration of the interpreter.
    if let Some(deadline) = DEADLINE.with(|d| d.get())
        && Instant::now() > deadline
    {
        STOPPED.with(|s| s.set(Some(Stop::Deadline)));
        return false;
    }
    true
}

/// A comprehension range whose iteration is metered.
#[derive(Debug)]
struct Metered<'v> {
    inner: Box<dyn Val + 'v>,
}

impl Val for Metered<'_> {
    fn get_type(&self) -> &Type {
        self.inner.get_type()
    }

    fn cel_type() -> &'static Type
    where
        Self: Sized,
    {
        &DYN_TYPE
    }

    fn as_iterable<'b, 'v>(&'b self) -> Option<&'b (dyn Iterable + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn as_sizer(&self) -> Option<&dyn Sizer> {
        self.inner.as_sizer()
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(Metered {
            inner: self.inner.clone_as_boxed(),
        })
    }
}

impl<'x> Iterable for Metered<'x> {
    fn iter<'b, 'v>(&'b self) -> Box<dyn CelIterator<'b, 'v> + 'b>
    where
        Self: 'v,
    {
        // Iterate with the value's own lifetime `'x` (which outlives `'b`), then hand out the
        // items at the shorter `'v`.
        let iterable: Option<&'b (dyn Iterable + 'x)> = self.inner.as_iterable();
        match iterable {
            Some(iterable) => {
                let inner: Box<dyn CelIterator<'b, 'x> + 'b> = iterable.iter();
                Box::new(MeteredIter(inner))
            }
            None => Box::new(Empty),
        }
    }
}

/// Iterates the inner range, counting each step against the budget.
struct MeteredIter<'b, 'x>(Box<dyn CelIterator<'b, 'x> + 'b>);

impl<'b, 'x: 'v, 'v> CelIterator<'b, 'v> for MeteredIter<'b, 'x> {
    fn next(&mut self) -> Option<&'b (dyn Val + 'v)> {
        if !tick() {
            return None;
        }
        self.0.next().map(|v| v as &'b (dyn Val + 'v))
    }
}

struct Empty;

impl<'b, 'v> CelIterator<'b, 'v> for Empty {
    fn next(&mut self) -> Option<&'b (dyn Val + 'v)> {
        None
    }
}

/// The [`BUDGET_FUNCTION`] overload: its argument, metered when it is iterable.
pub(crate) fn budget<'b, 'v>(
    mut args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    if args.len() != 1 {
        return Err(ExecutionError::invalid_argument_count(1, args.len()));
    }
    let range = args.remove(0);
    if range.as_iterable().is_none() {
        // Let the comprehension report its own type error.
        return Ok(range);
    }
    Ok(CowVal::Owned(Box::new(Metered {
        inner: range.into_owned(),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_comprehension_range_is_metered() {
        let env = cel::Env::stdlib();
        let mut expr = env
            .parser()
            .parse("[1, 2].map(x, [3].exists(y, y == x))")
            .expect("parses");
        meter_comprehensions(&mut expr);
        let printed = format!("{expr:?}");
        let metered = printed
            .matches(&format!("func_name: {BUDGET_FUNCTION:?}"))
            .count();
        assert_eq!(metered, 2, "{printed}");
    }

    #[test]
    fn ticks_stop_when_the_budget_is_spent() {
        let limits = Limits {
            max_iterations: 3,
            ..Limits::default()
        };
        let budget = Budget::start(&limits);
        assert!(tick() && tick() && tick());
        assert!(!tick());
        assert!(matches!(budget.finish(), Err(EvalError::Timeout { .. })));
        // Without a running budget nothing is metered.
        assert!(tick());
    }
}
