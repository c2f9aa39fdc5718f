//! API clients with a client-side request rate limit (QPS and burst), like client-go's.

use std::time::Duration;

use tower::limit::RateLimitLayer;

/// Builds a client that sends at most `burst` requests per `burst / qps` seconds: on average
/// `qps` requests per second, with bursts of up to `burst`.
pub fn build(config: kube::Config, qps: f64, burst: u32) -> Result<kube::Client, String> {
    let (num, per) = rate_window(qps, burst);
    let builder = kube::client::ClientBuilder::try_from(config).map_err(|e| e.to_string())?;
    Ok(builder.with_layer(&RateLimitLayer::new(num, per)).build())
}

/// The window of the token bucket: `burst` requests per `burst / qps` seconds.
fn rate_window(qps: f64, burst: u32) -> (u64, Duration) {
    let burst = u64::from(burst.max(1));
    let qps = if qps.is_finite() && qps > 0.0 {
        qps
    } else {
        1.0
    };
    let per = Duration::from_secs_f64((burst as f64 / qps).clamp(0.001, 3600.0));
    (burst, per)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_gives_average_qps() {
        let (n, per) = rate_window(50.0, 100);
        assert_eq!(n, 100);
        assert_eq!(per, Duration::from_secs(2));
        let (n, per) = rate_window(0.0, 0);
        assert_eq!((n, per), (1, Duration::from_secs(1)));
    }
}
