//! `LocalStore`: a local directory as a bucket, written crash-safely. Every write is staged in
//! `<root>/.shrinkfs-tmp/`, fsynced, renamed into place and its directory fsynced; reads, deletes
//! and listings are object_store's `LocalFileSystem`, so metadata and ETags are exactly its own.
//!
//! Why not `LocalFileSystem` alone: it stages `NAME#N` beside the target, so a 254- or 255-byte
//! name (or a path near PATH_MAX) fails with ENAMETOOLONG; kill -9 leaves those files behind,
//! hidden from listings; a failed multipart part is forgotten and `complete` succeeds with a hole;
//! and nothing is fsynced.

use std::ffi::OsStr;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{ErrorKind, Write};
use std::ops::Range;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures::FutureExt;
use futures::stream::{BoxStream, StreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    Attribute, AttributeValue, Attributes, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result, UploadPart,
};
use rustix::fs::XattrFlags;
use tempfile::{NamedTempFile, TempPath};

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
}

/// What `LocalStore::cleanup` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cleanup {
    /// Files removed.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// A local directory as an object store: `LocalFileSystem` for reading, deleting and listing,
/// staged and fsynced writes for everything that creates an object.
#[derive(Debug)]
pub struct LocalStore {
    inner: LocalFileSystem,
    dirs: Arc<Dirs>,
    /// Makes this multipart part's write fail (tests of the failed-part path).
    #[cfg(test)]
    fail_part: Option<u64>,
}

/// The bucket root and its staging directory, shared with uploads in flight.
#[derive(Debug)]
struct Dirs {
    root: PathBuf,
    tmp: PathBuf,
}

impl LocalStore {
    /// Opens the directory `root` as a bucket, creating its staging directory if missing. A
    /// read-only directory opens too; writes then fail with the OS error.
    pub fn new(root: &std::path::Path) -> Result<Self> {
        let root = std::fs::canonicalize(root).map_err(|e| io_error("open bucket directory", root, e))?;
        if !root.is_dir() {
            let e = std::io::Error::from_raw_os_error(libc::ENOTDIR);
            return Err(io_error("open bucket directory", &root, e));
        }
        let tmp = root.join(TMP_DIR);
        match std::fs::create_dir(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists && tmp.is_dir() => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EROFS | libc::EACCES | libc::EPERM)) => {}
            Err(e) => return Err(io_error("create staging directory", &tmp, e)),
        }
        let inner = LocalFileSystem::new_with_prefix(&root)?.with_automatic_cleanup(true);
        Ok(LocalStore {
            inner,
            dirs: Arc::new(Dirs { root, tmp }),
            #[cfg(test)]
            fail_part: None,
        })
    }

    /// The bucket directory (canonical).
    pub fn root(&self) -> &std::path::Path {
        &self.dirs.root
    }

    /// Removes what interrupted writes left behind, if older than `older_than` (a grace period,
    /// so that another process's writes in flight survive): every file in the staging directory
    /// (a staged file's mtime moves with each write, so a live upload stays young), and
    /// `LocalFileSystem`'s staging files anywhere under the root — names whose part after the
    /// first `#` is all digits, which `LocalFileSystem` refuses as keys and hides from listings.
    /// Symbolic links are not followed.
    pub fn cleanup(&self, older_than: Duration) -> std::io::Result<Cleanup> {
        let now = SystemTime::now();
        let old = |meta: &Metadata| {
            meta.modified().ok().and_then(|m| now.duration_since(m).ok()).is_some_and(|age| age >= older_than)
        };
        let mut done = Cleanup::default();
        let mut dirs = vec![self.dirs.root.clone()];
        while let Some(dir) = dirs.pop() {
            let staging = dir == self.dirs.tmp;
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(with_path(&dir, e)),
            };
            for entry in entries {
                let entry = entry.map_err(|e| with_path(&dir, e))?;
                let path = entry.path();
                let meta = match entry.metadata() {
                    Ok(meta) => meta,
                    Err(e) if e.kind() == ErrorKind::NotFound => continue,
                    Err(e) => return Err(with_path(&path, e)),
                };
                if meta.is_dir() {
                    dirs.push(path);
                } else if meta.is_file() && (staging || is_staging_name(&entry.file_name())) && old(&meta) {
                    match std::fs::remove_file(&path) {
                        Ok(()) => {
                            done.files += 1;
                            done.bytes += meta.len();
                        }
                        Err(e) if e.kind() == ErrorKind::NotFound => {}
                        Err(e) => return Err(with_path(&path, e)),
                    }
                }
            }
        }
        Ok(done)
    }

    /// The file a new object at `location` goes to: no staging key, no name `LocalFileSystem`
    /// would refuse to read back.
    fn writable(&self, location: &Path) -> Result<PathBuf> {
        if is_reserved(location) {
            return Err(generic(LocalError::Reserved { key: location.to_string() }));
        }
        self.inner.path_to_filesystem(location)
    }

    /// Staging keys do not exist for readers.
    fn readable(&self, location: &Path) -> Result<()> {
        if is_reserved(location) {
            let source = Box::new(LocalError::Reserved { key: location.to_string() });
            return Err(object_store::Error::NotFound { path: location.to_string(), source });
        }
        Ok(())
    }

    /// Starts an object written in place: a staged file the caller writes at any offsets, which
    /// becomes the object at `location` when published — its bytes written once, with no parts.
    pub fn write_in_place(&self, location: &Path) -> Result<InPlace> {
        let target = self.writable(location)?;
        let (file, temp) = self.dirs.temp_file("ip-")?;
        Ok(InPlace { file, temp: Some(temp), target, dirs: self.dirs.clone() })
    }

    async fn copy_to(&self, from: &Path, to: &Path, noclobber: bool) -> Result<()> {
        self.readable(from)?;
        let src = self.inner.path_to_filesystem(from)?;
        let dst = self.writable(to)?;
        let dirs = self.dirs.clone();
        blocking(move || dirs.place(dirs.copy_of(&src)?, &dst, noclobber)).await
    }
}

