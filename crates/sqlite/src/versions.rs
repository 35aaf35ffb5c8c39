//! Recording mode's bookkeeping: which transaction wrote the current version of each row, and
//! the order in which this database installed versions.
//!
//! Two tables, written inside the same transactions as the data they describe, so they are
//! exactly as isolated as the data: a read-only transaction reading a WAL snapshot sees the
//! writers of that same snapshot, and a rolled-back transaction leaves no trace.
//! * `_ensemble_versions(tbl, key, writer)`: the writer of the row's current version. A delete
//!   is a version too (the row's key keeps the deleter), so a later read of the missing row (an
//!   INSERT's key-collision probe) reads from the deleter. Rows without an entry are the initial
//!   data.
//! * `_ensemble_installs(n, tbl, key, writer)`: every version installed, in order: the own
//!   writes of each transaction at its commit, and each applied state update's changes in token
//!   order.
//!
//! Keys are the primary key rendered by [`key_text`]; a row is named
//! `table/key` (`items/3`, `order_line/7,2`) in [`RowAccess`](ensemble_app::RowAccess) and
//! [`Installed`].

use crate::access::key_text;
use ensemble_app::{Application, ChangeKind, RowChange};
use ensemble_core::Value;
use rusqlite::{Connection, OptionalExtension};

/// The writer of each row's current version.
pub const VERSIONS_TABLE: &str = "_ensemble_versions";
/// Every version this database installed, in order.
pub const INSTALLS_TABLE: &str = "_ensemble_installs";

/// One version installed by a database: row `table/key` got the version of transaction `writer`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installed {
    pub table: String,
    pub key: String,
    pub writer: u64,
}

impl Installed {
    /// `table/key`, as the history names the row.
    pub fn row(&self) -> String {
        row_name(&self.table, &self.key)
    }
}

/// A row's name in histories: `table/key`.
pub fn row_name(table: &str, key: &str) -> String {
    format!("{table}/{key}")
}

pub(crate) fn create_tables(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {VERSIONS_TABLE} (tbl TEXT NOT NULL, key TEXT NOT NULL, writer INTEGER NOT NULL, PRIMARY KEY (tbl, key));
         CREATE TABLE IF NOT EXISTS {INSTALLS_TABLE} (n INTEGER PRIMARY KEY, tbl TEXT NOT NULL, key TEXT NOT NULL, writer INTEGER NOT NULL);"
    ))
}

/// The writer of the version of `table/key` this transaction sees (`None`: the initial data).
pub(crate) fn writer_of(conn: &Connection, table: &str, key: &str) -> rusqlite::Result<Option<u64>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT writer FROM {VERSIONS_TABLE} WHERE tbl = ?1 AND key = ?2"))?;
    Ok(stmt.query_row((table, key), |r| r.get::<_, i64>(0)).optional()?.map(|w| w as u64))
}

/// Records that `writer` installed a version of `table/key`.
pub(crate) fn install(conn: &Connection, table: &str, key: &str, writer: u64) -> rusqlite::Result<()> {
    conn.prepare_cached(&format!(
        "INSERT INTO {VERSIONS_TABLE} (tbl, key, writer) VALUES (?1, ?2, ?3) ON CONFLICT (tbl, key) DO UPDATE SET writer = excluded.writer"
    ))?
    .execute((table, key, writer as i64))?;
    conn.prepare_cached(&format!("INSERT INTO {INSTALLS_TABLE} (tbl, key, writer) VALUES (?1, ?2, ?3)"))?
        .execute((table, key, writer as i64))?;
    Ok(())
}

/// Every version installed, in order; empty when the database never recorded.
pub(crate) fn install_log(conn: &Connection) -> rusqlite::Result<Vec<Installed>> {
    let exists: bool =
        conn.query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1", [INSTALLS_TABLE], |r| r.get::<_, i64>(0))? > 0;
    if !exists {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare(&format!("SELECT tbl, key, writer FROM {INSTALLS_TABLE} ORDER BY n"))?;
    let rows = stmt.query_map([], |r| Ok(Installed { table: r.get(0)?, key: r.get(1)?, writer: r.get::<_, i64>(2)? as u64 }))?;
    rows.collect()
}

/// The table and key a state update's change is to, in the form the probes render.
pub(crate) fn change_key(app: &Application, change: &RowChange) -> Option<(usize, String)> {
    let ti = app.tables.iter().position(|t| t.name == change.table)?;
    let cols: &[(String, Value)] = match &change.kind {
        ChangeKind::Insert { row } => row,
        ChangeKind::Update { key, .. } | ChangeKind::Delete { key } => key,
    };
    let values: Option<Vec<&Value>> =
        app.tables[ti].primary_key.iter().map(|k| cols.iter().find(|(c, _)| c.eq_ignore_ascii_case(k)).map(|(_, v)| v)).collect();
    Some((ti, key_text(values?)))
}
