//! `ensemble check --delivery`: a delivery log checked against a primitive's properties, from
//! the command line; a violation fails the command and names itself.

use std::process::Command;

const LOG: &str = r#"{
  "groups": [{"id": 0, "members": [0, 1, 2]}, {"id": 1, "members": [3, 4, 5]}],
  "casts": [
    {"message": 1, "caster": 0, "destinations": [0, 1], "at": 10},
    {"message": 2, "caster": 3, "destinations": [1], "at": 12}
  ],
  "processes": [
    {"process": 0, "delivered": [1]}, {"process": 1, "delivered": [1]}, {"process": 2, "delivered": [1]},
    {"process": 3, "delivered": [2, 1]}, {"process": 4, "delivered": [2, 1]}, {"process": 5, "delivered": [2, 1]}
  ],
  "steps": [{"process": 0, "message": 1}, {"process": 3, "message": 2}]
}"#;

fn check(log: &str, args: &[&str]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.json");
    std::fs::write(&path, log).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ensemble")).arg("check").arg(&path).args(args).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn a_log_is_checked_against_a_primitive_or_named_properties() {
    let (ok, said) = check(LOG, &["--delivery", "genuine-atomic-multicast"]);
    assert!(ok, "{said}");
    // Process 4 delivers the two messages of group 1 in the other order than 3 and 5.
    let swapped = LOG.replacen(r#"{"process": 4, "delivered": [2, 1]}"#, r#"{"process": 4, "delivered": [1, 2]}"#, 1);
    let (ok, said) = check(&swapped, &["--delivery", "atomic-multicast"]);
    assert!(!ok && said.contains("prefix order"), "{said}");
    // Reliable multicast promises no order: the same log passes.
    let (ok, said) = check(&swapped, &["--delivery", "integrity,validity,agreement"]);
    assert!(ok, "{said}");
    let (ok, said) = check(LOG, &["--delivery", "total-order"]);
    assert!(!ok && said.contains("unknown delivery property `total-order`"), "{said}");
}
