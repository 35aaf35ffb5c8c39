//! [`GroupMember`]: one process's share of a fault-tolerant group, wrapping an OmniPaxos server
//! behind a link layer and a message check of ours.

use crate::storage::{DurableLog, LogItem, MemoryLog, Payload};
use ensemble_core::{ProcessId, Time};
use omnipaxos::ballot_leader_election::Ballot;
use omnipaxos::messages::ballot_leader_election::HeartbeatMsg;
use omnipaxos::messages::sequence_paxos::PaxosMsg;
use omnipaxos::messages::Message;
use omnipaxos::util::{LogEntry, LogSync, NodeId};
use omnipaxos::{ClusterConfig, OmniPaxos, OmniPaxosConfig, ServerConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Names a group, so that a process in several groups (or a message gone astray) cannot mix them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GroupId(pub u32);

impl std::fmt::Display for GroupId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "group {}", self.0)
    }
}

/// The one configuration a group runs (reconfiguration is not used): OmniPaxos ballots carry it.
const CONFIGURATION: u32 = 1;

/// Rounds grow by one per leader takeover. A round past this one cannot have been reached by a
/// group that took over once per election timeout for years, and the library computes `n + 1`
/// on rounds it adopts: a forged round near `u32::MAX` would overflow it or exhaust the round
/// space for good. Refused.
pub const ROUND_CEILING: u32 = u32::MAX / 2;

/// How a group runs. Every member of a group must be given the same one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupConfig {
    pub group: GroupId,
    /// The members, in an order all agree on: member `i` is OmniPaxos node `i + 1`.
    pub members: Vec<ProcessId>,
    /// Ticks per heartbeat round of the ballot leader election: a leader that misses a round is
    /// replaced after about two. A round must outlast the longest round trip between members:
    /// a heartbeat reply counts only in the round it answers, so with shorter rounds no reply
    /// ever counts and a crashed leader is never replaced.
    pub election_ticks: u64,
    /// Ticks before a `Prepare`, `Promise` or `PrepareReq` that got no answer is sent again.
    pub resend_ticks: u64,
}

impl GroupConfig {
    /// `members` with 5 ticks per heartbeat round and a resend every 10 ticks: with a 10 ms tick
    /// on a LAN, a leader crash is noticed in 50 to 100 ms. Over a WAN, see [`Self::timing`].
    pub fn new(group: GroupId, members: Vec<ProcessId>) -> GroupConfig {
        GroupConfig { group, members, election_ticks: 5, resend_ticks: 10 }
    }

    /// Sets the heartbeat round and the resend timeout, in ticks.
    pub fn timing(mut self, election_ticks: u64, resend_ticks: u64) -> GroupConfig {
        self.election_ticks = election_ticks;
        self.resend_ticks = resend_ticks;
        self
    }

    fn node_of(&self, p: ProcessId) -> Option<NodeId> {
        self.members.iter().position(|&m| m == p).map(|i| i as NodeId + 1)
    }

    fn process_of(&self, node: NodeId) -> Option<ProcessId> {
        (node as usize).checked_sub(1).and_then(|i| self.members.get(i).copied())
    }
}

/// When a member's first tick comes, from the run seed: members whose ticks all fall at the
/// same instants would run their heartbeat rounds in lockstep, which no real cluster does and
/// which hides interleavings. Drawn from a `ChaCha8Rng` of `seed` on a stream of the member's
/// own, so the same seed gives the same phases, and adding a member does not move the others.
pub fn tick_phase(seed: u64, member: ProcessId, tick: Duration) -> Duration {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(0x6772_6f75_7000_0000 | u64::from(member.0));
    Duration::from_nanos(rng.random_range(0..tick.as_nanos().max(1) as u64))
}

/// What a member sends another member of its group. The library's message travels as postcard
/// bytes, so that a member decodes it itself and can refuse garbage by name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMsg {
    pub group: GroupId,
    /// The sender's incarnation: it grows each time the sender is rebuilt from its log.
    pub incarnation: u64,
    /// Numbers the sender's messages to this receiver, from 0 in each incarnation.
    pub seq: u64,
    /// An `omnipaxos::messages::Message<LogItem<T>>` in postcard.
    pub body: Vec<u8>,
}

