use ensemble_app::apps::{micro, rubis, shop, tpcw};
use ensemble_app::{Application, ClientCtx, PartitionPlan, Workload};
use ensemble_belt::GlobalExecution;
use ensemble_core::topology::Topology;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The Conveyor Belt's systems: the belt with a partition plan, and the papers' two baselines,
/// which are the belt with a derived plan. Other protocols name their systems themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum System {
    /// The Conveyor Belt with the application's partition plan.
    Ensemble,
    /// One instance serves every client (the papers' "centralized" baseline).
    Centralized,
    /// Only read-only requests are local; every request that writes is global.
    ReadOnly,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Ensemble => "ensemble",
            System::Centralized => "centralized",
            System::ReadOnly => "read-only",
        }
    }
    pub fn parse(s: &str) -> Result<System, String> {
        match s {
            "ensemble" => Ok(System::Ensemble),
            "centralized" => Ok(System::Centralized),
            "read-only" => Ok(System::ReadOnly),
            other => Err(format!("`{other}` is not a Conveyor Belt system (ensemble, centralized, read-only)")),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    /// The deterministic simulator: virtual time, the topology's delays and CPU model.
    Sim,
    /// Node processes over TCP on this machine, the topology's delays emulated on loopback.
    Real,
}

/// What the clients ask for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "app", rename_all = "kebab-case")]
pub enum WorkloadSpec {
    Shop { browse_fraction: f64, max_lines: u32 },
    Micro { local_fraction: f64 },
    /// TPC-W's Shopping Mix; `write_share` steers it toward that share of writing transactions
    /// (the papers' 30 %); `None` is the reference mix.
    Tpcw { write_share: Option<f64> },
    /// RUBiS's bidding mix; `write_share` as for TPC-W (the papers' 15 %); `remote_items` is the
    /// share of item choices that ignore the preference for items of the client's home instance.
    Rubis { write_share: Option<f64>, remote_items: f64 },
    /// Key-value transactions (`ensemble_app::apps::kv`): `reads` keys read and one written, of
    /// 1000 × scale keys.
    Kv { reads: u32 },
    /// The DUR protocols' key-value workloads (`ensemble_kv::workload`): TPC-B as P-Store
    /// modified it, YCSB A, B and C, interactive walks.
    KeyValue { spec: ensemble_kv::workload::KvWorkloadSpec },
}

/// The RUBiS mix for a write share is found by a simulation of the transition table: compute
/// it once per run, not once per client.
fn rubis_mix(write_share: Option<f64>) -> std::sync::Arc<rubis::RubisMix> {
    use std::sync::{Arc, Mutex, OnceLock};
    /// Mixes computed so far, by the bits of their write share.
    type Mixes = Mutex<Vec<(Option<u64>, Arc<rubis::RubisMix>)>>;
    static MIXES: OnceLock<Mixes> = OnceLock::new();
    let key = write_share.map(f64::to_bits);
    let mut mixes = MIXES.get_or_init(Default::default).lock().expect("no panic while holding the lock");
    if let Some((_, m)) = mixes.iter().find(|(k, _)| *k == key) {
        return m.clone();
    }
    let mix = Arc::new(match write_share {
        Some(s) => rubis::RubisMix::for_write_share(s),
        None => rubis::RubisMix::bidding(),
    });
    mixes.push((key, mix.clone()));
    mix
}

impl WorkloadSpec {
    pub fn default_for(app: &str) -> Result<WorkloadSpec, String> {
        match app {
            "shop" => Ok(WorkloadSpec::Shop { browse_fraction: 0.5, max_lines: 4 }),
            "micro" => Ok(WorkloadSpec::Micro { local_fraction: 0.7 }),
            "tpcw" => Ok(WorkloadSpec::Tpcw { write_share: None }),
            "rubis" => Ok(WorkloadSpec::Rubis { write_share: None, remote_items: 0.0 }),
            "kv" => Ok(WorkloadSpec::Kv { reads: 2 }),
            other => match ensemble_kv::workload::KvWorkloadSpec::default_for(other) {
                Some(spec) => Ok(WorkloadSpec::KeyValue { spec }),
                None => Err(format!(
                    "no workload `{other}` (known: shop, micro, tpcw, rubis, kv, {})",
                    ensemble_kv::workload::KvKind::NAMES.join(", ")
                )),
            },
        }
    }

    pub fn app(&self) -> &'static str {
        match self {
            WorkloadSpec::Shop { .. } => "shop",
            WorkloadSpec::Micro { .. } => "micro",
            WorkloadSpec::Tpcw { .. } => "tpcw",
            WorkloadSpec::Rubis { .. } => "rubis",
            WorkloadSpec::Kv { .. } => "kv",
            WorkloadSpec::KeyValue { spec } => spec.name(),
        }
    }

    pub fn client(&self, scale: u32) -> Box<dyn Workload> {
        match self {
            WorkloadSpec::Shop { browse_fraction, max_lines } => Box::new(shop::ShopWorkload::new(scale, *browse_fraction, *max_lines)),
            WorkloadSpec::Micro { local_fraction } => {
                Box::new(micro::MicroWorkload { local_fraction: *local_fraction, parts: micro::PARTS_PER_SCALE * scale.max(1) as i64 })
            }
            WorkloadSpec::Tpcw { write_share } => {
                let w = tpcw::TpcwWorkload::new(scale);
                Box::new(match write_share {
                    Some(s) => w.with_write_share(*s),
                    None => w,
                })
            }
            WorkloadSpec::Rubis { write_share, remote_items } => {
                Box::new(rubis::RubisWorkload::new(scale, rubis_mix(*write_share), *remote_items))
            }
            WorkloadSpec::Kv { reads } => Box::new(ensemble_app::apps::kv::KvWorkload { keys: 1000 * u64::from(scale.max(1)), reads: *reads }),
            // The DUR harness builds its clients with their home partition; anyone else gets
            // the workload over one partition.
            WorkloadSpec::KeyValue { spec } => spec.client(&spec.key_space(1).expect("a validated workload has a key space"), 0),
        }
    }
}

