//! The static analyzer: an application's declared SQL in, its partition plan out.
//!
//! It follows Operation Partitioning (Eliá §3, Gyro §IV and §VI):
//! 1. [`extract`]: the read set and write set of every transaction type, as entries
//!    ⟨accessed attributes, condition⟩, from every declared statement regardless of execution
//!    path, parsed with `sqlparser` in the application's dialect;
//! 2. [`conflict`]: conflict detection (Algorithm 1 lines 1–10), conditions in DNF with a
//!    satisfiability test, keeping each conflict's direction;
//! 3. [`search`]: partitioning optimization (lines 11–20), exhaustive branch and bound over the
//!    partitioning parameters of every type, several parameters per type allowed;
//! 4. [`classify`]: commutative / local / global / local-global, and a placement for every table;
//! 5. [`report()`]: Table 1 of the papers and, with `explain`, the reasons.
//!
//! [`check`] is the dynamic counterpart: it runs random operations on SQLite, records the rows
//! each one really read and wrote, and verifies that no observed conflict between operations on
//! different instances contradicts the plan.
//!
//! The CLI calls [`run`] (`ensemble analyze APP [--weights FILE] [--explain] [--out PLAN.toml]
//! [--dialect sqlite|postgres|mysql]`); other code calls [`analyze`] or [`analyze_spec`].

pub mod check;
pub mod classify;
pub mod cond;
pub mod conflict;
pub mod error;
pub mod extract;
pub mod report;
pub mod search;
pub mod spec;
pub mod sql;
pub mod synthetic;

pub use error::{AnalyzeError, ErrorKind, Position, StatementError};
pub use report::report;
pub use spec::{AppSpec, ParamSpec, StmtSpec, TableSpec, TxnSpec};
pub use sql::Dialect;

use classify::{Placement, Reason};
use conflict::Conflict;
use ensemble_app::{Application, PartitionPlan, PlanClass, TxnPlan};
use extract::RwSets;
use search::{Outcome, Threat};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The workload mix: relative frequency of each transaction type (types not named weigh 1), and
/// optionally the partitioning parameters some types must use.
///
/// Pinning exists because a workload may route a type by a key the analysis would not choose:
/// the micro-benchmark sends `global_op` to its client's home partition (`part`), although its
/// declared SQL alone would be local when routed by `k`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Weights {
    pub by_txn: BTreeMap<String, f64>,
    /// Types whose partitioning parameters are fixed (in routing order).
    pub partition_by: BTreeMap<String, Vec<String>>,
    /// Where they were read from, for the report.
    pub source: Option<String>,
}

impl Weights {
    /// Reads a TOML file: either `txn = weight` lines at top level, or tables `[weights]` (the
    /// same lines) and `[partition_by]` (`txn = ["param", …]`).
    pub fn parse(text: &str, source: Option<&str>) -> Result<Weights, AnalyzeError> {
        let err = |message: String| AnalyzeError::Weights { path: source.map(str::to_string), message };
        let value: toml::Table = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        let structured = value.keys().all(|k| k == "weights" || k == "partition_by") && !value.is_empty();
        let (table, pins) = if structured {
            let get = |k: &str| match value.get(k) {
                Some(toml::Value::Table(t)) => Ok(t.clone()),
                Some(other) => Err(err(format!("`{k}` must be a table, not {other}"))),
                None => Ok(toml::Table::new()),
            };
            (get("weights")?, get("partition_by")?)
        } else {
            (value, toml::Table::new())
        };
        let mut partition_by = BTreeMap::new();
        for (k, v) in pins {
            let params = match &v {
                toml::Value::Array(a) => a.iter().map(|p| p.as_str().map(str::to_string)).collect::<Option<Vec<_>>>(),
                _ => None,
            };
            let params = params.ok_or_else(|| err(format!("partition_by of `{k}` must be a list of parameter names, not {v}")))?;
            partition_by.insert(k, params);
        }
        let mut by_txn = BTreeMap::new();
        for (k, v) in table {
            let w = match v {
                toml::Value::Integer(i) => i as f64,
                toml::Value::Float(f) => f,
                other => return Err(err(format!("weight of `{k}` is {other}, not a number"))),
            };
            if !w.is_finite() || w < 0.0 {
                return Err(err(format!("weight of `{k}` is {w}; weights are finite and not negative")));
            }
            by_txn.insert(k, w);
        }
        Ok(Weights { by_txn, partition_by, source: source.map(str::to_string) })
    }

    pub fn load(path: &Path) -> Result<Weights, AnalyzeError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| AnalyzeError::Weights { path: Some(path.display().to_string()), message: e.to_string() })?;
        Weights::parse(&text, Some(&path.display().to_string()))
    }
}

