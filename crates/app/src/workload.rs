//! What a client of an application asks for next. A workload is a per-client state machine so
//! that multi-step sessions (create a cart, fill it, order it) are expressible; it draws from the
//! generator it is handed, never from ambient randomness.

use crate::InstanceId;
use ensemble_core::{Outcome, Value};
use rand::RngCore;

/// What a workload knows about the client it drives.
#[derive(Clone, Copy, Debug)]
pub struct ClientCtx {
    /// Unique among the run's clients, from zero.
    pub client_index: u64,
    /// The instance this client talks to (the closest one).
    pub home: InstanceId,
    pub instances: u32,
}

impl ClientCtx {
    /// Eliá's server-specific unique ids: the `k`-th id minted by this client, unique in the run
    /// and routed (`id mod instances`) to the client's home instance.
    pub fn home_id(&self, k: u64) -> i64 {
        let n = self.instances.max(1) as u64;
        (((self.client_index << 24) + k) * n + self.home.0 as u64) as i64
    }
}

/// Where the last observed request leaves the client's web interaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InteractionProgress {
    /// The workload has no interactions: every request is a page of its own.
    Unpaged,
    /// More requests of the same interaction follow, without thinking in between.
    Continues,
    /// The interaction of this name has run its last request.
    Ended(&'static str),
}

pub trait Workload: Send {
    /// The next request: transaction type and parameters.
    fn next(&mut self, rng: &mut dyn RngCore, ctx: &ClientCtx) -> (String, Vec<Value>);
    /// What became of the last request (a multi-step session may depend on it).
    fn observe(&mut self, _txn: &str, _outcome: &Outcome) {}
    /// Asked after every reply (observed or refused): whether the interaction goes on.
    fn interaction(&self) -> InteractionProgress {
        InteractionProgress::Unpaged
    }
}
