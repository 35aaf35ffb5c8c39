//! Every input of the `ensemble` command is checked where it enters: a bad flag value, topology
//! file, plan file or output directory is refused before any run starts, with a message that names
//! the flag or file and the value, and without a panic.

use std::path::Path;
use std::process::Command;

/// Short windows for the commands that measure, unless the row sets its own: should a bad value
/// get through, the run it starts ends soon, and the row fails on its exit status.
fn fast(args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    if matches!(args.first(), Some(&"bench") | Some(&"figure")) {
        for (flag, value) in [("--measure", "0.1"), ("--warmup", "0")] {
            if !args.iter().any(|a| a.starts_with(flag)) {
                v.extend([flag.to_string(), value.to_string()]);
            }
        }
        v.push("--quiet".into());
    }
    v
}

/// Writes `text` to `dir/name` and returns the path as the command sees it.
fn file(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn every_bad_input_is_refused_up_front_naming_flag_or_file_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bad_cpu = file(
        d,
        "t.toml",
        "name = \"t\"\nsites = [\"dc\"]\none_way_ms = [[0.1]]\n\n[cpu]\ncores = 2\nmessage_us = 20.0\nexecute_us = -1000.0\napply_change_us = 50.0\n",
    );
    let bad_matrix = file(d, "m.toml", "name = \"m\"\nsites = [\"a\", \"b\"]\none_way_ms = [[0.1, 1.0]]\n");
    let bad_plan = file(d, "bad.toml", "application = \"shop\"\nthis is not toml\n");
    let regular = file(d, "regular", "");
    let under_regular = format!("{regular}/x");
    let missing_dir = d.join("no-such-dir").display().to_string();
    let history_in_missing = format!("{missing_dir}/h.json");
    let plan_in_missing = format!("{missing_dir}/plan.toml");
    let missing_toml = d.join("missing.toml").display().to_string();

    // (arguments, what stderr must contain: the flag or file, the value, the reason)
    let rows: Vec<(Vec<&str>, Vec<&str>)> = vec![
        // ensemble bench: numbers
        (vec!["bench", "tpcb", "--system", "p-store", "--store-dir", "/no/such/dir"], vec!["'--store-dir <DIR>'", "no such directory"]),
        (vec!["bench", "--store-dir", "."], vec!["--store-dir are for the G-DUR systems"]),
        (vec!["bench", "--measure", "NaN"], vec!["'--measure <MEASURE>'", "NaN is not a finite number of seconds"]),
        // ensemble bench: restarting a node within a run
        (vec!["bench", "--restart-node", "1"], vec!["'--restart-node <HOST@SECONDS>'", "`1` is not HOST@SECONDS"]),
        (vec!["bench", "--restart-node", "x@2"], vec!["'--restart-node <HOST@SECONDS>'", "host `x` is not a host number"]),
        (vec!["bench", "--restart-node", "1@soon"], vec!["'--restart-node <HOST@SECONDS>'", "`soon` is not a number of seconds"]),
        (vec!["bench", "--restart-node", "1@2"], vec!["--restart-node kills and starts again a node process: it is for real runs (--real)"]),
        (vec!["bench", "--real", "--restart-node", "1@0.05"], vec!["--restart-node: ensemble nodes cannot start again", "only 2pc's nodes recover"]),
        (vec!["bench", "--real", "--restart-node", "1@5"], vec!["host 1: a restart's time = 5 must be <= 0.1"]),
        (vec!["bench", "--measure", "inf"], vec!["'--measure <MEASURE>'", "inf is not a finite number of seconds"]),
        (vec!["bench", "--measure", "1e300"], vec!["'--measure <MEASURE>'", "1e300 is out of range: a window is more than 0 and at most 86400 seconds"]),
        (vec!["bench", "--measure", "0"], vec!["'--measure <MEASURE>'", "0 is out of range"]),
        (vec!["bench", "--measure", "ten"], vec!["'--measure <MEASURE>'", "ten is not a number of seconds"]),
        (vec!["bench", "--warmup=-1"], vec!["'--warmup <WARMUP>'", "-1 is out of range: a warm-up is 0 to 86400 seconds"]),
        (vec!["bench", "--think-ms=-5"], vec!["'--think-ms <THINK_MS>'", "-5 is out of range: a mean think time is 0 to 3600000 ms"]),
        (vec!["bench", "--think-ms", "-5"], vec!["'--think-ms <THINK_MS>'", "-5 is out of range"]),
        (vec!["bench", "--think-ms", "NaN"], vec!["'--think-ms <THINK_MS>'", "NaN is not a finite number of ms"]),
        (vec!["bench", "--browse-fraction", "NaN"], vec!["'--browse-fraction <BROWSE_FRACTION>'", "NaN is not a finite number"]),
        (vec!["bench", "--browse-fraction", "2"], vec!["'--browse-fraction <BROWSE_FRACTION>'", "2 is out of range: a fraction is 0 to 1"]),
        (vec!["bench", "micro", "--local-fraction=-0.5"], vec!["'--local-fraction <LOCAL_FRACTION>'", "-0.5 is out of range: a fraction is 0 to 1"]),
        (vec!["bench", "--execute-ms=-1"], vec!["'--execute-ms <EXECUTE_MS>'", "-1 is out of range: a service time is 0 to 3600000 ms"]),
        (vec!["bench", "--execute-ms", "inf"], vec!["'--execute-ms <EXECUTE_MS>'", "inf is not a finite number of ms"]),
        (vec!["bench", "--scale", "0"], vec!["'--scale <SCALE>'", "0 is not in 1..=1000"]),
        (vec!["bench", "--scale", "1001"], vec!["'--scale <SCALE>'", "1001 is not in 1..=1000"]),
        (vec!["bench", "rubis", "--scale", "65"], vec!["--scale 65: rubis generates at most scale 64"]),
        (vec!["bench", "--clients", "4294967295"], vec!["'--clients <CLIENTS>'", "4294967295 is not in 1..=100000"]),
        (vec!["bench", "--clients", "0"], vec!["'--clients <CLIENTS>'", "0 is not in 1..=100000"]),
        (vec!["bench", "--instances", "3,0"], vec!["'--instances <INSTANCES>'", "0 is not in 1..=64"]),
        (vec!["bench", "--instances", "65"], vec!["'--instances <INSTANCES>'", "65 is not in 1..=64"]),
        (vec!["bench", "--cores", "0"], vec!["'--cores <CORES>'", "0 is not in 1..=1024"]),
        (vec!["bench", "--client-sites", "0,7"], vec!["--client-sites: 7 is not a site of topology `wan5`, whose sites are 0 to 4"]),
        // ensemble bench: files
        (vec!["bench", "--topology", "missing.toml"], vec!["'--topology <TOPOLOGY>'", "topology file missing.toml: no such file"]),
        (vec!["bench", "--topology", &missing_toml], vec!["'--topology <TOPOLOGY>'", "no such file"]),
        (vec!["bench", "--topology", "wan6"], vec!["'--topology <TOPOLOGY>'", "unknown topology preset `wan6`"]),
        (vec!["bench", "--topology", &bad_cpu], vec!["'--topology <TOPOLOGY>'", "t.toml: cpu.execute_us = -1000 must be >= 0"]),
        (vec!["bench", "--topology", &bad_matrix], vec!["m.toml: one_way_ms has 1 rows for 2 sites: it must be a 2x2 matrix"]),
        (vec!["bench", "--plan", &bad_plan], vec!["plan file", "bad.toml: TOML parse error"]),
        (vec!["bench", "--plan", "missing.toml"], vec!["'--plan <PLAN>'", "no such file"]),
        (vec!["bench", "--system", "centralized", "--plan", &bad_plan], vec!["--plan", "bad.toml: only the ensemble and 2pc systems run a plan"]),
        (vec!["bench", "--out", &under_regular], vec!["--out", "regular/x: cannot create the directory"]),
        (vec!["bench", "--history", &history_in_missing], vec!["'--history <HISTORY>'", "no-such-dir does not exist"]),
        (vec!["bench", "--history", d.to_str().unwrap()], vec!["'--history <HISTORY>'", "a directory, not a file"]),
        // ensemble figure
        (vec!["figure", "gyro-fig3", "--measure", "NaN"], vec!["'--measure <MEASURE>'", "NaN is not a finite number of seconds"]),
        (vec!["figure", "gyro-fig3", "--warmup", "1e300"], vec!["'--warmup <WARMUP>'", "1e300 is out of range"]),
        (vec!["figure", "gyro-fig3", "--cores", "2000"], vec!["'--cores <CORES>'", "2000 is not in 1..=1024"]),
        (vec!["figure", "gyro-fig4", "--clients", "10,4294967295"], vec!["'--clients <CLIENTS>'", "4294967295 is not in 1..=100000"]),
        (vec!["figure", "gyro-fig3", "--jobs", "0"], vec!["'--jobs <JOBS>'", "0 is not in 1..=256"]),
        (vec!["figure", "table3", "--app", "tpcw", "--write-share", "1.5"], vec!["'--write-share <WRITE_SHARE>'", "1.5 is out of range"]),
        (vec!["figure", "overhead", "--threads", "0"], vec!["'--threads <THREADS>'", "0 is not in 1..=256"]),
        (vec!["figure", "overhead", "--rounds", "0"], vec!["'--rounds <ROUNDS>'", "0 is not in 1..=100"]),
        (vec!["figure", "overhead", "--storage-workers", "0"], vec!["'--storage-workers <STORAGE_WORKERS>'", "0 is not in 1..=256"]),
        (vec!["figure", "table3", "--storage-workers", "3"], vec!["--storage-workers is for the overhead figure", "table3"]),
        (vec!["figure", "overhead", "--backend", "mariadb", "--storage-workers", "3"], vec!["--storage-workers prices the node's pool", "--backend postgres"]),
        (vec!["figure", "table3", "--writers-side-by-side"], vec!["--writers-side-by-side is for real runs of the Conveyor Belt's figures on PostgreSQL"]),
        (
            vec!["figure", "gyro-fig5", "--real", "--backend", "mariadb", "--writers-side-by-side"],
            vec!["--writers-side-by-side is for real runs of the Conveyor Belt's figures on PostgreSQL"],
        ),
        (vec!["figure", "pstore-fig2", "--writers-side-by-side"], vec!["--writers-side-by-side is for real runs"]),
        (vec!["figure", "table3", "--app", "nope"], vec!["--app: unknown application `nope`"]),
        (vec!["figure", "overhead", "--app", "nope"], vec!["--app: unknown application `nope`"]),
        (vec!["figure", "gyro-fig6"], vec!["invalid value 'gyro-fig6'", "gyro-fig5"]),
        (vec!["figure", "gyro-fig5"], vec!["gyro-fig5", "runs on a server: add --backend mariadb|postgres"]),
        (vec!["figure", "gyro-fig5", "--backend", "mariadb"], vec!["gyro-fig5 compares real processes", "add --real"]),
        (vec!["bench", "--system", "2pc"], vec!["2pc runs only as real processes"]),
        (vec!["bench", "--system", "2pc", "--real"], vec!["2pc runs on a server (--backend mariadb|postgres), not sqlite"]),
        (vec!["bench", "--no-writer-groups"], vec!["--no-writer-groups is for real runs of the Conveyor Belt on PostgreSQL"]),
        (vec!["bench", "--real", "--no-writer-groups"], vec!["--no-writer-groups is for real runs of the Conveyor Belt on PostgreSQL"]),
        (
            vec!["bench", "--real", "--backend", "mariadb", "--no-writer-groups"],
            vec!["--no-writer-groups", "on MariaDB local writers take the writer lock last and run side by side"],
        ),
        (vec!["bench", "--writers-side-by-side"], vec!["--writers-side-by-side is for real runs of the Conveyor Belt on PostgreSQL"]),
        (
            vec!["bench", "--real", "--backend", "mariadb", "--writers-side-by-side"],
            vec!["--writers-side-by-side", "on MariaDB local writers take the writer lock last and run side by side already"],
        ),
        (
            vec!["bench", "--real", "--backend", "postgres", "--system", "2pc", "--writers-side-by-side"],
            vec!["--writers-side-by-side is for real runs of the Conveyor Belt on PostgreSQL"],
        ),
        (vec!["bench", "--storage-workers", "3"], vec!["--storage-workers is for real runs: add --real"]),
        (vec!["bench", "--cpus", "0"], vec!["--cpus places real processes on this machine's cores: add --real"]),
        (vec!["bench", "--real", "--cpus", "x"], vec!["'--cpus <CORES>'", "`x` in `x` is not a core number"]),
        (vec!["bench", "--real", "--cpus", "1-0"], vec!["'--cpus <CORES>'", "the range `1-0` in `1-0` runs backwards"]),
        (vec!["bench", "--real", "--cpus", "1023"], vec!["--cpus: core 1023 is not one this process may run on (it may run on"]),
        (vec!["figure", "gyro-fig3", "--cpus", "0"], vec!["--cpus places real processes", "add --real"]),
        (vec!["bench", "--storage-workers", "0"], vec!["'--storage-workers <STORAGE_WORKERS>'", "0 is not in 1..=256"]),
        (vec!["figure", "gyro-fig3", "--out", &under_regular], vec!["--out", "regular/x: cannot create the directory"]),
        (vec!["figure", "xcast-latency", "--jobs", "300"], vec!["'--jobs <JOBS>'", "300 is not in 1..=256"]),
        (vec!["figure", "xcast-latency", "--out", &under_regular], vec!["--out", "regular/x: cannot create the directory"]),
        // ensemble sweep
        (vec!["sweep"], vec!["--runs <RUNS>", "required"]),
        (vec!["sweep", "--runs", "0"], vec!["'--runs <RUNS>'", "0 is not in 1..=1000000000"]),
        (vec!["sweep", "--runs", "ten"], vec!["'--runs <RUNS>'", "ten"]),
        (vec!["sweep", "--runs", "1000000001"], vec!["'--runs <RUNS>'", "1000000001 is not in 1..=1000000000"]),
        (vec!["sweep", "--runs", "1", "--primitive", "gossip"], vec!["'--primitive <PRIMITIVE>'", "`gossip` is not a primitive the sweep runs (known: reliable, broadcast, genuine", "p-store-2pc", "primitives, g-dur"]),
        (vec!["sweep", "--runs", "1", "--jobs", "0"], vec!["'--jobs <JOBS>'", "0 is not in 1..=256"]),
        (vec!["sweep", "--runs", "1", "--from=-1"], vec!["'--from <FROM>'", "-1"]),
        (vec!["sweep", "--runs", "2", "--from", "18446744073709551615"], vec!["--from 18446744073709551615 --runs 2: the last seed would pass 18446744073709551615"]),
        (vec!["sweep", "--runs", "1", "--out", &history_in_missing], vec!["'--out <OUT>'", "no-such-dir does not exist"]),
        (vec!["sweep", "--runs", "1", "--out", d.to_str().unwrap()], vec!["'--out <OUT>'", "a directory, not a file"]),
        // ensemble analyze, check, plan, topology
        (vec!["analyze", "shop", "--weights", "missing.toml"], vec!["'--weights <WEIGHTS>'", "no such file"]),
        (vec!["analyze", "shop", "--out", &plan_in_missing], vec!["'--out <OUT>'", "no-such-dir does not exist"]),
        (vec!["check", "missing.json"], vec!["'missing.json'", "no such file"]),
        (vec!["plan", "shop", "--check", "missing.toml"], vec!["'--check <CHECK>'", "no such file"]),
        (vec!["topology", "missing.toml"], vec!["topology file missing.toml: no such file"]),
    ];

    let mut failures = Vec::new();
    for (args, expected) in &rows {
        let args = fast(args);
        let out = Command::new(env!("CARGO_BIN_EXE_ensemble")).args(&args).current_dir(d).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let wrong = if out.status.success() || out.status.code().is_none() {
            Some(format!("exit status {}", out.status))
        } else if stderr.contains("panicked") || stderr.contains("backtrace") {
            Some("a panic".to_string())
        } else {
            expected.iter().find(|e| !stderr.contains(*e)).map(|e| format!("no `{e}`"))
        };
        if let Some(wrong) = wrong {
            failures.push(format!("ensemble {}: {wrong}; stderr:\n{stderr}", args.join(" ")));
        }
    }
    assert!(failures.is_empty(), "{} of {} rows failed:\n\n{}", failures.len(), rows.len(), failures.join("\n"));
    // Refused before anything ran: no command created its result directory.
    assert!(!d.join("results").exists());
}

