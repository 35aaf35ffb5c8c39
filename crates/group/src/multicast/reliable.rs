//! Reliable multicast to any set of groups: what background propagation (`post_commit`) uses.
//!
//! # Properties
//!
//! P-Store's footnote 2: "all properties of atomic multicast except uniform prefix and acyclic
//! order", that is, for a message `m` cast to `m.dst`:
//! * **uniform integrity**: a process delivers `m` at most once, and only if it is a member of a
//!   group of `m.dst` and `m` was cast;
//! * **validity**: if a correct process casts `m`, every correct member of `m.dst` delivers it;
//! * **uniform agreement**: if any process delivers `m` (even one that crashes afterwards),
//!   every correct member of `m.dst` delivers it;
//! * **no order**: two processes may deliver two messages in opposite orders.
//!
//! It is also genuine: only the caster and the members of `m.dst` take steps for `m`.
//!
//! # Design: relay on first receipt, deliver on a majority of one's group
//!
//! The caster sends `m` to every member of `m.dst`. Every member, on its first receipt, relays
//! `m` to every other member of `m.dst` (and acknowledges it to the sender). So a caster that
//! crashes after reaching one destination does not lose `m` for the others: that one relays it.
//! A member **delivers** `m` once it knows that a majority of its own group holds `m` (itself
//! plus one peer in a group of 3: a copy or an acknowledgement from a peer says the peer holds
//! it). Since at most a minority of each group crashes, that majority contains a correct
//! process, which keeps resending `m` (every `resend_ticks` ticks) to every member of `m.dst`
//! that has not acknowledged it; every correct member eventually holds `m`, and then a majority
//! of its group (its correct peers acknowledge) holds it, so it delivers. That is uniform
//! agreement. Delivering on first receipt would give only the non-uniform kind: a member that
//! delivers and crashes before its relays leave would have delivered a message nobody else gets.
//!
//! Integrity: a member delivers each [`CastId`] once, by a set of delivered ids the embedding
//! process persists ([`ReliableMulticast::delivered_ids`], given back to
//! [`ReliableMulticast::new`] after a crash that lost state): a recovered member that is sent
//! `m` again acknowledges it without delivering it again.
//!
//! Why not make the cast go through each destination group's log? A consensus per group per
//! cast orders what needs no order, costs at least 3Δ (caster to leader, accept, accepted) and
//! 4Δ at the followers, and still needs a relay between groups for a caster that crashes after
//! reaching only some of them. Relaying costs no consensus and 2Δ.
//!
//! # Cost
//!
//! * **Latency: 2Δ** from the cast to the delivery at every member: Δ for the caster's copy,
//!   Δ for a peer's relay (the majority evidence). Non-uniform delivery would be Δ.
//! * **Messages: O(n²)** for `n` members of `m.dst`: `n` copies from the caster, `n(n−1)`
//!   relays, and about as many acknowledgements (fewer: a relay is itself the evidence). With
//!   resends under loss, more.
//!
//! # What the embedding process persists
//!
//! `next_seq` (a caster must never reuse a [`CastId`]) and the delivered ids, before the
//! handler's sends leave (the simulator's shared storage slot does it synchronously).

use super::{CastId, Delivery, Directory};
use crate::GroupId;
use ensemble_core::ProcessId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What reliable multicast sends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RmMsg<M> {
    /// `m` itself, from its caster or relayed by a member of `m.dst`.
    Data { id: CastId, dst: Vec<GroupId>, payload: M },
    /// The sender holds `m` (or has delivered it): no need to send it again.
    Ack { id: CastId },
}

impl<M> RmMsg<M> {
    /// The cast this message works for (genuineness accounting).
    pub fn cast_id(&self) -> CastId {
        match self {
            RmMsg::Data { id, .. } | RmMsg::Ack { id } => *id,
        }
    }
}

/// A message a member refused: it did nothing with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RmRefusal {
    #[error("reliable multicast: {id} is addressed to {dst:?}, which {me} is not a member of")]
    NotADestination { id: CastId, dst: Vec<GroupId>, me: ProcessId },
    #[error("reliable multicast: {id} names unknown destination {group}")]
    UnknownGroup { id: CastId, group: GroupId },
}