/// What a `replicated` table means for the rows local operations write.
///
/// The runtime (and its serializability checker) treats a replicated table as identical at every
/// instance, which only holds if nothing but global operations write it: a local write reaches
/// one copy. The papers allow more: a row only one partition ever reads may differ between
/// copies, which is what makes RUBiS's double key (local/global types) useful at all. Under
/// `Identical`, a type that would be local but writes a table that cannot be partitioned is made
/// global, and no type gets two partitioning parameters (a second key never makes a conflict on a
/// partitioned row local that the first does not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Replicas {
    /// Every copy of a replicated table is identical (what the runtime checks). The default.
    #[default]
    Identical,
    /// Copies may differ in rows that only one partition reads (the papers' partial
    /// partitioning); the report lists the tables concerned.
    Partial,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub dialect: Dialect,
    pub weights: Weights,
    /// Share of a local/global type's operations expected to be global (their keys route to
    /// different instances). With two instances and independent keys, one half.
    pub local_global_fraction: f64,
    /// Bound on branch-and-bound nodes per connected component of the conflict graph.
    pub node_budget: u64,
    pub replicas: Replicas,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            dialect: Dialect::Sqlite,
            weights: Weights::default(),
            local_global_fraction: 0.5,
            node_budget: 2_000_000,
            replicas: Replicas::Identical,
        }
    }
}

/// Everything the analysis found; [`Analysis::plan`] is what the runtime consumes.
#[derive(Clone, Debug)]
pub struct Analysis {
    pub spec: AppSpec,
    pub options: Options,
    /// Weight of each type, in declaration order.
    pub weights: Vec<f64>,
    pub sets: Vec<RwSets>,
    pub conflicts: Vec<Conflict>,
    pub threats: Vec<Threat>,
    /// Partitioning parameters of each type, as parameter indices.
    pub choice: Vec<Vec<usize>>,
    pub classes: Vec<PlanClass>,
    pub reasons: Vec<Vec<Reason>>,
    pub placements: Vec<Placement>,
    pub search: Outcome,
    pub plan: PartitionPlan,
    /// Things the reader of the plan must know (replicated tables whose copies may differ).
    pub warnings: Vec<String>,
}

impl Analysis {
    fn index(&self, txn: &str) -> Option<usize> {
        self.spec.transactions.iter().position(|t| t.name == txn)
    }

    pub fn class_of(&self, txn: &str) -> Option<PlanClass> {
        self.index(txn).map(|i| self.classes[i])
    }

    pub fn partition_by(&self, txn: &str) -> Option<Vec<String>> {
        let i = self.index(txn)?;
        Some(self.choice[i].iter().map(|p| self.spec.transactions[i].params[*p].name.clone()).collect())
    }

    pub fn read_only(&self, txn: &str) -> Option<bool> {
        self.index(txn).map(|i| self.sets[i].read_only())
    }
}

/// Analyses an application as the runtime defines it.
pub fn analyze(app: &Application, options: &Options) -> Result<Analysis, AnalyzeError> {
    analyze_spec(&AppSpec::from_application(app)?, options)
}

