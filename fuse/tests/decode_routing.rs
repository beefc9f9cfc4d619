//! Reads' batches decoded where the dispatcher says, with a stand-in for the GPU (CI has none)
//! that decodes with the CPU's zstd: under `--gpu auto` the GPU is first tried on a copy beside
//! the CPU workers (no reader waits for it), takes batches for real once measured faster, and
//! comes back byte for byte; it is left when measured slower, when it fails or when its output
//! does not check (a batch decoded for real is then decoded on the CPU); frames stored as they
//! are among a batch are decoded too; `--gpu on` gives it every batch.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use object_store::memory::InMemory;
use object_store::path::Path;
use shrinkfs_codec::codec::{Codec, ZstdCodec};
use shrinkfs_codec::decoderoute::DecodeOn;
use shrinkfs_codec::dispatch::{
    Backend as BatchBack, BackendError, BatchBackend, BatchResult, DispatchConfig, Dispatcher, GpuPolicy,
};
use shrinkfs_codec::{CodecId, EncodeConfig, MasterKey};
use shrinkfs_fuse::inode::ROOT;
use shrinkfs_fuse::store::{Backend, Bucket, StoreConfig};
use shrinkfs_fuse::{Fs, FsConfig, Services};

const MIB: usize = 1 << 20;

/// What the stand-in does from its `from`-th decode on (counted from 0).
#[derive(Clone, Copy, PartialEq)]
enum Goes {
    Right,
    /// Fails.
    Fails {
        from: u64,
    },
    /// Returns bytes of the right length that are not the frame's.
    Wrong {
        from: u64,
    },
    /// Panics.
    Panics {
        from: u64,
    },
}

/// A stand-in GPU: compresses and decompresses with the CPU's zstd; each decode waits for
/// `gate` (which a test may hold), then `delay`, and goes as `goes` says.
struct Stand {
    delay: Duration,
    goes: Goes,
    gate: tokio::sync::Mutex<()>,
    decodes: AtomicU64,
}

impl Stand {
    fn new(delay: Duration, goes: Goes) -> Arc<Stand> {
        Arc::new(Stand { delay, goes, gate: tokio::sync::Mutex::new(()), decodes: AtomicU64::new(0) })
    }

