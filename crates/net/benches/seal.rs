//! What authentication adds per frame: encoding and decoding a frame on the plain wire against
//! the same with the per-frame seal (HMAC-SHA256 over sequence number, header and payload) and
//! its check, for a small request and a 4 KiB reply. `cargo bench -p ensemble-net --bench seal`;
//! criterion prints the time per frame of each, side by side in one run.

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ensemble_core::{ClientId, Done, Outcome, ProcessId, Reply, ReplyBody, Request, Value};
use ensemble_net::auth::{Secret, TAG_LEN};
use ensemble_net::frame::{encode_frame, FrameCodec, Never};
use ensemble_net::{Frame, Hello};
use std::hint::black_box;
use tokio_util::codec::Decoder;

type Wire = Frame<Never, ()>;

fn frames() -> Vec<(&'static str, Wire)> {
    let request = Request { client: ClientId(7), seq: 42, txn: "add_item".into(), params: vec![Value::Int(5), Value::Int(17), Value::Int(2)] };
    let rows = (0..64).map(|i| vec![Value::Int(i), Value::Text(format!("item number {i:04} of the catalogue, long"))]).collect();
    let reply = Reply { client: ClientId(7), seq: 42, body: ReplyBody::Done(Done { outcome: Outcome::Committed(rows), evidence: () }) };
    vec![("request", Frame::Request { to: ProcessId(0), request }), ("reply-4k", Frame::Reply { from: ProcessId(0), reply })]
}

fn bench(c: &mut Criterion) {
    let secret = Secret::from_bytes([9; 32]);
    let mut g = c.benchmark_group("frame");
    for (name, frame) in frames() {
        let bytes = encode_frame(&frame).unwrap();
        eprintln!("{name}: {} bytes on the plain wire, {} sealed", bytes.len(), bytes.len() + TAG_LEN);
        g.bench_with_input(BenchmarkId::new("encode+decode plain", name), &frame, |b, f| {
            b.iter(|| {
                let bytes = encode_frame(black_box(f)).unwrap();
                let mut buf = BytesMut::from(&bytes[..]);
                black_box(FrameCodec::<Never, ()>::new().decode(&mut buf).unwrap())
            })
        });
        g.bench_with_input(BenchmarkId::new("encode+seal+open+decode", name), &frame, |b, f| {
            let (mut seal, open) = ensemble_net::auth::test_session(&secret, &Hello::Admin);
            let mut codec = FrameCodec::<Never, ()>::new();
            codec.open_with(open);
            b.iter(|| {
                let bytes = encode_frame(black_box(f)).unwrap();
                let mut buf = BytesMut::from(&seal.seal_to_vec(&bytes)[..]);
                black_box(codec.decode(&mut buf).unwrap())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
