//! The simulator proper: nodes, clients, the network, CPUs and the event loop.

use crate::faults::{DropCause, Endpoint, FaultPlan, Verdict};
use crate::queue::EventQueue;
use crate::stats::{NodeStats, SimStats};
use ensemble_core::topology::{Topology, TopologyError};
use ensemble_core::{
    Client, ClientEffect, ClientEvent, ClientId, Completion, InstanceId, Node, NodeEffect, NodeEvent, Reply, Request,
    Storage, StorageJob, Time, TimerId, WorkId,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Instance ids index dense vectors; this bounds what a typo can allocate.
const MAX_INSTANCES: u32 = 1 << 16;

/// Random stream numbers. Each purpose draws from its own ChaCha stream of the run seed, so that a
/// change in how often one purpose draws (a new fault rule, a new message) never shifts another.
const STREAM_NETWORK: u64 = 1;
const STREAM_FAULTS: u64 = 2;

/// Why a simulation could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error("site {site} does not exist: topology `{topology}` has {sites} site(s)")]
    UnknownSite { site: usize, topology: String, sites: usize },
    #[error("instance {0} was added twice")]
    DuplicateInstance(InstanceId),
    #[error("instance id {0} is too large: instances are numbered densely from 0 (at most {MAX_INSTANCES})")]
    InstanceIdTooLarge(InstanceId),
    #[error("client {0} was added twice")]
    DuplicateClient(ClientId),
}

/// Something scheduled to happen at an instant of virtual time.
#[derive(Debug)]
enum Event<M> {
    /// A message or request reaches an instance; it queues for a core.
    AtNode { node: u32, event: NodeEvent<M> },
    /// A core finishes a job. `epoch` is the instance's crash epoch when the job started: a job
    /// from before a crash finds a newer epoch and is discarded.
    CpuDone { node: u32, epoch: u32, service: Duration, job: Job<M> },
    NodeTimer { node: u32, id: TimerId },
    AtClient { client: u32, from: InstanceId, reply: Reply },
    ClientTimer { client: u32, id: TimerId },
    Crash { node: u32 },
    Restart { node: u32 },
}

/// Work for an instance's CPU.
#[derive(Debug)]
enum Job<M> {
    /// Protocol code handling a message or request: `on_event` runs when the job finishes.
    Handle(NodeEvent<M>),
    Storage { work: WorkId, job: StorageJob },
}

struct Instance<N: Node, S> {
    node: N,
    storage: S,
    site: usize,
    started: bool,
    /// Cores running a job.
    busy: u32,
    /// Jobs waiting for a core, first come first served.
    waiting: VecDeque<Job<N::Msg>>,
    /// Number of crash windows the instance is in (windows may overlap); down while positive.
    down: u32,
    epoch: u32,
    /// Arrival time of the latest message on the link to each instance, by instance id: TCP-like
    /// links never let a message overtake an earlier one.
    last_arrival: Vec<Time>,
}

struct ClientSlot {
    client: Box<dyn Client>,
    id: ClientId,
    site: usize,
    started: bool,
    /// Latest arrival on the link from this client to each instance, by instance id.
    last_arrival_to: Vec<Time>,
    /// Latest arrival on the link from each instance to this client, by instance id.
    last_arrival_from: Vec<Time>,
}

/// A deterministic discrete-event simulation of instances running `N` over storages `S`, and the
/// clients driving them. See the crate documentation for the model.
pub struct Simulation<N: Node, S: Storage> {
    topology: Topology,
    now: Time,
    queue: EventQueue<Event<N::Msg>>,
    /// By instance id.
    nodes: Vec<Option<Instance<N, S>>>,
    clients: Vec<ClientSlot>,
    client_index: BTreeMap<ClientId, u32>,
    network_rng: ChaCha8Rng,
    fault_rng: ChaCha8Rng,
    faults: FaultPlan,
    /// How many of `faults.crashes()` have been turned into events.
    crashes_scheduled: usize,
    stats: SimStats,
    /// Reused effect buffers: handlers push into them, the loop drains them.
    node_out: Vec<NodeEffect<N::Msg>>,
    client_out: Vec<ClientEffect>,
    message_time: Duration,
    cores: u32,
    trace: Option<Vec<(Time, String)>>,
}

