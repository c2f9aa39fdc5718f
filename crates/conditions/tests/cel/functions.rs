//! CEL functions available to rules: standard library, extensions and the Kubernetes libraries.

use conditions::{Bindings, EvalError, Evaluator};
use serde_json::{Value, json};

fn eval(expr: &str) -> Result<Value, EvalError> {
    eval_on(expr, &json!({}))
}

fn eval_on(expr: &str, object: &Value) -> Result<Value, EvalError> {
    Evaluator::shared().eval_expression(expr, &Bindings::Object(object))
}

fn ok(expr: &str) -> Value {
    eval(expr).unwrap_or_else(|e| panic!("{expr}: {e}"))
}

#[test]
fn json_integers_are_ints() {
    let object = json!({"spec": {"replicas": 3, "ratio": 0.5}});
    assert_eq!(
        eval_on("object.spec.replicas + 1", &object).unwrap(),
        json!(4)
    );
    assert_eq!(
        eval_on("object.spec.replicas * 2 == 6", &object).unwrap(),
        json!(true)
    );
    assert_eq!(
        eval_on("object.spec.ratio * 2.0", &object).unwrap(),
        json!(1.0)
    );
}

#[test]
fn has_conditions_follows_ocm() {
    let with = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let empty = json!({"status": {"conditions": []}});
    let without = json!({"status": {}});
    assert_eq!(
        eval_on("hasConditions(object.status)", &with).unwrap(),
        json!(true)
    );
    assert_eq!(
        eval_on("hasConditions(object.status)", &empty).unwrap(),
        json!(false)
    );
    assert_eq!(
        eval_on("hasConditions(object.status)", &without).unwrap(),
        json!(false)
    );
    assert_eq!(eval("hasConditions('not a map')").unwrap(), json!(false));
}

#[test]
fn strings_extension() {
    assert_eq!(ok("'TacoCat'.lowerAscii()"), json!("tacocat"));
    assert_eq!(ok("'a,b,c'.split(',')"), json!(["a", "b", "c"]));
    assert_eq!(ok("'  x '.trim()"), json!("x"));
    assert_eq!(ok("'hello'.indexOf('l')"), json!(2));
    assert_eq!(ok("['a', 'b'].join('-')"), json!("a-b"));
}

#[test]
fn optional_types() {
    let object = json!({"status": {"phase": "Running"}});
    assert_eq!(
        eval_on("object.?status.?phase.orValue('none')", &object).unwrap(),
        json!("Running")
    );
    assert_eq!(
        eval_on("object.?spec.?replicas.orValue(1)", &object).unwrap(),
        json!(1)
    );
    assert_eq!(ok("optional.of(1).hasValue()"), json!(true));
    assert_eq!(ok("optional.none().hasValue()"), json!(false));
}

#[test]
fn list_helpers() {
    assert_eq!(ok("[1, 2, 3].sum()"), json!(6));
    assert_eq!(ok("[1.5, 2.5].sum()"), json!(4.0));
    assert_eq!(ok("[].sum()"), json!(0));
    assert_eq!(ok("[3, 1, 2].min()"), json!(1));
    assert_eq!(ok("[3, 1, 2].max()"), json!(3));
    assert_eq!(ok("['b', 'a'].min()"), json!("a"));
    assert!(matches!(eval("[].min()"), Err(EvalError::Runtime { .. })));
    assert_eq!(ok("[1, 2, 2, 3].isSorted()"), json!(true));
    assert_eq!(ok("[2, 1].isSorted()"), json!(false));
    assert_eq!(ok("[1, 2, 3, 2].indexOf(2)"), json!(1));
    assert_eq!(ok("[1, 2, 3, 2].lastIndexOf(2)"), json!(3));
    assert_eq!(ok("['a'].indexOf('z')"), json!(-1));
    assert!(eval("[1, 'a'].sum()").is_err());
    assert!(
        eval("[9223372036854775807, 1].sum()").is_err(),
        "overflow is an error"
    );
}

#[test]
fn list_helpers_on_object_fields() {
    let object = json!({"status": {"counts": [4, 5, 6]}});
    assert_eq!(
        eval_on("object.status.counts.sum() == 15", &object).unwrap(),
        json!(true)
    );
    assert_eq!(
        eval_on("object.status.counts.max()", &object).unwrap(),
        json!(6)
    );
}

#[test]
fn regex_find() {
    assert_eq!(ok("'abc 123 def 456'.find('[0-9]+')"), json!("123"));
    assert_eq!(ok("'abc'.find('[0-9]+')"), json!(""));
    assert_eq!(
        ok("'abc 123 def 456'.findAll('[0-9]+')"),
        json!(["123", "456"])
    );
    assert_eq!(ok("'1 2 3'.findAll('[0-9]', 2)"), json!(["1", "2"]));
    assert_eq!(ok("'1 2 3'.findAll('[0-9]', -1)"), json!(["1", "2", "3"]));
    assert_eq!(ok("'image:v1.2.3'.matches('v[0-9]+')"), json!(true));
    let err = eval("'abc'.find('[')").unwrap_err();
    assert!(err.to_string().contains("invalid regex"), "{err}");
}

