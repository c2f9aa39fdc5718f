//! The Kubernetes regex library: `string.find(regex)`, `string.findAll(regex[, limit])`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cel::common::types::{INT_TYPE, STRING_TYPE};
use cel::{DeclarationError, Env, ExecutionError, Value};
use regex::Regex;

use super::args::{arity, value_overload};

/// Most compiled patterns kept.
const CACHE_CAPACITY: usize = 256;
/// Size limit of one compiled pattern, so a pattern cannot take unbounded memory.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

value_overload!(find_overload, find);
value_overload!(find_all_overload, find_all);
value_overload!(find_all_n_overload, find_all_n);

/// Registers `find` and `findAll` as members of `string`.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload(
        "find",
        "string.find(string)",
        STRING_TYPE,
        vec![STRING_TYPE],
        find_overload,
    )?;
    env.add_member_overload(
        "findAll",
        "string.findAll(string)",
        STRING_TYPE,
        vec![STRING_TYPE],
        find_all_overload,
    )?;
    env.add_member_overload(
        "findAll",
        "string.findAll(string,int)",
        STRING_TYPE,
        vec![STRING_TYPE, INT_TYPE],
        find_all_n_overload,
    )?;
    Ok(())
}

static CACHE: Mutex<Option<HashMap<String, Arc<Regex>>>> = Mutex::new(None);

/// The compiled `pattern`, from a small cache (patterns are usually literals). The lock is held
/// only to look up and to insert: a pattern compiles outside it (bounded by
/// [`PATTERN_SIZE_LIMIT`]), so a slow compile does not hold up other evaluations. The compile
/// is charged to the running evaluation's budget, one unit per pattern byte, hit or miss, so
/// the cost does not depend on what else ran.
fn compiled(function: &str, pattern: &str) -> Result<Arc<Regex>, ExecutionError> {
    crate::cel::budget::charge_or_stop(function, pattern.len() as u64)?;
    if let Some(re) = lock().as_ref().and_then(|cache| cache.get(pattern)) {
        return Ok(re.clone());
    }
    let re = regex::RegexBuilder::new(pattern)
        .size_limit(PATTERN_SIZE_LIMIT)
        .build()
        .map_err(|e| ExecutionError::function_error(function, format!("invalid regex: {e}")))?;
    let re = Arc::new(re);
    let mut guard = lock();
    let cache = guard.get_or_insert_with(HashMap::new);
    if cache.len() >= CACHE_CAPACITY {
        cache.clear();
    }
    // Another evaluation may have compiled it meanwhile: either copy will do.
    cache.insert(pattern.to_string(), re.clone());
    Ok(re)
}

fn lock() -> std::sync::MutexGuard<'static, Option<HashMap<String, Arc<Regex>>>> {
    // A panic while holding the lock cannot leave the map inconsistent: keep using it.
    CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn strings<'a>(
    function: &str,
    a: &'a Value,
    b: &'a Value,
) -> Result<(&'a str, &'a str), ExecutionError> {
    match (a, b) {
        (Value::String(a), Value::String(b)) => Ok((a.as_str(), b.as_str())),
        _ => Err(ExecutionError::function_error(
            function,
            "expected string arguments",
        )),
    }
}

/// The first match, or "" when there is none.
fn find(args: &[Value]) -> Result<Value, ExecutionError> {
    let [this, pattern] = arity::<2>("find", args)?;
    let (this, pattern) = strings("find", this, pattern)?;
    let re = compiled("find", pattern)?;
    Ok(Value::String(Arc::new(
        re.find(this)
            .map(|m| m.as_str().to_string())
            .unwrap_or_default(),
    )))
}

fn find_up_to(this: &str, pattern: &str, limit: Option<usize>) -> Result<Value, ExecutionError> {
    let re = compiled("findAll", pattern)?;
    let matches = re
        .find_iter(this)
        .take(limit.unwrap_or(usize::MAX))
        .map(|m| Value::String(Arc::new(m.as_str().to_string())))
        .collect::<Vec<_>>();
    Ok(Value::List(Arc::new(matches)))
}

/// Every match.
fn find_all(args: &[Value]) -> Result<Value, ExecutionError> {
    let [this, pattern] = arity::<2>("findAll", args)?;
    let (this, pattern) = strings("findAll", this, pattern)?;
    find_up_to(this, pattern, None)
}

/// At most `limit` matches; a negative limit means all.
fn find_all_n(args: &[Value]) -> Result<Value, ExecutionError> {
    let [this, pattern, limit] = arity::<3>("findAll", args)?;
    let (this, pattern) = strings("findAll", this, pattern)?;
    let limit = match limit {
        Value::Int(n) if *n < 0 => None,
        Value::Int(n) => Some(usize::try_from(*n).unwrap_or(usize::MAX)),
        _ => {
            return Err(ExecutionError::function_error(
                "findAll",
                "limit must be an int",
            ));
        }
    };
    find_up_to(this, pattern, limit)
}
