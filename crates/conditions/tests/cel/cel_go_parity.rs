//! Where cel-go v0.26 with the Kubernetes CEL environment answers, ours answers the same: cases
//! from upstream's tables (cel-go ext: strings_test.go, encoders_test.go, formatting_test.go,
//! sets_test.go; k8s.io/apiserver/pkg/cel/library: quantity_test.go, cidr_test.go, lists;
//! apiextensions-apiserver validation_test.go) that our environment once answered otherwise.

use conditions::{Bindings, EvalError, Evaluator, TypedValue};
use serde_json::{Value, json};

fn eval(expr: &str) -> Result<Value, EvalError> {
    Evaluator::shared().eval_expression(expr, &Bindings::Object(&json!({})))
}

fn typed(expr: &str) -> TypedValue {
    Evaluator::shared()
        .eval_expression_typed(expr, &Bindings::Object(&json!({})))
        .unwrap_or_else(|e| panic!("{expr}: {e}"))
}

fn assert_all(cases: &[(&str, Value)]) {
    for (expr, want) in cases {
        assert_eq!(
            eval(expr).as_ref().ok(),
            Some(want),
            "{expr}: {:?}",
            eval(expr)
        );
    }
}

fn assert_errors(exprs: &[&str]) {
    for expr in exprs {
        assert!(eval(expr).is_err(), "{expr} gave {:?}", eval(expr));
    }
}

