//! The Kubernetes format library: named string formats and `<format>.validate(string)`, which is
//! `optional.none()` for a valid string and `optional.of([errors])` otherwise, e.g.
//! `!format.dns1123Label().validate(object.metadata.name).hasValue()`. The formats are
//! `format.dns1123Label()`, `dns1123Subdomain`, `dns1035Label`, `dns1123LabelPrefix`,
//! `dns1123SubdomainPrefix`, `dns1035LabelPrefix`, `qualifiedName`, `labelValue`, `uri`, `uuid`,
//! `byte`, `date`, `datetime`; `format.named(name)` is an optional of the format so named.

use std::sync::Arc;

use cel::common::types::{DYN_TYPE, STRING_TYPE};
use cel::objects::{Opaque, OptionalValue};
use cel::{DeclarationError, Env, ExecutionError, Value};

use super::args::{arity, string_arg, value_overload};

/// One named format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Format(&'static str);

impl Opaque for Format {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.NamedFormat"
    }
}

impl Format {
    /// The format's name (`dns1123Label`, ...).
    pub(crate) fn name(&self) -> &'static str {
        self.0
    }
}

/// Every format name, as `format.named` accepts it.
const NAMES: [&str; 13] = [
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "qualifiedName",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
];

const DNS1123_LABEL_ERROR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_ERROR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1035_LABEL_ERROR: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const QUALIFIED_NAME_ERROR: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_ERROR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn too_long(max: usize) -> String {
    format!("must be no more than {max} characters")
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` (or `[a-z]...` with `alpha_first`).
fn dns_label_shape(s: &str, alpha_first: bool) -> bool {
    let b = s.as_bytes();
    let (Some(first), Some(last)) = (b.first(), b.last()) else {
        return false;
    };
    let first_ok = if alpha_first {
        first.is_ascii_lowercase()
    } else {
        first.is_ascii_lowercase() || first.is_ascii_digit()
    };
    first_ok
        && (last.is_ascii_lowercase() || last.is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn qualified_shape(s: &str) -> bool {
    let b = s.as_bytes();
    let (Some(first), Some(last)) = (b.first(), b.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
}

fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(too_long(63));
    }
    if !dns_label_shape(s, false) {
        errs.push(DNS1123_LABEL_ERROR.into());
    }
    errs
}

fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(too_long(63));
    }
    if !dns_label_shape(s, true) {
        errs.push(DNS1035_LABEL_ERROR.into());
    }
    errs
}

fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(too_long(253));
    }
    if !s.split('.').all(|label| dns_label_shape(label, false)) {
        errs.push(DNS1123_SUBDOMAIN_ERROR.into());
    }
    errs
}

/// A `generateName` prefix: valid once a trailing `-` is followed by more characters.
fn as_prefix(s: &str, check: fn(&str) -> Vec<String>) -> Vec<String> {
    match s.strip_suffix('-') {
        Some(head) => check(&format!("{head}a")),
        None => check(s),
    }
}

fn qualified_name(s: &str) -> Vec<String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let mut errs = Vec::new();
    if name.matches('/').count() > 0 {
        errs.push("a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into());
        return errs;
    }
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            errs.push("prefix part must be non-empty".into());
        } else {
            errs.extend(
                dns1123_subdomain(prefix)
                    .into_iter()
                    .map(|e| format!("prefix part {e}")),
            );
        }
    }
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else {
        if name.len() > 63 {
            errs.push(format!("name part {}", too_long(63)));
        }
        if !qualified_shape(name) {
            errs.push(QUALIFIED_NAME_ERROR.into());
        }
    }
    errs
}

fn label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(too_long(63));
    }
    if !s.is_empty() && !qualified_shape(s) {
        errs.push(LABEL_VALUE_ERROR.into());
    }
    errs
}

fn one(ok: bool, message: &str) -> Vec<String> {
    if ok { Vec::new() } else { vec![message.into()] }
}

fn uuid(s: &str) -> Vec<String> {
    let groups: Vec<&str> = s.split('-').collect();
    let lengths_ok = groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12]);
    let hex_ok = groups
        .iter()
        .all(|g| g.chars().all(|c| c.is_ascii_hexdigit()));
    one(lengths_ok && hex_ok, "does not match the UUID format")
}

fn byte(s: &str) -> Vec<String> {
    let b = s.as_bytes();
    let body = b
        .strip_suffix(b"==")
        .or_else(|| b.strip_suffix(b"="))
        .unwrap_or(b);
    let ok = b.len().is_multiple_of(4)
        && body
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/');
    one(ok, "invalid base64")
}

fn date(s: &str) -> Vec<String> {
    let ok = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok() && s.len() == 10;
    one(ok, "invalid date")
}

fn datetime(s: &str) -> Vec<String> {
    one(
        chrono::DateTime::parse_from_rfc3339(s).is_ok(),
        "invalid datetime",
    )
}

fn uri(s: &str) -> Vec<String> {
    one(super::url::Url::parse(s).is_ok(), "invalid URI")
}

impl Format {
    /// The errors of `s` under this format (none: valid).
    fn validate(self, s: &str) -> Vec<String> {
        match self.0 {
            "dns1123Label" => dns1123_label(s),
            "dns1123Subdomain" => dns1123_subdomain(s),
            "dns1035Label" => dns1035_label(s),
            "dns1123LabelPrefix" => as_prefix(s, dns1123_label),
            "dns1123SubdomainPrefix" => as_prefix(s, dns1123_subdomain),
            "dns1035LabelPrefix" => as_prefix(s, dns1035_label),
            "qualifiedName" => qualified_name(s),
            "labelValue" => label_value(s),
            "uri" => uri(s),
            "uuid" => uuid(s),
            "byte" => byte(s),
            "date" => date(s),
            _ => datetime(s),
        }
    }
}

fn format_value(name: &'static str) -> Value {
    Value::Opaque(Arc::new(Format(name)))
}

macro_rules! named_format_constructors {
    ($($fn_name:ident => $format:literal),* $(,)?) => {
        $(
            fn $fn_name<'b, 'v>(
                _args: Vec<cel::common::value::CowVal<'b, 'v>>,
            ) -> Result<cel::common::value::CowVal<'b, 'v>, cel::ExecutionError> {
                super::args::owned(format_value($format))
            }
        )*
        const CONSTRUCTORS: [(&str, cel::common::functions::Function); 13] = [
            $(($format, $fn_name)),*
        ];
    };
}

named_format_constructors! {
    dns1123_label_format => "dns1123Label",
    dns1123_subdomain_format => "dns1123Subdomain",
    dns1035_label_format => "dns1035Label",
    dns1123_label_prefix_format => "dns1123LabelPrefix",
    dns1123_subdomain_prefix_format => "dns1123SubdomainPrefix",
    dns1035_label_prefix_format => "dns1035LabelPrefix",
    qualified_name_format => "qualifiedName",
    label_value_format => "labelValue",
    uri_format => "uri",
    uuid_format => "uuid",
    byte_format => "byte",
    date_format => "date",
    datetime_format => "datetime",
}

value_overload!(named_overload, named);
value_overload!(validate_overload, validate);

/// Registers the format functions.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    for (name, f) in CONSTRUCTORS {
        let function = format!("format.{name}");
        env.add_overload(&function, &format!("{function}()"), vec![], f)?;
    }
    env.add_overload(
        "format.named",
        "format.named(string)",
        vec![STRING_TYPE],
        named_overload,
    )?;
    env.add_member_overload(
        "validate",
        "format.validate",
        DYN_TYPE,
        vec![STRING_TYPE],
        validate_overload,
    )?;
    Ok(())
}

fn named(args: &[Value]) -> Result<Value, ExecutionError> {
    let [name] = arity::<1>("format.named", args)?;
    let name = string_arg("format.named", name)?;
    let found = NAMES.iter().find(|n| **n == name).copied();
    let optional = match found {
        Some(n) => OptionalValue::of(format_value(n)),
        None => OptionalValue::none(),
    };
    Ok(Value::Opaque(Arc::new(optional)))
}

fn validate(args: &[Value]) -> Result<Value, ExecutionError> {
    let [this, s] = arity::<2>("validate", args)?;
    let format = match this {
        Value::Opaque(o) => o.downcast_ref::<Format>().copied(),
        _ => None,
    }
    .ok_or_else(|| ExecutionError::function_error("validate", "expected a format"))?;
    let errors = format.validate(string_arg("validate", s)?);
    let optional = if errors.is_empty() {
        OptionalValue::none()
    } else {
        let list = errors
            .into_iter()
            .map(|e| Value::String(Arc::new(e)))
            .collect();
        OptionalValue::of(Value::List(Arc::new(list)))
    };
    Ok(Value::Opaque(Arc::new(optional)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_has_a_constructor() {
        let constructed: Vec<&str> = CONSTRUCTORS.iter().map(|(n, _)| *n).collect();
        assert_eq!(constructed, NAMES);
    }

    #[test]
    fn formats_follow_kubernetes_validation() {
        let valid = |f: &'static str, s: &str| Format(f).validate(s).is_empty();
        assert!(valid("dns1123Label", "my-name"));
        assert!(!valid("dns1123Label", "-invalid"));
        assert!(!valid("dns1123Label", "My-name"));
        assert!(!valid("dns1123Label", &"a".repeat(64)));
        assert!(valid("dns1123Subdomain", "example.com"));
        assert!(!valid("dns1123Subdomain", "example..com"));
        assert!(valid("dns1035Label", "abc-123"));
        assert!(!valid("dns1035Label", "1abc"));
        assert!(valid("dns1123LabelPrefix", "my-prefix-"));
        assert!(!valid("dns1123Label", "my-prefix-"));
        assert!(valid("qualifiedName", "example.com/MyName"));
        assert!(valid("qualifiedName", "my.name"));
        assert!(!valid("qualifiedName", "/name"));
        assert!(!valid("qualifiedName", "a/b/c"));
        assert!(valid("labelValue", ""));
        assert!(!valid("labelValue", "-x"));
        assert!(valid("uuid", "123e4567-e89b-12d3-a456-426614174000"));
        assert!(!valid("uuid", "123e4567e89b12d3a456426614174000"));
        assert!(valid("byte", "aGVsbG8="));
        assert!(!valid("byte", "aGVsbG8"));
        assert!(valid("date", "2021-01-01"));
        assert!(!valid("date", "2021-13-01"));
        assert!(valid("datetime", "2021-01-01T10:00:00Z"));
        assert!(!valid("datetime", "2021-01-01"));
        assert!(valid("uri", "https://example.com/x"));
        assert!(!valid("uri", "example.com"));
    }
}
