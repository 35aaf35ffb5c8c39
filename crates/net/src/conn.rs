//! Pieces every connection uses, on hosts and clients alike: a writer task fed by a channel (so
//! synchronous protocol code can send without awaiting), dialing with bounded retry, and the
//! lingering close that makes an Error frame reach a misbehaving peer.

use crate::auth::{self, Secret, Sealer};
use crate::error::NetError;
use crate::frame::{encode_frame, Frame, FrameCodec, FrameError, Hello, Never, MAX_FRAME_LEN, PRE_AUTH_MAX_FRAME};
use crate::wan::Pacer;
use bytes::Bytes;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::Semaphore;
use tokio_util::codec::FramedRead;

/// What a writer task is asked to do, in order.
pub(crate) enum Outgoing {
    /// Write these encoded frame bytes, not before `due` (the WAN emulation's send time). An
    /// `answer` (a Reply, a Pong) gives back the [`Credit`] its request took once written.
    Frame { due: Option<Instant>, bytes: Bytes, answer: bool },
    /// Seal every later frame (the listener's side of a handshake, once the dialer proved its key).
    Seal(Sealer),
    /// Give answers' credit back to this (the listener's side, once the role is known).
    Credit(Arc<Credit>),
    /// Flush, close the write side and stop.
    Close,
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outgoing::Frame { due, bytes, answer } => write!(f, "Frame {{ due: {due:?}, {} bytes, answer: {answer} }}", bytes.len()),
            Outgoing::Seal(_) => f.write_str("Seal"),
            Outgoing::Credit(_) => f.write_str("Credit"),
            Outgoing::Close => f.write_str("Close"),
        }
    }
}

/// Bounds what one inbound connection can make its host hold: each request takes a unit of this
/// connection's credit and of the host's (a ping, of the connection's and of the admin's own, so
/// that clients exhausting the host's credit cannot silence its operator), and its answer gives
/// both back once it is *written to the socket*. A client that sends and never reads therefore stops being read
/// after `per_connection` unanswered requests: its answers pile up in the kernel's buffers, not
/// in ours. A connection that goes away gives back what it still holds.
pub(crate) struct Credit {
    connection: Semaphore,
    host: Arc<Semaphore>,
    outstanding: Mutex<usize>,
}

impl Credit {
    pub(crate) fn new(per_connection: usize, host: Arc<Semaphore>) -> Credit {
        Credit { connection: Semaphore::new(per_connection), host, outstanding: Mutex::new(0) }
    }

    /// Waits for a unit of both credits: this is where a connection that does not read its
    /// answers stops being read.
    pub(crate) async fn take(&self) {
        // Neither semaphore is ever closed.
        if let Ok(p) = self.connection.acquire().await {
            p.forget();
        }
        if let Ok(p) = self.host.acquire().await {
            p.forget();
        }
        *self.outstanding.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }

    fn give(&self) {
        let mut n = self.outstanding.lock().unwrap_or_else(|e| e.into_inner());
        if *n > 0 {
            *n -= 1;
            self.connection.add_permits(1);
            self.host.add_permits(1);
        }
    }
}

impl Drop for Credit {
    fn drop(&mut self) {
        let n = *self.outstanding.get_mut().unwrap_or_else(|e| e.into_inner());
        self.host.add_permits(n);
    }
}

pub(crate) type OutTx = UnboundedSender<Outgoing>;
pub(crate) type OutRx = UnboundedReceiver<Outgoing>;

/// How a writer loop ended without an i/o error.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WriteEnd {
    /// Every sender is gone and everything queued was written.
    Drained,
    /// `Outgoing::Close` was processed: the write side is shut down.
    Closed,
}

