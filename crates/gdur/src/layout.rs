//! Data placement as the engine sees it: which partition a key belongs to, which groups
//! replicate each partition, and who is in each group. Part of the deployment (issue 13:
//! "which group replicates which keys").

use crate::txn::Term;
use ensemble_core::ProcessId;
use ensemble_group::multicast::Directory;
use ensemble_group::GroupId;
use ensemble_kv::Key;
use std::sync::Arc;

/// Where every key lives. Every process of a run is given the same one.
#[derive(Clone)]
pub struct Layout {
    partition_of: Arc<dyn Fn(Key) -> u32 + Send + Sync>,
    /// The groups replicating each partition, ascending.
    replicas: Vec<Vec<GroupId>>,
    directory: Directory,
}

impl std::fmt::Debug for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Layout").field("replicas", &self.replicas).field("directory", &self.directory).finish()
    }
}

impl Layout {
    /// `partition_of` maps every key of the key space to a partition below `replicas.len()`;
    /// `replicas[p]` are the groups replicating partition `p` (each a group of `directory`).
    pub fn new(
        partition_of: Arc<dyn Fn(Key) -> u32 + Send + Sync>,
        replicas: Vec<Vec<GroupId>>,
        directory: Directory,
    ) -> Result<Layout, String> {
        for (p, gs) in replicas.iter().enumerate() {
            if gs.is_empty() {
                return Err(format!("partition {p} is replicated by no group"));
            }
            if let Some(g) = gs.iter().find(|g| directory.members(**g).is_empty()) {
                return Err(format!("partition {p} is placed at group {}, which has no members", g.0));
            }
        }
        let replicas = replicas
            .into_iter()
            .map(|mut gs| {
                gs.sort();
                gs.dedup();
                gs
            })
            .collect();
        Ok(Layout { partition_of, replicas, directory })
    }

    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    pub fn partition(&self, k: Key) -> u32 {
        (self.partition_of)(k)
    }

    /// The groups replicating `k`.
    pub fn groups_of(&self, k: Key) -> &[GroupId] {
        let p = self.partition(k) as usize;
        self.replicas.get(p).map(Vec::as_slice).unwrap_or(&[])
    }

    pub fn group_replicates(&self, g: GroupId, k: Key) -> bool {
        self.groups_of(k).contains(&g)
    }

    pub fn group_of(&self, p: ProcessId) -> Option<GroupId> {
        self.directory.group_of(p)
    }

    /// Whether process `p` replicates `k` (G-DUR's `isLocal(x)` at `p`).
    pub fn replicates(&self, p: ProcessId, k: Key) -> bool {
        self.group_of(p).is_some_and(|g| self.group_replicates(g, k))
    }

    /// The groups replicating any of `keys`, ascending.
    pub fn groups_of_keys(&self, keys: impl IntoIterator<Item = Key>) -> Vec<GroupId> {
        let mut gs: Vec<GroupId> = keys.into_iter().flat_map(|k| self.groups_of(k).iter().copied()).collect();
        gs.sort();
        gs.dedup();
        gs
    }

    /// P-Store §2: `T` is local iff every replica of `T` replicates every item of `T`.
    pub fn is_local(&self, t: &Term) -> bool {
        let items = t.items();
        let groups = self.groups_of_keys(items.iter().copied());
        groups.iter().all(|&g| items.iter().all(|&k| self.group_replicates(g, k)))
    }

    /// The processes replicating a key `t` writes (`WReplicas(T)`), ascending.
    pub fn write_replicas(&self, t: &Term) -> Vec<ProcessId> {
        self.directory.processes(&self.groups_of_keys(t.write_keys()))
    }

    /// Whether every group replicates every partition (full replication).
    pub fn full(&self) -> bool {
        let all: Vec<GroupId> = self.directory.groups().collect();
        self.replicas.iter().all(|gs| *gs == all)
    }
}
