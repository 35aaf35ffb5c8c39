use crate::access::{ProbingDb, Probes, Touch};
use crate::db::{to_sql, to_value, SqliteDb};
use crate::versions::{self, row_name, Installed};
use ensemble_app::storage::txn_id;
use ensemble_app::{
    Application, ChangeKind, Dataset, ExecRole, InstanceId, Position, RowAccess, RowChange, StateUpdate, StorageJob,
    StorageResult, TxnError, TxnType,
};
use ensemble_core::{Outcome, Request, RequestError, Rows, Storage, Value};
use rusqlite::hooks::Action;
use rusqlite::session::Session;
use rusqlite::{params_from_iter, Connection, OpenFlags};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The counters that place each transaction in the serial order (see the crate docs).
pub const META_TABLE: &str = "_ensemble_meta";

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("{0}")]
    Invalid(String),
}

/// A digest of one table's rows in primary-key order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableDigest {
    pub table: String,
    pub rows: u64,
    pub hash: String,
}

/// One connection to an instance's database, running jobs for the protocol and, outside it,
/// loading data and reading digests.
pub struct SqliteStorage {
    conn: Connection,
    app: Arc<Application>,
    instance: InstanceId,
    /// Recording mode: the probes that observe each transaction's rows (see [`Self::set_recording`]).
    probes: Option<Probes>,
}

impl SqliteStorage {
    /// A private in-memory database (the simulator gives each instance one).
    pub fn open_in_memory(app: Arc<Application>, instance: InstanceId) -> Result<Self, StorageError> {
        let conn = Connection::open_in_memory()?;
        Ok(SqliteStorage { conn, app, instance, probes: None })
    }

