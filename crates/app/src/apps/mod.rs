//! Applications shipped with Ensemble.

pub mod kv;
pub mod micro;
pub mod rubis;
pub mod shop;
pub mod tpcw;
