//! Atomic broadcast to every group of a deployment, through one sequencer group.
//!
//! # Properties
//!
//! For messages cast to every group (`m.dst = Γ`; P-Store §2.4 with the broadcast restriction,
//! Défago et al.'s uniform total order broadcast):
//! * **uniform integrity**: a process delivers `m` at most once, and only if `m` was cast;
//! * **validity**: if a correct process casts `m`, every correct group member delivers it;
//! * **uniform agreement**: if any process delivers `m`, every correct group member delivers it;
//! * **uniform total order** (prefix order): any two processes' delivery sequences are prefixes
//!   one of the other, crashed ones included; so no cycle either (acyclic order).
//!
//! It is not genuine, and cannot be: every group takes steps for every message.
//!
//! # Design: a sequencer group's log, relayed
//!
//! One group S of the deployment is the sequencer: its members run a [`GroupMember`] whose
//! OmniPaxos log orders every broadcast. The caster sends `m` to a member of S (the leader if it
//! knows it), which proposes it; the caster resends to the next member of S every
//! `resend_ticks` ticks until a member of S tells it that `m` is decided (a lost forward, a
//! crashed leader). So the log may hold `m` more than once; every process skips an entry whose
//! id it has delivered, and since every process sees the same log, they all skip the same ones.
//!
//! The delivered log is position-numbered: every process delivers entry `i` only after entries
//! `0..i` (buffering any that come early). A member of S learns entries from its own member (as
//! they are decided) and relays them to every other group member (members of S included, so a
//! follower that missed the last `Decide` of a quiet group still learns it). Each receiver
//! acknowledges the position it delivered up to, and every member of S resends, every
//! `resend_ticks` ticks, from the acknowledged position (at most [`RESEND_BATCH`] entries).
//! Three relays are redundant on purpose: any member of S may crash.
//!
//! Why it holds: entries are delivered only once decided, the decided log is the same at every
//! member (consensus safety), and every process delivers it in index order without holes, so
//! sequences are prefixes of one another (total order, also for a process that crashes: its
//! sequence is a prefix). A decided entry is held by a majority of S, hence by a correct member
//! of S, which relays it until every group member acknowledged it (agreement). A correct caster
//! resends until its message is decided (validity), as long as S keeps a majority up. A
//! recovered process resumes from the position and delivered ids it persisted (integrity).
//!
//! # Cost, against G-DUR §5.3's "atomic broadcast: 3 delays"
//!
//! * To the leader of S: Δ (caster to leader) + Δ (`AcceptDecide` to the followers) + Δ
//!   (`Accepted` back): the leader decides and delivers at **3Δ**; its relay reaches the other
//!   groups, and the followers learn the decision, at **4Δ**.
//! * If the caster reaches a follower of S first (it does not know the leader yet): +Δ for the
//!   library's forward, **5Δ**. The caster learns the leader from the first acknowledgement.
//!
//! G-DUR's 3 (optimal atomic broadcast, its refs 47, 48) counts caster → leader → acceptors →
//! *every learner*: acceptors send their acceptance to all processes directly, who decide on a
//! quorum of them. Here the learners outside S are not acceptors, and OmniPaxos sends
//! acceptances to the leader only, which then announces the decision: one extra Δ. Going to 3Δ
//! would need the acceptors of S to send `Accepted` to every process (O(|S|·n) messages per
//! cast instead of O(n)), which the library does not do.
//!
//! Messages per cast: 1 to S (+1 forward), 2(|S|−1) in S's consensus, (|S|·(n−1)) relays and as
//! many acknowledgements for `n` group members: O(|S|·n), as opposed to G-DUR's Ω(n).
//!
//! # What the embedding process persists
//!
//! `next_seq` (casters), [`AtomicBroadcast::next`] (the log position delivered up to) and the
//! delivered ids, before the handler's sends leave; members of S also keep their group log (a
//! [`crate::DurableLog`]).

use super::decided::DecidedLog;
use super::{CastId, Delivery, Directory};
use crate::storage::{DurableLog, MemoryLog, Payload};
use crate::{GroupConfig, GroupError, GroupMember, GroupMsg, GroupOutput, Refusal};
use ensemble_core::ProcessId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// How many entries one resend carries at most.
pub const RESEND_BATCH: usize = 64;

/// What the sequencer's log holds: a cast message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry<M> {
    pub id: CastId,
    pub payload: M,
}

