//! Parallel snapshot isolation (PSI): like SI, but snapshots need not be monotonic; no two
//! concurrent write-conflicting transactions both commit (Sovran et al., SOSP 2011; G-DUR
//! §6.4).
//!
//! Checked by the dependency-graph characterisation of Cerone, Gotsman and Yang ("Transaction
//! Chopping for Parallel Snapshot Isolation", DISC 2015) restated in Cerone & Gotsman,
//! "Analysing Snapshot Isolation" (JACM 2018), for the axiomatic PSI of Cerone, Bernardi and
//! Gotsman (CONCUR 2015): with `D = SO ∪ WR ∪ WW`, a history is PSI iff `(D+ ; RW?)` is
//! irreflexive — every cycle of the dependency graph contains at least two `rw` edges. The long
//! fork (two readers see two independent writes in opposite orders: a cycle with two
//! non-adjacent `rw` edges) is accepted; lost updates and fractured reads (one `rw` edge) are
//! not.

use super::violation;
use crate::cycle::{self, KindSet, Rule};
use crate::graph::Analysis;
use crate::report::Violation;

pub(super) fn check(a: &Analysis) -> Option<Violation> {
    cycle::find(a, Rule::AtMostOneRw(KindSet::ALL), |_| true).map(|o| violation(a, o))
}
