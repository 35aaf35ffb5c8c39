//! The application model.
//!
//! An [`Application`] is a schema plus named transaction types. Each [`TxnType`] declares its
//! parameters and every SQL statement it may run, up front, so that the analyzer can read them
//! without running anything; its Rust body can run only those statements (through [`Db`]).
//! A [`PartitionPlan`] says, for each transaction type, its class and partitioning parameters,
//! and for each table whether every instance holds all of it or only its partition.

pub mod apps;
pub mod model;
pub mod plan;
pub mod workload;

pub use model::*;
pub use plan::{PartitionPlan, PlanClass, PlanError, Route, TablePlacement, TxnPlan};
pub use workload::{ClientCtx, InteractionProgress, Workload};
