//! Run-time metering of evaluations against a manifest's cost budget.
//!
//! [`crate::cel::cost`] instruments every expression: each comprehension's range is wrapped in a call
//! to [`BUDGET_FUNCTION`], which returns an iterable that charges every iteration (its body's
//! units) and the sized operands are wrapped in [`SIZE_FUNCTION`], which charges their size. The
//! charges are counted against the [`ManifestBudget`] the evaluation runs under. When it runs
//! out, or the expression's iterations or its wall-clock deadline (a safety net only), the
//! iteration ends early, the evaluation unwinds within one loop body, and the (meaningless)
//! result is replaced by an error. Nothing keeps running after the caller gets its answer, and
//! no thread is needed.

use std::cell::{Cell, RefCell};
use std::time::Instant;

use cel::ExecutionError;
use cel::common::traits::{Iterable, Iterator as CelIterator, Sizer};
use cel::common::types::{CelBytes, CelInt, CelString, DYN_TYPE, INT_TYPE, Type};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env};

use crate::cel::cost::{BUDGET_FUNCTION, SIZE_FUNCTION, string_units};
use crate::error::EvalError;
use crate::limits::Limits;

/// Registers the internal metering functions.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(
        BUDGET_FUNCTION,
        "@budget(dyn,int)",
        vec![DYN_TYPE, INT_TYPE],
        budget,
    )?;
    env.add_overload(SIZE_FUNCTION, "@size_cost(dyn)", vec![DYN_TYPE], size_cost)
}

/// The cost units one manifest's evaluations may spend together (all rules, all expressions,
/// message expressions included).
#[derive(Debug)]
pub(crate) struct ManifestBudget {
    limit: u64,
    remaining: Cell<u64>,
    exhausted_at: RefCell<Option<String>>,
}

impl ManifestBudget {
    /// A full budget of `limits.manifest_cost_budget` units.
    pub(crate) fn new(limits: &Limits) -> Self {
        Self {
            limit: limits.manifest_cost_budget,
            remaining: Cell::new(limits.manifest_cost_budget),
            exhausted_at: RefCell::new(None),
        }
    }

    /// Units left.
    #[cfg(test)]
    pub(crate) fn remaining(&self) -> u64 {
        self.remaining.get()
    }

    /// Where the budget ran out (`rule X celExpressions[i]`), once it has.
    pub(crate) fn exhausted_at(&self) -> Option<String> {
        self.exhausted_at.borrow().clone()
    }

    /// Records where the budget ran out (the first place only).
    pub(crate) fn mark_exhausted(&self, at: &str) {
        let mut slot = self.exhausted_at.borrow_mut();
        if slot.is_none() {
            *slot = Some(at.to_string());
        }
    }

    /// The error of an evaluation stopped by this budget.
    pub(crate) fn exceeded(&self) -> EvalError {
        self.remaining.set(0);
        EvalError::BudgetExceeded { limit: self.limit }
    }

    /// Runs `f` (one evaluation costing `static_cost` up front) metered against this budget and
    /// the per-expression `limits`.
    pub(crate) fn meter<R>(
        &self,
        limits: &Limits,
        static_cost: u64,
        f: impl FnOnce() -> R,
    ) -> Result<R, EvalError> {
        let Some(left) = self.remaining.get().checked_sub(static_cost) else {
            return Err(self.exceeded());
        };
        let run = Run::start(limits, left);
        let result = f();
        let (left, stopped) = run.finish();
        self.remaining.set(left);
        match stopped {
            None => Ok(result),
            Some(Stop::Cost) => Err(self.exceeded()),
            Some(Stop::Iterations) => Err(EvalError::Timeout {
                message: format!(
                    "more than {} comprehension iterations",
                    limits.max_iterations
                ),
            }),
            Some(Stop::Deadline) => Err(EvalError::Timeout {
                message: format!("ran longer than {:?}", limits.max_evaluation_time),
            }),
        }
    }
}

/// Why a metered evaluation was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Cost,
    Iterations,
    Deadline,
}

thread_local! {
    static COST_LEFT: Cell<u64> = const { Cell::new(u64::MAX) };
    static ITERATIONS_LEFT: Cell<u64> = const { Cell::new(u64::MAX) };
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    static STOPPED: Cell<Option<Stop>> = const { Cell::new(None) };
}

/// The metering of one evaluation on this thread; ends with [`Run::finish`] or drop.
struct Run;

impl Run {
    fn start(limits: &Limits, cost_left: u64) -> Run {
        COST_LEFT.with(|c| c.set(cost_left));
        ITERATIONS_LEFT.with(|r| r.set(limits.max_iterations));
        DEADLINE.with(|d| d.set(Instant::now().checked_add(limits.max_evaluation_time)));
        STOPPED.with(|s| s.set(None));
        Run
    }

    /// Units left and why the evaluation was stopped, if it was.
    fn finish(self) -> (u64, Option<Stop>) {
        (COST_LEFT.with(Cell::get), STOPPED.with(Cell::get))
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        COST_LEFT.with(|c| c.set(u64::MAX));
        ITERATIONS_LEFT.with(|r| r.set(u64::MAX));
        DEADLINE.with(|d| d.set(None));
        STOPPED.with(|s| s.set(None));
    }
}

/// Charges `units` to the running evaluation; false (and the evaluation stopped) when the
/// budget cannot pay them.
pub(crate) fn charge(units: u64) -> bool {
    if STOPPED.with(Cell::get).is_some() {
        return false;
    }
    let left = COST_LEFT.with(Cell::get);
    match left.checked_sub(units) {
        Some(left) => {
            COST_LEFT.with(|c| c.set(left));
            true
        }
        None => {
            COST_LEFT.with(|c| c.set(0));
            STOPPED.with(|s| s.set(Some(Stop::Cost)));
            false
        }
    }
}

