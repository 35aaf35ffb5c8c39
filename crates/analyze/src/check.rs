//! Dynamic soundness check (in progress).
