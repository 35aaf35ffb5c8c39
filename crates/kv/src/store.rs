//! The multiversion store a G-DUR replica keeps (the paper's `ds`, §3): per key, a chain of
//! committed versions.
//!
//! A version carries two counters. Its `number` counts the key's versions (the initial value is
//! version 0, the first committed write version 1, ...): P-Store's certification compares the
//! number a transaction read with the latest. Its `stamp` orders installs across keys: a store
//! installs one committed transaction at a time and gives all its writes the same, next stamp, so
//! "every version with a stamp ≤ s" is a consistent snapshot (the state after the s-th install),
//! which is what a snapshot read rule (`choose_cons`) reads.
//!
//! A key nobody wrote holds its initial value (the key space's) as version 0 with stamp 0 and no
//! writer; it is not stored until it is first written, so a store of 10^5 YCSB objects costs
//! nothing until they are written.
//!
//! Garbage collection keeps, per key, every version newer than the horizon and the newest version
//! at or before it (the one a snapshot at the horizon reads); the install order, which the history
//! checker needs in full, is kept apart and never collected.

use crate::{Key, TxnId, Value};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// One committed version of a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    /// The key's version count: 0 for the initial value.
    pub number: u64,
    /// The install that wrote it (0 for the initial value): all writes of one transaction share it.
    pub stamp: u64,
    /// The transaction that wrote it; `None` for the initial value.
    pub writer: Option<TxnId>,
    pub value: Value,
}

impl Version {
    pub fn initial(value: Value) -> Version {
        Version { number: 0, stamp: 0, writer: None, value }
    }
}

/// Which version a read returns (G-DUR's `choose`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadRule {
    /// The latest committed version (`choose_last`: P-Store, P-DUR, S-DUR).
    Latest,
    /// The latest version installed at or before the given stamp: a consistent snapshot
    /// (`choose_cons` of a snapshot-isolation protocol).
    AtOrBefore(u64),
}

/// What every G-DUR replica's store does. Object-safe: a replica holds a `Box<dyn VersionStore>`.
pub trait VersionStore: Send {
    /// The version `rule` picks; `None` only if the rule asks for a snapshot older than what
    /// garbage collection kept.
    fn read(&self, key: Key, rule: ReadRule) -> Option<Version> {
        match rule {
            ReadRule::Latest => self.read_where(key, &mut |_| true),
            ReadRule::AtOrBefore(s) => self.read_where(key, &mut |v| v.stamp <= s),
        }
    }
    /// The newest version that `accept` accepts, searching from the latest backwards: the general
    /// read rule (a protocol's "latest version compatible with what the transaction read").
    fn read_where(&self, key: Key, accept: &mut dyn FnMut(&Version) -> bool) -> Option<Version>;
    /// The number of the key's latest version (0 if never written).
    fn latest_number(&self, key: Key) -> u64;
    /// Installs one committed transaction's writes atomically, in the order given, and returns
    /// the stamp they got. A key written twice in `writes` gets one version, the last value.
    fn apply(&mut self, writer: TxnId, writes: &[(Key, Value)]) -> u64;
    /// The stamp of the latest install (0 before the first).
    fn stamp(&self) -> u64;
    /// Drops versions no read at a stamp ≥ `horizon` can return; returns how many it dropped.
    fn collect_garbage(&mut self, horizon: u64) -> usize;
    /// Per written key, the writers in install order (the history checker's version order).
    fn install_order(&self) -> Vec<(Key, Vec<TxnId>)>;
    /// Per written key, its latest version (for replica agreement on final values).
    fn latest_versions(&self) -> Vec<(Key, Version)>;
}

/// The in-memory store: deterministic (ordered maps), the default of every run.
#[derive(Debug)]
pub struct MemoryStore {
    initial: Value,
    /// Oldest first; never empty for a key present.
    chains: BTreeMap<Key, Vec<Version>>,
    installs: BTreeMap<Key, Vec<TxnId>>,
    /// Keys holding more than one version: all that garbage collection needs to look at, so
    /// that a collection costs what was written since the last one, not the key space.
    dirty: BTreeSet<Key>,
    stamp: u64,
}

