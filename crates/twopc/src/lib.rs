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
//! - A global request runs at that instance as a branch of a distributed transaction
//!   ([`Job::Branch`]): its statements run against the instance's rows, under the server's own
//!   row locking, and its writes are captured as row images. Reads need no other instance: a
//!   global reads replicated tables and its own partition, which this instance holds (the
//!   belt's correctness rests on the same property of the plan). Writes to replicated tables
//!   must reach every copy (read-one, write-all): the branch is prepared and the other
//!   instances are asked to apply the same row changes as branches of their own
//!   ([`Message::Prepare`], [`Job::Apply`]), each prepared and voted on ([`Message::Vote`]).
//!   With every vote *yes* the coordinator commits its branch and tells the participants
//!   ([`Message::Decide`]); with any *no* (a participant's branch lost a lock wait or a deadlock)
//!   every prepared branch is rolled back and the transaction runs again, counted as an attempt.
//!   A global whose body aborted, or that wrote no replicated row, commits at once in one phase.
//!
//! **Serial order.** Every transaction gets a commit timestamp `ts`, from one clock per instance
//! that the instance's storage keeps ([`Job`] says how each job uses it):
//! a one-phase transaction takes the next tick while it still holds all its locks, just before
//! COMMIT; a prepared branch takes the next tick once prepared (all its locks held), and sends
//! it as its vote; the coordinator's decision carries the largest vote as the transaction's
//! `ts`, and each instance moves its clock up to it before it commits the branch. On a server
//! whose isolation holds every lock, shared and exclusive, until commit (InnoDB's SERIALIZABLE:
//! strict two-phase locking, kept across `XA PREPARE`), this orders every pair of conflicting
//! transactions: if T1 and T2 conflict on a row at instance `s`, T2 gets its lock there only
//! after T1's branch at `s` committed, which is after `s`'s clock reached T1's `ts`; T2's
//! tick at `s` comes later, so T2's `ts` (at least that tick) is larger. Ordering the
//! transactions by `ts` (ties broken arbitrarily: tied transactions do not conflict) is
//! therefore a serial order equivalent to the run, and the replay check replays it. An engine
//! that does not hold read locks to commit (PostgreSQL, whose SERIALIZABLE is SSI) breaks the
//! argument as it stands: there the storage takes the read locks itself, row and table locks
//! held to commit (`ensemble_server::dialect::TwoPhaseLock`).
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

/// A distributed transaction's id: the coordinator's instance and its attempt counter. Each
/// attempt of a request is a new id, so a late message about an aborted attempt never touches
/// the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Xid {
    pub coordinator: InstanceId,
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
    /// Coordinator → participant that voted yes: commit (at timestamp `ts`) or roll back.
    Decide { xid: Xid, commit: bool, ts: u64 },
}

/// Storage work. The storage keeps the instance's clock (see the crate doc).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Job {
    /// Run `request` here alone and commit: the result is [`JobResult::Committed`], with the
    /// clock's next tick, taken before COMMIT.
    Local { request: Request },
    /// Run `request` as the coordinator's branch of `xid`. If it committed and wrote rows of
    /// tables every instance replicates, and there are other instances, prepare it and report
    /// [`JobResult::Prepared`] with those changes and the clock's next tick; otherwise commit in
    /// one phase and report [`JobResult::Committed`].
    Branch { request: Request, xid: Xid },
    /// Apply `update` as this instance's branch of `xid` and prepare it:
    /// [`JobResult::Voted`].
    Apply { xid: Xid, update: StateUpdate },
    /// Commit (moving the clock up to `ts` first) or roll back the prepared branch of `xid`.
    Finish { xid: Xid, commit: bool, ts: u64 },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum JobResult {
    /// `retries`: how often the server made it a victim (deadlock, lock wait timeout) before it
    /// committed; it ran again each time, unseen by the client.
    Committed { outcome: Outcome, ts: u64, retries: u32 },
    /// The branch is prepared; `update` holds its changes to replicated tables.
    Prepared { outcome: Outcome, update: StateUpdate, tick: u64, retries: u32 },
    /// `yes`: prepared, with the tick. `no`: rolled back, with the server's reason.
    Voted { yes: bool, tick: u64, why: Option<String> },
    Finished,
    /// The request was malformed: nothing ran.
    Rejected(RequestError),
    /// The server made the transaction a victim (deadlock, lock wait timeout) every time it
    /// ran, up to the storage's limit: nothing committed, and the client is told so.
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
    /// The first wait before a voted-down transaction runs again; each further attempt may wait
    /// up to twice as long (at most 64 times this), a uniformly random part of it. Two globals
    /// that each hold what the other's participant needs both time out and vote no; run again
    /// at once, they would meet again.
    pub retry_backoff: Duration,
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
}

