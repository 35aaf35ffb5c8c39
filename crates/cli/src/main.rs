//! `ensemble`: run, measure and check transactional protocols: applications scaled out with the
//! Conveyor Belt, and every protocol whose harness `systems` lists.

mod cpu_use;
mod cpus;
mod node;
mod overhead;
mod plots;
mod real;
mod systems;
mod xcast;
mod xcast_real;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use ensemble_bench::figures::{self, FigureOpts};
use ensemble_bench::{print_table, Backend, BackendKind, write_json, Experiment, Harness, Runtime, System, WorkloadSpec};
use systems::WithHarness;
use ensemble_belt::GlobalExecution;
use ensemble_server::ReadsAheadCount;
use ensemble_bench::experiment::{MAX_SCALE, MAX_THINK_MS, MAX_WINDOW_S};
use ensemble_core::topology::{Topology, MAX_CORES, MAX_MS};
use std::path::{Path, PathBuf};

/// The simulator allocates for every event and a node's loop for every frame; measured against
/// glibc's allocator, mimalloc ran the main job and the fault sweeps faster and took glibc's
/// tenth of a node loop's samples away (RESULTS.md, "mimalloc"). One binary runs the clients, the nodes and the
/// direct paths they are compared with, so all of them use it. It is built without transparent
/// huge pages (`no_thp`): with them, the 2PC baseline, whose nodes run a storage worker per
/// client, ran RUBiS at 9 instances and 40 clients on MariaDB at about 40 % of the throughput
/// it has under glibc's allocator or without them (RESULTS.md, "mimalloc's huge pages and the
/// 2PC baseline").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "ensemble", version, about = "Scale an OLTP application out over independent SQL database instances, serializably (Conveyor Belt).")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an application under one or more systems and print a comparison table.
    Bench(Box<BenchArgs>),
    /// Regenerate a table or figure of the papers.
    Figure(FigureArgs),
    /// Derive an application's partition plan from its declared SQL (read/write sets, conflicts,
    /// partitioning, classification) and report it like Table 1 of the papers.
    Analyze(AnalyzeArgs),
    /// Show a plan: the shipped one, a baseline's, or check a plan file against an application.
    Plan(PlanArgs),
    /// Print a topology preset as TOML (a starting point for a topology file).
    Topology { name: String },
    /// Run one host of a real deployment: the processes the deployment puts in one OS process
    /// (started by `bench --real`; not usually run by hand).
    Node(node::NodeArgs),
    /// Check a history file (JSON: transactions with what they read, from which writer, and
    /// wrote; optionally each replica's install order) against a consistency criterion.
    Check(CheckArgs),
    /// Group communication on real processes: a multicast load over TCP on this machine, with
    /// `kill -9` of a member of every group, checked.
    Xcast {
        #[command(subcommand)]
        command: xcast_real::XcastCommand,
    },
    /// Run many seeded simulations of each group-communication primitive, G-DUR system or the
    /// Conveyor Belt under random faults and check every one: no violation, and progress after
    /// the faults heal.
    Sweep(xcast::SweepArgs),
}

#[derive(Args)]
struct CheckArgs {
    /// The history, in the format of crates/history/FORMAT.md (what `bench --history` writes);
    /// with --delivery, a delivery log of a group-communication primitive (same file, "Delivery
    /// logs").
    #[arg(value_parser = existing_file)]
    history: PathBuf,
    /// ser, us, si, psi, nmsi or rc; comma-separated for several.
    #[arg(long, default_value = "ser", value_delimiter = ',')]
    criterion: Vec<String>,
    /// The file is a delivery log: check it against what this primitive promises
    /// (reliable-multicast, atomic-broadcast, atomic-multicast, genuine-atomic-multicast,
    /// pairwise-ordered-multicast, per-partition-streams) or against these properties,
    /// comma-separated (integrity, validity, agreement, prefix-order, group-order, acyclic-order,
    /// pairwise-order, fifo-order, broadcast, genuineness).
    #[arg(long, value_delimiter = ',', conflicts_with = "criterion")]
    delivery: Option<Vec<String>>,
}

