//! The host's connections: accepting and reading inbound ones (peer hosts, clients, admin tools),
//! and the outbound link to each peer host.

use super::run::{ConnId, Input};
use crate::conn::{connect_with_retry, linger, write_loop, OutRx, Outgoing};
use crate::frame::{encode_error, encode_frame, Frame, FrameCodec, FrameError, Hello, HostId, Never};
use crate::layout::{list, Directory};
use crossbeam_channel::Sender;
use ensemble_core::{ClientId, ProcessId, Protocol};
use futures::StreamExt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;

/// What inbound connection tasks share.
pub(super) struct Inbound<P: Protocol> {
    pub me: HostId,
    pub dir: Arc<Directory>,
    pub inputs: Sender<Input<P>>,
    pub next_conn: AtomicU64,
}

pub(super) async fn accept_loop<P: Protocol>(listener: tokio::net::TcpListener, ctx: Arc<Inbound<P>>) {
    loop {
        match listener.accept().await {
            Ok((stream, addr)) => {
                let conn = ctx.next_conn.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(serve_inbound(stream, addr, conn, ctx.clone()));
            }
            Err(e) => {
                // Typically out of file descriptors; back off instead of spinning.
                eprintln!("[ensemble-net {}] accept failed: {e}", ctx.me);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Who is at the other end of an inbound connection, as its Hello said.
#[derive(Clone, Copy, Debug)]
enum Who {
    Unknown,
    Peer(HostId),
    Client(ClientId),
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Who::Unknown => f.write_str("a connection that has not said Hello"),
            Who::Peer(h) => write!(f, "peer host {h}"),
            Who::Client(c) => write!(f, "client {c}"),
        }
    }
}

/// Reads one inbound connection. Anything that breaks the protocol gets an Error frame naming
/// the problem and the connection is closed; nothing else in the host is affected. A message for
/// a process this host does not run is not such a break: the loop counts and drops it.
async fn serve_inbound<P: Protocol>(stream: TcpStream, addr: SocketAddr, conn: ConnId, ctx: Arc<Inbound<P>>) {
    let me = ctx.me;
    if let Err(e) = stream.set_nodelay(true) {
        eprintln!("[ensemble-net {me}] connection from {addr}: set_nodelay failed: {e}");
    }
    let (rd, mut wr) = stream.into_split();
    let (out, mut out_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        if let Err(e) = write_loop(&mut wr, &mut out_rx).await {
            eprintln!("[ensemble-net {me}] writing to {addr} failed: {e}");
        }
    });
    // Nothing inbound carries a reply: a Reply frame cannot decode here.
    let mut frames = FramedRead::new(rd, FrameCodec::<P::Msg, Never>::new());
    let mut who = Who::Unknown;
    let problem = loop {
        let frame = match frames.next().await {
            None => break None,
            Some(Err(FrameError::Io(e))) => {
                eprintln!("[ensemble-net {me}] connection from {addr} ({who}) failed: {e}");
                break None;
            }
            Some(Err(e)) => break Some(e.to_string()),
            Some(Ok(frame)) => frame,
        };
        let sent = match (who, frame) {
            (_, Frame::Shutdown) => ctx.inputs.send(Input::Shutdown),
            (_, Frame::Error(text)) => {
                eprintln!("[ensemble-net {me}] {who} at {addr} reported an error: {text}");
                Ok(())
            }
            (Who::Unknown, Frame::Hello(Hello::Peer { host, processes })) => {
                if let Err(problem) = check_peer(&ctx, host, &processes) {
                    break Some(problem);
                }
                who = Who::Peer(host);
                Ok(())
            }
            (Who::Unknown, Frame::Hello(Hello::Client { client, site })) => {
                let n = ctx.dir.sites();
                if site >= n {
                    break Some(format!("client site {site} out of range: the topology has {n} site(s)"));
                }
                who = Who::Client(client);
                ctx.inputs.send(Input::ClientHello { conn, client, site, out: out.clone() })
            }
            (Who::Peer(peer), Frame::Message { from, to, msg }) => {
                if ctx.dir.place(from).map(|p| p.host) != Some(peer) {
                    break Some(format!("message from {from}, which host {peer} does not run"));
                }
                ctx.inputs.send(Input::Peer { from, to, msg })
            }
            (Who::Client(client), Frame::Request { to, request }) => {
                if request.client != client {
                    break Some(format!("request of {} on the connection of {client}", request.client));
                }
                match ctx.dir.place(to) {
                    Some(p) if p.host == me => ctx.inputs.send(Input::ClientRequest { conn, to, request }),
                    Some(p) => break Some(format!("request for {to}, which runs on host {}, not {me}", p.host)),
                    None => break Some(format!("request for {to}, which is not deployed")),
                }
            }
            (who, frame) => break Some(format!("unexpected {} frame from {who}", frame.kind())),
        };
        if sent.is_err() {
            // The protocol loop has stopped: the host is shutting down.
            break None;
        }
    };
    if let Some(problem) = problem {
        eprintln!("[ensemble-net {me}] closing connection from {addr} ({who}): {problem}");
        let _ = ctx.inputs.send(Input::BadConnection);
        let _ = out.send(Outgoing::Frame { due: None, bytes: encode_error(&problem) });
        let _ = out.send(Outgoing::Close);
        linger(frames.into_inner()).await;
    }
    if matches!(who, Who::Client(_)) {
        let _ = ctx.inputs.send(Input::ClientGone { conn });
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

/// The sending side of the connection to one peer host: dials (with retry), says Hello, then
/// writes the messages of this host's processes. If the connection breaks it redials; the frame
/// being written when it broke is lost, as it would be with any TCP failure.
pub(super) async fn peer_link(me: HostId, mine: Vec<ProcessId>, peer: HostId, addr: SocketAddr, mut rx: OutRx, timeout: Duration) {
    let hello = match encode_frame::<Never, Never>(&Frame::Hello(Hello::Peer { host: me, processes: mine })) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("[ensemble-net {me}] cannot encode Hello: {e}");
            return;
        }
    };
    let mut failures = 0;
    loop {
        let stream = match connect_with_retry(addr, timeout).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("[ensemble-net {me}] giving up on peer host {peer}: {e}; messages to it are dropped");
                return;
            }
        };
        let (rd, mut wr) = stream.into_split();
        tokio::spawn(watch_peer_replies(me, peer, rd));
        let result = match wr.write_all(&hello).await {
            Ok(()) => write_loop(&mut wr, &mut rx).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(_) => return,
            Err(e) => {
                failures += 1;
                eprintln!("[ensemble-net {me}] link to peer host {peer} broke: {e}");
                if failures >= 5 {
                    eprintln!("[ensemble-net {me}] giving up on peer host {peer} after {failures} broken links");
                    return;
                }
            }
        }
    }
}

/// A peer never sends on a connection we dialed, except an Error frame if it thinks we broke the
/// protocol; log that so the cause of a dropped link is visible.
async fn watch_peer_replies(me: HostId, peer: HostId, rd: tokio::net::tcp::OwnedReadHalf) {
    let mut frames = FramedRead::new(rd, FrameCodec::<Never, Never>::new());
    while let Some(frame) = frames.next().await {
        match frame {
            Ok(Frame::Error(text)) => eprintln!("[ensemble-net {me}] peer host {peer} reported an error: {text}"),
            Ok(other) => eprintln!("[ensemble-net {me}] peer host {peer} sent an unexpected {} frame", other.kind()),
            Err(_) => break,
        }
    }
}
