//! Two-phase commit at work: coordinators and participants embedding
//! [`ensemble_group::commit`], run in the simulator under seeded random fault plans and recorded
//! as a [`CommitmentLog`] for the checker (`ensemble_history::commitment`); and fault-free runs
//! that measure latency and messages per transaction for the `xcast-latency` figure.
//!
//! [`run_seed`] is one seeded run, returning the checker's report: the tests call it for a few
//! hundred seeds, and a sweep command (10^4 runs) can call it as it is.
//!
//! What a run is, for seed `s` ([`run`]):
//! * 2 coordinators (`p0`, `p1`: the clients, which begin transactions) and 4 to 6 participants
//!   (from `s`), process `i` at WAN site `i mod 3` (wan-normal50: 50 ms one way, sd 5 ms);
//! * each coordinator begins [`TXNS`] transactions, one every 250 ms from about 0.2 s on, each on
//!   1 to 3 distinct participants and 1 or 2 of [`KEYS`] keys (from `s`, the coordinator and the
//!   transaction's number, so the same after a crash); two transactions commute when their key
//!   sets are disjoint, so with this few keys and about 150 ms per commit they conflict often
//!   and preemptive aborts happen;
//! * a participant's certification (the stand-in for G-DUR's `certify`) votes *yes* with
//!   probability 0.9, drawn from `s`, the transaction and the participant: the same vote after a
//!   crash;
//! * faults until [`HORIZON`] (5 s), then healed: 8 message rules over every process (drops,
//!   duplicates, delays, reordering; probability up to 0.3, up to 60 ms extra), one partition of
//!   all processes in two, and 3 crashes with restart, 2 of any processes and 1 of a
//!   coordinator (2PC needs no majority: it waits), losing volatile state on odd seeds (pauses
//!   on even ones), and 2 stalls of any processes, up to 1.25 s each; every third seed the
//!   coordinators also abort on a vote timeout (1 s), and on half the seeds certification
//!   answers at the participant's next tick (so transactions wait in certification, preempt
//!   others meanwhile, and are lost in crashes);
//! * the run goes on after the heal until settled (every transaction begun, decided by its
//!   coordinator and every participant) or [`LIMIT`] (30 s).
//!
//! A process's commit log lives in its storage slot ([`Slot`]), which survives its crashes;
//! everything else (votes received by a coordinator, certifications in progress) is volatile.
//! Ticks every 100 ms; resends every 500 ms (5 ticks), above the 4Δ a fault-free transaction
//! takes, so that fault-free runs send exactly 4 messages per participant.

use ensemble_core::topology::Topology;
use ensemble_core::{Deployment, Effect, Event, Process, ProcessId, Protocol, Storage, Time, TimerId};
use ensemble_group::commit::{Decided, Voted};
use ensemble_group::{
    tick_phase, CommitConfig, CommitError, CommitMsg, CommitOutput, Commute, MemoryCommitLog, Role, Ticker,
    TwoPhaseCommit, TxnId,
};
use ensemble_history::commitment::{self, CommitmentLog, CommitmentReport};
use ensemble_sim::{FaultPlan, RandomFaults, SimStats, Simulation};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

#[derive(Debug)]
pub struct TwoPc;

impl Protocol for TwoPc {
    type Msg = CommitMsg<Txn>;
    type Job = ();
    type JobResult = ();
    type Evidence = u64;
}

/// A transaction as the participants see it: the keys it touches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    pub keys: Vec<u32>,
}

impl Commute for Txn {
    fn commutes(&self, other: &Self) -> bool {
        self.keys.iter().all(|k| !other.keys.contains(k))
    }
}

/// A process's storage in the simulator: its commit log, which survives its crashes.
pub struct Slot {
    pub log: MemoryCommitLog<Txn>,
}

impl Storage for Slot {
    type Job = ();
    type Result = ();
    fn run(&mut self, _job: &()) {}
}

/// How many participants a transaction has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fanout {
    /// 1 to this many distinct participants, drawn per transaction.
    UpTo(usize),
    /// Exactly this many (the first ones).
    Exactly(usize),
}

