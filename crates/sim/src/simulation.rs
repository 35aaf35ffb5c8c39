//! The simulator proper: processes, clients, the network, CPUs and the event loop.

use crate::faults::{Crash, DropCause, Endpoint, FaultPlan, Stall, Verdict};
use crate::queue::EventQueue;
use crate::stats::{ProcessStats, SimStats};
use ensemble_core::topology::{Topology, TopologyError};
use ensemble_core::{
    Client, ClientEffect, ClientEvent, ClientId, Completion, Deployment, DeploymentError, Effect, Event, Process, ProcessId,
    Protocol, Reply, Request, Storage, Time, TimerId, WorkId,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// Random stream numbers. Each purpose draws from its own ChaCha stream of the run seed, so that a
/// change in how often one purpose draws (a new fault rule, a new message) never shifts another.
const STREAM_NETWORK: u64 = 1;
const STREAM_FAULTS: u64 = 2;

/// Why a simulation could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error(transparent)]
    Deployment(#[from] DeploymentError),
    #[error("site {site} does not exist: topology `{topology}` has {sites} site(s)")]
    UnknownSite { site: usize, topology: String, sites: usize },
    #[error("{0} is not in the deployment")]
    NotDeployed(ProcessId),
    #[error("{0} was added twice")]
    DuplicateProcess(ProcessId),
    #[error("client {0} was added twice")]
    DuplicateClient(ClientId),
}

/// A process's id, its counters (`Process::counters`) and what `Process::failure` says.
pub type ProcessReport = (ProcessId, Vec<(&'static str, u64)>, Option<String>);

/// Builds a process anew after a crash that lost its volatile state, from what its storage kept.
pub type Recovery<P, S> = Box<dyn FnMut(ProcessId, Option<&mut S>) -> Box<dyn Process<P>>>;

/// Something scheduled to happen at an instant of virtual time.
enum SimEvent<P: Protocol> {
    /// A message or request reaches a process; it queues for a core. `duplicated` numbers the
    /// fault that delivered this message twice, on both deliveries: a refusal of either is
    /// explained by the copy, once ([`SimStats::refusals_of_duplicates`]).
    AtProcess { proc: u32, event: Event<P>, duplicated: Option<u64> },
    /// A core finishes a job. `epoch` is the process's crash epoch when the job started: a job
    /// from before a crash finds a newer epoch and is discarded.
    CpuDone { proc: u32, epoch: u32, service: Duration, job: Job<P> },
    /// A handler that charged CPU time is done with its core; its effects take effect now, or
    /// once every earlier handler's have (`ticket`: its place in the process's outbox).
    Release { proc: u32, epoch: u32, charge: Duration, ticket: u64, effects: Vec<Effect<P>> },
    /// `setting` numbers the `SetTimer` that scheduled this: the timer fires only if `id` is
    /// still live under that number, so a cancelled timer whose id was set again, a timer set
    /// again (the later setting wins), and a predecessor's timer after a crash that lost state
    /// all stay silent.
    ProcessTimer { proc: u32, setting: u64, id: TimerId },
    AtClient { client: u32, from: ProcessId, reply: Reply<P::Evidence> },
    ClientTimer { client: u32, id: TimerId },
    Crash { proc: u32, loses_state: bool },
    Restart { proc: u32 },
    StallBegins { proc: u32 },
    /// The process takes what waited for it during the stall; scheduled with the stall, so that
    /// it comes before anything else that reaches the process at that instant.
    StallEnds { proc: u32 },
}

impl<P: Protocol> SimEvent<P> {
    /// The process an event happens at, for the events a stall holds back.
    fn stalls_with(&self) -> Option<u32> {
        match self {
            SimEvent::AtProcess { proc, .. }
            | SimEvent::CpuDone { proc, .. }
            | SimEvent::Release { proc, .. }
            | SimEvent::ProcessTimer { proc, .. } => Some(*proc),
            _ => None,
        }
    }
}

impl<P: Protocol> std::fmt::Debug for SimEvent<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimEvent::AtProcess { proc, event, .. } => write!(f, "AtProcess {{ proc: {proc}, event: {event:?} }}"),
            SimEvent::CpuDone { proc, epoch, service, job } => {
                write!(f, "CpuDone {{ proc: {proc}, epoch: {epoch}, service: {service:?}, job: {job:?} }}")
            }
            SimEvent::Release { proc, charge, ticket, effects, .. } => {
                write!(f, "Release {{ proc: {proc}, charge: {charge:?}, ticket: {ticket}, effects: {effects:?} }}")
            }
            SimEvent::ProcessTimer { proc, id, .. } => write!(f, "ProcessTimer {{ proc: {proc}, id: {id:?} }}"),
            SimEvent::AtClient { client, from, reply } => write!(f, "AtClient {{ client: {client}, from: {from}, reply: {reply:?} }}"),
            SimEvent::ClientTimer { client, id } => write!(f, "ClientTimer {{ client: {client}, id: {id:?} }}"),
            SimEvent::Crash { proc, loses_state } => write!(f, "Crash {{ proc: {proc}, loses_state: {loses_state} }}"),
            SimEvent::Restart { proc } => write!(f, "Restart {{ proc: {proc} }}"),
            SimEvent::StallBegins { proc } => write!(f, "StallBegins {{ proc: {proc} }}"),
            SimEvent::StallEnds { proc } => write!(f, "StallEnds {{ proc: {proc} }}"),
        }
    }
}

