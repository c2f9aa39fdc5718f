//! jq path expressions of `ignoreFields.jqPathExpressions`, evaluated with jaq (a jq
//! implementation in Rust): the concrete paths an expression names in a document, e.g.
//! `.spec.template.spec.containers[].env[] | select(.name == "JAVA_OPTS")`.
//!
//! An expression comes from the hub, so it is bounded before it runs: only a finite subset of jq
//! is accepted (paths, `..`, pipes, `,`, comparisons, `select` and a few pure built-ins; no
//! definitions, recursion, variables, folds or assignments), and its worst-case work on the
//! document at hand is estimated from its shape and the document's size and refused above
//! [`MAX_WORK`]. What passes always ends, quickly; everything else is an error, never a panic or
//! a hang.

use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Term};
use jaq_core::load::{Arena, File, Loader};
use jaq_core::path::Part;
use jaq_core::{Compiler, Ctx, Vars, data};
use jaq_json::Val;
use serde_json::Value;

use crate::json_path::Step;

/// Longest expression accepted (bytes).
const MAX_LEN: usize = 4096;
/// Deepest bracket nesting accepted (the parser recurses once per level).
const MAX_NESTING: usize = 32;
/// Most paths one expression may name in one document.
const MAX_PATHS: usize = 10_000;
/// Upper bound of the estimated work (steps of the evaluator) of one evaluation.
pub const MAX_WORK: u64 = 2_000_000;

/// Built-ins an expression may call, with their arity: all finite and pure.
const ALLOWED_CALLS: &[(&str, usize)] = &[
    ("select", 1),
    ("not", 0),
    ("empty", 0),
    ("true", 0),
    ("false", 0),
    ("null", 0),
    ("length", 0),
    ("type", 0),
    ("has", 1),
    ("contains", 1),
    ("startswith", 1),
    ("endswith", 1),
    ("ltrimstr", 1),
    ("rtrimstr", 1),
    ("ascii_downcase", 0),
    ("ascii_upcase", 0),
    ("tostring", 0),
    ("tonumber", 0),
    ("keys", 0),
    ("values", 0),
    ("nulls", 0),
    ("booleans", 0),
    ("numbers", 0),
    ("strings", 0),
    ("arrays", 0),
    ("objects", 0),
    ("iterables", 0),
    ("scalars", 0),
    ("first", 0),
    ("last", 0),
    ("any", 0),
    ("all", 0),
];

/// Definitions taken from jaq's standard library: the accepted built-ins defined there, and
/// what they use.
const STD_DEFS: &[&str] = &[
    "null",
    "isboolean",
    "isnumber",
    "isstring",
    "isarray",
    "isobject",
    "type",
    "values",
    "nulls",
    "booleans",
    "numbers",
    "strings",
    "arrays",
    "objects",
    "iterables",
    "scalars",
    "keys",
];

/// Size of the documents an expression runs on, for the work estimate.
#[derive(Clone, Copy, Debug)]
struct Size {
    /// Every value in the document (what `..` visits).
    nodes: u64,
    /// The longest array or object (what `.[]` visits).
    widest: u64,
}

impl Size {
    fn of(docs: &[&Value]) -> Self {
        fn walk(v: &Value, size: &mut Size) {
            size.nodes = size.nodes.saturating_add(1);
            match v {
                Value::Array(a) => {
                    size.widest = size.widest.max(a.len() as u64);
                    a.iter().for_each(|c| walk(c, size));
                }
                Value::Object(m) => {
                    size.widest = size.widest.max(m.len() as u64);
                    m.values().for_each(|c| walk(c, size));
                }
                _ => {}
            }
        }
        let mut size = Size {
            nodes: 0,
            widest: 1,
        };
        docs.iter().for_each(|d| walk(d, &mut size));
        size.nodes = size.nodes.max(1);
        size
    }
}

/// Estimated (outputs per input, work per input) of a term, or why it is refused.
type Estimate = Result<(u64, u64), String>;

fn mul(a: u64, b: u64) -> u64 {
    a.saturating_mul(b)
}

fn add(a: u64, b: u64) -> u64 {
    a.saturating_add(b)
}

