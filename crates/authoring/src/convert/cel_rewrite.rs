//! Rewrites free variables of a CEL expression into fields of `object` (`status.x` becomes
//! `object.status.x`), for expressions written against an object's top-level fields (Flux
//! `healthCheckExprs`). Works on the parsed tree: only identifiers that are variables (not
//! field selections, function names or comprehension variables) are rewritten, at the source
//! offsets the parser reports.

use std::collections::BTreeSet;

use cel::common::ast::{EntryExpr, Expr, IdedEntryExpr, IdedExpr, SourceInfo};
use cel::parser::Parser;

/// Namespaces of functions (`math.greatest(..)`): receivers that are not variables.
const FUNCTION_NAMESPACES: &[&str] = &[
    "math", "strings", "base64", "optional", "sets", "lists", "cel",
];

/// Why an expression could not be rewritten.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    /// The expression does not parse.
    #[error("does not parse: {0}")]
    Parse(String),
    /// A name is used both as a free variable and as a comprehension variable.
    #[error(
        "{0:?} is both a top-level field and a comprehension variable; rename the comprehension variable"
    )]
    Ambiguous(String),
    /// The parser's offsets do not point at the identifier (should not happen).
    #[error("cannot locate identifier {0:?} in the source")]
    Offset(String),
}

/// `source` with every free variable `v` replaced by `<root>.v`.
pub fn rewrite_free_variables(source: &str, root: &str) -> Result<String, RewriteError> {
    let walk = Walk::of(source)?;
    if let Some(name) = walk.free_names.intersection(&walk.bound_names).next() {
        return Err(RewriteError::Ambiguous(name.clone()));
    }
    // Character offsets (ANTLR counts chars) to byte offsets, last first so earlier offsets
    // stay valid while inserting.
    let char_starts: Vec<usize> = source.char_indices().map(|(i, _)| i).collect();
    let mut positions: Vec<(usize, String)> = Vec::new();
    for (start, name) in walk.free_at {
        let byte = char_starts
            .get(start)
            .copied()
            .ok_or_else(|| RewriteError::Offset(name.clone()))?;
        if !source[byte..].starts_with(name.as_str()) {
            return Err(RewriteError::Offset(name));
        }
        positions.push((byte, name));
    }
    positions.sort();
    positions.dedup();
    let mut out = source.to_string();
    for (byte, _) in positions.iter().rev() {
        out.insert_str(*byte, &format!("{root}."));
    }
    Ok(out)
}

/// The free variables of `source` (names a top-level binding would have to supply).
pub fn free_variables(source: &str) -> Result<BTreeSet<String>, RewriteError> {
    Ok(Walk::of(source)?.free_names)
}

#[derive(Default)]
struct Walk {
    free_at: Vec<(usize, String)>,
    free_names: BTreeSet<String>,
    bound_names: BTreeSet<String>,
}

impl Walk {
    /// Parses `source` and walks its tree.
    fn of(source: &str) -> Result<Self, RewriteError> {
        let (expr, info) = Parser::new()
            .enable_optional_syntax(true)
            .parse_with_source_info(source)
            .map_err(|e| RewriteError::Parse(e.to_string()))?;
        let mut walk = Walk::default();
        walk.visit(&expr, &mut Vec::new(), &info);
        Ok(walk)
    }

    fn visit_entries(
        &mut self,
        entries: &[IdedEntryExpr],
        scope: &mut Vec<String>,
        info: &SourceInfo,
    ) {
        for entry in entries {
            match &entry.expr {
                EntryExpr::MapEntry(m) => {
                    self.visit(&m.key, scope, info);
                    self.visit(&m.value, scope, info);
                }
                EntryExpr::StructField(f) => self.visit(&f.value, scope, info),
            }
        }
    }

    fn visit(&mut self, e: &IdedExpr, scope: &mut Vec<String>, info: &SourceInfo) {
        match &e.expr {
            Expr::Ident(name) => {
                if name.starts_with('.') || name.starts_with('@') || scope.contains(name) {
                    return;
                }
                if let Some((start, _)) = info.offset_for(e.id) {
                    self.free_at.push((start as usize, name.clone()));
                }
                self.free_names.insert(name.clone());
            }
            Expr::Call(call) => {
                if let Some(target) = &call.target {
                    let namespace = matches!(&target.expr, Expr::Ident(n) if FUNCTION_NAMESPACES.contains(&n.as_str()) && !scope.contains(n));
                    if !namespace {
                        self.visit(target, scope, info);
                    }
                }
                for arg in &call.args {
                    self.visit(arg, scope, info);
                }
            }
            Expr::Comprehension(c) => {
                self.visit(&c.iter_range, scope, info);
                self.visit(&c.accu_init, scope, info);
                let mut bound = vec![c.iter_var.clone(), c.accu_var.clone()];
                if let Some(v) = &c.iter_var2 {
                    bound.push(v.clone());
                }
                for b in &bound {
                    if !b.starts_with('@') && !b.starts_with("__") {
                        self.bound_names.insert(b.clone());
                    }
                }
                let depth = scope.len();
                scope.extend(bound);
                self.visit(&c.loop_cond, scope, info);
                self.visit(&c.loop_step, scope, info);
                self.visit(&c.result, scope, info);
                scope.truncate(depth);
            }
            Expr::List(list) => {
                for item in &list.elements {
                    self.visit(item, scope, info);
                }
            }
            Expr::Map(map) => self.visit_entries(&map.entries, scope, info),
            Expr::Select(select) => self.visit(&select.operand, scope, info),
            Expr::Struct(s) => self.visit_entries(&s.entries, scope, info),
            Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_variables_get_the_root_and_nothing_else_does() {
        let src = "status.conditions.filter(e, e.type == 'Ready').all(e, e.observedGeneration == metadata.generation && e.status == 'True')";
        assert_eq!(
            rewrite_free_variables(src, "object").unwrap(),
            "object.status.conditions.filter(e, e.type == 'Ready').all(e, e.observedGeneration == object.metadata.generation && e.status == 'True')"
        );
    }

    #[test]
    fn strings_fields_and_functions_are_left_alone() {
        let src = r#"has(status.phase) && status.phase == "status" && size(spec.x) > 0 && 'metadata' != kind"#;
        assert_eq!(
            rewrite_free_variables(src, "object").unwrap(),
            r#"has(object.status.phase) && object.status.phase == "status" && size(object.spec.x) > 0 && 'metadata' != object.kind"#
        );
        assert_eq!(
            rewrite_free_variables("math.greatest(1, spec.replicas) > 0", "object").unwrap(),
            "math.greatest(1, object.spec.replicas) > 0"
        );
        assert_eq!(
            rewrite_free_variables("status.?phase.orValue('') == 'x'", "object").unwrap(),
            "object.status.?phase.orValue('') == 'x'"
        );
    }

    #[test]
    fn a_name_both_free_and_bound_is_refused() {
        let err = rewrite_free_variables(
            "status.conditions.exists(status, status.x) && status.y",
            "object",
        );
        assert_eq!(err, Err(RewriteError::Ambiguous("status".into())));
        assert!(matches!(
            rewrite_free_variables("status.(", "object"),
            Err(RewriteError::Parse(_))
        ));
    }

    #[test]
    fn free_variables_are_listed() {
        let names = free_variables("status.a.exists(c, c.b == metadata.name)").unwrap();
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            vec!["metadata", "status"]
        );
    }
}
