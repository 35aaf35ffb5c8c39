//! Checking the delivery logs of a group-communication run: does what the processes delivered
//! (and which processes worked for each message) satisfy the properties the primitive promises?
//!
//! A [`DeliveryLog`] is the groups (id → member processes), every cast (message, caster,
//! destination groups `m.dst`, when it was cast, whether the caster was correct), every
//! process's delivery sequence and whether it was correct, and the *steps*: how many protocol
//! messages each process sent or received on behalf of each message. Its JSON form is in
//! `FORMAT.md` ("Delivery logs"). [`check`] decides any selection of [`Property`];
//! [`check_primitive`] the set a [`Primitive`] promises.
//!
//! # Correct processes
//!
//! A process is **correct** when it did not crash at all during the run; one that crashed and
//! recovered is not. This is the crash-stop reading the papers' properties are stated in, and
//! the honest one for crash-recovery runs: a recovered process may legitimately have missed
//! messages its state lost, so validity and agreement cannot demand them of it, while the
//! *uniform* properties (integrity, agreement's premise, prefix, acyclic, pairwise and FIFO
//! order) apply to every process, correct or not, recovered or not. The log carries the flag;
//! a harness that proves more (say, recovery from a durable log) can check the recovered
//! processes' sequences against the others' with the uniform properties, which already cover
//! them.
//!
//! # The properties
//!
//! From P-Store §2.4 (Schiper, Sutra, Pedone, "P-Store: Genuine Partial Replication in Wide
//! Area Networks", `../shared/seeds/001_…`), restated in `../shared/notes/dur-family-spec.md`
//! ("Atomic multicast (§2.4)"), where `m < m'` iff some process delivers m before m':
//!
//! * [`Property::Integrity`] — (i) *uniform integrity*: "for any site s and any message m, s
//!   A-Delivers m at most once, and only if s ∈ m.dst and m was previously A-MCast". Checked
//!   as: no process's sequence holds a message twice, every delivered message is a cast of the
//!   log, and the process is a member of one of its destination groups. "Previously" is not
//!   checked: deliveries carry no time (a cast is logged when it is invoked, so a delivery of a
//!   logged message cannot precede it unless message ids are reused, which is a malformed log).
//! * [`Property::Validity`] — (ii) "if a correct site s A-MCasts a message m, then eventually all
//!   correct sites s' ∈ m.dst A-Deliver m". Checked at the end of the run: every message whose
//!   caster is correct is in the sequence of every correct member of its destination groups. So
//!   the run must end after its faults have healed and its casts have settled; a harness checks
//!   it only on such runs.
//! * [`Property::Agreement`] — (iii) *uniform agreement*: "if a site s A-Delivers a message m,
//!   then eventually all correct sites s' ∈ m.dst A-Deliver m", s correct or not. Checked at the
//!   end of the run, like validity.
//! * [`Property::PrefixOrder`] — (iv) *uniform prefix order*: "for any two messages m and m' and
//!   any two sites s and s' such that {s, s'} ⊆ m.dst ∩ m'.dst, if s A-Delivers m and s'
//!   A-Delivers m', then either s A-Delivers m' before m or s' A-Delivers m before m'", for
//!   m ≠ m' (with m = m' no delivery could satisfy it). Decided as: for every two processes, their
//!   sequences restricted to the messages addressed to both are prefixes one of the other (the
//!   equivalence is argued in `order.rs`). It forbids both holes (s' skips a message s
//!   delivered before a common one) and opposite orders.
//! * [`Property::AcyclicOrder`] — (v) *uniform acyclic order*: "the relation < is acyclic".
//!   A violation reports a shortest cycle of `<`, each edge named by a process that delivered
//!   its messages in that order: `m1 -p0-> m2 -p3-> m1`.
//! * [`Property::Genuineness`] — Guerraoui & Schiper, "Genuine atomic multicast in asynchronous
//!   distributed systems" (TCS 2001), as P-Store §2.4 quotes it: "an algorithm A solving atomic
//!   multicast is genuine iff for any admissible run R of A and for any site s, in R, if s sends
//!   or receives a message, then some message m is A-MCast, and either s is the site that
//!   A-MCasts m or s ∈ m.dst". Checked per step, which is stronger and more useful than the
//!   letter: a step recorded *for m* is genuine iff its process is m's caster or a member of
//!   one of m.dst (a step for a message never cast is not genuine); a step recorded for no
//!   message (background traffic) is judged by the letter: genuine iff its process is the
//!   caster or a destination of some cast. The report counts the outside steps (issue 12's
//!   measure, counted whether or not genuineness is checked) and names each offending (process,
//!   message) with its number of steps, first offender first.
//!
//! Beyond P-Store, for the other primitives of issue 12:
//!
//! * [`Property::PairwiseOrder`] — for S-DUR's AM_pw-Cast (G-DUR's Algorithm 6 sets `xcast ≡
//!   AM_pw-Cast`; G-DUR names the primitive but does not define it): any two processes deliver
//!   the messages they both deliver in the same relative order. This is the *uniform total
//!   order* of Défago, Schiper, Urbán ("Total order broadcast and multicast algorithms: taxonomy
//!   and survey", ACM CSUR 2004, G-DUR's reference 40): "if processes p and q both deliver
//!   messages m and m', then p delivers m before m' if and only if q delivers m before m'".
//!   Unlike acyclic order it allows a cycle through three or more processes (p: a b, q: b c,
//!   r: c a), and unlike prefix order it allows holes.
//! * [`Property::GroupOrder`] — *uniform prefix order within each group*, for P-DUR's
//!   per-partition broadcast streams (P-DUR §V, `../shared/seeds/004_…`: "independent
//!   instances of atomic broadcast, each instance associated with a logical partition"; a
//!   message to several partitions is broadcast in each independently). It is P-Store's (iv)
//!   with the two processes taken inside one group: for any group g, any two messages m ≠ m'
//!   both addressed to g and any two members s, s' of g, if s delivers m and s' delivers m',
//!   then s delivers m' before m or s' delivers m before m'. This is P-DUR's own property (c),
//!   "every two processes in g deliver in the same order", read uniformly and without holes,
//!   as an atomic broadcast in g gives it. Decided as prefix order is, per group and pair of
//!   members, over the messages addressed to the group; a violation names the group, the two
//!   processes and the two messages. Members of different groups may deliver their common
//!   messages in opposite orders: no violation of group order, but one of prefix, acyclic and
//!   pairwise order, which is what tells these streams from atomic multicast (P-DUR
//!   compensates with a stronger certification test).
//! * [`Property::FifoOrder`] — *uniform FIFO order* (Hadzilacos & Toueg's FIFO broadcast, read
//!   for multicast and uniformly): if a process casts m before m', every process that is a
//!   destination of both and delivers m' has delivered m before it. A caster's casts are ordered
//!   by their `at`, ties by their position in the log.
//! * [`Property::Broadcast`] — every cast is addressed to every group. Atomic broadcast is atomic
//!   multicast with this property; then prefix order is exactly *every two processes' sequences
//!   are prefixes one of the other* (total order without holes), which is what atomic broadcast
//!   promises.
//!
//! Repeated deliveries and deliveries of messages never cast are integrity violations; the
//! order properties are stated over each process's *first* delivery of each cast message, so
//! that one fault is reported once. Prefix, group and FIFO order concern destination processes
//! only, by their definitions; acyclic and pairwise order take every delivery of a cast message.
//!
//! # Cost
//!
//! Integrity, validity, agreement, acyclic order and genuineness are linear in the log (acyclic
//! order: Tarjan over the graph with one edge per *consecutive* pair of deliveries, which has
//! the same transitive closure as `<`, see `order.rs`). Prefix and pairwise order compare every
//! two processes with one merge-like walk, O(P · deliveries); group order every two members of
//! each group, O(Σ_g |g| · deliveries); FIFO order is O(P · casts). The shortest cycle is
//! searched only when one exists, one linear breadth-first search per message on a cycle,
//! within a budget (the report says when it stopped early).
//!
//! ```
//! use ensemble_history::delivery::{check_primitive, Cast, DeliveryLog, Primitive};
//!
//! // Two groups; m1 to both, m2 to both; p0 (g0) and p2 (g1) deliver them in opposite orders.
//! let mut log = DeliveryLog::new();
//! log.add_group(0, [0, 1]);
//! log.add_group(1, [2, 3]);
//! log.add_cast(Cast::new(1, 0, [0, 1]));
//! log.add_cast(Cast::new(2, 2, [0, 1]));
//! for (p, order) in [(0, [1, 2]), (1, [1, 2]), (2, [2, 1]), (3, [2, 1])] {
//!     for m in order {
//!         log.deliver(p, m);
//!     }
//! }
//! let report = check_primitive(&log, Primitive::AtomicMulticast);
//! assert!(!report.ok());
//! assert_eq!(report.cycle().unwrap().to_string(), "m1 -p0-> m2 -p2-> m1");
//! assert!(check_primitive(&log, Primitive::ReliableMulticast).ok());
//! // Each group agrees within itself: what per-partition streams promise.
//! assert!(check_primitive(&log, Primitive::PartitionStreams).ok());
//! ```

