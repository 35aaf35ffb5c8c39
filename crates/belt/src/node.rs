use ensemble_app::{
    Application, ExecRole, InstanceId, OpClass, PartitionPlan, Position, RowAccess, StateUpdate, StorageJob, StorageResult,
    TablePlacement,
};
use ensemble_core::topology::Cpu;
use ensemble_core::{
    Done, Effect, Event, Process, ProcessId, Protocol, Reply, ReplyBody, Request, RequestError, Time, TimerId, WorkId,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// How the token holder runs its snapshot Q′ of global requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GlobalExecution {
    /// All of Q′ at once (Eliá §5). Correct only on engines whose commit order equals their
    /// serialization order; the storage reports each global's sequence number from inside its
    /// transaction and the token takes updates in that order.
    Parallel,
    /// One after the other, as Algorithm 2 is written: for any serializable engine.
    Sequential,
}

/// The Conveyor Belt's type family for the drivers.
#[derive(Debug)]
pub struct Belt;

impl Protocol for Belt {
    type Msg = Message;
    type Job = StorageJob;
    type JobResult = StorageResult;
    type Evidence = BeltEvidence;
}

/// What a belt reply says about the operation: how it was coordinated, where it ran, where it
/// sits in the proof's serial order, and (when the run records histories) the rows it read and
/// wrote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BeltEvidence {
    pub class: OpClass,
    pub instance: InstanceId,
    pub position: Position,
    #[serde(default)]
    pub access: Option<RowAccess>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BeltConfig {
    pub instances: u32,
    pub global_execution: GlobalExecution,
    /// How long the token may rest at an instance when it brings nothing and nothing waits.
    /// Zero keeps the belt moving at network speed (the simulator's default); a real deployment
    /// on loopback uses a short pause so an idle ring does not spin a core.
    pub idle_pause: Duration,
    /// What storage work costs on a simulated core (the topology's CPU model): a transaction
    /// by its type, applying a state update by its row changes.
    pub costs: Cpu,
}

/// ⟨u, q⟩: the state update of the `seq`-th global operation, executed at `origin`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenEntry {
    pub seq: u64,
    pub origin: InstanceId,
    pub update: StateUpdate,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Token {
    /// Times the token has been passed; names a token visit in traces.
    pub hops: u64,
    /// Global operations executed so far, in all (the sequence number of the newest entry).
    pub globals: u64,
    pub entries: Vec<TokenEntry>,
}

/// Messages between instances.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Message {
    Token(Token),
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BeltStats {
    pub tokens_received: u64,
    pub updates_applied: u64,
    pub globals_executed: u64,
    pub locals_executed: u64,
    pub maps_sent: u64,
    pub rejected: u64,
    /// Largest snapshot Q′ executed in one token visit.
    pub max_batch: u64,
}

enum Pending {
    /// A commutative or local request.
    Op { request: Request, class: OpClass },
    /// The token holder's batch of others' updates.
    Apply,
    /// A global request of the current snapshot.
    Global { request: Request },
}

/// What the token holder is doing.
enum Holding {
    /// Applying the others' updates.
    Applying,
    /// Running Q′: `waiting` not yet started (sequential mode), `running` in storage, `done`
    /// results keyed by the sequence number the database gave them.
    Executing { waiting: VecDeque<Request>, running: usize, done: BTreeMap<u64, StateUpdate> },
    /// Resting with an idle token until `timer` fires or a global request arrives. A ring of
    /// one rests without a timer: there is nobody to pass the token to.
    Resting { timer: Option<TimerId> },
}

/// One instance's Conveyor Belt.
pub struct ConveyorBelt {
    id: InstanceId,
    cfg: BeltConfig,
    app: Arc<Application>,
    plan: Arc<PartitionPlan>,
    /// Q: global requests waiting for the token.
    queue: VecDeque<Request>,
    token: Option<(Token, Holding)>,
    pending: BTreeMap<WorkId, Pending>,
    next_work: u64,
    next_timer: u64,
    /// Set when replicas diverged: the belt stops rather than spread the damage.
    halted: Option<String>,
    stats: BeltStats,
}

