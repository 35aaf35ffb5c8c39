//! A toy protocol on a group: a replicated request log. A client sends a request to any member;
//! the member proposes it to the group (a follower's proposal is forwarded to the leader by the
//! library), every member applies the decided log in order, skipping requests it has applied
//! already (a retried request may be decided twice), and the member the request reached replies
//! once it is applied, with its position in the applied sequence.

#![allow(dead_code)]

use ensemble_core::{
    Client, ClientEffect, ClientEvent, ClientId, Completion, CompletionResult, Deployment, Done, Effect, Event, Group,
    Outcome, Process, ProcessId, Protocol, Reply, ReplyBody, Request, Storage, Time, TimerId, Value,
};
use ensemble_group::{tick_phase, DurableLog, GroupConfig, GroupId, GroupMember, GroupMsg, GroupOutput, MemoryLog, Ticker};
use ensemble_sim::Simulation;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

#[derive(Debug)]
pub struct ReqLog;

impl Protocol for ReqLog {
    type Msg = GroupMsg;
    type Job = ();
    type JobResult = ();
    /// The request's position in the applied (deduplicated) sequence.
    type Evidence = u64;
}

/// What the group orders: a client's request, by its id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Command {
    pub client: u64,
    pub seq: u64,
}

/// The process's storage in the simulator: the group log, which survives a crash.
pub struct Slot(pub MemoryLog<Command>);

impl Storage for Slot {
    type Job = ();
    type Result = ();
    fn run(&mut self, _job: &()) {}
}

/// What the test sees of a member, across its incarnations.
#[derive(Clone, Debug, Default)]
pub struct Record {
    /// Every committed entry handed out: (incarnation, log index, command).
    pub log: Vec<(u64, u64, Command)>,
    /// The leader the member followed after its latest event, and whether it led.
    pub leader: Option<ProcessId>,
    pub leading: bool,
    pub refused: Vec<String>,
}

pub type Records = Rc<RefCell<Vec<Record>>>;

const TICK: TimerId = TimerId(0);

/// A member of the request log, over any durable log (`MemoryLog` unless a test says otherwise).
pub struct Replica<L: DurableLog<Command> = MemoryLog<Command>> {
    member: GroupMember<Command, L>,
    ticker: Ticker,
    seed: u64,
    applied: BTreeMap<Command, u64>,
    waiting: BTreeSet<Command>,
    records: Records,
}

impl<L: DurableLog<Command>> Replica<L> {
    pub fn new(config: GroupConfig, me: ProcessId, log: L, seed: u64, tick: Duration, records: Records) -> Self {
        let member = GroupMember::new(config, me, log, 0).expect("a member of the group");
        Replica { member, ticker: Ticker::new(tick), seed, applied: BTreeMap::new(), waiting: BTreeSet::new(), records }
    }

    fn emit(&mut self, out: GroupOutput<Command>, effects: &mut Vec<Effect<ReqLog>>) {
        for (to, msg) in out.sends {
            effects.push(Effect::Send { to, msg });
        }
        let mut records = self.records.borrow_mut();
        let record = &mut records[self.member.id().0 as usize];
        for c in out.committed {
            record.log.push((self.member.incarnation(), c.index, c.entry.clone()));
            if !self.applied.contains_key(&c.entry) {
                let position = self.applied.len() as u64;
                self.applied.insert(c.entry.clone(), position);
            }
            if self.waiting.remove(&c.entry) {
                effects.push(reply(&c.entry, self.applied[&c.entry]));
            }
        }
        record.leader = self.member.leader();
        record.leading = self.member.is_leader();
    }
}

fn reply(c: &Command, position: u64) -> Effect<ReqLog> {
    let outcome = Outcome::Committed(vec![vec![Value::Int(position as i64)]]);
    let client = ClientId(c.client);
    Effect::Reply { to: client, reply: Reply { client, seq: c.seq, body: ReplyBody::Done(Done { outcome, evidence: position }) } }
}

impl<L: DurableLog<Command>> Process<ReqLog> for Replica<L> {
    fn id(&self) -> ProcessId {
        self.member.id()
    }

    fn start(&mut self, now: Time, out: &mut Vec<Effect<ReqLog>>) {
        let phase = tick_phase(self.seed, self.member.id(), self.ticker.interval());
        out.push(Effect::SetTimer { id: TICK, after: self.ticker.start(now, phase) });
    }

