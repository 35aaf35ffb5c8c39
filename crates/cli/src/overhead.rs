//! Middleware overhead: the same operations of an application (shop unless `--app` says), in
//! the same run, through one Ensemble instance (a node process, clients over loopback TCP) and
//! directly on the backend's database (client threads, one connection each, no middleware:
//! SQLite embedded, or the PostgreSQL or MariaDB server through the same client library), both
//! on this machine; and the Ensemble run again on
//! the plain wire, without a cluster secret, for what authentication costs, and with the node's
//! own pool of connections, as `ensemble bench` runs it (`Experiment::storage_workers`; the
//! first node row has a connection per client, as the direct path), and that node again on a
//! thread of this process, its clients reaching it through a channel (`Experiment::embedded`:
//! Ensemble linked into the application, as Gyro's instances are), and once more with those
//! clients on the node's loop thread (`Experiment::clients_on_loop`); on PostgreSQL, also
//! the design that would lift the writer lock there (`ensemble_server::DirectTxn::StrictLockLast`),
//! priced in the client's thread (on MariaDB the node's writers take the lock last already),
//! and locals side by side under SSI (`ensemble_server::DirectTxn::SerializableSideBySide`) in
//! the client's thread, then through the node (`--writers-side-by-side`), checked, once with a
//! connection per client and once with the node's default pool (`Experiment::storage_workers`),
//! or once with each pool `--storage-workers` asks for.
//! Reported as ratios, with where each path's CPU time went per operation (`crate::cpu_use`):
//! on a machine whose cores the clients, the node and the server all share, that is what the
//! added latency is made of.

use ensemble_app::{ClientCtx, DataConfig};
use ensemble_bench::report::render;
use ensemble_bench::{Experiment, System};
use ensemble_core::topology::Topology;
use ensemble_app::InstanceId;
use ensemble_core::{ClientId, Request};
use ensemble_sqlite::SqliteStorage;
type Histogram = hdr::Histogram<u64>;
use rand::SeedableRng;
use crate::cpu_use::{Component, CpuUse, Snapshot};
use std::time::{Duration, Instant};

mod hdr {
    pub use ensemble_bench::metrics::Histogram;
}

struct Measured {
    ops: u64,
    secs: f64,
    hist: Histogram,
    /// Runs again after the server made a transaction a victim (serialization failure,
    /// deadlock), over every operation.
    retries: u64,
    /// What became of the reads sent ahead (the paths that read ahead, on PostgreSQL).
    reads_ahead: ensemble_server::ReadsAheadCount,
    /// Commits that waited for the server's log flush (`ServerStorage::flushed_commits`).
    flushed_commits: u64,
    /// Where the machine's CPU time went in the window.
    cpu: CpuUse,
}

/// One client thread's connection on the direct path.
enum Direct {
    Sqlite(SqliteStorage),
    Server(Box<ensemble_server::ServerStorage>),
}

/// Which transactions a client thread of [`direct`] runs on its own connection.
#[derive(Clone, Copy, PartialEq)]
enum Txns {
    /// The application's, as it would run them without Ensemble.
    Application,
    /// The application's, with BEGIN sent in the first statement's round trip, the reads its
    /// body asked last time sent with the first of them, and each write whose count the body
    /// does not use sent with the statement after it, as Ensemble's storage runs its
    /// transactions on PostgreSQL: the round-trip savings an application could make
    /// too (the one it could not, a reader's COMMIT deferred, is not safe under the SERIALIZABLE
    /// the application runs), so that the difference from the run through the node is the
    /// middleware's own cost.
    ApplicationPipelined,
    /// Ensemble's storage job for a local operation (the counters read and bumped around the
    /// body), run in the client's thread: the node's transactions without the node, so the
    /// difference from `Application` is what the bookkeeping costs the server, and the
    /// difference from the run through the node is what the hop costs.
    Bookkeeping,
    /// On PostgreSQL, the design that would lift the writer lock
    /// ([`ensemble_server::DirectTxn::StrictLockLast`]), run in the client's thread: what it
    /// would cost at best, measured beside what it would replace. (On MariaDB it is what
    /// `Bookkeeping` runs.)
    StrictLockLast,
    /// On PostgreSQL, the transactions a node runs with `--writers-side-by-side`
    /// ([`ensemble_server::DirectTxn::SerializableSideBySide`]), run in the client's thread:
    /// what they cost without the hop.
    SerializableSideBySide,
}

impl Direct {
    fn execute(&mut self, request: &Request, txns: Txns) -> anyhow::Result<(ensemble_core::Outcome, u32)> {
        use ensemble_app::{ExecRole, StorageJob, StorageResult};
        use ensemble_core::Storage;
        if txns == Txns::Bookkeeping {
            let job = StorageJob::Execute { request: request.clone(), role: ExecRole::Local };
            let result = match self {
                Direct::Sqlite(db) => db.run(&job),
                Direct::Server(db) => db.run(&job),
            };
            return match result {
                StorageResult::Executed { outcome, retries, .. } => Ok((outcome, retries)),
                other => Err(anyhow::anyhow!("transaction `{}` through the storage job: {other:?}", request.txn)),
            };
        }
        Ok(match self {
            Direct::Sqlite(db) => (db.execute_direct(request)?, 0),
            Direct::Server(db) => {
                let how = match txns {
                    Txns::ApplicationPipelined => ensemble_server::DirectTxn::Pipelined,
                    Txns::StrictLockLast => ensemble_server::DirectTxn::StrictLockLast,
                    Txns::SerializableSideBySide => ensemble_server::DirectTxn::SerializableSideBySide,
                    _ => ensemble_server::DirectTxn::Application,
                };
                db.execute_direct(request, how)?
            }
        })
    }
}