enum Pending {
    /// A one-phase request, or (with `xid`) the coordinator's own branch of attempt `attempt`.
    Run { request: Request, class: OpClass, attempt: u32, xid: Option<Xid> },
    /// A participant's branch.
    Apply { xid: Xid },
    /// A decision being carried out on this instance's branch (the coordinator answers its
    /// client, or runs the request again, once its own branch is finished).
    Finish { xid: Xid },
}

/// A distributed transaction this instance coordinates.
struct Coordinating {
    request: Request,
    attempt: u32,
    outcome: Outcome,
    /// Instances whose vote has not come.
    waiting: BTreeSet<InstanceId>,
    yes: Vec<InstanceId>,
    all_yes: bool,
    /// The largest tick among this branch's and the votes so far.
    ts: u64,
    /// Set once decided: the commit timestamp, or `None` for an abort.
    decided: Option<Option<u64>>,
}

pub struct TwoPcNode {
    id: InstanceId,
    cfg: TwoPcConfig,
    app: Arc<Application>,
    plan: Arc<PartitionPlan>,
    next_work: u64,
    next_xid: u64,
    pending: BTreeMap<WorkId, Pending>,
    coordinating: BTreeMap<Xid, Coordinating>,
    /// Branches this instance prepared and voted yes on, waiting for the decision.
    prepared: BTreeSet<Xid>,
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
            next_work: 0,
            next_xid: 0,
            pending: BTreeMap::new(),
            coordinating: BTreeMap::new(),
            prepared: BTreeSet::new(),
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
            let xid = Xid { coordinator: self.id, n: self.next_xid };
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

