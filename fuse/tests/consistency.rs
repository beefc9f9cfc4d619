//! The consistency model of docs/SEMANTICS.md ("Consistency"), line by line, with two mounts
//! (two `Fs`) of one bucket: what a mount sees of its own changes, what another mount sees of
//! them and when, and what two writers of one file get.

mod common;

use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use object_store::path::Path;
use shrinkfs_fuse::inode::ROOT;
use shrinkfs_fuse::store::Bucket;
use shrinkfs_fuse::{Error, Fs, FsConfig, NamespaceConfig, Services, SetAttr};

/// The TTLs of the mounts under test: short, so "after the TTL" is a short sleep.
const TTL: Duration = Duration::from_millis(300);

fn mount_with(store: &Arc<InMemory>, metadata_ttl: Duration, negative_ttl: Duration) -> Fs {
    let cfg = FsConfig {
        namespace: NamespaceConfig { metadata_ttl, negative_ttl, ..NamespaceConfig::default() },
        ..FsConfig::default()
    };
    Fs::new(Bucket::new(store.clone(), Path::from("pre"), "memory"), cfg, Services::default())
}

fn mount(store: &Arc<InMemory>) -> Fs {
    mount_with(store, TTL, TTL)
}

async fn past_ttl() {
    tokio::time::sleep(TTL + Duration::from_millis(50)).await;
}

/// Writes `data` as file `name` of `parent` through a new handle and closes it.
async fn write(fs: &Fs, parent: u64, name: &str, data: &[u8]) {
    let ino = match fs.lookup(parent, name).await {
        Ok(a) => {
            let fh = fs.open(a.ino, true, true).await.unwrap();
            fs.write(fh, 0, data).await.unwrap();
            fs.flush(fh).await.unwrap();
            fs.release(fh).await.unwrap();
            return;
        }
        Err(_) => fs.create(parent, name, 0o644, 0, 0).await.unwrap(),
    };
    let (_, fh) = ino;
    fs.write(fh, 0, data).await.unwrap();
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
}

async fn read(fs: &Fs, ino: u64) -> Result<Vec<u8>, Error> {
    let fh = fs.open(ino, false, false).await?;
    let got = fs.read(fh, 0, 1 << 20).await;
    fs.release(fh).await?;
    Ok(got?.to_vec())
}

async fn names(fs: &Fs, dir: u64) -> Vec<String> {
    common::entries(fs, dir).await.into_iter().map(|(n, size)| format!("{n}:{size}")).collect()
}

/// Line 8: with deletes behind unlinks, a file removed here is gone for another mount once this
/// mount's fsync of its directory has returned (the DELETE may run behind the unlink until then),
/// at most the TTL later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_removed_here_is_gone_elsewhere_once_the_directory_is_synced_here() {
    use shrinkfs_fuse::store::fault::{FaultControl, FaultStore, Op};
    use shrinkfs_fuse::store::{Backend, StoreConfig};
    let store = Arc::new(InMemory::new());
    let ctl = Arc::new(FaultControl::default());
    let backend = FaultStore::layer(Backend::plain(store.clone()), ctl.clone());
    let bucket = Bucket::stack(backend, &Path::from("pre"), "slow deletes", &StoreConfig::unretried());
    let cfg = FsConfig {
        namespace: NamespaceConfig { metadata_ttl: TTL, negative_ttl: TTL, ..NamespaceConfig::default() },
        deletes_behind: 64,
        ..FsConfig::default()
    };
    let (a, b) = (Fs::new(bucket, cfg, Services::default()), mount(&store));
    let d = a.mkdir(ROOT, "d", 0o755, 0, 0).await.unwrap().ino;
    for n in ["f", "g"] {
        write(&a, d, n, n.as_bytes()).await;
    }
    let bd = b.lookup(ROOT, "d").await.unwrap().ino;
    let g = b.lookup(bd, "g").await.unwrap().ino;
    ctl.delay(Op::Delete, Duration::from_millis(800));
    a.unlink(d, "f").await.unwrap();
    a.unlink(d, "g").await.unwrap();
    past_ttl().await;
    assert!(b.lookup(bd, "g").await.is_ok(), "its DELETE is still running behind the unlink");
    a.fsyncdir(ROOT).await.unwrap();
    past_ttl().await;
    assert!(matches!(b.getattr(g).await, Err(Error::NotFound)));
    assert!(matches!(b.lookup(bd, "g").await, Err(Error::NotFound)));
    assert!(names(&b, bd).await.is_empty());
}

/// One mount: every change is seen by the same mount at once — lookups, attributes, contents
/// and listings — whatever the TTLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_sees_its_own_changes_at_once() {
    let store = Arc::new(InMemory::new());
    let a = mount_with(&store, Duration::MAX, Duration::MAX);
    assert_eq!(names(&a, ROOT).await, Vec::<String>::new());
    assert!(matches!(a.lookup(ROOT, "f").await, Err(Error::NotFound)), "absent, and now known absent");
    write(&a, ROOT, "f", b"one").await;
    let f = a.lookup(ROOT, "f").await.expect("a name known absent, then made here, is found");
    assert_eq!(f.size, 3);
    write(&a, ROOT, "f", b"second").await;
    assert_eq!(a.getattr(f.ino).await.unwrap().size, 6);
    assert_eq!(read(&a, f.ino).await.unwrap(), b"second");
    assert_eq!(names(&a, ROOT).await, ["f:6"]);
    a.rename(ROOT, "f", ROOT, "g", false).await.unwrap();
    assert!(matches!(a.lookup(ROOT, "f").await, Err(Error::NotFound)));
    assert_eq!(a.lookup(ROOT, "g").await.unwrap().size, 6);
    a.unlink(ROOT, "g").await.unwrap();
    assert!(matches!(a.lookup(ROOT, "g").await, Err(Error::NotFound)));
    assert_eq!(names(&a, ROOT).await, Vec::<String>::new());
}

/// One mount: a name it made stays found after the kernel forgets the inode (memory pressure,
/// `drop_caches`), even where a listing or a miss said it was absent and the TTLs never expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_made_here_is_found_after_the_kernel_forgets_it() {
    let store = Arc::new(InMemory::new());
    let a = mount_with(&store, Duration::MAX, Duration::MAX);
    assert_eq!(names(&a, ROOT).await, Vec::<String>::new(), "a complete listing: nothing");
    for name in ["f", "d", "moved"] {
        assert!(matches!(a.lookup(ROOT, name).await, Err(Error::NotFound)), "{name} known absent");
    }
    write(&a, ROOT, "f", b"one").await;
    let d = a.mkdir(ROOT, "d", 0o755, 0, 0).await.unwrap();
    write(&a, d.ino, "inner", b"two").await;
    a.rename(d.ino, "inner", ROOT, "moved", false).await.unwrap();
    for name in ["f", "d", "moved"] {
        let i = a.lookup(ROOT, name).await.unwrap();
        a.forget(i.ino, u64::MAX);
    }
    let f = a.lookup(ROOT, "f").await.expect("a file made here, its inode forgotten");
    assert_eq!(read(&a, f.ino).await.unwrap(), b"one");
    a.lookup(ROOT, "d").await.expect("a directory made here, its inode forgotten");
    let m = a.lookup(ROOT, "moved").await.expect("a name moved here, its inode forgotten");
    assert_eq!(read(&a, m.ino).await.unwrap(), b"two");
}

