//! cel-go v0.26's behaviour where cel 0.15's differs, for the calls [`crate::cel::compat`] renames:
//! `s.indexOf(t, n)` and `s.lastIndexOf(t, n)` (-1 for an offset past the end),
//! `optional.ofNonZeroValue(x)` (the zero timestamp is a zero value) and `s.format(list)` as
//! the strings library of the Kubernetes environment (cel-go's formatting, version 1, locale
//! en-US) formats: `%s`, `%d`, `%f`, `%e`, `%b`, `%x`, `%X`, `%o`, an optional `.precision`,
//! `%%`. And cel-go's optional library over lists, which cel 0.15 lacks: `l.first()`,
//! `l.last()`, `l.unwrapOpt()` and `optional.unwrap(l)`. And `l.reverse()` for lists only
//! (strings library version 2 has no string `reverse`).

use std::sync::Arc;

use cel::common::types::{DYN_TYPE, LIST_TYPE, STRING_TYPE};
use cel::objects::{Key, OptionalValue};
use cel::{DeclarationError, Env, ExecutionError, Value};

use super::args::{TypeValue, arity, string_arg, value_overload};
use crate::cel::internal_names::{
    FORMAT, INDEX_OF_OFFSET, LAST_INDEX_OF_OFFSET, OF_NON_ZERO_VALUE, REVERSE, UNWRAP,
};

value_overload!(index_of_overload, index_of);
value_overload!(last_index_of_overload, last_index_of);
value_overload!(of_non_zero_value_overload, of_non_zero_value);
value_overload!(first_overload, first);
value_overload!(last_overload, last);
value_overload!(unwrap_overload, unwrap);
value_overload!(reverse_overload, reverse);

/// Registers our implementations under the names [`crate::cel::compat`] gives them.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let d = || DYN_TYPE;
    env.add_member_overload(
        INDEX_OF_OFFSET,
        INDEX_OF_OFFSET,
        STRING_TYPE,
        vec![d(), d()],
        index_of_overload,
    )?;
    env.add_member_overload(
        LAST_INDEX_OF_OFFSET,
        LAST_INDEX_OF_OFFSET,
        STRING_TYPE,
        vec![d(), d()],
        last_index_of_overload,
    )?;
    env.add_member_overload(FORMAT, FORMAT, STRING_TYPE, vec![d()], format_overload)?;
    env.add_overload(
        OF_NON_ZERO_VALUE,
        OF_NON_ZERO_VALUE,
        vec![d()],
        of_non_zero_value_overload,
    )?;
    env.add_member_overload("first", "list.first()", LIST_TYPE, vec![], first_overload)?;
    env.add_member_overload("last", "list.last()", LIST_TYPE, vec![], last_overload)?;
    env.add_member_overload(
        "unwrapOpt",
        "list.unwrapOpt()",
        LIST_TYPE,
        vec![],
        unwrap_overload,
    )?;
    env.add_overload(UNWRAP, UNWRAP, vec![LIST_TYPE], unwrap_overload)?;
    env.add_member_overload(REVERSE, REVERSE, LIST_TYPE, vec![], reverse_overload)
}

/// The list receiver of an optional-library function.
fn list_arg<'a>(function: &str, args: &'a [Value]) -> Result<&'a [Value], ExecutionError> {
    match arity::<1>(function, args)? {
        [Value::List(list)] => Ok(list.as_slice()),
        [other] => Err(ExecutionError::function_error(
            function,
            format!(
                "no such overload: {function}({})",
                super::args::type_name(other)
            ),
        )),
    }
}

/// `l.reverse()`: the list's elements in reverse order.
fn reverse(args: &[Value]) -> Result<Value, ExecutionError> {
    let list = list_arg("reverse", args)?;
    Ok(Value::List(Arc::new(list.iter().rev().cloned().collect())))
}

/// An optional of `value`, or `optional.none()`.
fn optional_of(value: Option<&Value>) -> Value {
    Value::Opaque(Arc::new(match value {
        Some(v) => OptionalValue::of(v.clone()),
        None => OptionalValue::none(),
    }))
}

/// `l.first()`: the first element as an optional, `optional.none()` for an empty list.
fn first(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(optional_of(list_arg("first", args)?.first()))
}