/// The setup every process of a run shares.
#[derive(Clone, Debug)]
pub struct Setup {
    pub seed: u64,
    pub coordinators: Vec<ProcessId>,
    pub participants: Vec<ProcessId>,
    /// Transactions each coordinator begins.
    pub txns: u64,
    /// Between two begins of one coordinator.
    pub every: Duration,
    pub fanout: Fanout,
    /// Keys transactions draw from; `None`: each transaction has a key of its own (no conflicts).
    pub keys: Option<u32>,
    /// Probability that a participant's certification says *yes*.
    pub yes: f64,
    /// Certification answers at the participant's next tick rather than at once, so that
    /// transactions wait in certification (and preempt later ones, and are lost in crashes).
    pub certify_later: bool,
    pub tick: Duration,
    pub config: CommitConfig,
}

impl Setup {
    /// Transaction `seq` of `coordinator`: a pure function of the seed, so a coordinator rebuilt
    /// after a crash begins the same transactions.
    pub fn transaction(&self, coordinator: ProcessId, seq: u64) -> (Txn, Vec<ProcessId>) {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ 0x2bc0_7a2e);
        rng.set_stream((u64::from(coordinator.0) << 32) | seq);
        let k = match self.fanout {
            Fanout::UpTo(n) => rng.random_range(1..=n.min(self.participants.len())),
            Fanout::Exactly(n) => n.min(self.participants.len()),
        };
        let mut pool = self.participants.clone();
        if matches!(self.fanout, Fanout::UpTo(_)) {
            for i in 0..k {
                let j = rng.random_range(i..pool.len());
                pool.swap(i, j);
            }
        }
        let mut participants = pool[..k].to_vec();
        participants.sort();
        let keys = match self.keys {
            Some(n) => {
                let a = rng.random_range(0..n);
                let b = rng.random_range(0..n);
                if rng.random_bool(0.5) || a == b {
                    vec![a]
                } else {
                    vec![a.min(b), a.max(b)]
                }
            }
            None => vec![u32::try_from(txn_no(TxnId { coordinator, seq })).unwrap_or(u32::MAX)],
        };
        (Txn { keys }, participants)
    }

    /// The certification stand-in: `participant`'s vote on `txn`, the same in every incarnation.
    pub fn certify(&self, participant: ProcessId, txn: TxnId) -> bool {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ 0xce27_1f1e);
        rng.set_stream((u64::from(txn.coordinator.0) << 48) ^ (txn.seq << 16) ^ u64::from(participant.0));
        rng.random_bool(self.yes)
    }
}

/// A transaction's number in the checker's log: `T1003` is coordinator 1's transaction 3.
pub fn txn_no(txn: TxnId) -> u64 {
    u64::from(txn.coordinator.0) * 1000 + txn.seq
}

/// What a process did, when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Voted(Voted),
    Decided(Decided),
}

/// A transaction begun.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Begun {
    pub at: Time,
    pub participants: Vec<ProcessId>,
    pub txn: Txn,
}

/// What the test sees of a run, across incarnations.
#[derive(Debug, Default, PartialEq)]
pub struct Recorder {
    pub begun: BTreeMap<TxnId, Begun>,
    /// Votes and decisions, in the order they were taken.
    pub steps: Vec<(Time, ProcessId, Step)>,
    /// Messages sent for each transaction, resends included.
    pub messages: BTreeMap<TxnId, u64>,
    pub refused: Vec<String>,
}

pub type Rec = Rc<RefCell<Recorder>>;

const TICK: TimerId = TimerId(0);
/// Moved forward about once a second, so they fire only if ticks stopped: a paused process
/// loses the timers that fell in its pause, and one that then receives nothing would never
/// notice through [`Ticker::lost`] (see `sim.rs`). Two, because overlapping crash windows may
/// keep a process down longer than the first outlasts.
const WATCHDOGS: [(TimerId, Duration); 2] =
    [(TimerId(1), Duration::from_millis(2500)), (TimerId(2), Duration::from_secs(9))];

