//! Request counters read from Prometheus text: the API server's `apiserver_request_total` and the
//! agent's own `work_agent_api_requests_total`. Pure.

use std::collections::BTreeMap;

use serde::Serialize;

/// The API server's counter of served requests (labels `verb`, `group`, `resource`, ...).
pub const APISERVER_REQUESTS: &str = "apiserver_request_total";
/// The agent's client-side counter of the requests it sent (labels `api`, `verb`).
pub const AGENT_REQUESTS: &str = "work_agent_api_requests_total";

/// One sample of the exposition format.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name (with its `_total` suffix, as exposed).
    pub name: String,
    /// Label pairs.
    pub labels: BTreeMap<String, String>,
    /// Value.
    pub value: f64,
}

/// Parses the Prometheus text format (comments and blank lines skipped); the error names the
/// line number and what was wrong.
pub fn parse(text: &str) -> Result<Vec<Sample>, String> {
    let mut samples = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        samples.push(parse_line(line).map_err(|e| format!("line {}: {e}: {line}", n + 1))?);
    }
    Ok(samples)
}

fn parse_line(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("no value")?;
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        let (parsed, tail) = parse_labels(after_brace)?;
        labels = parsed;
        rest = tail;
    }
    let value = rest
        .split_whitespace()
        .next()
        .ok_or("no value")?
        .parse::<f64>()
        .map_err(|e| format!("bad value: {e}"))?;
    Ok(Sample {
        name,
        labels,
        value,
    })
}

/// Parses `k="v",...}` and returns the labels and what follows the closing brace.
fn parse_labels(mut s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    loop {
        s = s.trim_start_matches([',', ' ']);
        if let Some(tail) = s.strip_prefix('}') {
            return Ok((labels, tail));
        }
        let eq = s.find('=').ok_or("label without '='")?;
        let key = s[..eq].trim().to_string();
        let quoted = s[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err("unterminated escape".into()),
                },
                Some((_, c)) => value.push(c),
                None => return Err("unterminated label value".into()),
            }
        };
        labels.insert(key, value);
        s = &quoted[end + 1..];
    }
}

/// Request counts keyed by (verb, resource). The resource reads `resource[.group][/subresource]`;
/// requests to non-resource URLs (`/metrics`, discovery) have the resource `-`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Counts(pub BTreeMap<String, BTreeMap<String, u64>>);

/// Verbs that change state on the server, as `apiserver_request_total` names them.
pub const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

/// The API server's name of a client-side verb (`create` is `POST`, `update` is `PUT`), so
/// that the agent's counter and the server's line up.
pub fn server_verb(verb: &str) -> String {
    match verb.to_ascii_lowercase().as_str() {
        "create" => "POST".into(),
        "update" | "replace" => "PUT".into(),
        "delete_collection" | "deletecollection" => "DELETECOLLECTION".into(),
        other => other.to_ascii_uppercase(),
    }
}

impl Counts {
    /// Adds `n` requests of `verb` on `resource`.
    pub fn add(&mut self, verb: &str, resource: &str, n: u64) {
        *self
            .0
            .entry(verb.to_ascii_uppercase())
            .or_default()
            .entry(resource.to_string())
            .or_default() += n;
    }

    /// `apiserver_request_total` summed over codes, scopes and components.
    pub fn from_apiserver(samples: &[Sample]) -> Self {
        let mut counts = Self::default();
        for s in samples.iter().filter(|s| s.name == APISERVER_REQUESTS) {
            let label = |k: &str| s.labels.get(k).map(String::as_str).unwrap_or("");
            counts.add(
                label("verb"),
                &resource_key(label("resource"), label("group"), label("subresource")),
                s.value.max(0.0) as u64,
            );
        }
        counts
    }

    /// The agent's `work_agent_api_requests_total` for one `api` (`hub` or `spoke`); `None`
    /// when the agent does not expose that counter at all.
    pub fn from_agent(samples: &[Sample], api: &str) -> Option<Self> {
        let mut found = false;
        let mut counts = Self::default();
        for s in samples.iter().filter(|s| s.name == AGENT_REQUESTS) {
            found = true;
            if s.labels.get("api").map(String::as_str) == Some(api) {
                let verb = s.labels.get("verb").map(String::as_str).unwrap_or("");
                counts.add(
                    &server_verb(verb),
                    "(agent counter)",
                    s.value.max(0.0) as u64,
                );
            }
        }
        found.then_some(counts)
    }

    /// What was counted since `before` (counters only grow; a restart reads as zero).
    pub fn since(&self, before: &Counts) -> Counts {
        let mut out = Counts::default();
        for (verb, resources) in &self.0 {
            for (resource, n) in resources {
                let old = before.get(verb, resource);
                if *n > old {
                    out.add(verb, resource, n - old);
                }
            }
        }
        out
    }

    /// These counts less `other` (floored at zero): removes the harness's own requests.
    pub fn minus(&self, other: &Counts) -> Counts {
        self.since(other)
    }

