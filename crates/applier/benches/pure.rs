//! Cost of the pure decisions made on every reconcile: is an update a no-op, the ignoreFields
//! plan, and the apply order of a large work.

use std::hint::black_box;

use applier::{apply_order, is_noop_update, plan_ignore_fields};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use work_api::{IgnoreField, IgnoreFieldsCondition};

fn deployment(replicas: i64) -> Value {
    let containers: Vec<Value> = (0..4)
        .map(|i| {
            json!({"name": format!("c{i}"), "image": format!("registry.example/app:{i}"),
                   "ports": [{"containerPort": 8080 + i, "protocol": "TCP"}],
                   "env": (0..10).map(|e| json!({"name": format!("E{e}"), "value": "x"})).collect::<Vec<_>>(),
                   "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}})
        })
        .collect();
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "ns", "labels": {"app": "web"}},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}}}})
}

fn bench(c: &mut Criterion) {
    let desired = deployment(3);
    let mut live = deployment(3);
    live["metadata"]["resourceVersion"] = json!("123");
    live["metadata"]["uid"] = json!("u");
    live["status"] = json!({"replicas": 3, "readyReplicas": 3});
    c.bench_function("is_noop_update/deployment_4_containers", |b| {
        b.iter(|| is_noop_update(black_box(&desired), black_box(&live)))
    });

    let fields = vec![IgnoreField {
        condition: IgnoreFieldsCondition::OnSpokeChange,
        json_paths: vec![
            ".spec.replicas".into(),
            ".spec.template.spec.containers[*].image".into(),
        ],
        json_pointers: vec!["/metadata/labels/app".into()],
        jq_path_expressions: Vec::new(),
    }];
    c.bench_function("plan_ignore_fields/deployment_3_paths", |b| {
        b.iter(|| plan_ignore_fields(black_box(&desired), Some(&live), &fields))
    });

    let kinds = [
        "ConfigMap",
        "Deployment",
        "Namespace",
        "Service",
        "Widget",
        "CustomResourceDefinition",
    ];
    let manifests: Vec<Value> = (0..500)
        .map(|i| {
            let kind = kinds[i % kinds.len()];
            let api_version = match kind {
                "CustomResourceDefinition" => "apiextensions.k8s.io/v1",
                "Deployment" => "apps/v1",
                "Widget" => "example.com/v1",
                _ => "v1",
            };
            json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": format!("m{i}")}})
        })
        .collect();
    c.bench_function("apply_order/500_manifests", |b| {
        b.iter(|| apply_order(black_box(&manifests)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
