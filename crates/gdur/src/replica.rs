//! A G-DUR process: a replica of its group's partitions and the proxy of the transactions its
//! clients send it. One sans-IO state machine; the simulator and the real runtime drive it.
//!
//! * As a **proxy** (Algorithm 1, execution): it runs the transaction's [`Program`], reading its
//!   own writes, its local store, or a replica of the key (`⟨REQ⟩`/`⟨REPLY⟩`, retried at the
//!   next replica after `read_retry`), buffers writes, and at commit computes
//!   `certifying_obj`: nothing to certify commits at once, otherwise the term is xcast to the
//!   replicas of the certifying objects (Algorithm 2's `submit`). It then waits for the outcome:
//!   a voting quorum of votes (it is always a vote recipient, G-DUR Algorithm 3), an outcome
//!   from a write replica, or its own replica's decision; after `outcome_retry` it asks again,
//!   waiting twice as long before each new ask.
//! * As a **replica** (Algorithms 2 and 3): deliveries of the xcast go to its [`Termination`]
//!   queue; votes it casts go out; commits are applied to its store in delivery order; write
//!   replicas tell the proxy the outcome.
//! * Under atomic commitment by **2PC** (Algorithm 4, [`Commitment::TwoPhaseCommit`]) the
//!   proxy is the coordinator and the replicas of the certifying objects the participants of
//!   one `ensemble_group::commit::TwoPhaseCommit` component per process: the proxy begins the
//!   term's 2PC instead of xcasting it; a replica certifies on PREPARE (unless the component
//!   preempts it), keeps a term it voted *yes* on until the decision, and applies it on commit;
//!   the proxy answers its client on the coordinator's decision.
//!
//! What survives a crash is the [`Durable`] behind a shared handle: the store, the termination
//! state, the multicast's logs and delivered ids, the 2PC log and prepared terms, the
//! transaction counter. A rebuilt process
//! loses the transactions it was executing as a proxy (their clients never hear back; nothing
//! of them was submitted, or what was submitted terminates without it).

use crate::layout::Layout;
use crate::msg::{Class, Evidence, Msg};
use crate::realization::{Commitment, Realization, Xcast};
use crate::termination::{destination_groups, Action, Ctx, Termination};
use crate::txn::{ReadRecord, Term};
use ensemble_core::{
    AbortCause, ClientId, Done, Effect, Event, Outcome, Process, ProcessId, Protocol, Reply, ReplyBody, Request, RequestError, Rows, Time,
    TimerId, WorkId,
};
use ensemble_group::commit::{CommitConfig, CommitError, CommitOutput, Decided, MemoryCommitLog, Role, TwoPhaseCommit, TxnId as CommitTxn};
use ensemble_group::multicast::{AtomicBroadcast, BroadcastConfig, CastId, Delivery, Entry, GenuineConfig, GenuineMulticast, GmEntry};
use ensemble_group::{tick_phase, GroupConfig, GroupId, MemoryLog, Ticker};
use ensemble_kv::store::{MemoryStore, ReadRule, VersionStore};
use ensemble_kv::workload::program::{Program, Step};
use ensemble_kv::{Key, TxnId, Value};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// The protocol's types, for the drivers.
#[derive(Debug)]
pub struct GDur;

impl Protocol for GDur {
    type Msg = Msg;
    type Job = Installed;
    type JobResult = ();
    type Evidence = Evidence;
}

/// A committed transaction's writes as a replica installed them: recorded in the process's
/// storage (the harness's install log) for the checker's per-replica install order. It carries
/// the transaction's reads too, so that a transaction whose proxy crashed before answering its
/// client is still in the checked history.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Installed {
    pub stamp: u64,
    pub txn: TxnId,
    pub reads: Vec<ReadRecord>,
    pub writes: Vec<(Key, Value)>,
}

/// Turns a request into a transaction program, or says what is wrong with it.
pub type Programs = Arc<dyn Fn(&str, &[ensemble_core::Value]) -> Result<Box<dyn Program>, RequestError> + Send + Sync>;

/// Timing of the protocol's retries and of the group communication under it.
#[derive(Clone, Debug)]
pub struct Timing {
    /// The tick driving consensus, resends and retries.
    pub tick: Duration,
    /// OmniPaxos's `(election_ticks, resend_ticks)`.
    pub consensus: (u64, u64),
    /// Resends of casts, proposals and log entries not yet acknowledged.
    pub resend: Duration,
    /// A remote read unanswered for this long goes to the next replica (Algorithm 1's retry).
    pub read_retry: Duration,
    /// A proxy without an outcome, or a write replica without its votes, asks again after this.
    pub outcome_retry: Duration,
}

impl Timing {
    /// For groups inside one data centre (P-Store's setting) and WAN links between them.
    ///
    /// A leader is suspected after 100 ticks (500 ms) without its heartbeat. A loaded replica's
    /// heartbeats queue for a core behind the messages of hundreds of transactions; with 10
    /// ticks (50 ms), A_full at P-Store's CPU costs and 384 clients kept electing new leaders
    /// (a temporary trace of OmniPaxos's `Prepare`s showed it), and its throughput fell from
    /// 456 tx/s at 96 clients to 181.
    pub fn data_centre_groups() -> Timing {
        Timing {
            tick: Duration::from_millis(5),
            consensus: (100, 20),
            resend: Duration::from_millis(500),
            read_retry: Duration::from_millis(1000),
            outcome_retry: Duration::from_millis(2000),
        }
    }