/// What a call produced: messages to send, in order, and messages delivered, in order.
#[derive(Debug)]
pub struct RmOutput<M> {
    pub sends: Vec<(ProcessId, RmMsg<M>)>,
    pub delivered: Vec<Delivery<M>>,
}

impl<M> Default for RmOutput<M> {
    fn default() -> Self {
        RmOutput { sends: Vec::new(), delivered: Vec::new() }
    }
}

/// A message this process still works for: as its caster, or as a destination that holds it.
#[derive(Debug)]
struct Pending<M> {
    dst: Vec<GroupId>,
    payload: M,
    /// Members of this process's group known to hold `m` (this one included once it has it).
    holders: BTreeSet<ProcessId>,
    /// Destination members that have not shown they hold `m`: resent to on ticks.
    unacked: BTreeSet<ProcessId>,
    /// Destination groups of which a majority acknowledged `m` (for a caster outside `m.dst`).
    acked: BTreeMap<GroupId, BTreeSet<ProcessId>>,
    destination: bool,
}

/// One process's share of reliable multicast: a caster, a member of some group, or both.
#[derive(Debug)]
pub struct ReliableMulticast<M> {
    me: ProcessId,
    directory: Directory,
    my_group: Option<GroupId>,
    next_seq: u64,
    delivered: BTreeSet<CastId>,
    pending: BTreeMap<CastId, Pending<M>>,
    resend_ticks: u64,
    /// Ticks since the last resend.
    ticks: u64,
    /// Copies resent on ticks, for counters.
    pub resent: u64,
}

impl<M: Clone> ReliableMulticast<M> {
    /// `next_seq` and `delivered` are what this process persisted (0 and empty at first start).
    /// Pending messages are not persisted: a process that lost them crashed, so it is not
    /// correct and owes them nothing (the correct holders keep resending).
    pub fn new(
        me: ProcessId,
        directory: Directory,
        resend_ticks: u64,
        next_seq: u64,
        delivered: BTreeSet<CastId>,
    ) -> ReliableMulticast<M> {
        let my_group = directory.group_of(me);
        ReliableMulticast {
            me,
            directory,
            my_group,
            next_seq,
            delivered,
            pending: BTreeMap::new(),
            resend_ticks: resend_ticks.max(1),
            ticks: 0,
            resent: 0,
        }
    }

    pub fn id(&self) -> ProcessId {
        self.me
    }

    /// The next cast counter: persist it.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Ids delivered so far: persist them.
    pub fn delivered_ids(&self) -> &BTreeSet<CastId> {
        &self.delivered
    }

    /// Messages this process still resends.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Casts `payload` to the groups `dst`. Returns its id.
    pub fn cast(&mut self, payload: M, dst: Vec<GroupId>) -> (CastId, RmOutput<M>) {
        let id = CastId { caster: self.me, seq: self.next_seq };
        self.next_seq += 1;
        (id, self.start(id, payload, dst))
    }

    /// Casts again, after a crash, a message this process cast in an earlier incarnation (as it
    /// recorded it before the cast's messages left): sent to every destination until each
    /// acknowledges it, as at its first cast. Destinations acknowledge a copy they already
    /// have and deliver an id once only.
    pub fn resume(&mut self, id: CastId, payload: M, dst: Vec<GroupId>) -> RmOutput<M> {
        debug_assert!(id.caster == self.me && id.seq < self.next_seq, "resume {id}: not an earlier cast of {}", self.me);
        self.start(id, payload, dst)
    }

    fn start(&mut self, id: CastId, payload: M, dst: Vec<GroupId>) -> RmOutput<M> {
        let mut out = RmOutput::default();
        let targets = self.directory.processes(&dst);
        let destination = targets.contains(&self.me);
        let mut p = Pending {
            unacked: targets.iter().copied().filter(|&q| q != self.me).collect(),
            holders: BTreeSet::new(),
            acked: BTreeMap::new(),
            dst: dst.clone(),
            payload: payload.clone(),
            destination,
        };
        if destination {
            p.holders.insert(self.me);
        }
        for &q in &p.unacked {
            out.sends.push((q, RmMsg::Data { id, dst: dst.clone(), payload: payload.clone() }));
        }
        self.pending.insert(id, p);
        self.settle(id, &mut out);
        out
    }

