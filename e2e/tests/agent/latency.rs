//! Measures (prints, never asserts) how long a status change on the spoke takes to reach the
//! ManifestWork status on the hub, with the safety-net resync an hour away so only the watch
//! path can deliver it. Run: `cargo test -p e2e --test agent latency:: -- --nocapture`.

use std::time::{Duration, Instant};

use crate::agent_common::*;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const ROUNDS: usize = 10;

#[tokio::test]
async fn spoke_change_to_hub_status_latency() {
    let env = Env::start_with(
        test_support::TestCluster::hub().await,
        "latency",
        &["--status-sync-period", "1h"],
    )
    .await;
    let name = env.work_name("latency");
    env.create_work(
        &name,
        json!({
            "workload": {"manifests": [configmap(&env.ns, "l", json!({"k": "v"}))]},
            "manifestConfigs": [{
                "resourceIdentifier": {"resource": "configmaps", "name": "l", "namespace": env.ns},
                "updateStrategy": {"type": "ServerSideApply"},
                "conditionRules": [{"condition": "Flag", "type": "CEL",
                    "celExpressions": ["has(object.metadata.annotations) && object.metadata.annotations['flag'] == 'on'"]}]
            }]
        }),
    )
    .await;
    env.wait_work(&name, "Flag False", |w| manifest_is(w, 0, "Flag", "False"))
        .await;
    let works = env.works();
    let cms = env.configmaps();
    let mut samples = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let (value, want) = if round % 2 == 0 {
            ("on", "True")
        } else {
            ("off", "False")
        };
        let started = Instant::now();
        cms.patch(
            "l",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"flag": value}}})),
        )
        .await
        .expect("annotate");
        loop {
            let w = works.get(&name).await.expect("work");
            if manifest_is(&w, 0, "Flag", want) {
                break;
            }
            assert!(
                started.elapsed() < TIMEOUT,
                "round {round}: Flag never became {want} (agent log {})",
                env.agent.log_path().display()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        samples.push(started.elapsed());
    }
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "spoke change -> hub status over {ROUNDS} rounds: min {:.0} ms, median {:.0} ms, max {:.0} ms",
        ms(samples[0]),
        ms(samples[ROUNDS / 2]),
        ms(samples[ROUNDS - 1])
    );
}
