//! The G-DUR systems through `ensemble bench`'s generic simulated run, and what they refuse.
#![cfg(feature = "harness")]

use ensemble_bench::sim_run::simulate;
use ensemble_bench::{Experiment, Harness, WorkloadSpec};
use ensemble_core::topology::Topology;
use ensemble_core::{ClientId, Effect, Event, Process, ProcessId, ReplyBody, Request, RequestError, Time, Value};
use ensemble_gdur::{GDur, GDurHarness};
use ensemble_kv::workload::{KeySpace, KvKind, KvWorkloadSpec, Table};

const H: GDurHarness = GDurHarness;

fn experiment(system: &str, workload: KvKind) -> Experiment {
    let mut e = Experiment::for_system(workload.name(), system, 12, Topology::pstore(4)).unwrap();
    let WorkloadSpec::KeyValue { spec } = &mut e.workload else { panic!("a key-value workload") };
    spec.scale = 0.05;
    e.clients = 24;
    e.warmup_s = 1.0;
    e.measure_s = 3.0;
    e
}

#[test]
fn tpcb_runs_measured_by_class_and_checked_on_every_system() {
    for system in ensemble_gdur::harness::SYSTEMS {
        let exp = experiment(system, KvKind::Tpcb);
        H.validate(&exp).unwrap();
        let s = simulate(&H, &exp, false).unwrap();
        let r = s.check(&H, &exp).unwrap();
        let check = r.check.clone().unwrap();
        assert_eq!(r.check_passed, Some(true), "{check}");
        assert!(check.contains("SER: serializable") && check.contains("no lost commit"), "{check}");
        let classes = &r.summary.classes;
        assert!(classes.get("local-update").is_some_and(|c| c.count > 50), "{system}: {:?}", classes.keys());
        if system != "p-store-full" {
            // 15 % of TPC-B's transactions have their account in another group.
            assert!(classes.get("global-update").is_some_and(|c| c.count > 5), "{system}: {:?}", classes.keys());
        }
        assert_eq!(r.summary.errors, 0);
    }
}

#[test]
fn ycsb_and_walks_run_checked() {
    for kind in [KvKind::YcsbA, KvKind::YcsbB, KvKind::YcsbC, KvKind::Walk] {
        let mut exp = experiment("p-store", kind);
        exp.dur.groups = 2;
        let s = simulate(&H, &exp, false).unwrap();
        let r = s.check(&H, &exp).unwrap();
        assert_eq!(r.check_passed, Some(true), "{kind:?}: {}", r.check.unwrap());
        assert!(r.summary.throughput > 10.0, "{kind:?}: {}", r.summary.throughput);
    }
}

#[test]
fn a_placement_that_leaves_a_partition_without_a_group_is_refused_before_anything_runs() {
    let mut exp = experiment("p-store", KvKind::Tpcb);
    exp.dur.placement = Some("0=0; 1=1; 3=3".into());
    let err = H.validate(&exp).unwrap_err();
    assert!(err.contains("partition 2 is not placed"), "{err}");
    exp.dur.placement = Some("0=0; 1=1; 2=; 3=3".into());
    assert!(H.validate(&exp).unwrap_err().contains("partition 2 has no group"));
    exp.dur.placement = None;
    exp.dur.replication = 5;
    assert!(H.validate(&exp).unwrap_err().contains("--replication"));
}

#[test]
fn a_workload_with_nonsense_shares_is_refused() {
    let mut exp = experiment("p-store", KvKind::Tpcb);
    let WorkloadSpec::KeyValue { spec } = &mut exp.workload else { unreachable!() };
    spec.global = 1.5;
    let err = H.validate(&exp).unwrap_err();
    assert!(err.contains("global") && err.contains("1.5"), "{err}");
    let exp = Experiment::for_system("shop", "p-store", 12, Topology::pstore(4)).unwrap();
    assert!(H.validate(&exp).unwrap_err().contains("key-value workloads"));
}

/// Process 0 of `system`'s TPC-B deployment, started.
fn started_replica(system: &str) -> Box<dyn Process<GDur>> {
    let mut replica = H.process(&experiment(system, KvKind::Tpcb), ProcessId(0)).unwrap();
    replica.start(Time::ZERO, &mut Vec::new());
    replica
}

/// What `replica` does with `event`.
fn handle(replica: &mut Box<dyn Process<GDur>>, event: Event<GDur>) -> Vec<Effect<GDur>> {
    let mut out = Vec::new();
    replica.on_event(Time::ZERO, event, &mut out);
    out
}

fn tpcb_key(table: Table, row: u64) -> Value {
    Value::Int(KeySpace::tpcb_key(table, row) as i64)
}

/// A TPC-B transaction of client 1 on `account` and the first teller and branch.
fn tpcb_request(seq: u64, account: Value) -> Request {
    Request {
        client: ClientId(1),
        seq,
        txn: "tpcb".into(),
        params: vec![account, tpcb_key(Table::Teller, 0), tpcb_key(Table::Branch, 0), Value::Int(5)],
    }
}

