//! What a delivery check says: the properties checked, the size of the log, and every violation
//! found, each naming the processes and messages involved, with a one-line verdict for people.

use super::log::{GroupId, MessageId, ProcessNo};
use std::fmt;
use std::str::FromStr;

/// One property of a group-communication primitive. The module documentation gives each one's
/// exact definition and source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Property {
    Integrity,
    Validity,
    Agreement,
    PrefixOrder,
    GroupOrder,
    AcyclicOrder,
    PairwiseOrder,
    FifoOrder,
    Broadcast,
    Genuineness,
}

impl Property {
    pub const ALL: [Property; 10] = [
        Property::Integrity,
        Property::Validity,
        Property::Agreement,
        Property::PrefixOrder,
        Property::GroupOrder,
        Property::AcyclicOrder,
        Property::PairwiseOrder,
        Property::FifoOrder,
        Property::Broadcast,
        Property::Genuineness,
    ];

    /// The name used on the command line and in `FromStr`.
    pub fn name(self) -> &'static str {
        match self {
            Property::Integrity => "integrity",
            Property::Validity => "validity",
            Property::Agreement => "agreement",
            Property::PrefixOrder => "prefix-order",
            Property::GroupOrder => "group-order",
            Property::AcyclicOrder => "acyclic-order",
            Property::PairwiseOrder => "pairwise-order",
            Property::FifoOrder => "fifo-order",
            Property::Broadcast => "broadcast",
            Property::Genuineness => "genuineness",
        }
    }

    /// The name as the papers write it, used in reports.
    pub fn title(self) -> &'static str {
        match self {
            Property::Integrity => "uniform integrity",
            Property::Validity => "validity",
            Property::Agreement => "uniform agreement",
            Property::PrefixOrder => "uniform prefix order",
            Property::GroupOrder => "uniform prefix order within each group",
            Property::AcyclicOrder => "uniform acyclic order",
            Property::PairwiseOrder => "uniform pairwise order",
            Property::FifoOrder => "uniform FIFO order",
            Property::Broadcast => "broadcast to all groups",
            Property::Genuineness => "genuineness",
        }
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.title())
    }
}

/// An unknown property name; its message lists the known ones.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown delivery property `{0}`; expected one of: integrity, validity, agreement, prefix-order, group-order, acyclic-order, pairwise-order, fifo-order, broadcast, genuineness")]
pub struct UnknownProperty(pub String);

impl FromStr for Property {
    type Err = UnknownProperty;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Property::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownProperty(s.to_owned()))
    }
}

/// The primitives of issue 12 and the properties each one promises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Primitive {
    /// Reliable multicast: "all properties of atomic multicast except uniform prefix and
    /// acyclic order" (P-Store, footnote 2).
    ReliableMulticast,
    /// Atomic broadcast: atomic multicast where every cast is addressed to every group.
    AtomicBroadcast,
    /// Atomic multicast, P-Store §2.4 (i)–(v).
    AtomicMulticast,
    /// Atomic multicast that is also genuine (P-Store §2.4, after Guerraoui & Schiper).
    GenuineAtomicMulticast,
    /// S-DUR's AM_pw-Cast: reliable multicast whose deliveries are pairwise ordered.
    PairwiseMulticast,
    /// P-DUR's prototype (§V): one atomic broadcast stream per partition (group), a message to
    /// several partitions broadcast in each independently; ordered within each group only.
    PartitionStreams,
}

