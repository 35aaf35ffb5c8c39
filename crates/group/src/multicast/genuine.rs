//! Genuine atomic multicast between fault-tolerant groups: Skeen's timestamp algorithm run
//! between groups, each step a process takes in Skeen's original made fault-tolerant by going
//! through its group's OmniPaxos log. In its per-group mode it is P-DUR's per-partition
//! broadcast streams instead (see "Per-group order" below).
//!
//! # Properties
//!
//! For a message `m` cast to any nonempty set of groups `m.dst` (P-Store §2.4), in Skeen's mode
//! ([`Ordering::Skeen`], the default):
//! * **uniform integrity**: a process delivers `m` at most once, and only if it is a member of a
//!   group of `m.dst` and `m` was cast;
//! * **validity**: if a correct process casts `m`, every correct member of `m.dst` delivers it;
//! * **uniform agreement**: if any process delivers `m` (even one that crashes afterwards),
//!   every correct member of `m.dst` delivers it;
//! * **uniform prefix order**: for `m`, `m'` and two processes `s`, `s'` in both `m.dst` and
//!   `m'.dst`, if `s` delivers `m` and `s'` delivers `m'`, then `s` delivers `m'` before `m` or
//!   `s'` delivers `m` before `m'`;
//! * **uniform acyclic order**: the relation "some process delivers `m` before `m'`" is acyclic;
//! * **genuineness** (Guerraoui and Schiper): only the caster of `m` and the members of `m.dst`
//!   send or receive messages for `m`; a group's consensus and relay traffic works for no cast in
//!   particular and is only ever exchanged between members of a group that is a destination.
//!
//! # Design: Skeen between groups
//!
//! In Skeen's algorithm a destination process assigns `m` a timestamp from its logical clock,
//! sends it to the other destinations, takes the maximum of all of them as `m`'s final
//! timestamp, bumps its clock past it, and delivers in (final timestamp, id) order once no
//! pending message can still get a smaller one. Here each destination is a *group*, and each of
//! its steps is an entry of the group's OmniPaxos log ([`GmEntry`]), applied by every member in
//! log order, so that every member of a group computes the same clock, the same timestamps and
//! the same delivery sequence:
//!
//! 1. **Cast.** The caster sends `m` (with `m.dst`) to one member of every destination group (a
//!    member of a destination group proposes it to its own log directly). It resends, to the
//!    next member of every group, every `resend_ticks` ticks until some destination group says
//!    it has ordered `m` ([`GmMsg::Ordered`]): from then on that group's members carry `m` to
//!    the others (step 2), so a caster that crashes after reaching one group loses nothing.
//! 2. **Local timestamp.** A member that is sent `m` proposes [`GmEntry::Msg`]. When the first
//!    `Msg` for `m` is applied, the group's clock advances by one and its value is the group's
//!    proposal for `m` (later duplicates of the entry are skipped). If `m.dst` is this group
//!    alone, the proposal is final at once: the **fast path**, no exchange and no second
//!    consensus. Otherwise **every member** sends the proposal to every member of the other
//!    destination groups, and resends it to the members of each such group until one of them
//!    says its group has decided `m`'s final timestamp ([`GmMsg::Settled`]). The first send
//!    carries the timestamp only, since the caster sent `m` to every destination itself, and so
//!    does the first resend (a proposal unsettled after one period is more often slow than
//!    lost); later resends carry `m` too, for a group the caster never reached (it crashed, or
//!    its cast was lost after another group said `Ordered`), which then orders `m` three resend
//!    periods late. The wait between two resends doubles each time, up to [`MAX_BACKOFF`]
//!    periods.
//!    Carrying `m` on every proposal would put `|g|·|h|` copies of it on the links between
//!    every pair of destination groups, and make a wide cast's cost in bandwidth grow with the
//!    square of its destinations.
//!    Every member rather than the leader: any member may crash or be cut off, and the leader
//!    may change between the decision and the send; with every member relaying, the proposal
//!    leaves as soon as the first member (the leader, which decides first) applies the entry,
//!    and no leader knowledge or failure detection is needed. The cost is `|g|·|h|` messages per
//!    pair of groups, P-Store's O(x²) for the algorithm it assumes.
//! 3. **Final timestamp.** A member of `h` that holds the proposals of every other destination
//!    group (from their relays) and knows its own (from its log) proposes [`GmEntry::Final`]
//!    with their maximum. A group's proposal for `m` is decided once in its log, so every member
//!    of every destination computes the same maximum. When the first `Final` for `m` is
//!    applied, `m`'s timestamp is final at `h` and `h`'s clock becomes at least that value.
//!    The leader proposes as soon as it can; a follower first waits one resend period (the
//!    proposals keep coming until `h` decided), so that a group usually orders one `Final`, not
//!    one per member. A member sent a resent proposal for an `m` its group has not ordered yet
//!    proposes `Msg` first (a caster that never reached it); a first send, which does not
//!    carry `m`, only counts its timestamp as heard.
//! 4. **Delivery.** A group delivers the final message with the smallest (final timestamp, id)
//!    once every message its log ordered whose timestamp is not final has a larger (local
//!    timestamp, id): a final timestamp is at least every local one, so nothing pending can
//!    still come before it; and any message ordered later gets a local timestamp above the
//!    group's clock, which is already past every final timestamp applied.
//!
//! Members of a group learn the decided log from their own consensus member and from their
//! peers, who relay every decided entry to the other members of the group and resend it until
//! acknowledged (as atomic broadcast's sequencer members do): a follower that missed the last
//! `Decide` of a quiet group learns the entry anyway.
//!
//! Why it holds:
//! * every member of a group applies the same log, so it computes the same delivery sequence:
//!   two members of one group deliver prefixes of one sequence;
//! * every destination group computes the same final timestamp for `m`, and delivers in
//!   (final timestamp, id) order with no message delivered later able to get a smaller key:
//!   members of two groups deliver their common messages in the same order, hence prefix order,
//!   and the order is the total order of the keys, hence acyclic;
//! * a delivered `m` is final at its group, so the group's `Final` is decided, so the proposals
//!   of every destination group were decided in their logs, each kept by a majority that
//!   includes a correct member; those correct members resend their proposal (carrying `m`) to
//!   every other destination group until it decided `m`'s final timestamp, and the peers' relays
//!   bring every decided entry to every correct member (uniform agreement);
//! * a correct caster resends until a destination group has ordered `m`, and from then on
//!   agreement's argument applies (validity), as long as each group keeps a majority up;
//! * a member delivers an id once, by a set of delivered ids it persists (integrity); only a
//!   destination's log ever holds `m`, since a `Cast` or proposal reaching a process outside
//!   `m.dst` is refused.
//!
//! # Cost in message delays, against P-Store's Table 1 and G-DUR §5.3
//!
//! With the caster outside the destination groups and knowing their leaders, each consensus
//! being 2Δ (`AcceptDecide` out, `Accepted` back), and followers learning a decision Δ after the
//! leader:
//! * **one group (fast path)**: Δ (cast) + 2Δ (consensus on `Msg`) = **3Δ** at the leader,
//!   4Δ at the followers; +Δ if the cast reached a follower (the library's forward).
//! * **several groups**: Δ (cast) + 2Δ (`Msg`) + Δ (proposal exchange, leader to leader) +
//!   2Δ (`Final`) = **6Δ** at the leaders, 7Δ at the followers.
//!
//! P-Store's Δ and 2Δ (the algorithm of its ref. [20], Schiper and Pedone) count *inter-group*
//! delays only and assume intra-group delays negligible (groups in one data centre): counting
//! the same way, this is Δ for one group (the cast) and 2Δ for several (the cast and the
//! exchange of proposals), the consensus rounds being intra-group. Where a group's members are
//! themselves far apart, as in the tests (one member per WAN site), the consensus rounds count,
//! and the 6Δ is G-DUR §5.3's "best genuine fault-tolerant atomic multicast: 6 delays" for the
//! same structure (its ref. [45]). What is not done: skipping the second consensus (a group may
//! deliver once the maximum is known if it can show that every member would compute the same
//! maximum, as Fritzke et al. and the later "fast" algorithms do), which would save 2Δ.
//!
//! Messages per cast to `k` groups of `d` members, without faults: `k` casts (+`k` forwards),
//! `2(d−1)` per consensus instance (one `Msg` and, if `k > 1`, usually one `Final` per group),
//! `d(d−1)` relays and as many acknowledgements per decided entry, and `d²·k(k−1)` proposals and
//! about as many `Settled`: O(d²k²), P-Store's O(x²) for `x = dk` destination processes.
//!
//! # Per-group order: P-DUR's per-partition streams ([`Ordering::PerGroup`])
//!
//! P-DUR's prototype (P-DUR §V, `../shared/seeds/004_…`; `../shared/notes/dur-family-spec.md`,
//! "§V Implementation (C), deviations from Alg 4") replaces Algorithm 4's atomic multicast by
//! one atomic broadcast instance per partition: a single-partition transaction is broadcast in
//! its partition, a cross-partition one "to each partition independently (i.e., one broadcast per
//! partition, all executed in parallel)". [`GenuineConfig::partition_streams`] is that, with a
//! group per partition: every destination group takes the first `Msg` for `m` in its log as
//! final, the one-group fast path applied to every group, and delivers in its own log order.
//! Nothing else changes: casts, relays of decided entries, and proposals, which still travel
//! between the destination groups (resent until `Settled`, answered `Settled` at once since
//! every ordered message is final) because they carry `m` to a group the caster never reached;
//! their timestamp decides nothing, so they are not kept, and no `Final` is ever proposed.
//!
//! Its properties, for `m` cast to `m.dst`: uniform integrity, validity, uniform agreement and
//! genuineness as above, and **uniform prefix order within each group only**: two members of
//! one group deliver the messages addressed to it in the same order, without holes. Members of
//! different groups may deliver two common messages in opposite orders, so neither prefix order
//! across groups nor acyclic order holds (`g` delivering `m` then `m'` while `h` delivers `m'`
//! then `m` is already a cycle of `<`), nor pairwise order. Why it holds:
//! * the members of a group apply one log and deliver each message as its first `Msg` is
//!   applied, so they deliver prefixes of one sequence (order within the group);
//! * a delivered `m` has its `Msg` decided in its group's log, kept by a majority that includes
//!   a correct member; that member resends the proposal (carrying `m`) to every other
//!   destination group until one of its members says `Settled`, which it says only once its own
//!   group's log ordered `m`; and the peers' relays bring every decided entry to every correct
//!   member of each group (uniform agreement). Validity, integrity and genuineness keep the
//!   arguments above.
//!
//! This is stronger than P-DUR's prototype, whose client broadcasts to each partition itself:
//! there a client that crashes after reaching one partition leaves the transaction at that
//! partition only, and the paper does not say what the others do; here the groups relay it.
//!
//! Cost: every group delivers on the fast path, Δ (cast) + 2Δ (`Msg`) = **3Δ at the leaders for
//! any number of groups** (4Δ at the followers), against 6Δ for Skeen's mode to several groups:
//! the proposal exchange and the second consensus are gone from the path to delivery. Messages
//! per cast to `k` groups of `d` members: as for Skeen's mode without the `Final` instances,
//! that is `k` casts, `2(d−1)` per group for its one consensus instance, the relays and their
//! acknowledgements, and still `d²·k(k−1)` proposals and about as many `Settled`, off the
//! critical path: O(d²k²).
//!
//! What P-DUR does about the missing order (spec note, §V and 3.E items 5–6): its certification
//! test is stronger, so that two cross-partition transactions `t1`, `t2` delivered in opposite
//! orders by two partitions are serializable in either order: it checks `rs(t1) ∩ ws(t2)` and
//! `rs(t2) ∩ ws(t1)`. Algorithm 4's blocking wait for the other partitions' votes would
//! deadlock on such a pair (`p` delivers `t1` then `t2`, `q` delivers `t2` then `t1`), so a
//! certifier on these streams must keep delivering while votes are pending.
//!
//! # Pairwise order: S-DUR's AM_pw-Cast
//!
//! G-DUR's Algorithm 6 (S-DUR) terminates with AM_pw-Cast, atomic multicast whose deliveries
//! need only be *pairwise* ordered: any two processes deliver the messages they both deliver
//! in the same order. This component in Skeen's mode ([`Ordering::Skeen`]) serves it: acyclic
//! order implies pairwise order (two processes delivering `m`, `m'` in opposite orders would be
//! a cycle of `<`). No cheaper algorithm that gives pairwise order only is written; S-DUR pays
//! what genuine atomic multicast costs.
//!
//! # What the embedding process persists
//!
//! `next_seq` (casters) and the delivered ids ([`GenuineMulticast::delivered_ids`]) before the
//! handler's sends leave; group members also keep their group's log (a [`DurableLog`]), from
//! which a rebuilt member recomputes its group's state (it replays the log from position 0).
//! What is not persisted: proposals heard from other groups (they are resent until this group
//! decided the final timestamp) and `Settled` marks (a rebuilt member sends its proposals
//! again, and is answered `Settled` at once).
//!
//! # Left
//!
//! State grows with the run: the ordered messages and delivered ids are kept forever (no
//! garbage collection), like the group log itself.

