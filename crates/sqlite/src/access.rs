//! Which rows a transaction really reads and writes, observed while it runs.
//!
//! Two users share this module: the analyzer's dynamic soundness check (`ensemble-analyze`,
//! `check`), which runs random operations and compares the rows they touched with a plan, and
//! [`SqliteStorage`](crate::SqliteStorage) in recording mode, which reports each transaction's
//! rows to the history checker.
//!
//! # How rows are observed
//! The body runs through a [`ProbingDb`] that, before each declared statement, runs a *probe*:
//! the statement rewritten (through sqlparser's AST, never by text) into a SELECT of whole rows
//! with the same FROM and WHERE clause, and the same placeholders bound to the same arguments.
//! Then the statement itself runs, unchanged. The probes of an application are built once
//! ([`Probes::build`]).
//! * SELECT: the probe appends every column of every table it ranges over to the projection (so
//!   ORDER BY and LIMIT keep their meaning: the rows returned are the rows read); a query that
//!   aggregates or groups instead selects every row its WHERE clause matches.
//! * UPDATE, DELETE: the rows the WHERE clause matches, before the statement runs; they are
//!   written once it succeeds.
//! * INSERT … VALUES: the row each VALUES tuple will insert (its expressions evaluated by a
//!   SELECT), read for the key collision and written once the statement succeeds. The row need
//!   not exist: the read is of the key, whatever is (or is not) there.
//!
//! Columns: a read touches the columns SQLite's authorizer reports the statement reading, plus
//! the row's existence ([`ROW_BIT`]); an UPDATE writes its SET columns, INSERT and DELETE whole
//! rows. A write is reported only once its statement succeeded.
//!
//! # Limits
//! Granularity is the row. Not observed: rows read inside subqueries, and gaps (a range scan
//! depends on the absence of rows it did not return: predicate reads and phantoms are not
//! captured). Statements the probes cannot express (upserts, INSERT … SELECT, derived tables in
//! FROM, UPDATE of a primary-key column) are refused when the probes are built, with an error,
//! rather than observed partially. The INSERT probe evaluates the VALUES expressions without the
//! column's type affinity, so a key value must be bound with the column's own type.

use crate::db::{to_sql, to_value, SqliteDb};
use ensemble_app::{Application, Db, DbError, TxnType};
use ensemble_core::{Rows, Value};
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::Connection;
use sqlparser::ast::{
    AssignmentTarget, Expr, FromTable, GroupByExpr, Ident, ObjectName, ObjectNamePart, Query, Select, SelectItem, SetExpr, Statement,
    TableFactor, TableObject, TableWithJoins,
};
use sqlparser::dialect::SQLiteDialect;
use sqlparser::parser::Parser;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

/// The existence of a row, as a column bit (columns are bits `0..62` in schema order).
pub const ROW_BIT: u64 = 1 << 63;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("transaction `{txn}`, statement `{stmt}`: cannot be probed: {message}")]
    Unsupported { txn: String, stmt: String, message: String },
    #[error("sqlite: {0}")]
    Sqlite(String),
}

#[derive(Clone, Debug)]
enum ProbeKind {
    /// Columns of each table reference, appended as the last `skip_from_end` result columns.
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

/// The probes of every declared statement of an application, and the primary key of each
/// table. Built once; shared by every transaction that runs through a [`ProbingDb`].
#[derive(Clone, Debug)]
pub struct Probes {
    /// By transaction index (in `Application::transactions`), then statement name.
    by_txn: Vec<HashMap<&'static str, Probe>>,
    /// Primary-key column positions of each table, in key order.
    key_columns: Vec<Vec<usize>>,
}

/// One row access.
#[derive(Clone, Debug, PartialEq)]
pub struct Touch {
    /// Index of the table in `Application::tables`.
    pub table: usize,
    /// The whole row, every column in schema order (for an INSERT, the row it inserts).
    pub row: Vec<Value>,
    /// Columns touched, as bits, with [`ROW_BIT`].
    pub cols: u64,
    pub write: bool,
}

impl Probes {
    /// Builds the probe of every declared statement of `app`, or says which one cannot be probed.
    pub fn build(app: &Application) -> Result<Probes, ProbeError> {
        let mut prober = Prober::new(app)?;
        let mut by_txn = Vec::with_capacity(app.transactions.len());
        for t in &app.transactions {
            let mut probes = HashMap::new();
            for s in &t.statements {
                probes.insert(s.name, prober.probe(t, s)?);
            }
            by_txn.push(probes);
        }
        let key_columns = app
            .tables
            .iter()
            .map(|t| t.primary_key.iter().filter_map(|k| t.columns.iter().position(|c| c.name.eq_ignore_ascii_case(k))).collect())
            .collect();
        Ok(Probes { by_txn, key_columns })
    }

