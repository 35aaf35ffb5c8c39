//! The wire format every Ensemble connection speaks.
//!
//! ```text
//! +----------------------+-----------+---------+---------------------------+
//! | payload length (u32, | version   | kind    | payload: postcard encoding | tag (16 bytes, |
//! | big-endian)          | (u8) = 3  | (u8)    | of the kind's fields       | once sealed)   |
//! +----------------------+-----------+---------+---------------------------+----------------+
//!   4 bytes                1 byte      1 byte    `payload length` bytes
//!
//! kind  frame      payload, field after field                 sent by
//!  1    Hello      hello: Hello, nonce: [u8; 32]              whoever dialed, first
//!  2    Message    from: ProcessId, to: ProcessId, msg: M     a peer host
//!  3    Request    to: ProcessId, request: Request            a client
//!  4    Reply      from: ProcessId, reply: Reply<E>           a host, to a client
//!  5    Error      text: String                               either end, then it closes
//!  6    Shutdown   (nothing)                                  a peer host or an admin tool
//!  7    Challenge  nonce: [u8; 32], proof: Option<[u8; 32]>   the listener, after Hello
//!  8    Proof      proof: [u8; 32]                            the dialer, after Challenge
//!  9    Ping       nonce: u64                                 an admin tool
//! 10    Pong       nonce: u64, quiescent: bool,               a host, to the admin tool
//!                  in_flight: Option<String>,
//!                  failed: Option<String>
//! ```
//!
//! The handshake (Hello, Challenge, Proof) and the seal are in [`crate::auth`]: on a cluster
//! with a secret every frame after the handshake ends with a 16-byte tag, which the length
//! counts. Without a secret the Challenge carries no proof and there is no Proof frame.
//!
//! The length counts the payload (and tag), not the six header bytes. The version byte comes first so
//! that a future format can be told apart from garbage; the length is checked against
//! [`MAX_FRAME_LEN`] before a single payload byte is buffered, so a peer cannot make us allocate
//! by lying about a length. Every way a frame can be wrong has its own [`FrameError`] variant so
//! that the Error frame a bad connection gets back says exactly what was wrong.
//!
//! Addressing is by [`ProcessId`]: a connection joins two OS processes (hosts), each of which may
//! run several protocol processes, so every Message names its sender and its addressee, every
//! Request the process it is for, and every Reply the process that answered.
//!
//! Version history: 1 addressed instances (one per OS process) and had unaddressed Message,
//! Request and Reply payloads; 2 is the process addressing above; 3 added the handshake, the
//! seal, Ping and Pong; 4 has a busy host's Pong say what it still has in flight; 5 has a Pong say
//! why a process of the host failed, so that a run stops on it rather than waiting.

use bytes::{Bytes, BytesMut};
use ensemble_core::{ClientId, ProcessId, Reply, Request};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::marker::PhantomData;
use tokio_util::codec::Decoder;

/// The only version this build speaks.
pub const PROTOCOL_VERSION: u8 = 5;
/// Length prefix, version byte, kind byte.
pub const HEADER_LEN: usize = 6;
/// The largest payload accepted or produced. A protocol message is far smaller; anything larger
/// is a bug or an attack.
pub const MAX_FRAME_LEN: usize = 64 << 20;
/// The largest frame accepted before a connection has authenticated: a Hello, a Challenge and
/// a Proof are a few hundred bytes, so a stranger cannot make a host buffer more.
pub const PRE_AUTH_MAX_FRAME: usize = 4 << 10;

/// The kind byte of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    Hello = 1,
    Message = 2,
    Request = 3,
    Reply = 4,
    Error = 5,
    Shutdown = 6,
    Challenge = 7,
    Proof = 8,
    Ping = 9,
    Pong = 10,
}

impl FrameKind {
    pub const ALL: [FrameKind; 10] = [
        FrameKind::Hello,
        FrameKind::Message,
        FrameKind::Request,
        FrameKind::Reply,
        FrameKind::Error,
        FrameKind::Shutdown,
        FrameKind::Challenge,
        FrameKind::Proof,
        FrameKind::Ping,
        FrameKind::Pong,
    ];

    pub fn from_byte(b: u8) -> Option<FrameKind> {
        FrameKind::ALL.into_iter().find(|k| *k as u8 == b)
    }

