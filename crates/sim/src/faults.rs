//! Fault injection: rules that lose, duplicate, slow or reorder messages, partitions, crashes
//! (pause-style, or losing the process's volatile state) and stalls, written by hand or drawn
//! from a seed.
//!
//! A [`FaultPlan`] is a list of rules, each active in a half-open [`Window`] of virtual time.
//! Message rules are judged when a message is handed to the network (its send instant), the way a
//! lossy or congested link would treat it; a crash is judged when something reaches the crashed
//! instance. The plan only grows: rules are added, never removed, so a run's faults are a pure
//! function of the plan and the seed.

use ensemble_core::{ClientId, ProcessId, Time};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeSet;
use std::time::Duration;

/// One end of a message: every message travels from one endpoint to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoint {
    Process(ProcessId),
    Client(ClientId),
}

impl From<ProcessId> for Endpoint {
    fn from(i: ProcessId) -> Self {
        Endpoint::Process(i)
    }
}

impl From<ClientId> for Endpoint {
    fn from(c: ClientId) -> Self {
        Endpoint::Client(c)
    }
}

/// The messages a drop or delay rule applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Links {
    /// Messages from `from` to `to`, one direction only (links fail asymmetrically in practice).
    Directed { from: Endpoint, to: Endpoint },
    /// Messages either way between `a` and `b`.
    Between { a: Endpoint, b: Endpoint },
    /// Every message `endpoint` sends or receives: the node's network interface is at fault.
    Touching(Endpoint),
    /// Every message.
    All,
}

impl Links {
    fn matches(&self, from: Endpoint, to: Endpoint) -> bool {
        match *self {
            Links::Directed { from: f, to: t } => from == f && to == t,
            Links::Between { a, b } => (from == a && to == b) || (from == b && to == a),
            Links::Touching(e) => from == e || to == e,
            Links::All => true,
        }
    }
}

/// A half-open interval `[start, end)` of virtual time in which a rule is active.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start: Time,
    pub end: Time,
}

impl Window {
    pub fn new(start: Time, end: Time) -> Window {
        Window { start, end }
    }
    /// From `start` to the end of the run.
    pub fn from(start: Time) -> Window {
        Window { start, end: Time(u64::MAX) }
    }
    /// The whole run.
    pub fn always() -> Window {
        Window::from(Time::ZERO)
    }
    pub fn contains(&self, t: Time) -> bool {
        self.start <= t && t < self.end
    }
}

/// What a message rule does.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultKind {
    /// Lose each matching message with this probability (drawn from the faults' own random
    /// stream, so adding a rule never changes message delays).
    Drop { links: Links, probability: f64 },
    /// Add this much to each matching message's delay (congestion, a slow path). Per-link FIFO
    /// still holds: a delayed message holds back later ones on the same link.
    Delay { links: Links, extra: Duration },
    /// Processes in `a` and in `b` cannot exchange messages. Clients are not affected.
    Partition { a: BTreeSet<ProcessId>, b: BTreeSet<ProcessId> },
    /// Deliver each matching message twice with this probability; the copy arrives up to one
    /// more delay later, outside the link's FIFO order (a retransmission).
    Duplicate { links: Links, probability: f64 },
    /// With this probability a matching message takes up to `max_extra` longer and leaves the
    /// link's FIFO order: it may overtake, or be overtaken by, its neighbours.
    Reorder { links: Links, probability: f64, max_extra: Duration },
}

/// A message rule and the window it is active in.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultRule {
    pub window: Window,
    pub kind: FaultKind,
}

/// A process stops at `at` and, if `restart` is given, resumes at `restart`.
///
/// While down, the process receives nothing (arriving messages and requests are dropped, timers
/// that fire are discarded), and its CPU jobs are lost at the crash, so storage jobs queued or
/// running then never run and their completions never come. Its storage survives.
///
/// * `loses_state: false` is a *pause*: at restart nothing is called, the process resumes with the
///   in-memory state it had, and timers set before the crash that fire after the restart are
///   delivered.
/// * `loses_state: true` is a real crash: the process object is dropped at the crash (its
///   volatile state and timers are gone) and at restart the simulation's recovery rebuilds it
///   from its id and its storage, then calls `start`. What a protocol keeps in storage is what
///   survives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crash {
    pub process: ProcessId,
    pub at: Time,
    pub restart: Option<Time>,
    pub loses_state: bool,
}

