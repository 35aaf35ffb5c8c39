//! G-DUR's realization points (§3–§5, the spec note's table A.8): what a protocol chooses, and
//! nothing else. The engine ([`crate::replica`]) is Algorithms 1–3 written once against this
//! trait; a protocol is a value implementing it (`crate::protocols`).

use crate::txn::Term;
use ensemble_kv::store::{ReadRule, VersionStore};
use ensemble_kv::Key;

/// A set of a transaction's objects, as the realization points name them (G-DUR §5:
/// `certifying_obj` is ∅, `ws`, `ws ∪ rs` or `Objects`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objects {
    /// ∅.
    Nothing,
    ReadSet,
    WriteSet,
    ReadWriteSet,
    /// Every object: every replica takes part (atomic broadcast to all groups).
    All,
}

impl Objects {
    /// The keys of `t` in this set (`All`: every key `t` touches; the caller widens it to every
    /// group).
    pub fn keys(self, t: &Term) -> Vec<Key> {
        match self {
            Objects::Nothing => Vec::new(),
            Objects::ReadSet => t.read_keys().collect(),
            Objects::WriteSet => t.write_keys().collect(),
            Objects::ReadWriteSet | Objects::All => t.items(),
        }
    }
}

/// How terminating transactions are ordered (G-DUR's `xcast`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Xcast {
    /// AM-Cast: genuine atomic multicast to the groups of the certifying objects.
    Multicast,
    /// AB-Cast: atomic broadcast to every group.
    Broadcast,
}

/// How a replica learns whether a transaction commits (G-DUR's `AC` plug-in, §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commitment {
    /// Algorithm 3: the xcast orders conflicting transactions, replicas certify in that order
    /// and exchange votes, a voting quorum decides, commits wait for the head of the queue.
    GroupCommunication,
    /// Algorithm 4: the proxy is `coord(Ti)`, the term goes by plain multicast (2PC's PREPARE)
    /// to every replica of `certifying_obj`, a replica votes *no* at once if an undecided
    /// transaction it voted *yes* on does not commute with `Ti` (preemptive abort), the proxy
    /// decides on every replica's vote; no order, no head-of-queue wait
    /// (`ensemble_group::commit`). `xcast` is not consulted.
    TwoPhaseCommit,
}

/// A DUR protocol as G-DUR's plug-ins.
pub trait Realization: std::fmt::Debug + Send + Sync {
    /// The system name (`--system`).
    fn name(&self) -> &'static str;

    /// `choose` (§4.2): which version a read returns.
    fn read_rule(&self) -> ReadRule {
        ReadRule::Latest
    }

    fn xcast(&self) -> Xcast;

    /// `AC`: atomic commitment by group communication (the default) or by 2PC.
    fn commitment(&self) -> Commitment {
        Commitment::GroupCommunication
    }

    /// `certifying_obj(Ti)` (Algorithm 2): the objects whose replicas must certify `t`;
    /// `Nothing` commits `t` at once, without synchronization. `local`: P-Store's "every replica
    /// of `t` replicates every item of `t`".
    fn certifying_obj(&self, t: &Term, local: bool) -> Objects;

    /// `vote_snd_obj(Ti)`: the objects whose replicas' votes make a voting quorum (every object
    /// of this set must be covered by a yes from one of its replicas).
    fn vote_snd_obj(&self, t: &Term, local: bool) -> Objects;

    /// `commute(Ti, Tj)` under group communication: `a` may be certified while `b`, ahead of it
    /// in the queue, is not decided. (Under 2PC the preemption test is `Term`'s
    /// [`ensemble_group::commit::Commute`], which adds write-write conflicts: without an order
    /// from the xcast, two undecided writers of one key could be applied in different orders at
    /// its replicas.)
    fn commute(&self, a: &Term, b: &Term) -> bool {
        !a.conflicts(b)
    }

    /// `certify(Ti)` at a replica, over the objects it replicates (`local`).
    fn certify(&self, t: &Term, store: &dyn VersionStore, local: &dyn Fn(Key) -> bool) -> bool;

    /// How many transactions a replica certifies at once (P-Store §6's pool of certifier
    /// threads; 1 is sequential certification, A_ge).
    fn certifiers(&self) -> usize;
}