#[derive(Args, Clone)]
struct BenchArgs {
    /// Workload: the applications shop, micro, tpcw, rubis; kv (key-value transactions); the
    /// DUR protocols' key-value workloads tpcb, ycsb-a, ycsb-b, ycsb-c, walk.
    #[arg(default_value = "shop")]
    app: String,
    /// Systems to compare, comma-separated: ensemble, centralized, read-only (the Conveyor Belt
    /// and its baselines), 2pc (the same application over the same plan, committed with the
    /// servers' prepared transactions; --real with --backend postgres or mariadb),
    /// primary-backup (a toy key-value protocol), p-store, p-store-ge,
    /// p-store-gdur, p-store-2pc, p-store-full (the G-DUR engine; workloads tpcb, ycsb-*, walk).
    #[arg(long, default_value = "ensemble,centralized", value_delimiter = ',')]
    system: Vec<String>,
    /// Instances for ensemble and read-only (centralized always has one); comma-separated for a
    /// sweep. 1 to 64 each.
    #[arg(long, default_value = "3", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=MAX_INSTANCES))]
    instances: Vec<u32>,
    /// Topology preset (lan, wan5, wan-normal50, p-store) or a topology TOML file (a name with a
    /// `/` or ending in `.toml` is always a file). Default: p-store for the G-DUR systems, wan5
    /// for the others.
    #[arg(long, value_parser = topology)]
    topology: Option<String>,
    /// Closed-loop clients, spread evenly over the client sites; 1 to 100000.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=MAX_CLIENTS))]
    clients: u32,
    /// Client sites (indices into the topology's sites), comma-separated; default: every site.
    /// Each client talks to the instance closest to its site; a site's clients take equally close
    /// instances in turn (in `lan`, every instance).
    #[arg(long, value_delimiter = ',')]
    client_sites: Option<Vec<usize>>,
    /// Mean think time between a reply and the next request, in ms (exponential); 0: none. At
    /// most 3600000 (an hour).
    #[arg(long, default_value_t = 0.0, value_parser = think_ms, allow_negative_numbers = true)]
    think_ms: f64,
    /// Warm-up before the measurement window, in seconds; 0 to 86400 (a day).
    #[arg(long, default_value_t = 5.0, value_parser = warmup_seconds, allow_negative_numbers = true)]
    warmup: f64,
    /// Measurement window, in seconds; more than 0, at most 86400 (a day).
    #[arg(long, default_value_t = 20.0, value_parser = measure_seconds, allow_negative_numbers = true)]
    measure: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Data scale (shop: 1000 items per unit); 1 to 1000 (rubis: to 64).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SCALE)))]
    scale: u32,
    /// micro: fraction of local operations, 0 to 1.
    #[arg(long, value_parser = fraction, allow_negative_numbers = true)]
    local_fraction: Option<f64>,
    /// shop: fraction of browsing requests, 0 to 1.
    #[arg(long, value_parser = fraction, allow_negative_numbers = true)]
    browse_fraction: Option<f64>,
    /// Run each token holder's global requests one after the other instead of in parallel.
    #[arg(long)]
    sequential: bool,
    /// Partition plan file for the ensemble system (default: the shipped plans/<app>.toml).
    #[arg(long, value_parser = existing_file)]
    plan: Option<PathBuf>,
    /// Simulator: CPU cores per instance; 1 to 1024.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CORES)))]
    cores: Option<u32>,
    /// Simulator: service time of one transaction, in ms; 0 to 3600000 (an hour).
    #[arg(long, value_parser = execute_ms, allow_negative_numbers = true)]
    execute_ms: Option<f64>,
    /// Run as real processes over TCP on this machine instead of in the simulator.
    #[arg(long)]
    real: bool,
    /// Write each run's history (what every transaction read and wrote) here, in the format
    /// `ensemble check` reads; with several runs, the run's label is added to the file name.
    /// Its directory must exist.
    #[arg(long, value_parser = file_to_write)]
    history: Option<PathBuf>,
    /// Conveyor Belt: do not record the rows each SQL transaction reads and writes, so the run is
    /// checked by replay alone, not also by the dependency-graph checker (about 2.5 times less
    /// wall time; simulated results are the same).
    #[arg(long)]
    no_record_access: bool,
    /// Real runs: storage worker threads (database connections) per process; 1 to 256. The
    /// default is 2, and one per client for 2pc (whose jobs can wait on each other's locks). A
    /// belt instance has one more: PostgreSQL's serial lane for writers, or on MariaDB (where
    /// local writers run side by side) one more worker in the pool.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_THREADS))]
    storage_workers: Option<u32>,
    /// Real runs of the Conveyor Belt on PostgreSQL: run each writer as a transaction of its own
    /// on any worker, queueing on the instance's writer lock, instead of in groups that share a
    /// transaction and its commit on a worker of their own (the default). On MariaDB local
    /// writers take the writer lock last and run side by side, never in groups.
    #[arg(long)]
    no_writer_groups: bool,
    /// Real runs of the Conveyor Belt on PostgreSQL: run an instance's locals side by side
    /// under SSI (each writer takes the writer lock in a mode the others share, each local reads
    /// its snapshot as it commits), and have the checker's search order them, instead of one
    /// local writer at a time.
    #[arg(long)]
    writers_side_by_side: bool,
    /// Real runs of one host (a centralized instance, or any system with one process): run the
    /// host on a thread of this process and have the clients reach it through a channel, not
    /// over TCP, as an application with Ensemble linked into it would (each of Gyro's instances
    /// runs inside the application server it serves).
    #[arg(long)]
    embedded: bool,
    /// With --embedded: run the clients on the host's loop thread, as tasks of its event loop,
    /// not on a thread of their own (an application whose request handlers run on the event
    /// loop Ensemble runs on): a request and its reply wake no other thread on their way.
    #[arg(long, requires = "embedded")]
    clients_on_loop: bool,
    /// Real runs of 2pc: kill host HOST (SIGKILL) SECONDS after the clients start, and start it
    /// again over its databases (`ensemble node --resume`). Its clients' new requests wait
    /// meanwhile, and it is killed once those it had were answered, so the run stays checked.
    /// Repeatable: `--restart-node 1@2.5 --restart-node 0@5`.
    #[arg(long = "restart-node", value_name = "HOST@SECONDS", value_parser = ensemble_bench::NodeRestart::parse)]
    restart_node: Vec<ensemble_bench::NodeRestart>,
    #[command(flatten)]
    cpus: CpusArg,
    #[command(flatten)]
    dur: DurArgs,
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    output: OutputArgs,
}

/// Where a real run's own processes run.
#[derive(Args, Clone, Default)]
struct CpusArg {
    /// Real runs: run this command, its clients and every node it starts on these cores alone
    /// (Linux CPU affinity, which the nodes inherit), e.g. `0`, `0,1` or `0-3`; the database
    /// servers stay where they are (scripts/split-cores.sh moves them). Default: every core. Each run's
    /// result file records the cores it could run on (`cpus`), whoever narrowed them.
    #[arg(long, value_name = "CORES", value_parser = cpus::CoreList::parse)]
    cpus: Option<cpus::CoreList>,
}

impl CpusArg {
    /// Pins this process; `real` says whether the command runs real processes. Call before any
    /// thread starts.
    fn apply(&self, real: bool) -> anyhow::Result<()> {
        let Some(cores) = &self.cpus else { return Ok(()) };
        anyhow::ensure!(real, "--cpus places real processes on this machine's cores: add --real (the simulator's cores are --cores)");
        cpus::pin_this_process(cores)?;
        eprintln!(
            "--cpus: this command, its clients and the nodes it starts run on core(s) {}; the database servers are not its children, and stay where they were",
            cpus::CoreList::display(&cores.0)
        );
        Ok(())
    }

    /// The cores this command's real processes may run on, when fewer than the machine's, and
    /// who narrowed them. Read from the process's own affinity, as every result file records it
    /// (`Experiment::cpus`), so that a run narrowed from outside (`taskset`) says so as well.
    fn narrowed(&self, real: bool) -> Option<(Vec<u32>, &'static str)> {
        let cores = if real { cpus::narrowed() } else { Vec::new() };
        (!cores.is_empty()).then_some((cores, if self.cpus.is_some() { "--cpus" } else { "narrowed before this command started" }))
    }

    /// What a run's label and a figure's file name add, so that runs placed apart by `--cpus`
    /// keep files apart: `-cpus0`, `-cpus0-1_3`. Only what `--cpus` asked: a run narrowed from
    /// outside keeps the names it would have had (its result file and summary still say the
    /// cores), so that a command, or the test suite, run under `taskset` finds its files.
    fn suffix(&self) -> String {
        self.cpus.as_ref().map(|c| format!("-cpus{}", cpus::CoreList::display(&c.0).replace(',', "_"))).unwrap_or_default()
    }

    /// What a command's summary line adds: the cores, when narrower than the machine's.
    fn said(&self, real: bool) -> String {
        self.narrowed(real).map(|(c, by)| format!(" on core(s) {} ({by})", cpus::CoreList::display(&c))).unwrap_or_default()
    }
}

