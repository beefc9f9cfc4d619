//! The kernel-free filesystem core: a thin coordinator of the collaborators it is built from — the
//! namespace (inodes, lookups, listings), the open handles, the file writer and the object reader —
//! with one method per kernel operation: namespace operations in `names`, file contents in `files`.

mod files;
mod moves;
mod names;
mod statfs;
mod unstored;

use std::sync::{Arc, OnceLock};

use shrinkfs_codec::dispatch::Dispatcher;

pub use crate::attrs::{DirEntry, FileAttrs, SetAttr};
use crate::budget::Budget;
use crate::cache::Parsed;
pub use crate::config::FsConfig;
use crate::diskcache::DiskCache;
use crate::error::{Error, Result};
use crate::handles::OpenHandles;
use crate::inode::{Inode, Kind, ROOT, join};
use crate::metrics::Metrics;
pub use crate::namespace::DIR_MARKER;
use crate::namespace::Namespace;
use crate::objects::Reader;
use crate::store::Bucket;
use crate::writer::FileWriter;
pub use statfs::{NAME_MAX, StatFs};

/// The root directory's extended attribute naming the mount's metrics address.
pub const METRICS_ADDR_XATTR: &str = "user.shrinkfs.metrics_addr";

/// The live objects a filesystem uses, made by its owner (the binary makes the dispatcher after
/// a `--daemon` fork, and opens the disk cache before it).
#[derive(Debug, Clone)]
pub struct Services {
    /// Routes frames to the GPU or the CPU pool.
    pub dispatcher: Arc<Dispatcher>,
    /// Keeps stored frames on local disk too.
    pub disk_cache: Option<DiskCache>,
}

impl Default for Services {
    /// The CPU pool only, no disk cache.
    fn default() -> Self {
        Services { dispatcher: Arc::new(Dispatcher::cpu_only("CPU only")), disk_cache: None }
    }
}

/// The filesystem.
pub struct Fs {
    bucket: Bucket,
    cfg: FsConfig,
    names: Namespace,
    handles: OpenHandles,
    /// The version of each file the kernel's page cache was filled from.
    pages: crate::pagecache::PageCacheVersions,
    writer: FileWriter,
    reader: Reader,
    metrics: Arc<Metrics>,
    budget: Budget,
    /// Where the mount serves its metrics, once it does (for `shrinkfs stats`).
    metrics_addr: OnceLock<String>,
    /// Deletes running behind their unlinks (S3 and memory buckets).
    deletes: Option<Arc<crate::store::behind::Deletes>>,
    /// Held while directory markers are written for their times, and by rmdir and rename, so a
    /// late marker never brings back a directory removed or moved meanwhile.
    dir_writes: tokio::sync::Mutex<()>,
    /// Held for writing by a directory's rename, from the uploads of its open files until they
    /// read from their new keys; every other operation that stores or deletes objects by their
    /// path (flush, release, setattr, getxattr's upload, mkdir, mknod, symlink, unlink, rmdir, a
    /// file's rename, flush_all) holds it for reading, taken first (before any file's lock or
    /// `dir_writes`) and never twice by one operation. So nothing lands under a key of the moved
    /// subtree between its copy and the deletes of the old keys, where the rename would leave it
    /// behind or delete it. (A create stores nothing: its file's first upload waits.)
    moving: tokio::sync::RwLock<()>,
    /// Kernel forgets of inodes that were open when they came (the kernel may send an inode's
    /// FORGET before its last RELEASE), passed on once the last handle has closed.
    forgotten: std::sync::Mutex<std::collections::HashMap<u64, u64>>,
    /// Files `flush_all` found still open for writing and said so (once each: a busy unmount
    /// calls it every second).
    told_open: std::sync::Mutex<std::collections::HashSet<u64>>,
    /// Files whose last handle closed with changes not stored, kept and tried again.
    unstored: unstored::Unstored,
    /// What the kernel keeps that the mount may tell it to drop (the adapter's, once the session
    /// exists; none without a kernel).
    kernel: OnceLock<Arc<dyn KernelCache>>,
    /// Files the mount ended with changes not stored: left open for writing, or kept since
    /// their last close failed and not stored at unmount either.
    lost: std::sync::atomic::AtomicUsize,
    /// When an unmount's pass last found the store not answering (a request failed after 3 s
    /// or more): the passes of the next minute try nothing more (see `flush_all`).
    unanswered: std::sync::Mutex<Option<std::time::Instant>>,
}

