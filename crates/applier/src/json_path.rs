//! The one parser and walker of the Kubernetes JSONPaths ManifestWorks carry: status feedback
//! `jsonPaths`, read as client-go's `k8s.io/client-go/util/jsonpath` reads `{path}` with missing
//! keys allowed (what upstream's agent does), and `ignoreFields.jsonPaths`, a field-naming subset
//! (see [`JsonPath::parse_field_path`]). jq expressions are full jq, run by [`crate::jq`].
//!
//! Accepted, as client-go: one action with or without its braces (`.a.b`, `{.a.b}`); `@` and `$`
//! (both the current value: client-go never resets to the root); `.key` with `\.` for a dot in
//! a key; `['key']` (read as `.key`, so `['a.b']` is `.a.b`); `[N]` and `[-N]`; slices
//! `[a:b:c]`; `[*]` and `.*`; recursive descent `..`; unions `[a,b]`; filters
//! `[?(@.x == "v")]` with `==`, `!=`, `<`, `<=`, `>`, `>=`, and existence `[?(@.x)]`; string,
//! number and boolean literals. Refused with an error, never an empty match: `range`/`end`
//! templates, text around or between actions, other identifiers, unknown filter operators.
//!
//! Where client-go errors while walking (an index out of range, indexing or filtering what is not
//! a list, comparing values of different types), so does [`JsonPath::select`].

use std::borrow::Cow;

use serde_json::Value;

/// Most values one step of a path may reach: unions multiply, and a path must not be able to
/// exhaust memory.
const MAX_VALUES: usize = 100_000;

/// How a path is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    /// client-go's jsonpath (status feedback).
    ClientGo,
    /// ignoreFields: a bracketed quoted key is one key, indexes never fail.
    FieldNames,
}

/// A parsed Kubernetes JSONPath: the nodes of one `{...}` action.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonPath {
    nodes: Vec<Node>,
    dialect: Dialect,
}

/// One node of a path, applied to every value the previous nodes reached.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Node {
    /// The member of an object (nothing on anything else).
    Field(String),
    /// `.*`: every member of an object, element of a list, byte of a string.
    Wildcard,
    /// `..`: the value and everything below it that has members, elements or characters.
    Recursive,
    /// `[N]`, `[a:b:c]`, `[*]`.
    Slice(Slice),
    /// `[x,y]`: each branch applied to the input, the results in branch order.
    Union(Vec<Vec<Node>>),
    /// `[?(...)]`.
    Filter(Box<Filter>),
    /// A quoted string: one value, whatever the input.
    Text(String),
    /// A number or boolean: one value per input value.
    Constant(Value),
}

/// A slice as client-go keeps it: `[N]` is `[N:N+1]` with the end derived from the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slice {
    start: Option<i64>,
    end: Option<i64>,
    end_derived: bool,
    step: Option<i64>,
}

impl Slice {
    /// The index of a plain `[N]`.
    pub(crate) fn index(&self) -> Option<i64> {
        (self.end_derived && self.step.is_none())
            .then_some(self.start)
            .flatten()
    }

    /// Whether this is `[*]` (or `[:]`).
    pub(crate) fn is_all(&self) -> bool {
        *self
            == Slice {
                start: None,
                end: None,
                end_derived: false,
                step: None,
            }
    }
}

/// A filter: the elements of a list for which `left op right` holds.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Filter {
    left: Vec<Node>,
    op: Op,
    right: Vec<Node>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Exists,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// One step of a concrete path into a document.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Step {
    /// An object key.
    Key(String),
    /// An array index.
    Index(usize),
}

