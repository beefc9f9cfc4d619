//! The file writer: an open file's bytes on their way to the store — a streaming upload while
//! writes are sequential, a local staging file otherwise — and the commit that makes them an
//! object; also the small objects of links, special nodes and directory markers.
//!
//! No failure discards bytes: a failed upload leaves the file dirty with its content, so the next
//! fsync or close uploads it again; a failed move to a staging file leaves the content where it was.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use object_store::path::Path;
use shrinkfs_codec::dispatch::Dispatcher;
use shrinkfs_codec::format::{S_IFBLK, S_IFCHR, S_IFMT, S_IFREG};
use shrinkfs_codec::{Dictionary, EncodeConfig, FileMeta};

use crate::attrs::FileAttrs;
use crate::budget::Budget;
use crate::cache::{ObjectId, Parsed};
use crate::config::WriterConfig;
use crate::error::{Error, Result};
use crate::inode::Attr;
use crate::metrics::Metrics;
use crate::objects::{ObjectInfo, Reader};
use crate::openfile::{Body, FileCell, FileGuard, OpenFile};
use crate::recorded::Recorded;
use crate::stamp;
use crate::store::Bucket;
use crate::upload::{Sink, Taken, Upload, Written, upload_file};

/// Writes files and small objects to the bucket.
#[derive(Clone)]
pub struct FileWriter {
    bucket: Bucket,
    reader: Reader,
    dispatcher: Arc<Dispatcher>,
    budget: Budget,
    metrics: Arc<Metrics>,
    encode: EncodeConfig,
    dicts: Vec<Arc<Dictionary>>,
    cfg: WriterConfig,
}