/// The G-DUR systems' deployment and key-value workload knobs.
#[derive(Args, Clone, Default)]
struct DurArgs {
    /// G-DUR: groups (one partition each); 1 to 64. Default 4.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    groups: Option<u32>,
    /// G-DUR: processes per group; 1 to 9. Default 3.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=9))]
    group_size: Option<u32>,
    /// G-DUR: groups replicating each partition (P-Store Fig. 4's factor); the number of groups
    /// is full replication. Default 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    replication: Option<u32>,
    /// G-DUR: an explicit placement instead of --replication: `partition=group,group; ...`.
    #[arg(long)]
    placement: Option<String>,
    /// G-DUR: certifiers per replica (P-Store's thread pool; 1 is sequential certification);
    /// 1 to 1000. Default 100.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    certifiers: Option<u32>,
    /// G-DUR: keep each process's versions durably in DIR/<run>-store-<process>.sqlite (SQLite,
    /// every install one synchronous transaction) instead of in memory. DIR must exist and hold
    /// no store of an earlier run of the same name.
    #[arg(long, value_name = "DIR", value_parser = existing_dir)]
    store_dir: Option<PathBuf>,
    /// Key-value workloads: share of global transactions (P-Store's p), 0 to 1.
    #[arg(long, value_parser = fraction, allow_negative_numbers = true)]
    global: Option<f64>,
    /// Key-value workloads: share of read-only transactions, 0 to 1.
    #[arg(long, value_parser = fraction, allow_negative_numbers = true)]
    read_only: Option<f64>,
    /// Key-value workloads: multiplies the key space (TPC-B's 3,600 branches, YCSB's 10^5
    /// objects per partition); more than 0, at most 100.
    #[arg(long, value_parser = key_scale, allow_negative_numbers = true)]
    key_scale: Option<f64>,
    /// Key-value workloads: a workload file (TOML: `workload = "tpcb"` and any field of the
    /// workload to override); it replaces the positional workload.
    #[arg(long, value_parser = existing_file)]
    workload_file: Option<PathBuf>,
}

fn key_scale(s: &str) -> Result<f64, String> {
    number(s, "", Min::Above(0.0), 100.0, "a key scale is more than 0, at most 100")
}

impl DurArgs {
    fn any_dur(&self) -> bool {
        self.groups.is_some()
            || self.group_size.is_some()
            || self.replication.is_some()
            || self.placement.is_some()
            || self.certifiers.is_some()
            || self.store_dir.is_some()
    }

    fn any_workload(&self) -> bool {
        self.global.is_some() || self.read_only.is_some() || self.key_scale.is_some()
    }

    /// Applies the flags to `e`; the caller has checked that `e` is a G-DUR experiment or that
    /// no deployment flag is set.
    fn apply(&self, e: &mut Experiment) -> anyhow::Result<()> {
        let d = &mut e.dur;
        d.groups = self.groups.unwrap_or(d.groups);
        d.group_size = self.group_size.unwrap_or(d.group_size);
        d.replication = self.replication.unwrap_or(d.replication);
        d.certifiers = self.certifiers.unwrap_or(d.certifiers);
        if self.placement.is_some() {
            d.placement = self.placement.clone();
        }
        if let Some(dir) = &self.store_dir {
            // Absolute, so that nodes started elsewhere find it.
            d.store_dir = Some(dir.canonicalize().with_context(|| format!("--store-dir {}", dir.display()))?);
        }
        if let Some(path) = &self.workload_file {
            let text = std::fs::read_to_string(path).with_context(|| format!("--workload-file {}", path.display()))?;
            let spec = ensemble_kv::workload::KvWorkloadSpec::from_toml(&text).map_err(|err| anyhow::anyhow!("--workload-file {}: {err}", path.display()))?;
            e.workload = WorkloadSpec::KeyValue { spec };
        }
        match &mut e.workload {
            WorkloadSpec::KeyValue { spec } => {
                spec.global = self.global.unwrap_or(spec.global);
                spec.read_only = self.read_only.unwrap_or(spec.read_only);
                spec.scale = self.key_scale.unwrap_or(spec.scale);
                spec.validate().map_err(|err| anyhow::anyhow!("{err}"))?;
            }
            _ if self.any_workload() => bail!("--global, --read-only and --key-scale are for the key-value workloads (tpcb, ycsb-a, ycsb-b, ycsb-c, walk)"),
            _ => {}
        }
        Ok(())
    }
}

/// What every measuring command shares: checking, where results go, progress.
#[derive(Args, Clone)]
struct OutputArgs {
    /// Skip the serializability check.
    #[arg(long)]
    no_check: bool,
    /// Where result files go; created, and checked writable, before anything runs.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Hide the progress bar.
    #[arg(long)]
    quiet: bool,
}

/// Where the SQL applications' instances keep their data.
#[derive(Args, Clone, Default)]
struct BackendArgs {
    /// The DBMS under each instance: sqlite (embedded, the default), postgres or mariadb (a
    /// database per instance on the server, `ensemble_<run>_<i>`, created for the run and dropped
    /// after it). For the Conveyor Belt systems (ensemble, centralized, read-only).
    #[arg(long, default_value = "sqlite", value_parser = BackendKind::parse)]
    backend: BackendKind,
    /// Server URL(s), comma-separated: one, on which every instance gets its database, or one per
    /// instance (separate servers). Default: postgres://postgres@127.0.0.1:5432/test or
    /// mysql://root@127.0.0.1:3306/test. The user must be allowed to create databases.
    #[arg(long, value_delimiter = ',')]
    db_url: Vec<String>,
    /// Keep the run's server databases instead of dropping them at the end.
    #[arg(long)]
    keep: bool,
}

impl BackendArgs {
    fn backend(&self) -> anyhow::Result<Backend> {
        if self.backend == BackendKind::Sqlite && (!self.db_url.is_empty() || self.keep) {
            bail!("--db-url and --keep are for --backend postgres or mariadb");
        }
        Ok(Backend { kind: self.backend, urls: self.db_url.clone(), run: String::new(), keep: self.keep })
    }
}

