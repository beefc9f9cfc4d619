//! The kernel-free filesystem core: namespace operations (lookup, getattr, readdir, mkdir, rmdir,
//! unlink, rename, symlink, statfs, xattrs) over an object store. File contents live in `files`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::TryStreamExt;
use object_store::path::Path;
use shrinkfs_codec::format::{S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK};
use shrinkfs_codec::{EncodeConfig, FileMeta};

use crate::budget::Budget;
use crate::cache::{ChunkCache, LayoutCache, Parsed};
use crate::error::{Error, Result};
use crate::files::{Handle, OpenEntry};
use crate::inode::{Attr, Inode, InodeTable, Kind, join};
use crate::metrics::Metrics;
use crate::objects::{ObjectInfo, Reader};
use crate::store::Bucket;

/// Attribute fetches in flight when a listed directory's files are looked up.
pub const PREFETCH_CONCURRENCY: usize = 32;

/// Name of the object that keeps an empty directory in existence. Hidden from listings.
pub const DIR_MARKER: &str = ".shrinkfs.dir";

/// How the filesystem behaves; every field has a default a user would expect.
#[derive(Debug, Clone)]
pub struct FsConfig {
    /// How new objects are encoded (codec, level, frame size, key).
    pub encode: EncodeConfig,
    /// zstd dictionaries for reading.
    pub dicts: Vec<Arc<shrinkfs_codec::Dictionary>>,
    /// Refuse every change.
    pub read_only: bool,
    /// Owner of files whose objects record none.
    pub uid: u32,
    /// Group of files whose objects record none.
    pub gid: u32,
    /// Permission bits of files whose objects record none.
    pub file_mode: u16,
    /// Permission bits of directories.
    pub dir_mode: u16,
    /// How long attributes and directory entries are trusted before asking the store again.
    pub metadata_ttl: Duration,
    /// Bytes of decoded frames kept in memory.
    pub cache_bytes: u64,
    /// Bytes that writes, uploads and fetches may hold at once (`--memory-limit` less the cache).
    pub io_budget: u64,
    /// Where files being rewritten at random offsets are staged.
    pub staging_dir: PathBuf,
    /// Routes frames to the GPU or the CPU pool.
    pub dispatcher: Arc<shrinkfs_codec::dispatch::Dispatcher>,
    /// Keep stored frames on local disk too.
    pub disk_cache: Option<crate::diskcache::DiskCache>,
    /// With a key, serve objects that are not sealed too (refused with EACCES otherwise).
    pub allow_unsealed: bool,
    /// The kernel caches writes (`--writeback-cache`): writes arriving out of order are expected.
    pub writeback_cache: bool,
}

impl Default for FsConfig {
    fn default() -> Self {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        FsConfig {
            encode: EncodeConfig::default(),
            dicts: Vec::new(),
            read_only: false,
            uid,
            gid,
            file_mode: 0o644,
            dir_mode: 0o755,
            metadata_ttl: Duration::from_secs(1),
            cache_bytes: 256 << 20,
            io_budget: 768 << 20,
            staging_dir: std::env::temp_dir(),
            dispatcher: Arc::new(shrinkfs_codec::dispatch::Dispatcher::cpu_only("CPU only")),
            disk_cache: None,
            allow_unsealed: false,
            writeback_cache: false,
        }
    }
}

/// Attributes as the kernel sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileAttrs {
    /// Inode number.
    pub ino: u64,
    /// File, directory, symlink or special node.
    pub kind: Kind,
    /// Logical size.
    pub size: u64,
    /// Bytes stored, in 512-byte blocks (what `du` reports: the compressed size).
    pub blocks: u64,
    /// Modification time.
    pub mtime: SystemTime,
    /// Permission bits.
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number of a device node.
    pub rdev: u32,
    /// Links: 2 for a directory, 1 for anything else, 0 for a file unlinked while open.
    pub nlink: u32,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Inode number.
    pub ino: u64,
    /// Kind.
    pub kind: Kind,
    /// Name.
    pub name: String,
}

/// The filesystem.
pub struct Fs {
    pub(crate) bucket: Bucket,
    pub(crate) reader: Reader,
    pub(crate) cfg: FsConfig,
    pub(crate) inodes: Arc<Mutex<InodeTable>>,
    pub(crate) open: Mutex<HashMap<u64, OpenEntry>>,
    pub(crate) handles: Mutex<HashMap<u64, Handle>>,
    pub(crate) dirs: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<crate::listing::Listing>>>>,
    /// Per directory: the file names of its latest listing, until their attributes are prefetched.
    pub(crate) listed: Mutex<HashMap<u64, Vec<String>>>,
    pub(crate) next_fh: AtomicU64,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) budget: Budget,
    /// Where the mount serves its metrics, once it does (for `shrinkfs stats`).
    pub(crate) metrics_addr: std::sync::OnceLock<String>,
}