    pub fn name(self) -> &'static str {
        match self {
            FrameKind::Hello => "Hello",
            FrameKind::Message => "Message",
            FrameKind::Request => "Request",
            FrameKind::Reply => "Reply",
            FrameKind::Error => "Error",
            FrameKind::Shutdown => "Shutdown",
            FrameKind::Challenge => "Challenge",
            FrameKind::Proof => "Proof",
            FrameKind::Ping => "Ping",
            FrameKind::Pong => "Pong",
        }
    }
}

impl std::fmt::Display for FrameKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An OS process of the real runtime: index into the cluster's hosts, which are the deployment's
/// OS processes in order ([`ensemble_core::Deployment::os_processes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HostId(pub u32);

impl HostId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for HostId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "h{}", self.0)
    }
}

/// The first frame on every connection: it decides what the connection may carry afterwards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Hello {
    /// Another host of the cluster, running `processes`; it will send `Message` frames from
    /// them. The receiver checks the list against its own cluster spec, so two hosts started
    /// from different specs find out at once rather than misdeliver.
    Peer { host: HostId, processes: Vec<ProcessId> },
    /// A client session at `site` (an index into the topology's sites); it will send `Request`
    /// frames for any process of the host and receive `Reply` frames. The site lets the host
    /// emulate the reply's WAN delay.
    Client { client: ClientId, site: usize },
    /// An operator's tool (or the bench watching its hosts): may send Ping and Shutdown.
    Admin,
}

/// One frame. `M` is the protocol's process-to-process message type, `E` the evidence its
/// replies carry; connections that never carry one of them use [`Never`].
#[derive(Clone, Debug, PartialEq)]
pub enum Frame<M, E> {
    /// The dialer's first frame: who it is, and its handshake nonce.
    Hello { hello: Hello, nonce: crate::auth::Nonce },
    Message { from: ProcessId, to: ProcessId, msg: M },
    Request { to: ProcessId, request: Request },
    Reply { from: ProcessId, reply: Reply<E> },
    /// Sent just before closing a connection that broke the protocol; says what was wrong.
    Error(String),
    /// Asks the receiving host to stop: from a peer host or an admin tool only.
    Shutdown,
    /// The listener's answer to a Hello: its nonce, and on a cluster with a secret its proof.
    Challenge { nonce: crate::auth::Nonce, proof: Option<crate::auth::Proof> },
    /// The dialer's proof, which completes the handshake.
    Proof(crate::auth::Proof),
    /// An admin tool asks how the host is; the host's protocol loop answers with a Pong.
    Ping(u64),
    /// The answer to `Ping(nonce)`: every process of the host is quiescent; if not, what the
    /// busy ones still have in flight (for an operator to read, bounded by the host).
    /// `failed`: the failures of the host's processes (a panic that halted one, a storage job
    /// that failed, a failure it reported), which the run cannot get past.
    Pong { nonce: u64, quiescent: bool, in_flight: Option<String>, failed: Option<String> },
}

impl<M, E> Frame<M, E> {
    pub fn kind(&self) -> FrameKind {
        match self {
            Frame::Hello { .. } => FrameKind::Hello,
            Frame::Message { .. } => FrameKind::Message,
            Frame::Request { .. } => FrameKind::Request,
            Frame::Reply { .. } => FrameKind::Reply,
            Frame::Error(_) => FrameKind::Error,
            Frame::Shutdown => FrameKind::Shutdown,
            Frame::Challenge { .. } => FrameKind::Challenge,
            Frame::Proof(_) => FrameKind::Proof,
            Frame::Ping(_) => FrameKind::Ping,
            Frame::Pong { .. } => FrameKind::Pong,
        }
    }
}

/// A type with no values: the message type of connections that never carry process messages
/// (clients, admin tools), and the evidence type of those that never carry replies (peer links).
/// A frame that would need one cannot decode there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Never {}

/// A frame as an admin tool sends it: neither messages nor replies.
pub type AdminFrame = Frame<Never, Never>;

