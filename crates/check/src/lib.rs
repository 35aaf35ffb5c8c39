//! Serializability checking by replay.
//!
//! The Conveyor Belt's proof (Eliá appendix, Gyro appendix) builds a serial order: global
//! operations in token order, and each local operation right after exactly the global updates its
//! instance had seen when it ran, in its instance's commit order. Every reply carries that
//! position ([`Position`]), read by the database inside the operation's own transaction, so the
//! order can be rebuilt after the run. This crate rebuilds it, replays it on one fresh database
//! holding the whole initial dataset, and checks that
//!
//! 1. the positions form a serial order (global sequence numbers 1..=G, each instance's local
//!    writes 1..=L, nothing twice),
//! 2. every operation's reply in the run equals its reply in the replay,
//! 3. every replicated table is identical at every instance and in the replay, and the union of
//!    the instances' partitions of each partitioned table equals the replay's table, with no row
//!    at two instances,
//! 4. every instance has seen every global operation.
//!
//! A run that passes is serializable: its replies and final state are those of a serial
//! execution. The check needs no knowledge of the token beyond the positions, so any protocol
//! over the SQL storage contract that reports positions reuses it. It is the second, independent
//! oracle beside the dependency-graph checker (`ensemble-history`), which the same runs also pass
//! when they record what each transaction read and wrote.

use ensemble_app::{Application, Dataset, InstanceId, PartitionPlan, Position, TablePlacement};
use ensemble_belt::BeltEvidence;
use ensemble_core::{Completion, CompletionResult, Outcome, Request, Rows};
use ensemble_sqlite::{digest_of, SqliteStorage, StorageError};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Clone, Debug, Default, Serialize)]
pub struct ReplayReport {
    pub operations: u64,
    pub globals: u64,
    pub locals: u64,
    /// Everything that is wrong, each naming the operation or table. Empty when the run passed.
    pub violations: Vec<String>,
    /// Per table: `(rows in the replay, verdict)`.
    pub tables: BTreeMap<String, (u64, String)>,
}

impl ReplayReport {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    pub fn summary(&self) -> String {
        if self.ok() {
            format!(
                "serializable: {} operations ({} global, {} local/commutative) replayed in the proof's serial order; replies and final state match",
                self.operations, self.globals, self.locals
            )
        } else {
            let mut s = format!("NOT serializable: {} violation(s)", self.violations.len());
            for v in self.violations.iter().take(20) {
                s.push_str("\n  - ");
                s.push_str(v);
            }
            s
        }
    }
}

/// Where an operation sits in the serial order: after global `k`, then by instance and commit
/// order (a local writer `j` before the reads that saw `j` writes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct SerialKey {
    globals_before: u64,
    /// 0 for the global operation `globals_before` itself, 1 for locals placed after it.
    after: u8,
    instance: u32,
    local_writes: u64,
    reader: u8,
}

fn key(p: &Position) -> SerialKey {
    match *p {
        Position::Global { seq } => SerialKey { globals_before: seq, after: 0, instance: 0, local_writes: 0, reader: 0 },
        Position::Local { instance, globals_seen, local_writes, wrote } => {
            SerialKey { globals_before: globals_seen, after: 1, instance: instance.0, local_writes, reader: u8::from(!wrote) }
        }
    }
}

/// What the check reads of an instance's database after the run, whatever the backend.
pub trait InstanceState {
    /// `(globals seen, local writing transactions committed)`.
    fn counters(&mut self) -> Result<(u64, u64), String>;
    /// Every row of `table`.
    fn dump(&mut self, table: &str) -> Result<Rows, String>;
}

impl InstanceState for SqliteStorage {
    fn counters(&mut self) -> Result<(u64, u64), String> {
        SqliteStorage::counters(self).map_err(|e| e.to_string())
    }
    fn dump(&mut self, table: &str) -> Result<Rows, String> {
        SqliteStorage::dump(self, table).map_err(|e| e.to_string())
    }
}

/// How the replay on SQLite must behave to agree with the engine the run used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayOptions {
    /// `LIKE` compares case-sensitively, as on PostgreSQL and on MariaDB with a binary
    /// collation; SQLite's own `LIKE` ignores ASCII case.
    pub case_sensitive_like: bool,
}

