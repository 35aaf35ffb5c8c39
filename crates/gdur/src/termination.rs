//! The replica's side of termination: G-DUR's Algorithm 2 (`deliver`, the queue `Q`, `commit`,
//! `abort`) with atomic commitment by group communication (Algorithm 3: `vote`, voting quorums,
//! `decide` with commit at the head of `Q`), which is P-Store's A_ge\* (§4.2) when the
//! realization's commutativity is "no read-write conflict".
//!
//! Pure state: deliveries and votes in, [`Action`]s out; the replica ([`crate::replica`]) turns
//! actions into messages and charges their cost.
//!
//! # The queue
//!
//! Every delivered transaction this replica votes on or applies enters `Q` in delivery order.
//! It then goes through three steps:
//! 1. **admitted**: it holds one of the realization's certifiers (P-Store §6: "each A-Delivered
//!    T gets a certifier thread"). Certifiers are handed out in delivery order, so a
//!    transaction never overtakes one delivered before it in taking a certifier.
//! 2. **certified** (Algorithm 3's `vote`): once it commutes with every transaction ahead of
//!    it in `Q`. A voter certifies it against its store and sends its vote. A replica that only
//!    votes (it writes nothing of `T`) is then done with `T` and frees the certifier.
//! 3. **decided**: a write replica decides once the votes it holds make a voting quorum
//!    (`outcome ≠ ⊥`): an abort at once, wherever `T` is in `Q`; a commit only at the head of
//!    `Q`, so every replica applies updates in delivery order (G-DUR: "mandatory for every
//!    criterion equal or stronger than Serializability").
//!
//! Why votes agree (P-Store Lemma .2): a vote is taken when every transaction delivered earlier
//! that conflicts with `T` has been decided and applied, and no later one has been, so a
//! replica's vote is a function of the delivery order, which the multicast makes the same at
//! every replica of an object; members of one group therefore vote alike, and a group's vote
//! stands for its members (votes are kept per group).

use crate::layout::Layout;
use crate::realization::{Objects, Realization};
use crate::txn::Term;
use ensemble_core::ProcessId;
use ensemble_group::GroupId;
use ensemble_kv::store::VersionStore;
use ensemble_kv::{Key, TxnId};
use std::collections::{BTreeMap, VecDeque};

/// A delivered transaction in `Q`.
#[derive(Clone, Debug)]
struct Queued {
    term: Term,
    /// This replica replicates an object of `vote_snd_obj(T)`: it votes.
    voter: bool,
    /// This replica replicates an object `T` writes: it decides and applies.
    writes_here: bool,
    /// The objects of `vote_snd_obj(T)`: a voting quorum covers each with a yes.
    vote_keys: Vec<Key>,
    admitted: bool,
    certified: bool,
    /// When it was certified, in ticks (for asking again for missing votes).
    certified_at: u64,
}

/// What the replica must do.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Send this replica's vote on `txn` to `to`.
    Vote { txn: TxnId, vote: bool, to: Vec<ProcessId> },
    /// `term` committed here: `applied` are the writes installed (those of objects this
    /// replica replicates), at store stamp `stamp`.
    Committed { term: Term, applied: Vec<(Key, ensemble_kv::Value)>, stamp: u64 },
    /// `txn` aborted here.
    Aborted { txn: TxnId },
    /// Charge the certification of `keys` read keys.
    Certified { keys: usize },
}

/// The termination state of one replica: what must survive its crash (`Q`, the votes it took,
/// the outcomes it decided).
#[derive(Clone, Debug, Default)]
pub struct Termination {
    q: VecDeque<TxnId>,
    entries: BTreeMap<TxnId, Queued>,
    /// Votes heard or cast, by transaction and voting group, for undecided transactions.
    votes: BTreeMap<TxnId, BTreeMap<GroupId, bool>>,
    /// This replica's votes, answered to whoever asks again.
    my_votes: BTreeMap<TxnId, bool>,
    /// Outcomes decided here, answered to whoever asks again.
    decided: BTreeMap<TxnId, bool>,
    /// Certifiers in use.
    busy: usize,
    /// Counters: transactions that waited for a certifier or for a conflicting predecessor.
    pub waited_for_certifier: u64,
    pub waited_for_conflict: u64,
}

/// Who this replica is, for one call.
pub struct Ctx<'a> {
    pub me: ProcessId,
    pub group: GroupId,
    pub layout: &'a Layout,
    pub realization: &'a dyn Realization,
    pub now_ticks: u64,
}

