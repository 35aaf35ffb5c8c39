//! The server backends against the real local servers (PostgreSQL on 127.0.0.1:5432, MariaDB on
//! 127.0.0.1:3306, as scripts/start-databases.sh starts them). Ignored by `./x test`, which must
//! pass on a machine without servers; `.ci/run` starts the servers and runs these with
//! `--ignored`, so they fail, never skip, when a server is down.

use ensemble_app::{apps, ChangeKind, ExecRole, InstanceId, Position, StorageJob, StorageResult};
use ensemble_core::{ClientId, Outcome, Request, Storage, Value};
use ensemble_server::{admin, translate, Engine, ServerStorage};
use std::sync::Arc;

const ENGINES: [Engine; 2] = [Engine::Postgres, Engine::Mariadb];

/// Databases made for one test, dropped when it ends.
struct Scratch {
    engine: Engine,
    urls: Vec<String>,
    run: String,
    n: u32,
}

impl Scratch {
    fn new(engine: Engine, label: &str, n: u32) -> Scratch {
        let s = Scratch { engine, urls: vec![admin::default_url(engine).to_string()], run: admin::run_tag(label), n };
        for i in 0..n {
            admin::create_database(engine, &s.urls, &s.run, i).unwrap_or_else(|e| panic!("{e}"));
        }
        s
    }

    /// Instance `i`'s database with shop's schema and data (all of it: these tests place nothing).
    fn shop(&self, i: u32) -> ServerStorage {
        let mut s = self.shop_session(i);
        let app = apps::shop::application();
        s.create_schema().unwrap();
        s.load(&(app.generate)(ensemble_app::DataConfig { scale: 1, seed: 1 }), |_, _, _| true).unwrap();
        s
    }

    /// A session on instance `i`'s database for shop, without making its schema.
    fn shop_session(&self, i: u32) -> ServerStorage {
        let app = apps::shop::application();
        let sql = Arc::new(translate(&app, self.engine).unwrap());
        let url = admin::instance_url(self.engine, &self.urls, &self.run, i).unwrap();
        ServerStorage::open(&url, app, sql, InstanceId(i)).unwrap()
    }
}

impl Drop for Scratch {
    /// Drops the test's databases. One that cannot be dropped fails the test, naming why and
    /// what the server still runs: left behind silently, it would fail server-suites.sh's last
    /// check, which cannot say why.
    fn drop(&mut self) {
        let mut failed = Vec::new();
        for i in 0..self.n {
            if let Err(e) = admin::drop_database(self.engine, &self.urls, &self.run, i) {
                failed.push(format!("database {i} of {}: {e}", self.run));
            }
        }
        if failed.is_empty() {
            return;
        }
        let running = match self.engine {
            Engine::Mariadb => "SELECT trx_id, trx_state, trx_mysql_thread_id, trx_rows_locked, trx_query FROM information_schema.innodb_trx; XA RECOVER",
            Engine::Postgres => "SELECT pid, datname, state, query FROM pg_stat_activity WHERE datname LIKE 'ensemble\\_%'; SELECT gid, database FROM pg_prepared_xacts",
        };
        let seen = ensemble_server::conn::Conn::open(self.engine, admin::default_url(self.engine))
            .map_err(|e| e.to_string())
            .and_then(|mut c| running.split("; ").map(|q| c.batch_rows(q).map(|rows| format!("{q}: {rows:?}")).map_err(|e| e.to_string())).collect::<Result<Vec<_>, _>>());
        let message = format!("could not drop {} (the server then: {seen:?})", failed.join("; "));
        if std::thread::panicking() {
            eprintln!("{message}");
        } else {
            panic!("{message}");
        }
    }
}

fn request(seq: u64, txn: &str, params: Vec<Value>) -> Request {
    Request { client: ClientId(1), seq, txn: txn.into(), params }
}

/// Runs a local operation's job and returns what it executed.
fn local(s: &mut ServerStorage, seq: u64, txn: &str, params: Vec<Value>) -> (Outcome, ensemble_app::StateUpdate, Position, u32) {
    executed(s.run(&StorageJob::Execute { request: request(seq, txn, params), role: ExecRole::Local }))
}

fn executed(r: StorageResult) -> (Outcome, ensemble_app::StateUpdate, Position, u32) {
    match r {
        StorageResult::Executed { outcome, update, position, retries, .. } => (outcome, update, position, retries),
        other => panic!("{other:?}"),
    }
}

#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_global_is_captured_at_one_instance_and_applied_at_another() {
    for engine in ENGINES {
        let dbs = Scratch::new(engine, "capture", 2);
        let (mut a, mut b) = (dbs.shop(0), dbs.shop(1));
        let run = |s: &mut ServerStorage, seq, txn: &str, params| {
            executed(s.run(&StorageJob::Execute { request: request(seq, txn, params), role: ExecRole::Global }))
        };
        // A cart, an item in it twice (an insert, then an update of the same row), then the order
        // (updates of items, an insert into orders, a status update).
        let (o, create, p, _) = run(&mut a, 1, "create_cart", vec![Value::Int(7)]);
        assert!(o.committed() && p == Position::Global { seq: 1 }, "{}: {o:?} {p:?}", engine.name());
        let (o, add, _, _) = run(&mut a, 2, "add_item", vec![Value::Int(7), Value::Int(3), Value::Int(1)]);
        assert!(o.committed(), "{o:?}");
        let (o, again, _, _) = run(&mut a, 3, "add_item", vec![Value::Int(7), Value::Int(3), Value::Int(2)]);
        assert!(o.committed(), "{o:?}");
        assert!(
            matches!(&again.changes[..], [c] if matches!(&c.kind, ChangeKind::Update { key, set } if key.len() == 2 && set == &vec![("qty".to_string(), Value::Int(3))])),
            "{}: the second add is an update of the line to qty 3: {again:?}",
            engine.name()
        );
        let (o, order, p, _) = run(&mut a, 4, "order", vec![Value::Int(7)]);
        assert!(o.committed() && p == Position::Global { seq: 4 }, "{o:?} {p:?}");
        assert!(order.changes.len() >= 3, "{}: {order:?}", engine.name());
        let applied = b.run(&StorageJob::Apply { first_seq: 1, updates: vec![create, add, again, order] });
        assert_eq!(applied, StorageResult::Applied { globals_seen: 4, retries: 0 }, "{}", engine.name());
        for t in ["items", "carts", "cart_lines", "orders"] {
            assert_eq!(a.dump(t).unwrap(), b.dump(t).unwrap(), "{}: table {t}", engine.name());
        }
        assert_eq!(b.counters().unwrap(), (4, 0));
        // A batch that skips a global is refused, and changes nothing.
        let (_, late, _, _) = run(&mut a, 5, "create_cart", vec![Value::Int(8)]);
        let refused = b.run(&StorageJob::Apply { first_seq: 6, updates: vec![late] });
        assert!(matches!(&refused, StorageResult::Failed(m) if m.contains("must be 5")), "{refused:?}");
        assert_eq!(b.counters().unwrap(), (4, 0));
    }
}

#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn locals_report_their_position_and_only_writers_count() {
    for engine in ENGINES {
        let dbs = Scratch::new(engine, "positions", 1);
        let mut a = dbs.shop(0);
        let (_, _, p, _) = local(&mut a, 1, "create_cart", vec![Value::Int(1)]);
        assert_eq!(p, Position::Local { instance: InstanceId(0), globals_seen: 0, local_writes: 1, wrote: true }, "{}", engine.name());
        // A read-only type runs on a snapshot and writes no counter.
        let (o, _, p, _) = local(&mut a, 2, "browse_items", vec![Value::Int(1), Value::Int(5)]);
        assert!(o.committed(), "{o:?}");
        assert_eq!(p, Position::Local { instance: InstanceId(0), globals_seen: 0, local_writes: 1, wrote: false }, "{}", engine.name());
        // A writing type whose body aborts wrote nothing.
        let (o, _, p, _) = local(&mut a, 3, "create_cart", vec![Value::Int(1)]);
        assert!(!o.committed(), "{}: a second cart 1 aborts: {o:?}", engine.name());
        assert_eq!(p, Position::Local { instance: InstanceId(0), globals_seen: 0, local_writes: 1, wrote: false });
        assert_eq!(a.counters().unwrap(), (0, 1));
    }
}

/// On PostgreSQL a transaction's start travels with the body's first statement; when the start
/// fails, that statement fails only as its consequence, and the body would take it for its own
/// error and abort. The job must fail with the start's error instead.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_transaction_whose_start_fails_fails_its_job_with_the_starts_error() {
    for engine in ENGINES {
        let dbs = Scratch::new(engine, "start", 1);
        let mut a = dbs.shop(0);
        let browse = vec![Value::Int(1), Value::Int(5)];
        local(&mut a, 1, "browse_items", browse.clone());
        // The reader's snapshot stays open for the next job to end; DROP TABLE would wait on it.
        a.idle();
        let mut admin_conn = ensemble_server::conn::Conn::open(engine, &admin::instance_url(engine, &dbs.urls, &dbs.run, 0).unwrap()).unwrap();
        admin_conn.batch(&format!("DROP TABLE {}", ensemble_server::META_TABLE)).unwrap();
        match a.run(&StorageJob::Execute { request: request(2, "browse_items", browse), role: ExecRole::Local }) {
            StorageResult::Failed(why) => {
                assert!(why.contains(ensemble_server::META_TABLE) && (why.contains("does not exist") || why.contains("doesn't exist")), "{}: {why}", engine.name())
            }
            other => panic!("{}: {other:?}", engine.name()),
        }
    }
}

/// A read-only local's COMMIT goes with the next job's start, or when the storage has been idle
/// a while: never left open for good.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_readers_commit_waits_for_the_next_job_or_for_the_storage_to_idle() {
    for engine in ENGINES {
        let dbs = Scratch::new(engine, "reader", 1);
        let mut a = dbs.shop(0);
        let id = Value::Int(a.session_id().unwrap());
        let mut admin_conn = ensemble_server::conn::Conn::open(engine, &admin::instance_url(engine, &dbs.urls, &dbs.run, 0).unwrap()).unwrap();
        // PostgreSQL's view of its sessions is live. MariaDB's list of InnoDB transactions is a
        // cache refreshed every 100 ms, so there the question is asked of the lock an open
        // transaction holds on the table it read: taking the table for writing without waiting
        // fails while the reader is open.
        let mut open = || match engine {
            Engine::Postgres => {
                let sql = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'idle in transaction'";
                admin_conn.run(sql, &[&id]).unwrap().0 == vec![vec![Value::Int(1)]]
            }
            Engine::Mariadb => match admin_conn.batch("LOCK TABLES `items` WRITE NOWAIT") {
                Ok(()) => {
                    admin_conn.batch("UNLOCK TABLES").unwrap();
                    false
                }
                Err(_) => true,
            },
        };
        let browse = vec![Value::Int(1), Value::Int(5)];
        let (o, _, _, _) = local(&mut a, 1, "browse_items", browse.clone());
        assert!(o.committed(), "{o:?}");
        assert!(open(), "{}: the reader is left open for the next job", engine.name());
        let (_, _, p, _) = local(&mut a, 2, "create_cart", vec![Value::Int(3)]);
        assert_eq!(p, Position::Local { instance: InstanceId(0), globals_seen: 0, local_writes: 1, wrote: true }, "{}", engine.name());
        assert!(!open(), "{}: the writer's start committed the reader, and the writer committed", engine.name());
        local(&mut a, 3, "browse_items", browse);
        assert!(open(), "{}", engine.name());
        a.idle();
        assert!(!open(), "{}: idle commits the open reader", engine.name());
    }
}

/// The writers of a serial lane, in the order it hands them over: globals, local writers, one
/// that aborts, a read-only local, a batch of updates from another instance (the one update
/// of a global run at `elsewhere`, sequence number 3 here).
fn writers(elsewhere: &mut ServerStorage) -> Vec<StorageJob> {
    let r = elsewhere.run(&StorageJob::Execute { request: request(1, "create_cart", vec![Value::Int(9)]), role: ExecRole::Global });
    let update = executed(r).1;
    let job = |seq, txn: &str, params: Vec<Value>, role| StorageJob::Execute { request: request(seq, txn, params), role };
    vec![
        job(1, "create_cart", vec![Value::Int(7)], ExecRole::Global),
        job(2, "create_cart", vec![Value::Int(8)], ExecRole::Local),
        job(3, "create_cart", vec![Value::Int(8)], ExecRole::Local),
        job(4, "add_item", vec![Value::Int(8), Value::Int(3), Value::Int(1)], ExecRole::Local),
        job(5, "add_item", vec![Value::Int(7), Value::Int(3), Value::Int(2)], ExecRole::Global),
        job(6, "browse_items", vec![Value::Int(1), Value::Int(5)], ExecRole::Local),
        StorageJob::Apply { first_seq: 3, updates: vec![update] },
        job(7, "add_item", vec![Value::Int(7), Value::Int(4), Value::Int(1_000_000)], ExecRole::Global),
        job(8, "order", vec![Value::Int(7)], ExecRole::Global),
        job(9, "add_item", vec![Value::Int(8), Value::Int(3), Value::Int(2)], ExecRole::Local),
    ]
}

/// Ends `s`'s session from another connection, as an administrator (or a server restart)
/// would; returns the session's id.
fn end_session(engine: Engine, s: &mut ServerStorage) -> i64 {
    let id = s.session_id().unwrap();
    let mut admin_conn = ensemble_server::conn::Conn::open(engine, admin::default_url(engine)).unwrap();
    let kill = match engine {
        Engine::Postgres => format!("SELECT pg_terminate_backend({id})"),
        Engine::Mariadb => format!("KILL {id}"),
    };
    admin_conn.run(&kill, &[]).unwrap();
    id
}

/// A result without its retry count, as if at instance 0 (the tests compare two instances).
fn settled(r: &StorageResult) -> StorageResult {
    let mut r = r.clone();
    if let StorageResult::Executed { retries, .. } | StorageResult::Applied { retries, .. } = &mut r {
        *retries = 0;
    }
    if let StorageResult::Executed { position: Position::Local { instance, .. }, .. } = &mut r {
        *instance = InstanceId(0);
    }
    r
}

#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_group_of_writers_gets_what_running_them_one_by_one_gets() {
    for engine in ENGINES {
        let dbs = Scratch::new(engine, "group", 3);
        let (mut grouped, mut single, mut elsewhere) = (dbs.shop(0), dbs.shop(1), dbs.shop(2));
        let jobs = writers(&mut elsewhere);
        let together = grouped.run_batch(&jobs);
        let apart: Vec<StorageResult> = jobs.iter().map(|j| settled(&single.run(j))).collect();
        assert!(together.iter().all(|r| *r == settled(r)), "{}: no retries at instance 0: {together:?}", engine.name());
        assert_eq!(together, apart, "{}", engine.name());
        // What the sequence does, so that the comparison above compares something: positions
        // from the counters the earlier members left, an abort that keeps nothing, a global
        // that aborts and keeps its number, the update applied at its place.
        let positions: Vec<String> = together
            .iter()
            .map(|r| match r {
                StorageResult::Executed { outcome, position, .. } => format!("{}{position:?}", if outcome.committed() { "" } else { "aborted " }),
                other => format!("{other:?}"),
            })
            .collect();
        let local = |globals_seen, local_writes, wrote| format!("Local {{ instance: InstanceId(0), globals_seen: {globals_seen}, local_writes: {local_writes}, wrote: {wrote} }}");
        let expected = vec![
            "Global { seq: 1 }".to_string(),
            local(1, 1, true),
            format!("aborted {}", local(1, 1, false)),
            local(1, 2, true),
            "Global { seq: 2 }".to_string(),
            local(2, 2, false),
            "Applied { globals_seen: 3, retries: 0 }".to_string(),
            "aborted Global { seq: 4 }".to_string(),
            "Global { seq: 5 }".to_string(),
            local(5, 3, true),
        ];
        assert_eq!(positions, expected, "{}", engine.name());
        assert_eq!(grouped.counters().unwrap(), (5, 3), "{}", engine.name());
        for t in ["items", "carts", "cart_lines", "orders"] {
            assert_eq!(grouped.dump(t).unwrap(), single.dump(t).unwrap(), "{}: table {t}", engine.name());
        }
        // The group waited for one flush of the server's log; one by one, every job that wrote
        // waited for its own: all but the reader and the local whose body aborted (rolled back
        // whole), where the global that aborted keeps its number, a write.
        assert_eq!(grouped.flushed_commits(), 1, "{}", engine.name());
        assert_eq!(single.flushed_commits(), 8, "{}", engine.name());
        let tally = Storage::tally(&grouped);
        assert!(tally.contains(&(ServerStorage::FLUSHED_COMMITS, 1)), "{}: what a node adds to its counters: {tally:?}", engine.name());
    }
}

/// A group that meets something other than its members' own aborts is rolled back whole and
/// its jobs run one by one: a batch of updates that does not fit fails alone, as it would on
/// its own, and a connection lost before the group is reopened, every job committed once.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_group_that_fails_runs_its_jobs_one_by_one() {
    for engine in ENGINES {
        let dbs = Scratch::new(engine, "groupfail", 3);
        let (mut grouped, mut single, mut elsewhere) = (dbs.shop(0), dbs.shop(1), dbs.shop(2));
        let mut jobs = writers(&mut elsewhere);
        // The batch claims the wrong place: it must be 3.
        jobs[6] = match &jobs[6] {
            StorageJob::Apply { updates, .. } => StorageJob::Apply { first_seq: 4, updates: updates.clone() },
            _ => unreachable!(),
        };
        let together = grouped.run_batch(&jobs);
        let apart: Vec<StorageResult> = jobs.iter().map(|j| settled(&single.run(j))).collect();
        assert!(matches!(&together[6], StorageResult::Failed(m) if m.contains("must be 3")), "{}: {:?}", engine.name(), together[6]);
        assert_eq!(together.iter().map(settled).collect::<Vec<_>>(), apart, "{}", engine.name());
        assert!(
            together.iter().all(|r| matches!(r, StorageResult::Failed(_) | StorageResult::Executed { retries: 1, .. })),
            "{}: the group's attempt is counted as a retry of each job that ran again: {together:?}",
            engine.name()
        );
        for t in ["items", "carts", "cart_lines", "orders"] {
            assert_eq!(grouped.dump(t).unwrap(), single.dump(t).unwrap(), "{}: table {t}", engine.name());
        }

        // The server ends the session before the next group.
        let dbs = Scratch::new(engine, "grouplost", 2);
        let (mut grouped, mut elsewhere) = (dbs.shop(0), dbs.shop(1));
        let jobs = writers(&mut elsewhere);
        let id = end_session(engine, &mut grouped);
        let together = grouped.run_batch(&jobs);
        assert!(together.iter().all(|r| !matches!(r, StorageResult::Failed(_))), "{}: {together:?}", engine.name());
        assert_ne!(grouped.session_id().unwrap(), id, "a new session");
        assert_eq!(grouped.counters().unwrap(), (5, 3), "{}: every job committed once", engine.name());
        assert_eq!(carts_named(&mut grouped, 8), 1);
    }
}

#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_connection_the_server_drops_is_reopened_and_the_job_runs_once() {
    for engine in ENGINES {
        let dbs = Scratch::new(engine, "dropped", 1);
        let mut a = dbs.shop(0);
        // An administrator ends the session between two jobs, as a server restart would.
        let id = end_session(engine, &mut a);
        let r = a.run(&StorageJob::Execute { request: request(1, "create_cart", vec![Value::Int(9)]), role: ExecRole::Global });
        let (o, _, p, retries) = executed(r);
        assert!(o.committed(), "{}: {o:?}", engine.name());
        assert_eq!(p, Position::Global { seq: 1 });
        assert_eq!(retries, 1, "{}: one attempt lost with the connection, one that committed", engine.name());
        assert_ne!(a.session_id().unwrap(), id, "a new session");
        assert_eq!(a.counters().unwrap(), (1, 0), "{}: committed once", engine.name());
        assert_eq!(carts_named(&mut a, 9), 1);
    }
}

/// Where a TCP proxy between a storage and its server cuts the connection, at the next batch
/// the storage sends that holds COMMIT (or the word the cut was armed at).
#[derive(Clone)]
enum Cut {
    /// The batch never reaches the server (at COMMIT: which rolls the transaction back).
    BeforeCommit,
    /// The batch reaches the server, but not the server's answer the storage: the connection
    /// is cut once the function given sees (on a session of its own) that the transaction
    /// committed.
    AfterCommit(Arc<dyn Fn() -> bool + Send + Sync>),
}

/// A cut after COMMIT for a transaction that creates `carts`: it waits until `observer` (a
/// session of its own) sees all of them.
fn cut_once_carts_committed(observer: &Arc<std::sync::Mutex<ensemble_server::conn::Conn>>, carts: Vec<i64>) -> Cut {
    let observer = Arc::clone(observer);
    let list = carts.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
    Cut::AfterCommit(Arc::new(move || {
        let seen = observer.lock().unwrap().batch_rows(&format!("SELECT COUNT(*) FROM carts WHERE cart_id IN ({list})")).unwrap();
        seen == vec![vec![Value::Int(carts.len() as i64)]]
    }))
}

