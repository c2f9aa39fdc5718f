//! Leader election with a `coordination.k8s.io/v1` Lease on the spoke, so that of several
//! replicas only one writes at a time.
//!
//! The scheme is client-go's: the leader renews the Lease every `retry_period`; a candidate takes
//! the Lease over once it has seen the Lease record unchanged for `lease_duration` (measured on its
//! own monotonic clock, so clock skew between nodes does not matter); a leader that has not renewed
//! for `renew_deadline` (< `lease_duration`) stops leading before anyone else may start. Every write
//! is an optimistic-locked update (`resourceVersion`), so two candidates never both win.
//!
//! Use: [`spawn`] returns a [`LeaderHandle`]; run the controllers only while
//! [`LeaderHandle::subscribe`] says `true`, and stop them as soon as it says `false` (the simplest
//! correct reaction is to exit the process and let the Deployment restart it). On shutdown, stop the
//! controllers first, then call [`LeaderHandle::shutdown`], which releases the Lease so a standby
//! takes over at once instead of after `lease_duration`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Timing and identity of one candidate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderConfig {
    /// Namespace of the Lease (the agent's own namespace on the spoke).
    pub namespace: String,
    /// Name of the Lease; every replica of one agent must use the same.
    pub lease_name: String,
    /// This replica's identity, unique among the replicas (e.g. the pod name).
    pub identity: String,
    /// How long a Lease record stays valid without renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps leading without a successful renewal.
    pub renew_deadline: Duration,
    /// Time between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// Kubernetes' usual timing: 15 s lease, 10 s renew deadline, 2 s retry period.
    pub fn new(
        namespace: impl Into<String>,
        lease_name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            lease_name: lease_name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Replaces the timing (lease duration, renew deadline, retry period), if given.
    pub fn with_timing(mut self, timing: Option<(Duration, Duration, Duration)>) -> Self {
        if let Some((lease, renew, retry)) = timing {
            self.lease_duration = lease;
            self.renew_deadline = renew;
            self.retry_period = retry;
        }
        self
    }

    /// Checks the timing invariants that make the scheme safe.
    pub fn validate(&self) -> Result<(), LeaderError> {
        let bad = |why: &str| Err(LeaderError::Config(why.to_owned()));
        if self.identity.is_empty() || self.lease_name.is_empty() || self.namespace.is_empty() {
            return bad("identity, lease name and namespace must not be empty");
        }
        if self.retry_period.is_zero() {
            return bad("retry period must be positive");
        }
        if self.renew_deadline <= self.retry_period {
            return bad("renew deadline must be longer than the retry period");
        }
        if self.lease_duration <= self.renew_deadline {
            return bad("lease duration must be longer than the renew deadline");
        }
        if self.lease_duration.as_secs() > i32::MAX as u64 {
            return bad("lease duration too long");
        }
        Ok(())
    }
}

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// Inconsistent timing or empty names.
    #[error("invalid leader election settings: {0}")]
    Config(String),
}

/// A unique identity for this process: the host (pod) name plus a per-process suffix, so a
/// restarted pod never mistakes the old process's Lease for its own.
pub fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "work-agent".to_owned());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{host}_{:x}{nanos:08x}", std::process::id())
}

// ---------------------------------------------------------------------------------------------
// Pure decision

/// The parts of a Lease the decision depends on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    /// Current holder; `None` or empty when free (released).
    pub holder: Option<String>,
    /// Validity the holder asked for, in seconds.
    pub lease_duration_seconds: Option<i32>,
    /// Last renewal, as written by the holder (informational: expiry uses our own clock).
    pub renew_time: Option<Timestamp>,
    /// How often the Lease changed hands.
    pub transitions: i32,
}

impl LeaseRecord {
    /// Reads the record out of a Lease object.
    pub fn of(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        Self {
            holder: spec.and_then(|s| s.holder_identity.clone()),
            lease_duration_seconds: spec.and_then(|s| s.lease_duration_seconds),
            renew_time: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
            transitions: spec.and_then(|s| s.lease_transitions).unwrap_or(0),
        }
    }

