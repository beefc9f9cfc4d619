//! The file operations of the core: create, open, read, write, flush, fsync, release, setattr
//! (truncate, chmod, chown, utimens, all persisted with the object), and the uploads at unmount —
//! the open handles, the writer and the reader coordinated for each.
//!
//! Only a writer's flush or fsync publishes: a reader's close never commits another process's
//! partial rewrite. A failed upload leaves the file dirty with all its bytes (see `writer`).

use std::os::unix::fs::FileExt;
use std::time::SystemTime;

use bytes::Bytes;
use shrinkfs_codec::FileMeta;
use shrinkfs_codec::format::S_IFREG;

use super::{FileAttrs, Fs, SetAttr};
use crate::attrs::attr_from_object;
use crate::error::{Error, Result};
use crate::handles::Opening;
use crate::inode::{Attr, Inode, Kind, join};
use crate::namespace::check_name;
use crate::openfile::{Body, FileCell, OpenFile};
use crate::readahead::max_frames;
use crate::stamp;
use crate::upload::Taken;

/// How long a failed request of an unmount must have gone unanswered for the store to be taken
/// as down (see `Fs::flush_all`).
const UNANSWERED: std::time::Duration = std::time::Duration::from_secs(3);

/// How long after that the unmount's later passes (a busy mount's unmount tries every second)
/// try nothing more, before they ask the store again.
const UNANSWERED_FOR: std::time::Duration = std::time::Duration::from_secs(60);

impl Fs {
    /// Creates and opens a new, empty file.
    pub async fn create(&self, parent: u64, name: &str, mode: u32, uid: u32, gid: u32) -> Result<(FileAttrs, u64)> {
        self.writable()?;
        check_name(name)?;
        let dir = self.names.inode(parent)?;
        if dir.kind != Kind::Dir {
            return Err(Error::NotDir);
        }
        let rel = join(&dir.path, name);
        self.names.check_key_len(&rel)?;
        let (gid, _) = self.names.inherited_group(&dir, gid);
        let attr = Attr { perm: Some((mode & 0o7777) as u16), uid: Some(uid), gid: Some(gid), ..Attr::empty() };
        let now = Some(stamp::stamp(attr.mtime));
        let meta = FileMeta {
            mode: Some(S_IFREG | (mode & 0o7777)),
            uid: Some(uid),
            gid: Some(gid),
            mtime: now,
            ctime: now,
            atime: now,
        };
        let of = OpenFile {
            body: Body::Streaming(Box::new(self.writer.new_upload(&rel)?)),
            ahead: Default::default(),
            meta,
            dirty: true,
            unlinked: false,
            base: None,
            lost_write: false,
        };
        let i = self.names.created(parent, name, Kind::File, attr, None);
        let file = self.handles.attach_new(i.ino, of);
        let fh = self.handles.new_handle(i.ino, true, file);
        self.names.entries_changed(parent);
        Ok((self.names.attrs_of(&i), fh))
    }

    /// The state of file `i` not yet open: the object as stored now (`replace`: a damaged object
    /// may still be opened, to be replaced).
    async fn load(&self, i: &Inode, write: bool, replace: bool) -> Result<OpenFile> {
        // A small object the lookup read whole within the metadata TTL, if it is the version the
        // inode describes now, is not asked for again. Read now: the caller holds the inode's
        // opening lock, so every commit made here before is in it (`i` may predate one).
        let now = self.names.inode(i.ino).ok();
        let etag = now.as_ref().and_then(|n| n.attr.etag.as_deref());
        let recent = etag.map(|e| (e, self.cfg.namespace.metadata_ttl));
        // The version the store was last seen to hold within the metadata TTL (line 5 of
        // SEMANTICS "Consistency": an open after the TTL reads the newest). A writer starts from
        // the newest the store holds, as it always did.
        let confirmed = !write && now.as_ref().is_some_and(|n| self.names.trusted(n));
        let fallback = self.names.attrs_of(now.as_ref().unwrap_or(i));
        self.writer.load(&i.path, replace, &fallback, recent, confirmed).await
    }