    /// Handles `msg` from `from`.
    pub fn on_message(&mut self, from: ProcessId, msg: RmMsg<M>) -> Result<RmOutput<M>, RmRefusal> {
        let mut out = RmOutput::default();
        match msg {
            RmMsg::Data { id, dst, payload } => {
                if let Some(group) = dst.iter().find(|g| self.directory.members(**g).is_empty()) {
                    return Err(RmRefusal::UnknownGroup { id, group: *group });
                }
                let targets = self.directory.processes(&dst);
                if !targets.contains(&self.me) {
                    return Err(RmRefusal::NotADestination { id, dst, me: self.me });
                }
                // Acknowledge every copy: the sender resends until it hears that we hold it.
                out.sends.push((from, RmMsg::Ack { id }));
                if self.delivered.contains(&id) && !self.pending.contains_key(&id) {
                    return Ok(out);
                }
                if !self.pending.contains_key(&id) {
                    // First receipt: relay to every other destination, so that a caster that
                    // crashed after reaching only us does not lose the message for the others.
                    let unacked: BTreeSet<ProcessId> =
                        targets.iter().copied().filter(|&q| q != self.me && q != from).collect();
                    for &q in &unacked {
                        out.sends.push((q, RmMsg::Data { id, dst: dst.clone(), payload: payload.clone() }));
                    }
                    let mut holders = BTreeSet::new();
                    holders.insert(self.me);
                    self.pending.insert(
                        id,
                        Pending { dst, payload, holders, unacked, acked: BTreeMap::new(), destination: true },
                    );
                }
                self.holds(id, from);
                self.settle(id, &mut out);
            }
            RmMsg::Ack { id } => {
                if self.pending.contains_key(&id) {
                    self.holds(id, from);
                    self.settle(id, &mut out);
                }
            }
        }
        Ok(out)
    }

    /// Every `resend_ticks` ticks, resends every pending message to the destinations that have
    /// not acknowledged it: links lose messages, and a partition may have cut some off.
    pub fn tick(&mut self) -> RmOutput<M> {
        let mut out = RmOutput::default();
        self.ticks += 1;
        if self.ticks < self.resend_ticks {
            return out;
        }
        self.ticks = 0;
        for (&id, p) in &self.pending {
            for &q in &p.unacked {
                out.sends.push((q, RmMsg::Data { id, dst: p.dst.clone(), payload: p.payload.clone() }));
                self.resent += 1;
            }
        }
        out
    }

    /// `from` has shown that it holds `id`.
    fn holds(&mut self, id: CastId, from: ProcessId) {
        let my_group = self.my_group;
        let Some(p) = self.pending.get_mut(&id) else { return };
        p.unacked.remove(&from);
        if my_group.is_some() && my_group == self.directory.group_of(from) {
            p.holders.insert(from);
        }
        if let Some(g) = self.directory.group_of(from) {
            if p.dst.contains(&g) {
                p.acked.entry(g).or_default().insert(from);
            }
        }
    }

    /// Delivers `id` if a majority of this member's group holds it, and forgets it once nobody
    /// needs it from us any more.
    fn settle(&mut self, id: CastId, out: &mut RmOutput<M>) {
        let Some(p) = self.pending.get(&id) else { return };
        if p.destination && !self.delivered.contains(&id) {
            let group = self.my_group.map(|g| self.directory.members(g).len()).unwrap_or(1);
            if p.holders.len() * 2 > group {
                self.delivered.insert(id);
                out.delivered.push(Delivery { id, payload: p.payload.clone() });
            }
        }
        let done = if p.destination {
            // A holder resends until every destination holds the message: it cannot tell which
            // of the others are correct.
            self.delivered.contains(&id) && p.unacked.is_empty()
        } else {
            // A caster outside m.dst may stop once a majority of every destination group holds
            // m: each such majority has a correct member, which takes over the resending.
            p.unacked.is_empty()
                || p.dst.iter().all(|g| {
                    let n = self.directory.members(*g).len();
                    p.acked.get(g).is_some_and(|a| a.len() * 2 > n)
                })
        };
        if done {
            self.pending.remove(&id);
        }
    }
}