impl ConveyorBelt {
    /// `plan` must have been validated against `app` and `cfg.instances`.
    pub fn new(id: InstanceId, cfg: BeltConfig, app: Arc<Application>, plan: Arc<PartitionPlan>) -> Self {
        assert!(id.0 < cfg.instances, "instance {id} outside a ring of {}", cfg.instances);
        ConveyorBelt {
            id,
            cfg,
            app,
            plan,
            queue: VecDeque::new(),
            token: None,
            pending: BTreeMap::new(),
            next_work: 0,
            next_timer: 0,
            halted: None,
            stats: BeltStats::default(),
        }
    }

    pub fn stats(&self) -> &BeltStats {
        &self.stats
    }

    pub fn halted(&self) -> Option<&str> {
        self.halted.as_deref()
    }

    /// Global requests waiting for the token.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    fn work(&mut self, pending: Pending, job: StorageJob, out: &mut Vec<Effect<Belt>>) {
        let work = WorkId(self.next_work);
        self.next_work += 1;
        self.pending.insert(work, pending);
        let cost = match &job {
            StorageJob::Execute { request, .. } => self.cfg.costs.execute_time(&request.txn),
            StorageJob::Apply { updates, .. } => self.cfg.costs.apply_time(updates.iter().map(|u| u.changes.len()).sum()),
        };
        out.push(Effect::Storage { work, job, cost });
    }

    fn reply(&self, request: &Request, body: ReplyBody<BeltEvidence>, out: &mut Vec<Effect<Belt>>) {
        out.push(Effect::Reply { to: request.client, reply: Reply { client: request.client, seq: request.seq, body } });
    }

    fn refuse(&mut self, request: &Request, e: RequestError, out: &mut Vec<Effect<Belt>>) {
        self.stats.rejected += 1;
        self.reply(request, ReplyBody::Error(e), out);
    }

    /// Algorithm 2, lines 1–9.
    fn on_request(&mut self, request: Request, out: &mut Vec<Effect<Belt>>) {
        if let Err(e) = self.app.check_request(&request) {
            return self.refuse(&request, e, out);
        }
        let route = match self.plan.route(&self.app, &request, self.cfg.instances) {
            Ok(r) => r,
            Err(e) => return self.refuse(&request, e, out),
        };
        if let Some(owner) = route.instance.filter(|i| *i != self.id) {
            self.stats.maps_sent += 1;
            return self.reply(&request, ReplyBody::Redirect { to: owner.process() }, out);
        }
        match route.class {
            OpClass::Commutative | OpClass::Local => {
                let job = StorageJob::Execute { request: request.clone(), role: ExecRole::Local };
                self.work(Pending::Op { request, class: route.class }, job, out);
            }
            OpClass::Global => {
                if let Some(msg) = &self.halted {
                    let e = RequestError::Storage { txn: request.txn.clone(), message: format!("the belt is halted: {msg}") };
                    return self.refuse(&request, e, out);
                }
                self.queue.push_back(request);
                // An idle token resting here takes the request at once.
                if matches!(self.token, Some((_, Holding::Resting { .. }))) {
                    self.run_snapshot(out);
                }
            }
        }
    }

    /// Algorithm 2, lines 10–15: drop our own entries, apply the others'.
    fn on_token(&mut self, mut token: Token, out: &mut Vec<Effect<Belt>>) {
        self.stats.tokens_received += 1;
        token.hops += 1;
        // Our own entries are the oldest: every other instance has applied them since our last turn.
        let own = token.entries.iter().take_while(|e| e.origin == self.id).count();
        token.entries.drain(..own);
        assert!(
            token.entries.iter().all(|e| e.origin != self.id),
            "instance {}: own token entries after others' (token order broken)",
            self.id
        );
        if token.entries.is_empty() {
            self.token = Some((token, Holding::Applying));
            return self.run_snapshot(out);
        }
        let first_seq = token.entries[0].seq;
        let updates: Vec<StateUpdate> = token.entries.iter().map(|e| self.held_part(&e.update)).collect();
        self.stats.updates_applied += updates.len() as u64;
        self.token = Some((token, Holding::Applying));
        self.work(Pending::Apply, StorageJob::Apply { first_seq, updates }, out);
    }

    /// The changes of `update` to tables this instance holds. Rows of partitioned tables live
    /// only at their partition's instance, which is the one that ran the global operation.
    fn held_part(&self, update: &StateUpdate) -> StateUpdate {
        StateUpdate {
            writer: update.writer,
            changes: update
                .changes
                .iter()
                .filter(|c| !matches!(self.plan.placement(&c.table), Some(TablePlacement::Partitioned { .. })))
                .cloned()
                .collect(),
        }
    }

    /// Algorithm 2, lines 16–21: take the atomic snapshot Q′ and run it.
    fn run_snapshot(&mut self, out: &mut Vec<Effect<Belt>>) {
        let snapshot: VecDeque<Request> = std::mem::take(&mut self.queue);
        if snapshot.is_empty() {
            return self.rest_or_pass(out);
        }
        self.stats.max_batch = self.stats.max_batch.max(snapshot.len() as u64);
        let (token, _) = self.token.take().expect("holding the token");
        self.token = Some((token, Holding::Executing { waiting: snapshot, running: 0, done: BTreeMap::new() }));
        self.start_globals(out);
    }

    fn start_globals(&mut self, out: &mut Vec<Effect<Belt>>) {
        let parallel = self.cfg.global_execution == GlobalExecution::Parallel;
        let mut jobs = Vec::new();
        if let Some((_, Holding::Executing { waiting, running, .. })) = &mut self.token {
            while let Some(request) = waiting.front() {
                if !parallel && *running > 0 {
                    break;
                }
                let request = request.clone();
                waiting.pop_front();
                *running += 1;
                jobs.push(request);
            }
        }
        for request in jobs {
            let job = StorageJob::Execute { request: request.clone(), role: ExecRole::Global };
            self.work(Pending::Global { request }, job, out);
        }
    }

    fn rest_or_pass(&mut self, out: &mut Vec<Effect<Belt>>) {
        let (token, holding) = self.token.as_mut().expect("holding the token");
        let brought_nothing = token.entries.iter().all(|e| e.origin == self.id);
        if !self.cfg.idle_pause.is_zero() && brought_nothing && !matches!(holding, Holding::Resting { .. }) {
            let timer = TimerId(self.next_timer);
            self.next_timer += 1;
            *holding = Holding::Resting { timer: Some(timer) };
            out.push(Effect::SetTimer { id: timer, after: self.cfg.idle_pause });
            return;
        }
        self.pass_token(out);
    }

    /// Algorithm 2, line 22. A ring of one keeps the token and waits for the next global request.
    fn pass_token(&mut self, out: &mut Vec<Effect<Belt>>) {
        let (token, _) = self.token.take().expect("holding the token");
        let next = InstanceId((self.id.0 + 1) % self.cfg.instances);
        if next == self.id {
            self.token = Some((token, Holding::Resting { timer: None }));
        } else {
            out.push(Effect::Send { to: next.process(), msg: Message::Token(token) });
        }
    }

    fn on_storage(&mut self, work: WorkId, result: StorageResult, out: &mut Vec<Effect<Belt>>) {
        let Some(pending) = self.pending.remove(&work) else {
            panic!("instance {}: completion for unknown work {work:?}", self.id);
        };
        match pending {
            Pending::Op { request, class } => {
                self.stats.locals_executed += 1;
                let body = match result {
                    StorageResult::Executed { outcome, position, access, .. } => {
                        ReplyBody::Done(Done { outcome, evidence: BeltEvidence { class, instance: self.id, position, access } })
                    }
                    StorageResult::Rejected(e) => ReplyBody::Error(e),
                    other => ReplyBody::Error(RequestError::Storage { txn: request.txn.clone(), message: failure_text(&other) }),
                };
                self.reply(&request, body, out);
            }
            Pending::Apply => match result {
                StorageResult::Applied { .. } => self.run_snapshot(out),
                other => {
                    // Replicas diverged: keep the token so no instance builds on the damage.
                    self.halted = Some(failure_text(&other));
                    for request in std::mem::take(&mut self.queue) {
                        let e = RequestError::Storage { txn: request.txn.clone(), message: failure_text(&other) };
                        self.refuse(&request, e, out);
                    }
                }
            },
            Pending::Global { request } => {
                self.stats.globals_executed += 1;
                match result {
                    StorageResult::Executed { outcome, update, position: Position::Global { seq }, access } => {
                        if let Some((_, Holding::Executing { running, done, .. })) = &mut self.token {
                            *running -= 1;
                            done.insert(seq, update);
                        }
                        let evidence =
                            BeltEvidence { class: OpClass::Global, instance: self.id, position: Position::Global { seq }, access };
                        let body = ReplyBody::Done(Done { outcome, evidence });
                        self.reply(&request, body, out);
                    }
                    other => {
                        if let Some((_, Holding::Executing { running, .. })) = &mut self.token {
                            *running -= 1;
                        }
                        let e = match other {
                            StorageResult::Rejected(e) => e,
                            other => RequestError::Storage { txn: request.txn.clone(), message: failure_text(&other) },
                        };
                        self.refuse(&request, e, out);
                    }
                }
                self.start_globals(out);
                self.finish_snapshot_if_done(out);
            }
        }
    }

    /// Appends the snapshot's updates in the order the database serialized them, then passes on.
    fn finish_snapshot_if_done(&mut self, out: &mut Vec<Effect<Belt>>) {
        let finished = matches!(&self.token, Some((_, Holding::Executing { waiting, running: 0, .. })) if waiting.is_empty());
        if !finished {
            return;
        }
        let (mut token, holding) = self.token.take().expect("checked");
        let Holding::Executing { done, .. } = holding else { unreachable!() };
        for (seq, update) in done {
            assert_eq!(
                seq,
                token.globals + 1,
                "instance {}: the database serialized global {seq} but the token is at {}",
                self.id,
                token.globals
            );
            token.globals = seq;
            token.entries.push(TokenEntry { seq, origin: self.id, update });
        }
        self.token = Some((token, Holding::Applying));
        self.pass_token(out);
    }

    fn on_timer(&mut self, id: TimerId, out: &mut Vec<Effect<Belt>>) {
        match &self.token {
            Some((_, Holding::Resting { timer: Some(timer) })) if *timer == id => self.pass_token(out),
            // A pause that a global request cut short.
            _ => {}
        }
    }
}

