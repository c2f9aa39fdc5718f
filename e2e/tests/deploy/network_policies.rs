//! `deploy/network-policies/`, checked against what the agent connects to: each transport's
//! kustomization is rendered as users render it (`kubectl kustomize`), the NetworkPolicies that
//! select the agent's pods (their labels read from `deploy/base`) are evaluated as the API
//! defines them (policies add up; a rule without ports allows every port), and the ports they
//! open must be exactly those the agent dials for a config of that transport, read by the
//! agent's own config parsers: the hub's or broker's port, DNS, the spoke's API server; and the
//! only way in is the metrics port the Deployment configures. No cluster needed (deploy.rs checks
//! the same files against a real API server's validation).

use std::collections::{BTreeMap, BTreeSet};

use cloudevents::config::{GrpcConfig, MqttConfig, PubSubConfig};
use serde_json::Value;
use test_support::{kustomize, parse_yaml_documents};

/// A protocol and a port a policy opens, e.g. `("TCP", 8883)`.
type Opening = (String, u16);

/// What every transport needs besides its hub: DNS over UDP and TCP, and the spoke's API server
/// as the in-cluster config reaches it (the `kubernetes` Service on 443) and as network plugins
/// see it after the Service is translated (the API server's own port, 6443 on kubeadm, kind and
/// OpenShift).
fn always_needed() -> BTreeSet<Opening> {
    [("UDP", 53), ("TCP", 53), ("TCP", 443), ("TCP", 6443)]
        .into_iter()
        .map(|(p, n)| (p.to_string(), n))
        .collect()
}

/// The rendered manifests of `dir`.
fn render(dir: &str) -> Vec<Value> {
    let text = kustomize(dir).unwrap_or_else(|e| panic!("{e}"));
    parse_yaml_documents(&text).unwrap_or_else(|e| panic!("{dir}: {e}"))
}

/// The agent's Deployment as `deploy/base` renders it.
fn agent_deployment() -> Value {
    render("deploy/base")
        .into_iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "work-agent")
        .expect("deploy/base holds the work-agent Deployment")
}

/// The labels of the agent's pods.
fn pod_labels(deployment: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(deployment["spec"]["template"]["metadata"]["labels"].clone())
        .expect("pod template labels")
}

/// The port of the agent's metrics endpoint: its `WORK_AGENT_HTTP_ADDRESS`, which must also be
/// the container port the Service and the ServiceMonitor name (`http-metrics`).
fn metrics_port(deployment: &Value) -> u16 {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let address = container["env"]
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == "WORK_AGENT_HTTP_ADDRESS"))
        .and_then(|e| e["value"].as_str())
        .expect("the Deployment sets WORK_AGENT_HTTP_ADDRESS");
    let port: u16 = address
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("{address} has no port"));
    let named = container["ports"]
        .as_array()
        .and_then(|ports| ports.iter().find(|p| p["name"] == "http-metrics"))
        .and_then(|p| p["containerPort"].as_u64());
    assert_eq!(
        named,
        Some(u64::from(port)),
        "http-metrics is the HTTP address's port"
    );
    port
}

/// Whether `policy`'s pod selector selects pods labelled `labels`.
fn selects(policy: &Value, labels: &BTreeMap<String, String>) -> bool {
    let selector = &policy["spec"]["podSelector"];
    assert!(
        selector.get("matchExpressions").is_none(),
        "only matchLabels is evaluated here: {policy}"
    );
    selector["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
        })
        .unwrap_or(true)
}

/// The directions `policy` isolates: `policyTypes`, or as the API defaults it (Ingress, and
/// Egress when it has egress rules).
fn policy_types(policy: &Value) -> Vec<String> {
    match policy["spec"]["policyTypes"].as_array() {
        Some(types) => types
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        None => {
            let mut types = vec!["Ingress".to_string()];
            if policy["spec"].get("egress").is_some() {
                types.push("Egress".into());
            }
            types
        }
    }
}

/// What the policies that select `labels` allow in `direction` (`Ingress` or `Egress`): whether
/// the pods are isolated that way at all, and the union of the rules' openings. A rule that
/// allows every port, a range or a named port is an error: the check would not be exact.
fn allowed(
    policies: &[Value],
    labels: &BTreeMap<String, String>,
    direction: &str,
) -> (bool, BTreeSet<Opening>) {
    let key = direction.to_lowercase();
    let mut isolated = false;
    let mut open = BTreeSet::new();
    for policy in policies.iter().filter(|p| selects(p, labels)) {
        if !policy_types(policy).iter().any(|t| t == direction) {
            continue;
        }
        isolated = true;
        let name = &policy["metadata"]["name"];
        for rule in policy["spec"][&key].as_array().cloned().unwrap_or_default() {
            let ports = rule["ports"].as_array().cloned().unwrap_or_default();
            assert!(!ports.is_empty(), "{name}: a {key} rule opens every port");
            for port in ports {
                assert!(port.get("endPort").is_none(), "{name}: a port range");
                let number = port["port"]
                    .as_u64()
                    .and_then(|n| u16::try_from(n).ok())
                    .unwrap_or_else(|| panic!("{name}: not a port number: {port}"));
                let protocol = port["protocol"].as_str().unwrap_or("TCP").to_string();
                open.insert((protocol, number));
            }
        }
    }
    (isolated, open)
}