/// The longest measurement window or warm-up, in seconds: a day.
pub const MAX_WINDOW_S: f64 = 86_400.0;
/// The longest mean think time, in ms: an hour.
pub const MAX_THINK_MS: f64 = 3_600_000.0;
/// The largest data scale: 1000 is a million shop items, 60,000 micro partitions, 2.9 million
/// TPC-W customers (above about 2,900 its minted ids collide); RUBiS stops at 64.
pub const MAX_SCALE: u32 = 1000;

/// The lower end of a range: inclusive or not.
#[derive(Clone, Copy)]
enum Bound {
    AtLeast(f64),
    Above(f64),
}

/// `value` of `field` is finite, within `min` and at most `max`; the error says which bound it misses.
fn in_range(field: &str, value: f64, min: Bound, max: f64) -> Result<(), String> {
    let v = shown(value);
    if !value.is_finite() {
        return Err(format!("{field} = {v} is not a finite number"));
    }
    match min {
        Bound::AtLeast(m) if value < m => return Err(format!("{field} = {v} must be >= {m}")),
        Bound::Above(m) if value <= m => return Err(format!("{field} = {v} must be > {m}")),
        _ => {}
    }
    if value > max {
        return Err(format!("{field} = {v} must be <= {max}"));
    }
    Ok(())
}