/// A process stands still during `window`, as a machine whose hypervisor paused it, or a
/// process stopped by a debugger or `SIGSTOP`: nothing is lost, everything waits.
///
/// What reaches the process in the window (messages and requests, which its peers' TCP would
/// keep sending and its kernel keep buffering) and the timers that fire wait, and at the
/// window's end it takes them in the order they came, at once; its clock then reads the
/// window's end. Its cores stop with it: a job running when the stall began holds its core
/// through the stall and then runs what it had left (a job that got a core of a pool it
/// shares with other processes during the stall runs all of it after the end). Unlike a
/// pause ([`Crash`]), a stall drops nothing, so it is fair to a protocol that assumes reliable
/// links and no failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    pub process: ProcessId,
    pub window: Window,
}

/// Why a message was lost; the simulator counts each cause (see [`crate::DropCounts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DropCause {
    Rule,
    Partition,
}

pub(crate) enum Verdict {
    Deliver { extra: Duration, duplicate: bool, reorder: Option<Duration> },
    Drop(DropCause),
}

/// The faults of a run. Build it with the chaining methods, before or between
/// [`crate::Simulation::run_until`] calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultPlan {
    rules: Vec<FaultRule>,
    crashes: Vec<Crash>,
    stalls: Vec<Stall>,
}

impl FaultPlan {
    pub fn new() -> FaultPlan {
        FaultPlan::default()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.crashes.is_empty() && self.stalls.is_empty()
    }

    pub fn rules(&self) -> &[FaultRule] {
        &self.rules
    }

    pub fn crashes(&self) -> &[Crash] {
        &self.crashes
    }

    pub fn stalls(&self) -> &[Stall] {
        &self.stalls
    }

    /// Lose messages on `links` with `probability` (clamped to `[0, 1]`) during `window`.
    pub fn drop_messages(&mut self, window: Window, links: Links, probability: f64) -> &mut Self {
        self.rules.push(FaultRule { window, kind: FaultKind::Drop { links, probability } });
        self
    }

    /// Slow messages on `links` by `extra` during `window`.
    pub fn delay_messages(&mut self, window: Window, links: Links, extra: Duration) -> &mut Self {
        self.rules.push(FaultRule { window, kind: FaultKind::Delay { links, extra } });
        self
    }

    /// Deliver messages on `links` twice with `probability` during `window`.
    pub fn duplicate_messages(&mut self, window: Window, links: Links, probability: f64) -> &mut Self {
        self.rules.push(FaultRule { window, kind: FaultKind::Duplicate { links, probability } });
        self
    }

    /// Take messages on `links` out of FIFO order with `probability`, up to `max_extra` late.
    pub fn reorder_messages(&mut self, window: Window, links: Links, probability: f64, max_extra: Duration) -> &mut Self {
        self.rules.push(FaultRule { window, kind: FaultKind::Reorder { links, probability, max_extra } });
        self
    }

    /// Separate two sets of processes during `window`.
    pub fn partition(
        &mut self,
        window: Window,
        a: impl IntoIterator<Item = ProcessId>,
        b: impl IntoIterator<Item = ProcessId>,
    ) -> &mut Self {
        let kind = FaultKind::Partition { a: a.into_iter().collect(), b: b.into_iter().collect() };
        self.rules.push(FaultRule { window, kind });
        self
    }

    /// Pause `process` at `at`; resume it at `restart` if given, with its state (see [`Crash`]).
    /// A crash time already in the past when the next `run_until` starts takes effect at that
    /// run's current time; a restart before the crash is treated as an immediate restart (the CPU
    /// jobs are still lost).
    pub fn crash(&mut self, process: ProcessId, at: Time, restart: Option<Time>) -> &mut Self {
        self.crashes.push(Crash { process, at, restart, loses_state: false });
        self
    }

