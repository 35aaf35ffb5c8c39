//! A run's history in `ensemble-history`'s form, and its verdict: serializability (P-Store's
//! 1-SR), replica agreement, and no lost commit.
//!
//! Transactions come from the clients' completions: each committed one with the versions it
//! read (key and writer) and what it wrote; aborted ones too (a committed read of an aborted
//! write is G1a). No session order is given: P-Store promises one-copy serializability, not
//! that a client's next transaction sees its last (a proxy may answer on a voting quorum before
//! its own replica applied the writes). Each replica reports its install order per key (its
//! [`InstallLog`]); the checker takes the version order from them, so a replica that installed
//! in another order, or missed a write, fails the check. Besides, every committed write must be
//! installed at every replica of its key that reported a log: a commit a client was told of and
//! some replica never applied is a lost commit.

use crate::msg::Evidence;
use crate::replica::Installed;
use ensemble_core::{Completion, CompletionResult, Outcome, ProcessId};
use ensemble_history::{Criterion, History, Report, Transaction};
use ensemble_kv::{Key, TxnId, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// A replica's record of what it installed, in install order: the process's storage in the
/// drivers (the simulator keeps it across the run; a real node's workers share one, and write
/// each install as a JSON line to a file the harness reads back after the run).
#[derive(Clone, Debug, Default)]
pub struct InstallLog {
    entries: Arc<Mutex<Vec<Installed>>>,
    file: Option<Arc<Mutex<std::fs::File>>>,
}

impl InstallLog {
    pub fn new() -> InstallLog {
        InstallLog::default()
    }

    /// A log that also appends every install to `path` (created, or truncated).
    pub fn to_file(path: &std::path::Path) -> std::io::Result<InstallLog> {
        let file = std::fs::File::create(path)?;
        Ok(InstallLog { entries: Default::default(), file: Some(Arc::new(Mutex::new(file))) })
    }

    /// The log a real node wrote to `path`; an error names the file and the line that is wrong.
    pub fn read_file(path: &std::path::Path) -> Result<InstallLog, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("install log {}: {e}", path.display()))?;
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let entry = serde_json::from_str(line).map_err(|e| format!("install log {} line {}: {e}", path.display(), i + 1))?;
            entries.push(entry);
        }
        Ok(InstallLog { entries: Arc::new(Mutex::new(entries)), file: None })
    }

    /// What was installed, in stamp order (real workers may record out of order).
    pub fn installed(&self) -> Vec<Installed> {
        let mut v = self.entries.lock().unwrap_or_else(|e| e.into_inner()).clone();
        v.sort_by_key(|i| i.stamp);
        v
    }
}

impl ensemble_core::Storage for InstallLog {
    type Job = Installed;
    type Result = ();
    fn run(&mut self, job: &Installed) {
        if let Some(file) = &self.file {
            use std::io::Write;
            let mut line = serde_json::to_vec(job).expect("an install serializes");
            line.push(b'\n');
            // One write per install: a node stopped at the end of the run loses nothing the OS
            // was handed. A log that cannot be written fails the process loudly.
            file.lock().unwrap_or_else(|e| e.into_inner()).write_all(&line).expect("the install log is writable");
        }
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).push(job.clone());
    }
}