/// Checks that `term` uses only the accepted subset and estimates its cost on documents of
/// `size`: outputs multiply along pipes and paths, add along `,`; work adds up what each stage
/// does for each input it gets.
fn estimate(term: &Term<&str>, size: Size, depth: usize) -> Estimate {
    if depth > MAX_NESTING * 4 {
        return Err("the expression is nested too deeply".into());
    }
    let sub = |t: &Term<&str>| estimate(t, size, depth + 1);
    match term {
        Term::Id => Ok((1, 1)),
        Term::Recurse => Ok((size.nodes, size.nodes)),
        Term::Num(_) => Ok((1, 1)),
        Term::Str(format, parts) => {
            if format.is_some() {
                return Err("string formats (@...) are not supported".into());
            }
            let mut out = (1u64, 1u64);
            for part in parts {
                if let StrPart::Term(t) = part {
                    let (f, c) = sub(t)?;
                    out = (mul(out.0, f), add(out.1, mul(out.0, c)));
                }
            }
            Ok(out)
        }
        Term::Arr(None) => Ok((1, 1)),
        Term::Arr(Some(t)) => {
            let (f, c) = sub(t)?;
            Ok((1, add(c, f)))
        }
        Term::Obj(entries) => {
            let mut out = (1u64, 1u64);
            for (k, v) in entries {
                let (kf, kc) = sub(k)?;
                let (vf, vc) = match v {
                    Some(v) => sub(v)?,
                    None => (1, 1),
                };
                out = (mul(out.0, mul(kf, vf)), add(out.1, mul(out.0, add(kc, vc))));
            }
            Ok(out)
        }
        Term::Neg(t) => {
            let (f, c) = sub(t)?;
            Ok((f, add(c, f)))
        }
        Term::BinOp(l, op, r) => {
            let (lf, lc) = sub(l)?;
            let (rf, rc) = sub(r)?;
            match op {
                BinaryOp::Pipe(None) => Ok((mul(lf, rf), add(lc, mul(lf, rc)))),
                BinaryOp::Pipe(Some(_)) => {
                    Err("variable bindings (as $x) are not supported".into())
                }
                BinaryOp::Comma | BinaryOp::Alt => Ok((add(lf, rf), add(lc, rc))),
                BinaryOp::Or | BinaryOp::And => Ok((mul(lf, add(rf, 1)), add(lc, mul(lf, rc)))),
                BinaryOp::Math(_) | BinaryOp::Cmp(_) => {
                    Ok((mul(lf, rf), add(add(lc, mul(rf, lc)), add(rc, mul(lf, rf)))))
                }
                BinaryOp::Assign
                | BinaryOp::Update
                | BinaryOp::UpdateMath(_)
                | BinaryOp::UpdateAlt => Err("assignments are not supported".into()),
            }
        }
        Term::IfThenElse(branches, otherwise) => {
            let mut conds = 1u64;
            let mut outs = 0u64;
            let mut work = 0u64;
            for (cond, then) in branches {
                let (cf, cc) = sub(cond)?;
                let (tf, tc) = sub(then)?;
                work = add(work, add(mul(conds, cc), mul(mul(conds, cf), tc)));
                conds = mul(conds, cf);
                outs = add(outs, tf);
            }
            if let Some(e) = otherwise {
                let (ef, ec) = sub(e)?;
                outs = add(outs, ef);
                work = add(work, mul(conds, ec));
            }
            Ok((mul(conds, outs.max(1)), work))
        }
        Term::TryCatch(t, catch) => {
            let (f, c) = sub(t)?;
            match catch {
                Some(h) => {
                    let (hf, hc) = sub(h)?;
                    Ok((add(f, hf), add(c, hc)))
                }
                None => Ok((f, c)),
            }
        }
        Term::Call(name, args) => {
            if !ALLOWED_CALLS.contains(&(*name, args.len())) {
                return Err(format!(
                    "{name}/{} is not supported (only paths, select, comparisons and simple built-ins)",
                    args.len()
                ));
            }
            let mut out = (1u64, size.widest);
            for arg in args {
                let (f, c) = sub(arg)?;
                out = (mul(out.0, f), add(out.1, c));
            }
            // `tostring`, `contains` and friends may look at the whole input.
            Ok((out.0, add(out.1, size.nodes)))
        }
        Term::Path(base, path) => {
            let (mut outs, mut work) = sub(base)?;
            for (part, _optional) in &path.0 {
                let (pf, pc) = match part {
                    Part::Index(i) => sub(i)?,
                    Part::Range(None, None) => (size.widest, size.widest),
                    Part::Range(from, upto) => {
                        let (ff, fc) = match from {
                            Some(t) => sub(t)?,
                            None => (1, 1),
                        };
                        let (uf, uc) = match upto {
                            Some(t) => sub(t)?,
                            None => (1, 1),
                        };
                        (mul(ff, uf), add(add(fc, uc), size.widest))
                    }
                };
                work = add(work, mul(outs, add(pc, 1)));
                outs = mul(outs, pf);
            }
            Ok((outs, work))
        }
        Term::Var(_) => Err("variables are not supported".into()),
        Term::Label(..) | Term::Break(_) => Err("label/break is not supported".into()),
        Term::Fold(..) => Err("reduce/foreach is not supported".into()),
        Term::Def(..) => Err("definitions are not supported".into()),
    }
}

