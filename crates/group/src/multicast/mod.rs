//! Group-communication primitives on top of fault-tolerant groups (issue 12, item 2), each a
//! sans-IO component with `cast` and deliveries, in the vocabulary of P-Store §2.4 and G-DUR §5:
//! a message `m` is *cast* to its *destination groups* `m.dst` and *delivered* by the members of
//! those groups; Δ is one message delay (one network hop).
//!
//! * [`ReliableMulticast`]: reliable multicast to any set of groups (background propagation),
//!   uniform integrity, validity and uniform agreement, no order; 2Δ, no consensus.
//! * [`AtomicBroadcast`]: atomic broadcast to every group of a deployment through one sequencer
//!   group's OmniPaxos log; uniform integrity, validity, uniform agreement, uniform total
//!   (prefix) order; 4Δ to 5Δ.
//! * [`GenuineMulticast`]: genuine atomic multicast to any set of groups, Skeen's timestamps
//!   between groups with every step through the group's OmniPaxos log; uniform integrity,
//!   validity, uniform agreement, uniform prefix and acyclic order, genuineness; 3Δ for one
//!   group, 6Δ for several (Δ and 2Δ counting inter-group delays only, as P-Store does). It
//!   also serves S-DUR's AM_pw-Cast (pairwise order follows from acyclic order). In its
//!   [`Ordering::PerGroup`] mode it is P-DUR's per-partition broadcast streams instead: each
//!   group delivers in its own log order, uniform prefix order within each group only, 3Δ for
//!   any number of groups.
//!
//! Each module's documentation states the properties, the design, why it keeps them under
//! message loss, duplication, reordering, partitions and the crash of a minority of each group,
//! and its cost in message delays and messages per cast.
//!
//! # The failure model they assume
//!
//! Links may lose, duplicate, delay and reorder messages; partitions heal. In every group at
//! most a minority of members crash (with or without losing their volatile state, and possibly
//! recovering). A caster may crash at any point, after sending its message to only some of the
//! destinations. A process is *correct* if it never crashes (the crash-stop reading the checker
//! uses, `ensemble_history::delivery`); a recovered process is bound by the uniform properties
//! only, so what it must keep across a crash is what makes those hold: the ids of what it
//! delivered (integrity) and, for atomic broadcast, the position it delivered the log up to
//! (order). Each component says what the embedding process must persist, and takes it back when
//! it is rebuilt.
//!
//! # All are sans-IO
//!
//! Messages in and out, a `tick` from the embedding process's timer (see [`crate::Ticker`]) for
//! retransmissions; no sockets, threads, clocks or randomness. Outputs are vectors in a
//! deterministic order (maps are `BTreeMap`s), so a simulated run is a function of its seed.

mod broadcast;
mod decided;
mod genuine;
mod reliable;

pub use broadcast::{AbMsg, AbOutput, AbRefusal, AtomicBroadcast, BroadcastConfig, BroadcastCounters, Entry, RESEND_BATCH};
pub use genuine::{GenuineConfig, GenuineCounters, GenuineMulticast, GmEntry, GmMsg, GmOutput, GmRefusal, Ordering, GM_RESEND_BATCH, MAX_BACKOFF};
pub use reliable::{ReliableMulticast, RmMsg, RmOutput, RmRefusal};

use crate::GroupId;
use ensemble_core::ProcessId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A cast message's identity: its caster and the caster's cast counter. Unique over a run as
/// long as a caster never reuses a counter value, which is why the counter is part of what a
/// caster persists (`next_seq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CastId {
    pub caster: ProcessId,
    pub seq: u64,
}

impl std::fmt::Display for CastId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.caster, self.seq)
    }
}

/// A delivered message: its id and its payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery<M> {
    pub id: CastId,
    pub payload: M,
}

/// The groups Γ of a deployment: who is a member of which group. Every process of a deployment
/// must be given the same one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Directory {
    groups: BTreeMap<GroupId, Vec<ProcessId>>,
}

impl Directory {
    pub fn new(groups: impl IntoIterator<Item = (GroupId, Vec<ProcessId>)>) -> Directory {
        Directory { groups: groups.into_iter().collect() }
    }

    pub fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.groups.keys().copied()
    }

    pub fn members(&self, g: GroupId) -> &[ProcessId] {
        self.groups.get(&g).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The group `p` is a member of (groups are disjoint), if any.
    pub fn group_of(&self, p: ProcessId) -> Option<GroupId> {
        self.groups.iter().find(|(_, ms)| ms.contains(&p)).map(|(g, _)| *g)
    }

    /// The members of the groups in `dst`, each once, in id order.
    pub fn processes(&self, dst: &[GroupId]) -> Vec<ProcessId> {
        let mut out: Vec<ProcessId> = dst.iter().flat_map(|g| self.members(*g).iter().copied()).collect();
        out.sort();
        out.dedup();
        out
    }

    /// Every member of every group, each once, in id order.
    pub fn all_processes(&self) -> Vec<ProcessId> {
        let all: Vec<GroupId> = self.groups().collect();
        self.processes(&all)
    }
}
