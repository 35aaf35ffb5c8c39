//! Checks a history file: `cargo run --release -p ensemble-history --example check -- HISTORY.json
//! [ser|us|si|psi|nmsi|rc]` (all six when no criterion is given). Prints each verdict and the
//! time taken; exits with 1 when a criterion fails, 2 when the file cannot be read.

use ensemble_history::{check, check_all, Criterion, History};
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: check HISTORY.json [ser|us|si|psi|nmsi|rc]");
        return ExitCode::from(2);
    };
    let start = Instant::now();
    let history = match History::load(path) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    eprintln!(
        "loaded {} transactions in {:.2} s",
        history.len(),
        start.elapsed().as_secs_f64()
    );
    let start = Instant::now();
    let reports = match args.get(1).map(|c| c.parse::<Criterion>()) {
        None => check_all(&history),
        Some(Ok(c)) => vec![check(&history, c)],
        Some(Err(e)) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    for r in &reports {
        println!("{r}");
    }
    eprintln!("checked in {:.2} s", start.elapsed().as_secs_f64());
    if reports.iter().all(|r| r.ok()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
