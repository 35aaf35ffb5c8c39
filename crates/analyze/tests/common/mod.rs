//! Building small applications for tests, without going through `Application::new` (which would
//! refuse the broken SQL some tests need).

#![allow(dead_code)]

use ensemble_analyze::{AppSpec, ParamSpec, StmtSpec, TableSpec, TxnSpec};

pub type Txn<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);

pub fn spec(name: &str, ddl: &[&str], txns: &[Txn]) -> AppSpec {
    AppSpec {
        name: name.into(),
        fingerprint: String::new(),
        tables: ddl.iter().map(|d| TableSpec::from_ddl(d).expect("test DDL parses")).collect(),
        transactions: txns
            .iter()
            .map(|(n, ps, ss)| TxnSpec {
                name: n.to_string(),
                params: ps.iter().map(|p| ParamSpec { name: p.to_string(), ty: None }).collect(),
                statements: ss.iter().map(|(sn, sql)| StmtSpec { name: sn.to_string(), sql: sql.to_string() }).collect(),
            })
            .collect(),
    }
}
