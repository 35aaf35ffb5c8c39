//! The Conveyor Belt (and its centralized and read-only baselines) as a [`Harness`]: one
//! instance per machine at the topology's sites, each with its own database (SQLite, or a
//! database on a PostgreSQL or MariaDB server: [`InstanceStorage`]), clients of the SQL
//! applications, and the replay check.
//!
//! The dependency-graph check below needs SQLite's row probes; on a server backend a run is
//! checked by replay alone, and its summary says so.
//!
//! With `Experiment::record_access`, and when the run is checked or its history written, every
//! database records row accesses (`SqliteStorage::set_recording`): each reply carries what its
//! transaction read (with the writer of each version) and wrote, and each database keeps its
//! install order. [`history`] turns them into the dependency-graph checker's history, and the
//! check runs that checker (SER) beside the replay. The history has no sessions: the belt
//! promises serializability, not session order (a client's next request may run at an instance
//! that has not yet applied its previous global). Rows are observed one by one: predicate reads
//! (phantoms) and rows read inside subqueries are not in the history.

use crate::experiment::{BackendKind, Experiment, System};
use crate::harness::{Classified, Harness, RunOutput, StorageFactory, Verdict};
use ensemble_app::{Application, ClientCtx, ClosedLoopClient, DataConfig, Dataset, ExecRole, InstanceId, PartitionPlan, StorageJob};
use ensemble_belt::{Belt, BeltConfig, BeltEvidence, ConveyorBelt};
use ensemble_core::{AbortCause, Client, ClientId, Completion, CompletionResult, Deployment, Outcome, Process, ProcessId, Time};
use ensemble_history::{Criterion, History, Transaction};
use ensemble_check::{InstanceState, ReplayOptions};
use ensemble_core::{Rows, Storage};
use ensemble_server::{admin, ServerStorage, Translated};
use ensemble_sqlite::{Installed, SqliteStorage};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The application and its generated data, made once per run rather than once per instance.
type Loaded = (String, u32, u64, Arc<Application>, Arc<Dataset>);

#[derive(Default)]
pub struct BeltHarness {
    loaded: Mutex<Option<Loaded>>,
    /// The application in each server dialect, translated once.
    translated: Mutex<Vec<(&'static str, ensemble_server::Engine, Arc<Translated>)>>,
}

/// An instance's database, on whichever backend the experiment chose.
pub enum InstanceStorage {
    Sqlite(SqliteStorage),
    Server(Box<ServerStorage>),
}

impl Storage for InstanceStorage {
    type Job = ensemble_app::StorageJob;
    type Result = ensemble_app::StorageResult;
    fn run(&mut self, job: &Self::Job) -> Self::Result {
        match self {
            InstanceStorage::Sqlite(s) => s.run(job),
            InstanceStorage::Server(s) => s.run(job),
        }
    }
    fn run_batch(&mut self, jobs: &[Self::Job]) -> Vec<Self::Result> {
        match self {
            InstanceStorage::Sqlite(s) => s.run_batch(jobs),
            InstanceStorage::Server(s) => s.run_batch(jobs),
        }
    }
    fn idle(&mut self) {
        match self {
            InstanceStorage::Sqlite(s) => s.idle(),
            InstanceStorage::Server(s) => s.idle(),
        }
    }
    fn tally(&self) -> Vec<(&'static str, u64)> {
        match self {
            InstanceStorage::Sqlite(s) => s.tally(),
            InstanceStorage::Server(s) => s.tally(),
        }
    }
}

impl InstanceState for InstanceStorage {
    fn counters(&mut self) -> Result<(u64, u64), String> {
        match self {
            InstanceStorage::Sqlite(s) => InstanceState::counters(s),
            InstanceStorage::Server(s) => s.counters().map_err(|e| e.to_string()),
        }
    }
    fn dump(&mut self, table: &str) -> Result<Rows, String> {
        match self {
            InstanceStorage::Sqlite(s) => InstanceState::dump(s, table),
            InstanceStorage::Server(s) => s.dump(table).map_err(|e| e.to_string()),
        }
    }
}

impl InstanceStorage {
    /// The SQLite database, when the backend is SQLite.
    pub fn sqlite(&self) -> Option<&SqliteStorage> {
        match self {
            InstanceStorage::Sqlite(s) => Some(s),
            InstanceStorage::Server(_) => None,
        }
    }

