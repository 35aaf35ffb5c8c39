//! The G-DUR engine (Saeida Ardekani, Sutra, Shapiro, Middleware'14; `../shared/seeds/003_…`):
//! deferred update replication written once, with the protocol's choices as plug-ins, and
//! P-Store (`../shared/seeds/001_…`) on it.
//!
//! * [`txn`]: the term a transaction submits (reads with versions, writes).
//! * [`layout`]: which partition a key is in and which groups replicate it.
//! * [`realization`]: the realization points, one trait ([`Realization`]).
//! * [`protocols`]: each protocol a small file of choices: [`protocols::PStore`] (A_ge\*, A_ge,
//!   G-DUR's P-Store, P-Store-2PC) and [`protocols::PStoreFull`] (A_full).
//! * [`termination`]: Algorithms 2 and 3 at a replica (the queue, votes, voting quorums,
//!   commit at the head of the queue), pure state.
//! * [`replica`]: the process: Algorithm 1 as a proxy, the termination as a replica, over the
//!   group-communication components of `ensemble-group` (genuine atomic multicast, atomic
//!   broadcast, two-phase commit).
//!
//! Atomic commitment is by group communication (Algorithm 3, [`termination`]) or by two-phase
//! commit (Algorithm 4, `ensemble_group::commit` embedded by [`replica`]).
//!
//! Not built yet: other protocols than P-Store's, versioning mechanisms other than per-key
//! timestamps.

pub mod check;
#[cfg(feature = "harness")]
pub mod figures;
#[cfg(feature = "harness")]
pub mod harness;
pub mod layout;
pub mod msg;
pub mod protocols;
pub mod realization;
pub mod replica;
pub mod sweep;
pub mod termination;
pub mod txn;

#[cfg(feature = "harness")]
pub use harness::GDurHarness;
pub use check::{check, history, Checked, InstallLog};
pub use layout::Layout;
pub use msg::{Class, Evidence, Msg};
pub use realization::{Commitment, Objects, Realization, Xcast};
pub use replica::{Costs, Durable, GDur, Installed, Programs, Replica, Setup, Timing};
pub use txn::{ReadRecord, Term};
