//! Bad input gets an error naming the transaction, the statement and the position; never a plan.

mod common;

use ensemble_analyze::{analyze, analyze_spec, AnalyzeError, Dialect, ErrorKind, Options, Position, StatementError, Weights};
use ensemble_app::{Application, DataConfig, Dataset, Db, Param, ParamType, Statement, TxnError, TxnType};
use ensemble_core::{Rows, Value};

const CARTS: &str = "CREATE TABLE carts (cart_id INTEGER PRIMARY KEY, status TEXT NOT NULL)";

fn errors_of(sql: &str, dialect: Dialect) -> Vec<StatementError> {
    let spec = common::spec("bad", &[CARTS], &[("t", &["cart_id"], &[("s", sql)])]);
    match analyze_spec(&spec, &Options { dialect, ..Options::default() }) {
        Ok(_) => panic!("`{sql}` was accepted"),
        Err(e) => e.statement_errors().to_vec(),
    }
}

fn one_error(sql: &str) -> StatementError {
    let mut v = errors_of(sql, Dialect::Sqlite);
    assert_eq!(v.len(), 1, "{v:?}");
    v.remove(0)
}

fn at(line: u64, column: u64) -> Option<Position> {
    Some(Position { line, column })
}

#[test]
fn sql_that_does_not_parse() {
    let e = one_error("SELECT status FROM carts WHERE cart_id = = :cart_id");
    assert_eq!((e.kind, e.position), (ErrorKind::Syntax, at(1, 42)), "{e}");
    assert_eq!((e.txn.as_str(), e.stmt.as_str()), ("t", "s"));
    let e = one_error("SELECT status\nFROM carts\nWHERE cart_id = :cart_id AND");
    assert_eq!((e.kind, e.position.map(|p| p.line)), (ErrorKind::Syntax, Some(3)), "{e}");
    let text = e.to_string();
    assert!(text.starts_with("transaction `t`, statement `s` at 3:"), "{text}");
    assert!(text.contains("syntax error"), "{text}");
    // Backquoted identifiers are MySQL's: fine there, an error in PostgreSQL.
    let sql = "SELECT `status` FROM carts WHERE cart_id = :cart_id";
    let spec = common::spec("bad", &[CARTS], &[("t", &["cart_id"], &[("s", sql)])]);
    assert!(analyze_spec(&spec, &Options { dialect: Dialect::Mysql, ..Options::default() }).is_ok());
    assert!(!errors_of(sql, Dialect::Postgres).is_empty());
}

#[test]
fn unknown_tables() {
    let e = one_error("SELECT status FROM cartz WHERE cart_id = :cart_id");
    assert_eq!((e.kind, e.position), (ErrorKind::UnknownTable, at(1, 20)), "{e}");
    assert!(e.message.contains("cartz") && e.message.contains("carts"), "{e}");
    let e = one_error("UPDATE nope SET status = 'x' WHERE cart_id = :cart_id");
    assert_eq!((e.kind, e.position), (ErrorKind::UnknownTable, at(1, 8)), "{e}");
    let e = one_error("INSERT INTO nope (a) VALUES (:cart_id)");
    assert_eq!((e.kind, e.position), (ErrorKind::UnknownTable, at(1, 13)), "{e}");
    let e = one_error("DELETE FROM nope WHERE cart_id = :cart_id");
    assert_eq!(e.kind, ErrorKind::UnknownTable, "{e}");
    // An alias that is not in scope.
    let e = one_error("SELECT x.status FROM carts c WHERE c.cart_id = :cart_id");
    assert_eq!((e.kind, e.position), (ErrorKind::UnknownTable, at(1, 8)), "{e}");
}

#[test]
fn unknown_columns() {
    let e = one_error("SELECT stauts FROM carts WHERE cart_id = :cart_id");
    assert_eq!((e.kind, e.position), (ErrorKind::UnknownColumn, at(1, 8)), "{e}");
    assert!(e.message.contains("stauts"), "{e}");
    let e = one_error("SELECT status FROM carts c WHERE c.cart = :cart_id");
    assert_eq!((e.kind, e.position), (ErrorKind::UnknownColumn, at(1, 36)), "{e}");
    let e = one_error("UPDATE carts SET statuz = 'x' WHERE cart_id = :cart_id");
    assert_eq!((e.kind, e.position), (ErrorKind::UnknownColumn, at(1, 18)), "{e}");
    let e = one_error("INSERT INTO carts (cart_id, colour) VALUES (:cart_id, 'red')");
    assert_eq!((e.kind, e.position), (ErrorKind::UnknownColumn, at(1, 29)), "{e}");
    let e = one_error("SELECT status FROM carts WHERE cart_id IN (SELECT nothing FROM carts)");
    assert_eq!((e.kind, e.position), (ErrorKind::UnknownColumn, at(1, 51)), "{e}");
    let e = one_error("DELETE FROM carts WHERE owner = :cart_id");
    assert_eq!((e.kind, e.position), (ErrorKind::UnknownColumn, at(1, 25)), "{e}");
}

