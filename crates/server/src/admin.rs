//! The databases of a run on a server: one per instance, `ensemble_<run>_<i>`, created before the
//! run and dropped after it (unless the user keeps them), and the checks that turn a server that
//! cannot serve into a clear error before any run starts.

use crate::conn::{with_database, Conn, ConnError, OpenError};
use crate::dialect::Engine;

/// The default server of each engine: the local ones DEVELOPERS' machines and CI run.
pub fn default_url(engine: Engine) -> &'static str {
    match engine {
        Engine::Postgres => "postgres://postgres@127.0.0.1:5432/test",
        Engine::Mariadb => "mysql://root@127.0.0.1:3306/test",
    }
}

/// The name of instance `i`'s database in run `run` (`run` is made of `[a-z0-9_]`).
pub fn database_name(run: &str, i: u32) -> String {
    format!("ensemble_{run}_{i}")
}

/// A run tag that makes database names unique on a shared server: the label, this process and
/// the clock, reduced to what an unquoted identifier may hold and to PostgreSQL's 63 bytes.
pub fn run_tag(label: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let clean: String = label.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).take(28).collect();
    format!("{clean}_{}_{:x}", std::process::id(), (nanos % (1 << 32)) as u64)
}

/// The server URL instance `i` lives on: the one URL given, or the `i`-th of one per instance.
pub fn server_url(urls: &[String], i: u32) -> Result<&str, String> {
    match urls {
        [one] => Ok(one),
        many if (i as usize) < many.len() => Ok(&many[i as usize]),
        many => Err(format!("{} server URLs given for instance {i}: give one, or one per instance", many.len())),
    }
}

/// Instance `i`'s database URL.
pub fn instance_url(engine: Engine, urls: &[String], run: &str, i: u32) -> Result<String, String> {
    with_database(engine, server_url(urls, i)?, &database_name(run, i)).map_err(|e| e.to_string())
}

