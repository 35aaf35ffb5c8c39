//! The storage contract of the SQL applications: what the Conveyor Belt (and any protocol that
//! runs declared SQL transactions on an unmodified DBMS) asks of a backend, and what a backend
//! reports from inside its transactions. `ensemble-sqlite` implements it.

use crate::InstanceId;
use crate::update::StateUpdate;
use ensemble_core::{Outcome, Request, RequestError};
use serde::{Deserialize, Serialize};

/// How an operation was coordinated (Eliá §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum OpClass {
    /// Conflicts with nothing: any instance may run it.
    Commutative,
    /// Runs at once at its partition's instance.
    Local,
    /// Waits for the token, runs at its partition's instance, its state update is replicated.
    Global,
}

impl OpClass {
    pub fn name(self) -> &'static str {
        match self {
            OpClass::Commutative => "commutative",
            OpClass::Local => "local",
            OpClass::Global => "global",
        }
    }
}

/// Where an executed operation sits in the serial order the Conveyor Belt's correctness proof
/// constructs.
///
/// Each instance's database keeps two counters, updated inside the same transactions that do the
/// work, so the database itself says where each transaction was serialized:
/// `globals_seen`, the number of global operations (executed here or applied from the token)
/// whose effects the transaction saw, and `local_writes`, the number of local writing transactions
/// committed at this instance before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Position {
    /// The `seq`-th global operation (1-based) in token order.
    Global { seq: u64 },
    /// A commutative or local operation at `instance`.
    Local { instance: InstanceId, globals_seen: u64, local_writes: u64, wrote: bool },
    /// A commutative or local operation at `instance` that ran side by side with the instance's
    /// other locals under PostgreSQL's SSI (`Experiment::writers_side_by_side`): after the
    /// `globals_seen`-th global, and among the locals of that epoch where the checker's search
    /// places it, after every writer its snapshot saw.
    SideBySide { instance: InstanceId, globals_seen: u64, snapshot: SnapshotStamp },
}

/// What PostgreSQL said about a transaction as it committed: its id, if it was given one (a
/// transaction that wrote), and its snapshot (`pg_current_snapshot()`: every transaction below
/// `xmin` had ended when it was taken, none from `xmax` on had, and `xip` lists those between
/// that were still running).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotStamp {
    pub txid: Option<u64>,
    pub xmin: u64,
    pub xmax: u64,
    pub xip: Vec<u64>,
}

impl SnapshotStamp {
    /// Parses `pg_current_snapshot()`'s text form, `xmin:xmax:xip,xip,...`.
    pub fn parse(txid: Option<u64>, snapshot: &str) -> Result<SnapshotStamp, String> {
        let bad = || format!("`{snapshot}` is not a snapshot (xmin:xmax:xip,...)");
        let mut parts = snapshot.split(':');
        let (Some(xmin), Some(xmax), Some(xip), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let num = |t: &str| t.trim().parse::<u64>().map_err(|_| bad());
        let xip = xip.split(',').filter(|t| !t.is_empty()).map(num).collect::<Result<Vec<_>, _>>()?;
        Ok(SnapshotStamp { txid, xmin: num(xmin)?, xmax: num(xmax)?, xip })
    }

    /// Whether the transaction `other` had committed (or ended) when this snapshot was taken.
    pub fn saw(&self, other: u64) -> bool {
        other < self.xmin || (other < self.xmax && !self.xip.contains(&other))
    }
}

/// Storage work: a transaction to run through the DBMS's client interface, or state updates to
/// apply. The driver decides where and when it runs (a simulated core, a pool of connections).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StorageJob {
    /// Run `request` as one serializable transaction.
    Execute { request: Request, role: ExecRole },
    /// Apply the state updates of global operations `first_seq..first_seq+updates.len()` as one
    /// transaction. Changes to tables this instance does not hold were filtered out by the node.
    Apply { first_seq: u64, updates: Vec<StateUpdate> },
}

/// How a transaction is run, which decides what its result reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecRole {
    /// A local or commutative operation: runs at once; the result reports its [`Position::Local`].
    Local,
    /// A global operation run by the token holder: its writes are captured as a state update and
    /// it takes the next global sequence number inside its own transaction.
    Global,
}

/// The outcome of a [`StorageJob`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StorageResult {
    /// `retries`: how many times a server chose this transaction as the victim of a
    /// serialization failure or deadlock (or dropped its connection before it committed) and it
    /// ran again; the client never sees those.
    Executed { outcome: Outcome, update: StateUpdate, position: Position, access: Option<RowAccess>, retries: u32 },
    Applied { globals_seen: u64, retries: u32 },
    /// The request was malformed (unknown type, wrong parameters): nothing ran.
    Rejected(RequestError),
    /// The storage itself failed. For an `Apply` this means the replicas diverged: a bug.
    Failed(String),
}

/// What one SQL transaction read and wrote, row by row, for the history checker: each row as
/// `table/primary key`, each read with the transaction that wrote the version it saw (`None`:
/// the initial data). Recorded by a backend only when the run asks for histories.
///
/// Reads of rows the transaction had itself written before are not listed (they depend on no
/// other transaction); each row read is listed once, with the version it first saw. Rows are
/// observed one by one: predicate reads (the absence of rows a scan did not return) and rows
/// read inside subqueries are not recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowAccess {
    /// The writer id this transaction's own writes are recorded under.
    pub writer: u64,
    pub reads: Vec<(String, Option<u64>)>,
    pub writes: Vec<String>,
}

/// The id a transaction is recorded under in histories and version tables ([`RowAccess::writer`],
/// [`StateUpdate::writer`]): `(client << 32) | seq`. A request runs at most once, so the id is
/// unique while there are fewer than 2^32 clients, each issuing fewer than 2^32 requests.
pub fn txn_id(request: &Request) -> u64 {
    debug_assert!(request.client.0 < 1 << 32 && request.seq < 1 << 32, "{request:?} has no 64-bit transaction id");
    (request.client.0 << 32) | request.seq
}
