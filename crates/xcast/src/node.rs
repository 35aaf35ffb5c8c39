//! The process of every multicast run: a group member, a caster outside the groups, or both,
//! embedding one primitive's component ([`Kind`]), casting on a plan ([`CastPlan`]), and keeping
//! what it must across a crash in a [`Store`]: the simulator's survives in memory
//! (`crate::sim`), the real runtime's is on disk (`crate::real`).
//!
//! One [`Node`] serves both: the same code runs under the simulator's faults and as an OS
//! process that `kill -9` stops for real.

use ensemble_core::{Effect, Event, Process, ProcessId, Protocol, Time, TimerId};
use ensemble_group::multicast::{AbMsg, AtomicBroadcast, BroadcastConfig, CastId, Directory, Entry, ReliableMulticast, RmMsg};
use ensemble_group::multicast::{GenuineConfig, GenuineMulticast, GmEntry, GmMsg};
use ensemble_group::{tick_phase, DurableLog, GroupConfig, GroupId, Ticker};
use ensemble_history::delivery::Primitive;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::Duration;

/// Which component the processes embed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
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
    /// [`GenuineMulticast`] in its per-group mode (P-DUR's per-partition streams) to random
    /// sets of 1 to 3 groups, checked as per-partition streams.
    Streams,
    /// Deliberately broken: per-partition streams (each group delivers at its own proposal, in
    /// its log order) checked as genuine atomic multicast. The checker must find order
    /// violations.
    BrokenGenuine,
}

