//! An application's schema and declared statements in each server's dialect, derived once with
//! the SQL parser when a storage opens.
//!
//! Applications declare SQLite SQL with named placeholders (`:cart_id`). A placeholder named twice
//! is one parameter, and arguments come in the order names first appear (SQLite's numbering).
//! - Placeholders: PostgreSQL takes `$k`, reusable, so `:x` becomes `$k` with `k` the name's
//!   number; MariaDB takes `?`, one per occurrence, so each occurrence becomes `?` and the
//!   statement keeps which argument each one binds.
//! - Types: `INTEGER` becomes `BIGINT` (SQLite integers are 64-bit), `REAL` double precision;
//!   `TEXT` stays `TEXT`, except on MariaDB where a key or unique column becomes `VARCHAR(255)`,
//!   since InnoDB cannot index a `TEXT` without a prefix length.
//! - State-update capture (for globals): PostgreSQL appends `RETURNING *` to INSERT, UPDATE and
//!   DELETE; MariaDB has `RETURNING` on INSERT and DELETE only, so an UPDATE is captured by
//!   selecting the keys its WHERE clause matches before it runs, and reading those rows back by
//!   key after (exact because no other writer runs at the instance meanwhile; see the crate doc).
//!
//! - Names: MariaDB reserves words the applications use as names (shop's `lines`), so on MariaDB
//!   every table and column name is quoted with backticks.
//!
//! Everything is rewritten on the parsed AST and rendered back; nothing is spliced into SQL text.

use ensemble_app::{Application, Table};
use ensemble_core::Value;
use sqlparser::ast::{
    AssignmentTarget, CharacterLength, ColumnOption, DataType, Expr, FromTable, Ident, ObjectName, ObjectNamePart, SelectItem,
    Statement as Sql, TableConstraint, TableFactor, Value as SqlValue, WildcardAdditionalOptions,
};
use sqlparser::dialect::SQLiteDialect;
use sqlparser::parser::Parser;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::ControlFlow;

/// The server engines Ensemble runs on besides SQLite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Engine {
    Postgres,
    Mariadb,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Postgres => "PostgreSQL",
            Engine::Mariadb => "MariaDB",
        }
    }
}

/// A declared statement as one engine runs it.
#[derive(Clone, Debug)]
pub struct ServerStatement {
    /// The statement as written, placeholders rewritten: what locals and direct runs execute.
    pub sql: String,
    /// For each positional parameter of `sql`, which of the declared arguments it binds.
    pub binds: Vec<usize>,
    /// How many arguments the declared statement takes (distinct placeholder names).
    pub arity: usize,
    /// What a global runs instead, so that its row changes can be captured.
    pub capture: Capture,
    /// How the two-phase-commit baseline makes the statement hold its locks to commit on
    /// PostgreSQL (`crate::twopc`); `None` on MariaDB, where InnoDB's SERIALIZABLE does.
    pub lock: Option<TwoPhaseLock>,
    /// A query that takes no row lock (no `FOR UPDATE`/`FOR SHARE`): running it changes
    /// nothing, so a storage may run it before the body asks for it ([`crate::storage`]'s reads
    /// ahead) and throw its answer away if the body asks something else.
    pub reads_ahead: bool,
}

/// How a statement of the two-phase-commit baseline holds, until its transaction ends, a lock on
/// everything it read, on PostgreSQL. Strict two-phase locking is what makes commit timestamps a
/// serial order (`ensemble_twopc`), and PostgreSQL takes no read locks of its own: a plain
/// SELECT reads a snapshot, and SERIALIZABLE adds SSI's predicate *tracking*, which aborts
/// instead of making the reader wait. It offers row locks (`FOR SHARE`), table locks and
/// advisory locks, and no lock on a key range or on a key that is absent. So a read of rows an
/// INSERT could add is covered by an advisory lock on the values it fixes ([`KeyLock`]) where
/// the application's writes allow one, and a read that neither row nor key locks can cover (a
/// range, a join or an aggregate where the application adds rows or changes the columns read
/// by) locks the tables it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TwoPhaseLock {
    /// An INSERT of given values. A new row is locked by the insert itself, and a concurrent
    /// insert of the same key waits on it; but a duplicate of a committed row is an error that
    /// locks nothing, though it read the row's presence. So it runs first as `sql` (with
    /// `ON CONFLICT DO NOTHING`; `capture_sql` with `RETURNING *` too): if that inserted
    /// nothing, the table is locked and the statement runs as written, failing as it would
    /// have, with the row it met now kept from changing.
    /// `new_rows` gives, for each row it adds, the values of its columns a [`KeyLock`] can lock:
    /// the row's key locks, one for each set of columns some read of the table is key-locked by
    /// ([`Translated::new_row_keys`]), are taken first, exclusive.
    Insert { table: String, sql: String, capture_sql: String, new_rows: Vec<Vec<(String, KeyValue)>> },
    /// One row of `table` named by its whole primary key (with any further conditions): the
    /// row lock covers it, taken by `FOR SHARE` for a SELECT (`sql`), by the write itself for an
    /// UPDATE or DELETE. If it matched no row, it read an absence, which no row lock covers:
    /// the key lock `absent` is taken (the table is locked whole if there is none) and the
    /// statement runs again.
    Key { table: String, sql: Option<String>, absent: Option<KeyLock> },
    /// A join of a driving table with tables each reached by its whole primary key from the
    /// rows before it (`JOIN b ON b.key = a.col`), read by conditions on the driving table
    /// alone. The tables in `whole` (the driving table, unless the WHERE clause names its whole
    /// key) are locked before it runs; the rows it meets in the others are locked by `sql`'s
    /// `FOR SHARE OF` their aliases. A row lock covers a row read only if the join returned
    /// it: a driving row whose partner is absent, or filtered out by the join's condition, is
    /// dropped from the result, and what it read there no row lock covers. So `count_sql`
    /// (binding `count_binds`) counts the driving rows; if the join returned fewer (or, with the
    /// driving row named by its key, none), the tables in `keyed` are locked whole and the
    /// statement runs again, as for [`Self::Key`]. Without it, a transaction that reads a join
    /// would lock every joined table whole, and a 2PC branch holding such a lock on a
    /// replicated table until its decision keeps every other instance's writers of that table
    /// out, whatever rows they write.
    /// With `driving_key`, the driving table is not locked whole but by that key lock, taken
    /// first (its WHERE clause fixes those columns and names none an UPDATE sets), and its
    /// rows by `FOR SHARE OF` too; none counted is then no absence the key lock does not cover.
    Join { whole: Vec<String>, sql: String, keyed: Vec<String>, count_sql: String, count_binds: Vec<usize>, driving_key: Option<KeyLock> },
    /// A read of one table, or of tables joined by inner joins, that no statement of the
    /// application inserts into, whose join conditions, WHERE clause, order and limit name only
    /// columns that no statement updates ([`Mutable`]): which rows it matches, and in what
    /// order, no other transaction can change but by writing a row it returned, a DELETE
    /// included, which `sql`'s `FOR SHARE` keeps out until this transaction ends (on the tables
    /// some statement writes; the others need no lock). A row it did not return stays out (its
    /// key and the columns it is chosen by are fixed, and deleting it leaves a LIMIT's first
    /// rows as they were), and an empty answer stays empty: no table lock. Shop's browsing of items by a range of keys
    /// takes this form; locked whole, every browse kept out every other instance's orders'
    /// stock updates (RESULTS.md, "Ranges of rows no transaction can add to").
    Rows { sql: String },
    /// A read of one table whose WHERE clause fixes some of its columns to values, where every
    /// INSERT gives those columns values and no UPDATE sets them: the rows it can match are
    /// those holding these values, and `key` (taken first) keeps any other from coming in, as
    /// InnoDB's next-key lock on an index would. If which of them it returns no write can change
    /// but through a returned row (as for [`Self::Rows`]), `sql` locks the rows it returns;
    /// otherwise (an aggregate, an OFFSET, a column an UPDATE sets in its choice) `every_row`
    /// (with its binds) locks every row holding the values first, and `sql` is the statement as
    /// written. Locked whole, a customer's look at its cart kept every other customer's cart
    /// writes out until it committed.
    /// A read of tables joined by inner joins, each joined on columns no UPDATE sets, takes the
    /// same form where its WHERE clause fixes such columns of every table some statement adds
    /// rows to (`keys`, one per such table: a new pair of rows must bring a new row of one of
    /// them, with the values its key lock locks): `every_row` then locks the rows of the join
    /// that the WHERE clause's conditions on columns no UPDATE sets match, of the tables some
    /// statement writes. Locked whole, RUBiS's items of a region kept every bid out.
    /// A join of two tables may leave the WHERE clause fixing nothing in one of them that rows
    /// are added to, its `partner`, if the join reaches it by equalities of columns a key lock
    /// can lock with the other's columns: a new row of it joins only a row of the other that
    /// holds its values, so key locks on the values the other's rows reach it by are taken
    /// first, then `every_row` locks the pairs ([`Partner`]). Reached by its whole primary key,
    /// only an absent partner's key needs a key lock (as InnoDB locks a key it looked up and
    /// did not find): a present one is locked with its pair. If the pairs and the absent
    /// partners do not add up to the other's rows (one came or went between the two), the
    /// partner's table is locked whole before the statement runs (RUBiS's bids of a user joined
    /// with their items, most of which are closed, in `old_items`). Reached otherwise, any
    /// number of its rows may hold a value, now or later, so every value reached is key-locked
    /// (TPC-W's latest order of a customer named by user name: `orders` key-locked by the
    /// customer's id).
    Partition { keys: Vec<KeyLock>, sql: String, every_row: Option<(String, Vec<usize>)>, partner: Option<Partner> },
    /// Anything else: these tables are locked before it runs.
    Tables(Vec<String>),
}

/// The table of a [`TwoPhaseLock::Partition`] join of two tables reached from the other table by
/// equalities of its columns `key_columns` (in the table's order, each one a key lock can lock)
/// with the other's. `keys_sql` gives values of `key_columns` to key-lock, from the rows of the
/// other that the read's WHERE clause matches: when `key_columns` is the partner's primary key,
/// the keys of absent partners alone, and `count_sql` counts those rows of the other, present
/// partners or not; otherwise every value they reach it by, and nothing is counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partner {
    pub table: String,
    pub key_columns: Vec<String>,
    pub keys_sql: String,
    pub count_sql: Option<String>,
    /// The arguments `keys_sql` binds, and `count_sql` too.
    pub binds: Vec<usize>,
}

impl Partner {
    /// The key lock of the values `keys_sql` returned as `row`.
    pub fn key(&self, row: &[Value]) -> i64 {
        key_hash(&self.table, &self.key_columns, &row.iter().map(key_encoding).collect::<Vec<_>>())
    }
}

/// A lock on the rows of `table` whose `columns` hold the values `values` gives, those there and
/// those not there yet: what InnoDB's next-key lock on an index of these columns does, and
/// PostgreSQL lacks. It is a transaction-level advisory lock (`pg_advisory_xact_lock`, which
/// `PREPARE TRANSACTION` keeps until `COMMIT PREPARED`) on a 64-bit hash of the table, the
/// columns and the values ([`Self::key`]). A read takes it before it reads (shared, or exclusive
/// in a transaction that writes the table, lest two such readers both upgrade and deadlock), and
/// every INSERT into the table takes it, exclusive, for its new row's values; no UPDATE sets
/// these columns ([`Mutable`]), so no row moves into the set but by an INSERT. Two different
/// sets of values may share a hash: they then wait on each other needlessly, never the reverse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyLock {
    pub table: String,
    pub columns: Vec<String>,
    pub values: Vec<KeyValue>,
}

