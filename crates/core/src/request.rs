//! What clients send and what they get back.

use crate::{ClientId, InstanceId, Rows, Value};
use serde::{Deserialize, Serialize};

/// A client request: run transaction type `txn` with `params`. `(client, seq)` names it uniquely.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub client: ClientId,
    pub seq: u64,
    pub txn: String,
    pub params: Vec<Value>,
}

/// How an operation was coordinated (Eliá §3.2). Reported per reply so that latency can be broken
/// down by class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum OpClass {
    /// Conflicts with nothing: any instance may run it.
    Commutative,
    /// Runs at once at its partition's instance.
    Local,
    /// Waits for the token, runs at its partition's instance, its state update is replicated.
    Global,
}

impl OpClass {
    pub fn name(self) -> &'static str {
        match self {
            OpClass::Commutative => "commutative",
            OpClass::Local => "local",
            OpClass::Global => "global",
        }
    }
}

/// Where an executed operation sits in the serial order the correctness proof constructs.
///
/// Each instance's database keeps two counters, updated inside the same transactions that do the
/// work, so the database itself says where each transaction was serialized:
/// `globals_seen`, the number of global operations (executed here or applied from the token)
/// whose effects the transaction saw, and `local_writes`, the number of local writing transactions
/// committed at this instance before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Position {
    /// The `seq`-th global operation (1-based) in token order.
    Global { seq: u64 },
    /// A commutative or local operation at `instance`.
    Local { instance: InstanceId, globals_seen: u64, local_writes: u64, wrote: bool },
}

/// What a transaction's body returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// It committed and returned these rows.
    Committed(Rows),
    /// The body decided to abort (for example: not enough stock). Nothing was written.
    Aborted(String),
}

/// The answer to one request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub client: ClientId,
    pub seq: u64,
    pub body: ReplyBody,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ReplyBody {
    /// Executed at `instance`.
    Done { outcome: Outcome, class: OpClass, instance: InstanceId, position: Position },
    /// Eliá's MAP message: this instance is the wrong one, send the request to `instance`.
    Map { instance: InstanceId },
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