/// Writes queued frames in order, each no earlier than its due time, sealed once a sealer is
/// given (here or by `Outgoing::Seal`). Frames that are due are written back to back and flushed
/// once, so a burst costs one syscall, not one per frame.
pub(crate) async fn write_loop<W: AsyncWrite + Unpin>(
    w: &mut W,
    rx: &mut OutRx,
    mut sealer: Option<Sealer>,
    mut credit: Option<Arc<Credit>>,
) -> std::io::Result<WriteEnd> {
    let mut w = BufWriter::new(w);
    loop {
        let Some(first) = rx.recv().await else {
            w.flush().await?;
            return Ok(WriteEnd::Drained);
        };
        let mut next = Some(first);
        while let Some(out) = next.take() {
            match out {
                Outgoing::Close => {
                    w.shutdown().await?;
                    return Ok(WriteEnd::Closed);
                }
                Outgoing::Seal(s) => sealer = Some(s),
                Outgoing::Credit(c) => credit = Some(c),
                Outgoing::Frame { due, bytes, answer } => {
                    if let Some(due) = due {
                        if due > Instant::now() {
                            w.flush().await?;
                            // The delay line's thread never stops, so the wake always comes.
                            let _ = crate::alarm::wake_at(due).await;
                        }
                    }
                    match &mut sealer {
                        None => w.write_all(&bytes).await?,
                        Some(s) => {
                            let (header, tag) = s.seal(&bytes);
                            w.write_all(&header).await?;
                            w.write_all(&bytes[crate::frame::HEADER_LEN..]).await?;
                            w.write_all(&tag).await?;
                        }
                    }
                    if answer {
                        if let Some(c) = &credit {
                            c.give();
                        }
                    }
                }
            }
            next = rx.try_recv().ok();
        }
        w.flush().await?;
    }
}

/// The sending end of one connection as seen by the thread that owns the protocol: the writer
/// channel and the pacing that keeps emulated delays FIFO.
#[derive(Debug)]
pub(crate) struct Outlet {
    tx: OutTx,
    pacer: Pacer,
}

impl Outlet {
    pub(crate) fn new(tx: OutTx) -> Outlet {
        Outlet { tx, pacer: Pacer::default() }
    }

    /// Queues a frame, held back by `delay` (an emulated WAN delay) if there is one, and never
    /// written before the frames queued ahead of it. False if the connection is gone.
    pub(crate) fn send(&mut self, bytes: Bytes, delay: Option<Duration>) -> bool {
        let due = delay.map(|d| self.pacer.due(Instant::now(), d));
        self.tx.send(Outgoing::Frame { due, bytes, answer: false }).is_ok()
    }

    /// [`Outlet::send`] for the answer to a request that took credit.
    pub(crate) fn send_answer(&mut self, bytes: Bytes, delay: Option<Duration>) -> bool {
        let due = delay.map(|d| self.pacer.due(Instant::now(), d));
        self.tx.send(Outgoing::Frame { due, bytes, answer: true }).is_ok()
    }
}

/// A dialed connection after its handshake: frames in (checked with the session's key), the
/// write half and the sealer for frames out.
pub(crate) struct Dialed<M, E> {
    pub reader: FramedRead<OwnedReadHalf, FrameCodec<M, E>>,
    pub writer: OwnedWriteHalf,
    pub sealer: Option<Sealer>,
}

/// The dialer's side of the handshake (see [`crate::auth`]), bounded by `timeout`. The error
/// says what the listener did wrong or refused.
pub(crate) async fn dial_handshake<M: DeserializeOwned, E: DeserializeOwned>(
    stream: TcpStream,
    hello: Hello,
    secret: Option<&Secret>,
    timeout: Duration,
) -> Result<Dialed<M, E>, String> {
    let (rd, mut writer) = stream.into_split();
    let mut reader = FramedRead::new(rd, FrameCodec::<M, E>::with_max_len(PRE_AUTH_MAX_FRAME));
    let nonce_d = auth::fresh_nonce();
    let bytes = encode_frame::<Never, Never>(&Frame::Hello { hello: hello.clone(), nonce: nonce_d }).map_err(|e| e.to_string())?;
    let exchange = async {
        writer.write_all(&bytes).await.map_err(|e| format!("sending Hello: {e}"))?;
        let answer = match reader.next().await {
            None => return Err("the host closed the connection during the handshake".to_string()),
            Some(Err(FrameError::Io(e))) => return Err(format!("during the handshake: {e}")),
            Some(Err(e)) => return Err(format!("bad frame during the handshake: {e}")),
            Some(Ok(f)) => f,
        };
        let (nonce_l, proof_l) = match answer {
            Frame::Challenge { nonce, proof } => (nonce, proof),
            Frame::Error(text) => return Err(format!("the host refused the connection: {text}")),
            other => return Err(format!("the host answered Hello with a {} frame, not a Challenge", other.kind())),
        };
        let t = auth::transcript(&hello, &nonce_d, &nonce_l);
        let sealer = match (secret, proof_l) {
            (None, None) => None,
            (Some(_), None) => return Err("the host does not authenticate (it has no cluster secret) but this side has one".into()),
            (None, Some(_)) => return Err("the host requires the cluster secret, which this side was not given".into()),
            (Some(k), Some(p)) => {
                if !auth::proof_matches(&auth::listener_proof(k, &t), &p) {
                    return Err("the host failed to prove it knows the cluster secret".into());
                }
                let proof = encode_frame::<Never, Never>(&Frame::Proof(auth::dialer_proof(k, &t))).map_err(|e| e.to_string())?;
                writer.write_all(&proof).await.map_err(|e| format!("sending Proof: {e}"))?;
                let (sealer, opener) = auth::session(k, &t, true);
                reader.decoder_mut().open_with(opener);
                Some(sealer)
            }
        };
        reader.decoder_mut().set_max_len(MAX_FRAME_LEN);
        Ok(sealer)
    };
    let sealer = tokio::time::timeout(timeout, exchange).await.map_err(|_| format!("no handshake within {timeout:?}"))??;
    Ok(Dialed { reader, writer, sealer })
}

