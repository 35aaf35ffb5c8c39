//! The wire format every Ensemble connection speaks.
//!
//! ```text
//! +----------------------+-----------+---------+---------------------------+
//! | payload length (u32, | version   | kind    | payload: postcard encoding |
//! | big-endian)          | (u8) = 1  | (u8)    | of the kind's value        |
//! +----------------------+-----------+---------+---------------------------+
//!   4 bytes                1 byte      1 byte    `payload length` bytes
//! ```
//!
//! The length counts the payload only, not the six header bytes. The version byte comes first so
//! that a future format can be told apart from garbage; the length is checked against
//! [`MAX_FRAME_LEN`] before a single payload byte is buffered, so a peer cannot make us allocate
//! by lying about a length. Every way a frame can be wrong has its own [`FrameError`] variant so
//! that the Error frame a bad connection gets back says exactly what was wrong.

use bytes::{Buf, Bytes, BytesMut};
use ensemble_core::{ClientId, InstanceId, Reply, Request};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::marker::PhantomData;
use tokio_util::codec::Decoder;

/// The only version this build speaks.
pub const PROTOCOL_VERSION: u8 = 1;
/// Length prefix, version byte, kind byte.
pub const HEADER_LEN: usize = 6;
/// The largest payload accepted or produced. A state update batch is far smaller; anything
/// larger is a bug or an attack.
pub const MAX_FRAME_LEN: usize = 64 << 20;

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
}

impl FrameKind {
    pub const ALL: [FrameKind; 6] =
        [FrameKind::Hello, FrameKind::Message, FrameKind::Request, FrameKind::Reply, FrameKind::Error, FrameKind::Shutdown];

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
        }
    }
}

impl std::fmt::Display for FrameKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The first frame on every connection: it decides what the connection may carry afterwards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Hello {
    /// Another instance; it will send `Message` frames.
    Peer { instance: InstanceId },
    /// A client session at `site` (an index into the topology's sites); it will send `Request`
    /// frames and receive `Reply` frames. The site lets the node emulate the reply's WAN delay.
    Client { client: ClientId, site: usize },
}

/// One frame. `M` is the protocol's node-to-node message type.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame<M> {
    Hello(Hello),
    Message(M),
    Request(Request),
    Reply(Reply),
    /// Sent just before closing a connection that broke the protocol; says what was wrong.
    Error(String),
    /// Administrative: asks the receiving node to stop.
    Shutdown,
}

impl<M> Frame<M> {
    pub fn kind(&self) -> FrameKind {
        match self {
            Frame::Hello(_) => FrameKind::Hello,
            Frame::Message(_) => FrameKind::Message,
            Frame::Request(_) => FrameKind::Request,
            Frame::Reply(_) => FrameKind::Reply,
            Frame::Error(_) => FrameKind::Error,
            Frame::Shutdown => FrameKind::Shutdown,
        }
    }
}

/// The message type of connections that never carry node-to-node messages (clients, admin
/// tools). Having no values, a `Message` frame sent to them cannot decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NoMsg {}

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
    #[error("payload does not decode as {kind}: {message}")]
    BadPayload { kind: FrameKind, message: String },
    #[error("cannot encode a {kind} frame: {message}")]
    Encode { kind: FrameKind, message: String },
    #[error("i/o error while reading frames: {0}")]
    Io(#[from] std::io::Error),
}