type Component = TwoPhaseCommit<Txn, MemoryCommitLog<Txn>>;

/// A coordinator or a participant (the component serves both roles; the setup says which
/// processes begin transactions).
pub struct Node {
    me: ProcessId,
    setup: Setup,
    component: Component,
    ticker: Ticker,
    coordinator: bool,
    /// When the next begin is due; begins are made on ticks, so a paused coordinator resumes
    /// beginning with its ticks.
    next_begin: Time,
    ticks: u64,
    /// What recovery from the log produced, emitted at `start`.
    recovered: Option<CommitOutput<Txn>>,
    /// Certifications to answer at the next tick (volatile, as in a real certifier).
    certifying: Vec<TxnId>,
    failure: Option<String>,
    rec: Rec,
}

impl Node {
    pub fn new(setup: Setup, me: ProcessId, slot: &Slot, rec: Rec) -> Node {
        let (component, recovered) =
            TwoPhaseCommit::open(me, setup.config.clone(), slot.log.clone()).expect("the memory log replays");
        Node {
            me,
            ticker: Ticker::new(setup.tick),
            coordinator: setup.coordinators.contains(&me),
            setup,
            component,
            next_begin: Time(u64::MAX),
            ticks: 0,
            recovered: Some(recovered),
            certifying: Vec::new(),
            failure: None,
            rec,
        }
    }

    /// Records the votes and decisions (the log is already written), answers the vote
    /// requests, then sends.
    fn emit(&mut self, now: Time, out: CommitOutput<Txn>, effects: &mut Vec<Effect<TwoPc>>) {
        {
            let mut rec = self.rec.borrow_mut();
            rec.steps.extend(out.voted.iter().map(|v| (now, self.me, Step::Voted(*v))));
            rec.steps.extend(out.decided.iter().map(|d| (now, self.me, Step::Decided(*d))));
            for (_, m) in &out.sends {
                *rec.messages.entry(m.txn()).or_default() += 1;
            }
        }
        for (to, msg) in out.sends {
            effects.push(Effect::Send { to, msg });
        }
        for request in out.vote_requests {
            if self.setup.certify_later {
                self.certifying.push(request.txn);
            } else {
                self.certified(now, request.txn, effects);
            }
        }
    }

    fn certified(&mut self, now: Time, txn: TxnId, effects: &mut Vec<Effect<TwoPc>>) {
        let yes = self.setup.certify(self.me, txn);
        let result = self.component.vote(txn, yes);
        self.handle(now, result, None, effects);
    }

    fn handle(
        &mut self,
        now: Time,
        result: Result<CommitOutput<Txn>, CommitError>,
        from: Option<ProcessId>,
        effects: &mut Vec<Effect<TwoPc>>,
    ) {
        match result {
            Ok(out) => self.emit(now, out, effects),
            Err(CommitError::Refused(r)) if from.is_some() => {
                let what = r.to_string();
                self.rec.borrow_mut().refused.push(what.clone());
                effects.push(Effect::Refuse { from: from.expect("guarded"), what });
            }
            Err(e) => {
                self.failure.get_or_insert(e.to_string());
            }
        }
    }

    fn tick(&mut self, now: Time, effects: &mut Vec<Effect<TwoPc>>) {
        self.ticks += 1;
        if self.ticker.interval() * self.ticks as u32 >= Duration::from_secs(1) {
            self.ticks = 0;
            for (id, after) in WATCHDOGS {
                effects.push(Effect::SetTimer { id, after });
            }
        }
        for txn in std::mem::take(&mut self.certifying) {
            self.certified(now, txn, effects);
        }
        if self.coordinator && now >= self.next_begin && self.component.next_seq() < self.setup.txns {
            let (txn, participants) = self.setup.transaction(self.me, self.component.next_seq());
            match self.component.begin(txn.clone(), participants.clone()) {
                Ok((id, out)) => {
                    self.rec.borrow_mut().begun.insert(id, Begun { at: now, participants, txn });
                    self.emit(now, out, effects);
                }
                Err(e) => {
                    self.failure.get_or_insert(e.to_string());
                }
            }
            self.next_begin = now + self.setup.every;
        }
        let result = self.component.tick();
        self.handle(now, result, None, effects);
    }
}

