//! Primary-backup as an `ensemble bench` system (`--system primary-backup --workload kv`).
//!
//! Every part is one of the crate's functions applied to the experiment: the deployment, the
//! processes, in-memory storages, clients homed at the primary, and the history check.

use crate::{check, history, Evidence, KvLog, KvStorage, PrimaryBackup};
use ensemble_bench::{Classified, Experiment, Harness, RunOutput, StorageFactory, Verdict, WorkloadSpec};
use ensemble_core::{Client, Completion, CompletionResult, Deployment, Process, ProcessId, Time};
use std::path::Path;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, Default)]
pub struct PrimaryBackupHarness;

/// Each process's install log, where its storage is at hand.
fn logs(run: &RunOutput<'_, PrimaryBackupHarness>) -> Vec<Option<KvLog>> {
    run.storages.iter().map(|s| s.as_ref().map(KvStorage::snapshot)).collect()
}

impl Harness for PrimaryBackupHarness {
    type P = PrimaryBackup;
    type S = KvStorage;

    fn names(&self) -> &'static [&'static str] {
        &["primary-backup"]
    }

    fn validate(&self, exp: &Experiment) -> Result<(), String> {
        exp.validate()?; // among others: at least one instance (the primary)
        match exp.workload {
            WorkloadSpec::Kv { .. } => Ok(()),
            ref other => Err(format!("primary-backup serves the key-value workload `kv`, not `{}`", other.app())),
        }
    }

    fn deployment(&self, exp: &Experiment) -> Deployment {
        crate::deployment(&exp.topology, exp.instances)
    }

    fn process(&self, exp: &Experiment, id: ProcessId) -> anyhow::Result<Box<dyn Process<PrimaryBackup>>> {
        anyhow::ensure!(id.0 < exp.instances, "{id} is not one of the {} replicas", exp.instances);
        Ok(crate::process(id, exp.instances, &exp.topology.cpu))
    }

    fn sim_storage(&self, _exp: &Experiment, _id: ProcessId) -> anyhow::Result<Option<KvStorage>> {
        Ok(Some(KvStorage::new()))
    }

    /// In memory, one log per process that all its workers share; `dir` is not used.
    fn real_storage(&self, _exp: &Experiment, _id: ProcessId, _dir: &Path) -> anyhow::Result<Option<StorageFactory<KvStorage>>> {
        let storage = KvStorage::new();
        Ok(Some(Arc::new(move |_worker| storage.clone())))
    }

    /// The logs died with the nodes, so a real run is checked on its history alone (SER, without
    /// replica agreement); the verdict says so.
    fn reopen_storage(&self, _exp: &Experiment, _id: ProcessId, _dir: &Path) -> anyhow::Result<Option<KvStorage>> {
        Ok(None)
    }

    fn client(&self, exp: &Experiment, c: u32, stop_at: Time) -> (Box<dyn Client<Evidence>>, usize) {
        let site = exp.client_sites[c as usize % exp.client_sites.len()];
        let think = exp.think_time();
        let client = crate::client(c, exp.instances, exp.workload.client(exp.scale), exp.seed, think, stop_at);
        (Box::new(client), site)
    }

    /// "read-only" for a transaction that wrote nothing, else "update": every `rw` writes.
    fn classify(&self, c: &Completion<Evidence>) -> Classified {
        let CompletionResult::Done(done) = &c.result else { return Classified { class: "error", abort: None, phases: Vec::new() } };
        let abort = done.outcome.abort_cause();
        Classified { class: "update", abort, phases: Vec::new() }
    }

    fn table_classes(&self) -> &'static [&'static str] {
        &["update"]
    }

    fn check(&self, _exp: &Experiment, run: RunOutput<'_, Self>) -> anyhow::Result<Verdict> {
        let checked = check(run.history, &logs(&run), run.failures.clone());
        Ok(Verdict { passed: checked.passed(), summary: checked.summary() })
    }

    fn history(&self, _exp: &Experiment, run: &RunOutput<'_, Self>) -> anyhow::Result<Option<ensemble_history::History>> {
        Ok(Some(history(run.history, &logs(run))))
    }
}