    fn ticks(&self, d: Duration) -> u64 {
        (d.as_nanos() / self.tick.as_nanos().max(1)).max(1) as u64
    }
}

/// CPU costs of the protocol's work beyond handling a message (the simulator's CPU model).
#[derive(Clone, Copy, Debug, Default)]
pub struct Costs {
    /// Reading one version from the store (a local read, or serving a remote one).
    pub read: Duration,
    /// Certifying one read key.
    pub certify_key: Duration,
    /// Installing one written version.
    pub apply_write: Duration,
}

/// What every process of a run shares.
#[derive(Clone)]
pub struct Setup {
    pub realization: Arc<dyn Realization>,
    pub layout: Arc<Layout>,
    pub programs: Programs,
    /// The value every key starts with.
    pub initial: Value,
    pub timing: Timing,
    pub costs: Costs,
    /// The group whose log orders atomic broadcast (for `Xcast::Broadcast`).
    pub sequencer: GroupId,
    pub seed: u64,
}

/// What a process keeps across a crash. In the simulator it is a shared handle the harness
/// keeps; see the module documentation.
pub struct Durable {
    pub store: Box<dyn VersionStore>,
    pub termination: Termination,
    /// The next transaction counter of this proxy: ids never repeat across incarnations.
    pub next_txn: u64,
    pub cast_seq: u64,
    pub ab_next: u64,
    pub delivered: BTreeSet<CastId>,
    pub gm_log: MemoryLog<GmEntry<Term>>,
    pub ab_log: MemoryLog<Entry<Term>>,
    /// Every transaction this replica committed, in commit order, as delivered: for the
    /// checker.
    pub committed: Vec<Term>,
    /// Under 2PC: the component's log (votes, decisions, begun transactions) and the terms
    /// this replica voted *yes* on and has not seen decided.
    pub commit_log: MemoryCommitLog<Term>,
    pub prepared: BTreeMap<CommitTxn, Term>,
}

impl Durable {
    /// Over an in-memory store.
    pub fn new(initial: Value) -> Rc<RefCell<Durable>> {
        Durable::over(Box::new(MemoryStore::new(initial)))
    }

    /// Over `store` (a durable one where a run asks for durability).
    pub fn over(store: Box<dyn VersionStore>) -> Rc<RefCell<Durable>> {
        Rc::new(RefCell::new(Durable {
            store,
            termination: Termination::default(),
            next_txn: 1,
            cast_seq: 0,
            ab_next: 0,
            delivered: BTreeSet::new(),
            gm_log: MemoryLog::new(),
            ab_log: MemoryLog::new(),
            committed: Vec::new(),
            commit_log: MemoryCommitLog::new(),
            prepared: BTreeMap::new(),
        }))
    }
}

/// How a submitted term reaches its replicas: an xcast (atomic commitment by group
/// communication), or 2PC's PREPARE.
enum Multicast {
    Genuine(Box<GenuineMulticast<Term>>),
    Broadcast(Box<AtomicBroadcast<Term>>),
    TwoPhase(Box<TwoPhaseCommit<Term, MemoryCommitLog<Term>>>),
}

/// A remote read on its way.
struct PendingRead {
    key: Key,
    attempt: u32,
    sent_tick: u64,
}

/// A transaction executing at this proxy.
struct Executing {
    client: ClientId,
    seq: u64,
    arrived: Time,
    program: Box<dyn Program>,
    reads: Vec<ReadRecord>,
    seen: BTreeMap<Key, Value>,
    writes: BTreeMap<Key, Value>,
    pending: Option<PendingRead>,
    steps: u32,
}

/// A transaction submitted by this proxy, waiting for its outcome.
struct Submitted {
    client: ClientId,
    seq: u64,
    rows: Rows,
    term: Term,
    class: Class,
    execution: Duration,
    vote_keys: Vec<Key>,
    votes: BTreeMap<GroupId, bool>,
    asked_tick: u64,
    /// Ticks until the next ask: `outcome_retry`, doubling at each ask up to
    /// [`MAX_OUTCOME_BACKOFF`] times it. An outcome long unheard is more often queued on a
    /// saturated link than lost, and asking every replica again each period adds to that queue.
    ask_wait: u64,
}

/// The longest wait between two asks for an outcome, in `outcome_retry` periods.
const MAX_OUTCOME_BACKOFF: u64 = 4;

/// A component's sends as the replica's messages.
fn as_msgs<M>(sends: Vec<(ProcessId, M)>, wrap: fn(M) -> Msg) -> Vec<(ProcessId, Msg)> {
    sends.into_iter().map(|(to, m)| (to, wrap(m))).collect()
}

/// A program that takes more steps than this is stopped (a program bug, not a protocol one).
const MAX_STEPS: u32 = 100_000;
const TICK: TimerId = TimerId(0);
/// Moved forward about once a second, so they fire only if ticks stopped: a process paused
/// (the simulator's pause-style crash) loses the timers that fell in its pause, the tick among
/// them, and one that then receives nothing would never notice through [`Ticker::lost`]. Two,
/// as overlapping crash windows may keep a process down longer than one window.
const WATCHDOGS: [(TimerId, Duration); 2] = [(TimerId(1), Duration::from_millis(2500)), (TimerId(2), Duration::from_secs(9))];

