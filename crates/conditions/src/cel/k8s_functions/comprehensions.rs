//! cel-go's two-variable comprehensions (`ext.TwoVarComprehensions`, in the Kubernetes
//! environment since 1.32): `r.all(k, v, p)`, `r.exists(k, v, p)`, `r.existsOne(k, v, p)` (and
//! `exists_one`), `r.transformList(k, v, [filter,] t)`, `r.transformMap(k, v, [filter,] t)` and
//! `r.transformMapEntry(k, v, [filter,] m)`. Over a list, `k` is the index and `v` the
//! element; over a map, `k` is the key and `v` its value.
//!
//! cel 0.15 parses the AST's second iteration variable but its interpreter binds only the
//! first, so these macros expand into one-variable comprehensions that it runs as it runs
//! `all` or `map`: the range becomes [`PAIRS`]`(r)`, a list of `[k, v]` pairs, and every user
//! expression `e` of the macro is wrapped as `cel.bind(k, @pair[0], cel.bind(v, @pair[1], e))`
//! (a comprehension over an empty list whose accumulator is the variable, as `cel.bind` is).
//! The loop steps keep the shapes of the standard macros (`@result && e`, `@result + [e]`), so
//! that `all` and `exists` absorb errors as cel-go does and the list transforms append in
//! place. `transformMap` and `transformMapEntry` collect one map per iteration and
//! [`MERGE_MAPS`] joins them, failing on a key given twice as cel-go's `cel.@mapInsert` does.
//! Being ordinary comprehensions after expansion, they are metered, depth-checked and
//! scanned for object reads like every other one.

use std::collections::HashMap;

use cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedEntryExpr, IdedExpr, ListExpr, LiteralValue,
    MapEntryExpr, MapExpr, operators,
};
use cel::common::types::{CelInt, CelList, CelMap, CelMapKey, DYN_TYPE, Kind};
use cel::common::value::{CowVal, Val};
use cel::parser::{Macro, MacroExprHelper, ParseError};
use cel::{DeclarationError, Env, ExecutionError, Value};

use crate::cel::internal_names::{MERGE_MAPS, PAIRS};

/// The iteration variable of an expanded comprehension: one `[k, v]` pair.
const PAIR: &str = "@pair";
/// The accumulator, as the standard macros name it.
const ACCUMULATOR: &str = "@result";
/// cel-go's older accumulator name, which it also refuses as an iteration variable.
const LEGACY_ACCUMULATOR: &str = "__result__";

/// The macros of the library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    All,
    Exists,
    ExistsOne,
    TransformList,
    TransformMap,
    TransformMapEntry,
}

/// Registers the macros and their internal functions.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let macros = [
        ("all", 3, Shape::All),
        ("exists", 3, Shape::Exists),
        ("existsOne", 3, Shape::ExistsOne),
        ("exists_one", 3, Shape::ExistsOne),
        ("transformList", 3, Shape::TransformList),
        ("transformList", 4, Shape::TransformList),
        ("transformMap", 3, Shape::TransformMap),
        ("transformMap", 4, Shape::TransformMap),
        ("transformMapEntry", 3, Shape::TransformMapEntry),
        ("transformMapEntry", 4, Shape::TransformMapEntry),
    ];
    for (name, arity, shape) in macros {
        env.add_macro(Macro::receiver(name, arity, move |helper, target, args| {
            expand(shape, helper, target, args).map(Some)
        }))?;
    }
    env.add_overload(PAIRS, PAIRS, vec![DYN_TYPE], pairs)?;
    env.add_overload(MERGE_MAPS, MERGE_MAPS, vec![DYN_TYPE], merge_maps)
}

