//! The history: what each transaction read and wrote, and what each replica installed.
//!
//! Two shapes of the same data. [`Transaction`] and [`Install`] are the owned, self-explaining
//! values a protocol builds and a test reads back. [`History`] stores them compactly, because a
//! run can record 10^6 transactions: key names and replica names are interned to `u32`, values
//! live in one text arena, and the reads and writes of all transactions sit in two flat arrays
//! that each transaction indexes by range. A transaction costs ~64 bytes plus 24 per read and 8
//! per write, and no allocation of its own.

use crate::hash::FastMap;

/// A transaction's identifier, as the recording protocol numbered it (any `u64`, unique).
pub type TxnId = u64;

/// One read: the key, and which transaction wrote the version that was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub key: String,
    /// `None` when the read returned the key's initial version (no transaction wrote it).
    pub writer: Option<TxnId>,
    /// The value read, if recorded. With it the checker can tell a read of the writer's final
    /// write from a read of one of its intermediate writes (G1b).
    pub value: Option<String>,
}

/// One write. A transaction may write a key several times; the last write is the version it
/// installs, the earlier ones are intermediate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub key: String,
    pub value: Option<String>,
}

/// A transaction as recorded: its reads and writes, whether it committed, and optionally its
/// session and commit sequence number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transaction {
    pub id: TxnId,
    /// Transactions of one session are ordered by their order of appearance in the history.
    pub session: Option<u64>,
    /// Aborted transactions stay in the history (a committed read of their writes is G1a) but
    /// take no other part in the checks.
    pub committed: bool,
    /// A commit sequence number, used as the version order of a key that no replica reported
    /// installs for.
    pub commit: Option<u64>,
    pub reads: Vec<Read>,
    pub writes: Vec<Write>,
}

impl Transaction {
    /// A committed transaction with no operations yet.
    pub fn committed(id: TxnId) -> Self {
        Transaction {
            id,
            session: None,
            committed: true,
            commit: None,
            reads: Vec::new(),
            writes: Vec::new(),
        }
    }

    /// An aborted transaction with no operations yet.
    pub fn aborted(id: TxnId) -> Self {
        Transaction {
            committed: false,
            ..Transaction::committed(id)
        }
    }

    pub fn in_session(mut self, session: u64) -> Self {
        self.session = Some(session);
        self
    }

    pub fn commit_seq(mut self, seq: u64) -> Self {
        self.commit = Some(seq);
        self
    }

    /// Adds a read of `key` from `writer` (`None`: the initial version).
    pub fn read(mut self, key: &str, writer: Option<TxnId>) -> Self {
        self.reads.push(Read {
            key: key.to_owned(),
            writer,
            value: None,
        });
        self
    }

    /// Adds a read of `key` from `writer` that returned `value`.
    pub fn read_value(mut self, key: &str, writer: Option<TxnId>, value: &str) -> Self {
        self.reads.push(Read {
            key: key.to_owned(),
            writer,
            value: Some(value.to_owned()),
        });
        self
    }

    /// Adds a write of `value` to `key`.
    pub fn write(mut self, key: &str, value: &str) -> Self {
        self.writes.push(Write {
            key: key.to_owned(),
            value: Some(value.to_owned()),
        });
        self
    }

    /// Adds a write to `key` without recording its value.
    pub fn write_key(mut self, key: &str) -> Self {
        self.writes.push(Write {
            key: key.to_owned(),
            value: None,
        });
        self
    }
}

/// What one replica reported for one key: the transactions whose versions it installed, in
/// installation order, and optionally the value it ended with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Install {
    pub replica: String,
    pub key: String,
    pub order: Vec<TxnId>,
    pub value: Option<String>,
}

/// Sentinel for "no value recorded" in the compact records.
pub(crate) const NO_VALUE: u32 = u32::MAX;

/// Interns strings to dense `u32` ids, in order of first appearance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Interner {
    names: Vec<Box<str>>,
    ids: FastMap<Box<str>, u32>,
}

impl Interner {
    pub(crate) fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = u32::try_from(self.names.len()).expect("fewer than 2^32 distinct names");
        self.names.push(name.into());
        self.ids.insert(name.into(), id);
        id
    }

    pub(crate) fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }
}

/// All recorded values, end to end in one string; value `i` is `text[ends[i-1]..ends[i]]`.
/// Values are mostly unique (tests write fresh values), so interning would only add a map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Values {
    text: String,
    ends: Vec<usize>,
}