/// [`charge`], as the error a CEL function returns when it cannot be paid.
pub(crate) fn charge_or_stop(function: &str, units: u64) -> Result<(), ExecutionError> {
    if charge(units) {
        Ok(())
    } else {
        Err(ExecutionError::function_error(
            function,
            "the CEL cost budget is exhausted",
        ))
    }
}

/// Counts one iteration costing `units`; false once a limit is reached.
fn tick(units: u64) -> bool {
    if !charge(units) {
        return false;
    }
    let remaining = ITERATIONS_LEFT.with(Cell::get);
    if remaining == 0 {
        STOPPED.with(|s| s.set(Some(Stop::Iterations)));
        return false;
    }
    ITERATIONS_LEFT.with(|r| r.set(remaining - 1));
    // The deadline is a safety net for work the cost count misses; reading the clock (~25 ns)
    // is small next to an iteration of the interpreter.
    if let Some(deadline) = DEADLINE.with(Cell::get)
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
    units_per_iteration: u64,
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
            units_per_iteration: self.units_per_iteration,
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
                Box::new(MeteredIter {
                    inner,
                    units: self.units_per_iteration,
                })
            }
            None => Box::new(Empty),
        }
    }
}

/// Iterates the inner range, charging each step.
struct MeteredIter<'b, 'x> {
    inner: Box<dyn CelIterator<'b, 'x> + 'b>,
    units: u64,
}

impl<'b, 'x: 'v, 'v> CelIterator<'b, 'v> for MeteredIter<'b, 'x> {
    fn next(&mut self) -> Option<&'b (dyn Val + 'v)> {
        if !tick(self.units) {
            return None;
        }
        self.inner.next().map(|v| v as &'b (dyn Val + 'v))
    }
}

struct Empty;

impl<'b, 'v> CelIterator<'b, 'v> for Empty {
    fn next(&mut self) -> Option<&'b (dyn Val + 'v)> {
        None
    }
}

/// The [`BUDGET_FUNCTION`] overload `(range, units per iteration)`: the range, metered when it
/// is iterable.
fn budget<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    if args.len() != 2 {
        return Err(ExecutionError::invalid_argument_count(2, args.len()));
    }
    let units = args[1]
        .downcast_ref::<CelInt>()
        .map_or(1, |i| u64::try_from(*i.inner()).unwrap_or(1));
    let range = args.swap_remove(0);
    if range.as_iterable().is_none() {
        // Let the comprehension report its own type error.
        return Ok(range);
    }
    Ok(CowVal::Owned(Box::new(Metered {
        inner: range.into_owned(),
        units_per_iteration: units,
    })))
}

/// The [`SIZE_FUNCTION`] overload: charges its argument's size and returns it unchanged.
fn size_cost<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    if args.len() != 1 {
        return Err(ExecutionError::invalid_argument_count(1, args.len()));
    }
    let value = args.swap_remove(0);
    charge_or_stop(SIZE_FUNCTION, size_units(value.as_ref()))?;
    Ok(value)
}

/// What a value's size costs: one unit per element, or per [`crate::cel::cost::BYTES_PER_UNIT`]
/// bytes of a string.
fn size_units(value: &dyn Val) -> u64 {
    if let Some(s) = value.downcast_ref::<CelString>() {
        string_units(s.inner().len())
    } else if let Some(b) = value.downcast_ref::<CelBytes>() {
        string_units(b.inner().len())
    } else if let Some(sizer) = value.as_sizer() {
        u64::try_from(*sizer.size().inner()).unwrap_or(0)
    } else {
        0
    }
}

/// Runs `f` metered with `cost` units; what is left and why it stopped.
#[cfg(test)]
fn with_budget<R>(limits: &Limits, cost: u64, f: impl FnOnce() -> R) -> (R, u64, Option<Stop>) {
    let run = Run::start(limits, cost);
    let r = f();
    let (left, stopped) = run.finish();
    (r, left, stopped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_stop_when_the_iterations_are_spent() {
        let limits = Limits {
            max_iterations: 3,
            ..Limits::default()
        };
        let ((), _, stopped) = with_budget(&limits, 100, || {
            assert!(tick(1) && tick(1) && tick(1));
            assert!(!tick(1));
        });
        assert_eq!(stopped, Some(Stop::Iterations));
        // Without a running evaluation nothing is metered.
        assert!(tick(1));
    }

    #[test]
    fn charges_stop_when_the_cost_is_spent() {
        let ((), left, stopped) = with_budget(&Limits::default(), 10, || {
            assert!(charge(4) && tick(5));
            assert!(!tick(2));
            assert!(!charge(0), "stays stopped");
        });
        assert_eq!((left, stopped), (0, Some(Stop::Cost)));
    }

    #[test]
    fn a_manifest_budget_is_shared_by_its_evaluations() {
        let limits = Limits {
            manifest_cost_budget: 10,
            ..Limits::default()
        };
        let budget = ManifestBudget::new(&limits);
        assert_eq!(budget.meter(&limits, 4, || charge(3)), Ok(true));
        assert_eq!(budget.remaining(), 3);
        assert_eq!(
            budget.meter(&limits, 4, || ()),
            Err(EvalError::BudgetExceeded { limit: 10 })
        );
        assert_eq!(budget.remaining(), 0);
    }
}