    /// Every version the database installed, in order (SQLite in recording mode; empty otherwise).
    pub fn install_log(&self) -> anyhow::Result<Vec<Installed>> {
        match self {
            InstanceStorage::Sqlite(s) => Ok(s.install_log()?),
            InstanceStorage::Server(_) => Ok(Vec::new()),
        }
    }
}

impl BeltHarness {
    pub fn new() -> BeltHarness {
        BeltHarness::default()
    }

    pub(crate) fn loaded(&self, exp: &Experiment) -> anyhow::Result<(Arc<Application>, Arc<Dataset>)> {
        let mut cache = self.loaded.lock().expect("no panic while holding the lock");
        if let Some((w, scale, seed, app, data)) = cache.as_ref() {
            if w == exp.workload.app() && *scale == exp.scale && *seed == exp.seed {
                return Ok((app.clone(), data.clone()));
            }
        }
        let app = exp.application().map_err(anyhow::Error::msg)?;
        let data = Arc::new((app.generate)(DataConfig { scale: exp.scale, seed: exp.seed }));
        *cache = Some((exp.workload.app().to_string(), exp.scale, exp.seed, app.clone(), data.clone()));
        Ok((app, data))
    }

    fn new_database(&self, exp: &Experiment, storage: &SqliteStorage, id: InstanceId) -> anyhow::Result<()> {
        let (_, data) = self.loaded(exp)?;
        storage.create_schema()?;
        load_partition(storage, &data, &exp.plan, id, exp.instances)?;
        Ok(())
    }

    pub(crate) fn translated(&self, app: &Arc<Application>, engine: ensemble_server::Engine) -> anyhow::Result<Arc<Translated>> {
        let mut cache = self.translated.lock().expect("no panic while holding the lock");
        if let Some((_, _, t)) = cache.iter().find(|(a, e, _)| *a == app.name && *e == engine) {
            return Ok(t.clone());
        }
        let t = Arc::new(ensemble_server::translate(app, engine)?);
        cache.push((app.name, engine, t.clone()));
        Ok(t)
    }

    /// A connection to instance `id`'s database on the experiment's server (the run created the
    /// database: `crate::databases`).
    pub(crate) fn open_server(&self, exp: &Experiment, id: ProcessId) -> anyhow::Result<ServerStorage> {
        let engine = exp.backend.kind.engine().expect("a server backend");
        anyhow::ensure!(!exp.backend.run.is_empty(), "the run's {} databases were not created (no run tag)", engine.name());
        let (app, _) = self.loaded(exp)?;
        let url = admin::instance_url(engine, &exp.backend.server_urls(), &exp.backend.run, id.0).map_err(anyhow::Error::msg)?;
        let mut storage = ServerStorage::open(&url, app.clone(), self.translated(&app, engine)?, InstanceId::of(id))?;
        if exp.writers_side_by_side {
            // The one storage of this instance: no other writes beside it.
            storage.set_writers_side_by_side(Arc::default())?;
        }
        Ok(storage)
    }