/// A local-directory store that counts the reads of records (a `get` with `head: true`, which
/// brings the extended attribute beside the object) and of metadata alone (`head`).
#[derive(Debug)]
struct CountingLocal {
    inner: Arc<shrinkfs_fuse::localstore::LocalStore>,
    records: std::sync::atomic::AtomicU64,
    heads: std::sync::atomic::AtomicU64,
}

impl std::fmt::Display for CountingLocal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CountingLocal({})", self.inner)
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for CountingLocal {
    async fn put_opts(
        &self,
        l: &Path,
        p: object_store::PutPayload,
        o: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner.put_opts(l, p, o).await
    }
    async fn put_multipart_opts(
        &self,
        l: &Path,
        o: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(l, o).await
    }
    async fn get_opts(&self, l: &Path, o: object_store::GetOptions) -> object_store::Result<object_store::GetResult> {
        if o.head {
            self.records.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        self.inner.get_opts(l, o).await
    }
    async fn head(&self, l: &Path) -> object_store::Result<object_store::ObjectMeta> {
        self.heads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.head(l).await
    }
    async fn delete(&self, l: &Path) -> object_store::Result<()> {
        self.inner.delete(l).await
    }
    fn list(
        &self,
        p: Option<&Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(p)
    }
    async fn list_with_delimiter(&self, p: Option<&Path>) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(p).await
    }
    async fn copy(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        self.inner.copy(from, to).await
    }
    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        self.inner.copy_if_not_exists(from, to).await
    }
}

/// One mount of a local-directory bucket: a file's attributes outlive the kernel's forget (same
/// inode, no request within the TTL), and after the TTL its unchanged version is confirmed from
/// the object file's metadata alone, without reading its record again (an extended attribute,
/// which ext4 keeps in a block of its own: one more disk read when cold); another mount's new
/// version, and its removal, are seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_file_is_revalidated_from_its_metadata_alone_on_a_local_bucket() {
    use std::sync::atomic::Ordering::SeqCst;
    let dir = tempfile::tempdir().unwrap();
    let local = Arc::new(shrinkfs_fuse::localstore::LocalStore::new(dir.path()).unwrap());
    let counted =
        Arc::new(CountingLocal { inner: local.clone(), records: Default::default(), heads: Default::default() });
    let mut bucket = Bucket::new(counted.clone(), Path::default(), "local");
    bucket.local = Some(local.clone());
    let cfg = FsConfig {
        namespace: NamespaceConfig { metadata_ttl: TTL, negative_ttl: TTL, ..NamespaceConfig::default() },
        ..FsConfig::default()
    };
    let a = Fs::new(bucket, cfg.clone(), Services::default());
    let b = Fs::new(Bucket::new(local, Path::default(), "local"), cfg, Services::default());
    write(&a, ROOT, "f", b"hello").await;
    let f = a.lookup(ROOT, "f").await.unwrap();
    a.forget(f.ino, u64::MAX);
    let counts = || (counted.records.load(SeqCst), counted.heads.load(SeqCst));

    let before = counts();
    let kept = a.lookup(ROOT, "f").await.unwrap();
    assert_eq!((kept.ino, kept.size), (f.ino, 5), "the inode and its attributes were kept");
    assert_eq!(counts(), before, "no request within the TTL");
    a.forget(f.ino, u64::MAX);

    past_ttl().await;
    let before = counts();
    let again = a.lookup(ROOT, "f").await.unwrap();
    assert_eq!((again.ino, again.size), (f.ino, 5));
    assert_eq!(counts(), (before.0, before.1 + 1), "one HEAD of the metadata, no record read");
    assert_eq!(read(&a, again.ino).await.unwrap(), b"hello");
    a.forget(f.ino, u64::MAX);

    write(&b, ROOT, "f", b"changed!").await;
    past_ttl().await;
    let changed = a.lookup(ROOT, "f").await.unwrap();
    assert_eq!(changed.size, 8, "another mount's new version");
    assert_eq!(read(&a, changed.ino).await.unwrap(), b"changed!");
    a.forget(changed.ino, u64::MAX);

    b.unlink(ROOT, "f").await.unwrap();
    past_ttl().await;
    assert!(matches!(a.lookup(ROOT, "f").await, Err(Error::NotFound)), "another mount's removal");
}

/// Two mounts: a name the reader has never asked for is seen as soon as the writer's close
/// returns; a name it holds as absent (a miss, or missing from a complete listing) is seen once
/// the negative TTL has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_file_shows_on_another_mount_at_once_or_after_the_negative_ttl() {
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount(&store), mount(&store));
    let da = a.mkdir(ROOT, "d", 0o755, 0, 0).await.unwrap().ino;
    write(&a, da, "seed", b"x").await;
    let db = b.lookup(ROOT, "d").await.unwrap().ino;

    write(&a, da, "never-asked", b"hello").await;
    assert_eq!(b.lookup(db, "never-asked").await.unwrap().size, 5, "visible once close returned");

    assert!(matches!(b.lookup(db, "missed").await, Err(Error::NotFound)));
    assert_eq!(names(&b, db).await, ["never-asked:5", "seed:1"], "listed completely");
    write(&a, da, "missed", b"late").await;
    write(&a, da, "unlisted", b"late").await;
    assert!(matches!(b.lookup(db, "missed").await, Err(Error::NotFound)), "a miss holds for the negative TTL");
    assert!(matches!(b.lookup(db, "unlisted").await, Err(Error::NotFound)), "so does a complete listing");
    past_ttl().await;
    assert_eq!(b.lookup(db, "missed").await.unwrap().size, 4);
    assert_eq!(b.lookup(db, "unlisted").await.unwrap().size, 4);
}

/// Two mounts: a listing started after the writer's close shows the new names and sizes at once
/// (every opendir asks the store; an entry whose ETag changed is asked again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_shows_every_change_closed_before_it_started() {
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount_with(&store, Duration::from_secs(60), Duration::from_secs(60)), mount(&store));
    write(&a, ROOT, "f", b"one").await;
    assert_eq!(names(&b, ROOT).await, ["f:3"]);
    write(&a, ROOT, "f", b"three").await;
    write(&a, ROOT, "g", b"new").await;
    assert_eq!(names(&b, ROOT).await, ["f:5", "g:3"], "within the TTL, the listing is fresh");
    a.unlink(ROOT, "g").await.unwrap();
    assert_eq!(names(&b, ROOT).await, ["f:5"]);
}

/// The listing TTL of the mounts that keep listings: long enough that a test's steps between two
/// listings never outlast it, even on a busy machine.
const LISTING_TTL: Duration = Duration::from_secs(2);

