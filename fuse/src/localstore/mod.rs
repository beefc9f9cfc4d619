//! `LocalStore`: a local directory as a bucket, written crash-safely. Every write is staged in
//! `<root>/.shrinkfs-tmp/`, fsynced, renamed into place and its directory fsynced. Every system
//! call is given a path relative to the root's directory file descriptor (or, for a key longer than
//! `PATH_MAX - 1`, to a directory opened on the way), so a key's length depends on neither the
//! root's own path nor `PATH_MAX`. Reads, deletes and listings give
//! `LocalFileSystem`'s results: the same files, metadata, ETags and error kinds, except that a
//! name `LocalFileSystem` keeps for its own staging files (`NAME#N`) is a key like any other.
//!
//! Why not `LocalFileSystem`: it builds absolute paths, so a key is limited to `PATH_MAX` less
//! the root's path; it stages `NAME#N` beside the target, so a 254- or 255-byte name fails with
//! ENAMETOOLONG; kill -9 leaves those files behind, hidden from listings; a failed multipart part
//! is forgotten and `complete` succeeds with a hole; and nothing is fsynced.

mod root;
mod upload;
mod walk;
mod xattr;

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    Attributes, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use rustix::fs::FileType;
use rustix::io::Errno;

use root::{FileInfo, Root, Staged};
use xattr::{metadata_only, read_metadata, write_metadata};

/// Directory under the bucket root where writes are staged: on the same filesystem as every
/// object, so moving a staged file into place is one atomic rename. Never listed, never a key.
pub const TMP_DIR: &str = ".shrinkfs-tmp";

/// The `store` named in `object_store::Error::Generic`.
const STORE: &str = "LocalStore";

/// What went wrong in a `LocalStore`; the source of the `object_store::Error` it returns.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A local I/O call failed; `source` keeps the OS error (ENOSPC, ENAMETOOLONG…).
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory it was done to.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A multipart upload could not be completed; nothing was written under its key.
    #[error("multipart upload to {}: {reason}; nothing was written", path.display())]
    Incomplete {
        /// Where the object would have gone.
        path: PathBuf,
        /// Which part failed or is missing.
        reason: String,
    },
    /// A key under the staging directory, which no object may use.
    #[error("key {key} is reserved: {TMP_DIR} holds staged writes")]
    Reserved {
        /// The key.
        key: String,
    },
    /// A key no file may have: empty, or one `LocalFileSystem` takes for its own staging files
    /// (`NAME#N`, the part after the first `#` all digits), which it would not read back.
    #[error("key {key:?} cannot name a file: it is empty")]
    BadKey {
        /// The key.
        key: String,
    },
    /// A range outside the object.
    #[error("range of {}: {source}", path.display())]
    Range {
        /// The object's file.
        path: PathBuf,
        /// What is wrong with it.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// What `LocalStore::cleanup` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cleanup {
    /// Files removed.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// A local directory as an object store: staged and fsynced writes for everything that creates
/// an object, `LocalFileSystem`'s results for everything else, every path relative to the
/// directory's file descriptor.
#[derive(Debug)]
pub struct LocalStore {
    root: Arc<Root>,
    /// Makes this multipart part's write fail (tests of the failed-part path).
    #[cfg(test)]
    fail_part: Option<u64>,
}

impl LocalStore {
    /// Opens the directory `root` as a bucket, creating its staging directory if missing. A
    /// read-only directory opens too; writes then fail with the OS error.
    pub fn new(root: &std::path::Path) -> Result<Self> {
        Ok(LocalStore {
            root: Root::open(root)?,
            #[cfg(test)]
            fail_part: None,
        })
    }

    /// The bucket directory (canonical).
    pub fn root(&self) -> &std::path::Path {
        self.root.path()
    }

    /// Removes what interrupted writes left behind, if older than `older_than` (a grace period,
    /// so that another process's writes in flight survive): every file in the staging directory
    /// (a staged file's mtime moves with each write, so a live upload stays young). Nothing
    /// outside it: a file named as `LocalFileSystem` stages its writes (`NAME#N`) may be another
    /// program's, `issue#42`. Symbolic links are not followed.
    pub fn cleanup(&self, older_than: Duration) -> std::io::Result<Cleanup> {
        walk::cleanup(&self.root, older_than)
    }

    /// The file a new object at `location` goes to (its path from the root): no staging key.
    fn writable(&self, location: &Path) -> Result<String> {
        if is_reserved(location) {
            return Err(generic(LocalError::Reserved { key: location.to_string() }));
        }
        file_of(location)
    }

    /// The file of the object at `location`: staging keys do not exist for readers.
    fn readable(&self, location: &Path) -> Result<String> {
        if is_reserved(location) {
            let source = Box::new(LocalError::Reserved { key: location.to_string() });
            return Err(object_store::Error::NotFound { path: location.to_string(), source });
        }
        file_of(location)
    }

    /// Whether `key` is a directory of the bucket (not through a symbolic link), empty or not: a
    /// directory another program made holds no marker, and maybe no object.
    pub async fn is_dir(&self, key: &Path) -> bool {
        let Ok(rel) = self.readable(key) else { return false };
        let root = self.root.clone();
        blocking(0, move || Ok(root.is_dir(&rel))).await.unwrap_or(false)
    }

    /// Removes directory `key` with its marker (`rmdir`), where it holds nothing else, not even
    /// what the bucket does not show; `ENOTEMPTY` (see [`os_error`]) otherwise, nothing changed.
    pub async fn remove_dir(&self, key: &Path) -> Result<()> {
        let rel = self.readable(key)?;
        if rel.is_empty() {
            return Err(io_error("remove directory", self.root.path(), ErrorKind::PermissionDenied.into()));
        }
        let root = self.root.clone();
        blocking(0, move || root.remove_dir(&rel)).await
    }

    /// Moves directory `from` whole to `to` (which must not exist): what it holds that is no
    /// object (an empty directory another program made, a socket) moves with it.
    pub async fn move_dir(&self, from: &Path, to: &Path) -> Result<()> {
        let (from, to) = (self.readable(from)?, self.writable(to)?);
        let root = self.root.clone();
        blocking(0, move || root.move_dir(&from, &to)).await
    }

    /// Starts an object written in place: a staged file the caller writes at any offsets, which
    /// becomes the object at `location` when published — its bytes written once, with no parts.
    pub fn write_in_place(&self, location: &Path) -> Result<InPlace> {
        let target = self.writable(location)?;
        let (file, staged) = self.root.temp_file("ip-")?;
        Ok(InPlace { file, staged: Some(staged), target, root: self.root.clone() })
    }

    async fn copy_to(&self, from: &Path, to: &Path, noclobber: bool) -> Result<()> {
        let src = self.readable(from)?;
        let dst = self.writable(to)?;
        let root = self.root.clone();
        blocking(u64::MAX, move || root.place(root.copy_of(&src)?, &dst, noclobber)).await
    }
}

/// The file of the object at `location`, relative to the root: the key itself, since a key's
/// parts are its file names. (Unlike `LocalFileSystem`, which takes names `NAME#N`, N all digits,
/// for its own staging files and refuses them as keys, every name is a key here: `issue#42` is a
/// file like any other.)
fn file_of(location: &Path) -> Result<String> {
    match location.filename() {
        Some(_) => Ok(location.as_ref().to_owned()),
        None => Err(generic(LocalError::BadKey { key: location.to_string() })),
    }
}

/// An object being written in place (`LocalStore::write_in_place`). Dropped unpublished, it
/// leaves nothing behind.
#[derive(Debug)]
pub struct InPlace {
    file: File,
    /// The staged file; `None` once published.
    staged: Option<Staged>,
    /// The key's file.
    target: String,
    root: Arc<Root>,
}

impl InPlace {
    /// Records `attributes` (user metadata only; others are left out) with the object.
    pub fn record(&self, attributes: &Attributes) {
        write_metadata(&self.file, attributes);
    }

    /// The staged file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// fsyncs the staged file and moves it to its key: the object appears whole, replacing any
    /// object there. On failure the staged file stays, and publishing can be tried again.
    pub fn publish(&mut self) -> Result<PutResult> {
        let staged = self.staged.take().ok_or_else(|| {
            let reason = "already published".to_owned();
            generic(LocalError::Incomplete { path: self.root.display(&self.target), reason })
        })?;
        let e_tag = match synced(&self.file, &staged) {
            Ok(info) => info.e_tag(),
            Err(e) => {
                self.staged = Some(staged);
                return Err(e);
            }
        };
        match self.root.place_or_keep(staged, &self.target, false) {
            Ok(()) => Ok(PutResult { e_tag: Some(e_tag), version: None }),
            Err((e, staged)) => {
                self.staged = staged;
                Err(e)
            }
        }
    }
}

impl std::fmt::Display for LocalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LocalStore({})", self.root.path().display())
    }
}

