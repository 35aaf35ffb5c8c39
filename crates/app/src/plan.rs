//! Partition plans: what the analyzer produces and the Conveyor Belt consumes.
//!
//! For each transaction type: its class and its partitioning parameter(s). For each table: whether
//! every instance holds all of it (replicated: written by global operations, read anywhere) or
//! each instance holds the rows of its own partitions. The routing function maps a partitioning
//! value to an instance: an integer `v` goes to instance `v mod n` (so that an instance can mint
//! ids that route to itself, as Eliá does), any other value by its stable hash.

use crate::model::Application;
use crate::{InstanceId, OpClass};
use ensemble_core::{Request, RequestError, Value};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionPlan {
    pub application: String,
    /// [`Application::fingerprint`] of the definition this plan was derived from.
    pub fingerprint: String,
    /// What produced the plan (a person, the analyzer, a baseline).
    #[serde(default)]
    pub origin: String,
    /// A plan that is only correct up to this many instances (the centralized baseline: one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_instances: Option<u32>,
    pub tables: BTreeMap<String, TablePlacement>,
    pub transactions: BTreeMap<String, TxnPlan>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "placement", rename_all = "kebab-case", deny_unknown_fields)]
pub enum TablePlacement {
    /// Every instance holds every row.
    Replicated,
    /// A row lives at the instance its `column` value routes to.
    Partitioned { column: String },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TxnPlan {
    pub class: PlanClass,
    /// Parameters whose values route the request. Empty: any instance may serve it.
    #[serde(default)]
    pub partition_by: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlanClass {
    Commutative,
    Local,
    Global,
    /// Local when all partitioning parameters route to one instance, global otherwise
    /// (RUBiS's double key).
    LocalGlobal,
}

impl PlanClass {
    pub fn name(self) -> &'static str {
        match self {
            PlanClass::Commutative => "commutative",
            PlanClass::Local => "local",
            PlanClass::Global => "global",
            PlanClass::LocalGlobal => "local-global",
        }
    }
}

/// Where and how one request runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub class: OpClass,
    /// `None`: whichever instance receives it.
    pub instance: Option<InstanceId>,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("plan file {path}: {message}")]
    File { path: String, message: String },
    #[error("plan for `{plan_app}` does not match application `{app}`: {message}")]
    Mismatch { plan_app: String, app: String, message: String },
}

impl PartitionPlan {
    /// Reads a plan file and checks it against `app`. Every error names the file.
    pub fn load(path: &std::path::Path, app: &Application) -> Result<PartitionPlan, PlanError> {
        let file_err = |message: String| PlanError::File { path: path.display().to_string(), message };
        let text = std::fs::read_to_string(path).map_err(|e| file_err(e.to_string()))?;
        let plan: PartitionPlan = toml::from_str(&text).map_err(|e| file_err(e.to_string()))?;
        plan.validate(app).map_err(|e| file_err(e.to_string()))?;
        Ok(plan)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a plan always serializes")
    }

    /// Refuses a plan that was not made for exactly this application definition, or that names
    /// transactions, parameters, tables or columns the application does not have.
    pub fn validate(&self, app: &Application) -> Result<(), PlanError> {
        let mismatch = |message: String| PlanError::Mismatch { plan_app: self.application.clone(), app: app.name.into(), message };
        if self.application != app.name {
            return Err(mismatch("the plan names another application".into()));
        }
        let fp = app.fingerprint();
        if self.fingerprint != fp {
            return Err(mismatch(format!(
                "fingerprint {} is not the application's {fp}: the plan was derived from another definition; derive it again",
                self.fingerprint
            )));
        }
        for t in &app.transactions {
            let Some(tp) = self.transactions.get(t.name) else {
                return Err(mismatch(format!("transaction `{}` has no entry", t.name)));
            };
            for p in &tp.partition_by {
                if t.param_index(p).is_none() {
                    return Err(mismatch(format!("transaction `{}` has no parameter `{p}` to partition by", t.name)));
                }
            }
            if tp.class == PlanClass::LocalGlobal && tp.partition_by.len() < 2 {
                return Err(mismatch(format!("transaction `{}` is local-global but names fewer than two partitioning parameters", t.name)));
            }
        }
        if let Some(extra) = self.transactions.keys().find(|k| app.txn(k).is_none()) {
            return Err(mismatch(format!("the plan names transaction `{extra}`, which the application does not have")));
        }
        for table in &app.tables {
            match self.tables.get(&table.name) {
                None => return Err(mismatch(format!("table `{}` has no placement", table.name))),
                Some(TablePlacement::Partitioned { column }) if !table.has_column(column) => {
                    return Err(mismatch(format!("table `{}` has no column `{column}` to partition by", table.name)));
                }
                Some(_) => {}
            }
        }
        if let Some(extra) = self.tables.keys().find(|k| app.table(k).is_none()) {
            return Err(mismatch(format!("the plan places table `{extra}`, which the application does not have")));
        }
        Ok(())
    }

