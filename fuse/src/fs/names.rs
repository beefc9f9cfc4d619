//! The namespace operations of the core: mkdir, rmdir, unlink, symlink, mknod, readlink and
//! rename — the namespace, the open files and the writer coordinated for each.

use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use shrinkfs_codec::format::{S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK};

use super::{FileAttrs, Fs};
use crate::error::{Error, Result};
use crate::inode::{Attr, Inode, Kind, join};
use crate::namespace::{DIR_MARKER, check_name};
use crate::openfile::{Body, FileGuard, OpenFile, SharedFile};

/// Objects a directory's rename copies (and then checks and deletes) at once.
const MOVES_AT_ONCE: usize = 16;

impl Fs {
    /// Creates a directory owned by `uid`/`gid`; its marker object keeps it while empty and
    /// carries its mode, owner and time.
    pub async fn mkdir(&self, parent: u64, name: &str, mode: u32, uid: u32, gid: u32) -> Result<FileAttrs> {
        self.writable()?;
        let _moving = self.moving.read().await;
        check_name(name)?;
        let dir = self.names.inode(parent)?;
        if dir.kind != Kind::Dir {
            return Err(Error::NotDir);
        }
        if self.exists(parent, name).await? {
            return Err(Error::Exists);
        }
        let rel = join(&dir.path, name);
        self.names.check_dir_key_len(&rel)?;
        let (gid, setgid) = self.names.inherited_group(&dir, gid);
        let perm = (mode & 0o7777) as u16 | if setgid { 0o2000 } else { 0 };
        let attr = Attr { perm: Some(perm), uid: Some(uid), gid: Some(gid), ..Attr::empty() };
        self.put_dir_marker(&rel, &attr).await?;
        let i = self.names.created(parent, name, Kind::Dir, attr, Some(Instant::now()));
        self.names.made_empty(i.ino);
        self.names.subdirs_changed(parent, 1);
        self.names.entries_changed(parent);
        let i = self.names.inode(i.ino)?;
        Ok(self.names.attrs_of(&i))
    }

    /// Writes the marker object of directory `rel`: no data, the directory's mode, owner and
    /// modification time as its metadata (so they outlive the kernel's cache and the mount).
    pub(super) async fn put_dir_marker(&self, rel: &str, attr: &Attr) -> Result<()> {
        // Only what is known is recorded: a directory whose mode and owner no marker recorded
        // (another tool made it) shows each mount's `--dir-mode` and owner until a chmod or chown
        // sets them, however often its times are written (else the first mount to add an entry
        // would own it, the bucket's root too, for every other mount).
        let mode = attr.perm.map(|p| S_IFDIR | u32::from(p));
        self.writer.put_node(&join(rel, DIR_MARKER), mode, attr, &[]).await
    }

    /// Removes an empty directory.
    pub async fn rmdir(&self, parent: u64, name: &str) -> Result<()> {
        let _moving = self.moving.read().await;
        let _writing = self.dir_writes.lock().await;
        self.remove_dir(parent, name).await?;
        // Known absent from here on, unless DELETEs of files that were in it are still queued
        // (one that fails leaves the directory in the bucket, and it must show again).
        self.names.removed(parent, name, self.deletes_queued() == 0);
        Ok(())
    }

    /// [`Self::rmdir`] with `dir_writes` held.
    async fn remove_dir(&self, parent: u64, name: &str) -> Result<()> {
        self.writable()?;
        check_name(name)?;
        let dir = self.names.inode(parent)?;
        let rel = join(&dir.path, name);
        self.names.check_key_len(&rel)?;
        if self.names.stat_attrs(&self.names.key(&rel), None).await?.is_some() {
            return Err(Error::NotDir);
        }
        let under = self.names.first_keys(&rel, 2).await?;
        let found = !under.is_empty();
        // Only this directory's own marker may remain: an empty subdirectory is an entry too.
        let marker = self.names.key(&join(&rel, DIR_MARKER));
        if under.iter().any(|k| k != &marker) {
            return Err(Error::NotEmpty);
        }
        let (local_children, known_local) = {
            let t = self.names.table();
            let d = t.child(parent, name);
            let open_below = d.is_some_and(|d| t.children(d.ino).any(|c| self.handles.is_open(c.ino)));
            (open_below, d.is_some_and(|d| d.kind == Kind::Dir))
        };
        if local_children {
            return Err(Error::NotEmpty);
        }
        if !found && !known_local {
            return Err(Error::NotFound);
        }
        self.delete_marker(&rel).await?;
        self.names.drop_dir_times(&rel);
        self.names.table().remove_name(parent, name);
        self.names.subdirs_changed(parent, -1);
        self.names.entries_changed(parent);
        Ok(())
    }