#[async_trait]
impl ObjectStore for LocalStore {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        let noclobber = match opts.mode {
            PutMode::Overwrite => false,
            PutMode::Create => true,
            PutMode::Update(_) => return Err(object_store::Error::NotImplemented),
        };
        metadata_only(&opts.attributes)?;
        let target = self.writable(location)?;
        let (root, len) = (self.root.clone(), payload.content_length() as u64);
        blocking(len, move || {
            let (mut file, staged) = root.temp_file("put-")?;
            let written = payload.iter().try_for_each(|chunk| file.write_all(chunk));
            written.map_err(|e| io_error("write", &staged.display(), e))?;
            write_metadata(&file, &opts.attributes);
            let e_tag = synced(&file, &staged)?.e_tag();
            root.place(staged, &target, noclobber)?;
            Ok(PutResult { e_tag: Some(e_tag), version: None })
        })
        .await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        if !opts.attributes.is_empty() {
            return Err(object_store::Error::NotImplemented);
        }
        let target = self.writable(location)?;
        let root = self.root.clone();
        let (file, staged) = blocking(0, move || root.temp_file("mp-")).await?;
        #[allow(unused_mut)]
        let mut upload = upload::LocalUpload::new(self.root.clone(), &target, file, staged);
        #[cfg(test)]
        {
            upload.fail_part = self.fail_part;
        }
        Ok(Box::new(upload))
    }

    /// `LocalFileSystem`'s answer (the file opened, its preconditions checked, the range
    /// resolved; `head` changes nothing), with the user metadata kept beside the file (read
    /// from the file opened, so it is that version's) for a HEAD or a whole GET. A ranged GET
    /// brings the bytes alone: its callers read data, and the metadata is an extended attribute
    /// that ext4 keeps in a block of its own once it outgrows the inode (one more disk read when
    /// cold). A range of at most [`READ_AT_ONCE`] is read by the same blocking call that opens the
    /// file, so its bytes need no second trip to the blocking pool (the request's own thread does
    /// both when it is at most `crate::blocking::INLINE_BYTES`).
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let rel = self.readable(location)?;
        let (root, location) = (self.root.clone(), location.clone());
        let hint = match (&options.range, options.head) {
            (_, true) => 0,
            (Some(GetRange::Bounded(r)), _) => r.end.saturating_sub(r.start),
            (Some(GetRange::Suffix(n)), _) => *n,
            _ => u64::MAX,
        };
        blocking(hint, move || {
            let (file, info) = open_object(&root, &rel)?;
            let meta = info.meta(location);
            options.check_preconditions(&meta)?;
            let range = match &options.range {
                Some(r) => r.as_range(meta.size).map_err(|e| range_error(&root, &rel, e))?,
                None => 0..meta.size,
            };
            let attributes = match options.range {
                Some(_) if !options.head => Attributes::new(),
                _ => read_metadata(&file, info.mtime),
            };
            let payload = if !options.head && range.end - range.start <= READ_AT_ONCE {
                let bytes = if range.is_empty() {
                    Bytes::new()
                } else {
                    read_range(&root, &rel, &file, info.size, range.clone())?
                };
                GetResultPayload::Stream(futures::stream::once(async move { Ok(bytes) }).boxed())
            } else {
                GetResultPayload::File(file, root.display(&rel))
            };
            Ok(GetResult { payload, attributes, range, meta })
        })
        .await
    }

    async fn get_range(&self, location: &Path, range: Range<u64>) -> Result<Bytes> {
        Ok(self.get_ranges(location, &[range]).await?.remove(0))
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let rel = self.readable(location)?;
        let (root, ranges) = (self.root.clone(), ranges.to_vec());
        let len = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
        blocking(len, move || {
            let (file, info) = open_object(&root, &rel)?;
            ranges.into_iter().map(|r| read_range(&root, &rel, &file, info.size, r)).collect()
        })
        .await
    }

    async fn head(&self, location: &Path) -> Result<ObjectMeta> {
        let rel = self.readable(location)?;
        let (root, location) = (self.root.clone(), location.clone());
        blocking(0, move || match root.stat(&rel, false) {
            Ok(info) if info.kind == FileType::Directory => Err(is_a_directory(&root, &rel)),
            Ok(info) if info.kind == FileType::RegularFile => Ok(info.meta(location)),
            Ok(_) => Err(not_an_object(&root, &rel)),
            Err(e) if Errno::from_io_error(&e) == Some(Errno::LOOP) => Err(not_an_object(&root, &rel)),
            Err(e) => Err(io_error("open", &root.display(&rel), e)),
        })
        .await
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        let rel = self.readable(location)?;
        let root = self.root.clone();
        blocking(0, move || root.remove(&rel)).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.list_after(prefix, None)
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, Result<ObjectMeta>> {
        self.list_after(prefix, Some(offset.clone()))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let prefix = prefix.cloned().unwrap_or_default();
        if is_reserved(&prefix) {
            return Ok(ListResult { common_prefixes: vec![], objects: vec![] });
        }
        let root = self.root.clone();
        blocking(u64::MAX, move || walk::one_level(&root, &prefix)).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.copy_to(from, to, false).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        self.copy_to(from, to, true).await
    }
}