    fn held_by(&self, identity: &str) -> bool {
        self.holder.as_deref() == Some(identity)
    }

    fn is_free(&self) -> bool {
        self.holder.as_deref().is_none_or(str::is_empty)
    }
}

/// What a candidate should do after reading the Lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No Lease exists: create it, held by us.
    Create,
    /// We hold it: renew it.
    Renew,
    /// It is free or expired: take it over.
    TakeOver,
    /// Someone else holds a valid Lease; it expires (for us) after this long unless renewed.
    Wait(Duration),
}

/// Decides from the current record, our identity, and how long we have seen that exact record
/// unchanged. `default_duration` applies when the record does not say how long it is valid.
pub fn decide(
    record: Option<&LeaseRecord>,
    identity: &str,
    unchanged_for: Duration,
    default_duration: Duration,
) -> Decision {
    let Some(record) = record else {
        return Decision::Create;
    };
    if record.held_by(identity) {
        return Decision::Renew;
    }
    if record.is_free() {
        return Decision::TakeOver;
    }
    let valid_for = record
        .lease_duration_seconds
        .map(|s| Duration::from_secs(s.max(0).unsigned_abs().into()))
        .unwrap_or(default_duration);
    match valid_for.checked_sub(unchanged_for) {
        Some(left) if !left.is_zero() => Decision::Wait(left),
        _ => Decision::TakeOver,
    }
}

/// The record we write to hold the Lease at `now`, from the record we replace (if any).
fn held_spec(
    previous: Option<&LeaseSpec>,
    identity: &str,
    lease_duration: Duration,
    now: Timestamp,
) -> LeaseSpec {
    let prev_holder = previous.and_then(|s| s.holder_identity.as_deref());
    let renewing = prev_holder == Some(identity);
    let transitions = previous.and_then(|s| s.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(i32::try_from(lease_duration.as_secs()).unwrap_or(i32::MAX)),
        acquire_time: if renewing {
            previous.and_then(|s| s.acquire_time.clone())
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(match (renewing, prev_holder) {
            (true, _) | (false, None) => transitions,
            (false, Some(_)) => transitions.saturating_add(1),
        }),
        ..previous.cloned().unwrap_or_default()
    }
}

/// The record a leader writes when it lets go: no holder, and valid for 1 s only.
fn released_spec(previous: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        renew_time: Some(MicroTime(now)),
        acquire_time: Some(MicroTime(now)),
        ..previous.clone()
    }
}

// ---------------------------------------------------------------------------------------------
// The elector task

/// The running elector: the "am I leader" signal and a way to stop it.
pub struct LeaderHandle {
    rx: watch::Receiver<bool>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl LeaderHandle {
    /// A handle that always says "leader", for a single replica run without election.
    pub fn always_leader() -> Self {
        let (tx, rx) = watch::channel(true);
        // The receiver keeps the last value once the sender is gone.
        drop(tx);
        Self {
            rx,
            stop: None,
            task: None,
        }
    }

    /// A receiver of the "am I leader" signal (`true` while leading).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }

    /// Whether this replica leads right now.
    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// Stops the elector, releasing the Lease if held. Stop writing before calling this.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take()
            && let Err(e) = task.await
        {
            tracing::warn!(error = %e, "leader election task failed");
        }
    }
}

