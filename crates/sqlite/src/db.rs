//! The `Db` a transaction body sees: only its own declared statements, bound positionally.

use ensemble_app::{Db, DbError, TxnType};
use ensemble_core::{Rows, Value};
use rusqlite::types::ValueRef;
use rusqlite::Connection;

pub(crate) struct SqliteDb<'a> {
    pub conn: &'a Connection,
    pub txn: &'a TxnType,
}

/// A SQLite value as an Ensemble value.
pub fn to_value(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Real(f) => Value::Real(f),
        ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    }
}

/// An Ensemble value as a SQLite value.
pub fn to_sql(v: &Value) -> rusqlite::types::Value {
    match v {
        Value::Null => rusqlite::types::Value::Null,
        Value::Int(i) => rusqlite::types::Value::Integer(*i),
        Value::Real(f) => rusqlite::types::Value::Real(*f),
        Value::Text(t) => rusqlite::types::Value::Text(t.clone()),
        Value::Blob(b) => rusqlite::types::Value::Blob(b.clone()),
    }
}

impl SqliteDb<'_> {
    fn prepare(&self, stmt: &str, args: &[Value]) -> Result<rusqlite::CachedStatement<'_>, DbError> {
        let decl = self
            .txn
            .statement(stmt)
            .ok_or_else(|| DbError::Undeclared { txn: self.txn.name.into(), stmt: stmt.into() })?;
        let engine = |e: rusqlite::Error| DbError::Engine { stmt: stmt.into(), message: e.to_string() };
        let mut prepared = self.conn.prepare_cached(decl.sql).map_err(engine)?;
        if prepared.parameter_count() != args.len() {
            return Err(DbError::Arity { stmt: stmt.into(), expected: prepared.parameter_count(), got: args.len() });
        }
        for (i, a) in args.iter().enumerate() {
            prepared.raw_bind_parameter(i + 1, to_sql(a)).map_err(engine)?;
        }
        Ok(prepared)
    }
}

impl Db for SqliteDb<'_> {
    fn query(&mut self, stmt: &str, args: &[Value]) -> Result<Rows, DbError> {
        let engine = |e: rusqlite::Error| DbError::Engine { stmt: stmt.into(), message: e.to_string() };
        let mut prepared = self.prepare(stmt, args)?;
        let n = prepared.column_count();
        let mut rows = prepared.raw_query();
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(engine)? {
            let mut r = Vec::with_capacity(n);
            for i in 0..n {
                r.push(to_value(row.get_ref(i).map_err(engine)?));
            }
            out.push(r);
        }
        Ok(out)
    }

    fn execute(&mut self, stmt: &str, args: &[Value]) -> Result<usize, DbError> {
        let mut prepared = self.prepare(stmt, args)?;
        prepared.raw_execute().map_err(|e| DbError::Engine { stmt: stmt.into(), message: e.to_string() })
    }
}
