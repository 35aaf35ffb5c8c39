//! `ensemble`: run, measure and check transactional protocols: applications scaled out with the
//! Conveyor Belt, and every protocol whose harness `systems` lists.

mod node;
mod overhead;
mod real;
mod systems;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use ensemble_bench::figures::{self, FigureOpts};
use ensemble_bench::{print_table, write_json, Experiment, Harness, Runtime, System, WorkloadSpec};
use systems::WithHarness;
use ensemble_belt::GlobalExecution;
use ensemble_core::topology::Topology;
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "ensemble", version, about = "Scale an OLTP application out over independent SQL database instances, serializably (Conveyor Belt).")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an application under one or more systems and print a comparison table.
    Bench(BenchArgs),
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
}

#[derive(Args)]
struct CheckArgs {
    /// The history, in the format of crates/history/FORMAT.md (what `bench --history` writes).
    history: PathBuf,
    /// ser, us, si, psi, nmsi or rc; comma-separated for several.
    #[arg(long, default_value = "ser", value_delimiter = ',')]
    criterion: Vec<String>,
}

#[derive(Args, Clone)]
struct BenchArgs {
    /// Workload: the applications shop, micro, tpcw, rubis; kv (key-value transactions).
    #[arg(default_value = "shop")]
    app: String,
    /// Systems to compare, comma-separated: ensemble, centralized, read-only (the Conveyor Belt
    /// and its baselines), primary-backup (a toy key-value protocol).
    #[arg(long, default_value = "ensemble,centralized", value_delimiter = ',')]
    system: Vec<String>,
    /// Instances for ensemble and read-only (centralized always has one); comma-separated for a sweep.
    #[arg(long, default_value = "3", value_delimiter = ',')]
    instances: Vec<u32>,
    /// Topology preset (lan, wan5, wan-normal50) or a topology TOML file.
    #[arg(long, default_value = "wan5")]
    topology: String,
    /// Closed-loop clients, spread evenly over the client sites.
    #[arg(long, default_value_t = 50)]
    clients: u32,
    /// Client sites (indices into the topology's sites), comma-separated; default: every site.
    #[arg(long, value_delimiter = ',')]
    client_sites: Option<Vec<usize>>,
    /// Mean think time between a reply and the next request, in ms (exponential); 0: none.
    #[arg(long, default_value_t = 0.0)]
    think_ms: f64,
    #[arg(long, default_value_t = 5.0)]
    warmup: f64,
    /// Measurement window, in seconds.
    #[arg(long, default_value_t = 20.0)]
    measure: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Data scale (shop: 1000 items per unit).
    #[arg(long, default_value_t = 1)]
    scale: u32,
    /// micro: fraction of local operations.
    #[arg(long)]
    local_fraction: Option<f64>,
    /// shop: fraction of browsing requests.
    #[arg(long)]
    browse_fraction: Option<f64>,
    /// Run each token holder's global requests one after the other instead of in parallel.
    #[arg(long)]
    sequential: bool,
    /// Partition plan file for the ensemble system (default: the shipped plans/<app>.toml).
    #[arg(long)]
    plan: Option<PathBuf>,
    /// Simulator: CPU cores per instance.
    #[arg(long)]
    cores: Option<u32>,
    /// Simulator: service time of one transaction, in ms.
    #[arg(long)]
    execute_ms: Option<f64>,
    /// Run as real processes over TCP on this machine instead of in the simulator.
    #[arg(long)]
    real: bool,
    /// Write each run's history (what every transaction read and wrote) here, in the format
    /// `ensemble check` reads; with several runs, the run's label is added to the file name.
    #[arg(long)]
    history: Option<PathBuf>,
    /// Conveyor Belt: do not record the rows each SQL transaction reads and writes, so the run is
    /// checked by replay alone, not also by the dependency-graph checker (about 2.5 times less
    /// wall time; simulated results are the same).
    #[arg(long)]
    no_record_access: bool,
    #[command(flatten)]
    output: OutputArgs,
}

