//! The test protocol of the multicast primitives: group members and casters, each embedding one
//! primitive's component, run in the simulator and recorded as a `DeliveryLog` for the property
//! checker. A [`Scenario`] says what is deployed, who casts what, and whether faults strike.
//!
//! [`run`] (and [`run_seed`], its report alone) is the faulty run the tests and the sweep
//! command (`crate::sweep`) repeat over seeds; [`run_scenario`] runs any other scenario, such
//! as the fault-free ones of the `xcast-latency` figure (`crate::latency`).
//!
//! What [`run`] is, for seed `s`:
//! * 2 to 4 groups of 3 (from `s`), member `i` of a group at WAN site `i` (wan-normal50: 50 ms
//!   one way, sd 5 ms), and 2 client processes outside every group, plus the first member of
//!   every group, casting 10 messages each, one every 400 ms from about 0.2 s on; reliable
//!   multicast to a nonempty random subset of the groups, atomic broadcast to all;
//! * faults until 8 s, then healed: 10 message rules over every process (drops, duplicates,
//!   delays, reordering; probability up to 0.3, up to 60 ms extra), one partition of all
//!   processes in two, crashes with restart of one member per group (a minority) and of the
//!   clients, losing volatile state on odd seeds (pauses on even ones), and two stalls of any
//!   processes, up to 2 s each (what reaches a stalled process waits for it, `ensemble_sim::Stall`);
//! * the run goes on after the heal until every message settled (validity and agreement hold on
//!   the log so far) or 40 s, whichever first.
//!
//! A crashed process's delivered ids, its cast counter and (broadcast) its delivered log
//! position live in its storage slot, which survives the crash; members of the sequencer group
//! also keep their consensus log there.

pub use crate::node::{payload, CastPlan, Durable, Kind, Node, Setup, Store, XCast, XMsg};
use ensemble_core::topology::Topology;
use ensemble_core::{Deployment, Effect, Event, Group, Process, ProcessId, Storage, Time};
use ensemble_group::multicast::{CastId, Directory, Entry, GmEntry};
use ensemble_group::{GroupConfig, GroupId, MemoryLog};
use ensemble_history::delivery::{check, check_primitive, Cast, DeliveryLog, DeliveryReport, Property};
use ensemble_sim::{FaultPlan, RandomFaults, Simulation};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

/// A process's storage in the simulator: survives its crashes.
pub struct Slot {
    pub durable: Rc<RefCell<Durable>>,
    pub log: MemoryLog<Entry<u64>>,
    /// A group member's log for genuine multicast.
    pub glog: MemoryLog<GmEntry<u64>>,
}

impl Storage for Slot {
    type Job = ();
    type Result = ();
    fn run(&mut self, _job: &()) {}
}

/// What the test sees of a run, across incarnations.
#[derive(Debug, Default)]
pub struct Recorder {
    /// Every cast: its id, destinations, and when.
    pub casts: Vec<(CastId, Vec<GroupId>, Time)>,
    /// Every process's deliveries, in order, across its incarnations.
    pub delivered: BTreeMap<ProcessId, Vec<CastId>>,
    /// When each process first delivered each cast: for latencies.
    pub delivered_at: BTreeMap<(ProcessId, CastId), Time>,
    /// Sends and receipts per process and cast (None: consensus and acknowledgements).
    pub steps: BTreeMap<(ProcessId, Option<CastId>), u64>,
    pub refused: Vec<String>,
    /// The virtual time of the event being handled. `Store::persist` reports deliveries without
    /// a time, so [`Clocked`] sets this before every handler runs.
    now: Time,
}

pub type Rec = Rc<RefCell<Recorder>>;

/// The simulator's [`Store`]: the process's slot (which survives its crashes) and the run's
/// recorder.
pub struct SimStore {
    me: ProcessId,
    durable: Rc<RefCell<Durable>>,
    log: MemoryLog<Entry<u64>>,
    glog: MemoryLog<GmEntry<u64>>,
    rec: Rec,
}

