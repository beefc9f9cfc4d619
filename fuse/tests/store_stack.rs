//! The filesystem core's read and write paths over the whole store stack with the fault layer at
//! its bottom (where S3 would be): passing failures are retried and counted, bodies cut short are
//! never served as bytes, delays show in the latency histogram, an outage in the middle of a
//! multipart upload loses nothing — and a failure that outlasts the retries reaches the
//! application at read, fsync or close, with the metrics saying so.

mod common;

use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use shrinkfs_codec::EncodeConfig;
use shrinkfs_fuse::inode::ROOT;
use shrinkfs_fuse::store::fault::{FaultControl, FaultStore, Op};
use shrinkfs_fuse::store::{Backend, Bucket, RetryPolicy, StoreConfig};
use shrinkfs_fuse::{Fs, FsConfig, NamespaceConfig, Services};

/// Retries that give up after a second, waiting 1 to 20 ms between tries.
fn quick() -> RetryPolicy {
    RetryPolicy {
        timeout: Duration::from_secs(1),
        max_retries: None,
        init_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(20),
    }
}

fn config() -> FsConfig {
    FsConfig {
        encode: EncodeConfig { frame_size: 64 << 10, ..Default::default() },
        namespace: NamespaceConfig { metadata_ttl: Duration::ZERO, ..NamespaceConfig::default() },
        ..FsConfig::default()
    }
}

/// A filesystem over memory with S3's extensions (multipart uploads by id), faults under the
/// stack, retries per `retry`.
fn mount(mem: &Arc<InMemory>, retry: RetryPolicy) -> (Fs, Arc<FaultControl>) {
    let ctl = Arc::new(FaultControl::default());
    let parts = Arc::new(common::MemoryParts::new(mem.clone()));
    let backend = Backend { store: mem.clone(), pages: None, multipart: Some(parts) };
    let cfg = StoreConfig { retry, ..StoreConfig::default() };
    let bucket = Bucket::stack(FaultStore::layer(backend, ctl.clone()), &Path::from("pre"), "faulty", &cfg);
    assert!(bucket.multipart.is_some(), "the stack forwards the multipart API");
    (Fs::new(bucket, config(), Services::default()), ctl)
}

fn data(n: usize, seed: u64) -> Vec<u8> {
    common::data(n, seed, 3, b"0123456789")
}

async fn write(fs: &Fs, name: &str, bytes: &[u8]) -> shrinkfs_fuse::Result<()> {
    let (_, fh) = fs.create(ROOT, name, 0o644, 0, 0).await?;
    for (i, chunk) in bytes.chunks(128 << 10).enumerate() {
        fs.write(fh, (i * (128 << 10)) as u64, chunk).await?;
    }
    let closed = fs.flush(fh).await;
    fs.release(fh).await?;
    closed
}

async fn read(fs: &Fs, name: &str) -> shrinkfs_fuse::Result<Vec<u8>> {
    let a = fs.lookup(ROOT, name).await?;
    let fh = fs.open(a.ino, false, false).await?;
    let mut out = Vec::new();
    let res = loop {
        match fs.read(fh, out.len() as u64, 1 << 20).await {
            Ok(got) if got.is_empty() => break Ok(out),
            Ok(got) => out.extend_from_slice(&got),
            Err(e) => break Err(e),
        }
    };
    fs.release(fh).await?;
    res
}

