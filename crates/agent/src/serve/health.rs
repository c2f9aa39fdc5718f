//! Upstream's probe endpoint: `/healthz` and `/readyz` over HTTPS (by default on :8443) with a
//! self-signed certificate made in memory at start (the kubelet does not verify probe
//! certificates), and the liveness probe that makes `/healthz` mean something.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::hub::Hub;
use crate::serve::http::{HttpError, HttpServer, HttpState, Readiness};

/// Time between two rounds of the liveness probe.
pub const PROBE_PERIOD: Duration = Duration::from_secs(30);

/// Why the probe endpoint did not start.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// The listener could not be bound.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The certificate or TLS settings could not be made.
    #[error("{0}")]
    Tls(String),
}

/// Starts the HTTPS probe endpoint (if an address is set) and the liveness probe of the hub
/// credentials, both until `stop` turns true.
pub async fn spawn_for(
    config: &crate::config::AgentConfig,
    hub: &Arc<dyn Hub>,
    metrics: &Arc<crate::metrics::Metrics>,
    readiness: &Readiness,
    stop: watch::Receiver<bool>,
) -> Result<(), HealthError> {
    let state = HttpState {
        metrics: metrics.clone(),
        readiness: readiness.clone(),
    };
    tokio::spawn(probe_loop(hub.clone(), readiness.clone(), stop.clone()));
    let Some(address) = config.health_address else {
        return Ok(());
    };
    let acceptor = config
        .health_tls
        .self_signed_acceptor()
        .map_err(HealthError::Tls)?;
    let server = HttpServer::bind(address, state).await?.with_tls(acceptor);
    tracing::info!(address = %address, "serving /healthz and /readyz over HTTPS");
    tokio::spawn(server.run(async move {
        let mut stop = stop;
        let _ = stop.wait_for(|s| *s).await;
    }));
    Ok(())
}

/// Every [`PROBE_PERIOD`], records whether the hub refuses the agent's credentials.
async fn probe_loop(hub: Arc<dyn Hub>, readiness: Readiness, mut stop: watch::Receiver<bool>) {
    loop {
        let unauthorized = hub.credentials_refused().await;
        readiness.record_probe_round(unauthorized, Instant::now());
        tokio::select! {
            () = tokio::time::sleep(PROBE_PERIOD) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}
