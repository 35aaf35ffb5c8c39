//! [`FileLog`]: a [`DurableLog`] on one append-only file, for the real runtime. A member
//! restarted after `kill -9` (or a power cut) reopens the file and finds its promise, accepted
//! round, log, decided index and a fresh incarnation, as the contract in [`DurableLog`] states.
//!
//! The format, the fsync policy, torn writes and what is left are documented on [`FileLog`] (this
//! module is private; the type is re-exported at the crate root).

use crate::storage::{DurableLog, LogItem, MemoryLogState, Payload};
use omnipaxos::ballot_leader_election::Ballot;
use omnipaxos::storage::{NoSnapshot, StopSign, Storage, StorageOp, StorageResult};
use serde::{Deserialize, Serialize};
use crate::records::RecordFile;
use std::io;
use std::path::{Path, PathBuf};

/// The first bytes of every log file; the last one is the format version.
const MAGIC: [u8; 8] = *b"ENSGLOG\x01";

/// Why a log could not be opened or written. Every variant names the file and the byte offset.
#[derive(Debug, thiserror::Error)]
pub enum FileLogError {
    #[error("{}: {what} at byte offset {offset}: {source}", .path.display())]
    Io { path: PathBuf, offset: u64, what: &'static str, source: io::Error },
    #[error("{}: not a log of this kind: it starts with {found:02x?} at byte offset 0, not the magic {magic:02x?}", .path.display())]
    NotALog { path: PathBuf, found: Vec<u8>, magic: [u8; 8] },
    #[error("{}: corrupt record at byte offset {offset}: {reason}", .path.display())]
    Corrupt { path: PathBuf, offset: u64, reason: String },
    #[error("{}: write refused at byte offset {offset}: {reason}", .path.display())]
    Refused { path: PathBuf, offset: u64, reason: String },
}

impl FileLogError {
    /// The byte offset the error is about.
    pub fn offset(&self) -> u64 {
        match self {
            FileLogError::NotALog { .. } => 0,
            FileLogError::Io { offset, .. }
            | FileLogError::Corrupt { offset, .. }
            | FileLogError::Refused { offset, .. } => *offset,
        }
    }
}

/// What opening found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileLogRecovery {
    /// Valid records replayed (the incarnation record the open itself wrote not included).
    pub records: u64,
    /// Bytes of a torn last record cut off the end of the file (0 if the file ended cleanly).
    pub torn_bytes: u64,
    /// The file was created by this open (or held only a torn magic).
    pub created: bool,
}

/// One record of the file: one write call, or an incarnation.
#[derive(Serialize, Deserialize)]
#[serde(bound = "T: Payload")]
enum Record<T: Payload> {
    Writes(Vec<Write<T>>),
    Incarnation(u64),
}

/// [`StorageOp`] as stored (the library's type has no serde). Variant order is the format.
#[derive(Serialize, Deserialize)]
#[serde(bound = "T: Payload")]
enum Write<T: Payload> {
    AppendEntry(LogItem<T>),
    AppendEntries(Vec<LogItem<T>>),
    AppendOnPrefix(usize, Vec<LogItem<T>>),
    SetPromise(Ballot),
    SetDecidedIndex(usize),
    SetAcceptedRound(Ballot),
    SetCompactedIdx(usize),
    Trim(usize),
    SetStopsign(Option<StopSign>),
    SetSnapshot(Option<NoSnapshot>),
}

impl<T: Payload> From<StorageOp<LogItem<T>>> for Write<T> {
    fn from(op: StorageOp<LogItem<T>>) -> Self {
        match op {
            StorageOp::AppendEntry(e) => Write::AppendEntry(e),
            StorageOp::AppendEntries(es) => Write::AppendEntries(es),
            StorageOp::AppendOnPrefix(i, es) => Write::AppendOnPrefix(i, es),
            StorageOp::SetPromise(b) => Write::SetPromise(b),
            StorageOp::SetDecidedIndex(i) => Write::SetDecidedIndex(i),
            StorageOp::SetAcceptedRound(b) => Write::SetAcceptedRound(b),
            StorageOp::SetCompactedIdx(i) => Write::SetCompactedIdx(i),
            StorageOp::Trim(i) => Write::Trim(i),
            StorageOp::SetStopsign(s) => Write::SetStopsign(s),
            StorageOp::SetSnapshot(s) => Write::SetSnapshot(s),
        }
    }
}

