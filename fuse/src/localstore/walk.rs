//! Listings of a `LocalStore` — every object under a prefix, or one directory's objects and
//! subdirectories — with `LocalFileSystem`'s results, and the walk `cleanup` makes. Directories
//! are opened by their key, relative to the root, one at a time.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{ListResult, ObjectMeta};
use rustix::fs::{AtFlags, Dir, FileType};
use rustix::io::Errno;

use super::root::{FileInfo, Root};
use super::{Cleanup, Result, TMP_DIR, io_error};

/// A directory, open, and names in it.
type Listed<N> = (Arc<OwnedFd>, Vec<N>);

/// The names in directory `dir` (a key, "" for the root), sorted, and the directory, open (not
/// through a symbolic link: what is in it is looked at from there); `None` where there is no such
/// directory.
fn names(root: &Root, dir: &str) -> std::io::Result<Option<Listed<Vec<u8>>>> {
    let fd = match root.open_dir(dir) {
        Ok(fd) => fd,
        // (A symbolic link is no directory of the bucket's: `LOOP`.)
        Err(e) if matches!(Errno::from_io_error(&e), Some(Errno::NOENT | Errno::NOTDIR | Errno::LOOP)) => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for entry in Dir::read_from(&fd)? {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(name);
        }
    }
    names.sort_unstable();
    Ok(Some((Arc::new(fd), names)))
}

/// The names in directory `dir` a listing looks at: not the staging directory, nor a name that is
/// not UTF-8 (no key could name it; `LocalFileSystem` fails the whole listing instead, which made
/// one such name, anywhere, fail the mount's start): the first one a process meets is logged.
fn listed_names(root: &Root, dir: &str) -> Result<Option<Listed<String>>> {
    static TOLD: std::sync::Once = std::sync::Once::new();
    let Some((fd, names)) = names(root, dir).map_err(|e| io_error("list", &root.display(dir), e))? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        match String::from_utf8(name) {
            Ok(name) if dir.is_empty() && name == TMP_DIR => {}
            Ok(name) => out.push(name),
            Err(e) => {
                let path = root.display(dir).join(String::from_utf8_lossy(e.as_bytes()).as_ref());
                tracing::debug!(path = %path.display(), "a name that is not UTF-8: not listed");
                TOLD.call_once(|| {
                    tracing::warn!(path = %path.display(), "names that are not UTF-8 are not shown (no object key can hold them); this is the first")
                });
            }
        }
    }
    Ok(Some((fd, out)))
}

/// `name` in directory `dir`, as a key.
fn child(dir: &str, name: &str) -> Result<Path> {
    Ok(Path::parse(if dir.is_empty() { name.to_owned() } else { format!("{dir}/{name}") })?)
}

/// What a listing sees at `key`: `None` for what vanished, or anything but a directory or a
/// regular file (a symbolic link is not followed: see `Root::open_file`).
fn entry(root: &Root, key: &str) -> Result<Option<FileInfo>> {
    listed_kind(root, key, root.stat(key, false))
}

/// [`entry`] for `name`, in directory `dir` (open) whose key is the rest of `key`: one `stat`
/// from the directory, not a path from the root.
fn entry_in(root: &Root, dir: &OwnedFd, name: &str, key: &str) -> Result<Option<FileInfo>> {
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(std::io::Error::from);
    listed_kind(root, key, st.map(|st| FileInfo::of(&st)))
}

fn listed_kind(root: &Root, key: &str, info: std::io::Result<FileInfo>) -> Result<Option<FileInfo>> {
    match info {
        Ok(info) if matches!(info.kind, FileType::Directory | FileType::RegularFile) => Ok(Some(info)),
        Ok(_) => Ok(None),
        Err(e) if matches!(Errno::from_io_error(&e), Some(Errno::NOENT | Errno::LOOP)) => Ok(None),
        Err(e) => Err(io_error("list", &root.display(key), e)),
    }
}

/// Whether an object's file is listed: any file with a name.
fn listed(location: &Path) -> bool {
    location.filename().is_some()
}

/// One directory's objects and subdirectories (`list_with_delimiter`), sorted.
pub(super) fn one_level(root: &Root, prefix: &Path) -> Result<ListResult> {
    let mut out = ListResult { common_prefixes: Vec::new(), objects: Vec::new() };
    let dir = prefix.as_ref();
    let Some((fd, names)) = listed_names(root, dir)? else { return Ok(out) };
    for name in names {
        let location = child(dir, &name)?;
        match entry_in(root, &fd, &name, location.as_ref())? {
            Some(info) if info.kind == FileType::Directory => out.common_prefixes.push(location),
            Some(info) if listed(&location) => out.objects.push(info.meta(location)),
            _ => {}
        }
    }
    Ok(out)
}

/// Every object under a prefix, depth first in name order; symbolic links are not followed (nor
/// listed), and a directory met again below itself (a bind mount) is not listed twice.
pub(super) struct Walk {
    root: Arc<Root>,
    /// Only objects after this key.
    offset: Option<Path>,
    /// The prefix, until it is read.
    start: Option<String>,
    /// Keys still to look at, the next last, each with the directories above it.
    pending: Vec<(String, Arc<Ancestors>, Arc<OwnedFd>)>,
}

/// The directories (device, inode) above an entry of a walk.
#[derive(Debug)]
struct Ancestors {
    id: (u64, u64),
    up: Option<Arc<Ancestors>>,
}