impl MemoryStore {
    /// A store in which every key holds `initial` until written.
    pub fn new(initial: Value) -> MemoryStore {
        MemoryStore { initial, chains: BTreeMap::new(), installs: BTreeMap::new(), dirty: BTreeSet::new(), stamp: 0 }
    }

    /// How many versions the store holds (initial values not counted).
    pub fn versions(&self) -> usize {
        self.chains.values().map(|c| c.iter().filter(|v| v.writer.is_some()).count()).sum()
    }
}

/// The last write of each key, in first-appearance order.
fn last_writes(writes: &[(Key, Value)]) -> Vec<(Key, Value)> {
    let mut out: Vec<(Key, Value)> = Vec::with_capacity(writes.len());
    for &(k, v) in writes {
        match out.iter_mut().find(|(x, _)| *x == k) {
            Some(slot) => slot.1 = v,
            None => out.push((k, v)),
        }
    }
    out
}

impl VersionStore for MemoryStore {
    fn read_where(&self, key: Key, accept: &mut dyn FnMut(&Version) -> bool) -> Option<Version> {
        match self.chains.get(&key) {
            Some(chain) => chain.iter().rev().find(|v| accept(v)).cloned(),
            None => Some(Version::initial(self.initial)).filter(|v| accept(v)),
        }
    }

    fn latest_number(&self, key: Key) -> u64 {
        self.chains.get(&key).and_then(|c| c.last()).map_or(0, |v| v.number)
    }

    fn apply(&mut self, writer: TxnId, writes: &[(Key, Value)]) -> u64 {
        self.stamp += 1;
        let stamp = self.stamp;
        for (key, value) in last_writes(writes) {
            let initial = self.initial;
            let chain = self.chains.entry(key).or_insert_with(|| vec![Version::initial(initial)]);
            let number = chain.last().map_or(0, |v| v.number) + 1;
            chain.push(Version { number, stamp, writer: Some(writer), value });
            self.dirty.insert(key);
            self.installs.entry(key).or_default().push(writer);
        }
        stamp
    }

    fn stamp(&self) -> u64 {
        self.stamp
    }

    fn collect_garbage(&mut self, horizon: u64) -> usize {
        let mut dropped = 0;
        let chains = &mut self.chains;
        self.dirty.retain(|key| {
            let chain = chains.get_mut(key).expect("a dirty key has a chain");
            // The newest version at or before the horizon stays; everything older goes.
            if let Some(keep) = chain.iter().rposition(|v| v.stamp <= horizon) {
                dropped += keep;
                chain.drain(..keep);
            }
            chain.len() > 1
        });
        dropped
    }

    fn install_order(&self) -> Vec<(Key, Vec<TxnId>)> {
        self.installs.iter().map(|(k, w)| (*k, w.clone())).collect()
    }

    fn latest_versions(&self) -> Vec<(Key, Version)> {
        self.chains.iter().filter_map(|(k, c)| c.last().map(|v| (*k, v.clone()))).collect()
    }
}

/// A store that survives its process: the same interface on an embedded SQLite database, every
/// install one SQLite transaction (synchronous=FULL, so an install that returned is on disk).
/// Reads go to an in-memory mirror loaded at open, so a read costs what [`MemoryStore`]'s does.
pub struct SqliteStore {
    db: rusqlite::Connection,
    mirror: MemoryStore,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the durable store at {path}: {source}")]
    Sqlite { path: String, source: rusqlite::Error },
    #[error("the durable store at {path} is damaged: {what}")]
    Damaged { path: String, what: String },
}

