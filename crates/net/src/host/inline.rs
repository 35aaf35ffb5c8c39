//! Clients served inline: each client connection on a thread of its own, which reads the
//! client's requests, runs the process's handler on them, runs the storage jobs they ask for on
//! a storage of its own, and writes the replies, so that a local operation's way through the
//! host crosses no thread: the client's request wakes the connection's thread, and its reply
//! wakes the client, as on the direct path to a database server.
//!
//! Why: the overhead figure (RESULTS.md, "Middleware overhead on the servers") found that the
//! hop through a node costs about the whole 20 % budget on two cores, most of it thread
//! switches: the request read on the loop, handed to a storage worker, its completion handed
//! back to the loop, the reply written there. Here none of those hand-offs is left for a job
//! that runs inline.
//!
//! What stays the loop's: the handshake (the connection moves to its thread once the client
//! has proved its key), every other connection, the timers, the messages between processes
//! and the jobs of the pool's serial lane. A thread runs the process under its lock
//! ([`Core`]) and leaves in the process's outbox what only the loop can apply (messages,
//! timers, replies to other clients), so the loop applies them in the order the process made
//! them. A job runs inline unless the lane takes it (it then goes to the pool, whose completion
//! the loop hands to the process), and no more jobs run inline at once than the pool has
//! workers: a thread waits for its turn, so that the server has no more of the process's
//! transactions at once than with the pool alone.
//! A storage of a connection's thread that has had no job for
//! [`STORAGE_IDLE_AFTER`](ensemble_core::STORAGE_IDLE_AFTER) is told so
//! ([`Storage::idle`](ensemble_core::Storage::idle)), as a pool's worker is.
//!
//! Only on a host that emulates no WAN delay ([`HostConfig::clients_inline`](super::HostConfig)):
//! replies written here go out at once.

use super::inbound::{next_frame, Frames, Inbound};
use super::run::{lock, ConnId, Core, Input, SharedCore};
use super::ShutdownHandle;
use crate::conn::{linger, write_loop, Credit, HandedWriter, OutTx, Outgoing};
use crate::frame::{encode_error, encode_frame, Frame, HostId, Never};
use crate::workers::{panic_text, JobFailed, StorageFactory};
use ensemble_core::{ClientId, Effect, Event, ProcessId, Protocol, Request, Storage, Time, WorkId, STORAGE_IDLE_AFTER};
use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::mpsc::UnboundedSender;

/// What the client connections' threads of one host share.
pub(super) struct InlineHost<P: Protocol> {
    pub me: HostId,
    pub started: Instant,
    /// By slot, as the loop's.
    pub slots: Vec<InlineSlot<P>>,
    /// Process id → its slot, for the processes of this host.
    pub local: Vec<Option<usize>>,
    pub inputs: UnboundedSender<Input<P>>,
    /// Triggered when the loop stops: the threads close their connections.
    pub stopped: ShutdownHandle,
}

/// One process as the connections' threads see it.
pub(super) struct InlineSlot<P: Protocol> {
    core: SharedCore<P>,
    /// Opens a storage on a connection's thread; `None` for a process without storage.
    storage: Option<StorageFactory<P::Job, P::JobResult>>,
    /// Indices for the storages the threads open, after the pool's.
    next_storage: AtomicUsize,
    /// How many more jobs may run inline at once: as many as the pool has workers, so that the
    /// server has no more of the process's transactions at once than with the pool alone.
    permits: Mutex<usize>,
    /// Signalled when a permit is given back.
    permit_freed: Condvar,
    /// Each thread's storage's last tally, by storage index.
    tallies: Mutex<HashMap<usize, Vec<(&'static str, u64)>>>,
}

impl<P: Protocol> InlineSlot<P> {
    pub fn new(core: SharedCore<P>, storage: Option<StorageFactory<P::Job, P::JobResult>>, workers: usize) -> InlineSlot<P> {
        // The pool's workers, and its lane's, have the indices below these.
        InlineSlot {
            core,
            storage,
            next_storage: AtomicUsize::new(workers + 1),
            permits: Mutex::new(workers.max(1)),
            permit_freed: Condvar::new(),
            tallies: Mutex::new(HashMap::new()),
        }
    }

    /// What the threads' storages counted, summed by name.
    pub fn tally(&self) -> Vec<(&'static str, u64)> {
        let tallies = self.tallies.lock().unwrap_or_else(|p| p.into_inner());
        crate::workers::sum_tallies(tallies.values())
    }