    fn on_event(&mut self, now: Time, event: Event<ReqLog>, out: &mut Vec<Effect<ReqLog>>) {
        if !matches!(event, Event::Timer(_)) && self.ticker.lost(now) {
            out.push(Effect::SetTimer { id: TICK, after: self.ticker.fired(now) });
            let o = self.member.tick();
            self.emit(o, out);
        }
        match event {
            Event::Request(r) => {
                let c = Command { client: r.client.0, seq: r.seq };
                if let Some(&position) = self.applied.get(&c) {
                    out.push(reply(&c, position));
                } else {
                    self.waiting.insert(c.clone());
                    let o = self.member.propose(c);
                    self.emit(o, out);
                }
            }
            Event::Message { from, msg } => match self.member.on_message(from, msg) {
                Ok(o) => self.emit(o, out),
                Err(refusal) => {
                    let what = refusal.to_string();
                    self.records.borrow_mut()[self.member.id().0 as usize].refused.push(what.clone());
                    out.push(Effect::Refuse { from, what });
                }
            },
            Event::Timer(TICK) => {
                out.push(Effect::SetTimer { id: TICK, after: self.ticker.fired(now) });
                let o = self.member.tick();
                self.emit(o, out);
            }
            Event::Timer(_) | Event::StorageDone { .. } => {}
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.member.counters();
        vec![("proposed", c.proposed), ("committed", c.committed), ("stale", c.stale), ("refused", c.refused)]
    }

    fn failure(&self) -> Option<String> {
        self.member.failure().map(str::to_string)
    }
}

/// A closed-loop client that sends `limit` requests one at a time to member `home`, and when a
/// request gets no reply within `patience` sends it again to the next member.
pub struct RetryClient {
    id: ClientId,
    members: Vec<ProcessId>,
    target: usize,
    limit: u64,
    patience: Duration,
    next_seq: u64,
    current: Option<(Request, Time, u32)>,
}

impl RetryClient {
    pub fn new(id: u64, members: Vec<ProcessId>, home: usize, limit: u64, patience: Duration) -> RetryClient {
        RetryClient { id: ClientId(id), members, target: home, limit, patience, next_seq: 0, current: None }
    }

    fn issue(&mut self, now: Time, out: &mut Vec<ClientEffect<u64>>) {
        if self.next_seq >= self.limit {
            return;
        }
        let request = Request { client: self.id, seq: self.next_seq, txn: "append".into(), params: Vec::new() };
        self.next_seq += 1;
        out.push(ClientEffect::Send { to: self.members[self.target], request: request.clone() });
        out.push(ClientEffect::SetTimer { id: TimerId(request.seq), after: self.patience });
        self.current = Some((request, now, 0));
    }
}

impl Client<u64> for RetryClient {
    fn id(&self) -> ClientId {
        self.id
    }

