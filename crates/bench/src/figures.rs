//! The papers' experiments as functions: each runs a series of simulated experiments and
//! returns the table it printed plus every run's result.

use crate::experiment::{Experiment, Runtime, System, WorkloadSpec};
use crate::metrics::INTERACTION;
use crate::report::{render, RunResult};
use ensemble_belt::GlobalExecution;
use ensemble_core::topology::Topology;

/// Knobs shared by the figure commands.
#[derive(Clone, Debug)]
pub struct FigureOpts {
    pub seed: u64,
    pub warmup_s: f64,
    pub measure_s: f64,
    /// CPU cores per instance (the papers' EC2 T2 Medium machines have two).
    pub cores: u32,
    pub global_execution: GlobalExecution,
    pub progress: bool,
    pub check: bool,
    /// See `Experiment::record_access`.
    pub record_access: bool,
    /// Where each run happens. Real processes need the `ensemble` binary to start nodes, so the
    /// CLI hands in its runner (`run`).
    pub runtime: Runtime,
    pub run: fn(&Experiment, bool) -> anyhow::Result<RunResult>,
    /// How many independent series of a figure run side by side. Simulated runs are
    /// deterministic whatever runs beside them, so this changes wall time only; real runs share
    /// the machine's cores and are always run one at a time.
    pub jobs: usize,
    /// The DBMS under the Conveyor Belt's instances (the belt's figures; others ignore it).
    pub backend: crate::experiment::Backend,
    /// The belt's instances run their locals side by side under SSI
    /// (`Experiment::writers_side_by_side`; real runs on PostgreSQL); other systems ignore it.
    pub writers_side_by_side: bool,
}

impl Default for FigureOpts {
    fn default() -> Self {
        FigureOpts {
            seed: 1,
            warmup_s: 5.0,
            measure_s: 20.0,
            cores: 2,
            global_execution: GlobalExecution::Parallel,
            progress: true,
            check: true,
            record_access: false,
            runtime: Runtime::Sim,
            run: crate::run,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            backend: crate::experiment::Backend::default(),
            writers_side_by_side: false,
        }
    }
}

impl FigureOpts {
    /// Gives an experiment this figure's seed, windows, global execution and checking.
    pub fn apply(&self, e: &mut Experiment) {
        e.seed = self.seed;
        e.warmup_s = self.warmup_s;
        e.measure_s = self.measure_s;
        e.global_execution = self.global_execution;
        e.check = self.check;
        e.record_access = self.record_access;
        e.runtime = self.runtime;
        e.backend = self.backend.clone();
        // The Conveyor Belt's systems only: the 2pc baseline keeps the server's own locking.
        e.writers_side_by_side = self.writers_side_by_side && System::parse(&e.system).is_ok();
        if self.runtime == Runtime::Real {
            // An idle token on loopback would otherwise spin a core.
            e.idle_pause_us = 500;
        }
    }
}

pub struct Figure {
    pub title: String,
    pub table: String,
    pub runs: Vec<RunResult>,
}

fn micro(local_fraction: f64, clients: u32, o: &FigureOpts) -> Experiment {
    let mut t = Topology::wan5();
    t.cpu.cores = o.cores;
    // Gyro §VII-B: every operation, local or global, takes 5 ms.
    t.cpu.execute_us = 5_000.0;
    let mut e = Experiment::new("micro", System::Ensemble, 3, t).expect("micro is shipped");
    e.workload = WorkloadSpec::Micro { local_fraction };
    e.clients = clients;
    o.apply(&mut e);
    e.label = format!("micro-{:.0}%-local-{clients}c", local_fraction * 100.0);
    e
}

const LOCAL_FRACTIONS: [f64; 10] = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9];

fn ms(r: &RunResult, class: &str) -> String {
    r.summary.classes.get(class).map(|c| format!("{:.1}", c.mean_ms)).unwrap_or_else(|| "-".into())
}

fn verdict(r: &RunResult) -> String {
    match r.check_passed {
        Some(true) => "ok".into(),
        Some(false) => "FAILED".into(),
        None => "-".into(),
    }
}

/// Gyro Figure 3a / Eliá Figure 6a: mean latency of local and global requests under light load
/// (one client at each of the five sites), three instances in Germany, Japan and US east.
pub fn gyro_fig3(o: &FigureOpts) -> anyhow::Result<Figure> {
    let mut runs = vec![];
    for lf in LOCAL_FRACTIONS {
        runs.push((o.run)(&micro(lf, 5, o), o.progress)?);
    }
    Ok(gyro_fig3_table(runs))
}