/// Encodes a frame into one buffer ready to be written. Encoding once up front is what lets the
/// WAN emulation know the frame's size and lets writers do a single `write_all`.
pub fn encode_frame<M: Serialize>(frame: &Frame<M>) -> Result<Bytes, FrameError> {
    let kind = frame.kind();
    let header = vec![0u8; HEADER_LEN];
    let encoded = match frame {
        Frame::Hello(h) => postcard::to_extend(h, header),
        Frame::Message(m) => postcard::to_extend(m, header),
        Frame::Request(r) => postcard::to_extend(r, header),
        Frame::Reply(r) => postcard::to_extend(r, header),
        Frame::Error(e) => postcard::to_extend(e, header),
        Frame::Shutdown => Ok(header),
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
    encode_frame::<NoMsg>(&Frame::Error(message.to_string()))
        .or_else(|_| encode_frame::<NoMsg>(&Frame::Error("protocol error".into())))
        .unwrap_or_default()
}

/// Decodes frames from a byte stream (for `tokio_util::codec::FramedRead`).
#[derive(Debug)]
pub struct FrameCodec<M> {
    max_len: usize,
    _msg: PhantomData<fn() -> M>,
}

impl<M> Default for FrameCodec<M> {
    fn default() -> Self {
        FrameCodec::new()
    }
}

impl<M> FrameCodec<M> {
    pub fn new() -> Self {
        FrameCodec { max_len: MAX_FRAME_LEN, _msg: PhantomData }
    }

    /// A codec with a smaller limit, for connections that should only ever carry small frames.
    pub fn with_max_len(max_len: usize) -> Self {
        FrameCodec { max_len: max_len.min(MAX_FRAME_LEN), _msg: PhantomData }
    }
}

/// The header of a frame whose version and kind are valid and whose length is within `max_len`.
fn parse_header(src: &[u8], max_len: usize) -> Result<(usize, FrameKind), FrameError> {
    let len = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
    if src[4] != PROTOCOL_VERSION {
        return Err(FrameError::UnknownVersion(src[4]));
    }
    let kind = FrameKind::from_byte(src[5]).ok_or(FrameError::UnknownKind(src[5]))?;
    if len > max_len {
        return Err(FrameError::TooLong { len, max: max_len });
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

fn decode_payload<M: DeserializeOwned>(kind: FrameKind, payload: &[u8]) -> Result<Frame<M>, FrameError> {
    Ok(match kind {
        FrameKind::Hello => Frame::Hello(decode_value(kind, payload)?),
        FrameKind::Message => Frame::Message(decode_value(kind, payload)?),
        FrameKind::Request => Frame::Request(decode_value(kind, payload)?),
        FrameKind::Reply => Frame::Reply(decode_value(kind, payload)?),
        FrameKind::Error => Frame::Error(decode_value(kind, payload)?),
        FrameKind::Shutdown => {
            decode_value::<()>(kind, payload)?;
            Frame::Shutdown
        }
    })
}

impl<M: DeserializeOwned> Decoder for FrameCodec<M> {
    type Item = Frame<M>;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame<M>>, FrameError> {
        if src.len() < HEADER_LEN {
            return Ok(None);
        }
        let (len, kind) = parse_header(src, self.max_len)?;
        if src.len() < HEADER_LEN + len {
            src.reserve(HEADER_LEN + len - src.len());
            return Ok(None);
        }
        src.advance(HEADER_LEN);
        let payload = src.split_to(len);
        decode_payload(kind, &payload).map(Some)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame<M>>, FrameError> {
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
        let (expected, kind) = parse_header(src, self.max_len)?;
        Err(FrameError::TruncatedPayload { kind, expected, got: src.len() - HEADER_LEN })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;
    use ensemble_core::{OpClass, Outcome, Position, ReplyBody, Value};

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    enum TestMsg {
        Token { seq: u64, note: String },
        Ping,
    }

    fn request() -> Request {
        Request {
            client: ClientId(7),
            seq: 3,
            txn: "buy".into(),
            params: vec![Value::Int(-4), Value::Text("x".into()), Value::Real(1.5), Value::Null, Value::Blob(vec![1, 2])],
        }
    }

    fn every_kind() -> Vec<Frame<TestMsg>> {
        vec![
            Frame::Hello(Hello::Peer { instance: InstanceId(2) }),
            Frame::Hello(Hello::Client { client: ClientId(9), site: 4 }),
            Frame::Message(TestMsg::Token { seq: 11, note: "token".into() }),
            Frame::Message(TestMsg::Ping),
            Frame::Request(request()),
            Frame::Reply(Reply {
                client: ClientId(7),
                seq: 3,
                body: ReplyBody::Done {
                    outcome: Outcome::Committed(vec![vec![Value::Int(1)]]),
                    class: OpClass::Global,
                    instance: InstanceId(1),
                    position: Position::Global { seq: 5 },
                },
            }),
            Frame::Reply(Reply { client: ClientId(7), seq: 4, body: ReplyBody::Map { instance: InstanceId(0) } }),
            Frame::Error("bad things".into()),
            Frame::Shutdown,
        ]
    }

    fn decode_all(bytes: &[u8]) -> Result<Vec<Frame<TestMsg>>, FrameError> {
        let mut codec = FrameCodec::<TestMsg>::new();
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
    fn a_stream_fed_one_byte_at_a_time_yields_the_same_frames() {
        let frames = every_kind();
        let mut stream = Vec::new();
        for f in &frames {
            stream.extend_from_slice(&encode_frame(f).unwrap());
        }
        let mut codec = FrameCodec::<TestMsg>::new();
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
    fn truncated_header() {
        let bytes = encode_frame::<TestMsg>(&Frame::Shutdown).unwrap();
        let err = decode_all(&bytes[..3]).unwrap_err();
        assert!(matches!(err, FrameError::TruncatedHeader { got: 3 }), "{err:?}");
        assert!(err.to_string().contains("3 of 6 header bytes"), "{err}");
    }

    #[test]
    fn truncated_payload() {
        let bytes = encode_frame::<TestMsg>(&Frame::Request(request())).unwrap();
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
        let mut bytes = BytesMut::from(&encode_frame::<TestMsg>(&Frame::Shutdown).unwrap()[..]);
        bytes[4] = 2;
        let err = decode_all(&bytes).unwrap_err();
        assert!(matches!(err, FrameError::UnknownVersion(2)), "{err:?}");
        assert!(err.to_string().contains("unknown protocol version 2"), "{err}");
    }

    #[test]
    fn unknown_kind() {
        for kind in [0u8, 7, 255] {
            let err = decode_all(&header(0, PROTOCOL_VERSION, kind)).unwrap_err();
            assert!(matches!(err, FrameError::UnknownKind(k) if k == kind), "{err:?}");
            assert!(err.to_string().contains(&format!("unknown frame kind {kind}")), "{err}");
        }
    }

    #[test]
    fn oversize_length_is_refused_before_buffering() {
        let mut codec = FrameCodec::<TestMsg>::new();
        let mut buf = header(u32::MAX, PROTOCOL_VERSION, FrameKind::Message as u8);
        let err = codec.decode(&mut buf).unwrap_err();
        assert!(matches!(err, FrameError::TooLong { len, max: MAX_FRAME_LEN } if len == u32::MAX as usize), "{err:?}");
        assert!(buf.capacity() < 1024, "the codec reserved room for a frame it refused");
        assert!(err.to_string().contains("over the limit"), "{err}");

        // A per-connection limit applies the same way.
        let mut small = FrameCodec::<TestMsg>::with_max_len(16);
        let mut buf = BytesMut::from(&encode_frame::<TestMsg>(&Frame::Error("x".repeat(100))).unwrap()[..]);
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
        let full = encode_frame::<TestMsg>(&Frame::Request(request())).unwrap();
        let payload = &full[HEADER_LEN..HEADER_LEN + 4];
        let mut bytes = header(payload.len() as u32, PROTOCOL_VERSION, FrameKind::Request as u8);
        bytes.put_slice(payload);
        let err = decode_all(&bytes).unwrap_err();
        assert!(matches!(&err, FrameError::BadPayload { kind: FrameKind::Request, .. }), "{err:?}");

        // Bytes left over after the value.
        let mut bytes = header(1, PROTOCOL_VERSION, FrameKind::Shutdown as u8);
        bytes.put_u8(0);
        let err = decode_all(&bytes).unwrap_err();
        assert!(err.to_string().contains("does not decode as Shutdown: 1 trailing byte(s)"), "{err}");

        // A Message frame cannot decode on a connection that carries none.
        let bytes = encode_frame(&Frame::Message(TestMsg::Ping)).unwrap();
        let err = FrameCodec::<NoMsg>::new().decode(&mut BytesMut::from(&bytes[..])).unwrap_err();
        assert!(matches!(&err, FrameError::BadPayload { kind: FrameKind::Message, .. }), "{err:?}");
    }

    #[test]
    fn error_frames_always_encode() {
        let bytes = encode_error("unknown frame kind 9");
        assert_eq!(decode_all(&bytes).unwrap(), vec![Frame::Error("unknown frame kind 9".into())]);
    }
}