/// A number as a person writes it: `Display` gives 1e300 all its 301 digits.
fn shown(v: f64) -> String {
    let a = v.abs();
    if a.is_finite() && a != 0.0 && !(1e-6..1e16).contains(&a) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// Everything a run depends on. It is written, whole, into the run's result file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Experiment {
    pub label: String,
    /// The system under test, by the name its harness answers to (`--system`).
    pub system: String,
    pub runtime: Runtime,
    pub instances: u32,
    pub topology: Topology,
    /// Sites clients sit at; client `c` sits at `client_sites[c % len]` and talks to the closest
    /// instance, a site's clients taking equally close ones in turn (`client_placement`).
    pub client_sites: Vec<usize>,
    pub clients: u32,
    /// Mean of the exponential think time between a reply and the next request; 0: none.
    pub think_ms: f64,
    pub warmup_s: f64,
    pub measure_s: f64,
    pub seed: u64,
    pub scale: u32,
    pub workload: WorkloadSpec,
    /// Conveyor Belt settings (other systems ignore them): how the token holder runs its
    /// globals, see `BeltConfig::idle_pause`, and the partition plan.
    pub global_execution: GlobalExecution,
    pub idle_pause_us: u64,
    pub plan: PartitionPlan,
    /// Check the run as its system's harness does (the belt: replay in the proof's serial order;
    /// the dependency-graph checker where the protocol records histories).
    pub check: bool,
    /// Write the run's history here, in `ensemble check`'s JSON format.
    #[serde(skip)]
    pub history_file: Option<std::path::PathBuf>,
    /// Make the storage record the rows each transaction reads (with the writer of each version)
    /// and writes, and each replica's install order, so that the run's history can be checked by
    /// the dependency-graph checker (`check`) and written (`history_file`). The belt records SQL
    /// rows (`table/key`): rows of partitioned tables live, and are installed, at one instance,
    /// rows of replicated tables at every instance. It records only when the run is checked or
    /// its history written. It costs wall time (about 2.5 times the simulation's), not simulated
    /// time: a simulated run is the same with and without it, unless a global operation writes a
    /// row without changing it (its state update then carries an empty change to that row, so
    /// that every replica installs the version).
    #[serde(default)]
    pub record_access: bool,
    /// Real runs: speak the plain wire protocol, without a cluster secret (so without the
    /// handshake's proofs and the per-frame seal), which a host allows on loopback only. For
    /// measuring what authentication costs (`ensemble figure overhead`); never the default.
    #[serde(default)]
    pub plain_wire: bool,
    /// Real runs of one host: the host runs on a thread of the process that drives the clients,
    /// which reach it through a channel, not a socket: Ensemble linked into the application, as
    /// each of Gyro's instances is into the application server it serves.
    #[serde(default)]
    pub embedded: bool,
    /// With `embedded`: the clients run on the host's loop thread, as tasks of its runtime, not
    /// on a thread of their own: an application whose request handlers run on the event loop
    /// Ensemble runs on, so a request and its reply wake no other thread on their way.
    #[serde(default)]
    pub clients_on_loop: bool,
    /// Real runs: the cores the run's clients and nodes could run on (the bench's CPU
    /// affinity, which its nodes inherit), when fewer than the machine's: set by `--cpus` or
    /// from outside (`taskset`). Empty: every core. Recorded by the real runner. The database
    /// servers are not the bench's children, and `--cpus` does not move them
    /// (`scripts/split-cores.sh` does).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<u32>,
    /// The DUR family's deployment (other systems ignore it).
    #[serde(default)]
    pub dur: DurSettings,
    /// Where the SQL applications' instances keep their data (the belt and its baselines; other
    /// systems ignore it): SQLite by default, or a database per instance on a server.
    #[serde(default)]
    pub backend: Backend,
    /// Real runs: storage worker threads per process, each with its own database connection.
    #[serde(default = "default_storage_workers")]
    pub storage_workers: u32,
    /// Real runs of the belt on a server: an instance's writers run on a serial lane of their
    /// own, as groups that share a transaction (one more connection per instance). False: each
    /// writer is a transaction of its own on any worker, and they queue on the writer lock.
    #[serde(default = "yes")]
    pub writer_groups: bool,
    /// Real runs of the belt on PostgreSQL: an instance's locals run side by side under SSI,
    /// and the checker's search orders them (`ServerStorage::set_writers_side_by_side`); its
    /// serial lane keeps globals and state-update applications only.
    #[serde(default)]
    pub writers_side_by_side: bool,
    /// Real runs: hosts killed while the clients run and started again over their databases
    /// (`ensemble node --resume`), each after its clients' requests in flight were answered
    /// and while its clients' new ones wait; only for systems whose nodes recover from their
    /// databases (`Harness::restartable`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restarts: Vec<NodeRestart>,
}