/// Where a [`KeyLock`]'s value of one column comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyValue {
    /// The statement's argument of this index.
    Arg(usize),
    /// A literal: its SQL and its encoding ([`key_encoding`]).
    Literal { sql: String, encoded: String },
}

impl KeyLock {
    /// The advisory lock's key for the statement's arguments `args`.
    pub fn key(&self, args: &[Value]) -> i64 {
        let encoded: Vec<String> = self.values.iter().map(|v| v.encoded(args)).collect();
        key_hash(&self.table, &self.columns, &encoded)
    }
}

impl KeyValue {
    pub fn encoded(&self, args: &[Value]) -> String {
        match self {
            KeyValue::Arg(i) => key_encoding(&args[*i]),
            KeyValue::Literal { encoded, .. } => encoded.clone(),
        }
    }
}

/// A [`KeyLock`]'s 64-bit key: the first 8 bytes of a BLAKE3 hash of the table, the columns and
/// the values' encodings, the same in every process.
fn key_hash(table: &str, columns: &[String], encoded: &[String]) -> i64 {
    let mut h = blake3::Hasher::new();
    for part in std::iter::once(table).chain(columns.iter().map(String::as_str)).chain(encoded.iter().map(String::as_str)) {
        h.update(part.as_bytes());
        h.update(&[0xff]);
    }
    let bytes: [u8; 8] = h.finalize().as_bytes()[..8].try_into().expect("8 bytes");
    i64::from_le_bytes(bytes)
}

/// A value as a key lock hashes it: two values PostgreSQL's `=` finds equal encode alike, so an
/// integer and a real of the same whole number do too.
pub fn key_encoding(v: &Value) -> String {
    match v {
        Value::Null => "z".into(),
        Value::Int(i) => format!("n{i}"),
        Value::Real(r) if r.fract() == 0.0 && r.abs() < 9.0e15 => format!("n{}", *r as i64),
        Value::Real(r) => format!("r{}", r.to_bits()),
        Value::Text(t) => format!("t{t}"),
        Value::Blob(b) => format!("b{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
    }
}

/// The statement that takes the key locks `keys`, in their order, with its arguments (a function
/// returning `void` read from a subquery, since a client cannot decode `void`).
pub fn key_lock_statement(keys: &[i64], exclusive: bool) -> (String, Vec<Value>) {
    let f = if exclusive { "pg_advisory_xact_lock" } else { "pg_advisory_xact_lock_shared" };
    let calls: Vec<String> = (1..=keys.len()).map(|k| format!("{f}(${k})")).collect();
    (format!("SELECT 1 FROM (SELECT {}) AS keys", calls.join(", ")), keys.iter().map(|k| Value::Int(*k)).collect())
}

/// The value a literal of the SQL gives a key, if it is a number or a string.
fn literal_key(v: &SqlValue) -> Option<KeyValue> {
    let encoded = match v {
        SqlValue::Number(n, _) => match n.parse::<i64>() {
            Ok(i) => key_encoding(&Value::Int(i)),
            Err(_) => key_encoding(&Value::Real(n.parse::<f64>().ok()?)),
        },
        SqlValue::SingleQuotedString(t) => key_encoding(&Value::Text(t.clone())),
        _ => return None,
    };
    Some(KeyValue::Literal { sql: v.to_string(), encoded })
}

/// The value of a key an expression gives: PostgreSQL's placeholder `$k` (argument `k - 1`), or
/// a literal.
fn key_value(e: &Expr) -> Option<KeyValue> {
    let Expr::Value(v) = e else { return None };
    match &v.value {
        SqlValue::Placeholder(p) => p.strip_prefix('$').and_then(|k| k.parse::<usize>().ok()).filter(|k| *k > 0).map(|k| KeyValue::Arg(k - 1)),
        other => literal_key(other),
    }
}

/// What the application's writes can change, read from its declared statements: the tables
/// any statement inserts into (or writes otherwise than by UPDATE or DELETE), and the columns
/// any UPDATE sets. A read whose choice of rows depends on neither is covered by the locks on
/// the rows it returned ([`TwoPhaseLock::Rows`]).
#[derive(Clone, Debug, Default)]
struct Mutable {
    grown: BTreeSet<String>,
    updated: BTreeSet<(String, String)>,
    /// Every table some statement writes, by any kind of write.
    written: BTreeSet<String>,
    /// By table, the columns a [`KeyLock`] can lock: every INSERT into the table gives each a
    /// value (a placeholder or a literal) and no UPDATE sets it, so a row holds the values it
    /// was inserted with. A table written otherwise (an INSERT of a query, an upsert, an UPDATE
    /// that reads other tables) has none.
    keyable: BTreeMap<String, BTreeSet<String>>,
}

impl Mutable {
    fn of(app: &Application) -> Result<Mutable, String> {
        let keyable = app.tables.iter().map(|t| (t.name.to_lowercase(), t.columns.iter().map(|c| c.name.to_lowercase()).collect())).collect();
        let mut m = Mutable { keyable, ..Mutable::default() };
        for txn in &app.transactions {
            for s in &txn.statements {
                match parse_one(s.sql).map_err(|e| format!("transaction `{}`, statement `{}`: {e}", txn.name, s.name))? {
                    Sql::Query(_) => {}
                    Sql::Delete(d) => {
                        let _ = sqlparser::ast::visit_relations(&d, |name: &ObjectName| {
                            m.written.extend(last(name));
                            ControlFlow::<()>::Continue(())
                        });
                    }
                    Sql::Update(u) => {
                        let TableFactor::Table { name, .. } = &u.table.relation else { return Err(format!("statement `{}` updates what is not a table", s.name)) };
                        let table = last(name).unwrap_or_default();
                        m.written.insert(table.clone());
                        if u.from.is_some() || !u.table.joins.is_empty() {
                            m.grown.insert(table.clone());
                            m.keyable.remove(&table);
                        }
                        for a in &u.assignments {
                            let targets = match &a.target {
                                sqlparser::ast::AssignmentTarget::ColumnName(c) => vec![c],
                                sqlparser::ast::AssignmentTarget::Tuple(cs) => cs.iter().collect(),
                            };
                            for c in targets {
                                let c = last(c).unwrap_or_default();
                                if let Some(k) = m.keyable.get_mut(&table) {
                                    k.remove(&c);
                                }
                                m.updated.insert((table.clone(), c));
                            }
                        }
                    }
                    other => {
                        let _ = sqlparser::ast::visit_relations(&other, |name: &ObjectName| {
                            m.grown.extend(last(name));
                            m.written.extend(last(name));
                            ControlFlow::<()>::Continue(())
                        });
                        let given = |e: &Expr| matches!(e, Expr::Value(v) if matches!(v.value, SqlValue::Placeholder(_)) || literal_key(&v.value).is_some());
                        match &other {
                            Sql::Insert(i) => match new_rows(i, app) {
                                Some((table, rows)) => {
                                    if let Some(k) = m.keyable.get_mut(&table) {
                                        for row in &rows {
                                            k.retain(|c| row.iter().any(|(col, e)| col == c && given(e)));
                                        }
                                    }
                                }
                                None => {
                                    let _ = sqlparser::ast::visit_relations(&other, |name: &ObjectName| {
                                        m.keyable.extend(last(name).map(|t| (t, BTreeSet::new())));
                                        ControlFlow::<()>::Continue(())
                                    });
                                }
                            },
                            _ => {
                                let _ = sqlparser::ast::visit_relations(&other, |name: &ObjectName| {
                                    m.keyable.extend(last(name).map(|t| (t, BTreeSet::new())));
                                    ControlFlow::<()>::Continue(())
                                });
                            }
                        }
                    }
                }
            }
        }
        Ok(m)
    }

    /// `q` (a read of `sel`'s plain tables) with `FOR SHARE` on the rows it returns of the
    /// tables some statement writes. A table no statement writes needs no lock: nothing could
    /// conflict with it, and a row lock on PostgreSQL is a write to the row (shared by many
    /// readers at once, a multixact), where RUBiS's every page would lock each category.
    fn lock_written_rows(&self, q: &sqlparser::ast::Query, sel: &sqlparser::ast::Select) -> String {
        use sqlparser::ast::{LockClause, LockType};
        let mut all = 0;
        let mut written = Vec::new();
        for twj in &sel.from {
            for factor in std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation)) {
                let TableFactor::Table { name, alias, .. } = factor else { unreachable!("plain tables only (`inner_joins_of_tables`)") };
                all += 1;
                if last(name).is_some_and(|t| self.written.contains(&t)) {
                    written.push(alias.as_ref().map_or_else(|| name.clone(), |a| ObjectName::from(vec![a.name.clone()])));
                }
            }
        }
        let mut locked = q.clone();
        if written.len() == all {
            locked.locks.push(LockClause { lock_type: LockType::Share, of: None, nonblock: None });
        } else {
            for of in written {
                locked.locks.push(LockClause { lock_type: LockType::Share, of: Some(of), nonblock: None });
            }
        }
        locked.to_string()
    }

    /// Whether `q`, a read of `tables`, chooses, joins and orders its rows by columns no
    /// statement changes, in tables no statement adds rows to. A column is taken by its name
    /// alone, as a column of any of them: a name some statement updates in any of the tables
    /// read makes the answer no.
    fn chooses_by_fixed_columns(&self, tables: &[String], q: &sqlparser::ast::Query) -> bool {
        !tables.iter().any(|t| self.grown.contains(&t.to_lowercase())) && self.chooses_by_unchanged_columns(tables, q)
    }

    /// Whether `q`, a read of `tables`, joins, chooses and orders its rows by columns no UPDATE
    /// sets, and skips none (no OFFSET).
    fn chooses_by_unchanged_columns(&self, tables: &[String], q: &sqlparser::ast::Query) -> bool {
        use sqlparser::ast::LimitClause;
        let tables: Vec<String> = tables.iter().map(|t| t.to_lowercase()).collect();
        // Rows skipped by an OFFSET are not returned, and deleting one would move the window.
        let offset = match &q.limit_clause {
            Some(LimitClause::LimitOffset { offset, limit_by, .. }) => offset.is_some() || !limit_by.is_empty(),
            Some(LimitClause::OffsetCommaLimit { .. }) => true,
            None => false,
        };
        if offset {
            return false;
        }
        // Every column the query names but those it returns: ON, WHERE, ORDER BY and LIMIT.
        let mut chooser = q.clone();
        if let sqlparser::ast::SetExpr::Select(sel) = chooser.body.as_mut() {
            sel.projection = wildcard();
        }
        let mut fixed = true;
        let _ = sqlparser::ast::visit_expressions(&chooser, |e: &Expr| {
            if let Some(c) = column_name(e) {
                let c = c.to_lowercase();
                fixed &= !tables.iter().any(|t| self.updated.contains(&(t.clone(), c.clone())));
            }
            ControlFlow::<()>::Continue(())
        });
        fixed
    }

    /// Whether `e` names no column of `table` that an UPDATE sets.
    fn names_unchanged(&self, table: &str, e: &Expr) -> bool {
        let mut unchanged = true;
        let _ = sqlparser::ast::visit_expressions(e, |e: &Expr| {
            if let Some(c) = column_name(e) {
                unchanged &= !self.updated.contains(&(table.to_lowercase(), c.to_lowercase()));
            }
            ControlFlow::<()>::Continue(())
        });
        unchanged
    }

    /// The key lock of a read of `table` whose WHERE clause is `selection`: on the columns it
    /// fixes to a value, of those a key lock can lock (all of them, in the table's order). `None`
    /// if it fixes none of them.
    fn key_lock(&self, app: &Application, table: &str, selection: Option<&Expr>) -> Option<KeyLock> {
        self.key_lock_of(app, table, &fixed_values(selection?))
    }

    /// The key lock on `fixed`'s columns of `table` (lower-cased, with their values), of those a
    /// key lock can lock. `None` if there is none of them.
    fn key_lock_of(&self, app: &Application, table: &str, fixed: &BTreeMap<String, KeyValue>) -> Option<KeyLock> {
        let keyable = self.keyable.get(&table.to_lowercase())?;
        let schema = app.table(table)?;
        let mut columns = Vec::new();
        let mut values = Vec::new();
        for c in &schema.columns {
            let c = c.name.to_lowercase();
            if let Some(v) = fixed.get(&c).filter(|_| keyable.contains(&c)) {
                columns.push(c);
                values.push(v.clone());
            }
        }
        (!columns.is_empty()).then(|| KeyLock { table: schema.name.clone(), columns, values })
    }
}