#[test]
fn quantity_parse_compare_add() {
    assert_eq!(
        ok("quantity('1Gi').compareTo(quantity('1024Mi'))"),
        json!(0)
    );
    assert_eq!(ok("quantity('1').compareTo(quantity('500m'))"), json!(1));
    assert_eq!(
        ok("quantity('500m').isLessThan(quantity('1'))"),
        json!(true)
    );
    assert_eq!(
        ok("quantity('2k').isGreaterThan(quantity('1999'))"),
        json!(true)
    );
    assert_eq!(ok("quantity('1') == quantity('1000m')"), json!(true));
    assert_eq!(
        ok("quantity('1.5').add(quantity('500m')).asInteger()"),
        json!(2)
    );
    assert_eq!(ok("quantity('1Ki').add(1).asInteger()"), json!(1025));
    assert_eq!(ok("quantity('1').sub(quantity('250m'))"), json!("750m"));
    assert_eq!(ok("quantity('1.5').asApproximateFloat()"), json!(1.5));
    assert_eq!(ok("quantity('1.5').isInteger()"), json!(false));
    assert_eq!(ok("quantity('-3').sign()"), json!(-1));
    assert_eq!(ok("isQuantity('10Mi')"), json!(true));
    assert_eq!(ok("isQuantity('ten')"), json!(false));
    assert!(eval("quantity('ten')").is_err());
    assert!(eval("quantity('1.5').asInteger()").is_err());
}

#[test]
fn quantity_on_object_fields() {
    let object = json!({"spec": {"resources": {"requests": {"memory": "512Mi"}}}});
    let expr = "quantity(object.spec.resources.requests.memory).isLessThan(quantity('1Gi'))";
    assert_eq!(eval_on(expr, &object).unwrap(), json!(true));
}

#[test]
fn top_level_bindings() {
    let vars = json!({"a": 2, "b": {"c": "x"}});
    let ev = Evaluator::shared();
    assert_eq!(
        ev.eval_expression("a + 1", &Bindings::TopLevel(&vars))
            .unwrap(),
        json!(3)
    );
    assert_eq!(
        ev.eval_expression("b.c", &Bindings::TopLevel(&vars))
            .unwrap(),
        json!("x")
    );
    assert!(matches!(
        ev.eval_expression("a", &Bindings::TopLevel(&json!([1]))),
        Err(EvalError::WrongType { .. })
    ));
}

#[test]
fn errors_are_classified() {
    let ev = Evaluator::shared();
    let compile = ev
        .eval_expression("1 +", &Bindings::Object(&json!({})))
        .unwrap_err();
    assert!(compile.is_compile_error(), "{compile:?}");
    let runtime = eval_on("object.missing.field", &json!({})).unwrap_err();
    assert!(matches!(runtime, EvalError::Runtime { .. }), "{runtime:?}");
    assert!(!runtime.is_compile_error());
    assert!(runtime.to_string().contains("missing"), "{runtime}");
    assert!(ev.check_expression("object.a == 1").is_ok());
    assert!(
        ev.check_expression("object.a ==")
            .unwrap_err()
            .is_compile_error()
    );
}

#[test]
fn url_helpers() {
    let u = "url('https://example.com:8443/api/v1?watch=true&label=a&label=b')";
    assert_eq!(ok(&format!("{u}.getScheme()")), json!("https"));
    assert_eq!(ok(&format!("{u}.getHost()")), json!("example.com:8443"));
    assert_eq!(ok(&format!("{u}.getHostname()")), json!("example.com"));
    assert_eq!(ok(&format!("{u}.getPort()")), json!("8443"));
    assert_eq!(ok(&format!("{u}.getEscapedPath()")), json!("/api/v1"));
    assert_eq!(ok(&format!("{u}.getQuery()['label']")), json!(["a", "b"]));
    assert_eq!(ok("isURL('https://example.com')"), json!(true));
    assert_eq!(ok("isURL('/healthz')"), json!(true));
    assert_eq!(ok("isURL('example.com')"), json!(false));
    assert_eq!(ok("url('/healthz')"), json!("/healthz"));
    assert!(eval("url('not a url')").is_err());
}

fn typed(expr: &str) -> conditions::TypedValue {
    Evaluator::shared()
        .eval_expression_typed(expr, &Bindings::Object(&json!({})))
        .unwrap_or_else(|e| panic!("{expr}: {e}"))
}