/// Figure 3a's table from its runs alone (also what `--replot` prints).
pub fn gyro_fig3_table(runs: Vec<RunResult>) -> Figure {
    let mut rows = vec![["local %", "ops/s", "local mean ms", "global mean ms", "all mean ms", "global/local", "check"].map(String::from).to_vec()];
    for r in &runs {
        let ratio = match (r.summary.classes.get("local"), r.summary.classes.get("global")) {
            (Some(l), Some(g)) if l.mean_ms > 0.0 => format!("{:.2}x", g.mean_ms / l.mean_ms),
            _ => "-".into(),
        };
        rows.push(vec![
            format!("{:.0}", crate::plots::local_fraction(r) * 100.0),
            format!("{:.1}", r.summary.throughput),
            ms(r, "local"),
            ms(r, "global"),
            ms(r, "all"),
            ratio,
            verdict(r),
        ]);
    }
    Figure { title: "Gyro Fig. 3a: micro-benchmark latency under light load (wan5, 3 instances, 5 clients, 5 ms operations)".into(), table: render(&rows), runs }
}

/// Gyro Figure 4 / Eliá Figure 5: throughput and latency as clients increase, per local
/// fraction; the saturation throughput is the highest throughput reached.
pub fn gyro_fig4(o: &FigureOpts, client_steps: &[u32]) -> anyhow::Result<Figure> {
    let fractions = [0.1, 0.3, 0.5, 0.7, 0.9];
    let series = run_series(o, &fractions, |&lf, progress| {
        sweep_to_latency_limit(o, client_steps, progress, |c| Ok(micro(lf, c, o)), &format!("{:.0}% local", lf * 100.0))
    })?;
    Ok(gyro_fig4_table(series.into_iter().flatten().collect()))
}

/// Figure 4's table from its runs alone, a sweep per local fraction in the order they came
/// (also what `--replot` prints).
pub fn gyro_fig4_table(runs: Vec<RunResult>) -> Figure {
    let mut rows = vec![["local %", "clients", "warm-up s", "ops/s", "mean ms", "p99 ms", "local mean", "global mean", "check"].map(String::from).to_vec()];
    let mut summary = vec![["local %", "saturation ops/s", "at clients", "5 s reached"].map(String::from).to_vec()];
    for (lf, sweep) in crate::plots::group_by(&runs, crate::plots::local_fraction) {
        for r in sweep.iter().copied() {
            let all = r.summary.classes.get("all");
            rows.push(vec![
                format!("{:.0}", lf * 100.0),
                r.experiment.clients.to_string(),
                r.experiment.warmup_s.to_string(),
                format!("{:.1}", r.summary.throughput),
                all.map(|a| format!("{:.1}", a.mean_ms)).unwrap_or_default(),
                all.map(|a| format!("{:.1}", a.p99_ms)).unwrap_or_default(),
                ms(r, "local"),
                ms(r, "global"),
                verdict(r),
            ]);
        }
        let (best, at) = best_of(&sweep);
        summary.push(vec![format!("{:.0}", lf * 100.0), format!("{best:.1}"), at.to_string(), reached_text(&sweep)]);
    }
    let table = format!("{}\n{}", render(&rows), render(&summary));
    Figure { title: "Gyro Fig. 4: micro-benchmark throughput against latency (wan5, 3 instances, clients at all five sites)".into(), table, runs }
}

/// The papers add clients until the mean latency passes this.
pub const LATENCY_LIMIT_MS: f64 = 5_000.0;
/// Extra steps a simulated sweep may take past the listed client counts to reach the limit.
const EXTRA_STEPS: usize = 4;

/// The highest throughput of a sweep's runs and the client count it was reached at.
fn best_of(sweep: &[&RunResult]) -> (f64, u32) {
    sweep.iter().map(|r| (r.summary.throughput, r.experiment.clients)).fold((0.0, 0), |b, x| if x.0 > b.0 { x } else { b })
}

/// Whether a sweep's last run passed [`LATENCY_LIMIT_MS`], as its summary row says it.
fn reached_text(sweep: &[&RunResult]) -> String {
    match sweep.last() {
        Some(r) if mean_ms(r) > LATENCY_LIMIT_MS => format!("at {} clients", r.experiment.clients),
        _ => "no".into(),
    }
}