impl Drop for LeaderHandle {
    fn drop(&mut self) {
        // Without shutdown() the Lease is not released; it expires after lease_duration.
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Starts electing on the spoke. The signal starts `false`.
pub fn spawn(client: Client, config: LeaderConfig) -> Result<LeaderHandle, LeaderError> {
    config.validate()?;
    let (tx, rx) = watch::channel(false);
    let (stop, stopped) = oneshot::channel();
    let elector = Elector {
        api: Api::namespaced(client, &config.namespace),
        config,
        tx,
        observed: None,
        last_renewed: None,
    };
    let task = tokio::spawn(elector.run(stopped));
    Ok(LeaderHandle {
        rx,
        stop: Some(stop),
        task: Some(task),
    })
}

struct Elector {
    api: Api<Lease>,
    config: LeaderConfig,
    tx: watch::Sender<bool>,
    /// The last record seen and when (our clock) it was first seen.
    observed: Option<(LeaseRecord, Instant)>,
    /// When we last held the Lease after a successful write.
    last_renewed: Option<Instant>,
}

/// Result of one acquire-or-renew attempt.
enum Attempt {
    /// We hold the Lease now.
    Held,
    /// Someone else holds it.
    NotHeld,
}

impl Elector {
    async fn run(mut self, mut stopped: oneshot::Receiver<()>) {
        loop {
            let budget = self.attempt_budget();
            let result = tokio::time::timeout(budget, self.try_acquire_or_renew()).await;
            match result {
                Ok(Ok(Attempt::Held)) => {
                    self.last_renewed = Some(Instant::now());
                    self.set_leader(true);
                }
                Ok(Ok(Attempt::NotHeld)) => {
                    self.last_renewed = None;
                    self.set_leader(false);
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, lease = %self.config.lease_name, "leader election: acquire/renew failed");
                    self.step_down_if_past_deadline();
                }
                Err(_) => {
                    tracing::warn!(lease = %self.config.lease_name, "leader election: acquire/renew timed out");
                    self.step_down_if_past_deadline();
                }
            }
            tokio::select! {
                _ = &mut stopped => break,
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
        }
        if *self.tx.borrow() {
            self.set_leader(false);
            if let Err(e) = self.release().await {
                tracing::warn!(error = %e, "leader election: releasing the Lease failed; it expires on its own");
            }
        }
    }

    /// A leader may spend only until its renew deadline on an attempt; a candidate a full
    /// renew deadline.
    fn attempt_budget(&self) -> Duration {
        match self.last_renewed {
            Some(at) if *self.tx.borrow() => (at + self.config.renew_deadline)
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
            _ => self.config.renew_deadline,
        }
    }

    fn step_down_if_past_deadline(&mut self) {
        let past = self
            .last_renewed
            .is_none_or(|at| at.elapsed() >= self.config.renew_deadline);
        if past {
            self.set_leader(false);
        }
    }

    fn set_leader(&self, leading: bool) {
        let changed = self
            .tx
            .send_if_modified(|v| std::mem::replace(v, leading) != leading);
        if changed {
            tracing::info!(identity = %self.config.identity, lease = %self.config.lease_name, leading, "leadership changed");
        }
    }

    /// How long the current record has been seen unchanged, updating the observation.
    fn observe(&mut self, record: Option<&LeaseRecord>) -> Duration {
        let now = Instant::now();
        match (record, &self.observed) {
            (Some(r), Some((seen, at))) if r == seen => now.saturating_duration_since(*at),
            (Some(r), _) => {
                self.observed = Some((r.clone(), now));
                Duration::ZERO
            }
            (None, _) => {
                self.observed = None;
                Duration::ZERO
            }
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let current = self.api.get_opt(&self.config.lease_name).await?;
        let record = current.as_ref().map(LeaseRecord::of);
        let unchanged_for = self.observe(record.as_ref());
        let decision = decide(
            record.as_ref(),
            &self.config.identity,
            unchanged_for,
            self.config.lease_duration,
        );
        let now = Timestamp::now();
        let spec = |prev: Option<&LeaseSpec>| {
            held_spec(prev, &self.config.identity, self.config.lease_duration, now)
        };
        match (decision, current) {
            (Decision::Wait(_), _) => Ok(Attempt::NotHeld),
            (Decision::Create, _) | (_, None) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.lease_name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec(None)),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(Attempt::Held),
                    // Another candidate created it first.
                    Err(kube::Error::Api(s)) if s.is_already_exists() || s.is_conflict() => {
                        Ok(Attempt::NotHeld)
                    }
                    Err(e) => Err(e),
                }
            }
            (Decision::Renew | Decision::TakeOver, Some(mut lease)) => {
                lease.spec = Some(spec(lease.spec.as_ref()));
                // `lease` carries the resourceVersion we read: a concurrent writer makes this a 409.
                match self
                    .api
                    .replace(&self.config.lease_name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(_) => Ok(Attempt::Held),
                    Err(kube::Error::Api(s))
                        if s.is_conflict() && decision == Decision::TakeOver =>
                    {
                        Ok(Attempt::NotHeld)
                    }
                    // A conflict while renewing is retried; the renew deadline bounds it.
                    Err(e) => Err(e),
                }
            }
        }
    }

