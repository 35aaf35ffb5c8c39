use ensemble_core::{Request, RequestError, Rows, Value};
use sqlparser::ast::{ColumnOption, Statement as SqlStatement, TableConstraint};
use sqlparser::dialect::SQLiteDialect;
use sqlparser::parser::Parser;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The type of a transaction parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    Int,
    Real,
    Text,
}

impl ParamType {
    pub fn name(self) -> &'static str {
        match self {
            ParamType::Int => "int",
            ParamType::Real => "real",
            ParamType::Text => "text",
        }
    }
    fn accepts(self, v: &Value) -> bool {
        matches!((self, v), (ParamType::Int, Value::Int(_)) | (ParamType::Real, Value::Real(_)) | (ParamType::Text, Value::Text(_)))
    }
}

#[derive(Clone, Debug)]
pub struct Param {
    pub name: &'static str,
    pub ty: ParamType,
}

/// A statement a transaction may run. Placeholders are named (`:cart_id`); a placeholder named
/// like a transaction parameter is bound to that parameter's value, any other one to a value the
/// body computed (which the analyzer must treat as free). Arguments are passed in the order the
/// placeholders first appear.
#[derive(Clone, Debug)]
pub struct Statement {
    pub name: &'static str,
    pub sql: &'static str,
}

/// An application-level decision to abort; nothing the transaction wrote is kept.
#[derive(Debug, Clone, PartialEq)]
pub enum TxnError {
    Abort(String),
    Db(DbError),
}

impl From<DbError> for TxnError {
    fn from(e: DbError) -> Self {
        TxnError::Db(e)
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DbError {
    #[error("statement `{stmt}` is not declared by transaction `{txn}`")]
    Undeclared { txn: String, stmt: String },
    #[error("statement `{stmt}` takes {expected} argument(s), got {got}")]
    Arity { stmt: String, expected: usize, got: usize },
    #[error("statement `{stmt}`: {message}")]
    Engine { stmt: String, message: String },
}

/// What a transaction body sees of the database: only its own declared statements.
pub trait Db {
    fn query(&mut self, stmt: &str, args: &[Value]) -> Result<Rows, DbError>;
    /// Runs a write; returns the number of rows changed.
    fn execute(&mut self, stmt: &str, args: &[Value]) -> Result<usize, DbError>;
    /// Runs a write whose count the body does not use. A storage may send it without waiting
    /// for its answer, with the transaction's next statement or its COMMIT (a server backend
    /// does, saving the write's round trip); should the write then fail, the transaction runs
    /// again with every write waited for, so a body sees the failure here either way and must
    /// only pass it on (`?`).
    fn write(&mut self, stmt: &str, args: &[Value]) -> Result<(), DbError> {
        self.execute(stmt, args).map(|_| ())
    }
}

pub type Body = fn(&mut dyn Db, &[Value]) -> Result<Rows, TxnError>;

#[derive(Clone)]
pub struct TxnType {
    pub name: &'static str,
    pub params: Vec<Param>,
    pub statements: Vec<Statement>,
    pub body: Body,
}

impl std::fmt::Debug for TxnType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnType").field("name", &self.name).field("params", &self.params).field("statements", &self.statements).finish()
    }
}

impl TxnType {
    pub fn statement(&self, name: &str) -> Option<&Statement> {
        self.statements.iter().find(|s| s.name == name)
    }
    pub fn param_index(&self, name: &str) -> Option<usize> {
        self.params.iter().position(|p| p.name == name)
    }
}

/// A column of a table, as declared in the schema.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub name: String,
    pub sql_type: String,
}

/// A table of the schema, read from its `CREATE TABLE` statement.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    pub name: String,
    pub columns: Vec<Column>,
    /// Primary-key columns. Every table needs one: state updates name rows by it.
    pub primary_key: Vec<String>,
    pub ddl: String,
}

impl Table {
    pub fn has_column(&self, c: &str) -> bool {
        self.columns.iter().any(|col| col.name == c)
    }
}

/// Rows of every table for a fresh database.
#[derive(Clone, Debug, Default)]
pub struct Dataset {
    pub tables: Vec<TableRows>,
}

#[derive(Clone, Debug)]
pub struct TableRows {
    pub table: String,
    pub columns: Vec<String>,
    pub rows: Rows,
}

/// How big a generated database is and which random numbers fill it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataConfig {
    pub scale: u32,
    pub seed: u64,
}

/// An application as the runtime, the analyzer and the harness see it.
pub struct Application {
    pub name: &'static str,
    pub tables: Vec<Table>,
    pub transactions: Vec<TxnType>,
    pub generate: fn(DataConfig) -> Dataset,
    by_name: BTreeMap<&'static str, usize>,
    read_only: Vec<bool>,
}

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("application `{app}`: schema statement {index}: {message}")]
    Schema { app: String, index: usize, message: String },
    #[error("application `{app}`, transaction `{txn}`, statement `{stmt}`: {message}")]
    Statement { app: String, txn: String, stmt: String, message: String },
    #[error("application `{app}`: {message}")]
    Other { app: String, message: String },
}

