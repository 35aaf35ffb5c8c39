//! The Conveyor Belt (and its centralized and read-only baselines) as a [`Harness`]: one
//! instance per machine at the topology's sites, each with its own SQLite database, clients of
//! the SQL applications, and the replay check.
//!
//! With `Experiment::record_access`, and when the run is checked or its history written, every
//! database records row accesses (`SqliteStorage::set_recording`): each reply carries what its
//! transaction read (with the writer of each version) and wrote, and each database keeps its
//! install order. [`history`] turns them into the dependency-graph checker's history, and the
//! check runs that checker (SER) beside the replay. The history has no sessions: the belt
//! promises serializability, not session order (a client's next request may run at an instance
//! that has not yet applied its previous global). Rows are observed one by one: predicate reads
//! (phantoms) and rows read inside subqueries are not in the history.

use crate::experiment::{Experiment, System};
use crate::harness::{Classified, Harness, RunOutput, StorageFactory, Verdict};
use ensemble_app::{Application, ClientCtx, ClosedLoopClient, DataConfig, Dataset, InstanceId, PartitionPlan};
use ensemble_belt::{Belt, BeltConfig, BeltEvidence, ConveyorBelt};
use ensemble_core::{AbortCause, Client, ClientId, Completion, CompletionResult, Deployment, Outcome, Process, ProcessId, Time};
use ensemble_history::{Criterion, History, Transaction};
use ensemble_sqlite::{Installed, SqliteStorage};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The application and its generated data, made once per run rather than once per instance.
type Loaded = (String, u32, u64, Arc<Application>, Arc<Dataset>);

#[derive(Default)]
pub struct BeltHarness {
    loaded: Mutex<Option<Loaded>>,
}

impl BeltHarness {
    pub fn new() -> BeltHarness {
        BeltHarness::default()
    }

    fn loaded(&self, exp: &Experiment) -> anyhow::Result<(Arc<Application>, Arc<Dataset>)> {
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
}

/// Whether the databases record row accesses: only when asked to and the records will be used.
fn records(exp: &Experiment) -> bool {
    exp.record_access && (exp.check || exp.history_file.is_some())
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
    run.storages.iter().map(|s| Ok(s.as_ref().map(SqliteStorage::install_log).transpose()?.unwrap_or_default())).collect()
}

fn db_path(dir: &Path, id: ProcessId) -> PathBuf {
    dir.join(format!("i{}.db", id.0))
}

/// Loads the rows instance `id` holds: all of every replicated table, its partitions of the others.
pub fn load_partition(storage: &SqliteStorage, data: &Dataset, plan: &PartitionPlan, id: InstanceId, n: u32) -> anyhow::Result<u64> {
    Ok(storage.load(data, |table, cols, row| plan.holds_row(table, id, n, |c| cols.iter().position(|x| x == c).map(|p| &row[p])))?)
}

impl Harness for BeltHarness {
    type P = Belt;
    type S = SqliteStorage;

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

    fn sim_storage(&self, exp: &Experiment, id: ProcessId) -> anyhow::Result<Option<SqliteStorage>> {
        let (app, _) = self.loaded(exp)?;
        let mut storage = SqliteStorage::open_in_memory(app, InstanceId::of(id))?;
        self.new_database(exp, &storage, InstanceId::of(id))?;
        storage.set_recording(records(exp))?;
        Ok(Some(storage))
    }

    fn real_storage(&self, exp: &Experiment, id: ProcessId, dir: &Path) -> anyhow::Result<Option<StorageFactory<SqliteStorage>>> {
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
            s
        };
        Ok(Some(Arc::new(open)))
    }

    fn reopen_storage(&self, exp: &Experiment, id: ProcessId, dir: &Path) -> anyhow::Result<Option<SqliteStorage>> {
        let (app, _) = self.loaded(exp)?;
        Ok(Some(SqliteStorage::open_file(&db_path(dir, id), app, InstanceId::of(id))?))
    }

    fn client(&self, exp: &Experiment, c: u32, stop_at: Time) -> (Box<dyn Client<BeltEvidence>>, usize) {
        let (site, ctx): (usize, ClientCtx) = exp.client_placement(c);
        let think = exp.think_time();
        let client = ClosedLoopClient::new(ClientId(c as u64), ctx, exp.workload.client(exp.scale), exp.seed, think).stop_at(stop_at);
        (Box::new(client), site)
    }

    fn classify(&self, c: &Completion<BeltEvidence>) -> Classified {
        match &c.result {
            CompletionResult::Done(done) => Classified {
                class: done.evidence.class.name(),
                abort: match &done.outcome {
                    Outcome::Aborted { cause, .. } => Some(*cause),
                    Outcome::Committed(_) => None,
                },
                phases: Vec::new(),
            },
            CompletionResult::Error(_) => Classified { class: "error", abort: None::<AbortCause>, phases: Vec::new() },
        }
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
        let storages: Vec<SqliteStorage> = run.storages.into_iter().flatten().collect();
        let refs: Vec<&SqliteStorage> = storages.iter().collect();
        let mut report = ensemble_check::check(&app, &exp.plan, &data, run.history, &refs)?;
        report.violations.extend(run.failures.iter().map(|h| format!("belt halted at {h}")));
        let mut verdict = Verdict { passed: report.ok(), summary: report.summary() };
        if let Some((h, logs)) = graph {
            let r = ensemble_history::check(&h, Criterion::Ser);
            verdict.passed &= r.ok();
            verdict.summary += &format!("\ndependency graph, rows read and written, install logs of {logs} instance(s): {r}");
        }
        Ok(verdict)
    }

    /// The history of a run that recorded row accesses (`Experiment::record_access`).
    fn history(&self, exp: &Experiment, run: &RunOutput<'_, Self>) -> anyhow::Result<Option<ensemble_history::History>> {
        anyhow::ensure!(exp.record_access, "the belt writes a history only when it records row accesses: on by default in `ensemble bench` (not with `--no-record-access`), with `--record-access` in `ensemble figure`");
        Ok(Some(history(run.history, &install_logs(run)?)?))
    }
}