/// The history of a run: the completions and, by process id, each replica's install log
/// (`None` where it is not at hand).
pub fn history(completions: &[Completion<Evidence>], logs: &[Option<Vec<Installed>>]) -> History {
    let mut h = History::new();
    for c in completions {
        let CompletionResult::Done(done) = &c.result else { continue };
        let e = &done.evidence;
        let mut t = match &done.outcome {
            Outcome::Committed(_) => Transaction::committed(e.txn.0),
            Outcome::Aborted { .. } => Transaction::aborted(e.txn.0),
        };
        for r in &e.reads {
            t = t.read(&r.key.to_string(), r.writer.map(|w| w.0));
        }
        for (k, v) in &e.writes {
            t = t.write(&k.to_string(), &v.to_string());
        }
        h.add_transaction(t);
    }
    // Committed transactions no client heard of (their proxy crashed after submitting them):
    // their reads and, over every replica's log, their writes.
    let answered: BTreeSet<u64> = completions
        .iter()
        .filter_map(|c| match &c.result {
            CompletionResult::Done(d) => Some(d.evidence.txn.0),
            _ => None,
        })
        .collect();
    let mut orphans: BTreeMap<TxnId, (Vec<crate::txn::ReadRecord>, BTreeMap<Key, Value>)> = BTreeMap::new();
    for i in logs.iter().flatten().flatten().filter(|i| !answered.contains(&i.txn.0)) {
        let entry = orphans.entry(i.txn).or_insert_with(|| (i.reads.clone(), BTreeMap::new()));
        entry.1.extend(i.writes.iter().copied());
    }
    for (txn, (reads, writes)) in orphans {
        let mut t = Transaction::committed(txn.0);
        for r in &reads {
            t = t.read(&r.key.to_string(), r.writer.map(|w| w.0));
        }
        for (k, v) in &writes {
            t = t.write(&k.to_string(), &v.to_string());
        }
        h.add_transaction(t);
    }
    for (p, log) in logs.iter().enumerate() {
        let Some(log) = log else { continue };
        let replica = ProcessId(p as u32).to_string();
        let mut last: BTreeMap<Key, Value> = BTreeMap::new();
        for i in log {
            for (k, v) in &i.writes {
                h.add_install(&replica, &k.to_string(), i.txn.0);
                last.insert(*k, *v);
            }
        }
        for (k, v) in last {
            h.set_final_value(&replica, &k.to_string(), &v.to_string());
        }
    }
    h
}

/// What the check found.
#[derive(Clone, Debug)]
pub struct Checked {
    pub report: Report,
    /// Replicas whose install logs took part.
    pub logs: usize,
    /// Committed writes a replica of their key never installed: `(txn, key, replica)`.
    pub lost: Vec<(TxnId, Key, ProcessId)>,
    pub failures: Vec<String>,
    pub committed: usize,
}

impl Checked {
    pub fn passed(&self) -> bool {
        self.report.ok() && self.lost.is_empty() && self.failures.is_empty()
    }

    /// One check per line, the serializability verdict first.
    pub fn summary(&self, system: &str) -> String {
        let mut s = format!("{system}: {} transactions ({} committed): {}", self.report.transactions, self.committed, self.report);
        s += &match self.logs {
            0 => "\nreplica agreement and lost commits: not checked (no install logs)".to_string(),
            n if self.lost.is_empty() => format!("\nno lost commit: every committed write is installed at each of the {n} replicas of its key"),
            _ => {
                let (t, k, p) = self.lost[0];
                format!("\nlost commits: {} committed writes missing at a replica, the first {t}'s write of key {k} at {p}", self.lost.len())
            }
        };
        for f in &self.failures {
            s += &format!("\nprocess failed: {f}");
        }
        s
    }
}

/// Checks a run. `replicates(p, k)`: whether process `p` replicates key `k`.
pub fn check(
    completions: &[Completion<Evidence>],
    logs: &[Option<Vec<Installed>>],
    replicates: &dyn Fn(ProcessId, Key) -> bool,
    failures: Vec<String>,
) -> Checked {
    let report = ensemble_history::check(&history(completions, logs), Criterion::Ser);
    let installed: Vec<Option<BTreeSet<(TxnId, Key)>>> = logs
        .iter()
        .map(|l| l.as_ref().map(|l| l.iter().flat_map(|i| i.writes.iter().map(move |(k, _)| (i.txn, *k))).collect()))
        .collect();
    let mut lost = Vec::new();
    let mut committed = 0;
    for c in completions {
        let CompletionResult::Done(done) = &c.result else { continue };
        if !done.outcome.committed() {
            continue;
        }
        committed += 1;
        for (k, _) in &done.evidence.writes {
            for (p, set) in installed.iter().enumerate() {
                let Some(set) = set else { continue };
                let p = ProcessId(p as u32);
                if replicates(p, *k) && !set.contains(&(done.evidence.txn, *k)) {
                    lost.push((done.evidence.txn, *k, p));
                }
            }
        }
    }
    Checked { report, logs: installed.iter().flatten().count(), lost, failures, committed }
}
