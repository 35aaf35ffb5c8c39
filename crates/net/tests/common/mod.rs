//! A toy protocol shared by the integration tests: each request travels once around the ring
//! of instances, then the instance it arrived at runs it as a storage job and replies.
#![allow(dead_code)]

use ensemble_core::{
    Client, ClientEffect, ClientEvent, ClientId, Completion, CompletionResult, ExecRole, InstanceId, Node, NodeEffect,
    NodeEvent, OpClass, Outcome, Position, Reply, ReplyBody, Request, Storage, StorageJob, StorageResult, Time, TimerId,
    Value, WorkId,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;


#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum RingMsg {
    Forward { origin: InstanceId, request: Request },
}

pub struct RingNode {
    id: InstanceId,
    ring: Vec<InstanceId>,
    next_work: u64,
    pending: HashMap<WorkId, Request>,
}

impl RingNode {
    pub fn new(id: InstanceId, n: u32) -> RingNode {
        RingNode { id, ring: (0..n).map(InstanceId).collect(), next_work: 0, pending: HashMap::new() }
    }

    fn next(&self) -> InstanceId {
        let pos = self.ring.iter().position(|i| *i == self.id).unwrap_or(0);
        self.ring[(pos + 1) % self.ring.len()]
    }
}

impl Node for RingNode {
    type Msg = RingMsg;

    fn id(&self) -> InstanceId {
        self.id
    }

    fn start(&mut self, _now: Time, _out: &mut Vec<NodeEffect<RingMsg>>) {}

    fn on_event(&mut self, _now: Time, event: NodeEvent<RingMsg>, out: &mut Vec<NodeEffect<RingMsg>>) {
        match event {
            NodeEvent::Request(request) => {
                out.push(NodeEffect::Send { to: self.next(), msg: RingMsg::Forward { origin: self.id, request } })
            }
            NodeEvent::Message { msg: RingMsg::Forward { origin, request }, .. } if origin == self.id => {
                let work = WorkId(self.next_work);
                self.next_work += 1;
                self.pending.insert(work, request.clone());
                out.push(NodeEffect::Storage { work, job: StorageJob::Execute { request, role: ExecRole::Local } });
            }
            NodeEvent::Message { msg, .. } => out.push(NodeEffect::Send { to: self.next(), msg }),
            NodeEvent::Timer(_) => {}
            NodeEvent::StorageDone { work, result } => {
                let Some(request) = self.pending.remove(&work) else { return };
                let body = match result {
                    StorageResult::Executed { outcome, position, .. } => {
                        ReplyBody::Done { outcome, class: OpClass::Local, instance: self.id, position }
                    }
                    other => panic!("unexpected storage result {other:?}"),
                };
                out.push(NodeEffect::Reply { to: request.client, reply: Reply { client: request.client, seq: request.seq, body } });
            }
        }
    }
}

/// Counts the jobs it ran; the counter is shared by every worker of one node.
pub struct CountingStorage {
    pub instance: InstanceId,
    pub ran: Arc<AtomicU64>,
}

impl Storage for CountingStorage {
    fn run(&mut self, job: &StorageJob) -> StorageResult {
        let n = self.ran.fetch_add(1, Ordering::SeqCst) + 1;
        let StorageJob::Execute { request, .. } = job else { return StorageResult::Failed("not a toy job".into()) };
        StorageResult::Executed {
            outcome: Outcome::Committed(vec![vec![Value::Int(request.seq as i64)]]),
            update: Default::default(),
            position: Position::Local { instance: self.instance, globals_seen: 0, local_writes: n, wrote: true },
        }
    }
}

/// A closed-loop client: `total` requests to `target`, with a short think time (a timer)
/// between a reply and the next request.
pub struct ToyClient {
    id: ClientId,
    target: InstanceId,
    total: u64,
    sent: u64,
    in_flight: Option<(Request, Time)>,
}

impl ToyClient {
    pub fn boxed(id: u64, target: u32, total: u64) -> Box<dyn Client> {
        Box::new(ToyClient { id: ClientId(id), target: InstanceId(target), total, sent: 0, in_flight: None })
    }

    fn send(&mut self, now: Time, out: &mut Vec<ClientEffect>) {
        let request = Request { client: self.id, seq: self.sent, txn: "toy".into(), params: vec![Value::Int(self.sent as i64)] };
        self.sent += 1;
        self.in_flight = Some((request.clone(), now));
        out.push(ClientEffect::Send { to: self.target, request });
    }
}

impl Client for ToyClient {
    fn id(&self) -> ClientId {
        self.id
    }

    fn on_event(&mut self, now: Time, event: ClientEvent, out: &mut Vec<ClientEffect>) {
        match event {
            ClientEvent::Start => self.send(now, out),
            ClientEvent::Timer(_) => self.send(now, out),
            ClientEvent::Reply { reply, .. } => {
                let Some((request, issued)) = self.in_flight.take() else { panic!("reply with nothing in flight") };
                assert_eq!((reply.client, reply.seq), (request.client, request.seq));
                let result = match reply.body {
                    ReplyBody::Done { outcome, class, instance, position } => CompletionResult::Done { outcome, class, instance, position },
                    other => panic!("unexpected reply {other:?}"),
                };
                out.push(ClientEffect::Completed(Completion { request, issued, completed: now, redirects: 0, result, interaction: None }));
                if self.sent < self.total {
                    out.push(ClientEffect::SetTimer { id: TimerId(self.sent), after: Duration::from_micros(200) });
                }
            }
        }
    }
}

/// Every (client, seq) in `0..per_client` answered exactly once, by the instance it was sent to.
pub fn assert_all_answered(done: &[Completion], targets: &BTreeMap<ClientId, InstanceId>, per_client: u64) {
    let mut seen = BTreeSet::new();
    for c in done {
        assert!(seen.insert((c.request.client, c.request.seq)), "answered twice: {:?}", c.request);
        let CompletionResult::Done { outcome, instance, .. } = &c.result else { panic!("{:?}", c.result) };
        assert_eq!(*instance, targets[&c.request.client]);
        assert_eq!(outcome, &Outcome::Committed(vec![vec![Value::Int(c.request.seq as i64)]]));
        assert!(c.completed >= c.issued);
    }
    let want: BTreeSet<_> = targets.keys().flat_map(|c| (0..per_client).map(move |s| (*c, s))).collect();
    assert_eq!(seen, want);
}
