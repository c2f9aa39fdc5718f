//! The Kubernetes quantity library: `quantity(string)`, `isQuantity(string)` and the
//! members `compareTo`, `isLessThan`, `isGreaterThan`, `add`, `sub`, `asInteger`,
//! `asApproximateFloat`, `isInteger`, `sign`.
//!
//! A quantity is held exactly as a count of nano-units in an `i128` (about ±1.7e20 units,
//! enough for every suffix up to `E`/`Ei`); finer fractions round up, as Kubernetes does. A
//! larger quantity (Kubernetes accepts any size) is held approximately, as a double: it is no
//! integer (`isInteger()` is false, `asInteger()` an error, as in Kubernetes) and compares and
//! adds by its approximation.

use std::fmt;
use std::sync::Arc;

use cel::common::types::{DYN_TYPE, STRING_TYPE};
use cel::objects::Opaque;
use cel::{DeclarationError, Env, ExecutionError, Value};

use super::args::{arity, string_arg, value_overload};

const NANOS_PER_UNIT: i128 = 1_000_000_000;
/// Largest magnitude accepted, so that sums cannot overflow `i128`.
const MAX_NANOS: i128 = i128::MAX / 4;

/// A Kubernetes resource quantity. Two quantities are equal when their values are, whatever
/// their suffixes.
#[derive(Clone, Debug)]
pub(crate) struct Quantity {
    nanos: i128,
    /// The value, approximately, of a quantity too large for `nanos` (which is then 0).
    huge: Option<HugeValue>,
    /// How it prints, as in Kubernetes: from the suffix it was written with.
    format: Suffixes,
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos && self.huge == other.huge
    }
}

impl Eq for Quantity {}

/// Kubernetes' quantity formats: which suffixes a quantity prints with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Suffixes {
    /// `n u m k M G T P E` (and no suffix).
    DecimalSi,
    /// `Ki Mi Gi Ti Pi Ei`.
    BinarySi,
    /// `e<n>`.
    DecimalExponent,
}

/// An approximate value (never NaN, so that `Eq` holds).
#[derive(Clone, Copy, Debug, PartialEq)]
struct HugeValue(f64);

impl Eq for HugeValue {}

impl Opaque for Quantity {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

/// Kubernetes' canonical form (`Quantity.String()`): in its format's suffixes, the largest
/// that keeps the number whole; a binary quantity under 1024, or not whole, prints as a
/// decimal one.
impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(HugeValue(v)) = self.huge {
            return write!(f, "{v:e}");
        }
        let n = self.nanos;
        if n == 0 {
            return f.write_str("0");
        }
        let binary = self.format == Suffixes::BinarySi
            && n.abs() >= 1024 * NANOS_PER_UNIT
            && n % NANOS_PER_UNIT == 0;
        if binary {
            let mut units = n / NANOS_PER_UNIT;
            let mut power = 0;
            while power < BINARY_SUFFIXES.len() - 1 && units % 1024 == 0 {
                units /= 1024;
                power += 1;
            }
            return write!(f, "{units}{}", BINARY_SUFFIXES[power]);
        }
        // n × 10^-9, its factors of ten moved into the exponent, then the exponent lowered to a
        // multiple of three (never below -9, where it started).
        let (mut mantissa, mut exponent) = (n, -9i32);
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        while exponent % 3 != 0 {
            mantissa *= 10;
            exponent -= 1;
        }
        let decimal = match exponent {
            -9 => Some("n"),
            -6 => Some("u"),
            -3 => Some("m"),
            0 => Some(""),
            3 => Some("k"),
            6 => Some("M"),
            9 => Some("G"),
            12 => Some("T"),
            15 => Some("P"),
            18 => Some("E"),
            _ => None,
        };
        match (self.format, decimal) {
            (_, _) if exponent == 0 => write!(f, "{mantissa}"),
            (Suffixes::DecimalExponent, _) | (_, None) => write!(f, "{mantissa}e{exponent}"),
            (_, Some(suffix)) => write!(f, "{mantissa}{suffix}"),
        }
    }
}