/// `l.last()`: the last element as an optional, `optional.none()` for an empty list.
fn last(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(optional_of(list_arg("last", args)?.last()))
}

/// `optional.unwrap(l)` and `l.unwrapOpt()`: the values of the optionals that have one, in
/// order; an element that is not an optional is an error, as cel-go's type check makes it.
fn unwrap(args: &[Value]) -> Result<Value, ExecutionError> {
    let list = list_arg("unwrapOpt", args)?;
    let mut values = Vec::with_capacity(list.len());
    for element in list {
        let optional = match element {
            Value::Opaque(o) => o.downcast_ref::<OptionalValue>(),
            _ => None,
        };
        let Some(optional) = optional else {
            return Err(ExecutionError::function_error(
                "unwrapOpt",
                format!(
                    "expected a list of optionals, found an element of type {}",
                    super::args::type_name(element)
                ),
            ));
        };
        if let Some(value) = optional.value() {
            values.push(value.clone());
        }
    }
    Ok(Value::List(Arc::new(values)))
}

/// The receiver, the searched string (as chars) and the offset of `indexOf`/`lastIndexOf`.
fn search_args(
    function: &str,
    args: &[Value],
) -> Result<(Vec<char>, Vec<char>, i64), ExecutionError> {
    let [this, sub, offset] = arity::<3>(function, args)?;
    let Value::Int(offset) = offset else {
        return Err(ExecutionError::function_error(
            function,
            "expected an int offset",
        ));
    };
    Ok((
        string_arg(function, this)?.chars().collect(),
        string_arg(function, sub)?.chars().collect(),
        *offset,
    ))
}

fn out_of_range(function: &str, offset: i64) -> ExecutionError {
    ExecutionError::function_error(function, format!("index out of range: {offset}"))
}

/// cel-go's `indexOfOffset`: in code points; an empty string is found at the offset.
fn index_of(args: &[Value]) -> Result<Value, ExecutionError> {
    let (s, sub, offset) = search_args("indexOf", args)?;
    if sub.is_empty() {
        return Ok(Value::Int(offset));
    }
    if offset < 0 {
        return Err(out_of_range("indexOf", offset));
    }
    let Ok(start) = usize::try_from(offset) else {
        return Ok(Value::Int(-1));
    };
    if start >= s.len() || sub.len() > s.len() {
        return Ok(Value::Int(-1));
    }
    let found = (start..=s.len() - sub.len()).find(|&i| s[i..i + sub.len()] == sub[..]);
    Ok(Value::Int(found.map_or(-1, |i| i as i64)))
}

/// cel-go's `lastIndexOfOffset`: in code points, searching back from the offset.
fn last_index_of(args: &[Value]) -> Result<Value, ExecutionError> {
    let (s, sub, offset) = search_args("lastIndexOf", args)?;
    if sub.is_empty() {
        return Ok(Value::Int(offset));
    }
    if offset < 0 {
        return Err(out_of_range("lastIndexOf", offset));
    }
    let Ok(start) = usize::try_from(offset) else {
        return Ok(Value::Int(-1));
    };
    if start >= s.len() || sub.len() > s.len() {
        return Ok(Value::Int(-1));
    }
    let start = start.min(s.len() - sub.len());
    let found = (0..=start).rev().find(|&i| s[i..i + sub.len()] == sub[..]);
    Ok(Value::Int(found.map_or(-1, |i| i as i64)))
}

/// `optional.none()` for a zero value (as cel-go's `IsZeroValue`), else `optional.of(x)`.
fn of_non_zero_value(args: &[Value]) -> Result<Value, ExecutionError> {
    let [value] = arity::<1>("optional.ofNonZeroValue", args)?;
    let zero = match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Int(i) => *i == 0,
        Value::UInt(u) => *u == 0,
        Value::Float(f) => *f == 0.0,
        Value::String(s) => s.is_empty(),
        Value::Bytes(b) => b.is_empty(),
        Value::List(l) => l.is_empty(),
        Value::Map(m) => m.map.is_empty(),
        Value::Duration(d) => d.is_zero(),
        // Go's zero time.Time, 0001-01-01T00:00:00Z.
        Value::Timestamp(t) => t.timestamp() == -62_135_596_800 && t.timestamp_subsec_nanos() == 0,
        Value::Opaque(o) => o
            .downcast_ref::<OptionalValue>()
            .is_some_and(|o| o.value().is_none()),
        _ => false,
    };
    let optional = if zero {
        OptionalValue::none()
    } else {
        OptionalValue::of(value.clone())
    };
    Ok(Value::Opaque(Arc::new(optional)))
}