/// A mount of `backend` that trusts attributes, absent names and complete listings for
/// [`LISTING_TTL`] (`--listing-ttl`).
fn listing_mount(backend: shrinkfs_fuse::store::Backend, ns: NamespaceConfig) -> Fs {
    let bucket = Bucket::stack(backend, &Path::from("pre"), "listings", &Default::default());
    let namespace =
        NamespaceConfig { metadata_ttl: LISTING_TTL, negative_ttl: LISTING_TTL, listing_ttl: LISTING_TTL, ..ns };
    Fs::new(bucket, FsConfig { namespace, ..FsConfig::default() }, Services::default())
}

/// The names `readdir` gives for directory `dir`, "." and ".." left out.
async fn listed(fs: &Fs, dir: u64) -> Vec<String> {
    let fh = fs.opendir(dir).await.unwrap();
    let got = fs.readdir(fh, dir, 0).await.unwrap();
    fs.releasedir(fh);
    got.into_iter().map(|(_, e)| e.name).filter(|n| n != "." && n != "..").collect()
}

/// Line 3 with a listing TTL (`--listing-ttl`): a directory's complete listing answers the next
/// listings here for that TTL, showing every change this mount makes at once (a file made,
/// renamed, removed; a directory made, removed) but another mount's new and removed names only
/// once the TTL has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn within_the_listing_ttl_listings_show_this_mounts_changes_and_not_another_mounts() {
    let store = Arc::new(InMemory::new());
    let a = mount(&store);
    let b = listing_mount(shrinkfs_fuse::store::Backend::plain(store.clone()), NamespaceConfig::default());
    write(&a, ROOT, "f", b"one").await;
    write(&a, ROOT, "g", b"two").await;
    assert_eq!(names(&b, ROOT).await, ["f:3", "g:3"]);
    write(&a, ROOT, "h", b"another's").await;
    a.unlink(ROOT, "g").await.unwrap();
    write(&b, ROOT, "mine", b"12345").await;
    b.rename(ROOT, "f", ROOT, "f2", false).await.unwrap();
    b.mkdir(ROOT, "sub", 0o755, 0, 0).await.unwrap();
    assert_eq!(listed(&b, ROOT).await, ["f2", "g", "mine", "sub"], "another mount's changes not yet");
    b.rmdir(ROOT, "sub").await.unwrap();
    b.unlink(ROOT, "mine").await.unwrap();
    assert_eq!(names(&b, ROOT).await, ["f2:3", "g:3"]);
    tokio::time::sleep(LISTING_TTL + Duration::from_millis(50)).await;
    assert_eq!(names(&b, ROOT).await, ["f2:3", "h:9"], "after the listing TTL");
}

/// Another mount's directory "d" of five files, b0 to b4, and a mount keeping listings of a
/// store listed two entries a page (so "d", with its marker, takes three pages); returns that mount
/// and d's inode there.
async fn paged_listing_mount() -> (Fs, u64) {
    let store = Arc::new(InMemory::new());
    let pages = Arc::new(common::PagedMemory { store: store.clone(), cap: 2 });
    let backend = shrinkfs_fuse::store::Backend { store: store.clone(), pages: Some(pages), multipart: None };
    let other = mount(&store);
    let od = other.mkdir(ROOT, "d", 0o755, 0, 0).await.unwrap().ino;
    for k in 0..5 {
        write(&other, od, &format!("b{k}"), b"x").await;
    }
    let fs = listing_mount(backend, NamespaceConfig { page_keys: 2, ..NamespaceConfig::default() });
    let d = fs.lookup(ROOT, "d").await.unwrap().ino;
    (fs, d)
}

/// A listing whose pages come while this mount changes the directory records those changes
/// with it: a name made after its first page shows in the next listing answered from it, and a
/// name removed after its page was listed does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_made_while_a_listings_pages_come_are_kept_with_it() {
    let (fs, d) = paged_listing_mount().await;
    // The first page (the directory's marker and b0) is listed at the open; the rest at the
    // first readdir. "a0" sorts before every page that is still to come.
    let fh = fs.opendir(d).await.unwrap();
    write(&fs, d, "a0", b"new").await;
    fs.unlink(d, "b0").await.unwrap();
    let first: Vec<String> = fs.readdir(fh, d, 0).await.unwrap().into_iter().map(|(_, e)| e.name).collect();
    fs.releasedir(fh);
    assert_eq!(first, [".", "..", "b0", "b1", "b2", "b3", "b4"], "the open listing, as its pages were");
    assert_eq!(listed(&fs, d).await, ["a0", "b1", "b2", "b3", "b4"], "answered from the listing");
}

/// A directory renamed while its listing's pages come: the later pages list the old, emptied
/// path, so that listing is not kept, and the directory's next listing shows every entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_of_a_directory_renamed_while_its_pages_came_is_not_kept() {
    let (fs, d) = paged_listing_mount().await;
    let fh = fs.opendir(d).await.unwrap();
    fs.rename(ROOT, "d", ROOT, "e", false).await.unwrap();
    let _ = fs.readdir(fh, d, 0).await.unwrap();
    fs.releasedir(fh);
    assert_eq!(listed(&fs, d).await, ["b0", "b1", "b2", "b3", "b4"]);
}

/// Two mounts: a file the reader has looked up shows the writer's new size, contents, and its
/// removal once the metadata TTL has passed — and not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_or_removed_file_shows_on_another_mount_after_the_metadata_ttl() {
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount(&store), mount(&store));
    write(&a, ROOT, "f", b"one").await;
    let f = b.lookup(ROOT, "f").await.unwrap();
    assert_eq!(read(&b, f.ino).await.unwrap(), b"one");
    write(&a, ROOT, "f", b"second version").await;
    assert_eq!(b.getattr(f.ino).await.unwrap().size, 3, "trusted for the metadata TTL");
    past_ttl().await;
    assert_eq!(b.getattr(f.ino).await.unwrap().size, 14);
    assert_eq!(read(&b, f.ino).await.unwrap(), b"second version");
    a.unlink(ROOT, "f").await.unwrap();
    assert!(b.lookup(ROOT, "f").await.is_ok(), "still trusted");
    past_ttl().await;
    assert!(matches!(b.getattr(f.ino).await, Err(Error::NotFound)));
    assert!(matches!(b.lookup(ROOT, "f").await, Err(Error::NotFound)));
}

/// Two mounts: a file removed on one while the other still trusts its name (within the TTL)
/// fails the other's open once with ESTALE, not ENOENT, and the name is forgotten there: the
/// kernel, which keeps `O_CREAT` out of the open it sends, looks the name up again, finds no file
/// and creates one (`echo x > f` works). Found by a black-box probe: the open failed with ENOENT
/// for the whole TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_of_a_name_removed_elsewhere_within_the_ttl_fails_once_with_estale_and_forgets_it() {
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount(&store), mount_with(&store, Duration::from_secs(60), Duration::from_secs(60)));
    for (name, write_it) in [("f", true), ("g", false)] {
        write(&a, ROOT, name, b"one").await;
        let f = b.lookup(ROOT, name).await.unwrap();
        a.unlink(ROOT, name).await.unwrap();
        assert!(matches!(b.open(f.ino, write_it, write_it).await, Err(Error::Stale)), "writer: {write_it}");
        assert!(matches!(b.lookup(ROOT, name).await, Err(Error::NotFound)), "the kernel's second lookup");
        let (_, fh) = b.create(ROOT, name, 0o644, 0, 0).await.unwrap();
        b.write(fh, 0, b"made anew").await.unwrap();
        b.release(fh).await.unwrap();
        past_ttl().await;
        let g = a.lookup(ROOT, name).await.unwrap();
        assert_eq!(read(&a, g.ino).await.unwrap(), b"made anew");
    }
}

