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
//! `ensemble-sqlite` and loaded with the application's dataset. The body runs through a [`Db`]
//! that, before each declared statement, runs a *probe*: the statement rewritten (through
//! sqlparser's AST, never by text) into a SELECT of whole rows with the same FROM and WHERE
//! clause, and the same placeholders bound to the same arguments. Then the statement itself runs,
//! unchanged.
//! * SELECT: the probe appends every column of every table it ranges over to the projection (so
//!   ORDER BY and LIMIT keep their meaning: the rows returned are the rows read); a query that
//!   aggregates or groups instead selects every row its WHERE clause matches.
//! * UPDATE, DELETE: the rows the WHERE clause matches, before the statement runs; they are
//!   written once it succeeds.
//! * INSERT … VALUES: the row each VALUES tuple will insert (its expressions evaluated by a
//!   SELECT), read for the key collision and written once the statement succeeds.
//!
//! Columns: a read touches the columns SQLite's authorizer reports the statement reading, plus
//! the row's existence; an UPDATE writes its SET columns, INSERT and DELETE whole rows. Writes of
//! aborted operations are dropped (they never happened); their reads are kept.
//!
//! Not observed: rows read inside subqueries, and gaps (a range scan depends on the absence of
//! rows it did not return). Statements the probes cannot express (upserts, INSERT … SELECT,
//! derived tables in FROM) are refused with an error rather than checked partially.

