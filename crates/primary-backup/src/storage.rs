//! A replica's durable state: every version of every key, in the order the replica installed it.
//!
//! The install log is the state itself (a key's value is its last version), and it is what the
//! checker compares across replicas. It lives in memory: "durable" means it survives a crash of
//! its process in the simulator, which keeps storages across crashes, not a real machine's.

use crate::{Key, TxnId};
use ensemble_core::Storage;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Install `txn`'s version of `key`, whose value is `value`, after the key's earlier versions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvJob {
    pub txn: TxnId,
    pub key: Key,
    pub value: i64,
}

/// A finished [`KvJob`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Installed {
    pub txn: TxnId,
}

/// Each key's versions as `(writer, value)`, in install order. Keys never written are absent
/// (their initial value is 0).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvLog {
    pub versions: BTreeMap<Key, Vec<(TxnId, i64)>>,
}

impl KvLog {
    /// The last version installed of `key`, as `(writer, value)`.
    pub fn latest(&self, key: Key) -> Option<(TxnId, i64)> {
        self.versions.get(&key).and_then(|v| v.last().copied())
    }

    /// Number of versions installed, over all keys.
    pub fn len(&self) -> usize {
        self.versions.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }
}

/// A handle on one replica's [`KvLog`]. Clones share the log: a real node's storage workers each
/// own a clone of their process's storage.
#[derive(Clone, Debug, Default)]
pub struct KvStorage {
    log: Arc<Mutex<KvLog>>,
}

impl KvStorage {
    pub fn new() -> KvStorage {
        KvStorage::default()
    }

    /// A copy of the log as it stands.
    pub fn snapshot(&self) -> KvLog {
        self.lock().clone()
    }

    /// Edits the log in place (tests use it to play a faulty replica).
    pub fn edit<R>(&self, f: impl FnOnce(&mut KvLog) -> R) -> R {
        f(&mut self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, KvLog> {
        // An install cannot panic halfway, so a poisoned log is still whole.
        self.log.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Storage for KvStorage {
    type Job = KvJob;
    type Result = Installed;

    fn run(&mut self, job: &KvJob) -> Installed {
        self.lock().versions.entry(job.key).or_default().push((job.txn, job.value));
        Installed { txn: job.txn }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_log_in_install_order() {
        let mut a = KvStorage::new();
        let mut b = a.clone();
        a.run(&KvJob { txn: 1, key: 7, value: 1 });
        b.run(&KvJob { txn: 2, key: 7, value: 2 });
        let log = a.snapshot();
        assert_eq!(log.versions[&7], vec![(1, 1), (2, 2)]);
        assert_eq!(log.latest(7), Some((2, 2)));
        assert_eq!(log.latest(8), None);
        assert_eq!(log.len(), 2);
    }
}
