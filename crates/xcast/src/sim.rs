//! The test protocol of the multicast primitives: group members (2 to 4 groups of 3) and client
//! processes that cast, each embedding one primitive's component, run in the simulator under a
//! seeded random fault plan, and recorded as a `DeliveryLog` for the property checker.
//!
//! [`run_seed`] is one seeded run, returning the checker's report: the tests call it for a few
//! hundred seeds, and a sweep command (10^4 runs) can call it as it is.
//!
//! What a run is, for seed `s`:
//! * 2 to 4 groups of 3 (from `s`), member `i` of a group at WAN site `i` (wan-normal50: 50 ms
//!   one way, sd 5 ms), and 2 client processes outside every group, plus the first member of
//!   every group, casting 10 messages each, one every 400 ms from about 0.2 s on; reliable
//!   multicast to a nonempty random subset of the groups, atomic broadcast to all;
//! * faults until 8 s, then healed: 10 message rules over every process (drops, duplicates,
//!   delays, reordering; probability up to 0.3, up to 60 ms extra), one partition of all
//!   processes in two, and crashes with restart of one member per group (a minority) and of
//!   the clients, losing volatile state on odd seeds (pauses on even ones);
//! * the run goes on after the heal until every message settled (validity and agreement hold on
//!   the log so far) or 40 s, whichever first.
//!
//! A crashed process's delivered ids, its cast counter and (broadcast) its delivered log
//! position live in its storage slot, which survives the crash; members of the sequencer group
//! also keep their consensus log there.

#![allow(dead_code)]

use ensemble_core::topology::Topology;
use ensemble_core::{Deployment, Effect, Event, Group, Process, ProcessId, Protocol, Storage, Time, TimerId};
use ensemble_group::multicast::{AbMsg, AtomicBroadcast, BroadcastConfig, CastId, Directory, Entry, ReliableMulticast, RmMsg};
use ensemble_group::multicast::{GenuineConfig, GenuineMulticast, GmEntry, GmMsg};
use ensemble_group::{tick_phase, GroupConfig, GroupId, MemoryLog, Ticker};
use ensemble_history::delivery::{check, check_primitive, Cast, DeliveryLog, DeliveryReport, Primitive, Property};
use ensemble_sim::{FaultPlan, RandomFaults, Simulation};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

/// Which component the processes embed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// [`ReliableMulticast`] to random sets of groups, checked as reliable multicast.
    Reliable,
    /// [`AtomicBroadcast`] with group 0 as the sequencer, checked as atomic broadcast.
    Broadcast,
    /// Deliberately broken: reliable multicast to every group (delivery on receipt, no order),
    /// checked as atomic broadcast. The checker must find order violations.
    BrokenBroadcast,
    /// [`GenuineMulticast`] to random sets of 1 to 3 groups, every group a consensus group,
    /// checked as genuine atomic multicast.
    Genuine,
    /// Deliberately broken: genuine multicast delivering at each group's own proposal instead
    /// of the final timestamp. The checker must find order violations.
    BrokenGenuine,
}

impl Kind {
    pub fn primitive(self) -> Primitive {
        match self {
            Kind::Reliable => Primitive::ReliableMulticast,
            Kind::Broadcast | Kind::BrokenBroadcast => Primitive::AtomicBroadcast,
            Kind::Genuine | Kind::BrokenGenuine => Primitive::GenuineAtomicMulticast,
        }
    }
}

#[derive(Debug)]
pub struct XCast;

impl Protocol for XCast {
    type Msg = XMsg;
    type Job = ();
    type JobResult = ();
    type Evidence = u64;
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum XMsg {
    Rm(RmMsg<u64>),
    Ab(AbMsg<u64>),
    Gm(GmMsg<u64>),
}

impl XMsg {
    fn cast_ids(&self) -> Vec<CastId> {
        match self {
            XMsg::Rm(m) => vec![m.cast_id()],
            XMsg::Ab(m) => m.cast_ids(),
            XMsg::Gm(m) => m.cast_ids(),
        }
    }
}

/// What a process persists (see the components' documentation).
#[derive(Clone, Debug, Default)]
pub struct Durable {
    pub next_seq: u64,
    pub next: u64,
    pub delivered: BTreeSet<CastId>,
}

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
    /// Sends and receipts per process and cast (None: consensus and acknowledgements).
    pub steps: BTreeMap<(ProcessId, Option<CastId>), u64>,
    pub refused: Vec<String>,
}