impl Termination {
    /// `deliver(Ti)` (Algorithm 2): appends a delivered transaction to `Q`, unless this
    /// replica neither votes on it nor applies it, or already has it.
    pub fn deliver(&mut self, cx: &Ctx<'_>, term: Term) {
        let id = term.id;
        if self.entries.contains_key(&id) || self.decided.contains_key(&id) || self.my_votes.contains_key(&id) {
            return;
        }
        let local = cx.layout.is_local(&term);
        let vote_keys = cx.realization.vote_snd_obj(&term, local).keys(&term);
        let voter = vote_keys.iter().any(|&k| cx.layout.group_replicates(cx.group, k));
        let writes_here = term.write_keys().any(|k| cx.layout.group_replicates(cx.group, k));
        if !voter && !writes_here {
            return;
        }
        self.q.push_back(id);
        self.entries.insert(id, Queued { term, voter, writes_here, vote_keys, admitted: false, certified: false, certified_at: 0 });
    }

    /// A vote of group `group` on `txn` (Algorithm 3's `⟨VOTE, Ti, v⟩`).
    pub fn vote(&mut self, txn: TxnId, group: GroupId, vote: bool) {
        if self.decided.contains_key(&txn) {
            return;
        }
        self.votes.entry(txn).or_default().insert(group, vote);
    }

    pub fn my_vote(&self, txn: TxnId) -> Option<bool> {
        self.my_votes.get(&txn).copied()
    }

    pub fn outcome(&self, txn: TxnId) -> Option<bool> {
        self.decided.get(&txn).copied()
    }

    /// What the head of `Q` waits for, if anything is queued: for a report on a stalled run.
    pub fn head(&self) -> Option<String> {
        let id = self.q.front()?;
        let e = &self.entries[id];
        let votes: Vec<String> = self.votes.get(id).into_iter().flatten().map(|(g, v)| format!("g{}={v}", g.0)).collect();
        Some(format!(
            "{} queued, head {id}: admitted {}, certified {}, voter {}, writes here {}, votes [{}]",
            self.q.len(),
            e.admitted,
            e.certified,
            e.voter,
            e.writes_here,
            votes.join(" ")
        ))
    }

    /// Transactions in `Q`.
    pub fn queued(&self) -> usize {
        self.q.len()
    }

    /// Certified transactions still waiting for votes since before `before` ticks, with the
    /// groups whose votes would complete a quorum: the replica asks them again (a vote may
    /// have been lost, or its voter may have crashed before sending it).
    /// Each is asked once per call; the wait restarts.
    pub fn missing_votes(&mut self, cx: &Ctx<'_>, before: u64) -> Vec<(TxnId, Vec<GroupId>)> {
        let mut out = Vec::new();
        for e in self.entries.values_mut().filter(|e| e.certified && e.writes_here && e.certified_at < before) {
            let votes = self.votes.get(&e.term.id);
            let mut missing: Vec<GroupId> = Vec::new();
            for &k in &e.vote_keys {
                let gs = cx.layout.groups_of(k);
                if !gs.iter().any(|g| votes.and_then(|v| v.get(g)) == Some(&true)) {
                    missing.extend(gs.iter().copied().filter(|&g| g != cx.group));
                }
            }
            missing.sort();
            missing.dedup();
            if !missing.is_empty() {
                e.certified_at = cx.now_ticks;
                out.push((e.term.id, missing));
            }
        }
        out
    }

    /// Algorithm 3's three-valued `outcome(Ti)` over the votes held: `Some(false)` as soon as a
    /// vote is no (every voting quorum holds a replica of that voter's objects, which votes
    /// alike), `Some(true)` once every object of `vote_snd_obj` is covered by a yes.
    pub fn evaluate(layout: &Layout, vote_keys: &[Key], votes: Option<&BTreeMap<GroupId, bool>>) -> Option<bool> {
        let Some(votes) = votes else {
            return if vote_keys.is_empty() { Some(true) } else { None };
        };
        if votes.values().any(|v| !v) {
            return Some(false);
        }
        vote_keys.iter().all(|&k| layout.groups_of(k).iter().any(|g| votes.get(g) == Some(&true))).then_some(true)
    }