    /// Before a writer's open of file `i` joins the state other handles of it share, or a
    /// change of its attributes applies to that state: when only readers hold it, it changed
    /// nothing and the file's attributes are past the metadata TTL, the store is asked (a HEAD).
    /// - Another version there (another mount replaced the file): the state is loaded anew from
    ///   it, in place, so the writer or the change starts from the new version and never stores
    ///   the old one over it; the handles open before read `ESTALE` from then on (line 5 of
    ///   "Consistency": one version per handle).
    /// - No file there (another mount removed it): the name is forgotten and the readers' state
    ///   is unlinked (nothing is stored from it any more), as if removed here.
    ///
    /// Returns whether either happened (now or before): the caller then fails with `ESTALE`, so the kernel
    /// looks the file up again (learning the new size, or that the name is gone) and retries.
    /// When the store cannot be asked or read, the caller fails rather than act on the old
    /// version. The caller holds `ino`'s opening lock (`_held`), so no writer attaches meanwhile.
    /// Not with `--writeback-cache`, where the kernel keeps its own size of a cached file (for
    /// buckets only this mount writes).
    async fn renew_outdated(&self, i: &Inode, _held: &Opening<'_>) -> Result<bool> {
        // Found removed or replaced elsewhere before: nothing may be stored from it.
        if self.handles.file(i.ino).is_some_and(|f| f.is_gone()) {
            return Ok(true);
        }
        if !self.may_be_outdated(i) {
            return Ok(false);
        }
        let Some(file) = self.handles.file(i.ino) else { return Ok(false) };
        let mut of = file.lock().await;
        let Some(base) = self.read_only_base(i.ino, &of) else { return Ok(false) };
        let now = self.names.inode(i.ino)?;
        if now.kind != Kind::File || self.names.trusted(&now) {
            return Ok(false);
        }
        let Some((stored, since)) = self.stored_other_than(&now, &base.id.etag).await? else { return Ok(false) };
        let stored = match stored {
            Some((Kind::File, attr)) => attr,
            Some(_) => return Ok(false),
            None => {
                of.unlinked = true;
                file.set_gone();
                self.names.table().observe_gone(now.parent, &now.name, since);
                self.names.removed(now.parent, &now.name, true);
                tracing::debug!(ino = i.ino, path = now.path, "open file removed elsewhere");
                return Ok(true);
            }
        };
        // From the store itself: nothing kept here is of the new version.
        *of = self.writer.load(&now.path, false, &self.names.attrs_of(&now), None, false).await?;
        file.renewed();
        // Known fresh once the state holds the version the HEAD named (a later one that the load
        // found instead is asked for again).
        if of.base.as_ref().map(|b| &*b.id.etag) == stored.etag.as_deref() {
            self.names.table().observe(now.parent, &now.name, Kind::File, stored, false, since);
        }
        // The kernel's pages are the old version's: the next open drops them.
        self.pages.changed(i.ino);
        tracing::debug!(ino = i.ino, path = now.path, "open file replaced elsewhere: loaded anew");
        Ok(true)
    }

    /// Asks the store (a HEAD) for file `now`'s version. `None` when it is still version `etag`
    /// (the table then trusts it anew); else what the store holds instead (nothing, another
    /// version, another kind), with the table's change count from before the HEAD.
    async fn stored_other_than(&self, now: &Inode, etag: &str) -> Result<Option<(Option<(Kind, Attr)>, u64)>> {
        let since = self.names.table().changes();
        let stored = self.names.stat_attrs(&self.names.key(&now.path), Some((now.kind, &now.attr))).await?;
        if let Some((Kind::File, attr)) = &stored
            && attr.etag.as_deref().is_none_or(|e| e == etag)
        {
            self.names.table().observe(now.parent, &now.name, Kind::File, attr.clone(), false, since);
            return Ok(None);
        }
        Ok(Some((stored, since)))
    }

    /// Whether file `i` is held open here by readers alone and its attributes are past the
    /// metadata TTL, so the store may hold another version (not with `--writeback-cache`, where
    /// the kernel keeps its own size of a cached file).
    pub(super) fn may_be_outdated(&self, i: &Inode) -> bool {
        i.kind == Kind::File
            && !self.cfg.writer.writeback_cache
            && self.handles.is_open(i.ino)
            && !self.names.trusted(i)
            && self.handles.writers(i.ino) == 0
    }

    /// The stored version `of` (the state of `ino`, locked) holds, when only readers hold it and
    /// nothing here differs from that version (bytes kept staged after a commit are its own).
    fn read_only_base(&self, ino: u64, of: &OpenFile) -> Option<crate::objects::ObjectInfo> {
        let untouched = !matches!(of.body, Body::Streaming(_)) && !of.dirty && of.ahead.is_empty() && !of.unlinked;
        of.base.clone().filter(|b| untouched && !b.id.etag.is_empty() && self.handles.writers(ino) == 0)
    }

    /// Before a lookup of `name` in `parent` answers with the inode of a file that only readers
    /// hold here (past the metadata TTL; see [`Self::may_be_outdated`]): the store is asked (a
    /// HEAD), and when it holds another version, or none, the name leaves that inode, as if the
    /// file had been replaced or removed here. The readers keep their inode and their version
    /// (line 5 of "Consistency": one version per handle), so the kernel's pages and a program's
    /// mapping of it stay whole; the lookup then answers with a new inode for the new version
    /// (or finds no file), whose opens read it. Nothing is stored from the old inode any more:
    /// a writer or a change that reaches it without a lookup gets `ESTALE`.
    ///
    /// Returns whether the name moved on. The caller holds no `moving` lock (this takes it).
    pub(super) async fn detach_replaced(&self, parent: u64, name: &str) -> Result<bool> {
        let Some(i) = self.names.table().child(parent, name).cloned() else { return Ok(false) };
        if !self.may_be_outdated(&i) {
            return Ok(false);
        }
        // As a writer's open: no writer attaches, and no directory moves, meanwhile.
        let _moving = self.moving.read().await;
        let _held = self.handles.opening(i.ino).await;
        let Some(file) = self.handles.file(i.ino).filter(|f| !f.is_gone()) else { return Ok(false) };
        // The file's lock is not held across the HEAD: its readers read on meanwhile.
        let base = match self.read_only_base(i.ino, &*file.lock().await) {
            Some(b) => b.id.etag,
            None => return Ok(false),
        };
        let now = self.names.inode(i.ino)?;
        if now.parent != parent || now.name != name || self.names.trusted(&now) {
            return Ok(false);
        }
        let Some((stored, since)) = self.stored_other_than(&now, &base).await? else { return Ok(false) };
        let mut of = file.lock().await;
        // Still only readers of that version (no writer could attach: `_held`).
        if self.read_only_base(i.ino, &of).is_none_or(|b| b.id.etag != base) {
            return Ok(false);
        }
        of.unlinked = true;
        file.set_gone();
        let mut t = self.names.table();
        if t.child(parent, name).is_some_and(|c| c.ino == i.ino) {
            t.remove_name(parent, name);
            // The new version is known as of the HEAD: the lookup answers from it. Anything else
            // there (none, a directory, a link) the lookup asks for itself.
            if let Some((Kind::File, attr)) = stored {
                t.observe(parent, name, Kind::File, attr, false, since);
            }
        }
        tracing::debug!(ino = i.ino, path = now.path, "open file replaced or removed elsewhere: its name moves on");
        Ok(true)
    }