pub type Rec = Rc<RefCell<Recorder>>;

enum Component {
    Rm(ReliableMulticast<u64>),
    Ab(Box<AtomicBroadcast<u64>>),
    Gm(Box<GenuineMulticast<u64>>),
}

/// How a process casts: how many, how often, to which groups.
#[derive(Clone, Debug)]
pub struct CastPlan {
    pub count: u64,
    pub every: Duration,
}

const TICK: TimerId = TimerId(0);
/// Moved forward at every tick, so they fire only if ticks stopped: a paused process loses the
/// timers that fell in its pause (the tick timer among them), and a process that receives
/// nothing afterwards (a caster with nothing pending) would never notice through
/// [`Ticker::lost`]. Two of them: overlapping crash windows may keep a process down for longer
/// than one window, up to the whole horizon, which the second outlasts.
const WATCHDOGS: [(TimerId, Duration); 2] =
    [(TimerId(1), Duration::from_millis(2500)), (TimerId(2), Duration::from_secs(9))];

/// The setup every process of a run shares.
#[derive(Clone)]
pub struct Setup {
    pub kind: Kind,
    pub seed: u64,
    pub directory: Directory,
    pub sequencer: GroupConfig,
    /// The tick of the sequencer group's members, which drives OmniPaxos.
    pub tick: Duration,
    /// The tick of every other process: only resends and casts hang on it.
    pub slow_tick: Duration,
    /// How often messages are resent (casts not yet ordered, unacknowledged copies or entries).
    pub resend: Duration,
}

/// A process: a group member, a client caster, or both a member and a caster.
pub struct Node {
    me: ProcessId,
    setup: Setup,
    component: Component,
    ticker: Ticker,
    plan: Option<CastPlan>,
    /// When the next cast is due. Casts are made on ticks rather than by a timer of their own
    /// so that a paused caster (whose timers fire into the void) resumes casting with its ticks.
    next_cast: Time,
    /// Ticks since the watchdogs were last moved.
    ticks: u64,
    durable: Rc<RefCell<Durable>>,
    rec: Rec,
}

impl Node {
    pub fn new(setup: Setup, me: ProcessId, slot: &Slot, plan: Option<CastPlan>, rec: Rec) -> Node {
        let d = slot.durable.borrow().clone();
        let genuine = matches!(setup.kind, Kind::Genuine | Kind::BrokenGenuine);
        let tick = if (setup.kind == Kind::Broadcast && setup.sequencer.members.contains(&me))
            || (genuine && setup.directory.group_of(me).is_some())
        {
            setup.tick
        } else {
            setup.slow_tick
        };
        let resend_ticks = (setup.resend.as_nanos() / tick.as_nanos()).max(1) as u64;
        let component = match setup.kind {
            Kind::Reliable | Kind::BrokenBroadcast => Component::Rm(ReliableMulticast::new(
                me,
                setup.directory.clone(),
                resend_ticks,
                d.next_seq,
                d.delivered,
            )),
            Kind::Broadcast => {
                let config = BroadcastConfig {
                    directory: setup.directory.clone(),
                    sequencer: setup.sequencer.clone(),
                    resend_ticks,
                };
                let ab = AtomicBroadcast::new(me, config, slot.log.clone(), d.next_seq, d.next, d.delivered)
                    .expect("a valid sequencer group");
                Component::Ab(Box::new(ab))
            }
            Kind::Genuine | Kind::BrokenGenuine => {
                let mut config = GenuineConfig::new(setup.directory.clone(), (13, 25), resend_ticks);
                config.broken_deliver_at_proposal = setup.kind == Kind::BrokenGenuine;
                let gm = GenuineMulticast::new(me, config, slot.glog.clone(), d.next_seq, d.delivered)
                    .expect("valid groups");
                Component::Gm(Box::new(gm))
            }
        };
        Node {
            me,
            ticker: Ticker::new(tick),
            setup,
            component,
            plan,
            next_cast: Time(u64::MAX),
            ticks: 0,
            durable: slot.durable.clone(),
            rec,
        }
    }

