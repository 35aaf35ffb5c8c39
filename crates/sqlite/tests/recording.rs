//! Recording mode: the rows each transaction read (with the writer of each version) and wrote,
//! the writer ids state updates carry, and each database's install order.

use ensemble_app::storage::txn_id;
use ensemble_app::{
    apps::shop, Application, ChangeKind, DataConfig, Dataset, Db, ExecRole, InstanceId, Param, ParamType, RowAccess, StateUpdate,
    Statement, StorageJob, StorageResult, TableRows, TxnError, TxnType,
};
use ensemble_core::*;
use ensemble_sqlite::SqliteStorage;
use std::sync::Arc;

fn req(client: u64, seq: u64, txn: &str, params: Vec<Value>) -> Request {
    Request { client: ClientId(client), seq, txn: txn.into(), params }
}

fn recording(app: Arc<Application>, instance: u32, data: &Dataset) -> SqliteStorage {
    let mut s = SqliteStorage::open_in_memory(app, InstanceId(instance)).unwrap();
    s.create_schema().unwrap();
    s.load(data, |_, _, _| true).unwrap();
    s.set_recording(true).unwrap();
    s
}

fn exec(s: &mut SqliteStorage, r: &Request, role: ExecRole) -> (Outcome, StateUpdate, RowAccess) {
    match s.run(&StorageJob::Execute { request: r.clone(), role }) {
        StorageResult::Executed { outcome, update, access: Some(access), .. } => (outcome, update, access),
        other => panic!("unexpected {other:?}"),
    }
}

fn reads(a: &RowAccess) -> Vec<(&str, Option<u64>)> {
    a.reads.iter().map(|(k, w)| (k.as_str(), *w)).collect()
}

fn log(s: &SqliteStorage) -> Vec<(String, u64)> {
    s.install_log().unwrap().into_iter().map(|i| (i.row(), i.writer)).collect()
}

#[test]
fn writers_of_versions_flow_from_locals_to_readers_and_through_state_updates() {
    let app = shop::application();
    let data = (app.generate)(DataConfig { scale: 1, seed: 3 });
    let (mut a, mut b) = (recording(app.clone(), 0, &data), recording(app.clone(), 1, &data));

    // A local writer: the INSERT's key-collision probe reads the missing cart (initial: None).
    let create = req(1, 1, "create_cart", vec![Value::Int(10)]);
    let (o, _, acc) = exec(&mut a, &create, ExecRole::Local);
    assert_eq!(o, Outcome::Committed(vec![]));
    assert_eq!(acc.writer, txn_id(&create));
    assert_eq!(acc.writer, (1 << 32) | 1);
    assert_eq!(reads(&acc), vec![("carts/10", None)]);
    assert_eq!(acc.writes, vec!["carts/10"]);

    let add = req(1, 2, "add_item", vec![Value::Int(10), Value::Int(5), Value::Int(2)]);
    let (_, _, acc) = exec(&mut a, &add, ExecRole::Local);
    assert_eq!(reads(&acc), vec![("carts/10", Some(txn_id(&create))), ("items/5", None), ("cart_lines/10,5", None)]);
    assert_eq!(acc.writes, vec!["cart_lines/10,5"]);

    // A reader sees the writer of the version it read.
    let (_, _, acc) = exec(&mut a, &req(3, 1, "get_cart", vec![Value::Int(10)]), ExecRole::Local);
    assert_eq!(reads(&acc), vec![("cart_lines/10,5", Some(txn_id(&add)))]);
    assert!(acc.writes.is_empty());

    // A global: its re-read of the cart it closes is not listed twice, its update carries its id.
    let order = req(2, 1, "order", vec![Value::Int(10)]);
    let (o, update, acc) = exec(&mut a, &order, ExecRole::Global);
    assert!(o.committed(), "{o:?}");
    let g = txn_id(&order);
    assert_eq!(update.writer, Some(g));
    assert_eq!(
        reads(&acc),
        vec![("carts/10", Some(txn_id(&create))), ("cart_lines/10,5", Some(txn_id(&add))), ("items/5", None), ("orders/10", None)]
    );
    assert_eq!(acc.writes, vec!["items/5", "orders/10", "carts/10"]);

    // Applying it elsewhere installs its versions under its id.
    let replicated = StateUpdate { changes: update.changes.iter().filter(|c| c.table != "carts").cloned().collect(), ..update.clone() };
    assert_eq!(b.run(&StorageJob::Apply { first_seq: 1, updates: vec![replicated] }), StorageResult::Applied { globals_seen: 1, retries: 0 });
    let (_, _, acc) = exec(&mut b, &req(4, 1, "browse_items", vec![Value::Int(5), Value::Int(2)]), ExecRole::Local);
    assert_eq!(reads(&acc), vec![("items/5", Some(g)), ("items/6", None)]);

    // Install orders: own writes at commit, applied updates in order.
    let (c, l) = (txn_id(&create), txn_id(&add));
    assert_eq!(
        log(&a),
        vec![("carts/10".into(), c), ("cart_lines/10,5".into(), l), ("items/5".into(), g), ("orders/10".into(), g), ("carts/10".into(), g)]
    );
    assert_eq!(log(&b), vec![("items/5".into(), g), ("orders/10".into(), g)]);

    // A state update without its writer cannot be installed in recording mode.
    let anonymous = StateUpdate { writer: None, changes: update.changes.into_iter().filter(|c| c.table == "items").collect() };
    let r = b.run(&StorageJob::Apply { first_seq: 2, updates: vec![anonymous] });
    assert!(matches!(&r, StorageResult::Failed(m) if m.contains("without its writer id")), "{r:?}");
}

