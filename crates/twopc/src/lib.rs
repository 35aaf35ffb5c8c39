//! The two-phase-commit baseline of Gyro's Figure 5 (§VII-C), sans-IO.
//!
//! Gyro compares the Conveyor Belt with what a user would otherwise deploy: the same application
//! and the same partitioning over a distributed database that commits multi-node transactions
//! with two-phase commit (MySQL Cluster there). Here the data is placed by the analyzer's plan,
//! exactly as for the belt: a replicated table at every instance, a partitioned one's rows at
//! their partition's instance. Every instance is an unmodified server database; the
//! coordination is the servers' own prepared transactions, driven by Ensemble's nodes:
//!
//! - A request goes to the instance its plan route names (a MAP redirect otherwise, as in the
//!   belt). A commutative or local request runs there and commits there alone
//!   ([`Job::Local`]): the plan guarantees it touches only rows that instance holds.
//! - A global request runs at that instance as the coordinator's branch of a distributed
//!   transaction ([`Job::Branch`]): its statements run against the instance's rows, under the
//!   server's own row locking, and its writes are captured as row images. Reads need no other
//!   instance: a global reads replicated tables and its own partition, which this instance
//!   holds (the belt's correctness rests on the same property of the plan). Writes to
//!   replicated tables must reach every copy (read-one, write-all): the coordinator's branch
//!   stays open, holding its locks ([`JobResult::Held`]), and the other instances are asked to
//!   apply the same row changes as branches of their own ([`Message::Prepare`], [`Job::Apply`]),
//!   each prepared and voted on ([`Message::Vote`]). With every vote *yes* the coordinator
//!   commits its branch together with a record of the decision ([`Job::Decide`]), and only then
//!   tells the participants ([`Message::Decide`]); with any *no* (a participant's branch lost a
//!   lock wait or a deadlock) every branch is rolled back and the transaction runs again,
//!   counted as an attempt. A global whose body aborted, or that wrote no replicated row,
//!   commits at once in one phase.
//!
//! **The commit point, and recovery.** The coordinator's branch is never prepared: it is the
//! last agent of the protocol, and its one-phase commit, which carries the decision's record
//! (the transaction's id and timestamp), is the transaction's commit point. A participant's
//! branch is prepared, and a prepared branch outlives its session, its node and a server
//! restart, holding its locks, so its decision must be found again whatever stopped:
//! - A participant whose decision has not come after [`TwoPcConfig::inquire_after`] asks the
//!   coordinator ([`Message::Inquire`]), and asks again each period: a decision or a vote lost
//!   with a connection, or a node that restarted, costs a wait, never a branch left prepared.
//! - A coordinator whose votes have not all come after [`TwoPcConfig::vote_timeout`] counts
//!   the missing ones as *no* and aborts, telling every participant it did not hear from: a
//!   prepare lost with a connection, or a participant that stopped before it prepared, leaves
//!   no branch that would ask, and the coordinator's branch would otherwise hold its locks for
//!   good. A vote that comes after that is answered as an inquiry.
//! - The coordinator answers from memory while it coordinates the transaction (an inquiry
//!   whose vote it still awaits is a *no*: that vote was lost), and otherwise from its database
//!   ([`Job::Outcome`]): the record means committed; no record means aborted (presumed abort),
//!   and the lookup first records the abort, so that a commit of an earlier incarnation still
//!   in flight when its connection broke now fails on the record's key instead of committing
//!   after the answer.
//! - A participant whose branch committed says so ([`Message::Finished`]); once all have, the
//!   record is deleted by the coordinator's next commit, in that commit's round trip.
//! - A node that starts ([`Job::Recover`]) takes a new incarnation number from its database,
//!   which every transaction id it makes carries ([`Xid::epoch`]), so it never names a branch as
//!   one an earlier incarnation named, which may still be prepared somewhere; it lists the
//!   branches of its run still prepared at its instance and asks their coordinators, and it
//!   handles requests and messages only once that is done (a branch it prepared before the
//!   listing would be taken for one left in doubt).
//!
//! **Serial order.** Every transaction gets a commit timestamp `ts`, from one clock per instance
//! that the instance's storage keeps ([`Job`] says how each job uses it):
//! a one-phase transaction takes the next tick while it still holds all its locks, just before
//! COMMIT; the coordinator's held branch and each prepared participant's branch take the next
//! tick then (all their locks held), a participant sending it as its vote; the decision carries
//! the largest as the transaction's `ts`, and each instance moves its clock up to it before it
//! commits its branch. On a server whose isolation holds every lock, shared and exclusive,
//! until commit (InnoDB's SERIALIZABLE: strict two-phase locking, kept across `XA PREPARE`),
//! this orders every pair of conflicting transactions: if T1 and T2 conflict on a row at
//! instance `s`, T2 gets its lock there only after T1's branch at `s` committed, which is after
//! `s`'s clock reached T1's `ts`; T2's tick at `s` comes later, so T2's `ts` (at least that
//! tick) is larger. Ordering the transactions by `ts` (ties broken arbitrarily: tied
//! transactions do not conflict) is therefore a serial order equivalent to the run, and the
//! replay check replays it. An engine that does not hold read locks to commit (PostgreSQL, whose
//! SERIALIZABLE is SSI) breaks the argument as it stands: there the storage takes the read
//! locks itself, row and table locks held to commit (`ensemble_server::dialect::TwoPhaseLock`).
//!
//! A process never blocks: storage jobs run on the driver's workers. Deadlocks that span
//! instances are not seen by any one server; the storage bounds each lock wait (a
//! participant's branch that waits too long votes *no*), which breaks them.

