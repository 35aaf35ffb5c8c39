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
    let globals_total = global_seqs.len() as u64;
    for (i, db) in instances.iter_mut().enumerate() {
        let (seen, _) = db.counters().map_err(|e| instance_err(i, e))?;
        if seen != globals_total {
            report.violations.push(format!("instance i{i} has seen {seen} global operations, the history has {globals_total}"));
        }
    }
    let ordered: Vec<(String, &Request, &Outcome)> = ops.iter().map(|(k, r, o)| (format!("{k:?}"), *r, *o)).collect();
    replay(app, plan, dataset, &ordered, instances, options, &mut report)?;
    Ok(report)
}

/// Checks a run against a serial order another protocol built: `ordered` holds every operation
/// that ran (not refused), in that order, each with where it sits (for messages). The run
/// passes when every reply equals the replay's and every instance's final state is the replay's
/// (criteria 2 and 3 of the crate doc; the positions' own checks, 1 and 4, are the belt's).
pub fn check_order(
    app: &Arc<Application>,
    plan: &PartitionPlan,
    dataset: &Dataset,
    ordered: &[(String, &Request, &Outcome)],
    instances: &mut [&mut dyn InstanceState],
    options: ReplayOptions,
) -> Result<ReplayReport, StorageError> {
    let mut report = ReplayReport { operations: ordered.len() as u64, ..ReplayReport::default() };
    replay(app, plan, dataset, ordered, instances, options, &mut report)?;
    Ok(report)
}

/// Replays `ordered` on one fresh SQLite database, compares every reply, then every table with
/// the instances' (replicated: equal at each; partitioned: the union, no row twice).
fn replay(
    app: &Arc<Application>,
    plan: &PartitionPlan,
    dataset: &Dataset,
    ordered: &[(String, &Request, &Outcome)],
    instances: &mut [&mut dyn InstanceState],
    options: ReplayOptions,
    report: &mut ReplayReport,
) -> Result<(), StorageError> {
    let instance_err = |i: usize, e: String| StorageError::Invalid(format!("reading instance i{i} after the run: {e}"));
    let replay = SqliteStorage::open_in_memory(Arc::clone(app), InstanceId(0))?;
    if options.case_sensitive_like {
        replay.connection().pragma_update(None, "case_sensitive_like", true)?;
    }
    replay.create_schema()?;
    replay.load(dataset, |_, _, _| true)?;
    for (k, request, recorded) in ordered {
        let replayed = match replay.execute_direct(request) {
            Ok(o) => o,
            Err(e) => {
                report.violations.push(format!("{} #{} `{}`: replay refused it: {e}", request.client, request.seq, request.txn));
                continue;
            }
        };
        if &replayed != *recorded {
            report.violations.push(format!(
                "{} #{} `{}`{:?} at {k:?}: the run replied {recorded:?}, the serial replay {replayed:?}",
                request.client, request.seq, request.txn, request.params
            ));
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ensemble_app::DataConfig;
    use ensemble_core::{ClientId, Value};

    /// A protocol that hands the checker its own serial order (two-phase commit's timestamps) is
    /// held to it: two increments of one counter pass in the order they ran and fail reversed,
    /// since each reply reads the other's write.
    #[test]
    fn a_serial_order_that_is_not_the_run_s_is_caught() {
        let app = ensemble_app::application("micro").unwrap();
        let plan = PartitionPlan::centralized(&app);
        let data = (app.generate)(DataConfig { scale: 1, seed: 1 });
        let mut db = SqliteStorage::open_in_memory(app.clone(), InstanceId(0)).unwrap();
        db.create_schema().unwrap();
        db.load(&data, |_, _, _| true).unwrap();
        let bump = |seq| Request { client: ClientId(1), seq, txn: "local_op".into(), params: vec![Value::Int(0), Value::Int(0)] };
        let (first, second) = (bump(1), bump(2));
        let (o1, o2) = (db.execute_direct(&first).unwrap(), db.execute_direct(&second).unwrap());
        assert_ne!(o1, o2, "each increment reads the value it wrote");
        fn order<'a>(a: (&'a Request, &'a Outcome), b: (&'a Request, &'a Outcome)) -> Vec<(String, &'a Request, &'a Outcome)> {
            vec![("1st".to_string(), a.0, a.1), ("2nd".to_string(), b.0, b.1)]
        }
        let mut instances: Vec<&mut dyn InstanceState> = vec![&mut db];
        let ran = check_order(&app, &plan, &data, &order((&first, &o1), (&second, &o2)), &mut instances, ReplayOptions::default()).unwrap();
        assert!(ran.ok(), "{}", ran.summary());
        let reversed = check_order(&app, &plan, &data, &order((&second, &o2), (&first, &o1)), &mut instances, ReplayOptions::default()).unwrap();
        assert!(!reversed.ok());
        assert!(reversed.violations.iter().any(|v| v.contains("the run replied")), "{}", reversed.summary());
    }
}