fn failure_text(r: &StorageResult) -> String {
    match r {
        StorageResult::Failed(m) => m.clone(),
        StorageResult::Rejected(e) => e.to_string(),
        other => format!("unexpected storage result {other:?}"),
    }
}

impl Process<Belt> for ConveyorBelt {
    fn id(&self) -> ProcessId {
        self.id.process()
    }

    /// Instance 0 creates the token.
    fn start(&mut self, _now: Time, out: &mut Vec<Effect<Belt>>) {
        if self.id.0 == 0 {
            self.on_token(Token { hops: 0, globals: 0, entries: vec![] }, out);
        }
    }

    fn on_event(&mut self, _now: Time, event: Event<Belt>, out: &mut Vec<Effect<Belt>>) {
        match event {
            Event::Request(r) => self.on_request(r, out),
            Event::Message { msg: Message::Token(t), .. } => self.on_token(t, out),
            Event::Timer(id) => self.on_timer(id, out),
            Event::StorageDone { work, result } => self.on_storage(work, result, out),
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = &self.stats;
        vec![
            ("tokens_received", s.tokens_received),
            ("updates_applied", s.updates_applied),
            ("globals_executed", s.globals_executed),
            ("locals_executed", s.locals_executed),
            ("maps_sent", s.maps_sent),
            ("rejected", s.rejected),
            ("max_batch", s.max_batch),
        ]
    }

    fn failure(&self) -> Option<String> {
        self.halted.clone()
    }
}
