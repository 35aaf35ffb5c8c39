//! The throughput-against-latency sweeps (Gyro Fig. 4, Eliá Fig. 4), driven by a queueing model
//! instead of simulations so that the stopping and stepping rules are tested in milliseconds.

use ensemble_bench::figures::{self, next_client_step, step_warmup_s, FigureOpts, LATENCY_LIMIT_MS};
use ensemble_bench::{ClassSummary, Experiment, Runtime, RunResult, Summary};
use std::collections::BTreeMap;

/// A closed loop in front of a server of `instances × 1,000` operations per second, 50 ms away:
/// throughput = min(clients / 50 ms, capacity), latency = clients / throughput (Little's law).
fn queue_model(e: &Experiment, _progress: bool) -> anyhow::Result<RunResult> {
    let capacity = 1_000.0 * e.instances as f64;
    let throughput = (e.clients as f64 / 0.05).min(capacity);
    let mean_ms = e.clients as f64 / throughput * 1e3;
    let all = ClassSummary { count: (throughput * e.measure_s) as u64, throughput, mean_ms, p50_ms: mean_ms, p90_ms: mean_ms, p99_ms: mean_ms, max_ms: mean_ms };
    let summary = Summary {
        window_s: e.measure_s,
        throughput,
        classes: BTreeMap::from([("all".to_string(), all)]),
        phases: BTreeMap::new(),
        aborted: 0,
        aborts_by_cause: BTreeMap::new(),
        errors: 0,
        error_kinds: Default::default(),
        redirects: 0,
    };
    Ok(RunResult { experiment: e.clone(), summary, check: Some("model".into()), check_passed: Some(true), sim: None, processes: vec![], partial: None })
}

fn opts(jobs: usize, runtime: Runtime) -> FigureOpts {
    FigureOpts { run: queue_model, jobs, runtime, progress: false, ..FigureOpts::default() }
}

fn mean(r: &RunResult) -> f64 {
    r.summary.classes["all"].mean_ms
}

#[test]
fn every_series_goes_on_past_the_listed_steps_until_latency_passes_the_limit() {
    let fig = figures::wan_scaling("shop", &opts(1, Runtime::Sim), &[10, 40], None).unwrap();
    for config in ["shop-centralized-1", "shop-ensemble-5", "shop-read-only-3"] {
        let series: Vec<&RunResult> = fig.runs.iter().filter(|r| r.experiment.label.starts_with(config)).collect();
        assert!(series.len() > 2, "{config}: only the listed steps ran");
        let (last, before) = (series[series.len() - 1], series[series.len() - 2]);
        assert!(mean(last) > LATENCY_LIMIT_MS, "{config}: stopped at {} ms", mean(last));
        assert!(mean(before) <= LATENCY_LIMIT_MS, "{config}: went on after passing the limit");
        // Clients only grow, and at saturation one Little's-law step reaches the limit.
        assert!(series.windows(2).all(|w| w[1].experiment.clients > w[0].experiment.clients));
        assert!(last.experiment.clients <= 8 * before.experiment.clients);
    }
    assert!(!fig.table.contains(" no\n") && !fig.table.ends_with(" no"), "a series did not reach 5 s:\n{}", fig.table);
}

#[test]
fn series_run_side_by_side_give_the_same_figure() {
    let one = figures::wan_scaling("shop", &opts(1, Runtime::Sim), &[10, 40, 160], None).unwrap();
    let three = figures::wan_scaling("shop", &opts(3, Runtime::Sim), &[10, 40, 160], None).unwrap();
    assert_eq!(one.table, three.table);
    let labels = |f: &figures::Figure| f.runs.iter().map(|r| r.experiment.label.clone()).collect::<Vec<_>>();
    assert_eq!(labels(&one), labels(&three));
}

#[test]
fn real_runs_stop_at_the_listed_steps() {
    let fig = figures::wan_scaling("shop", &opts(4, Runtime::Real), &[10, 40], None).unwrap();
    assert_eq!(fig.runs.len(), 2 * figures::WAN_CONFIGS.len());
    assert!(fig.table.contains(" no"), "the summary should say the limit was not reached:\n{}", fig.table);
}

#[test]
fn the_next_step_follows_littles_law_within_bounds() {
    // Saturated at 2,000 ops/s with 1,000 clients (0.5 s): 1.1 × 5 s × 2,000 = 11,000 clients.
    assert_eq!(next_client_step(1_000, 2_000.0), 8_000, "at most eightfold");
    assert_eq!(next_client_step(4_000, 2_000.0), 11_000);
    // Already near the limit: still at least a quarter more clients.
    assert_eq!(next_client_step(10_000, 2_000.0), 12_500);
    assert_eq!(next_client_step(1, 0.0), 2);
    assert_eq!(next_client_step(u32::MAX, f64::INFINITY), u32::MAX);
}

#[test]
fn the_warm_up_outlasts_the_first_queue() {
    assert_eq!(step_warmup_s(5.0, 10, None), 5.0);
    assert_eq!(step_warmup_s(5.0, 100, Some(2_000.0)), 5.0, "a short queue keeps the configured warm-up");
    // 11,000 clients at 2,000 ops/s queue 5.5 s: 1.5 × 5.5 = 8.25, rounded up.
    assert_eq!(step_warmup_s(5.0, 11_000, Some(2_000.0)), 9.0);
    assert_eq!(step_warmup_s(5.0, 1_000_000, Some(1.0)), 15.0, "capped at three times the limit");
}

/// What `ensemble figure NAME --replot FILE` prints: the table computed again from the runs as
/// the figure's JSON file keeps them must be the table the figure printed.
#[test]
fn each_belt_figures_table_is_printed_again_from_its_result_file() {
    fn from_file(fig: &figures::Figure) -> Vec<RunResult> {
        serde_json::from_str(&serde_json::to_string(&fig.runs).unwrap()).unwrap()
    }
    let o = opts(1, Runtime::Sim);
    let fig3 = figures::gyro_fig3(&o).unwrap();
    let again = figures::gyro_fig3_table(from_file(&fig3));
    assert_eq!((again.title, again.table), (fig3.title.clone(), fig3.table.clone()));
    assert_eq!(fig3.table.lines().count(), 2 + 10, "a row per local fraction:\n{}", fig3.table);
    let fig4 = figures::gyro_fig4(&o, &[10, 40]).unwrap();
    let again = figures::gyro_fig4_table(from_file(&fig4));
    assert_eq!((again.title, again.table), (fig4.title.clone(), fig4.table.clone()));
    assert!(fig4.table.contains("\n90 "), "the 90 % sweep's rows:\n{}", fig4.table);
    let table3 = figures::table3("shop", &o, None).unwrap();
    let again = figures::table3_table("shop", from_file(&table3));
    assert_eq!((again.title, again.table), (table3.title.clone(), table3.table.clone()));
    assert!(table3.table.contains("Ensemble-5") && table3.table.contains("1.0x"), "{}", table3.table);
    let wan = figures::wan_scaling("shop", &o, &[10, 40], None).unwrap();
    let again = figures::wan_scaling_table("shop", from_file(&wan));
    assert_eq!((again.title, again.table), (wan.title.clone(), wan.table.clone()));
}
