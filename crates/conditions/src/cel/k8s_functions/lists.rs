//! The Kubernetes list library: `sum`, `min`, `max`, `isSorted`, `indexOf`, `lastIndexOf`;
//! and cel-go's sets extension, which the Kubernetes environment includes: `sets.contains(l,
//! sub)`, `sets.equivalent(a, b)`, `sets.intersects(a, b)` (elements compared as `==` does,
//! numbers across kinds by value).

use std::cmp::Ordering;

use cel::common::types::{DYN_TYPE, LIST_TYPE};
use cel::{DeclarationError, Env, ExecutionError, Value};

use super::args::{arity, value_overload};

value_overload!(sum_overload, sum);
value_overload!(min_overload, min);
value_overload!(max_overload, max);
value_overload!(is_sorted_overload, is_sorted);
value_overload!(index_of_overload, index_of);
value_overload!(last_index_of_overload, last_index_of);
value_overload!(sets_contains_overload, sets_contains);
value_overload!(sets_equivalent_overload, sets_equivalent);
value_overload!(sets_intersects_overload, sets_intersects);

/// Registers the list functions as members of `list`.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("sum", "list.sum()", LIST_TYPE, vec![], sum_overload)?;
    env.add_member_overload("min", "list.min()", LIST_TYPE, vec![], min_overload)?;
    env.add_member_overload("max", "list.max()", LIST_TYPE, vec![], max_overload)?;
    env.add_member_overload(
        "isSorted",
        "list.isSorted()",
        LIST_TYPE,
        vec![],
        is_sorted_overload,
    )?;
    env.add_member_overload(
        "indexOf",
        "list.indexOf(dyn)",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of_overload,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list.lastIndexOf(dyn)",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of_overload,
    )?;
    let sets: [(&str, cel::common::functions::Function); 3] = [
        ("sets.contains", sets_contains_overload),
        ("sets.equivalent", sets_equivalent_overload),
        ("sets.intersects", sets_intersects_overload),
    ];
    for (name, f) in sets {
        env.add_overload(name, name, vec![LIST_TYPE, LIST_TYPE], f)?;
    }
    Ok(())
}

/// The two list arguments of a `sets` function.
fn two_lists<'a>(function: &str, args: &'a [Value]) -> Result<[&'a [Value]; 2], ExecutionError> {
    let [a, b] = arity::<2>(function, args)?;
    Ok([list(function, a)?, list(function, b)?])
}

/// Every element of `sub` is in `list`.
fn contains_all(list: &[Value], sub: &[Value]) -> bool {
    sub.iter().all(|x| list.iter().any(|y| equal(x, y)))
}

fn sets_contains(args: &[Value]) -> Result<Value, ExecutionError> {
    let [list, sub] = two_lists("sets.contains", args)?;
    Ok(Value::Bool(contains_all(list, sub)))
}

fn sets_equivalent(args: &[Value]) -> Result<Value, ExecutionError> {
    let [a, b] = two_lists("sets.equivalent", args)?;
    Ok(Value::Bool(contains_all(a, b) && contains_all(b, a)))
}

fn sets_intersects(args: &[Value]) -> Result<Value, ExecutionError> {
    let [a, b] = two_lists("sets.intersects", args)?;
    Ok(Value::Bool(a.iter().any(|x| b.iter().any(|y| equal(x, y)))))
}

fn list<'a>(function: &str, value: &'a Value) -> Result<&'a [Value], ExecutionError> {
    match value {
        Value::List(items) => Ok(items.as_slice()),
        other => Err(ExecutionError::function_error(
            function,
            format!("expected a list, got {}", other.type_of()),
        )),
    }
}

/// Sum of a list of ints, uints, doubles or durations (one kind); 0 for an empty list.
fn sum(args: &[Value]) -> Result<Value, ExecutionError> {
    let [this] = arity::<1>("sum", args)?;
    let items = list("sum", this)?;
    let overflow = || ExecutionError::function_error("sum", "overflow");
    let mut acc = match items.first() {
        None => return Ok(Value::Int(0)),
        Some(Value::Int(_)) => Value::Int(0),
        Some(Value::UInt(_)) => Value::UInt(0),
        Some(Value::Float(_)) => Value::Float(0.0),
        Some(Value::Duration(_)) => Value::Duration(chrono::Duration::zero()),
        Some(other) => {
            return Err(ExecutionError::function_error(
                "sum",
                format!("cannot sum {}", other.type_of()),
            ));
        }
    };
    for item in items {
        acc = match (acc, item) {
            (Value::Int(a), Value::Int(b)) => Value::Int(a.checked_add(*b).ok_or_else(overflow)?),
            (Value::UInt(a), Value::UInt(b)) => {
                Value::UInt(a.checked_add(*b).ok_or_else(overflow)?)
            }
            (Value::Float(a), Value::Float(b)) => Value::Float(a + b),
            (Value::Duration(a), Value::Duration(b)) => {
                Value::Duration(a.checked_add(b).ok_or_else(overflow)?)
            }
            (_, other) => {
                return Err(ExecutionError::function_error(
                    "sum",
                    format!("list mixes types: found {}", other.type_of()),
                ));
            }
        };
    }
    Ok(acc)
}