impl Primitive {
    pub const ALL: [Primitive; 6] = [
        Primitive::ReliableMulticast,
        Primitive::AtomicBroadcast,
        Primitive::AtomicMulticast,
        Primitive::GenuineAtomicMulticast,
        Primitive::PairwiseMulticast,
        Primitive::PartitionStreams,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Primitive::ReliableMulticast => "reliable multicast",
            Primitive::AtomicBroadcast => "atomic broadcast",
            Primitive::AtomicMulticast => "atomic multicast",
            Primitive::GenuineAtomicMulticast => "genuine atomic multicast",
            Primitive::PairwiseMulticast => "pairwise-ordered multicast",
            Primitive::PartitionStreams => "per-partition streams",
        }
    }

    /// The properties the primitive promises, in the order they are checked and reported.
    pub fn properties(self) -> &'static [Property] {
        use Property::*;
        match self {
            Primitive::ReliableMulticast => &[Integrity, Validity, Agreement],
            Primitive::AtomicBroadcast => &[
                Integrity,
                Validity,
                Agreement,
                PrefixOrder,
                AcyclicOrder,
                Broadcast,
            ],
            Primitive::AtomicMulticast => {
                &[Integrity, Validity, Agreement, PrefixOrder, AcyclicOrder]
            }
            Primitive::GenuineAtomicMulticast => &[
                Integrity,
                Validity,
                Agreement,
                PrefixOrder,
                AcyclicOrder,
                Genuineness,
            ],
            Primitive::PairwiseMulticast => &[Integrity, Validity, Agreement, PairwiseOrder],
            Primitive::PartitionStreams => {
                &[Integrity, Validity, Agreement, GroupOrder, Genuineness]
            }
        }
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A delivery log that cannot be checked as it stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogMalformation {
    DuplicateGroup {
        group: GroupId,
    },
    DuplicateProcess {
        process: ProcessNo,
    },
    /// Two casts with the same message id: which one a delivery is of cannot be told.
    DuplicateCast {
        message: MessageId,
    },
    /// A group member with no process log: whether it was correct, and what it delivered, are
    /// unknown (an empty log must be written out, not left implicit).
    MemberWithoutLog {
        group: GroupId,
        process: ProcessNo,
    },
    UnknownDestination {
        message: MessageId,
        group: GroupId,
    },
    NoDestination {
        message: MessageId,
    },
    /// The cast does not say whether its caster was correct, and the caster has no process log.
    CasterCorrectnessUnknown {
        message: MessageId,
        caster: ProcessNo,
    },
    /// The cast and the caster's process log disagree on whether the caster was correct.
    CasterCorrectnessConflict {
        message: MessageId,
        caster: ProcessNo,
        cast_says: bool,
    },
}

impl fmt::Display for LogMalformation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogMalformation::DuplicateGroup { group } => {
                write!(f, "group g{group} is listed more than once")
            }
            LogMalformation::DuplicateProcess { process } => {
                write!(f, "process p{process} has more than one process log")
            }
            LogMalformation::DuplicateCast { message } => {
                write!(f, "message m{message} is cast more than once")
            }
            LogMalformation::MemberWithoutLog { group, process } => write!(
                f,
                "p{process}, a member of g{group}, has no process log (write an empty one if it delivered nothing)"
            ),
            LogMalformation::UnknownDestination { message, group } => {
                write!(f, "m{message} is cast to g{group}, which is not in the log")
            }
            LogMalformation::NoDestination { message } => {
                write!(f, "m{message} is cast to no group")
            }
            LogMalformation::CasterCorrectnessUnknown { message, caster } => write!(
                f,
                "m{message}'s caster p{caster} has no process log and the cast does not say whether it was correct"
            ),
            LogMalformation::CasterCorrectnessConflict { message, caster, cast_says } => write!(
                f,
                "m{message}'s cast says its caster p{caster} was {}, but p{caster}'s process log says it was {}",
                correct_word(*cast_says),
                correct_word(!cast_says)
            ),
        }
    }
}

fn correct_word(correct: bool) -> &'static str {
    if correct {
        "correct"
    } else {
        "not correct"
    }
}

/// One edge of an order cycle: `process` delivered `from` before `to` (so `from < to`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderEdge {
    pub from: MessageId,
    pub to: MessageId,
    pub process: ProcessNo,
}

/// A cycle of the relation `<` ("some process delivers m before m'"), as a list of edges each
/// starting where the last ended. Printed `m1 -p0-> m2 -p3-> m1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderCycle {
    pub edges: Vec<OrderEdge>,
}

impl OrderCycle {
    pub fn len(&self) -> usize {
        self.edges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.edges.is_empty()
    }

    /// The messages on the cycle, in order.
    pub fn messages(&self) -> Vec<MessageId> {
        self.edges.iter().map(|e| e.from).collect()
    }

    const SHOWN_HEAD: usize = 16;
    const SHOWN_TAIL: usize = 4;
}

impl fmt::Display for OrderCycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let edge = |f: &mut fmt::Formatter<'_>, e: &OrderEdge| write!(f, " -p{}-> m{}", e.process, e.to);
        crate::report::write_cycle(f, &self.edges, (Self::SHOWN_HEAD, Self::SHOWN_TAIL), |e| format!("m{}", e.from), edge)
    }
}