    /// Waits until fewer jobs than the pool has workers run inline, and counts this one in.
    fn take_permit(&self) {
        let mut free = self.permits.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            free = self.permit_freed.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
    }

    fn give_permit(&self) {
        *self.permits.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.permit_freed.notify_one();
    }
}

/// An authenticated client connection, taken off the loop's runtime.
pub(super) struct Handed<P: Protocol> {
    pub stream: std::net::TcpStream,
    pub read: HandedReader<P>,
    pub writer: HandedWriterParts,
    pub out: OutTx,
    pub credit: Arc<Credit>,
    pub client: ClientId,
    pub conn: ConnId,
    pub addr: std::net::SocketAddr,
    pub permit: OwnedSemaphorePermit,
}

/// The reading side of a connection taken off the loop's runtime, but the socket.
pub(super) struct HandedReader<P: Protocol> {
    pub codec: crate::frame::FrameCodec<P::Msg, Never>,
    /// The beginning of a frame, read but not complete.
    pub read_buf: bytes::BytesMut,
    /// Frames read and decoded before the handover, in order.
    pub first: Vec<Frame<P::Msg, Never>>,
    /// What was wrong with the frame after them, if anything.
    pub broken: Option<String>,
}

/// What the writer task handed over, but its write half (rejoined to the stream).
pub(super) struct HandedWriterParts {
    pub rx: crate::conn::OutRx,
    pub sealer: Option<crate::auth::Sealer>,
}

impl HandedWriterParts {
    pub fn of(w: HandedWriter) -> (tokio::net::tcp::OwnedWriteHalf, HandedWriterParts) {
        (w.wr, HandedWriterParts { rx: w.rx, sealer: w.sealer })
    }
}

/// Starts the thread of a client's connection.
pub(super) fn spawn<P: Protocol>(handed: Handed<P>, ctx: Arc<Inbound<P>>, host: Arc<InlineHost<P>>) -> std::io::Result<()> {
    let name = format!("ensemble-conn-{}", handed.conn);
    std::thread::Builder::new().name(name).spawn(move || serve(handed, &ctx, &host)).map(|_| ())
}

/// The connection's thread: reads requests until the connection ends, breaks the protocol or
/// the host stops. Its i/o runs on a runtime of its own, and only between jobs: a storage
/// that blocks on a runtime of its own (the PostgreSQL session does) cannot run inside one.
fn serve<P: Protocol>(handed: Handed<P>, ctx: &Inbound<P>, host: &InlineHost<P>) {
    let Handed { stream, read, writer, out, credit, client, conn, addr, permit } = handed;
    let HandedReader { codec, read_buf, first, broken } = read;
    let me = host.me;
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("[ensemble-net {me}] connection of client {client} from {addr}: cannot start its runtime: {e}");
            gone(ctx, client, conn);
            return;
        }
    };
    let credit_back = credit.clone();
    let started = runtime.block_on(async {
        let stream = tokio::net::TcpStream::from_std(stream)?;
        let (rd, mut wr) = stream.into_split();
        let HandedWriterParts { mut rx, sealer } = writer;
        let writer = tokio::spawn(async move {
            if let Err(e) = write_loop(&mut wr, &mut rx, sealer, Some(credit_back)).await {
                eprintln!("[ensemble-net {me}] writing to {addr} failed: {e}");
            }
        });
        let mut frames = tokio_util::codec::FramedRead::new(rd, codec);
        frames.read_buffer_mut().extend_from_slice(&read_buf);
        std::io::Result::Ok((frames, writer))
    });
    let (mut frames, writer): (Frames<P>, _) = match started {
        Ok(f) => f,
        Err(e) => {
            eprintln!("[ensemble-net {me}] connection of client {client} from {addr}: cannot register it: {e}");
            gone(ctx, client, conn);
            return;
        }
    };
    let mut thread = ConnThread { host, client, out: out.clone(), storages: HashMap::new() };
    let who = super::inbound::Who::Client(client);
    let mut first = VecDeque::from(first);
    let mut broken = broken.map(Some);
    let problem = loop {
        let idle = thread.storages.values().any(|s| s.ran_since_idle);
        let next = if let Some(frame) = first.pop_front() {
            Some(Some(Ok(frame)))
        } else if let Some(problem) = broken.take() {
            Some(Some(Err(problem)))
        } else {
            runtime.block_on(async {
            tokio::select! {
                biased;
                _ = host.stopped.wait() => None,
                frame = next_frame::<P>(&mut frames, &ctx.limits, who) => Some(Some(frame)),
                _ = tokio::time::sleep(STORAGE_IDLE_AFTER), if idle => Some(None),
            }
            })
        };
        let frame = match next {
            None => break None,
            Some(None) => {
                thread.idle();
                continue;
            }
            Some(Some(Ok(frame))) => frame,
            Some(Some(Err(problem))) => break problem,
        };
        match frame {
            Frame::Error(text) => eprintln!("[ensemble-net {me}] {who} reported an error: {text}"),
            Frame::Request { to, request } => {
                if request.client != client {
                    break Some(format!("request of {} on the connection of {client}", request.client));
                }
                match ctx.dir.place(to) {
                    Some(p) if p.host == me => {}
                    Some(p) => break Some(format!("request for {to}, which runs on host {}, not {me}", p.host)),
                    None => break Some(format!("request for {to}, which is not deployed")),
                }
                // Where a client that does not read its replies stops being read.
                runtime.block_on(credit.take());
                thread.request(to, request);
            }
            other => break Some(format!("a {} frame is not for {who} to send", other.kind())),
        }
    };
    if let Some(problem) = problem {
        eprintln!("[ensemble-net {me}] closing connection from {addr} ({who}): {problem}");
        let _ = ctx.inputs.send(Input::BadConnection);
        let _ = out.send(Outgoing::Frame { due: None, bytes: encode_error(&problem), answer: false });
        let _ = out.send(Outgoing::Close);
        // The writer runs only while this thread waits on its runtime: the Error frame is
        // written before the runtime goes with the thread.
        runtime.block_on(async {
            let _ = tokio::join!(linger(frames.into_inner()), tokio::time::timeout(std::time::Duration::from_secs(2), writer));
        });
    }
    drop(thread);
    drop(permit);
    gone(ctx, client, conn);
}

