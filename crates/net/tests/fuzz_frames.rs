//! The frame decoder and a live host against random and mutated input: nothing panics, every
//! bad input is an error, and the host keeps serving. Seeded, so a failure reproduces; the
//! corpus (`tests/corpus/*.bin`, one input per file) keeps the inputs that once mattered.

mod common;

use bytes::BytesMut;
use common::{assert_all_answered, ring_of, slots, RingMsg, ToyClient};
use ensemble_core::topology::Topology;
use ensemble_core::{ClientId, Deployment, ProcessId, Request, Value};
use ensemble_net::frame::{encode_frame, FrameCodec, Never};
use ensemble_net::{Frame, Hello, HostId, Limits};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use tokio_util::codec::Decoder;

type Inbound = Frame<RingMsg, Never>;

fn valid_frames() -> Vec<Vec<u8>> {
    let request = Request { client: ClientId(1), seq: 2, txn: "toy".into(), params: vec![Value::Int(3), Value::Text("x".into())] };
    let frames: Vec<Inbound> = vec![
        Frame::Hello { hello: Hello::Client { client: ClientId(1), site: 0 }, nonce: [1; 32] },
        Frame::Hello { hello: Hello::Peer { host: HostId(1), processes: vec![ProcessId(1)] }, nonce: [2; 32] },
        Frame::Hello { hello: Hello::Admin, nonce: [3; 32] },
        Frame::Request { to: ProcessId(0), request: request.clone() },
        Frame::Message { from: ProcessId(1), to: ProcessId(0), msg: RingMsg::Forward { origin: ProcessId(1), request } },
        Frame::Proof([4; 32]),
        Frame::Ping(9),
        Frame::Shutdown,
        Frame::Error("e".into()),
    ];
    frames.iter().map(|f| encode_frame(f).unwrap().to_vec()).collect()
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 10, "the corpus is missing");
    inputs
}

/// A random input: valid frames, cut, spliced, with bytes flipped, or plain noise.
fn mutant(rng: &mut ChaCha8Rng, valid: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..rng.random_range(1..4) {
        let mut f = valid[rng.random_range(0..valid.len())].clone();
        match rng.random_range(0..5) {
            0 => {}
            1 => {
                let at = rng.random_range(0..f.len());
                f[at] ^= 1 << rng.random_range(0..8);
            }
            2 => f.truncate(rng.random_range(0..f.len())),
            3 => {
                let n = rng.random_range(0..16);
                f.extend((0..n).map(|_| rng.random::<u8>()));
            }
            _ => f = (0..rng.random_range(0..64)).map(|_| rng.random::<u8>()).collect(),
        }
        out.extend(f);
    }
    out
}

/// Decodes everything in `bytes`; an error ends the stream, as it ends a connection.
fn decode(bytes: &[u8]) -> usize {
    let mut codec = FrameCodec::<RingMsg, Never>::new();
    let mut buf = BytesMut::from(bytes);
    let mut n = 0;
    while let Ok(Some(_)) = codec.decode_eof(&mut buf) {
        n += 1;
    }
    n
}

#[test]
fn the_decoder_survives_the_corpus_and_a_hundred_thousand_mutants() {
    let valid = valid_frames();
    for v in &valid {
        assert_eq!(decode(v), 1);
    }
    for (_, input) in corpus() {
        decode(&input);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for _ in 0..100_000 {
        decode(&mutant(&mut rng, &valid));
    }
}

#[test]
fn a_host_fed_the_corpus_and_mutants_keeps_serving() {
    // Plain protocol (no secret), so random bytes reach every decoding path past the Hello.
    let d = Deployment::one_per_machine(&[0, 0], 2, "ring");
    let build = ring_of(&d, &[]);
    let limits = Limits { hello_deadline: Duration::from_millis(500), frame_deadline: Duration::from_millis(500), ..Limits::default() };
    let cluster = common::Cluster::start_with(d, Topology::lan(), false, 2, None, limits, build);
    // Without Shutdown: in the plain protocol a Hello as a peer followed by one is a peer's
    // legitimate request to stop.
    let shutdown = encode_frame::<Never, Never>(&Frame::Shutdown).unwrap().to_vec();
    let valid: Vec<_> = valid_frames().into_iter().filter(|f| *f != shutdown).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let mut inputs: Vec<Vec<u8>> = corpus().into_iter().map(|(_, b)| b).collect();
    inputs.extend((0..300).map(|_| mutant(&mut rng, &valid)));
    for input in &inputs {
        let mut s = TcpStream::connect(cluster.addr(0)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        // The host may close before reading everything: a failed write is one of its answers.
        let _ = s.write_all(input);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    let targets: BTreeMap<_, _> = [(ClientId(1), ProcessId(0)), (ClientId(2), ProcessId(1))].into();
    let done = cluster.run(slots(targets.iter().map(|(c, p)| (ToyClient::boxed(c.0, p.0, 10), 0))), 20);
    assert_all_answered(&done, &targets, 10);
    let reports = cluster.stop();
    for r in &reports {
        assert_eq!(r.failure(), None, "a process failed: {r:?}");
    }
}