/// What every measuring command shares: checking, where results go, progress.
#[derive(Args, Clone)]
struct OutputArgs {
    /// Skip the serializability check.
    #[arg(long)]
    no_check: bool,
    /// Where result files go.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Hide the progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args)]
struct FigureArgs {
    /// gyro-fig3, gyro-fig4, table3, wan-scaling, overhead
    name: String,
    /// Application, for table3 and wan-scaling.
    #[arg(long, default_value = "shop")]
    app: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 5.0)]
    warmup: f64,
    #[arg(long, default_value_t = 20.0)]
    measure: f64,
    /// CPU cores per instance in the simulator.
    #[arg(long, default_value_t = 2)]
    cores: u32,
    #[arg(long)]
    sequential: bool,
    /// Run every experiment of the figure as real processes over TCP instead of in the simulator.
    #[arg(long)]
    real: bool,
    /// gyro-fig4, wan-scaling: client counts to step through, comma-separated. Each series stops
    /// once its mean latency passes 5 s; a simulated series that has not got there by the last
    /// count goes on by Little's law (clients = 1.1 × 5 s × the last throughput, at most eight
    /// times the last count) for up to four more steps. Default: 10,25,50,100,200,400 for
    /// gyro-fig4, 10,40,160,640,2560,10240 for wan-scaling (10,40,160,640 with --real).
    #[arg(long, value_delimiter = ',')]
    clients: Option<Vec<u32>>,
    /// Simulated figures: series run side by side on this many threads (results do not depend
    /// on it). Default: the machine's cores.
    #[arg(long)]
    jobs: Option<usize>,
    /// table3, wan-scaling on tpcw or rubis: steer the mix to this share of writing transactions
    /// (the papers: 0.3 for TPC-W, 0.15 for RUBiS); without it, the reference mix.
    #[arg(long)]
    write_share: Option<f64>,
    /// Conveyor Belt: record the rows each SQL transaction reads and writes, so every run is
    /// also checked by the dependency-graph checker (about 2.5 times the wall time; the same
    /// results). Off by default: sweeps run thousands of clients.
    #[arg(long)]
    record_access: bool,
    /// overhead: closed-loop client threads.
    #[arg(long, default_value_t = 4)]
    threads: u32,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args)]
