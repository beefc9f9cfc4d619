//! File contents: open handles, the per-inode write state (streaming upload, local staging file,
//! or clean), and the operations on them — open, create, read, write, flush, fsync, release, and
//! setattr (truncate, chmod, chown, utimens, all persisted with the object).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

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

/// An open file handle.
#[derive(Debug, Clone)]
pub struct Handle {
    /// Its inode.
    pub ino: u64,
    /// Opened for writing.
    pub write: bool,
    /// The object version a read-only handle reads (pinned at open).
    pub info: Option<ObjectInfo>,
    /// Where the last read ended, and how many frames to fetch ahead while reads stay sequential.
    pub readahead: (u64, usize),
}

/// What the bytes of an open file are, right now.
#[derive(Debug)]
pub enum Body {
    /// Exactly the object in the store.
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
    /// Handles open on it.
    pub handles: u32,
    /// Unlinked while open: nothing is uploaded any more.
    pub unlinked: bool,
    /// The object version it started from (None: new file).
    pub base: Option<ObjectInfo>,
}

fn now_meta() -> (i64, u32) {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    (d.as_secs() as i64, d.subsec_nanos())
}

impl OpenFile {
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

    fn open_file(&self, ino: u64) -> Option<Arc<tokio::sync::Mutex<OpenFile>>> {
        self.open.lock().expect("open lock").get(&ino).cloned()
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
        Some(a)
    }

    fn new_handle(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
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
        let meta =
            FileMeta { mode: Some(S_IFREG | (mode & 0o7777)), uid: Some(uid), gid: Some(gid), mtime: Some(now_meta()) };
        let attr = Attr { perm: Some((mode & 0o7777) as u16), uid: Some(uid), gid: Some(gid), ..Attr::empty() };
        let of = OpenFile {
            body: Body::Streaming(Box::new(self.new_upload(&rel)?)),
            meta,
            dirty: true,
            handles: 1,
            unlinked: false,
            base: None,
        };
        let i = self.inodes.lock().expect("inode lock").upsert(parent, name, Kind::File, attr, None, true);
        self.open.lock().expect("open lock").insert(i.ino, Arc::new(tokio::sync::Mutex::new(of)));
        let fh = self.new_handle(Handle { ino: i.ino, write: true, info: None, readahead: (0, 0) });
        Ok((self.attrs_of(&i), fh))
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
        if let Some(of) = self.open_file(ino) {
            let mut of = of.lock().await;
            of.handles += 1;
            if truncate && write {
                self.truncate_locked(&i, &mut of, 0).await?;
            }
            return Ok(self.new_handle(Handle { ino, write, info: None, readahead: (0, 0) }));
        }
        let info = self.reader.stat(&self.key(&i.path)).await?.ok_or(Error::NotFound)?;
        if !write {
            return Ok(self.new_handle(Handle { ino, write, info: Some(info), readahead: (0, 0) }));
        }
        let mut of = OpenFile {
            meta: info.meta(),
            body: Body::Clean,
            dirty: false,
            handles: 1,
            unlinked: false,
            base: Some(info),
        };
        if truncate {
            self.truncate_locked(&i, &mut of, 0).await?;
        }
        self.open.lock().expect("open lock").insert(ino, Arc::new(tokio::sync::Mutex::new(of)));
        Ok(self.new_handle(Handle { ino, write, info: None, readahead: (0, 0) }))
    }

    /// Reads up to `size` bytes at `offset`.
    pub async fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let h = self.handle(fh)?;
        if let Some(of) = self.open_file(h.ino) {
            let mut of = of.lock().await;
            if let Body::Streaming(_) = of.body {
                self.stage_locked(&mut of).await?;
            }
            match &of.body {
                Body::Staged { file, len } => {
                    let end = (offset + size as u64).min(*len);
                    if offset >= end {
                        return Ok(Vec::new());
                    }
                    let mut buf = vec![0u8; (end - offset) as usize];
                    file.read_exact_at(&mut buf, offset)?;
                    return Ok(buf);
                }
                Body::Clean => {
                    if let Some(base) = of.base.clone() {
                        drop(of);
                        return self.reader.read(&base, offset..offset + size as u64).await;
                    }
                    return Ok(Vec::new());
                }
                Body::Streaming(_) => unreachable!("staged above"),
            }
        }
        let info = match h.info {
            Some(info) => info,
            None => {
                let i = self.inode(h.ino)?;
                self.reader.stat(&self.key(&i.path)).await?.ok_or(Error::NotFound)?
            }
        };
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
    async fn stage_locked(&self, of: &mut OpenFile) -> Result<()> {
        match std::mem::replace(&mut of.body, Body::Clean) {
            Body::Staged { file, len } => of.body = Body::Staged { file, len },
            Body::Streaming(up) => {
                let file = self.staging_file()?;
                let len = up.recover_into(&file).await?;
                of.body = Body::Staged { file, len };
            }
            Body::Clean => {
                let file = self.staging_file()?;
                let mut len = 0;
                if let Some(base) = &of.base {
                    // Frame by frame, so a large file does not pass through memory at once.
                    let step = 8u64 << 20;
                    while len < base.size() {
                        let chunk = self.reader.read(base, len..len + step).await?;
                        file.write_all_at(&chunk, len)?;
                        len += chunk.len() as u64;
                    }
                }
                of.body = Body::Staged { file, len };
            }
        }
        Ok(())
    }