use super::decided::DecidedLog;
use super::{CastId, Delivery, Directory};
use crate::storage::{DurableLog, MemoryLog, Payload};
use crate::{GroupConfig, GroupError, GroupId, GroupMember, GroupMsg, GroupOutput, Refusal};
use ensemble_core::ProcessId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// How many log entries one relay resend carries at most.
pub const GM_RESEND_BATCH: usize = 64;

/// What a destination group's log holds: Skeen's two steps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GmEntry<M> {
    /// Order `m` here: its first occurrence takes the group's next timestamp (its proposal).
    Msg { id: CastId, dst: Vec<GroupId>, payload: M },
    /// `m`'s final timestamp: the maximum of its destination groups' proposals.
    Final { id: CastId, ts: u64 },
}

impl<M> GmEntry<M> {
    pub fn cast_id(&self) -> CastId {
        match self {
            GmEntry::Msg { id, .. } | GmEntry::Final { id, .. } => *id,
        }
    }
}

/// What genuine atomic multicast sends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound = "M: Payload")]
pub enum GmMsg<M: Payload> {
    /// Caster to a member of a destination group: order this.
    Cast { id: CastId, dst: Vec<GroupId>, payload: M },
    /// A member of `group` to the caster: `group` ordered `id`. `leader`: whom to cast to next.
    Ordered { id: CastId, group: GroupId, leader: Option<ProcessId> },
    /// A member of `group` to a member of another destination group: `group`'s timestamp
    /// proposal for `id`. The first relay and the first resend go without the message, which
    /// the caster sent to every destination itself; later resends carry it, for a group the
    /// caster never reached.
    Proposal { id: CastId, dst: Vec<GroupId>, payload: Option<M>, group: GroupId, ts: u64 },
    /// A member of `group` to a member of another destination group: `group` decided the final
    /// timestamp of `id`, stop sending proposals to it.
    Settled { id: CastId, group: GroupId },
    /// A member to a peer of its group: decided log entries from position `from` on.
    Decided { from: u64, entries: Vec<GmEntry<M>> },
    /// A member to a peer of its group: it knows the log up to position `next`.
    Ack { next: u64 },
    /// A group's consensus.
    Group(GroupMsg),
}

