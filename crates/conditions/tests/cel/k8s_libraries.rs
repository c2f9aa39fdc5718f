//! The Kubernetes `ip`, `cidr`, `semver` and `format` CEL libraries, with cases after the
//! Kubernetes library's own tests (k8s.io/apiserver/pkg/cel/library: ip_test.go, cidr_test.go,
//! semver_test.go, format_test.go): a hub rule using them evaluates here as on upstream's agent.

use conditions::{Bindings, Evaluator};
use serde_json::{Value, json};

fn eval(expr: &str) -> Result<Value, String> {
    Evaluator::shared()
        .eval_expression(
            expr,
            &Bindings::Object(&json!({"status": {"podIP": "10.0.0.7"}})),
        )
        .map_err(|e| e.to_string())
}

fn assert_all(cases: &[(&str, Value)]) {
    for (expr, want) in cases {
        assert_eq!(eval(expr).as_ref(), Ok(want), "{expr}");
    }
}

#[test]
fn ip_functions() {
    assert_all(&[
        ("isIP('192.168.0.1')", json!(true)),
        ("isIP('2001:db8::68')", json!(true)),
        ("isIP('192.168.0.1.0')", json!(false)),
        ("isIP('::ffff:c0a8:1')", json!(false)),
        ("isIP('fe80::1%eth0')", json!(false)),
        ("isIP('127.0.0.01')", json!(false)),
        ("ip('192.168.0.1').family()", json!(4)),
        ("ip('::1').family()", json!(6)),
        ("ip('127.0.0.1').isLoopback()", json!(true)),
        ("ip('::1').isLoopback()", json!(true)),
        ("ip('0.0.0.0').isUnspecified()", json!(true)),
        ("ip('::').isUnspecified()", json!(true)),
        ("ip('224.0.0.1').isLinkLocalMulticast()", json!(true)),
        ("ip('ff02::1').isLinkLocalMulticast()", json!(true)),
        ("ip('169.254.169.254').isLinkLocalUnicast()", json!(true)),
        ("ip('fe80::1').isLinkLocalUnicast()", json!(true)),
        ("ip('192.168.0.1').isGlobalUnicast()", json!(true)),
        ("ip('255.255.255.255').isGlobalUnicast()", json!(false)),
        ("ip('224.0.0.1').isGlobalUnicast()", json!(false)),
        ("ip(object.status.podIP).family() == 4", json!(true)),
    ]);
    assert!(eval("ip('not an ip')").is_err());
}

#[test]
fn cidr_functions() {
    assert_all(&[
        ("isCIDR('192.168.0.0/24')", json!(true)),
        ("isCIDR('192.168.0.0/33')", json!(false)),
        ("isCIDR('192.168.0.0')", json!(false)),
        (
            "cidr('192.168.0.0/24').containsIP(ip('192.168.0.1'))",
            json!(true),
        ),
        (
            "cidr('192.168.0.0/24').containsIP('192.168.0.1')",
            json!(true),
        ),
        (
            "cidr('192.168.0.0/24').containsIP('192.168.1.1')",
            json!(false),
        ),
        ("cidr('192.168.0.0/24').containsIP('::1')", json!(false)),
        (
            "cidr('192.168.0.0/16').containsCIDR(cidr('192.168.10.0/24'))",
            json!(true),
        ),
        (
            "cidr('192.168.0.0/24').containsCIDR('192.168.0.0/16')",
            json!(false),
        ),
        (
            "cidr('2001:db8::/32').containsCIDR('2001:db8::/48')",
            json!(true),
        ),
        ("cidr('192.168.0.0/24').prefixLength()", json!(24)),
        (
            "cidr('192.168.0.5/24').masked().containsCIDR('192.168.0.0/24')",
            json!(true),
        ),
        ("cidr('192.168.0.5/24').ip().family()", json!(4)),
        (
            "cidr('10.0.0.0/8').containsIP(object.status.podIP)",
            json!(true),
        ),
    ]);
    assert!(eval("cidr('192.168.0.0/33')").is_err());
}

#[test]
fn semver_functions() {
    assert_all(&[
        ("isSemver('1.2.3')", json!(true)),
        ("isSemver('v1.0.0')", json!(false)),
        ("isSemver('1.0')", json!(false)),
        ("isSemver('1.0.0-alpha.1+build')", json!(true)),
        ("semver('1.2.3').major()", json!(1)),
        ("semver('1.2.3').minor()", json!(2)),
        ("semver('1.2.3').patch()", json!(3)),
        (
            "semver('1.2.3').isGreaterThan(semver('1.2.0'))",
            json!(true),
        ),
        (
            "semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))",
            json!(true),
        ),
        ("semver('1.0.0').compareTo(semver('1.0.0+build'))", json!(0)),
        ("semver('2.0.0').compareTo(semver('10.0.0'))", json!(-1)),
        (
            "semver('1.0.0-beta.11').compareTo(semver('1.0.0-beta.2'))",
            json!(1),
        ),
    ]);
    assert!(eval("semver('v1')").is_err());
}