/// How many rows of `carts` the storage holds for `cart`: one if its creation committed once.
fn carts_named(a: &mut ServerStorage, cart: i64) -> usize {
    a.dump("carts").unwrap().iter().filter(|r| r[0] == Value::Int(cart)).count()
}

/// A cut after COMMIT for a transaction that leaves nothing another session could see: it waits
/// until `session` (the server's id of the storage's session) has ended its transaction.
fn cut_once_ended(engine: Engine, observer: &Arc<std::sync::Mutex<ensemble_server::conn::Conn>>, session: i64) -> Cut {
    let (ask, ended) = match engine {
        Engine::Postgres => (format!("SELECT COUNT(*) FROM pg_stat_activity WHERE pid = {session} AND state = 'idle'"), 1),
        Engine::Mariadb => (format!("SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = {session}"), 0),
    };
    let observer = Arc::clone(observer);
    Cut::AfterCommit(Arc::new(move || {
        if engine == Engine::Mariadb {
            // InnoDB refreshes what `innodb_trx` shows only when it was last read more than
            // 0.1 s ago: asked more often, it never changes.
            std::thread::sleep(std::time::Duration::from_millis(150));
        }
        observer.lock().unwrap().batch_rows(&ask).unwrap() == vec![vec![Value::Int(ended)]]
    }))
}

/// A proxy in front of instance 0's database of `dbs` that cuts at `word`
/// ([`CommitCutter::at`]), with the database's URL and the URL through the proxy.
fn cutting(dbs: &Scratch, word: &'static [u8]) -> (CommitCutter, String, String) {
    let url = admin::instance_url(dbs.engine, &dbs.urls, &dbs.run, 0).unwrap();
    let upstream = match dbs.engine {
        Engine::Postgres => "127.0.0.1:5432",
        Engine::Mariadb => "127.0.0.1:3306",
    };
    assert!(url.contains(upstream), "{url}");
    let cutter = CommitCutter::at(upstream, word);
    let proxied = url.replacen(upstream, &format!("127.0.0.1:{}", cutter.port), 1);
    (cutter, url, proxied)
}

/// A 2PC storage of shop at instance 0 of `dbs`, through `url` (a [`CommitCutter`]'s), as a
/// node's start opens it: not yet recovered.
fn twopc_storage(dbs: &Scratch, url: &str) -> ensemble_server::TwoPcStorage {
    let app = apps::shop::application();
    let sql = Arc::new(translate(&app, dbs.engine).unwrap());
    let shared = ensemble_server::TwoPcShared::new(url, app, sql, InstanceId(0), &dbs.run, Default::default()).unwrap();
    ensemble_server::TwoPcStorage::open(shared).unwrap()
}

/// Whether `chunk` holds `word` as a word: COMMIT in COMMIT PREPARED, not in READ COMMITTED.
fn holds_word(chunk: &[u8], word: &[u8]) -> bool {
    chunk.windows(word.len()).enumerate().any(|(i, w)| w == word && !chunk.get(i + word.len()).is_some_and(u8::is_ascii_alphabetic))
}

impl std::fmt::Debug for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cut::BeforeCommit => "BeforeCommit",
            Cut::AfterCommit(_) => "AfterCommit",
        })
    }
}

/// The cuts a [`CommitCutter`] will make, in order, each with the word of the batch it cuts at.
type Armed = Arc<std::sync::Mutex<std::collections::VecDeque<(&'static [u8], Cut)>>>;

/// A TCP proxy that passes every byte between a storage and its server until it is armed
/// ([`CommitCutter::arm`]), then cuts the connection at the next batch holding its word
/// (COMMIT) as the [`Cut`] says, once, and passes the connections opened after that. Cuts
/// armed one after another ([`CommitCutter::arm_at`]) are made in that order, each at the
/// first batch holding its word after the cut before it, on whichever connection sends it.
struct CommitCutter {
    port: u16,
    word: &'static [u8],
    armed: Armed,
    cuts: Arc<std::sync::atomic::AtomicUsize>,
}

impl CommitCutter {
    /// A proxy that cuts at the next batch holding `word` (COMMIT, or a PREPARE).
    fn at(upstream: &str, word: &'static [u8]) -> CommitCutter {
        use std::io::{Read, Write};
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed: Armed = Arc::default();
        let cuts = Arc::new(AtomicUsize::new(0));
        let (armed_, cuts_, upstream) = (Arc::clone(&armed), Arc::clone(&cuts), upstream.to_string());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let server = TcpStream::connect(&upstream).unwrap();
                let swallow = Arc::new(AtomicBool::new(false));
                let hang_up: Arc<dyn Fn() + Send + Sync> = {
                    let (c, s) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                    Arc::new(move || {
                        let _ = c.shutdown(Shutdown::Both);
                        let _ = s.shutdown(Shutdown::Both);
                    })
                };
                let (mut from_client, mut to_server) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (armed, cuts, swallowing, cut_now) = (Arc::clone(&armed_), Arc::clone(&cuts_), Arc::clone(&swallow), Arc::clone(&hang_up));
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 1 << 16];
                    while let Ok(n) = from_client.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let chunk = &buf[..n];
                        let cut = {
                            let mut armed = armed.lock().unwrap();
                            match armed.front() {
                                Some((word, _)) if holds_word(chunk, word) => armed.pop_front().map(|(_, cut)| cut),
                                _ => None,
                            }
                        };
                        match cut {
                            Some(Cut::BeforeCommit) => {
                                cuts.fetch_add(1, Ordering::SeqCst);
                                cut_now();
                                return;
                            }
                            Some(Cut::AfterCommit(committed)) => {
                                cuts.fetch_add(1, Ordering::SeqCst);
                                swallowing.store(true, Ordering::SeqCst);
                                if to_server.write_all(chunk).is_ok() {
                                    let asked = std::time::Instant::now();
                                    while !committed() && asked.elapsed() < std::time::Duration::from_secs(30) {
                                        std::thread::sleep(std::time::Duration::from_millis(1));
                                    }
                                }
                                cut_now();
                                return;
                            }
                            None => {}
                        }
                        if to_server.write_all(chunk).is_err() {
                            break;
                        }
                    }
                    cut_now();
                });
                let (mut from_server, mut to_client) = (server, client);
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 1 << 16];
                    while let Ok(n) = from_server.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        if swallow.load(Ordering::SeqCst) {
                            continue;
                        }
                        if to_client.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    hang_up();
                });
            }
        });
        CommitCutter { port, word, armed, cuts }
    }

    /// Cuts at the next batch holding the proxy's word, in place of any cut armed and not made.
    fn arm(&self, cut: Cut) {
        let mut armed = self.armed.lock().unwrap();
        armed.clear();
        armed.push_back((self.word, cut));
    }

    /// Cuts at the first batch holding `word` once the cuts armed before have been made.
    fn arm_at(&self, word: &'static [u8], cut: Cut) {
        self.armed.lock().unwrap().push_back((word, cut));
    }

    fn cuts(&self) -> usize {
        self.cuts.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A connection lost while COMMIT is in flight leaves the storage not knowing whether the
/// transaction committed, so it asks the server: on PostgreSQL `pg_xact_status`, by the id the
/// writer read in its start; on MariaDB its own row of `_ensemble_commits`, which the batch
/// wrote before COMMIT, once the old session has ended. A transaction that committed is
/// answered as committed and not run again, one that did not runs again: none is lost or
/// applied twice, for locals, globals, state updates and (PostgreSQL, whose serial lane makes
/// them) a group of writers.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_commit_whose_answer_is_lost_is_asked_about_and_neither_lost_nor_applied_twice() {
    for engine in ENGINES {
        let name = engine.name();
        let dbs = Scratch::new(engine, "cutcommit", 2);
        drop(dbs.shop(0));
        let mut elsewhere = dbs.shop(1);
        let (cutter, url, proxied) = cutting(&dbs, b"COMMIT");
        let app = apps::shop::application();
        let sql = Arc::new(translate(&app, engine).unwrap());
        let mut a = ServerStorage::open(&proxied, app, sql, InstanceId(0)).unwrap();
        // What the proxy's cut after COMMIT waits for: the carts named, seen on a session of
        // its own.
        let observer = Arc::new(std::sync::Mutex::new(ensemble_server::conn::Conn::open(engine, &url).unwrap()));
        let committed = |carts: Vec<i64>| cut_once_carts_committed(&observer, carts);
        let local = |globals_seen, local_writes| Position::Local { instance: InstanceId(0), globals_seen, local_writes, wrote: true };
        let cases = [
            (true, ExecRole::Local, local(0, 1)),
            (false, ExecRole::Local, local(0, 2)),
            (true, ExecRole::Global, Position::Global { seq: 1 }),
            (false, ExecRole::Global, Position::Global { seq: 2 }),
        ];
        for (i, (after, role, expected)) in cases.into_iter().enumerate() {
            let cart = 20 + i as i64;
            let cut = if after { committed(vec![cart]) } else { Cut::BeforeCommit };
            let case = format!("{name}, {cut:?}, {role:?}");
            cutter.arm(cut);
            let r = a.run(&StorageJob::Execute { request: request(i as u64 + 1, "create_cart", vec![Value::Int(cart)]), role });
            assert_eq!(cutter.cuts(), i + 1, "{case}: the connection was cut");
            let (o, update, position, retries) = executed(r);
            assert!(o.committed(), "{case}: {o:?}");
            assert_eq!(position, expected, "{case}");
            // Run again only if the server had not committed it.
            assert_eq!(retries, u32::from(!after), "{case}");
            assert_eq!(update.changes.is_empty(), role == ExecRole::Local, "{case}: a global's state update survives: {update:?}");
            assert_eq!(carts_named(&mut a, cart), 1, "{case}: committed once");
        }
        assert_eq!(a.counters().unwrap(), (2, 2), "{name}: each counted once");
        // State updates (a global's made elsewhere), cut after and before their COMMIT.
        let update_of = |e: &mut ServerStorage, seq, cart| executed(e.run(&StorageJob::Execute { request: request(seq, "create_cart", vec![Value::Int(cart)]), role: ExecRole::Global })).1;
        for (seq, cart, after) in [(3, 40, true), (4, 41, false)] {
            let update = update_of(&mut elsewhere, seq, cart);
            cutter.arm(if after { committed(vec![cart]) } else { Cut::BeforeCommit });
            let r = a.run(&StorageJob::Apply { first_seq: seq, updates: vec![update] });
            assert_eq!(r, StorageResult::Applied { globals_seen: seq, retries: u32::from(!after) }, "{name}, update {seq}");
            assert_eq!(carts_named(&mut a, cart), 1, "{name}: update {seq} applied once");
        }
        assert_eq!(cutter.cuts(), 6, "{name}");
        assert_eq!(a.counters().unwrap(), (4, 2), "{name}");
        if engine == Engine::Mariadb {
            continue;
        }
        // A group of writers whose COMMIT answer is lost: both are answered once, committed.
        cutter.arm(committed(vec![30, 31]));
        let jobs: Vec<StorageJob> =
            [30, 31].iter().map(|c| StorageJob::Execute { request: request(*c as u64, "create_cart", vec![Value::Int(*c)]), role: ExecRole::Local }).collect();
        let results = a.run_batch(&jobs);
        assert_eq!(cutter.cuts(), 7, "{name}");
        for (r, c) in results.into_iter().zip([30, 31]) {
            let (o, _, _, retries) = executed(r);
            assert!(o.committed() && retries == 0, "{name}: cart {c}: {o:?}, {retries} retries");
            assert_eq!(carts_named(&mut a, c), 1, "{name}: cart {c} committed once");
        }
        assert_eq!(a.counters().unwrap(), (4, 4), "{name}");
        // Local writers side by side under SSI, asked about by the mark each writes in its
        // storage's own table: cut before one, after the next, and after one whose body
        // aborted (it commits all the same).
        let mut b = ServerStorage::open(&proxied, apps::shop::application(), Arc::new(translate(&apps::shop::application(), engine).unwrap()), InstanceId(0)).unwrap();
        b.set_writers_side_by_side(Arc::new(ensemble_server::WritersInFlight::default())).unwrap();
        for (i, (after, cart, creates)) in [(false, 50, true), (true, 51, true), (true, 51, false)].into_iter().enumerate() {
            let cut = match (after, creates) {
                (false, _) => Cut::BeforeCommit,
                (true, true) => committed(vec![cart]),
                (true, false) => cut_once_ended(engine, &observer, b.session_id().unwrap()),
            };
            let case = format!("{name}, side by side, {cut:?}, cart {cart}");
            cutter.arm(cut);
            let (o, _, position, retries) = crate::local(&mut b, 50 + i as u64, "create_cart", vec![Value::Int(cart)]);
            assert_eq!(cutter.cuts(), 8 + i, "{case}: the connection was cut");
            assert_eq!(o.committed(), creates, "{case}: {o:?}");
            assert_eq!(retries, u32::from(!after), "{case}: run again only if the server had not committed it");
            match position {
                Position::SideBySide { instance, globals_seen, snapshot } => {
                    assert_eq!((instance, globals_seen), (InstanceId(0), 4), "{case}");
                    // A writer whose body changed nothing reports no id, though its mark gave
                    // it one after the id was read.
                    assert_eq!(snapshot.txid.is_some(), creates, "{case}: {snapshot:?}");
                }
                other => panic!("{case}: {other:?}"),
            }
            assert_eq!(carts_named(&mut a, cart), 1, "{case}: committed once");
        }
    }
}

/// The question about a lost COMMIT is asked on a new session, which can be lost too: the
/// storage then opens another, ends the old session (again: ending one that has ended changes
/// nothing) and asks again. The proxy cuts after the COMMIT has run, then the first question
/// before it reaches the server (on PostgreSQL `pg_xact_status` by the writer's id, on MariaDB
/// the read of the storage's mark): the transaction is still answered as committed, not run
/// again, and counted once, for a local and a global.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_lost_commit_is_asked_about_again_when_the_question_is_lost_too() {
    for engine in ENGINES {
        let name = engine.name();
        let dbs = Scratch::new(engine, "cutquestion", 1);
        drop(dbs.shop(0));
        let (cutter, url, proxied) = cutting(&dbs, b"COMMIT");
        let app = apps::shop::application();
        let sql = Arc::new(translate(&app, engine).unwrap());
        let mut a = ServerStorage::open(&proxied, app, sql, InstanceId(0)).unwrap();
        let observer = Arc::new(std::sync::Mutex::new(ensemble_server::conn::Conn::open(engine, &url).unwrap()));
        let question: &'static [u8] = match engine {
            Engine::Postgres => b"pg_xact_status",
            Engine::Mariadb => b"mark",
        };
        for (i, role) in [ExecRole::Local, ExecRole::Global].into_iter().enumerate() {
            let cart = 60 + i as i64;
            let case = format!("{name}, {role:?}");
            cutter.arm(cut_once_carts_committed(&observer, vec![cart]));
            cutter.arm_at(question, Cut::BeforeCommit);
            let r = a.run(&StorageJob::Execute { request: request(i as u64 + 1, "create_cart", vec![Value::Int(cart)]), role });
            assert_eq!(cutter.cuts(), 2 * (i + 1), "{case}: the COMMIT's answer and then the question were cut");
            let (o, _, _, retries) = executed(r);
            assert!(o.committed(), "{case}: {o:?}");
            assert_eq!(retries, 0, "{case}: the server had committed it: not run again");
            assert_eq!(carts_named(&mut a, cart), 1, "{case}: committed once");
        }
        assert_eq!(a.counters().unwrap(), (1, 1), "{name}: each counted once");
    }
}

/// A writer that commits having changed no row, its COMMIT cut before it reaches the server or
/// after the server has run it. On MariaDB its batch writes no mark (nothing of it stays either
/// way), so it runs again without asking; on PostgreSQL its write went ahead, it counts as a
/// writer, and it is asked about by its id as any other. Either way it is answered once, and
/// counted at most once.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_writer_that_changed_nothing_whose_commit_answer_is_lost_is_answered_once() {
    for engine in ENGINES {
        let name = engine.name();
        let dbs = Scratch::new(engine, "cutnothing", 1);
        let (cutter, url, proxied) = cutting(&dbs, b"COMMIT");
        let app = notes();
        let sql = Arc::new(translate(&app, engine).unwrap());
        let mut a = ServerStorage::open(&proxied, app, sql, InstanceId(0)).unwrap();
        a.create_schema().unwrap();
        let observer = Arc::new(std::sync::Mutex::new(ensemble_server::conn::Conn::open(engine, &url).unwrap()));
        // PostgreSQL counts a write sent ahead as a row changed, so the writer is counted; and
        // told the server committed it, it does not run again.
        let counted = u64::from(engine == Engine::Postgres);
        for (i, (after, retries_expected, writers)) in [(false, 1, 1), (true, u32::from(engine == Engine::Mariadb), 2)].into_iter().enumerate() {
            let cut = if after { cut_once_ended(engine, &observer, a.session_id().unwrap()) } else { Cut::BeforeCommit };
            let case = format!("{name}, {cut:?}");
            cutter.arm(cut);
            let (o, _, position, retries) = local(&mut a, i as u64 + 1, "touch_note", vec![Value::Int(99)]);
            assert_eq!(cutter.cuts(), i + 1, "{case}: the connection was cut");
            assert!(o.committed(), "{case}: {o:?}");
            assert_eq!(retries, retries_expected, "{case}: run again only where it is not asked about, or the server rolled it back");
            let local_writes = counted * writers;
            assert_eq!(position, Position::Local { instance: InstanceId(0), globals_seen: 0, local_writes, wrote: engine == Engine::Postgres }, "{case}");
            assert_eq!(a.counters().unwrap(), (0, local_writes), "{case}: counted at most once");
        }
        // The storage serves on.
        let (o, _, _, retries) = local(&mut a, 3, "note", vec![Value::Int(1)]);
        assert!(o.committed() && retries == 0, "{name}: {o:?}, {retries} retries");
        assert_eq!(a.dump("notes").unwrap(), vec![vec![Value::Int(1), Value::Int(0)]], "{name}");
    }
}

/// The 2PC baseline's transactions that commit in one phase, their COMMIT cut before it reaches
/// the server or after the server has run it: a writer is asked about (PostgreSQL by the id it
/// read in its start, MariaDB by the mark its batch wrote) and runs again only if the server
/// had not committed it; a reader runs again either way. Each is answered once, nothing is
/// applied twice, and the storage serves on.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_one_phase_commit_of_the_2pc_baseline_whose_answer_is_lost_is_asked_about() {
    use ensemble_twopc::{Job, JobResult};
    for engine in ENGINES {
        let name = engine.name();
        let dbs = Scratch::new(engine, "cut2pc", 1);
        drop(dbs.shop(0));
        let (cutter, url, proxied) = cutting(&dbs, b"COMMIT");
        let mut a = twopc_storage(&dbs, &proxied);
        assert_eq!(a.run(&Job::Recover), JobResult::Recovered { epoch: 1, in_doubt: vec![] }, "{name}");
        let observer = Arc::new(std::sync::Mutex::new(ensemble_server::conn::Conn::open(engine, &url).unwrap()));
        let carts = |a: &mut ensemble_server::TwoPcStorage, cart: i64| a.dump("carts").unwrap().iter().filter(|r| r[0] == Value::Int(cart)).count();
        let cases = [(false, "create_cart", 60, 1), (true, "create_cart", 61, 0), (false, "browse_items", 1, 1), (true, "browse_items", 1, 1)];
        for (i, (after, txn, param, retries_expected)) in cases.into_iter().enumerate() {
            let cut = match (after, txn) {
                (false, _) => Cut::BeforeCommit,
                (true, "create_cart") => {
                    let observer = Arc::clone(&observer);
                    Cut::AfterCommit(Arc::new(move || {
                        observer.lock().unwrap().batch_rows(&format!("SELECT COUNT(*) FROM carts WHERE cart_id = {param}")).unwrap() == vec![vec![Value::Int(1)]]
                    }))
                }
                // A reader's COMMIT is cut once its session is idle again.
                (true, _) => {
                    let session = match engine {
                        Engine::Postgres => "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
                        Engine::Mariadb => "SELECT id FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID()",
                    };
                    let rows = observer.lock().unwrap().batch_rows(session).unwrap();
                    let [row] = rows.as_slice() else { panic!("{name}: one session of the storage's, not {rows:?}") };
                    let Value::Int(session) = row[0] else { panic!("{name}: {row:?}") };
                    cut_once_ended(engine, &observer, session)
                }
            };
            let case = format!("{name}, {cut:?}, {txn}");
            cutter.arm(cut);
            let params = match txn {
                "create_cart" => vec![Value::Int(param)],
                _ => vec![Value::Int(param), Value::Int(3)],
            };
            let r = a.run(&Job::Local { request: request(i as u64 + 1, txn, params) });
            assert_eq!(cutter.cuts(), i + 1, "{case}: the connection was cut");
            match r {
                JobResult::Committed { outcome, retries, .. } => {
                    assert!(outcome.committed(), "{case}: {outcome:?}");
                    assert_eq!(retries, retries_expected, "{case}: run again only if the server had not committed it, or it wrote nothing");
                    if let ensemble_core::Outcome::Committed(rows) = &outcome {
                        if txn == "browse_items" {
                            assert_eq!(rows.len(), 3, "{case}: {outcome:?}");
                        }
                    }
                }
                other => panic!("{case}: {other:?}"),
            }
            if txn == "create_cart" {
                assert_eq!(carts(&mut a, param), 1, "{case}: committed once");
            }
        }
        // The storage serves on.
        let r = a.run(&Job::Local { request: request(9, "create_cart", vec![Value::Int(62)]) });
        assert!(matches!(&r, JobResult::Committed { outcome, retries: 0, .. } if outcome.committed()), "{name}: {r:?}");
        assert_eq!(carts(&mut a, 62), 1, "{name}");
    }
}