    /// The primary-key values of `row` of table `table`, in key order.
    pub fn key<'r>(&self, table: usize, row: &'r [Value]) -> impl Iterator<Item = &'r Value> + use<'_, 'r> {
        self.key_columns[table].iter().map(move |&i| &row[i])
    }

    /// The primary key of `row`, rendered by [`key_text`].
    pub fn key_text(&self, table: usize, row: &[Value]) -> String {
        key_text(self.key(table, row))
    }
}

/// A primary key as text, unambiguously: values separated by commas, integers in decimal,
/// reals with a decimal point or exponent, text quoted (`"…"`, Rust escapes), `NULL`, blobs
/// as `x'…'`. `items/3` names item 3, `order_line/7,2` a two-column key.
pub fn key_text<'v>(values: impl IntoIterator<Item = &'v Value>) -> String {
    let mut s = String::new();
    for (i, v) in values.into_iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = match v {
            Value::Real(f) => write!(s, "{f:?}"),
            other => write!(s, "{other}"),
        };
    }
    s
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

/// Builds probes, on a scratch database with the application's schema whose authorizer reports
/// the columns each statement reads.
struct Prober<'a> {
    app: &'a Application,
    scratch: Connection,
    reads: Arc<Mutex<Vec<(String, String)>>>,
}

impl<'a> Prober<'a> {
    fn new(app: &'a Application) -> Result<Self, ProbeError> {
        let mut scratch = Connection::open_in_memory().map_err(|e| ProbeError::Sqlite(e.to_string()))?;
        for t in &app.tables {
            scratch.execute(&t.ddl, []).map_err(|e| ProbeError::Sqlite(e.to_string()))?;
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
            .map_err(|e| ProbeError::Sqlite(e.to_string()))?;
        Ok(Prober { app, scratch, reads })
    }

    fn table_index(&self, name: &str) -> Option<usize> {
        self.app.tables.iter().position(|t| t.name.eq_ignore_ascii_case(name))
    }

    fn bit(&self, table: usize, col: &str) -> u64 {
        self.app.tables[table].columns.iter().position(|c| c.name.eq_ignore_ascii_case(col)).map(|i| 1u64 << i).unwrap_or(0)
    }

    fn probe(&mut self, txn: &TxnType, stmt: &ensemble_app::Statement) -> Result<Probe, ProbeError> {
        let unsupported = |message: String| ProbeError::Unsupported { txn: txn.name.into(), stmt: stmt.name.into(), message };
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
        let mut parsed = Parser::parse_sql(&SQLiteDialect {}, stmt.sql).map_err(|e| unsupported(e.to_string()))?;
        if parsed.len() != 1 {
            return Err(unsupported("not exactly one SQL statement".into()));
        }
        let (kind, sql) = match parsed.remove(0) {
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
            // Without a limit, the order does not change which rows are read; sorting would only
            // cost time (and SQLite re-prepares an ordered scan of an index prefix at each
            // binding, since the best plan depends on the value).
            if q.limit_clause.is_none() && q.fetch.is_none() {
                q.order_by = None;
            }
        }
        Ok((ProbeKind::Select { refs: refs.into_iter().map(|(t, _)| t).collect(), skip_from_end }, vec![q.to_string()]))
    }
}

/// The `Db` a body sees when its rows are observed: the declared statements, each preceded by
/// its probe. The touches accumulate in order (a statement's reads before its writes).
pub struct ProbingDb<'a> {
    inner: SqliteDb<'a>,
    app: &'a Application,
    probes: &'a HashMap<&'static str, Probe>,
    key_columns: &'a [Vec<usize>],
    touches: Vec<Touch>,
    /// Writes wait for the statement to succeed.
    pending: Vec<Touch>,
}