use ensemble_app::{Application, InstanceId, OpClass, PartitionPlan, StateUpdate, TablePlacement};
use ensemble_core::{
    Done, Effect, Event, Outcome, Process, ProcessId, Protocol, Reply, ReplyBody, Request, RequestError, Time, TimerId, WorkId,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// The baseline's type family for the drivers.
#[derive(Debug)]
pub struct TwoPc;

impl Protocol for TwoPc {
    type Msg = Message;
    type Job = Job;
    type JobResult = JobResult;
    type Evidence = TwoPcEvidence;
}

/// A distributed transaction's id: the coordinator's instance, its incarnation and its attempt
/// counter. Each attempt of a request is a new id, so a late message about an aborted attempt
/// never touches the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Xid {
    pub coordinator: InstanceId,
    /// The coordinator's incarnation ([`JobResult::Recovered`]): ids of an earlier start of its
    /// node may still name prepared branches, and must never be made again.
    pub epoch: u64,
    pub n: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Message {
    /// Coordinator → participant: apply `update` (changes to rows this instance holds) as a
    /// branch of `xid`, prepare it and vote.
    Prepare { xid: Xid, update: StateUpdate },
    /// Participant → coordinator: the branch is prepared (`yes`, with the participant's clock
    /// tick) or was rolled back (`no`).
    Vote { xid: Xid, yes: bool, tick: u64 },
    /// Coordinator → participant that prepared: commit (at timestamp `ts`) or roll back. Told
    /// again when asked; a participant that has no prepared branch of `xid` ignores it.
    Decide { xid: Xid, commit: bool, ts: u64 },
    /// Participant → coordinator: a branch of `xid` prepared here has waited
    /// [`TwoPcConfig::inquire_after`] for its decision.
    Inquire { xid: Xid },
    /// Participant → coordinator: its branch of `xid` committed, so it will never ask about
    /// `xid` again. Once every participant has said so, the record of the commit can go.
    Finished { xid: Xid },
    /// Any instance → every other, once a start that followed an earlier one has recovered
    /// (incarnation `epoch` > 1): what the earlier incarnation was sent and did not answer, it
    /// never will. A coordinator counts such a missing vote as a no at once, where otherwise
    /// it would wait out [`TwoPcConfig::vote_timeout`] holding its locks, and a participant
    /// asks at once about its branches that instance coordinates, rather than after
    /// [`TwoPcConfig::inquire_after`].
    Started { epoch: u64 },
}

/// Storage work. The storage keeps the instance's clock (see the crate doc).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Job {
    /// The node's first job: take the instance's next incarnation number and list this run's
    /// branches still prepared here ([`JobResult::Recovered`]), moving the clock past every
    /// timestamp the instance recorded.
    Recover,
    /// Run `request` here alone and commit: the result is [`JobResult::Committed`], with the
    /// clock's next tick, taken before COMMIT.
    Local { request: Request },
    /// Run `request` as the coordinator's branch of `xid`. If it committed and wrote rows of
    /// tables every instance replicates, and there are other instances, keep it open (every
    /// lock held) and report [`JobResult::Held`] with those changes and the clock's next tick;
    /// otherwise commit in one phase and report [`JobResult::Committed`].
    Branch { request: Request, xid: Xid },
    /// Apply `update` as this instance's branch of `xid` and prepare it:
    /// [`JobResult::Voted`].
    Apply { xid: Xid, update: StateUpdate },
    /// The coordinator's held branch of `xid`: commit it with the decision's record (moving
    /// the clock up to `ts` first), the transaction's commit point, or roll it back:
    /// [`JobResult::Decided`]. A commit also deletes the records of `forget`, transactions
    /// whose participants have all committed their branches (in the same round trip).
    Decide { xid: Xid, commit: bool, ts: u64, forget: Vec<Xid> },
    /// A participant's prepared branch of `xid`: commit it (moving the clock up to `ts` first)
    /// or roll it back: [`JobResult::Finished`].
    Finish { xid: Xid, commit: bool, ts: u64 },
    /// What this instance decided as `xid`'s coordinator, from its records; without a record,
    /// an abort, recorded first ([`JobResult::Outcome`]).
    Outcome { xid: Xid },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum JobResult {
    /// This start's incarnation number, and the branches of this run prepared here whose
    /// decision never came.
    Recovered { epoch: u64, in_doubt: Vec<Xid> },
    /// `retries`: how often the server made it a victim (deadlock, lock wait timeout) before it
    /// committed; it ran again each time, unseen by the client.
    Committed { outcome: Outcome, ts: u64, retries: u32 },
    /// The coordinator's branch ran and holds its locks, uncommitted; `update` holds its
    /// changes to replicated tables.
    Held { outcome: Outcome, update: StateUpdate, tick: u64, retries: u32 },
    /// `yes`: prepared, with the tick. `no`: rolled back, with the server's reason.
    Voted { yes: bool, tick: u64, why: Option<String> },
    /// Whether the coordinator's branch committed: asked to roll back, or a commit that failed
    /// (its connection lost, and no record of it found), it did not.
    Decided { committed: bool },
    Finished,
    /// The decision recorded for the transaction asked about.
    Outcome { commit: bool, ts: u64 },
    /// The request was malformed: nothing ran.
    Rejected(RequestError),
    /// The server made the transaction a victim (deadlock, lock wait timeout) every time it
    /// ran, up to the storage's limit: nothing committed, and the client is told so. For
    /// [`Job::Outcome`]: the record could not be read yet (a commit in flight held its key).
    GaveUp(String),
    /// The storage failed (a connection lost while committing, replicas that diverged).
    Failed(String),
}

/// What a reply says: how the request was coordinated, where it ran, its commit timestamp (its
/// place in the serial order), how many instances held a branch of it, and how many attempts
/// it took.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TwoPcEvidence {
    pub class: OpClass,
    pub instance: InstanceId,
    pub ts: u64,
    pub branches: u32,
    pub attempts: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TwoPcConfig {
    pub instances: u32,
    /// A request whose distributed transaction was voted down this many times is answered
    /// with an error instead of running again.
    pub max_attempts: u32,
    /// The least slot of the back-off before a voted-down transaction runs again: the slot is
    /// the longer of this and the voting round that failed (from the prepares to the decision's
    /// rollback; at most [`MAX_SLOT`]; not a round whose vote did not come), and attempt `k`
    /// waits a uniformly random part of `slot * 2^(k-1)` (at most 64 slots). Two
    /// globals that each hold what the other's participant needs both vote no; run again at
    /// once, they would meet again. The slot follows the round because a round holds the
    /// coordinator's locks for its whole length: in a WAN a round is a round trip of tens of
    /// milliseconds, and back-offs of a few LAN transactions left globals from several
    /// instances meeting again attempt after attempt (micro in wan5: none answered in 30 s).
    pub retry_backoff: Duration,
    /// How long a prepared branch waits for its decision before its instance asks the
    /// coordinator, and then between two asks.
    pub inquire_after: Duration,
    /// How long a coordinator waits for its participants' votes before it counts those that
    /// have not come as no and aborts. A prepare lost with its connection, or a participant
    /// that stopped before it prepared, sends no vote and has no branch to ask about, so
    /// without this bound the coordinator's branch, and every lock it holds, would wait
    /// forever. A participant does not wait for locks (it votes no at once), so a vote takes a
    /// round trip and one job; a longer wait costs an attempt, never a wrong outcome: every
    /// participant whose vote had not come is told the abort, and one that prepared after all
    /// is told again when its vote comes late or it asks.
    pub vote_timeout: Duration,
    /// Seeds the back-off draws (with the instance id), so a run's choices follow its seed.
    pub seed: u64,
}

/// Per-instance counters for the result file.
#[derive(Clone, Debug, Default)]
pub struct TwoPcStats {
    pub one_phase: u64,
    pub distributed_commits: u64,
    /// Distributed attempts voted down (each ran again).
    pub distributed_aborts: u64,
    pub branches_applied: u64,
    pub storage_retries: u64,
    pub rejected: u64,
    pub maps_sent: u64,
    /// Prepared branches found at start, left by an earlier incarnation.
    pub in_doubt_at_start: u64,
    /// Distributed attempts aborted because a vote had not come within
    /// [`TwoPcConfig::vote_timeout`].
    pub votes_timed_out: u64,
    /// Inquiries sent about a prepared branch's decision.
    pub inquiries: u64,
    /// Inquiries answered from the records (the transaction was no longer coordinated here).
    pub outcomes_read: u64,
    /// Votes counted as no because their instance started again before sending them
    /// ([`Message::Started`]).
    pub votes_lost_to_restarts: u64,
}

enum Pending {
    Recover,
    /// A one-phase request, or (with `xid`) the coordinator's own branch of attempt `attempt`.
    Run { request: Request, class: OpClass, attempt: u32, xid: Option<Xid> },
    /// A participant's branch.
    Apply { xid: Xid },
    /// The decision being carried out on the coordinator's own branch: once it is, the
    /// coordinator tells the participants and answers its client, or runs the request again.
    /// `forget`: the records its commit deletes.
    Decide { xid: Xid, forget: Vec<Xid> },
    /// A decision being carried out on a participant's branch.
    Finish { xid: Xid, commit: bool },
    /// The recorded outcome of `xid`, for the instance `asker`, which inquired.
    Outcome { xid: Xid, asker: InstanceId },
}

impl Pending {
    /// The job, for an account of what is in flight.
    fn describe(&self) -> String {
        match self {
            Pending::Recover => "recovery".to_string(),
            Pending::Run { request, xid: None, attempt, .. } => format!("one-phase `{}` #{} of {} (attempt {attempt})", request.txn, request.seq, request.client),
            Pending::Run { request, xid: Some(xid), attempt, .. } => {
                format!("coordinator's branch {xid:?} of `{}` #{} of {} (attempt {attempt})", request.txn, request.seq, request.client)
            }
            Pending::Apply { xid } => format!("participant's branch {xid:?}"),
            Pending::Decide { xid, .. } => format!("coordinator's decision on {xid:?}"),
            Pending::Finish { xid, commit } => format!("participant's {} of {xid:?}", if *commit { "commit" } else { "rollback" }),
            Pending::Outcome { xid, asker } => format!("lookup of {xid:?}'s decision for {asker}"),
        }
    }
}

/// A distributed transaction this instance coordinates.
struct Coordinating {
    request: Request,
    attempt: u32,
    outcome: Outcome,
    /// Instances whose vote has not come.
    waiting: BTreeSet<InstanceId>,
    /// Instances holding a prepared branch, or that may (their vote did not come in time):
    /// the ones the decision goes to.
    prepared_at: BTreeSet<InstanceId>,
    all_yes: bool,
    /// The largest tick among this branch's and the votes so far.
    ts: u64,
    /// Set once decided: the commit timestamp, or `None` for an abort.
    decided: Option<Option<u64>>,
    /// Fires [`TwoPcConfig::vote_timeout`] after the prepares went out, unless cancelled by
    /// the decision.
    vote_timer: TimerId,
    /// When the prepares went out: the voting round's start. `None` once a vote was counted
    /// as no without coming (its wait ran out, or its instance asked about the branch): such a
    /// round measured a lost message or a restart, not how long the votes take.
    voting_since: Option<Time>,
}

/// The longest back-off slot a voting round sets ([`TwoPcConfig::retry_backoff`]): a round
/// longer than this is not a round trip but a participant slowed by something else.
const MAX_SLOT: Duration = Duration::from_secs(1);

pub struct TwoPcNode {
    id: InstanceId,
    cfg: TwoPcConfig,
    app: Arc<Application>,
    plan: Arc<PartitionPlan>,
    /// This start's incarnation, once [`Job::Recover`] is done; until then requests and
    /// messages wait in `held_back`.
    epoch: Option<u64>,
    held_back: Vec<Event<TwoPc>>,
    next_work: u64,
    next_xid: u64,
    pending: BTreeMap<WorkId, Pending>,
    coordinating: BTreeMap<Xid, Coordinating>,
    /// Branches this instance prepared (and voted yes on, or found at start), waiting for the
    /// decision, with when it was last asked for (or the branch was prepared).
    prepared: BTreeMap<Xid, Time>,
    /// The timer that looks for prepared branches waiting too long, while any is.
    inquiry: Option<TimerId>,
    /// Distributed commits this instance recorded, with the participants that have not yet
    /// said their branch committed.
    unfinished: BTreeMap<Xid, BTreeSet<InstanceId>>,
    /// Records no participant needs any more: the next commit deletes them.
    forgettable: Vec<Xid>,
    /// Voted-down requests waiting out their back-off: they run again when the timer fires.
    backing_off: BTreeMap<TimerId, (Request, u32)>,
    next_timer: u64,
    rng: ChaCha8Rng,
    failure: Option<String>,
    stats: TwoPcStats,
}

impl TwoPcNode {
    /// `plan` must have been validated against `app` and `cfg.instances`.
    pub fn new(id: InstanceId, cfg: TwoPcConfig, app: Arc<Application>, plan: Arc<PartitionPlan>) -> Self {
        assert!(id.0 < cfg.instances, "instance {id} outside {} instances", cfg.instances);
        TwoPcNode {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ (u64::from(id.0) << 32)),
            id,
            cfg,
            app,
            plan,
            epoch: None,
            held_back: Vec::new(),
            next_work: 0,
            next_xid: 0,
            pending: BTreeMap::new(),
            coordinating: BTreeMap::new(),
            prepared: BTreeMap::new(),
            inquiry: None,
            unfinished: BTreeMap::new(),
            forgettable: Vec::new(),
            backing_off: BTreeMap::new(),
            next_timer: 0,
            failure: None,
            stats: TwoPcStats::default(),
        }
    }

    pub fn stats(&self) -> &TwoPcStats {
        &self.stats
    }

    fn work(&mut self, pending: Pending, job: Job, out: &mut Vec<Effect<TwoPc>>) {
        let work = WorkId(self.next_work);
        self.next_work += 1;
        self.pending.insert(work, pending);
        // The simulator does not run this baseline (the harness refuses it): no cost model.
        out.push(Effect::Storage { work, job, cost: Duration::ZERO });
    }

    fn timer(&mut self, after: Duration, out: &mut Vec<Effect<TwoPc>>) -> TimerId {
        let id = TimerId(self.next_timer);
        self.next_timer += 1;
        out.push(Effect::SetTimer { id, after });
        id
    }

    fn reply(request: &Request, body: ReplyBody<TwoPcEvidence>, out: &mut Vec<Effect<TwoPc>>) {
        out.push(Effect::Reply { to: request.client, reply: Reply { client: request.client, seq: request.seq, body } });
    }

    fn on_request(&mut self, request: Request, out: &mut Vec<Effect<TwoPc>>) {
        let route = self.app.check_request(&request).map(|_| ()).and_then(|()| self.plan.route(&self.app, &request, self.cfg.instances));
        let route = match route {
            Ok(r) => r,
            Err(e) => {
                self.stats.rejected += 1;
                return Self::reply(&request, ReplyBody::Error(e), out);
            }
        };
        if let Some(owner) = route.instance.filter(|i| *i != self.id) {
            self.stats.maps_sent += 1;
            return Self::reply(&request, ReplyBody::Redirect { to: owner.process() }, out);
        }
        if let Some(why) = &self.failure {
            let e = RequestError::Storage { txn: request.txn.clone(), message: format!("instance {} stopped: {why}", self.id) };
            return Self::reply(&request, ReplyBody::Error(e), out);
        }
        self.run(request, route.class, 1, out);
    }

    fn run(&mut self, request: Request, class: OpClass, attempt: u32, out: &mut Vec<Effect<TwoPc>>) {
        let (job, xid) = if class == OpClass::Global && self.cfg.instances > 1 {
            let epoch = self.epoch.expect("requests run only once recovered");
            let xid = Xid { coordinator: self.id, epoch, n: self.next_xid };
            self.next_xid += 1;
            (Job::Branch { request: request.clone(), xid }, Some(xid))
        } else {
            (Job::Local { request: request.clone() }, None)
        };
        self.work(Pending::Run { request, class, attempt, xid }, job, out);
    }

    /// The part of a global's changes that every other instance applies: the rows of
    /// replicated tables. Rows of partitioned tables live only at their partition's instance,
    /// the one that ran the global (as in the belt).
    fn replicated_part(&self, update: StateUpdate) -> StateUpdate {
        let changes = update.changes.into_iter().filter(|c| !matches!(self.plan.placement(&c.table), Some(TablePlacement::Partitioned { .. }))).collect();
        StateUpdate { changes, writer: update.writer }
    }

    fn on_storage(&mut self, now: Time, work: WorkId, result: JobResult, out: &mut Vec<Effect<TwoPc>>) {
        // Only the driver hands out completions, and only for work this instance asked for.
        let Some(pending) = self.pending.remove(&work) else {
            panic!("instance {}: completion for unknown work {work:?}", self.id);
        };
        match (pending, result) {
            (Pending::Recover, JobResult::Recovered { epoch, in_doubt }) => self.recovered(now, epoch, in_doubt, out),
            (Pending::Run { request, class, attempt, .. }, JobResult::Committed { outcome, ts, retries }) => {
                self.stats.one_phase += 1;
                self.stats.storage_retries += u64::from(retries);
                let evidence = TwoPcEvidence { class, instance: self.id, ts, branches: 1, attempts: attempt };
                Self::reply(&request, ReplyBody::Done(Done { outcome, evidence }), out);
            }
            (Pending::Run { request, attempt, xid: Some(xid), .. }, JobResult::Held { outcome, update, tick, retries }) => {
                self.stats.storage_retries += u64::from(retries);
                let update = self.replicated_part(update);
                let others: BTreeSet<InstanceId> = (0..self.cfg.instances).map(InstanceId).filter(|i| *i != self.id).collect();
                for i in &others {
                    out.push(Effect::Send { to: i.process(), msg: Message::Prepare { xid, update: update.clone() } });
                }
                let vote_timer = self.timer(self.cfg.vote_timeout, out);
                let c = Coordinating {
                    request,
                    attempt,
                    outcome,
                    waiting: others,
                    prepared_at: BTreeSet::new(),
                    all_yes: true,
                    ts: tick,
                    decided: None,
                    vote_timer,
                    voting_since: Some(now),
                };
                self.coordinating.insert(xid, c);
            }
            (Pending::Apply { xid }, JobResult::Voted { yes, tick, .. }) => {
                self.stats.branches_applied += u64::from(yes);
                if yes {
                    self.prepared.insert(xid, now);
                    self.watch_prepared(out);
                }
                out.push(Effect::Send { to: xid.coordinator.process(), msg: Message::Vote { xid, yes, tick } });
            }
            (Pending::Decide { xid, forget }, JobResult::Decided { committed }) => self.decided(now, xid, committed, forget, out),
            (Pending::Finish { xid, commit }, JobResult::Finished) => {
                if commit {
                    out.push(Effect::Send { to: xid.coordinator.process(), msg: Message::Finished { xid } });
                }
            }
            (Pending::Outcome { xid, asker }, JobResult::Outcome { commit, ts }) => {
                self.stats.outcomes_read += 1;
                out.push(Effect::Send { to: asker.process(), msg: Message::Decide { xid, commit, ts } });
            }
            // The record's key was held (a commit of an earlier incarnation still in flight):
            // the participant asks again after its period.
            (Pending::Outcome { .. }, JobResult::GaveUp(_)) => {}
            (Pending::Run { request, .. }, JobResult::GaveUp(why)) => {
                let e = RequestError::Storage { txn: request.txn.clone(), message: why };
                Self::reply(&request, ReplyBody::Error(e), out);
            }
            (pending, JobResult::Rejected(e)) => {
                if let Pending::Run { request, .. } = pending {
                    self.stats.rejected += 1;
                    Self::reply(&request, ReplyBody::Error(e), out);
                }
            }
            (pending, JobResult::Failed(why)) => {
                // A connection lost while committing, or replicas that diverged: nothing safe
                // is left to do with this transaction, and the run must not pass its check.
                let what = match &pending {
                    Pending::Recover => "recovery".to_string(),
                    Pending::Run { request, .. } => format!("`{}` #{} of {}", request.txn, request.seq, request.client),
                    Pending::Apply { xid } | Pending::Decide { xid, .. } | Pending::Finish { xid, .. } | Pending::Outcome { xid, .. } => {
                        format!("branch {xid:?}")
                    }
                };
                self.failure.get_or_insert_with(|| format!("{what}: {why}"));
                match pending {
                    Pending::Run { request, .. } => {
                        let e = RequestError::Storage { txn: request.txn.clone(), message: why };
                        Self::reply(&request, ReplyBody::Error(e), out);
                    }
                    Pending::Decide { xid, forget } => {
                        // Whether its deletions happened is unknown: a record deleted twice is
                        // no harm.
                        self.forgettable.extend(forget);
                        if let Some(c) = self.coordinating.remove(&xid) {
                            let e = RequestError::Storage { txn: c.request.txn.clone(), message: why };
                            Self::reply(&c.request, ReplyBody::Error(e), out);
                        }
                    }
                    // Without an incarnation no global can run: the requests held back, and
                    // every later one, are answered with the failure (epoch 0 is no
                    // incarnation's: they start at 1).
                    Pending::Recover => {
                        self.epoch = Some(0);
                        self.release_held_back(now, out);
                    }
                    _ => {}
                }
            }
            (_, other) => panic!("instance {}: storage answered {other:?} to a job that cannot produce it", self.id),
        }
    }

    /// The node's start is done: requests may run, and every branch an earlier incarnation left
    /// prepared here asks its coordinator for the decision.
    fn recovered(&mut self, now: Time, epoch: u64, in_doubt: Vec<Xid>, out: &mut Vec<Effect<TwoPc>>) {
        self.epoch = Some(epoch);
        for xid in in_doubt {
            if xid.coordinator == self.id || xid.coordinator.0 >= self.cfg.instances {
                // This instance's own branches commit in one phase, never prepared; and a
                // coordinator outside the deployment cannot be asked.
                self.failure.get_or_insert_with(|| format!("recovery found branch {xid:?} prepared, which no instance of this deployment can decide"));
                continue;
            }
            self.stats.in_doubt_at_start += 1;
            self.stats.inquiries += 1;
            self.prepared.insert(xid, now);
            out.push(Effect::Send { to: xid.coordinator.process(), msg: Message::Inquire { xid } });
        }
        if epoch > 1 {
            // After the inquiries: a coordinator that hears of the start first counts the
            // vote as a no either way, and one that hears the inquiry first does the same.
            for i in (0..self.cfg.instances).map(InstanceId).filter(|i| *i != self.id) {
                out.push(Effect::Send { to: i.process(), msg: Message::Started { epoch } });
            }
        }
        self.watch_prepared(out);
        self.release_held_back(now, out);
    }

    /// What came before the recovery was done, in the order it came.
    fn release_held_back(&mut self, now: Time, out: &mut Vec<Effect<TwoPc>>) {
        for event in std::mem::take(&mut self.held_back) {
            self.on_event(now, event, out);
        }
    }

    /// Arms the inquiry timer while a prepared branch waits for its decision.
    fn watch_prepared(&mut self, out: &mut Vec<Effect<TwoPc>>) {
        if self.inquiry.is_none() && !self.prepared.is_empty() {
            self.inquiry = Some(self.timer(self.cfg.inquire_after, out));
        }
    }

    fn on_inquiry_timer(&mut self, now: Time, out: &mut Vec<Effect<TwoPc>>) {
        self.inquiry = None;
        for (xid, since) in self.prepared.iter_mut() {
            if now.saturating_sub(*since) >= self.cfg.inquire_after {
                *since = now;
                self.stats.inquiries += 1;
                out.push(Effect::Send { to: xid.coordinator.process(), msg: Message::Inquire { xid: *xid } });
            }
        }
        self.watch_prepared(out);
    }

    /// Whether this instance, in this incarnation or an earlier one, made `xid`.
    fn issued(&self, xid: Xid) -> bool {
        let epoch = self.epoch.expect("messages are handled once recovered");
        xid.coordinator == self.id && (xid.epoch < epoch || (xid.epoch == epoch && xid.n < self.next_xid))
    }

    fn on_vote(&mut self, from: ProcessId, xid: Xid, yes: bool, tick: u64, out: &mut Vec<Effect<TwoPc>>) {
        let from_instance = InstanceId::of(from);
        let Some(c) = self.coordinating.get_mut(&xid).filter(|c| c.decided.is_none() && c.waiting.contains(&from_instance)) else {
            if !self.issued(xid) || from_instance == self.id || from.0 >= self.cfg.instances {
                return out.push(Effect::Refuse { from, what: format!("a vote on {xid:?}, which this instance did not ask {from} for") });
            }
            // A vote that came after it was counted as a no (the vote timed out, or its
            // instance asked first): a yes is a branch prepared after all, which must hear the
            // abort, as if it had asked; a no has nothing left to undo.
            if yes {
                self.on_inquire(from, xid, out);
            }
            return;
        };
        c.waiting.remove(&from_instance);
        if yes {
            c.prepared_at.insert(from_instance);
            c.ts = c.ts.max(tick);
        } else {
            c.all_yes = false;
        }
        if c.waiting.is_empty() {
            self.decide(xid, out);
        }
    }

    /// The votes of `xid` did not all come within [`TwoPcConfig::vote_timeout`]: those missing
    /// count as no. Their instances may have prepared (the vote lost on its way) or not (the
    /// prepare lost, or the participant stopped before it prepared): the abort goes to them
    /// all, and one that has no such branch ignores it.
    fn on_vote_timeout(&mut self, xid: Xid, out: &mut Vec<Effect<TwoPc>>) {
        let c = self.coordinating.get_mut(&xid).expect("a wait for votes not yet decided");
        self.stats.votes_timed_out += 1;
        c.voting_since = None;
        let missing = std::mem::take(&mut c.waiting);
        c.prepared_at.extend(missing);
        c.all_yes = false;
        self.decide(xid, out);
    }

    /// Every vote is in, or counted as a no once it was late. An abort is told at once
    /// (presumed abort: nothing need be recorded); a commit only once this instance's branch
    /// committed with its record, in [`Self::decided`]: told before, it could be one that a
    /// restarted coordinator would not find.
    fn decide(&mut self, xid: Xid, out: &mut Vec<Effect<TwoPc>>) {
        let c = self.coordinating.get_mut(&xid).expect("deciding what it coordinates");
        let (commit, ts) = (c.all_yes, c.ts);
        c.decided = Some(commit.then_some(ts));
        out.push(Effect::CancelTimer { id: c.vote_timer });
        if !commit {
            self.stats.distributed_aborts += 1;
            for i in &c.prepared_at {
                out.push(Effect::Send { to: i.process(), msg: Message::Decide { xid, commit, ts } });
            }
        }
        let forget = if commit { std::mem::take(&mut self.forgettable) } else { Vec::new() };
        self.work(Pending::Decide { xid, forget: forget.clone() }, Job::Decide { xid, commit, ts, forget }, out);
    }

    fn decided(&mut self, now: Time, xid: Xid, committed: bool, forget: Vec<Xid>, out: &mut Vec<Effect<TwoPc>>) {
        let c = self.coordinating.remove(&xid).expect("a coordinator decides only what it coordinates");
        if !committed {
            // Rolled back with the branch: deleted by a later commit.
            self.forgettable.extend(forget);
        }
        match c.decided.expect("carried out after the decision") {
            Some(ts) if committed => {
                self.unfinished.insert(xid, c.prepared_at.clone());
                for i in &c.prepared_at {
                    out.push(Effect::Send { to: i.process(), msg: Message::Decide { xid, commit: true, ts } });
                }
                self.stats.distributed_commits += 1;
                let evidence = TwoPcEvidence { class: OpClass::Global, instance: self.id, ts, branches: self.cfg.instances, attempts: c.attempt };
                Self::reply(&c.request, ReplyBody::Done(Done { outcome: c.outcome, evidence }), out);
            }
            Some(ts) => {
                // The commit failed with its connection and no record of it was found (the
                // storage recorded the abort): an abort after all.
                self.stats.distributed_aborts += 1;
                for i in &c.prepared_at {
                    out.push(Effect::Send { to: i.process(), msg: Message::Decide { xid, commit: false, ts } });
                }
                self.again(now, c, out);
            }
            None => self.again(now, c, out),
        }
    }

    /// A voted-down attempt: run the request again after a back-off, or, past the limit, tell
    /// the client.
    fn again(&mut self, now: Time, c: Coordinating, out: &mut Vec<Effect<TwoPc>>) {
        if c.attempt >= self.cfg.max_attempts {
            let message = format!("its distributed transaction was voted down {} times", c.attempt);
            return Self::reply(&c.request, ReplyBody::Error(RequestError::Storage { txn: c.request.txn.clone(), message }), out);
        }
        let round = c.voting_since.map_or(Duration::ZERO, |since| now.saturating_sub(since).min(MAX_SLOT));
        let slot = self.cfg.retry_backoff.max(round);
        let cap = slot.saturating_mul(1 << (c.attempt - 1).min(6));
        let wait = cap.mul_f64(self.rng.random::<f64>());
        let timer = self.timer(wait, out);
        self.backing_off.insert(timer, (c.request, c.attempt + 1));
    }

    fn on_inquire(&mut self, from: ProcessId, xid: Xid, out: &mut Vec<Effect<TwoPc>>) {
        let asker = InstanceId::of(from);
        if !self.issued(xid) || asker == self.id || from.0 >= self.cfg.instances {
            return out.push(Effect::Refuse { from, what: format!("an inquiry about {xid:?}, which this instance did not coordinate") });
        }
        let Some(c) = self.coordinating.get_mut(&xid) else {
            return self.work(Pending::Outcome { xid, asker }, Job::Outcome { xid }, out);
        };
        match c.decided {
            // Its branch is prepared, but the vote it sent never came (lost with a connection,
            // or its node restarted before sending it): a no. Otherwise it voted yes, and will
            // be told.
            None => {
                self.vote_lost(xid, asker, out);
            }
            Some(None) => out.push(Effect::Send { to: from, msg: Message::Decide { xid, commit: false, ts: c.ts } }),
            // Being committed here: told once the record is.
            Some(Some(_)) => {}
        }
    }

    /// `instance`'s vote on `xid`, still awaited, will not come: a no, and the decision goes to
    /// it as to a branch that may have prepared. Returns whether the vote was awaited.
    fn vote_lost(&mut self, xid: Xid, instance: InstanceId, out: &mut Vec<Effect<TwoPc>>) -> bool {
        let Some(c) = self.coordinating.get_mut(&xid).filter(|c| c.decided.is_none()) else { return false };
        if !c.waiting.remove(&instance) {
            return false;
        }
        c.prepared_at.insert(instance);
        c.all_yes = false;
        // The round measured the restart or the loss, not the votes.
        c.voting_since = None;
        if c.waiting.is_empty() {
            self.decide(xid, out);
        }
        true
    }

    /// [`Message::Started`]: `from`'s earlier incarnation is gone. Its votes still awaited
    /// are lost; the branches here that it coordinates ask it at once. A prepare that went to
    /// the new incarnation before this came is counted as a no too: an attempt lost, never a
    /// wrong outcome (the branch, if it prepares, votes late and hears the abort).
    fn on_started(&mut self, now: Time, from: ProcessId, out: &mut Vec<Effect<TwoPc>>) {
        let instance = InstanceId::of(from);
        if instance == self.id || from.0 >= self.cfg.instances {
            return out.push(Effect::Refuse { from, what: "a start of an instance outside this deployment".to_string() });
        }
        let awaited: Vec<Xid> = self.coordinating.iter().filter(|(_, c)| c.decided.is_none() && c.waiting.contains(&instance)).map(|(x, _)| *x).collect();
        for xid in awaited {
            if self.vote_lost(xid, instance, out) {
                self.stats.votes_lost_to_restarts += 1;
            }
        }
        for (xid, since) in self.prepared.iter_mut().filter(|(x, _)| x.coordinator == instance) {
            *since = now;
            self.stats.inquiries += 1;
            out.push(Effect::Send { to: from, msg: Message::Inquire { xid: *xid } });
        }
    }

    fn on_message(&mut self, now: Time, from: ProcessId, msg: Message, out: &mut Vec<Effect<TwoPc>>) {
        match msg {
            Message::Prepare { xid, update } => {
                if xid.coordinator.process() != from || xid.coordinator == self.id || from.0 >= self.cfg.instances {
                    return out.push(Effect::Refuse { from, what: format!("a prepare of {xid:?} not sent by its coordinator") });
                }
                let applying = self.pending.values().any(|p| matches!(p, Pending::Apply { xid: x } if *x == xid));
                if applying || self.prepared.contains_key(&xid) {
                    // A branch id the server holds already: starting it again would fail the job.
                    return out.push(Effect::Refuse { from, what: format!("a second prepare of {xid:?}") });
                }
                self.work(Pending::Apply { xid }, Job::Apply { xid, update }, out);
            }
            Message::Vote { xid, yes, tick } => self.on_vote(from, xid, yes, tick, out),
            Message::Decide { xid, commit, ts } => {
                if xid.coordinator.process() != from || xid.coordinator == self.id {
                    return out.push(Effect::Refuse { from, what: format!("a decision on {xid:?} not sent by its coordinator") });
                }
                // A decision told again (an inquiry's answer crossing the first telling) finds
                // the branch finishing or finished: nothing left to do.
                if self.prepared.remove(&xid).is_some() {
                    self.work(Pending::Finish { xid, commit }, Job::Finish { xid, commit, ts }, out);
                }
            }
            Message::Inquire { xid } => self.on_inquire(from, xid, out),
            Message::Started { .. } => self.on_started(now, from, out),
            Message::Finished { xid } => {
                if xid.coordinator != self.id {
                    return out.push(Effect::Refuse { from, what: format!("a participant's commit of {xid:?}, which this instance did not coordinate") });
                }
                // Not found: the commit was recorded by an earlier incarnation, or told again;
                // its record stays, which costs a row.
                if let Some(left) = self.unfinished.get_mut(&xid) {
                    left.remove(&InstanceId::of(from));
                    if left.is_empty() {
                        self.unfinished.remove(&xid);
                        self.forgettable.push(xid);
                    }
                }
            }
        }
    }
}