impl LocalStore {
    /// Every object under `prefix` (all of them without one), after `offset` if given.
    fn list_after(&self, prefix: Option<&Path>, offset: Option<Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let prefix = prefix.cloned().unwrap_or_default();
        if is_reserved(&prefix) {
            return futures::stream::empty().boxed();
        }
        walk::stream(walk::Walk::new(self.root.clone(), &prefix, offset))
    }
}

/// The object at `rel`, opened: only a regular file is one. A directory is not found, as in
/// `LocalFileSystem`; unlike it, neither is a symbolic link (see `Root::open_file`), a FIFO, a
/// socket or a device another program left in the bucket.
fn open_object(root: &Root, rel: &str) -> Result<(File, FileInfo)> {
    let file = match root.open_file(rel) {
        Ok(file) => file,
        Err(e) if Errno::from_io_error(&e) == Some(Errno::LOOP) => return Err(not_an_object(root, rel)),
        Err(e) => return Err(io_error("open", &root.display(rel), e)),
    };
    let info = FileInfo::of_file(&file).map_err(|e| io_error("stat", &root.display(rel), e))?;
    match info.kind {
        FileType::Directory => Err(is_a_directory(root, rel)),
        FileType::RegularFile => Ok((file, info)),
        _ => Err(not_an_object(root, rel)),
    }
}

fn is_a_directory(root: &Root, rel: &str) -> object_store::Error {
    io_error("open", &root.display(rel), std::io::Error::new(ErrorKind::NotFound, "is a directory"))
}

/// What is at `rel` is not a regular file (a symbolic link, a FIFO, a socket, a device): no object.
fn not_an_object(root: &Root, rel: &str) -> object_store::Error {
    io_error("open", &root.display(rel), std::io::Error::new(ErrorKind::NotFound, "not a regular file"))
}

/// Bytes `range` of the object's `file` (`len` bytes long), as `LocalFileSystem` reads them: the
/// range is cut at the end, but must start before it.
fn read_range(root: &Root, rel: &str, file: &File, len: u64, range: Range<u64>) -> Result<Bytes> {
    if range.start >= len || range.start > range.end {
        let reason = format!("wanted {range:?}, but the object is {len} bytes long");
        return Err(range_error(root, rel, reason));
    }
    let want = (range.end.min(len) - range.start) as usize;
    // Read into the buffer's spare room: nothing is zeroed first only to be overwritten.
    let mut buf = Vec::with_capacity(want);
    while buf.len() < want {
        let at = range.start + buf.len() as u64;
        let n = rustix::io::retry_on_intr(|| rustix::io::pread(file, rustix::buffer::spare_capacity(&mut buf), at))
            .map_err(|e| io_error("read", &root.display(rel), e.into()))?;
        if n == 0 {
            let short = std::io::Error::new(ErrorKind::UnexpectedEof, "the file ended before the range");
            return Err(io_error("read", &root.display(rel), short));
        }
    }
    buf.truncate(want);
    Ok(buf.into())
}

fn range_error(
    root: &Root,
    rel: &str,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> object_store::Error {
    generic(LocalError::Range { path: root.display(rel), source: source.into() })
}

/// Longest range a GET reads into memory before answering; a longer one (a whole large object)
/// is streamed from the open file.
const READ_AT_ONCE: u64 = 16 << 20;

/// Runs blocking file work that touches about `bytes` bytes (`crate::blocking::run`).
async fn blocking<T: Send + 'static>(bytes: u64, work: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    crate::blocking::run(bytes, work).await?
}

/// Makes a staged file's bytes durable and returns what its `stat` says, the ETag it will have
/// in place included.
///
/// The ETag is `LocalFileSystem`'s, taken from our own handle rather than from a `head` after the
/// rename: a rename keeps the inode and the mtime, and a `head` could already see another
/// writer's object under the key. The test `put_etag_is_the_etag_head_reports` holds the two
/// formulas together.
fn synced(file: &File, staged: &Staged) -> Result<FileInfo> {
    mark_version(file).map_err(|e| io_error("set the time of", &staged.display(), e))?;
    file.sync_all().map_err(|e| io_error("sync", &staged.display(), e))?;
    FileInfo::of_file(file).map_err(|e| io_error("stat", &staged.display(), e))
}

/// The last modification time (µs since the epoch) [`mark_version`] gave a file.
static LAST_VERSION_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Gives the file of a version about to be published a modification time no other version this
/// process wrote has: the clock's time in µs, or 1 µs past the last one given. Its ETag (inode,
/// mtime in µs, size) then names this version alone: with the kernel's own file times, coarse
/// (a tick of a few ms), two versions of one size written within a tick, the second in an inode
/// the first's replacement freed, would have one ETag, and a reader could take one for the other.
/// A record kept beside the bytes is stamped with the new time.
fn mark_version(file: &File) -> std::io::Result<()> {
    use std::sync::atomic::Ordering;
    use std::time::SystemTime;
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_micros() as u64;
    let mut us = now;
    // The value stored is the one the last (successful) call computed.
    let _ = LAST_VERSION_US.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
        us = now.max(last + 1);
        Some(us)
    });
    let at = rustix::fs::Timespec { tv_sec: (us / 1_000_000) as i64, tv_nsec: ((us % 1_000_000) * 1000) as _ };
    let omit = rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT };
    rustix::fs::futimens(file, &rustix::fs::Timestamps { last_access: omit, last_modification: at })?;
    xattr::restamp(file);
    Ok(())
}

