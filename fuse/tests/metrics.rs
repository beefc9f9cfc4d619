//! The metrics docs/OPERATING.md lists are exactly those the registry exposes, with the types it
//! says, and the filesystem core moves each of them — but the FUSE operation histogram (moved by
//! the adapter: tests/metrics.rs of the binary mounts for it) and the GPU's counters (moved only
//! where there is a GPU).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use object_store::path::Path;
use shrinkfs_codec::EncodeConfig;
use shrinkfs_fuse::inode::ROOT;
use shrinkfs_fuse::metrics::collect::Labels;
use shrinkfs_fuse::metrics::{Format, Metrics};
use shrinkfs_fuse::store::fault::{FaultControl, FaultStore, Op};
use shrinkfs_fuse::store::{Backend, Bucket, RetryPolicy, StoreConfig};
use shrinkfs_fuse::{Fs, FsConfig, NamespaceConfig, Services};

/// (name, type) of each metric the operating guide lists.
fn documented() -> BTreeMap<String, String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/OPERATING.md")).unwrap();
    let table = doc.split("## Metrics").nth(1).expect("a Metrics section");
    table
        .lines()
        .filter_map(|l| {
            let mut cells = l.strip_prefix("| `")?.split('|');
            let name = cells.next()?.trim().trim_end_matches('`');
            Some((name.to_owned(), cells.next()?.trim().to_owned()))
        })
        .collect()
}

/// (family, type) of the Prometheus text; an info family as the guide names it.
fn exposed(body: &str) -> BTreeMap<String, String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| match n.strip_suffix("_info").filter(|_| t == "gauge" && n.starts_with("shrinkfs_")) {
            Some(_) => (n.to_owned(), "info".to_owned()),
            None => (n.to_owned(), t.to_owned()),
        })
        .collect()
}

/// Per family, every sample's value, so any move shows.
fn samples(body: &str) -> BTreeMap<String, Vec<String>> {
    let families: Vec<String> = exposed(body).into_keys().collect();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        let family = families
            .iter()
            .filter(|f| name == f.as_str() || name.strip_prefix(f.as_str()).is_some_and(|s| s.starts_with('_')))
            .max_by_key(|f| f.len());
        if let Some(f) = family {
            out.entry(f.clone()).or_default().push(line.to_owned());
        }
    }
    out
}

#[test]
fn the_documented_metrics_are_exactly_the_exposed_ones() {
    let m = Metrics::new();
    // Families with labels show once they have a member.
    m.op("lookup", shrinkfs_fuse::metrics::Outcome::Ok, Duration::ZERO);
    m.store().request("get", shrinkfs_fuse::metrics::Outcome::Ok, Duration::ZERO);
    m.frame_encoded("zstd");
    let body = m.render(Format::Prometheus);
    assert_eq!(documented(), exposed(&body), "docs/OPERATING.md and the registry differ");
}

/// Moved only by the adapter (a real mount) or by a GPU; or a constant (checked in `collect`).
const NOT_MOVED_HERE: [&str; 10] = [
    "process_start_time_seconds",
    "shrinkfs_fuse_op_duration_seconds",
    "shrinkfs_gpu_batches_total",
    "shrinkfs_gpu_frames_total",
    "shrinkfs_gpu_decoded_frames_total",
    "shrinkfs_gpu_decode_tries_total",
    "shrinkfs_gpu_input_bytes_total",
    "shrinkfs_gpu_output_bytes_total",
    "shrinkfs_gpu_seconds_total",
    "shrinkfs_gpu_fallbacks_total",
];

fn data(n: usize, seed: u64) -> Vec<u8> {
    common::data(n, seed, 3, b"abcdefghij")
}

