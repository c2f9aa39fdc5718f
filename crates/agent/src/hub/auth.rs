//! Whether the hub accepts the agent's credentials, judged from the ManifestWork watch the
//! agent keeps open anyway: a watch error with 401 means refused, a successful event means
//! accepted. A healthy agent so costs the hub no request for its liveness probe; the probe asks
//! the hub itself only while the watch cannot tell (no watch yet: a standby replica, or before
//! the first event) or while the watch is failing (a re-watch that succeeds says nothing, so a
//! successful request is what clears a failure).

use std::sync::{Arc, Mutex, PoisonError};

use kube::runtime::watcher;

/// What the ManifestWork watch last said about the hub.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum WatchSignal {
    /// No watch runs (standby, or not started yet).
    #[default]
    NotRunning,
    /// The watch runs but has not delivered anything yet.
    Starting,
    /// The last thing the watch delivered was an event.
    Healthy,
    /// The last watch error was a 401.
    Unauthorized,
    /// The last watch error was something else (hub unreachable, timeout, ...).
    Failing,
}

/// The answer of one request the probe made itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeAnswer {
    /// The hub answered the request.
    Accepted,
    /// The hub refused the credentials (401).
    Refused,
    /// No answer that says anything about the credentials (unreachable, other errors).
    Unknown,
}

impl ProbeAnswer {
    /// Classifies the result of a request to the hub.
    pub fn of<T>(result: &Result<T, kube::Error>) -> Self {
        match result {
            Ok(_) => Self::Accepted,
            Err(e) if is_unauthorized(e) => Self::Refused,
            Err(_) => Self::Unknown,
        }
    }
}

/// Shared between the ManifestWork watch (which reports) and the liveness probe (which reads).
/// Cheap to clone; clones share the state.
#[derive(Clone, Debug, Default)]
pub struct HubAuth {
    state: Arc<Mutex<WatchSignal>>,
}

impl HubAuth {
    /// No watch yet: the probe asks the hub.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WatchSignal> {
        // One assignment per write: the state stays consistent even after a panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The ManifestWork watch starts.
    pub fn watch_started(&self) {
        *self.lock() = WatchSignal::Starting;
    }

    /// Takes in one item of the ManifestWork watch: an event that follows an answer of the hub
    /// means accepted, an error with 401 refused.
    pub fn observe<K>(&self, item: &Result<watcher::Event<K>, watcher::Error>) {
        let next = match item {
            // Emitted before the list request (also before each re-list): says nothing.
            Ok(watcher::Event::Init) => return,
            Ok(_) => WatchSignal::Healthy,
            Err(e) if watch_error_is_unauthorized(e) => WatchSignal::Unauthorized,
            Err(_) => WatchSignal::Failing,
        };
        let mut state = self.lock();
        if next == WatchSignal::Unauthorized && *state != WatchSignal::Unauthorized {
            tracing::warn!(
                "the hub refuses the agent's credentials (401 Unauthorized on the ManifestWork watch)"
            );
        }
        *state = next;
    }

    /// What the watch says: `Some(refused)` when it can tell, `None` when the probe must ask the
    /// hub itself (then it reports the answer with [`HubAuth::confirm`]).
    pub fn verdict(&self) -> Option<bool> {
        match *self.lock() {
            WatchSignal::Healthy => Some(false),
            WatchSignal::Unauthorized => Some(true),
            WatchSignal::NotRunning | WatchSignal::Starting | WatchSignal::Failing => None,
        }
    }

    /// Whether the watch is known to be working now (its last item was an event, or a request
    /// since its last error succeeded).
    pub fn watch_is_healthy(&self) -> bool {
        *self.lock() == WatchSignal::Healthy
    }

