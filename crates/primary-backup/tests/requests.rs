//! The processes driven by hand: what they answer and when.

use ensemble_core::{ClientId, Effect, Event, Outcome, Process, ProcessId, Reply, ReplyBody, Request, RequestError, Time, Value};
use ensemble_primary_backup::{Backup, Evidence, Installed, KvJob, Msg, Primary, PrimaryBackup, PRIMARY};
use std::time::Duration;

const COST: Duration = Duration::from_micros(50);

fn request(seq: u64, txn: &str, params: Vec<Value>) -> Event<PrimaryBackup> {
    Event::Request(Request { client: ClientId(9), seq, txn: txn.into(), params })
}

fn step(p: &mut dyn Process<PrimaryBackup>, event: Event<PrimaryBackup>) -> Vec<Effect<PrimaryBackup>> {
    let mut out = Vec::new();
    p.on_event(Time::ZERO, event, &mut out);
    out
}

/// The one effect of a handler that answered at once.
fn only_reply(out: Vec<Effect<PrimaryBackup>>) -> Reply<Evidence> {
    match <[_; 1]>::try_from(out) {
        Ok([Effect::Reply { to: ClientId(9), reply }]) => reply,
        other => panic!("expected one reply to c9, got {other:?}"),
    }
}

fn error(out: Vec<Effect<PrimaryBackup>>) -> RequestError {
    match only_reply(out).body {
        ReplyBody::Error(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn malformed_requests_are_refused_naming_the_problem() {
    let mut p = Primary::new(3, COST);
    let e = error(step(&mut p, request(1, "transfer", vec![Value::Int(1)])));
    assert_eq!(e, RequestError::UnknownTransaction { txn: "transfer".into() });
    assert_eq!(e.to_string(), "unknown transaction type `transfer`");

    let e = error(step(&mut p, request(2, "rw", vec![])));
    assert_eq!(e.to_string(), "transaction `rw` takes 1 parameter(s), got 0");

    let e = error(step(&mut p, request(3, "rw", vec![Value::Int(1), Value::Text("x".into()), Value::Int(2)])));
    assert_eq!(e.to_string(), "transaction `rw`: parameter 1 (`k2`) must be int, got text");

    let e = error(step(&mut p, request(4, "rw", vec![Value::Int(1), Value::Null])));
    assert_eq!(e.to_string(), "transaction `rw`: parameter 1 (`w`) must be int, got null");

    // Nothing ran: the next good request is transaction 1 and reads the initial versions.
    let out = step(&mut p, request(5, "rw", vec![Value::Int(1), Value::Int(2)]));
    assert!(out.iter().any(|e| matches!(e, Effect::Storage { job: KvJob { txn: 1, key: 2, value: 1 }, .. })), "{out:?}");
}

#[test]
fn the_primary_replies_only_when_every_replica_installed_and_then_runs_the_next() {
    let mut p = Primary::new(3, COST);
    let out = step(&mut p, request(1, "rw", vec![Value::Int(5), Value::Int(5)]));
    let job = KvJob { txn: 1, key: 5, value: 1 };
    let sends: Vec<ProcessId> = out.iter().filter_map(|e| if let Effect::Send { to, msg: Msg::Install(j) } = e { assert_eq!(j, &job); Some(*to) } else { None }).collect();
    assert_eq!(sends, [ProcessId(1), ProcessId(2)]);
    assert!(out.iter().any(|e| matches!(e, Effect::Storage { job: j, cost, .. } if *j == job && *cost == COST)));
    // A second request waits for the first to commit.
    assert!(step(&mut p, request(2, "rw", vec![Value::Int(5), Value::Int(6)])).is_empty());

    assert!(step(&mut p, Event::Message { from: ProcessId(1), msg: Msg::Ack { txn: 1 } }).is_empty());
    assert!(step(&mut p, Event::StorageDone { work: ensemble_core::WorkId(1), result: Installed { txn: 1 } }).is_empty());
    let out = step(&mut p, Event::Message { from: ProcessId(2), msg: Msg::Ack { txn: 1 } });
    let Some(Effect::Reply { reply, .. }) = out.first() else { panic!("{out:?}") };
    let ReplyBody::Done(done) = &reply.body else { panic!("{reply:?}") };
    assert_eq!((reply.seq, &done.outcome), (1, &Outcome::Committed(vec![vec![Value::Int(0)]])));
    assert_eq!(done.evidence, Evidence { txn: 1, reads: vec![(5, None)], write: 5 });
    // Then transaction 2 runs, reading transaction 1's version of 5.
    assert!(out.iter().any(|e| matches!(e, Effect::Storage { job: KvJob { txn: 2, key: 6, .. }, .. })), "{out:?}");
    assert!(p.failure().is_none());
    // An ack for a transaction that is not replicating is a broken invariant.
    step(&mut p, Event::Message { from: ProcessId(1), msg: Msg::Ack { txn: 7 } });
    assert_eq!(p.failure().as_deref(), Some("p1 installed T7, which is not replicating"));
}

#[test]
fn a_backup_redirects_clients_and_installs_in_the_primarys_order() {
    let mut b = Backup::new(ProcessId(1), COST);
    let reply = only_reply(step(&mut b, request(1, "rw", vec![Value::Int(1)])));
    assert_eq!(reply.body, ReplyBody::Redirect { to: PRIMARY });

    let (j1, j2) = (KvJob { txn: 1, key: 3, value: 1 }, KvJob { txn: 2, key: 3, value: 2 });
    let out = step(&mut b, Event::Message { from: PRIMARY, msg: Msg::Install(j1.clone()) });
    assert!(matches!(&out[..], [Effect::Storage { job, .. }] if *job == j1));
    // The second install waits for the first, so no worker pool can reorder them.
    assert!(step(&mut b, Event::Message { from: PRIMARY, msg: Msg::Install(j2.clone()) }).is_empty());
    let out = step(&mut b, Event::StorageDone { work: ensemble_core::WorkId(1), result: Installed { txn: 1 } });
    assert!(matches!(&out[..], [Effect::Send { to: PRIMARY, msg: Msg::Ack { txn: 1 } }, Effect::Storage { job, .. }] if *job == j2), "{out:?}");
}