/// The two iteration variables, checked as cel-go checks them.
fn iteration_variables(
    helper: &MacroExprHelper<'_>,
    args: &[IdedExpr],
) -> Result<(String, String), ParseError> {
    let name = |arg: Option<&IdedExpr>| match arg {
        Some(IdedExpr {
            expr: Expr::Ident(name),
            ..
        }) => Ok(name.clone()),
        Some(other) => Err(helper.new_error(other.id, "argument must be a simple name")),
        None => Err(helper.new_error(helper_id(args), "argument must be a simple name")),
    };
    let first = name(args.first())?;
    let second = name(args.get(1))?;
    let id = |i: usize| args.get(i).map_or(0, |a| a.id);
    if first == second {
        return Err(helper.new_error(id(1), format!("duplicate variable name: {first}")));
    }
    for (i, var) in [(0, &first), (1, &second)] {
        if var == ACCUMULATOR || var == LEGACY_ACCUMULATOR {
            return Err(
                helper.new_error(id(i), "iteration variable overwrites accumulator variable")
            );
        }
    }
    Ok((first, second))
}

fn helper_id(args: &[IdedExpr]) -> u64 {
    args.first().map_or(0, |a| a.id)
}

/// Expands one call of the library's macros (its arity already matched).
fn expand(
    shape: Shape,
    helper: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<IdedExpr, ParseError> {
    let (key, value) = iteration_variables(helper, args)?;
    let range = target
        .take()
        .ok_or_else(|| helper.new_error(helper_id(args), "a comprehension needs a range"))?;
    let mut rest: Vec<IdedExpr> = args.drain(2..).collect();
    let body = rest
        .pop()
        .ok_or_else(|| helper.new_error(range.id, "a comprehension needs a body"))?;
    let filter = rest.pop();
    let vars = (key.as_str(), value.as_str());
    let mut b = Builder { helper };
    let body = if shape == Shape::TransformMap {
        // `{k: t}`: the map each iteration contributes.
        let map_key = b.ident(&key);
        b.map_of(map_key, body)
    } else {
        body
    };
    let body = b.bind_pair(vars, body);
    let filter = filter.map(|f| b.bind_pair(vars, f));
    let range = b.call(PAIRS, vec![range]);
    let comprehension = match shape {
        Shape::All | Shape::Exists => {
            let all = shape == Shape::All;
            let accu = b.accu();
            let cond = if all {
                b.call(operators::NOT_STRICTLY_FALSE, vec![accu])
            } else {
                let not = b.call(operators::LOGICAL_NOT, vec![accu]);
                b.call(operators::NOT_STRICTLY_FALSE, vec![not])
            };
            let accu = b.accu();
            let connective = if all {
                operators::LOGICAL_AND
            } else {
                operators::LOGICAL_OR
            };
            let step = b.call(connective, vec![accu, body]);
            let init = b.bool(all);
            let result = b.accu();
            b.comprehension(range, init, cond, step, result)
        }
        Shape::ExistsOne => {
            let accu = b.accu();
            let one = b.int(1);
            let plus_one = b.call(operators::ADD, vec![accu, one]);
            let accu = b.accu();
            let step = b.call(operators::CONDITIONAL, vec![body, plus_one, accu]);
            let (init, cond, accu, one) = (b.int(0), b.bool(true), b.accu(), b.int(1));
            let result = b.call(operators::EQUALS, vec![accu, one]);
            b.comprehension(range, init, cond, step, result)
        }
        Shape::TransformList | Shape::TransformMap | Shape::TransformMapEntry => {
            let item = body;
            let accu = b.accu();
            let appended = b.list(vec![item]);
            let mut step = b.call(operators::ADD, vec![accu, appended]);
            if let Some(filter) = filter {
                let accu = b.accu();
                step = b.call(operators::CONDITIONAL, vec![filter, step, accu]);
            }
            let (init, cond, result) = (b.list(Vec::new()), b.bool(true), b.accu());
            let list = b.comprehension(range, init, cond, step, result);
            if shape == Shape::TransformList {
                list
            } else {
                b.call(MERGE_MAPS, vec![list])
            }
        }
    };
    Ok(comprehension)
}

/// Makes the nodes of an expansion.
struct Builder<'h, 'a> {
    helper: &'h mut MacroExprHelper<'a>,
}

impl Builder<'_, '_> {
    fn node(&mut self, expr: Expr) -> IdedExpr {
        self.helper.next_expr(expr)
    }

    fn ident(&mut self, name: &str) -> IdedExpr {
        self.node(Expr::Ident(name.to_string()))
    }

    fn accu(&mut self) -> IdedExpr {
        self.ident(ACCUMULATOR)
    }

    fn bool(&mut self, b: bool) -> IdedExpr {
        self.node(Expr::Literal(LiteralValue::Boolean(b.into())))
    }

    fn int(&mut self, i: i64) -> IdedExpr {
        self.node(Expr::Literal(LiteralValue::Int(i.into())))
    }

    fn list(&mut self, elements: Vec<IdedExpr>) -> IdedExpr {
        self.node(Expr::List(ListExpr::new(elements)))
    }

    fn map_of(&mut self, key: IdedExpr, value: IdedExpr) -> IdedExpr {
        let id = self.node(Expr::Unspecified).id;
        self.node(Expr::Map(MapExpr {
            entries: vec![IdedEntryExpr {
                id,
                expr: EntryExpr::MapEntry(MapEntryExpr {
                    key,
                    value,
                    optional: false,
                }),
            }],
        }))
    }

    fn call(&mut self, function: &str, args: Vec<IdedExpr>) -> IdedExpr {
        self.node(Expr::Call(CallExpr {
            func_name: function.to_string(),
            target: None,
            args,
        }))
    }

    fn comprehension(
        &mut self,
        iter_range: IdedExpr,
        accu_init: IdedExpr,
        loop_cond: IdedExpr,
        loop_step: IdedExpr,
        result: IdedExpr,
    ) -> IdedExpr {
        self.node(Expr::Comprehension(Box::new(ComprehensionExpr {
            iter_range,
            iter_var: PAIR.to_string(),
            iter_var2: None,
            accu_var: ACCUMULATOR.to_string(),
            accu_init,
            loop_cond,
            loop_step,
            result,
        })))
    }

    /// `cel.bind(name, init, body)`: `body` with `name` bound to `init`.
    fn bind(&mut self, name: &str, init: IdedExpr, body: IdedExpr) -> IdedExpr {
        let (range, cond, step) = (self.list(Vec::new()), self.bool(false), self.ident(name));
        self.node(Expr::Comprehension(Box::new(ComprehensionExpr {
            iter_range: range,
            iter_var: "#unused".to_string(),
            iter_var2: None,
            accu_var: name.to_string(),
            accu_init: init,
            loop_cond: cond,
            loop_step: step,
            result: body,
        })))
    }

    /// `body` with the key and value variables bound to the current pair's parts.
    fn bind_pair(&mut self, (key, value): (&str, &str), body: IdedExpr) -> IdedExpr {
        let part = |b: &mut Self, i: i64| {
            let (pair, index) = (b.ident(PAIR), b.int(i));
            b.call(operators::INDEX, vec![pair, index])
        };
        let value_part = part(self, 1);
        let inner = self.bind(value, value_part, body);
        let key_part = part(self, 0);
        self.bind(key, key_part, inner)
    }
}

/// The error of a range that is neither a list nor a map, as cel-go words it.
fn not_a_range(range: &dyn Val) -> ExecutionError {
    ExecutionError::function_error(
        "comprehension",
        format!(
            "expression of type '{}' cannot be range of a comprehension (must be list, map, or dynamic)",
            range.get_type().name()
        ),
    )
}

/// [`PAIRS`]: `[[0, l[0]], [1, l[1]], ...]` of a list, `[[k, m[k]], ...]` of a map.
fn pairs<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [range] = one(PAIRS, args)?;
    let range = range.as_ref();
    let kind = range.get_type().kind();
    let iterable = match (kind, range.as_iterable()) {
        (Kind::List | Kind::Map, Some(iterable)) => iterable,
        _ => return Err(not_a_range(range)),
    };
    let indexer = range.as_indexer();
    let mut out: Vec<Box<dyn Val + 'v>> = Vec::new();
    let mut items = iterable.iter();
    let mut index: i64 = 0;
    while let Some(item) = items.next() {
        let pair: Vec<Box<dyn Val + 'v>> = if kind == Kind::List {
            vec![Box::new(CelInt::from(index)), item.clone_as_boxed()]
        } else {
            let indexer = indexer.ok_or_else(|| not_a_range(range))?;
            let value = indexer.get(item)?.into_owned();
            vec![item.clone_as_boxed(), value]
        };
        out.push(Box::new(CelList::from(pair)));
        index = index.saturating_add(1);
    }
    Ok(CowVal::owned(CelList::from(out)))
}