/// The kernel's caches of a mount, as far as the mount may clear them.
pub trait KernelCache: Send + Sync {
    /// Drops the kernel's entry for `name` in directory `parent` (and so, once unused, the inode
    /// it names); returns once the kernel took it.
    fn forget_entry(&self, parent: u64, name: &str);
}

impl std::fmt::Debug for Fs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fs({})", self.bucket.describe)
    }
}

impl Fs {
    /// A filesystem over `bucket`, set up as `cfg` says, using `services`.
    pub fn new(bucket: Bucket, cfg: FsConfig, services: Services) -> Self {
        let Services { dispatcher, disk_cache } = services;
        let (bucket, deletes) = bucket.with_deletes_behind(cfg.deletes_behind);
        let metrics = bucket.metrics.clone();
        metrics.watch_codec(dispatcher.counters().clone());
        let budget = Budget::new(cfg.io_budget, metrics.clone());
        let reader = Reader::new(
            bucket.store.clone(),
            cfg.reader.clone(),
            cfg.encode.key.clone(),
            cfg.dicts.clone(),
            metrics.clone(),
            dispatcher.clone(),
            disk_cache,
            budget.clone(),
        );
        let names = Namespace::new(bucket.clone(), reader.clone(), cfg.namespace.clone(), deletes.clone());
        let writer = FileWriter::new(
            bucket.clone(),
            reader.clone(),
            dispatcher,
            budget.clone(),
            cfg.encode.clone(),
            cfg.dicts.clone(),
            cfg.writer.clone(),
        );
        Fs {
            bucket,
            cfg,
            names,
            handles: OpenHandles::default(),
            pages: Default::default(),
            writer,
            reader,
            metrics,
            budget,
            metrics_addr: OnceLock::new(),
            deletes,
            dir_writes: tokio::sync::Mutex::default(),
            moving: tokio::sync::RwLock::default(),
            forgotten: std::sync::Mutex::default(),
            told_open: std::sync::Mutex::default(),
            unstored: Default::default(),
            lost: std::sync::atomic::AtomicUsize::new(0),
            unanswered: std::sync::Mutex::new(None),
            kernel: OnceLock::new(),
        }
    }

    /// Lets the mount tell the kernel to drop what it keeps of a name (once; later calls are
    /// ignored).
    pub fn set_kernel_cache(&self, kernel: Arc<dyn KernelCache>) {
        let _ = self.kernel.set(kernel);
    }

