//! The DUR papers' workloads over the key-value store: which keys exist and where they live
//! ([`KeySpace`], [`Placement`]), what a client asks for ([`KvWorkloadSpec`], its clients), and
//! what a request does ([`program`]).
//!
//! * **TPC-B as P-Store modified it** (§7.1): every transaction reads and updates an account, a
//!   teller and a branch (TPC-B's record size, 100 bytes). 3,600 branches, 36,000 tellers and
//!   360,000 accounts at scale 1; a teller and an account belong to one branch, and branch `b`
//!   with its tellers and accounts to partition `b mod partitions` ("the branch table is
//!   horizontally partitioned equally across groups"). A client lives in its teller's group: it
//!   picks a teller of its home partition, updates that teller's branch, and an account of the
//!   same branch, or, with probability `global` (P-Store's p), of a branch of another partition.
//!   The paper says only that the teller of a global transaction is "in another group"; we
//!   follow TPC-B, where the remote item is the account and the teller and its branch stay
//!   together, so a global transaction spans exactly two partitions. With probability
//!   `read_only` (Fig. 4(b)), a transaction only reads one account instead.
//! * **YCSB's transactional workloads A, B, C** (G-DUR Table 3): 10^5 objects of 1 KB per
//!   partition at scale 1; read-only transactions read 2 (A, C) or 4 (B) objects, update
//!   transactions read 1 (A, C) or 2 (B) and update (read, then write) as many others; keys
//!   uniform (A, B) or Zipfian with θ = 0.99 (C; YCSB's constant, which the paper does not
//!   restate) within a partition. G-DUR's transactions are all global ("no replica holds all of
//!   its objects"): with `global` = 1 (the default) the first key is in the client's home
//!   partition and the others in one other partition.
//! * **walk**: an interactive transaction whose keys are not known in advance: it reads a key,
//!   derives the next key from the value read, and so on for `walk_steps` keys, then moves one
//!   unit from the first key to the last (so the sum of all values stays zero: an audit a test
//!   can check). A global walk alternates between two partitions.

pub mod program;

use crate::{Key, Value};
use ensemble_app::{ClientCtx, Workload};
use ensemble_core::{RequestError, Rows};
use program::{Program, Step};
use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

/// Why a key space, a placement or a workload file is refused. Every variant names what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    #[error("key {key} is outside the key space ({space})")]
    KeyOutside { key: Key, space: String },
    #[error("placement: {0}")]
    Placement(String),
    #[error("workload {field}: {problem}")]
    Field { field: &'static str, problem: String },
    #[error("workload file: {0}")]
    File(String),
}

// --- Key spaces -------------------------------------------------------------------------------

/// TPC-B's record size: 100 bytes, of which our value's integer is 8.
const TPCB_PAD: u32 = 92;
const TELLERS_PER_BRANCH: u64 = 10;
const ACCOUNTS_PER_BRANCH: u64 = 100;
/// TPC-B keys carry their table in the top bits.
const TABLE_SHIFT: u32 = 48;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    Branch = 1,
    Teller = 2,
    Account = 3,
}

/// Which keys exist and which partition each belongs to.
#[derive(Clone, Debug, PartialEq)]
pub struct KeySpace {
    partitions: u32,
    shape: Shape,
}

#[derive(Clone, Debug, PartialEq)]
enum Shape {
    /// TPC-B's three tables; `branches` in all.
    Tpcb { branches: u64 },
    /// Keys `0 .. per_partition × partitions`; key `k` in partition `k mod partitions`.
    Flat { per_partition: u64, pad: u32 },
}

impl KeySpace {
    /// TPC-B with `branches` branches over `partitions` partitions (at least one branch each).
    pub fn tpcb(branches: u64, partitions: u32) -> Result<KeySpace, WorkloadError> {
        if partitions == 0 || branches < u64::from(partitions) {
            return Err(WorkloadError::Field {
                field: "scale",
                problem: format!("{branches} branches cannot be spread over {partitions} partitions (at least one each)"),
            });
        }
        Ok(KeySpace { partitions, shape: Shape::Tpcb { branches } })
    }