/// What atomic broadcast sends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound = "M: Payload")]
pub enum AbMsg<M: Payload> {
    /// Caster to a member of S: order this.
    Cast { id: CastId, payload: M },
    /// A member of S to the caster: `id` is decided. `leader`: whom to send the next cast to.
    Ordered { id: CastId, leader: Option<ProcessId> },
    /// A member of S to a group member: decided log entries from position `from` on.
    Decided { from: u64, entries: Vec<Entry<M>> },
    /// A group member to a member of S: it has delivered the log up to position `next`.
    Ack { next: u64 },
    /// S's consensus.
    Group(GroupMsg),
}

impl<M: Payload> AbMsg<M> {
    /// The casts this message works for (genuineness accounting); empty for consensus traffic
    /// and acknowledgements, which work for no cast in particular.
    pub fn cast_ids(&self) -> Vec<CastId> {
        match self {
            AbMsg::Cast { id, .. } | AbMsg::Ordered { id, .. } => vec![*id],
            AbMsg::Decided { entries, .. } => entries.iter().map(|e| e.id).collect(),
            AbMsg::Ack { .. } | AbMsg::Group(_) => Vec::new(),
        }
    }
}

/// How a deployment broadcasts.
#[derive(Clone, Debug)]
pub struct BroadcastConfig {
    pub directory: Directory,
    /// The sequencer group S (one of the directory's groups) and its consensus timing.
    pub sequencer: GroupConfig,
    /// Ticks between resends (casts not yet ordered, log entries not yet acknowledged).
    pub resend_ticks: u64,
}

/// What a call produced: messages to send, in order, and messages delivered, in order.
#[derive(Debug)]
pub struct AbOutput<M: Payload> {
    pub sends: Vec<(ProcessId, AbMsg<M>)>,
    pub delivered: Vec<Delivery<M>>,
}

impl<M> Default for AbOutput<M>
where
    M: Payload,
{
    fn default() -> Self {
        AbOutput { sends: Vec::new(), delivered: Vec::new() }
    }
}

/// A message a process refused: it did nothing with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AbRefusal {
    #[error("atomic broadcast: consensus traffic for {group} reached {me}, which is not in the sequencer group")]
    NotInSequencer { me: ProcessId, group: crate::GroupId },
    #[error("atomic broadcast: {0}")]
    Group(#[from] Refusal),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BroadcastCounters {
    pub casts_resent: u64,
    pub entries_resent: u64,
    /// Log entries skipped because their id was delivered already (a retried cast).
    pub duplicates_skipped: u64,
}

/// The sequencer's part of a member of S.
struct Sequencer<M: Payload, L: DurableLog<Entry<M>>> {
    member: GroupMember<Entry<M>, L>,
    /// What each other group member said it delivered up to: resends start there.
    acked: BTreeMap<ProcessId, u64>,
}

/// One process's share of atomic broadcast: a caster, a group member, a member of S, or several.
pub struct AtomicBroadcast<M: Payload, L: DurableLog<Entry<M>> = MemoryLog<Entry<M>>> {
    me: ProcessId,
    config: BroadcastConfig,
    /// Every group member but this process: where relays go.
    others: Vec<ProcessId>,
    destination: bool,
    sequencer: Option<Sequencer<M, L>>,
    next_seq: u64,
    /// Positions `0..next` of the log are delivered (or skipped as duplicates).
    next: u64,
    delivered: BTreeSet<CastId>,
    /// The sequencer's log as learned: kept by a member of S (which relays it), counted from
    /// `next` by the others.
    decided: DecidedLog<Entry<M>>,
    /// This caster's casts not yet known to be ordered: payload, and the tick it was last sent.
    casting: BTreeMap<CastId, (M, u64)>,
    /// The member of S to send casts to: the leader if an acknowledgement named it.
    target: usize,
    ticks: u64,
    /// Ticks since the last resend of log entries.
    since_resend: u64,
    counters: BroadcastCounters,
    failure: Option<String>,
}

impl<M: Payload + PartialEq, L: DurableLog<Entry<M>>> AtomicBroadcast<M, L> {
    /// `log` is this process's group log if it is a member of S (ignored otherwise); `next_seq`,
    /// `next` and `delivered` are what it persisted (0, 0 and empty at first start).
    pub fn new(
        me: ProcessId,
        config: BroadcastConfig,
        log: L,
        next_seq: u64,
        next: u64,
        delivered: BTreeSet<CastId>,
    ) -> Result<Self, GroupError> {
        let sequencer = if config.sequencer.members.contains(&me) {
            // From position 0: the member hands the whole decided log out again, which rebuilds
            // the kept log (for relaying); positions below `next` are not delivered twice.
            let member = GroupMember::new(config.sequencer.clone(), me, log, 0)?;
            let acked = config.directory.all_processes().into_iter().filter(|&q| q != me).map(|q| (q, next)).collect();
            Some(Sequencer { member, acked })
        } else {
            None
        };
        let all = config.directory.all_processes();
        let decided = if sequencer.is_some() { DecidedLog::keeping() } else { DecidedLog::counting_from(next) };
        Ok(AtomicBroadcast {
            me,
            destination: all.contains(&me),
            others: all.into_iter().filter(|&q| q != me).collect(),
            sequencer,
            next_seq,
            next,
            delivered,
            decided,
            casting: BTreeMap::new(),
            target: (me.0 as usize) % config.sequencer.members.len().max(1),
            ticks: 0,
            since_resend: 0,
            counters: BroadcastCounters::default(),
            failure: None,
            config,
        })
    }