/// Whether a key lies in the staging directory.
fn is_reserved(key: &Path) -> bool {
    key.parts().next().is_some_and(|first| first.as_ref() == TMP_DIR)
}

/// `AlreadyExists` for the file at `path`, with the OS's error.
fn already_exists(path: PathBuf) -> object_store::Error {
    let shown = path.display().to_string();
    let source = LocalError::Io { what: "create", path, source: std::io::Error::from_raw_os_error(libc::EEXIST) };
    object_store::Error::AlreadyExists { path: shown, source: source.into() }
}

fn generic(e: LocalError) -> object_store::Error {
    object_store::Error::Generic { store: STORE, source: Box::new(e) }
}

/// An I/O failure as a store error: `NotFound` when the OS said so, `Generic` otherwise, with the
/// OS error kept as the source (see [`os_error`]).
fn io_error(what: &'static str, path: &std::path::Path, source: std::io::Error) -> object_store::Error {
    let not_found = source.kind() == ErrorKind::NotFound;
    let e = LocalError::Io { what, path: path.into(), source };
    match not_found {
        true => object_store::Error::NotFound { path: path.display().to_string(), source: Box::new(e) },
        false => generic(e),
    }
}

/// The OS error number behind a store error, if a local I/O error caused it (ENOSPC,
/// ENAMETOOLONG, EDQUOT…), so that the filesystem can report it as itself rather than as EIO.
/// Works for `LocalFileSystem`'s errors too.
pub fn os_error(e: &object_store::Error) -> Option<i32> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cause {
        if let Some(n) = err.downcast_ref::<std::io::Error>().and_then(std::io::Error::raw_os_error) {
            return Some(n);
        }
        cause = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use object_store::GetRange;
    use object_store::local::LocalFileSystem;
    use std::os::unix::fs::FileExt;
    use std::time::SystemTime;

    pub(super) fn store() -> (tempfile::TempDir, LocalStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path()).unwrap();
        (dir, store)
    }

    pub(super) async fn read(store: &LocalStore, key: &Path) -> Vec<u8> {
        store.get(key).await.unwrap().bytes().await.unwrap().to_vec()
    }

    pub(super) async fn keys(store: &LocalStore, prefix: Option<&Path>) -> Vec<String> {
        let mut keys: Vec<String> = store.list(prefix).map_ok(|m| m.location.to_string()).try_collect().await.unwrap();
        keys.sort();
        keys
    }

    /// Files in the staging directory.
    pub(super) fn staged(store: &LocalStore) -> usize {
        std::fs::read_dir(store.root().join(TMP_DIR)).unwrap().count()
    }

    pub(super) fn is_not_found<T>(r: Result<T>) -> bool {
        matches!(r, Err(object_store::Error::NotFound { .. }))
    }

    #[tokio::test]
    async fn a_255_byte_name_works_for_every_operation() {
        let (_dir, store) = store();
        let key = Path::from(format!("dir/{}", "n".repeat(255)));
        store.put(&key, "hello".into()).await.unwrap();
        assert_eq!(read(&store, &key).await, b"hello");
        assert_eq!(keys(&store, None).await, vec![key.to_string()]);
        let listed = store.list_with_delimiter(Some(&Path::from("dir"))).await.unwrap();
        assert_eq!(listed.objects.iter().map(|o| &o.location).collect::<Vec<_>>(), vec![&key]);

        let copy = Path::from(format!("other/{}", "c".repeat(255)));
        store.copy(&key, &copy).await.unwrap();
        let moved = Path::from(format!("moved/{}", "m".repeat(255)));
        store.copy_if_not_exists(&key, &moved).await.unwrap();
        let renamed = Path::from(format!("renamed/{}", "r".repeat(255)));
        store.rename(&moved, &renamed).await.unwrap();
        let mut up = store.put_multipart(&Path::from(format!("mp/{}", "p".repeat(255)))).await.unwrap();
        up.put_part("part".into()).await.unwrap();
        up.complete().await.unwrap();
        assert_eq!(read(&store, &copy).await, b"hello");
        assert_eq!(read(&store, &renamed).await, b"hello");
        assert_eq!(keys(&store, None).await.len(), 4);

        for key in keys(&store, None).await {
            store.delete(&Path::from(key)).await.unwrap();
        }
        assert!(keys(&store, None).await.is_empty());
        assert_eq!(staged(&store), 0);
    }

    #[tokio::test]
    async fn a_4000_byte_path_works() {
        let (_dir, store) = store();
        let dirs: Vec<String> = (0..15).map(|i| format!("{i:02}{}", "d".repeat(248))).collect();
        let mut key = dirs.join("/") + "/";
        key += &"f".repeat(4000 - key.len());
        assert_eq!(key.len(), 4000);
        let key = Path::from(key);
        store.put(&key, "deep".into()).await.unwrap();
        assert_eq!(read(&store, &key).await, b"deep");
        assert_eq!(keys(&store, Some(&Path::from(dirs[0].as_str()))).await, vec![key.to_string()]);
        let copy = Path::from(format!("{}/copy", dirs[..14].join("/")));
        store.copy_if_not_exists(&key, &copy).await.unwrap();
        assert_eq!(read(&store, &copy).await, b"deep");
        store.delete(&key).await.unwrap();
        store.delete(&copy).await.unwrap();
        assert!(keys(&store, None).await.is_empty());
    }

    /// A key of `len` bytes: `depth` directories of 200-odd bytes, then a file name.
    fn long_key(tag: &str, depth: usize, len: usize) -> String {
        let dirs: Vec<String> = (0..depth).map(|i| format!("{tag}{i:02}{}", "d".repeat(200))).collect();
        let mut key = dirs.join("/") + "/";
        key += &"f".repeat(len - key.len());
        key
    }

    #[tokio::test]
    async fn a_4000_byte_key_works_under_a_root_whose_own_path_is_long() {
        let dir = tempfile::tempdir().unwrap();
        let root = (0..4).fold(dir.path().to_path_buf(), |p, i| p.join(format!("{i}{}", "r".repeat(249))));
        std::fs::create_dir_all(&root).unwrap();
        assert!(root.as_os_str().len() > 1000);
        let store = LocalStore::new(&root).unwrap();
        let key = Path::from(long_key("k", 19, 4000));
        assert_eq!(key.as_ref().len(), 4000);
        assert!(root.as_os_str().len() + 1 + key.as_ref().len() >= libc::PATH_MAX as usize);

        let put = store.put(&key, "deep".into()).await.unwrap();
        assert_eq!(read(&store, &key).await, b"deep");
        assert_eq!(store.head(&key).await.unwrap().e_tag, put.e_tag);
        assert_eq!(store.get_range(&key, 1..3).await.unwrap(), "ee");
        let ranged = GetOptions { range: Some((1..3).into()), if_match: put.e_tag.clone(), ..Default::default() };
        assert_eq!(store.get_opts(&key, ranged).await.unwrap().bytes().await.unwrap(), "ee");

        let mp = Path::from(long_key("m", 19, 4000));
        let mut up = store.put_multipart(&mp).await.unwrap();
        up.put_part("multi".into()).await.unwrap();
        up.put_part("part".into()).await.unwrap();
        up.complete().await.unwrap();
        assert_eq!(read(&store, &mp).await, b"multipart");

        let copy = Path::from(long_key("c", 19, 4000));
        store.copy(&key, &copy).await.unwrap();
        store.copy_if_not_exists(&key, &Path::from(long_key("n", 19, 4000))).await.unwrap();
        let mut ip = store.write_in_place(&Path::from(long_key("i", 19, 4000))).unwrap();
        ip.file().write_all_at(b"in place", 0).unwrap();
        ip.publish().unwrap();
        assert_eq!(read(&store, &copy).await, b"deep");

        let all = keys(&store, None).await;
        assert_eq!(all.len(), 5);
        assert!(all.iter().all(|k| k.len() == 4000), "{all:?}");
        let first = key.parts().next().unwrap();
        assert_eq!(keys(&store, Some(&Path::from(first.as_ref()))).await, [key.to_string()]);
        let top = store.list_with_delimiter(None).await.unwrap();
        assert_eq!(top.common_prefixes.len(), 5);
        let parent = Path::from_iter(key.parts().take(19));
        let level = store.list_with_delimiter(Some(&parent)).await.unwrap();
        assert_eq!(level.objects.iter().map(|o| &o.location).collect::<Vec<_>>(), [&key]);
        assert_eq!(store.cleanup(Duration::ZERO).unwrap(), Cleanup::default());

        for k in all {
            store.delete(&Path::from(k)).await.unwrap();
        }
        assert!(keys(&store, None).await.is_empty());
        assert!(is_not_found(store.head(&key).await));
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 1, "only the staging directory is left");
        assert_eq!(staged(&store), 0);
        // Longer than one system call takes: reached through directories opened on the way.
        for len in [4095, 4096, 10_000] {
            let key = Path::from(long_key("x", (len - 100) / 204, len));
            store.put(&key, "far".into()).await.unwrap();
            assert_eq!(read(&store, &key).await, b"far", "{len}");
            assert_eq!(store.head(&key).await.unwrap().size, 3);
            assert_eq!(keys(&store, Some(&Path::from_iter(key.parts().take(1)))).await, [key.to_string()]);
            store.copy(&key, &Path::from(format!("{key}-copy"))).await.unwrap();
            store.delete(&Path::from(format!("{key}-copy"))).await.unwrap();
            store.delete(&key).await.unwrap();
            assert!(is_not_found(store.head(&key).await), "{len}");
        }
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 1, "deletes removed the directories they emptied");
    }

    #[tokio::test]
    async fn an_object_written_in_place_appears_whole_only_when_published() {
        let (dir, store) = store();
        let key = Path::from("d/k");
        let mut obj = store.write_in_place(&key).unwrap();
        obj.file().write_all_at(b"world", 6).unwrap();
        obj.file().write_all_at(b"hello ", 0).unwrap();
        assert_eq!(staged(&store), 1);
        assert!(is_not_found(store.head(&key).await));
        // The target cannot be placed (a directory is in the way): the staged bytes stay for a retry.
        std::fs::create_dir_all(dir.path().join("d/k/x")).unwrap();
        assert!(obj.publish().is_err());
        assert_eq!(staged(&store), 1);
        std::fs::remove_dir_all(dir.path().join("d/k")).unwrap();
        let put = obj.publish().unwrap();
        assert_eq!(read(&store, &key).await, b"hello world");
        assert_eq!(put.e_tag, store.head(&key).await.unwrap().e_tag);
        assert_eq!(staged(&store), 0);
        assert!(obj.publish().is_err(), "published twice");
        // Dropped unpublished: nothing appears and nothing stays behind.
        let obj = store.write_in_place(&Path::from("gone")).unwrap();
        obj.file().write_all_at(b"x", 0).unwrap();
        drop(obj);
        assert_eq!(staged(&store), 0);
        assert!(is_not_found(store.head(&Path::from("gone")).await));
        assert!(store.write_in_place(&Path::from(TMP_DIR).child("x")).is_err(), "staging keys are reserved");
    }

    /// A result with only the kind of its error, as callers tell them apart.
    fn kind<T>(r: Result<T>) -> std::result::Result<T, &'static str> {
        r.map_err(|e| match e {
            object_store::Error::NotFound { .. } => "NotFound",
            object_store::Error::AlreadyExists { .. } => "AlreadyExists",
            object_store::Error::Precondition { .. } => "Precondition",
            object_store::Error::NotModified { .. } => "NotModified",
            object_store::Error::Generic { .. } => "Generic",
            _ => "other",
        })
    }

    /// What a listing holds, in order, the staging directory left out.
    fn sorted(mut l: ListResult) -> (Vec<Path>, Vec<ObjectMeta>) {
        l.common_prefixes.retain(|p| p.as_ref() != TMP_DIR);
        l.objects.sort_by(|a, b| a.location.cmp(&b.location));
        (l.common_prefixes, l.objects)
    }

    #[tokio::test]
    async fn what_other_programs_leave_in_the_bucket_is_an_object_only_if_a_regular_file() {
        use std::os::unix::ffi::OsStrExt;
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "outside").unwrap();
        let (dir, store) = store();
        let at = |rel: &str| dir.path().join(rel);
        for (rel, data) in [("top", "1"), ("rd/f", "2"), ("real/keep", "3")] {
            std::fs::create_dir_all(at(rel).parent().unwrap()).unwrap();
            std::fs::write(at(rel), data).unwrap();
        }
        let link = |target: &std::path::Path, rel: &str| std::os::unix::fs::symlink(target, at(rel)).unwrap();
        link("..".as_ref(), "rd/up");
        link("real".as_ref(), "alias");
        link("top".as_ref(), "flink");
        link(outside.path(), "out");
        link(&outside.path().join("secret"), "osecret");
        link("nowhere".as_ref(), "broken");
        rustix::fs::mkfifoat(rustix::fs::CWD, at("fifo"), rustix::fs::Mode::from_raw_mode(0o644)).unwrap();
        std::fs::write(dir.path().join(std::ffi::OsStr::from_bytes(b"rd/caf\xe9")), "latin-1").unwrap();

        // Listings show the regular files and directories only, whole or a level at a time.
        let mut all: Vec<String> = store.list(None).map_ok(|m| m.location.to_string()).try_collect().await.unwrap();
        all.sort();
        assert_eq!(all, ["rd/f", "real/keep", "top"]);
        let (dirs, objects) = sorted(store.list_with_delimiter(None).await.unwrap());
        let names = |v: Vec<Path>| v.into_iter().map(|p| p.to_string()).collect::<Vec<_>>();
        assert_eq!(names(dirs), ["rd", "real"]);
        assert_eq!(names(objects.into_iter().map(|m| m.location).collect()), ["top"]);
        for prefix in ["alias", "rd/up", "out"] {
            let l = store.list_with_delimiter(Some(&Path::from(prefix))).await.unwrap();
            assert!(l.objects.is_empty() && l.common_prefixes.is_empty(), "{prefix}: {l:?}");
            let under: Vec<_> = store.list(Some(&Path::from(prefix))).try_collect().await.unwrap();
            assert!(under.is_empty(), "{prefix}: {under:?}");
        }
        // Nothing is read through a link, and a FIFO is not waited on.
        for key in ["flink", "osecret", "broken", "fifo", "alias/keep", "rd/up/top", "out/secret"] {
            let key = Path::from(key);
            assert_eq!(kind(store.head(&key).await).err(), Some("NotFound"), "head {key}");
            let got = tokio::time::timeout(Duration::from_secs(5), store.get_range(&key, 0..1)).await;
            assert_eq!(kind(got.expect("a FIFO is not waited on")).err(), Some("NotFound"), "get {key}");
        }
        assert_eq!(read(&store, &Path::from("real/keep")).await, b"3");
        // Nor is anything written, moved or removed through a link.
        for key in ["alias/new", "out/new", "out/.shrinkfs.dir", "rd/up/new"] {
            assert!(store.put(&Path::from(key), "x".into()).await.is_err(), "put {key}");
        }
        let _ = store.delete(&Path::from("alias/keep")).await;
        let _ = store.delete(&Path::from("rd/up/top")).await;
        assert!(store.copy(&Path::from("alias/keep"), &Path::from("copied")).await.is_err());
        assert!(store.copy(&Path::from("top"), &Path::from("alias/copied")).await.is_err());
        assert!(store.rename(&Path::from("top"), &Path::from("out/moved")).await.is_err());
        let outside_names: Vec<_> =
            std::fs::read_dir(outside.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(outside_names, ["secret"], "nothing lands outside the bucket");
        assert_eq!(std::fs::read(at("real/keep")).unwrap(), b"3");
        assert_eq!(std::fs::read(at("top")).unwrap(), b"1");
        assert_eq!(std::fs::read_dir(at("real")).unwrap().count(), 1, "nothing new in real/");
    }

    #[tokio::test]
    async fn a_directory_is_removed_with_its_marker_only_when_it_holds_nothing_else() {
        let (dir, store) = store();
        let at = |rel: &str| dir.path().join(rel);
        for rel in ["e1", "up/e2", "full", "sub/inner", "sock", "odd/.shrinkfs.dir", "marked"] {
            std::fs::create_dir_all(at(rel)).unwrap();
        }
        std::fs::write(at("full/f"), "1").unwrap();
        std::fs::write(at("marked/.shrinkfs.dir"), "").unwrap();
        let socket = std::os::unix::net::UnixListener::bind(at("sock/s")).unwrap();
        // Empty, with or without a marker: gone, and the directory above stays.
        store.remove_dir(&Path::from("e1")).await.unwrap();
        store.remove_dir(&Path::from("up/e2")).await.unwrap();
        store.remove_dir(&Path::from("marked")).await.unwrap();
        assert!(!at("e1").exists() && !at("up/e2").exists() && !at("marked").exists());
        assert!(at("up").is_dir(), "rmdir leaves the directory above");
        // An object, an empty subdirectory, a socket, a directory under the marker's name: each
        // is an entry; nothing changes.
        for rel in ["full", "sub", "sock", "odd"] {
            let e = store.remove_dir(&Path::from(rel)).await.unwrap_err();
            assert_eq!(os_error(&e), Some(libc::ENOTEMPTY), "{rel}: {e}");
            assert!(at(rel).is_dir(), "{rel}");
        }
        assert!(at("full/f").exists() && at("sock/s").exists() && at("odd/.shrinkfs.dir").is_dir());
        // Gone already: not found.
        assert_eq!(kind(store.remove_dir(&Path::from("e1")).await).err(), Some("NotFound"));
        // A directory moves whole, nested, to a place whose parents are made; never over one
        // that is there.
        std::fs::create_dir_all(at("deep/a/b/empty")).unwrap();
        store.move_dir(&Path::from("deep/a"), &Path::from("new/place/a2")).await.unwrap();
        assert!(at("new/place/a2/b/empty").is_dir() && !at("deep/a").exists() && at("deep").is_dir());
        let e = store.move_dir(&Path::from("sock"), &Path::from("full")).await.unwrap_err();
        assert_eq!(kind::<()>(Err(e)).err(), Some("AlreadyExists"));
        assert!(at("sock/s").exists() && at("full/f").exists());
        drop(socket);
    }

    #[tokio::test]
    async fn reads_and_listings_answer_as_local_file_system_does() {
        let (dir, store) = store();
        let plain = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        for (key, data) in [("a", "1"), ("b/c", "22"), ("b/d/e", "333"), ("b/d/f#x", "4444"), ("b/x{y}", "5")] {
            store.put(&Path::parse(key).unwrap(), data.into()).await.unwrap();
        }
        store.put(&Path::from("b/50%"), "6".into()).await.unwrap();
        assert!(dir.path().join("b/50%25").is_file());
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        std::fs::write(dir.path().join("b/left#3"), "staged").unwrap();

        let all = |s: &dyn ObjectStore, prefix: Option<Path>, offset: Option<Path>| {
            let list = match &offset {
                Some(o) => s.list_with_offset(prefix.as_ref(), o),
                None => s.list(prefix.as_ref()),
            };
            async move {
                let mut got: Vec<ObjectMeta> = list.try_collect().await.unwrap();
                got.sort_by(|a, b| a.location.cmp(&b.location));
                got
            }
        };
        // The one difference: a name `LocalFileSystem` keeps for its staging files (`NAME#N`) is an
        // object like any other here.
        let staging_name = |m: &ObjectMeta| m.location.as_ref() == "b/left#3";
        let theirs = |mut got: Vec<ObjectMeta>| {
            got.retain(|m| !staging_name(m));
            got
        };
        for prefix in [None, Some("b"), Some("b/d"), Some("a"), Some("missing")] {
            let prefix = prefix.map(Path::from);
            let ours = all(&store, prefix.clone(), None).await;
            assert_eq!(theirs(ours), all(&plain, prefix.clone(), None).await, "{prefix:?}");
            let mut ours = sorted(store.list_with_delimiter(prefix.as_ref()).await.unwrap());
            ours.1 = theirs(ours.1);
            assert_eq!(ours, sorted(plain.list_with_delimiter(prefix.as_ref()).await.unwrap()), "{prefix:?}");
        }
        let everything = all(&store, None, None).await;
        assert_eq!(everything.len(), 7, "a and b/*");
        assert!(everything.iter().any(staging_name));
        for offset in ["b/c", "b", "b/d/e", "z"] {
            let (ours, theirs_) =
                (all(&store, None, Some(offset.into())).await, all(&plain, None, Some(offset.into())).await);
            assert_eq!(theirs(ours), theirs_, "after {offset}");
        }
        assert_eq!(store.get(&Path::parse("b/left#3").unwrap()).await.unwrap().bytes().await.unwrap(), "staged");

        let keys = ["a", "b/c", "b/d/f#x", "b", "missing", "a/b", ""];
        for key in keys.map(|k| Path::parse(k).unwrap()) {
            assert_eq!(kind(store.head(&key).await), kind(plain.head(&key).await), "head {key}");
            let (ours, theirs) = (kind(store.get_range(&key, 1..3).await), kind(plain.get_range(&key, 1..3).await));
            assert_eq!(ours, theirs, "get_range {key}");
            let ours = kind(store.get_ranges(&key, &[0..1, 2..9, 3..3]).await);
            assert_eq!(ours, kind(plain.get_ranges(&key, &[0..1, 2..9, 3..3]).await), "get_ranges {key}");
            let Ok(meta) = plain.head(&key).await else { continue };
            let (e_tag, time) = (meta.e_tag.clone(), meta.last_modified);
            let earlier = (SystemTime::from(time) - Duration::from_secs(1)).into();
            let options = [
                GetOptions { if_match: e_tag.clone(), ..Default::default() },
                GetOptions { if_match: Some("other".into()), ..Default::default() },
                GetOptions { if_none_match: e_tag.clone(), ..Default::default() },
                GetOptions { if_none_match: Some("*".into()), ..Default::default() },
                GetOptions { if_modified_since: Some(time), ..Default::default() },
                GetOptions { if_modified_since: Some(earlier), ..Default::default() },
                GetOptions { if_unmodified_since: Some(earlier), ..Default::default() },
                GetOptions { range: Some((1..2).into()), ..Default::default() },
                GetOptions { range: Some(GetRange::Suffix(2)), ..Default::default() },
                GetOptions { range: Some(GetRange::Offset(9)), ..Default::default() },
                GetOptions { head: true, ..Default::default() },
            ];
            for opts in options {
                let got = |r: Result<GetResult>| async move {
                    match r {
                        Ok(g) => Ok((g.meta.clone(), g.range.clone(), g.bytes().await.unwrap())),
                        Err(e) => kind(Err(e)),
                    }
                };
                let (ours, theirs) =
                    (store.get_opts(&key, opts.clone()).await, plain.get_opts(&key, opts.clone()).await);
                assert_eq!(got(ours).await, got(theirs).await, "get {key} {opts:?}");
            }
        }

        // Deletes take the directories they empty with them, but not the root.
        for key in ["b/d/e", "b/d/f#x"] {
            store.delete(&Path::parse(key).unwrap()).await.unwrap();
        }
        assert!(!dir.path().join("b/d").exists() && dir.path().join("b").is_dir());
        assert_eq!(kind(store.delete(&Path::from("b/d/e")).await), Err("NotFound"));
        for key in ["a", "b/c", "b/x{y}", "b/50%25"] {
            store.delete(&Path::parse(key).unwrap()).await.unwrap();
        }
        assert!(dir.path().join("b").is_dir(), "b/left#3 keeps it");
        assert!(dir.path().is_dir());
    }

    #[tokio::test]
    async fn create_mode_and_copy_if_not_exists_refuse_an_existing_key() {
        let (_dir, store) = store();
        let (key, other) = (Path::from("k"), Path::from("o"));
        store.put(&key, "v1".into()).await.unwrap();
        let e = store.put_opts(&key, "v2".into(), PutMode::Create.into()).await.unwrap_err();
        assert!(matches!(e, object_store::Error::AlreadyExists { .. }), "{e}");
        assert_eq!(read(&store, &key).await, b"v1");
        store.put_opts(&other, "o1".into(), PutMode::Create.into()).await.unwrap();
        let e = store.copy_if_not_exists(&key, &other).await.unwrap_err();
        assert!(matches!(e, object_store::Error::AlreadyExists { .. }), "{e}");
        assert_eq!(read(&store, &other).await, b"o1");
        store.copy(&key, &other).await.unwrap();
        assert_eq!(read(&store, &other).await, b"v1");
        store.put(&key, "v3".into()).await.unwrap();
        assert_eq!((read(&store, &key).await, read(&store, &other).await), (b"v3".to_vec(), b"v1".to_vec()));
        let update = PutMode::Update(object_store::UpdateVersion { e_tag: None, version: None });
        assert!(matches!(
            store.put_opts(&key, "x".into(), update.into()).await,
            Err(object_store::Error::NotImplemented)
        ));
        assert!(is_not_found(store.copy(&Path::from("missing"), &other).await));
        assert_eq!(staged(&store), 0);
    }

    #[tokio::test]
    async fn a_copy_onto_the_same_file_leaves_nothing_staged() {
        let (_dir, store) = store();
        let (a, b) = (Path::from("a"), Path::from("b"));
        store.put(&a, "x".into()).await.unwrap();
        // The second copy renames a hard link of `a` onto `b`, already one: the rename does nothing.
        store.copy(&a, &b).await.unwrap();
        store.copy(&a, &b).await.unwrap();
        store.copy(&a, &a).await.unwrap();
        let e = store.copy_if_not_exists(&a, &a).await.unwrap_err();
        assert!(matches!(e, object_store::Error::AlreadyExists { .. }), "{e}");
        assert!(is_not_found(store.copy(&Path::from("missing"), &Path::from("missing")).await));
        assert_eq!((read(&store, &a).await, read(&store, &b).await), (b"x".to_vec(), b"x".to_vec()));
        assert_eq!(staged(&store), 0);
    }

    /// Versions of one size written one after another name themselves apart: the kernel's file
    /// times are coarse, and a freed inode is soon reused, so inode, mtime and size alone repeat.
    #[tokio::test]
    async fn versions_written_one_after_another_have_etags_of_their_own() {
        let (_dir, store) = store();
        let key = Path::from("v/same");
        let mut seen = std::collections::HashSet::new();
        for k in 0..200u32 {
            let put = match k % 3 {
                0 => store.put(&key, format!("{k:08}").into()).await.unwrap(),
                1 => {
                    let mut ip = store.write_in_place(&key).unwrap();
                    ip.file().write_all_at(format!("{k:08}").as_bytes(), 0).unwrap();
                    ip.publish().unwrap()
                }
                _ => {
                    let mut up = store.put_multipart(&key).await.unwrap();
                    up.put_part(format!("{k:08}").into()).await.unwrap();
                    up.complete().await.unwrap()
                }
            };
            let tag = put.e_tag.clone().unwrap();
            assert_eq!(Some(&tag), store.head(&key).await.unwrap().e_tag.as_ref(), "version {k}");
            assert!(seen.insert(tag.clone()), "version {k} has an earlier version's ETag {tag}");
        }
    }

    /// Two files with one modification time (as the kernel's coarse clock gives files written
    /// within one tick) leave `mark_version` with times of their own, in µs, not before now.
    #[test]
    fn marked_versions_never_share_a_modification_time() {
        let dir = tempfile::tempdir().unwrap();
        let tick = std::time::SystemTime::now();
        let files: Vec<File> = (0..3).map(|k| File::create(dir.path().join(format!("f{k}"))).unwrap()).collect();
        let mut times = Vec::new();
        for f in &files {
            f.set_modified(tick).unwrap();
            mark_version(f).unwrap();
            times.push(FileInfo::of_file(f).unwrap().e_tag().split('-').nth(1).unwrap().to_owned());
        }
        let us = |t: &str| u128::from_str_radix(t, 16).unwrap();
        let floor = tick.duration_since(std::time::SystemTime::UNIX_EPOCH).unwrap().as_micros();
        assert!(us(&times[0]) >= floor && us(&times[0]) < us(&times[1]) && us(&times[1]) < us(&times[2]), "{times:?}");
    }

    #[tokio::test]
    async fn put_etag_is_the_etag_head_reports() {
        let (dir, store) = store();
        let key = Path::from("e/t");
        let put = store.put(&key, "tagged".into()).await.unwrap();
        assert!(put.e_tag.is_some());
        assert_eq!(put.e_tag, store.head(&key).await.unwrap().e_tag);
        let plain = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        assert_eq!(put.e_tag, plain.head(&key).await.unwrap().e_tag);
        let matching = GetOptions { if_match: put.e_tag.clone(), ..Default::default() };
        assert_eq!(store.get_opts(&key, matching).await.unwrap().bytes().await.unwrap(), "tagged");
        let stale = GetOptions { if_match: Some("1-2-3".into()), ..Default::default() };
        assert!(matches!(store.get_opts(&key, stale).await, Err(object_store::Error::Precondition { .. })));
    }

    #[tokio::test]
    async fn bad_keys_fail_cleanly_and_keep_the_os_error() {
        let (_dir, store) = store();
        // A name LocalFileSystem keeps for its staging files (`NAME#N`) is a key like any other.
        store.put(&Path::parse("a#1").unwrap(), "x".into()).await.unwrap();
        assert!(store.root().join("a#1").is_file());
        assert_eq!(keys(&store, None).await, ["a#1"]);
        store.delete(&Path::parse("a#1").unwrap()).await.unwrap();
        let e = store.put(&Path::from("n".repeat(256)), "x".into()).await.unwrap_err();
        assert_eq!(os_error(&e), Some(libc::ENAMETOOLONG), "{e}");
        assert!(e.to_string().contains(&"n".repeat(256)), "{e}");
        assert!(keys(&store, None).await.is_empty());
        assert_eq!(staged(&store), 0);
        assert_eq!(os_error(&object_store::Error::NotImplemented), None);
    }

    #[test]
    fn works_without_a_tokio_runtime() {
        let (_dir, store) = store();
        futures::executor::block_on(async {
            let key = Path::from("k");
            store.put(&key, "a".into()).await.unwrap();
            let mut up = store.put_multipart(&key).await.unwrap();
            up.put_part("b".into()).await.unwrap();
            up.complete().await.unwrap();
            assert_eq!(read(&store, &key).await, b"b");
        });
    }

    #[test]
    fn a_missing_root_is_an_error_naming_it() {
        let e = LocalStore::new(std::path::Path::new("/nonexistent/bucket")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/bucket"), "{e}");
    }
}