impl std::fmt::Debug for Fs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fs({})", self.bucket.describe)
    }
}

pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(Error::InvalidName(name.into()));
    }
    if name.len() > 255 {
        return Err(Error::BadName);
    }
    if name == DIR_MARKER || name == crate::localstore::TMP_DIR {
        return Err(Error::ReservedName(name.into()));
    }
    Ok(())
}

impl Fs {
    /// A filesystem over `bucket`.
    pub fn new(bucket: Bucket, cfg: FsConfig) -> Self {
        let metrics = bucket.metrics.clone();
        metrics.watch_codec(cfg.dispatcher.counters().clone());
        let budget = Budget::new(cfg.io_budget, metrics.clone());
        let reader = Reader {
            budget: budget.clone(),
            store: bucket.store.clone(),
            chunks: ChunkCache::new(cfg.cache_bytes),
            layouts: LayoutCache::new(100_000),
            key: cfg.encode.key.clone(),
            dicts: cfg.dicts.clone(),
            metrics: metrics.clone(),
            dispatcher: cfg.dispatcher.clone(),
            disk: cfg.disk_cache.clone(),
            inflight: Arc::default(),
            allow_unsealed: cfg.allow_unsealed,
        };
        Fs {
            bucket,
            reader,
            cfg,
            inodes: Arc::new(Mutex::new(InodeTable::new())),
            open: Mutex::new(HashMap::new()),
            handles: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            listed: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            metrics,
            budget,
            metrics_addr: std::sync::OnceLock::new(),
        }
    }

    /// Directory `dir` gained, lost or renamed an entry: its modification time is now (in this
    /// mount's memory; docs/SEMANTICS.md says what persists).
    pub fn entries_changed(&self, dir: u64) {
        if let Some(d) = self.inodes.lock().expect("inode lock").get_mut(dir) {
            d.attr.mtime = SystemTime::now();
        }
    }

    /// Logs `e` from operation `op` on inode `ino` (or on its entry `name`), naming the path
    /// from the mount root and the object key.
    pub fn log_error(&self, e: &Error, op: &'static str, ino: u64, name: Option<&str>) {
        let dir = self.inodes.lock().expect("inodes lock").get(ino).map(|i| i.path.clone()).unwrap_or_default();
        let path = match name {
            Some(n) => join(&dir, n),
            None => dir,
        };
        e.log(op, &format!("/{path}"), self.key(&path).as_ref());
    }

