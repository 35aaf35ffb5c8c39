//! The vocabulary every Ensemble crate speaks, whatever the protocol.
//!
//! Protocol code is *sans-IO*: a [`Process`] or a [`Client`] is a deterministic state machine that
//! takes events and pushes effects. Time is handed in as [`Time`]; randomness, where a protocol
//! needs any, is a seeded generator it owns. The simulator (`ensemble-sim`) and the real runtime
//! (`ensemble-net`) are the only places that turn effects into sockets, threads, timers and
//! storage work. A protocol names its own types once, in a [`Protocol`] (its messages, its storage
//! jobs and their results, the evidence its replies carry for the checker); everything here is
//! generic over that, and nothing here knows a token, a partition plan or a certification.
//!
//! Where a process runs is a [`Deployment`]: machines (site, cores), processes placed on them,
//! groups of processes that replicate the same data.

pub mod deployment;
pub mod process;
pub mod request;
pub mod time;
pub mod topology;
pub mod value;

pub use deployment::{Deployment, DeploymentError, Group, Machine, Placement};
pub use process::*;
pub use request::*;
pub use time::Time;
pub use value::{Row, Rows, Value};

use serde::{Deserialize, Serialize};

/// A protocol participant: a replica, a coordinator, a token-ring instance. Unique within a run;
/// the drivers index dense vectors by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProcessId(pub u32);

impl std::fmt::Display for ProcessId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "p{}", self.0)
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

/// Names one piece of storage work a process asked for, so its completion finds its way back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorkId(pub u64);

/// Names a timer a process or client set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TimerId(pub u64);
