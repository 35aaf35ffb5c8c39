//! How long the analysis of a 30-type application takes (the papers' applications have 20 and
//! 26 transaction types). `cargo bench -p ensemble-analyze --bench analyze`.

use criterion::{criterion_group, criterion_main, Criterion};
use ensemble_analyze::{analyze, analyze_spec, synthetic, Options, Replicas};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let app = synthetic::application(30, 1);
    for (label, options) in [
        ("analyze 30 types (replicas identical)", Options::default()),
        ("analyze 30 types (partial replicas, double keys)", Options { replicas: Replicas::Partial, ..Options::default() }),
    ] {
        let a = analyze_spec(&app, &options).expect("the synthetic application analyses");
        let start = std::time::Instant::now();
        let _ = analyze_spec(&app, &options);
        println!(
            "{label}: {} statements, {} conflicts, search space {} choices in {} components (largest {}), {} nodes, minimal: {}; one run {:?}",
            app.transactions.iter().map(|t| t.statements.len()).sum::<usize>(),
            a.conflicts.len(),
            a.search.space,
            a.search.components,
            a.search.largest_component,
            a.search.nodes,
            a.search.proven_minimal,
            start.elapsed()
        );
        c.bench_function(label, |b| b.iter(|| analyze_spec(black_box(&app), black_box(&options)).map(|a| a.classes.len())));
    }
    let shop = ensemble_app::application("shop").expect("shop");
    c.bench_function("analyze shop", |b| b.iter(|| analyze(black_box(&shop), &Options::default()).map(|a| a.classes.len())));
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
