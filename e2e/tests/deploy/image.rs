//! The image as its users run it (`make image-smoke`, not part of `make test`): the OCI image
//! `make image` builds, loaded into podman and started with the command line of each consumer,
//! read-only root, non-root, every capability dropped, against the local control planes and a
//! private mosquitto:
//!
//! - the OCM klusterlet operator's `/work agent ...` (Default mode) applies a ManifestWork from
//!   the hub;
//! - Maestro's agent chart's `/usr/local/bin/maestro agent ...` applies a bundle from a source
//!   behind MQTT.
//!
//! Both answer `/healthz` on `:8443` (upstream's probe). The container shares the host's network
//! (the control planes listen on loopback), so the ports are the image's defaults, 8443 and 8080:
//! the tests take a lock and run one at a time. `e2e/scripts/image-smoke.sh` loads the image and
//! names it in `WORK_AGENT_IMAGE`; extra `podman run` options (what a sandbox needs) come in
//! `WORK_AGENT_PODMAN_ARGS`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::agent_common::{
    TIMEOUT, configmap, https_status, klusterlet_args, metric_value, work_is,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use test_support::mosquitto::Broker;
use test_support::mqtt_source::MqttSource;
use test_support::{TestCluster, unique_name, wait_for};
use work_api::ManifestWork;

/// The image's own ports (the containers run on the host's network).
const PROBE_PORT: u16 = 8443;
const HTTP_PORT: u16 = 8080;

/// One container at a time: they all listen on the same host ports.
static PORTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The image under test, as podman names it.
fn image() -> String {
    std::env::var("WORK_AGENT_IMAGE").unwrap_or_else(|_| {
        panic!("WORK_AGENT_IMAGE names the image: run e2e/scripts/image-smoke.sh")
    })
}

/// A running container, removed when dropped; its output goes to a file.
struct Container {
    name: String,
    log: PathBuf,
    client: std::process::Child,
}

/// A copy of `file` the container's user may read (a kubeconfig is the owner's only, as a
/// Secret's volume is not): secrets are mounted 0644 in a pod unless told otherwise.
fn readable_copy(file: &Path, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = test_support::run_dir().join("image");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let copy = dir.join(name);
    std::fs::copy(file, &copy).unwrap_or_else(|e| panic!("copy {}: {e}", file.display()));
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", copy.display()));
    copy
}