/// An object being written in place (`LocalStore::write_in_place`). Dropped unpublished, it
/// leaves nothing behind.
#[derive(Debug)]
pub struct InPlace {
    file: File,
    /// The staged file; `None` once published.
    temp: Option<TempPath>,
    target: PathBuf,
    dirs: Arc<Dirs>,
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
        let temp = self.temp.take().ok_or_else(|| {
            let reason = "already published".to_owned();
            generic(LocalError::Incomplete { path: self.target.clone(), reason })
        })?;
        let e_tag = match sync_and_etag(&self.file, &temp) {
            Ok(e_tag) => e_tag,
            Err(e) => {
                self.temp = Some(temp);
                return Err(e);
            }
        };
        match self.dirs.place_or_keep(temp, &self.target, false) {
            Ok(()) => Ok(PutResult { e_tag: Some(e_tag), version: None }),
            Err((e, temp)) => {
                self.temp = temp;
                Err(e)
            }
        }
    }
}

impl Dirs {
    /// Runs `make` on a fresh name in the staging directory, recreating the directory if someone
    /// removed it.
    fn make_temp<R>(
        &self,
        prefix: &str,
        mut make: impl FnMut(&std::path::Path) -> std::io::Result<R>,
    ) -> std::io::Result<(R, TempPath)> {
        let mut builder = tempfile::Builder::new();
        builder.prefix(prefix).rand_bytes(12);
        let made = match builder.make_in(&self.tmp, &mut make) {
            Err(e) if e.kind() == ErrorKind::NotFound && !self.tmp.is_dir() => {
                std::fs::create_dir_all(&self.tmp)?;
                builder.make_in(&self.tmp, &mut make)
            }
            made => made,
        };
        made.map(NamedTempFile::into_parts)
    }

    /// A new empty staged file, with the permissions `LocalFileSystem` gives (0666 less umask).
    fn temp_file(&self, prefix: &str) -> Result<(File, TempPath)> {
        self.make_temp(prefix, |p| OpenOptions::new().read(true).write(true).create_new(true).mode(0o666).open(p))
            .map_err(|e| io_error("create staged file in", &self.tmp, e))
    }

