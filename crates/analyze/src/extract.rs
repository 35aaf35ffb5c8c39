//! Read and write sets (Eliá §3.1, Gyro §VI): every declared statement of a transaction type,
//! regardless of execution path, becomes entries ⟨accessed attributes, condition⟩.
//!
//! What each statement contributes:
//! * `SELECT`: for every table it ranges over (joins, subqueries, derived tables, set operations),
//!   a read entry with the columns it mentions anywhere (projection, WHERE, ON, GROUP BY, HAVING,
//!   ORDER BY) and the condition the WHERE clause and inner-join ON clauses put on that table's
//!   rows. Equalities between columns are followed, so `l.item_id = i.item_id AND l.item_id =
//!   :item` binds `i.item_id` too; ON clauses of outer joins are not used (the preserved side is
//!   read whatever they say). LIMIT, ORDER BY and aggregates only ever read fewer rows than the
//!   condition admits, so they are ignored for the condition.
//! * `UPDATE`: a write entry with the SET columns and the WHERE clause's condition; a read entry
//!   with the columns of WHERE, SET expressions, ORDER BY and RETURNING, because the new values
//!   and the returned row count depend on them. Columns any UPDATE assigns are mutable: their
//!   bindings are dropped from every condition, since they do not identify a row over its life.
//! * `DELETE`: a write entry on every column, a read entry on the WHERE columns (row count).
//! * `INSERT`: a write entry on every column of the inserted rows, bound `column = value` for each
//!   parameter or constant inserted; a read entry on the unique keys, because whether the insert
//!   succeeds depends on a colliding row. Upserts and REPLACE also write the colliding row.
//!
//! Every read entry includes [`ROW`], the existence of the row, and inserts and deletes write it:
//! `SELECT count(*)` mentions no column but still depends on which rows exist.
//!
//! Placeholders named like a parameter are bound to it; others are values the body computed and
//! bind nothing (they are recorded as free values for the report).

use crate::cond::{Clause, Condition, Constant, Node, Term, UnionFind};
use crate::error::{ErrorKind, StatementError};
use crate::spec::{AppSpec, StmtSpec, TableSpec, TxnSpec};
use crate::sql::{classify_placeholder, parse_one, placeholders, Dialect, Placeholder, SqlError};
use sqlparser::ast::{
    AssignmentTarget, ConflictTarget, Delete, Expr, FromTable, GroupByExpr, Ident, Insert, Join, JoinConstraint, JoinOperator,
    LimitClause, ObjectName, OnConflictAction, OnInsert, OrderBy, OrderByKind, Query, Select, SelectItem,
    SelectItemQualifiedWildcardKind, SetExpr, Spanned, SqliteOnConflict, Statement, TableFactor, TableObject, TableWithJoins,
    UnaryOperator, Update, Value, Visit, Visitor,
};
use sqlparser::ast::BinaryOperator;
use sqlparser::tokenizer::Span;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;

/// The pseudo-attribute "this row exists".
pub const ROW: &str = "*";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AccessKind {
    Read,
    Write,
}

/// One entry of a read set or a write set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub kind: AccessKind,
    pub table: String,
    /// Column names as the schema spells them, plus [`ROW`].
    pub attributes: BTreeSet<String>,
    pub condition: Condition,
    /// The declared statement it comes from.
    pub statement: String,
    /// Why the statement makes this access, for `--explain`.
    pub what: &'static str,
}

/// The read set and write set of one transaction type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RwSets {
    pub reads: Vec<Access>,
    pub writes: Vec<Access>,
    /// Placeholders that are not parameters (values the body computed), with their statements.
    pub free_values: BTreeMap<String, BTreeSet<String>>,
    /// (table, column) pairs some UPDATE or upsert of this type assigns.
    pub updated_columns: BTreeSet<(String, String)>,
}

impl RwSets {
    pub fn read_only(&self) -> bool {
        self.writes.is_empty()
    }
}

