//! One connection to one server database, through the server's ordinary client library
//! (`postgres` for PostgreSQL, `mysql` for MariaDB), behind the few calls the storage needs, with
//! values converted between Ensemble's and the server's types and errors sorted by what the
//! storage must do about them.

use crate::dialect::Engine;
use crate::pg::{Ahead, Answer, PgSession};
use bytes::BytesMut;
use ensemble_core::{Rows, Value};
use mysql::prelude::Queryable;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type};
use std::collections::HashMap;
use std::error::Error as StdError;
use std::time::Duration;

/// What went wrong, sorted by what the caller does about it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConnError {
    /// The server chose this transaction as the victim of a serialization failure or deadlock:
    /// roll back and run it again.
    #[error("{0}")]
    Retry(String),
    /// The connection is gone; whether the transaction in flight committed is unknown only if
    /// it was committing.
    #[error("connection lost: {0}")]
    Lost(String),
    /// The statement failed (a constraint, a type error): deterministic, part of the outcome.
    #[error("{0}")]
    Statement(String),
    /// A write sent ahead of its answer ([`Conn::send_ahead`]) failed as a statement: the
    /// transaction is rolled back and runs again with every write waited for, so that its body
    /// meets the error where it made the write, as it would have.
    #[error("{0}")]
    SentAhead(String),
}

