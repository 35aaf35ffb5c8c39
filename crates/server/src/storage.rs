//! The storage contract over one server database: what `ensemble-sqlite` does for SQLite, through
//! a PostgreSQL or MariaDB client connection.

use crate::conn::{placeholder, Conn, ConnError, OpenError};
use crate::dialect::{ident, idents, key_lock_statement, Capture, ChangeSort, Engine, KeyLock, Partner, Translated, TwoPhaseLock};
use ensemble_app::{
    Application, ChangeKind, Dataset, Db, DbError, ExecRole, InstanceId, Position, RowChange, SnapshotStamp, StateUpdate, StorageJob, StorageResult,
    TxnError, TxnType,
};
use ensemble_core::{Outcome, Request, RequestError, Rows, Storage, Value};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The counters that place each transaction in the serial order, as in SQLite's backend.
pub const META_TABLE: &str = "_ensemble_meta";

/// MariaDB: one row per storage, the mark of the last transaction it committed (and, from the
/// last writer that took the lock last, the counters as it left them), written inside the
/// transaction just before COMMIT ([`ServerStorage::commit`]). MariaDB cannot be asked whether a transaction committed; its own
/// row in the database can.
pub const COMMITS_TABLE: &str = "_ensemble_commits";

/// PostgreSQL, local writers side by side: the prepared statement that marks a commit in the
/// storage's own table ([`ServerStorage::commit`]).
const MARK_SIDE_BY_SIDE: &str = "ensemble_mark_side_by_side";

/// How often one transaction is run again after the server chose it as a victim before the
/// storage gives up on it. On PostgreSQL writers at an instance queue on one lock, so a victim
/// is rare; on MariaDB writers overlap and deadlock now and then, each victim backing off
/// further; a transaction that keeps losing is a bug worth seeing.
const MAX_RETRIES: u32 = 100;

/// How many times a transaction run without a node ([`ServerStorage::execute_direct`]) may be
/// a victim in a row before the overhead figure gives up on it. An application keeps trying
/// a transaction the server made a victim; with the back-off's cap (a random pause of up to
/// 6.4 ms) this bound is half a minute or so of tries, kept only so that a livelock ends the
/// figure rather than hangs it. (At four clients the direct paths on PostgreSQL see about 150
/// serialization failures per 1000 operations, and one `order` was once a victim 100 times in
/// a row, [`MAX_RETRIES`], which ended the figure.)
const DIRECT_MAX_RETRIES: u32 = 10_000;

/// A victim runs again at once this many times: often the transaction that won the conflict has
/// committed by then (PostgreSQL reports a write conflict only once it has), so a fresh start
/// usually succeeds.
const IMMEDIATE_RETRIES: u32 = 3;

/// Then it backs off first up to this many microseconds, about one short transaction's time, so
/// that a victim that keeps meeting the same conflict lets the others through (a direct run
/// with 4 threads once gave up after 100 immediate retries); at most 6.4 ms.
const RETRY_BACKOFF_US: u64 = 100;

/// How often the storage asks whether a session it ended is still listed, or whether a
/// transaction whose COMMIT lost its connection, asked about once its session ended, is still
/// in progress, pausing up to 1 ms, doubled up to 64 ms, in between (about a second in all).
const LOST_COMMIT_POLLS: u32 = 30;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("{0}")]
    Conn(#[from] ConnError),
    #[error("{0}")]
    Invalid(String),
}

/// How many times in a row a new connection may be lost while it is being set up before
/// [`ServerStorage::reconnect`] gives up.
pub(crate) const SETUP_LOSSES: u32 = 5;

/// One connection to an instance's database on a server.
pub struct ServerStorage {
    pub(crate) conn: Conn,
    url: String,
    app: Arc<Application>,
    sql: Arc<Translated>,
    instance: InstanceId,
    /// Whether this session has prepared the bookkeeping statements ([`Bookkeeping`]).
    bookkeeping_prepared: bool,
    /// Whether every session of this storage asks PostgreSQL to look for deadlocks early
    /// ([`Self::look_for_deadlocks_early`]): set once, applied again by every reconnection.
    deadlocks_early: bool,
    /// PostgreSQL: locals run side by side under SSI, placed by the checker's search
    /// ([`Self::set_writers_side_by_side`]), with the instance's writers in flight.
    side_by_side: Option<Arc<WritersInFlight>>,
    /// The job running now met a write sent ahead that failed, or a read ahead that failed
    /// unasked ([`ConnError::SentAhead`]): its attempts from then on wait for every statement's
    /// answer, and read nothing ahead.
    writes_waited: bool,
    /// PostgreSQL: for each transaction type, the reads its body made before its first write,
    /// with the parameters they took, as far as its last two runs agree ([`ReadPlans`]).
    read_plans: HashMap<&'static str, ReadPlans>,
    /// What became of the reads this storage sent ahead.
    reads_ahead: ReadsAheadCount,
    /// Commits that waited for the server's log flush ([`Self::flushed_commits`]).
    flushed_commits: u64,
    /// PostgreSQL: the writing transaction open, as its start named it
    /// ([`Bookkeeping::ReadCountersAndId`]), so that a COMMIT whose answer the connection lost
    /// can be asked about ([`Self::commit`]).
    open_writer: Option<OpenWriter>,
    /// How this storage marks its commits: on MariaDB every writer's, in its row of
    /// [`COMMITS_TABLE`]; on PostgreSQL a local writer's side by side, in a table of its own
    /// ([`CommitMarks::own_table`]).
    marks: CommitMarks,
}

/// This storage's commit marks and its session on the server.
#[derive(Clone, Copy, Debug, Default)]
struct CommitMarks {
    /// The row's key (MariaDB), or what names the table of its own (PostgreSQL), drawn when the
    /// storage opens, kept across reconnections.
    storage: i64,
    /// The mark of the last transaction that committed with one; the next writes one more.
    last: i64,
    /// Whether the row exists (made by the first batch that commits).
    row_made: bool,
    /// The server's id of the session (`CONNECTION_ID()`, `pg_backend_pid()`), to end it after
    /// a lost COMMIT.
    connection: i64,
    /// PostgreSQL: when the session's backend started, in microseconds since 1970. A backend's
    /// pid is the operating system's, which may give it to a new process once the backend has
    /// gone; with its start the pair names one backend, so that ending the old session after a
    /// loss can never end another that took its pid (the application's own, say).
    started: i64,
}

impl CommitMarks {
    /// PostgreSQL: the one-row table where this storage's local writers side by side mark their
    /// commits. A table of its own, not a row of a shared one: under SSI the UPDATE that marks
    /// a commit reads what it updates (a table this small is read whole, a lock on the whole
    /// relation), and a write to a relation that an overlapping transaction read is a read-write
    /// conflict. No other session writes this table, and this storage's transactions never
    /// overlap, so the marks add no conflict between writers; the session that asks about a
    /// lost COMMIT reads it at READ COMMITTED, which SSI does not track.
    fn own_table(&self) -> String {
        format!("{COMMITS_TABLE}_{}", self.storage)
    }
}

/// A writing transaction's id, read in its start. Its session is the one that read it,
/// [`CommitMarks::connection`], whose end a lost COMMIT waits for.
#[derive(Clone, Copy, Debug)]
struct OpenWriter {
    xid: i64,
}

/// How [`ServerStorage::execute_direct`] runs a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectTxn {
    /// As the client libraries' transaction APIs run it: BEGIN a round trip of its own
    /// (`postgres`' `Client::transaction`, `mysql`'s `start_transaction`), then the statements
    /// and COMMIT, under the server's SERIALIZABLE.
    Application,
    /// The same with BEGIN sent with the first statement, the reads the body made last time
    /// sent with the first of them (`ReadPlan`), and each write whose count the body does not
    /// use sent with the statement after it or the COMMIT ([`Db::write`]), as
    /// Ensemble's own transactions run on PostgreSQL: what an application could save with a
    /// client that pipelines.
    Pipelined,
    /// On PostgreSQL, writers under strict two-phase locking that take the writer lock and the
    /// counters last, just before COMMIT, without a node; a reader runs as a node runs it. The
    /// writer runs under READ COMMITTED with every read holding its lock to commit as the 2PC
    /// baseline's `TwoPhaseLock` makes it: the bound of a design no node runs
    /// (`ARCHITECTURE.md`, "Why PostgreSQL's writers do not take the lock last"), and what it
    /// runs is not checked. Refused on MariaDB, where a node's local writers do this already.
    StrictLockLast,
    /// On PostgreSQL, locals side by side under SSI as a node runs them with
    /// [`ServerStorage::set_writers_side_by_side`], without the node: a writer starts by taking
    /// the writer lock in a mode writers share (`ROW SHARE`), a reader runs SERIALIZABLE READ
    /// ONLY, and each ends by reading its epoch, transaction id and snapshot in one prepared
    /// statement batched with COMMIT, before it answers. The difference from the node's run is
    /// the hop; nothing here is checked (the node's runs are). Refused on MariaDB.
    SerializableSideBySide,
}

/// The statements that read and bump the counters, which every transaction runs. On PostgreSQL
/// they are prepared once per session (`PREPARE`) and run with `EXECUTE` inside the batches, so
/// the server does not parse and plan them again for every transaction.
#[derive(Clone, Copy)]
enum Bookkeeping {
    ReadCounters,
    /// The counters and the transaction's id (assigned here): how a writer that takes the
    /// writer lock first starts on PostgreSQL, so that the outcome of a COMMIT whose answer is
    /// lost can be asked of the server ([`ServerStorage::commit`]).
    ReadCountersAndId,
    BumpGlobals,
    BumpLocalWrites,
    /// The epoch (globals seen), the transaction's id and its snapshot: what a writer side by
    /// side under SSI would be ordered by ([`DirectTxn::SerializableSideBySide`]; PostgreSQL).
    ReadEpochAndSnapshot,
}

impl Bookkeeping {
    const ALL: [Bookkeeping; 5] = [Bookkeeping::ReadCounters, Bookkeeping::ReadCountersAndId, Bookkeeping::BumpGlobals, Bookkeeping::BumpLocalWrites, Bookkeeping::ReadEpochAndSnapshot];

    fn name(self) -> &'static str {
        match self {
            Bookkeeping::ReadCounters => "ensemble_read_counters",
            Bookkeeping::ReadCountersAndId => "ensemble_read_counters_and_id",
            Bookkeeping::BumpGlobals => "ensemble_bump_globals",
            Bookkeeping::BumpLocalWrites => "ensemble_bump_local_writes",
            Bookkeeping::ReadEpochAndSnapshot => "ensemble_read_epoch_and_snapshot",
        }
    }

    fn sql(self) -> String {
        match self {
            Bookkeeping::ReadCounters => format!("SELECT globals, local_writes FROM {META_TABLE} WHERE id = 0"),
            // A writer that changes a row has an id by its COMMIT anyway (it bumps a counter);
            // taking it at the start makes it known before COMMIT is sent. One whose body
            // changed nothing now has one too, and its COMMIT writes a commit record. PostgreSQL
            // only.
            Bookkeeping::ReadCountersAndId => {
                format!("SELECT globals, local_writes, pg_current_xact_id()::text FROM {META_TABLE} WHERE id = 0")
            }
            Bookkeeping::BumpGlobals => format!("UPDATE {META_TABLE} SET globals = globals + 1 WHERE id = 0"),
            Bookkeeping::BumpLocalWrites => format!("UPDATE {META_TABLE} SET local_writes = local_writes + 1 WHERE id = 0"),
            // `_if_assigned`: a reader, or a writer that wrote nothing, has no id and should not
            // be given one.
            Bookkeeping::ReadEpochAndSnapshot => {
                format!("SELECT globals, pg_current_xact_id_if_assigned()::text, pg_current_snapshot()::text FROM {META_TABLE} WHERE id = 0")
            }
        }
    }
}

/// Whether a transaction may write, which decides how it starts (see the crate doc).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Takes the instance's writer lock before its first read.
    Writer,
    /// Takes the writer lock as the last thing before COMMIT, once every other lock it needs is
    /// held (a local writer or an application of state updates on MariaDB, whose SERIALIZABLE
    /// holds every lock to commit).
    WriterLockLast,
    /// Reads one snapshot, takes no lock.
    Reader,
}

impl ServerStorage {
    pub fn open(url: &str, app: Arc<Application>, sql: Arc<Translated>, instance: InstanceId) -> Result<Self, ServerError> {
        let conn = Conn::open(sql.engine, url)?;
        let mut s = ServerStorage { conn, url: url.to_string(), app, sql, instance, bookkeeping_prepared: false, deadlocks_early: false, side_by_side: None, writes_waited: false, read_plans: HashMap::new(), reads_ahead: ReadsAheadCount::default(), flushed_commits: 0, open_writer: None, marks: CommitMarks::default() };
        {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            s.marks.storage = (h.finish() >> 1) as i64;
        }
        match s.configure() {
            Ok(()) => {}
            // A server that ends sessions may end this one while it is being set up: another
            // is opened, as `Self::reconnect` does.
            Err(ConnError::Lost(_)) => s.reconnect()?,
            Err(e) => return Err(e.into()),
        }
        Ok(s)
    }

    /// Everything a session of this storage sets, on the connection open now: run when the
    /// storage opens, and again by every reconnection, so that a new session never lacks what
    /// the old one had. Ends by reading the session's id on the server
    /// ([`CommitMarks::connection`]), which asking about a lost COMMIT or PREPARE needs.
    fn configure(&mut self) -> Result<(), ConnError> {
        let id = match self.sql.engine {
            Engine::Mariadb => {
                // The isolation of writers; readers set theirs per transaction. Strict mode: a
                // value that does not fit is an error, as in PostgreSQL, not a silently
                // truncated write that would differ from the SQLite replay.
                "SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE; \
                 SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'; SELECT CONNECTION_ID()"
            }
            Engine::Postgres => {
                if self.deadlocks_early {
                    self.set_deadlock_timeout()?;
                }
                "SELECT pid, (extract(epoch FROM backend_start) * 1000000)::bigint FROM pg_stat_activity WHERE pid = pg_backend_pid()"
            }
        };
        (self.marks.connection, self.marks.started) = session_of(&self.conn.batch_rows(id)?)?;
        Ok(())
    }