/// A host killed (SIGKILL) `at_s` seconds after the clients start, and started again.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRestart {
    pub host: u32,
    pub at_s: f64,
}

impl NodeRestart {
    /// `HOST@SECONDS`, as `--restart-node` takes it: `1@2.5` kills host 1 2.5 s into the run.
    pub fn parse(s: &str) -> Result<NodeRestart, String> {
        let (host, at) = s.split_once('@').ok_or_else(|| format!("`{s}` is not HOST@SECONDS (say 1@2.5: host 1, 2.5 s after the clients start)"))?;
        let host = host.trim().parse().map_err(|e| format!("`{s}`: host `{host}` is not a host number: {e}"))?;
        let at_s = at.trim().parse().map_err(|e| format!("`{s}`: `{at}` is not a number of seconds: {e}"))?;
        Ok(NodeRestart { host, at_s })
    }
}

fn yes() -> bool {
    true
}

pub(crate) fn default_storage_workers() -> u32 {
    2
}

/// The DBMS under each Conveyor Belt instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The embedded default: one SQLite database per instance (in memory when simulated, a file
    /// in the run's directory when real).
    #[default]
    Sqlite,
    Postgres,
    Mariadb,
}

impl BackendKind {
    pub fn parse(s: &str) -> Result<BackendKind, String> {
        match s {
            "sqlite" => Ok(BackendKind::Sqlite),
            "postgres" | "postgresql" => Ok(BackendKind::Postgres),
            "mariadb" | "mysql" => Ok(BackendKind::Mariadb),
            other => Err(format!("unknown backend `{other}` (known: sqlite, postgres, mariadb)")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Sqlite => "sqlite",
            BackendKind::Postgres => "postgres",
            BackendKind::Mariadb => "mariadb",
        }
    }

    /// The server engine, `None` for SQLite.
    pub fn engine(self) -> Option<ensemble_server::Engine> {
        match self {
            BackendKind::Sqlite => None,
            BackendKind::Postgres => Some(ensemble_server::Engine::Postgres),
            BackendKind::Mariadb => Some(ensemble_server::Engine::Mariadb),
        }
    }
}

/// A run's backend: which DBMS, and for a server, where its databases live.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Backend {
    pub kind: BackendKind,
    /// Server URLs: one, on which every instance gets its database, or one per instance. Empty:
    /// the local server (`ensemble_server::admin::default_url`).
    #[serde(default)]
    pub urls: Vec<String>,
    /// The run's tag in database names (`ensemble_<run>_<i>`), set when the run's databases are
    /// created (`crate::databases`), so that the nodes of a real run find them.
    #[serde(default)]
    pub run: String,
    /// Keep the databases after the run instead of dropping them.
    #[serde(default)]
    pub keep: bool,
}

impl Backend {
    /// The server URLs, the local default when none were given.
    pub fn server_urls(&self) -> Vec<String> {
        match self.kind.engine() {
            Some(engine) if self.urls.is_empty() => vec![ensemble_server::admin::default_url(engine).to_string()],
            _ => self.urls.clone(),
        }
    }
}

/// How a DUR protocol is deployed: P-Store's groups, their size, how many groups replicate each
/// partition, and its certifier pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DurSettings {
    /// Groups; the key space has one partition per group.
    pub groups: u32,
    /// Processes per group (P-Store: 3).
    pub group_size: u32,
    /// Groups replicating each partition (P-Store Fig. 4's x; `groups` is full replication).
    pub replication: u32,
    /// Certifiers of a replica (P-Store §6's thread pool; 1 is sequential certification).
    pub certifiers: u32,
    /// An explicit placement, `partition=group,group; ...`, instead of `replication`.
    #[serde(default)]
    pub placement: Option<String>,
    /// Where each process keeps its versions durably (`<label>-store-<process>.sqlite`, SQLite,
    /// synchronous=FULL; `ensemble_gdur::harness::store_path`); `None`: in memory.
    #[serde(default)]
    pub store_dir: Option<std::path::PathBuf>,
}