/// Two mounts: a directory's mode, owner and times changed on one show on the other once the
/// metadata TTL has passed, by a stat (getattr) or a lookup of its name — and not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_s_mode_and_times_changed_on_one_mount_show_on_another_after_the_metadata_ttl() {
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount(&store), mount(&store));
    let d = a.mkdir(ROOT, "d", 0o755, 0, 0).await.unwrap().ino;
    let seen = b.lookup(ROOT, "d").await.unwrap();
    assert_eq!(seen.perm, 0o755);
    let t = std::time::UNIX_EPOCH + Duration::from_secs(902_534_400);
    a.setattr(d, SetAttr { mode: Some(0o700), uid: Some(7), mtime: Some(t), ..SetAttr::default() }).await.unwrap();
    assert_eq!(b.getattr(seen.ino).await.unwrap().perm, 0o755, "trusted for the metadata TTL");
    past_ttl().await;
    let now = b.getattr(seen.ino).await.unwrap();
    assert_eq!((now.perm, now.uid, now.mtime), (0o700, 7, t), "a stat past the TTL");
    a.setattr(d, SetAttr { mode: Some(0o750), ..SetAttr::default() }).await.unwrap();
    past_ttl().await;
    assert_eq!(b.lookup(ROOT, "d").await.unwrap().perm, 0o750, "a lookup past the TTL");
}

/// Two mounts: one adds an entry to a directory (its marker's rewrite with the new times is
/// pending) while the other changes the directory's mode and owner: the rewrite keeps those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_s_pending_times_never_undo_another_mount_s_chmod() {
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount(&store), mount(&store));
    let d = a.mkdir(ROOT, "d", 0o755, 0, 0).await.unwrap().ino;
    let bd = b.lookup(ROOT, "d").await.unwrap().ino;
    write(&a, d, "f", b"x").await;
    let added = a.getattr(d).await.unwrap().mtime;
    b.setattr(bd, SetAttr { mode: Some(0o700), uid: Some(9), ..SetAttr::default() }).await.unwrap();
    a.write_dir_times().await.unwrap();
    let c = mount(&store);
    let got = c.lookup(ROOT, "d").await.unwrap();
    assert_eq!((got.perm, got.uid), (0o700, 9), "the other mount's chmod and chown are kept");
    assert_eq!(got.mtime, added, "this mount's times are written");
}

/// A burst of stale stats whose listing fails is answered by HEADs, as it was before listings
/// answered bursts: the listing is an optimisation, never a new way to fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_stats_whose_listing_fails_is_answered_by_heads() {
    use shrinkfs_fuse::store::fault::{FaultControl, FaultStore, Op};
    use shrinkfs_fuse::store::{Backend, RetryPolicy, StoreConfig};
    let store = Arc::new(InMemory::new());
    let ctl = Arc::new(FaultControl::default());
    let retry = RetryPolicy::NONE;
    let backend =
        FaultStore::layer(Backend { store: store.clone(), pages: None, multipart: Some(store.clone()) }, ctl.clone());
    let bucket = Bucket::stack(backend, &Path::from("pre"), "faulty", &StoreConfig { retry, ..Default::default() });
    let cfg = FsConfig {
        namespace: NamespaceConfig { metadata_ttl: TTL, negative_ttl: TTL, ..NamespaceConfig::default() },
        ..FsConfig::default()
    };
    let fs = Fs::new(bucket, cfg, Services::default());
    let d = fs.mkdir(ROOT, "d", 0o755, 0, 0).await.unwrap().ino;
    for k in 0..12 {
        write(&fs, d, &format!("f{k:02}"), "y".repeat(k + 1).as_bytes()).await;
    }
    past_ttl().await;
    ctl.fail_next(Op::List, 1000);
    let lists = ctl.calls(Op::List);
    for k in 0..12 {
        let got = fs.lookup(d, &format!("f{k:02}")).await;
        assert_eq!(got.map(|a| a.size).map_err(|e| e.to_string()), Ok(k as u64 + 1), "f{k:02}");
    }
    assert!(ctl.calls(Op::List) > lists, "the burst tried a listing");
}

/// A small file read back by the mount that wrote it is served from what the write kept while
/// that version is confirmed current; once the TTL has passed, another mount's new version is
/// what it reads, never the kept bytes of the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_here_and_replaced_elsewhere_reads_the_new_version_after_the_metadata_ttl() {
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount(&store), mount(&store));
    write(&a, ROOT, "f", b"written by a").await;
    let f = a.lookup(ROOT, "f").await.unwrap().ino;
    assert_eq!(read(&a, f).await.unwrap(), b"written by a");
    write(&b, ROOT, "f", b"written by b, longer").await;
    past_ttl().await;
    // Past the entry TTL the kernel looks the name up before it opens.
    a.lookup(ROOT, "f").await.unwrap();
    assert_eq!(read(&a, f).await.unwrap(), b"written by b, longer");
    assert_eq!(a.getattr(f).await.unwrap().size, 20);
    // And the same the other way round, b's kept frame being the stale one now.
    write(&a, ROOT, "f", b"by a again").await;
    past_ttl().await;
    let fb = b.lookup(ROOT, "f").await.unwrap().ino;
    assert_eq!(read(&b, fb).await.unwrap(), b"by a again");
}

/// The same in a burst of stats, which one listing of the directory answers instead of a HEAD
/// each: a file another mount changed shows its new size, one it removed is gone, one it made
/// is found, and the unchanged ones keep theirs, for a lookup and a getattr alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_stats_after_the_metadata_ttl_sees_every_change_another_mount_made() {
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount(&store), mount(&store));
    let d = a.mkdir(ROOT, "d", 0o755, 0, 0).await.unwrap().ino;
    for k in 0..12 {
        write(&a, d, &format!("f{k:02}"), "x".repeat(k + 1).as_bytes()).await;
    }
    let bd = b.lookup(ROOT, "d").await.unwrap().ino;
    let mut inos = Vec::new();
    for k in 0..12 {
        inos.push(b.lookup(bd, &format!("f{k:02}")).await.unwrap().ino);
    }
    write(&a, d, "f03", b"changed by the other mount").await;
    a.unlink(d, "f07").await.unwrap();
    write(&a, d, "f09", b"").await;
    write(&a, d, "new", b"made by the other mount").await;
    past_ttl().await;
    for (k, &ino) in inos.iter().enumerate() {
        let name = format!("f{k:02}");
        // Every other file by lookup, the rest by getattr (a stat of a name the kernel still has).
        let got = if k % 2 == 0 { b.lookup(bd, &name).await } else { b.getattr(ino).await };
        match k {
            3 => assert_eq!(got.unwrap().size, 26, "{name}: the other mount's new version"),
            7 => assert!(matches!(got, Err(Error::NotFound)), "{name}: removed by the other mount"),
            9 => assert_eq!(got.unwrap().size, 0, "{name}: emptied by the other mount"),
            _ => assert_eq!(got.unwrap().size, k as u64 + 1, "{name}: unchanged"),
        }
    }
    assert_eq!(b.lookup(bd, "new").await.unwrap().size, 23);
    assert!(matches!(b.lookup(bd, "f07").await, Err(Error::NotFound)));
}

