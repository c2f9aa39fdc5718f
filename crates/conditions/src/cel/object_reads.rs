//! Which parts of the `object` variable an expression reads, found at compile time, so that an
//! evaluation converts only those parts of a live object to CEL ([`crate::cel::projection`]).
//!
//! An expression reads `object` through chains of field selections (`object.status.conditions`,
//! `has(object.spec.replicas)`, `object.metadata.labels['app']`, `object.?spec.replicas`); the
//! value at the end of a maximal chain is used as a whole (compared, passed to a function,
//! iterated, indexed with a non-literal), so its whole subtree is read. Any other use of
//! `object` itself (alone, passed to a function or macro, indexed with a non-literal, or a
//! comprehension variable named `object` that shadows it) reads the whole object.

use std::borrow::Cow;
use std::collections::BTreeMap;

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, operators};

/// The variable the live object is bound to.
pub(crate) const OBJECT_VARIABLE: &str = "object";

/// What an expression reads of a value: all of it, or only some of its fields (by name; a field
/// absent from the map is not read at all).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reads {
    /// The whole value.
    Whole,
    /// Only these fields, each read as given; the map itself is only selected from.
    Fields(BTreeMap<String, Reads>),
}

impl Default for Reads {
    /// Nothing read.
    fn default() -> Self {
        Reads::Fields(BTreeMap::new())
    }
}

impl Reads {
    /// What `expr` reads of `object`.
    pub(crate) fn of(expr: &IdedExpr) -> Reads {
        let mut reads = Reads::default();
        collect(expr, &mut reads);
        reads
    }

    /// Whether everything `other` reads, this reads too.
    pub(crate) fn covers(&self, other: &Reads) -> bool {
        match (self, other) {
            (Reads::Whole, _) => true,
            (Reads::Fields(_), Reads::Whole) => false,
            (Reads::Fields(mine), Reads::Fields(theirs)) => theirs
                .iter()
                .all(|(k, r)| mine.get(k).is_some_and(|m| m.covers(r))),
        }
    }

    /// Adds what `other` reads.
    pub(crate) fn merge(&mut self, other: &Reads) {
        match (&mut *self, other) {
            (Reads::Whole, _) => {}
            (_, Reads::Whole) => *self = Reads::Whole,
            (Reads::Fields(mine), Reads::Fields(theirs)) => {
                for (key, read) in theirs {
                    match mine.get_mut(key) {
                        Some(existing) => existing.merge(read),
                        None => {
                            mine.insert(key.clone(), read.clone());
                        }
                    }
                }
            }
        }
    }

    /// The union of several expressions' reads (borrowed when there is only one).
    pub(crate) fn union<'a>(mut all: impl Iterator<Item = &'a Reads>) -> Cow<'a, Reads> {
        let Some(first) = all.next() else {
            return Cow::Owned(Reads::default());
        };
        let mut union = Cow::Borrowed(first);
        for reads in all {
            if !union.covers(reads) {
                union.to_mut().merge(reads);
            }
        }
        union
    }

    /// Marks the chain `path` (field names from `object`) as read, its end as a whole.
    fn add_chain(&mut self, path: &[&str]) {
        let mut node = self;
        for field in path {
            let Reads::Fields(fields) = node else {
                return;
            };
            node = fields.entry((*field).to_string()).or_default();
        }
        *node = Reads::Whole;
    }
}

/// Adds to `reads` what `expr` reads of `object`.
fn collect(expr: &IdedExpr, reads: &mut Reads) {
    if matches!(reads, Reads::Whole) {
        return;
    }
    if let Some(path) = object_chain(expr) {
        reads.add_chain(&path);
        return;
    }
    match &expr.expr {
        Expr::Ident(name) => {
            if name == OBJECT_VARIABLE {
                *reads = Reads::Whole;
            }
        }
        Expr::Select(select) => collect(&select.operand, reads),
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                collect(target, reads);
            }
            for arg in &call.args {
                collect(arg, reads);
            }
        }
        Expr::Comprehension(c) => {
            let shadows = c.iter_var == OBJECT_VARIABLE
                || c.iter_var2.as_deref() == Some(OBJECT_VARIABLE)
                || c.accu_var == OBJECT_VARIABLE;
            if shadows {
                // Which `object` each use means is then a matter of scope: read it all.
                *reads = Reads::Whole;
                return;
            }
            for part in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                collect(part, reads);
            }
        }
        Expr::List(list) => list.elements.iter().for_each(|e| collect(e, reads)),
        Expr::Map(map) => map.entries.iter().for_each(|e| collect_entry(e, reads)),
        Expr::Struct(s) => s.entries.iter().for_each(|e| collect_entry(e, reads)),
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn collect_entry(entry: &cel::common::ast::IdedEntryExpr, reads: &mut Reads) {
    match &entry.expr {
        EntryExpr::StructField(f) => collect(&f.value, reads),
        EntryExpr::MapEntry(m) => {
            collect(&m.key, reads);
            collect(&m.value, reads);
        }
    }
}