/// One thing wrong with a delivery log under the properties checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeliveryViolation {
    /// The log cannot be checked (no property was checked).
    Malformed(LogMalformation),
    /// Integrity: `process` delivered `message` twice (0-based indices in its sequence).
    DuplicateDelivery {
        process: ProcessNo,
        message: MessageId,
        first: usize,
        again: usize,
    },
    /// Integrity: `process` delivered a message that was never cast.
    UncastDelivery {
        process: ProcessNo,
        message: MessageId,
        index: usize,
    },
    /// Integrity: `process` delivered `message` but is in none of its destination groups.
    OutsideDestination {
        process: ProcessNo,
        message: MessageId,
        destinations: Vec<GroupId>,
    },
    /// Validity: correct `caster` cast `message`, correct `process` of its destinations never
    /// delivered it.
    NotDelivered {
        process: ProcessNo,
        message: MessageId,
        caster: ProcessNo,
    },
    /// Agreement: `by` delivered `message`, correct `process` of its destinations never did.
    Disagreement {
        process: ProcessNo,
        message: MessageId,
        by: ProcessNo,
    },
    /// Prefix order: `p` and `q` are destinations of both `m` and `m_prime`; `p` delivered `m`
    /// without having delivered `m_prime` before it, and `q` delivered `m_prime` without having
    /// delivered `m` before it. The flags say whether each delivered the other message later.
    PrefixOrder {
        p: ProcessNo,
        q: ProcessNo,
        m: MessageId,
        m_prime: MessageId,
        p_delivered_m_prime_later: bool,
        q_delivered_m_later: bool,
    },
    /// Prefix order within `group`: `p` and `q` are members of `group`, a destination of both
    /// `m` and `m_prime`; `p` delivered `m` without having delivered `m_prime` before it, and
    /// `q` delivered `m_prime` without having delivered `m` before it. The flags as for
    /// [`DeliveryViolation::PrefixOrder`].
    GroupOrder {
        group: GroupId,
        p: ProcessNo,
        q: ProcessNo,
        m: MessageId,
        m_prime: MessageId,
        p_delivered_m_prime_later: bool,
        q_delivered_m_later: bool,
    },
    /// Acyclic order: a cycle of `<`. `shortest` is false only when the search for a shorter
    /// one ran out of its budget (huge strongly connected components).
    OrderCycle { cycle: OrderCycle, shortest: bool },
    /// Pairwise order: `p` delivered `m` before `m_prime`, `q` delivered `m_prime` before `m`.
    PairwiseOrder {
        p: ProcessNo,
        q: ProcessNo,
        m: MessageId,
        m_prime: MessageId,
    },
    /// FIFO order: `caster` cast `earlier` before `later`; `process`, a destination of both,
    /// delivered `later` without having delivered `earlier` before it (`earlier_delivered_after`:
    /// it delivered `earlier` afterwards).
    Fifo {
        process: ProcessNo,
        caster: ProcessNo,
        earlier: MessageId,
        later: MessageId,
        earlier_delivered_after: bool,
    },
    /// Broadcast: `message` is not addressed to `group`.
    NotToAll { message: MessageId, group: GroupId },
    /// Genuineness: `process` took `steps` steps on behalf of `message` without being its
    /// caster or a member of its destination groups. `message: None`: steps on behalf of no
    /// message by a process that is no cast's caster or destination. `cast: None` with a
    /// message: the message was never cast.
    OutsideSteps {
        process: ProcessNo,
        message: Option<MessageId>,
        steps: u64,
        cast: Option<(ProcessNo, Vec<GroupId>)>,
    },
}

impl DeliveryViolation {
    /// The property the violation breaks (`None` for a malformed log).
    pub fn property(&self) -> Option<Property> {
        Some(match self {
            DeliveryViolation::Malformed(_) => return None,
            DeliveryViolation::DuplicateDelivery { .. }
            | DeliveryViolation::UncastDelivery { .. }
            | DeliveryViolation::OutsideDestination { .. } => Property::Integrity,
            DeliveryViolation::NotDelivered { .. } => Property::Validity,
            DeliveryViolation::Disagreement { .. } => Property::Agreement,
            DeliveryViolation::PrefixOrder { .. } => Property::PrefixOrder,
            DeliveryViolation::GroupOrder { .. } => Property::GroupOrder,
            DeliveryViolation::OrderCycle { .. } => Property::AcyclicOrder,
            DeliveryViolation::PairwiseOrder { .. } => Property::PairwiseOrder,
            DeliveryViolation::Fifo { .. } => Property::FifoOrder,
            DeliveryViolation::NotToAll { .. } => Property::Broadcast,
            DeliveryViolation::OutsideSteps { .. } => Property::Genuineness,
        })
    }
}