/// Two mounts: a handle open on one version never reads another: after the other mount replaces
/// the file, reads give the old bytes or ESTALE, never the new bytes or a mix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_handle_reads_one_version() {
    let store = Arc::new(InMemory::new());
    let cfg = |ttl| FsConfig {
        encode: shrinkfs_codec::EncodeConfig { frame_size: 4096, ..Default::default() },
        namespace: NamespaceConfig { metadata_ttl: ttl, negative_ttl: ttl, ..NamespaceConfig::default() },
        ..FsConfig::default()
    };
    let a = Fs::new(Bucket::new(store.clone(), Path::from("pre"), "memory"), cfg(TTL), Services::default());
    let b = Fs::new(Bucket::new(store.clone(), Path::from("pre"), "memory"), cfg(Duration::ZERO), Services::default());
    let old: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    write(&a, ROOT, "f", &old).await;
    let f = b.lookup(ROOT, "f").await.unwrap();
    let fh = b.open(f.ino, false, false).await.unwrap();
    assert_eq!(&b.read(fh, 0, 4096).await.unwrap()[..], &old[..4096]);
    let new: Vec<u8> = old.iter().map(|x| x ^ 0xff).collect();
    write(&a, ROOT, "f", &new).await;
    match b.read(fh, 4096, 8192).await {
        Ok(got) => assert_eq!(&got[..], &old[4096..12288], "the old version, or nothing"),
        Err(e) => assert_eq!(e.errno(), libc::ESTALE, "{e:?}"),
    }
    b.release(fh).await.unwrap();
    assert_eq!(read(&b, f.ino).await.unwrap()[..4096], new[..4096], "a new open reads the new version");
    // Removed elsewhere: frames not read yet are ESTALE too (the version is gone), not ENOENT.
    let noise = common::data(300_000, 7, 1, b"-");
    write(&a, ROOT, "r", &noise).await;
    let r = b.lookup(ROOT, "r").await.unwrap();
    let fh = b.open(r.ino, false, false).await.unwrap();
    assert_eq!(&b.read(fh, 0, 4096).await.unwrap()[..], &noise[..4096]);
    a.unlink(ROOT, "r").await.unwrap();
    let e = b.read(fh, 250_000, 4096).await.unwrap_err();
    assert_eq!(e.errno(), libc::ESTALE, "{e:?}");
    b.release(fh).await.unwrap();
}

/// Mount `a` stores `name` as `first`, and mount `b` looks it up and opens it for reading (and
/// reads it): the inode and the reader's handle.
async fn held_by_a_reader(a: &Fs, b: &Fs, name: &str, first: &[u8]) -> (shrinkfs_fuse::FileAttrs, u64) {
    write(a, ROOT, name, first).await;
    let f = b.lookup(ROOT, name).await.unwrap();
    let r = b.open(f.ino, false, false).await.unwrap();
    assert_eq!(&b.read(r, 0, 1 << 20).await.unwrap()[..], first);
    (f, r)
}

/// HEADs `fs` has sent so far.
fn heads(fs: &Fs) -> u64 {
    let text = fs.metrics().render(shrinkfs_fuse::metrics::Format::Prometheus);
    text.lines()
        .filter(|l| l.starts_with("shrinkfs_store_request_duration_seconds_count{kind=\"head\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Opens `ino` (`name` of the root) for writing as the kernel does: an open that fails with
/// ESTALE is tried once more after a new lookup (the kernel's LOOKUP_REVAL). Returns the handle
/// and whether the first try failed so.
async fn open_writing(fs: &Fs, name: &str, ino: u64) -> (u64, bool) {
    match fs.open(ino, true, false).await {
        Ok(fh) => (fh, false),
        Err(e) => {
            assert_eq!(e.errno(), libc::ESTALE, "{e:?}");
            let again = fs.lookup(ROOT, name).await.unwrap();
            assert_eq!(again.ino, ino);
            (fs.open(ino, true, false).await.unwrap(), true)
        }
    }
}

/// Two mounts: while a reader holds a file open here, another mount replaces it. Past the TTL a
/// writer's open here loads the newest version (its first try fails with ESTALE, so the kernel
/// looks the file up again and learns the new size), and an append lands on that version: the
/// reader's version never comes back. The reader then gets ESTALE, never the other version's
/// bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_opened_beside_a_reader_lands_on_the_newest_version() {
    let store = Arc::new(InMemory::new());
    let cfg = FsConfig {
        encode: shrinkfs_codec::EncodeConfig { frame_size: 4096, ..Default::default() },
        namespace: NamespaceConfig { metadata_ttl: TTL, negative_ttl: TTL, ..NamespaceConfig::default() },
        ..FsConfig::default()
    };
    let on = |cfg: &FsConfig| {
        Fs::new(Bucket::new(store.clone(), Path::from("pre"), "memory"), cfg.clone(), Services::default())
    };
    let (a, b) = (on(&cfg), on(&cfg));
    let v1: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    write(&a, ROOT, "f", &v1).await;
    let f = b.lookup(ROOT, "f").await.unwrap();
    let held = b.open(f.ino, false, false).await.unwrap();
    assert_eq!(&b.read(held, 0, 4096).await.unwrap()[..], &v1[..4096]);
    let v2: Vec<u8> = v1.iter().rev().copied().chain([7u8; 3000]).collect();
    write(&a, ROOT, "f", &v2).await;
    past_ttl().await;
    let (wh, retried) = open_writing(&b, "f", f.ino).await;
    assert!(retried, "the first try loads the new version and asks the kernel to look again");
    let size = b.getattr(f.ino).await.unwrap().size;
    assert_eq!(size, v2.len() as u64, "the size the kernel appends at");
    b.write(wh, size, b"+x").await.unwrap();
    b.flush(wh).await.unwrap();
    b.release(wh).await.unwrap();
    let e = b.read(held, 4096, 4096).await.unwrap_err();
    assert_eq!(e.errno(), libc::ESTALE, "the handle open all along: {e:?}");
    b.release(held).await.unwrap();
    let mut want = v2.clone();
    want.extend_from_slice(b"+x");
    let fresh = on(&cfg);
    let ino = fresh.lookup(ROOT, "f").await.unwrap().ino;
    assert!(read(&fresh, ino).await.unwrap() == want, "the other mount's version, appended to");
    // Within the TTL nothing is asked: a writer's open beside a reader shares its state.
    let r = b.open(f.ino, false, false).await.unwrap();
    let before = heads(&b);
    let (w, retried) = open_writing(&b, "f", f.ino).await;
    assert!(!retried);
    assert_eq!(heads(&b), before, "no HEAD within the TTL");
    b.release(w).await.unwrap();
    b.release(r).await.unwrap();
}

/// Nothing changed elsewhere: a writer's open past the TTL beside a reader asks the store once
/// and shares the reader's state; the reader goes on reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_opened_beside_a_reader_of_the_current_version_shares_it() {
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount(&store), mount(&store));
    write(&a, ROOT, "log", b"one\n").await;
    let f = b.lookup(ROOT, "log").await.unwrap();
    let tail = b.open(f.ino, false, false).await.unwrap();
    past_ttl().await;
    let before = heads(&b);
    let (wh, retried) = open_writing(&b, "log", f.ino).await;
    assert!(!retried, "the same version");
    assert_eq!(heads(&b) - before, 1, "one HEAD says so");
    b.write(wh, 4, b"two\n").await.unwrap();
    b.flush(wh).await.unwrap();
    b.release(wh).await.unwrap();
    assert_eq!(&b.read(tail, 0, 100).await.unwrap()[..], b"one\ntwo\n", "the reader reads on");
    b.release(tail).await.unwrap();
}