    /// Tells the kernel to forget name `name` of directory `parent`, so its next use asks the
    /// mount: for a name whose file the kernel would otherwise go on showing as it was (its size,
    /// its pages). Waits up to a second for the kernel to take it (it takes the directory's lock
    /// first, which a request this mount has yet to answer may hold: the caller holds no lock
    /// of the mount's). Nothing where no kernel is attached.
    pub(crate) async fn kernel_forget(&self, parent: u64, name: &str) {
        let Some(k) = self.kernel.get().cloned() else { return };
        let name = name.to_owned();
        let told = tokio::task::spawn_blocking(move || k.forget_entry(parent, &name));
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), told).await;
    }

    /// The mount's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The configuration.
    pub fn config(&self) -> &FsConfig {
        &self.cfg
    }

    /// Writes the markers of directories whose times changed with their entries, so those times
    /// outlive the kernel's cache and the mount (the mount calls this every second and at
    /// unmount). A marker that fails to be written is tried again next time.
    pub async fn write_dir_times(&self) -> Result<()> {
        let _writing = self.dir_writes.lock().await;
        self.write_dir_times_locked().await
    }

    /// [`Self::write_dir_times`] with `dir_writes` held.
    async fn write_dir_times_locked(&self) -> Result<()> {
        let mut unwritten = std::collections::HashMap::new();
        let mut first_err = None;
        for (rel, mut attr) in self.names.take_dir_times() {
            // Only the times are this mount's news: the mode and owner are what the marker holds
            // now, which another mount's chmod or chown may have changed (this mount's own wait
            // for `dir_writes` and write the marker at once).
            match self.names.stat_attrs(&self.names.key(&join(&rel, DIR_MARKER)), None).await {
                Ok(Some((_, stored))) => {
                    attr.perm = stored.perm.or(attr.perm);
                    attr.uid = stored.uid.or(attr.uid);
                    attr.gid = stored.gid.or(attr.gid);
                }
                Ok(None) => {}
                Err(e) => tracing::debug!(dir = %rel, error = %e, "directory marker not read before its rewrite"),
            }
            if let Err(e) = self.put_dir_marker(&rel, &attr).await {
                unwritten.insert(rel, attr);
                first_err.get_or_insert(e);
            }
        }
        self.names.keep_dir_times(unwritten);
        first_err.map_or(Ok(()), Err)
    }

    /// Logs `e` from operation `op` on inode `ino` (or on its entry `name`), naming the path
    /// from the mount root and the object key.
    pub fn log_error(&self, e: &Error, op: &'static str, ino: u64, name: Option<&str>) {
        let dir = self.names.path_of(ino);
        let path = match name {
            Some(n) => join(&dir, n),
            None => dir,
        };
        e.log(op, &format!("/{path}"), self.names.key(&path).as_ref());
    }

    /// Files whose changes were given up when the mount ended: still open for writing, or kept
    /// since their last close failed (its writer was told) and not stored at unmount either. The
    /// mount's exit status says so.
    pub fn files_lost(&self) -> usize {
        self.lost.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The mount's state now, on one line (what SIGUSR1 logs).
    pub fn state_line(&self) -> String {
        let (files, writers, handles) = self.handles.counts();
        let inodes = self.names.table().len();
        format!(
            "bucket {}: {files} open file(s), {writers} open for writing, {handles} handle(s), {inodes} inode(s) known, \
             {} of {} in-flight budget in use, frame cache {} bytes",
            self.bucket.describe,
            self.budget.in_use(),
            self.budget.bytes(),
            self.reader.chunks.weighted_size(),
        )
    }

    /// Logical bytes of open files not yet stored: a streaming upload's bytes, a staged file's
    /// length. A file busy at this instant counts as it was when last unlocked (this is read by
    /// a scrape, which must not wait for a write).
    pub fn dirty_bytes(&self) -> u64 {
        self.handles.open_files().iter().map(|(_, f, _)| f.dirty_bytes()).sum()
    }

    /// Waits for every delete queued behind an unlink (in any directory: a directory renamed
    /// since holds its files' deletes under its old name), and reports those that failed since
    /// the last report: what fsync of a directory asks.
    pub async fn fsyncdir(&self, _ino: u64) -> Result<()> {
        self.settle_deletes(true).await
    }

    /// Deletes queued behind their unlinks and not done yet.
    pub fn deletes_queued(&self) -> usize {
        self.deletes.as_ref().map_or(0, |d| d.queued())
    }

    /// [`Self::fsyncdir`]; failures reported stay for the next call unless `take`.
    async fn settle_deletes(&self, take: bool) -> Result<()> {
        let Some(deletes) = &self.deletes else { return Ok(()) };
        deletes
            .settle(take)
            .await
            .map_err(|e| Error::from(object_store::Error::Generic { store: "deletes-behind", source: Box::new(e) }))
    }

    /// Whether inode `ino` is open: what the namespace asks of open files.
    fn is_open(&self) -> impl Fn(u64) -> bool + Sync + '_ {
        |ino| self.handles.is_open(ino)
    }

    fn writable(&self) -> Result<()> {
        if self.cfg.read_only { Err(Error::ReadOnly) } else { Ok(()) }
    }

    /// Attributes of inode `i` as they are live: an open file's as written so far, else as cached
    /// now (`i` may be from before the last handle's commit: its size would be the old one).
    async fn live_attrs(&self, i: &Inode) -> FileAttrs {
        let file = self.handles.file(i.ino);
        let of = match &file {
            Some(f) => Some(f.lock().await),
            None => None,
        };
        let cached = self.names.attrs_of(&self.names.inode(i.ino).unwrap_or_else(|_| i.clone()));
        match of {
            Some(of) => of.live_attrs(cached),
            None => cached,
        }
    }

    /// Looks `name` up in directory `parent`; counts a kernel lookup on success.
    pub async fn lookup(&self, parent: u64, name: &str) -> Result<FileAttrs> {
        let i = self.names.lookup(parent, name, &self.is_open()).await?;
        // A file only readers hold here, past the TTL, may have been replaced elsewhere (asked
        // only then, so other lookups cost nothing more): if its name moved on, the lookup
        // counted on the readers' file goes back, and the name is looked up anew.
        if self.may_be_outdated(&i) && self.detach_replaced(parent, name).await? {
            self.forget(i.ino, 1);
            return self.lookup_here(parent, name).await;
        }
        // An open file's size and times are its live ones: the stored ones would make the
        // kernel shrink the file it has mapped (SIGBUS for a program reading the mapping).
        Ok(self.live_attrs(&i).await)
    }

    /// [`Self::lookup`] of the name as this mount knows it, asking the store only where that
    /// is past the TTL and no handle holds the file (no `detach_replaced`).
    pub(super) async fn lookup_here(&self, parent: u64, name: &str) -> Result<FileAttrs> {
        let i = self.names.lookup(parent, name, &self.is_open()).await?;
        // An open file's size and times are its live ones: the stored ones would make the
        // kernel shrink the file it has mapped (SIGBUS for a program reading the mapping).
        Ok(self.live_attrs(&i).await)
    }

    /// Whether `name` exists in `parent`: a lookup the kernel does not count (forgotten at once,
    /// or once the file's last handle has closed).
    pub(super) async fn exists(&self, parent: u64, name: &str) -> Result<bool> {
        match self.names.lookup(parent, name, &self.is_open()).await {
            Ok(i) => {
                self.forget(i.ino, 1);
                Ok(true)
            }
            Err(Error::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Attributes of an inode, refreshed from the store when older than the metadata TTL.
    pub async fn getattr(&self, ino: u64) -> Result<FileAttrs> {
        let open = self.handles.is_open(ino);
        // Read after the check: a file closed in between was committed before it closed.
        let i = self.names.inode(ino)?;
        if open {
            return Ok(self.live_attrs(&i).await);
        }
        self.names.getattr(&i, &self.is_open()).await
    }

    /// The kernel dropped `n` lookups of `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        // Checked and recorded under the lock that `retired` takes after the last handle went.
        let mut forgotten = self.forgotten.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.handles.is_open(ino) {
            *forgotten.entry(ino).or_default() += n;
            return;
        }
        drop(forgotten);
        self.names.forget(ino, n);
    }

    /// The last handle of `ino` has closed: the kernel's forgets that came while it was open
    /// count now.
    fn retired(&self, ino: u64) {
        let n = self.forgotten.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&ino);
        if let Some(n) = n {
            self.names.forget(ino, n);
        }
    }

    /// Opens directory `ino`: its first page is listed now, so a missing or unreadable directory
    /// fails here.
    pub async fn opendir(&self, ino: u64) -> Result<u64> {
        self.names.opendir(ino, &self.is_open()).await
    }

    /// Entries of an open directory from position `offset` ("." and ".." come first), listing
    /// further pages only as far as this call needs.
    pub async fn readdir(&self, fh: u64, ino: u64, offset: u64) -> Result<Vec<(u64, DirEntry)>> {
        self.names.readdir(fh, ino, offset, &self.is_open()).await
    }

    /// [`Self::readdir`] with each entry's attributes (READDIRPLUS), and whether they may be
    /// cached for the metadata TTL (else the kernel should ask again). Every entry but "." and
    /// ".." counts a kernel lookup: the caller `forget`s those it could not pass on.
    pub async fn readdirplus(&self, fh: u64, ino: u64, offset: u64) -> Result<Vec<(u64, DirEntry, FileAttrs, bool)>> {
        let entries = self.names.readdirplus(fh, ino, offset, &self.is_open()).await?;
        let mut out = Vec::with_capacity(entries.len());
        for (off, e, i) in entries {
            let dots = e.name == "." || e.name == "..";
            let trusted = !dots && self.kernel_may_keep(&i);
            out.push((off, e, self.live_attrs(&i).await, trusted));
        }
        Ok(out)
    }

    /// Whether the kernel may keep listed entry `i` for the TTL: a file open here with changes
    /// is described by its live attributes; one only readers hold, while it is within the TTL
    /// (else the kernel's next lookup of it asks the store again: `detach_replaced`).
    fn kernel_may_keep(&self, i: &Inode) -> bool {
        self.names.trusted(i) || self.handles.is_open(i.ino) && !self.may_be_outdated(i)
    }

    /// Forgets an open directory.
    pub fn releasedir(&self, fh: u64) {
        self.names.releasedir(fh);
    }

    /// Records where the mount serves its metrics: the root directory then names it in its
    /// extended attribute `user.shrinkfs.metrics_addr`, where `shrinkfs stats` looks.
    pub fn set_metrics_addr(&self, addr: String) {
        let _ = self.metrics_addr.set(addr);
    }

    /// Extended attributes `user.shrinkfs.*` of a file, and of the root directory; names outside
    /// `user.*` are not supported.
    pub async fn getxattr(&self, ino: u64, name: &str) -> Result<Vec<u8>> {
        if !name.starts_with("user.") {
            return Err(Error::NoXattrSupport);
        }
        if ino == ROOT && name == METRICS_ADDR_XATTR {
            return self.metrics_addr.get().map(|a| a.clone().into_bytes()).ok_or(Error::NoXattr);
        }
        // It uploads the file's pending bytes first: not into a directory being moved.
        let _moving = self.moving.read().await;
        let i = self.names.inode(ino)?;
        // A file that lost its name (removed, or replaced elsewhere) has no stored object of its
        // own to describe: its path names another's.
        if i.kind != Kind::File || i.parent == 0 || !name.starts_with("user.shrinkfs.") {
            return Err(Error::NoXattr);
        }
        self.commit_ino(ino).await?;
        let info = self.reader.stat(&self.names.key(&i.path)).await?.ok_or(Error::NotFound)?;
        let value = match name {
            "user.shrinkfs.codec" => info.codec_summary(),
            "user.shrinkfs.stored_size" => info.stored.to_string(),
            "user.shrinkfs.ratio" => {
                format!("{:.3}", if info.stored == 0 { 1.0 } else { info.size() as f64 / info.stored as f64 })
            }
            "user.shrinkfs.format" => match info.parsed {
                Parsed::Plain => "plain".into(),
                Parsed::Framed { layout, .. } => format!("shrinkfs-v{}", layout.header.version),
            },
            _ => return Err(Error::NoXattr),
        };
        Ok(value.into_bytes())
    }

    /// Names of the extended attributes of an inode, NUL-separated.
    pub fn listxattr(&self, ino: u64) -> Result<Vec<u8>> {
        if ino == ROOT && self.metrics_addr.get().is_some() {
            return Ok(format!("{METRICS_ADDR_XATTR}\0").into_bytes());
        }
        let i = self.names.inode(ino)?;
        if i.kind != Kind::File {
            return Ok(Vec::new());
        }
        Ok(b"user.shrinkfs.codec\0user.shrinkfs.stored_size\0user.shrinkfs.ratio\0user.shrinkfs.format\0".to_vec())
    }
}
