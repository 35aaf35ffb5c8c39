//! The benchmark harness.
//!
//! An [`Experiment`] names everything a run depends on: application, system (Ensemble with a
//! partition plan, or a baseline), instances, topology, clients and where they sit, windows, seed.
//! [`run`] executes it in the simulator or as real processes, measures throughput and latency
//! per operation class from HDR histograms, checks the run for serializability, and returns a
//! [`RunResult`] that is written as JSON beside its full configuration and printed as a table.

pub mod experiment;
pub mod figures;
pub mod metrics;
pub mod report;
pub mod sim_run;

pub use experiment::{Experiment, Runtime, System, WorkloadSpec};
pub use metrics::{ClassSummary, Metrics, Summary, INTERACTION};
pub use report::{print_table, write_json, RunResult};

/// Runs an experiment where its `runtime` says.
pub fn run(exp: &Experiment, progress: bool) -> anyhow::Result<RunResult> {
    match exp.runtime {
        Runtime::Sim => sim_run::run_sim(exp, progress),
        Runtime::Real => anyhow::bail!("the real runtime is driven by the `ensemble` binary (it starts node processes); use `ensemble bench --real`"),
    }
}
