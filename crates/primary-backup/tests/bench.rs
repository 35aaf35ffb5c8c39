//! Primary-backup through `ensemble bench`'s generic simulated run: the harness is all it takes.
#![cfg(feature = "harness")]

use ensemble_bench::sim_run::{simulate, Simulated};
use ensemble_bench::{Experiment, Harness, RunOutput, WorkloadSpec};
use ensemble_core::topology::Topology;
use ensemble_core::ProcessId;
use ensemble_primary_backup::PrimaryBackupHarness;

const H: PrimaryBackupHarness = PrimaryBackupHarness;

fn experiment() -> Experiment {
    let mut exp = Experiment::for_system("kv", "primary-backup", 3, Topology::lan()).unwrap();
    exp.clients = 20;
    exp.warmup_s = 0.5;
    exp.measure_s = 2.0;
    exp
}

fn run(exp: &Experiment) -> Simulated<PrimaryBackupHarness> {
    let s = simulate(&H, exp, false).unwrap();
    assert!(s.failures.is_empty(), "{:?}", s.failures);
    s
}

#[test]
fn the_generic_simulated_run_measures_and_checks_primary_backup() {
    let exp = experiment();
    let s = run(&exp);
    let transactions = s.history.len();
    let result = s.check(&H, &exp).unwrap();
    let check = result.check.clone().unwrap();
    assert_eq!(result.check_passed, Some(true), "{check}");
    assert!(check.starts_with(&format!("primary-backup: {transactions} transactions: SER: serializable")), "{check}");
    assert!(check.contains("replica agreement: 3 install logs, which agree"), "{check}");
    let update = &result.summary.classes["update"];
    assert!(update.count > 1_000 && update.throughput > 500.0, "{update:?}");
    assert_eq!((result.summary.errors, result.summary.redirects, result.summary.aborted), (0, 0, 0));
    let committed: Vec<u64> = result.processes.iter().flat_map(|p| p.counters.iter().map(|(_, v)| *v)).collect();
    assert_eq!(committed, vec![transactions as u64; 3], "the primary committed and each backup installed every transaction");
}

#[test]
fn a_reordered_install_log_fails_the_check() {
    let exp = experiment();
    let s = run(&exp);
    // Backup p1 "installed" the first two versions of some key the other way round.
    s.storages[1].as_ref().unwrap().edit(|log| {
        let versions = log.versions.values_mut().find(|v| v.len() >= 2).expect("some key has two versions");
        versions.swap(0, 1);
    });
    let result = s.check(&H, &exp).unwrap();
    let check = result.check.unwrap();
    assert_eq!(result.check_passed, Some(false), "{check}");
    assert!(check.contains("replicas disagree on `") && check.contains("p1 has T"), "{check}");
    assert!(check.contains("replica agreement: 3 install logs, which disagree"), "{check}");
}

#[test]
fn without_install_logs_the_history_alone_is_checked_and_recorded() {
    let exp = experiment();
    let s = run(&exp);
    // As after a real run: the in-memory logs are gone with the nodes.
    let out = RunOutput::<PrimaryBackupHarness> { history: &s.history, storages: vec![None, None, None], failures: Vec::new() };
    let history = H.history(&exp, &out).unwrap().expect("primary-backup records histories");
    assert_eq!(history.len(), s.history.len());
    let verdict = H.check(&exp, out).unwrap();
    assert!(verdict.passed, "{}", verdict.summary);
    assert!(verdict.summary.contains("replica agreement: not checked"), "{}", verdict.summary);
}

#[test]
fn the_harness_deploys_a_primary_and_backups_and_refuses_sql_workloads() {
    let mut exp = experiment();
    exp.topology = Topology::wan5();
    exp.client_sites = vec![0, 1, 2, 3, 4];
    let d = H.deployment(&exp);
    let kinds: Vec<&str> = d.processes.iter().map(|p| p.kind.as_str()).collect();
    assert_eq!(kinds, ["primary", "backup", "backup"]);
    assert_eq!(d.machines.iter().map(|m| (m.site, m.cores)).collect::<Vec<_>>(), [(0, 2), (1, 2), (2, 2)]);
    assert_eq!(d.group("replicas").unwrap().members, [ProcessId(0), ProcessId(1), ProcessId(2)]);
    assert!(H.process(&exp, ProcessId(3)).is_err());
    assert_eq!(H.validate(&exp), Ok(()));

    exp.workload = WorkloadSpec::default_for("shop").unwrap();
    assert_eq!(H.validate(&exp), Err("primary-backup serves the key-value workload `kv`, not `shop`".to_string()));
    exp.workload = WorkloadSpec::default_for("kv").unwrap();
    exp.instances = 0;
    assert!(H.validate(&exp).unwrap_err().contains("at least one instance"));
}