impl<M: Payload> GmMsg<M> {
    /// The casts this message works for (genuineness accounting); empty for consensus traffic
    /// and acknowledgements.
    pub fn cast_ids(&self) -> Vec<CastId> {
        match self {
            GmMsg::Cast { id, .. }
            | GmMsg::Ordered { id, .. }
            | GmMsg::Proposal { id, .. }
            | GmMsg::Settled { id, .. } => vec![*id],
            GmMsg::Decided { entries, .. } => entries.iter().map(GmEntry::cast_id).collect(),
            GmMsg::Ack { .. } | GmMsg::Group(_) => Vec::new(),
        }
    }
}

/// Which order the destination groups deliver in (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ordering {
    /// Genuine atomic multicast: Skeen's final timestamps, one order across groups.
    #[default]
    Skeen,
    /// P-DUR's per-partition streams: each group delivers in its own log order; uniform prefix
    /// order within each group only.
    PerGroup,
}

/// How a deployment multicasts.
#[derive(Clone, Debug)]
pub struct GenuineConfig {
    pub directory: Directory,
    /// Every group's consensus timing: `(election_ticks, resend_ticks)` of [`GroupConfig`].
    pub consensus_timing: (u64, u64),
    /// Ticks between resends (casts not yet ordered, proposals not yet settled, log entries not
    /// yet acknowledged by a peer); a proposal's resends back off, its wait doubling up to
    /// [`MAX_BACKOFF`] periods.
    pub resend_ticks: u64,
    pub ordering: Ordering,
    /// Who relays a group's proposal to the members of the other destination groups the first
    /// time: every member (`false`, the default) or only the member that believes it leads
    /// (`true`). Resends, the path of faults, go from every member either way, so a frugal
    /// relay changes the cost of the fault-free path (|g|·|h| proposals per pair of
    /// groups become |h|), not what is delivered; a crashed or deposed leader delays the
    /// exchange by a resend period. (Sending to one member of each group instead is not
    /// enough: a follower holding the proposals waits a resend period before proposing
    /// `Final`, so that a group usually orders one.)
    pub frugal_relay: bool,
}

