//! Read and write sets: what each kind of SQL contributes, and that whatever the analysis cannot
//! express widens to "any row", never to "no row".

mod common;

use ensemble_analyze::extract::{Access, AccessKind, RwSets};
use ensemble_analyze::{analyze, analyze_spec, Options};

const SCHEMA: &[&str] = &[
    "CREATE TABLE a (id INTEGER PRIMARY KEY, x INTEGER, kind TEXT, v INTEGER)",
    "CREATE TABLE b (id INTEGER PRIMARY KEY, x INTEGER, y INTEGER, email TEXT UNIQUE)",
];

/// The read and write sets of a one-statement transaction `t(p, q)`.
fn sets(sql: &str) -> RwSets {
    let spec = common::spec("rw", SCHEMA, &[("t", &["p", "q"], &[("s", sql)])]);
    let a = analyze_spec(&spec, &Options::default()).unwrap_or_else(|e| panic!("{sql}: {e}"));
    a.sets[0].clone()
}

fn render(e: &Access) -> String {
    let names = ["p", "q"];
    e.condition.render(&e.table, &|i| format!(":{}", names[i]))
}

fn find<'a>(s: &'a RwSets, kind: AccessKind, table: &str) -> Vec<&'a Access> {
    let v = if kind == AccessKind::Read { &s.reads } else { &s.writes };
    v.iter().filter(|e| e.table == table).collect()
}

fn only<'a>(s: &'a RwSets, kind: AccessKind, table: &str) -> &'a Access {
    let v = find(s, kind, table);
    assert_eq!(v.len(), 1, "{kind:?} {table}: {v:?}");
    v[0]
}

fn attrs(e: &Access) -> Vec<&str> {
    e.attributes.iter().map(String::as_str).collect()
}

#[test]
fn select_reads_the_columns_it_mentions_under_its_where_clause() {
    let s = sets("SELECT v FROM a WHERE id = :p AND kind = 'k' ORDER BY x LIMIT :q");
    let r = only(&s, AccessKind::Read, "a");
    assert_eq!(attrs(r), ["*", "id", "kind", "v", "x"]);
    assert_eq!(render(r), "a.id = :p ∧ a.kind = 'k'");
    assert!(s.writes.is_empty());
}

#[test]
fn joins_follow_column_equalities_and_widen_the_rest() {
    // b's rows are bound through a.x = b.x and a.x = :p.
    let s = sets("SELECT b.y FROM a JOIN b ON a.x = b.x WHERE a.x = :p");
    assert_eq!(render(only(&s, AccessKind::Read, "b")), "b.x = :p");
    // The shop's cart_contents: items are joined on a column no parameter binds: any row.
    let s = sets("SELECT a.v, b.y FROM a JOIN b ON b.id = a.x WHERE a.id = :p");
    assert_eq!(render(only(&s, AccessKind::Read, "a")), "a.id = :p");
    assert_eq!(render(only(&s, AccessKind::Read, "b")), "any row");
    // An outer join's ON clause does not restrict the rows read.
    let s = sets("SELECT a.v, b.y FROM a LEFT JOIN b ON b.id = a.x AND b.y = :q WHERE a.id = :p");
    assert_eq!(render(only(&s, AccessKind::Read, "b")), "any row");
    // USING binds like ON.
    let s = sets("SELECT v FROM a JOIN b USING (x) WHERE a.x = :q");
    assert_eq!(render(only(&s, AccessKind::Read, "b")), "b.x = :q");
}

#[test]
fn in_lists_and_or_become_disjunctions() {
    let s = sets("SELECT v FROM a WHERE id IN (:p, :q)");
    assert_eq!(render(only(&s, AccessKind::Read, "a")), "(a.id = :p) ∨ (a.id = :q)");
    let s = sets("SELECT v FROM a WHERE (id = :p AND x = 1) OR kind = 'z'");
    assert_eq!(render(only(&s, AccessKind::Read, "a")), "(a.id = :p ∧ a.x = 1) ∨ (a.kind = 'z')");
    // One unexpressible disjunct makes the whole disjunction "any row".
    let s = sets("SELECT v FROM a WHERE id = :p OR x > 3");
    assert_eq!(render(only(&s, AccessKind::Read, "a")), "any row");
}

#[test]
fn predicates_the_analysis_cannot_express_widen_to_any_row() {
    for w in [
        "id >= :p",
        "id BETWEEN :p AND :q",
        "kind LIKE 'a%'",
        "NOT (id = :p)",
        "id <> :p",
        "id = :p + 1",
        "id = CAST(:p AS INTEGER)",
        "id IN (SELECT x FROM b)",
        "kind IS NULL",
        "id = :not_a_parameter",
    ] {
        let s = sets(&format!("SELECT v FROM a WHERE {w}"));
        assert_eq!(render(only(&s, AccessKind::Read, "a")), "any row", "{w}");
    }
    // A conjunction keeps what it can express.
    let s = sets("SELECT v FROM a WHERE id = :p AND x > 3 AND kind LIKE 'a%'");
    assert_eq!(render(only(&s, AccessKind::Read, "a")), "a.id = :p");
}