#[test]
fn a_request_on_a_key_outside_the_key_space_is_refused_and_the_replica_goes_on() {
    let mut replica = started_replica("p-store");
    let space = KvWorkloadSpec { scale: 0.05, ..KvWorkloadSpec::preset(KvKind::Tpcb) }.key_space(4).unwrap();
    let reply = |replica: &mut Box<dyn Process<GDur>>, r: Request| {
        handle(replica, Event::Request(r)).into_iter().find_map(|e| match e {
            Effect::Reply { reply, .. } => Some(reply.body),
            _ => None,
        })
    };
    // Account 10^9 does not exist.
    let body = reply(&mut replica, tpcb_request(1, tpcb_key(Table::Account, 1_000_000_000)));
    let Some(ReplyBody::Error(RequestError::ParamType { param, expected, .. })) = body else { panic!("{body:?}") };
    assert_eq!(param, "account");
    assert!(expected.contains("outside the key space") && expected.contains(&space.describe()), "{expected}");
    // A good request afterwards is taken: a local transaction of group 0 is multicast, not refused.
    assert!(reply(&mut replica, tpcb_request(2, tpcb_key(Table::Account, 0))).is_none(), "the good request waits for termination");
    assert!(replica.failure().is_none());
}

/// Forged or misdirected two-phase-commit messages are refused by name; the replica keeps serving.
#[test]
fn forged_two_phase_commit_messages_are_refused_and_the_replica_goes_on() {
    use ensemble_gdur::Msg;
    use ensemble_group::commit::{CommitMsg, TxnId as CommitTxn};
    let mut replica = started_replica("p-store-2pc");
    let refusal = |replica: &mut Box<dyn Process<GDur>>, from: u32, msg: Msg| {
        handle(replica, Event::Message { from: ProcessId(from), msg }).into_iter().find_map(|e| match e {
            Effect::Refuse { what, .. } => Some(what),
            _ => None,
        })
    };
    let txn = CommitTxn { coordinator: ProcessId(5), seq: 0 };
    let participants = vec![ProcessId(0), ProcessId(1), ProcessId(2)];
    // A decision from a process that is not the transaction's coordinator.
    let what = refusal(&mut replica, 7, Msg::Tpc(CommitMsg::Decision { txn, participants: participants.clone(), commit: true }));
    assert!(what.as_deref().is_some_and(|w| w.contains("not its coordinator")), "{what:?}");
    // A commit from the coordinator of a transaction this replica never voted yes on.
    let what = refusal(&mut replica, 5, Msg::Tpc(CommitMsg::Decision { txn, participants, commit: true }));
    assert!(what.as_deref().is_some_and(|w| w.contains("did not vote yes")), "{what:?}");
    // A 2PC message to a replica whose atomic commitment is by group communication.
    let mut gc = started_replica("p-store");
    let what = refusal(&mut gc, 5, Msg::Tpc(CommitMsg::Ack { txn }));
    assert!(what.as_deref().is_some_and(|w| w.contains("a 2PC message")), "{what:?}");
    // The 2PC replica still takes a transaction: it begins its 2PC, sending PREPAREs.
    let out = handle(&mut replica, Event::Request(tpcb_request(1, tpcb_key(Table::Account, 0))));
    let prepares = out.iter().filter(|e| matches!(e, Effect::Send { msg: Msg::Tpc(CommitMsg::Prepare { .. }), .. })).count();
    assert_eq!(prepares, 3, "one PREPARE per member of group 0: {out:?}");
    assert!(replica.failure().is_none());
}

/// `--store-dir`: every process keeps its versions in its own SQLite file; the run is checked as
/// any other, and what the files hold afterwards is what the replicas installed.
#[test]
fn a_run_that_asks_for_durability_leaves_each_replicas_versions_on_disk() {
    use ensemble_kv::store::{SqliteStore, VersionStore};
    let dir = tempfile::tempdir().unwrap();
    let mut exp = experiment("p-store", KvKind::Tpcb);
    exp.dur.groups = 2;
    exp.dur.store_dir = Some(dir.path().to_path_buf());
    let s = simulate(&H, &exp, false).unwrap();
    let r = s.check(&H, &exp).unwrap();
    assert_eq!(r.check_passed, Some(true), "{}", r.check.unwrap());
    let initial = exp_initial(&exp);
    let latest = |p: u32| {
        let path = ensemble_gdur::harness::store_path(dir.path(), &exp.label, ProcessId(p));
        SqliteStore::open(&path, initial).unwrap().latest_versions()
    };
    // Group 0 is processes 0, 1 and 2: one partition, the same installs at each.
    let first = latest(0);
    assert!(first.len() > 20, "only {} keys written", first.len());
    assert_eq!(latest(1), first);
    assert_eq!(latest(2), first);
    assert_ne!(latest(3), first, "group 1 replicates the other partition");
    // A second run into the same directory would start from the first one's versions.
    let err = simulate(&H, &exp, false).err().expect("refused").to_string();
    assert!(err.contains("-store-0.sqlite") && err.contains("earlier run"), "{err}");
}

fn exp_initial(exp: &Experiment) -> ensemble_kv::Value {
    let WorkloadSpec::KeyValue { spec } = &exp.workload else { panic!("a key-value workload") };
    spec.key_space(exp.dur.groups).unwrap().initial_value()
}
