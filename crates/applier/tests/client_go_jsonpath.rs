//! client-go's own jsonpath test tables (`util/jsonpath/jsonpath_test.go` and `parser_test.go`
//! of kubernetes/client-go), run through [`applier::JsonPath`] as status feedback runs it: every
//! case a feedback path can express, with client-go's expected output. Upstream's agent reads a
//! feedback path as client-go reads `{path}` with missing keys allowed, so these are the answers
//! a drop-in must give.
//!
//! Left out: the cases that only differ with `AllowMissingKeys(false)` (feedback always allows
//! missing keys; the same templates with it allowed are here). Templates (`range`/`end`, text
//! around an action, several actions) are listed as refused: a feedback path is one action, and
//! we refuse the rest with an error instead of reading part of it.
//!
//! Inputs are JSON. Go struct inputs become objects, whose members this crate keeps in key
//! order where Go keeps the struct's field order: such cases compare the values (`Values`) or the
//! sorted words (`Sorted`) instead of the printed text.

use applier::JsonPath;
use serde_json::{Number, Value};

/// What client-go gives for a template.
enum Expect {
    /// Printed as client-go prints results: values joined by spaces, structures as JSON.
    Prints(&'static str),
    /// The same words, in any order (Go map order, or Go struct field order).
    Sorted(&'static str),
    /// The same values (client-go's printed JSON values, space-separated).
    Values(&'static str),
    /// client-go fails, parsing or walking.
    Fails,
    /// client-go parses it; no output to compare (parser_test.go checks node trees).
    Parses,
    /// client-go accepts it as a template; we refuse it when parsing, with this in the error.
    Refused(&'static str),
}
use Expect::*;

const TYPES: &str = r#"{
  "bools": [true, false, true, false],
  "integers": [1, 2, 3, 4],
  "floats": [1.0, 2.2, 3.3, 4.0],
  "strings": ["one", "two", "three", "four"],
  "interfaces": [true, "one", 1, 1.1],
  "maps": [{"name": "one", "value": 1}, {"name": "two", "value": 2.02},
           {"name": "three", "value": 3.03}, {"name": "four", "value": 4.04}],
  "structs": [{"name": "one", "value": 1, "type": "integer"},
              {"name": "two", "value": 2.002, "type": "float"},
              {"name": "three", "value": 3, "type": "integer"},
              {"name": "four", "value": 4.004, "type": "float"}]
}"#;

const STORE: &str = r#"{
  "Name": "jsonpath",
  "Book": [
    {"Category": "reference", "Author": "Nigel Rees", "Title": "Sayings of the Centurey", "Price": 8.95},
    {"Category": "fiction", "Author": "Evelyn Waugh", "Title": "Sword of Honour", "Price": 12.99},
    {"Category": "fiction", "Author": "Herman Melville", "Title": "Moby Dick", "Price": 8.99}
  ],
  "Bicycle": [
    {"Color": "red", "Price": 19.95, "IsNew": true},
    {"Color": "green", "Price": 20.01, "IsNew": false}
  ],
  "Labels": {"engieer": 10, "web/html": 15, "k8s-app": 20},
  "Employees": {"jason": "manager", "dan": "clerk"}
}"#;

const POINTS: &str = r#"[
  {"id": "i1", "x": 4, "y": -5},
  {"id": "i2", "x": -2, "y": -5, "z": 1},
  {"id": "i3", "x": 8, "y": 3},
  {"id": "i4", "x": -6, "y": -1},
  {"id": "i5", "x": 0, "y": 2, "z": 1},
  {"id": "i6", "x": 1, "y": 4},
  {"id": "i7", "x": null, "y": 4}
]"#;

const NODES: &str = r#"{
  "kind": "List",
  "items": [
    {"kind": "None",
     "metadata": {"name": "127.0.0.1", "labels": {"kubernetes.io/hostname": "127.0.0.1"}},
     "status": {"capacity": {"cpu": "4"}, "ready": true,
                "addresses": [{"type": "LegacyHostIP", "address": "127.0.0.1"}]}},
    {"kind": "None",
     "metadata": {"name": "127.0.0.2", "labels": {"kubernetes.io/hostname": "127.0.0.2"}},
     "status": {"capacity": {"cpu": "8"}, "ready": false,
                "addresses": [{"type": "LegacyHostIP", "address": "127.0.0.2"},
                              {"type": "another", "address": "127.0.0.3"}]}}
  ],
  "users": [
    {"name": "myself", "user": {}},
    {"name": "e2e", "user": {"username": "admin", "password": "secret"}}
  ]
}"#;

