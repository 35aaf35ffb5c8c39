//! A run's history in `ensemble-history`'s form, and its verdict.
//!
//! Each committed transaction becomes a history transaction: its reads with the writer of each
//! version and the value returned, its write (the value is the transaction id), its session
//! (the client) and its commit number (the transaction id: the primary's order). Each replica
//! whose storage is at hand reports its install log, key by key, with the value it ended with.
//! The checker takes the version order from the first replica's log, so a log that omits or
//! reorders a committed write, or differs from another replica's, fails the check.

use crate::protocol::Evidence;
use crate::storage::KvLog;
use ensemble_core::{Completion, CompletionResult, Outcome, ProcessId, Value};
use ensemble_history::{Criterion, History, Report, Transaction, Violation};

/// The history of a run: the clients' completions and, by process id, each replica's install
/// log (`None` where it is not at hand, as after a real run: logs live in the nodes' memory).
pub fn history(completions: &[Completion<Evidence>], logs: &[Option<KvLog>]) -> History {
    let mut h = History::new();
    for c in completions {
        let CompletionResult::Done(done) = &c.result else { continue }; // refused: nothing ran
        let e = &done.evidence;
        let mut t = match &done.outcome {
            Outcome::Committed(_) => Transaction::committed(e.txn).commit_seq(e.txn),
            Outcome::Aborted { .. } => Transaction::aborted(e.txn),
        };
        t = t.in_session(c.request.client.0);
        let rows: &[Vec<Value>] = match &done.outcome {
            Outcome::Committed(rows) => rows,
            Outcome::Aborted { .. } => &[],
        };
        for (i, (key, writer)) in e.reads.iter().enumerate() {
            t = match rows.get(i).and_then(|r| r.first()).and_then(Value::as_int) {
                Some(value) => t.read_value(&key.to_string(), *writer, &value.to_string()),
                None => t.read(&key.to_string(), *writer),
            };
        }
        h.add_transaction(t.write(&e.write.to_string(), &e.txn.to_string()));
    }
    for (p, log) in logs.iter().enumerate() {
        let Some(log) = log else { continue };
        let replica = ProcessId(p as u32).to_string();
        for (key, versions) in &log.versions {
            let key = key.to_string();
            for (txn, _) in versions {
                h.add_install(&replica, &key, *txn);
            }
            if let Some((_, value)) = versions.last() {
                h.set_final_value(&replica, &key, &value.to_string());
            }
        }
    }
    h
}

/// What the check found.
#[derive(Clone, Debug)]
pub struct Checked {
    /// Serializability of the history, and replica agreement when logs were given.
    pub report: Report,
    /// Replicas whose install logs took part.
    pub logs: usize,
    /// Processes that stopped on a broken invariant (`Process::failure`), as `p1: why`.
    pub failures: Vec<String>,
}

impl Checked {
    pub fn passed(&self) -> bool {
        self.report.ok() && self.failures.is_empty()
    }

    fn replicas_disagree(&self) -> bool {
        let replica = |v: &Violation| matches!(v, Violation::ReplicaOrder { .. } | Violation::ReplicaValue { .. } | Violation::ReplicaFinalValue { .. });
        self.report.violations.iter().any(replica)
    }

    /// The verdict, one check per line: the transaction count and SER verdict first.
    pub fn summary(&self) -> String {
        let mut s = format!("primary-backup: {} transactions: {}", self.report.transactions, self.report);
        s += &match self.logs {
            0 => "\nreplica agreement: not checked (no install logs: a real node's storage is in memory and gone; the history alone was checked)".to_string(),
            n if self.replicas_disagree() => format!("\nreplica agreement: {n} install logs, which disagree (above)"),
            n => format!("\nreplica agreement: {n} install logs, which agree"),
        };
        for f in &self.failures {
            s += &format!("\nprocess failed: {f}");
        }
        s
    }
}

/// Checks a run: the history for SER, the logs for agreement, and the processes' failures.
pub fn check(completions: &[Completion<Evidence>], logs: &[Option<KvLog>], failures: Vec<String>) -> Checked {
    let report = ensemble_history::check(&history(completions, logs), Criterion::Ser);
    Checked { report, logs: logs.iter().flatten().count(), failures }
}
