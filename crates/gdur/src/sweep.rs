//! Seeded fault runs of the G-DUR systems (issue 13, item 6): the `ensemble sweep --primitive
//! p-store` runs, ≥ 10^4 per system, each checked for serializability, replica agreement, lost
//! commits and progress after the faults heal.
//!
//! What [`run`] is, for seed `s` (each knob from its own bits of `s`):
//! * 2 or 3 groups of 3, group `g` at its own site of the p-store topology (50 ms ± 5 ms between
//!   sites, 10 Mb/s); each partition in one group, or (every fourth seed with 3 groups) in two,
//!   or in all for `p-store-full`;
//! * a small, contended key space: TPC-B with 4 branches per group (global share 0.3, a fifth of
//!   the transactions read-only), or YCSB-A over 20 objects per partition (half read-only, every
//!   transaction global);
//! * one closed-loop client per process, 50 ms think time, issuing until 12 s;
//! * faults until 8 s, then healed: 10 message rules (drops, duplicates, delays, reordering;
//!   probability up to 0.3, up to 60 ms extra) and a partition, all between replicas, and a
//!   crash with restart of one member per group (a minority), losing its volatile state on
//!   half the seeds (the rebuilt process recovers from its [`Durable`]: store, termination queue
//!   and votes, multicast logs), a pause on the others; and two stalls of any replicas, up to
//!   2 s each (what reaches a stalled replica waits for it, `ensemble_sim::Stall`);
//! * then the run goes on until every process is quiescent (every delivered transaction decided
//!   and applied everywhere, every submitted one answered) or 60 s.
//!
//! Clients talk to their proxies over reliable links (a client sits by its proxy, as P-Store's
//! did): a lost request would stall a closed-loop client without telling anything about the
//! protocol. A client whose proxy crashed losing state never hears back; the transactions that
//! proxy submitted still terminate, and the checker takes them from the replicas' install logs.

use crate::check::{check, Checked};
use crate::protocols::realization;
use crate::{Costs, Durable, Evidence, GDur, Installed, Layout, Replica, Setup, Timing};
use ensemble_app::{ClientCtx, ClosedLoopClient, InstanceId, ThinkTime};
use ensemble_core::topology::Topology;
use ensemble_core::{ClientId, Completion, CompletionResult, Deployment, Group, ProcessId, Storage, Time};
use ensemble_group::multicast::Directory;
use ensemble_group::GroupId;
use ensemble_kv::workload::{KvKind, KvWorkloadSpec, Placement};
use ensemble_sim::{FaultPlan, Links, Simulation, Window};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// A process's storage in a fault run: what survives its crashes. The installs the check reads
/// come from it too, not from storage jobs (which a crash loses while queued).
pub struct Slot {
    pub durable: Rc<RefCell<Durable>>,
}

impl Storage for Slot {
    type Job = Installed;
    type Result = ();
    fn run(&mut self, _job: &Installed) {}
}

const GROUP_SIZE: u32 = 3;
const HEAL: Duration = Duration::from_secs(8);
const CLIENTS_STOP: Duration = Duration::from_secs(12);
const LIMIT: Duration = Duration::from_secs(60);

/// What one fault run found.
pub struct FaultRun {
    pub checked: Checked,
    /// Every process quiescent by the limit.
    pub settled: bool,
    /// Transactions committed that were issued after the heal.
    pub committed_after_heal: usize,
    pub refusals: Vec<String>,
    pub ended: Time,
    /// What the seed chose, for the report.
    pub scenario: String,
    /// Replicas whose queue was not empty at the end, and what its head waited for.
    pub stuck: Vec<String>,
    /// Events that reached a stalled replica and waited for the stall's end.
    pub held_in_stalls: u64,
}

impl FaultRun {
    pub fn ok(&self) -> bool {
        self.checked.passed() && self.settled && self.committed_after_heal > 0 && self.refusals.is_empty()
    }
}

impl std::fmt::Display for FaultRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}", self.scenario)?;
        write!(f, "{}", self.checked.summary("run"))?;
        if !self.settled {
            write!(f, "\nnot quiescent by {:?}", self.ended.as_duration())?;
            for s in &self.stuck {
                write!(f, "\n  {s}")?;
            }
        }
        if self.committed_after_heal == 0 {
            write!(f, "\nno progress: nothing issued after the heal committed")?;
        }
        for r in self.refusals.iter().take(5) {
            write!(f, "\nrefused: {r}")?;
        }
        Ok(())
    }
}