fn mean_ms(r: &RunResult) -> f64 {
    r.summary.classes.get("all").map(|a| a.mean_ms).unwrap_or(0.0)
}

/// Client count for the next step past the listed ones. In a closed loop without think time,
/// clients = throughput × latency (Little's law); once throughput has stopped growing, this many
/// clients put the mean latency just past the limit. The step grows by at least a quarter and
/// at most eightfold, so a sweep that is still far from saturation keeps climbing without
/// overshooting by orders of magnitude.
pub fn next_client_step(last_clients: u32, throughput: f64) -> u32 {
    let target = (throughput * LATENCY_LIMIT_MS / 1e3 * 1.1).ceil();
    let target = if target.is_finite() { target.min(u32::MAX as f64) as u32 } else { u32::MAX };
    let least = last_clients.saturating_add(last_clients.div_ceil(4)).max(last_clients.saturating_add(1));
    target.clamp(least, last_clients.saturating_mul(8).max(least))
}

/// Warm-up for a step of `clients` after a step that ran at `last_throughput`. Every client sends
/// its first request at time zero, so a queue of `clients` requests drains for about
/// clients / throughput seconds before the loop is in its steady state, and no reply can report
/// a latency longer than the time since the start. A warm-up shorter than that would cap the
/// measured latency, so it is stretched to 1.5 × the latency Little's law predicts (at most
/// 3 × the 5 s limit: past it the sweep stops whatever the exact figure).
pub fn step_warmup_s(configured: f64, clients: u32, last_throughput: Option<f64>) -> f64 {
    let predicted = match last_throughput {
        Some(x) if x > 0.0 => clients as f64 / x,
        _ => 0.0,
    };
    configured.max((1.5 * predicted).min(3.0 * LATENCY_LIMIT_MS / 1e3)).ceil()
}

/// Runs `make(clients)` at each listed client count until the mean latency passes the limit.
/// In the simulator, a sweep whose listed steps end below the limit goes on with
/// [`next_client_step`] for up to [`EXTRA_STEPS`] more runs; real runs stop at the list, since
/// their clients share this machine's cores with the nodes.
fn sweep_to_latency_limit(
    o: &FigureOpts,
    client_steps: &[u32],
    progress: bool,
    make: impl Fn(u32) -> anyhow::Result<Experiment>,
    name: &str,
) -> anyhow::Result<Vec<RunResult>> {
    let mut runs: Vec<RunResult> = vec![];
    let mut steps: Vec<u32> = client_steps.to_vec();
    let mut i = 0;
    while i < steps.len() {
        let started = std::time::Instant::now();
        let mut e = make(steps[i])?;
        e.warmup_s = step_warmup_s(e.warmup_s, steps[i], runs.last().map(|r| r.summary.throughput));
        let r = (o.run)(&e, progress)?;
        let mean = mean_ms(&r);
        if o.progress && !progress {
            eprintln!(
                "{name}: {} clients, {:.1} ops/s, {mean:.1} ms mean after {} s of warm-up, check {} ({:.0} s of wall time)",
                steps[i],
                r.summary.throughput,
                r.experiment.warmup_s,
                verdict(&r),
                started.elapsed().as_secs_f64()
            );
        }
        let throughput = r.summary.throughput;
        runs.push(r);
        if mean > LATENCY_LIMIT_MS {
            break;
        }
        if i + 1 == steps.len() && o.runtime == Runtime::Sim && steps.len() < client_steps.len() + EXTRA_STEPS {
            steps.push(next_client_step(steps[i], throughput));
        }
        i += 1;
    }
    Ok(runs)
}

/// Runs `series(item, progress)` for every item, `o.jobs` at a time, and returns the results in
/// the items' order. With more than one job the per-run progress bars would overwrite each
/// other, so each series gets `progress = false` and reports its steps in lines instead.
pub fn run_series<T: Sync, R: Send>(
    o: &FigureOpts,
    items: &[T],
    series: impl Fn(&T, bool) -> anyhow::Result<R> + Sync,
) -> anyhow::Result<Vec<R>> {
    let jobs = if o.runtime == Runtime::Real { 1 } else { o.jobs.clamp(1, items.len().max(1)) };
    if jobs == 1 {
        return items.iter().map(|t| series(t, o.progress)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<anyhow::Result<R>>>> = items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = series(item, false);
                *results[i].lock().expect("no series panicked while holding its slot") = Some(r);
            });
        }
    });
    results.into_iter().map(|m| m.into_inner().expect("no series panicked").expect("every series ran")).collect()
}