fn count(fs: &Fs, line: &str) -> u64 {
    fs.metrics().value(line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passing_read_failures_are_retried_and_counted() {
    let mem = Arc::new(InMemory::new());
    let bytes = data(3 << 20, 1);
    write(&mount(&mem, quick()).0, "f", &bytes).await.unwrap();
    let (fs, ctl) = mount(&mem, quick());
    ctl.fail_next(Op::Get, 3);
    assert!(read(&fs, "f").await.unwrap() == bytes);
    assert_eq!(ctl.failures(), 3);
    assert_eq!(count(&fs, "shrinkfs_store_retries_total{kind=\"get_range\"}"), 3);
    assert_eq!(count(&fs, "shrinkfs_store_errors_total{kind=\"get_range\"}"), 3);
    let failed = "shrinkfs_store_request_duration_seconds_count{kind=\"get_range\",outcome=\"error\"}";
    assert_eq!(count(&fs, failed), 0, "each request succeeded in the end");
}

/// A multipart upload whose completion took effect while its answer was lost (the connection
/// dropped): the retried completion finds the upload gone, and the close succeeds once the
/// object is found to be this upload's; an upload truly gone fails the close with `EIO`, not
/// `ENOENT`. Found by a black-box probe: `fsync` failed with `ENOENT` for a file stored whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_whose_answer_was_lost_is_found_stored_and_the_close_succeeds() {
    let mem = Arc::new(InMemory::new());
    let (fs, ctl) = mount(&mem, quick());
    let bytes = data(20 << 20, 4);
    ctl.lose_answer_next(Op::Complete, 1);
    write(&fs, "f", &bytes).await.unwrap();
    assert_eq!(ctl.calls(Op::Complete), 2, "the completion was tried again");
    assert!(read(&mount(&mem, quick()).0, "f").await.unwrap() == bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_that_outlasts_the_retries_reaches_read_and_is_counted() {
    let mem = Arc::new(InMemory::new());
    let bytes = data(1 << 20, 2);
    write(&mount(&mem, quick()).0, "f", &bytes).await.unwrap();
    let (fs, ctl) = mount(&mem, RetryPolicy { max_retries: Some(2), ..quick() });
    let a = fs.lookup(ROOT, "f").await.unwrap();
    let fh = fs.open(a.ino, false, false).await.unwrap();
    ctl.set_down(true);
    let e = fs.read(fh, 0, 1 << 20).await.unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert_eq!(count(&fs, "shrinkfs_store_retries_total{kind=\"get_range\"}"), 2);
    let failed = "shrinkfs_store_request_duration_seconds_count{kind=\"get_range\",outcome=\"error\"}";
    assert_eq!(count(&fs, failed), 1);
    ctl.set_down(false);
    assert!(fs.read(fh, 0, 1 << 20).await.unwrap() == bytes, "the store came back: so do the bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_cut_short_are_never_served() {
    let mem = Arc::new(InMemory::new());
    let bytes = data(2 << 20, 3);
    write(&mount(&mem, quick()).0, "f", &bytes).await.unwrap();
    // Retried: the right bytes.
    let (fs, ctl) = mount(&mem, quick());
    ctl.truncate_next(4);
    assert!(read(&fs, "f").await.unwrap() == bytes);
    assert_eq!(ctl.truncated(), 4);
    assert!(count(&fs, "shrinkfs_store_retries_total") >= 4);
    // Not retried: an error, never short or wrong bytes.
    let (fs, ctl) = mount(&mem, RetryPolicy::NONE);
    let a = fs.lookup(ROOT, "f").await.unwrap();
    let fh = fs.open(a.ino, false, false).await.unwrap();
    ctl.truncate_next(1);
    assert_eq!(fs.read(fh, 0, 1 << 20).await.unwrap_err().errno(), libc::EIO);
    assert!(fs.read(fh, 0, 1 << 20).await.unwrap() == bytes[..1 << 20]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_delays_show_in_the_request_latency() {
    let mem = Arc::new(InMemory::new());
    let bytes = data(1 << 20, 4);
    write(&mount(&mem, quick()).0, "f", &bytes).await.unwrap();
    let (fs, ctl) = mount(&mem, quick());
    ctl.delay(Op::Get, Duration::from_millis(60));
    assert!(read(&fs, "f").await.unwrap() == bytes);
    let n = count(&fs, "shrinkfs_store_request_duration_seconds_count{kind=\"get_range\"");
    let body = fs.metrics().render(shrinkfs_fuse::metrics::Format::Prometheus);
    let sum =
        shrinkfs_fuse::metrics::text::sum(&body, "shrinkfs_store_request_duration_seconds_sum{kind=\"get_range\"");
    assert!(n >= 2 && sum >= 0.06 * n as f64, "{n} requests took {sum} s");
    let fast = "shrinkfs_store_request_duration_seconds_bucket{kind=\"get_range\",outcome=\"ok\",le=\"0.0064\"}";
    assert_eq!(count(&fs, fast), 0, "none was faster than the delay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_during_a_multipart_upload_is_ridden_out_and_nothing_is_lost() {
    let mem = Arc::new(InMemory::new());
    let (fs, ctl) = mount(&mem, RetryPolicy { timeout: Duration::from_secs(5), ..quick() });
    let bytes = data(30 << 20, 5);
    let (_, fh) = fs.create(ROOT, "big", 0o644, 0, 0).await.unwrap();
    for (i, chunk) in bytes.chunks(128 << 10).enumerate() {
        if i == 100 {
            // Parts are on their way: the store goes away for a while.
            ctl.outage_for(Duration::from_millis(400));
        }
        fs.write(fh, (i * (128 << 10)) as u64, chunk).await.unwrap();
    }
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
    assert!(ctl.failures() > 0, "the outage failed some requests");
    assert!(count(&fs, "shrinkfs_store_retries_total") > 0);
    assert!(count(&fs, "shrinkfs_store_request_duration_seconds_count{kind=\"put_part\",outcome=\"ok\"}") >= 3);
    let (again, _) = mount(&mem, quick());
    assert!(read(&again, "big").await.unwrap() == bytes, "every byte, in order, after the close succeeded");
}

/// Found by a black-box probe: an fsync during an outage failed only after three retry timeouts
/// (the failed part's, then the dropped upload's abort, then a new upload's start), and every
/// write past the first part waited one. Writes wait for one failed part at most, the fsync
/// fails one timeout after it began, and the retry after the outage stores every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_fsync_during_an_outage_fails_after_one_retry_timeout_not_three() {
    let mem = Arc::new(InMemory::new());
    let (fs, ctl) = mount(&mem, quick());
    let bytes = data(20 << 20, 7);
    let (_, fh) = fs.create(ROOT, "big", 0o644, 0, 0).await.unwrap();
    ctl.set_down(true);
    let began = std::time::Instant::now();
    for (i, chunk) in bytes.chunks(128 << 10).enumerate() {
        fs.write(fh, (i * (128 << 10)) as u64, chunk).await.unwrap();
    }
    let writes = began.elapsed();
    assert!(writes < Duration::from_millis(2500), "writes took {writes:?}: one failed part at most, not one per write");
    let began = std::time::Instant::now();
    assert_eq!(fs.fsync(fh).await.unwrap_err().errno(), libc::EIO);
    let took = began.elapsed();
    assert!(took < Duration::from_millis(1800), "failed after {took:?}, against a retry timeout of 1 s");
    ctl.set_down(false);
    fs.fsync(fh).await.unwrap();
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
    let (again, _) = mount(&mem, quick());
    assert!(read(&again, "big").await.unwrap() == bytes);
    // The store goes down while parts are on their way: the fsync fails once they have (the
    // dropped upload is aborted behind it, and no new one is started).
    ctl.delay(Op::PutPart, Duration::from_millis(400));
    let (_, fh) = fs.create(ROOT, "second", 0o644, 0, 0).await.unwrap();
    for (i, chunk) in bytes.chunks(128 << 10).enumerate() {
        fs.write(fh, (i * (128 << 10)) as u64, chunk).await.unwrap();
    }
    ctl.set_down(true);
    let began = std::time::Instant::now();
    assert_eq!(fs.fsync(fh).await.unwrap_err().errno(), libc::EIO);
    let took = began.elapsed();
    assert!(took < Duration::from_millis(2000), "failed after {took:?}, against a retry timeout of 1 s");
    ctl.set_down(false);
    ctl.delay(Op::PutPart, Duration::ZERO);
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
    assert!(read(&again, "second").await.unwrap() == bytes);
}

/// Parts of an upload are shipped from the encoded bytes kept in memory only while the budget's
/// share for such bytes has room (a probe found 8 writers holding 200 MiB outside a 64 MiB
/// limit); past it they are read back from the spill. The object is whole either way, and all
/// the room comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_ship_whole_whether_their_bytes_were_kept_in_memory_or_not() {
    let in_use = |fs: &Fs| -> u64 {
        let line = fs.state_line();
        line.split(" of ").next().unwrap().rsplit(", ").next().unwrap().parse().unwrap()
    };
    for io_budget in [256u64 << 20, 2 << 20] {
        let mem = Arc::new(InMemory::new());
        let parts = Arc::new(common::MemoryParts::new(mem.clone()));
        let backend = Backend { store: mem.clone(), pages: None, multipart: Some(parts) };
        let bucket = Bucket::stack(backend, &Path::from("pre"), "memory", &StoreConfig::default());
        let fs = Fs::new(bucket, FsConfig { io_budget, ..config() }, Services::default());
        let bytes = data(40 << 20, 9);
        write(&fs, "big", &bytes).await.unwrap();
        assert_eq!(in_use(&fs), 0, "budget {io_budget}: every byte of room given back");
        assert!(read(&fs, "big").await.unwrap() == bytes, "budget {io_budget}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_longer_than_the_retries_fails_fsync_and_close_and_keeps_the_bytes() {
    let mem = Arc::new(InMemory::new());
    let (fs, ctl) = mount(&mem, RetryPolicy { max_retries: Some(1), ..quick() });
    let bytes = data(20 << 20, 6);
    let (_, fh) = fs.create(ROOT, "big", 0o644, 0, 0).await.unwrap();
    for (i, chunk) in bytes.chunks(128 << 10).enumerate() {
        fs.write(fh, (i * (128 << 10)) as u64, chunk).await.unwrap();
    }
    ctl.set_down(true);
    assert_eq!(fs.fsync(fh).await.unwrap_err().errno(), libc::EIO);
    assert_eq!(fs.flush(fh).await.unwrap_err().errno(), libc::EIO);
    assert!(
        count(&fs, "shrinkfs_store_request_duration_seconds_count{kind=\"put_part\",outcome=\"error\"}") >= 1
            || count(&fs, "shrinkfs_store_request_duration_seconds_count{kind=\"multipart_start\",outcome=\"error\"}")
                >= 1
    );
    assert!(
        !mem.list_with_delimiter(Some(&Path::from("pre")))
            .await
            .unwrap()
            .objects
            .iter()
            .any(|o| o.location.as_ref() == "pre/big")
    );
    ctl.set_down(false);
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
    let (again, _) = mount(&mem, quick());
    assert!(read(&again, "big").await.unwrap() == bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_requests_bounds_the_requests_in_flight() {
    let mem = Arc::new(InMemory::new());
    for i in 0..8 {
        mem.put(&Path::from(format!("pre/o{i}")), vec![1u8; 10].into()).await.unwrap();
    }
    let ctl = Arc::new(FaultControl::default());
    ctl.delay(Op::Head, Duration::from_millis(100));
    let parts = Arc::new(common::MemoryParts::new(mem.clone()));
    let backend = Backend { store: mem.clone(), pages: None, multipart: Some(parts) };
    let cfg = StoreConfig { max_requests: 2, retry: quick(), ..StoreConfig::default() };
    let bucket = Bucket::stack(FaultStore::layer(backend, ctl.clone()), &Path::from("pre"), "limited", &cfg);
    let started = std::time::Instant::now();
    let heads = (0..8).map(|i| {
        let store = bucket.store.clone();
        async move { store.head(&Path::from(format!("o{i}"))).await }
    });
    for head in futures::future::join_all(heads).await {
        head.unwrap();
    }
    // Eight 100 ms requests, two at a time, cannot finish in less than four rounds.
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(400), "8 requests with 2 in flight took {took:?}");
    assert_eq!(ctl.calls(Op::Head), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_busy_storing_still_counts_as_dirty() {
    let mem = Arc::new(InMemory::new());
    let (fs, ctl) = mount(&mem, quick());
    let fs = Arc::new(fs);
    let bytes = data(300_000, 6);
    let (_, fh) = fs.create(ROOT, "f", 0o644, 0, 0).await.unwrap();
    fs.write(fh, 0, &bytes).await.unwrap();
    assert_eq!(fs.dirty_bytes(), 300_000);
    // The close holds the file while its slow PUT runs: a scrape then must not read it as clean.
    ctl.delay(Op::Put, Duration::from_millis(400));
    let closing = tokio::spawn({
        let fs = fs.clone();
        async move { fs.flush(fh).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!closing.is_finished(), "the PUT is still running");
    assert_eq!(fs.dirty_bytes(), 300_000);
    closing.await.unwrap().unwrap();
    assert_eq!(fs.dirty_bytes(), 0);
    fs.release(fh).await.unwrap();
}
