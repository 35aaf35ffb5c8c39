//! A run's server databases: for a PostgreSQL or MariaDB backend, one database per instance,
//! created before the run starts and dropped when it ends (unless `--keep`). Every server is
//! checked first, so an unreachable server, refused credentials, a missing database or (for the
//! 2pc baseline) a PostgreSQL server without prepared transactions is a clear error before
//! anything runs.

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

/// For a server backend: checks the servers, tags the run, creates its databases, and returns
/// the experiment carrying the tag (the nodes of a real run find their databases by it) with
/// the guard that drops them. For SQLite, the experiment as it is and no guard.
pub fn for_run(exp: &Experiment) -> anyhow::Result<(Experiment, Option<RunDatabases>)> {
    let Some(engine) = exp.backend.kind.engine() else { return Ok((exp.clone(), None)) };
    let urls = exp.backend.server_urls();
    admin::preflight(engine, &urls).map_err(anyhow::Error::msg)?;
    if exp.system == "2pc" && engine == Engine::Postgres {
        for url in &urls {
            admin::check_prepared_transactions(url).map_err(anyhow::Error::msg)?;
        }
    }
    let mut tagged = exp.clone();
    tagged.backend.run = admin::run_tag(&exp.label);
    let mut dbs = RunDatabases { engine, urls, run: tagged.backend.run.clone(), instances: 0, keep: exp.backend.keep };
    for i in 0..exp.instances {
        admin::create_database(engine, &dbs.urls, &dbs.run, i).map_err(anyhow::Error::msg)?;
        dbs.instances = i + 1;
    }
    Ok((tagged, Some(dbs)))
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