/// A chmod of a file only readers hold here, replaced elsewhere past the TTL, fails once with
/// ESTALE (the kernel then looks the file up again and retries a change made by path) and
/// applies to the new version; an append opened beside a reader of a file removed elsewhere
/// fails once the same way, and the lookup that follows finds no file: neither brings the old
/// version back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_beside_a_reader_never_bring_an_old_version_back() {
    use shrinkfs_fuse::SetAttr;
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount(&store), mount(&store));
    write(&a, ROOT, "f", b"one").await;
    let f = b.lookup(ROOT, "f").await.unwrap();
    let r = b.open(f.ino, false, false).await.unwrap();
    assert_eq!(&b.read(r, 0, 10).await.unwrap()[..], b"one");
    write(&a, ROOT, "f", b"second").await;
    past_ttl().await;
    let chmod = SetAttr { mode: Some(0o600), ..SetAttr::default() };
    let e = b.setattr(f.ino, chmod.clone()).await.unwrap_err();
    assert_eq!(e.errno(), libc::ESTALE, "{e:?}");
    b.lookup(ROOT, "f").await.unwrap();
    b.setattr(f.ino, chmod).await.unwrap();
    b.release(r).await.unwrap();
    past_ttl().await;
    let now = a.lookup(ROOT, "f").await.unwrap();
    assert_eq!((now.perm, read(&a, now.ino).await.unwrap()), (0o600, b"second".to_vec()));

    write(&a, ROOT, "g", b"gone soon").await;
    let g = b.lookup(ROOT, "g").await.unwrap();
    let r = b.open(g.ino, false, false).await.unwrap();
    assert_eq!(&b.read(r, 0, 10).await.unwrap()[..], b"gone soon");
    a.unlink(ROOT, "g").await.unwrap();
    past_ttl().await;
    let e = b.open(g.ino, true, false).await.unwrap_err();
    assert_eq!(e.errno(), libc::ESTALE, "{e:?}");
    assert!(matches!(b.lookup(ROOT, "g").await, Err(Error::NotFound)), "the retry's lookup misses it");
    // The inode is still the reader's: a writer or a change reaching it without a lookup (an
    // open of /proc/PID/fd, an fchmod) fails rather than write into a file that is no more.
    let e = b.open(g.ino, true, false).await.unwrap_err();
    assert_eq!(e.errno(), libc::ESTALE, "a writer's open of the gone file: {e:?}");
    let e = b.setattr(g.ino, SetAttr { mode: Some(0o600), ..SetAttr::default() }).await.unwrap_err();
    assert_eq!(e.errno(), libc::ESTALE, "a change of the gone file: {e:?}");
    b.release(r).await.unwrap();
    assert!(matches!(a.lookup(ROOT, "g").await, Err(Error::NotFound)), "nothing brought back");
}

/// Two mounts: while readers hold a file here, another mount replaces it. Within the TTL a
/// lookup here answers with the readers' file, asking nothing; past it, a lookup asks the store
/// once and answers with a new inode for the new version (as if the file had been replaced
/// here), so a new open reads the new version, and an append opened through it lands at the
/// new end; the readers keep their inode, their size and their version (the old bytes or
/// ESTALE, never the new ones), and nothing is stored from that inode any more. A file removed
/// elsewhere is not found by the lookup, and its readers read on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_ttl_a_lookup_beside_readers_finds_the_new_version_and_the_readers_keep_theirs() {
    use shrinkfs_fuse::SetAttr;
    let store = Arc::new(InMemory::new());
    let cfg = FsConfig {
        encode: shrinkfs_codec::EncodeConfig { frame_size: 4096, ..Default::default() },
        namespace: NamespaceConfig { metadata_ttl: TTL, negative_ttl: TTL, ..NamespaceConfig::default() },
        ..FsConfig::default()
    };
    let on = || Fs::new(Bucket::new(store.clone(), Path::from("pre"), "memory"), cfg.clone(), Services::default());
    let (a, b) = (on(), on());
    let v1: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    write(&a, ROOT, "f", &v1).await;
    let f = b.lookup(ROOT, "f").await.unwrap();
    let held = b.open(f.ino, false, false).await.unwrap();
    assert_eq!(&b.read(held, 0, 4096).await.unwrap()[..], &v1[..4096]);
    let v2: Vec<u8> = v1.iter().rev().copied().chain([7u8; 3000]).collect();
    write(&a, ROOT, "f", &v2).await;
    let before = heads(&b);
    assert_eq!(b.lookup(ROOT, "f").await.unwrap().ino, f.ino, "within the TTL: the readers' file");
    assert_eq!(heads(&b), before, "and nothing asked");
    past_ttl().await;
    let g = b.lookup(ROOT, "f").await.unwrap();
    assert_eq!(heads(&b) - before, 1, "one HEAD");
    assert_ne!(g.ino, f.ino, "a new inode for the new version");
    assert_eq!(g.size, v2.len() as u64);
    assert_eq!(read(&b, g.ino).await.unwrap(), v2, "a new open reads the new version");
    assert_eq!(b.getattr(f.ino).await.unwrap().size, v1.len() as u64, "the readers' file keeps its size");
    match b.read(held, 4096, 8192).await {
        Ok(got) => assert_eq!(&got[..], &v1[4096..12288], "the old version, or nothing"),
        Err(e) => assert_eq!(e.errno(), libc::ESTALE, "{e:?}"),
    }
    // Reached without a lookup (/proc/PID/fd, fchmod), the readers' file takes no change.
    let e = b.open(f.ino, true, false).await.unwrap_err();
    assert_eq!(e.errno(), libc::ESTALE, "{e:?}");
    let e = b.setattr(f.ino, SetAttr { mode: Some(0o600), ..SetAttr::default() }).await.unwrap_err();
    assert_eq!(e.errno(), libc::ESTALE, "{e:?}");
    let (w, retried) = open_writing(&b, "f", g.ino).await;
    assert!(!retried, "the lookup already told the kernel the new size");
    b.write(w, g.size, b"+x").await.unwrap();
    b.flush(w).await.unwrap();
    b.release(w).await.unwrap();
    b.release(held).await.unwrap();
    let mut want = v2.clone();
    want.extend_from_slice(b"+x");
    let fresh = on();
    let ino = fresh.lookup(ROOT, "f").await.unwrap().ino;
    assert!(read(&fresh, ino).await.unwrap() == want, "the other mount's version, appended to");

    write(&a, ROOT, "gone", b"soon").await;
    let h = b.lookup(ROOT, "gone").await.unwrap();
    let r = b.open(h.ino, false, false).await.unwrap();
    a.unlink(ROOT, "gone").await.unwrap();
    past_ttl().await;
    assert!(matches!(b.lookup(ROOT, "gone").await, Err(Error::NotFound)));
    assert_eq!(&b.read(r, 0, 10).await.unwrap()[..], b"soon", "the reader reads on");
    b.release(r).await.unwrap();
    assert!(matches!(a.lookup(ROOT, "gone").await, Err(Error::NotFound)), "nothing brought back");
}

