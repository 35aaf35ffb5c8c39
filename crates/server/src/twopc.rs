//! The two-phase-commit baseline's storage (`ensemble_twopc`): one-phase transactions and
//! prepared branches, with no writer lock and no counters: the server's own locking is the
//! concurrency control, as it is for a user who runs the application on a distributed database.
//! - MariaDB: XA branches (`XA START/END/PREPARE/COMMIT`) under InnoDB's SERIALIZABLE, strict
//!   two-phase locking with row and next-key locks.
//! - PostgreSQL: `PREPARE TRANSACTION`/`COMMIT PREPARED` under READ COMMITTED, every statement
//!   holding its read locks to commit as `dialect::TwoPhaseLock` says (PostgreSQL takes none of
//!   its own), and `lock_timeout` bounding each wait. The server must have
//!   `max_prepared_transactions` above 0, checked when an instance's storage is made.
//!
//! Two things a node's storage keeps beside its connections, shared by its workers
//! ([`TwoPcShared`]):
//! - the instance's clock, which gives each transaction its commit timestamp (the argument is
//!   in `ensemble_twopc`'s doc): a tick is taken while the transaction holds every lock it
//!   will take, and a decision moves the clock up to the transaction's timestamp before its
//!   branch commits;
//! - connections that hold a branch until its decision: a coordinator's branch, left open
//!   until the votes are in, on both servers; and on MariaDB a participant's prepared branch
//!   too, since MariaDB lets a session that prepared an XA branch do nothing else until it
//!   commits or rolls it back. The branch parks its connection here and the worker takes a
//!   spare one (or opens one); the decision's job ends the branch on the parked connection and
//!   returns it to the spares.
//!
//! Two tables beside the application's, in each instance's database, make the coordinator's
//! decisions recoverable (`ensemble_twopc`'s doc, "The commit point, and recovery"):
//! [`DECISIONS`], one row per distributed transaction this instance coordinated and committed
//! (or, written by a lookup that found none, aborted), inserted by the coordinator's branch in
//! its commit; and [`INCARNATIONS`], one row per start of the instance's node.
//!
//! A deadlock that spans instances is invisible to each server. Every global locks its own
//! instance's copy of the replicated rows first, then asks the others to apply its changes, so
//! two globals from different instances that write the same replicated row would each hold
//! what the other's participant needs. A participant therefore does not wait for a lock
//! (`innodb_lock_wait_timeout = 0`; PostgreSQL's `lock_timeout` of 1 ms): a branch whose rows
//! are locked votes no at once, and the coordinator runs the transaction again after a
//! back-off. A one-phase transaction or a
//! coordinator's branch waits up to [`LOCK_WAIT_S`] (for a prepared branch's decision, say),
//! and one that times out or deadlocks before it prepared runs again here (counted as a retry).

use crate::conn::{Conn, ConnError};
use crate::dialect::{Engine, Translated};
use crate::storage::{backoff, backoff_up_to, ApplyError, Attempt, ServerError, ServerStorage, SETUP_LOSSES};
use ensemble_app::{Application, InstanceId, StateUpdate};
use ensemble_core::{Request, Rows, Storage, Value};
use ensemble_twopc::{Job, JobResult, Xid};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How long a statement waits for a row lock before the server gives up on it, in seconds.
/// MySQL Cluster, the 2PC system of Gyro's Figure 5, waits 1.2 s by default
/// (`TransactionDeadlockDetectionTimeout`); InnoDB takes whole seconds.
pub const LOCK_WAIT_S: u32 = 1;

/// How long a PostgreSQL lock wait lasts before the server looks for a deadlock, in ms.
pub(crate) const DEADLOCK_CHECK_MS: u32 = 10;

/// How often a one-phase transaction or a coordinator's branch runs again after the server
/// made it a victim before the storage gives up.
const MAX_RETRIES: u32 = 1000;

/// The first back-off of a victim, in microseconds (then doubled per retry, up to
/// [`RETRY_DOUBLINGS`] times): here a victim is mostly a transaction that met a prepared
/// branch's locks, which stay until the decision's round trips, longer than a one-server
/// transaction's.
const RETRY_BACKOFF_US: u64 = 1000;

/// How many times a victim's back-off doubles at most: to about 2 s, past the second an attempt
/// may wait for a lock ([`LOCK_WAIT_S`]). Transactions that keep meeting on the same gap lock
/// (RUBiS registrations reading their fresh user ids under SERIALIZABLE: each takes the gap,
/// then waits for every other holder's to insert) pass one at a time only when they come back
/// further apart than their attempts last; with a back-off capped at 64 ms, three dozen of them
/// kept each other in attempts for a minute (RESULTS.md, "A convoy caught with the locks it
/// waits for").
const RETRY_DOUBLINGS: u32 = 11;

/// How many times a lookup of a decision is made, each on a new connection, while the server
/// ends its sessions ([`TwoPcStorage::recorded`]).
const RECORD_LOOKUPS: u32 = 20;

/// The coordinator's decisions: `(epoch, n)` of the transaction id, `committed` 1 or 0, and the
/// commit timestamp.
pub const DECISIONS: &str = "ensemble_2pc_decisions";
/// The incarnations of the instance's node: each start takes the next number.
pub const INCARNATIONS: &str = "ensemble_2pc_incarnations";
/// The clock's ceiling: one row, a value the instance's clock has not passed. A node that
/// starts again over the database starts its clock there, past every timestamp an earlier
/// incarnation gave or moved its clock up to (`TwoPcShared::cover`).
pub const CLOCK: &str = "ensemble_2pc_clock";
/// How far past the clock a raise of its ceiling reaches: one write per this many ticks, and a
/// restarted clock jumps by at most this much.
const CEILING_STEP: u64 = 1 << 20;