    /// `per_partition` objects of `8 + pad` bytes in each of `partitions` partitions.
    pub fn flat(per_partition: u64, partitions: u32, pad: u32) -> Result<KeySpace, WorkloadError> {
        if partitions == 0 || per_partition == 0 {
            return Err(WorkloadError::Field { field: "scale", problem: format!("{per_partition} objects per partition over {partitions} partitions") });
        }
        Ok(KeySpace { partitions, shape: Shape::Flat { per_partition, pad } })
    }

    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// What every key holds before it is first written.
    pub fn initial_value(&self) -> Value {
        match self.shape {
            Shape::Tpcb { .. } => Value { int: 0, pad: TPCB_PAD },
            Shape::Flat { pad, .. } => Value { int: 0, pad },
        }
    }

    pub fn describe(&self) -> String {
        match self.shape {
            Shape::Tpcb { branches } => format!(
                "TPC-B: {branches} branches, {} tellers, {} accounts over {} partitions",
                branches * TELLERS_PER_BRANCH,
                branches * ACCOUNTS_PER_BRANCH,
                self.partitions
            ),
            Shape::Flat { per_partition, pad, .. } => {
                format!("{} objects of {} bytes over {} partitions", per_partition * u64::from(self.partitions), 8 + pad, self.partitions)
            }
        }
    }

    pub fn contains(&self, key: Key) -> bool {
        self.partition(key).is_ok()
    }

    /// The partition `key` belongs to.
    pub fn partition(&self, key: Key) -> Result<u32, WorkloadError> {
        let p = u64::from(self.partitions);
        let outside = || WorkloadError::KeyOutside { key, space: self.describe() };
        match self.shape {
            Shape::Tpcb { branches } => {
                let (table, row) = (key >> TABLE_SHIFT, key & ((1 << TABLE_SHIFT) - 1));
                let branch = match table {
                    1 if row < branches => row,
                    2 if row < branches * TELLERS_PER_BRANCH => row / TELLERS_PER_BRANCH,
                    3 if row < branches * ACCOUNTS_PER_BRANCH => row / ACCOUNTS_PER_BRANCH,
                    _ => return Err(outside()),
                };
                Ok((branch % p) as u32)
            }
            Shape::Flat { per_partition, .. } if key < per_partition * p => Ok((key % p) as u32),
            Shape::Flat { .. } => Err(outside()),
        }
    }

    /// TPC-B: the key of row `row` of `table`.
    pub fn tpcb_key(table: Table, row: u64) -> Key {
        ((table as u64) << TABLE_SHIFT) | row
    }

    /// TPC-B: the table of `key` (keys of other spaces have none).
    pub fn table(&self, key: Key) -> Option<Table> {
        match (&self.shape, key >> TABLE_SHIFT) {
            (Shape::Tpcb { .. }, 1) => Some(Table::Branch),
            (Shape::Tpcb { .. }, 2) => Some(Table::Teller),
            (Shape::Tpcb { .. }, 3) => Some(Table::Account),
            _ => None,
        }
    }

    /// Flat spaces: how many keys a partition holds, and its `rank`-th key.
    fn per_partition(&self) -> u64 {
        match self.shape {
            Shape::Flat { per_partition, .. } => per_partition,
            Shape::Tpcb { branches } => branches / u64::from(self.partitions),
        }
    }

    fn flat_key(&self, partition: u32, rank: u64) -> Key {
        rank * u64::from(self.partitions) + u64::from(partition)
    }

    /// TPC-B: how many branches partition `p` holds.
    fn branches_in(&self, p: u32) -> u64 {
        let Shape::Tpcb { branches } = self.shape else { return 0 };
        let n = u64::from(self.partitions);
        branches / n + u64::from(u64::from(p) < branches % n)
    }
}

// --- Placement --------------------------------------------------------------------------------

/// Which groups replicate each partition (P-Store's `Items(g)`, by partition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Per partition, its groups, ascending.
    groups: Vec<Vec<u32>>,
}

impl Placement {
    /// Partition `p` replicated by groups `p, p + 1, …, p + factor − 1` (mod `groups`): P-Store
    /// Fig. 4's replication factor; `factor = groups` is full replication.
    pub fn spread(partitions: u32, groups: u32, factor: u32) -> Result<Placement, WorkloadError> {
        if factor == 0 || factor > groups {
            return Err(WorkloadError::Placement(format!("replication factor {factor} must be between 1 and the {groups} groups")));
        }
        let placed = (0..partitions)
            .map(|p| {
                let mut gs: Vec<u32> = (0..factor).map(|i| (p + i) % groups).collect();
                gs.sort_unstable();
                gs
            })
            .collect();
        Ok(Placement { groups: placed })
    }