/// The client's connection is over: its id may be claimed again, and the loop forgets it.
pub(super) fn gone<P: Protocol>(ctx: &Inbound<P>, client: ClientId, conn: ConnId) {
    let mut claims = ctx.client_conns.lock().unwrap_or_else(|e| e.into_inner());
    if claims.get(&client) == Some(&conn) {
        claims.remove(&client);
    }
    drop(claims);
    let _ = ctx.inputs.send(Input::ClientGone { conn });
}

/// A storage of a connection's thread.
struct Opened<P: Protocol> {
    /// `None`: opening it panicked; the slot's jobs go to the pool from this thread.
    storage: Option<Box<dyn Storage<Job = P::Job, Result = P::JobResult>>>,
    index: usize,
    /// It ran a job since it was last told it was idle.
    ran_since_idle: bool,
    /// It has reported a tally: from then on every one is copied out.
    tallied: bool,
}

/// What one connection's thread keeps.
struct ConnThread<'h, P: Protocol> {
    host: &'h InlineHost<P>,
    client: ClientId,
    out: OutTx,
    /// By slot, opened at the slot's first job that runs here.
    storages: HashMap<usize, Opened<P>>,
}

impl<P: Protocol> ConnThread<'_, P> {
    fn now(&self) -> Time {
        Time::from_duration(self.host.started.elapsed())
    }

    /// Runs `request` through its process, and the storage jobs it leads to that may run here,
    /// until nothing is left for this thread to do.
    fn request(&mut self, to: ProcessId, request: Request) {
        let Some(slot) = self.host.local.get(to.0 as usize).copied().flatten() else { return };
        let me = self.host.me;
        let mut events = VecDeque::from([Event::Request(request)]);
        let mut effects = Vec::new();
        while let Some(event) = events.pop_front() {
            let now = self.now();
            let mut here = Vec::new();
            let mut replies = Vec::new();
            let mut to_pool = false;
            let id = {
                let inline = &self.host.slots[slot];
                let mut core = lock(&inline.core);
                core.step(me, now, Some(event), &mut effects);
                let mut leave = Vec::new();
                for effect in effects.drain(..) {
                    match effect {
                        Effect::Storage { work, job, cost: _ } => {
                            core.traffic.storage_jobs += 1;
                            if self.may_run_here(slot, &core, &job) {
                                here.push((work, job));
                            } else {
                                to_pool = true;
                                core.submit(me, work, job);
                            }
                        }
                        Effect::Reply { to, reply } if to == self.client => {
                            core.traffic.replies += 1;
                            replies.push(reply);
                        }
                        other => leave.push(other),
                    }
                }
                if !leave.is_empty() {
                    let wake = core.outbox.is_empty();
                    core.outbox.append(&mut leave);
                    if wake {
                        let _ = self.host.inputs.send(Input::Outbox { slot });
                    }
                }
                core.id
            };
            for reply in replies {
                let sent = match encode_frame::<Never, P::Evidence>(&Frame::Reply { from: id, reply }) {
                    Ok(bytes) => self.out.send(Outgoing::Frame { due: None, bytes, answer: true }).is_ok(),
                    Err(e) => {
                        eprintln!("[ensemble-net {me}] reply of {id} to {} dropped: {e}", self.client);
                        false
                    }
                };
                if !sent {
                    lock(&self.host.slots[slot].core).traffic.replies_undeliverable += 1;
                }
            }
            if to_pool {
                // The client waits for the pool's worker now: what this thread's storages
                // deferred to their next job (a reader's COMMIT) is done meanwhile, rather than
                // held open until this client's next job that runs here.
                self.idle();
            }
            for (work, job) in here {
                // Taken with no lock held: a thread waiting here holds up nothing else.
                self.host.slots[slot].take_permit();
                let result = self.run(slot, work, &job);
                self.host.slots[slot].give_permit();
                match result {
                    Ok(result) => events.push_back(Event::StorageDone { work, result }),
                    Err(JobFailed(why)) => {
                        let mut core = lock(&self.host.slots[slot].core);
                        core.traffic.storage_failed += 1;
                        core.trouble(me, why);
                    }
                }
            }
        }
    }

    /// Whether `job` runs on this thread: not if the pool's lane takes it, nor if this
    /// thread could not open a storage.
    fn may_run_here(&self, slot: usize, core: &Core<P>, job: &P::Job) -> bool {
        let inline = &self.host.slots[slot];
        let broken = self.storages.get(&slot).is_some_and(|s| s.storage.is_none());
        inline.storage.is_some() && !broken && core.pool.as_ref().is_some_and(|pool| !pool.on_lane(job))
    }

    /// Runs `job` on this thread's storage of `slot`, opening it first if need be. A storage
    /// that panics is dropped, and opened again for the next job.
    fn run(&mut self, slot: usize, work: WorkId, job: &P::Job) -> Result<P::JobResult, JobFailed> {
        let inline = &self.host.slots[slot];
        let opened = self.storages.entry(slot).or_insert_with(|| {
            let index = inline.next_storage.fetch_add(1, Ordering::Relaxed);
            let make = inline.storage.as_ref().expect("only a slot with storage runs jobs here");
            let storage = match catch_unwind(AssertUnwindSafe(|| make(index))) {
                Ok(s) => Some(s),
                Err(p) => {
                    eprintln!("[ensemble-net {}] storage {index} of a client connection: opening it panicked: {}", self.host.me, panic_text(&*p));
                    None
                }
            };
            Opened { storage, index, ran_since_idle: false, tallied: false }
        });
        let index = opened.index;
        let Some(storage) = opened.storage.as_mut() else {
            return Err(JobFailed(format!("storage {index} of a client connection has no storage: opening it panicked")));
        };
        opened.ran_since_idle = true;
        let result = catch_unwind(AssertUnwindSafe(|| storage.run(job))).map_err(|p| {
            let why = format!("storage {index} of a client connection: job {work:?} panicked: {}", panic_text(&*p));
            eprintln!("[ensemble-net {}] {why}", self.host.me);
            JobFailed(why)
        });
        if let Some(tally) = catch_unwind(AssertUnwindSafe(|| storage.tally())).ok() {
            if !tally.is_empty() || opened.tallied {
                opened.tallied = true;
                inline.tallies.lock().unwrap_or_else(|p| p.into_inner()).insert(index, tally);
            }
        }
        if result.is_err() {
            self.storages.remove(&slot);
        }
        result
    }

    /// No request has come for a while: each storage that ran a job since may finish what it
    /// deferred ([`Storage::idle`]).
    fn idle(&mut self) {
        for opened in self.storages.values_mut() {
            if let (Some(storage), true) = (opened.storage.as_mut(), opened.ran_since_idle) {
                if let Err(p) = catch_unwind(AssertUnwindSafe(|| storage.idle())) {
                    eprintln!("[ensemble-net {}] storage {} of a client connection: idle() panicked: {}", self.host.me, opened.index, panic_text(&*p));
                }
            }
            opened.ran_since_idle = false;
        }
    }
}
