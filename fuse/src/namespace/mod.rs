//! The namespace: the inode table (with each directory's children indexed), lookups and
//! attributes against the store (with their TTL and the prefetch after a listing), and the
//! listings of open directories. It knows nothing of open files but what its callers tell it.

mod absent;
mod listing;
pub use listing::WHOLE_PAGES;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use object_store::path::Path;
use shrinkfs_codec::format::{S_IFBLK, S_IFCHR};

use crate::attrs::{FileAttrs, attr_from_head, attr_from_object};
use crate::config::NamespaceConfig;
use crate::error::{Error, Result};
use crate::inode::{Attr, Inode, InodeTable, Kind, ROOT, join};
use crate::objects::{ObjectInfo, Reader};
use crate::store::Bucket;
use crate::store::behind::Deletes;

use absent::Absent;
use listing::Listing;

/// Name of the object that keeps an empty directory in existence. Hidden from listings.
pub const DIR_MARKER: &str = ".shrinkfs.dir";

/// Whether inode `ino` is open (its live attributes and entries are the caller's).
pub type IsOpen<'a> = &'a (dyn Fn(u64) -> bool + Sync);

/// Refuses a name no entry may have: empty, `.`, `..`, with a slash or NUL, longer than 255
/// bytes (`ENAMETOOLONG`), or one of the mount's own.
pub fn check_name(name: &str) -> Result<()> {
    // Object keys cannot hold control characters (object_store refuses them in a key's parts).
    if name.is_empty()
        || name == "."
        || name == ".."
        || name.contains('/')
        || name.contains(|c: char| c.is_ascii_control())
    {
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
    /// What is known to be absent: directories' complete listings and names a lookup missed.
    absent: Mutex<Absent>,
    /// Directories whose times changed with their entries, by path: the attributes their markers
    /// are to carry, until written (see [`Namespace::take_dir_times`]).
    dir_times: Mutex<HashMap<String, Attr>>,
    /// Per directory: the stale revalidations asked for lately, and its relistings.
    relists: Mutex<HashMap<u64, Relist>>,
    /// The deletes queued behind unlinks, if they are: one that fails puts back a name this
    /// mount's listings left out.
    deletes: Option<Arc<Deletes>>,
    /// Their failures when `absent` last held.
    deletes_failed: AtomicUsize,
}

/// Where a listing of a directory started from (see [`Namespace::listed_completely`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Start {
    /// When its first request was sent: what it shows holds from then.
    at: Instant,
    /// The inode table's change count then.
    since: u64,
    /// DELETEs queued behind unlinks that had failed then.
    failures: usize,
}

/// A directory's demand for revalidations (see [`Namespace::confirmed_by_listing`]).
#[derive(Debug, Default)]
struct Relist {
    /// When the current window (one metadata TTL long) began, and the stale revalidations asked
    /// for in it.
    window: Option<(Instant, u32)>,
    /// Held while the directory is relisted; holds when the latest relisting started.
    gate: Arc<tokio::sync::Mutex<Option<Instant>>>,
}

/// The stale revalidation in one directory, within one metadata TTL, that lists it instead of
/// asking for one more HEAD, per page its listing takes (a page costs a few HEADs' time): a
/// burst (`ls -l` after a while, `find`, `rm *`, a build's stats), not a program polling a file
/// or two.
const RELIST_AFTER: u32 = 4;

/// Directories whose relisting state is kept; past that, the idle ones are dropped.
const MAX_RELISTS: usize = 4096;

