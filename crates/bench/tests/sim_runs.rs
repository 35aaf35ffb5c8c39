//! Whole runs in the simulator, each checked for serializability by replay.

use ensemble_bench::{run, Experiment, System, WorkloadSpec};
use ensemble_core::topology::Topology;

fn quick(app: &str, system: System, instances: u32, topology: Topology) -> Experiment {
    let mut e = Experiment::new(app, system, instances, topology).unwrap();
    e.clients = 15;
    e.warmup_s = 2.0;
    e.measure_s = 8.0;
    e
}

fn assert_checked(e: &Experiment) -> ensemble_bench::RunResult {
    let r = run(e, false).unwrap();
    assert_eq!(r.check_passed, Some(true), "{}: {}", e.label, r.check.as_deref().unwrap_or(""));
    assert!(r.summary.throughput > 0.0, "{}: nothing completed", e.label);
    assert_eq!(r.summary.errors, 0, "{}", e.label);
    r
}

#[test]
fn shop_on_wan5_is_serializable_and_locals_are_faster_than_globals() {
    let r = assert_checked(&quick("shop", System::Ensemble, 3, Topology::wan5()));
    let local = &r.summary.classes["local"];
    let global = &r.summary.classes["global"];
    assert!(local.count > 0 && global.count > 0);
    // A global waits for the token to come round three sites; a local is served at home.
    assert!(global.mean_ms > 2.0 * local.mean_ms, "local {} ms, global {} ms", local.mean_ms, global.mean_ms);
}

#[test]
fn baselines_are_serializable() {
    assert_checked(&quick("shop", System::Centralized, 1, Topology::wan5()));
    let r = assert_checked(&quick("shop", System::ReadOnly, 3, Topology::wan5()));
    assert!(r.summary.classes.contains_key("global"));
}

#[test]
fn sequential_global_execution_is_serializable_too() {
    let mut e = quick("shop", System::Ensemble, 5, Topology::wan5());
    e.global_execution = ensemble_belt::GlobalExecution::Sequential;
    assert_checked(&e);
}

#[test]
fn micro_on_a_jittery_wan_is_serializable() {
    let mut e = quick("micro", System::Ensemble, 4, Topology::wan_normal50(4));
    e.workload = WorkloadSpec::Micro { local_fraction: 0.5 };
    let r = assert_checked(&e);
    assert!(r.summary.classes["global"].count > 0 && r.summary.classes["local"].count > 0);
}

#[test]
fn same_seed_same_result_file() {
    let e = quick("shop", System::Ensemble, 3, Topology::wan_normal50(3));
    let a = serde_json::to_string_pretty(&run(&e, false).unwrap()).unwrap();
    let b = serde_json::to_string_pretty(&run(&e, false).unwrap()).unwrap();
    assert_eq!(a, b);
    let mut e2 = e.clone();
    e2.seed = 2;
    let c = serde_json::to_string_pretty(&run(&e2, false).unwrap()).unwrap();
    assert_ne!(a, c, "another seed must give another run");
}

#[test]
fn the_checker_catches_a_wrong_reply_a_diverged_replica_and_a_lost_global() {
    let mut e = quick("shop", System::Ensemble, 3, Topology::wan5());
    e.measure_s = 4.0;
    let h = ensemble_bench::systems::belt::BeltHarness::new();
    let base = || ensemble_bench::sim_run::simulate(&h, &e, false).unwrap();

    // A reply the serial replay would not give.
    let mut s = base();
    let c = s
        .history
        .iter_mut()
        .find(|c| c.request.txn == "add_item" && matches!(c.result, ensemble_core::CompletionResult::Done(_)))
        .unwrap();
    if let ensemble_core::CompletionResult::Done(done) = &mut c.result {
        done.outcome = ensemble_core::Outcome::Committed(vec![vec![ensemble_core::Value::Int(-1)]]);
    }
    let r = s.check(&h, &e).unwrap();
    assert_eq!(r.check_passed, Some(false));
    assert!(r.check.unwrap().contains("the run replied"));

    // A replica whose replicated table drifted.
    let s = base();
    s.storages[2].as_ref().unwrap().sqlite().unwrap().connection().execute("UPDATE items SET stock = stock + 1 WHERE item_id = 3", []).unwrap();
    let r = s.check(&h, &e).unwrap();
    assert!(r.check.unwrap().contains("table `items` at instance i2"));

    // A global operation whose reply is missing from the history.
    let mut s = base();
    let i = s
        .history
        .iter()
        .position(|c| matches!(&c.result, ensemble_core::CompletionResult::Done(d) if d.evidence.class == ensemble_app::OpClass::Global))
        .unwrap();
    s.history.remove(i);
    let r = s.check(&h, &e).unwrap();
    assert!(r.check.unwrap().contains("global sequence numbers are not"));
}

