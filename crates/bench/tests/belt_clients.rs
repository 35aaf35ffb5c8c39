//! The belt with its closed-loop clients in the simulator, on paths the whole runs do not take:
//! a client that does not know the partitioning follows MAP replies (Algorithm 2, lines 7–9) to
//! the owner; a client bounced between processes that disagree gives up; an instance whose
//! `Apply` fails halts, refuses global requests, says why, and keeps serving local ones.

use ensemble_app::apps::shop::ShopWorkload;
use ensemble_app::{ClientCtx, ClosedLoopClient, DataConfig, InstanceId, OpClass, Position, StorageJob, StorageResult, ThinkTime};
use ensemble_belt::{Belt, BeltConfig, BeltEvidence, ConveyorBelt, GlobalExecution};
use ensemble_bench::systems::belt::load_partition;
use ensemble_bench::{Experiment, System};
use ensemble_core::topology::Topology;
use ensemble_core::*;
use ensemble_sim::Simulation;
use ensemble_sqlite::SqliteStorage;
use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);

/// The client's limit (`MAX_REDIRECTS` in `ensemble_app::client`): more redirects than that
/// means the processes disagree about the plan.
const MAX_REDIRECTS: u32 = 8;

/// `n` shop instances on a LAN, each on its own SQLite database (wrapped by `wrap`), zero idle
/// pause, with the shipped plan.
fn shop_ring<S>(n: u32, wrap: impl Fn(InstanceId, SqliteStorage) -> S) -> Simulation<Belt, S>
where
    S: Storage<Job = StorageJob, Result = StorageResult>,
{
    let exp = Experiment::new("shop", System::Ensemble, n, Topology::lan()).unwrap();
    let app = exp.application().unwrap();
    let data = (app.generate)(DataConfig { scale: 1, seed: 1 });
    let deployment = Deployment::one_per_machine(&vec![0; n as usize], 2, "instance");
    let mut sim = Simulation::new(exp.topology.clone(), deployment, 7).unwrap();
    let cfg = BeltConfig {
        instances: n,
        global_execution: GlobalExecution::Parallel,
        idle_pause: Duration::ZERO,
        costs: exp.topology.cpu.clone(),
    };
    for i in 0..n {
        let id = InstanceId(i);
        let db = SqliteStorage::open_in_memory(app.clone(), id).unwrap();
        db.create_schema().unwrap();
        load_partition(&db, &data, &exp.plan, id, n).unwrap();
        let belt = ConveyorBelt::new(id, cfg.clone(), app.clone(), std::sync::Arc::new(exp.plan.clone()));
        sim.add_process(Box::new(belt), Some(wrap(id, db))).unwrap();
    }
    sim
}

/// A shopper at `home` who creates carts, adds one item and orders, without browsing. With
/// `knows_plan` false it mints cart ids as if there were one instance: 0, 1, 2, …, most of which
/// another instance owns.
fn shopper(index: u64, home: u32, instances: u32, knows_plan: bool, stop: Time) -> Box<dyn Client<BeltEvidence>> {
    let ctx = ClientCtx { client_index: index, home: InstanceId(home), instances: if knows_plan { instances } else { 1 } };
    let workload = Box::new(ShopWorkload::new(1, 0.0, 1));
    Box::new(ClosedLoopClient::new(ClientId(index), ctx, workload, 3, ThinkTime::None).stop_at(stop))
}

fn run(sim: &mut Simulation<Belt, impl Storage<Job = StorageJob, Result = StorageResult>>, until: Time) -> Vec<Completion<BeltEvidence>> {
    let mut done = vec![];
    sim.run_until(until, &mut |_, c| done.push(c.clone()));
    done
}

fn cart_of(c: &Completion<BeltEvidence>) -> i64 {
    c.request.params[0].as_int().expect("a cart id")
}

fn counter(sim: &Simulation<Belt, impl Storage<Job = StorageJob, Result = StorageResult>>, p: u32, name: &str) -> u64 {
    let reports = sim.process_reports();
    let (_, counters, _) = reports.iter().find(|(id, _, _)| *id == ProcessId(p)).expect("the process");
    counters.iter().find(|(n, _)| *n == name).map(|(_, v)| *v).unwrap_or_else(|| panic!("no counter {name}"))
}

#[test]
fn a_client_follows_map_replies_to_the_owner_and_completes() {
    let mut sim = shop_ring(3, |_, db| db);
    sim.add_client(shopper(0, 0, 3, false, Time::ZERO + SECOND / 10), 0).unwrap();
    let done = run(&mut sim, Time::ZERO + SECOND);
    assert!(done.len() >= 30, "{} completions", done.len());
    let mut followed = 0;
    for c in &done {
        let owner = InstanceId(cart_of(c).rem_euclid(3) as u32);
        let Ok(evidence) = (match &c.result {
            CompletionResult::Done(d) if d.outcome.committed() => Ok(&d.evidence),
            other => Err(other),
        }) else {
            panic!("{} of cart {} did not commit: {:?}", c.request.txn, cart_of(c), c.result)
        };
        // Sent home to instance 0 first; one MAP reply when another instance owns the cart.
        assert_eq!(c.redirects, u32::from(owner != InstanceId(0)), "{c:?}");
        assert_eq!(evidence.instance, owner, "{c:?}");
        followed += c.redirects;
    }
    let orders_elsewhere = done
        .iter()
        .filter(|c| c.request.txn == "order" && c.redirects == 1)
        .filter(|c| matches!(&c.result, CompletionResult::Done(d) if d.evidence.class == OpClass::Global && matches!(d.evidence.position, Position::Global { .. })))
        .count();
    assert!(orders_elsewhere >= 5, "globals ordered at the owner after a MAP reply: {orders_elsewhere}");
    assert_eq!(counter(&sim, 0, "maps_sent"), u64::from(followed), "every MAP reply came from the home instance");
    assert_eq!(counter(&sim, 1, "maps_sent") + counter(&sim, 2, "maps_sent"), 0, "the owner served at once");
    assert!(counter(&sim, 0, "tokens_received") > 100, "the token went round");
    for p in 0..3 {
        assert_eq!(counter(&sim, p, "tokens_refused"), 0, "the genuine token is never refused");
    }
}

