//! What a transaction carries into termination: G-DUR's `⟨TERM, Ti⟩`, P-Store's `T = (id, rs,
//! ws, up)`.

use ensemble_kv::{Key, TxnId, Value};
use serde::{Deserialize, Serialize};

/// One read, as certification and the history checker need it: the key, the version number
/// read (P-Store's `(k, ts)` in `T.rs`) and the version's writer (`None`: the initial version).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRecord {
    pub key: Key,
    pub number: u64,
    pub writer: Option<TxnId>,
}

/// A submitted transaction: what is xcast to the replicas of its certifying objects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Term {
    pub id: TxnId,
    /// The versions read, one per key (a transaction reads a key's version once and rereads
    /// it from its own record), sorted by key.
    pub reads: Vec<ReadRecord>,
    /// The after-values, the last write per key, sorted by key.
    pub writes: Vec<(Key, Value)>,
}

impl Term {
    /// Builds a term from reads and writes in any order; keeps the first read and the last write
    /// of each key.
    pub fn new(id: TxnId, mut reads: Vec<ReadRecord>, writes: impl IntoIterator<Item = (Key, Value)>) -> Term {
        reads.sort_by_key(|r| r.key);
        reads.dedup_by_key(|r| r.key);
        let writes: std::collections::BTreeMap<Key, Value> = writes.into_iter().collect();
        Term { id, reads, writes: writes.into_iter().collect() }
    }

    pub fn read_only(&self) -> bool {
        self.writes.is_empty()
    }

    pub fn reads_key(&self, k: Key) -> bool {
        self.reads.binary_search_by_key(&k, |r| r.key).is_ok()
    }

    pub fn writes_key(&self, k: Key) -> bool {
        self.writes.binary_search_by_key(&k, |w| w.0).is_ok()
    }

    /// A read-write conflict in either direction (P-Store: "only read-write conflicts are
    /// considered; write-write conflicts are ordered by atomic multicast").
    pub fn conflicts(&self, other: &Term) -> bool {
        self.reads.iter().any(|r| other.writes_key(r.key)) || other.reads.iter().any(|r| self.writes_key(r.key))
    }

    /// Both write a key.
    pub fn writes_overlap(&self, other: &Term) -> bool {
        self.writes.iter().any(|w| other.writes_key(w.0))
    }

    pub fn read_keys(&self) -> impl Iterator<Item = Key> + '_ {
        self.reads.iter().map(|r| r.key)
    }

    pub fn write_keys(&self) -> impl Iterator<Item = Key> + '_ {
        self.writes.iter().map(|w| w.0)
    }

    /// Every key read or written (`Items(T)`), each once, ascending.
    pub fn items(&self) -> Vec<Key> {
        let mut v: Vec<Key> = self.read_keys().chain(self.write_keys()).collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// The preemption test of atomic commitment by 2PC (G-DUR Algorithm 4, line 4): a replica
/// votes *no* on `a` while it holds `b` voted *yes* and undecided, unless they commute. Read-write
/// conflicts, as P-Store's `commute`, and write-write ones too: with no xcast to order them, two
/// writers of one key both voted *yes* could be applied in different orders at its replicas.
/// (P-Store's transactions read what they write, so this adds no abort to its workloads.)
impl ensemble_group::commit::Commute for Term {
    fn commutes(&self, other: &Term) -> bool {
        !self.conflicts(other) && !self.writes_overlap(other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ensemble_core::ProcessId;

    fn t(seq: u64, reads: &[Key], writes: &[Key]) -> Term {
        let rs = reads.iter().map(|&key| ReadRecord { key, number: 0, writer: None }).collect();
        Term::new(TxnId::new(ProcessId(0), seq), rs, writes.iter().map(|&k| (k, Value::int(1))))
    }

    #[test]
    fn conflicts_are_read_write_in_either_direction_only() {
        assert!(t(1, &[1], &[]).conflicts(&t(2, &[], &[1])));
        assert!(t(1, &[], &[1]).conflicts(&t(2, &[1], &[])));
        assert!(!t(1, &[], &[1]).conflicts(&t(2, &[], &[1])), "write-write is ordered by the multicast");
        assert!(!t(1, &[1, 2], &[]).conflicts(&t(2, &[1, 2], &[3])));
    }

    #[test]
    fn under_two_phase_commit_writers_of_one_key_do_not_commute() {
        use ensemble_group::commit::Commute;
        assert!(!t(1, &[], &[1]).commutes(&t(2, &[], &[1])));
        assert!(!t(1, &[1], &[]).commutes(&t(2, &[], &[1])));
        assert!(t(1, &[1], &[2]).commutes(&t(2, &[1], &[3])));
    }

    #[test]
    fn a_term_keeps_the_first_read_and_the_last_write_of_a_key() {
        let id = TxnId::new(ProcessId(1), 1);
        let reads = vec![ReadRecord { key: 5, number: 2, writer: None }, ReadRecord { key: 5, number: 3, writer: None }];
        let term = Term::new(id, reads, [(7, Value::int(1)), (7, Value::int(2))]);
        assert_eq!(term.reads.len(), 1);
        assert_eq!(term.reads[0].number, 2);
        assert_eq!(term.writes, vec![(7, Value::int(2))]);
        assert_eq!(term.items(), vec![5, 7]);
    }
}