    /// Crash `process` at `at`, losing its volatile state; rebuild it at `restart` if given with
    /// the simulation's recovery (see [`Crash`]).
    pub fn crash_losing_state(&mut self, process: ProcessId, at: Time, restart: Option<Time>) -> &mut Self {
        self.crashes.push(Crash { process, at, restart, loses_state: true });
        self
    }

    /// Adds every rule, crash and stall of `other` after this plan's own: a plan drawn in parts
    /// (each part from its own spec, over its own processes) is one plan.
    pub fn absorb(&mut self, other: FaultPlan) -> &mut Self {
        self.rules.extend(other.rules);
        self.crashes.extend(other.crashes);
        self.stalls.extend(other.stalls);
        self
    }

    /// Stall `process` during `window` (see [`Stall`]). A window already begun when the next
    /// `run_until` starts stalls the process from that run's current time.
    pub fn stall(&mut self, process: ProcessId, window: Window) -> &mut Self {
        self.stalls.push(Stall { process, window });
        self
    }

    /// A fault plan drawn from `rng` as `spec` says: every rule, crash and stall, its window, its
    /// links and its probability come from the seed, so a sweep of seeds is a sweep of plans.
    pub fn random(rng: &mut impl Rng, spec: &RandomFaults) -> FaultPlan {
        let mut plan = FaultPlan::new();
        let horizon = spec.horizon.0.max(1);
        let window = |rng: &mut dyn rand::RngCore| {
            let start = rng.random_range(0..horizon);
            let len = rng.random_range(1..=(horizon / 4).max(1));
            Window::new(Time(start), Time(start.saturating_add(len).min(horizon)))
        };
        let pick = |rng: &mut dyn rand::RngCore| spec.processes[rng.random_range(0..spec.processes.len())];
        let links = |rng: &mut dyn rand::RngCore| {
            if spec.processes.len() < 2 || rng.random_bool(0.3) {
                Links::All
            } else {
                let a = pick(rng);
                let b = pick(rng);
                Links::Between { a: a.into(), b: b.into() }
            }
        };
        if spec.processes.is_empty() {
            return plan;
        }
        for _ in 0..spec.message_rules {
            let w = window(rng);
            let l = links(rng);
            match rng.random_range(0..4u8) {
                0 => plan.drop_messages(w, l, rng.random_range(0.0..=spec.max_probability)),
                1 => plan.duplicate_messages(w, l, rng.random_range(0.0..=spec.max_probability)),
                2 => plan.delay_messages(w, l, Duration::from_nanos(rng.random_range(0..=spec.max_extra.as_nanos() as u64))),
                _ => plan.reorder_messages(w, l, rng.random_range(0.0..=spec.max_probability), spec.max_extra),
            };
        }
        for _ in 0..spec.partitions {
            let w = window(rng);
            let (a, b): (Vec<ProcessId>, Vec<ProcessId>) = spec.processes.iter().partition(|_| rng.random_bool(0.5));
            plan.partition(w, a, b);
        }
        for _ in 0..spec.crashes {
            let p = pick(rng);
            let w = window(rng);
            let restart = Some(w.end);
            if spec.crashes_lose_state {
                plan.crash_losing_state(p, w.start, restart);
            } else {
                plan.crash(p, w.start, restart);
            }
        }
        for _ in 0..spec.stalls {
            let p = pick(rng);
            plan.stall(p, window(rng));
        }
        plan
    }

