//! The Conveyor Belt (and its centralized and read-only baselines) as a [`Harness`]: one
//! instance per machine at the topology's sites, each with its own SQLite database, clients of
//! the SQL applications, and the replay check.

use crate::experiment::{Experiment, System};
use crate::harness::{Classified, Harness, RunOutput, StorageFactory, Verdict};
use ensemble_app::{Application, ClientCtx, ClosedLoopClient, DataConfig, Dataset, InstanceId, PartitionPlan, ThinkTime};
use ensemble_belt::{Belt, BeltConfig, BeltEvidence, ConveyorBelt};
use ensemble_core::{AbortCause, Client, ClientId, Completion, CompletionResult, Deployment, Outcome, Process, ProcessId, Time};
use ensemble_sqlite::SqliteStorage;
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
        let storage = SqliteStorage::open_in_memory(app, InstanceId::of(id))?;
        self.new_database(exp, &storage, InstanceId::of(id))?;
        Ok(Some(storage))
    }

    fn real_storage(&self, exp: &Experiment, id: ProcessId, dir: &Path) -> anyhow::Result<Option<StorageFactory<SqliteStorage>>> {
        let (app, _) = self.loaded(exp)?;
        let path = db_path(dir, id);
        anyhow::ensure!(!path.exists(), "database {} exists already; a node starts from a fresh database", path.display());
        self.new_database(exp, &SqliteStorage::open_file(&path, app.clone(), InstanceId::of(id))?, InstanceId::of(id))?;
        let open = move |_worker: usize| {
            // A node cannot serve without its database: failing to open it is fatal.
            SqliteStorage::open_file(&path, app.clone(), InstanceId::of(id)).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()))
        };
        Ok(Some(Arc::new(open)))
    }

    fn reopen_storage(&self, exp: &Experiment, id: ProcessId, dir: &Path) -> anyhow::Result<Option<SqliteStorage>> {
        let (app, _) = self.loaded(exp)?;
        Ok(Some(SqliteStorage::open_file(&db_path(dir, id), app, InstanceId::of(id))?))
    }

    fn client(&self, exp: &Experiment, c: u32, stop_at: Time) -> (Box<dyn Client<BeltEvidence>>, usize) {
        let (site, ctx): (usize, ClientCtx) = exp.client_placement(c);
        let think = if exp.think_ms > 0.0 { ThinkTime::Exponential { mean: Duration::from_secs_f64(exp.think_ms / 1e3) } } else { ThinkTime::None };
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

    fn check(&self, exp: &Experiment, run: RunOutput<'_, Self>) -> anyhow::Result<Verdict> {
        let (app, data) = self.loaded(exp)?;
        let storages: Vec<SqliteStorage> = run.storages.into_iter().flatten().collect();
        let refs: Vec<&SqliteStorage> = storages.iter().collect();
        let mut report = ensemble_check::check(&app, &exp.plan, &data, run.history, &refs)?;
        report.violations.extend(run.failures.iter().map(|h| format!("belt halted at {h}")));
        Ok(Verdict { passed: report.ok(), summary: report.summary() })
    }

    fn history(&self, _exp: &Experiment, _run: &RunOutput<'_, Self>) -> anyhow::Result<Option<ensemble_history::History>> {
        Ok(None)
    }
}