#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    committed: u64,
    aborted: u64,
    local_reads: u64,
    remote_reads: u64,
    read_retries: u64,
    served_reads: u64,
    votes_sent: u64,
    versions_collected: u64,
    /// 2PC: PREPAREs this replica certified (a preempted one is not certified).
    certified_on_prepare: u64,
    outcome_asks: u64,
    vote_asks: u64,
    refused: u64,
}

pub struct Replica {
    me: ProcessId,
    group: GroupId,
    setup: Setup,
    durable: Rc<RefCell<Durable>>,
    multicast: Multicast,
    ticker: Ticker,
    ticks: u64,
    executing: BTreeMap<TxnId, Executing>,
    submitted: BTreeMap<TxnId, Submitted>,
    /// 2PC: the transactions this proxy coordinates, by their commit id.
    coordinated: BTreeMap<CommitTxn, TxnId>,
    /// 2PC: what the component resumed with after a crash, acted on at start.
    recovered: Option<CommitOutput<Term>>,
    /// Messages sent, by kind.
    sent: BTreeMap<&'static str, u64>,
    /// Per client, the last request taken.
    last_request: BTreeMap<ClientId, u64>,
    counters: Counters,
    failure: Option<String>,
}

impl Replica {
    /// Process `me`, a member of a group of `setup.layout`, over what it kept (`durable`; a
    /// fresh one at first start).
    pub fn new(setup: Setup, me: ProcessId, durable: Rc<RefCell<Durable>>) -> Result<Replica, String> {
        let layout = setup.layout.clone();
        let group = layout.group_of(me).ok_or_else(|| format!("{me} is a member of no group"))?;
        let resend_ticks = setup.timing.ticks(setup.timing.resend);
        let mut recovered = None;
        let multicast = {
            let d = durable.borrow();
            match (setup.realization.commitment(), setup.realization.xcast()) {
                (Commitment::TwoPhaseCommit, _) => {
                    let (tpc, resumed) = TwoPhaseCommit::open(me, CommitConfig::new(resend_ticks), d.commit_log.clone())
                        .map_err(|e| format!("{me}: {e}"))?;
                    recovered = Some(resumed);
                    Multicast::TwoPhase(Box::new(tpc))
                }
                (Commitment::GroupCommunication, Xcast::Multicast) => {
                    let config = GenuineConfig::new(layout.directory().clone(), setup.timing.consensus, resend_ticks).frugal();
                    let gm = GenuineMulticast::new(me, config, d.gm_log.clone(), d.cast_seq, d.delivered.clone())
                        .map_err(|e| format!("{me}: {e}"))?;
                    Multicast::Genuine(Box::new(gm))
                }
                (Commitment::GroupCommunication, Xcast::Broadcast) => {
                    let (e, r) = setup.timing.consensus;
                    let members = layout.directory().members(setup.sequencer).to_vec();
                    let config = BroadcastConfig {
                        directory: layout.directory().clone(),
                        sequencer: GroupConfig::new(setup.sequencer, members).timing(e, r),
                        resend_ticks,
                    };
                    let ab = AtomicBroadcast::new(me, config, d.ab_log.clone(), d.cast_seq, d.ab_next, d.delivered.clone())
                        .map_err(|e| format!("{me}: {e}"))?;
                    Multicast::Broadcast(Box::new(ab))
                }
            }
        };
        Ok(Replica {
            me,
            group,
            ticker: Ticker::new(setup.timing.tick),
            setup,
            durable,
            multicast,
            ticks: 0,
            executing: BTreeMap::new(),
            submitted: BTreeMap::new(),
            coordinated: BTreeMap::new(),
            recovered,
            last_request: BTreeMap::new(),
            sent: BTreeMap::new(),
            counters: Counters::default(),
            failure: None,
        })
    }