    /// A staged copy of `src`: a hard link where the filesystem has them, else a copy of the bytes.
    fn copy_of(&self, src: &std::path::Path) -> Result<TempPath> {
        match self.make_temp("cp-", |p| std::fs::hard_link(src, p)) {
            Ok(((), temp)) => return Ok(temp),
            Err(e) if e.kind() == ErrorKind::NotFound => return Err(io_error("copy", src, e)),
            Err(_) => {}
        }
        let mut from = File::open(src).map_err(|e| io_error("copy", src, e))?;
        let (mut file, temp) = self.temp_file("cp-")?;
        std::io::copy(&mut from, &mut file).map_err(|e| io_error("copy", src, e))?;
        file.sync_all().map_err(|e| io_error("sync staged file", &temp, e))?;
        Ok(temp)
    }

    /// Moves a staged file to `target` (refusing to replace an existing one if `noclobber`) and
    /// fsyncs the target's directory. Creates missing parent directories; on failure the staged
    /// file is removed.
    fn place(&self, temp: TempPath, target: &std::path::Path, noclobber: bool) -> Result<()> {
        self.place_or_keep(temp, target, noclobber).map_err(|(e, _)| e)
    }

    /// `place`, handing the staged file back when it could not be moved (`None` once it was
    /// moved and only the directory fsync failed).
    fn place_or_keep(
        &self,
        mut temp: TempPath,
        target: &std::path::Path,
        noclobber: bool,
    ) -> std::result::Result<(), (object_store::Error, Option<TempPath>)> {
        let mut tries = 0;
        loop {
            if let Err(e) = self.create_parents(target) {
                return Err((e, Some(temp)));
            }
            let placed = if noclobber { temp.persist_noclobber(target) } else { temp.persist(target) };
            match placed {
                Ok(()) => break,
                // A delete of the last object in the parent directory removed it in between.
                Err(e) if e.error.kind() == ErrorKind::NotFound && tries < 3 => {
                    temp = e.path;
                    tries += 1;
                }
                Err(e) if noclobber && e.error.kind() == ErrorKind::AlreadyExists => {
                    let path = target.display().to_string();
                    let source = Box::new(LocalError::Io { what: "create", path: target.into(), source: e.error });
                    return Err((object_store::Error::AlreadyExists { path, source }, Some(e.path)));
                }
                Err(e) => return Err((io_error("move staged file to", target, e.error), Some(e.path))),
            }
        }
        match target.parent() {
            Some(parent) => sync_dir(parent).map_err(|e| (e, None)),
            None => Ok(()),
        }
    }