/// [`MERGE_MAPS`]: the union of a list of maps; a key in two of them is an error.
fn merge_maps<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [maps] = one(MERGE_MAPS, args)?;
    let maps = maps.as_ref();
    let mut merged: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> = HashMap::new();
    let Some(list) = maps.as_iterable() else {
        return Err(ExecutionError::function_error(
            MERGE_MAPS,
            "expected a list of maps",
        ));
    };
    let mut list = list.iter();
    while let Some(map) = list.next() {
        let (Kind::Map, Some(keys), Some(values)) =
            (map.get_type().kind(), map.as_iterable(), map.as_indexer())
        else {
            return Err(ExecutionError::no_such_overload(
                "cel.@mapInsert",
                vec!["map".to_string(), map.get_type().name().to_string()],
            ));
        };
        let mut keys = keys.iter();
        while let Some(key) = keys.next() {
            let value = values.get(key)?.into_owned();
            let key = CelMapKey::try_from(key.clone_as_boxed())?;
            if merged.contains_key(&key) {
                return Err(ExecutionError::function_error(
                    "transformMapEntry",
                    format!("insert failed: key {} already exists", key_text(&key)),
                ));
            }
            merged.insert(key, value);
        }
    }
    Ok(CowVal::owned(CelMap::from(merged)))
}

