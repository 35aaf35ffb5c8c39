//! The protocols, each a small set of plug-in choices (G-DUR §6, Table 2).

pub mod pstore;

pub use pstore::{PStore, PStoreFull, PStoreVariant};

use crate::realization::Realization;
use std::sync::Arc;

/// Every G-DUR system, by its `--system` name.
pub const SYSTEMS: [&str; 5] = ["p-store", "p-store-ge", "p-store-gdur", "p-store-2pc", "p-store-full"];

/// The realization `system` names, with a pool of `certifiers`.
pub fn realization(system: &str, certifiers: u32) -> Result<Arc<dyn Realization>, String> {
    let c = certifiers.max(1) as usize;
    Ok(match system {
        "p-store" => Arc::new(PStore::a_ge_star(c)),
        "p-store-ge" => Arc::new(PStore::a_ge()),
        "p-store-gdur" => Arc::new(PStore::gdur(c)),
        "p-store-2pc" => Arc::new(PStore::two_phase()),
        "p-store-full" => Arc::new(PStoreFull { certifiers: c }),
        other => return Err(format!("`{other}` is not a G-DUR system ({})", SYSTEMS.join(", "))),
    })
}