#[test]
fn the_analyzers_plan_runs_exactly_like_the_hand_written_one() {
    for app_name in ["shop", "micro"] {
        let app = ensemble_app::application(app_name).unwrap();
        let derived = ensemble_analyze::analyze(&app, &ensemble_analyze::Options::default()).unwrap().plan;
        let hand = quick(app_name, System::Ensemble, 3, Topology::wan5());
        let mut analyzed = hand.clone();
        analyzed.plan = derived;
        assert_eq!(analyzed.plan.tables, hand.plan.tables, "{app_name}");
        assert_eq!(analyzed.plan.transactions, hand.plan.transactions, "{app_name}");
        let (a, b) = (run(&hand, false).unwrap(), run(&analyzed, false).unwrap());
        assert_eq!(a.check_passed, Some(true));
        assert_eq!(serde_json::to_string(&a.summary).unwrap(), serde_json::to_string(&b.summary).unwrap(), "{app_name}");
    }
}

#[test]
fn tpcw_and_rubis_are_serializable_under_every_system() {
    for app in ["tpcw", "rubis"] {
        for (system, n) in [(System::Ensemble, 3), (System::ReadOnly, 2), (System::Centralized, 1)] {
            let mut e = quick(app, system, n, Topology::wan5());
            e.measure_s = 4.0;
            e.clients = 10;
            assert_checked(&e);
        }
    }
    // With the papers' write shares.
    let mut e = quick("tpcw", System::Ensemble, 3, Topology::wan5());
    e.workload = WorkloadSpec::Tpcw { write_share: Some(0.3) };
    let r = assert_checked(&e);
    assert!(r.summary.classes["global"].count > 0);
    let mut e = quick("rubis", System::Ensemble, 3, Topology::wan5());
    e.workload = WorkloadSpec::Rubis { write_share: Some(0.15), remote_items: 0.2 };
    assert_checked(&e);
}

/// TPC-W and RUBiS pages run several transactions back to back; the client measures each page
/// from its first request to its last reply and thinks only between pages.
#[test]
fn web_interactions_are_measured_whole_and_think_time_falls_between_them() {
    for app in ["tpcw", "rubis"] {
        let mut e = quick(app, System::Ensemble, 3, Topology::wan5());
        e.clients = 5;
        e.think_ms = 500.0;
        let s = ensemble_bench::sim_run::simulate(&ensemble_bench::systems::belt::BeltHarness::new(), &e, false).unwrap();
        let pages = &s.result.summary.classes[ensemble_bench::INTERACTION];
        let txns = &s.result.summary.classes["all"];
        assert!(pages.count > 0 && pages.count < txns.count, "{app}: {} pages, {} transactions", pages.count, txns.count);
        assert!(pages.mean_ms > txns.mean_ms, "{app}: a page ({} ms) takes longer than one of its transactions ({} ms)", pages.mean_ms, txns.mean_ms);
        // Within a page the next request leaves as the reply arrives; across pages, after thinking.
        let (mut within, mut across) = (0, 0);
        for client in 0..e.clients as u64 {
            let mine: Vec<_> = s.history.iter().filter(|c| c.request.client.0 == client).collect();
            for w in mine.windows(2) {
                if w[0].interaction.is_none() {
                    assert_eq!(w[1].issued, w[0].completed, "{app}: client {client} paused inside a page");
                    within += 1;
                } else if w[1].issued > w[0].completed {
                    across += 1;
                }
            }
        }
        assert!(within > 0 && across > 0, "{app}: {within} requests within pages, {across} after thinking");
        let names: std::collections::BTreeSet<&str> = s.history.iter().filter_map(|c| c.interaction.as_ref()).map(|i| i.name.as_str()).collect();
        assert!(names.len() >= 5, "{app}: pages of only {names:?} ended");
        assert!(s.check(&ensemble_bench::systems::belt::BeltHarness::new(), &e).unwrap().check_passed == Some(true));
    }
}

fn recorded(app: &str, instances: u32, topology: Topology) -> Experiment {
    let mut e = quick(app, System::Ensemble, instances, topology);
    e.measure_s = 4.0;
    e.record_access = true;
    e
}