impl JsonPath {
    /// Parses a path as client-go's jsonpath parses `{path}` (status feedback); the braces may
    /// also be written.
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::parse_as(text, Dialect::ClientGo)
    }

    /// Parses a path naming fields (ignoreFields). As [`JsonPath::parse`], except that a
    /// bracketed quoted key (`['a.b/c']`, `["a.b/c"]`) is that one key, `.[0]` is `[0]`, and
    /// walking never fails: an index out of range or into what is not a list reaches nothing.
    pub fn parse_field_path(text: &str) -> Result<Self, String> {
        Self::parse_as(text, Dialect::FieldNames)
    }

    fn parse_as(text: &str, dialect: Dialect) -> Result<Self, String> {
        let mut p = Parser::new(text.trim(), dialect);
        let braced = p.eat('{');
        let nodes = p.action()?;
        if braced {
            if !p.eat('}') {
                return Err("unclosed action: '{' without '}'".into());
            }
            let rest = p.rest();
            if !rest.trim().is_empty() {
                return Err(format!(
                    "text after the closing '}}' ({rest:?}): a path is one {{...}} action"
                ));
            }
        } else if p.peek().is_some() {
            return Err("unbalanced '}'".into());
        }
        Ok(JsonPath { nodes, dialect })
    }

    /// The nodes, in order.
    pub(crate) fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Every value the path reaches in `doc`, in client-go's order (object members in key order,
    /// where Go's maps have none); an error where client-go's walk fails.
    pub fn select<'a>(&self, doc: &'a Value) -> Result<Vec<Cow<'a, Value>>, String> {
        let walker = Walker {
            dialect: self.dialect,
            track: false,
        };
        let hits = walker.list(&self.nodes, vec![Hit::root(doc)])?;
        Ok(hits.into_iter().map(|h| h.value).collect())
    }

    /// Every value of `doc` the path reaches, with its concrete path (literals left out).
    pub(crate) fn walk<'a>(&self, doc: &'a Value) -> Result<Vec<(Vec<Step>, &'a Value)>, String> {
        let walker = Walker {
            dialect: self.dialect,
            track: true,
        };
        let hits = walker.list(&self.nodes, vec![Hit::root(doc)])?;
        Ok(hits
            .into_iter()
            .filter_map(|h| match h.value {
                Cow::Borrowed(v) => Some((h.path, v)),
                Cow::Owned(_) => None,
            })
            .collect())
    }
}

/// Characters that end a field name or an identifier (client-go's terminators).
fn is_terminator(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t' | '\r' | '\n' | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'
    )
}

fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    dialect: Dialect,
}

impl Parser {
    fn new(text: &str, dialect: Dialect) -> Self {
        Parser {
            chars: text.chars().collect(),
            pos: 0,
            dialect,
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += 1;
        Some(c)
    }

    fn eat(&mut self, c: char) -> bool {
        let found = self.peek() == Some(c);
        if found {
            self.pos += 1;
        }
        found
    }

    fn starts_with(&self, prefix: &str) -> bool {
        let rest = self.chars.get(self.pos..).unwrap_or_default();
        prefix
            .chars()
            .enumerate()
            .all(|(i, c)| rest.get(i) == Some(&c))
    }

    fn rest(&self) -> String {
        self.chars
            .get(self.pos..)
            .unwrap_or_default()
            .iter()
            .collect()
    }

    fn text(&self, from: usize, to: usize) -> String {
        self.chars
            .get(from..to)
            .unwrap_or_default()
            .iter()
            .collect()
    }

    /// The character before the last one read (for client-go's "escaped quote" test).
    fn before_last(&self) -> Option<char> {
        self.pos
            .checked_sub(2)
            .and_then(|i| self.chars.get(i))
            .copied()
    }

    /// A whole sub-expression (a union branch, a filter operand, a bracketed key), which must
    /// be read to its end.
    fn sub(&self, text: &str) -> Result<Vec<Node>, String> {
        let mut p = Parser::new(text, self.dialect);
        let nodes = p.action()?;
        match p.peek() {
            None => Ok(nodes),
            Some(c) => Err(format!("unexpected {c:?} in {text:?}")),
        }
    }

    /// The nodes of an action, up to its closing `}` or the end of the text.
    fn action(&mut self) -> Result<Vec<Node>, String> {
        let mut nodes = Vec::new();
        loop {
            if self.peek().is_none() || self.starts_with("}") {
                return Ok(nodes);
            }
            if self.starts_with("[?(") {
                self.pos += 3;
                nodes.push(self.filter()?);
                continue;
            }
            if self.starts_with("..") {
                if matches!(nodes.last(), Some(Node::Recursive)) {
                    return Err("invalid multiple recursive descent".into());
                }
                self.pos += 2;
                nodes.push(Node::Recursive);
                if self.peek().is_some_and(is_alphanumeric) {
                    nodes.push(self.field());
                }
                continue;
            }
            let Some(c) = self.peek() else {
                return Ok(nodes);
            };
            match c {
                '\r' | '\n' => return Err("a line break in a path".into()),
                ' ' | '@' | '$' => self.pos += 1,
                '[' => {
                    self.pos += 1;
                    self.bracket(&mut nodes)?;
                }
                '"' | '\'' => {
                    self.pos += 1;
                    nodes.push(Node::Text(self.quoted(c)?));
                }
                '.' => {
                    self.pos += 1;
                    if self.dialect == Dialect::FieldNames && self.peek() == Some('[') {
                        continue; // `.[0]` is `[0]`, as this agent always read it
                    }
                    nodes.push(self.field());
                }
                '+' | '-' => nodes.push(self.number()?),
                c if c.is_ascii_digit() => nodes.push(self.number()?),
                c if is_alphanumeric(c) => nodes.push(self.identifier()?),
                '{' => {
                    return Err(
                        "unexpected '{': a path is one {...} action, without text around it".into(),
                    );
                }
                c => return Err(format!("unrecognized character in action: {c:?}")),
            }
        }
    }

    /// A field name up to the next terminator; `\` keeps the next character in the name.
    fn field(&mut self) -> Node {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c == '\\' {
                self.pos = (self.pos + 2).min(self.chars.len());
                continue;
            }
            if is_terminator(c) {
                break;
            }
            self.pos += 1;
        }
        let raw = self.text(start, self.pos);
        if raw == "*" {
            Node::Wildcard
        } else {
            Node::Field(raw.replace('\\', ""))
        }
    }

