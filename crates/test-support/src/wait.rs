//! Polling for a state with a deadline and a failure message that says what was seen last.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

/// How often a probe is retried.
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// The outcome of one probe: the awaited value, or "not yet" with an optional description of
/// the current state (shown if the wait times out).
pub trait Probe<T> {
    /// `Ok(value)` when done; `Err(state)` to poll again.
    fn into_outcome(self) -> Result<T, Option<String>>;
}

impl<T> Probe<T> for Option<T> {
    fn into_outcome(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: Display> Probe<T> for Result<T, E> {
    fn into_outcome(self) -> Result<T, Option<String>> {
        self.map_err(|e| Some(e.to_string()))
    }
}

/// A wait that ran out of time.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "timed out after {timeout:?} waiting for {description} ({attempts} attempts); last state: {}",
    last_state.as_deref().unwrap_or("(the probe described none)")
)]
pub struct TimedOut {
    /// What was awaited.
    pub description: String,
    /// The limit that passed.
    pub timeout: Duration,
    /// How many times the probe ran.
    pub attempts: u32,
    /// The state the last probe reported, if it reported one.
    pub last_state: Option<String>,
}

/// Polls `probe` until it yields a value or `timeout` passes; a probe call that itself hangs is
/// cut off at the deadline.
pub async fn poll_until<T, O, F, Fut>(
    description: &str,
    timeout: Duration,
    mut probe: F,
) -> Result<T, TimedOut>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
    O: Probe<T>,
{
    let deadline = Instant::now() + timeout;
    let mut attempts = 0u32;
    let mut last_state = None;
    loop {
        attempts += 1;
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, probe()).await {
            Ok(outcome) => match outcome.into_outcome() {
                Ok(value) => return Ok(value),
                Err(state) => last_state = state.or(last_state),
            },
            Err(_) => {
                last_state = Some("the last probe call did not return before the deadline".into())
            }
        }
        if Instant::now() + POLL_INTERVAL > deadline {
            return Err(TimedOut {
                description: description.to_string(),
                timeout,
                attempts,
                last_state,
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Like [`poll_until`], but panics on timeout with the description and the last state, which
/// is what a test wants.
pub async fn wait_for<T, O, F, Fut>(description: &str, timeout: Duration, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
    O: Probe<T>,
{
    match poll_until(description, timeout, probe).await {
        Ok(value) => value,
        Err(e) => panic!("{e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn returns_the_value_once_the_probe_succeeds() {
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let v = wait_for("third call", Duration::from_secs(10), move || {
            let c = c.clone();
            async move {
                let n = c.fetch_add(1, Ordering::SeqCst) + 1;
                (n >= 3).then_some(n * 10)
            }
        })
        .await;
        assert_eq!(v, 30);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn timeout_reports_description_and_last_state() {
        let err = poll_until("the answer", Duration::from_millis(600), || async {
            Err::<(), _>("still 41")
        })
        .await
        .expect_err("must time out");
        assert_eq!(err.description, "the answer");
        assert!(err.attempts >= 2, "{err:?}");
        assert_eq!(err.last_state.as_deref(), Some("still 41"));
        let msg = err.to_string();
        assert!(
            msg.contains("the answer") && msg.contains("still 41"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn a_hanging_probe_is_cut_off_at_the_deadline() {
        let started = Instant::now();
        let err = poll_until("never", Duration::from_millis(300), || async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Some(())
        })
        .await
        .expect_err("must time out");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(
            err.last_state
                .unwrap_or_default()
                .contains("did not return")
        );
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after")]
    async fn wait_for_panics_on_timeout() {
        wait_for("nothing", Duration::from_millis(100), || async {
            None::<()>
        })
        .await;
    }
}
