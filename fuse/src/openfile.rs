//! The state of one open inode, shared by all its handles: what its bytes are right now
//! (clean, streaming to the store, or staged in a local file), the writes held until the writes
//! before them arrive, the metadata to record with them, and the lock writes take.

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use shrinkfs_codec::FileMeta;

use crate::attrs::FileAttrs;
use crate::budget::Held;
use crate::objects::ObjectInfo;
use crate::stamp;
use crate::upload::Upload;

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
    /// [`OpenFile::dirty_bytes`] as of the last unlock: what a scrape reads without waiting.
    dirty: AtomicU64,
    /// Times the state was loaded anew from a version another mount stored, while only readers
    /// held it (see `Fs::renew_outdated`): a handle opened before the last time reads `ESTALE`.
    generation: AtomicU64,
    /// The object was found removed or replaced elsewhere while only readers held the state
    /// (see `Fs::renew_outdated`, `Fs::detach_replaced`): the name is no longer this state's, and
    /// no writer or change may use it (nothing would be stored).
    gone: std::sync::atomic::AtomicBool,
}

impl FileCell {
    /// The shared state of an inode now `of`.
    pub fn new(of: OpenFile) -> SharedFile {
        Arc::new(FileCell {
            state: tokio::sync::Mutex::new(of),
            writes: AtomicU32::new(0),
            progress: tokio::sync::Notify::new(),
            dirty: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            gone: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Locks the file's state.
    pub async fn lock(&self) -> FileGuard<'_> {
        FileGuard { guard: self.state.lock().await, dirty: &self.dirty }
    }

    /// Locks the file's state if no one holds it now.
    pub fn try_lock(&self) -> Option<FileGuard<'_>> {
        self.state.try_lock().ok().map(|guard| FileGuard { guard, dirty: &self.dirty })
    }

    /// Whether a write of this file is in progress (waiting for the lock, for a gap, or writing).
    pub fn writing(&self) -> bool {
        self.writes.load(Ordering::Acquire) > 0
    }

    /// Its generation (see the field); never waits.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The state was just loaded anew (while locked): handles opened before read `ESTALE`.
    pub fn renewed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Its object was found removed or replaced elsewhere (see the field).
    pub fn set_gone(&self) {
        self.gone.store(true, Ordering::Release);
    }

    /// Whether its object was found removed or replaced elsewhere.
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// Logical bytes not yet stored, as of the last time the file was unlocked (a write in
    /// progress shows once it ends). Never waits.
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty.load(Ordering::Relaxed)
    }

    /// Counts a write in progress until the returned guard is dropped, which wakes the writes
    /// waiting for a gap to be filled.
    pub fn begin_write(&self) -> WriteInProgress<'_> {
        self.writes.fetch_add(1, Ordering::AcqRel);
        WriteInProgress(self)
    }

    /// Locks the file for a write at `offset`. While the write lands past the end of a streaming
    /// upload (within `window`) and either `always` (the kernel's write-back cache is on) or
    /// another write of the file is in progress, it is first offered to `hold` (which keeps it
    /// until the writes before it arrive: then `None` is returned); if that cannot take it, it
    /// waits for the writes before it, at most `wait`.
    pub async fn lock_for_write(
        &self,
        offset: u64,
        always: bool,
        window: u64,
        wait: Duration,
        mut hold: impl FnMut(&mut OpenFile) -> bool,
    ) -> Option<FileGuard<'_>> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the check, so a write ending in between still wakes this one.
            let progress = self.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            let mut of = self.lock().await;
            let ahead = of.stream_end().is_some_and(|end| offset > end && offset - end <= window);
            let others = self.writes.load(Ordering::Acquire) > 1;
            if !ahead || !(always || others) || tokio::time::Instant::now() >= deadline {
                return Some(of);
            }
            if hold(&mut of) {
                return None;
            }
            drop(of);
            let _ = tokio::time::timeout_at(deadline, progress).await;
        }
    }
}

/// The lock of a [`FileCell`]: on release it records the file's dirty bytes for scrapes.
pub struct FileGuard<'a> {
    guard: tokio::sync::MutexGuard<'a, OpenFile>,
    dirty: &'a AtomicU64,
}

impl std::ops::Deref for FileGuard<'_> {
    type Target = OpenFile;

    fn deref(&self) -> &OpenFile {
        &self.guard
    }
}

impl std::ops::DerefMut for FileGuard<'_> {
    fn deref_mut(&mut self) -> &mut OpenFile {
        &mut self.guard
    }
}

impl Drop for FileGuard<'_> {
    fn drop(&mut self) {
        self.dirty.store(self.guard.dirty_bytes(), Ordering::Relaxed);
    }
}

/// A write of a [`FileCell`] in progress.
pub struct WriteInProgress<'a>(&'a FileCell);

