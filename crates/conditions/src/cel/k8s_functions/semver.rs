//! The Kubernetes semver library: `semver(string)`, `semver(string, bool)`, `isSemver(string)`,
//! `isSemver(string, bool)` and the members `major`, `minor`, `patch`,
//! `isGreaterThan`, `isLessThan`, `compareTo` (the last three shared with the quantity library,
//! which dispatches on the receiver). Versions are strict Semantic Versioning 2.0.0 (`1.2.3`,
//! `1.2.3-rc.1+build`): no `v` prefix, no missing parts, no leading zeros, unless the `bool`
//! asks for Kubernetes' normalization; comparisons and equality ignore build metadata and order
//! pre-releases as the specification says. Like Kubernetes, there is no `string(semver)`.

use std::cmp::Ordering;
use std::sync::Arc;

use cel::common::types::{BOOL_TYPE, DYN_TYPE, STRING_TYPE};
use cel::objects::Opaque;
use cel::{DeclarationError, Env, ExecutionError, Value};

use super::args::{arity, string_arg, value_overload};

/// A parsed semantic version. Build metadata is not kept: Kubernetes ignores it in comparisons
/// and in `==` (`1.0.0+a == 1.0.0+b`), and offers no way to read it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<String>,
}

impl Opaque for Semver {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Semver"
    }
}

impl std::fmt::Display for Semver {
    /// `major.minor.patch[-pre]` (build metadata is not kept).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if !self.pre.is_empty() {
            write!(f, "-{}", self.pre.join("."))?;
        }
        Ok(())
    }
}

fn numeric(part: &str) -> Option<u64> {
    let valid = !part.is_empty()
        && part.chars().all(|c| c.is_ascii_digit())
        && (part == "0" || !part.starts_with('0'));
    valid.then(|| part.parse().ok()).flatten()
}

fn identifier_chars_ok(id: &str) -> bool {
    !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

impl Semver {
    /// Parses a strict semantic version.
    pub(crate) fn parse(s: &str) -> Result<Semver, String> {
        let bad = |why: &str| format!("could not parse {s:?} as version: {why}");
        let (rest, build) = s.split_once('+').map_or((s, None), |(r, b)| (r, Some(b)));
        if let Some(build) = build
            && !build.split('.').all(identifier_chars_ok)
        {
            return Err(bad("invalid build metadata"));
        }
        let (core, pre) = rest
            .split_once('-')
            .map_or((rest, None), |(c, p)| (c, Some(p)));
        let parts: Vec<&str> = core.split('.').collect();
        let [major, minor, patch] = parts.as_slice() else {
            return Err(bad("expected MAJOR.MINOR.PATCH"));
        };
        let number = |p: &str| numeric(p).ok_or_else(|| bad("invalid number"));
        let pre = match pre {
            None => Vec::new(),
            Some(pre) => {
                let ids: Vec<String> = pre.split('.').map(str::to_string).collect();
                let valid = ids.iter().all(|id| {
                    identifier_chars_ok(id)
                        && (!id.chars().all(|c| c.is_ascii_digit()) || numeric(id).is_some())
                });
                if !valid {
                    return Err(bad("invalid pre-release"));
                }
                ids
            }
        };
        Ok(Semver {
            major: number(major)?,
            minor: number(minor)?,
            patch: number(patch)?,
            pre,
        })
    }

    /// Parses after Kubernetes' normalization: a leading `v` dropped, leading zeros of each of
    /// the first three dot-separated parts dropped, and a missing minor or patch taken as 0
    /// (`v01.2` is `1.2.0`). A shortened version cannot carry a pre-release or build.
    pub(crate) fn parse_normalized(s: &str) -> Result<Semver, String> {
        let trimmed = s.strip_prefix('v').unwrap_or(s);
        let mut parts: Vec<String> = trimmed
            .splitn(3, '.')
            .map(|p| {
                if p.len() <= 1 {
                    return p.to_string();
                }
                let rest = p.trim_start_matches('0');
                if rest.starts_with(|c: char| c.is_ascii_digit()) {
                    rest.to_string()
                } else {
                    format!("0{rest}")
                }
            })
            .collect();
        if parts.len() < 3 {
            if parts.last().is_some_and(|p| p.contains(['+', '-'])) {
                return Err(format!(
                    "could not parse {s:?} as version: short version cannot contain pre-release or build metadata"
                ));
            }
            parts.resize(3, "0".to_string());
        }
        Semver::parse(&parts.join("."))
            .map_err(|_| format!("could not parse {s:?} as version, even normalized"))
    }

    fn compare(&self, other: &Semver) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => compare_pre(&self.pre, &other.pre),
            })
    }
}

/// Pre-release precedence: identifier by identifier, numbers numerically and below words, a
/// shorter list first when all shared identifiers are equal.
fn compare_pre(a: &[String], b: &[String]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let ord = match (numeric(x), numeric(y)) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => x.cmp(y),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    a.len().cmp(&b.len())
}

