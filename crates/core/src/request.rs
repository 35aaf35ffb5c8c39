//! What clients send and what they get back.

use crate::{ClientId, ProcessId, Rows, Value};
use serde::{Deserialize, Serialize};

/// A client request: run transaction type `txn` with `params`. `(client, seq)` names it uniquely.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub client: ClientId,
    pub seq: u64,
    pub txn: String,
    pub params: Vec<Value>,
}

/// Why a transaction aborted. The DUR papers report abort rates by cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AbortCause {
    /// The transaction's own logic decided (for example: not enough stock).
    Body,
    /// Certification found it conflicting with a transaction that committed first.
    Certification,
    /// It was aborted before certification because of a conflict (a preemptive abort, a
    /// read that found no compatible version, a lock).
    Conflict,
}

impl AbortCause {
    pub const ALL: [AbortCause; 3] = [AbortCause::Body, AbortCause::Certification, AbortCause::Conflict];
    pub fn name(self) -> &'static str {
        match self {
            AbortCause::Body => "body",
            AbortCause::Certification => "certification",
            AbortCause::Conflict => "conflict",
        }
    }
}

/// How a transaction ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// It committed and returned these rows.
    Committed(Rows),
    /// It aborted: nothing it wrote is visible.
    Aborted { cause: AbortCause, reason: String },
}

impl Outcome {
    /// An abort the transaction's body decided.
    pub fn body_abort(reason: impl Into<String>) -> Outcome {
        Outcome::Aborted { cause: AbortCause::Body, reason: reason.into() }
    }
    pub fn committed(&self) -> bool {
        matches!(self, Outcome::Committed(_))
    }

    /// Why it aborted; `None` if it committed.
    pub fn abort_cause(&self) -> Option<AbortCause> {
        match self {
            Outcome::Aborted { cause, .. } => Some(*cause),
            Outcome::Committed(_) => None,
        }
    }
}

/// The answer to one request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reply<E> {
    pub client: ClientId,
    pub seq: u64,
    pub body: ReplyBody<E>,
}

/// A transaction that ran, with what the protocol says about it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Done<E> {
    pub outcome: Outcome,
    /// The protocol's evidence for the harness and the checker (see [`crate::Protocol`]).
    pub evidence: E,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ReplyBody<E> {
    Done(Done<E>),
    /// This process is the wrong one: send the request to `to` (Eliá's MAP message).
    Redirect { to: ProcessId },
    /// The request was refused before anything ran; nothing was written.
    Error(RequestError),
}

/// Why a request was refused. Every variant names what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum RequestError {
    #[error("unknown transaction type `{txn}`")]
    UnknownTransaction { txn: String },
    #[error("transaction `{txn}` takes {expected} parameter(s), got {got}")]
    Arity { txn: String, expected: usize, got: usize },
    #[error("transaction `{txn}`: parameter {index} (`{param}`) must be {expected}, got {got}")]
    ParamType { txn: String, index: usize, param: String, expected: String, got: String },
    #[error("transaction `{txn}` failed in storage: {message}")]
    Storage { txn: String, message: String },
}
