//! A run's server databases: for a PostgreSQL or MariaDB backend, one database per instance,
//! created before the run starts and dropped when it ends (unless `--keep`). Every server is
//! checked first, so an unreachable server, refused credentials, a missing database, (for the
//! 2pc baseline) a PostgreSQL server without prepared transactions, or a server without room for
//! the run's sessions is a clear error before anything runs or is made.

use crate::experiment::Experiment;
use ensemble_server::{admin, Engine};

/// The databases of one run; dropping it drops them, unless the run keeps them.
pub struct RunDatabases {
    engine: Engine,
    urls: Vec<String>,
    run: String,
    instances: u32,
    keep: bool,
}

/// For a server backend: checks the servers (each must have room for `sessions_per_instance`
/// sessions of each instance it holds), tags the run, creates its databases, and returns the
/// experiment carrying the tag (the nodes of a real run find their databases by it) with the
/// guard that drops them. For SQLite, the experiment as it is and no guard.
pub fn for_run(exp: &Experiment, sessions_per_instance: u64) -> anyhow::Result<(Experiment, Option<RunDatabases>)> {
    let Some(engine) = exp.backend.kind.engine() else { return Ok((exp.clone(), None)) };
    let urls = exp.backend.server_urls();
    admin::preflight(engine, &urls).map_err(anyhow::Error::msg)?;
    if exp.system == "2pc" && engine == Engine::Postgres {
        for url in &urls {
            admin::check_prepared_transactions(url).map_err(anyhow::Error::msg)?;
        }
    }
    check_room_for_sessions(engine, exp, &urls, sessions_per_instance)?;
    let mut tagged = exp.clone();
    tagged.backend.run = admin::run_tag(&exp.label);
    let mut dbs = RunDatabases { engine, urls, run: tagged.backend.run.clone(), instances: 0, keep: exp.backend.keep };
    for i in 0..exp.instances {
        admin::create_database(engine, &dbs.urls, &dbs.run, i).map_err(anyhow::Error::msg)?;
        dbs.instances = i + 1;
    }
    Ok((tagged, Some(dbs)))
}

/// Each server must take the sessions of every instance it holds: a node whose storage workers
/// cannot all connect serves nothing.
fn check_room_for_sessions(engine: Engine, exp: &Experiment, urls: &[String], sessions_per_instance: u64) -> anyhow::Result<()> {
    let mut instances_at: std::collections::BTreeMap<&str, u64> = Default::default();
    for i in 0..exp.instances {
        *instances_at.entry(admin::server_url(urls, i).map_err(anyhow::Error::msg)?).or_default() += 1;
    }
    for (url, instances) in instances_at {
        let what = format!("{instances} instance(s) of {sessions_per_instance} session(s) each");
        admin::check_room_for_sessions(engine, url, instances * sessions_per_instance, &what).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

impl RunDatabases {
    pub fn names(&self) -> Vec<String> {
        (0..self.instances).map(|i| admin::database_name(&self.run, i)).collect()
    }
}

impl Drop for RunDatabases {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("kept {} database(s): {}", self.engine.name(), self.names().join(", "));
            return;
        }
        for i in 0..self.instances {
            if let Err(e) = admin::drop_database(self.engine, &self.urls, &self.run, i) {
                eprintln!("warning: {e}");
            }
        }
    }
}