/// `--replot` runs nothing: from a figure's result file it draws the plot beside the file and
/// prints the table the figure printed (here Table III for shop and P-Store's Table 1, as
/// `results/` keeps them); the file of one figure is refused as another's.
#[test]
fn a_figure_is_printed_and_drawn_again_from_its_result_file() {
    let dir = tempfile::tempdir().unwrap();
    let replot = |figure: &str, stem: &str| {
        let kept = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../results/{stem}.json"));
        let file = dir.path().join(format!("{stem}.json"));
        std::fs::copy(&kept, &file).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_ensemble")).args(["figure", figure, "--replot"]).arg(&file).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, stdout, stderr) = replot("table3", "figure-table3-shop-seed1");
    assert!(ok, "{stderr}");
    assert!(stdout.starts_with("Table III for shop: mean latency under light load"), "{stdout}");
    for config in ["Centralized", "Ensemble-2", "Ensemble-3", "Ensemble-5", "Read-only-2", "Read-only-3", "Read-only-5"] {
        assert!(stdout.lines().any(|l| l.starts_with(config) && l.trim_end().ends_with("ok")), "no checked row for {config}:\n{stdout}");
    }
    let (ok, stdout, stderr) = replot("pstore-table1", "figure-pstore-table1-seed1");
    assert!(ok, "{stderr}");
    assert!(stdout.starts_with("P-Store Table 1: a global transaction's latency under light load"), "{stdout}");
    for system in ["p-store ", "p-store-ge ", "p-store-2pc "] {
        assert!(stdout.lines().any(|l| l.starts_with(system) && l.trim_end().ends_with("ok")), "no checked row for {system}:\n{stdout}");
    }
    for (stem, plot) in [("figure-table3-shop-seed1", "svg"), ("figure-table3-shop-seed1", "png"), ("figure-pstore-table1-seed1", "svg")] {
        assert!(dir.path().join(format!("{stem}.{plot}")).exists(), "no {plot} beside {stem}.json");
    }
    let (ok, _, stderr) = replot("pstore-fig2", "figure-pstore-table1-seed1");
    assert!(!ok && stderr.contains("not pstore-fig2's runs"), "{stderr}");
}