    /// A database file, shared by the worker connections of one instance in the real runtime.
    pub fn open_file(path: &Path, app: Arc<Application>, instance: InstanceId) -> Result<Self, StorageError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        // Writers queue on SQLite's lock; a long wait is load, not an error.
        conn.busy_timeout(Duration::from_secs(60))?;
        Ok(SqliteStorage { conn, app, instance, probes: None })
    }

    /// Turns recording mode on or off (off by default). In it, every executed transaction runs
    /// its body through the probes of [`crate::access`] and reports `access: Some(RowAccess)`:
    /// the rows it read, each with the writer of the version it saw, and the rows it wrote
    /// (inserts, updates and deletes). The writer of each row's version and the order of installs
    /// are kept in the tables of [`crate::versions`], created here if missing; a global's state
    /// update carries its writer id, and applying it installs versions under that id. Fails when
    /// a declared statement cannot be probed.
    pub fn set_recording(&mut self, on: bool) -> Result<(), StorageError> {
        if !on {
            self.probes = None;
            return Ok(());
        }
        let probes = Probes::build(&self.app).map_err(|e| StorageError::Invalid(e.to_string()))?;
        versions::create_tables(&self.conn)?;
        // A probe per declared statement and the bookkeeping statements double the statements
        // in use: keep them all prepared.
        let statements: usize = self.app.transactions.iter().map(|t| t.statements.len()).sum();
        self.conn.set_prepared_statement_cache_capacity(2 * statements + 16);
        self.probes = Some(probes);
        Ok(())
    }

    pub fn recording(&self) -> bool {
        self.probes.is_some()
    }

    /// Every version this database installed, in order (empty unless it recorded): its own
    /// transactions' writes at their commits and the state updates it applied.
    pub fn install_log(&self) -> Result<Vec<Installed>, StorageError> {
        Ok(versions::install_log(&self.conn)?)
    }

    pub fn application(&self) -> &Arc<Application> {
        &self.app
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Creates the application's tables and the counters. Run once per database.
    pub fn create_schema(&self) -> Result<(), StorageError> {
        let tx = self.conn.unchecked_transaction()?;
        for t in &self.app.tables {
            tx.execute(&t.ddl, [])?;
        }
        tx.execute(
            &format!(
                "CREATE TABLE {META_TABLE} (id INTEGER PRIMARY KEY CHECK (id = 0), globals INTEGER NOT NULL, local_writes INTEGER NOT NULL)"
            ),
            [],
        )?;
        tx.execute(&format!("INSERT INTO {META_TABLE} (id, globals, local_writes) VALUES (0, 0, 0)"), [])?;
        tx.commit()?;
        Ok(())
    }

    /// Loads the rows of `data` that `keep(table, columns, row)` accepts, in one transaction.
    pub fn load(&self, data: &Dataset, keep: impl Fn(&str, &[String], &[Value]) -> bool) -> Result<u64, StorageError> {
        let tx = self.conn.unchecked_transaction()?;
        let mut n = 0;
        for t in &data.tables {
            if self.app.table(&t.table).is_none() {
                return Err(StorageError::Invalid(format!("dataset has rows for unknown table `{}`", t.table)));
            }
            let sql = format!(
                "INSERT INTO {} ({}) VALUES ({})",
                t.table,
                t.columns.join(", "),
                vec!["?"; t.columns.len()].join(", ")
            );
            let mut stmt = tx.prepare(&sql)?;
            for row in &t.rows {
                if keep(&t.table, &t.columns, row) {
                    stmt.execute(params_from_iter(row.iter().map(to_sql)))?;
                    n += 1;
                }
            }
        }
        tx.commit()?;
        Ok(n)
    }

    /// `(globals seen, local writing transactions committed)`.
    pub fn counters(&self) -> Result<(u64, u64), StorageError> {
        Ok(self.conn.query_row(&format!("SELECT globals, local_writes FROM {META_TABLE}"), [], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
        })?)
    }

    /// Every row of `table` in primary-key order.
    pub fn dump(&self, table: &str) -> Result<Rows, StorageError> {
        let t = self.app.table(table).ok_or_else(|| StorageError::Invalid(format!("unknown table `{table}`")))?;
        let mut stmt = self.conn.prepare(&format!("SELECT * FROM {} ORDER BY {}", t.name, t.primary_key.join(", ")))?;
        let n = stmt.column_count();
        let rows = stmt.query_map([], |r| (0..n).map(|i| r.get_ref(i).map(to_value)).collect::<Result<Vec<_>, _>>())?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Row count and hash of every application table, in schema order.
    pub fn digests(&self) -> Result<Vec<TableDigest>, StorageError> {
        self.app.tables.iter().map(|t| self.digest(&t.name)).collect()
    }

    pub fn digest(&self, table: &str) -> Result<TableDigest, StorageError> {
        Ok(digest_rows(table, &self.dump(table)?))
    }

    /// Runs a transaction as [`Self::execute_direct`] does, but as a savepoint, so it nests in
    /// a transaction already open and can be taken back by rolling that back: the checker's
    /// search of an order for locals that ran side by side tries operations this way.
    pub fn execute_in_savepoint(&self, request: &Request) -> Result<Outcome, RequestError> {
        let txn = self.app.check_request(request)?;
        let storage_err = |e: rusqlite::Error| RequestError::Storage { txn: request.txn.clone(), message: e.to_string() };
        self.conn.execute_batch("SAVEPOINT operation").map_err(storage_err)?;
        let outcome = run_body(&self.conn, txn, &request.params);
        let end = if matches!(outcome, Outcome::Committed(_)) { "RELEASE operation" } else { "ROLLBACK TO operation; RELEASE operation" };
        self.conn.execute_batch(end).map_err(storage_err)?;
        Ok(outcome)
    }

    /// Runs a transaction straight on the database, as the application would without Ensemble:
    /// no counters, no capture. The checker's replay and the overhead baseline use it.
    pub fn execute_direct(&self, request: &Request) -> Result<Outcome, RequestError> {
        let txn = self.app.check_request(request)?;
        let storage_err = |e: rusqlite::Error| RequestError::Storage { txn: request.txn.clone(), message: e.to_string() };
        let begin = if self.app.is_read_only(txn.name) { "BEGIN DEFERRED" } else { "BEGIN IMMEDIATE" };
        self.conn.execute_batch(begin).map_err(storage_err)?;
        let outcome = run_body(&self.conn, txn, &request.params);
        let end = if matches!(outcome, Outcome::Committed(_)) { "COMMIT" } else { "ROLLBACK" };
        self.conn.execute_batch(end).map_err(storage_err)?;
        Ok(outcome)
    }

    fn execute(&mut self, request: &Request, role: ExecRole) -> StorageResult {
        let app = Arc::clone(&self.app);
        let txn = match app.check_request(request) {
            Ok(t) => t,
            Err(e) => return StorageResult::Rejected(e),
        };
        match self.execute_checked(txn, request, role) {
            Ok(r) => r,
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                StorageResult::Failed(format!("transaction `{}`: {e}", request.txn))
            }
        }
    }

    fn execute_checked(&mut self, txn: &TxnType, request: &Request, role: ExecRole) -> Result<StorageResult, StorageError> {
        let read_only = self.app.is_read_only(txn.name);
        // A global operation takes the write lock even when read-only: its sequence number is a
        // write, and the lock is what makes commit order equal serialization order.
        let begin = if read_only && role == ExecRole::Local { "BEGIN DEFERRED" } else { "BEGIN IMMEDIATE" };
        self.conn.execute_batch(begin)?;
        let (globals, local_writes) = self.counters()?;
        match role {
            ExecRole::Local => {
                let before = self.conn.total_changes();
                self.conn.execute_batch("SAVEPOINT body")?;
                let (outcome, touches) = self.run_body(txn, &request.params);
                if !outcome.committed() {
                    self.conn.execute_batch("ROLLBACK TO body")?;
                }
                self.conn.execute_batch("RELEASE body")?;
                let wrote = matches!(outcome, Outcome::Committed(_)) && self.conn.total_changes() != before;
                // After `wrote`: the bookkeeping writes are not the transaction's.
                let access = self.record(request, outcome.committed(), &touches, None)?;
                let local_writes = if wrote {
                    self.conn.execute_batch(&format!("UPDATE {META_TABLE} SET local_writes = local_writes + 1"))?;
                    local_writes + 1
                } else {
                    local_writes
                };
                self.conn.execute_batch("COMMIT")?;
                let position = Position::Local { instance: self.instance, globals_seen: globals, local_writes, wrote };
                Ok(StorageResult::Executed { outcome, update: StateUpdate::default(), position, access, retries: 0 })
            }
            ExecRole::Global => {
                let mut session = Session::new(&self.conn)?;
                for t in &self.app.tables {
                    session.attach(Some(t.name.as_str()))?;
                }
                self.conn.execute_batch("SAVEPOINT body")?;
                let (outcome, touches) = self.run_body(txn, &request.params);
                let mut update = if !outcome.committed() {
                    self.conn.execute_batch("ROLLBACK TO body")?;
                    StateUpdate::default()
                } else {
                    capture(&mut session, &self.app)?
                };
                drop(session);
                self.conn.execute_batch("RELEASE body")?;
                let access = self.record(request, outcome.committed(), &touches, Some(&mut update))?;
                self.conn.execute_batch(&format!("UPDATE {META_TABLE} SET globals = globals + 1"))?;
                self.conn.execute_batch("COMMIT")?;
                Ok(StorageResult::Executed { outcome, update, position: Position::Global { seq: globals + 1 }, access, retries: 0 })
            }
        }
    }

    fn apply(&mut self, first_seq: u64, updates: &[StateUpdate]) -> StorageResult {
        match self.apply_checked(first_seq, updates) {
            Ok(globals_seen) => StorageResult::Applied { globals_seen, retries: 0 },
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                StorageResult::Failed(format!("applying state updates {first_seq}..{}: {e}", first_seq + updates.len() as u64))
            }
        }
    }

    fn apply_checked(&mut self, first_seq: u64, updates: &[StateUpdate]) -> Result<u64, StorageError> {
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        let (globals, _) = self.counters()?;
        if globals + 1 != first_seq {
            return Err(StorageError::Invalid(format!(
                "this database has seen {globals} global operations; the next update to apply must be {}, not {first_seq}",
                globals + 1
            )));
        }
        for (i, u) in updates.iter().enumerate() {
            let invalid = |e: StorageError| StorageError::Invalid(format!("update {} (global operation {}): {e}", i, first_seq + i as u64));
            for c in &u.changes {
                apply_change(&self.conn, &self.app, c).map_err(invalid)?;
            }
            if self.recording() {
                self.install_applied(u).map_err(invalid)?;
            }
        }
        let last = first_seq + updates.len() as u64 - 1;
        self.conn.execute(&format!("UPDATE {META_TABLE} SET globals = ?1"), [last as i64])?;
        self.conn.execute_batch("COMMIT")?;
        Ok(last)
    }
}

