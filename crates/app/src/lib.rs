//! The application model.
//!
//! An [`Application`] is a schema plus named transaction types. Each [`TxnType`] declares its
//! parameters and every SQL statement it may run, up front, so that the analyzer can read them
//! without running anything; its Rust body can run only those statements (through [`Db`]).
//! A [`PartitionPlan`] says, for each transaction type, its class and partitioning parameters,
//! and for each table whether every instance holds all of it or only its partition.

pub mod apps;
pub mod client;
pub mod model;
pub mod plan;
pub mod storage;
pub mod update;
pub mod workload;

pub use client::{ClosedLoopClient, ThinkTime};
pub use model::*;
pub use storage::{ExecRole, OpClass, Position, RowAccess, SnapshotStamp, StorageJob, StorageResult};
pub use update::{ChangeKind, RowChange, StateUpdate};
pub use plan::{PartitionPlan, PlanClass, PlanError, Route, TablePlacement, TxnPlan};
pub use workload::{ClientCtx, InteractionProgress, Workload};

/// Index of a scale-out instance (an application instance with its own, independent DBMS).
/// Instance `i` runs as process `i` of its deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct InstanceId(pub u32);

impl InstanceId {
    pub fn process(self) -> ensemble_core::ProcessId {
        ensemble_core::ProcessId(self.0)
    }
    pub fn of(p: ensemble_core::ProcessId) -> InstanceId {
        InstanceId(p.0)
    }
}

impl std::fmt::Display for InstanceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "i{}", self.0)
    }
}
