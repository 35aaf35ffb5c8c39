//! The commit log: what two-phase commit must find again after a crash (see the module
//! documentation, "Crash recovery"). [`MemoryCommitLog`] for the simulator, [`FileCommitLog`]
//! for the real runtime.

use super::CommitRecord;
use crate::durable::{FileLogError, FileLogRecovery};
use crate::records::RecordFile;
use crate::storage::Payload;
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

/// An append-only log of [`CommitRecord`]s that outlives its component.
///
/// Contract: a record is durable when [`CommitLog::append`] returns `Ok` (the component sends
/// what the record reveals right after); [`CommitLog::records`] returns every record appended
/// so far, in order, including those of earlier incarnations. An append that fails leaves the
/// record absent, or present as a torn tail that the next open cuts off.
pub trait CommitLog<T> {
    fn append(&mut self, record: &CommitRecord<T>) -> Result<(), FileLogError>;
    fn records(&self) -> Vec<CommitRecord<T>>;
}

/// An in-memory [`CommitLog`] behind a shared handle: the simulator keeps one clone as the
/// process's storage (which survives a crash that loses the process's volatile state) and the
/// component another. Never fails. Not `Send`: the simulator runs on one thread.
#[derive(Clone, Debug)]
pub struct MemoryCommitLog<T>(Rc<RefCell<Vec<CommitRecord<T>>>>);

impl<T> Default for MemoryCommitLog<T> {
    fn default() -> Self {
        MemoryCommitLog(Rc::new(RefCell::new(Vec::new())))
    }
}

impl<T> MemoryCommitLog<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.0.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.borrow().is_empty()
    }
}

impl<T: Clone> CommitLog<T> for MemoryCommitLog<T> {
    fn append(&mut self, record: &CommitRecord<T>) -> Result<(), FileLogError> {
        self.0.borrow_mut().push(record.clone());
        Ok(())
    }

    fn records(&self) -> Vec<CommitRecord<T>> {
        self.0.borrow().clone()
    }
}

/// The first bytes of a commit log file; the last one is the format version. Not the group
/// log's magic, so that one log is never opened as the other.
pub const COMMIT_LOG_MAGIC: [u8; 8] = *b"ENSCLOG\x01";

/// A [`CommitLog`] on one append-only file ([`RecordFile`]: the group log's format, fsync policy
/// and torn-tail rule, documented on [`FileLog`](crate::FileLog)); each record is one postcard
/// [`CommitRecord`]. Every append is fsync'd before it returns. Opening replays the file, cuts a
/// torn last record off ([`FileLogRecovery::torn_bytes`]), and fails on a damaged record with a
/// valid one after it, or on a valid record that does not decode, with
/// [`FileLogError::Corrupt`] naming the file and the record's byte offset.
///
/// What is left: no compaction (the file grows with every transaction and opening reads it all;
/// the records are also kept in memory for [`CommitLog::records`]).
#[derive(Debug)]
pub struct FileCommitLog<T> {
    file: RecordFile,
    records: Vec<CommitRecord<T>>,
    recovery: FileLogRecovery,
}

impl<T: Payload> FileCommitLog<T> {
    /// Opens the log at `path`, creating it if absent.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, FileLogError> {
        let mut records = Vec::new();
        let (file, recovery) = RecordFile::open(path, COMMIT_LOG_MAGIC, |_, payload| {
            let record: CommitRecord<T> = postcard::from_bytes(payload)
                .map_err(|e| format!("its checksum is valid but it does not decode: {e}"))?;
            records.push(record);
            Ok(())
        })?;
        Ok(FileCommitLog { file, records, recovery })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The file's length: the byte offset where the next record will start.
    pub fn end(&self) -> u64 {
        self.file.end()
    }

    /// What opening found: records replayed, a torn tail cut off.
    pub fn recovery(&self) -> &FileLogRecovery {
        &self.recovery
    }
}

impl<T: Payload> CommitLog<T> for FileCommitLog<T> {
    fn append(&mut self, record: &CommitRecord<T>) -> Result<(), FileLogError> {
        self.file.append_serde(record)?;
        self.records.push(record.clone());
        Ok(())
    }

    fn records(&self) -> Vec<CommitRecord<T>> {
        self.records.clone()
    }
}