impl<N: Node, S: Storage> Simulation<N, S> {
    /// A simulation over `topology` whose every random draw derives from `seed`.
    pub fn new(topology: Topology, seed: u64) -> Result<Self, SimError> {
        topology.validate()?;
        let stream = |n| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(n);
            rng
        };
        Ok(Simulation {
            message_time: topology.cpu.message_time(),
            cores: topology.cpu.cores,
            topology,
            now: Time::ZERO,
            queue: EventQueue::new(),
            nodes: Vec::new(),
            clients: Vec::new(),
            client_index: BTreeMap::new(),
            network_rng: stream(STREAM_NETWORK),
            fault_rng: stream(STREAM_FAULTS),
            faults: FaultPlan::new(),
            crashes_scheduled: 0,
            stats: SimStats::default(),
            node_out: Vec::new(),
            client_out: Vec::new(),
            trace: None,
        })
    }

    /// Adds the instance `node.id()` at `site` (an index into `topology.sites`), with its own
    /// storage. Its `start` is called at the beginning of the next [`Self::run_until`].
    pub fn add_node(&mut self, node: N, site: usize, storage: S) -> Result<(), SimError> {
        self.check_site(site)?;
        let id = node.id();
        if id.0 >= MAX_INSTANCES {
            return Err(SimError::InstanceIdTooLarge(id));
        }
        let index = id.0 as usize;
        if self.nodes.len() <= index {
            self.nodes.resize_with(index + 1, || None);
            self.stats.nodes.resize_with(index + 1, NodeStats::default);
        }
        if self.nodes[index].is_some() {
            return Err(SimError::DuplicateInstance(id));
        }
        self.nodes[index] = Some(Instance {
            node,
            storage,
            site,
            started: false,
            busy: 0,
            waiting: VecDeque::new(),
            down: 0,
            epoch: 0,
            last_arrival: Vec::new(),
        });
        Ok(())
    }

    /// Adds a client at `site`. It receives [`ClientEvent::Start`] at the beginning of the next
    /// [`Self::run_until`].
    pub fn add_client(&mut self, client: Box<dyn Client>, site: usize) -> Result<(), SimError> {
        self.check_site(site)?;
        let id = client.id();
        if self.client_index.contains_key(&id) {
            return Err(SimError::DuplicateClient(id));
        }
        let index = u32::try_from(self.clients.len()).expect("fewer than 2^32 clients");
        self.client_index.insert(id, index);
        self.clients.push(ClientSlot {
            client,
            id,
            site,
            started: false,
            last_arrival_to: Vec::new(),
            last_arrival_from: Vec::new(),
        });
        Ok(())
    }

    fn check_site(&self, site: usize) -> Result<(), SimError> {
        if site < self.topology.sites.len() {
            Ok(())
        } else {
            Err(SimError::UnknownSite { site, topology: self.topology.name.clone(), sites: self.topology.sites.len() })
        }
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

    pub fn stats(&self) -> &SimStats {
        &self.stats
    }

    /// Utilisation of `id`'s CPU from time zero to now.
    pub fn cpu_utilisation(&self, id: InstanceId) -> f64 {
        self.stats.utilisation(id, self.cores, self.now)
    }

    /// Events scheduled but not yet run.
    pub fn pending_events(&self) -> usize {
        self.queue.len()
    }

    /// Whether `id` is currently crashed.
    pub fn is_down(&self, id: InstanceId) -> bool {
        self.instance(id).down > 0
    }

    fn instance(&self, id: InstanceId) -> &Instance<N, S> {
        match self.nodes.get(id.0 as usize) {
            Some(Some(inst)) => inst,
            _ => panic!("the simulation has no instance {id}"),
        }
    }

    fn instance_mut(&mut self, id: InstanceId) -> &mut Instance<N, S> {
        match self.nodes.get_mut(id.0 as usize) {
            Some(Some(inst)) => inst,
            _ => panic!("the simulation has no instance {id}"),
        }
    }

    /// # Panics
    /// If there is no instance `id`, like indexing out of bounds.
    pub fn node(&self, id: InstanceId) -> &N {
        &self.instance(id).node
    }

    /// # Panics
    /// If there is no instance `id`.
    pub fn node_mut(&mut self, id: InstanceId) -> &mut N {
        &mut self.instance_mut(id).node
    }

    /// # Panics
    /// If there is no instance `id`.
    pub fn storage(&self, id: InstanceId) -> &S {
        &self.instance(id).storage
    }

    /// # Panics
    /// If there is no instance `id`.
    pub fn storage_mut(&mut self, id: InstanceId) -> &mut S {
        &mut self.instance_mut(id).storage
    }

    /// The instances' ids, ascending.
    pub fn instance_ids(&self) -> impl Iterator<Item = InstanceId> + '_ {
        self.nodes.iter().enumerate().filter(|(_, n)| n.is_some()).map(|(i, _)| InstanceId(i as u32))
    }

    /// The storages, by ascending instance id: after a run, to compare replicas.
    pub fn into_storages(self) -> Vec<S> {
        self.nodes.into_iter().flatten().map(|inst| inst.storage).collect()
    }

    /// Runs every event up to and including virtual time `until`, handing each completion a
    /// client reports to `on_completion`, and stops early if the queue empties. Afterwards `now()`
    /// is `until` either way (time passes on an idle system too, which utilisation accounts for),
    /// so `until` should be a horizon, not `Time(u64::MAX)`. Call it repeatedly to run in slices.
    pub fn run_until(&mut self, until: Time, on_completion: &mut dyn FnMut(Time, &Completion)) {
        self.start_new_processes(on_completion);
        self.schedule_new_crashes();
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

    /// Calls `start` on instances and delivers `Start` to clients not started yet: all of them at
    /// time zero on the first run, later additions at the current time.
    fn start_new_processes(&mut self, on_completion: &mut dyn FnMut(Time, &Completion)) {
        for index in 0..self.nodes.len() {
            let Some(inst) = &mut self.nodes[index] else { continue };
            if inst.started {
                continue;
            }
            inst.started = true;
            inst.node.start(self.now, &mut self.node_out);
            self.apply_node_effects(index as u32);
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
            let at = crash.at.max(self.now);
            self.queue.push(at, Event::Crash { node: crash.instance.0 });
            if let Some(restart) = crash.restart {
                self.queue.push(restart.max(at), Event::Restart { node: crash.instance.0 });
            }
        }
    }

    fn dispatch(&mut self, event: Event<N::Msg>, on_completion: &mut dyn FnMut(Time, &Completion)) {
        match event {
            Event::AtNode { node, event } => {
                let Some(Some(inst)) = self.nodes.get(node as usize) else {
                    unreachable!("messages are only sent to existing instances")
                };
                if inst.down > 0 {
                    self.stats.messages_dropped.crashed += 1;
                } else {
                    self.submit(node, Job::Handle(event));
                }
            }
            Event::CpuDone { node, epoch, service, job } => self.finish_job(node, epoch, service, job),
            Event::NodeTimer { node, id } => {
                let Some(Some(inst)) = self.nodes.get_mut(node as usize) else {
                    unreachable!("timers are only set by existing instances")
                };
                if inst.down > 0 {
                    self.stats.timers_discarded += 1;
                } else {
                    self.stats.timers_fired += 1;
                    inst.node.on_event(self.now, NodeEvent::Timer(id), &mut self.node_out);
                    self.apply_node_effects(node);
                }
            }
            Event::AtClient { client, from, reply } => {
                let slot = &mut self.clients[client as usize];
                slot.client.on_event(self.now, ClientEvent::Reply { from, reply }, &mut self.client_out);
                self.apply_client_effects(client, on_completion);
            }
            Event::ClientTimer { client, id } => {
                self.stats.timers_fired += 1;
                let slot = &mut self.clients[client as usize];
                slot.client.on_event(self.now, ClientEvent::Timer(id), &mut self.client_out);
                self.apply_client_effects(client, on_completion);
            }
            Event::Crash { node } => {
                // A crash of an instance the simulation does not have is a no-op.
                if let Some(Some(inst)) = self.nodes.get_mut(node as usize) {
                    inst.down += 1;
                    inst.epoch = inst.epoch.wrapping_add(1);
                    let lost = u64::from(inst.busy) + inst.waiting.len() as u64;
                    inst.busy = 0;
                    inst.waiting.clear();
                    self.stats.nodes[node as usize].jobs_lost_in_crash += lost;
                }
            }
            Event::Restart { node } => {
                if let Some(Some(inst)) = self.nodes.get_mut(node as usize) {
                    inst.down = inst.down.saturating_sub(1);
                }
            }
        }
    }

    /// Gives `job` a free core, or queues it.
    fn submit(&mut self, node: u32, job: Job<N::Msg>) {
        let inst = self.nodes[node as usize].as_mut().expect("job for an existing instance");
        if inst.busy < self.cores {
            inst.busy += 1;
            let service = service_time(&self.topology, self.message_time, &job);
            let epoch = inst.epoch;
            self.queue.push(self.now + service, Event::CpuDone { node, epoch, service, job });
        } else {
            inst.waiting.push_back(job);
            let stats = &mut self.stats.nodes[node as usize];
            stats.max_cpu_queue = stats.max_cpu_queue.max(inst.waiting.len());
        }
    }

    fn finish_job(&mut self, node: u32, epoch: u32, service: Duration, job: Job<N::Msg>) {
        let inst = self.nodes[node as usize].as_mut().expect("job of an existing instance");
        if inst.epoch != epoch {
            return; // started before a crash: lost with the CPU's state
        }
        // The core moves on to the next waiting job before this job's effects queue anything new.
        inst.busy -= 1;
        let stats = &mut self.stats.nodes[node as usize];
        stats.busy += service;
        if let Some(next) = inst.waiting.pop_front() {
            inst.busy += 1;
            let service = service_time(&self.topology, self.message_time, &next);
            self.queue.push(self.now + service, Event::CpuDone { node, epoch, service, job: next });
        }
        match job {
            Job::Handle(event) => {
                stats.handled += 1;
                inst.node.on_event(self.now, event, &mut self.node_out);
            }
            Job::Storage { work, job } => {
                stats.storage_jobs += 1;
                self.stats.storage_jobs += 1;
                let result = inst.storage.run(&job);
                inst.node.on_event(self.now, NodeEvent::StorageDone { work, result }, &mut self.node_out);
            }
        }
        self.apply_node_effects(node);
    }

    fn apply_node_effects(&mut self, node: u32) {
        let mut out = std::mem::take(&mut self.node_out);
        for effect in out.drain(..) {
            match effect {
                NodeEffect::Send { to, msg } => self.send_message(node, to, msg),
                NodeEffect::Reply { to, reply } => self.send_reply(node, to, reply),
                NodeEffect::Storage { work, job } => self.submit(node, Job::Storage { work, job }),
                NodeEffect::SetTimer { id, after } => {
                    self.queue.push(self.now + after, Event::NodeTimer { node, id });
                }
            }
        }
        // Handlers never run while effects are applied, so nothing was pushed meanwhile.
        debug_assert!(self.node_out.is_empty());
        self.node_out = out;
    }

    fn apply_client_effects(&mut self, client: u32, on_completion: &mut dyn FnMut(Time, &Completion)) {
        let mut out = std::mem::take(&mut self.client_out);
        for effect in out.drain(..) {
            match effect {
                ClientEffect::Send { to, request } => self.send_request(client, to, request),
                ClientEffect::SetTimer { id, after } => {
                    self.queue.push(self.now + after, Event::ClientTimer { client, id });
                }
                ClientEffect::Completed(completion) => on_completion(self.now, &completion),
            }
        }
        debug_assert!(self.client_out.is_empty());
        self.client_out = out;
    }

    /// The network's part common to every message: draw the delay (always, so the network's
    /// random stream does not depend on faults), judge the faults, keep the link FIFO. Returns
    /// the arrival time, or `None` if the message is lost.
    fn transit(
        &mut self,
        from: Endpoint,
        to: Endpoint,
        sites: (usize, usize),
        bytes: usize,
        last_arrival: LinkRef,
    ) -> Option<Time> {
        let delay = self.topology.sample_delay(sites.0, sites.1, bytes, &mut self.network_rng);
        let mut arrival = self.now + delay;
        if !self.faults.rules().is_empty() {
            match self.faults.judge(self.now, from, to, &mut self.fault_rng) {
                Verdict::Deliver { extra } => arrival = arrival + extra,
                Verdict::Drop(cause) => {
                    match cause {
                        DropCause::Rule => self.stats.messages_dropped.rule += 1,
                        DropCause::Partition => self.stats.messages_dropped.partition += 1,
                    }
                    return None;
                }
            }
        }
        let last = match last_arrival {
            LinkRef::NodeToNode { from, to } => {
                slot(&mut self.nodes[from as usize].as_mut().expect("sender exists").last_arrival, to)
            }
            LinkRef::ClientToNode { client, to } => slot(&mut self.clients[client as usize].last_arrival_to, to),
            LinkRef::NodeToClient { from, client } => {
                slot(&mut self.clients[client as usize].last_arrival_from, from)
            }
        };
        arrival = arrival.max(*last);
        *last = arrival;
        Some(arrival)
    }

    fn send_message(&mut self, from: u32, to: InstanceId, msg: N::Msg) {
        self.stats.messages_sent += 1;
        let Some(Some(dst)) = self.nodes.get(to.0 as usize) else {
            self.stats.messages_dropped.unknown_destination += 1;
            return;
        };
        let sites = (self.nodes[from as usize].as_ref().expect("sender exists").site, dst.site);
        let bytes = self.wire_size(&msg);
        let link = LinkRef::NodeToNode { from, to: to.0 };
        let ends = (Endpoint::Instance(InstanceId(from)), Endpoint::Instance(to));
        if let Some(at) = self.transit(ends.0, ends.1, sites, bytes, link) {
            let event = NodeEvent::Message { from: InstanceId(from), msg };
            self.queue.push(at, Event::AtNode { node: to.0, event });
        }
    }

    fn send_request(&mut self, client: u32, to: InstanceId, request: Request) {
        self.stats.messages_sent += 1;
        let Some(Some(dst)) = self.nodes.get(to.0 as usize) else {
            self.stats.messages_dropped.unknown_destination += 1;
            return;
        };
        let slot = &self.clients[client as usize];
        let sites = (slot.site, dst.site);
        let ends = (Endpoint::Client(slot.id), Endpoint::Instance(to));
        let bytes = self.wire_size(&request);
        if let Some(at) = self.transit(ends.0, ends.1, sites, bytes, LinkRef::ClientToNode { client, to: to.0 }) {
            self.queue.push(at, Event::AtNode { node: to.0, event: NodeEvent::Request(request) });
        }
    }

    fn send_reply(&mut self, from: u32, to: ClientId, reply: Reply) {
        self.stats.messages_sent += 1;
        let Some(&client) = self.client_index.get(&to) else {
            self.stats.messages_dropped.unknown_destination += 1;
            return;
        };
        let sites = (self.nodes[from as usize].as_ref().expect("sender exists").site, self.clients[client as usize].site);
        let ends = (Endpoint::Instance(InstanceId(from)), Endpoint::Client(to));
        let bytes = self.wire_size(&reply);
        if let Some(at) = self.transit(ends.0, ends.1, sites, bytes, LinkRef::NodeToClient { from, client }) {
            self.queue.push(at, Event::AtClient { client, from: InstanceId(from), reply });
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

/// Which link's FIFO state a message uses.
#[derive(Clone, Copy)]
enum LinkRef {
    NodeToNode { from: u32, to: u32 },
    ClientToNode { client: u32, to: u32 },
    NodeToClient { from: u32, client: u32 },
}

/// The entry for instance `index` in a per-link vector, growing it on first use.
fn slot(v: &mut Vec<Time>, index: u32) -> &mut Time {
    let i = index as usize;
    if v.len() <= i {
        v.resize(i + 1, Time::ZERO);
    }
    &mut v[i]
}

fn service_time<M>(topology: &Topology, message_time: Duration, job: &Job<M>) -> Duration {
    match job {
        Job::Handle(_) => message_time,
        Job::Storage { job: StorageJob::Execute { request, .. }, .. } => topology.cpu.execute_time(&request.txn),
        Job::Storage { job: StorageJob::Apply { updates, .. }, .. } => {
            topology.cpu.apply_time(updates.iter().map(|u| u.changes.len()).sum())
        }
    }
}
