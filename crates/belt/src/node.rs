use ensemble_app::{
    Application, ChangeKind, ExecRole, InstanceId, OpClass, PartitionPlan, Position, RowAccess, RowChange, StateUpdate, StorageJob,
    StorageResult, TablePlacement,
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
    /// Tokens taken (refused ones are not counted here).
    pub tokens_received: u64,
    /// Token messages refused as breaking an invariant of a genuine token ([`ConveyorBelt`]'s
    /// `check_token`).
    pub tokens_refused: u64,
    pub updates_applied: u64,
    pub globals_executed: u64,
    pub locals_executed: u64,
    pub maps_sent: u64,
    pub rejected: u64,
    /// Largest snapshot Q′ executed in one token visit.
    pub max_batch: u64,
    /// Times the database server chose one of this instance's transactions (or state-update
    /// applications) as the victim of a serialization failure or deadlock, or dropped its
    /// connection before it committed, and the storage ran it again. Always 0 on SQLite.
    pub storage_retries: u64,
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

/// The token as this instance last let it go: what a genuine token must continue when it comes
/// back after a round of the ring.
#[derive(Clone, Copy, Debug)]
struct LastTurn {
    /// Hops when passed on; the others each add one before it is back.
    hops: u64,
    /// Global operations this instance has executed or applied, as its database counts them.
    globals: u64,
    /// State updates this instance appended: they travel until it sees them again.
    own: usize,
    /// The token carried no entry at all: every state update it ever carried had gone round.
    empty: bool,
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
    /// `None` until this instance first lets the token go; its database is fresh until then.
    last_turn: Option<LastTurn>,
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
            last_turn: None,
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

    /// The token, while this instance holds it (applying, executing, resting, or halted).
    pub fn token(&self) -> Option<&Token> {
        self.token.as_ref().map(|(t, _)| t)
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

    /// Whether a token received from `from` can be the genuine one, as Algorithm 2 moves it;
    /// `Err` says which invariant it breaks. A token that breaks none is taken; one that breaks
    /// any is refused whole, since a single bad entry applied or dropped would make this replica
    /// diverge for good. The invariants, all kept by every genuine token:
    ///
    /// 1. It comes from the ring predecessor, instance `id − 1 mod n` (line 22 passes it to the
    ///    successor only); a ring of one never receives one, its token never leaves it.
    /// 2. This instance does not hold the token already: a second token breaks the mutual
    ///    exclusion that totally orders global operations.
    /// 3. The hop count can still be incremented, and is at least `n − 1` more than when this
    ///    instance passed it: every other instance took it once in between.
    /// 4. Every entry's origin is an instance of the ring.
    /// 5. This instance's own entries, if any, come first (lines 11–13 drop them from the head):
    ///    they are older than anything appended since its last turn.
    /// 6. The others' entries come in ring order from the successor on: each instance appended
    ///    its own after the previous one's.
    /// 7. Sequence numbers strictly increase by one from entry to entry, and the last equals
    ///    `globals`, the number of the newest global operation.
    /// 8. `globals` never goes back from what it was on this instance's last turn (0 for a
    ///    fresh database).
    /// 9. Own entries are exactly as many as this instance appended on its last turn: an entry
    ///    leaves the token only at its origin.
    /// 10. The others' entries are exactly the global operations this instance has not seen:
    ///     `globals` grew by their number since its last turn, so (with 7 and 9) they start
    ///     right after it. Otherwise the `Apply` job would skip or repeat a state update.
    /// 11. Every row change of every state update names a table of the application; an insert
    ///     gives every column of the table once, an update or a delete names its row by exactly
    ///     the primary key, and every column named exists and is named once. These are what a
    ///     storage needs to apply the change by primary key; a change that passes them can still
    ///     fail to apply (no such row), which halts the belt, as it should: only a replica that
    ///     diverged, or a forger that knows the schema, can make one.
    ///
    /// What no instance can tell alone: a token that leaves out the newest state updates and
    /// lowers `globals` to match looks genuine to its receiver. The origin of a missing update
    /// refuses the token when it comes back (9), so the ring stops rather than diverges.
    fn check_token(&self, from: ProcessId, token: &Token) -> Result<(), String> {
        let n = self.cfg.instances;
        if n == 1 {
            return Err("a ring of one never passes its token".into());
        }
        let predecessor = InstanceId((self.id.0 + n - 1) % n).process();
        if from != predecessor {
            return Err(format!("sent by {from}, not by the ring predecessor {predecessor}"));
        }
        if self.token.is_some() {
            return Err("a second token: this instance holds the token".into());
        }
        if token.hops == u64::MAX {
            return Err("its hop count cannot grow".into());
        }
        let last = self.last_turn.unwrap_or(LastTurn { hops: 0, globals: 0, own: 0, empty: true });
        if let Some(turn) = &self.last_turn {
            let least = turn.hops.saturating_add(u64::from(n) - 1);
            if token.hops < least {
                return Err(format!("{} hops, but this instance passed the token at hop {}: a round takes {} more", token.hops, turn.hops, n - 1));
            }
        }
        if let Some((i, e)) = token.entries.iter().enumerate().find(|(_, e)| e.origin.0 >= n) {
            return Err(format!("entry {i} (global {}) comes from {}, outside the ring of {n}", e.seq, e.origin));
        }
        let own = token.entries.iter().take_while(|e| e.origin == self.id).count();
        let others = &token.entries[own..];
        if let Some(e) = others.iter().find(|e| e.origin == self.id) {
            return Err(format!("this instance's entry for global {} comes after others' entries", e.seq));
        }
        let distance = |e: &TokenEntry| (e.origin.0 + n - self.id.0) % n;
        if let Some(w) = others.windows(2).find(|w| distance(&w[1]) < distance(&w[0])) {
            return Err(format!("the entry of {} (global {}) follows that of {}, against the ring order", w[1].origin, w[1].seq, w[0].origin));
        }
        if let Some(w) = token.entries.windows(2).find(|w| w[0].seq.checked_add(1) != Some(w[1].seq)) {
            return Err(format!("global {} follows global {}: sequence numbers must go up by one", w[1].seq, w[0].seq));
        }
        if let Some(e) = token.entries.last().filter(|e| e.seq != token.globals) {
            return Err(format!("the newest entry is global {}, but the token counts {} globals", e.seq, token.globals));
        }
        if token.globals < last.globals {
            return Err(format!("{} globals, fewer than the {} of this instance's last turn", token.globals, last.globals));
        }
        if own != last.own {
            return Err(format!("{own} entries of this instance, which appended {} on its last turn", last.own));
        }
        if token.globals - last.globals != others.len() as u64 {
            return Err(format!(
                "{} globals, {} since this instance's last turn at {}, but {} state updates of others to apply",
                token.globals,
                token.globals - last.globals,
                last.globals,
                others.len()
            ));
        }
        for e in &token.entries {
            for (k, c) in e.update.changes.iter().enumerate() {
                self.check_change(c).map_err(|m| format!("global {} from {}, row change {k}: {m}", e.seq, e.origin))?;
            }
        }
        Ok(())
    }

    /// Invariant 11 of [`Self::check_token`] for one row change.
    fn check_change(&self, c: &RowChange) -> Result<(), String> {
        let Some(table) = self.app.table(&c.table) else {
            return Err(format!("no table `{}` in application `{}`", c.table, self.app.name));
        };
        let named = |cols: &[(String, ensemble_core::Value)], what: &str| -> Result<(), String> {
            for (i, (col, _)) in cols.iter().enumerate() {
                if !table.has_column(col) {
                    return Err(format!("{what}: table `{}` has no column `{col}`", table.name));
                }
                if cols[..i].iter().any(|(c, _)| c == col) {
                    return Err(format!("{what}: column `{col}` named twice"));
                }
            }
            Ok(())
        };
        let by_key = |key: &[(String, ensemble_core::Value)], what: &str| -> Result<(), String> {
            named(key, what)?;
            if key.len() != table.primary_key.len() || !table.primary_key.iter().all(|pk| key.iter().any(|(c, _)| c == pk)) {
                let names: Vec<&str> = key.iter().map(|(c, _)| c.as_str()).collect();
                return Err(format!("{what} by ({}), not by the primary key ({}) of `{}`", names.join(", "), table.primary_key.join(", "), table.name));
            }
            Ok(())
        };
        match &c.kind {
            ChangeKind::Insert { row } => {
                named(row, "insert")?;
                if row.len() != table.columns.len() {
                    return Err(format!("insert of {} columns into `{}`, which has {}", row.len(), table.name, table.columns.len()));
                }
                Ok(())
            }
            ChangeKind::Update { key, set } => {
                by_key(key, "update")?;
                named(set, "update")
            }
            ChangeKind::Delete { key } => by_key(key, "delete"),
        }
    }

    /// Algorithm 2, lines 10–15: drop our own entries, apply the others'. The token is genuine
    /// ([`Self::check_token`], or created by instance 0 at start).
    fn on_token(&mut self, mut token: Token, out: &mut Vec<Effect<Belt>>) {
        self.stats.tokens_received += 1;
        token.hops += 1;
        // Our own entries are the oldest: every other instance has applied them since our last turn.
        let own = token.entries.iter().take_while(|e| e.origin == self.id).count();
        token.entries.drain(..own);
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
        let (mut token, _) = self.token.take().expect("holding the token");
        let next = InstanceId((self.id.0 + 1) % self.cfg.instances);
        if next == self.id {
            // The token never comes back to drop our entries (lines 11–13), yet they have been
            // applied at every instance of the ring: here. Kept, they would pile up forever.
            token.entries.clear();
        }
        self.last_turn = Some(LastTurn {
            hops: token.hops,
            globals: token.globals,
            own: token.entries.iter().filter(|e| e.origin == self.id).count(),
            empty: token.entries.is_empty(),
        });
        if next == self.id {
            self.token = Some((token, Holding::Resting { timer: None }));
            // Globals that arrived while this snapshot ran: a ring of one has no next visit of
            // the token to wait for, so the next snapshot is taken now.
            if !self.queue.is_empty() {
                self.run_snapshot(out);
            }
        } else {
            out.push(Effect::Send { to: next.process(), msg: Message::Token(token) });
        }
    }

    fn on_storage(&mut self, work: WorkId, result: StorageResult, out: &mut Vec<Effect<Belt>>) {
        // Only the driver hands out completions, and only for work this instance asked for: no
        // message reaches this, so an unknown one is a driver bug worth a panic.
        let Some(pending) = self.pending.remove(&work) else {
            panic!("instance {}: completion for unknown work {work:?}", self.id);
        };
        match pending {
            Pending::Op { request, class } => {
                self.stats.locals_executed += 1;
                let body = match result {
                    StorageResult::Executed { outcome, position, access, retries, .. } => {
                        self.stats.storage_retries += u64::from(retries);
                        ReplyBody::Done(Done { outcome, evidence: BeltEvidence { class, instance: self.id, position, access } })
                    }
                    StorageResult::Rejected(e) => ReplyBody::Error(e),
                    other => ReplyBody::Error(RequestError::Storage { txn: request.txn.clone(), message: failure_text(&other) }),
                };
                self.reply(&request, body, out);
            }
            Pending::Apply => match result {
                StorageResult::Applied { retries, .. } => {
                    self.stats.storage_retries += u64::from(retries);
                    self.run_snapshot(out)
                }
                other => self.halt(failure_text(&other), out),
            },
            Pending::Global { request } => {
                self.stats.globals_executed += 1;
                match result {
                    StorageResult::Executed { outcome, update, position: Position::Global { seq }, access, retries } => {
                        self.stats.storage_retries += u64::from(retries);
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

    /// Replicas diverged: keep the token so no instance builds on the damage, and refuse the
    /// global requests waiting for it (later ones are refused as they come).
    fn halt(&mut self, why: String, out: &mut Vec<Effect<Belt>>) {
        for request in std::mem::take(&mut self.queue) {
            let e = RequestError::Storage { txn: request.txn.clone(), message: format!("the belt is halted: {why}") };
            self.refuse(&request, e, out);
        }
        self.halted = Some(why);
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
            // The token's count is this database's (`check_token` saw to it that the token brought
            // exactly the globals it had not seen), so only the storage can break this: its
            // counter moved behind the belt's back. The updates cannot be ordered any more.
            if Some(seq) != token.globals.checked_add(1) {
                let why = format!("instance {}: the database serialized global {seq} but the token is at {}", self.id, token.globals);
                self.token = Some((token, Holding::Applying));
                return self.halt(why, out);
            }
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
            Event::Message { from, msg: Message::Token(t) } => match self.check_token(from, &t) {
                Ok(()) => self.on_token(t, out),
                Err(why) => {
                    self.stats.tokens_refused += 1;
                    let what = format!("token (hop {}, {} globals, {} entries): {why}", t.hops, t.globals, t.entries.len());
                    out.push(Effect::Refuse { from, what });
                }
            },
            Event::Timer(id) => self.on_timer(id, out),
            Event::StorageDone { work, result } => self.on_storage(work, result, out),
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = &self.stats;
        vec![
            ("tokens_received", s.tokens_received),
            ("tokens_refused", s.tokens_refused),
            ("updates_applied", s.updates_applied),
            ("globals_executed", s.globals_executed),
            ("locals_executed", s.locals_executed),
            ("maps_sent", s.maps_sent),
            ("rejected", s.rejected),
            ("max_batch", s.max_batch),
            ("storage_retries", s.storage_retries),
        ]
    }

    fn failure(&self) -> Option<String> {
        self.halted.clone()
    }

    /// No storage work pending, no global request waiting in Q, and the token this instance last
    /// let go (or holds now, resting) carried no entry at all; in a ring of one, no work and an
    /// empty Q.
    ///
    /// Why that is enough: once every instance says so after every client's last reply, every
    /// state update has been applied at every instance. A global's state update is appended to
    /// the token at its origin, which replied before passing the token on. An entry leaves the
    /// token only when its origin takes the token again after a full round (lines 11–13), and
    /// every other instance took it in that round and applied the entry before passing it on
    /// (the `Apply` completes before line 16). An instance lets an empty token go only once
    /// every entry it appended has been dropped that way, so its state updates are everywhere;
    /// as every instance says the same, all are. An instance that holds the token while applying
    /// or executing, or that halted with it, is not quiescent: a halted belt never is.
    fn quiescent(&self) -> bool {
        if !self.pending.is_empty() || !self.queue.is_empty() {
            return false;
        }
        if self.cfg.instances == 1 {
            return true;
        }
        match &self.token {
            Some((token, Holding::Resting { .. })) => token.entries.is_empty(),
            Some(_) => false,
            None => self.last_turn.is_none_or(|t| t.empty),
        }
    }

    fn in_flight(&self) -> Option<String> {
        if self.quiescent() {
            return None;
        }
        let jobs = |f: fn(&Pending) -> bool| self.pending.values().filter(|p| f(p)).count();
        let token = match &self.token {
            Some((t, Holding::Applying)) => format!("holds the token (hop {}), applying its entries", t.hops),
            Some((t, Holding::Executing { waiting, running, done })) => {
                format!("holds the token (hop {}), executing globals: {} waiting, {running} running, {} done", t.hops, waiting.len(), done.len())
            }
            Some((t, Holding::Resting { .. })) => format!("rests with the token (hop {}), {} entr(ies) on it", t.hops, t.entries.len()),
            None => match self.last_turn {
                Some(t) => format!("waits for the token, last let go at hop {} with {} of its own state updates on it", t.hops, t.own),
                None => "has not had the token yet".to_string(),
            },
        };
        Some(format!(
            "{token}; storage jobs: {} local or commutative, {} global, {} application of state updates; {} global request(s) queued",
            jobs(|p| matches!(p, Pending::Op { .. })),
            jobs(|p| matches!(p, Pending::Global { .. })),
            jobs(|p| matches!(p, Pending::Apply)),
            self.queue.len()
        ))
    }
}
