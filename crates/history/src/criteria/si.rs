//! Snapshot isolation (SI): a transaction "observes the state of the database at some point in
//! time" and no two concurrent transactions that write the same object both commit (Berenson
//! et al. 1995, generalised by Elnikety et al. 2005; G-DUR §6.3).
//!
//! Checked by the dependency-graph characterisation of Cerone & Gotsman, "Analysing Snapshot
//! Isolation" (PODC 2016, Theorem 9/10 there; JACM 65(2) 2018): with `D = SO ∪ WR ∪ WW`, a
//! history is SI iff `(D ; RW?)` is acyclic — every cycle of the dependency graph contains two
//! *adjacent* anti-dependency (`rw`) edges. Their theorem quantifies over version orders; here
//! the version order is given, so the condition is checked on the one graph it determines.
//! Lost updates (`T1 -rw-> T2 -ww-> T1`) and fractured reads (`T2 -rw-> T1 -wr-> T2`) are
//! cycles without adjacent `rw` edges, so they are rejected; write skew (`T1 -rw-> T2 -rw->
//! T1`) is accepted.

use super::violation;
use crate::cycle::{self, KindSet, Rule};
use crate::graph::Analysis;
use crate::report::Violation;

pub(super) fn check(a: &Analysis) -> Option<Violation> {
    cycle::find(a, Rule::NoAdjacentRw(KindSet::ALL), |_| true).map(|o| violation(a, o))
}