/// An entry the group decided, at its position in the log (from 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed<T> {
    pub index: u64,
    pub entry: T,
}

/// What a call on a member produced: messages to send, in order, and entries decided since the
/// last call, in log order, each once.
#[derive(Debug)]
pub struct GroupOutput<T> {
    pub sends: Vec<(ProcessId, GroupMsg)>,
    pub committed: Vec<Committed<T>>,
}

impl<T> Default for GroupOutput<T> {
    fn default() -> Self {
        GroupOutput { sends: Vec::new(), committed: Vec::new() }
    }
}

/// A member could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GroupError {
    #[error("{0} is not a member of {1}")]
    NotAMember(ProcessId, GroupId),
    #[error("{group}: {member} is listed twice")]
    DuplicateMember { group: GroupId, member: ProcessId },
    #[error("{group}: OmniPaxos refused the configuration: {reason}")]
    Config { group: GroupId, reason: String },
}

/// A message a member refused: it did nothing with it and keeps serving. Each variant names the
/// message and the rule it broke; the embedding process turns it into `Effect::Refuse`.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("a message for {got} reached a member of {ours}")]
    UnknownGroup { got: GroupId, ours: GroupId },
    #[error("{from} is not a member of {group}")]
    UnknownMember { from: ProcessId, group: GroupId },
    #[error("undecodable consensus message ({len} bytes): {error}")]
    Undecodable { len: usize, error: String },
    #[error("{kind} claims to come from node {claimed} but {from} (node {actual}) sent it")]
    ForgedSender { kind: &'static str, claimed: NodeId, actual: NodeId, from: ProcessId },
    #[error("{kind} is addressed to node {to}, not to this member (node {me})")]
    Misaddressed { kind: &'static str, to: NodeId, me: NodeId },
    #[error("{kind}: {field} {ballot:?} names no member of the group (nodes 1 to {nodes})")]
    UnknownBallotOwner { kind: &'static str, field: &'static str, ballot: Ballot, nodes: usize },
    #[error("{kind}: {field} {ballot:?} belongs to configuration {got}, the group runs {CONFIGURATION}")]
    WrongConfiguration { kind: &'static str, field: &'static str, ballot: Ballot, got: u32 },
    #[error("{kind}: {field} round {round} is past the ceiling {ROUND_CEILING}: no run of takeovers reaches it")]
    RoundTooFar { kind: &'static str, field: &'static str, round: u32 },
    #[error("{kind}: {field} {ballot:?} must be node {expected}'s own")]
    ForgedBallot { kind: &'static str, field: &'static str, ballot: Ballot, expected: NodeId },
    #[error("{kind}: {what}")]
    IndexOutOfRange { kind: &'static str, what: String },
    #[error("{kind}: {what} is not used by this group (no reconfiguration, no compaction)")]
    Unsupported { kind: &'static str, what: &'static str },
}

/// Counters a member keeps, for `Process::counters`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupCounters {
    pub proposed: u64,
    pub committed: u64,
    pub sent: u64,
    pub received: u64,
    /// Duplicates and messages overtaken by a later one on their link, dropped by the link layer.
    pub stale: u64,
    pub refused: u64,
}

/// One process's share of a fault-tolerant group: an OmniPaxos server, the link layer that gives
/// it the channels it assumes, and the check that keeps malformed or forged messages out of it.
///
/// Sans-IO: `propose`, `on_message` and `tick` return what to send and what was decided; the
/// embedding process sends, delivers and calls `tick` from a timer (see [`Ticker`]).
pub struct GroupMember<T: Payload, L: DurableLog<T> = MemoryLog<T>> {
    config: GroupConfig,
    me: ProcessId,
    node: NodeId,
    paxos: OmniPaxos<LogItem<T>, L>,
    incarnation: u64,
    /// Next sequence number on the link to each member, by member index.
    next_seq: Vec<u64>,
    /// Latest (incarnation, seq) accepted from each member, by member index.
    last_in: Vec<Option<(u64, u64)>>,
    /// Log position of the next entry to hand out as committed.
    delivered: usize,
    counters: GroupCounters,
    failure: Option<String>,
    buffer: Vec<Message<LogItem<T>>>,
}

impl<T: Payload, L: DurableLog<T>> GroupMember<T, L> {
    /// Member `me` of `config`'s group, on `log`. A fresh log starts an empty group member; a log
    /// that holds a previous life's promise and entries makes it recover (OmniPaxos asks the
    /// others for the leader's state). Decided entries from position `deliver_from` on are
    /// handed out as committed: 0 for a process that rebuilds its state from the log, or the
    /// number it had already applied if it keeps its own durable state.
    pub fn new(config: GroupConfig, me: ProcessId, mut log: L, deliver_from: usize) -> Result<Self, GroupError> {
        let group = config.group;
        let node = config.node_of(me).ok_or(GroupError::NotAMember(me, group))?;
        for (i, m) in config.members.iter().enumerate() {
            if config.members[..i].contains(m) {
                return Err(GroupError::DuplicateMember { group, member: *m });
            }
        }
        let incarnation = log.next_incarnation();
        let n = config.members.len();
        let op = OmniPaxosConfig {
            cluster_config: ClusterConfig {
                configuration_id: CONFIGURATION,
                nodes: (1..=n as NodeId).collect(),
                flexible_quorum: None,
            },
            server_config: ServerConfig {
                pid: node,
                election_tick_timeout: config.election_ticks,
                resend_message_tick_timeout: config.resend_ticks,
                // A capacity hint for the outgoing buffer; the default (100 000 messages) would
                // reserve megabytes per member.
                buffer_size: 64,
                // No batching: an entry is sent as soon as it is proposed.
                batch_size: 1,
                flush_batch_tick_timeout: config.resend_ticks,
                leader_priority: 0,
            },
        };
        let paxos = op.build(log).map_err(|e| GroupError::Config { group, reason: e.to_string() })?;
        Ok(GroupMember {
            me,
            node,
            paxos,
            incarnation,
            next_seq: vec![0; n],
            last_in: vec![None; n],
            delivered: deliver_from,
            counters: GroupCounters::default(),
            failure: None,
            buffer: Vec::new(),
            config,
        })
    }

    pub fn id(&self) -> ProcessId {
        self.me
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The leader this member follows (or is), if it knows one.
    pub fn leader(&self) -> Option<ProcessId> {
        self.paxos.get_current_leader().and_then(|(node, _)| self.config.process_of(node))
    }

    /// This member leads and has finished its prepare phase: what it is given is replicated at once.
    pub fn is_leader(&self) -> bool {
        matches!(self.paxos.get_current_leader(), Some((node, true)) if node == self.node)
    }

    /// The round this member promised (its leader's ballot).
    pub fn promise(&self) -> Ballot {
        self.paxos.get_promise()
    }

    /// Entries this member holds in its log, decided or not.
    pub fn accepted(&self) -> usize {
        self.paxos.get_accepted_idx()
    }

    /// Entries decided so far (the length of the decided prefix of the log).
    pub fn decided(&self) -> usize {
        self.paxos.get_decided_idx()
    }

    pub fn counters(&self) -> &GroupCounters {
        &self.counters
    }

    /// Set if the decided log held something a group that never reconfigures or compacts cannot
    /// produce; the member stops handing out entries.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Proposes `entry` for the log. A follower forwards it to the leader; with no leader known
    /// yet the library holds it until one is. It may be lost (a forward dropped, a leader
    /// crashed): whoever waits for it decides when to propose again, and the log may then hold
    /// it twice, so an embedding process deduplicates by its own request ids.
    pub fn propose(&mut self, entry: T) -> GroupOutput<T> {
        self.counters.proposed += 1;
        // `append` fails only when a reconfiguration is pending, which this group never proposes.
        if let Err(e) = self.paxos.append(LogItem(entry)) {
            self.failure.get_or_insert_with(|| format!("append refused: {e:?}"));
        }
        self.collect()
    }

    /// Advances the library's logical clock by one tick: heartbeat rounds, leader takeover,
    /// resends.
    pub fn tick(&mut self) -> GroupOutput<T> {
        self.paxos.tick();
        self.collect()
    }

    /// Handles `msg` from `from`. A refused message changed nothing.
    pub fn on_message(&mut self, from: ProcessId, msg: GroupMsg) -> Result<GroupOutput<T>, Refusal> {
        let result = self.accept(from, msg);
        if result.is_err() {
            self.counters.refused += 1;
        }
        result
    }

    fn accept(&mut self, from: ProcessId, msg: GroupMsg) -> Result<GroupOutput<T>, Refusal> {
        let group = self.config.group;
        if msg.group != group {
            return Err(Refusal::UnknownGroup { got: msg.group, ours: group });
        }
        let sender = self.config.node_of(from).ok_or(Refusal::UnknownMember { from, group })?;
        let link = (sender - 1) as usize;
        // The link layer. OmniPaxos assumes each link is a TCP session: FIFO, no duplicates,
        // losses only when a session breaks. The simulator (and a reconnecting TCP runtime) may
        // duplicate and reorder, so a message not newer than the last one taken from its sender
        // is dropped: duplicates vanish and reordering becomes loss, which the library recovers
        // from (sequence gaps in its accept phase, resend timers). Without this layer, seed 163
        // of the random-fault sweep in tests/sim.rs stalls the group (185 of 360 requests
        // answered); and the library would apply a duplicate `AcceptSync` that arrives after a
        // later session began, since it checks only the ballot and its own phase.
        let previous = self.last_in[link];
        if let Some((inc, seq)) = previous {
            if (msg.incarnation, msg.seq) <= (inc, seq) {
                self.counters.stale += 1;
                return Ok(GroupOutput::default());
            }
        }
        let m: Message<LogItem<T>> = postcard::from_bytes(&msg.body)
            .map_err(|e| Refusal::Undecodable { len: msg.body.len(), error: e.to_string() })?;
        self.check(&m, sender, from)?;
        self.last_in[link] = Some((msg.incarnation, msg.seq));
        self.counters.received += 1;
        if previous.is_some_and(|(inc, _)| msg.incarnation > inc) {
            // The sender was rebuilt: its session with us is new, which the library wants to
            // hear about (it re-prepares the peer if that peer led it).
            self.paxos.reconnected(sender);
        }
        self.paxos.handle_incoming(m);
        Ok(self.collect())
    }

    /// What can be refused at this layer, and what cannot. The sender is authenticated by the
    /// transport (the simulator's `from`; the real runtime's sealed frames), so anything that
    /// contradicts it is refused; so are ballots of no member, of another configuration or past
    /// [`ROUND_CEILING`], indices that contradict the message itself or this member's log, and
    /// the reconfiguration and compaction messages this group never sends. A higher round from a
    /// member within the ceiling is *not* refusable: it is how Paxos changes leaders, and the
    /// library adopts it by design.
    fn check(&self, m: &Message<LogItem<T>>, sender: NodeId, from: ProcessId) -> Result<(), Refusal> {
        let kind = kind(m);
        if m.get_sender() != sender {
            return Err(Refusal::ForgedSender { kind, claimed: m.get_sender(), actual: sender, from });
        }
        if m.get_receiver() != self.node {
            return Err(Refusal::Misaddressed { kind, to: m.get_receiver(), me: self.node });
        }
        let nodes = self.config.members.len();
        let ballot = |field: &'static str, b: &Ballot, allow_default: bool| -> Result<(), Refusal> {
            if allow_default && *b == Ballot::default() {
                return Ok(());
            }
            if b.config_id != CONFIGURATION {
                return Err(Refusal::WrongConfiguration { kind, field, ballot: *b, got: b.config_id });
            }
            if b.pid == 0 || b.pid as usize > nodes {
                return Err(Refusal::UnknownBallotOwner { kind, field, ballot: *b, nodes });
            }
            if b.n > ROUND_CEILING {
                return Err(Refusal::RoundTooFar { kind, field, round: b.n });
            }
            Ok(())
        };
        let owned = |field: &'static str, b: &Ballot, owner: NodeId| -> Result<(), Refusal> {
            ballot(field, b, false)?;
            if b.pid != owner {
                return Err(Refusal::ForgedBallot { kind, field, ballot: *b, expected: owner });
            }
            Ok(())
        };
        let out_of_range = |what: String| Refusal::IndexOutOfRange { kind, what };
        let promise = self.paxos.get_promise();
        let accepted = self.paxos.get_accepted_idx() + self.paxos.get_batched_len();
        let plain_sync = |sync: &LogSync<LogItem<T>>| -> Result<(), Refusal> {
            if sync.decided_snapshot.is_some() {
                return Err(Refusal::Unsupported { kind, what: "a snapshot in a log sync" });
            }
            if sync.stopsign.is_some() {
                return Err(Refusal::Unsupported { kind, what: "a stop sign in a log sync" });
            }
            Ok(())
        };
        match m {
            Message::BLE(b) => match &b.msg {
                HeartbeatMsg::Request(_) => Ok(()),
                HeartbeatMsg::Reply(r) => {
                    owned("ballot", &r.ballot, sender)?;
                    ballot("leader", &r.leader, true)
                }
            },
            Message::SequencePaxos(p) => match &p.msg {
                PaxosMsg::PrepareReq(r) => ballot("n", &r.n, true),
                PaxosMsg::Prepare(r) => {
                    owned("n", &r.n, sender)?;
                    ballot("n_accepted", &r.n_accepted, true)?;
                    if r.decided_idx > r.accepted_idx {
                        return Err(out_of_range(format!(
                            "decided index {} beyond the sender's log ({} entries)",
                            r.decided_idx, r.accepted_idx
                        )));
                    }
                    Ok(())
                }
                PaxosMsg::Promise(r) => {
                    owned("n", &r.n, self.node)?;
                    ballot("n_accepted", &r.n_accepted, true)?;
                    if r.decided_idx > r.accepted_idx {
                        return Err(out_of_range(format!(
                            "decided index {} beyond the sender's log ({} entries)",
                            r.decided_idx, r.accepted_idx
                        )));
                    }
                    if let Some(sync) = &r.log_sync {
                        plain_sync(sync)?;
                        // A follower syncs its leader with its own log from some index on: the
                        // sync must end where the follower says its log ends.
                        if sync.sync_idx + sync.suffix.len() != r.accepted_idx {
                            return Err(out_of_range(format!(
                                "log sync of {} entries from index {} does not end at the sender's log end {}",
                                sync.suffix.len(),
                                sync.sync_idx,
                                r.accepted_idx
                            )));
                        }
                    }
                    Ok(())
                }
                PaxosMsg::AcceptSync(r) => {
                    owned("n", &r.n, sender)?;
                    plain_sync(&r.log_sync)?;
                    let sync = &r.log_sync;
                    let end = sync.sync_idx.saturating_add(sync.suffix.len());
                    if r.decided_idx > end {
                        return Err(out_of_range(format!(
                            "decided index {} beyond the leader's log ({end} entries)",
                            r.decided_idx
                        )));
                    }
                    // The leader syncs a follower from a prefix they share, which the follower
                    // has: its log never shrinks below what it promised with.
                    if r.n == promise && sync.sync_idx > accepted {
                        return Err(out_of_range(format!(
                            "log sync from index {} beyond this member's log ({accepted} entries)",
                            sync.sync_idx
                        )));
                    }
                    Ok(())
                }
                PaxosMsg::AcceptDecide(r) => owned("n", &r.n, sender),
                PaxosMsg::Decide(r) => owned("n", &r.n, sender),
                PaxosMsg::Accepted(r) => {
                    owned("n", &r.n, self.node)?;
                    // A follower accepts only what this leader sent it, in this round.
                    if r.n == promise && r.accepted_idx > accepted {
                        return Err(out_of_range(format!(
                            "accepted index {} beyond the leader's log ({accepted} entries)",
                            r.accepted_idx
                        )));
                    }
                    Ok(())
                }
                PaxosMsg::NotAccepted(r) => ballot("n", &r.n, false),
                PaxosMsg::ProposalForward(_) => Ok(()),
                PaxosMsg::Compaction(_) => Err(Refusal::Unsupported { kind, what: "log compaction" }),
                PaxosMsg::AcceptStopSign(_) | PaxosMsg::ForwardStopSign(_) => {
                    Err(Refusal::Unsupported { kind, what: "a stop sign (reconfiguration)" })
                }
            },
        }
    }

    /// Takes the library's outgoing messages and the newly decided entries.
    fn collect(&mut self) -> GroupOutput<T> {
        let mut out = GroupOutput::default();
        self.paxos.take_outgoing_messages(&mut self.buffer);
        for m in self.buffer.drain(..) {
            // The library only addresses nodes of the configuration; a checked message cannot
            // make it address another.
            let Some(to) = self.config.process_of(m.get_receiver()) else { continue };
            let link = (m.get_receiver() - 1) as usize;
            let body = postcard::to_stdvec(&m).expect("postcard encodes OmniPaxos messages");
            let seq = self.next_seq[link];
            self.next_seq[link] += 1;
            out.sends.push((to, GroupMsg { group: self.config.group, incarnation: self.incarnation, seq, body }));
        }
        self.counters.sent += out.sends.len() as u64;
        let decided = self.paxos.get_decided_idx();
        if self.failure.is_none() && self.delivered < decided {
            let entries = self.paxos.read_decided_suffix(self.delivered).unwrap_or_default();
            for e in entries {
                match e {
                    LogEntry::Decided(LogItem(entry)) => {
                        out.committed.push(Committed { index: self.delivered as u64, entry });
                        self.delivered += 1;
                    }
                    other => {
                        self.failure = Some(format!("decided log position {} holds {other:?}", self.delivered));
                        break;
                    }
                }
            }
            if self.failure.is_none() && self.delivered != decided {
                self.failure = Some(format!("decided index {decided} but only {} entries readable", self.delivered));
            }
        }
        self.counters.committed += out.committed.len() as u64;
        out
    }
}

