//! Checks of CEL condition rules that need the parsed tree: reading `object.status` without a
//! guard for an object that has no status yet, comparisons that can never be true, and shapes
//! that are true when what they look for is absent (vacuous truth).

use std::collections::HashMap;

use cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
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

/// Shapes of `source` that are true when what they look for is absent: `all` over a `filter`
/// (true when nothing passes the filter: `conditions.filter(c, c.type == 'Ready').all(c,
/// c.status == 'True')` holds before the controller wrote `Ready`), `all` over a list of the
/// object's status (true while it is empty), `!exists` and `size(filter) == 0` over one (true
/// while it is empty). `rule` holds every expression of the rule (they are AND-ed): one that
/// requires the list to hold something (`exists`, `exists_one`, `hasConditions`, `size(..) > 0`)
/// makes the shape fine.
pub fn vacuous(source: &str, rule: &[&str]) -> Vec<CelFinding> {
    let Some(expr) = parse(source) else {
        return Vec::new();
    };
    let parsed: Vec<IdedExpr> = rule.iter().filter_map(|s| parse(s)).collect();
    let required = |path: &[String]| parsed.iter().any(|e| requires(e, path, false));
    let mut findings = Vec::new();
    let mut warn = |path: &[String], what: String| {
        if !required(path) {
            findings.push(CelFinding {
                never_true: false,
                message: format!(
                    "{what}: true when object.{} is absent or empty (before its controller writes it); require it too, e.g. with .exists(...) in the rule",
                    path.join(".")
                ),
            });
        }
    };
    walk(&expr, false, &mut |e, negated| match &e.expr {
        Expr::Comprehension(c) => {
            let Some((path, through_filter)) = range_of(c) else {
                return;
            };
            match (macro_of(c), negated) {
                (Macro::All, false) if through_filter => warn(
                    &path,
                    "filter(...).all(...) is true when no element passes the filter".to_string(),
                ),
                (Macro::All, false) if is_status(&path) => {
                    warn(&path, "all(...) is true for an empty list".to_string())
                }
                (Macro::Exists, true) if is_status(&path) => {
                    warn(&path, "!exists(...) is true for an empty list".to_string())
                }
                _ => {}
            }
        }
        Expr::Call(call) if !negated && call.func_name == "_==_" && call.args.len() == 2 => {
            let sized = call.args.iter().find_map(size_of_filter);
            let zero = call
                .args
                .iter()
                .any(|a| matches!(&a.expr, Expr::Literal(LiteralValue::Int(i)) if *i.inner() == 0));
            if let (Some(path), true) = (sized, zero)
                && is_status(&path)
            {
                warn(
                    &path,
                    "size(filter(...)) == 0 is true for an empty list".to_string(),
                );
            }
        }
        _ => {}
    });
    findings
}

/// Whether a path is under the object's status (what a controller writes later).
fn is_status(path: &[String]) -> bool {
    path.first().map(String::as_str) == Some("status")
}

/// What a comprehension is, from the shape the parser expands each macro to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Macro {
    All,
    Exists,
    ExistsOne,
    Filter,
    Other,
}

fn macro_of(c: &ComprehensionExpr) -> Macro {
    let step = match &c.loop_step.expr {
        Expr::Call(call) => call.func_name.as_str(),
        _ => "",
    };
    match &c.accu_init.expr {
        Expr::Literal(LiteralValue::Boolean(b)) if *b.inner() && step == "_&&_" => Macro::All,
        Expr::Literal(LiteralValue::Boolean(b)) if !*b.inner() && step == "_||_" => Macro::Exists,
        Expr::Literal(LiteralValue::Int(i)) if *i.inner() == 0 => Macro::ExistsOne,
        Expr::List(l) if l.elements.is_empty() && step == "_?_:_" => Macro::Filter,
        _ => Macro::Other,
    }
}

/// The object list a comprehension ranges over (through any `filter`s), and whether through one.
fn range_of(c: &ComprehensionExpr) -> Option<(Vec<String>, bool)> {
    match &c.iter_range.expr {
        Expr::Comprehension(inner) if macro_of(inner) == Macro::Filter => {
            range_of(inner).map(|(path, _)| (path, true))
        }
        _ => read_path(&c.iter_range).map(|path| (path, false)),
    }
}

/// `object.a.b`, `object.?a.?b` and `object.?a.orValue(x)` as `["a", "b"]`.
fn read_path(e: &IdedExpr) -> Option<Vec<String>> {
    match &e.expr {
        Expr::Ident(n) if n == "object" => Some(Vec::new()),
        Expr::Select(s) if !s.test => {
            let mut p = read_path(&s.operand)?;
            p.push(s.field.clone());
            Some(p)
        }
        Expr::Call(c) if c.func_name == "_?._" && c.args.len() == 2 => {
            let Expr::Literal(LiteralValue::String(field)) = &c.args[1].expr else {
                return None;
            };
            let mut p = read_path(&c.args[0])?;
            p.push(field.inner().to_string());
            Some(p)
        }
        Expr::Call(c) if c.func_name == "orValue" => read_path(c.target.as_deref()?),
        _ => None,
    }
}

/// The list `size(list.filter(...))` counts, if `e` is that.
fn size_of_filter(e: &IdedExpr) -> Option<Vec<String>> {
    let Expr::Call(c) = &e.expr else {
        return None;
    };
    let counted = match (c.func_name.as_str(), c.target.as_deref(), c.args.as_slice()) {
        ("size", None, [arg]) | ("size", Some(arg), []) => arg,
        _ => return None,
    };
    match &counted.expr {
        Expr::Comprehension(inner) if macro_of(inner) == Macro::Filter => {
            range_of(inner).map(|(path, _)| path)
        }
        _ => None,
    }
}

