//! The sans-IO contracts between protocol state machines and the drivers that run them.
//!
//! A protocol names its types once ([`Protocol`]); its processes ([`Process`]) take [`Event`]s and
//! push [`Effect`]s; storage work runs in a [`Storage`] the driver owns; clients ([`Client`]) send
//! [`Request`]s and receive [`Reply`]s carrying the protocol's evidence. The simulator and the real
//! runtime drive the same code through these traits and nothing else.

use crate::{ClientId, ProcessId, Reply, Request, RequestError, Time, TimerId, WorkId};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt::Debug;
use std::time::Duration;

/// The type family of one protocol. A marker type implements it; drivers are generic over it.
pub trait Protocol: Debug + 'static {
    /// Messages between processes. The real runtime sends them with postcard; the simulator
    /// measures their postcard size when links have a bandwidth.
    type Msg: Debug + Clone + Serialize + DeserializeOwned + Send + 'static;
    /// Storage work a process asks for. It runs off the protocol's thread in the real runtime.
    type Job: Debug + Send + 'static;
    /// What a finished [`Self::Job`] reports.
    type JobResult: Debug + Send + 'static;
    /// What a reply carries for the harness and the checker: a serial position, the versions a
    /// transaction read and wrote. Travels to clients over the wire.
    type Evidence: Debug + Clone + Serialize + DeserializeOwned + Send + 'static;
}

/// Something that happened to a process.
#[derive(Debug)]
pub enum Event<P: Protocol> {
    /// A client's request arrived.
    Request(Request),
    /// A protocol message from another process (or from this one: messages to self take the
    /// same path as any other between processes of one machine).
    Message { from: ProcessId, msg: P::Msg },
    /// A timer the process set has fired (and was not cancelled).
    Timer(TimerId),
    /// Storage work the process asked for has completed.
    StorageDone { work: WorkId, result: P::JobResult },
}

/// Something a process wants done. Effects of one handler are applied in the order pushed.
#[derive(Debug)]
pub enum Effect<P: Protocol> {
    Send { to: ProcessId, msg: P::Msg },
    Reply { to: ClientId, reply: Reply<P::Evidence> },
    /// Run `job` in this process's storage. `cost` is its service time on a simulated core,
    /// computed by the protocol from the cost model it was configured with; the real runtime
    /// ignores it (the job costs what it costs).
    Storage { work: WorkId, job: P::Job, cost: Duration },
    /// Fire `Event::Timer(id)` after `after`. Setting a timer whose id is still pending moves it:
    /// it fires once, at the new time.
    SetTimer { id: TimerId, after: Duration },
    /// A timer that has not fired yet never will. Cancelling a fired or unknown timer is a no-op.
    CancelTimer { id: TimerId },
    /// The handler that pushed this did work worth `Duration` of CPU beyond the driver's base cost
    /// of handling an event (certifying 32 reads costs more than 2). In the simulator the core
    /// stays busy that much longer and the handler's other effects take effect after it; the
    /// real runtime ignores it. Only handlers that run on a core can charge: those of requests,
    /// messages and storage completions. Timers and `start` run without a core in the simulator
    /// (as they cost nothing in its model), and a charge there is ignored; a protocol whose
    /// timer does costly work sends itself a message and does the work in its handler.
    Charge(Duration),
    /// A message from `from` broke an invariant of the protocol (a forged or corrupt token, a
    /// message for a state the process is not in) and was refused: the process did nothing with
    /// it and keeps serving. `what` names the message and the invariant. The drivers count and
    /// log it; a refusal is the sender's fault, never the receiver's failure.
    Refuse { from: ProcessId, what: String },
}

/// A protocol participant.
pub trait Process<P: Protocol> {
    fn id(&self) -> ProcessId;
    /// Called once before any event (and again on a process rebuilt after a crash), so the
    /// process can start timers or, for the first instance of a ring, create the token.
    fn start(&mut self, now: Time, out: &mut Vec<Effect<P>>);
    fn on_event(&mut self, now: Time, event: Event<P>, out: &mut Vec<Effect<P>>);
    /// Protocol counters for the result file, by name.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Why the process stopped serving, if an invariant broke (replicas diverged, say): a run
    /// in which any process says so fails its check.
    fn failure(&self) -> Option<String> {
        None
    }
    /// Nothing of this process is in flight: no storage work outstanding, no request waiting,
    /// and nothing it sent (a token's entries, a multicast) still on its way to being applied
    /// everywhere, as far as it can tell. A run is over once every process says so after the
    /// clients stopped: `bench --real` waits for it before the final check, so a stalled
    /// protocol is reported as a stall, not as diverged replicas. The default suits processes
    /// that answer every request within its handler.
    fn quiescent(&self) -> bool {
        true
    }
    /// What keeps the process from being [`Self::quiescent`], in words, for a run that did not
    /// drain: `None` when it is quiescent.
    fn in_flight(&self) -> Option<String> {
        (!self.quiescent()).then(|| "work in flight (the process does not say which)".to_string())
    }
}