impl Application {
    /// Builds and checks an application: every DDL and statement must parse (SQLite dialect), every
    /// table needs a primary key, names must be unique.
    pub fn new(
        name: &'static str,
        schema: &[&'static str],
        transactions: Vec<TxnType>,
        generate: fn(DataConfig) -> Dataset,
    ) -> Result<Arc<Application>, ModelError> {
        let mut tables = Vec::new();
        for (index, ddl) in schema.iter().enumerate() {
            let err = |message: String| ModelError::Schema { app: name.into(), index, message };
            let parsed = Parser::parse_sql(&SQLiteDialect {}, ddl).map_err(|e| err(e.to_string()))?;
            let [SqlStatement::CreateTable(ct)] = parsed.as_slice() else {
                return Err(err("expected exactly one CREATE TABLE statement".into()));
            };
            let table_name = ct.name.to_string();
            let mut columns = Vec::new();
            let mut primary_key = Vec::new();
            for col in &ct.columns {
                columns.push(Column { name: col.name.value.clone(), sql_type: col.data_type.to_string() });
                if col.options.iter().any(|o| matches!(o.option, ColumnOption::PrimaryKey(_))) {
                    primary_key.push(col.name.value.clone());
                }
            }
            for c in &ct.constraints {
                if let TableConstraint::PrimaryKey(pk) = c {
                    for col in &pk.columns {
                        primary_key.push(col.column.expr.to_string());
                    }
                }
            }
            if primary_key.is_empty() {
                return Err(err(format!("table `{table_name}` has no PRIMARY KEY; state updates name rows by their key")));
            }
            if tables.iter().any(|t: &Table| t.name == table_name) {
                return Err(err(format!("table `{table_name}` is declared twice")));
            }
            tables.push(Table { name: table_name, columns, primary_key, ddl: ddl.to_string() });
        }
        let mut by_name = BTreeMap::new();
        let mut read_only = Vec::new();
        for (i, t) in transactions.iter().enumerate() {
            if by_name.insert(t.name, i).is_some() {
                return Err(ModelError::Other { app: name.into(), message: format!("transaction `{}` is declared twice", t.name) });
            }
            let mut ro = true;
            for s in &t.statements {
                let err = |message: String| ModelError::Statement { app: name.into(), txn: t.name.into(), stmt: s.name.into(), message };
                let parsed = Parser::parse_sql(&SQLiteDialect {}, s.sql).map_err(|e| err(e.to_string()))?;
                let [stmt] = parsed.as_slice() else {
                    return Err(err("a declared statement must be exactly one SQL statement".into()));
                };
                ro &= matches!(stmt, SqlStatement::Query(_));
            }
            read_only.push(ro);
        }
        Ok(Arc::new(Application { name, tables, transactions, generate, by_name, read_only }))
    }

    pub fn txn(&self, name: &str) -> Option<&TxnType> {
        self.by_name.get(name).map(|i| &self.transactions[*i])
    }

    pub fn table(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// True when none of the transaction's declared statements writes.
    pub fn is_read_only(&self, txn: &str) -> bool {
        self.by_name.get(txn).map(|i| self.read_only[*i]).unwrap_or(false)
    }

    /// Checks a request against the declared transaction type: known name, arity, types.
    pub fn check_request(&self, req: &Request) -> Result<&TxnType, RequestError> {
        let t = self.txn(&req.txn).ok_or_else(|| RequestError::UnknownTransaction { txn: req.txn.clone() })?;
        if t.params.len() != req.params.len() {
            return Err(RequestError::Arity { txn: req.txn.clone(), expected: t.params.len(), got: req.params.len() });
        }
        for (index, (p, v)) in t.params.iter().zip(&req.params).enumerate() {
            if !p.ty.accepts(v) {
                return Err(RequestError::ParamType {
                    txn: req.txn.clone(),
                    index,
                    param: p.name.into(),
                    expected: p.ty.name().into(),
                    got: v.type_name().into(),
                });
            }
        }
        Ok(t)
    }

    /// Fingerprint of everything a partition plan is derived from: schema, transaction names,
    /// parameters and declared statements. Bodies are not included (they may only run declared
    /// statements). A plan carries the fingerprint it was made for; the runtime refuses others.
    pub fn fingerprint(&self) -> String {
        let mut h = blake3::Hasher::new();
        h.update(self.name.as_bytes());
        for t in &self.tables {
            h.update(b"\0table\0");
            h.update(t.ddl.as_bytes());
        }
        for t in &self.transactions {
            h.update(b"\0txn\0");
            h.update(t.name.as_bytes());
            for p in &t.params {
                h.update(b"\0param\0");
                h.update(p.name.as_bytes());
                h.update(p.ty.name().as_bytes());
            }
            for s in &t.statements {
                h.update(b"\0stmt\0");
                h.update(s.name.as_bytes());
                h.update(b"\0");
                h.update(s.sql.as_bytes());
            }
        }
        h.finalize().to_hex()[..16].to_string()
    }
}

impl std::fmt::Debug for Application {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Application").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Looks up an application shipped with Ensemble by name.
pub fn application(name: &str) -> Result<Arc<Application>, String> {
    match name {
        "shop" => Ok(crate::apps::shop::application()),
        "micro" => Ok(crate::apps::micro::application()),
        "rubis" => Ok(crate::apps::rubis::application()),
        "tpcw" => Ok(crate::apps::tpcw::application()),
        other => Err(format!("unknown application `{other}` (known: {})", APPLICATIONS.join(", "))),
    }
}

pub const APPLICATIONS: &[&str] = &["shop", "micro", "rubis", "tpcw"];