impl GenuineConfig {
    /// Genuine atomic multicast ([`Ordering::Skeen`]).
    pub fn new(directory: Directory, consensus_timing: (u64, u64), resend_ticks: u64) -> GenuineConfig {
        GenuineConfig { directory, consensus_timing, resend_ticks, ordering: Ordering::Skeen, frugal_relay: false }
    }

    /// The same with the frugal relay of proposals (see [`GenuineConfig::frugal_relay`]).
    pub fn frugal(self) -> GenuineConfig {
        GenuineConfig { frugal_relay: true, ..self }
    }

    /// P-DUR's per-partition streams ([`Ordering::PerGroup`]).
    pub fn partition_streams(directory: Directory, consensus_timing: (u64, u64), resend_ticks: u64) -> GenuineConfig {
        GenuineConfig { ordering: Ordering::PerGroup, ..GenuineConfig::new(directory, consensus_timing, resend_ticks) }
    }

    fn group_config(&self, g: GroupId) -> GroupConfig {
        let (e, r) = self.consensus_timing;
        GroupConfig::new(g, self.directory.members(g).to_vec()).timing(e, r)
    }
}

/// What a call produced: messages to send, in order, and messages delivered, in order.
#[derive(Debug)]
pub struct GmOutput<M: Payload> {
    pub sends: Vec<(ProcessId, GmMsg<M>)>,
    pub delivered: Vec<Delivery<M>>,
}

impl<M: Payload> Default for GmOutput<M> {
    fn default() -> Self {
        GmOutput { sends: Vec::new(), delivered: Vec::new() }
    }
}

/// A message a process refused: it did nothing with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GmRefusal {
    #[error("genuine multicast: group traffic reached {me}, which is in no group")]
    NotAMember { me: ProcessId },
    #[error("genuine multicast: relay or acknowledgement from {from}, not a peer of {me}")]
    NotAPeer { me: ProcessId, from: ProcessId },
    #[error("genuine multicast: {id} is addressed to {dst:?}, which {me} is not a member of")]
    NotADestination { id: CastId, dst: Vec<GroupId>, me: ProcessId },
    #[error("genuine multicast: proposal for {id} from {from} in the name of {group}, not another destination it is a member of")]
    BadProposal { id: CastId, from: ProcessId, group: GroupId },
    #[error("genuine multicast: {0}")]
    Group(#[from] Refusal),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GenuineCounters {
    pub casts_resent: u64,
    pub proposals_resent: u64,
    pub entries_resent: u64,
    /// Log entries skipped because an earlier one did the same (a retried proposal).
    pub duplicates_skipped: u64,
    /// Messages delivered on the fast path (one destination group).
    pub fast_path: u64,
}

/// A message this process's group ordered.
#[derive(Debug)]
struct Ordered<M> {
    dst: Vec<GroupId>,
    payload: M,
    /// The group's proposal.
    ts: u64,
    fin: Option<u64>,
    done: bool,
}

/// A proposal still sent to the destination groups in `left`: last sent at tick `sent`, next
/// after `wait` ticks. The wait doubles at each resend, up to [`MAX_BACKOFF`] resend periods,
/// and the first resend, like the first send, goes without the message: a proposal unsettled
/// for long is more often queued behind others on a saturated link than lost, and resending it
/// whole every period would add to that queue the very load that lengthens it (congestion
/// collapse, seen at 1,536 clients in P-Store's Fig. 3(a) setting).
#[derive(Debug)]
struct Outgoing {
    left: BTreeSet<GroupId>,
    sent: u64,
    wait: u64,
    resends: u32,
}

