//! JSON to CEL values and back.

use std::collections::HashMap;

use cel::Value;
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::Val;
use cel::objects::{Key, OptionalValue};

use crate::cel::k8s_functions::cel_go::go_shortest_g;
use crate::cel::k8s_functions::quantity::Quantity;
pub(crate) use crate::cel::k8s_functions::type_name;
use crate::cel::k8s_functions::url::Url;
use crate::error::EvalError;

/// A JSON value as a CEL value that borrows its strings. Integers become `int` (or `uint`
/// above `i64::MAX`), so `object.spec.replicas + 1` works.
pub(crate) fn json_to_val(json: &serde_json::Value) -> Box<dyn Val + '_> {
    json_to::<Borrowed>(json)
}

/// How a conversion gets its strings from JSON of lifetime `'j` into values of lifetime `'v`.
pub(crate) trait Strings<'j, 'v> {
    /// A string value.
    fn string(s: &'j str) -> CelString<'v>;
    /// A map key.
    fn key(s: &'j str) -> CelMapKey<'v>;
}

/// Values that borrow the JSON's strings (nothing copied).
pub(crate) struct Borrowed;

impl<'j> Strings<'j, 'j> for Borrowed {
    fn string(s: &'j str) -> CelString<'j> {
        CelString::from(s)
    }
    fn key(s: &'j str) -> CelMapKey<'j> {
        CelMapKey::from(s)
    }
}

/// Values that own copies of the strings (to outlive the JSON).
pub(crate) struct Owned;

impl<'j> Strings<'j, 'static> for Owned {
    fn string(s: &'j str) -> CelString<'static> {
        CelString::from(s.to_string())
    }
    fn key(s: &'j str) -> CelMapKey<'static> {
        CelMapKey::from(s.to_string())
    }
}

/// `json` as a CEL value, its strings as `S` makes them.
pub(crate) fn json_to<'j, 'v, S: Strings<'j, 'v>>(
    json: &'j serde_json::Value,
) -> Box<dyn Val + 'v> {
    match json {
        serde_json::Value::Null => Box::new(CelNull),
        serde_json::Value::Bool(b) => Box::new(CelBool::from(*b)),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Box::new(CelInt::from(i))
            } else if let Some(u) = n.as_u64() {
                Box::new(CelUInt::from(u))
            } else {
                Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN)))
            }
        }
        serde_json::Value::String(s) => Box::new(S::string(s)),
        serde_json::Value::Array(items) => Box::new(CelList::from(
            items.iter().map(json_to::<S>).collect::<Vec<_>>(),
        )),
        serde_json::Value::Object(fields) => {
            let map: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> = fields
                .iter()
                .map(|(k, v)| (S::key(k), json_to::<S>(v)))
                .collect();
            Box::new(CelMap::from(map))
        }
    }
}

/// A CEL result as JSON; types without a JSON form are an error.
pub(crate) fn value_to_json(value: &Value) -> Result<serde_json::Value, EvalError> {
    Ok(match value {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(i) => serde_json::Value::from(*i),
        Value::UInt(u) => serde_json::Value::from(*u),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .ok_or_else(|| wrong("a finite number", &f.to_string()))?,
        Value::String(s) => serde_json::Value::String(s.to_string()),
        Value::Bytes(b) => serde_json::Value::String(String::from_utf8_lossy(b).into_owned()),
        Value::List(items) => {
            serde_json::Value::Array(items.iter().map(value_to_json).collect::<Result<_, _>>()?)
        }
        Value::Map(map) => {
            let mut out = serde_json::Map::new();
            for (k, v) in map.map.iter() {
                out.insert(key_string(k), value_to_json(v)?);
            }
            serde_json::Value::Object(out)
        }
        Value::Duration(d) => {
            serde_json::Value::String(format!("{}s", d.num_milliseconds() as f64 / 1000.0))
        }
        Value::Timestamp(t) => serde_json::Value::String(t.to_rfc3339()),
        Value::Opaque(o) => {
            if let Some(q) = o.downcast_ref::<Quantity>() {
                serde_json::Value::String(q.to_string())
            } else if let Some(url) = o.downcast_ref::<Url>() {
                serde_json::Value::String(url.as_str().to_string())
            } else if let Some(opt) = o.downcast_ref::<OptionalValue>() {
                match opt.value() {
                    Some(v) => value_to_json(v)?,
                    None => serde_json::Value::Null,
                }
            } else {
                return Err(wrong("a JSON value", o.runtime_type_name()));
            }
        }
        other => return Err(wrong("a JSON value", &type_name(other))),
    })
}