/// The configurations of Gyro Table III / Eliá Table 3 and Figure 4.
pub const WAN_CONFIGS: [(System, u32); 7] = [
    (System::Centralized, 1),
    (System::Ensemble, 2),
    (System::Ensemble, 3),
    (System::Ensemble, 5),
    (System::ReadOnly, 2),
    (System::ReadOnly, 3),
    (System::ReadOnly, 5),
];

/// A configuration as Table III names it.
pub fn config_name(system: System, n: u32) -> String {
    match system {
        System::Centralized => "Centralized".to_string(),
        System::Ensemble => format!("Ensemble-{n}"),
        System::ReadOnly => format!("Read-only-{n}"),
    }
}

fn wan_experiment(app: &str, system: System, n: u32, clients: u32, o: &FigureOpts, workload: Option<&WorkloadSpec>) -> anyhow::Result<Experiment> {
    let mut t = Topology::wan5();
    t.cpu.cores = o.cores;
    let mut e = Experiment::new(app, system, n, t).map_err(anyhow::Error::msg)?;
    if let Some(w) = workload {
        e.workload = w.clone();
    }
    e.clients = clients;
    o.apply(&mut e);
    e.label = format!("{app}-{}-{n}-{clients}c", system.name());
    Ok(e)
}

/// Gyro Table III / Eliá Table 3: mean latency under light load in wan5 (one client per site),
/// with the improvement over the centralized configuration, per transaction and, for
/// applications made of web interactions, per interaction (what the papers measured).
pub fn table3(app: &str, o: &FigureOpts, workload: Option<&WorkloadSpec>) -> anyhow::Result<Figure> {
    let mut runs: Vec<RunResult> = vec![];
    for (system, n) in WAN_CONFIGS {
        runs.push((o.run)(&wan_experiment(app, system, n, 5, o, workload)?, o.progress)?);
    }
    Ok(table3_table(app, runs))
}

/// The configuration a run measured, as the WAN figures name it (`Ensemble-3`), and whether it is
/// the centralized one the others are compared with.
fn config_of(r: &RunResult) -> (String, bool) {
    match System::parse(&r.experiment.system) {
        Ok(system) => (config_name(system, r.experiment.instances), system == System::Centralized),
        Err(_) => (format!("{}-{}", r.experiment.system, r.experiment.instances), false),
    }
}

/// Table III's table from its runs alone (also what `--replot` prints).
pub fn table3_table(app: &str, runs: Vec<RunResult>) -> Figure {
    let mut rows = vec![[
        "configuration",
        "txn mean ms",
        "improvement",
        "interaction mean ms",
        "improvement",
        "local mean",
        "global mean",
        "global share",
        "check",
    ]
    .map(String::from)
    .to_vec()];
    let mut central: Option<(f64, Option<f64>)> = None;
    for r in &runs {
        let (config, is_central) = config_of(r);
        let mean = r.summary.classes.get("all").map(|c| c.mean_ms).unwrap_or(f64::NAN);
        let page = r.summary.classes.get(INTERACTION).map(|c| c.mean_ms);
        if is_central {
            central = Some((mean, page));
        }
        let all = r.summary.classes.get("all").map(|c| c.count).unwrap_or(0).max(1);
        let global_share = r.summary.classes.get("global").map(|g| g.count as f64 / all as f64).unwrap_or(0.0);
        let factor = |base: Option<f64>, x: Option<f64>| match (base, x) {
            (Some(b), Some(x)) if x > 0.0 => format!("{:.1}x", b / x),
            _ => String::new(),
        };
        rows.push(vec![
            config,
            format!("{mean:.1}"),
            factor(central.map(|c| c.0), Some(mean)),
            page.map(|p| format!("{p:.1}")).unwrap_or_else(|| "-".into()),
            factor(central.and_then(|c| c.1), page),
            ms(r, "local"),
            ms(r, "global"),
            format!("{:.0}%", global_share * 100.0),
            verdict(r),
        ]);
    }
    Figure { title: format!("Table III for {app}: mean latency under light load (wan5, one client per site)"), table: render(&rows), runs }
}