impl Process<TwoPc> for Node {
    fn id(&self) -> ProcessId {
        self.me
    }

    fn start(&mut self, now: Time, effects: &mut Vec<Effect<TwoPc>>) {
        let phase = tick_phase(self.setup.seed, self.me, self.ticker.interval());
        effects.push(Effect::SetTimer { id: TICK, after: self.ticker.start(now, phase) });
        for (id, after) in WATCHDOGS {
            effects.push(Effect::SetTimer { id, after });
        }
        if self.coordinator {
            self.next_begin = now + Duration::from_millis(200) + phase;
        }
        if let Some(out) = self.recovered.take() {
            self.emit(now, out, effects);
        }
    }

    fn on_event(&mut self, now: Time, event: Event<TwoPc>, effects: &mut Vec<Effect<TwoPc>>) {
        if !matches!(event, Event::Timer(TICK)) && self.ticker.lost(now) {
            effects.push(Effect::SetTimer { id: TICK, after: self.ticker.fired(now) });
            self.tick(now, effects);
        }
        match event {
            Event::Message { from, msg } => {
                let result = self.component.on_message(from, msg);
                self.handle(now, result, Some(from), effects);
            }
            Event::Timer(TICK) => {
                effects.push(Effect::SetTimer { id: TICK, after: self.ticker.fired(now) });
                self.tick(now, effects);
            }
            Event::Timer(_) | Event::Request(_) | Event::StorageDone { .. } => {}
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let k = self.component.counters();
        vec![
            ("preemptive_aborts", k.preemptive_aborts),
            ("prepares_resent", k.prepares_resent),
            ("decisions_resent", k.decisions_resent),
            ("votes_resent", k.votes_resent),
            ("recovery_aborts", k.recovery_aborts),
            ("timeout_aborts", k.timeout_aborts),
        ]
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone().or_else(|| self.component.failure())
    }

    fn quiescent(&self) -> bool {
        self.component.pending() == 0 && (!self.coordinator || self.component.next_seq() >= self.setup.txns)
    }
}

/// Latency and messages of one transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnMetrics {
    pub txn: TxnId,
    pub participants: usize,
    pub begun: Time,
    /// When its coordinator decided (first incarnation to do so).
    pub coordinator_decided: Option<Time>,
    /// When the last of its participants decided, if all did.
    pub participants_decided: Option<Time>,
    pub commit: Option<bool>,
    /// Messages sent for it, resends included.
    pub messages: u64,
}

/// What a run gives back beyond the report: for assertions on the run itself.
pub struct CommitOutcome {
    pub report: CommitmentReport,
    pub log: CommitmentLog,
    pub stats: SimStats,
    pub refused: Vec<String>,
    pub failures: Vec<String>,
    /// Every transaction begun was decided by its coordinator and all its participants.
    pub settled: bool,
    /// When the run stopped (settled, or the limit).
    pub ended: Time,
    pub counters: BTreeMap<&'static str, u64>,
    pub txns: Vec<TxnMetrics>,
    pub recorder: Recorder,
    /// The crashes of the fault plan.
    pub crashes: Vec<ensemble_sim::Crash>,
}

/// Transactions per coordinator in a seeded run.
pub const TXNS: u64 = 12;
/// Keys transactions draw from in a seeded run.
pub const KEYS: u32 = 5;
pub const COORDINATORS: u32 = 2;
pub const HORIZON: Time = Time(5_000_000_000);
pub const LIMIT: Time = Time(30_000_000_000);

/// Which faults a run has.
#[derive(Clone, Debug)]
pub enum Faults {
    /// Drawn from the seed (see the module documentation).
    Random,
    /// None at all.
    None,
    /// This plan; the run stops at `LIMIT` or when settled after the plan's last event.
    Plan(FaultPlan),
}