fn kind<T: Payload>(m: &Message<LogItem<T>>) -> &'static str {
    match m {
        Message::BLE(b) => match b.msg {
            HeartbeatMsg::Request(_) => "HeartbeatRequest",
            HeartbeatMsg::Reply(_) => "HeartbeatReply",
        },
        Message::SequencePaxos(p) => match p.msg {
            PaxosMsg::PrepareReq(_) => "PrepareReq",
            PaxosMsg::Prepare(_) => "Prepare",
            PaxosMsg::Promise(_) => "Promise",
            PaxosMsg::AcceptSync(_) => "AcceptSync",
            PaxosMsg::AcceptDecide(_) => "AcceptDecide",
            PaxosMsg::Accepted(_) => "Accepted",
            PaxosMsg::NotAccepted(_) => "NotAccepted",
            PaxosMsg::Decide(_) => "Decide",
            PaxosMsg::ProposalForward(_) => "ProposalForward",
            PaxosMsg::Compaction(_) => "Compaction",
            PaxosMsg::AcceptStopSign(_) => "AcceptStopSign",
            PaxosMsg::ForwardStopSign(_) => "ForwardStopSign",
        },
    }
}

/// Drives a member's `tick` from one timer, and notices when that timer was lost.
///
/// A paused process (the simulator's pause-style crash) loses the timers that would have fired
/// while it was down; a tick timer re-armed only when it fires would then never fire again. So
/// on every event the embedding process asks [`Ticker::lost`], and if the timer is overdue by a
/// whole interval it ticks once and re-arms.
#[derive(Clone, Debug)]
pub struct Ticker {
    interval: Duration,
    due: Option<Time>,
}

impl Ticker {
    pub fn new(interval: Duration) -> Ticker {
        Ticker { interval, due: None }
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The first tick comes `phase` after `now` (see [`tick_phase`]); set the timer that long.
    pub fn start(&mut self, now: Time, phase: Duration) -> Duration {
        self.due = Some(now + phase);
        phase
    }

    /// The tick timer fired: tick, and set it again after the returned delay.
    pub fn fired(&mut self, now: Time) -> Duration {
        self.due = Some(now + self.interval);
        self.interval
    }

    /// The tick timer should have fired a whole interval ago and has not: it was lost.
    pub fn lost(&self, now: Time) -> bool {
        self.due.is_some_and(|due| now > due + self.interval)
    }
}