/// A row an INSERT adds: each column it gives, with the expression giving its value.
type NewRow = Vec<(String, Expr)>;

/// The rows an INSERT of values adds to its table, each as (column, expression) in the order
/// given (the table's, if it names no columns); `None` for any other INSERT (of a query, an
/// upsert, or naming a table the schema does not declare). Columns lower-cased.
fn new_rows(i: &sqlparser::ast::Insert, app: &Application) -> Option<(String, Vec<NewRow>)> {
    let sqlparser::ast::TableObject::TableName(name) = &i.table else { return None };
    let table = last(name)?;
    let schema = app.table(name.0.last()?.as_ident()?.value.trim_matches('`'))?;
    if i.on.is_some() || i.or.is_some() {
        return None;
    }
    let sqlparser::ast::SetExpr::Values(values) = i.source.as_deref()?.body.as_ref() else { return None };
    let columns: Vec<String> =
        if i.columns.is_empty() { schema.columns.iter().map(|c| c.name.to_lowercase()).collect() } else { i.columns.iter().map(|c| last(c).unwrap_or_default()).collect() };
    let rows = values.rows.iter().map(|r| columns.iter().cloned().zip(r.iter().cloned()).collect()).collect();
    Some((table, rows))
}

/// The columns a conjunction fixes to a value by `column = value` (either way round), each with
/// where its value comes from ([`key_value`]). Columns lower-cased, without their qualifier.
fn fixed_values(cond: &Expr) -> BTreeMap<String, KeyValue> {
    let mut out = BTreeMap::new();
    equalities(cond, &mut |this, other| {
        if let (Some(c), Some(v)) = (column_name(this), key_value(other)) {
            out.insert(c.trim_matches('`').to_lowercase(), v);
        }
    });
    out
}

