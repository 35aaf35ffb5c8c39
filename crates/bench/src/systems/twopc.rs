//! The two-phase-commit baseline of Gyro's Figure 5 (`ensemble_twopc`) as a [`Harness`]: the
//! belt's deployment, clients, application and plan, one database per instance on a MariaDB or
//! PostgreSQL server, and the replay check in commit-timestamp order.
//!
//! Real runs only. The simulator would need a model of the servers' row locks, lock waits and
//! prepared branches; a model that locked whole databases would flatter neither side, so the
//! baseline is not simulated (`validate` says so).

use crate::experiment::{Experiment, Runtime};
use crate::harness::{Classified, Harness, RunOutput, StorageFactory, Verdict};
use crate::systems::belt::{classify_sql, sql_client, BeltHarness};
use ensemble_app::{InstanceId, TablePlacement};
use ensemble_check::{InstanceState, ReplayOptions};
use ensemble_core::{Client, Completion, CompletionResult, Deployment, Outcome, Process, ProcessId, Request, Rows, Time};
use ensemble_server::{admin, TwoPcShared, TwoPcStorage};
use ensemble_twopc::{TwoPc, TwoPcConfig, TwoPcEvidence, TwoPcNode};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

/// A distributed transaction voted down this often is answered with an error.
const MAX_ATTEMPTS: u32 = 1000;
/// The first back-off before a voted-down transaction runs again (`TwoPcConfig::retry_backoff`):
/// a few LAN transactions' worth.
const RETRY_BACKOFF: std::time::Duration = std::time::Duration::from_millis(5);
/// How long a prepared branch waits for its decision before asking its coordinator
/// (`TwoPcConfig::inquire_after`): a decision normally comes within milliseconds, but the
/// coordinator's own commit may first wait up to a lock wait (`LOCK_WAIT_S`) for a worker or a
/// lock; asking early costs a message, never a wrong answer.
const INQUIRE_AFTER: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a coordinator waits for its votes before it aborts (`TwoPcConfig::vote_timeout`):
/// a vote takes a round trip and a job that waits for no lock, milliseconds; five inquiry
/// periods leave room for a participant whose connections the server ended to open new ones,
/// and bound what a lost prepare costs a run to seconds.
const VOTE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Storage workers per instance for `clients` clients. A job of the baseline can wait on a row
/// lock that a prepared branch holds, and that branch's decision is a job of the same instance:
/// with fewer workers than jobs in flight, every worker could be waiting for a decision that has
/// no worker to run it. Each client has at most one transaction in flight, and that
/// transaction at most one job at each instance, so one worker per client is enough.
pub fn workers_for(clients: u32) -> u32 {
    clients.max(crate::experiment::default_storage_workers())
}

#[derive(Default)]
pub struct TwoPcHarness {
    /// The application, its data and its translations, cached as for the belt.
    belt: BeltHarness,
}

impl TwoPcHarness {
    pub fn new() -> TwoPcHarness {
        TwoPcHarness::default()
    }
}

struct Checked(TwoPcStorage);

impl InstanceState for Checked {
    fn counters(&mut self) -> Result<(u64, u64), String> {
        Err("the 2pc baseline keeps no counters".into())
    }
    fn dump(&mut self, table: &str) -> Result<Rows, String> {
        self.0.dump(table).map_err(|e| e.to_string())
    }
}

/// The transactions of a run in the order their commit timestamps give (ties, which never
/// conflict, by client and sequence number).
pub fn serial_order(history: &[Completion<TwoPcEvidence>]) -> Vec<(String, &Request, &Outcome)> {
    let mut ops: Vec<(u64, &Request, &Outcome)> = history
        .iter()
        .filter_map(|c| match &c.result {
            CompletionResult::Done(d) => Some((d.evidence.ts, &c.request, &d.outcome)),
            CompletionResult::Error(_) => None,
        })
        .collect();
    ops.sort_by_key(|(ts, r, _)| (*ts, r.client, r.seq));
    ops.into_iter().map(|(ts, r, o)| (format!("ts {ts}"), r, o)).collect()
}

impl Harness for TwoPcHarness {
    type P = TwoPc;
    type S = TwoPcStorage;