/// One seeded run under a random fault plan, checked: the function a sweep command calls.
pub fn run_seed(seed: u64) -> CommitmentReport {
    run(seed).report
}

/// One seeded run under a random fault plan, with what the tests look at besides the report.
pub fn run(seed: u64) -> CommitOutcome {
    run_with(seed, Faults::Random, false)
}

/// One seeded run of the random workload under `faults`; `broken` makes every coordinator
/// commit on the first *yes* (for the checker's test).
pub fn run_with(seed: u64, faults: Faults, broken: bool) -> CommitOutcome {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let participants = rng.random_range(4..=6u32);
    let total = COORDINATORS + participants;
    let tick = Duration::from_millis(100);
    let mut config = CommitConfig::new(5);
    if seed % 3 == 2 {
        config = config.vote_timeout(10);
    }
    config.broken_commit_on_first_yes = broken;
    let setup = Setup {
        seed,
        coordinators: (0..COORDINATORS).map(ProcessId).collect(),
        participants: (COORDINATORS..total).map(ProcessId).collect(),
        txns: TXNS,
        every: Duration::from_millis(250),
        fanout: Fanout::UpTo(3),
        keys: Some(KEYS),
        yes: 0.9,
        certify_later: seed % 4 >= 2,
        tick,
        config,
    };
    let everybody: Vec<ProcessId> = (0..total).map(ProcessId).collect();
    let plan = match faults {
        Faults::None => FaultPlan::new(),
        Faults::Plan(plan) => plan,
        Faults::Random => {
            let network = RandomFaults {
                processes: everybody.clone(),
                horizon: HORIZON,
                message_rules: 8,
                max_probability: 0.3,
                max_extra: Duration::from_millis(60),
                partitions: 1,
                crashes: 2,
                crashes_lose_state: seed % 2 == 1,
                stalls: 0,
            };
            // And one crash of a coordinator, so that every run has one to recover from or
            // wait for.
            let coordinators = RandomFaults {
                processes: setup.coordinators.clone(),
                message_rules: 0,
                partitions: 0,
                crashes: 1,
                ..network.clone()
            };
            let mut plan = FaultPlan::random(&mut rng, &network);
            plan.absorb(FaultPlan::random(&mut rng, &coordinators));
            // Drawn last, so that the faults above are the ones each seed drew before stalls
            // existed.
            let stalls = RandomFaults { message_rules: 0, partitions: 0, crashes: 0, stalls: 2, ..network };
            plan.absorb(FaultPlan::random(&mut rng, &stalls));
            plan
        }
    };
    let failure_free = plan.is_empty() && setup.config.vote_timeout_ticks.is_none();
    let horizon = plan.crashes().iter().filter_map(|c| c.restart).fold(HORIZON, Time::max);
    simulate(setup, Topology::wan_normal50(3), plan, horizon, failure_free)
}

/// Runs `setup` over `topology` (process `i` at site `i mod sites`) under `plan` until
/// `horizon`, then until settled or [`LIMIT`], and checks it.
fn simulate(setup: Setup, topology: Topology, plan: FaultPlan, horizon: Time, failure_free: bool) -> CommitOutcome {
    let processes: Vec<ProcessId> = setup.coordinators.iter().chain(&setup.participants).copied().collect();
    let total = processes.len();
    let sites: Vec<usize> = (0..total).map(|i| i % topology.sites.len()).collect();
    let deployment = Deployment::one_per_machine(&sites, 2, "2pc");
    let rec: Rec = Rc::new(RefCell::new(Recorder::default()));
    let mut sim: Simulation<TwoPc, Slot> = Simulation::new(topology, deployment, setup.seed).expect("a valid world");
    for &p in &processes {
        let slot = Slot { log: MemoryCommitLog::new() };
        let node = Node::new(setup.clone(), p, &slot, rec.clone());
        sim.add_process(Box::new(node), Some(slot)).expect("a new process");
    }
    {
        let (setup, rec) = (setup.clone(), rec.clone());
        sim.set_recovery(Box::new(move |id, slot: Option<&mut Slot>| {
            let slot = slot.expect("every process has a slot");
            Box::new(Node::new(setup.clone(), id, slot, rec.clone()))
        }));
    }
    let crashes = plan.crashes().to_vec();
    *sim.faults_mut() = plan;

    let all = setup.txns as usize * setup.coordinators.len();
    sim.run_until(horizon, &mut |_, _| {});
    let mut now = horizon;
    while !settled(&rec.borrow(), all) && now < LIMIT {
        now = now + Duration::from_millis(500);
        sim.run_until(now, &mut |_, _| {});
    }
    let recorder = std::mem::take(&mut *rec.borrow_mut());
    let log = commitment_log(&recorder, &crashes, failure_free);
    let report = commitment::check(&log);
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
    CommitOutcome {
        report,
        log,
        stats: sim.stats().clone(),
        refused: recorder.refused.clone(),
        failures,
        settled: settled(&recorder, all),
        ended: now,
        counters,
        txns: metrics(&recorder),
        recorder,
        crashes,
    }
}