    /// What follows `[` up to the first `]`: a union, a quoted key or a slice.
    fn bracket(&mut self, nodes: &mut Vec<Node>) -> Result<(), String> {
        let start = self.pos;
        loop {
            match self.next() {
                None | Some('\n') => return Err("unterminated array".into()),
                Some(']') => break,
                Some(_) => {}
            }
        }
        let raw = self.text(start, self.pos - 1);
        let mut text = raw.as_str();
        if self.dialect == Dialect::FieldNames {
            text = text.trim();
            if let Some(key) = quoted_key(text) {
                nodes.push(Node::Field(key.to_string()));
                return Ok(());
            }
        }
        if text == "*" {
            text = ":";
        }
        if text.contains(',') {
            let branches = text
                .split(',')
                .map(|part| self.sub(&format!("[{}]", part.trim_matches(' '))))
                .collect::<Result<Vec<_>, _>>()?;
            nodes.push(Node::Union(branches));
            return Ok(());
        }
        if text.len() >= 2
            && let Some(key) = text.strip_prefix('\'').and_then(|t| t.strip_suffix('\''))
            && !key.contains('\'')
        {
            // As client-go: `['a.b']` is read as `.a.b`.
            nodes.extend(self.sub(&format!(".{key}"))?);
            return Ok(());
        }
        nodes.push(Node::Slice(slice(text)?));
        Ok(())
    }

    /// A quoted string; the opening quote `quote` has been read.
    fn quoted(&mut self, quote: char) -> Result<String, String> {
        let start = self.pos;
        loop {
            match self.next() {
                None | Some('\n') => return Err("unterminated quoted string".into()),
                Some(c) if c == quote && self.before_last() != Some('\\') => break,
                Some(_) => {}
            }
        }
        let inner: Vec<char> = self
            .chars
            .get(start..self.pos - 1)
            .unwrap_or_default()
            .to_vec();
        unquote(&inner, quote).ok_or_else(|| {
            format!(
                "invalid quoted string {quote}{}{quote}",
                inner.iter().collect::<String>()
            )
        })
    }

