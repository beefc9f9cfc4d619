//! Reads' batches decoded where the dispatcher says, with a stand-in for the GPU (CI has none)
//! that decodes with the CPU's zstd: under `--gpu auto` the GPU is first tried on a copy beside
//! the CPU workers, takes batches for real once measured faster, and comes back byte for byte;
//! it is left when measured slower or when it fails (a failed batch is decoded on the CPU);
//! frames stored as they are among a batch are decoded too.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use object_store::memory::InMemory;
use object_store::path::Path;
use shrinkfs_codec::codec::{Codec, ZstdCodec};
use shrinkfs_codec::decoderoute::DecodeOn;
use shrinkfs_codec::dispatch::{
    Backend as BatchBack, BackendError, BatchBackend, BatchResult, DispatchConfig, Dispatcher,
};
use shrinkfs_codec::{CodecId, EncodeConfig};
use shrinkfs_fuse::inode::ROOT;
use shrinkfs_fuse::store::{Backend, Bucket, StoreConfig};
use shrinkfs_fuse::{Fs, FsConfig, Services};

const MIB: usize = 1 << 20;

/// A stand-in GPU: compresses and decompresses with the CPU's zstd, decodes after `delay`, and
/// fails its decodes from the `fail_from`-th on (counted from 0).
struct Stand {
    delay: Duration,
    fail_from: u64,
    decodes: AtomicU64,
}

impl Stand {
    fn new(delay: Duration, fail_from: u64) -> Arc<Stand> {
        Arc::new(Stand { delay, fail_from, decodes: AtomicU64::new(0) })
    }

