//! State updates: the row-level effects of a global operation, replayed at the other instances.

use ensemble_core::Value;
use serde::{Deserialize, Serialize};

/// The writes of one transaction as row changes, in the order the capture produced them.
/// Applying it reproduces the writes exactly, even when the operation used values that another
/// execution would not reproduce (ids, clocks, random draws).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StateUpdate {
    pub changes: Vec<RowChange>,
    /// The transaction that produced it ([`txn_id`](crate::storage::txn_id)), when the run
    /// records row accesses: applying the update installs versions written by it.
    #[serde(default)]
    pub writer: Option<u64>,
}

impl StateUpdate {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowChange {
    pub table: String,
    pub kind: ChangeKind,
}

/// Columns are named so that an update applies to any engine with the same schema.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ChangeKind {
    /// A new row, every column.
    Insert { row: Vec<(String, Value)> },
    /// The row with this primary key gets these new column values.
    Update { key: Vec<(String, Value)>, set: Vec<(String, Value)> },
    /// The row with this primary key is gone.
    Delete { key: Vec<(String, Value)> },
}
