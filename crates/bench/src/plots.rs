//! The plots of the figures in [`crate::figures`], each drawn from the figure's runs alone, so
//! that a figure's result file redraws its plot (`ensemble figure NAME --replot FILE`). Each
//! function returns the chart; `ensemble_plot::render` writes it as SVG and PNG.

use crate::experiment::{System, WorkloadSpec};
use crate::figures::config_name;
use crate::metrics::INTERACTION;
use crate::report::RunResult;
use ensemble_plot::{Chart, Corner, Line, Marker, Panel, Scale, Series};

/// A class's mean latency in a run; NaN (left out of a plot) when the run had none.
pub fn mean_ms(r: &RunResult, class: &str) -> f64 {
    r.summary.classes.get(class).map_or(f64::NAN, |c| c.mean_ms)
}

/// Mean latency against throughput, one point per run, in the order given (the figures add
/// clients from one run to the next).
pub fn load_curve<'a>(runs: impl IntoIterator<Item = &'a RunResult>) -> Vec<(f64, f64)> {
    runs.into_iter().map(|r| (r.summary.throughput, mean_ms(r, "all"))).collect()
}

/// The runs grouped by `key`, groups in the order of their first run.
pub fn group_by<'a, K: PartialEq>(runs: impl IntoIterator<Item = &'a RunResult>, key: impl Fn(&RunResult) -> K) -> Vec<(K, Vec<&'a RunResult>)> {
    let mut groups: Vec<(K, Vec<&RunResult>)> = Vec::new();
    for r in runs {
        let k = key(r);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, members)) => members.push(r),
            None => groups.push((k, vec![r])),
        }
    }
    groups
}

pub(crate) fn local_fraction(r: &RunResult) -> f64 {
    match r.experiment.workload {
        WorkloadSpec::Micro { local_fraction } => local_fraction,
        _ => f64::NAN,
    }
}

/// The application and, when steered, the mix, as the figures' titles say them.
fn app_and_mix(runs: &[RunResult]) -> String {
    match runs.first().map(|r| &r.experiment.workload) {
        Some(w @ (WorkloadSpec::Tpcw { write_share: Some(s) } | WorkloadSpec::Rubis { write_share: Some(s), .. })) => {
            format!("{} at {:.0} % writes", w.app(), s * 100.0)
        }
        Some(w) => w.app().to_string(),
        None => "no runs".into(),
    }
}

fn latency_against_throughput() -> Panel {
    Panel { x_label: "throughput (ops/s)".into(), y_label: "mean latency (ms)".into(), ..Panel::default() }
}

/// Gyro Fig. 3(a): the mean latency of local requests, of global ones and of all, against the
/// share of local requests, under light load.
pub fn gyro_fig3(runs: &[RunResult]) -> Chart {
    let at = |class: &str| runs.iter().map(|r| (local_fraction(r) * 100.0, mean_ms(r, class))).collect();
    let panel = Panel {
        x_label: "local requests (%)".into(),
        y_label: "mean latency (ms)".into(),
        series: vec![Series::line("local", 0, at("local")), Series::line("global", 1, at("global")), Series::line("all", 2, at("all"))],
        legend: Corner::UpperRight,
        ..Panel::default()
    };
    Chart {
        caption: "Gyro Fig. 3(a): micro-benchmark latency under light load (wan5, 3 instances, 5 clients)".into(),
        panels: vec![panel],
        panel_size: (640, 440),
    }
}

/// Gyro Fig. 4: mean latency against throughput as clients are added, one curve per share of
/// local requests.
pub fn gyro_fig4(runs: &[RunResult]) -> Chart {
    let series = group_by(runs, |r| local_fraction(r).to_bits())
        .into_iter()
        .enumerate()
        .map(|(i, (bits, runs))| Series::line(format!("{:.0} % local", f64::from_bits(bits) * 100.0), i, load_curve(runs)))
        .collect();
    Chart {
        caption: "Gyro Fig. 4: micro-benchmark latency against throughput as clients are added (wan5, 3 instances)".into(),
        panels: vec![Panel { series, ..latency_against_throughput() }],
        panel_size: (640, 440),
    }
}

