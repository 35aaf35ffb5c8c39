//! P-Store (Schiper, Sutra, Pedone; `../shared/seeds/001_…`), as G-DUR's plug-ins (its
//! Algorithm 5), in three variants:
//!
//! * **A_ge\*** (`p-store`, P-Store §4.2): genuine atomic multicast of every transaction that is
//!   global or updates, to the groups replicating what it reads or writes; votes from the
//!   replicas of what it read; parallel certification of commuting (read-write-conflict-free)
//!   transactions by a pool of certifiers, updates applied at the head of the queue, so in
//!   multicast order. Local read-only transactions commit at once, without certification
//!   (P-Store §3; the local store gives order-preserving serializability because updates are
//!   applied in multicast order at every site, §4.2's rationale).
//! * **A_ge** (`p-store-ge`, §4.1): the same with one certifier, so every delivered transaction
//!   is certified, voted and decided before the next is looked at: the convoy effect of §4.2.
//! * **P-Store as G-DUR realizes it** (`p-store-gdur`, Algorithm 5, §8.5): every transaction,
//!   queries included, is certified (`certifying_obj = ws ∪ rs` always), and the replicas of
//!   written objects vote too (`vote_snd_obj = ws ∪ rs`); both are safe, this one waits on more
//!   votes (spec note, G-DUR E.7, E.10).
//! * **P-Store-2PC** (`p-store-2pc`, G-DUR §8.5, Fig. 6): G-DUR's realization with atomic
//!   commitment by two-phase commit (Algorithm 4) in place of the multicast and votes: the
//!   proxy coordinates, every replica of what `T` reads or writes takes part, a replica that
//!   holds a conflicting transaction voted *yes* and undecided votes *no* at once (preemptive
//!   abort). Every transaction is certified, local queries included: without the multicast's
//!   order, replicas apply non-conflicting updates in different orders, and an uncertified
//!   query at each of two replicas could see two such updates in opposite orders.
//! * **A_full** (`p-store-full`, §7.3, [`PStoreFull`]): full replication; every update is
//!   atomically multicast to every group, every transaction is local so no site waits for
//!   votes, read-only transactions commit at once; the certifier pool of A_ge\*.
//!
//! The certification test is P-Store's `Certify(T)`: every version `T` read of an object this
//! site replicates is still the latest (`ts = Version(k, s)`), G-DUR's `∀(x_k, x_j) ∈ rs(Ti) ×
//! db: Θ(x_j) ≤ Θ(x_k)` with TS versioning.
//!
//! Gaps of the paper and how they are closed here (spec note, P-Store E.1–E.3):
//! * a global read-only transaction has no write replica to collect its votes: its proxy is a
//!   vote recipient and evaluates the voting quorum itself, as G-DUR's Algorithm 3 sends votes
//!   to `coord(Ti)` (the engine does this for every protocol);
//! * admission in A_ge\*: a delivered transaction takes a certifier in delivery order and votes
//!   once it commutes with every transaction ahead of it in the queue (G-DUR Algorithm 3's
//!   precondition, read as "every predecessor", E.1), so certification never reorders
//!   conflicting transactions against the multicast order (Lemma .3);
//! * votes go to the write replicas outside the voter's group and to the proxy; members of one
//!   group compute the same vote, so a site's own vote covers its group (E.3).

use crate::realization::{Commitment, Objects, Realization, Xcast};
use crate::txn::Term;
use ensemble_kv::store::VersionStore;
use ensemble_kv::Key;

/// P-Store's certification test over the objects this site replicates.
fn certify(t: &Term, store: &dyn VersionStore, local: &dyn Fn(Key) -> bool) -> bool {
    t.reads.iter().filter(|r| local(r.key)).all(|r| store.latest_number(r.key) == r.number)
}

/// Which P-Store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PStoreVariant {
    /// P-Store's own: local read-only transactions commit uncertified, read replicas vote.
    Original,
    /// G-DUR's Algorithm 5: everything certified, read and write replicas vote.
    GDur,
}

