//! Deletes done behind their unlinks (`--deletes-behind`, docs/SEMANTICS.md, "unlink"): an
//! unlink on an S3 or memory bucket returns once the DELETE is queued, and nothing after it — a
//! lookup, a listing, a new file or a rename onto the name, rmdir, another mount after fsync of
//! the directory — sees the file; a delete that fails is reported by the next fsync of the
//! directory, and the unlinks after it wait for their deletes again.
mod common;

use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use shrinkfs_fuse::inode::ROOT;
use shrinkfs_fuse::metrics::names::DELETES_BEHIND;
use shrinkfs_fuse::store::fault::{FaultControl, FaultStore, Op};
use shrinkfs_fuse::store::{Backend, Bucket, RetryPolicy, StoreConfig};
use shrinkfs_fuse::{Error, Fs, FsConfig, NamespaceConfig, Services};

const TTL: Duration = Duration::from_millis(300);

/// How long each DELETE takes in these tests: far longer than anything else a test does.
const SLOW: Duration = Duration::from_millis(1500);

/// A mount over `store` through a fault layer, never retrying, at most `behind` deletes queued.
fn faulty(store: &Arc<InMemory>, behind: usize) -> (Fs, Arc<FaultControl>) {
    faulty_over(Backend::plain(store.clone()), behind, NamespaceConfig::default())
}

/// [`faulty`] over `backend`, with `ns` but for its TTLs.
fn faulty_over(backend: Backend, behind: usize, ns: NamespaceConfig) -> (Fs, Arc<FaultControl>) {
    let ctl = Arc::new(FaultControl::default());
    let backend = FaultStore::layer(backend, ctl.clone());
    let cfg = StoreConfig { retry: RetryPolicy::NONE, ..Default::default() };
    let bucket = Bucket::stack(backend, &Path::from("pre"), "faulty", &cfg);
    let cfg = FsConfig {
        namespace: NamespaceConfig { metadata_ttl: TTL, negative_ttl: TTL, ..ns },
        deletes_behind: behind,
        ..FsConfig::default()
    };
    (Fs::new(bucket, cfg, Services::default()), ctl)
}

async fn write(fs: &Fs, parent: u64, name: &str, data: &[u8]) {
    let (_, fh) = fs.create(parent, name, 0o644, 0, 0).await.unwrap();
    fs.write(fh, 0, data).await.unwrap();
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
}

async fn read(fs: &Fs, parent: u64, name: &str) -> Vec<u8> {
    let ino = fs.lookup(parent, name).await.unwrap().ino;
    let fh = fs.open(ino, false, false).await.unwrap();
    let got = fs.read(fh, 0, 1 << 20).await.unwrap().to_vec();
    fs.release(fh).await.unwrap();
    got
}

async fn names(fs: &Fs, dir: u64) -> Vec<String> {
    common::entries(fs, dir).await.into_iter().map(|(n, _)| n).collect()
}

/// Whether the bucket holds `key` (under the mount's prefix) now.
async fn held(store: &InMemory, key: &str) -> bool {
    store.head(&Path::from(format!("pre/{key}"))).await.is_ok()
}

/// What the bucket holds under `key`, decoded.
async fn stored(store: &InMemory, key: &str) -> Vec<u8> {
    let obj = store.get(&Path::from(format!("pre/{key}"))).await.unwrap().bytes().await.unwrap();
    shrinkfs_codec::decode_all(&obj, None, &[]).unwrap()
}

/// Asserts the bucket holds no object at all.
async fn assert_empty(store: &InMemory) {
    let left: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(store.list(None)).await.unwrap();
    assert!(left.is_empty(), "{left:?}");
}