/// How long a lookup of a decision waits for the record's key: a commit of an earlier
/// incarnation may hold it until the server has finished that commit or noticed its session
/// ended.
const RECORD_WAIT_S: u32 = 10;

/// What the workers of one instance share.
pub struct TwoPcShared {
    url: String,
    app: Arc<Application>,
    sql: Arc<Translated>,
    instance: InstanceId,
    /// Names this run's branches apart from any other run's on the same server (XA ids are
    /// server-wide).
    run: String,
    /// Tables every instance holds: a global that changed none of their rows commits in one
    /// phase.
    replicated: BTreeSet<String>,
    clock: AtomicU64,
    /// What [`CLOCK`] holds as far as this node knows (it only ever raises it), and the lock
    /// that lets one worker at a time raise it.
    ceiling: AtomicU64,
    raising: Mutex<()>,
    parked: Mutex<HashMap<Xid, ServerStorage>>,
    spare: Mutex<Vec<ServerStorage>>,
    /// What tells this node's sessions from those of an earlier incarnation, read before any
    /// of them opened ([`crate::admin::SessionMark`]).
    earlier: crate::admin::SessionMark,
}

impl TwoPcShared {
    /// Refuses an engine the baseline cannot run on correctly (see `ensemble_twopc`).
    pub fn new(
        url: &str,
        app: Arc<Application>,
        sql: Arc<Translated>,
        instance: InstanceId,
        run: &str,
        replicated: BTreeSet<String>,
    ) -> Result<Arc<TwoPcShared>, ServerError> {
        if sql.engine == Engine::Postgres {
            crate::admin::check_prepared_transactions(url).map_err(ServerError::Invalid)?;
        }
        let earlier = crate::admin::SessionMark::now(&mut Conn::open(sql.engine, url)?, sql.engine)?;
        Ok(Arc::new(TwoPcShared {
            url: url.to_string(),
            app,
            sql,
            instance,
            run: run.to_string(),
            replicated,
            clock: AtomicU64::new(0),
            ceiling: AtomicU64::new(0),
            raising: Mutex::new(()),
            parked: Mutex::new(HashMap::new()),
            spare: Mutex::new(Vec::new()),
            earlier,
        }))
    }

    fn connect(&self) -> Result<ServerStorage, ServerError> {
        if let Some(s) = self.spare.lock().expect("no panic while holding the lock").pop() {
            return Ok(s);
        }
        let mut s = ServerStorage::open(&self.url, self.app.clone(), self.sql.clone(), self.instance)?;
        if self.engine() == Engine::Postgres {
            // Table locks make deadlocks within one server common, and PostgreSQL's default
            // wait before looking for one is as long as the lock timeout. Every later session
            // of the storage (a reconnection) sets it too.
            s.look_for_deadlocks_early()?;
        }
        Ok(s)
    }

    fn engine(&self) -> Engine {
        self.sql.engine
    }

    /// Starts a transaction whose lock waits last up to [`LOCK_WAIT_S`] (`wait`) or not at all:
    /// a one-phase transaction (`branch` None) or the branch `branch`.
    fn begin(&self, branch: Option<&str>, wait: bool) -> String {
        match (self.engine(), branch) {
            (Engine::Mariadb, b) => {
                let start = b.map_or("START TRANSACTION".to_string(), |b| format!("XA START {b}"));
                format!("SET SESSION innodb_lock_wait_timeout = {}; {start}", if wait { LOCK_WAIT_S } else { 0 })
            }
            // PostgreSQL's 0 means no timeout: 1 ms is the least wait it takes. READ COMMITTED
            // gives each statement a snapshot taken after the locks it waited for (the
            // statements lock; see `TwoPhaseLock`).
            (Engine::Postgres, _) => {
                format!("SET lock_timeout = '{}ms'; BEGIN ISOLATION LEVEL READ COMMITTED", if wait { LOCK_WAIT_S * 1000 } else { 1 })
            }
        }
    }

    /// The statements that prepare a branch, each its own round trip.
    fn prepare(&self, branch: &str) -> Vec<String> {
        match self.engine() {
            Engine::Mariadb => vec![format!("XA END {branch}"), format!("XA PREPARE {branch}")],
            Engine::Postgres => vec![format!("PREPARE TRANSACTION {branch}")],
        }
    }

    /// Decides a prepared branch, from any session of its database.
    fn decide(&self, branch: &str, commit: bool) -> String {
        match (self.engine(), commit) {
            (Engine::Mariadb, true) => format!("XA COMMIT {branch}"),
            (Engine::Mariadb, false) => format!("XA ROLLBACK {branch}"),
            (Engine::Postgres, true) => format!("COMMIT PREPARED {branch}"),
            (Engine::Postgres, false) => format!("ROLLBACK PREPARED {branch}"),
        }
    }

    /// Whether a session that prepared a branch must keep it until the decision: MariaDB's
    /// does; PostgreSQL detaches a prepared transaction from its session at once.
    fn parks_prepared(&self) -> bool {
        self.engine() == Engine::Mariadb
    }

    /// The clock's next tick, once the ceiling covers it.
    fn tick(&self) -> Result<u64, ConnError> {
        let t = self.clock.fetch_add(1, Ordering::SeqCst) + 1;
        self.cover(t)?;
        Ok(t)
    }

    /// Moves the clock up to `ts` (a decision's), once the ceiling covers it.
    fn advance_to(&self, ts: u64) -> Result<(), ConnError> {
        self.clock.fetch_max(ts, Ordering::SeqCst);
        self.cover(ts)
    }