impl SqliteStore {
    /// Opens (creating if absent) the store at `path`, and loads what it holds.
    pub fn open(path: &std::path::Path, initial: Value) -> Result<SqliteStore, StoreError> {
        let shown = path.display().to_string();
        let err = |source| StoreError::Sqlite { path: shown.clone(), source };
        let db = rusqlite::Connection::open(path).map_err(err)?;
        db.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS version (
               key INTEGER NOT NULL, number INTEGER NOT NULL, stamp INTEGER NOT NULL,
               writer INTEGER NOT NULL, value INTEGER NOT NULL, pad INTEGER NOT NULL,
               PRIMARY KEY (key, number));",
        )
        .map_err(err)?;
        let mut mirror = MemoryStore::new(initial);
        {
            // Replaying installs in stamp order rebuilds the chains, the install order and the stamp.
            let mut q = db
                .prepare("SELECT stamp, writer, key, value, pad FROM version ORDER BY stamp, key")
                .map_err(err)?;
            let rows = q
                .query_map([], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?, r.get::<_, i64>(3)?, r.get::<_, i64>(4)?))
                })
                .map_err(err)?;
            // The install being gathered: its stamp, writer and writes.
            type Install = (u64, TxnId, Vec<(Key, Value)>);
            let mut pending: Option<Install> = None;
            for row in rows {
                let (stamp, writer, key, value, pad) = row.map_err(err)?;
                let damaged = |what: String| StoreError::Damaged { path: shown.clone(), what };
                let (stamp, pad) = (stamp as u64, u32::try_from(pad).map_err(|_| damaged(format!("key {key}: padding {pad}")))?);
                let writer = TxnId(writer as u64);
                if pending.as_ref().is_some_and(|p| p.0 != stamp) {
                    let (s, w, writes) = pending.take().expect("checked");
                    if mirror.apply(w, &writes) != s {
                        return Err(damaged(format!("install {s} follows a gap in the stamps")));
                    }
                }
                let p = pending.get_or_insert_with(|| (stamp, writer, Vec::new()));
                if p.1 != writer {
                    return Err(damaged(format!("install {stamp} has two writers, {} and {writer}", p.1)));
                }
                p.2.push((key as u64, Value { int: value, pad }));
            }
            if let Some((s, w, writes)) = pending {
                if mirror.apply(w, &writes) != s {
                    return Err(StoreError::Damaged { path: shown.clone(), what: format!("install {s} follows a gap in the stamps") });
                }
            }
        }
        Ok(SqliteStore { db, mirror })
    }
}

impl VersionStore for SqliteStore {
    fn read_where(&self, key: Key, accept: &mut dyn FnMut(&Version) -> bool) -> Option<Version> {
        self.mirror.read_where(key, accept)
    }

    fn latest_number(&self, key: Key) -> u64 {
        self.mirror.latest_number(key)
    }