#[test]
fn subqueries_and_aggregates_read_too() {
    let s = sets("SELECT count(*) FROM a WHERE x IN (SELECT x FROM b WHERE id = :q)");
    assert_eq!(attrs(only(&s, AccessKind::Read, "a")), ["*", "x"]);
    assert_eq!(render(only(&s, AccessKind::Read, "a")), "any row");
    let r = only(&s, AccessKind::Read, "b");
    assert_eq!(attrs(r), ["*", "id", "x"]);
    assert_eq!(render(r), "b.id = :q");
    // Correlated: the inner table's rows are bound only by what the inner WHERE binds itself.
    let s = sets("SELECT v, (SELECT max(y) FROM b WHERE b.x = a.x) FROM a WHERE id = :p");
    assert_eq!(render(only(&s, AccessKind::Read, "b")), "any row");
    assert_eq!(attrs(only(&s, AccessKind::Read, "b")), ["*", "x", "y"]);
    // Set operations read both sides; derived tables read what the subquery reads.
    let s = sets("SELECT v FROM a WHERE id = :p UNION SELECT y FROM b WHERE id = :q");
    assert_eq!(render(only(&s, AccessKind::Read, "b")), "b.id = :q");
    let s = sets("SELECT d.w FROM (SELECT v AS w FROM a WHERE id = :p) d WHERE d.w = 3");
    assert_eq!(render(only(&s, AccessKind::Read, "a")), "a.id = :p");
    // SELECT * reads every column.
    let s = sets("SELECT * FROM b WHERE id = :p");
    assert_eq!(attrs(only(&s, AccessKind::Read, "b")), ["*", "email", "id", "x", "y"]);
}

#[test]
fn update_writes_its_set_columns_and_reads_what_it_computes_from() {
    let s = sets("UPDATE a SET v = v + x WHERE id = :p");
    let w = only(&s, AccessKind::Write, "a");
    assert_eq!(attrs(w), ["v"]);
    assert_eq!(render(w), "a.id = :p");
    let r = only(&s, AccessKind::Read, "a");
    assert_eq!(attrs(r), ["*", "id", "v", "x"]);
    assert_eq!(render(r), "a.id = :p");
}

#[test]
fn delete_writes_whole_rows() {
    let s = sets("DELETE FROM a WHERE id = :p");
    assert_eq!(attrs(only(&s, AccessKind::Write, "a")), ["*", "id", "kind", "v", "x"]);
    assert_eq!(render(only(&s, AccessKind::Write, "a")), "a.id = :p");
}

#[test]
fn insert_writes_the_row_its_parameters_name_and_reads_its_keys() {
    let s = sets("INSERT INTO a (id, x, kind) VALUES (:p, :q, 'k')");
    let w = only(&s, AccessKind::Write, "a");
    assert_eq!(attrs(w), ["*", "id", "kind", "v", "x"]);
    assert_eq!(render(w), "a.id = :p ∧ a.kind = 'k' ∧ a.x = :q");
    // Whether it succeeds depends on a row with the same key.
    let r = only(&s, AccessKind::Read, "a");
    assert_eq!(attrs(r), ["*", "id"]);
    assert_eq!(render(r), "a.id = :p");
    // Every unique key counts: a collision on email is as possible as one on id.
    let s = sets("INSERT INTO b (id, email) VALUES (:p, :q)");
    assert_eq!(render(only(&s, AccessKind::Read, "b")), "(b.email = :q) ∨ (b.id = :p)");
    // A computed key binds nothing.
    let s = sets("INSERT INTO a (id, x) VALUES (:p * 2, :q)");
    assert_eq!(render(only(&s, AccessKind::Read, "a")), "any row");
    // Several rows: one clause each.
    let s = sets("INSERT INTO a (id) VALUES (:p), (:q)");
    assert_eq!(render(only(&s, AccessKind::Write, "a")), "(a.id = :p) ∨ (a.id = :q)");
    // INSERT … SELECT: reads its source, writes rows it cannot name.
    let s = sets("INSERT INTO a (id, x) SELECT id, x FROM b WHERE id = :p");
    assert_eq!(render(only(&s, AccessKind::Write, "a")), "any row");
    assert_eq!(render(only(&s, AccessKind::Read, "b")), "b.id = :p");
}

