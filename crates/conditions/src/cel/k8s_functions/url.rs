//! The Kubernetes URL library: `url(string)`, `isURL(string)` and the members `getScheme`,
//! `getHost`, `getHostname`, `getPort`, `getEscapedPath`, `getQuery`.
//!
//! Like Kubernetes, a URL must pass Go's `url.ParseRequestURI` (absolute, `scheme:...`, or an
//! absolute path, `/...`) and is then read as Go's `url.Parse` reads it (a fragment is allowed
//! and ignored; `getEscapedPath()` escapes what a path must not hold, such as spaces).

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::types::{DYN_TYPE, STRING_TYPE};
use cel::objects::{Key, Map, Opaque};
use cel::{DeclarationError, Env, ExecutionError, Value};

use super::args::{arity, string_arg, value_overload};

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
    /// Parses `s` as Kubernetes does: it must pass Go's `url.ParseRequestURI` (an absolute URL
    /// or an absolute path; no control characters; a valid port and host; valid `%` escapes),
    /// and its parts are then read as Go's `url.Parse` reads them (the fragment cut off, the
    /// scheme lowercased, a scheme followed by no `/` an opaque URL with an empty path).
    pub(crate) fn parse(s: &str) -> Result<Url, String> {
        let bad = |why: &str| {
            format!("URL parse error during conversion from string: parse {s:?}: {why}")
        };
        // ParseRequestURI: the whole string, a `#` included, must be valid.
        parse_go(s, true).map_err(|e| bad(&e))?;
        // url.Parse: the fragment is cut off first.
        let without_fragment = s.split_once('#').map_or(s, |(before, _)| before);
        let mut url = parse_go(without_fragment, false).map_err(|e| bad(&e))?;
        url.source = s.to_string();
        Ok(url)
    }

    /// The URL as it was written.
    pub(crate) fn as_str(&self) -> &str {
        &self.source
    }

    /// The host without the port (IPv6 without brackets), as Go's `URL.Hostname`.
    fn hostname(&self) -> &str {
        let host = self.host.as_str();
        let (host, _) = split_port(host);
        match host.strip_prefix('[') {
            Some(rest) => rest.strip_suffix(']').unwrap_or(rest),
            None => host,
        }
    }

    /// The port, or "", as Go's `URL.Port`.
    fn port(&self) -> &str {
        split_port(&self.host).1
    }
}

/// `host` and the digits after its last `:` when they form a valid port (Go's `splitHostPort`).
fn split_port(host: &str) -> (&str, &str) {
    if let Some(colon) = host.rfind(':')
        && valid_optional_port(&host[colon..])
    {
        return (&host[..colon], &host[colon + 1..]);
    }
    (host, "")
}

/// Go's `url.parse(raw, viaRequest)` for what Kubernetes reads of it.
fn parse_go(raw: &str, via_request: bool) -> Result<Url, String> {
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".to_string());
    }
    if raw.is_empty() && via_request {
        return Err("empty url".to_string());
    }
    let mut url = Url {
        source: raw.to_string(),
        scheme: String::new(),
        host: String::new(),
        path: String::new(),
        query: String::new(),
    };
    if raw == "*" {
        url.path = "*".to_string();
        return Ok(url);
    }
    let (scheme, rest) = scheme_of(raw)?;
    url.scheme = scheme.to_ascii_lowercase();
    let mut rest = match rest.split_once('?') {
        Some((before, query)) => {
            url.query = query.to_string();
            before
        }
        None => rest,
    };
    if !rest.starts_with('/') {
        if !url.scheme.is_empty() {
            // A rootless path is opaque: no host, no path.
            return Ok(url);
        }
        if via_request {
            return Err("invalid URI for request".to_string());
        }
        if let Some(colon) = rest.find(':')
            && !rest[..colon].contains('/')
        {
            return Err("first path segment in URL cannot contain colon".to_string());
        }
    }
    if (!url.scheme.is_empty() || !via_request && !rest.starts_with("///"))
        && rest.starts_with("//")
    {
        let after = &rest[2..];
        let end = after.find('/').unwrap_or(after.len());
        let (authority, path) = after.split_at(end);
        url.host = parse_authority(authority)?;
        rest = path;
    }
    url.path = escaped_path(rest)?;
    Ok(url)
}

/// Go's `getScheme`: the scheme and the rest, or no scheme when the text before a `:` is none.
fn scheme_of(raw: &str) -> Result<(&str, &str), String> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err("missing protocol scheme".to_string()),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

/// Go's `parseAuthority`: checks the user information and returns the (unescaped) host.
fn parse_authority(authority: &str) -> Result<String, String> {
    let (userinfo, host) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    let host = parse_host(host)?;
    if let Some(userinfo) = userinfo {
        let valid = userinfo
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c));
        if !valid {
            return Err("net/url: invalid userinfo".to_string());
        }
        unescape(userinfo, Mode::Other)?;
    }
    Ok(host)
}