impl<T: Payload> From<Write<T>> for StorageOp<LogItem<T>> {
    fn from(w: Write<T>) -> Self {
        match w {
            Write::AppendEntry(e) => StorageOp::AppendEntry(e),
            Write::AppendEntries(es) => StorageOp::AppendEntries(es),
            Write::AppendOnPrefix(i, es) => StorageOp::AppendOnPrefix(i, es),
            Write::SetPromise(b) => StorageOp::SetPromise(b),
            Write::SetDecidedIndex(i) => StorageOp::SetDecidedIndex(i),
            Write::SetAcceptedRound(b) => StorageOp::SetAcceptedRound(b),
            Write::SetCompactedIdx(i) => StorageOp::SetCompactedIdx(i),
            Write::Trim(i) => StorageOp::Trim(i),
            Write::SetStopsign(s) => StorageOp::SetStopsign(s),
            Write::SetSnapshot(s) => StorageOp::SetSnapshot(s),
        }
    }
}

/// A [`DurableLog`] on an append-only file. One handle per member, moved into it.
///
/// # File format
///
/// ```text
/// file    = magic record*
/// magic   = "ENSGLOG" 0x01                      8 bytes; the last byte is the format version
/// record  = len hcheck pcheck payload
/// len     = u32, little-endian                  payload length in bytes
/// hcheck  = blake3("ensemble-group log header" || len)[..4]
/// pcheck  = blake3("ensemble-group log record" || len || payload)[..8]
/// payload = postcard(Record)
/// Record  = Writes(Vec<Write>)                  one write call: a single operation, or all the
///                                               operations of one `write_atomically`
///         | Incarnation(u64)                    the incarnation an open handed out
/// Write   = one variant per OmniPaxos `StorageOp`, in the library's order
/// ```
///
/// Postcard encodes enum variants by index, so the variants of `Record` and `Write` are part of
/// the format: new ones go at the end, and a change to existing ones bumps the version byte.
/// The header has a checksum of its own so that a damaged length is recognised as such (the
/// record's extent cannot be trusted then) and so that the search for a later valid record (below)
/// hashes a payload only where a header is plausible: it costs one small hash per byte searched.
///
/// Opening replays every record into the in-memory state ([`MemoryLogState`], the same one
/// [`MemoryLog`](crate::MemoryLog) keeps, with the same semantics) and serves every read from it.
///
/// # fsync policy
///
/// Every write call (one record) is one `write` of the whole frame followed by
/// [`File::sync_data`] before the call returns: the library sends `Promise` and `Accepted`
/// right after recording them, so nothing is acknowledged before it is on disk. `sync_data`
/// suffices because an append's new file length is metadata that `fdatasync` flushes (it is
/// needed to read the data back). A new file's directory entry is made durable by an fsync of
/// its directory, once, when the file is created. An atomic batch is one record under one
/// checksum: after a crash it is wholly there or wholly absent, never half.
///
/// A failed write or fsync poisons the handle: every later write is refused. After a failed
/// fsync, the kernel may have dropped the dirty pages and a retry could report success for data
/// that never reached the disk, so the only safe continuation is to reopen the file (recovery
/// reads what really is on disk). The library treats a storage error as fatal anyway.
///
/// # What a torn write looks like, and what corruption looks like
///
/// A crash tears at most the last record, the one being appended: the file ends with a header
/// cut short, a payload cut short, or a complete frame whose bytes were not all written (a
/// checksum mismatch; a file system may also extend the file with zeros). Such a record was never
/// acknowledged (its `sync_data` had not returned), so recovery truncates the file at its start
/// and the state is the one before it; [`FileLogRecovery::torn_bytes`] says how much was cut.
///
/// A damaged record followed by a valid record is something else: acknowledged data follows the
/// damage, so truncating would throw away writes the library relied on. Opening then fails with
/// [`FileLogError::Corrupt`], naming the file and the byte offset of the damaged record. The rule
/// is therefore: a damaged record is the torn tail if and only if no valid record starts at any
/// later byte offset. Two consequences: a byte flipped by the disk in the very last record cannot
/// be told from a torn write and loses that record (the checksums cannot help there); and a
/// record whose payload happens to embed the bytes of a valid record makes a torn copy of it look
/// like corruption, so opening fails (safe: nothing is dropped silently) instead of truncating.
/// A valid frame whose payload does not decode, or whose operation cannot apply to the state
/// replayed so far, is corruption too (or a format mismatch), named the same way.
///
/// # The incarnation
///
/// Every [`FileLog::open`] increments the stored incarnation and persists it (an
/// `Incarnation` record, fsync'd) before returning, so no two opens ever see the same number,
/// even if the process dies right after opening. The first [`DurableLog::next_incarnation`] on a
/// handle returns that number without writing again (a member calls it once when it is built);
/// any further call increments and persists again. Since that method cannot return an error, an
/// I/O failure there panics, as the library does on any storage error.
///
/// # What is left
///
/// * **Compaction.** Not done: the file grows with every write, and opening reads and replays it
///   all (it is read into memory at once). Groups do not trim their log yet; when they do, the
///   file log needs a checkpoint: write the whole state as one record to a new file, fsync it,
///   rename it over the old one, fsync the directory.
/// * **Snapshots.** Groups use [`NoSnapshot`]; a snapshot is stored as its record like any
///   other write, which will not do for large application snapshots (they belong in a file of
///   their own, named by the log).
/// * **One opener at a time** is assumed, not enforced (no lock file or `flock`): two processes
///   appending to one log would interleave records and break it.
/// * The in-memory state holds the whole log, as [`MemoryLog`](crate::MemoryLog) does.
pub struct FileLog<T: Payload> {
    file: RecordFile,
    state: MemoryLogState<T>,
    /// The incarnation the open persisted, until `next_incarnation` hands it out.
    fresh_incarnation: Option<u64>,
    recovery: FileLogRecovery,
}