/// The fault run of `system` for `seed`.
pub fn run(system: &str, seed: u64) -> FaultRun {
    let groups = 2 + ((seed >> 2) & 1) as u32;
    let lose_state = seed & 1 == 1;
    let ycsb = (seed >> 1) & 1 == 1;
    let full = system == "p-store-full";
    let factor = if full { groups } else if groups == 3 && (seed >> 3) & 1 == 1 { 2 } else { 1 };
    let spec = if ycsb {
        KvWorkloadSpec { scale: 20.0 / 100_000.0, read_only: 0.5, ..KvWorkloadSpec::preset(KvKind::YcsbA) }
    } else {
        KvWorkloadSpec { scale: 4.0 / 3600.0 * 0.999, global: 0.3, read_only: 0.2, ..KvWorkloadSpec::preset(KvKind::Tpcb) }
    };
    let scenario = format!(
        "seed {seed}: {system}, {groups} groups of {GROUP_SIZE}, each partition in {factor}, {}, crashes {}",
        if ycsb { "YCSB-A over 20 objects per partition" } else { "TPC-B with 4 branches per group" },
        if lose_state { "losing volatile state" } else { "pausing" }
    );
    let space = Arc::new(spec.key_space(groups).expect("a valid key space"));
    let placement = Placement::spread(groups, groups, factor).expect("a valid placement");
    let n = groups * GROUP_SIZE;
    let directory = Directory::new((0..groups).map(|g| (GroupId(g), (0..GROUP_SIZE).map(|m| ProcessId(g * GROUP_SIZE + m)).collect())));
    let replicas = (0..groups).map(|p| placement.groups_of(p).iter().map(|&g| GroupId(g)).collect()).collect();
    let partition_space = space.clone();
    let layout =
        Arc::new(Layout::new(Arc::new(move |k| partition_space.partition(k).unwrap_or(u32::MAX)), replicas, directory).expect("a valid layout"));
    let program_space = space.clone();
    let topology = Topology::pstore(groups as usize);
    let setup = Setup {
        realization: realization(system, 100).expect("a G-DUR system"),
        layout: layout.clone(),
        programs: Arc::new(move |txn, params| ensemble_kv::workload::program(txn, params, &program_space)),
        initial: space.initial_value(),
        timing: Timing::data_centre_groups(),
        costs: Costs { read: topology.cpu.read_time(), certify_key: topology.cpu.certify_time(1), apply_write: topology.cpu.apply_time(1) },
        sequencer: GroupId(0),
        seed,
    };
    let sites: Vec<usize> = (0..n).map(|p| (p / GROUP_SIZE) as usize).collect();
    let mut deployment = Deployment::one_per_machine(&sites, topology.cpu.cores, "replica");
    for g in 0..groups {
        deployment.groups.push(Group { name: format!("g{g}"), members: layout.directory().members(GroupId(g)).to_vec() });
    }
    let mut sim: Simulation<GDur, Slot> = Simulation::new(topology, deployment, seed).expect("a valid deployment");
    for p in 0..n {
        let durable = Durable::new(setup.initial);
        let replica = Replica::new(setup.clone(), ProcessId(p), durable.clone()).expect("a member");
        sim.add_process(Box::new(replica), Some(Slot { durable })).expect("a new process");
    }
    {
        let setup = setup.clone();
        sim.set_recovery(Box::new(move |id, slot: Option<&mut Slot>| {
            let slot = slot.expect("every replica has a slot");
            Box::new(Replica::new(setup.clone(), id, slot.durable.clone()).expect("a member"))
        }));
    }
    let stop = Time::ZERO + CLIENTS_STOP;
    for c in 0..n {
        let proxy = ProcessId(c);
        let home = placement.partitions_of_group(c / GROUP_SIZE)[0];
        let ctx = ClientCtx { client_index: u64::from(c), home: InstanceId::of(proxy), instances: n };
        let think = ThinkTime::Exponential { mean: Duration::from_millis(50) };
        let client = ClosedLoopClient::<Evidence>::new(ClientId(u64::from(c)), ctx, spec.client(&space, home), seed, think).stop_at(stop);
        sim.add_client(Box::new(client), sites[c as usize]).expect("a client");
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6475_7266_6175_6c74);
    *sim.faults_mut() = faults(&mut rng, groups, lose_state);

    let mut completions: Vec<Completion<Evidence>> = Vec::new();
    let mut record = |_: Time, c: &Completion<Evidence>| completions.push(c.clone());
    sim.run_until(stop, &mut record);
    // After the clients stop, look for quiescence every simulated second.
    let mut settled = false;
    while sim.now() < Time::ZERO + LIMIT {
        let next = sim.now() + Duration::from_secs(1);
        sim.run_until(next, &mut record);
        if sim.quiescent() {
            settled = true;
            break;
        }
    }
    let ended = sim.now();
    let stuck: Vec<String> = (0..n)
        .filter_map(|p| {
            let slot = sim.storage(ProcessId(p))?;
            let d = slot.durable.borrow();
            let head = d.termination.head().or_else(|| {
                let first = d.prepared.keys().next()?;
                Some(format!("{} terms voted yes under 2PC and undecided, the first {first}", d.prepared.len()))
            })?;
            Some(format!("p{p}: {head}"))
        })
        .collect();
    let heal = Time::ZERO + HEAL;
    let committed_after_heal = completions
        .iter()
        .filter(|c| c.issued >= heal && matches!(&c.result, CompletionResult::Done(d) if d.outcome.committed()))
        .count();
    let failures: Vec<String> = sim.process_reports().into_iter().filter_map(|(id, _, f)| f.map(|f| format!("{id}: {f}"))).collect();
    let refusals: Vec<String> = sim.stats().processes.iter().filter_map(|p| p.first_refusal.clone()).collect();
    let held_in_stalls = sim.stats().events_held_in_stalls;
    // The installs as each replica's durable state has them: its install log is written by
    // storage jobs, and a crash loses the jobs still queued on its cores.
    let logs: Vec<Option<Vec<Installed>>> = sim
        .into_storages()
        .into_iter()
        .enumerate()
        .map(|(p, slot)| slot.map(|slot| installs(&slot.durable.borrow(), &layout, ProcessId(p as u32))))
        .collect();
    let checked = check(&completions, &logs, &move |p, k| layout.replicates(p, k), failures);
    FaultRun { checked, settled, committed_after_heal, refusals, ended, scenario, stuck, held_in_stalls }
}