impl Kind {
    /// The primitives a user runs (the broken ones are the checker's tests').
    pub const WORKING: [Kind; 4] = [Kind::Reliable, Kind::Broadcast, Kind::Genuine, Kind::Streams];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Reliable => "reliable",
            Kind::Broadcast => "broadcast",
            Kind::BrokenBroadcast => "broken-broadcast",
            Kind::Genuine => "genuine",
            Kind::Streams => "streams",
            Kind::BrokenGenuine => "broken-genuine",
        }
    }

    /// A working primitive by its command-line name.
    pub fn parse(name: &str) -> Result<Kind, String> {
        Kind::WORKING.into_iter().find(|k| k.name() == name).ok_or_else(|| {
            let known: Vec<&str> = Kind::WORKING.iter().map(|k| k.name()).collect();
            format!("`{name}` is not a multicast primitive (known: {})", known.join(", "))
        })
    }

    pub fn primitive(self) -> Primitive {
        match self {
            Kind::Reliable => Primitive::ReliableMulticast,
            Kind::Broadcast | Kind::BrokenBroadcast => Primitive::AtomicBroadcast,
            Kind::Genuine | Kind::BrokenGenuine => Primitive::GenuineAtomicMulticast,
            Kind::Streams => Primitive::PartitionStreams,
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
/// What a process persists (see the components' documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Durable {
    pub next_seq: u64,
    pub next: u64,
    pub delivered: BTreeSet<CastId>,
    /// Every cast this process made, with its destinations, in order: a rebuilt caster casts
    /// again those it has not delivered itself, since a cast whose messages the crash cut off
    /// would otherwise be lost ([`Node::new`]).
    pub casts: Vec<(CastId, Vec<GroupId>)>,
}

/// Where a process keeps what survives its crashes, and where a run's record of it goes.
/// Every method that persists returns once the data is durable: the node calls them before the
/// handler's sends leave.
pub trait Store {
    type AbLog: DurableLog<Entry<u64>>;
    type GmLog: DurableLog<GmEntry<u64>>;
    /// What the process persisted before (default at first start).
    fn durable(&self) -> Durable;
    /// The sequencer group's log, for a member of it (taken once per incarnation).
    fn ab_log(&mut self) -> Self::AbLog;
    /// The group's log for genuine multicast, for a group member (taken once per incarnation).
    fn gm_log(&mut self) -> Self::GmLog;
    /// The cast counter, the broadcast position and the ids just delivered, in delivery order.
    fn persist(&mut self, next_seq: u64, next: u64, delivered: &[CastId]);
    /// A cast made at `now`, to `dst`.
    fn cast(&mut self, id: CastId, dst: &[GroupId], now: Time);
    /// A message this process sent or received, working for these casts (none: consensus and
    /// acknowledgements). For the genuineness check; a store may ignore it.
    fn step(&mut self, ids: &[CastId]);
    /// A message refused, and why.
    fn refused(&mut self, what: &str);
}

enum Component<S: Store> {
    Rm(ReliableMulticast<u64>),
    Ab(Box<AtomicBroadcast<u64, S::AbLog>>),
    Gm(Box<GenuineMulticast<u64, S::GmLog>>),
}

/// How a process casts: how many, how often, to which groups.
#[derive(Clone, Debug)]
pub struct CastPlan {
    pub count: u64,
    pub every: Duration,
    /// To how many groups (distinct, drawn from the seed, the caster and the message); `None`:
    /// the kind's own choice (a random nonempty subset for reliable multicast, 1 to 3 groups for
    /// genuine multicast, every group for broadcast).
    pub groups: Option<usize>,
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
pub struct Node<S: Store> {
    me: ProcessId,
    setup: Setup,
    component: Component<S>,
    ticker: Ticker,
    plan: Option<CastPlan>,
    /// When the next cast is due. Casts are made on ticks rather than by a timer of their own
    /// so that a paused caster (whose timers fire into the void) resumes casting with its ticks.
    next_cast: Time,
    /// Ticks since the watchdogs were last moved.
    ticks: u64,
    store: S,
    /// What casting again the casts of earlier incarnations sent and delivered (a group member
    /// may apply its replayed log as it proposes), emitted at start.
    resumed: (Vec<(ProcessId, XMsg)>, Vec<CastId>),
}

impl<S: Store> Node<S> {
    pub fn new(setup: Setup, me: ProcessId, mut store: S, plan: Option<CastPlan>) -> Node<S> {
        let d = store.durable();
        let genuine = matches!(setup.kind, Kind::Genuine | Kind::Streams | Kind::BrokenGenuine);
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
                d.delivered.clone(),
            )),
            Kind::Broadcast => {
                let config = BroadcastConfig {
                    directory: setup.directory.clone(),
                    sequencer: setup.sequencer.clone(),
                    resend_ticks,
                };
                let ab = AtomicBroadcast::new(me, config, store.ab_log(), d.next_seq, d.next, d.delivered.clone())
                    .expect("a valid sequencer group");
                Component::Ab(Box::new(ab))
            }
            Kind::Genuine | Kind::Streams | Kind::BrokenGenuine => {
                let config = if setup.kind == Kind::Genuine {
                    GenuineConfig::new(setup.directory.clone(), (13, 25), resend_ticks)
                } else {
                    GenuineConfig::partition_streams(setup.directory.clone(), (13, 25), resend_ticks)
                };
                let gm = GenuineMulticast::new(me, config, store.gm_log(), d.next_seq, d.delivered.clone())
                    .expect("valid groups");
                Component::Gm(Box::new(gm))
            }
        };
        let mut node = Node {
            me,
            ticker: Ticker::new(tick),
            setup,
            component,
            plan,
            next_cast: Time(u64::MAX),
            ticks: 0,
            store,
            resumed: (Vec::new(), Vec::new()),
        };
        // A cast this process delivered itself got through (ordered, or held by a majority of
        // its group); any other may have been cut off by the crash, before any destination had
        // it. Casting it again under its id is harmless: destinations deliver an id once.
        for (id, dst) in d.casts.iter().filter(|(id, _)| !d.delivered.contains(id)) {
            let m = payload(*id);
            let (sends, delivered): (Vec<(ProcessId, XMsg)>, Vec<CastId>) = match &mut node.component {
                Component::Rm(c) => {
                    let o = c.resume(*id, m, dst.clone());
                    (o.sends.into_iter().map(|(to, m)| (to, XMsg::Rm(m))).collect(), o.delivered.into_iter().map(|d| d.id).collect())
                }
                Component::Ab(c) => {
                    let o = c.resume(*id, m);
                    (o.sends.into_iter().map(|(to, m)| (to, XMsg::Ab(m))).collect(), o.delivered.into_iter().map(|d| d.id).collect())
                }
                Component::Gm(c) => {
                    let o = c.resume(*id, m, dst.clone());
                    (o.sends.into_iter().map(|(to, m)| (to, XMsg::Gm(m))).collect(), o.delivered.into_iter().map(|d| d.id).collect())
                }
            };
            // Deliveries too: a member's first call into its group applies the replayed log.
            node.resumed.0.extend(sends);
            node.resumed.1.extend(delivered);
        }
        node
    }

    fn send(&mut self, to: ProcessId, msg: XMsg, out: &mut Vec<Effect<XCast>>) {
        self.store.step(&msg.cast_ids());
        out.push(Effect::Send { to, msg });
    }

    /// Persists, then records deliveries, then sends: the order a durable implementation needs.
    fn emit(&mut self, sends: Vec<(ProcessId, XMsg)>, delivered: Vec<CastId>, out: &mut Vec<Effect<XCast>>) {
        let (next_seq, next) = match &self.component {
            Component::Rm(c) => (c.next_seq(), 0),
            Component::Ab(c) => (c.next_seq(), c.next()),
            Component::Gm(c) => (c.next_seq(), 0),
        };
        self.store.persist(next_seq, next, &delivered);
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
            // Every cast due since the last tick, so that a caster casting faster than it ticks
            // keeps its rate; one more than a tick behind (paused) resumes at its rate from
            // now rather than in a burst.
            if now.0.saturating_sub(self.next_cast.0) > self.ticker.interval().as_nanos() as u64 {
                self.next_cast = now;
            }
            while now >= self.next_cast && self.cast(now, out) {}
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

    /// Makes the cast due at `next_cast`, if any is left; says whether it did.
    fn cast(&mut self, now: Time, out: &mut Vec<Effect<XCast>>) -> bool {
        let Some(plan) = self.plan.clone() else { return false };
        let seq = match &self.component {
            Component::Rm(c) => c.next_seq(),
            Component::Ab(c) => c.next_seq(),
            Component::Gm(c) => c.next_seq(),
        };
        if seq >= plan.count {
            return false;
        }
        let dst = self.destinations(&plan, seq);
        let m = payload(CastId { caster: self.me, seq });
        let (id, sends, ids) = match &mut self.component {
            Component::Rm(c) => {
                let (id, o) = c.cast(m, dst.clone());
                let sends: Vec<(ProcessId, XMsg)> = o.sends.into_iter().map(|(to, m)| (to, XMsg::Rm(m))).collect();
                (id, sends, o.delivered.into_iter().map(|d| d.id).collect::<Vec<_>>())
            }
            Component::Ab(c) => {
                let (id, o) = c.cast(m);
                let sends: Vec<(ProcessId, XMsg)> = o.sends.into_iter().map(|(to, m)| (to, XMsg::Ab(m))).collect();
                (id, sends, o.delivered.into_iter().map(|d| d.id).collect::<Vec<_>>())
            }
            Component::Gm(c) => {
                let (id, o) = c.cast(m, dst.clone());
                let sends: Vec<(ProcessId, XMsg)> = o.sends.into_iter().map(|(to, m)| (to, XMsg::Gm(m))).collect();
                (id, sends, o.delivered.into_iter().map(|d| d.id).collect::<Vec<_>>())
            }
        };
        // Recorded (durably, in the real runtime) before the cast's messages leave.
        self.store.cast(id, &dst, now);
        self.emit(sends, ids, out);
        self.next_cast = self.next_cast + plan.every;
        true
    }

    /// The groups cast `seq` goes to: drawn from the seed, the caster and the message, so the
    /// same after a crash.
    fn destinations(&self, plan: &CastPlan, seq: u64) -> Vec<GroupId> {
        let all: Vec<GroupId> = self.setup.directory.groups().collect();
        // `k` distinct groups.
        let pick = |salt: u64, k: Option<usize>| -> Vec<GroupId> {
            let mut rng = ChaCha8Rng::seed_from_u64(self.setup.seed ^ salt);
            rng.set_stream((u64::from(self.me.0) << 32) | seq);
            let k = k.unwrap_or_else(|| rng.random_range(1..=all.len().min(3))).min(all.len());
            let mut pool = all.clone();
            for i in 0..k {
                let j = rng.random_range(i..pool.len());
                pool.swap(i, j);
            }
            let mut dst = pool[..k].to_vec();
            dst.sort();
            dst
        };
        match (self.setup.kind, plan.groups) {
            (Kind::Broadcast | Kind::BrokenBroadcast, _) => all,
            (_, Some(k)) => pick(0x9a0c, Some(k)),
            (Kind::Reliable, None) => {
                // A nonempty subset of the groups.
                let mut rng = ChaCha8Rng::seed_from_u64(self.setup.seed ^ 0x5eed);
                rng.set_stream((u64::from(self.me.0) << 32) | seq);
                let dst: Vec<GroupId> = all.iter().copied().filter(|_| rng.random_bool(0.5)).collect();
                if dst.is_empty() {
                    vec![all[rng.random_range(0..all.len())]]
                } else {
                    dst
                }
            }
            // 1 to 3 distinct groups.
            (Kind::Genuine | Kind::Streams | Kind::BrokenGenuine, None) => pick(0x6e6e, None),
        }
    }
}

/// The checker's number for a cast.
pub fn payload(id: CastId) -> u64 {
    u64::from(id.caster.0) * 1_000_000 + id.seq
}

impl<S: Store> Process<XCast> for Node<S> {
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
        let (sends, delivered) = std::mem::take(&mut self.resumed);
        self.emit(sends, delivered, out);
    }

    fn on_event(&mut self, now: Time, event: Event<XCast>, out: &mut Vec<Effect<XCast>>) {
        if !matches!(event, Event::Timer(TICK)) && self.ticker.lost(now) {
            out.push(Effect::SetTimer { id: TICK, after: self.ticker.fired(now) });
            self.tick(now, out);
        }
        match event {
            Event::Message { from, msg } => {
                self.store.step(&msg.cast_ids());
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
                        self.store.refused(&what);
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

