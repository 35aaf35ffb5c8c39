//! Serializability (SER): "every concurrent execution of committed transactions is equivalent
//! to some serial execution of the same transactions" (G-DUR §6.1).
//!
//! With the version order known exactly, a history is serializable iff its dependency graph
//! `WW ∪ WR ∪ RW` (plus session order `SO` when sessions are recorded, so that a session's
//! transactions serialize in the order it ran them) is acyclic: Adya's PL-3 (Adya, Liskov,
//! O'Neil, ICDE 2000), and `GraphSER` in Cerone & Gotsman, "Analysing Snapshot Isolation"
//! (PODC 2016 / JACM 2018).

use super::violation;
use crate::cycle::{self, KindSet, Rule};
use crate::graph::Analysis;
use crate::report::Violation;

pub(super) fn check(a: &Analysis) -> Option<Violation> {
    cycle::find(a, Rule::Any(KindSet::ALL), |_| true).map(|o| violation(a, o))
}