use crate::sql::{parse_one, Dialect};
use ensemble_app::{Application, Db, DbError, ParamType, PartitionPlan, PlanClass, TablePlacement, TxnError, TxnType};
use ensemble_app::{InstanceId, OpClass};
use ensemble_core::{ClientId, Request, Rows, Value};
use ensemble_sqlite::{to_sql, to_value, SqliteStorage};
use rand::{Rng, SeedableRng};
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::Connection;
use sqlparser::ast::{
    AssignmentTarget, Expr, FromTable, GroupByExpr, Ident, ObjectName, ObjectNamePart, Query, Select, SelectItem, SetExpr, Statement,
    TableFactor, TableObject, TableWithJoins,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

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

/// The existence of a row, as a column bit.
const ROW_BIT: u64 = 1 << 63;

#[derive(Clone, Debug)]
enum ProbeKind {
    /// Columns of each table reference, appended after `skip` leading result columns.
    Select { refs: Vec<usize>, skip_from_end: usize },
    /// Rows an UPDATE (written columns) or a DELETE (whole rows) matches.
    Matched { table: usize, written: u64 },
    /// One SELECT per VALUES tuple.
    Insert { table: usize },
}

#[derive(Clone, Debug)]
struct Probe {
    kind: ProbeKind,
    sql: Vec<String>,
    /// For each probe placeholder (in order), the 1-based index of the statement's placeholder
    /// with the same name.
    binds: Vec<Vec<usize>>,
    /// Columns SQLite reads, per table index.
    reads: HashMap<usize, u64>,
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

fn col_ident(alias: &str, col: &str) -> Expr {
    Expr::CompoundIdentifier(vec![Ident::new(alias), Ident::new(col)])
}

fn single_name(n: &ObjectName) -> Option<String> {
    match n.0.as_slice() {
        [ObjectNamePart::Identifier(i)] => Some(i.value.clone()),
        _ => None,
    }
}

/// Builds the probes of every declared statement.
struct Prober<'a> {
    app: &'a Application,
    scratch: Connection,
    reads: Arc<Mutex<Vec<(String, String)>>>,
}

impl<'a> Prober<'a> {
    fn new(app: &'a Application) -> Result<Self, CheckError> {
        let mut scratch = Connection::open_in_memory().map_err(|e| CheckError::Sqlite(e.to_string()))?;
        for t in &app.tables {
            scratch.execute(&t.ddl, []).map_err(|e| CheckError::Sqlite(e.to_string()))?;
        }
        let reads: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let sink = Arc::clone(&reads);
        scratch
            .authorizer(Some(move |ctx: AuthContext<'_>| {
                if let AuthAction::Read { table_name, column_name } = ctx.action {
                    if let Ok(mut v) = sink.lock() {
                        v.push((table_name.to_string(), column_name.to_string()));
                    }
                }
                Authorization::Allow
            }))
            .map_err(|e| CheckError::Sqlite(e.to_string()))?;
        Ok(Prober { app, scratch, reads })
    }

    fn table_index(&self, name: &str) -> Option<usize> {
        self.app.tables.iter().position(|t| t.name.eq_ignore_ascii_case(name))
    }

    fn bit(&self, table: usize, col: &str) -> u64 {
        self.app.tables[table].columns.iter().position(|c| c.name.eq_ignore_ascii_case(col)).map(|i| 1u64 << i).unwrap_or(0)
    }

    fn probe(&mut self, txn: &TxnType, stmt: &ensemble_app::Statement) -> Result<Probe, CheckError> {
        let unsupported = |message: String| CheckError::Unsupported { txn: txn.name.into(), stmt: stmt.name.into(), message };
        for t in &self.app.tables {
            if t.columns.len() >= 63 {
                return Err(unsupported(format!("table `{}` has more than 62 columns", t.name)));
            }
        }
        // Columns SQLite reads, from its authorizer while preparing the statement.
        if let Ok(mut v) = self.reads.lock() {
            v.clear();
        }
        self.scratch.prepare(stmt.sql).map_err(|e| unsupported(e.to_string()))?;
        let mut reads: HashMap<usize, u64> = HashMap::new();
        for (t, c) in self.reads.lock().map(|v| v.clone()).unwrap_or_default() {
            if let Some(ti) = self.table_index(&t) {
                *reads.entry(ti).or_default() |= self.bit(ti, &c);
            }
        }
        let parsed = parse_one(stmt.sql, Dialect::Sqlite).map_err(|e| unsupported(e.message))?;
        let (kind, sql) = match parsed {
            Statement::Query(q) => self.select_probe(*q).map_err(unsupported)?,
            Statement::Update(u) => {
                if u.from.is_some() || !u.table.joins.is_empty() || u.returning.is_some() {
                    return Err(unsupported("UPDATE with FROM, joins or RETURNING".into()));
                }
                let TableFactor::Table { name, alias, .. } = &u.table.relation else {
                    return Err(unsupported("UPDATE of something that is not a table".into()));
                };
                let ti = single_name(name).and_then(|n| self.table_index(&n)).ok_or_else(|| unsupported("unknown table".into()))?;
                let mut written = 0;
                for a in &u.assignments {
                    let AssignmentTarget::ColumnName(n) = &a.target else {
                        return Err(unsupported("tuple assignment".into()));
                    };
                    let col = n.0.last().and_then(|p| p.as_ident()).map(|i| i.value.clone()).unwrap_or_default();
                    if self.app.tables[ti].primary_key.iter().any(|k| k.eq_ignore_ascii_case(&col)) {
                        return Err(unsupported("an UPDATE of a primary-key column".into()));
                    }
                    written |= self.bit(ti, &col);
                }
                let sql = self.rows_probe(ti, alias.as_ref().map(|a| a.name.value.clone()), u.selection.clone());
                (ProbeKind::Matched { table: ti, written }, vec![sql])
            }
            Statement::Delete(d) => {
                let (FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from)) = &d.from;
                let [TableWithJoins { relation: TableFactor::Table { name, alias, .. }, joins }] = from.as_slice() else {
                    return Err(unsupported("DELETE from several tables".into()));
                };
                if !joins.is_empty() || d.using.is_some() || d.limit.is_some() || d.returning.is_some() {
                    return Err(unsupported("DELETE with joins, USING, LIMIT or RETURNING".into()));
                }
                let ti = single_name(name).and_then(|n| self.table_index(&n)).ok_or_else(|| unsupported("unknown table".into()))?;
                let sql = self.rows_probe(ti, alias.as_ref().map(|a| a.name.value.clone()), d.selection.clone());
                (ProbeKind::Matched { table: ti, written: ((1u64 << self.app.tables[ti].columns.len()) - 1) | ROW_BIT }, vec![sql])
            }
            Statement::Insert(ins) => {
                if ins.on.is_some() || ins.or.is_some() || ins.replace_into || ins.returning.is_some() {
                    return Err(unsupported("upserts, INSERT OR …, REPLACE and RETURNING".into()));
                }
                let TableObject::TableName(name) = &ins.table else {
                    return Err(unsupported("INSERT into a table function".into()));
                };
                let ti = single_name(name).and_then(|n| self.table_index(&n)).ok_or_else(|| unsupported("unknown table".into()))?;
                let table = &self.app.tables[ti];
                let columns: Vec<String> = if ins.columns.is_empty() {
                    table.columns.iter().map(|c| c.name.clone()).collect()
                } else {
                    ins.columns.iter().map(|c| c.0.last().and_then(|p| p.as_ident()).map(|i| i.value.clone()).unwrap_or_default()).collect()
                };
                let Some(SetExpr::Values(values)) = ins.source.as_ref().map(|q| q.body.as_ref()) else {
                    return Err(unsupported("INSERT without VALUES".into()));
                };
                let mut sqls = Vec::new();
                for row in &values.rows {
                    let exprs: Vec<String> = table
                        .columns
                        .iter()
                        .map(|c| {
                            columns.iter().position(|x| x.eq_ignore_ascii_case(&c.name)).and_then(|i| row.get(i)).map(|e| e.to_string()).unwrap_or_else(|| "NULL".into())
                        })
                        .collect();
                    sqls.push(format!("SELECT {}", exprs.join(", ")));
                }
                (ProbeKind::Insert { table: ti }, sqls)
            }
            _ => return Err(unsupported("not a SELECT, INSERT, UPDATE or DELETE".into())),
        };
        // Bind the probe's placeholders by name to the statement's.
        let original = self.scratch.prepare(stmt.sql).map_err(|e| unsupported(e.to_string()))?;
        let mut binds = Vec::new();
        for s in &sql {
            let p = self.scratch.prepare(s).map_err(|e| unsupported(format!("probe `{s}`: {e}")))?;
            let mut b = Vec::new();
            for j in 1..=p.parameter_count() {
                let name = p.parameter_name(j).ok_or_else(|| unsupported("an unnamed placeholder".into()))?;
                b.push(original.parameter_index(name).ok().flatten().ok_or_else(|| unsupported(format!("probe placeholder {name}")))?);
            }
            binds.push(b);
        }
        Ok(Probe { kind, sql, binds, reads })
    }

    /// `SELECT <every column> FROM table [alias] WHERE …`.
    fn rows_probe(&self, ti: usize, alias: Option<String>, selection: Option<Expr>) -> String {
        let t = &self.app.tables[ti];
        let a = alias.clone().unwrap_or_else(|| t.name.clone());
        let cols: Vec<String> = t.columns.iter().map(|c| col_ident(&a, &c.name).to_string()).collect();
        let mut sql = format!("SELECT {} FROM {}", cols.join(", "), t.name);
        if let Some(al) = alias {
            sql.push_str(&format!(" AS {al}"));
        }
        if let Some(w) = selection {
            sql.push_str(&format!(" WHERE {w}"));
        }
        sql
    }

    fn select_probe(&self, mut q: Query) -> Result<(ProbeKind, Vec<String>), String> {
        if q.with.is_some() {
            return Err("WITH".into());
        }
        let SetExpr::Select(s) = q.body.as_mut() else {
            return Err("set operations".into());
        };
        let s: &mut Select = s;
        let mut refs: Vec<(usize, String)> = Vec::new();
        for twj in &s.from {
            for tf in std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation)) {
                let TableFactor::Table { name, alias, .. } = tf else {
                    return Err("a FROM item that is not a table".into());
                };
                let n = single_name(name).ok_or("a qualified table name")?;
                let ti = self.table_index(&n).ok_or("unknown table")?;
                refs.push((ti, alias.as_ref().map(|a| a.name.value.clone()).unwrap_or(n)));
            }
        }
        let appended: Vec<SelectItem> = refs
            .iter()
            .flat_map(|(ti, a)| self.app.tables[*ti].columns.iter().map(move |c| SelectItem::UnnamedExpr(col_ident(a, &c.name))))
            .collect();
        let aggregates = s.distinct.is_some()
            || s.having.is_some()
            || !matches!(&s.group_by, GroupByExpr::Expressions(v, _) if v.is_empty())
            || s.projection.iter().any(|i| match i {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => matches!(e, Expr::Function(_)),
                _ => false,
            });
        let skip_from_end = appended.len();
        if aggregates {
            // Every row the WHERE clause matches is read.
            s.projection = appended;
            s.distinct = None;
            s.having = None;
            s.group_by = GroupByExpr::Expressions(vec![], vec![]);
            q.order_by = None;
            q.limit_clause = None;
            q.fetch = None;
        } else {
            s.projection.extend(appended);
        }
        Ok((ProbeKind::Select { refs: refs.into_iter().map(|(t, _)| t).collect(), skip_from_end }, vec![q.to_string()]))
    }
}

