//! Upstream's command-line vocabulary: Go-style durations, `--feature-gates`, the workload
//! source driver. The klusterlet operator renders these flags; they must mean here what they mean
//! for the upstream work agent.

use std::collections::BTreeMap;
use std::time::Duration;

/// The default workload source driver: ManifestWorks read from a Kubernetes hub.
pub const KUBE_DRIVER: &str = "kube";

/// Drivers upstream names that this agent does not have.
const UNSUPPORTED_DRIVERS: [&str; 1] = ["kafka"];

/// Where the agent reads its works from (`--workload-source-driver`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    /// ManifestWorks on a Kubernetes hub.
    Kube,
    /// CloudEvents over an MQTT broker (Maestro).
    Mqtt,
    /// CloudEvents over gRPC (OCM's gRPC server, Maestro's gRPC broker).
    Grpc,
    /// CloudEvents over Google Pub/Sub (Maestro on GCP).
    PubSub,
}

/// Feature gates of upstream's work agent (open-cluster-management.io/api, `feature` package,
/// `DefaultSpokeWorkFeatureGates`) with their defaults, plus the generic `AllAlpha`/`AllBeta`.
/// Accepted so that a Klusterlet's `workConfiguration.featureGates` does not stop the agent; their
/// behaviour is this agent's own (see docs/operations.md).
const KNOWN_GATES: [(&str, bool); 4] = [
    ("ExecutorValidatingCaches", false),
    ("RawFeedbackJsonString", false),
    ("AllAlpha", false),
    ("AllBeta", false),
];

/// Parses `--workload-source-driver`.
pub fn parse_driver(driver: &str) -> Result<Driver, String> {
    match driver {
        KUBE_DRIVER => return Ok(Driver::Kube),
        "mqtt" => return Ok(Driver::Mqtt),
        "grpc" => return Ok(Driver::Grpc),
        "pubsub" => return Ok(Driver::PubSub),
        _ => {}
    }
    let why = if UNSUPPORTED_DRIVERS.contains(&driver) {
        "not supported by this agent"
    } else {
        "unknown driver"
    };
    Err(format!(
        "--workload-source-driver={driver}: {why}; the supported drivers are \"kube\", \"mqtt\", \"grpc\" and \"pubsub\""
    ))
}

/// Parses every `--feature-gates` value (each `Name=bool[,Name=bool...]`, as upstream's
/// `mapStringBool`) into the effective gate values, later settings winning. An unknown gate or a
/// value that is not a boolean is an error worded as upstream's.
pub fn parse_feature_gates(values: &[String]) -> Result<BTreeMap<&'static str, bool>, String> {
    let mut gates: BTreeMap<&'static str, bool> = KNOWN_GATES.into_iter().collect();
    for value in values {
        for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((name, raw)) = pair.split_once('=') else {
                return Err(format!(
                    "--feature-gates: missing bool value for {pair} (expected Name=true|false)"
                ));
            };
            let name = name.trim();
            let Some((known, _)) = KNOWN_GATES.iter().find(|(k, _)| *k == name) else {
                let names: Vec<&str> = KNOWN_GATES.iter().map(|(k, _)| *k).collect();
                return Err(format!(
                    "--feature-gates: unrecognized feature gate: {name} (known: {})",
                    names.join(", ")
                ));
            };
            let enabled = parse_go_bool(raw.trim()).ok_or_else(|| {
                format!("--feature-gates: invalid value of {name}={raw}, expected a boolean")
            })?;
            gates.insert(known, enabled);
        }
    }
    Ok(gates)
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// Parses a duration as Go's `time.ParseDuration` writes and reads them (`60s`, `1h30m`,
/// `876000h0m0s`, `1.5h`, `250ms`), plus a bare number of seconds. Zero is allowed (`0`, `0s`);
/// negative durations are not.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    let bad = || format!("{s:?} is not a duration (e.g. 30s, 5m, 1h30m)");
    if text.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut rest = text;
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if number_len == 0 {
            return Err(bad());
        }
        let number: f64 = rest[..number_len].parse().map_err(|_| bad())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total += number * seconds_per_unit;
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

/// Like [`parse_go_duration`], but zero is refused (periods and intervals).
pub fn parse_positive_go_duration(s: &str) -> Result<Duration, String> {
    let d = parse_go_duration(s)?;
    if d.is_zero() {
        return Err("the duration must be greater than zero".into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_as_go_does() {
        let secs = Duration::from_secs;
        assert_eq!(parse_go_duration("60s"), Ok(secs(60)));
        assert_eq!(parse_go_duration("1h0m0s"), Ok(secs(3600)));
        assert_eq!(parse_go_duration("1h30m"), Ok(secs(5400)));
        assert_eq!(parse_go_duration("1.5h"), Ok(secs(5400)));
        assert_eq!(parse_go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("90"), Ok(secs(90)));
        assert_eq!(parse_go_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(
            parse_go_duration("876000h"),
            Ok(secs(876_000 * 3600)),
            "100 years, which disables eviction"
        );
        for bad in ["", "5x", "h", "-1s", "1h-5m", "s1"] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_positive_go_duration("0s").is_err());
    }

    #[test]
    fn feature_gates_accept_known_names_and_refuse_unknown_ones() {
        let gates = parse_feature_gates(&[
            "ExecutorValidatingCaches=true".into(),
            "RawFeedbackJsonString=true,ExecutorValidatingCaches=false".into(),
        ])
        .expect("known gates");
        assert!(!gates["ExecutorValidatingCaches"], "the later setting wins");
        assert!(gates["RawFeedbackJsonString"]);
        assert!(!gates["AllAlpha"], "defaults stay");

        let err = parse_feature_gates(&["NoSuchGate=true".into()]).expect_err("unknown gate");
        assert!(
            err.contains("unrecognized feature gate: NoSuchGate"),
            "{err}"
        );
        let err = parse_feature_gates(&["AllBeta=maybe".into()]).expect_err("bad value");
        assert!(err.contains("invalid value of AllBeta=maybe"), "{err}");
        assert!(parse_feature_gates(&["AllBeta".into()]).is_err());
        assert!(parse_feature_gates(&[]).is_ok());
    }

    #[test]
    fn the_kube_mqtt_grpc_and_pubsub_drivers_are_supported() {
        assert_eq!(parse_driver("kube"), Ok(Driver::Kube));
        assert_eq!(parse_driver("mqtt"), Ok(Driver::Mqtt));
        assert_eq!(parse_driver("grpc"), Ok(Driver::Grpc));
        assert_eq!(parse_driver("pubsub"), Ok(Driver::PubSub));
        let err = parse_driver("kafka").expect_err("kafka");
        assert!(
            err.contains("not supported")
                && err.contains("\"kube\", \"mqtt\", \"grpc\" and \"pubsub\""),
            "{err}"
        );
        assert!(!err.contains('\n'));
        let err = parse_driver("carrier-pigeon").expect_err("unknown");
        assert!(err.contains("unknown driver"), "{err}");
    }
}