impl FileWriter {
    /// A writer to `bucket` encoding as `encode`; `reader` stages stored bytes and learns the
    /// layouts of the objects written.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        bucket: Bucket,
        reader: Reader,
        dispatcher: Arc<Dispatcher>,
        budget: Budget,
        encode: EncodeConfig,
        dicts: Vec<Arc<Dictionary>>,
        cfg: WriterConfig,
    ) -> Self {
        let metrics = bucket.metrics.clone();
        FileWriter { bucket, reader, dispatcher, budget, metrics, encode, dicts, cfg }
    }

    /// Its configuration.
    pub fn config(&self) -> &WriterConfig {
        &self.cfg
    }

    fn sink(&self) -> Sink {
        Sink {
            store: self.bucket.store.clone(),
            dispatcher: self.dispatcher.clone(),
            budget: self.budget.clone(),
            metrics: self.metrics.clone(),
            tracked: (self.bucket.multipart.clone())
                .filter(|_| self.bucket.tracks_uploads)
                .map(|mp| (mp, self.bucket.upload_markers())),
            local: self.bucket.local.clone(),
            sizes: self.cfg.upload,
            record: self.encode.key.is_none(),
            retry_timeout: self.bucket.retry_timeout,
        }
    }

    fn upload(&self, key: Path) -> Result<Upload> {
        Upload::new(self.sink(), key, &self.encode, &self.cfg.staging_dir)
    }

    /// A streaming upload of the file at path `rel`.
    pub fn new_upload(&self, rel: &str) -> Result<Upload> {
        self.upload(self.bucket.key(rel))
    }

    fn staging_file(&self) -> Result<File> {
        Ok(tempfile::tempfile_in(&self.cfg.staging_dir)?)
    }

    /// Fails with `ENOSPC` at once where the staging directory has less room than `bytes`, which
    /// staging a stored file takes (its holes as written zeros): rather than after filling the
    /// disk, with the caller waiting in an uninterruptible request all along (a 1 TiB sparse
    /// file took minutes). Other writers may take the room meanwhile: the writes still check.
    fn check_staging_room(&self, bytes: u64) -> Result<()> {
        let Ok(st) = nix::sys::statvfs::statvfs(&self.cfg.staging_dir) else { return Ok(()) };
        let free = st.blocks_available().saturating_mul(st.fragment_size());
        if st.blocks() > 0 && bytes > free {
            return Err(Error::Local(std::io::Error::from_raw_os_error(libc::ENOSPC)));
        }
        Ok(())
    }

    /// The state of file `rel` not yet open: the object as stored now. A damaged object can still
    /// be opened to be `replace`d (truncated); it then records `fallback`'s mode and owner.
    /// `known` is the version the inode describes, read whole by a lookup less than the `Duration`
    /// ago or `confirmed` current within the metadata TTL: neither then asks the store again if
    /// what is kept here serves every read of it.
    pub async fn load(
        &self,
        rel: &str,
        replace: bool,
        fallback: &FileAttrs,
        known: Option<(&str, Duration)>,
        confirmed: bool,
    ) -> Result<OpenFile> {
        let key = self.bucket.key(rel);
        // The version a lookup just confirmed, read whole by it; or one confirmed lately whose
        // layout and every frame are kept here (a small file written or read here before).
        let recent = known.and_then(|(etag, age)| {
            let whole = self.reader.recent_whole(&key, etag, if confirmed { Duration::MAX } else { age });
            whole.or_else(|| confirmed.then(|| self.reader.kept(&key, etag, fallback.mtime)).flatten())
        });
        let stat = async {
            match recent {
                Some(info) => Ok(Some(info)),
                None => self.reader.stat_for_reading(&key).await,
            }
        };
        let base = match stat.await {
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
            None => FileMeta {
                mode: Some(S_IFREG | u32::from(fallback.perm)),
                uid: Some(fallback.uid),
                gid: Some(fallback.gid),
                mtime: Some(stamp::now()),
                ctime: Some(stamp::now()),
                atime: Some(stamp::now()),
            },
        };
        Ok(OpenFile {
            meta,
            body: Body::Clean,
            ahead: Default::default(),
            dirty: false,
            unlinked: false,
            base,
            lost_write: false,
        })
    }

    /// Locks `file` for a write at `offset`, waiting briefly for writes before it as
    /// [`FileCell::lock_for_write`] says.
    /// `None`: the write of `data` was held, as [`Self::hold`] says.
    pub async fn lock<'a>(&self, file: &'a FileCell, offset: u64, data: &[u8]) -> Option<FileGuard<'a>> {
        let c = &self.cfg;
        let hold = |of: &mut OpenFile| self.hold(of, offset, data);
        file.lock_for_write(offset, c.writeback_cache, c.reorder_window, c.reorder_wait, hold).await
    }

    /// Holds a write of `data` that lands past the end of `of`'s streaming upload until the
    /// writes before it arrive, so it returns at once: when it overlaps nothing held, the held
    /// bytes stay within the reorder window and the memory budget has room for a copy of it now
    /// within its first half (held writes never take the room the writes they wait for need).
    /// Returns whether it did.
    fn hold(&self, of: &mut OpenFile, offset: u64, data: &[u8]) -> bool {
        let n = data.len() as u64;
        let ahead = of.stream_end().is_some_and(|end| offset > end);
        if !ahead
            || of.ahead.bytes() + n > self.cfg.reorder_window
            || of.ahead.overlaps(offset, offset + n)
            || !self.budget.within_half(n)
        {
            return false;
        }
        let Some(room) = self.budget.try_take(n) else { return false };
        of.ahead.hold(offset, Bytes::copy_from_slice(data), room);
        of.dirty = true;
        let now = Some(stamp::now());
        (of.meta.mtime, of.meta.ctime) = (now, now);
        true
    }

    /// Writes the bytes held in `of.ahead` into its staging file, each let go once written.
    fn apply_ahead(of: &mut OpenFile) -> Result<()> {
        while let Some((offset, bytes)) = of.ahead.first() {
            let Body::Staged { file, len } = &mut of.body else { unreachable!("applied once staged") };
            write_staged(file, len, offset, &bytes)?;
            of.ahead.release(offset);
        }
        Ok(())
    }

    /// Moves an open file's bytes into a local staging file (from the upload so far or the
    /// object). On failure the bytes stay where they were.
    pub async fn stage(&self, of: &mut OpenFile) -> Result<()> {
        self.stage_body(of).await?;
        Self::apply_ahead(of)
    }

    async fn stage_body(&self, of: &mut OpenFile) -> Result<()> {
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
                    self.check_staging_room(base.size())?;
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

    /// Writes `data` at `offset` of file `rel`, locked as `of`: appended to its streaming upload
    /// when it continues it (answering `taken` once the bytes are taken), else written to a
    /// staging file.
    pub async fn write(
        &self,
        of: &mut OpenFile,
        rel: &str,
        offset: u64,
        data: &[u8],
        taken: &mut Taken<'_>,
    ) -> Result<()> {
        if let Body::Clean = of.body
            && of.base.as_ref().is_none_or(|b| b.size() == 0)
            && offset == 0
        {
            of.body = Body::Streaming(Box::new(self.new_upload(rel)?));
        }
        let end = offset + data.len() as u64;
        let sequential = matches!(&of.body, Body::Streaming(u) if u.appendable() && u.len() == offset);
        if !sequential || of.ahead.overlaps(offset, end) {
            self.stage(of).await?;
        }
        match &mut of.body {
            Body::Streaming(u) => {
                u.write(data, taken).await?;
                // Writes held for this one follow it; one that fails stays held (this write's
                // bytes are in: its error is not this write's).
                while let Some(next) = of.ahead.at(u.len()) {
                    if u.write(&next, &mut Taken::default()).await.is_err() {
                        break;
                    }
                    of.ahead.release(u.len() - next.len() as u64);
                }
            }
            Body::Staged { file, len } => write_staged(file, len, offset, data)?,
            Body::Clean => unreachable!("streaming or staged above"),
        }
        of.dirty = true;
        let now = Some(stamp::now());
        (of.meta.mtime, of.meta.ctime) = (now, now);
        Ok(())
    }

    /// Truncates (or extends) file `rel`, locked as `of`, to `size`.
    pub async fn truncate(&self, of: &mut OpenFile, rel: &str, size: u64) -> Result<()> {
        if of.len() == size && !matches!(of.body, Body::Clean) {
            return Ok(());
        }
        if size == 0 {
            let fresh = Body::Streaming(Box::new(self.new_upload(rel)?));
            if let Body::Streaming(u) = std::mem::replace(&mut of.body, fresh) {
                u.abort().await;
            }
            // Writes held past a gap were cut away with the rest.
            of.ahead.clear();
        } else {
            self.stage(of).await?;
            if let Body::Staged { file, len } = &mut of.body {
                file.set_len(size)?;
                *len = size;
            }
        }
        of.dirty = true;
        let now = Some(stamp::now());
        (of.meta.mtime, of.meta.ctime) = (now, now);
        Ok(())
    }

    /// Uploads the pending bytes and metadata of file `rel`, locked as `of`; the object is complete
    /// in the store when this returns, and its version is returned (`None`: nothing was pending).
    /// On failure the file stays dirty with all its bytes, so a retry uploads them.
    pub async fn commit(&self, of: &mut OpenFile, rel: &str) -> Result<Option<ObjectInfo>> {
        if !of.dirty || of.unlinked {
            return Ok(None);
        }
        if !of.ahead.is_empty() {
            // Writes still held have a gap before them: the file has a hole.
            self.stage(of).await?;
        }
        let path = self.bucket.key(rel);
        let written: Written = match &mut of.body {
            Body::Streaming(up) if up.path() == &path => {
                let w = up.finish(&of.meta).await?;
                of.body = Body::Clean;
                w
            }
            Body::Streaming(_) => {
                // Renamed while written: the bytes go to the new name.
                self.stage(of).await?;
                return Box::pin(self.commit(of, rel)).await;
            }
            Body::Staged { file, len } => {
                let up = self.upload(path.clone())?;
                upload_file(up, file, *len, &of.meta).await?
            }
            Body::Clean => {
                // Only metadata changed: rewrite the object's bytes with the new metadata.
                self.stage(of).await?;
                return Box::pin(self.commit(of, rel)).await;
            }
        };
        of.dirty = false;
        let etag: Arc<str> = written.put.e_tag.clone().unwrap_or_default().into();
        let id = ObjectId { key: path.as_ref().into(), etag };
        let ctx = written
            .layout
            .open(self.encode.key.as_ref(), &self.dicts)
            .map_err(|e| Error::Codec { key: path.to_string(), source: e })?;
        // A small file's one frame is kept decoded too: reading back the version just written
        // (a build's outputs, `cp` then `cat`) needs no request while it is confirmed current.
        let one_frame = matches!(&written.layout.entries[..], [e] if written.raw.as_ref().is_some_and(|r| r.len() == e.raw_len as usize));
        let frames = written.layout.entries.len() as u32;
        let parsed = Parsed::Framed { layout: Arc::new(written.layout), ctx: Arc::new(ctx) };
        if written.put.e_tag.is_some() {
            // Frames cached under this version's id are not this version's: a store whose ETags
            // are not unique (a local directory's inode, mtime and size, an inode reused within
            // one timestamp tick) can name two versions alike.
            for f in 0..frames {
                self.reader.chunks.forget(&id, f);
            }
            self.reader.layouts.insert(id.clone(), parsed.clone());
            if let Some(raw) = written.raw.filter(|_| one_frame) {
                self.reader.chunks.insert(&id, 0, raw);
            }
        }
        let info =
            ObjectInfo { id, path, stored: written.stored, last_modified: SystemTime::now(), parsed, whole: None };
        // The version it replaces is no one's to read through the cache any more (a handle
        // opened on it keeps its own parsed layout).
        if let Some(old) = of.base.replace(info.clone())
            && old.id != info.id
        {
            self.reader.layouts.forget(&old.id);
        }
        tracing::debug!(path = rel, stored = written.stored, "committed");
        Ok(Some(info))
    }

    /// Writes the small object at path `rel` (a symbolic link, a special node, a directory's
    /// marker): `data` with metadata `mode` and the owner and time of `attr`.
    pub async fn put_node(&self, rel: &str, mode: Option<u32>, attr: &Attr, data: &[u8]) -> Result<()> {
        let meta = FileMeta {
            mode,
            uid: attr.uid,
            gid: attr.gid,
            mtime: Some(stamp::stamp(attr.mtime)),
            ctime: Some(stamp::stamp(attr.ctime)),
            atime: Some(stamp::stamp(attr.atime)),
        };
        let obj = shrinkfs_codec::encode_all_with(&self.encode, data, &meta).map_err(Error::Config)?;
        let mut opts = object_store::PutOptions::default();
        if self.encode.key.is_none() {
            // A device's number (its data) is recorded too, so a HEAD tells all of a node.
            let device = mode.is_some_and(|m| matches!(m & S_IFMT, S_IFCHR | S_IFBLK));
            let rdev = <[u8; 8]>::try_from(data).ok().filter(|_| device).map_or(0, |b| u64::from_le_bytes(b) as u32);
            let r = Recorded { size: data.len() as u64, stored: obj.len() as u64, meta, rdev, codec: String::new() };
            opts.attributes = r.attributes();
        }
        self.bucket.store.put_opts(&self.bucket.key(rel), obj.into(), opts).await?;
        self.metrics.object_written(data.len() as u64);
        Ok(())
    }
}

/// Writes `data` at `offset` of staged file `file`, `len` bytes long so far, and grows `len`. A
/// write that fails (a full staging disk) leaves the file as long as it was: what it wrote past
/// the end is cut away, so a later write further out cannot show those bytes where a hole reads
/// as zeros.
fn write_staged(file: &File, len: &mut u64, offset: u64, data: &[u8]) -> std::io::Result<()> {
    let end = offset + data.len() as u64;
    if let Err(e) = file.write_all_at(data, offset) {
        if end > *len {
            let _ = file.set_len(*len);
        }
        return Err(e);
    }
    *len = (*len).max(end);
    Ok(())
}