    /// Whether the kernel was told another size of `ino` (of an older version, for the entry TTL)
    /// than `fresh`, just loaded when the table's change count was `since`, has: an append would
    /// land at that size, a read stop there. The table then describes `fresh`'s version, and the
    /// open fails once with `ESTALE`, so the kernel looks the file up again and learns this
    /// version's size first (see `renew_outdated`).
    fn told_another_size(&self, ino: u64, fresh: &OpenFile, since: u64) -> Result<bool> {
        let Some(b) = &fresh.base else { return Ok(false) };
        let now = self.names.inode(ino)?;
        if now.fetched.is_none() || now.parent == 0 || now.attr.size == b.size() {
            return Ok(false);
        }
        let (kind, attr) = attr_from_object(b);
        self.names.table().observe(now.parent, &now.name, kind, attr, false, since);
        Ok(true)
    }

    /// Opens a file; `truncate` (O_TRUNC) empties it.
    pub async fn open(&self, ino: u64, write: bool, truncate: bool) -> Result<u64> {
        let i = self.names.inode(ino)?;
        if i.kind == Kind::Dir {
            return Err(Error::IsDir);
        }
        if write {
            self.writable()?;
        }
        // A writer holds the inode's opening lock until it has attached and knows its generation
        // (no renew runs under it), and holds store changes off, as every change does (a
        // directory's rename moves no object under the renew's HEAD).
        let mut held = None;
        let moving = if write { Some(self.moving.read().await) } else { None };
        if write {
            let opening = held.insert(self.handles.opening(ino).await);
            if self.renew_outdated(&i, opening).await? {
                return Err(Error::Stale);
            }
        }
        // A reader's open that reaches a file only readers hold, past the TTL, without the
        // kernel's lookup (its entry outlived the TTL the mount counts): asked as that lookup
        // would; a file replaced or removed elsewhere fails once with ESTALE, and the kernel looks
        // the name up again and retries.
        if !write && self.may_be_outdated(&i) && self.detach_replaced(i.parent, &i.name).await? {
            return Err(Error::Stale);
        }
        // The version loaded from the store, when this open did (no other handle was open).
        let mut loaded = None;
        let file = match self.handles.attach(ino, write, None) {
            Some(f) => f,
            None => {
                if held.is_none() {
                    held = Some(self.handles.opening(ino).await);
                }
                match self.handles.attach(ino, write, None) {
                    Some(f) => f,
                    // A file that lost its name and is no longer open (see `setattr`).
                    None if i.kind == Kind::File && self.names.inode(ino)?.parent == 0 => return Err(Error::Stale),
                    None => {
                        let since = self.names.table().changes();
                        let fresh = match self.load(&i, write, write && truncate).await {
                            // Removed elsewhere while the name was trusted here: it is forgotten,
                            // and the open fails once with ESTALE, so the kernel looks the name up
                            // again and finds no file (ENOENT), or makes one for an `O_CREAT`
                            // open (the kernel keeps that flag out of the open it sends).
                            Err(Error::NotFound) => {
                                // (Only while the name is still this file's: it may have been
                                // renamed, or made anew, here meanwhile.)
                                if self.names.table().child(i.parent, &i.name).is_some_and(|c| c.ino == ino) {
                                    self.names.table().observe_gone(i.parent, &i.name, since);
                                    self.names.removed(i.parent, &i.name, true);
                                }
                                return Err(Error::Stale);
                            }
                            other => other?,
                        };
                        if !(write && truncate) && self.told_another_size(ino, &fresh, since)? {
                            return Err(Error::Stale);
                        }
                        loaded = fresh.base.as_ref().map(|b| b.id.etag.clone());
                        self.handles.attach(ino, write, Some(fresh)).expect("fresh state given")
                    }
                }
            }
        };
        let fh = self.handles.new_handle(ino, write, file.clone());
        self.handles.set_generation(fh, file.generation());
        // Let go before anything below that may take them again (a failed truncate's release).
        drop(held);
        drop(moving);
        if write {
            self.pages.changed(ino);
        } else if loaded.is_some_and(|e| self.pages.opened_clean(ino, &e)) {
            self.handles.set_keep_cache(fh);
        }
        if truncate && write {
            let mut of = file.lock().await;
            if let Err(e) = self.writer.truncate(&mut of, &i.path, 0).await {
                drop(of);
                let _ = self.release(fh).await;
                return Err(e);
            }
        }
        Ok(fh)
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

    /// Reads up to `size` bytes at `offset`.
    pub async fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Bytes> {
        let h = self.handles.handle(fh)?;
        let mut of = h.file.lock().await;
        if h.file.generation() != h.generation {
            return Err(Error::Stale);
        }
        if of.lost_write {
            return Err(Error::LostWrite);
        }
        if matches!(of.body, Body::Streaming(_)) || !of.ahead.is_empty() {
            if offset >= of.len() {
                // The kernel's write-back asks for the page at the end of a file being written.
                return Ok(Bytes::new());
            }
            self.writer.stage(&mut of).await?;
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
        // Sequential readers get frames fetched ahead in the background (see `readahead`),
        // asked for before this read's own frames are waited for, so the cores decode those
        // while this read's are fetched and decoded.
        let c = &self.cfg.reader;
        let max = max_frames(c.cache_bytes, self.cfg.encode.frame_size, c.max_readahead_frames);
        let step = self.handles.read_ahead(fh, offset, end, max);
        if step.window > 0 {
            self.reader.prefetch(&info, end, step.window);
        }
        let data = self.reader.read(&info, offset..end).await;
        // (After the read, failed or not: what was passed lies before the previous read, which
        // the kernel may still have in flight beside this one until this one is answered.)
        if !step.passed.is_empty() {
            self.reader.passed(&info, step.passed);
        }
        // The handle's version is gone from the store (removed or replaced elsewhere): the
        // handle is stale, as for a version replaced (a failed `If-Match`), not a missing name.
        match data {
            Err(Error::Store(object_store::Error::NotFound { .. })) => Err(Error::Stale),
            other => other,
        }
    }

    /// Writes `data` at `offset`; returns the bytes written. A write that lands a little past the
    /// end of a streaming upload while other writes of the file are in progress (the kernel's
    /// write-back sends several at once) waits for them, briefly, so the upload keeps streaming.
    /// An error leaves the file as it was, except a full staging disk while a sequential upload
    /// spills (see `Upload::write`).
    pub async fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        self.write_answering(fh, offset, data, &mut Taken::default()).await
    }

    /// [`Self::write`], answering `taken` as soon as nothing can fail the write any more (a
    /// sequential write into a streaming upload: before its bytes are copied), so the kernel can
    /// be answered early. The file stays locked until this returns.
    pub async fn write_answering(&self, fh: u64, offset: u64, data: &[u8], taken: &mut Taken<'_>) -> Result<u32> {
        let h = self.handles.handle(fh)?;
        if !h.write {
            return Err(Error::NotWritable);
        }
        let _writing = h.file.begin_write();
        // None: held until the writes before it arrive (see `Ahead`).
        if let Some(mut of) = self.writer.lock(&h.file, offset, data).await {
            if h.file.generation() != h.generation {
                return Err(Error::Stale);
            }
            // (Nothing of it will be stored: its bytes need no room.)
            if of.lost_write {
                return Err(Error::LostWrite);
            }
            let i = self.names.inode(h.ino)?;
            self.writer.write(&mut of, &i.path, offset, data, taken).await?;
        }
        Ok(data.len() as u32)
    }

    /// `fallocate(2)` through handle `fh`. A bucket has no space to set aside, so the default
    /// mode extends the file with zeros to `offset + len` where it is shorter (what glibc's
    /// `posix_fallocate` does where the filesystem does not), and `FALLOC_FL_KEEP_SIZE` alone
    /// changes nothing; punching, zeroing, collapsing or inserting ranges is not supported.
    pub async fn fallocate(&self, fh: u64, offset: u64, len: u64, mode: i32) -> Result<()> {
        if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
            return Err(Error::Unsupported("fallocate modes other than allocating (punch, zero, collapse, insert)"));
        }
        let h = self.handles.handle(fh)?;
        if !h.write {
            return Err(Error::NotWritable);
        }
        // The kernel refuses ranges past the largest file size (EFBIG) before asking.
        let end = offset.saturating_add(len);
        if mode != 0 {
            return Ok(());
        }
        let _writing = h.file.begin_write();
        let mut of = h.file.lock().await;
        if h.file.generation() != h.generation {
            return Err(Error::Stale);
        }
        if end <= of.len() {
            return Ok(());
        }
        let i = self.names.inode(h.ino)?;
        self.writer.truncate(&mut of, &i.path, end).await
    }