/// Gyro Table III, per interaction, for the configurations of [`crate::figures::WAN_CONFIGS`]
/// in that order (ms).
fn gyro_table3(app: &str) -> Option<[f64; 7]> {
    match app {
        "tpcw" => Some([1390.0, 671.0, 436.0, 29.0, 902.0, 521.0, 129.0]),
        "rubis" => Some([416.0, 182.0, 155.0, 35.0, 145.0, 131.0, 96.0]),
        _ => None,
    }
}

/// Table III as points: the mean latency under light load of each configuration (categories
/// on the x axis, a log scale on y, since five instances are an order of magnitude below one),
/// per transaction and, where the application has web interactions, per interaction; for TPC-W
/// and RUBiS, Gyro's Table III (which it measured per interaction) as triangles.
pub fn table3(runs: &[RunResult]) -> Chart {
    let names: Vec<String> = runs.iter().map(configuration).collect();
    let x = |i: usize| i as f64;
    let at = |class: &str| runs.iter().enumerate().map(|(i, r)| (x(i), mean_ms(r, class))).collect::<Vec<_>>();
    let mut series = vec![Series::points("ours, per transaction", 0, Marker::Circle, at("all"))];
    if runs.iter().any(|r| r.summary.classes.contains_key(INTERACTION)) {
        series.push(Series::points("ours, per interaction", 1, Marker::Cross, at(INTERACTION)));
    }
    let app = runs.first().map_or("", |r| r.experiment.workload.app());
    if let Some(paper) = gyro_table3(app) {
        let config_names: Vec<String> = crate::figures::WAN_CONFIGS.iter().map(|&(s, n)| config_name(s, n)).collect();
        let points = names.iter().enumerate().filter_map(|(i, n)| config_names.iter().position(|c| c == n).map(|k| (x(i), paper[k]))).collect();
        series.push(Series::points("Gyro Table III", 2, Marker::Triangle, points));
    }
    let panel = Panel {
        x_label: "configuration".into(),
        y_label: "mean latency (ms)".into(),
        x_ticks: Some(names.iter().enumerate().map(|(i, n)| (x(i), n.clone())).collect()),
        y_scale: Scale::Log10,
        series,
        legend: Corner::UpperRight,
        ..Panel::default()
    };
    Chart {
        caption: format!("Table III, {}: mean latency under light load (wan5, one client per site)", app_and_mix(runs)),
        panels: vec![panel],
        panel_size: (820, 440),
    }
}

/// A run's configuration as Table III names it.
fn configuration(r: &RunResult) -> String {
    match System::parse(&r.experiment.system) {
        Ok(s) => config_name(s, r.experiment.instances),
        Err(_) => format!("{}-{}", r.experiment.system, r.experiment.instances),
    }
}

/// Gyro Fig. 6 / Eliá Fig. 4: mean latency against throughput as clients are added, one curve
/// per configuration; a colour per instance count, Ensemble solid, the read-only baseline
/// dashed.
pub fn wan_scaling(runs: &[RunResult]) -> Chart {
    let colour = |n: u32| match n {
        1 => 0,
        2 => 1,
        3 => 2,
        5 => 3,
        other => other as usize,
    };
    let series = group_by(runs, |r| (r.experiment.system.clone(), r.experiment.instances))
        .into_iter()
        .map(|((system, n), runs)| {
            let line = if system == System::ReadOnly.name() { Line::Dashed } else { Line::Solid };
            Series { line, ..Series::line(configuration(runs[0]), colour(n), load_curve(runs)) }
        })
        .collect();
    Chart {
        caption: format!("WAN scaling, {}: latency against throughput as clients are added (wan5)", app_and_mix(runs)),
        panels: vec![Panel { series, legend: Corner::UpperRight, ..latency_against_throughput() }],
        panel_size: (720, 460),
    }
}