/// The binary suffixes, by power of 1024.
const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// Why a string is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseQuantityError(String);

impl fmt::Display for ParseQuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Quantity {
    /// Parses the Kubernetes quantity syntax: `<sign><digits>[.<digits>]<suffix>`, suffix one of
    /// `Ki Mi Gi Ti Pi Ei`, `n u m "" k M G T P E`, or `e<int>`/`E<int>`.
    pub(crate) fn parse(s: &str) -> Result<Quantity, ParseQuantityError> {
        let bad = |why: &str| ParseQuantityError(format!("invalid quantity {s:?}: {why}"));
        let (negative, rest) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(bad("no digits"));
        }
        if frac_part.contains('.') {
            return Err(bad("more than one decimal point"));
        }
        // (numerator multiplier, denominator) of the suffix, or a power of ten.
        let format = if suffix.starts_with(['e', 'E']) {
            Suffixes::DecimalExponent
        } else if suffix.ends_with('i') {
            Suffixes::BinarySi
        } else {
            Suffixes::DecimalSi
        };
        let (mul, exp10): (i128, i32) = match suffix {
            "" => (1, 0),
            "n" => (1, -9),
            "u" => (1, -6),
            "m" => (1, -3),
            "k" => (1, 3),
            "M" => (1, 6),
            "G" => (1, 9),
            "T" => (1, 12),
            "P" => (1, 15),
            "E" => (1, 18),
            "Ki" => (1 << 10, 0),
            "Mi" => (1 << 20, 0),
            "Gi" => (1 << 30, 0),
            "Ti" => (1 << 40, 0),
            "Pi" => (1 << 50, 0),
            "Ei" => (1 << 60, 0),
            other if other.starts_with(['e', 'E']) => {
                let exp: i32 = other[1..].parse().map_err(|_| bad("bad exponent"))?;
                if !(-30..=30).contains(&exp) {
                    return Err(bad("exponent out of range"));
                }
                (1, exp)
            }
            _ => return Err(bad("unknown suffix")),
        };
        let too_big = || bad("too large");
        // Past the exact range, the value is held approximately (see the module docs).
        let huge = || {
            let approx: f64 = format!("{int_part}.{frac_part}0")
                .parse()
                .unwrap_or(f64::INFINITY)
                * mul as f64
                * 10f64.powi(exp10);
            let approx = if negative { -approx } else { approx };
            if approx.is_finite() {
                Ok(Quantity {
                    nanos: 0,
                    huge: Some(HugeValue(approx)),
                    format,
                })
            } else {
                Err(too_big())
            }
        };
        // digits as an integer with `frac_part.len()` implied decimals
        let digits = format!("{int_part}{frac_part}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 36 {
            return huge();
        }
        let mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| too_big())?
        };
        // nanos = mantissa * mul * 10^(exp10 + 9 - frac_len)
        let scale = exp10 + 9 - frac_part.len() as i32;
        let Some(mut nanos) = mantissa.checked_mul(mul) else {
            return huge();
        };
        if scale >= 0 {
            match 10i128
                .checked_pow(scale as u32)
                .and_then(|f| nanos.checked_mul(f))
            {
                Some(n) => nanos = n,
                None => return huge(),
            }
        } else {
            let divisor = 10i128.checked_pow((-scale) as u32).ok_or_else(too_big)?;
            // Round up what is finer than a nano-unit.
            nanos = nanos / divisor + i128::from(nanos % divisor != 0);
        }
        if nanos > MAX_NANOS {
            return huge();
        }
        Ok(Quantity {
            nanos: if negative { -nanos } else { nanos },
            huge: None,
            format,
        })
    }

    /// The value as a double.
    fn approximate(&self) -> f64 {
        match self.huge {
            Some(HugeValue(v)) => v,
            None => self.nanos as f64 / NANOS_PER_UNIT as f64,
        }
    }

    /// How `self` compares with `other`: exactly, unless one is held approximately.
    fn compare(&self, other: &Quantity) -> std::cmp::Ordering {
        if self.huge.is_none() && other.huge.is_none() {
            return self.nanos.cmp(&other.nanos);
        }
        self.approximate()
            .partial_cmp(&other.approximate())
            .unwrap_or(std::cmp::Ordering::Equal)
    }

    /// Whether the value is zero.
    fn is_zero(&self) -> bool {
        self.nanos == 0 && self.huge.is_none()
    }

    /// `self + sign * other` (an int `other` counts whole units). The result prints in
    /// `self`'s format, or `other`'s when `self` is zero, as Kubernetes' `Add` and `Sub` do.
    fn plus(
        &self,
        other: &Value,
        negate: bool,
        function: &str,
    ) -> Result<Quantity, ExecutionError> {
        let other = match other {
            Value::Int(i) => Quantity {
                nanos: i128::from(*i) * NANOS_PER_UNIT,
                huge: None,
                format: Suffixes::DecimalSi,
            },
            other => as_quantity(function, other)?.clone(),
        };
        let format = if self.is_zero() {
            other.format
        } else {
            self.format
        };
        if self.huge.is_none() && other.huge.is_none() {
            let n = if negate {
                self.nanos.checked_sub(other.nanos)
            } else {
                self.nanos.checked_add(other.nanos)
            };
            return Quantity::checked(n, format, function);
        }
        let o = other.approximate();
        let v = self.approximate() + if negate { -o } else { o };
        if v.is_finite() {
            Ok(Quantity {
                nanos: 0,
                huge: Some(HugeValue(v)),
                format,
            })
        } else {
            Err(ExecutionError::function_error(
                function,
                "quantity overflow",
            ))
        }
    }

    fn checked(
        nanos: Option<i128>,
        format: Suffixes,
        function: &str,
    ) -> Result<Quantity, ExecutionError> {
        match nanos {
            Some(n) if n.abs() <= MAX_NANOS => Ok(Quantity {
                nanos: n,
                huge: None,
                format,
            }),
            _ => Err(ExecutionError::function_error(
                function,
                "quantity overflow",
            )),
        }
    }
}