#[test]
fn two_variable_comprehensions_over_objects() {
    let object = json!({
        "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"}},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
    });
    for (expr, expected) in [
        (
            "object.metadata.labels.all(k, v, k != '' && v != '')",
            json!(true),
        ),
        (
            "object.metadata.labels.exists(k, v, k == 'app' && v == object.metadata.name)",
            json!(true),
        ),
        (
            "object.metadata.labels.existsOne(k, v, v.startsWith('f'))",
            json!(true),
        ),
        (
            "object.spec.containers.all(i, c, c.name == ['a', 'b'][i])",
            json!(true),
        ),
        (
            "object.spec.containers.transformList(i, c, '%d:%s'.format([i, c.name]))",
            json!(["0:a", "1:b"]),
        ),
        (
            "object.spec.containers.transformList(i, c, i > 0, c.name)",
            json!(["b"]),
        ),
        (
            "object.metadata.labels.transformMap(k, v, v + '!')",
            json!({"app": "web!", "tier": "front!"}),
        ),
        (
            "object.metadata.labels.transformMapEntry(k, v, {v: k})",
            json!({"web": "app", "front": "tier"}),
        ),
        (
            "object.metadata.labels.transformMapEntry(k, v, k == 'app', {'name': v})",
            json!({"name": "web"}),
        ),
    ] {
        assert_eq!(eval_on(expr, &object).unwrap(), expected, "{expr}");
    }
}

#[test]
fn two_variable_comprehensions_nest_and_shadow() {
    // The inner `i` and `v` hide the outer ones; the outer ones are back after it.
    assert_eq!(
        ok("[10, 20].all(i, v, ['x'].all(i, v, i == 0 && v == 'x') && v == (i + 1) * 10)"),
        json!(true)
    );
    // An inner comprehension reads the outer variables.
    assert_eq!(
        ok("[1, 2].transformList(i, v, [3, 4].transformList(j, w, v * w + i))"),
        json!([[3, 4], [7, 9]])
    );
    // A one-variable macro of the same name still works beside them.
    assert_eq!(
        ok("[1, 2].all(v, v > 0) && [1, 2].all(i, v, v > i)"),
        json!(true)
    );
}

#[test]
fn two_variable_quantifiers_absorb_errors_as_cel_go() {
    // `error && false` is false and `error || true` true, whatever the order.
    assert_eq!(ok("[dyn('a'), dyn(0)].all(i, v, v > 0)"), json!(false));
    assert_eq!(ok("[dyn('a'), dyn(1)].exists(i, v, v > 0)"), json!(true));
    assert!(eval("[dyn('a'), dyn(1)].all(i, v, v > 0)").is_err());
    assert!(eval("[dyn('a'), dyn(0)].existsOne(i, v, v > 0)").is_err());
}

#[test]
fn two_variable_comprehensions_reject_what_cel_go_rejects() {
    for expr in [
        // duplicate variable names, the accumulator's names, non-identifiers
        "[].all(i, i, true)",
        "[].all(__result__, v, true)",
        "[].exists(i, __result__, true)",
        "[].all(i.j, v, true)",
        // not a range
        "1.all(i, v, true)",
        "'ab'.exists(i, v, true)",
        // a key given twice
        "[1, 1].transformMapEntry(i, v, {v: i})",
        // an entry that is no map
        "{'a': 1}.transformMapEntry(k, v, [k])",
        // a filter that is no bool; branches of two types
        "{}.transformMap(k, v, 'no', v)",
        "[1, 2].transformList(i, v, v % 2 == 0 ? [v] : v)",
    ] {
        assert!(eval(expr).is_err(), "{expr} gave {:?}", eval(expr));
    }
    let err = eval("[1, 1].transformMapEntry(i, v, {v: i})").unwrap_err();
    assert!(err.to_string().contains("key 1 already exists"), "{err}");
}

#[test]
fn reverse_is_for_lists_only_as_in_kubernetes() {
    assert_eq!(ok("[1, 2, 3].reverse()"), json!([3, 2, 1]));
    assert_eq!(ok("[].reverse()"), json!([]));
    let err = eval("'abc'.reverse()").unwrap_err();
    assert!(err.to_string().contains("reverse"), "{err}");
}

#[test]
fn type_values_print_as_types() {
    assert_eq!(typed("type(1)").canonical, "type(int)");
    assert_eq!(typed("type(1)").type_name, "type");
    assert_eq!(
        typed("[int, string]").canonical,
        "[type(int), type(string)]"
    );
    assert_eq!(ok("type(1) == int && type('a') != int"), json!(true));
    assert_eq!(ok("'%s'.format([type('a')])"), json!("string"));
    // Inside a list a type prints as its name, unquoted: `type(1)` is `int`.
    assert_eq!(ok("'%s'.format([[type(1), 'a']])"), json!("[int, \"a\"]"));
}

#[test]
fn quantities_print_as_kubernetes_writes_them() {
    assert_eq!(
        typed("quantity('12Mi')").canonical,
        "kubernetes.Quantity(12Mi)"
    );
    assert_eq!(typed("quantity('1.5Gi')").text, "1536Mi");
    assert_eq!(typed("quantity('2000')").text, "2k");
    assert_eq!(
        typed("quantity('1Gi').add(quantity('512Mi'))").text,
        "1536Mi"
    );
    assert_eq!(ok("quantity('1Ki') == quantity('1024')"), json!(true));
}