/// Checks a run. `history` holds every completion of the run (errors are skipped: they ran
/// nothing); `instances[i]` is instance `i`'s database after the run.
pub fn check(
    app: &Arc<Application>,
    plan: &PartitionPlan,
    dataset: &Dataset,
    history: &[Completion<BeltEvidence>],
    instances: &mut [&mut dyn InstanceState],
    options: ReplayOptions,
) -> Result<ReplayReport, StorageError> {
    let instance_err = |i: usize, e: String| StorageError::Invalid(format!("reading instance i{i} after the run: {e}"));
    let mut report = ReplayReport::default();
    let mut ops: Vec<(SerialKey, &Request, &Outcome)> = Vec::new();
    let mut global_seqs = Vec::new();
    let mut local_writes: BTreeMap<InstanceId, Vec<u64>> = BTreeMap::new();
    for c in history {
        let CompletionResult::Done(done) = &c.result else { continue };
        let (outcome, position) = (&done.outcome, &done.evidence.position);
        match position {
            Position::Global { seq } => {
                report.globals += 1;
                global_seqs.push(*seq);
            }
            Position::Local { instance, local_writes: j, wrote, .. } => {
                report.locals += 1;
                if *wrote {
                    local_writes.entry(*instance).or_default().push(*j);
                }
            }
        }
        ops.push((key(position), &c.request, outcome));
    }
    report.operations = ops.len() as u64;

    global_seqs.sort_unstable();
    for (i, s) in global_seqs.iter().enumerate() {
        if *s != i as u64 + 1 {
            report.violations.push(format!(
                "global sequence numbers are not 1..={}: position {} holds {s} (a global operation without a reply, or two with one number)",
                global_seqs.len(),
                i + 1
            ));
            break;
        }
    }
    for (instance, mut js) in local_writes {
        js.sort_unstable();
        if let Some((i, j)) = js.iter().enumerate().find(|(i, j)| **j != *i as u64 + 1) {
            report.violations.push(format!("instance {instance}: local write number {j} at position {} of 1..={}", i + 1, js.len()));
        }
    }

    ops.sort_by_key(|(k, r, _)| (*k, r.client, r.seq));
    let replay = SqliteStorage::open_in_memory(Arc::clone(app), InstanceId(0))?;
    if options.case_sensitive_like {
        replay.connection().pragma_update(None, "case_sensitive_like", true)?;
    }
    replay.create_schema()?;
    replay.load(dataset, |_, _, _| true)?;
    for (k, request, recorded) in &ops {
        let replayed = match replay.execute_direct(request) {
            Ok(o) => o,
            Err(e) => {
                report.violations.push(format!("{} #{} `{}`: replay refused it: {e}", request.client, request.seq, request.txn));
                continue;
            }
        };
        if &&replayed != recorded {
            report.violations.push(format!(
                "{} #{} `{}`{:?} at {k:?}: the run replied {recorded:?}, the serial replay {replayed:?}",
                request.client, request.seq, request.txn, request.params
            ));
        }
    }

    let globals_total = global_seqs.len() as u64;
    for (i, db) in instances.iter_mut().enumerate() {
        let (seen, _) = db.counters().map_err(|e| instance_err(i, e))?;
        if seen != globals_total {
            report.violations.push(format!("instance i{i} has seen {seen} global operations, the history has {globals_total}"));
        }
    }
    for table in &app.tables {
        let expected = replay.dump(&table.name)?;
        let want = digest_of(&table.name, expected.clone());
        let verdict = match plan.placement(&table.name) {
            Some(TablePlacement::Partitioned { .. }) => {
                let mut union: Rows = Vec::new();
                for (i, db) in instances.iter_mut().enumerate() {
                    union.extend(db.dump(&table.name).map_err(|e| instance_err(i, e))?);
                }
                let n = union.len();
                let got = digest_of(&table.name, union.clone());
                union.sort();
                union.dedup();
                if union.len() != n {
                    report.violations.push(format!("table `{}`: {} row(s) held by more than one instance", table.name, n - union.len()));
                }
                if got != want {
                    report.violations.push(format!(
                        "table `{}`: the union of the partitions ({} rows, {}) differs from the replay ({} rows, {})",
                        table.name, got.rows, got.hash, want.rows, want.hash
                    ));
                    "partitions differ".to_string()
                } else {
                    "union of partitions matches".to_string()
                }
            }
            _ => {
                let mut ok = true;
                for (i, db) in instances.iter_mut().enumerate() {
                    let got = digest_of(&table.name, db.dump(&table.name).map_err(|e| instance_err(i, e))?);
                    if got != want {
                        ok = false;
                        report.violations.push(format!(
                            "table `{}` at instance i{i} ({} rows, {}) differs from the replay ({} rows, {})",
                            table.name, got.rows, got.hash, want.rows, want.hash
                        ));
                    }
                }
                if ok { "identical at every instance".to_string() } else { "replicas differ".to_string() }
            }
        };
        report.tables.insert(table.name.clone(), (want.rows, verdict));
    }
    Ok(report)
}
