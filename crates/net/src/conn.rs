//! Pieces every connection uses, on hosts and clients alike: a writer task fed by a channel (so
//! synchronous protocol code can send without awaiting), dialing with bounded retry, and the
//! lingering close that makes an Error frame reach a misbehaving peer.

use crate::error::NetError;
use crate::wan::Pacer;
use bytes::Bytes;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// What a writer task is asked to do, in order.
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// Write these encoded frame bytes, not before `due` (the WAN emulation's send time).
    Frame { due: Option<Instant>, bytes: Bytes },
    /// Flush, close the write side and stop.
    Close,
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

/// Writes queued frames in order, each no earlier than its due time. Frames that are due are
/// written back to back and flushed once, so a burst costs one syscall, not one per frame.
pub(crate) async fn write_loop<W: AsyncWrite + Unpin>(w: &mut W, rx: &mut OutRx) -> std::io::Result<WriteEnd> {
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
                Outgoing::Frame { due, bytes } => {
                    if let Some(due) = due {
                        if due > Instant::now() {
                            w.flush().await?;
                            tokio::time::sleep_until(due.into()).await;
                        }
                    }
                    w.write_all(&bytes).await?;
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
        self.tx.send(Outgoing::Frame { due, bytes }).is_ok()
    }
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
        tx.send(Outgoing::Frame { due: Some(due1), bytes: error_frame("one") }).unwrap();
        tx.send(Outgoing::Frame { due: Some(due2), bytes: error_frame("two") }).unwrap();
        tx.send(Outgoing::Frame { due: None, bytes: error_frame("three") }).unwrap();
        drop(tx);
        let writer = tokio::spawn(async move { write_loop(&mut a, &mut rx).await });
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
        tx.send(Outgoing::Frame { due: None, bytes: error_frame("bye") }).unwrap();
        tx.send(Outgoing::Close).unwrap();
        tx.send(Outgoing::Frame { due: None, bytes: error_frame("never") }).unwrap();
        assert_eq!(write_loop(&mut a, &mut rx).await.unwrap(), WriteEnd::Closed);
        let frames: Vec<_> = FramedRead::new(b, FrameCodec::<Never, Never>::new()).collect().await;
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].as_ref().unwrap(), &Frame::Error("bye".into()));
    }
}
