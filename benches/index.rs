//! Parsing an object's index from its tail and looking up the frame of an offset, at 100 to
//! 100,000 frames, beside a floor of copying the same bytes.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use shrinkfs_codec::{CodecId, CodecParams, EncodeConfig, Layout, ObjectWriter};
use std::hint::black_box;
use std::sync::Arc;

/// The tail (index + footer) of an object of `n` 4 KiB frames, built without encoding any data.
fn tail_of(n: usize) -> (Vec<u8>, u64) {
    let cfg = EncodeConfig {
        params: CodecParams { codec: CodecId::None, level: 1, dict: None },
        frame_size: 4096,
        key: None,
    };
    let ctx = Arc::new(cfg.new_object());
    let mut w = ObjectWriter::new(ctx.clone());
    let frame = shrinkfs_codec::encode_frame(&ctx, cfg.codec().unwrap().as_ref(), 0, &[7u8; 4096]);
    for _ in 0..n {
        w.push(&frame);
    }
    let data_end = w.stored_len();
    let tail = w.finish();
    (tail.clone(), data_end + tail.len() as u64)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("index");
    g.sample_size(20);
    g.measurement_time(std::time::Duration::from_secs(2));
    for n in [100usize, 1_000, 10_000, 100_000] {
        let (tail, len) = tail_of(n);
        g.throughput(Throughput::Bytes(tail.len() as u64));
        g.bench_with_input(BenchmarkId::new("memcpy-floor", n), &tail, |b, t| b.iter(|| black_box(t.clone())));
        g.bench_with_input(BenchmarkId::new("parse", n), &tail, |b, t| {
            b.iter(|| Layout::parse(black_box(t), len).unwrap())
        });
        let layout = Layout::parse(&tail, len).unwrap();
        assert_eq!(layout.entries.len(), n);
        g.bench_with_input(BenchmarkId::new("lookup", n), &layout, |b, l| {
            let mut off = 0u64;
            b.iter(|| {
                off = (off + 40_961) % l.logical_size();
                black_box(l.frame_at(off))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
