//! The figures' plots: written beside each figure's result file under the same name, and redrawn
//! from such a file (`ensemble figure NAME --replot FILE`) without running the figure again.

use anyhow::Context;
use ensemble_bench::{plots, RunResult};
use ensemble_plot::Chart;
use std::path::Path;

/// The plot of a figure that keeps its runs (every one but `xcast-latency`, which plots its own
/// rows, and `overhead`, which writes no file).
fn chart(name: &str, runs: &[RunResult]) -> Option<Chart> {
    match name {
        "gyro-fig3" => Some(plots::gyro_fig3(runs)),
        "gyro-fig4" => Some(plots::gyro_fig4(runs)),
        "table3" => Some(plots::table3(runs)),
        "wan-scaling" => Some(plots::wan_scaling(runs)),
        "gyro-fig5" => Some(plots::gyro_fig5(runs)),
        other => ensemble_gdur::figures::chart(other, runs),
    }
}

/// Writes `STEM.svg` and `STEM.png` for figure `name`.
pub fn write(name: &str, runs: &[RunResult], stem: &Path) -> anyhow::Result<()> {
    let chart = chart(name, runs).with_context(|| format!("figure `{name}` has no plot"))?;
    for path in ensemble_plot::render(&chart, stem).map_err(anyhow::Error::msg)? {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Redraws figure `name`'s plot from its result file, beside it, and prints the figure's table
/// again, computed from the runs alone.
pub fn replot(name: &str, file: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file).with_context(|| format!("--replot {}", file.display()))?;
    let stem = file.with_extension("");
    if name == "xcast-latency" {
        let rows: Vec<ensemble_xcast::latency::Row> = serde_json::from_str(&text).with_context(|| format!("{}: not xcast-latency's rows", file.display()))?;
        for path in ensemble_xcast::latency::plot(&rows, &stem).map_err(anyhow::Error::msg)? {
            eprintln!("wrote {}", path.display());
        }
        return Ok(());
    }
    let runs: Vec<RunResult> = serde_json::from_str(&text).with_context(|| format!("{}: not a figure's runs", file.display()))?;
    use ensemble_bench::figures;
    // The figures of one application name it in their title; their runs say which it was.
    let app = || runs.first().map(|r| r.experiment.workload.app().to_string()).with_context(|| format!("{}: no runs", file.display()));
    // The table first: a P-Store figure refuses runs that are not its own before a plot is drawn.
    let fig = match name {
        "gyro-fig3" => figures::gyro_fig3_table(runs),
        "gyro-fig4" => figures::gyro_fig4_table(runs),
        "table3" => figures::table3_table(&app()?, runs),
        "wan-scaling" => figures::wan_scaling_table(&app()?, runs),
        "gyro-fig5" => figures::fig5_table(&app()?, runs),
        other => match ensemble_gdur::figures::table(other, runs) {
            Some(fig) => fig.with_context(|| format!("{}: not {other}'s runs", file.display()))?,
            None => anyhow::bail!("figure `{other}` writes no result file to draw again"),
        },
    };
    write(name, &fig.runs, &stem)?;
    println!("{}\n\n{}", fig.title, fig.table);
    let steered = fig.runs.first().and_then(|r| match r.experiment.workload {
        ensemble_bench::WorkloadSpec::Tpcw { write_share } | ensemble_bench::WorkloadSpec::Rubis { write_share, .. } => write_share,
        _ => None,
    });
    if let Some(s) = steered {
        println!("{}", steered_line(s));
    }
    Ok(())
}

/// What a figure whose mix was steered (`--write-share`) prints under its table.
pub fn steered_line(share: f64) -> String {
    format!("mix steered to {:.0}% writing transactions (--write-share {share})", share * 100.0)
}