/// Recording mode (see [`SqliteStorage::set_recording`]).
impl SqliteStorage {
    /// Runs the body, through the probes in recording mode.
    fn run_body(&self, txn: &TxnType, params: &[Value]) -> (Outcome, Vec<Touch>) {
        let Some(probes) = &self.probes else { return (run_body(&self.conn, txn, params), Vec::new()) };
        let index = self.app.transactions.iter().position(|t| t.name == txn.name).expect("a checked request names a declared type");
        let mut db = ProbingDb::new(&self.conn, &self.app, probes, index);
        let outcome = outcome_of((txn.body)(&mut db, params));
        (outcome, db.take_touches())
    }

    /// Inside the transaction, after its body: looks up the writer of each version it read and
    /// installs its writes (when it committed). For a global, `update` is its captured state
    /// update, which gets the writer id and a change for every row written that the changeset
    /// left out (a write that changed nothing is still a version, and every replica must install
    /// it); a row the changeset has and the probes missed is a write too. `None` when not
    /// recording.
    fn record(
        &self,
        request: &Request,
        committed: bool,
        touches: &[Touch],
        update: Option<&mut StateUpdate>,
    ) -> Result<Option<RowAccess>, StorageError> {
        let Some(probes) = &self.probes else { return Ok(None) };
        let writer = txn_id(request);
        let table = |ti: usize| self.app.tables[ti].name.as_str();
        // Rows as (table index, key).
        let mut written: HashSet<(usize, String)> = HashSet::new();
        let mut read: HashSet<(usize, String)> = HashSet::new();
        let mut access = RowAccess { writer, reads: Vec::new(), writes: Vec::new() };
        // Rows written, in order of first write, with the probe's row (None: from the changeset).
        let mut writes: Vec<((usize, String), Option<&Touch>)> = Vec::new();
        for t in touches {
            let row = (t.table, probes.key_text(t.table, &t.row));
            if t.write {
                if written.insert(row.clone()) {
                    writes.push((row, Some(t)));
                }
            } else if !written.contains(&row) && !read.contains(&row) {
                // A row read before this transaction wrote it: the version of whoever wrote it last.
                let w = versions::writer_of(&self.conn, table(row.0), &row.1)?;
                access.reads.push((row_name(table(row.0), &row.1), w));
                read.insert(row);
            }
        }
        if !committed {
            return Ok(Some(access)); // its writes were rolled back
        }
        if let Some(update) = update {
            let mut changed: HashSet<(usize, String)> = HashSet::new();
            for c in &update.changes {
                let row = versions::change_key(&self.app, c)
                    .ok_or_else(|| StorageError::Invalid(format!("a change to table `{}` without its primary key", c.table)))?;
                if !written.contains(&row) {
                    writes.push((row.clone(), None));
                }
                changed.insert(row);
            }
            for (row, t) in &writes {
                if let (Some(t), false) = (t, changed.contains(row)) {
                    let schema = &self.app.tables[row.0];
                    let key = schema.primary_key.iter().cloned().zip(probes.key(row.0, &t.row).cloned()).collect();
                    update.changes.push(RowChange { table: schema.name.clone(), kind: ChangeKind::Update { key, set: Vec::new() } });
                }
            }
            update.writer = Some(writer);
        }
        for ((ti, key), _) in &writes {
            versions::install(&self.conn, table(*ti), key, writer)?;
            access.writes.push(row_name(table(*ti), key));
        }
        Ok(Some(access))
    }