    /// The mount's state now, on one line (what SIGUSR1 logs).
    pub fn state_line(&self) -> String {
        let (files, writers) = {
            let open = self.open.lock().expect("open lock");
            (open.len(), open.values().filter(|e| e.writers > 0).count())
        };
        let handles = self.handles.lock().expect("handles lock").len();
        let inodes = self.inodes.lock().expect("inodes lock").len();
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
    /// length. A file busy at this instant is skipped (this is read by a scrape, which must not
    /// wait for a write).
    pub fn dirty_bytes(&self) -> u64 {
        use crate::files::Body;
        let files: Vec<_> = self.open.lock().expect("open lock").values().map(|e| e.file.clone()).collect();
        files
            .iter()
            .filter_map(|f| match &f.try_lock().ok()?.body {
                Body::Clean => None,
                Body::Streaming(up) => Some(up.len()),
                Body::Staged { len, .. } => Some(*len),
            })
            .sum()
    }

    /// The mount's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The configuration.
    pub fn config(&self) -> &FsConfig {
        &self.cfg
    }

    fn inodes_handle(&self) -> Arc<Mutex<InodeTable>> {
        self.inodes.clone()
    }

    pub(crate) fn inode(&self, ino: u64) -> Result<Inode> {
        self.inodes.lock().expect("inode lock").get(ino).cloned().ok_or(Error::Stale)
    }

    pub(crate) fn key(&self, rel: &str) -> Path {
        self.bucket.key(rel)
    }

    /// Refuses a path whose object key (prefix included) would be longer than the store takes,
    /// or whose marker key would be, with `ENAMETOOLONG`: such a name can neither exist nor be made.
    pub(crate) fn check_key_len(&self, rel: &str) -> Result<()> {
        let len = self.bucket.prefix_len + self.key(rel).as_ref().len() + 1 + DIR_MARKER.len();
        if len > self.bucket.max_key_len { Err(Error::BadName) } else { Ok(()) }
    }

    pub(crate) fn writable(&self) -> Result<()> {
        if self.cfg.read_only { Err(Error::ReadOnly) } else { Ok(()) }
    }

    /// Kernel attributes of an inode.
    pub(crate) fn attrs_of(&self, i: &Inode) -> FileAttrs {
        let perm = match i.kind {
            Kind::Dir => i.attr.perm.unwrap_or(self.cfg.dir_mode),
            Kind::Symlink => 0o777,
            Kind::File | Kind::Special(_) => i.attr.perm.unwrap_or(self.cfg.file_mode),
        };
        FileAttrs {
            ino: i.ino,
            kind: i.kind,
            size: i.attr.size,
            blocks: i.attr.stored.div_ceil(512),
            mtime: i.attr.mtime,
            perm,
            uid: i.attr.uid.unwrap_or(self.cfg.uid),
            gid: i.attr.gid.unwrap_or(self.cfg.gid),
            rdev: i.attr.rdev,
            nlink: if i.kind == Kind::Dir { 2 } else { 1 },
        }
    }

    pub(crate) fn attr_from_object(info: &ObjectInfo) -> (Kind, Attr) {
        let meta = info.meta();
        let kind = match meta.mode.map(|m| m & S_IFMT) {
            Some(S_IFLNK) => Kind::Symlink,
            Some(t @ (S_IFIFO | S_IFSOCK | S_IFCHR | S_IFBLK)) => Kind::Special(t),
            _ => Kind::File,
        };
        let attr = Attr {
            size: info.size(),
            stored: info.stored,
            mtime: info.mtime(),
            perm: meta.mode.map(|m| (m & 0o7777) as u16),
            uid: meta.uid,
            gid: meta.gid,
            etag: Some(info.id.etag.to_string()),
            codec: info.codec_summary(),
            rdev: 0,
        };
        (kind, attr)
    }

    fn fresh(&self, i: &Inode) -> bool {
        i.fetched.is_some_and(|t| t.elapsed() < self.cfg.metadata_ttl)
    }

    /// Kind and attributes of the object at `key`, `None` if there is none. An object that cannot
    /// be decoded still has a name (and its stored size), so it can be listed, removed or replaced;
    /// reading it fails.
    pub(crate) async fn stat_attrs(&self, key: &Path) -> Result<Option<(Kind, Attr)>> {
        match self.reader.stat(key).await {
            Ok(Some(info)) => {
                let (kind, mut attr) = Self::attr_from_object(&info);
                if matches!(kind, Kind::Special(S_IFCHR | S_IFBLK)) {
                    // A device's number is its object's data.
                    let data = self.reader.read_all(&info).await?;
                    attr.rdev = <[u8; 8]>::try_from(data.as_slice()).map_or(0, |b| u64::from_le_bytes(b) as u32);
                }
                Ok(Some((kind, attr)))
            }
            Ok(None) => Ok(None),
            // Without the right key an object is not ours to show, whatever its state.
            Err(
                e @ Error::Codec {
                    source:
                        shrinkfs_codec::Error::KeyRequired
                        | shrinkfs_codec::Error::WrongKey
                        | shrinkfs_codec::Error::NotSealed,
                    ..
                },
            ) => Err(e),
            Err(Error::Codec { key: k, source }) => {
                tracing::warn!(key = k, error = %source, "object cannot be decoded; shown with its stored size");
                let meta = match self.bucket.store.head(key).await {
                    Ok(m) => m,
                    Err(object_store::Error::NotFound { .. }) => return Ok(None),
                    Err(e) => return Err(e.into()),
                };
                let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(meta.last_modified.timestamp().max(0) as u64);
                let attr = Attr {
                    size: meta.size,
                    stored: meta.size,
                    mtime,
                    etag: meta.e_tag.clone(),
                    codec: "unreadable".into(),
                    ..Attr::empty()
                };
                Ok(Some((Kind::File, attr)))
            }
            Err(e) => Err(e),
        }
    }

    async fn dir_exists(&self, rel: &str) -> Result<bool> {
        Ok(!self.first_keys(rel, 1).await?.is_empty())
    }

    /// Looks `name` up in directory `parent`; counts a kernel lookup on success.
    pub async fn lookup(&self, parent: u64, name: &str) -> Result<FileAttrs> {
        check_name(name)?;
        let dir = self.inode(parent)?;
        if dir.kind != Kind::Dir {
            return Err(Error::NotDir);
        }
        let known = self.inodes.lock().expect("inode lock").child(parent, name).cloned();
        if let Some(i) = &known
            && (self.fresh(i)
                || self.is_open(i.ino)
                || i.kind == Kind::Dir && i.fetched.is_some_and(|t| t.elapsed() < self.cfg.metadata_ttl))
        {
            let i =
                self.inodes.lock().expect("inode lock").upsert(parent, name, i.kind, i.attr.clone(), i.fetched, true);
            // An open file's size and times are its live ones: the stored ones would make the
            // kernel shrink the file it has mapped (SIGBUS for a program reading the mapping).
            if let Some(a) = self.open_attrs(&i).await {
                return Ok(a);
            }
            return Ok(self.attrs_of(&i));
        }
        let rel = join(&dir.path, name);
        self.check_key_len(&rel)?;
        self.prefetch_listed(parent, &dir.path);
        if let Some((kind, attr)) = self.stat_attrs(&self.key(&rel)).await? {
            let i =
                self.inodes.lock().expect("inode lock").upsert(parent, name, kind, attr, Some(Instant::now()), true);
            return Ok(self.attrs_of(&i));
        }
        if self.dir_exists(&rel).await? {
            let attr = match known.filter(|k| k.kind == Kind::Dir) {
                Some(k) => k.attr,
                None => self.dir_attr(&rel).await?,
            };
            let i = self.inodes.lock().expect("inode lock").upsert(
                parent,
                name,
                Kind::Dir,
                attr,
                Some(Instant::now()),
                true,
            );
            return Ok(self.attrs_of(&i));
        }
        self.inodes.lock().expect("inode lock").remove_name(parent, name);
        Err(Error::NotFound)
    }

    /// The first lookup in a freshly listed directory (`ls -l`, `find`, a file manager) starts
    /// fetching the attributes of every file listed, `PREFETCH_CONCURRENCY` at a time, so the
    /// lookups that follow find them instead of each waiting for its own request.
    fn prefetch_listed(&self, dir: u64, dir_path: &str) {
        let Some(names) = self.listed.lock().expect("listed lock").remove(&dir) else { return };
        if names.len() < 2 || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let (reader, bucket, inodes) = (self.reader.clone(), self.bucket.clone(), self.inodes_handle());
        let dir_path = dir_path.to_owned();
        tokio::spawn(async move {
            use futures::StreamExt;
            let stats = futures::stream::iter(names)
                .map(|name| {
                    let (reader, key) = (reader.clone(), bucket.key(&join(&dir_path, &name)));
                    async move { (name, reader.stat(&key).await) }
                })
                .buffer_unordered(PREFETCH_CONCURRENCY);
            futures::pin_mut!(stats);
            while let Some((name, res)) = stats.next().await {
                if let Ok(Some(info)) = res {
                    let (kind, attr) = Self::attr_from_object(&info);
                    if matches!(kind, Kind::Special(S_IFCHR | S_IFBLK)) {
                        // A device's number is in its data: its own lookup reads it.
                        continue;
                    }
                    inodes.lock().expect("inode lock").upsert(dir, &name, kind, attr, Some(Instant::now()), false);
                }
            }
        });
    }

    /// Attributes of an inode, refreshed from the store when older than the metadata TTL.
    pub async fn getattr(&self, ino: u64) -> Result<FileAttrs> {
        let i = self.inode(ino)?;
        if let Some(a) = self.open_attrs(&i).await {
            return Ok(a);
        }
        if i.kind == Kind::Dir || self.fresh(&i) || i.parent == 0 {
            return Ok(self.attrs_of(&i));
        }
        match self.stat_attrs(&self.key(&i.path)).await? {
            Some((kind, attr)) => {
                let mut t = self.inodes.lock().expect("inode lock");
                let cur = t.get_mut(ino).ok_or(Error::Stale)?;
                if cur.kind != kind {
                    return Err(Error::Stale);
                }
                cur.attr = attr;
                cur.fetched = Some(Instant::now());
                Ok(self.attrs_of(cur))
            }
            None => Err(Error::NotFound),
        }
    }

    /// Creates a directory owned by `uid`/`gid`; its marker object keeps it while empty and
    /// carries its mode, owner and time.
    pub async fn mkdir(&self, parent: u64, name: &str, mode: u32, uid: u32, gid: u32) -> Result<FileAttrs> {
        self.writable()?;
        check_name(name)?;
        let dir = self.inode(parent)?;
        if dir.kind != Kind::Dir {
            return Err(Error::NotDir);
        }
        if self.lookup_exists(parent, name).await? {
            return Err(Error::Exists);
        }
        let rel = join(&dir.path, name);
        self.check_key_len(&rel)?;
        let (gid, setgid) = self.inherited_group(&dir, gid);
        let perm = (mode & 0o7777) as u16 | if setgid { 0o2000 } else { 0 };
        let attr = Attr { perm: Some(perm), uid: Some(uid), gid: Some(gid), ..Attr::empty() };
        self.put_dir_marker(&rel, &attr).await?;
        let i =
            self.inodes.lock().expect("inode lock").upsert(parent, name, Kind::Dir, attr, Some(Instant::now()), true);
        Ok(self.attrs_of(&i))
    }

    /// The group of a new entry of directory `dir` made by a caller whose group is `gid`, and
    /// whether a new subdirectory is set-group-ID: in a set-group-ID directory, the directory's
    /// group and bit (POSIX, as the kernel does on local filesystems).
    pub(crate) fn inherited_group(&self, dir: &Inode, gid: u32) -> (u32, bool) {
        let a = self.attrs_of(dir);
        if a.perm & 0o2000 != 0 { (a.gid, true) } else { (gid, false) }
    }

    /// Writes the marker object of directory `rel`: no data, the directory's mode, owner and
    /// modification time as its metadata (so they outlive the kernel's cache and the mount).
    pub(crate) async fn put_dir_marker(&self, rel: &str, attr: &Attr) -> Result<()> {
        let t = attr.mtime.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        let meta = FileMeta {
            mode: Some(S_IFDIR | u32::from(attr.perm.unwrap_or(self.cfg.dir_mode))),
            uid: attr.uid,
            gid: attr.gid,
            mtime: Some((t.as_secs() as i64, t.subsec_nanos())),
        };
        let obj = shrinkfs_codec::encode_all_with(&self.cfg.encode, &[], &meta).map_err(Error::Config)?;
        self.bucket.store.put(&self.key(&join(rel, DIR_MARKER)), obj.into()).await?;
        Ok(())
    }

    /// The recorded attributes of directory `rel`: its marker's metadata; the mount's defaults
    /// when it has none (no marker, an empty one from an older version or another tool, or one
    /// that cannot be read with this mount's key).
    async fn dir_attr(&self, rel: &str) -> Result<Attr> {
        match self.stat_attrs(&self.key(&join(rel, DIR_MARKER))).await {
            Ok(Some((_, a))) => Ok(Attr { size: 0, stored: 0, etag: None, codec: String::new(), ..a }),
            Ok(None) | Err(Error::Codec { .. }) => Ok(Attr::empty()),
            Err(e) => Err(e),
        }
    }

    async fn lookup_exists(&self, parent: u64, name: &str) -> Result<bool> {
        match self.lookup(parent, name).await {
            Ok(a) => {
                self.forget(a.ino, 1);
                Ok(true)
            }
            Err(Error::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes an empty directory.
    pub async fn rmdir(&self, parent: u64, name: &str) -> Result<()> {
        self.writable()?;
        check_name(name)?;
        let dir = self.inode(parent)?;
        let rel = join(&dir.path, name);
        self.check_key_len(&rel)?;
        if self.stat_attrs(&self.key(&rel)).await?.is_some() {
            return Err(Error::NotDir);
        }
        let under = self.first_keys(&rel, 2).await?;
        let found = !under.is_empty();
        // Only this directory's own marker may remain: an empty subdirectory is an entry too.
        let marker = self.key(&join(&rel, DIR_MARKER));
        if under.iter().any(|k| k != &marker) {
            return Err(Error::NotEmpty);
        }
        let local_children = {
            let t = self.inodes.lock().expect("inode lock");
            let open = self.open.lock().expect("open lock");
            t.child(parent, name).is_some_and(|d| t.children(d.ino).any(|c| open.contains_key(&c.ino)))
        };
        if local_children {
            return Err(Error::NotEmpty);
        }
        let known_local =
            self.inodes.lock().expect("inode lock").child(parent, name).is_some_and(|d| d.kind == Kind::Dir);
        if !found && !known_local {
            return Err(Error::NotFound);
        }
        match self.bucket.store.delete(&self.key(&join(&rel, DIR_MARKER))).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        self.inodes.lock().expect("inode lock").remove_name(parent, name);
        Ok(())
    }

    /// Removes a file or symlink.
    pub async fn unlink(&self, parent: u64, name: &str) -> Result<()> {
        self.writable()?;
        check_name(name)?;
        let dir = self.inode(parent)?;
        let rel = join(&dir.path, name);
        self.check_key_len(&rel)?;
        let known = self.inodes.lock().expect("inode lock").child(parent, name).cloned();
        if known.as_ref().is_some_and(|k| k.kind == Kind::Dir) {
            return Err(Error::IsDir);
        }
        let key = self.key(&rel);
        let remove = async {
            match self.bucket.store.head(&key).await {
                Ok(_) => {}
                Err(object_store::Error::NotFound { .. }) => return Ok(false),
                Err(e) => return Err(Error::from(e)),
            }
            match self.bucket.store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(true),
                Err(e) => Err(e.into()),
            }
        };
        // An open file keeps its bytes for its handles (POSIX: unlinked, not gone).
        let had_local = known.as_ref().is_some_and(|k| self.is_open(k.ino));
        let existed = match &known {
            Some(k) => self.detach_open(k.ino, remove).await?,
            None => remove.await?,
        };
        if !existed && !had_local {
            if self.dir_exists(&rel).await? {
                return Err(Error::IsDir);
            }
            return Err(Error::NotFound);
        }
        self.inodes.lock().expect("inode lock").remove_name(parent, name);
        Ok(())
    }

    /// Creates a symbolic link: an object whose data is the target, marked as a link.
    pub async fn symlink(&self, parent: u64, name: &str, target: &str, uid: u32, gid: u32) -> Result<FileAttrs> {
        self.writable()?;
        check_name(name)?;
        let dir = self.inode(parent)?;
        if self.lookup_exists(parent, name).await? {
            return Err(Error::Exists);
        }
        let rel = join(&dir.path, name);
        self.check_key_len(&rel)?;
        let (gid, _) = self.inherited_group(&dir, gid);
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        let meta = FileMeta {
            mode: Some(S_IFLNK | 0o777),
            uid: Some(uid),
            gid: Some(gid),
            mtime: Some((now.as_secs() as i64, now.subsec_nanos())),
        };
        let obj = shrinkfs_codec::encode_all_with(&self.cfg.encode, target.as_bytes(), &meta).map_err(Error::Config)?;
        self.bucket.store.put(&self.key(&rel), obj.into()).await?;
        self.metrics.object_written(target.len() as u64);
        let attr = Attr { size: target.len() as u64, uid: Some(uid), gid: Some(gid), ..Attr::empty() };
        let i = self.inodes.lock().expect("inode lock").upsert(parent, name, Kind::Symlink, attr, None, true);
        Ok(self.attrs_of(&i))
    }

    /// Writes symbolic link or special node `i` again with the mode, owner and time of `attr`
    /// (`chmod`, `lchown`, `utimensat` on the node itself): they live in its small object.
    pub(crate) async fn rewrite_node(&self, i: &Inode, attr: &Attr) -> Result<()> {
        // The data (a link's target, a device's number) is kept as stored.
        let info = self.reader.stat(&self.key(&i.path)).await?.ok_or(Error::NotFound)?;
        let data = self.reader.read_all(&info).await?;
        let mode = match i.kind {
            Kind::Symlink => S_IFLNK | 0o777,
            Kind::Special(t) => t | u32::from(attr.perm.unwrap_or(self.cfg.file_mode)),
            _ => return Err(Error::WrongType("not a link or special file")),
        };
        self.put_small(&i.path, mode, attr, &data).await
    }

    /// Writes the small object of a symbolic link or special node: `data` with metadata `mode`
    /// and the owner and time of `attr`.
    async fn put_small(&self, rel: &str, mode: u32, attr: &Attr, data: &[u8]) -> Result<()> {
        let t = attr.mtime.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        let meta = FileMeta {
            mode: Some(mode),
            uid: attr.uid,
            gid: attr.gid,
            mtime: Some((t.as_secs() as i64, t.subsec_nanos())),
        };
        let obj = shrinkfs_codec::encode_all_with(&self.cfg.encode, data, &meta).map_err(Error::Config)?;
        self.bucket.store.put(&self.key(rel), obj.into()).await?;
        self.metrics.object_written(data.len() as u64);
        Ok(())
    }

    /// Makes a FIFO, socket, device node or empty regular file (`mknod`, `mkfifo`, `bind`).
    pub async fn mknod(&self, parent: u64, name: &str, mode: u32, rdev: u32, uid: u32, gid: u32) -> Result<FileAttrs> {
        self.writable()?;
        check_name(name)?;
        let dir = self.inode(parent)?;
        if dir.kind != Kind::Dir {
            return Err(Error::NotDir);
        }
        let kind = match mode & S_IFMT {
            t @ (S_IFIFO | S_IFSOCK | S_IFCHR | S_IFBLK) => Kind::Special(t),
            S_IFREG | 0 => Kind::File,
            _ => return Err(Error::WrongType("mknod of this file type")),
        };
        if self.lookup_exists(parent, name).await? {
            return Err(Error::Exists);
        }
        let rel = join(&dir.path, name);
        self.check_key_len(&rel)?;
        let (gid, _) = self.inherited_group(&dir, gid);
        let rdev = if matches!(kind, Kind::Special(S_IFCHR | S_IFBLK)) { rdev } else { 0 };
        let perm = (mode & 0o7777) as u16;
        let attr = Attr { perm: Some(perm), uid: Some(uid), gid: Some(gid), rdev, ..Attr::empty() };
        let (type_bits, data) = match kind {
            Kind::Special(t) => (t, node_data(t, rdev)),
            _ => (S_IFREG, Vec::new()),
        };
        self.put_small(&rel, type_bits | u32::from(perm), &attr, &data).await?;
        let i = self.inodes.lock().expect("inode lock").upsert(parent, name, kind, attr, None, true);
        Ok(self.attrs_of(&i))
    }

    /// The target of a symbolic link.
    pub async fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let i = self.inode(ino)?;
        if i.kind != Kind::Symlink {
            return Err(Error::WrongType("not a symbolic link"));
        }
        let info = self.reader.stat(&self.key(&i.path)).await?.ok_or(Error::NotFound)?;
        if info.meta().mode.is_none_or(|m| m & S_IFMT != S_IFLNK) {
            return Err(Error::WrongType("not a symbolic link"));
        }
        self.reader.read_all(&info).await
    }

    /// Renames a file or directory: copy, then delete (not atomic; see docs/SEMANTICS.md).
    pub async fn rename(
        &self,
        parent: u64,
        name: &str,
        new_parent: u64,
        new_name: &str,
        no_replace: bool,
    ) -> Result<()> {
        self.writable()?;
        check_name(name)?;
        check_name(new_name)?;
        let src_dir = self.inode(parent)?;
        let dst_dir = self.inode(new_parent)?;
        let src_attr = self.lookup(parent, name).await?;
        self.forget(src_attr.ino, 1);
        let dst = match self.lookup(new_parent, new_name).await {
            Ok(a) => {
                self.forget(a.ino, 1);
                Some(a)
            }
            Err(Error::NotFound) => None,
            Err(e) => return Err(e),
        };
        if let Some(d) = &dst {
            if no_replace {
                return Err(Error::Exists);
            }
            if d.ino == src_attr.ino {
                return Ok(());
            }
            match (src_attr.kind == Kind::Dir, d.kind == Kind::Dir) {
                (false, true) => return Err(Error::IsDir),
                (true, false) => return Err(Error::NotDir),
                _ => {}
            }
        }
        let from = join(&src_dir.path, name);
        let to = join(&dst_dir.path, new_name);
        self.check_key_len(&to)?;
        let moved: Vec<u64>;
        if src_attr.kind == Kind::Dir {
            if to == from || to.starts_with(&format!("{from}/")) {
                return Err(Error::IntoItself);
            }
            if dst.is_some() {
                self.rmdir(new_parent, new_name).await?;
            }
            // Files open below it are uploaded first, so the copy carries their bytes.
            moved = self.open_below(&from);
            for &ino in &moved {
                self.commit_ino(ino).await?;
            }
            let objects: Vec<_> = self.bucket.store.list(Some(&self.key(&from))).try_collect().await?;
            for o in &objects {
                let rel = self.bucket.rel(&o.location);
                let tail = rel.strip_prefix(&from).unwrap_or(&rel).trim_start_matches('/');
                self.bucket.store.copy(&o.location, &self.key(&join(&to, tail))).await?;
            }
            if objects.is_empty() {
                let attr = self.inodes.lock().expect("inode lock").child(parent, name).map(|d| d.attr.clone());
                self.put_dir_marker(&to, &attr.unwrap_or_else(Attr::empty)).await?;
            }
            for o in &objects {
                self.bucket.store.delete(&o.location).await?;
            }
        } else {
            self.commit_ino(src_attr.ino).await?;
            let move_object = async {
                self.bucket.store.copy(&self.key(&from), &self.key(&to)).await?;
                self.bucket.store.delete(&self.key(&from)).await?;
                Ok(())
            };
            // Handles open on the replaced file keep its bytes.
            match &dst {
                Some(d) => self.detach_open(d.ino, move_object).await?,
                None => move_object.await?,
            }
            moved = vec![src_attr.ino];
        }
        self.inodes.lock().expect("inode lock").rename(parent, name, new_parent, new_name);
        for ino in moved {
            self.rebase_open(ino).await;
        }
        Ok(())
    }

    /// Inodes open below directory path `dir`.
    fn open_below(&self, dir: &str) -> Vec<u64> {
        let prefix = format!("{dir}/");
        let open: Vec<u64> = self.open.lock().expect("open lock").keys().copied().collect();
        let t = self.inodes.lock().expect("inode lock");
        open.into_iter().filter(|ino| t.get(*ino).is_some_and(|i| i.path.starts_with(&prefix))).collect()
    }

    /// After a rename: an open file whose bytes are the stored object reads it under its new key.
    async fn rebase_open(&self, ino: u64) {
        let Some(file) = self.open_file(ino) else { return };
        let mut of = file.lock().await;
        if !matches!(of.body, crate::files::Body::Clean) || of.base.is_none() {
            return;
        }
        let Ok(i) = self.inode(ino) else { return };
        match self.reader.stat(&self.key(&i.path)).await {
            Ok(Some(info)) => of.base = Some(info),
            Ok(None) => tracing::warn!(ino, path = i.path, "renamed open file not found under its new name"),
            Err(e) => self.log_error(&e, "rename", ino, None),
        }
    }

    /// The kernel dropped `n` lookups of `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        if self.is_open(ino) {
            return;
        }
        self.inodes.lock().expect("inode lock").forget(ino, n);
    }