/// Eliá Figure 4 / Gyro Figure 6: throughput against latency as clients increase until the mean
/// latency passes 5 s, for each configuration of Table III.
pub fn wan_scaling(app: &str, o: &FigureOpts, client_steps: &[u32], workload: Option<&WorkloadSpec>) -> anyhow::Result<Figure> {
    let series = run_series(o, &WAN_CONFIGS, |&(system, n), progress| {
        sweep_to_latency_limit(o, client_steps, progress, |c| wan_experiment(app, system, n, c, o, workload), &config_name(system, n))
    })?;
    Ok(wan_scaling_table(app, series.into_iter().flatten().collect()))
}

/// The WAN scaling figure's table from its runs alone, a sweep per configuration in the order
/// they came (also what `--replot` prints).
pub fn wan_scaling_table(app: &str, runs: Vec<RunResult>) -> Figure {
    let mut rows = vec![["configuration", "clients", "warm-up s", "ops/s", "mean ms", "p99 ms", "check"].map(String::from).to_vec()];
    let mut summary = vec![["configuration", "max ops/s", "at clients", "vs centralized", "5 s reached"].map(String::from).to_vec()];
    let mut central = None;
    for ((config, is_central), sweep) in crate::plots::group_by(&runs, config_of) {
        for r in sweep.iter().copied() {
            let all = r.summary.classes.get("all");
            rows.push(vec![
                config.clone(),
                r.experiment.clients.to_string(),
                r.experiment.warmup_s.to_string(),
                format!("{:.1}", r.summary.throughput),
                format!("{:.1}", mean_ms(r)),
                all.map(|a| format!("{:.1}", a.p99_ms)).unwrap_or_default(),
                verdict(r),
            ]);
        }
        let (best, at) = best_of(&sweep);
        if is_central {
            central = Some(best);
        }
        summary.push(vec![
            config,
            format!("{best:.1}"),
            at.to_string(),
            central.map(|c| format!("{:.1}x", best / c)).unwrap_or_default(),
            reached_text(&sweep),
        ]);
    }
    let table = format!("{}\n{}", render(&rows), render(&summary));
    Figure { title: format!("Throughput against latency for {app} (wan5, clients at all five sites, up to 5 s mean latency)"), table, runs }
}

/// Gyro §VII-C: the largest factors by which Gyro beat MySQL Cluster in the LAN, per
/// application: peak throughput, minimal latency.
pub fn gyro_fig5_paper(app: &str) -> Option<(f64, f64)> {
    match app {
        "tpcw" => Some((4.2, 58.6)),
        "rubis" => Some((1.4, 35.7)),
        _ => None,
    }
}

/// Gyro defines peak throughput as the largest a system sustains with a mean latency under 2 s.
pub const PEAK_LATENCY_MS: f64 = 2000.0;

/// One system at one instance count in Figure 5: its runs, its peak throughput (mean latency
/// under [`PEAK_LATENCY_MS`]) and its minimal mean latency.
pub struct Fig5Point {
    pub peak: Option<f64>,
    pub min_latency: Option<f64>,
    pub checks: Vec<String>,
}

pub fn fig5_point(runs: &[&RunResult]) -> Fig5Point {
    let mean = |r: &RunResult| r.summary.classes.get("all").map(|c| c.mean_ms);
    Fig5Point {
        peak: runs.iter().filter(|r| mean(r).is_some_and(|m| m < PEAK_LATENCY_MS)).map(|r| r.summary.throughput).reduce(f64::max),
        min_latency: runs.iter().filter_map(|r| mean(r)).reduce(f64::min),
        checks: runs.iter().map(|r| verdict(r)).collect(),
    }
}

/// Gyro Figure 5: peak throughput and minimal latency of Ensemble and of the two-phase-commit
/// baseline (`2pc`, the same plan over the server's prepared transactions) in the LAN, as the instances
/// increase; both over databases on the experiment's server, as real processes. At each
/// instance count each system runs at every client count of `client_steps` (stopping once its
/// mean latency passes 2 s); the peak is the largest throughput under 2 s, the minimal latency
/// the smallest mean. The table also compares the two at the most clients both ran with.
pub fn gyro_fig5(app: &str, o: &FigureOpts, instances: &[u32], client_steps: &[u32]) -> anyhow::Result<Figure> {
    anyhow::ensure!(o.runtime == Runtime::Real, "gyro-fig5 compares real processes over real servers: add --real");
    let mut runs: Vec<RunResult> = vec![];
    for &n in instances {
        for system in ["ensemble", "2pc"] {
            for &clients in client_steps {
                let mut e = Experiment::for_system(app, system, n, Topology::lan()).map_err(anyhow::Error::msg)?;
                e.clients = clients;
                o.apply(&mut e);
                if system == "2pc" {
                    e.storage_workers = crate::systems::twopc::workers_for(clients);
                }
                e.label = format!("{app}-{system}-{n}-{clients}c");
                let r = (o.run)(&e, o.progress)?;
                let slow = r.summary.classes.get("all").is_none_or(|c| c.mean_ms >= PEAK_LATENCY_MS);
                runs.push(r);
                if slow {
                    break;
                }
            }
        }
    }
    Ok(fig5_table(app, runs))
}

