//! Throughput and latency per latency class (named by the protocol's harness), aborts by cause,
//! and per-phase latency, from HDR histograms.

use crate::harness::Classified;
use ensemble_core::{Completion, CompletionResult, Time};
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
    /// Latency in microseconds per phase.
    phases: BTreeMap<&'static str, Histogram<u64>>,
    aborted: u64,
    aborts_by_cause: BTreeMap<&'static str, u64>,
    errors: u64,
    error_kinds: BTreeMap<String, u64>,
    redirects: u64,
}

/// How many distinct error messages a summary keeps (the rest are counted in `errors` only).
const ERROR_KINDS: usize = 5;

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
    /// Per class: "all", the protocol's classes ("local", "global", "commutative" for the belt),
    /// and [`INTERACTION`] for workloads made of web interactions.
    pub classes: BTreeMap<String, ClassSummary>,
    /// Per phase (execution, termination), for protocols that report phases.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub phases: BTreeMap<String, ClassSummary>,
    /// Operations that aborted, whatever the cause.
    pub aborted: u64,
    /// Aborts by cause: `body` (an application decision such as "out of stock"),
    /// `certification`, `conflict`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub aborts_by_cause: BTreeMap<String, u64>,
    /// Requests refused with an error.
    pub errors: u64,
    /// The first few distinct error messages, each with how often it came.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub error_kinds: BTreeMap<String, u64>,
    /// MAP replies followed.
    pub redirects: u64,
}

impl Metrics {
    pub fn new(start: Time, end: Time) -> Metrics {
        Metrics {
            start,
            end,
            latency: BTreeMap::new(),
            phases: BTreeMap::new(),
            aborted: 0,
            aborts_by_cause: BTreeMap::new(),
            errors: 0,
            error_kinds: BTreeMap::new(),
            redirects: 0,
        }
    }

    pub fn record<E>(&mut self, c: &Completion<E>, k: &Classified) {
        if c.completed < self.start || c.completed >= self.end {
            return;
        }
        self.redirects += c.redirects as u64;
        if let CompletionResult::Error(e) = &c.result {
            self.errors += 1;
            let message = e.to_string();
            if let Some(n) = self.error_kinds.get_mut(&message) {
                *n += 1;
            } else if self.error_kinds.len() < ERROR_KINDS {
                self.error_kinds.insert(message, 1);
            }
            return;
        }
        if let Some(cause) = k.abort {
            self.aborted += 1;
            *self.aborts_by_cause.entry(cause.name()).or_default() += 1;
        }
        for (phase, d) in &k.phases {
            self.phases.entry(phase).or_insert_with(new_histogram).saturating_record(d.as_micros().max(1) as u64);
        }
        let class = k.class;
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
        let summarize = |hists: &BTreeMap<&'static str, Histogram<u64>>| -> BTreeMap<String, ClassSummary> {
            hists
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
                .collect()
        };
        let classes = summarize(&self.latency);
        let throughput = classes.get("all").map(|c| c.throughput).unwrap_or(0.0);
        Summary {
            window_s,
            throughput: round3(throughput),
            classes,
            phases: summarize(&self.phases),
            aborted: self.aborted,
            aborts_by_cause: self.aborts_by_cause.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            errors: self.errors,
            error_kinds: self.error_kinds.clone(),
            redirects: self.redirects,
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}