impl<'a> ProbingDb<'a> {
    /// Runs transaction type `txn_index` of `app` (the one `probes` was built from) on `conn`.
    pub fn new(conn: &'a Connection, app: &'a Application, probes: &'a Probes, txn_index: usize) -> ProbingDb<'a> {
        ProbingDb {
            inner: SqliteDb { conn, txn: &app.transactions[txn_index] },
            app,
            probes: &probes.by_txn[txn_index],
            key_columns: &probes.key_columns,
            touches: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// The rows touched so far, in order.
    pub fn touches(&self) -> &[Touch] {
        &self.touches
    }

    pub fn take_touches(&mut self) -> Vec<Touch> {
        std::mem::take(&mut self.touches)
    }

    fn engine(stmt: &str) -> impl Fn(rusqlite::Error) -> DbError + '_ {
        move |e| DbError::Engine { stmt: stmt.into(), message: e.to_string() }
    }

    /// A touch of `values` (a whole row of `table`), unless its key is all NULL (the NULL side
    /// of an outer join).
    fn touch(&self, table: usize, values: &[Value], cols: u64, write: bool) -> Option<Touch> {
        let key = &self.key_columns[table];
        if key.iter().all(|&i| matches!(values.get(i), None | Some(Value::Null))) {
            return None;
        }
        Some(Touch { table, row: values.to_vec(), cols, write })
    }

    fn run_probe(&mut self, stmt: &str, args: &[Value]) -> Result<(), DbError> {
        let txn = self.inner.txn;
        let Some(probe) = self.probes.get(stmt) else {
            return Err(DbError::Undeclared { txn: txn.name.into(), stmt: stmt.into() });
        };
        let engine = Self::engine(stmt);
        for (sql, binds) in probe.sql.iter().zip(&probe.binds) {
            let mut p = self.inner.conn.prepare_cached(sql).map_err(&engine)?;
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
                            if let Some(t) = self.touch(ti, &r[at..at + w], cols, false) {
                                self.touches.push(t);
                            }
                            at += w;
                        }
                    }
                }
                ProbeKind::Matched { table, written } => {
                    let cols = probe.reads.get(table).copied().unwrap_or(0) | ROW_BIT;
                    for r in &result {
                        if let Some(t) = self.touch(*table, r, cols, false) {
                            self.touches.push(t);
                        }
                        if let Some(t) = self.touch(*table, r, *written, true) {
                            self.pending.push(t);
                        }
                    }
                }
                ProbeKind::Insert { table } => {
                    let key_cols = self.key_columns[*table].iter().fold(ROW_BIT, |m, i| m | (1u64 << i));
                    let all = ((1u64 << self.app.tables[*table].columns.len()) - 1) | ROW_BIT;
                    for r in &result {
                        if let Some(x) = self.touch(*table, r, key_cols, false) {
                            self.touches.push(x);
                        }
                        if let Some(x) = self.touch(*table, r, all, true) {
                            self.pending.push(x);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl Db for ProbingDb<'_> {
    fn query(&mut self, stmt: &str, args: &[Value]) -> Result<Rows, DbError> {
        self.run_probe(stmt, args)?;
        self.inner.query(stmt, args)
    }

    fn execute(&mut self, stmt: &str, args: &[Value]) -> Result<usize, DbError> {
        self.pending.clear();
        self.run_probe(stmt, args)?;
        let n = self.inner.execute(stmt, args)?;
        let done = std::mem::take(&mut self.pending);
        self.touches.extend(done);
        Ok(n)
    }
}