    /// Takes in the answer of a request the probe made because the watch could not tell. An
    /// accepted request clears a watch failure: the watcher's silent re-watch then worked too,
    /// or its next error sets the failure again.
    pub fn confirm(&self, answer: ProbeAnswer) {
        let mut state = self.lock();
        *state = match (*state, answer) {
            (WatchSignal::NotRunning, _) => WatchSignal::NotRunning,
            (_, ProbeAnswer::Accepted) => WatchSignal::Healthy,
            (_, ProbeAnswer::Refused) => WatchSignal::Unauthorized,
            (current, ProbeAnswer::Unknown) => current,
        };
    }
}

/// Whether a request failed because the hub refused the credentials.
fn is_unauthorized(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 401)
}

fn watch_error_is_unauthorized(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => is_unauthorized(e),
        watcher::Error::WatchError(status) => status.code == 401,
        watcher::Error::NoResourceVersion => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16) -> kube::Error {
        let mut status = Status::failure("refused", "Unauthorized");
        status.code = code;
        kube::Error::Api(Box::new(status))
    }

    type Item = Result<watcher::Event<()>, watcher::Error>;

    fn event() -> Item {
        Ok(watcher::Event::InitDone)
    }

    #[test]
    fn the_init_marker_before_a_list_says_nothing() {
        let auth = HubAuth::new();
        auth.watch_started();
        auth.observe::<()>(&Ok(watcher::Event::Init));
        assert_eq!(auth.verdict(), None);
        auth.observe(&error(401));
        auth.observe::<()>(&Ok(watcher::Event::Init));
        assert_eq!(
            auth.verdict(),
            Some(true),
            "a re-list starting is no answer"
        );
    }

    fn error(code: u16) -> Item {
        Err(watcher::Error::WatchStartFailed(api_error(code)))
    }

    #[test]
    fn without_a_watch_the_probe_asks_the_hub() {
        let auth = HubAuth::new();
        assert_eq!(auth.verdict(), None);
        auth.confirm(ProbeAnswer::Accepted);
        assert_eq!(auth.verdict(), None, "still no watch: ask again next time");
        auth.watch_started();
        assert_eq!(auth.verdict(), None, "no event yet");
    }

    #[test]
    fn a_watch_event_means_accepted_and_a_401_refused() {
        let auth = HubAuth::new();
        auth.watch_started();
        auth.observe(&event());
        assert_eq!(auth.verdict(), Some(false));
        assert!(auth.watch_is_healthy());
        auth.observe(&error(401));
        assert_eq!(auth.verdict(), Some(true));
        assert!(!auth.watch_is_healthy());
        auth.observe(&Err::<watcher::Event<()>, _>(
            watcher::Error::InitialListFailed(api_error(401)),
        ));
        assert_eq!(auth.verdict(), Some(true));
        auth.observe(&event());
        assert_eq!(auth.verdict(), Some(false));
    }

    #[test]
    fn other_watch_errors_make_the_probe_ask_until_a_request_succeeds() {
        let auth = HubAuth::new();
        auth.watch_started();
        auth.observe(&event());
        auth.observe(&error(503));
        assert_eq!(auth.verdict(), None);
        assert!(!auth.watch_is_healthy());
        auth.confirm(ProbeAnswer::Unknown);
        assert_eq!(auth.verdict(), None, "an unreachable hub says nothing");
        auth.confirm(ProbeAnswer::Refused);
        assert_eq!(auth.verdict(), Some(true));
        auth.confirm(ProbeAnswer::Accepted);
        assert_eq!(auth.verdict(), Some(false), "a silent re-watch worked");
        assert!(auth.watch_is_healthy());
    }

    #[test]
    fn request_results_are_classified() {
        assert_eq!(ProbeAnswer::of(&Ok::<(), _>(())), ProbeAnswer::Accepted);
        assert_eq!(
            ProbeAnswer::of(&Err::<(), _>(api_error(401))),
            ProbeAnswer::Refused
        );
        assert_eq!(
            ProbeAnswer::of(&Err::<(), _>(api_error(403))),
            ProbeAnswer::Unknown
        );
    }
}