/// Checks the policies of `deploy/network-policies/<transport>` against the agent connecting to
/// its hub on `hub_port`.
fn check(transport: &str, hub_port: u16) {
    let dir = format!("deploy/network-policies/{transport}");
    let docs = render(&dir);
    let deployment = agent_deployment();
    let labels = pod_labels(&deployment);

    for doc in &docs {
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        assert_eq!(doc["kind"], "NetworkPolicy", "{dir}: {name}");
        assert!(name.starts_with("work-agent-"), "{dir}: {name}");
        assert!(
            selects(doc, &labels),
            "{dir}: {name} misses the agent's pods"
        );
        let meta = &doc["metadata"]["labels"];
        assert_eq!(meta["app.kubernetes.io/part-of"], "work-agent", "{name}");
        assert_eq!(
            meta["app.kubernetes.io/component"], "network-policy",
            "{name}"
        );
        let scope = meta["work-agent/transport"].as_str().unwrap_or_default();
        assert!(
            scope == "any" || scope == transport,
            "{dir}: {name} is labelled for transport {scope:?}"
        );
        assert_eq!(
            doc["metadata"]["namespace"], deployment["metadata"]["namespace"],
            "{name} is in the agent's namespace"
        );
    }
    let own: Vec<_> = docs
        .iter()
        .filter(|d| d["metadata"]["labels"]["work-agent/transport"] == transport)
        .collect();
    assert_eq!(own.len(), 1, "{dir}: one policy of the transport's own");

    let (isolated, egress) = allowed(&docs, &labels, "Egress");
    assert!(isolated, "{dir}: the agent's egress is not restricted");
    let mut needed = always_needed();
    needed.insert(("TCP".into(), hub_port));
    let missing: Vec<_> = needed.difference(&egress).collect();
    let extra: Vec<_> = egress.difference(&needed).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{dir}: egress must open exactly {needed:?}; missing {missing:?}, more than needed {extra:?}"
    );

    let (isolated, ingress) = allowed(&docs, &labels, "Ingress");
    assert!(isolated, "{dir}: the agent's ingress is not restricted");
    let metrics = BTreeSet::from([("TCP".to_string(), metrics_port(&deployment))]);
    assert_eq!(
        ingress, metrics,
        "{dir}: the only way in is the metrics port"
    );
    for policy in docs.iter().filter(|p| p["spec"].get("ingress").is_some()) {
        for rule in policy["spec"]["ingress"].as_array().into_iter().flatten() {
            let from = rule["from"].as_array().map(Vec::len).unwrap_or(0);
            assert!(
                from > 0,
                "{}: ingress from anywhere",
                policy["metadata"]["name"]
            );
        }
    }
}

/// The port of a `host:port` address, with gRPC's optional `dns:///` scheme.
fn port_of(address: &str) -> u16 {
    address
        .strip_prefix("dns:///")
        .unwrap_or(address)
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("{address} has no port"))
}

#[test]
fn kube_hub_policies_open_the_hub_kubeconfigs_server_port() {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: https://hub.example:6443\n",
    )
    .expect("kubeconfig");
    let server: http::Uri = kubeconfig.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.server.as_deref())
        .expect("server")
        .parse()
        .expect("server URL");
    check("kube", server.port_u16().unwrap_or(443));
}

#[test]
fn mqtt_policies_open_the_broker_host_port() {
    let config = MqttConfig::parse(
        "brokerHost: broker.example:8883\ntopics:\n  sourceEvents: sources/maestro/consumers/cluster1/sourceevents\n  agentEvents: sources/maestro/consumers/cluster1/agentevents\n",
    )
    .expect("MQTT config");
    check("mqtt", config.port);
}

#[test]
fn grpc_policies_open_the_url_port() {
    let config = GrpcConfig::parse("url: maestro-grpc-broker.maestro:8091\n").expect("gRPC config");
    check("grpc", port_of(&config.url));
}

#[test]
fn pubsub_policies_open_googles_endpoint() {
    let config = PubSubConfig::parse(
        "projectID: my-project\ntopics:\n  agentEvents: projects/my-project/topics/agentevents\n  agentBroadcast: projects/my-project/topics/agentbroadcast\nsubscriptions:\n  sourceEvents: projects/my-project/subscriptions/sourceevents-cluster1\n  sourceBroadcast: projects/my-project/subscriptions/sourcebroadcast-cluster1\n",
    )
    .expect("Pub/Sub config");
    // No `endpoint`: the agent dials Google's.
    assert!(config.endpoint.is_empty());
    check("pubsub", port_of(cloudevents::pubsub::DEFAULT_ENDPOINT));
}
