//! Small processes that exercise the simulator without a real protocol or database: a node that
//! passes tokens around a ring, pings other nodes on a timer and serves requests with one storage
//! job each; a storage that counts jobs; a closed-loop client. The simulator's tests and
//! benchmark use them, and protocol crates may use them to drive a simulation in their own tests.

use ensemble_core::{
    Client, ClientEffect, ClientEvent, ClientId, Completion, CompletionResult, Done, Effect, Event, Outcome, Process,
    ProcessId, Protocol, Reply, ReplyBody, Request, Storage, Time, TimerId, Value, WorkId,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// The toy's type family.
#[derive(Debug)]
pub struct Toy;

impl Protocol for Toy {
    type Msg = ToyMsg;
    type Job = ToyJob;
    type JobResult = u64;
    /// The process that served the request and how many jobs its storage had run.
    type Evidence = (ProcessId, u64);
}

/// A storage job of the toy: run a request (count it), costing `cost` on a simulated core.
#[derive(Clone, Debug, PartialEq)]
pub struct ToyJob {
    pub request: Request,
}

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
    Message { from: ProcessId, msg: ToyMsg },
    Request { client: ClientId, seq: u64 },
    Timer(TimerId),
    StorageDone(WorkId),
}

#[derive(Clone, Debug)]
struct Pings {
    targets: Vec<ProcessId>,
    interval: Duration,
    count: u64,
}

/// A process that passes tokens around a ring of `ring` processes (to `(id + 1) % ring`), pings
/// targets on a timer, and answers each client request after one storage job costing
/// `job_cost`, optionally charging `charge` of CPU per request handled.
#[derive(Clone, Debug)]
pub struct ToyNode {
    id: ProcessId,
    ring: u32,
    tokens_at_start: u32,
    pings: Option<Pings>,
    next_work: u64,
    pending: BTreeMap<WorkId, (ClientId, u64)>,
    record: bool,
    job_cost: Duration,
    charge: Duration,
    /// Tokens this node received (and passed on).
    pub tokens_passed: u64,
    /// Everything the node saw, in order, if it records.
    pub seen: Vec<(Time, Seen)>,
}

impl ToyNode {
    pub fn new(id: ProcessId) -> ToyNode {
        ToyNode {
            id,
            ring: 0,
            tokens_at_start: 0,
            pings: None,
            next_work: 0,
            pending: BTreeMap::new(),
            record: false,
            job_cost: Duration::from_millis(1),
            charge: Duration::ZERO,
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
    pub fn pinging(mut self, targets: Vec<ProcessId>, interval: Duration, count: u64) -> ToyNode {
        self.pings = Some(Pings { targets, interval, count });
        self
    }

    /// Each request's storage job costs `cost` of a simulated core (default 1 ms).
    pub fn job_cost(mut self, cost: Duration) -> ToyNode {
        self.job_cost = cost;
        self
    }

    /// Handling a request charges `charge` of CPU beyond the base cost of an event.
    pub fn charging(mut self, charge: Duration) -> ToyNode {
        self.charge = charge;
        self
    }

    /// Records everything the node sees in [`ToyNode::seen`].
    pub fn recording(mut self) -> ToyNode {
        self.record = true;
        self
    }

    /// The pings this node received, as `(arrival-handled time, from, seq)`.
    pub fn pings_received(&self) -> impl Iterator<Item = (Time, ProcessId, u64)> + '_ {
        self.seen.iter().filter_map(|(t, s)| match s {
            Seen::Message { from, msg: ToyMsg::Ping { seq } } => Some((*t, *from, *seq)),
            _ => None,
        })
    }

    fn ping(&self, seq: u64, out: &mut Vec<Effect<Toy>>) {
        if let Some(p) = &self.pings {
            if seq < p.count {
                for &to in &p.targets {
                    out.push(Effect::Send { to, msg: ToyMsg::Ping { seq } });
                }
                if seq + 1 < p.count {
                    out.push(Effect::SetTimer { id: TimerId(seq + 1), after: p.interval });
                }
            }
        }
    }

    fn next_in_ring(&self) -> ProcessId {
        ProcessId((self.id.0 + 1) % self.ring.max(1))
    }
}

impl Process<Toy> for ToyNode {
    fn id(&self) -> ProcessId {
        self.id
    }