    /// Writes `data` at `offset`; returns the bytes written.
    pub async fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        let h = self.handle(fh)?;
        if !h.write {
            return Err(Error::Invalid("handle not open for writing".into()));
        }
        let of = self.open_file(h.ino).ok_or(Error::Stale)?;
        let mut of = of.lock().await;
        let i = self.inode(h.ino)?;
        if let Body::Clean = of.body
            && of.base.as_ref().is_none_or(|b| b.size() == 0)
            && offset == 0
        {
            of.body = Body::Streaming(Box::new(self.new_upload(&i.path)?));
        }
        let sequential = matches!(&of.body, Body::Streaming(u) if u.len() == offset);
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
            if let Body::Streaming(u) = std::mem::replace(&mut of.body, Body::Clean) {
                u.abort().await;
            }
            of.body = Body::Streaming(Box::new(self.new_upload(&i.path)?));
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
    /// this returns.
    async fn commit_locked(&self, i: &Inode, of: &mut OpenFile) -> Result<()> {
        if !of.dirty || of.unlinked {
            return Ok(());
        }
        let path = self.key(&i.path);
        let written: Written = match std::mem::replace(&mut of.body, Body::Clean) {
            Body::Streaming(up) => up.finish(&of.meta).await?,
            Body::Staged { file, len } => {
                let up = Upload::new(self.sink(), path.clone(), &self.cfg.encode, &self.cfg.staging_dir)?;
                let res = upload_file(up, &file, len, &of.meta).await;
                of.body = Body::Staged { file, len };
                res?
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

    /// close(): uploads everything written through any handle of the file.
    pub async fn flush(&self, fh: u64) -> Result<()> {
        let h = self.handle(fh)?;
        self.commit_ino(h.ino).await
    }

    /// fsync(): the same guarantee as flush.
    pub async fn fsync(&self, fh: u64) -> Result<()> {
        self.flush(fh).await
    }

    /// Drops a handle; the last one uploads anything still pending and frees the write state.
    pub async fn release(&self, fh: u64) -> Result<()> {
        let h = self.handles.lock().expect("handles lock").remove(&fh).ok_or(Error::Stale)?;
        let Some(of_arc) = self.open_file(h.ino) else {
            return Ok(());
        };
        let mut of = of_arc.lock().await;
        of.handles = of.handles.saturating_sub(1);
        if of.handles > 0 {
            return Ok(());
        }
        let res = match self.inode(h.ino) {
            Ok(i) => self.commit_locked(&i, &mut of).await,
            Err(_) => Ok(()),
        };
        if let Body::Streaming(u) = std::mem::replace(&mut of.body, Body::Clean) {
            u.abort().await;
        }
        self.open.lock().expect("open lock").remove(&h.ino);
        res
    }

    /// Drops local write state of an unlinked file; returns whether there was any.
    pub(crate) async fn discard_open(&self, ino: u64) -> bool {
        let Some(of) = self.open_file(ino) else {
            return false;
        };
        let mut of = of.lock().await;
        of.unlinked = true;
        if let Body::Streaming(u) = std::mem::replace(&mut of.body, Body::Clean) {
            u.abort().await;
        }
        true
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
                return Err(if i.kind == Kind::Dir { Error::IsDir } else { Error::Invalid("truncate a link".into()) });
            }
            // Directories have no object to carry metadata: kept in memory (docs/SEMANTICS.md).
            let mut t = self.inodes.lock().expect("inode lock");
            let cur = t.get_mut(ino).ok_or(Error::Stale)?;
            if let Some(m) = mode {
                cur.attr.perm = Some((m & 0o7777) as u16);
            }
            cur.attr.uid = uid.or(cur.attr.uid);
            cur.attr.gid = gid.or(cur.attr.gid);
            cur.attr.mtime = mtime.unwrap_or(cur.attr.mtime);
            return Ok(self.attrs_of(cur));
        }
        let (of_arc, temporary) = match self.open_file(ino) {
            Some(of) => (of, false),
            None => {
                let info = self.reader.stat(&self.key(&i.path)).await?.ok_or(Error::NotFound)?;
                let of = OpenFile {
                    meta: info.meta(),
                    body: Body::Clean,
                    dirty: false,
                    handles: 0,
                    unlinked: false,
                    base: Some(info),
                };
                (Arc::new(tokio::sync::Mutex::new(of)), true)
            }
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

    /// Uploads every file with pending changes (before unmounting).
    pub async fn flush_all(&self) -> Result<()> {
        let open: Vec<u64> = self.open.lock().expect("open lock").keys().copied().collect();
        let mut first_err = None;
        for ino in open {
            if let Err(e) = self.commit_ino(ino).await {
                e.log("flush_all");
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}
