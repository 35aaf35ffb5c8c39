//! What the belt's tests share: the `shop` plan, and a ring of SQLite instances whose messages
//! and storage work are carried out only when a test says so, one at a time, so that a test can
//! put any message in front of an instance in any state: holding the token while its `Apply` or
//! its globals run, waiting for it, or halted.

#![allow(dead_code)] // each test file uses a part

use ensemble_app::{apps::shop, DataConfig, InstanceId, PartitionPlan, PlanClass, StorageJob, TablePlacement, TxnPlan};
use ensemble_belt::*;
use ensemble_core::topology::Cpu;
use ensemble_core::*;
use ensemble_sqlite::SqliteStorage;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

pub fn shop_plan() -> PartitionPlan {
    let app = shop::application();
    let by_cart = |class| TxnPlan { class, partition_by: vec!["cart_id".into()] };
    PartitionPlan {
        application: "shop".into(),
        fingerprint: app.fingerprint(),
        origin: "test".into(),
        max_instances: None,
        tables: [
            ("items", TablePlacement::Replicated),
            ("orders", TablePlacement::Replicated),
            ("carts", TablePlacement::Partitioned { column: "cart_id".into() }),
            ("cart_lines", TablePlacement::Partitioned { column: "cart_id".into() }),
        ]
        .into_iter()
        .map(|(t, p)| (t.to_string(), p))
        .collect(),
        transactions: [
            ("create_cart", by_cart(PlanClass::Local)),
            ("add_item", by_cart(PlanClass::Local)),
            ("order", by_cart(PlanClass::Global)),
            ("get_cart", by_cart(PlanClass::Local)),
            ("browse_items", TxnPlan { class: PlanClass::Local, partition_by: vec![] }),
        ]
        .into_iter()
        .map(|(t, p)| (t.to_string(), p))
        .collect(),
    }
}

/// Tables every instance holds whole: they must agree everywhere once the belt is quiescent.
pub const REPLICATED: [&str; 2] = ["items", "orders"];

/// A ring of `shop` instances on in-memory SQLite, zero idle pause.
pub struct Ring {
    pub nodes: Vec<ConveyorBelt>,
    pub dbs: Vec<SqliteStorage>,
    /// Genuine messages in flight, oldest first. There is one token, so at most one.
    pub wire: VecDeque<(ProcessId, ProcessId, Message)>,
    /// Storage work asked for and not run yet, per instance, in the order asked.
    pub jobs: Vec<VecDeque<(WorkId, StorageJob)>>,
    /// Final replies by request sequence number (redirects are followed, not kept).
    pub replies: BTreeMap<u64, ReplyBody<BeltEvidence>>,
    /// Every genuine token delivered so far: sender, receiver, token as sent.
    pub delivered: Vec<(ProcessId, ProcessId, Token)>,
    pub requests: u64,
}

impl Ring {
    pub fn new(n: u32, mode: GlobalExecution) -> Ring {
        let app = shop::application();
        let plan = Arc::new(shop_plan());
        plan.validate(&app).unwrap();
        let data = (app.generate)(DataConfig { scale: 1, seed: 1 });
        let cfg = BeltConfig { instances: n, global_execution: mode, idle_pause: Duration::ZERO, costs: Cpu::default() };
        let mut ring = Ring {
            nodes: vec![],
            dbs: vec![],
            wire: VecDeque::new(),
            jobs: vec![],
            replies: BTreeMap::new(),
            delivered: vec![],
            requests: 0,
        };
        for i in 0..n {
            let db = SqliteStorage::open_in_memory(app.clone(), InstanceId(i)).unwrap();
            db.create_schema().unwrap();
            db.load(&data, |t, cols, row| plan.holds_row(t, InstanceId(i), n, |c| cols.iter().position(|x| x == c).map(|p| &row[p])))
                .unwrap();
            ring.dbs.push(db);
            ring.jobs.push(VecDeque::new());
            ring.nodes.push(ConveyorBelt::new(InstanceId(i), cfg.clone(), app.clone(), plan.clone()));
        }
        for i in 0..n as usize {
            let mut out = vec![];
            ring.nodes[i].start(Time::ZERO, &mut out);
            ring.apply(i, out);
        }
        ring
    }

    pub fn n(&self) -> u32 {
        self.nodes.len() as u32
    }

    /// Carries out the effects of a handler of instance `at` that got genuine input.
    fn apply(&mut self, at: usize, out: Vec<Effect<Belt>>) {
        for e in out {
            match e {
                Effect::Send { to, msg } => self.wire.push_back((ProcessId(at as u32), to, msg)),
                Effect::Reply { reply, .. } => {
                    self.replies.insert(reply.seq, reply.body);
                }
                Effect::Storage { work, job, .. } => self.jobs[at].push_back((work, job)),
                Effect::SetTimer { .. } | Effect::CancelTimer { .. } => panic!("no timers with a zero idle pause"),
                Effect::Charge(_) => {}
                Effect::Refuse { from, what } => panic!("instance {at} refused a genuine message from {from}: {what}"),
            }
        }
    }