    /// Instance `id`'s database on a server, created and loaded.
    pub(crate) fn new_server_database(&self, exp: &Experiment, id: ProcessId) -> anyhow::Result<ServerStorage> {
        let (_, data) = self.loaded(exp)?;
        let mut storage = self.open_server(exp, id)?;
        storage.create_schema()?;
        let (plan, n, i) = (&exp.plan, exp.instances, InstanceId::of(id));
        storage.load(&data, |table, cols, row| plan.holds_row(table, i, n, |c| cols.iter().position(|x| x == c).map(|p| &row[p])))?;
        Ok(storage)
    }
}

/// Whether the databases record row accesses: only when asked to, the records will be used, and
/// the backend is SQLite (whose probes observe the rows).
fn records(exp: &Experiment) -> bool {
    exp.record_access && (exp.check || exp.history_file.is_some()) && exp.backend.kind == crate::BackendKind::Sqlite
}

/// A run's history for the dependency-graph checker: every completed transaction with the rows it
/// read and wrote (`RowAccess`; body-aborted ones as aborted, refused ones left out), and each
/// instance's install log, by instance (`i0`, `i1`, …). Fails when a completion carries no
/// row accesses (the storage was not recording).
pub fn history(completions: &[Completion<BeltEvidence>], logs: &[Vec<Installed>]) -> anyhow::Result<History> {
    let mut h = History::new();
    for c in completions {
        let CompletionResult::Done(done) = &c.result else { continue }; // refused: nothing ran
        let Some(access) = &done.evidence.access else {
            anyhow::bail!("request {}#{} ({}) completed without its row accesses: the storage was not recording", c.request.client.0, c.request.seq, c.request.txn);
        };
        let mut t = if done.outcome.committed() { Transaction::committed(access.writer) } else { Transaction::aborted(access.writer) };
        for (row, writer) in &access.reads {
            t = t.read(row, *writer);
        }
        for row in &access.writes {
            t = t.write_key(row);
        }
        h.add_transaction(t);
    }
    for (i, log) in logs.iter().enumerate() {
        let replica = InstanceId(i as u32).to_string();
        for v in log {
            h.add_install(&replica, &v.row(), v.writer);
        }
    }
    Ok(h)
}

/// Each instance's install log, by instance.
fn install_logs(run: &RunOutput<'_, BeltHarness>) -> anyhow::Result<Vec<Vec<Installed>>> {
    run.storages.iter().map(|s| Ok(s.as_ref().map(InstanceStorage::install_log).transpose()?.unwrap_or_default())).collect()
}

fn db_path(dir: &Path, id: ProcessId) -> PathBuf {
    dir.join(format!("i{}.db", id.0))
}

/// Loads the rows instance `id` holds: all of every replicated table, its partitions of the others.
pub fn load_partition(storage: &SqliteStorage, data: &Dataset, plan: &PartitionPlan, id: InstanceId, n: u32) -> anyhow::Result<u64> {
    Ok(storage.load(data, |table, cols, row| plan.holds_row(table, id, n, |c| cols.iter().position(|x| x == c).map(|p| &row[p])))?)
}

/// Client `c` of an experiment on the SQL applications, and its site: the closed-loop client
/// that drives the workload and follows MAP replies, whatever the protocol's evidence.
pub(crate) fn sql_client<E: 'static>(exp: &Experiment, c: u32, stop_at: Time) -> (Box<dyn Client<E>>, usize) {
    let (site, ctx): (usize, ClientCtx) = exp.client_placement(c);
    let client = ClosedLoopClient::new(ClientId(c as u64), ctx, exp.workload.client(exp.scale), exp.seed, exp.think_time()).stop_at(stop_at);
    (Box::new(client), site)
}

/// A completion of a SQL transaction filed by its class (local, global, commutative) and abort
/// cause.
pub(crate) fn classify_sql<E>(c: &Completion<E>, class: impl Fn(&E) -> ensemble_app::OpClass) -> Classified {
    match &c.result {
        CompletionResult::Done(done) => Classified {
            class: class(&done.evidence).name(),
            abort: match &done.outcome {
                Outcome::Aborted { cause, .. } => Some(*cause),
                Outcome::Committed(_) => None,
            },
            phases: Vec::new(),
        },
        CompletionResult::Error(_) => Classified { class: "error", abort: None::<AbortCause>, phases: Vec::new() },
    }
}

impl Harness for BeltHarness {
    type P = Belt;
    type S = InstanceStorage;