#[test]
fn ip_and_cidr_conversions() {
    assert_all(&[
        ("string(ip('192.168.0.1'))", json!("192.168.0.1")),
        ("string(ip('2001:db8::68'))", json!("2001:db8::68")),
        ("string(ip('2001:DB8:0:0:0::68'))", json!("2001:db8::68")),
        (
            "string(ip('2001:db8:0:0:1:0:0:1'))",
            json!("2001:db8::1:0:0:1"),
        ),
        ("ip.isCanonical('127.0.0.1')", json!(true)),
        ("ip.isCanonical('2001:db8::abcd')", json!(true)),
        ("ip.isCanonical('2001:DB8::68')", json!(false)),
        ("ip.isCanonical('2001:db8::0:0:0:abcd')", json!(false)),
        ("ip.isCanonical(object.status.podIP)", json!(true)),
        ("string(cidr('192.168.0.0/24'))", json!("192.168.0.0/24")),
        ("string(cidr('192.168.0.5/24'))", json!("192.168.0.5/24")),
        (
            "string(cidr('192.168.0.5/24').masked())",
            json!("192.168.0.0/24"),
        ),
        ("string(cidr('192.168.0.5/24').ip())", json!("192.168.0.5")),
        ("string(cidr('2001:DB8::/32'))", json!("2001:db8::/32")),
        (
            "cidr('10.0.0.0/8').containsIP(string(ip('10.1.2.3')))",
            json!(true),
        ),
        // The standard conversions still apply to everything else.
        ("string(1)", json!("1")),
        ("string('x')", json!("x")),
    ]);
    let err = eval("ip.isCanonical('127.0.0.1.0')").unwrap_err();
    assert!(err.contains("127.0.0.1.0"), "{err}");
}

#[test]
fn semver_normalization() {
    assert_all(&[
        ("isSemver('v1.0.0', true)", json!(true)),
        ("isSemver('v1.0.0', false)", json!(false)),
        ("isSemver('1.0', true)", json!(true)),
        ("isSemver('01.01.01', true)", json!(true)),
        ("isSemver('hello', true)", json!(false)),
        ("isSemver('1.0-rc.1', true)", json!(false)),
        ("semver('v1.0.0', true) == semver('1.0.0')", json!(true)),
        ("semver('1.0', true) == semver('1.0.0')", json!(true)),
        ("semver('01.01.01', true) == semver('1.1.1')", json!(true)),
        ("semver('v1', true).compareTo(semver('1.0.0'))", json!(0)),
        ("semver('v1.2', true).minor()", json!(2)),
        (
            "semver('v1.10', true).isGreaterThan(semver('1.9.0'))",
            json!(true),
        ),
        ("semver('1.0.0+a') == semver('1.0.0+b')", json!(true)),
    ]);
    assert!(eval("semver('v1.0.0', false)").is_err());
    assert!(eval("semver('1.0-rc.1', true)").is_err());
    // Kubernetes declares no `string(semver)` conversion, so neither does the agent: a rule
    // using it would fail on upstream agents.
    assert!(eval("string(semver('1.2.3'))").is_err());
}

#[test]
fn format_functions() {
    assert_all(&[
        (
            "format.dns1123Label().validate('valid-name').hasValue()",
            json!(false),
        ),
        (
            "format.dns1123Label().validate('-invalid').hasValue()",
            json!(true),
        ),
        (
            "format.dns1123Subdomain().validate('example.com').hasValue()",
            json!(false),
        ),
        (
            "format.dns1035Label().validate('1abc').hasValue()",
            json!(true),
        ),
        ("format.labelValue().validate('').hasValue()", json!(false)),
        (
            "format.qualifiedName().validate('example.com/Name').hasValue()",
            json!(false),
        ),
        (
            "format.named('uuid').value().validate('123e4567-e89b-12d3-a456-426614174000').hasValue()",
            json!(false),
        ),
        ("format.named('nope').hasValue()", json!(false)),
        (
            "format.date().validate('2021-01-01').hasValue()",
            json!(false),
        ),
        (
            "format.datetime().validate('not a time').hasValue()",
            json!(true),
        ),
        (
            "format.dns1123Label().validate('ok').orValue([]).size()",
            json!(0),
        ),
        (
            "format.dns1123Label().validate('Bad_Name').value().size() > 0",
            json!(true),
        ),
    ]);
}
