//! [`RecordFile`]: an append-only file of checksummed records, each fsync'd before the append
//! returns, for every durable log of the real runtime: the group's consensus log ([`FileLog`]),
//! two-phase commit's log, and what a multicast process must keep across a crash.
//!
//! The record format, the fsync policy and the rule that tells a torn tail from corruption are
//! documented on [`FileLog`], the first user; they are this file's, whatever its records hold.
//!
//! [`FileLog`]: crate::FileLog

use crate::durable::{FileLogError, FileLogRecovery};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

/// Bytes before a record's payload: length, header check, payload check.
pub(crate) const RECORD_HEADER: usize = 16;

const HEADER_CONTEXT: &[u8] = b"ensemble-group log header";
const PAYLOAD_CONTEXT: &[u8] = b"ensemble-group log record";

fn header_check(len: u32) -> [u8; 4] {
    let mut h = blake3::Hasher::new();
    h.update(HEADER_CONTEXT).update(&len.to_le_bytes());
    let mut out = [0; 4];
    out.copy_from_slice(&h.finalize().as_bytes()[..4]);
    out
}

fn payload_check(len: u32, payload: &[u8]) -> [u8; 8] {
    let mut h = blake3::Hasher::new();
    h.update(PAYLOAD_CONTEXT).update(&len.to_le_bytes()).update(payload);
    let mut out = [0; 8];
    out.copy_from_slice(&h.finalize().as_bytes()[..8]);
    out
}

/// The record starting at `at`: its payload and the offset just past it, or what is wrong.
fn frame_at(buf: &[u8], at: usize) -> Result<(&[u8], usize), String> {
    let rest = &buf[at..];
    if rest.len() < RECORD_HEADER {
        return Err(format!("header cut short ({} of {RECORD_HEADER} bytes)", rest.len()));
    }
    let len = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes"));
    if rest[4..8] != header_check(len) {
        return Err("header checksum mismatch".to_string());
    }
    let body = &rest[RECORD_HEADER..];
    if body.len() < len as usize {
        return Err(format!("payload cut short ({} of {len} bytes)", body.len()));
    }
    let payload = &body[..len as usize];
    if rest[8..16] != payload_check(len, payload) {
        return Err(format!("payload checksum mismatch ({len} bytes)"));
    }
    Ok((payload, at + RECORD_HEADER + len as usize))
}

/// The first offset after `from` where a valid record starts, if any.
fn next_valid(buf: &[u8], from: usize) -> Option<usize> {
    (from..buf.len().saturating_sub(RECORD_HEADER - 1)).find(|&p| frame_at(buf, p).is_ok())
}

/// What a record is handed to: its byte offset and payload; an error is corruption there.
type Replay<'a> = &'a mut dyn FnMut(u64, &[u8]) -> Result<(), String>;

/// Hands the valid records of `buf` from `at` on to `replay`; returns where they end and how many
/// bytes of torn tail follow (a damaged record with no valid record after it).
fn scan(path: &Path, buf: &[u8], mut at: usize, replay: Replay<'_>) -> Result<(usize, u64), FileLogError> {
    while at < buf.len() {
        let corrupt = |reason: String| FileLogError::Corrupt { path: path.to_path_buf(), offset: at as u64, reason };
        match frame_at(buf, at) {
            Ok((payload, next)) => {
                replay(at as u64, payload).map_err(corrupt)?;
                at = next;
            }
            Err(why) => {
                // Damage. If a valid record follows, acknowledged writes lie beyond it: that is
                // corruption, and truncating would silently lose them.
                if let Some(valid) = next_valid(buf, at + 1) {
                    return Err(corrupt(format!(
                        "{why}, and a valid record follows at byte offset {valid}: damage inside the \
                         log, not a torn write at its end"
                    )));
                }
                return Ok((at, (buf.len() - at) as u64));
            }
        }
    }
    Ok((at, 0))
}

/// An append-only file of records behind a magic of 8 bytes (the last one a format version).
/// One handle per file; one opener at a time is assumed, not enforced.
pub struct RecordFile {
    path: PathBuf,
    file: File,
    /// Length of the file: where the next record goes.
    end: u64,
    /// Set by a failed write or fsync: what failed. No write is taken after it.
    poisoned: Option<String>,
}

impl std::fmt::Debug for RecordFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordFile").field("path", &self.path).field("end", &self.end).field("poisoned", &self.poisoned).finish()
    }
}