#[derive(Args)]
struct FigureArgs {
    /// gyro-fig3, gyro-fig4, gyro-fig5 (Ensemble against 2PC, real, --backend mariadb|postgres), table3, wan-scaling, overhead, xcast-latency; P-Store (G-DUR engine): pstore-fig2, pstore-fig3a, pstore-fig3b, pstore-fig4, pstore-table1
    #[arg(value_parser = FIGURES)]
    name: String,
    /// Application, for table3, wan-scaling, gyro-fig5 and overhead.
    #[arg(long, default_value = "shop")]
    app: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Warm-up before each measurement window, in seconds; 0 to 86400 (a day).
    #[arg(long, default_value_t = 5.0, value_parser = warmup_seconds, allow_negative_numbers = true)]
    warmup: f64,
    /// Measurement window of each run, in seconds; more than 0, at most 86400 (a day).
    #[arg(long, default_value_t = 20.0, value_parser = measure_seconds, allow_negative_numbers = true)]
    measure: f64,
    /// CPU cores per instance in the simulator; 1 to 1024.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CORES)))]
    cores: u32,
    #[arg(long)]
    sequential: bool,
    /// Run every experiment of the figure as real processes over TCP instead of in the simulator
    /// (xcast-latency: adds throughput under load on real processes over loopback).
    #[arg(long)]
    real: bool,
    /// gyro-fig4, wan-scaling, gyro-fig5: client counts to step through, comma-separated. Each
    /// series stops once its mean latency passes 5 s (gyro-fig5: 2 s, Gyro's bound for peak
    /// throughput; default 1,10,40); a simulated series that has not got there by the last
    /// count goes on by Little's law (clients = 1.1 × 5 s × the last throughput, at most eight
    /// times the last count) for up to four more steps. Default: 10,25,50,100,200,400 for
    /// gyro-fig4, 10,40,160,640,2560,10240 for wan-scaling (10,40,160,640 with --real). Each
    /// count 1 to 100000.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=MAX_CLIENTS))]
    clients: Option<Vec<u32>>,
    /// Simulated figures: series run side by side on this many threads (results do not depend
    /// on it); 1 to 256. Default: the machine's cores.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_THREADS as u64))]
    jobs: Option<usize>,
    /// table3, wan-scaling on tpcw or rubis: steer the mix to this share of writing transactions,
    /// 0 to 1 (the papers: 0.3 for TPC-W, 0.15 for RUBiS); without it, the reference mix.
    #[arg(long, value_parser = fraction, allow_negative_numbers = true)]
    write_share: Option<f64>,
    /// Conveyor Belt: record the rows each SQL transaction reads and writes, so every run is
    /// also checked by the dependency-graph checker (about 2.5 times the wall time; the same
    /// results). Off by default: sweeps run thousands of clients.
    #[arg(long)]
    record_access: bool,
    /// gyro-fig5: instance counts, comma-separated; each 1 to 64. The default is the paper's
    /// range (13 instances on 13 machines there; all on this machine's 2 cores here).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,5,7,9,11,13", value_parser = clap::value_parser!(u32).range(1..=MAX_INSTANCES))]
    instances: Vec<u32>,
    /// overhead: closed-loop client threads; 1 to 256.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=MAX_THREADS))]
    threads: u32,
    /// overhead: each path's --measure is split into this many rounds, and every round runs the
    /// paths in turn, so that drift over the run falls on all of them; 1 to 100.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// overhead (PostgreSQL): the node's pools of storage connections to run side by side as
    /// rows of their own ("a pool of N"), comma-separated; default: the node's own default, as
    /// every other figure runs it; each 1 to 256.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=MAX_THREADS))]
    storage_workers: Vec<u32>,
    /// The Conveyor Belt's figures, real runs on PostgreSQL: run each instance's locals side by
    /// side under SSI (as `ensemble bench --writers-side-by-side`); the result file's name says
    /// so. Other systems (2pc) keep their own locking.
    #[arg(long)]
    writers_side_by_side: bool,
    #[command(flatten)]
    cpus: CpusArg,
    /// Run nothing: redraw the figure's plot from its result file (a `figure-*.json` this
    /// command wrote), as SVG and PNG beside it, and print the figure's table again (xcast-latency:
    /// the plot only).
    #[arg(long, value_parser = existing_file)]
    replot: Option<PathBuf>,
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args)]
struct AnalyzeArgs {
    /// Application: shop, micro, ...
    app: String,
    /// Workload mix: a TOML file of `txn = weight` (or `[weights]` and `[partition_by]` tables).
    #[arg(long, value_parser = existing_file)]
    weights: Option<PathBuf>,
    /// Explain every decision: read and write sets, conflicts, why each type and table is placed so.
    #[arg(long)]
    explain: bool,
    /// Write the plan file here (otherwise it is printed after the report); its directory must
    /// exist.
    #[arg(long, value_parser = file_to_write)]
    out: Option<PathBuf>,
    /// SQL dialect the statements are parsed in: sqlite, postgres or mysql.
    #[arg(long, default_value = "sqlite")]
    dialect: String,
}

