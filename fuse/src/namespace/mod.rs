//! The namespace: the inode table (with each directory's children indexed), lookups and
//! attributes against the store (with their TTL and the prefetch after a listing), and the
//! listings of open directories. It knows nothing of open files but what its callers tell it.

mod listing;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use object_store::path::Path;
use shrinkfs_codec::format::{S_IFBLK, S_IFCHR};

use crate::attrs::{FileAttrs, attr_from_object};
use crate::config::NamespaceConfig;
use crate::error::{Error, Result};
use crate::inode::{Attr, Inode, InodeTable, Kind, join};
use crate::objects::{ObjectInfo, Reader};
use crate::store::Bucket;

use listing::Listing;

/// Name of the object that keeps an empty directory in existence. Hidden from listings.
pub const DIR_MARKER: &str = ".shrinkfs.dir";

/// Whether inode `ino` is open (its live attributes and entries are the caller's).
pub type IsOpen<'a> = &'a (dyn Fn(u64) -> bool + Sync);

/// Refuses a name no entry may have: empty, `.`, `..`, with a slash or NUL, longer than 255
/// bytes (`ENAMETOOLONG`), or one of the mount's own.
pub fn check_name(name: &str) -> Result<()> {
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

/// Names and attributes of the bucket's objects, as the kernel sees them.
pub struct Namespace {
    bucket: Bucket,
    reader: Reader,
    cfg: NamespaceConfig,
    inodes: Arc<Mutex<InodeTable>>,
    /// Open directories by handle.
    dirs: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<Listing>>>>,
    next_fh: AtomicU64,
    /// Per directory: the file names of its latest listing, until their attributes are prefetched.
    listed: Mutex<HashMap<u64, Vec<String>>>,
}

impl Namespace {
    /// The namespace of `bucket`, whose objects `reader` reads.
    pub fn new(bucket: Bucket, reader: Reader, cfg: NamespaceConfig) -> Self {
        Namespace {
            bucket,
            reader,
            cfg,
            inodes: Arc::new(Mutex::new(InodeTable::new())),
            dirs: Mutex::default(),
            next_fh: AtomicU64::new(1),
            listed: Mutex::default(),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &NamespaceConfig {
        &self.cfg
    }

    /// The inode table, locked.
    pub fn table(&self) -> MutexGuard<'_, InodeTable> {
        self.inodes.lock().expect("inode lock")
    }

    /// Inode `ino`, as known now.
    pub fn inode(&self, ino: u64) -> Result<Inode> {
        self.table().get(ino).cloned().ok_or(Error::Stale)
    }

    /// The path of inode `ino` from the mount root, empty when unknown.
    pub fn path_of(&self, ino: u64) -> String {
        self.table().get(ino).map(|i| i.path.clone()).unwrap_or_default()
    }

    /// The object key of path `rel`.
    pub fn key(&self, rel: &str) -> Path {
        self.bucket.key(rel)
    }

    /// Refuses a path whose object key (prefix included) would be longer than the store takes,
    /// or whose marker key would be, with `ENAMETOOLONG`: such a name can neither exist nor be made.
    pub fn check_key_len(&self, rel: &str) -> Result<()> {
        let len = self.bucket.prefix_len + self.key(rel).as_ref().len() + 1 + DIR_MARKER.len();
        if len > self.bucket.max_key_len { Err(Error::BadName) } else { Ok(()) }
    }

    /// Kernel attributes of an inode, as cached (the mount's defaults where its object records none).
    pub fn attrs_of(&self, i: &Inode) -> FileAttrs {
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

    fn fresh(&self, i: &Inode) -> bool {
        i.fetched.is_some_and(|t| t.elapsed() < self.cfg.metadata_ttl)
    }

    /// Directory `dir` gained, lost or renamed an entry: its modification time is now (in this
    /// mount's memory; docs/SEMANTICS.md says what persists).
    pub fn entries_changed(&self, dir: u64) {
        if let Some(d) = self.table().get_mut(dir) {
            d.attr.mtime = SystemTime::now();
        }
    }

    /// The group of a new entry of directory `dir` made by a caller whose group is `gid`, and
    /// whether a new subdirectory is set-group-ID: in a set-group-ID directory, the directory's
    /// group and bit (POSIX, as the kernel does on local filesystems).
    pub fn inherited_group(&self, dir: &Inode, gid: u32) -> (u32, bool) {
        let a = self.attrs_of(dir);
        if a.perm & 0o2000 != 0 { (a.gid, true) } else { (gid, false) }
    }

    /// Records `name` in `parent`, just made here, as the kernel's new entry (a counted lookup).
    pub fn created(&self, parent: u64, name: &str, kind: Kind, attr: Attr, fetched: Option<Instant>) -> Inode {
        self.table().upsert(parent, name, kind, attr, fetched, true)
    }

    /// Inode `ino` is now object version `info` (just written).
    pub fn committed(&self, ino: u64, info: &ObjectInfo) {
        let (kind, attr) = attr_from_object(info);
        if let Some(cur) = self.table().get_mut(ino) {
            cur.kind = kind;
            cur.attr = attr;
            cur.fetched = Some(Instant::now());
        }
    }

    /// Kind and attributes of the object at `key`, `None` if there is none. An object that cannot
    /// be decoded still has a name (and its stored size), so it can be listed, removed or replaced;
    /// reading it fails.
    pub async fn stat_attrs(&self, key: &Path) -> Result<Option<(Kind, Attr)>> {
        match self.reader.stat(key).await {
            Ok(Some(info)) => {
                let (kind, mut attr) = attr_from_object(&info);
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

    /// Whether directory `rel` exists in the store (anything is stored under it).
    pub async fn dir_exists(&self, rel: &str) -> Result<bool> {
        Ok(!self.first_keys(rel, 1).await?.is_empty())
    }

    /// Looks `name` up in directory `parent` and counts a kernel lookup: from the table while its
    /// attributes are fresh (or the inode is open), else from the store.
    pub async fn lookup(&self, parent: u64, name: &str, is_open: IsOpen<'_>) -> Result<Inode> {
        check_name(name)?;
        let dir = self.inode(parent)?;
        if dir.kind != Kind::Dir {
            return Err(Error::NotDir);
        }
        let known = self.table().child(parent, name).cloned();
        if let Some(i) = &known
            && (self.fresh(i) || is_open(i.ino))
        {
            return Ok(self.table().upsert(parent, name, i.kind, i.attr.clone(), i.fetched, true));
        }
        let rel = join(&dir.path, name);
        self.check_key_len(&rel)?;
        self.prefetch_listed(parent, &dir.path);
        if let Some((kind, attr)) = self.stat_attrs(&self.key(&rel)).await? {
            return Ok(self.table().upsert(parent, name, kind, attr, Some(Instant::now()), true));
        }
        if self.dir_exists(&rel).await? {
            let attr = match known.filter(|k| k.kind == Kind::Dir) {
                Some(k) => k.attr,
                None => self.dir_attr(&rel).await?,
            };
            return Ok(self.table().upsert(parent, name, Kind::Dir, attr, Some(Instant::now()), true));
        }
        self.table().remove_name(parent, name);
        Err(Error::NotFound)
    }

    /// Whether `name` exists in `parent` (a lookup the kernel does not count).
    pub async fn exists(&self, parent: u64, name: &str, is_open: IsOpen<'_>) -> Result<bool> {
        match self.lookup(parent, name, is_open).await {
            Ok(i) => {
                if !is_open(i.ino) {
                    self.table().forget(i.ino, 1);
                }
                Ok(true)
            }
            Err(Error::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Attributes of inode `i`, refreshed from the store when older than the metadata TTL.
    pub async fn getattr(&self, i: &Inode) -> Result<FileAttrs> {
        if i.kind == Kind::Dir || self.fresh(i) || i.parent == 0 {
            return Ok(self.attrs_of(i));
        }
        match self.stat_attrs(&self.key(&i.path)).await? {
            Some((kind, attr)) => {
                let mut t = self.table();
                let cur = t.get_mut(i.ino).ok_or(Error::Stale)?;
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

    /// The first lookup in a freshly listed directory (`ls -l`, `find`, a file manager) starts
    /// fetching the attributes of every file listed, `prefetch_concurrency` at a time, so the
    /// lookups that follow find them instead of each waiting for its own request.
    fn prefetch_listed(&self, dir: u64, dir_path: &str) {
        let Some(names) = self.listed.lock().expect("listed lock").remove(&dir) else { return };
        if names.len() < 2 || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let (reader, bucket, inodes) = (self.reader.clone(), self.bucket.clone(), self.inodes.clone());
        let (dir_path, concurrency) = (dir_path.to_owned(), self.cfg.prefetch_concurrency);
        tokio::spawn(async move {
            use futures::StreamExt;
            let stats = futures::stream::iter(names)
                .map(|name| {
                    let (reader, key) = (reader.clone(), bucket.key(&join(&dir_path, &name)));
                    async move { (name, reader.stat(&key).await) }
                })
                .buffer_unordered(concurrency);
            futures::pin_mut!(stats);
            while let Some((name, res)) = stats.next().await {
                if let Ok(Some(info)) = res {
                    let (kind, attr) = attr_from_object(&info);
                    if matches!(kind, Kind::Special(S_IFCHR | S_IFBLK)) {
                        // A device's number is in its data: its own lookup reads it.
                        continue;
                    }
                    inodes.lock().expect("inode lock").upsert(dir, &name, kind, attr, Some(Instant::now()), false);
                }
            }
        });
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

    /// The kernel dropped `n` lookups of `ino` (an open inode is kept by its caller: not asked).
    pub fn forget(&self, ino: u64, n: u64) {
        self.table().forget(ino, n);
    }

    /// Inode `ino` and every inode known below it.
    pub fn subtree(&self, ino: u64) -> Vec<u64> {
        self.table().subtree(ino)
    }
}
