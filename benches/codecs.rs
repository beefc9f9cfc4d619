//! Per-frame compress and decompress throughput of each CPU codec and level at several frame
//! sizes, on the logs corpus, beside a memcpy floor.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use shrinkfs::corpus::{CorpusKind, generate};
use shrinkfs_codec::codec::{Codec, Lz4Codec, ZstdCodec};
use std::hint::black_box;

fn codecs() -> Vec<(String, Box<dyn Codec>)> {
    vec![
        ("zstd-1".into(), Box::new(ZstdCodec::new(1, None).unwrap())),
        ("zstd-3".into(), Box::new(ZstdCodec::new(3, None).unwrap())),
        ("zstd-9".into(), Box::new(ZstdCodec::new(9, None).unwrap())),
        ("lz4".into(), Box::new(Lz4Codec)),
    ]
}

fn bench(c: &mut Criterion) {
    let data = generate(CorpusKind::Logs, 4 << 20, 1);
    for frame in [64 << 10, 256 << 10, 1 << 20, 4 << 20] {
        let raw = &data[..frame];
        let mut g = c.benchmark_group(format!("frame-{}K", frame >> 10));
        g.throughput(Throughput::Bytes(frame as u64));
        g.sample_size(10);
        g.measurement_time(std::time::Duration::from_secs(2));
        g.warm_up_time(std::time::Duration::from_millis(500));
        g.bench_function("memcpy", |b| {
            let mut out = vec![0u8; frame];
            b.iter(|| out.copy_from_slice(black_box(raw)))
        });
        for (name, codec) in codecs() {
            let mut stored = Vec::new();
            assert!(codec.compress(raw, &mut stored));
            g.bench_with_input(BenchmarkId::new("compress", &name), raw, |b, raw| {
                let mut out = Vec::new();
                b.iter(|| codec.compress(black_box(raw), &mut out))
            });
            g.bench_with_input(BenchmarkId::new("decompress", &name), &stored, |b, stored| {
                let mut out = Vec::new();
                b.iter(|| codec.decompress(black_box(stored), frame, &mut out).unwrap())
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