/// Whether `e` requires the list at `path` to hold something, outside a negation: an `exists`
/// or `exists_one` over it, `hasConditions` of its parent (for `conditions`), `size(..) > 0`.
fn requires(e: &IdedExpr, path: &[String], negated: bool) -> bool {
    let mut found = false;
    walk(e, negated, &mut |e, negated| {
        if negated {
            return;
        }
        match &e.expr {
            Expr::Comprehension(c)
                if matches!(macro_of(c), Macro::Exists | Macro::ExistsOne)
                    && range_of(c).is_some_and(|(p, _)| p == path) =>
            {
                found = true
            }
            Expr::Call(c) if c.func_name == "hasConditions" && c.args.len() == 1 => {
                if let Some(mut p) = read_path(&c.args[0]) {
                    p.push("conditions".into());
                    found |= p == path;
                }
            }
            Expr::Call(c)
                if matches!(c.func_name.as_str(), "_>_" | "_!=_" | "_>=_") && c.args.len() == 2 =>
            {
                let counted = match &c.args[0].expr {
                    Expr::Call(size) if size.func_name == "size" => size
                        .args
                        .first()
                        .or(size.target.as_deref())
                        .and_then(|a| read_path(a).or_else(|| size_of_filter_list(a))),
                    _ => None,
                };
                found |= counted.is_some_and(|p| p == path);
            }
            _ => {}
        }
    });
    found
}

/// The list a `list.filter(...)` ranges over.
fn size_of_filter_list(e: &IdedExpr) -> Option<Vec<String>> {
    match &e.expr {
        Expr::Comprehension(c) if macro_of(c) == Macro::Filter => range_of(c).map(|(p, _)| p),
        _ => None,
    }
}

/// Visits every node with whether an odd number of `!` is above it.
fn walk<'a>(e: &'a IdedExpr, negated: bool, f: &mut dyn FnMut(&'a IdedExpr, bool)) {
    f(e, negated);
    match &e.expr {
        Expr::Call(c) => {
            let inner = negated ^ (c.func_name == "!_");
            if let Some(t) = &c.target {
                walk(t, inner, f);
            }
            for a in &c.args {
                walk(a, inner, f);
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
                walk(sub, negated, f);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|x| walk(x, negated, f)),
        Expr::Map(m) => m
            .entries
            .iter()
            .for_each(|entry| walk_entry(&entry.expr, negated, f)),
        Expr::Struct(s) => s
            .entries
            .iter()
            .for_each(|entry| walk_entry(&entry.expr, negated, f)),
        Expr::Select(s) => walk(&s.operand, negated, f),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
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
    walk(e, false, &mut |e, _| f(e));
}

fn walk_entry<'a>(entry: &'a EntryExpr, negated: bool, f: &mut dyn FnMut(&'a IdedExpr, bool)) {
    match entry {
        EntryExpr::MapEntry(m) => {
            walk(&m.key, negated, f);
            walk(&m.value, negated, f);
        }
        EntryExpr::StructField(s) => walk(&s.value, negated, f),
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
    fn shapes_true_when_what_they_look_for_is_absent_are_found() {
        let alone = |source: &str| vacuous(source, &[source]);
        // Flux's cheat-sheet shape, and its cousins.
        for source in [
            "object.status.conditions.filter(c, c.type == 'Ready').all(c, c.status == 'True')",
            "object.?status.?conditions.orValue([]).filter(c, c.type == 'Ready').all(c, c.status == 'True')",
            "object.status.conditions.all(c, c.type != 'Ready' || c.status == 'True')",
            "!object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'False')",
            "size(object.status.conditions.filter(c, c.type == 'Failed' && c.status == 'True')) == 0",
            "object.spec.containers.filter(c, c.name == 'main').all(c, c.image != '')",
        ] {
            let found = alone(source);
            assert_eq!(found.len(), 1, "{source}: {found:?}");
            assert!(!found[0].never_true);
        }
        // Fine: the presence is required, here or in another expression of the rule.
        for (source, rule) in [
            (
                "object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')",
                vec![],
            ),
            (
                "object.status.conditions.filter(c, c.type == 'Ready').all(c, c.status == 'True')",
                vec!["object.status.conditions.exists(c, c.type == 'Ready')"],
            ),
            (
                "object.status.conditions.all(c, c.status != 'False')",
                vec!["has(object.status) && hasConditions(object.status)"],
            ),
            (
                "!object.status.conditions.exists(c, c.status == 'False')",
                vec!["size(object.status.conditions) > 0"],
            ),
            ("object.spec.containers.all(c, has(c.image))", vec![]),
            (
                "object.status.readyReplicas == object.spec.replicas",
                vec![],
            ),
        ] {
            let mut all = rule.clone();
            all.push(source);
            assert!(vacuous(source, &all).is_empty(), "{source} with {rule:?}");
        }
        // A negated requirement requires nothing.
        let source = "object.status.conditions.all(c, c.status == 'True')";
        let negated = "!object.status.conditions.exists(c, c.type == 'Ready')";
        assert_eq!(vacuous(source, &[source, negated]).len(), 1);
    }

    #[test]
    fn constant_false_needs_no_variables() {
        assert!(constant_false("1 > 2"));
        assert!(constant_false("false"));
        assert!(!constant_false("true"));
        assert!(!constant_false("object.x == 1"));
    }
}