/// Runs storage jobs. The simulator owns one per process that has storage; the real runtime owns
/// one per worker thread, all on the same data. Whatever a storage holds survives a crash of
/// its process: a protocol's durable state lives here.
pub trait Storage {
    type Job;
    type Result;
    fn run(&mut self, job: &Self::Job) -> Self::Result;

    /// Runs `jobs`, which queued one behind another on a [`SerialLane`], in that order, and
    /// returns their results in the same order. A storage may run them together (as one
    /// database transaction, so that they share a commit) if the outcome is that of running
    /// them one after another; by default it does exactly that.
    fn run_batch(&mut self, jobs: &[Self::Job]) -> Vec<Self::Result> {
        jobs.iter().map(|j| self.run(j)).collect()
    }

    /// No job has come for a while (the real runtime's workers call it after
    /// [`STORAGE_IDLE_AFTER`] without one; the simulator never does): a chance to finish what
    /// a storage deferred to ride on the next job, so that an idle storage holds nothing open.
    fn idle(&mut self) {}

    /// What the storage counted of its own work, by name (reads a PostgreSQL storage sent ahead
    /// of its bodies' asking, say): the drivers add them to its process's counters in the
    /// report, summed over a pool's storages.
    fn tally(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// Picks the storage jobs that the real runtime runs on a lane of their own: one worker, in the
/// order the process asked for them, whatever has queued behind a running job handed to
/// [`Storage::run_batch`] together. For jobs that would run one at a time anyway (an instance's
/// writers, which queue on its writer lock), so that they can share a commit instead of queueing
/// on a database lock. The simulator has no lanes: its storage runs every job as it comes.
pub type SerialLane<J> = std::sync::Arc<dyn Fn(&J) -> bool + Send + Sync>;

/// How long a storage worker waits for a job before it calls [`Storage::idle`].
pub const STORAGE_IDLE_AFTER: std::time::Duration = std::time::Duration::from_millis(10);

/// A storage as the drivers hold it for protocol `P`.
pub type DynStorage<P> = Box<dyn Storage<Job = <P as Protocol>::Job, Result = <P as Protocol>::JobResult>>;

/// Something that happened to a client.
#[derive(Debug)]
pub enum ClientEvent<E> {
    /// The run starts; a closed-loop client sends its first request.
    Start,
    Reply { from: ProcessId, reply: Reply<E> },
    Timer(TimerId),
}

/// Something a client wants done.
#[derive(Debug)]
pub enum ClientEffect<E> {
    Send { to: ProcessId, request: Request },
    /// Fire `Event::Timer(id)` after `after`. Setting a timer whose id is still pending moves it:
    /// it fires once, at the new time.
    SetTimer { id: TimerId, after: Duration },
    /// A request finished: the driver hands this to the metrics recorder and the history.
    Completed(Completion<E>),
}

/// A finished request as the client saw it: what the harness measures and the checker reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Completion<E> {
    pub request: Request,
    pub issued: Time,
    pub completed: Time,
    /// Redirects followed before the answer came.
    pub redirects: u32,
    pub result: CompletionResult<E>,
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
pub enum CompletionResult<E> {
    Done(crate::Done<E>),
    Error(RequestError),
}

/// A client session. `Send`, so that a driver may run it on another thread than the one that
/// made it (the embedded host's loop runs its application's clients).
pub trait Client<E>: Send {
    fn id(&self) -> ClientId;
    fn on_event(&mut self, now: Time, event: ClientEvent<E>, out: &mut Vec<ClientEffect<E>>);

    /// Whether the session will issue nothing more and has no request outstanding at `now`, so
    /// a driver whose clients are all finished can stop instead of waiting out its deadline.
    /// A session that cannot tell says no.
    fn finished(&self, _now: Time) -> bool {
        false
    }
}