/// Gyro Fig. 5: peak throughput (mean latency under 2 s) and minimal mean latency against the
/// number of instances, Ensemble and the two-phase-commit baseline.
pub fn gyro_fig5(runs: &[RunResult]) -> Chart {
    let app = runs.first().map_or("", |r| r.experiment.workload.app());
    let (server, prepared) = match runs.first().and_then(|r| r.experiment.backend.kind.engine()) {
        Some(ensemble_server::Engine::Postgres) => ("PostgreSQL", "2PC (PREPARE TRANSACTION)"),
        Some(ensemble_server::Engine::Mariadb) => ("MariaDB", "2PC (XA)"),
        None => ("SQLite", "2PC"),
    };
    let points = |system: &str| -> Vec<(f64, Option<f64>, Option<f64>)> {
        group_by(runs.iter().filter(|r| r.experiment.system == system), |r| r.experiment.instances)
            .into_iter()
            .map(|(n, group)| {
                let p = crate::figures::fig5_point(&group);
                (f64::from(n), p.peak, p.min_latency)
            })
            .collect()
    };
    let (e, t) = (points("ensemble"), points("2pc"));
    let peak = |v: &[(f64, Option<f64>, Option<f64>)]| v.iter().map(|(n, p, _)| (*n, p.unwrap_or(f64::NAN))).collect::<Vec<_>>();
    let min = |v: &[(f64, Option<f64>, Option<f64>)]| v.iter().map(|(n, _, m)| (*n, m.unwrap_or(f64::NAN))).collect::<Vec<_>>();
    let throughput = Panel {
        x_label: "instances".into(),
        y_label: "peak throughput (ops/s, mean < 2 s)".into(),
        series: vec![Series::line("Ensemble", 0, peak(&e)), Series::line(prepared, 1, peak(&t))],
        legend: Corner::UpperRight,
        ..Panel::default()
    };
    let latency = Panel {
        x_label: "instances".into(),
        y_label: "minimal mean latency (ms)".into(),
        y_scale: Scale::Log10,
        series: vec![Series::line("Ensemble", 0, min(&e)), Series::line(prepared, 1, min(&t))],
        legend: Corner::UpperRight,
        ..Panel::default()
    };
    Chart {
        caption: format!("Gyro Fig. 5, {app}: Ensemble against two-phase commit in the LAN (real processes, {server})"),
        panels: vec![throughput, latency],
        panel_size: (560, 400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::Experiment;
    use crate::metrics::{ClassSummary, Summary};
    use ensemble_core::topology::Topology;
    use std::collections::BTreeMap;

    /// A run of `app` on `system` with `n` instances that measured `throughput` and these class
    /// means.
    fn run(app: &str, system: System, n: u32, workload: Option<WorkloadSpec>, throughput: f64, classes: &[(&str, f64)]) -> RunResult {
        let mut experiment = Experiment::new(app, system, n, Topology::wan5()).unwrap();
        if let Some(w) = workload {
            experiment.workload = w;
        }
        let class = |mean_ms: f64| ClassSummary { count: 10, throughput, mean_ms, p50_ms: mean_ms, p90_ms: mean_ms, p99_ms: mean_ms, max_ms: mean_ms };
        let summary = Summary {
            window_s: 1.0,
            throughput,
            classes: classes.iter().map(|&(c, m)| (c.to_string(), class(m))).collect(),
            phases: BTreeMap::new(),
            aborted: 0,
            aborts_by_cause: BTreeMap::new(),
            errors: 0,
            error_kinds: Default::default(),
            redirects: 0,
        };
        RunResult { experiment, summary, check: None, check_passed: Some(true), sim: None, processes: vec![], partial: None }
    }

    fn micro(local: f64, throughput: f64, mean: f64) -> RunResult {
        let w = WorkloadSpec::Micro { local_fraction: local };
        run("micro", System::Ensemble, 3, Some(w), throughput, &[("all", mean), ("local", mean / 2.0), ("global", mean * 2.0)])
    }

    /// Renders `chart` into a temporary directory; both files must be there, the SVG with
    /// `caption` and every one of `texts` as text, the PNG of more than a blank page's bytes.
    fn renders(chart: &Chart, caption: &str, texts: &[&str]) {
        let dir = tempfile::tempdir().unwrap();
        let [svg, png] = ensemble_plot::render(chart, &dir.path().join("figure-test-seed1")).unwrap();
        let text = std::fs::read_to_string(svg).unwrap();
        assert!(text.contains(caption), "no caption `{caption}` in the SVG");
        for t in texts {
            assert!(text.contains(t), "no `{t}` in the SVG");
        }
        assert!(std::fs::metadata(png).unwrap().len() > 4_000);
    }

    #[test]
    fn gyro_fig3_plots_each_class_against_the_local_share() {
        let runs = vec![micro(0.0, 10.0, 400.0), micro(0.5, 20.0, 200.0), micro(0.9, 30.0, 60.0)];
        let chart = gyro_fig3(&runs);
        assert_eq!(chart.panels[0].series[1].points, vec![(0.0, 800.0), (50.0, 400.0), (90.0, 120.0)]);
        renders(&chart, "Gyro Fig. 3(a): micro-benchmark latency", &["local requests (%)", "global"]);
    }

    #[test]
    fn gyro_fig4_draws_a_curve_per_local_share() {
        let runs = vec![micro(0.1, 10.0, 100.0), micro(0.1, 20.0, 900.0), micro(0.9, 50.0, 80.0), micro(0.9, 90.0, 6000.0)];
        let chart = gyro_fig4(&runs);
        assert_eq!(chart.panels[0].series.len(), 2);
        assert_eq!(chart.panels[0].series[1].points, vec![(50.0, 80.0), (90.0, 6000.0)]);
        renders(&chart, "Gyro Fig. 4: micro-benchmark latency against throughput", &["10 % local", "90 % local"]);
    }

    #[test]
    fn table3_puts_the_papers_values_beside_ours() {
        let w = Some(WorkloadSpec::Tpcw { write_share: Some(0.3) });
        let runs = vec![
            run("tpcw", System::Centralized, 1, w.clone(), 5.0, &[("all", 700.0), (INTERACTION, 1400.0)]),
            run("tpcw", System::Ensemble, 5, w, 5.0, &[("all", 20.0), (INTERACTION, 30.0)]),
        ];
        let chart = table3(&runs);
        let paper = chart.panels[0].series.iter().find(|s| s.label.as_deref() == Some("Gyro Table III")).unwrap();
        assert_eq!(paper.points, vec![(0.0, 1390.0), (1.0, 29.0)]);
        renders(&chart, "Table III, tpcw at 30 % writes: mean latency", &["Centralized", "Ensemble-5", "ours, per interaction"]);
    }

    #[test]
    fn wan_scaling_draws_a_curve_per_configuration() {
        let runs = vec![
            run("shop", System::Centralized, 1, None, 10.0, &[("all", 100.0)]),
            run("shop", System::Centralized, 1, None, 12.0, &[("all", 5100.0)]),
            run("shop", System::ReadOnly, 3, None, 30.0, &[("all", 90.0)]),
            run("shop", System::Ensemble, 3, None, 50.0, &[("all", 80.0)]),
        ];
        let chart = wan_scaling(&runs);
        let lines: Vec<Line> = chart.panels[0].series.iter().map(|s| s.line).collect();
        assert_eq!(lines, vec![Line::Solid, Line::Dashed, Line::Solid]);
        renders(&chart, "WAN scaling, shop: latency against throughput", &["Read-only-3", "Ensemble-3"]);
    }
}