/// Go's `parseHost`: a bracketed IPv6 literal or a name, each with an optional valid port.
fn parse_host(host: &str) -> Result<String, String> {
    let port = if host.starts_with('[') {
        let close = host.rfind(']').ok_or("missing ']' in host")?;
        &host[close + 1..]
    } else {
        host.rfind(':').map_or("", |colon| &host[colon..])
    };
    if !valid_optional_port(port) {
        return Err(format!("invalid port {port:?} after host"));
    }
    unescape(host, Mode::Host)
}

/// "" or `:` followed by digits.
fn valid_optional_port(port: &str) -> bool {
    port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
}

/// What an escape is checked for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Host,
    Path,
    Other,
}

/// Go's `unescape`: `%XX` decoded (an invalid escape is an error); in a host, characters Go
/// would escape are an error.
fn unescape(s: &str, mode: Mode) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let (Some(high), Some(low)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            ) else {
                let end = (i + 3).min(bytes.len());
                return Err(format!(
                    "invalid URL escape {:?}",
                    String::from_utf8_lossy(&bytes[i..end])
                ));
            };
            if mode == Mode::Host && high < 8 && &s[i..i + 3] != "%25" {
                return Err(format!("invalid URL escape {:?}", &s[i..i + 3]));
            }
            out.push(high * 16 + low);
            i += 3;
            continue;
        }
        if mode == Mode::Host && b < 0x80 && should_escape(b, mode) {
            return Err(format!("invalid character {:?} in host name", b as char));
        }
        out.push(b);
        i += 1;
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Go's `shouldEscape` for hosts and paths.
fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    if mode == Mode::Host && b"!$&'()*+,;=:[]<>\"".contains(&c) {
        return false;
    }
    match c {
        b'-' | b'_' | b'.' | b'~' => false,
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => {
            mode == Mode::Path && c == b'?'
        }
        _ => true,
    }
}

/// Go's `URL.EscapedPath` of a URL whose raw path is `raw`: the raw path when it is a valid
/// encoding, else the decoded path escaped again.
fn escaped_path(raw: &str) -> Result<String, String> {
    let path = unescape(raw, Mode::Path)?;
    let escaped = escape_path(&path);
    if escaped == raw || !valid_encoded_path(raw) {
        return Ok(if path == "*" { path } else { escaped });
    }
    Ok(raw.to_string())
}

/// Go's `escape(s, encodePath)`.
fn escape_path(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if should_escape(b, Mode::Path) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
    out
}

/// Go's `validEncoded(s, encodePath)`.
fn valid_encoded_path(s: &str) -> bool {
    s.bytes()
        .all(|b| b"!$&'()*+,;=:@[]%".contains(&b) || !should_escape(b, Mode::Path))
}

/// `%XX` and `+` decoded, as query strings are; `None` for an invalid escape (Go's
/// `url.ParseQuery` then drops the pair).
fn query_unescape(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let high = bytes.get(i + 1).copied().and_then(hex)?;
                let low = bytes.get(i + 2).copied().and_then(hex)?;
                out.push(high * 16 + low);
                i += 3;
                continue;
            }
            b => out.push(b),
        }
        i += 1;
    }
    Some(String::from_utf8_lossy(&out).into_owned())
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
    // As Go's `url.ParseQuery`: pairs with a `;` or an invalid escape are dropped.
    for pair in url
        .query
        .split('&')
        .filter(|p| !p.is_empty() && !p.contains(';'))
    {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if let (Some(k), Some(v)) = (query_unescape(k), query_unescape(v)) {
            map.entry(Key::String(Arc::new(k)))
                .or_default()
                .push(string(&v));
        }
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
        let spaced = Url::parse("https://example.com/with space/?k v=a b#frag").unwrap();
        assert_eq!(
            (spaced.path.as_str(), spaced.query.as_str()),
            ("/with%20space/", "k v=a b")
        );
        let opaque = Url::parse("https:://kubernetes.io/").unwrap();
        assert_eq!((opaque.host.as_str(), opaque.path.as_str()), ("", ""));
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
            "http://a b",
            "http://[::1/",
            "https://a:b:c/",
            "http://x/%zz",
            "http://x/\u{7f}",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unescapes_queries_without_panicking() {
        assert_eq!(query_unescape("a%20b+c").as_deref(), Some("a b c"));
        assert_eq!(query_unescape("%zz%"), None);
        assert_eq!(query_unescape("%C3%A9é%"), None);
        assert_eq!(query_unescape("%C3%A9é").as_deref(), Some("éé"));
    }
}
