//! The Conveyor Belt driven step by step: every effect is carried out at once, in order, so each
//! test reads as a sequence of protocol steps.

mod common;

use common::shop_plan;
use ensemble_app::{apps::shop, DataConfig, InstanceId, OpClass, Position};
use ensemble_belt::*;
use ensemble_core::topology::Cpu;
use ensemble_core::*;
use ensemble_sqlite::SqliteStorage;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

struct Ring {
    nodes: Vec<ConveyorBelt>,
    dbs: Vec<SqliteStorage>,
    /// Messages in flight, delivered only when a test says so.
    wire: VecDeque<(ProcessId, ProcessId, Message)>,
    replies: Vec<Reply<BeltEvidence>>,
}

impl Ring {
    fn new(n: u32, mode: GlobalExecution) -> Ring {
        let app = shop::application();
        let plan = Arc::new(shop_plan());
        plan.validate(&app).unwrap();
        let data = (app.generate)(DataConfig { scale: 1, seed: 1 });
        let cfg = BeltConfig { instances: n, global_execution: mode, idle_pause: Duration::ZERO, costs: Cpu::default() };
        let mut ring = Ring { nodes: vec![], dbs: vec![], wire: VecDeque::new(), replies: vec![] };
        for i in 0..n {
            let db = SqliteStorage::open_in_memory(app.clone(), InstanceId(i)).unwrap();
            db.create_schema().unwrap();
            db.load(&data, |_, _, _| true).unwrap();
            ring.dbs.push(db);
            ring.nodes.push(ConveyorBelt::new(InstanceId(i), cfg.clone(), app.clone(), plan.clone()));
        }
        for i in 0..n as usize {
            let mut out = vec![];
            ring.nodes[i].start(Time::ZERO, &mut out);
            ring.effects(i, out);
        }
        ring
    }

    fn effects(&mut self, at: usize, mut out: Vec<Effect<Belt>>) {
        while let Some(e) = (!out.is_empty()).then(|| out.remove(0)) {
            match e {
                Effect::Send { to, msg } => self.wire.push_back((ProcessId(at as u32), to, msg)),
                Effect::Reply { reply, .. } => self.replies.push(reply),
                Effect::Storage { work, job, .. } => {
                    let result = self.dbs[at].run(&job);
                    let mut more = vec![];
                    self.nodes[at].on_event(Time::ZERO, Event::StorageDone { work, result }, &mut more);
                    out.extend(more);
                }
                Effect::SetTimer { .. } | Effect::CancelTimer { .. } => panic!("no timers with a zero idle pause"),
                Effect::Charge(_) => {}
                Effect::Refuse { from, what } => panic!("a message from {from} was refused: {what}"),
            }
        }
    }

    fn request(&mut self, at: u32, seq: u64, txn: &str, params: Vec<Value>) {
        let mut out = vec![];
        let r = Request { client: ClientId(at as u64), seq, txn: txn.into(), params };
        self.nodes[at as usize].on_event(Time::ZERO, Event::Request(r), &mut out);
        self.effects(at as usize, out);
    }

    /// Delivers the next message on the wire.
    fn deliver(&mut self) -> ProcessId {
        let (from, to, msg) = self.wire.pop_front().expect("a message in flight");
        let mut out = vec![];
        self.nodes[to.0 as usize].on_event(Time::ZERO, Event::Message { from, msg }, &mut out);
        self.effects(to.0 as usize, out);
        to
    }

    fn reply(&self, seq: u64) -> Option<&ReplyBody<BeltEvidence>> {
        self.replies.iter().find(|r| r.seq == seq).map(|r| &r.body)
    }
}

#[test]
fn local_requests_reply_at_once_and_wrong_instance_gets_map() {
    let mut ring = Ring::new(3, GlobalExecution::Parallel);
    // Cart 4 routes to instance 1 (4 mod 3).
    ring.request(1, 1, "create_cart", vec![Value::Int(4)]);
    assert!(matches!(ring.reply(1), Some(ReplyBody::Done(Done { evidence: BeltEvidence { class: OpClass::Local, instance: InstanceId(1), .. }, .. }))));
    ring.request(0, 2, "add_item", vec![Value::Int(4), Value::Int(1), Value::Int(1)]);
    assert_eq!(ring.reply(2), Some(&ReplyBody::Redirect { to: InstanceId(1).process() }));
    ring.request(2, 3, "nope", vec![]);
    assert!(matches!(ring.reply(3), Some(ReplyBody::Error(RequestError::UnknownTransaction { .. }))));
}

