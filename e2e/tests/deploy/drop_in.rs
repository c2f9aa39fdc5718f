//! The agent as a drop-in for upstream's work agent: run as `/work agent` with exactly the
//! command line the OCM klusterlet operator renders (v1.3.1, Default mode), it applies works and
//! answers upstream's HTTPS probe; `--terminate-on-files` ends it with exit 0; upstream's
//! unsupported options are one-line errors.

use std::process::Command;

use crate::agent_common::{Env, TIMEOUT, configmap, data, https_status, klusterlet_args, work_is};
use serde_json::json;
use test_support::{AgentProcess, TestCluster, free_port, wait_for};

/// The name upstream's image gives the binary.
const UPSTREAM_BINARY_NAME: &str = "work";

#[tokio::test]
async fn upstream_command_line_applies_works_and_answers_the_https_probe() {
    let hub = TestCluster::hub().await;
    let spoke = TestCluster::spoke().await;
    let cluster = hub.namespace("dropin").await;
    let ns = spoke.namespace("dropin").await;
    // Unique: AppliedManifestWorks of another agent with the same ID would be this one's to evict.
    let agent_id = format!("agent-{cluster}");
    let probe_port = free_port();
    let metrics_port = free_port();
    let agent = AgentProcess::try_start_as(
        UPSTREAM_BINARY_NAME,
        klusterlet_args(
            &cluster,
            &hub.kubeconfig,
            Some(spoke.kubeconfig.as_path()),
            &agent_id,
        ),
        [
            ("POD_NAME", "klusterlet-work-agent-0".to_string()),
            // Parallel tests: ports of our own instead of :8443 and :8080.
            (
                "WORK_AGENT_HEALTH_ADDRESS",
                format!("127.0.0.1:{probe_port}"),
            ),
            (
                "WORK_AGENT_HTTP_ADDRESS",
                format!("127.0.0.1:{metrics_port}"),
            ),
        ],
    )
    .expect("start the agent as `work`");

    let mut env = Env::with_agent(hub, spoke, cluster, ns, agent, metrics_port);
    let name = env.work_name("dropin");
    env.create_work(
        &name,
        json!({"workload": {"manifests": [configmap(&env.ns, "cm", json!({"k": "v"}))]}}),
    )
    .await;
    env.wait_work(&name, "Applied and Available", |w| {
        work_is(w, "Applied", "True") && work_is(w, "Available", "True")
    })
    .await;
    let cm = env
        .wait_object(&env.configmaps(), "cm", "exists", |_| true)
        .await;
    assert_eq!(data(&cm)["k"], "v");
    let applied = env
        .applied_works()
        .get(&env.applied_name(&name))
        .await
        .expect("AppliedManifestWork");
    assert_eq!(applied.spec.agent_id, agent_id, "--agent-id is recorded");

    let status = wait_for("GET https://…/healthz answers 200", TIMEOUT, || async {
        match https_status(probe_port, "/healthz") {
            Ok(200) => Some(200),
            _ => None,
        }
    })
    .await;
    assert_eq!(status, 200);
    assert_eq!(https_status(probe_port, "/readyz"), Ok(200));
    assert!(env.agent.is_running(), "log: {}", env.agent.log());
    assert_eq!(
        env.agent.stop().and_then(|s| s.code()),
        Some(0),
        "log: {}",
        env.agent.log()
    );
}

#[tokio::test]
async fn a_change_of_a_terminate_on_files_file_exits_0() {
    let hub = TestCluster::hub().await;
    let spoke = TestCluster::spoke().await;
    let cluster = hub.namespace("terminate").await;
    // A copy of the hub kubeconfig that the test rewrites, as the registration agent does.
    let dir = test_support::run_dir().join("terminate-on-files");
    std::fs::create_dir_all(&dir).expect("dir");
    let hub_copy = dir.join(format!("{cluster}.kubeconfig"));
    std::fs::copy(&hub.kubeconfig, &hub_copy).expect("copy the hub kubeconfig");
    let probe_port = free_port();
    let mut agent = AgentProcess::try_start_as(
        UPSTREAM_BINARY_NAME,
        klusterlet_args(
            &cluster,
            &hub_copy,
            Some(spoke.kubeconfig.as_path()),
            &format!("agent-{cluster}"),
        ),
        [
            (
                "WORK_AGENT_HEALTH_ADDRESS",
                format!("127.0.0.1:{probe_port}"),
            ),
            (
                "WORK_AGENT_HTTP_ADDRESS",
                format!("127.0.0.1:{}", free_port()),
            ),
        ],
    )
    .expect("start the agent as `work`");
    // It had the chance to exit on its own: it is serving.
    wait_for("the agent serves its probe", TIMEOUT, || async {
        (https_status(probe_port, "/healthz") == Ok(200)).then_some(())
    })
    .await;
    assert!(agent.is_running(), "log: {}", agent.log());

    let mut content = std::fs::read_to_string(&hub_copy).expect("read");
    content.push_str("\n# rotated\n");
    std::fs::write(&hub_copy, content).expect("rewrite");
    let code = wait_for("the agent exits", TIMEOUT, || {
        let status = agent.exit_status();
        async move { status }
    })
    .await;
    assert_eq!(code.code(), Some(0), "log: {}", agent.log());
    assert!(
        agent.log().contains("terminate-on-files"),
        "the log names the reason: {}",
        agent.log()
    );
}

fn agent_bin() -> String {
    std::env::var(test_support::AGENT_BIN_ENV)
        .unwrap_or_else(|_| panic!("{} is not set", test_support::AGENT_BIN_ENV))
}

/// Runs the agent with `args` and expects a one-line error (exit 2) containing `expected`.
fn assert_one_line_error(args: &[&str], expected: &str) {
    let out = Command::new(agent_bin())
        .args(args)
        .output()
        .expect("run the agent");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains(expected), "{stderr}");
}

#[test]
fn unsupported_drivers_and_unknown_feature_gates_are_one_line_errors() {
    let base = [
        "agent",
        "--spoke-cluster-name=c1",
        "--workload-source-config=/nonexistent/hub.kubeconfig",
    ];
    let with = |extra: &'static str| {
        let mut v = base.to_vec();
        v.push(extra);
        v
    };
    assert_one_line_error(
        &with("--workload-source-driver=kafka"),
        "the supported drivers are \"kube\", \"mqtt\", \"grpc\" and \"pubsub\"",
    );
    assert_one_line_error(
        &with("--feature-gates=NoSuchGate=true"),
        "unrecognized feature gate: NoSuchGate",
    );
    assert_one_line_error(&with("--tls-min-version=VersionTLS10"), "VersionTLS13");
    // The deprecated alias of --spoke-cluster-name gets as far as the kubeconfig.
    assert_one_line_error(
        &[
            "agent",
            "--cluster-name=c1",
            "--workload-source-config=/nonexistent/hub.kubeconfig",
        ],
        "/nonexistent/hub.kubeconfig",
    );
}