/// An expression's result with its CEL type, for showing a result that has no JSON form.
#[derive(Clone, Debug, PartialEq)]
pub struct TypedValue {
    /// CEL's name for its type (`int`, `list`, `net.IP`, ...).
    pub type_name: String,
    /// Its JSON form, or `None` when it has none (an IP, a CIDR, a semver, NaN, a list of
    /// IPs, ...).
    pub json: Option<serde_json::Value>,
    /// Its string form: for a string, the string; for a Kubernetes library value (an IP, a
    /// CIDR, a semver, ...) its string form (`1.2.3.4`); otherwise [`TypedValue::canonical`].
    pub text: String,
    /// Its canonical rendering: CEL-literal-like (`"a"`, `1u`, `2.5d`, `[1, 2]`, map entries
    /// sorted, `net.IP(1.2.3.4)`), the form the conformance tables compare with cel-go's.
    pub canonical: String,
}

impl TypedValue {
    /// `value` with its type, JSON form, string form and canonical rendering.
    pub(crate) fn of(value: &Value) -> TypedValue {
        let canonical = canonical(value);
        let text = match value {
            Value::String(s) => s.to_string(),
            Value::Opaque(o) => crate::cel::k8s_functions::opaque_text(o.as_ref())
                .unwrap_or_else(|| canonical.clone()),
            _ => canonical.clone(),
        };
        TypedValue {
            type_name: type_name(value),
            json: value_to_json(value).ok(),
            text,
            canonical,
        }
    }
}

/// The canonical rendering of `value` (see [`TypedValue::canonical`]); the Go side of the
/// conformance comparison (benches/celgo/cases.go, `renderValue`) writes the same.
pub(crate) fn canonical(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => format!("{u}u"),
        Value::Float(f) => canonical_double(*f),
        Value::String(s) => serde_json::Value::String(s.to_string()).to_string(),
        Value::Bytes(b) => {
            let hex: String = b.iter().map(|byte| format!("{byte:02x}")).collect();
            format!("b'{hex}'")
        }
        Value::List(items) => {
            let items: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Map(map) => {
            let mut entries: Vec<String> = map
                .map
                .iter()
                .map(|(k, v)| format!("{}: {}", canonical_key(k), canonical(v)))
                .collect();
            entries.sort();
            format!("{{{}}}", entries.join(", "))
        }
        Value::Duration(d) => match d.num_nanoseconds() {
            Some(ns) => format!("duration({ns}ns)"),
            None => format!("duration({}ms)", d.num_milliseconds()),
        },
        Value::Timestamp(t) => format!(
            "timestamp({}.{:09})",
            t.timestamp(),
            t.timestamp_subsec_nanos()
        ),
        Value::Opaque(o) => {
            if let Some(opt) = o.downcast_ref::<OptionalValue>() {
                match opt.value() {
                    Some(v) => format!("optional.of({})", canonical(v)),
                    None => "optional.none()".to_string(),
                }
            } else {
                let text = crate::cel::k8s_functions::opaque_text(o.as_ref())
                    .unwrap_or_else(|| format!("{:?}", o.as_debug()));
                format!("{}({text})", o.runtime_type_name())
            }
        }
        other => format!("{other:?}"),
    }
}

fn canonical_key(key: &Key) -> String {
    match key {
        Key::Int(i) => i.to_string(),
        Key::Uint(u) => format!("{u}u"),
        Key::Bool(b) => b.to_string(),
        Key::String(s) => serde_json::Value::String(s.to_string()).to_string(),
    }
}

/// A double as Go's `strconv.FormatFloat(f, 'g', -1, 64)` writes it (the shortest digits that
/// read back; exponent form below 1e-4 and from 1e6), then `d`; `NaN`, `+Inf`, `-Inf` as such.
fn canonical_double(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    format!("{}d", go_shortest_g(f))
}

fn key_string(key: &Key) -> String {
    match key {
        Key::Int(i) => i.to_string(),
        Key::Uint(u) => u.to_string(),
        Key::Bool(b) => b.to_string(),
        Key::String(s) => s.to_string(),
    }
}

fn wrong(expected: &str, got: &str) -> EvalError {
    EvalError::WrongType {
        expected: expected.to_string(),
        got: got.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_round_trips_through_cel_values() {
        let json = json!({"a": [1, -2, 3.5, "x", true, null], "b": {"c": 18446744073709551615u64}});
        let val = json_to_val(&json);
        let value = Value::try_from(val.as_ref()).unwrap();
        assert_eq!(value_to_json(&value).unwrap(), json);
    }

    #[test]
    fn integers_become_ints() {
        let json = json!(3);
        let value = Value::try_from(json_to_val(&json).as_ref()).unwrap();
        assert_eq!(value, Value::Int(3));
    }

    #[test]
    fn non_finite_floats_are_an_error() {
        assert!(value_to_json(&Value::Float(f64::NAN)).is_err());
    }
}