impl SimStore {
    pub fn new(me: ProcessId, slot: &Slot, rec: Rec) -> SimStore {
        SimStore { me, durable: slot.durable.clone(), log: slot.log.clone(), glog: slot.glog.clone(), rec }
    }
}

impl Store for SimStore {
    type AbLog = MemoryLog<Entry<u64>>;
    type GmLog = MemoryLog<GmEntry<u64>>;

    fn durable(&self) -> Durable {
        self.durable.borrow().clone()
    }

    fn ab_log(&mut self) -> Self::AbLog {
        self.log.clone()
    }

    fn gm_log(&mut self) -> Self::GmLog {
        self.glog.clone()
    }

    fn persist(&mut self, next_seq: u64, next: u64, delivered: &[CastId]) {
        let mut d = self.durable.borrow_mut();
        d.next_seq = next_seq;
        d.next = next;
        d.delivered.extend(delivered.iter().copied());
        let mut rec = self.rec.borrow_mut();
        let now = rec.now;
        for &id in delivered {
            rec.delivered_at.entry((self.me, id)).or_insert(now);
        }
        rec.delivered.entry(self.me).or_default().extend(delivered.iter().copied());
    }

    fn cast(&mut self, id: CastId, dst: &[GroupId], now: Time) {
        self.durable.borrow_mut().casts.push((id, dst.to_vec()));
        self.rec.borrow_mut().casts.push((id, dst.to_vec(), now));
    }

    fn step(&mut self, ids: &[CastId]) {
        let mut rec = self.rec.borrow_mut();
        if ids.is_empty() {
            *rec.steps.entry((self.me, None)).or_default() += 1;
        }
        for &id in ids {
            *rec.steps.entry((self.me, Some(id))).or_default() += 1;
        }
    }

    fn refused(&mut self, what: &str) {
        self.rec.borrow_mut().refused.push(what.to_string());
    }
}

/// A node that tells the recorder the time of every event before handling it, so that its
/// deliveries are stamped with the instant they happen.
struct Clocked {
    node: Node<SimStore>,
    rec: Rec,
}

impl Process<XCast> for Clocked {
    fn id(&self) -> ProcessId {
        self.node.id()
    }

    fn start(&mut self, now: Time, out: &mut Vec<Effect<XCast>>) {
        self.rec.borrow_mut().now = now;
        self.node.start(now, out);
    }

    fn on_event(&mut self, now: Time, event: Event<XCast>, out: &mut Vec<Effect<XCast>>) {
        self.rec.borrow_mut().now = now;
        self.node.on_event(now, event, out);
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.node.counters()
    }

    fn failure(&self) -> Option<String> {
        self.node.failure()
    }

    fn quiescent(&self) -> bool {
        self.node.quiescent()
    }
}

/// What a run gives back beyond the report: for assertions on the run itself.
pub struct RunOutcome {
    pub report: DeliveryReport,
    pub log: DeliveryLog,
    pub stats: ensemble_sim::SimStats,
    pub refused: Vec<String>,
    pub failures: Vec<String>,
    /// When the run stopped (settled, or the scenario's limit).
    pub ended: Time,
    /// Whether every caster cast everything and validity and agreement held before the limit:
    /// progress after the heal.
    pub settled: bool,
    pub counters: BTreeMap<&'static str, u64>,
    /// What the processes recorded: casts with their times, deliveries with theirs, steps.
    pub record: Recorder,
}

pub const CLIENTS: u32 = 2;
/// Casts per caster.
pub const CASTS: u64 = 10;
pub const HORIZON: Time = Time(8_000_000_000);
pub const LIMIT: Time = Time(40_000_000_000);