    /// Makes sure [`CLOCK`] holds at least `t` before a transaction whose timestamp is `t`, or
    /// that moved the clock up to `t`, commits here. Without it a node started again over the
    /// database would start its clock below timestamps its instance already gave or committed
    /// at (one-phase transactions record theirs nowhere), and a transaction ordered after one of
    /// them by its locks could get a smaller timestamp: the serial order the check replays
    /// would be wrong. Raised on a session of its own, committed at once: a raise is never
    /// rolled back with the transaction that asked for it, which may still be under way. The
    /// session is closed again (a raise comes once per [`CEILING_STEP`] ticks).
    fn cover(&self, t: u64) -> Result<(), ConnError> {
        if t <= self.ceiling.load(Ordering::SeqCst) {
            return Ok(());
        }
        let _one_at_a_time = self.raising.lock().expect("no panic while holding the lock");
        if t <= self.ceiling.load(Ordering::SeqCst) {
            return Ok(());
        }
        let raised = t.saturating_add(CEILING_STEP);
        // Raising is idempotent: an answer lost with its connection is asked again on another.
        let sql = format!("UPDATE {CLOCK} SET ceiling = {raised} WHERE ceiling < {raised}");
        let mut lost = 0;
        loop {
            let raise = Conn::open(self.engine(), &self.url)
                .map_err(|e| ConnError::Lost(format!("opening a session to raise the clock's ceiling: {e}")))
                .and_then(|mut c| c.batch(&sql));
            match raise {
                Ok(()) => break,
                Err(ConnError::Lost(_)) if lost < SETUP_LOSSES => lost += 1,
                Err(e) => return Err(e),
            }
        }
        self.ceiling.fetch_max(raised, Ordering::SeqCst);
        Ok(())
    }

    /// The XA id of this instance's branch of `xid`, quoted.
    fn branch(&self, xid: Xid) -> String {
        format!("'{}-{}-{}-{}-{}'", self.run, xid.coordinator.0, xid.epoch, xid.n, self.instance.0)
    }

    /// The transaction of a branch id [`Self::branch`] made for this run and instance.
    fn branch_of(&self, id: &str) -> Option<Xid> {
        let rest = id.strip_prefix(&self.run)?.strip_prefix('-')?;
        let parts: Vec<u64> = rest.split('-').map(|p| p.parse().ok()).collect::<Option<_>>()?;
        match parts[..] {
            [coordinator, epoch, n, instance] if instance == u64::from(self.instance.0) => {
                Some(Xid { coordinator: InstanceId(u32::try_from(coordinator).ok()?), epoch, n })
            }
            _ => None,
        }
    }

    /// The statement that records a decision; it fails on a record already there.
    fn record(&self, xid: Xid, commit: bool, ts: u64) -> String {
        format!("INSERT INTO {DECISIONS} (epoch, n, committed, ts) VALUES ({}, {}, {}, {ts})", xid.epoch, xid.n, u8::from(commit))
    }
}

/// One worker's storage: a connection, and what the instance's workers share.
pub struct TwoPcStorage {
    shared: Arc<TwoPcShared>,
    db: ServerStorage,
}

/// How one attempt went wrong.
enum Failure {
    /// Roll back, then run again (or vote no).
    Victim(ConnError),
    /// Nothing safe to do: the job fails.
    Fatal(String),
}

impl From<ConnError> for Failure {
    fn from(e: ConnError) -> Failure {
        match e {
            ConnError::Statement(m) => Failure::Fatal(m),
            other => Failure::Victim(other),
        }
    }
}

impl TwoPcStorage {
    pub fn open(shared: Arc<TwoPcShared>) -> Result<TwoPcStorage, ServerError> {
        let db = shared.connect()?;
        Ok(TwoPcStorage { shared, db })
    }

    /// Every row of `table`, for the check.
    pub fn dump(&mut self, table: &str) -> Result<Rows, ServerError> {
        self.db.dump(table)
    }

    /// Rolls back whatever the connection has open, XA branch or not; errors are moot (the
    /// branch may be gone already).
    fn abandon(&mut self, branch: Option<&str>) {
        match branch {
            Some(b) if self.shared.parks_prepared() => {
                let _ = self.db.conn.batch(&format!("XA END {b}"));
                let _ = self.db.conn.batch(&format!("XA ROLLBACK {b}"));
            }
            _ => {
                let _ = self.db.conn.batch("ROLLBACK");
            }
        }
    }

    /// After a victim: a lost connection is opened again (the server rolled back what it had),
    /// with every setting the old one had ([`ServerStorage::reconnect`]).
    fn recover(&mut self, e: &ConnError) -> Result<(), String> {
        let ConnError::Lost(why) = e else { return Ok(()) };
        self.db.reconnect().map_err(|e2| format!("the connection was lost ({why}) and could not be reopened: {e2}"))
    }

    /// A one-phase transaction, or a coordinator's branch (`xid`), run again while the server
    /// makes it a victim.
    fn execute(&mut self, request: &Request, xid: Option<Xid>) -> JobResult {
        let app = Arc::clone(&self.shared.app);
        let txn = match app.check_request(request) {
            Ok(t) => t,
            Err(e) => return JobResult::Rejected(e),
        };
        let mut retries = 0;
        loop {
            match self.attempt(txn, request, xid) {
                Ok(r) => {
                    return match r {
                        JobResult::Committed { outcome, ts, .. } => JobResult::Committed { outcome, ts, retries },
                        JobResult::Held { outcome, update, tick, .. } => JobResult::Held { outcome, update, tick, retries },
                        other => other,
                    }
                }
                Err(Failure::Victim(e)) if retries < MAX_RETRIES => {
                    self.abandon(None);
                    if let Err(m) = self.recover(&e) {
                        return JobResult::Failed(format!("transaction `{}`: {m}", request.txn));
                    }
                    retries += 1;
                    backoff_up_to(retries, RETRY_BACKOFF_US, RETRY_DOUBLINGS);
                }
                Err(Failure::Victim(e)) => {
                    self.abandon(None);
                    return JobResult::GaveUp(format!("still a victim after {MAX_RETRIES} retries: {e}"));
                }
                Err(Failure::Fatal(m)) => {
                    self.abandon(None);
                    return JobResult::Failed(format!("transaction `{}`: {m}", request.txn));
                }
            }
        }
    }