    /// Marks handle `fh`'s file as missing bytes that a write from the kernel's page cache (the
    /// write-back cache, or a mapping's pages) brought and that were refused (a full bucket or
    /// staging disk): the writer's own call returned long ago and the kernel does not send them
    /// again, so the file as the mount holds it is not the file written. It is never stored (its
    /// close and fsync fail with `EIO`, and its previous version stays) nor read; once its last
    /// handle closes it is dropped, and counted as lost in the mount's exit status.
    /// (`e`: why the write failed; one that says the handle or the mount takes no writes, or a
    /// handle of a state since replaced, marks nothing.)
    pub async fn write_back_failed(&self, fh: u64, e: &Error) {
        if matches!(e, Error::Stale | Error::NotWritable | Error::ReadOnly | Error::LostWrite) {
            return;
        }
        let Ok(h) = self.handles.handle(fh) else { return };
        let mut of = h.file.lock().await;
        if h.file.generation() != h.generation {
            return;
        }
        if !std::mem::replace(&mut of.lost_write, true) {
            let path = format!("/{}", self.names.path_of(h.ino));
            tracing::error!(
                path,
                "bytes written back from the kernel's cache were refused: this file's changes are lost, its previous version stays"
            );
        }
    }

    /// Uploads an open file's pending bytes and metadata; the object is complete in the store when
    /// this returns, and the inode describes it.
    pub(super) async fn commit(&self, i: &Inode, of: &mut OpenFile) -> Result<()> {
        if of.lost_write {
            return Err(Error::LostWrite);
        }
        // An object another tool wrote records no modification time: the mount shows the store's.
        // A change of its mode, owner or access time alone keeps that time; without it the
        // rewrite's own time would stand in (a `chmod -R` over such a tree would date every file
        // to now).
        // (The version loaded, where there is one: another tool may have replaced the object since
        // the mount last showed its time.)
        if of.dirty && of.meta.mtime.is_none() {
            let shown = of.base.as_ref().map_or_else(|| self.names.attrs_of(i).mtime, |b| b.mtime());
            of.meta.mtime = Some(stamp::stamp(shown));
        }
        if let Some(info) = self.writer.commit(of, &i.path).await? {
            self.names.committed(i.ino, &info);
        }
        Ok(())
    }