    async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.config.lease_name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_ref() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        lease.spec = Some(released_spec(spec, Timestamp::now()));
        self.api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(15);

    fn held(by: &str, secs: Option<i32>) -> LeaseRecord {
        LeaseRecord {
            holder: Some(by.to_owned()),
            lease_duration_seconds: secs,
            renew_time: None,
            transitions: 3,
        }
    }

    #[test]
    fn no_lease_is_created() {
        assert_eq!(decide(None, "me", Duration::ZERO, D), Decision::Create);
    }

    #[test]
    fn own_lease_is_renewed_even_when_stale() {
        let r = held("me", Some(15));
        assert_eq!(
            decide(Some(&r), "me", Duration::from_secs(99), D),
            Decision::Renew
        );
    }

    #[test]
    fn another_holder_is_waited_for_until_the_record_is_stale() {
        let r = held("other", Some(15));
        assert_eq!(
            decide(Some(&r), "me", Duration::from_secs(4), D),
            Decision::Wait(Duration::from_secs(11))
        );
        assert_eq!(
            decide(Some(&r), "me", Duration::from_secs(15), D),
            Decision::TakeOver
        );
        assert_eq!(
            decide(Some(&r), "me", Duration::from_secs(60), D),
            Decision::TakeOver
        );
    }

    #[test]
    fn record_duration_wins_over_default_and_bad_values_expire_at_once() {
        let r = held("other", Some(40));
        assert_eq!(
            decide(Some(&r), "me", Duration::from_secs(20), D),
            Decision::Wait(Duration::from_secs(20))
        );
        let r = held("other", None);
        assert_eq!(
            decide(Some(&r), "me", Duration::from_secs(5), D),
            Decision::Wait(Duration::from_secs(10))
        );
        for secs in [0, -5] {
            let r = held("other", Some(secs));
            assert_eq!(
                decide(Some(&r), "me", Duration::ZERO, D),
                Decision::TakeOver
            );
        }
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        for holder in [None, Some(String::new())] {
            let r = LeaseRecord {
                holder,
                lease_duration_seconds: Some(1),
                ..LeaseRecord::default()
            };
            assert_eq!(
                decide(Some(&r), "me", Duration::ZERO, D),
                Decision::TakeOver
            );
        }
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("test timestamp")
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_keeps_acquire_time() {
        let t0 = ts("2026-01-01T00:00:00Z");
        let t1 = ts("2026-01-01T00:00:05Z");
        let theirs = LeaseSpec {
            holder_identity: Some("other".into()),
            lease_transitions: Some(2),
            acquire_time: Some(MicroTime(t0)),
            ..LeaseSpec::default()
        };
        let mine = held_spec(Some(&theirs), "me", D, t1);
        assert_eq!(mine.holder_identity.as_deref(), Some("me"));
        assert_eq!(mine.lease_transitions, Some(3));
        assert_eq!(mine.acquire_time, Some(MicroTime(t1)));
        assert_eq!(mine.lease_duration_seconds, Some(15));

        let t2 = ts("2026-01-01T00:00:07Z");
        let renewed = held_spec(Some(&mine), "me", D, t2);
        assert_eq!(renewed.lease_transitions, Some(3));
        assert_eq!(renewed.acquire_time, Some(MicroTime(t1)));
        assert_eq!(renewed.renew_time, Some(MicroTime(t2)));

        let first = held_spec(None, "me", D, t0);
        assert_eq!(first.lease_transitions, Some(0));

        let released = released_spec(&renewed, t2);
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_duration_seconds, Some(1));
        assert_eq!(released.lease_transitions, Some(3));
        let next = held_spec(Some(&released), "other", D, t2);
        assert_eq!(
            next.lease_transitions,
            Some(3),
            "taking a free lease is not a hand-over"
        );
    }