#[derive(Clone, Debug)]
pub enum Capture {
    /// A query: it changes nothing.
    Read,
    /// The statement with `RETURNING *`: each returned row is the full image of a changed row
    /// (the new row for INSERT and UPDATE, the old row for DELETE).
    Returning { table: String, kind: ChangeSort, sql: String, binds: Vec<usize> },
    /// MariaDB's UPDATE: `keys` selects the primary keys of the rows the WHERE clause matches
    /// (run first, with `key_binds`), `sql` runs the update as written, and `reread` reads each
    /// matched row back by its key.
    ReadBack { table: String, keys: String, key_binds: Vec<usize>, reread: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeSort {
    Insert,
    Update,
    Delete,
}

/// The whole application in one engine's dialect.
#[derive(Debug)]
pub struct Translated {
    pub engine: Engine,
    /// One `CREATE TABLE` per application table, in schema order.
    pub ddl: Vec<String>,
    /// By (transaction name, statement name).
    statements: HashMap<(String, String), ServerStatement>,
    /// The tables each transaction type's declared statements write, by transaction name.
    written: HashMap<String, BTreeSet<String>>,
    /// By table, each set of columns some read key-locks the table by ([`KeyLock`]).
    key_sets: BTreeMap<String, BTreeSet<Vec<String>>>,
}

impl Translated {
    pub fn statement(&self, txn: &str, stmt: &str) -> Option<&ServerStatement> {
        self.statements.get(&(txn.to_string(), stmt.to_string()))
    }

    /// The tables transaction type `txn` may write.
    pub fn written(&self, txn: &str) -> BTreeSet<String> {
        self.written.get(txn).cloned().unwrap_or_default()
    }

    /// The key locks a new row of `table` takes: one per set of columns some read key-locks the
    /// table by, the row's values of them as `value` (a column's name, lower-cased) gives them.
    /// `None` if the row lacks a value of one of them.
    pub fn new_row_keys(&self, table: &str, value: impl Fn(&str) -> Option<String>) -> Option<Vec<i64>> {
        let Some(sets) = self.key_sets.get(table) else { return Some(Vec::new()) };
        sets.iter()
            .map(|columns| {
                let encoded = columns.iter().map(|c| value(c)).collect::<Option<Vec<String>>>()?;
                Some(key_hash(table, columns, &encoded))
            })
            .collect()
    }

    /// The tables a transaction of type `txn` locks before its first statement under
    /// [`TwoPhaseLock`]: those it writes and some statement of it locks whole. Were such a table
    /// locked only when that statement came, after the transaction's writes had taken row locks
    /// in it, the table lock would be an upgrade, and two transactions upgrading at once
    /// deadlock (micro's globals ran at 0.7 operations per second that way).
    pub fn locked_up_front(&self, txn: &str) -> Vec<String> {
        let written = self.written(txn);
        let mut whole = BTreeSet::new();
        for ((t, _), s) in &self.statements {
            if t == txn {
                if let Some(TwoPhaseLock::Tables(tables) | TwoPhaseLock::Join { whole: tables, .. }) = &s.lock {
                    whole.extend(tables.iter().filter(|t| written.contains(*t)).cloned());
                }
            }
        }
        whole.into_iter().collect()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("application `{app}`, {what}: {message}")]
pub struct DialectError {
    pub app: String,
    pub what: String,
    pub message: String,
}

/// Translates the application for `engine`. Fails, naming the statement, on what a server cannot
/// run exactly: an UPDATE that assigns a primary-key column (its captured image would lose the
/// old key) or reaches other tables, a DELETE of several tables.
pub fn translate(app: &Application, engine: Engine) -> Result<Translated, DialectError> {
    let err = |what: String, message: String| DialectError { app: app.name.to_string(), what, message };
    let mut ddl = Vec::new();
    for t in &app.tables {
        ddl.push(table_ddl(t, engine).map_err(|m| err(format!("table `{}`", t.name), m))?);
    }
    let mutable = Mutable::of(app).map_err(|m| err("its statements".into(), m))?;
    let mut statements = HashMap::new();
    let mut written = HashMap::new();
    for txn in &app.transactions {
        let mut writes = BTreeSet::new();
        for s in &txn.statements {
            let what = || format!("transaction `{}`, statement `{}`", txn.name, s.name);
            let translated = statement(app, &mutable, s.sql, engine).map_err(|m| err(what(), m))?;
            match &translated.capture {
                Capture::Read => {}
                Capture::Returning { table, .. } | Capture::ReadBack { table, .. } => {
                    writes.insert(table.clone());
                }
            }
            statements.insert((txn.name.to_string(), s.name.to_string()), translated);
        }
        written.insert(txn.name.to_string(), writes);
    }
    // Every set of columns a read key-locks a table by, which each INSERT into it must lock too.
    let mut key_sets: BTreeMap<String, BTreeSet<Vec<String>>> = BTreeMap::new();
    for s in statements.values() {
        let keys: &[KeyLock] = match &s.lock {
            Some(TwoPhaseLock::Key { absent: Some(k), .. } | TwoPhaseLock::Join { driving_key: Some(k), .. }) => std::slice::from_ref(k),
            Some(TwoPhaseLock::Partition { keys, .. }) => keys,
            _ => &[],
        };
        for k in keys {
            key_sets.entry(k.table.clone()).or_default().insert(k.columns.clone());
        }
        if let Some(TwoPhaseLock::Partition { partner: Some(p), .. }) = &s.lock {
            key_sets.entry(p.table.clone()).or_default().insert(p.key_columns.clone());
        }
    }
    for ((txn, stmt), s) in &statements {
        if let Some(TwoPhaseLock::Insert { table, new_rows, .. }) = &s.lock {
            for columns in key_sets.get(table).into_iter().flatten() {
                if let Some(c) = columns.iter().find(|c| new_rows.iter().any(|row| !row.iter().any(|(col, _)| col == *c))) {
                    return Err(err(format!("transaction `{txn}`, statement `{stmt}`"), format!("inserts into `{table}` without a value of `{c}`, which a read key-locks")));
                }
            }
        }
    }
    Ok(Translated { engine, ddl, statements, written, key_sets })
}

/// A schema name as SQL built here must write it on `engine` (see the module doc).
pub fn ident(engine: Engine, name: &str) -> String {
    match engine {
        Engine::Postgres => name.to_string(),
        Engine::Mariadb => format!("`{name}`"),
    }
}

/// `names` as a comma-separated list of [`ident`]s.
pub fn idents<S: AsRef<str>>(engine: Engine, names: &[S]) -> String {
    names.iter().map(|n| ident(engine, n.as_ref())).collect::<Vec<_>>().join(", ")
}

fn quote(id: &mut Ident, engine: Engine) {
    if engine == Engine::Mariadb && id.quote_style.is_none() {
        id.quote_style = Some('`');
    }
}

fn quote_object(name: &mut ObjectName, engine: Engine) {
    for part in &mut name.0 {
        if let ObjectNamePart::Identifier(id) = part {
            quote(id, engine);
        }
    }
}

/// Quotes every table and column name of a statement for `engine`.
fn quote_names(stmt: &mut Sql, engine: Engine) {
    if engine != Engine::Mariadb {
        return;
    }
    let _ = sqlparser::ast::visit_expressions_mut(stmt, |e: &mut Expr| {
        match e {
            Expr::Identifier(id) => quote(id, engine),
            Expr::CompoundIdentifier(ids) => ids.iter_mut().for_each(|id| quote(id, engine)),
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    let _ = sqlparser::ast::visit_relations_mut(stmt, |name: &mut ObjectName| {
        quote_object(name, engine);
        ControlFlow::<()>::Continue(())
    });
    match stmt {
        Sql::Insert(i) => i.columns.iter_mut().for_each(|c| quote_object(c, engine)),
        Sql::Update(u) => {
            for a in &mut u.assignments {
                match &mut a.target {
                    AssignmentTarget::ColumnName(c) => quote_object(c, engine),
                    AssignmentTarget::Tuple(cs) => cs.iter_mut().for_each(|c| quote_object(c, engine)),
                }
            }
        }
        Sql::CreateTable(ct) => {
            quote_object(&mut ct.name, engine);
            ct.columns.iter_mut().for_each(|c| quote(&mut c.name, engine));
        }
        _ => {}
    }
}

fn parse_one(sql: &str) -> Result<Sql, String> {
    let mut parsed = Parser::parse_sql(&SQLiteDialect {}, sql).map_err(|e| e.to_string())?;
    match parsed.len() {
        1 => Ok(parsed.remove(0)),
        n => Err(format!("expected one statement, found {n}")),
    }
}

fn table_ddl(t: &Table, engine: Engine) -> Result<String, String> {
    let Sql::CreateTable(mut ct) = parse_one(&t.ddl)? else { return Err("not a CREATE TABLE".into()) };
    let mut keyed: Vec<String> = t.primary_key.clone();
    for c in &ct.constraints {
        if let TableConstraint::Unique(u) = c {
            keyed.extend(u.columns.iter().map(|c| c.column.expr.to_string()));
        }
    }
    for col in &mut ct.columns {
        let unique = col.options.iter().any(|o| matches!(o.option, ColumnOption::Unique(_) | ColumnOption::PrimaryKey(_)));
        let is_key = unique || keyed.contains(&col.name.value);
        col.data_type = match (&col.data_type, engine) {
            (DataType::Integer(_) | DataType::Int(_) | DataType::BigInt(_), _) => DataType::BigInt(None),
            (DataType::Real | DataType::Double(_) | DataType::DoublePrecision | DataType::Float(_), _) => DataType::DoublePrecision,
            (DataType::Text, Engine::Mariadb) if is_key => {
                DataType::Varchar(Some(CharacterLength::IntegerLength { length: 255, unit: None }))
            }
            (DataType::Text, _) => DataType::Text,
            (other, _) => return Err(format!("column `{}` has type {other}, which has no mapping to {}", col.name, engine.name())),
        };
    }
    let mut stmt = Sql::CreateTable(ct);
    quote_names(&mut stmt, engine);
    Ok(stmt.to_string())
}

/// The placeholders of a statement in text order: (line, column, name).
fn placeholders<V: sqlparser::ast::Visit>(node: &V) -> Vec<(u64, u64, String)> {
    let mut found = Vec::new();
    let _ = sqlparser::ast::visit_expressions(node, |e: &Expr| {
        if let Expr::Value(v) = e {
            if let SqlValue::Placeholder(name) = &v.value {
                found.push((v.span.start.line, v.span.start.column, name.clone()));
            }
        }
        ControlFlow::<()>::Continue(())
    });
    found.sort();
    found
}

/// Numbers each distinct name by first appearance, as SQLite does.
fn numbering(all: &[(u64, u64, String)]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (_, _, n) in all {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    names
}

/// Rewrites every placeholder in place, for `engine`, numbering names by `names`.
fn rewrite<V: sqlparser::ast::VisitMut>(node: &mut V, names: &[String], engine: Engine) {
    let _ = sqlparser::ast::visit_expressions_mut(node, |e: &mut Expr| {
        if let Expr::Value(v) = e {
            if let SqlValue::Placeholder(name) = &mut v.value {
                let k = names.iter().position(|n| n == name).expect("every placeholder was numbered");
                *name = match engine {
                    Engine::Postgres => format!("${}", k + 1),
                    Engine::Mariadb => "?".to_string(),
                };
            }
        }
        ControlFlow::<()>::Continue(())
    });
}

/// Which declared argument each positional parameter binds, for placeholders found in `node`.
fn binds(found: &[(u64, u64, String)], names: &[String], engine: Engine) -> Vec<usize> {
    match engine {
        Engine::Postgres => (0..names.len()).collect(),
        Engine::Mariadb => found.iter().map(|(_, _, n)| names.iter().position(|x| x == n).expect("numbered")).collect(),
    }
}

fn wildcard() -> Vec<SelectItem> {
    vec![SelectItem::Wildcard(WildcardAdditionalOptions::default())]
}

fn single_table(from: &[sqlparser::ast::TableWithJoins]) -> Result<String, String> {
    match from {
        [t] if t.joins.is_empty() => match &t.relation {
            TableFactor::Table { name, alias: None, .. } => Ok(name.to_string()),
            _ => Err("a write must name its one table directly, without an alias".into()),
        },
        _ => Err("a write must touch exactly one table".into()),
    }
}

fn statement(app: &Application, mutable: &Mutable, sql: &str, engine: Engine) -> Result<ServerStatement, String> {
    let original = parse_one(sql)?;
    let found = placeholders(&original);
    let names = numbering(&found);
    let mut plain = original.clone();
    rewrite(&mut plain, &names, engine);
    quote_names(&mut plain, engine);
    let arity = names.len();
    let positional = binds(&found, &names, engine);
    let returning = |mut stmt: Sql, table: String, kind: ChangeSort| -> Result<Capture, String> {
        match &mut stmt {
            Sql::Insert(i) => i.returning = Some(wildcard()),
            Sql::Update(u) => u.returning = Some(wildcard()),
            Sql::Delete(d) => d.returning = Some(wildcard()),
            _ => unreachable!("only writes are captured"),
        }
        Ok(Capture::Returning { table, kind, sql: stmt.to_string(), binds: positional.clone() })
    };
    let known = |table: String| -> Result<String, String> {
        let bare = table.trim_matches('`');
        app.table(bare).map(|t| t.name.clone()).ok_or_else(|| format!("writes table `{bare}`, which the schema does not declare"))
    };
    let capture = match &plain {
        Sql::Query(_) => Capture::Read,
        Sql::Insert(i) => {
            let table = known(i.table.to_string())?;
            returning(plain.clone(), table, ChangeSort::Insert)?
        }
        Sql::Delete(d) => {
            if !d.tables.is_empty() || d.using.is_some() {
                return Err("a DELETE must touch exactly one table".into());
            }
            let from = match &d.from {
                FromTable::WithFromKeyword(f) | FromTable::WithoutKeyword(f) => f,
            };
            let table = known(single_table(from)?)?;
            returning(plain.clone(), table, ChangeSort::Delete)?
        }
        Sql::Update(u) => {
            if u.from.is_some() {
                return Err("an UPDATE must not read other tables in a FROM clause".into());
            }
            let table = known(single_table(std::slice::from_ref(&u.table))?)?;
            let schema = app.table(&table).expect("checked");
            for a in &u.assignments {
                let bare = |c: &ObjectName| c.to_string().trim_matches('`').to_string();
                let cols: Vec<String> = match &a.target {
                    AssignmentTarget::ColumnName(c) => vec![bare(c)],
                    AssignmentTarget::Tuple(cs) => cs.iter().map(bare).collect(),
                };
                if let Some(c) = cols.iter().find(|c| schema.primary_key.contains(c)) {
                    return Err(format!("assigns primary-key column `{c}` of `{table}`: a captured row image would lose its old key"));
                }
            }
            match engine {
                Engine::Postgres => returning(plain.clone(), table, ChangeSort::Update)?,
                Engine::Mariadb => {
                    let Sql::Update(orig) = &original else { unreachable!() };
                    let key_cols = idents(engine, &schema.primary_key);
                    let from = ident(engine, &table);
                    let (keys, key_binds) = match &orig.selection {
                        Some(selection) => {
                            let found = placeholders(selection);
                            // The WHERE clause as a query's, to rewrite and quote as one.
                            let mut query = parse_one(&format!("SELECT 1 FROM t WHERE {selection}"))?;
                            let Sql::Query(q) = &mut query else { unreachable!() };
                            let sqlparser::ast::SetExpr::Select(sel) = q.body.as_mut() else { unreachable!() };
                            let mut selection = sel.selection.take().expect("a WHERE clause");
                            rewrite(&mut selection, &names, engine);
                            let _ = sqlparser::ast::visit_expressions_mut(&mut selection, |e: &mut Expr| {
                                match e {
                                    Expr::Identifier(id) => quote(id, engine),
                                    Expr::CompoundIdentifier(ids) => ids.iter_mut().for_each(|id| quote(id, engine)),
                                    _ => {}
                                }
                                ControlFlow::<()>::Continue(())
                            });
                            (format!("SELECT {key_cols} FROM {from} WHERE {selection}"), binds(&found, &names, engine))
                        }
                        None => (format!("SELECT {key_cols} FROM {from}"), Vec::new()),
                    };
                    let by_key: Vec<String> = schema.primary_key.iter().map(|c| format!("{} = ?", ident(engine, c))).collect();
                    let reread = format!("SELECT * FROM {from} WHERE {}", by_key.join(" AND "));
                    Capture::ReadBack { table, keys, key_binds, reread }
                }
            }
        }
        other => return Err(format!("only SELECT, INSERT, UPDATE and DELETE can be declared, not `{other}`")),
    };
    let lock = match engine {
        Engine::Postgres => Some(two_phase_lock(app, mutable, &plain, &capture)?),
        Engine::Mariadb => None,
    };
    let reads_ahead = matches!(&plain, Sql::Query(q) if q.locks.is_empty());
    Ok(ServerStatement { sql: plain.to_string(), binds: positional, arity, capture, lock, reads_ahead })
}

/// How `stmt` (already in the engine's dialect) holds its read locks in the two-phase-commit
/// baseline ([`TwoPhaseLock`]).
fn two_phase_lock(app: &Application, mutable: &Mutable, stmt: &Sql, capture: &Capture) -> Result<TwoPhaseLock, String> {
    let mut read = BTreeSet::new();
    let _ = sqlparser::ast::visit_relations(stmt, |name: &ObjectName| {
        read.insert(name.to_string().trim_matches('`').to_string());
        ControlFlow::<()>::Continue(())
    });
    let declared = |t: &str| app.table(t).map(|t| t.name.clone()).ok_or_else(|| format!("reads table `{t}`, which the schema does not declare"));
    let tables = read.iter().map(|t| declared(t)).collect::<Result<Vec<_>, _>>()?;
    let everything = TwoPhaseLock::Tables(tables);
    let keyed = |table: &str, selection: &Option<Expr>| {
        let schema = app.table(table).expect("declared");
        selection.as_ref().is_some_and(|w| names_key(w, &schema.primary_key))
    };
    // A read by whole key that found no row takes the key lock of its primary key's values (of
    // all it fixes, if a key lock cannot lock its key); but a row it did not match for a
    // condition besides the key must not come to match by an UPDATE: if the condition names a
    // column an UPDATE sets, it locks the table instead.
    let absent = |table: &str, selection: Option<&Expr>| {
        if !mutable.names_unchanged(table, selection?) {
            return None;
        }
        let mut k = mutable.key_lock(app, table, selection)?;
        let key = &app.table(table).expect("declared").primary_key;
        if key.iter().all(|c| k.columns.contains(&c.to_lowercase())) {
            let (columns, values) = k.columns.iter().cloned().zip(k.values.iter().cloned()).filter(|(c, _)| key.iter().any(|p| p.to_lowercase() == *c)).unzip();
            k.columns = columns;
            k.values = values;
        }
        Some(k)
    };
    Ok(match (stmt, capture) {
        (Sql::Insert(i), Capture::Returning { table, .. }) => match i.source.as_deref().map(|q| q.body.as_ref()) {
            Some(sqlparser::ast::SetExpr::Values(_)) if i.on.is_none() => {
                let mut quiet = i.clone();
                quiet.on = Some(sqlparser::ast::OnInsert::OnConflict(sqlparser::ast::OnConflict {
                    conflict_target: None,
                    action: sqlparser::ast::OnConflictAction::DoNothing,
                }));
                let sql = Sql::Insert(quiet.clone()).to_string();
                quiet.returning = Some(wildcard());
                let new_rows = new_rows(i, app)
                    .map(|(_, rows)| rows.into_iter().map(|row| row.into_iter().filter_map(|(c, e)| key_value(&e).map(|v| (c, v))).collect()).collect())
                    .unwrap_or_default();
                TwoPhaseLock::Insert { table: table.clone(), sql, capture_sql: Sql::Insert(quiet).to_string(), new_rows }
            }
            _ => everything,
        },
        (Sql::Update(u), Capture::Returning { table, .. } | Capture::ReadBack { table, .. }) if keyed(table, &u.selection) && read.len() == 1 => {
            TwoPhaseLock::Key { table: table.clone(), sql: None, absent: absent(table, u.selection.as_ref()) }
        }
        (Sql::Delete(d), Capture::Returning { table, .. }) if keyed(table, &d.selection) && read.len() == 1 => {
            TwoPhaseLock::Key { table: table.clone(), sql: None, absent: absent(table, d.selection.as_ref()) }
        }
        // Not by its whole key, but by values a key lock locks and columns no UPDATE sets: the
        // rows it matches it locks itself, a row it did not match stays unmatched, and the key
        // lock keeps new ones out (TPC-W's emptying of a cart).
        (Sql::Update(sqlparser::ast::Update { selection: Some(w), .. }) | Sql::Delete(sqlparser::ast::Delete { selection: Some(w), .. }), Capture::Returning { table, .. } | Capture::ReadBack { table, .. })
            if read.len() == 1 && mutable.names_unchanged(table, w) =>
        {
            match mutable.key_lock(app, table, Some(w)) {
                Some(key) => TwoPhaseLock::Partition { keys: vec![key], sql: stmt.to_string(), every_row: None, partner: None },
                None => everything,
            }
        }
        (Sql::Query(q), Capture::Read) => {
            let sqlparser::ast::SetExpr::Select(sel) = q.body.as_ref() else { return Ok(everything) };
            let (mut calls, mut subqueries) = (false, false);
            let _ = sqlparser::ast::visit_expressions(stmt, |e: &Expr| {
                calls |= matches!(e, Expr::Function(_) | Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. });
                subqueries |= matches!(e, Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. });
                ControlFlow::<()>::Continue(())
            });
            let plain_rows = !calls
                && sel.distinct.is_none()
                && sel.having.is_none()
                && matches!(&sel.group_by, sqlparser::ast::GroupByExpr::Expressions(e, _) if e.is_empty())
                && q.with.is_none()
                && q.locks.is_empty();
            let tables: Vec<String> = match &everything {
                TwoPhaseLock::Tables(t) => t.clone(),
                _ => unreachable!("made above"),
            };
            if plain_rows && inner_joins_of_tables(sel) && q.fetch.is_none() && mutable.chooses_by_fixed_columns(&tables, q) {
                return Ok(TwoPhaseLock::Rows { sql: mutable.lock_written_rows(q, sel) });
            }
            if plain_rows && q.limit_clause.is_none() && q.fetch.is_none() && !sel.from.is_empty() && !sel.from[0].joins.is_empty() {
                if let Some(join) = join_lock(app, mutable, q, sel)? {
                    return Ok(join);
                }
            }
            if !subqueries && q.with.is_none() && q.locks.is_empty() && sel.from.len() == 1 && !sel.from[0].joins.is_empty() {
                return Ok(partition_lock(app, mutable, q, sel, plain_rows)?.unwrap_or(everything));
            }
            match single_table(&sel.from) {
                Ok(table) if read.len() == 1 && !subqueries && q.with.is_none() && q.locks.is_empty() => {
                    let table = declared(table.trim_matches('`'))?;
                    let share = |q: &sqlparser::ast::Query| {
                        let mut locked = q.clone();
                        locked.locks.push(sqlparser::ast::LockClause { lock_type: sqlparser::ast::LockType::Share, of: None, nonblock: None });
                        locked.to_string()
                    };
                    if plain_rows && keyed(&table, &sel.selection) {
                        return Ok(TwoPhaseLock::Key { sql: Some(share(q)), absent: absent(&table, sel.selection.as_ref()), table });
                    }
                    let Some(key) = mutable.key_lock(app, &table, sel.selection.as_ref()) else { return Ok(everything) };
                    if plain_rows && q.fetch.is_none() && mutable.chooses_by_unchanged_columns(std::slice::from_ref(&table), q) {
                        TwoPhaseLock::Partition { keys: vec![key], sql: share(q), every_row: None, partner: None }
                    } else {
                        let every_row = every_row(&key)?;
                        TwoPhaseLock::Partition { keys: vec![key], sql: q.to_string(), every_row: Some(every_row), partner: None }
                    }
                }
                _ => everything,
            }
        }
        _ => everything,
    })
}

/// The query that locks every row of `key`'s table holding its values (`FOR SHARE`), with the
/// argument each of its placeholders binds.
fn every_row(key: &KeyLock) -> Result<(String, Vec<usize>), String> {
    let mut binds = Vec::new();
    let conditions: Vec<String> = key
        .columns
        .iter()
        .zip(&key.values)
        .map(|(c, v)| match v {
            KeyValue::Arg(i) => {
                binds.push(*i);
                format!("{c} = ${}", binds.len())
            }
            KeyValue::Literal { sql, .. } => format!("{c} = {sql}"),
        })
        .collect();
    // Parsed and rendered, as every statement built here is.
    let sql = parse_one(&format!("SELECT 1 FROM {} WHERE {} FOR SHARE", key.table, conditions.join(" AND ")))?;
    Ok((sql.to_string(), binds))
}

/// Whether `sel` reads plain tables only, joined by inner joins: `FOR SHARE` then locks a row of
/// each table for every row returned (on the nullable side of an outer join PostgreSQL refuses it).
fn inner_joins_of_tables(sel: &sqlparser::ast::Select) -> bool {
    use sqlparser::ast::JoinOperator;
    let table = |f: &TableFactor| matches!(f, TableFactor::Table { args: None, with_hints, .. } if with_hints.is_empty());
    !sel.from.is_empty()
        && sel.from.iter().all(|twj| {
            table(&twj.relation)
                && twj.joins.iter().all(|j| table(&j.relation) && matches!(j.join_operator, JoinOperator::Join(_) | JoinOperator::Inner(_) | JoinOperator::CrossJoin(_)))
        })
}

/// [`TwoPhaseLock::Join`] for a query of plain rows (no calls, grouping, DISTINCT, limit or
/// lock clause) that joins tables, if it has that shape; `None` otherwise.
fn join_lock(app: &Application, mutable: &Mutable, q: &sqlparser::ast::Query, sel: &sqlparser::ast::Select) -> Result<Option<TwoPhaseLock>, String> {
    use sqlparser::ast::{LockClause, LockType};
    let [from] = sel.from.as_slice() else { return Ok(None) };
    let Some(joined) = Joined::of(app, from)? else { return Ok(None) };
    let (tables, ons) = (&joined.tables, &joined.ons);
    let owner = |e: &Expr| joined.owner(app, e);
    // The columns of `alias` a conjunction fixes to a value or to another table's column.
    let fixed = |cond: &Expr, alias: &str| -> BTreeSet<String> {
        let column = |e: &Expr| owner(e).filter(|(a, _)| a == alias).map(|(_, c)| c);
        let fixes = |other: &Expr| matches!(other, Expr::Value(_)) || owner(other).is_some_and(|(b, _)| b != alias);
        fixed_columns(cond, &column, &fixes)
    };
    let key_of = |table: &str| app.table(table).map(|t| t.primary_key.clone()).unwrap_or_default();
    // Every joined table reached by its whole key.
    for ((alias, table), on) in tables.iter().skip(1).zip(ons.iter()) {
        let key = key_of(table);
        let named = fixed(on, alias);
        if key.is_empty() || !key.iter().all(|k| named.contains(k)) {
            return Ok(None);
        }
    }
    // The WHERE clause reads the driving table alone.
    let (driving_alias, driving) = &tables[0];
    let mut only_driving = true;
    if let Some(w) = &sel.selection {
        let _ = sqlparser::ast::visit_expressions(w, |e: &Expr| {
            if matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) {
                only_driving &= owner(e).is_some_and(|(a, _)| a == *driving_alias);
            }
            ControlFlow::<()>::Continue(())
        });
    }
    if !only_driving {
        return Ok(None);
    }
    let driving_keyed = sel.selection.as_ref().is_some_and(|w| {
        let key = key_of(driving);
        let named = fixed(w, driving_alias);
        !key.is_empty() && key.iter().all(|k| named.contains(k))
    });
    // Not named by its key, the driving table is key-locked by the values its WHERE clause
    // fixes, if it names no column an UPDATE sets (a row it did not choose stays unchosen).
    let driving_key = match (&sel.selection, driving_keyed) {
        (Some(w), false) if mutable.names_unchanged(driving, w) => mutable.key_lock(app, driving, Some(w)),
        _ => None,
    };
    let row_locked: Vec<&(String, String)> = tables.iter().skip(if driving_keyed || driving_key.is_some() { 0 } else { 1 }).collect();
    let mut locked = q.clone();
    for (alias, _) in &row_locked {
        locked.locks.push(LockClause { lock_type: LockType::Share, of: Some(ObjectName::from(vec![Ident::new(alias.clone())])), nonblock: None });
    }
    // The count of driving rows.
    let (count, count_binds) = count_rows(&from.relation, sel.selection.as_slice())?;
    let whole: Vec<String> = if driving_keyed || driving_key.is_some() { Vec::new() } else { vec![driving.clone()] };
    let mut keyed: Vec<String> = row_locked.iter().map(|(_, t)| t.clone()).collect();
    keyed.sort();
    keyed.dedup();
    Ok(Some(TwoPhaseLock::Join { whole, sql: locked.to_string(), keyed, count_sql: count, count_binds, driving_key }))
}

/// The tables a FROM clause of one relation and its joins reads, each as (alias as the query
/// names it, declared table), in FROM order, with the ON condition of each join.
struct Joined<'q> {
    tables: Vec<(String, String)>,
    ons: Vec<&'q Expr>,
}

impl<'q> Joined<'q> {
    /// `None` unless each relation is a plain table under an alias of its own, joined by an
    /// inner join on a condition.
    fn of(app: &Application, from: &'q sqlparser::ast::TableWithJoins) -> Result<Option<Joined<'q>>, String> {
        use sqlparser::ast::{JoinConstraint, JoinOperator};
        let mut tables: Vec<(String, String)> = Vec::new();
        let mut ons: Vec<&Expr> = Vec::new();
        for (i, factor) in std::iter::once(&from.relation).chain(from.joins.iter().map(|j| &j.relation)).enumerate() {
            let TableFactor::Table { name, alias, args: None, with_hints, .. } = factor else { return Ok(None) };
            if !with_hints.is_empty() {
                return Ok(None);
            }
            let table = name.to_string();
            let Some(declared) = app.table(table.trim_matches('"')) else { return Err(format!("reads table `{table}`, which the schema does not declare")) };
            let alias = alias.as_ref().map_or(table.clone(), |a| a.name.value.clone());
            if tables.iter().any(|(a, _)| *a == alias) {
                return Ok(None);
            }
            tables.push((alias, declared.name.clone()));
            if i > 0 {
                match &from.joins[i - 1].join_operator {
                    JoinOperator::Join(JoinConstraint::On(on)) | JoinOperator::Inner(JoinConstraint::On(on)) => ons.push(on),
                    _ => return Ok(None),
                }
            }
        }
        Ok(Some(Joined { tables, ons }))
    }

    /// The alias a column reference is of, with the column: named, or the one table that has
    /// such a column.
    fn owner(&self, app: &Application, e: &Expr) -> Option<(String, String)> {
        let columns = |table: &str| app.table(table).map(|t| t.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>()).unwrap_or_default();
        match e {
            Expr::CompoundIdentifier(ids) if ids.len() == 2 => self.tables.iter().find(|(a, _)| *a == ids[0].value).map(|(a, _)| (a.clone(), ids[1].value.clone())),
            Expr::Identifier(id) => {
                let mut having = self.tables.iter().filter(|(_, t)| columns(t).contains(&id.value));
                match (having.next(), having.next()) {
                    (Some((a, _)), None) => Some((a.clone(), id.value.clone())),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

/// [`TwoPhaseLock::Partition`] for a read of tables joined by inner joins on columns no UPDATE
/// sets, if its WHERE clause fixes, in each table some statement adds rows to, columns a key
/// lock can lock; `None` otherwise. `plain_rows`: it has no call, grouping, DISTINCT or lock
/// clause.
///
/// The rows of the join that the WHERE clause's conditions on unchanged columns (`stable`)
/// match are the only ones it can return: no UPDATE makes another match them, an INSERT that
/// would add one takes a key lock the read holds, and `every_row` locks those there, so none
/// leaves nor changes. Conditions on columns an UPDATE sets only narrow that down.
fn partition_lock(app: &Application, mutable: &Mutable, q: &sqlparser::ast::Query, sel: &sqlparser::ast::Select, plain_rows: bool) -> Result<Option<TwoPhaseLock>, String> {
    let [from] = sel.from.as_slice() else { return Ok(None) };
    let Some(joined) = Joined::of(app, from)? else { return Ok(None) };
    // A column is taken by its name alone, as one of any table joined.
    let unchanged = |e: &Expr| joined.tables.iter().all(|(_, t)| mutable.names_unchanged(t, e));
    if !joined.ons.iter().all(|on| unchanged(on)) {
        return Ok(None);
    }
    let mut stable: Vec<Expr> = Vec::new();
    if let Some(w) = &sel.selection {
        conjuncts(w, &mut |c| {
            if unchanged(c) {
                stable.push(c.clone());
            }
        });
    }
    let mut keys = Vec::new();
    let mut partner = None;
    for (alias, table) in &joined.tables {
        if !mutable.grown.contains(&table.to_lowercase()) {
            continue;
        }
        let mut fixed = BTreeMap::new();
        if let Some(w) = &sel.selection {
            equalities(w, &mut |this, other| {
                if let (Some((a, c)), Some(v)) = (joined.owner(app, this), key_value(other)) {
                    if a == *alias {
                        fixed.insert(c.to_lowercase(), v);
                    }
                }
            });
        }
        match (mutable.key_lock_of(app, table, &fixed), &partner) {
            (Some(k), _) => keys.push(k),
            (None, None) => match partner_of(app, mutable, &joined, from, alias, &stable)? {
                Some(p) => partner = Some(p),
                None => return Ok(None),
            },
            (None, Some(_)) => return Ok(None),
        }
    }
    let tables: Vec<String> = joined.tables.iter().map(|(_, t)| t.clone()).collect();
    // A partner's pairs are locked all (and, reached by key, counted with the absent ones).
    if partner.is_none() && plain_rows && q.fetch.is_none() && mutable.chooses_by_unchanged_columns(&tables, q) {
        return Ok(Some(TwoPhaseLock::Partition { keys, sql: mutable.lock_written_rows(q, sel), every_row: None, partner }));
    }
    let written: Vec<&str> = joined.tables.iter().filter(|(_, t)| mutable.written.contains(&t.to_lowercase())).map(|(a, _)| a.as_str()).collect();
    if written.is_empty() {
        return Ok(Some(TwoPhaseLock::Partition { keys, sql: q.to_string(), every_row: None, partner: None }));
    }
    let of: String = written.iter().map(|a| format!(" FOR SHARE OF {a}")).collect();
    let mut rows = parse_one(&format!("SELECT 1 FROM {from}{}{of}", where_all(&stable)))?;
    let binds = renumber_placeholders(&mut rows)?;
    Ok(Some(TwoPhaseLock::Partition { keys, sql: q.to_string(), every_row: Some((rows.to_string(), binds)), partner }))
}

/// [`Partner`] for the table under `alias` of a join of two tables, if the ON clause is made of
/// equalities of its columns with the other's, some of which a key lock can lock, and no
/// condition of `stable` (the WHERE clause's conditions `every_row` keeps) names it: then a row
/// of it joins a row of the other that `stable` matches only with the values that row reaches
/// it by: `every_row` locks the pairs there are, and a new one needs a row holding values
/// key-locked.
/// Reached by its whole primary key, each row of the other has one partner at most, and only
/// an absent one's key needs a key lock: a row of the partner can come into the join only with
/// such a key.
fn partner_of(app: &Application, mutable: &Mutable, joined: &Joined, from: &sqlparser::ast::TableWithJoins, alias: &str, stable: &[Expr]) -> Result<Option<Partner>, String> {
    let ([(a0, t0), (a1, t1)], [on]) = (joined.tables.as_slice(), joined.ons.as_slice()) else { return Ok(None) };
    let (table, other, other_alias) = if a0 == alias { (t0, &from.joins[0].relation, a1) } else { (t1, &from.relation, a0) };
    let Some(schema) = app.table(table) else { return Ok(None) };
    let keyable = |c: &str| mutable.keyable.get(&table.to_lowercase()).is_some_and(|cols| cols.contains(&c.to_lowercase()));
    // The other's column each of its columns is reached from.
    let mut reached = BTreeMap::new();
    let mut only_equalities = true;
    conjuncts(on, &mut |c| match c {
        Expr::BinaryOp { left, op: sqlparser::ast::BinaryOperator::Eq, right } => match (joined.owner(app, left), joined.owner(app, right)) {
            (Some((l, lc)), Some((r, _))) if l == alias && r == *other_alias => {
                reached.insert(lc, right.as_ref().clone());
            }
            (Some((l, _)), Some((r, rc))) if l == *other_alias && r == alias => {
                reached.insert(rc, left.as_ref().clone());
            }
            _ => only_equalities = false,
        },
        _ => only_equalities = false,
    });
    if !only_equalities {
        return Ok(None);
    }
    // Every column `stable` names must be the other table's, by name or as its only owner.
    let mut of_other = true;
    for c in stable {
        let _ = sqlparser::ast::visit_expressions(c, |e: &Expr| {
            if matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) {
                of_other &= joined.owner(app, e).is_some_and(|(a, _)| a == *other_alias);
            }
            ControlFlow::<()>::Continue(())
        });
    }
    if !of_other {
        return Ok(None);
    }
    let key = &schema.primary_key;
    let by_key = !key.is_empty() && key.iter().all(|k| reached.contains_key(k) && keyable(k));
    // The columns key-locked, in the table's order, and the other's columns they are reached from.
    let key_columns: Vec<&str> = schema
        .columns
        .iter()
        .map(|c| c.name.as_str())
        .filter(|c| if by_key { key.iter().any(|k| k == c) } else { reached.contains_key(*c) && keyable(c) })
        .collect();
    if key_columns.is_empty() {
        return Ok(None);
    }
    let from_other: Vec<String> = key_columns.iter().map(|k| reached[*k].to_string()).collect();
    let keys = match by_key {
        true => format!(
            "SELECT {} FROM {other} LEFT JOIN {} ON {on} WHERE {alias}.{} IS NULL{}",
            from_other.join(", "),
            joined_relation(from, alias),
            key_columns[0],
            stable.iter().map(|c| format!(" AND {c}")).collect::<String>()
        ),
        false => format!("SELECT DISTINCT {} FROM {other}{}", from_other.join(", "), where_all(stable)),
    };
    let mut keys = parse_one(&keys)?;
    let binds = renumber_placeholders(&mut keys)?;
    let count_sql = match by_key {
        true => {
            let (count, count_binds) = count_rows(other, stable)?;
            // Both queries bind the same arguments in the same order: `stable`'s placeholders.
            if count_binds != binds {
                return Ok(None);
            }
            Some(count)
        }
        false => None,
    };
    Ok(Some(Partner {
        table: table.clone(),
        key_columns: key_columns.iter().map(|c| c.to_lowercase()).collect(),
        keys_sql: keys.to_string(),
        count_sql,
        binds,
    }))
}

/// The relation of `from` (its first, or one joined) named `alias`, as the query wrote it.
fn joined_relation<'f>(from: &'f sqlparser::ast::TableWithJoins, alias: &str) -> &'f TableFactor {
    let named = |f: &TableFactor| matches!(f, TableFactor::Table { name, alias: a, .. } if a.as_ref().map_or(name.to_string(), |a| a.name.value.clone()) == alias);
    std::iter::once(&from.relation).chain(from.joins.iter().map(|j| &j.relation)).find(|f| named(f)).expect("an alias of the join")
}

/// The query counting the rows of `relation` that every one of `conditions` holds for, its
/// placeholders numbered afresh, with the argument each binds.
fn count_rows(relation: &TableFactor, conditions: &[Expr]) -> Result<(String, Vec<usize>), String> {
    let mut count = parse_one(&format!("SELECT count(*) FROM {relation}{}", where_all(conditions)))?;
    let binds = renumber_placeholders(&mut count)?;
    Ok((count.to_string(), binds))
}

/// ` WHERE` and every one of `conditions`, joined by AND; nothing if there is none.
fn where_all(conditions: &[Expr]) -> String {
    match conditions {
        [] => String::new(),
        _ => format!(" WHERE {}", conditions.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" AND ")),
    }
}

/// Numbers `stmt`'s placeholders afresh by first appearance, giving the argument each binds
/// (`$k` of a translated statement binds argument k - 1 on PostgreSQL).
fn renumber_placeholders(stmt: &mut Sql) -> Result<Vec<usize>, String> {
    let mut binds = Vec::new();
    let mut bad = None;
    let _ = sqlparser::ast::visit_expressions_mut(stmt, |e: &mut Expr| {
        if let Expr::Value(v) = e {
            if let SqlValue::Placeholder(p) = &mut v.value {
                match p.strip_prefix('$').and_then(|k| k.parse::<usize>().ok()).filter(|k| *k > 0) {
                    Some(k) => {
                        let at = binds.iter().position(|b| *b == k - 1).unwrap_or_else(|| {
                            binds.push(k - 1);
                            binds.len() - 1
                        });
                        *p = format!("${}", at + 1);
                    }
                    None => bad = Some(p.clone()),
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
    match bad {
        Some(p) => Err(format!("placeholder `{p}` is not PostgreSQL's `$k`")),
        None => Ok(binds),
    }
}

/// The column an expression names, plain or qualified (`stock`, `i.stock`), without its
/// qualifier.
fn column_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Identifier(id) => Some(id.value.clone()),
        Expr::CompoundIdentifier(ids) => ids.last().map(|id| id.value.clone()),
        _ => None,
    }
}

/// The table a (possibly schema-qualified) name names, lower-cased as [`Mutable`] keeps names.
fn last(name: &ObjectName) -> Option<String> {
    name.0.last().and_then(|p| p.as_ident()).map(|id| id.value.to_lowercase())
}

/// Whether `selection`, a conjunction, fixes every column of `key` to a value
/// (`column = placeholder` or `column = literal`, either way round).
fn names_key(selection: &Expr, key: &[String]) -> bool {
    let named = fixed_columns(selection, &column_name, &|other| matches!(other, Expr::Value(_)));
    !key.is_empty() && key.iter().all(|k| named.contains(k))
}

/// The columns a conjunction fixes by an equality `column = other` (either way round), where
/// `column` names the column an expression is (or `None`) and `fixes` says whether `other`
/// fixes it.
fn fixed_columns(cond: &Expr, column: &dyn Fn(&Expr) -> Option<String>, fixes: &dyn Fn(&Expr) -> bool) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    equalities(cond, &mut |this, other| out.extend(column(this).filter(|_| fixes(other))));
    out
}

/// Each condition of a conjunction, in order (an OR is one condition).
fn conjuncts<'e>(cond: &'e Expr, each: &mut dyn FnMut(&'e Expr)) {
    match cond {
        Expr::Nested(inner) => conjuncts(inner, each),
        Expr::BinaryOp { left, op: sqlparser::ast::BinaryOperator::And, right } => {
            conjuncts(left, each);
            conjuncts(right, each);
        }
        other => each(other),
    }
}

/// Calls `each(a, b)` and `each(b, a)` for every equality `a = b` a conjunction is made of.
fn equalities(cond: &Expr, each: &mut dyn FnMut(&Expr, &Expr)) {
    conjuncts(cond, &mut |c| {
        if let Expr::BinaryOp { left, op: sqlparser::ast::BinaryOperator::Eq, right } = c {
            each(left, right);
            each(right, left);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use ensemble_app::apps;

    #[test]
    fn placeholders_are_numbered_by_first_appearance_and_reused_on_postgres() {
        let app = apps::tpcw::application();
        let t = translate(&app, Engine::Postgres).unwrap();
        let s = t.statement("getBestSellers", "best_sellers").unwrap();
        assert!(s.sql.contains("i_subject = $1"), "{}", s.sql);
        assert!(s.sql.contains("o_date > $2 OR (o_date = $2 AND o_id >= $3)"), "{}", s.sql);
        assert_eq!(s.arity, 3);
        assert_eq!(s.binds, vec![0, 1, 2]);
    }

    #[test]
    fn mariadb_binds_each_occurrence() {
        let app = apps::tpcw::application();
        let t = translate(&app, Engine::Mariadb).unwrap();
        let s = t.statement("getBestSellers", "best_sellers").unwrap();
        assert!(!s.sql.contains(':') && !s.sql.contains('$'), "{}", s.sql);
        assert_eq!(s.binds, vec![0, 1, 1, 2]);
        assert_eq!(s.arity, 3);
    }

    #[test]
    fn writes_are_captured_by_returning_or_read_back() {
        let app = apps::shop::application();
        let pg = translate(&app, Engine::Postgres).unwrap();
        let Capture::Returning { sql, kind, .. } = &pg.statement("add_item", "update_line").unwrap().capture else { panic!() };
        assert_eq!(*kind, ChangeSort::Update);
        assert!(sql.ends_with("RETURNING *"), "{sql}");
        let my = translate(&app, Engine::Mariadb).unwrap();
        let Capture::ReadBack { keys, key_binds, reread, .. } = &my.statement("add_item", "update_line").unwrap().capture else {
            panic!()
        };
        assert_eq!(keys, "SELECT `cart_id`, `item_id` FROM `cart_lines` WHERE `cart_id` = ? AND `item_id` = ?");
        // The update binds (new_qty, cart_id, item_id); its WHERE clause only the last two.
        assert_eq!(*key_binds, vec![1, 2]);
        assert_eq!(reread, "SELECT * FROM `cart_lines` WHERE `cart_id` = ? AND `item_id` = ?");
        let Capture::Returning { kind, .. } = &my.statement("add_item", "insert_line").unwrap().capture else { panic!() };
        assert_eq!(*kind, ChangeSort::Insert);
    }

    #[test]
    fn ddl_maps_types_per_engine() {
        let app = apps::tpcw::application();
        let my = translate(&app, Engine::Mariadb).unwrap();
        let customer = my.ddl.iter().find(|d| d.starts_with("CREATE TABLE `customer`")).unwrap();
        assert!(customer.contains("`c_uname` VARCHAR(255) NOT NULL UNIQUE"), "{customer}");
        assert!(customer.contains("`c_id` BIGINT PRIMARY KEY"), "{customer}");
        // A word MariaDB reserves, as shop's column name.
        let shop = translate(&apps::shop::application(), Engine::Mariadb).unwrap();
        let orders = shop.ddl.iter().find(|d| d.starts_with("CREATE TABLE `orders`")).unwrap();
        assert!(orders.contains("`lines` BIGINT NOT NULL"), "{orders}");
        let pg = translate(&app, Engine::Postgres).unwrap();
        let country = pg.ddl.iter().find(|d| d.starts_with("CREATE TABLE country")).unwrap();
        assert!(country.contains("co_exchange DOUBLE PRECISION"), "{country}");
        assert!(country.contains("co_name TEXT NOT NULL UNIQUE"), "{country}");
    }

    #[test]
    fn two_phase_locks_lock_tables_where_a_row_lock_cannot_cover_the_read() {
        let pg = translate(&apps::shop::application(), Engine::Postgres).unwrap();
        let lock = |t: &str, s: &str| pg.statement(t, s).unwrap().lock.clone().unwrap();
        // The whole key: the row lock covers it.
        let TwoPhaseLock::Key { table, sql: Some(sql), .. } = lock("add_item", "line_qty") else { panic!("{:?}", lock("add_item", "line_qty")) };
        assert_eq!(table, "cart_lines");
        assert!(sql.ends_with("FOR SHARE"), "{sql}");
        assert!(matches!(lock("add_item", "update_line"), TwoPhaseLock::Key { sql: None, .. }));
        let TwoPhaseLock::Insert { table, sql, capture_sql, .. } = lock("create_cart", "insert_cart") else { panic!() };
        assert_eq!(table, "carts");
        assert_eq!(sql, "INSERT INTO carts (cart_id, status) VALUES ($1, 'open') ON CONFLICT DO NOTHING");
        assert!(capture_sql.ends_with("ON CONFLICT DO NOTHING RETURNING *"), "{capture_sql}");
        // A cart's lines, which orders insert into: by the key lock of the cart.
        assert!(matches!(lock("get_cart", "cart_lines"), TwoPhaseLock::Partition { every_row: None, .. }));
        // A join whose items are reached by their key from a cart's lines: the cart's key lock,
        // its lines and items by row, and the cart's lines counted to see that none lost its
        // item.
        let TwoPhaseLock::Join { whole, sql, keyed, count_sql, count_binds, driving_key } = lock("order", "cart_contents") else { panic!("{:?}", lock("order", "cart_contents")) };
        assert!(whole.is_empty());
        assert_eq!(keyed, vec!["cart_lines".to_string(), "items".to_string()]);
        assert_eq!(driving_key.map(|k| (k.table, k.columns)), Some(("cart_lines".to_string(), vec!["cart_id".to_string()])));
        assert!(sql.ends_with("ORDER BY l.item_id FOR SHARE OF l FOR SHARE OF i"), "{sql}");
        assert_eq!(count_sql, "SELECT count(*) FROM cart_lines l WHERE l.cart_id = $1");
        assert_eq!(count_binds, vec![0]);
        assert!(matches!(lock("browse_items", "items_from"), TwoPhaseLock::Rows { .. }));
        assert_eq!(pg.written("order"), ["carts", "items", "orders"].iter().map(|t| t.to_string()).collect());
        // `order` reads a cart's lines and items by row: nothing needs locking first.
        assert!(pg.locked_up_front("order").is_empty());
        assert!(pg.locked_up_front("add_item").is_empty());
    }

    #[test]
    fn a_read_whose_rows_no_write_can_change_is_locked_by_the_rows_it_returns() {
        let shop = apps::shop::application();
        let pg = translate(&shop, Engine::Postgres).unwrap();
        let lock = |t: &str, s: &str| pg.statement(t, s).unwrap().lock.clone().unwrap();
        // Shop never adds an item nor changes an item's key: a range of items by key, and an
        // item by key even where it is absent, are covered by their rows' locks.
        let TwoPhaseLock::Rows { sql } = lock("browse_items", "items_from") else { panic!("{:?}", lock("browse_items", "items_from")) };
        assert_eq!(sql, "SELECT item_id, name, price, stock FROM items WHERE item_id >= $1 ORDER BY item_id LIMIT $2 FOR SHARE");
        assert!(matches!(lock("add_item", "item_stock"), TwoPhaseLock::Rows { .. }));
        // Cart lines are inserted: a cart's lines are not `Rows` (`Partition` instead).
        assert!(!matches!(lock("get_cart", "cart_lines"), TwoPhaseLock::Rows { .. }));
        let mutable = Mutable::of(&shop).unwrap();
        let fixed = |sql: &str| {
            let Sql::Query(q) = parse_one(sql).unwrap() else { panic!() };
            mutable.chooses_by_fixed_columns(&["items".to_string()], &q)
        };
        assert!(fixed("SELECT item_id, stock FROM items WHERE item_id >= 3 ORDER BY item_id LIMIT 5"));
        // Chosen by a column `take_stock` updates, ordered by one, or past rows an OFFSET skips
        // (deleting one would move the window): not covered.
        assert!(!fixed("SELECT item_id FROM items WHERE stock > 0"));
        assert!(!fixed("SELECT item_id FROM items ORDER BY stock LIMIT 5"));
        assert!(!fixed("SELECT item_id FROM items ORDER BY item_id LIMIT 5 OFFSET 10"));
        // TPC-W's searches join items with their authors by columns no transaction changes;
        // new products are ordered by the publication date `adminUpdate` sets.
        let tpcw = translate(&apps::tpcw::application(), Engine::Postgres).unwrap();
        let TwoPhaseLock::Rows { sql } = tpcw.statement("doTitleSearch", "by_title").unwrap().lock.clone().unwrap() else { panic!() };
        // Authors are never written: only the items are locked.
        assert!(sql.ends_with("ORDER BY i_title, i_id LIMIT 50 FOR SHARE OF item"), "{sql}");
        assert!(!matches!(tpcw.statement("getNewProducts", "new_products").unwrap().lock, Some(TwoPhaseLock::Rows { .. })));
        // RUBiS registers items: its searches of items are not `Rows`.
        let rubis = translate(&apps::rubis::application(), Engine::Postgres).unwrap();
        assert!(!matches!(rubis.statement("SearchItemsByCategory", "items_in_category").unwrap().lock, Some(TwoPhaseLock::Rows { .. })));
        // No statement writes the categories: reading them locks nothing.
        assert_eq!(rubis.statement("BrowseCategories", "categories").unwrap().lock, Some(TwoPhaseLock::Rows { sql: "SELECT id, name FROM categories ORDER BY id".into() }));
    }

    #[test]
    fn a_read_of_rows_an_insert_can_add_is_locked_by_the_values_it_fixes() {
        let tpcw = translate(&apps::tpcw::application(), Engine::Postgres).unwrap();
        let lock = |t: &str, s: &str| tpcw.statement(t, s).unwrap().lock.clone().unwrap();
        // A cart's lines: the cart's key lock, then the lines it returns (no UPDATE sets the
        // columns it is chosen and ordered by).
        let TwoPhaseLock::Partition { keys, sql, every_row: None, .. } = lock("getCart", "cart_lines") else { panic!("{:?}", lock("getCart", "cart_lines")) };
        let [key] = keys.as_slice() else { panic!("{keys:?}") };
        assert_eq!((key.table.as_str(), key.columns.clone(), key.values.clone()), ("shopping_cart_line", vec!["scl_sc_id".to_string()], vec![KeyValue::Arg(0)]));
        assert!(sql.ends_with("WHERE scl_sc_id = $1 ORDER BY scl_i_id FOR SHARE"), "{sql}");
        // Counted, the lines are all locked first; emptied, the DELETE locks them.
        let TwoPhaseLock::Partition { every_row: Some((rows, binds)), sql, .. } = lock("doCart", "count_lines") else { panic!("{:?}", lock("doCart", "count_lines")) };
        assert_eq!((rows.as_str(), binds), ("SELECT 1 FROM shopping_cart_line WHERE scl_sc_id = $1 FOR SHARE", vec![0]));
        assert_eq!(sql, "SELECT COUNT(*) FROM shopping_cart_line WHERE scl_sc_id = $1");
        assert!(matches!(lock("doBuyConfirm", "clear_cart"), TwoPhaseLock::Partition { every_row: None, .. }));
        assert!(tpcw.locked_up_front("doBuyConfirm").is_empty());
        // A read by key that finds no row takes its key's key lock.
        let TwoPhaseLock::Key { absent: Some(absent), .. } = lock("doBuyConfirm", "order_exists") else { panic!("{:?}", lock("doBuyConfirm", "order_exists")) };
        assert_eq!((absent.table.as_str(), absent.columns.clone()), ("orders", vec!["o_id".to_string()]));
        // An INSERT takes the key lock of each set of columns reads lock the table by, for its
        // row's values: the same key as a read of the same values, and another for another.
        let TwoPhaseLock::Insert { table, new_rows, .. } = lock("doCart", "insert_line") else { panic!("{:?}", lock("doCart", "insert_line")) };
        let args = [Value::Int(7), Value::Int(12), Value::Int(1)];
        let of_row = |args: &[Value]| tpcw.new_row_keys(&table, |c| new_rows[0].iter().find(|(col, _)| col == c).map(|(_, v)| v.encoded(args))).unwrap();
        let keys = of_row(&args);
        assert_eq!(keys.len(), 2, "by cart, and by cart and item");
        assert!(keys.contains(&key.key(&[Value::Int(7)])));
        assert!(!keys.contains(&key.key(&[Value::Int(8)])));
        // Equal values encode alike whatever their type; different ones do not.
        assert_eq!(key_encoding(&Value::Real(7.0)), key_encoding(&Value::Int(7)));
        assert_ne!(key_encoding(&Value::Text("7".into())), key_encoding(&Value::Int(7)));
        // A column an UPDATE sets is never key-locked: RUBiS's items by category and end date
        // lock the category, and every item in it, since closing an item sets its end date.
        let rubis = translate(&apps::rubis::application(), Engine::Postgres).unwrap();
        let Some(TwoPhaseLock::Partition { keys, every_row: Some((rows, _)), .. }) = rubis.statement("SearchItemsByCategory", "items_in_category").unwrap().lock.clone() else { panic!() };
        assert_eq!(keys.iter().map(|k| k.columns.clone()).collect::<Vec<_>>(), vec![vec!["category".to_string()]]);
        assert_eq!(rows, "SELECT 1 FROM items WHERE category = $1 FOR SHARE");
        // Shop's `take_stock` sets an item's stock: no key lock by stock, and a read by key that
        // also names it would lock the table on finding no row (a row it did not match could
        // come to match).
        let shop = apps::shop::application();
        let mutable = Mutable::of(&shop).unwrap();
        assert!(!mutable.keyable["items"].contains("stock"));
        assert!(!mutable.names_unchanged("items", &Expr::Identifier(Ident::new("stock"))));
    }

    #[test]
    fn a_join_is_locked_by_the_values_its_where_clause_fixes_in_each_table_rows_are_added_to() {
        let rubis = translate(&apps::rubis::application(), Engine::Postgres).unwrap();
        let lock = |t: &str, s: &str| rubis.statement(t, s).unwrap().lock.clone().unwrap();
        // Items of a category whose sellers live in a region: items and users are both
        // registered, so each is key-locked by the value the WHERE clause fixes in it; closing
        // an item sets its end date, so the rows are locked by category and region alone, and
        // the statement runs as written (its OFFSET skips rows).
        let TwoPhaseLock::Partition { keys, sql, every_row: Some((rows, binds)), partner: None } = lock("SearchItemsByRegion", "items_in_region") else { panic!("{:?}", lock("SearchItemsByRegion", "items_in_region")) };
        let keys: Vec<_> = keys.into_iter().map(|k| (k.table, k.columns, k.values)).collect();
        assert_eq!(keys, vec![("items".to_string(), vec!["category".to_string()], vec![KeyValue::Arg(0)]), ("users".to_string(), vec!["region".to_string()], vec![KeyValue::Arg(1)])]);
        assert_eq!(rows, "SELECT 1 FROM items i JOIN users u ON u.id = i.seller WHERE i.category = $1 AND u.region = $2 FOR SHARE OF i FOR SHARE OF u");
        assert_eq!(binds, vec![0, 1]);
        assert_eq!(sql, rubis.statement("SearchItemsByRegion", "items_in_region").unwrap().sql);
        // So a registration takes the key lock of its user's region, the same as the search's.
        let TwoPhaseLock::Insert { table, new_rows, .. } = lock("RegisterUser", "insert_user") else { panic!("{:?}", lock("RegisterUser", "insert_user")) };
        assert!(rubis.key_sets["users"].contains(&vec!["region".to_string()]), "{:?}", rubis.key_sets["users"]);
        let search_key = |r: i64| key_hash("users", &["region".to_string()], &[key_encoding(&Value::Int(r))]);
        let region_column = new_rows[0].iter().find(|(c, _)| c == "region").map(|(_, v)| v.clone()).unwrap();
        let KeyValue::Arg(at) = region_column else { panic!("{region_column:?}") };
        let mut args = vec![Value::Null; at + 1];
        args[at] = Value::Int(3);
        let keys = rubis.new_row_keys(&table, |c| new_rows[0].iter().find(|(col, _)| col == c).map(|(_, v)| v.encoded(&args))).unwrap();
        assert!(keys.contains(&search_key(3)) && !keys.contains(&search_key(4)), "{keys:?}");
        // Bids of a user on items no statement adds to, chosen and ordered by unchanged columns:
        // the user's bids key lock, then the bids it returns.
        let TwoPhaseLock::Partition { keys, sql, every_row: None, .. } = lock("AboutMeWonItems", "won_in_old_items") else { panic!("{:?}", lock("AboutMeWonItems", "won_in_old_items")) };
        assert_eq!(keys.iter().map(|k| (k.table.as_str(), k.columns.clone())).collect::<Vec<_>>(), vec![("bids", vec!["user_id".to_string()])]);
        assert!(sql.ends_with("ORDER BY o.end_date DESC, o.id FOR SHARE OF b"), "{sql}");
        // A user's bids joined with their items, reached by key, which the WHERE clause fixes
        // nothing in: the user's bids key lock, the key locks of the items absent (most bids are
        // on closed items, in `old_items`), the pairs, and the count that shows none missed.
        let TwoPhaseLock::Partition { keys, every_row: Some((rows, _)), partner: Some(partner), .. } = lock("AboutMeBids", "bids_on_open_items") else { panic!("{:?}", lock("AboutMeBids", "bids_on_open_items")) };
        assert_eq!(keys.iter().map(|k| (k.table.as_str(), k.columns.clone())).collect::<Vec<_>>(), vec![("bids", vec!["user_id".to_string()])]);
        assert_eq!(rows, "SELECT 1 FROM bids b JOIN items i ON i.id = b.item_id WHERE b.user_id = $1 FOR SHARE OF b FOR SHARE OF i");
        assert_eq!((partner.table.as_str(), partner.key_columns.clone(), partner.binds.clone()), ("items", vec!["id".to_string()], vec![0]));
        assert_eq!(partner.keys_sql, "SELECT b.item_id FROM bids b LEFT JOIN items i ON i.id = b.item_id WHERE i.id IS NULL AND b.user_id = $1");
        assert_eq!(partner.count_sql.as_deref(), Some("SELECT count(*) FROM bids b WHERE b.user_id = $1"));
        // An absent item's key lock is the one a registration of that item takes.
        assert!(rubis.key_sets["items"].contains(&vec!["id".to_string()]));
        assert_eq!(partner.key(&[Value::Int(99)]), key_hash("items", &["id".to_string()], &[key_encoding(&Value::Int(99))]));
        // The same with the items first in the join.
        assert!(matches!(lock("AboutMeWonItems", "won_in_items"), TwoPhaseLock::Partition { partner: Some(_), .. }));
        // TPC-W's new products: no statement adds items or authors, but `adminUpdate` sets the
        // publication date they are ordered by: every item of the subject is locked first; the
        // authors, never written, are not.
        let tpcw = translate(&apps::tpcw::application(), Engine::Postgres).unwrap();
        let Some(TwoPhaseLock::Partition { keys, every_row: Some((rows, binds)), .. }) = tpcw.statement("getNewProducts", "new_products").unwrap().lock.clone() else { panic!() };
        assert!(keys.is_empty());
        assert_eq!((rows.as_str(), binds), ("SELECT 1 FROM item JOIN author ON a_id = i_a_id WHERE i_subject = $1 FOR SHARE OF item", vec![0]));
        // The orders of a customer named by user name, reached by the customer's id, not their
        // key: the name's key lock, then a key lock on each id the customers so named have (a
        // new order of theirs must hold one), then the pairs; nothing to count.
        let Some(TwoPhaseLock::Partition { keys, every_row: Some((rows, binds)), partner: Some(partner), .. }) = tpcw.statement("getMostRecentOrder", "latest_order_id").unwrap().lock.clone() else {
            panic!("{:?}", tpcw.statement("getMostRecentOrder", "latest_order_id").unwrap().lock)
        };
        assert_eq!(keys.iter().map(|k| (k.table.as_str(), k.columns.clone())).collect::<Vec<_>>(), vec![("customer", vec!["c_uname".to_string()])]);
        assert_eq!((partner.table.as_str(), partner.key_columns.clone(), partner.binds.clone()), ("orders", vec!["o_c_id".to_string()], vec![0]));
        assert_eq!((partner.keys_sql.as_str(), partner.count_sql.as_deref()), ("SELECT DISTINCT c_id FROM customer WHERE c_uname = $1", None));
        assert_eq!((rows.as_str(), binds), ("SELECT 1 FROM customer JOIN orders ON o_c_id = c_id WHERE c_uname = $1 FOR SHARE OF customer FOR SHARE OF orders", vec![0]));
        // So every new order takes the key lock of its customer's id, the same as the read's.
        let TwoPhaseLock::Insert { table, new_rows, .. } = tpcw.statement("doBuyConfirm", "insert_order").unwrap().lock.clone().unwrap() else { panic!() };
        assert!(tpcw.key_sets["orders"].contains(&vec!["o_c_id".to_string()]), "{:?}", tpcw.key_sets["orders"]);
        let customer = new_rows[0].iter().find(|(c, _)| c == "o_c_id").map(|(_, v)| v.clone()).unwrap();
        let KeyValue::Arg(at) = customer else { panic!("{customer:?}") };
        let mut args = vec![Value::Null; at + 1];
        args[at] = Value::Int(42);
        let inserted = tpcw.new_row_keys(&table, |c| new_rows[0].iter().find(|(col, _)| col == c).map(|(_, v)| v.encoded(&args))).unwrap();
        assert!(inserted.contains(&partner.key(&[Value::Int(42)])) && !inserted.contains(&partner.key(&[Value::Int(43)])), "{inserted:?}");
    }

    #[test]
    fn a_join_is_locked_by_row_only_where_each_joined_table_is_reached_by_its_key() {
        let pg = translate(&apps::tpcw::application(), Engine::Postgres).unwrap();
        let lock = |t: &str, s: &str| pg.statement(t, s).unwrap().lock.clone().unwrap();
        // A customer named by its key, and their address by its: both by row, nothing whole;
        // the count asks whether the customer is there at all.
        let TwoPhaseLock::Join { whole, sql, keyed, count_sql, count_binds, .. } = lock("doBuyConfirm", "customer_for_order") else { panic!() };
        assert!(whole.is_empty());
        assert_eq!(keyed, vec!["address".to_string(), "customer".to_string()]);
        assert!(sql.ends_with("WHERE c_id = $1 FOR SHARE OF customer FOR SHARE OF address"), "{sql}");
        assert_eq!((count_sql.as_str(), count_binds), ("SELECT count(*) FROM customer WHERE c_id = $1", vec![0]));
        // A customer found by name (not the key): the key lock of the name, the customer, their
        // address and country by row.
        let TwoPhaseLock::Join { whole, keyed, driving_key, .. } = lock("getCustomer", "customer") else { panic!() };
        assert!(whole.is_empty());
        assert_eq!(driving_key.map(|k| k.columns), Some(vec!["c_uname".to_string()]));
        assert_eq!(keyed, vec!["address".to_string(), "country".to_string(), "customer".to_string()]);
        // A join with an aggregate over a range of orders, which every new order enters: its
        // tables whole. (A read by values fixed in each table rows are added to, or reaching
        // one from such a table, is `Partition`'s.)
        assert!(matches!(lock("getBestSellers", "best_sellers"), TwoPhaseLock::Tables(_)));
    }

    #[test]
    fn every_shipped_application_translates_for_both_engines() {
        for name in ensemble_app::APPLICATIONS {
            let app = ensemble_app::application(name).unwrap();
            for engine in [Engine::Postgres, Engine::Mariadb] {
                translate(&app, engine).unwrap_or_else(|e| panic!("{name} on {}: {e}", engine.name()));
            }
        }
    }
}