async fn read_all(fs: &Fs, name: &str, piece: u32) -> Vec<u8> {
    let a = fs.lookup(ROOT, name).await.unwrap();
    let fh = fs.open(a.ino, false, false).await.unwrap();
    let mut out = Vec::new();
    loop {
        let got = fs.read(fh, out.len() as u64, piece).await.unwrap();
        if got.is_empty() {
            break;
        }
        out.extend_from_slice(&got);
    }
    fs.release(fh).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filesystem_core_moves_every_documented_metric() {
    let mem = Arc::new(InMemory::new());
    let ctl = Arc::new(FaultControl::default());
    let cache = tempfile::tempdir().unwrap();
    let disk = shrinkfs_fuse::diskcache::DiskCache::open(&shrinkfs_fuse::diskcache::DiskCacheConfig {
        dir: cache.path().to_owned(),
        max_bytes: 1 << 30,
        min_free: 0.0,
    })
    .unwrap();
    let cfg = FsConfig {
        encode: EncodeConfig { frame_size: 64 << 10, ..Default::default() },
        namespace: NamespaceConfig { metadata_ttl: Duration::ZERO, ..NamespaceConfig::default() },
        // A budget of a few frames: read-ahead finds it full, writers wait for it.
        io_budget: 1 << 20,
        deletes_behind: 64,
        ..FsConfig::default()
    };
    let services = Services { disk_cache: Some(disk), ..Services::default() };
    let retry = RetryPolicy { init_backoff: Duration::from_millis(1), ..RetryPolicy::default() };
    let parts = Arc::new(common::MemoryParts::new(mem.clone()));
    let backend = FaultStore::layer(Backend { store: mem.clone(), pages: None, multipart: Some(parts) }, ctl.clone());
    let bucket = Bucket::stack(backend, &Path::from("pre"), "metrics", &StoreConfig { retry, ..Default::default() });
    let fs = Arc::new(Fs::new(bucket.clone(), cfg.clone(), services.clone()));
    let m = fs.metrics().clone();
    m.set_labels(Labels { version: "1".into(), commit: "c".into(), source: "memory".into(), mountpoint: "/m".into() });
    let weak = Arc::downgrade(&fs);
    m.watch_dirty(Box::new(move || weak.upgrade().map_or(0, |fs| fs.dirty_bytes())));
    let before = samples(&Metrics::new().render(Format::Prometheus));
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let look = |seen: &mut BTreeSet<String>| {
        for (family, lines) in samples(&m.render(Format::Prometheus)) {
            if before.get(&family) != Some(&lines) {
                seen.insert(family);
            }
        }
    };

    // Writes: four writers at once through a budget of 4 MiB, one of them still open at a look.
    let bytes = data(12 << 20, 1);
    let mut writers = Vec::new();
    for k in 0..4 {
        let (fs, bytes) = (fs.clone(), bytes.clone());
        writers.push(tokio::spawn(async move {
            let (_, fh) = fs.create(ROOT, &format!("f{k}"), 0o644, 0, 0).await.unwrap();
            for (i, chunk) in bytes.chunks(256 << 10).enumerate() {
                fs.write(fh, (i * (256 << 10)) as u64, chunk).await.unwrap();
            }
            fh
        }));
    }
    let mut handles = Vec::new();
    for w in writers {
        handles.push(w.await.unwrap());
    }
    look(&mut seen);
    for fh in handles {
        fs.flush(fh).await.unwrap();
        fs.release(fh).await.unwrap();
    }
    // Reads: sequential (read-ahead), again (memory cache), with failures and a delay (errors,
    // retries, requests in flight at a look).
    ctl.fail_next(Op::Get, 2);
    assert!(read_all(&fs, "f0", 128 << 10).await == bytes);
    assert!(read_all(&fs, "f0", 128 << 10).await == bytes);
    ctl.delay(Op::Get, Duration::from_millis(300));
    let slow = {
        let fs = fs.clone();
        tokio::spawn(async move { read_all(&fs, "f1", 1 << 20).await })
    };
    // Looks while it runs: requests in flight, budget held for the frames being fetched.
    while !slow.is_finished() {
        tokio::time::sleep(Duration::from_millis(40)).await;
        look(&mut seen);
    }
    assert!(slow.await.unwrap() == bytes);
    ctl.delay(Op::Get, Duration::ZERO);
    // The disk cache: a second filesystem over the same stack and disk cache finds the frames
    // the first one fetched there; a damaged entry is fetched again.
    assert!(read_all(&fs, "f2", 1 << 20).await == bytes);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let entries = walk(cache.path());
    assert!(!entries.is_empty(), "frames went to the disk cache");
    for e in entries.iter().step_by(2) {
        std::fs::write(e, b"damaged").unwrap();
    }
    let fs2 = Fs::new(bucket, cfg, services);
    assert!(read_all(&fs2, "f2", 1 << 20).await == bytes);
    look(&mut seen);

    // Deletes behind unlinks: the first runs in its unlink, the next is queued while a look runs.
    ctl.delay(Op::Delete, Duration::from_millis(300));
    fs.unlink(ROOT, "f3").await.unwrap();
    fs.unlink(ROOT, "f2").await.unwrap();
    look(&mut seen);
    fs.fsyncdir(ROOT).await.unwrap();

    let missing: Vec<_> =
        documented().into_keys().filter(|n| !seen.contains(n) && !NOT_MOVED_HERE.contains(&n.as_str())).collect();
    assert!(missing.is_empty(), "never moved: {missing:?}\n{}", m.render(Format::Prometheus));
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}