fn quantity_value(q: Quantity) -> Value {
    Value::Opaque(Arc::new(q))
}

fn as_quantity<'a>(function: &str, v: &'a Value) -> Result<&'a Quantity, ExecutionError> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<Quantity>(),
        _ => None,
    }
    .ok_or_else(|| {
        ExecutionError::function_error(
            function,
            format!("expected a quantity, got {}", super::args::type_name(v)),
        )
    })
}

value_overload!(quantity_overload, quantity);
value_overload!(is_quantity_overload, is_quantity);
value_overload!(compare_to_overload, compare_to);
value_overload!(is_less_than_overload, is_less_than);
value_overload!(is_greater_than_overload, is_greater_than);
value_overload!(add_overload, add);
value_overload!(sub_overload, sub);
value_overload!(as_integer_overload, as_integer);
value_overload!(as_approximate_float_overload, as_approximate_float);
value_overload!(is_integer_overload, is_integer);
value_overload!(sign_overload, sign);

/// Registers the quantity functions.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(
        "quantity",
        "quantity(string)",
        vec![STRING_TYPE],
        quantity_overload,
    )?;
    env.add_overload(
        "isQuantity",
        "isQuantity(string)",
        vec![STRING_TYPE],
        is_quantity_overload,
    )?;
    let d = || DYN_TYPE;
    env.add_member_overload(
        "compareTo",
        "quantity.compareTo",
        d(),
        vec![d()],
        compare_to_overload,
    )?;
    env.add_member_overload(
        "isLessThan",
        "quantity.isLessThan",
        d(),
        vec![d()],
        is_less_than_overload,
    )?;
    env.add_member_overload(
        "isGreaterThan",
        "quantity.isGreaterThan",
        d(),
        vec![d()],
        is_greater_than_overload,
    )?;
    env.add_member_overload("add", "quantity.add", d(), vec![d()], add_overload)?;
    env.add_member_overload("sub", "quantity.sub", d(), vec![d()], sub_overload)?;
    env.add_member_overload(
        "asInteger",
        "quantity.asInteger",
        d(),
        vec![],
        as_integer_overload,
    )?;
    env.add_member_overload(
        "asApproximateFloat",
        "quantity.asApproximateFloat",
        d(),
        vec![],
        as_approximate_float_overload,
    )?;
    env.add_member_overload(
        "isInteger",
        "quantity.isInteger",
        d(),
        vec![],
        is_integer_overload,
    )?;
    env.add_member_overload("sign", "quantity.sign", d(), vec![], sign_overload)?;
    Ok(())
}

