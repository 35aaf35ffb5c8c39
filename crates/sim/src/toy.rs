//! Small processes that exercise the simulator without a real protocol or database: a node that
//! passes tokens around a ring, pings other nodes on a timer and serves requests with one storage
//! job each; a storage that counts jobs; a closed-loop client. The simulator's tests and
//! benchmark use them, and protocol crates may use them to drive a simulation in their own tests.

use ensemble_core::{
    Client, ClientEffect, ClientEvent, ClientId, Completion, CompletionResult, ExecRole, InstanceId, Node, NodeEffect,
    NodeEvent, OpClass, Outcome, Position, Reply, ReplyBody, Request, RequestError, StateUpdate, Storage, StorageJob,
    StorageResult, Time, TimerId, Value, WorkId,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToyMsg {
    /// A token travelling around the ring; `hops` counts the passes so far.
    Token { hops: u64 },
    /// The `seq`-th ping of a pinging node.
    Ping { seq: u64 },
}

/// What a [`ToyNode`] saw, when it recorded.
#[derive(Clone, Debug, PartialEq)]
pub enum Seen {
    Message { from: InstanceId, msg: ToyMsg },
    Request { client: ClientId, seq: u64 },
    Timer(TimerId),
    StorageDone(WorkId),
}

#[derive(Clone, Debug)]
struct Pings {
    targets: Vec<InstanceId>,
    interval: Duration,
    count: u64,
}

/// A node that passes tokens around a ring of `ring` instances (to `(id + 1) % ring`), pings
/// targets on a timer, and answers each client request after one `Execute` storage job.
#[derive(Clone, Debug)]
pub struct ToyNode {
    id: InstanceId,
    ring: u32,
    tokens_at_start: u32,
    pings: Option<Pings>,
    next_work: u64,
    pending: BTreeMap<WorkId, (ClientId, u64)>,
    record: bool,
    /// Tokens this node received (and passed on).
    pub tokens_passed: u64,
    /// Everything the node saw, in order, if it records.
    pub seen: Vec<(Time, Seen)>,
}

impl ToyNode {
    pub fn new(id: InstanceId) -> ToyNode {
        ToyNode {
            id,
            ring: 0,
            tokens_at_start: 0,
            pings: None,
            next_work: 0,
            pending: BTreeMap::new(),
            record: false,
            tokens_passed: 0,
            seen: Vec::new(),
        }
    }

    /// Makes the node a member of a ring of `size` instances that creates `tokens` tokens at
    /// start (give a non-zero count to one member only, as a ring's first instance would).
    pub fn in_ring(mut self, size: u32, tokens: u32) -> ToyNode {
        self.ring = size;
        self.tokens_at_start = tokens;
        self
    }

    /// Sends `Ping { seq }` to every target at `seq * interval`, for `seq` in `0..count`.
    pub fn pinging(mut self, targets: Vec<InstanceId>, interval: Duration, count: u64) -> ToyNode {
        self.pings = Some(Pings { targets, interval, count });
        self
    }

    /// Records everything the node sees in [`ToyNode::seen`].
    pub fn recording(mut self) -> ToyNode {
        self.record = true;
        self
    }

    /// The pings this node received, as `(arrival-handled time, from, seq)`.
    pub fn pings_received(&self) -> impl Iterator<Item = (Time, InstanceId, u64)> + '_ {
        self.seen.iter().filter_map(|(t, s)| match s {
            Seen::Message { from, msg: ToyMsg::Ping { seq } } => Some((*t, *from, *seq)),
            _ => None,
        })
    }

    fn ping(&self, seq: u64, out: &mut Vec<NodeEffect<ToyMsg>>) {
        if let Some(p) = &self.pings {
            if seq < p.count {
                for &to in &p.targets {
                    out.push(NodeEffect::Send { to, msg: ToyMsg::Ping { seq } });
                }
                if seq + 1 < p.count {
                    out.push(NodeEffect::SetTimer { id: TimerId(seq + 1), after: p.interval });
                }
            }
        }
    }

    fn next_in_ring(&self) -> InstanceId {
        InstanceId((self.id.0 + 1) % self.ring.max(1))
    }
}

impl Node for ToyNode {
    type Msg = ToyMsg;

    fn id(&self) -> InstanceId {
        self.id
    }

    fn start(&mut self, _now: Time, out: &mut Vec<NodeEffect<ToyMsg>>) {
        if self.ring > 0 {
            for _ in 0..self.tokens_at_start {
                out.push(NodeEffect::Send { to: self.next_in_ring(), msg: ToyMsg::Token { hops: 0 } });
            }
        }
        self.ping(0, out);
    }