/// What replica `p` installed, in order, from the transactions its durable state committed.
fn installs(d: &Durable, layout: &Layout, p: ProcessId) -> Vec<Installed> {
    d.committed
        .iter()
        .enumerate()
        .map(|(i, t)| Installed {
            stamp: i as u64 + 1,
            txn: t.id,
            reads: t.reads.clone(),
            writes: t.writes.iter().filter(|(k, _)| layout.replicates(p, *k)).copied().collect(),
        })
        .collect()
}

/// Message rules and a partition between replicas, one crash with restart per group, and two
/// stalls.
fn faults(rng: &mut ChaCha8Rng, groups: u32, lose_state: bool) -> FaultPlan {
    let n = groups * GROUP_SIZE;
    let horizon = HEAL.as_nanos() as u64;
    let mut plan = FaultPlan::new();
    let window = |rng: &mut ChaCha8Rng| {
        let start = rng.random_range(0..horizon);
        let len = rng.random_range(1..=horizon / 4);
        Window::new(Time(start), Time((start + len).min(horizon)))
    };
    // "All links" is every pair of replicas: a rule over `Links::All` would touch the clients'
    // links too.
    let pairs = |rng: &mut ChaCha8Rng| -> Vec<Links> {
        if rng.random_bool(0.3) {
            (0..n).flat_map(|a| (a + 1..n).map(move |b| Links::Between { a: ProcessId(a).into(), b: ProcessId(b).into() })).collect()
        } else {
            let a = ProcessId(rng.random_range(0..n));
            let b = ProcessId(rng.random_range(0..n));
            vec![Links::Between { a: a.into(), b: b.into() }]
        }
    };
    for _ in 0..10 {
        let (w, links, kind) = (window(rng), pairs(rng), rng.random_range(0..4u8));
        let p = rng.random_range(0.0..=0.3);
        let extra = Duration::from_nanos(rng.random_range(0..=60_000_000));
        for l in links {
            match kind {
                0 => plan.drop_messages(w, l, p),
                1 => plan.duplicate_messages(w, l, p),
                2 => plan.delay_messages(w, l, extra),
                _ => plan.reorder_messages(w, l, p, Duration::from_millis(60)),
            };
        }
    }
    let w = window(rng);
    let (a, b): (Vec<ProcessId>, Vec<ProcessId>) = (0..n).map(ProcessId).partition(|_| rng.random_bool(0.5));
    plan.partition(w, a, b);
    for g in 0..groups {
        let p = ProcessId(g * GROUP_SIZE + rng.random_range(0..GROUP_SIZE));
        let w = window(rng);
        let restart = Some(Time(w.end.0.max(w.start.0 + 1)));
        if lose_state {
            plan.crash_losing_state(p, w.start, restart);
        } else {
            plan.crash(p, w.start, restart);
        }
    }
    // Drawn last, so that the faults above are the ones each seed drew before stalls existed.
    for _ in 0..2 {
        let p = ProcessId(rng.random_range(0..n));
        plan.stall(p, window(rng));
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_runs_of_every_system_pass_on_a_few_seeds() {
        for system in crate::protocols::SYSTEMS {
            let mut held = 0;
            for seed in [0, 1, 2, 3, 5, 12] {
                let r = run(system, seed);
                assert!(r.ok(), "{system}: {r}");
                held += r.held_in_stalls;
            }
            assert!(held > 0, "{system}: no stall held anything back");
        }
    }
}
