//! The harnesses of the protocols this crate knows: the Conveyor Belt and its baselines, and
//! the two-phase-commit baseline over the same plan. Other protocols' harnesses live in their
//! own crates; the `ensemble` binary lists them all.

pub mod belt;
pub mod twopc;