mod basic;
mod index;
mod log;
mod order;
mod report;

pub use log::{Cast, DeliveryLog, Group, GroupId, MessageId, ProcessLog, ProcessNo, Step};
pub use report::{
    DeliveryCounts, DeliveryReport, DeliveryViolation, LogMalformation, OrderCycle, OrderEdge,
    Primitive, Property, UnknownProperty,
};

use index::Index;

/// Checks `log` against `properties` (in the order of [`Property::ALL`], each once).
pub fn check(log: &DeliveryLog, properties: &[Property]) -> DeliveryReport {
    run(log, None, properties)
}

/// Checks `log` against the properties `primitive` promises.
pub fn check_primitive(log: &DeliveryLog, primitive: Primitive) -> DeliveryReport {
    run(log, Some(primitive), primitive.properties())
}

fn run(log: &DeliveryLog, primitive: Option<Primitive>, properties: &[Property]) -> DeliveryReport {
    let mut selected = properties.to_vec();
    selected.sort();
    selected.dedup();
    let mut report = DeliveryReport::new(primitive, selected.clone());
    let c = &mut report.counts;
    c.groups = log.groups.len();
    c.processes = log.processes.len();
    c.correct = log.processes.iter().filter(|p| p.correct).count();
    c.casts = log.casts.len();
    c.deliveries = log.processes.iter().map(|p| p.delivered.len()).sum();
    c.steps = log.steps.iter().map(|s| s.count).sum();

    let ix = match Index::build(log) {
        Ok(ix) => ix,
        Err(malformations) => {
            for m in malformations {
                report.push(DeliveryViolation::Malformed(m));
            }
            return report;
        }
    };
    report.counts.delivered = (0..ix.messages() as u32)
        .filter(|&m| !ix.delivered_by.row(m).is_empty())
        .count();
    let steps = basic::outside_steps(&ix);
    report.counts.outside_steps = steps.outside;

    for property in selected {
        match property {
            Property::Integrity => {
                for v in &ix.integrity {
                    report.push(v.clone());
                }
            }
            Property::Validity => basic::validity(&ix, &mut report),
            Property::Agreement => basic::agreement(&ix, &mut report),
            Property::PrefixOrder => order::prefix_order(&ix, &mut report),
            Property::GroupOrder => order::group_order(&ix, &mut report),
            Property::AcyclicOrder => order::acyclic_order(&ix, &mut report),
            Property::PairwiseOrder => order::pairwise_order(&ix, &mut report),
            Property::FifoOrder => order::fifo_order(&ix, &mut report),
            Property::Broadcast => basic::broadcast(&ix, &mut report),
            Property::Genuineness => {
                for v in &steps.offenders {
                    report.push(v.clone());
                }
            }
        }
    }
    report
}
