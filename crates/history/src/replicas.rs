//! Replica agreement: every replica of a key installed the same versions in the same order, and
//! ended with the same value.
//!
//! This holds under every criterion G-DUR considers (each replica applies a key's committed
//! versions in the version order), so it is checked whatever the criterion, whenever replicas
//! reported installs. The first report of a key is the reference; each other replica of the key
//! is compared with it, and a disagreement names the key, both replicas and the first install
//! at which they differ.

use crate::graph::last_write;
use crate::hash::FastMap;
use crate::model::{History, TxnId};
use crate::report::Violation;

pub(crate) fn check_agreement(h: &History, index: &FastMap<TxnId, u32>, out: &mut Vec<Violation>) {
    let mut reference: Vec<Option<usize>> = vec![None; h.key_count()];
    for (e, rec) in h.installs.iter().enumerate() {
        let key = || h.key_name(rec.key).to_owned();
        let replica = || h.replicas.name(rec.replica).to_owned();
        final_value_matches_last_install(h, index, e, out);
        let Some(first) = reference[rec.key as usize] else {
            reference[rec.key as usize] = Some(e);
            continue;
        };
        let base = &h.installs[first];
        let base_name = || h.replicas.name(base.replica).to_owned();
        let differs = base.order.iter().zip(&rec.order).position(|(a, b)| a != b);
        let position = differs
            .or((base.order.len() != rec.order.len())
                .then(|| base.order.len().min(rec.order.len())));
        if let Some(position) = position {
            out.push(Violation::ReplicaOrder {
                key: key(),
                replica_a: base_name(),
                replica_b: replica(),
                position,
                a: base.order.get(position).copied(),
                b: rec.order.get(position).copied(),
            });
        }
        if let (Some(a), Some(b)) = (h.values.get(base.value), h.values.get(rec.value)) {
            if a != b {
                out.push(Violation::ReplicaValue {
                    key: key(),
                    replica_a: base_name(),
                    value_a: a.to_owned(),
                    replica_b: replica(),
                    value_b: b.to_owned(),
                });
            }
        }
    }
}

/// A replica that reports its final value must hold the value of the last version it installed
/// (when that writer's value was recorded).
fn final_value_matches_last_install(
    h: &History,
    index: &FastMap<TxnId, u32>,
    e: usize,
    out: &mut Vec<Violation>,
) {
    let rec = &h.installs[e];
    let (Some(value), Some(&last)) = (h.values.get(rec.value), rec.order.last()) else {
        return;
    };
    let Some(&t) = index.get(&last) else { return };
    let Some(write) = last_write(h, t, rec.key) else {
        return;
    };
    let Some(expected) = h.values.get(h.writes[write as usize].value) else {
        return;
    };
    if expected != value {
        out.push(Violation::ReplicaFinalValue {
            key: h.key_name(rec.key).to_owned(),
            replica: h.replicas.name(rec.replica).to_owned(),
            value: value.to_owned(),
            writer: last,
            expected: expected.to_owned(),
        });
    }
}