/// `p delivered m before m'` (or `but never m'`), `q delivered m' before m` (or `but never m`).
fn opposite_sides(
    f: &mut fmt::Formatter<'_>,
    (p, q): (ProcessNo, ProcessNo),
    (m, m_prime): (MessageId, MessageId),
    (p_later, q_later): (bool, bool),
) -> fmt::Result {
    let side = |f: &mut fmt::Formatter<'_>, who, first, other, later: bool| {
        if later {
            write!(f, "p{who} delivered m{first} before m{other}")
        } else {
            write!(f, "p{who} delivered m{first} but never m{other}")
        }
    };
    side(f, p, m, m_prime, p_later)?;
    f.write_str(", ")?;
    side(f, q, m_prime, m, q_later)
}

fn groups(list: &[GroupId]) -> String {
    let names: Vec<String> = list.iter().map(|g| format!("g{g}")).collect();
    names.join(", ")
}

impl fmt::Display for DeliveryViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = self.property() {
            write!(f, "{p}: ")?;
        }
        match self {
            DeliveryViolation::Malformed(m) => write!(f, "malformed: {m}"),
            DeliveryViolation::DuplicateDelivery { process, message, first, again } => write!(
                f,
                "p{process} delivered m{message} twice (at indices {first} and {again} of its sequence)"
            ),
            DeliveryViolation::UncastDelivery { process, message, index } => write!(
                f,
                "p{process} delivered m{message} (at index {index} of its sequence), which was never cast"
            ),
            DeliveryViolation::OutsideDestination { process, message, destinations } => write!(
                f,
                "p{process} delivered m{message}, but is in none of its destination groups ({})",
                groups(destinations)
            ),
            DeliveryViolation::NotDelivered { process, message, caster } => write!(
                f,
                "correct p{caster} cast m{message}, but correct p{process}, one of its destinations, never delivered it"
            ),
            DeliveryViolation::Disagreement { process, message, by } => write!(
                f,
                "p{by} delivered m{message}, but correct p{process}, one of its destinations, never did"
            ),
            DeliveryViolation::PrefixOrder {
                p,
                q,
                m,
                m_prime,
                p_delivered_m_prime_later,
                q_delivered_m_later,
            } => {
                write!(f, "p{p} and p{q} are destinations of both m{m} and m{m_prime}; ")?;
                opposite_sides(f, (*p, *q), (*m, *m_prime), (*p_delivered_m_prime_later, *q_delivered_m_later))
            }
            DeliveryViolation::GroupOrder {
                group,
                p,
                q,
                m,
                m_prime,
                p_delivered_m_prime_later,
                q_delivered_m_later,
            } => {
                write!(f, "p{p} and p{q} are members of g{group}, a destination of both m{m} and m{m_prime}; ")?;
                opposite_sides(f, (*p, *q), (*m, *m_prime), (*p_delivered_m_prime_later, *q_delivered_m_later))
            }
            DeliveryViolation::OrderCycle { cycle, shortest } => {
                write!(f, "cycle {cycle} (a -p-> b: p delivered a before b")?;
                if !shortest {
                    f.write_str("; the search for a shorter one stopped at its budget")?;
                }
                f.write_str(")")
            }
            DeliveryViolation::PairwiseOrder { p, q, m, m_prime } => write!(
                f,
                "p{p} delivered m{m} before m{m_prime}, p{q} delivered m{m_prime} before m{m}"
            ),
            DeliveryViolation::Fifo { process, caster, earlier, later, earlier_delivered_after } => {
                write!(
                    f,
                    "p{caster} cast m{earlier} before m{later}, but p{process}, a destination of both, delivered m{later} "
                )?;
                if *earlier_delivered_after {
                    write!(f, "before m{earlier}")
                } else {
                    write!(f, "and never m{earlier}")
                }
            }
            DeliveryViolation::NotToAll { message, group } => {
                write!(f, "m{message} is not addressed to g{group}")
            }
            DeliveryViolation::OutsideSteps { process, message, steps, cast } => {
                let s = if *steps == 1 { "" } else { "s" };
                match (message, cast) {
                    (Some(m), Some((caster, dst))) => write!(
                        f,
                        "p{process} took {steps} step{s} for m{m}, but is neither its caster p{caster} nor in its destination groups ({})",
                        groups(dst)
                    ),
                    (Some(m), None) => write!(
                        f,
                        "p{process} took {steps} step{s} for m{m}, which was never cast"
                    ),
                    (None, _) => write!(
                        f,
                        "p{process} took {steps} step{s} for no message, and is neither the caster nor a destination of any cast"
                    ),
                }
            }
        }
    }
}

