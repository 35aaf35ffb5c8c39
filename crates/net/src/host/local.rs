//! Clients in the host's own OS process: the deployment Gyro has, where each instance of the
//! middleware is linked into the application server it serves, so that an operation reaches it
//! by a call, not over a socket. Here the clients' requests reach the protocol loop through a
//! channel and the replies go back through one, with no framing, no key and no TCP; everything
//! else (the loop, the storage workers, the processes) is what a node runs.
//!
//! The clients are as trusted as the rest of the process: nothing checks what they send, and
//! the limits a host puts on its connections ([`Limits`](super::Limits)) are for sockets.

use super::run::ConnId;
use crate::client::{ClientDriverConfig, ClientReport, ClientSlot};
use crate::error::NetError;
use ensemble_core::{Completion, ProcessId, Reply, Request};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

/// Hands a reply to the client it is for; `false` once that client is gone.
pub(crate) type ReplySink<E> = Box<dyn Fn(ProcessId, Reply<E>) -> bool + Send>;

/// What a local client says to the host.
pub(crate) enum LocalInput<E> {
    /// A client opens a connection; replies to its requests go to `replies`.
    Hello { conn: ConnId, replies: ReplySink<E> },
    Request { conn: ConnId, to: ProcessId, request: Request },
    Gone { conn: ConnId },
}

/// The way in to one host for clients of the same OS process (`E`: the protocol's evidence,
/// what its replies carry). Made before the host runs and handed to
/// [`run_host_with_local_clients`](super::run_host_with_local_clients) and to the client driver
/// ([`run_clients_beside`](crate::client::run_clients_beside)); what clients send before the
/// host's loop starts waits for it. Clones share the way in.
pub struct LocalClients<E> {
    tx: UnboundedSender<LocalInput<E>>,
    rx: Arc<Mutex<Option<UnboundedReceiver<LocalInput<E>>>>>,
    next_conn: Arc<AtomicU64>,
}

impl<E> Clone for LocalClients<E> {
    fn clone(&self) -> Self {
        LocalClients { tx: self.tx.clone(), rx: self.rx.clone(), next_conn: self.next_conn.clone() }
    }
}

impl<E> Default for LocalClients<E> {
    fn default() -> Self {
        LocalClients::new()
    }
}

/// Local connections are numbered from here, far above any the host's listener gives out (it
/// counts from zero), so that the two never name the same connection.
const FIRST_LOCAL_CONN: ConnId = 1 << 62;

impl<E> LocalClients<E> {
    pub fn new() -> LocalClients<E> {
        let (tx, rx) = mpsc::unbounded_channel();
        LocalClients { tx, rx: Arc::new(Mutex::new(Some(rx))), next_conn: Arc::new(AtomicU64::new(FIRST_LOCAL_CONN)) }
    }

    /// The host's end; `None` if a host took it already (one host per way in).
    pub(crate) fn take_inputs(&self) -> Option<UnboundedReceiver<LocalInput<E>>> {
        self.rx.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Opens a connection for a client; `None` if the host has stopped. Its replies get no
    /// emulated delay: the client is on the host's machine, in its process.
    pub(crate) fn connect(&self, replies: ReplySink<E>) -> Option<ConnId> {
        let conn = self.next_conn.fetch_add(1, Ordering::Relaxed);
        self.tx.send(LocalInput::Hello { conn, replies }).ok().map(|()| conn)
    }

    /// `false` if the host has stopped.
    pub(crate) fn request(&self, conn: ConnId, to: ProcessId, request: Request) -> bool {
        self.tx.send(LocalInput::Request { conn, to, request }).is_ok()
    }

    pub(crate) fn gone(&self, conn: ConnId) {
        let _ = self.tx.send(LocalInput::Gone { conn });
    }
}

/// Clients of this OS process to run on the host's own loop thread, beside its processes (see
/// [`run_host_with_clients_on_loop`](super::run_host_with_clients_on_loop)): the client driver
/// ([`run_clients_beside`](crate::client::run_clients_beside)'s) runs as a task of the loop's
/// runtime, so a request and its reply reach the loop and come back without waking another
/// thread, as in an application whose request handlers run on the event loop Ensemble runs on.
pub struct ClientsOnLoop<E> {
    pub cfg: ClientDriverConfig,
    pub clients: Vec<ClientSlot<E>>,
    /// The hosts the clients reach without a socket, by address: this host's way in, at least.
    pub local: HashMap<SocketAddr, LocalClients<E>>,
    /// Every completion, as it happens, on the loop's thread.
    pub on_complete: Box<dyn FnMut(Completion<E>) -> ControlFlow<()> + Send>,
    /// What the driver ended with, once the clients are done (not called if the host stops
    /// first: the driver is dropped with the loop).
    pub done: Box<dyn FnOnce(Result<ClientReport, NetError>) + Send>,
}

/// The caller's end of a hand-over of [`ClientsOnLoop`] to a host that will run them.
pub type ClientsHandOver<E> = tokio::sync::oneshot::Sender<ClientsOnLoop<E>>;

/// The host's end of it ([`run_host_with_clients_on_loop`](super::run_host_with_clients_on_loop)).
pub type ClientsAwaited<E> = tokio::sync::oneshot::Receiver<ClientsOnLoop<E>>;

/// A hand-over of clients to the host that will run them on its loop.
pub fn clients_hand_over<E>() -> (ClientsHandOver<E>, ClientsAwaited<E>) {
    tokio::sync::oneshot::channel()
}