impl Ancestors {
    fn contains(&self, id: (u64, u64)) -> bool {
        let mut at = Some(self);
        while let Some(a) = at {
            if a.id == id {
                return true;
            }
            at = a.up.as_deref();
        }
        false
    }
}

impl Walk {
    pub(super) fn new(root: Arc<Root>, prefix: &Path, offset: Option<Path>) -> Walk {
        Walk { root, offset, start: Some(prefix.as_ref().to_owned()), pending: Vec::new() }
    }

    /// Queues the entries of directory `dir`.
    fn read(&mut self, dir: &str, info: FileInfo, up: Option<Arc<Ancestors>>) -> Result<()> {
        let here = Arc::new(Ancestors { id: (info.dev, info.ino), up });
        let Some((fd, names)) = listed_names(&self.root, dir)? else { return Ok(()) };
        for name in names.into_iter().rev() {
            let key = if dir.is_empty() { name } else { format!("{dir}/{name}") };
            self.pending.push((key, here.clone(), fd.clone()));
        }
        Ok(())
    }

    fn step(&mut self) -> Result<Option<ObjectMeta>> {
        if let Some(start) = self.start.take() {
            // The prefix itself is never listed, only what is under it.
            if let Some(info) = entry(&self.root, &start)?.filter(|i| i.kind == FileType::Directory) {
                self.read(&start, info, None)?;
            }
        }
        while let Some((key, up, dir)) = self.pending.pop() {
            let name = key.rsplit_once('/').map_or(key.as_str(), |(_, name)| name);
            let Some(info) = entry_in(&self.root, &dir, name, &key)? else { continue };
            if info.kind == FileType::Directory {
                if up.contains((info.dev, info.ino)) {
                    tracing::debug!(key, "a symbolic link to a directory above it: not listed");
                } else {
                    self.read(&key, info, Some(up))?;
                }
                continue;
            }
            let location = Path::parse(&key)?;
            if listed(&location) && self.offset.as_ref().is_none_or(|o| location > *o) {
                return Ok(Some(info.meta(location)));
            }
        }
        Ok(None)
    }
}

impl Iterator for Walk {
    type Item = Result<ObjectMeta>;

    fn next(&mut self) -> Option<Self::Item> {
        self.step().transpose()
    }
}

/// `walk` as a stream: read a batch at a time off the async threads, as `LocalFileSystem` does
/// (inline where there is no tokio runtime). It ends after its first error.
pub(super) fn stream(walk: Walk) -> BoxStream<'static, Result<ObjectMeta>> {
    if tokio::runtime::Handle::try_current().is_err() {
        return futures::stream::iter(walk).boxed();
    }
    const BATCH: usize = 1024;
    futures::stream::try_unfold((walk, VecDeque::new()), |(mut walk, mut batch)| async move {
        if batch.is_empty() {
            (walk, batch) = tokio::task::spawn_blocking(move || {
                batch.extend(walk.by_ref().take(BATCH));
                (walk, batch)
            })
            .await?;
        }
        match batch.pop_front() {
            Some(Err(e)) => Err(e),
            Some(Ok(meta)) => Ok(Some((meta, (walk, batch)))),
            None => Ok(None),
        }
    })
    .boxed()
}

/// See `LocalStore::cleanup`: symbolic links are not followed.
pub(super) fn cleanup(root: &Root, older_than: Duration) -> std::io::Result<Cleanup> {
    let now = SystemTime::now();
    let old = |info: &FileInfo| now.duration_since(info.mtime).is_ok_and(|age| age >= older_than);
    let with_path =
        |rel: &str, e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", root.display(rel).display()));
    let mut done = Cleanup::default();
    let names = names(root, TMP_DIR).map_err(|e| with_path(TMP_DIR, e))?.map(|(_, n)| n).unwrap_or_default();
    // Nothing of ours has a name that is not UTF-8.
    for name in names.into_iter().filter_map(|n| String::from_utf8(n).ok()) {
        let rel = format!("{TMP_DIR}/{name}");
        let info = match root.stat(&rel, false) {
            Ok(info) => info,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(with_path(&rel, e)),
        };
        if info.kind == FileType::RegularFile && old(&info) {
            match root.unlink(&rel) {
                Ok(()) => {
                    done.files += 1;
                    done.bytes += info.size;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(with_path(&rel, e)),
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use futures::TryStreamExt;
    use object_store::ObjectStore;

    use super::*;
    use crate::localstore::tests::{is_not_found, keys, store};

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

        let name = std::fs::read_dir(store.root().join(TMP_DIR)).unwrap().next().unwrap().unwrap().file_name();
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
        assert_eq!(done, Cleanup { files: 1, bytes: 100 });
        assert!(!dir.path().join(".shrinkfs-tmp/put-old").exists());
        // Files named as `LocalFileSystem` stages its writes may be another program's (`issue#42`):
        // they are listed like any other file, and never removed, however old.
        for kept in [".shrinkfs-tmp/put-new", "a/b/obj#3", "c#0", "d#5", "x#y#1", "e#12a", "f#", "plain"] {
            assert!(dir.path().join(kept).exists(), "{kept}");
        }
        assert_eq!(store.cleanup(Duration::ZERO).unwrap(), Cleanup { files: 1, bytes: 10 });
        assert_eq!(keys(&store, None).await, ["a/b/obj#3", "c#0", "d#5", "e#12a", "f#", "plain", "x#y#1"]);
    }
}
