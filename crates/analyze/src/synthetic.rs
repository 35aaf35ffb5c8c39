//! Generated applications of any number of transaction types, for the benchmark and for tests
//! of the search's cost: the shipped applications have five types, the papers' have 20 and 26.
//!
//! The shape imitates an OLTP schema: entity tables keyed by `id` and owned (`owner`) by a row of
//! the previous table, read and written by key, by owner, through joins and by range scans, so the
//! conflict graph has the long chains of shared tables real applications have.

use crate::spec::{AppSpec, ParamSpec, StmtSpec, TableSpec, TxnSpec};
use ensemble_app::ParamType;

/// A deterministic generator (xorshift); the benchmark must analyse the same application every
/// run.
struct Gen(u64);

impl Gen {
    fn next(&mut self, m: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % m as u64) as usize
    }
}

/// An application of `types` transaction types over `max(4, types / 4)` tables.
pub fn application(types: usize, seed: u64) -> AppSpec {
    let mut g = Gen(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let n_tables = (types / 4).max(4);
    let tables: Vec<TableSpec> = (0..n_tables)
        .map(|i| TableSpec {
            name: format!("t{i}"),
            columns: ["id", "owner", "grp", "v", "w"].map(String::from).to_vec(),
            primary_key: vec!["id".into()],
            unique_keys: vec![vec!["id".into()]],
        })
        .collect();
    let mut transactions = Vec::new();
    for k in 0..types {
        let mut statements = Vec::new();
        let mut used: Vec<&str> = Vec::new();
        let n_stmts = 1 + g.next(3);
        let home = g.next(n_tables);
        for s in 0..n_stmts {
            let t = if s == 0 { home } else { (home + g.next(2)) % n_tables };
            let u = (t + 1) % n_tables;
            let (sql, ps): (String, &[&str]) = match g.next(8) {
                0 => (format!("SELECT v, w FROM t{t} WHERE id = :id"), &["id"]),
                1 => (format!("SELECT id, v FROM t{t} WHERE owner = :owner"), &["owner"]),
                2 => (format!("UPDATE t{t} SET v = v + :delta WHERE id = :id"), &["delta", "id"]),
                3 => (format!("UPDATE t{t} SET w = :w WHERE owner = :owner AND id = :id"), &["w", "owner", "id"]),
                4 => (format!("INSERT INTO t{t} (id, owner, grp, v, w) VALUES (:id, :owner, :grp, 0, 0)"), &["id", "owner", "grp"]),
                5 => (format!("SELECT a.v, b.w FROM t{t} a JOIN t{u} b ON b.owner = a.id WHERE a.id = :id"), &["id"]),
                6 => (format!("SELECT id FROM t{t} WHERE grp >= :grp ORDER BY id LIMIT 10"), &["grp"]),
                _ => (format!("DELETE FROM t{t} WHERE id = :id AND owner = :owner"), &["id", "owner"]),
            };
            used.extend(ps);
            statements.push(StmtSpec { name: format!("s{s}"), sql });
        }
        let params: Vec<ParamSpec> = ["id", "owner", "grp", "delta", "w"]
            .into_iter()
            .filter(|p| used.contains(p))
            .map(|p| ParamSpec { name: p.into(), ty: Some(ParamType::Int) })
            .collect();
        transactions.push(TxnSpec { name: format!("txn{k}"), params, statements });
    }
    AppSpec { name: format!("synthetic{types}"), fingerprint: String::new(), tables, transactions }
}