const ANNOTATED: &str = r#"{
  "kind": "List",
  "items": [
    {"kind": "Pod", "metadata": {"name": "pod1", "annotations": {"color": "blue"}}},
    {"kind": "Pod", "metadata": {"name": "pod2"}},
    {"kind": "Pod", "metadata": {"name": "pod3", "annotations": {"color": "green"}}},
    {"kind": "Pod", "metadata": {"name": "pod4", "annotations": {"color": "blue"}}}
  ]
}"#;

const CONTAINERS4: &str = r#"{"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [
  {"image": "radial/busyboxplus:curl", "name": "fake0"},
  {"image": "radial/busyboxplus:curl", "name": "fake1"},
  {"image": "radial/busyboxplus:curl", "name": "fake2"},
  {"image": "radial/busyboxplus:curl", "name": "fake3"}]}}"#;

const CONTAINERS6: &str = r#"{"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [
  {"image": "radial/busyboxplus:curl", "name": "fake0"},
  {"image": "radial/busyboxplus:curl", "name": "fake1"},
  {"image": "radial/busyboxplus:curl", "name": "fake2"},
  {"image": "radial/busyboxplus:curl", "name": "fake3"},
  {"image": "radial/busyboxplus:curl", "name": "fake4"},
  {"image": "radial/busyboxplus:curl", "name": "fake5"}]}}"#;

const RUNNING: &str = r#"{"kind": "List", "items": [
  {"kind": "Pod", "metadata": {"name": "pod1"}, "status": {"phase": "Running"}},
  {"kind": "Pod", "metadata": {"name": "pod2"}, "status": {"phase": "Running"}},
  {"kind": "Pod", "metadata": {"name": "pod3"}, "status": {"phase": "Running"}},
  {"resourceVersion": ""}]}"#;

/// For parser_test.go's filters, whose expected nodes are the quoted literals: one element per
/// literal, so that evaluating the filter shows which literal was read.
const OS_IMAGES: &str = r#"[
  {"status": {"nodeInfo": {"osImage": "()"}}},
  {"status": {"nodeInfo": {"osImage": "(\"\")"}}},
  {"test": "())("},
  {"status": {"nodeInfo": {"osImage": "Linux"}}},
  {"status": {"nodeInfo": {"osImage": "{[()]}"}}},
  {"status": {"nodeInfo": {"osImage": "''"}}},
  {"status": {"nodeInfo": {"osImage": "\"\""}}},
  {"status": {"nodeInfo": {"osImage": "\\'"}}}
]"#;