struct AnalyzeArgs {
    /// Application: shop, micro, ...
    app: String,
    /// Workload mix: a TOML file of `txn = weight` (or `[weights]` and `[partition_by]` tables).
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Explain every decision: read and write sets, conflicts, why each type and table is placed so.
    #[arg(long)]
    explain: bool,
    /// Write the plan file here (otherwise it is printed after the report).
    #[arg(long)]
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
    #[arg(long)]
    check: Option<PathBuf>,
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(a) => bench(a),
        Command::Figure(a) => figure(a),
        Command::Analyze(a) => analyze(a),
        Command::Plan(a) => plan(a),
        Command::Topology { name } => Topology::load(&name).map_err(Into::into).map(|t| print!("{}", toml::to_string(&t).expect("a topology serializes"))),
        Command::Node(a) => node::run(a),
        Command::Check(a) => check(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn experiments(a: &BenchArgs) -> anyhow::Result<Vec<Experiment>> {
    let mut topology = Topology::load(&a.topology)?;
    if let Some(c) = a.cores {
        topology.cpu.cores = c;
    }
    if let Some(ms) = a.execute_ms {
        topology.cpu.execute_us = ms * 1e3;
    }
    let plan_text = a.plan.as_ref().map(|p| std::fs::read_to_string(p).with_context(|| format!("reading plan {}", p.display()))).transpose()?;
    let mut out = Vec::new();
    for system in &a.system {
        let belt = System::parse(system).ok();
        let counts: Vec<u32> = if belt == Some(System::Centralized) { vec![1] } else { a.instances.clone() };
        for n in counts {
            let mut e = Experiment::for_system(&a.app, system, n, topology.clone()).map_err(anyhow::Error::msg)?;
            if belt == Some(System::Ensemble) && plan_text.is_some() {
                let app = e.application().map_err(anyhow::Error::msg)?;
                e.plan = Experiment::plan_for(&app, System::Ensemble, plan_text.as_deref()).map_err(anyhow::Error::msg)?;
            }
            e.runtime = if a.real { Runtime::Real } else { Runtime::Sim };
            e.clients = a.clients;
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
            e.label = format!("{}-{}-{}{}", a.app, system, e.instances, if a.real { "-real" } else { "" });
            systems::dispatch(system, Validate(&e))?.map_err(anyhow::Error::msg)?;
            out.push(e);
        }
    }
    if let Some(path) = &a.history {
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
        h.validate(self.0)
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

fn bench(a: BenchArgs) -> anyhow::Result<()> {
    let exps = experiments(&a)?;
    let mut results = Vec::new();
    for e in &exps {
        let r = run_anywhere(e, !a.output.quiet)?;
        let path = a.output.out.join(format!("{}-seed{}.json", e.label, e.seed));
        write_json(&path, &r)?;
        eprintln!("wrote {}", path.display());
        results.push(r);
    }
    println!("{}", print_table(&results, &table_classes(&exps)?));
    let wall = if a.real { "real processes on this machine" } else { "simulated (virtual time)" };
    println!(
        "app {} | topology {} | {} clients at sites {:?} | window {} s after {} s warm-up | {wall} | latencies in ms",
        a.app, exps[0].topology.name, a.clients, exps[0].client_sites, a.measure, a.warmup
    );
    for r in &results {
        if let Some(c) = &r.check {
            println!("{}: {c}", r.experiment.label);
        }
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
    };
    let clients = |default: &[u32]| a.clients.clone().unwrap_or_else(|| default.to_vec());
    let workload = match (a.app.as_str(), a.write_share) {
        (_, None) => None,
        ("tpcw", Some(s)) => Some(WorkloadSpec::Tpcw { write_share: Some(s) }),
        ("rubis", Some(s)) => Some(WorkloadSpec::Rubis { write_share: Some(s), remote_items: 0.0 }),
        (other, Some(_)) => bail!("--write-share is for tpcw and rubis, not {other}"),
    };
    let fig = match a.name.as_str() {
        "gyro-fig3" => figures::gyro_fig3(&o)?,
        "gyro-fig4" => figures::gyro_fig4(&o, &clients(&[10, 25, 50, 100, 200, 400]))?,
        "table3" => figures::table3(&a.app, &o, workload.as_ref())?,
        "wan-scaling" => {
            // Real clients are tasks on this machine's two cores: tens of thousands would measure
            // the machine, not the system.
            let steps: &[u32] = if a.real { &[10, 40, 160, 640] } else { &[10, 40, 160, 640, 2560, 10240] };
            figures::wan_scaling(&a.app, &o, &clients(steps), workload.as_ref())?
        }
        "overhead" => {
            let text = overhead::run(a.threads, a.measure, a.seed, !a.output.quiet)?;
            println!("{text}");
            return Ok(());
        }
        other => bail!("unknown figure `{other}` (known: gyro-fig3, gyro-fig4, table3, wan-scaling, overhead)"),
    };
    let stem = match (a.name.as_str(), a.write_share) {
        ("table3" | "wan-scaling", None) => format!("{}-{}", a.name, a.app),
        ("table3" | "wan-scaling", Some(s)) => format!("{}-{}-writes{:.0}", a.name, a.app, s * 100.0),
        _ => a.name.clone(),
    };
    // A real run must not overwrite the simulated figure's result file.
    let stem = if a.real { format!("{stem}-real") } else { stem };
    let path = a.output.out.join(format!("figure-{stem}-seed{}.json", a.seed));
    write_json(&path, &fig.runs)?;
    eprintln!("wrote {}", path.display());
    println!("{}\n\n{}", fig.title, fig.table);
    if let Some(s) = a.write_share {
        println!("mix steered to {:.0}% writing transactions (--write-share {s})", s * 100.0);
    }
    if a.real {
        println!("real processes on this machine: warm-up {} s (longer where a table says so), window {} s, seed {}, {:?} global execution", a.warmup, a.measure, a.seed, o.global_execution);
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