    /// Admits, certifies and decides whatever can go, in `Q` order, applying committed writes
    /// to `store`. Call after every delivery and vote.
    pub fn progress(&mut self, cx: &Ctx<'_>, store: &mut dyn VersionStore) -> Vec<Action> {
        let mut actions = Vec::new();
        loop {
            let mut changed = false;
            // 1. Certifiers, in delivery order.
            let certifiers = cx.realization.certifiers();
            for id in &self.q {
                let e = self.entries.get_mut(id).expect("queued entries exist");
                if e.admitted {
                    continue;
                }
                if self.busy >= certifiers {
                    self.waited_for_certifier += 1;
                    break;
                }
                e.admitted = true;
                self.busy += 1;
            }
            // 2. Certify what commutes with everything ahead of it.
            let mut i = 0;
            while i < self.q.len() {
                let id = self.q[i];
                let e = &self.entries[&id];
                if !e.admitted {
                    break;
                }
                if e.certified {
                    i += 1;
                    continue;
                }
                let blocked = self.q.iter().take(i).any(|p| !cx.realization.commute(&e.term, &self.entries[p].term));
                if blocked {
                    self.waited_for_conflict += 1;
                    i += 1;
                    continue;
                }
                let e = self.entries.get_mut(&id).expect("present");
                e.certified = true;
                e.certified_at = cx.now_ticks;
                changed = true;
                if e.voter {
                    let local = |k: Key| cx.layout.group_replicates(cx.group, k);
                    let v = cx.realization.certify(&e.term, store, &local);
                    actions.push(Action::Certified { keys: e.term.read_keys().filter(|&k| local(k)).count() });
                    self.my_votes.insert(id, v);
                    self.votes.entry(id).or_default().insert(cx.group, v);
                    let to = vote_recipients(cx, &e.term);
                    actions.push(Action::Vote { txn: id, vote: v, to });
                }
                if !e.writes_here {
                    // A voter only: its part is done.
                    self.entries.remove(&id);
                    self.q.remove(i);
                    self.votes.remove(&id);
                    self.busy -= 1;
                    continue;
                }
                i += 1;
            }
            // 3. Decide: aborts anywhere, commits at the head.
            let mut i = 0;
            while i < self.q.len() {
                let id = self.q[i];
                let e = &self.entries[&id];
                if !e.certified {
                    i += 1;
                    continue;
                }
                match Self::evaluate(cx.layout, &e.vote_keys, self.votes.get(&id)) {
                    Some(false) => {
                        self.finish(id, i, false);
                        actions.push(Action::Aborted { txn: id });
                        changed = true;
                    }
                    Some(true) if i == 0 => {
                        let e = self.finish(id, i, true);
                        let writes: Vec<(Key, ensemble_kv::Value)> =
                            e.term.writes.iter().filter(|(k, _)| cx.layout.group_replicates(cx.group, *k)).cloned().collect();
                        let stamp = store.apply(id, &writes);
                        actions.push(Action::Committed { term: e.term, applied: writes, stamp });
                        changed = true;
                    }
                    _ => i += 1,
                }
            }
            if !changed {
                return actions;
            }
        }
    }

    /// Takes `id` (at position `at`) out of `Q`, freeing its certifier, and remembers its outcome.
    fn finish(&mut self, id: TxnId, at: usize, commit: bool) -> Queued {
        self.q.remove(at);
        self.busy -= 1;
        self.votes.remove(&id);
        self.decided.insert(id, commit);
        self.entries.remove(&id).expect("present")
    }
}

/// Where a vote goes: the write replicas outside the voter's group (its own group votes alike)
/// and the proxy (G-DUR: `replicas(vote_recv_obj(Ti)) ∪ {coord(Ti)}`), except for a local
/// update, whose write replicas decide on their own votes and tell the proxy.
fn vote_recipients(cx: &Ctx<'_>, t: &Term) -> Vec<ProcessId> {
    let local = cx.layout.is_local(t);
    let mut to: Vec<ProcessId> = Vec::new();
    if !local {
        to = cx.layout.write_replicas(t);
    }
    if !local || t.read_only() {
        to.push(t.id.proxy());
    }
    let mine = cx.layout.directory().members(cx.group);
    to.retain(|p| *p != cx.me && !mine.contains(p));
    to.sort();
    to.dedup();
    to
}

/// `Objects` for a whole term, widened to every group for `All`.
pub fn destination_groups(layout: &Layout, t: &Term, objects: Objects) -> Vec<GroupId> {
    match objects {
        Objects::All => layout.directory().groups().collect(),
        other => layout.groups_of_keys(other.keys(t)),
    }
}