/// Why a connection could not be opened, each a message a user can act on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OpenError {
    #[error("cannot reach the {engine} server at {target}: {detail}")]
    Unreachable { engine: &'static str, target: String, detail: String },
    #[error("the {engine} server at {target} refused the credentials: {detail}")]
    Credentials { engine: &'static str, target: String, detail: String },
    #[error("the {engine} server at {target} has no database `{database}` (create it, or name another in --db-url)")]
    MissingDatabase { engine: &'static str, target: String, database: String },
    #[error("bad {engine} URL `{url}`: {detail}")]
    BadUrl { engine: &'static str, url: String, detail: String },
    #[error("{engine} at {target}: {detail}")]
    Other { engine: &'static str, target: String, detail: String },
}

/// A server's address without credentials, for messages.
pub(crate) fn target_of(engine: Engine, url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let host = host.split(['?']).next().unwrap_or(host);
    format!("{}://{host}", match engine {
        Engine::Postgres => "postgres",
        Engine::Mariadb => "mysql",
    })
}

/// A URL the client library would not take: what it said, what a URL for `engine` looks like
/// (one for the other engine most likely means the other `--backend`), and the URL with its
/// password hidden.
fn bad_url(engine: Engine, url: &str, detail: String) -> OpenError {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    let detail = match (engine, scheme.as_deref()) {
        (Engine::Postgres, Some(s @ ("mysql" | "mariadb"))) => {
            format!("{detail}: a {s}:// URL is for MariaDB (--backend mariadb); PostgreSQL's look like postgres://user@host:port/database")
        }
        (Engine::Mariadb, Some(s @ ("postgres" | "postgresql"))) => {
            format!("{detail}: a {s}:// URL is for PostgreSQL (--backend postgres); MariaDB's look like mysql://user:password@host:port/database")
        }
        (Engine::Postgres, _) => format!("{detail} (expected postgres://user@host:port/database)"),
        (Engine::Mariadb, _) => format!("{detail} (expected mysql://user:password@host:port/database)"),
    };
    OpenError::BadUrl { engine: engine.name(), url: without_password(url), detail }
}

/// `url` with the password of its `user:password@`, if it has one, replaced by `***`.
///
/// Not [`target_of`]: that one names the server by the engine's own scheme and drops the user
/// and the database, which is right for a server that could not be reached; a URL the client
/// library refused is shown as it was given (its scheme, user, database and options are what
/// may be wrong), only without the secret.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// Replaces the database a URL names. Parsed by each client library's own URL parser.
pub fn with_database(engine: Engine, url: &str, database: &str) -> Result<String, OpenError> {
    let bad = |detail: String| bad_url(engine, url, detail);
    match engine {
        Engine::Postgres => {
            url.parse::<tokio_postgres::Config>().map_err(|e| bad(e.to_string()))?;
            let (head, query) = url.split_once('?').map_or((url, None), |(h, q)| (h, Some(q)));
            let (scheme, rest) = head.split_once("://").ok_or_else(|| bad("expected postgres://user@host:port/database".into()))?;
            let authority = rest.split('/').next().unwrap_or(rest);
            Ok(format!("{scheme}://{authority}/{database}{}", query.map(|q| format!("?{q}")).unwrap_or_default()))
        }
        Engine::Mariadb => {
            let opts = mysql::Opts::from_url(url).map_err(|e| bad(e.to_string()))?;
            let (head, query) = url.split_once('?').map_or((url, None), |(h, q)| (h, Some(q)));
            let (scheme, rest) = head.split_once("://").ok_or_else(|| bad("expected mysql://user@host:port/database".into()))?;
            let authority = rest.split('/').next().unwrap_or(rest);
            drop(opts);
            Ok(format!("{scheme}://{authority}/{database}{}", query.map(|q| format!("?{q}")).unwrap_or_default()))
        }
    }
}

/// The database a URL names (the default database of the server when it names none).
pub fn database_of(url: &str) -> Option<String> {
    let head = url.split('?').next()?;
    let rest = head.split_once("://")?.1;
    let db = rest.split_once('/')?.1;
    (!db.is_empty()).then(|| db.to_string())
}

/// One open connection.
pub struct Conn {
    session: Session,
    /// What is not sent yet, in order: a transaction's start ([`Conn::start`]) and writes sent
    /// ahead of their answers ([`Conn::send_ahead`]). They go with the next request, in its
    /// round trip.
    unsent: Vec<Unsent>,
    /// What the last start returned, once it has run: its error too, which is the
    /// transaction's even when the statement it travelled with reported only its consequence.
    started: Option<Result<Rows, ConnError>>,
    /// A read-only transaction is open whose end was deferred ([`Conn::end_read_only`]).
    open_reader: bool,
}

enum Unsent {
    Start(String),
    /// A write: the statement's name (for errors), its prepared form and arguments.
    Write { name: String, statement: tokio_postgres::Statement, args: Vec<Value> },
}

enum Session {
    /// Statements are prepared with each parameter's type taken from its value (`pg_type`), so
    /// that a placeholder used in two places (`c_login = :now, c_expiration = :now + 7200`) has
    /// one type, as in SQLite, instead of the two PostgreSQL would infer; one prepared statement
    /// per text and signature.
    Postgres { client: Box<PgSession>, prepared: HashMap<(String, Vec<u32>), tokio_postgres::Statement> },
    Mariadb(Box<mysql::Conn>),
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl Conn {
    pub fn open(engine: Engine, url: &str) -> Result<Conn, OpenError> {
        let target = target_of(engine, url);
        match engine {
            Engine::Postgres => {
                let mut config: tokio_postgres::Config = url
                    .parse()
                    .map_err(|e: tokio_postgres::Error| bad_url(engine, url, e.to_string()))?;
                config.connect_timeout(CONNECT_TIMEOUT);
                let client = PgSession::connect(&config).map_err(|e| match e {
                    crate::pg::ConnectError::Postgres(e) => pg_open_error(&e, target, url),
                    crate::pg::ConnectError::Runtime(e) => OpenError::Other { engine: engine.name(), target, detail: format!("starting its client runtime: {e}") },
                })?;
                Ok(Conn::new(Session::Postgres { client: Box::new(client), prepared: HashMap::new() }))
            }
            Engine::Mariadb => {
                let opts = mysql::Opts::from_url(url)
                    .map_err(|e| bad_url(engine, url, e.to_string()))?;
                let builder = mysql::OptsBuilder::from_opts(opts)
                    .tcp_connect_timeout(Some(CONNECT_TIMEOUT))
                    .prefer_socket(false)
                    .stmt_cache_size(Some(512))
                    // Matched rows, not changed rows, as SQLite and PostgreSQL count: a body that
                    // checks `execute(..) == 1` must see the same number on every engine.
                    .additional_capabilities(mysql::consts::CapabilityFlags::CLIENT_FOUND_ROWS);
                let conn = mysql::Conn::new(builder).map_err(|e| my_open_error(&e, target, url))?;
                Ok(Conn::new(Session::Mariadb(Box::new(conn))))
            }
        }
    }

    fn new(session: Session) -> Conn {
        Conn { session, unsent: Vec::new(), started: None, open_reader: false }
    }

    pub fn engine(&self) -> Engine {
        match self.session {
            Session::Postgres { .. } => Engine::Postgres,
            Session::Mariadb(_) => Engine::Mariadb,
        }
    }

    /// Starts a transaction with `sql`, statements without parameters whose last result rows
    /// [`Conn::started`] returns. On PostgreSQL they are held back and sent with the next
    /// request, in the same round trip: the server runs them first, as if sent alone, so the
    /// transaction is the same and costs one round trip less. On MariaDB (whose client has no
    /// pipelining) they run at once.
    pub fn start(&mut self, sql: &str) -> Result<(), ConnError> {
        self.started = None;
        // The open reader ends in the same batch.
        let sql = if std::mem::take(&mut self.open_reader) { format!("COMMIT; {sql}") } else { sql.to_string() };
        match self.session {
            Session::Postgres { .. } => {
                debug_assert!(!self.unsent.iter().any(|u| matches!(u, Unsent::Start(_))), "a transaction started twice");
                self.unsent.push(Unsent::Start(sql));
            }
            Session::Mariadb(_) => self.started = Some(Ok(self.batch_rows(&sql)?)),
        }
        Ok(())
    }

    /// Ends a read-only transaction by committing it with the next transaction's start instead
    /// of in a round trip of its own. Only for a transaction whose COMMIT cannot fail and whose
    /// result nothing else waits on: one that wrote nothing, under REPEATABLE READ (a snapshot;
    /// SERIALIZABLE could still fail it at COMMIT), its locks none that a writer waits for.
    /// Anything else sent on the connection first ends it.
    pub fn end_read_only(&mut self) {
        debug_assert!(self.unsent.is_empty(), "a read-only transaction ended before it started");
        self.open_reader = true;
    }

    /// Ends the open reader, if any, in a round trip of its own: before a statement that is not
    /// a transaction's start, and when the storage has been idle a while (an open snapshot
    /// holds back the server's clean-up of old row versions, and its table locks, weak as they
    /// are, a schema change).
    pub fn commit_open_reader(&mut self) -> Result<(), ConnError> {
        if std::mem::take(&mut self.open_reader) {
            match &mut self.session {
                Session::Postgres { client, .. } => client.run(|c| c.batch_execute("COMMIT")).map_err(|e| pg_error(&e))?,
                Session::Mariadb(c) => c.query_drop("COMMIT").map_err(|e| my_error(&e))?,
            }
        }
        Ok(())
    }

    /// The rows the transaction's start returned; sends the start now if no request has taken
    /// it along yet (with whatever was held back before it, and nothing after it: writes sent
    /// ahead after the start stay held back for the next request).
    pub fn started(&mut self) -> Result<Rows, ConnError> {
        if let Some(at) = self.unsent.iter().position(|u| matches!(u, Unsent::Start(_))) {
            let rest = self.unsent.split_off(at + 1);
            let Session::Postgres { client, .. } = &self.session else { unreachable!("only PostgreSQL holds a start back") };
            let through = std::mem::replace(&mut self.unsent, rest);
            after_unsent(client, through, &mut self.started, |_| async { Ok(()) })?;
        }
        self.started.take().unwrap_or_else(|| Err(ConnError::Statement("no transaction was started".into())))
    }

    /// Forgets what was not sent yet, a start and writes (the transaction is being given up).
    pub fn forget_unsent(&mut self) {
        self.unsent.clear();
        self.started = None;
    }

    /// Runs a write whose count nobody waits for: on PostgreSQL it is held back and sent with
    /// the next request, in the same round trip (prepared first if it is new, as [`Conn::run`]
    /// does); that request then reports the write's failure first, a statement's error as
    /// [`ConnError::SentAhead`]. On MariaDB (whose client has no pipelining) it runs at once.
    /// `name` names the statement in errors.
    pub fn send_ahead(&mut self, name: &str, sql: &str, args: Vec<Value>) -> Result<(), ConnError> {
        if let Session::Mariadb(_) = self.session {
            let refs: Vec<&Value> = args.iter().collect();
            return self.run(sql, &refs).map(|_| ());
        }
        self.commit_open_reader()?;
        let refs: Vec<&Value> = args.iter().collect();
        let statement = self.prepared(sql, &refs)?;
        self.unsent.push(Unsent::Write { name: name.to_string(), statement, args });
        Ok(())
    }

    /// Sends what is held back now, in a round trip of its own, if it holds a write sent ahead;
    /// returns the first failure, as the request it would have gone with would have.
    pub fn send_writes_now(&mut self) -> Result<(), ConnError> {
        if !self.unsent.iter().any(|u| matches!(u, Unsent::Write { .. })) {
            return Ok(());
        }
        let Session::Postgres { client, .. } = &self.session else { unreachable!("only PostgreSQL holds writes back") };
        after_unsent(client, std::mem::take(&mut self.unsent), &mut self.started, |_| async { Ok(()) })
    }

    /// Runs statements without parameters or results (transaction control, DDL).
    pub fn batch(&mut self, sql: &str) -> Result<(), ConnError> {
        self.commit_open_reader()?;
        match &mut self.session {
            Session::Postgres { client, .. } => after_unsent(client, std::mem::take(&mut self.unsent), &mut self.started, |c| c.batch_execute(sql)),
            // Every result set is read: dropping the result unread would skip the errors of the
            // batch's later statements (a COMMIT that failed).
            Session::Mariadb(c) => {
                let mut result = c.query_iter(sql).map_err(|e| my_error(&e))?;
                while let Some(set) = result.iter() {
                    for row in set {
                        row.map_err(|e| my_error(&e))?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Runs statements without parameters as one batch, in one round trip, and returns the rows
    /// of the last one that returns rows, integers and reals parsed from the text protocol.
    pub fn batch_rows(&mut self, sql: &str) -> Result<Rows, ConnError> {
        self.commit_open_reader()?;
        let mut last = Vec::new();
        match &mut self.session {
            Session::Postgres { client, .. } => {
                return Ok(simple_rows(after_unsent(client, std::mem::take(&mut self.unsent), &mut self.started, |c| c.simple_query(sql))?))
            }
            Session::Mariadb(c) => {
                let mut result = c.query_iter(sql).map_err(|e| my_error(&e))?;
                while let Some(set) = result.iter() {
                    let has_columns = !set.columns().as_ref().is_empty();
                    let mut rows = Vec::new();
                    for row in set {
                        let row = row.map_err(|e| my_error(&e))?;
                        let values = row.unwrap().into_iter().map(|v| match v {
                            mysql::Value::NULL => Value::Null,
                            mysql::Value::Bytes(b) => parse_text(&String::from_utf8_lossy(&b)),
                            mysql::Value::Int(i) => Value::Int(i),
                            other => Value::Text(format!("{other:?}")),
                        });
                        rows.push(values.collect());
                    }
                    if has_columns {
                        last = rows;
                    }
                }
            }
        }
        Ok(last)
    }

    /// Runs a statement with positional arguments; returns its rows (none for a write without
    /// RETURNING) and the number of rows it affected.
    pub fn run(&mut self, sql: &str, args: &[&Value]) -> Result<(Rows, u64), ConnError> {
        self.commit_open_reader()?;
        match &mut self.session {
            Session::Postgres { .. } => {
                let stmt = self.prepared(sql, args)?;
                let Session::Postgres { client, .. } = &self.session else { unreachable!() };
                let params: Vec<PgArg<'_>> = args.iter().map(|v| PgArg(v)).collect();
                let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
                let unsent = std::mem::take(&mut self.unsent);
                if stmt.columns().is_empty() {
                    let n = after_unsent(client, unsent, &mut self.started, |c| c.execute(&stmt, &refs))?;
                    return Ok((Vec::new(), n));
                }
                let rows = rows_of(&after_unsent(client, unsent, &mut self.started, |c| c.query(&stmt, &refs))?)?;
                let n = rows.len() as u64;
                Ok((rows, n))
            }
            Session::Mariadb(c) => {
                let params: Vec<mysql::Value> = args.iter().map(|v| my_value(v)).collect();
                let params = if params.is_empty() { mysql::Params::Empty } else { mysql::Params::Positional(params) };
                let mut result = c.exec_iter(sql, params).map_err(|e| my_error(&e))?;
                // Before the rows are read: reading them moves the result past this set.
                let affected = result.affected_rows();
                let mut out = Vec::new();
                for row in result.iter().into_iter().flatten() {
                    let row = row.map_err(|e| my_error(&e))?;
                    let columns = row.columns();
                    let values = row.unwrap();
                    let mut r = Vec::with_capacity(values.len());
                    for (v, col) in values.into_iter().zip(columns.iter()) {
                        r.push(from_my(v, col)?);
                    }
                    out.push(r);
                }
                // A write with RETURNING reports its rows as affected, as PostgreSQL's does.
                let n = if out.is_empty() { affected } else { affected.max(out.len() as u64) };
                Ok((out, n))
            }
        }
    }

    /// Runs the queries `reads` (each a statement and its positional arguments) on PostgreSQL
    /// in one round trip, after whatever was held back (which fails the whole as it would fail
    /// [`Conn::run`]); returns each query's rows or its error, in order. PostgreSQL runs them
    /// one after another as sent, so each answer is what the query would have returned sent
    /// alone at its place; but a query that failed aborts the transaction for those after it,
    /// as it would have.
    pub fn read_together(&mut self, reads: &[(&str, Vec<&Value>)]) -> Result<Vec<Result<Rows, ConnError>>, ConnError> {
        self.commit_open_reader()?;
        let statements = reads.iter().map(|(sql, args)| self.prepared(sql, args)).collect::<Result<Vec<_>, _>>()?;
        let Session::Postgres { client, .. } = &self.session else { unreachable!("only PostgreSQL reads together") };
        let params: Vec<Vec<PgArg<'_>>> = reads.iter().map(|(_, args)| args.iter().map(|v| PgArg(v)).collect()).collect();
        let refs: Vec<Vec<&(dyn ToSql + Sync)>> = params.iter().map(|p| p.iter().map(|a| a as &(dyn ToSql + Sync)).collect()).collect();
        let unsent = std::mem::take(&mut self.unsent);
        let answers = after_unsent(client, unsent, &mut self.started, |c| {
            let requests = statements
                .iter()
                .zip(&refs)
                .map(|(s, r)| -> std::pin::Pin<Box<dyn std::future::Future<Output = _> + '_>> { Box::pin(c.query(s, r)) })
                .collect();
            async move { Ok(crate::pg::in_order(requests).await) }
        })?;
        Ok(answers.into_iter().map(|a| a.map_err(|e| pg_error(&e)).and_then(|rows| rows_of(&rows))).collect())
    }

    /// `sql` prepared on PostgreSQL with each parameter's type taken from its value, once per
    /// session. Prepared before anything held back is sent (preparing is no part of a
    /// transaction), so that their round trip carries the execution.
    fn prepared(&mut self, sql: &str, args: &[&Value]) -> Result<tokio_postgres::Statement, ConnError> {
        let Session::Postgres { client, prepared } = &mut self.session else { unreachable!("only PostgreSQL prepares here") };
        let types: Vec<Type> = args.iter().map(|v| pg_type(v)).collect();
        let key = (sql.to_string(), types.iter().map(Type::oid).collect());
        if let Some(s) = prepared.get(&key) {
            return Ok(s.clone());
        }
        let s = client.run(|c| c.prepare_typed(sql, &types)).map_err(|e| pg_error(&e))?;
        prepared.insert(key, s.clone());
        Ok(s)
    }

    /// Inserts many rows in multi-row statements (loading a database).
    pub fn insert_rows(&mut self, table: &str, columns: &[String], rows: &[&[Value]]) -> Result<(), ConnError> {
        if rows.is_empty() {
            return Ok(());
        }
        // Both servers cap a statement's parameters at 65,535.
        let per = (60_000 / columns.len().max(1)).clamp(1, 1_000);
        let engine = self.engine();
        for chunk in rows.chunks(per) {
            let mut k = 0;
            let tuples: Vec<String> = chunk
                .iter()
                .map(|_| {
                    let ps: Vec<String> = (0..columns.len())
                        .map(|_| {
                            k += 1;
                            placeholder(engine, k)
                        })
                        .collect();
                    format!("({})", ps.join(", "))
                })
                .collect();
            let sql = format!(
                "INSERT INTO {} ({}) VALUES {}",
                crate::dialect::ident(engine, table),
                crate::dialect::idents(engine, columns),
                tuples.join(", ")
            );
            let args: Vec<&Value> = chunk.iter().flat_map(|r| r.iter()).collect();
            self.run_unprepared(&sql, &args)?;
        }
        Ok(())
    }

    /// Like `run`, for one-off statements not worth keeping prepared.
    fn run_unprepared(&mut self, sql: &str, args: &[&Value]) -> Result<u64, ConnError> {
        self.commit_open_reader()?;
        match &mut self.session {
            Session::Postgres { client, .. } => {
                let params: Vec<PgArg<'_>> = args.iter().map(|v| PgArg(v)).collect();
                let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
                after_unsent(client, std::mem::take(&mut self.unsent), &mut self.started, |c| c.execute(sql, &refs))
            }
            Session::Mariadb(c) => {
                let params: Vec<mysql::Value> = args.iter().map(|v| my_value(v)).collect();
                let stmt = c.prep(sql).map_err(|e| my_error(&e))?;
                let r = c.exec_iter(&stmt, params).map_err(|e| my_error(&e)).map(|r| r.affected_rows());
                c.close(stmt).map_err(|e| my_error(&e))?;
                r
            }
        }
    }
}

/// The `k`-th (1-based) positional parameter of a statement built here.
pub fn placeholder(engine: Engine, k: usize) -> String {
    match engine {
        Engine::Postgres => format!("${k}"),
        Engine::Mariadb => "?".to_string(),
    }
}

/// Runs the request `then` makes after what was held back (`unsent`: a transaction's start,
/// writes sent ahead), all in one round trip ([`PgSession::pipelined`]). What the start returned
/// goes to `started`. The first failure in the order sent is the one returned: a request after
/// a failed one fails only because the transaction is aborted. A start's failure is the
/// transaction's; a write's, if it is a statement's error, is [`ConnError::SentAhead`].
fn after_unsent<'c, T, F>(
    client: &'c PgSession,
    unsent: Vec<Unsent>,
    started: &mut Option<Result<Rows, ConnError>>,
    then: impl FnOnce(&'c tokio_postgres::Client) -> F,
) -> Result<T, ConnError>
where
    F: std::future::Future<Output = Result<T, tokio_postgres::Error>> + 'c,
{
    if unsent.is_empty() {
        return client.run(then).map_err(|e| pg_error(&e));
    }
    let params: Vec<Vec<PgArg<'_>>> = unsent
        .iter()
        .map(|u| match u {
            Unsent::Start(_) => Vec::new(),
            Unsent::Write { args, .. } => args.iter().map(PgArg).collect(),
        })
        .collect();
    let ahead: Vec<Ahead<'_>> = unsent
        .iter()
        .zip(&params)
        .map(|(u, p)| match u {
            Unsent::Start(sql) => Ahead::Batch(sql),
            Unsent::Write { statement, .. } => Ahead::Execute(statement, p.iter().map(|a| a as &(dyn ToSql + Sync)).collect()),
        })
        .collect();
    let (answers, result) = client.pipelined(&ahead, then);
    let mut first = None;
    for (u, answer) in unsent.iter().zip(answers) {
        let failure = match (u, answer) {
            (Unsent::Start(_), answer) => {
                let begun = answer.map(|a| match a {
                    Answer::Batch(m) => simple_rows(m),
                    Answer::Written => unreachable!("a start is a batch"),
                });
                let begun = begun.map_err(|e| pg_error(&e));
                *started = Some(begun.clone());
                begun.err()
            }
            (Unsent::Write { name, .. }, Err(e)) => Some(match pg_error(&e) {
                ConnError::Statement(m) => ConnError::SentAhead(format!("statement `{name}`, sent ahead: {m}")),
                other => other,
            }),
            (Unsent::Write { .. }, Ok(_)) => None,
        };
        if first.is_none() {
            first = failure;
        }
    }
    match first {
        Some(e) => Err(e),
        None => result.map_err(|e| pg_error(&e)),
    }
}

/// A query's rows as values.
fn rows_of(rows: &[tokio_postgres::Row]) -> Result<Rows, ConnError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let mut r = Vec::with_capacity(row.len());
        for i in 0..row.len() {
            r.push(row.try_get::<_, PgValue>(i).map_err(|e| ConnError::Statement(e.to_string()))?.0);
        }
        out.push(r);
    }
    Ok(out)
}

/// A simple-query answer's rows: those of the last statement that returned rows, integers and
/// reals parsed from the text protocol.
fn simple_rows(messages: Vec<tokio_postgres::SimpleQueryMessage>) -> Rows {
    use tokio_postgres::SimpleQueryMessage as M;
    let mut last = Vec::new();
    let mut current: Option<Rows> = None;
    for m in messages {
        match m {
            M::RowDescription(_) => current = Some(Vec::new()),
            M::Row(r) => {
                let row = (0..r.len()).map(|i| r.get(i).map_or(Value::Null, parse_text)).collect();
                current.get_or_insert_with(Vec::new).push(row);
            }
            M::CommandComplete(_) => {
                if let Some(rows) = current.take() {
                    last = rows;
                }
            }
            _ => {}
        }
    }
    last
}

fn parse_text(t: &str) -> Value {
    if let Ok(i) = t.parse::<i64>() {
        Value::Int(i)
    } else if let Ok(f) = t.parse::<f64>() {
        Value::Real(f)
    } else {
        Value::Text(t.to_string())
    }
}

fn pg_open_error(e: &tokio_postgres::Error, target: String, url: &str) -> OpenError {
    use tokio_postgres::error::SqlState;
    let engine = Engine::Postgres.name();
    match e.code() {
        Some(c) if *c == SqlState::INVALID_PASSWORD || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
            OpenError::Credentials { engine, target, detail: pg_message(e) }
        }
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => {
            OpenError::MissingDatabase { engine, target, database: database_of(url).unwrap_or_default() }
        }
        Some(_) => OpenError::Other { engine, target, detail: pg_message(e) },
        None => OpenError::Unreachable { engine, target, detail: source_text(e) },
    }
}

fn my_open_error(e: &mysql::Error, target: String, url: &str) -> OpenError {
    let engine = Engine::Mariadb.name();
    match e {
        mysql::Error::MySqlError(m) if m.code == 1045 || m.code == 1044 => OpenError::Credentials { engine, target, detail: m.message.clone() },
        mysql::Error::MySqlError(m) if m.code == 1049 => {
            OpenError::MissingDatabase { engine, target, database: database_of(url).unwrap_or_default() }
        }
        mysql::Error::MySqlError(m) => OpenError::Other { engine, target, detail: m.message.clone() },
        other => OpenError::Unreachable { engine, target, detail: other.to_string() },
    }
}

/// What the server said (`role "x" does not exist`), where the library's own text of a server's
/// error is only `db error`.
fn pg_message(e: &tokio_postgres::Error) -> String {
    e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_string())
}

/// The innermost cause of an error, where the client library wraps an I/O error.
fn source_text(e: &dyn StdError) -> String {
    let mut text = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        text = s.to_string();
        cur = s.source();
    }
    text
}

fn pg_error(e: &tokio_postgres::Error) -> ConnError {
    use tokio_postgres::error::SqlState;
    match e.code() {
        // 55P03: a lock wait ran past `lock_timeout`, which only the 2pc baseline sets.
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::LOCK_NOT_AVAILABLE => {
            ConnError::Retry(e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_string()))
        }
        // An administrator's termination of the backend is a lost connection too.
        Some(c) if *c == SqlState::ADMIN_SHUTDOWN || c.code().starts_with("08") => ConnError::Lost(e.to_string()),
        Some(_) => ConnError::Statement(e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_string())),
        None if e.is_closed() => ConnError::Lost(source_text(e)),
        None => ConnError::Lost(source_text(e)),
    }
}

fn my_error(e: &mysql::Error) -> ConnError {
    match e {
        // 1213: deadlock found; 1205: lock wait timeout; both roll the transaction back.
        mysql::Error::MySqlError(m) if m.code == 1213 || m.code == 1205 => ConnError::Retry(m.message.clone()),
        // 1927: connection killed; 2006/2013: server gone away / lost during query.
        mysql::Error::MySqlError(m) if m.code == 1927 || m.code == 2006 || m.code == 2013 => ConnError::Lost(m.message.clone()),
        mysql::Error::MySqlError(m) => ConnError::Statement(m.message.clone()),
        mysql::Error::IoError(_) | mysql::Error::CodecError(_) => ConnError::Lost(e.to_string()),
        mysql::Error::DriverError(_) => ConnError::Lost(e.to_string()),
        other => ConnError::Statement(other.to_string()),
    }
}

/// The parameter type a value is declared with: SQLite's storage classes as PostgreSQL types.
/// A NULL leaves the type to the server.
fn pg_type(v: &Value) -> Type {
    match v {
        Value::Int(_) => Type::INT8,
        Value::Real(_) => Type::FLOAT8,
        Value::Text(_) => Type::TEXT,
        Value::Blob(_) => Type::BYTEA,
        Value::Null => Type::UNKNOWN,
    }
}

/// An Ensemble value bound to the type PostgreSQL settled on for the parameter. Integers
/// narrow only when they fit; a text never becomes a number.
struct PgArg<'a>(&'a Value);

impl std::fmt::Debug for PgArg<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

type BoxError = Box<dyn StdError + Sync + Send>;

impl ToSql for PgArg<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        let mismatch = || -> BoxError { format!("cannot bind {} as {ty}", self.0.type_name()).into() };
        match self.0 {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i).map_err(|_| mismatch())?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*i).map_err(|_| mismatch())?.to_sql(ty, out),
                Type::FLOAT8 => (*i as f64).to_sql(ty, out),
                Type::BOOL => (*i != 0).to_sql(ty, out),
                _ => Err(mismatch()),
            },
            Value::Real(f) => match *ty {
                Type::FLOAT8 => f.to_sql(ty, out),
                Type::FLOAT4 => (*f as f32).to_sql(ty, out),
                _ => Err(mismatch()),
            },
            Value::Text(s) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => s.as_str().to_sql(ty, out),
                _ => Err(mismatch()),
            },
            Value::Blob(b) => match *ty {
                Type::BYTEA => b.as_slice().to_sql(ty, out),
                _ => Err(mismatch()),
            },
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// A PostgreSQL result value as Ensemble's. `NUMERIC` (what `SUM` and `AVG` of integers return)
/// becomes an integer when it has no fractional digits, as SQLite's `SUM` of integers is, and a
/// real otherwise; `BOOL` becomes 0 or 1, as SQLite has no booleans.
struct PgValue(Value);