/// A map key as cel-go's `%v` prints it.
fn key_text(key: &CelMapKey<'_>) -> String {
    match Value::try_from(key.inner()) {
        Ok(Value::String(s)) => s.to_string(),
        Ok(Value::Int(i)) => i.to_string(),
        Ok(Value::UInt(u)) => u.to_string(),
        Ok(Value::Bool(b)) => b.to_string(),
        _ => "?".to_string(),
    }
}

/// Exactly one argument.
fn one<'b, 'v>(
    function: &str,
    args: Vec<CowVal<'b, 'v>>,
) -> Result<[CowVal<'b, 'v>; 1], ExecutionError> {
    let count = args.len();
    args.try_into().map_err(|_| {
        ExecutionError::function_error(function, format!("expected 1 argument, got {count}"))
    })
}

#[cfg(test)]
mod tests {
    use crate::cel::object_reads::Reads;

    fn reads(source: &str) -> Reads {
        let env = crate::cel::cel_env::build().expect("the environment builds");
        Reads::of(&env.parser().parse(source).expect("parses"))
    }

    #[test]
    fn reads_of_the_object_are_the_range_and_the_body() {
        let mut expected = Reads::default();
        expected.merge(&reads("object.metadata.labels == object.metadata.name"));
        assert_eq!(
            reads("object.metadata.labels.all(k, v, v == object.metadata.name)"),
            expected
        );
        assert_ne!(expected, Reads::Whole);
    }

    #[test]
    fn a_variable_named_object_reads_all_of_it() {
        assert_eq!(reads("[1].all(object, v, v > 0)"), Reads::Whole);
        assert_eq!(reads("[1].transformList(i, object, i)"), Reads::Whole);
    }
}