/// When `expr` is a chain of field selections rooted at `object` (`.f`, `has(.f)`, `.?f`,
/// `['f']`, `[?'f']`), the field names along it.
fn object_chain(expr: &IdedExpr) -> Option<Vec<&str>> {
    match &expr.expr {
        Expr::Ident(name) if name == OBJECT_VARIABLE => Some(Vec::new()),
        Expr::Select(select) => {
            let mut path = object_chain(&select.operand)?;
            path.push(select.field.as_str());
            Some(path)
        }
        Expr::Call(call)
            if call.target.is_none()
                && call.args.len() == 2
                && [
                    operators::INDEX,
                    operators::OPT_INDEX,
                    operators::OPT_SELECT,
                ]
                .contains(&call.func_name.as_str()) =>
        {
            let Expr::Literal(LiteralValue::String(key)) = &call.args[1].expr else {
                return None;
            };
            let mut path = object_chain(&call.args[0])?;
            path.push(key.inner());
            Some(path)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(source: &str) -> Reads {
        let env = cel::Env::stdlib();
        Reads::of(&env.parser().parse(source).expect("parses"))
    }

    /// Builds the expected reads from `(chain, ...)`: each chain ends in a whole value.
    fn chains(paths: &[&str]) -> Reads {
        let mut r = Reads::default();
        for p in paths {
            let parts: Vec<&str> = p.split('.').collect();
            r.add_chain(&parts);
        }
        r
    }

    #[test]
    fn field_chains_end_in_whole_values() {
        assert_eq!(
            reads("object.status.readyReplicas >= object.spec.replicas"),
            chains(&["status.readyReplicas", "spec.replicas"])
        );
        assert_eq!(
            reads("object.status.conditions.exists(c, c.type == 'Ready')"),
            chains(&["status.conditions"])
        );
        assert_eq!(
            reads("size(object.status.conditions) > 0"),
            chains(&["status.conditions"])
        );
    }

    #[test]
    fn has_reads_the_tested_field() {
        assert_eq!(
            reads("has(object.spec.replicas)"),
            chains(&["spec.replicas"])
        );
        assert_eq!(
            reads("has(object.spec) && object.spec.x == 1"),
            chains(&["spec"])
        );
    }

    #[test]
    fn literal_keys_extend_chains_and_other_indexes_end_them() {
        assert_eq!(
            reads("object.metadata.labels['app'] == 'x'"),
            chains(&["metadata.labels.app"])
        );
        assert_eq!(
            reads("object.spec.containers[0].image == 'x'"),
            chains(&["spec.containers"])
        );
        assert_eq!(
            reads("object.metadata.labels[object.kind] == 'x'"),
            chains(&["metadata.labels", "kind"])
        );
        assert_eq!(
            reads("object.?spec.replicas.orValue(1) == 1"),
            chains(&["spec.replicas"])
        );
        assert_eq!(reads("object['spec'].replicas"), chains(&["spec.replicas"]));
    }

    #[test]
    fn macros_over_fields_read_the_range_and_the_body() {
        assert_eq!(
            reads("object.spec.containers.all(c, c.image != object.metadata.name)"),
            chains(&["spec.containers", "metadata.name"])
        );
        assert_eq!(
            reads("object.items.map(x, x.a).size() == 1"),
            chains(&["items"])
        );
    }

    #[test]
    fn object_used_whole_reads_everything() {
        for source in [
            "object",
            "hasConditions(object)",
            "string(object) != ''",
            "object[object.kind] == 1",
            "object.exists(k, k == 'spec')",
            "[1].exists(object, object == 1) && object.a == 1",
            "object == {}",
            "object[0]",
        ] {
            assert_eq!(reads(source), Reads::Whole, "{source}");
        }
    }

    #[test]
    fn expressions_without_object_read_nothing() {
        assert_eq!(reads("1 + 1 == 2"), Reads::default());
        assert_eq!(reads("result ? 'a' : 'b'"), Reads::default());
    }

    #[test]
    fn union_and_cover() {
        let a = chains(&["status.conditions"]);
        let b = chains(&["status", "spec.replicas"]);
        let union = Reads::union([&a, &b].into_iter());
        assert_eq!(*union, chains(&["status", "spec.replicas"]));
        assert!(union.covers(&a) && union.covers(&b));
        assert!(!a.covers(&b));
        assert!(matches!(Reads::union([&a].into_iter()), Cow::Borrowed(_)));
        assert!(Reads::Whole.covers(&b) && !b.covers(&Reads::Whole));
    }
}