/// Where group members sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Member `i` of every group at site `i` (modulo the topology's sites): every group spans
    /// the sites, so each consensus round crosses the WAN.
    MemberPerSite,
    /// Group `g` entirely at site `1 + g` (modulo the sites): each group in a data centre of its
    /// own, its consensus local, as P-Store assumes.
    GroupPerSite,
}

/// What a run deploys, who casts what, and whether faults strike.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Groups of 3; group `g` is processes `3g..3g+3`.
    pub groups: u32,
    pub topology: Topology,
    pub placement: Placement,
    /// The casters outside every group, by site; they are the processes after the members.
    pub clients: Vec<usize>,
    /// Whether the first member of every group casts too.
    pub members_cast: bool,
    pub plan: CastPlan,
    /// A random fault plan (see the module documentation) until `horizon`, then healed.
    pub faults: bool,
    /// The run goes on at least until here.
    pub horizon: Time,
    /// Past the horizon, the run goes on until every cast settled or this.
    pub limit: Time,
}

impl Scenario {
    /// The faulty scenario of [`run`], for `groups` groups.
    pub fn faulty(groups: u32) -> Scenario {
        Scenario {
            groups,
            topology: Topology::wan_normal50(3),
            placement: Placement::MemberPerSite,
            // Processes are placed round-robin over the sites, and members come in threes.
            clients: (0..CLIENTS as usize).map(|c| c % 3).collect(),
            members_cast: true,
            plan: CastPlan { count: CASTS, every: Duration::from_millis(400), groups: None },
            faults: true,
            horizon: HORIZON,
            limit: LIMIT,
        }
    }

    fn members(&self) -> u32 {
        self.groups * 3
    }

    fn total(&self) -> u32 {
        self.members() + self.clients.len() as u32
    }

    fn casters(&self) -> usize {
        self.clients.len() + if self.members_cast { self.groups as usize } else { 0 }
    }

    fn site_of(&self, p: u32) -> usize {
        let sites = self.topology.sites.len();
        let members = self.members();
        if p >= members {
            return self.clients[(p - members) as usize] % sites;
        }
        match self.placement {
            Placement::MemberPerSite => (p % 3) as usize % sites,
            Placement::GroupPerSite => (1 + p as usize / 3) % sites,
        }
    }
}

/// One seeded run of `kind`, checked: the function a sweep command calls.
pub fn run_seed(kind: Kind, seed: u64) -> DeliveryReport {
    run(kind, seed).report
}

/// One seeded run of `kind` under faults, with what the tests look at besides the report.
pub fn run(kind: Kind, seed: u64) -> RunOutcome {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let groups = rng.random_range(2..=4u32);
    // The fault plan draws from the same generator, after the group count.
    simulate(kind, seed, &Scenario::faulty(groups), &mut rng)
}

/// One seeded run of `kind` in `scenario`.
pub fn run_scenario(kind: Kind, seed: u64, scenario: &Scenario) -> RunOutcome {
    simulate(kind, seed, scenario, &mut ChaCha8Rng::seed_from_u64(seed))
}

/// Runs to the horizon, then on until every cast settled or the limit.
fn simulate(kind: Kind, seed: u64, s: &Scenario, rng: &mut ChaCha8Rng) -> RunOutcome {
    let mut world = World::new(kind, seed, s, rng);
    world.run_until(s.horizon);
    let mut now = s.horizon;
    let mut done = false;
    while !done && now < s.limit {
        now = (now + Duration::from_secs(1)).min(s.limit);
        world.run_until(now);
        done = world.settled();
    }
    if s.horizon >= s.limit {
        done = world.settled();
    }
    world.finish(done)
}

/// A scenario's simulation, built and ready to run in slices: for runs that look at it on the
/// way (the latency figure counts the messages of a window).
pub struct World {
    kind: Kind,
    sim: Simulation<XCast, Slot>,
    rec: Rec,
    group_list: Vec<(GroupId, Vec<ProcessId>)>,
    crashed: BTreeSet<ProcessId>,
    /// Casts the run makes in all.
    casts: usize,
    members: u32,
    total: u32,
}