    fn number(&mut self) -> Result<Node, String> {
        let start = self.pos;
        if matches!(self.peek(), Some('+' | '-')) {
            self.pos += 1;
        }
        while self.peek().is_some_and(|c| c == '.' || c.is_ascii_digit()) {
            self.pos += 1;
        }
        let text = self.text(start, self.pos);
        if let Ok(i) = text.parse::<i64>() {
            return Ok(Node::Constant(Value::from(i)));
        }
        match text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
        {
            Some(f) => Ok(Node::Constant(Value::Number(f))),
            None => Err(format!("cannot parse number {text}")),
        }
    }

    fn identifier(&mut self) -> Result<Node, String> {
        let start = self.pos;
        while self.peek().is_some_and(|c| !is_terminator(c)) {
            self.pos += 1;
        }
        match self.text(start, self.pos).as_str() {
            "true" => Ok(Node::Constant(Value::Bool(true))),
            "false" => Ok(Node::Constant(Value::Bool(false))),
            "range" | "end" => Err(
                "range/end templates are not supported: a path selects values, it is not a \
                 template"
                    .into(),
            ),
            other => Err(format!("unrecognized identifier {other}")),
        }
    }

    /// A filter; `[?(` has been read. It ends at the first `)` outside the (one) quoted string,
    /// which must be followed by `]`.
    fn filter(&mut self) -> Result<Node, String> {
        let start = self.pos;
        let (mut opened, mut closed, mut pair) = (false, false, '"');
        loop {
            let c = match self.next() {
                None | Some('\n') => return Err("unterminated filter".into()),
                Some(c) => c,
            };
            match c {
                '"' | '\'' if !opened => {
                    opened = true;
                    pair = c;
                }
                '"' | '\'' if c == pair && self.before_last() != Some('\\') => closed = true,
                ')' if opened == closed => break,
                _ => {}
            }
        }
        let text = self.text(start, self.pos - 1);
        if self.next() != Some(']') {
            return Err("unclosed filter: ')' must be followed by ']'".into());
        }
        let filter = match split_comparison(&text) {
            None => Filter {
                left: self.sub(&text)?,
                op: Op::Exists,
                right: Vec::new(),
            },
            Some((left, op, right)) => {
                let op = match op {
                    "==" => Op::Eq,
                    "!=" => Op::Ne,
                    "<" => Op::Lt,
                    "<=" => Op::Le,
                    ">" => Op::Gt,
                    ">=" => Op::Ge,
                    other => return Err(format!("unrecognized filter operator {other}")),
                };
                Filter {
                    left: self.sub(left)?,
                    op,
                    right: self.sub(right)?,
                }
            }
        };
        Ok(Node::Filter(Box::new(filter)))
    }
}

/// `'key'` or `"key"` (ignoreFields' one-key reading).
fn quoted_key(text: &str) -> Option<&str> {
    let quote = text.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    text.get(1..)?
        .strip_suffix(quote)
        .filter(|k| !k.contains(quote))
}

/// client-go's split of a filter into operands and operator: the left operand is everything
/// before the first of `!<>=`, the operator the run of those after it, the right operand the
/// rest (at least one character). None: an existence filter.
fn split_comparison(text: &str) -> Option<(&str, &str, &str)> {
    let is_op = |c: char| matches!(c, '!' | '<' | '>' | '=');
    let left_end = text.find(is_op).filter(|i| *i > 0)?;
    let after = text.get(left_end..)?;
    let mut op_end = left_end + after.find(|c: char| !is_op(c)).unwrap_or(after.len());
    if op_end == text.len() {
        // The right operand takes the last operator character, if the operator can spare it.
        if op_end - left_end < 2 {
            return None;
        }
        op_end -= 1;
    }
    Some((
        text.get(..left_end)?,
        text.get(left_end..op_end)?,
        text.get(op_end..)?,
    ))
}

