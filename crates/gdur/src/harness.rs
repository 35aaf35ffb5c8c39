//! The G-DUR protocols as `ensemble bench` systems: `p-store` (A_ge\*), `p-store-ge` (A_ge),
//! `p-store-gdur` (G-DUR's realization), `p-store-2pc` (the same with atomic commitment by 2PC)
//! and `p-store-full` (A_full), over the key-value
//! workloads (`tpcb`, `ycsb-a`, `ycsb-b`, `ycsb-c`).
//!
//! Deployment (P-Store §7.1): `groups` groups of `group_size` processes, group `g` on its own
//! site (`g mod sites`), one machine per process with the topology's cores. The key space is
//! split into one partition per group; partition `p` is replicated by groups `p .. p + r - 1`
//! (`replication` r; r = groups is full replication, which `p-store-full` always uses). Clients
//! (closed loop) are spread over the processes, each the proxy of its client's transactions;
//! a client's home partition is its proxy's group's own (TPC-B: "each client is placed in its
//! teller's group").
//!
//! Stores are in memory unless the run asks for durability (`--store-dir`, `dur.store_dir`):
//! then each process keeps its versions in its own SQLite file ([`store_path`]), simulated or
//! real. Only the store is durable: the rest of a replica's [`Durable`] (its queue, votes and
//! multicast logs) stays in memory, so a killed real node does not come back.

pub use crate::protocols::{realization, SYSTEMS};
use crate::{check, history, Class, Costs, Durable, Evidence, GDur, InstallLog, Layout, Replica, Setup, Timing};
use ensemble_bench::{Classified, Experiment, Harness, RunOutput, StorageFactory, Verdict, WorkloadSpec};
use ensemble_core::{Client, ClientId, Completion, CompletionResult, Deployment, Group, Process, ProcessId, Time};
use ensemble_group::multicast::Directory;
use ensemble_group::GroupId;
use ensemble_kv::store::SqliteStore;
use ensemble_kv::workload::{KeySpace, KvWorkloadSpec, Placement};
use std::path::Path;
use std::sync::Arc;

/// Where process `id` of the run labelled `label` keeps its versions under `--store-dir` (one
/// directory serves every run of a bench).
pub fn store_path(dir: &Path, label: &str, id: ProcessId) -> std::path::PathBuf {
    let label = if label.is_empty() { "run" } else { label };
    dir.join(format!("{label}-store-{}.sqlite", id.0))
}

/// One harness for every G-DUR system; the system name picks the realization.
#[derive(Clone, Copy, Debug, Default)]
pub struct GDurHarness;

fn kv_spec(exp: &Experiment) -> Result<&KvWorkloadSpec, String> {
    match &exp.workload {
        WorkloadSpec::KeyValue { spec } => Ok(spec),
        other => Err(format!("{} serves the key-value workloads (tpcb, ycsb-a, ycsb-b, ycsb-c), not `{}`", exp.system, other.app())),
    }
}

/// Everything a run derives from its experiment.
struct Derived {
    space: Arc<KeySpace>,
    placement: Placement,
    layout: Arc<Layout>,
    setup: Setup,
}

fn derive(exp: &Experiment) -> Result<Derived, String> {
    let d = &exp.dur;
    if d.groups == 0 || d.group_size == 0 {
        return Err(format!("dur.groups = {} and dur.group_size = {} must be at least 1", d.groups, d.group_size));
    }
    let spec = kv_spec(exp)?;
    let space = Arc::new(spec.key_space(d.groups).map_err(|e| e.to_string())?);
    let placement = match &d.placement {
        Some(text) => Placement::parse(text, d.groups).map_err(|e| format!("--placement: {e}"))?,
        // A_full is full replication whatever the replication factor says.
        None if exp.system == "p-store-full" => Placement::spread(d.groups, d.groups, d.groups).map_err(|e| e.to_string())?,
        None => Placement::spread(d.groups, d.groups, d.replication).map_err(|e| format!("--replication: {e}"))?,
    };
    if placement.partitions() != space.partitions() {
        return Err(format!(
            "the placement places {} partitions, the key space has {} (one per group)",
            placement.partitions(),
            space.partitions()
        ));
    }
    let directory = Directory::new((0..d.groups).map(|g| (GroupId(g), (0..d.group_size).map(|m| ProcessId(g * d.group_size + m)).collect())));
    let replicas = (0..placement.partitions()).map(|p| placement.groups_of(p).iter().map(|&g| GroupId(g)).collect()).collect();
    let partition_space = space.clone();
    let partition_of = Arc::new(move |k| partition_space.partition(k).unwrap_or(u32::MAX));
    let layout = Arc::new(Layout::new(partition_of, replicas, directory)?);
    let realization = realization(&exp.system, d.certifiers)?;
    if exp.system == "p-store-full" && !layout.full() {
        return Err("p-store-full is full replication: its --placement must place every partition in every group".into());
    }
    let program_space = space.clone();
    let cpu = &exp.topology.cpu;
    let setup = Setup {
        realization,
        layout: layout.clone(),
        programs: Arc::new(move |txn, params| ensemble_kv::workload::program(txn, params, &program_space)),
        initial: space.initial_value(),
        timing: Timing::data_centre_groups(),
        costs: Costs { read: cpu.read_time(), certify_key: cpu.certify_time(1), apply_write: cpu.apply_time(1) },
        sequencer: GroupId(0),
        seed: exp.seed,
    };
    Ok(Derived { space, placement, layout, setup })
}