#[test]
fn strings_quote_is_declared() {
    assert_all(&[
        (
            r#"strings.quote("first\nsecond")"#,
            json!("\"first\\nsecond\""),
        ),
        (r#"strings.quote("bell\a")"#, json!("\"bell\\a\"")),
        (
            r#"strings.quote("mid string \" quote")"#,
            json!("\"mid string \\\" quote\""),
        ),
        (r#"strings.quote("завтра")"#, json!("\"завтра\"")),
        (r#"strings.quote("")"#, json!("\"\"")),
        (
            "strings.quote('%s %s').format(['hello', 'world'])",
            json!("\"hello world\""),
        ),
        (
            "strings.quote('ABCDEFGHIJ abcdefghij') == strings.quote('ABCDEFGHIJ abcdefghij')",
            json!(true),
        ),
    ]);
}

#[test]
fn base64_encodes_and_decodes() {
    assert_all(&[
        ("base64.decode('aGVsbG8=') == b'hello'", json!(true)),
        ("base64.decode('aGVsbG8') == b'hello'", json!(true)),
        ("base64.encode(b'hello') == 'aGVsbG8='", json!(true)),
    ]);
}

#[test]
fn urls_are_read_as_kubernetes_reads_them() {
    assert_all(&[
        (
            "isURL('https://user:pass@example.com:80/path?query=val#fragment')",
            json!(true),
        ),
        (
            "url('https://u:p@h:80/p?k=v#anchor').getHost()",
            json!("h:80"),
        ),
        (
            "url('https://u:p@h:80/p?k=v#anchor').getQuery()",
            json!({"k": ["v"]}),
        ),
        (
            "url('https://example.com/with space/').getEscapedPath() == '/with%20space/'",
            json!(true),
        ),
        (
            "url('https://example.com/path?key with spaces=value with spaces').getQuery() == { 'key with spaces': ['value with spaces']}",
            json!(true),
        ),
        ("isURL('https://a:b:c/') == false", json!(true)),
        ("url('https:://kubernetes.io/').getEscapedPath()", json!("")),
        ("url('https://example.com').getEscapedPath()", json!("")),
        ("url('HTTPS://example.com/a').getScheme()", json!("https")),
        ("url('https://[::1]:80/').getHostname()", json!("::1")),
        ("isURL('https://example.com/%zz')", json!(false)),
    ]);
}

#[test]
fn string_offsets_past_the_end_find_nothing() {
    assert_all(&[
        ("'tacocat'.indexOf('a', 30) == -1", json!(true)),
        ("'tacocat'.lastIndexOf('a', 30) == -1", json!(true)),
        ("'tacocat'.indexOf('a', 3)", json!(5)),
        ("'tacocat'.lastIndexOf('a', 3)", json!(1)),
        ("'tacocat'.indexOf('', 30)", json!(30)),
        ("'ta©o©αT'.indexOf('©', 3)", json!(4)),
        ("'ta©o©αT'.lastIndexOf('©', 3)", json!(2)),
    ]);
    assert_errors(&[
        "'tacocat'.indexOf('a', -1)",
        "'tacocat'.lastIndexOf('a', -1)",
    ]);
}

#[test]
fn lists_and_quantities() {
    assert_all(&[
        (
            "[duration('1s'), duration('2s')].sum() == duration('3s')",
            json!(true),
        ),
        (
            "quantity(\"9999999999999999999999999999999999999G\").isInteger()",
            json!(false),
        ),
        (
            "quantity(\"9999999999999999999999999999999999999G\").isGreaterThan(quantity('1E'))",
            json!(true),
        ),
        ("quantity('1Gi').isInteger()", json!(true)),
    ]);
    assert_errors(&["quantity(\"9999999999999999999999999999999999999G\").asInteger()"]);
}

#[test]
fn format_prints_as_cel_go_does() {
    assert_all(&[
        ("'%e'.format([3.14]) == '3.140000×10⁰⁰'", json!(true)),
        ("\"%.6e\".format([1052.032911275])", json!("1.052033×10⁰³")),
        ("\"%.2e\".format([0.00012])", json!("1.200000×10⁻⁰⁴")),
        ("\"%s\".format([double(\"Inf\")])", json!("+Inf")),
        ("\"%s\".format([double(\"-Inf\")])", json!("-Inf")),
        (
            "\"%s\".format([[double(\"NaN\"), double(\"+Inf\"), double(\"-Inf\")]])",
            json!("[\"NaN\", \"+Inf\", \"-Inf\"]"),
        ),
        ("\"%f\".format([\"Infinity\"])", json!("∞")),
        ("\"%s\".format([0.000000002])", json!("2e-09")),
        ("\"%s\".format([[2.71]])", json!("[2.710000]")),
        (
            "\"%s\".format([{\"key1\": b\"xyz\", \"key2\": duration(\"2h\"), \"key3\": 2.71828}])",
            json!("{\"key1\":b\"xyz\", \"key2\":duration(\"7200s\"), \"key3\":2.718280}"),
        ),
        ("'%.3f'.format([1234567.5])", json!("1,234,567.500")),
        ("'%d%%'.format([50])", json!("50%")),
    ]);
    assert_errors(&[
        "'%d'.format([1.5])",
        "'%q'.format([1])",
        "'%s %s'.format(['a'])",
    ]);
}

#[test]
fn of_non_zero_value_knows_the_zero_timestamp() {
    assert_all(&[
        (
            "optional.ofNonZeroValue(timestamp('0001-01-01T00:00:00Z')) == optional.none()",
            json!(true),
        ),
        (
            "optional.ofNonZeroValue(timestamp('0001-01-01T00:00:00.000+00:00')) == optional.none()",
            json!(true),
        ),
        (
            "optional.ofNonZeroValue(duration('0s')).hasValue()",
            json!(false),
        ),
        (
            "optional.ofNonZeroValue(timestamp('2001-01-01T00:00:00Z')).hasValue()",
            json!(true),
        ),
        ("optional.ofNonZeroValue(1).value()", json!(1)),
    ]);
}

#[test]
fn heterogeneous_literals_and_go_invalid_patterns_are_errors() {
    assert_errors(&[
        "[1, 'a', false].filter(x, string(x) == 'a')",
        "[1, 2.0]",
        "[dyn(1), 2]",
        "[[1, 2], 3].flatten()",
        "'x'.matches('x++')",
        "'x'.matches('a**')",
        "'x'.find('a+*')",
    ]);
    assert_all(&[
        ("[dyn(1), dyn('a')].size()", json!(2)),
        // Unlike cel-go, map literals may mix value types: a rule's map result does.
        ("{'status': false, 'message': 'x'}.size()", json!(2)),
        ("'%s'.format([[1, 'a']])", json!("[1, \"a\"]")),
        ("'x'.matches('x+?')", json!(true)),
        ("'a+'.matches('a\\\\++')", json!(true)),
    ]);
}

#[test]
fn sets_extension() {
    assert_all(&[
        ("sets.contains([1, 2, 3, 4], [2, 3])", json!(true)),
        ("sets.contains([1], [1.0])", json!(true)),
        ("!sets.contains([1], [1, 2])", json!(true)),
        ("sets.equivalent([1, 1], [1])", json!(true)),
        ("sets.intersects([2, 1], [1])", json!(true)),
        ("!sets.intersects([], [])", json!(true)),
    ]);
}

#[test]
fn library_types_are_named_and_results_typed() {
    assert_all(&[
        ("type(ip('192.168.0.1')) == net.IP", json!(true)),
        ("type(cidr('2001:db8::/32').ip()) == net.IP", json!(true)),
        ("type(cidr('192.168.0.0/24')) == net.CIDR", json!(true)),
    ]);
    let ip = typed("ip('2001:DB8::1')");
    assert_eq!(
        (ip.type_name.as_str(), ip.text.as_str(), ip.json),
        ("net.IP", "2001:db8::1", None)
    );
    assert_eq!(typed("cidr('10.0.0.0/8')").text, "10.0.0.0/8");
    assert_eq!(typed("semver('1.2.3-rc.1')").text, "1.2.3-rc.1");
    let list = typed("[ip('1.2.3.4')]");
    assert_eq!(
        (list.type_name.as_str(), list.canonical.as_str()),
        ("list", "[net.IP(1.2.3.4)]")
    );
    assert_eq!(
        typed("{'b': dyn(1.5), 'a': dyn(1u)}").canonical,
        "{\"a\": 1u, \"b\": 1.5d}"
    );
}

#[test]
fn the_optional_library_over_lists() {
    assert_all(&[
        ("[].first().hasValue()", json!(false)),
        ("['a', 'b', 'c'].first().orValue('')", json!("a")),
        ("[1, 2, 3].last().orValue(0)", json!(3)),
        ("[].last().orValue(7)", json!(7)),
        ("optional.unwrap([])", json!([])),
        (
            "optional.unwrap([optional.of(1), optional.none(), optional.of(3)])",
            json!([1, 3]),
        ),
        ("[optional.none(), optional.none()].unwrapOpt()", json!([])),
        (
            "[optional.of('a'), optional.none()].unwrapOpt()",
            json!(["a"]),
        ),
    ]);
    assert_eq!(typed("[1, 2, 3].last()").canonical, "optional.of(3)");
    assert_eq!(typed("[].first()").canonical, "optional.none()");
    assert_errors(&[
        // cel-go's type check: the elements' optional types differ, or are no optionals.
        "optional.unwrap([optional.of(42), optional.none(), optional.of('a')])",
        "[optional.of(42), optional.of('a')].unwrapOpt()",
        "[1, 2].unwrapOpt()",
        "dyn([1, 2]).unwrapOpt()",
    ]);
}

#[test]
fn scientific_reads_the_precision_as_a_width_and_format_counts_literal_arguments() {
    assert_all(&[
        (r#""%e".format([double("Inf")])"#, json!("     ∞")),
        (r#""%e".format([double("-Inf")])"#, json!("    -∞")),
        (r#""%e".format([double("NaN")])"#, json!("   NaN")),
        (r#""%.8e".format(["-Infinity"])"#, json!("      -∞")),
        (r#""%.2e".format([3.14159])"#, json!("3.141590×10⁰⁰")),
        (
            r#""%.20e".format([3.14159])"#,
            json!("       3.141590×10⁰⁰"),
        ),
        // Only literal arguments are counted before evaluation, as cel-go counts them.
        (r#""%s".format(dyn([1, 2]))"#, json!("1")),
        (r#""%d %%".format([1])"#, json!("1 %")),
    ]);
    assert_errors(&[
        r#""%s".format([1, 2])"#,
        r#""%d %%".format([1, 2])"#,
        "{'hello': 'world', 1: '!'}",
    ]);
}