/// A 2PC node started again over its instance's database (a killed node, `ensemble node
/// --resume`) starts its clock past every timestamp the earlier incarnation gave: a one-phase
/// transaction records its timestamp nowhere, so a clock that restarted from the decisions'
/// records (or from zero) would give a later transaction, ordered after an earlier one by its
/// locks, a timestamp no larger, and the check would replay the two in the wrong order. The
/// earlier incarnation's storage is dropped without any shutdown, as a kill leaves it.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_node_started_again_over_its_database_gives_timestamps_past_every_earlier_one() {
    use ensemble_twopc::{Job, JobResult};
    for engine in ENGINES {
        let name = engine.name();
        let dbs = Scratch::new(engine, "clock2pc", 1);
        drop(dbs.shop(0));
        let url = admin::instance_url(engine, &dbs.urls, &dbs.run, 0).unwrap();
        let committed_ts = |a: &mut ensemble_server::TwoPcStorage, seq: u64, cart: i64| match a.run(&Job::Local { request: request(seq, "create_cart", vec![Value::Int(cart)]) }) {
            JobResult::Committed { outcome, ts, .. } if outcome.committed() => ts,
            other => panic!("{name}: {other:?}"),
        };
        let mut first = twopc_storage(&dbs, &url);
        assert_eq!(first.run(&Job::Recover), JobResult::Recovered { epoch: 1, in_doubt: vec![] }, "{name}");
        let earlier: Vec<u64> = (0..3).map(|k| committed_ts(&mut first, k + 1, 70 + k as i64)).collect();
        assert!(earlier.windows(2).all(|w| w[0] < w[1]), "{name}: {earlier:?}");
        drop(first);
        let mut again = twopc_storage(&dbs, &url);
        assert_eq!(again.run(&Job::Recover), JobResult::Recovered { epoch: 2, in_doubt: vec![] }, "{name}");
        let later = committed_ts(&mut again, 4, 73);
        assert!(later > *earlier.last().unwrap(), "{name}: the restarted clock gave {later}, the earlier incarnation up to {earlier:?}");
    }
}

/// A 2PC node's start-up recovery whose connection is lost (a server that ends sessions may end
/// it while the node starts): the old session is ended and waited out, and the recovery starts
/// over on a new one. Cut before the incarnation's COMMIT, the incarnation is taken again; cut
/// after it (or after the COMMIT reached the server), the next number is taken, and the one the
/// lost attempt committed is skipped. Each storage serves on. A recovery whose connection is
/// lost more than `SETUP_LOSSES` (5) times in a row fails, naming the recovery and the loss.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_recovery_whose_connection_is_lost_starts_over_on_a_new_session() {
    use ensemble_twopc::{Job, JobResult};
    for engine in ENGINES {
        let name = engine.name();
        let dbs = Scratch::new(engine, "cutrecover", 1);
        drop(dbs.shop(0));
        let (cutter, url, proxied) = cutting(&dbs, b"COMMIT");
        let start = || twopc_storage(&dbs, &proxied);
        let observer = Arc::new(std::sync::Mutex::new(ensemble_server::conn::Conn::open(engine, &url).unwrap()));
        let incarnations = || -> Vec<i64> {
            let rows = observer.lock().unwrap().batch_rows(&format!("SELECT epoch FROM {} ORDER BY epoch", ensemble_server::twopc::INCARNATIONS)).unwrap();
            rows.iter().map(|r| match r[..] { [Value::Int(e)] => e, _ => panic!("{name}: {r:?}") }).collect()
        };
        let committed_epoch = |epoch: i64| {
            let observer = Arc::clone(&observer);
            Cut::AfterCommit(Arc::new(move || {
                let sql = format!("SELECT COUNT(*) FROM {} WHERE epoch = {epoch}", ensemble_server::twopc::INCARNATIONS);
                observer.lock().unwrap().batch_rows(&sql).unwrap() == vec![vec![Value::Int(1)]]
            }))
        };
        let listing: &'static [u8] = match engine {
            Engine::Postgres => b"pg_prepared_xacts",
            Engine::Mariadb => b"RECOVER",
        };
        // (where the connection is cut, the incarnation recovered)
        let cases: [(&'static [u8], Cut, u64); 4] =
            [(b"CREATE", Cut::BeforeCommit, 1), (b"COMMIT", Cut::BeforeCommit, 2), (b"COMMIT", committed_epoch(3), 4), (listing, Cut::BeforeCommit, 6)];
        for (i, (word, cut, epoch)) in cases.into_iter().enumerate() {
            let case = format!("{name}, cut at {} {cut:?}", String::from_utf8_lossy(word));
            let mut a = start();
            cutter.arm_at(word, cut);
            let r = a.run(&Job::Recover);
            assert_eq!(cutter.cuts(), i + 1, "{case}: the connection was cut");
            assert_eq!(r, JobResult::Recovered { epoch, in_doubt: vec![] }, "{case}");
            let seq = 10 + i as u64;
            let r = a.run(&Job::Local { request: request(seq, "create_cart", vec![Value::Int(70 + i as i64)]) });
            assert!(matches!(&r, JobResult::Committed { outcome, retries: 0, .. } if outcome.committed()), "{case}: the storage serves on: {r:?}");
        }
        assert_eq!(incarnations(), vec![1, 2, 3, 4, 5, 6], "{name}: every incarnation taken once, the lost attempts' too");
        // Lost at every attempt: the first and five more.
        let mut a = start();
        for _ in 0..6 {
            cutter.arm_at(b"CREATE", Cut::BeforeCommit);
        }
        match a.run(&Job::Recover) {
            JobResult::Failed(m) => assert!(m.starts_with("recovery at the node's start: connection lost"), "{name}: {m}"),
            other => panic!("{name}: a recovery lost six times in a row fails, not {other:?}"),
        }
        assert_eq!(cutter.cuts(), 4 + 6, "{name}");
        assert_eq!(start().run(&Job::Recover), JobResult::Recovered { epoch: 7, in_doubt: vec![] }, "{name}: the next start recovers");
    }
}

/// A participant's PREPARE whose answer is lost. The branch is looked for once the old session
/// has ended and left the server's list (PostgreSQL: in `pg_prepared_xacts`; MariaDB: by `XA
/// RECOVER`, which lists a branch whose session ended only once the server has torn that
/// session down): cut before the PREPARE reaches the server, the branch votes no and nothing of
/// it stays; cut after the server prepared it, it votes yes, and the decision, sent from
/// another session, commits it once. Either way the storage serves on.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_prepare_whose_answer_is_lost_is_asked_about() {
    use ensemble_app::{ChangeKind, RowChange, StateUpdate};
    use ensemble_twopc::{Job, JobResult, Xid};
    for engine in ENGINES {
        let name = engine.name();
        let dbs = Scratch::new(engine, "cutprepare", 1);
        drop(dbs.shop(0));
        let (word, prepared): (&'static [u8], &str) = match engine {
            Engine::Postgres => (b"PREPARE TRANSACTION", "SELECT gid FROM pg_prepared_xacts"),
            Engine::Mariadb => (b"XA PREPARE", "XA RECOVER"),
        };
        let (cutter, url, proxied) = cutting(&dbs, word);
        let mut b = twopc_storage(&dbs, &proxied);
        assert_eq!(b.run(&Job::Recover), JobResult::Recovered { epoch: 1, in_doubt: vec![] }, "{name}");
        let order = |cart: i64| StateUpdate {
            changes: vec![RowChange {
                table: "orders".into(),
                kind: ChangeKind::Insert { row: vec![("cart_id".into(), Value::Int(cart)), ("total".into(), Value::Int(0)), ("lines".into(), Value::Int(0))] },
            }],
            writer: None,
        };
        let orders = |b: &mut ensemble_server::TwoPcStorage, cart: i64| b.dump("orders").unwrap().iter().filter(|r| r[0] == Value::Int(cart)).count();
        let gid = |n: u64| format!("{}-1-1-{n}-0", dbs.run);
        let observer = Arc::new(std::sync::Mutex::new(ensemble_server::conn::Conn::open(engine, &url).unwrap()));
        // How many branches of this test the server lists as prepared.
        let listed = {
            let observer = Arc::clone(&observer);
            let (run, prepared) = (dbs.run.clone(), prepared.to_string());
            move |gid: Option<&str>| {
                let rows = observer.lock().unwrap().batch_rows(&prepared).unwrap();
                rows.iter().map(|r| format!("{r:?}")).filter(|r| r.contains(&run) && gid.is_none_or(|g| r.contains(&format!("\"{g}\"")))).count()
            }
        };
        let listed = Arc::new(listed);
        for (i, after) in [false, true].into_iter().enumerate() {
            let (n, cart) = (i as u64 + 1, 900 + i as i64);
            let xid = Xid { coordinator: InstanceId(1), epoch: 1, n };
            let case = format!("{name}, cut {} PREPARE", if after { "after" } else { "before" });
            cutter.arm(if after {
                let (listed, gid) = (Arc::clone(&listed), gid(n));
                Cut::AfterCommit(Arc::new(move || listed(Some(&gid)) == 1))
            } else {
                Cut::BeforeCommit
            });
            let r = b.run(&Job::Apply { xid, update: order(cart) });
            assert_eq!(cutter.cuts(), i + 1, "{case}: the connection was cut");
            if after {
                assert!(matches!(r, JobResult::Voted { yes: true, .. }), "{case}: {r:?}");
                assert_eq!(b.run(&Job::Finish { xid, commit: true, ts: 10 }), JobResult::Finished, "{case}");
            } else {
                assert!(matches!(r, JobResult::Voted { yes: false, .. }), "{case}: {r:?}");
            }
            assert_eq!(orders(&mut b, cart), usize::from(after), "{case}: applied once if it voted yes, else not at all");
        }
        // The storage serves on: a branch prepared and committed.
        let xid = Xid { coordinator: InstanceId(1), epoch: 1, n: 9 };
        let r = b.run(&Job::Apply { xid, update: order(950) });
        assert!(matches!(r, JobResult::Voted { yes: true, .. }), "{name}: {r:?}");
        assert_eq!(b.run(&Job::Finish { xid, commit: true, ts: 20 }), JobResult::Finished, "{name}");
        assert_eq!(orders(&mut b, 950), 1, "{name}");
        assert_eq!(listed(None), 0, "{name}: no branch of this test is left prepared");
    }
}

/// On PostgreSQL a write whose count the body does not use (`Db::write`) goes with the next
/// statement or the COMMIT, so the body has gone on past it when it fails. The transaction must
/// then run again with every write waited for, and end as it would have: the body meets the
/// error at the write and aborts, nothing it wrote stays, and the storage serves on. Written
/// for both of PostgreSQL's ways of running locals, and for MariaDB, which sends nothing ahead.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_write_sent_ahead_that_fails_runs_again_and_the_body_meets_the_error_at_the_write() {
    for (engine, side_by_side) in [(Engine::Postgres, false), (Engine::Postgres, true), (Engine::Mariadb, false)] {
        let name = format!("{}{}", engine.name(), if side_by_side { ", side by side" } else { "" });
        let dbs = Scratch::new(engine, "ahead", 1);
        let mut a = dbs.shop(0);
        if side_by_side {
            a.set_writers_side_by_side(Arc::new(ensemble_server::WritersInFlight::default())).unwrap();
        }
        let mut admin_conn = ensemble_server::conn::Conn::open(engine, &admin::instance_url(engine, &dbs.urls, &dbs.run, 0).unwrap()).unwrap();
        admin_conn.batch("ALTER TABLE carts ADD CONSTRAINT no_cart_13 CHECK (cart_id <> 13)").unwrap();
        // create_cart reads the cart's status, then inserts it: the insert is its last statement,
        // so on PostgreSQL it travels with the COMMIT.
        let (o, _, p, retries) = local(&mut a, 1, "create_cart", vec![Value::Int(13)]);
        match &o {
            Outcome::Aborted { reason, .. } => assert!(reason.contains("insert_cart") && reason.contains("no_cart_13"), "{name}: {reason}"),
            other => panic!("{name}: {other:?}"),
        }
        let sent_ahead = engine == Engine::Postgres;
        assert_eq!(retries, u32::from(sent_ahead), "{name}: run again once with its writes waited for, where one was sent ahead");
        if !side_by_side {
            assert_eq!(p, Position::Local { instance: InstanceId(0), globals_seen: 0, local_writes: 0, wrote: false }, "{name}");
        }
        assert!(a.dump("carts").unwrap().iter().all(|r| r[0] != Value::Int(13)), "{name}: nothing of it stays");
        // The next job is served, its write sent ahead again.
        let (o, _, _, retries) = local(&mut a, 2, "create_cart", vec![Value::Int(14)]);
        assert!(o.committed(), "{name}: {o:?}");
        assert_eq!(retries, 0, "{name}");
        assert_eq!(a.dump("carts").unwrap().iter().filter(|r| r[0] == Value::Int(14)).count(), 1, "{name}");
        if !side_by_side {
            assert_eq!(a.counters().unwrap(), (0, 1), "{name}: one writer counted");
            // The overhead figure's pipelined application does the same without a node.
            let (o, retries) = a.execute_direct(&request(3, "create_cart", vec![Value::Int(13)]), ensemble_server::DirectTxn::Pipelined).unwrap();
            assert!(matches!(&o, Outcome::Aborted { reason, .. } if reason.contains("insert_cart")), "{name}: {o:?}");
            assert_eq!(retries, u32::from(sent_ahead), "{name}: the pipelined application");
        }
    }
}

/// An application whose one type reads a probe's row and then, by what it found, inserts the
/// probe, stops, or reads a share, which fails on PostgreSQL for a divisor of zero: a body whose
/// reads depend on what it read, for the reads a storage sends ahead of the body's asking.
fn probes() -> Arc<ensemble_app::Application> {
    use ensemble_app::{Application, Dataset, Db, Param, ParamType, Statement, TableRows, TxnError, TxnType};
    fn probe(db: &mut dyn Db, p: &[Value]) -> Result<ensemble_core::Rows, TxnError> {
        let found = db.query("probe_row", &[p[0].clone()])?;
        match found.first() {
            None => {
                db.write("insert_probe", p)?;
                Ok(Vec::new())
            }
            Some(row) if row[0].as_int().is_some_and(|d| d < 0) => Ok(Vec::new()),
            Some(_) => Ok(db.query("share", &[p[1].clone()])?),
        }
    }
    let statements = vec![
        Statement { name: "probe_row", sql: "SELECT divisor FROM probes WHERE id = :id" },
        Statement { name: "share", sql: "SELECT 100 / :d FROM one" },
        Statement { name: "insert_probe", sql: "INSERT INTO probes (id, divisor) VALUES (:id, :d)" },
    ];
    let params = vec![Param { name: "id", ty: ParamType::Int }, Param { name: "d", ty: ParamType::Int }];
    let txns = vec![TxnType { name: "probe", params, statements, body: probe }];
    let schema = ["CREATE TABLE probes (id INTEGER PRIMARY KEY, divisor INTEGER NOT NULL)", "CREATE TABLE one (k INTEGER PRIMARY KEY)"];
    let data = |_| Dataset {
        tables: vec![
            TableRows { table: "probes".into(), columns: vec!["id".into(), "divisor".into()], rows: vec![vec![Value::Int(1), Value::Int(5)], vec![Value::Int(3), Value::Int(-1)]] },
            TableRows { table: "one".into(), columns: vec!["k".into()], rows: vec![vec![Value::Int(1)]] },
        ],
    };
    Application::new("probes", &schema, txns, data).unwrap()
}

/// On PostgreSQL a body's reads that its last two runs made alike, with the same parameters,
/// go with its first read, in one round trip (`ReadPlan`, `ReadPlans`). What the body sees
/// must be what it would have seen asking them one by one: an answer read ahead is used only
/// when asked for, and one that failed unasked (here a share of a divisor of zero, read ahead
/// for a probe that turns out to be missing or negative) runs the transaction again reading
/// nothing ahead, counted as a retry, which is what shows the read went ahead.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn reads_sent_ahead_of_the_bodys_asking_change_nothing_it_sees() {
    for side_by_side in [false, true] {
        let name = if side_by_side { "side by side" } else { "by default" };
        let engine = Engine::Postgres;
        let dbs = Scratch::new(engine, "readahead", 1);
        let app = probes();
        let sql = Arc::new(translate(&app, engine).unwrap());
        let url = admin::instance_url(engine, &dbs.urls, &dbs.run, 0).unwrap();
        let mut a = ServerStorage::open(&url, Arc::clone(&app), sql, InstanceId(0)).unwrap();
        a.create_schema().unwrap();
        a.load(&(app.generate)(ensemble_app::DataConfig { scale: 1, seed: 1 }), |_, _, _| true).unwrap();
        if side_by_side {
            a.set_writers_side_by_side(Arc::new(ensemble_server::WritersInFlight::default())).unwrap();
        }
        let mut seq = 0;
        let mut probe = |a: &mut ServerStorage, id: i64, d: i64| {
            seq += 1;
            let (o, _, _, retries) = local(a, seq, "probe", vec![Value::Int(id), Value::Int(d)]);
            (o, retries)
        };
        assert_eq!(Storage::tally(&a), vec![], "{name}: nothing read ahead, nothing reported");
        // The first two runs learn the plan (the probe's row, then the share) alike; the third
        // reads the share ahead and is answered from it.
        let count = |answered, thrown_away| ensemble_server::ReadsAheadCount { answered, thrown_away };
        assert_eq!(probe(&mut a, 1, 5), (Outcome::Committed(vec![vec![Value::Int(20)]]), 0), "{name}");
        assert_eq!(probe(&mut a, 1, 2), (Outcome::Committed(vec![vec![Value::Int(50)]]), 0), "{name}");
        assert_eq!(a.reads_ahead(), count(0, 0), "{name}: one run's plan is not agreed on: nothing read ahead");
        assert_eq!(probe(&mut a, 1, 4), (Outcome::Committed(vec![vec![Value::Int(25)]]), 0), "{name}");
        assert_eq!(a.reads_ahead(), count(1, 0), "{name}: the share read ahead answered the body");
        // A missing probe: the share read ahead failed, and the body, which never asked for it,
        // writes. It runs again and inserts the probe once.
        assert_eq!(probe(&mut a, 2, 0), (Outcome::Committed(Vec::new()), 1), "{name}: run again once, reading nothing ahead");
        let rows = a.dump("probes").unwrap();
        assert_eq!(rows.iter().filter(|r| r[0] == Value::Int(2)).count(), 1, "{name}: {rows:?}");
        assert_eq!(a.reads_ahead(), count(1, 1), "{name}: the failed share was thrown away");
        // Asked for, the failed share is the body's own error, at the read that asked.
        match probe(&mut a, 2, 0) {
            (Outcome::Aborted { reason, .. }, 0) => assert!(reason.contains("share") && reason.contains("division by zero"), "{name}: {reason}"),
            other => panic!("{name}: {other:?}"),
        }
        // A negative probe: the body stops without asking for the share read ahead, which failed.
        assert_eq!(probe(&mut a, 3, 0), (Outcome::Committed(Vec::new()), 1), "{name}: run again once, reading nothing ahead");
        // And the plan still serves a probe whose share is fine.
        assert_eq!(probe(&mut a, 1, 10), (Outcome::Committed(vec![vec![Value::Int(10)]]), 0), "{name}");
        assert_eq!(a.reads_ahead(), count(3, 2), "{name}: the failed share asked for answered the body (with its error)");
        // What a node adds to its counters.
        assert_eq!(
            Storage::tally(&a)[..2],
            [("reads_ahead_answered", 3), ("reads_ahead_thrown_away", 2)],
            "{name}: {:?}",
            Storage::tally(&a)
        );
    }
}

/// An application whose second type writes and then gives up, for what a serial lane's group
/// does with writes sent ahead by a body that aborts.
fn notes() -> Arc<ensemble_app::Application> {
    use ensemble_app::{Application, Dataset, Db, Param, ParamType, Statement, TxnError, TxnType};
    fn note(db: &mut dyn Db, p: &[Value]) -> Result<ensemble_core::Rows, TxnError> {
        db.write("insert_note", p)?;
        Ok(Vec::new())
    }
    fn note_then_give_up(db: &mut dyn Db, p: &[Value]) -> Result<ensemble_core::Rows, TxnError> {
        db.write("insert_note", p)?;
        Err(TxnError::Abort("gave up after writing".into()))
    }
    fn touch_note(db: &mut dyn Db, p: &[Value]) -> Result<ensemble_core::Rows, TxnError> {
        db.write("touch_note", &[p[0].clone()])?;
        Ok(Vec::new())
    }
    let insert = Statement { name: "insert_note", sql: "INSERT INTO notes (id) VALUES (:id)" };
    let touch = Statement { name: "touch_note", sql: "UPDATE notes SET touched = touched + 1 WHERE id = :id" };
    let txn = |name, statement: &Statement, body| TxnType { name, params: vec![Param { name: "id", ty: ParamType::Int }], statements: vec![statement.clone()], body };
    let txns = vec![
        txn("note", &insert, note as ensemble_app::Body),
        txn("note_then_give_up", &insert, note_then_give_up),
        // A writer that commits having changed no row, when no note has that id.
        txn("touch_note", &touch, touch_note),
    ];
    Application::new("notes", &["CREATE TABLE notes (id INTEGER PRIMARY KEY, touched INTEGER NOT NULL DEFAULT 0)"], txns, |_| Dataset { tables: Vec::new() }).unwrap()
}