impl World {
    /// Builds the deployment, the processes and (if the scenario has faults) the fault plan,
    /// drawn from `rng`.
    pub fn new(kind: Kind, seed: u64, s: &Scenario, rng: &mut ChaCha8Rng) -> World {
        let (groups, members, total) = (s.groups, s.members(), s.total());
        let sites: Vec<usize> = (0..total).map(|p| s.site_of(p)).collect();
        let mut deployment = Deployment::one_per_machine(&sites, 2, "member");
        let group_list: Vec<(GroupId, Vec<ProcessId>)> =
            (0..groups).map(|g| (GroupId(g), (3 * g..3 * g + 3).map(ProcessId).collect())).collect();
        for (g, ms) in &group_list {
            deployment.groups.push(Group { name: format!("g{}", g.0), members: ms.clone() });
        }
        let directory = Directory::new(group_list.clone());
        // The sequencer's members tick every 20 ms (heartbeat rounds of 260 ms outlast the WAN's
        // 100 ms round trips with their jitter); everybody else every 100 ms, which is all that
        // resends every 500 ms and casts every 400 ms need: ticks are most of a run's events.
        let tick = Duration::from_millis(20);
        let sequencer = GroupConfig::new(GroupId(0), group_list[0].1.clone()).timing(13, 25);
        let setup = Setup {
            kind,
            seed,
            directory: directory.clone(),
            sequencer,
            tick,
            slow_tick: Duration::from_millis(100),
            resend: Duration::from_millis(500),
        };
        let rec: Rec = Rc::new(RefCell::new(Recorder::default()));
        let mut casters: BTreeSet<ProcessId> = (members..total).map(ProcessId).collect();
        if s.members_cast {
            casters.extend(group_list.iter().map(|(_, ms)| ms[0]));
        }
        let plan = s.plan.clone();
        let plan_of = move |p: ProcessId| -> Option<CastPlan> { casters.contains(&p).then(|| plan.clone()) };
        let mut sim: Simulation<XCast, Slot> =
            Simulation::new(s.topology.clone(), deployment, seed).expect("a valid world");
        for i in 0..total {
            let p = ProcessId(i);
            let slot = Slot {
                durable: Rc::new(RefCell::new(Durable::default())),
                log: MemoryLog::new(),
                glog: MemoryLog::new(),
            };
            let node = Node::new(setup.clone(), p, SimStore::new(p, &slot, rec.clone()), plan_of(p));
            sim.add_process(Box::new(Clocked { node, rec: rec.clone() }), Some(slot)).expect("a new process");
        }
        {
            let (setup, rec) = (setup.clone(), rec.clone());
            sim.set_recovery(Box::new(move |id, slot: Option<&mut Slot>| {
                let slot = slot.expect("every process has a slot");
                let node = Node::new(setup.clone(), id, SimStore::new(id, slot, rec.clone()), plan_of(id));
                Box::new(Clocked { node, rec: rec.clone() })
            }));
        }
        let crashed = if s.faults { plant_faults(&mut sim, seed, s, rng) } else { BTreeSet::new() };
        let casts = s.casters() * s.plan.count as usize;
        World { kind, sim, rec, group_list, crashed, casts, members, total }
    }

    pub fn run_until(&mut self, t: Time) {
        self.sim.run_until(t, &mut |_, _| {});
    }

    pub fn now(&self) -> Time {
        self.sim.now()
    }

    /// Every message sent so far, consensus and heartbeats included.
    pub fn messages_sent(&self) -> u64 {
        self.sim.stats().messages_sent
    }

