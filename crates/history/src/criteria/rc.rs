//! Read committed (RC): "a transaction reads a committed version of an object without any
//! additional guarantee" (G-DUR §7), taken as Adya's PL-2 (Adya, Liskov, O'Neil, ICDE 2000):
//!
//! * no G0, a cycle of `ww` edges (write cycle);
//! * no G1a, a read of an aborted transaction's write (checked for every criterion);
//! * no G1b, a read of a version its writer overwrote before committing (every criterion);
//! * no G1c, a cycle of `ww ∪ wr` edges (circular information flow).
//!
//! G0 cycles are G1c cycles, so one search over `ww ∪ wr` finds the shortest of either; the
//! report names which it is. Session order plays no part (Adya's levels have none).

use super::violation;
use crate::cycle::{self, KindSet, Rule};
use crate::graph::Analysis;
use crate::report::{EdgeKind, Violation};

pub(super) fn check(a: &Analysis) -> Option<Violation> {
    let kinds = KindSet::of(&[EdgeKind::Ww, EdgeKind::Wr]);
    cycle::find(a, Rule::Any(kinds), |_| true).map(|o| violation(a, o))
}
