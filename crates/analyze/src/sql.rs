//! Parsing declared statements with `sqlparser`, in the dialect the application is written for.
//!
//! Named placeholders (`:cart_id`) need no rewriting in any of the three dialects: sqlparser's
//! expression parser reads a `:` token immediately followed by a word as a placeholder whatever
//! the dialect (a test parses every shipped statement in all three and compares the read and
//! write sets). Positional placeholders (`?`, `$1`) parse too, but the model binds placeholders by
//! name, so they are refused with a precise error instead of being taken for computed values.

use crate::error::{ErrorKind, Position};
use sqlparser::ast::{Statement, Value, ValueWithSpan, Visit, Visitor};
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Span;
use std::ops::ControlFlow;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dialect {
    #[default]
    Sqlite,
    Postgres,
    Mysql,
}

impl Dialect {
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
        }
    }

    pub(crate) fn parser_dialect(self) -> Box<dyn sqlparser::dialect::Dialect> {
        match self {
            Dialect::Sqlite => Box::new(sqlparser::dialect::SQLiteDialect {}),
            Dialect::Postgres => Box::new(sqlparser::dialect::PostgreSqlDialect {}),
            Dialect::Mysql => Box::new(sqlparser::dialect::MySqlDialect {}),
        }
    }
}

impl FromStr for Dialect {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "sqlite" => Ok(Dialect::Sqlite),
            "postgres" | "postgresql" => Ok(Dialect::Postgres),
            "mysql" | "mariadb" => Ok(Dialect::Mysql),
            other => Err(format!("unknown SQL dialect `{other}` (known: sqlite, postgres, mysql)")),
        }
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A problem found in one statement, before the transaction and statement names are attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SqlError {
    pub kind: ErrorKind,
    pub position: Option<Position>,
    pub message: String,
}

impl SqlError {
    pub fn new(kind: ErrorKind, span: Span, message: impl Into<String>) -> SqlError {
        SqlError { kind, position: position(span), message: message.into() }
    }
}

pub(crate) fn position(span: Span) -> Option<Position> {
    (span.start.line > 0).then_some(Position { line: span.start.line, column: span.start.column })
}

/// Parses exactly one statement.
pub(crate) fn parse_one(sql: &str, dialect: Dialect) -> Result<Statement, SqlError> {
    let d = dialect.parser_dialect();
    let mut parsed = Parser::parse_sql(d.as_ref(), sql).map_err(|e| {
        let text = e.to_string();
        let (message, position) = split_location(&text);
        // The parser gives no location for a statement that ends too early: point at its end.
        let position = position.or_else(|| message.contains("found: EOF").then(|| end_of(sql)));
        SqlError { kind: ErrorKind::Syntax, position, message: format!("{message} (dialect {dialect})") }
    })?;
    match parsed.len() {
        1 => Ok(parsed.remove(0)),
        0 => Err(SqlError { kind: ErrorKind::Syntax, position: None, message: "no SQL statement".into() }),
        _ => {
            use sqlparser::ast::Spanned;
            Err(SqlError::new(
                ErrorKind::Unsupported,
                parsed[1].span(),
                "a declared statement must be exactly one SQL statement; declare each one separately",
            ))
        }
    }
}

/// Just past the last character of the text.
fn end_of(sql: &str) -> Position {
    let trimmed = sql.trim_end();
    let line = trimmed.lines().count().max(1) as u64;
    let column = trimmed.lines().last().map(|l| l.chars().count()).unwrap_or(0) as u64 + 1;
    Position { line, column }
}

/// Where a statement starts: its first non-blank character. (sqlparser's spans of some statement
/// kinds start at their object name, not at their keyword.)
pub(crate) fn start_of(sql: &str) -> Option<Position> {
    let mut line = 1;
    let mut column = 1;
    for c in sql.chars() {
        if !c.is_whitespace() {
            return Some(Position { line, column });
        }
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    None
}

/// sqlparser reports positions only inside its error text (`… at Line: 2, Column: 6`); this reads
/// them back so the caller gets a structured position. The SQL itself is never scanned by hand.
fn split_location(text: &str) -> (String, Option<Position>) {
    let text = text.strip_prefix("sql parser error: ").unwrap_or(text);
    if let Some(i) = text.rfind(" at Line: ") {
        let rest = &text[i + " at Line: ".len()..];
        if let Some((l, c)) = rest.split_once(", Column: ") {
            if let (Ok(line), Ok(column)) = (l.trim().parse(), c.trim().parse()) {
                return (text[..i].to_string(), Some(Position { line, column }));
            }
        }
    }
    (text.to_string(), None)
}

/// A placeholder as the model reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Placeholder {
    /// `:name`.
    Named(String),
    /// Anything else: `?`, `$1`, `?1`, `@x`, `:1`.
    Positional(String),
}

pub(crate) fn classify_placeholder(text: &str) -> Placeholder {
    match text.strip_prefix(':') {
        Some(name)
            if name.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_alphanumeric() || c == '_') =>
        {
            Placeholder::Named(name.to_string())
        }
        _ => Placeholder::Positional(text.to_string()),
    }
}

/// Every placeholder of a statement, with where it is.
pub(crate) fn placeholders(stmt: &Statement) -> Vec<(String, Span)> {
    struct V(Vec<(String, Span)>);
    impl Visitor for V {
        type Break = ();
        fn pre_visit_value(&mut self, v: &ValueWithSpan) -> ControlFlow<()> {
            if let Value::Placeholder(p) = &v.value {
                self.0.push((p.clone(), v.span));
            }
            ControlFlow::Continue(())
        }
    }
    let mut v = V(Vec::new());
    let _ = stmt.visit(&mut v);
    v.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_carry_their_position() {
        let e = parse_one("SELECT a FROM t WHERE\n b = = 3", Dialect::Sqlite).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Syntax);
        assert_eq!(e.position, Some(Position { line: 2, column: 6 }));
        assert!(e.message.contains("Expected"), "{}", e.message);
    }

    #[test]
    fn named_placeholders_parse_in_every_dialect() {
        for d in [Dialect::Sqlite, Dialect::Postgres, Dialect::Mysql] {
            let s = parse_one("SELECT a FROM t WHERE b = :x AND c IN (:y, :z) LIMIT :n", d).unwrap();
            let names: Vec<_> = placeholders(&s).into_iter().map(|(p, _)| classify_placeholder(&p)).collect();
            assert_eq!(
                names,
                ["x", "y", "z", "n"].map(|n| Placeholder::Named(n.into())).to_vec(),
                "dialect {d}"
            );
        }
        assert_eq!(classify_placeholder("?"), Placeholder::Positional("?".into()));
        assert_eq!(classify_placeholder("$1"), Placeholder::Positional("$1".into()));
        assert_eq!(classify_placeholder(":1"), Placeholder::Positional(":1".into()));
    }
}