    fn send(&self, to: ProcessId, msg: XMsg, out: &mut Vec<Effect<XCast>>) {
        self.step(self.me, &msg);
        out.push(Effect::Send { to, msg });
    }

    /// One step per cast the message works for, or one for none.
    fn step(&self, p: ProcessId, msg: &XMsg) {
        let mut rec = self.rec.borrow_mut();
        let ids = msg.cast_ids();
        if ids.is_empty() {
            *rec.steps.entry((p, None)).or_default() += 1;
        }
        for id in ids {
            *rec.steps.entry((p, Some(id))).or_default() += 1;
        }
    }

    /// Persists, then records deliveries, then sends: the order a durable implementation needs.
    fn emit(&mut self, sends: Vec<(ProcessId, XMsg)>, delivered: Vec<CastId>, out: &mut Vec<Effect<XCast>>) {
        {
            let mut d = self.durable.borrow_mut();
            match &self.component {
                Component::Rm(c) => d.next_seq = c.next_seq(),
                Component::Ab(c) => {
                    d.next_seq = c.next_seq();
                    d.next = c.next();
                }
                Component::Gm(c) => d.next_seq = c.next_seq(),
            }
            d.delivered.extend(delivered.iter().copied());
        }
        self.rec.borrow_mut().delivered.entry(self.me).or_default().extend(delivered);
        for (to, msg) in sends {
            self.send(to, msg, out);
        }
    }

    fn tick(&mut self, now: Time, out: &mut Vec<Effect<XCast>>) {
        // Re-armed about once a second, not at every tick: each setting is a queue event.
        self.ticks += 1;
        if self.ticker.interval() * self.ticks as u32 >= Duration::from_secs(1) {
            self.ticks = 0;
            for (id, after) in WATCHDOGS {
                out.push(Effect::SetTimer { id, after });
            }
        }
        if now >= self.next_cast {
            self.cast(now, out);
        }
        match &mut self.component {
            Component::Rm(c) => {
                let o = c.tick();
                let sends = o.sends.into_iter().map(|(to, m)| (to, XMsg::Rm(m))).collect();
                let ids = o.delivered.into_iter().map(|d| d.id).collect();
                self.emit(sends, ids, out);
            }
            Component::Ab(c) => {
                let o = c.tick();
                let sends = o.sends.into_iter().map(|(to, m)| (to, XMsg::Ab(m))).collect();
                let ids = o.delivered.into_iter().map(|d| d.id).collect();
                self.emit(sends, ids, out);
            }
            Component::Gm(c) => {
                let o = c.tick();
                let sends = o.sends.into_iter().map(|(to, m)| (to, XMsg::Gm(m))).collect();
                let ids = o.delivered.into_iter().map(|d| d.id).collect();
                self.emit(sends, ids, out);
            }
        }
    }

