use ensemble_app::{apps::shop, ChangeKind, DataConfig, ExecRole, InstanceId, Position, RowChange, StateUpdate, StorageJob, StorageResult};
use ensemble_core::*;
use ensemble_sqlite::SqliteStorage;

fn req(seq: u64, txn: &str, params: Vec<Value>) -> Request {
    Request { client: ClientId(1), seq, txn: txn.into(), params }
}

fn fresh(instance: u32) -> SqliteStorage {
    let app = shop::application();
    let s = SqliteStorage::open_in_memory(app.clone(), InstanceId(instance)).unwrap();
    s.create_schema().unwrap();
    s.load(&(app.generate)(DataConfig { scale: 1, seed: 3 }), |_, _, _| true).unwrap();
    s
}

fn exec(s: &mut SqliteStorage, r: Request, role: ExecRole) -> (Outcome, StateUpdate, Position) {
    match s.run(&StorageJob::Execute { request: r, role }) {
        StorageResult::Executed { outcome, update, position, .. } => (outcome, update, position),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn global_update_applied_elsewhere_reproduces_replicated_state() {
    let (mut a, mut b) = (fresh(0), fresh(1));
    let (o, u, p) = exec(&mut a, req(1, "create_cart", vec![Value::Int(10)]), ExecRole::Local);
    assert_eq!(o, Outcome::Committed(vec![]));
    assert!(u.is_empty());
    assert_eq!(p, Position::Local { instance: InstanceId(0), globals_seen: 0, local_writes: 1, wrote: true });
    exec(&mut a, req(2, "add_item", vec![Value::Int(10), Value::Int(5), Value::Int(2)]), ExecRole::Local);
    exec(&mut a, req(3, "add_item", vec![Value::Int(10), Value::Int(7), Value::Int(1)]), ExecRole::Local);
    let (o, u, p) = exec(&mut a, req(4, "order", vec![Value::Int(10)]), ExecRole::Global);
    assert!(matches!(o, Outcome::Committed(_)), "{o:?}");
    assert_eq!(p, Position::Global { seq: 1 });
    // Two stock decrements, the order row, the cart's status.
    let tables: Vec<&str> = u.changes.iter().map(|c| c.table.as_str()).collect();
    assert_eq!(tables.iter().filter(|t| **t == "items").count(), 2, "{u:?}");
    assert!(tables.contains(&"orders") && tables.contains(&"carts"));
    // Instance b holds no carts: the node filters partitioned tables out before applying.
    let replicated = StateUpdate { changes: u.changes.iter().filter(|c| c.table == "items" || c.table == "orders").cloned().collect(), writer: u.writer };
    assert_eq!(b.run(&StorageJob::Apply { first_seq: 1, updates: vec![replicated] }), StorageResult::Applied { globals_seen: 1, retries: 0 });
    for t in ["items", "orders"] {
        assert_eq!(a.digest(t).unwrap(), b.digest(t).unwrap(), "{t}");
    }
    assert_eq!(b.counters().unwrap(), (1, 0));
    // A local read at b now sees the global.
    let (_, _, p) = exec(&mut b, req(5, "browse_items", vec![Value::Int(0), Value::Int(3)]), ExecRole::Local);
    assert_eq!(p, Position::Local { instance: InstanceId(1), globals_seen: 1, local_writes: 0, wrote: false });
}

#[test]
fn aborted_global_takes_a_sequence_number_and_writes_nothing() {
    let mut a = fresh(0);
    let before = a.digests().unwrap();
    let (o, u, p) = exec(&mut a, req(1, "order", vec![Value::Int(99)]), ExecRole::Global);
    assert_eq!(o, Outcome::body_abort("no cart 99"));
    assert!(u.is_empty());
    assert_eq!(p, Position::Global { seq: 1 });
    assert_eq!(a.digests().unwrap(), before);
    assert_eq!(a.counters().unwrap(), (1, 0));
}

#[test]
fn apply_out_of_order_or_diverged_fails_and_changes_nothing() {
    let mut b = fresh(1);
    let before = b.digests().unwrap();
    let r = b.run(&StorageJob::Apply { first_seq: 2, updates: vec![StateUpdate::default()] });
    assert!(matches!(&r, StorageResult::Failed(m) if m.contains("must be 1, not 2")), "{r:?}");
    let bogus = StateUpdate {
        changes: vec![
            RowChange { table: "items".into(), kind: ChangeKind::Update { key: vec![("item_id".into(), Value::Int(1))], set: vec![("stock".into(), Value::Int(0))] } },
            RowChange { table: "items".into(), kind: ChangeKind::Delete { key: vec![("item_id".into(), Value::Int(123_456))] } },
        ],
        writer: None,
    };
    let r = b.run(&StorageJob::Apply { first_seq: 1, updates: vec![bogus] });
    assert!(matches!(&r, StorageResult::Failed(m) if m.contains("changed 0 rows")), "{r:?}");
    assert_eq!(b.digests().unwrap(), before, "a failed apply must roll back entirely");
    assert_eq!(b.counters().unwrap(), (0, 0));
}

#[test]
fn malformed_requests_are_rejected_with_names() {
    let mut a = fresh(0);
    let cases = [
        (req(1, "nope", vec![]), "unknown transaction type `nope`"),
        (req(2, "order", vec![]), "takes 1 parameter(s), got 0"),
        (req(3, "order", vec![Value::Text("x".into())]), "parameter 0 (`cart_id`) must be int, got text"),
    ];
    for (r, msg) in cases {
        match a.run(&StorageJob::Execute { request: r, role: ExecRole::Local }) {
            StorageResult::Rejected(e) => assert!(e.to_string().contains(msg), "{e}"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(a.counters().unwrap(), (0, 0));
}

#[test]
fn file_databases_share_state_between_connections() {
    let dir = tempfile::tempdir().unwrap();
    let app = shop::application();
    let path = dir.path().join("i0.db");
    let a = SqliteStorage::open_file(&path, app.clone(), InstanceId(0)).unwrap();
    a.create_schema().unwrap();
    let mut a = a;
    let b = SqliteStorage::open_file(&path, app, InstanceId(0)).unwrap();
    exec(&mut a, req(1, "create_cart", vec![Value::Int(3)]), ExecRole::Local);
    assert_eq!(b.dump("carts").unwrap(), vec![vec![Value::Int(3), Value::Text("open".into())]]);
}