/// Ordering of two comparable values of one kind (numbers across kinds compare by value).
fn compare(function: &str, a: &Value, b: &Value) -> Result<Ordering, ExecutionError> {
    let ordering = match (a, b) {
        (Value::Int(x), Value::Int(y)) => Some(x.cmp(y)),
        (Value::UInt(x), Value::UInt(y)) => Some(x.cmp(y)),
        (Value::Float(x), Value::Float(y)) => x.partial_cmp(y),
        (Value::Int(x), Value::UInt(y)) => Some(i128::from(*x).cmp(&i128::from(*y))),
        (Value::UInt(x), Value::Int(y)) => Some(i128::from(*x).cmp(&i128::from(*y))),
        (Value::Int(x), Value::Float(y)) => (*x as f64).partial_cmp(y),
        (Value::Float(x), Value::Int(y)) => x.partial_cmp(&(*y as f64)),
        (Value::UInt(x), Value::Float(y)) => (*x as f64).partial_cmp(y),
        (Value::Float(x), Value::UInt(y)) => x.partial_cmp(&(*y as f64)),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        (Value::Bytes(x), Value::Bytes(y)) => Some(x.cmp(y)),
        (Value::Duration(x), Value::Duration(y)) => Some(x.cmp(y)),
        (Value::Timestamp(x), Value::Timestamp(y)) => Some(x.cmp(y)),
        _ => None,
    };
    ordering.ok_or_else(|| {
        ExecutionError::function_error(
            function,
            format!("cannot compare {} with {}", a.type_of(), b.type_of()),
        )
    })
}

fn extreme(function: &str, args: &[Value], keep: Ordering) -> Result<Value, ExecutionError> {
    let [this] = arity::<1>(function, args)?;
    let items = list(function, this)?;
    let mut best = items
        .first()
        .ok_or_else(|| ExecutionError::function_error(function, "called on an empty list"))?;
    for item in &items[1..] {
        if compare(function, item, best)? == keep {
            best = item;
        }
    }
    Ok(best.clone())
}

/// Smallest element; an error for an empty list.
fn min(args: &[Value]) -> Result<Value, ExecutionError> {
    extreme("min", args, Ordering::Less)
}

/// Largest element; an error for an empty list.
fn max(args: &[Value]) -> Result<Value, ExecutionError> {
    extreme("max", args, Ordering::Greater)
}

/// Whether the elements are in ascending order.
fn is_sorted(args: &[Value]) -> Result<Value, ExecutionError> {
    let [this] = arity::<1>("isSorted", args)?;
    let items = list("isSorted", this)?;
    for pair in items.windows(2) {
        if compare("isSorted", &pair[0], &pair[1])? == Ordering::Greater {
            return Ok(Value::Bool(false));
        }
    }
    Ok(Value::Bool(true))
}

fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (
            Value::Int(_) | Value::UInt(_) | Value::Float(_),
            Value::Int(_) | Value::UInt(_) | Value::Float(_),
        ) => compare("==", a, b) == Ok(Ordering::Equal),
        _ => a == b,
    }
}

/// Index of the first element equal to the argument, or -1.
fn index_of(args: &[Value]) -> Result<Value, ExecutionError> {
    let [this, needle] = arity::<2>("indexOf", args)?;
    let items = list("indexOf", this)?;
    Ok(Value::Int(
        items
            .iter()
            .position(|i| equal(i, needle))
            .map_or(-1, |i| i as i64),
    ))
}

/// Index of the last element equal to the argument, or -1.
fn last_index_of(args: &[Value]) -> Result<Value, ExecutionError> {
    let [this, needle] = arity::<2>("lastIndexOf", args)?;
    let items = list("lastIndexOf", this)?;
    Ok(Value::Int(
        items
            .iter()
            .rposition(|i| equal(i, needle))
            .map_or(-1, |i| i as i64),
    ))
}