/// A reader's open that reaches a file only readers hold here, past the TTL, without a lookup
/// (the kernel's entry outlived the TTL the mount counts, e.g. after a listing): a file
/// replaced elsewhere fails once with ESTALE, and the lookup that follows finds the new
/// version; one removed elsewhere is then not found. The readers read on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_open_past_the_ttl_without_a_lookup_finds_a_replacement_too() {
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount(&store), mount(&store));
    for (name, replace) in [("f", true), ("g", false)] {
        let (f, r) = held_by_a_reader(&a, &b, name, b"one").await;
        match replace {
            true => write(&a, ROOT, name, b"second").await,
            false => a.unlink(ROOT, name).await.unwrap(),
        }
        past_ttl().await;
        let e = b.open(f.ino, false, false).await.unwrap_err();
        assert_eq!(e.errno(), libc::ESTALE, "{name}: {e:?}");
        match b.lookup(ROOT, name).await {
            Ok(g) if replace => {
                assert_ne!(g.ino, f.ino);
                assert_eq!(read(&b, g.ino).await.unwrap(), b"second");
            }
            Err(Error::NotFound) if !replace => {}
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!(&b.read(r, 0, 100).await.unwrap()[..], b"one", "{name}: the reader reads on");
        b.release(r).await.unwrap();
    }
}

/// Found by the model test: a file this mount wrote (staged, by a write past its start) and
/// renamed while a reader holds it is not taken for a file replaced elsewhere past the TTL (the
/// rename's copy is another version of the same bytes): the name keeps the readers' inode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_renamed_here_while_readers_hold_it_keeps_its_inode_past_the_ttl() {
    let store = Arc::new(InMemory::new());
    let b = mount(&store);
    let (attr, w) = b.create(ROOT, "s", 0o644, 0, 0).await.unwrap();
    let r = b.open(attr.ino, false, false).await.unwrap();
    b.write(w, 1, b"x").await.unwrap();
    b.flush(w).await.unwrap();
    b.release(w).await.unwrap();
    b.rename(ROOT, "s", ROOT, "t", false).await.unwrap();
    past_ttl().await;
    assert_eq!(b.lookup(ROOT, "t").await.unwrap().ino, attr.ino, "the same file");
    assert_eq!(&b.read(r, 0, 10).await.unwrap()[..], b"\0x");
    let again = b.open(attr.ino, false, false).await.unwrap();
    b.release(again).await.unwrap();
    b.release(r).await.unwrap();
}

/// A rename here of a name another mount replaced while readers hold it here: past the TTL the
/// rename fails once with ESTALE (the kernel named the readers' file; it looks the name up
/// again and retries), then moves the new version; a rename onto such a name replaces the new
/// version. The readers keep theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_of_a_name_replaced_elsewhere_beside_readers_moves_the_new_version() {
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount(&store), mount(&store));
    let (f, rf) = held_by_a_reader(&a, &b, "f", b"old f").await;
    let (_, rd) = held_by_a_reader(&a, &b, "d", b"old d").await;
    write(&a, ROOT, "f", b"new f").await;
    write(&a, ROOT, "d", b"new d").await;
    past_ttl().await;
    let e = b.rename(ROOT, "f", ROOT, "g", false).await.unwrap_err();
    assert_eq!(e.errno(), libc::ESTALE, "{e:?}");
    let f2 = b.lookup(ROOT, "f").await.unwrap();
    assert_ne!(f2.ino, f.ino);
    b.rename(ROOT, "f", ROOT, "g", false).await.unwrap();
    write(&b, ROOT, "src", b"from b").await;
    b.rename(ROOT, "src", ROOT, "d", false).await.unwrap();
    assert_eq!(&b.read(rf, 0, 100).await.unwrap()[..], b"old f", "the readers keep their version");
    b.release(rf).await.unwrap();
    b.release(rd).await.unwrap();
    past_ttl().await;
    let (g, d) = (a.lookup(ROOT, "g").await.unwrap().ino, a.lookup(ROOT, "d").await.unwrap().ino);
    assert_eq!(read(&a, g).await.unwrap(), b"new f", "the new version moved");
    assert_eq!(read(&a, d).await.unwrap(), b"from b", "the new version replaced");
    assert!(matches!(a.lookup(ROOT, "f").await, Err(Error::NotFound)));
}

/// A listing (`ls -l`) past the TTL tells the kernel not to keep the entry of a file readers
/// hold here, so its next lookup asks the store and moves the name on to the new version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_past_the_ttl_beside_readers_leaves_the_new_version_to_the_next_lookup() {
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount(&store), mount(&store));
    let (f, r) = held_by_a_reader(&a, &b, "f", b"one").await;
    let kept = |entries: Vec<(u64, shrinkfs_fuse::DirEntry, shrinkfs_fuse::FileAttrs, bool)>| {
        entries.into_iter().find(|(_, e, _, _)| e.name == "f").map(|(_, _, at, keep)| (at.ino, keep)).unwrap()
    };
    let fh = b.opendir(ROOT).await.unwrap();
    assert_eq!(kept(b.readdirplus(fh, ROOT, 0).await.unwrap()), (f.ino, true), "within the TTL");
    b.releasedir(fh);
    write(&a, ROOT, "f", b"second").await;
    past_ttl().await;
    let fh = b.opendir(ROOT).await.unwrap();
    assert_eq!(kept(b.readdirplus(fh, ROOT, 0).await.unwrap()), (f.ino, false), "asked again at the next lookup");
    b.releasedir(fh);
    let g = b.lookup(ROOT, "f").await.unwrap();
    assert_ne!(g.ino, f.ino);
    assert_eq!(read(&b, g.ino).await.unwrap(), b"second");
    assert_eq!(&b.read(r, 0, 100).await.unwrap()[..], b"one");
    b.release(r).await.unwrap();
}