/// Work for a core.
#[derive(Debug)]
enum Job<P: Protocol> {
    /// Protocol code handling a message or request: `on_event` runs when the job finishes.
    /// With the number of the duplication it came from, if any.
    Handle(Event<P>, Option<u64>),
    Storage { work: WorkId, job: P::Job, cost: Duration },
}

/// A set of cores with one FIFO queue: a machine's unpinned cores, or one pinned core.
#[derive(Default)]
struct Pool {
    cores: u32,
    busy: u32,
    /// Jobs waiting for a core, first come first served, with the process they belong to.
    waiting: VecDeque<u32>,
}

struct Proc<P: Protocol, S> {
    /// `None` while crashed with loss of state (and never rebuilt, if there is no recovery).
    process: Option<Box<dyn Process<P>>>,
    storage: Option<S>,
    site: usize,
    machine: usize,
    pool: usize,
    started: bool,
    /// Number of crash windows the process is in (windows may overlap); down while positive.
    down: u32,
    /// Number of stall windows the process is in; stalled while positive.
    stalled: u32,
    /// When the current stall began (overlapping windows: the first of them).
    stalled_since: Time,
    /// What reached the process while it was stalled, in the order it came, each with the
    /// instant it came; taken at the stall's end. Anything that comes while this is not empty
    /// waits behind it, so that a link stays FIFO across the stall's end.
    held: VecDeque<(Time, SimEvent<P>)>,
    epoch: u32,
    /// Jobs of this process running on a core of its pool.
    running: u32,
    /// Jobs of this process waiting in its pool, in order (the pool's queue names whose turn).
    queued: VecDeque<Job<P>>,
    /// Timers set and not yet fired or cancelled, each with the number of its latest setting.
    live_timers: BTreeMap<TimerId, u64>,
    /// `SetTimer`s applied so far, over all incarnations: numbers each setting.
    timers_set: u64,
    /// Arrival time of the latest message on the link to each process, by process id:
    /// TCP-like links never let a message overtake an earlier one.
    last_arrival: Vec<Time>,
    /// Effects of handlers that ran while an earlier one still charged its core, by ticket in
    /// the order the handlers ran (`None`: still charging). A process's effects take effect in
    /// the order its handlers produced them, as in the real runtime's one event loop per
    /// process: a handler that finished on another core never sends ahead of a charged one, so
    /// links stay FIFO in the order the protocol wrote its messages (a protocol numbering its
    /// messages per link, as the group layer does, would otherwise see reordering without any
    /// fault, and take it for loss).
    outbox: VecDeque<(u64, Option<Vec<Effect<P>>>)>,
    next_ticket: u64,
}

struct ClientSlot<E> {
    client: Box<dyn Client<E>>,
    id: ClientId,
    site: usize,
    started: bool,
    /// Latest arrival on the link from this client to each process, by process id.
    last_arrival_to: Vec<Time>,
    /// Latest arrival on the link from each process to this client, by process id.
    last_arrival_from: Vec<Time>,
}

/// A deterministic discrete-event simulation of the processes of protocol `P`, deployed as a
/// [`Deployment`] says, with storages of type `S`, and the clients driving them. See the crate
/// documentation for the model.
pub struct Simulation<P: Protocol, S: Storage<Job = P::Job, Result = P::JobResult>> {
    topology: Topology,
    deployment: Deployment,
    now: Time,
    queue: EventQueue<SimEvent<P>>,
    /// By process id.
    procs: Vec<Option<Proc<P, S>>>,
    pools: Vec<Pool>,
    clients: Vec<ClientSlot<P::Evidence>>,
    client_index: BTreeMap<ClientId, u32>,
    network_rng: ChaCha8Rng,
    /// Per site, when its outgoing inter-site link is free again (see `Topology::bandwidth_bps`).
    uplink_free: Vec<Time>,
    fault_rng: ChaCha8Rng,
    faults: FaultPlan,
    /// How many of `faults.crashes()` have been turned into events.
    crashes_scheduled: usize,
    /// How many of `faults.stalls()` have been.
    stalls_scheduled: usize,
    /// The duplications (numbered as `SimEvent::AtProcess` says) one of whose deliveries a
    /// process has refused.
    duplicates_refused: BTreeSet<u64>,
    recovery: Option<Recovery<P, S>>,
    stats: SimStats,
    /// Requests a client sent (by client and sequence number) whose completion it has not yet
    /// reported: what a run that stalls leaves unanswered.
    unanswered: BTreeSet<(ClientId, u64)>,
    /// Reused effect buffers: handlers push into them, the loop drains them.
    process_out: Vec<Effect<P>>,
    client_out: Vec<ClientEffect<P::Evidence>>,
    message_time: Duration,
    local_delay: Duration,
    trace: Option<Vec<(Time, String)>>,
}