    /// Installs the versions an applied state update wrote, under its writer id.
    fn install_applied(&self, u: &StateUpdate) -> Result<(), StorageError> {
        if u.changes.is_empty() {
            return Ok(());
        }
        let writer = u.writer.ok_or_else(|| StorageError::Invalid("a state update without its writer id, in recording mode".into()))?;
        for c in &u.changes {
            let (ti, key) = versions::change_key(&self.app, c)
                .ok_or_else(|| StorageError::Invalid(format!("a change to table `{}` without its primary key", c.table)))?;
            versions::install(&self.conn, &self.app.tables[ti].name, &key, writer)?;
        }
        Ok(())
    }
}

impl Storage for SqliteStorage {
    type Job = StorageJob;
    type Result = StorageResult;
    fn run(&mut self, job: &StorageJob) -> StorageResult {
        match job {
            StorageJob::Execute { request, role } => self.execute(request, *role),
            StorageJob::Apply { first_seq, updates } if updates.is_empty() => {
                StorageResult::Failed(format!("empty batch of state updates at {first_seq}"))
            }
            StorageJob::Apply { first_seq, updates } => self.apply(*first_seq, updates),
        }
    }
}

fn run_body(conn: &Connection, txn: &TxnType, params: &[Value]) -> Outcome {
    let mut db = SqliteDb { conn, txn };
    outcome_of((txn.body)(&mut db, params))
}