    fn cast(&mut self, now: Time, out: &mut Vec<Effect<XCast>>) {
        let Some(plan) = self.plan.clone() else { return };
        let all: Vec<GroupId> = self.setup.directory.groups().collect();
        let (id, sends, ids, dst) = match &mut self.component {
            Component::Rm(c) => {
                let seq = c.next_seq();
                if seq >= plan.count {
                    return;
                }
                let dst = match self.setup.kind {
                    Kind::Reliable => {
                        // A nonempty subset of the groups, from the seed, the caster and the
                        // message: the same after a crash.
                        let mut rng = ChaCha8Rng::seed_from_u64(self.setup.seed ^ 0x5eed);
                        rng.set_stream((u64::from(self.me.0) << 32) | seq);
                        let dst: Vec<GroupId> = all.iter().copied().filter(|_| rng.random_bool(0.5)).collect();
                        if dst.is_empty() {
                            vec![all[rng.random_range(0..all.len())]]
                        } else {
                            dst
                        }
                    }
                    _ => all.clone(),
                };
                let (id, o) = c.cast(payload(CastId { caster: self.me, seq }), dst.clone());
                let sends: Vec<(ProcessId, XMsg)> = o.sends.into_iter().map(|(to, m)| (to, XMsg::Rm(m))).collect();
                let ids: Vec<CastId> = o.delivered.into_iter().map(|d| d.id).collect();
                (id, sends, ids, dst)
            }
            Component::Ab(c) => {
                let seq = c.next_seq();
                if seq >= plan.count {
                    return;
                }
                let (id, o) = c.cast(payload(CastId { caster: self.me, seq }));
                let sends: Vec<(ProcessId, XMsg)> = o.sends.into_iter().map(|(to, m)| (to, XMsg::Ab(m))).collect();
                let ids: Vec<CastId> = o.delivered.into_iter().map(|d| d.id).collect();
                (id, sends, ids, all)
            }
            Component::Gm(c) => {
                let seq = c.next_seq();
                if seq >= plan.count {
                    return;
                }
                // 1 to 3 distinct groups, from the seed, the caster and the message: the same
                // after a crash.
                let mut rng = ChaCha8Rng::seed_from_u64(self.setup.seed ^ 0x6e6e);
                rng.set_stream((u64::from(self.me.0) << 32) | seq);
                let k = rng.random_range(1..=all.len().min(3));
                let mut pool = all.clone();
                for i in 0..k {
                    let j = rng.random_range(i..pool.len());
                    pool.swap(i, j);
                }
                let mut dst = pool[..k].to_vec();
                dst.sort();
                let (id, o) = c.cast(payload(CastId { caster: self.me, seq }), dst.clone());
                let sends: Vec<(ProcessId, XMsg)> = o.sends.into_iter().map(|(to, m)| (to, XMsg::Gm(m))).collect();
                let ids: Vec<CastId> = o.delivered.into_iter().map(|d| d.id).collect();
                (id, sends, ids, dst)
            }
        };
        self.rec.borrow_mut().casts.push((id, dst, now));
        self.emit(sends, ids, out);
        self.next_cast = now + plan.every;
    }
}

/// The checker's number for a cast.
pub fn payload(id: CastId) -> u64 {
    u64::from(id.caster.0) * 1_000_000 + id.seq
}

impl Process<XCast> for Node {
    fn id(&self) -> ProcessId {
        self.me
    }

    fn start(&mut self, now: Time, out: &mut Vec<Effect<XCast>>) {
        let phase = tick_phase(self.setup.seed, self.me, self.ticker.interval());
        out.push(Effect::SetTimer { id: TICK, after: self.ticker.start(now, phase) });
        // Armed here too: a process paused before its first tick must find its ticks again.
        for (id, after) in WATCHDOGS {
            out.push(Effect::SetTimer { id, after });
        }
        if self.plan.is_some() {
            self.next_cast = now + Duration::from_millis(200) + phase * 10;
        }
    }

