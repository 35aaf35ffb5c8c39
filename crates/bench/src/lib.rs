//! The benchmark harness, one for every protocol.
//!
//! An [`Experiment`] names everything a run depends on: the system, workload, instances,
//! topology, clients and where they sit, windows, seed. A protocol plugs in through one trait,
//! [`Harness`]: the processes to deploy, the clients, how completions are classified, how a run is
//! checked. [`sim_run`] runs any harness in the simulator, [`real_run`] as node processes over TCP;
//! both measure throughput and latency per class from HDR histograms, check the run, and return a
//! [`RunResult`] that is written as JSON beside its full configuration and printed as a table.

pub mod databases;
pub mod experiment;
pub mod fault_runs;
pub mod figures;
pub mod harness;
pub mod metrics;
pub mod plots;
pub mod report;
pub mod sim_run;
pub mod systems;

pub use experiment::{Backend, BackendKind, DurSettings, Experiment, NodeRestart, Runtime, System, WorkloadSpec};
pub use harness::{Classified, Harness, RunOutput, StorageFactory, Verdict};
pub use metrics::{ClassSummary, Metrics, Summary, INTERACTION};
pub use report::{print_table, write_json, RunResult};

/// The last step of every run, simulated or real: write the history file if asked, check.
pub fn finish_run<H: Harness>(h: &H, exp: &Experiment, run: RunOutput<'_, H>, result: &mut RunResult) -> anyhow::Result<()> {
    if let Some(path) = &exp.history_file {
        match h.history(exp, &run)? {
            Some(history) => history.save(path)?,
            None => anyhow::bail!("system `{}` does not record histories, so --history has nothing to write", exp.system),
        }
    }
    if exp.check {
        let verdict = h.check(exp, run)?;
        result.check = Some(verdict.summary);
        result.check_passed = Some(verdict.passed);
    }
    Ok(())
}

/// Runs a Conveyor Belt experiment in the simulator: the figures' default runner (the `ensemble`
/// binary hands in one that knows every system and the real runtime).
pub fn run(exp: &Experiment, progress: bool) -> anyhow::Result<RunResult> {
    sim_run::run_sim(&systems::belt::BeltHarness::new(), exp, progress)
}
