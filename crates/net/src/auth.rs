//! Who may talk to a host: the cluster secret and the handshake that proves knowledge of it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Bytes in a cluster secret.
pub const SECRET_LEN: usize = 32;

/// The secret every member of a cluster (hosts, the bench's clients, an operator's tool) shares.
/// Written as 64 hex digits in a cluster file; never printed (`Debug` shows a fingerprint only).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; SECRET_LEN]);

impl Secret {
    pub fn from_bytes(bytes: [u8; SECRET_LEN]) -> Secret {
        Secret(bytes)
    }

    /// A fresh secret from the operating system's randomness (never from a seeded generator: a
    /// run's seed is printed in its results).
    pub fn generate() -> Secret {
        let mut bytes = [0u8; SECRET_LEN];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
        Secret(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; SECRET_LEN] {
        &self.0
    }

    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn from_hex(text: &str) -> Result<Secret, String> {
        let text = text.trim();
        if text.len() != 2 * SECRET_LEN || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("a cluster secret is {} hex digits, got {} character(s)", 2 * SECRET_LEN, text.len()));
        }
        let mut bytes = [0u8; SECRET_LEN];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
        }
        Ok(Secret(bytes))
    }
}

/// The keys one party of a cluster holds, all derived from the cluster's master [`Secret`]:
/// - `pair(i, j)` for every two hosts `i` and `j`, which only those two hold: a peer's proof
///   names *which* host it is, not only that it belongs, since no third host can make it;
/// - the operator's key, which the operator (the bench, an admin tool) and every host hold:
///   clients and admin tools prove with it.
///
/// A host's ring (`KeyRing::for_host`) holds its pair keys and the operator's key, never the
/// master: a host that leaks its ring lets an attacker pose as a client, an operator or that one
/// host, not as any other host. `bench --real` keeps the master in memory and writes each node
/// only its own ring.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRing {
    /// The host this ring belongs to.
    pub host: crate::frame::HostId,
    pub operator: Secret,
    /// `pair(host, j)` for every other host `j`, by `j`.
    pub peers: std::collections::BTreeMap<u32, Secret>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyRing {{ host: {}, {} peer key(s) }}", self.host, self.peers.len())
    }
}

impl KeyRing {
    /// Host `host`'s ring in a cluster of `hosts` hosts.
    pub fn for_host(master: &Secret, host: crate::frame::HostId, hosts: usize) -> KeyRing {
        let peers = (0..hosts as u32).filter(|j| *j != host.0).map(|j| (j, pair_key(master, host.0, j))).collect();
        KeyRing { host, operator: operator_key(master), peers }
    }

    /// The key a connection claiming `hello` must prove with, from this host's side.
    pub(crate) fn key_for(&self, hello: &crate::frame::Hello) -> Option<&Secret> {
        match hello {
            crate::frame::Hello::Peer { host, .. } => self.peers.get(&host.0),
            crate::frame::Hello::Client { .. } | crate::frame::Hello::Admin => Some(&self.operator),
        }
    }

    /// The key for this host's link to `peer`.
    pub(crate) fn pair(&self, peer: crate::frame::HostId) -> Option<&Secret> {
        self.peers.get(&peer.0)
    }
}

fn derived(master: &Secret, label: &[u8]) -> Secret {
    Secret(mac(master.as_bytes(), b"ensemble key", label))
}

/// The key only hosts `a` and `b` hold (symmetric in the two).
pub fn pair_key(master: &Secret, a: u32, b: u32) -> Secret {
    let (lo, hi) = (a.min(b), a.max(b));
    derived(master, &[b"pair".as_slice(), &lo.to_be_bytes(), &hi.to_be_bytes()].concat())
}

/// The key of clients and operators.
pub fn operator_key(master: &Secret) -> Secret {
    derived(master, b"operator")
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        let text = String::deserialize(d)?;
        Secret::from_hex(&text).map_err(serde::de::Error::custom)
    }
}