pub fn analyze_spec(spec: &AppSpec, options: &Options) -> Result<Analysis, AnalyzeError> {
    let n = spec.transactions.len();
    for k in options.weights.by_txn.keys() {
        if spec.txn(k).is_none() {
            return Err(AnalyzeError::Weights {
                path: options.weights.source.clone(),
                message: format!("no transaction `{k}` in application `{}`", spec.name),
            });
        }
    }
    if !(0.0..=1.0).contains(&options.local_global_fraction) {
        return Err(AnalyzeError::Other(format!("local/global fraction {} is not in [0, 1]", options.local_global_fraction)));
    }
    let mut pinned: Vec<Option<Vec<usize>>> = vec![None; n];
    for (k, ps) in &options.weights.partition_by {
        let wrong = |message: String| AnalyzeError::Weights { path: options.weights.source.clone(), message };
        let i = spec.transactions.iter().position(|t| &t.name == k).ok_or_else(|| wrong(format!("no transaction `{k}` in application `{}`", spec.name)))?;
        let idx = ps
            .iter()
            .map(|p| spec.transactions[i].param_index(p).ok_or_else(|| wrong(format!("transaction `{k}` has no parameter `{p}`"))))
            .collect::<Result<Vec<_>, _>>()?;
        pinned[i] = Some(idx);
    }
    let weights: Vec<f64> = spec.transactions.iter().map(|t| options.weights.by_txn.get(&t.name).copied().unwrap_or(1.0)).collect();
    let sets = extract::extract_all(spec, options.dialect).map_err(AnalyzeError::Statements)?;
    let conflicts = conflict::detect(spec, &sets);
    let commutative = classify::commutative(n, &conflicts);
    let threats = search::threats(&conflicts, n, &commutative);
    let params: Vec<usize> = spec.transactions.iter().map(|t| t.params.len()).collect();
    let problem = search::Problem {
        n,
        weights: &weights,
        commutative: &commutative,
        threats: &threats,
        candidates: search::candidates(n, &params, &threats)
            .into_iter()
            .zip(&pinned)
            .map(|(c, p)| match p {
                Some(p) => vec![p.clone()],
                None if options.replicas == Replicas::Identical => c.into_iter().filter(|c| c.len() < 2).collect(),
                None => c,
            })
            .collect(),
        local_global_fraction: options.local_global_fraction,
        node_budget: options.node_budget,
    };
    let outcome = search::search(&problem);
    let choice = outcome.choice.clone();
    let (mut classes, mut reasons) = classify::classify(n, &commutative, &threats, &conflicts, &choice);
    let mut placements = classify::placements(spec, &sets, &classes, &choice);
    let mut warnings = Vec::new();
    // Local writers of tables that stay replicated: made global (Identical) or reported (Partial).
    // Demotion only turns local types global, which can only turn tables replicated, so this ends.
    loop {
        let mut changed = false;
        for p in &placements {
            if p.placement != ensemble_app::TablePlacement::Replicated {
                continue;
            }
            for t in 0..n {
                let writes = sets[t].writes.iter().any(|w| w.table == p.table);
                if !writes || !matches!(classes[t], PlanClass::Local | PlanClass::LocalGlobal) {
                    continue;
                }
                match options.replicas {
                    Replicas::Identical => {
                        classes[t] = PlanClass::Global;
                        reasons[t].push(Reason::Placement { table: p.table.clone(), why: p.why.clone() });
                        changed = true;
                    }
                    Replicas::Partial => warnings.push(format!(
                        "replicated table `{}` is written by {} `{}`: its copies differ in the rows those writes touch, which no other partition reads",
                        p.table,
                        classes[t].name(),
                        spec.transactions[t].name
                    )),
                }
            }
        }
        if !changed {
            break;
        }
        placements = classify::placements(spec, &sets, &classes, &choice);
        warnings.clear();
    }
    // A read-only local type that reads only replicated tables runs at whichever instance
    // receives it: replicated tables change only by global operations, whose updates reach every
    // instance in token order, and nobody reads from a type that writes nothing. Routing it by a
    // key would only send it across the network for nothing. With partial replicas local writers
    // make copies differ, so this holds only when replicas are identical.
    let mut choice = choice;
    for t in (0..n).filter(|_| options.replicas == Replicas::Identical) {
        let replicated_only = sets[t].reads.iter().all(|r| {
            placements.iter().any(|p| p.table == r.table && p.placement == ensemble_app::TablePlacement::Replicated)
        });
        if classes[t] == PlanClass::Local && pinned[t].is_none() && sets[t].writes.is_empty() && replicated_only && !choice[t].is_empty() {
            choice[t].clear();
        }
    }
    let plan = PartitionPlan {
        application: spec.name.clone(),
        fingerprint: spec.fingerprint.clone(),
        origin: format!(
            "ensemble-analyze {}: static analysis of the declared SQL (dialect {}, weights {})",
            env!("CARGO_PKG_VERSION"),
            options.dialect,
            options.weights.source.as_deref().unwrap_or("1 each"),
        ),
        max_instances: None,
        tables: placements.iter().map(|p| (p.table.clone(), p.placement.clone())).collect(),
        transactions: spec
            .transactions
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let partition_by = match classes[i] {
                    PlanClass::Commutative => vec![],
                    _ => choice[i].iter().map(|p| t.params[*p].name.clone()).collect(),
                };
                (t.name.clone(), TxnPlan { class: classes[i], partition_by })
            })
            .collect(),
    };
    Ok(Analysis {
        spec: spec.clone(),
        options: options.clone(),
        weights,
        sets,
        conflicts,
        threats,
        choice,
        classes,
        reasons,
        placements,
        search: outcome,
        plan,
        warnings,
    })
}

/// What `ensemble analyze` was asked to do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Command {
    /// A shipped application's name (`shop`, `micro`).
    pub app: String,
    pub weights: Option<PathBuf>,
    pub explain: bool,
    /// Where to write the plan file; without it the plan is printed after the report.
    pub out: Option<PathBuf>,
    pub dialect: Dialect,
}

/// Runs `ensemble analyze`: returns the text to print.
pub fn run(cmd: &Command) -> Result<String, AnalyzeError> {
    let app = ensemble_app::application(&cmd.app).map_err(AnalyzeError::Other)?;
    let weights = match &cmd.weights {
        Some(p) => Weights::load(p)?,
        None => Weights::default(),
    };
    let options = Options { dialect: cmd.dialect, weights, ..Options::default() };
    let analysis = analyze(&app, &options)?;
    analysis.plan.validate(&app).map_err(|e| AnalyzeError::Other(format!("the analyzer produced an invalid plan: {e}")))?;
    let mut out = report(&analysis, cmd.explain);
    match &cmd.out {
        Some(path) => {
            std::fs::write(path, analysis.plan.to_toml()).map_err(|e| AnalyzeError::Other(format!("writing {}: {e}", path.display())))?;
            out.push_str(&format!("\nPlan written to {}\n", path.display()));
        }
        None => {
            out.push_str("\nPlan (write it with --out PLAN.toml):\n\n");
            out.push_str(&analysis.plan.to_toml());
        }
    }
    Ok(out)
}