/// A_ge\* (`certifiers` > 1), A_ge (`certifiers` = 1), or G-DUR's realization, with atomic
/// commitment by group communication or 2PC.
#[derive(Clone, Copy, Debug)]
pub struct PStore {
    pub variant: PStoreVariant,
    pub certifiers: usize,
    pub commitment: Commitment,
}

impl PStore {
    /// P-Store §7.2: "we use 100 certifier threads" after Fig. 2 (the 50 more of the peak add
    /// little).
    pub const CERTIFIERS: usize = 100;

    pub fn a_ge_star(certifiers: usize) -> PStore {
        PStore { variant: PStoreVariant::Original, certifiers: certifiers.max(1), commitment: Commitment::GroupCommunication }
    }

    pub fn a_ge() -> PStore {
        PStore::a_ge_star(1)
    }

    pub fn gdur(certifiers: usize) -> PStore {
        PStore { variant: PStoreVariant::GDur, certifiers: certifiers.max(1), commitment: Commitment::GroupCommunication }
    }

    /// P-Store-2PC. A replica certifies a transaction when its PREPARE arrives, with no queue
    /// to wait in, so there is no certifier pool.
    pub fn two_phase() -> PStore {
        PStore { variant: PStoreVariant::GDur, certifiers: 1, commitment: Commitment::TwoPhaseCommit }
    }
}

impl Realization for PStore {
    fn name(&self) -> &'static str {
        match (self.variant, self.certifiers) {
            _ if self.commitment == Commitment::TwoPhaseCommit => "p-store-2pc",
            (PStoreVariant::GDur, _) => "p-store-gdur",
            (PStoreVariant::Original, 1) => "p-store-ge",
            (PStoreVariant::Original, _) => "p-store",
        }
    }

    fn xcast(&self) -> Xcast {
        Xcast::Multicast
    }

    fn commitment(&self) -> Commitment {
        self.commitment
    }

    fn certifying_obj(&self, t: &Term, local: bool) -> Objects {
        match self.variant {
            PStoreVariant::Original if local && t.read_only() => Objects::Nothing,
            _ => Objects::ReadWriteSet,
        }
    }

    fn vote_snd_obj(&self, _t: &Term, _local: bool) -> Objects {
        match self.variant {
            PStoreVariant::Original => Objects::ReadSet,
            PStoreVariant::GDur => Objects::ReadWriteSet,
        }
    }

    fn certify(&self, t: &Term, store: &dyn VersionStore, local: &dyn Fn(Key) -> bool) -> bool {
        certify(t, store, local)
    }

    fn certifiers(&self) -> usize {
        self.certifiers
    }
}

/// A_full: full replication, no votes (P-Store §7.3). "T is atomically multicast to all
/// sites": with the same genuine multicast as A_ge\*, addressed to every group, not a
/// sequencer's broadcast, whose sequencer group would commit its own clients' transactions a
/// WAN round trip before everybody else's.
#[derive(Clone, Copy, Debug)]
pub struct PStoreFull {
    pub certifiers: usize,
}

impl Realization for PStoreFull {
    fn name(&self) -> &'static str {
        "p-store-full"
    }

    fn xcast(&self) -> Xcast {
        Xcast::Multicast
    }

    fn certifying_obj(&self, t: &Term, _local: bool) -> Objects {
        if t.read_only() {
            Objects::Nothing
        } else {
            Objects::All
        }
    }

    /// Every site holds every object, so its own vote is a quorum: no vote leaves a site.
    fn vote_snd_obj(&self, _t: &Term, _local: bool) -> Objects {
        Objects::ReadSet
    }

    fn certify(&self, t: &Term, store: &dyn VersionStore, local: &dyn Fn(Key) -> bool) -> bool {
        certify(t, store, local)
    }

    fn certifiers(&self) -> usize {
        self.certifiers
    }
}