/// The `Db` the body sees: the declared statements, each preceded by its probe.
struct RecordingDb<'a> {
    conn: &'a Connection,
    app: &'a Application,
    txn: &'a TxnType,
    probes: &'a HashMap<(usize, String), Probe>,
    txn_index: usize,
    rows: &'a mut HashMap<(usize, Vec<Value>), usize>,
    partition_col: &'a [Option<usize>],
    touches: Vec<Touch>,
    /// Writes wait for the statement to succeed.
    pending: Vec<Touch>,
}

impl RecordingDb<'_> {
    fn engine(stmt: &str) -> impl Fn(rusqlite::Error) -> DbError + '_ {
        move |e| DbError::Engine { stmt: stmt.into(), message: e.to_string() }
    }

    fn row_touch(&mut self, table: usize, values: &[Value], cols: u64, write: bool) -> Option<Touch> {
        let t = &self.app.tables[table];
        let key: Option<Vec<Value>> = t
            .primary_key
            .iter()
            .map(|k| t.columns.iter().position(|c| &c.name == k).and_then(|i| values.get(i)).cloned())
            .collect();
        let key = key?;
        if key.iter().all(|v| matches!(v, Value::Null)) {
            return None; // the NULL side of an outer join
        }
        let next = self.rows.len();
        let row = *self.rows.entry((table, key)).or_insert(next);
        let part = self.partition_col[table].and_then(|i| values.get(i).cloned());
        Some(Touch { row, cols, write, part })
    }

    fn run_probe(&mut self, stmt: &str, args: &[Value]) -> Result<(), DbError> {
        let Some(probe) = self.probes.get(&(self.txn_index, stmt.to_string())) else {
            return Err(DbError::Undeclared { txn: self.txn.name.into(), stmt: stmt.into() });
        };
        let engine = Self::engine(stmt);
        for (sql, binds) in probe.sql.iter().zip(&probe.binds) {
            let mut p = self.conn.prepare_cached(sql).map_err(&engine)?;
            for (j, i) in binds.iter().enumerate() {
                let v = args.get(i - 1).ok_or(DbError::Arity { stmt: stmt.into(), expected: *i, got: args.len() })?;
                p.raw_bind_parameter(j + 1, to_sql(v)).map_err(&engine)?;
            }
            let n = p.column_count();
            let mut result: Vec<Vec<Value>> = Vec::new();
            let mut rows = p.raw_query();
            while let Some(r) = rows.next().map_err(&engine)? {
                result.push((0..n).map(|i| r.get_ref(i).map(to_value)).collect::<Result<_, _>>().map_err(&engine)?);
            }
            drop(rows);
            match &probe.kind {
                ProbeKind::Select { refs, skip_from_end } => {
                    for r in &result {
                        let mut at = r.len() - skip_from_end;
                        for &ti in refs {
                            let w = self.app.tables[ti].columns.len();
                            let cols = probe.reads.get(&ti).copied().unwrap_or(0) | ROW_BIT;
                            if let Some(t) = self.row_touch(ti, &r[at..at + w], cols, false) {
                                self.touches.push(t);
                            }
                            at += w;
                        }
                    }
                }
                ProbeKind::Matched { table, written } => {
                    let cols = probe.reads.get(table).copied().unwrap_or(0) | ROW_BIT;
                    for r in &result {
                        if let Some(t) = self.row_touch(*table, r, cols, false) {
                            self.touches.push(t);
                        }
                        if let Some(t) = self.row_touch(*table, r, *written, true) {
                            self.pending.push(t);
                        }
                    }
                }
                ProbeKind::Insert { table } => {
                    let t = &self.app.tables[*table];
                    let key_cols = t
                        .primary_key
                        .iter()
                        .filter_map(|k| t.columns.iter().position(|c| &c.name == k))
                        .fold(ROW_BIT, |m, i| m | (1u64 << i));
                    let all = ((1u64 << t.columns.len()) - 1) | ROW_BIT;
                    for r in &result {
                        if let Some(x) = self.row_touch(*table, r, key_cols, false) {
                            self.touches.push(x);
                        }
                        if let Some(x) = self.row_touch(*table, r, all, true) {
                            self.pending.push(x);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn prepare(&self, stmt: &str, args: &[Value]) -> Result<rusqlite::CachedStatement<'_>, DbError> {
        let decl = self.txn.statement(stmt).ok_or_else(|| DbError::Undeclared { txn: self.txn.name.into(), stmt: stmt.into() })?;
        let engine = Self::engine(stmt);
        let mut p = self.conn.prepare_cached(decl.sql).map_err(&engine)?;
        if p.parameter_count() != args.len() {
            return Err(DbError::Arity { stmt: stmt.into(), expected: p.parameter_count(), got: args.len() });
        }
        for (i, a) in args.iter().enumerate() {
            p.raw_bind_parameter(i + 1, to_sql(a)).map_err(&engine)?;
        }
        Ok(p)
    }
}

impl Db for RecordingDb<'_> {
    fn query(&mut self, stmt: &str, args: &[Value]) -> Result<Rows, DbError> {
        self.run_probe(stmt, args)?;
        let engine = Self::engine(stmt);
        let mut p = self.prepare(stmt, args)?;
        let n = p.column_count();
        let mut rows = p.raw_query();
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(&engine)? {
            out.push((0..n).map(|i| r.get_ref(i).map(to_value)).collect::<Result<_, _>>().map_err(&engine)?);
        }
        Ok(out)
    }

    fn execute(&mut self, stmt: &str, args: &[Value]) -> Result<usize, DbError> {
        self.pending.clear();
        self.run_probe(stmt, args)?;
        let n = {
            let mut p = self.prepare(stmt, args)?;
            p.raw_execute().map_err(Self::engine(stmt))?
        };
        let done = std::mem::take(&mut self.pending);
        self.touches.extend(done);
        Ok(n)
    }
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
    let mut prober = Prober::new(app)?;
    let mut probes: HashMap<(usize, String), Probe> = HashMap::new();
    for (ti, t) in app.transactions.iter().enumerate() {
        for s in &t.statements {
            probes.insert((ti, s.name.to_string()), prober.probe(t, s)?);
        }
    }
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
        let mut db = RecordingDb {
            conn,
            app,
            txn,
            probes: &probes,
            txn_index: ti,
            rows: &mut rows,
            partition_col: &partition_col,
            touches: Vec::new(),
            pending: Vec::new(),
        };
        let outcome = (txn.body)(&mut db, &params);
        let mut touches = std::mem::take(&mut db.touches);
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
