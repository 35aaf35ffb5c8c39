//! What a request means: `rw` with the keys to read, then the key to write.

use crate::Key;
pub use ensemble_app::apps::kv::RW;
use ensemble_core::{ClientId, Request, RequestError};

/// A well-formed `rw` request.
#[derive(Debug)]
pub(crate) struct Rw {
    pub client: ClientId,
    pub seq: u64,
    pub reads: Vec<Key>,
    pub write: Key,
}

/// Checks a request: `rw` with one or more integer parameters (the keys to read, then the key
/// to write). Every refusal names what was wrong.
pub(crate) fn parse(req: &Request) -> Result<Rw, RequestError> {
    let txn = || req.txn.clone();
    if req.txn != RW {
        return Err(RequestError::UnknownTransaction { txn: txn() });
    }
    let mut keys = Vec::with_capacity(req.params.len());
    for (index, v) in req.params.iter().enumerate() {
        let param = if index + 1 == req.params.len() { "w".to_string() } else { format!("k{}", index + 1) };
        let bad = || RequestError::ParamType { txn: txn(), index, param, expected: "int".into(), got: v.type_name().into() };
        keys.push(v.as_int().ok_or_else(bad)?);
    }
    let Some(write) = keys.pop() else { return Err(RequestError::Arity { txn: txn(), expected: 1, got: 0 }) };
    Ok(Rw { client: req.client, seq: req.seq, reads: keys, write })
}