#[test]
fn recorded_runs_pass_the_replay_and_the_dependency_graph_check() {
    for (app, instances) in [("shop", 3), ("micro", 4), ("tpcw", 3), ("rubis", 3)] {
        let e = recorded(app, instances, Topology::wan5());
        let h = ensemble_bench::systems::belt::BeltHarness::new();
        let s = ensemble_bench::sim_run::simulate(&h, &e, false).unwrap();
        let run = ensemble_bench::harness::RunOutput { history: &s.history, storages: s.storages, failures: s.failures.clone() };
        let history = ensemble_bench::harness::Harness::history(&h, &e, &run).unwrap().unwrap();
        println!("{app}: {} transactions", history.len());
        let installs: Vec<_> = history.installs().collect();
        for i in 0..instances {
            assert!(installs.iter().any(|x| x.replica == format!("i{i}")), "{app}: no installs from instance i{i}");
        }
        // Rows of replicated tables are installed at every instance, in the same order.
        let everywhere = installs
            .iter()
            .filter(|x| x.replica == "i0" && installs.iter().filter(|y| y.key == x.key && y.order == x.order).count() == instances as usize)
            .count();
        assert!(everywhere > 0, "{app}: no row installed at every instance");
        let r = ensemble_history::check(&history, ensemble_history::Criterion::Ser);
        assert!(r.ok(), "{app}: {r}");
        let s = ensemble_bench::sim_run::Simulated::<ensemble_bench::systems::belt::BeltHarness> { storages: run.storages, ..s };
        let result = s.check(&h, &e).unwrap();
        let summary = result.check.unwrap();
        println!("{app}: {summary}");
        assert_eq!(result.check_passed, Some(true), "{app}: {summary}");
        assert!(summary.contains("dependency graph") && summary.contains("SER: serializable"), "{summary}");
    }
}

#[test]
fn recording_does_not_change_a_simulated_run() {
    let mut e = recorded("shop", 3, Topology::wan5());
    let on = run(&e, false).unwrap();
    e.record_access = false;
    let off = run(&e, false).unwrap();
    assert_eq!(serde_json::to_string(&on.summary).unwrap(), serde_json::to_string(&off.summary).unwrap());
    assert!(on.check.unwrap().contains("dependency graph"));
    assert!(!off.check.unwrap().contains("dependency graph"));
}

#[test]
fn the_dependency_graph_check_catches_a_wrong_read_and_a_reordered_install_log() {
    use ensemble_core::CompletionResult;
    let e = recorded("shop", 3, Topology::wan5());
    let h = ensemble_bench::systems::belt::BeltHarness::new();
    let base = || ensemble_bench::sim_run::simulate(&h, &e, false).unwrap();

    // A transaction that read a row and wrote it over (a new cart, a line, stock taken) now
    // claims to have read the version that came after its own: `T -ww-> C -wr-> T`.
    let mut s = base();
    let log = s.storages[0].as_ref().unwrap().install_log().unwrap();
    let next_writer = |row: &str, writer: u64| {
        let order: Vec<u64> = log.iter().filter(|v| v.row() == row).map(|v| v.writer).collect();
        order.iter().position(|w| *w == writer).and_then(|p| order.get(p + 1).copied())
    };
    let tampered = s.history.iter_mut().find_map(|c| {
        let CompletionResult::Done(done) = &mut c.result else { return None };
        let access = done.evidence.access.as_mut().unwrap();
        let writer = access.writer;
        let writes = access.writes.clone();
        let read = access.reads.iter_mut().find(|(row, _)| writes.contains(row) && next_writer(row, writer).is_some())?;
        read.1 = next_writer(&read.0, writer);
        Some(read.0.clone())
    });
    let row = tampered.expect("some order re-wrote a row another transaction wrote next");
    let r = s.check(&h, &e).unwrap();
    let summary = r.check.unwrap();
    println!("{summary}");
    assert_eq!(r.check_passed, Some(false), "{summary}");
    assert!(summary.contains("replayed in the proof's serial order; replies and final state match"), "{summary}");
    assert!(summary.contains("SER: NOT serializable") && summary.contains("cycle") && summary.contains(&row), "{row}: {summary}");

    // Instance i1 reports two installs of a replicated row in the wrong order.
    let s = base();
    let conn = s.storages[1].as_ref().unwrap().sqlite().unwrap().connection();
    let (a, wa, b, wb, key): (i64, i64, i64, i64, String) = conn
        .query_row(
            "SELECT x.n, x.writer, y.n, y.writer, x.key FROM _ensemble_installs x JOIN _ensemble_installs y \
             ON x.tbl = y.tbl AND x.key = y.key AND x.n < y.n WHERE x.tbl = 'items' AND x.writer <> y.writer LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    for (n, writer) in [(a, wb), (b, wa)] {
        conn.execute("UPDATE _ensemble_installs SET writer = ?2 WHERE n = ?1", [n, writer]).unwrap();
    }
    let r = s.check(&h, &e).unwrap();
    let summary = r.check.unwrap();
    println!("{summary}");
    assert_eq!(r.check_passed, Some(false), "{summary}");
    assert!(summary.contains(&format!("replicas disagree on `items/{key}`")) && summary.contains("i1"), "{summary}");
}