/// Why bytes are not a frame, or a frame cannot be encoded.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("truncated frame header: the stream ended after {got} of {len} header bytes", len = HEADER_LEN)]
    TruncatedHeader { got: usize },
    #[error("truncated {kind} frame: the stream ended after {got} of {expected} payload bytes")]
    TruncatedPayload { kind: FrameKind, expected: usize, got: usize },
    #[error("unknown protocol version {0} (this build speaks version {v})", v = PROTOCOL_VERSION)]
    UnknownVersion(u8),
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("frame payload length {len} is over the limit of {max} bytes")]
    TooLong { len: usize, max: usize },
    #[error("{kind} frame failed authentication: its tag is not the sender's (forged, altered, replayed or out of order)")]
    Forged { kind: FrameKind },
    #[error("payload does not decode as {kind}: {message}")]
    BadPayload { kind: FrameKind, message: String },
    #[error("cannot encode a {kind} frame: {message}")]
    Encode { kind: FrameKind, message: String },
    #[error("i/o error while reading frames: {0}")]
    Io(#[from] std::io::Error),
}

/// Encodes a frame into one buffer ready to be written. Encoding once up front is what lets the
/// WAN emulation know the frame's size and lets writers do a single `write_all`.
pub fn encode_frame<M: Serialize, E: Serialize>(frame: &Frame<M, E>) -> Result<Bytes, FrameError> {
    let kind = frame.kind();
    let header = vec![0u8; HEADER_LEN];
    // Several fields are encoded as one tuple: postcard writes a tuple as its fields back to back.
    let encoded = match frame {
        Frame::Hello { hello, nonce } => postcard::to_extend(&(hello, nonce), header),
        Frame::Message { from, to, msg } => postcard::to_extend(&(from, to, msg), header),
        Frame::Request { to, request } => postcard::to_extend(&(to, request), header),
        Frame::Reply { from, reply } => postcard::to_extend(&(from, reply), header),
        Frame::Error(e) => postcard::to_extend(e, header),
        Frame::Shutdown => Ok(header),
        Frame::Challenge { nonce, proof } => postcard::to_extend(&(nonce, proof), header),
        Frame::Proof(p) => postcard::to_extend(p, header),
        Frame::Ping(n) => postcard::to_extend(n, header),
        Frame::Pong { nonce, quiescent, in_flight, failed } => postcard::to_extend(&(nonce, quiescent, in_flight, failed), header),
    };
    let mut buf = encoded.map_err(|e| FrameError::Encode { kind, message: e.to_string() })?;
    let len = buf.len() - HEADER_LEN;
    if len > MAX_FRAME_LEN {
        return Err(FrameError::TooLong { len, max: MAX_FRAME_LEN });
    }
    // Cannot truncate: MAX_FRAME_LEN fits in a u32.
    buf[..4].copy_from_slice(&(len as u32).to_be_bytes());
    buf[4] = PROTOCOL_VERSION;
    buf[5] = kind as u8;
    Ok(Bytes::from(buf))
}

/// Encodes an Error frame. Falls back to a fixed text if the message itself cannot be encoded,
/// because an Error frame is the last thing a broken connection gets and must not fail.
pub fn encode_error(message: &str) -> Bytes {
    encode_frame::<Never, Never>(&Frame::Error(message.to_string()))
        .or_else(|_| encode_frame::<Never, Never>(&Frame::Error("protocol error".into())))
        .unwrap_or_default()
}

/// Decodes frames from a byte stream (for `tokio_util::codec::FramedRead`).
#[derive(Debug)]
pub struct FrameCodec<M, E> {
    max_len: usize,
    /// Set once the connection has authenticated: every frame must then carry the sender's tag.
    opener: Option<crate::auth::Opener>,
    _types: PhantomData<fn() -> (M, E)>,
}

impl<M, E> Default for FrameCodec<M, E> {
    fn default() -> Self {
        FrameCodec::new()
    }
}

impl<M, E> FrameCodec<M, E> {
    pub fn new() -> Self {
        FrameCodec { max_len: MAX_FRAME_LEN, opener: None, _types: PhantomData }
    }

    /// A codec with a smaller limit, for connections that should only ever carry small frames.
    pub fn with_max_len(max_len: usize) -> Self {
        FrameCodec { max_len: max_len.min(MAX_FRAME_LEN), opener: None, _types: PhantomData }
    }

    /// The largest payload accepted from now on.
    pub fn set_max_len(&mut self, max_len: usize) {
        self.max_len = max_len.min(MAX_FRAME_LEN);
    }

    /// From the next frame on, every frame must carry a tag this opener accepts.
    pub fn open_with(&mut self, opener: crate::auth::Opener) {
        self.opener = Some(opener);
    }