/// `[N]`, `[a:b]`, `[a:b:c]` with optional negative numbers, each part optional.
fn slice(text: &str) -> Result<Slice, String> {
    let parts: Vec<&str> = text.split(':').collect();
    let well_formed = |p: &str| {
        let digits = p.strip_prefix('-').unwrap_or(p);
        digits.chars().all(|c| c.is_ascii_digit())
    };
    if parts.len() > 3 || !parts.iter().all(|p| well_formed(p)) {
        return Err(format!("invalid array index {text}"));
    }
    let number = |p: &str| -> Result<Option<i64>, String> {
        if p.is_empty() {
            return Ok(None);
        }
        p.parse()
            .map(Some)
            .map_err(|_| format!("array index {p} is not a number"))
    };
    let start = number(parts[0])?;
    let (end, end_derived) = match parts.get(1) {
        None => (Some(start.unwrap_or(0).saturating_add(1)), true),
        Some(p) => (number(p)?, false),
    };
    let step = match parts.get(2) {
        None => None,
        Some(p) => number(p)?,
    };
    Ok(Slice {
        start,
        end,
        end_derived,
        step,
    })
}

/// Go's unquoting of a string literal (single quotes allowed); None where Go fails, and where
/// an escape gives a byte that is not UTF-8 on its own.
fn unquote(inner: &[char], quote: char) -> Option<String> {
    let mut out = String::with_capacity(inner.len());
    let mut i = 0;
    while let Some(&c) = inner.get(i) {
        i += 1;
        if c == quote {
            return None;
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = *inner.get(i)?;
        i += 1;
        let hex = |len: usize, i: &mut usize| -> Option<u32> {
            let digits: String = inner.get(*i..*i + len)?.iter().collect();
            *i += len;
            if !digits.chars().all(|c| c.is_ascii_hexdigit()) {
                return None;
            }
            u32::from_str_radix(&digits, 16).ok()
        };
        let decoded = match e {
            'a' => '\u{7}',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\u{b}',
            '\\' => '\\',
            '\'' | '"' if e == quote => e,
            'x' => char::from_u32(hex(2, &mut i)?).filter(char::is_ascii)?,
            'u' => char::from_u32(hex(4, &mut i)?)?,
            'U' => char::from_u32(hex(8, &mut i)?)?,
            '0'..='7' => {
                let digits: String = std::iter::once(e)
                    .chain(inner.get(i..i + 2)?.iter().copied())
                    .collect();
                i += 2;
                char::from_u32(u32::from_str_radix(&digits, 8).ok()?).filter(char::is_ascii)?
            }
            _ => return None,
        };
        out.push(decoded);
    }
    Some(out)
}

/// A value a path reached, and where (only while tracking, for values of the document).
#[derive(Clone, Debug)]
struct Hit<'a> {
    path: Vec<Step>,
    value: Cow<'a, Value>,
}

impl<'a> Hit<'a> {
    fn root(doc: &'a Value) -> Self {
        Hit {
            path: Vec::new(),
            value: Cow::Borrowed(doc),
        }
    }

    /// The value when it belongs to the document (literals and string bytes do not).
    fn doc(&self) -> Option<&'a Value> {
        match self.value {
            Cow::Borrowed(v) => Some(v),
            Cow::Owned(_) => None,
        }
    }
}

/// What a JSON value is, for messages ("a list", "an object", ...).
pub fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

struct Walker {
    dialect: Dialect,
    /// Whether hits carry their concrete path (ignoreFields needs it, feedback does not).
    track: bool,
}

impl Walker {
    fn child<'a>(&self, parent: &Hit<'a>, step: Step, value: Cow<'a, Value>) -> Hit<'a> {
        let path = if self.track {
            let mut p = parent.path.clone();
            p.push(step);
            p
        } else {
            Vec::new()
        };
        Hit { path, value }
    }