    fn names(&self) -> &'static [&'static str] {
        &["ensemble", "centralized", "read-only"]
    }

    fn validate(&self, exp: &Experiment) -> Result<(), String> {
        System::parse(&exp.system)?;
        exp.validate_belt().map(|_| ())
    }

    fn deployment(&self, exp: &Experiment) -> Deployment {
        let sites: Vec<usize> = (0..exp.instances).map(|i| exp.topology.instance_site(i)).collect();
        Deployment::one_per_machine(&sites, exp.topology.cpu.cores, "instance")
    }

    fn process(&self, exp: &Experiment, id: ProcessId) -> anyhow::Result<Box<dyn Process<Belt>>> {
        let (app, _) = self.loaded(exp)?;
        let cfg = BeltConfig {
            instances: exp.instances,
            global_execution: exp.global_execution,
            idle_pause: Duration::from_micros(exp.idle_pause_us),
            costs: exp.topology.cpu.clone(),
        };
        Ok(Box::new(ConveyorBelt::new(InstanceId::of(id), cfg, app, Arc::new(exp.plan.clone()))))
    }

    fn sim_storage(&self, exp: &Experiment, id: ProcessId) -> anyhow::Result<Option<InstanceStorage>> {
        if exp.backend.kind.engine().is_some() {
            return Ok(Some(InstanceStorage::Server(Box::new(self.new_server_database(exp, id)?))));
        }
        let (app, _) = self.loaded(exp)?;
        let mut storage = SqliteStorage::open_in_memory(app, InstanceId::of(id))?;
        self.new_database(exp, &storage, InstanceId::of(id))?;
        storage.set_recording(records(exp))?;
        Ok(Some(InstanceStorage::Sqlite(storage)))
    }

    fn real_storage(&self, exp: &Experiment, id: ProcessId, dir: &Path) -> anyhow::Result<Option<StorageFactory<InstanceStorage>>> {
        if let Some(engine) = exp.backend.kind.engine() {
            drop(self.new_server_database(exp, id)?);
            let (app, _) = self.loaded(exp)?;
            let translated = self.translated(&app, engine)?;
            let url = admin::instance_url(engine, &exp.backend.server_urls(), &exp.backend.run, id.0).map_err(anyhow::Error::msg)?;
            // Shared by every worker's storage: all of the instance's writers.
            let side_by_side = exp.writers_side_by_side.then(|| Arc::new(ensemble_server::WritersInFlight::default()));
            let open = move |_worker: usize| {
                // A node cannot serve without its database: failing to reach it is fatal.
                let mut s = ServerStorage::open(&url, app.clone(), translated.clone(), InstanceId::of(id))
                    .unwrap_or_else(|e| panic!("instance {}: {e}", id.0));
                if let Some(writers) = &side_by_side {
                    s.set_writers_side_by_side(Arc::clone(writers)).unwrap_or_else(|e| panic!("instance {}: {e}", id.0));
                }
                InstanceStorage::Server(Box::new(s))
            };
            return Ok(Some(Arc::new(open)));
        }
        let (app, _) = self.loaded(exp)?;
        let path = db_path(dir, id);
        anyhow::ensure!(!path.exists(), "database {} exists already; a node starts from a fresh database", path.display());
        let mut first = SqliteStorage::open_file(&path, app.clone(), InstanceId::of(id))?;
        self.new_database(exp, &first, InstanceId::of(id))?;
        let record = records(exp);
        first.set_recording(record)?; // creates the version tables once, and checks the probes
        let open = move |_worker: usize| {
            // A node cannot serve without its database: failing to open it is fatal.
            let mut s = SqliteStorage::open_file(&path, app.clone(), InstanceId::of(id)).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
            s.set_recording(record).unwrap_or_else(|e| panic!("recording on {}: {e}", path.display()));
            InstanceStorage::Sqlite(s)
        };
        Ok(Some(Arc::new(open)))
    }

    /// On PostgreSQL, an instance's writers (globals, local operations that may write,
    /// state-update applications) run on a serial lane: they would queue on its writer lock
    /// anyway, and there they share a transaction and its commit (`ServerStorage::run_batch`);
    /// read-only locals run beside them on the other workers. Off with
    /// `Experiment::writer_groups` false. With `Experiment::writers_side_by_side` locals run
    /// on the other workers too, and the lane keeps globals and applications. On MariaDB local
    /// writers and applications take the writer lock last and run side by side on any worker,
    /// and globals queue on the lock itself (`ServerStorage`), so there is no lane; SQLite's
    /// writers keep queueing on `BEGIN IMMEDIATE`.
    fn serial_lane(&self, exp: &Experiment, _id: ProcessId) -> anyhow::Result<Option<ensemble_core::SerialLane<StorageJob>>> {
        if exp.backend.kind != BackendKind::Postgres || !exp.writer_groups {
            return Ok(None);
        }
        let (app, _) = self.loaded(exp)?;
        let side_by_side = exp.writers_side_by_side;
        Ok(Some(Arc::new(move |job: &StorageJob| match job {
            StorageJob::Execute { request, role } => *role == ExecRole::Global || !(side_by_side || app.is_read_only(&request.txn)),
            StorageJob::Apply { .. } => true,
        })))
    }

    /// On MariaDB the connection PostgreSQL's serial lane has joins the pool, so that an
    /// instance has as many connections to its database on either server.
    fn storage_workers(&self, exp: &Experiment) -> usize {
        exp.storage_workers as usize + usize::from(exp.backend.kind == BackendKind::Mariadb)
    }

    fn resume_storage(&self, exp: &Experiment, _id: ProcessId, _dir: &Path) -> anyhow::Result<Option<StorageFactory<InstanceStorage>>> {
        anyhow::bail!(
            "{} nodes keep protocol state in memory that their databases do not hold (the token, with the state updates not yet applied at every instance), so one cannot start again over its databases; of the systems here only 2pc's nodes recover from theirs",
            exp.system
        )
    }

    fn reopen_storage(&self, exp: &Experiment, id: ProcessId, dir: &Path) -> anyhow::Result<Option<InstanceStorage>> {
        if exp.backend.kind.engine().is_some() {
            return Ok(Some(InstanceStorage::Server(Box::new(self.open_server(exp, id)?))));
        }
        let (app, _) = self.loaded(exp)?;
        Ok(Some(InstanceStorage::Sqlite(SqliteStorage::open_file(&db_path(dir, id), app, InstanceId::of(id))?)))
    }

    fn client(&self, exp: &Experiment, c: u32, stop_at: Time) -> (Box<dyn Client<BeltEvidence>>, usize) {
        sql_client(exp, c, stop_at)
    }

    fn classify(&self, c: &Completion<BeltEvidence>) -> Classified {
        classify_sql(c, |e| e.class)
    }

    fn table_classes(&self) -> &'static [&'static str] {
        &["local", "global"]
    }

    /// The replay check; with recorded row accesses, also the dependency-graph checker (SER and
    /// replica agreement), whose verdict is the summary's last line.
    fn check(&self, exp: &Experiment, run: RunOutput<'_, Self>) -> anyhow::Result<Verdict> {
        let (app, data) = self.loaded(exp)?;
        // Before the replay takes the storages.
        let graph = if records(exp) { Some((history(run.history, &install_logs(&run)?)?, run.storages.iter().flatten().count())) } else { None };
        let mut storages: Vec<InstanceStorage> = run.storages.into_iter().flatten().collect();
        let mut refs: Vec<&mut dyn InstanceState> = storages.iter_mut().map(|s| s as &mut dyn InstanceState).collect();
        let server = exp.backend.kind.engine();
        let options = ReplayOptions { case_sensitive_like: server.is_some() };
        let mut report = ensemble_check::check(&app, &exp.plan, &data, run.history, &mut refs, options)?;
        report.violations.extend(run.failures.iter().map(|h| format!("belt halted at {h}")));
        let mut verdict = Verdict { passed: report.ok(), summary: report.summary() };
        if let Some((h, logs)) = graph {
            let r = ensemble_history::check(&h, Criterion::Ser);
            verdict.passed &= r.ok();
            verdict.summary += &format!("\ndependency graph, rows read and written, install logs of {logs} instance(s): {r}");
        } else if let (Some(engine), true) = (server, exp.record_access) {
            verdict.summary += &format!(
                "\nthe dependency-graph check needs SQLite's row probes: this {} run is checked by replay alone (with case-sensitive LIKE, as the server compares)",
                engine.name()
            );
        }
        Ok(verdict)
    }

    /// The history of a run that recorded row accesses (`Experiment::record_access`).
    fn history(&self, exp: &Experiment, run: &RunOutput<'_, Self>) -> anyhow::Result<Option<ensemble_history::History>> {
        anyhow::ensure!(exp.record_access, "the belt writes a history only when it records row accesses: on by default in `ensemble bench` (not with `--no-record-access`), with `--record-access` in `ensemble figure`");
        Ok(Some(history(run.history, &install_logs(run)?)?))
    }
}
