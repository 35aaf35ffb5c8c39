//! Result files and tables.

use crate::experiment::Experiment;
use crate::metrics::Summary;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One run: its full configuration and what it measured. Written as JSON; in the simulator the
/// same seed gives the same file, byte for byte (nothing here depends on the host's clock).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResult {
    pub experiment: Experiment,
    pub summary: Summary,
    /// The serializability check's verdict, when the run was checked.
    pub check: Option<String>,
    pub check_passed: Option<bool>,
    /// Simulator: events processed, messages, per-process CPU utilisation in the window.
    pub sim: Option<SimFigures>,
    /// Per process, the protocol's counters. Result files written before runs kept them have
    /// none, and still load (`ensemble figure --replot`).
    #[serde(default)]
    pub processes: Vec<ProcessCounters>,
    /// Why the run ended before its window and drain did (a host died or stalled, the bench was
    /// interrupted): what was measured until then, never to be read as a complete run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<String>,
}

/// One process's counters (`Process::counters`), in the order the protocol lists them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessCounters {
    pub process: ensemble_core::ProcessId,
    pub counters: Vec<(String, u64)>,
}

impl ProcessCounters {
    pub fn new(process: ensemble_core::ProcessId, counters: &[(&'static str, u64)]) -> ProcessCounters {
        ProcessCounters { process, counters: counters.iter().map(|(k, v)| (k.to_string(), *v)).collect() }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SimFigures {
    pub events: u64,
    pub messages: u64,
    pub virtual_s: f64,
    pub cpu_utilisation: Vec<f64>,
}

pub fn write_json(path: &Path, value: &impl Serialize) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    std::fs::write(path, text)?;
    Ok(())
}

fn ms(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into())
}

/// A table of runs: one line each, latencies in milliseconds, a mean and p99 column for each of
/// `classes` (the protocols' latency classes, as their harnesses list them). A `local` column
/// shows the commutative class's mean where a run has no local operations.
pub fn print_table(results: &[RunResult], classes: &[&str]) -> String {
    let mut header: Vec<String> = ["run", "system", "inst", "clients", "ops/s", "mean", "p50", "p90", "p99"].map(String::from).to_vec();
    for k in classes {
        header.push(format!("{k} mean"));
        header.push(format!("{k} p99"));
    }
    header.extend(["aborted", "abort %", "aborts by cause", "check"].map(String::from));
    let mut rows: Vec<Vec<String>> = vec![header];
    for r in results {
        let s = &r.summary;
        let c = |k: &str| s.classes.get(k);
        let mut row = vec![
            r.experiment.label.clone(),
            r.experiment.system.clone(),
            r.experiment.instances.to_string(),
            r.experiment.clients.to_string(),
            format!("{:.1}", s.throughput),
            ms(c("all").map(|x| x.mean_ms)),
            ms(c("all").map(|x| x.p50_ms)),
            ms(c("all").map(|x| x.p90_ms)),
            ms(c("all").map(|x| x.p99_ms)),
        ];
        for k in classes {
            let mean = match (c(k), *k == "local") {
                (Some(x), _) => Some(x.mean_ms),
                (None, true) => c("commutative").map(|x| x.mean_ms),
                (None, false) => None,
            };
            row.push(ms(mean));
            row.push(ms(c(k).map(|x| x.p99_ms)));
        }
        rows.push(row);
        let row = rows.last_mut().expect("just pushed");
        // Of the transactions that ended in the window, the share that aborted.
        let ended = s.classes.get("all").map_or(0, |x| x.count) + s.aborted;
        let rate = if ended == 0 { "-".to_string() } else { format!("{:.1}", 100.0 * s.aborted as f64 / ended as f64) };
        let causes: Vec<String> = s.aborts_by_cause.iter().map(|(cause, n)| format!("{cause} {n}")).collect();
        row.extend(vec![
            s.aborted.to_string(),
            rate,
            if causes.is_empty() { "-".into() } else { causes.join(", ") },
            match r.check_passed {
                Some(true) => "serializable".into(),
                Some(false) => "FAILED".into(),
                None => "-".into(),
            },
        ]);
    }
    render(&rows)
}

/// Renders rows as an aligned plain-text table, first row as header.
pub fn render(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols).map(|i| rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for (n, r) in rows.iter().enumerate() {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| if i == 0 { format!("{c:<w$}", w = widths[i]) } else { format!("{c:>w$}", w = widths[i]) })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
        if n == 0 {
            out.push_str(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
            out.push('\n');
        }
    }
    out
}