    /// Creates the missing directories above `target`, fsyncing each one's parent so that the new
    /// entry survives a crash.
    fn create_parents(&self, target: &std::path::Path) -> Result<()> {
        let mut missing = Vec::new();
        let mut dir = target.parent();
        while let Some(d) = dir {
            if d.is_dir() || d == self.root {
                break;
            }
            missing.push(d);
            dir = d.parent();
        }
        for d in missing.into_iter().rev() {
            match std::fs::create_dir(d) {
                Ok(()) => {
                    if let Some(parent) = d.parent() {
                        sync_dir(parent)?;
                    }
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists && d.is_dir() => {}
                Err(e) => return Err(io_error("create directory", d, e)),
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for LocalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LocalStore({})", self.dirs.root.display())
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
        let dirs = self.dirs.clone();
        blocking(move || {
            let (mut file, temp) = dirs.temp_file("put-")?;
            payload.iter().try_for_each(|chunk| file.write_all(chunk)).map_err(|e| io_error("write", &temp, e))?;
            write_metadata(&file, &opts.attributes);
            let e_tag = sync_and_etag(&file, &temp)?;
            dirs.place(temp, &target, noclobber)?;
            Ok(PutResult { e_tag: Some(e_tag), version: None })
        })
        .await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        if !opts.attributes.is_empty() {
            return Err(object_store::Error::NotImplemented);
        }
        let target = self.writable(location)?;
        let dirs = self.dirs.clone();
        let (file, temp) = blocking(move || dirs.temp_file("mp-")).await?;
        Ok(Box::new(LocalUpload {
            dirs: self.dirs.clone(),
            target: Arc::new(target),
            temp: Some(temp),
            parts: Arc::new(Parts { file, unfinished: AtomicU64::new(0), failed: Mutex::new(None) }),
            next_part: 0,
            next_offset: 0,
            #[cfg(test)]
            fail_part: self.fail_part,
        }))
    }

    /// `LocalFileSystem`'s answer, with the user metadata kept beside the file (read from the
    /// file it opened, so it is that version's).
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.readable(location)?;
        let mut got = self.inner.get_opts(location, options).await?;
        if let GetResultPayload::File(file, _) = &got.payload {
            got.attributes = read_metadata(file);
        }
        Ok(got)
    }

    async fn get_range(&self, location: &Path, range: Range<u64>) -> Result<Bytes> {
        self.readable(location)?;
        self.inner.get_range(location, range).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.readable(location)?;
        self.inner.get_ranges(location, ranges).await
    }

    async fn head(&self, location: &Path) -> Result<ObjectMeta> {
        self.readable(location)?;
        self.inner.head(location).await
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        self.readable(location)?;
        self.inner.delete(location).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        if prefix.is_some_and(is_reserved) {
            return futures::stream::empty().boxed();
        }
        without_staging(self.inner.list(prefix))
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, Result<ObjectMeta>> {
        if prefix.is_some_and(is_reserved) {
            return futures::stream::empty().boxed();
        }
        without_staging(self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        if prefix.is_some_and(is_reserved) {
            return Ok(ListResult { common_prefixes: vec![], objects: vec![] });
        }
        let mut listed = self.inner.list_with_delimiter(prefix).await?;
        listed.common_prefixes.retain(|p| !is_reserved(p));
        listed.objects.retain(|o| !is_reserved(&o.location));
        Ok(listed)
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.copy_to(from, to, false).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        self.copy_to(from, to, true).await
    }
}

/// A multipart upload into one staged file: each part is written at the offset it will occupy,
/// so parts may finish in any order; `complete` moves the file into place only if every part
/// handed out finished without error.
#[derive(Debug)]
struct LocalUpload {
    dirs: Arc<Dirs>,
    target: Arc<PathBuf>,
    /// The staged file; `None` once completed or aborted. Dropping it removes the file.
    temp: Option<TempPath>,
    parts: Arc<Parts>,
    next_part: u64,
    /// Where the next part starts: the sum of the lengths of the parts handed out before it.
    next_offset: u64,
    #[cfg(test)]
    fail_part: Option<u64>,
}

/// What the parts of one upload share.
#[derive(Debug)]
struct Parts {
    file: File,
    /// Parts handed out whose write has not finished.
    unfinished: AtomicU64,
    /// Why the first part that failed did.
    failed: Mutex<Option<String>>,
}

impl Parts {
    fn fail(&self, reason: String) {
        self.failed.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(reason);
    }
}

/// One part in flight: when its future ends, however it ends, the upload knows.
struct PartGuard {
    parts: Arc<Parts>,
    index: u64,
    done: bool,
}

impl PartGuard {
    fn finish(mut self, result: Result<()>) -> Result<()> {
        if let Err(e) = &result {
            self.parts.fail(format!("part {} failed: {e}", self.index));
        }
        self.done = true;
        result
    }
}

impl Drop for PartGuard {
    fn drop(&mut self) {
        if !self.done {
            self.parts.fail(format!("part {} was dropped before it finished", self.index));
        }
        self.parts.unfinished.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl MultipartUpload for LocalUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let (index, offset) = (self.next_part, self.next_offset);
        self.next_part += 1;
        self.next_offset += data.content_length() as u64;
        self.parts.unfinished.fetch_add(1, Ordering::SeqCst);
        let guard = PartGuard { parts: self.parts.clone(), index, done: false };
        let (parts, target) = (self.parts.clone(), self.target.clone());
        #[cfg(test)]
        let inject = self.fail_part == Some(index);
        async move {
            let written = blocking(move || {
                #[cfg(test)]
                if inject {
                    return Err(io_error("write part to", &target, std::io::Error::other("injected")));
                }
                let mut at = offset;
                for chunk in data.iter() {
                    parts.file.write_all_at(chunk, at).map_err(|e| io_error("write part to", &target, e))?;
                    at += chunk.len() as u64;
                }
                Ok(())
            })
            .await;
            guard.finish(written)
        }
        .boxed()
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let target = self.target.clone();
        let incomplete = |reason: String| generic(LocalError::Incomplete { path: target.to_path_buf(), reason });
        let Some(temp) = self.temp.take() else {
            return Err(incomplete("already completed or aborted".into()));
        };
        let failed = self.parts.failed.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let unfinished = self.parts.unfinished.load(Ordering::SeqCst);
        if let Some(reason) = failed.or_else(|| (unfinished > 0).then(|| format!("{unfinished} part(s) not finished")))
        {
            drop(temp);
            return Err(incomplete(reason));
        }
        let (dirs, parts, expected) = (self.dirs.clone(), self.parts.clone(), self.next_offset);
        blocking(move || {
            let e_tag = sync_and_etag(&parts.file, &temp)?;
            let len = parts.file.metadata().map_err(|e| io_error("stat", &temp, e))?.len();
            if len != expected {
                let reason = format!("staged {len} bytes, parts add up to {expected}");
                return Err(generic(LocalError::Incomplete { path: target.to_path_buf(), reason }));
            }
            dirs.place(temp, &target, false)?;
            Ok(PutResult { e_tag: Some(e_tag), version: None })
        })
        .await
    }

    async fn abort(&mut self) -> Result<()> {
        match self.temp.take() {
            Some(temp) => {
                let path = temp.to_path_buf();
                blocking(move || temp.close().map_err(|e| io_error("remove staged file", &path, e))).await
            }
            None => Ok(()),
        }
    }
}

/// Runs blocking file work off the async threads (inline when there is no tokio runtime).
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => rt.spawn_blocking(work).await?,
        Err(_) => work(),
    }
}

/// Makes a staged file's bytes durable and returns the ETag it will have in place.
///
/// The ETag is `LocalFileSystem`'s (local.rs `get_etag`: inode, mtime in µs and size, in hex),
/// taken from our own handle rather than from a `head` after the rename: a rename keeps the inode
/// and the mtime, and a `head` could already see another writer's object under the key. The test
/// `put_etag_is_the_etag_head_reports` holds the two formulas together.
fn sync_and_etag(file: &File, path: &std::path::Path) -> Result<String> {
    file.sync_all().map_err(|e| io_error("sync", path, e))?;
    let meta = file.metadata().map_err(|e| io_error("stat", path, e))?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok())
        .unwrap_or_default()
        .as_micros();
    Ok(format!("{:x}-{mtime:x}-{:x}", meta.ino(), meta.len()))
}

/// The extended attributes of an object's file that hold its user metadata
/// (`Attribute::Metadata`), one per key, named with this prefix.
const META_XATTR: &str = "user.object_store.meta.";

/// Refuses attributes other than user metadata: a local file has no content type or storage
/// class to keep them in.
fn metadata_only(a: &Attributes) -> Result<()> {
    match a.iter().all(|(k, _)| matches!(k, Attribute::Metadata(_))) {
        true => Ok(()),
        false => Err(object_store::Error::NotImplemented),
    }
}

/// Keeps `a`'s user metadata in extended attributes of `file`. Metadata is what an object says of
/// itself beside its bytes, never the only copy (shrinkfs keeps it in the footer too): a
/// filesystem without user extended attributes (or full ones) keeps the object without it.
fn write_metadata(file: &File, a: &Attributes) {
    for (k, v) in a.iter() {
        if let Attribute::Metadata(name) = k
            && let Err(e) =
                rustix::fs::fsetxattr(file, format!("{META_XATTR}{name}"), v.as_ref().as_bytes(), XattrFlags::empty())
        {
            tracing::debug!(error = %e, "object metadata not kept: no extended attributes");
        }
    }
}

/// The user metadata kept in `file`'s extended attributes (none where the filesystem has none).
fn read_metadata(file: &File) -> Attributes {
    let mut out = Attributes::new();
    let mut names = vec![0u8; 4096];
    let Ok(n) = rustix::fs::flistxattr(file, &mut names[..]) else { return out };
    for name in names[..n].split(|&b| b == 0).filter_map(|n| std::str::from_utf8(n).ok()) {
        let Some(key) = name.strip_prefix(META_XATTR) else { continue };
        let mut value = vec![0u8; 4096];
        if let Ok(len) = rustix::fs::fgetxattr(file, name, &mut value[..])
            && let Ok(v) = String::from_utf8(value[..len].to_vec())
        {
            out.insert(Attribute::Metadata(key.to_owned().into()), AttributeValue::from(v));
        }
    }
    out
}

/// fsyncs a directory so that entries just added to it survive a crash.
fn sync_dir(dir: &std::path::Path) -> Result<()> {
    match File::open(dir).and_then(|d| d.sync_all()) {
        Ok(()) => Ok(()),
        // Some filesystems cannot fsync a directory; their renames are as durable as they get.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOTSUP)) => Ok(()),
        Err(e) => Err(io_error("sync directory", dir, e)),
    }
}

/// Whether a key lies in the staging directory.
fn is_reserved(key: &Path) -> bool {
    key.parts().next().is_some_and(|first| first.as_ref() == TMP_DIR)
}

fn without_staging(list: BoxStream<'static, Result<ObjectMeta>>) -> BoxStream<'static, Result<ObjectMeta>> {
    list.filter(|item| futures::future::ready(!matches!(item, Ok(meta) if is_reserved(&meta.location)))).boxed()
}

/// Whether a file name is one `LocalFileSystem` stages writes under (`NAME#N`): exactly the names
/// its `is_valid_file_path` refuses, those whose part after the first `#` is all digits. A name
/// like `a#b#1` may be a staging file of key `a#b` but is also a valid key, so it is left alone.
fn is_staging_name(name: &OsStr) -> bool {
    let Some((_, suffix)) = name.to_str().and_then(|n| n.split_once('#')) else {
        return false;
    };
    !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit())
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

fn with_path(path: &std::path::Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
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

    fn store() -> (tempfile::TempDir, LocalStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path()).unwrap();
        (dir, store)
    }

    async fn read(store: &LocalStore, key: &Path) -> Vec<u8> {
        store.get(key).await.unwrap().bytes().await.unwrap().to_vec()
    }

    async fn keys(store: &LocalStore, prefix: Option<&Path>) -> Vec<String> {
        let mut keys: Vec<String> = store.list(prefix).map_ok(|m| m.location.to_string()).try_collect().await.unwrap();
        keys.sort();
        keys
    }

    /// Files in the staging directory.
    fn staged(store: &LocalStore) -> usize {
        std::fs::read_dir(&store.dirs.tmp).unwrap().count()
    }

    fn is_not_found<T>(r: Result<T>) -> bool {
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

    #[tokio::test]
    async fn multipart_parts_finishing_out_of_order_reassemble_exactly() {
        let (_dir, store) = store();
        let key = Path::from("a/big");
        let parts = [vec![1u8; 3000], vec![2u8; 5000], vec![3u8; 1000], vec![4u8; 7]];
        let mut up = store.put_multipart(&key).await.unwrap();
        let writes: Vec<_> = parts.iter().map(|p| up.put_part(p.clone().into())).collect();
        // Work starts when a part is polled: the last part is written first, the first last.
        for write in writes.into_iter().rev() {
            write.await.unwrap();
        }
        let put = up.complete().await.unwrap();
        assert_eq!(read(&store, &key).await, parts.concat());
        assert_eq!(put.e_tag, store.head(&key).await.unwrap().e_tag);
        assert_eq!(staged(&store), 0);
    }

    #[tokio::test]
    async fn a_failed_part_fails_complete_and_writes_nothing() {
        let (_dir, mut store) = store();
        store.fail_part = Some(1);
        let key = Path::from("holed");
        let mut up = store.put_multipart(&key).await.unwrap();
        let (a, b, c) = (up.put_part("aaa".into()), up.put_part("bbb".into()), up.put_part("ccc".into()));
        a.await.unwrap();
        assert!(b.await.is_err());
        c.await.unwrap();
        let e = up.complete().await.unwrap_err();
        assert!(e.to_string().contains("part 1 failed"), "{e}");
        assert!(is_not_found(store.head(&key).await));
        assert_eq!(staged(&store), 0);
    }

    #[tokio::test]
    async fn a_part_not_finished_or_dropped_fails_complete() {
        let (_dir, store) = store();
        let key = Path::from("k");
        let mut up = store.put_multipart(&key).await.unwrap();
        up.put_part("a".into()).await.unwrap();
        let pending = up.put_part("b".into());
        let e = up.complete().await.unwrap_err();
        assert!(e.to_string().contains("1 part(s) not finished"), "{e}");
        drop(pending);

        let mut up = store.put_multipart(&key).await.unwrap();
        drop(up.put_part("a".into()));
        let e = up.complete().await.unwrap_err();
        assert!(e.to_string().contains("part 0 was dropped"), "{e}");
        assert!(is_not_found(store.head(&key).await));
        assert_eq!(staged(&store), 0);
    }

    #[tokio::test]
    async fn abort_and_drop_leave_no_staged_file() {
        let (_dir, store) = store();
        let key = Path::from("k");
        let mut up = store.put_multipart(&key).await.unwrap();
        up.put_part("a".into()).await.unwrap();
        assert_eq!(staged(&store), 1);
        up.abort().await.unwrap();
        assert_eq!(staged(&store), 0);
        up.abort().await.unwrap();
        assert!(up.complete().await.is_err());

        let mut up = store.put_multipart(&key).await.unwrap();
        up.put_part("a".into()).await.unwrap();
        drop(up);
        assert_eq!(staged(&store), 0);
        assert!(is_not_found(store.head(&key).await));
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

    #[tokio::test]
    async fn listings_never_show_the_staging_directory() {
        let (_dir, store) = store();
        store.put(&Path::from("a"), "1".into()).await.unwrap();
        store.put(&Path::from("d/b"), "2".into()).await.unwrap();
        let mut up = store.put_multipart(&Path::from("c")).await.unwrap();
        up.put_part("in flight".into()).await.unwrap();
        let tmp = Path::from(TMP_DIR);

        assert_eq!(keys(&store, None).await, ["a", "d/b"]);
        let all: Vec<_> = store.list_with_offset(None, &Path::from("")).try_collect().await.unwrap();
        assert_eq!(all.len(), 2);
        let top = store.list_with_delimiter(None).await.unwrap();
        assert_eq!(top.common_prefixes, vec![Path::from("d")]);
        assert_eq!(top.objects.iter().map(|o| o.location.to_string()).collect::<Vec<_>>(), ["a"]);
        assert!(keys(&store, Some(&tmp)).await.is_empty());
        let inside = store.list_with_delimiter(Some(&tmp)).await.unwrap();
        assert!(inside.objects.is_empty() && inside.common_prefixes.is_empty());

        let name = std::fs::read_dir(&store.dirs.tmp).unwrap().next().unwrap().unwrap().file_name();
        let staged_key = tmp.child(name.to_str().unwrap());
        assert!(is_not_found(store.get(&staged_key).await));
        assert!(is_not_found(store.delete(&staged_key).await));
        assert!(store.put(&staged_key, "x".into()).await.is_err());
        assert!(store.copy(&Path::from("a"), &staged_key).await.is_err());
        up.abort().await.unwrap();
    }

    #[tokio::test]
    async fn cleanup_removes_old_leftovers_and_keeps_fresh_ones() {
        let (dir, store) = store();
        let old = SystemTime::now() - Duration::from_secs(3600);
        let write = |rel: &str, len: usize, mtime: Option<SystemTime>| {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, vec![0u8; len]).unwrap();
            if let Some(t) = mtime {
                File::options().write(true).open(&path).unwrap().set_modified(t).unwrap();
            }
        };
        write(".shrinkfs-tmp/put-old", 100, Some(old));
        write(".shrinkfs-tmp/put-new", 10, None);
        write("a/b/obj#3", 1000, Some(old));
        write("c#0", 7, Some(old));
        write("d#5", 5, None);
        // Valid keys, however old.
        for key in ["x#y#1", "e#12a", "f#", "plain"] {
            write(key, 3, Some(old));
        }

        let done = store.cleanup(Duration::from_secs(60)).unwrap();
        assert_eq!(done, Cleanup { files: 3, bytes: 1107 });
        for gone in [".shrinkfs-tmp/put-old", "a/b/obj#3", "c#0"] {
            assert!(!dir.path().join(gone).exists(), "{gone}");
        }
        for kept in [".shrinkfs-tmp/put-new", "d#5", "x#y#1", "e#12a", "f#", "plain"] {
            assert!(dir.path().join(kept).exists(), "{kept}");
        }
        assert_eq!(store.cleanup(Duration::ZERO).unwrap(), Cleanup { files: 2, bytes: 15 });
        assert_eq!(keys(&store, None).await, ["e#12a", "f#", "plain", "x#y#1"]);
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
    async fn user_metadata_is_kept_in_extended_attributes_and_other_attributes_refused() {
        let (dir, store) = store();
        let probe = File::create(dir.path().join("probe")).unwrap();
        if let Err(e) = rustix::fs::fsetxattr(&probe, "user.probe", b"1", XattrFlags::empty()) {
            println!("SKIPPED: {} has no user extended attributes ({e})", dir.path().display());
            return;
        }
        let key = Path::from("m/eta");
        let mut a = Attributes::new();
        a.insert(Attribute::Metadata("shrinkfs".into()), "v1 size=3 stored=3".into());
        let opts = PutOptions { attributes: a.clone(), ..Default::default() };
        store.put_opts(&key, "abc".into(), opts).await.unwrap();
        let head = GetOptions { head: true, ..Default::default() };
        assert_eq!(store.get_opts(&key, head.clone()).await.unwrap().attributes, a, "a HEAD returns them");
        // An object written in place carries them too.
        let mut ip = store.write_in_place(&Path::from("m/ip")).unwrap();
        ip.file().write_all_at(b"xyz", 0).unwrap();
        ip.record(&a);
        ip.publish().unwrap();
        assert_eq!(store.get_opts(&Path::from("m/ip"), head.clone()).await.unwrap().attributes, a);
        // A rename (copy, then delete) keeps them: the copy is a hard link.
        store.copy(&key, &Path::from("m/copy")).await.unwrap();
        assert_eq!(store.get_opts(&Path::from("m/copy"), head).await.unwrap().attributes, a);
        let mut other = Attributes::new();
        other.insert(Attribute::ContentType, "text/plain".into());
        let opts = PutOptions { attributes: other, ..Default::default() };
        assert!(matches!(store.put_opts(&key, "abc".into(), opts).await, Err(object_store::Error::NotImplemented)));
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
        // LocalFileSystem could not read it back (it takes `NAME#N` for its own staging files).
        assert!(store.put(&Path::parse("a#1").unwrap(), "x".into()).await.is_err());
        // Keys built part by part percent-encode `#` (and `%`, `*`, `?`…), so never collide.
        store.put(&Path::from("b#1"), "x".into()).await.unwrap();
        assert!(store.root().join("b%231").is_file());
        store.delete(&Path::from("b#1")).await.unwrap();
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