/// `s.format(list)`, its arguments' type values kept (they print as their names).
fn format_overload<'b, 'v>(
    args: Vec<cel::common::value::CowVal<'b, 'v>>,
) -> Result<cel::common::value::CowVal<'b, 'v>, ExecutionError> {
    let values = args
        .iter()
        .map(|a| super::args::value_keeping_types(a.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    super::args::owned(format(&values)?)
}

fn format_error(message: impl std::fmt::Display) -> ExecutionError {
    ExecutionError::function_error("format", message.to_string())
}

/// `s.format(list)` as cel-go's formatting (version 1) does it.
fn format(args: &[Value]) -> Result<Value, ExecutionError> {
    let [this, list] = arity::<2>("format", args)?;
    let pattern = string_arg("format", this)?;
    let Value::List(list) = list else {
        return Err(format_error("expected a list of arguments"));
    };
    let bytes = pattern.as_bytes();
    let mut out = String::with_capacity(pattern.len());
    let mut literal_start = 0;
    let mut i = 0;
    let mut arg = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            i += 1;
            continue;
        }
        out.push_str(&pattern[literal_start..i]);
        if bytes.get(i + 1) == Some(&b'%') {
            out.push('%');
            i += 2;
            literal_start = i;
            continue;
        }
        let Some(value) = list.get(arg) else {
            return Err(format_error(format!("index {arg} out of range")));
        };
        if i + 1 >= bytes.len() {
            return Err(format_error("unexpected end of string"));
        }
        let (read, text) = clause(&pattern[i + 1..], value)?;
        out.push_str(&text);
        i += 1 + read;
        literal_start = i;
        arg += 1;
    }
    out.push_str(&pattern[literal_start..]);
    Ok(Value::String(Arc::new(out)))
}

/// The clause at the start of `spec` (after `%`) applied to `value`: bytes read and the text.
fn clause(spec: &str, value: &Value) -> Result<(usize, String), ExecutionError> {
    let parse_error =
        |why: String| format_error(format!("could not parse formatting clause: {why}"));
    let during = |e: String| format_error(format!("error during formatting: {e}"));
    let mut read = 0;
    let mut precision = None;
    if let Some(rest) = spec.strip_prefix('.') {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == rest.len() {
            return Err(parse_error(
                "error while parsing precision: could not find end of precision specifier".into(),
            ));
        }
        precision = Some(
            rest[..digits]
                .parse::<usize>()
                .map_err(|e| parse_error(format!("error while parsing precision: {e}")))?,
        );
        read = 1 + digits;
    }
    let verb = spec[read..].chars().next().unwrap_or('\0');
    read += verb.len_utf8();
    let text = match verb {
        's' => format_string(value),
        'd' => decimal(value),
        'f' => fixed(value, precision.unwrap_or(6)),
        'e' => scientific(value, precision.unwrap_or(6)),
        'b' => binary(value),
        'x' => hex(value, false),
        'X' => hex(value, true),
        'o' => octal(value),
        other => {
            return Err(parse_error(format!(
                "unrecognized formatting clause \"{other}\""
            )));
        }
    }
    .map_err(during)?;
    Ok((read, text))
}

/// CEL's name of a value's type, as format errors give it.
fn kind(value: &Value) -> String {
    match value {
        Value::Float(_) => "double".to_string(),
        Value::Timestamp(_) => "google.protobuf.Timestamp".to_string(),
        Value::Duration(_) => "google.protobuf.Duration".to_string(),
        Value::Null => "null_type".to_string(),
        other => super::args::type_name(other),
    }
}

/// `%s`: cel-go's `FormatString`.
fn format_string(value: &Value) -> Result<String, String> {
    if let Value::Opaque(o) = value
        && let Some(t) = o.downcast_ref::<TypeValue>()
    {
        return Ok(t.0.clone());
    }
    Ok(match value {
        Value::List(_) => return format_list(value),
        Value::Map(_) => return format_map(value),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Float(f) => double_string(*f),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.to_string(),
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Timestamp(t) => timestamp_string(t),
        Value::Duration(d) => duration_string(d),
        Value::Null => "null".to_string(),
        other => {
            return Err(format!(
                "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps, was given {}",
                kind(other)
            ));
        }
    })
}