impl<P: Protocol, S: Storage<Job = P::Job, Result = P::JobResult>> Simulation<P, S> {
    /// A simulation of `deployment` over `topology` whose every random draw derives from `seed`.
    pub fn new(topology: Topology, deployment: Deployment, seed: u64) -> Result<Self, SimError> {
        topology.validate()?;
        deployment.validate(topology.sites.len())?;
        let stream = |n| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(n);
            rng
        };
        // One pool per machine for its unpinned cores, then one per pinned core in use.
        let mut pools: Vec<Pool> = Vec::new();
        for (machine, m) in deployment.machines.iter().enumerate() {
            let pinned: BTreeSet<u32> =
                deployment.processes.iter().filter(|p| p.machine == machine).filter_map(|p| p.pinned).collect();
            pools.push(Pool { cores: m.cores - pinned.len() as u32, ..Pool::default() });
        }
        let mut pinned_pool: BTreeMap<(usize, u32), usize> = BTreeMap::new();
        for p in &deployment.processes {
            if let Some(core) = p.pinned {
                pinned_pool.entry((p.machine, core)).or_insert_with(|| {
                    pools.push(Pool { cores: 1, ..Pool::default() });
                    pools.len() - 1
                });
            }
        }
        let n = deployment.processes.len();
        let sites = topology.sites.len();
        let mut stats = SimStats::default();
        stats.processes.resize_with(n, ProcessStats::default);
        let mut procs = Vec::with_capacity(n);
        for p in &deployment.processes {
            let pool = match p.pinned {
                Some(core) => pinned_pool[&(p.machine, core)],
                None => p.machine,
            };
            stats.processes[p.process.0 as usize].cores = pools[pool].cores;
            procs.push(None::<Proc<P, S>>);
            let _ = pool;
        }
        Ok(Simulation {
            message_time: topology.cpu.message_time(),
            local_delay: topology.machine_local_delay(),
            topology,
            deployment,
            now: Time::ZERO,
            queue: EventQueue::new(),
            procs,
            pools,
            clients: Vec::new(),
            client_index: BTreeMap::new(),
            network_rng: stream(STREAM_NETWORK),
            uplink_free: vec![Time::ZERO; sites],
            fault_rng: stream(STREAM_FAULTS),
            faults: FaultPlan::new(),
            crashes_scheduled: 0,
            stalls_scheduled: 0,
            duplicates_refused: BTreeSet::new(),
            recovery: None,
            stats,
            unanswered: BTreeSet::new(),
            process_out: Vec::new(),
            client_out: Vec::new(),
            trace: None,
        })
    }

    /// Adds process `process.id()`, placed where the deployment says, with its storage if it has
    /// one. Its `start` is called at the beginning of the next [`Self::run_until`].
    pub fn add_process(&mut self, process: Box<dyn Process<P>>, storage: Option<S>) -> Result<(), SimError> {
        let id = process.id();
        let Some(placement) = self.deployment.placement(id) else { return Err(SimError::NotDeployed(id)) };
        let machine = placement.machine;
        let pool = match placement.pinned {
            Some(core) => self.pinned_pool(machine, core),
            None => machine,
        };
        let site = self.deployment.machines[machine].site;
        let slot = &mut self.procs[id.0 as usize];
        if slot.is_some() {
            return Err(SimError::DuplicateProcess(id));
        }
        *slot = Some(Proc {
            process: Some(process),
            storage,
            site,
            machine,
            pool,
            started: false,
            down: 0,
            stalled: 0,
            stalled_since: Time::ZERO,
            held: VecDeque::new(),
            epoch: 0,
            running: 0,
            queued: VecDeque::new(),
            live_timers: BTreeMap::new(),
            timers_set: 0,
            last_arrival: Vec::new(),
            outbox: VecDeque::new(),
            next_ticket: 0,
        });
        Ok(())
    }

    fn pinned_pool(&self, machine: usize, core: u32) -> usize {
        // Pinned pools were created in deployment order after the machines' pools.
        let mut seen: Vec<(usize, u32)> = Vec::new();
        for p in &self.deployment.processes {
            if let Some(c) = p.pinned {
                if !seen.contains(&(p.machine, c)) {
                    seen.push((p.machine, c));
                }
            }
        }
        self.deployment.machines.len() + seen.iter().position(|k| *k == (machine, core)).expect("a pinned core of the deployment")
    }

    /// How a process that crashed losing its state is rebuilt when it restarts.
    pub fn set_recovery(&mut self, recovery: Recovery<P, S>) {
        self.recovery = Some(recovery);
    }

    /// Adds a client at `site`. It receives [`ClientEvent::Start`] at the beginning of the next
    /// [`Self::run_until`].
    pub fn add_client(&mut self, client: Box<dyn Client<P::Evidence>>, site: usize) -> Result<(), SimError> {
        if site >= self.topology.sites.len() {
            return Err(SimError::UnknownSite { site, topology: self.topology.name.clone(), sites: self.topology.sites.len() });
        }
        let id = client.id();
        if self.client_index.contains_key(&id) {
            return Err(SimError::DuplicateClient(id));
        }
        let index = u32::try_from(self.clients.len()).expect("fewer than 2^32 clients");
        self.client_index.insert(id, index);
        self.clients.push(ClientSlot { client, id, site, started: false, last_arrival_to: Vec::new(), last_arrival_from: Vec::new() });
        Ok(())
    }

    /// The fault plan. Rules added here apply from the next message on; crashes are scheduled at
    /// the beginning of the next [`Self::run_until`].
    pub fn faults_mut(&mut self) -> &mut FaultPlan {
        &mut self.faults
    }

    pub fn faults(&self) -> &FaultPlan {
        &self.faults
    }

    /// Records every event as it is dispatched, as `(time, Debug rendering)`. Costly; meant for
    /// tests and for debugging a protocol on a small run.
    pub fn enable_trace(&mut self) {
        self.trace.get_or_insert_with(Vec::new);
    }

    /// The events recorded since tracing was enabled or last taken.
    pub fn take_trace(&mut self) -> Vec<(Time, String)> {
        self.trace.as_mut().map(std::mem::take).unwrap_or_default()
    }

    pub fn now(&self) -> Time {
        self.now
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    pub fn deployment(&self) -> &Deployment {
        &self.deployment
    }

    pub fn stats(&self) -> &SimStats {
        &self.stats
    }

    /// Busy share of the cores `id` runs on, from time zero to now, counting only `id`'s jobs.
    pub fn cpu_utilisation(&self, id: ProcessId) -> f64 {
        self.stats.utilisation(id, self.now)
    }

    /// Events scheduled but not yet run, those a stall holds back included.
    pub fn pending_events(&self) -> usize {
        self.queue.len() + self.procs.iter().flatten().map(|p| p.held.len()).sum::<usize>()
    }

    /// Whether `id` is currently crashed.
    pub fn is_down(&self, id: ProcessId) -> bool {
        self.slot(id).down > 0
    }

    fn slot(&self, id: ProcessId) -> &Proc<P, S> {
        match self.procs.get(id.0 as usize) {
            Some(Some(p)) => p,
            _ => panic!("the simulation has no process {id}"),
        }
    }

    fn slot_mut(&mut self, id: ProcessId) -> &mut Proc<P, S> {
        match self.procs.get_mut(id.0 as usize) {
            Some(Some(p)) => p,
            _ => panic!("the simulation has no process {id}"),
        }
    }

    /// The process `id`, or `None` while it is crashed with its state lost.
    ///
    /// # Panics
    /// If there is no process `id`, like indexing out of bounds.
    pub fn process(&self, id: ProcessId) -> Option<&dyn Process<P>> {
        self.slot(id).process.as_deref()
    }

    /// # Panics
    /// If there is no process `id`.
    pub fn storage(&self, id: ProcessId) -> Option<&S> {
        self.slot(id).storage.as_ref()
    }

    /// # Panics
    /// If there is no process `id`.
    pub fn storage_mut(&mut self, id: ProcessId) -> Option<&mut S> {
        self.slot_mut(id).storage.as_mut()
    }

    /// The processes' ids, ascending.
    pub fn process_ids(&self) -> impl Iterator<Item = ProcessId> + '_ {
        self.procs.iter().enumerate().filter(|(_, n)| n.is_some()).map(|(i, _)| ProcessId(i as u32))
    }

    /// Every added process's counters (its storage's [`Storage::tally`] after its own) and
    /// failure, by ascending id (a process crashed without recovery reports none).
    pub fn process_reports(&self) -> Vec<ProcessReport> {
        self.procs
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|p| (ProcessId(i as u32), p)))
            .map(|(id, p)| match &p.process {
                Some(process) => {
                    let mut counters = process.counters();
                    counters.extend(p.storage.as_ref().map(|s| s.tally()).unwrap_or_default());
                    (id, counters, process.failure())
                }
                None => (id, Vec::new(), None),
            })
            .collect()
    }

    /// Whether every live process says it is quiescent ([`Process::quiescent`]): nothing of its
    /// own in flight. A crashed process that has not restarted is not asked; a process a stall
    /// holds anything back from is not quiescent, whatever it says.
    pub fn quiescent(&self) -> bool {
        self.procs.iter().flatten().all(|p| p.held.is_empty() && p.process.as_ref().is_none_or(|p| p.quiescent()))
    }

    /// Requests sent whose client has not reported them completed, by client and sequence
    /// number. A run can go quiet and every process quiescent with one left here (a request
    /// lost on its way), so a check of progress asks this as well.
    pub fn unanswered(&self) -> &BTreeSet<(ClientId, u64)> {
        &self.unanswered
    }

    /// The storages, by ascending process id (`None` for a process without one): after a run,
    /// to compare replicas.
    pub fn into_storages(self) -> Vec<Option<S>> {
        self.procs.into_iter().map(|p| p.and_then(|p| p.storage)).collect()
    }

    /// Runs every event up to and including virtual time `until`, handing each completion a
    /// client reports to `on_completion`, and stops early if the queue empties. Afterwards `now()`
    /// is `until` either way (time passes on an idle system too, which utilisation accounts for),
    /// so `until` should be a horizon, not `Time(u64::MAX)`. Call it repeatedly to run in slices.
    ///
    /// # Panics
    /// If a process of the deployment was not added, or a crash loses a process's state and no
    /// recovery was set.
    pub fn run_until(&mut self, until: Time, on_completion: &mut dyn FnMut(Time, &Completion<P::Evidence>)) {
        self.start_new_processes(on_completion);
        self.schedule_new_crashes();
        self.schedule_new_stalls();
        while let Some(at) = self.queue.peek_time() {
            // Between two pops the queue only grows, so its length now is that stretch's peak.
            self.stats.max_queue_len = self.stats.max_queue_len.max(self.queue.len());
            if at > until {
                break;
            }
            let (at, event) = self.queue.pop().expect("peeked event is there");
            self.now = at;
            self.stats.events += 1;
            if let Some(trace) = &mut self.trace {
                trace.push((at, format!("{event:?}")));
            }
            self.dispatch(event, on_completion);
        }
        self.now = self.now.max(until);
    }

    /// Calls `start` on processes and delivers `Start` to clients not started yet: all of them at
    /// time zero on the first run, later additions at the current time.
    fn start_new_processes(&mut self, on_completion: &mut dyn FnMut(Time, &Completion<P::Evidence>)) {
        for index in 0..self.procs.len() {
            let Some(p) = &mut self.procs[index] else {
                panic!("{} is in the deployment but was not added to the simulation", ProcessId(index as u32))
            };
            if p.started {
                continue;
            }
            p.started = true;
            p.process.as_mut().expect("a new process is up").start(self.now, &mut self.process_out);
            self.attribute_refusals(index as u32, None);
            self.emit(index as u32);
        }
        for index in 0..self.clients.len() {
            let slot = &mut self.clients[index];
            if slot.started {
                continue;
            }
            slot.started = true;
            slot.client.on_event(self.now, ClientEvent::Start, &mut self.client_out);
            self.apply_client_effects(index as u32, on_completion);
        }
    }

    fn schedule_new_crashes(&mut self) {
        while let Some(crash) = self.faults.crashes().get(self.crashes_scheduled).copied() {
            self.crashes_scheduled += 1;
            let Crash { process, at, restart, loses_state } = crash;
            assert!(
                !loses_state || self.recovery.is_some(),
                "a crash of {process} loses its state, but the simulation has no recovery to rebuild it"
            );
            let at = at.max(self.now);
            self.queue.push(at, SimEvent::Crash { proc: process.0, loses_state });
            if let Some(restart) = restart {
                self.queue.push(restart.max(at), SimEvent::Restart { proc: process.0 });
            }
        }
    }

    fn schedule_new_stalls(&mut self) {
        while let Some(stall) = self.faults.stalls().get(self.stalls_scheduled).copied() {
            self.stalls_scheduled += 1;
            let Stall { process, window } = stall;
            let begins = window.start.max(self.now);
            if window.end <= begins || self.procs.get(process.0 as usize).is_none_or(Option::is_none) {
                continue; // over already, or of a process not in this run
            }
            self.queue.push(begins, SimEvent::StallBegins { proc: process.0 });
            self.queue.push(window.end, SimEvent::StallEnds { proc: process.0 });
        }
    }

    fn dispatch(&mut self, event: SimEvent<P>, on_completion: &mut dyn FnMut(Time, &Completion<P::Evidence>)) {
        if let Some(proc) = event.stalls_with() {
            let p = self.procs[proc as usize].as_mut().expect("events happen at existing processes");
            if p.stalled > 0 || !p.held.is_empty() {
                p.held.push_back((self.now, event));
                self.stats.events_held_in_stalls += 1;
                return;
            }
        }
        match event {
            SimEvent::AtProcess { proc, event, duplicated } => {
                let p = self.procs[proc as usize].as_ref().expect("messages are only sent to existing processes");
                if p.down > 0 {
                    self.stats.messages_dropped.crashed += 1;
                } else {
                    self.submit(proc, Job::Handle(event, duplicated));
                }
            }
            SimEvent::CpuDone { proc, epoch, service, job } => self.finish_job(proc, epoch, service, job),
            SimEvent::Release { proc, epoch, charge, ticket, effects } => self.release(proc, epoch, charge, ticket, effects),
            SimEvent::ProcessTimer { proc, setting, id } => {
                let p = self.procs[proc as usize].as_mut().expect("timers are only set by existing processes");
                if p.live_timers.get(&id) != Some(&setting) {
                    return; // cancelled, set again since, or set by a predecessor lost in a crash
                }
                p.live_timers.remove(&id);
                if p.down > 0 {
                    self.stats.timers_discarded += 1;
                } else {
                    self.stats.timers_fired += 1;
                    p.process.as_mut().expect("an up process exists").on_event(self.now, Event::Timer(id), &mut self.process_out);
                    self.attribute_refusals(proc, None);
                    self.emit(proc);
                }
            }
            SimEvent::AtClient { client, from, reply } => {
                let slot = &mut self.clients[client as usize];
                slot.client.on_event(self.now, ClientEvent::Reply { from, reply }, &mut self.client_out);
                self.apply_client_effects(client, on_completion);
            }
            SimEvent::ClientTimer { client, id } => {
                self.stats.timers_fired += 1;
                let slot = &mut self.clients[client as usize];
                slot.client.on_event(self.now, ClientEvent::Timer(id), &mut self.client_out);
                self.apply_client_effects(client, on_completion);
            }
            SimEvent::Crash { proc, loses_state } => self.crash(proc, loses_state),
            SimEvent::Restart { proc } => self.restart(proc),
            SimEvent::StallBegins { proc } => {
                let p = self.procs[proc as usize].as_mut().expect("checked when scheduled");
                if p.stalled == 0 {
                    p.stalled_since = self.now;
                }
                p.stalled += 1;
            }
            SimEvent::StallEnds { proc } => {
                let p = self.procs[proc as usize].as_mut().expect("checked when scheduled");
                p.stalled -= 1;
                if p.stalled == 0 {
                    let since = p.stalled_since;
                    for (at, event) in std::mem::take(&mut p.held) {
                        // A core stopped mid-job resumes it: what the job had left when the
                        // stall began (all of it, if it started during the stall) is still to
                        // run. What came from outside, and the timers, are overdue and come now.
                        let left = |work: Duration| at.saturating_sub(since).min(work);
                        match &event {
                            SimEvent::CpuDone { service, .. } => self.queue.push(self.now + left(*service), event),
                            SimEvent::Release { charge, .. } => self.queue.push(self.now + left(*charge), event),
                            _ => self.dispatch(event, on_completion),
                        }
                    }
                }
            }
        }
    }

    fn crash(&mut self, proc: u32, loses_state: bool) {
        let Some(Some(p)) = self.procs.get_mut(proc as usize) else { return }; // not in this run: a no-op
        p.down += 1;
        p.epoch = p.epoch.wrapping_add(1);
        let lost = u64::from(p.running) + p.queued.len() as u64;
        let pool = &mut self.pools[p.pool];
        pool.busy -= p.running;
        p.running = 0;
        p.queued.clear();
        // Effects waiting behind a charged handler had not left the process: lost with it.
        p.outbox.clear();
        pool.waiting.retain(|q| *q != proc);
        self.stats.processes[proc as usize].jobs_lost_in_crash += lost;
        if loses_state {
            p.process = None;
            p.live_timers.clear();
            self.stats.processes[proc as usize].crashes_losing_state += 1;
        }
        // Freed cores go to the pool's other processes.
        let pool = p.pool;
        self.start_waiting(pool);
    }

    fn restart(&mut self, proc: u32) {
        let Some(Some(p)) = self.procs.get_mut(proc as usize) else { return };
        p.down = p.down.saturating_sub(1);
        if p.down > 0 || p.process.is_some() {
            return;
        }
        let id = ProcessId(proc);
        let recovery = self.recovery.as_mut().expect("checked when the crash was scheduled");
        let mut process = recovery(id, p.storage.as_mut());
        assert_eq!(process.id(), id, "the recovery built the wrong process");
        process.start(self.now, &mut self.process_out);
        p.process = Some(process);
        self.stats.processes[proc as usize].recoveries += 1;
        self.attribute_refusals(proc, None);
        self.emit(proc);
    }

    fn service_time(&self, job: &Job<P>) -> Duration {
        match job {
            Job::Handle(..) => self.message_time,
            Job::Storage { cost, .. } => *cost,
        }
    }

    /// Gives `job` a free core of its process's pool, or queues it.
    fn submit(&mut self, proc: u32, job: Job<P>) {
        let service = self.service_time(&job);
        let p = self.procs[proc as usize].as_mut().expect("job for an existing process");
        let pool = &mut self.pools[p.pool];
        if pool.busy < pool.cores {
            pool.busy += 1;
            p.running += 1;
            let epoch = p.epoch;
            self.queue.push(self.now + service, SimEvent::CpuDone { proc, epoch, service, job });
        } else {
            pool.waiting.push_back(proc);
            p.queued.push_back(job);
            let stats = &mut self.stats.processes[proc as usize];
            stats.max_cpu_queue = stats.max_cpu_queue.max(pool.waiting.len());
        }
    }

    /// Hands free cores of `pool` to waiting jobs.
    fn start_waiting(&mut self, pool: usize) {
        while self.pools[pool].busy < self.pools[pool].cores {
            let Some(proc) = self.pools[pool].waiting.pop_front() else { return };
            let p = self.procs[proc as usize].as_mut().expect("queued by an existing process");
            let job = p.queued.pop_front().expect("the pool's queue and the process's agree");
            p.running += 1;
            let epoch = p.epoch;
            self.pools[pool].busy += 1;
            let service = self.service_time(&job);
            self.queue.push(self.now + service, SimEvent::CpuDone { proc, epoch, service, job });
        }
    }

    /// Frees one core of `proc`'s pool, which moves on to its next waiting job.
    fn free_core(&mut self, proc: u32) {
        let p = self.procs[proc as usize].as_mut().expect("an existing process");
        p.running -= 1;
        let pool = p.pool;
        self.pools[pool].busy -= 1;
        self.start_waiting(pool);
    }

    fn finish_job(&mut self, proc: u32, epoch: u32, service: Duration, job: Job<P>) {
        let p = self.procs[proc as usize].as_mut().expect("job of an existing process");
        if p.epoch != epoch {
            return; // started before a crash: lost with the CPU's state
        }
        let stats = &mut self.stats.processes[proc as usize];
        stats.busy += service;
        let process = p.process.as_mut().expect("an up process exists");
        match job {
            Job::Handle(event, duplicated) => {
                stats.handled += 1;
                process.on_event(self.now, event, &mut self.process_out);
                self.attribute_refusals(proc, duplicated);
            }
            Job::Storage { work, job, .. } => {
                stats.storage_jobs += 1;
                self.stats.storage_jobs += 1;
                let Some(storage) = p.storage.as_mut() else {
                    panic!("{} asked for storage work but has no storage", ProcessId(proc))
                };
                let result = storage.run(&job);
                process.on_event(self.now, Event::StorageDone { work, result }, &mut self.process_out);
                self.attribute_refusals(proc, None);
            }
        }
        let charge: Duration = self.process_out.iter().filter_map(|e| if let Effect::Charge(d) = e { Some(*d) } else { None }).sum();
        if charge.is_zero() {
            // The core moves on to the next waiting job before this job's effects queue anything new.
            self.free_core(proc);
            self.emit(proc);
        } else {
            // The core stays with this handler for the work it charged; its effects wait for it,
            // and the effects of handlers that run meanwhile wait behind them.
            let effects = std::mem::take(&mut self.process_out);
            let p = self.procs[proc as usize].as_mut().expect("job of an existing process");
            let ticket = p.next_ticket;
            p.next_ticket += 1;
            p.outbox.push_back((ticket, None));
            self.queue.push(self.now + charge, SimEvent::Release { proc, epoch, charge, ticket, effects });
        }
    }

    fn release(&mut self, proc: u32, epoch: u32, charge: Duration, ticket: u64, effects: Vec<Effect<P>>) {
        let p = self.procs[proc as usize].as_mut().expect("an existing process");
        if p.epoch != epoch {
            return; // crashed while working: its core was freed then, its effects are lost
        }
        let slot = p.outbox.iter_mut().find(|(t, _)| *t == ticket).expect("a charging handler holds its place in the outbox");
        slot.1 = Some(effects);
        self.stats.processes[proc as usize].busy += charge;
        self.free_core(proc);
        self.flush_outbox(proc);
    }

    /// The effects a handler just pushed take effect now, unless an earlier handler's are still
    /// waiting for its charged work: then they wait behind them.
    fn emit(&mut self, proc: u32) {
        let p = self.procs[proc as usize].as_mut().expect("an existing process");
        if p.outbox.is_empty() {
            self.apply_process_effects(proc);
        } else {
            let ticket = p.next_ticket;
            p.next_ticket += 1;
            p.outbox.push_back((ticket, Some(std::mem::take(&mut self.process_out))));
        }
    }

    /// Applies the outbox's effects from its front, in order, up to the first handler still
    /// charging.
    fn flush_outbox(&mut self, proc: u32) {
        loop {
            let p = self.procs[proc as usize].as_mut().expect("an existing process");
            if !matches!(p.outbox.front(), Some((_, Some(_)))) {
                return;
            }
            let (_, effects) = p.outbox.pop_front().expect("a front entry");
            debug_assert!(self.process_out.is_empty());
            self.process_out = effects.expect("a released entry");
            self.apply_process_effects(proc);
        }
    }

    /// Counts the refusals among the effects a handler of `proc` just pushed, as the handler
    /// makes them (a refusal is a judgement, not an effect a crash can lose), and judges each:
    /// the first refusal of a message the network duplicated (`duplicated`) is the protocol
    /// refusing a copy, as it must; any other is one no fault explains.
    fn attribute_refusals(&mut self, proc: u32, duplicated: Option<u64>) {
        for effect in &self.process_out {
            let Effect::Refuse { from, what } = effect else { continue };
            let said = || format!("{} refused a message from {from}: {what}", ProcessId(proc));
            let stats = &mut self.stats.processes[proc as usize];
            stats.messages_refused += 1;
            stats.first_refusal.get_or_insert_with(said);
            if duplicated.is_some_and(|k| self.duplicates_refused.insert(k)) {
                self.stats.refusals_of_duplicates += 1;
            } else {
                stats.refusals_unexplained += 1;
                stats.first_unexplained_refusal.get_or_insert_with(said);
            }
        }
    }

    fn apply_process_effects(&mut self, proc: u32) {
        let mut out = std::mem::take(&mut self.process_out);
        for effect in out.drain(..) {
            match effect {
                Effect::Send { to, msg } => self.send_message(proc, to, msg),
                Effect::Reply { to, reply } => self.send_reply(proc, to, reply),
                Effect::Storage { work, job, cost } => self.submit(proc, Job::Storage { work, job, cost }),
                Effect::SetTimer { id, after } => {
                    let p = self.procs[proc as usize].as_mut().expect("an existing process");
                    let setting = p.timers_set;
                    p.timers_set += 1;
                    p.live_timers.insert(id, setting);
                    self.queue.push(self.now + after, SimEvent::ProcessTimer { proc, setting, id });
                }
                Effect::CancelTimer { id } => {
                    self.procs[proc as usize].as_mut().expect("an existing process").live_timers.remove(&id);
                }
                // Both accounted for when the handler finished.
                Effect::Charge(_) | Effect::Refuse { .. } => {}
            }
        }
        // Handlers never run while effects are applied, so nothing was pushed meanwhile.
        debug_assert!(self.process_out.is_empty());
        self.process_out = out;
    }

    fn apply_client_effects(&mut self, client: u32, on_completion: &mut dyn FnMut(Time, &Completion<P::Evidence>)) {
        let mut out = std::mem::take(&mut self.client_out);
        for effect in out.drain(..) {
            match effect {
                ClientEffect::Send { to, request } => {
                    self.unanswered.insert((request.client, request.seq));
                    self.send_request(client, to, request)
                }
                ClientEffect::SetTimer { id, after } => {
                    self.queue.push(self.now + after, SimEvent::ClientTimer { client, id });
                }
                ClientEffect::Completed(completion) => {
                    self.unanswered.remove(&(completion.request.client, completion.request.seq));
                    on_completion(self.now, &completion)
                }
            }
        }
        debug_assert!(self.client_out.is_empty());
        self.client_out = out;
    }

    /// The network's part common to every message: draw the delay (always, for messages between
    /// machines, so the network's random stream does not depend on faults), judge the faults, keep
    /// the link FIFO. Returns the arrival times: none if the message is lost, two if duplicated.
    fn transit(&mut self, from: Endpoint, to: Endpoint, route: Route, bytes: usize, link: LinkRef) -> Arrivals {
        let delay = match route {
            Route::SameMachine => self.local_delay,
            Route::Sites(a, b) => {
                // A site's outgoing link sends one message at a time: this one waits for those
                // handed to it before.
                let transfer = self.topology.transfer_time(a, b, bytes);
                let mut wait = Duration::ZERO;
                if transfer > Duration::ZERO {
                    let free = &mut self.uplink_free[a];
                    let start = (*free).max(self.now);
                    wait = start.saturating_sub(self.now);
                    *free = start + transfer;
                    self.stats.uplink_wait += wait;
                }
                wait + self.topology.sample_delay(a, b, bytes, &mut self.network_rng)
            }
        };
        let mut arrival = self.now + delay;
        let mut copy = None;
        let mut in_order = true;
        if !self.faults.rules().is_empty() {
            match self.faults.judge(self.now, from, to, &mut self.fault_rng) {
                Verdict::Deliver { extra, duplicate, reorder } => {
                    arrival = arrival + extra;
                    if let Some(d) = reorder {
                        // Overtakes, or is overtaken by, its neighbours on the link.
                        arrival = arrival + d;
                        in_order = false;
                    }
                    if duplicate {
                        self.stats.messages_duplicated += 1;
                        let late = self.fault_rng.random_range(0..=delay.as_nanos() as u64 + 1);
                        copy = Some(arrival + Duration::from_nanos(late));
                    }
                }
                Verdict::Drop(cause) => {
                    match cause {
                        DropCause::Rule => self.stats.messages_dropped.rule += 1,
                        DropCause::Partition => self.stats.messages_dropped.partition += 1,
                    }
                    return Arrivals { first: None, copy: None };
                }
            }
        }
        if in_order {
            let last = match link {
                LinkRef::ProcessToProcess { from, to } => {
                    slot(&mut self.procs[from as usize].as_mut().expect("sender exists").last_arrival, to)
                }
                LinkRef::ClientToProcess { client, to } => slot(&mut self.clients[client as usize].last_arrival_to, to),
                LinkRef::ProcessToClient { from, client } => slot(&mut self.clients[client as usize].last_arrival_from, from),
            };
            arrival = arrival.max(*last);
            *last = arrival;
        }
        Arrivals { first: Some(arrival), copy }
    }

    fn send_message(&mut self, from: u32, to: ProcessId, msg: P::Msg) {
        self.stats.messages_sent += 1;
        let Some(Some(dst)) = self.procs.get(to.0 as usize) else {
            self.stats.messages_dropped.unknown_destination += 1;
            return;
        };
        let src = self.procs[from as usize].as_ref().expect("sender exists");
        let route = if src.machine == dst.machine { Route::SameMachine } else { Route::Sites(src.site, dst.site) };
        let bytes = self.wire_size(&msg);
        let link = LinkRef::ProcessToProcess { from, to: to.0 };
        let arrivals = self.transit(Endpoint::Process(ProcessId(from)), Endpoint::Process(to), route, bytes, link);
        // `transit` has just counted the duplication: its count numbers it.
        let duplicated = arrivals.copy.map(|_| self.stats.messages_duplicated);
        if let Some(at) = arrivals.copy {
            let event = Event::Message { from: ProcessId(from), msg: msg.clone() };
            self.queue.push(at, SimEvent::AtProcess { proc: to.0, event, duplicated });
        }
        if let Some(at) = arrivals.first {
            let event = Event::Message { from: ProcessId(from), msg };
            self.queue.push(at, SimEvent::AtProcess { proc: to.0, event, duplicated });
        }
    }

    fn send_request(&mut self, client: u32, to: ProcessId, request: Request) {
        self.stats.messages_sent += 1;
        let Some(Some(dst)) = self.procs.get(to.0 as usize) else {
            self.stats.messages_dropped.unknown_destination += 1;
            return;
        };
        let slot = &self.clients[client as usize];
        let route = Route::Sites(slot.site, dst.site);
        let ends = (Endpoint::Client(slot.id), Endpoint::Process(to));
        let bytes = self.wire_size(&request);
        let arrivals = self.transit(ends.0, ends.1, route, bytes, LinkRef::ClientToProcess { client, to: to.0 });
        let duplicated = arrivals.copy.map(|_| self.stats.messages_duplicated);
        if let Some(at) = arrivals.copy {
            self.queue.push(at, SimEvent::AtProcess { proc: to.0, event: Event::Request(request.clone()), duplicated });
        }
        if let Some(at) = arrivals.first {
            self.queue.push(at, SimEvent::AtProcess { proc: to.0, event: Event::Request(request), duplicated });
        }
    }

    fn send_reply(&mut self, from: u32, to: ClientId, reply: Reply<P::Evidence>) {
        self.stats.messages_sent += 1;
        let Some(&client) = self.client_index.get(&to) else {
            self.stats.messages_dropped.unknown_destination += 1;
            return;
        };
        let route = Route::Sites(self.procs[from as usize].as_ref().expect("sender exists").site, self.clients[client as usize].site);
        let ends = (Endpoint::Process(ProcessId(from)), Endpoint::Client(to));
        let bytes = self.wire_size(&reply);
        let arrivals = self.transit(ends.0, ends.1, route, bytes, LinkRef::ProcessToClient { from, client });
        if let Some(at) = arrivals.copy {
            self.queue.push(at, SimEvent::AtClient { client, from: ProcessId(from), reply: reply.clone() });
        }
        if let Some(at) = arrivals.first {
            self.queue.push(at, SimEvent::AtClient { client, from: ProcessId(from), reply });
        }
    }

    /// The message's size on the wire, which only matters when links have a bandwidth: measuring
    /// it walks the whole message, so unlimited links skip it.
    fn wire_size<T: Serialize>(&self, value: &T) -> usize {
        if self.topology.bandwidth_bps.is_none() {
            return 0;
        }
        match postcard::experimental::serialized_size(value) {
            Ok(n) => n,
            // The real runtime sends the same types with postcard, so this is a protocol bug.
            Err(e) => panic!("a message does not serialize with postcard: {e}"),
        }
    }
}

/// How a message travels: a loopback hop inside a machine, or the network between two sites.
#[derive(Clone, Copy)]
enum Route {
    SameMachine,
    Sites(usize, usize),
}

struct Arrivals {
    first: Option<Time>,
    copy: Option<Time>,
}

/// Which link's FIFO state a message uses.
#[derive(Clone, Copy)]
enum LinkRef {
    ProcessToProcess { from: u32, to: u32 },
    ClientToProcess { client: u32, to: u32 },
    ProcessToClient { from: u32, client: u32 },
}

/// The entry for process `index` in a per-link vector, growing it on first use.
fn slot(v: &mut Vec<Time>, index: u32) -> &mut Time {
    let i = index as usize;
    if v.len() <= i {
        v.resize(i + 1, Time::ZERO);
    }
    &mut v[i]
}