    /// Uploads the pending state of `ino`, if any.
    pub(super) async fn commit_ino(&self, ino: u64) -> Result<()> {
        let Some(of) = self.handles.file(ino) else {
            return Ok(());
        };
        let mut of = of.lock().await;
        let i = self.names.inode(ino)?;
        self.commit(&i, &mut of).await
    }

    /// close(): a writer's close uploads everything written through any handle of the file; a
    /// reader's close publishes nothing.
    pub async fn flush(&self, fh: u64) -> Result<()> {
        let h = self.handles.handle(fh)?;
        if !h.write {
            return Ok(());
        }
        let moving = self.moving.read().await;
        let mut of = h.file.lock().await;
        let i = self.names.inode(h.ino)?;
        let res = self.commit(&i, &mut of).await;
        // A close that finds bytes of a refused write-back missing: the name shows the version
        // the store holds from now on, not at the last release (which the kernel sends after
        // `close` returned).
        let forget = (res.is_err() && of.lost_write && !of.unlinked).then(|| self.name_lost_file(h.ino, &of));
        drop((of, moving));
        if let Some((parent, name)) = forget.flatten() {
            self.kernel_forget(parent, &name).await;
        }
        res
    }

    /// For a file that misses bytes of a refused write-back (`lost_write`), never stored: its name
    /// shows the version the store holds again (none, for a file new here), through a new inode
    /// where there is one: with the write-back cache the kernel trusts its own size of the old
    /// inode (the previous version's bytes would read as followed by zeros no one wrote). Returns
    /// the name, for the kernel to forget.
    fn name_lost_file(&self, ino: u64, of: &OpenFile) -> Option<(u64, String)> {
        match &of.base {
            Some(info) => self.names.renamed_to_version(ino, info),
            None => {
                let i = self.names.inode(ino).ok().filter(|i| i.parent != 0)?;
                self.names.table().remove_name(i.parent, &i.name);
                self.names.removed(i.parent, &i.name, true);
                Some((i.parent, i.name))
            }
        }
    }

    /// Records that handle `fh` was opened with `O_DIRECT`: its reads go around the kernel's page
    /// cache, so the frames it reads past stay in the frame cache.
    pub fn opened_direct(&self, fh: u64) {
        self.handles.set_uncached(fh);
    }

    /// Whether the kernel may keep the pages it cached of handle `fh`'s file: the handle is a
    /// read-only open of the version those pages were read from (see `crate::pagecache`).
    pub fn keeps_cache(&self, fh: u64) -> bool {
        self.handles.handle(fh).is_ok_and(|h| h.keep_cache)
    }

    /// Whether handle `fh`, just opened (`write_only`: for writing alone), goes around the
    /// kernel's page cache (`FOPEN_DIRECT_IO`): a write-only handle alone on its file, and any
    /// handle opened beside one that does (see `crate::handles`). Never with the kernel's
    /// write-back cache, which the user asked for.
    pub fn direct_io(&self, fh: u64, write_only: bool) -> bool {
        self.handles.choose_direct(fh, write_only && !self.writer.config().writeback_cache)
    }

    /// Records the process that opened handle `fh`.
    pub fn set_owner(&self, fh: u64, process: u32) {
        self.handles.set_owner(fh, process);
    }

    /// close() of one descriptor of handle `fh` by `process`. The kernel sends this for every copy
    /// of a descriptor, including the close-on-exec in each child a writer forks: such a close
    /// publishes nothing while the process that opened the file is still running (`alive`), or a
    /// half-written file would appear whenever the writer starts a program. The opener's own close,
    /// fsync and the last release still upload everything. `process` is asked only of a handle
    /// open for writing whose opener is known (it reads `/proc`).
    pub async fn flush_by(&self, fh: u64, process: impl FnOnce() -> u32, alive: impl Fn(u32) -> bool) -> Result<()> {
        let h = self.handles.handle(fh)?;
        if !h.write {
            return Ok(());
        }
        if let Some(owner) = h.owner {
            let by = process();
            if owner != by && alive(owner) {
                tracing::debug!(fh, owner, process = by, "close by another process: nothing published");
                return Ok(());
            }
        }
        self.flush(fh).await
    }

