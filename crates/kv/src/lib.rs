//! The key-value world of the deferred-update-replication (DUR) protocols: what a G-DUR replica
//! stores and what a transaction does to it, independent of any protocol.
//!
//! * [`Value`], [`Key`], [`TxnId`]: the vocabulary.
//! * [`store`]: the multiversion store every replica keeps (G-DUR's `ds`): a version chain per
//!   key, the read rules G-DUR needs (`choose_last`, and a snapshot or compatibility rule for
//!   `choose_cons`), atomic install of a committed transaction's writes, garbage collection of
//!   versions no snapshot can read, and the per-key install order the history checker consumes.
//!   In memory by default ([`store::MemoryStore`]); [`store::SqliteStore`] is the same interface
//!   on an embedded durable store.
//! * [`workload`]: transaction programs (a transaction is a resumable program of reads and
//!   writes whose next key may depend on what it read: G-DUR's interactive transactions), key
//!   spaces (which keys exist and which partition each belongs to), placements (which groups
//!   replicate which partition), and the workloads of the papers: TPC-B as P-Store modified it,
//!   and YCSB's transactional workloads A, B and C of G-DUR's Table 3.

pub mod store;
pub mod workload;

use serde::{Deserialize, Serialize};

/// A key. Each workload's [`workload::KeySpace`] says which keys exist (a table and a row, for
/// TPC-B) and which partition each belongs to.
pub type Key = u64;

/// A transaction's identity over a run: its proxy (the process that executed it, G-DUR's
/// `coord(Ti)`) and the proxy's counter. As a `u64` for the history checker: the proxy's process
/// id in the high 24 bits, the counter in the low 40.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TxnId(pub u64);

impl TxnId {
    const SEQ_BITS: u32 = 40;

    pub fn new(proxy: ensemble_core::ProcessId, seq: u64) -> TxnId {
        assert!(seq < 1 << Self::SEQ_BITS, "transaction counter {seq} overflows its 40 bits");
        assert!(proxy.0 < 1 << 24, "{proxy} does not fit a transaction id's 24 bits");
        TxnId((u64::from(proxy.0) << Self::SEQ_BITS) | seq)
    }

    pub fn proxy(self) -> ensemble_core::ProcessId {
        ensemble_core::ProcessId((self.0 >> Self::SEQ_BITS) as u32)
    }

    pub fn seq(self) -> u64 {
        self.0 & ((1 << Self::SEQ_BITS) - 1)
    }
}

impl std::fmt::Display for TxnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "t{}.{}", self.proxy().0, self.seq())
    }
}

/// A stored value: an integer (TPC-B's balances; YCSB's writes store the writer's mark) and a
/// payload of `pad` bytes that travels with it, so that a 1 KB YCSB object costs 1 KB on a link
/// (the simulator charges bandwidth by serialized size) without the run holding 1 KB per version
/// in memory. On the wire it is a byte string: the integer's 8 bytes (little-endian) then `pad`
/// zero bytes; anything else is refused when decoding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Value {
    pub int: i64,
    pub pad: u32,
}

impl Value {
    pub fn int(int: i64) -> Value {
        Value { int, pad: 0 }
    }

    /// How many bytes the value takes on the wire (before postcard's length prefix).
    pub fn wire_len(&self) -> usize {
        8 + self.pad as usize
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.int)
    }
}

impl Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut bytes = Vec::with_capacity(self.wire_len());
        bytes.extend_from_slice(&self.int.to_le_bytes());
        bytes.resize(self.wire_len(), 0);
        s.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Value;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a value: 8 bytes of integer then zero padding")
            }
            fn visit_bytes<E: serde::de::Error>(self, b: &[u8]) -> Result<Value, E> {
                if b.len() < 8 {
                    return Err(E::custom(format!("a value takes at least 8 bytes, got {}", b.len())));
                }
                if b[8..].iter().any(|&x| x != 0) {
                    return Err(E::custom("a value's padding must be zero bytes"));
                }
                let pad = u32::try_from(b.len() - 8).map_err(|_| E::custom("a value's padding exceeds 4 GiB"))?;
                Ok(Value { int: i64::from_le_bytes(b[..8].try_into().expect("8 bytes")), pad })
            }
            fn visit_byte_buf<E: serde::de::Error>(self, b: Vec<u8>) -> Result<Value, E> {
                self.visit_bytes(&b)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
                // Self-describing formats without a byte type (JSON) give a sequence of numbers.
                let mut b = Vec::new();
                while let Some(x) = seq.next_element::<u8>()? {
                    b.push(x);
                }
                self.visit_bytes(&b)
            }
        }
        d.deserialize_bytes(Visit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ensemble_core::ProcessId;

    #[test]
    fn a_txn_id_keeps_its_proxy_and_counter() {
        let t = TxnId::new(ProcessId(11), 123_456);
        assert_eq!((t.proxy(), t.seq()), (ProcessId(11), 123_456));
        assert_eq!(t.to_string(), "t11.123456");
        assert!(TxnId::new(ProcessId(1), 5) < TxnId::new(ProcessId(2), 0));
    }

    #[test]
    fn a_value_costs_its_padding_on_the_wire_and_round_trips() {
        let v = Value { int: -42, pad: 1016 };
        let bytes = postcard::to_allocvec(&v).unwrap();
        assert_eq!(bytes.len(), 2 + 1024, "a 1 KB object is 1 KB on the wire (plus the varint length)");
        assert_eq!(postcard::from_bytes::<Value>(&bytes).unwrap(), v);
    }

    #[test]
    fn a_value_with_nonzero_padding_or_too_short_is_refused() {
        let mut bytes = postcard::to_allocvec(&Value { int: 1, pad: 4 }).unwrap();
        *bytes.last_mut().unwrap() = 7;
        let err = postcard::from_bytes::<Value>(&bytes).unwrap_err();
        assert!(matches!(err, postcard::Error::SerdeDeCustom), "{err:?}");
        let short = postcard::to_allocvec(&serde_bytes_like(&[1, 2, 3])).unwrap();
        assert!(postcard::from_bytes::<Value>(&short).is_err());
    }

    /// Three bytes serialized as a byte string, as a forged value would be.
    fn serde_bytes_like(b: &[u8]) -> impl Serialize + '_ {
        struct B<'a>(&'a [u8]);
        impl Serialize for B<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(self.0)
            }
        }
        B(b)
    }
}