/// Bracket nesting of the text (strings included: conservative), checked before parsing.
fn nesting(expression: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for c in expression.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                max = max.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Checks an expression without a document: its syntax and that it stays in the accepted subset.
pub fn validate(expression: &str) -> Result<(), String> {
    let term = parse(expression)?;
    estimate(
        &term,
        Size {
            nodes: 1,
            widest: 1,
        },
        0,
    )
    .map(|_| ())
}

fn parse(expression: &str) -> Result<Term<&str>, String> {
    if expression.len() > MAX_LEN {
        return Err(format!("the expression is longer than {MAX_LEN} bytes"));
    }
    if nesting(expression) > MAX_NESTING {
        return Err(format!(
            "the expression nests deeper than {MAX_NESTING} brackets"
        ));
    }
    jaq_core::load::parse(expression, |p| p.term())
        .ok_or_else(|| "failed to parse jq expression".to_string())
}

/// Every concrete path `expression` names in `doc`, in the order jq yields them (duplicates
/// removed). `bound_by` are the documents whose size bounds the work (the expression may be run
/// on each of them). An error says why the expression cannot be used.
pub(crate) fn paths(
    expression: &str,
    doc: &Value,
    bound_by: &[&Value],
) -> Result<Vec<Vec<Step>>, String> {
    let term = parse(expression)?;
    let (_, work) = estimate(&term, Size::of(bound_by), 0)?;
    if work > MAX_WORK {
        return Err(format!(
            "the expression may take too long on this object (estimated {work} steps, at most {MAX_WORK})"
        ));
    }
    let program = format!("path({expression})");
    // Only the definitions the accepted built-ins need: the rest of jaq's standard library
    // refers to functions (regex, math, time) this build leaves out.
    let loader = Loader::new(
        jaq_core::defs()
            .chain(jaq_std::defs().filter(|d| STD_DEFS.contains(&d.name)))
            .chain(jaq_json::defs().filter(|d| ["tonumber", "totype"].contains(&d.name))),
    );
    let arena = Arena::default();
    let modules = loader
        .load(
            &arena,
            File {
                code: program.as_str(),
                path: (),
            },
        )
        .map_err(|_| "failed to parse jq expression".to_string())?;
    let filter = Compiler::default()
        .with_funs(
            jaq_core::funs()
                .chain(jaq_std::base_funs())
                .chain(jaq_json::funs()),
        )
        .compile(modules)
        .map_err(|_| "failed to compile jq expression".to_string())?;
    let input = jaq_json::read::parse_single(doc.to_string().as_bytes())
        .map_err(|e| format!("cannot read the object: {e}"))?;
    let ctx = Ctx::<data::JustLut<Val>>::new(&filter.lut, Vars::new([]));
    let mut out: Vec<Vec<Step>> = Vec::new();
    for item in filter.id.run((ctx, input)) {
        let path = jaq_core::unwrap_valr(item)
            .map_err(|e| format!("jq expression returned error: {e}"))?;
        let path: Value = serde_json::from_str(&path.to_string())
            .map_err(|e| format!("jq expression gave an unreadable path: {e}"))?;
        if let Some(steps) = steps_of(&path, doc)
            && !out.contains(&steps)
        {
            if out.len() == MAX_PATHS {
                return Err(format!("the expression names more than {MAX_PATHS} fields"));
            }
            out.push(steps);
        }
    }
    Ok(out)
}

/// A jq path (array of keys and indexes) as steps into `doc`; None when it does not lead to a
/// value (a missing key, an index out of range) or is not a plain path (slices, nulls).
fn steps_of(path: &Value, doc: &Value) -> Option<Vec<Step>> {
    let mut node = doc;
    let mut steps = Vec::new();
    for part in path.as_array()? {
        match (part, node) {
            (Value::String(k), Value::Object(m)) => {
                node = m.get(k)?;
                steps.push(Step::Key(k.clone()));
            }
            (Value::Number(n), Value::Array(a)) => {
                let i = n.as_i64()?;
                let len = i64::try_from(a.len()).ok()?;
                let i = if i < 0 { i + len } else { i };
                let i = usize::try_from(i).ok()?;
                node = a.get(i)?;
                steps.push(Step::Index(i));
            }
            _ => return None,
        }
    }
    (!steps.is_empty()).then_some(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deploy() -> Value {
        json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "env": [{"name": "APP_ENV", "value": "production"}, {"name": "JAVA_OPTS", "value": "-Xmx512m"}]},
            {"name": "side", "env": [{"name": "JAVA_OPTS", "value": "x"}]}
        ]}}}})
    }

    fn keys(steps: &[Step]) -> String {
        steps
            .iter()
            .map(|s| match s {
                Step::Key(k) => format!("/{k}"),
                Step::Index(i) => format!("/{i}"),
            })
            .collect()
    }

    fn run(expr: &str, doc: &Value) -> Result<Vec<String>, String> {
        paths(expr, doc, &[doc]).map(|p| p.iter().map(|s| keys(s)).collect())
    }

    #[test]
    fn select_names_the_matching_list_items() {
        let doc = deploy();
        assert_eq!(
            run(
                r#".spec.template.spec.containers[].env[] | select(.name == "JAVA_OPTS")"#,
                &doc
            ),
            Ok(vec![
                "/spec/template/spec/containers/0/env/1".to_string(),
                "/spec/template/spec/containers/1/env/0".to_string()
            ])
        );
        assert_eq!(
            run(
                r#".spec.template.spec.containers[] | select(.name == "side") | .env[0].value"#,
                &doc
            ),
            Ok(vec![
                "/spec/template/spec/containers/1/env/0/value".to_string()
            ])
        );
    }

    #[test]
    fn plain_paths_and_missing_fields() {
        let doc = json!({"spec": {"replicas": 1, "list": [1, 2, 3]}, "metadata": {"annotations": {"a/b": "x"}}});
        assert_eq!(
            run(".spec.replicas", &doc),
            Ok(vec!["/spec/replicas".to_string()])
        );
        assert_eq!(
            run(".spec.missing", &doc),
            Ok(vec![]),
            "absent: names nothing"
        );
        assert_eq!(
            run(".spec.list[-1]", &doc),
            Ok(vec!["/spec/list/2".to_string()])
        );
        assert_eq!(
            run(r#".metadata.annotations["a/b"]"#, &doc),
            Ok(vec!["/metadata/annotations/a/b".to_string()])
        );
        assert_eq!(
            run(".spec.replicas, .spec.replicas", &doc),
            Ok(vec!["/spec/replicas".to_string()]),
            "duplicates removed"
        );
    }

    #[test]
    fn invalid_and_unsupported_expressions_are_errors() {
        let doc = deploy();
        for bad in [
            ".spec.containers[] | invalid syntax here",
            ".a[",
            "",
            "def f: f; f",
            "repeat(.)",
            "range(1e9)",
            "recurse(.[])",
            ".a as $x | $x",
            "reduce .[] as $x (0; . + 1)",
            ".a = 1",
            "$ENV",
            "input",
            "label $f | break $f",
            "until(false; .)",
            "@base64 \"x\"",
            "1",
        ] {
            assert!(run(bad, &doc).is_err(), "{bad:?} should be refused");
        }
        assert!(validate(".spec.containers[] | invalid syntax here").is_err());
        assert!(validate(r#".a[] | select(.name == "x")"#).is_ok());
    }

    #[test]
    fn expensive_and_deep_expressions_are_refused_not_run() {
        let doc = json!({"data": (0..2000).map(|i| (format!("k{i}"), json!(i))).collect::<serde_json::Map<_, _>>()});
        let err = run(".. | .. | .. | ..", &doc).err().unwrap_or_default();
        assert!(err.contains("too long"), "{err}");
        let comma = ["(.data[], .data[])"; 12].join(" | ");
        assert!(run(&comma, &doc).is_err());
        let deep = format!("{}.a{}", "(".repeat(200), ")".repeat(200));
        let err = run(&deep, &doc).err().unwrap_or_default();
        assert!(err.contains("nests deeper"), "{err}");
        let long = format!(".a{}", " | .a".repeat(2000));
        assert!(run(&long, &doc).is_err());
        // Cheap ones on the same object are fine.
        assert_eq!(run(".data.k7", &doc), Ok(vec!["/data/k7".to_string()]));
    }

    #[test]
    fn every_accepted_built_in_compiles() {
        let doc = json!({"a": [{"name": "x"}]});
        for (name, arity) in ALLOWED_CALLS {
            let call = if *arity == 0 {
                name.to_string()
            } else {
                format!("{name}(\"name\")")
            };
            let expr = format!(".a[] | select([{call}] | length >= 0)");
            let result = run(&expr, &doc);
            assert!(
                !matches!(&result, Err(e) if e.contains("compile") || e.contains("parse")),
                "{expr}: {result:?}"
            );
        }
    }

    #[test]
    fn runtime_errors_are_errors() {
        let doc = json!({"spec": {"replicas": 1}});
        let err = run(".spec.replicas[]", &doc).err().unwrap_or_default();
        assert!(err.contains("jq expression returned error"), "{err}");
    }
}
