//! Checks of CEL condition rules that need the parsed tree: reading `object.status` without a
//! guard for an object that has no status yet, and comparisons that can never be true.

use std::collections::HashMap;

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::parser::Parser;
use serde_json::Value;

/// A problem found in one expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CelFinding {
    /// Whether the expression can never be true (an error) or is only risky (a warning).
    pub never_true: bool,
    /// What is wrong and what to do.
    pub message: String,
}

/// What one expression does with `object.status`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StatusUse {
    /// It reads a field under `object.status` (`object.status.x`).
    pub reads: bool,
    /// It tests for presence (`has(object.status...)`, `object.?status`, `'status' in object`).
    pub guards: bool,
}

fn parse(source: &str) -> Option<IdedExpr> {
    Parser::new()
        .enable_optional_syntax(true)
        .parse(source)
        .ok()
}

/// How `source` uses `object.status` (None when it does not parse).
pub fn status_use(source: &str) -> Option<StatusUse> {
    let expr = parse(source)?;
    let mut out = StatusUse::default();
    visit(&expr, &mut |e| match &e.expr {
        Expr::Select(s)
            if s.test
                && path_of(e).is_some_and(|p| p.first().map(String::as_str) == Some("status")) =>
        {
            out.guards = true
        }
        Expr::Select(s) if !s.test && path_of(&s.operand).is_some_and(|p| p == ["status"]) => {
            out.reads = true
        }
        Expr::Call(c) if c.func_name == "_?._" || c.func_name == "@in" => {
            let on_object = c
                .args
                .iter()
                .any(|a| matches!(&a.expr, Expr::Ident(n) if n == "object"));
            let status = c.args.iter().any(|a| matches!(&a.expr, Expr::Literal(LiteralValue::String(s)) if s.inner() == "status"));
            if on_object && status {
                out.guards = true;
            }
        }
        _ => {}
    });
    Some(out)
}

/// Comparisons in `source` that can never be true, judged against the manifest's own fields
/// (`manifest` is the object as written in the work) and the condition convention (a
/// condition's `status` is the string "True", "False" or "Unknown").
pub fn never_true(source: &str, manifest: Option<&Value>) -> Vec<CelFinding> {
    let Some(expr) = parse(source) else {
        return Vec::new();
    };
    let mut findings = Vec::new();
    let mut ranges: HashMap<String, Vec<String>> = HashMap::new();
    collect_ranges(&expr, &mut ranges);
    visit(&expr, &mut |e| {
        let Expr::Call(call) = &e.expr else { return };
        if !matches!(call.func_name.as_str(), "_==_" | "_!=_") || call.args.len() != 2 {
            return;
        }
        let (a, b) = (&call.args[0], &call.args[1]);
        let (field, literal) = match (literal_type(a), literal_type(b)) {
            (None, Some(t)) => (a, t),
            (Some(t), None) => (b, t),
            _ => return,
        };
        let negated = call.func_name == "_!=_";
        // A condition's status compared with a bool or a number.
        if let Expr::Select(s) = &field.expr
            && s.field == "status"
            && !s.test
            && let Expr::Ident(var) = &s.operand.expr
            && ranges
                .get(var)
                .is_some_and(|r| r.last().map(String::as_str) == Some("conditions"))
            && literal != "string"
        {
            findings.push(CelFinding {
                never_true: !negated,
                message: format!(
                    "{var}.status is compared with {} {literal}, but a condition's status is the string 'True', 'False' or 'Unknown': write {var}.status == 'True'",
                    article(literal)
                ),
            });
            return;
        }
        // A field of the manifest itself compared with a literal of another type.
        if let (Some(path), Some(manifest)) = (path_of(field), manifest)
            && matches!(path.first().map(String::as_str), Some("spec" | "metadata"))
        {
            let pointer = format!("/{}", path.join("/"));
            if let Some(value) = manifest.pointer(&pointer) {
                let actual = json_type(value);
                let numeric = |t: &str| t == "int" || t == "double";
                if actual != literal && !(numeric(actual) && numeric(literal)) && actual != "null" {
                    findings.push(CelFinding {
                        never_true: !negated,
                        message: format!(
                            "object.{} is {} {actual} in the manifest but is compared with {} {literal}: {}",
                            path.join("."),
                            article(actual),
                            article(literal),
                            if negated { "the comparison is always true" } else { "the comparison is never true" }
                        ),
                    });
                }
            }
        }
    });
    findings
}

/// Whether `source` has no variables and evaluates to `false` (the rule can never pass).
pub fn constant_false(source: &str) -> bool {
    let Some(expr) = parse(source) else {
        return false;
    };
    let mut has_ident = false;
    visit(&expr, &mut |e| {
        if matches!(e.expr, Expr::Ident(_)) {
            has_ident = true;
        }
    });
    !has_ident
        && conditions::Evaluator::shared()
            .eval_expression(source, &conditions::Bindings::Object(&Value::Null))
            .is_ok_and(|v| v == Value::Bool(false))
}