    /// On PostgreSQL, runs this instance's locals side by side under SSI rather than its local
    /// writers one at a time: a local writer takes the writer lock in a mode local writers
    /// share (`ROW SHARE`, which a global's or an application's `EXCLUSIVE` waits for, and
    /// which waits for them), a reader runs SERIALIZABLE READ ONLY, and each reads its epoch,
    /// transaction id and snapshot ([`Position::SideBySide`]); the checker's search orders each
    /// epoch's locals (ARCHITECTURE.md, "Local writers side by side on PostgreSQL"). `writers`
    /// is shared by every storage of the instance: a reader that no writer ran beside answers
    /// before its COMMIT ([`WritersInFlight`]). Refused on MariaDB, whose local writers take the
    /// lock last.
    pub fn set_writers_side_by_side(&mut self, writers: Arc<WritersInFlight>) -> Result<(), ServerError> {
        if self.sql.engine != Engine::Postgres {
            return Err(ServerError::Invalid(format!(
                "writers side by side under SSI are for PostgreSQL; on {} local writers take the writer lock last and run side by side already",
                self.sql.engine.name()
            )));
        }
        self.side_by_side = Some(writers);
        Ok(())
    }

    /// Opens a new connection after the server dropped the old one. A server that ends
    /// sessions (a restart, an administrator) may end the new one while it is being set up: it
    /// is opened again, up to [`SETUP_LOSSES`] times.
    pub(crate) fn reconnect(&mut self) -> Result<(), ServerError> {
        let mut lost = 0;
        loop {
            self.conn = Conn::open(self.sql.engine, &self.url)?;
            self.bookkeeping_prepared = false;
            // Not known until `configure` reads it: never the old one's.
            self.marks.connection = 0;
            match self.configure() {
                Err(ConnError::Lost(_)) if lost < SETUP_LOSSES => lost += 1,
                r => return Ok(r?),
            }
        }
    }

    pub fn engine(&self) -> Engine {
        self.sql.engine
    }

    /// The server's id of this connection's session (PostgreSQL's backend pid, MariaDB's
    /// connection id): what an administrator names to end it.
    pub fn session_id(&mut self) -> Result<i64, ServerError> {
        let sql = match self.sql.engine {
            Engine::Postgres => "SELECT pg_backend_pid()",
            Engine::Mariadb => "SELECT CONNECTION_ID()",
        };
        Ok(session_of(&self.conn.batch_rows(sql)?)?.0)
    }

    /// What became of the reads this storage has sent ahead of its bodies' asking
    /// ([`ReadPlan`]): how well the plans foresaw what the bodies asked.
    pub fn reads_ahead(&self) -> ReadsAheadCount {
        self.reads_ahead
    }

    /// How many of this storage's COMMITs waited for the server's log flush (PostgreSQL's
    /// WAL, InnoDB's redo log): those of transactions that wrote, where a read-only one commits
    /// without a flush. A serial lane's group of writers is one, and so is a batch of state
    /// updates. A writer whose body changed nothing counts too where its transaction wrote or
    /// took an id anyway: on MariaDB every writer's commit mark is a write, and on PostgreSQL
    /// a writer's start takes the transaction's id (to be asked about), whose commit record is
    /// flushed. A write sent ahead counts as a change (its count comes with the COMMIT).
    pub fn flushed_commits(&self) -> u64 {
        self.flushed_commits
    }

    /// The name [`Self::flushed_commits`] goes by in a storage's tally, and so among its
    /// node's counters.
    pub const FLUSHED_COMMITS: &'static str = "flushed_commits";

    pub fn application(&self) -> &Arc<Application> {
        &self.app
    }

    /// Creates the application's tables and the counters. Run once per database.
    pub fn create_schema(&mut self) -> Result<(), ServerError> {
        for ddl in self.sql.ddl.clone() {
            self.conn.batch(&ddl).map_err(|e| ServerError::Invalid(format!("creating a table with `{ddl}`: {e}")))?;
        }
        self.conn.batch(&format!(
            "CREATE TABLE {META_TABLE} (id BIGINT PRIMARY KEY, globals BIGINT NOT NULL, local_writes BIGINT NOT NULL)"
        ))?;
        self.conn.batch(&format!("INSERT INTO {META_TABLE} (id, globals, local_writes) VALUES (0, 0, 0)"))?;
        if self.sql.engine == Engine::Mariadb {
            self.conn.batch(&format!(
                "CREATE TABLE {COMMITS_TABLE} (storage BIGINT PRIMARY KEY, mark BIGINT NOT NULL, globals BIGINT NOT NULL, local_writes BIGINT NOT NULL)"
            ))?;
        }
        Ok(())
    }

    /// The application's tables this storage's database does not have (none once
    /// [`Self::create_schema`] ran), in the application's order.
    pub fn missing_tables(&mut self) -> Result<Vec<String>, ServerError> {
        let here = match self.sql.engine {
            Engine::Postgres => "table_schema = current_schema()",
            Engine::Mariadb => "table_schema = DATABASE()",
        };
        let rows = self.conn.batch_rows(&format!("SELECT table_name FROM information_schema.tables WHERE {here}"))?;
        let present: std::collections::BTreeSet<String> = rows.iter().filter_map(|r| r.first().and_then(|v| v.as_text()).map(str::to_lowercase)).collect();
        Ok(self.app.tables.iter().map(|t| t.name.clone()).filter(|t| !present.contains(&t.to_lowercase())).collect())
    }

    /// Loads the rows of `data` that `keep(table, columns, row)` accepts, in one transaction.
    pub fn load(&mut self, data: &Dataset, keep: impl Fn(&str, &[String], &[Value]) -> bool) -> Result<u64, ServerError> {
        self.conn.batch(self.begin_plain())?;
        let mut n = 0;
        for t in &data.tables {
            if self.app.table(&t.table).is_none() {
                return Err(ServerError::Invalid(format!("dataset has rows for unknown table `{}`", t.table)));
            }
            let rows: Vec<&[Value]> = t.rows.iter().filter(|r| keep(&t.table, &t.columns, r)).map(|r| r.as_slice()).collect();
            self.conn.insert_rows(&t.table, &t.columns, &rows)?;
            n += rows.len() as u64;
        }
        self.conn.batch("COMMIT")?;
        Ok(n)
    }