    fn attempt(&mut self, txn: &ensemble_app::TxnType, request: &Request, xid: Option<Xid>) -> Result<JobResult, Failure> {
        let locks = self.shared.engine() == Engine::Postgres;
        // Any of them may commit in one phase, and one that writes must be asked about if the
        // answer to its COMMIT is lost (`ServerStorage::commit_one_phase`).
        let writes = !self.shared.sql.written(txn.name).is_empty();
        self.db.begin_one_phase(&self.shared.begin(None, true), writes)?;
        let mut changes = Vec::new();
        let (outcome, failure, changed) = self.db.run_body_locking(txn, &request.params, xid.map(|_| &mut changes), locks, false);
        if let Some(f) = failure {
            return Err(Failure::from(f));
        }
        let replicates = changes.iter().any(|c| self.shared.replicated.contains(&c.table));
        let Some(xid) = xid.filter(|_| outcome.committed() && replicates) else {
            // Every lock this transaction takes is held: its tick orders it (crate doc).
            let ts = self.shared.tick().map_err(clock_failure)?;
            if !outcome.committed() {
                self.db.conn.batch("ROLLBACK")?;
                return Ok(JobResult::Committed { outcome, ts, retries: 0 });
            }
            return match self.db.commit_one_phase(changed) {
                Ok(()) => Ok(JobResult::Committed { outcome, ts, retries: 0 }),
                Err(lost) => Err(lost_commit(lost)),
            };
        };
        // The branch stays open until the votes are in: its connection is parked, and the
        // worker goes on with another, got first (none to be had: a victim's fate).
        let fresh = self.spare_connection()?;
        let tick = self.shared.tick().map_err(clock_failure)?;
        self.park_branch(xid, fresh);
        Ok(JobResult::Held { outcome, update: StateUpdate { changes, writer: None }, tick, retries: 0 })
    }

    /// Carries out the decision on the coordinator's held branch of `xid`: a commit inserts the
    /// decision's record, deletes the records of `forget` and commits, in one round trip: the
    /// transaction's commit point.
    fn decide_own(&mut self, xid: Xid, commit: bool, ts: u64, forget: &[Xid]) -> JobResult {
        let held = self.shared.parked.lock().expect("no panic while holding the lock").remove(&xid);
        let Some(mut held) = held else {
            return JobResult::Failed(format!("no branch of {xid:?} is held here"));
        };
        if !commit {
            // A connection lost on the way rolled it back just as well.
            if held.conn.batch("ROLLBACK").is_ok() {
                self.shared.spare.lock().expect("no panic while holding the lock").push(held);
            }
            return JobResult::Decided { committed: false };
        }
        // Before the branch commits and lets a conflicting transaction take its locks here.
        if let Err(e) = self.shared.advance_to(ts) {
            let _ = held.conn.batch("ROLLBACK");
            return JobResult::Failed(format!("committing {xid:?}: the clock's ceiling could not be raised to {ts}: {e}"));
        }
        let mut sql = self.shared.record(xid, true, ts);
        let mut epochs: std::collections::BTreeMap<u64, Vec<String>> = Default::default();
        for x in forget {
            epochs.entry(x.epoch).or_default().push(x.n.to_string());
        }
        for (epoch, ns) in epochs {
            sql += &format!("; DELETE FROM {DECISIONS} WHERE epoch = {epoch} AND n IN ({})", ns.join(", "));
        }
        let result = held.conn.batch(&format!("{sql}; COMMIT"));
        match result {
            Ok(()) => {
                self.shared.spare.lock().expect("no panic while holding the lock").push(held);
                JobResult::Decided { committed: true }
            }
            // The commit may or may not have happened: the record says which, once the server
            // has finished with the lost session (the lookup waits for its key; the session is
            // closed on this side first).
            Err(ConnError::Lost(why)) => {
                drop(held);
                match self.recorded(xid) {
                    Ok(Some((committed, _))) => JobResult::Decided { committed },
                    Ok(None) => JobResult::Failed(format!("commit of {xid:?}: the connection was lost ({why}), and its record's key stayed locked")),
                    Err(e) => JobResult::Failed(format!("commit of {xid:?}: the connection was lost ({why}), and then looking for its record: {e}")),
                }
            }
            // The record or the COMMIT failed: nothing of the branch committed.
            Err(_) => {
                if held.conn.batch("ROLLBACK").is_ok() {
                    self.shared.spare.lock().expect("no panic while holding the lock").push(held);
                }
                JobResult::Decided { committed: false }
            }
        }
    }