impl Namespace {
    /// The namespace of `bucket`, whose objects `reader` reads.
    pub fn new(bucket: Bucket, reader: Reader, cfg: NamespaceConfig, deletes: Option<Arc<Deletes>>) -> Self {
        Namespace {
            bucket,
            reader,
            cfg,
            inodes: Arc::new(Mutex::new(InodeTable::new())),
            dirs: Mutex::default(),
            next_fh: AtomicU64::new(1),
            listed: Mutex::default(),
            absent: Mutex::default(),
            dir_times: Mutex::default(),
            relists: Mutex::default(),
            deletes,
            deletes_failed: AtomicUsize::new(0),
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
    /// with `ENAMETOOLONG`: such a name can neither exist nor be made.
    pub fn check_key_len(&self, rel: &str) -> Result<()> {
        self.check_len(rel, 0)
    }

    /// Refuses, with `ENAMETOOLONG`, to make a directory at a path whose marker key (the key, a
    /// slash and `DIR_MARKER`) would be longer than the store takes: a name whose marker cannot
    /// exist cannot be a directory, though it may be a file.
    pub fn check_dir_key_len(&self, rel: &str) -> Result<()> {
        self.check_len(rel, 1 + DIR_MARKER.len())
    }

    fn check_len(&self, rel: &str, more: usize) -> Result<()> {
        let len = self.bucket.prefix_len + self.key(rel).as_ref().len() + more;
        if len > self.bucket.max_key_len { Err(Error::BadName) } else { Ok(()) }
    }

    /// Kernel attributes of an inode, as cached (the mount's defaults where its object records none).
    pub fn attrs_of(&self, i: &Inode) -> FileAttrs {
        let perm = match i.kind {
            Kind::Dir => i.attr.perm.unwrap_or(self.cfg.dir_mode),
            Kind::Symlink => 0o777,
            Kind::File | Kind::Special(_) => i.attr.perm.unwrap_or(self.cfg.file_mode),
        };
        // A device node, fifo or socket is 0 bytes long, as on Linux's own filesystems (its object
        // holds a device number).
        let node = matches!(i.kind, Kind::Special(_));
        FileAttrs {
            ino: i.ino,
            kind: i.kind,
            size: if node { 0 } else { i.attr.size },
            blocks: if node { 0 } else { i.attr.stored.div_ceil(512) },
            mtime: i.attr.mtime,
            ctime: i.attr.ctime,
            atime: i.attr.atime,
            perm,
            uid: i.attr.uid.unwrap_or(self.cfg.uid),
            gid: i.attr.gid.unwrap_or(self.cfg.gid),
            rdev: i.attr.rdev,
            // A directory's subdirectories not counted yet: 1, never a count too low.
            nlink: match (i.kind, i.subdirs) {
                (Kind::Dir, Some(n)) => n.saturating_add(2),
                _ => 1,
            },
        }
    }

    /// Whether inode `i`'s attributes are still trusted (the kernel may cache them as long).
    pub fn trusted(&self, i: &Inode) -> bool {
        self.fresh(i)
    }

    fn fresh(&self, i: &Inode) -> bool {
        i.fetched.is_some_and(|t| t.elapsed() < self.cfg.metadata_ttl)
    }

    /// What is known absent; first, if a DELETE queued behind an unlink failed since the last
    /// call, the listings are forgotten (the name is back in the bucket).
    fn absent(&self) -> MutexGuard<'_, Absent> {
        let mut a = self.absent.lock().expect("absent lock");
        if let Some(d) = &self.deletes {
            let failed = d.failures();
            if self.deletes_failed.swap(failed, Ordering::AcqRel) != failed {
                a.forget_listings();
            }
        }
        a
    }

    /// Whether `name` is known absent from directory `parent` without asking the store: not in
    /// the table (`known`), and missing from a complete listing or a lookup younger than the
    /// negative TTL (names made here since are added to both: `appeared`).
    fn known_absent(&self, parent: u64, name: &str, known: Option<&Inode>) -> bool {
        known.is_none() && self.absent().is_absent(parent, name, self.cfg.negative_ttl)
    }

    /// Where a listing starts from: when, the table's change count, and the failed deletes then.
    pub(crate) fn listing_start(&self) -> Start {
        Start { at: Instant::now(), since: self.table().changes(), failures: self.deletes_failures() }
    }

    /// DELETEs queued behind unlinks that failed, since the mount started.
    fn deletes_failures(&self) -> usize {
        self.deletes.as_ref().map_or(0, |d| d.failures())
    }

    /// How long a complete listing is kept: while it tells absent names or answers `opendir`.
    fn listing_kept(&self) -> Duration {
        self.cfg.negative_ttl.max(self.cfg.listing_ttl)
    }

    /// Directory `dir` was listed completely, from `at` (see [`Start`]), its path then being
    /// `path`: `names` are all it held then (with their kinds). What this mount changed there while its pages came is applied on top:
    /// names made or moved in since are added, names removed here (or missed by a lookup) since
    /// are left out. A listing of a directory moved meanwhile is not kept (its later pages may
    /// have listed an emptied path).
    pub(crate) fn listed_completely(&self, dir: u64, path: Option<&str>, at: Start, names: HashMap<String, Kind>) {
        let kept = self.listing_kept();
        if kept.is_zero() {
            return;
        }
        let Start { at, since, failures } = at;
        // The table, then what is known absent (the order every holder of both takes them in):
        // a name made or moved here meanwhile is in the table by now, or is added to this listing
        // once it is kept.
        let t = self.table();
        if path.is_some_and(|p| t.get(dir).is_none_or(|d| d.path != p)) {
            return;
        }
        let made = t.children(dir).filter(|c| c.changed > since).map(|c| (c.name.clone(), c.kind)).collect();
        let mut a = self.absent();
        // A DELETE queued behind an unlink that failed meanwhile may have put back a name the
        // listing left out (or this mount's removal of it, made since, would leave out). Asked
        // with `absent` held: one that fails later makes the next `absent()` forget this listing.
        if self.deletes_failures() != failures {
            return;
        }
        if a.prune_due() {
            let gone: Vec<u64> = a.listed_dirs().into_iter().filter(|d| t.get(*d).is_none()).collect();
            a.prune(&gone);
        }
        a.complete(dir, at, names, made, kept);
    }

    /// The names and kinds of directory `dir`'s latest complete listing, kept up with this
    /// mount's changes, and when it started, if it is younger than the listing TTL.
    fn cached_listing(&self, dir: u64) -> Option<(Instant, Vec<(String, Kind)>)> {
        self.absent().listing(dir, self.cfg.listing_ttl)
    }

    /// `name` of directory `dir` was found gone: its latest complete listing no longer holds it.
    pub(crate) fn unlisted(&self, dir: u64, name: &str) {
        self.absent().unlisted(dir, name);
    }

    /// This mount moved `name` of `parent` to `new_name` of `new_parent` (its objects copied and
    /// deleted): the table follows, and the moved inode counts as changed here (a listing on its
    /// way meanwhile keeps the new name). The caller then records the new name
    /// ([`Self::appeared`]) and the old one's removal ([`Self::removed`]).
    pub(crate) fn moved(&self, parent: u64, name: &str, new_parent: u64, new_name: &str) {
        let mut t = self.table();
        t.rename(parent, name, new_parent, new_name);
        if let Some(ino) = t.child(new_parent, new_name).map(|i| i.ino) {
            t.changed_here(ino);
        }
    }

    /// Directory `dir` was just made here: it holds nothing.
    pub fn made_empty(&self, dir: u64) {
        self.subdirs_counted(dir, 0);
        self.listed_completely(dir, None, self.listing_start(), HashMap::new());
    }

    /// This mount removed `name` from directory `parent` (unlink, rmdir, a rename away): its
    /// listings leave it out at once (line 1 of the consistency model: a mount sees its own
    /// changes). With `done` (its DELETEs done, none queued below it), it is also absent for the
    /// negative TTL, as if a lookup had missed it; a queued DELETE is waited for by the next
    /// request for the name instead, which finds it again if the DELETE failed.
    pub(crate) fn removed(&self, parent: u64, name: &str, done: bool) {
        self.absent().removed(parent, name, done, !self.cfg.negative_ttl.is_zero());
    }

    fn missed(&self, parent: u64, name: &str) {
        self.absent().missed(parent, name, !self.cfg.negative_ttl.is_zero());
    }

    /// Whether the latest listing of `dir` is complete and younger than the negative TTL (so
    /// what it says each name is still holds, as far as this mount can tell).
    fn listing_fresh(&self, dir: u64) -> bool {
        self.absent().listed_within(dir, self.cfg.negative_ttl)
    }

    /// Directory `dir` gained, lost or renamed an entry: its modification and change times are
    /// now, to be written to its marker by the next [`Self::take_dir_times`].
    pub fn entries_changed(&self, dir: u64) {
        let mut t = self.table();
        let Some(d) = t.get_mut(dir).filter(|d| d.kind == Kind::Dir && (d.parent != 0 || d.ino == ROOT)) else {
            return;
        };
        let now = SystemTime::now();
        (d.attr.mtime, d.attr.ctime) = (now, now);
        let (path, attr) = (d.path.clone(), d.attr.clone());
        t.changed_here(dir);
        drop(t);
        self.dir_times.lock().expect("dir times lock").insert(path, attr);
    }

    /// The directories whose times changed since the last call, by path, with the attributes
    /// their markers are to carry; the caller writes them (or gives them back on failure).
    pub fn take_dir_times(&self) -> HashMap<String, Attr> {
        std::mem::take(&mut *self.dir_times.lock().expect("dir times lock"))
    }

    /// Gives back directory times a write failed to store, unless newer ones came meanwhile.
    pub fn keep_dir_times(&self, unwritten: HashMap<String, Attr>) {
        let mut pending = self.dir_times.lock().expect("dir times lock");
        for (path, attr) in unwritten {
            pending.entry(path).or_insert(attr);
        }
    }

    /// Forgets the unwritten times of directory `rel`, whose marker is written or removed now.
    pub fn drop_dir_times(&self, rel: &str) {
        self.dir_times.lock().expect("dir times lock").remove(rel);
    }

    /// Directory `dir` has `delta` more subdirectories, made, removed or moved by this mount.
    pub fn subdirs_changed(&self, dir: u64, delta: i32) {
        if let Some(d) = self.table().get_mut(dir)
            && let Some(n) = d.subdirs
        {
            d.subdirs = Some(n.saturating_add_signed(delta));
        }
    }

    /// Directory `dir`'s latest complete listing holds `n` subdirectories.
    fn subdirs_counted(&self, dir: u64, n: usize) {
        if let Some(d) = self.table().get_mut(dir) {
            d.subdirs = Some(u32::try_from(n).unwrap_or(u32::MAX));
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
        // The table first: a listing that completes meanwhile finds the name there.
        let i = {
            let mut t = self.table();
            let i = t.upsert(parent, name, kind, attr, fetched, true);
            t.changed_here(i.ino);
            t.get(i.ino).cloned().expect("just made")
        };
        self.appeared(parent, name, kind);
        i
    }

    /// `name` of `parent` exists now, made or moved there by this mount: what was known of its
    /// absence no longer holds, even once the kernel forgets the inode (the table then no
    /// longer shows it).
    pub fn appeared(&self, parent: u64, name: &str, kind: Kind) {
        self.absent().present(parent, name, kind);
    }

    /// A lookup asked at `asked` found `name` of `parent` in the store as a `kind`: a complete
    /// listing of its directory holds it from now on, unless this mount removed it since.
    fn found(&self, parent: u64, name: &str, kind: Kind, asked: Instant) {
        self.absent().found(parent, name, kind, asked);
    }

    /// Inode `ino` is now object version `info` (just written).
    /// Its name is then in the store: its directory's complete listing holds it.
    pub fn committed(&self, ino: u64, info: &ObjectInfo) {
        let (kind, attr) = attr_from_object(info);
        let named = {
            let mut t = self.table();
            let Some(cur) = t.get_mut(ino) else { return };
            cur.kind = kind;
            cur.attr = attr;
            cur.fetched = Some(Instant::now());
            let named = (cur.parent != 0).then(|| (cur.parent, cur.name.clone()));
            t.changed_here(ino);
            named
        };
        if let Some((parent, name)) = named {
            self.appeared(parent, &name, kind);
        }
    }

    /// Inode `ino`'s name now names object version `info` (the stored version its dropped changes
    /// were to replace) through a new inode: the kernel, which may trust its own size of the old
    /// one (the write-back cache), then learns the version's. Returns the name, if it has one.
    pub fn renamed_to_version(&self, ino: u64, info: &ObjectInfo) -> Option<(u64, String)> {
        let (kind, attr) = attr_from_object(info);
        let mut t = self.table();
        let cur = t.get(ino)?;
        let (parent, name) = (cur.parent, cur.name.clone());
        if parent == 0 || t.child(parent, &name).is_none_or(|c| c.ino != ino) {
            return None;
        }
        t.remove_name(parent, &name);
        let new = t.upsert(parent, &name, kind, attr, Some(Instant::now()), false);
        t.changed_here(new.ino);
        Some((parent, name))
    }

    /// Kind and attributes of the object at `key`, `None` if there is none: one HEAD, and
    /// nothing more when it names the version `known` describes, a version whose layout is cached,
    /// or carries the attributes recorded beside the object; else its footer is read (objects of
    /// older versions, of other tools, multipart uploads, sealed mounts).
    pub async fn stat_attrs(&self, key: &Path, known: Option<(Kind, &Attr)>) -> Result<Option<(Kind, Attr)>> {
        stat_object(&self.reader, &self.bucket, key, known).await
    }

    /// Whether directory `rel` exists in the store: anything is stored under it, or, in a local
    /// bucket, the directory is there (an empty one another program made has no marker).
    pub async fn dir_exists(&self, rel: &str) -> Result<bool> {
        if !self.first_keys(rel, 1).await?.is_empty() {
            return Ok(true);
        }
        match &self.bucket.local {
            Some(local) => Ok(local.is_dir(&self.key(rel)).await),
            None => Ok(false),
        }
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
            // Counted on the inode as it is now: a commit may have changed it since `known`.
            let mut t = self.table();
            if t.child(parent, name).is_some_and(|now| now.ino == i.ino) {
                return Ok(t.looked_up(i.ino).expect("named above"));
            }
        }
        let rel = join(&dir.path, name);
        self.check_key_len(&rel)?;
        if self.known_absent(parent, name, known.as_ref()) {
            return Err(Error::NotFound);
        }
        // A stored version already described: a listing of its directory confirms it, in a
        // burst of such lookups; else its HEAD alone does.
        let had = known.as_ref().filter(|k| k.fetched.is_some() && k.kind != Kind::Dir).map(|k| (k.kind, &k.attr));
        if had.is_some()
            && let Some(i) = self.confirmed_by_listing(parent, &dir.path, name, is_open).await?
        {
            let mut t = self.table();
            if t.child(parent, name).is_some_and(|now| now.ino == i.ino) {
                return Ok(t.looked_up(i.ino).expect("named above"));
            }
        }
        self.prefetch_listed(parent, &dir.path);
        let (since, asked) = (self.table().changes(), Instant::now());
        if let Some((kind, attr)) = self.stat_attrs(&self.key(&rel), had).await? {
            self.found(parent, name, kind, asked);
            return Ok(self.table().observe(parent, name, kind, attr, true, since));
        }
        // A fresh complete listing said this is a directory: no need to list it again.
        let listed_dir = known.as_ref().is_some_and(|k| k.kind == Kind::Dir) && self.listing_fresh(parent);
        if listed_dir || self.is_dir(parent, &dir.path, name, &rel).await? {
            // Past the TTL (or never asked): its mode, owner and times from its marker, which
            // another mount's chmod or touch rewrote.
            let attr = match known.filter(|k| k.kind == Kind::Dir && self.fresh(k)) {
                Some(k) => k.attr,
                None => self.dir_attr(&rel).await?,
            };
            self.found(parent, name, Kind::Dir, asked);
            return Ok(self.table().observe(parent, name, Kind::Dir, attr, true, since));
        }
        self.table().observe_gone(parent, name, since);
        self.missed(parent, name);
        Err(Error::NotFound)
    }

    /// Whether `name` of directory `parent` (at `dir_path`; the name's path is `rel`) is a
    /// directory in the store, no object being named so. A small directory is listed whole in
    /// the same one request, so the names a burst of creates asks for next are known absent;
    /// a large one is asked only for one key under `rel`.
    async fn is_dir(&self, parent: u64, dir_path: &str, name: &str, rel: &str) -> Result<bool> {
        if !self.cfg.negative_ttl.is_zero()
            && !self.absent().large.contains(&parent)
            && let Some(dirs) = self.list_whole(parent, dir_path, None).await?
        {
            return Ok(dirs.contains(name));
        }
        self.dir_exists(rel).await
    }

    /// Attributes of inode `i`, refreshed from the store when older than the metadata TTL: by a
    /// listing of its directory in a burst of such requests there, else by a HEAD.
    pub async fn getattr(&self, i: &Inode, is_open: IsOpen<'_>) -> Result<FileAttrs> {
        if self.fresh(i) || i.parent == 0 {
            return Ok(self.attrs_of(i));
        }
        if i.kind == Kind::Dir {
            // A directory's marker: another mount's chmod or touch shows after the TTL too.
            let since = self.table().changes();
            let attr = match self.dir_attr(&i.path).await {
                Ok(attr) => attr,
                // The store did not answer (an outage): the mode and times last known answer, and
                // stand for another TTL, rather than fail every stat of the directory (the root's
                // among them) while files kept or open in it are still served from here.
                Err(Error::Store(e)) if crate::store::compat::is_transient(&e) => {
                    tracing::debug!(path = %i.path, error = %e, "directory attributes as last known: the store did not answer");
                    let mut t = self.table();
                    let cur = t.get_mut(i.ino).ok_or(Error::Stale)?;
                    if cur.changed <= since && cur.kind == Kind::Dir {
                        cur.fetched = Some(Instant::now());
                    }
                    return Ok(self.attrs_of(cur));
                }
                Err(e) => return Err(e),
            };
            let mut t = self.table();
            let cur = t.get_mut(i.ino).ok_or(Error::Stale)?;
            if cur.changed <= since && cur.kind == Kind::Dir {
                cur.attr = attr;
                cur.fetched = Some(Instant::now());
            }
            return Ok(self.attrs_of(cur));
        }
        let dir_path = self.path_of(i.parent);
        if i.fetched.is_some()
            && let Some(now) = self.confirmed_by_listing(i.parent, &dir_path, &i.name, is_open).await?
            && now.ino == i.ino
        {
            return Ok(self.attrs_of(&now));
        }
        let since = self.table().changes();
        let had = i.fetched.map(|_| (i.kind, &i.attr));
        let got = self.stat_attrs(&self.key(&i.path), had).await?;
        let mut t = self.table();
        let cur = t.get_mut(i.ino).ok_or(Error::Stale)?;
        // Changed here since the request: what is known here is newer than the answer.
        if cur.changed > since {
            return Ok(self.attrs_of(cur));
        }
        match got {
            Some((kind, attr)) => {
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

    /// A file of directory `parent` (at `dir_path`) whose attributes are no longer trusted, asked
    /// for by a lookup or a stat. Once such requests come in a burst there (the
    /// [`RELIST_AFTER`]th per page of its listing within one metadata TTL), one listing of the
    /// directory confirms every known file whose version it still shows, instead of a HEAD each
    /// (concurrent requests wait for that one listing). Returns the inode of `name` if a listing
    /// confirmed it; `None` leaves it to a HEAD. Not for local-directory buckets (a listing there
    /// reads every entry's metadata, as many HEADs would), nor for directories one listing
    /// request does not cover.
    async fn confirmed_by_listing(
        &self,
        parent: u64,
        dir_path: &str,
        name: &str,
        is_open: IsOpen<'_>,
    ) -> Result<Option<Inode>> {
        let ttl = self.cfg.metadata_ttl;
        // (A parent not known, whose path would read as the root's, is not listed.)
        if ttl.is_zero()
            || (parent != ROOT && dir_path.is_empty())
            || self.cfg.negative_ttl.is_zero()
            || self.bucket.records_cost_extra()
            || self.absent().large.contains(&parent)
        {
            return Ok(None);
        }
        // Pages its latest listing took (one if it was not listed yet).
        let pages = {
            let a = self.absent();
            let names = a.listed_names(parent);
            names.div_ceil(self.cfg.page_keys.max(1)).max(1) as u32
        };
        let gate = {
            let mut r = self.relists.lock().expect("relists lock");
            if r.len() >= MAX_RELISTS {
                // Idle directories go: those of past windows first, then, if that was not enough,
                // every one not being relisted (only a heuristic's count is lost).
                r.retain(|_, e| e.window.is_some_and(|(at, _)| at.elapsed() < ttl) || Arc::strong_count(&e.gate) > 1);
                if r.len() >= MAX_RELISTS / 2 {
                    r.retain(|_, e| Arc::strong_count(&e.gate) > 1);
                }
            }
            let e = r.entry(parent).or_default();
            let (began, asked) = match e.window {
                Some((at, n)) if at.elapsed() < ttl => (at, n + 1),
                _ => (Instant::now(), 1),
            };
            e.window = Some((began, asked));
            if asked < RELIST_AFTER * pages {
                return Ok(None);
            }
            e.gate.clone()
        };
        let mut latest = gate.lock().await;
        let confirmed = || self.table().child(parent, name).filter(|i| self.fresh(i)).cloned();
        if let Some(i) = confirmed() {
            // By the listing this request waited for.
            return Ok(Some(i));
        }
        if latest.is_some_and(|at| at.elapsed() < ttl) {
            // Listed lately without confirming it: another version, or gone.
            return Ok(None);
        }
        *latest = Some(Instant::now());
        match self.list_whole(parent, dir_path, Some(is_open)).await {
            Ok(Some(_)) => Ok(confirmed()),
            Ok(None) => Ok(None),
            // The HEAD this would have spared answers instead.
            Err(e) => {
                tracing::debug!(dir = dir_path, error = %e, "relisting for stale stats failed");
                Ok(None)
            }
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
        let since = self.table().changes();
        tokio::spawn(async move {
            use futures::StreamExt;
            let stats = futures::stream::iter(names)
                .map(|name| {
                    let (reader, bucket, key) = (reader.clone(), bucket.clone(), bucket.key(&join(&dir_path, &name)));
                    async move {
                        let got = stat_object(&reader, &bucket, &key, None).await;
                        (name, got)
                    }
                })
                .buffer_unordered(concurrency);
            futures::pin_mut!(stats);
            while let Some((name, res)) = stats.next().await {
                if let Ok(Some((kind, attr))) = res {
                    inodes.lock().expect("inode lock").observe(dir, &name, kind, attr, false, since);
                }
            }
        });
    }

    /// The recorded attributes of directory `rel`: its marker's metadata; the mount's defaults
    /// when it has none (no marker, an empty one from an older version or another tool, or one
    /// that cannot be read with this mount's key).
    async fn dir_attr(&self, rel: &str) -> Result<Attr> {
        if let Some(a) = self.dir_times.lock().expect("dir times lock").get(rel) {
            // Newer than its marker, which is yet to be written.
            return Ok(a.clone());
        }
        match self.stat_attrs(&self.key(&join(rel, DIR_MARKER)), None).await {
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

/// See [`Namespace::stat_attrs`].
async fn stat_object(
    reader: &Reader,
    bucket: &Bucket,
    key: &Path,
    known: Option<(Kind, &Attr)>,
) -> Result<Option<(Kind, Attr)>> {
    if known.is_none() && !reader.expects_records() {
        // No record to expect: the footer's GET answers in one request.
        return stat_footer(reader, bucket, key).await;
    }
    // Where a record costs a read of its own, the version's metadata alone confirms one known.
    if let Some((kind, attr)) = known
        && let Some(etag) = attr.etag.as_deref()
        && bucket.records_cost_extra()
    {
        match reader.is_version(key, etag).await? {
            Some(true) => return Ok(Some((kind, attr.clone()))),
            Some(false) => {}
            None => return Ok(None),
        }
    }
    let Some(head) = reader.head(key).await? else { return Ok(None) };
    let etag = head.etag();
    if let Some((kind, attr)) = known
        && attr.etag.as_deref() == Some(&*etag)
    {
        return Ok(Some((kind, attr.clone())));
    }
    if let Some(info) = reader.known(&head.meta) {
        let (kind, attr) = attr_from_object(&info);
        if !matches!(kind, Kind::Special(S_IFCHR | S_IFBLK)) {
            return Ok(Some((kind, attr)));
        }
    }
    if let Some(r) = &head.recorded {
        return Ok(Some(attr_from_head(&head, r)));
    }
    stat_footer(reader, bucket, key).await
}

/// Kind and attributes of the object at `key` from its footer (a suffix GET), `None` if there is
/// none. An object that cannot be decoded still has a name (and its stored size), so it can be
/// listed, removed or replaced; reading it fails.
async fn stat_footer(reader: &Reader, bucket: &Bucket, key: &Path) -> Result<Option<(Kind, Attr)>> {
    // A small object comes whole with its footer: kept for the open that may follow.
    match reader.stat_small(key).await {
        Ok(Some(info)) => {
            let (kind, mut attr) = attr_from_object(&info);
            if matches!(kind, Kind::Special(S_IFCHR | S_IFBLK)) {
                // A device's number is its object's data.
                let data = reader.read_all(&info).await?;
                attr.rdev = <[u8; 8]>::try_from(data.as_slice()).map_or(0, |b| u64::from_le_bytes(b) as u32);
            }
            Ok(Some((kind, attr)))
        }
        Ok(None) => Ok(None),
        // Without the right key an object is not ours to show, whatever its state.
        Err(
            e @ Error::Codec {
                source:
                    shrinkfs_codec::Error::KeyRequired | shrinkfs_codec::Error::WrongKey | shrinkfs_codec::Error::NotSealed,
                ..
            },
        ) => Err(e),
        Err(Error::Codec { key: k, source }) => {
            tracing::warn!(key = k, error = %source, "object cannot be decoded; shown with its stored size");
            let meta = match bucket.store.head(key).await {
                Ok(m) => m,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            let mtime = crate::stamp::time((meta.last_modified.timestamp(), 0));
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