/// Runs the experiment's workload directly on one database of its backend with `threads`
/// closed-loop threads, each running `txns` on its own connection.
fn direct(e: &Experiment, threads: u32, measure_s: f64, seed: u64, txns: Txns) -> anyhow::Result<Measured> {
    let app = ensemble_app::application(e.workload.app()).map_err(anyhow::Error::msg)?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("direct.db");
    let data = (app.generate)(DataConfig { scale: 1, seed });
    let mut direct_exp = e.clone();
    direct_exp.label = match txns {
        Txns::Application => "overhead-direct".into(),
        Txns::ApplicationPipelined => "overhead-direct-pipelined".into(),
        Txns::Bookkeeping => "overhead-bookkeeping".into(),
        Txns::StrictLockLast => "overhead-strict-lock-last".into(),
        Txns::SerializableSideBySide => "overhead-ssi-side-by-side".into(),
    };
    // A server's database for the direct path, made and dropped like a run's.
    let (tagged, _databases) = ensemble_bench::databases::for_run(&direct_exp, threads as u64)?;
    let server = match tagged.backend.kind.engine() {
        Some(engine) => {
            let url = ensemble_server::admin::instance_url(engine, &tagged.backend.server_urls(), &tagged.backend.run, 0).map_err(anyhow::Error::msg)?;
            let sql = std::sync::Arc::new(ensemble_server::translate(&app, engine)?);
            let mut db = ensemble_server::ServerStorage::open(&url, app.clone(), sql.clone(), InstanceId(0))?;
            db.create_schema()?;
            db.load(&data, |_, _, _| true)?;
            Some((url, sql))
        }
        None => {
            let db = SqliteStorage::open_file(&path, app.clone(), InstanceId(0))?;
            db.create_schema()?;
            db.load(&data, |_, _, _| true)?;
            None
        }
    };
    let open = move || -> anyhow::Result<Direct> {
        Ok(match &server {
            Some((url, sql)) => Direct::Server(Box::new(ensemble_server::ServerStorage::open(url, app.clone(), sql.clone(), InstanceId(0))?)),
            None => Direct::Sqlite(SqliteStorage::open_file(&path, app.clone(), InstanceId(0))?),
        })
    };
    let connections = (0..threads).map(|_| open()).collect::<anyhow::Result<Vec<_>>>()?;
    let window_start = Snapshot::take();
    let start = Instant::now();
    let stop = start + Duration::from_secs_f64(measure_s);
    let handles: Vec<_> = connections
        .into_iter()
        .enumerate()
        .map(|(t, mut db)| {
            let workload = e.workload.clone();
            std::thread::spawn(move || -> anyhow::Result<(Histogram, u64, Direct)> {
                let mut w = workload.client(1);
                let ctx = ClientCtx { client_index: t as u64, home: InstanceId(0), instances: 1 };
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ t as u64);
                let mut hist = ensemble_bench::metrics::new_histogram();
                let mut seq = 0;
                let mut retries = 0u64;
                while Instant::now() < stop {
                    let (txn, params) = w.next(&mut rng, &ctx);
                    seq += 1;
                    let t0 = Instant::now();
                    let (outcome, r) = db.execute(&Request { client: ClientId(t as u64), seq, txn: txn.clone(), params }, txns)?;
                    hist.saturating_record(t0.elapsed().as_micros().max(1) as u64);
                    retries += r as u64;
                    w.observe(&txn, &outcome);
                }
                // The connection outlives the thread until the window has been read: its
                // server process's time is read there.
                Ok((hist, retries, db))
            })
        })
        .collect();
    let mut hist = ensemble_bench::metrics::new_histogram();
    let mut retries = 0;
    let mut connections = Vec::new();
    let mut reads_ahead = ensemble_server::ReadsAheadCount::default();
    let mut flushed_commits = 0;
    for h in handles {
        let (h, r, db) = h.join().expect("a client thread panicked")?;
        hist.add(h)?;
        retries += r;
        if let Direct::Server(db) = &db {
            reads_ahead += db.reads_ahead();
            flushed_commits += db.flushed_commits();
        }
        connections.push(db);
    }
    let window_end = Snapshot::take();
    drop(connections);
    let mut cpu = CpuUse::default();
    if let (Some(a), Some(b)) = (&window_start, &window_end) {
        cpu.add(a, b, hist.len());
    }
    Ok(Measured { ops: hist.len(), secs: start.elapsed().as_secs_f64().min(measure_s + 1.0), hist, retries, reads_ahead, flushed_commits, cpu })
}

