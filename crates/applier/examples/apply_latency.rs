//! Measures apply latency per strategy against a real API server (the numbers in the crate docs).
//!
//! `WORK_AGENT_SPOKE_KUBECONFIG=.run/spoke/admin.kubeconfig cargo run -p applier --example apply_latency [ROUNDS]`
//!
//! Creates a namespace `applier-latency-<pid>`, applies ConfigMaps with each strategy (create,
//! no-op re-apply, changed re-apply), prints p50/p95/max per step, and deletes the namespace.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use applier::{Applier, ApplyRequest, Resolver};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;
use work_api::{UpdateStrategy, UpdateStrategyType};

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let path = std::env::var("WORK_AGENT_SPOKE_KUBECONFIG")
        .context("set WORK_AGENT_SPOKE_KUBECONFIG to the spoke's admin kubeconfig")?;
    let rounds: usize = match std::env::args().nth(1) {
        Some(n) => n.parse().context("ROUNDS must be a positive integer")?,
        None => 50,
    };
    anyhow::ensure!(rounds > 0, "ROUNDS must be at least 1");
    let kubeconfig = Kubeconfig::read_from(&path).with_context(|| format!("reading {path}"))?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(config)?;
    let ns = format!("applier-latency-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await?;
    let applier = Applier::new(client.clone(), Resolver::new(client.clone()));
    let labels = BTreeMap::new();
    let result = run(&applier, &ns, rounds, &labels).await;
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    result
}

async fn run(
    applier: &Applier,
    ns: &str,
    rounds: usize,
    labels: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    println!("{rounds} rounds per step; latency of one Applier::apply call");
    println!(
        "{:<16} {:<10} {:>9} {:>9} {:>9}",
        "strategy", "step", "p50", "p95", "max"
    );
    for type_ in [
        UpdateStrategyType::Update,
        UpdateStrategyType::ServerSideApply,
        UpdateStrategyType::CreateOnly,
    ] {
        let strategy = UpdateStrategy {
            type_: type_.clone(),
            server_side_apply: None,
        };
        for step in ["create", "no-op", "change"] {
            let mut samples = Vec::with_capacity(rounds);
            for i in 0..rounds {
                let value = if step == "change" { "2" } else { "1" };
                let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("{}-{i}", type_.as_str().to_lowercase()), "namespace": ns},
                    "data": {"v": value}});
                let started = Instant::now();
                applier
                    .apply(ApplyRequest {
                        manifest: &manifest,
                        strategy: &strategy,
                        owner: None,
                        labels,
                        complete_check: None,
                        cached: None,
                        write_gate: None,
                    })
                    .await?;
                samples.push(started.elapsed());
            }
            samples.sort();
            let pick = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
            println!(
                "{:<16} {:<10} {:>9} {:>9} {:>9}",
                type_.as_str(),
                step,
                ms(pick(0.5)),
                ms(pick(0.95)),
                ms(pick(1.0))
            );
        }
    }
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.2}ms", d.as_secs_f64() * 1000.0)
}