fn max_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Figure 5's table from its runs (also what `--replot` reads back).
pub fn fig5_table(app: &str, runs: Vec<RunResult>) -> Figure {
    let mut rows = vec![["instances", "Ensemble peak ops/s", "2PC peak ops/s", "ratio", "Ensemble min ms", "2PC min ms", "ratio", "clients", "Ensemble ms", "2PC ms", "ratio", "checks"]
        .map(String::from)
        .to_vec()];
    let mut best: [Option<f64>; 2] = [None, None];
    let mut latency_ratio_max: Option<f64> = None;
    for (n, group) in crate::plots::group_by(&runs, |r| r.experiment.instances) {
        let of = |s: &str| fig5_point(&group.iter().copied().filter(|r| r.experiment.system == s).collect::<Vec<_>>());
        let (e, t) = (of("ensemble"), of("2pc"));
        let fmt = |x: Option<f64>, digits: usize| x.map(|v| format!("{v:.digits$}")).unwrap_or_else(|| "-".into());
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        let tput = ratio(e.peak, t.peak);
        let lat = ratio(t.min_latency, e.min_latency);
        best[0] = max_of(best[0], e.peak);
        best[1] = max_of(best[1], t.peak);
        latency_ratio_max = max_of(latency_ratio_max, lat);
        // Latency under the same load: the most clients both systems ran with.
        let at = |s: &str, c: u32| group.iter().find(|r| r.experiment.system == s && r.experiment.clients == c).and_then(|r| r.summary.classes.get("all")).map(|x| x.mean_ms);
        let common = group.iter().filter(|r| r.experiment.system == "ensemble").map(|r| r.experiment.clients).filter(|c| at("2pc", *c).is_some()).max();
        let (le, lt) = common.map_or((None, None), |c| (at("ensemble", c), at("2pc", c)));
        let loaded = ratio(lt, le);
        latency_ratio_max = max_of(latency_ratio_max, loaded);
        let checks: Vec<String> = e.checks.iter().chain(&t.checks).cloned().collect();
        let all_ok = checks.iter().all(|c| c == "ok");
        rows.push(vec![
            n.to_string(),
            fmt(e.peak, 1),
            fmt(t.peak, 1),
            tput.map(|r| format!("{r:.2}x")).unwrap_or_else(|| "-".into()),
            fmt(e.min_latency, 2),
            fmt(t.min_latency, 2),
            lat.map(|r| format!("{r:.1}x")).unwrap_or_else(|| "-".into()),
            common.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
            fmt(le, 2),
            fmt(lt, 2),
            loaded.map(|r| format!("{r:.1}x")).unwrap_or_else(|| "-".into()),
            if all_ok { format!("ok ({})", checks.len()) } else { checks.join(",") },
        ]);
    }
    let mut table = render(&rows);
    let over = match (best[0], best[1]) {
        (Some(e), Some(t)) if t > 0.0 => format!("{:.2}x", e / t),
        _ => "-".into(),
    };
    table.push_str(&format!(
        "\n\nbest peak, Ensemble over 2PC (each at its best instance count): {over}; largest latency ratio, 2PC over Ensemble (minimal, or under the same load): {}",
        latency_ratio_max.map(|r| format!("{r:.1}x")).unwrap_or_else(|| "-".into())
    ));
    if let Some((t, l)) = gyro_fig5_paper(app) {
        table.push_str(&format!("\nGyro over MySQL Cluster (Gyro §VII-C, {app}): {t}x peak throughput, {l}x lower latency"));
    }
    Figure { title: format!("Gyro Fig. 5 for {app}: Ensemble against two-phase commit in the LAN, peak throughput (mean under 2 s) and minimal latency"), table, runs }
}