/// The readers' file whose name moved on: once its last handle has closed, a change or an open
/// that reaches it without a lookup fails with ESTALE (its path is the new version's now), and
/// the kernel's forget of it, sent before the last release, lets the mount drop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_file_that_lost_its_name_takes_no_change_once_closed_and_is_forgotten() {
    use shrinkfs_fuse::SetAttr;
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount(&store), mount(&store));
    let (f, r) = held_by_a_reader(&a, &b, "f", b"one").await;
    write(&a, ROOT, "f", b"second").await;
    past_ttl().await;
    let g = b.lookup(ROOT, "f").await.unwrap();
    assert_ne!(g.ino, f.ino);
    b.release(r).await.unwrap();
    for e in [
        b.open(f.ino, false, false).await.unwrap_err(),
        b.open(f.ino, true, false).await.unwrap_err(),
        b.setattr(f.ino, SetAttr { mode: Some(0o600), ..SetAttr::default() }).await.unwrap_err(),
    ] {
        assert_eq!(e.errno(), libc::ESTALE, "{e:?}");
    }
    // Another: the kernel's forget comes before the last release.
    let (h, r) = held_by_a_reader(&a, &b, "h", b"one").await;
    write(&a, ROOT, "h", b"second").await;
    past_ttl().await;
    assert_ne!(b.lookup(ROOT, "h").await.unwrap().ino, h.ino);
    let known = |fs: &Fs| -> u64 {
        let line = fs.state_line();
        line.split(" inode(s) known").next().unwrap().rsplit(' ').next().unwrap().parse().unwrap()
    };
    b.forget(h.ino, 1);
    let before = known(&b);
    b.release(r).await.unwrap();
    assert_eq!(known(&b), before - 1, "forgotten once closed");
    past_ttl().await;
    let now = a.lookup(ROOT, "f").await.unwrap();
    assert_eq!((now.perm & 0o777 != 0o600, read(&a, now.ino).await.unwrap()), (true, b"second".to_vec()));
}

/// Found by a black-box probe through real mounts. An open that loads a version of another
/// size than the kernel was told (here: told by a lookup within the TTL, before the other mount
/// replaced the file) fails once with ESTALE, so the kernel learns the size before an append.
/// And after one renew of a readers' state (a writer's open reaching it without a lookup) and
/// an append stored from it, a later replacement elsewhere is noticed again (the state then
/// holds the bytes it stored, staged, not changed since).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_append_beside_or_after_a_reader_lands_on_the_newest_version() {
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount(&store), mount(&store));
    write(&a, ROOT, "g", b"old\n").await;
    let g = b.lookup(ROOT, "g").await.unwrap();
    let r = b.open(g.ino, false, false).await.unwrap();
    assert_eq!(&b.read(r, 0, 100).await.unwrap()[..], b"old\n");
    b.release(r).await.unwrap();
    write(&a, ROOT, "g", b"new-longer-version\n").await;
    assert_eq!(b.lookup(ROOT, "g").await.unwrap().size, 4, "within the TTL: the size known");
    past_ttl().await;
    let (w, retried) = open_writing(&b, "g", g.ino).await;
    assert!(retried, "the kernel was told another size");
    let size = b.getattr(g.ino).await.unwrap().size;
    assert_eq!(size, 19);
    b.write(w, size, b"APP\n").await.unwrap();
    b.flush(w).await.unwrap();
    b.release(w).await.unwrap();
    past_ttl().await;
    let ga = a.lookup(ROOT, "g").await.unwrap().ino;
    assert_eq!(read(&a, ga).await.unwrap(), b"new-longer-version\nAPP\n");

    write(&a, ROOT, "t", b"v1\n").await;
    let t = b.lookup(ROOT, "t").await.unwrap();
    let r = b.open(t.ino, false, false).await.unwrap();
    assert_eq!(&b.read(r, 0, 100).await.unwrap()[..], b"v1\n");
    write(&a, ROOT, "t", b"v2-two\n").await;
    past_ttl().await;
    for (add, want) in [(&b"A1\n"[..], &b"v2-two\nA1\n"[..]), (b"A2\n", b"v3-three-three\nA2\n")] {
        let (w, retried) = open_writing(&b, "t", t.ino).await;
        assert!(retried, "another version each time");
        let size = b.getattr(t.ino).await.unwrap().size;
        b.write(w, size, add).await.unwrap();
        b.flush(w).await.unwrap();
        b.release(w).await.unwrap();
        past_ttl().await;
        let ta = a.lookup(ROOT, "t").await.unwrap().ino;
        assert_eq!(read(&a, ta).await.unwrap(), want);
        write(&a, ROOT, "t", b"v3-three-three\n").await;
        past_ttl().await;
    }
    b.release(r).await.unwrap();
}

/// Two writers of one file on two mounts: the last close wins, whole; the other's bytes are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_of_one_file_the_last_close_wins() {
    let store = Arc::new(InMemory::new());
    let (a, b) = (mount(&store), mount(&store));
    let (_, fa) = a.create(ROOT, "f", 0o644, 0, 0).await.unwrap();
    let (_, fb) = b.create(ROOT, "f", 0o600, 0, 0).await.unwrap();
    a.write(fa, 0, &vec![b'a'; 100_000]).await.unwrap();
    b.write(fb, 0, &vec![b'b'; 50_000]).await.unwrap();
    a.flush(fa).await.unwrap();
    b.flush(fb).await.unwrap();
    a.release(fa).await.unwrap();
    b.release(fb).await.unwrap();
    let c = mount(&store);
    let f = c.lookup(ROOT, "f").await.unwrap();
    assert_eq!((f.size, f.perm), (50_000, 0o600), "b closed last");
    assert_eq!(read(&c, f.ino).await.unwrap(), vec![b'b'; 50_000]);
    past_ttl().await;
    let on_a = a.lookup(ROOT, "f").await.unwrap();
    assert_eq!(read(&a, on_a.ino).await.unwrap(), vec![b'b'; 50_000], "the first writer sees it after the TTL");
}

/// With `indefinite` TTLs (a bucket only this mount writes) another mount's changes to names this
/// mount knows are never seen: neither a new version nor a new name it holds as absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indefinite_ttls_never_ask_again() {
    let store = Arc::new(InMemory::new());
    let a = mount(&store);
    let b = mount_with(&store, Duration::MAX, Duration::MAX);
    write(&a, ROOT, "f", b"one").await;
    let f = b.lookup(ROOT, "f").await.unwrap();
    assert!(matches!(b.lookup(ROOT, "g").await, Err(Error::NotFound)));
    write(&a, ROOT, "f", b"changed").await;
    write(&a, ROOT, "g", b"new").await;
    past_ttl().await;
    assert_eq!(b.getattr(f.ino).await.unwrap().size, 3);
    assert_eq!(b.lookup(ROOT, "f").await.unwrap().size, 3);
    assert!(matches!(b.lookup(ROOT, "g").await, Err(Error::NotFound)));
}