/// Unlinks `name`: the first delete of a mount runs in its unlink, so a bucket that refuses
/// deletes says so; later ones run behind.
async fn first_unlink_waits(fs: &Fs, store: &InMemory, name: &str) {
    fs.unlink(ROOT, name).await.unwrap();
    assert!(!held(store, name).await, "the mount's first delete is done when its unlink returns");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlink_returns_before_its_delete_and_nothing_after_it_sees_the_file() {
    let store = Arc::new(InMemory::new());
    let (fs, ctl) = faulty(&store, 64);
    for n in ["a", "b", "c", "s"] {
        write(&fs, ROOT, n, n.repeat(100).as_bytes()).await;
    }
    ctl.delay(Op::Delete, SLOW);
    first_unlink_waits(&fs, &store, "a").await;
    fs.unlink(ROOT, "b").await.unwrap();
    fs.unlink(ROOT, "c").await.unwrap();
    assert!(held(&store, "b").await && held(&store, "c").await, "their deletes run behind the unlinks");
    // Past the TTL the mount lists and asks the store again: the queued keys stay gone (a lookup
    // of one waits for its delete).
    tokio::time::sleep(TTL + Duration::from_millis(50)).await;
    assert!(held(&store, "b").await, "still being deleted");
    assert_eq!(names(&fs, ROOT).await, ["s"]);
    assert!(matches!(fs.lookup(ROOT, "b").await, Err(Error::NotFound)));
    // A new file under the name, and a rename onto the other: each waits for the delete, so the
    // late DELETE never removes what came after it.
    write(&fs, ROOT, "b", b"new b").await;
    fs.rename(ROOT, "s", ROOT, "c", false).await.unwrap();
    fs.fsyncdir(ROOT).await.unwrap();
    assert_eq!(stored(&store, "b").await, b"new b");
    assert_eq!(stored(&store, "c").await, "s".repeat(100).as_bytes());
    assert!(!held(&store, "s").await);
    assert_eq!(read(&fs, ROOT, "c").await, "s".repeat(100).as_bytes());
    assert_eq!(fs.metrics().value(DELETES_BEHIND), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmdir_sees_a_directory_emptied_by_deletes_still_running() {
    let store = Arc::new(InMemory::new());
    let (fs, ctl) = faulty(&store, 64);
    write(&fs, ROOT, "first", b"1").await;
    let d = fs.mkdir(ROOT, "d", 0o755, 0, 0).await.unwrap().ino;
    for n in ["x", "y", "z"] {
        write(&fs, d, n, b"in d").await;
    }
    ctl.delay(Op::Delete, SLOW);
    first_unlink_waits(&fs, &store, "first").await;
    fs.unlink(d, "x").await.unwrap();
    fs.unlink(d, "y").await.unwrap();
    assert!(matches!(fs.rmdir(ROOT, "d").await, Err(Error::NotEmpty)), "z is still there");
    fs.unlink(d, "z").await.unwrap();
    fs.rmdir(ROOT, "d").await.unwrap();
    assert!(matches!(fs.lookup(ROOT, "d").await, Err(Error::NotFound)));
    fs.fsyncdir(ROOT).await.unwrap();
    assert_empty(&store).await;
}

/// The same on a bucket listed a page at a time (S3), pages of 3 entries and listings asking for
/// 2: a page whose keys are all queued for deletion comes back empty with a token, and neither
/// rmdir's emptiness check nor a listing of the directory stops there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_paged_bucket_pages_of_queued_keys_are_read_past() {
    let store = Arc::new(InMemory::new());
    let pages = Arc::new(common::PagedMemory { store: store.clone(), cap: 3 });
    let backend = Backend { store: store.clone(), pages: Some(pages), multipart: None };
    let (fs, ctl) = faulty_over(backend, 64, NamespaceConfig { page_keys: 2, ..NamespaceConfig::default() });
    write(&fs, ROOT, "first", b"1").await;
    let d = fs.mkdir(ROOT, "d", 0o755, 0, 0).await.unwrap().ino;
    for k in 0..6 {
        write(&fs, d, &format!("x{k}"), b"in d").await;
    }
    ctl.delay(Op::Delete, SLOW);
    first_unlink_waits(&fs, &store, "first").await;
    for k in 0..5 {
        fs.unlink(d, &format!("x{k}")).await.unwrap();
    }
    assert!(matches!(fs.rmdir(ROOT, "d").await, Err(Error::NotEmpty)), "x5 is still there");
    tokio::time::sleep(TTL + Duration::from_millis(50)).await;
    assert_eq!(names(&fs, d).await, ["x5"]);
    fs.unlink(d, "x5").await.unwrap();
    fs.rmdir(ROOT, "d").await.unwrap();
    fs.fsyncdir(ROOT).await.unwrap();
    assert_empty(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_that_fails_behind_its_unlink_is_reported_and_the_next_unlinks_wait_again() {
    let store = Arc::new(InMemory::new());
    let (fs, ctl) = faulty(&store, 64);
    for n in ["a", "b", "c"] {
        write(&fs, ROOT, n, n.as_bytes()).await;
    }
    first_unlink_waits(&fs, &store, "a").await;
    ctl.fail_next(Op::Delete, 1);
    fs.unlink(ROOT, "b").await.unwrap();
    let e = fs.fsyncdir(ROOT).await.unwrap_err();
    assert_eq!(e.errno(), libc::EIO);
    assert!(e.to_string().contains("first: b:"), "names the key: {e}");
    assert!(fs.fsyncdir(ROOT).await.is_ok(), "reported once");
    assert!(held(&store, "b").await, "the object is still in the bucket");
    tokio::time::sleep(TTL + Duration::from_millis(50)).await;
    assert_eq!(read(&fs, ROOT, "b").await, b"b", "and the file is back");
    // After a failure, deletes run in their unlinks again: the next failure is the unlink's.
    ctl.fail_next(Op::Delete, 1);
    assert!(fs.unlink(ROOT, "c").await.is_err());
    assert!(held(&store, "c").await);
    fs.unlink(ROOT, "c").await.unwrap();
    assert!(!held(&store, "c").await, "that one succeeded in its unlink too");
    fs.unlink(ROOT, "b").await.unwrap();
    fs.flush_all().await.unwrap();
    assert!(!held(&store, "b").await);
}

/// With listings kept (`--listing-ttl`, which `--metadata-ttl indefinite` sets with deletes
/// behind), names removed while DELETEs are queued leave the kept listing at once — files, a
/// directory emptied so, the old name of a rename — and a queued DELETE that fails brings its
/// name back into listings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_listings_leave_out_names_whose_deletes_are_queued_and_show_them_again_if_one_fails() {
    let store = Arc::new(InMemory::new());
    let ns = NamespaceConfig { listing_ttl: Duration::from_secs(60), ..NamespaceConfig::default() };
    let (fs, ctl) = faulty_over(Backend::plain(store.clone()), 64, ns);
    let p = fs.mkdir(ROOT, "p", 0o755, 0, 0).await.unwrap().ino;
    let d = fs.mkdir(p, "d", 0o755, 0, 0).await.unwrap().ino;
    for n in ["a", "b"] {
        write(&fs, d, n, b"in d").await;
    }
    write(&fs, p, "x", b"x").await;
    write(&fs, p, "z", b"z").await;
    write(&fs, ROOT, "first", b"1").await;
    write(&fs, ROOT, "other", b"2").await;
    first_unlink_waits(&fs, &store, "first").await;
    // These DELETEs run behind, slowly; the requests after them do not wait.
    ctl.delay(Op::Delete, 2 * SLOW);
    fs.unlink(d, "a").await.unwrap();
    fs.unlink(d, "b").await.unwrap();
    fs.unlink(ROOT, "other").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    ctl.delay(Op::Delete, Duration::ZERO);
    fs.rmdir(p, "d").await.unwrap();
    fs.rename(p, "x", p, "y", false).await.unwrap();
    assert!(held(&store, "other").await, "a delete is still queued");
    let plain: Vec<String> = {
        let fh = fs.opendir(p).await.unwrap();
        let got = fs.readdir(fh, p, 0).await.unwrap();
        fs.releasedir(fh);
        got.into_iter().map(|(_, e)| e.name).filter(|n| n != "." && n != "..").collect()
    };
    assert_eq!(plain, ["y", "z"], "readdir from the kept listing");
    assert_eq!(names(&fs, p).await, ["y", "z"], "and READDIRPLUS");
    fs.fsyncdir(ROOT).await.unwrap();
    // A queued DELETE that fails: the file is still in the bucket, and listed again.
    fs.unlink(p, "z").await.unwrap();
    assert_eq!(names(&fs, p).await, ["y"]);
    // z's DELETE done first, so the one that fails is y's.
    fs.fsyncdir(ROOT).await.unwrap();
    ctl.fail_next(Op::Delete, 1);
    fs.unlink(p, "y").await.unwrap();
    assert!(fs.fsyncdir(ROOT).await.is_err(), "the failure is reported");
    assert!(held(&store, "p/y").await);
    assert_eq!(names(&fs, p).await, ["y"], "back in the listing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushing_at_unmount_waits_for_the_deletes_behind_and_no_more_than_the_limit_are_queued() {
    let store = Arc::new(InMemory::new());
    let (fs, ctl) = faulty(&store, 4);
    let d = fs.mkdir(ROOT, "d", 0o755, 0, 0).await.unwrap().ino;
    for k in 0..13 {
        write(&fs, d, &format!("f{k:02}"), b"x").await;
    }
    ctl.delay(Op::Delete, Duration::from_millis(100));
    fs.unlink(d, "f00").await.unwrap();
    let mut most = 0;
    for k in 1..13 {
        fs.unlink(d, &format!("f{k:02}")).await.unwrap();
        most = most.max(fs.metrics().value(DELETES_BEHIND));
    }
    assert_eq!(most, 4, "at most --deletes-behind queued");
    // What unmounting and a stop signal call first: another mount then sees them gone.
    let (other, _) = faulty(&store, 64);
    fs.flush_all().await.unwrap();
    assert_eq!(fs.metrics().value(DELETES_BEHIND), 0);
    assert!(names(&other, d_ino(&other).await).await.is_empty());
}

async fn d_ino(fs: &Fs) -> u64 {
    fs.lookup(ROOT, "d").await.unwrap().ino
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_deletes_behind_every_unlink_waits_for_its_delete() {
    let store = Arc::new(InMemory::new());
    let (fs, ctl) = faulty(&store, 0);
    for n in ["a", "b"] {
        write(&fs, ROOT, n, b"x").await;
    }
    ctl.delay(Op::Delete, Duration::from_millis(100));
    for n in ["a", "b"] {
        fs.unlink(ROOT, n).await.unwrap();
        assert!(!held(&store, n).await);
    }
}

/// A queued DELETE whose task ends before it was answered (the runtime stops under it) is a
/// failure like any other: reported by the next fsync of a directory, never taken as done.
#[test]
fn a_queued_delete_cut_short_is_reported_not_taken_as_done() {
    let store = Arc::new(InMemory::new());
    let first = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (fs, ctl) = first.block_on(async {
        let (fs, ctl) = faulty(&store, 64);
        for n in ["a", "b"] {
            write(&fs, ROOT, n, b"x").await;
        }
        first_unlink_waits(&fs, &store, "a").await;
        ctl.delay(Op::Delete, SLOW);
        fs.unlink(ROOT, "b").await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        (fs, ctl)
    });
    first.shutdown_timeout(Duration::from_millis(100));
    ctl.delay(Op::Delete, Duration::ZERO);
    let second = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    second.block_on(async {
        assert!(held(&store, "b").await);
        let e = fs.fsyncdir(ROOT).await.unwrap_err();
        assert!(e.to_string().contains("never sent"), "{e}");
        assert_eq!(fs.metrics().value(DELETES_BEHIND), 0);
    });
}
