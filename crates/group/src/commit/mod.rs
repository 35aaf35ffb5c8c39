//! Two-phase commit (issue 12, item 2): G-DUR's Algorithm 4 as a sans-IO component with both
//! roles, *coordinator* and *participant*, and a log for crash recovery.
//!
//! # API
//!
//! ```text
//! TwoPhaseCommit::<T: Payload + Commute, L: CommitLog<T>>::open(me, CommitConfig, log)
//!                                              -> Result<(Self, CommitOutput<T>), CommitError>
//!   .begin(payload, participants)             -> Result<(TxnId, CommitOutput<T>), CommitError>   // coordinator
//!   .vote(txn, yes)                           -> Result<CommitOutput<T>, CommitError>            // the embedder's certification
//!   .on_message(from, CommitMsg<T>)           -> Result<CommitOutput<T>, CommitError>            // Refused(_) -> Effect::Refuse
//!   .tick()                                   -> Result<CommitOutput<T>, CommitError>            // retransmissions, vote timeout
//!   .decision(txn, Role) / .next_seq() / .pending() / .counters() / .failure()
//! CommitOutput { sends, vote_requests, voted, decided }
//! CommitLog<T>: append(&CommitRecord<T>) -> Result<(), FileLogError> (durable when it returns), records()
//!   MemoryCommitLog<T> (shared handle, survives a simulated crash), FileCommitLog<T> (fsync'd file)
//! ```
//!
//! A process may coordinate some transactions and take part in others (or both for one
//! transaction); one component per process serves both roles over one log. The coordinator of
//! a transaction is part of its id ([`TxnId`]): `coord(Tᵢ)` is a function of `Tᵢ`, as in
//! G-DUR, so a participant recognises a decision from anyone else as forged.
//!
//! # The protocol (G-DUR §5.2, Algorithm 4)
//!
//! The coordinator sends ⟨PREPARE, Tᵢ⟩ to the participants (G-DUR's plain multicast of Tᵢ to
//! `replicas(certifying_obj(Tᵢ))`). A participant that receives it puts Tᵢ in its queue `Q`
//! and votes:
//! * **preemptive abort** (line 4): if some transaction `Tⱼ` that precedes Tᵢ in `Q` does not
//!   commute with it, the vote is *no*, at once, without certification. `Q` here holds the
//!   transactions this participant received before Tᵢ and has not seen decided, less those it
//!   voted *no* on (they will abort whatever happens, so holding Tᵢ back for them would only
//!   add aborts): that is, those it voted *yes* on or is still certifying. Only predecessors
//!   count, as the prose says ("a concurrent conflicting transaction precedes it in Q"; spec
//!   note 1.E.2); Tᵢ itself is not in the set. Conflict is the embedder's [`Commute`].
//! * otherwise **certification** (line 6), which is the embedder's: the component outputs a
//!   [`VoteRequest`] and the embedder answers with [`TwoPhaseCommit::vote`] (in the same
//!   handler or later). While it certifies, Tᵢ counts as pending for later arrivals.
//!
//! The vote goes to the coordinator only. The coordinator decides (`vote_coordinator`, lines
//! 8–11, with G-DUR's coordinator quorum: every participant): *abort* at the first *no*,
//! *commit* once every participant voted *yes*, and sends the decision to every participant,
//! which decides on it (`decide`, lines 12–15) and acknowledges it. There is no head-of-`Q`
//! wait in Algorithm 4 (spec 1.E.12): non-commuting transactions are kept apart only by the
//! preemptive abort, so two of them are never both voted *yes* and undecided at one participant.
//!
//! # Properties
//!
//! For every transaction (Bernstein, Hadzilacos, Goodman, *Concurrency Control and Recovery*,
//! ch. 7; the checker is `ensemble_history::commitment`):
//! * **AC1 agreement**: no two processes decide differently (coordinator and participants);
//! * **AC2 no reversal**: a process never changes its decision, across its crashes (decisions
//!   are logged before anyone hears of them, and recovery reads them back);
//! * **AC3 validity**: commit is decided only if every participant voted *yes*;
//! * **AC4 non-triviality**: if every participant votes *yes* and nothing fails or is suspected
//!   (no vote timeout fires), the decision is commit;
//! * **AC5 termination**: once failures heal and every crashed process has recovered, every
//!   process decides. Not before: this is classical, *blocking* 2PC, the variant G-DUR uses in
//!   its crash-recovery model (§5.3: "when a replica crashes, Algorithm 4 has to wait that it
//!   comes back online"). A participant that voted *yes* may not decide on its own: it keeps
//!   asking the coordinator (it resends its vote, which the coordinator answers with the
//!   decision) for as long as it takes.
//!
//! # Crash recovery: what is logged, and when
//!
//! Every record is appended to the [`CommitLog`] (durable when `append` returns) *before* the
//! message that reveals it leaves; the component builds its sends only after the append:
//! * coordinator: [`CommitRecord::Begin`] (transaction, participants) before the PREPAREs, so
//!   that a recovered coordinator knows which transactions it started (and never reuses an id);
//!   [`CommitRecord::Decision`] before the decision is sent; [`CommitRecord::End`] once every
//!   participant acknowledged (not needed for safety: it only stops resends after recovery);
//! * participant: [`CommitRecord::Vote`] before the vote is sent (with the payload when *yes*:
//!   a prepared transaction must survive a crash, the embedder applies it on commit), and
//!   [`CommitRecord::Decision`] before the acknowledgement. *No* votes are logged too, so a
//!   participant never votes twice differently.
//!
//! A component rebuilt from its log ([`TwoPhaseCommit::open`]) resumes:
//! * a **coordinator** with a transaction begun and no decision logged **aborts** it
//!   (presumed abort) and sends the abort, rather than asking for the votes again. Why: no
//!   decision was logged, so none was sent, and abort is always safe; votes are not logged at
//!   the coordinator (that would be one forced write per participant on the critical path), so
//!   re-asking would take a whole new round (PREPARE, votes) while the participants that voted
//!   *yes* stay blocked and keep preempting their conflicting transactions; and the begin
//!   record need not carry the payload (a re-ask would have to resend it);
//! * a **participant** that voted *yes* and has no decision is *blocked*: it asks the
//!   coordinator at once and then every `resend_ticks`;
//! * **decisions are resent** until every participant acknowledges them (coordinator), after
//!   recovery too (transactions without an `End` record);
//! * a participant asked about a transaction it has no record of (it never voted: a vote is
//!   logged before it leaves, so nobody counted on one) answers consistently with presumed
//!   abort: an abort decision for it is taken and logged at once; a PREPARE makes it vote afresh;
//!   a commit for it is refused (a commit can only follow its own *yes*).
//!
//! Decisions found in the log are not output again: each decision comes out of the component
//! once over all its incarnations. An embedder that may have lost what it did with one
//! (applying a commit) reconciles through [`TwoPhaseCommit::decision`].
//!
//! # Retransmission, duplicates, reordering
//!
//! On [`TwoPhaseCommit::tick`] (the embedder's timer), every `resend_ticks` ticks since the last
//! send for a transaction: the coordinator resends PREPARE to the participants that have not
//! voted and the decision to those that have not acknowledged it; a participant that voted
//! *yes* resends its vote. Every handler is idempotent: a second PREPARE is answered with the
//! logged vote, a second vote or a late one with the decision if there is one, a second decision
//! with an acknowledgement. A decision that overtakes its PREPARE is taken (an abort) and the
//! late PREPARE ignored.
//!
//! # Refused messages
//!
//! See [`CommitRefusal`]: a PREPARE or decision from a process that is not the transaction's
//! coordinator, or naming participants this process is not one of, or contradicting the
//! participants it knows; a vote or acknowledgement to a process that is not the coordinator,
//! for a transaction it never began, from a process that is not a participant; a vote that
//! contradicts an earlier one; an acknowledgement of an undecided transaction; a decision that
//! contradicts the logged one, or a commit this participant did not vote *yes* for. Refusing
//! changes no state (every check comes before any change) and the component keeps serving.
//!
//! # Cost
//!
//! **3Δ** from `begin` to the last decision: PREPARE (Δ), vote (Δ: the coordinator learns the
//! outcome at 2Δ), decision (Δ: the participants learn it at 3Δ); an abort by a *no* vote is
//! learnt by the coordinator as soon as that vote arrives. G-DUR §5.3 states 3 message delays.
//! **Messages: 3r + r acknowledgements** for `r` participants (PREPARE, vote, decision, ack,
//! one each per participant), Ω(r) as G-DUR states; resends under loss add to it. Log writes:
//! the coordinator 3 (begin and decision, which must be forced before their messages; end,
//! which need not be), each participant 2 (vote, decision).
//!
//! # What is left
//!
//! * State is unbounded: decided transactions are kept (in memory and in the log) for ever, so
//!   that late votes are always answered. A low-water mark per coordinator and log compaction
//!   would bound it.
//! * No cooperative termination: a blocked participant asks only the coordinator, never the
//!   other participants (which could tell it the outcome while the coordinator is down).
//! * The optional vote timeout ([`CommitConfig::vote_timeout_ticks`]) is the "perfect failure
//!   detector" variant of §5.3 approximated by a timer: a coordinator that suspects a silent
//!   participant aborts. Off by default (G-DUR's crash-recovery variant waits).
//! * A participant votes *no* and still waits for the coordinator's abort; it could decide
//!   abort at once (one message delay earlier for it, same message count).

