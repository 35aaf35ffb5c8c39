//! The embedded default backend: each instance has its own, independent SQLite database, reached
//! only through its client interface (here, rusqlite over the bundled library).
//!
//! * Transactions are serializable: SQLite runs one writer at a time. Transactions that may write
//!   start with `BEGIN IMMEDIATE`, so they take the write lock before their first read and
//!   writers are totally ordered by the lock; read-only transactions read one snapshot (WAL),
//!   taken at their first read.
//! * A global operation's state update is captured with the session extension as row changes
//!   and applied elsewhere by primary key, so it reproduces the writes exactly even when the
//!   operation drew ids, clocks or random values.
//! * Each database holds a one-row table `_ensemble_meta` with two counters, updated inside the
//!   same transactions that do the work: how many global operations the database has seen and how
//!   many local writing transactions it has committed. Reading them inside a transaction tells
//!   where the database serialized it, which is what the token order and the checker need
//!   (see `Position` in ensemble-core and ARCHITECTURE.md).
//! * In recording mode ([`SqliteStorage::set_recording`]) each transaction also reports the rows
//!   it read (with the writer of each version) and wrote, observed by the probes of [`access`],
//!   and the database keeps the writer of each row's version and its install order
//!   ([`versions`]), for the dependency-graph history checker. Row granularity: predicate reads
//!   (phantoms) and rows read inside subqueries are not captured.

pub mod access;
mod db;
mod storage;
pub mod versions;

pub use db::{to_sql, to_value};
pub use storage::{digest_of, SqliteStorage, StorageError, TableDigest, META_TABLE};
pub use versions::Installed;