/// The workload as the figure's title names it.
fn workload_name(w: &ensemble_bench::WorkloadSpec) -> String {
    use ensemble_bench::WorkloadSpec;
    match w {
        WorkloadSpec::Shop { browse_fraction, .. } => format!("shop ({:.0}% browse)", browse_fraction * 100.0),
        WorkloadSpec::Tpcw { write_share: None } => "tpcw (the reference mix)".into(),
        WorkloadSpec::Rubis { write_share: None, .. } => "rubis (the bidding mix)".into(),
        other => other.app().into(),
    }
}

/// What this machine charges for the two things the hop through a node is made of, timed here
/// so the breakdown can be read against them: a hand-off between two threads that wait on a
/// channel (the round trip wakes each once), and a round trip of a small message over loopback
/// TCP between two blocking threads.
fn floor_costs() -> anyhow::Result<(f64, f64)> {
    use std::io::{Read, Write};
    const ROUNDS: u32 = 5000;
    let (to_echo, echo_rx) = std::sync::mpsc::sync_channel::<u32>(1);
    let (echo_tx, back) = std::sync::mpsc::sync_channel::<u32>(1);
    let echo = std::thread::spawn(move || {
        while let Ok(v) = echo_rx.recv() {
            if echo_tx.send(v).is_err() {
                break;
            }
        }
    });
    let t0 = Instant::now();
    for i in 0..ROUNDS {
        to_echo.send(i)?;
        back.recv()?;
    }
    let handoff_us = t0.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64;
    drop(to_echo);
    echo.join().expect("the echo thread panicked");
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut c, _) = listener.accept()?;
        c.set_nodelay(true)?;
        let mut b = [0u8; 128];
        while c.read_exact(&mut b).is_ok() {
            c.write_all(&b)?;
        }
        Ok(())
    });
    let mut c = std::net::TcpStream::connect(addr)?;
    c.set_nodelay(true)?;
    let mut b = [0u8; 128];
    let t0 = Instant::now();
    for _ in 0..ROUNDS {
        c.write_all(&b)?;
        c.read_exact(&mut b)?;
    }
    let tcp_us = t0.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64;
    drop(c);
    server.join().expect("the echo server panicked")?;
    Ok((handoff_us, tcp_us))
}

/// What one session's statements cost the server, one after another with nothing else running
/// on it: a round trip that reads nothing, and a committed write of one row, with and (on
/// PostgreSQL) without waiting for the log's flush. The node's serial lane commits its writers
/// one group after another, each waiting for its flush; the direct path's writers wait for
/// theirs side by side, and the server flushes for several at once.
struct ServerFloor {
    round_trip_us: f64,
    write_us: f64,
    /// PostgreSQL, with `synchronous_commit = off` for the session (MariaDB's
    /// `innodb_flush_log_at_trx_commit` is the whole server's).
    write_unflushed_us: Option<f64>,
}

/// Times [`ServerFloor`] on a database of its own, made and dropped like a run's; `None` on
/// SQLite.
fn server_floor(e: &Experiment) -> anyhow::Result<Option<ServerFloor>> {
    const ROUNDS: u32 = 1000;
    let Some(engine) = e.backend.kind.engine() else { return Ok(None) };
    let mut floor = e.clone();
    floor.label = "overhead-server-floor".into();
    floor.instances = 1;
    let (tagged, _database) = ensemble_bench::databases::for_run(&floor, 1)?;
    let url = ensemble_server::admin::instance_url(engine, &tagged.backend.server_urls(), &tagged.backend.run, 0).map_err(anyhow::Error::msg)?;
    let mut conn = ensemble_server::conn::Conn::open(engine, &url)?;
    conn.batch("CREATE TABLE floor_writes (k INT PRIMARY KEY, v BIGINT NOT NULL)")?;
    conn.batch("INSERT INTO floor_writes (k, v) VALUES (1, 0)")?;
    // Each statement is a transaction of its own (autocommit), after a tenth as many untimed.
    fn timed(conn: &mut ensemble_server::conn::Conn, sql: &str) -> anyhow::Result<f64> {
        for _ in 0..ROUNDS / 10 {
            conn.batch(sql)?;
        }
        let t0 = Instant::now();
        for _ in 0..ROUNDS {
            conn.batch(sql)?;
        }
        Ok(t0.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64)
    }
    let write = "UPDATE floor_writes SET v = v + 1 WHERE k = 1";
    let round_trip_us = timed(&mut conn, "SELECT 1")?;
    let write_us = timed(&mut conn, write)?;
    let write_unflushed_us = match engine {
        ensemble_server::Engine::Postgres => {
            conn.batch("SET synchronous_commit = off")?;
            Some(timed(&mut conn, write)?)
        }
        ensemble_server::Engine::Mariadb => None,
    };
    Ok(Some(ServerFloor { round_trip_us, write_us, write_unflushed_us }))
}

/// One path's figures in one round.
#[derive(Clone, Copy)]
struct Round {
    ops: f64,
    secs: f64,
    mean_ms: f64,
    p50_ms: f64,
    p99_ms: f64,
}