    /// The opener, advanced past every frame decoded so far.
    pub fn take_opener(&mut self) -> Option<crate::auth::Opener> {
        self.opener.take()
    }

    /// Bytes after the payload: the tag, once sealed.
    fn trailer(&self) -> usize {
        if self.opener.is_some() {
            crate::auth::TAG_LEN
        } else {
            0
        }
    }
}

/// The header of a frame whose version and kind are valid and whose length is within `max_len`
/// plus the `trailer` (a tag) that must follow the payload.
fn parse_header(src: &[u8], max_len: usize, trailer: usize) -> Result<(usize, FrameKind), FrameError> {
    let len = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
    if src[4] != PROTOCOL_VERSION {
        return Err(FrameError::UnknownVersion(src[4]));
    }
    let kind = FrameKind::from_byte(src[5]).ok_or(FrameError::UnknownKind(src[5]))?;
    if len > max_len + trailer {
        return Err(FrameError::TooLong { len: len.saturating_sub(trailer), max: max_len });
    }
    if len < trailer {
        return Err(FrameError::Forged { kind });
    }
    Ok((len, kind))
}

/// Decodes one payload; trailing bytes are an error because they mean the two ends disagree
/// about a type, which would otherwise go unnoticed.
fn decode_value<T: DeserializeOwned>(kind: FrameKind, payload: &[u8]) -> Result<T, FrameError> {
    let (value, rest) =
        postcard::take_from_bytes(payload).map_err(|e| FrameError::BadPayload { kind, message: e.to_string() })?;
    if !rest.is_empty() {
        return Err(FrameError::BadPayload { kind, message: format!("{} trailing byte(s)", rest.len()) });
    }
    Ok(value)
}

fn decode_payload<M: DeserializeOwned, E: DeserializeOwned>(kind: FrameKind, payload: &[u8]) -> Result<Frame<M, E>, FrameError> {
    Ok(match kind {
        FrameKind::Hello => {
            let (hello, nonce) = decode_value(kind, payload)?;
            Frame::Hello { hello, nonce }
        }
        FrameKind::Message => {
            let (from, to, msg) = decode_value(kind, payload)?;
            Frame::Message { from, to, msg }
        }
        FrameKind::Request => {
            let (to, request) = decode_value(kind, payload)?;
            Frame::Request { to, request }
        }
        FrameKind::Reply => {
            let (from, reply) = decode_value(kind, payload)?;
            Frame::Reply { from, reply }
        }
        FrameKind::Error => Frame::Error(decode_value(kind, payload)?),
        FrameKind::Shutdown => {
            decode_value::<()>(kind, payload)?;
            Frame::Shutdown
        }
        FrameKind::Challenge => {
            let (nonce, proof) = decode_value(kind, payload)?;
            Frame::Challenge { nonce, proof }
        }
        FrameKind::Proof => Frame::Proof(decode_value(kind, payload)?),
        FrameKind::Ping => Frame::Ping(decode_value(kind, payload)?),
        FrameKind::Pong => {
            let (nonce, quiescent, in_flight, failed) = decode_value(kind, payload)?;
            Frame::Pong { nonce, quiescent, in_flight, failed }
        }
    })
}