/// The last writer of a serial lane's group gives up after a write sent ahead that fails. Its
/// rollback to its savepoint goes in the batch that commits the group, and would clear the
/// failure from the transaction, committing the writers before it while the storage, told of
/// the failure, ran them again. The write's answer must come before that: each writer commits
/// once, and the one that gave up meets the error at its write, as it would one by one.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_group_whose_last_writer_gives_up_after_a_failed_write_commits_the_others_once() {
    for engine in ENGINES {
        let dbs = Scratch::new(engine, "giveup", 1);
        let app = notes();
        let sql = Arc::new(translate(&app, engine).unwrap());
        let url = admin::instance_url(engine, &dbs.urls, &dbs.run, 0).unwrap();
        let mut a = ServerStorage::open(&url, app, sql, InstanceId(0)).unwrap();
        a.create_schema().unwrap();
        let mut admin_conn = ensemble_server::conn::Conn::open(engine, &url).unwrap();
        admin_conn.batch("ALTER TABLE notes ADD CONSTRAINT no_note_13 CHECK (id <> 13)").unwrap();
        let job = |seq, txn: &str, id| StorageJob::Execute { request: request(seq, txn, vec![Value::Int(id)]), role: ExecRole::Local };
        let results = a.run_batch(&[job(1, "note", 1), job(2, "note", 2), job(3, "note_then_give_up", 13)]);
        for (i, r) in results[..2].iter().enumerate() {
            assert!(matches!(r, StorageResult::Executed { outcome, .. } if outcome.committed()), "{}: writer {i}: {r:?}", engine.name());
        }
        match &results[2] {
            StorageResult::Executed { outcome: Outcome::Aborted { reason, .. }, .. } => {
                assert!(reason.contains("insert_note") && reason.contains("no_note_13"), "{}: {reason}", engine.name())
            }
            other => panic!("{}: {other:?}", engine.name()),
        }
        let ids: Vec<Value> = a.dump("notes").unwrap().into_iter().map(|r| r[0].clone()).collect();
        assert_eq!(ids, vec![Value::Int(1), Value::Int(2)], "{}: each committed once", engine.name());
        assert_eq!(a.counters().unwrap(), (0, 2), "{}", engine.name());
    }
}

#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn servers_that_cannot_serve_are_named_with_what_is_wrong() {
    let unreachable = admin::preflight(Engine::Postgres, &["postgres://postgres@127.0.0.1:1/test".into()]).unwrap_err();
    assert!(unreachable.starts_with("cannot reach the PostgreSQL server at postgres://127.0.0.1:1/test"), "{unreachable}");
    let unreachable = admin::preflight(Engine::Mariadb, &["mysql://root@127.0.0.1:1/test".into()]).unwrap_err();
    assert!(unreachable.starts_with("cannot reach the MariaDB server at mysql://127.0.0.1:1/test"), "{unreachable}");

    let who = admin::preflight(Engine::Postgres, &["postgres://no_such_role_ensemble@127.0.0.1:5432/test".into()]).unwrap_err();
    assert!(who.starts_with("the PostgreSQL server at postgres://127.0.0.1:5432/test refused the credentials"), "{who}");
    assert!(who.contains("no_such_role_ensemble"), "the server's own words name the role: {who}");
    let who = admin::preflight(Engine::Mariadb, &["mysql://root:wrong-password@127.0.0.1:3306/test".into()]).unwrap_err();
    assert!(who.starts_with("the MariaDB server at mysql://127.0.0.1:3306/test refused the credentials"), "{who}");
    assert!(!who.contains("wrong-password"), "a message never shows the password: {who}");

    let missing = admin::preflight(Engine::Postgres, &["postgres://postgres@127.0.0.1:5432/no_such_db_ensemble".into()]).unwrap_err();
    assert!(missing.contains("has no database `no_such_db_ensemble`"), "{missing}");
    let missing = admin::preflight(Engine::Mariadb, &["mysql://root@127.0.0.1:3306/no_such_db_ensemble".into()]).unwrap_err();
    assert!(missing.contains("has no database `no_such_db_ensemble`"), "{missing}");

    let bad = admin::preflight(Engine::Mariadb, &["mysql//root@nowhere".into()]).unwrap_err();
    assert!(bad.starts_with("bad MariaDB URL"), "{bad}");

    // A server that cannot take every storage worker's session.
    for engine in ENGINES {
        let url = admin::default_url(engine);
        let full = admin::check_room_for_sessions(engine, url, 10_000_000, "10 instance(s) of 1000000 storage worker(s) each").unwrap_err();
        assert!(full.starts_with(&format!("the {} server at ", engine.name())), "{full}");
        assert!(full.contains("sessions (max_connections) and has "), "{full}");
        assert!(full.contains(": 10 instance(s) of 1000000 storage worker(s) each need at least 10000000; raise max_connections"), "{full}");
        admin::check_room_for_sessions(engine, url, 1, "one session").unwrap_or_else(|e| panic!("{}: {e}", engine.name()));
    }
}

/// A session left on a run's database, in a transaction and stuck in a statement (a storage
/// worker of an embedded host that returned without it, say), is ended when the run drops its
/// databases: on MariaDB its tables' metadata locks would otherwise keep `DROP DATABASE`
/// waiting for the server's `lock_wait_timeout`, a day by default.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn dropping_a_run_s_database_ends_the_sessions_left_on_it() {
    for engine in ENGINES {
        let dbs = Scratch::new(engine, "leftover", 1);
        drop(dbs.shop(0));
        let url = admin::instance_url(engine, &dbs.urls, &dbs.run, 0).unwrap();
        let mut left = ensemble_server::conn::Conn::open(engine, &url).unwrap();
        let (begin, sleep) = match engine {
            Engine::Mariadb => ("START TRANSACTION", "SELECT SLEEP(600)"),
            Engine::Postgres => ("BEGIN", "SELECT pg_sleep(600)"),
        };
        left.batch(begin).unwrap();
        assert!(!left.batch_rows("SELECT item_id FROM items").unwrap().is_empty());
        let stuck = std::thread::spawn(move || left.batch_rows(sleep).map(|_| ()));

        let (dropped_tx, dropped) = std::sync::mpsc::channel();
        let (urls, run) = (dbs.urls.clone(), dbs.run.clone());
        std::thread::spawn(move || dropped_tx.send(admin::drop_database(engine, &urls, &run, 0)));
        // Far beyond what a drop takes; without the sessions ended, MariaDB's would wait a day.
        let result = dropped.recv_timeout(std::time::Duration::from_secs(120));
        assert!(matches!(result, Ok(Ok(()))), "{}: the drop did not return, or failed: {result:?}", engine.name());
        let ended = stuck.join().unwrap();
        assert!(ended.is_err(), "{}: the stuck statement ran to its end instead of being cut: {ended:?}", engine.name());
        let mut admin_conn = ensemble_server::conn::Conn::open(engine, admin::default_url(engine)).unwrap();
        let name = admin::database_name(&dbs.run, 0);
        let listed = match engine {
            Engine::Mariadb => format!("SELECT schema_name FROM information_schema.schemata WHERE schema_name = '{name}'"),
            Engine::Postgres => format!("SELECT datname FROM pg_database WHERE datname = '{name}'"),
        };
        assert!(admin_conn.batch_rows(&listed).unwrap().is_empty(), "{}: `{name}` is still there", engine.name());
    }
}

#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn an_error_in_a_later_statement_of_a_batch_is_reported() {
    for engine in ENGINES {
        let mut c = ensemble_server::conn::Conn::open(engine, admin::default_url(engine)).unwrap();
        let e = c.batch("SELECT 1; SELECT no_such_column_ensemble FROM no_such_table_ensemble").unwrap_err();
        assert!(matches!(e, ensemble_server::ConnError::Statement(_)), "{}: {e:?}", engine.name());
        let e = c.batch_rows("SELECT 1; SELECT * FROM no_such_table_ensemble").unwrap_err();
        assert!(matches!(e, ensemble_server::ConnError::Statement(_)), "{}: {e:?}", engine.name());
        assert_eq!(c.batch_rows("SELECT 1; SELECT 2, 3").unwrap(), vec![vec![Value::Int(2), Value::Int(3)]], "{}", engine.name());
    }
}

/// The two-phase-commit baseline's storage: one-phase commits, a coordinator's branch held open
/// and a participant's prepared branch that keep their locks (another branch wanting their rows
/// votes no; on PostgreSQL their read locks too), the decision (the coordinator's recorded with
/// its commit; on MariaDB a participant's on the parked connection), and commit timestamps that
/// follow it.
#[test]
#[ignore = "needs MariaDB: .ci/run starts it and runs this"]
fn prepared_branches_hold_their_locks_until_the_decision_on_mariadb() {
    prepared_branches_hold_their_locks_until_the_decision(Engine::Mariadb);
}

#[test]
#[ignore = "needs PostgreSQL: .ci/run starts it and runs this"]
fn prepared_branches_hold_their_locks_until_the_decision_on_postgresql() {
    prepared_branches_hold_their_locks_until_the_decision(Engine::Postgres);
}

/// A change to the price of `item`, as a participant applies it.
fn price(item: i64) -> ensemble_app::RowChange {
    ensemble_app::RowChange {
        table: "items".into(),
        kind: ChangeKind::Update { key: vec![("item_id".into(), Value::Int(item))], set: vec![("price".into(), Value::Int(1))] },
    }
}

/// The 2PC baseline on PostgreSQL locks a join's rows by row only where every driving row came
/// back with its partner (`TwoPhaseLock::Join`): a cart line whose item is absent read an
/// absence no row lock covers, so the order's branch locks `items` whole, and a write to any
/// item waits for its decision; once it is rolled back, the same write goes through.
#[test]
#[ignore = "needs PostgreSQL: .ci/run starts it and runs this"]
fn a_join_that_lost_a_row_locks_the_joined_table_whole_on_postgresql() {
    use ensemble_twopc::{Job, JobResult, Xid};
    let dbs = Scratch::new(Engine::Postgres, "joinlock", 1);
    let (mut a, mut a2) = shop_twopc_storages(&dbs, 0);
    assert_eq!(a.run(&Job::Recover), JobResult::Recovered { epoch: 1, in_doubt: vec![] });
    let url = admin::instance_url(dbs.engine, &dbs.urls, &dbs.run, 0).unwrap();
    for (seq, txn, params) in [(1, "create_cart", vec![Value::Int(7)]), (2, "add_item", vec![Value::Int(7), Value::Int(3), Value::Int(1)])] {
        assert!(matches!(a.run(&Job::Local { request: request(seq, txn, params) }), JobResult::Committed { .. }));
    }
    // A line for an item that is not there, written behind the application's back.
    ensemble_server::conn::Conn::open(dbs.engine, &url).unwrap().batch("INSERT INTO cart_lines (cart_id, item_id, qty) VALUES (7, 999999, 1)").unwrap();
    let xid = Xid { coordinator: InstanceId(0), epoch: 1, n: 2 };
    let held = a.run(&Job::Branch { request: request(3, "order", vec![Value::Int(7)]), xid });
    assert!(matches!(held, JobResult::Held { .. }), "{held:?}");
    let write = |n: u64| (Xid { coordinator: InstanceId(1), epoch: 1, n }, ensemble_app::StateUpdate { changes: vec![price(5)], writer: None });
    let (x, update) = write(3);
    match a2.run(&Job::Apply { xid: x, update }) {
        JobResult::Voted { yes: false, why: Some(why), .. } => assert!(why.contains("lock timeout"), "{why}"),
        other => panic!("a write to items while a branch that read an absent item holds them voted {other:?}"),
    }
    assert_eq!(a.run(&Job::Decide { xid, commit: false, ts: 0, forget: vec![] }), JobResult::Decided { committed: false });
    let (x, update) = write(4);
    assert!(matches!(a2.run(&Job::Apply { xid: x, update }), JobResult::Voted { yes: true, .. }));
    assert_eq!(a2.run(&Job::Finish { xid: x, commit: false, ts: 0 }), JobResult::Finished);
}

/// The 2PC baseline on PostgreSQL locks a read by the rows it returned, and no table, where no
/// write of the application can change which rows it chooses but by writing one of them
/// (`TwoPhaseLock::Rows`): shop's browse of a range of items, held open, keeps a participant's
/// stock update of an item it returned waiting (the participant votes no), and lets one of an
/// item past its range through; once the browse ends, the first goes through too.
#[test]
#[ignore = "needs PostgreSQL: .ci/run starts it and runs this"]
fn a_range_no_transaction_adds_rows_to_is_locked_by_its_rows_on_postgresql() {
    use ensemble_server::dialect::TwoPhaseLock;
    use ensemble_twopc::{Job, JobResult, Xid};
    let dbs = Scratch::new(Engine::Postgres, "rowslock", 1);
    let (mut a, _) = shop_twopc_storages(&dbs, 0);
    assert_eq!(a.run(&Job::Recover), JobResult::Recovered { epoch: 1, in_doubt: vec![] });
    let sql = translate(&apps::shop::application(), Engine::Postgres).unwrap();
    let Some(TwoPhaseLock::Rows { sql: browse }) = sql.statement("browse_items", "items_from").unwrap().lock.clone() else { panic!("browse_items is not locked by its rows") };
    let url = admin::instance_url(dbs.engine, &dbs.urls, &dbs.run, 0).unwrap();
    let mut browser = ensemble_server::conn::Conn::open(dbs.engine, &url).unwrap();
    browser.batch("BEGIN").unwrap();
    let (rows, _) = browser.run(&browse, &[&Value::Int(3), &Value::Int(2)]).unwrap();
    assert_eq!(rows.iter().map(|r| r[0].clone()).collect::<Vec<_>>(), vec![Value::Int(3), Value::Int(4)]);
    let stock = |item: i64, n: u64| {
        let change = ensemble_app::RowChange {
            table: "items".into(),
            kind: ChangeKind::Update { key: vec![("item_id".into(), Value::Int(item))], set: vec![("stock".into(), Value::Int(1))] },
        };
        (Xid { coordinator: InstanceId(1), epoch: 1, n }, ensemble_app::StateUpdate { changes: vec![change], writer: None })
    };
    let (x, update) = stock(4, 1);
    match a.run(&Job::Apply { xid: x, update }) {
        JobResult::Voted { yes: false, why: Some(why), .. } => assert!(why.contains("lock timeout"), "{why}"),
        other => panic!("a write to an item an open browse returned voted {other:?}"),
    }
    let (x, update) = stock(50, 2);
    let voted = a.run(&Job::Apply { xid: x, update });
    assert!(matches!(voted, JobResult::Voted { yes: true, .. }), "a write to an item past an open browse's range voted {voted:?}");
    assert_eq!(a.run(&Job::Finish { xid: x, commit: false, ts: 0 }), JobResult::Finished);
    browser.batch("COMMIT").unwrap();
    let (x, update) = stock(4, 3);
    assert!(matches!(a.run(&Job::Apply { xid: x, update }), JobResult::Voted { yes: true, .. }));
    assert_eq!(a.run(&Job::Finish { xid: x, commit: false, ts: 0 }), JobResult::Finished);
}

/// The 2PC baseline on PostgreSQL locks a read of rows an INSERT can add by the values it fixes
/// (`TwoPhaseLock::Partition`, `dialect::KeyLock`): shop's look at a cart, held open, keeps a
/// participant's insert of a line into that cart waiting (it votes no) and lets one into
/// another cart through; once the look ends, the first goes through too. Run through a
/// storage, the look and a cart's first line (a read by key that finds no row, then an insert)
/// commit.
#[test]
#[ignore = "needs PostgreSQL: .ci/run starts it and runs this"]
fn a_read_of_rows_an_insert_can_add_is_locked_by_the_values_it_fixes_on_postgresql() {
    use ensemble_server::dialect::TwoPhaseLock;
    use ensemble_twopc::{Job, JobResult, Xid};
    let dbs = Scratch::new(Engine::Postgres, "keylock", 1);
    let (mut a, _) = shop_twopc_storages(&dbs, 0);
    assert_eq!(a.run(&Job::Recover), JobResult::Recovered { epoch: 1, in_doubt: vec![] });
    let sql = translate(&apps::shop::application(), Engine::Postgres).unwrap();
    let Some(TwoPhaseLock::Partition { keys, sql: look, every_row: None, .. }) = sql.statement("get_cart", "cart_lines").unwrap().lock.clone() else {
        panic!("get_cart is not key-locked")
    };
    let [key] = keys.as_slice() else { panic!("{keys:?}") };
    let url = admin::instance_url(dbs.engine, &dbs.urls, &dbs.run, 0).unwrap();
    let mut looker = ensemble_server::conn::Conn::open(dbs.engine, &url).unwrap();
    looker.batch("BEGIN").unwrap();
    take_shared_key_locks(&mut looker, &[key.key(&[Value::Int(7)])]);
    let (rows, _) = looker.run(&look, &[&Value::Int(7)]).unwrap();
    assert!(rows.is_empty(), "{rows:?}");
    let line = |cart: i64, n: u64| {
        let row = vec![("cart_id".to_string(), Value::Int(cart)), ("item_id".to_string(), Value::Int(3)), ("qty".to_string(), Value::Int(1))];
        let change = ensemble_app::RowChange { table: "cart_lines".into(), kind: ChangeKind::Insert { row } };
        (Xid { coordinator: InstanceId(1), epoch: 1, n }, ensemble_app::StateUpdate { changes: vec![change], writer: None })
    };
    let (x, update) = line(7, 1);
    match a.run(&Job::Apply { xid: x, update }) {
        JobResult::Voted { yes: false, why: Some(why), .. } => assert!(why.contains("lock timeout"), "{why}"),
        other => panic!("a line into a cart an open look read voted {other:?}"),
    }
    let (x, update) = line(8, 2);
    let voted = a.run(&Job::Apply { xid: x, update });
    assert!(matches!(voted, JobResult::Voted { yes: true, .. }), "a line into another cart voted {voted:?}");
    assert_eq!(a.run(&Job::Finish { xid: x, commit: false, ts: 0 }), JobResult::Finished);
    looker.batch("COMMIT").unwrap();
    let (x, update) = line(7, 3);
    assert!(matches!(a.run(&Job::Apply { xid: x, update }), JobResult::Voted { yes: true, .. }));
    assert_eq!(a.run(&Job::Finish { xid: x, commit: false, ts: 0 }), JobResult::Finished);
    // Through the storage: a cart made, a line added where none was, the cart looked at.
    let committed = |r: JobResult| matches!(&r, JobResult::Committed { outcome, .. } if outcome.committed()) || panic!("{r:?}");
    assert!(committed(a.run(&Job::Local { request: request(1, "create_cart", vec![Value::Int(7)]) })));
    assert!(committed(a.run(&Job::Local { request: request(2, "add_item", vec![Value::Int(7), Value::Int(3), Value::Int(2)]) })));
    match a.run(&Job::Local { request: request(3, "get_cart", vec![Value::Int(7)]) }) {
        JobResult::Committed { outcome: Outcome::Committed(rows), .. } => assert_eq!(rows, vec![vec![Value::Int(3), Value::Int(2)]]),
        other => panic!("{other:?}"),
    }
}

/// A fresh PostgreSQL database of `app`'s schema, the 2PC baseline's storage over it (recovered:
/// epoch 1), and a plain connection to it for the test's own statements.
fn one_participant_on_postgresql(name: &str, app: Arc<ensemble_app::Application>) -> (Scratch, Arc<ensemble_server::dialect::Translated>, ensemble_server::TwoPcStorage, ensemble_server::conn::Conn) {
    use ensemble_twopc::{Job, JobResult};
    let dbs = Scratch::new(Engine::Postgres, name, 1);
    let sql = Arc::new(translate(&app, dbs.engine).unwrap());
    let url = admin::instance_url(dbs.engine, &dbs.urls, &dbs.run, 0).unwrap();
    ServerStorage::open(&url, app.clone(), sql.clone(), InstanceId(0)).unwrap().create_schema().unwrap();
    let looker = ensemble_server::conn::Conn::open(dbs.engine, &url).unwrap();
    let shared = ensemble_server::TwoPcShared::new(&url, app, sql.clone(), InstanceId(0), &dbs.run, Default::default()).unwrap();
    let mut a = ensemble_server::TwoPcStorage::open(shared).unwrap();
    assert_eq!(a.run(&Job::Recover), JobResult::Recovered { epoch: 1, in_doubt: vec![] });
    (dbs, sql, a, looker)
}