/// The size of what was checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeliveryCounts {
    pub groups: usize,
    pub processes: usize,
    pub correct: usize,
    /// Messages cast.
    pub casts: usize,
    /// Cast messages delivered by at least one process.
    pub delivered: usize,
    /// Entries of all delivery sequences, repetitions and uncast messages included.
    pub deliveries: usize,
    /// Steps recorded (the sum of the `count`s).
    pub steps: u64,
    /// Steps taken by a process outside the caster and destinations of the message they were
    /// for (the measure of genuineness; counted whether or not genuineness is checked).
    pub outside_steps: u64,
}

/// The outcome of checking one delivery log against a set of properties.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryReport {
    /// The primitive whose properties were checked, if the check was by primitive.
    pub primitive: Option<Primitive>,
    /// The properties checked, in the order checked.
    pub properties: Vec<Property>,
    pub counts: DeliveryCounts,
    /// Every violation found, up to [`DeliveryReport::MAX_VIOLATIONS`]; the rest are counted
    /// in `omitted`. In the order of `properties`.
    pub violations: Vec<DeliveryViolation>,
    pub omitted: usize,
    /// Violations found per property (kept or omitted), indexed by `Property as usize`.
    found: [usize; Property::ALL.len()],
}

impl DeliveryReport {
    /// Violations kept in full; a broken run of 10^5 casts could otherwise produce millions.
    pub const MAX_VIOLATIONS: usize = 1000;
    /// Violations printed by `Display` after the verdict line.
    pub const SHOWN: usize = 10;

    pub(crate) fn new(primitive: Option<Primitive>, properties: Vec<Property>) -> Self {
        DeliveryReport {
            primitive,
            properties,
            counts: DeliveryCounts::default(),
            violations: Vec::new(),
            omitted: 0,
            found: [0; Property::ALL.len()],
        }
    }

    /// True when the log satisfies every property checked.
    pub fn ok(&self) -> bool {
        self.violations.is_empty() && self.omitted == 0
    }

    pub fn is_malformed(&self) -> bool {
        self.violations
            .iter()
            .any(|v| matches!(v, DeliveryViolation::Malformed(_)))
    }

    /// True when `property` was checked, on a well-formed log, and not violated.
    pub fn holds(&self, property: Property) -> bool {
        self.properties.contains(&property) && !self.is_malformed() && self.count(property) == 0
    }

    /// How many violations of `property` were found, kept or omitted.
    pub fn count(&self, property: Property) -> usize {
        self.found[property as usize]
    }

    /// The kept violations of `property`.
    pub fn of(&self, property: Property) -> impl Iterator<Item = &DeliveryViolation> {
        self.violations
            .iter()
            .filter(move |v| v.property() == Some(property))
    }

    /// The order cycle, if acyclic order was checked and violated.
    pub fn cycle(&self) -> Option<&OrderCycle> {
        self.violations.iter().find_map(|v| match v {
            DeliveryViolation::OrderCycle { cycle, .. } => Some(cycle),
            _ => None,
        })
    }

    pub(crate) fn push(&mut self, violation: DeliveryViolation) {
        if let Some(p) = violation.property() {
            self.found[p as usize] += 1;
        }
        if self.violations.len() < Self::MAX_VIOLATIONS {
            self.violations.push(violation);
        } else {
            self.omitted += 1;
        }
    }

    fn name(&self) -> String {
        match self.primitive {
            Some(p) => p.name().to_owned(),
            None => {
                let names: Vec<&str> = self.properties.iter().map(|p| p.title()).collect();
                if names.is_empty() {
                    "no property".to_owned()
                } else {
                    names.join(" + ")
                }
            }
        }
    }

    fn stats(&self) -> String {
        let c = &self.counts;
        format!(
            "{} messages cast, {} delivered ({} deliveries) by {} processes ({} correct) in {} groups; {} of {} steps outside the caster and destinations",
            c.casts, c.delivered, c.deliveries, c.processes, c.correct, c.groups, c.outside_steps, c.steps
        )
    }
}

impl fmt::Display for DeliveryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.name();
        if self.ok() {
            return write!(f, "{name}: ok — {}", self.stats());
        }
        let total = self.violations.len() + self.omitted;
        if self.is_malformed() {
            write!(
                f,
                "{name}: malformed delivery log, not checked — {total} problem(s)"
            )?;
            for v in self.violations.iter().take(Self::SHOWN) {
                write!(f, "\n  {v}")?;
            }
        } else {
            write!(f, "{name}: VIOLATED — {}", self.violations[0])?;
            for v in self.violations.iter().skip(1).take(Self::SHOWN - 1) {
                write!(f, "\n  also: {v}")?;
            }
        }
        if total > Self::SHOWN {
            write!(f, "\n  … and {} more", total - Self::SHOWN)?;
        }
        write!(f, "\n  ({})", self.stats())
    }
}