    /// fsync(): the same guarantee as a writer's flush, through any handle of the file: on Linux
    /// fsync acts on the file, so one through a read-only descriptor (`sync FILE` opens one)
    /// stores what other handles wrote too.
    pub async fn fsync(&self, fh: u64) -> Result<()> {
        let h = self.handles.handle(fh)?;
        let _moving = self.moving.read().await;
        let mut of = h.file.lock().await;
        let i = self.names.inode(h.ino)?;
        self.commit(&i, &mut of).await
    }

    /// Drops a handle. The last one uploads anything still pending (changes a failed close left)
    /// and frees the state — unless the file was opened again meanwhile.
    pub async fn release(&self, fh: u64) -> Result<()> {
        let (h, last) = self.handles.release(fh)?;
        if h.write {
            // What it wrote made a version the kernel has not read, stored or not.
            self.pages.changed(h.ino);
        }
        if !last {
            return Ok(());
        }
        let moving = self.moving.read().await;
        let mut of = h.file.lock().await;
        let res = match self.names.inode(h.ino) {
            Ok(i) => self.commit(&i, &mut of).await,
            Err(_) => Ok(()),
        };
        if of.lost_write {
            // Nothing of it can be stored: dropped, and the name shows the version the store
            // holds (none, for a file new here). (Unlinked, it had nothing to store.)
            if of.unlinked {
                self.retire(h.ino, &h.file, &mut of).await;
                return Ok(());
            }
            self.lost.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            let forget = self.name_lost_file(h.ino, &of);
            self.retire(h.ino, &h.file, &mut of).await;
            drop((of, moving));
            if let Some((parent, name)) = forget {
                self.kernel_forget(parent, &name).await;
            }
            return res;
        }
        // (A commit can fail after its object was stored: then nothing is left to store.)
        if let (Err(e), true) = (&res, of.dirty && !of.unlinked) {
            // The state stays, with all its bytes, and is tried again (see `unstored`).
            let path = format!("/{}", self.names.path_of(h.ino));
            tracing::warn!(path, error = %e, "last handle closed with changes not stored: kept, and tried again in the background and at unmount");
            self.unstored.keep(h.ino, &h.file, std::time::Instant::now());
            return res;
        }
        self.retire(h.ino, &h.file, &mut of).await;
        res
    }

    /// Frees the state `file` of `ino` once no handle holds it (else the last one's release will),
    /// and stops keeping it for another try.
    async fn retire(&self, ino: u64, file: &crate::openfile::SharedFile, of: &mut OpenFile) {
        if self.handles.retire(ino, file) {
            self.unstored.forget(ino, file);
            self.retired(ino);
            if let Body::Streaming(u) = std::mem::replace(&mut of.body, Body::Clean) {
                u.abort().await;
            }
        }
    }