impl Values {
    fn push(&mut self, value: Option<&str>) -> u32 {
        match value {
            None => NO_VALUE,
            Some(v) => {
                self.text.push_str(v);
                self.ends.push(self.text.len());
                let id = u32::try_from(self.ends.len() - 1).expect("fewer than 2^32 values");
                assert!(id != NO_VALUE, "fewer than 2^32 - 1 values");
                id
            }
        }
    }

    pub(crate) fn get(&self, id: u32) -> Option<&str> {
        if id == NO_VALUE {
            return None;
        }
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.text[start..self.ends[i]])
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TxnRec {
    pub(crate) id: TxnId,
    pub(crate) session: Option<u64>,
    pub(crate) commit: Option<u64>,
    pub(crate) committed: bool,
    pub(crate) reads: (u32, u32),
    pub(crate) writes: (u32, u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReadRec {
    pub(crate) key: u32,
    pub(crate) value: u32,
    pub(crate) writer: Option<TxnId>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WriteRec {
    pub(crate) key: u32,
    pub(crate) value: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InstallRec {
    pub(crate) replica: u32,
    pub(crate) key: u32,
    pub(crate) order: Vec<TxnId>,
    pub(crate) value: u32,
}

/// A recorded history, stored compactly. Build it with [`History::add_transaction`] and
/// [`History::add_install`], or load it from JSON ([`History::load`], `FORMAT.md`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub(crate) keys: Interner,
    pub(crate) replicas: Interner,
    pub(crate) values: Values,
    pub(crate) txns: Vec<TxnRec>,
    pub(crate) reads: Vec<ReadRec>,
    pub(crate) writes: Vec<WriteRec>,
    pub(crate) installs: Vec<InstallRec>,
    /// (replica, key) → index in `installs`, so `add_install` appends to the right order.
    install_index: FastMap<(u32, u32), usize>,
}

impl History {
    pub fn new() -> Self {
        History::default()
    }

    /// Number of transactions, committed or not.
    pub fn len(&self) -> usize {
        self.txns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.txns.is_empty()
    }

    /// Appends a transaction. Its position fixes its place in its session's order.
    pub fn add_transaction(&mut self, txn: Transaction) {
        self.push_txn(
            txn.id,
            txn.session,
            txn.committed,
            txn.commit,
            txn.reads
                .iter()
                .map(|r| (r.key.as_str(), r.writer, r.value.as_deref())),
            txn.writes
                .iter()
                .map(|w| (w.key.as_str(), w.value.as_deref())),
        );
    }

    /// The common path of the builder and the JSON loader: no intermediate owned strings.
    pub(crate) fn push_txn<'a>(
        &mut self,
        id: TxnId,
        session: Option<u64>,
        committed: bool,
        commit: Option<u64>,
        reads: impl Iterator<Item = (&'a str, Option<TxnId>, Option<&'a str>)>,
        writes: impl Iterator<Item = (&'a str, Option<&'a str>)>,
    ) {
        let reads_start = self.reads.len();
        for (key, writer, value) in reads {
            let key = self.keys.intern(key);
            let value = self.values.push(value);
            self.reads.push(ReadRec { key, value, writer });
        }
        let writes_start = self.writes.len();
        for (key, value) in writes {
            let key = self.keys.intern(key);
            let value = self.values.push(value);
            self.writes.push(WriteRec { key, value });
        }
        let range = |start: usize, end: usize| {
            (
                u32::try_from(start).expect("fewer than 2^32 operations"),
                u32::try_from(end).expect("fewer than 2^32 operations"),
            )
        };
        self.txns.push(TxnRec {
            id,
            session,
            commit,
            committed,
            reads: range(reads_start, self.reads.len()),
            writes: range(writes_start, self.writes.len()),
        });
    }

    /// Records that `replica` installed `txn`'s version of `key`, after the ones it already
    /// reported for that key.
    pub fn add_install(&mut self, replica: &str, key: &str, txn: TxnId) {
        let entry = self.install_entry(replica, key);
        self.installs[entry].order.push(txn);
    }

    /// Records the value `replica` ended with for `key` (compared across replicas and with the
    /// last installed write).
    pub fn set_final_value(&mut self, replica: &str, key: &str, value: &str) {
        let entry = self.install_entry(replica, key);
        self.installs[entry].value = self.values.push(Some(value));
    }

    /// Adds a whole install report. Reports for the same replica and key are concatenated.
    pub fn add_install_report(&mut self, install: &Install) {
        let entry = self.install_entry(&install.replica, &install.key);
        self.installs[entry].order.extend_from_slice(&install.order);
        if let Some(value) = &install.value {
            self.installs[entry].value = self.values.push(Some(value));
        }
    }

    fn install_entry(&mut self, replica: &str, key: &str) -> usize {
        let replica = self.replicas.intern(replica);
        let key = self.keys.intern(key);
        let installs = &mut self.installs;
        *self.install_index.entry((replica, key)).or_insert_with(|| {
            installs.push(InstallRec {
                replica,
                key,
                order: Vec::new(),
                value: NO_VALUE,
            });
            installs.len() - 1
        })
    }

    /// The transactions, in order of appearance, as owned values.
    pub fn transactions(&self) -> impl Iterator<Item = Transaction> + '_ {
        (0..self.txns.len()).map(move |i| self.transaction(i))
    }

    /// The install reports, in order of first appearance.
    pub fn installs(&self) -> impl Iterator<Item = Install> + '_ {
        self.installs.iter().map(move |rec| Install {
            replica: self.replicas.name(rec.replica).to_owned(),
            key: self.keys.name(rec.key).to_owned(),
            order: rec.order.clone(),
            value: self.values.get(rec.value).map(str::to_owned),
        })
    }

    fn transaction(&self, i: usize) -> Transaction {
        let t = &self.txns[i];
        Transaction {
            id: t.id,
            session: t.session,
            committed: t.committed,
            commit: t.commit,
            reads: self
                .reads_of(i)
                .iter()
                .map(|r| Read {
                    key: self.keys.name(r.key).to_owned(),
                    writer: r.writer,
                    value: self.values.get(r.value).map(str::to_owned),
                })
                .collect(),
            writes: self
                .writes_of(i)
                .iter()
                .map(|w| Write {
                    key: self.keys.name(w.key).to_owned(),
                    value: self.values.get(w.value).map(str::to_owned),
                })
                .collect(),
        }
    }

    pub(crate) fn reads_of(&self, i: usize) -> &[ReadRec] {
        let (s, e) = self.txns[i].reads;
        &self.reads[s as usize..e as usize]
    }

    pub(crate) fn writes_of(&self, i: usize) -> &[WriteRec] {
        let (s, e) = self.txns[i].writes;
        &self.writes[s as usize..e as usize]
    }

    /// Index of the first write record of transaction `i`, so `writes_of(i)[j]` is record
    /// `first_write(i) + j`.
    pub(crate) fn first_write(&self, i: usize) -> u32 {
        self.txns[i].writes.0
    }

    pub(crate) fn key_name(&self, key: u32) -> &str {
        self.keys.name(key)
    }

    pub(crate) fn key_count(&self) -> usize {
        self.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_round_trips_through_the_compact_form() {
        let mut h = History::new();
        let t1 = Transaction::committed(1)
            .in_session(0)
            .write("x", "1")
            .write("x", "2")
            .write_key("y");
        let t2 = Transaction::aborted(7)
            .commit_seq(3)
            .read("x", Some(1))
            .read_value("y", None, "init");
        h.add_transaction(t1.clone());
        h.add_transaction(t2.clone());
        h.add_install("r0", "x", 1);
        h.add_install("r1", "x", 1);
        h.add_install("r0", "x", 9);
        h.set_final_value("r0", "x", "2");
        assert_eq!(h.transactions().collect::<Vec<_>>(), vec![t1, t2]);
        let installs: Vec<_> = h.installs().collect();
        assert_eq!(installs.len(), 2, "one report per (replica, key)");
        assert_eq!(installs[0].order, vec![1, 9]);
        assert_eq!(installs[0].value.as_deref(), Some("2"));
        assert_eq!(installs[1].replica, "r1");
        assert_eq!(installs[1].value, None);
    }

    #[test]
    fn keys_are_interned_once() {
        let mut h = History::new();
        for id in 0..100 {
            h.add_transaction(Transaction::committed(id).read("k", None).write("k", "v"));
        }
        assert_eq!(h.key_count(), 1);
        assert_eq!(h.values.get(0), Some("v"));
        assert_eq!(h.values.get(NO_VALUE), None);
    }
}