/// Extracts the read and write sets of every transaction type; collects every statement error.
pub fn extract_all(app: &AppSpec, dialect: Dialect) -> Result<Vec<RwSets>, Vec<StatementError>> {
    let mut all = Vec::new();
    let mut errors = Vec::new();
    for t in &app.transactions {
        let mut sets = RwSets::default();
        for s in &t.statements {
            match extract_statement(app, t, s, dialect) {
                Ok(one) => {
                    sets.reads.extend(one.reads);
                    sets.writes.extend(one.writes);
                    for (v, stmts) in one.free_values {
                        sets.free_values.entry(v).or_default().extend(stmts);
                    }
                    sets.updated_columns.extend(one.updated_columns);
                }
                Err(e) => errors.push(StatementError {
                    txn: t.name.clone(),
                    stmt: s.name.clone(),
                    position: e.position,
                    kind: e.kind,
                    message: e.message,
                }),
            }
        }
        all.push(sets);
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    forget_mutable_columns(&mut all);
    Ok(all)
}

/// Drops, from every condition, the bindings on columns some UPDATE assigns.
///
/// A condition is compared with other conditions as a description of *the same row*, but a row's
/// values change: `INSERT … (cart_id, status) VALUES (:c, 'open')` creates a row that a later
/// `UPDATE … SET status = 'ordered'` changes, and a reader of `status = 'ordered'` rows still reads
/// the existence and the `cart_id` the insert wrote. Only a column that no statement ever assigns
/// keeps, for the whole life of a row, the value a condition saw, so only such bindings identify
/// rows soundly. (A REPLACE or a DELETE followed by an INSERT makes a new row: not a mutation.)
fn forget_mutable_columns(sets: &mut [RwSets]) {
    let mutable: BTreeSet<(String, String)> = sets.iter().flat_map(|s| s.updated_columns.iter().cloned()).collect();
    if mutable.is_empty() {
        return;
    }
    for s in sets.iter_mut() {
        for a in s.reads.iter_mut().chain(s.writes.iter_mut()) {
            let table = a.table.clone();
            let keep = |c: &Clause| Clause::new(c.bindings.iter().filter(|(col, _)| !mutable.contains(&(table.clone(), col.clone()))).cloned().collect());
            a.condition = Condition::from_clauses(a.condition.clauses.iter().map(keep));
        }
    }
}

fn extract_statement(app: &AppSpec, txn: &TxnSpec, stmt: &StmtSpec, dialect: Dialect) -> Result<RwSets, SqlError> {
    let parsed = parse_one(&stmt.sql, dialect)?;
    let mut free_values: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (p, span) in placeholders(&parsed) {
        match classify_placeholder(&p) {
            Placeholder::Named(n) if txn.param_index(&n).is_some() => {}
            Placeholder::Named(n) => {
                free_values.entry(n).or_default().insert(stmt.name.clone());
            }
            Placeholder::Positional(p) => {
                return Err(SqlError::new(
                    ErrorKind::UnknownParameter,
                    span,
                    format!(
                        "placeholder `{p}` has no name; name it `:param` after a parameter of `{}` ({}) or after the value the body computes",
                        txn.name,
                        txn.params.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                ))
            }
        }
    }
    let mut ex = Extractor {
        app,
        txn,
        stmt: &stmt.name,
        refs: Vec::new(),
        scopes: Vec::new(),
        reads: Vec::new(),
        writes: Vec::new(),
        updated_columns: BTreeSet::new(),
    };
    match &parsed {
        Statement::Query(q) => ex.query(q, None)?,
        Statement::Insert(i) => ex.insert(i)?,
        Statement::Update(u) => ex.update(u)?,
        Statement::Delete(d) => ex.delete(d)?,
        other => {
            let word = other.to_string().split_whitespace().next().unwrap_or("?").to_uppercase();
            return Err(SqlError {
                kind: ErrorKind::Unsupported,
                position: crate::sql::start_of(&stmt.sql),
                message: format!("a `{word}` statement: only SELECT, INSERT, UPDATE and DELETE can be declared"),
            });
        }
    }
    ex.finish_selects();
    Ok(RwSets { reads: ex.reads, writes: ex.writes, free_values, updated_columns: ex.updated_columns })
}

type R<T> = Result<T, SqlError>;

/// One side of an equality in a WHERE clause.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Operand {
    Col(usize, String),
    Param(usize),
    Const(Constant),
}

/// A condition over all the table references of a scope: OR of ANDs of equalities. `vec![vec![]]`
/// is "true".
type Dnf = Vec<Vec<(Operand, Operand)>>;

fn dnf_true() -> Dnf {
    vec![vec![]]
}

#[derive(Clone, Debug)]
enum RefKind {
    Base(usize),
    /// A subquery in FROM; its column names when they are known.
    Derived(Option<Vec<String>>),
    /// The row an upsert proposed (`excluded.col`): values, not a read of the table.
    Excluded(usize),
}

struct TableRef {
    alias: String,
    kind: RefKind,
    scope: usize,
    attrs: BTreeSet<String>,
    /// Whether the generic SELECT rule makes a read entry for it (the targets of UPDATE and DELETE
    /// make their own).
    auto_read: bool,
}

struct Scope {
    parent: Option<usize>,
    refs: Vec<usize>,
    /// Output names of the SELECT list, which ORDER BY and HAVING may use.
    aliases: Vec<String>,
    cond: Dnf,
}

struct Extractor<'a> {
    app: &'a AppSpec,
    txn: &'a TxnSpec,
    stmt: &'a str,
    refs: Vec<TableRef>,
    scopes: Vec<Scope>,
    reads: Vec<Access>,
    writes: Vec<Access>,
    updated_columns: BTreeSet<(String, String)>,
}

fn unsupported(span: Span, what: impl Into<String>) -> SqlError {
    SqlError::new(ErrorKind::Unsupported, span, what)
}

/// What an expression mentions at its own level: column names and nested queries (which are
/// analysed in their own scope).
struct Mentions {
    idents: Vec<Vec<Ident>>,
    subqueries: Vec<Query>,
    depth: usize,
    unsupported: Option<SqlError>,
}

