//! What every overload of these libraries shares: argument checks and conversions between cel's
//! value forms.

use cel::common::value::{CowVal, Val};
use cel::{ExecutionError, Value};

/// Declares an overload `fn(Vec<CowVal>)` that converts its arguments to [`Value`]s, calls
/// `$imp(&[Value]) -> Result<Value, ExecutionError>` and converts the result back.
macro_rules! value_overload {
    ($name:ident, $imp:path) => {
        pub(crate) fn $name<'b, 'v>(
            args: Vec<cel::common::value::CowVal<'b, 'v>>,
        ) -> Result<cel::common::value::CowVal<'b, 'v>, cel::ExecutionError> {
            let values = $crate::k8s_functions::args::values(&args)?;
            $crate::k8s_functions::args::owned($imp(&values)?)
        }
    };
}
pub(crate) use value_overload;

/// The arguments of an overload as [`Value`]s.
pub(crate) fn values(args: &[CowVal<'_, '_>]) -> Result<Vec<Value>, ExecutionError> {
    args.iter().map(|a| Value::try_from(a.as_ref())).collect()
}

/// A [`Value`] as an overload's result.
pub(crate) fn owned<'b, 'v>(value: Value) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let boxed: Box<dyn Val> = value.try_into()?;
    Ok(CowVal::Owned(boxed))
}

/// Exactly `N` arguments, or an error naming `function`.
pub(crate) fn arity<'a, const N: usize>(
    function: &str,
    args: &'a [Value],
) -> Result<&'a [Value; N], ExecutionError> {
    args.try_into().map_err(|_| {
        ExecutionError::function_error(
            function,
            format!("expected {N} arguments, got {}", args.len()),
        )
    })
}

/// The string in `v`, or an error naming `function`.
pub(crate) fn string_arg<'a>(function: &str, v: &'a Value) -> Result<&'a str, ExecutionError> {
    match v {
        Value::String(s) => Ok(s.as_str()),
        _ => Err(ExecutionError::function_error(
            function,
            "expected a string",
        )),
    }
}

/// CEL's name for the type of `value` (the conversions to JSON use it too: it lives here so
/// that the dependency between them and these libraries goes one way).
pub(crate) fn type_name(value: &Value) -> String {
    match value {
        Value::Opaque(o) => o.runtime_type_name().to_string(),
        other => other.type_of().to_string(),
    }
}
