//! Summaries of latency samples. Pure.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Percentiles of a set of durations, in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples.
    pub count: usize,
    /// Smallest.
    pub min_ms: f64,
    /// Median (nearest rank).
    pub p50_ms: f64,
    /// 90th percentile (nearest rank).
    pub p90_ms: f64,
    /// 99th percentile (nearest rank).
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
    /// Arithmetic mean.
    pub mean_ms: f64,
}

impl Summary {
    /// Summarises `samples`; `None` when there are none.
    pub fn of(samples: &[Duration]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        ms.sort_by(f64::total_cmp);
        let rank = |q: f64| {
            // Nearest rank: the smallest value with at least q of the samples at or below it.
            let r = (q * ms.len() as f64).ceil() as usize;
            ms[r.clamp(1, ms.len()) - 1]
        };
        Some(Self {
            count: ms.len(),
            min_ms: ms[0],
            p50_ms: rank(0.50),
            p90_ms: rank(0.90),
            p99_ms: rank(0.99),
            max_ms: ms[ms.len() - 1],
            mean_ms: ms.iter().sum::<f64>() / ms.len() as f64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let s = Summary::of(&samples).expect("some");
        assert_eq!((s.count, s.min_ms, s.max_ms), (100, 1.0, 100.0));
        assert_eq!((s.p50_ms, s.p90_ms, s.p99_ms), (50.0, 90.0, 99.0));
        assert_eq!(s.mean_ms, 50.5);
        let one = Summary::of(&[Duration::from_millis(7)]).expect("some");
        assert_eq!((one.p50_ms, one.p99_ms), (7.0, 7.0));
        assert_eq!(Summary::of(&[]), None);
    }
}