#[derive(Args)]
struct PlanArgs {
    /// Application.
    app: String,
    /// ensemble (the shipped plan), centralized or read-only.
    #[arg(long, default_value = "ensemble")]
    system: String,
    /// Check this plan file against the application instead.
    #[arg(long, value_parser = existing_file)]
    check: Option<PathBuf>,
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(a) => bench(*a),
        Command::Figure(a) => figure(a),
        Command::Analyze(a) => analyze(a),
        Command::Plan(a) => plan(a),
        Command::Topology { name } => Topology::load(&name).map_err(Into::into).map(|t| print!("{}", toml::to_string(&t).expect("a topology serializes"))),
        Command::Node(a) => node::run(a),
        Command::Check(a) => check(a),
        Command::Xcast { command } => xcast_real::run(command),
        Command::Sweep(a) => xcast::sweep(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// The most clients a run may have: ten times the largest step of the wan-scaling figure.
const MAX_CLIENTS: i64 = 100_000;
/// The most instances: each is a database (in the simulator, in memory, all in this process);
/// the papers deploy at most five.
const MAX_INSTANCES: i64 = 64;
/// The most threads `figure --jobs` and `--threads` start.
const MAX_THREADS: i64 = 256;
const FIGURES: [&str; 12] =
    ["gyro-fig3", "gyro-fig4", "gyro-fig5", "table3", "wan-scaling", "overhead", "xcast-latency", "pstore-fig2", "pstore-fig3a", "pstore-fig3b", "pstore-fig4", "pstore-table1"];

/// The lower end of a flag's range.
enum Min {
    AtLeast(f64),
    Above(f64),
}

/// A flag's number, finite and in range. `f64::from_str` alone takes NaN, inf and 1e999 (inf),
/// on which a run panics, and huge numbers, on which it never ends. `says` states the range.
fn number(s: &str, unit: &str, min: Min, max: f64, says: &str) -> Result<f64, String> {
    let of_unit = if unit.is_empty() { String::new() } else { format!(" of {unit}") };
    let v: f64 = s.trim().parse().map_err(|_| format!("{s} is not a number{of_unit}"))?;
    if !v.is_finite() {
        return Err(format!("{s} is not a finite number{of_unit}"));
    }
    let low = match min {
        Min::AtLeast(m) => v < m,
        Min::Above(m) => v <= m,
    };
    if low || v > max {
        return Err(format!("{s} is out of range: {says}"));
    }
    Ok(v)
}

fn measure_seconds(s: &str) -> Result<f64, String> {
    number(s, "seconds", Min::Above(0.0), MAX_WINDOW_S, "a window is more than 0 and at most 86400 seconds (a day)")
}

fn warmup_seconds(s: &str) -> Result<f64, String> {
    number(s, "seconds", Min::AtLeast(0.0), MAX_WINDOW_S, "a warm-up is 0 to 86400 seconds (a day)")
}

fn think_ms(s: &str) -> Result<f64, String> {
    number(s, "ms", Min::AtLeast(0.0), MAX_THINK_MS, "a mean think time is 0 to 3600000 ms (an hour)")
}

fn execute_ms(s: &str) -> Result<f64, String> {
    number(s, "ms", Min::AtLeast(0.0), MAX_MS, "a service time is 0 to 3600000 ms (an hour)")
}

fn fraction(s: &str) -> Result<f64, String> {
    number(s, "", Min::AtLeast(0.0), 1.0, "a fraction is 0 to 1")
}

/// A preset or a topology file, loaded and validated once here so that a bad one is reported
/// with the flag, before anything runs.
fn topology(s: &str) -> Result<String, String> {
    Topology::load(s).map(|_| s.to_owned()).map_err(|e| e.to_string())
}

/// A file the command reads.
fn existing_file(s: &str) -> Result<PathBuf, String> {
    existing(s, Path::is_file, "a regular file", "file")
}

fn existing_dir(s: &str) -> Result<PathBuf, String> {
    existing(s, Path::is_dir, "a directory", "directory")
}

/// `s` if it names an existing `kind` (`is`), else why not.
fn existing(s: &str, is: fn(&Path) -> bool, a_kind: &str, kind: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if is(&p) {
        Ok(p)
    } else if p.exists() {
        Err(format!("not {a_kind}"))
    } else {
        Err(format!("no such {kind}"))
    }
}

/// A file the command writes, at the end: its directory must exist now.
fn file_to_write(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if p.is_dir() {
        return Err("a directory, not a file".into());
    }
    let dir = parent_dir(&p);
    if !dir.is_dir() {
        return Err(format!("directory {} does not exist", dir.display()));
    }
    Ok(p)
}

fn parent_dir(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Creates `dir` if need be and proves it writable with a probe file: results are written after
/// the runs, and a run must not end, after all its work, on a directory it cannot write.
fn writable_dir(flag: &str, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("{flag} {}: cannot create the directory", dir.display()))?;
    // Removed when dropped.
    tempfile::Builder::new()
        .prefix(".ensemble-probe")
        .tempfile_in(dir)
        .with_context(|| format!("{flag} {}: cannot write in the directory", dir.display()))?;
    Ok(())
}

fn experiments(a: &BenchArgs) -> anyhow::Result<Vec<Experiment>> {
    let dur_systems = a.system.iter().filter(|s| ensemble_gdur::harness::SYSTEMS.contains(&s.as_str())).count();
    if a.dur.any_dur() && dur_systems == 0 {
        bail!("--groups, --group-size, --replication, --placement, --certifiers and --store-dir are for the G-DUR systems ({})", ensemble_gdur::harness::SYSTEMS.join(", "));
    }
    let default_topology = if dur_systems == a.system.len() { "p-store" } else { "wan5" };
    let mut topology = Topology::load(a.topology.as_deref().unwrap_or(default_topology))?;
    if let Some(bad) = a.client_sites.iter().flatten().find(|s| **s >= topology.sites.len()) {
        bail!("--client-sites: {bad} is not a site of topology `{}`, whose sites are 0 to {}", topology.name, topology.sites.len() - 1);
    }
    if a.app == "rubis" && a.scale > ensemble_app::apps::rubis::data::MAX_SCALE {
        bail!("--scale {}: rubis generates at most scale {}", a.scale, ensemble_app::apps::rubis::data::MAX_SCALE);
    }
    if let Some(c) = a.cores {
        topology.cpu.cores = c;
    }
    if let Some(ms) = a.execute_ms {
        topology.cpu.execute_us = ms * 1e3;
    }
    let plan = match &a.plan {
        Some(path) => {
            if !a.system.iter().any(|s| System::parse(s).ok() == Some(System::Ensemble) || s == "2pc") {
                bail!("--plan {}: only the ensemble and 2pc systems run a plan, and --system names neither", path.display());
            }
            let app = ensemble_app::application(&a.app).map_err(anyhow::Error::msg)?;
            Some(ensemble_app::PartitionPlan::load(path, &app)?)
        }
        None => None,
    };
    let mut out = Vec::new();
    for system in &a.system {
        let belt = System::parse(system).ok();
        let counts: Vec<u32> = if belt == Some(System::Centralized) { vec![1] } else { a.instances.clone() };
        for n in counts {
            let mut e = Experiment::for_system(&a.app, system, n, topology.clone()).map_err(anyhow::Error::msg)?;
            if let (true, Some(plan)) = (belt == Some(System::Ensemble) || system == "2pc", &plan) {
                e.plan = plan.clone();
            }
            e.runtime = if a.real { Runtime::Real } else { Runtime::Sim };
            e.clients = a.clients;
            if system == "2pc" {
                e.storage_workers = ensemble_bench::systems::twopc::workers_for(e.clients);
            }
            if let Some(w) = a.storage_workers {
                anyhow::ensure!(a.real, "--storage-workers is for real runs: add --real");
                anyhow::ensure!(
                    system != "2pc" || w >= e.clients,
                    "--storage-workers {w}: 2pc needs one per client ({}), or its jobs can wait on decisions no worker is free to run",
                    e.clients
                );
                e.storage_workers = w;
            }
            if a.no_writer_groups {
                anyhow::ensure!(
                    a.real && belt.is_some() && a.backend.backend()?.kind == BackendKind::Postgres,
                    "--no-writer-groups is for real runs of the Conveyor Belt on PostgreSQL (add --real and --backend postgres): on MariaDB local writers take the writer lock last and run side by side, never in groups"
                );
                e.writer_groups = false;
            }
            if a.writers_side_by_side {
                anyhow::ensure!(
                    a.real && belt.is_some() && a.backend.backend()?.kind == BackendKind::Postgres,
                    "--writers-side-by-side is for real runs of the Conveyor Belt on PostgreSQL (add --real and --backend postgres): on MariaDB local writers take the writer lock last and run side by side already"
                );
                e.writers_side_by_side = true;
            }
            if a.embedded {
                anyhow::ensure!(a.real, "--embedded is for real runs: add --real");
                e.embedded = true;
                e.clients_on_loop = a.clients_on_loop;
            }
            if !a.restart_node.is_empty() {
                anyhow::ensure!(a.real && !a.embedded, "--restart-node kills and starts again a node process: it is for real runs (--real) without --embedded");
                e.restarts = a.restart_node.clone();
            }
            if let Some(sites) = &a.client_sites {
                e.client_sites = sites.clone();
            }
            e.think_ms = a.think_ms;
            e.warmup_s = a.warmup;
            e.measure_s = a.measure;
            e.seed = a.seed;
            e.scale = a.scale;
            e.check = !a.output.no_check;
            e.record_access = !a.no_record_access;
            if a.sequential {
                e.global_execution = GlobalExecution::Sequential;
            }
            match (&mut e.workload, a.local_fraction, a.browse_fraction) {
                (WorkloadSpec::Micro { local_fraction }, Some(f), _) => *local_fraction = f,
                (WorkloadSpec::Shop { browse_fraction, .. }, _, Some(f)) => *browse_fraction = f,
                (_, None, None) => {}
                _ => bail!("--local-fraction is for micro, --browse-fraction for shop"),
            }
            if a.real {
                // An idle token on loopback would otherwise spin a core.
                e.idle_pause_us = 500;
            }
            a.dur.apply(&mut e)?;
            let mut size = if ensemble_gdur::harness::SYSTEMS.contains(&system.as_str()) {
                // A G-DUR run's processes are its groups' members, whatever --instances says.
                e.instances = e.dur.groups * e.dur.group_size;
                format!("{}x{}", e.dur.groups, e.dur.group_size)
            } else {
                e.instances.to_string()
            };
            let backend = a.backend.backend()?;
            if backend.kind != BackendKind::Sqlite {
                if belt.is_none() && system != "2pc" {
                    bail!("--backend {} is for the Conveyor Belt systems (ensemble, centralized, read-only) and 2pc, not {system}", backend.kind.name());
                }
                size = format!("{size}-{}", backend.kind.name());
            }
            e.backend = backend;
            e.label = format!("{}-{}-{}{}{}", e.workload.app(), system, size, if a.real { "-real" } else { "" }, match (a.embedded, a.clients_on_loop) {
                (true, true) => "-embedded-on-loop",
                (true, false) => "-embedded",
                _ => "",
            });
            e.label.push_str(&a.cpus.suffix());
            systems::dispatch(system, Validate(&e))?.map_err(anyhow::Error::msg)?;
            out.push(e);
        }
    }
    writable_dir("--out", &a.output.out)?;
    if let Some(path) = &a.history {
        writable_dir("--history", parent_dir(path))?;
        let several = out.len() > 1;
        for e in &mut out {
            e.history_file = Some(if several { labelled(path, &e.label) } else { path.clone() });
        }
    }
    Ok(out)
}

/// `dir/stem.ext` becomes `dir/stem-label.ext`.
fn labelled(path: &std::path::Path, label: &str) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "history".into());
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{label}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{label}"),
    };
    path.with_file_name(name)
}