    fn apply(&mut self, writer: TxnId, writes: &[(Key, Value)]) -> u64 {
        let stamp = self.mirror.stamp + 1;
        let writes = last_writes(writes);
        let result = (|| -> rusqlite::Result<()> {
            let tx = self.db.transaction()?;
            {
                let mut ins = tx.prepare_cached(
                    "INSERT INTO version (key, number, stamp, writer, value, pad) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?;
                for &(key, value) in &writes {
                    let number = self.mirror.latest_number(key) + 1;
                    ins.execute((key as i64, number as i64, stamp as i64, writer.0 as i64, value.int, i64::from(value.pad)))?;
                }
            }
            tx.commit()
        })();
        // A replica that cannot make a commit durable must not go on as if it had: the process
        // fails, and the runtime reports it as that process's failure.
        if let Err(e) = result {
            panic!("the durable store could not install {writer}'s writes: {e}");
        }
        self.mirror.apply(writer, &writes)
    }

    fn stamp(&self) -> u64 {
        self.mirror.stamp()
    }

    fn collect_garbage(&mut self, horizon: u64) -> usize {
        // Only the mirror is collected: the file is the log a restarted replica replays.
        self.mirror.collect_garbage(horizon)
    }

    fn install_order(&self) -> Vec<(Key, Vec<TxnId>)> {
        self.mirror.install_order()
    }

    fn latest_versions(&self) -> Vec<(Key, Version)> {
        self.mirror.latest_versions()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ensemble_core::ProcessId;

    fn t(seq: u64) -> TxnId {
        TxnId::new(ProcessId(1), seq)
    }

    #[test]
    fn an_unwritten_key_reads_its_initial_value_as_version_zero() {
        let s = MemoryStore::new(Value::int(7));
        assert_eq!(s.read(42, ReadRule::Latest), Some(Version::initial(Value::int(7))));
        assert_eq!(s.latest_number(42), 0);
        assert_eq!(s.stamp(), 0);
    }

    #[test]
    fn installs_number_versions_per_key_and_stamp_them_per_transaction() {
        let mut s = MemoryStore::new(Value::int(0));
        assert_eq!(s.apply(t(1), &[(1, Value::int(10)), (2, Value::int(20))]), 1);
        assert_eq!(s.apply(t(2), &[(1, Value::int(11)), (1, Value::int(12))]), 2);
        let v = s.read(1, ReadRule::Latest).unwrap();
        assert_eq!((v.number, v.stamp, v.writer, v.value.int), (2, 2, Some(t(2)), 12), "the last write of a key wins");
        assert_eq!(s.latest_number(2), 1);
        assert_eq!(s.read(1, ReadRule::AtOrBefore(1)).unwrap().value.int, 10, "a snapshot at stamp 1");
        assert_eq!(s.read(2, ReadRule::AtOrBefore(0)).unwrap().number, 0);
        assert_eq!(s.install_order(), vec![(1, vec![t(1), t(2)]), (2, vec![t(1)])]);
        assert_eq!(s.versions(), 3);
    }

    #[test]
    fn garbage_collection_keeps_what_a_snapshot_at_the_horizon_reads() {
        let mut s = MemoryStore::new(Value::int(0));
        for i in 1..=5 {
            s.apply(t(i), &[(9, Value::int(i as i64))]);
        }
        assert_eq!(s.collect_garbage(3), 3, "the initial version and versions 1 and 2 go");
        assert_eq!(s.read(9, ReadRule::AtOrBefore(3)).unwrap().value.int, 3);
        assert_eq!(s.read(9, ReadRule::AtOrBefore(2)), None, "older than what was kept");
        assert_eq!(s.read(9, ReadRule::Latest).unwrap().number, 5);
        assert_eq!(s.install_order()[0].1.len(), 5, "the install order is never collected");
        assert_eq!(s.collect_garbage(3), 0);
        s.apply(t(6), &[(8, Value::int(1))]);
        assert_eq!(s.collect_garbage(6), 3, "a key written since is collected, and one still dirty: 8's initial, 9's 3 and 4");
        assert_eq!(s.versions(), 2);
        assert_eq!(s.collect_garbage(6), 0);
    }

    #[test]
    fn read_where_returns_the_newest_accepted_version() {
        let mut s = MemoryStore::new(Value::int(0));
        s.apply(t(1), &[(1, Value::int(1))]);
        s.apply(t(2), &[(1, Value::int(2))]);
        let v = s.read_where(1, &mut |v| v.writer != Some(t(2))).unwrap();
        assert_eq!(v.writer, Some(t(1)));
    }

    #[test]
    fn a_durable_store_comes_back_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        {
            let mut s = SqliteStore::open(&path, Value::int(5)).unwrap();
            s.apply(t(1), &[(3, Value { int: 30, pad: 4 }), (4, Value::int(40))]);
            s.apply(t(2), &[(3, Value::int(31))]);
        }
        let s = SqliteStore::open(&path, Value::int(5)).unwrap();
        assert_eq!(s.stamp(), 2);
        assert_eq!(s.read(3, ReadRule::Latest).unwrap(), Version { number: 2, stamp: 2, writer: Some(t(2)), value: Value::int(31) });
        assert_eq!(s.read(3, ReadRule::AtOrBefore(1)).unwrap().value, Value { int: 30, pad: 4 });
        assert_eq!(s.read(8, ReadRule::Latest).unwrap().value.int, 5);
        assert_eq!(s.install_order(), vec![(3, vec![t(1), t(2)]), (4, vec![t(1)])]);
    }

    #[test]
    fn a_durable_store_that_is_not_a_database_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("junk.db");
        std::fs::write(&path, b"this is not a database, it is text that goes on for a while").unwrap();
        let err = SqliteStore::open(&path, Value::int(0)).err().expect("refused").to_string();
        assert!(err.contains("junk.db"), "{err}");
    }
}