impl Default for DurSettings {
    /// P-Store's Fig. 2 and 3(a) deployment: 4 groups of 3, each partition in one group, 100
    /// certifiers.
    fn default() -> Self {
        DurSettings { groups: 4, group_size: 3, replication: 1, certifiers: 100, placement: None, store_dir: None }
    }
}

/// The hand-written plans shipped in `plans/`.
pub fn shipped_plan(app: &str) -> Option<&'static str> {
    match app {
        "shop" => Some(include_str!("../../../plans/shop.toml")),
        "micro" => Some(include_str!("../../../plans/micro.toml")),
        "tpcw" => Some(include_str!("../../../plans/tpcw.toml")),
        "rubis" => Some(include_str!("../../../plans/rubis.toml")),
        _ => None,
    }
}

impl Experiment {
    /// An experiment with the defaults of the `ensemble bench` command.
    pub fn new(app_name: &str, system: System, instances: u32, topology: Topology) -> Result<Experiment, String> {
        let app = ensemble_app::application(app_name)?;
        let plan = Experiment::plan_for(&app, system, None)?;
        let instances = if system == System::Centralized { 1 } else { instances };
        let client_sites = (0..topology.sites.len()).collect();
        Ok(Experiment {
            label: format!("{}-{}-{}", app_name, system.name(), instances),
            system: system.name().to_string(),
            runtime: Runtime::Sim,
            instances,
            topology,
            client_sites,
            clients: 20,
            think_ms: 0.0,
            warmup_s: 5.0,
            measure_s: 20.0,
            seed: 1,
            scale: 1,
            workload: WorkloadSpec::default_for(app_name)?,
            global_execution: GlobalExecution::Parallel,
            idle_pause_us: 0,
            plan,
            check: true,
            history_file: None,
            record_access: false,
            plain_wire: false,
            embedded: false,
            clients_on_loop: false,
            cpus: Vec::new(),
            dur: DurSettings::default(),
            backend: Backend::default(),
            storage_workers: default_storage_workers(),
            writer_groups: true,
            writers_side_by_side: false,
            restarts: Vec::new(),
        })
    }

    /// An experiment of any system with the `ensemble bench` defaults: a Conveyor Belt system
    /// gets its plan, any other an empty one (it ignores it).
    pub fn for_system(workload: &str, system: &str, instances: u32, topology: Topology) -> Result<Experiment, String> {
        if let Ok(belt) = System::parse(system) {
            return Experiment::new(workload, belt, instances, topology);
        }
        if system == "2pc" {
            // The two-phase-commit baseline runs the application over Ensemble's own plan.
            let mut e = Experiment::new(workload, System::Ensemble, instances, topology)?;
            e.system = system.to_string();
            e.label = format!("{workload}-{system}-{instances}");
            return Ok(e);
        }
        let mut e = Experiment::new("shop", System::Ensemble, instances, topology)?;
        e.workload = WorkloadSpec::default_for(workload)?;
        e.system = system.to_string();
        e.label = format!("{workload}-{system}-{instances}");
        e.plan = PartitionPlan {
            application: workload.to_string(),
            fingerprint: String::new(),
            origin: format!("none: {system} does not partition operations"),
            max_instances: None,
            tables: Default::default(),
            transactions: Default::default(),
        };
        Ok(e)
    }

    /// The plan a system runs with: the shipped (or given) plan for Ensemble, a derived one for
    /// the baselines.
    pub fn plan_for(app: &Arc<Application>, system: System, plan_toml: Option<&str>) -> Result<PartitionPlan, String> {
        let plan = match system {
            System::Centralized => PartitionPlan::centralized(app),
            System::ReadOnly => PartitionPlan::read_only(app),
            System::Ensemble => {
                let text = match plan_toml {
                    Some(t) => t,
                    None => shipped_plan(app.name).ok_or_else(|| format!("no shipped plan for `{}`; pass --plan", app.name))?,
                };
                toml::from_str::<PartitionPlan>(text).map_err(|e| format!("plan: {e}"))?
            }
        };
        plan.validate(app).map_err(|e| e.to_string())?;
        Ok(plan)
    }

    pub fn application(&self) -> Result<Arc<Application>, String> {
        ensemble_app::application(self.workload.app())
    }