/// Takes the shared key locks `keys` on `looker`'s transaction, as a read holding them would.
fn take_shared_key_locks(looker: &mut ensemble_server::conn::Conn, keys: &[i64]) {
    let (lock, args) = ensemble_server::dialect::key_lock_statement(keys, false);
    looker.run(&lock, &args.iter().collect::<Vec<_>>()).unwrap();
}

/// Applies `change` as participant branch `n` of a transaction instance 1 coordinates: true if
/// the branch voted yes (it is then rolled back), false if it voted no on a lock timeout.
fn voted_yes_as_participant(a: &mut ensemble_server::TwoPcStorage, n: u64, change: ensemble_app::RowChange) -> bool {
    use ensemble_twopc::{Job, JobResult, Xid};
    let xid = Xid { coordinator: InstanceId(1), epoch: 1, n };
    match a.run(&Job::Apply { xid, update: ensemble_app::StateUpdate { changes: vec![change], writer: None } }) {
        JobResult::Voted { yes: true, .. } => {
            assert_eq!(a.run(&Job::Finish { xid, commit: false, ts: 0 }), JobResult::Finished);
            true
        }
        JobResult::Voted { yes: false, why: Some(why), .. } => {
            assert!(why.contains("lock timeout"), "{why}");
            false
        }
        other => panic!("{other:?}"),
    }
}

/// RUBiS's items of a category whose sellers live in a region read a join of two tables rows are
/// added to. While such a read holds its locks, a participant's branch that would add a row to
/// what it read (an item of that category, a user of that region) or change a row it matched
/// votes no on a lock timeout; one that adds to another category or region, or changes an item
/// it did not match, votes yes; and once the read commits, the first goes through. The same for
/// a user's bids joined with their items, reached by key from the bids: an item a bid names
/// that is absent cannot come in while the read holds its locks.
#[test]
#[ignore = "needs the PostgreSQL server (scripts/server-suites.sh)"]
fn a_join_is_locked_by_the_values_it_fixes_in_each_table_rows_are_added_to_on_postgresql() {
    use ensemble_server::dialect::TwoPhaseLock;
    let (_dbs, sql, mut a, mut looker) = one_participant_on_postgresql("joinkeys", apps::rubis::application());
    // Users 1 and 2 in regions 1 and 2; items 10 and 11 of user 1, in categories 5 and 6.
    looker
        .batch(
            "INSERT INTO users VALUES (1, 'f', 'l', 'u1', 'p', 'e', 0, 0, 0, 1), (2, 'f', 'l', 'u2', 'p', 'e', 0, 0, 0, 2); \
             INSERT INTO items VALUES (10, 'n', 'd', 1, 1, 1, 1, 0, 0, 0, 100, 1, 5), (11, 'n', 'd', 1, 1, 1, 1, 0, 0, 0, 100, 1, 6)",
        )
        .unwrap();
    let search = sql.statement("SearchItemsByRegion", "items_in_region").unwrap();
    let Some(TwoPhaseLock::Partition { keys, sql: look, every_row: Some((rows_sql, binds)), partner: None }) = search.lock.clone() else {
        panic!("the items of a region are not locked as a partition: {:?}", search.lock)
    };
    // Category 5, region 1, ending at 0 or later, 20 from the first.
    let args = [Value::Int(5), Value::Int(1), Value::Int(0), Value::Int(20), Value::Int(0)];
    looker.batch("BEGIN").unwrap();
    take_shared_key_locks(&mut looker, &keys.iter().map(|k| k.key(&args)).collect::<Vec<_>>());
    looker.run(&rows_sql, &binds.iter().map(|b| &args[*b]).collect::<Vec<_>>()).unwrap();
    let (rows, _) = looker.run(&look, &search.binds.iter().map(|b| &args[*b]).collect::<Vec<_>>()).unwrap();
    assert_eq!(rows.iter().map(|r| r[0].clone()).collect::<Vec<_>>(), vec![Value::Int(10)]);
    let item = |id: i64, seller: i64, category: i64| {
        let values = [("id", Value::Int(id)), ("name", Value::Text("n".into())), ("description", Value::Text("d".into())), ("initial_price", Value::Int(1)), ("quantity", Value::Int(1)), ("reserve_price", Value::Int(1)), ("buy_now", Value::Int(1)), ("nb_of_bids", Value::Int(0)), ("max_bid", Value::Int(0)), ("start_date", Value::Int(0)), ("end_date", Value::Int(100)), ("seller", Value::Int(seller)), ("category", Value::Int(category))];
        ensemble_app::RowChange { table: "items".into(), kind: ChangeKind::Insert { row: values.into_iter().map(|(c, v)| (c.to_string(), v)).collect() } }
    };
    let user = |id: i64, region: i64| {
        let values = [("id", Value::Int(id)), ("firstname", Value::Text("f".into())), ("lastname", Value::Text("l".into())), ("nickname", Value::Text(format!("u{id}"))), ("password", Value::Text("p".into())), ("email", Value::Text("e".into())), ("rating", Value::Int(0)), ("balance", Value::Int(0)), ("creation_date", Value::Int(0)), ("region", Value::Int(region))];
        ensemble_app::RowChange { table: "users".into(), kind: ChangeKind::Insert { row: values.into_iter().map(|(c, v)| (c.to_string(), v)).collect() } }
    };
    let bid_on = |id: i64| ensemble_app::RowChange { table: "items".into(), kind: ChangeKind::Update { key: vec![("id".into(), Value::Int(id))], set: vec![("max_bid".into(), Value::Int(7))] } };
    let mut n = 0;
    let mut apply = |change| {
        n += 1;
        voted_yes_as_participant(&mut a, n, change)
    };
    // An item of the category (its seller in another region: the items' key lock keeps it out).
    assert!(!apply(item(12, 2, 5)), "an item of the category read went in");
    assert!(apply(item(13, 1, 7)), "an item of another category was kept out");
    // A user of the region (who could sell in the category: the users' key lock).
    assert!(!apply(user(3, 1)), "a user of the region read went in");
    assert!(apply(user(4, 3)), "a user of another region was kept out");
    // A bid on the item it returned; one on an item of another category.
    assert!(!apply(bid_on(10)), "the item read was changed");
    assert!(apply(bid_on(11)), "an item of another category was kept out");
    looker.batch("COMMIT").unwrap();
    assert!(apply(item(12, 2, 5)), "an item of the category was kept out after the read ended");
    // A user's bids joined with their items, reached by key: user 2 bid on item 10 and on item
    // 99, which is absent. The absent item's key is locked, the present one's row.
    looker.batch("INSERT INTO bids VALUES (1, 2, 10, 1, 5, 5, 0), (2, 2, 99, 1, 5, 5, 0)").unwrap();
    let bids = sql.statement("AboutMeBids", "bids_on_open_items").unwrap();
    let Some(TwoPhaseLock::Partition { keys, sql: look, every_row: Some((rows_sql, binds)), partner: Some(partner) }) = bids.lock.clone() else {
        panic!("a user's bids are not locked with their items as partners: {:?}", bids.lock)
    };
    let args = [Value::Int(2), Value::Int(0)];
    let bind = |binds: &[usize]| binds.iter().map(|b| &args[*b]).collect::<Vec<_>>();
    looker.batch("BEGIN").unwrap();
    take_shared_key_locks(&mut looker, &keys.iter().map(|k| k.key(&args)).collect::<Vec<_>>());
    let (absent, _) = looker.run(&partner.keys_sql, &bind(&partner.binds)).unwrap();
    assert_eq!(absent, vec![vec![Value::Int(99)]]);
    take_shared_key_locks(&mut looker, &absent.iter().map(|r| partner.key(r)).collect::<Vec<_>>());
    let (pairs, _) = looker.run(&rows_sql, &bind(&binds)).unwrap();
    let (counted, _) = looker.run(partner.count_sql.as_deref().expect("reached by key, counted"), &bind(&partner.binds)).unwrap();
    assert_eq!((pairs.len(), counted), (1, vec![vec![Value::Int(2)]]), "one pair and one absent item account for both bids");
    let (rows, _) = looker.run(&look, &bind(&bids.binds)).unwrap();
    assert_eq!(rows.iter().map(|r| r[0].clone()).collect::<Vec<_>>(), vec![Value::Int(10)]);
    assert!(!apply(item(99, 1, 5)), "the absent item a bid names came in");
    assert!(apply(item(98, 1, 5)), "another item was kept out");
    assert!(!apply(bid_on(10)), "the item of a bid read was changed");
    looker.batch("COMMIT").unwrap();
    assert!(apply(item(99, 1, 5)), "the item was kept out after the read ended");
}

/// TPC-W's latest order of a customer named by user name joins `orders` on the customer's id,
/// which is not its key: the read key-locks `orders` by each id the customers so named have,
/// read before the pairs are locked. While it holds its locks, a participant's branch adding an
/// order of that customer, or changing the customer's row, votes no on a lock timeout; one
/// adding another customer's order votes yes; once the read commits, the first goes through.
#[test]
#[ignore = "needs the PostgreSQL server (scripts/server-suites.sh)"]
fn a_join_reaching_a_table_by_values_it_reads_locks_those_values_on_postgresql() {
    use ensemble_server::dialect::TwoPhaseLock;
    let (_dbs, sql, mut a, mut looker) = one_participant_on_postgresql("reached", apps::tpcw::application());
    // Customers 1 and 2, user names u1 and u2; order 10 of customer 1.
    looker
        .batch(
            "INSERT INTO customer VALUES (1, 'u1', 'p', 'f', 'l', 1, 'ph', 'e', 0, 0, 0, 0, 0, 0, 0, 0, 'd'), \
             (2, 'u2', 'p', 'f', 'l', 1, 'ph', 'e', 0, 0, 0, 0, 0, 0, 0, 0, 'd'); \
             INSERT INTO orders VALUES (10, 1, 5, 1, 1, 1, 'AIR', 6, 1, 1, 'PENDING')",
        )
        .unwrap();
    let latest = sql.statement("getMostRecentOrder", "latest_order_id").unwrap();
    let Some(TwoPhaseLock::Partition { keys, sql: look, every_row: Some((rows_sql, binds)), partner: Some(partner) }) = latest.lock.clone() else {
        panic!("a customer's latest order is not locked with its orders as partners: {:?}", latest.lock)
    };
    let args = [Value::Text("u1".into())];
    let bind = |binds: &[usize]| binds.iter().map(|b| &args[*b]).collect::<Vec<_>>();
    looker.batch("BEGIN").unwrap();
    take_shared_key_locks(&mut looker, &keys.iter().map(|k| k.key(&args)).collect::<Vec<_>>());
    let (ids, _) = looker.run(&partner.keys_sql, &bind(&partner.binds)).unwrap();
    assert_eq!(ids, vec![vec![Value::Int(1)]], "the customer's id");
    take_shared_key_locks(&mut looker, &ids.iter().map(|r| partner.key(r)).collect::<Vec<_>>());
    looker.run(&rows_sql, &bind(&binds)).unwrap();
    let (rows, _) = looker.run(&look, &bind(&latest.binds)).unwrap();
    assert_eq!(rows, vec![vec![Value::Int(10)]]);
    let order = |id: i64, customer: i64| {
        let values = [("o_id", Value::Int(id)), ("o_c_id", Value::Int(customer)), ("o_date", Value::Int(7)), ("o_sub_total", Value::Int(1)), ("o_tax", Value::Int(1)), ("o_total", Value::Int(1)), ("o_ship_type", Value::Text("AIR".into())), ("o_ship_date", Value::Int(8)), ("o_bill_addr_id", Value::Int(1)), ("o_ship_addr_id", Value::Int(1)), ("o_status", Value::Text("PENDING".into()))];
        ensemble_app::RowChange { table: "orders".into(), kind: ChangeKind::Insert { row: values.into_iter().map(|(c, v)| (c.to_string(), v)).collect() } }
    };
    let login = |customer: i64| ensemble_app::RowChange { table: "customer".into(), kind: ChangeKind::Update { key: vec![("c_id".into(), Value::Int(customer))], set: vec![("c_login".into(), Value::Int(9))] } };
    let mut n = 0;
    let mut apply = |change| {
        n += 1;
        voted_yes_as_participant(&mut a, n, change)
    };
    assert!(!apply(order(11, 1)), "a new order of the customer read went in");
    assert!(apply(order(12, 2)), "another customer's order was kept out");
    assert!(!apply(login(1)), "the customer read was changed");
    assert!(apply(login(2)), "another customer was kept unchanged");
    looker.batch("COMMIT").unwrap();
    assert!(apply(order(11, 1)), "the order was kept out after the read ended");
}

/// Two storages (two workers) of the 2PC baseline over instance `i` of `dbs`, filled with shop's
/// data; items and orders replicated, as shop's plan places them.
fn shop_twopc_storages(dbs: &Scratch, i: u32) -> (ensemble_server::TwoPcStorage, ensemble_server::TwoPcStorage) {
    let app = apps::shop::application();
    let sql = Arc::new(translate(&app, dbs.engine).unwrap());
    let replicated: std::collections::BTreeSet<String> = ["items", "orders"].iter().map(|s| s.to_string()).collect();
    drop(dbs.shop(i));
    let url = admin::instance_url(dbs.engine, &dbs.urls, &dbs.run, i).unwrap();
    let shared = ensemble_server::TwoPcShared::new(&url, app, sql, InstanceId(i), &dbs.run, replicated).unwrap();
    (ensemble_server::TwoPcStorage::open(shared.clone()).unwrap(), ensemble_server::TwoPcStorage::open(shared).unwrap())
}

