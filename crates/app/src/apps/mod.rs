//! Applications shipped with Ensemble.

pub mod micro;
pub mod shop;