    /// The decision recorded for `xid` (committed, timestamp). Without a record, an abort is
    /// recorded first: its insert waits for a commit still in flight on the record's key (an
    /// earlier incarnation's, or one whose connection was lost), and once it is in, no such
    /// commit can happen any more. `None`: the key stayed locked for [`RECORD_WAIT_S`].
    ///
    /// A lookup whose own connection is lost is made again on a new one, up to
    /// [`RECORD_LOOKUPS`] times: asking again loses nothing. Its abort record either committed
    /// (the next lookup reads it) or not (the next inserts it, or reads the commit's record).
    fn recorded(&mut self, xid: Xid) -> Result<Option<(bool, u64)>, ConnError> {
        let mut lookups = 1;
        loop {
            match self.look_up_record(xid) {
                Err(e @ ConnError::Lost(_)) if lookups < RECORD_LOOKUPS => {
                    lookups += 1;
                    self.recover(&e).map_err(ConnError::Lost)?;
                    backoff(lookups, RETRY_BACKOFF_US);
                }
                other => return other,
            }
        }
    }

    fn look_up_record(&mut self, xid: Xid) -> Result<Option<(bool, u64)>, ConnError> {
        // This worker's own session may have gone with the other (a server restart ends all).
        if let Err(e @ ConnError::Lost(_)) = self.db.conn.batch("ROLLBACK") {
            self.recover(&e).map_err(ConnError::Lost)?;
        }
        let abort = self.shared.record(xid, false, 0);
        let (wait, insert) = match self.shared.engine() {
            Engine::Postgres => (format!("SET lock_timeout = '{}s'", RECORD_WAIT_S), format!("{abort} ON CONFLICT DO NOTHING")),
            Engine::Mariadb => (format!("SET SESSION innodb_lock_wait_timeout = {RECORD_WAIT_S}"), abort.replacen("INSERT", "INSERT IGNORE", 1)),
        };
        // READ COMMITTED on PostgreSQL: the SELECT's snapshot is taken after the insert's wait.
        let sql = format!("{wait}; {}; {insert}; SELECT committed, ts FROM {DECISIONS} WHERE epoch = {} AND n = {}", self.begin_records(), xid.epoch, xid.n);
        let rows = match self.db.conn.batch_rows(&sql) {
            Ok(rows) => rows,
            Err(ConnError::Retry(_)) => {
                let _ = self.db.conn.batch("ROLLBACK");
                return Ok(None);
            }
            Err(e) => {
                let _ = self.db.conn.batch("ROLLBACK");
                return Err(e);
            }
        };
        self.db.conn.batch("COMMIT")?;
        match &rows[..] {
            [row] => match (&row[0], &row[1]) {
                (Value::Int(c), Value::Int(ts)) => Ok(Some((*c != 0, u64::try_from(*ts).unwrap_or(0)))),
                other => Err(ConnError::Statement(format!("the record of {xid:?} reads {other:?}"))),
            },
            other => Err(ConnError::Statement(format!("the record of {xid:?} reads {other:?}"))),
        }
    }