impl Visitor for Mentions {
    type Break = ();
    fn pre_visit_query(&mut self, q: &Query) -> ControlFlow<()> {
        if self.depth == 0 {
            self.subqueries.push(q.clone());
        }
        self.depth += 1;
        ControlFlow::Continue(())
    }
    fn post_visit_query(&mut self, _q: &Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }
    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        if self.depth > 0 {
            return ControlFlow::Continue(());
        }
        match e {
            Expr::Identifier(i) => self.idents.push(vec![i.clone()]),
            Expr::CompoundIdentifier(v) => self.idents.push(v.clone()),
            // Columns named outside any expression: the visitor would not show them as reads.
            Expr::MatchAgainst { .. } => {
                self.unsupported.get_or_insert(unsupported(e.span(), "MATCH … AGAINST"));
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

fn object_name_parts(n: &ObjectName) -> Vec<Ident> {
    n.0.iter().filter_map(|p| p.as_ident().cloned()).collect()
}

impl<'a> Extractor<'a> {
    fn new_scope(&mut self, parent: Option<usize>) -> usize {
        self.scopes.push(Scope { parent, refs: Vec::new(), aliases: Vec::new(), cond: dnf_true() });
        self.scopes.len() - 1
    }

    fn table(&self, idx: usize) -> &'a TableSpec {
        &self.app.tables[idx]
    }

    fn lookup_table(&self, name: &ObjectName) -> R<usize> {
        let parts = object_name_parts(name);
        let [ident] = parts.as_slice() else {
            return Err(unsupported(name.span(), format!("qualified table name `{name}`: name tables as the schema declares them")));
        };
        self.app.table(&ident.value).map(|(i, _)| i).ok_or_else(|| {
            SqlError::new(
                ErrorKind::UnknownTable,
                ident.span,
                format!(
                    "no table `{}` in the schema (tables: {})",
                    ident.value,
                    self.app.tables.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            )
        })
    }

    fn add_ref(&mut self, scope: usize, alias: &str, kind: RefKind, auto_read: bool) -> usize {
        self.refs.push(TableRef { alias: alias.to_ascii_lowercase(), kind, scope, attrs: BTreeSet::new(), auto_read });
        let id = self.refs.len() - 1;
        self.scopes[scope].refs.push(id);
        id
    }

    // ---- queries -------------------------------------------------------------------------

    fn query(&mut self, q: &Query, parent: Option<usize>) -> R<()> {
        if let Some(w) = &q.with {
            return Err(unsupported(w.span(), "WITH (common table expressions): inline them as subqueries"));
        }
        if !q.pipe_operators.is_empty() || q.settings.is_some() || q.format_clause.is_some() || q.for_clause.is_some() {
            return Err(unsupported(q.span(), "pipe operators, SETTINGS, FORMAT or FOR clauses"));
        }
        match q.body.as_ref() {
            SetExpr::Select(s) => self.select(s, parent, q.order_by.as_ref())?,
            other => {
                self.set_expr(other, parent)?;
                if let Some(ob) = &q.order_by {
                    // ORDER BY of a set operation names output columns, already read by the branches.
                    let sc = self.new_scope(parent);
                    self.order_by(ob, sc, true)?;
                }
            }
        }
        let sc = self.new_scope(parent);
        match &q.limit_clause {
            Some(LimitClause::LimitOffset { limit, offset, limit_by }) => {
                for e in limit.iter().chain(offset.iter().map(|o| &o.value)).chain(limit_by) {
                    self.expr_reads(e, sc, false)?;
                }
            }
            Some(LimitClause::OffsetCommaLimit { offset, limit }) => {
                self.expr_reads(offset, sc, false)?;
                self.expr_reads(limit, sc, false)?;
            }
            None => {}
        }
        if let Some(e) = q.fetch.as_ref().and_then(|f| f.quantity.as_ref()) {
            self.expr_reads(e, sc, false)?;
        }
        Ok(())
    }

    fn set_expr(&mut self, e: &SetExpr, parent: Option<usize>) -> R<()> {
        match e {
            SetExpr::Select(s) => self.select(s, parent, None),
            SetExpr::Query(q) => self.query(q, parent),
            SetExpr::SetOperation { left, right, .. } => {
                self.set_expr(left, parent)?;
                self.set_expr(right, parent)
            }
            SetExpr::Values(v) => {
                let sc = self.new_scope(parent);
                for row in &v.rows {
                    for e in row.iter() {
                        self.expr_reads(e, sc, false)?;
                    }
                }
                Ok(())
            }
            other => Err(unsupported(other.span(), "a data-modifying statement or TABLE inside a query")),
        }
    }

    fn select(&mut self, s: &Select, parent: Option<usize>, order_by: Option<&OrderBy>) -> R<()> {
        if s.into.is_some()
            || !s.lateral_views.is_empty()
            || s.prewhere.is_some()
            || !s.connect_by.is_empty()
            || !s.cluster_by.is_empty()
            || !s.distribute_by.is_empty()
            || !s.sort_by.is_empty()
            || s.qualify.is_some()
            || s.value_table_mode.is_some()
        {
            return Err(unsupported(s.span(), "SELECT INTO, LATERAL VIEW, PREWHERE, CONNECT BY, CLUSTER/DISTRIBUTE/SORT BY or QUALIFY"));
        }
        let sc = self.new_scope(parent);
        let mut conjuncts: Vec<Expr> = Vec::new();
        let mut atoms: Vec<(Operand, Operand)> = Vec::new();
        for twj in &s.from {
            self.table_with_joins(twj, sc, &mut conjuncts, &mut atoms)?;
        }
        // Output names first: ORDER BY and HAVING may use them.
        for item in &s.projection {
            match item {
                SelectItem::ExprWithAlias { alias, .. } => self.scopes[sc].aliases.push(alias.value.to_ascii_lowercase()),
                SelectItem::UnnamedExpr(Expr::Identifier(i)) => self.scopes[sc].aliases.push(i.value.to_ascii_lowercase()),
                SelectItem::ExprWithAliases { aliases, .. } => {
                    self.scopes[sc].aliases.extend(aliases.iter().map(|a| a.value.to_ascii_lowercase()))
                }
                _ => {}
            }
        }
        for item in &s.projection {
            match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } | SelectItem::ExprWithAliases { expr: e, .. } => {
                    self.expr_reads(e, sc, false)?
                }
                SelectItem::Wildcard(_) => {
                    for r in self.scopes[sc].refs.clone() {
                        self.read_all_columns(r);
                    }
                }
                SelectItem::QualifiedWildcard(SelectItemQualifiedWildcardKind::ObjectName(n), _) => {
                    let parts = object_name_parts(n);
                    let [q] = parts.as_slice() else {
                        return Err(unsupported(n.span(), format!("qualified wildcard `{n}.*`")));
                    };
                    let r = self.find_alias(&q.value, sc).ok_or_else(|| {
                        SqlError::new(ErrorKind::UnknownTable, q.span, format!("no table or alias `{}` in this query", q.value))
                    })?;
                    self.read_all_columns(r);
                }
                SelectItem::QualifiedWildcard(k, _) => return Err(unsupported(item.span(), format!("wildcard on an expression `{k}`"))),
            }
        }
        if let Some(w) = &s.selection {
            self.expr_reads(w, sc, true)?;
            conjuncts.push(w.clone());
        }
        match &s.group_by {
            GroupByExpr::Expressions(exprs, _) => {
                for e in exprs {
                    self.expr_reads(e, sc, true)?;
                }
            }
            GroupByExpr::All(_) => {}
        }
        if let Some(h) = &s.having {
            self.expr_reads(h, sc, true)?;
        }
        for w in &s.named_window {
            self.expr_reads_any(w, sc)?;
        }
        if let Some(ob) = order_by {
            self.order_by(ob, sc, true)?;
        }
        let mut dnf = vec![atoms];
        for c in &conjuncts {
            let d = self.dnf(c, sc);
            dnf = product(&dnf, &d);
        }
        self.scopes[sc].cond = dnf;
        Ok(())
    }

    fn order_by(&mut self, ob: &OrderBy, sc: usize, aliases: bool) -> R<()> {
        if let OrderByKind::Expressions(v) = &ob.kind {
            for o in v {
                self.expr_reads(&o.expr, sc, aliases)?;
            }
        }
        Ok(())
    }

    fn table_with_joins(&mut self, twj: &TableWithJoins, sc: usize, conjuncts: &mut Vec<Expr>, atoms: &mut Vec<(Operand, Operand)>) -> R<()> {
        self.table_factor(&twj.relation, sc, conjuncts, atoms)?;
        for j in &twj.joins {
            self.join(j, sc, conjuncts, atoms)?;
        }
        Ok(())
    }

    fn join(&mut self, j: &Join, sc: usize, conjuncts: &mut Vec<Expr>, atoms: &mut Vec<(Operand, Operand)>) -> R<()> {
        let before: Vec<usize> = self.scopes[sc].refs.clone();
        self.table_factor(&j.relation, sc, conjuncts, atoms)?;
        let added: Vec<usize> = self.scopes[sc].refs[before.len()..].to_vec();
        let (constraint, inner) = match &j.join_operator {
            JoinOperator::Join(c) | JoinOperator::Inner(c) | JoinOperator::StraightJoin(c) | JoinOperator::CrossJoin(c) => (c, true),
            JoinOperator::Left(c)
            | JoinOperator::LeftOuter(c)
            | JoinOperator::Right(c)
            | JoinOperator::RightOuter(c)
            | JoinOperator::FullOuter(c) => (c, false),
            other => return Err(unsupported(j.span(), format!("join kind `{}`", join_keyword(other)))),
        };
        match constraint {
            JoinConstraint::On(e) => {
                self.expr_reads(e, sc, false)?;
                if inner {
                    conjuncts.push(e.clone());
                }
            }
            JoinConstraint::Using(cols) => {
                for n in cols {
                    let parts = object_name_parts(n);
                    let [col] = parts.as_slice() else {
                        return Err(unsupported(n.span(), "qualified column in USING"));
                    };
                    let right = added.iter().copied().find(|r| self.ref_has_column(*r, &col.value) == Some(true));
                    let left = before.iter().copied().find(|r| self.ref_has_column(*r, &col.value) == Some(true));
                    let (Some(l), Some(r)) = (left, right) else {
                        return Err(SqlError::new(ErrorKind::UnknownColumn, col.span, format!("USING column `{}` is not in both joined tables", col.value)));
                    };
                    let lc = self.record_column(l, &col.value);
                    let rc = self.record_column(r, &col.value);
                    if inner {
                        atoms.push((Operand::Col(l, lc), Operand::Col(r, rc)));
                    }
                }
            }
            JoinConstraint::Natural => return Err(unsupported(j.span(), "NATURAL JOIN: name the join columns with ON or USING")),
            JoinConstraint::None => {}
        }
        Ok(())
    }

    fn table_factor(&mut self, tf: &TableFactor, sc: usize, conjuncts: &mut Vec<Expr>, atoms: &mut Vec<(Operand, Operand)>) -> R<()> {
        match tf {
            TableFactor::Table { name, alias, args: None, with_hints, version: None, partitions, json_path: None, sample: None, .. }
                if with_hints.is_empty() && partitions.is_empty() =>
            {
                let t = self.lookup_table(name)?;
                if let Some(a) = alias {
                    if !a.columns.is_empty() {
                        return Err(unsupported(a.span(), "column aliases on a table"));
                    }
                }
                let alias = alias.as_ref().map(|a| a.name.value.clone()).unwrap_or_else(|| self.table(t).name.clone());
                self.add_ref(sc, &alias, RefKind::Base(t), true);
                Ok(())
            }
            TableFactor::Derived { lateral: false, subquery, alias, sample: None } => {
                self.query(subquery, self.scopes[sc].parent)?;
                let columns = derived_columns(subquery);
                let name = alias.as_ref().map(|a| a.name.value.clone()).unwrap_or_default();
                let columns = match alias {
                    Some(a) if !a.columns.is_empty() => Some(a.columns.iter().map(|c| c.name.value.to_ascii_lowercase()).collect()),
                    _ => columns,
                };
                self.add_ref(sc, &name, RefKind::Derived(columns), false);
                Ok(())
            }
            TableFactor::NestedJoin { table_with_joins, alias: None } => self.table_with_joins(table_with_joins, sc, conjuncts, atoms),
            other => Err(unsupported(other.span(), format!("table expression `{other}`: only tables, subqueries and joins"))),
        }
    }

    // ---- column references ----------------------------------------------------------------

    /// `Some(true)`: the reference has the column; `Some(false)`: it does not; `None`: unknown
    /// (a subquery with `*`).
    fn ref_has_column(&self, r: usize, col: &str) -> Option<bool> {
        match &self.refs[r].kind {
            RefKind::Base(t) | RefKind::Excluded(t) => Some(self.table(*t).column(col).is_some()),
            RefKind::Derived(Some(cols)) => Some(cols.iter().any(|c| c.eq_ignore_ascii_case(col))),
            RefKind::Derived(None) => None,
        }
    }

    /// Records a column read on a reference; returns the column as the schema spells it.
    fn record_column(&mut self, r: usize, col: &str) -> String {
        match self.refs[r].kind {
            RefKind::Base(t) => {
                let name = self.table(t).column(col).unwrap_or(col).to_string();
                self.refs[r].attrs.insert(name.clone());
                name
            }
            RefKind::Excluded(t) => self.table(t).column(col).unwrap_or(col).to_string(),
            RefKind::Derived(_) => col.to_ascii_lowercase(),
        }
    }

    fn read_all_columns(&mut self, r: usize) {
        if let RefKind::Base(t) = self.refs[r].kind {
            let cols = self.table(t).columns.clone();
            self.refs[r].attrs.extend(cols);
        }
    }

    fn find_alias(&self, name: &str, mut sc: usize) -> Option<usize> {
        let name = name.to_ascii_lowercase();
        loop {
            if let Some(r) = self.scopes[sc].refs.iter().copied().find(|r| self.refs[*r].alias == name) {
                return Some(r);
            }
            sc = self.scopes[sc].parent?;
        }
    }

    /// Resolves a column reference, recording the read. `Ok(None)`: an output name or a column of
    /// a subquery, which reads no table directly.
    fn resolve(&mut self, parts: &[Ident], sc: usize, aliases: bool) -> R<Option<(usize, String)>> {
        match parts {
            [col] => {
                let mut s = Some(sc);
                while let Some(cur) = s {
                    let refs = self.scopes[cur].refs.clone();
                    let definite: Vec<usize> = refs.iter().copied().filter(|r| self.ref_has_column(*r, &col.value) == Some(true)).collect();
                    match definite.as_slice() {
                        [r] => {
                            let name = self.record_column(*r, &col.value);
                            return Ok(match self.refs[*r].kind {
                                RefKind::Base(_) => Some((*r, name)),
                                _ => None,
                            });
                        }
                        [_, _, ..] => {
                            return Err(SqlError::new(
                                ErrorKind::UnknownColumn,
                                col.span,
                                format!("column `{}` is ambiguous: qualify it with its table", col.value),
                            ))
                        }
                        [] => {}
                    }
                    if refs.iter().any(|r| self.ref_has_column(*r, &col.value).is_none()) {
                        return Ok(None);
                    }
                    if (aliases || cur != sc) && self.scopes[cur].aliases.contains(&col.value.to_ascii_lowercase()) {
                        return Ok(None);
                    }
                    if aliases && cur == sc && self.scopes[cur].aliases.contains(&col.value.to_ascii_lowercase()) {
                        return Ok(None);
                    }
                    s = self.scopes[cur].parent;
                }
                let tables: Vec<String> = self.scopes[sc]
                    .refs
                    .iter()
                    .filter_map(|r| match self.refs[*r].kind {
                        RefKind::Base(t) => Some(self.table(t).name.clone()),
                        _ => None,
                    })
                    .collect();
                Err(SqlError::new(
                    ErrorKind::UnknownColumn,
                    col.span,
                    if tables.is_empty() {
                        format!("no column `{}` here (no table is in scope)", col.value)
                    } else {
                        format!("no column `{}` in {}", col.value, tables.join(", "))
                    },
                ))
            }
            [q, col] => {
                let r = self.find_alias(&q.value, sc).ok_or_else(|| {
                    SqlError::new(ErrorKind::UnknownTable, q.span, format!("no table or alias `{}` in this query", q.value))
                })?;
                match self.ref_has_column(r, &col.value) {
                    Some(false) => {
                        let t = match &self.refs[r].kind {
                            RefKind::Base(t) | RefKind::Excluded(t) => self.table(*t).name.clone(),
                            RefKind::Derived(_) => format!("subquery `{}`", q.value),
                        };
                        Err(SqlError::new(ErrorKind::UnknownColumn, col.span, format!("table `{t}` has no column `{}`", col.value)))
                    }
                    _ => {
                        let name = self.record_column(r, &col.value);
                        Ok(match self.refs[r].kind {
                            RefKind::Base(_) => Some((r, name)),
                            _ => None,
                        })
                    }
                }
            }
            _ => {
                let span = parts.iter().fold(Span::empty(), |s, i| s.union(&i.span));
                Err(unsupported(span, "a column qualified by a schema or nested field access"))
            }
        }
    }

    /// Records every column an expression reads and analyses its subqueries.
    fn expr_reads(&mut self, e: &Expr, sc: usize, aliases: bool) -> R<()> {
        let mut m = Mentions { idents: Vec::new(), subqueries: Vec::new(), depth: 0, unsupported: None };
        let _ = e.visit(&mut m);
        self.mentions(m, sc, aliases)
    }

    fn expr_reads_any<V: Visit>(&mut self, v: &V, sc: usize) -> R<()> {
        let mut m = Mentions { idents: Vec::new(), subqueries: Vec::new(), depth: 0, unsupported: None };
        let _ = v.visit(&mut m);
        self.mentions(m, sc, true)
    }

    fn mentions(&mut self, m: Mentions, sc: usize, aliases: bool) -> R<()> {
        if let Some(e) = m.unsupported {
            return Err(e);
        }
        for parts in &m.idents {
            self.resolve(parts, sc, aliases)?;
        }
        for q in &m.subqueries {
            self.query(q, Some(sc))?;
        }
        Ok(())
    }

    // ---- conditions -----------------------------------------------------------------------

    /// The part of a predicate the analysis can express, in DNF; anything else becomes "true"
    /// (widening). Column reads were recorded already.
    fn dnf(&mut self, e: &Expr, sc: usize) -> Dnf {
        match e {
            Expr::Nested(x) => self.dnf(x, sc),
            Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
                let (l, r) = (self.dnf(left, sc), self.dnf(right, sc));
                product(&l, &r)
            }
            Expr::BinaryOp { left, op: BinaryOperator::Or, right } => {
                let mut l = self.dnf(left, sc);
                l.extend(self.dnf(right, sc));
                cap(l)
            }
            Expr::BinaryOp { left, op: BinaryOperator::Eq, right } => match (self.operand(left, sc), self.operand(right, sc)) {
                (Some(a), Some(b)) if matches!(a, Operand::Col(..)) || matches!(b, Operand::Col(..)) => vec![vec![(a, b)]],
                _ => dnf_true(),
            },
            Expr::InList { expr, list, negated: false } => {
                let Some(col @ Operand::Col(..)) = self.operand(expr, sc) else { return dnf_true() };
                let mut out = Vec::new();
                for item in list {
                    match self.operand(item, sc) {
                        Some(o) => out.push(vec![(col.clone(), o)]),
                        None => return dnf_true(),
                    }
                }
                if out.is_empty() {
                    dnf_true()
                } else {
                    cap(out)
                }
            }
            _ => dnf_true(),
        }
    }