// ---------------------------------------------------------------------------------------------
// The handshake and the per-frame seal. Pure functions of their inputs: the i/o around them is
// in `conn` (async) and `admin` (blocking).
//
//   dialer                                   listener
//     Hello { hello, nonce_d }        ──▶      (at most PRE_AUTH_MAX_FRAME bytes)
//                                     ◀──      Challenge { nonce_l, proof_l }
//     Proof(proof_d)                  ──▶
//     sealed frames                   ◀─▶      sealed frames
//
//   transcript = postcard(hello) ‖ nonce_d ‖ nonce_l
//   proof_l    = HMAC-SHA256(secret, "ensemble listener" ‖ transcript)
//   proof_d    = HMAC-SHA256(secret, "ensemble dialer"   ‖ transcript)
//   key_{d→l}  = HMAC-SHA256(secret, "ensemble dialer to listener" ‖ transcript), key_{l→d} alike
//   tag        = HMAC-SHA256(key_dir, seq ‖ header ‖ payload)[..16], seq counting from 0
//
// Each side's fresh nonce makes the other's proof unusable on any other connection; the labels
// keep a proof from being reflected back as the other role's. The Hello is in the transcript, so
// the role a connection proved is the role it claimed. Sealing every later frame with a key of
// the session, and a sequence number in each tag, means a frame cannot be injected, altered,
// replayed, reordered or dropped from the middle of a stream without the receiver noticing.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// A handshake nonce, fresh for every connection.
pub type Nonce = [u8; 32];
/// A handshake proof: an HMAC-SHA256 over the transcript.
pub type Proof = [u8; 32];
/// Bytes of the tag each sealed frame ends with (HMAC-SHA256 truncated to 128 bits).
pub const TAG_LEN: usize = 16;

pub(crate) fn fresh_nonce() -> Nonce {
    let mut n = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut n);
    n
}

fn keyed(key: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length; this cannot fail.
    <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC accepts any key length")
}

fn mac(key: &[u8], label: &[u8], transcript: &[u8]) -> [u8; 32] {
    let mut m = keyed(key);
    m.update(label);
    m.update(transcript);
    m.finalize().into_bytes().into()
}

/// What both proofs and both session keys are computed over.
pub(crate) fn transcript(hello: &crate::frame::Hello, nonce_d: &Nonce, nonce_l: &Nonce) -> Vec<u8> {
    // postcard is deterministic, so both ends encode the Hello they agree on to the same bytes.
    let mut t = postcard::to_stdvec(hello).unwrap_or_default();
    t.extend_from_slice(nonce_d);
    t.extend_from_slice(nonce_l);
    t
}

pub(crate) fn listener_proof(secret: &Secret, transcript: &[u8]) -> Proof {
    mac(secret.as_bytes(), b"ensemble listener", transcript)
}

pub(crate) fn dialer_proof(secret: &Secret, transcript: &[u8]) -> Proof {
    mac(secret.as_bytes(), b"ensemble dialer", transcript)
}

/// Compares a received proof with the expected one in constant time.
pub(crate) fn proof_matches(expected: &Proof, got: &Proof) -> bool {
    let mut diff = 0u8;
    for (a, b) in expected.iter().zip(got) {
        diff |= a ^ b;
    }
    diff == 0
}

/// The two directions' keys of a session, as `(seal, open)` for the side given.
pub(crate) fn session(secret: &Secret, transcript: &[u8], dialer: bool) -> (Sealer, Opener) {
    let d2l = mac(secret.as_bytes(), b"ensemble dialer to listener", transcript);
    let l2d = mac(secret.as_bytes(), b"ensemble listener to dialer", transcript);
    let (seal, open) = if dialer { (d2l, l2d) } else { (l2d, d2l) };
    (Sealer { mac: keyed(&seal), seq: 0 }, Opener { mac: keyed(&open), seq: 0 })
}

/// Both ends of a session with fixed nonces, the dialer's sealer and the listener's opener: for
/// benchmarks and tests of the seal outside a connection.
pub fn test_session(secret: &Secret, hello: &crate::frame::Hello) -> (Sealer, Opener) {
    let t = transcript(hello, &[1; 32], &[2; 32]);
    (session(secret, &t, true).0, session(secret, &t, false).1)
}

/// Seals the frames one side sends, in order.
pub struct Sealer {
    mac: HmacSha256,
    seq: u64,
}

impl Sealer {
    /// For an encoded frame (header and payload), the header to send instead (its length
    /// grown by the tag) and the tag to send after the payload.
    pub fn seal(&mut self, frame: &[u8]) -> ([u8; crate::frame::HEADER_LEN], [u8; TAG_LEN]) {
        let mut header = [0u8; crate::frame::HEADER_LEN];
        header.copy_from_slice(&frame[..crate::frame::HEADER_LEN]);
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) + TAG_LEN as u32;
        header[..4].copy_from_slice(&len.to_be_bytes());
        let mut m = self.mac.clone();
        m.update(&self.seq.to_be_bytes());
        m.update(&header);
        m.update(&frame[crate::frame::HEADER_LEN..]);
        self.seq += 1;
        let full = m.finalize().into_bytes();
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&full[..TAG_LEN]);
        (header, tag)
    }

    /// The frame with its new header and its tag, in one buffer.
    pub fn seal_to_vec(&mut self, frame: &[u8]) -> Vec<u8> {
        let (header, tag) = self.seal(frame);
        let mut out = Vec::with_capacity(frame.len() + TAG_LEN);
        out.extend_from_slice(&header);
        out.extend_from_slice(&frame[crate::frame::HEADER_LEN..]);
        out.extend_from_slice(&tag);
        out
    }
}

