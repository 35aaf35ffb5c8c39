//! The papers' experiments as functions: each runs a series of simulated experiments and
//! returns the table it printed plus every run's result.

use crate::experiment::{Experiment, Runtime, System, WorkloadSpec};
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
    /// Where each run happens. Real processes need the `ensemble` binary to start nodes, so the
    /// CLI hands in its runner (`run`).
    pub runtime: Runtime,
    pub run: fn(&Experiment, bool) -> anyhow::Result<RunResult>,
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
            runtime: Runtime::Sim,
            run: crate::run,
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
        e.runtime = self.runtime;
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
    let mut rows = vec![["local %", "ops/s", "local mean ms", "global mean ms", "all mean ms", "global/local", "check"].map(String::from).to_vec()];
    let mut runs = vec![];
    for lf in LOCAL_FRACTIONS {
        let r = (o.run)(&micro(lf, 5, o), o.progress)?;
        let ratio = match (r.summary.classes.get("local"), r.summary.classes.get("global")) {
            (Some(l), Some(g)) if l.mean_ms > 0.0 => format!("{:.2}x", g.mean_ms / l.mean_ms),
            _ => "-".into(),
        };
        rows.push(vec![
            format!("{:.0}", lf * 100.0),
            format!("{:.1}", r.summary.throughput),
            ms(&r, "local"),
            ms(&r, "global"),
            ms(&r, "all"),
            ratio,
            verdict(&r),
        ]);
        runs.push(r);
    }
    Ok(Figure { title: "Gyro Fig. 3a: micro-benchmark latency under light load (wan5, 3 instances, 5 clients, 5 ms operations)".into(), table: render(&rows), runs })
}

/// Gyro Figure 4 / Eliá Figure 5: throughput and latency as clients increase, per local
/// fraction; the saturation throughput is the highest throughput reached.
pub fn gyro_fig4(o: &FigureOpts, client_steps: &[u32]) -> anyhow::Result<Figure> {
    let mut rows = vec![["local %", "clients", "ops/s", "mean ms", "p99 ms", "local mean", "global mean", "check"].map(String::from).to_vec()];
    let mut summary = vec![["local %", "saturation ops/s", "at clients"].map(String::from).to_vec()];
    let mut runs = vec![];
    for lf in [0.1, 0.3, 0.5, 0.7, 0.9] {
        let mut best = (0.0f64, 0u32);
        for &c in client_steps {
            let r = (o.run)(&micro(lf, c, o), o.progress)?;
            let all = r.summary.classes.get("all");
            rows.push(vec![
                format!("{:.0}", lf * 100.0),
                c.to_string(),
                format!("{:.1}", r.summary.throughput),
                all.map(|a| format!("{:.1}", a.mean_ms)).unwrap_or_default(),
                all.map(|a| format!("{:.1}", a.p99_ms)).unwrap_or_default(),
                ms(&r, "local"),
                ms(&r, "global"),
                verdict(&r),
            ]);
            if r.summary.throughput > best.0 {
                best = (r.summary.throughput, c);
            }
            let mean = all.map(|a| a.mean_ms).unwrap_or(0.0);
            runs.push(r);
            // Past 5 s of mean latency the papers stop adding clients.
            if mean > 5_000.0 {
                break;
            }
        }
        summary.push(vec![format!("{:.0}", lf * 100.0), format!("{:.1}", best.0), best.1.to_string()]);
    }
    let table = format!("{}\n{}", render(&rows), render(&summary));
    Ok(Figure { title: "Gyro Fig. 4: micro-benchmark throughput against latency (wan5, 3 instances, clients at all five sites)".into(), table, runs })
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

fn config_name(system: System, n: u32) -> String {
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
/// with the improvement over the centralized configuration.
pub fn table3(app: &str, o: &FigureOpts, workload: Option<&WorkloadSpec>) -> anyhow::Result<Figure> {
    let mut rows = vec![["configuration", "mean ms", "improvement", "local mean", "global mean", "global share", "check"].map(String::from).to_vec()];
    let mut runs: Vec<RunResult> = vec![];
    let mut central = None;
    for (system, n) in WAN_CONFIGS {
        let r = (o.run)(&wan_experiment(app, system, n, 5, o, workload)?, o.progress)?;
        let mean = r.summary.classes.get("all").map(|c| c.mean_ms).unwrap_or(f64::NAN);
        if system == System::Centralized {
            central = Some(mean);
        }
        let all = r.summary.classes.get("all").map(|c| c.count).unwrap_or(0).max(1);
        let global_share = r.summary.classes.get("global").map(|g| g.count as f64 / all as f64).unwrap_or(0.0);
        rows.push(vec![
            config_name(system, n),
            format!("{mean:.1}"),
            central.map(|c| format!("{:.1}x", c / mean)).unwrap_or_default(),
            ms(&r, "local"),
            ms(&r, "global"),
            format!("{:.0}%", global_share * 100.0),
            verdict(&r),
        ]);
        runs.push(r);
    }
    Ok(Figure { title: format!("Table III for {app}: mean latency under light load (wan5, one client per site)"), table: render(&rows), runs })
}

/// Eliá Figure 4 / Gyro Figure 6: throughput against latency as clients increase until the mean
/// latency passes 5 s, for each configuration of Table III.
pub fn wan_scaling(app: &str, o: &FigureOpts, client_steps: &[u32], workload: Option<&WorkloadSpec>) -> anyhow::Result<Figure> {
    let mut rows = vec![["configuration", "clients", "ops/s", "mean ms", "p99 ms", "check"].map(String::from).to_vec()];
    let mut summary = vec![["configuration", "max ops/s", "at clients", "vs centralized"].map(String::from).to_vec()];
    let mut runs = vec![];
    let mut central = None;
    for (system, n) in WAN_CONFIGS {
        let mut best = (0.0f64, 0u32);
        for &c in client_steps {
            let r = (o.run)(&wan_experiment(app, system, n, c, o, workload)?, o.progress)?;
            let all = r.summary.classes.get("all");
            let mean = all.map(|a| a.mean_ms).unwrap_or(0.0);
            rows.push(vec![
                config_name(system, n),
                c.to_string(),
                format!("{:.1}", r.summary.throughput),
                format!("{mean:.1}"),
                all.map(|a| format!("{:.1}", a.p99_ms)).unwrap_or_default(),
                verdict(&r),
            ]);
            if r.summary.throughput > best.0 {
                best = (r.summary.throughput, c);
            }
            runs.push(r);
            if mean > 5_000.0 {
                break;
            }
        }
        if system == System::Centralized {
            central = Some(best.0);
        }
        summary.push(vec![
            config_name(system, n),
            format!("{:.1}", best.0),
            best.1.to_string(),
            central.map(|c| format!("{:.1}x", best.0 / c)).unwrap_or_default(),
        ]);
    }
    let table = format!("{}\n{}", render(&rows), render(&summary));
    Ok(Figure { title: format!("Throughput against latency for {app} (wan5, clients at all five sites, up to 5 s mean latency)"), table, runs })
}
