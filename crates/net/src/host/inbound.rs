//! The host's connections: accepting and reading inbound ones (peer hosts, clients, admin tools),
//! and the outbound link to each peer host.
//!
//! An inbound connection is a stranger until its handshake ends ([`crate::auth`]): until then it
//! may send only a Hello (and then a Proof), each at most
//! [`PRE_AUTH_MAX_FRAME`](crate::frame::PRE_AUTH_MAX_FRAME) bytes, all within
//! [`Limits::hello_deadline`]. What it may send afterwards depends on the role it proved:
//! a peer host sends Messages from its own processes and may ask for Shutdown; a client sends
//! Requests in its own name; an admin tool sends Ping and Shutdown.

use super::run::{ConnId, Input};
use super::Limits;
use crate::auth::{self, KeyRing, Secret};
use crate::conn::{connect_with_retry, dial_handshake, linger, write_loop, Credit, OutRx, OutTx, Outgoing};
use crate::frame::{encode_error, encode_frame, Frame, FrameCodec, FrameError, Hello, HostId, Never, MAX_FRAME_LEN, PRE_AUTH_MAX_FRAME};
use crate::layout::{list, Directory};
use tokio::sync::mpsc::UnboundedSender;
use ensemble_core::{ClientId, ProcessId, Protocol};
use futures::StreamExt;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::codec::FramedRead;

/// What inbound connection tasks share.
pub(super) struct Inbound<P: Protocol> {
    pub me: HostId,
    pub dir: Arc<Directory>,
    pub inputs: UnboundedSender<Input<P>>,
    pub next_conn: AtomicU64,
    pub keys: Option<KeyRing>,
    pub limits: Limits,
    /// One permit per open inbound connection.
    pub connections: Arc<Semaphore>,
    /// The host's in-flight credit ([`Credit`]).
    pub in_flight: Arc<Semaphore>,
    /// Which connection speaks for each client: a client id is one session, so a second
    /// connection claiming it is refused rather than handed the first one's replies.
    pub client_conns: Mutex<HashMap<ClientId, ConnId>>,
}