impl Round {
    fn of(m: &Measured) -> Round {
        let ms_at = |q: f64| m.hist.value_at_quantile(q) as f64 / 1e3;
        Round { ops: m.ops as f64, secs: m.secs, mean_ms: m.hist.mean() / 1e3, p50_ms: ms_at(0.5), p99_ms: ms_at(0.99) }
    }

    fn of_run(r: &ensemble_bench::RunResult) -> Round {
        let all = &r.summary.classes["all"];
        Round { ops: all.count as f64, secs: r.summary.window_s, mean_ms: all.mean_ms, p50_ms: all.p50_ms, p99_ms: all.p99_ms }
    }
}

/// A path over every round: throughput and mean latency pooled over all its operations, the
/// percentiles the median of the rounds' (the rounds' histograms are not all kept).
struct Path {
    /// Its row's name.
    name: String,
    rounds: Vec<Round>,
    cpu: CpuUse,
    /// Transactions run again after the server made them victims, and the operations counted
    /// with them (a node's counters cover its drain too).
    retries: u64,
    counted: u64,
    /// What became of the reads its storages sent ahead (from the node's counters for a run
    /// through one; zero where nothing reads ahead).
    reads_ahead: ensemble_server::ReadsAheadCount,
    /// Commits that waited for the server's log flush, counted as `reads_ahead` is.
    flushed_commits: u64,
}

impl Path {
    fn new(name: impl Into<String>) -> Path {
        Path { name: name.into(), rounds: Vec::new(), cpu: CpuUse::default(), retries: 0, counted: 0, reads_ahead: Default::default(), flushed_commits: 0 }
    }

    fn push(&mut self, m: &Measured) {
        self.rounds.push(Round::of(m));
        self.cpu.merge(&m.cpu);
        self.retries += m.retries;
        self.counted += m.hist.len();
        self.reads_ahead += m.reads_ahead;
        self.flushed_commits += m.flushed_commits;
    }

    /// Commits that waited for the server's log flush, per operation.
    fn flushes_per_op(&self) -> f64 {
        self.flushed_commits as f64 / self.counted.max(1) as f64
    }

    /// Victims run again per 1000 operations.
    fn retries_per_1000(&self) -> f64 {
        if self.counted > 0 {
            self.retries as f64 * 1000.0 / self.counted as f64
        } else {
            0.0
        }
    }

    fn ops_per_s(&self) -> f64 {
        self.rounds.iter().map(|r| r.ops).sum::<f64>() / self.rounds.iter().map(|r| r.secs).sum::<f64>()
    }

    fn mean_ms(&self) -> f64 {
        let n: f64 = self.rounds.iter().map(|r| r.ops).sum();
        self.rounds.iter().map(|r| r.mean_ms * r.ops).sum::<f64>() / n.max(1.0)
    }

    fn median(&self, f: impl Fn(&Round) -> f64) -> f64 {
        let mut v: Vec<f64> = self.rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }
}

/// What most summary lines compare a path with.
const MEAN: &str = "the direct path's mean";

/// "N % to WHAT (round by round r1, r2, ...)": what `path` adds to the mean of `base`, over the run and
/// round by round.
fn adds_to(path: &Path, base: &Path, what: &str) -> String {
    format!("{:.0} % to {what} (round by round {})", (path.mean_ms() / base.mean_ms() - 1.0) * 100.0, ratio_spread(path, base))
}

/// The mean latency ratio of `a` to `b` in each round, in the rounds' order (sorted, as they
/// were printed before, they read as a drift over the run that was not there).
fn ratio_spread(a: &Path, b: &Path) -> String {
    a.rounds.iter().zip(&b.rounds).map(|(x, y)| format!("{:.2}", x.mean_ms / y.mean_ms)).collect::<Vec<_>>().join(", ")
}

/// What the figure runs: the application, its closed-loop clients, the node's pools to price
/// side by side (`--storage-workers`; none: its default), each path's time in all and in how
/// many rounds.
pub struct Settings<'a> {
    pub app: &'a str,
    pub threads: u32,
    pub pools: &'a [u32],
    pub measure_s: f64,
    pub rounds: u32,
    pub seed: u64,
}