    #[test]
    fn record_is_read_from_a_lease() {
        let lease = Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: Some("a".into()),
                lease_duration_seconds: Some(9),
                lease_transitions: Some(4),
                renew_time: Some(MicroTime(ts("2026-01-01T00:00:00Z"))),
                ..LeaseSpec::default()
            }),
        };
        let r = LeaseRecord::of(&lease);
        assert_eq!(
            r,
            LeaseRecord {
                holder: Some("a".into()),
                lease_duration_seconds: Some(9),
                renew_time: Some(ts("2026-01-01T00:00:00Z")),
                transitions: 4,
            }
        );
        assert_eq!(LeaseRecord::of(&Lease::default()), LeaseRecord::default());
    }

    #[test]
    fn unsafe_timings_are_rejected() {
        let ok = LeaderConfig::new("ns", "lease", "me");
        assert!(ok.validate().is_ok());
        let mut c = ok.clone();
        c.renew_deadline = c.lease_duration;
        assert!(c.validate().is_err());
        let mut c = ok.clone();
        c.retry_period = c.renew_deadline;
        assert!(c.validate().is_err());
        let mut c = ok.clone();
        c.retry_period = Duration::ZERO;
        assert!(c.validate().is_err());
        let mut c = ok;
        c.identity.clear();
        assert!(c.validate().is_err());
    }

    #[test]
    fn always_leader_says_leader() {
        let h = LeaderHandle::always_leader();
        assert!(h.is_leader());
        assert!(*h.subscribe().borrow());
    }

    #[test]
    fn identities_differ_between_calls() {
        let a = default_identity();
        std::thread::sleep(Duration::from_millis(2));
        assert_ne!(a, default_identity());
    }
}