impl Process<TwoPc> for TwoPcNode {
    fn id(&self) -> ProcessId {
        self.id.process()
    }

    fn start(&mut self, _now: Time, out: &mut Vec<Effect<TwoPc>>) {
        self.work(Pending::Recover, Job::Recover, out);
    }

    fn on_event(&mut self, now: Time, event: Event<TwoPc>, out: &mut Vec<Effect<TwoPc>>) {
        if self.epoch.is_none() && matches!(event, Event::Request(_) | Event::Message { .. }) {
            // A global's id needs this start's incarnation, and a branch prepared here before
            // the recovery listed the prepared ones would be taken for one left in doubt.
            return self.held_back.push(event);
        }
        match event {
            Event::Request(r) => self.on_request(r, out),
            Event::Message { from, msg } => self.on_message(now, from, msg, out),
            Event::Timer(id) if self.inquiry == Some(id) => self.on_inquiry_timer(now, out),
            Event::Timer(id) => {
                if let Some((request, attempt)) = self.backing_off.remove(&id) {
                    return self.run(request, OpClass::Global, attempt, out);
                }
                // The transactions coordinated at once are few (at most one per client).
                let waited = self.coordinating.iter().find(|(_, c)| c.vote_timer == id && c.decided.is_none()).map(|(x, _)| *x);
                if let Some(xid) = waited {
                    self.on_vote_timeout(xid, out);
                }
            }
            Event::StorageDone { work, result } => self.on_storage(now, work, result, out),
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = &self.stats;
        vec![
            ("one_phase", s.one_phase),
            ("distributed_commits", s.distributed_commits),
            ("distributed_aborts", s.distributed_aborts),
            ("branches_applied", s.branches_applied),
            ("storage_retries", s.storage_retries),
            ("rejected", s.rejected),
            ("maps_sent", s.maps_sent),
            ("in_doubt_at_start", s.in_doubt_at_start),
            ("votes_timed_out", s.votes_timed_out),
            ("inquiries", s.inquiries),
            ("outcomes_read", s.outcomes_read),
            ("votes_lost_to_restarts", s.votes_lost_to_restarts),
        ]
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }

    fn quiescent(&self) -> bool {
        self.epoch.is_some()
            && self.held_back.is_empty()
            && self.pending.is_empty()
            && self.coordinating.is_empty()
            && self.prepared.is_empty()
            && self.backing_off.is_empty()
    }

    fn in_flight(&self) -> Option<String> {
        if self.quiescent() {
            return None;
        }
        let mut parts = Vec::new();
        if self.epoch.is_none() {
            parts.push(format!("its recovery is not done ({} event(s) held back)", self.held_back.len()));
        }
        if !self.pending.is_empty() {
            let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
            for p in self.pending.values() {
                let kind = match p {
                    Pending::Recover => "recovery",
                    Pending::Run { xid: None, .. } => "one-phase",
                    Pending::Run { xid: Some(_), .. } => "coordinator's branch",
                    Pending::Apply { .. } => "participant's branch",
                    Pending::Decide { .. } => "coordinator's decision",
                    Pending::Finish { .. } => "participant's decision",
                    Pending::Outcome { .. } => "lookup of a decision",
                };
                *kinds.entry(kind).or_default() += 1;
            }
            let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
            // Work ids grow: the first are the oldest, and the host names long-running jobs by id.
            let oldest: Vec<String> = self.pending.iter().take(3).map(|(w, p)| format!("job {}: {}", w.0, p.describe())).collect();
            parts.push(format!("storage jobs: {} (oldest: {})", kinds.join(", "), oldest.join(", ")));
        }
        for (xid, c) in self.coordinating.iter().take(3) {
            let waiting: Vec<String> = c.waiting.iter().map(|i| i.to_string()).collect();
            parts.push(format!("coordinates {xid:?} (attempt {}), votes awaited from [{}], decided: {:?}", c.attempt, waiting.join(", "), c.decided));
        }
        if self.coordinating.len() > 3 {
            parts.push(format!("and {} more transaction(s) it coordinates", self.coordinating.len() - 3));
        }
        if !self.prepared.is_empty() {
            parts.push(format!("{} prepared branch(es) awaiting their decision", self.prepared.len()));
        }
        if !self.backing_off.is_empty() {
            let attempts: Vec<String> = self.backing_off.values().map(|(r, a)| format!("`{}` #{} next attempt {a}", r.txn, r.seq)).collect();
            parts.push(format!("voted down, waiting to run again: {}", attempts.join(", ")));
        }
        Some(parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ensemble_app::{ChangeKind, RowChange};
    use ensemble_core::{ClientId, Value};

    const INQUIRE_AFTER: Duration = Duration::from_secs(1);
    const VOTE_TIMEOUT: Duration = Duration::from_secs(5);

    /// A node of `n` whose start is done: incarnation 1, nothing in doubt.
    fn node(id: u32, n: u32) -> TwoPcNode {
        node_with(id, n, 2)
    }

    /// [`node`], running a request at most `max_attempts` times.
    fn node_with(id: u32, n: u32, max_attempts: u32) -> TwoPcNode {
        let mut node = fresh_with(id, n, max_attempts);
        let out = start(&mut node);
        handle(&mut node, Event::StorageDone { work: out, result: JobResult::Recovered { epoch: 1, in_doubt: vec![] } });
        node
    }

    fn fresh(id: u32, n: u32) -> TwoPcNode {
        fresh_with(id, n, 2)
    }

    fn fresh_with(id: u32, n: u32, max_attempts: u32) -> TwoPcNode {
        let app = ensemble_app::application("shop").unwrap();
        let plan: PartitionPlan = toml::from_str(include_str!("../../../plans/shop.toml")).unwrap();
        let cfg = TwoPcConfig { instances: n, max_attempts, retry_backoff: Duration::from_millis(5), inquire_after: INQUIRE_AFTER, vote_timeout: VOTE_TIMEOUT, seed: 1 };
        TwoPcNode::new(InstanceId(id), cfg, app, Arc::new(plan))
    }

    /// Starts `node`: its one effect is the recovery job, whose work id this returns.
    fn start(node: &mut TwoPcNode) -> WorkId {
        let mut out = Vec::new();
        node.start(Time::ZERO, &mut out);
        let [(w, Job::Recover)] = stored(&out)[..] else { panic!("{out:?}") };
        assert_eq!(out.len(), 1, "{out:?}");
        w
    }

    fn request(txn: &str, cart: i64) -> Request {
        Request { client: ClientId(7), seq: 1, txn: txn.into(), params: vec![Value::Int(cart)] }
    }

    fn xid(coordinator: u32, n: u64) -> Xid {
        Xid { coordinator: InstanceId(coordinator), epoch: 1, n }
    }

    fn handle(n: &mut TwoPcNode, e: Event<TwoPc>) -> Vec<Effect<TwoPc>> {
        handle_at(n, Time::ZERO, e)
    }

    fn handle_at(n: &mut TwoPcNode, now: Time, e: Event<TwoPc>) -> Vec<Effect<TwoPc>> {
        let mut out = Vec::new();
        n.on_event(now, e, &mut out);
        out
    }

    fn stored(out: &[Effect<TwoPc>]) -> Vec<(WorkId, Job)> {
        out.iter().filter_map(|e| if let Effect::Storage { work, job, .. } = e { Some((*work, job.clone())) } else { None }).collect()
    }

    fn sent(out: &[Effect<TwoPc>]) -> Vec<(ProcessId, Message)> {
        out.iter().filter_map(|e| if let Effect::Send { to, msg } = e { Some((*to, msg.clone())) } else { None }).collect()
    }

    fn replied(out: &[Effect<TwoPc>]) -> Vec<ReplyBody<TwoPcEvidence>> {
        out.iter().filter_map(|e| if let Effect::Reply { reply, .. } = e { Some(reply.body.clone()) } else { None }).collect()
    }

    fn timers(out: &[Effect<TwoPc>]) -> Vec<(TimerId, Duration)> {
        out.iter().filter_map(|e| if let Effect::SetTimer { id, after } = e { Some((*id, *after)) } else { None }).collect()
    }

    fn refused(out: &[Effect<TwoPc>]) -> bool {
        matches!(out, [Effect::Refuse { .. }])
    }

    fn update() -> StateUpdate {
        let item = RowChange { table: "items".into(), kind: ChangeKind::Update { key: vec![("item_id".into(), Value::Int(1))], set: vec![] } };
        let line = RowChange { table: "cart_lines".into(), kind: ChangeKind::Delete { key: vec![("cart_id".into(), Value::Int(3))] } };
        StateUpdate { changes: vec![item, line], writer: None }
    }

    /// Runs an order at `c` up to its held branch: the xid and the prepares sent.
    fn held_order(c: &mut TwoPcNode, tick: u64) -> (Xid, Vec<(ProcessId, Message)>) {
        // Cart 6 is instance 0's with two instances or three.
        let out = handle(c, Event::Request(request("order", 6)));
        let [(w, Job::Branch { xid, .. })] = stored(&out)[..] else { panic!("{out:?}") };
        let held = JobResult::Held { outcome: Outcome::Committed(vec![]), update: update(), tick, retries: 0 };
        let out = handle(c, Event::StorageDone { work: w, result: held });
        (xid, sent(&out))
    }

    /// A global at instance 0 of 3: its branch held, the replicated part sent to both others,
    /// the decision taken on the largest tick and carried out on the coordinator's own branch
    /// first (the commit point); only then are the participants told and the client answered.
    #[test]
    fn a_global_commits_at_the_largest_tick_and_is_told_once_its_record_committed() {
        let mut c = node(0, 3);
        let (xid, prepares) = held_order(&mut c, 5);
        assert_eq!(xid, Xid { coordinator: InstanceId(0), epoch: 1, n: 0 }, "the id carries the incarnation");
        assert_eq!(prepares.len(), 2);
        for (_, m) in &prepares {
            let Message::Prepare { update, .. } = m else { panic!() };
            assert_eq!(update.changes.len(), 1, "only the replicated table's change travels");
        }
        assert!(handle(&mut c, Event::Message { from: ProcessId(1), msg: Message::Vote { xid, yes: true, tick: 9 } }).is_empty());
        assert!(!c.quiescent());
        let what = c.in_flight().expect("not quiescent, so something is in flight");
        assert!(what.contains("votes awaited from [i2]") && what.contains("attempt 1"), "a stalled run names the transaction and whose vote it waits for: {what}");
        let out = handle(&mut c, Event::Message { from: ProcessId(2), msg: Message::Vote { xid, yes: true, tick: 7 } });
        let [(w, Job::Decide { xid: x, commit: true, ts: 9, .. })] = stored(&out)[..] else { panic!("{out:?}") };
        assert_eq!(x, xid);
        assert!(sent(&out).is_empty() && replied(&out).is_empty(), "a commit told before its record could be lost: {out:?}");
        let what = c.in_flight().expect("deciding");
        assert!(what.contains(&format!("(oldest: job {}: coordinator's decision on {xid:?})", w.0)), "the job a host names by id is told apart: {what}");
        let out = handle(&mut c, Event::StorageDone { work: w, result: JobResult::Decided { committed: true } });
        let decisions = sent(&out);
        assert_eq!(decisions, vec![(ProcessId(1), Message::Decide { xid, commit: true, ts: 9 }), (ProcessId(2), Message::Decide { xid, commit: true, ts: 9 })]);
        let [ReplyBody::Done(d)] = &replied(&out)[..] else { panic!("{out:?}") };
        assert_eq!((d.evidence.ts, d.evidence.branches, d.evidence.attempts), (9, 3, 1));
        assert!(c.quiescent());
        assert_eq!(c.in_flight(), None);
    }

    /// A vote that does not come (its prepare lost, or its participant stopped before it
    /// prepared) would hold the coordinator's branch and its locks for good: after
    /// `vote_timeout` it counts as a no, every participant not heard from is told the abort,
    /// and the request runs again. A yes that comes after that is a branch prepared after all:
    /// answered as an inquiry, from the records once the attempt is over. A vote that comes in
    /// time cancels the wait.
    #[test]
    fn a_vote_that_does_not_come_aborts_the_attempt_and_a_late_yes_hears_the_abort() {
        let mut c = node(0, 3);
        let out = handle(&mut c, Event::Request(request("order", 6)));
        let [(w, Job::Branch { xid: x, .. })] = stored(&out)[..] else { panic!("{out:?}") };
        let held = JobResult::Held { outcome: Outcome::Committed(vec![]), update: update(), tick: 5, retries: 0 };
        let out = handle(&mut c, Event::StorageDone { work: w, result: held });
        assert_eq!(sent(&out).len(), 2);
        let [(wait, VOTE_TIMEOUT)] = timers(&out)[..] else { panic!("the wait for the votes is bounded: {out:?}") };
        assert!(handle(&mut c, Event::Message { from: ProcessId(1), msg: Message::Vote { xid: x, yes: true, tick: 6 } }).is_empty());
        // Instance 2's vote never comes.
        let timed_out = Time::ZERO + VOTE_TIMEOUT;
        let out = handle_at(&mut c, timed_out, Event::Timer(wait));
        let mut told: Vec<(ProcessId, Message)> = sent(&out);
        told.sort_by_key(|(to, _)| *to);
        assert_eq!(
            told,
            vec![(ProcessId(1), Message::Decide { xid: x, commit: false, ts: 6 }), (ProcessId(2), Message::Decide { xid: x, commit: false, ts: 6 })],
            "the one that voted yes and the one not heard from are both told the abort"
        );
        let [(d, Job::Decide { commit: false, .. })] = stored(&out)[..] else { panic!("{out:?}") };
        assert_eq!((c.stats().votes_timed_out, c.stats().distributed_aborts), (1, 1));
        let out = handle_at(&mut c, timed_out, Event::StorageDone { work: d, result: JobResult::Decided { committed: false } });
        let [(again, after)] = timers(&out)[..] else { panic!("runs again after a back-off: {out:?}") };
        assert!(after <= Duration::from_millis(5), "a round whose vote did not come sets no longer slot: {after:?}");

        // Instance 2 prepared after all: its yes is answered from the records (no record of a
        // commit: an abort, recorded first).
        let late = handle(&mut c, Event::Message { from: ProcessId(2), msg: Message::Vote { xid: x, yes: true, tick: 7 } });
        assert_eq!(stored(&late).iter().map(|(_, j)| j.clone()).collect::<Vec<_>>(), vec![Job::Outcome { xid: x }], "{late:?}");
        let late_no = handle(&mut c, Event::Message { from: ProcessId(2), msg: Message::Vote { xid: x, yes: false, tick: 0 } });
        assert!(late_no.is_empty(), "a late no has nothing to undo: {late_no:?}");
        let never = handle(&mut c, Event::Message { from: ProcessId(2), msg: Message::Vote { xid: xid(0, 9), yes: true, tick: 1 } });
        assert!(refused(&never), "a vote on an id this instance never made: {never:?}");

        // The next attempt's votes come in time: the decision cancels its wait.
        let out = handle(&mut c, Event::Timer(again));
        let [(w, Job::Branch { xid: y, .. })] = stored(&out)[..] else { panic!("{out:?}") };
        let held = JobResult::Held { outcome: Outcome::Committed(vec![]), update: update(), tick: 8, retries: 0 };
        let out = handle(&mut c, Event::StorageDone { work: w, result: held });
        let [(wait, VOTE_TIMEOUT)] = timers(&out)[..] else { panic!("{out:?}") };
        handle(&mut c, Event::Message { from: ProcessId(1), msg: Message::Vote { xid: y, yes: true, tick: 9 } });
        let out = handle(&mut c, Event::Message { from: ProcessId(2), msg: Message::Vote { xid: y, yes: true, tick: 9 } });
        assert!(out.iter().any(|e| matches!(e, Effect::CancelTimer { id } if *id == wait)), "{out:?}");
        assert!(handle(&mut c, Event::Timer(wait)).is_empty(), "a wait that fires after its decision does nothing");
        assert_eq!(c.stats().votes_timed_out, 1);
    }

    /// A no vote rolls back the coordinator's branch and runs the request again under a new
    /// xid; past the attempt limit the client gets an error, never a silent abort.
    #[test]
    fn a_no_vote_runs_the_request_again_then_gives_up() {
        let mut c = node(0, 2);
        let mut out = handle(&mut c, Event::Request(request("order", 2)));
        let mut xids = Vec::new();
        for attempt in 1..=2 {
            let [(w, Job::Branch { xid, .. })] = stored(&out)[..] else { panic!("{out:?}") };
            xids.push(xid);
            let held = JobResult::Held { outcome: Outcome::Committed(vec![]), update: update(), tick: 1, retries: 0 };
            handle(&mut c, Event::StorageDone { work: w, result: held });
            let o = handle(&mut c, Event::Message { from: ProcessId(1), msg: Message::Vote { xid, yes: false, tick: 0 } });
            assert_eq!(stored(&o)[0].1, Job::Decide { xid, commit: false, ts: 1, forget: vec![] });
            assert!(sent(&o).is_empty(), "a participant that voted no has nothing to roll back");
            out = handle(&mut c, Event::StorageDone { work: stored(&o)[0].0, result: JobResult::Decided { committed: false } });
            if attempt == 2 {
                assert!(matches!(&replied(&out)[..], [ReplyBody::Error(RequestError::Storage { .. })]), "{out:?}");
            } else {
                // Not at once: after a back-off, then as a new branch.
                let [(id, after)] = timers(&out)[..] else { panic!("{out:?}") };
                assert!(after <= Duration::from_millis(5), "{after:?}");
                assert!(!c.quiescent(), "a request waiting to run again is in flight");
                out = handle(&mut c, Event::Timer(id));
            }
        }
        assert_ne!(xids[0], xids[1]);
        assert_eq!(c.stats().distributed_aborts, 2);
    }

    /// A voted-down attempt backs off in slots as long as its voting round: a round of 200 ms
    /// (a WAN round trip) gives back-offs beyond what 5 ms slots allow (64 of them, 320 ms).
    #[test]
    fn a_voted_down_attempt_backs_off_in_slots_as_long_as_its_voting_round() {
        let round = Duration::from_millis(200);
        let mut c = node_with(0, 2, 100);
        let mut now = Time::ZERO;
        let mut out = handle_at(&mut c, now, Event::Request(request("order", 2)));
        let mut waits = Vec::new();
        for attempt in 1..=10u32 {
            let [(w, Job::Branch { xid, .. })] = stored(&out)[..] else { panic!("{out:?}") };
            handle_at(&mut c, now, Event::StorageDone { work: w, result: JobResult::Held { outcome: Outcome::Committed(vec![]), update: update(), tick: 1, retries: 0 } });
            now = now + round;
            let o = handle_at(&mut c, now, Event::Message { from: ProcessId(1), msg: Message::Vote { xid, yes: false, tick: 0 } });
            let o = handle_at(&mut c, now, Event::StorageDone { work: stored(&o)[0].0, result: JobResult::Decided { committed: false } });
            let [(id, after)] = timers(&o)[..] else { panic!("{o:?}") };
            assert!(after <= round * (1 << (attempt - 1).min(6)), "attempt {attempt}: {after:?}");
            waits.push(after);
            now = now + after;
            out = handle_at(&mut c, now, Event::Timer(id));
        }
        assert!(waits.iter().any(|w| *w > Duration::from_millis(320)), "{waits:?}");
    }

    /// A commit whose connection was lost and whose record the storage did not find is an
    /// abort: the participants that prepared are told so, and the request runs again.
    #[test]
    fn a_commit_that_did_not_happen_is_told_as_an_abort() {
        let mut c = node(0, 2);
        let (xid, _) = held_order(&mut c, 2);
        let out = handle(&mut c, Event::Message { from: ProcessId(1), msg: Message::Vote { xid, yes: true, tick: 4 } });
        let [(w, Job::Decide { commit: true, .. })] = stored(&out)[..] else { panic!("{out:?}") };
        let out = handle(&mut c, Event::StorageDone { work: w, result: JobResult::Decided { committed: false } });
        assert_eq!(sent(&out), vec![(ProcessId(1), Message::Decide { xid, commit: false, ts: 4 })]);
        assert!(replied(&out).is_empty() && timers(&out).len() == 1, "{out:?}");
        assert_eq!((c.stats().distributed_commits, c.stats().distributed_aborts), (0, 1));
    }

    /// A participant applies what its coordinator asks, votes, and commits on the decision;
    /// votes and decisions from anyone else are refused and change nothing, and a decision told
    /// again, or about a branch it does not hold, changes nothing either.
    #[test]
    fn a_participant_refuses_what_no_coordinator_sent() {
        let mut p = node(1, 3);
        let xid = xid(0, 4);
        let forged = handle(&mut p, Event::Message { from: ProcessId(2), msg: Message::Prepare { xid, update: update() } });
        assert!(refused(&forged));
        let forged = handle(&mut p, Event::Message { from: ProcessId(2), msg: Message::Decide { xid, commit: true, ts: 3 } });
        assert!(refused(&forged));
        let early = handle(&mut p, Event::Message { from: ProcessId(0), msg: Message::Decide { xid, commit: true, ts: 3 } });
        assert!(early.is_empty(), "{early:?}");
        let out = handle(&mut p, Event::Message { from: ProcessId(0), msg: Message::Prepare { xid, update: update() } });
        let [(w, Job::Apply { .. })] = stored(&out)[..] else { panic!("{out:?}") };
        let again = handle(&mut p, Event::Message { from: ProcessId(0), msg: Message::Prepare { xid, update: update() } });
        assert!(refused(&again), "{again:?}");
        let out = handle(&mut p, Event::StorageDone { work: w, result: JobResult::Voted { yes: true, tick: 6, why: None } });
        assert_eq!(sent(&out), vec![(ProcessId(0), Message::Vote { xid, yes: true, tick: 6 })]);
        let stray = handle(&mut p, Event::Message { from: ProcessId(0), msg: Message::Vote { xid, yes: true, tick: 1 } });
        assert!(refused(&stray));
        let out = handle(&mut p, Event::Message { from: ProcessId(0), msg: Message::Decide { xid, commit: true, ts: 8 } });
        assert_eq!(stored(&out)[0].1, Job::Finish { xid, commit: true, ts: 8 });
        assert!(!p.quiescent());
        let twice = handle(&mut p, Event::Message { from: ProcessId(0), msg: Message::Decide { xid, commit: true, ts: 8 } });
        assert!(twice.is_empty(), "a decision told again finishes nothing twice: {twice:?}");
        let out = handle(&mut p, Event::StorageDone { work: stored(&out)[0].0, result: JobResult::Finished });
        assert_eq!(sent(&out), vec![(ProcessId(0), Message::Finished { xid })], "the coordinator's record may go");
        assert!(p.quiescent());
    }

    /// A commit's record stays until every participant has said its branch committed; the next
    /// commit deletes it, and if that commit does not happen, the one after.
    #[test]
    fn a_record_goes_with_the_next_commit_once_every_participant_committed() {
        let mut c = node(0, 3);
        let commit = |c: &mut TwoPcNode, committed: bool| -> (Xid, Vec<Xid>) {
            let (xid, _) = held_order(c, 1);
            handle(c, Event::Message { from: ProcessId(1), msg: Message::Vote { xid, yes: true, tick: 2 } });
            let out = handle(c, Event::Message { from: ProcessId(2), msg: Message::Vote { xid, yes: true, tick: 2 } });
            let [(w, Job::Decide { commit: true, forget, .. })] = &stored(&out)[..] else { panic!("{out:?}") };
            handle(c, Event::StorageDone { work: *w, result: JobResult::Decided { committed } });
            (xid, forget.clone())
        };
        let (first, forget) = commit(&mut c, true);
        assert!(forget.is_empty());
        assert!(handle(&mut c, Event::Message { from: ProcessId(1), msg: Message::Finished { xid: first } }).is_empty());
        let (_, forget) = commit(&mut c, true);
        assert!(forget.is_empty(), "instance 2 has not committed its branch of {first:?}");
        handle(&mut c, Event::Message { from: ProcessId(2), msg: Message::Finished { xid: first } });
        let (_, forget) = commit(&mut c, false);
        assert_eq!(forget, vec![first]);
        let (_, forget) = commit(&mut c, true);
        assert_eq!(forget, vec![first], "the deletion rolled back with the commit that failed: the next one deletes it");
        let (_, forget) = commit(&mut c, true);
        assert!(forget.is_empty());
        let forged = handle(&mut c, Event::Message { from: ProcessId(1), msg: Message::Finished { xid: xid(1, 0) } });
        assert!(refused(&forged));
    }

    /// Local requests commit in one phase at their partition's instance; others are redirected.
    #[test]
    fn locals_commit_in_one_phase_and_wrong_instances_redirect() {
        let mut n = node(1, 2);
        let out = handle(&mut n, Event::Request(request("get_cart", 2)));
        assert!(matches!(&replied(&out)[..], [ReplyBody::Redirect { to: ProcessId(0) }]));
        let out = handle(&mut n, Event::Request(request("get_cart", 3)));
        let [(w, Job::Local { .. })] = stored(&out)[..] else { panic!("{out:?}") };
        let out = handle(&mut n, Event::StorageDone { work: w, result: JobResult::Committed { outcome: Outcome::Committed(vec![]), ts: 4, retries: 1 } });
        let [ReplyBody::Done(d)] = &replied(&out)[..] else { panic!("{out:?}") };
        assert_eq!((d.evidence.ts, d.evidence.branches), (4, 1));
        assert_eq!(n.stats().storage_retries, 1);
    }

    /// A node handles nothing before its start's recovery is done: a global's id needs the
    /// incarnation, and a branch prepared here before the recovery listed the prepared ones
    /// would be taken for one left in doubt. Then what was held back runs, in order, and every
    /// branch an earlier incarnation left prepared asks its coordinator at once.
    #[test]
    fn a_starting_node_holds_requests_and_messages_back_and_asks_about_branches_left_in_doubt() {
        let mut p = fresh(1, 3);
        let w = start(&mut p);
        assert!(handle(&mut p, Event::Request(request("order", 4))).is_empty(), "held back until recovered");
        let early = Message::Prepare { xid: xid(0, 9), update: update() };
        assert!(handle(&mut p, Event::Message { from: ProcessId(0), msg: early }).is_empty(), "held back too");
        assert!(!p.quiescent());
        let left = Xid { coordinator: InstanceId(2), epoch: 7, n: 40 };
        let out = handle(&mut p, Event::StorageDone { work: w, result: JobResult::Recovered { epoch: 2, in_doubt: vec![left] } });
        let started = Message::Started { epoch: 2 };
        assert_eq!(
            sent(&out),
            vec![(ProcessId(2), Message::Inquire { xid: left }), (ProcessId(0), started.clone()), (ProcessId(2), started)],
            "asks about the branch left in doubt, then tells every other instance it started again"
        );
        assert_eq!(timers(&out).len(), 1, "and asks again if no answer comes: {out:?}");
        let [(_, Job::Branch { xid: ordered, .. }), (_, Job::Apply { xid: applied, .. })] = stored(&out)[..] else {
            panic!("the order and the prepare held back run now, in order: {out:?}")
        };
        assert_eq!((ordered.epoch, ordered.n, applied), (2, 0, xid(0, 9)));
        let out = handle(&mut p, Event::Message { from: ProcessId(2), msg: Message::Decide { xid: left, commit: true, ts: 12 } });
        assert_eq!(stored(&out)[0].1, Job::Finish { xid: left, commit: true, ts: 12 });
        assert_eq!(p.stats().in_doubt_at_start, 1);
    }

    /// A prepared branch whose decision does not come asks its coordinator once it has waited
    /// `inquire_after`, and again each period, until the decision comes.
    #[test]
    fn a_prepared_branch_asks_its_coordinator_until_the_decision_comes() {
        let mut p = node(1, 2);
        let x = xid(0, 3);
        let prepared_at = Time::from_duration(Duration::from_millis(300));
        let out = handle_at(&mut p, prepared_at, Event::Message { from: ProcessId(0), msg: Message::Prepare { xid: x, update: update() } });
        let w = stored(&out)[0].0;
        let out = handle_at(&mut p, prepared_at, Event::StorageDone { work: w, result: JobResult::Voted { yes: true, tick: 2, why: None } });
        let [(timer, INQUIRE_AFTER)] = timers(&out)[..] else { panic!("{out:?}") };
        // The timer was armed by this branch: it has waited a full period when it fires.
        let first = prepared_at + INQUIRE_AFTER;
        let out = handle_at(&mut p, first, Event::Timer(timer));
        assert_eq!(sent(&out), vec![(ProcessId(0), Message::Inquire { xid: x })]);
        let [(timer, _)] = timers(&out)[..] else { panic!("{out:?}") };
        let out = handle_at(&mut p, first + INQUIRE_AFTER, Event::Timer(timer));
        assert_eq!(sent(&out), vec![(ProcessId(0), Message::Inquire { xid: x })], "asked again");
        let [(timer, _)] = timers(&out)[..] else { panic!("{out:?}") };
        let out = handle(&mut p, Event::Message { from: ProcessId(0), msg: Message::Decide { xid: x, commit: false, ts: 0 } });
        let finish = stored(&out)[0].0;
        let out = handle_at(&mut p, first + INQUIRE_AFTER * 2, Event::Timer(timer));
        assert!(out.is_empty(), "decided: nothing to ask, no timer: {out:?}");
        handle(&mut p, Event::StorageDone { work: finish, result: JobResult::Finished });
        assert!(p.quiescent());
        assert_eq!(p.stats().inquiries, 2);
    }

    /// An instance's first start tells no one; a later one tells every other instance. A
    /// coordinator that hears of it counts that instance's missing vote as a no at once (not
    /// after the vote wait, its locks held all along) and tells it the abort; a participant
    /// asks it at once about the branches it coordinates. Only instances of the deployment can
    /// start.
    #[test]
    fn an_instance_started_again_loses_its_missing_votes_at_once_and_is_asked_about_its_branches() {
        let mut first = fresh(2, 3);
        let w = start(&mut first);
        let out = handle(&mut first, Event::StorageDone { work: w, result: JobResult::Recovered { epoch: 1, in_doubt: vec![] } });
        assert!(sent(&out).is_empty(), "a first start tells no one: {out:?}");

        let mut c = node(0, 3);
        let (x, prepares) = held_order(&mut c, 5);
        assert_eq!(prepares.len(), 2);
        assert!(handle(&mut c, Event::Message { from: ProcessId(1), msg: Message::Vote { xid: x, yes: true, tick: 6 } }).is_empty());
        // Instance 2 was killed with the prepare, and started again.
        let restarted_at = Time::from_duration(Duration::from_millis(40));
        let out = handle_at(&mut c, restarted_at, Event::Message { from: ProcessId(2), msg: Message::Started { epoch: 2 } });
        let [(d, Job::Decide { xid: decided, commit: false, .. })] = stored(&out)[..] else { panic!("decided at once: {out:?}") };
        assert_eq!(decided, x);
        let mut told = sent(&out);
        told.sort_by_key(|(to, _)| *to);
        assert_eq!(told, vec![(ProcessId(1), Message::Decide { xid: x, commit: false, ts: 6 }), (ProcessId(2), Message::Decide { xid: x, commit: false, ts: 6 })]);
        assert_eq!((c.stats().votes_lost_to_restarts, c.stats().votes_timed_out, c.stats().distributed_aborts), (1, 0, 1));
        let out = handle_at(&mut c, restarted_at, Event::StorageDone { work: d, result: JobResult::Decided { committed: false } });
        let [(_, after)] = timers(&out)[..] else { panic!("runs again after a back-off: {out:?}") };
        assert!(after <= Duration::from_millis(5), "a round cut by a restart sets no longer slot: {after:?}");
        let again = handle_at(&mut c, restarted_at, Event::Message { from: ProcessId(2), msg: Message::Started { epoch: 3 } });
        assert!(again.is_empty(), "no vote awaited, nothing coordinated by it: {again:?}");
        assert_eq!(c.stats().votes_lost_to_restarts, 1);
        for from in [ProcessId(0), ProcessId(3)] {
            let out = handle(&mut c, Event::Message { from, msg: Message::Started { epoch: 2 } });
            assert!(refused(&out), "a start from {from}: {out:?}");
        }

        // A participant whose branch instance 0 coordinates.
        let mut p = node(1, 3);
        let prepared_at = Time::from_duration(Duration::from_millis(300));
        let y = xid(0, 3);
        let out = handle_at(&mut p, prepared_at, Event::Message { from: ProcessId(0), msg: Message::Prepare { xid: y, update: update() } });
        let w = stored(&out)[0].0;
        handle_at(&mut p, prepared_at, Event::StorageDone { work: w, result: JobResult::Voted { yes: true, tick: 2, why: None } });
        let soon = prepared_at + Duration::from_millis(10);
        let out = handle_at(&mut p, soon, Event::Message { from: ProcessId(0), msg: Message::Started { epoch: 2 } });
        assert_eq!(sent(&out), vec![(ProcessId(0), Message::Inquire { xid: y })], "asked at once, not after {INQUIRE_AFTER:?}");
        let out = handle_at(&mut p, soon, Event::Message { from: ProcessId(2), msg: Message::Started { epoch: 2 } });
        assert!(out.is_empty(), "instance 2 coordinates no branch here: {out:?}");
        assert_eq!(p.stats().inquiries, 1);
    }

    /// The coordinator answers an inquiry from memory while it coordinates the transaction (an
    /// inquirer whose vote has not come counts as a no: its branch is prepared, the vote was
    /// lost), and otherwise from its records; it refuses to answer about ids it never made.
    #[test]
    fn a_coordinator_answers_an_inquiry_from_memory_or_from_its_records() {
        let mut c = node(0, 3);
        let (x, _) = held_order(&mut c, 5);
        let out = handle(&mut c, Event::Message { from: ProcessId(1), msg: Message::Inquire { xid: x } });
        assert!(out.is_empty(), "still waiting for instance 2's vote: {out:?}");
        let out = handle(&mut c, Event::Message { from: ProcessId(2), msg: Message::Vote { xid: x, yes: true, tick: 6 } });
        assert_eq!(stored(&out)[0].1, Job::Decide { xid: x, commit: false, ts: 6, forget: vec![] });
        let mut told: Vec<ProcessId> = sent(&out).into_iter().map(|(to, m)| {
            assert_eq!(m, Message::Decide { xid: x, commit: false, ts: 6 });
            to
        }).collect();
        told.sort();
        assert_eq!(told, vec![ProcessId(1), ProcessId(2)], "both prepared branches are rolled back");
        let late = handle(&mut c, Event::Message { from: ProcessId(1), msg: Message::Vote { xid: x, yes: true, tick: 7 } });
        assert_eq!(
            sent(&late),
            vec![(ProcessId(1), Message::Decide { xid: x, commit: false, ts: 6 })],
            "the vote counted as a no is not counted again: it is answered as the inquiry was"
        );
        assert!(stored(&late).is_empty(), "{late:?}");
        let out = handle(&mut c, Event::Message { from: ProcessId(2), msg: Message::Inquire { xid: x } });
        assert_eq!(sent(&out), vec![(ProcessId(2), Message::Decide { xid: x, commit: false, ts: 6 })], "an abort is told again at once");

        let earlier = Xid { coordinator: InstanceId(0), epoch: 0, n: 17 };
        let out = handle(&mut c, Event::Message { from: ProcessId(2), msg: Message::Inquire { xid: earlier } });
        let [(w, Job::Outcome { xid: asked })] = stored(&out)[..] else { panic!("{out:?}") };
        assert_eq!(asked, earlier);
        let out = handle(&mut c, Event::StorageDone { work: w, result: JobResult::Outcome { commit: true, ts: 30 } });
        assert_eq!(sent(&out), vec![(ProcessId(2), Message::Decide { xid: earlier, commit: true, ts: 30 })]);

        for never in [xid(0, 5), Xid { coordinator: InstanceId(0), epoch: 2, n: 0 }, xid(1, 0)] {
            let out = handle(&mut c, Event::Message { from: ProcessId(2), msg: Message::Inquire { xid: never } });
            assert!(refused(&out), "{never:?}: {out:?}");
        }
    }
}
