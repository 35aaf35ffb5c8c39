//! Transaction programs: what a transaction does, one step at a time.
//!
//! G-DUR's transactions are interactive (§3, §8.1: "keys not known in advance"): the client's
//! logic decides each operation after seeing the results of the previous ones. A [`Program`] is
//! that logic as a resumable state machine, run by the transaction's proxy (G-DUR's
//! `coord(Ti)`, P-Store's `Proxy(T)`): the proxy asks for the next [`Step`], performs it (a read
//! may wait for a remote replica), and hands the value read to the next call. The program never
//! sees the protocol, and the protocol never sees the program's logic.

use crate::{Key, Value};
use ensemble_core::Rows;

/// The next thing a transaction does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Read `key`; the value comes back to the next [`Program::step`] call.
    Read(Key),
    /// Buffer a write of `key` (G-DUR's `ws(Ti) ← ws(Ti) ∪ {x_i}`); a later read of `key` in
    /// this transaction returns it.
    Write(Key, Value),
    /// Ask to commit; `Rows` is what the client gets back if the commit succeeds.
    Commit(Rows),
    /// The transaction's own logic gives up (an abort by the body, `AbortCause::Body`).
    Abort(String),
}

/// A transaction's logic. `step` is called first with `None`, then after each `Read` with the
/// key and the value read, and after each `Write` with `None`. A program must end (with
/// `Commit` or `Abort`) and must be deterministic: given the same values read it takes the same
/// steps, so that a transaction re-executed after an abort is the same transaction.
pub trait Program: std::fmt::Debug + Send {
    fn step(&mut self, read: Option<(Key, Value)>) -> Step;
}
