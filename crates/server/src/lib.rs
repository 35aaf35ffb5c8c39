//! The server backends: each Conveyor Belt instance is its own database on an unmodified
//! PostgreSQL or MariaDB server, reached only through the server's ordinary client protocol (the
//! `tokio-postgres` and `mysql` crates). They implement the same storage contract as
//! `ensemble-sqlite`.
//!
//! * **Serial order.** Every database holds the one-row `_ensemble_meta(globals, local_writes)`
//!   table, read inside every transaction and written by the ones that write, exactly as on
//!   SQLite. A transaction that may write (every global, every local whose type declares a
//!   write, every application of state updates) holds the instance's *writer lock* to COMMIT.
//!   On PostgreSQL it takes it before it reads anything, `LOCK TABLE _ensemble_meta IN
//!   EXCLUSIVE MODE` as its first statement (so its SERIALIZABLE snapshot is taken after the
//!   previous writer committed): writers at an instance run one after another. On MariaDB,
//!   whose SERIALIZABLE is strict two-phase locking (every lock held to COMMIT), a local writer
//!   or an application of state updates takes it last, in the batch that commits (an UPDATE
//!   of `_ensemble_meta` that reads and bumps the counters, or `SELECT … FOR UPDATE`), so that
//!   they overlap; a global takes it first there
//!   too. Either way commit order is serialization order and the counters
//!   are written under the lock. A read-only local reads one snapshot without locks (PostgreSQL
//!   REPEATABLE READ READ ONLY; MariaDB REPEATABLE READ WITH CONSISTENT SNAPSHOT): the committed
//!   writers it sees are a prefix of the lock order, and it reads the counters from the same
//!   snapshot, so its position is that prefix. ARCHITECTURE.md has the argument in full.
//! * **Round trips.** The bookkeeping rides on the transaction's own round trips: the start
//!   (BEGIN, the writer lock, the counters read) is one batch, the bump goes with COMMIT (on
//!   MariaDB a writer's lock and counters go with COMMIT too), and the
//!   counter statements are prepared once per session. On PostgreSQL the start is also pipelined
//!   with the body's first statement (`Conn::start`), so a transaction takes one round trip fewer
//!   than the BEGIN, statements and COMMIT an application sends through the client library's
//!   transaction API. A start that fails is the transaction's failure, not the body's. And a
//!   write whose count the body does not use (`Db::write`) goes with the statement after it or
//!   with COMMIT (`Conn::send_ahead`), a round trip fewer per such write; should one fail as a
//!   statement, the transaction runs again with every write waited for, so that the body meets
//!   the error where it made the write.
//! * **State updates** are captured through the client interface alone (`dialect`): `RETURNING *`
//!   on PostgreSQL's INSERT, UPDATE and DELETE and on MariaDB's INSERT and DELETE; a MariaDB UPDATE
//!   by selecting the keys it will match first and reading those rows back after. Each change is
//!   a full row image named by primary key, applied elsewhere by key.
//! * **Victims and lost connections.** A serialization failure or deadlock, or a connection lost
//!   before COMMIT, rolls the transaction back and runs it again (counted, reported as
//!   `storage_retries`). A connection lost during COMMIT leaves the outcome unknown to the
//!   client, so the storage asks the server on a new session: PostgreSQL by the transaction's id
//!   (`pg_xact_status`), MariaDB by the storage's own row of `_ensemble_commits`, which the
//!   batch that commits writes; a transaction that committed is answered, one that did not runs
//!   again. Where nothing can be asked (PostgreSQL's locals side by side) the job fails loudly.
//! * **Databases** (`admin`): `ensemble_<run>_<i>` per instance, on one server or one per
//!   instance, created with byte-order collation so text compares and sorts as in SQLite.

pub mod admin;
pub mod conn;
pub mod dialect;
mod pg;
mod storage;
pub mod twopc;

pub use conn::{ConnError, OpenError};
pub use dialect::{translate, Engine, Translated};
pub use storage::{DirectTxn, ReadsAheadCount, ServerError, ServerStorage, WritersInFlight, COMMITS_TABLE, META_TABLE};
pub use twopc::{TwoPcShared, TwoPcStorage};