impl RecordFile {
    /// Opens the file at `path`, creating it (with `magic`) if absent, and hands every valid
    /// record to `replay` in order with its byte offset. A record `replay` rejects is corruption
    /// at that offset; a damaged record with no valid record after it is the torn tail of a
    /// crash and is cut off; one with a valid record after it is corruption.
    pub fn open(
        path: impl AsRef<Path>,
        magic: [u8; 8],
        mut replay: impl FnMut(u64, &[u8]) -> Result<(), String>,
    ) -> Result<(RecordFile, FileLogRecovery), FileLogError> {
        let path = path.as_ref().to_path_buf();
        let io_err = |offset: u64, what: &'static str| {
            let path = path.clone();
            move |source| FileLogError::Io { path, offset, what, source }
        };
        let mut file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                OpenOptions::new().read(true).write(true).create_new(true).open(&path).map_err(io_err(0, "create"))?
            }
            Err(e) => return Err(io_err(0, "open")(e)),
        };
        let mut buf = Vec::new();
        file.read_to_end(&mut buf).map_err(io_err(0, "read"))?;
        let mut recovery = FileLogRecovery::default();

        if buf.len() < magic.len() {
            // Shorter than the magic: a file just created, or one whose creation was cut short
            // before its magic reached the disk. Nothing was ever acknowledged in it.
            if !magic.starts_with(&buf) {
                return Err(FileLogError::NotALog { path, found: buf, magic });
            }
            file.set_len(0).map_err(io_err(0, "truncate"))?;
            file.seek(SeekFrom::Start(0)).map_err(io_err(0, "seek"))?;
            file.write_all(&magic).map_err(io_err(0, "write magic"))?;
            file.sync_all().map_err(io_err(0, "fsync"))?;
            // The file's name must survive a crash too: fsync the directory that holds it.
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                _ => PathBuf::from("."),
            };
            File::open(&dir).and_then(|d| d.sync_all()).map_err(io_err(0, "fsync the directory"))?;
            buf = magic.to_vec();
            recovery.created = true;
        } else if buf[..magic.len()] != magic {
            buf.truncate(magic.len());
            return Err(FileLogError::NotALog { path, found: buf, magic });
        }

        let mut records = 0;
        let (at, torn) = scan(&path, &buf, magic.len(), &mut |at, payload| {
            records += 1;
            replay(at, payload)
        })?;
        recovery.records = records;
        if torn > 0 {
            // The crash point: that record was never acknowledged.
            recovery.torn_bytes = torn;
            file.set_len(at as u64).map_err(io_err(at as u64, "truncate the torn tail"))?;
            file.sync_all().map_err(io_err(at as u64, "fsync after truncating the torn tail"))?;
        }
        file.seek(SeekFrom::Start(at as u64)).map_err(io_err(at as u64, "seek"))?;
        Ok((RecordFile { path, file, end: at as u64, poisoned: None }, recovery))
    }

    /// Reads the file at `path` without opening it for writing (another process may be
    /// appending to it): hands every valid record to `replay` as [`RecordFile::open`] does, and
    /// stops at a torn tail, which it leaves in place. Returns the records read.
    pub fn read(
        path: impl AsRef<Path>,
        magic: [u8; 8],
        mut replay: impl FnMut(u64, &[u8]) -> Result<(), String>,
    ) -> Result<u64, FileLogError> {
        let path = path.as_ref().to_path_buf();
        let buf = std::fs::read(&path).map_err(|source| FileLogError::Io { path: path.clone(), offset: 0, what: "read", source })?;
        if buf.len() < magic.len() || buf[..magic.len()] != magic {
            if magic.starts_with(&buf) {
                return Ok(0);
            }
            return Err(FileLogError::NotALog { path, found: buf[..buf.len().min(magic.len())].to_vec(), magic });
        }
        let mut records = 0;
        scan(&path, &buf, magic.len(), &mut |at, payload| {
            records += 1;
            replay(at, payload)
        })?;
        Ok(records)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's length: the byte offset where the next record will start.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// A write refused before it reached the file, at the current end.
    pub fn refused(&self, reason: String) -> FileLogError {
        FileLogError::Refused { path: self.path.clone(), offset: self.end, reason }
    }

    /// Appends `payload` as one record and fsyncs it: on success it is durable.
    pub fn append(&mut self, payload: &[u8]) -> Result<(), FileLogError> {
        if let Some(failure) = &self.poisoned {
            return Err(self.refused(format!(
                "an earlier write failed ({failure}); the kernel may have dropped what it had \
                 buffered, so this handle takes no more writes: reopen the file to recover from what \
                 is on disk"
            )));
        }
        let len = u32::try_from(payload.len())
            .map_err(|_| self.refused(format!("a record of {} bytes exceeds the format's 4 GiB", payload.len())))?;
        let mut frame = Vec::with_capacity(RECORD_HEADER + payload.len());
        frame.extend_from_slice(&len.to_le_bytes());
        frame.extend_from_slice(&header_check(len));
        frame.extend_from_slice(&payload_check(len, payload));
        frame.extend_from_slice(payload);
        // One write of the whole frame: a crash leaves a prefix of it at worst (a torn tail).
        let result = self
            .file
            .write_all(&frame)
            .map_err(|e| ("write", e))
            .and_then(|()| self.file.sync_data().map_err(|e| ("fsync", e)));
        match result {
            Ok(()) => {
                self.end += frame.len() as u64;
                Ok(())
            }
            Err((what, source)) => {
                self.poisoned = Some(format!("{what} at byte offset {}: {source}", self.end));
                Err(FileLogError::Io { path: self.path.clone(), offset: self.end, what, source })
            }
        }
    }

    /// Appends `record` (postcard) as one record and fsyncs it.
    pub fn append_serde<R: serde::Serialize>(&mut self, record: &R) -> Result<(), FileLogError> {
        let payload =
            postcard::to_allocvec(record).map_err(|e| self.refused(format!("the record does not encode: {e}")))?;
        self.append(&payload)
    }
}
