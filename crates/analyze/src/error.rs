//! Errors that name the transaction, the statement and the position, so that a wrong declaration
//! is fixed where it is written rather than guessed at from a surprising plan.

use std::fmt;

/// A position in a declared statement's SQL text, 1-based, as the parser reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    pub line: u64,
    pub column: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The SQL does not parse in the chosen dialect.
    Syntax,
    UnknownTable,
    UnknownColumn,
    /// A placeholder that cannot be bound by name (`?`, `$1`, `@x`): the model binds placeholders
    /// by name, so the analysis could not tell a parameter from a computed value.
    UnknownParameter,
    /// SQL the analysis cannot over-approximate (CTEs, multi-table UPDATE/DELETE, table functions,
    /// DDL, …). Refused rather than guessed at: a guess could be optimistic.
    Unsupported,
}

impl ErrorKind {
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Syntax => "syntax error",
            ErrorKind::UnknownTable => "unknown table",
            ErrorKind::UnknownColumn => "unknown column",
            ErrorKind::UnknownParameter => "unknown parameter",
            ErrorKind::Unsupported => "unsupported construct",
        }
    }
}

/// One problem in one declared statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatementError {
    pub txn: String,
    pub stmt: String,
    pub position: Option<Position>,
    pub kind: ErrorKind,
    pub message: String,
}

impl fmt::Display for StatementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "transaction `{}`, statement `{}`", self.txn, self.stmt)?;
        if let Some(p) = self.position {
            write!(f, " at {p}")?;
        }
        write!(f, ": {}: {}", self.kind.name(), self.message)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    /// Every statement problem found, not just the first: one run shows them all.
    #[error("{}", display_list(.0))]
    Statements(Vec<StatementError>),
    #[error("schema: {table}: {message}")]
    Schema { table: String, message: String },
    #[error("weights{}: {message}", path.as_ref().map(|p| format!(" file {p}")).unwrap_or_default())]
    Weights { path: Option<String>, message: String },
    #[error("{0}")]
    Other(String),
}

fn display_list(errors: &[StatementError]) -> String {
    let mut s = format!("{} problem(s) in declared statements:", errors.len());
    for e in errors {
        s.push_str("\n  ");
        s.push_str(&e.to_string());
    }
    s
}

impl AnalyzeError {
    /// The statement problems, if that is what this error is.
    pub fn statement_errors(&self) -> &[StatementError] {
        match self {
            AnalyzeError::Statements(v) => v,
            _ => &[],
        }
    }
}