impl Container {
    /// `podman run` of the image with `mounts` (host file, container path, read-only),
    /// environment `env` and the command `command`, hardened as the deployments run it.
    fn run(
        prefix: &str,
        mounts: &[(&Path, &str)],
        env: &[(&str, &str)],
        command: &[String],
    ) -> Self {
        for port in [PROBE_PORT, HTTP_PORT] {
            if let Err(e) = std::net::TcpListener::bind(("0.0.0.0", port)) {
                panic!("port {port} is taken on this machine ({e}): the image listens there");
            }
        }
        let name = unique_name(prefix);
        let dir = test_support::run_dir().join("image");
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = out.try_clone().unwrap_or_else(|e| panic!("log: {e}"));
        let mut cmd = Command::new("podman");
        cmd.args([
            "run",
            "--rm",
            "--name",
            &name,
            "--network=host",
            "--read-only",
        ])
        .args(["--cap-drop=ALL", "--security-opt=no-new-privileges"]);
        if let Ok(extra) = std::env::var("WORK_AGENT_PODMAN_ARGS") {
            cmd.args(extra.split_whitespace());
        }
        for (host, path) in mounts {
            cmd.arg(format!("--volume={}:{path}:ro", host.display()));
        }
        for (k, v) in env {
            cmd.arg(format!("--env={k}={v}"));
        }
        cmd.arg(image()).args(command);
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let client = cmd.spawn().unwrap_or_else(|e| panic!("podman run: {e}"));
        Self { name, log, client }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The `Uid:` line of the container's process (real, effective, saved, filesystem), read
    /// from the host's /proc: the image has no shell to ask.
    fn uids(&self) -> String {
        let pid = Command::new("podman")
            .args(["inspect", "--format", "{{.State.Pid}}", &self.name])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .unwrap_or_default()
            .to_string()
    }

    /// Waits for upstream's probe on :8443 to answer 200.
    async fn wait_healthy(&self) {
        wait_for(
            "GET https://127.0.0.1:8443/healthz answers 200",
            TIMEOUT,
            || async {
                match https_status(PROBE_PORT, "/healthz") {
                    Ok(200) => Some(()),
                    _ => None,
                }
            },
        )
        .await;
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "--force", "--time=10", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        // The container is gone, so its `podman run` ends; reap it.
        let _ = self.client.wait();
    }
}

/// The work's conditions as the hub shows them.
async fn wait_work_applied(works: &Api<ManifestWork>, name: &str, container: &Container) {
    let result = tokio::time::timeout(TIMEOUT, async {
        loop {
            if let Ok(work) = works.get(name).await
                && work_is(&work, "Applied", "True")
                && work_is(&work, "Available", "True")
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
    })
    .await;
    if result.is_err() {
        panic!(
            "work {name} not Applied and Available\ncontainer log:\n{}",
            container.log()
        );
    }
}

/// Waits for the ConfigMap `img` the tests' works carry, and checks its data.
async fn wait_configmap_img(spoke: &TestCluster, ns: &str, container: &Container) {
    let api: Api<ConfigMap> = Api::namespaced(spoke.client.clone(), ns);
    let result = tokio::time::timeout(TIMEOUT, async {
        loop {
            if let Ok(Some(cm)) = api.get_opt("img").await {
                return cm;
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
    })
    .await;
    let cm = result.unwrap_or_else(|_| {
        panic!(
            "ConfigMap img not applied\ncontainer log:\n{}",
            container.log()
        )
    });
    assert_eq!(
        cm.data.unwrap_or_default().get("k").map(String::as_str),
        Some("v")
    );
}

/// Asserts what every run of the image shows: a non-root process, the probes, the metrics.
async fn assert_serving(container: &Container) {
    container.wait_healthy().await;
    let ready = tokio::time::timeout(TIMEOUT, async {
        while https_status(PROBE_PORT, "/readyz") != Ok(200) {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
    })
    .await;
    if ready.is_err() {
        let body = std::process::Command::new("curl")
            .args(["-sk", "https://127.0.0.1:8443/readyz"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        panic!(
            "/readyz on :8443 not 200: {body}\ncontainer log:\n{}",
            container.log()
        );
    }
    let uids = container.uids();
    assert_eq!(
        uids.split_whitespace().collect::<Vec<_>>(),
        ["Uid:", "65532", "65532", "65532", "65532"],
        "the process runs as 65532"
    );
    let metrics = crate::agent_common::http_get(HTTP_PORT, "/metrics")
        .await
        .unwrap_or_else(|e| panic!("/metrics on :8080: {e}"));
    assert!(
        metric_value(
            &metrics,
            r#"workqueue_adds_total{name="ManifestWorkAgent"}"#
        ) >= 1.0,
        "{metrics}"
    );
}

#[tokio::test]
#[ignore = "needs the image in podman: make image-smoke"]
async fn the_klusterlet_runs_the_image_as_work_agent_and_it_applies_a_work() {
    let _ports = PORTS.lock().await;
    let hub = TestCluster::hub().await;
    let spoke = TestCluster::spoke().await;
    let cluster = hub.namespace("img-kl").await;
    let ns = spoke.namespace("img-kl").await;
    let hub_path = "/spoke/hub-kubeconfig/kubeconfig";
    let mut command = vec!["/work".to_string()];
    command.extend(klusterlet_args(
        &cluster,
        Path::new(hub_path),
        None,
        &format!("agent-{cluster}"),
    ));
    // The klusterlet's pod reaches its own cluster in-cluster; here the spoke's kubeconfig
    // stands in for the service account (KUBECONFIG, read by the same client setup).
    let hub_copy = readable_copy(&hub.kubeconfig, &format!("{cluster}-hub.kubeconfig"));
    let spoke_copy = readable_copy(&spoke.kubeconfig, &format!("{cluster}-spoke.kubeconfig"));
    let container = Container::run(
        "img-klusterlet",
        &[
            (hub_copy.as_path(), hub_path),
            (spoke_copy.as_path(), "/spoke/config/kubeconfig"),
        ],
        &[
            ("POD_NAME", "klusterlet-work-agent-0"),
            ("KUBECONFIG", "/spoke/config/kubeconfig"),
        ],
        &command,
    );
    let works: Api<ManifestWork> = Api::namespaced(hub.client.clone(), &cluster);
    let work: ManifestWork = serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {"name": "img", "namespace": cluster},
        "spec": {"workload": {"manifests": [configmap(&ns, "img", json!({"k": "v"}))]}}
    }))
    .unwrap_or_else(|e| panic!("work: {e}"));
    works
        .create(&PostParams::default(), &work)
        .await
        .unwrap_or_else(|e| panic!("create work: {e}"));
    wait_configmap_img(&spoke, &ns, &container).await;
    wait_work_applied(&works, "img", &container).await;
    assert_serving(&container).await;
}

#[tokio::test]
#[ignore = "needs the image in podman: make image-smoke"]
async fn maestros_chart_runs_the_image_as_maestro_and_it_applies_a_bundle() {
    let _ports = PORTS.lock().await;
    let broker = Broker::start("img-maestro").unwrap_or_else(|e| panic!("mosquitto: {e}"));
    let source = MqttSource::connect(&broker.address(), "maestro")
        .await
        .unwrap_or_else(|e| panic!("test source: {e}"));
    let spoke = TestCluster::spoke().await;
    let ns = spoke.namespace("img-maestro").await;
    let consumer = unique_name("img-maestro");
    // The Secret the chart mounts at /secrets/mqtt (`maestro-agent-mqtt`, key config.yaml).
    let config = broker
        .write_agent_config(&consumer, "config.yaml")
        .unwrap_or_else(|e| panic!("agent config: {e}"));
    // charts/maestro-agent/templates/deployment.yaml: command and env, as rendered.
    let command: Vec<String> = [
        "/usr/local/bin/maestro".to_string(),
        "agent".into(),
        format!("--consumer-name={consumer}"),
        "--workload-source-driver=mqtt".into(),
        "--workload-source-config=/secrets/mqtt/config.yaml".into(),
        format!("--cloudevents-client-id={consumer}-work-agent"),
        "-v=2".into(),
    ]
    .into();
    let spoke_copy = readable_copy(&spoke.kubeconfig, &format!("{consumer}-spoke.kubeconfig"));
    let container = Container::run(
        "img-maestro",
        &[
            (
                readable_copy(&config, &format!("{consumer}-mqtt.yaml")).as_path(),
                "/secrets/mqtt/config.yaml",
            ),
            (spoke_copy.as_path(), "/spoke/config/kubeconfig"),
        ],
        &[
            ("MAESTRO_ENV", "production"),
            ("CERT_CALLBACK_REFRESH_DURATION", "5m"),
            ("KUBECONFIG", "/spoke/config/kubeconfig"),
        ],
        &command,
    );
    let id = source
        .create(
            &consumer,
            json!({"manifests": [configmap(&ns, "img", json!({"k": "v"}))]}),
        )
        .unwrap_or_else(|e| panic!("create: {e}"));
    wait_configmap_img(&spoke, &ns, &container).await;
    if let Err(e) = source
        .wait_until(
            |s| {
                s.condition_status(&id, "Applied").as_deref() == Some("True")
                    && s.condition_status(&id, "Available").as_deref() == Some("True")
            },
            TIMEOUT,
        )
        .await
    {
        panic!(
            "bundle status at the source: {e}\ncontainer log:\n{}",
            container.log()
        );
    }
    assert_serving(&container).await;
}