#[test]
fn aborted_bodies_report_reads_only_and_install_nothing() {
    let app = shop::application();
    let data = (app.generate)(DataConfig { scale: 1, seed: 3 });
    let mut a = recording(app, 0, &data);
    let r = req(1, 1, "add_item", vec![Value::Int(99), Value::Int(5), Value::Int(1)]);
    let (o, _, acc) = exec(&mut a, &r, ExecRole::Local);
    assert!(!o.committed());
    assert_eq!(acc.writer, txn_id(&r));
    assert!(acc.writes.is_empty() && acc.reads.is_empty(), "{acc:?}"); // no cart 99: nothing found
    assert!(log(&a).is_empty());
    // Off by default, and off again.
    let mut plain = SqliteStorage::open_in_memory(shop::application(), InstanceId(0)).unwrap();
    assert!(!plain.recording());
    plain.create_schema().unwrap();
    match plain.run(&StorageJob::Execute { request: req(1, 1, "create_cart", vec![Value::Int(1)]), role: ExecRole::Global }) {
        StorageResult::Executed { access, update, .. } => assert_eq!((access, update.writer), (None, None)),
        other => panic!("{other:?}"),
    }
    assert!(plain.install_log().unwrap().is_empty());
}

// A key-value application with deletes and blind overwrites.
fn put(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    db.execute("insert", p)?;
    Ok(vec![])
}
fn del(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    db.execute("delete", p)?;
    Ok(vec![])
}
fn set(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    db.execute("set", &[p[1].clone(), p[0].clone()])?; // placeholders bind by position
    Ok(vec![])
}
fn kv_data(_: DataConfig) -> Dataset {
    Dataset { tables: vec![TableRows { table: "kv".into(), columns: vec!["k".into(), "v".into()], rows: vec![vec![Value::Int(1), Value::Int(7)]] }] }
}
fn kv() -> Arc<Application> {
    let k = Param { name: "k", ty: ParamType::Int };
    let v = Param { name: "v", ty: ParamType::Int };
    Application::new(
        "kv-delete",
        &["CREATE TABLE kv (k INTEGER PRIMARY KEY, v INTEGER NOT NULL)"],
        vec![
            TxnType { name: "put", params: vec![k.clone(), v.clone()], statements: vec![Statement { name: "insert", sql: "INSERT INTO kv (k, v) VALUES (:k, :v)" }], body: put },
            TxnType { name: "del", params: vec![k.clone()], statements: vec![Statement { name: "delete", sql: "DELETE FROM kv WHERE k = :k" }], body: del },
            TxnType { name: "set", params: vec![k, v], statements: vec![Statement { name: "set", sql: "UPDATE kv SET v = :v WHERE k = :k" }], body: set },
        ],
        kv_data,
    )
    .unwrap()
}

#[test]
fn a_delete_is_a_version_and_a_write_that_changed_nothing_is_replicated() {
    let app = kv();
    let data = kv_data(DataConfig { scale: 1, seed: 1 });
    let (mut a, mut b) = (recording(app.clone(), 0, &data), recording(app.clone(), 1, &data));
    let d = req(1, 1, "del", vec![Value::Int(1)]);
    let (_, u1, acc) = exec(&mut a, &d, ExecRole::Global);
    assert_eq!((reads(&acc), acc.writes.clone()), (vec![("kv/1", None)], vec!["kv/1".to_string()]));
    // Re-inserting the key reads the deleter's version (the row is missing).
    let p = req(1, 2, "put", vec![Value::Int(1), Value::Int(8)]);
    let (_, u2, acc) = exec(&mut a, &p, ExecRole::Global);
    assert_eq!(reads(&acc), vec![("kv/1", Some(txn_id(&d)))]);
    // Setting the value it already has: the changeset has nothing, the update still installs it.
    let s = req(1, 3, "set", vec![Value::Int(1), Value::Int(8)]);
    let (_, u3, acc) = exec(&mut a, &s, ExecRole::Global);
    assert_eq!((reads(&acc), acc.writes.clone()), (vec![("kv/1", Some(txn_id(&p)))], vec!["kv/1".to_string()]));
    assert!(matches!(&u3.changes[..], [c] if matches!(&c.kind, ChangeKind::Update { set, .. } if set.is_empty())), "{u3:?}");
    assert_eq!(b.run(&StorageJob::Apply { first_seq: 1, updates: vec![u1, u2, u3] }), StorageResult::Applied { globals_seen: 3, retries: 0 });
    let ids = [txn_id(&d), txn_id(&p), txn_id(&s)];
    let expected: Vec<(String, u64)> = ids.iter().map(|w| ("kv/1".to_string(), *w)).collect();
    assert_eq!(log(&a), expected);
    assert_eq!(log(&b), expected);
    assert_eq!(a.dump("kv").unwrap(), b.dump("kv").unwrap());
}
