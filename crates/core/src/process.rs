//! The sans-IO contracts between protocol state machines and the drivers that run them.

use crate::{ClientId, InstanceId, OpClass, Outcome, Position, Reply, Request, RequestError, StateUpdate, Time, TimerId, WorkId};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Something that happened to a node.
#[derive(Debug)]
pub enum NodeEvent<M> {
    /// A client's request arrived.
    Request(Request),
    /// A protocol message from another instance.
    Message { from: InstanceId, msg: M },
    /// A timer the node set has fired.
    Timer(TimerId),
    /// Storage work the node asked for has completed.
    StorageDone { work: WorkId, result: StorageResult },
}

/// Something a node wants done.
#[derive(Debug)]
pub enum NodeEffect<M> {
    Send { to: InstanceId, msg: M },
    Reply { to: ClientId, reply: Reply },
    Storage { work: WorkId, job: StorageJob },
    SetTimer { id: TimerId, after: Duration },
}

/// A protocol participant at one instance.
pub trait Node {
    type Msg: std::fmt::Debug + Clone + Serialize + for<'de> Deserialize<'de> + Send + 'static;
    fn id(&self) -> InstanceId;
    /// Called once before any event, so the node can start timers or, for the first instance of
    /// a ring, create the token.
    fn start(&mut self, now: Time, out: &mut Vec<NodeEffect<Self::Msg>>);
    fn on_event(&mut self, now: Time, event: NodeEvent<Self::Msg>, out: &mut Vec<NodeEffect<Self::Msg>>);
}

/// Storage work: a transaction to run through the DBMS's client interface, or state updates to
/// apply. The driver decides where and when it runs (a simulated CPU, a pool of connections).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StorageJob {
    /// Run `request` as one serializable transaction.
    Execute { request: Request, role: ExecRole },
    /// Apply the state updates of global operations `first_seq..first_seq+updates.len()` as one
    /// transaction. Changes to tables this instance does not hold were filtered out by the node.
    Apply { first_seq: u64, updates: Vec<StateUpdate> },
}

/// How a transaction is run, which decides what its result reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecRole {
    /// A local or commutative operation: runs at once; the result reports its [`Position::Local`].
    Local,
    /// A global operation run by the token holder: its writes are captured as a state update and
    /// it takes the next global sequence number inside its own transaction.
    Global,
}

/// The outcome of a [`StorageJob`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StorageResult {
    Executed { outcome: Outcome, update: StateUpdate, position: Position },
    Applied { globals_seen: u64 },
    /// The request was malformed (unknown type, wrong parameters): nothing ran.
    Rejected(RequestError),
    /// The storage itself failed. For an `Apply` this means the replicas diverged: a bug.
    Failed(String),
}

/// Runs storage jobs against one database connection. The simulator owns one per instance; the
/// real runtime owns one per worker thread, all open on the same database.
pub trait Storage {
    fn run(&mut self, job: &StorageJob) -> StorageResult;
}

/// Something that happened to a client.
#[derive(Debug)]
pub enum ClientEvent {
    /// The run starts; a closed-loop client sends its first request.
    Start,
    Reply { from: InstanceId, reply: Reply },
    Timer(TimerId),
}

/// Something a client wants done.
#[derive(Debug)]
pub enum ClientEffect {
    Send { to: InstanceId, request: Request },
    SetTimer { id: TimerId, after: Duration },
    /// A request finished: the driver hands this to the metrics recorder and the history.
    Completed(Completion),
}

/// A finished request as the client saw it: what the harness measures and the checker replays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub request: Request,
    pub issued: Time,
    pub completed: Time,
    /// MAP replies followed before the answer came.
    pub redirects: u32,
    pub result: CompletionResult,
    /// Set when this request was the last of a web interaction (a page of TPC-W or RUBiS runs
    /// several transactions one after the other): the papers measure latency per interaction.
    #[serde(default)]
    pub interaction: Option<InteractionEnd>,
}

/// A web interaction that a completion ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InteractionEnd {
    pub name: String,
    /// When the interaction's first request was issued.
    pub started: Time,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CompletionResult {
    Done { outcome: Outcome, class: OpClass, instance: InstanceId, position: Position },
    Error(RequestError),
}

/// A client session.
pub trait Client {
    fn id(&self) -> ClientId;
    fn on_event(&mut self, now: Time, event: ClientEvent, out: &mut Vec<ClientEffect>);
}