    fn begin_plain(&self) -> &'static str {
        match self.sql.engine {
            Engine::Postgres => "BEGIN",
            Engine::Mariadb => "START TRANSACTION",
        }
    }

    /// `(globals seen, local writing transactions committed)`.
    pub fn counters(&mut self) -> Result<(u64, u64), ServerError> {
        let rows = self.read_outside_transactions(&format!("SELECT globals, local_writes FROM {META_TABLE} WHERE id = 0"))?;
        Ok(counters_of(&rows)?)
    }

    /// Every row of `table` in primary-key order.
    pub fn dump(&mut self, table: &str) -> Result<Rows, ServerError> {
        let t = self.app.table(table).ok_or_else(|| ServerError::Invalid(format!("unknown table `{table}`")))?;
        let engine = self.sql.engine;
        self.read_outside_transactions(&format!("SELECT * FROM {} ORDER BY {}", ident(engine, &t.name), idents(engine, &t.primary_key)))
    }

    /// Runs `query`, one statement that only reads, in a transaction of its own; if the
    /// connection is lost (a server that ended the session: the check reads every instance
    /// after a run, whatever happened to its sessions during it), reopens it and reads again, up
    /// to three times, since reading again changes nothing.
    fn read_outside_transactions(&mut self, query: &str) -> Result<Rows, ServerError> {
        let mut lost = 0;
        loop {
            match self.conn.run(query, &[]) {
                Ok((rows, _)) => return Ok(rows),
                Err(ConnError::Lost(_)) if lost < 3 => {
                    lost += 1;
                    self.reconnect()?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Starts a transaction of `kind` that reads the counters inside it; [`Self::counters_read`]
    /// returns them (a writer that takes the lock last reads them at its end instead). The
    /// statements go as one batch, and on PostgreSQL with the body's first statement
    /// ([`Conn::start`]). With `savepoint`, the batch also sets the savepoint a global's body may
    /// roll back to.
    fn begin(&mut self, kind: Kind, savepoint: bool) -> Result<(), ConnError> {
        // The savepoint comes after the writer lock: rolling back to a savepoint releases the
        // locks taken after it (PostgreSQL ends the subtransaction that took them; MariaDB was
        // seen to let a waiting global read the counters a body-aborted global had locked), and
        // a global that aborts keeps its sequence number, so it must keep the lock to COMMIT.
        let save = if savepoint { "; SAVEPOINT body" } else { "" };
        let (start, lock) = match (self.sql.engine, kind) {
            // The table lock is the first thing the transaction does, so its snapshot is taken
            // after the previous writer committed (PostgreSQL takes a SERIALIZABLE snapshot at
            // the first query, and LOCK TABLE is not one).
            (Engine::Postgres, Kind::Writer) => (format!("BEGIN ISOLATION LEVEL SERIALIZABLE; LOCK TABLE {META_TABLE} IN EXCLUSIVE MODE"), ""),
            (Engine::Postgres, Kind::Reader) => ("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY".to_string(), ""),
            (Engine::Postgres, Kind::WriterLockLast) => unreachable!("PostgreSQL has no key-range lock: its writers take the writer lock first"),
            // The session is SERIALIZABLE; the counters are read FOR UPDATE first, which takes
            // the writer lock.
            (Engine::Mariadb, Kind::Writer) => ("START TRANSACTION".to_string(), " FOR UPDATE"),
            (Engine::Mariadb, Kind::Reader) => {
                ("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY".to_string(), "")
            }
            // Nothing to read yet: the counters are read with the lock, at the end
            // (`end_lock_last`). Only locals and applications, which set no savepoint.
            (Engine::Mariadb, Kind::WriterLockLast) => {
                debug_assert!(!savepoint, "a transaction that takes the writer lock last sets no savepoint");
                // The counters' variables emptied, so that a missing counters' row cannot leave
                // the last transaction's values in them (`end_lock_last`).
                return self.conn.start("START TRANSACTION; SET @globals = NULL, @local_writes = NULL");
            }
        };
        // Prepared before the session's first transaction, not when it opens: the table does
        // not exist before `create_schema`. A round trip of its own, once: in the start's batch
        // it would precede BEGIN in one implicit transaction, which PostgreSQL refuses.
        self.prepare_bookkeeping()?;
        self.open_writer = None;
        let read = match (self.sql.engine, kind) {
            (Engine::Postgres, Kind::Writer) => self.bookkeeping(Bookkeeping::ReadCountersAndId),
            _ => self.bookkeeping(Bookkeeping::ReadCounters),
        };
        self.conn.start(&format!("{start}; {read}{lock}{save}"))
    }

    /// Asks PostgreSQL to look for a deadlock after a lock wait of
    /// [`crate::twopc::DEADLOCK_CHECK_MS`] rather than `deadlock_timeout`'s 1 s, in this session
    /// and every later one of this storage, for transactions that hold table and row locks to
    /// commit and so deadlock now and then (InnoDB finds one at once).
    pub(crate) fn look_for_deadlocks_early(&mut self) -> Result<(), ServerError> {
        self.deadlocks_early = true;
        match self.set_deadlock_timeout() {
            // The new session sets it.
            Err(ConnError::Lost(_)) => self.reconnect(),
            r => Ok(r?),
        }
    }

    /// Only a superuser (or a role granted SET on it) may change `deadlock_timeout`; otherwise
    /// the server's setting stays, and deadlocks cost a lock timeout each.
    fn set_deadlock_timeout(&mut self) -> Result<(), ConnError> {
        match self.conn.batch(&format!("SET deadlock_timeout = '{}ms'", crate::twopc::DEADLOCK_CHECK_MS)) {
            Ok(()) | Err(ConnError::Statement(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Prepares the bookkeeping statements once per session on PostgreSQL ([`Bookkeeping`]);
    /// with local writers side by side, also makes the storage's own table of commit marks, if
    /// it is not there yet, and prepares the statement that marks a commit there
    /// ([`Self::commit`]).
    fn prepare_bookkeeping(&mut self) -> Result<(), ConnError> {
        if self.sql.engine == Engine::Postgres && !self.bookkeeping_prepared {
            let mut prepare: Vec<String> = Bookkeeping::ALL.iter().map(|b| format!("PREPARE {} AS {}", b.name(), b.sql())).collect();
            if self.side_by_side.is_some() {
                let table = self.marks.own_table();
                prepare.push(format!(
                    "CREATE TABLE IF NOT EXISTS {table} (mark BIGINT NOT NULL, globals BIGINT NOT NULL, xid TEXT, snapshot TEXT NOT NULL); \
                     INSERT INTO {table} (mark, globals, xid, snapshot) SELECT 0, 0, NULL, '' WHERE NOT EXISTS (SELECT 1 FROM {table}); \
                     PREPARE {MARK_SIDE_BY_SIDE} (bigint) AS UPDATE {table} SET mark = $1, (globals, xid, snapshot) = \
                     (SELECT globals, pg_current_xact_id_if_assigned()::text, pg_current_snapshot()::text FROM {META_TABLE} WHERE id = 0) \
                     RETURNING globals, xid, snapshot"
                ));
            }
            self.conn.batch(&prepare.join("; "))?;
            self.bookkeeping_prepared = true;
        }
        Ok(())
    }

    /// The statement that does `b`, as this session runs it.
    fn bookkeeping(&self, b: Bookkeeping) -> String {
        match self.sql.engine {
            Engine::Postgres => format!("EXECUTE {}", b.name()),
            Engine::Mariadb => b.sql(),
        }
    }

    /// `(globals seen, local writing transactions committed)` as the transaction [`Self::begin`]
    /// started read them.
    fn counters_read(&mut self) -> Result<(u64, u64), ConnError> {
        let rows = self.conn.started()?;
        self.open_writer = open_writer_of(&rows);
        counters_of(&rows)
    }

    /// Sends `before` and COMMIT in one batch, ending the transaction open. If the connection
    /// is lost while the batch is in flight, the server may or may not have committed, and
    /// running the transaction again could apply it twice; so the server is asked:
    /// - PostgreSQL, a writer that took the writer lock first: it learnt its transaction's id
    ///   in its start ([`Bookkeeping::ReadCountersAndId`]), and `pg_xact_status` on a new
    ///   session tells whether that transaction committed ([`Self::outcome_of_lost_commit`]);
    /// - MariaDB, which has no such question, and PostgreSQL's local writers side by side,
    ///   which must not be given an id at their start (the checker orders them by the id they
    ///   have, if any): the batch writes a new mark just before COMMIT, with what the
    ///   transaction's position needs, and a new session reads it once the old one has ended
    ///   ([`Self::marked_outcome`]). On MariaDB the mark is in the storage's row of
    ///   [`COMMITS_TABLE`]; on PostgreSQL in the storage's own table
    ///   ([`CommitMarks::own_table`]).
    ///
    /// A transaction that committed then ends as if the answer had come ([`Ended::Asked`]), one
    /// that did not runs again; one that cannot be asked about fails loudly
    /// ([`Attempt::Unknown`]). The 2PC baseline's one-phase transactions come here too
    /// ([`Self::commit_one_phase`]); its prepared branches are asked about by their XA ids.
    ///
    /// On MariaDB the mark is an UPDATE of the storage's row by key, with constants or session
    /// variables only: it runs under the counters' row lock, where a statement that reads
    /// another table as well (`INSERT … SELECT`, a join) costs more. The row is made by the
    /// storage's first batch that commits a mark (`INSERT IGNORE`), since a storage may open
    /// before the schema is made; PostgreSQL's own table is made before the session's first
    /// transaction, with the prepared statements ([`Self::prepare_bookkeeping`]).
    fn commit(&mut self, before: &str, leaves: Leaves) -> Result<Ended, Attempt> {
        let open = self.open_writer.take();
        let took_an_id = open.is_some();
        let mut batch: Vec<String> = [before].iter().filter(|b| !b.is_empty()).map(|b| b.to_string()).collect();
        let mark = match (self.sql.engine, leaves) {
            (Engine::Mariadb, Leaves::Nothing | Leaves::CountersInVariables) | (Engine::Postgres, Leaves::EpochAndSnapshot) => Some(self.marks.last + 1),
            (Engine::Postgres, Leaves::Nothing) => None,
            (Engine::Postgres, Leaves::CountersInVariables) => unreachable!("only MariaDB's writers take the writer lock last"),
            (Engine::Mariadb, Leaves::EpochAndSnapshot) => unreachable!("writers side by side under SSI are PostgreSQL's"),
        };
        if let Some(mark) = mark {
            let storage = self.marks.storage;
            if !self.marks.row_made && leaves != Leaves::EpochAndSnapshot {
                batch.push(format!("INSERT IGNORE INTO {COMMITS_TABLE} (storage, mark, globals, local_writes) VALUES ({storage}, 0, 0, 0)"));
            }
            batch.push(match leaves {
                Leaves::Nothing => format!("UPDATE {COMMITS_TABLE} SET mark = {mark} WHERE storage = {storage}"),
                Leaves::CountersInVariables => format!(
                    "UPDATE {COMMITS_TABLE} SET mark = {mark}, globals = @globals, local_writes = @local_writes WHERE storage = {storage}; \
                     SELECT @globals, @local_writes"
                ),
                // What `Bookkeeping::ReadEpochAndSnapshot` reads, read by the subquery before
                // the UPDATE writes (so before it gives the transaction an id: a writer whose
                // body changed nothing has none to report), kept and returned.
                Leaves::EpochAndSnapshot => format!("EXECUTE {MARK_SIDE_BY_SIDE}({mark})"),
            });
        }
        batch.push("COMMIT".to_string());
        let ended = match self.conn.batch_rows(&batch.join("; ")) {
            Ok(rows) => Ended::Answered(rows),
            Err(ConnError::Lost(why)) => match (open, mark) {
                (Some(writer), _) => self.outcome_of_lost_commit(writer, why).map(|()| Ended::Asked { rows: None })?,
                (None, Some(mark)) => self.marked_outcome(mark, leaves, why).map(|rows| Ended::Asked { rows: Some(rows) })?,
                (None, None) => return Err(Attempt::Unknown(why)),
            },
            Err(e) => return Err(Attempt::Again(e)),
        };
        if let Some(mark) = mark {
            self.marks.last = mark;
            self.marks.row_made = true;
        }
        // What rode on the COMMIT wrote (the counters' bump, a group's or a batch's close, a
        // mark), or the transaction took an id: its commit record is flushed.
        if !before.is_empty() || mark.is_some() || took_an_id {
            self.flushed_commits += 1;
        }
        Ok(ended)
    }

    /// Rolls back the transaction open. A connection lost meanwhile rolled it back too: the
    /// transaction runs again.
    fn roll_back(&mut self) -> Result<(), Attempt> {
        self.open_writer = None;
        self.conn.batch("ROLLBACK").map_err(Attempt::Again)
    }

    /// What became of the transaction that wrote `mark` just before the COMMIT whose answer
    /// the connection lost ([`Self::commit`]). The old session may still be running the batch
    /// the server received, so it is ended first, and the question waits until it is over
    /// ([`Self::ask_once_the_old_session_ended`]). Then the mark is there if and only if the
    /// transaction committed: `Ok` with the row the batch would have returned (what `leaves`
    /// names), or [`Attempt::RolledBack`].
    fn marked_outcome(&mut self, mark: i64, leaves: Leaves, why: String) -> Result<Rows, Attempt> {
        let storage = self.marks.storage;
        let unknown = |detail: String| Attempt::Unknown(format!("{why}; asking the server whether the transaction marked {mark} committed: {detail}"));
        let read = match leaves {
            Leaves::Nothing | Leaves::CountersInVariables => format!("SELECT mark, globals, local_writes FROM {COMMITS_TABLE} WHERE storage = {storage}"),
            // Made before the session's first transaction (`Self::prepare_bookkeeping`).
            Leaves::EpochAndSnapshot => format!("SELECT mark, globals, xid, snapshot FROM {}", self.marks.own_table()),
        };
        let rows = self.ask_once_the_old_session_ended(|conn| conn.batch_rows(&read)).map_err(unknown)?;
        match rows.as_slice() {
            [r] if r.first() == Some(&Value::Int(mark)) => Ok(vec![r[1..].to_vec()]),
            _ => Err(Attempt::RolledBack),
        }
    }

    /// After a connection lost while a statement was in flight: opens a new one and ends the
    /// old session ([`CommitMarks::connection`]), which the server may still be running (a
    /// COMMIT or PREPARE under way finishes; anything else is rolled back), waits until the
    /// server no longer lists it, which it does only once its transaction is over (PostgreSQL
    /// aborts an open transaction before a backend leaves `pg_stat_activity`; MariaDB hands a
    /// prepared XA branch over before its session leaves the process list, and InnoDB lets go of
    /// it just after, so there the wait is also for InnoDB), then asks
    /// `question` on the new session: what the old session did is all there is to read. A new
    /// session lost on the way is replaced and the whole asked again, up to [`SETUP_LOSSES`]
    /// times: ending a session that has ended, and reading, change nothing.
    pub(crate) fn ask_once_the_old_session_ended<T>(&mut self, mut question: impl FnMut(&mut Conn) -> Result<T, ConnError>) -> Result<T, String> {
        let (old, started) = (self.marks.connection, self.marks.started);
        if old == 0 {
            return Err("the old session's id on the server is not known".into());
        }
        let mut lost = 0;
        loop {
            self.reconnect().map_err(|e| e.to_string())?;
            match self.end_session(old, started).and_then(|()| question(&mut self.conn)) {
                Ok(t) => return Ok(t),
                Err(ConnError::Lost(_)) if lost < SETUP_LOSSES => lost += 1,
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Ends the session `old` (on PostgreSQL, the backend of that pid that `started` then) from
    /// this one and waits until the server no longer lists it (and on MariaDB, until InnoDB no
    /// longer holds a transaction for it).
    fn end_session(&mut self, old: i64, started: i64) -> Result<(), ConnError> {
        let (end, listed) = match self.sql.engine {
            // MariaDB numbers connections in sequence (up to 2^32): no other takes the id.
            Engine::Mariadb => (format!("KILL {old}"), format!("SELECT COUNT(*) FROM information_schema.processlist WHERE id = {old}")),
            Engine::Postgres => {
                let that = format!("pid = {old} AND (extract(epoch FROM backend_start) * 1000000)::bigint = {started} AND pid <> pg_backend_pid()");
                (format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {that}"), format!("SELECT COUNT(*) FROM pg_stat_activity WHERE {that}"))
            }
        };
        match self.conn.batch(&end) {
            // MariaDB's 1094: no such session, it has ended already.
            Ok(()) | Err(ConnError::Statement(_)) => {}
            Err(e) => return Err(e),
        }
        let mariadb = self.sql.engine == Engine::Mariadb;
        let mut polls = 0;
        // On MariaDB the session leaves the process list just before InnoDB lets go of its
        // transaction, and a branch decided in between stays prepared in InnoDB
        // (`crate::admin::sessions_innodb_holds` says why).
        while self.conn.batch_rows(&listed)? != vec![vec![Value::Int(0)]] || (mariadb && crate::admin::sessions_innodb_holds(&mut self.conn)?.contains(&old)) {
            polls += 1;
            if polls == LOST_COMMIT_POLLS {
                return Err(ConnError::Statement(format!("its old session {old} was still listed after {LOST_COMMIT_POLLS} questions")));
            }
            backoff(polls, 1_000);
        }
        Ok(())
    }

    /// Asks the server what became of `writer`, whose COMMIT was in flight when the
    /// connection was lost: `Ok` if it committed, [`Attempt::RolledBack`] if not. A server that
    /// has not yet noticed the connection is gone keeps the transaction open ("in progress"), so
    /// the old session is ended first and the question asked once it is over, on a new session
    /// replaced if lost on the way ([`Self::ask_once_the_old_session_ended`]); a COMMIT that has
    /// begun writing its record finishes before the session ends.
    fn outcome_of_lost_commit(&mut self, writer: OpenWriter, why: String) -> Result<(), Attempt> {
        let OpenWriter { xid } = writer;
        let unknown = |detail: String| Attempt::Unknown(format!("{why}; asking the server whether transaction {xid} committed: {detail}"));
        let ask = format!("SELECT pg_xact_status('{xid}'::xid8)");
        let status = |rows: &Rows| match rows.first().and_then(|r| r.first()) {
            Some(Value::Text(s)) => Some(s.clone()),
            _ => None,
        };
        let rows = self
            .ask_once_the_old_session_ended(|conn| {
                // PostgreSQL ends a backend's transaction before the backend leaves
                // `pg_stat_activity`; the polls only guard that order.
                let mut polls = 0;
                loop {
                    let rows = conn.batch_rows(&ask)?;
                    if status(&rows).as_deref() != Some("in progress") || polls == LOST_COMMIT_POLLS {
                        return Ok(rows);
                    }
                    polls += 1;
                    backoff(polls, 1_000);
                }
            })
            .map_err(unknown)?;
        match status(&rows).as_deref() {
            Some("committed") => Ok(()),
            Some("aborted") => Err(Attempt::RolledBack),
            other => Err(unknown(format!("once its session had ended the server answered {other:?}"))),
        }
    }

    /// Starts a transaction of the 2PC baseline (`crate::twopc`) that may commit in one phase.
    /// On PostgreSQL one whose type writes (`writes`) learns its id in the same round trip, so
    /// that a COMMIT whose answer is lost can be asked about by id, as a writer of the belt's
    /// that took the writer lock first is ([`Self::commit_one_phase`]).
    pub(crate) fn begin_one_phase(&mut self, begin: &str, writes: bool) -> Result<(), ConnError> {
        self.open_writer = None;
        if !(writes && self.sql.engine == Engine::Postgres) {
            return self.conn.batch(begin);
        }
        // The shape `open_writer_of` reads, as `Bookkeeping::ReadCountersAndId` returns it.
        let rows = self.conn.batch_rows(&format!("{begin}; SELECT 0, 0, pg_current_xact_id()::text"))?;
        let writer = open_writer_of(&rows).ok_or_else(|| ConnError::Statement(format!("a transaction's id was read as {rows:?}")))?;
        self.open_writer = Some(writer);
        Ok(())
    }

    /// Commits a transaction begun by [`Self::begin_one_phase`] whose body changed `changed`
    /// rows. A COMMIT whose answer is lost is asked about as [`Self::commit`] asks: on
    /// PostgreSQL by the id read at the start, on MariaDB by a mark the batch writes in the
    /// storage's row of [`COMMITS_TABLE`] before COMMIT. A transaction that changed no row and
    /// has no id (MariaDB's, or a PostgreSQL type that writes nothing) writes no mark: if its
    /// answer is lost nothing of it stays either way, and it runs again on a new connection
    /// ([`Attempt::Again`] with the lost connection). `Ok` when it committed, answered or
    /// asked (then on a new connection, set up as the old one was).
    pub(crate) fn commit_one_phase(&mut self, changed: u64) -> Result<(), Attempt> {
        if changed == 0 && self.open_writer.is_none() {
            return self.conn.batch("COMMIT").map_err(Attempt::Again);
        }
        self.commit("", Leaves::Nothing).map(|_| ())
    }

    /// Runs a transaction straight on the database, without a node, as `how` says: as the
    /// application would without Ensemble (no counters, no capture, the server's own
    /// SERIALIZABLE isolation and row locking), or as the design that would lift the writer
    /// lock would ([`DirectTxn::StrictLockLast`]). The overhead figure uses it. Victims of a
    /// serialization failure or a deadlock are run again, as a client would; the count of such
    /// runs is returned beside the outcome.
    pub fn execute_direct(&mut self, request: &Request, how: DirectTxn) -> Result<(Outcome, u32), RequestError> {
        let app = Arc::clone(&self.app);
        let txn = app.check_request(request)?;
        let storage_err = |e: String| RequestError::Storage { txn: request.txn.clone(), message: e };
        if how == DirectTxn::SerializableSideBySide {
            if self.sql.engine != Engine::Postgres {
                return Err(storage_err("writers side by side under SSI are priced on PostgreSQL only (MariaDB's SERIALIZABLE is two-phase locking)".into()));
            }
            self.prepare_bookkeeping().map_err(|e| storage_err(e.to_string()))?;
        }
        if how == DirectTxn::StrictLockLast {
            if self.sql.engine != Engine::Postgres {
                // On MariaDB a node's local writers take the writer lock last already: what this
                // would measure is `Storage::run`.
                return Err(storage_err("the strict-locking, lock-last design is priced on PostgreSQL only; on MariaDB a node's writers run it".into()));
            }
            if app.is_read_only(txn.name) {
                // Readers would run as they do now: a snapshot, no lock.
                let job = StorageJob::Execute { request: request.clone(), role: ExecRole::Local };
                return match Storage::run(self, &job) {
                    StorageResult::Executed { outcome, retries, .. } => Ok((outcome, retries)),
                    StorageResult::Failed(error) => Err(storage_err(error)),
                    other => Err(storage_err(format!("unexpected result {other:?}"))),
                };
            }
            self.prepare_bookkeeping().map_err(|e| storage_err(e.to_string()))?;
            if !self.deadlocks_early {
                // Row and table locks held to commit deadlock now and then, as in the 2PC
                // baseline.
                self.look_for_deadlocks_early().map_err(|e| storage_err(e.to_string()))?;
            }
        }
        // Victims, lost connections and a write sent ahead that failed as a statement are run
        // again as a node's storage runs them.
        let what = format!("transaction `{}`", request.txn);
        let attempt = |s: &mut Self| -> Result<Outcome, Attempt> {
            let before = Attempt::before_commit;
            let begin = match (s.sql.engine, how) {
                // Each statement's snapshot is taken after the locks it waited for, so a read
                // that holds its lock reads the latest committed row (`TwoPhaseLock`).
                (Engine::Postgres, DirectTxn::StrictLockLast) => "BEGIN ISOLATION LEVEL READ COMMITTED".to_string(),
                // The epoch is read at the end, on the snapshot the body read (SERIALIZABLE
                // keeps the first statement's).
                (Engine::Postgres, DirectTxn::SerializableSideBySide) if app.is_read_only(txn.name) => {
                    "BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY".to_string()
                }
                (Engine::Postgres, DirectTxn::SerializableSideBySide) => {
                    format!("BEGIN ISOLATION LEVEL SERIALIZABLE; LOCK TABLE {META_TABLE} IN ROW SHARE MODE")
                }
                (Engine::Postgres, _) => "BEGIN ISOLATION LEVEL SERIALIZABLE".to_string(),
                (Engine::Mariadb, _) => "START TRANSACTION".to_string(),
            };
            let pipelined = how != DirectTxn::Application;
            if pipelined {
                s.conn.start(&begin).map_err(before)?;
            } else {
                s.conn.batch(&begin).map_err(before)?;
            }
            let locks = how == DirectTxn::StrictLockLast;
            // As through the client library's transaction API each write waits for its
            // answer, and so it does in the bounds priced beside the node; the pipelined
            // application sends ahead what Ensemble's transactions send ahead.
            let ahead = how == DirectTxn::Pipelined && !s.writes_waited;
            let (outcome, failure, changed) = s.run_body_locking(txn, &request.params, None, locks, ahead);
            if let Some(f) = failure {
                return Err(before(f));
            }
            if pipelined {
                // A BEGIN that failed is the transaction's failure, not its body's.
                s.conn.started().map_err(before)?;
            }
            let end = if how == DirectTxn::StrictLockLast && outcome.committed() && changed > 0 {
                // Every lock the writer will take is held: its place in the serial order is
                // fixed here, and the writer lock makes the counters' order that order.
                let (read, bump) = (s.bookkeeping(Bookkeeping::ReadCounters), s.bookkeeping(Bookkeeping::BumpLocalWrites));
                format!("LOCK TABLE {META_TABLE} IN EXCLUSIVE MODE; {read}; {bump}; COMMIT")
            } else if how == DirectTxn::SerializableSideBySide && outcome.committed() {
                format!("{}; COMMIT", s.bookkeeping(Bookkeeping::ReadEpochAndSnapshot))
            } else {
                (if outcome.committed() { "COMMIT" } else { "ROLLBACK" }).to_string()
            };
            s.conn.batch(&end).map_err(Attempt::committing)?;
            if outcome.committed() && changed > 0 {
                s.flushed_commits += 1;
            }
            Ok(outcome)
        };
        self.retrying(&what, DIRECT_MAX_RETRIES, attempt).map_err(storage_err)
    }

    /// Runs a belt transaction's body. On PostgreSQL its writes whose counts it does not use
    /// ([`Db::write`]) are sent ahead of their answers, unless this job met one that failed.
    pub(crate) fn run_body(&mut self, txn: &TxnType, params: &[Value], capture: Option<&mut Vec<RowChange>>) -> (Outcome, Option<ConnError>, u64) {
        let ahead = self.sql.engine == Engine::Postgres && !self.writes_waited;
        self.run_body_locking(txn, params, capture, false, ahead)
    }

    /// Runs a transaction's body; with `two_phase_locks`, every statement holds its read locks
    /// to commit ([`crate::dialect::TwoPhaseLock`]), as the two-phase-commit baseline needs on
    /// PostgreSQL; with `send_ahead`, writes whose counts the body does not use go with the
    /// next statement or the COMMIT ([`Conn::send_ahead`]), unless the body captures its
    /// changes or holds its read locks (which use each write's answer). The count returned
    /// takes a write sent ahead as one row changed: its own count comes with the COMMIT, too
    /// late to decide whether the transaction counts as a writer, and a writer that changed
    /// nothing is still placed right (it held the writer lock like any other).
    pub(crate) fn run_body_locking(
        &mut self,
        txn: &TxnType,
        params: &[Value],
        capture: Option<&mut Vec<RowChange>>,
        two_phase_locks: bool,
        send_ahead: bool,
    ) -> (Outcome, Option<ConnError>, u64) {
        let locks = two_phase_locks.then(|| TableLocks { written: self.sql.written(txn.name), held: BTreeSet::new(), keys: HashMap::new() });
        // A read's lock, taken ahead, would be held whatever the body asked; MariaDB's client
        // cannot send a statement before the last one's answer is in.
        let reads = (send_ahead && locks.is_none() && self.sql.engine == Engine::Postgres).then(|| ReadsAhead::following(self.read_plans.get(txn.name).map(|p| p.agreed.clone()).unwrap_or_default()));
        let send_ahead = send_ahead && capture.is_none() && locks.is_none();
        let mut db = ServerDb { conn: &mut self.conn, sql: &self.sql, app: &self.app, txn, params, capture, failure: None, changed: 0, locks, send_ahead, reads };
        if two_phase_locks && db.lock_tables("(locks taken first)", &self.sql.locked_up_front(txn.name)).is_err() {
            let failure = db.failure.take().unwrap_or_else(|| ConnError::Statement("locking the tables it reads whole failed".into()));
            return (Outcome::body_abort(failure.to_string()), Some(failure), 0);
        }
        let result = (txn.body)(&mut db, params);
        db.drop_reads_ahead();
        if result.is_err() && db.failure.is_none() {
            // A body that gave up after sending writes ahead: their answers must be in before
            // anything undoes it. A rollback to a savepoint would clear a failed write's error
            // from the transaction, and a serial lane's group sends that rollback in the batch
            // that commits the writers before it, so a failure met only there would run again
            // writers that had committed. Met here, it runs the transaction again as any other.
            if let Err(e) = db.conn.send_writes_now() {
                db.failure = Some(e);
            }
        }
        let (failure, changed, reads) = (db.failure.take(), db.changed, db.reads.take());
        if let Some(reads) = &reads {
            self.reads_ahead += reads.count;
        }
        if let (None, Some(reads)) = (&failure, reads) {
            let sql = &self.sql;
            let plan = ReadPlan::learn(&reads.asked, params, |stmt| sql.statement(txn.name, stmt).is_some_and(|s| s.reads_ahead));
            self.read_plans.entry(txn.name).or_default().learnt(plan);
        }
        (outcome_of(result), failure, changed)
    }

    /// One attempt at a job's transaction: `Err` when it must be rolled back and decided on
    /// (retried, reconnected, or failed); `committing` tells whether the error came from COMMIT.
    fn attempt_execute(&mut self, txn: &TxnType, request: &Request, role: ExecRole) -> Result<StorageResult, Attempt> {
        if self.side_by_side.is_some() && role == ExecRole::Local {
            return self.attempt_side_by_side(txn, request);
        }
        let read_only = self.app.is_read_only(txn.name);
        // A global takes the writer lock first on either engine. Its body may abort, and it must
        // then undo its writes yet keep its sequence number: on MariaDB the savepoint it rolls
        // back to would be its start if it took the lock last, and ROLLBACK TO such a savepoint
        // releases every lock, its reads' too. And the globals of one token visit conflict with
        // one another more than locals do (micro's all read one table whole and write it):
        // taken last, the lock let them deadlock where taken first it queues them.
        let kind = match role {
            ExecRole::Local if read_only => Kind::Reader,
            ExecRole::Local if self.writers_lock_last() => Kind::WriterLockLast,
            _ => Kind::Writer,
        };
        // A global keeps its sequence number whatever its body decides, so it rolls back to a
        // savepoint; a local that aborts rolls back whole. Either way the bookkeeping rides on
        // the first and the last round trip, so a transaction costs the server no more round
        // trips than the application's own BEGIN, statements and COMMIT would; on PostgreSQL one
        // fewer (the start goes with the first statement), and a reader one fewer again (its
        // COMMIT goes with the next start).
        let global = role == ExecRole::Global;
        self.begin(kind, global).map_err(Attempt::before_commit)?;
        let mut changes = Vec::new();
        let capture = global.then_some(&mut changes);
        let (outcome, failure, changed) = self.run_body(txn, &request.params, capture);
        if let Some(f) = failure {
            return Err(Attempt::before_commit(f));
        }
        if kind == Kind::WriterLockLast {
            return self.end_lock_last(outcome, changed);
        }
        let (globals, local_writes) = self.counters_read().map_err(Attempt::before_commit)?;
        if global {
            let undo = if outcome.committed() { "" } else { "ROLLBACK TO SAVEPOINT body; " };
            if !outcome.committed() {
                changes.clear();
            }
            self.commit(&format!("{undo}RELEASE SAVEPOINT body; {}", self.bookkeeping(Bookkeeping::BumpGlobals)), Leaves::Nothing)?;
            let update = StateUpdate { changes, writer: None };
            return Ok(StorageResult::Executed { outcome, update, position: Position::Global { seq: globals + 1 }, access: None, retries: 0 });
        }
        let wrote = outcome.committed() && changed > 0;
        let local_writes = if wrote {
            let bump = self.bookkeeping(Bookkeeping::BumpLocalWrites);
            self.commit(&bump, Leaves::Nothing)?;
            local_writes + 1
        } else if kind == Kind::Reader {
            // A snapshot that wrote nothing: its COMMIT cannot fail and decides nothing, so it
            // goes with the next transaction's start (or before anything else sent), one round
            // trip fewer per read-only operation.
            self.conn.end_read_only();
            local_writes
        } else {
            // Nothing to keep: a writer whose body wrote nothing, or one that aborted.
            if outcome.committed() {
                self.commit("", Leaves::Nothing)?;
            } else {
                self.roll_back()?;
            }
            local_writes
        };
        let position = Position::Local { instance: self.instance, globals_seen: globals, local_writes, wrote };
        Ok(StorageResult::Executed { outcome, update: StateUpdate::default(), position, access: None, retries: 0 })
    }

    /// One attempt at a local that runs side by side with the instance's other locals under
    /// SSI ([`Self::set_writers_side_by_side`]). A writer's reply waits for its COMMIT, and so
    /// does a reader's unless no writer ran beside it ([`Self::attempt_reader_side_by_side`]): what a
    /// SERIALIZABLE transaction read is known to be consistent only once it commits. A writer's
    /// body that aborts is rolled back to the savepoint after the start, and the transaction
    /// still commits, so that SSI checks what the body read (its reads' predicate locks outlive
    /// the savepoint) before the reply tells the client what it saw.
    fn attempt_side_by_side(&mut self, txn: &TxnType, request: &Request) -> Result<StorageResult, Attempt> {
        self.prepare_bookkeeping().map_err(Attempt::before_commit)?;
        if self.app.is_read_only(txn.name) {
            let read = self.bookkeeping(Bookkeeping::ReadEpochAndSnapshot);
            return self.attempt_reader_side_by_side(txn, request, &read);
        }
        let start = format!("BEGIN ISOLATION LEVEL SERIALIZABLE; LOCK TABLE {META_TABLE} IN ROW SHARE MODE; SAVEPOINT body");
        self.conn.start(&start).map_err(Attempt::before_commit)?;
        let (outcome, failure, _) = self.run_body(txn, &request.params, None);
        if let Some(f) = failure {
            return Err(Attempt::before_commit(f));
        }
        self.conn.started().map_err(Attempt::before_commit)?;
        let undo = if outcome.committed() { "" } else { "ROLLBACK TO SAVEPOINT body" };
        let rows = match self.commit(undo, Leaves::EpochAndSnapshot)? {
            Ended::Answered(rows) | Ended::Asked { rows: Some(rows) } => rows,
            Ended::Asked { rows: None } => unreachable!("a writer side by side is asked about by its mark"),
        };
        // Committed: a bad row now cannot be undone or run again.
        let (globals, snapshot) = epoch_and_snapshot(&rows).map_err(|e| Attempt::Fatal(format!("committed, but its epoch and snapshot could not be read: {e}")))?;
        let position = Position::SideBySide { instance: self.instance, globals_seen: globals, snapshot };
        Ok(StorageResult::Executed { outcome, update: StateUpdate::default(), position, access: None, retries: 0 })
    }

    /// A reader beside the writers: SERIALIZABLE READ ONLY, its epoch and snapshot read in the
    /// start's batch (a SERIALIZABLE transaction keeps the snapshot of its first query). If no
    /// writer of the instance was in flight from before its start was sent until its body's
    /// last answer came ([`WritersInFlight::quiet_since`]), then every writing transaction
    /// either committed before its snapshot or began after it, so none that it reads past can
    /// have read past one its snapshot saw: it is in no dangerous structure of SSI (a read-only
    /// transaction can be one only as the reader of the first edge, and only when the
    /// structure's third transaction committed before its snapshot; Ports and Grittner, VLDB
    /// 2012), and whatever PostgreSQL later decides of its COMMIT, what it read is in a serial
    /// order. It answers at once and its COMMIT goes with the next transaction's start, as the
    /// default's readers do. Otherwise it commits before it answers.
    fn attempt_reader_side_by_side(&mut self, txn: &TxnType, request: &Request, read: &str) -> Result<StorageResult, Attempt> {
        let writers = Arc::clone(self.side_by_side.as_ref().expect("side by side"));
        let quiet = writers.quiet();
        self.conn.start(&format!("BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY; {read}")).map_err(Attempt::before_commit)?;
        let (outcome, failure, _) = self.run_body(txn, &request.params, None);
        if let Some(f) = failure {
            return Err(Attempt::before_commit(f));
        }
        let rows = self.conn.started().map_err(Attempt::before_commit)?;
        let (globals, snapshot) = epoch_and_snapshot(&rows).map_err(|e| Attempt::Fatal(format!("its epoch and snapshot could not be read: {e}")))?;
        if writers.quiet_since(quiet) {
            self.conn.end_read_only();
        } else {
            // Nothing of a reader stays, committed or not: a lost answer means running it again.
            self.conn.batch("COMMIT").map_err(Attempt::Again)?;
        }
        let position = Position::SideBySide { instance: self.instance, globals_seen: globals, snapshot };
        Ok(StorageResult::Executed { outcome, update: StateUpdate::default(), position, access: None, retries: 0 })
    }

    /// Whether this instance's local writers and state-update applications take the writer
    /// lock last: on MariaDB, whose SERIALIZABLE is strict two-phase locking with key-range
    /// locks, so that writers of disjoint rows overlap (ARCHITECTURE.md, "On MariaDB writers
    /// take it last"). PostgreSQL has no key-range lock; there writers take it first.
    fn writers_lock_last(&self) -> bool {
        self.sql.engine == Engine::Mariadb
    }

    /// Ends a local writer started as [`Kind::WriterLockLast`] whose body has run: it takes
    /// the writer lock now, reading and bumping the counters in one UPDATE, with its commit
    /// mark and COMMIT in one batch ([`Self::commit`]). Under
    /// InnoDB's SERIALIZABLE the body holds every lock it took (a plain read holds a shared
    /// next-key lock) until COMMIT, and so does this transaction hold the counters' row, so
    /// writers commit in the counters' order, and under strict two-phase locking commit order is
    /// a serial order (ARCHITECTURE.md). A writer that wrote nothing (its body aborted, or it
    /// changed no row) reads the counters under a shared lock, which places it after every
    /// writer it could have seen and before every later one, and keeps its locks to its
    /// ROLLBACK or COMMIT, as the lock-first path does.
    fn end_lock_last(&mut self, outcome: Outcome, changed: u64) -> Result<StorageResult, Attempt> {
        let read = self.bookkeeping(Bookkeeping::ReadCounters);
        let committed = outcome.committed();
        let wrote = committed && changed > 0;
        // The transaction has ended: a bad counters row now cannot be undone or run again.
        let bad = |e: ConnError| Attempt::Fatal(format!("ended, but its counters could not be read: {e}"));
        let (globals, local_writes) = if wrote {
            // The lock, the read and the bump in one statement, the counters as it leaves them
            // kept in session variables for the commit's mark and the answer: every statement
            // here runs under the counters' row lock, which writers take one at a time.
            let take_and_bump = format!(
                "UPDATE {META_TABLE} SET globals = (@globals := globals), local_writes = (@local_writes := local_writes + 1) WHERE id = 0"
            );
            match self.commit(&take_and_bump, Leaves::CountersInVariables)? {
                Ended::Answered(rows) | Ended::Asked { rows: Some(rows) } => counters_of(&rows).map_err(bad)?,
                Ended::Asked { rows: None } => unreachable!("MariaDB's commits are asked about by their marks"),
            }
        } else {
            // Nothing it did stays, committed or not, so a lost answer means running it again.
            let end = format!("{read} LOCK IN SHARE MODE; {}", if committed { "COMMIT" } else { "ROLLBACK" });
            counters_of(&self.conn.batch_rows(&end).map_err(Attempt::Again)?).map_err(bad)?
        };
        let position = Position::Local { instance: self.instance, globals_seen: globals, local_writes, wrote };
        Ok(StorageResult::Executed { outcome, update: StateUpdate::default(), position, access: None, retries: 0 })
    }

    /// Whether `job` can run in a group ([`Self::attempt_group`]): a well-formed request or a
    /// non-empty batch of updates. Anything else runs alone, to fail as it would there.
    fn groupable(&self, job: &StorageJob) -> bool {
        match job {
            StorageJob::Execute { request, .. } => self.app.check_request(request).is_ok(),
            StorageJob::Apply { updates, .. } => !updates.is_empty(),
        }
    }

    /// One attempt at running `jobs` one after another in one transaction, as the writers of a
    /// serial lane (`ensemble_core::SerialLane`): the writer lock and the counters are taken once,
    /// each job runs between a savepoint and its release (rolled back to it when its body aborts,
    /// so it leaves nothing but what its role keeps: a global its sequence number), each job's
    /// counters are those its predecessors left, and one COMMIT ends them all. What closes a job
    /// (its savepoint's release, its counter) goes with the next job's start, so a group costs
    /// the server its members' statements and one COMMIT, one flush of the log.
    fn attempt_group(&mut self, jobs: &[StorageJob]) -> Result<Vec<StorageResult>, Attempt> {
        let before = Attempt::before_commit;
        let app = Arc::clone(&self.app);
        self.begin(Kind::Writer, true).map_err(before)?;
        // (globals, local_writes), known once the start's rows are in.
        let mut counters: Option<(u64, u64)> = None;
        let mut results = Vec::with_capacity(jobs.len());
        let mut close = String::new();
        for (i, job) in jobs.iter().enumerate() {
            if i > 0 {
                self.conn.start(&format!("{close}; SAVEPOINT body")).map_err(before)?;
            }
            let known = |counters: &mut Option<(u64, u64)>, s: &mut Self| -> Result<(u64, u64), Attempt> {
                let started = s.conn.started().map_err(before)?;
                match *counters {
                    Some(c) => Ok(c),
                    None => {
                        let c = counters_of(&started).map_err(before)?;
                        s.open_writer = open_writer_of(&started);
                        *counters = Some(c);
                        Ok(c)
                    }
                }
            };
            match job {
                StorageJob::Execute { request, role } => {
                    let txn = app.check_request(request).map_err(|e| Attempt::Fatal(e.to_string()))?;
                    let global = *role == ExecRole::Global;
                    let mut changes = Vec::new();
                    let (outcome, failure, changed) = self.run_body(txn, &request.params, global.then_some(&mut changes));
                    if let Some(f) = failure {
                        return Err(before(f));
                    }
                    let (globals, local_writes) = known(&mut counters, self)?;
                    let undo = if outcome.committed() { "" } else { "ROLLBACK TO SAVEPOINT body; " };
                    if global {
                        if !outcome.committed() {
                            changes.clear();
                        }
                        close = format!("{undo}RELEASE SAVEPOINT body; {}", self.bookkeeping(Bookkeeping::BumpGlobals));
                        counters = Some((globals + 1, local_writes));
                        let update = StateUpdate { changes, writer: None };
                        let position = Position::Global { seq: globals + 1 };
                        results.push(StorageResult::Executed { outcome, update, position, access: None, retries: 0 });
                        continue;
                    }
                    let wrote = outcome.committed() && changed > 0;
                    let local_writes = if wrote {
                        close = format!("RELEASE SAVEPOINT body; {}", self.bookkeeping(Bookkeeping::BumpLocalWrites));
                        local_writes + 1
                    } else {
                        close = format!("{undo}RELEASE SAVEPOINT body");
                        local_writes
                    };
                    counters = Some((globals, local_writes));
                    let position = Position::Local { instance: self.instance, globals_seen: globals, local_writes, wrote };
                    results.push(StorageResult::Executed { outcome, update: StateUpdate::default(), position, access: None, retries: 0 });
                }
                StorageJob::Apply { first_seq, updates } => {
                    let (globals, local_writes) = known(&mut counters, self)?;
                    let last = self.apply_updates(globals, *first_seq, updates)?;
                    close = format!("RELEASE SAVEPOINT body; UPDATE {META_TABLE} SET globals = {last} WHERE id = 0");
                    counters = Some((last, local_writes));
                    results.push(StorageResult::Applied { globals_seen: last, retries: 0 });
                }
            }
        }
        self.commit(&close, Leaves::Nothing)?;
        Ok(results)
    }

    /// Applies the state updates of globals `first_seq..` on a database that has seen `globals`
    /// of them, inside the transaction open; returns the last one's sequence number.
    fn apply_updates(&mut self, globals: u64, first_seq: u64, updates: &[StateUpdate]) -> Result<u64, Attempt> {
        continues(globals, first_seq)?;
        self.apply_changes(first_seq, updates)
    }

    /// Applies the state updates of globals `first_seq..` inside the transaction open; returns
    /// the last one's sequence number.
    fn apply_changes(&mut self, first_seq: u64, updates: &[StateUpdate]) -> Result<u64, Attempt> {
        for (i, u) in updates.iter().enumerate() {
            for c in &u.changes {
                self.apply_change(c).map_err(|e| match e {
                    ApplyError::Conn(e) => Attempt::before_commit(e),
                    ApplyError::Diverged(m) => Attempt::Fatal(format!("update {i} (global operation {}): {m}", first_seq + i as u64)),
                })?;
            }
        }
        Ok(first_seq + updates.len() as u64 - 1)
    }

    fn attempt_apply(&mut self, first_seq: u64, updates: &[StateUpdate]) -> Result<u64, Attempt> {
        if self.writers_lock_last() {
            // The rows first, then the writer lock, as a writer that takes it last
            // (`end_lock_last`); the batch is refused if it does not continue what the
            // database has seen, before COMMIT.
            self.begin(Kind::WriterLockLast, false).map_err(Attempt::before_commit)?;
            let last = self.apply_changes(first_seq, updates)?;
            let read = self.bookkeeping(Bookkeeping::ReadCounters);
            let (globals, _) = counters_of(&self.conn.batch_rows(&format!("{read} FOR UPDATE")).map_err(Attempt::before_commit)?).map_err(Attempt::before_commit)?;
            continues(globals, first_seq)?;
            self.commit(&format!("UPDATE {META_TABLE} SET globals = {last} WHERE id = 0"), Leaves::Nothing)?;
            return Ok(last);
        }
        self.begin(Kind::Writer, false).map_err(Attempt::before_commit)?;
        let (globals, _) = self.counters_read().map_err(Attempt::before_commit)?;
        let last = self.apply_updates(globals, first_seq, updates)?;
        // The counter with the COMMIT, one round trip, as a group's Apply and a writer that takes
        // the lock last end.
        self.commit(&format!("UPDATE {META_TABLE} SET globals = {last} WHERE id = 0"), Leaves::Nothing)?;
        Ok(last)
    }

    /// Runs `attempt` until it succeeds: a victim of a serialization failure or deadlock runs
    /// again (up to `victim_bound` times), a connection lost before COMMIT is reopened and the
    /// transaction runs again (the server rolled it back), a connection lost during COMMIT is
    /// asked about where the server can say ([`Self::commit`]) and otherwise fails loudly, since
    /// the outcome is unknown and running it again could apply it twice.
    fn retrying<T>(&mut self, what: &str, victim_bound: u32, mut attempt: impl FnMut(&mut Self) -> Result<T, Attempt>) -> Result<(T, u32), String> {
        self.writes_waited = false;
        let mut retries = 0;
        loop {
            match attempt(self) {
                Ok(t) => return Ok((t, retries)),
                Err(a) => {
                    self.conn.forget_unsent();
                    let _ = self.conn.batch("ROLLBACK");
                    match a {
                        Attempt::Again(ConnError::Retry(_)) if retries < victim_bound => {
                            retries += 1;
                            pause_before_retry(retries);
                        }
                        Attempt::Again(ConnError::Retry(why)) => {
                            return Err(format!("{what}: still a victim after {victim_bound} retries: {why}"));
                        }
                        Attempt::Again(ConnError::Lost(why)) => {
                            self.reconnect().map_err(|e| format!("{what}: the {} connection was lost ({why}) and could not be reopened: {e}", self.sql.engine.name()))?;
                            retries += 1;
                        }
                        // Asking about it opened the connection again already.
                        Attempt::RolledBack => retries += 1,
                        Attempt::Again(ConnError::SentAhead(_)) if !self.writes_waited => {
                            self.writes_waited = true;
                            retries += 1;
                        }
                        Attempt::Again(ConnError::Statement(why) | ConnError::SentAhead(why)) => return Err(format!("{what}: {why}")),
                        Attempt::Unknown(why) => {
                            return Err(format!(
                                "{what}: the {} connection was lost during COMMIT ({why}); whether it committed is unknown, so it is not run again",
                                self.sql.engine.name()
                            ))
                        }
                        Attempt::Fatal(why) => return Err(format!("{what}: {why}")),
                    }
                }
            }
        }
    }

    /// Takes the key locks of the row `change` inserts, if it is an INSERT
    /// ([`crate::dialect::KeyLock`]): a participant of the two-phase-commit baseline on
    /// PostgreSQL takes them before it inserts a row, as the coordinator's INSERT did.
    pub(crate) fn lock_new_row_keys(&mut self, change: &RowChange) -> Result<(), ApplyError> {
        let ChangeKind::Insert { row } = &change.kind else { return Ok(()) };
        let value = |c: &str| row.iter().find(|(col, _)| col.to_lowercase() == c).map(|(_, v)| crate::dialect::key_encoding(v));
        let mut keys = self
            .sql
            .new_row_keys(&change.table, value)
            .ok_or_else(|| ApplyError::Diverged(format!("a new row of `{}` lacks a column some read key-locks", change.table)))?;
        if keys.is_empty() {
            return Ok(());
        }
        keys.sort_unstable();
        keys.dedup();
        let (sql, args) = key_lock_statement(&keys, true);
        let refs: Vec<&Value> = args.iter().collect();
        self.conn.run(&sql, &refs).map(|_| ()).map_err(ApplyError::Conn)
    }

    pub(crate) fn apply_change(&mut self, change: &RowChange) -> Result<(), ApplyError> {
        let app = Arc::clone(&self.app);
        let table = app.table(&change.table).ok_or_else(|| ApplyError::Diverged(format!("unknown table `{}`", change.table)))?;
        let check_cols = |cols: &[(String, Value)]| match cols.iter().find(|(c, _)| !table.has_column(c)) {
            Some((c, _)) => Err(ApplyError::Diverged(format!("table `{}` has no column `{c}`", table.name))),
            None => Ok(()),
        };
        let engine = self.sql.engine;
        let mut k = 0;
        let mut next = || {
            k += 1;
            placeholder(engine, k)
        };
        let name = ident(engine, &table.name);
        let col = |c: &str| ident(engine, c);
        let (sql, args): (String, Vec<&Value>) = match &change.kind {
            ChangeKind::Insert { row } => {
                check_cols(row)?;
                let cols: Vec<String> = row.iter().map(|(c, _)| col(c)).collect();
                let ps: Vec<String> = row.iter().map(|_| next()).collect();
                (format!("INSERT INTO {name} ({}) VALUES ({})", cols.join(", "), ps.join(", ")), row.iter().map(|(_, v)| v).collect())
            }
            ChangeKind::Update { key, set } => {
                check_cols(key)?;
                check_cols(set)?;
                if set.is_empty() {
                    return Ok(());
                }
                let sets: Vec<String> = set.iter().map(|(c, _)| format!("{} = {}", col(c), next())).collect();
                let wheres: Vec<String> = key.iter().map(|(c, _)| format!("{} = {}", col(c), next())).collect();
                (
                    format!("UPDATE {name} SET {} WHERE {}", sets.join(", "), wheres.join(" AND ")),
                    set.iter().chain(key.iter()).map(|(_, v)| v).collect(),
                )
            }
            ChangeKind::Delete { key } => {
                check_cols(key)?;
                let wheres: Vec<String> = key.iter().map(|(c, _)| format!("{} = {}", col(c), next())).collect();
                (format!("DELETE FROM {name} WHERE {}", wheres.join(" AND ")), key.iter().map(|(_, v)| v).collect())
            }
        };
        let (_, n) = self.conn.run(&sql, &args).map_err(ApplyError::Conn)?;
        if n != 1 {
            return Err(ApplyError::Diverged(format!("`{sql}` changed {n} rows instead of 1")));
        }
        Ok(())
    }
}

/// Waits a random time before a victim runs again, up to `first_us` doubled per retry (six
/// doublings at most): two transactions that deadlocked or failed to serialize and restart at
/// once meet again, as any client of the server finds (this is the storage, not the protocol:
/// real time and randomness belong here).
pub(crate) fn backoff(retries: u32, first_us: u64) {
    backoff_up_to(retries, first_us, 6);
}

/// [`backoff`] with at most `doublings` doublings.
pub(crate) fn backoff_up_to(retries: u32, first_us: u64, doublings: u32) {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(retries);
    std::thread::sleep(std::time::Duration::from_micros(h.finish() % backoff_cap_us(retries, first_us, doublings)));
}

/// The longest wait of [`backoff_up_to`] before the `retries`-th run, in microseconds.
pub(crate) fn backoff_cap_us(retries: u32, first_us: u64, doublings: u32) -> u64 {
    first_us << retries.min(doublings)
}

/// Before the `retries`-th run of a victim of this storage: none for the first
/// [`IMMEDIATE_RETRIES`], then [`backoff`] from [`RETRY_BACKOFF_US`].
fn pause_before_retry(retries: u32) {
    if retries > IMMEDIATE_RETRIES {
        backoff(retries - IMMEDIATE_RETRIES, RETRY_BACKOFF_US);
    }
}

/// The counters from the one row of the meta table.
/// The row [`Bookkeeping::ReadEpochAndSnapshot`] reads: globals seen, the transaction's id
/// (NULL when it has none) and its snapshot's text.
fn epoch_and_snapshot(rows: &Rows) -> Result<(u64, SnapshotStamp), String> {
    let row = match rows.as_slice() {
        [row] if row.len() == 3 => row,
        other => return Err(format!("expected one row of three columns, got {other:?}")),
    };
    let globals = match row[0] {
        Value::Int(g) if g >= 0 => g as u64,
        ref other => return Err(format!("globals seen {other:?}")),
    };
    let txid = match row[1] {
        Value::Null => None,
        Value::Int(t) if t >= 0 => Some(t as u64),
        ref other => return Err(format!("transaction id {other:?}")),
    };
    let snapshot = match &row[2] {
        Value::Text(t) => SnapshotStamp::parse(txid, t)?,
        other => return Err(format!("snapshot {other:?}")),
    };
    Ok((globals, snapshot))
}

/// The session's id on the server and, where the row has it, when its backend started
/// (PostgreSQL; 0 where not read): the one row of `SELECT CONNECTION_ID()`, `SELECT
/// pg_backend_pid()`, or [`ServerStorage::configure`]'s pid and start.
fn session_of(rows: &Rows) -> Result<(i64, i64), ConnError> {
    match rows.first().map(|r| &r[..]) {
        Some([Value::Int(id)]) => Ok((*id, 0)),
        Some([Value::Int(id), Value::Int(started)]) => Ok((*id, *started)),
        other => Err(ConnError::Statement(format!("the session's id read as {other:?}"))),
    }
}

/// The transaction's id that [`Bookkeeping::ReadCountersAndId`] read beside the counters, if
/// the start read it (the counters alone are two columns).
fn open_writer_of(rows: &Rows) -> Option<OpenWriter> {
    match rows.as_slice() {
        [r] if r.len() == 3 => match r[2] {
            Value::Int(xid) => Some(OpenWriter { xid }),
            _ => None,
        },
        _ => None,
    }
}

fn counters_of(rows: &Rows) -> Result<(u64, u64), ConnError> {
    match rows.as_slice() {
        [r] => match (&r[0], &r[1]) {
            (Value::Int(g), Value::Int(l)) => Ok((*g as u64, *l as u64)),
            other => Err(ConnError::Statement(format!("{META_TABLE} holds {other:?}"))),
        },
        _ => Err(ConnError::Statement(format!("{META_TABLE} must hold exactly one row, it holds {}", rows.len()))),
    }
}

/// Refuses a batch of state updates that does not start right after the `globals` global
/// operations a database has seen.
fn continues(globals: u64, first_seq: u64) -> Result<(), Attempt> {
    if globals + 1 != first_seq {
        return Err(Attempt::Fatal(format!(
            "this database has seen {globals} global operations; the next update to apply must be {}, not {first_seq}",
            globals + 1
        )));
    }
    Ok(())
}

/// What a batch that commits records beside its mark ([`ServerStorage::commit`]), and returns.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Leaves {
    /// The mark alone (MariaDB), or no mark (PostgreSQL, whose writers that take the lock
    /// first are asked about by their id): the caller knows its position without the batch.
    Nothing,
    /// MariaDB: the counters as the batch left them in `@globals` and `@local_writes` (a
    /// writer that takes the writer lock last).
    CountersInVariables,
    /// PostgreSQL, a local writer side by side: its epoch, id and snapshot, as
    /// [`Bookkeeping::ReadEpochAndSnapshot`] reads them.
    EpochAndSnapshot,
}

/// How a transaction's COMMIT was known to have happened ([`ServerStorage::commit`]).
enum Ended {
    /// The server answered: the rows of the batch's last statement that returns rows.
    Answered(Rows),
    /// The answer was lost, and the server, asked, said that the transaction committed; where
    /// it was marked, with the row the batch would have returned, read back.
    Asked { rows: Option<Rows> },
}

pub(crate) enum Attempt {
    /// Roll back and decide by the error.
    Again(ConnError),
    /// Lost while committing, and the server, asked on a new connection, said it rolled the
    /// transaction back: run it again on that connection.
    RolledBack,
    /// Lost while committing: the outcome is unknown.
    Unknown(String),
    /// Not worth running again.
    Fatal(String),
}

impl Attempt {
    fn before_commit(e: ConnError) -> Attempt {
        Attempt::Again(e)
    }
    fn committing(e: ConnError) -> Attempt {
        match e {
            ConnError::Lost(why) => Attempt::Unknown(why),
            other => Attempt::Again(other),
        }
    }
}

pub(crate) enum ApplyError {
    Conn(ConnError),
    Diverged(String),
}

impl ServerStorage {
    /// Side by side, any job but a reader's is a writer in flight until it returns, from
    /// before its first statement is sent to after its COMMIT or ROLLBACK is answered.
    fn writing(&self, jobs: &[StorageJob]) -> Option<InFlight> {
        let writers = self.side_by_side.as_ref()?;
        let reader = |j: &StorageJob| matches!(j, StorageJob::Execute { request, role: ExecRole::Local } if self.app.is_read_only(&request.txn));
        (!jobs.iter().all(reader)).then(|| writers.enter())
    }
}

/// The writing transactions of one instance in flight, over all its storages (a node's
/// connections are the only ones that write its database): how a reader side by side learns
/// that no writer ran beside it. One word holds both the number in flight (high 16 bits) and
/// the number ever begun (low 48), so that a reader reads them together.
#[derive(Debug, Default)]
pub struct WritersInFlight(AtomicU64);

/// A writer in flight, until dropped.
struct InFlight(Arc<WritersInFlight>);

const IN_FLIGHT: u64 = 1 << 48;

impl WritersInFlight {
    fn enter(self: &Arc<Self>) -> InFlight {
        // Sequentially consistent, and before the writer's first statement goes out (a system
        // call): a reader whose snapshot the server takes after that statement began reads
        // this count when its own answer is in, later still.
        self.0.fetch_add(IN_FLIGHT + 1, Ordering::SeqCst);
        InFlight(Arc::clone(self))
    }

    /// The number of writers begun so far, if none is in flight now.
    fn quiet(&self) -> Option<u64> {
        let v = self.0.load(Ordering::SeqCst);
        (v < IN_FLIGHT).then_some(v)
    }

    /// Whether none was in flight at `quiet` and none has begun since.
    fn quiet_since(&self, quiet: Option<u64>) -> bool {
        quiet.is_some_and(|begun| self.0.load(Ordering::SeqCst) % IN_FLIGHT == begun)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(IN_FLIGHT, Ordering::SeqCst);
    }
}

impl Storage for ServerStorage {
    type Job = StorageJob;
    type Result = StorageResult;
    fn run(&mut self, job: &StorageJob) -> StorageResult {
        let _writing = self.writing(std::slice::from_ref(job));
        match job {
            StorageJob::Execute { request, role } => {
                let app = Arc::clone(&self.app);
                let txn = match app.check_request(request) {
                    Ok(t) => t,
                    Err(e) => return StorageResult::Rejected(e),
                };
                let what = format!("transaction `{}`", request.txn);
                match self.retrying(&what, MAX_RETRIES, |s| s.attempt_execute(txn, request, *role)) {
                    Ok((mut r, n)) => {
                        if let StorageResult::Executed { retries, .. } = &mut r {
                            *retries = n;
                        }
                        r
                    }
                    Err(e) => StorageResult::Failed(e),
                }
            }
            StorageJob::Apply { first_seq, updates } if updates.is_empty() => {
                StorageResult::Failed(format!("empty batch of state updates at {first_seq}"))
            }
            StorageJob::Apply { first_seq, updates } => {
                let what = format!("applying state updates {first_seq}..{}", first_seq + updates.len() as u64);
                match self.retrying(&what, MAX_RETRIES, |s| s.attempt_apply(*first_seq, updates)) {
                    Ok((globals_seen, retries)) => StorageResult::Applied { globals_seen, retries },
                    Err(e) => StorageResult::Failed(e),
                }
            }
        }
    }

    /// Runs a serial lane's writers as one transaction ([`Self::attempt_group`]), so that they
    /// share its COMMIT. If the group meets anything but its members' own aborts (a lost
    /// connection, a victim's error, a state update that does not fit), the server rolled it
    /// all back, and its jobs run again one by one, each with a single job's retries and
    /// errors; a group whose COMMIT was cut off is asked about as a single job is
    /// ([`Self::commit`]), and where the server cannot say, fails every member loudly.
    fn run_batch(&mut self, jobs: &[StorageJob]) -> Vec<StorageResult> {
        let _writing = self.writing(jobs);
        if jobs.len() < 2 || !jobs.iter().all(|j| self.groupable(j)) {
            return jobs.iter().map(|j| self.run(j)).collect();
        }
        match self.attempt_group(jobs) {
            Ok(results) => results,
            Err(a) => {
                self.conn.forget_unsent();
                let _ = self.conn.batch("ROLLBACK");
                if let Attempt::Unknown(why) = a {
                    let why = format!(
                        "a group of {} writers: the {} connection was lost during COMMIT ({why}); whether it committed is unknown, so none is run again",
                        jobs.len(),
                        self.sql.engine.name()
                    );
                    return jobs.iter().map(|_| StorageResult::Failed(why.clone())).collect();
                }
                let mut results: Vec<StorageResult> = jobs.iter().map(|j| self.run(j)).collect();
                for r in &mut results {
                    if let StorageResult::Executed { retries, .. } | StorageResult::Applied { retries, .. } = r {
                        *retries += 1;
                    }
                }
                results
            }
        }
    }

    /// Commits a read-only transaction left open for the next job to end. A failure is left
    /// for the next job to meet (a lost connection is reopened there).
    fn idle(&mut self) {
        let _ = self.conn.commit_open_reader();
    }

    /// The reads sent ahead, once there have been any (a storage that does not read ahead, on
    /// MariaDB, reports nothing rather than two zeros), and the commits that waited for the
    /// server's log flush, once there has been one.
    fn tally(&self) -> Vec<(&'static str, u64)> {
        let mut tally = Vec::new();
        if self.reads_ahead != ReadsAheadCount::default() {
            tally.extend([(ReadsAheadCount::ANSWERED, self.reads_ahead.answered), (ReadsAheadCount::THROWN_AWAY, self.reads_ahead.thrown_away)]);
        }
        if self.flushed_commits > 0 {
            tally.push((Self::FLUSHED_COMMITS, self.flushed_commits));
        }
        tally
    }
}

fn outcome_of(result: Result<Rows, TxnError>) -> Outcome {
    match result {
        Ok(rows) => Outcome::Committed(rows),
        Err(TxnError::Abort(reason)) => Outcome::body_abort(reason),
        Err(TxnError::Db(e)) => Outcome::body_abort(format!("statement error: {e}")),
    }
}

/// What a transaction body sees of a server database: its own declared statements, in the
/// engine's dialect; for a global, every write captured as row changes.
struct ServerDb<'a> {
    conn: &'a mut Conn,
    sql: &'a Translated,
    app: &'a Application,
    txn: &'a TxnType,
    capture: Option<&'a mut Vec<RowChange>>,
    /// A serialization failure, deadlock or lost connection: the transaction must run again,
    /// whatever the body makes of the error it got.
    failure: Option<ConnError>,
    /// Rows changed by the body's writes.
    changed: u64,
    /// The tables locked so far, when statements hold their read locks to commit.
    locks: Option<TableLocks>,
    /// Writes whose counts the body does not use go with the next statement ([`Db::write`]).
    send_ahead: bool,
    /// The transaction's parameters, which a [`ReadPlan`] binds.
    params: &'a [Value],
    /// PostgreSQL, where statements can go before their answers: the reads the body asks for,
    /// and those sent ahead of its asking ([`ReadPlan`]).
    reads: Option<ReadsAhead>,
}

/// The reads a transaction type's body made, in a run on this storage, before its first write:
/// each statement with, for each of its arguments, the parameter it equalled (what is read
/// ahead is what two runs in a row agree on, [`ReadPlans`]). A body
/// tends to ask the same reads of the same parameters each time (shop's `add_item` reads its
/// cart, its item and its cart's line for the item, each keyed by the request's parameters), so
/// when a body asks the plan's read at its place with the arguments the plan binds, the plan's
/// later reads go with it, in its round trip, and their answers wait for the body to ask.
///
/// Why it is exact: PostgreSQL runs what one session sends in the order sent, so a read sent
/// ahead runs where the body would have sent it, in the same transaction, after the same
/// statements; the body writes nothing before it asks (a write drops what was read ahead, and
/// the plan holds only reads made before the first write), so its answer is the one the body
/// would have got. A read's answer is used only if the body asks exactly that statement with
/// exactly those arguments next; otherwise every answer read ahead is thrown away, which is
/// harmless for a query that takes no row lock ([`crate::dialect::ServerStatement::reads_ahead`])
/// unless it failed: a failure aborts the transaction, so one the body did not ask for runs it
/// again reading nothing ahead, as a write sent ahead that failed does ([`ConnError::SentAhead`]).
/// The plan only decides what is sent early, never what the body sees.
#[derive(Clone, Debug, Default, PartialEq)]
struct ReadPlan(Vec<PlannedRead>);

/// A transaction type's plans: the last one learnt, and what it and the one before agree on,
/// which is what is read ahead. A body whose reads depend on what it read (TPC-W's and RUBiS's
/// branch on it), or whose parameters happened to be equal the last time (a read then bound to
/// the wrong one), would have its plan's reads thrown away the next time; a prefix two runs
/// made alike is one the body tends to repeat.
#[derive(Debug, Default)]
struct ReadPlans {
    last: ReadPlan,
    agreed: ReadPlan,
}

impl ReadPlans {
    fn learnt(&mut self, plan: ReadPlan) {
        self.agreed = ReadPlan(self.last.0.iter().zip(&plan.0).take_while(|(a, b)| a == b).map(|(a, _)| a.clone()).collect());
        self.last = plan;
    }
}

#[derive(Clone, Debug, PartialEq)]
struct PlannedRead {
    stmt: String,
    /// For each argument, the index of the parameter it equalled.
    params: Vec<usize>,
}

impl ReadPlan {
    /// The plan of `asked` (reads made before any write, with their arguments) for a
    /// transaction of `params`: the longest prefix of reads that may be read ahead and whose
    /// every argument equalled a parameter.
    fn learn(asked: &[(String, Vec<Value>)], params: &[Value], reads_ahead: impl Fn(&str) -> bool) -> ReadPlan {
        ReadPlan(
            asked
                .iter()
                .map_while(|(stmt, args)| {
                    let params = args.iter().map(|a| params.iter().position(|p| p == a)).collect::<Option<Vec<usize>>>()?;
                    reads_ahead(stmt).then(|| PlannedRead { stmt: stmt.clone(), params })
                })
                .collect(),
        )
    }

    /// If the body's read number `at` (from 0) is the plan's, `stmt` with `args` as the plan
    /// binds them of `params`: the reads the plan expects after it, bound.
    fn after(&self, at: usize, stmt: &str, args: &[Value], params: &[Value]) -> Vec<(String, Vec<Value>)> {
        let bind = |p: &PlannedRead| p.params.iter().map(|i| params.get(*i).cloned()).collect::<Option<Vec<Value>>>();
        match self.0.get(at) {
            Some(p) if p.stmt == stmt && bind(p).as_deref() == Some(args) => {}
            _ => return Vec::new(),
        }
        self.0[at + 1..].iter().map_while(|p| Some((p.stmt.clone(), bind(p)?))).collect()
    }
}

/// A body's reads while it runs ([`ReadPlan`]).
struct ReadsAhead {
    plan: ReadPlan,
    /// The reads the body asked for before it wrote, with their arguments.
    asked: Vec<(String, Vec<Value>)>,
    /// The body has written: nothing is read ahead or recorded any more.
    wrote: bool,
    /// Answers of reads sent ahead, in the order the plan expects the body to ask for them.
    ahead: VecDeque<(String, Vec<Value>, Result<Rows, ConnError>)>,
    count: ReadsAheadCount,
}

/// Reads sent ahead of a body's asking ([`ReadPlan`]), by what became of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadsAheadCount {
    /// The body asked for it next: a round trip saved.
    pub answered: u64,
    /// The body wrote, asked for another read, or ended first: work the server did for nothing.
    pub thrown_away: u64,
}

impl ReadsAheadCount {
    /// The names its two counts go by in a storage's tally, and so among its node's counters.
    pub const ANSWERED: &'static str = "reads_ahead_answered";
    pub const THROWN_AWAY: &'static str = "reads_ahead_thrown_away";
}

impl std::ops::AddAssign for ReadsAheadCount {
    fn add_assign(&mut self, other: ReadsAheadCount) {
        self.answered += other.answered;
        self.thrown_away += other.thrown_away;
    }
}

impl ReadsAhead {
    fn following(plan: ReadPlan) -> ReadsAhead {
        ReadsAhead { plan, asked: Vec::new(), wrote: false, ahead: VecDeque::new(), count: ReadsAheadCount::default() }
    }
}

/// The table and key locks of one transaction of the two-phase-commit baseline on PostgreSQL.
struct TableLocks {
    /// Locked against writers and each other (`SHARE ROW EXCLUSIVE`): a transaction that read a
    /// table in plain `SHARE` mode and then wrote it would deadlock with another that did the
    /// same, a wait that only the lock timeout would end. Key locks of these tables are taken
    /// exclusive for the same reason.
    written: BTreeSet<String>,
    held: BTreeSet<String>,
    /// Key locks held ([`crate::dialect::KeyLock`]), with whether exclusive.
    keys: HashMap<i64, bool>,
}

impl ServerDb<'_> {
    fn statement(&self, stmt: &str, args: &[Value]) -> Result<&crate::dialect::ServerStatement, DbError> {
        let s = self.sql.statement(self.txn.name, stmt).ok_or_else(|| DbError::Undeclared { txn: self.txn.name.into(), stmt: stmt.into() })?;
        if s.arity != args.len() {
            return Err(DbError::Arity { stmt: stmt.into(), expected: s.arity, got: args.len() });
        }
        Ok(s)
    }

    /// Runs `sql`, remembering a failure that forces the transaction to run again.
    fn run(&mut self, stmt: &str, sql: &str, binds: &[usize], args: &[Value]) -> Result<(Rows, u64), DbError> {
        self.not_failed(stmt)?;
        let bound: Vec<&Value> = binds.iter().map(|i| &args[*i]).collect();
        self.conn.run(sql, &bound).map_err(|e| self.error(stmt, e))
    }

    /// Once the transaction must run again, every statement the body still makes fails.
    fn not_failed(&self, stmt: &str) -> Result<(), DbError> {
        match &self.failure {
            Some(f) => Err(DbError::Engine { stmt: stmt.into(), message: f.to_string() }),
            None => Ok(()),
        }
    }

    /// The error the body sees of `e`; anything but a statement's own error is also kept as
    /// the failure that runs the transaction again.
    fn error(&mut self, stmt: &str, e: ConnError) -> DbError {
        let message = e.to_string();
        if !matches!(e, ConnError::Statement(_)) {
            self.failure = Some(e);
        }
        DbError::Engine { stmt: stmt.into(), message }
    }

    fn image(&self, table: &str, row: Vec<Value>, kind: ChangeSort) -> Result<RowChange, DbError> {
        let t = self.app.table(table).expect("translated statements name declared tables");
        if row.len() != t.columns.len() {
            return Err(DbError::Engine { stmt: table.into(), message: format!("a captured row of `{table}` has {} columns, the table {}", row.len(), t.columns.len()) });
        }
        let named: Vec<(String, Value)> = t.columns.iter().map(|c| c.name.clone()).zip(row).collect();
        let (key, rest): (Vec<_>, Vec<_>) = named.into_iter().partition(|(c, _)| t.primary_key.contains(c));
        let kind = match kind {
            ChangeSort::Insert => {
                // The row as declared: key columns in their places.
                let row = t.columns.iter().map(|c| key.iter().chain(rest.iter()).find(|(n, _)| *n == c.name).cloned().expect("every column")).collect();
                ChangeKind::Insert { row }
            }
            ChangeSort::Update => ChangeKind::Update { key, set: rest },
            ChangeSort::Delete => ChangeKind::Delete { key },
        };
        Ok(RowChange { table: table.to_string(), kind })
    }
}

impl ServerDb<'_> {
    /// Locks those of `tables` this transaction has not locked yet, when it holds its locks to
    /// commit.
    fn lock_tables(&mut self, stmt: &str, tables: &[String]) -> Result<(), DbError> {
        let Some(locks) = &mut self.locks else { return Ok(()) };
        let engine = self.sql.engine;
        let fresh: Vec<&String> = tables.iter().filter(|t| !locks.held.contains(*t)).collect();
        if fresh.is_empty() {
            return Ok(());
        }
        let (against_all, against_writers): (Vec<&String>, Vec<&String>) = fresh.into_iter().partition(|t| locks.written.contains(*t));
        locks.held.extend(against_all.iter().chain(against_writers.iter()).map(|t| t.to_string()));
        for (group, mode) in [(against_all, "SHARE ROW EXCLUSIVE"), (against_writers, "SHARE")] {
            if !group.is_empty() {
                let sql = format!("LOCK TABLE {} IN {mode} MODE", idents(engine, &group));
                self.run(stmt, &sql, &[], &[])?;
            }
        }
        Ok(())
    }
}

impl ServerDb<'_> {
    /// What [`TwoPhaseLock::Partition`] locks before its statement runs: its key locks, the key
    /// locks of the values its partner is reached by (of absent partners only, when reached by
    /// key), then every row it can read; and, for a partner reached by key, if the pairs and the
    /// absent partners do not account for every row matched, the partner's table whole.
    fn lock_partition(&mut self, stmt: &str, keys: &[KeyLock], every_row: Option<&(String, Vec<usize>)>, partner: Option<&Partner>, args: &[Value]) -> Result<(), DbError> {
        for key in keys {
            self.lock_keys(stmt, &key.table, &[key.key(args)], false)?;
        }
        let found = match partner {
            Some(p) => {
                let found = self.run(stmt, &p.keys_sql, &p.binds, args)?.0;
                let keys: Vec<i64> = found.iter().map(|row| p.key(row)).collect();
                self.lock_keys(stmt, &p.table, &keys, false)?;
                found.len()
            }
            None => 0,
        };
        let Some((rows_sql, binds)) = every_row else { return Ok(()) };
        let pairs = self.run(stmt, rows_sql, binds, args)?.0.len();
        if let Some(p @ Partner { count_sql: Some(count_sql), .. }) = partner {
            let counted = self.run(stmt, count_sql, &p.binds, args)?.0;
            if counted.first().and_then(|r| r.first()).and_then(Value::as_int) != Some((pairs + found) as i64) {
                self.lock_tables(stmt, std::slice::from_ref(&p.table))?;
            }
        }
        Ok(())
    }

    /// Takes the key locks `keys` of `table` this transaction does not hold yet, exclusive if
    /// it writes the table or `exclusive` (an INSERT's), when it holds its locks to commit.
    fn lock_keys(&mut self, stmt: &str, table: &str, keys: &[i64], exclusive: bool) -> Result<(), DbError> {
        let Some(locks) = &mut self.locks else { return Ok(()) };
        let exclusive = exclusive || locks.written.contains(table);
        let mut fresh: Vec<i64> = keys.iter().copied().filter(|k| locks.keys.get(k).is_none_or(|held_exclusive| exclusive && !held_exclusive)).collect();
        // In one order, so that two transactions taking several do not deadlock on them.
        fresh.sort_unstable();
        fresh.dedup();
        if fresh.is_empty() {
            return Ok(());
        }
        for k in &fresh {
            locks.keys.insert(*k, exclusive);
        }
        let (sql, args) = key_lock_statement(&fresh, exclusive);
        let binds: Vec<usize> = (0..args.len()).collect();
        self.run(stmt, &sql, &binds, &args).map(|_| ())
    }
}

impl Db for ServerDb<'_> {
    fn query(&mut self, stmt: &str, args: &[Value]) -> Result<Rows, DbError> {
        let s = self.statement(stmt, args)?.clone();
        let (Some(_), Some(lock)) = (&self.locks, &s.lock) else {
            return self.read(stmt, &s, args);
        };
        match lock {
            TwoPhaseLock::Key { table, sql, absent } => {
                let locked = sql.as_deref().unwrap_or(&s.sql);
                let rows = self.run(stmt, locked, &s.binds, args)?.0;
                if !rows.is_empty() {
                    return Ok(rows);
                }
                match absent {
                    // The row may have come meanwhile: run again, it is locked if it did.
                    Some(k) => {
                        self.lock_keys(stmt, table, &[k.key(args)], false)?;
                        return Ok(self.run(stmt, locked, &s.binds, args)?.0);
                    }
                    None => self.lock_tables(stmt, std::slice::from_ref(table))?,
                }
            }
            TwoPhaseLock::Partition { keys, sql, every_row, partner } => {
                self.lock_partition(stmt, keys, every_row.as_ref(), partner.as_ref(), args)?;
                return Ok(self.run(stmt, sql, &s.binds, args)?.0);
            }
            TwoPhaseLock::Join { whole, sql, keyed, count_sql, count_binds, driving_key } => {
                if let Some(k) = driving_key {
                    self.lock_keys(stmt, &k.table, &[k.key(args)], false)?;
                }
                self.lock_tables(stmt, whole)?;
                let rows = self.run(stmt, sql, &s.binds, args)?.0;
                let driving = self.run(stmt, count_sql, count_binds, args)?.0;
                let counted = driving.first().and_then(|r| r.first()).and_then(Value::as_int);
                // With the driving row named by its key (not locked whole), none counted is an
                // absence, which no row lock covers.
                let driving_absent = whole.is_empty() && driving_key.is_none() && counted == Some(0);
                if counted == Some(rows.len() as i64) && !driving_absent {
                    return Ok(rows);
                }
                self.lock_tables(stmt, keyed)?;
            }
            // Its row locks cover it, an empty answer too (`TwoPhaseLock::Rows`).
            TwoPhaseLock::Rows { sql } => return Ok(self.run(stmt, sql, &s.binds, args)?.0),
            TwoPhaseLock::Tables(tables) => self.lock_tables(stmt, tables)?,
            TwoPhaseLock::Insert { .. } => {}
        }
        Ok(self.run(stmt, &s.sql, &s.binds, args)?.0)
    }

    fn execute(&mut self, stmt: &str, args: &[Value]) -> Result<usize, DbError> {
        self.writes();
        let s = self.statement(stmt, args)?.clone();
        if let (Some(_), Some(lock)) = (&self.locks, &s.lock) {
            match lock {
                TwoPhaseLock::Key { table, sql, absent } => {
                    // A query run for its count locks its row as it does under `query`.
                    let mut locked = s.clone();
                    if let Some(sql) = sql {
                        locked.sql = sql.clone();
                    }
                    let n = self.execute_once(stmt, &locked, args)?;
                    if n > 0 {
                        return Ok(n);
                    }
                    match absent {
                        Some(k) => {
                            self.lock_keys(stmt, table, &[k.key(args)], false)?;
                            return self.execute_once(stmt, &locked, args);
                        }
                        None => self.lock_tables(stmt, std::slice::from_ref(table))?,
                    }
                }
                TwoPhaseLock::Partition { keys, sql, every_row, partner } => {
                    self.lock_partition(stmt, keys, every_row.as_ref(), partner.as_ref(), args)?;
                    let mut locked = s.clone();
                    locked.sql = sql.clone();
                    return self.execute_once(stmt, &locked, args);
                }
                TwoPhaseLock::Insert { table, sql, capture_sql, new_rows } => {
                    let mut keys = Vec::new();
                    for row in new_rows {
                        let value = |c: &str| row.iter().find(|(col, _)| col == c).map(|(_, v)| v.encoded(args));
                        match self.sql.new_row_keys(table, value) {
                            Some(k) => keys.extend(k),
                            None => unreachable!("`dialect::translate` refuses an INSERT that lacks a key-locked column"),
                        }
                    }
                    self.lock_keys(stmt, table, &keys, true)?;
                    let mut quiet = s.clone();
                    quiet.sql = sql.clone();
                    if let Capture::Returning { sql, .. } = &mut quiet.capture {
                        *sql = capture_sql.clone();
                    }
                    let n = self.execute_once(stmt, &quiet, args)?;
                    if n > 0 {
                        return Ok(n);
                    }
                    self.lock_tables(stmt, std::slice::from_ref(table))?;
                }
                // A join run for its count: every table it reads locked whole.
                TwoPhaseLock::Join { whole, keyed, .. } => {
                    self.lock_tables(stmt, whole)?;
                    self.lock_tables(stmt, keyed)?;
                }
                TwoPhaseLock::Rows { sql } => {
                    let mut locked = s.clone();
                    locked.sql = sql.clone();
                    return self.execute_once(stmt, &locked, args);
                }
                TwoPhaseLock::Tables(tables) => self.lock_tables(stmt, tables)?,
            }
        }
        self.execute_once(stmt, &s, args)
    }

    fn write(&mut self, stmt: &str, args: &[Value]) -> Result<(), DbError> {
        if !self.send_ahead {
            return self.execute(stmt, args).map(|_| ());
        }
        self.writes();
        let s = self.statement(stmt, args)?;
        let bound: Vec<Value> = s.binds.iter().map(|i| args[*i].clone()).collect();
        let sql = s.sql.clone();
        self.not_failed(stmt)?;
        self.conn.send_ahead(stmt, &sql, bound).map_err(|e| self.error(stmt, e))?;
        self.changed += 1;
        Ok(())
    }
}

impl ServerDb<'_> {
    /// A read without locks held to commit: answered from what was read ahead if the body asks
    /// what the plan expected, else run, with the plan's next reads if it is the plan's
    /// ([`ReadPlan`]).
    fn read(&mut self, stmt: &str, s: &crate::dialect::ServerStatement, args: &[Value]) -> Result<Rows, DbError> {
        let Some(reads) = self.reads.as_mut().filter(|r| !r.wrote) else {
            return Ok(self.run(stmt, &s.sql, &s.binds, args)?.0);
        };
        if let Some((next, next_args, _)) = reads.ahead.front() {
            if next == stmt && next_args == args {
                let (next, next_args, answer) = reads.ahead.pop_front().expect("an answer read ahead");
                reads.asked.push((next, next_args));
                reads.count.answered += 1;
                self.not_failed(stmt)?;
                return answer.map_err(|e| self.error(stmt, e));
            }
            self.drop_reads_ahead();
        }
        let reads = self.reads.as_mut().expect("reading ahead");
        let later = if s.reads_ahead { reads.plan.after(reads.asked.len(), stmt, args, self.params) } else { Vec::new() };
        reads.asked.push((stmt.to_string(), args.to_vec()));
        let sql = self.sql;
        let txn = self.txn.name;
        let later: Vec<(String, Vec<Value>, &crate::dialect::ServerStatement)> = later
            .into_iter()
            .map_while(|(name, bound)| {
                let t = sql.statement(txn, &name).filter(|t| t.reads_ahead && t.arity == bound.len())?;
                Some((name, bound, t))
            })
            .collect();
        if later.is_empty() {
            return Ok(self.run(stmt, &s.sql, &s.binds, args)?.0);
        }
        self.not_failed(stmt)?;
        let bind = |t: &crate::dialect::ServerStatement, args: &[Value]| t.binds.iter().map(|i| args[*i].clone()).collect::<Vec<Value>>();
        let values: Vec<(&str, Vec<Value>)> =
            std::iter::once((s.sql.as_str(), bind(s, args))).chain(later.iter().map(|(_, bound, t)| (t.sql.as_str(), bind(t, bound)))).collect();
        let together: Vec<(&str, Vec<&Value>)> = values.iter().map(|(sql, vs)| (*sql, vs.iter().collect())).collect();
        let mut answers = self.conn.read_together(&together).map_err(|e| self.error(stmt, e))?.into_iter();
        let first = answers.next().expect("an answer for each read");
        let reads = self.reads.as_mut().expect("reading ahead");
        reads.ahead = later.into_iter().zip(answers).map(|((name, bound, _), answer)| (name, bound, answer)).collect();
        first.map_err(|e| self.error(stmt, e))
    }

    /// The body writes: what was read ahead is thrown away, and nothing is read ahead after.
    fn writes(&mut self) {
        self.drop_reads_ahead();
        if let Some(reads) = &mut self.reads {
            reads.wrote = true;
        }
    }

    /// Throws away the answers read ahead that the body has not asked for. One that failed
    /// aborted the transaction at a read the body did not make: it runs again, reading nothing
    /// ahead ([`ConnError::SentAhead`]).
    fn drop_reads_ahead(&mut self) {
        let Some(reads) = &mut self.reads else { return };
        reads.count.thrown_away += reads.ahead.len() as u64;
        let failed = reads.ahead.drain(..).find_map(|(name, _, answer)| answer.err().map(|e| (name, e)));
        if let (Some((name, e)), None) = (failed, &self.failure) {
            self.failure = Some(match e {
                ConnError::Statement(m) => ConnError::SentAhead(format!("statement `{name}`, read ahead: {m}")),
                other => other,
            });
        }
    }

    fn execute_once(&mut self, stmt: &str, s: &crate::dialect::ServerStatement, args: &[Value]) -> Result<usize, DbError> {
        let writes = !matches!(s.capture, Capture::Read);
        if self.capture.is_none() {
            let (_, n) = self.run(stmt, &s.sql, &s.binds, args)?;
            if writes {
                self.changed += n;
            }
            return Ok(n as usize);
        }
        let n = match &s.capture {
            Capture::Read => self.run(stmt, &s.sql, &s.binds, args)?.1,
            Capture::Returning { table, kind, sql, binds } => {
                let (rows, _) = self.run(stmt, sql, binds, args)?;
                let n = rows.len() as u64;
                for row in rows {
                    let change = self.image(table, row, *kind)?;
                    self.capture.as_mut().expect("capturing").push(change);
                }
                n
            }
            Capture::ReadBack { table, keys, key_binds, reread } => {
                let (matched, _) = self.run(stmt, keys, key_binds, args)?;
                let (_, n) = self.run(stmt, &s.sql, &s.binds, args)?;
                for key in matched {
                    let binds: Vec<usize> = (0..key.len()).collect();
                    let (mut rows, _) = self.run(stmt, reread, &binds, &key)?;
                    let Some(row) = rows.pop() else {
                        return Err(DbError::Engine { stmt: stmt.into(), message: format!("a row of `{table}` it updated is gone") });
                    };
                    let change = self.image(table, row, ChangeSort::Update)?;
                    self.capture.as_mut().expect("capturing").push(change);
                }
                n
            }
        };
        if writes {
            self.changed += n;
        }
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(stmt: &str, args: &[i64]) -> (String, Vec<Value>) {
        (stmt.to_string(), args.iter().map(|a| Value::Int(*a)).collect())
    }

    #[test]
    fn a_plan_holds_the_reads_whose_arguments_were_parameters_up_to_the_first_that_was_not() {
        let params = [Value::Int(7), Value::Int(9)];
        let reads = [asked("cart", &[7]), asked("line", &[7, 9]), asked("price", &[40]), asked("item", &[9])];
        let plan = ReadPlan::learn(&reads, &params, |_| true);
        let expected = |stmt: &str, params: Vec<usize>| PlannedRead { stmt: stmt.into(), params };
        assert_eq!(plan, ReadPlan(vec![expected("cart", vec![0]), expected("line", vec![0, 1])]));
        // A read that must not run early ends the plan too.
        assert_eq!(ReadPlan::learn(&reads, &params, |s| s != "line"), ReadPlan(vec![expected("cart", vec![0])]));
    }

    #[test]
    fn what_is_read_ahead_is_what_the_last_two_plans_agree_on() {
        let params = [Value::Int(7), Value::Int(9)];
        let learn = |reads: &[(String, Vec<Value>)]| ReadPlan::learn(reads, &params, |_| true);
        let a = learn(&[asked("cart", &[7]), asked("item", &[9]), asked("line", &[7, 9])]);
        let b = learn(&[asked("cart", &[7]), asked("item", &[9]), asked("stock", &[9])]);
        let mut plans = ReadPlans::default();
        plans.learnt(a.clone());
        assert_eq!(plans.agreed, ReadPlan::default(), "one run is no agreement: nothing is read ahead");
        plans.learnt(a.clone());
        assert_eq!(plans.agreed, a);
        plans.learnt(b.clone());
        assert_eq!(plans.agreed, ReadPlan(a.0[..2].to_vec()), "the branch the body took differently is left out");
        assert_eq!(plans.agreed.after(0, "cart", &[Value::Int(7)], &params), vec![asked("item", &[9])]);
        plans.learnt(a.clone());
        assert_eq!(plans.agreed, ReadPlan(a.0[..2].to_vec()));
        // A read bound to another parameter (the two were equal once) is not agreed on either.
        let once_equal = ReadPlan::learn(&[asked("cart", &[7]), asked("item", &[7])], &[Value::Int(7), Value::Int(7)], |_| true);
        plans.learnt(once_equal);
        assert_eq!(plans.agreed, ReadPlan(a.0[..1].to_vec()));
    }

    #[test]
    fn a_plan_reads_ahead_only_behind_its_own_read_asked_with_the_arguments_it_binds() {
        let plan = ReadPlan::learn(&[asked("cart", &[7]), asked("item", &[9]), asked("line", &[7, 9])], &[Value::Int(7), Value::Int(9)], |_| true);
        let next = [Value::Int(3), Value::Int(5)];
        let bound = |stmt: &str, args: &[i64]| asked(stmt, args);
        assert_eq!(plan.after(0, "cart", &[Value::Int(3)], &next), vec![bound("item", &[5]), bound("line", &[3, 5])]);
        assert_eq!(plan.after(1, "item", &[Value::Int(5)], &next), vec![bound("line", &[3, 5])]);
        assert!(plan.after(0, "cart", &[Value::Int(5)], &next).is_empty(), "another argument");
        assert!(plan.after(0, "item", &[Value::Int(5)], &next).is_empty(), "another statement at that place");
        assert!(plan.after(2, "line", &[Value::Int(3), Value::Int(5)], &next).is_empty(), "nothing after the last");
        assert!(plan.after(0, "cart", &[Value::Int(3)], &[Value::Int(3)]).is_empty(), "a parameter the request lacks");
    }
}