    fn cx<'a>(&'a self) -> Ctx<'a> {
        Ctx { me: self.me, group: self.group, layout: &self.setup.layout, realization: &*self.setup.realization, now_ticks: self.ticks }
    }

    fn reply(&self, client: ClientId, seq: u64, body: ReplyBody<Evidence>, out: &mut Vec<Effect<GDur>>) {
        out.push(Effect::Reply { to: client, reply: Reply { client, seq, body } });
    }

    // ----- proxy: Algorithm 1 -----

    fn on_request(&mut self, now: Time, r: Request, out: &mut Vec<Effect<GDur>>, charge: &mut Duration) {
        // A duplicated request is not a second transaction (a client has one request out at a
        // time, numbered upwards).
        if self.last_request.get(&r.client).is_some_and(|&last| r.seq <= last) {
            return;
        }
        self.last_request.insert(r.client, r.seq);
        let program = match (self.setup.programs)(&r.txn, &r.params) {
            Ok(p) => p,
            Err(e) => return self.reply(r.client, r.seq, ReplyBody::Error(e), out),
        };
        let id = {
            let mut d = self.durable.borrow_mut();
            let id = TxnId::new(self.me, d.next_txn);
            d.next_txn += 1;
            id
        };
        let e = Executing {
            client: r.client,
            seq: r.seq,
            arrived: now,
            program,
            reads: Vec::new(),
            seen: BTreeMap::new(),
            writes: BTreeMap::new(),
            pending: None,
            steps: 0,
        };
        self.executing.insert(id, e);
        self.run(now, id, None, out, charge);
    }

    /// Runs `id`'s program until it waits for a remote read or ends.
    fn run(&mut self, now: Time, id: TxnId, mut last: Option<(Key, Value)>, out: &mut Vec<Effect<GDur>>, charge: &mut Duration) {
        loop {
            let Some(e) = self.executing.get_mut(&id) else { return };
            e.steps += 1;
            if e.steps > MAX_STEPS {
                let e = self.executing.remove(&id).expect("present");
                let err = RequestError::Storage { txn: id.to_string(), message: format!("the program took more than {MAX_STEPS} steps") };
                return self.reply(e.client, e.seq, ReplyBody::Error(err), out);
            }
            match e.program.step(last.take()) {
                Step::Read(k) => {
                    if let Some(v) = e.writes.get(&k).or_else(|| e.seen.get(&k)) {
                        // Read your own writes; a key read twice gives the version read first.
                        last = Some((k, *v));
                        continue;
                    }
                    if self.setup.layout.groups_of(k).is_empty() {
                        let e = self.executing.remove(&id).expect("present");
                        let err = RequestError::Storage { txn: id.to_string(), message: format!("key {k} has no replica") };
                        return self.reply(e.client, e.seq, ReplyBody::Error(err), out);
                    }
                    if self.setup.layout.replicates(self.me, k) {
                        let version = self.durable.borrow().store.read(k, self.setup.realization.read_rule());
                        *charge += self.setup.costs.read;
                        self.counters.local_reads += 1;
                        let Some(v) = version else {
                            let e = self.executing.remove(&id).expect("present");
                            return self.finish_abort(e, id, AbortCause::Conflict, format!("no version of key {k} is readable"), out);
                        };
                        let e = self.executing.get_mut(&id).expect("present");
                        e.reads.push(ReadRecord { key: k, number: v.number, writer: v.writer });
                        e.seen.insert(k, v.value);
                        last = Some((k, v.value));
                        continue;
                    }
                    e.pending = Some(PendingRead { key: k, attempt: 0, sent_tick: self.ticks });
                    self.counters.remote_reads += 1;
                    let to = self.read_target(id, k, 0);
                    out.push(Effect::Send { to, msg: Msg::ReadReq { txn: id, key: k } });
                    return;
                }
                Step::Write(k, v) => {
                    e.writes.insert(k, v);
                }
                Step::Commit(rows) => {
                    let e = self.executing.remove(&id).expect("present");
                    return self.submit(now, id, e, rows, out, charge);
                }
                Step::Abort(reason) => {
                    let e = self.executing.remove(&id).expect("present");
                    return self.finish_abort(e, id, AbortCause::Body, reason, out);
                }
            }
        }
    }

    fn finish_abort(&mut self, e: Executing, id: TxnId, cause: AbortCause, reason: String, out: &mut Vec<Effect<GDur>>) {
        self.counters.aborted += 1;
        let term = Term::new(id, e.reads, e.writes);
        let evidence = Evidence {
            txn: id,
            class: Class { local: self.setup.layout.is_local(&term), read_only: term.read_only() },
            certified: false,
            reads: term.reads,
            writes: term.writes,
            execution: Duration::ZERO,
        };
        let done = Done { outcome: Outcome::Aborted { cause, reason }, evidence };
        self.reply(e.client, e.seq, ReplyBody::Done(done), out);
    }

    /// The replica a remote read of `k` goes to at `attempt`: the groups replicating `k` and
    /// their members in turn, starting at a place that spreads proxies over replicas.
    fn read_target(&self, id: TxnId, k: Key, attempt: u32) -> ProcessId {
        let groups = self.setup.layout.groups_of(k);
        let all = self.setup.layout.directory().processes(groups);
        let start = (self.me.0 as u64).wrapping_add(id.seq()) as usize;
        all[(start + attempt as usize) % all.len()]
    }

    /// Algorithm 2's `submit`.
    fn submit(&mut self, now: Time, id: TxnId, e: Executing, rows: Rows, out: &mut Vec<Effect<GDur>>, charge: &mut Duration) {
        let term = Term::new(id, e.reads, e.writes);
        let layout = self.setup.layout.clone();
        let local = layout.is_local(&term);
        let class = Class { local, read_only: term.read_only() };
        let execution = now.saturating_sub(e.arrived);
        let objects = self.setup.realization.certifying_obj(&term, local);
        let dst = destination_groups(&layout, &term, objects);
        if dst.is_empty() {
            // certifying_obj = ∅: commit at once.
            self.counters.committed += 1;
            let evidence = Evidence { txn: id, class, certified: false, reads: term.reads, writes: term.writes, execution };
            let done = Done { outcome: Outcome::Committed(rows), evidence };
            return self.reply(e.client, e.seq, ReplyBody::Done(done), out);
        }
        let vote_keys = self.setup.realization.vote_snd_obj(&term, local).keys(&term);
        self.submitted.insert(
            id,
            Submitted { client: e.client, seq: e.seq, rows, term: term.clone(), class, execution, vote_keys, votes: BTreeMap::new(), asked_tick: self.ticks, ask_wait: self.setup.timing.ticks(self.setup.timing.outcome_retry) },
        );
        let (sends, delivered) = match &mut self.multicast {
            Multicast::Genuine(gm) => {
                let (_, o) = gm.cast(term, dst);
                (as_msgs(o.sends, Msg::Gm), o.delivered)
            }
            Multicast::Broadcast(ab) => {
                let (_, o) = ab.cast(term);
                (as_msgs(o.sends, Msg::Ab), o.delivered)
            }
            Multicast::TwoPhase(tpc) => {
                // G-DUR Algorithm 4: the plain multicast of the term to
                // `replicas(certifying_obj)` is the PREPARE.
                let began = tpc.begin(term, layout.directory().processes(&dst));
                match began {
                    Ok((ctxn, o)) => {
                        self.coordinated.insert(ctxn, id);
                        self.absorb_commit(o, out, charge);
                    }
                    Err(e) => self.commit_failed(e, self.me, out),
                }
                return;
            }
        };
        self.durable.borrow_mut().cast_seq = self.cast_seq();
        self.absorb(sends, delivered, out, charge);
    }

    fn cast_seq(&self) -> u64 {
        match &self.multicast {
            Multicast::Genuine(gm) => gm.next_seq(),
            Multicast::Broadcast(ab) => ab.next_seq(),
            Multicast::TwoPhase(tpc) => tpc.next_seq(),
        }
    }

    /// The proxy learns how `id` ended.
    fn decided_at_proxy(&mut self, id: TxnId, commit: bool, out: &mut Vec<Effect<GDur>>) {
        let Some(s) = self.submitted.remove(&id) else { return };
        let outcome = if commit {
            self.counters.committed += 1;
            Outcome::Committed(s.rows)
        } else {
            self.counters.aborted += 1;
            Outcome::Aborted { cause: AbortCause::Certification, reason: format!("{id} failed certification") }
        };
        let evidence = Evidence { txn: id, class: s.class, certified: true, reads: s.term.reads, writes: s.term.writes, execution: s.execution };
        self.reply(s.client, s.seq, ReplyBody::Done(Done { outcome, evidence }), out);
    }

    fn proxy_vote(&mut self, id: TxnId, group: GroupId, vote: bool, out: &mut Vec<Effect<GDur>>) {
        let Some(s) = self.submitted.get_mut(&id) else { return };
        s.votes.insert(group, vote);
        if let Some(commit) = Termination::evaluate(&self.setup.layout, &s.vote_keys, Some(&s.votes)) {
            self.decided_at_proxy(id, commit, out);
        }
    }

    // ----- replica: Algorithms 2 and 3 -----

    /// Sends the multicast's messages, then hands its deliveries to the termination queue and
    /// acts on what that decides.
    fn absorb(&mut self, sends: Vec<(ProcessId, Msg)>, delivered: Vec<Delivery<Term>>, out: &mut Vec<Effect<GDur>>, charge: &mut Duration) {
        {
            let mut d = self.durable.borrow_mut();
            let cx = self.cx();
            for del in &delivered {
                d.delivered.insert(del.id);
                d.termination.deliver(&cx, del.payload.clone());
            }
            if let Multicast::Broadcast(ab) = &self.multicast {
                d.ab_next = ab.next();
            }
        }
        for (to, msg) in sends {
            out.push(Effect::Send { to, msg });
        }
        if !delivered.is_empty() {
            self.progress(out, charge);
        }
    }

    fn progress(&mut self, out: &mut Vec<Effect<GDur>>, charge: &mut Duration) {
        let actions = {
            let mut d = self.durable.borrow_mut();
            let d = &mut *d;
            let cx = self.cx();
            d.termination.progress(&cx, &mut *d.store)
        };
        for a in actions {
            match a {
                Action::Certified { keys } => *charge += self.setup.costs.certify_key * keys as u32,
                Action::Vote { txn, vote, to } => {
                    self.counters.votes_sent += to.len() as u64;
                    for p in to {
                        out.push(Effect::Send { to: p, msg: Msg::Vote { txn, group: self.group, vote } });
                    }
                    // The proxy here takes its own replica's vote too.
                    self.proxy_vote(txn, self.group, vote, out);
                }
                Action::Committed { term, applied, stamp } => {
                    let txn = term.id;
                    self.installed(term, applied, stamp, out, charge);
                    self.tell_proxy(txn, true, out);
                }
                Action::Aborted { txn } => self.tell_proxy(txn, false, out),
            }
        }
    }

    /// Records `term`'s writes `applied` to this replica's store at `stamp`: the install log's
    /// entry and the checker's list of commits.
    fn installed(&mut self, term: Term, applied: Vec<(Key, Value)>, stamp: u64, out: &mut Vec<Effect<GDur>>, charge: &mut Duration) {
        *charge += self.setup.costs.apply_write * applied.len() as u32;
        let job = Installed { stamp, txn: term.id, reads: term.reads.clone(), writes: applied };
        out.push(Effect::Storage { work: WorkId(stamp), job, cost: Duration::ZERO });
        self.durable.borrow_mut().committed.push(term);
    }

    // ----- atomic commitment by 2PC: Algorithm 4 -----

    /// Acts on what the 2PC component produced: decisions (a participant applies a commit, a
    /// coordinator answers its client), certification on PREPARE (whose vote may produce more),
    /// messages.
    fn absorb_commit(&mut self, first: CommitOutput<Term>, out: &mut Vec<Effect<GDur>>, charge: &mut Duration) {
        let mut outputs = VecDeque::from([first]);
        while let Some(o) = outputs.pop_front() {
            for d in o.decided {
                self.commit_decided(d, out, charge);
            }
            for r in o.vote_requests {
                let local = |k: Key| self.setup.layout.group_replicates(self.group, k);
                let yes = self.setup.realization.certify(&r.payload, &*self.durable.borrow().store, &local);
                *charge += self.setup.costs.certify_key * r.payload.read_keys().filter(|&k| local(k)).count() as u32;
                self.counters.certified_on_prepare += 1;
                if yes {
                    self.durable.borrow_mut().prepared.insert(r.txn, r.payload);
                }
                let Multicast::TwoPhase(tpc) = &mut self.multicast else { unreachable!("vote requests come from 2PC") };
                match tpc.vote(r.txn, yes) {
                    Ok(more) => outputs.push_back(more),
                    Err(e) => self.commit_failed(e, self.me, out),
                }
            }
            for (to, m) in o.sends {
                out.push(Effect::Send { to, msg: Msg::Tpc(m) });
            }
        }
    }

    fn commit_decided(&mut self, d: Decided, out: &mut Vec<Effect<GDur>>, charge: &mut Duration) {
        match d.role {
            Role::Participant => {
                let term = self.durable.borrow_mut().prepared.remove(&d.txn);
                if !d.commit {
                    return;
                }
                let Some(term) = term else {
                    self.failure = Some(format!("{}: 2PC committed {} but no term was prepared for it", self.me, d.txn));
                    return;
                };
                let writes: Vec<(Key, Value)> =
                    term.writes.iter().filter(|(k, _)| self.setup.layout.group_replicates(self.group, *k)).cloned().collect();
                let stamp = self.durable.borrow_mut().store.apply(term.id, &writes);
                self.installed(term, writes, stamp, out, charge);
            }
            // A coordinator rebuilt after a crash aborts what it had begun (presumed abort);
            // those transactions' clients are gone with its volatile state.
            Role::Coordinator => {
                if let Some(id) = self.coordinated.remove(&d.txn) {
                    self.decided_at_proxy(id, d.commit, out);
                }
            }
        }
    }

    /// A 2PC call failed: a refused message is reported and changes nothing; a failed log stops
    /// the process.
    fn commit_failed(&mut self, e: CommitError, from: ProcessId, out: &mut Vec<Effect<GDur>>) {
        match e {
            CommitError::Refused(r) => self.refuse(from, r.to_string(), out),
            other => self.failure = Some(format!("{}: {other}", self.me)),
        }
    }

    /// A write replica's decision goes to the proxy (P-Store: "if s ∈ WReplicas(T), send the
    /// outcome to Proxy(T)").
    fn tell_proxy(&mut self, txn: TxnId, commit: bool, out: &mut Vec<Effect<GDur>>) {
        if txn.proxy() == self.me {
            self.decided_at_proxy(txn, commit, out);
        } else {
            out.push(Effect::Send { to: txn.proxy(), msg: Msg::Outcome { txn, commit } });
        }
    }

    fn on_message(&mut self, now: Time, from: ProcessId, msg: Msg, out: &mut Vec<Effect<GDur>>, charge: &mut Duration) {
        let layout = self.setup.layout.clone();
        match msg {
            Msg::ReadReq { txn, key } => {
                if !layout.replicates(self.me, key) {
                    return self.refuse(from, format!("ReadReq for key {key} of {txn}: {} does not replicate it", self.me), out);
                }
                let version = self.durable.borrow().store.read(key, self.setup.realization.read_rule());
                *charge += self.setup.costs.read;
                self.counters.served_reads += 1;
                // A rule that finds no version (GC'd snapshot) leaves the proxy to retry and
                // abort; P-Store's choose_last always finds one.
                if let Some(version) = version {
                    out.push(Effect::Send { to: from, msg: Msg::ReadReply { txn, key, version } });
                }
            }
            Msg::ReadReply { txn, key, version } => {
                let Some(e) = self.executing.get_mut(&txn) else { return };
                if e.pending.as_ref().map(|p| p.key) != Some(key) {
                    return; // a late answer to an earlier attempt
                }
                if !layout.groups_of(key).iter().any(|g| layout.directory().members(*g).contains(&from)) {
                    return self.refuse(from, format!("ReadReply for key {key} of {txn} from a process that does not replicate it"), out);
                }
                e.pending = None;
                e.reads.push(ReadRecord { key, number: version.number, writer: version.writer });
                e.seen.insert(key, version.value);
                self.run(now, txn, Some((key, version.value)), out, charge);
            }
            Msg::Vote { txn, group, vote } => {
                if layout.group_of(from) != Some(group) {
                    return self.refuse(from, format!("Vote on {txn} for group {} from {from}, not one of its members", group.0), out);
                }
                self.durable.borrow_mut().termination.vote(txn, group, vote);
                self.proxy_vote(txn, group, vote, out);
                self.progress(out, charge);
            }
            Msg::VoteReq { txn } => {
                if let Some(vote) = self.durable.borrow().termination.my_vote(txn) {
                    out.push(Effect::Send { to: from, msg: Msg::Vote { txn, group: self.group, vote } });
                }
            }
            Msg::Outcome { txn, commit } => {
                if txn.proxy() != self.me {
                    return self.refuse(from, format!("Outcome of {txn} sent to {}, not its proxy", self.me), out);
                }
                self.decided_at_proxy(txn, commit, out);
            }
            Msg::OutcomeReq { txn } => {
                let d = self.durable.borrow();
                if let Some(commit) = d.termination.outcome(txn) {
                    out.push(Effect::Send { to: from, msg: Msg::Outcome { txn, commit } });
                } else if let Some(vote) = d.termination.my_vote(txn) {
                    out.push(Effect::Send { to: from, msg: Msg::Vote { txn, group: self.group, vote } });
                }
            }
            Msg::Gm(m) => {
                let Multicast::Genuine(gm) = &mut self.multicast else {
                    return self.refuse(from, "a genuine-multicast message in a run that does not multicast".into(), out);
                };
                match gm.on_message(from, m) {
                    Ok(o) => {
                        let sends = as_msgs(o.sends, Msg::Gm);
                        self.absorb(sends, o.delivered, out, charge);
                    }
                    Err(e) => self.refuse(from, e.to_string(), out),
                }
            }
            Msg::Tpc(m) => {
                let Multicast::TwoPhase(tpc) = &mut self.multicast else {
                    return self.refuse(from, "a 2PC message in a run whose atomic commitment is by group communication".into(), out);
                };
                match tpc.on_message(from, m) {
                    Ok(o) => self.absorb_commit(o, out, charge),
                    Err(e) => self.commit_failed(e, from, out),
                }
            }
            Msg::Ab(m) => {
                let Multicast::Broadcast(ab) = &mut self.multicast else {
                    return self.refuse(from, "an atomic-broadcast message in a run that does not broadcast".into(), out);
                };
                match ab.on_message(from, m) {
                    Ok(o) => {
                        let sends = as_msgs(o.sends, Msg::Ab);
                        self.absorb(sends, o.delivered, out, charge);
                    }
                    Err(e) => self.refuse(from, e.to_string(), out),
                }
            }
        }
    }

    fn refuse(&mut self, from: ProcessId, what: String, out: &mut Vec<Effect<GDur>>) {
        self.counters.refused += 1;
        out.push(Effect::Refuse { from, what });
    }

    fn tick(&mut self, now: Time, out: &mut Vec<Effect<GDur>>) {
        self.ticks += 1;
        // Re-armed about once a second, not at every tick: each setting is an event.
        if self.ticks.is_multiple_of(self.setup.timing.ticks(Duration::from_secs(1))) {
            for (id, after) in WATCHDOGS {
                out.push(Effect::SetTimer { id, after });
            }
            self.collect_garbage();
        }
        let (sends, delivered) = match &mut self.multicast {
            Multicast::Genuine(gm) => {
                let o = gm.tick();
                (as_msgs(o.sends, Msg::Gm), o.delivered)
            }
            Multicast::Broadcast(ab) => {
                let o = ab.tick();
                (as_msgs(o.sends, Msg::Ab), o.delivered)
            }
            Multicast::TwoPhase(tpc) => {
                // The component resends PREPAREs, decisions and blocked participants' votes; a
                // proxy's outcome is its own decision, so nothing else here needs asking.
                let ticked = tpc.tick();
                let mut charge = Duration::ZERO;
                match ticked {
                    Ok(o) => self.absorb_commit(o, out, &mut charge),
                    Err(e) => self.commit_failed(e, self.me, out),
                }
                return self.retry_reads(out);
            }
        };
        let mut charge = Duration::ZERO; // timers run without a core in the simulator
        self.absorb(sends, delivered, out, &mut charge);
        self.retry_reads(out);
        let timing = self.setup.timing.clone();
        // Outcomes not heard: ask the write replicas (or, for a query, the voters) again.
        let outcome_retry = timing.ticks(timing.outcome_retry);
        let layout = self.setup.layout.clone();
        for (id, s) in self.submitted.iter_mut() {
            if self.ticks - s.asked_tick < s.ask_wait {
                continue;
            }
            s.asked_tick = self.ticks;
            s.ask_wait = (s.ask_wait * 2).min(outcome_retry * MAX_OUTCOME_BACKOFF);
            self.counters.outcome_asks += 1;
            let targets = if s.term.read_only() {
                layout.directory().processes(&layout.groups_of_keys(s.vote_keys.iter().copied()))
            } else {
                layout.write_replicas(&s.term)
            };
            for p in targets.into_iter().filter(|&p| p != self.me) {
                out.push(Effect::Send { to: p, msg: Msg::OutcomeReq { txn: *id } });
            }
        }
        // Votes not heard by a write replica: ask the missing groups again.
        let missing = {
            let mut d = self.durable.borrow_mut();
            let cx = self.cx();
            d.termination.missing_votes(&cx, self.ticks.saturating_sub(outcome_retry))
        };
        for (txn, groups) in missing {
            self.counters.vote_asks += 1;
            for p in layout.directory().processes(&groups) {
                out.push(Effect::Send { to: p, msg: Msg::VoteReq { txn } });
            }
        }
        let _ = now;
    }

    /// Drops the versions no read can return any more. Under `choose_last` (every protocol
    /// here) a read, local or remote, returns the latest version and certification compares
    /// with the latest, so everything older than each key's latest is garbage. The per-key
    /// install order the checker reads is kept.
    fn collect_garbage(&mut self) {
        if self.setup.realization.read_rule() != ReadRule::Latest {
            return;
        }
        let mut d = self.durable.borrow_mut();
        let horizon = d.store.stamp();
        self.counters.versions_collected += d.store.collect_garbage(horizon) as u64;
    }

    /// Reads unanswered: the next replica (Algorithm 1: "retry at another replica").
    fn retry_reads(&mut self, out: &mut Vec<Effect<GDur>>) {
        let read_retry = self.setup.timing.ticks(self.setup.timing.read_retry);
        let mut resend = Vec::new();
        for (id, e) in self.executing.iter_mut() {
            if let Some(p) = e.pending.as_mut() {
                if self.ticks - p.sent_tick >= read_retry {
                    p.attempt += 1;
                    p.sent_tick = self.ticks;
                    resend.push((*id, p.key, p.attempt));
                }
            }
        }
        for (id, key, attempt) in resend {
            self.counters.read_retries += 1;
            let to = self.read_target(id, key, attempt);
            out.push(Effect::Send { to, msg: Msg::ReadReq { txn: id, key } });
        }
    }

    /// Persisted multicast state after a handler: the cast counter.
    fn persist(&mut self) {
        let seq = self.cast_seq();
        self.durable.borrow_mut().cast_seq = seq;
    }
}

