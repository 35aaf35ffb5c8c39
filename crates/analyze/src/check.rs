//! Dynamic soundness check of a partition plan: run random operations of an application on
//! SQLite, record the rows each one really read and wrote, and verify that every conflict
//! observed between operations routed to different instances is one the plan allows.
//!
//! What "allowed" means is the classification's promise (Eliá §3.2, Gyro Definition 1):
//! * an operation classified local is never read from, nor written over, by an operation that
//!   runs on another instance;
//! * a commutative operation reads from no operation and no operation reads from it, and writes
//!   nothing another type writes (it may run anywhere);
//! * every row of a table placed `partitioned` by `c` that an operation touches routes, by its
//!   value of `c`, to the instance the operation runs on.
//!
//! Global operations may conflict with anything: the token orders them.
//!
//! # How rows are recorded
//! Operations run one at a time, each in its own transaction on one in-memory database opened by
//! `ensemble-sqlite` and loaded with the application's dataset. The body runs through
//! `ensemble_sqlite::access::ProbingDb`, the probes the storage's recording mode also uses for the
//! history checker: before each declared statement, a SELECT of the whole rows it will read or
//! write (the statement rewritten through sqlparser's AST, same FROM, WHERE and arguments); then
//! the statement itself, unchanged. A read touches the columns SQLite's authorizer reports the
//! statement reading, plus the row's existence; an UPDATE writes its SET columns, INSERT and
//! DELETE whole rows. Writes of aborted operations are dropped (they never happened); their reads
//! are kept.
//!
//! Not observed (see `ensemble_sqlite::access`): rows read inside subqueries, and gaps (a range
//! scan depends on the absence of rows it did not return). Statements the probes cannot express
//! (upserts, INSERT … SELECT, derived tables in FROM) are refused with an error rather than
//! checked partially.

use ensemble_app::{Application, DbError, ParamType, PartitionPlan, PlanClass, TablePlacement, TxnError};
use ensemble_app::{InstanceId, OpClass};
use ensemble_core::{ClientId, Request, Value};
use ensemble_sqlite::access::{ProbeError, Probes, ProbingDb};
use ensemble_sqlite::SqliteStorage;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq)]
pub struct CheckConfig {
    pub operations: usize,
    pub seed: u64,
    /// Instance counts to route with; a large one (above every generated value) checks
    /// partitions rather than instances.
    pub instances: Vec<u32>,
    /// Scale of the generated dataset.
    pub scale: u32,
    /// Integer parameters are drawn from `0..small` half of the time (so that operations collide)
    /// and from `0..large` otherwise.
    pub small: i64,
    pub large: i64,
}

impl Default for CheckConfig {
    fn default() -> Self {
        CheckConfig { operations: 3000, seed: 1, instances: vec![2, 3, 4096], scale: 1, small: 8, large: 256 }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckReport {
    pub operations: usize,
    pub committed: usize,
    pub aborted: usize,
    /// Row accesses recorded.
    pub reads: usize,
    pub writes: usize,
    /// Per instance count: pairs of operations on different instances that were seen to conflict
    /// (and were allowed, or are listed as violations).
    pub cross_instance_conflicts: BTreeMap<u32, usize>,
    /// Everything that contradicts the plan, each naming the operations, the row and the instances.
    pub violations: Vec<String>,
}

impl CheckReport {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} operations ({} committed, {} aborted), {} row reads and {} row writes recorded; conflicts across instances: {}",
            self.operations,
            self.committed,
            self.aborted,
            self.reads,
            self.writes,
            self.cross_instance_conflicts.iter().map(|(n, c)| format!("{c} with {n} instances")).collect::<Vec<_>>().join(", ")
        );
        if self.ok() {
            s.push_str("; every one allowed by the plan");
        } else {
            s.push_str(&format!("; {} VIOLATION(S):", self.violations.len()));
            for v in self.violations.iter().take(20) {
                s.push_str("\n  - ");
                s.push_str(v);
            }
        }
        s
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("transaction `{txn}`, statement `{stmt}`: cannot be checked: {message}")]
    Unsupported { txn: String, stmt: String, message: String },
    #[error("sqlite: {0}")]
    Sqlite(String),
    #[error("{0}")]
    Plan(String),
}