impl<'a> FromSql<'a> for PgValue {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        Ok(PgValue(match *ty {
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::INT4 => Value::Int(i32::from_sql(ty, raw)?.into()),
            Type::INT2 => Value::Int(i16::from_sql(ty, raw)?.into()),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
            Type::BOOL => Value::Int(bool::from_sql(ty, raw)?.into()),
            Type::NUMERIC => numeric(raw)?,
            Type::BYTEA => Value::Blob(raw.to_vec()),
            _ => Value::Text(<&str as FromSql>::from_sql(ty, raw)?.to_string()),
        }))
    }

    fn from_sql_null(_: &Type) -> Result<Self, BoxError> {
        Ok(PgValue(Value::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// Decodes PostgreSQL's binary NUMERIC: digit count, weight, sign, display scale, then base-10000
/// digits, the first worth 10000^weight.
fn numeric(raw: &[u8]) -> Result<Value, BoxError> {
    let word = |i: usize| -> Result<u16, BoxError> {
        raw.get(i..i + 2).map(|b| u16::from_be_bytes([b[0], b[1]])).ok_or_else(|| "truncated NUMERIC".into())
    };
    let ndigits = word(0)? as usize;
    let weight = word(2)? as i16 as i32;
    let sign = word(4)?;
    let dscale = word(6)?;
    if sign == 0xC000 {
        return Ok(Value::Real(f64::NAN));
    }
    let digits: Vec<u16> = (0..ndigits).map(|i| word(8 + 2 * i)).collect::<Result<_, _>>()?;
    // As decimal text, so that the conversion to f64 rounds once, correctly.
    let mut int_part = String::new();
    let mut frac_part = String::new();
    for (i, d) in digits.iter().enumerate() {
        let power = weight - i as i32;
        if power >= 0 {
            int_part.push_str(&format!("{d:04}"));
        } else {
            // Fractional groups missing between the point and this digit are zeros.
            while (frac_part.len() as i32) < (-power - 1) * 4 {
                frac_part.push_str("0000");
            }
            frac_part.push_str(&format!("{d:04}"));
        }
    }
    // Integer groups after the last stored digit are zeros.
    let stored_int_groups = digits.len().min((weight + 1).max(0) as usize) as i32;
    for _ in stored_int_groups..(weight + 1) {
        int_part.push_str("0000");
    }
    let int_part = int_part.trim_start_matches('0');
    let int_part = if int_part.is_empty() { "0" } else { int_part };
    let negative = sign == 0x4000;
    if dscale == 0 {
        let n: i128 = int_part.parse()?;
        let n = if negative { -n } else { n };
        return Ok(Value::Int(i64::try_from(n).map_err(|_| "NUMERIC beyond 64-bit integers")?));
    }
    let text = format!("{}{int_part}.{}", if negative { "-" } else { "" }, if frac_part.is_empty() { "0" } else { &frac_part });
    Ok(Value::Real(text.parse()?))
}

fn my_value(v: &Value) -> mysql::Value {
    match v {
        Value::Null => mysql::Value::NULL,
        Value::Int(i) => mysql::Value::Int(*i),
        Value::Real(f) => mysql::Value::Double(*f),
        Value::Text(s) => mysql::Value::Bytes(s.as_bytes().to_vec()),
        Value::Blob(b) => mysql::Value::Bytes(b.clone()),
    }
}

/// A MariaDB result value as Ensemble's, by the column's type: `DECIMAL` (what `SUM` of
/// integers returns) as for PostgreSQL's NUMERIC; strings as text unless the column is binary.
fn from_my(v: mysql::Value, col: &mysql::Column) -> Result<Value, ConnError> {
    use mysql::consts::ColumnType as T;
    let bad = |what: &str| ConnError::Statement(format!("column `{}`: cannot read {what}", col.name_str()));
    Ok(match v {
        mysql::Value::NULL => Value::Null,
        mysql::Value::Int(i) => Value::Int(i),
        mysql::Value::UInt(u) => Value::Int(i64::try_from(u).map_err(|_| bad("an unsigned integer beyond 64-bit"))?),
        mysql::Value::Float(f) => Value::Real(f.into()),
        mysql::Value::Double(f) => Value::Real(f),
        mysql::Value::Bytes(b) => match col.column_type() {
            T::MYSQL_TYPE_NEWDECIMAL | T::MYSQL_TYPE_DECIMAL => {
                let s = String::from_utf8(b).map_err(|_| bad("a DECIMAL"))?;
                if s.contains('.') {
                    Value::Real(s.parse().map_err(|_| bad("a DECIMAL"))?)
                } else {
                    Value::Int(s.parse().map_err(|_| bad("a DECIMAL"))?)
                }
            }
            T::MYSQL_TYPE_LONGLONG | T::MYSQL_TYPE_LONG | T::MYSQL_TYPE_SHORT | T::MYSQL_TYPE_TINY | T::MYSQL_TYPE_INT24 => {
                Value::Int(String::from_utf8(b).ok().and_then(|s| s.parse().ok()).ok_or_else(|| bad("an integer"))?)
            }
            T::MYSQL_TYPE_DOUBLE | T::MYSQL_TYPE_FLOAT => {
                Value::Real(String::from_utf8(b).ok().and_then(|s| s.parse().ok()).ok_or_else(|| bad("a double"))?)
            }
            // Character set 63 is `binary`: a BLOB or VARBINARY.
            _ if col.character_set() == 63 => Value::Blob(b),
            _ => Value::Text(String::from_utf8(b).map_err(|_| bad("text that is not UTF-8"))?),
        },
        other => return Err(bad(&format!("{other:?}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(ndigits: u16, weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [ndigits, weight as u16, sign, dscale] {
            v.extend_from_slice(&w.to_be_bytes());
        }
        for d in digits {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v
    }

    #[test]
    fn numeric_decodes_integers_and_fractions() {
        // 123456789 = 1 2345 6789 in base 10000, weight 2.
        assert_eq!(numeric(&encode(3, 2, 0, 0, &[1, 2345, 6789])).unwrap(), Value::Int(123_456_789));
        // 20000: one stored digit (2) of weight 1; the trailing zero group is implied.
        assert_eq!(numeric(&encode(1, 1, 0, 0, &[2])).unwrap(), Value::Int(20_000));
        assert_eq!(numeric(&encode(1, 0, 0x4000, 0, &[7])).unwrap(), Value::Int(-7));
        assert_eq!(numeric(&encode(0, 0, 0, 0, &[])).unwrap(), Value::Int(0));
        // 2.5 = 2 . 5000
        assert_eq!(numeric(&encode(2, 0, 0, 1, &[2, 5000])).unwrap(), Value::Real(2.5));
        // 0.0005 = weight -1: digit 5 worth 10000^-1.
        assert_eq!(numeric(&encode(1, -1, 0, 4, &[5])).unwrap(), Value::Real(0.0005));
        // 0.00000005 = weight -2.
        assert_eq!(numeric(&encode(1, -2, 0, 8, &[5])).unwrap(), Value::Real(0.000_000_05));
    }

    #[test]
    fn urls_get_another_database_and_hide_credentials_in_messages() {
        assert_eq!(
            with_database(Engine::Postgres, "postgres://postgres@127.0.0.1:5432/test", "ensemble_x_0").unwrap(),
            "postgres://postgres@127.0.0.1:5432/ensemble_x_0"
        );
        assert_eq!(with_database(Engine::Mariadb, "mysql://root@127.0.0.1:3306", "e_1").unwrap(), "mysql://root@127.0.0.1:3306/e_1");
        assert_eq!(target_of(Engine::Mariadb, "mysql://root:secret@db.example:3306/test"), "mysql://db.example:3306/test");
        assert!(matches!(with_database(Engine::Mariadb, "http//nope", "x"), Err(OpenError::BadUrl { .. })));
    }

    #[test]
    fn a_url_for_the_other_engine_is_named_as_such_and_never_shows_its_password() {
        let e = with_database(Engine::Postgres, "mysql://root:secret@127.0.0.1:3306/test", "x").unwrap_err().to_string();
        assert!(e.starts_with("bad PostgreSQL URL `mysql://root:***@127.0.0.1:3306/test`"), "{e}");
        assert!(e.contains("is for MariaDB (--backend mariadb)"), "{e}");
        assert!(!e.contains("secret"), "{e}");
        let e = with_database(Engine::Mariadb, "postgres://postgres@127.0.0.1:5432/test", "x").unwrap_err().to_string();
        assert!(e.contains("is for PostgreSQL (--backend postgres)"), "{e}");
        let e = with_database(Engine::Postgres, "garbage", "x").unwrap_err().to_string();
        assert!(e.contains("(expected postgres://user@host:port/database)"), "{e}");
        assert_eq!(without_password("mysql://u:p@h:1/db?x=1"), "mysql://u:***@h:1/db?x=1");
        assert_eq!(without_password("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(without_password("garbage"), "garbage");
    }
}