impl<T: Payload> std::fmt::Debug for FileLog<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileLog")
            .field("file", &self.file)
            .field("incarnation", &self.state.incarnation)
            .field("entries", &self.state.len())
            .finish()
    }
}

impl<T: Payload> FileLog<T> {
    /// Opens the log at `path`, creating it if absent: replays its records, truncates a torn
    /// last record, and persists a new incarnation before returning.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, FileLogError> {
        let mut state = MemoryLogState::default();
        let (file, recovery) = RecordFile::open(path, MAGIC, |_, payload| {
            let record: Record<T> =
                postcard::from_bytes(payload).map_err(|e| format!("its checksum is valid but it does not decode: {e}"))?;
            match record {
                Record::Writes(writes) => {
                    for w in writes {
                        state
                            .apply(w.into())
                            .map_err(|e| format!("its operation does not apply to the log before it: {e}"))?;
                    }
                }
                Record::Incarnation(n) => {
                    if n <= state.incarnation {
                        return Err(format!("incarnation {n} after incarnation {}: incarnations only grow", state.incarnation));
                    }
                    state.incarnation = n;
                }
            }
            Ok(())
        })?;
        let mut log = FileLog { file, state, fresh_incarnation: None, recovery };
        let incarnation = log.state.incarnation + 1;
        log.commit(&Record::Incarnation(incarnation))?;
        log.state.incarnation = incarnation;
        log.fresh_incarnation = Some(incarnation);
        Ok(log)
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// What the log holds (the same state a [`MemoryLog`](crate::MemoryLog) keeps).
    pub fn state(&self) -> &MemoryLogState<T> {
        &self.state
    }

    /// The file's length: the byte offset where the next record will start.
    pub fn end(&self) -> u64 {
        self.file.end()
    }

    /// What opening found (records replayed, a torn tail cut off).
    pub fn recovery(&self) -> &FileLogRecovery {
        &self.recovery
    }

    /// The incarnation the latest open (or `next_incarnation`) persisted.
    pub fn incarnation(&self) -> u64 {
        self.state.incarnation
    }

    fn refused(&self, reason: String) -> FileLogError {
        self.file.refused(reason)
    }

    /// Appends `record` as one frame and fsyncs it. On success the record is durable.
    fn commit(&mut self, record: &Record<T>) -> Result<(), FileLogError> {
        self.file.append_serde(record)
    }

    /// Checks `ops` against the state, writes them as one record, then applies them. Nothing
    /// that cannot apply reaches the disk (replay would refuse it as corruption).
    fn write(&mut self, ops: Vec<StorageOp<LogItem<T>>>) -> Result<(), FileLogError> {
        let next = if let [op] = ops.as_slice() {
            // One operation: checking it against the state is enough, no copy needed.
            self.state.check(op).map_err(|e| self.refused(e.to_string()))?;
            None
        } else {
            // A batch: later operations depend on earlier ones, so apply them to a copy (as
            // `MemoryLog` does; batches are rare: log syncs and trims).
            let mut copy = self.state.clone();
            for op in &ops {
                // Cheap for every operation but entries, which are cloned only here.
                copy.apply(clone_op(op)).map_err(|e| self.refused(e.to_string()))?;
            }
            Some(copy)
        };
        let record = Record::Writes(ops.into_iter().map(Write::from).collect());
        self.commit(&record)?;
        match next {
            Some(copy) => self.state = copy,
            None => {
                let Record::Writes(writes) = record else { unreachable!("built above") };
                for w in writes {
                    self.state.apply(w.into()).expect("checked before writing");
                }
            }
        }
        Ok(())
    }

    fn write_one(&mut self, op: StorageOp<LogItem<T>>) -> StorageResult<()> {
        self.write(vec![op]).map_err(|e| Box::new(e) as Box<dyn std::error::Error>)
    }
}

