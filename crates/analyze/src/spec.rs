//! The analyzer's input: what an application declares, stripped of everything the analysis must
//! not depend on (bodies, data generators).
//!
//! [`Application`] converts into it, but the analyzer does not require one: `Application::new`
//! refuses SQL that does not parse in SQLite, and applications written for PostgreSQL or MySQL
//! (or a test that wants to see the analyzer's own error for broken SQL) need a way in that does
//! not go through that check.

use crate::error::AnalyzeError;
use ensemble_app::{Application, ParamType};
use sqlparser::ast::{ColumnOption, Statement as SqlStatement, TableConstraint};
use sqlparser::dialect::SQLiteDialect;
use sqlparser::parser::Parser;

#[derive(Clone, Debug, PartialEq)]
pub struct AppSpec {
    pub name: String,
    /// [`Application::fingerprint`] of the definition, copied into the plan so that the runtime
    /// refuses the plan for any other definition. Empty for hand-built specs.
    pub fingerprint: String,
    pub tables: Vec<TableSpec>,
    pub transactions: Vec<TxnSpec>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TableSpec {
    pub name: String,
    pub columns: Vec<String>,
    pub primary_key: Vec<String>,
    /// Every key an INSERT can collide on: the primary key and each UNIQUE constraint. An insert
    /// reads whether a colliding row exists, and an upsert writes that row, so a missing key would
    /// make the analysis optimistic.
    pub unique_keys: Vec<Vec<String>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TxnSpec {
    pub name: String,
    pub params: Vec<ParamSpec>,
    pub statements: Vec<StmtSpec>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    /// Two parameters route a conflict to one instance only if equal values route equally; an
    /// `Int` 5 and a `Text` "5" that the database coerces into one column value do not. `None`
    /// when unknown (then types are not compared).
    pub ty: Option<ParamType>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct StmtSpec {
    pub name: String,
    pub sql: String,
}

impl TxnSpec {
    pub fn param_index(&self, name: &str) -> Option<usize> {
        self.params.iter().position(|p| p.name == name)
    }
}

impl TableSpec {
    /// Builds a table from its `CREATE TABLE` statement (SQLite dialect, as the application model
    /// declares schemas).
    pub fn from_ddl(ddl: &str) -> Result<TableSpec, AnalyzeError> {
        let err = |message: String| AnalyzeError::Schema { table: ddl.to_string(), message };
        let parsed = Parser::parse_sql(&SQLiteDialect {}, ddl).map_err(|e| err(e.to_string()))?;
        let [SqlStatement::CreateTable(ct)] = parsed.as_slice() else {
            return Err(err("expected exactly one CREATE TABLE statement".into()));
        };
        let name = ct.name.to_string();
        let mut columns = Vec::new();
        let mut primary_key = Vec::new();
        let mut unique_keys: Vec<Vec<String>> = Vec::new();
        for col in &ct.columns {
            columns.push(col.name.value.clone());
            for o in &col.options {
                match &o.option {
                    ColumnOption::PrimaryKey(_) => primary_key.push(col.name.value.clone()),
                    ColumnOption::Unique(_) => unique_keys.push(vec![col.name.value.clone()]),
                    _ => {}
                }
            }
        }
        let index_columns = |cols: &[sqlparser::ast::IndexColumn]| -> Vec<String> {
            cols.iter().map(|c| c.column.expr.to_string()).collect()
        };
        for c in &ct.constraints {
            match c {
                TableConstraint::PrimaryKey(pk) => primary_key.extend(index_columns(&pk.columns)),
                TableConstraint::Unique(u) => unique_keys.push(index_columns(&u.columns)),
                _ => {}
            }
        }
        if !primary_key.is_empty() {
            unique_keys.insert(0, primary_key.clone());
        }
        Ok(TableSpec { name, columns, primary_key, unique_keys })
    }

    pub fn column(&self, name: &str) -> Option<&str> {
        self.columns.iter().find(|c| c.eq_ignore_ascii_case(name)).map(String::as_str)
    }
}

impl AppSpec {
    pub fn from_application(app: &Application) -> Result<AppSpec, AnalyzeError> {
        let tables = app.tables.iter().map(|t| TableSpec::from_ddl(&t.ddl)).collect::<Result<Vec<_>, _>>()?;
        let transactions = app
            .transactions
            .iter()
            .map(|t| TxnSpec {
                name: t.name.to_string(),
                params: t.params.iter().map(|p| ParamSpec { name: p.name.to_string(), ty: Some(p.ty) }).collect(),
                statements: t.statements.iter().map(|s| StmtSpec { name: s.name.to_string(), sql: s.sql.to_string() }).collect(),
            })
            .collect();
        Ok(AppSpec { name: app.name.to_string(), fingerprint: app.fingerprint(), tables, transactions })
    }

    pub fn table(&self, name: &str) -> Option<(usize, &TableSpec)> {
        self.tables.iter().enumerate().find(|(_, t)| t.name.eq_ignore_ascii_case(name))
    }

    pub fn txn(&self, name: &str) -> Option<&TxnSpec> {
        self.transactions.iter().find(|t| t.name == name)
    }
}