    pub fn id(&self) -> ProcessId {
        self.me
    }

    /// The next cast counter: persist it.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The log position delivered up to: persist it.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Ids delivered so far: persist them.
    pub fn delivered_ids(&self) -> &BTreeSet<CastId> {
        &self.delivered
    }

    /// Casts not yet known to be ordered.
    pub fn casting(&self) -> usize {
        self.casting.len()
    }

    pub fn counters(&self) -> &BroadcastCounters {
        &self.counters
    }

    /// The consensus member, for a member of S.
    pub fn member(&self) -> Option<&GroupMember<Entry<M>, L>> {
        self.sequencer.as_ref().map(|s| &s.member)
    }

    /// Set if two sources disagreed on a decided entry (consensus broken) or the member failed.
    pub fn failure(&self) -> Option<String> {
        self.failure.clone().or_else(|| self.member().and_then(|m| m.failure().map(str::to_string)))
    }

    /// Broadcasts `payload` to every group. Returns its id.
    pub fn cast(&mut self, payload: M) -> (CastId, AbOutput<M>) {
        let id = CastId { caster: self.me, seq: self.next_seq };
        self.next_seq += 1;
        let mut out = AbOutput::default();
        self.casting.insert(id, (payload.clone(), self.ticks));
        self.send_cast(id, payload, &mut out);
        (id, out)
    }

    /// Broadcasts again, after a crash, a message this process cast in an earlier incarnation
    /// (as it recorded it before the cast's messages left): resent until the sequencer group
    /// says it ordered it. The group orders an id once only (a retry of an ordered id is answered
    /// `Ordered`, a second entry for it is skipped), so resuming a cast that got through is
    /// harmless.
    pub fn resume(&mut self, id: CastId, payload: M) -> AbOutput<M> {
        debug_assert!(id.caster == self.me && id.seq < self.next_seq, "resume {id}: not an earlier cast of {}", self.me);
        let mut out = AbOutput::default();
        self.casting.insert(id, (payload.clone(), self.ticks));
        self.send_cast(id, payload, &mut out);
        out
    }

    fn send_cast(&mut self, id: CastId, payload: M, out: &mut AbOutput<M>) {
        if self.sequencer.is_some() {
            // A member of S proposes directly (the library forwards to the leader).
            self.propose(Entry { id, payload }, out);
        } else {
            let to = self.config.sequencer.members[self.target];
            out.sends.push((to, AbMsg::Cast { id, payload }));
        }
    }

    fn propose(&mut self, entry: Entry<M>, out: &mut AbOutput<M>) {
        let Some(s) = self.sequencer.as_mut() else { return };
        let o = s.member.propose(entry);
        self.absorb(o, out);
    }

