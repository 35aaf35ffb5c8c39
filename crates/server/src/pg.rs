//! A PostgreSQL session for one storage thread: `tokio-postgres` on a runtime of the thread's own.
//!
//! The blocking `postgres` crate does the same (a client and a runtime it blocks on), but offers
//! no way to send two requests before the first one's answer is in. The storage needs exactly
//! that for one thing: a transaction's start (`BEGIN …`, the writer lock, the counters) travels
//! with the body's first statement, in one round trip ([`PgSession::pipelined`]); PostgreSQL runs
//! the two in the order they were sent, as if they had been sent one after the other.
//!
//! On a fiber (a node's storage on its loop, `ensemble_fiber`) the session has no runtime of its
//! own: its connection task runs on the loop's, and a request suspends the fiber until the
//! answer is in, instead of blocking the thread, which the loop and every other fiber share.

use std::future::Future;
use std::time::Duration;
use tokio_postgres::{Client, Error, SimpleQueryMessage};

pub(crate) struct PgSession {
    /// Single-threaded: the connection task runs only while this thread waits on the session,
    /// which is the only time it has anything to do. `None` for a session opened on a fiber.
    runtime: Option<tokio::runtime::Runtime>,
    client: Client,
}

/// Why a session could not be opened.
pub(crate) enum ConnectError {
    Runtime(std::io::Error),
    Postgres(Error),
}

impl PgSession {
    pub(crate) fn connect(config: &tokio_postgres::Config) -> Result<PgSession, ConnectError> {
        if ensemble_fiber::on_fiber() {
            let (client, connection) = on_fiber(config.connect(tokio_postgres::NoTls)).map_err(ConnectError::Postgres)?;
            tokio::spawn(connection);
            return Ok(PgSession { runtime: None, client });
        }
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(ConnectError::Runtime)?;
        let (client, connection) = runtime.block_on(config.connect(tokio_postgres::NoTls)).map_err(ConnectError::Postgres)?;
        // Its error, if the server goes away, reaches the caller through the next request.
        runtime.spawn(connection);
        Ok(PgSession { runtime: Some(runtime), client })
    }

    /// Runs the request `request` makes and waits for its answer.
    pub(crate) fn run<'a, T: 'static, F>(&'a self, request: impl FnOnce(&'a Client) -> F) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>> + 'a,
    {
        self.wait(request(&self.client))
    }

    /// Waits for `f`: blocking on the session's runtime, or on a fiber suspending it.
    fn wait<'f, O: 'static>(&self, f: impl Future<Output = O> + 'f) -> O {
        match &self.runtime {
            Some(runtime) => runtime.block_on(f),
            None => on_fiber(f),
        }
    }

    /// Sends `first` (a simple-query batch) and then the request `then` makes, without waiting
    /// in between, and waits for both answers. `then` must begin with a request: `join` polls
    /// `first` until it waits for its answer, then `then`, so both are on the wire before either
    /// answer is read.
    pub(crate) fn pipelined<'a, T: 'static, F>(&'a self, first: &str, then: impl FnOnce(&'a Client) -> F) -> (Result<Vec<SimpleQueryMessage>, Error>, Result<T, Error>)
    where
        F: Future<Output = Result<T, Error>> + 'a,
    {
        let client = &self.client;
        self.wait(async move { futures::join!(client.simple_query(first), then(client)) })
    }
}

/// Waits for `f` on the fiber the caller runs on.
fn on_fiber<'f, O: 'static>(f: impl Future<Output = O> + 'f) -> O {
    ensemble_fiber::wait(f).unwrap_or_else(|_| panic!("a PostgreSQL session opened on a fiber was used off it"))
}

/// Waits `d` where the storage runs: on a fiber by suspending it, since sleeping would stall the
/// loop it shares; on a thread of its own by sleeping.
pub(crate) fn pause(d: Duration) {
    if ensemble_fiber::on_fiber() {
        on_fiber(tokio::time::sleep(d));
    } else {
        std::thread::sleep(d);
    }
}