mod component;
mod log;

pub use component::{CommitCounters, TwoPhaseCommit};
pub use log::{CommitLog, FileCommitLog, MemoryCommitLog, COMMIT_LOG_MAGIC};

use ensemble_core::ProcessId;
use serde::{Deserialize, Serialize};

/// A transaction's identity: its coordinator and the coordinator's transaction counter. The
/// counter is recovered from the coordinator's begin records, so an id is never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TxnId {
    pub coordinator: ProcessId,
    pub seq: u64,
}

impl std::fmt::Display for TxnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "T{}#{}", self.coordinator.0, self.seq)
    }
}

/// G-DUR's `commute(Tᵢ, Tⱼ)`, supplied by the embedder: whether two transactions can be
/// certified independently. Must be symmetric. Commuting with everything disables preemptive
/// aborts; commuting with nothing serialises every participant.
pub trait Commute {
    fn commutes(&self, other: &Self) -> bool;
}

/// Which role a decision was taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Role {
    Coordinator,
    Participant,
}

/// What two-phase commit sends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommitMsg<T> {
    /// Coordinator to participant: vote on `txn`. `participants` are sorted and distinct.
    Prepare { txn: TxnId, participants: Vec<ProcessId>, payload: T },
    /// Participant to coordinator: the vote, or (resent) a blocked participant's inquiry.
    Vote { txn: TxnId, yes: bool },
    /// Coordinator to participant: the outcome. Carries the participants so that a participant
    /// that never received the PREPARE can tell whether it is one.
    Decision { txn: TxnId, participants: Vec<ProcessId>, commit: bool },
    /// Participant to coordinator: the decision is logged here; stop resending it.
    Ack { txn: TxnId },
}