struct Validate<'a>(&'a Experiment);

impl WithHarness for Validate<'_> {
    type Out = Result<(), String>;
    fn with<H: Harness>(self, h: &H) -> Self::Out {
        self.0.validate()?;
        h.validate(self.0)?;
        if !self.0.restarts.is_empty() {
            h.restartable(self.0).map_err(|e| format!("--restart-node: {e}"))?;
        }
        Ok(())
    }
}

struct Run<'a> {
    exp: &'a Experiment,
    progress: bool,
}

impl WithHarness for Run<'_> {
    type Out = anyhow::Result<ensemble_bench::RunResult>;
    fn with<H: Harness>(self, h: &H) -> Self::Out {
        match self.exp.runtime {
            Runtime::Sim => ensemble_bench::sim_run::run_sim(h, self.exp, self.progress),
            Runtime::Real => real::run_real(h, self.exp, self.progress),
        }
    }
}

struct TableClasses;

impl WithHarness for TableClasses {
    type Out = &'static [&'static str];
    fn with<H: Harness>(self, h: &H) -> Self::Out {
        h.table_classes()
    }
}

/// The latency classes the systems of `exps` show in a table, in order of first appearance.
fn table_classes(exps: &[Experiment]) -> anyhow::Result<Vec<&'static str>> {
    let mut classes: Vec<&'static str> = Vec::new();
    for e in exps {
        for c in systems::dispatch(&e.system, TableClasses)? {
            if !classes.contains(c) {
                classes.push(c);
            }
        }
    }
    Ok(classes)
}

