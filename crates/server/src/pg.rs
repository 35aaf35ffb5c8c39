//! A PostgreSQL session for one storage thread: `tokio-postgres` on a runtime of the thread's own.
//!
//! The blocking `postgres` crate does the same (a client and a runtime it blocks on), but offers
//! no way to send two requests before the first one's answer is in. The storage needs exactly
//! that for two things, each saving round trips ([`PgSession::pipelined`]): a transaction's start
//! (`BEGIN …`, the writer lock, the counters) travels with the body's first statement, and a
//! write whose count the body does not wait for (`Db::write`) travels with the statement after
//! it, or with COMMIT; PostgreSQL runs them in the order they were sent, as if they had been sent
//! one after the other.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Error, SimpleQueryMessage, Statement};

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

    /// Sends each of `ahead` and then the request `then` makes, without waiting in between, and
    /// waits for every answer: one round trip for all of them. PostgreSQL runs them in the order
    /// they were sent, as if sent one after the other. Each future is polled in that order, and
    /// a request goes on the wire at its future's first poll, before any answer is read.
    pub(crate) fn pipelined<'c, T, F>(&'c self, ahead: &[Ahead<'_>], then: impl FnOnce(&'c Client) -> F) -> (Vec<Result<Answer, Error>>, Result<T, Error>)
    where
        F: Future<Output = Result<T, Error>> + 'c,
    {
        let client = &self.client;
        self.runtime.block_on(async move {
            let mut requests: Vec<Pin<Box<dyn Future<Output = Step<T>> + '_>>> = ahead
                .iter()
                .map(|a| -> Pin<Box<dyn Future<Output = Step<T>> + '_>> {
                    match a {
                        Ahead::Batch(sql) => Box::pin(async move { Step::Ahead(client.simple_query(sql).await.map(Answer::Batch)) }),
                        Ahead::Execute(stmt, params) => Box::pin(async move { Step::Ahead(client.execute(*stmt, params).await.map(|_| Answer::Written)) }),
                    }
                })
                .collect();
            requests.push(Box::pin(async move { Step::Last(then(client).await) }));
            let mut steps = in_order(requests).await;
            let Some(Step::Last(answer)) = steps.pop() else { unreachable!("the last request is `then`'s") };
            let answers = steps
                .into_iter()
                .map(|s| match s {
                    Step::Ahead(a) => a,
                    Step::Last(_) => unreachable!("only the last request is `then`'s"),
                })
                .collect();
            (answers, answer)
        })
    }
}

/// Awaits every one of `requests`, polling them in their order each time, so that each goes on
/// the wire at its first poll in that order, before any answer is read: one round trip for all.
pub(crate) async fn in_order<'a, T>(mut requests: Vec<Pin<Box<dyn Future<Output = T> + 'a>>>) -> Vec<T> {
    let mut answers: Vec<Option<T>> = requests.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (request, slot) in requests.iter_mut().zip(answers.iter_mut()) {
            if slot.is_none() {
                if let Poll::Ready(a) = request.as_mut().poll(cx) {
                    *slot = Some(a);
                }
            }
        }
        if answers.iter().all(Option::is_some) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    answers.into_iter().map(|a| a.expect("every answer is in")).collect()
}

/// What one of [`PgSession::pipelined`]'s requests returned: one sent ahead, or `then`'s.
enum Step<T> {
    Ahead(Result<Answer, Error>),
    Last(Result<T, Error>),
}

/// A request sent ahead of the next one ([`PgSession::pipelined`]).
pub(crate) enum Ahead<'a> {
    /// A simple-query batch: a transaction's start.
    Batch(&'a str),
    /// A prepared statement run for its count: a write whose answer the body does not wait on.
    Execute(&'a Statement, Vec<&'a (dyn ToSql + Sync)>),
}

/// What a request sent ahead returned.
pub(crate) enum Answer {
    Batch(Vec<SimpleQueryMessage>),
    Written,
}