    fn start(&mut self, _now: Time, out: &mut Vec<Effect<Toy>>) {
        if self.ring > 0 {
            for _ in 0..self.tokens_at_start {
                out.push(Effect::Send { to: self.next_in_ring(), msg: ToyMsg::Token { hops: 0 } });
            }
        }
        self.ping(0, out);
    }

    fn on_event(&mut self, now: Time, event: Event<Toy>, out: &mut Vec<Effect<Toy>>) {
        match event {
            Event::Message { from, msg } => {
                if self.record {
                    self.seen.push((now, Seen::Message { from, msg: msg.clone() }));
                }
                if let ToyMsg::Token { hops } = msg {
                    self.tokens_passed += 1;
                    out.push(Effect::Send { to: self.next_in_ring(), msg: ToyMsg::Token { hops: hops + 1 } });
                }
            }
            Event::Request(request) => {
                if self.record {
                    self.seen.push((now, Seen::Request { client: request.client, seq: request.seq }));
                }
                let work = WorkId(self.next_work);
                self.next_work += 1;
                self.pending.insert(work, (request.client, request.seq));
                if !self.charge.is_zero() {
                    out.push(Effect::Charge(self.charge));
                }
                out.push(Effect::Storage { work, job: ToyJob { request }, cost: self.job_cost });
            }
            Event::Timer(id) => {
                if self.record {
                    self.seen.push((now, Seen::Timer(id)));
                }
                self.ping(id.0, out);
            }
            Event::StorageDone { work, result } => {
                if self.record {
                    self.seen.push((now, Seen::StorageDone(work)));
                }
                let Some((client, seq)) = self.pending.remove(&work) else { return };
                let outcome = Outcome::Committed(vec![vec![Value::Int(result as i64)]]);
                let body = ReplyBody::Done(Done { outcome, evidence: (self.id, result) });
                out.push(Effect::Reply { to: client, reply: Reply { client, seq, body } });
            }
        }
    }
}

/// A storage that runs nothing and counts what it was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToyStorage {
    pub process: ProcessId,
    pub executed: u64,
}

impl ToyStorage {
    pub fn new(process: ProcessId) -> ToyStorage {
        ToyStorage { process, executed: 0 }
    }
}

impl Storage for ToyStorage {
    type Job = ToyJob;
    type Result = u64;
    fn run(&mut self, _job: &ToyJob) -> u64 {
        self.executed += 1;
        self.executed
    }
    fn tally(&self) -> Vec<(&'static str, u64)> {
        vec![("storage_executed", self.executed)]
    }
}

/// A closed-loop client: one request outstanding at a time, the next one `think` after a reply
/// (at once if zero), up to `limit` requests. Follows redirects.
#[derive(Clone, Debug)]
pub struct ClosedLoopClient {
    id: ClientId,
    target: ProcessId,
    txn: String,
    think: Duration,
    limit: Option<u64>,
    next_seq: u64,
    current: Option<(Request, Time, u32)>,
}

impl ClosedLoopClient {
    pub fn new(id: ClientId, target: ProcessId, txn: &str) -> ClosedLoopClient {
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

    fn issue(&mut self, now: Time, out: &mut Vec<ClientEffect<(ProcessId, u64)>>) {
        if self.limit.is_some_and(|limit| self.next_seq >= limit) {
            return;
        }
        let request = Request { client: self.id, seq: self.next_seq, txn: self.txn.clone(), params: Vec::new() };
        self.next_seq += 1;
        out.push(ClientEffect::Send { to: self.target, request: request.clone() });
        self.current = Some((request, now, 0));
    }
}

impl Client<(ProcessId, u64)> for ClosedLoopClient {
    fn id(&self) -> ClientId {
        self.id
    }

    fn on_event(&mut self, now: Time, event: ClientEvent<(ProcessId, u64)>, out: &mut Vec<ClientEffect<(ProcessId, u64)>>) {
        match event {
            ClientEvent::Start | ClientEvent::Timer(_) => self.issue(now, out),
            ClientEvent::Reply { reply, .. } => {
                let Some((request, issued, redirects)) = self.current.take() else { return };
                if reply.seq != request.seq {
                    self.current = Some((request, issued, redirects)); // a stale reply
                    return;
                }
                let result = match reply.body {
                    ReplyBody::Done(done) => CompletionResult::Done(done),
                    ReplyBody::Error(e) => CompletionResult::Error(e),
                    ReplyBody::Redirect { to } => {
                        out.push(ClientEffect::Send { to, request: request.clone() });
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