impl Drop for WriteInProgress<'_> {
    fn drop(&mut self) {
        self.0.writes.fetch_sub(1, Ordering::AcqRel);
        self.0.progress.notify_waiters();
    }
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

/// Writes that landed past the end of a streaming upload — the kernel's write-back cache sends
/// several at once and the FUSE threads take them up in any order — held, with room in the memory
/// budget, until the writes before them arrive. They never overlap each other or the bytes
/// already streamed, so the order they are applied in does not matter.
#[derive(Debug, Default)]
pub struct Ahead {
    writes: BTreeMap<u64, (Bytes, Held)>,
    bytes: u64,
}

impl Ahead {
    /// Whether no write is held.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Where the last held write ends.
    pub fn end(&self) -> Option<u64> {
        self.writes.last_key_value().map(|(o, (b, _))| o + b.len() as u64)
    }

    /// Whether a held write overlaps `from..to`.
    pub fn overlaps(&self, from: u64, to: u64) -> bool {
        self.writes.range(..to).next_back().is_some_and(|(o, (b, _))| o + b.len() as u64 > from)
    }

    /// Holds `data`, written at `offset` (overlapping nothing held), with its room `room`.
    pub fn hold(&mut self, offset: u64, data: Bytes, room: Held) {
        self.bytes += data.len() as u64;
        self.writes.insert(offset, (data, room));
    }

    /// The held write that starts at `offset`, if any (still held).
    pub fn at(&self, offset: u64) -> Option<Bytes> {
        self.writes.get(&offset).map(|(b, _)| b.clone())
    }

    /// The first held write, if any (still held).
    pub fn first(&self) -> Option<(u64, Bytes)> {
        self.writes.first_key_value().map(|(o, (b, _))| (*o, b.clone()))
    }

    /// Lets go of every held write (the file was cut to nothing), giving back their room.
    pub fn clear(&mut self) {
        self.writes.clear();
        self.bytes = 0;
    }

    /// Lets go of the write held at `offset` (once applied), giving back its room.
    pub fn release(&mut self, offset: u64) {
        if let Some((b, _)) = self.writes.remove(&offset) {
            self.bytes -= b.len() as u64;
        }
    }
}

/// Write state of one inode, shared by all its handles.
#[derive(Debug)]
pub struct OpenFile {
    /// The bytes.
    pub body: Body,
    /// Writes past the end of a streaming upload, held until the writes before them arrive.
    pub ahead: Ahead,
    /// Metadata to record with the next object written.
    pub meta: FileMeta,
    /// Bytes or metadata differ from the store.
    pub dirty: bool,
    /// Unlinked while open: its bytes stay readable and writable here, nothing is uploaded.
    pub unlinked: bool,
    /// The object version it started from, or last committed (None: new file).
    pub base: Option<ObjectInfo>,
    /// A write the kernel sent from its page cache (the writer's own call had already
    /// returned) was refused: those bytes are gone, so the state is never stored or read
    /// (see `Fs::write_back_failed`).
    pub lost_write: bool,
}

impl OpenFile {
    /// Where the next write continues a sequential upload: the end of a streaming upload, or 0
    /// for an empty file not written yet.
    pub fn stream_end(&self) -> Option<u64> {
        match &self.body {
            Body::Streaming(u) if u.appendable() => Some(u.len()),
            Body::Clean if self.base.as_ref().is_none_or(|b| b.size() == 0) => Some(0),
            _ => None,
        }
    }

    /// Logical length now.
    pub fn len(&self) -> u64 {
        let body = match &self.body {
            Body::Clean => self.base.as_ref().map_or(0, |b| b.size()),
            Body::Streaming(u) => u.len(),
            Body::Staged { len, .. } => *len,
        };
        body.max(self.ahead.end().unwrap_or(0))
    }

    /// Whether it is empty now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Logical bytes not yet stored: a streaming upload's bytes, a staged file's length.
    pub fn dirty_bytes(&self) -> u64 {
        let body = match &self.body {
            Body::Clean => 0,
            Body::Streaming(up) => up.len(),
            Body::Staged { len, .. } => *len,
        };
        body + self.ahead.bytes()
    }

    /// The attributes `stored` (the inode's cached ones) as they are live: size, mode, owner and
    /// time as written here, no links once unlinked.
    pub fn live_attrs(&self, stored: FileAttrs) -> FileAttrs {
        let mut a = stored;
        a.size = self.len();
        if let Some(m) = self.meta.mode {
            a.perm = (m & 0o7777) as u16;
        }
        a.uid = self.meta.uid.unwrap_or(a.uid);
        a.gid = self.meta.gid.unwrap_or(a.gid);
        let m = &self.meta;
        a.mtime = m.mtime.map_or(a.mtime, stamp::time);
        a.ctime = m.ctime.map_or(a.ctime, stamp::time);
        a.atime = m.atime.map_or(a.atime, stamp::time);
        if self.unlinked {
            a.nlink = 0;
        }
        a
    }
}