/// (test name as in client-go, template, input, expected).
const CASES: &[(&str, &str, &str, Expect)] = &[
    // TestTypesInput
    (
        "boolSlice",
        "{ .bools }",
        TYPES,
        Prints("[true,false,true,false]"),
    ),
    ("boolSliceIndex", "{ .bools[0] }", TYPES, Prints("true")),
    ("boolSliceIndex", "{ .bools[-1] }", TYPES, Prints("false")),
    (
        "boolSubSlice",
        "{ .bools[0:2] }",
        TYPES,
        Prints("true false"),
    ),
    (
        "boolSubSliceFirst2",
        "{ .bools[:2] }",
        TYPES,
        Prints("true false"),
    ),
    (
        "boolSubSliceStep2",
        "{ .bools[:4:2] }",
        TYPES,
        Prints("true true"),
    ),
    ("integerSlice", "{ .integers }", TYPES, Prints("[1,2,3,4]")),
    ("integerSliceIndex", "{ .integers[0] }", TYPES, Prints("1")),
    (
        "integerSliceIndexReverse",
        "{ .integers[-2] }",
        TYPES,
        Prints("3"),
    ),
    (
        "integerSubSliceFirst2",
        "{ .integers[0:2] }",
        TYPES,
        Prints("1 2"),
    ),
    (
        "integerSubSliceFirst2Alt",
        "{ .integers[:2] }",
        TYPES,
        Prints("1 2"),
    ),
    (
        "integerSubSliceStep2",
        "{ .integers[:4:2] }",
        TYPES,
        Prints("1 3"),
    ),
    ("floatSlice", "{ .floats }", TYPES, Prints("[1,2.2,3.3,4]")),
    ("floatSliceIndex", "{ .floats[0] }", TYPES, Prints("1")),
    (
        "floatSliceIndexReverse",
        "{ .floats[-2] }",
        TYPES,
        Prints("3.3"),
    ),
    (
        "floatSubSliceFirst2",
        "{ .floats[0:2] }",
        TYPES,
        Prints("1 2.2"),
    ),
    (
        "floatSubSliceFirst2Alt",
        "{ .floats[:2] }",
        TYPES,
        Prints("1 2.2"),
    ),
    (
        "floatSubSliceStep2",
        "{ .floats[:4:2] }",
        TYPES,
        Prints("1 3.3"),
    ),
    (
        "stringSlice",
        "{ .strings }",
        TYPES,
        Prints(r#"["one","two","three","four"]"#),
    ),
    ("stringSliceIndex", "{ .strings[0] }", TYPES, Prints("one")),
    (
        "stringSliceIndexReverse",
        "{ .strings[-2] }",
        TYPES,
        Prints("three"),
    ),
    (
        "stringSubSliceFirst2",
        "{ .strings[0:2] }",
        TYPES,
        Prints("one two"),
    ),
    (
        "stringSubSliceFirst2Alt",
        "{ .strings[:2] }",
        TYPES,
        Prints("one two"),
    ),
    (
        "stringSubSliceStep2",
        "{ .strings[:4:2] }",
        TYPES,
        Prints("one three"),
    ),
    (
        "interfaceSlice",
        "{ .interfaces }",
        TYPES,
        Prints(r#"[true,"one",1,1.1]"#),
    ),
    (
        "interfaceSliceIndex",
        "{ .interfaces[0] }",
        TYPES,
        Prints("true"),
    ),
    (
        "interfaceSliceIndexReverse",
        "{ .interfaces[-2] }",
        TYPES,
        Prints("1"),
    ),
    (
        "interfaceSubSliceFirst2",
        "{ .interfaces[0:2] }",
        TYPES,
        Prints("true one"),
    ),
    (
        "interfaceSubSliceFirst2Alt",
        "{ .interfaces[:2] }",
        TYPES,
        Prints("true one"),
    ),
    (
        "interfaceSubSliceStep2",
        "{ .interfaces[:4:2] }",
        TYPES,
        Prints("true 1"),
    ),
    (
        "mapSlice",
        "{ .maps }",
        TYPES,
        Prints(
            r#"[{"name":"one","value":1},{"name":"two","value":2.02},{"name":"three","value":3.03},{"name":"four","value":4.04}]"#,
        ),
    ),
    (
        "mapSliceIndex",
        "{ .maps[0] }",
        TYPES,
        Prints(r#"{"name":"one","value":1}"#),
    ),
    (
        "mapSliceIndexReverse",
        "{ .maps[-2] }",
        TYPES,
        Prints(r#"{"name":"three","value":3.03}"#),
    ),
    (
        "mapSubSliceFirst2",
        "{ .maps[0:2] }",
        TYPES,
        Prints(r#"{"name":"one","value":1} {"name":"two","value":2.02}"#),
    ),
    (
        "mapSubSliceFirst2Alt",
        "{ .maps[:2] }",
        TYPES,
        Prints(r#"{"name":"one","value":1} {"name":"two","value":2.02}"#),
    ),
    (
        "mapSubSliceStepOdd",
        "{ .maps[::2] }",
        TYPES,
        Prints(r#"{"name":"one","value":1} {"name":"three","value":3.03}"#),
    ),
    (
        "mapSubSliceStepEven",
        "{ .maps[1::2] }",
        TYPES,
        Prints(r#"{"name":"two","value":2.02} {"name":"four","value":4.04}"#),
    ),
    (
        "structSlice",
        "{ .structs }",
        TYPES,
        Values(
            r#"[{"name":"one","value":1,"type":"integer"},{"name":"two","value":2.002,"type":"float"},{"name":"three","value":3,"type":"integer"},{"name":"four","value":4.004,"type":"float"}]"#,
        ),
    ),
    (
        "structSliceIndex",
        "{ .structs[0] }",
        TYPES,
        Values(r#"{"name":"one","value":1,"type":"integer"}"#),
    ),
    (
        "structSliceIndexReverse",
        "{ .structs[-2] }",
        TYPES,
        Values(r#"{"name":"three","value":3,"type":"integer"}"#),
    ),
    (
        "structSubSliceFirst2",
        "{ .structs[0:2] }",
        TYPES,
        Values(
            r#"{"name":"one","value":1,"type":"integer"} {"name":"two","value":2.002,"type":"float"}"#,
        ),
    ),
    (
        "structSubSliceFirst2Alt",
        "{ .structs[:2] }",
        TYPES,
        Values(
            r#"{"name":"one","value":1,"type":"integer"} {"name":"two","value":2.002,"type":"float"}"#,
        ),
    ),
    (
        "structSubSliceStepOdd",
        "{ .structs[::2] }",
        TYPES,
        Values(
            r#"{"name":"one","value":1,"type":"integer"} {"name":"three","value":3,"type":"integer"}"#,
        ),
    ),
    (
        "structSubSliceStepEven",
        "{ .structs[1::2] }",
        TYPES,
        Values(
            r#"{"name":"two","value":2.002,"type":"float"} {"name":"four","value":4.004,"type":"float"}"#,
        ),
    ),
    // TestStructInput
    ("plain", "hello jsonpath", "null", Refused("hello")),
    ("recursive", "{..}", "[1, 2, 3]", Prints("[1,2,3]")),
    ("filter", "{[?(@<5)]}", "[2, 6, 3, 7]", Prints("2 3")),
    ("quote", r#"{"{"}"#, "null", Prints("{")),
    ("union", "{[1,3,4]}", "[0, 1, 2, 3, 4]", Prints("1 3 4")),
    (
        "array",
        "{[0:2]}",
        r#"["Monday", "Tudesday"]"#,
        Prints("Monday Tudesday"),
    ),
    ("variable", "hello {.Name}", STORE, Refused("hello")),
    ("dict/", "{$.Labels.web/html}", STORE, Prints("15")),
    ("dict/", "{$.Employees.jason}", STORE, Prints("manager")),
    ("dict/", "{$.Employees.dan}", STORE, Prints("clerk")),
    ("dict-", "{.Labels.k8s-app}", STORE, Prints("20")),
    ("nest", "{.Bicycle[*].Color}", STORE, Prints("red green")),
    (
        "allarray",
        "{.Book[*].Author}",
        STORE,
        Prints("Nigel Rees Evelyn Waugh Herman Melville"),
    ),
    (
        "allfields",
        r#"{range .Bicycle[*]}{ "{" }{ @.* }{ "} " }{end}"#,
        STORE,
        Refused("range"),
    ),
    (
        "recurfields",
        "{..Price}",
        STORE,
        Sorted("8.95 12.99 8.99 19.95 20.01"),
    ),
    (
        "recurdotfields",
        "{...Price}",
        STORE,
        Sorted("8.95 12.99 8.99 19.95 20.01"),
    ),
    (
        "superrecurfields",
        "{............................................................Price}",
        STORE,
        Fails,
    ),
    (
        "allstructsSlice",
        "{.Bicycle}",
        STORE,
        Values(
            r#"[{"Color":"red","Price":19.95,"IsNew":true},{"Color":"green","Price":20.01,"IsNew":false}]"#,
        ),
    ),
    (
        "allstructs",
        r#"{range .Bicycle[*]}{ @ }{ " " }{end}"#,
        STORE,
        Refused("range"),
    ),
    (
        "lastarray",
        "{.Book[-1:]}",
        STORE,
        Values(
            r#"{"Category":"fiction","Author":"Herman Melville","Title":"Moby Dick","Price":8.99}"#,
        ),
    ),
    (
        "recurarray",
        "{..Book[2]}",
        STORE,
        Values(
            r#"{"Category":"fiction","Author":"Herman Melville","Title":"Moby Dick","Price":8.99}"#,
        ),
    ),
    (
        "bool",
        "{.Bicycle[?(@.IsNew==true)]}",
        STORE,
        Values(r#"{"Color":"red","Price":19.95,"IsNew":true}"#),
    ),
    // TestStructInput, missing keys allowed
    ("nonexistent field", "{.hello}", STORE, Prints("")),
    (
        "nonexistent field 2",
        "before-{.hello}after",
        STORE,
        Refused("before-"),
    ),
    // TestStructInput, failures
    ("invalid identifier", "{hello}", STORE, Fails),
    ("invalid array", "{.Labels[0]}", STORE, Fails),
    (
        "invalid filter operator",
        "{.Book[?(@.Price<>10)]}",
        STORE,
        Fails,
    ),
    (
        "redundant end",
        "{range .Labels.*}{@}{end}{end}",
        STORE,
        Refused("range"),
    ),
    // TestJSONInput
    ("exists filter", "{[?(@.z)].id}", POINTS, Prints("i2 i5")),
    ("bracket key", "{[0]['id']}", POINTS, Prints("i1")),
    ("nil value", "{[-1]['x']}", POINTS, Prints("null")),
    // TestKubernetes
    (
        "range item",
        "{range .items[*]}{.metadata.name}, {end}{.kind}",
        NODES,
        Refused("range"),
    ),
    (
        "range item with quote",
        r#"{range .items[*]}{.metadata.name}{"\t"}{end}"#,
        NODES,
        Refused("range"),
    ),
    (
        "range addresss",
        "{.items[*].status.addresses[*].address}",
        NODES,
        Prints("127.0.0.1 127.0.0.2 127.0.0.3"),
    ),
    (
        "double range",
        "{range .items[*]}{range .status.addresses[*]}{.address}, {end}{end}",
        NODES,
        Refused("range"),
    ),
    (
        "item name",
        "{.items[*].metadata.name}",
        NODES,
        Prints("127.0.0.1 127.0.0.2"),
    ),
    (
        "union nodes capacity",
        "{.items[*]['metadata.name', 'status.capacity']}",
        NODES,
        Prints(r#"127.0.0.1 127.0.0.2 {"cpu":"4"} {"cpu":"8"}"#),
    ),
    (
        "range nodes capacity",
        "{range .items[*]}[{.metadata.name}, {.status.capacity}] {end}",
        NODES,
        Refused("range"),
    ),
    (
        "user password",
        r#"{.users[?(@.name=="e2e")].user.password}"#,
        NODES,
        Prints("secret"),
    ),
    (
        "hostname",
        r"{.items[0].metadata.labels.kubernetes\.io/hostname}",
        NODES,
        Prints("127.0.0.1"),
    ),
    (
        "hostname filter",
        r#"{.items[?(@.metadata.labels.kubernetes\.io/hostname=="127.0.0.1")].kind}"#,
        NODES,
        Prints("None"),
    ),
    (
        "bool item",
        "{.items[?(@..ready==true)].metadata.name}",
        NODES,
        Prints("127.0.0.1"),
    ),
    (
        "recursive name",
        "{..name}",
        NODES,
        Sorted("127.0.0.1 127.0.0.2 myself e2e"),
    ),
    // TestEmptyRange, TestNestedRanges
    (
        "empty range",
        "{range .items[*]}{.metadata.name}{end}",
        r#"{"items": []}"#,
        Refused("range"),
    ),
    (
        "empty nested range",
        r#"{range .items[*]}{.metadata.name}{":"}{range @.spec.containers[*]}{.name}{","}{end}{"+"}{end}"#,
        r#"{"items": []}"#,
        Refused("range"),
    ),
    (
        "nested range with a trailing newline",
        r#"{range .items[*]}{.metadata.name}{":"}{range @.spec.containers[*]}{.name}{","}{end}{"+"}{end}"#,
        r#"{"items": []}"#,
        Refused("range"),
    ),
    // TestFilterPartialMatchesSometimesMissingAnnotations, missing keys allowed
    (
        "filter, should only match a subset, some items don't have annotations, tolerate missing items",
        r#"{.items[?(@.metadata.annotations.color=="blue")].metadata.name}"#,
        ANNOTATED,
        Prints("pod1 pod4"),
    ),
    // TestNegativeIndex
    (
        "containers[0]",
        "{.spec.containers[0].name}",
        CONTAINERS4,
        Prints("fake0"),
    ),
    (
        "containers[0:0]",
        "{.spec.containers[0:0].name}",
        CONTAINERS4,
        Prints(""),
    ),
    (
        "containers[0:-1]",
        "{.spec.containers[0:-1].name}",
        CONTAINERS4,
        Prints("fake0 fake1 fake2"),
    ),
    (
        "containers[-1:0]",
        "{.spec.containers[-1:0].name}",
        CONTAINERS4,
        Fails,
    ),
    (
        "containers[-1]",
        "{.spec.containers[-1].name}",
        CONTAINERS4,
        Prints("fake3"),
    ),
    (
        "containers[-1:]",
        "{.spec.containers[-1:].name}",
        CONTAINERS4,
        Prints("fake3"),
    ),
    (
        "containers[-2]",
        "{.spec.containers[-2].name}",
        CONTAINERS4,
        Prints("fake2"),
    ),
    (
        "containers[-2:]",
        "{.spec.containers[-2:].name}",
        CONTAINERS4,
        Prints("fake2 fake3"),
    ),
    (
        "containers[-3]",
        "{.spec.containers[-3].name}",
        CONTAINERS4,
        Prints("fake1"),
    ),
    (
        "containers[-4]",
        "{.spec.containers[-4].name}",
        CONTAINERS4,
        Prints("fake0"),
    ),
    (
        "containers[-4:]",
        "{.spec.containers[-4:].name}",
        CONTAINERS4,
        Prints("fake0 fake1 fake2 fake3"),
    ),
    (
        "containers[-5]",
        "{.spec.containers[-5].name}",
        CONTAINERS4,
        Fails,
    ),
    (
        "containers[5:5]",
        "{.spec.containers[5:5].name}",
        CONTAINERS4,
        Prints(""),
    ),
    (
        "containers[-5:-5]",
        "{.spec.containers[-5:-5].name}",
        CONTAINERS4,
        Prints(""),
    ),
    (
        "containers[3:1]",
        "{.spec.containers[3:1].name}",
        CONTAINERS4,
        Fails,
    ),
    (
        "containers[-1:-2]",
        "{.spec.containers[-1:-2].name}",
        CONTAINERS4,
        Fails,
    ),
    // TestRunningPodsJSONPathOutput
    (
        "range over pods without selecting the last one",
        r#"{range .items[?(.status.phase=="Running")]}{.metadata.name}{" is Running\n"}{end}"#,
        RUNNING,
        Refused("range"),
    ),
    // TestStep
    (
        "containers[0:]",
        "{.spec.containers[0:].name}",
        CONTAINERS6,
        Prints("fake0 fake1 fake2 fake3 fake4 fake5"),
    ),
    (
        "containers[0:6:]",
        "{.spec.containers[0:6:].name}",
        CONTAINERS6,
        Prints("fake0 fake1 fake2 fake3 fake4 fake5"),
    ),
    (
        "containers[0:6:1]",
        "{.spec.containers[0:6:1].name}",
        CONTAINERS6,
        Prints("fake0 fake1 fake2 fake3 fake4 fake5"),
    ),
    (
        "containers[0:6:0]",
        "{.spec.containers[0:6:0].name}",
        CONTAINERS6,
        Fails,
    ),
    (
        "containers[0:6:-1]",
        "{.spec.containers[0:6:-1].name}",
        CONTAINERS6,
        Fails,
    ),
    (
        "containers[1:4:2]",
        "{.spec.containers[1:4:2].name}",
        CONTAINERS6,
        Prints("fake1 fake3"),
    ),
    (
        "containers[1:4:3]",
        "{.spec.containers[1:4:3].name}",
        CONTAINERS6,
        Prints("fake1"),
    ),
    (
        "containers[1:4:4]",
        "{.spec.containers[1:4:4].name}",
        CONTAINERS6,
        Prints("fake1"),
    ),
    (
        "containers[0:6:2]",
        "{.spec.containers[0:6:2].name}",
        CONTAINERS6,
        Prints("fake0 fake2 fake4"),
    ),
    (
        "containers[0:6:3]",
        "{.spec.containers[0:6:3].name}",
        CONTAINERS6,
        Prints("fake0 fake3"),
    ),
    (
        "containers[0:6:5]",
        "{.spec.containers[0:6:5].name}",
        CONTAINERS6,
        Prints("fake0 fake5"),
    ),
    (
        "containers[0:6:6]",
        "{.spec.containers[0:6:6].name}",
        CONTAINERS6,
        Prints("fake0"),
    ),
    // parser_test.go: TestParser (node trees; where the nodes are a literal or a key, the
    // literal is checked by evaluating)
    ("plain", "hello jsonpath", "null", Refused("hello")),
    ("variable", "hello {.jsonpath}", "null", Refused("hello")),
    (
        "arrayfiled",
        "hello {['jsonpath']}",
        "null",
        Refused("hello"),
    ),
    ("array", "{[1:3]}", "null", Parses),
    ("allarray", "{.book[*].author}", "null", Parses),
    ("wildcard", "{.bicycle.*}", "null", Parses),
    ("filter", "{[?(@.price<3)]}", "null", Parses),
    ("recursive", "{..}", "null", Parses),
    ("recurField", "{..price}", "null", Parses),
    (
        "arraydict",
        "{['book.price']}",
        r#"{"book": {"price": 3}}"#,
        Prints("3"),
    ),
    (
        "union",
        "{['bicycle.price', 3, 'book.price']}",
        "null",
        Parses,
    ),
    (
        "range",
        "{range .items}{.name},{end}",
        "null",
        Refused("range"),
    ),
    ("malformat input", r"{\\\}", "null", Fails),
    (
        "paired parentheses in quotes",
        r#"{[?(@.status.nodeInfo.osImage == "()")]}"#,
        OS_IMAGES,
        Values(r#"{"status":{"nodeInfo":{"osImage":"()"}}}"#),
    ),
    (
        "paired parentheses in double quotes and with double quotes escape",
        r#"{[?(@.status.nodeInfo.osImage == "(\"\")")]}"#,
        OS_IMAGES,
        Values(r#"{"status":{"nodeInfo":{"osImage":"(\"\")"}}}"#),
    ),
    (
        "unregular parentheses in double quotes",
        r#"{[?(@.test == "())(")]}"#,
        OS_IMAGES,
        Values(r#"{"test":"())("}"#),
    ),
    (
        "plain text in single quotes",
        r#"{[?(@.status.nodeInfo.osImage == 'Linux')]}"#,
        OS_IMAGES,
        Values(r#"{"status":{"nodeInfo":{"osImage":"Linux"}}}"#),
    ),
    (
        "test filter suffix",
        r#"{[?(@.status.nodeInfo.osImage == "{[()]}")]}"#,
        OS_IMAGES,
        Values(r#"{"status":{"nodeInfo":{"osImage":"{[()]}"}}}"#),
    ),
    (
        "double inside single",
        r#"{[?(@.status.nodeInfo.osImage == "''")]}"#,
        OS_IMAGES,
        Values(r#"{"status":{"nodeInfo":{"osImage":"''"}}}"#),
    ),
    (
        "single inside double",
        r#"{[?(@.status.nodeInfo.osImage == '""')]}"#,
        OS_IMAGES,
        Values(r#"{"status":{"nodeInfo":{"osImage":"\"\""}}}"#),
    ),
    (
        "single containing escaped single",
        r#"{[?(@.status.nodeInfo.osImage == '\\\'')]}"#,
        OS_IMAGES,
        Values(r#"{"status":{"nodeInfo":{"osImage":"\\'"}}}"#),
    ),
    (
        "negative index slice, equals a[len-5] to a[len-1]",
        "{[-5:]}",
        "null",
        Parses,
    ),
    (
        "negative index slice, equals a[len-1]",
        "{[-1]}",
        "null",
        Parses,
    ),
    (
        "negative index slice, equals a[1] to a[len-1]",
        "{[1:-1]}",
        "null",
        Parses,
    ),
    // parser_test.go: TestFailParser
    ("unclosed action", "{.hello", "null", Fails),
    ("unrecognized character", "{*}", "null", Fails),
    ("invalid number", "{+12.3.0}", "null", Fails),
    ("unterminated array", "{[1}", "null", Fails),
    ("unterminated filter", "{[?(.price]}", "null", Fails),
    (
        "invalid multiple recursive descent",
        "{........}",
        "null",
        Fails,
    ),
];

/// A float as Go's `%v` and `encoding/json` print it (no `.0` on whole numbers).
fn go_number(n: &Number) -> String {
    match (n.as_i64(), n.as_u64(), n.as_f64()) {
        (Some(i), _, _) => i.to_string(),
        (_, Some(u), _) => u.to_string(),
        (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.0}"),
        (_, _, Some(f)) => f.to_string(),
        _ => n.to_string(),
    }
}

/// A structure as Go's `encoding/json` prints it (map keys sorted, as this crate keeps them).
fn go_json(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(_) => value.to_string(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(go_json).collect::<Vec<_>>().join(",")
        ),
        Value::Object(members) => format!(
            "{{{}}}",
            members
                .iter()
                .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), go_json(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// One result as client-go's `PrintResults` prints it: strings bare, the rest as JSON.
fn go_print(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => go_json(other),
    }
}

fn sorted_words(text: &str) -> Vec<String> {
    let mut words: Vec<String> = text.split_whitespace().map(str::to_string).collect();
    words.sort();
    words
}

/// Checks one case; Err says how it disagrees with client-go.
fn check(template: &str, input: &str, expect: &Expect) -> Result<(), String> {
    let doc: Value = serde_json::from_str(input).map_err(|e| format!("bad input: {e}"))?;
    let parsed = JsonPath::parse(template);
    let path = match (parsed, expect) {
        (Err(e), Refused(hint)) if e.contains(hint) => return Ok(()),
        (Err(e), Refused(hint)) => return Err(format!("refused, but {e:?} lacks {hint:?}")),
        (Ok(_), Refused(_)) => return Err("accepted; it should be refused".into()),
        (Err(_), Fails) => return Ok(()),
        (Err(e), _) => return Err(format!("parse error {e:?}")),
        (Ok(_), Parses) => return Ok(()),
        (Ok(path), _) => path,
    };
    let found = path.select(&doc);
    let values: Vec<Value> = match (found, expect) {
        (Err(_), Fails) => return Ok(()),
        (Ok(v), Fails) => return Err(format!("gave {v:?}; client-go fails")),
        (Err(e), _) => return Err(format!("error {e:?}")),
        (Ok(v), _) => v.into_iter().map(|v| v.into_owned()).collect(),
    };
    let printed = values.iter().map(go_print).collect::<Vec<_>>().join(" ");
    let agrees = match expect {
        Prints(want) => printed == *want,
        Sorted(want) => sorted_words(&printed) == sorted_words(want),
        Values(want) => {
            let want: Result<Vec<Value>, _> = serde_json::Deserializer::from_str(want)
                .into_iter::<Value>()
                .collect();
            want.map_err(|e| format!("bad expectation: {e}"))? == values
        }
        Fails | Parses | Refused(_) => false,
    };
    if agrees {
        Ok(())
    } else {
        Err(format!("printed {printed:?}"))
    }
}

#[test]
fn client_go_test_tables_agree() {
    let failures: Vec<String> = CASES
        .iter()
        .filter_map(|(name, template, input, expect)| {
            check(template, input, expect)
                .err()
                .map(|why| format!("{name} {template:?}: {why}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases disagree with client-go:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

#[test]
fn the_checker_notices_a_disagreement() {
    // The table test would pass vacuously if `check` accepted anything.
    assert!(check("{ .integers[0] }", TYPES, &Prints("2")).is_err());
    assert!(check("{ .integers[0] }", TYPES, &Fails).is_err());
    assert!(check("{ .integers[0] }", TYPES, &Refused("x")).is_err());
    assert!(check("{range .a}{end}", "null", &Prints("")).is_err());
    assert!(check("{ .structs[0] }", TYPES, &Values(r#"{"name":"two"}"#)).is_err());
}
