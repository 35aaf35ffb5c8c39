//! Runs an experiment in the deterministic simulator.

use crate::experiment::Experiment;
use crate::metrics::Metrics;
use crate::report::{RunResult, SimFigures};
use ensemble_app::{DataConfig, PartitionPlan};
use ensemble_belt::{BeltConfig, ClosedLoopClient, ConveyorBelt, ThinkTime};
use ensemble_core::{ClientId, Completion, InstanceId, Time};
use ensemble_sim::Simulation;
use ensemble_sqlite::SqliteStorage;
use std::sync::Arc;
use std::time::Duration;

/// After the measurement window clients stop issuing; the run goes on until no completion has
/// arrived for this long (longer than any round trip of the shipped topologies), so that every
/// request has its reply and every instance has seen every global update.
const QUIET: Duration = Duration::from_secs(3);
/// A run that has not drained after this long is reported as such by the check.
const MAX_DRAIN: Duration = Duration::from_secs(600);

/// A finished simulation before its check: what the checker needs, kept apart so that tests can
/// tamper with it and see the checker object.
pub struct Simulated {
    pub result: RunResult,
    pub app: Arc<ensemble_app::Application>,
    pub plan: Arc<PartitionPlan>,
    pub data: ensemble_app::Dataset,
    pub history: Vec<Completion>,
    pub storages: Vec<SqliteStorage>,
    /// Instances whose belt halted, with the reason.
    pub halted: Vec<String>,
}

impl Simulated {
    /// Runs the serializability check and records its verdict in the result.
    pub fn check(mut self) -> anyhow::Result<RunResult> {
        let refs: Vec<&SqliteStorage> = self.storages.iter().collect();
        let mut report = ensemble_check::check(&self.app, &self.plan, &self.data, &self.history, &refs)?;
        report.violations.extend(self.halted.iter().map(|h| format!("belt halted at {h}")));
        self.result.check = Some(report.summary());
        self.result.check_passed = Some(report.ok());
        Ok(self.result)
    }
}

pub fn run_sim(exp: &Experiment, progress: bool) -> anyhow::Result<RunResult> {
    let s = simulate(exp, progress)?;
    if exp.check {
        s.check()
    } else {
        Ok(s.result)
    }
}

/// Runs the experiment; the history is kept when `exp.check` is set.
pub fn simulate(exp: &Experiment, progress: bool) -> anyhow::Result<Simulated> {
    let app = exp.validate().map_err(anyhow::Error::msg)?;
    let plan = Arc::new(exp.plan.clone());
    let n = exp.instances;
    let data = (app.generate)(DataConfig { scale: exp.scale, seed: exp.seed });
    let mut sim: Simulation<ConveyorBelt, SqliteStorage> = Simulation::new(exp.topology.clone(), exp.seed)?;
    let cfg = BeltConfig { instances: n, global_execution: exp.global_execution, idle_pause: Duration::from_micros(exp.idle_pause_us) };
    for i in 0..n {
        let id = InstanceId(i);
        let storage = SqliteStorage::open_in_memory(app.clone(), id)?;
        storage.create_schema()?;
        load_partition(&storage, &data, &plan, id, n)?;
        sim.add_node(ConveyorBelt::new(id, cfg.clone(), app.clone(), plan.clone()), exp.topology.instance_site(i), storage)?;
    }
    let end = Time::ZERO + Duration::from_secs_f64(exp.warmup_s + exp.measure_s);
    let think = if exp.think_ms > 0.0 { ThinkTime::Exponential { mean: Duration::from_secs_f64(exp.think_ms / 1e3) } } else { ThinkTime::None };
    for c in 0..exp.clients {
        let (site, ctx) = exp.client_placement(c);
        let client = ClosedLoopClient::new(ClientId(c as u64), ctx, exp.workload.client(exp.scale), exp.seed, think).stop_at(end);
        sim.add_client(Box::new(client), site)?;
    }

    let start = Time::ZERO + Duration::from_secs_f64(exp.warmup_s);
    let mut metrics = Metrics::new(start, end);
    let mut history: Vec<Completion> = Vec::new();
    let last_completion = std::cell::Cell::new(Time::ZERO);
    let bar = progress_bar(progress, exp);
    let mut record = |now: Time, c: &Completion| {
        metrics.record(c);
        if exp.check {
            history.push(c.clone());
        }
        last_completion.set(now);
    };
    // One virtual second at a time, for the progress bar and the CPU snapshot at the window start.
    let mut t = Time::ZERO;
    let mut busy_at_start = vec![];
    while t < end {
        let next = (t + Duration::from_secs(1)).min(end);
        if t < start && next >= start {
            sim.run_until(start, &mut record);
            busy_at_start = busy(&sim, n);
        }
        sim.run_until(next, &mut record);
        t = next;
        bar.set_position(t.as_secs_f64() as u64);
    }
    let busy_at_end = busy(&sim, n);
    loop {
        let next = sim.now() + Duration::from_secs(1);
        sim.run_until(next, &mut record);
        if next.saturating_sub(last_completion.get().max(end)) >= QUIET || next.saturating_sub(end) >= MAX_DRAIN {
            break;
        }
    }
    bar.finish_and_clear();

    let window = Duration::from_secs_f64(exp.measure_s) * exp.topology.cpu.cores;
    let cpu_utilisation = busy_at_end
        .iter()
        .zip(busy_at_start.iter().chain(std::iter::repeat(&Duration::ZERO)))
        .map(|(e, s)| ((e.saturating_sub(*s)).as_secs_f64() / window.as_secs_f64() * 1e3).round() / 1e3)
        .collect();
    let stats = sim.stats();
    let sim_figures = SimFigures { events: stats.events, messages: stats.messages_sent, virtual_s: sim.now().as_secs_f64(), cpu_utilisation };
    let belt = (0..n).map(|i| serde_json::to_value(sim.node(InstanceId(i)).stats()).expect("stats serialize")).collect();
    let halted: Vec<String> = (0..n).filter_map(|i| sim.node(InstanceId(i)).halted().map(|m| format!("i{i}: {m}"))).collect();

    let storages = sim.into_storages();
    let result = RunResult { experiment: exp.clone(), summary: metrics.summary(), check: None, check_passed: None, sim: Some(sim_figures), belt };
    Ok(Simulated { result, app, plan, data, history, storages, halted })
}

fn busy(sim: &Simulation<ConveyorBelt, SqliteStorage>, n: u32) -> Vec<Duration> {
    (0..n).map(|i| sim.stats().node(InstanceId(i)).map(|s| s.busy).unwrap_or_default()).collect()
}

/// Loads the rows instance `id` holds: all of every replicated table, its partitions of the others.
pub fn load_partition(
    storage: &SqliteStorage,
    data: &ensemble_app::Dataset,
    plan: &PartitionPlan,
    id: InstanceId,
    n: u32,
) -> anyhow::Result<u64> {
    Ok(storage.load(data, |table, cols, row| plan.holds_row(table, id, n, |c| cols.iter().position(|x| x == c).map(|p| &row[p])))?)
}

fn progress_bar(progress: bool, exp: &Experiment) -> indicatif::ProgressBar {
    if !progress {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new((exp.warmup_s + exp.measure_s) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} virtual s ({elapsed})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(exp.label.clone());
    bar
}