fn check(a: CheckArgs) -> anyhow::Result<()> {
    if let Some(names) = &a.delivery {
        return check_delivery(&a.history, names);
    }
    let criteria = a
        .criterion
        .iter()
        .map(|c| c.parse::<ensemble_history::Criterion>().map_err(|e| anyhow::anyhow!("--criterion: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let history = ensemble_history::History::load(&a.history)?;
    let mut failed = false;
    for c in criteria {
        let report = ensemble_history::check(&history, c);
        println!("{report}");
        failed |= !report.ok();
    }
    if failed {
        bail!("{} does not satisfy every criterion asked for", a.history.display());
    }
    Ok(())
}

fn check_delivery(path: &std::path::Path, names: &[String]) -> anyhow::Result<()> {
    use ensemble_history::delivery::{self, DeliveryLog, Primitive, Property};
    let log = DeliveryLog::load(path)?;
    let primitive = |n: &str| Primitive::ALL.into_iter().find(|p| p.name().replace(' ', "-").eq_ignore_ascii_case(n));
    let report = match names {
        [one] if primitive(one).is_some() => delivery::check_primitive(&log, primitive(one).expect("just found")),
        names => {
            let properties = names
                .iter()
                .map(|n| n.parse::<Property>().map_err(|e| anyhow::anyhow!("--delivery: {e}, or one primitive name")))
                .collect::<anyhow::Result<Vec<_>>>()?;
            delivery::check(&log, &properties)
        }
    };
    println!("{report}");
    if !report.ok() {
        bail!("{} does not have every property asked for", path.display());
    }
    Ok(())
}

fn bench(a: BenchArgs) -> anyhow::Result<()> {
    a.cpus.apply(a.real)?;
    let exps = experiments(&a)?;
    let mut results = Vec::new();
    let mut cut_short = None;
    for e in &exps {
        // A run that ended early hands back what it measured: written, shown, then the failure.
        let (r, name) = match run_anywhere(e, !a.output.quiet) {
            Ok(r) => (r, format!("{}-seed{}.json", e.label, e.seed)),
            Err(err) => match err.downcast::<real::PartialRun>() {
                Ok(p) => (*p.result, format!("{}-seed{}-partial.json", e.label, e.seed)),
                Err(err) => return Err(err),
            },
        };
        let path = a.output.out.join(name);
        write_json(&path, &r)?;
        eprintln!("wrote {}", path.display());
        if let Some(why) = &r.partial {
            cut_short = Some(format!("{}: {why} (what it measured until then is in {})", e.label, path.display()));
        }
        results.push(r);
        if cut_short.is_some() {
            break;
        }
    }
    let shown: Vec<_> = results
        .iter()
        .cloned()
        .map(|mut r| {
            if r.partial.is_some() {
                r.experiment.label.push_str(" (PARTIAL)");
            }
            r
        })
        .collect();
    println!("{}", print_table(&shown, &table_classes(&exps)?));
    let wall = match (a.real, a.embedded) {
        (true, true) if a.clients_on_loop => "the host on a thread of this process, its clients on its loop (--embedded --clients-on-loop)",
        (true, true) => "the host on a thread of this process, its clients beside it (--embedded)",
        (true, false) => "real processes on this machine",
        (false, _) => "simulated (virtual time)",
    };
    let wall = format!("{wall}{}", a.cpus.said(a.real));
    println!(
        "app {} | topology {} | {} clients at sites {:?} | window {} s after {} s warm-up | {wall} | latencies in ms",
        a.app, exps[0].topology.name, a.clients, exps[0].client_sites, a.measure, a.warmup
    );
    for r in &results {
        if let Some(c) = &r.check {
            println!("{}: {c}", r.experiment.label);
        }
        // A counter summed over the run's processes.
        let count = |key: &str| -> u64 { r.processes.iter().flat_map(|p| &p.counters).filter(|(k, _)| k == key).map(|(_, v)| v).sum() };
        if r.experiment.backend.kind != BackendKind::Sqlite {
            println!(
                "{}: {} transaction(s) run again after the {} server chose them as victims or dropped their connection (storage_retries)",
                r.experiment.label,
                count("storage_retries"),
                r.experiment.backend.kind.name()
            );
        }
        // PostgreSQL's storages: how well the plans of reads sent ahead foresaw the bodies.
        let (answered, thrown_away) = (count(ReadsAheadCount::ANSWERED), count(ReadsAheadCount::THROWN_AWAY));
        if answered + thrown_away > 0 {
            println!(
                "{}: {answered} read(s) sent ahead of the body's asking answered what it asked next, {thrown_away} thrown away ({}, {})",
                r.experiment.label,
                ReadsAheadCount::ANSWERED,
                ReadsAheadCount::THROWN_AWAY
            );
        }
        // A server's storages: the commits that waited for its log flush, the serial lane's
        // groups of writers one each.
        let flushed = count(ensemble_server::ServerStorage::FLUSHED_COMMITS);
        if flushed > 0 {
            println!(
                "{}: {flushed} commit(s) waited for the {} server's log flush, a group of writers one ({})",
                r.experiment.label,
                r.experiment.backend.kind.name(),
                ensemble_server::ServerStorage::FLUSHED_COMMITS
            );
        }
        // 2pc: a prepared branch asked for its decision only when a vote or a decision was
        // lost, or a node restarted; quiet when none was.
        if count("inquiries") > 0 {
            println!(
                "{}: {} inquiry(ies) by a prepared branch about its decision, {} answered from the coordinator's records (inquiries, outcomes_read)",
                r.experiment.label,
                count("inquiries"),
                count("outcomes_read")
            );
        }
        // 2pc: a coordinator stopped waiting for votes only when a prepare or a vote was
        // lost, or a participant stopped before voting.
        if count("votes_timed_out") > 0 {
            println!(
                "{}: {} distributed attempt(s) aborted because a vote had not come within the coordinator's wait (votes_timed_out)",
                r.experiment.label,
                count("votes_timed_out")
            );
        }
        // 2pc: votes a participant will never send, known once it said it started again.
        if count("votes_lost_to_restarts") > 0 {
            println!(
                "{}: {} distributed attempt(s) aborted at once because a participant started again before voting (votes_lost_to_restarts)",
                r.experiment.label,
                count("votes_lost_to_restarts")
            );
        }
        for (message, n) in &r.summary.error_kinds {
            println!("{}: {n} request(s) refused: {message}", r.experiment.label);
        }
        if let Some(why) = &r.partial {
            println!("{}: PARTIAL (measured {:.1} s of the {} s window), not checked: {why}", r.experiment.label, r.summary.window_s, a.measure);
        }
    }
    if let Some(why) = cut_short {
        bail!("{why}");
    }
    if results.iter().any(|r| r.check_passed == Some(false)) {
        bail!("a run failed its serializability check");
    }
    Ok(())
}

/// Runs an experiment of any system where its `runtime` says; real processes are this binary's
/// `node` command.
fn run_anywhere(e: &Experiment, progress: bool) -> anyhow::Result<ensemble_bench::RunResult> {
    systems::dispatch(&e.system, Run { exp: e, progress })?
}

fn figure(a: FigureArgs) -> anyhow::Result<()> {
    if let Some(file) = &a.replot {
        anyhow::ensure!(a.cpus.cpus.is_none(), "--cpus places the runs' processes, and --replot runs nothing");
        return plots::replot(&a.name, file);
    }
    // The overhead figure runs real processes whatever --real says.
    a.cpus.apply(a.real || a.name == "overhead")?;
    let o = FigureOpts {
        seed: a.seed,
        warmup_s: a.warmup,
        measure_s: a.measure,
        cores: a.cores,
        global_execution: if a.sequential { GlobalExecution::Sequential } else { GlobalExecution::Parallel },
        progress: !a.output.quiet,
        check: !a.output.no_check,
        record_access: a.record_access,
        runtime: if a.real { Runtime::Real } else { Runtime::Sim },
        run: run_anywhere,
        jobs: a.jobs.unwrap_or(FigureOpts::default().jobs),
        backend: a.backend.backend()?,
        writers_side_by_side: a.writers_side_by_side,
    };
    if o.backend.kind != BackendKind::Sqlite && !matches!(a.name.as_str(), "gyro-fig3" | "gyro-fig4" | "gyro-fig5" | "table3" | "wan-scaling" | "overhead") {
        bail!(
            "--backend {} is for the Conveyor Belt's figures (gyro-fig3, gyro-fig4, gyro-fig5, table3, wan-scaling, overhead); {} on a server is not built",
            o.backend.kind.name(),
            a.name
        );
    }
    if a.writers_side_by_side
        && !(a.real && o.backend.kind == BackendKind::Postgres && matches!(a.name.as_str(), "gyro-fig3" | "gyro-fig4" | "gyro-fig5" | "table3" | "wan-scaling"))
    {
        bail!(
            "--writers-side-by-side is for real runs of the Conveyor Belt's figures on PostgreSQL (gyro-fig3, gyro-fig4, gyro-fig5, table3, wan-scaling with --real and --backend postgres); overhead prices it in rows of its own"
        );
    }
    let clients = |default: &[u32]| a.clients.clone().unwrap_or_else(|| default.to_vec());
    let workload = match (a.app.as_str(), a.write_share) {
        (_, None) => None,
        ("tpcw", Some(s)) => Some(WorkloadSpec::Tpcw { write_share: Some(s) }),
        ("rubis", Some(s)) => Some(WorkloadSpec::Rubis { write_share: Some(s), remote_items: 0.0 }),
        (other, Some(_)) => bail!("--write-share is for tpcw and rubis, not {other}"),
    };
    if a.name == "gyro-fig5" && o.backend.kind.engine().is_none() {
        bail!("gyro-fig5 compares Ensemble with the 2pc baseline, which runs on a server: add --backend mariadb|postgres (and --real)");
    }
    if a.name == "gyro-fig5" && !a.real {
        bail!("gyro-fig5 compares real processes over real servers: add --real");
    }
    if matches!(a.name.as_str(), "table3" | "wan-scaling" | "gyro-fig5" | "overhead") {
        ensemble_app::application(&a.app).map_err(|e| anyhow::anyhow!("--app: {e}"))?;
    }
    if a.name != "overhead" {
        if !a.storage_workers.is_empty() {
            bail!("--storage-workers is for the overhead figure's pooled rows; {} runs every node with its default pool", a.name);
        }
        writable_dir("--out", &a.output.out)?;
    }
    let fig = match a.name.as_str() {
        "gyro-fig3" => figures::gyro_fig3(&o)?,
        "gyro-fig4" => figures::gyro_fig4(&o, &clients(&[10, 25, 50, 100, 200, 400]))?,
        "table3" => figures::table3(&a.app, &o, workload.as_ref())?,
        "gyro-fig5" => figures::gyro_fig5(&a.app, &o, &a.instances, &clients(&[1, 10, 40]))?,
        "wan-scaling" => {
            // Real clients are tasks on this machine's two cores: tens of thousands would measure
            // the machine, not the system.
            let steps: &[u32] = if a.real { &[10, 40, 160, 640] } else { &[10, 40, 160, 640, 2560, 10240] };
            figures::wan_scaling(&a.app, &o, &clients(steps), workload.as_ref())?
        }
        "overhead" => {
            if !a.storage_workers.is_empty() && o.backend.kind != BackendKind::Postgres {
                bail!("--storage-workers prices the node's pool with its locals side by side, which runs on PostgreSQL only: add --backend postgres");
            }
            let text = overhead::run(
                &overhead::Settings { app: &a.app, threads: a.threads, pools: &a.storage_workers, measure_s: a.measure, rounds: a.rounds, seed: a.seed },
                !a.output.quiet,
                o.backend.clone(),
            )?;
            println!("{text}");
            return Ok(());
        }
        "xcast-latency" => return xcast::latency_figure(a.seed, a.jobs, a.real, &a.output.out),
        "pstore-fig2" => ensemble_gdur::figures::fig2(&o)?,
        "pstore-fig3a" => ensemble_gdur::figures::fig3a(&o)?,
        "pstore-fig3b" => ensemble_gdur::figures::fig3b(&o)?,
        "pstore-fig4" => ensemble_gdur::figures::fig4(&o)?,
        "pstore-table1" => ensemble_gdur::figures::table1(&o)?,
        other => bail!("unknown figure `{other}` (known: {})", FIGURES.join(", ")),
    };
    let stem = match (a.name.as_str(), a.write_share) {
        ("table3" | "wan-scaling" | "gyro-fig5", None) => format!("{}-{}", a.name, a.app),
        ("table3" | "wan-scaling", Some(s)) => format!("{}-{}-writes{:.0}", a.name, a.app, s * 100.0),
        _ => a.name.clone(),
    };
    // A real run, or one on a server, must not overwrite the simulated SQLite figure's file.
    let stem = if o.backend.kind != BackendKind::Sqlite { format!("{stem}-{}", o.backend.kind.name()) } else { stem };
    let stem = if a.real { format!("{stem}-real") } else { stem };
    let stem = if a.writers_side_by_side { format!("{stem}-side-by-side") } else { stem };
    let stem = format!("{stem}{}", a.cpus.suffix());
    let path = a.output.out.join(format!("figure-{stem}-seed{}.json", a.seed));
    write_json(&path, &fig.runs)?;
    eprintln!("wrote {}", path.display());
    plots::write(&a.name, &fig.runs, &path.with_extension(""))?;
    println!("{}\n\n{}", fig.title, fig.table);
    if let Some(s) = a.write_share {
        println!("{}", plots::steered_line(s));
    }
    if a.name.starts_with("pstore") {
        println!("simulated: warm-up {} s, window {} s, seed {}, the p-store topology (4 cores per machine, 10 Mb/s per group)", a.warmup, a.measure, a.seed);
    } else if a.real {
        let side = if a.writers_side_by_side { ", the belt's locals side by side under SSI (--writers-side-by-side)" } else { "" };
        println!(
            "real processes on this machine{}: warm-up {} s (longer where a table says so), window {} s, seed {}, {:?} global execution{side}",
            a.cpus.said(true),
            a.warmup,
            a.measure,
            a.seed,
            o.global_execution
        );
    } else {
        println!("simulated: warm-up {} s (longer where a table says so), window {} s, seed {}, {} cores per instance, {:?} global execution", a.warmup, a.measure, a.seed, a.cores, o.global_execution);
    }
    if fig.runs.iter().any(|r| r.check_passed == Some(false)) {
        bail!("a run failed its serializability check");
    }
    Ok(())
}

fn analyze(a: AnalyzeArgs) -> anyhow::Result<()> {
    let dialect = a.dialect.parse().map_err(|e| anyhow::anyhow!("--dialect: {e}"))?;
    let cmd = ensemble_analyze::Command { app: a.app, weights: a.weights, explain: a.explain, out: a.out, dialect };
    print!("{}", ensemble_analyze::run(&cmd)?);
    Ok(())
}

fn plan(a: PlanArgs) -> anyhow::Result<()> {
    let app = ensemble_app::application(&a.app).map_err(anyhow::Error::msg)?;
    if let Some(path) = a.check {
        let plan = ensemble_app::PartitionPlan::load(&path, &app)?;
        println!("{}: a valid plan for `{}` ({} transactions, {} tables)", path.display(), app.name, plan.transactions.len(), plan.tables.len());
        return Ok(());
    }
    let system = System::parse(&a.system).map_err(anyhow::Error::msg)?;
    let plan = Experiment::plan_for(&app, system, None).map_err(anyhow::Error::msg)?;
    print!("{}", plan.to_toml());
    Ok(())
}