/// Connects to every server URL, so that an unreachable server, refused credentials or a
/// missing database is an error naming the server before any run starts.
pub fn preflight(engine: Engine, urls: &[String]) -> Result<(), String> {
    for url in urls {
        Conn::open(engine, url).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Checks that the server at `url` can take `needed` sessions more than it has open, for
/// `what` (say, "9 instances of 40 storage workers each"): a node whose storage workers cannot
/// all connect serves nothing, so a server whose `max_connections` is too low is an error
/// naming it before any run starts, not a run that fails on its first requests.
pub fn check_room_for_sessions(engine: Engine, url: &str, needed: u64, what: &str) -> Result<(), String> {
    let mut conn = Conn::open(engine, url).map_err(|e| e.to_string())?;
    let sql = match engine {
        Engine::Mariadb => "SELECT @@max_connections, (SELECT COUNT(*) FROM information_schema.processlist)",
        Engine::Postgres => {
            "SELECT current_setting('max_connections')::int8, (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
        }
    };
    let target = crate::conn::target_of(engine, url);
    let rows = conn.batch_rows(sql).map_err(|e| format!("reading how many sessions the {} server at {target} allows: {e}", engine.name()))?;
    let (allowed, open) = match rows.first().map(Vec::as_slice) {
        Some([ensemble_core::Value::Int(allowed), ensemble_core::Value::Int(open)]) => (*allowed, *open),
        other => return Err(format!("the {} server at {target} answered {other:?} when asked how many sessions it allows", engine.name())),
    };
    let room = u64::try_from(allowed - open).unwrap_or(0);
    if needed > room {
        return Err(format!(
            "the {} server at {target} allows {allowed} sessions (max_connections) and has {open} open, room for {room}: {what} need at least {needed}; \
             raise max_connections (scripts/start-databases.sh sets 2000 on MariaDB, 1000 on PostgreSQL)",
            engine.name()
        ));
    }
    Ok(())
}

/// Creates instance `i`'s database on its server. Fails if it exists: a run starts from fresh
/// databases.
pub fn create_database(engine: Engine, urls: &[String], run: &str, i: u32) -> Result<(), String> {
    let url = server_url(urls, i)?;
    let name = database_name(run, i);
    let mut conn = Conn::open(engine, url).map_err(|e| e.to_string())?;
    let sql = match engine {
        // Byte-order collation, as SQLite's BINARY, so ORDER BY on text agrees with the replay.
        Engine::Postgres => format!("CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"),
        // A binary collation: `=` on text is exact and ORDER BY is by bytes, as in SQLite.
        Engine::Mariadb => format!("CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"),
    };
    conn.batch(&sql).map_err(|e| format!("creating database `{name}` on {}: {e}", engine.name()))
}

/// Drops instance `i`'s database, if it exists. Tried up to three times when a session is
/// lost on the way: a session the server ends meanwhile (a restart, an administrator) would
/// otherwise leave the database behind, and trying again changes nothing that the first try
/// did. Any other failure is reported at once.
pub fn drop_database(engine: Engine, urls: &[String], run: &str, i: u32) -> Result<(), String> {
    let mut tries = 1;
    loop {
        match drop_database_once(engine, urls, run, i) {
            Ok(()) => return Ok(()),
            Err(DropFailure { lost: true, .. }) if tries < 3 => tries += 1,
            Err(DropFailure { message, .. }) => return Err(message),
        }
    }
}

/// Why one try at [`drop_database`] failed, and whether it was a lost session.
struct DropFailure {
    message: String,
    lost: bool,
}

fn drop_database_once(engine: Engine, urls: &[String], run: &str, i: u32) -> Result<(), DropFailure> {
    let other = |message: String| DropFailure { message, lost: false };
    let on_conn = |context: String| move |e: ConnError| DropFailure { lost: matches!(e, ConnError::Lost(_)), message: format!("{context}: {e}") };
    let url = server_url(urls, i).map_err(other)?;
    let name = database_name(run, i);
    let mut conn = Conn::open(engine, url).map_err(|e: OpenError| other(e.to_string()))?;
    match engine {
        Engine::Mariadb => {
            let ended = end_sessions_on(&mut conn, &name).map_err(on_conn(format!("ending the sessions left on `{name}` before dropping it")))?;
            if ended > 0 {
                // A branch its killed session had prepared is handed over only once the
                // session's teardown is through.
                wait_until_the_run_s_sessions_ended(&mut conn, run).map_err(on_conn(format!("waiting for the sessions ended on `{name}` to go")))?;
            }
            rollback_prepared(&mut conn, run).map_err(on_conn(format!("rolling back the run's prepared XA branches before dropping `{name}`")))?;
        }
        // A prepared transaction keeps its database from being dropped, even WITH (FORCE), and
        // is rolled back only from a session of that database.
        Engine::Postgres => {
            let exists = conn
                .batch_rows(&format!("SELECT 1 FROM pg_database WHERE datname = '{name}'"))
                .map_err(on_conn(format!("looking for database `{name}` on PostgreSQL")))?;
            if !exists.is_empty() {
                let db_url = instance_url(engine, urls, run, i).map_err(other)?;
                let mut db = Conn::open(engine, &db_url).map_err(|e| other(e.to_string()))?;
                rollback_prepared_pg(&mut db, run).map_err(on_conn(format!("rolling back the run's prepared transactions before dropping `{name}`")))?;
            }
        }
    }
    let sql = match engine {
        // FORCE ends connections a killed node left behind.
        Engine::Postgres => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        // The server's own wait for a table's metadata lock is a day.
        Engine::Mariadb => format!("SET SESSION lock_wait_timeout = {DROP_WAIT_S}; DROP DATABASE IF EXISTS {name}"),
    };
    conn.batch(&sql).map_err(on_conn(format!("dropping database `{name}` on {}", engine.name())))
}

/// How long dropping a MariaDB database waits for the metadata locks of its tables, in seconds:
/// once [`end_sessions_on`] has ended the sessions on it, only a prepared branch (rolled back
/// before) or a session that reached the database meanwhile can hold one.
const DROP_WAIT_S: u32 = 60;

/// Ends every MariaDB session whose database is `name`, but this one, and returns how many it
/// ended. A session left on a run's database, such as a storage worker stuck in a statement
/// after its host returned (an embedded host does not wait for it), holds its tables'
/// metadata locks, and `DROP DATABASE` would wait for them for the server's
/// `lock_wait_timeout`, a day by default: PostgreSQL's `DROP DATABASE ... WITH (FORCE)` ends
/// such sessions, and this does the same. Test: `dropping_a_run_s_database_ends_the_sessions_left_on_it`.
fn end_sessions_on(conn: &mut Conn, name: &str) -> Result<usize, ConnError> {
    let sessions = conn.batch_rows(&format!("SELECT id FROM information_schema.processlist WHERE db = '{name}' AND id <> CONNECTION_ID()"))?;
    let mut ended = 0;
    for id in sessions.iter().filter_map(|r| match r.first() {
        Some(ensemble_core::Value::Int(id)) => Some(*id),
        _ => None,
    }) {
        match conn.batch(&format!("KILL CONNECTION {id}")) {
            Ok(()) => ended += 1,
            // It ended by itself since the list was read.
            Err(ConnError::Statement(m)) if m.contains("Unknown thread id") => {}
            Err(e) => return Err(e),
        }
    }
    Ok(ended)
}

/// How long [`rollback_prepared`] (and a decision sent again, `crate::twopc`) waits for the
/// server to notice that a branch's session ended.
pub(crate) const DETACH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
pub(crate) const DETACH_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Rolls back the XA branches of run `run` still prepared on this MariaDB server (a 2PC run's
/// node stopped before its decision, say). A prepared branch keeps its locks across sessions and
/// server restarts, and would block dropping its database for good.
///
/// It waits first for the run's sessions to end ([`wait_until_the_run_s_sessions_ended`]), and
/// then looks again: a branch whose session was committing or rolling it back as it ended is
/// gone by then, and counts for nothing.
pub fn rollback_prepared(conn: &mut Conn, run: &str) -> Result<usize, ConnError> {
    let prefix = format!("{run}-");
    let ours = |conn: &mut Conn| -> Result<Vec<String>, ConnError> {
        Ok(xa_prepared(conn)?
            .into_iter()
            .filter(|xid| xid.starts_with(&prefix) && xid.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .collect())
    };
    if ours(conn)?.is_empty() {
        return Ok(0);
    }
    wait_until_the_run_s_sessions_ended(conn, run)?;
    let mut n = 0;
    for xid in ours(conn)? {
        // MariaDB hands a prepared branch to other sessions only once the session that
        // prepared it has ended (the wait above gives up after a while); one that its own
        // session decided meanwhile is no longer listed.
        let mut waited = std::time::Duration::ZERO;
        let rolled_back = loop {
            match conn.batch(&format!("XA ROLLBACK '{xid}'")) {
                Ok(()) => break true,
                Err(ConnError::Statement(m)) if m.contains("XAER_NOTA") && !xa_prepared(conn)?.contains(&xid) => break false,
                Err(ConnError::Statement(m)) if m.contains("XAER_NOTA") && waited < DETACH_WAIT => {
                    std::thread::sleep(DETACH_POLL);
                    waited += DETACH_POLL;
                }
                Err(e) => return Err(e),
            }
        };
        n += usize::from(rolled_back);
    }
    Ok(n)
}

/// Waits, up to [`DETACH_WAIT`], until MariaDB lists no session on run `run`'s databases, and
/// then goes on either way. A branch prepared by a session that has just ended must not be
/// decided by another session while the server is still tearing the old one down: MariaDB 10.11
/// can then take the XA ROLLBACK and yet keep the branch's InnoDB transaction, prepared, with no
/// session and in no list (`SHOW ENGINE INNODB STATUS`: "ACTIVE (PREPARED) … recovered trx"),
/// holding its locks until the server restarts; dropping its database then waits for them and
/// fails. A session leaves the process list near the end of its teardown, and InnoDB lets go of
/// its branch just after that: so the wait goes on until InnoDB holds no transaction for a
/// session the process list no longer names ([`sessions_still_held`]). Test:
/// `a_branch_whose_session_just_ended_is_rolled_back_whole`.
pub fn wait_until_the_run_s_sessions_ended(conn: &mut Conn, run: &str) -> Result<(), ConnError> {
    // `_` is LIKE's one-character wildcard; the run tag has no other special character.
    let first = database_name(run, 0);
    let pattern = first[..first.len() - 1].replace('_', "\\_") + "%";
    let sessions = format!("SELECT id FROM information_schema.processlist WHERE db LIKE '{pattern}' AND id <> CONNECTION_ID()");
    let mut waited = std::time::Duration::ZERO;
    while waited < DETACH_WAIT && !conn.batch_rows(&sessions)?.is_empty() {
        std::thread::sleep(DETACH_POLL);
        waited += DETACH_POLL;
    }
    while waited < DETACH_WAIT && !sessions_still_held(conn)?.is_empty() {
        std::thread::sleep(DETACH_POLL);
        waited += DETACH_POLL;
    }
    Ok(())
}

/// The MariaDB sessions InnoDB still holds a transaction for, read live (`SHOW ENGINE INNODB
/// STATUS`, "MariaDB thread id N, …" in its list of transactions; `information_schema.innodb_trx` is a
/// cache that a reader every 100 ms keeps from ever being refreshed). A session's teardown
/// hands its prepared branch to other sessions (`XA RECOVER` lists it, `XA COMMIT` and `XA
/// ROLLBACK` take it) and leaves the process list *before* InnoDB lets go of the branch's
/// transaction (MariaDB 10.11: `unlink_thd` runs `THD::cleanup`, whose `trans_xa_detach`
/// marks the branch recovered, then leaves `server_threads`, and only then
/// `THD::free_connection` closes the connection in InnoDB, `trx_disconnect_prepared`). A
/// decision sent in between finds no recovered transaction in InnoDB, does nothing there, and
/// is answered OK: the branch's transaction stays prepared, in no list, its locks held until
/// the server restarts, and an `XA COMMIT` so answered committed nothing. Once a session is
/// named here no more, that gap is closed.
pub fn sessions_innodb_holds(conn: &mut Conn) -> Result<std::collections::BTreeSet<i64>, ConnError> {
    let rows = conn.batch_rows("SHOW ENGINE INNODB STATUS")?;
    match rows.first().and_then(|r| r.get(2)) {
        Some(ensemble_core::Value::Text(status)) => sessions_in_innodb_status(status),
        other => Err(format!("it returned no status text ({other:?})")),
    }
    .map_err(|why| ConnError::Statement(format!("SHOW ENGINE INNODB STATUS: {why}: the sessions InnoDB holds a transaction for cannot be read")))
}

/// The sessions named in the list of transactions of `SHOW ENGINE INNODB STATUS`'s text.
fn sessions_in_innodb_status(status: &str) -> Result<std::collections::BTreeSet<i64>, String> {
    // Past 1 MB MariaDB cuts the middle of the list of transactions out.
    if status.contains("\n... truncated...\n") {
        return Err("its text was truncated".into());
    }
    // Only the list of transactions: the section on the latest deadlock names its two
    // sessions for as long as no other deadlock replaces it.
    let list = status
        .split_once("LIST OF TRANSACTIONS FOR EACH SESSION:")
        .and_then(|(_, rest)| rest.split_once("\nFILE I/O\n"))
        .map(|(list, _)| list)
        .ok_or("its text has no list of transactions followed by FILE I/O")?;
    Ok(list
        .lines()
        .filter_map(|l| l.strip_prefix("MariaDB thread id "))
        .filter_map(|rest| rest.split(',').next()?.trim().parse().ok())
        .collect())
}

/// The sessions whose teardown has left the process list but not yet InnoDB
/// ([`sessions_innodb_holds`]): InnoDB read first, so that a session it names and the process
/// list read after it does not has left the list (or ended whole meanwhile, which the next look
/// shows).
pub fn sessions_still_held(conn: &mut Conn) -> Result<Vec<i64>, ConnError> {
    let held = sessions_innodb_holds(conn)?;
    let listed: std::collections::BTreeSet<i64> = conn
        .batch_rows("SELECT id FROM information_schema.processlist")?
        .into_iter()
        .filter_map(|r| match r.first() {
            Some(ensemble_core::Value::Int(id)) => Some(*id),
            _ => None,
        })
        .collect();
    Ok(held.difference(&listed).copied().collect())
}

/// A point in a server's sequence of sessions: those opened before it are earlier. MariaDB
/// numbers its connections in sequence (`CONNECTION_ID()`, never used again below 2^32);
/// PostgreSQL stamps each backend's start (`backend_start`, on the server's clock, which also
/// reads the mark).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SessionMark {
    engine: Engine,
    /// MariaDB: the id of the session that read the mark. PostgreSQL: the server's clock then,
    /// in microseconds since the epoch.
    at: i64,
}

impl SessionMark {
    pub(crate) fn now(conn: &mut Conn, engine: Engine) -> Result<SessionMark, ConnError> {
        let sql = match engine {
            Engine::Mariadb => "SELECT CONNECTION_ID()",
            Engine::Postgres => "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
        };
        match conn.batch_rows(sql)?.first().and_then(|r| r.first()) {
            Some(ensemble_core::Value::Int(at)) => Ok(SessionMark { engine, at: *at }),
            other => Err(ConnError::Statement(format!("`{sql}` read {other:?}"))),
        }
    }
}

/// Ends every session on `conn`'s database opened before `mark` that has a transaction open
/// (or, on MariaDB, a statement running), and waits until the server has torn each one down;
/// returns how many it ended. A 2PC node calls it as it starts, with a mark read before any of
/// its own sessions opened, before it lists the branches prepared at its instance: a node
/// killed with a statement on its way leaves a session that runs it after the node is gone (the
/// server reads what was sent before it reads the end of the connection), and a branch such a
/// session prepared after the listing would be in doubt with no one to ask about it, holding
/// its locks. No other node uses an instance's database, so the sessions this ends are an
/// earlier incarnation's; the new node's own, opening while it recovers, are after the mark.
/// Test: `a_starting_node_ends_its_earlier_incarnation_s_open_transactions_first`.
pub(crate) fn end_earlier_transactions(conn: &mut Conn, mark: SessionMark) -> Result<usize, ConnError> {
    let engine = mark.engine;
    let ints = |rows: ensemble_core::Rows| -> Vec<i64> {
        rows.into_iter()
            .filter_map(|r| match r.first() {
                Some(ensemble_core::Value::Int(v)) => Some(*v),
                _ => None,
            })
            .collect()
    };
    let (listed, ended, killed): (String, usize, Vec<i64>) = match engine {
        Engine::Postgres => {
            // A backend is named by its pid and its start, since pids are used again.
            let which = format!(
                "datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND xact_start IS NOT NULL \
                 AND (extract(epoch FROM backend_start) * 1000000)::bigint < {}",
                mark.at
            );
            let open = conn.batch_rows(&format!("SELECT pid, (extract(epoch FROM backend_start) * 1000000)::bigint FROM pg_stat_activity WHERE {which}"))?;
            if open.is_empty() {
                return Ok(0);
            }
            let named: Vec<String> = open.iter().map(|r| format!("({}, {})", r[0].as_int().unwrap_or(0), r[1].as_int().unwrap_or(0))).collect();
            let that = format!("(pid, (extract(epoch FROM backend_start) * 1000000)::bigint) IN ({})", named.join(", "));
            conn.batch_rows(&format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {that}"))?;
            (format!("SELECT pid FROM pg_stat_activity WHERE {that}"), named.len(), Vec::new())
        }
        Engine::Mariadb => {
            // A session between two statements of its transaction sleeps in the process list;
            // InnoDB names it.
            let held = sessions_innodb_holds(conn)?;
            let here = conn.batch_rows(&format!("SELECT id, command FROM information_schema.processlist WHERE db = DATABASE() AND id < {}", mark.at))?;
            let open: Vec<i64> = here
                .iter()
                .filter_map(|r| match (&r[0], &r[1]) {
                    (ensemble_core::Value::Int(id), ensemble_core::Value::Text(command)) if command != "Sleep" || held.contains(id) => Some(*id),
                    (ensemble_core::Value::Int(id), _) if held.contains(id) => Some(*id),
                    _ => None,
                })
                .collect();
            if open.is_empty() {
                return Ok(0);
            }
            for id in &open {
                match conn.batch(&format!("KILL CONNECTION {id}")) {
                    Ok(()) => {}
                    // It ended by itself since the list was read.
                    Err(ConnError::Statement(m)) if m.contains("Unknown thread id") => {}
                    Err(e) => return Err(e),
                }
            }
            let ids = open.iter().map(|id| id.to_string()).collect::<Vec<_>>().join(", ");
            (format!("SELECT id FROM information_schema.processlist WHERE id IN ({ids})"), open.len(), open)
        }
    };
    let mut waited = std::time::Duration::ZERO;
    loop {
        let left = ints(conn.batch_rows(&listed)?);
        // On MariaDB InnoDB lets go of a session's transaction just after it leaves the list
        // (`sessions_innodb_holds`).
        let held: Vec<i64> = if killed.is_empty() || !left.is_empty() { Vec::new() } else { sessions_innodb_holds(conn)?.into_iter().filter(|id| killed.contains(id)).collect() };
        if left.is_empty() && held.is_empty() {
            return Ok(ended);
        }
        if waited >= DETACH_WAIT {
            return Err(ConnError::Statement(format!(
                "{ended} session(s) of an earlier start, with a transaction open on this database, were ended, and {:?} still {} after {DETACH_WAIT:?}",
                if left.is_empty() { &held } else { &left },
                if left.is_empty() { "had a transaction in InnoDB" } else { "were listed" }
            )));
        }
        std::thread::sleep(DETACH_POLL);
        waited += DETACH_POLL;
    }
}

/// The ids of the XA branches prepared on this MariaDB server (`XA RECOVER`). The branches this
/// project names are `run-coordinator-n-instance`, with no branch qualifier, so the id is the
/// row's data column (after formatID, gtrid_length and bqual_length).
pub(crate) fn xa_prepared(conn: &mut Conn) -> Result<Vec<String>, ConnError> {
    let rows = conn.batch_rows("XA RECOVER")?;
    Ok(rows.into_iter().filter_map(|r| match r.into_iter().nth(3) {
        Some(ensemble_core::Value::Text(xid)) => Some(xid),
        _ => None,
    }).collect())
}

/// Rolls back the transactions of run `run` still prepared in the database `conn` is connected
/// to (PostgreSQL: a 2PC run's node stopped before its decision, say).
pub fn rollback_prepared_pg(conn: &mut Conn, run: &str) -> Result<usize, ConnError> {
    let rows = conn.batch_rows("SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")?;
    let prefix = format!("{run}-");
    let mut n = 0;
    for row in rows {
        let Some(ensemble_core::Value::Text(gid)) = row.first() else { continue };
        if gid.starts_with(&prefix) && gid.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            conn.batch(&format!("ROLLBACK PREPARED '{gid}'"))?;
            n += 1;
        }
    }
    Ok(n)
}

/// What the two-phase-commit baseline needs of a PostgreSQL server before it starts: prepared
/// transactions enabled (`max_prepared_transactions` is 0 by default, and changes only with a
/// restart).
pub fn check_prepared_transactions(url: &str) -> Result<(), String> {
    let mut conn = Conn::open(Engine::Postgres, url).map_err(|e| e.to_string())?;
    let rows = conn.batch_rows("SHOW max_prepared_transactions").map_err(|e| e.to_string())?;
    let value = match rows.first().and_then(|r| r.first()) {
        Some(ensemble_core::Value::Int(n)) => n.to_string(),
        Some(ensemble_core::Value::Text(t)) => t.clone(),
        other => return Err(format!("SHOW max_prepared_transactions gave {other:?}")),
    };
    prepared_transactions_enabled(&value, &crate::conn::target_of(Engine::Postgres, url))
}

/// The check of [`check_prepared_transactions`] on the setting's value.
pub fn prepared_transactions_enabled(max_prepared_transactions: &str, server: &str) -> Result<(), String> {
    match max_prepared_transactions.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(()),
        _ => Err(format!(
            "the PostgreSQL server at {server} has max_prepared_transactions = {max_prepared_transactions}: the 2pc baseline commits distributed transactions with PREPARE TRANSACTION, which needs it above 0 (scripts/start-databases.sh sets it, and restarts the server)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_tags_are_identifiers() {
        let t = run_tag("tpcw-ensemble-3 (real)");
        assert!(t.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'), "{t}");
        assert!(database_name(&t, 12).len() <= 63);
    }

    #[test]
    fn one_url_serves_every_instance_and_many_must_cover_them() {
        let one = vec!["postgres://a/x".to_string()];
        assert_eq!(server_url(&one, 5).unwrap(), "postgres://a/x");
        let two = vec!["postgres://a/x".to_string(), "postgres://b/x".to_string()];
        assert_eq!(server_url(&two, 1).unwrap(), "postgres://b/x");
        assert!(server_url(&two, 2).unwrap_err().contains("one per instance"));
    }

    /// What MariaDB 10.11 printed after a deadlock, with a branch prepared by session 11145
    /// and one whose session has gone (shortened).
    const INNODB_STATUS: &str = "\
------------------------
LATEST DETECTED DEADLOCK
------------------------
*** (1) TRANSACTION:
TRANSACTION 239062, ACTIVE 1 sec starting index read
MariaDB thread id 11144, OS thread handle 140285982607040, query id 1339384 127.0.0.1 root Updating
*** (2) TRANSACTION:
TRANSACTION 239061, ACTIVE 2 sec starting index read
MariaDB thread id 11143, OS thread handle 131489754666688, query id 1339383 127.0.0.1 root Updating
*** WE ROLL BACK TRANSACTION (1)
------------
TRANSACTIONS
------------
Trx id counter 239070
LIST OF TRANSACTIONS FOR EACH SESSION:
---TRANSACTION 239069, ACTIVE (PREPARED) 0 sec
1 lock struct(s), heap size 1128, 0 row lock(s), undo log entries 1
MariaDB thread id 11145, OS thread handle 140285903492800, query id 1339394 127.0.0.1 root starting
SHOW ENGINE INNODB STATUS
------- TRX HAS BEEN WAITING 2 ns FOR THIS LOCK TO BE GRANTED:
------------------
---TRANSACTION 20, ACTIVE (PREPARED) 3 sec recovered trx
1 lock struct(s), heap size 1128, 0 row lock(s), undo log entries 1
--------
FILE I/O
--------
I/O thread 0 state: waiting for completed aio requests (insert buffer thread)
";

    #[test]
    fn the_sessions_innodb_holds_are_read_from_its_list_of_transactions_only() {
        // Not the two of the latest deadlock, long gone; nothing for the recovered branch.
        assert_eq!(sessions_in_innodb_status(INNODB_STATUS).unwrap().into_iter().collect::<Vec<_>>(), vec![11145]);
        let cut = INNODB_STATUS.replace("---TRANSACTION 239069", "\n... truncated...\n---TRANSACTION 239069");
        assert!(sessions_in_innodb_status(&cut).unwrap_err().contains("truncated"));
        let no_list = INNODB_STATUS.replace("LIST OF TRANSACTIONS FOR EACH SESSION:", "");
        assert!(sessions_in_innodb_status(&no_list).unwrap_err().contains("no list of transactions"));
    }

    #[test]
    fn a_server_without_prepared_transactions_is_named_with_the_setting() {
        let e = prepared_transactions_enabled("0", "postgres://db1:5432").unwrap_err();
        assert!(e.contains("postgres://db1:5432") && e.contains("max_prepared_transactions = 0"), "{e}");
        assert!(prepared_transactions_enabled("1000", "x").is_ok());
    }
}
