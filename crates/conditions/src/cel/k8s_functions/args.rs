//! What every overload of these libraries shares: argument checks and conversions between cel's
//! value forms.

use std::sync::Arc;

use cel::common::types::{CelList, CelMap, CelType, Kind};
use cel::common::value::{CowVal, Val};
use cel::objects::{Key, Map, Opaque};
use cel::{ExecutionError, Value};

/// Declares an overload `fn(Vec<CowVal>)` that converts its arguments to [`Value`]s, calls
/// `$imp(&[Value]) -> Result<Value, ExecutionError>` and converts the result back.
macro_rules! value_overload {
    ($name:ident, $imp:path) => {
        pub(crate) fn $name<'b, 'v>(
            args: Vec<cel::common::value::CowVal<'b, 'v>>,
        ) -> Result<cel::common::value::CowVal<'b, 'v>, cel::ExecutionError> {
            let values = $crate::cel::k8s_functions::args::values(&args)?;
            $crate::cel::k8s_functions::args::owned($imp(&values)?)
        }
    };
}
pub(crate) use value_overload;

/// The arguments of an overload as [`Value`]s.
pub(crate) fn values(args: &[CowVal<'_, '_>]) -> Result<Vec<Value>, ExecutionError> {
    args.iter().map(|a| Value::try_from(a.as_ref())).collect()
}

/// A type value (`int`, `type`, `net.IP`, ...), which [`Value`] cannot hold: cel's conversion
/// turns it into a string of its name, which would then print quoted and compare equal to
/// that string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TypeValue(pub(crate) String);

impl Opaque for TypeValue {
    fn runtime_type_name(&self) -> &str {
        "type"
    }
}

/// `value` as a [`Value`], type values (also inside lists and maps) kept as [`TypeValue`]s.
pub(crate) fn value_keeping_types(value: &dyn Val) -> Result<Value, ExecutionError> {
    match value.get_type().kind() {
        Kind::Type => {
            if let Some(t) = value.downcast_ref::<CelType>() {
                return Ok(Value::Opaque(Arc::new(TypeValue(t.name().to_string()))));
            }
        }
        Kind::List => {
            if let Some(list) = value.downcast_ref::<CelList>() {
                let items = list
                    .inner()
                    .iter()
                    .map(|item| value_keeping_types(item.as_ref()))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok(Value::List(Arc::new(items)));
            }
        }
        Kind::Map => {
            if let Some(map) = value.downcast_ref::<CelMap>() {
                let entries = map
                    .inner()
                    .iter()
                    .map(|(k, v)| Ok((Key::from(k.clone()), value_keeping_types(v.as_ref())?)))
                    .collect::<Result<std::collections::HashMap<_, _>, ExecutionError>>()?;
                return Ok(Value::Map(Map {
                    map: Arc::new(entries),
                }));
            }
        }
        _ => {}
    }
    Value::try_from(value)
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
