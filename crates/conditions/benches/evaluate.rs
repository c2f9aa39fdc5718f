//! Per-evaluation cost of condition rules on realistic objects (API-server JSON with
//! managedFields): with the object already converted for its resourceVersion (`custom_cached`),
//! with the object cache off (`custom_new_version`: JSON-to-CEL conversion of what the rule
//! reads included), by thread CPU time (`cpu_time`, which also has a new resourceVersion every
//! call through the cache), and compiling every time against cached.
//!
//! Run: `cargo bench -p conditions -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use conditions::{Evaluator, Limits};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use work_api::ConditionRule;

fn fixture(name: &str) -> Value {
    let path = format!("{}/benches/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn rules(value: Value) -> Vec<ConditionRule> {
    serde_json::from_value(value).unwrap_or_else(|e| panic!("bad bench rules: {e}"))
}

/// Five custom rules users write, with the object each one runs on.
fn custom_rules() -> Vec<(&'static str, &'static str, Vec<ConditionRule>)> {
    vec![
        (
            "deployment_available_condition",
            "deployment.json",
            rules(
                json!([{"condition": "Ready", "type": "CEL", "celExpressions": [
                "object.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')"]}]),
            ),
        ),
        (
            "deployment_replicas_and_message",
            "deployment.json",
            rules(
                json!([{"condition": "Rolled", "type": "CEL", "celExpressions": [
                "object.status.updatedReplicas == object.spec.replicas",
                "object.status.availableReplicas == object.spec.replicas"],
                "messageExpression": "result ? 'all ' + string(object.spec.replicas) + ' replicas updated' : 'rolling out'"}]),
            ),
        ),
        (
            "job_upstream_has_conditions",
            "job.json",
            rules(
                json!([{"condition": "Complete", "type": "CEL", "celExpressions": [
                "hasConditions(object.status) ? object.status.conditions.filter(c, c.type == 'Complete' || c.type == 'Failed').exists(c, c.status == 'True') : false"]}]),
            ),
        ),
        (
            "deployment_map_result",
            "deployment.json",
            rules(
                json!([{"condition": "ExpectedCount", "type": "CEL", "celExpressions": [
                "object.status.readyReplicas >= object.spec.replicas ? {'status': true, 'reason': 'CountReached', 'message': 'Count matches expected'} : {'status': false, 'reason': 'CountNotReached', 'message': 'Only ' + string(object.status.readyReplicas)}"]}]),
            ),
        ),
        (
            "deployment_quantity_and_regex",
            "deployment.json",
            rules(
                json!([{"condition": "Sized", "type": "CEL", "celExpressions": [
                "object.spec.template.spec.containers.all(c, quantity(c.resources.limits.memory).isLessThan(quantity('1Gi')) && c.image.find(':[0-9.]+$') != '')"]}]),
            ),
        ),
    ]
}

fn well_known(c: &mut Criterion) {
    let ev = Evaluator::new(Limits::default());
    let complete = rules(json!([{"type": "WellKnownCompletions"}]));
    let mut group = c.benchmark_group("well_known");
    for (name, file) in [("job_complete", "job.json"), ("pod_complete", "pod.json")] {
        let object = fixture(file);
        group.bench_function(name, |b| {
            b.iter(|| ev.evaluate_manifest(black_box(&complete), black_box(&object)))
        });
    }
    group.finish();
}

fn custom(c: &mut Criterion) {
    let ev = Evaluator::new(Limits::default());
    let mut group = c.benchmark_group("custom_cached");
    for (name, file, rules) in custom_rules() {
        let object = fixture(file);
        let out = ev.evaluate_manifest(&rules, &object);
        assert!(
            out.iter()
                .all(|c| c.reason.starts_with("ConditionRule") && !c.reason.ends_with("Error")),
            "{name}: {out:?}"
        );
        group.bench_function(name, |b| {
            b.iter(|| ev.evaluate_manifest(black_box(&rules), black_box(&object)))
        });
    }
    group.finish();
}

fn custom_new_version(c: &mut Criterion) {
    // No object cache: every call converts the object, as for a resourceVersion not seen yet.
    let ev = Evaluator::new(Limits {
        object_cache_capacity: 0,
        ..Limits::default()
    });
    let mut group = c.benchmark_group("custom_new_version");
    for (name, file, rules) in custom_rules() {
        let object = fixture(file);
        group.bench_function(name, |b| {
            b.iter(|| ev.evaluate_manifest(black_box(&rules), black_box(&object)))
        });
    }
    group.finish();
}

/// CPU time of the calling thread: unlike the wall clock, barely moved by other processes
/// competing for the cores.
fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

fn custom_cpu_time(c: &mut Criterion) {
    // The custom rules again, timed by thread CPU time (reported as time): for busy machines.
    // `cached`: the same object version every call (the object cache hits); `new_version`: a
    // new resourceVersion every call with the default cache (what the agent pays for an object
    // version it has not evaluated yet); `no_cache`: the cache off.
    let cached = Evaluator::new(Limits::default());
    let fresh = Evaluator::new(Limits::default());
    let uncached = Evaluator::new(Limits {
        object_cache_capacity: 0,
        ..Limits::default()
    });
    let mut group = c.benchmark_group("cpu_time");
    for (name, file, rules) in custom_rules() {
        let object = fixture(file);
        for (kind, ev, new_versions) in [
            ("cached", &cached, false),
            ("new_version", &fresh, true),
            ("no_cache", &uncached, false),
        ] {
            let mut object = object.clone();
            let mut version = 0u64;
            group.bench_function(format!("{kind}/{name}"), |b| {
                b.iter_custom(|iters| {
                    let start = thread_cpu_time();
                    for _ in 0..iters {
                        if new_versions {
                            version += 1;
                            object["metadata"]["resourceVersion"] =
                                Value::from(version.to_string());
                        }
                        black_box(ev.evaluate_manifest(black_box(&rules), black_box(&object)));
                    }
                    thread_cpu_time().saturating_sub(start)
                })
            });
        }
    }
    group.finish();
}

fn compile_every_time(c: &mut Criterion) {
    // A one-entry cache and two alternating rules: every evaluation misses and compiles.
    let uncached = Evaluator::new(Limits {
        cache_capacity: 1,
        ..Limits::default()
    });
    let cached = Evaluator::new(Limits::default());
    let object = fixture("deployment.json");
    let all = custom_rules();
    let (a, b) = (&all[0].2, &all[2].2);
    let mut group = c.benchmark_group("compile");
    group.bench_function("every_time_two_rules", |bench| {
        bench.iter(|| {
            uncached.evaluate_manifest(black_box(a), black_box(&object));
            uncached.evaluate_manifest(black_box(b), black_box(&object));
        })
    });
    group.bench_function("cached_two_rules", |bench| {
        bench.iter(|| {
            cached.evaluate_manifest(black_box(a), black_box(&object));
            cached.evaluate_manifest(black_box(b), black_box(&object));
        })
    });
    group.finish();
}

fn conversion(c: &mut Criterion) {
    // The share of JSON-to-CEL conversion: a rule that only reads one field, on a new version.
    let ev = Evaluator::new(Limits {
        object_cache_capacity: 0,
        ..Limits::default()
    });
    let trivial = rules(
        json!([{"condition": "X", "type": "CEL", "celExpressions": ["object.kind == 'Deployment'"]}]),
    );
    let object = fixture("deployment.json");
    c.bench_function("trivial_rule_on_deployment", |b| {
        b.iter(|| ev.evaluate_manifest(black_box(&trivial), black_box(&object)))
    });
}

criterion_group!(
    benches,
    well_known,
    custom,
    custom_new_version,
    custom_cpu_time,
    compile_every_time,
    conversion
);
criterion_main!(benches);