pub(super) async fn accept_loop<P: Protocol>(listener: tokio::net::TcpListener, ctx: Arc<Inbound<P>>) {
    loop {
        match listener.accept().await {
            Ok((stream, addr)) => {
                let conn = ctx.next_conn.fetch_add(1, Ordering::Relaxed);
                match ctx.connections.clone().try_acquire_owned() {
                    Ok(permit) => {
                        tokio::spawn(serve_inbound(stream, addr, conn, ctx.clone(), permit));
                    }
                    Err(_) => {
                        let _ = ctx.inputs.send(Input::BadConnection);
                        let why = format!("too many connections: this host accepts {}", ctx.limits.max_connections);
                        eprintln!("[ensemble-net {}] refusing a connection from {addr}: {why}", ctx.me);
                        tokio::spawn(refuse(stream, why));
                    }
                }
            }
            Err(e) => {
                // Typically out of file descriptors; back off instead of spinning.
                eprintln!("[ensemble-net {}] accept failed: {e}", ctx.me);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Tells a connection why it is refused, then closes it.
async fn refuse(stream: TcpStream, why: String) {
    let (rd, mut wr) = stream.into_split();
    let (out, mut rx) = mpsc::unbounded_channel();
    let _ = out.send(Outgoing::Frame { due: None, bytes: encode_error(&why), answer: false });
    let _ = out.send(Outgoing::Close);
    let _ = tokio::time::timeout(Duration::from_secs(2), write_loop(&mut wr, &mut rx, None, None)).await;
    linger(rd).await;
}

/// Who is at the other end of an inbound connection, as its handshake proved.
#[derive(Clone, Copy, Debug)]
enum Who {
    Unknown,
    Peer(HostId),
    Client(ClientId),
    Admin,
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Who::Unknown => f.write_str("a connection that has not completed its handshake"),
            Who::Peer(h) => write!(f, "peer host {h}"),
            Who::Client(c) => write!(f, "client {c}"),
            Who::Admin => f.write_str("an admin connection"),
        }
    }
}

type Frames<P> = FramedRead<tokio::net::tcp::OwnedReadHalf, FrameCodec<<P as Protocol>::Msg, Never>>;

/// Reads one inbound connection. Anything that breaks the protocol gets an Error frame naming
/// the problem and the connection is closed; nothing else in the host is affected. A message for
/// a process this host does not run is not such a break: the loop counts and drops it.
async fn serve_inbound<P: Protocol>(stream: TcpStream, addr: SocketAddr, conn: ConnId, ctx: Arc<Inbound<P>>, _permit: OwnedSemaphorePermit) {
    let me = ctx.me;
    if let Err(e) = stream.set_nodelay(true) {
        eprintln!("[ensemble-net {me}] connection from {addr}: set_nodelay failed: {e}");
    }
    let (rd, mut wr) = stream.into_split();
    let (out, mut out_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        if let Err(e) = write_loop(&mut wr, &mut out_rx, None, None).await {
            eprintln!("[ensemble-net {me}] writing to {addr} failed: {e}");
        }
    });
    // Nothing inbound carries a reply: a Reply frame cannot decode here.
    let mut frames: Frames<P> = FramedRead::new(rd, FrameCodec::with_max_len(PRE_AUTH_MAX_FRAME));
    let deadline = ctx.limits.hello_deadline;
    let (who, problem) = match tokio::time::timeout(deadline, handshake(&mut frames, &out, conn, &ctx)).await {
        Err(_) => (Who::Unknown, Some(format!("no complete handshake within {deadline:?}"))),
        Ok(Err(None)) => (Who::Unknown, None),
        Ok(Err(Some(problem))) => (Who::Unknown, Some(problem)),
        Ok(Ok(who)) => {
            let host = match who {
                Who::Admin => Arc::new(tokio::sync::Semaphore::new(ctx.limits.in_flight_per_connection)),
                _ => ctx.in_flight.clone(),
            };
            let credit = Arc::new(Credit::new(ctx.limits.in_flight_per_connection, host));
            let _ = out.send(Outgoing::Credit(credit.clone()));
            (who, serve(&mut frames, who, &out, conn, &ctx, &credit).await)
        }
    };
    if let Some(problem) = problem {
        eprintln!("[ensemble-net {me}] closing connection from {addr} ({who}): {problem}");
        let _ = ctx.inputs.send(Input::BadConnection);
        let _ = out.send(Outgoing::Frame { due: None, bytes: encode_error(&problem), answer: false });
        let _ = out.send(Outgoing::Close);
        linger(frames.into_inner()).await;
    }
    if let Who::Client(client) = who {
        let mut claims = ctx.client_conns.lock().unwrap_or_else(|e| e.into_inner());
        if claims.get(&client) == Some(&conn) {
            claims.remove(&client);
        }
        drop(claims);
        let _ = ctx.inputs.send(Input::ClientGone { conn });
    }
}

/// The next frame; a frame that has begun must end within the frame deadline, so a stranger
/// cannot hold a half-sent frame forever. `Err(None)`: the connection ended or broke.
async fn next_frame<P: Protocol>(frames: &mut Frames<P>, limits: &Limits, who: Who) -> Result<Frame<P::Msg, Never>, Option<String>> {
    let next = if frames.read_buffer().is_empty() {
        frames.next().await
    } else {
        match tokio::time::timeout(limits.frame_deadline, frames.next()).await {
            Ok(next) => next,
            Err(_) => return Err(Some(format!("a frame began but did not end within {:?}", limits.frame_deadline))),
        }
    };
    match next {
        None => Err(None),
        Some(Err(FrameError::Io(e))) => {
            eprintln!("[ensemble-net] connection of {who} failed: {e}");
            Err(None)
        }
        Some(Err(e)) => Err(Some(e.to_string())),
        Some(Ok(frame)) => Ok(frame),
    }
}

/// The listener's side of the handshake: a Hello naming a role this cluster has, a Challenge
/// back, and (with a secret) the dialer's Proof. Returns the role proved.
async fn handshake<P: Protocol>(frames: &mut Frames<P>, out: &OutTx, conn: ConnId, ctx: &Inbound<P>) -> Result<Who, Option<String>> {
    let (hello, nonce_d) = match next_frame::<P>(frames, &ctx.limits, Who::Unknown).await? {
        Frame::Hello { hello, nonce } => (hello, nonce),
        other => return Err(Some(format!("expected Hello, got a {} frame", other.kind()))),
    };
    let (who, max_frame) = match &hello {
        Hello::Peer { host, processes } => {
            check_peer(ctx, *host, processes).map_err(Some)?;
            (Who::Peer(*host), MAX_FRAME_LEN)
        }
        Hello::Client { client, site } => {
            let n = ctx.dir.sites();
            if *site >= n {
                return Err(Some(format!("client site {site} out of range: the topology has {n} site(s)")));
            }
            // Checked here so the dialer hears why at once; claimed only after the proof.
            if let Some(other) = ctx.client_conns.lock().unwrap_or_else(|e| e.into_inner()).get(client).filter(|c| **c != conn) {
                return Err(Some(format!("client {client} is already connected (connection {other}); one connection per client session")));
            }
            (Who::Client(*client), ctx.limits.client_max_frame)
        }
        Hello::Admin => (Who::Admin, PRE_AUTH_MAX_FRAME),
    };
    let nonce_l = auth::fresh_nonce();
    let t = auth::transcript(&hello, &nonce_d, &nonce_l);
    // The key the role claimed must be proved with: a peer's is the pair key of it and this host.
    let key = match &ctx.keys {
        None => None,
        Some(ring) => Some(ring.key_for(&hello).ok_or_else(|| Some(format!("no key for {hello:?}")))?),
    };
    let proof = key.map(|k| auth::listener_proof(k, &t));
    let challenge = encode_frame::<Never, Never>(&Frame::Challenge { nonce: nonce_l, proof }).map_err(|e| Some(e.to_string()))?;
    let _ = out.send(Outgoing::Frame { due: None, bytes: challenge, answer: false });
    if let Some(k) = key {
        match next_frame::<P>(frames, &ctx.limits, Who::Unknown).await? {
            Frame::Proof(p) if auth::proof_matches(&auth::dialer_proof(k, &t), &p) => {}
            Frame::Proof(_) => return Err(Some("wrong proof: the connection does not hold the key of the role it claims".into())),
            other => return Err(Some(format!("expected Proof, got a {} frame", other.kind()))),
        }
        // Sealing starts only now, so an Error frame about a failed handshake stays readable.
        let (sealer, opener) = auth::session(k, &t, false);
        let _ = out.send(Outgoing::Seal(sealer));
        frames.decoder_mut().open_with(opener);
    }
    frames.decoder_mut().set_max_len(max_frame);
    if let Who::Client(client) = who {
        // Claimed only now: a stranger that never proves anything cannot squat on a client id.
        let mut claims = ctx.client_conns.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(other) = claims.get(&client).filter(|c| **c != conn) {
            return Err(Some(format!("client {client} is already connected (connection {other}); one connection per client session")));
        }
        claims.insert(client, conn);
        drop(claims);
        let site = match hello {
            Hello::Client { site, .. } => site,
            _ => unreachable!("a client's Hello"),
        };
        let _ = ctx.inputs.send(Input::ClientHello { conn, site, out: out.clone() });
    }
    Ok(who)
}

/// Serves an authenticated connection until it ends; `Some` says how it broke the protocol.
async fn serve<P: Protocol>(frames: &mut Frames<P>, who: Who, out: &OutTx, conn: ConnId, ctx: &Inbound<P>, credit: &Credit) -> Option<String> {
    loop {
        let frame = match next_frame::<P>(frames, &ctx.limits, who).await {
            Ok(f) => f,
            Err(problem) => return problem,
        };
        let sent = match (who, frame) {
            (Who::Peer(_) | Who::Admin, Frame::Shutdown) => ctx.inputs.send(Input::Shutdown),
            (_, Frame::Error(text)) => {
                eprintln!("[ensemble-net {}] {who} reported an error: {text}", ctx.me);
                Ok(())
            }
            (Who::Peer(peer), Frame::Message { from, to, msg }) => {
                if ctx.dir.place(from).map(|p| p.host) != Some(peer) {
                    return Some(format!("message from {from}, which host {peer} does not run"));
                }
                ctx.inputs.send(Input::Peer { from, to, msg })
            }
            (Who::Client(client), Frame::Request { to, request }) => {
                if request.client != client {
                    return Some(format!("request of {} on the connection of {client}", request.client));
                }
                match ctx.dir.place(to) {
                    Some(p) if p.host == ctx.me => {}
                    Some(p) => return Some(format!("request for {to}, which runs on host {}, not {}", p.host, ctx.me)),
                    None => return Some(format!("request for {to}, which is not deployed")),
                }
                // Where a client that does not read its replies stops being read.
                credit.take().await;
                ctx.inputs.send(Input::ClientRequest { conn, to, request })
            }
            (Who::Admin, Frame::Ping(nonce)) => {
                credit.take().await;
                ctx.inputs.send(Input::Ping { nonce, out: out.clone() })
            }
            (who, frame) => return Some(format!("a {} frame is not for {who} to send", frame.kind())),
        };
        if sent.is_err() {
            // The protocol loop has stopped: the host is shutting down.
            return None;
        }
    }
}

/// A peer's Hello must name another host of the cluster and the processes this host's spec
/// gives it: hosts started from different specs would otherwise misdeliver.
fn check_peer<P: Protocol>(ctx: &Inbound<P>, host: HostId, processes: &[ProcessId]) -> Result<(), String> {
    if host == ctx.me {
        return Err(format!("host {host} is this host, not a peer"));
    }
    let Some(spec) = ctx.dir.host(host) else {
        return Err(format!("host {host} is not in the cluster ({} host(s))", ctx.dir.hosts().len()));
    };
    if spec.processes != processes {
        return Err(format!("host {host} says it runs {}, but the cluster spec gives it {}", list(processes), list(&spec.processes)));
    }
    Ok(())
}

/// The sending side of the connection to one peer host: dials (with retry), does the
/// handshake, then writes the messages of this host's processes. If the connection breaks it
/// redials; the frame being written when it broke is lost, as it would be with any TCP failure.
/// It also redials once the peer closes its end, which a peer whose process was killed does at
/// once: the kernel would take the next frames into the dead connection without an error, and
/// a message sent there after the peer, started again, said so (a 2PC prepare after
/// `Message::Started`) would be lost for good. So what is sent after the peer's end closed
/// waits for the new connection.
pub(super) struct PeerLink {
    pub me: HostId,
    pub mine: Vec<ProcessId>,
    pub peer: HostId,
    pub addr: SocketAddr,
    pub timeout: Duration,
    /// The pair key of this host and `peer`.
    pub key: Option<Secret>,
}

/// Why a link to a peer ended when the peer closed its end ([`PeerLink`]).
const PEER_CLOSED: &str = "the peer closed its end";

/// A link to a peer that its peer closed sooner than this after the handshake makes the next
/// dial wait a little ([`PeerLink`]), longer each time in a row.
const STEADY_LINK: Duration = Duration::from_secs(1);

impl PeerLink {
    pub(super) async fn run(self, mut rx: OutRx) {
        let PeerLink { me, mine, peer, addr, timeout, key } = self;
        // Failures since the last handshake that went through: five in a row and the peer is
        // given up on. A peer that completes the handshake is up, however often it restarts.
        let mut failures = 0;
        // Links in a row that the peer closed soon after the handshake.
        let mut short = 0u32;
        loop {
            let stream = match connect_with_retry(addr, timeout).await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("[ensemble-net {me}] giving up on peer host {peer}: {e}; messages to it are dropped");
                    return;
                }
            };
            let hello = Hello::Peer { host: me, processes: mine.clone() };
            let result = match dial_handshake::<Never, Never>(stream, hello, key.as_ref(), timeout).await {
                Ok(dialed) => {
                    failures = 0;
                    let linked = Instant::now();
                    let closed = tokio::spawn(watch_peer_replies(me, peer, dialed.reader));
                    let mut wr = dialed.writer;
                    let ended = tokio::select! {
                        written = write_loop(&mut wr, &mut rx, dialed.sealer, None) => written.map_err(|e| e.to_string()),
                        _ = closed => Err(PEER_CLOSED.to_string()),
                    };
                    // A peer that takes the handshake and closes at once, again and again, is
                    // not dialed in a tight loop.
                    short = if linked.elapsed() < STEADY_LINK { short + 1 } else { 0 };
                    if short > 0 {
                        tokio::time::sleep(Duration::from_millis(5 << short.min(7))).await;
                    }
                    ended
                }
                Err(e) => Err(format!("handshake failed: {e}")),
            };
            match result {
                Ok(_) => return,
                Err(e) => {
                    failures += 1;
                    // Every peer that ends before this host does closes its end: not news.
                    if e != PEER_CLOSED {
                        eprintln!("[ensemble-net {me}] link to peer host {peer} broke: {e}");
                    }
                    if failures >= 5 {
                        eprintln!("[ensemble-net {me}] giving up on peer host {peer} after {failures} failed links in a row");
                        return;
                    }
                }
            }
        }
    }
}

/// A peer never sends on a connection we dialed, except an Error frame if it thinks we broke the
/// protocol; log that so the cause of a dropped link is visible.
async fn watch_peer_replies(me: HostId, peer: HostId, mut frames: FramedRead<tokio::net::tcp::OwnedReadHalf, FrameCodec<Never, Never>>) {
    while let Some(frame) = frames.next().await {
        match frame {
            Ok(Frame::Error(text)) => eprintln!("[ensemble-net {me}] peer host {peer} reported an error: {text}"),
            Ok(other) => eprintln!("[ensemble-net {me}] peer host {peer} sent an unexpected {} frame", other.kind()),
            Err(_) => break,
        }
    }
}