pub fn run(settings: &Settings<'_>, progress: bool, backend: ensemble_bench::Backend) -> anyhow::Result<String> {
    let &Settings { app, threads, pools, measure_s, rounds, seed } = settings;
    let round_s = measure_s / rounds as f64;
    let mut e = Experiment::new(app, System::Centralized, 1, Topology::lan()).map_err(anyhow::Error::msg)?;
    // Loopback as it is: no emulated delay.
    e.topology.one_way_ms = vec![vec![0.0]];
    e.clients = threads;
    e.warmup_s = 0.0;
    e.measure_s = round_s;
    e.seed = seed;
    e.idle_pause_us = 500;
    e.label = "overhead-ensemble".into();
    e.runtime = ensemble_bench::Runtime::Real;
    e.backend = backend;
    // What `ensemble bench` and every other figure give a node, unless `--storage-workers`
    // prices other sizes: its default pool of connections (two), whatever the number of
    // clients.
    let default_pool = e.storage_workers;
    let pools = if pools.is_empty() { vec![default_pool] } else { pools.to_vec() };
    // The node exactly as `ensemble bench` runs it: its own pool, its locals as by default.
    let mut own_pool = e.clone();
    own_pool.label = format!("overhead-ensemble-pool{default_pool}");
    // And that node on a thread of the clients' process, reached through a channel: Ensemble
    // linked into the application, as Gyro's instances are into the application server they
    // serve, so that no socket lies between an operation and the middleware, as none lies
    // between the direct path's clients and their client library.
    let mut embedded = own_pool.clone();
    embedded.embedded = true;
    embedded.label = format!("overhead-ensemble-embedded-pool{default_pool}");
    // And with the clients on that node's loop thread, as an application whose handlers run on
    // the event loop Ensemble runs on: a request and its reply cross no thread but the storage
    // worker's.
    let mut on_loop = embedded.clone();
    on_loop.clients_on_loop = true;
    on_loop.label = format!("overhead-ensemble-embedded-on-loop-pool{default_pool}");
    // A connection per client, as on the direct path: fewer would queue requests at the node.
    e.storage_workers = threads;
    let mut plain = e.clone();
    plain.plain_wire = true;
    plain.label = "overhead-ensemble-plain-wire".into();
    // On PostgreSQL, the node again with its locals side by side under SSI, ordered by the
    // checker's search.
    let mut side = e.clone();
    side.writers_side_by_side = true;
    side.label = "overhead-ensemble-side-by-side".into();
    // And once more with the node's own pool: fewer transactions at once in the server than
    // clients, as a connection pool in front of a server keeps them; the direct path cannot
    // (its clients each hold a connection), so this row is the middleware's, not the hop's.
    // A pool as large as the clients is the side-by-side row again.
    let pooled: Vec<Experiment> = pools
        .iter()
        .filter(|&&n| n != threads)
        .map(|&n| {
            let mut x = side.clone();
            x.storage_workers = n;
            x.label = format!("overhead-ensemble-side-by-side-pool{n}");
            x
        })
        .collect();
    let (handoff_us, tcp_us) = floor_costs()?;
    let server = server_floor(&e)?;
    let db_name = match e.backend.kind {
        ensemble_bench::BackendKind::Sqlite => "SQLite",
        ensemble_bench::BackendKind::Postgres => "PostgreSQL",
        ensemble_bench::BackendKind::Mariadb => "MariaDB",
    };
    // Only PostgreSQL's client pipelines; elsewhere the row would repeat the direct one.
    let pipelines = e.backend.kind == ensemble_bench::BackendKind::Postgres;
    let harness = ensemble_bench::systems::belt::BeltHarness::new();
    let mut d = Path::new(format!("directly on {db_name}"));
    let mut dp = Path::new("... BEGIN, reads, writes pipelined");
    let mut b = Path::new("Ensemble's transactions, no node");
    let mut strict = Path::new("... writers 2PL, writer lock last");
    let mut ssi = Path::new("... writers side by side under SSI");
    let mut r = Path::new("through one Ensemble instance");
    let mut p = Path::new("... on the plain wire (no secret)");
    let mut own_pool_path = Path::new(format!("... the node's own pool of {default_pool}"));
    let mut embedded_path = Path::new("... the same, in the clients' process");
    let mut on_loop_path = Path::new("... its clients on the node's loop");
    let mut side_path = Path::new("... locals side by side under SSI");
    let mut pooled_paths: Vec<Path> = pooled.iter().map(|x| Path::new(format!("... side by side, a pool of {}", x.storage_workers))).collect();
    let mut checks = Vec::new();
    // The node's counters cover every operation it ran, the window's and the drain's.
    let counter = |r: &ensemble_bench::RunResult, names: &[&str]| -> u64 {
        r.processes.iter().flat_map(|p| &p.counters).filter(|(k, _)| names.contains(&k.as_str())).map(|(_, v)| *v).sum()
    };
    // Round by round, every path in turn: what drifts on this machine over a minute (the
    // server's caches, its checkpoints, the neighbours of a virtual machine) falls on all of
    // them alike, and the rounds' spread is printed.
    for round in 0..rounds {
        let round_seed = seed + round as u64;
        d.push(&direct(&e, threads, round_s, round_seed, Txns::Application)?);
        if pipelines {
            dp.push(&direct(&e, threads, round_s, round_seed, Txns::ApplicationPipelined)?);
        }
        b.push(&direct(&e, threads, round_s, round_seed, Txns::Bookkeeping)?);
        if e.backend.kind == ensemble_bench::BackendKind::Postgres {
            strict.push(&direct(&e, threads, round_s, round_seed, Txns::StrictLockLast)?);
            ssi.push(&direct(&e, threads, round_s, round_seed, Txns::SerializableSideBySide)?);
        }
        let mut paths = vec![(&e, &mut r), (&plain, &mut p)];
        if default_pool != threads {
            paths.push((&own_pool, &mut own_pool_path));
        }
        paths.push((&embedded, &mut embedded_path));
        paths.push((&on_loop, &mut on_loop_path));
        if e.backend.kind == ensemble_bench::BackendKind::Postgres {
            paths.push((&side, &mut side_path));
            paths.extend(pooled.iter().zip(pooled_paths.iter_mut()));
        }
        for (exp, path) in paths {
            let mut exp = exp.clone();
            exp.seed = round_seed;
            let run = crate::real::run_real_measuring(&harness, &exp, progress, Some(&mut path.cpu))?;
            if run.check_passed != Some(true) {
                anyhow::bail!("the run through the node ({}) failed its check: {}", exp.label, run.check.unwrap_or_default());
            }
            path.retries += counter(&run, &["storage_retries"]);
            path.counted += counter(&run, &["locals_executed", "globals_executed"]);
            use ensemble_server::ReadsAheadCount;
            path.reads_ahead += ReadsAheadCount {
                answered: counter(&run, &[ReadsAheadCount::ANSWERED]),
                thrown_away: counter(&run, &[ReadsAheadCount::THROWN_AWAY]),
            };
            path.flushed_commits += counter(&run, &[ensemble_server::ServerStorage::FLUSHED_COMMITS]);
            checks.push(run.check.clone().unwrap_or_default());
            path.rounds.push(Round::of_run(&run));
        }
    }
    let row = |path: &Path| {
        vec![
            path.name.clone(),
            format!("{:.0}", path.ops_per_s()),
            format!("{:.3}", path.mean_ms()),
            format!("{:.3}", path.median(|r| r.p50_ms)),
            format!("{:.3}", path.median(|r| r.p99_ms)),
        ]
    };
    let mut rows = vec![["path", "ops/s", "mean ms", "p50 ms", "p99 ms"].map(String::from).to_vec(), row(&d)];
    let mut against_pipelined = String::new();
    if pipelines {
        rows.push(row(&dp));
        against_pipelined = format!(
            "against the direct path that pipelines BEGIN, its reads and its writes: throughput ratio {:.2}, mean latency ratio {:.2} (Ensemble adds {:.0} %; round by round {})\n",
            r.ops_per_s() / dp.ops_per_s(),
            r.mean_ms() / dp.mean_ms(),
            (r.mean_ms() / dp.mean_ms() - 1.0) * 100.0,
            ratio_spread(&r, &dp)
        );
        // The node's storages read ahead by the same plans, over the same mix, as Ensemble's
        // transactions without the node do.
        let per_op = |path: &Path| {
            let n = path.counted.max(1) as f64;
            format!("{:.3} and {:.3}", path.reads_ahead.answered as f64 / n, path.reads_ahead.thrown_away as f64 / n)
        };
        against_pipelined += &format!(
            "  reads sent ahead of the body's asking, per operation, answered what the body asked next and thrown away (the body wrote, asked another read, or ended first): this row {}; Ensemble's transactions without the node {}; through the node {}\n",
            per_op(&dp),
            per_op(&b),
            per_op(&r)
        );
    }
    rows.push(row(&b));
    let mut lifted = String::new();
    if !strict.rounds.is_empty() {
        rows.push(row(&strict));
        lifted = format!(
            "the design that would lift the writer lock (strict two-phase locking, the writer lock taken last; no node, not checked): it adds {}, Ensemble's transactions as they are {:.0} %; run again after a deadlock or a lock timeout, per 1000 operations: {:.1}\n",
            adds_to(&strict, &d, MEAN),
            (b.mean_ms() / d.mean_ms() - 1.0) * 100.0,
            strict.retries_per_1000(),
        );
    }
    if !ssi.rounds.is_empty() {
        rows.push(row(&ssi));
        lifted += &format!(
            "the transactions --writers-side-by-side runs, without the node (writers side by side under SSI, each reading its epoch and snapshot with its COMMIT; not checked): it adds {}; run again after a serialization failure, per 1000 operations: {:.1}\n",
            adds_to(&ssi, &d, MEAN),
            ssi.retries_per_1000(),
        );
    }
    rows.extend([row(&r), row(&p)]);
    let mut as_run = String::new();
    if !own_pool_path.rounds.is_empty() {
        rows.push(row(&own_pool_path));
        as_run = format!(
            "the node as `ensemble bench` and the other figures run it (its own pool of {default_pool} connections for {threads} clients, its locals as by default; checked): it adds {}; run again after the server made them victims, per 1000 operations: {:.1}\n",
            adds_to(&own_pool_path, &d, MEAN),
            own_pool_path.retries_per_1000(),
        );
    }
    rows.push(row(&embedded_path));
    as_run += &format!(
        "the same node on a thread of the clients' process (`ensemble bench --embedded`: its own pool of {default_pool}, the clients' requests and its replies through channels, no socket, as in an application with Ensemble linked into it; checked): it adds {}; run again after the server made them victims, per 1000 operations: {:.1}\n",
        adds_to(&embedded_path, &d, MEAN),
        embedded_path.retries_per_1000(),
    );
    rows.push(row(&on_loop_path));
    as_run += &format!(
        "the same with the clients on the node's loop thread (`--embedded --clients-on-loop`: as an application whose handlers run on Ensemble's event loop; checked): it adds {}; against the clients on a thread of their own, mean latency ratio {:.2} (round by round {})\n",
        adds_to(&on_loop_path, &d, MEAN),
        on_loop_path.mean_ms() / embedded_path.mean_ms(),
        ratio_spread(&on_loop_path, &embedded_path),
    );
    if !side_path.rounds.is_empty() {
        rows.push(row(&side_path));
        lifted += &format!(
            "through the node with its locals side by side under SSI (--writers-side-by-side; checked, the order found by search): it adds {}, {}; the hop through the node {:.3} ms; run again after a serialization failure, per 1000 operations: {:.1}\n",
            adds_to(&side_path, &d, MEAN),
            adds_to(&side_path, &dp, "the direct path that pipelines BEGIN, its reads and its writes"),
            side_path.mean_ms() - ssi.mean_ms(),
            side_path.retries_per_1000(),
        );
    }
    for (x, pooled_path) in pooled.iter().zip(&pooled_paths).filter(|(_, p)| !p.rounds.is_empty()) {
        let pool = x.storage_workers;
        rows.push(row(pooled_path));
        let which = if pool == default_pool {
            format!("the node's own pool ({pool} connections for {threads} clients, as `ensemble bench` and the other figures run a node; checked)")
        } else {
            format!("a pool of {pool} connections for {threads} clients (--storage-workers; the node's default, which `ensemble bench` and the other figures run, is {default_pool}; checked)")
        };
        lifted += &format!(
            "the same with {which}: it adds {}; run again after a serialization failure, per 1000 operations: {:.1}\n",
            adds_to(pooled_path, &d, MEAN),
            pooled_path.retries_per_1000(),
        );
    }
    let mut measured = vec![&d, &dp, &b, &strict, &ssi, &r, &p, &own_pool_path, &embedded_path, &on_loop_path, &side_path];
    measured.extend(&pooled_paths);
    let mut where_cpu = cpu_table(&measured);
    let default_node = if own_pool_path.rounds.is_empty() { &r } else { &own_pool_path };
    where_cpu += &machine_time_line(&format!("the node as `ensemble bench` runs it ({})", default_node.name.trim_start_matches("... ")), default_node, &d);
    where_cpu += &machine_time_line("the same node in the clients' process (`--embedded`)", &embedded_path, &d);
    where_cpu += &machine_time_line("the same with its clients on its loop (`--embedded --clients-on-loop`; their driver's time is in the node loop's column)", &on_loop_path, &d);
    // What the node's writers wait for in its serial lane, one group after another.
    let flushes = match &server {
        Some(f) => {
            let (unflushed, lane) = match f.write_unflushed_us {
                Some(u) => (
                    format!(", {u:.1} us with synchronous_commit off: the commit's flush about {:.1} us", f.write_us - u),
                    format!(
                        ";\n  at the flush timed above, that node's serial lane waits about {:.0} us per operation for its groups' flushes, one after another",
                        default_node.flushes_per_op() * (f.write_us - u)
                    ),
                ),
                None => (String::new(), String::new()),
            };
            let how = match e.backend.kind {
                ensemble_bench::BackendKind::Postgres => "a group of writers on its serial lane shares one",
                _ => "its writers take the writer lock last and each commits alone, with its commit's mark, a write even where its body changed nothing",
            };
            format!(
                "this server, timed in this run on one session, statement after statement: a round trip (SELECT 1) {:.1} us, a committed one-row UPDATE {:.1} us{unflushed}\ncommits that waited for the server's log flush, per operation: directly {:.3}, Ensemble's transactions without the node {:.3}, through the node as `ensemble bench` runs it {:.3} ({how}){lane}\n",
                f.round_trip_us,
                f.write_us,
                d.flushes_per_op(),
                b.flushes_per_op(),
                default_node.flushes_per_op(),
            )
        }
        None => String::new(),
    };
    // The split takes Ensemble's transactions without the node for the node's work in the
    // database; where writers queue on PostgreSQL (more than one client), the node does less
    // there than they do: its writers wait in its serial lane and share a COMMIT
    // (`Storage::run_batch`), where without it each waits for the writer lock in a session of
    // its own and commits alone. At one client nothing queues, and a hop below zero is noise.
    let hop_below_zero = if r.mean_ms() < b.mean_ms() && threads > 1 && e.backend.kind == ensemble_bench::BackendKind::Postgres {
        " (below zero: without the node each writer waits for the writer lock in its own session and commits alone; the node's serial lane\n  queues them in the node and lets those queued share one COMMIT, so the split overstates the bookkeeping and understates the hop)"
    } else {
        ""
    };
    // Where the command was pinned (--cpus, taskset): the clients and every node with it.
    let narrowed = crate::cpus::narrowed();
    let pinned = if narrowed.is_empty() { String::new() } else { format!(" (they and the nodes on core(s) {} only)", crate::cpus::CoreList::display(&narrowed)) };
    Ok(format!(
        "Middleware overhead: {} on {db_name}, {threads} closed-loop clients{pinned}, each path {measure_s} s in {rounds} rounds of {round_s} s, the paths in turn in each round; the node a connection per client unless the row says\n\n{}\nthroughput ratio (Ensemble / direct): {:.2}\nmean latency ratio (Ensemble / direct): {:.2} (Ensemble adds {:.0} % to the direct path's mean; round by round {})\n{against_pipelined}{as_run}{lifted}where the added mean goes: the bookkeeping in the database {:.3} ms, the hop through the node {:.3} ms{hop_below_zero}\nthis machine, timed in this run: a thread-to-thread round trip over a channel {:.1} us, a loopback TCP round trip {:.1} us;\n  the hop is one TCP round trip and two hand-offs between threads (the node's loop to a storage worker and back; the\n  client's and the node's i/o run on their loops' threads): {:.3} ms at least\nrun again after the server made them victims, per 1000 operations: directly {:.1}, Ensemble's transactions {:.1}, through the node {:.1}\n{flushes}authentication (authenticated / plain wire): throughput {:.3}, mean latency {:.3}\n{where_cpu}checks of the runs through the node: {}",
        workload_name(&e.workload),
        render(&rows),
        r.ops_per_s() / d.ops_per_s(),
        r.mean_ms() / d.mean_ms(),
        (r.mean_ms() / d.mean_ms() - 1.0) * 100.0,
        ratio_spread(&r, &d),
        b.mean_ms() - d.mean_ms(),
        r.mean_ms() - b.mean_ms(),
        handoff_us,
        tcp_us,
        (handoff_us + tcp_us) / 1e3,
        d.retries_per_1000(),
        b.retries_per_1000(),
        r.retries_per_1000(),
        r.ops_per_s() / p.ops_per_s(),
        r.mean_ms() / p.mean_ms(),
        checks.join("; ")
    ))
}