    fn operand(&mut self, e: &Expr, sc: usize) -> Option<Operand> {
        match e {
            Expr::Nested(x) => self.operand(x, sc),
            Expr::Identifier(i) => self.resolve(std::slice::from_ref(i), sc, false).ok().flatten().map(|(r, c)| Operand::Col(r, c)),
            Expr::CompoundIdentifier(v) => self.resolve(v, sc, false).ok().flatten().map(|(r, c)| Operand::Col(r, c)),
            Expr::Value(v) => match &v.value {
                Value::Placeholder(p) => match classify_placeholder(p) {
                    Placeholder::Named(n) => self.txn.param_index(&n).map(Operand::Param),
                    Placeholder::Positional(_) => None,
                },
                other => constant(other).map(Operand::Const),
            },
            Expr::UnaryOp { op: UnaryOperator::Minus, expr } => match expr.as_ref() {
                Expr::Value(v) => match &v.value {
                    Value::Number(n, _) => Some(Operand::Const(Constant::Number(format!("-{n}")))),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        }
    }

    /// The condition a scope's predicate puts on the rows of one table reference: the parameters
    /// and constants each of its columns is equal to, also through other columns.
    fn project(&self, dnf: &Dnf, r: usize) -> Condition {
        let mut clauses = Vec::new();
        for conj in dnf {
            let mut uf = UnionFind::default();
            let node = |o: &Operand| match o {
                Operand::Col(rr, c) => Node::Column(format!("{rr}\u{0}{c}")),
                Operand::Param(i) => Node::Param(0, *i),
                Operand::Const(k) => Node::Const(k.clone()),
            };
            for (a, b) in conj {
                let (x, y) = (uf.node(node(a)), uf.node(node(b)));
                uf.union(x, y);
            }
            if !uf.consistent() {
                continue;
            }
            let mut bindings = Vec::new();
            let nodes = uf.nodes().to_vec();
            for (i, n) in nodes.iter().enumerate() {
                let Node::Column(key) = n else { continue };
                let Some((rr, col)) = key.split_once('\u{0}') else { continue };
                if rr != r.to_string() {
                    continue;
                }
                let root = uf.find(i);
                for (j, m) in nodes.iter().enumerate() {
                    if uf.find(j) != root {
                        continue;
                    }
                    match m {
                        Node::Param(_, p) => bindings.push((col.to_string(), Term::Param(*p))),
                        Node::Const(k) => bindings.push((col.to_string(), Term::Const(k.clone()))),
                        Node::Column(_) => {}
                    }
                }
            }
            clauses.push(Clause::new(bindings));
        }
        Condition::from_clauses(clauses)
    }

    /// Read entries for every table a SELECT (or a subquery anywhere) ranges over.
    fn finish_selects(&mut self) {
        for r in 0..self.refs.len() {
            let RefKind::Base(t) = self.refs[r].kind else { continue };
            if !self.refs[r].auto_read {
                continue;
            }
            let cond = self.project(&self.scopes[self.refs[r].scope].cond, r);
            let mut attrs = self.refs[r].attrs.clone();
            attrs.insert(ROW.into());
            self.reads.push(Access {
                kind: AccessKind::Read,
                table: self.table(t).name.clone(),
                attributes: attrs,
                condition: cond,
                statement: self.stmt.to_string(),
                what: "rows the query ranges over",
            });
        }
    }

    // ---- writes ---------------------------------------------------------------------------

    fn access(&self, kind: AccessKind, t: usize, attributes: BTreeSet<String>, condition: Condition, what: &'static str) -> Access {
        Access { kind, table: self.table(t).name.clone(), attributes, condition, statement: self.stmt.to_string(), what }
    }

    fn all_columns(&self, t: usize) -> BTreeSet<String> {
        let mut s: BTreeSet<String> = self.table(t).columns.iter().cloned().collect();
        s.insert(ROW.into());
        s
    }

    fn column_of(&self, t: usize, n: &ObjectName, target_alias: &str) -> R<String> {
        let parts = object_name_parts(n);
        let col = match parts.as_slice() {
            [c] => c,
            [q, c] if q.value.eq_ignore_ascii_case(target_alias) || q.value.eq_ignore_ascii_case(&self.table(t).name) => c,
            _ => return Err(unsupported(n.span(), format!("assignment target `{n}`"))),
        };
        self.table(t).column(&col.value).map(str::to_string).ok_or_else(|| {
            SqlError::new(ErrorKind::UnknownColumn, col.span, format!("table `{}` has no column `{}`", self.table(t).name, col.value))
        })
    }

    fn update(&mut self, u: &Update) -> R<()> {
        if u.from.is_some() || u.output.is_some() || !u.table.joins.is_empty() {
            return Err(unsupported(u.span(), "UPDATE of joined tables or with FROM/OUTPUT: update one table, select what you need separately"));
        }
        if matches!(u.or, Some(SqliteOnConflict::Replace)) {
            return Err(unsupported(u.span(), "UPDATE OR REPLACE (it deletes rows the analysis cannot bound)"));
        }
        let TableFactor::Table { name, alias, args: None, .. } = &u.table.relation else {
            return Err(unsupported(u.table.relation.span(), "UPDATE target that is not a table"));
        };
        let t = self.lookup_table(name)?;
        let sc = self.new_scope(None);
        let alias = alias.as_ref().map(|a| a.name.value.clone()).unwrap_or_else(|| self.table(t).name.clone());
        let r = self.add_ref(sc, &alias, RefKind::Base(t), false);
        let set = self.assignments(&u.assignments, t, &alias, sc)?;
        let dnf = match &u.selection {
            Some(w) => {
                self.expr_reads(w, sc, false)?;
                self.dnf(w, sc)
            }
            None => dnf_true(),
        };
        for o in &u.order_by {
            self.expr_reads(&o.expr, sc, false)?;
        }
        if let Some(l) = &u.limit {
            self.expr_reads(l, sc, false)?;
        }
        if let Some(items) = &u.returning {
            self.returning(items, r, sc)?;
        }
        // Bindings on the assigned columns go with every other binding on a mutable column
        // (`forget_mutable_columns`), so this condition covers the row after the SET as well.
        let cond = self.project(&dnf, r);
        let written: BTreeSet<String> = set.iter().map(|(c, _)| c.clone()).collect();
        let mut read = self.refs[r].attrs.clone();
        read.insert(ROW.into());
        self.reads.push(self.access(AccessKind::Read, t, read, cond.clone(), "rows the UPDATE matches and the values it reads"));
        self.writes.push(self.access(AccessKind::Write, t, written, cond, "rows the UPDATE changes"));
        Ok(())
    }

    /// SET clauses: reads of their expressions, and what each assigned column becomes.
    fn assignments(&mut self, assignments: &[sqlparser::ast::Assignment], t: usize, alias: &str, sc: usize) -> R<Vec<(String, Option<Term>)>> {
        let mut set = Vec::new();
        for a in assignments {
            self.expr_reads(&a.value, sc, false)?;
            let value = match self.operand(&a.value, sc) {
                Some(Operand::Param(i)) => Some(Term::Param(i)),
                Some(Operand::Const(k)) => Some(Term::Const(k)),
                _ => None,
            };
            match &a.target {
                AssignmentTarget::ColumnName(n) => set.push((self.column_of(t, n, alias)?, value)),
                AssignmentTarget::Tuple(ns) => {
                    for n in ns {
                        set.push((self.column_of(t, n, alias)?, None));
                    }
                }
            }
        }
        let table = self.table(t).name.clone();
        self.updated_columns.extend(set.iter().map(|(c, _)| (table.clone(), c.clone())));
        Ok(set)
    }

    fn returning(&mut self, items: &[SelectItem], r: usize, sc: usize) -> R<()> {
        for item in items {
            match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } | SelectItem::ExprWithAliases { expr: e, .. } => {
                    self.expr_reads(e, sc, false)?
                }
                _ => self.read_all_columns(r),
            }
        }
        Ok(())
    }