/// `StorageOp` is not `Clone`.
fn clone_op<T: Payload>(op: &StorageOp<LogItem<T>>) -> StorageOp<LogItem<T>> {
    match op {
        StorageOp::AppendEntry(e) => StorageOp::AppendEntry(e.clone()),
        StorageOp::AppendEntries(es) => StorageOp::AppendEntries(es.clone()),
        StorageOp::AppendOnPrefix(i, es) => StorageOp::AppendOnPrefix(*i, es.clone()),
        StorageOp::SetPromise(b) => StorageOp::SetPromise(*b),
        StorageOp::SetDecidedIndex(i) => StorageOp::SetDecidedIndex(*i),
        StorageOp::SetAcceptedRound(b) => StorageOp::SetAcceptedRound(*b),
        StorageOp::SetCompactedIdx(i) => StorageOp::SetCompactedIdx(*i),
        StorageOp::Trim(i) => StorageOp::Trim(*i),
        StorageOp::SetStopsign(s) => StorageOp::SetStopsign(s.clone()),
        StorageOp::SetSnapshot(s) => StorageOp::SetSnapshot(*s),
    }
}

impl<T: Payload> DurableLog<T> for FileLog<T> {
    fn next_incarnation(&mut self) -> u64 {
        // The open persisted one already: hand it out without another write.
        if let Some(n) = self.fresh_incarnation.take() {
            return n;
        }
        let n = self.state.incarnation + 1;
        if let Err(e) = self.commit(&Record::Incarnation(n)) {
            // No error channel here, and reusing a number would let peers take this life's
            // messages for the previous one's: stop, as the library does on storage errors.
            panic!("cannot persist incarnation {n}: {e}");
        }
        self.state.incarnation = n;
        n
    }
}

impl<T: Payload> Storage<LogItem<T>> for FileLog<T> {
    fn write_atomically(&mut self, ops: Vec<StorageOp<LogItem<T>>>) -> StorageResult<()> {
        if ops.is_empty() {
            return Ok(());
        }
        self.write(ops).map_err(|e| Box::new(e) as Box<dyn std::error::Error>)
    }

    fn append_entry(&mut self, entry: LogItem<T>) -> StorageResult<()> {
        self.write_one(StorageOp::AppendEntry(entry))
    }

    fn append_entries(&mut self, entries: Vec<LogItem<T>>) -> StorageResult<()> {
        self.write_one(StorageOp::AppendEntries(entries))
    }

    fn append_on_prefix(&mut self, from_idx: usize, entries: Vec<LogItem<T>>) -> StorageResult<()> {
        self.write_one(StorageOp::AppendOnPrefix(from_idx, entries))
    }

    fn set_promise(&mut self, n_prom: Ballot) -> StorageResult<()> {
        self.write_one(StorageOp::SetPromise(n_prom))
    }

    fn set_decided_idx(&mut self, ld: usize) -> StorageResult<()> {
        self.write_one(StorageOp::SetDecidedIndex(ld))
    }

    fn get_decided_idx(&self) -> StorageResult<usize> {
        Ok(self.state.decided_idx)
    }

    fn set_accepted_round(&mut self, na: Ballot) -> StorageResult<()> {
        self.write_one(StorageOp::SetAcceptedRound(na))
    }

    fn get_accepted_round(&self) -> StorageResult<Option<Ballot>> {
        Ok(self.state.accepted_round)
    }

    fn get_entries(&self, from: usize, to: usize) -> StorageResult<Vec<LogItem<T>>> {
        Ok(self.state.entries_between(from, to))
    }

    fn get_log_len(&self) -> StorageResult<usize> {
        Ok(self.state.entries.len())
    }

    fn get_suffix(&self, from: usize) -> StorageResult<Vec<LogItem<T>>> {
        Ok(self.state.suffix(from))
    }

    fn get_promise(&self) -> StorageResult<Option<Ballot>> {
        Ok(self.state.promise)
    }

    fn set_stopsign(&mut self, s: Option<StopSign>) -> StorageResult<()> {
        self.write_one(StorageOp::SetStopsign(s))
    }

    fn get_stopsign(&self) -> StorageResult<Option<StopSign>> {
        Ok(self.state.stopsign.clone())
    }

    fn trim(&mut self, idx: usize) -> StorageResult<()> {
        self.write_one(StorageOp::Trim(idx))
    }

    fn set_compacted_idx(&mut self, idx: usize) -> StorageResult<()> {
        self.write_one(StorageOp::SetCompactedIdx(idx))
    }

    fn get_compacted_idx(&self) -> StorageResult<usize> {
        Ok(self.state.compacted_idx)
    }

    fn set_snapshot(&mut self, snapshot: Option<NoSnapshot>) -> StorageResult<()> {
        self.write_one(StorageOp::SetSnapshot(snapshot))
    }

    fn get_snapshot(&self) -> StorageResult<Option<NoSnapshot>> {
        Ok(self.state.snapshot)
    }
}
