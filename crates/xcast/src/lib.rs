//! The group-communication primitives of `ensemble-group` at work (issue 12): a process that
//! embeds any one of them and casts, its seeded simulations under random fault plans checked by
//! `ensemble_history::delivery` ([`sim`]; the tests, the sweep command ([`sweep`]) and the
//! `xcast-latency` figure ([`latency`]) all run these), and two-phase commit's own runs
//! ([`commit`]).

pub mod commit;
pub mod latency;
pub mod node;
pub mod real;
pub mod sim;
pub mod sweep;