    fn delete(&mut self, d: &Delete) -> R<()> {
        if !d.tables.is_empty() || d.using.is_some() || d.output.is_some() {
            return Err(unsupported(d.span(), "DELETE from several tables or with USING/OUTPUT: delete from one table"));
        }
        let (FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from)) = &d.from;
        let [twj] = from.as_slice() else {
            return Err(unsupported(d.span(), "DELETE from several tables"));
        };
        let TableFactor::Table { name, alias, args: None, .. } = &twj.relation else {
            return Err(unsupported(twj.relation.span(), "DELETE target that is not a table"));
        };
        if !twj.joins.is_empty() {
            return Err(unsupported(d.span(), "DELETE with a join"));
        }
        let t = self.lookup_table(name)?;
        let sc = self.new_scope(None);
        let alias = alias.as_ref().map(|a| a.name.value.clone()).unwrap_or_else(|| self.table(t).name.clone());
        let r = self.add_ref(sc, &alias, RefKind::Base(t), false);
        let dnf = match &d.selection {
            Some(w) => {
                self.expr_reads(w, sc, false)?;
                self.dnf(w, sc)
            }
            None => dnf_true(),
        };
        for o in &d.order_by {
            self.expr_reads(&o.expr, sc, false)?;
        }
        if let Some(l) = &d.limit {
            self.expr_reads(l, sc, false)?;
        }
        if let Some(items) = &d.returning {
            self.returning(items, r, sc)?;
        }
        let cond = self.project(&dnf, r);
        let mut read = self.refs[r].attrs.clone();
        read.insert(ROW.into());
        self.reads.push(self.access(AccessKind::Read, t, read, cond.clone(), "rows the DELETE matches"));
        self.writes.push(self.access(AccessKind::Write, t, self.all_columns(t), cond, "rows the DELETE removes"));
        Ok(())
    }

    fn insert(&mut self, ins: &Insert) -> R<()> {
        if ins.partitioned.is_some()
            || !ins.after_columns.is_empty()
            || ins.overwrite
            || ins.output.is_some()
            || ins.insert_alias.is_some()
            || ins.settings.is_some()
            || ins.format_clause.is_some()
        {
            return Err(unsupported(ins.span(), "INSERT with PARTITION, OVERWRITE, OUTPUT, a row alias, SETTINGS or FORMAT"));
        }
        let name = match &ins.table {
            TableObject::TableName(n) => n,
            other => return Err(unsupported(other.span(), "INSERT into a table function")),
        };
        let t = self.lookup_table(name)?;
        let table = self.table(t);
        let columns: Vec<String> = if ins.columns.is_empty() && ins.assignments.is_empty() {
            table.columns.clone()
        } else {
            ins.columns.iter().map(|c| self.column_of(t, c, &table.name)).collect::<R<Vec<_>>>()?
        };
        let value_scope = self.new_scope(None);
        // Each inserted row: the term each listed column gets, if it is a parameter or constant.
        let mut rows: Vec<Vec<(String, Option<Term>)>> = Vec::new();
        match &ins.source {
            Some(q) if q.with.is_none() && q.order_by.is_none() && q.limit_clause.is_none() && matches!(q.body.as_ref(), SetExpr::Values(_)) => {
                let SetExpr::Values(v) = q.body.as_ref() else { unreachable!("matched above") };
                for row in &v.rows {
                    if row.len() != columns.len() {
                        return Err(SqlError::new(
                            ErrorKind::Syntax,
                            row.span(),
                            format!("{} values for {} columns", row.len(), columns.len()),
                        ));
                    }
                    let mut out = Vec::new();
                    for (c, e) in columns.iter().zip(row.iter()) {
                        self.expr_reads(e, value_scope, false)?;
                        out.push((c.clone(), self.term(e, value_scope)));
                    }
                    rows.push(out);
                }
            }
            Some(q) => {
                self.query(q, None)?;
                rows.push(columns.iter().map(|c| (c.clone(), None)).collect());
            }
            None if !ins.assignments.is_empty() => {
                let mut out = Vec::new();
                for a in &ins.assignments {
                    self.expr_reads(&a.value, value_scope, false)?;
                    let AssignmentTarget::ColumnName(n) = &a.target else {
                        return Err(unsupported(a.span(), "tuple assignment in INSERT … SET"));
                    };
                    out.push((self.column_of(t, n, &table.name)?, self.term(&a.value, value_scope)));
                }
                rows.push(out);
            }
            None => rows.push(Vec::new()),
        }
        let inserted = Condition::from_clauses(
            rows.iter().map(|row| Clause::new(row.iter().filter_map(|(c, t)| t.clone().map(|t| (c.clone(), t))).collect())),
        );
        let colliding = |keys: &[Vec<String>]| -> Condition {
            let mut clauses = Vec::new();
            for row in &rows {
                for k in keys {
                    let bound: Vec<(String, Term)> =
                        k.iter().filter_map(|kc| row.iter().find(|(c, _)| c.eq_ignore_ascii_case(kc)).and_then(|(c, t)| t.clone().map(|t| (c.clone(), t)))).collect();
                    // A colliding row agrees on every key column, so it agrees on the bound ones:
                    // those alone over-approximate it (no bound column at all: any row).
                    clauses.push(Clause::new(bound));
                }
            }
            Condition::from_clauses(clauses)
        };
        let all_keys = table.unique_keys.clone();
        if !all_keys.is_empty() {
            let mut attrs: BTreeSet<String> = all_keys.iter().flatten().cloned().collect();
            attrs.insert(ROW.into());
            self.reads.push(self.access(AccessKind::Read, t, attrs, colliding(&all_keys), "whether a row with the same key exists"));
        }
        self.writes.push(self.access(AccessKind::Write, t, self.all_columns(t), inserted.clone(), "the inserted rows"));
        if ins.replace_into || matches!(ins.or, Some(SqliteOnConflict::Replace)) {
            self.writes.push(self.access(AccessKind::Write, t, self.all_columns(t), colliding(&all_keys), "rows REPLACE deletes"));
        }
        let upsert = match &ins.on {
            Some(OnInsert::OnConflict(oc)) => match &oc.action {
                OnConflictAction::DoNothing => None,
                OnConflictAction::DoUpdate(du) => {
                    let keys = match &oc.conflict_target {
                        Some(ConflictTarget::Columns(cols)) => vec![cols
                            .iter()
                            .map(|c| {
                                table.column(&c.value).map(str::to_string).ok_or_else(|| {
                                    SqlError::new(ErrorKind::UnknownColumn, c.span, format!("table `{}` has no column `{}`", table.name, c.value))
                                })
                            })
                            .collect::<R<Vec<_>>>()?],
                        _ => all_keys.clone(),
                    };
                    Some((du.assignments.clone(), du.selection.clone(), keys))
                }
            },
            Some(OnInsert::DuplicateKeyUpdate(a)) => Some((a.clone(), None, all_keys.clone())),
            Some(other) => return Err(unsupported(other.span(), "this ON clause of INSERT")),
            None => None,
        };
        let alias = ins.table_alias.as_ref().map(|a| a.alias.value.clone()).unwrap_or_else(|| table.name.clone());
        if let Some((assignments, selection, keys)) = upsert {
            let sc = self.new_scope(None);
            let r = self.add_ref(sc, &alias, RefKind::Base(t), false);
            self.add_ref(sc, "excluded", RefKind::Excluded(t), false);
            let set = self.assignments(&assignments, t, &alias, sc)?;
            if let Some(w) = &selection {
                self.expr_reads(w, sc, false)?;
            }
            let cond = colliding(&keys);
            let mut read = self.refs[r].attrs.clone();
            read.insert(ROW.into());
            self.reads.push(self.access(AccessKind::Read, t, read, cond.clone(), "the colliding row an upsert reads"));
            self.writes.push(self.access(AccessKind::Write, t, set.iter().map(|(c, _)| c.clone()).collect(), cond, "the colliding row an upsert updates"));
        }
        if let Some(items) = &ins.returning {
            let sc = self.new_scope(None);
            let r = self.add_ref(sc, &alias, RefKind::Base(t), false);
            self.returning(items, r, sc)?;
            let mut read = self.refs[r].attrs.clone();
            read.insert(ROW.into());
            self.reads.push(self.access(AccessKind::Read, t, read, inserted, "the inserted rows RETURNING reads"));
        }
        Ok(())
    }

    fn term(&mut self, e: &Expr, sc: usize) -> Option<Term> {
        match self.operand(e, sc) {
            Some(Operand::Param(i)) => Some(Term::Param(i)),
            Some(Operand::Const(k)) => Some(Term::Const(k)),
            _ => None,
        }
    }
}