    /// Starts a transaction on the incarnations and decisions tables: READ COMMITTED on
    /// PostgreSQL, the session's SERIALIZABLE on MariaDB.
    fn begin_records(&self) -> &'static str {
        match self.shared.engine() {
            Engine::Postgres => "BEGIN ISOLATION LEVEL READ COMMITTED",
            Engine::Mariadb => "START TRANSACTION",
        }
    }

    /// [`Job::Outcome`].
    fn outcome(&mut self, xid: Xid) -> JobResult {
        match self.recorded(xid) {
            Ok(Some((commit, ts))) => JobResult::Outcome { commit, ts },
            Ok(None) => JobResult::GaveUp(format!("the record of {xid:?} stayed locked for {RECORD_WAIT_S} s")),
            Err(e) => JobResult::Failed(format!("looking for the record of {xid:?}: {e}")),
        }
    }

    /// [`Job::Recover`]: ends what an earlier incarnation's sessions still run
    /// ([`crate::admin::end_earlier_transactions`]), makes the tables if this is the
    /// instance's first start, takes the next incarnation, moves the clock past every
    /// recorded timestamp, and lists this run's branches prepared at this instance.
    ///
    /// A connection lost on the way (a server that ends sessions may end this one while the
    /// node starts) is no reason to stop the instance: the old session is ended and waited out,
    /// which rolls back an incarnation not yet committed and settles one whose COMMIT was under
    /// way, and the recovery starts over on a new session, up to [`SETUP_LOSSES`] times. An
    /// incarnation the lost attempt committed is skipped: an epoch only has to be new, not the
    /// next number. Without the wait, the new attempt could read the last incarnation before
    /// the old COMMIT landed and then fail on its key. Before this, the instance stopped
    /// (seen in `scripts/sessions-ended.sh postgres-2pc`).
    fn recover_start(&mut self) -> JobResult {
        let mut lost = 0;
        loop {
            match self.recover_start_once() {
                Ok(r) => return r,
                Err(ConnError::Lost(why)) if lost < SETUP_LOSSES => {
                    lost += 1;
                    if let Err(m) = self.db.ask_once_the_old_session_ended(|_| Ok(())) {
                        return JobResult::Failed(format!("recovery at the node's start: the connection was lost ({why}), and then ending its session: {m}"));
                    }
                }
                Err(e) => {
                    let _ = self.db.conn.batch("ROLLBACK");
                    return JobResult::Failed(format!("recovery at the node's start: {e}"));
                }
            }
        }
    }

    fn recover_start_once(&mut self) -> Result<JobResult, ConnError> {
        // Before anything is read: a session of the killed incarnation may still commit a
        // decision's record or prepare a branch.
        crate::admin::end_earlier_transactions(&mut self.db.conn, self.shared.earlier)?;
        let start = self.begin_records();
        let conn = &mut self.db.conn;
        conn.batch(&format!(
            "CREATE TABLE IF NOT EXISTS {INCARNATIONS} (epoch BIGINT NOT NULL PRIMARY KEY); \
             CREATE TABLE IF NOT EXISTS {DECISIONS} (epoch BIGINT NOT NULL, n BIGINT NOT NULL, committed BIGINT NOT NULL, ts BIGINT NOT NULL, PRIMARY KEY (epoch, n)); \
             CREATE TABLE IF NOT EXISTS {CLOCK} (ceiling BIGINT NOT NULL)"
        ))?;
        // One node per instance starts at a time; two at once would both fail to insert the
        // same number, which is the incarnations' primary key.
        let rows = conn.batch_rows(&format!("{start}; SELECT COALESCE(MAX(epoch), 0) FROM {INCARNATIONS}"))?;
        let last = match rows.first().map(|r| &r[..]) {
            Some([Value::Int(e)]) if *e >= 0 => *e as u64,
            other => return Err(ConnError::Statement(format!("the last incarnation reads {other:?}"))),
        };
        let epoch = last + 1;
        let ts = conn.batch_rows(&format!("INSERT INTO {INCARNATIONS} (epoch) VALUES ({epoch}); SELECT COALESCE(MAX(ts), 0) FROM {DECISIONS}"))?;
        // The first start makes the ceiling's row; one node per instance starts at a time.
        let ceiling = match conn.batch_rows(&format!("SELECT ceiling FROM {CLOCK}"))?.first().map(|r| &r[..]) {
            None => {
                conn.batch(&format!("INSERT INTO {CLOCK} (ceiling) VALUES (0)"))?;
                0
            }
            Some([Value::Int(c)]) if *c >= 0 => *c as u64,
            other => return Err(ConnError::Statement(format!("the clock's ceiling reads {other:?}"))),
        };
        conn.batch("COMMIT")?;
        if let Some(Value::Int(ts)) = ts.first().and_then(|r| r.first()) {
            self.shared.clock.fetch_max(u64::try_from(*ts).unwrap_or(0), Ordering::SeqCst);
        }
        self.shared.clock.fetch_max(ceiling, Ordering::SeqCst);
        self.shared.ceiling.fetch_max(ceiling, Ordering::SeqCst);
        let ids: Vec<String> = match self.shared.engine() {
            Engine::Postgres => conn
                .batch_rows("SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")?
                .into_iter()
                .filter_map(|r| match r.into_iter().next() {
                    Some(Value::Text(gid)) => Some(gid),
                    _ => None,
                })
                .collect(),
            Engine::Mariadb => crate::admin::xa_prepared(conn)?,
        };
        let in_doubt = ids.iter().filter_map(|id| self.shared.branch_of(id)).collect();
        Ok(JobResult::Recovered { epoch, in_doubt })
    }

    /// [`Job::Apply`]. A connection lost before the branch was prepared is no reason to vote
    /// no: the old session is ended and waited out, which rolls back whatever of the branch
    /// reached it, and the branch is applied again on a new one, up to [`SETUP_LOSSES`] times.
    /// Most such losses are a worker's session that the server ended while the worker was idle,
    /// found dead by the branch's first statement; voted down, a transaction would be aborted
    /// for a fault that never touched it, and under a server that ends sessions faster than a
    /// worker's turn comes round again, every attempt of it would be (seen: runs that never
    /// drained, one request voted down hundreds of times).
    fn apply(&mut self, xid: Xid, update: &StateUpdate) -> JobResult {
        let b = self.shared.branch(xid);
        let mut lost = 0;
        loop {
            match self.apply_once(xid, &b, update) {
                Ok(tick) => return JobResult::Voted { yes: true, tick, why: None },
                Err(Failure::Victim(ConnError::Lost(why))) if lost < SETUP_LOSSES => {
                    lost += 1;
                    if let Err(m) = self.db.ask_once_the_old_session_ended(|_| Ok(())) {
                        return JobResult::Failed(format!("branch {xid:?}: the connection was lost ({why}), and then ending its session: {m}"));
                    }
                }
                Err(Failure::Victim(e)) => {
                    self.abandon(Some(&b));
                    if let Err(m) = self.recover(&e) {
                        return JobResult::Failed(format!("branch {xid:?}: {m}"));
                    }
                    return JobResult::Voted { yes: false, tick: 0, why: Some(e.to_string()) };
                }
                Err(Failure::Fatal(m)) => {
                    self.abandon(Some(&b));
                    return JobResult::Failed(format!("branch {xid:?}: {m}"));
                }
            }
        }
    }

    /// Applies `update` as branch `b` and prepares it; the branch's tick.
    fn apply_once(&mut self, xid: Xid, b: &str, update: &StateUpdate) -> Result<u64, Failure> {
        // A participant does not wait for a lock (see the module doc).
        self.db.conn.batch(&self.shared.begin(Some(b), false))?;
        let key_locks = self.shared.engine() == Engine::Postgres;
        for (k, c) in update.changes.iter().enumerate() {
            let failure = |e| match e {
                ApplyError::Conn(e) => Failure::from(e),
                ApplyError::Diverged(m) => Failure::Fatal(format!("row change {k} of {xid:?}: {m}")),
            };
            if key_locks {
                self.db.lock_new_row_keys(c).map_err(failure)?;
            }
            self.db.apply_change(c).map_err(failure)?;
        }
        // Taken before PREPARE, every lock the branch takes held (crate doc), since a tick
        // that fails after it would leave a branch prepared that no vote announced.
        let tick = self.shared.tick().map_err(clock_failure)?;
        self.prepare(xid, b)?;
        Ok(tick)
    }

    /// Prepares this worker's transaction as participant branch `b` of `xid`. On MariaDB the
    /// connection then holds the branch until its decision: it is parked, and the worker goes
    /// on with another.
    fn prepare(&mut self, xid: Xid, b: &str) -> Result<(), Failure> {
        let fresh = if self.shared.parks_prepared() { Some(self.spare_connection()?) } else { None };
        let steps = self.shared.prepare(b);
        let (last, before) = steps.split_last().expect("at least one statement");
        for sql in before {
            self.db.conn.batch(sql)?;
        }
        match self.db.conn.batch(last) {
            Ok(()) => {}
            Err(ConnError::Lost(why)) => {
                // Prepared or not, the branch's session is gone: prepared, it is decided from
                // any session (`Self::finish`), and the worker goes on with the one it asked on.
                if let Some(fresh) = fresh {
                    self.shared.spare.lock().expect("no panic while holding the lock").push(fresh);
                }
                return self.prepared_after_all(b, &why);
            }
            Err(e) => return Err(Failure::from(e)),
        }
        if let Some(fresh) = fresh {
            self.park_branch(xid, fresh);
        }
        Ok(())
    }

    /// A PREPARE whose answer the connection lost: the server may or may not have prepared
    /// branch `b`. Asked on a new session once the old one has ended and left the server's list
    /// (`ServerStorage::ask_once_the_old_session_ended`: a PREPARE under way finishes, an
    /// unprepared transaction is rolled back, and MariaDB hands a prepared branch over to other
    /// sessions), the branch is prepared if and only if the server lists it
    /// (`pg_prepared_xacts`, `XA RECOVER`): `Ok` (the vote is yes; the decision then comes from
    /// any session, `Self::finish`), or a victim's fate (no, or run again).
    ///
    /// The wait matters on MariaDB: asked, or decided, while the server still tears the old
    /// session down, a prepared branch may not be listed yet, and a decision sent then can leave its
    /// InnoDB transaction prepared in no list with its locks held until the server restarts
    /// (`crate::admin::sessions_innodb_holds`; RESULTS.md, "A branch decided while its session
    /// was torn down"). Before the wait, the job failed loudly here on MariaDB.
    fn prepared_after_all(&mut self, b: &str, why: &str) -> Result<(), Failure> {
        let unknown = |m: String| Failure::Fatal(format!("the connection was lost while preparing ({why}), and then asking whether {b} is prepared: {m}"));
        let engine = self.shared.engine();
        if self.db.ask_once_the_old_session_ended(|conn| is_prepared(engine, conn, b)).map_err(unknown)? {
            Ok(())
        } else {
            Err(Failure::Victim(ConnError::Retry(format!("the connection was lost while preparing ({why}), and the server rolled {b} back"))))
        }
    }

    /// The connection this worker goes on with once its current one holds a prepared branch,
    /// got before preparing: a branch is never prepared on a connection that could not be
    /// handed over. None to be had is a victim's fate (roll back, run again or vote no).
    fn spare_connection(&self) -> Result<ServerStorage, Failure> {
        self.shared.connect().map_err(|e| Failure::Victim(ConnError::Retry(format!("no connection to go on with once prepared: {e}"))))
    }

    /// Hands this worker's connection, which holds a branch until its decision, to the shared
    /// map, and goes on with `fresh`.
    fn park_branch(&mut self, xid: Xid, fresh: ServerStorage) {
        let held = std::mem::replace(&mut self.db, fresh);
        self.shared.parked.lock().expect("no panic while holding the lock").insert(xid, held);
    }

    fn finish(&mut self, xid: Xid, commit: bool, ts: u64) -> JobResult {
        if commit {
            // Before the branch commits and lets a conflicting transaction take its locks here.
            // A prepared branch stays prepared if this fails: the run fails loudly, and the
            // branch is in doubt for the next incarnation's recovery, not lost.
            if let Err(e) = self.shared.advance_to(ts) {
                return JobResult::Failed(format!("committing {xid:?}: the clock's ceiling could not be raised to {ts}: {e}"));
            }
        }
        let b = self.shared.branch(xid);
        let sql = self.shared.decide(&b, commit);
        let parked = self.shared.parked.lock().expect("no panic while holding the lock").remove(&xid);
        let was_parked = parked.is_some();
        let result = match parked {
            Some(mut conn) => {
                let mut r = conn.conn.batch(&sql);
                if let Err(ConnError::Lost(why)) = &r {
                    // The session that holds the branch is gone: MariaDB's branch is decided
                    // from another session, but only once the server has torn the old one down,
                    // InnoDB included (`crate::admin::sessions_innodb_holds` says why).
                    let engine = self.shared.engine();
                    let decided = conn.ask_once_the_old_session_ended(|c| match c.batch(&sql) {
                        // Not prepared any more: the lost attempt applied the decision.
                        Err(ConnError::Statement(m)) if m.contains("XAER_NOTA") && !is_prepared(engine, c, &b)? => Ok(()),
                        other => other,
                    });
                    match decided {
                        Ok(()) => r = Ok(()),
                        Err(m) => return JobResult::Failed(format!("`{sql}`: the connection was lost ({why}), and then: {m}")),
                    }
                }
                if r.is_ok() {
                    self.shared.spare.lock().expect("no panic while holding the lock").push(conn);
                }
                r
            }
            // PostgreSQL's prepared transactions belong to no session; MariaDB keeps a
            // prepared branch when its session ends. Either way any session may decide it.
            None => self.db.conn.batch(&sql),
        };
        match result {
            Ok(()) => JobResult::Finished,
            Err(ConnError::Lost(why)) => match self.decide_again(&b, &sql) {
                Ok(()) => JobResult::Finished,
                Err(m) => JobResult::Failed(format!("`{sql}`: the connection was lost ({why}), and then: {m}")),
            },
            // A branch an earlier incarnation of this node prepared, whose session MariaDB has
            // not yet seen end.
            Err(ConnError::Statement(m)) if !was_parked && m.contains("XAER_NOTA") => match self.decide_again(&b, &sql) {
                Ok(()) => JobResult::Finished,
                Err(m2) => JobResult::Failed(format!("`{sql}`: {m}, and then: {m2}")),
            },
            Err(e) => JobResult::Failed(format!("`{sql}`: {e}")),
        }
    }

    /// A decision whose connection was lost before its answer came: the server may or may not
    /// have applied it. A prepared branch outlives its session on both servers, so the decision
    /// is sent again from a live session until the server applies it, or until the branch is
    /// found no longer prepared: the lost attempt applied it, since nothing else decides this
    /// run's branches. Without this, the run would fail with the branch still prepared, its
    /// cleanup would roll it back, and a transaction whose other branches committed would lose
    /// this one.
    fn decide_again(&mut self, b: &str, sql: &str) -> Result<(), String> {
        let deadline = std::time::Instant::now() + crate::admin::DETACH_WAIT;
        loop {
            let e = match self.db.conn.batch(sql) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if std::time::Instant::now() >= deadline {
                return Err(format!("still not decided after {:?}: {e}", crate::admin::DETACH_WAIT));
            }
            if let ConnError::Lost(_) = e {
                // This worker's own connection went too (a server restart ends every session).
                self.recover(&e)?;
                continue;
            }
            if !is_prepared(self.shared.engine(), &mut self.db.conn, b).map_err(|e2| format!("{e}; and asking whether it is still prepared: {e2}"))? {
                return Ok(());
            }
            // MariaDB lets another session decide a prepared branch only once it has noticed
            // that the branch's session ended (`XAER_NOTA` until then), and a decision must also
            // wait for InnoDB to let go of the branch (`crate::admin::sessions_innodb_holds`).
            // The branch's session is not known here, so every session torn down is waited
            // for; what this cannot see is a teardown that has handed the branch over but not
            // yet left the process list.
            std::thread::sleep(crate::admin::DETACH_POLL);
            while self.shared.engine() == Engine::Mariadb && std::time::Instant::now() < deadline {
                let held = crate::admin::sessions_still_held(&mut self.db.conn).map_err(|e2| format!("{e}; and asking which sessions InnoDB still holds: {e2}"))?;
                if held.is_empty() {
                    break;
                }
                std::thread::sleep(crate::admin::DETACH_POLL);
            }
        }
    }
}

