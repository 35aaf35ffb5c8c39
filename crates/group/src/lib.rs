//! Fault-tolerant process groups for Ensemble: a group of processes (3 by default) agrees on a
//! log through an existing consensus library, OmniPaxos, wrapped as a sans-IO component that any
//! [`Process`](ensemble_core::Process) can embed, and the group-communication primitives built
//! on it: reliable multicast, atomic broadcast, genuine atomic multicast and per-partition
//! streams ([`multicast`]), and two-phase commit ([`commit`]). `ensemble-xcast` runs them.
//!
//! # API
//!
//! ```text
//! GroupConfig::new(GroupId, members: Vec<ProcessId>)      // member i is OmniPaxos node i + 1
//! GroupMember::<T, L = MemoryLog<T>>::new(config, me, log, deliver_from) -> Result<_, GroupError>
//!   .propose(entry: T)                  -> GroupOutput<T>
//!   .on_message(from, GroupMsg)         -> Result<GroupOutput<T>, Refusal>   // Refusal -> Effect::Refuse
//!   .tick()                             -> GroupOutput<T>                    // from a timer, see Ticker
//!   .leader() / .is_leader() / .decided() / .counters() / .failure()
//! GroupOutput { sends: Vec<(ProcessId, GroupMsg)>, committed: Vec<Committed { index, entry }> }
//! Ticker::new(interval) .start(now, tick_phase(seed, me, interval)) / .fired(now) / .lost(now)
//! MemoryLog<T>: the in-memory DurableLog (a shared handle that survives a simulated crash)
//! ```
//!
//! `GroupMsg` is a serde type of ours (group, sender incarnation, per-link sequence number, the
//! library's message as postcard bytes), so it travels inside any protocol's `Msg`. Committed
//! entries come out in log order, each exactly once per incarnation of the member: a member
//! rebuilt from its log with `deliver_from = 0` hands the decided log out again from the start,
//! so that a process that lost its state rebuilds it; one that kept its own state passes the
//! number of entries it had applied. A proposal may be lost (a forward dropped, a leader
//! crashed) or, if proposed again, decided twice: the embedding process retries and
//! deduplicates by its own request ids (the toy protocol of the tests shows how).
//!
//! # The library: OmniPaxos 0.2, not raft-rs
//!
//! Both are sans-IO: you feed messages and ticks and take messages out. What decided it:
//! * **Build.** raft-rs 0.7 with `default-features = false, features = ["prost-codec"]` generates
//!   its protobuf code at build time with prost-build 0.11, which needs a `protoc` binary
//!   (`PROTOC` or `protoc` on the `PATH`; protobuf-build's bundled protoc serves only the
//!   `protobuf-codec` path), and this machine has none: it would add `protobuf-compiler` to
//!   `scripts/setup.sh`. raft-proto also depends on the `protobuf` 2 crate even with the prost
//!   codec, the crate RUSTSEC-2024-0437 is about. OmniPaxos with `default-features = false,
//!   features = ["serde"]` is pure Rust and pulls serde only: no system package.
//! * **Messages.** OmniPaxos's messages derive serde, so they go into postcard like our own;
//!   raft's are prost messages.
//! * **Determinism** (below): OmniPaxos needs no randomness at all.
//!
//! # Determinism
//!
//! With the features above OmniPaxos 0.2 has no randomness, no clock and no hash-ordered
//! iteration on our paths (its only `HashMap`s are in the `unicache` feature, off; its `logging`
//! feature, off, would open log files and spawn slog's async thread; `async_runtime`, off, would
//! draw UUIDs). Time is a logical clock advanced by [`GroupMember::tick`]; leaders are chosen by
//! ballot leader election, whose ballots `(round, priority, node)` are totally ordered: where raft
//! breaks split votes with a randomized election timeout (`rand::thread_rng()` in
//! `reset_randomized_election_timeout`), a quorum-connected member takes over only when all its
//! neighbours are unhappy, and competing takeovers resolve by the ballot order, so the library
//! never needs randomness for liveness. The one draw is ours: each member's tick phase
//! ([`tick_phase`]) comes from a `ChaCha8Rng` of the run seed on a stream of the member's own, so
//! that heartbeat rounds are not in lockstep. Outputs are vectors in the library's order. So a
//! member is a pure function of its inputs, and a simulated run of a group is a pure function of
//! the seed: the tests `same_seed_same_bytes_under_a_random_fault_plan` and
//! `same_seed_same_bytes_with_crashes_losing_state` run twice and compare the simulator's trace,
//! stats and every member's delivery log byte for byte.
//!
//! # What OmniPaxos assumes of its links, and the layer that provides it
//!
//! OmniPaxos is written for TCP sessions: FIFO, no duplicates, losses only when a session
//! breaks (then `reconnected` is called). The simulator duplicates and reorders messages, so each
//! [`GroupMsg`] carries the sender's incarnation (stored in its log, bumped at each rebuild) and a
//! per-link sequence number, and a member drops any message not newer than the last it took from
//! that sender. Duplicates vanish and reordering becomes loss, which the library recovers from
//! (sequence gaps in its accept phase, resend timers). A new incarnation is a new session:
//! `reconnected` is called. Without this layer, one seed in 160 of the random-fault sweep stalled
//! the group; with it, none did.
//!
//! # Timing
//!
//! A heartbeat round (`election_ticks` ticks) must outlast the longest round trip between
//! members: a reply counts only in the round it answers, so with shorter rounds a crashed leader
//! is never replaced (the WAN tests use 10 ms ticks and 250 ms rounds for 100 ms round trips).
//! A paused process loses the timers that fell in its pause; [`Ticker::lost`] notices.
//!
//! # What is refused
//!
//! See [`Refusal`]: garbage bytes, another group, a sender outside the group, a library message
//! whose sender or addressee contradicts the transport, ballots naming no member, another
//! configuration, or a round past [`ROUND_CEILING`], a leader's ballot that is not the sender's,
//! indices that contradict the message itself or this member's log (a log sync from beyond its
//! log, an `Accepted` beyond the leader's log, a decided index beyond the log it comes with), and
//! reconfiguration and compaction messages, which this group never sends. A higher round from a
//! member is not refusable here: it is how Paxos changes leaders, and the library adopts it by
//! design; against a member that lies, the defence is the transport's authentication.
//!
//! # Storage
//!
//! [`MemoryLog`] keeps the library's state in memory behind a shared handle: the simulator keeps
//! one as the process's storage, so a member rebuilt after a crash that lost its volatile state
//! finds its promise, accepted round, log and decided index. The real runtime uses [`FileLog`],
//! a [`DurableLog`] on disk with the contract stated there: every write on disk before the call
//! returns (the library sends `Promise` and `Accepted` right after recording them), atomic
//! `write_atomically`, an incarnation that never repeats; a torn tail is cut off on open, a
//! damaged record before it is an error naming the file and offset.
//!
//! # Left
//!
//! * compaction of the durable log (it grows forever, and opening replays all of it), and
//!   reconfiguration (refused today);
//! * a follower that missed the last `Decide` learns it only with the next message from the
//!   leader: a group with no further traffic leaves it behind (the primitives work around it by
//!   having every member relay decided entries to its peers);
//! * unbounded state in the primitives: delivered-id sets, ordered messages, the sequencer's log
//!   in memory, two-phase commit's decisions;
//! * a forged higher round in a member's name is taken (Paxos cannot tell it from a real one)
//!   and leaves the receiver out of the quorum, possibly for good, since ballot leader election
//!   does not take over from a happy leader (test `a_higher_round_from_a_member_is_adopted_by_
//!   design_and_costs_no_agreement`): the real runtime's authenticated frames are the defence,
//!   and a group-level recovery (a member that sees no accept traffic asks to be re-prepared)
//!   would bound the damage.

pub mod commit;
mod durable;
mod member;
pub mod multicast;
mod records;
mod storage;

pub use member::{
    tick_phase, Committed, GroupConfig, GroupCounters, GroupError, GroupId, GroupMember, GroupMsg, GroupOutput, Refusal,
    Ticker, ROUND_CEILING,
};
pub use commit::{
    CommitConfig, CommitError, CommitLog, CommitMsg, CommitOutput, CommitRecord, CommitRefusal, Commute, Decided,
    FileCommitLog, MemoryCommitLog, Role, TwoPhaseCommit, TxnId,
};
pub use durable::{FileLog, FileLogError, FileLogRecovery};
pub use records::RecordFile;
pub use multicast::{AtomicBroadcast, CastId, Delivery, Directory, GenuineMulticast, ReliableMulticast};
pub use storage::{DurableLog, LogItem, LogWriteError, MemoryLog, MemoryLogState, Payload};

/// The library's types a caller may need (ballots in refusals, node ids).
pub use omnipaxos;
