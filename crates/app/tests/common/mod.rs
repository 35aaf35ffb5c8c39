//! Helpers the application tests share: a fresh loaded database and terse transaction calls.
#![allow(dead_code)]

use ensemble_app::{Application, DataConfig, InstanceId};
use ensemble_core::{ClientId, Outcome, Request, Rows, Value};
use ensemble_sqlite::SqliteStorage;
use std::sync::Arc;

/// A database with the application's schema and its scale-1 dataset (seed 1).
pub fn fresh(app: &Arc<Application>) -> SqliteStorage {
    let db = SqliteStorage::open_in_memory(Arc::clone(app), InstanceId(0)).unwrap();
    db.create_schema().unwrap();
    db.load(&(app.generate)(DataConfig { scale: 1, seed: 1 }), |_, _, _| true).unwrap();
    db
}

pub fn run(db: &SqliteStorage, txn: &str, params: Vec<Value>) -> Outcome {
    db.execute_direct(&Request { client: ClientId(1), seq: 0, txn: txn.into(), params }).unwrap()
}

pub fn ok(db: &SqliteStorage, txn: &str, params: Vec<Value>) -> Rows {
    match run(db, txn, params) {
        Outcome::Committed(rows) => rows,
        Outcome::Aborted { reason: why, .. } => panic!("{txn} aborted: {why}"),
    }
}

pub fn aborted(db: &SqliteStorage, txn: &str, params: Vec<Value>) -> String {
    match run(db, txn, params) {
        Outcome::Aborted { reason: why, .. } => why,
        Outcome::Committed(rows) => panic!("{txn} committed: {rows:?}"),
    }
}

pub fn i(v: i64) -> Value {
    Value::Int(v)
}

pub fn t(s: &str) -> Value {
    Value::Text(s.into())
}

pub fn int(v: &Value) -> i64 {
    v.as_int().unwrap()
}