    /// `partition=group,group; partition=group; …`, every partition from 0 up listed once, each
    /// with at least one of the `groups` groups.
    pub fn parse(text: &str, groups: u32) -> Result<Placement, WorkloadError> {
        let bad = |m: String| WorkloadError::Placement(m);
        let mut placed: Vec<Option<Vec<u32>>> = Vec::new();
        for (i, item) in text.split(';').map(str::trim).filter(|s| !s.is_empty()).enumerate() {
            let (p, gs) = item.split_once('=').ok_or_else(|| bad(format!("item {} `{item}` is not `partition=group,group`", i + 1)))?;
            let p: usize = p.trim().parse().map_err(|_| bad(format!("item {} `{item}`: `{}` is not a partition number", i + 1, p.trim())))?;
            let mut list = Vec::new();
            for g in gs.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let g: u32 = g.parse().map_err(|_| bad(format!("partition {p}: `{g}` is not a group number")))?;
                if g >= groups {
                    return Err(bad(format!("partition {p}: group {g} does not exist (groups 0 to {})", groups - 1)));
                }
                if !list.contains(&g) {
                    list.push(g);
                }
            }
            if list.is_empty() {
                return Err(bad(format!("partition {p} has no group: its keys would have no replica")));
            }
            list.sort_unstable();
            if placed.len() <= p {
                placed.resize(p + 1, None);
            }
            if placed[p].replace(list).is_some() {
                return Err(bad(format!("partition {p} is placed twice")));
            }
        }
        if placed.is_empty() {
            return Err(bad("it places no partition".into()));
        }
        let groups = placed
            .into_iter()
            .enumerate()
            .map(|(p, gs)| gs.ok_or_else(|| bad(format!("partition {p} is not placed: its keys would have no replica"))))
            .collect::<Result<_, _>>()?;
        Ok(Placement { groups })
    }

    pub fn partitions(&self) -> u32 {
        self.groups.len() as u32
    }

    pub fn groups_of(&self, partition: u32) -> &[u32] {
        &self.groups[partition as usize]
    }

    pub fn partitions_of_group(&self, group: u32) -> Vec<u32> {
        (0..self.partitions()).filter(|&p| self.groups_of(p).contains(&group)).collect()
    }
}

// --- Workload specs ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KvKind {
    Tpcb,
    YcsbA,
    YcsbB,
    YcsbC,
    Walk,
}

impl KvKind {
    pub const NAMES: [&'static str; 5] = ["tpcb", "ycsb-a", "ycsb-b", "ycsb-c", "walk"];

    pub fn name(self) -> &'static str {
        match self {
            KvKind::Tpcb => "tpcb",
            KvKind::YcsbA => "ycsb-a",
            KvKind::YcsbB => "ycsb-b",
            KvKind::YcsbC => "ycsb-c",
            KvKind::Walk => "walk",
        }
    }

    pub fn parse(name: &str) -> Option<KvKind> {
        Self::NAMES.iter().position(|n| *n == name).map(|i| [KvKind::Tpcb, KvKind::YcsbA, KvKind::YcsbB, KvKind::YcsbC, KvKind::Walk][i])
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyDistribution {
    Uniform,
    Zipfian,
}

/// A key-value workload: what its clients ask for. Built by [`KvWorkloadSpec::preset`] or
/// read from a TOML file ([`KvWorkloadSpec::from_toml`]: `workload = "tpcb"` and any of the
/// other fields, which default to the preset's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvWorkloadSpec {
    pub workload: KvKind,
    /// Multiplies the key space (TPC-B's branches, YCSB's objects per partition).
    pub scale: f64,
    /// Share of global transactions (P-Store's p).
    pub global: f64,
    /// Share of read-only transactions.
    pub read_only: f64,
    pub distribution: KeyDistribution,
    /// The Zipfian constant θ.
    pub zipf_theta: f64,
    /// YCSB: keys a read-only transaction reads.
    pub reads: u32,
    /// YCSB: keys an update transaction only reads, and keys it updates.
    pub update_reads: u32,
    pub updates: u32,
    /// YCSB: an object's size in bytes (at least 8).
    pub object_bytes: u32,
    /// walk: keys a walk visits.
    pub walk_steps: u32,
}

impl KvWorkloadSpec {
    pub fn preset(kind: KvKind) -> KvWorkloadSpec {
        let base = KvWorkloadSpec {
            workload: kind,
            scale: 1.0,
            global: 1.0,
            read_only: 0.9,
            distribution: KeyDistribution::Uniform,
            zipf_theta: 0.99,
            reads: 2,
            update_reads: 1,
            updates: 1,
            object_bytes: 1024,
            walk_steps: 4,
        };
        match kind {
            // TPC-B's own remote share, 15 %; all updates.
            KvKind::Tpcb => KvWorkloadSpec { global: 0.15, read_only: 0.0, object_bytes: 8 + TPCB_PAD, ..base },
            KvKind::YcsbA => base,
            KvKind::YcsbB => KvWorkloadSpec { reads: 4, update_reads: 2, updates: 2, ..base },
            KvKind::YcsbC => KvWorkloadSpec { distribution: KeyDistribution::Zipfian, ..base },
            KvKind::Walk => KvWorkloadSpec { global: 0.2, read_only: 0.0, object_bytes: 8, ..base },
        }
    }