/// The longest wait between two resends of a proposal, in resend periods.
pub const MAX_BACKOFF: u64 = 16;

/// The destination part of a group member.
struct Side<M: Payload, L: DurableLog<GmEntry<M>>> {
    group: GroupId,
    member: GroupMember<GmEntry<M>, L>,
    peers: Vec<ProcessId>,
    /// The group's decided log as learned (own decisions and peers' relays), kept for relaying.
    decided: DecidedLog<GmEntry<M>>,
    /// What each peer said it knows the log up to.
    acked: BTreeMap<ProcessId, u64>,
    /// Positions below this were decided before this incarnation: replays, not news.
    replay_until: u64,
    clock: u64,
    ordered: BTreeMap<CastId, Ordered<M>>,
    /// Ordered, final, not delivered: by (final timestamp, id).
    finals: BTreeSet<(u64, CastId)>,
    /// Ordered, not final: by (local timestamp, id).
    unfinal: BTreeSet<(u64, CastId)>,
    /// Other groups' proposals for messages not final here.
    heard: BTreeMap<CastId, BTreeMap<GroupId, u64>>,
    /// Proposals still sent: the groups that did not say `Settled`.
    outgoing: BTreeMap<CastId, Outgoing>,
    /// When this member last proposed `Msg` (false) or `Final` (true) for a message.
    asked: BTreeMap<(CastId, bool), u64>,
}

/// One process's share of genuine atomic multicast: a caster, a group member, or both.
pub struct GenuineMulticast<M: Payload, L: DurableLog<GmEntry<M>> = MemoryLog<GmEntry<M>>> {
    me: ProcessId,
    config: GenuineConfig,
    side: Option<Side<M, L>>,
    next_seq: u64,
    delivered: BTreeSet<CastId>,
    /// This caster's casts no destination group said it ordered: destinations, payload, when
    /// last sent.
    casting: BTreeMap<CastId, (Vec<GroupId>, M, u64)>,
    /// Per group, the member to cast to (the leader if an `Ordered` named it).
    target: BTreeMap<GroupId, usize>,
    ticks: u64,
    since_resend: u64,
    counters: GenuineCounters,
    failure: Option<String>,
}

