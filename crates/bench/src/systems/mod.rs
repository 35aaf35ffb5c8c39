//! The harnesses of the protocols this crate knows: the Conveyor Belt and its baselines. Other
//! protocols' harnesses live in their own crates; the `ensemble` binary lists them all.

pub mod belt;