    fn on_event(&mut self, now: Time, event: ClientEvent<u64>, out: &mut Vec<ClientEffect<u64>>) {
        match event {
            ClientEvent::Start => self.issue(now, out),
            ClientEvent::Timer(id) => {
                let Some((request, _, tries)) = &mut self.current else { return };
                if request.seq != id.0 {
                    return; // the timer of a request already answered
                }
                *tries += 1;
                self.target = (self.target + 1) % self.members.len();
                out.push(ClientEffect::Send { to: self.members[self.target], request: request.clone() });
                out.push(ClientEffect::SetTimer { id, after: self.patience });
            }
            ClientEvent::Reply { reply, .. } => {
                let Some((request, issued, tries)) = self.current.take() else { return };
                if reply.seq != request.seq {
                    self.current = Some((request, issued, tries));
                    return;
                }
                let result = match reply.body {
                    ReplyBody::Done(done) => CompletionResult::Done(done),
                    ReplyBody::Error(e) => CompletionResult::Error(e),
                    ReplyBody::Redirect { .. } => unreachable!("members never redirect"),
                };
                out.push(ClientEffect::Completed(Completion {
                    request,
                    issued,
                    completed: now,
                    redirects: tries,
                    result,
                    interaction: None,
                }));
                self.issue(now, out);
            }
        }
    }
}

pub type Sim = Simulation<ReqLog, Slot>;

/// A world: `members` group members (processes 0..members) plus `outsiders` processes that are
/// not in the group, one machine each, spread over the topology's sites.
pub struct World {
    pub sim: Sim,
    pub records: Records,
    pub config: GroupConfig,
}

pub fn members(n: u32) -> Vec<ProcessId> {
    (0..n).map(ProcessId).collect()
}

pub fn world(
    topology: ensemble_core::topology::Topology,
    seed: u64,
    n: u32,
    tick: Duration,
    outsiders: Vec<Box<dyn Process<ReqLog>>>,
) -> World {
    let total = n as usize + outsiders.len();
    let sites: Vec<usize> = (0..total).map(|i| i % topology.sites.len()).collect();
    let mut deployment = Deployment::one_per_machine(&sites, 2, "member");
    deployment.groups.push(Group { name: "g".into(), members: members(n) });
    // Heartbeat rounds of 25 ticks (250 ms with 10 ms ticks) outlast the WAN's 100 ms round
    // trips with their jitter; resends every 500 ms.
    let config = GroupConfig::new(GroupId(7), members(n)).timing(25, 50);
    let records: Records = Rc::new(RefCell::new(vec![Record::default(); total]));
    let mut sim = Sim::new(topology, deployment, seed).expect("valid world");
    for i in 0..n {
        let log = MemoryLog::new();
        let replica = Replica::new(config.clone(), ProcessId(i), log.clone(), seed, tick, records.clone());
        sim.add_process(Box::new(replica), Some(Slot(log))).expect("new member");
    }
    for o in outsiders {
        sim.add_process(o, None).expect("new outsider");
    }
    let (c, r) = (config.clone(), records.clone());
    sim.set_recovery(Box::new(move |id, slot: Option<&mut Slot>| {
        let log = slot.expect("members have a log").0.clone();
        Box::new(Replica::new(c.clone(), id, log, seed, tick, r.clone()))
    }));
    World { sim, records, config }
}

/// What a run produced, rendered so that two runs compare byte for byte.
pub struct Outcomes {
    pub completions: Vec<Completion<u64>>,
    pub records: Vec<Record>,
    /// Messages the members' link layer dropped as duplicates or overtaken, over all members.
    pub stale: u64,
}

impl Outcomes {
    /// Every member's delivery log, one line per delivery.
    pub fn delivery_bytes(&self) -> String {
        let mut s = String::new();
        for (m, r) in self.records.iter().enumerate() {
            for (inc, idx, c) in &r.log {
                s.push_str(&format!("p{m} inc{inc} #{idx} c{}:{}\n", c.client, c.seq));
            }
        }
        for c in &self.completions {
            s.push_str(&format!("{} c{}:{} {:?}\n", c.completed.0, c.request.client.0, c.request.seq, c.result));
        }
        s
    }
}

/// Checks the group's guarantees on a finished run and returns the agreed log:
/// * per member and incarnation, committed entries come in log order from 0, each index once;
/// * all members agree on the entry at every index they delivered;
/// * every member in `live` delivered the whole log (the same length);
/// * applying the log with deduplication, each request is applied once, at the same position
///   everywhere, and every completion's evidence is that position.
pub fn check(outcomes: &Outcomes, live: &[ProcessId]) -> Vec<Command> {
    let mut agreed: Vec<Option<Command>> = Vec::new();
    for (m, r) in outcomes.records.iter().enumerate() {
        let mut next: BTreeMap<u64, u64> = BTreeMap::new();
        for (inc, idx, c) in &r.log {
            let expected = next.entry(*inc).or_insert(0);
            assert_eq!(*idx, *expected, "p{m} incarnation {inc}: index {idx} out of order or twice");
            *expected += 1;
            let i = *idx as usize;
            if agreed.len() <= i {
                agreed.resize(i + 1, None);
            }
            match &agreed[i] {
                Some(other) => assert_eq!(other, c, "p{m} disagrees at index {i}"),
                None => agreed[i] = Some(c.clone()),
            }
        }
    }
    let log: Vec<Command> = agreed.into_iter().map(|c| c.expect("no hole in the agreed log")).collect();
    for p in live {
        let r = &outcomes.records[p.0 as usize];
        let latest = r.log.iter().map(|(inc, ..)| *inc).max().unwrap_or(0);
        let delivered = r.log.iter().filter(|(inc, ..)| *inc == latest).count();
        assert_eq!(delivered, log.len(), "{p} delivered {delivered} of {} entries in its latest incarnation", log.len());
    }
    let mut applied: BTreeMap<Command, u64> = BTreeMap::new();
    for c in &log {
        let n = applied.len() as u64;
        applied.entry(c.clone()).or_insert(n);
    }
    let mut answered = BTreeSet::new();
    for c in &outcomes.completions {
        let CompletionResult::Done(done) = &c.result else { panic!("request refused: {c:?}") };
        let cmd = Command { client: c.request.client.0, seq: c.request.seq };
        assert_eq!(applied.get(&cmd), Some(&done.evidence), "{cmd:?} answered with a position it was not applied at");
        assert!(answered.insert(cmd.clone()), "{cmd:?} completed twice");
    }
    log
}