impl<M: Payload + PartialEq, L: DurableLog<GmEntry<M>>> GenuineMulticast<M, L> {
    /// `log` is this process's group log if it is a group member (ignored otherwise);
    /// `next_seq` and `delivered` are what it persisted (0 and empty at first start).
    pub fn new(
        me: ProcessId,
        config: GenuineConfig,
        log: L,
        next_seq: u64,
        delivered: BTreeSet<CastId>,
    ) -> Result<Self, GroupError> {
        let side = match config.directory.group_of(me) {
            Some(group) => {
                // From position 0: the whole decided log is applied again, which rebuilds the
                // group's state; the delivered ids keep it from being delivered twice.
                let member = GroupMember::new(config.group_config(group), me, log, 0)?;
                let peers: Vec<ProcessId> =
                    config.directory.members(group).iter().copied().filter(|&q| q != me).collect();
                Some(Side {
                    group,
                    replay_until: member.decided() as u64,
                    member,
                    acked: peers.iter().map(|&q| (q, 0)).collect(),
                    peers,
                    decided: DecidedLog::keeping(),
                    clock: 0,
                    ordered: BTreeMap::new(),
                    finals: BTreeSet::new(),
                    unfinal: BTreeSet::new(),
                    heard: BTreeMap::new(),
                    outgoing: BTreeMap::new(),
                    asked: BTreeMap::new(),
                })
            }
            None => None,
        };
        let target = config.directory.groups().map(|g| (g, me.0 as usize % config.directory.members(g).len().max(1))).collect();
        Ok(GenuineMulticast {
            me,
            config,
            side,
            next_seq,
            delivered,
            casting: BTreeMap::new(),
            target,
            ticks: 0,
            since_resend: 0,
            counters: GenuineCounters::default(),
            failure: None,
        })
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

    /// Casts no destination group is known to have ordered.
    pub fn casting(&self) -> usize {
        self.casting.len()
    }

    pub fn counters(&self) -> &GenuineCounters {
        &self.counters
    }

    /// The consensus member, for a group member.
    pub fn member(&self) -> Option<&GroupMember<GmEntry<M>, L>> {
        self.side.as_ref().map(|s| &s.member)
    }

    /// The group's logical clock, for a group member.
    pub fn clock(&self) -> Option<u64> {
        self.side.as_ref().map(|s| s.clock)
    }

    /// Set if two sources disagreed on a decided entry (consensus broken) or the member failed.
    pub fn failure(&self) -> Option<String> {
        self.failure.clone().or_else(|| self.member().and_then(|m| m.failure().map(str::to_string)))
    }

    /// Casts `payload` to the groups `dst` (nonempty, groups of the directory; sorted and
    /// deduplicated here). Returns its id.
    pub fn cast(&mut self, payload: M, mut dst: Vec<GroupId>) -> (CastId, GmOutput<M>) {
        dst.sort();
        dst.dedup();
        debug_assert!(!dst.is_empty() && dst.iter().all(|g| !self.config.directory.members(*g).is_empty()));
        let id = CastId { caster: self.me, seq: self.next_seq };
        self.next_seq += 1;
        let mut out = GmOutput::default();
        self.casting.insert(id, (dst.clone(), payload.clone(), self.ticks));
        self.send_cast(id, &dst, payload, &mut out);
        (id, out)
    }

    /// Casts again, after a crash, a message this process cast in an earlier incarnation (its
    /// id, payload and destinations are what it recorded before the cast's messages left): it is
    /// resent until a destination group says it ordered it, as at its first cast. A group that
    /// ordered it already says so at once, and orders it once only, so resuming a cast that got
    /// through costs a message and an answer.
    pub fn resume(&mut self, id: CastId, payload: M, mut dst: Vec<GroupId>) -> GmOutput<M> {
        dst.sort();
        dst.dedup();
        debug_assert!(id.caster == self.me && id.seq < self.next_seq, "resume {id}: not an earlier cast of {}", self.me);
        let mut out = GmOutput::default();
        self.casting.insert(id, (dst.clone(), payload.clone(), self.ticks));
        self.send_cast(id, &dst, payload, &mut out);
        out
    }

    fn send_cast(&mut self, id: CastId, dst: &[GroupId], payload: M, out: &mut GmOutput<M>) {
        let mine = self.side.as_ref().map(|s| s.group);
        for &g in dst {
            if Some(g) == mine {
                self.want(id, GmEntry::Msg { id, dst: dst.to_vec(), payload: payload.clone() }, true, out);
            } else {
                let ms = self.config.directory.members(g);
                if ms.is_empty() {
                    continue;
                }
                let to = ms[self.target.get(&g).copied().unwrap_or(0) % ms.len()];
                out.sends.push((to, GmMsg::Cast { id, dst: dst.to_vec(), payload: payload.clone() }));
            }
        }
    }

    /// Proposes `entry` (for `id`) to this member's group: at once if `eager` or this member
    /// leads the group, else (a follower that heard of it from another group) after a resend
    /// period, and no more than once per resend period.
    fn want(&mut self, id: CastId, entry: GmEntry<M>, eager: bool, out: &mut GmOutput<M>) {
        let every = self.config.resend_ticks.max(1);
        let now = self.ticks;
        let Some(s) = self.side.as_mut() else { return };
        let key = (id, matches!(entry, GmEntry::Final { .. }));
        let due = match s.asked.get(&key) {
            None => eager || s.member.is_leader(),
            Some(&t) => now - t >= every,
        };
        if !due {
            s.asked.entry(key).or_insert(now);
            return;
        }
        s.asked.insert(key, now);
        let o = s.member.propose(entry);
        self.absorb(o, out);
    }

    /// Handles `msg` from `from`. Consensus messages, relays from outside the group and messages
    /// for a process outside `m.dst` are refused (see [`GmRefusal`]); the rest is idempotent.
    pub fn on_message(&mut self, from: ProcessId, msg: GmMsg<M>) -> Result<GmOutput<M>, GmRefusal> {
        let mut out = GmOutput::default();
        let me = self.me;
        match msg {
            GmMsg::Group(g) => {
                let Some(s) = self.side.as_mut() else { return Err(GmRefusal::NotAMember { me }) };
                let o = s.member.on_message(from, g)?;
                self.absorb(o, &mut out);
            }
            GmMsg::Cast { id, dst, payload } => {
                let s = self.destination(id, &dst)?;
                if s.ordered.contains_key(&id) {
                    let (group, leader) = (s.group, s.member.leader());
                    out.sends.push((id.caster, GmMsg::Ordered { id, group, leader }));
                } else {
                    self.want(id, GmEntry::Msg { id, dst, payload }, true, &mut out);
                }
            }
            GmMsg::Ordered { id, group, leader } => {
                self.casting.remove(&id);
                if let Some(i) = leader.and_then(|l| self.config.directory.members(group).iter().position(|&m| m == l)) {
                    self.target.insert(group, i);
                }
            }
            GmMsg::Proposal { id, dst, payload, group, ts } => {
                let sender_in_group = self.config.directory.members(group).contains(&from);
                // Per group, a proposal is only the relay that makes this group order `m` (its
                // timestamp decides nothing here), so it is not kept.
                let skeen = self.config.ordering == Ordering::Skeen;
                let s = self.destination(id, &dst)?;
                if group == s.group || !dst.contains(&group) || !sender_in_group {
                    return Err(GmRefusal::BadProposal { id, from, group });
                }
                let mine = s.group;
                match s.ordered.get(&id) {
                    Some(o) if o.fin.is_some() => out.sends.push((from, GmMsg::Settled { id, group: mine })),
                    Some(_) => {
                        s.heard.entry(id).or_default().insert(group, ts);
                        self.maybe_final(id, &mut out);
                    }
                    None => {
                        if skeen {
                            s.heard.entry(id).or_default().insert(group, ts);
                        }
                        // Without the message, the caster's own cast (or a resend of this
                        // proposal, which carries it) is what makes this group order it.
                        if let Some(payload) = payload {
                            self.want(id, GmEntry::Msg { id, dst, payload }, false, &mut out);
                        }
                    }
                }
            }
            GmMsg::Settled { id, group } => {
                if let Some(s) = self.side.as_mut() {
                    if let Some(o) = s.outgoing.get_mut(&id) {
                        o.left.remove(&group);
                        if o.left.is_empty() {
                            s.outgoing.remove(&id);
                        }
                    }
                }
            }
            GmMsg::Decided { from: first, entries } => {
                let Some(s) = self.side.as_ref() else { return Err(GmRefusal::NotAMember { me }) };
                if !s.peers.contains(&from) {
                    return Err(GmRefusal::NotAPeer { me, from });
                }
                for (k, e) in entries.into_iter().enumerate() {
                    self.learn(first + k as u64, e, &mut out);
                }
                let next = self.side.as_ref().map_or(0, |s| s.decided.len());
                out.sends.push((from, GmMsg::Ack { next }));
            }
            GmMsg::Ack { next } => {
                let Some(s) = self.side.as_mut() else { return Err(GmRefusal::NotAMember { me }) };
                // The latest word is authoritative: a rebuilt peer may be behind what it said.
                match s.acked.get_mut(&from) {
                    Some(a) => *a = next,
                    None => return Err(GmRefusal::NotAPeer { me, from }),
                }
            }
        }
        Ok(out)
    }

    /// This member's group side, if its group is in `dst`.
    fn destination(&mut self, id: CastId, dst: &[GroupId]) -> Result<&mut Side<M, L>, GmRefusal> {
        let me = self.me;
        match self.side.as_mut() {
            Some(s) if dst.contains(&s.group) => Ok(s),
            _ => Err(GmRefusal::NotADestination { id, dst: dst.to_vec(), me }),
        }
    }

    /// Proposes `m`'s final timestamp if this member knows every destination's proposal.
    fn maybe_final(&mut self, id: CastId, out: &mut GmOutput<M>) {
        let Some(s) = self.side.as_ref() else { return };
        let Some(o) = s.ordered.get(&id) else { return };
        if o.fin.is_some() {
            return;
        }
        let heard = s.heard.get(&id);
        let mut max = o.ts;
        for g in &o.dst {
            if *g == s.group {
                continue;
            }
            match heard.and_then(|h| h.get(g)) {
                Some(&t) => max = max.max(t),
                None => return,
            }
        }
        self.want(id, GmEntry::Final { id, ts: max }, false, out);
    }

    /// Advances the group's consensus; every `resend_ticks` ticks resends unordered casts (to
    /// the next member of each group), unsettled proposals, unacknowledged log entries, and
    /// tells the peers how far this member knows the log (a rebuilt member may be behind).
    pub fn tick(&mut self) -> GmOutput<M> {
        let mut out = GmOutput::default();
        if let Some(s) = self.side.as_mut() {
            let o = s.member.tick();
            self.absorb(o, &mut out);
        }
        self.ticks += 1;
        let every = self.config.resend_ticks.max(1);
        let now = self.ticks;
        let overdue: Vec<(CastId, Vec<GroupId>, M)> = self
            .casting
            .iter_mut()
            .filter(|(_, (_, _, sent))| now - *sent >= every)
            .map(|(id, (dst, payload, sent))| {
                *sent = now;
                (*id, dst.clone(), payload.clone())
            })
            .collect();
        if !overdue.is_empty() {
            for (g, t) in self.target.iter_mut() {
                *t = (*t + 1) % self.config.directory.members(*g).len().max(1);
            }
            for (id, dst, payload) in overdue {
                self.counters.casts_resent += 1;
                self.send_cast(id, &dst, payload, &mut out);
            }
        }
        self.since_resend += 1;
        if self.since_resend < every {
            return out;
        }
        self.since_resend = 0;
        let Some(s) = self.side.as_mut() else { return out };
        for (&q, &a) in &s.acked {
            let entries = s.decided.kept_from(a, GM_RESEND_BATCH);
            if !entries.is_empty() {
                self.counters.entries_resent += entries.len() as u64;
                out.sends.push((q, GmMsg::Decided { from: a, entries }));
            }
            out.sends.push((q, GmMsg::Ack { next: s.decided.len() }));
        }
        let mine = s.group;
        for (id, out_going) in s.outgoing.iter_mut() {
            if now - out_going.sent < out_going.wait {
                continue;
            }
            out_going.sent = now;
            out_going.wait = (out_going.wait * 2).min(every * MAX_BACKOFF);
            out_going.resends += 1;
            let o = &s.ordered[id];
            let payload = (out_going.resends > 1).then(|| o.payload.clone());
            for g in out_going.left.iter() {
                for &q in self.config.directory.members(*g) {
                    self.counters.proposals_resent += 1;
                    out.sends.push((
                        q,
                        GmMsg::Proposal {
                            id: *id,
                            dst: o.dst.clone(),
                            payload: payload.clone(),
                            group: mine,
                            ts: o.ts,
                        },
                    ));
                }
            }
        }
        out
    }

    /// Takes the consensus member's output: its messages, and its decided entries, which are
    /// learned and relayed to the peers.
    fn absorb(&mut self, o: GroupOutput<GmEntry<M>>, out: &mut GmOutput<M>) {
        for (to, g) in o.sends {
            out.sends.push((to, GmMsg::Group(g)));
        }
        let Some(s) = self.side.as_ref() else { return };
        let start = s.decided.len();
        let peers = s.peers.clone();
        let mut fresh: Vec<GmEntry<M>> = Vec::new();
        let mut first = None;
        for c in o.committed {
            if c.index >= start {
                first.get_or_insert(c.index);
                fresh.push(c.entry.clone());
            }
            self.learn(c.index, c.entry, out);
        }
        if let Some(first) = first {
            for q in peers {
                out.sends.push((q, GmMsg::Decided { from: first, entries: fresh.clone() }));
            }
        }
    }

    /// Takes decided entry `index`, from this member's log or a peer's relay; applies what
    /// became contiguous.
    fn learn(&mut self, index: u64, entry: GmEntry<M>, out: &mut GmOutput<M>) {
        let Some(s) = self.side.as_mut() else { return };
        match s.decided.learn(index, entry) {
            Err(fork) => {
                self.failure.get_or_insert(fork);
            }
            Ok(ready) => {
                for (at, e) in ready {
                    self.apply(at, e, out);
                }
            }
        }
    }

    /// Applies the decided entry at `index`: Skeen's steps at this group, then delivery.
    fn apply(&mut self, index: u64, e: GmEntry<M>, out: &mut GmOutput<M>) {
        let per_group = self.config.ordering == Ordering::PerGroup;
        let every = self.config.resend_ticks.max(1);
        let now = self.ticks;
        let Some(s) = self.side.as_mut() else { return };
        let news = index >= s.replay_until;
        match e {
            GmEntry::Msg { id, dst, payload } => {
                if s.ordered.contains_key(&id) {
                    self.counters.duplicates_skipped += 1;
                    return;
                }
                s.clock += 1;
                let ts = s.clock;
                let single = dst.len() == 1;
                let fin = (single || per_group).then_some(ts);
                if fin.is_some() {
                    s.finals.insert((ts, id));
                    if single {
                        self.counters.fast_path += 1;
                    }
                } else {
                    s.unfinal.insert((ts, id));
                }
                if id.caster == self.me {
                    self.casting.remove(&id);
                } else if news {
                    out.sends.push((id.caster, GmMsg::Ordered { id, group: s.group, leader: s.member.leader() }));
                }
                if !single {
                    let others: BTreeSet<GroupId> = dst.iter().copied().filter(|&g| g != s.group).collect();
                    if news {
                        // Frugal: only the member that believes it leads relays at once.
                        let frugal = self.config.frugal_relay;
                        let leads = s.member.leader().is_none_or(|l| l == self.me);
                        for g in others.iter().filter(|_| leads || !frugal) {
                            for &q in self.config.directory.members(*g) {
                                out.sends.push((
                                    q,
                                    GmMsg::Proposal { id, dst: dst.clone(), payload: None, group: s.group, ts },
                                ));
                            }
                        }
                        s.outgoing.insert(id, Outgoing { left: others, sent: now, wait: every, resends: 0 });
                    } else {
                        // A replay: sent with the next resends rather than in one burst now.
                        s.outgoing.insert(id, Outgoing { left: others, sent: now.saturating_sub(every), wait: every, resends: 0 });
                    }
                }
                s.ordered.insert(id, Ordered { dst, payload, ts, fin, done: false });
                if fin.is_none() {
                    self.maybe_final(id, out);
                }
            }
            GmEntry::Final { id, ts } => {
                let Some(o) = s.ordered.get_mut(&id) else {
                    // Never proposed before its `Msg` is applied; ignored if it were.
                    self.counters.duplicates_skipped += 1;
                    return;
                };
                if o.fin.is_some() {
                    self.counters.duplicates_skipped += 1;
                    return;
                }
                o.fin = Some(ts);
                s.unfinal.remove(&(o.ts, id));
                if !o.done {
                    s.finals.insert((ts, id));
                }
                s.clock = s.clock.max(ts);
                s.heard.remove(&id);
                // Frugal: the leader tells every member of the other destination groups at once
                // that this group is settled, so that their followers, which did not relay
                // their group's proposal, do not resend it.
                if self.config.frugal_relay && news && s.member.leader().is_none_or(|l| l == self.me) {
                    let mine = s.group;
                    let others: Vec<GroupId> = o.dst.iter().copied().filter(|&g| g != mine).collect();
                    for g in others {
                        for &q in self.config.directory.members(g) {
                            out.sends.push((q, GmMsg::Settled { id, group: mine }));
                        }
                    }
                }
            }
        }
        self.deliver_ready(out);
    }

    /// Delivers, in (final timestamp, id) order, every final message that no message still
    /// without a final timestamp could come before.
    fn deliver_ready(&mut self, out: &mut GmOutput<M>) {
        let Some(s) = self.side.as_mut() else { return };
        while let Some(&(f, id)) = s.finals.first() {
            if let Some(&lowest) = s.unfinal.first() {
                if lowest < (f, id) {
                    break;
                }
            }
            s.finals.pop_first();
            s.asked.remove(&(id, false));
            s.asked.remove(&(id, true));
            let o = s.ordered.get_mut(&id).expect("a final message is ordered");
            o.done = true;
            if self.delivered.insert(id) {
                out.delivered.push(Delivery { id, payload: o.payload.clone() });
            }
        }
    }
}

impl<M: Payload, L: DurableLog<GmEntry<M>>> std::fmt::Debug for GenuineMulticast<M, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenuineMulticast").field("me", &self.me).field("next_seq", &self.next_seq).finish_non_exhaustive()
    }
}
