//! The Kubernetes URL library: `url(string)`, `isURL(string)` and the members `getScheme`,
//! `getHost`, `getHostname`, `getPort`, `getEscapedPath`, `getQuery`.
//!
//! Like Kubernetes (Go's `url.ParseRequestURI`), a URL is absolute (`scheme:...`) or an
//! absolute path (`/...`); fragments are not allowed.

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::types::{DYN_TYPE, STRING_TYPE};
use cel::objects::{Key, Map, Opaque};
use cel::{DeclarationError, Env, ExecutionError, Value};

use super::{arity, string_arg, value_overload};

/// A parsed URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Url {
    source: String,
    scheme: String,
    host: String,
    path: String,
    query: String,
}

impl Opaque for Url {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.URL"
    }
}

impl Url {
    /// Parses an absolute URL or an absolute path.
    pub(crate) fn parse(s: &str) -> Result<Url, String> {
        let bad = |why: &str| format!("invalid URL {s:?}: {why}");
        if s.is_empty() {
            return Err(bad("empty"));
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("contains whitespace or control characters"));
        }
        if s.contains('#') {
            return Err(bad("fragments are not allowed"));
        }
        let (scheme, rest) = if s.starts_with('/') {
            ("", s)
        } else {
            let (scheme, rest) = s.split_once(':').ok_or_else(|| bad("missing scheme"))?;
            let valid = scheme
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
            if !valid {
                return Err(bad("invalid scheme"));
            }
            (scheme, rest)
        };
        let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (host, path) = match before_query.strip_prefix("//") {
            Some(authority_and_path) => {
                let end = authority_and_path
                    .find('/')
                    .unwrap_or(authority_and_path.len());
                let (authority, path) = authority_and_path.split_at(end);
                let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
                (host, path)
            }
            None => ("", before_query),
        };
        if host.starts_with('[') && !host.contains(']') {
            return Err(bad("unclosed IPv6 address"));
        }
        Ok(Url {
            source: s.to_string(),
            scheme: scheme.to_string(),
            host: host.to_string(),
            path: path.to_string(),
            query: query.to_string(),
        })
    }

    /// The URL as it was written.
    pub(crate) fn as_str(&self) -> &str {
        &self.source
    }

    /// The host without the port (IPv6 without brackets).
    fn hostname(&self) -> &str {
        let host = self.host.as_str();
        if let Some(rest) = host.strip_prefix('[') {
            return rest.split(']').next().unwrap_or("");
        }
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    }

    /// The port, or "".
    fn port(&self) -> &str {
        let host = self.host.as_str();
        let after_ipv6 = host.rsplit_once(']').map_or(host, |(_, rest)| rest);
        after_ipv6.rsplit_once(':').map_or("", |(_, p)| p)
    }
}

/// `%XX` and `+` decoded, as query strings are.
fn query_unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push(high * 16 + low);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

value_overload!(url_overload, url);
value_overload!(is_url_overload, is_url);
value_overload!(get_scheme_overload, get_scheme);
value_overload!(get_host_overload, get_host);
value_overload!(get_hostname_overload, get_hostname);
value_overload!(get_port_overload, get_port);
value_overload!(get_escaped_path_overload, get_escaped_path);
value_overload!(get_query_overload, get_query);

/// Registers the URL functions.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload("url", "url(string)", vec![STRING_TYPE], url_overload)?;
    env.add_overload("isURL", "isURL(string)", vec![STRING_TYPE], is_url_overload)?;
    let members: [(&str, cel::common::functions::Function); 6] = [
        ("getScheme", get_scheme_overload),
        ("getHost", get_host_overload),
        ("getHostname", get_hostname_overload),
        ("getPort", get_port_overload),
        ("getEscapedPath", get_escaped_path_overload),
        ("getQuery", get_query_overload),
    ];
    for (name, f) in members {
        env.add_member_overload(name, &format!("url.{name}"), DYN_TYPE, vec![], f)?;
    }
    Ok(())
}

fn url(args: &[Value]) -> Result<Value, ExecutionError> {
    let [s] = arity::<1>("url", args)?;
    let url =
        Url::parse(string_arg("url", s)?).map_err(|e| ExecutionError::function_error("url", e))?;
    Ok(Value::Opaque(Arc::new(url)))
}

fn is_url(args: &[Value]) -> Result<Value, ExecutionError> {
    let [s] = arity::<1>("isURL", args)?;
    Ok(Value::Bool(Url::parse(string_arg("isURL", s)?).is_ok()))
}

fn this<'a>(function: &str, args: &'a [Value]) -> Result<&'a Url, ExecutionError> {
    let [this] = arity::<1>(function, args)?;
    match this {
        Value::Opaque(o) => o.downcast_ref::<Url>(),
        _ => None,
    }
    .ok_or_else(|| ExecutionError::function_error(function, "expected a URL"))
}

fn string(s: &str) -> Value {
    Value::String(Arc::new(s.to_string()))
}

fn get_scheme(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(string(&this("getScheme", args)?.scheme))
}

fn get_host(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(string(&this("getHost", args)?.host))
}

fn get_hostname(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(string(this("getHostname", args)?.hostname()))
}

fn get_port(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(string(this("getPort", args)?.port()))
}

fn get_escaped_path(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(string(&this("getEscapedPath", args)?.path))
}

/// The query as a map from key to the list of its values, in order.
fn get_query(args: &[Value]) -> Result<Value, ExecutionError> {
    let url = this("getQuery", args)?;
    let mut map: HashMap<Key, Vec<Value>> = HashMap::new();
    for pair in url.query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        map.entry(Key::String(Arc::new(query_unescape(k))))
            .or_default()
            .push(string(&query_unescape(v)));
    }
    let map = map
        .into_iter()
        .map(|(k, v)| (k, Value::List(Arc::new(v))))
        .collect();
    Ok(Value::Map(Map { map: Arc::new(map) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_parts() {
        let u = Url::parse("https://user@example.com:8443/a/b%20c?x=1&y=2&x=3").unwrap();
        assert_eq!(
            (u.scheme.as_str(), u.host.as_str(), u.hostname(), u.port()),
            ("https", "example.com:8443", "example.com", "8443")
        );
        assert_eq!(u.path, "/a/b%20c");
        let v6 = Url::parse("http://[::1]:80/").unwrap();
        assert_eq!((v6.hostname(), v6.port()), ("::1", "80"));
        let path = Url::parse("/healthz").unwrap();
        assert_eq!(
            (path.scheme.as_str(), path.host.as_str(), path.path.as_str()),
            ("", "", "/healthz")
        );
    }

    #[test]
    fn rejects_relative_and_odd() {
        for bad in [
            "",
            "example.com/x",
            "1http://x",
            "http://x/#frag",
            "http://a b",
            "http://[::1/",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unescapes_queries_without_panicking() {
        assert_eq!(query_unescape("a%20b+c"), "a b c");
        assert_eq!(query_unescape("%zz%"), "%zz%");
        assert_eq!(query_unescape("%C3%A9é%"), "éé%");
    }
}
