//! The protocols, each a small set of plug-in choices (G-DUR §6, Table 2).

pub mod pstore;

pub use pstore::{PStore, PStoreFull, PStoreVariant};