    pub fn default_for(name: &str) -> Option<KvWorkloadSpec> {
        KvKind::parse(name).map(Self::preset)
    }

    /// A workload file: `workload = "<kind>"` and overrides of the preset's fields.
    pub fn from_toml(text: &str) -> Result<KvWorkloadSpec, WorkloadError> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| WorkloadError::File(e.to_string()))?;
        let kind = match table.get("workload") {
            Some(toml::Value::String(s)) => {
                KvKind::parse(s).ok_or_else(|| WorkloadError::File(format!("workload = \"{s}\" is not one of {}", KvKind::NAMES.join(", "))))?
            }
            Some(other) => return Err(WorkloadError::File(format!("workload must be a string, got {other}"))),
            None => return Err(WorkloadError::File(format!("it names no workload (workload = one of {})", KvKind::NAMES.join(", ")))),
        };
        let mut merged = toml::Table::try_from(Self::preset(kind)).map_err(|e| WorkloadError::File(e.to_string()))?;
        merged.extend(table);
        let spec: KvWorkloadSpec = merged.try_into().map_err(|e: toml::de::Error| WorkloadError::File(e.to_string()))?;
        spec.validate()?;
        Ok(spec)
    }

    pub fn name(&self) -> &'static str {
        self.workload.name()
    }

    pub fn validate(&self) -> Result<(), WorkloadError> {
        let share = |field: &'static str, x: f64| {
            if (0.0..=1.0).contains(&x) {
                Ok(())
            } else {
                Err(WorkloadError::Field { field, problem: format!("{x} is not a share between 0 and 1") })
            }
        };
        share("global", self.global)?;
        share("read_only", self.read_only)?;
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return Err(WorkloadError::Field { field: "scale", problem: format!("{} must be a positive number", self.scale) });
        }
        if !(self.zipf_theta.is_finite() && self.zipf_theta > 0.0) {
            return Err(WorkloadError::Field { field: "zipf_theta", problem: format!("{} must be positive", self.zipf_theta) });
        }
        if self.object_bytes < 8 {
            return Err(WorkloadError::Field { field: "object_bytes", problem: format!("{} is less than the 8 bytes of the value", self.object_bytes) });
        }
        let positive = |field: &'static str, n: u32, max: u32| {
            if (1..=max).contains(&n) {
                Ok(())
            } else {
                Err(WorkloadError::Field { field, problem: format!("{n} must be between 1 and {max}") })
            }
        };
        match self.workload {
            KvKind::Tpcb => {}
            KvKind::Walk => positive("walk_steps", self.walk_steps, 64)?,
            _ => {
                positive("reads", self.reads, 64)?;
                positive("updates", self.updates, 64)?;
                if self.update_reads > 64 {
                    return Err(WorkloadError::Field { field: "update_reads", problem: format!("{} is more than 64", self.update_reads) });
                }
            }
        }
        Ok(())
    }

    /// The key space over `partitions` partitions.
    pub fn key_space(&self, partitions: u32) -> Result<KeySpace, WorkloadError> {
        self.validate()?;
        match self.workload {
            KvKind::Tpcb => KeySpace::tpcb(((3600.0 * self.scale).round() as u64).max(u64::from(partitions)), partitions),
            _ => KeySpace::flat(((100_000.0 * self.scale).round() as u64).max(1), partitions, self.object_bytes - 8),
        }
    }

    /// A client whose home is `home_partition` (its teller's group's partition, for TPC-B).
    pub fn client(&self, space: &KeySpace, home_partition: u32) -> Box<dyn Workload> {
        let zipf = (self.distribution == KeyDistribution::Zipfian)
            .then(|| rand_distr::Zipf::new(space.per_partition() as f64, self.zipf_theta).expect("validated: n ≥ 1, θ > 0"));
        Box::new(KvClient { spec: self.clone(), space: space.clone(), home: home_partition % space.partitions(), zipf })
    }
}