fn outcome_of(result: Result<Rows, TxnError>) -> Outcome {
    match result {
        Ok(rows) => Outcome::Committed(rows),
        Err(TxnError::Abort(reason)) => Outcome::body_abort(reason),
        // A statement the engine refused (a constraint, a type error) is as deterministic as the
        // data it ran on, so it is an outcome the replay must reproduce, not a storage failure.
        Err(TxnError::Db(e)) => Outcome::body_abort(format!("statement error: {e}")),
    }
}

/// Turns the session's changeset into named row changes.
fn capture(session: &mut Session<'_>, app: &Application) -> Result<StateUpdate, StorageError> {
    use rusqlite::fallible_streaming_iterator::FallibleStreamingIterator;
    let changeset = session.changeset()?;
    let mut iter = changeset.iter()?;
    let mut changes = Vec::new();
    while let Some(item) = iter.next()? {
        let op = item.op()?;
        let table = app
            .table(op.table_name())
            .ok_or_else(|| StorageError::Invalid(format!("change to unknown table `{}`", op.table_name())))?;
        let pk = item.pk()?.to_vec();
        let col = |i: usize| table.columns[i].name.clone();
        let kind = match op.code() {
            Action::SQLITE_INSERT => ChangeKind::Insert {
                row: (0..table.columns.len()).map(|i| Ok((col(i), to_value(item.new_value(i)?)))).collect::<Result<_, rusqlite::Error>>()?,
            },
            Action::SQLITE_DELETE => ChangeKind::Delete {
                key: (0..table.columns.len())
                    .filter(|i| pk[*i] != 0)
                    .map(|i| Ok((col(i), to_value(item.old_value(i)?))))
                    .collect::<Result<_, rusqlite::Error>>()?,
            },
            Action::SQLITE_UPDATE => {
                let key = (0..table.columns.len())
                    .filter(|i| pk[*i] != 0)
                    .map(|i| Ok((col(i), to_value(item.old_value(i)?))))
                    .collect::<Result<_, rusqlite::Error>>()?;
                // Unchanged columns have no new value in a changeset.
                let set = (0..table.columns.len()).filter_map(|i| item.new_value(i).ok().map(|v| (col(i), to_value(v)))).collect();
                ChangeKind::Update { key, set }
            }
            other => return Err(StorageError::Invalid(format!("unexpected change kind {other:?}"))),
        };
        changes.push(RowChange { table: table.name.clone(), kind });
    }
    Ok(StateUpdate { changes, writer: None })
}