    /// Records where the mount serves its metrics: the root directory then names it in its
    /// extended attribute `user.shrinkfs.metrics_addr`, where `shrinkfs stats` looks.
    pub fn set_metrics_addr(&self, addr: String) {
        let _ = self.metrics_addr.set(addr);
    }

    /// Extended attributes `user.shrinkfs.*` of a file, and of the root directory.
    pub async fn getxattr(&self, ino: u64, name: &str) -> Result<Vec<u8>> {
        if ino == crate::inode::ROOT && name == METRICS_ADDR_XATTR {
            return self.metrics_addr.get().map(|a| a.clone().into_bytes()).ok_or(Error::NoXattr);
        }
        let i = self.inode(ino)?;
        if i.kind != Kind::File || !name.starts_with("user.shrinkfs.") {
            return Err(Error::NoXattr);
        }
        self.commit_ino(ino).await?;
        let info = self.reader.stat(&self.key(&i.path)).await?.ok_or(Error::NotFound)?;
        let value = match name {
            "user.shrinkfs.codec" => info.codec_summary(),
            "user.shrinkfs.stored_size" => info.stored.to_string(),
            "user.shrinkfs.ratio" => {
                format!("{:.3}", if info.stored == 0 { 1.0 } else { info.size() as f64 / info.stored as f64 })
            }
            "user.shrinkfs.format" => match info.parsed {
                Parsed::Plain => "plain".into(),
                Parsed::Framed { .. } => format!("shrinkfs-v{}", shrinkfs_codec::format::VERSION),
            },
            _ => return Err(Error::NoXattr),
        };
        Ok(value.into_bytes())
    }

    /// Names of the extended attributes of an inode, NUL-separated.
    pub fn listxattr(&self, ino: u64) -> Result<Vec<u8>> {
        if ino == crate::inode::ROOT && self.metrics_addr.get().is_some() {
            return Ok(format!("{METRICS_ADDR_XATTR}\0").into_bytes());
        }
        let i = self.inode(ino)?;
        if i.kind != Kind::File {
            return Ok(Vec::new());
        }
        Ok(b"user.shrinkfs.codec\0user.shrinkfs.stored_size\0user.shrinkfs.ratio\0user.shrinkfs.format\0".to_vec())
    }
}

/// The root directory's extended attribute naming the mount's metrics address.
pub const METRICS_ADDR_XATTR: &str = "user.shrinkfs.metrics_addr";

/// The data of a special node's object: a device's number (8 bytes, little-endian), nothing for
/// a FIFO or socket.
fn node_data(type_bits: u32, rdev: u32) -> Vec<u8> {
    if matches!(type_bits, S_IFCHR | S_IFBLK) { u64::from(rdev).to_le_bytes().to_vec() } else { Vec::new() }
}
