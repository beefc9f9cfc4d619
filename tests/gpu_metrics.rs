//! The GPU's metrics move when a GPU does the work: frames encoded in batches, payloads decoded
//! on it, and incompressible frames sent back to the CPU. Ignored by default (CI has no GPU, so it
//! shows as skipped); run on the GPU host with `--include-ignored`, where a missing GPU fails it.

#![cfg(feature = "gpu")]

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use shrinkfs_codec::EncodeConfig;
use shrinkfs_codec::dispatch::{DispatchConfig, Dispatcher, GpuPolicy};
use shrinkfs_fuse::inode::ROOT;
use shrinkfs_fuse::metrics::Format;
use shrinkfs_fuse::metrics::text::sum;
use shrinkfs_fuse::store::{Backend, Bucket, StoreConfig};
use shrinkfs_fuse::{Fs, FsConfig, Services};

/// Text that compresses (about 4x), different in every line.
fn text(n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 64);
    let mut i = 0u64;
    while out.len() < n {
        out.extend_from_slice(format!("{i:>12} GET /index.html 200 {} bytes\n", i * 7919 % 100_003).as_bytes());
        i += 1;
    }
    out.truncate(n);
    out
}

/// Bytes that do not compress.
fn noise(n: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

async fn write(fs: &Fs, name: &str, bytes: &[u8]) {
    let (_, fh) = fs.create(ROOT, name, 0o644, 0, 0).await.unwrap();
    for (i, chunk) in bytes.chunks(1 << 20).enumerate() {
        fs.write(fh, (i << 20) as u64, chunk).await.unwrap();
    }
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a GPU: run with --run-ignored on the GPU host"]
async fn gpu_work_moves_every_gpu_metric() {
    let dispatcher = Dispatcher::new(DispatchConfig {
        policy: GpuPolicy::On,
        gpu: shrinkfs::gpuenv::gpu_config(),
        ..DispatchConfig::default()
    })
    .unwrap_or_else(|e| panic!("this test needs a GPU and found none: {e}"));
    let mem = Arc::new(InMemory::new());
    let backend = Backend { store: mem.clone(), pages: None, multipart: Some(mem) };
    let bucket = Bucket::stack(backend, &Path::from("gpu"), "memory", &StoreConfig::default());
    let cfg =
        FsConfig { encode: EncodeConfig { frame_size: 1 << 20, ..EncodeConfig::default() }, ..FsConfig::default() };
    let fs = Fs::new(bucket, cfg, Services { dispatcher: Arc::new(dispatcher), disk_cache: None });

    let (compressible, incompressible) = (text(64 << 20), noise(4 << 20));
    write(&fs, "text", &compressible).await;
    write(&fs, "noise", &incompressible).await;
    // One read of 16 frames: a batch large enough to decode on the GPU.
    let a = fs.lookup(ROOT, "text").await.unwrap();
    let fh = fs.open(a.ino, false, false).await.unwrap();
    let got = fs.read(fh, 0, 16 << 20).await.unwrap();
    assert!(got[..] == compressible[..16 << 20], "the GPU-written frames read back");
    fs.release(fh).await.unwrap();

    let body = fs.metrics().render(Format::Prometheus);
    use shrinkfs_fuse::metrics::names::*;
    let moved = [GPU_BATCHES, GPU_FRAMES, GPU_DECODED_FRAMES, GPU_INPUT_BYTES, GPU_OUTPUT_BYTES, GPU_SECONDS]
        .map(|name| format!("{name}_total"));
    let fallback = format!("{GPU_FALLBACKS}_total{{reason=\"not_smaller\"}}");
    for family in moved.iter().chain([&fallback]) {
        assert!(sum(&body, family) > 0.0, "{family} did not move:\n{body}");
    }
    let (input, output) = (sum(&body, &moved[3]), sum(&body, &moved[4]));
    assert!(output < input / 2.0, "the GPU compressed the text: {input} bytes in, {output} out");
}