    /// The instance a partitioning value routes to.
    pub fn instance_of(value: &Value, instances: u32) -> InstanceId {
        let n = instances.max(1) as u64;
        match value {
            Value::Int(v) => InstanceId(v.rem_euclid(n as i64) as u32),
            other => InstanceId((other.stable_hash() % n) as u32),
        }
    }

    /// Class and instance of one request. The request must have been checked against the
    /// application already.
    pub fn route(&self, app: &Application, req: &Request, instances: u32) -> Result<Route, RequestError> {
        let unknown = || RequestError::UnknownTransaction { txn: req.txn.clone() };
        let txn = app.txn(&req.txn).ok_or_else(unknown)?;
        let tp = self.transactions.get(&req.txn).ok_or_else(unknown)?;
        let targets: Vec<InstanceId> = tp
            .partition_by
            .iter()
            .map(|p| Self::instance_of(&req.params[txn.param_index(p).expect("validated plan")], instances))
            .collect();
        let first = targets.first().copied();
        Ok(match tp.class {
            PlanClass::Commutative => Route { class: OpClass::Commutative, instance: None },
            PlanClass::Local => Route { class: OpClass::Local, instance: first },
            PlanClass::Global => Route { class: OpClass::Global, instance: first },
            PlanClass::LocalGlobal => {
                let class = if targets.iter().all(|t| Some(*t) == first) { OpClass::Local } else { OpClass::Global };
                Route { class, instance: first }
            }
        })
    }

    pub fn placement(&self, table: &str) -> Option<&TablePlacement> {
        self.tables.get(table)
    }

    /// Does `instance` hold this row of `table`? `column_value` finds a column's value in the row.
    pub fn holds_row<'a>(&self, table: &str, instance: InstanceId, instances: u32, column_value: impl Fn(&str) -> Option<&'a Value>) -> bool {
        match self.tables.get(table) {
            Some(TablePlacement::Partitioned { column }) => match column_value(column) {
                Some(v) => Self::instance_of(v, instances) == instance,
                None => true,
            },
            _ => true,
        }
    }

    /// Every transaction local, every table replicated: correct only with one instance.
    pub fn centralized(app: &Application) -> PartitionPlan {
        PartitionPlan {
            application: app.name.into(),
            fingerprint: app.fingerprint(),
            origin: "baseline: centralized (one instance serves every client)".into(),
            max_instances: Some(1),
            tables: app.tables.iter().map(|t| (t.name.clone(), TablePlacement::Replicated)).collect(),
            transactions: app
                .transactions
                .iter()
                .map(|t| (t.name.to_string(), TxnPlan { class: PlanClass::Local, partition_by: vec![] }))
                .collect(),
        }
    }

    /// The read-only baseline of the papers' WAN evaluation: read-only transactions run at the
    /// instance that receives them; every transaction that may write is global. Every table is
    /// replicated.
    pub fn read_only(app: &Application) -> PartitionPlan {
        PartitionPlan {
            application: app.name.into(),
            fingerprint: app.fingerprint(),
            origin: "baseline: read-only (only read-only transactions are local)".into(),
            max_instances: None,
            tables: app.tables.iter().map(|t| (t.name.clone(), TablePlacement::Replicated)).collect(),
            transactions: app
                .transactions
                .iter()
                .map(|t| {
                    let class = if app.is_read_only(t.name) { PlanClass::Local } else { PlanClass::Global };
                    (t.name.to_string(), TxnPlan { class, partition_by: vec![] })
                })
                .collect(),
        }
    }

    /// Refuses to run a plan with more instances than it is correct for.
    pub fn check_instances(&self, instances: u32) -> Result<(), String> {
        match self.max_instances {
            Some(max) if instances > max => {
                Err(format!("plan `{}` is only correct for at most {max} instance(s), not {instances}", self.origin))
            }
            _ if instances == 0 => Err("at least one instance is needed".into()),
            _ => Ok(()),
        }
    }
}