fn constant(v: &Value) -> Option<Constant> {
    match v {
        Value::Number(n, _) => Some(Constant::Number(n.to_string())),
        Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Some(Constant::Text(s.clone())),
        Value::Boolean(b) => Some(Constant::Bool(*b)),
        _ => None,
    }
}

fn derived_columns(q: &Query) -> Option<Vec<String>> {
    let SetExpr::Select(s) = q.body.as_ref() else { return None };
    let mut out = Vec::new();
    for item in &s.projection {
        match item {
            SelectItem::ExprWithAlias { alias, .. } => out.push(alias.value.to_ascii_lowercase()),
            SelectItem::UnnamedExpr(Expr::Identifier(i)) => out.push(i.value.to_ascii_lowercase()),
            SelectItem::UnnamedExpr(Expr::CompoundIdentifier(v)) => out.push(v.last()?.value.to_ascii_lowercase()),
            _ => return None,
        }
    }
    Some(out)
}

fn join_keyword(op: &JoinOperator) -> String {
    let s = format!("{op:?}");
    s.split('(').next().unwrap_or("?").to_string()
}

/// Conjunction of two DNFs, widened to "true" when it would grow past the cap.
fn product(a: &Dnf, b: &Dnf) -> Dnf {
    if a.len().saturating_mul(b.len()) > crate::cond::MAX_CLAUSES {
        return dnf_true();
    }
    let mut out = Vec::with_capacity(a.len() * b.len());
    for x in a {
        for y in b {
            let mut c = x.clone();
            c.extend(y.iter().cloned());
            out.push(c);
        }
    }
    out
}

fn cap(d: Dnf) -> Dnf {
    if d.len() > crate::cond::MAX_CLAUSES {
        dnf_true()
    } else {
        d
    }
}
