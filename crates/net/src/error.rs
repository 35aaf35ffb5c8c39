//! The runtime's error type.

use crate::frame::FrameError;
use std::net::SocketAddr;

/// Why the runtime could not start, connect or finish. Problems on one connection at run time
/// are not errors of the run: they are logged and that connection is closed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot connect to {addr} after {attempts} attempt(s): {source}")]
    Connect {
        addr: SocketAddr,
        attempts: u32,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("cluster spec: {0}")]
    Spec(String),
    #[error(transparent)]
    Topology(#[from] ensemble_core::topology::TopologyError),
    #[error("host never reported ready: {0}")]
    NotReady(String),
    #[error("handshake with {addr} failed: {why}")]
    Handshake { addr: SocketAddr, why: String },
    #[error("no answer from {addr} within {within:?}")]
    NoAnswer { addr: SocketAddr, within: std::time::Duration },
    #[error("{0} closed the connection")]
    Closed(SocketAddr),
    #[error("unexpected answer from {addr}: {what}")]
    Unexpected { addr: SocketAddr, what: String },
}

/// Wraps an i/o error with what was being done, for `map_err`.
pub(crate) fn io_context(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> NetError {
    let context = context.into();
    move |source| NetError::Io { context, source }
}
