//! A PostgreSQL session for one storage thread: `tokio-postgres` on a runtime of the thread's own.
//!
//! The blocking `postgres` crate does the same (a client and a runtime it blocks on), but offers
//! no way to send two requests before the first one's answer is in. The storage needs exactly
//! that for one thing: a transaction's start (`BEGIN …`, the writer lock, the counters) travels
//! with the body's first statement, in one round trip ([`PgSession::pipelined`]); PostgreSQL runs
//! the two in the order they were sent, as if they had been sent one after the other.

use std::future::Future;
use tokio_postgres::{Client, Error, SimpleQueryMessage};

pub(crate) struct PgSession {
    /// Single-threaded: the connection task runs only while this thread waits on the session,
    /// which is the only time it has anything to do.
    runtime: tokio::runtime::Runtime,
    client: Client,
}

/// Why a session could not be opened.
pub(crate) enum ConnectError {
    Runtime(std::io::Error),
    Postgres(Error),
}

impl PgSession {
    pub(crate) fn connect(config: &tokio_postgres::Config) -> Result<PgSession, ConnectError> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(ConnectError::Runtime)?;
        let (client, connection) = runtime.block_on(config.connect(tokio_postgres::NoTls)).map_err(ConnectError::Postgres)?;
        // Its error, if the server goes away, reaches the caller through the next request.
        runtime.spawn(connection);
        Ok(PgSession { runtime, client })
    }

    /// Runs the request `request` makes and waits for its answer.
    pub(crate) fn run<'a, T, F>(&'a self, request: impl FnOnce(&'a Client) -> F) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>> + 'a,
    {
        self.runtime.block_on(request(&self.client))
    }

    /// Sends `first` (a simple-query batch) and then the request `then` makes, without waiting
    /// in between, and waits for both answers. `then` must begin with a request: `join` polls
    /// `first` until it waits for its answer, then `then`, so both are on the wire before either
    /// answer is read.
    pub(crate) fn pipelined<'a, T, F>(&'a self, first: &str, then: impl FnOnce(&'a Client) -> F) -> (Result<Vec<SimpleQueryMessage>, Error>, Result<T, Error>)
    where
        F: Future<Output = Result<T, Error>> + 'a,
    {
        let client = &self.client;
        self.runtime.block_on(async move { futures::join!(client.simple_query(first), then(client)) })
    }
}
