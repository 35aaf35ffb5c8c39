//! A key-value workload for protocols that store keys, not SQL rows: each transaction reads
//! `reads` distinct keys drawn uniformly from `0..keys` and writes one more, as the transaction
//! type `rw` with parameters `[k1, ..., k_reads, w]` (all `Int`). Protocols of the DUR family
//! and the primary-backup toy serve it.

use crate::{ClientCtx, Workload};
use ensemble_core::Value;
use rand::{Rng, RngCore};

/// The transaction type every request of this workload names.
pub const RW: &str = "rw";

#[derive(Clone, Debug)]
pub struct KvWorkload {
    pub keys: u64,
    pub reads: u32,
}

impl Workload for KvWorkload {
    fn next(&mut self, rng: &mut dyn RngCore, _ctx: &ClientCtx) -> (String, Vec<Value>) {
        let keys = self.keys.max(1);
        let mut params: Vec<Value> = Vec::with_capacity(self.reads as usize + 1);
        while params.len() < (self.reads as usize).min(keys as usize) {
            let k = Value::Int(rng.random_range(0..keys) as i64);
            if !params.contains(&k) {
                params.push(k);
            }
        }
        params.push(Value::Int(rng.random_range(0..keys) as i64));
        (RW.to_string(), params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InstanceId;
    use rand::SeedableRng;

    #[test]
    fn reads_are_distinct_and_in_range() {
        let mut w = KvWorkload { keys: 5, reads: 3 };
        let ctx = ClientCtx { client_index: 0, home: InstanceId(0), instances: 1 };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for _ in 0..100 {
            let (txn, p) = w.next(&mut rng, &ctx);
            assert_eq!(txn, RW);
            assert_eq!(p.len(), 4);
            let mut reads = p[..3].to_vec();
            reads.dedup();
            assert_eq!(reads.len(), 3);
            assert!(p.iter().all(|v| matches!(v, Value::Int(k) if (0..5).contains(k))));
        }
    }
}