    /// Its decodes so far (tries and batches decoded for real).
    fn calls(&self) -> u64 {
        self.decodes.load(Ordering::SeqCst)
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

    fn decodes(&self) -> bool {
        true
    }

    fn decompress_batch(
        &self,
        codec: CodecId,
        payloads: &[&[u8]],
        raw_lens: &[usize],
    ) -> Result<Vec<Vec<u8>>, BackendError> {
        assert_eq!(codec, CodecId::Zstd);
        let k = self.decodes.fetch_add(1, Ordering::SeqCst);
        drop(self.gate.blocking_lock());
        std::thread::sleep(self.delay);
        match self.goes {
            Goes::Fails { from } if k >= from => return Err("the stand-in GPU failed".into()),
            Goes::Panics { from } if k >= from => panic!("the stand-in GPU panicked"),
            Goes::Wrong { from } if k >= from => return Ok(raw_lens.iter().map(|&n| vec![7u8; n]).collect()),
            _ => {}
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

/// A memory-bucket filesystem whose dispatcher shares the stand-in (`policy`), 1 MiB frames,
/// the way not taken tried again only after a minute (so no test meets a second try).
fn fs_with(stand: &Arc<Stand>, policy: GpuPolicy) -> (Fs, Arc<Dispatcher>) {
    fs_sealed(stand, policy, None)
}

/// [`fs_with`], its objects sealed with `key` where given.
fn fs_sealed(stand: &Arc<Stand>, policy: GpuPolicy, key: Option<MasterKey>) -> (Fs, Arc<Dispatcher>) {
    let back = BatchBack::new(stand.clone(), vec![CodecId::Zstd], "stand-in");
    let cfg = DispatchConfig { policy, decode_retry: Duration::from_secs(60), ..DispatchConfig::default() };
    let dispatcher = Arc::new(Dispatcher::with_backend(back, cfg).unwrap());
    let mem = Arc::new(InMemory::new());
    // Parts may arrive in any order (object_store's own in-memory uploads panic on that).
    let parts = Arc::new(common::MemoryParts::new(mem.clone()));
    let backend = Backend { store: mem.clone(), pages: None, multipart: Some(parts) };
    let bucket = Bucket::stack(backend, &Path::from("b"), "memory", &StoreConfig::default());
    let encode = EncodeConfig { frame_size: MIB as u32, key, ..EncodeConfig::default() };
    let cfg = FsConfig { encode, ..FsConfig::default() };
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

fn counter(d: &Dispatcher, pick: impl Fn(&shrinkfs_codec::dispatch::Counters) -> &AtomicU64) -> u64 {
    pick(d.counters()).load(Ordering::SeqCst)
}

fn decoded_on_gpu(d: &Dispatcher) -> u64 {
    counter(d, |c| &c.gpu_decoded_frames)
}

/// Waits (up to 10 s) until `n` tries have ended, their time or failure recorded (a try runs in
/// the background, beside the read that asked for it).
async fn tries_ended(d: &Dispatcher, n: u64) {
    for _ in 0..1000 {
        if counter(d, |c| &c.gpu_decode_tries) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} tries of the stand-in did not end");
}

/// A file of 16-frame reads: the first measures the cores, whose time the test then makes slow
/// (as on a busy host), and the second tries the GPU beside them.
async fn measured(fs: &Fs, d: &Dispatcher, name: &str, bytes: &[u8]) {
    write(fs, name, bytes).await;
    assert_eq!(read16(fs, name, 0).await, bytes[..16 * MIB], "the CPU's batch");
    d.decoded(CodecId::Zstd, DecodeOn::Cpu, MIB as u64, Duration::from_secs(10));
    assert_eq!(read16(fs, name, 16).await, bytes[16 * MIB..32 * MIB], "the CPU's batch, the GPU tried beside it");
    tries_ended(d, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gpu_is_tried_on_a_copy_then_takes_batches_once_measured_faster_and_reads_back_exact() {
    let stand = Stand::new(Duration::ZERO, Goes::Right);
    let (fs, d) = fs_with(&stand, GpuPolicy::Auto);
    let bytes = text(48 * MIB, 1);
    measured(&fs, &d, "f", &bytes).await;
    assert_eq!(stand.calls(), 1, "one try");
    assert_eq!(decoded_on_gpu(&d), 0, "a try's output is dropped");
    // Measured faster than the cores: it takes the next batch for real.
    assert_eq!(read16(&fs, "f", 32).await, bytes[32 * MIB..]);
    assert_eq!(stand.calls(), 2, "the GPU's batch");
    assert_eq!(decoded_on_gpu(&d), 16, "16 frames decoded on the GPU");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_measured_slower_than_the_cores_holds_up_no_reader_and_is_left() {
    let stand = Stand::new(Duration::from_millis(1500), Goes::Right);
    let (fs, d) = fs_with(&stand, GpuPolicy::Auto);
    let bytes = text(48 * MIB, 2);
    write(&fs, "f", &bytes).await;
    assert_eq!(read16(&fs, "f", 0).await, bytes[..16 * MIB], "the CPU's batch");
    {
        // The try cannot even start until the read is back (were the read to wait for it, the
        // timeout would fail the test rather than hang it).
        let _held = stand.gate.lock().await;
        let got = tokio::time::timeout(Duration::from_secs(30), read16(&fs, "f", 16)).await;
        assert!(got.expect("the read waited for the try") == bytes[16 * MIB..32 * MIB]);
    }
    tries_ended(&d, 1).await;
    // (16 MiB in at least 1.5 s against the cores' 16 MiB of this text: slower by far.)
    assert_eq!(read16(&fs, "f", 32).await, bytes[32 * MIB..]);
    assert_eq!(stand.calls(), 1, "measured slower: left to the cores");
    assert_eq!(decoded_on_gpu(&d), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_that_fails_leaves_the_gpu_and_sends_nothing_back() {
    let stand = Stand::new(Duration::ZERO, Goes::Fails { from: 0 });
    let (fs, d) = fs_with(&stand, GpuPolicy::Auto);
    let bytes = text(48 * MIB, 3);
    measured(&fs, &d, "f", &bytes).await;
    assert_eq!(counter(&d, |c| &c.gpu_decode_fallback), 0, "a try's failure sends nothing back");
    assert_eq!(read16(&fs, "f", 32).await, bytes[32 * MIB..]);
    assert_eq!(stand.calls(), 1, "failed: left until it is due again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_batch_that_fails_panics_or_does_not_check_is_decoded_on_the_cpu_and_the_gpu_left() {
    let ways = [
        (Goes::Fails { from: 1 }, "fails"),
        (Goes::Wrong { from: 1 }, "gives wrong bytes"),
        (Goes::Panics { from: 1 }, "panics"),
    ];
    for (goes, what) in ways {
        // Its try goes right (measured fast), its first real batch does not.
        let stand = Stand::new(Duration::ZERO, goes);
        let (fs, d) = fs_with(&stand, GpuPolicy::Auto);
        let bytes = text(64 * MIB, 4);
        measured(&fs, &d, "f", &bytes).await;
        assert_eq!(read16(&fs, "f", 32).await, bytes[32 * MIB..48 * MIB], "the GPU {what}: the CPU's bytes");
        assert_eq!(stand.calls(), 2, "the real batch went to the GPU");
        assert_eq!(counter(&d, |c| &c.gpu_decode_fallback), 1, "the GPU {what}: counted");
        assert_eq!(decoded_on_gpu(&d), 0);
        assert_eq!(read16(&fs, "f", 48).await, bytes[48 * MIB..]);
        assert_eq!(stand.calls(), 2, "the GPU {what}: left until it is due again");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_stored_as_they_are_among_a_gpu_batch_read_back_exact() {
    let stand = Stand::new(Duration::ZERO, Goes::Right);
    let (fs, d) = fs_with(&stand, GpuPolicy::Auto);
    // Compressible frames with a frame of noise every fourth: those are stored as they are.
    let mut bytes = Vec::new();
    for i in 0..48 {
        bytes.extend(if i % 4 == 3 { common::data(MIB, 100 + i, 1, b"x") } else { text(MIB, 200 + i) });
    }
    measured(&fs, &d, "mixed", &bytes).await;
    assert_eq!(read16(&fs, "mixed", 32).await, bytes[32 * MIB..], "the GPU's batch, stored frames among it");
    assert_eq!(stand.calls(), 2, "the batch went to the GPU");
    assert_eq!(decoded_on_gpu(&d), 12, "its 12 compressed frames on the GPU, the 4 stored ones beside");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_gpu_on_every_batch_goes_to_the_gpu_unmeasured() {
    let stand = Stand::new(Duration::ZERO, Goes::Right);
    let (fs, d) = fs_with(&stand, GpuPolicy::On);
    let bytes = text(32 * MIB, 5);
    write(&fs, "f", &bytes).await;
    assert_eq!(read16(&fs, "f", 0).await, bytes[..16 * MIB]);
    assert_eq!(read16(&fs, "f", 16).await, bytes[16 * MIB..]);
    assert_eq!((stand.calls(), decoded_on_gpu(&d)), (2, 32), "both batches, for real");
    assert_eq!(counter(&d, |c| &c.gpu_decode_tries), 0, "nothing tried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_objects_stay_on_the_cpu_whatever_the_policy() {
    let key = || Some(MasterKey::from_bytes(&[7; 32]).unwrap());
    let bytes = text(48 * MIB, 6);
    for policy in [GpuPolicy::Auto, GpuPolicy::On] {
        let stand = Stand::new(Duration::ZERO, Goes::Right);
        let (fs, d) = fs_sealed(&stand, policy, key());
        write(&fs, "secret", &bytes).await;
        assert_eq!(read16(&fs, "secret", 0).await, bytes[..16 * MIB]);
        d.decoded(CodecId::Zstd, DecodeOn::Cpu, MIB as u64, Duration::from_secs(10));
        assert_eq!(read16(&fs, "secret", 16).await, bytes[16 * MIB..32 * MIB]);
        assert_eq!(read16(&fs, "secret", 32).await, bytes[32 * MIB..]);
        if policy == GpuPolicy::Auto {
            // No try was started, nor is one out: the next batch of an unsealed object would be.
            assert_eq!(d.decode_on(CodecId::Zstd), Some(DecodeOn::CpuTryingGpu));
        }
        assert_eq!((stand.calls(), decoded_on_gpu(&d)), (0, 0), "{policy:?}: never offered to the GPU");
    }
}