/// Every transaction begun (`all` of them) is decided by its coordinator and every participant.
fn settled(rec: &Recorder, all: usize) -> bool {
    if rec.begun.len() < all {
        return false;
    }
    let mut decided: BTreeSet<(TxnId, ProcessId, Role)> = BTreeSet::new();
    for (_, p, s) in &rec.steps {
        if let Step::Decided(d) = s {
            decided.insert((d.txn, *p, d.role));
        }
    }
    rec.begun.iter().all(|(txn, b)| {
        decided.contains(&(*txn, txn.coordinator, Role::Coordinator))
            && b.participants.iter().all(|p| decided.contains(&(*txn, *p, Role::Participant)))
    })
}

/// The checker's view of a run: transactions, every process's votes and decisions with the
/// plan's crashes and restarts in time order, and which transactions conflict (a common
/// participant and a common key).
pub fn commitment_log(rec: &Recorder, crashes: &[ensemble_sim::Crash], failure_free: bool) -> CommitmentLog {
    let mut log = CommitmentLog::new();
    log.failure_free = failure_free;
    log.conflicts_known();
    for (txn, b) in &rec.begun {
        log.begin(txn_no(*txn), txn.coordinator.0, b.participants.iter().map(|p| p.0));
    }
    let begun: Vec<(&TxnId, &Begun)> = rec.begun.iter().collect();
    for (i, (t1, b1)) in begun.iter().enumerate() {
        for (t2, b2) in &begun[i + 1..] {
            let shared = b1.participants.iter().any(|p| b2.participants.contains(p));
            if shared && !b1.txn.commutes(&b2.txn) {
                log.conflict(txn_no(**t1), txn_no(**t2));
            }
        }
    }
    // Time order per process; at one instant a process's own steps come before a crash then.
    enum E {
        Step(Step),
        Crash,
        Recover,
    }
    let mut events: Vec<(Time, u8, ProcessId, E)> =
        rec.steps.iter().map(|(t, p, s)| (*t, 0, *p, E::Step(*s))).collect();
    for c in crashes {
        events.push((c.at, 1, c.process, E::Crash));
        if let Some(r) = c.restart {
            events.push((r.max(c.at), 2, c.process, E::Recover));
        }
    }
    events.sort_by_key(|(t, k, _, _)| (*t, *k));
    for (_, _, p, e) in events {
        match e {
            E::Step(Step::Voted(v)) => log.vote(p.0, txn_no(v.txn), v.yes),
            E::Step(Step::Decided(d)) => {
                let role = match d.role {
                    Role::Coordinator => commitment::Role::Coordinator,
                    Role::Participant => commitment::Role::Participant,
                };
                log.decide(p.0, txn_no(d.txn), role, d.commit);
            }
            E::Crash => log.crash(p.0),
            E::Recover => log.recover(p.0),
        }
    }
    log
}

