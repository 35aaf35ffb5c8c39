//! The vocabulary every Ensemble crate speaks.
//!
//! Protocol code is *sans-IO*: a node or a client is a deterministic state machine that takes
//! [`NodeEvent`]s / [`ClientEvent`]s and pushes [`NodeEffect`]s / [`ClientEffect`]s. Time is handed
//! in as [`Time`]; randomness, where a protocol needs any, is a seeded generator it owns. The
//! simulator (`ensemble-sim`) and the real runtime (`ensemble-net`) are the only places that turn
//! effects into sockets, threads, timers and database connections.

pub mod process;
pub mod request;
pub mod time;
pub mod topology;
pub mod update;
pub mod value;

pub use process::*;
pub use request::*;
pub use time::Time;
pub use update::{ChangeKind, RowChange, StateUpdate};
pub use value::{Row, Rows, Value};

use serde::{Deserialize, Serialize};

/// Index of a scale-out instance (an application instance with its own, independent DBMS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InstanceId(pub u32);

impl std::fmt::Display for InstanceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "i{}", self.0)
    }
}

/// A client session. Unique within one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClientId(pub u64);

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}", self.0)
    }
}

/// Names one piece of storage work a node asked for, so its completion finds its way back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorkId(pub u64);

/// Names a timer a process set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TimerId(pub u64);
