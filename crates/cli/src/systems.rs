//! Every system `ensemble bench --system` knows, by name: the one list a new protocol's harness
//! is added to. Everything else (simulated and real runs, tables, checks, histories) is the
//! harness's generic code.

use ensemble_bench::systems::belt::BeltHarness;
use ensemble_bench::systems::twopc::TwoPcHarness;
use ensemble_bench::Harness;
use ensemble_gdur::GDurHarness;
use ensemble_primary_backup::PrimaryBackupHarness;

/// Something to do with a harness, whatever its protocol (Rust has no generic closures).
pub trait WithHarness {
    type Out;
    fn with<H: Harness>(self, h: &H) -> Self::Out;
}

/// Every system name, for error messages and help.
pub fn names() -> Vec<&'static str> {
    let mut v = BeltHarness::new().names().to_vec();
    v.extend(TwoPcHarness::new().names());
    v.extend(PrimaryBackupHarness.names());
    v.extend(GDurHarness.names());
    v
}

/// Calls `f` with the harness that answers to `system`.
pub fn dispatch<F: WithHarness>(system: &str, f: F) -> anyhow::Result<F::Out> {
    let belt = BeltHarness::new();
    if belt.names().contains(&system) {
        return Ok(f.with(&belt));
    }
    let twopc = TwoPcHarness::new();
    if twopc.names().contains(&system) {
        return Ok(f.with(&twopc));
    }
    let pb = PrimaryBackupHarness;
    if pb.names().contains(&system) {
        return Ok(f.with(&pb));
    }
    if GDurHarness.names().contains(&system) {
        return Ok(f.with(&GDurHarness));
    }
    anyhow::bail!("unknown system `{system}` (known: {})", names().join(", "))
}