impl Process<GDur> for Replica {
    fn id(&self) -> ProcessId {
        self.me
    }

    fn start(&mut self, now: Time, out: &mut Vec<Effect<GDur>>) {
        let first = self.ticker.start(now, tick_phase(self.setup.seed, self.me, self.setup.timing.tick));
        out.push(Effect::SetTimer { id: TICK, after: first });
        for (id, after) in WATCHDOGS {
            out.push(Effect::SetTimer { id, after });
        }
        if let Some(resumed) = self.recovered.take() {
            let mut charge = Duration::ZERO;
            self.absorb_commit(resumed, out, &mut charge);
        }
    }

    fn on_event(&mut self, now: Time, event: Event<GDur>, out: &mut Vec<Effect<GDur>>) {
        let mut charge = Duration::ZERO;
        let before = out.len();
        if !matches!(event, Event::Timer(TICK)) && self.ticker.lost(now) {
            out.push(Effect::SetTimer { id: TICK, after: self.ticker.fired(now) });
            self.tick(now, out);
        }
        match event {
            Event::Request(r) => self.on_request(now, r, out, &mut charge),
            Event::Message { from, msg } => self.on_message(now, from, msg, out, &mut charge),
            Event::Timer(TICK) => {
                let next = self.ticker.fired(now);
                out.push(Effect::SetTimer { id: TICK, after: next });
                self.tick(now, out);
            }
            Event::Timer(_) => {}
            Event::StorageDone { .. } => {}
        }
        self.persist();
        for e in &out[before..] {
            if let Effect::Send { msg, .. } = e {
                *self.sent.entry(msg.kind()).or_default() += 1;
            }
        }
        if charge > Duration::ZERO {
            out.push(Effect::Charge(charge));
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.counters;
        let d = self.durable.borrow();
        let mut counters = vec![
            ("committed", c.committed),
            ("aborted", c.aborted),
            ("local_reads", c.local_reads),
            ("remote_reads", c.remote_reads),
            ("read_retries", c.read_retries),
            ("served_reads", c.served_reads),
            ("votes_sent", c.votes_sent),
            ("outcome_asks", c.outcome_asks),
            ("vote_asks", c.vote_asks),
            ("refused", c.refused),
            ("versions_collected", c.versions_collected),
            ("queued", d.termination.queued() as u64),
            ("waited_for_certifier", d.termination.waited_for_certifier),
            ("waited_for_conflict", d.termination.waited_for_conflict),
        ];
        if let Multicast::TwoPhase(tpc) = &self.multicast {
            let t = tpc.counters();
            counters.extend([
                ("certified_on_prepare", c.certified_on_prepare),
                ("preemptive_aborts", t.preemptive_aborts),
                ("prepares_resent", t.prepares_resent),
                ("decisions_resent", t.decisions_resent),
                ("votes_resent", t.votes_resent),
                ("recovery_aborts", t.recovery_aborts),
            ]);
        }
        counters.extend(self.sent.iter().map(|(k, n)| (*k, *n)));
        counters
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone().or_else(|| match &self.multicast {
            Multicast::Genuine(gm) => gm.failure(),
            Multicast::Broadcast(ab) => ab.failure(),
            Multicast::TwoPhase(tpc) => tpc.failure(),
        })
    }

    fn quiescent(&self) -> bool {
        let casting = match &self.multicast {
            Multicast::Genuine(gm) => gm.casting(),
            Multicast::Broadcast(ab) => ab.casting(),
            Multicast::TwoPhase(tpc) => tpc.pending(),
        };
        self.executing.is_empty() && self.submitted.is_empty() && casting == 0 && self.durable.borrow().termination.queued() == 0
    }
}
