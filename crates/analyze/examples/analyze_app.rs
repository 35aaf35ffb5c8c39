//! Prints the analyzer's report for a shipped application: `cargo run -p ensemble-analyze
//! --example analyze_app -- shop [--explain] [--dialect postgres]` (the CLI proper is `ensemble
//! analyze`).
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut cmd = ensemble_analyze::Command { app: args.first().cloned().unwrap_or_else(|| "shop".into()), ..Default::default() };
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--explain" => cmd.explain = true,
            "--dialect" => {
                i += 1;
                cmd.dialect = args.get(i).and_then(|d| d.parse().ok()).unwrap_or_default();
            }
            "--weights" => {
                i += 1;
                cmd.weights = args.get(i).map(Into::into);
            }
            "--out" => {
                i += 1;
                cmd.out = args.get(i).map(Into::into);
            }
            other => {
                eprintln!("unknown argument {other}");
                std::process::exit(2);
            }
        }
        i += 1;
    }
    match ensemble_analyze::run(&cmd) {
        Ok(text) => print!("{text}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