/// The default node's machine time per operation (busy + idle) against the direct path's: where
/// the direct path keeps every core busy (four clients on two cores), a closed loop's latency is
/// the machine time its operations take, so their ratio is what the node adds; then what of it
/// the hop's CPU takes (the client driver and the node's loop, their kernel time apart), beside
/// the 20 % the goal allows. Empty where either was not measured.
fn machine_time_line(what: &str, node: &Path, direct: &Path) -> String {
    let (n, d) = (&node.cpu, &direct.cpu);
    if !n.measured() || !d.measured() {
        return String::new();
    }
    let hop = n.us(Component::Clients) + n.us(Component::NodeLoop);
    let hop_kernel = n.kernel_us(Component::Clients) + n.kernel_us(Component::NodeLoop);
    format!(
        "{what}, per operation: machine time (busy + idle) {:.0} us against the direct path's {:.0} ({:.2} times);\n  the hop, the client driver and the node's loop, {:.0} us of CPU, {:.0} of it in the kernel; 20 % of the direct path's machine time is {:.0} us\n",
        n.machine_us(),
        d.machine_us(),
        n.machine_us() / d.machine_us(),
        hop,
        hop_kernel,
        0.2 * d.machine_us(),
    )
}

/// Where each path's CPU time went, per operation, and how often each component's threads were
/// switched out: the profile of the windows (`crate::cpu_use`). Empty where it was not measured.
fn cpu_table(paths: &[&Path]) -> String {
    const SWITCHED: [Component; 4] = [Component::Server, Component::Clients, Component::NodeLoop, Component::NodeStorage];
    let mut header = vec!["path".to_string()];
    header.extend(Component::ALL.iter().map(|c| c.name().to_string()));
    header.extend(["busy".to_string(), "idle".to_string()]);
    header.extend(SWITCHED.iter().map(|c| format!("switches: {}", c.name())));
    let mut rows = vec![header];
    for (name, cpu) in paths.iter().map(|p| (&p.name, &p.cpu)).filter(|(_, c)| c.measured()) {
        let mut row = vec![name.clone()];
        row.extend(Component::ALL.iter().map(|&c| format!("{:.0}", cpu.us(c))));
        row.push(format!("{:.0}", cpu.busy_us()));
        row.push(format!("{:.0}", cpu.idle_us()));
        for c in SWITCHED {
            let (v, i) = cpu.switches(c);
            row.push(format!("{v:.1}+{i:.1}"));
        }
        rows.push(row);
    }
    if rows.len() == 1 {
        return String::new();
    }
    let mut header = vec!["path".to_string()];
    header.extend(Component::ALL.iter().map(|c| c.name().to_string()));
    header.push("busy".to_string());
    let mut kernel = vec![header];
    for (name, cpu) in paths.iter().map(|p| (&p.name, &p.cpu)).filter(|(_, c)| c.measured()) {
        let mut row = vec![name.clone()];
        row.extend(Component::ALL.iter().map(|&c| format!("{:.0}", cpu.kernel_us(c))));
        row.push(format!("{:.0}", cpu.kernel_busy_us()));
        kernel.push(row);
    }
    format!(
        "where the CPU time goes, in microseconds per operation over every round's window (all the machine's cores; from /proc): the server's processes, this process (the\n  clients: on the direct paths with their database client library, through the node its client driver), the node's storage workers and the rest of its threads\n  (its loop with all its socket i/o), anything else, and idle; then each one's threads' switches per operation, voluntary+involuntary:\n{}\n\
         of which in the kernel, working for each one's threads (their system time: system calls, with the loopback's delivery to the receiving socket that a send runs,\n  and page faults), in microseconds per operation:\n{}\n",
        render(&rows),
        render(&kernel)
    )
}
