//! The synthetic micro-benchmark of Gyro §VII-B / Eliá §7.3: a mix of local and global operations
//! whose service time the experiment fixes (5 ms in the papers). Each operation still does a tiny
//! real write, so every run can be checked like any other.
//!
//! The classes follow from the SQL, so the analyzer derives them: `local_op` touches only its
//! partition's counters; `global_op` reads its partition's counter and the sum of the shared
//! counters, which every partition's `global_op` writes, so it is read from across partitions.

use crate::model::{Application, DataConfig, Dataset, Db, Param, ParamType, Statement, TableRows, TxnError, TxnType};
use crate::workload::{ClientCtx, Workload};
use ensemble_core::{Rows, Value};
use rand::{Rng, RngCore};
use std::sync::Arc;

pub const SCHEMA: &[&str] = &[
    "CREATE TABLE local_counters (part INTEGER NOT NULL, k INTEGER NOT NULL, v INTEGER NOT NULL, PRIMARY KEY (part, k))",
    "CREATE TABLE global_counters (k INTEGER PRIMARY KEY, v INTEGER NOT NULL)",
];

/// Partitions (values of `part`) per unit of scale, and keys per partition and in the global table.
pub const PARTS_PER_SCALE: i64 = 60;
pub const KEYS: i64 = 16;

fn local_op(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    db.write("bump_local", &[p[0].clone(), p[1].clone()])?;
    Ok(db.query("read_local", &[p[0].clone(), p[1].clone()])?)
}

fn global_op(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    db.write("bump_global", &[p[1].clone()])?;
    let mut rows = db.query("read_local", &[p[0].clone(), p[1].clone()])?;
    rows.extend(db.query("sum_global", &[])?);
    Ok(rows)
}

pub fn transactions() -> Vec<TxnType> {
    use ParamType::*;
    vec![
        TxnType {
            name: "local_op",
            params: vec![Param { name: "part", ty: Int }, Param { name: "k", ty: Int }],
            statements: vec![
                Statement { name: "bump_local", sql: "UPDATE local_counters SET v = v + 1 WHERE part = :part AND k = :k" },
                Statement { name: "read_local", sql: "SELECT v FROM local_counters WHERE part = :part AND k = :k" },
            ],
            body: local_op,
        },
        TxnType {
            name: "global_op",
            params: vec![Param { name: "part", ty: Int }, Param { name: "k", ty: Int }],
            statements: vec![
                Statement { name: "bump_global", sql: "UPDATE global_counters SET v = v + 1 WHERE k = :k" },
                Statement { name: "read_local", sql: "SELECT v FROM local_counters WHERE part = :part AND k = :k" },
                Statement { name: "sum_global", sql: "SELECT sum(v) FROM global_counters" },
            ],
            body: global_op,
        },
    ]
}

pub fn generate(cfg: DataConfig) -> Dataset {
    let parts = PARTS_PER_SCALE * cfg.scale.max(1) as i64;
    let local = (0..parts).flat_map(|p| (0..KEYS).map(move |k| vec![Value::Int(p), Value::Int(k), Value::Int(0)])).collect();
    let global = (0..KEYS).map(|k| vec![Value::Int(k), Value::Int(0)]).collect();
    Dataset {
        tables: vec![
            TableRows { table: "local_counters".into(), columns: ["part", "k", "v"].map(String::from).to_vec(), rows: local },
            TableRows { table: "global_counters".into(), columns: ["k", "v"].map(String::from).to_vec(), rows: global },
        ],
    }
}

pub fn application() -> Arc<Application> {
    Application::new("micro", SCHEMA, transactions(), generate).expect("the micro application is well-formed")
}

/// Issues `local_op` with probability `local_fraction`, `global_op` otherwise, always on a
/// partition that routes to the client's home instance.
#[derive(Clone, Debug)]
pub struct MicroWorkload {
    pub local_fraction: f64,
    pub parts: i64,
}

impl Workload for MicroWorkload {
    fn next(&mut self, rng: &mut dyn RngCore, ctx: &ClientCtx) -> (String, Vec<Value>) {
        let n = ctx.instances.max(1) as i64;
        let slots = (self.parts / n).max(1);
        let part = rng.random_range(0..slots) * n + ctx.home.0 as i64;
        let k = rng.random_range(0..KEYS);
        let txn = if rng.random_bool(self.local_fraction.clamp(0.0, 1.0)) { "local_op" } else { "global_op" };
        (txn.into(), vec![Value::Int(part), Value::Int(k)])
    }
}
