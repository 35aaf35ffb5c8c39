//! Issue 12's real-runtime test: a 3-group x 3-process deployment (plus two casters outside the
//! groups), one OS process each, survives `kill -9` of one process per group in the middle of a
//! multicast load. The killed processes start again from their files; everything cast before and
//! after is delivered everywhere, and the delivery checker finds no violation.
//!
//! Seeds 0, 1 and 2 kill each member position of every group once: the group's caster and, in
//! some group, the consensus leader. The run waits for what it observes (casts recorded in the
//! processes' files, deliveries) within a bound, and asserts nothing about how long it took.

use std::process::Command;
use std::sync::{Mutex, PoisonError};

/// Eleven processes per run on a machine of two cores: one run at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run(primitive: &str, seed: u64) -> serde_json::Value {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.json");
    let result = Command::new(env!("CARGO_BIN_EXE_ensemble"))
        .args(["xcast", "real", "--primitive", primitive, "--groups", "3", "--casts", "60", "--kill", "--limit-s", "240"])
        .args(["--seed", &seed.to_string(), "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&result.stdout);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "{primitive} seed {seed}: {}\n{stdout}\n{stderr}", result.status);
    // Three processes were killed with SIGKILL and started again.
    assert_eq!(stderr.matches("(SIGKILL)").count(), 3, "{stderr}");
    assert_eq!(stderr.matches("restarted p").count(), 3, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(json["killed"].as_array().unwrap().len(), 3, "{json}");
    assert_eq!(json["casts"], 5 * 60, "every caster cast all it had to: {json}");
    assert_eq!(json["settled"], true, "{json}");
    assert_eq!(json["passed"], true, "{json}");
    json
}

#[test]
fn genuine_multicast_survives_kill_9_of_one_process_per_group() {
    for seed in 0..3 {
        let json = run("genuine", seed);
        // Genuine multicast to 1 to 3 of 3 groups: more deliveries than casts, fewer than
        // 9 destination processes per cast.
        let deliveries = json["deliveries"].as_u64().unwrap();
        assert!(deliveries > 300 && deliveries < 300 * 9, "{json}");
    }
}

#[test]
fn atomic_broadcast_survives_kill_9_of_one_process_per_group() {
    let json = run("broadcast", 1);
    // Every cast reaches every one of the 9 group members.
    assert_eq!(json["deliveries"], 300 * 9, "{json}");
}

#[test]
fn reliable_multicast_survives_kill_9_of_one_process_per_group() {
    run("reliable", 2);
}

#[test]
fn per_partition_streams_survive_kill_9_of_one_process_per_group() {
    run("streams", 1);
}
