//! A primary-backup transactional key-value store: the smallest protocol that runs in Ensemble's
//! simulator and real runtime, is measured by `ensemble bench` and is checked by the history
//! checker. It is written against the generic contracts (`ensemble-core`'s `Protocol`,
//! `Process`, `Storage`; `ensemble-app`'s client and workloads; `ensemble-bench`'s `Harness`) and
//! is here to show that a protocol plugs in without touching the drivers or the harness.
//!
//! * [`protocol`]: process 0 is the [`Primary`]; it runs `rw` transactions one at a time in
//!   arrival order, sends each write to every [`Backup`], and replies once every replica has
//!   installed it. A backup installs in the primary's order, acks, and redirects clients to the
//!   primary.
//! * [`storage`]: each replica's [`KvStorage`] holds every version of every key in install order.
//! * The workload is the shared key-value one, `ensemble_app::apps::kv::KvWorkload` (`--workload
//!   kv`), driven by the generic `ensemble_app::ClosedLoopClient`; clients talk to the primary.
//! * [`mod@check`]: the run's history for `ensemble-history` (reads with their writers, writes,
//!   each replica's install log) and the serializability verdict.
//! * `harness` (feature `harness`): `PrimaryBackupHarness`, the `ensemble_bench::Harness`
//!   implementation, in terms of the functions below.

pub mod check;
pub mod protocol;
mod request;
pub mod storage;

#[cfg(feature = "harness")]
mod harness;
#[cfg(feature = "harness")]
pub use harness::PrimaryBackupHarness;

pub use check::{check, history, Checked};
pub use protocol::{Backup, Evidence, Msg, Primary, PrimaryBackup, PRIMARY};
pub use request::RW;
pub use storage::{Installed, KvJob, KvLog, KvStorage};

use ensemble_app::{ClientCtx, ClosedLoopClient, InstanceId, ThinkTime, Workload};
use ensemble_core::topology::{Cpu, Topology};
use ensemble_core::{ClientId, Deployment, Group, Process, ProcessId, Time};
use std::time::Duration;

/// A transaction id, assigned by the primary from 1 in commit order.
pub type TxnId = u64;
pub type Key = i64;

/// The name of the group of all replicas in the deployment.
pub const GROUP: &str = "replicas";

/// One machine per replica, replica `i` at `topology.instance_site(i)` with the topology's cores:
/// process 0 of kind "primary", the others "backup", all in group [`GROUP`].
pub fn deployment(topology: &Topology, replicas: u32) -> Deployment {
    let sites: Vec<usize> = (0..replicas).map(|i| topology.instance_site(i)).collect();
    let mut d = Deployment::one_per_machine(&sites, topology.cpu.cores, "backup");
    if let Some(p) = d.processes.first_mut() {
        p.kind = "primary".into();
    }
    d.groups.push(Group { name: GROUP.into(), members: (0..replicas).map(ProcessId).collect() });
    d
}

/// What installing one version costs a simulated core: one row change.
pub fn install_cost(cpu: &Cpu) -> Duration {
    cpu.apply_time(1)
}

/// Process `id` of `replicas`: the primary for `PRIMARY`, a backup otherwise.
pub fn process(id: ProcessId, replicas: u32, cpu: &Cpu) -> Box<dyn Process<PrimaryBackup>> {
    if id == PRIMARY {
        Box::new(Primary::new(replicas, install_cost(cpu)))
    } else {
        Box::new(Backup::new(id, install_cost(cpu)))
    }
}

/// Client `c`, whose home is the primary, running `workload` until `stop_at`.
pub fn client(c: u32, replicas: u32, workload: Box<dyn Workload>, seed: u64, think: ThinkTime, stop_at: Time) -> ClosedLoopClient<Evidence> {
    let ctx = ClientCtx { client_index: u64::from(c), home: InstanceId::of(PRIMARY), instances: replicas };
    ClosedLoopClient::new(ClientId(u64::from(c)), ctx, workload, seed, think).stop_at(stop_at)
}