    /// Checks what every system needs before a run starts; the system's harness checks the rest.
    pub fn validate(&self) -> Result<(), String> {
        self.topology.validate().map_err(|e| e.to_string())?;
        if self.instances == 0 {
            return Err("at least one instance is needed".into());
        }
        if self.clients == 0 {
            return Err("at least one client is needed".into());
        }
        if self.clients_on_loop && !self.embedded {
            return Err("the clients run on the host's loop only when the host is embedded in their process (--embedded)".into());
        }
        if !self.restarts.is_empty() {
            if self.runtime != Runtime::Real || self.embedded {
                return Err("a node restarts only in a real run of node processes (--real, without --embedded)".into());
            }
            for r in &self.restarts {
                in_range("a restart's time", r.at_s, Bound::Above(0.0), self.warmup_s + self.measure_s)
                    .map_err(|e| format!("host {}: {e} (the clients run {} s)", r.host, self.warmup_s + self.measure_s))?;
            }
        }
        if let Some(bad) = self.client_sites.iter().find(|s| **s >= self.topology.sites.len()) {
            return Err(format!("client site {bad} is not a site of topology `{}`", self.topology.name));
        }
        if self.client_sites.is_empty() {
            return Err("clients need at least one site".into());
        }
        // Bounded so that every time converts to a `Duration` and adds to the virtual clock.
        in_range("measure_s", self.measure_s, Bound::Above(0.0), MAX_WINDOW_S)?;
        in_range("warmup_s", self.warmup_s, Bound::AtLeast(0.0), MAX_WINDOW_S)?;
        in_range("think_ms", self.think_ms, Bound::AtLeast(0.0), MAX_THINK_MS)?;
        if !(1..=MAX_SCALE).contains(&self.scale) {
            return Err(format!("scale = {} must be between 1 and {MAX_SCALE}", self.scale));
        }
        let fraction = |field: &str, v: f64| in_range(field, v, Bound::AtLeast(0.0), 1.0);
        match self.workload {
            WorkloadSpec::Shop { browse_fraction, .. } => fraction("workload.browse_fraction", browse_fraction)?,
            WorkloadSpec::Micro { local_fraction } => fraction("workload.local_fraction", local_fraction)?,
            WorkloadSpec::Tpcw { write_share } => write_share.map_or(Ok(()), |s| fraction("workload.write_share", s))?,
            WorkloadSpec::Rubis { write_share, remote_items } => {
                write_share.map_or(Ok(()), |s| fraction("workload.write_share", s))?;
                fraction("workload.remote_items", remote_items)?;
                // Larger scales would silently generate the largest one (see `MAX_SCALE` there).
                if self.scale > rubis::data::MAX_SCALE {
                    return Err(format!("scale = {} must be at most {} for rubis", self.scale, rubis::data::MAX_SCALE));
                }
            }
            WorkloadSpec::Kv { .. } => {}
            WorkloadSpec::KeyValue { ref spec } => spec.validate().map_err(|e| e.to_string())?,
        }
        Ok(())
    }

    /// What the belt needs on top: the application, and a plan valid for it and the instances.
    pub fn validate_belt(&self) -> Result<Arc<Application>, String> {
        self.validate()?;
        if let Some(engine) = self.backend.kind.engine() {
            if self.backend.urls.len() > 1 && self.backend.urls.len() != self.instances as usize {
                return Err(format!("{} server URLs for {} instances: give one, or one per instance", self.backend.urls.len(), self.instances));
            }
            if self.history_file.is_some() {
                return Err(format!(
                    "--history needs the rows each transaction read and wrote, which only the SQLite backend records; {} runs are checked by replay",
                    engine.name()
                ));
            }
        }
        let app = self.application()?;
        self.plan.validate(&app).map_err(|e| e.to_string())?;
        self.plan.check_instances(self.instances)?;
        Ok(app)
    }

