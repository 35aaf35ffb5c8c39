//! The one trait a protocol implements to be run, measured and checked by `ensemble bench` and
//! `ensemble figure`, in the simulator and as real processes alike.
//!
//! The harness owns everything that is the same for every protocol: the clients' windows and
//! think times, the simulator's slices, the real runtime's node processes, latency histograms,
//! result files, tables, history files. A [`Harness`] says what is the protocol's own: which
//! processes to deploy and how to build each (with its storage), which clients drive it, how a
//! completion is classified (latency class, abort cause, phases), and how a run is checked.

use crate::experiment::Experiment;
use ensemble_core::{AbortCause, Client, Completion, Deployment, Process, ProcessId, Protocol, Storage};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How the harness files a completion.
#[derive(Clone, Debug, PartialEq)]
pub struct Classified {
    /// The latency class, in the protocol's words (local/global; read-only/update; ...).
    pub class: &'static str,
    /// Set when the transaction aborted.
    pub abort: Option<AbortCause>,
    /// Per-phase latency (execution, termination), where the protocol has phases.
    pub phases: Vec<(&'static str, Duration)>,
}

/// A run's verdict: what the protocol's checks said.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    pub passed: bool,
    /// One line per check, the first line of each saying what was checked and its verdict.
    pub summary: String,
}

/// Opens a storage for one worker of a real process (each worker thread owns one).
pub type StorageFactory<S> = Arc<dyn Fn(usize) -> S + Send + Sync>;

/// What is left of a run for the checker: every completion the clients saw, and each process's
/// storage (by process id; `None` for a process without one).
pub struct RunOutput<'a, H: Harness + ?Sized> {
    pub history: &'a [Completion<<H::P as Protocol>::Evidence>],
    pub storages: Vec<Option<H::S>>,
    /// Failures processes reported (`Process::failure`), as `p3: why`.
    pub failures: Vec<String>,
}

/// A protocol as the harness sees it. Implement it, add the value to the registry in
/// `crate::systems`, and `ensemble bench --system NAME` runs it everywhere.
pub trait Harness: Sync {
    type P: Protocol;
    type S: Storage<Job = <Self::P as Protocol>::Job, Result = <Self::P as Protocol>::JobResult> + Send + 'static;

    /// The names `--system` accepts for this harness.
    fn names(&self) -> &'static [&'static str];

    /// Checks what can be checked before a run; `Ok` also means `deployment` and `process`
    /// will not fail for this experiment.
    fn validate(&self, exp: &Experiment) -> Result<(), String>;

    /// Which processes run where, and in which groups.
    fn deployment(&self, exp: &Experiment) -> Deployment;

    /// Builds process `id` (of the deployment).
    fn process(&self, exp: &Experiment, id: ProcessId) -> anyhow::Result<Box<dyn Process<Self::P>>>;

    /// Process `id`'s storage in the simulator, loaded with its initial data (`None`: it keeps
    /// its data in memory).
    fn sim_storage(&self, exp: &Experiment, id: ProcessId) -> anyhow::Result<Option<Self::S>>;

    /// Process `id`'s storage in a real node: created and loaded under `dir` once, then opened
    /// by each worker through the returned factory.
    fn real_storage(&self, exp: &Experiment, id: ProcessId, dir: &Path) -> anyhow::Result<Option<StorageFactory<Self::S>>>;

    /// Process `id`'s storage in a real node that starts again over the databases an earlier
    /// node of the same run made and left (`ensemble node --resume`): nothing is created or
    /// loaded. Only a protocol whose nodes rebuild what they need from their databases can; by
    /// default a system refuses, saying why.
    fn resume_storage(&self, exp: &Experiment, _id: ProcessId, _dir: &Path) -> anyhow::Result<Option<StorageFactory<Self::S>>> {
        anyhow::bail!(
            "{} nodes keep protocol state in memory that their databases do not hold, so one cannot start again over its databases; of the systems here only 2pc's nodes recover from theirs",
            exp.system
        )
    }

    /// Whether a real run may kill this system's nodes and start them again over their
    /// databases ([`Self::resume_storage`]; `Experiment::restarts`): Err says why not.
    fn restartable(&self, exp: &Experiment) -> Result<(), String> {
        Err(format!("{} nodes cannot start again over what a killed one left; of the systems here only 2pc's nodes recover from their databases", exp.system))
    }

    /// Which of process `id`'s storage jobs a real node runs on a serial lane of their own,
    /// batched ([`ensemble_core::SerialLane`]); `None` (the default): none.
    fn serial_lane(&self, _exp: &Experiment, _id: ProcessId) -> anyhow::Result<Option<ensemble_core::SerialLane<<Self::P as Protocol>::Job>>> {
        Ok(None)
    }

    /// Storage workers (database connections) per process of a real node, besides a serial
    /// lane's; by default `Experiment::storage_workers`.
    fn storage_workers(&self, exp: &Experiment) -> usize {
        exp.storage_workers as usize
    }

    /// After a real run: process `id`'s storage as its node left it under `dir`, for the check.
    fn reopen_storage(&self, exp: &Experiment, id: ProcessId, dir: &Path) -> anyhow::Result<Option<Self::S>>;

    /// Client `c` of the experiment and the site it sits at. It must stop issuing at `stop_at`.
    fn client(
        &self,
        exp: &Experiment,
        c: u32,
        stop_at: ensemble_core::Time,
    ) -> (Box<dyn Client<<Self::P as Protocol>::Evidence>>, usize);

    fn classify(&self, completion: &Completion<<Self::P as Protocol>::Evidence>) -> Classified;

    /// The latency classes a table shows as columns, in order.
    fn table_classes(&self) -> &'static [&'static str];

    /// Checks a finished run.
    fn check(&self, exp: &Experiment, run: RunOutput<'_, Self>) -> anyhow::Result<Verdict>;

    /// The run's history in the history checker's form, when the protocol records one (what each
    /// committed transaction read, with the writer of each version, and wrote; each replica's
    /// install order). `None` when it does not.
    fn history(&self, exp: &Experiment, run: &RunOutput<'_, Self>) -> anyhow::Result<Option<ensemble_history::History>>;
}