    fn on_event(&mut self, now: Time, event: Event<XCast>, out: &mut Vec<Effect<XCast>>) {
        if !matches!(event, Event::Timer(TICK)) && self.ticker.lost(now) {
            out.push(Effect::SetTimer { id: TICK, after: self.ticker.fired(now) });
            self.tick(now, out);
        }
        match event {
            Event::Message { from, msg } => {
                self.step(self.me, &msg);
                let result = match (&mut self.component, msg) {
                    (Component::Rm(c), XMsg::Rm(m)) => c.on_message(from, m).map_err(|e| e.to_string()).map(|o| {
                        let s: Vec<(ProcessId, XMsg)> = o.sends.into_iter().map(|(to, m)| (to, XMsg::Rm(m))).collect();
                        (s, o.delivered.into_iter().map(|d| d.id).collect::<Vec<_>>())
                    }),
                    (Component::Ab(c), XMsg::Ab(m)) => c.on_message(from, m).map_err(|e| e.to_string()).map(|o| {
                        let s: Vec<(ProcessId, XMsg)> = o.sends.into_iter().map(|(to, m)| (to, XMsg::Ab(m))).collect();
                        (s, o.delivered.into_iter().map(|d| d.id).collect::<Vec<_>>())
                    }),
                    (Component::Gm(c), XMsg::Gm(m)) => c.on_message(from, m).map_err(|e| e.to_string()).map(|o| {
                        let s: Vec<(ProcessId, XMsg)> = o.sends.into_iter().map(|(to, m)| (to, XMsg::Gm(m))).collect();
                        (s, o.delivered.into_iter().map(|d| d.id).collect::<Vec<_>>())
                    }),
                    (_, m) => Err(format!("a message of another primitive: {m:?}")),
                };
                match result {
                    Ok((sends, ids)) => self.emit(sends, ids, out),
                    Err(what) => {
                        self.rec.borrow_mut().refused.push(what.clone());
                        out.push(Effect::Refuse { from, what });
                    }
                }
            }
            Event::Timer(TICK) => {
                out.push(Effect::SetTimer { id: TICK, after: self.ticker.fired(now) });
                self.tick(now, out);
            }
            Event::Timer(_) | Event::Request(_) | Event::StorageDone { .. } => {}
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        match &self.component {
            Component::Rm(c) => vec![("resent", c.resent), ("pending", c.pending() as u64)],
            Component::Ab(c) => {
                let k = c.counters();
                vec![
                    ("casts_resent", k.casts_resent),
                    ("entries_resent", k.entries_resent),
                    ("duplicates_skipped", k.duplicates_skipped),
                    ("casting", c.casting() as u64),
                ]
            }
            Component::Gm(c) => {
                let k = c.counters();
                vec![
                    ("casts_resent", k.casts_resent),
                    ("proposals_resent", k.proposals_resent),
                    ("entries_resent", k.entries_resent),
                    ("duplicates_skipped", k.duplicates_skipped),
                    ("fast_path", k.fast_path),
                    ("casting", c.casting() as u64),
                ]
            }
        }
    }

    fn failure(&self) -> Option<String> {
        match &self.component {
            Component::Rm(_) => None,
            Component::Ab(c) => c.failure(),
            Component::Gm(c) => c.failure(),
        }
    }
}

/// What a run gives back beyond the report: for assertions on the run itself.
pub struct RunOutcome {
    pub report: DeliveryReport,
    pub log: DeliveryLog,
    pub stats: ensemble_sim::SimStats,
    pub refused: Vec<String>,
    pub failures: Vec<String>,
    /// When the run stopped (settled, or the 40 s limit).
    pub ended: Time,
    pub counters: BTreeMap<&'static str, u64>,
}

pub const CLIENTS: u32 = 2;
/// Casts per caster.
pub const CASTS: u64 = 10;
pub const HORIZON: Time = Time(8_000_000_000);
pub const LIMIT: Time = Time(40_000_000_000);

/// One seeded run of `kind`, checked: the function a sweep command calls.
pub fn run_seed(kind: Kind, seed: u64) -> DeliveryReport {
    run(kind, seed).report
}

/// One seeded run of `kind`, with what the tests look at besides the report.
pub fn run(kind: Kind, seed: u64) -> RunOutcome {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let groups = rng.random_range(2..=4u32);
    let members = groups * 3;
    let total = members + CLIENTS;
    let topology = Topology::wan_normal50(3);
    let sites: Vec<usize> = (0..total as usize).map(|i| i % 3).collect();
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
    // The clients and the first member of every group cast.
    let casters: BTreeSet<ProcessId> =
        group_list.iter().map(|(_, ms)| ms[0]).chain((members..total).map(ProcessId)).collect();
    let plan_of = move |p: ProcessId| -> Option<CastPlan> {
        casters.contains(&p).then_some(CastPlan { count: CASTS, every: Duration::from_millis(400) })
    };
    let mut sim: Simulation<XCast, Slot> = Simulation::new(topology, deployment, seed).expect("a valid world");
    for i in 0..total {
        let p = ProcessId(i);
        let slot = Slot {
            durable: Rc::new(RefCell::new(Durable::default())),
            log: MemoryLog::new(),
            glog: MemoryLog::new(),
        };
        let node = Node::new(setup.clone(), p, &slot, plan_of(p), rec.clone());
        sim.add_process(Box::new(node), Some(slot)).expect("a new process");
    }
    {
        let (setup, rec) = (setup.clone(), rec.clone());
        sim.set_recovery(Box::new(move |id, slot: Option<&mut Slot>| {
            let slot = slot.expect("every process has a slot");
            Box::new(Node::new(setup.clone(), id, slot, plan_of(id), rec.clone()))
        }));
    }

    // The fault plan: message rules and a partition over everybody; crashes of one member per
    // group (a minority) and of the clients.
    let everybody: Vec<ProcessId> = (0..total).map(ProcessId).collect();
    let mut crashable: Vec<ProcessId> = (0..groups).map(|g| ProcessId(3 * g + rng.random_range(0..3))).collect();
    crashable.extend((members..total).map(ProcessId));
    let lose_state = seed % 2 == 1;
    let network = RandomFaults {
        processes: everybody,
        horizon: HORIZON,
        message_rules: 10,
        max_probability: 0.3,
        max_extra: Duration::from_millis(60),
        partitions: 1,
        crashes: 0,
        crashes_lose_state: lose_state,
    };
    let crashes = RandomFaults {
        processes: crashable,
        message_rules: 0,
        partitions: 0,
        crashes: groups + 1,
        ..network.clone()
    };
    let mut plan = FaultPlan::random(&mut rng, &network);
    for c in FaultPlan::random(&mut rng, &crashes).crashes() {
        if c.loses_state {
            plan.crash_losing_state(c.process, c.at, c.restart);
        } else {
            plan.crash(c.process, c.at, c.restart);
        }
    }
    let crashed: BTreeSet<ProcessId> = plan.crashes().iter().map(|c| c.process).collect();
    *sim.faults_mut() = plan;

    let build = |rec: &Recorder| -> DeliveryLog {
        let mut log = DeliveryLog::new();
        for (g, ms) in &group_list {
            log.add_group(g.0, ms.iter().map(|p| p.0));
        }
        for c in members..total {
            log.process_mut(c);
        }
        for p in &crashed {
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
    };

    sim.run_until(HORIZON, &mut |_, _| {});
    let mut now = HORIZON;
    while now < LIMIT {
        now = now + Duration::from_secs(1);
        sim.run_until(now, &mut |_, _| {});
        let log = build(&rec.borrow());
        // Settled: every caster cast all its messages (a crashed one resumes after its restart,
        // from its persisted counter), and validity and agreement hold on the log so far.
        let all_cast = log.casts.len() == (CLIENTS + groups) as usize * CASTS as usize;
        if all_cast && check(&log, &[Property::Validity, Property::Agreement]).ok() {
            break;
        }
    }
    let log = build(&rec.borrow());
    let report = check_primitive(&log, kind.primitive());
    let mut counters: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut failures = Vec::new();
    for (id, cs, failure) in sim.process_reports() {
        for (name, n) in cs {
            *counters.entry(name).or_default() += n;
        }
        if let Some(f) = failure {
            failures.push(format!("{id}: {f}"));
        }
    }
    let refused = rec.borrow().refused.clone();
    RunOutcome { report, log, stats: sim.stats().clone(), refused, failures, ended: now, counters }
}