/// Whether branch `b` (quoted, as [`TwoPcShared::branch`] names it) is prepared on `conn`'s
/// server.
fn is_prepared(engine: Engine, conn: &mut Conn, b: &str) -> Result<bool, ConnError> {
    match engine {
        Engine::Postgres => Ok(!conn.batch_rows(&format!("SELECT gid FROM pg_prepared_xacts WHERE gid = {b}"))?.is_empty()),
        Engine::Mariadb => Ok(crate::admin::xa_prepared(conn)?.iter().any(|x| x == b.trim_matches('\''))),
    }
}

/// A tick the clock's ceiling could not cover: the transaction is rolled back and runs again
/// (or its branch votes no), as for any session the server lost.
fn clock_failure(e: ConnError) -> Failure {
    Failure::Victim(ConnError::Retry(format!("the clock's ceiling could not be raised: {e}")))
}

/// A one-phase COMMIT that failed ([`ServerStorage::commit_one_phase`]): a transaction the
/// server rolled back runs again, on the new connection the storage opened to ask.
fn lost_commit(failed: Attempt) -> Failure {
    match failed {
        Attempt::Again(e) => Failure::from(e),
        Attempt::RolledBack => Failure::Victim(ConnError::Retry("the connection was lost while committing, and the server rolled the transaction back".into())),
        Attempt::Unknown(why) => Failure::Fatal(format!("the connection was lost while committing ({why}); the outcome is unknown")),
        Attempt::Fatal(m) => Failure::Fatal(m),
    }
}