/// The elector task against a scripted Lease API: safety when the API server goes away, and
/// release on shutdown.
#[cfg(test)]
mod elector_tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    use serde_json::{Value, json};

    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases";

    #[derive(Default)]
    struct FakeApi {
        lease: Option<Value>,
        version: u64,
        /// Every request fails with 503 while set: the API server is unreachable.
        down: bool,
        /// Holders written by PUT/POST, in order.
        writes: Vec<Option<String>>,
    }

    fn status(code: u16, reason: &str) -> Value {
        test_support::status_failure(code, reason, reason)
    }

    fn handle(api: &mut FakeApi, method: &str, path: &str, mut body: Value) -> (u16, Value) {
        if api.down {
            return (503, status(503, "ServiceUnavailable"));
        }
        let item = format!("{LEASES}/lease");
        match (method, path) {
            ("GET", p) if p == item => match &api.lease {
                Some(l) => (200, l.clone()),
                None => (404, status(404, "NotFound")),
            },
            ("POST", LEASES) if api.lease.is_none() => {
                api.version += 1;
                body["metadata"]["resourceVersion"] = json!(api.version.to_string());
                api.writes.push(holder_of(&body));
                api.lease = Some(body.clone());
                (201, body)
            }
            ("PUT", p) if p == item => {
                let current = api
                    .lease
                    .as_ref()
                    .map(|l| l["metadata"]["resourceVersion"].clone());
                if current != Some(body["metadata"]["resourceVersion"].clone()) {
                    return (409, status(409, "Conflict"));
                }
                api.version += 1;
                body["metadata"]["resourceVersion"] = json!(api.version.to_string());
                api.writes.push(holder_of(&body));
                api.lease = Some(body.clone());
                (200, body)
            }
            ("POST", LEASES) => (409, status(409, "AlreadyExists")),
            _ => (405, status(405, "MethodNotAllowed")),
        }
    }

    fn holder_of(lease: &Value) -> Option<String> {
        lease["spec"]["holderIdentity"].as_str().map(str::to_owned)
    }

    fn client(api: Arc<Mutex<FakeApi>>) -> Client {
        test_support::fake_client("ns", move |method, path, body| {
            let mut api = api
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            handle(&mut api, method, path, body)
        })
    }

    fn fast_config() -> LeaderConfig {
        LeaderConfig {
            // Short, with a margin of a second between renew deadline and expiry so a busy
            // test machine does not blur the two.
            lease_duration: Duration::from_millis(3000),
            renew_deadline: Duration::from_millis(2000),
            retry_period: Duration::from_millis(200),
            ..LeaderConfig::new("ns", "lease", "me")
        }
    }

    async fn wait_signal(rx: &mut watch::Receiver<bool>, want: bool) -> Instant {
        tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|v| *v == want))
            .await
            .expect("leadership signal in time")
            .expect("elector alive");
        Instant::now()
    }

    #[tokio::test]
    async fn a_leader_that_cannot_renew_stops_leading_before_its_lease_expires() {
        let api = Arc::new(Mutex::new(FakeApi::default()));
        let config = fast_config();
        let handle = spawn(client(api.clone()), config.clone()).expect("valid config");
        let mut rx = handle.subscribe();
        wait_signal(&mut rx, true).await;

        // The API server disappears right after a renewal.
        let last_write = {
            let mut a = api.lock().expect("not poisoned");
            a.down = true;
            Instant::now()
        };
        let stepped_down = wait_signal(&mut rx, false).await;
        let after = stepped_down - last_write;
        // Someone else may take over lease_duration after our last renewal: we must be out by then.
        assert!(
            after < config.lease_duration,
            "still leading {after:?} after the last renewal"
        );
        // And not at the first failed attempt: short outages are ridden out. (The last renewal
        // was up to one retry period before the outage began.)
        assert!(
            after + 2 * config.retry_period >= config.renew_deadline,
            "stepped down after {after:?}"
        );

        // Back online: it leads again (it still holds the Lease record).
        api.lock().expect("not poisoned").down = false;
        wait_signal(&mut rx, true).await;
        handle.shutdown().await;
    }

    #[tokio::test]
    async fn shutdown_releases_the_lease_and_a_foreign_lease_is_respected() {
        let api = Arc::new(Mutex::new(FakeApi::default()));
        let handle = spawn(client(api.clone()), fast_config()).expect("valid config");
        let mut rx = handle.subscribe();
        wait_signal(&mut rx, true).await;
        handle.shutdown().await;
        let writes = api.lock().expect("not poisoned").writes.clone();
        assert_eq!(writes.first(), Some(&Some("me".to_owned())));
        assert_eq!(
            writes.last(),
            Some(&None),
            "the Lease was not released: {writes:?}"
        );

        // Someone else renews the Lease continuously: a second candidate never leads.
        let mut other = fast_config();
        other.identity = "other".into();
        let holder = spawn(client(api.clone()), other).expect("valid config");
        let mut holder_rx = holder.subscribe();
        wait_signal(&mut holder_rx, true).await;
        let candidate = spawn(client(api.clone()), fast_config()).expect("valid config");
        tokio::time::sleep(fast_config().lease_duration * 2).await;
        assert!(
            !candidate.is_leader(),
            "took a Lease that was being renewed"
        );
        assert!(holder.is_leader());

        // Once the holder shuts down (and releases), the candidate takes over at once.
        holder.shutdown().await;
        let mut rx = candidate.subscribe();
        let start = Instant::now();
        wait_signal(&mut rx, true).await;
        // Without the release it would wait out the whole lease duration.
        let took = start.elapsed();
        assert!(took < fast_config().lease_duration, "{took:?}");
        candidate.shutdown().await;
    }
}