/// One row access.
#[derive(Clone, Debug)]
struct Touch {
    row: usize,
    cols: u64,
    write: bool,
    /// The row's value of its table's partitioning column, if the plan partitions the table.
    part: Option<Value>,
}

struct Op {
    txn: usize,
    params: Vec<Value>,
    touches: Vec<Touch>,
}

fn random_value(rng: &mut impl Rng, ty: ParamType, cfg: &CheckConfig) -> Value {
    let bound = if rng.random_bool(0.5) { cfg.small.max(1) } else { cfg.large.max(1) };
    match ty {
        ParamType::Int => Value::Int(rng.random_range(0..bound)),
        ParamType::Real => Value::Real(rng.random_range(0..bound) as f64),
        ParamType::Text => Value::Text(format!("v{}", rng.random_range(0..bound))),
    }
}

/// Runs the check. Deterministic for a given configuration.
pub fn check_plan(app: &Arc<Application>, plan: &PartitionPlan, cfg: &CheckConfig) -> Result<CheckReport, CheckError> {
    plan.validate(app).map_err(|e| CheckError::Plan(e.to_string()))?;
    let probes = Probes::build(app).map_err(|e| match e {
        ProbeError::Unsupported { txn, stmt, message } => CheckError::Unsupported { txn, stmt, message },
        ProbeError::Sqlite(m) => CheckError::Sqlite(m),
    })?;
    let partition_col: Vec<Option<usize>> = app
        .tables
        .iter()
        .map(|t| match plan.placement(&t.name) {
            Some(TablePlacement::Partitioned { column }) => t.columns.iter().position(|c| &c.name == column),
            _ => None,
        })
        .collect();

    let storage = SqliteStorage::open_in_memory(Arc::clone(app), InstanceId(0)).map_err(|e| CheckError::Sqlite(e.to_string()))?;
    storage.create_schema().map_err(|e| CheckError::Sqlite(e.to_string()))?;
    let data = (app.generate)(ensemble_app::DataConfig { scale: cfg.scale, seed: cfg.seed });
    storage.load(&data, |_, _, _| true).map_err(|e| CheckError::Sqlite(e.to_string()))?;
    let conn = storage.connection();

    let mut rng = rand::rngs::SmallRng::seed_from_u64(cfg.seed);
    let mut rows: HashMap<(usize, Vec<Value>), usize> = HashMap::new();
    let mut ops: Vec<Op> = Vec::with_capacity(cfg.operations);
    let mut report = CheckReport { operations: cfg.operations, ..CheckReport::default() };
    let sqlite = |e: rusqlite::Error| CheckError::Sqlite(e.to_string());
    for _ in 0..cfg.operations {
        let ti = rng.random_range(0..app.transactions.len());
        let txn = &app.transactions[ti];
        let params: Vec<Value> = txn.params.iter().map(|p| random_value(&mut rng, p.ty, cfg)).collect();
        conn.execute_batch("BEGIN IMMEDIATE").map_err(sqlite)?;
        let mut db = ProbingDb::new(conn, app, &probes, ti);
        let outcome = (txn.body)(&mut db, &params);
        let mut touches: Vec<Touch> = db
            .take_touches()
            .into_iter()
            .map(|t| {
                let next = rows.len();
                let row = *rows.entry((t.table, probes.key(t.table, &t.row).cloned().collect())).or_insert(next);
                let part = partition_col[t.table].and_then(|i| t.row.get(i).cloned());
                Touch { row, cols: t.cols, write: t.write, part }
            })
            .collect();
        match outcome {
            Ok(_) => {
                conn.execute_batch("COMMIT").map_err(sqlite)?;
                report.committed += 1;
            }
            Err(e) => {
                if let TxnError::Db(DbError::Undeclared { .. } | DbError::Arity { .. }) = &e {
                    return Err(CheckError::Plan(format!("transaction `{}` misuses its statements: {e:?}", txn.name)));
                }
                conn.execute_batch("ROLLBACK").map_err(sqlite)?;
                report.aborted += 1;
                touches.retain(|t| !t.write);
            }
        }
        report.reads += touches.iter().filter(|t| !t.write).count();
        report.writes += touches.iter().filter(|t| t.write).count();
        ops.push(Op { txn: ti, params, touches });
    }

    // Who touched each row.
    let mut by_row: Vec<Vec<(usize, usize)>> = vec![Vec::new(); rows.len()];
    for (o, op) in ops.iter().enumerate() {
        for (k, t) in op.touches.iter().enumerate() {
            by_row[t.row].push((o, k));
        }
    }
    let row_name: HashMap<usize, String> = rows
        .iter()
        .map(|((t, key), id)| (*id, format!("{}({})", app.tables[*t].name, key.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", "))))
        .collect();
    let class_of = |o: usize| plan.transactions.get(app.transactions[ops[o].txn].name).map(|p| p.class);
    let describe = |o: usize| {
        let op = &ops[o];
        format!(
            "#{o} {}({})",
            app.transactions[op.txn].name,
            op.params.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
        )
    };
    let mut violations: BTreeSet<String> = BTreeSet::new();
    // Commutative types: no reads-from in either direction, no write–write with another type.
    for (r, users) in by_row.iter().enumerate() {
        for (i, &(o1, k1)) in users.iter().enumerate() {
            for &(o2, k2) in &users[i + 1..] {
                if o1 == o2 {
                    continue;
                }
                let (t1, t2) = (&ops[o1].touches[k1], &ops[o2].touches[k2]);
                if !(t1.write || t2.write) || t1.cols & t2.cols == 0 {
                    continue;
                }
                let same_type = ops[o1].txn == ops[o2].txn;
                for (o, t) in [(o1, t1), (o2, t2)] {
                    if class_of(o) == Some(PlanClass::Commutative) {
                        let both_write = t1.write && t2.write;
                        if !(both_write && same_type) {
                            violations.insert(format!(
                                "commutative {} conflicts with {} on {} ({})",
                                describe(o),
                                describe(if o == o1 { o2 } else { o1 }),
                                row_name[&r],
                                if t.write { "it writes" } else { "it reads" }
                            ));
                        }
                    }
                }
            }
        }
    }
    for &n in &cfg.instances {
        let routes: Vec<ensemble_app::Route> = ops
            .iter()
            .enumerate()
            .map(|(o, op)| {
                let req = Request { client: ClientId(0), seq: o as u64, txn: app.transactions[op.txn].name.to_string(), params: op.params.clone() };
                plan.route(app, &req, n).map_err(|e| CheckError::Plan(e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        let inst = |o: usize| routes[o].instance.map(|i: InstanceId| i.0.to_string()).unwrap_or_else(|| "any".into());
        // Placement: a partitioned row is touched only at the instance it lives on.
        for (o, op) in ops.iter().enumerate() {
            for t in &op.touches {
                let Some(v) = &t.part else { continue };
                let home = PartitionPlan::instance_of(v, n);
                if routes[o].instance != Some(home) {
                    violations.insert(format!(
                        "with {n} instances, {} on instance {} touches {}, which lives on instance {}",
                        describe(o),
                        inst(o),
                        row_name[&t.row],
                        home.0
                    ));
                }
            }
        }
        let mut crossing = 0usize;
        for (r, users) in by_row.iter().enumerate() {
            for (i, &(o1, k1)) in users.iter().enumerate() {
                for &(o2, k2) in &users[i + 1..] {
                    let (t1, t2) = (&ops[o1].touches[k1], &ops[o2].touches[k2]);
                    if o1 == o2 || !(t1.write || t2.write) || t1.cols & t2.cols == 0 {
                        continue;
                    }
                    let same = routes[o1].instance.is_some() && routes[o1].instance == routes[o2].instance;
                    if same {
                        continue;
                    }
                    crossing += 1;
                    // Every writer whose write the other operation reads or writes over must be global.
                    for (w, tw, other) in [(o1, t1, o2), (o2, t2, o1)] {
                        if tw.write && routes[w].class == OpClass::Local {
                            violations.insert(format!(
                                "with {n} instances, local {} on instance {} writes {}, which {} on instance {} {}",
                                describe(w),
                                inst(w),
                                row_name[&r],
                                describe(other),
                                inst(other),
                                if (if w == o1 { t2 } else { t1 }).write { "writes too" } else { "reads" }
                            ));
                        }
                    }
                }
            }
        }
        report.cross_instance_conflicts.insert(n, crossing);
    }
    report.violations = violations.into_iter().collect();
    Ok(report)
}