    fn names(&self) -> &'static [&'static str] {
        &["2pc"]
    }

    fn validate(&self, exp: &Experiment) -> Result<(), String> {
        if exp.runtime != Runtime::Real {
            return Err("2pc runs only as real processes over real servers (--real): the simulator has no model of the servers' row locks and prepared branches".into());
        }
        if exp.backend.kind.engine().is_none() {
            return Err(format!(
                "2pc runs on a server (--backend mariadb|postgres), not {}: it commits distributed transactions with the server's own prepared transactions, which SQLite does not have",
                exp.backend.kind.name()
            ));
        }
        exp.validate_belt().map(|_| ())
    }

    fn deployment(&self, exp: &Experiment) -> Deployment {
        self.belt.deployment(exp)
    }

    fn process(&self, exp: &Experiment, id: ProcessId) -> anyhow::Result<Box<dyn Process<TwoPc>>> {
        let (app, _) = self.belt.loaded(exp)?;
        let cfg = TwoPcConfig { instances: exp.instances, max_attempts: MAX_ATTEMPTS, retry_backoff: RETRY_BACKOFF, inquire_after: INQUIRE_AFTER, vote_timeout: VOTE_TIMEOUT, seed: exp.seed };
        Ok(Box::new(TwoPcNode::new(InstanceId::of(id), cfg, app, Arc::new(exp.plan.clone()))))
    }

    fn sim_storage(&self, _exp: &Experiment, _id: ProcessId) -> anyhow::Result<Option<TwoPcStorage>> {
        anyhow::bail!("2pc is not simulated (see `ensemble_bench::systems::twopc`)")
    }

    fn real_storage(&self, exp: &Experiment, id: ProcessId, _dir: &Path) -> anyhow::Result<Option<StorageFactory<TwoPcStorage>>> {
        drop(self.belt.new_server_database(exp, id)?);
        let shared = self.shared(exp, id)?;
        let open = move |_worker: usize| {
            // A node cannot serve without its database: failing to reach it is fatal.
            TwoPcStorage::open(shared.clone()).unwrap_or_else(|e| panic!("instance {}: {e}", id.0))
        };
        Ok(Some(Arc::new(open)))
    }

    /// A node that stopped starts again over its database as it is: its recovery takes a new
    /// incarnation and asks about the branches left prepared there (`ensemble_twopc`).
    fn resume_storage(&self, exp: &Experiment, id: ProcessId, _dir: &Path) -> anyhow::Result<Option<StorageFactory<TwoPcStorage>>> {
        let mut db = self.belt.open_server(exp, id).map_err(|e| anyhow::anyhow!("instance {}: cannot resume over its database: {e}", id.0))?;
        let missing = db.missing_tables()?;
        anyhow::ensure!(
            missing.is_empty(),
            "instance {}: cannot resume over database {}: it has no table {} (--resume serves a database an earlier node of this run made)",
            id.0,
            admin::database_name(&exp.backend.run, id.0),
            missing.join(", ")
        );
        drop(db);
        let shared = self.shared(exp, id)?;
        let open = move |_worker: usize| TwoPcStorage::open(shared.clone()).unwrap_or_else(|e| panic!("instance {}: {e}", id.0));
        Ok(Some(Arc::new(open)))
    }

    fn restartable(&self, _exp: &Experiment) -> Result<(), String> {
        // A killed node's unprepared branches die with its sessions (the restarted node ends
        // those still running), its prepared ones and its decisions are in its databases
        // (`TwoPcStorage`'s recovery), and a peer's wait for its vote ends when it says it
        // started again (`Message::Started`), or else after `VOTE_TIMEOUT`.
        Ok(())
    }

    fn reopen_storage(&self, exp: &Experiment, id: ProcessId, _dir: &Path) -> anyhow::Result<Option<TwoPcStorage>> {
        Ok(Some(TwoPcStorage::open(self.shared(exp, id)?)?))
    }

    fn client(&self, exp: &Experiment, c: u32, stop_at: Time) -> (Box<dyn Client<TwoPcEvidence>>, usize) {
        sql_client(exp, c, stop_at)
    }

    fn classify(&self, c: &Completion<TwoPcEvidence>) -> Classified {
        classify_sql(c, |e| e.class)
    }

    fn table_classes(&self) -> &'static [&'static str] {
        &["local", "global"]
    }

    /// Replays the run in commit-timestamp order on SQLite (case-sensitive `LIKE`, as MariaDB's
    /// binary collation and PostgreSQL's compare) and compares every reply and every table.
    fn check(&self, exp: &Experiment, run: RunOutput<'_, Self>) -> anyhow::Result<Verdict> {
        let (app, data) = self.belt.loaded(exp)?;
        let mut storages: Vec<Checked> = run.storages.into_iter().flatten().map(Checked).collect();
        let mut refs: Vec<&mut dyn InstanceState> = storages.iter_mut().map(|s| s as &mut dyn InstanceState).collect();
        let ordered = serial_order(run.history);
        let mut report = ensemble_check::check_order(&app, &exp.plan, &data, &ordered, &mut refs, ReplayOptions { case_sensitive_like: true })?;
        for c in run.history {
            if let CompletionResult::Done(d) = &c.result {
                if d.evidence.branches > 1 {
                    report.globals += 1;
                } else {
                    report.locals += 1;
                }
            }
        }
        report.violations.extend(run.failures.iter().map(|f| format!("instance failed at {f}")));
        let summary = if report.ok() {
            format!(
                "serializable: {} operations ({} distributed, {} at one instance) replayed in commit-timestamp order; replies and final state match",
                report.operations, report.globals, report.locals
            )
        } else {
            report.summary()
        };
        Ok(Verdict { passed: report.ok(), summary })
    }

    fn history(&self, _exp: &Experiment, _run: &RunOutput<'_, Self>) -> anyhow::Result<Option<ensemble_history::History>> {
        anyhow::bail!("2pc records no row accesses (a server run); it is checked by replay")
    }
}

impl TwoPcHarness {
    /// What instance `id`'s workers share: its clock and its prepared branches' connections.
    fn shared(&self, exp: &Experiment, id: ProcessId) -> anyhow::Result<Arc<TwoPcShared>> {
        let engine = exp.backend.kind.engine().expect("validated: a server backend");
        let (app, _) = self.belt.loaded(exp)?;
        let url = admin::instance_url(engine, &exp.backend.server_urls(), &exp.backend.run, id.0).map_err(anyhow::Error::msg)?;
        let replicated: BTreeSet<String> =
            exp.plan.tables.iter().filter(|(_, p)| !matches!(p, TablePlacement::Partitioned { .. })).map(|(t, _)| t.clone()).collect();
        Ok(TwoPcShared::new(&url, app.clone(), self.belt.translated(&app, engine)?, InstanceId::of(id), &exp.backend.run, replicated)?)
    }
}
