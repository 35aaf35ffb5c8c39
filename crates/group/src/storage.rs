//! The log a group member keeps: what OmniPaxos must find again after a crash (its promise, the
//! accepted round, the accepted log and the decided index), plus our incarnation number.
//!
//! [`MemoryLog`] keeps it in memory behind a shared handle: the simulator holds one handle as the
//! process's storage (which survives a crash that loses the process's volatile state) and the
//! member holds another, so a member rebuilt after such a crash finds what it had written. Every
//! write is synchronous and complete when the library's call returns, before the library hands
//! out the messages that depend on it; a durable log for the real runtime must keep that
//! contract (see [`DurableLog`]). [`FileLog`](crate::FileLog) is one, on a file.

use omnipaxos::ballot_leader_election::Ballot;
use omnipaxos::storage::{NoSnapshot, StopSign, Storage, StorageOp, StorageResult};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::fmt::Debug;
use std::rc::Rc;

/// What a group agrees on: any value that is cloneable, printable and travels with serde.
pub trait Payload: Clone + Debug + Serialize + DeserializeOwned + 'static {}
impl<T: Clone + Debug + Serialize + DeserializeOwned + 'static> Payload for T {}

/// One entry of the replicated log as the library stores it: a payload, no snapshots (groups
/// never compact their log yet).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound = "T: Payload")]
pub struct LogItem<T: Payload>(pub T);

impl<T: Payload> omnipaxos::storage::Entry for LogItem<T> {
    type Snapshot = NoSnapshot;
}

/// A log that outlives its member: the library's [`Storage`] plus the incarnation counter our
/// link layer needs.
///
/// Contract for an implementation that survives a real crash (a file, fsync'd, or an embedded
/// store), which the real runtime will need:
/// * every write has reached the disk when the call returns: the library sends a `Promise` or an
///   `Accepted` right after the call that recorded it, and a process that forgets a promise or an
///   accepted entry after acknowledging it breaks Paxos's safety;
/// * `write_atomically` is all or nothing (a log sync truncates and appends in one call);
/// * [`DurableLog::next_incarnation`] never returns the same number twice across restarts.
pub trait DurableLog<T: Payload>: Storage<LogItem<T>> {
    /// Increments the stored incarnation number and returns it. A member calls it once when it is
    /// built: its peers tell its messages from those of its previous life by it.
    fn next_incarnation(&mut self) -> u64;
}

/// What a [`MemoryLog`] holds.
#[derive(Clone, Debug)]
pub struct MemoryLogState<T: Payload> {
    /// Entries after the compacted prefix (there is none: groups do not compact yet).
    pub entries: Vec<LogItem<T>>,
    pub promise: Option<Ballot>,
    pub accepted_round: Option<Ballot>,
    pub decided_idx: usize,
    pub compacted_idx: usize,
    pub stopsign: Option<StopSign>,
    pub snapshot: Option<NoSnapshot>,
    pub incarnation: u64,
    /// Write calls served, for counters.
    pub writes: u64,
}

impl<T: Payload> Default for MemoryLogState<T> {
    fn default() -> Self {
        MemoryLogState {
            entries: Vec::new(),
            promise: None,
            accepted_round: None,
            decided_idx: 0,
            compacted_idx: 0,
            stopsign: None,
            snapshot: None,
            incarnation: 0,
            writes: 0,
        }
    }
}

/// The reason a write could not be done. The library treats any storage error as fatal (it
/// panics), so the member validates messages before they can cause one; this names the write if
/// one ever gets through.
#[derive(Debug, thiserror::Error)]
#[error("log write refused: {0}")]
pub struct LogWriteError(pub(crate) String);

impl<T: Payload> MemoryLogState<T> {
    pub(crate) fn len(&self) -> usize {
        self.compacted_idx + self.entries.len()
    }

