//! File contents: open handles, the per-inode write state (streaming upload, local staging file,
//! or clean), and the operations on them — open, create, read, write, flush, fsync, release, and
//! setattr (truncate, chmod, chown, utimens, all persisted with the object).
//!
//! Every handle, reader or writer, is counted in the open-file table under one lock, so the last
//! release is known exactly and a file being closed is never confused with one being reopened.
//! Only a writer's flush or fsync publishes: a reader's close never commits another process's
//! partial rewrite. No failure discards bytes: a failed upload leaves the file dirty with its
//! content, so the next fsync or close uploads it again; a failed move to a staging file leaves the
//! content where it was.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use shrinkfs_codec::FileMeta;
use shrinkfs_codec::format::S_IFREG;

use crate::cache::{ObjectId, Parsed};
use crate::error::{Error, Result};
use crate::fs::{FileAttrs, Fs, check_name};
use crate::inode::{Attr, Inode, Kind, join};
use crate::objects::ObjectInfo;
use crate::upload::{Sink, Upload, Written, upload_file};

/// Most frames fetched ahead of a sequential reader (16 MiB at the default frame size).
pub const MAX_READAHEAD_FRAMES: usize = 16;

/// How far ahead of a streaming upload's end a write may land and still wait for the writes
/// before it (the kernel's write-back sends up to `max_background` requests at once, and the
/// FUSE threads may take them up in any order).
pub const REORDER_WINDOW: u64 = 64 << 20;

/// How long such a write waits for the gap before it to be filled — with the write-back cache
/// always, else only while another write of the file is in progress; after that the file is
/// staged and written at any offset (with the write-back cache, a file with a hole pays this once).
pub const REORDER_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// The shared state of one open inode.
pub type SharedFile = Arc<FileCell>;

/// The write state of one open inode behind its lock, and what writes arriving out of order
/// wait on without holding it.
#[derive(Debug)]
pub struct FileCell {
    state: tokio::sync::Mutex<OpenFile>,
    /// Writes of this file in progress (waiting for the lock, for a gap, or writing).
    writes: AtomicU32,
    /// Woken when a write ends.
    progress: tokio::sync::Notify,
}

impl FileCell {
    fn new(of: OpenFile) -> SharedFile {
        Arc::new(FileCell {
            state: tokio::sync::Mutex::new(of),
            writes: AtomicU32::new(0),
            progress: tokio::sync::Notify::new(),
        })
    }

    /// Counts a write in progress until the returned guard is dropped, which wakes the writes
    /// waiting for a gap to be filled.
    fn begin_write(&self) -> WriteInProgress<'_> {
        self.writes.fetch_add(1, Ordering::AcqRel);
        WriteInProgress(self)
    }
}

impl std::ops::Deref for FileCell {
    type Target = tokio::sync::Mutex<OpenFile>;

    fn deref(&self) -> &Self::Target {
        &self.state
    }
}

/// A write of a [`FileCell`] in progress.
struct WriteInProgress<'a>(&'a FileCell);

impl Drop for WriteInProgress<'_> {
    fn drop(&mut self) {
        self.0.writes.fetch_sub(1, Ordering::AcqRel);
        self.0.progress.notify_waiters();
    }
}

/// An open file handle.
#[derive(Debug, Clone)]
pub struct Handle {
    /// Its inode.
    pub ino: u64,
    /// Opened for writing.
    pub write: bool,
    /// The open-file state this handle is counted in.
    pub file: SharedFile,
    /// Where the last read ended, and how many frames to fetch ahead while reads stay sequential.
    pub readahead: (u64, usize),
    /// The process that opened it, where the kernel said (see `flush_by`).
    pub owner: Option<u32>,
}

/// One inode in the open-file table: its state and the handles counted on it.
#[derive(Debug)]
pub struct OpenEntry {
    /// The state every handle of the inode shares.
    pub file: SharedFile,
    /// Handles open on it.
    pub handles: u32,
    /// Of those, handles open for writing.
    pub writers: u32,
}