    /// Deletes directory `rel`'s marker. A local bucket removes the directory itself with it (one
    /// another program made has no marker), and refuses with `ENOTEMPTY` where it holds anything
    /// the listings do not show: an empty subdirectory another program made, a socket, a link.
    async fn delete_marker(&self, rel: &str) -> Result<()> {
        let removed = match &self.bucket.local {
            Some(local) => local.remove_dir(&self.names.key(rel)).await,
            None => self.bucket.store.delete(&self.names.key(&join(rel, DIR_MARKER))).await,
        };
        match removed {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) if crate::localstore::os_error(&e) == Some(libc::ENOTEMPTY) => Err(Error::NotEmpty),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes a file or symlink.
    pub async fn unlink(&self, parent: u64, name: &str) -> Result<()> {
        self.writable()?;
        let _moving = self.moving.read().await;
        check_name(name)?;
        let dir = self.names.inode(parent)?;
        let rel = join(&dir.path, name);
        self.names.check_key_len(&rel)?;
        let known = self.names.table().child(parent, name).cloned();
        if known.as_ref().is_some_and(|k| k.kind == Kind::Dir) {
            return Err(Error::IsDir);
        }
        let key = self.names.key(&rel);
        // A name looked up within the metadata TTL exists as far as this mount may tell (the
        // kernel's `rm` looks it up first); else a HEAD says, since a DELETE of nothing succeeds.
        let known_fresh = known.as_ref().is_some_and(|k| self.names.trusted(k));
        // An open file keeps its bytes for its handles (POSIX: unlinked, not gone).
        let had_local = known.as_ref().is_some_and(|k| self.handles.is_open(k.ino));
        // Set when the DELETE is queued behind the unlink rather than done.
        let queued = std::sync::atomic::AtomicBool::new(false);
        let remove = async {
            if !known_fresh {
                match self.bucket.store.head(&key).await {
                    Ok(_) => {}
                    Err(object_store::Error::NotFound { .. }) => return Ok(false),
                    Err(e) => return Err(Error::from(e)),
                }
            }
            // A file open here is detached from its handles first: its delete runs now.
            let deleted = match (&self.deletes, had_local) {
                (Some(behind), false) => {
                    behind.delete(&key).await.map(|q| queued.store(q, std::sync::atomic::Ordering::Relaxed))
                }
                _ => self.bucket.store.delete(&key).await,
            };
            match deleted {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(true),
                Err(e) => Err(e.into()),
            }
        };
        let existed = match &known {
            Some(k) => self.detach_open(k.ino, remove).await?,
            None => remove.await?,
        };
        if !existed && !had_local {
            if self.names.dir_exists(&rel).await? {
                return Err(Error::IsDir);
            }
            return Err(Error::NotFound);
        }
        // Its parsed layout is no one's to read through the cache any more.
        if let Some(etag) = known.as_ref().and_then(|k| k.attr.etag.as_deref()) {
            self.reader.layouts.forget(&crate::cache::ObjectId { key: key.as_ref().into(), etag: etag.into() });
        }
        self.names.table().remove_name(parent, name);
        // Known absent once its DELETE is done; a queued one is waited for by the next request
        // for the name instead, which finds the file again if the DELETE failed.
        self.names.removed(parent, name, !queued.load(std::sync::atomic::Ordering::Relaxed));
        self.names.entries_changed(parent);
        Ok(())
    }

    /// Creates a symbolic link: an object whose data is the target (any bytes: a target is data,
    /// not a name), marked as a link.
    pub async fn symlink(
        &self,
        parent: u64,
        name: &str,
        target: impl AsRef<[u8]>,
        uid: u32,
        gid: u32,
    ) -> Result<FileAttrs> {
        let target = target.as_ref();
        self.writable()?;
        let _moving = self.moving.read().await;
        check_name(name)?;
        let dir = self.names.inode(parent)?;
        if self.exists(parent, name).await? {
            return Err(Error::Exists);
        }
        let rel = join(&dir.path, name);
        self.names.check_key_len(&rel)?;
        let (gid, _) = self.names.inherited_group(&dir, gid);
        let attr = Attr { size: target.len() as u64, uid: Some(uid), gid: Some(gid), ..Attr::empty() };
        self.writer.put_node(&rel, Some(S_IFLNK | 0o777), &attr, target).await?;
        let i = self.names.created(parent, name, Kind::Symlink, attr, None);
        self.names.entries_changed(parent);
        Ok(self.names.attrs_of(&i))
    }

    /// Writes symbolic link or special node `i` again with the mode, owner and time of `attr`
    /// (`chmod`, `lchown`, `utimensat` on the node itself): they live in its small object.
    pub(super) async fn rewrite_node(&self, i: &Inode, attr: &Attr) -> Result<()> {
        // The data (a link's target, a device's number) is kept as stored.
        let info = self.reader.stat(&self.names.key(&i.path)).await?.ok_or(Error::NotFound)?;
        let data = self.reader.read_all(&info).await?;
        let mode = match i.kind {
            Kind::Symlink => S_IFLNK | 0o777,
            Kind::Special(t) => t | u32::from(attr.perm.unwrap_or(self.names.config().file_mode)),
            _ => return Err(Error::WrongType("not a link or special file")),
        };
        self.writer.put_node(&i.path, Some(mode), attr, &data).await
    }

    /// Makes a FIFO, socket, device node or empty regular file (`mknod`, `mkfifo`, `bind`).
    pub async fn mknod(&self, parent: u64, name: &str, mode: u32, rdev: u32, uid: u32, gid: u32) -> Result<FileAttrs> {
        self.writable()?;
        let _moving = self.moving.read().await;
        check_name(name)?;
        let dir = self.names.inode(parent)?;
        if dir.kind != Kind::Dir {
            return Err(Error::NotDir);
        }
        let kind = match mode & S_IFMT {
            t @ (S_IFIFO | S_IFSOCK | S_IFCHR | S_IFBLK) => Kind::Special(t),
            S_IFREG | 0 => Kind::File,
            _ => return Err(Error::WrongType("mknod of this file type")),
        };
        if self.exists(parent, name).await? {
            return Err(Error::Exists);
        }
        let rel = join(&dir.path, name);
        self.names.check_key_len(&rel)?;
        let (gid, _) = self.names.inherited_group(&dir, gid);
        let rdev = if matches!(kind, Kind::Special(S_IFCHR | S_IFBLK)) { rdev } else { 0 };
        let perm = (mode & 0o7777) as u16;
        let attr = Attr { perm: Some(perm), uid: Some(uid), gid: Some(gid), rdev, ..Attr::empty() };
        let (type_bits, data) = match kind {
            Kind::Special(t) => (t, node_data(t, rdev)),
            _ => (S_IFREG, Vec::new()),
        };
        self.writer.put_node(&rel, Some(type_bits | u32::from(perm)), &attr, &data).await?;
        let i = self.names.created(parent, name, kind, attr, None);
        self.names.entries_changed(parent);
        Ok(self.names.attrs_of(&i))
    }

    /// The target of a symbolic link.
    pub async fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let i = self.names.inode(ino)?;
        if i.kind != Kind::Symlink {
            return Err(Error::WrongType("not a symbolic link"));
        }
        let info = self.reader.stat(&self.names.key(&i.path)).await?.ok_or(Error::NotFound)?;
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
        // A name of a file replaced elsewhere while readers held it here moves on to the new
        // version: the kernel, which named the readers' file, looks it up again and retries.
        if self.detach_replaced(parent, name).await? {
            return Err(Error::Stale);
        }
        let src_attr = self.lookup_here(parent, name).await?;
        self.detach_replaced(new_parent, new_name).await?;
        // A directory's move keeps every other store change out until it is done (`Fs::moving`);
        // a file's keeps out directory moves, and holds the file itself (below).
        let (_tree, _shared) = match src_attr.kind {
            Kind::Dir => (Some(self.moving.write().await), None),
            _ => (None, Some(self.moving.read().await)),
        };
        // Paths read once no directory's move can change them.
        let src_dir = self.names.inode(parent)?;
        let dst_dir = self.names.inode(new_parent)?;
        self.forget(src_attr.ino, 1);
        let dst = match self.lookup_here(new_parent, new_name).await {
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
        match src_attr.kind {
            Kind::Dir => self.names.check_dir_key_len(&to)?,
            _ => self.names.check_key_len(&to)?,
        }
        // The open files it moves, locked from their upload until they read from their new key: no
        // write or close of one stores bytes under an old key meanwhile (which the move deletes),
        // and none reads an old key once it is gone. One directory moves at a time, and the kernel
        // runs no two renames of one directory's entries at once, so a file's lock here and the
        // one `detach_open` takes of a replaced file are never taken the other way round.
        let moved: Vec<(u64, SharedFile)>;
        let mut held;
        let is_dir = src_attr.kind == Kind::Dir;
        if is_dir {
            if to == from || to.starts_with(&format!("{from}/")) {
                return Err(Error::IntoItself);
            }
            // Markers with pending times are written before the copy, which carries them.
            let _writing = self.dir_writes.lock().await;
            self.write_dir_times_locked().await?;
            let moved_to = |o: &object_store::ObjectMeta| {
                let rel = self.bucket.rel(&o.location);
                join(&to, rel.strip_prefix(&from).unwrap_or(&rel).trim_start_matches('/'))
            };
            // Every new key must fit the store, checked before anything changes (a deep tree moved
            // under a longer name would stop halfway, at its first key too long; and a failed
            // rename leaves the directory it would have replaced). Listed and checked again below
            // only where files open in it upload first.
            let fits = |objects: &[object_store::ObjectMeta]| -> Result<()> {
                objects.iter().try_for_each(|o| self.names.check_key_len(&moved_to(o)))
            };
            let listed: Vec<_> = self.bucket.store.list(Some(&self.names.key(&from))).try_collect().await?;
            fits(&listed)?;
            if dst.is_some() {
                self.remove_dir(new_parent, new_name).await?;
            }
            // Files open below it are uploaded first, so the copy carries their bytes.
            moved = self
                .names
                .subtree(src_attr.ino)
                .into_iter()
                .filter_map(|i| self.handles.file(i).map(|f| (i, f)))
                .collect();
            held = self.lock_and_commit(&moved).await?;
            let objects = match moved.is_empty() {
                true => listed,
                false => {
                    let objects: Vec<_> = self.bucket.store.list(Some(&self.names.key(&from))).try_collect().await?;
                    fits(&objects)?;
                    objects
                }
            };
            // Each object's old key, new key and version as listed. (Requests of many objects go
            // several at once: each is a round trip.)
            let moves: Vec<(object_store::path::Path, object_store::path::Path, Option<String>)> =
                objects.iter().map(|o| (o.location.clone(), self.names.key(&moved_to(o)), o.e_tag.clone())).collect();
            futures::stream::iter(moves.clone())
                .map(|(from, to, _)| async move { self.bucket.store.copy(&from, &to).await })
                .buffer_unordered(MOVES_AT_ONCE)
                .try_collect::<Vec<()>>()
                .await?;
            if objects.is_empty() {
                let attr = self.names.table().child(parent, name).map(|d| d.attr.clone());
                match &self.bucket.local {
                    // A local bucket's directory with no object (another program made it) gets
                    // its marker, then moves whole, with the empty directories and what else the
                    // listings do not show in it: a failure leaves it where it was.
                    Some(local) => {
                        self.put_dir_marker(&from, &attr.unwrap_or_else(Attr::empty)).await?;
                        local.move_dir(&self.names.key(&from), &self.names.key(&to)).await?;
                    }
                    None => self.put_dir_marker(&to, &attr.unwrap_or_else(Attr::empty)).await?,
                }
            }
            // Each old key goes only if it still holds the version copied (see `finish_move`).
            futures::stream::iter(moves)
                .map(|(from, to, seen)| async move { self.finish_move(&from, &to, seen).await })
                .buffer_unordered(MOVES_AT_ONCE)
                .try_collect::<Vec<()>>()
                .await?;
        } else {
            moved = self.handles.file(src_attr.ino).map(|f| (src_attr.ino, f)).into_iter().collect();
            held = self.lock_and_commit(&moved).await?;
            let seen = self.names.table().child(parent, name).and_then(|c| c.attr.etag.clone());
            let (from_key, to_key) = (self.names.key(&from), self.names.key(&to));
            let move_object = self.move_object(&from_key, &to_key, seen);
            // Handles open on the replaced file keep its bytes.
            match &dst {
                Some(d) => self.detach_open(d.ino, move_object).await?,
                None => move_object.await?,
            }
        }
        self.names.moved(parent, name, new_parent, new_name);
        self.names.appeared(new_parent, new_name, src_attr.kind);
        // Its objects are deleted (each DELETE done, never queued): the old name is absent, unless
        // a directory's files have DELETEs still queued (one that fails leaves it in the bucket).
        if (parent, name) != (new_parent, new_name) {
            self.names.removed(parent, name, !(is_dir && self.deletes_queued() > 0));
        }
        if is_dir && parent != new_parent {
            self.names.subdirs_changed(parent, -1);
            self.names.subdirs_changed(new_parent, 1);
        }
        self.names.entries_changed(parent);
        self.names.entries_changed(new_parent);
        for (ino, of) in &mut held {
            self.rebase_open(*ino, of).await;
        }
        Ok(())
    }

    /// Locks each of the open files `moved` in turn and uploads its pending bytes; returns them
    /// locked.
    async fn lock_and_commit<'a>(&self, moved: &'a [(u64, SharedFile)]) -> Result<Vec<(u64, FileGuard<'a>)>> {
        let mut held = Vec::with_capacity(moved.len());
        for (ino, file) in moved {
            let mut of = file.lock().await;
            // (One missing a refused write-back stores nothing: the stored version moves.)
            if !of.lost_write {
                self.commit(&self.names.inode(*ino)?, &mut of).await?;
            }
            held.push((*ino, of));
        }
        Ok(held)
    }

    /// After a rename: open file `ino`, locked as `of`, whose bytes are the stored object (read
    /// from it, or kept staged after its commit) reads it, and knows its version, under its new
    /// key (a copy's version is another: a stale one would look replaced elsewhere).
    async fn rebase_open(&self, ino: u64, of: &mut OpenFile) {
        let stored = match of.body {
            Body::Clean => true,
            Body::Staged { .. } => !of.dirty && of.ahead.is_empty(),
            Body::Streaming(_) => false,
        };
        if !stored || of.base.is_none() {
            return;
        }
        let Ok(i) = self.names.inode(ino) else { return };
        match self.reader.stat(&self.names.key(&i.path)).await {
            Ok(Some(info)) => of.base = Some(info),
            Ok(None) => tracing::warn!(ino, path = i.path, "renamed open file not found under its new name"),
            Err(e) => self.log_error(&e, "rename", ino, None),
        }
    }
}

/// The data of a special node's object: a device's number (8 bytes, little-endian), nothing for
/// a FIFO or socket.
fn node_data(type_bits: u32, rdev: u32) -> Vec<u8> {
    if matches!(type_bits, S_IFCHR | S_IFBLK) { u64::from(rdev).to_le_bytes().to_vec() } else { Vec::new() }
}