impl Harness for GDurHarness {
    type P = GDur;
    type S = InstallLog;

    fn names(&self) -> &'static [&'static str] {
        &SYSTEMS
    }

    fn validate(&self, exp: &Experiment) -> Result<(), String> {
        exp.validate()?;
        derive(exp).map(|_| ())
    }

    fn deployment(&self, exp: &Experiment) -> Deployment {
        let d = &exp.dur;
        let sites: Vec<usize> = (0..d.groups * d.group_size).map(|p| (p / d.group_size) as usize % exp.topology.sites.len()).collect();
        let mut deployment = Deployment::one_per_machine(&sites, exp.topology.cpu.cores, "replica");
        for g in 0..d.groups {
            deployment.groups.push(Group { name: format!("g{g}"), members: (0..d.group_size).map(|m| ProcessId(g * d.group_size + m)).collect() });
        }
        deployment
    }

    fn process(&self, exp: &Experiment, id: ProcessId) -> anyhow::Result<Box<dyn Process<GDur>>> {
        let d = derive(exp).map_err(anyhow::Error::msg)?;
        let initial = d.setup.initial;
        let durable = match &exp.dur.store_dir {
            None => Durable::new(initial),
            Some(dir) => {
                // A store of an earlier run would hand this one versions nobody in it wrote.
                let path = store_path(dir, &exp.label, id);
                if path.exists() {
                    anyhow::bail!("--store-dir: {} exists, from an earlier run; remove it or choose another directory", path.display());
                }
                Durable::over(Box::new(SqliteStore::open(&path, initial)?))
            }
        };
        Ok(Box::new(Replica::new(d.setup, id, durable).map_err(anyhow::Error::msg)?))
    }

    fn sim_storage(&self, _exp: &Experiment, _id: ProcessId) -> anyhow::Result<Option<InstallLog>> {
        Ok(Some(InstallLog::new()))
    }

    /// Shared by the node's workers, and written to `dir/installs-<id>.jsonl` for the check.
    fn real_storage(&self, _exp: &Experiment, id: ProcessId, dir: &Path) -> anyhow::Result<Option<StorageFactory<InstallLog>>> {
        let path = dir.join(format!("installs-{}.jsonl", id.0));
        let log = InstallLog::to_file(&path).map_err(|e| anyhow::anyhow!("install log {}: {e}", path.display()))?;
        Ok(Some(Arc::new(move |_| log.clone())))
    }

    /// The install log a real node wrote, for the check's version order and replica agreement.
    fn reopen_storage(&self, _exp: &Experiment, id: ProcessId, dir: &Path) -> anyhow::Result<Option<InstallLog>> {
        let path = dir.join(format!("installs-{}.jsonl", id.0));
        if !path.exists() {
            return Ok(None);
        }
        InstallLog::read_file(&path).map(Some).map_err(anyhow::Error::msg)
    }

    fn client(&self, exp: &Experiment, c: u32, stop_at: Time) -> (Box<dyn Client<Evidence>>, usize) {
        let d = derive(exp).expect("validated before any client is built");
        let n = exp.dur.groups * exp.dur.group_size;
        let proxy = ProcessId(c % n);
        let group = proxy.0 / exp.dur.group_size;
        let home_partition = d.placement.partitions_of_group(group).first().copied().unwrap_or(group);
        let workload = kv_spec(exp).expect("validated").client(&d.space, home_partition);
        let ctx = ensemble_app::ClientCtx { client_index: u64::from(c), home: ensemble_app::InstanceId::of(proxy), instances: n };
        let client = ensemble_app::ClosedLoopClient::new(ClientId(u64::from(c)), ctx, workload, exp.seed, exp.think_time()).stop_at(stop_at);
        let site = (group as usize) % exp.topology.sites.len();
        (Box::new(client), site)
    }

    fn classify(&self, c: &Completion<Evidence>) -> Classified {
        let CompletionResult::Done(done) = &c.result else { return Classified { class: "error", abort: None, phases: Vec::new() } };
        let abort = done.outcome.abort_cause();
        let e = &done.evidence;
        let total = c.completed.saturating_sub(c.issued);
        let phases = vec![("execution", e.execution), ("termination", total.saturating_sub(e.execution))];
        Classified { class: e.class.name(), abort, phases }
    }

    fn table_classes(&self) -> &'static [&'static str] {
        &Class::NAMES
    }

    fn check(&self, exp: &Experiment, run: RunOutput<'_, Self>) -> anyhow::Result<Verdict> {
        let d = derive(exp).map_err(anyhow::Error::msg)?;
        let logs: Vec<Option<Vec<crate::Installed>>> = run.storages.iter().map(|s| s.as_ref().map(InstallLog::installed)).collect();
        let layout = d.layout.clone();
        let checked = check(run.history, &logs, &move |p, k| layout.replicates(p, k), run.failures.clone());
        Ok(Verdict { passed: checked.passed(), summary: checked.summary(&exp.system) })
    }

    fn history(&self, _exp: &Experiment, run: &RunOutput<'_, Self>) -> anyhow::Result<Option<ensemble_history::History>> {
        let logs: Vec<Option<Vec<crate::Installed>>> = run.storages.iter().map(|s| s.as_ref().map(InstallLog::installed)).collect();
        Ok(Some(history(run.history, &logs)))
    }
}
