//! A blocking connection to a host, for operators' tools and tests: dial, do the handshake with
//! a Hello, then send and receive frames one at a time.

use crate::auth::{self, Opener, Sealer, Secret};
use crate::error::{io_context, NetError};
use crate::frame::{encode_frame, Frame, FrameCodec, Hello, Never, MAX_FRAME_LEN, PRE_AUTH_MAX_FRAME};
use bytes::BytesMut;
use serde::{de::DeserializeOwned, Serialize};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use tokio_util::codec::Decoder;

/// One connection, authenticated on a cluster with a secret.
pub struct BlockingConn {
    stream: TcpStream,
    peer: SocketAddr,
    sealer: Option<Sealer>,
    opener: Option<Opener>,
    max_len: usize,
    buf: BytesMut,
    timeout: Duration,
}

impl BlockingConn {
    /// Dials `addr`, says `hello` and completes the handshake within `timeout`, proving with
    /// `key` (the one `hello`'s role needs: the operator's for a client or an admin, the pair key
    /// for a peer; `None` on the plain wire); every later read also gives up after `timeout`.
    pub fn connect(addr: SocketAddr, key: Option<&Secret>, hello: Hello, timeout: Duration) -> Result<BlockingConn, NetError> {
        let stream = TcpStream::connect_timeout(&addr, timeout).map_err(|source| NetError::Connect { addr, attempts: 1, source })?;
        stream.set_nodelay(true).map_err(io_context("set_nodelay"))?;
        stream.set_read_timeout(Some(timeout)).map_err(io_context("set a read timeout"))?;
        stream.set_write_timeout(Some(timeout)).map_err(io_context("set a write timeout"))?;
        let mut conn = BlockingConn { stream, peer: addr, sealer: None, opener: None, max_len: PRE_AUTH_MAX_FRAME, buf: BytesMut::new(), timeout };
        let nonce_d = auth::fresh_nonce();
        conn.send(&Frame::<Never, Never>::Hello { hello: hello.clone(), nonce: nonce_d })?;
        let refused = |why: String| NetError::Handshake { addr, why };
        let (nonce_l, proof_l) = match conn.recv::<Never, Never>()? {
            Frame::Challenge { nonce, proof } => (nonce, proof),
            Frame::Error(text) => return Err(refused(format!("the host refused the connection: {text}"))),
            other => return Err(refused(format!("the host answered Hello with a {} frame, not a Challenge", other.kind()))),
        };
        let t = auth::transcript(&hello, &nonce_d, &nonce_l);
        match (key, proof_l) {
            (None, None) => {}
            (Some(_), None) => return Err(refused("the host does not authenticate (it has no cluster secret) but this side has one".into())),
            (None, Some(_)) => return Err(refused("the host requires the cluster secret, which this side was not given".into())),
            (Some(k), Some(p)) => {
                if !auth::proof_matches(&auth::listener_proof(k, &t), &p) {
                    return Err(refused("the host failed to prove it knows the cluster secret".into()));
                }
                conn.send(&Frame::<Never, Never>::Proof(auth::dialer_proof(k, &t)))?;
                let (sealer, opener) = auth::session(k, &t, true);
                conn.sealer = Some(sealer);
                conn.opener = Some(opener);
            }
        }
        conn.max_len = MAX_FRAME_LEN;
        Ok(conn)
    }

    /// Sends one frame (sealed with the session's key on an authenticated connection).
    pub fn send<M: Serialize, E: Serialize>(&mut self, frame: &Frame<M, E>) -> Result<(), NetError> {
        let bytes = encode_frame(frame)?;
        let bytes = match &mut self.sealer {
            Some(s) => s.seal_to_vec(&bytes),
            None => bytes.to_vec(),
        };
        self.send_raw(&bytes)
    }

    /// Writes bytes as they are, unsealed: for tests of what a host does with garbage.
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), NetError> {
        let peer = self.peer;
        self.stream.write_all(bytes).and_then(|()| self.stream.flush()).map_err(io_context(format!("write to {peer}")))
    }

    /// Reads the next frame. An Error frame is returned as a frame, not as an error.
    pub fn recv<M: DeserializeOwned, E: DeserializeOwned>(&mut self) -> Result<Frame<M, E>, NetError> {
        let mut codec = FrameCodec::<M, E>::with_max_len(self.max_len);
        if let Some(o) = &self.opener {
            codec.open_with(o.clone());
        }
        let mut chunk = [0u8; 8192];
        let frame = loop {
            if let Some(frame) = codec.decode(&mut self.buf)? {
                break frame;
            }
            let n = match self.stream.read(&mut chunk) {
                Ok(n) => n,
                // How a read timeout shows on Linux (WouldBlock) and elsewhere (TimedOut).
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    return Err(NetError::NoAnswer { addr: self.peer, within: self.timeout });
                }
                Err(e) => return Err(io_context(format!("read from {}", self.peer))(e)),
            };
            if n == 0 {
                match codec.decode_eof(&mut self.buf)? {
                    Some(frame) => break frame,
                    None => return Err(NetError::Closed(self.peer)),
                }
            }
            self.buf.extend_from_slice(&chunk[..n]);
        };
        // The codec advanced its copy of the opener past this frame.
        if self.opener.is_some() {
            self.opener = codec.take_opener();
        }
        Ok(frame)
    }

    /// Closes the write side, so the host sees the end of the stream.
    pub fn finish(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
    }
}
