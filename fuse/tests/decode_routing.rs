//! Reads' batches decoded where the dispatcher says, with a stand-in for the GPU (CI has none)
//! that decodes with the CPU's zstd: under `--gpu auto` a batch goes to it once the CPU workers
//! are measured slower, comes back byte for byte, is left when it is measured slower or fails
//! (and a failed batch is decoded on the CPU); batches of frames stored as they are mixed in are
//! decoded too.

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

/// A stand-in GPU: compresses and decompresses with the CPU's zstd, after `delay`, or fails to
/// decode.
struct Stand {
    delay: Duration,
    fails: bool,
    decodes: AtomicU64,
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
        self.decodes.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        if self.fails {
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
async fn a_batch_goes_to_the_gpu_once_the_cpu_is_measured_slower_and_reads_back_exact() {
    let stand = Arc::new(Stand { delay: Duration::ZERO, fails: false, decodes: AtomicU64::new(0) });
    let (fs, d) = fs_with(&stand);
    let bytes = text(48 * MIB, 1);
    write(&fs, "f", &bytes).await;
    // Nothing measured: the first batch is the CPU's, and measures it.
    assert_eq!(read16(&fs, "f", 0).await, bytes[..16 * MIB]);
    assert_eq!(stand.decodes.load(Ordering::SeqCst), 0, "the CPU decodes first");
    // The cores are now slow (as on a busy host): the GPU is tried, and comes back exact.
    d.decoded(DecodeOn::Cpu, MIB as u64, Duration::from_secs(10));
    assert_eq!(read16(&fs, "f", 16).await, bytes[16 * MIB..32 * MIB]);
    assert_eq!(stand.decodes.load(Ordering::SeqCst), 1, "the GPU's first batch");
    assert!(decoded_on_gpu(&d) >= 8, "{} frames decoded on the GPU", decoded_on_gpu(&d));
    // Measured faster than the cores: it keeps the batches.
    assert_eq!(read16(&fs, "f", 32).await, bytes[32 * MIB..]);
    assert_eq!(stand.decodes.load(Ordering::SeqCst), 2, "the GPU keeps the batches");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_measured_slower_than_the_cores_is_left() {
    let stand = Arc::new(Stand { delay: Duration::from_millis(600), fails: false, decodes: AtomicU64::new(0) });
    let (fs, d) = fs_with(&stand);
    let bytes = text(48 * MIB, 2);
    write(&fs, "f", &bytes).await;
    assert_eq!(read16(&fs, "f", 0).await, bytes[..16 * MIB], "the CPU's batch");
    assert_eq!(read16(&fs, "f", 16).await, bytes[16 * MIB..32 * MIB], "the GPU's try");
    assert_eq!(stand.decodes.load(Ordering::SeqCst), 1);
    // (16 MiB in at least 600 ms, against the cores' one batch: even on a loaded machine the cores
    // decoded 16 MiB of this text faster.)
    assert_eq!(read16(&fs, "f", 32).await, bytes[32 * MIB..]);
    assert_eq!(stand.decodes.load(Ordering::SeqCst), 1, "measured slower: left to the cores");
    assert!(d.counters().gpu_decode_fallback.load(Ordering::SeqCst) == 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_gpu_batch_is_decoded_on_the_cpu_and_the_gpu_left() {
    let stand = Arc::new(Stand { delay: Duration::ZERO, fails: true, decodes: AtomicU64::new(0) });
    let (fs, d) = fs_with(&stand);
    let bytes = text(48 * MIB, 3);
    write(&fs, "f", &bytes).await;
    assert_eq!(read16(&fs, "f", 0).await, bytes[..16 * MIB]);
    d.decoded(DecodeOn::Cpu, MIB as u64, Duration::from_secs(10));
    assert_eq!(read16(&fs, "f", 16).await, bytes[16 * MIB..32 * MIB], "the failed batch, from the CPU");
    assert_eq!(stand.decodes.load(Ordering::SeqCst), 1);
    assert_eq!(d.counters().gpu_decode_fallback.load(Ordering::SeqCst), 1, "the failure counted");
    assert_eq!(read16(&fs, "f", 32).await, bytes[32 * MIB..]);
    assert_eq!(stand.decodes.load(Ordering::SeqCst), 1, "failed: left until it is tried again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_stored_as_they_are_among_a_gpu_batch_read_back_exact() {
    let stand = Arc::new(Stand { delay: Duration::ZERO, fails: false, decodes: AtomicU64::new(0) });
    let (fs, d) = fs_with(&stand);
    // Compressible frames with a frame of noise every fourth: those are stored as they are.
    let mut bytes = Vec::new();
    for i in 0..32 {
        bytes.extend(if i % 4 == 3 { common::data(MIB, 100 + i, 1, b"x") } else { text(MIB, 200 + i) });
    }
    write(&fs, "mixed", &bytes).await;
    assert_eq!(read16(&fs, "mixed", 0).await, bytes[..16 * MIB], "the CPU's batch");
    d.decoded(DecodeOn::Cpu, MIB as u64, Duration::from_secs(10));
    assert_eq!(read16(&fs, "mixed", 16).await, bytes[16 * MIB..], "the GPU's batch, stored frames among it");
    assert_eq!(stand.decodes.load(Ordering::SeqCst), 1, "the batch went to the GPU");
    assert_eq!(decoded_on_gpu(&d), 12, "its 12 compressed frames on the GPU, the 4 stored ones beside");
}
