//! Throughput and latency per operation class, from HDR histograms.

use ensemble_core::{Completion, CompletionResult, Outcome, Time};
pub use hdrhistogram::Histogram;

/// A latency histogram in microseconds, from 1 µs to one hour, three significant figures.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The class under which whole web interactions are measured, from the first request's issue to
/// the last one's reply (TPC-W's and RUBiS's pages; the papers report latency per interaction).
/// Not an operation class: it does not count towards "all" or the throughput.
pub const INTERACTION: &str = "interaction";

/// Records the completions that fall in the measurement window `[start, end)` (by completion time).
pub struct Metrics {
    start: Time,
    end: Time,
    /// Latency in microseconds per class, plus "all".
    latency: BTreeMap<&'static str, Histogram<u64>>,
    aborted: u64,
    errors: u64,
    redirects: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassSummary {
    pub count: u64,
    pub throughput: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub window_s: f64,
    /// Completed operations per second in the window (committed and aborted; refused ones not).
    pub throughput: f64,
    /// Per class: "all", "local", "global", "commutative", and [`INTERACTION`] for workloads made
    /// of web interactions.
    pub classes: BTreeMap<String, ClassSummary>,
    /// Operations whose body aborted (an application decision such as "out of stock").
    pub aborted: u64,
    /// Requests refused with an error.
    pub errors: u64,
    /// MAP replies followed.
    pub redirects: u64,
}

impl Metrics {
    pub fn new(start: Time, end: Time) -> Metrics {
        Metrics { start, end, latency: BTreeMap::new(), aborted: 0, errors: 0, redirects: 0 }
    }

    pub fn record(&mut self, c: &Completion) {
        if c.completed < self.start || c.completed >= self.end {
            return;
        }
        self.redirects += c.redirects as u64;
        let class = match &c.result {
            CompletionResult::Done { class, outcome, .. } => {
                if matches!(outcome, Outcome::Aborted(_)) {
                    self.aborted += 1;
                }
                class.name()
            }
            CompletionResult::Error(_) => {
                self.errors += 1;
                return;
            }
        };
        if let Some(i) = &c.interaction {
            let us = c.completed.saturating_sub(i.started).as_micros().max(1) as u64;
            self.latency.entry(INTERACTION).or_insert_with(new_histogram).saturating_record(us);
        }
        let us = c.completed.saturating_sub(c.issued).as_micros().max(1) as u64;
        for k in [class, "all"] {
            self.latency
                .entry(k)
                .or_insert_with(new_histogram)
                .saturating_record(us);
        }
    }

    pub fn summary(&self) -> Summary {
        let window_s = self.end.saturating_sub(self.start).as_secs_f64();
        let classes: BTreeMap<String, ClassSummary> = self
            .latency
            .iter()
            .map(|(k, h)| {
                let ms = |us: u64| us as f64 / 1e3;
                (
                    k.to_string(),
                    ClassSummary {
                        count: h.len(),
                        throughput: h.len() as f64 / window_s,
                        mean_ms: round3(h.mean() / 1e3),
                        p50_ms: ms(h.value_at_quantile(0.50)),
                        p90_ms: ms(h.value_at_quantile(0.90)),
                        p99_ms: ms(h.value_at_quantile(0.99)),
                        max_ms: ms(h.max()),
                    },
                )
            })
            .collect();
        let throughput = classes.get("all").map(|c| c.throughput).unwrap_or(0.0);
        Summary { window_s, throughput: round3(throughput), classes, aborted: self.aborted, errors: self.errors, redirects: self.redirects }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}