    /// The clients' think time: exponential with mean `think_ms`, or none.
    pub fn think_time(&self) -> ensemble_app::ThinkTime {
        if self.think_ms > 0.0 {
            ensemble_app::ThinkTime::Exponential { mean: std::time::Duration::from_secs_f64(self.think_ms / 1e3) }
        } else {
            ensemble_app::ThinkTime::None
        }
    }

    /// Site and client context of client `c`: it sits at `client_sites[c % len]` and is served
    /// by one of the instances closest to that site, the site's clients taking equally close
    /// ones in turn (`Topology::instance_for_client`).
    pub fn client_placement(&self, c: u32) -> (usize, ClientCtx) {
        let sites = &self.client_sites;
        let slot = c as usize % sites.len();
        let site = sites[slot];
        let at_site = |slots: &[usize]| slots.iter().filter(|s| **s == site).count() as u32;
        // How many clients before `c` sit at its site: the sites list repeats every `len` clients.
        let nth = c / sites.len() as u32 * at_site(sites) + at_site(&sites[..slot]);
        let home = ensemble_app::InstanceId(self.topology.instance_for_client(site, self.instances, nth));
        (site, ClientCtx { client_index: c as u64, home, instances: self.instances })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gyro's LAN spreads its clients over every server: here, over every instance of the site.
    #[test]
    fn a_lan_s_clients_spread_over_its_instances() {
        let mut e = Experiment::new("shop", System::Ensemble, 3, Topology::lan()).unwrap();
        let homes = |e: &Experiment, n: u32| (0..n).map(|c| e.client_placement(c).1.home.0).collect::<Vec<_>>();
        assert_eq!(homes(&e, 7), [0, 1, 2, 0, 1, 2, 0]);
        // A site named twice in the list: its clients are still counted one by one.
        e.client_sites = vec![0, 0];
        assert_eq!(homes(&e, 6), [0, 1, 2, 0, 1, 2]);
        // One instance serves everyone.
        e.instances = 1;
        assert_eq!(homes(&e, 3), [0, 0, 0]);
    }

    /// Experiments also arrive as JSON files (`ensemble node --experiment`), past every flag check.
    #[test]
    fn validate_rejects_each_bad_number() {
        type Spoil = fn(&mut Experiment);
        let cases: &[(&str, Spoil, &str)] = &[
            ("shop", |e| e.measure_s = f64::NAN, "measure_s = NaN is not a finite number"),
            ("shop", |e| e.measure_s = 0.0, "measure_s = 0 must be > 0"),
            ("shop", |e| e.measure_s = 1e300, "measure_s = 1e300 must be <= 86400"),
            ("shop", |e| e.warmup_s = -1.0, "warmup_s = -1 must be >= 0"),
            ("shop", |e| e.think_ms = -5.0, "think_ms = -5 must be >= 0"),
            ("shop", |e| e.think_ms = f64::INFINITY, "think_ms = inf is not a finite number"),
            ("shop", |e| e.scale = 0, "scale = 0 must be between 1 and 1000"),
            ("shop", |e| e.workload = WorkloadSpec::Shop { browse_fraction: 2.0, max_lines: 4 }, "workload.browse_fraction = 2 must be <= 1"),
            ("micro", |e| e.workload = WorkloadSpec::Micro { local_fraction: -0.5 }, "workload.local_fraction = -0.5 must be >= 0"),
            ("tpcw", |e| e.workload = WorkloadSpec::Tpcw { write_share: Some(f64::NAN) }, "workload.write_share = NaN"),
            ("rubis", |e| e.workload = WorkloadSpec::Rubis { write_share: None, remote_items: 1.5 }, "workload.remote_items = 1.5 must be <= 1"),
            ("rubis", |e| e.scale = 65, "scale = 65 must be at most 64 for rubis"),
            ("shop", |e| e.topology.cpu.execute_us = -1000.0, "cpu.execute_us = -1000 must be >= 0"),
        ];
        for (app, spoil, expected) in cases {
            let mut e = Experiment::new(app, System::Ensemble, 3, Topology::wan5()).unwrap();
            e.validate().unwrap();
            spoil(&mut e);
            let err = e.validate().expect_err(expected);
            assert!(err.contains(expected), "expected `{expected}` in `{err}`");
        }
    }
}
