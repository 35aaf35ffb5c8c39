//! SQL values as they cross every boundary: parameters, result rows, state updates, the wire.

use serde::{Deserialize, Serialize};

/// One SQL value. `Real` compares and hashes by its bit pattern so that results stay comparable
/// byte for byte between a run and its replay.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

pub type Row = Vec<Value>;
pub type Rows = Vec<Row>;

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Int(_) => "int",
            Value::Real(_) => "real",
            Value::Text(_) => "text",
            Value::Blob(_) => "blob",
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(v) => Some(v),
            _ => None,
        }
    }

    /// A hash that is the same on every machine, build and run (FNV-1a over a tagged encoding).
    /// Routing functions depend on it, so it must never change for a given value.
    pub fn stable_hash(&self) -> u64 {
        let mut h = Fnv::new();
        self.feed(&mut h);
        h.0
    }

    fn feed(&self, h: &mut Fnv) {
        match self {
            Value::Null => h.write(&[0]),
            Value::Int(v) => {
                h.write(&[1]);
                h.write(&v.to_le_bytes())
            }
            Value::Real(v) => {
                h.write(&[2]);
                h.write(&v.to_bits().to_le_bytes())
            }
            Value::Text(v) => {
                h.write(&[3]);
                h.write(&(v.len() as u64).to_le_bytes());
                h.write(v.as_bytes())
            }
            Value::Blob(v) => {
                h.write(&[4]);
                h.write(&(v.len() as u64).to_le_bytes());
                h.write(v)
            }
        }
    }

    /// Feeds this value into a digest of rows (see [`Value::stable_hash`] for the encoding).
    pub fn digest_into(&self, out: &mut Vec<u8>) {
        match self {
            Value::Null => out.push(0),
            Value::Int(v) => {
                out.push(1);
                out.extend_from_slice(&v.to_le_bytes())
            }
            Value::Real(v) => {
                out.push(2);
                out.extend_from_slice(&v.to_bits().to_le_bytes())
            }
            Value::Text(v) => {
                out.push(3);
                out.extend_from_slice(&(v.len() as u64).to_le_bytes());
                out.extend_from_slice(v.as_bytes())
            }
            Value::Blob(v) => {
                out.push(4);
                out.extend_from_slice(&(v.len() as u64).to_le_bytes());
                out.extend_from_slice(v)
            }
        }
    }
}

struct Fnv(u64);
impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf29ce484222325)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= *b as u64;
            self.0 = self.0.wrapping_mul(0x100000001b3);
        }
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Real(a), Value::Real(b)) => a.to_bits() == b.to_bits(),
            (Value::Text(a), Value::Text(b)) => a == b,
            (Value::Blob(a), Value::Blob(b)) => a == b,
            _ => false,
        }
    }
}
impl Eq for Value {}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Total order: by type tag first (null < int < real < text < blob), then by value.
impl Ord for Value {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        fn tag(v: &Value) -> u8 {
            match v {
                Value::Null => 0,
                Value::Int(_) => 1,
                Value::Real(_) => 2,
                Value::Text(_) => 3,
                Value::Blob(_) => 4,
            }
        }
        match (self, other) {
            (Value::Int(a), Value::Int(b)) => a.cmp(b),
            (Value::Real(a), Value::Real(b)) => a.total_cmp(b),
            (Value::Text(a), Value::Text(b)) => a.cmp(b),
            (Value::Blob(a), Value::Blob(b)) => a.cmp(b),
            _ => tag(self).cmp(&tag(other)),
        }
    }
}

impl std::hash::Hash for Value {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.stable_hash())
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Null => write!(f, "NULL"),
            Value::Int(v) => write!(f, "{v}"),
            Value::Real(v) => write!(f, "{v}"),
            Value::Text(v) => write!(f, "{v:?}"),
            Value::Blob(v) => write!(f, "x'{}'", v.iter().map(|b| format!("{b:02x}")).collect::<String>()),
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Real(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_hash_is_pinned() {
        // Routing depends on these numbers; a change here moves every row to another instance.
        assert_eq!(Value::Int(0).stable_hash(), 0x529a_2cdc_8ff5_33ac);
        // Values of different types never share an encoding.
        assert_ne!(Value::Int(0).stable_hash(), Value::Real(0.0).stable_hash());
        assert_ne!(Value::Text("a".into()).stable_hash(), Value::Blob(b"a".to_vec()).stable_hash());
    }

    #[test]
    fn real_equality_is_bitwise() {
        assert_eq!(Value::Real(f64::NAN), Value::Real(f64::NAN));
        assert_ne!(Value::Real(0.0), Value::Real(-0.0));
        assert_ne!(Value::Int(1), Value::Real(1.0));
    }
}