fn metrics(rec: &Recorder) -> Vec<TxnMetrics> {
    rec.begun
        .iter()
        .map(|(txn, b)| {
            let decided = |role: Role, p: ProcessId| {
                rec.steps.iter().find_map(|(t, q, s)| match s {
                    Step::Decided(d) if d.txn == *txn && d.role == role && *q == p => Some((*t, d.commit)),
                    _ => None,
                })
            };
            let coordinator = decided(Role::Coordinator, txn.coordinator);
            let participants: Option<Vec<Time>> =
                b.participants.iter().map(|&p| decided(Role::Participant, p).map(|(t, _)| t)).collect();
            TxnMetrics {
                txn: *txn,
                participants: b.participants.len(),
                begun: b.at,
                coordinator_decided: coordinator.map(|(t, _)| t),
                participants_decided: participants.and_then(|ts| ts.into_iter().max()),
                commit: coordinator.map(|(_, c)| c),
                messages: rec.messages.get(txn).copied().unwrap_or(0),
            }
        })
        .collect()
}

/// What a fault-free run measured: the numbers the `xcast-latency` figure plots for 2PC.
#[derive(Clone, Debug)]
pub struct FaultFree {
    pub txns: usize,
    pub committed: usize,
    /// Mean time from `begin` to the coordinator's decision (G-DUR: 2Δ).
    pub coordinator_latency: Duration,
    /// Mean time from `begin` to the last participant's decision (G-DUR: 3Δ).
    pub participant_latency: Duration,
    /// Mean messages per transaction (4 per participant: PREPARE, vote, decision, ack).
    pub messages_per_txn: f64,
    pub report: CommitmentReport,
}

/// Transactions a fault-free run measures.
pub const FAULT_FREE_TXNS: u64 = 20;

/// A fault-free run for the latency figure: one coordinator (`p0`, at site 0) begins
/// [`FAULT_FREE_TXNS`] transactions one after the other, each on the same
/// `participants_per_txn` participants `p1..=pk` (process `i` at site `i mod sites`), every
/// participant votes *yes*, and no two transactions conflict. Resends wait longer than any
/// fault-free round trip of `topology`, so messages per transaction are exactly 4k.
pub fn run_fault_free(participants_per_txn: usize, topology: Topology, seed: u64) -> FaultFree {
    let k = participants_per_txn.max(1);
    let farthest = (0..topology.sites.len())
        .flat_map(|a| (0..topology.sites.len()).map(move |b| (a, b)))
        .map(|(a, b)| topology.mean_delay(a, b))
        .max()
        .unwrap_or_default();
    let tick = Duration::from_millis(10);
    let resend = (farthest * 8).max(Duration::from_millis(500));
    let setup = Setup {
        seed,
        coordinators: vec![ProcessId(0)],
        participants: (1..=k as u32).map(ProcessId).collect(),
        txns: FAULT_FREE_TXNS,
        every: (farthest * 10).max(Duration::from_millis(100)),
        fanout: Fanout::Exactly(k),
        keys: None,
        yes: 1.0,
        certify_later: false,
        tick,
        config: CommitConfig::new((resend.as_nanos() / tick.as_nanos()) as u64),
    };
    let horizon = Time::from_duration(Duration::from_millis(300) + setup.every * FAULT_FREE_TXNS as u32);
    let out = simulate(setup, topology, FaultPlan::new(), horizon, true);
    let n = out.txns.len().max(1) as u32;
    let sum = |f: fn(&TxnMetrics) -> Option<Time>| -> Duration {
        out.txns.iter().filter_map(|m| f(m).map(|t| t.saturating_sub(m.begun))).sum::<Duration>() / n
    };
    FaultFree {
        txns: out.txns.len(),
        committed: out.txns.iter().filter(|m| m.commit == Some(true)).count(),
        coordinator_latency: sum(|m| m.coordinator_decided),
        participant_latency: sum(|m| m.participants_decided),
        messages_per_txn: out.txns.iter().map(|m| m.messages as f64).sum::<f64>() / f64::from(n),
        report: out.report,
    }
}