    /// Tries again the files whose last handle closed with changes not stored, those due (all of
    /// them when `all`); returns how many are still kept. A file open for writing again is left
    /// to its writer's close. The mount calls this every second.
    pub async fn retry_unstored(&self, all: bool) -> usize {
        for (ino, file) in self.unstored.due(std::time::Instant::now(), all) {
            let _moving = self.moving.read().await;
            let mut of = file.lock().await;
            // (A state no longer the inode's open one was retired: nothing of it is left to try.)
            if !self.handles.file(ino).is_some_and(|f| std::sync::Arc::ptr_eq(&f, &file)) {
                self.unstored.forget(ino, &file);
                continue;
            }
            // (Checked with the file locked: a writer that opens it now cannot write before this
            // try ends, so no half-written state is stored.)
            if self.handles.writers(ino) > 0 {
                continue;
            }
            let pending = of.dirty && !of.unlinked;
            let res = match self.names.inode(ino) {
                Ok(i) if pending => self.commit(&i, &mut of).await,
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            let path = || format!("/{}", self.names.path_of(ino));
            match &res {
                Ok(()) if pending => tracing::info!(path = %path(), "a file kept after its last close is now stored"),
                Ok(()) => {}
                Err(e) => {
                    tracing::debug!(path = %path(), error = %e, "a file kept after its last close is still not stored")
                }
            }
            let done = res.is_ok() || !of.dirty || of.unlinked;
            self.unstored.tried(ino, &file, done, std::time::Instant::now());
            if done {
                self.retire(ino, &file, &mut of).await;
            }
        }
        self.unstored.len()
    }

    /// An open file whose name is going away (unlink, or replaced by a rename): its bytes move to a
    /// staging file if they live only in the store, and it uploads nothing any more. Runs `remove`
    /// (which deletes the object) while the file is locked, and marks the file only if it succeeds.
    pub(super) async fn detach_open<F, T>(&self, ino: u64, remove: F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let Some(file) = self.handles.file(ino) else {
            return remove.await;
        };
        let mut of = file.lock().await;
        // Local bytes only: nothing more goes to the store for a file that has no name.
        if matches!(of.body, Body::Streaming(_))
            || matches!(of.body, Body::Clean) && of.base.is_some()
            || !of.ahead.is_empty()
        {
            self.writer.stage(&mut of).await?;
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
            Some(m) => self.setattr(ino, SetAttr { mode: Some(m), ..SetAttr::default() }).await.map(drop),
            None => Ok(()),
        }
    }

    /// [`Self::setattr`] asked by a caller who is `privileged` (uid 0) or not: a change of owner,
    /// or a truncate by an unprivileged caller, also clears the set-user-ID and set-group-ID bits
    /// as [`Self::clear_suidgid`] says (unless the call sets the mode itself).
    pub async fn setattr_as(&self, ino: u64, mut change: SetAttr, privileged: bool) -> Result<FileAttrs> {
        let kill = change.uid.is_some() || change.gid.is_some() || (change.size.is_some() && !privileged);
        if change.mode.is_none() && kill {
            change.mode = self.mode_without_suidgid(ino).await?;
        }
        self.setattr(ino, change).await
    }

    /// The permission bits file or special node `ino` keeps once its set-user-ID and set-group-ID
    /// bits are cleared as [`Self::clear_suidgid`] says, or None when that changes nothing (and
    /// for directories and links, which keep them, as on Linux's own filesystems).
    async fn mode_without_suidgid(&self, ino: u64) -> Result<Option<u32>> {
        let a = self.getattr(ino).await?;
        if matches!(a.kind, Kind::Dir | Kind::Symlink) {
            return Ok(None);
        }
        let m = u32::from(a.perm);
        let mut kept = m & !0o4000;
        if m & 0o010 != 0 {
            kept &= !0o2000;
        }
        Ok((kept != m).then_some(kept))
    }

    /// Changes size, mode, owner or times, and so the change time; persisted with the object on
    /// the next upload (at once when no handle is open).
    pub async fn setattr(&self, ino: u64, change: SetAttr) -> Result<FileAttrs> {
        let _moving = self.moving.read().await;
        let i = self.names.inode(ino)?;
        self.pages.changed(ino);
        if change.is_empty() {
            return self.getattr(ino).await;
        }
        self.writable()?;
        if i.kind != Kind::File {
            return self.setattr_node(&i, change).await;
        }
        // A change to a file only readers hold, replaced or removed elsewhere, applies to the new
        // version or fails: never to the old one (see `renew_outdated`).
        if self.handles.is_open(ino) && self.renew_outdated(&i, &self.handles.opening(ino).await).await? {
            return Err(Error::Stale);
        }
        let SetAttr { size, mode, uid, gid, atime, mtime } = change;
        // A file not open is changed as if opened, read and committed while no open can read it.
        let mut opening = None;
        let (of_arc, temporary) = match self.handles.file(ino) {
            Some(of) => (of, false),
            None => {
                opening = Some(self.handles.opening(ino).await);
                match self.handles.file(ino) {
                    Some(of) => (of, false),
                    // A file that lost its name (removed, or replaced elsewhere while readers
                    // held it) and is no longer open: its path is no longer its own.
                    None if self.names.inode(ino)?.parent == 0 => return Err(Error::Stale),
                    None => (FileCell::new(self.load(&i, true, size == Some(0)).await?), true),
                }
            }
        };
        let mut of = of_arc.lock().await;
        if let Some(s) = size {
            self.writer.truncate(&mut of, &i.path, s).await?;
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
        let now = Some(stamp::now());
        if size.is_some() {
            of.meta.mtime = now;
        }
        of.meta.atime = atime.map(stamp::stamp).or(of.meta.atime);
        of.meta.mtime = mtime.map(stamp::stamp).or(of.meta.mtime);
        of.meta.ctime = now;
        of.dirty = true;
        if temporary {
            self.commit(&i, &mut of).await?;
            drop(opening);
            let i = self.names.inode(ino)?;
            return Ok(self.names.attrs_of(&i));
        }
        let cached = self.names.attrs_of(&i);
        Ok(of.live_attrs(cached))
    }

    /// [`Self::setattr`] of a directory, symbolic link or special node: directories keep their
    /// attributes in their marker object, links and nodes in their own object.
    async fn setattr_node(&self, i: &Inode, change: SetAttr) -> Result<FileAttrs> {
        let SetAttr { size, mode, uid, gid, atime, mtime } = change;
        if size.is_some() {
            return Err(if i.kind == Kind::Dir { Error::IsDir } else { Error::WrongType("truncate a link") });
        }
        // A directory's marker is written here with the change, and no rewrite for its entries
        // pending from before may land after it with the attributes it had then.
        let marked = i.kind == Kind::Dir && i.parent != 0;
        let _writing = if marked { Some(self.dir_writes.lock().await) } else { None };
        let attr = {
            let mut t = self.names.table();
            let cur = t.get_mut(i.ino).ok_or(Error::Stale)?;
            if let Some(m) = mode {
                cur.attr.perm = Some((m & 0o7777) as u16);
            }
            cur.attr.uid = uid.or(cur.attr.uid);
            cur.attr.gid = gid.or(cur.attr.gid);
            cur.attr.mtime = mtime.unwrap_or(cur.attr.mtime);
            cur.attr.atime = atime.unwrap_or(cur.attr.atime);
            cur.attr.ctime = SystemTime::now();
            cur.attr.clone()
        };
        match i.kind {
            Kind::Dir if marked => {
                self.names.drop_dir_times(&i.path);
                // As the table has it now (an entry changed meanwhile moved its times).
                let attr = self.names.inode(i.ino)?.attr;
                if let Err(e) = self.put_dir_marker(&i.path, &attr).await {
                    self.names.keep_dir_times([(i.path.clone(), attr)].into());
                    return Err(e);
                }
            }
            Kind::Symlink | Kind::Special(_) => self.rewrite_node(i, &attr).await?,
            _ => {}
        }
        let i = self.names.inode(i.ino)?;
        Ok(self.names.attrs_of(&i))
    }

    /// Takes the encoded frames of files open for writing that no one is writing now into their
    /// spills, so the memory budget room those frames hold goes back (a writer takes its own as
    /// it writes; a file left open idle would hold them until its next write). Skips any file
    /// whose lock is held. A task of the mount's calls this every second.
    pub async fn take_idle_encoded_frames(&self) {
        for (_, file, writers) in self.handles.open_files() {
            if writers == 0 || file.writing() {
                continue;
            }
            let Some(mut of) = file.try_lock() else { continue };
            if let Body::Streaming(u) = &mut of.body {
                u.take_encoded().await;
            }
        }
    }

    /// At unmount or on a signal: uploads files with pending changes that no writer holds open
    /// any more (a close whose upload failed, retried once more). A file still open for writing is
    /// never published half-written: its upload is left to its writer's close. Waits for the
    /// deletes queued behind unlinks too.
    pub async fn flush_all(&self) -> Result<()> {
        // (A directory's marker not written may be more than its times: one another tool made,
        // emptied here, exists only by the marker written for it. So it fails the unmount too.)
        // Once the store has left a request unanswered for a long while (a whole retry timeout:
        // it is down), nothing more is tried, here or in a later pass of the same unmount (each
        // try would wait as long); the files not tried count as lost like the one that failed.
        // Failures that come quickly (a store that answers "no") do not stop the others.
        let unanswered = |e: &Error, since: std::time::Instant| {
            matches!(e, Error::Store(s) if crate::store::compat::is_transient(s)) && since.elapsed() >= UNANSWERED
        };
        let lately = |t: &std::time::Instant| t.elapsed() < UNANSWERED_FOR;
        let mut down =
            self.unanswered.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_some_and(|t| lately(&t));
        let mut first_err = None;
        if !down {
            let since = std::time::Instant::now();
            if let Err(e) = self.write_dir_times().await {
                down = unanswered(&e, since);
                first_err = Some(e);
            }
        }
        let mut skipped = 0;
        let _moving = self.moving.read().await;
        for (ino, file, writers) in self.handles.open_files() {
            if writers > 0 {
                let path = format!("/{}", self.names.path_of(ino));
                match self.told_open.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(ino) {
                    true => tracing::warn!(path, "still open for writing at unmount: stored when its writer closes it"),
                    false => tracing::debug!(path, "still open for writing at unmount"),
                }
                continue;
            }
            let mut of = file.lock().await;
            if down {
                skipped += usize::from(of.dirty && !of.unlinked);
                continue;
            }
            let since = std::time::Instant::now();
            let res = match self.names.inode(ino) {
                Ok(i) => self.commit(&i, &mut of).await,
                Err(_) => Ok(()),
            };
            if let Err(e) = res {
                self.log_error(&e, "flush_all", ino, None);
                down = unanswered(&e, since);
                first_err.get_or_insert(e);
            }
        }
        if down {
            let mut at = self.unanswered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if !at.is_some_and(|t| lately(&t)) {
                *at = Some(std::time::Instant::now());
            }
            drop(at);
            if skipped > 0 {
                tracing::warn!(files = skipped, "the store does not answer: these files were not tried");
            }
            first_err.get_or_insert_with(|| {
                let source = "the store did not answer at unmount".into();
                Error::Store(object_store::Error::Generic { store: "store", source })
            });
        }
        // Failed deletes stay reported until the mount ends, so its exit says so too.
        if let Err(e) = self.settle_deletes(false).await {
            first_err.get_or_insert(e);
        }
        first_err.map_or(Ok(()), Err)
    }

    /// When the mount ends: cancels the uploads of files still open for writing, so no partial
    /// object and no unfinished multipart upload is left behind; returns how many there were.
    pub async fn abandon_open(&self) -> usize {
        let mut n = 0;
        for (ino, file) in self.handles.drain() {
            let mut of = file.lock().await;
            if of.dirty && !of.unlinked {
                let path = format!("/{}", self.names.path_of(ino));
                if self.unstored.holds(ino, &file) {
                    tracing::error!(
                        path,
                        "its last close failed to store it, and so did every try since, the last at unmount: its changes are lost, the previous version stays"
                    );
                } else {
                    tracing::warn!(
                        path,
                        "unmounted while open for writing: unsaved changes discarded, the previous version stays"
                    );
                    n += 1;
                }
                self.lost.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            }
            if let Body::Streaming(u) = std::mem::replace(&mut of.body, Body::Clean) {
                u.abort().await;
            }
        }
        n
    }
}