impl<T> CommitMsg<T> {
    pub fn txn(&self) -> TxnId {
        match self {
            CommitMsg::Prepare { txn, .. }
            | CommitMsg::Vote { txn, .. }
            | CommitMsg::Decision { txn, .. }
            | CommitMsg::Ack { txn } => *txn,
        }
    }

    /// The message's kind, for refusals and counters.
    pub fn kind(&self) -> &'static str {
        match self {
            CommitMsg::Prepare { .. } => "prepare",
            CommitMsg::Vote { .. } => "vote",
            CommitMsg::Decision { .. } => "decision",
            CommitMsg::Ack { .. } => "ack",
        }
    }
}

/// One record of a process's commit log. Variant order is the file format (postcard encodes
/// variants by index): new ones go at the end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommitRecord<T> {
    /// Coordinator: `txn` began with these participants (before its PREPAREs leave).
    Begin { txn: TxnId, participants: Vec<ProcessId> },
    /// Participant: its vote (before it leaves); the payload with a *yes* (the prepared
    /// transaction), none with a *no*.
    Vote { txn: TxnId, participants: Vec<ProcessId>, yes: bool, payload: Option<T> },
    /// The decision taken in `role` (coordinator: before it is sent; participant: before it is
    /// acknowledged).
    Decision { txn: TxnId, role: Role, participants: Vec<ProcessId>, commit: bool },
    /// Coordinator: every participant acknowledged the decision.
    End { txn: TxnId },
}

/// How a component behaves; the same at every process of a deployment.
#[derive(Clone, Debug)]
pub struct CommitConfig {
    /// Ticks between resends of anything unanswered for a transaction (PREPARE, decision, a
    /// blocked participant's inquiry). Should exceed a round trip in ticks, or fault-free runs
    /// resend needlessly.
    pub resend_ticks: u64,
    /// If set, a coordinator that lacks votes for a transaction this many ticks after beginning
    /// it suspects the silent participants and aborts (§5.3's failure-detector variant). `None`:
    /// it waits for ever (the crash-recovery variant).
    pub vote_timeout_ticks: Option<u64>,
    /// Deliberately broken, for the checker's test only: the coordinator decides commit on the
    /// first *yes* vote, without waiting for the others. Keep `false`.
    #[doc(hidden)]
    pub broken_commit_on_first_yes: bool,
}

impl CommitConfig {
    pub fn new(resend_ticks: u64) -> CommitConfig {
        CommitConfig { resend_ticks: resend_ticks.max(1), vote_timeout_ticks: None, broken_commit_on_first_yes: false }
    }

    pub fn vote_timeout(mut self, ticks: u64) -> CommitConfig {
        self.vote_timeout_ticks = Some(ticks.max(1));
        self
    }
}

/// Certification asked of the embedder (Algorithm 4, line 6); answer with
/// [`TwoPhaseCommit::vote`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VoteRequest<T> {
    pub txn: TxnId,
    pub payload: T,
}