/// Replies to every request with a MAP reply naming the other process: two of these disagree
/// about who owns everything.
struct Misrouter {
    id: ProcessId,
    to: ProcessId,
    requests: u64,
}

impl Process<Belt> for Misrouter {
    fn id(&self) -> ProcessId {
        self.id
    }

    fn start(&mut self, _: Time, _: &mut Vec<Effect<Belt>>) {}

    fn on_event(&mut self, _: Time, event: Event<Belt>, out: &mut Vec<Effect<Belt>>) {
        if let Event::Request(r) = event {
            self.requests += 1;
            let reply = Reply { client: r.client, seq: r.seq, body: ReplyBody::Redirect { to: self.to } };
            out.push(Effect::Reply { to: r.client, reply });
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("requests", self.requests)]
    }
}

#[test]
fn a_client_redirected_back_and_forth_gives_up_after_its_limit() {
    let deployment = Deployment::one_per_machine(&[0, 0], 2, "instance");
    let mut sim: Simulation<Belt, SqliteStorage> = Simulation::new(Topology::lan(), deployment, 7).unwrap();
    for (id, to) in [(0, 1), (1, 0)] {
        sim.add_process(Box::new(Misrouter { id: ProcessId(id), to: ProcessId(to), requests: 0 }), None).unwrap();
    }
    // It stops after its first request: the limit, not the clock, ends that one.
    sim.add_client(shopper(0, 0, 2, true, Time(1)), 0).unwrap();
    let done = run(&mut sim, Time::ZERO + SECOND);
    let [c] = done.as_slice() else { panic!("one completion expected: {done:?}") };
    assert_eq!(c.redirects, MAX_REDIRECTS);
    match &c.result {
        CompletionResult::Error(RequestError::Storage { txn, message }) => {
            assert_eq!(txn, "create_cart");
            assert!(message.contains("redirected 8 times, last to p1"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(counter(&sim, 0, "requests") + counter(&sim, 1, "requests"), u64::from(MAX_REDIRECTS) + 1, "the first send and every redirect followed");
}

/// SQLite, except that instance `fails` cannot apply state updates.
struct FailingApply {
    db: SqliteStorage,
    fails: bool,
}

impl Storage for FailingApply {
    type Job = StorageJob;
    type Result = StorageResult;
    fn run(&mut self, job: &StorageJob) -> StorageResult {
        match job {
            StorageJob::Apply { first_seq, .. } if self.fails => StorageResult::Failed(format!("disk full applying global {first_seq}")),
            _ => self.db.run(job),
        }
    }
}

#[test]
fn a_failed_apply_halts_the_instance_which_refuses_globals_and_says_why() {
    let mut sim = shop_ring(3, |id, db| FailingApply { db, fails: id == InstanceId(2) });
    let stop = Time::ZERO + SECOND / 2;
    for home in 0..3 {
        sim.add_client(shopper(u64::from(home), home, 3, true, stop), 0).unwrap();
    }
    let done = run(&mut sim, Time::ZERO + SECOND);

    let failure = sim.process(ProcessId(2)).unwrap().failure().expect("instance 2 halted");
    assert!(failure.starts_with("disk full applying global "), "{failure}");
    let failed: Vec<_> = sim.process_reports().into_iter().filter_map(|(id, _, f)| f.map(|_| id)).collect();
    assert_eq!(failed, [ProcessId(2)], "only the instance whose storage failed halts");

    let at_2: Vec<&Completion<BeltEvidence>> = done.iter().filter(|c| c.request.client == ClientId(2)).collect();
    let halted_at = at_2
        .iter()
        .position(|c| matches!(&c.result, CompletionResult::Error(RequestError::Storage { message, .. }) if message.contains("the belt is halted")))
        .expect("a global refused by the halted instance");
    let after = &at_2[halted_at..];
    let refused = after.iter().filter(|c| c.request.txn == "order").count();
    assert!(refused >= 3, "orders after the halt: {refused}");
    for c in after {
        match (&c.result, c.request.txn.as_str()) {
            (CompletionResult::Error(RequestError::Storage { message, .. }), "order") => {
                assert_eq!(message, &format!("the belt is halted: {failure}"))
            }
            (CompletionResult::Done(d), "create_cart" | "add_item") => {
                assert!(d.outcome.committed() && d.evidence.class == OpClass::Local, "{c:?}");
            }
            other => panic!("after the halt, globals are refused and locals served: {other:?}"),
        }
    }
    assert_eq!(counter(&sim, 2, "rejected"), refused as u64);
    for p in 0..3 {
        assert_eq!(counter(&sim, p, "tokens_refused"), 0, "a halted instance keeps the token: none comes to refuse");
    }
    assert!(!sim.process(ProcessId(2)).unwrap().quiescent(), "a halted instance holds its token and its others' updates");
}