    fn on_storage(&mut self, work: WorkId, result: JobResult, out: &mut Vec<Effect<TwoPc>>) {
        // Only the driver hands out completions, and only for work this instance asked for.
        let Some(pending) = self.pending.remove(&work) else {
            panic!("instance {}: completion for unknown work {work:?}", self.id);
        };
        match (pending, result) {
            (Pending::Run { request, class, attempt, .. }, JobResult::Committed { outcome, ts, retries }) => {
                self.stats.one_phase += 1;
                self.stats.storage_retries += u64::from(retries);
                let evidence = TwoPcEvidence { class, instance: self.id, ts, branches: 1, attempts: attempt };
                Self::reply(&request, ReplyBody::Done(Done { outcome, evidence }), out);
            }
            (Pending::Run { request, attempt, xid: Some(xid), .. }, JobResult::Prepared { outcome, update, tick, retries }) => {
                self.stats.storage_retries += u64::from(retries);
                let update = self.replicated_part(update);
                let others: BTreeSet<InstanceId> = (0..self.cfg.instances).map(InstanceId).filter(|i| *i != self.id).collect();
                for i in &others {
                    out.push(Effect::Send { to: i.process(), msg: Message::Prepare { xid, update: update.clone() } });
                }
                let c = Coordinating { request, attempt, outcome, waiting: others, yes: Vec::new(), all_yes: true, ts: tick, decided: None };
                self.coordinating.insert(xid, c);
            }
            (Pending::Apply { xid }, JobResult::Voted { yes, tick, .. }) => {
                self.stats.branches_applied += u64::from(yes);
                if yes {
                    self.prepared.insert(xid);
                }
                out.push(Effect::Send { to: xid.coordinator.process(), msg: Message::Vote { xid, yes, tick } });
            }
            (Pending::Finish { xid }, JobResult::Finished) => {
                if xid.coordinator != self.id {
                    return;
                }
                let c = self.coordinating.remove(&xid).expect("a coordinator finishes only what it coordinates");
                match c.decided.expect("finished after the decision") {
                    Some(ts) => {
                        self.stats.distributed_commits += 1;
                        let evidence = TwoPcEvidence {
                            class: OpClass::Global,
                            instance: self.id,
                            ts,
                            branches: self.cfg.instances,
                            attempts: c.attempt,
                        };
                        Self::reply(&c.request, ReplyBody::Done(Done { outcome: c.outcome, evidence }), out);
                    }
                    None if c.attempt >= self.cfg.max_attempts => {
                        let message = format!("its distributed transaction was voted down {} times", c.attempt);
                        Self::reply(&c.request, ReplyBody::Error(RequestError::Storage { txn: c.request.txn.clone(), message }), out);
                    }
                    None => {
                        let cap = self.cfg.retry_backoff.saturating_mul(1 << (c.attempt - 1).min(6));
                        let wait = cap.mul_f64(self.rng.random::<f64>());
                        let timer = TimerId(self.next_timer);
                        self.next_timer += 1;
                        self.backing_off.insert(timer, (c.request, c.attempt + 1));
                        out.push(Effect::SetTimer { id: timer, after: wait });
                    }
                }
            }
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
                    Pending::Run { request, .. } => format!("`{}` #{} of {}", request.txn, request.seq, request.client),
                    Pending::Apply { xid } | Pending::Finish { xid } => format!("branch {xid:?}"),
                };
                self.failure.get_or_insert_with(|| format!("{what}: {why}"));
                if let Pending::Run { request, .. } = pending {
                    let e = RequestError::Storage { txn: request.txn.clone(), message: why };
                    Self::reply(&request, ReplyBody::Error(e), out);
                }
            }
            (_, other) => panic!("instance {}: storage answered {other:?} to a job that cannot produce it", self.id),
        }
    }

    fn on_vote(&mut self, from: ProcessId, xid: Xid, yes: bool, tick: u64, out: &mut Vec<Effect<TwoPc>>) {
        let from_instance = InstanceId::of(from);
        let Some(c) = self.coordinating.get_mut(&xid).filter(|c| c.decided.is_none() && c.waiting.contains(&from_instance)) else {
            out.push(Effect::Refuse { from, what: format!("a vote on {xid:?}, which this instance is not waiting for from {from}") });
            return;
        };
        c.waiting.remove(&from_instance);
        if yes {
            c.yes.push(from_instance);
            c.ts = c.ts.max(tick);
        } else {
            c.all_yes = false;
        }
        if !c.waiting.is_empty() {
            return;
        }
        let commit = c.all_yes;
        let ts = c.ts;
        c.decided = Some(commit.then_some(ts));
        if !commit {
            self.stats.distributed_aborts += 1;
        }
        for i in c.yes.clone() {
            out.push(Effect::Send { to: i.process(), msg: Message::Decide { xid, commit, ts } });
        }
        self.work(Pending::Finish { xid }, Job::Finish { xid, commit, ts }, out);
    }

    fn on_message(&mut self, from: ProcessId, msg: Message, out: &mut Vec<Effect<TwoPc>>) {
        match msg {
            Message::Prepare { xid, update } => {
                if xid.coordinator.process() != from || xid.coordinator == self.id || from.0 >= self.cfg.instances {
                    return out.push(Effect::Refuse { from, what: format!("a prepare of {xid:?} not sent by its coordinator") });
                }
                let applying = self.pending.values().any(|p| matches!(p, Pending::Apply { xid: x } if *x == xid));
                if applying || self.prepared.contains(&xid) {
                    // A branch id the server holds already: starting it again would fail the job.
                    return out.push(Effect::Refuse { from, what: format!("a second prepare of {xid:?}") });
                }
                self.work(Pending::Apply { xid }, Job::Apply { xid, update }, out);
            }
            Message::Vote { xid, yes, tick } => self.on_vote(from, xid, yes, tick, out),
            Message::Decide { xid, commit, ts } => {
                if xid.coordinator.process() != from || !self.prepared.remove(&xid) {
                    return out.push(Effect::Refuse { from, what: format!("a decision on {xid:?}, which this instance has not prepared for {from}") });
                }
                self.work(Pending::Finish { xid }, Job::Finish { xid, commit, ts }, out);
            }
        }
    }
}