fn quantity(args: &[Value]) -> Result<Value, ExecutionError> {
    let [s] = arity::<1>("quantity", args)?;
    let q = Quantity::parse(string_arg("quantity", s)?)
        .map_err(|e| ExecutionError::function_error("quantity", e))?;
    Ok(quantity_value(q))
}

fn is_quantity(args: &[Value]) -> Result<Value, ExecutionError> {
    let [s] = arity::<1>("isQuantity", args)?;
    Ok(Value::Bool(
        Quantity::parse(string_arg("isQuantity", s)?).is_ok(),
    ))
}

fn pair<'a>(
    function: &str,
    args: &'a [Value],
) -> Result<(&'a Quantity, &'a Value), ExecutionError> {
    let [this, other] = arity::<2>(function, args)?;
    Ok((as_quantity(function, this)?, other))
}

fn compare_to(args: &[Value]) -> Result<Value, ExecutionError> {
    if let Some(result) = super::semver::comparison("compareTo", args) {
        return result;
    }
    let (q, other) = pair("compareTo", args)?;
    let other = as_quantity("compareTo", other)?;
    Ok(Value::Int(q.compare(other) as i64))
}

fn is_less_than(args: &[Value]) -> Result<Value, ExecutionError> {
    if let Some(result) = super::semver::comparison("isLessThan", args) {
        return result;
    }
    let (q, other) = pair("isLessThan", args)?;
    Ok(Value::Bool(
        q.compare(as_quantity("isLessThan", other)?).is_lt(),
    ))
}

fn is_greater_than(args: &[Value]) -> Result<Value, ExecutionError> {
    if let Some(result) = super::semver::comparison("isGreaterThan", args) {
        return result;
    }
    let (q, other) = pair("isGreaterThan", args)?;
    Ok(Value::Bool(
        q.compare(as_quantity("isGreaterThan", other)?).is_gt(),
    ))
}

fn add(args: &[Value]) -> Result<Value, ExecutionError> {
    let (q, other) = pair("add", args)?;
    Ok(quantity_value(q.plus(other, false, "add")?))
}

fn sub(args: &[Value]) -> Result<Value, ExecutionError> {
    let (q, other) = pair("sub", args)?;
    Ok(quantity_value(q.plus(other, true, "sub")?))
}

fn this<'a>(function: &str, args: &'a [Value]) -> Result<&'a Quantity, ExecutionError> {
    let [this] = arity::<1>(function, args)?;
    as_quantity(function, this)
}

fn as_integer(args: &[Value]) -> Result<Value, ExecutionError> {
    let q = this("asInteger", args)?;
    if q.huge.is_some() {
        return Err(ExecutionError::function_error(
            "asInteger",
            format!("{q} does not fit in an int"),
        ));
    }
    if q.nanos % NANOS_PER_UNIT != 0 {
        return Err(ExecutionError::function_error(
            "asInteger",
            format!("{q} is not an integer"),
        ));
    }
    i64::try_from(q.nanos / NANOS_PER_UNIT)
        .map(Value::Int)
        .map_err(|_| {
            ExecutionError::function_error("asInteger", format!("{q} does not fit in an int"))
        })
}

fn as_approximate_float(args: &[Value]) -> Result<Value, ExecutionError> {
    let q = this("asApproximateFloat", args)?;
    Ok(Value::Float(q.approximate()))
}