    /// Waits (up to 10 s) until the stand-in's try has come back and been measured (it runs in
    /// the background, beside the read that asked for it).
    async fn wait_try(&self, d: &Dispatcher) {
        for _ in 0..1000 {
            if d.counters().gpu_decode_tries.load(Ordering::SeqCst) >= 1 {
                // (Measured as the try's task ends, just after it is counted.)
                tokio::time::sleep(Duration::from_millis(100)).await;
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the try did not come back from the stand-in");
    }
}

impl BatchBackend for Stand {
    fn compress_batch(&self, codec: CodecId, chunks: &[&[u8]], _data_type: i32) -> BatchResult {
        assert_eq!(codec, CodecId::Zstd);
        let z = ZstdCodec::new(1, None).unwrap();
        Ok(chunks
            .iter()
            .map(|c| {
                let mut out = Vec::new();
                z.compress(c, &mut out).then_some(out)
            })
            .collect())
    }

    fn decompress_batch(
        &self,
        codec: CodecId,
        payloads: &[&[u8]],
        raw_lens: &[usize],
    ) -> Result<Vec<Vec<u8>>, BackendError> {
        assert_eq!(codec, CodecId::Zstd);
        let k = self.decodes.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        if k >= self.fail_from {
            return Err("the stand-in GPU failed".into());
        }
        let z = ZstdCodec::new(1, None).unwrap();
        Ok(payloads
            .iter()
            .zip(raw_lens)
            .map(|(p, &n)| {
                let mut out = Vec::new();
                z.decompress(p, n, &mut out).unwrap();
                out
            })
            .collect())
    }
}

/// A memory-bucket filesystem whose dispatcher shares the stand-in (`--gpu auto`), 1 MiB frames.
fn fs_with(stand: &Arc<Stand>) -> (Fs, Arc<Dispatcher>) {
    let back = BatchBack::new(stand.clone(), vec![CodecId::Zstd], "stand-in");
    let dispatcher = Arc::new(Dispatcher::with_backend(back, DispatchConfig::default()).unwrap());
    let mem = Arc::new(InMemory::new());
    let backend = Backend { store: mem.clone(), pages: None, multipart: Some(mem) };
    let bucket = Bucket::stack(backend, &Path::from("b"), "memory", &StoreConfig::default());
    let cfg =
        FsConfig { encode: EncodeConfig { frame_size: MIB as u32, ..EncodeConfig::default() }, ..FsConfig::default() };
    let fs = Fs::new(bucket, cfg, Services { dispatcher: dispatcher.clone(), disk_cache: None });
    (fs, dispatcher)
}

async fn write(fs: &Fs, name: &str, bytes: &[u8]) {
    let (_, fh) = fs.create(ROOT, name, 0o644, 0, 0).await.unwrap();
    for (i, chunk) in bytes.chunks(MIB).enumerate() {
        fs.write(fh, (i * MIB) as u64, chunk).await.unwrap();
    }
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
}

/// Reads 16 frames of `name` at frame `first` in one read (one batch) through a new handle.
async fn read16(fs: &Fs, name: &str, first: usize) -> Vec<u8> {
    let a = fs.lookup(ROOT, name).await.unwrap();
    let fh = fs.open(a.ino, false, false).await.unwrap();
    let got = fs.read(fh, (first * MIB) as u64, (16 * MIB) as u32).await.unwrap().to_vec();
    fs.release(fh).await.unwrap();
    got
}

fn text(n: usize, seed: u64) -> Vec<u8> {
    common::data(n, seed, 64, b"GET /index.html HTTP/1.1 200 4096 bytes from 10.0.0.1\n")
}

fn decoded_on_gpu(d: &Dispatcher) -> u64 {
    d.counters().gpu_decoded_frames.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gpu_is_tried_on_a_copy_then_takes_batches_once_measured_faster_and_reads_back_exact() {
    let stand = Stand::new(Duration::ZERO, u64::MAX);
    let (fs, d) = fs_with(&stand);
    let bytes = text(48 * MIB, 1);
    write(&fs, "f", &bytes).await;
    // Nothing measured: the first batch is the CPU's, and measures it.
    assert_eq!(read16(&fs, "f", 0).await, bytes[..16 * MIB]);
    assert_eq!(stand.decodes.load(Ordering::SeqCst), 0, "the CPU decodes first");
    // The cores are now slow (as on a busy host): the GPU is tried on a copy beside them.
    d.decoded(DecodeOn::Cpu, MIB as u64, Duration::from_secs(10));
    assert_eq!(read16(&fs, "f", 16).await, bytes[16 * MIB..32 * MIB]);
    stand.wait_try(&d).await;
    assert_eq!(d.counters().gpu_decode_tries.load(Ordering::SeqCst), 1, "one try");
    assert_eq!(decoded_on_gpu(&d), 0, "a try's output is dropped");
    // Measured faster than the cores: it takes the next batch for real.
    assert_eq!(read16(&fs, "f", 32).await, bytes[32 * MIB..]);
    assert_eq!(stand.decodes.load(Ordering::SeqCst), 2, "the GPU's batch");
    assert_eq!(decoded_on_gpu(&d), 16, "16 frames decoded on the GPU");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_measured_slower_than_the_cores_holds_up_no_reader_and_is_left() {
    let stand = Stand::new(Duration::from_millis(1500), u64::MAX);
    let (fs, d) = fs_with(&stand);
    let bytes = text(48 * MIB, 2);
    write(&fs, "f", &bytes).await;
    assert_eq!(read16(&fs, "f", 0).await, bytes[..16 * MIB], "the CPU's batch");
    let began = std::time::Instant::now();
    assert_eq!(read16(&fs, "f", 16).await, bytes[16 * MIB..32 * MIB], "the CPU's batch, the GPU tried beside it");
    assert!(began.elapsed() < Duration::from_millis(1500), "the read did not wait for the try: {:?}", began.elapsed());
    stand.wait_try(&d).await;
    // (16 MiB in at least 1.5 s, against the cores' batch: even on a loaded machine the cores
    // decoded 16 MiB of this text faster.)
    assert_eq!(read16(&fs, "f", 32).await, bytes[32 * MIB..]);
    assert_eq!(stand.decodes.load(Ordering::SeqCst), 1, "measured slower: left to the cores");
    assert_eq!(decoded_on_gpu(&d), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_gpu_batch_is_decoded_on_the_cpu_and_the_gpu_left() {
    // Its try succeeds (measured fast), its first real batch fails.
    let stand = Stand::new(Duration::ZERO, 1);
    let (fs, d) = fs_with(&stand);
    let bytes = text(64 * MIB, 3);
    write(&fs, "f", &bytes).await;
    assert_eq!(read16(&fs, "f", 0).await, bytes[..16 * MIB]);
    d.decoded(DecodeOn::Cpu, MIB as u64, Duration::from_secs(10));
    assert_eq!(read16(&fs, "f", 16).await, bytes[16 * MIB..32 * MIB]);
    stand.wait_try(&d).await;
    assert_eq!(read16(&fs, "f", 32).await, bytes[32 * MIB..48 * MIB], "the failed batch, from the CPU");
    assert_eq!(stand.decodes.load(Ordering::SeqCst), 2, "the real batch went to the GPU");
    assert_eq!(d.counters().gpu_decode_fallback.load(Ordering::SeqCst), 1, "the failure counted");
    assert_eq!(read16(&fs, "f", 48).await, bytes[48 * MIB..]);
    assert_eq!(stand.decodes.load(Ordering::SeqCst), 2, "failed: left until it is tried again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_stored_as_they_are_among_a_gpu_batch_read_back_exact() {
    let stand = Stand::new(Duration::ZERO, u64::MAX);
    let (fs, d) = fs_with(&stand);
    // Compressible frames with a frame of noise every fourth: those are stored as they are.
    let mut bytes = Vec::new();
    for i in 0..48 {
        bytes.extend(if i % 4 == 3 { common::data(MIB, 100 + i, 1, b"x") } else { text(MIB, 200 + i) });
    }
    write(&fs, "mixed", &bytes).await;
    assert_eq!(read16(&fs, "mixed", 0).await, bytes[..16 * MIB], "the CPU's batch");
    d.decoded(DecodeOn::Cpu, MIB as u64, Duration::from_secs(10));
    assert_eq!(read16(&fs, "mixed", 16).await, bytes[16 * MIB..32 * MIB], "the CPU's batch, the GPU tried beside it");
    stand.wait_try(&d).await;
    assert_eq!(read16(&fs, "mixed", 32).await, bytes[32 * MIB..], "the GPU's batch, stored frames among it");
    assert_eq!(stand.decodes.load(Ordering::SeqCst), 2, "the batch went to the GPU");
    assert_eq!(decoded_on_gpu(&d), 12, "its 12 compressed frames on the GPU, the 4 stored ones beside");
}