/// Checks the frames the other side sends, in order.
#[derive(Clone)]
pub struct Opener {
    mac: HmacSha256,
    seq: u64,
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Opener {{ seq: {} }}", self.seq)
    }
}

impl Opener {
    /// Whether `tag` is the one the sender's next frame must end with; the sequence advances
    /// either way (a connection whose frame fails is closed).
    pub fn open(&mut self, header: &[u8], payload: &[u8], tag: &[u8]) -> bool {
        let mut m = self.mac.clone();
        m.update(&self.seq.to_be_bytes());
        m.update(header);
        m.update(payload);
        self.seq += 1;
        m.verify_truncated_left(tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Hello;

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(&[crate::frame::PROTOCOL_VERSION, 5]);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn secrets_round_trip_through_hex_and_refuse_garbage() {
        let s = Secret::generate();
        assert_eq!(Secret::from_hex(&s.to_hex()).unwrap(), s);
        assert_ne!(Secret::generate(), s, "two generated secrets are equal");
        assert!(Secret::from_hex("abc").unwrap_err().contains("64 hex digits"));
        assert!(Secret::from_hex(&"g".repeat(64)).is_err());
        assert_eq!(format!("{s:?}"), "Secret(..)");
    }

    #[test]
    fn a_hosts_ring_holds_its_pair_keys_and_the_operators_only() {
        let m = Secret::from_bytes([4; 32]);
        let h = |i| crate::frame::HostId(i);
        let r1 = KeyRing::for_host(&m, h(1), 3);
        let r2 = KeyRing::for_host(&m, h(2), 3);
        assert_eq!(r1.pair(h(2)), r2.pair(h(1)), "both ends of a pair hold the same key");
        assert_eq!(r1.pair(h(1)), None);
        assert_ne!(r1.pair(h(0)), r2.pair(h(0)), "host 2 cannot pose as host 1 to host 0");
        assert_eq!(r1.operator, r2.operator);
        for k in r1.peers.values().chain([&r1.operator]) {
            assert_ne!(k, &m, "a ring holds the master");
        }
        let peer = |host| crate::frame::Hello::Peer { host: h(host), processes: vec![] };
        assert_eq!(r1.key_for(&peer(0)), Some(&pair_key(&m, 0, 1)));
        assert_eq!(r1.key_for(&peer(7)), None);
        assert_eq!(r1.key_for(&crate::frame::Hello::Admin), Some(&operator_key(&m)));
    }

    #[test]
    fn proofs_depend_on_secret_role_hello_and_both_nonces() {
        let k = Secret::from_bytes([7; 32]);
        let hello = Hello::Admin;
        let t = transcript(&hello, &[1; 32], &[2; 32]);
        let p = listener_proof(&k, &t);
        assert!(proof_matches(&p, &listener_proof(&k, &t)));
        assert!(!proof_matches(&p, &dialer_proof(&k, &t)), "a listener's proof reflects as a dialer's");
        assert!(!proof_matches(&p, &listener_proof(&Secret::from_bytes([8; 32]), &t)));
        for other in [
            transcript(&hello, &[9; 32], &[2; 32]),
            transcript(&hello, &[1; 32], &[9; 32]),
            transcript(&Hello::Client { client: ensemble_core::ClientId(1), site: 0 }, &[1; 32], &[2; 32]),
        ] {
            assert!(!proof_matches(&p, &listener_proof(&k, &other)));
        }
    }

    #[test]
    fn sealed_frames_open_in_order_only() {
        let k = Secret::from_bytes([3; 32]);
        let t = transcript(&Hello::Admin, &[1; 32], &[2; 32]);
        let (mut seal, _) = session(&k, &t, true);
        let (_, open) = session(&k, &t, false);
        let a = seal.seal_to_vec(&frame(b"first"));
        let b = seal.seal_to_vec(&frame(b"second"));
        let split = |f: &[u8]| (f[..6].to_vec(), f[6..f.len() - TAG_LEN].to_vec(), f[f.len() - TAG_LEN..].to_vec());
        let (ha, pa, ta) = split(&a);
        let (hb, pb, tb) = split(&b);
        let mut in_order = open.clone();
        assert!(in_order.open(&ha, &pa, &ta));
        assert!(in_order.open(&hb, &pb, &tb));
        // Replayed, reordered, altered, or sealed for the other direction: refused.
        let mut replay = open.clone();
        assert!(replay.open(&ha, &pa, &ta));
        assert!(!replay.open(&ha, &pa, &ta));
        assert!(!open.clone().open(&hb, &pb, &tb));
        assert!(!open.clone().open(&ha, b"fir5t", &ta));
        let (_, mut wrong_way) = session(&k, &t, true);
        assert!(!wrong_way.open(&ha, &pa, &ta));
    }
}
