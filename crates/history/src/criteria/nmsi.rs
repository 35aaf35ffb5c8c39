//! Non-monotonic snapshot isolation (NMSI): Saeida Ardekani, Sutra, Shapiro, "Non-Monotonic
//! Snapshot Isolation: scalable and strong consistency for geo-replicated transactional
//! systems" (SRDS 2013), the definition G-DUR §6.5 cites. A history is NMSI iff it is
//!
//! * **ACA** (avoids cascading aborts): every read returns a committed version — here, no G1a
//!   and no G1b;
//! * **CONS** (consistent snapshot): if `Ti` reads `x_j`, `Tk` writes `x_k` and `Ti` depends on
//!   `Tk`, then `x_k` precedes (or is) `x_j` in the version order;
//! * **WCF** (write-conflict freedom): independent committed transactions never write the same
//!   object;
//!
//! where `Ti` depends on `Tj` when the transitive closure of "reads a version installed by"
//! relates them.
//!
//! **What is implemented.** Dependency is taken as the transitive closure of `WR ∪ WW`: the
//! writer of a version also depends on the writer of the version it replaced. That is what
//! Jessy's certification enforces (G-DUR Algorithm 10, line 6: a writer's snapshot must
//! include the latest committed version of every object it writes). Then, with the version
//! order given:
//!
//! * WCF holds by construction (two writers of a key are related through `ww`), and a lost
//!   update shows up as a CONS violation instead: the second writer depends on the first
//!   (`ww`) but read the version before it;
//! * CONS fails exactly when some `Ti -rw(x)-> Tn` has a `(WR ∪ WW)+` path back from `Tn` to
//!   `Ti` (`Tn` or a later writer of `x` is a dependency of `Ti`);
//! * ACA forbids circular reads-from, and with the version order following commit order, any
//!   cycle of `WR ∪ WW` (G1c).
//!
//! So the check is: no G1a, no G1b, and `(WR ∪ WW)+ ; RW?` irreflexive — every cycle of
//! `WW ∪ WR ∪ RW` has at least two `rw` edges. This is the PSI condition without session order:
//! NMSI promises nothing across a session, which is what "non-monotonic" allows.
//!
//! **Exactness.** For histories in which every transaction reads a key before writing it (no
//! blind writes), this is exactly the paper's definition (each writer then read the version
//! right before its own, or CONS fails, so reads-from already relates consecutive writers). With
//! blind writes it is *more permissive* than the paper's letter: two blind writers of a key
//! that no chain of reads relates violate the literal WCF even when they ran one after the
//! other, and are accepted here. It is never stricter than the literal definition on histories
//! whose version order follows commit order.

use super::violation;
use crate::cycle::{self, KindSet, Rule};
use crate::graph::Analysis;
use crate::report::{EdgeKind, Violation};

pub(super) fn check(a: &Analysis) -> Option<Violation> {
    let kinds = KindSet::of(&[EdgeKind::Ww, EdgeKind::Wr, EdgeKind::Rw]);
    cycle::find(a, Rule::AtMostOneRw(kinds), |_| true).map(|o| violation(a, o))
}