fn is_integer(args: &[Value]) -> Result<Value, ExecutionError> {
    let q = this("isInteger", args)?;
    let whole = q.huge.is_none()
        && q.nanos % NANOS_PER_UNIT == 0
        && i64::try_from(q.nanos / NANOS_PER_UNIT).is_ok();
    Ok(Value::Bool(whole))
}

fn sign(args: &[Value]) -> Result<Value, ExecutionError> {
    let q = this("sign", args)?;
    Ok(Value::Int(match q.huge {
        Some(HugeValue(v)) => v.signum() as i64,
        None => q.nanos.signum() as i64,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nanos(s: &str) -> i128 {
        Quantity::parse(s).unwrap().nanos
    }

    #[test]
    fn parses_suffixes() {
        assert_eq!(nanos("1"), NANOS_PER_UNIT);
        assert_eq!(nanos("500m"), 500_000_000);
        assert_eq!(nanos("1.5"), 1_500_000_000);
        assert_eq!(nanos("1Ki"), 1024 * NANOS_PER_UNIT);
        assert_eq!(nanos("2Gi"), 2 * (1 << 30) * NANOS_PER_UNIT);
        assert_eq!(nanos("1k"), 1000 * NANOS_PER_UNIT);
        assert_eq!(nanos("1E"), 10i128.pow(18) * NANOS_PER_UNIT);
        assert_eq!(nanos("1e3"), 1000 * NANOS_PER_UNIT);
        assert_eq!(nanos("-2"), -2 * NANOS_PER_UNIT);
        assert_eq!(nanos("0.1n"), 1, "finer than a nano-unit rounds up");
        assert_eq!(nanos(".5"), 500_000_000);
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "abc", "1Qi", "1..2", "1e", "1e99"] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_huge_quantity_is_held_approximately_and_is_no_integer() {
        let q = Quantity::parse("9999999999999999999999999999999999999G").unwrap();
        assert!(q.huge.is_some());
        assert!((q.approximate() - 1e46).abs() < 1e32);
        assert!(q.compare(&Quantity::parse("1E").unwrap()).is_gt());
        assert!(
            Quantity::parse("-99999999999999999999999999999999999999E")
                .unwrap()
                .approximate()
                < 0.0
        );
    }

    #[test]
    fn displays_as_kubernetes_does() {
        for (written, canonical) in [
            ("1Ki", "1Ki"),
            ("12Mi", "12Mi"),
            ("1536Ki", "1536Ki"),
            ("1.5Gi", "1536Mi"),
            ("1024Mi", "1Gi"),
            ("512Ki", "512Ki"),
            ("100", "100"),
            ("1500", "1500"),
            ("2000", "2k"),
            ("1.5", "1500m"),
            ("1u", "1u"),
            ("0.1n", "1n"),
            ("1e3", "1e3"),
            ("1.5e3", "1500"),
            ("-2k", "-2k"),
            ("0Mi", "0"),
            ("1000Ki", "1000Ki"),
        ] {
            assert_eq!(
                Quantity::parse(written).unwrap().to_string(),
                canonical,
                "{written}"
            );
        }
        // Binary under 1024, or not whole: decimal.
        assert_eq!(Quantity::parse("0.5Ki").unwrap().to_string(), "512");
    }

    #[test]
    fn sums_print_in_the_first_operands_format() {
        let sum = |a: &str, b: &str| {
            let a = Quantity::parse(a).unwrap();
            let b = quantity_value(Quantity::parse(b).unwrap());
            a.plus(&b, false, "add").unwrap().to_string()
        };
        assert_eq!(sum("1Gi", "1Gi"), "2Gi");
        assert_eq!(sum("0", "1Gi"), "1Gi");
        assert_eq!(sum("1k", "1Ki"), "2024");
    }

    #[test]
    fn equality_ignores_the_suffix() {
        assert_eq!(
            Quantity::parse("1Ki").unwrap(),
            Quantity::parse("1024").unwrap()
        );
    }
}