    /// Sends a request to instance `at`, following a MAP reply to the owner as a client does.
    /// Returns its sequence number.
    pub fn request(&mut self, at: u32, txn: &str, params: Vec<Value>) -> u64 {
        self.requests += 1;
        let seq = self.requests;
        let r = Request { client: ClientId(1), seq, txn: txn.into(), params };
        let mut to = at as usize;
        for _ in 0..2 {
            let mut out = vec![];
            self.nodes[to].on_event(Time::ZERO, Event::Request(r.clone()), &mut out);
            self.apply(to, out);
            match self.replies.get(&seq) {
                Some(ReplyBody::Redirect { to: owner }) => {
                    to = owner.0 as usize;
                    self.replies.remove(&seq);
                }
                _ => return seq,
            }
        }
        panic!("request {seq} redirected twice")
    }

    /// The genuine token in flight, if it is: sender, receiver, token.
    pub fn in_flight(&self) -> Option<(ProcessId, ProcessId, Token)> {
        self.wire.front().map(|(f, t, Message::Token(tok))| (*f, *t, tok.clone()))
    }

    /// Delivers the next genuine message; returns its receiver.
    pub fn deliver(&mut self) -> Option<ProcessId> {
        let (from, to, msg) = self.wire.pop_front()?;
        let Message::Token(t) = &msg;
        self.delivered.push((from, to, t.clone()));
        let mut out = vec![];
        self.nodes[to.0 as usize].on_event(Time::ZERO, Event::Message { from, msg }, &mut out);
        self.apply(to.0 as usize, out);
        Some(to)
    }

    /// Runs instance `at`'s oldest storage job and hands its completion back.
    pub fn complete(&mut self, at: usize) -> bool {
        let Some((work, job)) = self.jobs[at].pop_front() else { return false };
        let result = self.dbs[at].run(&job);
        let mut out = vec![];
        self.nodes[at].on_event(Time::ZERO, Event::StorageDone { work, result }, &mut out);
        self.apply(at, out);
        true
    }

    /// Runs every storage job asked for, and those their completions ask for, without moving
    /// the token.
    pub fn run_jobs(&mut self) {
        while let Some(at) = (0..self.nodes.len()).find(|i| !self.jobs[*i].is_empty()) {
            self.complete(at);
        }
    }

    /// Puts `token` in front of instance `to` as if `from` had sent it, and returns what the
    /// instance did, without carrying it out.
    pub fn inject(&mut self, from: ProcessId, to: usize, token: Token) -> Vec<Effect<Belt>> {
        let mut out = vec![];
        self.nodes[to].on_event(Time::ZERO, Event::Message { from, msg: Message::Token(token) }, &mut out);
        out
    }

    /// Runs storage work and moves the token until every instance is quiescent.
    pub fn settle(&mut self) {
        for _ in 0..100_000 {
            if let Some(at) = (0..self.nodes.len()).find(|i| !self.jobs[*i].is_empty()) {
                self.complete(at);
            } else if self.nodes.iter().all(|n| n.quiescent()) {
                return;
            } else if self.deliver().is_none() {
                break;
            }
        }
        let failures: Vec<_> = self.nodes.iter().filter_map(|n| n.failure()).collect();
        panic!("the ring did not settle: failures {failures:?}, queued {:?}", self.nodes.iter().map(|n| n.queued()).collect::<Vec<_>>());
    }

    /// Every instance serving, with the same number of globals and the same replicated tables.
    pub fn assert_agree(&self) {
        for (i, n) in self.nodes.iter().enumerate() {
            assert_eq!(n.failure(), None, "instance {i} halted");
        }
        let globals: Vec<u64> = self.dbs.iter().map(|d| d.counters().unwrap().0).collect();
        assert!(globals.iter().all(|g| *g == globals[0]), "globals seen per instance: {globals:?}");
        for t in REPLICATED {
            let d0 = self.dbs[0].digest(t).unwrap();
            for (i, d) in self.dbs.iter().enumerate() {
                assert_eq!(d.digest(t).unwrap(), d0, "table {t} at instance {i}");
            }
        }
    }

    /// Whether the ring still serves: a new cart at instance 0, filled and ordered (a global
    /// that needs the token to go round), and every instance applied the order.
    pub fn assert_serves(&mut self, cart: i64) {
        let before = self.dbs[0].counters().unwrap().0;
        let home = (cart % self.n() as i64) as u32;
        let create = self.request(home, "create_cart", vec![Value::Int(cart)]);
        let add = self.request(home, "add_item", vec![Value::Int(cart), Value::Int(2), Value::Int(1)]);
        self.settle();
        let order = self.request(home, "order", vec![Value::Int(cart)]);
        self.settle();
        for seq in [create, add, order] {
            assert!(
                matches!(self.replies.get(&seq), Some(ReplyBody::Done(Done { outcome: Outcome::Committed(_), .. }))),
                "request {seq}: {:?}",
                self.replies.get(&seq)
            );
        }
        self.assert_agree();
        assert_eq!(self.dbs[0].counters().unwrap().0, before + 1, "the order went round");
    }
}