// --- Clients ----------------------------------------------------------------------------------

struct KvClient {
    spec: KvWorkloadSpec,
    space: KeySpace,
    home: u32,
    zipf: Option<rand_distr::Zipf<f64>>,
}

impl KvClient {
    /// A partition other than the home one (the home one if there is no other).
    fn other_partition(&self, rng: &mut dyn RngCore) -> u32 {
        let n = self.space.partitions();
        if n == 1 {
            return self.home;
        }
        (self.home + rng.random_range(1..n)) % n
    }

    /// A key of partition `p`, by the spec's distribution.
    fn key_in(&self, p: u32, rng: &mut dyn RngCore) -> Key {
        let n = self.space.per_partition();
        let rank = match &self.zipf {
            Some(z) => (rand_distr::Distribution::sample(z, rng) as u64).clamp(1, n) - 1,
            None => rng.random_range(0..n),
        };
        self.space.flat_key(p, rank)
    }

    /// `count` distinct keys: the first in the home partition, the rest in `other` (or home).
    fn distinct_keys(&self, count: u32, global: bool, rng: &mut dyn RngCore, taken: &mut Vec<Key>) {
        let other = if global { self.other_partition(rng) } else { self.home };
        let want = taken.len() + count as usize;
        let mut tries = 0;
        while taken.len() < want {
            let p = if taken.is_empty() { self.home } else { other };
            let k = self.key_in(p, rng);
            tries += 1;
            // A tiny partition may not have enough distinct keys: then repeat one.
            if !taken.contains(&k) || tries > 64 {
                taken.push(k);
            }
        }
    }
}

fn int(k: u64) -> ensemble_core::Value {
    ensemble_core::Value::Int(k as i64)
}

impl Workload for KvClient {
    fn next(&mut self, rng: &mut dyn RngCore, _ctx: &ClientCtx) -> (String, Vec<ensemble_core::Value>) {
        let global = rng.random_bool(self.spec.global) && self.space.partitions() > 1;
        let read_only = rng.random_bool(self.spec.read_only);
        match self.spec.workload {
            KvKind::Tpcb => {
                let branch_of = |rng: &mut dyn RngCore, p: u32| {
                    let i = rng.random_range(0..self.space.branches_in(p));
                    u64::from(p) + i * u64::from(self.space.partitions())
                };
                let branch = branch_of(rng, self.home);
                let teller = branch * TELLERS_PER_BRANCH + rng.random_range(0..TELLERS_PER_BRANCH);
                let account_branch = if global {
                    let other = self.other_partition(rng);
                    branch_of(rng, other)
                } else {
                    branch
                };
                let account = account_branch * ACCOUNTS_PER_BRANCH + rng.random_range(0..ACCOUNTS_PER_BRANCH);
                let account = KeySpace::tpcb_key(Table::Account, account);
                if read_only {
                    return ("tpcb-balance".into(), vec![int(account)]);
                }
                let delta = rng.random_range(-99_999..=99_999i64);
                let teller = KeySpace::tpcb_key(Table::Teller, teller);
                let branch = KeySpace::tpcb_key(Table::Branch, branch);
                ("tpcb".into(), vec![int(account), int(teller), int(branch), ensemble_core::Value::Int(delta)])
            }
            KvKind::Walk => {
                let start = self.key_in(self.home, rng);
                let other = if global { self.other_partition(rng) } else { self.home };
                ("walk".into(), vec![int(start), int(u64::from(self.spec.walk_steps)), int(u64::from(other))])
            }
            _ => {
                let mut keys = Vec::new();
                if read_only {
                    self.distinct_keys(self.spec.reads, global, rng, &mut keys);
                    ("ycsb-read".into(), keys.into_iter().map(int).collect())
                } else {
                    self.distinct_keys(self.spec.update_reads + self.spec.updates, global, rng, &mut keys);
                    let mut params = vec![int(u64::from(self.spec.update_reads))];
                    params.extend(keys.into_iter().map(int));
                    ("ycsb-update".into(), params)
                }
            }
        }
    }
}