    fn on_event(&mut self, now: Time, event: NodeEvent<ToyMsg>, out: &mut Vec<NodeEffect<ToyMsg>>) {
        match event {
            NodeEvent::Message { from, msg } => {
                if self.record {
                    self.seen.push((now, Seen::Message { from, msg: msg.clone() }));
                }
                if let ToyMsg::Token { hops } = msg {
                    self.tokens_passed += 1;
                    out.push(NodeEffect::Send { to: self.next_in_ring(), msg: ToyMsg::Token { hops: hops + 1 } });
                }
            }
            NodeEvent::Request(request) => {
                if self.record {
                    self.seen.push((now, Seen::Request { client: request.client, seq: request.seq }));
                }
                let work = WorkId(self.next_work);
                self.next_work += 1;
                self.pending.insert(work, (request.client, request.seq));
                out.push(NodeEffect::Storage { work, job: StorageJob::Execute { request, role: ExecRole::Local } });
            }
            NodeEvent::Timer(id) => {
                if self.record {
                    self.seen.push((now, Seen::Timer(id)));
                }
                self.ping(id.0, out);
            }
            NodeEvent::StorageDone { work, result } => {
                if self.record {
                    self.seen.push((now, Seen::StorageDone(work)));
                }
                let Some((client, seq)) = self.pending.remove(&work) else { return };
                let body = match result {
                    StorageResult::Executed { outcome, position, .. } => {
                        ReplyBody::Done { outcome, class: OpClass::Local, instance: self.id, position }
                    }
                    StorageResult::Rejected(e) => ReplyBody::Error(e),
                    other => ReplyBody::Error(RequestError::Storage {
                        txn: String::new(),
                        message: format!("unexpected storage result {other:?}"),
                    }),
                };
                out.push(NodeEffect::Reply { to: client, reply: Reply { client, seq, body } });
            }
        }
    }
}

/// A storage that runs nothing and counts what it was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToyStorage {
    pub instance: InstanceId,
    pub executed: u64,
    pub applied: u64,
    /// Global operations applied so far.
    pub globals_seen: u64,
}

impl ToyStorage {
    pub fn new(instance: InstanceId) -> ToyStorage {
        ToyStorage { instance, executed: 0, applied: 0, globals_seen: 0 }
    }
}

impl Storage for ToyStorage {
    fn run(&mut self, job: &StorageJob) -> StorageResult {
        match job {
            StorageJob::Execute { .. } => {
                self.executed += 1;
                StorageResult::Executed {
                    outcome: Outcome::Committed(vec![vec![Value::Int(self.executed as i64)]]),
                    update: StateUpdate::default(),
                    position: Position::Local {
                        instance: self.instance,
                        globals_seen: self.globals_seen,
                        local_writes: 0,
                        wrote: false,
                    },
                }
            }
            StorageJob::Apply { updates, .. } => {
                self.applied += 1;
                self.globals_seen += updates.len() as u64;
                StorageResult::Applied { globals_seen: self.globals_seen }
            }
        }
    }
}

/// A closed-loop client: one request outstanding at a time, the next one `think` after a reply
/// (at once if zero), up to `limit` requests. Follows MAP replies.
#[derive(Clone, Debug)]
pub struct ClosedLoopClient {
    id: ClientId,
    target: InstanceId,
    txn: String,
    think: Duration,
    limit: Option<u64>,
    next_seq: u64,
    current: Option<(Request, Time, u32)>,
}

impl ClosedLoopClient {
    pub fn new(id: ClientId, target: InstanceId, txn: &str) -> ClosedLoopClient {
        ClosedLoopClient {
            id,
            target,
            txn: txn.into(),
            think: Duration::ZERO,
            limit: None,
            next_seq: 0,
            current: None,
        }
    }

    pub fn thinking(mut self, think: Duration) -> ClosedLoopClient {
        self.think = think;
        self
    }

    pub fn limited_to(mut self, requests: u64) -> ClosedLoopClient {
        self.limit = Some(requests);
        self
    }

    fn issue(&mut self, now: Time, out: &mut Vec<ClientEffect>) {
        if self.limit.is_some_and(|limit| self.next_seq >= limit) {
            return;
        }
        let request = Request { client: self.id, seq: self.next_seq, txn: self.txn.clone(), params: Vec::new() };
        self.next_seq += 1;
        out.push(ClientEffect::Send { to: self.target, request: request.clone() });
        self.current = Some((request, now, 0));
    }
}

impl Client for ClosedLoopClient {
    fn id(&self) -> ClientId {
        self.id
    }

    fn on_event(&mut self, now: Time, event: ClientEvent, out: &mut Vec<ClientEffect>) {
        match event {
            ClientEvent::Start | ClientEvent::Timer(_) => self.issue(now, out),
            ClientEvent::Reply { reply, .. } => {
                let Some((request, issued, redirects)) = self.current.take() else { return };
                if reply.seq != request.seq {
                    self.current = Some((request, issued, redirects)); // a stale reply
                    return;
                }
                let result = match reply.body {
                    ReplyBody::Done { outcome, class, instance, position } => {
                        CompletionResult::Done { outcome, class, instance, position }
                    }
                    ReplyBody::Error(e) => CompletionResult::Error(e),
                    ReplyBody::Map { instance } => {
                        out.push(ClientEffect::Send { to: instance, request: request.clone() });
                        self.current = Some((request, issued, redirects + 1));
                        return;
                    }
                };
                out.push(ClientEffect::Completed(Completion { request, issued, completed: now, redirects, result, interaction: None }));
                if self.think.is_zero() {
                    self.issue(now, out);
                } else {
                    out.push(ClientEffect::SetTimer { id: TimerId(self.next_seq), after: self.think });
                }
            }
        }
    }
}