    /// The processes' counters so far, added up over the processes (and their incarnations
    /// alive now).
    pub fn counters(&self) -> BTreeMap<&'static str, u64> {
        let mut counters: BTreeMap<&'static str, u64> = BTreeMap::new();
        for (_, cs, _) in self.sim.process_reports() {
            for (name, n) in cs {
                *counters.entry(name).or_default() += n;
            }
        }
        counters
    }

    /// What has been recorded so far.
    pub fn record(&self) -> std::cell::Ref<'_, Recorder> {
        self.rec.borrow()
    }

    pub fn log(&self) -> DeliveryLog {
        let rec = self.rec.borrow();
        let mut log = DeliveryLog::new();
        for (g, ms) in &self.group_list {
            log.add_group(g.0, ms.iter().map(|p| p.0));
        }
        for c in self.members..self.total {
            log.process_mut(c);
        }
        for p in &self.crashed {
            log.crash(p.0);
        }
        for (id, dst, at) in &rec.casts {
            log.add_cast(Cast::new(payload(*id), id.caster.0, dst.iter().map(|g| g.0)).at(at.0));
        }
        for (p, ids) in &rec.delivered {
            for id in ids {
                log.deliver(p.0, payload(*id));
            }
        }
        for ((p, id), n) in &rec.steps {
            log.add_steps(p.0, id.map(payload), *n);
        }
        log
    }

    /// Every caster cast all its messages (a crashed one resumes after its restart, from its
    /// persisted counter), and validity and agreement hold on the log so far.
    pub fn settled(&self) -> bool {
        self.rec.borrow().casts.len() == self.casts
            && check(&self.log(), &[Property::Validity, Property::Agreement]).ok()
    }

    /// Checks the whole log against the primitive's properties; `settled` as found by the caller.
    pub fn finish(self, settled: bool) -> RunOutcome {
        let log = self.log();
        let report = check_primitive(&log, self.kind.primitive());
        let counters = self.counters();
        let failures: Vec<String> =
            self.sim.process_reports().into_iter().filter_map(|(id, _, f)| f.map(|f| format!("{id}: {f}"))).collect();
        let record = std::mem::take(&mut *self.rec.borrow_mut());
        let refused = record.refused.clone();
        let (stats, ended) = (self.sim.stats().clone(), self.sim.now());
        RunOutcome { report, log, stats, refused, failures, ended, settled, counters, record }
    }
}

/// Draws the fault plan: message rules and a partition over everybody; crashes of one member per
/// group (a minority) and of the clients. Returns who crashes.
fn plant_faults(sim: &mut Simulation<XCast, Slot>, seed: u64, s: &Scenario, rng: &mut ChaCha8Rng) -> BTreeSet<ProcessId> {
    let (groups, members, total) = (s.groups, s.members(), s.total());
    let everybody: Vec<ProcessId> = (0..total).map(ProcessId).collect();
    let mut crashable: Vec<ProcessId> = (0..groups).map(|g| ProcessId(3 * g + rng.random_range(0..3))).collect();
    crashable.extend((members..total).map(ProcessId));
    let lose_state = seed % 2 == 1;
    let network = RandomFaults {
        processes: everybody,
        horizon: s.horizon,
        message_rules: 10,
        max_probability: 0.3,
        max_extra: Duration::from_millis(60),
        partitions: 1,
        crashes: 0,
        crashes_lose_state: lose_state,
        stalls: 0,
    };
    let crashes = RandomFaults {
        processes: crashable,
        message_rules: 0,
        partitions: 0,
        crashes: groups + 1,
        ..network.clone()
    };
    let mut plan = FaultPlan::random(rng, &network);
    plan.absorb(FaultPlan::random(rng, &crashes));
    // Drawn last, so that the faults above are the ones each seed drew before stalls existed.
    let stalls = RandomFaults { message_rules: 0, partitions: 0, crashes: 0, stalls: 2, ..network };
    plan.absorb(FaultPlan::random(rng, &stalls));
    let crashed = plan.crashes().iter().map(|c| c.process).collect();
    *sim.faults_mut() = plan;
    crashed
}