#[test]
fn upserts_write_the_colliding_row() {
    let s = sets("INSERT INTO a (id, v) VALUES (:p, 1) ON CONFLICT (id) DO UPDATE SET v = a.v + excluded.v");
    let ws = find(&s, AccessKind::Write, "a");
    assert_eq!(ws.len(), 2);
    let upd = ws.iter().find(|w| attrs(w) == ["v"]).expect("the update of the colliding row");
    assert_eq!(render(upd), "a.id = :p");
    let s = sets("INSERT OR REPLACE INTO b (id, x) VALUES (:p, :q)");
    // REPLACE deletes whatever collides on any unique key: email is not given, so any row.
    assert!(find(&s, AccessKind::Write, "b").iter().any(|w| render(w) == "any row" && w.attributes.contains("*")));
}

#[test]
fn columns_some_update_assigns_do_not_identify_rows() {
    // `kind` is assigned by `u`, so the insert's binding on it is dropped everywhere: a reader of
    // kind = 'z' rows still reads rows the insert created with kind 'a'.
    let spec = common::spec(
        "rw",
        SCHEMA,
        &[
            ("ins", &["p"], &[("s", "INSERT INTO a (id, kind) VALUES (:p, 'a')")]),
            ("u", &["p"], &[("s", "UPDATE a SET kind = 'z' WHERE id = :p")]),
            ("r", &[], &[("s", "SELECT id FROM a WHERE kind = 'z'")]),
        ],
    );
    let a = analyze_spec(&spec, &Options::default()).unwrap();
    assert_eq!(render(only(&a.sets[0], AccessKind::Write, "a")), "a.id = :p");
    assert_eq!(render(only(&a.sets[2], AccessKind::Read, "a")), "any row");
    assert!(a.conflicts.iter().any(|c| c.a == 2 && c.b == 0), "r reads from ins");
}

#[test]
fn different_constants_on_a_column_nobody_updates_do_not_conflict() {
    let spec = common::spec(
        "rw",
        SCHEMA,
        &[
            ("ins", &["p"], &[("s", "INSERT INTO a (id, kind) VALUES (:p, 'a')")]),
            ("r", &[], &[("s", "SELECT id FROM a WHERE kind = 'b'")]),
        ],
    );
    let a = analyze_spec(&spec, &Options::default()).unwrap();
    assert!(!a.conflicts.iter().any(|c| c.a == 1 && c.b == 0), "{:?}", a.conflicts);
}

#[test]
fn shop_values_the_body_computes_bind_nothing() {
    let app = ensemble_app::application("shop").unwrap();
    let a = analyze(&app, &Options::default()).unwrap();
    let order = a.spec.transactions.iter().position(|t| t.name == "order").unwrap();
    let take = a.sets[order].writes.iter().find(|w| w.statement == "take_stock").unwrap();
    // `:item_id` is not a parameter of order: every item may be written.
    assert!(take.condition.is_any());
    assert!(a.sets[order].free_values.contains_key("item_id"));
    assert!(a.sets[order].free_values.contains_key("qty"));
    // The insert of a cart binds its id, not its status (close_cart assigns status).
    let create = a.spec.transactions.iter().position(|t| t.name == "create_cart").unwrap();
    let ins = &a.sets[create].writes[0];
    assert_eq!(ins.condition.render("carts", &|_| ":cart_id".into()), "carts.cart_id = :cart_id");
}

#[test]
fn identifiers_are_case_insensitive() {
    let s = sets("SELECT V FROM A WHERE Id = :p");
    assert_eq!(attrs(only(&s, AccessKind::Read, "a")), ["*", "id", "v"]);
    assert_eq!(render(only(&s, AccessKind::Read, "a")), "a.id = :p");
}

#[test]
fn an_insert_with_a_partly_bound_key_collides_only_where_the_bound_columns_match() {
    // A composite key (cart, item) with the item computed by the body: a colliding row still has
    // the cart the parameter names, so the key read is bound by it, not widened to any row.
    let spec = common::spec(
        "rw",
        &["CREATE TABLE l (cart INTEGER NOT NULL, item INTEGER NOT NULL, qty INTEGER, PRIMARY KEY (cart, item))"],
        &[("t", &["p", "q"], &[("s", "INSERT INTO l (cart, item, qty) VALUES (:p, :computed, :q)")])],
    );
    let a = analyze_spec(&spec, &Options::default()).unwrap();
    let keys: Vec<String> = a.sets[0].reads.iter().filter(|e| e.table == "l").map(|e| e.condition.render("l", &|i| format!(":{}", ["p", "q"][i]))).collect();
    assert_eq!(keys, ["l.cart = :p"], "{:?}", a.sets[0].reads);
}