// --- Programs ---------------------------------------------------------------------------------

/// The transaction types: name, parameters.
pub const TRANSACTIONS: [(&str, &str); 5] = [
    ("tpcb", "account, teller, branch, delta"),
    ("tpcb-balance", "account"),
    ("ycsb-read", "key, key, ..."),
    ("ycsb-update", "reads, key, key, ... (the first `reads` keys are read, the others updated)"),
    ("walk", "start key, steps, partition of the odd steps"),
];

/// The program of a request, or what is wrong with it (an unknown type, a wrong arity, a key
/// outside the key space): refused before anything runs.
pub fn program(txn: &str, params: &[ensemble_core::Value], space: &KeySpace) -> Result<Box<dyn Program>, RequestError> {
    let arity = |expected: usize| {
        if params.len() == expected {
            Ok(())
        } else {
            Err(RequestError::Arity { txn: txn.into(), expected, got: params.len() })
        }
    };
    let param = |index: usize, name: &str| -> Result<i64, RequestError> {
        match &params[index] {
            ensemble_core::Value::Int(i) => Ok(*i),
            other => Err(RequestError::ParamType {
                txn: txn.into(),
                index,
                param: name.into(),
                expected: "an integer".into(),
                got: format!("{other:?}"),
            }),
        }
    };
    let key = |index: usize, name: &str, table: Option<Table>| -> Result<Key, RequestError> {
        let k = param(index, name)?;
        let wrong = |expected: String| RequestError::ParamType { txn: txn.into(), index, param: name.into(), expected, got: k.to_string() };
        let k = u64::try_from(k).map_err(|_| wrong(format!("a key of the key space ({})", space.describe())))?;
        if let Err(e) = space.partition(k) {
            return Err(wrong(format!("a key of the key space: {e}")));
        }
        if let Some(t) = table.filter(|t| space.table(k) != Some(*t)) {
            return Err(wrong(format!("a key of the {t:?} table")));
        }
        Ok(k)
    };
    match txn {
        "tpcb" => {
            arity(4)?;
            let keys = [key(0, "account", Some(Table::Account))?, key(1, "teller", Some(Table::Teller))?, key(2, "branch", Some(Table::Branch))?];
            Ok(Box::new(Transfer { keys: keys.to_vec(), delta: param(3, "delta")?, at: 0, phase: Phase::Read, balance: 0 }))
        }
        "tpcb-balance" => {
            arity(1)?;
            Ok(Box::new(ReadAll { keys: vec![key(0, "account", Some(Table::Account))?], updates: 0, read: Vec::new(), at: 0 }))
        }
        "ycsb-read" => {
            if params.is_empty() {
                return Err(RequestError::Arity { txn: txn.into(), expected: 1, got: 0 });
            }
            let keys = (0..params.len()).map(|i| key(i, "key", None)).collect::<Result<Vec<_>, _>>()?;
            Ok(Box::new(ReadAll { keys, updates: 0, read: Vec::new(), at: 0 }))
        }
        "ycsb-update" => {
            let reads = if params.is_empty() { 0 } else { param(0, "reads")? };
            let keys = (1..params.len()).map(|i| key(i, "key", None)).collect::<Result<Vec<_>, _>>()?;
            if reads < 0 || reads as usize >= keys.len() {
                return Err(RequestError::ParamType {
                    txn: txn.into(),
                    index: 0,
                    param: "reads".into(),
                    expected: format!("fewer than the {} keys that follow", keys.len()),
                    got: reads.to_string(),
                });
            }
            let updates = keys.len() - reads as usize;
            Ok(Box::new(ReadAll { keys, updates, read: Vec::new(), at: 0 }))
        }
        "walk" => {
            arity(3)?;
            let start = key(0, "start key", None)?;
            let steps = param(1, "steps")?;
            if !(1..=64).contains(&steps) {
                return Err(RequestError::ParamType { txn: txn.into(), index: 1, param: "steps".into(), expected: "1 to 64".into(), got: steps.to_string() });
            }
            let other = param(2, "partition")?;
            if other < 0 || other >= i64::from(space.partitions()) || space.table(start).is_some() {
                return Err(RequestError::ParamType {
                    txn: txn.into(),
                    index: 2,
                    param: "partition".into(),
                    expected: format!("a partition of a flat key space ({})", space.describe()),
                    got: other.to_string(),
                });
            }
            let home = space.partition(start).expect("checked");
            Ok(Box::new(Walk { space: space.clone(), partitions: [home, other as u32], steps: steps as u32, visited: Vec::new(), next: start, written: 0 }))
        }
        other => Err(RequestError::UnknownTransaction { txn: other.into() }),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Read,
    Write,
}

/// TPC-B: each of account, teller, branch read then updated by `delta`; returns the account's
/// new balance.
#[derive(Debug)]
struct Transfer {
    keys: Vec<Key>,
    delta: i64,
    at: usize,
    phase: Phase,
    balance: i64,
}

impl Program for Transfer {
    fn step(&mut self, read: Option<(Key, Value)>) -> Step {
        if let Some((_, v)) = read {
            let new = Value { int: v.int.wrapping_add(self.delta), pad: v.pad };
            if self.at == 0 {
                self.balance = new.int;
            }
            self.phase = Phase::Write;
            return Step::Write(self.keys[self.at], new);
        }
        if self.phase == Phase::Write {
            self.at += 1;
            self.phase = Phase::Read;
        }
        match self.keys.get(self.at) {
            Some(&k) => Step::Read(k),
            None => Step::Commit(vec![vec![ensemble_core::Value::Int(self.balance)]]),
        }
    }
}

/// Reads every key; the last `updates` keys are then written (a YCSB update: read, write the
/// value plus one). Returns the values read, in order.
#[derive(Debug)]
struct ReadAll {
    keys: Vec<Key>,
    updates: usize,
    read: Vec<Value>,
    at: usize,
}

impl Program for ReadAll {
    fn step(&mut self, read: Option<(Key, Value)>) -> Step {
        if let Some((_, v)) = read {
            self.read.push(v);
        }
        if self.read.len() < self.keys.len() {
            return Step::Read(self.keys[self.read.len()]);
        }
        let first_update = self.keys.len() - self.updates;
        if self.at < self.updates {
            let i = first_update + self.at;
            self.at += 1;
            let v = self.read[i];
            return Step::Write(self.keys[i], Value { int: v.int.wrapping_add(1), pad: v.pad });
        }
        let rows: Rows = self.read.iter().map(|v| vec![ensemble_core::Value::Int(v.int)]).collect();
        Step::Commit(rows)
    }
}

/// An interactive transaction: the next key depends on the value just read.
#[derive(Debug)]
struct Walk {
    space: KeySpace,
    /// Even steps in the first partition, odd steps in the second.
    partitions: [u32; 2],
    steps: u32,
    visited: Vec<(Key, Value)>,
    next: Key,
    /// Writes issued after the last read: 0, 1 (the first key's), 2 (the last key's).
    written: u8,
}

/// SplitMix64's finalizer: spreads a key and a value over the key space.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Program for Walk {
    fn step(&mut self, read: Option<(Key, Value)>) -> Step {
        if let Some((k, v)) = read {
            self.visited.push((k, v));
            let i = self.visited.len();
            let rank = mix(k ^ (v.int as u64).rotate_left(17) ^ i as u64) % self.space.per_partition();
            self.next = self.space.flat_key(self.partitions[i % 2], rank);
        }
        if (self.visited.len() as u32) < self.steps {
            return Step::Read(self.next);
        }
        // Every key read: move one unit from the first key to the last (none if they coincide).
        let (first, last) = (self.visited[0], *self.visited.last().expect("at least one step"));
        self.written += 1;
        match self.written {
            1 if first.0 != last.0 => Step::Write(first.0, Value { int: first.1.int - 1, pad: first.1.pad }),
            2 if first.0 != last.0 => Step::Write(last.0, Value { int: last.1.int + 1, pad: last.1.pad }),
            _ => Step::Commit(vec![vec![ensemble_core::Value::Int(self.visited.len() as i64)]]),
        }
    }
}

#[cfg(test)]
mod tests;