fn article(type_name: &str) -> &'static str {
    if type_name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "double",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

fn literal_type(e: &IdedExpr) -> Option<&'static str> {
    match &e.expr {
        Expr::Literal(LiteralValue::String(_)) => Some("string"),
        Expr::Literal(LiteralValue::Int(_)) | Expr::Literal(LiteralValue::UInt(_)) => Some("int"),
        Expr::Literal(LiteralValue::Double(_)) => Some("double"),
        Expr::Literal(LiteralValue::Boolean(_)) => Some("bool"),
        _ => None,
    }
}

/// `object.a.b.c` as `["a", "b", "c"]` (None for anything else).
fn path_of(e: &IdedExpr) -> Option<Vec<String>> {
    match &e.expr {
        Expr::Ident(n) if n == "object" => Some(Vec::new()),
        Expr::Select(s) => {
            let mut p = path_of(&s.operand)?;
            p.push(s.field.clone());
            Some(p)
        }
        _ => None,
    }
}

/// Comprehension variable -> the `object` path it ranges over.
fn collect_ranges(e: &IdedExpr, out: &mut HashMap<String, Vec<String>>) {
    visit(e, &mut |e| {
        if let Expr::Comprehension(c) = &e.expr {
            let mut range = &c.iter_range;
            // `x.filter(..).all(..)`: the filter's own range.
            while let Expr::Comprehension(inner) = &range.expr {
                range = &inner.iter_range;
            }
            if let Some(path) = path_of(range) {
                out.insert(c.iter_var.clone(), path);
            }
        }
    });
}

fn visit<'a>(e: &'a IdedExpr, f: &mut dyn FnMut(&'a IdedExpr)) {
    f(e);
    match &e.expr {
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                visit(t, f);
            }
            for a in &c.args {
                visit(a, f);
            }
        }
        Expr::Comprehension(c) => {
            for sub in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                visit(sub, f);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|x| visit(x, f)),
        Expr::Map(m) => m
            .entries
            .iter()
            .for_each(|entry| visit_entry(&entry.expr, f)),
        Expr::Struct(s) => s
            .entries
            .iter()
            .for_each(|entry| visit_entry(&entry.expr, f)),
        Expr::Select(s) => visit(&s.operand, f),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn visit_entry<'a>(entry: &'a EntryExpr, f: &mut dyn FnMut(&'a IdedExpr)) {
    match entry {
        EntryExpr::MapEntry(m) => {
            visit(&m.key, f);
            visit(&m.value, f);
        }
        EntryExpr::StructField(s) => visit(&s.value, f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status_reads_and_guards_are_told_apart() {
        let u = status_use("object.status.ready == 1").unwrap();
        assert_eq!(
            u,
            StatusUse {
                reads: true,
                guards: false
            }
        );
        let u = status_use("has(object.status) && object.status.ready == 1").unwrap();
        assert!(u.reads && u.guards);
        let u = status_use("has(object.status.ready) && object.status.ready == 1").unwrap();
        assert!(u.guards);
        let u = status_use("object.?status.?ready.orValue(0) == 1").unwrap();
        assert_eq!(
            u,
            StatusUse {
                reads: false,
                guards: true
            }
        );
        let u = status_use("'status' in object && object.status.x").unwrap();
        assert!(u.guards);
        assert_eq!(
            status_use("object.spec.x == 1").unwrap(),
            StatusUse::default()
        );
    }

    #[test]
    fn condition_status_against_a_bool_is_never_true() {
        let f = never_true(
            "object.status.conditions.exists(c, c.type == 'Ready' && c.status == true)",
            None,
        );
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].never_true);
        let f = never_true(
            "object.status.conditions.filter(c, c.type == 'Ready').all(c, c.status == 'True')",
            None,
        );
        assert!(f.is_empty(), "{f:?}");
    }

    #[test]
    fn manifest_fields_against_another_type_are_never_true() {
        let manifest = json!({"spec": {"replicas": 3, "mode": "fast"}});
        let f = never_true("object.spec.replicas == '3'", Some(&manifest));
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(never_true("object.spec.replicas == 3.0", Some(&manifest)).is_empty());
        assert!(never_true("object.spec.mode == 'fast'", Some(&manifest)).is_empty());
        assert!(never_true("object.spec.unknown == 1", Some(&manifest)).is_empty());
    }

    #[test]
    fn constant_false_needs_no_variables() {
        assert!(constant_false("1 > 2"));
        assert!(constant_false("false"));
        assert!(!constant_false("true"));
        assert!(!constant_false("object.x == 1"));
    }
}