    /// Judges a message handed to the network at `now`. Partitions are checked first, then drop
    /// rules in the order they were added (each matching one draws once), and delays add up.
    pub(crate) fn judge(&self, now: Time, from: Endpoint, to: Endpoint, rng: &mut ChaCha8Rng) -> Verdict {
        let mut extra = Duration::ZERO;
        let mut duplicate = false;
        let mut reorder = None;
        for rule in &self.rules {
            if !rule.window.contains(now) {
                continue;
            }
            match &rule.kind {
                FaultKind::Partition { a, b } => {
                    if let (Endpoint::Process(f), Endpoint::Process(t)) = (from, to) {
                        if (a.contains(&f) && b.contains(&t)) || (b.contains(&f) && a.contains(&t)) {
                            return Verdict::Drop(DropCause::Partition);
                        }
                    }
                }
                FaultKind::Drop { links, probability } => {
                    if links.matches(from, to) && draw(*probability, rng) {
                        return Verdict::Drop(DropCause::Rule);
                    }
                }
                FaultKind::Delay { links, extra: e } => {
                    if links.matches(from, to) {
                        extra += *e;
                    }
                }
                FaultKind::Duplicate { links, probability } => {
                    if links.matches(from, to) && draw(*probability, rng) {
                        duplicate = true;
                    }
                }
                FaultKind::Reorder { links, probability, max_extra } => {
                    if links.matches(from, to) && draw(*probability, rng) {
                        let d = Duration::from_nanos(rng.random_range(0..=max_extra.as_nanos() as u64));
                        reorder = Some(reorder.unwrap_or_default() + d);
                    }
                }
            }
        }
        Verdict::Deliver { extra, duplicate, reorder }
    }
}

/// What [`FaultPlan::random`] draws: how many rules of each sort, over which processes, within
/// which horizon. Processes that must stay up (a majority of a group) are left out of
/// `processes` by the caller.
#[derive(Clone, Debug, PartialEq)]
pub struct RandomFaults {
    pub processes: Vec<ProcessId>,
    /// Every window ends by then, so the system heals and progress can be checked after it.
    pub horizon: Time,
    /// Drop, duplicate, delay and reorder rules, each kind equally likely.
    pub message_rules: u32,
    pub max_probability: f64,
    pub max_extra: Duration,
    pub partitions: u32,
    pub crashes: u32,
    pub crashes_lose_state: bool,
    /// Stalls ([`Stall`]) of processes of `processes`, drawn after everything else, so that a
    /// spec with none draws the plans it drew before stalls existed.
    pub stalls: u32,
}

/// Certain outcomes take no draw, so a rule with probability 1 (or 0) leaves the stream alone.
fn draw(probability: f64, rng: &mut ChaCha8Rng) -> bool {
    if probability >= 1.0 {
        true
    } else if probability > 0.0 {
        rng.random::<f64>() < probability
    } else {
        false // zero, negative or NaN
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn i(n: u32) -> Endpoint {
        Endpoint::Process(ProcessId(n))
    }

    #[test]
    fn links_match_as_documented() {
        let c = Endpoint::Client(ClientId(7));
        assert!(Links::Directed { from: i(0), to: i(1) }.matches(i(0), i(1)));
        assert!(!Links::Directed { from: i(0), to: i(1) }.matches(i(1), i(0)));
        assert!(Links::Between { a: i(0), b: i(1) }.matches(i(1), i(0)));
        assert!(Links::Touching(i(2)).matches(c, i(2)));
        assert!(Links::Touching(i(2)).matches(i(2), i(0)));
        assert!(!Links::Touching(i(2)).matches(i(1), i(0)));
        assert!(Links::All.matches(c, i(0)));
    }

    #[test]
    fn windows_are_half_open() {
        let w = Window::new(Time(10), Time(20));
        assert!(!w.contains(Time(9)));
        assert!(w.contains(Time(10)));
        assert!(w.contains(Time(19)));
        assert!(!w.contains(Time(20)));
    }

    #[test]
    fn partition_spares_clients_and_delays_add_up() {
        let mut plan = FaultPlan::new();
        plan.partition(Window::always(), [ProcessId(0)], [ProcessId(1)])
            .delay_messages(Window::always(), Links::All, Duration::from_millis(1))
            .delay_messages(Window::always(), Links::Touching(i(0)), Duration::from_millis(2));
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert!(matches!(plan.judge(Time(0), i(1), i(0), &mut rng), Verdict::Drop(DropCause::Partition)));
        match plan.judge(Time(0), Endpoint::Client(ClientId(1)), i(0), &mut rng) {
            Verdict::Deliver { extra, .. } => assert_eq!(extra, Duration::from_millis(3)),
            Verdict::Drop(_) => panic!("clients are outside partitions"),
        }
    }
}