impl Process<TwoPc> for TwoPcNode {
    fn id(&self) -> ProcessId {
        self.id.process()
    }

    fn start(&mut self, _now: Time, _out: &mut Vec<Effect<TwoPc>>) {}

    fn on_event(&mut self, _now: Time, event: Event<TwoPc>, out: &mut Vec<Effect<TwoPc>>) {
        match event {
            Event::Request(r) => self.on_request(r, out),
            Event::Message { from, msg } => self.on_message(from, msg, out),
            Event::Timer(id) => {
                if let Some((request, attempt)) = self.backing_off.remove(&id) {
                    self.run(request, OpClass::Global, attempt, out);
                }
            }
            Event::StorageDone { work, result } => self.on_storage(work, result, out),
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
        ]
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }

    fn quiescent(&self) -> bool {
        self.pending.is_empty() && self.coordinating.is_empty() && self.prepared.is_empty() && self.backing_off.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ensemble_app::{ChangeKind, RowChange};
    use ensemble_core::{ClientId, Value};

    fn node(id: u32, n: u32) -> TwoPcNode {
        let app = ensemble_app::application("shop").unwrap();
        let plan: PartitionPlan = toml::from_str(include_str!("../../../plans/shop.toml")).unwrap();
        TwoPcNode::new(InstanceId(id), TwoPcConfig { instances: n, max_attempts: 2, retry_backoff: Duration::from_millis(5), seed: 1 }, app, Arc::new(plan))
    }

    fn request(txn: &str, cart: i64) -> Request {
        Request { client: ClientId(7), seq: 1, txn: txn.into(), params: vec![Value::Int(cart)] }
    }

    fn handle(n: &mut TwoPcNode, e: Event<TwoPc>) -> Vec<Effect<TwoPc>> {
        let mut out = Vec::new();
        n.on_event(Time::ZERO, e, &mut out);
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

    fn update() -> StateUpdate {
        let item = RowChange { table: "items".into(), kind: ChangeKind::Update { key: vec![("item_id".into(), Value::Int(1))], set: vec![] } };
        let line = RowChange { table: "cart_lines".into(), kind: ChangeKind::Delete { key: vec![("cart_id".into(), Value::Int(3))] } };
        StateUpdate { changes: vec![item, line], writer: None }
    }

    /// A global at instance 0 of 3: its branch prepared, the replicated part sent to both others,
    /// the decision taken on the largest tick, the client answered once the coordinator's branch
    /// committed.
    #[test]
    fn a_global_commits_at_the_largest_tick() {
        let mut c = node(0, 3);
        let out = handle(&mut c, Event::Request(request("order", 3)));
        let [(w, Job::Branch { xid, .. })] = stored(&out)[..] else { panic!("{out:?}") };
        let prepared = JobResult::Prepared { outcome: Outcome::Committed(vec![]), update: update(), tick: 5, retries: 0 };
        let out = handle(&mut c, Event::StorageDone { work: w, result: prepared });
        let prepares = sent(&out);
        assert_eq!(prepares.len(), 2);
        for (_, m) in &prepares {
            let Message::Prepare { update, .. } = m else { panic!() };
            assert_eq!(update.changes.len(), 1, "only the replicated table's change travels");
        }
        assert!(handle(&mut c, Event::Message { from: ProcessId(1), msg: Message::Vote { xid, yes: true, tick: 9 } }).is_empty());
        assert!(!c.quiescent());
        let out = handle(&mut c, Event::Message { from: ProcessId(2), msg: Message::Vote { xid, yes: true, tick: 7 } });
        assert_eq!(stored(&out)[0].1, Job::Finish { xid, commit: true, ts: 9 });
        assert_eq!(sent(&out).len(), 2);
        let out = handle(&mut c, Event::StorageDone { work: stored(&out)[0].0, result: JobResult::Finished });
        let [ReplyBody::Done(d)] = &replied(&out)[..] else { panic!("{out:?}") };
        assert_eq!((d.evidence.ts, d.evidence.branches, d.evidence.attempts), (9, 3, 1));
        assert!(c.quiescent());
    }

    /// A no vote rolls back the prepared branches and runs the request again under a new xid;
    /// past the attempt limit the client gets an error, never a silent abort.
    #[test]
    fn a_no_vote_runs_the_request_again_then_gives_up() {
        let mut c = node(0, 2);
        let mut out = handle(&mut c, Event::Request(request("order", 2)));
        let mut xids = Vec::new();
        for attempt in 1..=2 {
            let [(w, Job::Branch { xid, .. })] = stored(&out)[..] else { panic!("{out:?}") };
            xids.push(xid);
            let prepared = JobResult::Prepared { outcome: Outcome::Committed(vec![]), update: update(), tick: 1, retries: 0 };
            handle(&mut c, Event::StorageDone { work: w, result: prepared });
            let o = handle(&mut c, Event::Message { from: ProcessId(1), msg: Message::Vote { xid, yes: false, tick: 0 } });
            assert_eq!(stored(&o)[0].1, Job::Finish { xid, commit: false, ts: 1 });
            assert!(sent(&o).is_empty(), "a participant that voted no has nothing to roll back");
            out = handle(&mut c, Event::StorageDone { work: stored(&o)[0].0, result: JobResult::Finished });
            if attempt == 2 {
                assert!(matches!(&replied(&out)[..], [ReplyBody::Error(RequestError::Storage { .. })]), "{out:?}");
            } else {
                // Not at once: after a back-off, then as a new branch.
                let [Effect::SetTimer { id, after }] = &out[..] else { panic!("{out:?}") };
                assert!(*after <= Duration::from_millis(5), "{after:?}");
                assert!(!c.quiescent(), "a request waiting to run again is in flight");
                out = handle(&mut c, Event::Timer(*id));
            }
        }
        assert_ne!(xids[0], xids[1]);
        assert_eq!(c.stats().distributed_aborts, 2);
    }

    /// A participant applies what its coordinator asks, votes, and commits on the decision; votes
    /// and decisions from anyone else, or for branches it does not hold, are refused and change
    /// nothing.
    #[test]
    fn a_participant_refuses_what_no_coordinator_sent() {
        let mut p = node(1, 3);
        let xid = Xid { coordinator: InstanceId(0), n: 4 };
        let forged = handle(&mut p, Event::Message { from: ProcessId(2), msg: Message::Prepare { xid, update: update() } });
        assert!(matches!(&forged[..], [Effect::Refuse { .. }]));
        let early = handle(&mut p, Event::Message { from: ProcessId(0), msg: Message::Decide { xid, commit: true, ts: 3 } });
        assert!(matches!(&early[..], [Effect::Refuse { .. }]));
        let out = handle(&mut p, Event::Message { from: ProcessId(0), msg: Message::Prepare { xid, update: update() } });
        let [(w, Job::Apply { .. })] = stored(&out)[..] else { panic!("{out:?}") };
        let again = handle(&mut p, Event::Message { from: ProcessId(0), msg: Message::Prepare { xid, update: update() } });
        assert!(matches!(&again[..], [Effect::Refuse { .. }]), "{again:?}");
        let out = handle(&mut p, Event::StorageDone { work: w, result: JobResult::Voted { yes: true, tick: 6, why: None } });
        assert_eq!(sent(&out), vec![(ProcessId(0), Message::Vote { xid, yes: true, tick: 6 })]);
        let stray = handle(&mut p, Event::Message { from: ProcessId(0), msg: Message::Vote { xid, yes: true, tick: 1 } });
        assert!(matches!(&stray[..], [Effect::Refuse { .. }]));
        let out = handle(&mut p, Event::Message { from: ProcessId(0), msg: Message::Decide { xid, commit: true, ts: 8 } });
        assert_eq!(stored(&out)[0].1, Job::Finish { xid, commit: true, ts: 8 });
        assert!(!p.quiescent());
        handle(&mut p, Event::StorageDone { work: stored(&out)[0].0, result: JobResult::Finished });
        assert!(p.quiescent());
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
}