/// What the bytes of an open file are, right now.
#[derive(Debug)]
pub enum Body {
    /// Exactly the object version `base` (nothing, for a new file).
    Clean,
    /// Being written sequentially from offset 0 straight to the store.
    Streaming(Box<Upload>),
    /// A full local copy, written at any offset.
    Staged {
        /// The (unlinked) staging file.
        file: File,
        /// Logical length.
        len: u64,
    },
}

/// Write state of one inode, shared by all its handles.
#[derive(Debug)]
pub struct OpenFile {
    /// The bytes.
    pub body: Body,
    /// Metadata to record with the next object written.
    pub meta: FileMeta,
    /// Bytes or metadata differ from the store.
    pub dirty: bool,
    /// Unlinked while open: its bytes stay readable and writable here, nothing is uploaded.
    pub unlinked: bool,
    /// The object version it started from, or last committed (None: new file).
    pub base: Option<ObjectInfo>,
}

fn now_meta() -> (i64, u32) {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    (d.as_secs() as i64, d.subsec_nanos())
}

/// Locks `file` for a write at `offset`. While the write lands past the end of a streaming
/// upload (within `REORDER_WINDOW`) and either `always` (the kernel's write-back cache is on) or
/// another write of the file is in progress, it first waits for the writes before it, at most
/// `REORDER_WAIT`.
async fn lock_for_write(file: &FileCell, offset: u64, always: bool) -> tokio::sync::MutexGuard<'_, OpenFile> {
    let deadline = tokio::time::Instant::now() + REORDER_WAIT;
    loop {
        // Registered before the check, so a write ending in between still wakes this one.
        let progress = file.progress.notified();
        tokio::pin!(progress);
        progress.as_mut().enable();
        let of = file.lock().await;
        let ahead = of.stream_end().is_some_and(|end| offset > end && offset - end <= REORDER_WINDOW);
        let others = file.writes.load(Ordering::Acquire) > 1;
        if !ahead || !(always || others) || tokio::time::Instant::now() >= deadline {
            return of;
        }
        drop(of);
        let _ = tokio::time::timeout_at(deadline, progress).await;
    }
}

impl OpenFile {
    /// Where the next write continues a sequential upload: the end of a streaming upload, or 0
    /// for an empty file not written yet.
    fn stream_end(&self) -> Option<u64> {
        match &self.body {
            Body::Streaming(u) if u.appendable() => Some(u.len()),
            Body::Clean if self.base.as_ref().is_none_or(|b| b.size() == 0) => Some(0),
            _ => None,
        }
    }

    fn len(&self) -> u64 {
        match &self.body {
            Body::Clean => self.base.as_ref().map_or(0, |b| b.size()),
            Body::Streaming(u) => u.len(),
            Body::Staged { len, .. } => *len,
        }
    }
}

impl Fs {
    pub(crate) fn is_open(&self, ino: u64) -> bool {
        self.open.lock().expect("open lock").contains_key(&ino)
    }

    pub(crate) fn open_file(&self, ino: u64) -> Option<SharedFile> {
        self.open.lock().expect("open lock").get(&ino).map(|e| e.file.clone())
    }

    /// Attributes of an inode with local write state.
    pub(crate) async fn open_attrs(&self, i: &Inode) -> Option<FileAttrs> {
        let of = self.open_file(i.ino)?;
        let of = of.lock().await;
        let mut a = self.attrs_of(i);
        a.size = of.len();
        if let Some(m) = of.meta.mode {
            a.perm = (m & 0o7777) as u16;
        }
        a.uid = of.meta.uid.unwrap_or(a.uid);
        a.gid = of.meta.gid.unwrap_or(a.gid);
        if let Some((s, ns)) = of.meta.mtime {
            a.mtime = UNIX_EPOCH + std::time::Duration::new(s.max(0) as u64, ns);
        }
        if of.unlinked {
            a.nlink = 0;
        }
        Some(a)
    }