    /// Whether `op` can be applied to this state: [`Self::apply`] fails exactly when this does,
    /// and before it changes anything, so a durable log can refuse a write before it reaches
    /// the disk.
    pub(crate) fn check(&self, op: &StorageOp<LogItem<T>>) -> Result<(), LogWriteError> {
        match op {
            // A prefix beyond the end would leave a hole; one inside the compacted part would
            // rewrite what is gone. Either means a bad log sync got through.
            StorageOp::AppendOnPrefix(from, _) if *from > self.len() || *from < self.compacted_idx => {
                Err(LogWriteError(format!("append on prefix {from} outside [{}, {}]", self.compacted_idx, self.len())))
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn apply(&mut self, op: StorageOp<LogItem<T>>) -> Result<(), LogWriteError> {
        self.check(&op)?;
        match op {
            StorageOp::AppendEntry(e) => self.entries.push(e),
            StorageOp::AppendEntries(mut es) => self.entries.append(&mut es),
            StorageOp::AppendOnPrefix(from, mut es) => {
                self.entries.truncate(from - self.compacted_idx);
                self.entries.append(&mut es);
            }
            StorageOp::SetPromise(b) => self.promise = Some(b),
            StorageOp::SetDecidedIndex(i) => self.decided_idx = i,
            StorageOp::SetAcceptedRound(b) => self.accepted_round = Some(b),
            StorageOp::SetCompactedIdx(i) => self.compacted_idx = i,
            StorageOp::Trim(idx) => {
                let n = idx.saturating_sub(self.compacted_idx).min(self.entries.len());
                self.entries.drain(..n);
            }
            StorageOp::SetStopsign(s) => self.stopsign = s,
            StorageOp::SetSnapshot(s) => self.snapshot = s,
        }
        self.writes += 1;
        Ok(())
    }

    /// Entries `[from, to)`, or none if the interval is not wholly in the log (the library's
    /// contract for `get_entries`).
    pub(crate) fn entries_between(&self, from: usize, to: usize) -> Vec<LogItem<T>> {
        if from < self.compacted_idx || to > self.len() || from > to {
            return Vec::new();
        }
        self.entries[from - self.compacted_idx..to - self.compacted_idx].to_vec()
    }

    /// Entries from `from` to the end, or none if `from` is outside the log.
    pub(crate) fn suffix(&self, from: usize) -> Vec<LogItem<T>> {
        if from < self.compacted_idx || from > self.len() {
            return Vec::new();
        }
        self.entries[from - self.compacted_idx..].to_vec()
    }
}

/// An in-memory [`DurableLog`] behind a shared handle (clones share one log). Not `Send`: the
/// simulator runs on one thread.
#[derive(Clone, Debug, Default)]
pub struct MemoryLog<T: Payload>(Rc<RefCell<MemoryLogState<T>>>);

impl<T: Payload> MemoryLog<T> {
    pub fn new() -> Self {
        MemoryLog(Rc::new(RefCell::new(MemoryLogState::default())))
    }

    /// A copy of what the log holds now.
    pub fn snapshot(&self) -> MemoryLogState<T> {
        self.0.borrow().clone()
    }

    fn write(&mut self, op: StorageOp<LogItem<T>>) -> StorageResult<()> {
        self.0.borrow_mut().apply(op).map_err(|e| Box::new(e) as Box<dyn std::error::Error>)
    }
}

impl<T: Payload> DurableLog<T> for MemoryLog<T> {
    fn next_incarnation(&mut self) -> u64 {
        let mut s = self.0.borrow_mut();
        s.incarnation += 1;
        s.incarnation
    }
}

impl<T: Payload> Storage<LogItem<T>> for MemoryLog<T> {
    fn write_atomically(&mut self, ops: Vec<StorageOp<LogItem<T>>>) -> StorageResult<()> {
        // All or nothing: apply to a copy, keep it only if every operation succeeded.
        let mut copy = self.0.borrow().clone();
        for op in ops {
            copy.apply(op).map_err(|e| Box::new(e) as Box<dyn std::error::Error>)?;
        }
        *self.0.borrow_mut() = copy;
        Ok(())
    }

    fn append_entry(&mut self, entry: LogItem<T>) -> StorageResult<()> {
        self.write(StorageOp::AppendEntry(entry))
    }

    fn append_entries(&mut self, entries: Vec<LogItem<T>>) -> StorageResult<()> {
        self.write(StorageOp::AppendEntries(entries))
    }

    fn append_on_prefix(&mut self, from_idx: usize, entries: Vec<LogItem<T>>) -> StorageResult<()> {
        self.write(StorageOp::AppendOnPrefix(from_idx, entries))
    }

    fn set_promise(&mut self, n_prom: Ballot) -> StorageResult<()> {
        self.write(StorageOp::SetPromise(n_prom))
    }

    fn set_decided_idx(&mut self, ld: usize) -> StorageResult<()> {
        self.write(StorageOp::SetDecidedIndex(ld))
    }

    fn get_decided_idx(&self) -> StorageResult<usize> {
        Ok(self.0.borrow().decided_idx)
    }

    fn set_accepted_round(&mut self, na: Ballot) -> StorageResult<()> {
        self.write(StorageOp::SetAcceptedRound(na))
    }

    fn get_accepted_round(&self) -> StorageResult<Option<Ballot>> {
        Ok(self.0.borrow().accepted_round)
    }

    fn get_entries(&self, from: usize, to: usize) -> StorageResult<Vec<LogItem<T>>> {
        Ok(self.0.borrow().entries_between(from, to))
    }

    fn get_log_len(&self) -> StorageResult<usize> {
        Ok(self.0.borrow().entries.len())
    }

    fn get_suffix(&self, from: usize) -> StorageResult<Vec<LogItem<T>>> {
        Ok(self.0.borrow().suffix(from))
    }

    fn get_promise(&self) -> StorageResult<Option<Ballot>> {
        Ok(self.0.borrow().promise)
    }

    fn set_stopsign(&mut self, s: Option<StopSign>) -> StorageResult<()> {
        self.write(StorageOp::SetStopsign(s))
    }

    fn get_stopsign(&self) -> StorageResult<Option<StopSign>> {
        Ok(self.0.borrow().stopsign.clone())
    }

    fn trim(&mut self, idx: usize) -> StorageResult<()> {
        self.write(StorageOp::Trim(idx))
    }

    fn set_compacted_idx(&mut self, idx: usize) -> StorageResult<()> {
        self.write(StorageOp::SetCompactedIdx(idx))
    }

    fn get_compacted_idx(&self) -> StorageResult<usize> {
        Ok(self.0.borrow().compacted_idx)
    }

    fn set_snapshot(&mut self, snapshot: Option<NoSnapshot>) -> StorageResult<()> {
        self.write(StorageOp::SetSnapshot(snapshot))
    }

    fn get_snapshot(&self) -> StorageResult<Option<NoSnapshot>> {
        Ok(self.0.borrow().snapshot)
    }
}