#[test]
fn placeholders_that_cannot_be_bound_by_name() {
    let e = one_error("SELECT status FROM carts WHERE cart_id = ?");
    assert_eq!((e.kind, e.position), (ErrorKind::UnknownParameter, at(1, 42)), "{e}");
    assert!(e.message.contains("cart_id"), "names the parameters: {e}");
    let e = one_error("SELECT status FROM carts WHERE cart_id = $1");
    assert_eq!((e.kind, e.position), (ErrorKind::UnknownParameter, at(1, 42)), "{e}");
    let e = one_error("SELECT status FROM carts WHERE cart_id = :1");
    assert_eq!(e.kind, ErrorKind::UnknownParameter, "{e}");
}

#[test]
fn unsupported_constructs() {
    for (sql, pos) in [
        ("WITH c AS (SELECT * FROM carts) SELECT status FROM c", at(1, 1)),
        ("SELECT status FROM carts; DELETE FROM carts", at(1, 27)),
        ("CREATE TABLE x (a INTEGER PRIMARY KEY)", at(1, 1)),
        ("SELECT a.status FROM carts a NATURAL JOIN carts b", at(1, 43)),
        ("UPDATE carts SET status = c2.status FROM carts c2 WHERE carts.cart_id = c2.cart_id", at(1, 1)),
        ("UPDATE OR REPLACE carts SET cart_id = :cart_id", at(1, 1)),
    ] {
        let e = one_error(sql);
        assert_eq!(e.kind, ErrorKind::Unsupported, "{sql}: {e}");
        assert_eq!(e.position, pos, "{sql}: {e}");
    }
}

#[test]
fn every_problem_is_reported_at_once() {
    let spec = common::spec(
        "bad",
        &[CARTS],
        &[
            ("a", &["cart_id"], &[("ok", "SELECT status FROM carts WHERE cart_id = :cart_id"), ("bad1", "SELECT nope FROM carts")]),
            ("b", &[], &[("bad2", "SELEC 1")]),
        ],
    );
    let err = analyze_spec(&spec, &Options::default()).unwrap_err();
    let names: Vec<(&str, &str)> = err.statement_errors().iter().map(|e| (e.txn.as_str(), e.stmt.as_str())).collect();
    assert_eq!(names, vec![("a", "bad1"), ("b", "bad2")]);
    let text = err.to_string();
    assert!(text.starts_with("2 problem(s) in declared statements:"), "{text}");
}

fn nothing(_db: &mut dyn Db, _p: &[Value]) -> Result<Rows, TxnError> {
    Ok(vec![])
}

fn no_data(_: DataConfig) -> Dataset {
    Dataset::default()
}

#[test]
fn an_application_that_parses_but_names_unknown_things() {
    // Application::new only checks that SQLite parses it; the analyzer checks the names.
    let app = Application::new(
        "typo",
        &[CARTS],
        vec![TxnType {
            name: "close",
            params: vec![Param { name: "cart_id", ty: ParamType::Int }],
            statements: vec![Statement { name: "close_cart", sql: "UPDATE carts SET status = 'closed'\n WHERE card_id = :cart_id" }],
            body: nothing,
        }],
        no_data,
    )
    .unwrap();
    let err = analyze(&app, &Options::default()).unwrap_err();
    let [e] = err.statement_errors() else { panic!("{err}") };
    assert_eq!((e.txn.as_str(), e.stmt.as_str(), e.kind, e.position), ("close", "close_cart", ErrorKind::UnknownColumn, at(2, 8)));
    assert_eq!(e.to_string(), "transaction `close`, statement `close_cart` at 2:8: unknown column: no column `card_id` in carts");
}

#[test]
fn bad_weights() {
    let app = ensemble_app::application("shop").unwrap();
    let with = |text: &str| Weights::parse(text, Some("w.toml")).and_then(|weights| analyze(&app, &Options { weights, ..Options::default() }));
    let msg = |r: Result<_, AnalyzeError>| r.map(|_| ()).unwrap_err().to_string();
    assert!(msg(with("nonsense = 1")).contains("no transaction `nonsense`"));
    assert!(msg(with("order = -1")).contains("not negative"));
    assert!(msg(with("order = \"a lot\"")).contains("not a number"));
    assert!(msg(with("[partition_by]\norder = [\"item_id\"]")).contains("no parameter `item_id`"));
    assert!(msg(with("order = ")).contains("w.toml"));
    assert!(with("[weights]\norder = 2.5\n[partition_by]\norder = [\"cart_id\"]").is_ok());
}
