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
//!    writes 1..=L, nothing twice; locals that ran side by side under PostgreSQL's SSI carry
//!    their epoch and snapshot instead, and their order within the epoch is found by search,
//!    each after every writer its snapshot saw: `place_side_by_side`),
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

use ensemble_app::{Application, Dataset, InstanceId, PartitionPlan, Position, SnapshotStamp, TablePlacement};
use ensemble_belt::BeltEvidence;
use ensemble_core::{Completion, CompletionResult, Outcome, Request, Rows};
use ensemble_sqlite::{digest_of, SqliteStorage, StorageError};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

#[derive(Clone, Debug, Default, Serialize)]
pub struct ReplayReport {
    pub operations: u64,
    pub globals: u64,
    pub locals: u64,
    /// Locals that ran side by side under SSI ([`Position::SideBySide`]), and how many of them
    /// the search placed before operations that completed ahead of them.
    pub side_by_side: u64,
    pub moved: u64,
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
            let searched = if self.side_by_side > 0 {
                format!(", the {} locals that ran side by side in an order found by search ({} moved before operations that completed ahead of them)", self.side_by_side, self.moved)
            } else {
                String::new()
            };
            format!(
                "serializable: {} operations ({} global, {} local/commutative) replayed in the proof's serial order{searched}; replies and final state match",
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
        // The epoch's place; within it, the search's ([`Step::SideBySide`]).
        Position::SideBySide { instance, globals_seen, .. } => SerialKey { globals_before: globals_seen, after: 1, instance: instance.0, local_writes: 0, reader: 0 },
    }
}

/// An operation to replay and the reply the run gave it.
#[derive(Clone, Copy)]
struct Op<'a> {
    request: &'a Request,
    recorded: &'a Outcome,
}

/// One step of the replay.
enum Step<'a> {
    /// An operation whose place the positions fix; `at` names the place in messages.
    Fixed { at: String, op: Op<'a> },
    /// The locals of one epoch at one instance that ran side by side under SSI, in the order
    /// they completed: the order to replay them in is searched ([`place_side_by_side`]).
    SideBySide { at: String, ops: Vec<(Op<'a>, &'a SnapshotStamp)> },
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
    let mut side_by_side: BTreeMap<SerialKey, Vec<(Op, &SnapshotStamp)>> = BTreeMap::new();
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
            Position::SideBySide { snapshot, .. } => {
                report.locals += 1;
                report.side_by_side += 1;
                side_by_side.entry(key(position)).or_default().push((Op { request: &c.request, recorded: outcome }, snapshot));
                continue;
            }
        }
        ops.push((key(position), &c.request, outcome));
    }
    report.operations = ops.len() as u64 + side_by_side.values().map(|g| g.len() as u64).sum::<u64>();

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
    // Each epoch's side-by-side group goes where its locals' key would, before the locals
    // the positions place (an instance runs its locals one way or the other, never both).
    let mut keyed: Vec<(SerialKey, u8, Step)> =
        ops.iter().map(|(k, r, o)| (*k, 1, Step::Fixed { at: format!("{k:?}"), op: Op { request: r, recorded: o } })).collect();
    for (k, group) in side_by_side {
        keyed.push((k, 0, Step::SideBySide { at: format!("epoch {} at instance i{}", k.globals_before, k.instance), ops: group }));
    }
    keyed.sort_by_key(|(k, side, _)| (*k, *side));
    let steps: Vec<Step> = keyed.into_iter().map(|(_, _, step)| step).collect();
    replay(app, plan, dataset, &steps, instances, options, &mut report)?;
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
    let steps: Vec<Step> = ordered.iter().map(|(at, request, recorded)| Step::Fixed { at: at.clone(), op: Op { request, recorded } }).collect();
    replay(app, plan, dataset, &steps, instances, options, &mut report)?;
    Ok(report)
}