fn order_flow(mode: GlobalExecution) -> Ring {
    let mut ring = Ring::new(3, mode);
    // Instance 0 held the token at start and passed it to 1 at once.
    assert_eq!(ring.wire.len(), 1);
    for (seq, cart) in [(1, 3), (2, 6)] {
        ring.request(0, seq, "create_cart", vec![Value::Int(cart)]);
        ring.request(0, 10 + seq, "add_item", vec![Value::Int(cart), Value::Int(7), Value::Int(2)]);
        ring.request(0, 20 + seq, "order", vec![Value::Int(cart)]);
        assert_eq!(ring.reply(20 + seq), None, "a global request waits for the token");
    }
    assert_eq!(ring.nodes[0].queued(), 2);
    assert_eq!(ring.deliver(), InstanceId(1).process());
    assert_eq!(ring.deliver(), InstanceId(2).process());
    assert_eq!(ring.deliver(), InstanceId(0).process()); // the token is back: 0 runs both orders
    for (seq, want) in [(21, 1), (22, 2)] {
        match ring.reply(seq) {
            Some(ReplyBody::Done(Done {
                outcome: Outcome::Committed(_),
                evidence: BeltEvidence { class: OpClass::Global, position: Position::Global { seq }, .. },
            })) => {
                assert!(*seq == want || mode == GlobalExecution::Parallel)
            }
            other => panic!("{other:?}"),
        }
    }
    // Around once more so that 1 and 2 apply the updates.
    ring.deliver();
    ring.deliver();
    ring
}

#[test]
fn global_updates_reach_every_instance_in_token_order() {
    for mode in [GlobalExecution::Parallel, GlobalExecution::Sequential] {
        let ring = order_flow(mode);
        for i in 0..3 {
            assert_eq!(ring.dbs[i].counters().unwrap().0, 2, "{mode:?} instance {i}");
            for t in ["items", "orders"] {
                assert_eq!(ring.dbs[i].digest(t).unwrap(), ring.dbs[0].digest(t).unwrap(), "{mode:?} {t} at {i}");
            }
        }
        // The carts stayed at their partition's instance.
        assert_eq!(ring.dbs[0].dump("carts").unwrap().len(), 2);
        assert!(ring.dbs[1].dump("carts").unwrap().is_empty());
        // Stock of item 7 went down by 4 everywhere.
        assert_eq!(ring.dbs[2].dump("orders").unwrap().len(), 2);
    }
}

#[test]
fn token_drops_own_entries_after_a_full_round() {
    let mut ring = order_flow(GlobalExecution::Parallel);
    let (_, _, Message::Token(t)) = ring.wire.front().cloned().unwrap();
    assert_eq!(t.globals, 2);
    assert_eq!(t.entries.len(), 2, "entries travel until their origin sees them again");
    ring.deliver(); // reaches 0 again
    let (_, _, Message::Token(t)) = ring.wire.front().cloned().unwrap();
    assert!(t.entries.is_empty(), "{t:?}");
}

#[test]
fn ring_of_one_runs_globals_without_a_network() {
    let mut ring = Ring::new(1, GlobalExecution::Sequential);
    ring.request(0, 1, "create_cart", vec![Value::Int(5)]);
    ring.request(0, 2, "add_item", vec![Value::Int(5), Value::Int(1), Value::Int(1)]);
    ring.request(0, 3, "order", vec![Value::Int(5)]);
    assert!(matches!(ring.reply(3), Some(ReplyBody::Done(Done { evidence: BeltEvidence { position: Position::Global { seq: 1 }, .. }, .. }))));
    assert!(ring.wire.is_empty());
}

/// In a ring of one, a global that arrives while another runs is taken as soon as that snapshot
/// ends, not left in Q until some later global request comes (with every client waiting for its
/// own global, none would come).
#[test]
fn ring_of_one_takes_globals_that_arrived_during_a_snapshot() {
    let app = shop::application();
    let plan = Arc::new(shop_plan());
    let data = (app.generate)(DataConfig { scale: 1, seed: 1 });
    let mut db = SqliteStorage::open_in_memory(app.clone(), InstanceId(0)).unwrap();
    db.create_schema().unwrap();
    db.load(&data, |_, _, _| true).unwrap();
    let cfg = BeltConfig { instances: 1, global_execution: GlobalExecution::Parallel, idle_pause: Duration::ZERO, costs: Cpu::default() };
    let mut node = ConveyorBelt::new(InstanceId(0), cfg, app, plan);
    let mut out = vec![];
    node.start(Time::ZERO, &mut out);
    assert!(out.is_empty(), "{out:?}");
    let order = |client: u64| Request { client: ClientId(client), seq: 1, txn: "order".into(), params: vec![Value::Int(client as i64)] };
    node.on_event(Time::ZERO, Event::Request(order(1)), &mut out);
    let [Effect::Storage { work, job, .. }] = &out[..] else { panic!("{out:?}") };
    let (first, job) = (*work, job.clone());
    out.clear();
    node.on_event(Time::ZERO, Event::Request(order(2)), &mut out);
    assert!(out.is_empty(), "the second waits in Q while the first runs: {out:?}");
    let result = db.run(&job);
    node.on_event(Time::ZERO, Event::StorageDone { work: first, result }, &mut out);
    assert!(out.iter().any(|e| matches!(e, Effect::Reply { to: ClientId(1), .. })), "{out:?}");
    assert!(out.iter().any(|e| matches!(e, Effect::Storage { job: ensemble_app::StorageJob::Execute { request, .. }, .. } if request.client == ClientId(2))), "{out:?}");
    assert!(!node.quiescent());
}