    /// The count for one verb and resource.
    pub fn get(&self, verb: &str, resource: &str) -> u64 {
        self.0
            .get(verb)
            .and_then(|r| r.get(resource))
            .copied()
            .unwrap_or(0)
    }

    /// Only the resources `keep` accepts.
    pub fn filter(&self, keep: impl Fn(&str) -> bool) -> Counts {
        let mut out = Counts::default();
        for (verb, resources) in &self.0 {
            for (resource, n) in resources.iter().filter(|(r, _)| keep(r)) {
                out.add(verb, resource, *n);
            }
        }
        out
    }

    /// Without long-running watches: they are counted when they end, not when they start, so
    /// they belong to no phase.
    pub fn without_watches(&self) -> Counts {
        let mut out = self.clone();
        out.0.remove("WATCH");
        out
    }

    /// Totals by verb.
    pub fn by_verb(&self) -> BTreeMap<String, u64> {
        self.0
            .iter()
            .map(|(verb, r)| (verb.clone(), r.values().sum()))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Sum over the verbs `pick` accepts.
    pub fn total(&self, pick: impl Fn(&str) -> bool) -> u64 {
        self.by_verb()
            .iter()
            .filter(|(v, _)| pick(v))
            .map(|(_, n)| n)
            .sum()
    }

    /// Every request except long-running watches (counted when they end, so not per phase).
    pub fn requests(&self) -> u64 {
        self.total(|v| v != "WATCH")
    }

    /// Writes of any kind.
    pub fn writes(&self) -> u64 {
        self.total(|v| WRITE_VERBS.contains(&v))
    }

    /// GETs of single objects.
    pub fn gets(&self) -> u64 {
        self.total(|v| v == "GET")
    }
}

fn resource_key(resource: &str, group: &str, subresource: &str) -> String {
    if resource.is_empty() {
        return "-".to_string();
    }
    let mut key = resource.to_string();
    if !group.is_empty() {
        key = format!("{key}.{group}");
    }
    if !subresource.is_empty() {
        key = format!("{key}/{subresource}");
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 7
apiserver_request_total{code="404",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="work.open-cluster-management.io",resource="manifestworks",scope="resource",subresource="status",verb="PATCH",version="v1"} 2
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 4
work_agent_api_requests_total{api="spoke",verb="create"} 5
work_agent_api_requests_total{api="hub",verb="patch"} 1
weird{a="x\"y\\z",} 1.5e3 1700000000
"#;

    #[test]
    fn parses_labels_escapes_and_timestamps() {
        let samples = parse(TEXT).expect("parses");
        assert_eq!(samples.len(), 7);
        let weird = samples.last().expect("last");
        assert_eq!(weird.labels["a"], "x\"y\\z");
        assert_eq!(weird.value, 1500.0);
        assert!(parse("x{a=1} 2").is_err());
        assert!(parse("x{a=\"1} 2").is_err());
        assert!(parse("x 2 3\ny").unwrap_err().contains("line 2"));
    }

    #[test]
    fn apiserver_counts_sum_codes_and_key_by_group_and_subresource() {
        let counts = Counts::from_apiserver(&parse(TEXT).expect("parses"));
        assert_eq!(counts.get("GET", "configmaps"), 10);
        assert_eq!(
            counts.get(
                "PATCH",
                "manifestworks.work.open-cluster-management.io/status"
            ),
            2
        );
        assert_eq!(counts.get("GET", "-"), 4);
        assert_eq!(counts.writes(), 2);
        assert_eq!(counts.gets(), 14);
    }

    #[test]
    fn agent_counter_is_optional_and_split_by_api() {
        let samples = parse(TEXT).expect("parses");
        let spoke = Counts::from_agent(&samples, "spoke").expect("present");
        assert_eq!(spoke.by_verb(), BTreeMap::from([("POST".to_string(), 5)]));
        assert_eq!(server_verb("update"), "PUT");
        assert_eq!(server_verb("get"), "GET");
        let without = parse("apiserver_request_total{verb=\"GET\"} 1").expect("parses");
        assert_eq!(Counts::from_agent(&without, "spoke"), None);
    }

    #[test]
    fn deltas_subtract_and_floor_at_zero() {
        let mut before = Counts::default();
        before.add("GET", "configmaps", 5);
        before.add("PATCH", "configmaps", 9);
        let mut after = before.clone();
        after.add("GET", "configmaps", 3);
        after.add("POST", "configmaps", 2);
        after.add("WATCH", "configmaps", 1);
        let delta = after.since(&before);
        assert_eq!(delta.get("GET", "configmaps"), 3);
        assert_eq!(delta.get("PATCH", "configmaps"), 0);
        assert_eq!(delta.requests(), 5);
        assert_eq!(delta.without_watches().get("WATCH", "configmaps"), 0);
        let mut harness = Counts::default();
        harness.add("POST", "configmaps", 7);
        assert_eq!(delta.minus(&harness).get("POST", "configmaps"), 0);
        let only = delta.filter(|r| r != "configmaps");
        assert_eq!(only.requests(), 0);
    }
}