/// Dials `addr` until it accepts or `timeout` has passed, backing off between attempts, because
/// the processes of a cluster start in no particular order.
pub(crate) async fn connect_with_retry(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, NetError> {
    let deadline = Instant::now() + timeout;
    let mut backoff = Duration::from_millis(5);
    let mut attempts = 0;
    loop {
        attempts += 1;
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                stream.set_nodelay(true).map_err(|source| NetError::Io { context: format!("set_nodelay on {addr}"), source })?;
                return Ok(stream);
            }
            Err(source) => {
                if Instant::now() + backoff > deadline {
                    return Err(NetError::Connect { addr, attempts, source });
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        }
    }
}

/// Reads and discards what a peer still sends after we decided to close on it, until it closes
/// too (or a bound is hit). Closing a socket with unread input makes the kernel send a reset,
/// which can destroy the Error frame we just wrote before the peer reads it.
pub(crate) async fn linger<R: AsyncRead + Unpin>(mut r: R) {
    let drain = async {
        let mut buf = [0u8; 4096];
        let mut total = 0usize;
        while total < (1 << 20) {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{encode_frame, AdminFrame, Frame, FrameCodec, Never};
    use futures::StreamExt;
    use tokio_util::codec::FramedRead;

    fn error_frame(text: &str) -> Bytes {
        encode_frame(&AdminFrame::Error(text.into())).unwrap()
    }

    #[tokio::test]
    async fn frames_are_written_in_order_and_not_before_they_are_due() {
        let (mut a, b) = tokio::io::duplex(1 << 16);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let t0 = Instant::now();
        let mut pacer = Pacer::default();
        // The first frame waits 80 ms; the second draws only 1 ms but must not overtake it.
        let due1 = pacer.due(t0, Duration::from_millis(80));
        let due2 = pacer.due(t0, Duration::from_millis(1));
        tx.send(Outgoing::Frame { due: Some(due1), bytes: error_frame("one"), answer: false }).unwrap();
        tx.send(Outgoing::Frame { due: Some(due2), bytes: error_frame("two"), answer: false }).unwrap();
        tx.send(Outgoing::Frame { due: None, bytes: error_frame("three"), answer: false }).unwrap();
        drop(tx);
        let writer = tokio::spawn(async move { write_loop(&mut a, &mut rx, None, None).await });
        let mut frames = FramedRead::new(b, FrameCodec::<Never, Never>::new());
        let mut got = Vec::new();
        while let Some(f) = frames.next().await {
            got.push((f.unwrap(), Instant::now()));
        }
        assert_eq!(writer.await.unwrap().unwrap(), WriteEnd::Drained);
        let texts: Vec<_> = got.iter().map(|(f, _)| f.clone()).collect();
        assert_eq!(texts, ["one", "two", "three"].map(|t| Frame::Error(t.into())));
        assert!(got[0].1 >= due1, "a frame arrived before its emulated delay");
        assert!(got[1].1 >= due1);
    }

    #[tokio::test]
    async fn close_shuts_the_write_side_after_earlier_frames() {
        let (mut a, b) = tokio::io::duplex(1 << 16);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(Outgoing::Frame { due: None, bytes: error_frame("bye"), answer: false }).unwrap();
        tx.send(Outgoing::Close).unwrap();
        tx.send(Outgoing::Frame { due: None, bytes: error_frame("never"), answer: false }).unwrap();
        assert_eq!(write_loop(&mut a, &mut rx, None, None).await.unwrap(), WriteEnd::Closed);
        let frames: Vec<_> = FramedRead::new(b, FrameCodec::<Never, Never>::new()).collect().await;
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].as_ref().unwrap(), &Frame::Error("bye".into()));
    }
}