fn prepared_branches_hold_their_locks_until_the_decision(engine: Engine) {
    use ensemble_twopc::{Job, JobResult, Xid};
    let dbs = Scratch::new(engine, "twopc", 2);
    let replicated: std::collections::BTreeSet<String> = ["items", "orders"].iter().map(|s| s.to_string()).collect();
    let ((mut a, mut a2), (mut b, mut b2)) = (shop_twopc_storages(&dbs, 0), shop_twopc_storages(&dbs, 1));
    assert_eq!(a.run(&Job::Recover), JobResult::Recovered { epoch: 1, in_doubt: vec![] });
    assert_eq!(b.run(&Job::Recover), JobResult::Recovered { epoch: 1, in_doubt: vec![] });
    let lock_wait = match engine {
        Engine::Mariadb => "Lock wait timeout",
        Engine::Postgres => "lock timeout",
    };
    let committed = |r: JobResult| match r {
        JobResult::Committed { outcome, ts, .. } => {
            assert!(outcome.committed(), "{outcome:?}");
            ts
        }
        other => panic!("{other:?}"),
    };
    let xid = Xid { coordinator: InstanceId(0), epoch: 1, n: 1 };
    // A cart touches only its partition: even as a branch it commits in one phase.
    assert_eq!(committed(a.run(&Job::Branch { request: request(1, "create_cart", vec![Value::Int(7)]), xid })), 1);
    assert_eq!(committed(a.run(&Job::Local { request: request(2, "add_item", vec![Value::Int(7), Value::Int(3), Value::Int(1)]) })), 2);
    let xid = Xid { coordinator: InstanceId(0), epoch: 1, n: 2 };
    let (update, tick) = match a.run(&Job::Branch { request: request(3, "order", vec![Value::Int(7)]), xid }) {
        JobResult::Held { outcome, update, tick, .. } => {
            assert!(outcome.committed(), "{outcome:?}");
            (update, tick)
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(tick, 3);
    let replicated_part = ensemble_app::StateUpdate { changes: update.changes.iter().filter(|c| replicated.contains(&c.table)).cloned().collect(), writer: None };
    assert!(replicated_part.changes.iter().any(|c| c.table == "items"), "{update:?}");
    assert!(matches!(b.run(&Job::Apply { xid, update: replicated_part.clone() }), JobResult::Voted { yes: true, .. }));
    // The same rows, by another transaction, while the branches above hold them: a participant
    // does not wait for a lock, it votes no at once, and nothing of it stays.
    let rival = Xid { coordinator: InstanceId(0), epoch: 1, n: 3 };
    match b2.run(&Job::Apply { xid: rival, update: replicated_part }) {
        JobResult::Voted { yes: false, why: Some(why), .. } => assert!(why.contains(lock_wait), "{why}"),
        other => panic!("a rival of a prepared branch voted {other:?}"),
    }
    if engine == Engine::Postgres {
        // PostgreSQL takes no read locks of its own: the order's join locked the items it met
        // by row (`TwoPhaseLock::Join`), as InnoDB does, so a write to an item it neither read
        // nor wrote does not wait for its decision (before, the join locked `items` whole).
        let other = ensemble_app::StateUpdate { changes: vec![price(5)], writer: None };
        let x4 = Xid { coordinator: InstanceId(1), epoch: 1, n: 4 };
        match a2.run(&Job::Apply { xid: x4, update: other }) {
            JobResult::Voted { yes: true, .. } => {}
            other => panic!("a write to an item a prepared branch did not touch voted {other:?}"),
        }
        assert_eq!(a2.run(&Job::Finish { xid: x4, commit: false, ts: 0 }), JobResult::Finished);
    }
    assert_eq!(a.run(&Job::Decide { xid, commit: true, ts: 40, forget: vec![] }), JobResult::Decided { committed: true });
    assert_eq!(b.run(&Job::Finish { xid, commit: true, ts: 40 }), JobResult::Finished);
    assert_eq!(a.dump("items").unwrap(), b.dump("items").unwrap(), "the replicated table is the same at both instances");
    // The decision moved B's clock: whatever B commits next comes after the order.
    assert_eq!(committed(b2.run(&Job::Local { request: request(4, "get_cart", vec![Value::Int(8)]) })), 41);
    let url = admin::default_url(engine);
    let mut admin_conn = ensemble_server::conn::Conn::open(engine, url).unwrap();
    let prepared = match engine {
        Engine::Mariadb => "XA RECOVER",
        Engine::Postgres => "SELECT gid FROM pg_prepared_xacts",
    };
    let ours = |c: &mut ensemble_server::conn::Conn| c.batch_rows(prepared).unwrap().iter().filter(|r| format!("{r:?}").contains(&dbs.run)).count();
    assert_eq!(ours(&mut admin_conn), 0, "every branch of this test was decided");
    // The coordinator's records: the commit, with its timestamp; for an id it never decided,
    // an abort, recorded by the lookup, so that the id can no longer commit.
    assert_eq!(a2.run(&Job::Outcome { xid }), JobResult::Outcome { commit: true, ts: 40 });
    let undecided = Xid { coordinator: InstanceId(0), epoch: 1, n: 5 };
    assert_eq!(a2.run(&Job::Outcome { xid: undecided }), JobResult::Outcome { commit: false, ts: 0 });
    committed(a.run(&Job::Local { request: request(5, "create_cart", vec![Value::Int(6)]) }));
    committed(a.run(&Job::Local { request: request(6, "add_item", vec![Value::Int(6), Value::Int(3), Value::Int(1)]) }));
    let held = a.run(&Job::Branch { request: request(7, "order", vec![Value::Int(6)]), xid: undecided });
    assert!(matches!(held, JobResult::Held { .. }), "{held:?}");
    // Its commit fails on the abort's record, and the deletion it carried rolls back with it.
    assert_eq!(a.run(&Job::Decide { xid: undecided, commit: true, ts: 50, forget: vec![xid] }), JobResult::Decided { committed: false });
    assert_eq!(a2.run(&Job::Outcome { xid: undecided }), JobResult::Outcome { commit: false, ts: 0 });
    assert_eq!(a2.run(&Job::Outcome { xid }), JobResult::Outcome { commit: true, ts: 40 });
    // A commit deletes the records it is given (every participant of theirs committed).
    let next = Xid { coordinator: InstanceId(0), epoch: 1, n: 6 };
    let held = a.run(&Job::Branch { request: request(8, "order", vec![Value::Int(6)]), xid: next });
    assert!(matches!(held, JobResult::Held { .. }), "{held:?}");
    assert_eq!(a.run(&Job::Decide { xid: next, commit: true, ts: 60, forget: vec![xid, undecided] }), JobResult::Decided { committed: true });
    assert_eq!(a2.run(&Job::Outcome { xid: next }), JobResult::Outcome { commit: true, ts: 60 });
    let url0 = admin::instance_url(engine, &dbs.urls, &dbs.run, 0).unwrap();
    let records = ensemble_server::conn::Conn::open(engine, &url0)
        .unwrap()
        .batch_rows(&format!("SELECT epoch, n, committed FROM {} ORDER BY n", ensemble_server::twopc::DECISIONS))
        .unwrap();
    assert_eq!(records, vec![vec![Value::Int(1), Value::Int(6), Value::Int(1)]], "the records of n 2 and 5 went, n 6's is there");
    // A branch whose decision never comes (its node stopped) is rolled back before the run's
    // databases are dropped, which it would otherwise block for good.
    let orphan = Xid { coordinator: InstanceId(1), epoch: 1, n: 9 };
    let insert = ensemble_app::RowChange { table: "orders".into(), kind: ChangeKind::Insert { row: vec![
        ("cart_id".into(), Value::Int(990)), ("total".into(), Value::Int(0)), ("lines".into(), Value::Int(0)),
    ] } };
    assert!(matches!(b.run(&Job::Apply { xid: orphan, update: ensemble_app::StateUpdate { changes: vec![insert], writer: None } }), JobResult::Voted { yes: true, .. }));
    assert_eq!(ours(&mut admin_conn), 1);
    // The node stops: its connections close, the prepared one among them.
    drop((a, a2, b, b2));
    let rolled_back = match engine {
        Engine::Mariadb => admin::rollback_prepared(&mut admin_conn, &dbs.run).unwrap(),
        Engine::Postgres => {
            let url = admin::instance_url(engine, &dbs.urls, &dbs.run, 1).unwrap();
            admin::rollback_prepared_pg(&mut ensemble_server::conn::Conn::open(engine, &url).unwrap(), &dbs.run).unwrap()
        }
    };
    assert_eq!(rolled_back, 1);
    assert_eq!(ours(&mut admin_conn), 0);
}

/// What starts the 2PC baseline's convoys of RUBiS registrations on MariaDB (RESULTS.md, "What
/// the stall was"): a registration reads its new user's id before it inserts it, and under
/// InnoDB's SERIALIZABLE a read of an absent key locks the gap the key would go in, up to the
/// next row. The clients mint ids above every generated one, so until a client's first user is
/// in, its registration's gap reaches up to the next client's users, or to the end of the index
/// (the supremum): a registration held open for its votes keeps every other registration whose
/// id falls in that gap from inserting, at its own instance and as a participant anywhere,
/// though no two of them touch the same row. With a user in between, the two do not meet.
#[test]
#[ignore = "needs MariaDB: .ci/run starts it and runs this"]
fn a_registration_held_for_its_votes_locks_the_gap_of_fresh_user_ids_on_mariadb() {
    use ensemble_twopc::{Job, JobResult, Xid};
    let engine = Engine::Mariadb;
    let dbs = Scratch::new(engine, "gaps", 2);
    let app = apps::rubis::application();
    let sql = Arc::new(translate(&app, engine).unwrap());
    let replicated: std::collections::BTreeSet<String> = ["users".to_string()].into();
    let storage = |i: u32| {
        let url = admin::instance_url(engine, &dbs.urls, &dbs.run, i).unwrap();
        let mut s = ServerStorage::open(&url, app.clone(), sql.clone(), InstanceId(i)).unwrap();
        s.create_schema().unwrap();
        s.load(&(app.generate)(ensemble_app::DataConfig { scale: 1, seed: 1 }), |_, _, _| true).unwrap();
        drop(s);
        let shared = ensemble_server::TwoPcShared::new(&url, app.clone(), sql.clone(), InstanceId(i), &dbs.run, replicated.clone()).unwrap();
        (ensemble_server::TwoPcStorage::open(shared.clone()).unwrap(), ensemble_server::TwoPcStorage::open(shared).unwrap())
    };
    let ((mut a, mut a2), (mut b, _)) = (storage(0), storage(1));
    assert!(matches!(a.run(&Job::Recover), JobResult::Recovered { .. }));
    assert!(matches!(b.run(&Job::Recover), JobResult::Recovered { .. }));
    // Three fresh ids in three clients' ranges, all above the 1,000 generated users; their
    // nicknames (`user<id>`) fall in three different gaps of the nickname index.
    let (low, mid, high) = (9_000_000, 20_000_000, 40_000_000);
    let register = |seq: u64, id: i64| {
        let nick = format!("user{id}");
        request(seq, "RegisterUser", vec![
            Value::Int(id), Value::Text(format!("First{id}")), Value::Text(format!("Last{id}")), Value::Text(nick.clone()),
            Value::Text(format!("password{id}")), Value::Text(format!("{nick}@rubis.example")), Value::Int(1), Value::Int(1_000_000),
        ])
    };
    let held = |r: JobResult| match r {
        JobResult::Held { outcome, update, .. } => {
            assert!(outcome.committed(), "{outcome:?}");
            update
        }
        other => panic!("a registration's branch was not held for its votes: {other:?}"),
    };
    let xid = |n| Xid { coordinator: InstanceId(0), epoch: 1, n };
    let elsewhere = Xid { coordinator: InstanceId(1), epoch: 1, n: 1 };
    held(a.run(&Job::Branch { request: register(1, high), xid: xid(1) }));
    // Another client's registration, coordinated by instance 1, asks instance 0 to insert its
    // user, an id and a nickname no one else has: the branch above holds the gap.
    let low_user = held(b.run(&Job::Branch { request: register(2, low), xid: elsewhere }));
    assert!(low_user.changes.iter().any(|c| c.table == "users"), "{low_user:?}");
    match a2.run(&Job::Apply { xid: elsewhere, update: low_user.clone() }) {
        JobResult::Voted { yes: false, why: Some(why), .. } => assert!(why.contains("Lock wait timeout"), "{why}"),
        other => panic!("an insert into the gap a held registration read voted {other:?}"),
    }
    assert_eq!(a.run(&Job::Decide { xid: xid(1), commit: false, ts: 0, forget: vec![] }), JobResult::Decided { committed: false });
    // With a user between the two ids, the held registration's gap ends at that user, and the
    // other insert does not meet it.
    match a.run(&Job::Local { request: register(3, mid) }) {
        JobResult::Committed { outcome, .. } => assert!(outcome.committed(), "{outcome:?}"),
        other => panic!("{other:?}"),
    }
    held(a.run(&Job::Branch { request: register(4, high), xid: xid(2) }));
    let again = Xid { n: 2, ..elsewhere };
    assert!(matches!(a2.run(&Job::Apply { xid: again, update: low_user }), JobResult::Voted { yes: true, .. }));
    assert_eq!(a2.run(&Job::Finish { xid: again, commit: false, ts: 0 }), JobResult::Finished);
    assert_eq!(a.run(&Job::Decide { xid: xid(2), commit: false, ts: 0, forget: vec![] }), JobResult::Decided { committed: false });
    assert_eq!(b.run(&Job::Decide { xid: elsewhere, commit: false, ts: 0, forget: vec![] }), JobResult::Decided { committed: false });
}

#[test]
#[ignore = "needs PostgreSQL: .ci/run starts it and runs this"]
fn the_two_phase_commit_baseline_checks_that_postgresql_prepares_transactions() {
    let app = apps::shop::application();
    let sql = Arc::new(translate(&app, Engine::Postgres).unwrap());
    // scripts/start-databases.sh enabled them on this server.
    ensemble_server::TwoPcShared::new(admin::default_url(Engine::Postgres), app, sql, InstanceId(0), "x", Default::default()).unwrap();
}

/// The overhead figure's bound for lifting the writer lock (`DirectTxn::StrictLockLast`) must
/// run the application's transactions as they are, and its locks must be what keeps two
/// writers of one row from losing an update: under READ COMMITTED without them, two adds to the
/// same cart line could both read the old quantity (on MariaDB, InnoDB's SERIALIZABLE takes
/// them).
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn strict_locking_with_the_writer_lock_last_runs_what_the_application_runs() {
    // On MariaDB a node's local writers run the design (`writers_take_the_writer_lock_last_on_mariadb`).
    priced_design_runs_what_the_application_runs(ensemble_server::DirectTxn::StrictLockLast);
}

/// The overhead figure's bound for running writers side by side under SSI
/// (`DirectTxn::SerializableSideBySide`) must run the application's transactions as they are,
/// bump no counter (nothing orders them), and lose no update when two clients add to one cart
/// line at once (SSI makes one of them a victim, which runs again).
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn writers_side_by_side_under_ssi_run_what_the_application_runs() {
    priced_design_runs_what_the_application_runs(ensemble_server::DirectTxn::SerializableSideBySide);
}

/// Runs a script of shop operations as the application would and as `how` does, on PostgreSQL,
/// then two clients adding to one cart line 15 times each through `how`; MariaDB refuses `how`.
fn priced_design_runs_what_the_application_runs(how: ensemble_server::DirectTxn) {
    use ensemble_server::DirectTxn;
    let mariadb = Scratch::new(Engine::Mariadb, "priced", 1);
    let refused = mariadb.shop(0).execute_direct(&request(1, "create_cart", vec![Value::Int(7)]), how);
    assert!(matches!(&refused, Err(e) if e.to_string().contains("PostgreSQL only")), "{how:?}: {refused:?}");
    let engine = Engine::Postgres;
    let dbs = Scratch::new(engine, "priced", 2);
    let (mut plain, mut strict) = (dbs.shop(0), dbs.shop(1));
    let script: Vec<(&str, Vec<Value>)> = vec![
        ("create_cart", vec![Value::Int(7)]),
        ("add_item", vec![Value::Int(7), Value::Int(3), Value::Int(1)]),
        ("add_item", vec![Value::Int(7), Value::Int(3), Value::Int(2)]),
        ("add_item", vec![Value::Int(7), Value::Int(4), Value::Int(1)]),
        ("create_cart", vec![Value::Int(7)]),
        ("browse_items", vec![Value::Int(1), Value::Int(5)]),
        ("get_cart", vec![Value::Int(7)]),
        ("order", vec![Value::Int(7)]),
        ("add_item", vec![Value::Int(7), Value::Int(3), Value::Int(1)]),
        ("create_cart", vec![Value::Int(8)]),
    ];
    let mut wrote = 0;
    for (seq, (txn, params)) in script.into_iter().enumerate() {
        let req = request(seq as u64 + 1, txn, params);
        let (a, _) = plain.execute_direct(&req, DirectTxn::Application).unwrap();
        let (b, _) = strict.execute_direct(&req, how).unwrap();
        assert_eq!(a, b, "{how:?}: {txn}");
        if b.committed() && !matches!(txn, "browse_items" | "get_cart") {
            wrote += 1;
        }
    }
    for t in ["items", "carts", "cart_lines", "orders"] {
        assert_eq!(plain.dump(t).unwrap(), strict.dump(t).unwrap(), "{how:?}: table {t}");
    }
    // With the lock last, each writer that changed something bumped the counter under the
    // writer lock; side by side, nothing does.
    let bumped = if how == DirectTxn::StrictLockLast { wrote } else { 0 };
    assert_eq!(strict.counters().unwrap(), (0, bumped), "{how:?}");
    // Each writer that committed waited for a flush of the log, readers and aborts none.
    assert_eq!((plain.flushed_commits(), strict.flushed_commits()), (wrote, wrote), "{how:?}");

    // Two clients add to one cart line at once, 15 times each.
    let (o, _) = strict.execute_direct(&request(100, "create_cart", vec![Value::Int(9)]), how).unwrap();
    assert!(o.committed(), "{o:?}");
    let stock = match &strict.dump("items").unwrap().iter().find(|r| r[0] == Value::Int(5)).expect("item 5")[3] {
        Value::Int(s) => *s,
        other => panic!("item 5's stock {other:?}"),
    };
    assert!(stock >= 30, "item 5's stock {stock} leaves room for 30 adds");
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let mut s = dbs.shop_session(1);
            std::thread::spawn(move || {
                for i in 0..15 {
                    let req = Request { client: ClientId(10 + t), seq: i, txn: "add_item".into(), params: vec![Value::Int(9), Value::Int(5), Value::Int(1)] };
                    let (o, _) = s.execute_direct(&req, how).unwrap();
                    assert!(o.committed(), "{o:?}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let lines = strict.dump("cart_lines").unwrap();
    let line = lines.iter().find(|r| r[0] == Value::Int(9) && r[1] == Value::Int(5)).expect("the line of cart 9, item 5");
    assert_eq!(line[2], Value::Int(30), "{how:?}: no add was lost: {line:?}");
}

/// A decision whose connection the server drops is sent again from a live session, and the
/// participant's branch commits once: on MariaDB the parked connection that prepared the branch
/// is the one ended, on PostgreSQL (where no session holds a prepared transaction) the worker's
/// own. Left failed, the run's cleanup would roll the branch back, losing a transaction whose
/// other branches committed. A participant's branch whose worker finds its idle session ended
/// is applied on a new one and votes yes. A coordinator's branch, held open on its session,
/// ends with it: its commit then reports that it did not happen, which its records confirm.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_decision_whose_connection_is_dropped_is_sent_again_and_applied_once() {
    use ensemble_twopc::{Job, JobResult, Xid};
    for engine in ENGINES {
        let name = engine.name();
        let dbs = Scratch::new(engine, "decide", 1);
        let app = apps::shop::application();
        let sql = Arc::new(translate(&app, engine).unwrap());
        let replicated: std::collections::BTreeSet<String> = ["items", "orders"].iter().map(|s| s.to_string()).collect();
        drop(dbs.shop(0));
        let url = admin::instance_url(engine, &dbs.urls, &dbs.run, 0).unwrap();
        let shared = ensemble_server::TwoPcShared::new(&url, app.clone(), sql, InstanceId(0), &dbs.run, replicated).unwrap();
        let mut a = ensemble_server::TwoPcStorage::open(shared).unwrap();
        assert!(matches!(a.run(&Job::Recover), JobResult::Recovered { epoch: 1, .. }), "{name}");
        let mut admin_conn = ensemble_server::conn::Conn::open(engine, admin::default_url(engine)).unwrap();
        // Every session on the instance's database ends, as when its server drops them.
        let db = admin::database_name(&dbs.run, 0);
        let mut end_all = || {
            let kill_all = match engine {
                Engine::Postgres => format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}' AND pid <> pg_backend_pid()"),
                Engine::Mariadb => format!("SELECT id FROM information_schema.processlist WHERE db = '{db}' AND id <> CONNECTION_ID()"),
            };
            let ended = admin_conn.batch_rows(&kill_all).unwrap();
            assert!(!ended.is_empty(), "{name}: no session to end");
            if engine == Engine::Mariadb {
                for row in ended {
                    let Value::Int(id) = row[0] else { panic!("{row:?}") };
                    admin_conn.batch(&format!("KILL {id}")).unwrap();
                }
            }
        };
        let order = |cart: i64| ensemble_app::RowChange {
            table: "orders".into(),
            kind: ChangeKind::Insert { row: vec![("cart_id".into(), Value::Int(cart)), ("total".into(), Value::Int(0)), ("lines".into(), Value::Int(0))] },
        };
        let xid = Xid { coordinator: InstanceId(1), epoch: 1, n: 2 };
        let voted = a.run(&Job::Apply { xid, update: ensemble_app::StateUpdate { changes: vec![order(990)], writer: None } });
        assert!(matches!(voted, JobResult::Voted { yes: true, .. }), "{name}: {voted:?}");
        end_all();
        assert_eq!(a.run(&Job::Finish { xid, commit: true, ts: 10 }), JobResult::Finished, "{name}");
        let orders = a.dump("orders").unwrap();
        assert_eq!(orders.iter().filter(|r| r[0] == Value::Int(990)).count(), 1, "{name}: the order committed once: {orders:?}");
        let prepared = match engine {
            Engine::Mariadb => "XA RECOVER",
            Engine::Postgres => "SELECT gid FROM pg_prepared_xacts",
        };
        let left = || admin_conn_count(engine, prepared, &dbs.run);
        assert_eq!(left(), 0, "{name}: nothing of this test is still prepared");

        // A branch whose worker finds its idle session ended is applied on a new session, not
        // voted down.
        end_all();
        let xid = Xid { coordinator: InstanceId(1), epoch: 1, n: 5 };
        let voted = a.run(&Job::Apply { xid, update: ensemble_app::StateUpdate { changes: vec![order(991)], writer: None } });
        assert!(matches!(voted, JobResult::Voted { yes: true, .. }), "{name}: a branch whose worker's idle session ended: {voted:?}");
        assert_eq!(a.run(&Job::Finish { xid, commit: true, ts: 15 }), JobResult::Finished, "{name}");
        let orders = a.dump("orders").unwrap();
        assert_eq!(orders.iter().filter(|r| r[0] == Value::Int(991)).count(), 1, "{name}: applied once: {orders:?}");
        assert_eq!(left(), 0, "{name}");

        assert!(matches!(a.run(&Job::Local { request: request(1, "create_cart", vec![Value::Int(7)]) }), JobResult::Committed { .. }));
        assert!(matches!(a.run(&Job::Local { request: request(2, "add_item", vec![Value::Int(7), Value::Int(3), Value::Int(1)]) }), JobResult::Committed { .. }));
        let xid = Xid { coordinator: InstanceId(0), epoch: 1, n: 3 };
        let r = a.run(&Job::Branch { request: request(3, "order", vec![Value::Int(7)]), xid });
        assert!(matches!(&r, JobResult::Held { .. }), "{name}: {r:?}");
        end_all();
        assert_eq!(a.run(&Job::Decide { xid, commit: true, ts: 20, forget: vec![] }), JobResult::Decided { committed: false }, "{name}");
        assert_eq!(a.run(&Job::Outcome { xid }), JobResult::Outcome { commit: false, ts: 0 }, "{name}");
        let orders = a.dump("orders").unwrap();
        assert!(!orders.iter().any(|r| r[0] == Value::Int(7)), "{name}: the order did not commit: {orders:?}");
        assert_eq!(left(), 0, "{name}");
    }
}

/// How many of `run`'s branches `prepared` (a query of the server's prepared transactions)
/// lists, from a session of its own.
fn admin_conn_count(engine: Engine, prepared: &str, run: &str) -> usize {
    let mut c = ensemble_server::conn::Conn::open(engine, admin::default_url(engine)).unwrap();
    c.batch_rows(prepared).unwrap().iter().filter(|r| format!("{r:?}").contains(run)).count()
}

/// On MariaDB an instance's writers take the writer lock last: a writer runs its whole body
/// (holding its row locks, InnoDB's SERIALIZABLE) and only then waits for the counters' row, so
/// writers of other rows overlap; the counters it reads then still number the writers in the
/// order they committed, a serial order under strict two-phase locking.
#[test]
#[ignore = "needs MariaDB: .ci/run starts it and runs this"]
fn writers_take_the_writer_lock_last_on_mariadb() {
    use ensemble_server::conn::Conn;
    let engine = Engine::Mariadb;
    let dbs = Scratch::new(engine, "lastlock", 1);
    let mut a = dbs.shop(0);
    let (o, _, p, _) = local(&mut a, 1, "create_cart", vec![Value::Int(9)]);
    assert!(o.committed() && p == Position::Local { instance: InstanceId(0), globals_seen: 0, local_writes: 1, wrote: true }, "{o:?} {p:?}");
    let url = admin::instance_url(engine, &dbs.urls, &dbs.run, 0).unwrap();

    // Another transaction holds the counters' row: the writer runs its body, then waits.
    let mut holder = Conn::open(engine, &url).unwrap();
    holder.batch("START TRANSACTION; SELECT * FROM _ensemble_meta WHERE id = 0 FOR UPDATE").unwrap();
    let mut s = dbs.shop_session(0);
    let writer = std::thread::spawn(move || local(&mut s, 2, "add_item", vec![Value::Int(9), Value::Int(4), Value::Int(1)]));
    // The writer is waiting at the counters' row once its session runs that statement; a
    // dirty read then shows whether its body ran before (the lock taken last) or not (first).
    let mut watcher = Conn::open(engine, &url).unwrap();
    watcher.batch("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED").unwrap();
    assert!(waits_for_the_writer_lock(&mut watcher), "the writer waits for the counters' row");
    let (line, _) = watcher.run("SELECT qty FROM cart_lines WHERE cart_id = 9 AND item_id = 4", &[]).unwrap();
    assert_eq!(line, vec![vec![Value::Int(1)]], "the writer had written its line before it waited for the writer lock");
    holder.batch("COMMIT").unwrap();
    let (o, _, p, _) = writer.join().unwrap();
    assert!(o.committed() && p == Position::Local { instance: InstanceId(0), globals_seen: 0, local_writes: 2, wrote: true }, "{o:?} {p:?}");

    // Two clients add to one line at once, 15 times each: no add is lost, and the counters
    // number the 30 writers 3..=32, each once.
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let mut s = dbs.shop_session(0);
            std::thread::spawn(move || {
                (0..15)
                    .map(|i| {
                        let (o, _, p, _) = local(&mut s, 100 * (t + 1) + i, "add_item", vec![Value::Int(9), Value::Int(5), Value::Int(1)]);
                        assert!(o.committed(), "{o:?}");
                        match p {
                            Position::Local { local_writes, wrote: true, .. } => local_writes,
                            other => panic!("{other:?}"),
                        }
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut numbers: Vec<u64> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    numbers.sort();
    assert_eq!(numbers, (3..=32).collect::<Vec<u64>>());
    let lines = a.dump("cart_lines").unwrap();
    let line = lines.iter().find(|r| r[0] == Value::Int(9) && r[1] == Value::Int(5)).expect("the line of cart 9, item 5");
    assert_eq!(line[2], Value::Int(30), "no add was lost: {line:?}");
    assert_eq!(a.counters().unwrap(), (0, 32));

    // A global takes the writer lock first (its savepoint must come after it, see the test
    // below): held by another transaction, the lock keeps the global from writing anything.
    holder.batch("START TRANSACTION; SELECT * FROM _ensemble_meta WHERE id = 0 FOR UPDATE").unwrap();
    let mut s = dbs.shop_session(0);
    let global = std::thread::spawn(move || {
        executed(s.run(&StorageJob::Execute { request: request(200, "create_cart", vec![Value::Int(10)]), role: ExecRole::Global }))
    });
    assert!(waits_for_the_writer_lock(&mut watcher), "the global waits for the counters' row");
    let (cart, _) = watcher.run("SELECT status FROM carts WHERE cart_id = 10", &[]).unwrap();
    assert!(cart.is_empty(), "the global wrote nothing before it held the writer lock: {cart:?}");
    holder.batch("COMMIT").unwrap();
    let (o, _, p, _) = global.join().unwrap();
    assert!(o.committed() && p == Position::Global { seq: 1 }, "{o:?} {p:?}");
    assert_eq!(a.counters().unwrap(), (1, 32));
}

/// Whether, within 10 s, another session of `watcher`'s database comes to wait at the
/// statement that takes the writer lock on MariaDB (a global's counters read `FOR UPDATE`, a
/// local writer's bump that reads them into session variables); it polls,
/// and asserts nothing about how long that took.
fn waits_for_the_writer_lock(watcher: &mut ensemble_server::conn::Conn) -> bool {
    let waiting = "SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID() \
                   AND (info LIKE '%FROM _ensemble_meta%FOR UPDATE%' OR info LIKE '%UPDATE _ensemble_meta SET globals = (@globals%')";
    one_session_comes_to(watcher, waiting)
}

/// Whether, within 10 s, `count` (a query that counts sessions in some state) comes to count one;
/// it polls, and asserts nothing about how long that took.
fn one_session_comes_to(watcher: &mut ensemble_server::conn::Conn, count: &str) -> bool {
    for _ in 0..2000 {
        if watcher.run(count, &[]).unwrap().0 == vec![vec![Value::Int(1)]] {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    false
}

/// What the writers on MariaDB rely on in InnoDB, checked on the server they run on: a
/// statement that fails keeps the locks it and its predecessors took (a body may go on after an
/// error); a lock taken before a savepoint survives ROLLBACK TO it (the writer lock of a global,
/// taken first); and ROLLBACK TO a savepoint set before the transaction took any lock releases
/// every lock taken since, which is one reason why a global, whose body may roll back to its
/// savepoint, does not take the writer lock last.
#[test]
#[ignore = "needs MariaDB: .ci/run starts it and runs this"]
fn innodb_keeps_a_failed_statements_locks_and_releases_a_savepoints() {
    use ensemble_server::conn::{Conn, ConnError};
    let engine = Engine::Mariadb;
    let dbs = Scratch::new(engine, "innodblocks", 1);
    let url = admin::instance_url(engine, &dbs.urls, &dbs.run, 0).unwrap();
    let mut setup = Conn::open(engine, &url).unwrap();
    setup.batch("CREATE TABLE lk (id INT PRIMARY KEY, v INT) ENGINE = InnoDB; INSERT INTO lk VALUES (1, 1), (2, 2), (3, 3)").unwrap();
    let mut a = Conn::open(engine, &url).unwrap();
    a.batch("SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE").unwrap();
    let mut b = Conn::open(engine, &url).unwrap();
    let free = |b: &mut Conn, id: u32| -> bool {
        let got = b.batch(&format!("START TRANSACTION; SELECT v FROM lk WHERE id = {id} FOR UPDATE NOWAIT"));
        let _ = b.batch("ROLLBACK");
        match got {
            Ok(()) => true,
            Err(ConnError::Retry(_)) | Err(ConnError::Statement(_)) => false,
            Err(e) => panic!("{e}"),
        }
    };
    assert!(free(&mut b, 1) && free(&mut b, 2) && free(&mut b, 3));

    a.batch("START TRANSACTION; SELECT v FROM lk WHERE id = 3").unwrap();
    let duplicate = a.batch("INSERT INTO lk VALUES (1, 9)");
    assert!(matches!(duplicate, Err(ConnError::Statement(_))), "{duplicate:?}");
    assert!(!free(&mut b, 3), "the read before the failed statement keeps its lock");
    assert!(!free(&mut b, 1), "the failed insert keeps its lock on the key it met");
    a.batch("ROLLBACK").unwrap();

    a.batch("START TRANSACTION; SELECT v FROM lk WHERE id = 3 FOR UPDATE; SAVEPOINT body; SELECT v FROM lk WHERE id = 2").unwrap();
    a.batch("ROLLBACK TO SAVEPOINT body").unwrap();
    assert!(!free(&mut b, 3), "a lock taken before the savepoint survives ROLLBACK TO it");
    a.batch("ROLLBACK").unwrap();

    a.batch("START TRANSACTION; SAVEPOINT body; SELECT v FROM lk WHERE id = 2; UPDATE lk SET v = 0 WHERE id = 3").unwrap();
    assert!(!free(&mut b, 2) && !free(&mut b, 3), "a plain read under SERIALIZABLE locks its row, a write its own");
    a.batch("ROLLBACK TO SAVEPOINT body").unwrap();
    assert!(free(&mut b, 2) && free(&mut b, 3), "ROLLBACK TO a savepoint set before any lock released the locks taken since");
    a.batch("ROLLBACK").unwrap();
}

/// Side by side on PostgreSQL, a reader that no writer of its instance ran beside answers
/// before its COMMIT, which waits for the session's next start as a default reader's does; a
/// reader beside a writer in flight (here one held at a lock another session holds) commits
/// before it answers, since only its COMMIT would tell whether SSI found it in a dangerous
/// structure.
#[test]
#[ignore = "needs PostgreSQL: .ci/run starts it and runs this"]
fn a_reader_side_by_side_answers_before_its_commit_only_when_no_writer_ran_beside_it() {
    use ensemble_server::conn::Conn;
    use ensemble_server::WritersInFlight;
    let engine = Engine::Postgres;
    let dbs = Scratch::new(engine, "quietreader", 1);
    let url = admin::instance_url(engine, &dbs.urls, &dbs.run, 0).unwrap();
    let writers = Arc::new(WritersInFlight::default());
    let mut reader = dbs.shop(0);
    let pid = reader.session_id().unwrap();
    reader.set_writers_side_by_side(Arc::clone(&writers)).unwrap();
    let mut writer = dbs.shop_session(0);
    writer.set_writers_side_by_side(Arc::clone(&writers)).unwrap();
    let mut watcher = Conn::open(engine, &url).unwrap();
    let mut state = || match &watcher.run(&format!("SELECT state FROM pg_stat_activity WHERE pid = {pid}"), &[]).unwrap().0[..] {
        [row] => row[0].clone(),
        other => panic!("{other:?}"),
    };
    let read = |s: &mut ServerStorage, seq| {
        let (o, _, p, _) = local(s, seq, "get_cart", vec![Value::Int(3)]);
        assert!(o.committed() && matches!(p, Position::SideBySide { .. }), "{o:?} {p:?}");
    };

    read(&mut reader, 1);
    assert_eq!(state(), Value::Text("idle in transaction".into()), "no writer beside it: its COMMIT waits for the next start");

    let mut holder = Conn::open(engine, &url).unwrap();
    holder.batch("BEGIN; LOCK TABLE carts IN ACCESS EXCLUSIVE MODE").unwrap();
    let in_flight = std::thread::spawn(move || {
        let r = writer.run(&StorageJob::Execute { request: request(2, "add_item", vec![Value::Int(3), Value::Int(5), Value::Int(1)]), role: ExecRole::Local });
        assert!(matches!(r, StorageResult::Executed { .. }), "{r:?}");
    });
    let mut lock_watcher = Conn::open(engine, &url).unwrap();
    let waiting = "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'";
    assert!(one_session_comes_to(&mut lock_watcher, waiting), "the writer comes to wait for the carts' lock");
    read(&mut reader, 3);
    assert_eq!(state(), Value::Text("idle".into()), "beside a writer in flight: committed before it answered");
    holder.batch("COMMIT").unwrap();
    in_flight.join().unwrap();

    read(&mut reader, 4);
    assert_eq!(state(), Value::Text("idle in transaction".into()), "the writer done, readers answer at once again");
}

/// Instances of the 2pc baseline in this process, each a node (`ensemble_twopc`) and one
/// storage worker over its database: a job runs as soon as its node asks, a message is
/// delivered in the order sent, timers fire only when the test says. A stopped instance loses
/// what a killed node loses: its memory, its connections (and with them every branch held
/// open on them), and every message sent to it until it starts again.
struct TwoPcCluster {
    // Before `dbs`: the connections close before the databases are dropped.
    nodes: Vec<Option<(ensemble_twopc::TwoPcNode, ensemble_server::TwoPcStorage)>>,
    engine: Engine,
    dbs: Scratch,
    app: Arc<ensemble_app::Application>,
    plan: Arc<ensemble_app::PartitionPlan>,
    queue: std::collections::VecDeque<(u32, ensemble_core::Event<ensemble_twopc::TwoPc>)>,
    timers: Vec<Vec<ensemble_core::TimerId>>,
    replies: Vec<ensemble_core::Reply<ensemble_twopc::TwoPcEvidence>>,
    now: ensemble_core::Time,
}

impl TwoPcCluster {
    fn new(engine: Engine, label: &str, n: u32) -> TwoPcCluster {
        let dbs = Scratch::new(engine, label, n);
        let app = apps::shop::application();
        let plan = ensemble_app::PartitionPlan::load(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../plans/shop.toml")), &app).unwrap();
        for i in 0..n {
            drop(dbs.shop(i));
        }
        let mut c = TwoPcCluster {
            engine,
            dbs,
            app,
            plan: Arc::new(plan),
            nodes: (0..n).map(|_| None).collect(),
            queue: Default::default(),
            timers: vec![Vec::new(); n as usize],
            replies: Vec::new(),
            now: ensemble_core::Time::ZERO,
        };
        for i in 0..n {
            c.start(i);
        }
        c
    }

    /// Starts instance `i`'s node over its database, as it is, and runs its recovery.
    fn start(&mut self, i: u32) {
        self.boot(i);
        self.settle(|_, _| true);
    }

    /// Starts instance `i`'s node and asks for its recovery, delivering nothing: what it sends
    /// waits in the queue.
    fn boot(&mut self, i: u32) {
        use ensemble_core::Process;
        let sql = Arc::new(translate(&self.app, self.engine).unwrap());
        let url = admin::instance_url(self.engine, &self.dbs.urls, &self.dbs.run, i).unwrap();
        let replicated = ["items", "orders"].iter().map(|s| s.to_string()).collect();
        let shared = ensemble_server::TwoPcShared::new(&url, self.app.clone(), sql, InstanceId(i), &self.dbs.run, replicated).unwrap();
        let storage = ensemble_server::TwoPcStorage::open(shared).unwrap();
        let cfg = ensemble_twopc::TwoPcConfig {
            instances: self.nodes.len() as u32,
            max_attempts: 10,
            retry_backoff: std::time::Duration::from_millis(5),
            inquire_after: std::time::Duration::from_secs(1),
            vote_timeout: std::time::Duration::from_secs(5),
            seed: 1,
        };
        let mut node = ensemble_twopc::TwoPcNode::new(InstanceId(i), cfg, self.app.clone(), self.plan.clone());
        let mut out = Vec::new();
        node.start(self.now, &mut out);
        self.nodes[i as usize] = Some((node, storage));
        self.timers[i as usize].clear();
        self.effects(i, out);
    }

    /// Stops instance `i`: its node and its storage are gone, their connections closed.
    fn stop(&mut self, i: u32) {
        self.nodes[i as usize] = None;
    }

    fn effects(&mut self, i: u32, out: Vec<ensemble_core::Effect<ensemble_twopc::TwoPc>>) {
        use ensemble_core::{Effect, Event, Storage};
        for e in out {
            match e {
                Effect::Send { to, msg } => self.queue.push_back((to.0, Event::Message { from: ensemble_core::ProcessId(i), msg })),
                Effect::Storage { work, job, .. } => {
                    let (_, storage) = self.nodes[i as usize].as_mut().expect("a stopped node asks for nothing");
                    let result = storage.run(&job);
                    self.queue.push_back((i, Event::StorageDone { work, result }));
                }
                Effect::Reply { reply, .. } => self.replies.push(reply),
                Effect::SetTimer { id, .. } => self.timers[i as usize].push(id),
                Effect::CancelTimer { id } => self.timers[i as usize].retain(|t| *t != id),
                other => panic!("instance {i}: {other:?}"),
            }
        }
    }

    /// Delivers events in order while `deliver(to, event)` says so; the first it refuses stays
    /// at the head of the queue. An event for a stopped instance is lost.
    fn settle(&mut self, mut deliver: impl FnMut(u32, &ensemble_core::Event<ensemble_twopc::TwoPc>) -> bool) {
        use ensemble_core::Process;
        while let Some((to, event)) = self.queue.pop_front() {
            if !deliver(to, &event) {
                self.queue.push_front((to, event));
                return;
            }
            let now = self.now;
            let Some((node, _)) = self.nodes[to as usize].as_mut() else { continue };
            let mut out = Vec::new();
            node.on_event(now, event, &mut out);
            self.effects(to, out);
        }
    }

    /// Drops the event at the head of the queue (a message lost with its connection).
    fn lose_next(&mut self) -> ensemble_core::Event<ensemble_twopc::TwoPc> {
        self.queue.pop_front().expect("an event to lose").1
    }

    /// Creates cart `k` at instance 0 (carts with an even id are instance 0's: the plan
    /// partitions by cart id) and puts one of item 3 in it, as requests `seq` and `seq + 1`,
    /// nothing lost.
    fn fill(&mut self, seq: u64, k: i64) {
        self.submit(0, seq, "create_cart", vec![Value::Int(k)]);
        self.submit(0, seq + 1, "add_item", vec![Value::Int(k), Value::Int(3), Value::Int(1)]);
        self.settle(|_, _| true);
        self.committed(seq);
        self.committed(seq + 1);
    }

    fn submit(&mut self, i: u32, seq: u64, txn: &str, params: Vec<Value>) {
        self.queue.push_back((i, ensemble_core::Event::Request(request(seq, txn, params))));
    }

    /// The reply to `seq`, which must have committed.
    fn committed(&self, seq: u64) -> u64 {
        let reply = self.replies.iter().find(|r| r.seq == seq).unwrap_or_else(|| panic!("no reply to #{seq}: {:?}", self.replies));
        match &reply.body {
            ensemble_core::ReplyBody::Done(d) if d.outcome.committed() => d.evidence.ts,
            other => panic!("#{seq}: {other:?}"),
        }
    }

    /// Fires instance `i`'s timers after `after` has passed.
    fn later(&mut self, i: u32, after: std::time::Duration) {
        self.now = self.now + after;
        for id in std::mem::take(&mut self.timers[i as usize]) {
            self.queue.push_back((i, ensemble_core::Event::Timer(id)));
        }
        self.settle(|_, _| true);
    }

    fn quiescent(&self) -> bool {
        use ensemble_core::Process;
        self.queue.is_empty() && self.nodes.iter().flatten().all(|(n, _)| n.quiescent())
    }

    /// The run's branches prepared on the server.
    fn prepared(&self) -> usize {
        let sql = match self.engine {
            Engine::Mariadb => "XA RECOVER",
            Engine::Postgres => "SELECT gid FROM pg_prepared_xacts",
        };
        admin_conn_count(self.engine, sql, &self.dbs.run)
    }

    /// A table at instance `i`, read from a session of its own.
    fn table(&self, i: u32, table: &str) -> ensemble_core::Rows {
        let mut rows = self.dbs.shop_session(i).dump(table).unwrap();
        rows.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        rows
    }

    /// What `sql` returns at instance `i`, on a connection of its own.
    fn query(&self, i: u32, sql: &str) -> ensemble_core::Rows {
        let url = admin::instance_url(self.engine, &self.dbs.urls, &self.dbs.run, i).unwrap();
        ensemble_server::conn::Conn::open(self.engine, &url).unwrap().batch_rows(sql).unwrap()
    }

    /// The replicated tables are the same at every instance.
    fn replicas_agree(&self) -> bool {
        ["items", "orders"].iter().all(|t| (1..self.nodes.len() as u32).all(|i| self.table(0, t) == self.table(i, t)))
    }
}

fn is_vote(e: &ensemble_core::Event<ensemble_twopc::TwoPc>) -> bool {
    matches!(e, ensemble_core::Event::Message { msg: ensemble_twopc::Message::Vote { .. }, .. })
}

fn is_decision(e: &ensemble_core::Event<ensemble_twopc::TwoPc>) -> bool {
    matches!(e, ensemble_core::Event::Message { msg: ensemble_twopc::Message::Decide { .. }, .. })
}

fn is_prepare(e: &ensemble_core::Event<ensemble_twopc::TwoPc>) -> bool {
    matches!(e, ensemble_core::Event::Message { msg: ensemble_twopc::Message::Prepare { .. }, .. })
}

/// Rounds of the baseline's protocol over real servers, each an order coordinated by instance 0
/// with a branch at instance 1, in which every message between the nodes is lost with
/// probability 1/5 and, before any event, a node is stopped and started again over its
/// database with probability 1/25, from a fixed seed. After each round the nodes' timers fire
/// until nothing is in flight, and then: no branch is prepared, the order is at both instances
/// or at neither, an order whose client was told it committed is there, and item 3's stock
/// went down by exactly one for each order there, at every instance (nothing lost, nothing
/// applied twice, no order half there); every 50 rounds and at the end, the replicated tables
/// are the same at both. 30 rounds by default; `ENSEMBLE_2PC_LOSS_ROUNDS` and `ENSEMBLE_2PC_LOSS_SEED`
/// set how many and the seed, for a longer sweep by hand (RESULTS.md, "A coordinator's wait
/// for its votes, bounded").
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn lost_messages_and_restarted_nodes_leave_no_branch_in_doubt_and_every_order_whole() {
    use ensemble_core::Event;
    let setting = |var: &str, default: u64| -> u64 {
        std::env::var(var).map_or(default, |v| v.parse().unwrap_or_else(|e| panic!("{var}={v:?}: not a whole number: {e}")))
    };
    let rounds = setting("ENSEMBLE_2PC_LOSS_ROUNDS", 30);
    let seed = setting("ENSEMBLE_2PC_LOSS_SEED", 0x5eed_2bc0);
    for engine in ENGINES {
        let name = engine.name();
        let mut c = TwoPcCluster::new(engine, "losses", 2);
        // SplitMix64: a seed gives the same losses and stops each run.
        let mut state: u64 = seed;
        let mut draw = move || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        // Point queries: a check that read whole tables would grow with the rounds.
        let stock = |c: &TwoPcCluster, i: u32| -> i64 { c.query(i, "SELECT stock FROM items WHERE item_id = 3")[0][0].as_int().expect("an integer stock") };
        let there = |c: &TwoPcCluster, i: u32, cart: i64| !c.query(i, &format!("SELECT cart_id FROM orders WHERE cart_id = {cart}")).is_empty();
        let initial = stock(&c, 0);
        let (mut lost, mut restarts, mut told_committed, mut placed) = (0, 0, 0, 0);
        for round in 0..rounds {
            // Filled with nothing lost.
            let (seq, cart) = (round * 3 + 1, 100 + 2 * round as i64);
            c.fill(seq, cart);
            c.submit(0, seq + 2, "order", vec![Value::Int(cart)]);
            for _ in 0..40 {
                while let Some((to, event)) = c.queue.pop_front() {
                    if draw() % 25 == 0 {
                        // What was on its way to the stopped node (messages, its storage's
                        // answers) is lost with it.
                        let i = (draw() % 2) as u32;
                        c.stop(i);
                        c.queue.retain(|(to, _)| *to != i);
                        c.boot(i);
                        restarts += 1;
                        if to == i {
                            continue;
                        }
                    }
                    if matches!(event, Event::Message { .. }) && draw() % 5 == 0 {
                        lost += 1;
                        continue;
                    }
                    c.queue.push_front((to, event));
                    let mut once = true;
                    c.settle(|_, _| std::mem::take(&mut once));
                }
                if c.quiescent() {
                    break;
                }
                // Nothing left to deliver: time passes until a timer fires (an inquiry, the
                // wait for votes, a back-off).
                for i in 0..2 {
                    c.now = c.now + std::time::Duration::from_secs(5);
                    for id in std::mem::take(&mut c.timers[i]) {
                        c.queue.push_back((i as u32, Event::Timer(id)));
                    }
                }
            }
            assert!(c.quiescent(), "{name}, round {round}: still in flight after 40 periods");
            assert_eq!(c.prepared(), 0, "{name}, round {round}: a branch left prepared");
            // Nothing of an earlier round is in flight: only this round's order can have come.
            let here = there(&c, 0, cart);
            assert_eq!(there(&c, 1, cart), here, "{name}, round {round}: the order is at one instance only");
            placed += i64::from(here);
            let told = c.replies.iter().find(|r| r.seq == seq + 2).map(|r| matches!(&r.body, ensemble_core::ReplyBody::Done(d) if d.outcome.committed()));
            if told == Some(true) {
                told_committed += 1;
                assert!(here, "{name}, round {round}: the order its client was told committed is not there");
            }
            for i in 0..2 {
                assert_eq!(stock(&c, i), initial - placed, "{name}, round {round}: instance {i}'s stock of item 3 against {placed} order(s) there");
            }
            if round % 50 == 49 || round + 1 == rounds {
                assert!(c.replicas_agree(), "{name}, round {round}: the replicas differ");
            }
        }
        eprintln!("{name}: {rounds} rounds from seed {seed}, {lost} message(s) lost, {restarts} node restart(s), {told_committed} order(s) told committed");
        assert!(lost > 0 && restarts > 0, "{name}: the seed must lose messages and restart nodes");
    }
}

/// A node killed with a statement on its way to the server leaves a session that runs it once
/// the node is gone: a participant's branch may prepare, a decision commit, after the node
/// started again. A branch prepared after the new incarnation listed the prepared ones would be
/// in doubt with no one to ask about it, its locks held. So a starting node ends every session
/// on its database opened before its own that has a transaction open, and waits for the server
/// to tear it down, before it reads anything; an idle session is left alone, and so is one
/// opened after the node's mark. The earlier incarnation's session here is a connection of the
/// test's, in the middle of a transaction that wrote.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_starting_node_ends_its_earlier_incarnation_s_open_transactions_first() {
    use ensemble_server::conn::{Conn, ConnError};
    for engine in ENGINES {
        let name = engine.name();
        let mut c = TwoPcCluster::new(engine, "earlier", 2);
        let stock = |c: &TwoPcCluster| c.query(1, "SELECT stock FROM items WHERE item_id = 3");
        let before = stock(&c);
        let url = admin::instance_url(engine, &c.dbs.urls, &c.dbs.run, 1).unwrap();
        let mut earlier = Conn::open(engine, &url).unwrap();
        let mut idle = Conn::open(engine, &url).unwrap();
        earlier.batch("BEGIN").unwrap();
        earlier.batch("UPDATE items SET stock = stock - 1 WHERE item_id = 3").unwrap();
        c.stop(1);
        c.boot(1);
        c.settle(|_, _| true);
        assert!(matches!(earlier.batch("SELECT 1"), Err(ConnError::Lost(_))), "{name}: the session with a transaction open was ended");
        idle.batch("SELECT 1").unwrap_or_else(|e| panic!("{name}: an idle session is left alone: {e}"));
        assert_eq!(stock(&c), before, "{name}: its write was rolled back");
        c.fill(1, 8);
        c.submit(0, 3, "order", vec![Value::Int(8)]);
        c.settle(|_, _| true);
        c.committed(3);
        assert!(c.replicas_agree(), "{name}: the restarted instance serves");

        // A session opened after the starting node read its mark (one of its own storage
        // workers, opening while another recovers) is left alone, its transaction open.
        let app = apps::shop::application();
        let sql = Arc::new(translate(&app, engine).unwrap());
        let shared = ensemble_server::TwoPcShared::new(&url, app, sql, InstanceId(1), &c.dbs.run, Default::default()).unwrap();
        let mut own = Conn::open(engine, &url).unwrap();
        own.batch("BEGIN").unwrap();
        own.batch("UPDATE items SET stock = stock - 1 WHERE item_id = 4").unwrap();
        let mut recovering = ensemble_server::TwoPcStorage::open(shared).unwrap();
        let recovered = recovering.run(&ensemble_twopc::Job::Recover);
        assert!(matches!(recovered, ensemble_twopc::JobResult::Recovered { .. }), "{name}: {recovered:?}");
        own.batch("ROLLBACK").unwrap_or_else(|e| panic!("{name}: a session opened after the mark is left alone: {e}"));
    }
}

/// `missing_tables` (what `ensemble node --resume` checks before it serves a database as it
/// is) names every table of a database without the schema, and none once it is made.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn missing_tables_names_the_tables_a_database_does_not_have() {
    for engine in ENGINES {
        let name = engine.name();
        let dbs = Scratch::new(engine, "missing", 2);
        let all: Vec<String> = apps::shop::application().tables.iter().map(|t| t.name.clone()).collect();
        assert_eq!(dbs.shop_session(0).missing_tables().unwrap(), all, "{name}: an empty database");
        drop(dbs.shop(1));
        assert!(dbs.shop_session(1).missing_tables().unwrap().is_empty(), "{name}: a database with the schema");
    }
}

/// A prepare that never reaches its participant (lost with its connection, or with a
/// participant that stopped before it prepared) leaves no branch that would ask for a decision:
/// the coordinator's branch, holding its locks, waits for the vote only until its wait runs
/// out, or until the participant tells it that it started again, then rolls back, and the
/// request runs again and commits. A vote lost after its branch prepared is counted as a no
/// the same way, the branch is told the abort, and the vote, come late, is answered from the
/// coordinator's records.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_vote_that_does_not_come_aborts_the_attempt_and_the_request_runs_again() {
    for engine in ENGINES {
        let name = engine.name();
        let mut c = TwoPcCluster::new(engine, "votewait", 2);
        let cart = |k: i64| vec![Value::Int(k)];
        let vote_wait = std::time::Duration::from_secs(5);
        let back_off = std::time::Duration::from_millis(5);
        // Once the wait ran out: the coordinator's branch of order `seq` rolled back, and the
        // order, run again after its back-off, committed everywhere, once.
        let rolled_back_then_committed = |c: &mut TwoPcCluster, seq: u64, items: &ensemble_core::Rows| {
            assert_eq!(&c.table(0, "items"), items, "{name}: the coordinator's branch rolled back");
            c.later(0, back_off);
            c.committed(seq);
            assert_eq!(c.prepared(), 0, "{name}");
            assert!(c.quiescent(), "{name}");
            assert!(c.replicas_agree() && &c.table(0, "items") != items, "{name}: the order committed everywhere, once");
        };

        // The prepare is lost.
        c.fill(1, 8);
        let items = c.table(0, "items");
        c.submit(0, 3, "order", cart(8));
        c.settle(|_, e| !is_prepare(e));
        c.lose_next();
        c.settle(|_, _| true);
        assert!(!c.quiescent(), "{name}: the coordinator waits for the vote");
        assert_eq!(c.prepared(), 0, "{name}");
        c.later(0, vote_wait);
        assert!(c.replies.iter().all(|r| r.seq != 3), "{name}: the client is not told of the abort");
        rolled_back_then_committed(&mut c, 3, &items);

        // The participant stops before the prepare reaches it, and starts again.
        c.fill(4, 14);
        let items = c.table(0, "items");
        c.submit(0, 6, "order", cart(14));
        c.settle(|_, e| !is_prepare(e));
        c.stop(1);
        c.settle(|_, _| true);
        assert!(!c.quiescent(), "{name}: the coordinator waits for the vote");
        // Its start, told to the coordinator, ends the wait: no vote is awaited from it.
        c.start(1);
        rolled_back_then_committed(&mut c, 6, &items);

        // The vote is lost after its branch prepared; it comes after the wait ran out.
        c.fill(7, 10);
        let items = c.table(0, "items");
        c.submit(0, 9, "order", cart(10));
        c.settle(|_, e| !is_vote(e));
        let vote = c.lose_next();
        assert_eq!(c.prepared(), 1, "{name}: the participant's branch is prepared");
        c.later(0, vote_wait);
        assert_eq!(c.prepared(), 0, "{name}: the participant not heard from was told the abort");
        assert_eq!(c.table(1, "items"), items, "{name}");
        c.queue.push_back((0, vote));
        c.settle(|_, _| true);
        assert_eq!(c.prepared(), 0, "{name}");
        c.later(0, back_off);
        c.committed(9);
        assert!(c.quiescent(), "{name}");
        assert!(c.replicas_agree() && c.table(0, "items") != items, "{name}: the order committed everywhere, once");
        let (node, _) = c.nodes[0].as_ref().unwrap();
        assert_eq!((node.stats().votes_timed_out, node.stats().votes_lost_to_restarts), (2, 1), "{name}");
    }
}

/// A coordinator or a participant that stops between the prepare and the decision leaves no
/// branch in doubt and loses nothing committed: the participant asks for the decision (at once
/// when told that the coordinator started again), the coordinator's records answer it (a
/// commit recorded in its branch's own commit, an abort otherwise), and a restarted node takes
/// ids no earlier incarnation took.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_stopped_coordinator_or_participant_leaves_no_branch_in_doubt() {
    for engine in ENGINES {
        let name = engine.name();
        let mut c = TwoPcCluster::new(engine, "recover", 2);
        let cart = |k: i64| vec![Value::Int(k)];
        let items = c.table(0, "items");

        // The coordinator stops before the vote reaches it: its branch, held open on its
        // connection, is rolled back by the server; the participant's stays prepared.
        c.fill(1, 8);
        c.submit(0, 3, "order", cart(8));
        c.settle(|_, e| !is_vote(e));
        c.stop(0);
        c.lose_next();
        assert_eq!(c.prepared(), 1, "{name}: the participant's branch is prepared");
        c.start(0);
        assert_eq!(c.prepared(), 0, "{name}: told of the start, the participant asked at once; no record of a commit: rolled back");
        assert!(c.quiescent(), "{name}");
        assert_eq!(c.table(0, "items"), items, "{name}: the order left no trace");
        assert!(c.replicas_agree(), "{name}");
        // The restarted node's transactions are new ones: the order runs and commits.
        c.submit(0, 4, "order", cart(8));
        c.settle(|_, _| true);
        c.committed(4);
        assert!(c.replicas_agree() && c.table(0, "items") != items, "{name}: the order committed everywhere");

        // The coordinator stops after its commit, before its decision reaches the participant:
        // the participant, asking, is told the commit its records hold.
        c.fill(5, 10);
        c.submit(0, 7, "order", cart(10));
        c.settle(|_, e| !is_decision(e));
        c.stop(0);
        c.lose_next();
        c.start(0);
        assert_eq!(c.prepared(), 0, "{name}: asked at once, the records hold the commit");
        assert!(c.quiescent(), "{name}");
        assert!(c.table(1, "orders").iter().any(|r| r[0] == Value::Int(10)), "{name}: the participant committed its branch");
        assert!(c.replicas_agree(), "{name}");

        // A participant stops once prepared: the decision sent to it is lost; started again,
        // it finds its branch prepared and asks.
        c.fill(8, 12);
        c.submit(0, 10, "order", cart(12));
        c.settle(|_, e| !is_vote(e));
        c.stop(1);
        c.settle(|_, _| true);
        let ts = c.committed(10);
        assert_eq!(c.prepared(), 1, "{name}: the stopped participant's branch is still prepared");
        c.start(1);
        assert_eq!(c.prepared(), 0, "{name}: asked at its start, it was told the commit");
        assert!(c.quiescent(), "{name}");
        assert!(c.replicas_agree(), "{name}");
        // And its clock moved past the commit before it: what it commits next comes after.
        c.submit(1, 11, "create_cart", cart(13));
        c.settle(|_, _| true);
        assert!(c.committed(11) > ts, "{name}");
    }
}

/// A branch whose session has just ended, decided from another session once the run's sessions
/// are gone from the server's list, is rolled back whole. Decided while MariaDB was still
/// tearing its session down, its InnoDB transaction could stay prepared with no session, in no
/// list, holding its table's lock (what left a database of
/// `prepared_branches_hold_their_locks_until_the_decision_on_mariadb` undroppable in a CI run).
/// A race: so many branches, half rolled back as a run's clean-up does
/// (`admin::rollback_prepared`), half by a rollback sent again at once for as long as the server
/// refuses it, which without the wait loses the race now and then; and the table must then be
/// droppable at once.
#[test]
#[ignore = "needs MariaDB: .ci/run starts it and runs this"]
fn a_branch_whose_session_just_ended_is_rolled_back_whole() {
    use ensemble_server::conn::{Conn, ConnError};
    let dbs = Scratch::new(Engine::Mariadb, "xadetach", 1);
    let url = admin::instance_url(Engine::Mariadb, &dbs.urls, &dbs.run, 0).unwrap();
    let mut admin_conn = Conn::open(Engine::Mariadb, admin::default_url(Engine::Mariadb)).unwrap();
    Conn::open(Engine::Mariadb, &url).unwrap().batch("CREATE TABLE t (k INT PRIMARY KEY) ENGINE=InnoDB").unwrap();
    for n in 0..600 {
        let xid = format!("{}-{n}", dbs.run);
        let mut c = Conn::open(Engine::Mariadb, &url).unwrap();
        c.batch(&format!("XA START '{xid}'; INSERT INTO t VALUES ({n}); XA END '{xid}'; XA PREPARE '{xid}'")).unwrap();
        drop(c);
        if n % 2 == 0 {
            assert_eq!(admin::rollback_prepared(&mut admin_conn, &dbs.run).unwrap(), 1, "branch {n}");
            continue;
        }
        admin::wait_until_the_run_s_sessions_ended(&mut admin_conn, &dbs.run).unwrap();
        loop {
            match admin_conn.batch(&format!("XA ROLLBACK '{xid}'")) {
                Err(ConnError::Statement(m)) if m.contains("XAER_NOTA") => {}
                other => break other.unwrap(),
            }
        }
    }
    let mut db = Conn::open(Engine::Mariadb, &url).unwrap();
    assert!(db.batch_rows("SELECT k FROM t").unwrap().is_empty(), "every branch rolled back");
    // A branch kept prepared would hold its lock on `t`: the DROP would wait for it.
    db.batch("SET SESSION lock_wait_timeout = 5, innodb_lock_wait_timeout = 5; DROP TABLE t")
        .unwrap_or_else(|e| panic!("a rolled-back branch still holds `t`: {e}"));
}

/// A branch whose session has just ended, committed from another session the moment the
/// server takes the commit once the run's sessions have ended, is applied. MariaDB lists the
/// branch and takes an `XA COMMIT` for it just before InnoDB lets go of the branch's
/// transaction; a commit sent in between was answered OK and committed nothing, which
/// `admin::wait_until_the_run_s_sessions_ended` now waits out (`admin::sessions_still_held`).
/// Without any wait this fails (`scripts/xa-commit-window.sh` lost 12 commits of 1000 so);
/// against a wait for the process list alone, which lost 1 or 2 in 3000 to 10,000 there, 500
/// branches seldom catch it: that part rests on the probe and MariaDB's source (RESULTS.md,
/// "InnoDB lets go of the branch after its session has left the process list"). The wait tells
/// a live session from one torn down: InnoDB names a live session holding a prepared branch,
/// and it is not "still held" while the process list names it.
#[test]
#[ignore = "needs MariaDB: .ci/run starts it and runs this"]
fn a_commit_sent_once_innodb_let_go_of_the_branch_is_applied() {
    use ensemble_server::conn::{Conn, ConnError};
    let dbs = Scratch::new(Engine::Mariadb, "xacommit", 1);
    let url = admin::instance_url(Engine::Mariadb, &dbs.urls, &dbs.run, 0).unwrap();
    let mut admin_conn = Conn::open(Engine::Mariadb, admin::default_url(Engine::Mariadb)).unwrap();
    Conn::open(Engine::Mariadb, &url).unwrap().batch("CREATE TABLE t (k INT PRIMARY KEY) ENGINE=InnoDB").unwrap();
    let session_id = |c: &mut Conn| match c.batch_rows("SELECT CONNECTION_ID()").unwrap()[0][0] {
        Value::Int(id) => id,
        ref v => panic!("a session id, not {v:?}"),
    };

    let mut live = Conn::open(Engine::Mariadb, &url).unwrap();
    let live_id = session_id(&mut live);
    let xid = format!("{}-live", dbs.run);
    live.batch(&format!("XA START '{xid}'; INSERT INTO t VALUES (-1); XA END '{xid}'; XA PREPARE '{xid}'")).unwrap();
    assert!(admin::sessions_innodb_holds(&mut admin_conn).unwrap().contains(&live_id), "InnoDB names the session of a prepared branch");
    assert!(!admin::sessions_still_held(&mut admin_conn).unwrap().contains(&live_id), "a listed session is not one torn down");
    live.batch(&format!("XA COMMIT '{xid}'")).unwrap();
    drop(live);

    let mut ended = Vec::new();
    for n in 0..500 {
        let xid = format!("{}-{n}", dbs.run);
        let mut c = Conn::open(Engine::Mariadb, &url).unwrap();
        ended.push(session_id(&mut c));
        c.batch(&format!("XA START '{xid}'; INSERT INTO t VALUES ({n}); XA END '{xid}'; XA PREPARE '{xid}'")).unwrap();
        drop(c);
        admin::wait_until_the_run_s_sessions_ended(&mut admin_conn, &dbs.run).unwrap();
        loop {
            match admin_conn.batch(&format!("XA COMMIT '{xid}'")) {
                Err(ConnError::Statement(m)) if m.contains("XAER_NOTA") => {}
                other => break other.unwrap(),
            }
        }
        let row = admin_conn.batch_rows(&format!("SELECT k FROM `{}`.t WHERE k = {n}", admin::database_name(&dbs.run, 0))).unwrap();
        assert_eq!(row, vec![vec![Value::Int(n)]], "branch {n}: its XA COMMIT was answered OK and committed nothing");
    }
    let held = admin::sessions_innodb_holds(&mut admin_conn).unwrap();
    assert!(ended.iter().all(|id| !held.contains(id)), "InnoDB still holds an ended session: {held:?}");
    let mut db = Conn::open(Engine::Mariadb, &url).unwrap();
    // A branch kept prepared in no list would hold its lock on `t`: the DROP would wait for it.
    db.batch("SET SESSION lock_wait_timeout = 5, innodb_lock_wait_timeout = 5; DROP TABLE t")
        .unwrap_or_else(|e| panic!("a committed branch still holds `t`: {e}"));
}

/// A branch's session killed by the server's administrator in the middle of a statement (the
/// branch's write, XA END, XA PREPARE, XA COMMIT), then decided from another session once the
/// killed one has left the process list, as the baseline's storage and a run's clean-up do:
/// nothing of it stays prepared in no list, whatever the kill cut, and the clean-up's
/// `rollback_prepared` does not trip over a branch that the killed session was still committing
/// when it was first listed (it used to wait 10 s for it and fail with `XAER_NOTA`). Looked for
/// as the way that still leaves such a branch in runs under a server that ends sessions
/// (RESULTS.md, "A branch decided while its session was torn down"): not this. The kills land
/// at staggered delays, some mid-statement; the table must then be droppable at once.
#[test]
#[ignore = "needs MariaDB: .ci/run starts it and runs this"]
fn a_branch_whose_session_is_killed_mid_statement_leaves_nothing_unlisted() {
    use ensemble_server::conn::Conn;
    let dbs = Scratch::new(Engine::Mariadb, "xakill", 1);
    let url = admin::instance_url(Engine::Mariadb, &dbs.urls, &dbs.run, 0).unwrap();
    let admin_url = admin::default_url(Engine::Mariadb);
    let mut admin_conn = Conn::open(Engine::Mariadb, admin_url).unwrap();
    Conn::open(Engine::Mariadb, &url).unwrap().batch("CREATE TABLE t (k INT PRIMARY KEY) ENGINE=InnoDB").unwrap();
    let mut cut = 0;
    for (p, phase) in ["write", "end", "prepare", "commit"].into_iter().enumerate() {
        for i in 0..150u64 {
            let n = p as u64 * 1000 + i;
            let xid = format!("{}-{n}", dbs.run);
            let mut c = Conn::open(Engine::Mariadb, &url).unwrap();
            let Value::Int(id) = c.batch_rows("SELECT CONNECTION_ID()").unwrap()[0][0].clone() else { panic!("a session id") };
            let (before, cut_one) = match phase {
                "write" => (format!("XA START '{xid}'"), format!("INSERT INTO t VALUES ({n}); XA END '{xid}'; XA PREPARE '{xid}'")),
                "end" => (format!("XA START '{xid}'; INSERT INTO t VALUES ({n})"), format!("XA END '{xid}'; XA PREPARE '{xid}'")),
                "prepare" => (format!("XA START '{xid}'; INSERT INTO t VALUES ({n}); XA END '{xid}'"), format!("XA PREPARE '{xid}'")),
                _ => (format!("XA START '{xid}'; INSERT INTO t VALUES ({n}); XA END '{xid}'; XA PREPARE '{xid}'"), format!("XA COMMIT '{xid}'")),
            };
            c.batch(&before).unwrap();
            let mut killer = Conn::open(Engine::Mariadb, admin_url).unwrap();
            let go = Arc::new(std::sync::Barrier::new(2));
            let delay = std::time::Duration::from_micros(i * 37 % 300);
            let kill = {
                let go = Arc::clone(&go);
                std::thread::spawn(move || {
                    go.wait();
                    std::thread::sleep(delay);
                    let _ = killer.batch(&format!("KILL {id}"));
                })
            };
            go.wait();
            cut += usize::from(c.batch(&cut_one).is_err());
            kill.join().unwrap();
            drop(c);
            // Whatever the server lists as prepared is rolled back once the session is gone.
            admin::rollback_prepared(&mut admin_conn, &dbs.run).unwrap_or_else(|e| panic!("{phase}, branch {i}: {e}"));
        }
    }
    eprintln!("{cut} of 600 statements cut by the kill");
    assert_eq!(admin::rollback_prepared(&mut admin_conn, &dbs.run).unwrap(), 0, "nothing left prepared");
    let mut db = Conn::open(Engine::Mariadb, &url).unwrap();
    // A branch kept prepared in no list would hold its lock on `t`: the DROP would wait for it.
    db.batch("SET SESSION lock_wait_timeout = 5, innodb_lock_wait_timeout = 5; DROP TABLE t")
        .unwrap_or_else(|e| panic!("a branch of a killed session still holds `t`: {e}"));
}