    /// Handles `msg` from `from`. Only consensus messages can be refused (see [`AbRefusal`]);
    /// the others are idempotent and checked by position.
    pub fn on_message(&mut self, from: ProcessId, msg: AbMsg<M>) -> Result<AbOutput<M>, AbRefusal> {
        let mut out = AbOutput::default();
        match msg {
            AbMsg::Group(g) => {
                let Some(s) = self.sequencer.as_mut() else {
                    return Err(AbRefusal::NotInSequencer { me: self.me, group: g.group });
                };
                let o = s.member.on_message(from, g)?;
                self.absorb(o, &mut out);
            }
            AbMsg::Cast { id, payload } => {
                if self.delivered.contains(&id) {
                    // A retry of something already ordered: answer, do not order it again.
                    let leader = self.member().and_then(|m| m.leader());
                    out.sends.push((id.caster, AbMsg::Ordered { id, leader }));
                } else {
                    self.propose(Entry { id, payload }, &mut out);
                }
            }
            AbMsg::Ordered { id, leader } => {
                self.casting.remove(&id);
                if let Some(i) = leader.and_then(|l| self.config.sequencer.members.iter().position(|&m| m == l)) {
                    self.target = i;
                }
            }
            AbMsg::Decided { from: first, entries } => {
                for (k, e) in entries.into_iter().enumerate() {
                    self.learn(first + k as u64, e, &mut out);
                }
                if self.destination {
                    out.sends.push((from, AbMsg::Ack { next: self.next }));
                }
            }
            AbMsg::Ack { next } => {
                if let Some(s) = self.sequencer.as_mut() {
                    // The latest word is authoritative (a recovered receiver may be behind what
                    // it said before); a stale one costs a redundant resend, nothing more.
                    if let Some(a) = s.acked.get_mut(&from) {
                        *a = next;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Advances S's consensus, and every `resend_ticks` ticks resends unordered casts (to the
    /// next member of S) and unacknowledged log entries.
    pub fn tick(&mut self) -> AbOutput<M> {
        let mut out = AbOutput::default();
        if let Some(s) = self.sequencer.as_mut() {
            let o = s.member.tick();
            self.absorb(o, &mut out);
        }
        self.ticks += 1;
        let every = self.config.resend_ticks.max(1);
        let now = self.ticks;
        let overdue: Vec<(CastId, M)> = self
            .casting
            .iter_mut()
            .filter(|(_, (_, sent))| now - *sent >= every)
            .map(|(id, (payload, sent))| {
                *sent = now;
                (*id, payload.clone())
            })
            .collect();
        if !overdue.is_empty() {
            // The member we sent to may be down or cut off, or our forward lost: try the next.
            self.target = (self.target + 1) % self.config.sequencer.members.len();
            for (id, payload) in overdue {
                self.counters.casts_resent += 1;
                self.send_cast(id, payload, &mut out);
            }
        }
        self.since_resend += 1;
        if self.since_resend < every {
            return out;
        }
        self.since_resend = 0;
        if let Some(s) = self.sequencer.as_ref() {
            for (&q, &a) in &s.acked {
                let entries = self.decided.kept_from(a, RESEND_BATCH);
                if !entries.is_empty() {
                    self.counters.entries_resent += entries.len() as u64;
                    out.sends.push((q, AbMsg::Decided { from: a, entries }));
                }
            }
        }
        out
    }

    /// Takes the consensus member's output: its messages, and its decided entries, which are
    /// learned and pushed to every other group member.
    fn absorb(&mut self, o: GroupOutput<Entry<M>>, out: &mut AbOutput<M>) {
        for (to, g) in o.sends {
            out.sends.push((to, AbMsg::Group(g)));
        }
        let mut fresh: Vec<Entry<M>> = Vec::new();
        let mut first = None;
        // Fixed before the loop: `learn` moves `next` (an entry may complete a prefix that
        // peers' relays had filled ahead), and the pushed entries must stay contiguous from
        // `first`. (Comparing with the moving `next` once pushed entry 12 as entry 11.)
        let start = self.next;
        for c in o.committed {
            // Entries below `start` are the log handed out again after a rebuild, or entries
            // learned from peers first: learned (to rebuild `known`), not pushed again.
            if c.index >= start {
                first.get_or_insert(c.index);
                fresh.push(c.entry.clone());
            }
            self.learn(c.index, c.entry, out);
        }
        if let Some(first) = first {
            for &q in &self.others {
                out.sends.push((q, AbMsg::Decided { from: first, entries: fresh.clone() }));
            }
        }
    }

    /// Takes decided entry `index`, from this member's log or a relay; delivers what became
    /// contiguous.
    fn learn(&mut self, index: u64, entry: Entry<M>, out: &mut AbOutput<M>) {
        match self.decided.learn(index, entry) {
            Err(fork) => {
                self.failure.get_or_insert(fork);
            }
            // A member of S relearns the whole log after a rebuild: what it had delivered is
            // kept for relaying, not delivered again.
            Ok(ready) => {
                for (at, e) in ready {
                    if at >= self.next {
                        self.deliver(at, e, out);
                    }
                }
            }
        }
    }

    fn deliver(&mut self, index: u64, e: Entry<M>, out: &mut AbOutput<M>) {
        self.next = index + 1;
        self.casting.remove(&e.id);
        if !self.delivered.insert(e.id) {
            self.counters.duplicates_skipped += 1;
            return;
        }
        if self.sequencer.is_some() && e.id.caster != self.me {
            // Tells the caster to stop resending, and who leads S (so its next cast saves the
            // follower's forward).
            let leader = self.member().and_then(|m| m.leader());
            out.sends.push((e.id.caster, AbMsg::Ordered { id: e.id, leader }));
        }
        if self.destination {
            out.delivered.push(Delivery { id: e.id, payload: e.payload });
        }
    }
}

impl<M: Payload, L: DurableLog<Entry<M>>> std::fmt::Debug for AtomicBroadcast<M, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomicBroadcast").field("me", &self.me).field("next", &self.next).finish_non_exhaustive()
    }
}