    /// Counts a new handle on `ino`: on the state already open, or on `fresh` when there is none.
    fn attach(&self, ino: u64, write: bool, fresh: Option<OpenFile>) -> Option<SharedFile> {
        let mut open = self.open.lock().expect("open lock");
        let entry = match (open.get_mut(&ino), fresh) {
            (Some(e), _) => e,
            (None, Some(of)) => {
                open.entry(ino).or_insert(OpenEntry { file: FileCell::new(of), handles: 0, writers: 0 })
            }
            (None, None) => return None,
        };
        entry.handles += 1;
        entry.writers += u32::from(write);
        Some(entry.file.clone())
    }

    fn new_handle(&self, ino: u64, write: bool, file: SharedFile) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let h = Handle { ino, write, file, readahead: (0, 0), owner: None };
        self.handles.lock().expect("handles lock").insert(fh, h);
        fh
    }

    fn handle(&self, fh: u64) -> Result<Handle> {
        self.handles.lock().expect("handles lock").get(&fh).cloned().ok_or(Error::Stale)
    }

    fn staging_file(&self) -> Result<File> {
        Ok(tempfile::tempfile_in(&self.cfg.staging_dir)?)
    }

    fn sink(&self) -> Sink {
        Sink {
            store: self.bucket.store.clone(),
            dispatcher: self.cfg.dispatcher.clone(),
            budget: self.budget.clone(),
            metrics: self.metrics.clone(),
            tracked: (self.bucket.multipart.clone())
                .filter(|_| self.bucket.tracks_uploads)
                .map(|mp| (mp, self.bucket.upload_markers())),
            local: self.bucket.local.clone(),
        }
    }

    fn new_upload(&self, path: &str) -> Result<Upload> {
        Upload::new(self.sink(), self.key(path), &self.cfg.encode, &self.cfg.staging_dir)
    }

    /// Creates and opens a new, empty file.
    pub async fn create(&self, parent: u64, name: &str, mode: u32, uid: u32, gid: u32) -> Result<(FileAttrs, u64)> {
        self.writable()?;
        check_name(name)?;
        let dir = self.inode(parent)?;
        if dir.kind != Kind::Dir {
            return Err(Error::NotDir);
        }
        let rel = join(&dir.path, name);
        self.check_key_len(&rel)?;
        let (gid, _) = self.inherited_group(&dir, gid);
        let meta =
            FileMeta { mode: Some(S_IFREG | (mode & 0o7777)), uid: Some(uid), gid: Some(gid), mtime: Some(now_meta()) };
        let attr = Attr { perm: Some((mode & 0o7777) as u16), uid: Some(uid), gid: Some(gid), ..Attr::empty() };
        let of = OpenFile {
            body: Body::Streaming(Box::new(self.new_upload(&rel)?)),
            meta,
            dirty: true,
            unlinked: false,
            base: None,
        };
        let i = self.inodes.lock().expect("inode lock").upsert(parent, name, Kind::File, attr, None, true);
        let file = {
            let mut open = self.open.lock().expect("open lock");
            // A state left for this inode (an unlinked file of the same name) is not this file's.
            let file = FileCell::new(of);
            open.insert(i.ino, OpenEntry { file: file.clone(), handles: 1, writers: 1 });
            file
        };
        let fh = self.new_handle(i.ino, true, file);
        Ok((self.attrs_of(&i), fh))
    }

    /// The state of a file not yet open: the object as stored now. A damaged object can still be
    /// opened to be truncated (and so replaced).
    async fn load(&self, i: &Inode, replace: bool) -> Result<OpenFile> {
        let base = match self.reader.stat(&self.key(&i.path)).await {
            Ok(Some(info)) => Some(info),
            Ok(None) => return Err(Error::NotFound),
            Err(Error::Codec { key, source }) if replace => {
                tracing::warn!(key, error = %source, "replacing an object that cannot be read");
                None
            }
            Err(e) => return Err(e),
        };
        let meta = match &base {
            Some(info) => info.meta(),
            None => {
                let a = self.attrs_of(i);
                FileMeta {
                    mode: Some(S_IFREG | u32::from(a.perm)),
                    uid: Some(a.uid),
                    gid: Some(a.gid),
                    mtime: Some(now_meta()),
                }
            }
        };
        Ok(OpenFile { meta, body: Body::Clean, dirty: false, unlinked: false, base })
    }

    /// Opens a file; `truncate` (O_TRUNC) empties it.
    pub async fn open(&self, ino: u64, write: bool, truncate: bool) -> Result<u64> {
        let i = self.inode(ino)?;
        if i.kind == Kind::Dir {
            return Err(Error::IsDir);
        }
        if write {
            self.writable()?;
        }
        let file = match self.attach(ino, write, None) {
            Some(f) => f,
            None => {
                let fresh = self.load(&i, write && truncate).await?;
                self.attach(ino, write, Some(fresh)).expect("fresh state given")
            }
        };
        let fh = self.new_handle(ino, write, file.clone());
        if truncate && write {
            let mut of = file.lock().await;
            if let Err(e) = self.truncate_locked(&i, &mut of, 0).await {
                drop(of);
                let _ = self.release(fh).await;
                return Err(e);
            }
        }
        Ok(fh)
    }

    /// Reads up to `size` bytes at `offset`.
    pub async fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Bytes> {
        let h = self.handle(fh)?;
        let mut of = h.file.lock().await;
        if let Body::Streaming(u) = &of.body {
            if offset >= u.len() {
                // The kernel's write-back asks for the page at the end of a file being written.
                return Ok(Bytes::new());
            }
            self.stage_locked(&mut of).await?;
        }
        let base = match &of.body {
            Body::Staged { file, len } => {
                let end = offset.saturating_add(size as u64).min(*len);
                if offset >= end {
                    return Ok(Bytes::new());
                }
                let mut buf = vec![0u8; (end - offset) as usize];
                file.read_exact_at(&mut buf, offset)?;
                return Ok(buf.into());
            }
            Body::Clean => of.base.clone(),
            Body::Streaming(_) => unreachable!("staged above"),
        };
        drop(of);
        let Some(info) = base else { return Ok(Bytes::new()) };
        let end = offset.saturating_add(size as u64);
        let data = self.reader.read(&info, offset..end).await?;
        self.read_ahead(fh, &info, offset, end);
        Ok(data)
    }

    /// Most frames fetched ahead of one reader: `MAX_READAHEAD_FRAMES`, fewer when the frame cache
    /// could not hold them all until they are read.
    fn max_readahead(&self) -> usize {
        let fits = self.cfg.cache_bytes / (2 * self.cfg.encode.frame_size.max(1) as u64);
        (fits as usize).clamp(1, MAX_READAHEAD_FRAMES)
    }

    /// Sequential readers get frames fetched ahead in the background, in a window that doubles
    /// (up to `MAX_READAHEAD_FRAMES`) while reads keep following each other; any jump resets it.
    fn read_ahead(&self, fh: u64, info: &ObjectInfo, offset: u64, end: u64) {
        let window = {
            let mut handles = self.handles.lock().expect("handles lock");
            let Some(h) = handles.get_mut(&fh) else { return };
            let (last_end, window) = h.readahead;
            let next = if offset == last_end && offset > 0 { (window * 2).clamp(1, self.max_readahead()) } else { 0 };
            h.readahead = (end, next);
            next
        };
        if window > 0 {
            self.reader.prefetch(info, end, window);
        }
    }

    /// Moves an open file's bytes into a local staging file (from the upload so far or the object).
    /// On failure the bytes stay where they were.
    pub(crate) async fn stage_locked(&self, of: &mut OpenFile) -> Result<()> {
        match &mut of.body {
            Body::Staged { .. } => {}
            Body::Streaming(up) => {
                let file = self.staging_file()?;
                let len = up.recover_into(&file).await?;
                if let Body::Streaming(up) = std::mem::replace(&mut of.body, Body::Staged { file, len }) {
                    up.abort().await;
                }
            }
            Body::Clean => {
                let file = self.staging_file()?;
                let mut len = 0;
                if let Some(base) = &of.base {
                    // Frame by frame, so a large file does not pass through memory at once.
                    let step = 8u64 << 20;
                    while len < base.size() {
                        let chunk = self.reader.read(base, len..len + step).await?;
                        if chunk.is_empty() {
                            return Err(Error::ShortObject { key: base.path.to_string() });
                        }
                        file.write_all_at(&chunk, len)?;
                        len += chunk.len() as u64;
                    }
                }
                of.body = Body::Staged { file, len };
            }
        }
        Ok(())
    }

    /// Writes `data` at `offset`; returns the bytes written. A write that lands a little past the
    /// end of a streaming upload while other writes of the file are in progress (the kernel's
    /// write-back sends several at once) waits for them, briefly, so the upload keeps streaming. An error leaves the file as it was,
    /// except a full staging disk while a sequential upload spills (see `Upload::write`).
    pub async fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        let h = self.handle(fh)?;
        if !h.write {
            return Err(Error::NotWritable);
        }
        let _writing = h.file.begin_write();
        let mut of = lock_for_write(&h.file, offset, self.cfg.writeback_cache).await;
        let i = self.inode(h.ino)?;
        if let Body::Clean = of.body
            && of.base.as_ref().is_none_or(|b| b.size() == 0)
            && offset == 0
        {
            of.body = Body::Streaming(Box::new(self.new_upload(&i.path)?));
        }
        let sequential = matches!(&of.body, Body::Streaming(u) if u.appendable() && u.len() == offset);
        if !sequential {
            self.stage_locked(&mut of).await?;
        }
        match &mut of.body {
            Body::Streaming(u) => u.write(data).await?,
            Body::Staged { file, len } => {
                file.write_all_at(data, offset)?;
                *len = (*len).max(offset + data.len() as u64);
            }
            Body::Clean => unreachable!("streaming or staged above"),
        }
        of.dirty = true;
        of.meta.mtime = Some(now_meta());
        Ok(data.len() as u32)
    }

    async fn truncate_locked(&self, i: &Inode, of: &mut OpenFile, size: u64) -> Result<()> {
        if of.len() == size && !matches!(of.body, Body::Clean) {
            return Ok(());
        }
        if size == 0 {
            let fresh = Body::Streaming(Box::new(self.new_upload(&i.path)?));
            if let Body::Streaming(u) = std::mem::replace(&mut of.body, fresh) {
                u.abort().await;
            }
        } else {
            self.stage_locked(of).await?;
            if let Body::Staged { file, len } = &mut of.body {
                file.set_len(size)?;
                *len = size;
            }
        }
        of.dirty = true;
        of.meta.mtime = Some(now_meta());
        Ok(())
    }

    /// Uploads an open file's pending bytes and metadata; the object is complete in the store when
    /// this returns. On failure the file stays dirty with all its bytes, so a retry uploads them.
    pub(crate) async fn commit_locked(&self, i: &Inode, of: &mut OpenFile) -> Result<()> {
        if !of.dirty || of.unlinked {
            return Ok(());
        }
        let path = self.key(&i.path);
        let written: Written = match &mut of.body {
            Body::Streaming(up) if up.path() == &path => {
                let w = up.finish(&of.meta).await?;
                of.body = Body::Clean;
                w
            }
            Body::Streaming(_) => {
                // Renamed while written: the bytes go to the new name.
                self.stage_locked(of).await?;
                return Box::pin(self.commit_locked(i, of)).await;
            }
            Body::Staged { file, len } => {
                let up = Upload::new(self.sink(), path.clone(), &self.cfg.encode, &self.cfg.staging_dir)?;
                upload_file(up, file, *len, &of.meta).await?
            }
            Body::Clean => {
                // Only metadata changed: rewrite the object's bytes with the new metadata.
                self.stage_locked(of).await?;
                return Box::pin(self.commit_locked(i, of)).await;
            }
        };
        of.dirty = false;
        let etag: Arc<str> = written.put.e_tag.clone().unwrap_or_default().into();
        let id = ObjectId { key: path.as_ref().into(), etag };
        let ctx = written
            .layout
            .open(self.cfg.encode.key.as_ref(), &self.cfg.dicts)
            .map_err(|e| Error::Codec { key: path.to_string(), source: e })?;
        let parsed = Parsed::Framed { layout: Arc::new(written.layout), ctx: Arc::new(ctx) };
        if written.put.e_tag.is_some() {
            self.reader.layouts.insert(id.clone(), parsed.clone());
        }
        let info = ObjectInfo { id, path, stored: written.stored, last_modified: SystemTime::now(), parsed };
        let (kind, attr) = Self::attr_from_object(&info);
        if let Some(cur) = self.inodes.lock().expect("inode lock").get_mut(i.ino) {
            cur.kind = kind;
            cur.attr = attr;
            cur.fetched = Some(Instant::now());
        }
        of.base = Some(info);
        tracing::debug!(ino = i.ino, stored = written.stored, "committed");
        Ok(())
    }

    /// Uploads the pending state of `ino`, if any.
    pub(crate) async fn commit_ino(&self, ino: u64) -> Result<()> {
        let Some(of) = self.open_file(ino) else {
            return Ok(());
        };
        let mut of = of.lock().await;
        let i = self.inode(ino)?;
        self.commit_locked(&i, &mut of).await
    }

    /// close(): a writer's close uploads everything written through any handle of the file; a
    /// reader's close publishes nothing.
    pub async fn flush(&self, fh: u64) -> Result<()> {
        let h = self.handle(fh)?;
        if !h.write {
            return Ok(());
        }
        let mut of = h.file.lock().await;
        let i = self.inode(h.ino)?;
        self.commit_locked(&i, &mut of).await
    }

    /// Records the process that opened handle `fh`.
    pub fn set_owner(&self, fh: u64, process: u32) {
        if let Some(h) = self.handles.lock().expect("handles lock").get_mut(&fh) {
            h.owner = Some(process);
        }
    }

    /// close() of one descriptor of handle `fh` by `process`. The kernel sends this for every copy
    /// of a descriptor, including the close-on-exec in each child a writer forks: such a close
    /// publishes nothing while the process that opened the file is still running (`alive`), or a
    /// half-written file would appear whenever the writer starts a program. The opener's own close,
    /// fsync and the last release still upload everything.
    pub async fn flush_by(&self, fh: u64, process: u32, alive: impl Fn(u32) -> bool) -> Result<()> {
        let h = self.handle(fh)?;
        if let Some(owner) = h.owner
            && owner != process
            && alive(owner)
        {
            tracing::debug!(fh, owner, process, "close by another process: nothing published");
            return Ok(());
        }
        self.flush(fh).await
    }

    /// fsync(): the same guarantee as a writer's flush.
    pub async fn fsync(&self, fh: u64) -> Result<()> {
        self.flush(fh).await
    }

    /// Drops a handle. The last one uploads anything still pending (changes a failed close left)
    /// and frees the state — unless the file was opened again meanwhile.
    pub async fn release(&self, fh: u64) -> Result<()> {
        let h = self.handles.lock().expect("handles lock").remove(&fh).ok_or(Error::Stale)?;
        let last = {
            let mut open = self.open.lock().expect("open lock");
            match open.get_mut(&h.ino) {
                Some(e) if Arc::ptr_eq(&e.file, &h.file) => {
                    e.handles = e.handles.saturating_sub(1);
                    e.writers = e.writers.saturating_sub(u32::from(h.write));
                    e.handles == 0
                }
                _ => true,
            }
        };
        if !last {
            return Ok(());
        }
        let mut of = h.file.lock().await;
        let res = match self.inode(h.ino) {
            Ok(i) => self.commit_locked(&i, &mut of).await,
            Err(_) => Ok(()),
        };
        let retired = {
            let mut open = self.open.lock().expect("open lock");
            match open.get(&h.ino) {
                Some(e) if Arc::ptr_eq(&e.file, &h.file) && e.handles == 0 => {
                    open.remove(&h.ino);
                    true
                }
                Some(e) if Arc::ptr_eq(&e.file, &h.file) => false,
                _ => true,
            }
        };
        if retired {
            if let Err(e) = &res {
                tracing::error!(ino = h.ino, error = %e, "last handle closed; changes that could not be uploaded are lost");
            }
            if let Body::Streaming(u) = std::mem::replace(&mut of.body, Body::Clean) {
                u.abort().await;
            }
        }
        res
    }

    /// An open file whose name is going away (unlink, or replaced by a rename): its bytes move to a
    /// staging file if they live only in the store, and it uploads nothing any more. Runs `remove`
    /// (which deletes the object) while the file is locked, and marks the file only if it succeeds.
    pub(crate) async fn detach_open<F, T>(&self, ino: u64, remove: F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let Some(file) = self.open_file(ino) else {
            return remove.await;
        };
        let mut of = file.lock().await;
        // Local bytes only: nothing more goes to the store for a file that has no name.
        if matches!(of.body, Body::Streaming(_)) || matches!(of.body, Body::Clean) && of.base.is_some() {
            self.stage_locked(&mut of).await?;
        }
        let out = remove.await?;
        of.unlinked = true;
        of.dirty = false;
        Ok(out)
    }

    /// Clears the set-user-ID bit of regular file `ino`, and its set-group-ID bit where its group
    /// may execute it, as the kernel asks when an unprivileged process writes or truncates a file
    /// and whenever its owner changes (the mount handles these itself, so the kernel needs no
    /// `security.capability` lookup before every write).
    pub async fn clear_suidgid(&self, ino: u64) -> Result<()> {
        match self.mode_without_suidgid(ino).await? {
            Some(m) => self.setattr(ino, None, Some(m), None, None, None).await.map(drop),
            None => Ok(()),
        }
    }

    /// [`Self::setattr`] asked by a caller who is `privileged` (uid 0) or not: a change of owner,
    /// or a truncate by an unprivileged caller, also clears the set-user-ID and set-group-ID bits
    /// as [`Self::clear_suidgid`] says (unless the call sets the mode itself).
    #[allow(clippy::too_many_arguments)]
    pub async fn setattr_as(
        &self,
        ino: u64,
        size: Option<u64>,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        mtime: Option<SystemTime>,
        privileged: bool,
    ) -> Result<FileAttrs> {
        let kill = uid.is_some() || gid.is_some() || (size.is_some() && !privileged);
        let mode = match mode {
            None if kill => self.mode_without_suidgid(ino).await?,
            m => m,
        };
        self.setattr(ino, size, mode, uid, gid, mtime).await
    }

    /// [`Self::open`] asked by a caller who is `privileged` (uid 0) or not: an unprivileged
    /// truncating open also clears the set-user-ID and set-group-ID bits.
    pub async fn open_as(&self, ino: u64, write: bool, truncate: bool, privileged: bool) -> Result<u64> {
        let fh = self.open(ino, write, truncate).await?;
        if write
            && truncate
            && !privileged
            && let Err(e) = self.clear_suidgid(ino).await
        {
            let _ = self.release(fh).await;
            return Err(e);
        }
        Ok(fh)
    }

    /// The permission bits regular file `ino` keeps once its set-user-ID and set-group-ID bits are
    /// cleared as [`Self::clear_suidgid`] says, or None when that changes nothing.
    async fn mode_without_suidgid(&self, ino: u64) -> Result<Option<u32>> {
        let a = self.getattr(ino).await?;
        if a.kind != Kind::File {
            return Ok(None);
        }
        let m = u32::from(a.perm);
        let mut kept = m & !0o4000;
        if m & 0o010 != 0 {
            kept &= !0o2000;
        }
        Ok((kept != m).then_some(kept))
    }

    /// Changes size, mode, owner or times; persisted with the object on the next upload (at once
    /// when no handle is open).
    #[allow(clippy::too_many_arguments)]
    pub async fn setattr(
        &self,
        ino: u64,
        size: Option<u64>,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        mtime: Option<SystemTime>,
    ) -> Result<FileAttrs> {
        let i = self.inode(ino)?;
        if size.is_none() && mode.is_none() && uid.is_none() && gid.is_none() && mtime.is_none() {
            return self.getattr(ino).await;
        }
        self.writable()?;
        if i.kind != Kind::File {
            if size.is_some() {
                return Err(if i.kind == Kind::Dir { Error::IsDir } else { Error::WrongType("truncate a link") });
            }
            // Directories keep theirs in their marker object, symbolic links in their own object.
            let attr = {
                let mut t = self.inodes.lock().expect("inode lock");
                let cur = t.get_mut(ino).ok_or(Error::Stale)?;
                if let Some(m) = mode {
                    cur.attr.perm = Some((m & 0o7777) as u16);
                }
                cur.attr.uid = uid.or(cur.attr.uid);
                cur.attr.gid = gid.or(cur.attr.gid);
                cur.attr.mtime = mtime.unwrap_or(cur.attr.mtime);
                cur.attr.clone()
            };
            match i.kind {
                Kind::Dir if i.parent != 0 => self.put_dir_marker(&i.path, &attr).await?,
                Kind::Symlink | Kind::Special(_) => self.rewrite_node(&i, &attr).await?,
                _ => {}
            }
            let i = self.inode(ino)?;
            return Ok(self.attrs_of(&i));
        }
        let (of_arc, temporary) = match self.open_file(ino) {
            Some(of) => (of, false),
            None => (FileCell::new(self.load(&i, size == Some(0)).await?), true),
        };
        let mut of = of_arc.lock().await;
        if let Some(s) = size {
            self.truncate_locked(&i, &mut of, s).await?;
        }
        if let Some(m) = mode {
            of.meta.mode = Some(S_IFREG | (m & 0o7777));
            of.dirty = true;
        }
        if uid.is_some() {
            of.meta.uid = uid;
            of.dirty = true;
        }
        if gid.is_some() {
            of.meta.gid = gid;
            of.dirty = true;
        }
        if let Some(t) = mtime {
            let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
            of.meta.mtime = Some((d.as_secs() as i64, d.subsec_nanos()));
            of.dirty = true;
        }
        if temporary {
            self.commit_locked(&i, &mut of).await?;
            let i = self.inode(ino)?;
            return Ok(self.attrs_of(&i));
        }
        drop(of);
        self.open_attrs(&i).await.ok_or(Error::Stale)
    }

    /// At unmount or on a signal: uploads files with pending changes that no writer holds open
    /// any more (a close whose upload failed, retried once more). A file still open for writing is
    /// never published half-written: its upload is left to its writer's close.
    pub async fn flush_all(&self) -> Result<()> {
        let open: Vec<(u64, SharedFile, u32)> =
            self.open.lock().expect("open lock").iter().map(|(ino, e)| (*ino, e.file.clone(), e.writers)).collect();
        let mut first_err = None;
        for (ino, file, writers) in open {
            if writers > 0 {
                let path =
                    self.inodes.lock().expect("inodes lock").get(ino).map(|i| i.path.clone()).unwrap_or_default();
                tracing::warn!(path = %format!("/{path}"), "still open for writing at unmount: stored when its writer closes it");
                continue;
            }
            let mut of = file.lock().await;
            let res = match self.inode(ino) {
                Ok(i) => self.commit_locked(&i, &mut of).await,
                Err(_) => Ok(()),
            };
            if let Err(e) = res {
                self.log_error(&e, "flush_all", ino, None);
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// When the mount ends: cancels the uploads of files still open for writing, so no partial
    /// object and no unfinished multipart upload is left behind; returns how many there were.
    pub async fn abandon_open(&self) -> usize {
        let open: Vec<(u64, SharedFile)> =
            self.open.lock().expect("open lock").drain().map(|(ino, e)| (ino, e.file)).collect();
        let mut n = 0;
        for (ino, file) in open {
            let mut of = file.lock().await;
            if of.dirty && !of.unlinked {
                let path =
                    self.inodes.lock().expect("inodes lock").get(ino).map(|i| i.path.clone()).unwrap_or_default();
                tracing::warn!(path = %format!("/{path}"), "unmounted while open for writing: unsaved changes discarded, the previous version stays");
                n += 1;
            }
            if let Body::Streaming(u) = std::mem::replace(&mut of.body, Body::Clean) {
                u.abort().await;
            }
        }
        n
    }
}