    fn list<'a>(&self, nodes: &[Node], input: Vec<Hit<'a>>) -> Result<Vec<Hit<'a>>, String> {
        let mut current = input;
        for node in nodes {
            current = self.node(node, current)?;
            if current.len() > MAX_VALUES {
                return Err(format!("the path reaches more than {MAX_VALUES} values"));
            }
        }
        Ok(current)
    }

    fn node<'a>(&self, node: &Node, input: Vec<Hit<'a>>) -> Result<Vec<Hit<'a>>, String> {
        match node {
            Node::Field(key) => Ok(input
                .iter()
                .filter_map(|hit| {
                    let member = hit.doc()?.as_object()?.get(key)?;
                    Some(self.child(hit, Step::Key(key.clone()), Cow::Borrowed(member)))
                })
                .collect()),
            Node::Wildcard => Ok(input.iter().flat_map(|h| self.members(h)).collect()),
            Node::Recursive => Ok(self.descend(input)),
            Node::Slice(slice) => self.slice(slice, input),
            Node::Union(branches) => {
                let mut out = Vec::new();
                for branch in branches {
                    out.extend(self.list(branch, input.clone())?);
                }
                Ok(out)
            }
            Node::Filter(filter) => self.filter(filter, input),
            Node::Text(text) => Ok(vec![Hit {
                path: Vec::new(),
                value: Cow::Owned(Value::String(text.clone())),
            }]),
            Node::Constant(c) => Ok(input
                .iter()
                .map(|_| Hit {
                    path: Vec::new(),
                    value: Cow::Owned(c.clone()),
                })
                .collect()),
        }
    }

    /// The members of an object, elements of a list, or (client-go reading `.*` of a string)
    /// its bytes as numbers.
    fn members<'a>(&self, hit: &Hit<'a>) -> Vec<Hit<'a>> {
        match (hit.doc(), hit.value.as_ref()) {
            (Some(Value::Object(m)), _) => m
                .iter()
                .map(|(k, v)| self.child(hit, Step::Key(k.clone()), Cow::Borrowed(v)))
                .collect(),
            (Some(Value::Array(a)), _) => a
                .iter()
                .enumerate()
                .map(|(i, v)| self.child(hit, Step::Index(i), Cow::Borrowed(v)))
                .collect(),
            (_, Value::String(s)) if self.dialect == Dialect::ClientGo => s
                .bytes()
                .enumerate()
                .map(|(i, b)| self.child(hit, Step::Index(i), Cow::Owned(Value::from(b))))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// `..`: each input value and everything below it, depth first, keeping (as client-go) only
    /// values with members, elements or characters.
    fn descend<'a>(&self, input: Vec<Hit<'a>>) -> Vec<Hit<'a>> {
        let mut out = Vec::new();
        let mut stack: Vec<Hit<'a>> = input.into_iter().rev().collect();
        while let Some(hit) = stack.pop() {
            let has_members = match hit.value.as_ref() {
                Value::Object(m) => !m.is_empty(),
                Value::Array(a) => !a.is_empty(),
                Value::String(s) => !s.is_empty(),
                _ => false,
            };
            if !has_members {
                continue;
            }
            // A string's bytes have no members, so they are never kept themselves.
            let below = if hit.value.is_string() {
                Vec::new()
            } else {
                self.members(&hit)
            };
            out.push(hit);
            stack.extend(below.into_iter().rev());
        }
        out
    }

    fn slice<'a>(&self, slice: &Slice, input: Vec<Hit<'a>>) -> Result<Vec<Hit<'a>>, String> {
        let mut out = Vec::new();
        for hit in &input {
            let list = match (hit.doc(), hit.value.as_ref()) {
                (_, Value::Null) => continue,
                (Some(Value::Array(a)), _) => a,
                (_, other) if self.dialect == Dialect::ClientGo => {
                    return Err(format!("{} is not an array or slice", kind_of(other)));
                }
                _ => continue,
            };
            let len = i64::try_from(list.len()).unwrap_or(i64::MAX);
            let mut start = slice.start.unwrap_or(0);
            if start < 0 {
                start = start.saturating_add(len);
            }
            let mut end = slice.end.unwrap_or(len);
            if end < 0 || (end == 0 && slice.end_derived) {
                end = end.saturating_add(len);
            }
            if start == end {
                // client-go returns here, dropping the values still to come: kept so that
                // results agree with it.
                return Ok(out);
            }
            let in_bounds = (0..len).contains(&start) && (0..=len).contains(&end) && start <= end;
            if !in_bounds {
                if self.dialect == Dialect::FieldNames {
                    continue;
                }
                if !(0..len).contains(&start) {
                    return Err(format!(
                        "array index out of bounds: index {start}, length {len}"
                    ));
                }
                if !(0..=len).contains(&end) {
                    return Err(format!(
                        "array index out of bounds: index {}, length {len}",
                        end.saturating_sub(1)
                    ));
                }
                return Err(format!(
                    "starting index {start} is greater than ending index {end}"
                ));
            }
            let step = match slice.step {
                None => 1,
                Some(s) if s > 0 => usize::try_from(s).unwrap_or(usize::MAX),
                Some(_) => return Err("step must be > 0".into()),
            };
            // In bounds, so both convert.
            let (from, to) = (
                usize::try_from(start).unwrap_or(0),
                usize::try_from(end).unwrap_or(0),
            );
            for (i, v) in list.iter().enumerate().take(to).skip(from).step_by(step) {
                out.push(self.child(hit, Step::Index(i), Cow::Borrowed(v)));
            }
        }
        Ok(out)
    }

    fn filter<'a>(&self, filter: &Filter, input: Vec<Hit<'a>>) -> Result<Vec<Hit<'a>>, String> {
        let mut out = Vec::new();
        for hit in &input {
            let Some(Value::Array(list)) = hit.doc() else {
                if self.dialect == Dialect::FieldNames {
                    continue;
                }
                return Err(format!(
                    "{} is not an array and cannot be filtered",
                    kind_of(&hit.value)
                ));
            };
            for (i, element) in list.iter().enumerate() {
                let element = self.child(hit, Step::Index(i), Cow::Borrowed(element));
                let left = self.list(&filter.left, vec![element.clone()]);
                if filter.op == Op::Exists {
                    // client-go keeps an element whose operand reached something, or whose
                    // operand failed (it then looks at the values the failing step was given).
                    if left.map_or(true, |l| !l.is_empty()) {
                        out.push(element);
                    }
                    continue;
                }
                let Some(left) = one_operand(left?)? else {
                    continue;
                };
                let right = self.list(&filter.right, vec![element.clone()])?;
                let Some(right) = one_operand(right)? else {
                    continue;
                };
                if compare(filter.op, &left, &right)? {
                    out.push(element);
                }
            }
        }
        Ok(out)
    }
}

