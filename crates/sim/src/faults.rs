//! Fault injection: rules that lose or slow messages, partitions, and crashes.
//!
//! A [`FaultPlan`] is a list of rules, each active in a half-open [`Window`] of virtual time.
//! Message rules are judged when a message is handed to the network (its send instant), the way a
//! lossy or congested link would treat it; a crash is judged when something reaches the crashed
//! instance. The plan only grows: rules are added, never removed, so a run's faults are a pure
//! function of the plan and the seed.

use ensemble_core::{ClientId, InstanceId, Time};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeSet;
use std::time::Duration;

/// One end of a message: every message travels from one endpoint to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoint {
    Instance(InstanceId),
    Client(ClientId),
}

impl From<InstanceId> for Endpoint {
    fn from(i: InstanceId) -> Self {
        Endpoint::Instance(i)
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
    /// Instances in `a` and in `b` cannot exchange messages. Clients are not affected.
    Partition { a: BTreeSet<InstanceId>, b: BTreeSet<InstanceId> },
}

/// A message rule and the window it is active in.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultRule {
    pub window: Window,
    pub kind: FaultKind,
}

/// An instance stops at `at` and, if `restart` is given, resumes at `restart`.
///
/// This is a *pause-style* crash: while down, the instance receives nothing (arriving messages
/// and requests are dropped, timers that fire are discarded), and its CPU queue is cleared at the
/// crash, so storage jobs queued or running then never run and their completions never come.
/// At restart nothing is called: the node resumes with the in-memory state it had, and timers set
/// before the crash that fire after the restart are delivered. A timer that came due while the
/// instance was down is gone, so a node that re-arms a periodic timer from its handler stays
/// silent on that timer after the restart. Crash-recovery with loss of volatile state (and a
/// restart hook to re-arm timers) comes with the fault-tolerance work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crash {
    pub instance: InstanceId,
    pub at: Time,
    pub restart: Option<Time>,
}

/// Why a message was lost; the simulator counts each cause (see [`crate::DropCounts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DropCause {
    Rule,
    Partition,
}

pub(crate) enum Verdict {
    Deliver { extra: Duration },
    Drop(DropCause),
}

/// The faults of a run. Build it with the chaining methods, before or between
/// [`crate::Simulation::run_until`] calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultPlan {
    rules: Vec<FaultRule>,
    crashes: Vec<Crash>,
}

impl FaultPlan {
    pub fn new() -> FaultPlan {
        FaultPlan::default()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.crashes.is_empty()
    }

    pub fn rules(&self) -> &[FaultRule] {
        &self.rules
    }

    pub fn crashes(&self) -> &[Crash] {
        &self.crashes
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

    /// Separate two groups of instances during `window`.
    pub fn partition(
        &mut self,
        window: Window,
        a: impl IntoIterator<Item = InstanceId>,
        b: impl IntoIterator<Item = InstanceId>,
    ) -> &mut Self {
        let kind = FaultKind::Partition { a: a.into_iter().collect(), b: b.into_iter().collect() };
        self.rules.push(FaultRule { window, kind });
        self
    }

    /// Crash `instance` at `at`; resume it at `restart` if given. A crash time already in the
    /// past when the next `run_until` starts takes effect at that run's current time; a restart
    /// before the crash is treated as an immediate restart (the CPU queue is still cleared).
    pub fn crash(&mut self, instance: InstanceId, at: Time, restart: Option<Time>) -> &mut Self {
        self.crashes.push(Crash { instance, at, restart });
        self
    }

    /// Judges a message handed to the network at `now`. Partitions are checked first, then drop
    /// rules in the order they were added (each matching one draws once), and delays add up.
    pub(crate) fn judge(&self, now: Time, from: Endpoint, to: Endpoint, rng: &mut ChaCha8Rng) -> Verdict {
        let mut extra = Duration::ZERO;
        for rule in &self.rules {
            if !rule.window.contains(now) {
                continue;
            }
            match &rule.kind {
                FaultKind::Partition { a, b } => {
                    if let (Endpoint::Instance(f), Endpoint::Instance(t)) = (from, to) {
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
            }
        }
        Verdict::Deliver { extra }
    }
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
        Endpoint::Instance(InstanceId(n))
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
        plan.partition(Window::always(), [InstanceId(0)], [InstanceId(1)])
            .delay_messages(Window::always(), Links::All, Duration::from_millis(1))
            .delay_messages(Window::always(), Links::Touching(i(0)), Duration::from_millis(2));
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert!(matches!(plan.judge(Time(0), i(1), i(0), &mut rng), Verdict::Drop(DropCause::Partition)));
        match plan.judge(Time(0), Endpoint::Client(ClientId(1)), i(0), &mut rng) {
            Verdict::Deliver { extra } => assert_eq!(extra, Duration::from_millis(3)),
            Verdict::Drop(_) => panic!("clients are outside partitions"),
        }
    }
}