impl<M: DeserializeOwned, E: DeserializeOwned> Decoder for FrameCodec<M, E> {
    type Item = Frame<M, E>;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame<M, E>>, FrameError> {
        if src.len() < HEADER_LEN {
            return Ok(None);
        }
        let trailer = self.trailer();
        let (len, kind) = parse_header(src, self.max_len, trailer)?;
        if src.len() < HEADER_LEN + len {
            src.reserve(HEADER_LEN + len - src.len());
            return Ok(None);
        }
        let frame = src.split_to(HEADER_LEN + len);
        let (header, rest) = frame.split_at(HEADER_LEN);
        let (payload, tag) = rest.split_at(len - trailer);
        if let Some(opener) = &mut self.opener {
            if !opener.open(header, payload, tag) {
                return Err(FrameError::Forged { kind });
            }
        }
        decode_payload(kind, payload).map(Some)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame<M, E>>, FrameError> {
        if let Some(frame) = self.decode(src)? {
            return Ok(Some(frame));
        }
        if src.is_empty() {
            return Ok(None);
        }
        if src.len() < HEADER_LEN {
            return Err(FrameError::TruncatedHeader { got: src.len() });
        }
        // `decode` accepted the header, so this cannot fail; it only recovers length and kind.
        let (expected, kind) = parse_header(src, self.max_len, self.trailer())?;
        Err(FrameError::TruncatedPayload { kind, expected, got: src.len() - HEADER_LEN })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;
    use ensemble_core::{Done, Outcome, ReplyBody, RequestError, Value};

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    enum TestMsg {
        Token { seq: u64, note: String },
        Ping,
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct TestEvidence {
        position: u64,
    }

    type TestFrame = Frame<TestMsg, TestEvidence>;

    fn request() -> Request {
        Request {
            client: ClientId(7),
            seq: 3,
            txn: "buy".into(),
            params: vec![Value::Int(-4), Value::Text("x".into()), Value::Real(1.5), Value::Null, Value::Blob(vec![1, 2])],
        }
    }

    fn every_kind() -> Vec<TestFrame> {
        vec![
            Frame::Hello { hello: Hello::Peer { host: HostId(2), processes: vec![ProcessId(4), ProcessId(5)] }, nonce: [3; 32] },
            Frame::Hello { hello: Hello::Client { client: ClientId(9), site: 4 }, nonce: [3; 32] },
            Frame::Message { from: ProcessId(4), to: ProcessId(300), msg: TestMsg::Token { seq: 11, note: "token".into() } },
            Frame::Message { from: ProcessId(0), to: ProcessId(0), msg: TestMsg::Ping },
            Frame::Request { to: ProcessId(1), request: request() },
            Frame::Reply {
                from: ProcessId(1),
                reply: Reply {
                    client: ClientId(7),
                    seq: 3,
                    body: ReplyBody::Done(Done {
                        outcome: Outcome::Committed(vec![vec![Value::Int(1)]]),
                        evidence: TestEvidence { position: 5 },
                    }),
                },
            },
            Frame::Reply { from: ProcessId(2), reply: Reply { client: ClientId(7), seq: 4, body: ReplyBody::Redirect { to: ProcessId(0) } } },
            Frame::Reply {
                from: ProcessId(2),
                reply: Reply {
                    client: ClientId(7),
                    seq: 5,
                    body: ReplyBody::Error(RequestError::UnknownTransaction { txn: "x".into() }),
                },
            },
            Frame::Error("bad things".into()),
            Frame::Shutdown,
            Frame::Challenge { nonce: [4; 32], proof: Some([5; 32]) },
            Frame::Challenge { nonce: [4; 32], proof: None },
            Frame::Proof([6; 32]),
            Frame::Ping(77),
            Frame::Pong { nonce: 77, quiescent: true, in_flight: None, failed: None },
            Frame::Pong { nonce: 78, quiescent: false, in_flight: Some("p0: 2 storage jobs".into()), failed: None },
            Frame::Pong { nonce: 79, quiescent: false, in_flight: None, failed: Some("p1: storage job WorkId(3) failed".into()) },
        ]
    }

    fn decode_all(bytes: &[u8]) -> Result<Vec<TestFrame>, FrameError> {
        let mut codec = FrameCodec::<TestMsg, TestEvidence>::new();
        let mut buf = BytesMut::from(bytes);
        let mut out = Vec::new();
        while let Some(f) = codec.decode_eof(&mut buf)? {
            out.push(f);
        }
        Ok(out)
    }

    fn header(len: u32, version: u8, kind: u8) -> BytesMut {
        let mut b = BytesMut::new();
        b.put_u32(len);
        b.put_u8(version);
        b.put_u8(kind);
        b
    }

    #[test]
    fn every_kind_round_trips() {
        for frame in every_kind() {
            let bytes = encode_frame(&frame).unwrap();
            assert_eq!(bytes[4], PROTOCOL_VERSION);
            assert_eq!(bytes[5], frame.kind() as u8);
            assert_eq!(u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize, bytes.len() - HEADER_LEN);
            assert_eq!(decode_all(&bytes).unwrap(), vec![frame]);
        }
    }

    #[test]
    fn addressing_fields_come_first_in_the_payload() {
        // A receiver could route on `from` and `to` without decoding the message: they are the
        // payload's first bytes, as varints.
        let bytes = encode_frame(&TestFrame::Message { from: ProcessId(3), to: ProcessId(300), msg: TestMsg::Ping }).unwrap();
        assert_eq!(&bytes[HEADER_LEN..], &[3, 0xac, 0x02, 1]);
    }

    #[test]
    fn a_stream_fed_one_byte_at_a_time_yields_the_same_frames() {
        let frames = every_kind();
        let mut stream = Vec::new();
        for f in &frames {
            stream.extend_from_slice(&encode_frame(f).unwrap());
        }
        let mut codec = FrameCodec::<TestMsg, TestEvidence>::new();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in stream {
            buf.put_u8(b);
            while let Some(f) = codec.decode(&mut buf).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, frames);
        assert!(buf.is_empty());
    }

    #[test]
    fn sealed_frames_decode_and_any_flipped_bit_is_caught() {
        let secret = crate::auth::Secret::from_bytes([1; 32]);
        let t = crate::auth::transcript(&Hello::Admin, &[1; 32], &[2; 32]);
        let frames = every_kind();
        let (mut seal, _) = crate::auth::session(&secret, &t, true);
        let sealed: Vec<Vec<u8>> = frames.iter().map(|f| seal.seal_to_vec(&encode_frame(f).unwrap())).collect();
        let opened = |stream: &[u8]| {
            let mut codec = FrameCodec::<TestMsg, TestEvidence>::new();
            codec.open_with(crate::auth::session(&secret, &t, false).1);
            let mut buf = BytesMut::from(stream);
            let mut out = Vec::new();
            while let Some(f) = codec.decode_eof(&mut buf)? {
                out.push(f);
            }
            Ok::<_, FrameError>(out)
        };
        assert_eq!(opened(&sealed.concat()).unwrap(), frames);
        // Every bit of the second frame, flipped in turn: its header, payload or tag.
        let first = sealed[0].len();
        let whole = sealed.concat();
        for bit in 0..sealed[1].len() * 8 {
            let mut bad = whole.clone();
            bad[first + bit / 8] ^= 1 << (bit % 8);
            let err = opened(&bad).unwrap_err();
            assert!(!matches!(err, FrameError::Io(_)), "bit {bit}: {err:?}");
        }
        // A frame dropped from the middle: the next one's sequence number no longer matches.
        let skipped = [sealed[0].clone(), sealed[2].clone()].concat();
        assert!(matches!(opened(&skipped).unwrap_err(), FrameError::Forged { .. }));
        // An unsealed frame on a sealed connection.
        let plain = encode_frame::<TestMsg, TestEvidence>(&Frame::Shutdown).unwrap();
        assert!(matches!(opened(&plain).unwrap_err(), FrameError::Forged { kind: FrameKind::Shutdown }));
    }

    #[test]
    fn truncated_header() {
        let bytes = encode_frame::<TestMsg, TestEvidence>(&Frame::Shutdown).unwrap();
        let err = decode_all(&bytes[..3]).unwrap_err();
        assert!(matches!(err, FrameError::TruncatedHeader { got: 3 }), "{err:?}");
        assert!(err.to_string().contains("3 of 6 header bytes"), "{err}");
    }

    #[test]
    fn truncated_payload() {
        let bytes = encode_frame::<TestMsg, TestEvidence>(&Frame::Request { to: ProcessId(0), request: request() }).unwrap();
        let expected = bytes.len() - HEADER_LEN;
        let err = decode_all(&bytes[..HEADER_LEN + 2]).unwrap_err();
        assert!(
            matches!(err, FrameError::TruncatedPayload { kind: FrameKind::Request, expected: e, got: 2 } if e == expected),
            "{err:?}"
        );
        assert!(err.to_string().contains("truncated Request frame"), "{err}");
    }

    #[test]
    fn unknown_version() {
        for version in [0u8, 1, 2, 3, 4, 255] {
            let mut bytes = BytesMut::from(&encode_frame::<TestMsg, TestEvidence>(&Frame::Shutdown).unwrap()[..]);
            bytes[4] = version;
            let err = decode_all(&bytes).unwrap_err();
            assert!(matches!(err, FrameError::UnknownVersion(v) if v == version), "{err:?}");
            assert!(err.to_string().contains(&format!("unknown protocol version {version} (this build speaks version 5)")), "{err}");
        }
    }

    #[test]
    fn unknown_kind() {
        for kind in [0u8, 11, 255] {
            let err = decode_all(&header(0, PROTOCOL_VERSION, kind)).unwrap_err();
            assert!(matches!(err, FrameError::UnknownKind(k) if k == kind), "{err:?}");
            assert!(err.to_string().contains(&format!("unknown frame kind {kind}")), "{err}");
        }
    }

    #[test]
    fn oversize_length_is_refused_before_buffering() {
        let mut codec = FrameCodec::<TestMsg, TestEvidence>::new();
        let mut buf = header(u32::MAX, PROTOCOL_VERSION, FrameKind::Message as u8);
        let err = codec.decode(&mut buf).unwrap_err();
        assert!(matches!(err, FrameError::TooLong { len, max: MAX_FRAME_LEN } if len == u32::MAX as usize), "{err:?}");
        assert!(buf.capacity() < 1024, "the codec reserved room for a frame it refused");
        assert!(err.to_string().contains("over the limit"), "{err}");

        // A per-connection limit applies the same way.
        let mut small = FrameCodec::<TestMsg, TestEvidence>::with_max_len(16);
        let mut buf = BytesMut::from(&encode_frame::<Never, Never>(&Frame::Error("x".repeat(100))).unwrap()[..]);
        assert!(matches!(small.decode(&mut buf), Err(FrameError::TooLong { len: 101, max: 16 })));
    }

    #[test]
    fn undecodable_payload_names_the_kind() {
        // A Hello whose variant index does not exist.
        let mut bytes = header(1, PROTOCOL_VERSION, FrameKind::Hello as u8);
        bytes.put_u8(0x7f);
        let err = decode_all(&bytes).unwrap_err();
        assert!(matches!(&err, FrameError::BadPayload { kind: FrameKind::Hello, .. }), "{err:?}");
        assert!(err.to_string().starts_with("payload does not decode as Hello: "), "{err}");

        // A Request cut short inside its payload (the length agrees, the contents do not).
        let full = encode_frame::<TestMsg, TestEvidence>(&Frame::Request { to: ProcessId(0), request: request() }).unwrap();
        let payload = &full[HEADER_LEN..HEADER_LEN + 4];
        let mut bytes = header(payload.len() as u32, PROTOCOL_VERSION, FrameKind::Request as u8);
        bytes.put_slice(payload);
        let err = decode_all(&bytes).unwrap_err();
        assert!(matches!(&err, FrameError::BadPayload { kind: FrameKind::Request, .. }), "{err:?}");

        // A Message with its addressing but no message.
        let mut bytes = header(2, PROTOCOL_VERSION, FrameKind::Message as u8);
        bytes.put_slice(&[0, 1]);
        let err = decode_all(&bytes).unwrap_err();
        assert!(matches!(&err, FrameError::BadPayload { kind: FrameKind::Message, .. }), "{err:?}");

        // Bytes left over after the value.
        let mut bytes = header(1, PROTOCOL_VERSION, FrameKind::Shutdown as u8);
        bytes.put_u8(0);
        let err = decode_all(&bytes).unwrap_err();
        assert!(err.to_string().contains("does not decode as Shutdown: 1 trailing byte(s)"), "{err}");

        // A Message frame cannot decode on a connection that carries none, nor a Reply with
        // evidence on one that carries no replies.
        let bytes = encode_frame(&TestFrame::Message { from: ProcessId(0), to: ProcessId(1), msg: TestMsg::Ping }).unwrap();
        let err = FrameCodec::<Never, TestEvidence>::new().decode(&mut BytesMut::from(&bytes[..])).unwrap_err();
        assert!(matches!(&err, FrameError::BadPayload { kind: FrameKind::Message, .. }), "{err:?}");
        let bytes = encode_frame(&every_kind()[5]).unwrap();
        let err = FrameCodec::<TestMsg, Never>::new().decode(&mut BytesMut::from(&bytes[..])).unwrap_err();
        assert!(matches!(&err, FrameError::BadPayload { kind: FrameKind::Reply, .. }), "{err:?}");
    }

    #[test]
    fn error_frames_always_encode() {
        let bytes = encode_error("unknown frame kind 9");
        assert_eq!(decode_all(&bytes).unwrap(), vec![Frame::Error("unknown frame kind 9".into())]);
    }
}