/// Applies one row change by primary key. Exactly one row must be affected: anything else means
/// this replica diverged from the one that produced the update.
fn apply_change(conn: &Connection, app: &Application, change: &RowChange) -> Result<(), StorageError> {
    let table = app.table(&change.table).ok_or_else(|| StorageError::Invalid(format!("unknown table `{}`", change.table)))?;
    let check_cols = |cols: &[(String, Value)]| -> Result<(), StorageError> {
        match cols.iter().find(|(c, _)| !table.has_column(c)) {
            Some((c, _)) => Err(StorageError::Invalid(format!("table `{}` has no column `{c}`", table.name))),
            None => Ok(()),
        }
    };
    let (sql, args): (String, Vec<&Value>) = match &change.kind {
        ChangeKind::Insert { row } => {
            check_cols(row)?;
            let cols: Vec<&str> = row.iter().map(|(c, _)| c.as_str()).collect();
            (
                format!("INSERT INTO {} ({}) VALUES ({})", table.name, cols.join(", "), vec!["?"; cols.len()].join(", ")),
                row.iter().map(|(_, v)| v).collect(),
            )
        }
        ChangeKind::Update { key, set } => {
            check_cols(key)?;
            check_cols(set)?;
            if set.is_empty() {
                return Ok(());
            }
            let sets: Vec<String> = set.iter().map(|(c, _)| format!("{c} = ?")).collect();
            let wheres: Vec<String> = key.iter().map(|(c, _)| format!("{c} = ?")).collect();
            (
                format!("UPDATE {} SET {} WHERE {}", table.name, sets.join(", "), wheres.join(" AND ")),
                set.iter().chain(key.iter()).map(|(_, v)| v).collect(),
            )
        }
        ChangeKind::Delete { key } => {
            check_cols(key)?;
            let wheres: Vec<String> = key.iter().map(|(c, _)| format!("{c} = ?")).collect();
            (format!("DELETE FROM {} WHERE {}", table.name, wheres.join(" AND ")), key.iter().map(|(_, v)| v).collect())
        }
    };
    let mut stmt = conn.prepare_cached(&sql)?;
    let n = stmt.execute(params_from_iter(args.into_iter().map(to_sql)))?;
    if n != 1 {
        return Err(StorageError::Invalid(format!("`{sql}` changed {n} rows instead of 1")));
    }
    Ok(())
}

pub(crate) fn digest_rows(table: &str, rows: &Rows) -> TableDigest {
    let mut h = blake3::Hasher::new();
    let mut buf = Vec::new();
    for r in rows {
        buf.clear();
        for v in r {
            v.digest_into(&mut buf);
        }
        h.update(&(buf.len() as u64).to_le_bytes());
        h.update(&buf);
    }
    TableDigest { table: table.into(), rows: rows.len() as u64, hash: h.finalize().to_hex()[..16].to_string() }
}

/// Digest of an arbitrary set of rows (sorted here), for comparing a union of partitions.
pub fn digest_of(table: &str, mut rows: Rows) -> TableDigest {
    rows.sort();
    digest_rows(table, &rows)
}