/// A vote this participant cast (and logged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Voted {
    pub txn: TxnId,
    pub yes: bool,
    /// The vote was a preemptive abort (line 4), not the embedder's certification.
    pub preemptive: bool,
}

/// A decision this process took (and logged), in the role it took it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decided {
    pub txn: TxnId,
    pub role: Role,
    pub commit: bool,
}

/// What a call produced, to be acted on in this order: the log is already written; record the
/// votes and decisions; answer the vote requests (now or later); send the messages.
#[derive(Debug)]
pub struct CommitOutput<T> {
    pub sends: Vec<(ProcessId, CommitMsg<T>)>,
    pub vote_requests: Vec<VoteRequest<T>>,
    pub voted: Vec<Voted>,
    pub decided: Vec<Decided>,
}

impl<T> Default for CommitOutput<T> {
    fn default() -> Self {
        CommitOutput { sends: Vec::new(), vote_requests: Vec::new(), voted: Vec::new(), decided: Vec::new() }
    }
}

impl<T> CommitOutput<T> {
    /// Appends `other`'s outputs after this one's.
    pub fn extend(&mut self, other: CommitOutput<T>) {
        self.sends.extend(other.sends);
        self.vote_requests.extend(other.vote_requests);
        self.voted.extend(other.voted);
        self.decided.extend(other.decided);
    }

    pub fn is_empty(&self) -> bool {
        self.sends.is_empty() && self.vote_requests.is_empty() && self.voted.is_empty() && self.decided.is_empty()
    }
}

/// A message the component refused: it changed nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommitRefusal {
    #[error("2PC: {kind} for {txn} from {from}, which is not its coordinator")]
    NotTheCoordinator { kind: &'static str, txn: TxnId, from: ProcessId },
    #[error("2PC: {kind} for {txn} reached {me}, which is not its coordinator")]
    NotCoordinating { kind: &'static str, txn: TxnId, me: ProcessId },
    #[error("2PC: {kind} for {txn}, which coordinator {me} never began")]
    UnknownTransaction { kind: &'static str, txn: TxnId, me: ProcessId },
    #[error("2PC: {kind} for {txn} from {from}, which is not one of its participants {participants:?}")]
    NotAParticipant { kind: &'static str, txn: TxnId, from: ProcessId, participants: Vec<ProcessId> },
    #[error("2PC: {kind} for {txn} names participants {participants:?}, which {me} is not one of")]
    NotAddressed { kind: &'static str, txn: TxnId, me: ProcessId, participants: Vec<ProcessId> },
    #[error("2PC: {kind} for {txn} names participants {participants:?}, not sorted and distinct")]
    MalformedParticipants { kind: &'static str, txn: TxnId, participants: Vec<ProcessId> },
    #[error("2PC: {kind} for {txn} names participants {found:?}, but they are {known:?}")]
    OtherParticipants { kind: &'static str, txn: TxnId, found: Vec<ProcessId>, known: Vec<ProcessId> },
    #[error("2PC: vote {yes} for {txn} from {from}, which voted {earlier} before")]
    ChangedVote { txn: TxnId, from: ProcessId, yes: bool, earlier: bool },
    #[error("2PC: ack for {txn} from {from}, which is not decided")]
    AckBeforeDecision { txn: TxnId, from: ProcessId },
    #[error("2PC: decision {commit} for {txn} from {from} contradicts the decision {logged} logged at {me}")]
    ContradictsDecision { txn: TxnId, from: ProcessId, me: ProcessId, commit: bool, logged: bool },
    #[error("2PC: commit of {txn} from {from}, but {me} did not vote yes on it")]
    CommitWithoutYes { txn: TxnId, from: ProcessId, me: ProcessId },
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// A message that breaks the protocol: nothing changed, the component keeps serving.
    #[error(transparent)]
    Refused(#[from] CommitRefusal),
    /// The log could not be written: the component stops (see [`TwoPhaseCommit::failure`]);
    /// what the record would have revealed was not sent.
    #[error("2PC: the log failed: {0}")]
    Log(#[from] crate::FileLogError),
    /// An earlier log failure stopped the component.
    #[error("2PC: stopped after a log failure: {0}")]
    Stopped(String),
    /// The embedder answered a vote that was not asked for.
    #[error("2PC: no vote on {0} was requested")]
    NotRequested(TxnId),
    /// `begin` with no participants.
    #[error("2PC: a transaction needs at least one participant")]
    NoParticipants,
    /// The log holds records that cannot follow one another (a decision without its begin or
    /// vote, two different decisions): it is not this component's log, or it is damaged.
    #[error("2PC: the log does not replay: record {index}: {reason}")]
    BadLog { index: usize, reason: String },
}

#[cfg(test)]
mod tests;