impl Storage for TwoPcStorage {
    type Job = Job;
    type Result = JobResult;
    fn run(&mut self, job: &Job) -> JobResult {
        match job {
            Job::Recover => self.recover_start(),
            Job::Local { request } => self.execute(request, None),
            Job::Branch { request, xid } => self.execute(request, Some(*xid)),
            Job::Apply { xid, update } => self.apply(*xid, update),
            Job::Decide { xid, commit, ts, forget } => self.decide_own(*xid, *commit, *ts, forget),
            Job::Finish { xid, commit, ts } => self.finish(*xid, *commit, *ts),
            Job::Outcome { xid } => self.outcome(*xid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::backoff_cap_us;

    #[test]
    fn a_victim_s_back_off_grows_past_an_attempt_s_lock_wait() {
        // Early retries stay quick: most victims met one prepared branch, decided within ms.
        assert_eq!(backoff_cap_us(1, RETRY_BACKOFF_US, RETRY_DOUBLINGS), 2_000);
        assert_eq!(backoff_cap_us(6, RETRY_BACKOFF_US, RETRY_DOUBLINGS), 64_000);
        // Victims that keep meeting come back, at the cap, further apart than one of their
        // attempts may wait for a lock.
        let cap = backoff_cap_us(u32::MAX, RETRY_BACKOFF_US, RETRY_DOUBLINGS);
        assert!(cap > 2 * u64::from(LOCK_WAIT_S) * 1_000_000, "{cap} us");
        assert_eq!(cap, 2_048_000);
    }
}
