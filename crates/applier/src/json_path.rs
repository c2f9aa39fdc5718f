//! The one parser and walker of the Kubernetes JSONPaths ManifestWorks carry
//! (`ignoreFields.jsonPaths`, status feedback `jsonPaths`). jq expressions
//! (`ignoreFields.jqPathExpressions`) are full jq, run by [`crate::jq`].
//!
//! Kubernetes JSONPath is not RFC 9535: `{...}` template braces, an optional `$`, `\.` inside a
//! key and `[?(@.field=="value")]` filters. Only what selects fields is accepted; anything else is
//! an error naming what was not understood, never a silent empty match.

use serde_json::Value;

/// One step of a path pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// An object key (on an array, a decimal key selects that index).
    Key(String),
    /// An array index.
    Index(usize),
    /// Every element of an array or value of an object.
    Any,
    /// The elements of an array whose string field `field` equals `equals`.
    Filter {
        /// Field of each element compared.
        field: String,
        /// The value it must have.
        equals: String,
    },
}

/// One step of a concrete path into a document.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Step {
    /// An object key.
    Key(String),
    /// An array index.
    Index(usize),
}

/// Parses a Kubernetes JSONPath: `.spec.replicas`, `{.spec.replicas}`,
/// `$.metadata.annotations['a.b/c']`, `.spec.containers[0].image`, `.spec.containers[*].image`,
/// `.status.conditions[?(@.type=="Ready")].status`, with `\.` for a dot inside a key.
pub fn parse(path: &str) -> Result<Vec<Segment>, String> {
    let mut s = path.trim();
    if let Some(inner) = s.strip_prefix('{') {
        s = inner
            .strip_suffix('}')
            .ok_or_else(|| "unbalanced braces".to_string())?
            .trim();
    }
    s = s.strip_prefix('$').unwrap_or(s);
    parse_dotted(s)
}

/// The grammar: `.key`, `['key']`, `["key"]`, `[N]`, `[*]`, `.*` and filters.
fn parse_dotted(s: &str) -> Result<Vec<Segment>, String> {
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                if i < chars.len() && chars[i] == '[' {
                    continue; // `.[0]` is the same as `[0]`
                }
                let mut key = String::new();
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        key.push(chars[i + 1]);
                        i += 2;
                        continue;
                    }
                    if !key_char(chars[i]) {
                        return Err(format!("unexpected '{}'", chars[i]));
                    }
                    key.push(chars[i]);
                    i += 1;
                }
                if key.is_empty() {
                    if i >= chars.len() && out.is_empty() {
                        return Ok(out); // the identity path `.`
                    }
                    return Err("empty key".into());
                }
                if key == "*" {
                    out.push(Segment::Any);
                } else {
                    out.push(Segment::Key(key));
                }
            }
            '[' => {
                let close = chars[i..]
                    .iter()
                    .position(|&c| c == ']')
                    .map(|p| p + i)
                    .ok_or("unclosed '['")?;
                let inner: String = chars[i + 1..close].iter().collect();
                let inner = inner.trim();
                let seg = if inner == "*" {
                    Segment::Any
                } else if let Some(filter) = inner.strip_prefix('?') {
                    parse_filter(filter)?
                } else if let Some(q) = unquote(inner) {
                    Segment::Key(q)
                } else if let Ok(n) = inner.parse::<usize>() {
                    Segment::Index(n)
                } else {
                    return Err(format!("unsupported selector [{inner}]"));
                };
                out.push(seg);
                i = close + 1;
            }
            c => return Err(format!("unexpected '{c}'")),
        }
    }
    Ok(out)
}

/// `(@.field=="value")`: the only filter form (string equality on a field of the element).
fn parse_filter(filter: &str) -> Result<Segment, String> {
    let body = filter
        .trim()
        .strip_prefix('(')
        .and_then(|f| f.strip_suffix(')'))
        .ok_or("a filter must be written ?(...)")?;
    let (lhs, rhs) = body
        .split_once("==")
        .ok_or("only == filters are supported")?;
    let field = lhs
        .trim()
        .strip_prefix("@.")
        .filter(|f| !f.is_empty())
        .ok_or("a filter must compare a field of @")?;
    let equals = unquote(rhs.trim()).ok_or("a filter must compare with a quoted string")?;
    Ok(Segment::Filter {
        field: field.to_string(),
        equals,
    })
}

fn key_char(c: char) -> bool {
    !matches!(
        c,
        ' ' | '(' | ')' | '|' | '?' | '@' | '=' | '!' | '<' | '>' | ','
    )
}

fn unquote(s: &str) -> Option<String> {
    let quote = s.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let body = s.strip_prefix(quote)?.strip_suffix(quote)?;
    Some(body.to_string())
}

/// Every value `pattern` reaches in `doc` (missing keys reach nothing), in document order.
pub fn select<'a>(pattern: &[Segment], doc: &'a Value) -> Vec<&'a Value> {
    walk(pattern, doc).into_iter().map(|(_, v)| v).collect()
}

/// Every value `pattern` reaches in `doc`, with its concrete path.
pub(crate) fn walk<'a>(pattern: &[Segment], doc: &'a Value) -> Vec<(Vec<Step>, &'a Value)> {
    let mut paths: Vec<(Vec<Step>, &Value)> = vec![(Vec::new(), doc)];
    for seg in pattern {
        let mut next = Vec::new();
        for (path, node) in paths {
            for (step, child) in children(seg, node) {
                let mut p = path.clone();
                p.push(step);
                next.push((p, child));
            }
        }
        paths = next;
    }
    paths
}

fn children<'a>(seg: &Segment, node: &'a Value) -> Vec<(Step, &'a Value)> {
    match (seg, node) {
        (Segment::Key(k), Value::Object(m)) => m
            .get(k)
            .map(|c| (Step::Key(k.clone()), c))
            .into_iter()
            .collect(),
        (Segment::Key(k), Value::Array(a)) => k
            .parse::<usize>()
            .ok()
            .and_then(|i| a.get(i).map(|c| (Step::Index(i), c)))
            .into_iter()
            .collect(),
        (Segment::Index(i), Value::Array(a)) => a
            .get(*i)
            .map(|c| (Step::Index(*i), c))
            .into_iter()
            .collect(),
        (Segment::Any, Value::Object(m)) => {
            m.iter().map(|(k, c)| (Step::Key(k.clone()), c)).collect()
        }
        (Segment::Any, Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, c)| (Step::Index(i), c))
            .collect(),
        (Segment::Filter { field, equals }, Value::Array(a)) => a
            .iter()
            .enumerate()
            .filter(|(_, item)| {
                item.get(field.as_str()).and_then(Value::as_str) == Some(equals.as_str())
            })
            .map(|(i, c)| (Step::Index(i), c))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn filters_select_matching_elements() {
        let doc = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Failed", "status": "False"}]}});
        let path = parse(r#"{.status.conditions[?(@.type=="Ready")].status}"#).expect("parses");
        assert_eq!(select(&path, &doc), vec![&json!("True")]);
        let path = parse(".status.conditions[?(@.type=='Nope')].status").expect("parses");
        assert!(select(&path, &doc).is_empty());
    }

    #[test]
    fn unsupported_filters_are_errors() {
        for bad in [
            "[?(@.x>1)]",
            "[?(@.x==1)]",
            "[?(x=='a')]",
            "[?@.x=='a']",
            ".a[",
            "{.a",
        ] {
            assert!(parse(bad).is_err(), "{bad} should be refused");
        }
    }
}