fn one_operand(values: Vec<Hit<'_>>) -> Result<Option<Cow<'_, Value>>, String> {
    match values.len() {
        0 => Ok(None),
        1 => Ok(values.into_iter().next().map(|h| h.value)),
        _ => Err("can only compare one element at a time".into()),
    }
}

/// A value as Go's template comparisons see it.
#[derive(PartialEq, PartialOrd)]
enum Basic<'v> {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'v str),
}

fn basic(value: &Value) -> Result<Basic<'_>, String> {
    match value {
        Value::Bool(b) => Ok(Basic::Bool(*b)),
        Value::Number(n) => Ok(match n.as_i64() {
            Some(i) => Basic::Int(i),
            None => Basic::Float(n.as_f64().unwrap_or(f64::NAN)),
        }),
        Value::String(s) => Ok(Basic::Str(s)),
        _ => Err(format!("invalid type for comparison: {}", kind_of(value))),
    }
}

/// client-go's filter comparison: both sides of one basic type (an integer never equals a
/// float, as in Go), booleans only for `==` and `!=`.
fn compare(op: Op, left: &Value, right: &Value) -> Result<bool, String> {
    let (l, r) = (basic(left)?, basic(right)?);
    if std::mem::discriminant(&l) != std::mem::discriminant(&r) {
        return Err(format!(
            "incompatible types for comparison: {} and {}",
            kind_of(left),
            kind_of(right)
        ));
    }
    let ordered = || match (&l, &r) {
        (Basic::Bool(_), _) => Err("invalid type for comparison: a boolean".to_string()),
        _ => Ok(l < r),
    };
    Ok(match op {
        Op::Eq => l == r,
        Op::Ne => l != r,
        Op::Lt => ordered()?,
        Op::Le => ordered()? || l == r,
        Op::Gt => !(ordered()? || l == r),
        Op::Ge => !ordered()?,
        Op::Exists => true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn select(path: &str, doc: &Value) -> Result<Vec<Value>, String> {
        let p = JsonPath::parse(path)?;
        Ok(p.select(doc)?.into_iter().map(Cow::into_owned).collect())
    }

    #[test]
    fn filters_select_matching_elements() {
        let doc = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Failed", "status": "False"}]}});
        assert_eq!(
            select(r#"{.status.conditions[?(@.type=="Ready")].status}"#, &doc),
            Ok(vec![json!("True")])
        );
        assert_eq!(
            select(".status.conditions[?(@.type=='Nope')].status", &doc),
            Ok(vec![])
        );
        assert_eq!(
            select(".status.conditions[?(@.type!='Ready')].type", &doc),
            Ok(vec![json!("Failed")])
        );
    }

    #[test]
    fn the_whole_object_is_at_and_dollar() {
        let doc = json!({"a": 1});
        for path in ["@", "$", "{@}", "{$}", "", " @ "] {
            assert_eq!(select(path, &doc), Ok(vec![doc.clone()]), "{path:?}");
        }
    }

    #[test]
    fn refusals_and_failures_are_errors() {
        for bad in [
            "[?(@.x<>1)]",
            "[?(x=='a')]",
            "[?@.x=='a']",
            ".a[",
            "{.a",
            "{.a}{.b}",
            "{.a} text",
            ".a}",
            "{range .a}{end}",
            "*",
            "....a",
        ] {
            assert!(JsonPath::parse(bad).is_err(), "{bad} should be refused");
        }
        let doc = json!({"l": [1, 2], "m": {"x": 1}, "f": [{"x": 1.5}, {"x": 1}]});
        for failing in [".l[2]", ".l[-3]", ".m[0]", ".m[?(@.x)]", ".f[?(@.x>1)]"] {
            assert!(select(failing, &doc).is_err(), "{failing} should fail");
        }
    }

    #[test]
    fn comparisons_follow_go_types() {
        let doc = json!([{"n": 1, "s": "b", "b": true}, {"n": 3, "s": "a", "b": false}]);
        assert_eq!(select("[?(@.n>=3)].s", &doc), Ok(vec![json!("a")]));
        assert_eq!(select("[?(@.n<=1)].s", &doc), Ok(vec![json!("b")]));
        assert_eq!(select("[?(@.s<'b')].n", &doc), Ok(vec![json!(3)]));
        assert_eq!(select("[?(@.b==false)].n", &doc), Ok(vec![json!(3)]));
        assert!(select("[?(@.b<true)]", &doc).is_err());
        assert!(select("[?(@.n=='1')]", &doc).is_err());
        assert!(select("[?(@.n==1.0)]", &doc).is_err());
    }

    #[test]
    fn field_paths_keep_quoted_keys_whole_and_never_fail() {
        let doc = json!({"m": {"a.b": 1, "a": {"b": 2}}, "l": [0]});
        let p = JsonPath::parse_field_path(".m['a.b']").expect("parses");
        let got: Vec<&Value> = p
            .walk(&doc)
            .expect("walks")
            .into_iter()
            .map(|h| h.1)
            .collect();
        assert_eq!(got, vec![&json!(1)]);
        let p = JsonPath::parse(".m['a.b']").expect("parses");
        assert_eq!(p.select(&doc).map(|v| v.len()), Ok(1));
        assert_eq!(select(".m['a.b']", &doc), Ok(vec![json!(2)]));
        let p = JsonPath::parse_field_path(".l[3]").expect("parses");
        assert_eq!(p.walk(&doc), Ok(vec![]));
        let p = JsonPath::parse_field_path(".l.[0]").expect("parses");
        assert_eq!(
            p.walk(&doc),
            Ok(vec![(
                vec![Step::Key("l".into()), Step::Index(0)],
                &json!(0)
            )])
        );
    }

    #[test]
    fn unions_cannot_exhaust_memory() {
        let doc = json!([[[[[[0, 0, 0, 0, 0, 0, 0, 0, 0, 0]]]]]]);
        let path = "[0,0,0,0,0,0,0,0,0,0]".repeat(6);
        let err = select(&path, &doc).expect_err("too many values");
        assert!(err.contains("more than"), "{err}");
    }
}