value_overload!(semver_overload, semver);
value_overload!(is_semver_overload, is_semver);
value_overload!(major_overload, major);
value_overload!(minor_overload, minor);
value_overload!(patch_overload, patch);
/// Registers the semver functions.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(
        "semver",
        "semver(string)",
        vec![STRING_TYPE],
        semver_overload,
    )?;
    env.add_overload(
        "isSemver",
        "isSemver(string)",
        vec![STRING_TYPE],
        is_semver_overload,
    )?;
    env.add_overload(
        "semver",
        "semver(string, bool)",
        vec![STRING_TYPE, BOOL_TYPE],
        semver_overload,
    )?;
    env.add_overload(
        "isSemver",
        "isSemver(string, bool)",
        vec![STRING_TYPE, BOOL_TYPE],
        is_semver_overload,
    )?;
    let getters: [(&str, cel::common::functions::Function); 3] = [
        ("major", major_overload),
        ("minor", minor_overload),
        ("patch", patch_overload),
    ];
    for (name, f) in getters {
        env.add_member_overload(name, &format!("semver.{name}"), DYN_TYPE, vec![], f)?;
    }
    // `isGreaterThan`, `isLessThan` and `compareTo` are declared once, by the quantity
    // library, whose overloads hand a semver receiver to [`comparison`].
    Ok(())
}

/// Parses the string argument of `function`, normalized when its optional second argument is
/// `true`.
fn parse_arg(function: &str, args: &[Value]) -> Result<Result<Semver, String>, ExecutionError> {
    let (s, normalize) = match args {
        [s] => (s, false),
        [s, Value::Bool(normalize)] => (s, *normalize),
        [_, _] => {
            return Err(ExecutionError::function_error(
                function,
                "expected a bool as the second argument (normalize)",
            ));
        }
        _ => {
            return Err(ExecutionError::function_error(
                function,
                format!("expected 1 or 2 arguments, got {}", args.len()),
            ));
        }
    };
    let s = string_arg(function, s)?;
    Ok(if normalize {
        Semver::parse_normalized(s)
    } else {
        Semver::parse(s)
    })
}

fn semver(args: &[Value]) -> Result<Value, ExecutionError> {
    let v = parse_arg("semver", args)?.map_err(|e| ExecutionError::function_error("semver", e))?;
    Ok(Value::Opaque(Arc::new(v)))
}

fn is_semver(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(parse_arg("isSemver", args)?.is_ok()))
}

fn as_semver<'a>(function: &str, v: &'a Value) -> Result<&'a Semver, ExecutionError> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<Semver>(),
        _ => None,
    }
    .ok_or_else(|| ExecutionError::function_error(function, "expected a semver"))
}

fn getter(
    function: &str,
    args: &[Value],
    part: fn(&Semver) -> u64,
) -> Result<Value, ExecutionError> {
    let [this] = arity::<1>(function, args)?;
    let n = part(as_semver(function, this)?);
    Ok(Value::Int(i64::try_from(n).unwrap_or(i64::MAX)))
}

fn major(args: &[Value]) -> Result<Value, ExecutionError> {
    getter("major", args, |v| v.major)
}

fn minor(args: &[Value]) -> Result<Value, ExecutionError> {
    getter("minor", args, |v| v.minor)
}

fn patch(args: &[Value]) -> Result<Value, ExecutionError> {
    getter("patch", args, |v| v.patch)
}

fn ordering(function: &str, args: &[Value]) -> Result<Ordering, ExecutionError> {
    let [this, other] = arity::<2>(function, args)?;
    Ok(as_semver(function, this)?.compare(as_semver(function, other)?))
}

/// `isGreaterThan`, `isLessThan` or `compareTo` when the receiver is a semver; `None` when it
/// is not (the caller handles its own type).
pub(crate) fn comparison(function: &str, args: &[Value]) -> Option<Result<Value, ExecutionError>> {
    let receiver_is_semver = matches!(
        args.first(),
        Some(Value::Opaque(o)) if o.downcast_ref::<Semver>().is_some()
    );
    if !receiver_is_semver {
        return None;
    }
    Some(ordering(function, args).map(|ord| match function {
        "isGreaterThan" => Value::Bool(ord == Ordering::Greater),
        "isLessThan" => Value::Bool(ord == Ordering::Less),
        _ => Value::Int(match ord {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_versions_parse_and_loose_ones_do_not() {
        for ok in [
            "1.2.3",
            "0.0.0",
            "1.0.0-rc.1",
            "1.0.0-alpha-1.0+build.5",
            "10.20.30",
        ] {
            assert!(Semver::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "v1.0.0", "1.0", "1", "01.0.0", "1.0.0-01", "1.0.0-", "1.0.0+", "1.0.0.0", "",
        ] {
            assert!(Semver::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn precedence_follows_the_specification() {
        let order = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.0.1",
            "1.1.0",
            "2.0.0",
        ];
        for pair in order.windows(2) {
            let a = Semver::parse(pair[0]).unwrap();
            let b = Semver::parse(pair[1]).unwrap();
            assert_eq!(a.compare(&b), Ordering::Less, "{} < {}", pair[0], pair[1]);
        }
        let with_build = Semver::parse("1.0.0+abc").unwrap();
        assert_eq!(
            with_build.compare(&Semver::parse("1.0.0").unwrap()),
            Ordering::Equal
        );
    }

    #[test]
    fn normalization_is_kubernetes_normalize_and_parse() {
        for (input, want) in [
            ("v1.0.0", "1.0.0"),
            ("1.0", "1.0.0"),
            ("1", "1.0.0"),
            ("01.01.01", "1.1.1"),
            ("v00.000.0", "0.0.0"),
            ("1.2.03-rc.1+b", "1.2.3-rc.1+b"),
            ("1.2.3-alpha.1+build.7", "1.2.3-alpha.1+build.7"),
        ] {
            assert_eq!(
                Semver::parse_normalized(input),
                Semver::parse(want),
                "{input}"
            );
        }
        for bad in ["1.0-rc.1", "1+build", "vv1.0.0", "", "v", "1.x", " 1.0.0"] {
            assert!(Semver::parse_normalized(bad).is_err(), "{bad}");
        }
    }
}