/// `string(double)` in cel-go: `strconv.FormatFloat(f, 'g', -1, 64)`.
fn double_string(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_string()
    } else if f.is_infinite() {
        if f > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        go_shortest_g(f)
    }
}

/// `strconv.FormatFloat(f, 'g', -1, 64)` for a finite `f`.
pub(crate) fn go_shortest_g(f: f64) -> String {
    // `{:e}` gives the shortest round-tripping digits: `1.5e-7`, `-2e21`, `0e0`.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if f == 0.0 || (-4..6).contains(&exp) {
        // Rust's plain form is Go's for these exponents (and `-0` stays `-0`).
        return format!("{f}");
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

/// `string(timestamp)` in cel-go: RFC 3339 in UTC, fractional seconds without trailing zeros.
fn timestamp_string(t: &chrono::DateTime<chrono::FixedOffset>) -> String {
    let utc = t.naive_utc();
    let mut s = utc.format("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = t.timestamp_subsec_nanos();
    if nanos > 0 {
        let fraction = format!("{nanos:09}");
        s.push('.');
        s.push_str(fraction.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// `string(duration)` in cel-go: seconds, as few digits as needed, then `s`.
fn duration_string(d: &chrono::Duration) -> String {
    match d.num_nanoseconds() {
        Some(ns) => format!("{}s", ns as f64 / 1e9),
        None => format!("{}s", d.num_seconds()),
    }
}

/// An element of a list or map inside `%s`: as a CEL literal.
fn format_member(value: &Value) -> Result<String, String> {
    Ok(match value {
        Value::Int(_) | Value::UInt(_) => decimal(value)?,
        Value::String(s) => go_quote(s),
        Value::Bytes(b) => format!("b{}", go_quote(&String::from_utf8_lossy(b))),
        Value::Bool(_) | Value::Null => format_string(value)?,
        Value::Opaque(o) if o.downcast_ref::<TypeValue>().is_some() => format_string(value)?,
        Value::Timestamp(t) => format!("timestamp({})", go_quote(&timestamp_string(t))),
        Value::Duration(d) => format!("duration({})", go_quote(&duration_string(d))),
        Value::List(_) => format_list(value)?,
        Value::Map(_) => format_map(value)?,
        Value::Float(f) if f.is_finite() => format!("{f:.6}"),
        Value::Float(f) => go_quote(&double_string(*f)),
        other => return Err(format!("no formatting function for {}", kind(other))),
    })
}

fn format_list(value: &Value) -> Result<String, String> {
    let Value::List(items) = value else {
        return Err("expected a list".to_string());
    };
    let items: Result<Vec<String>, String> = items.iter().map(format_member).collect();
    Ok(format!("[{}]", items?.join(", ")))
}

fn format_map(value: &Value) -> Result<String, String> {
    let Value::Map(map) = value else {
        return Err("expected a map".to_string());
    };
    let mut entries = Vec::with_capacity(map.map.len());
    for (k, v) in map.map.iter() {
        let key = match k {
            Key::String(s) => go_quote(s),
            Key::Bool(b) => b.to_string(),
            Key::Int(i) => i.to_string(),
            Key::Uint(u) => u.to_string(),
        };
        entries.push((key, format_member(v)?));
    }
    entries.sort();
    let entries: Vec<String> = entries
        .into_iter()
        .map(|(k, v)| format!("{k}:{v}"))
        .collect();
    Ok(format!("{{{}}}", entries.join(", ")))
}

/// Go's `strconv.Quote`.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `%d`.
fn decimal(value: &Value) -> Result<String, String> {
    match value {
        Value::Int(i) => Ok(i.to_string()),
        Value::UInt(u) => Ok(u.to_string()),
        other => Err(format!(
            "decimal clause can only be used on integers, was given {}",
            kind(other)
        )),
    }
}

/// The double `%f` and `%e` format: a double, or the strings "NaN", "Infinity", "-Infinity".
fn float_arg(value: &Value, clause: &str) -> Result<f64, String> {
    match value {
        Value::Float(f) => Ok(*f),
        Value::String(s) if s.as_str() == "NaN" => Ok(f64::NAN),
        Value::String(s) if s.as_str() == "Infinity" => Ok(f64::INFINITY),
        Value::String(s) if s.as_str() == "-Infinity" => Ok(f64::NEG_INFINITY),
        other => Err(format!(
            "{clause} clause can only be used on doubles, was given {}",
            kind(other)
        )),
    }
}

/// NaN and infinities as the en-US number printer writes them.
fn non_finite(f: f64) -> Option<String> {
    if f.is_nan() {
        Some("NaN".to_string())
    } else if f.is_infinite() {
        Some(if f > 0.0 { "∞" } else { "-∞" }.to_string())
    } else {
        None
    }
}

/// `%f`: fixed point, the integer part grouped by thousands (the en-US number printer).
fn fixed(value: &Value, precision: usize) -> Result<String, String> {
    let f = float_arg(value, "fixed-point")?;
    if let Some(s) = non_finite(f) {
        return Ok(s);
    }
    let plain = format!("{:.*}", precision, f.abs());
    let (int_part, frac) = plain.split_once('.').unwrap_or((plain.as_str(), ""));
    let mut grouped = String::with_capacity(int_part.len() + int_part.len() / 3);
    for (i, c) in int_part.chars().enumerate() {
        if i > 0 && (int_part.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if f.is_sign_negative() && plain.bytes().any(|b| b.is_ascii_digit() && b != b'0') {
        "-"
    } else {
        ""
    };
    Ok(if frac.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{frac}")
    })
}

/// `%e`: scientific, as the en-US number printer writes it: `1.052033×10⁰³`. cel-go builds
/// its Go format from the clause's precision as `%<precision>e`, a width: the digits stay six
/// and the text is padded with spaces to `width` characters (which shows on `∞`, `-∞` and
/// `NaN`, shorter than the default six).
fn scientific(value: &Value, width: usize) -> Result<String, String> {
    let f = float_arg(value, "scientific")?;
    let text = match non_finite(f) {
        Some(s) => s,
        None => finite_scientific(f),
    };
    Ok(format!("{text:>width$}"))
}

/// A finite double in scientific notation with six digits after the point.
fn finite_scientific(f: f64) -> String {
    let sci = format!("{:.6e}", f);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    const SUPERSCRIPT: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
    let digits: String = format!("{:02}", exp.unsigned_abs())
        .bytes()
        .map(|b| SUPERSCRIPT[usize::from(b - b'0')])
        .collect();
    let sign = if exp < 0 { "⁻" } else { "" };
    format!("{mantissa}×10{sign}{digits}")
}

/// `%b`.
fn binary(value: &Value) -> Result<String, String> {
    match value {
        Value::Int(i) if *i < 0 => Ok(format!("-{:b}", i.unsigned_abs())),
        Value::Int(i) => Ok(format!("{i:b}")),
        Value::UInt(u) => Ok(format!("{u:b}")),
        Value::Bool(b) => Ok(if *b { "1" } else { "0" }.to_string()),
        other => Err(format!(
            "only integers and bools can be formatted as binary, was given {}",
            kind(other)
        )),
    }
}

/// `%x` / `%X`.
fn hex(value: &Value, upper: bool) -> Result<String, String> {
    let text = match value {
        Value::Int(i) if *i < 0 => format!("-{:x}", i.unsigned_abs()),
        Value::Int(i) => format!("{i:x}"),
        Value::UInt(u) => format!("{u:x}"),
        Value::String(s) => s.bytes().map(|b| format!("{b:02x}")).collect(),
        Value::Bytes(b) => b.iter().map(|b| format!("{b:02x}")).collect(),
        other => {
            return Err(format!(
                "only integers, byte buffers, and strings can be formatted as hex, was given {}",
                kind(other)
            ));
        }
    };
    Ok(if upper { text.to_uppercase() } else { text })
}

/// `%o`.
fn octal(value: &Value) -> Result<String, String> {
    match value {
        Value::Int(i) if *i < 0 => Ok(format!("-{:o}", i.unsigned_abs())),
        Value::Int(i) => Ok(format!("{i:o}")),
        Value::UInt(u) => Ok(format!("{u:o}")),
        other => Err(format!(
            "octal clause can only be used on integers, was given {}",
            kind(other)
        )),
    }
}