/// Replays `steps` on one fresh SQLite database, compares every reply, then every table with
/// the instances' (replicated: equal at each; partitioned: the union, no row twice).
fn replay(
    app: &Arc<Application>,
    plan: &PartitionPlan,
    dataset: &Dataset,
    steps: &[Step],
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
    for step in steps {
        let (k, Op { request, recorded }) = match step {
            Step::Fixed { at, op } => (at, *op),
            Step::SideBySide { at, ops } => {
                place_side_by_side(&replay, at, ops, report)?;
                continue;
            }
        };
        let replayed = match replay.execute_direct(request) {
            Ok(o) => o,
            Err(e) => {
                report.violations.push(format!("{} #{} `{}`: replay refused it: {e}", request.client, request.seq, request.txn));
                continue;
            }
        };
        if &replayed != recorded {
            report.violations.push(format!(
                "{} #{} `{}`{:?} at {k}: the run replied {recorded:?}, the serial replay {replayed:?}",
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

/// How far back the search may move an operation: the last `SEARCH_WINDOW` operations placed
/// stay open to reordering (behind them the replay is settled), and so does every writer since
/// the first that an operation not yet placed did not see. An operation can need to go before
/// those that committed while it ran: a few per client, or hundreds for a long reader among
/// many clients (TPC-W's best sellers at sixteen).
const SEARCH_WINDOW: usize = 256;

/// How many operations one repair of the order may replay before the search gives up on it.
const SEARCH_BUDGET: u32 = 20_000;

/// Whether the transaction stamped `a` saw the commit of the one stamped `b` (a writer).
fn saw(a: &SnapshotStamp, b: &SnapshotStamp) -> bool {
    b.txid.is_some_and(|t| Some(t) != a.txid && a.saw(t))
}

/// Replays the locals of one epoch at one instance that ran side by side under PostgreSQL's
/// SSI, in an order in which every one gives the reply it gave in the run, if the search finds
/// one. SSI promises that a serial order exists and that one can keep every writer a
/// transaction's snapshot saw before it (`ARCHITECTURE.md`, "Local writers side by side on
/// PostgreSQL"); it does not say which order. So the search places them in the order they
/// completed, each once every writer it saw is placed, and when one's replay does not give its
/// reply (it read a row as a writer placed ahead of it had not yet written it), reorders it and
/// the operations that ran beside it: first it right after the writers it saw and the writers
/// it did not see after it, then the orders nearest the one they completed in. A group replayed
/// whole in an order found this way gives the run's replies; the final state is compared at the
/// end, as for the rest of the run.
fn place_side_by_side(db: &SqliteStorage, at: &str, ops: &[(Op, &SnapshotStamp)], report: &mut ReplayReport) -> Result<(), StorageError> {
    let conn = db.connection();
    let n = ops.len();
    let mut done = vec![false; n];
    let mut unplaced_writers: BTreeSet<u64> = ops.iter().filter_map(|(_, s)| s.txid).collect();
    let mut placed: Vec<usize> = Vec::with_capacity(n);
    // `placed[..base]` lie behind the savepoint `epoch`; the rest can still be reordered.
    let mut base = 0;
    // Settling replays the open part again, so it is tried no sooner than that many placements
    // after the last try.
    let mut settle_at = 2 * SEARCH_WINDOW;
    // Operations placed without an order that gives their reply: reported once, not again as
    // replays that differ.
    let mut unmatched: Vec<usize> = Vec::new();
    let mut cursor = 0;
    let describe = |i: usize| {
        let r = ops[i].0.request;
        format!("{} #{} `{}`{:?}", r.client, r.seq, r.txn, r.params)
    };
    // An operation placed before is replayed again (behind a new savepoint, or ahead of one
    // being moved) where its reply matched: the replay is deterministic, so a difference now is
    // a fault of the check itself, reported rather than ignored.
    let mut again_differed: Vec<usize> = Vec::new();
    let mut replay_again = |p: usize| {
        if !replays_as_recorded(db, ops[p].0) {
            again_differed.push(p);
        }
    };
    conn.execute_batch("SAVEPOINT epoch")?;
    while placed.len() < n {
        // Every writer its snapshot saw is placed: what it read is there.
        let ready = |i: usize| {
            let s = ops[i].1;
            !done[i] && !unplaced_writers.range(..s.xmax).any(|&t| Some(t) != s.txid && s.saw(t))
        };
        let Some(j) = (cursor..n).find(|&i| ready(i)) else {
            let left: Vec<String> = (0..n).filter(|&i| !done[i]).take(5).map(describe).collect();
            report.violations.push(format!(
                "{at}: the {} operations left each saw a writer not yet placed, so no order keeps what each saw (first: {})",
                n - placed.len(),
                left.join(", ")
            ));
            break;
        };
        conn.execute_batch("SAVEPOINT attempt")?;
        if replays_as_recorded(db, ops[j].0) {
            conn.execute_batch("RELEASE attempt")?;
            placed.push(j);
        } else {
            conn.execute_batch("ROLLBACK TO attempt; RELEASE attempt")?;
            // What may change places with it: the operations after the last writer it saw, and
            // from the first writer it did not see on (which may follow it, though placed
            // before a writer it saw).
            let unseen_writer = |p: usize| ops[p].1.txid.is_some() && !saw(ops[j].1, ops[p].1);
            let after_seen = placed.iter().rposition(|&p| saw(ops[j].1, ops[p].1)).map_or(0, |p| p + 1);
            let first_unseen = placed.iter().position(|&p| unseen_writer(p)).unwrap_or(placed.len());
            let lo = after_seen.min(first_unseen).max(base);
            conn.execute_batch("ROLLBACK TO epoch")?;
            for &p in &placed[base..lo] {
                replay_again(p);
            }
            // Tried first: it right after the writers it saw, and the writers it did not see
            // (with whatever saw them) after it, as SSI orders a transaction before the writers
            // whose writes it missed; then the order they completed in, it last.
            let mut deferred: Vec<usize> = Vec::new();
            for &p in &placed[lo..] {
                if unseen_writer(p) || deferred.iter().any(|&d| saw(ops[p].1, ops[d].1)) {
                    deferred.push(p);
                }
            }
            let mut first_try: Vec<usize> = placed[lo..].iter().copied().filter(|p| !deferred.contains(p)).collect();
            first_try.push(j);
            first_try.extend(&deferred);
            let mut as_completed: Vec<usize> = placed[lo..].to_vec();
            as_completed.push(j);
            let mut budget = SEARCH_BUDGET;
            let mut found = None;
            for (mut pool, share) in [(first_try, SEARCH_BUDGET / 2), (as_completed, SEARCH_BUDGET)] {
                let mut order = Vec::with_capacity(pool.len());
                let allowed = share.min(budget);
                let mut left = allowed;
                let ok = search(db, ops, &mut pool, &mut order, &mut left, 0)?;
                budget -= allowed - left;
                if ok {
                    found = Some(order);
                    break;
                }
            }
            if let Some(order) = found {
                report.moved += 1;
                placed.truncate(lo);
                placed.extend(order);
            } else {
                let recorded = ops[j].0.recorded;
                for &p in &placed[lo..] {
                    replay_again(p);
                }
                let replayed = db.execute_in_savepoint(ops[j].0.request);
                report.violations.push(format!(
                    "{} in {at}: no order of it and the {} operations that ran beside it gives the run's replies (searched {} replays); the run replied {recorded:?}, replayed last {replayed:?}",
                    describe(j),
                    placed.len() - lo,
                    SEARCH_BUDGET - budget
                ));
                unmatched.push(j);
                placed.push(j);
            }
        }
        done[j] = true;
        if let Some(t) = ops[j].1.txid {
            unplaced_writers.remove(&t);
        }
        while cursor < n && done[cursor] {
            cursor += 1;
        }
        if placed.len() - base > 2 * SEARCH_WINDOW && placed.len() >= settle_at {
            // Settle all but the last window, and nothing from the first writer on that an
            // operation not yet placed did not see: that writer may have to follow it.
            let window = placed.len() - SEARCH_WINDOW;
            // Only those whose snapshot's `xmin` is not above every writer that could be
            // settled can have missed one (below `xmin`, every transaction had ended).
            let newest = placed[base..window].iter().filter_map(|&p| ops[p].1.txid).max();
            let pending: Vec<&SnapshotStamp> =
                (cursor..n).filter(|&i| !done[i]).map(|i| ops[i].1).filter(|s| newest.is_some_and(|t| s.xmin <= t)).collect();
            let unseen_by_pending = |p: usize| ops[p].1.txid.is_some_and(|t| pending.iter().any(|s| !s.saw(t)));
            let keep = placed[base..window].iter().position(|&p| unseen_by_pending(p)).map_or(window, |q| base + q);
            if keep > base {
                // Replay the rest again behind a new savepoint.
                conn.execute_batch("ROLLBACK TO epoch; RELEASE epoch")?;
                for &p in &placed[base..keep] {
                    replay_again(p);
                }
                conn.execute_batch("SAVEPOINT epoch")?;
                base = keep;
                for &p in &placed[base..] {
                    replay_again(p);
                }
            }
            settle_at = placed.len() + (placed.len() - base).max(SEARCH_WINDOW);
        }
    }
    conn.execute_batch("RELEASE epoch")?;
    again_differed.sort_unstable();
    again_differed.dedup();
    for p in again_differed.into_iter().filter(|p| !unmatched.contains(p)) {
        report.violations.push(format!("{} in {at}: replayed again where its reply had matched, it gave another (the replay is not deterministic)", describe(p)));
    }
    Ok(())
}

/// Replays `op` at the end of what is replayed so far; whether it gave the run's reply.
fn replays_as_recorded(db: &SqliteStorage, op: Op) -> bool {
    matches!(db.execute_in_savepoint(op.request), Ok(o) if &o == op.recorded)
}

/// Depth-first search for an order of `pool` (tried in the order given first) in which each
/// operation comes after every writer in the pool it saw and replays as recorded; `order` gets
/// it. Every attempt is a savepoint, taken back when it leads nowhere.
fn search(db: &SqliteStorage, ops: &[(Op, &SnapshotStamp)], pool: &mut Vec<usize>, order: &mut Vec<usize>, budget: &mut u32, depth: usize) -> Result<bool, StorageError> {
    if pool.is_empty() {
        return Ok(true);
    }
    let conn = db.connection();
    for k in 0..pool.len() {
        let x = pool[k];
        if pool.iter().any(|&y| y != x && saw(ops[x].1, ops[y].1)) {
            continue;
        }
        if *budget == 0 {
            return Ok(false);
        }
        *budget -= 1;
        let savepoint = format!("search_{depth}");
        conn.execute_batch(&format!("SAVEPOINT {savepoint}"))?;
        if replays_as_recorded(db, ops[x].0) {
            pool.remove(k);
            order.push(x);
            if search(db, ops, pool, order, budget, depth + 1)? {
                conn.execute_batch(&format!("RELEASE {savepoint}"))?;
                return Ok(true);
            }
            order.pop();
            pool.insert(k, x);
        }
        conn.execute_batch(&format!("ROLLBACK TO {savepoint}; RELEASE {savepoint}"))?;
    }
    Ok(false)
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

    /// What a shop run at one instance left: the dataset, the database after `serial` ran in
    /// that order, and each operation's reply there.
    fn shop_run(serial: &[Request]) -> (Arc<Application>, Dataset, SqliteStorage, Vec<Outcome>) {
        let app = ensemble_app::application("shop").unwrap();
        let data = (app.generate)(DataConfig { scale: 1, seed: 1 });
        let db = SqliteStorage::open_in_memory(app.clone(), InstanceId(0)).unwrap();
        db.create_schema().unwrap();
        db.load(&data, |_, _, _| true).unwrap();
        let outcomes = serial.iter().map(|r| db.execute_direct(r).unwrap()).collect();
        (app, data, db, outcomes)
    }

    fn req(seq: u64, txn: &str, params: &[i64]) -> Request {
        Request { client: ClientId(seq), seq, txn: txn.into(), params: params.iter().map(|v| Value::Int(*v)).collect() }
    }

    fn stamp(txid: Option<u64>, snapshot: &str) -> SnapshotStamp {
        SnapshotStamp::parse(txid, snapshot).unwrap()
    }

    /// Replays `setup` in its order, then `side` as the locals of one epoch that ran side by
    /// side, given in the order they completed, and compares with `db`.
    fn replay_epoch(app: &Arc<Application>, data: &Dataset, db: &mut SqliteStorage, setup: &[(&Request, &Outcome)], side: &[(&Request, &Outcome, &SnapshotStamp)]) -> ReplayReport {
        let mut steps: Vec<Step> = setup.iter().map(|(r, o)| Step::Fixed { at: format!("#{}", r.seq), op: Op { request: r, recorded: o } }).collect();
        steps.push(Step::SideBySide { at: "epoch 0".into(), ops: side.iter().map(|(r, o, s)| (Op { request: r, recorded: o }, *s)).collect() });
        let mut report = ReplayReport::default();
        let mut instances: Vec<&mut dyn InstanceState> = vec![db];
        replay(app, &PartitionPlan::centralized(app), data, &steps, &mut instances, ReplayOptions::default(), &mut report).unwrap();
        report
    }

    #[test]
    fn a_snapshot_is_read_as_postgresql_prints_it() {
        let s = stamp(Some(15), "10:16:11,14");
        assert!(s.saw(9) && s.saw(12) && s.saw(13));
        assert!(!s.saw(11) && !s.saw(14) && !s.saw(16) && !s.saw(20));
        assert_eq!(stamp(None, "10:10:").xip, Vec::<u64>::new());
        assert!(SnapshotStamp::parse(None, "10:16").is_err());
        assert!(SnapshotStamp::parse(None, "10:x:").is_err());
    }

    /// Two locals that ran side by side: `add_item` read item 5's stock before `order` took
    /// from it, and `order` completed first. The positions cannot say which came first; the
    /// search finds that `add_item` must, where replaying them as they completed fails.
    #[test]
    fn locals_that_ran_side_by_side_are_ordered_by_search() {
        let setup = [req(1, "create_cart", &[1]), req(2, "create_cart", &[2]), req(3, "add_item", &[2, 5, 3])];
        let (add, order) = (req(4, "add_item", &[1, 5, 1]), req(5, "order", &[2]));
        let serial: Vec<Request> = setup.iter().cloned().chain([add.clone(), order.clone()]).collect();
        let (app, data, mut db, outcomes) = shop_run(&serial);
        let prefix: Vec<(&Request, &Outcome)> = setup.iter().zip(&outcomes).collect();
        // Neither saw the other: both snapshots were taken before either committed.
        let (s_order, s_add) = (stamp(Some(11), "10:10:"), stamp(Some(12), "10:10:"));
        let searched = replay_epoch(&app, &data, &mut db, &prefix, &[(&order, &outcomes[4], &s_order), (&add, &outcomes[3], &s_add)]);
        assert!(searched.ok(), "{}", searched.summary());
        assert_eq!(searched.moved, 1, "`add_item` was moved before `order`");
        // In the order they completed, `add_item` replays reading the stock `order` left.
        let as_completed: Vec<(String, &Request, &Outcome)> =
            prefix.iter().copied().chain([(&order, &outcomes[4]), (&add, &outcomes[3])]).map(|(r, o)| (format!("#{}", r.seq), r, o)).collect();
        let mut instances: Vec<&mut dyn InstanceState> = vec![&mut db];
        let fixed_order = check_order(&app, &PartitionPlan::centralized(&app), &data, &as_completed, &mut instances, ReplayOptions::default()).unwrap();
        assert!(fixed_order.violations.iter().any(|v| v.contains("add_item") && v.contains("the run replied")), "{}", fixed_order.summary());
    }

    /// A local whose snapshot is older than the search window: `order` and then more than two
    /// windows of other writers completed while `add_item` ran, and it saw none of them. The
    /// window stays open back to `order`, the first writer an operation not yet placed did
    /// not see, so the search still moves `add_item` before it (with the window settled at its
    /// last `SEARCH_WINDOW` placements, as it was, `order` lay behind it and the run failed).
    #[test]
    fn a_local_whose_snapshot_is_older_than_the_search_window_is_still_moved() {
        let setup = [req(1, "create_cart", &[1]), req(2, "create_cart", &[2]), req(3, "add_item", &[2, 5, 3])];
        let (order, add) = (req(4, "order", &[2]), req(5, "add_item", &[1, 5, 1]));
        let others: Vec<Request> = (0..2 * SEARCH_WINDOW as u64 + 10).map(|k| req(6 + k, "create_cart", &[100 + k as i64])).collect();
        // The serial order: `add_item` first (it read the stock before `order` took from it).
        let serial: Vec<Request> = setup.iter().cloned().chain([add.clone(), order.clone()]).chain(others.iter().cloned()).collect();
        let (app, data, mut db, outcomes) = shop_run(&serial);
        let prefix: Vec<(&Request, &Outcome)> = setup.iter().zip(&outcomes).collect();
        // `order` (transaction 11) and the others (12 on) each saw every writer before it;
        // `add_item`'s snapshot was taken before any of them committed.
        let s_order = stamp(Some(11), "11:11:");
        let s_others: Vec<SnapshotStamp> = (0..others.len() as u64).map(|k| stamp(Some(12 + k), &format!("{0}:{0}:", 12 + k))).collect();
        let s_add = stamp(Some(12 + others.len() as u64), "11:11:");
        let mut side = vec![(&order, &outcomes[4], &s_order)];
        side.extend(others.iter().zip(&outcomes[5..]).zip(&s_others).map(|((r, o), s)| (r, o, s)));
        side.push((&add, &outcomes[3], &s_add));
        let report = replay_epoch(&app, &data, &mut db, &prefix, &side);
        assert!(report.ok(), "{}", report.summary());
        assert_eq!(report.moved, 1, "`add_item` was moved before `order` and the others");
    }

    /// A local that saw a writer which completed after another it did not see: it must go
    /// between them, so the search moves the unseen one after it (moving it earlier alone
    /// cannot work: it must follow the writer it saw).
    #[test]
    fn a_writer_a_local_did_not_see_is_moved_after_it() {
        let setup = [req(1, "create_cart", &[1]), req(2, "create_cart", &[2]), req(3, "add_item", &[2, 5, 3])];
        let (order, cart, add) = (req(4, "order", &[2]), req(5, "create_cart", &[3]), req(6, "add_item", &[3, 5, 1]));
        // The serial order: the cart, the add (before `order` took its stock), `order`.
        let serial: Vec<Request> = setup.iter().cloned().chain([cart.clone(), add.clone(), order.clone()]).collect();
        let (app, data, mut db, outcomes) = shop_run(&serial);
        let prefix: Vec<(&Request, &Outcome)> = setup.iter().zip(&outcomes).collect();
        // They completed `order`, the cart, the add; the add saw the cart, not `order`.
        let (s_order, s_cart, s_add) = (stamp(Some(11), "10:10:"), stamp(Some(12), "10:10:"), stamp(Some(13), "11:13:11"));
        let side = [(&order, &outcomes[5], &s_order), (&cart, &outcomes[3], &s_cart), (&add, &outcomes[4], &s_add)];
        let report = replay_epoch(&app, &data, &mut db, &prefix, &side);
        assert!(report.ok(), "{}", report.summary());
        assert_eq!(report.moved, 1);
    }

    /// The search replays again what it had placed before a repair; the replay is deterministic,
    /// so a reply that differs the second time is the check's own fault and is reported. A
    /// trigger makes it differ: it refuses the cart's insert once the connection has made any
    /// change since the first placement (`total_changes()` counts rolled-back changes too).
    #[test]
    fn an_operation_whose_replay_differs_the_second_time_is_reported() {
        let setup = [req(1, "create_cart", &[1]), req(2, "create_cart", &[2]), req(3, "add_item", &[2, 5, 3])];
        let (cart, order, add) = (req(4, "create_cart", &[3]), req(5, "order", &[2]), req(6, "add_item", &[3, 5, 1]));
        // The serial order: the cart, the add (before `order` took its stock), `order`.
        let serial: Vec<Request> = setup.iter().cloned().chain([cart.clone(), add.clone(), order.clone()]).collect();
        let (_, _, _, outcomes) = shop_run(&serial);
        // They completed the cart, `order`, the add; the add saw the cart, not `order`, so the
        // repair moves the add before `order` and replays the cart again beneath them.
        let (s_cart, s_order, s_add) = (stamp(Some(11), "10:10:"), stamp(Some(12), "10:10:"), stamp(Some(13), "12:13:12"));
        let ops = [
            (Op { request: &cart, recorded: &outcomes[3] }, &s_cart),
            (Op { request: &order, recorded: &outcomes[5] }, &s_order),
            (Op { request: &add, recorded: &outcomes[4] }, &s_add),
        ];
        let place = |refuse_again: bool| {
            let (_, _, db, _) = shop_run(&setup);
            if refuse_again {
                let conn = db.connection();
                let t0: i64 = conn.query_row("SELECT total_changes()", [], |r| r.get(0)).unwrap();
                conn.execute_batch(&format!(
                    "CREATE TEMP TRIGGER replayed_differently BEFORE INSERT ON carts WHEN NEW.cart_id = 3 AND total_changes() > {t0} \
                     BEGIN SELECT RAISE(ABORT, 'refused the second time'); END"
                ))
                .unwrap();
            }
            let mut report = ReplayReport::default();
            place_side_by_side(&db, "epoch 0", &ops, &mut report).unwrap();
            report
        };
        let deterministic = place(false);
        assert!(deterministic.violations.is_empty(), "{:?}", deterministic.violations);
        assert_eq!(deterministic.moved, 1, "the add was moved before `order`");
        let differs = place(true);
        assert!(
            differs.violations.iter().any(|v| v.contains("#4") && v.contains("replayed again where its reply had matched")),
            "{:?}",
            differs.violations
        );
    }

    /// A reader that saw a writer but not the writer's own predecessor (the read-only anomaly
    /// snapshot isolation allows, which SSI forbids): no order gives its reply, and the check
    /// says so rather than passing.
    #[test]
    fn a_reader_that_saw_a_later_writer_without_its_predecessor_is_caught() {
        let setup = [req(1, "create_cart", &[1]), req(2, "create_cart", &[2]), req(3, "add_item", &[2, 5, 3]), req(4, "create_cart", &[3])];
        let (order, add, late) = (req(5, "order", &[2]), req(6, "add_item", &[1, 5, 1]), req(7, "add_item", &[3, 5, 1]));
        // `add_item` ran after `order` (it read the stock `order` left); `late` replied with the
        // stock before `order`, though it saw `add_item`.
        let serial: Vec<Request> = setup.iter().cloned().chain([order.clone(), add.clone(), late.clone()]).collect();
        let (app, data, mut db, mut outcomes) = shop_run(&serial);
        let (_, _, _, before_order) = shop_run(&setup.iter().cloned().chain([late.clone()]).collect::<Vec<_>>());
        outcomes[6] = before_order[4].clone();
        assert_ne!(outcomes[6], shop_run(&serial).3[6], "the stock `late` replied is not the one after `order`");
        let (s_order, s_add, s_late) = (stamp(Some(11), "10:10:"), stamp(Some(12), "12:12:"), stamp(Some(13), "11:13:11"));
        let prefix: Vec<(&Request, &Outcome)> = setup.iter().zip(&outcomes).collect();
        let side = [(&order, &outcomes[4], &s_order), (&add, &outcomes[5], &s_add), (&late, &outcomes[6], &s_late)];
        let report = replay_epoch(&app, &data, &mut db, &prefix, &side);
        assert!(!report.ok());
        assert!(report.violations.iter().any(|v| v.contains("#7") && v.contains("no order")), "{}", report.summary());
    }
}
