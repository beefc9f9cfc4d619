//! The bucket root as an open directory: every path a system call is given is relative to its
//! file descriptor (`openat`, `renameat`, `unlinkat`…), or, for a key longer than one such path
//! (`PATH_MAX` less its NUL), to a directory opened part of the way down, so a key's length does
//! not depend on the root's own path and may exceed `PATH_MAX`. Staged files and their placing,
//! and the ETag an object's `stat` gives.

use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use object_store::ObjectMeta;
use object_store::path::Path;
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, RenameFlags, ResolveFlags, Stat};
use rustix::io::Errno;

use super::{Result, TMP_DIR, already_exists, io_error};
use crate::namespace::DIR_MARKER;

/// The bucket directory, open.
#[derive(Debug)]
pub(super) struct Root {
    /// Read-only, or `O_PATH` where the directory cannot be read.
    fd: OwnedFd,
    /// The canonical path, for messages: no system call is given it after `open`.
    path: PathBuf,
}

/// The longest path one system call takes (`PATH_MAX` less its NUL).
const MAX_CALL_PATH: usize = libc::PATH_MAX as usize - 1;

/// The directory a system call starts from: the root, or one opened on the way to a long key.
enum From<'a> {
    Root(BorrowedFd<'a>),
    Dir(OwnedFd),
}

impl AsFd for From<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            From::Root(fd) => *fd,
            From::Dir(fd) => fd.as_fd(),
        }
    }
}

/// `path` under `dir` opened with `flags`, where no component of it is a symbolic link (an
/// `ELOOP` error otherwise): a link another program left in the bucket is not part of it, so
/// nothing is read, listed, written or removed through one (a link to `..` would let a
/// recursive delete of one directory reach the whole bucket). Where `openat2` is missing (kernels
/// before 5.6) or refused (a seccomp filter answering `EPERM`), only the last component is
/// checked, and the first such call says so in the log.
pub(super) fn open_beneath(dir: BorrowedFd<'_>, path: &str, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    static NO_OPENAT2: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let fallback = || rustix::fs::openat(dir, path, flags | OFlags::NOFOLLOW, Mode::empty());
    if NO_OPENAT2.load(std::sync::atomic::Ordering::Relaxed) {
        return fallback();
    }
    let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(dir, path, flags, Mode::empty(), resolve) {
        Err(e @ (Errno::NOSYS | Errno::PERM)) => {
            if !NO_OPENAT2.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(error = %e, "openat2 is not available: a symbolic link in the bucket directory is refused only as a path's last component");
            }
            fallback()
        }
        opened => opened,
    }
}

/// Mode of the files and directories created (less the umask), as `LocalFileSystem`'s.
const FILE_MODE: u32 = 0o666;
const DIR_MODE: u32 = 0o777;

impl Root {
    /// Opens directory `dir` and creates its staging directory if missing (not an error where
    /// the directory is read-only: writes then fail with the OS error).
    pub(super) fn open(dir: &std::path::Path) -> Result<Arc<Root>> {
        let path = std::fs::canonicalize(dir).map_err(|e| io_error("open bucket directory", dir, e))?;
        let flags = OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = match rustix::fs::open(&path, flags | OFlags::RDONLY, Mode::empty()) {
            Err(Errno::ACCESS) => rustix::fs::open(&path, flags | OFlags::PATH, Mode::empty()),
            opened => opened,
        }
        .map_err(|e| io_error("open bucket directory", &path, e.into()))?;
        let root = Root { fd, path };
        match rustix::fs::mkdirat(&root.fd, TMP_DIR, Mode::from_raw_mode(DIR_MODE)) {
            Ok(()) => {}
            Err(Errno::EXIST) if root.is_dir(TMP_DIR) => {}
            Err(Errno::ROFS | Errno::ACCESS | Errno::PERM) => {}
            Err(e) => return Err(io_error("create staging directory", &root.display(TMP_DIR), e.into())),
        }
        Ok(Arc::new(root))
    }

    /// The directory's canonical path.
    pub(super) fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The absolute path of `rel`, for messages (it may be longer than `PATH_MAX`).
    pub(super) fn display(&self, rel: &str) -> PathBuf {
        if rel.is_empty() { self.path.clone() } else { self.path.join(rel) }
    }

    /// Where a system call reaches `rel` from, and the path it is then given: the root and `rel`
    /// itself, or for a longer key than one call takes, the directory reached by opening its
    /// leading components (as few calls as fit, none of them through a symbolic link) and the rest.
    fn at<'a>(&'a self, rel: &'a str) -> rustix::io::Result<(From<'a>, &'a str)> {
        let mut from = From::Root(self.fd.as_fd());
        let mut rest = rel;
        while rest.len() > MAX_CALL_PATH {
            let cut = rest.as_bytes()[..=MAX_CALL_PATH]
                .iter()
                .rposition(|&b| b == b'/')
                .filter(|&i| i > 0)
                .ok_or(Errno::NAMETOOLONG)?;
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
            from = From::Dir(open_beneath(from.as_fd(), &rest[..cut], flags)?);
            rest = &rest[cut + 1..];
        }
        Ok((from, rest))
    }

    /// Where a system call that changes `rel` (creates, moves or removes it) reaches it from: its
    /// directory, opened not through a symbolic link (see [`open_beneath`]), and its last
    /// component; so no change lands outside the bucket through a link another program left.
    fn parent_of<'a>(&'a self, rel: &'a str) -> rustix::io::Result<(From<'a>, &'a str)> {
        let (from, rest) = self.at(rel)?;
        match rest.rsplit_once('/') {
            None => Ok((from, rest)),
            Some((dir, name)) => {
                let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
                Ok((From::Dir(open_beneath(from.as_fd(), dir, flags)?), name))
            }
        }
    }

    /// `rel` opened for reading, not through a symbolic link (see [`open_beneath`]); without
    /// waiting for a writer where it is a FIFO (the caller checks what it opened).
    pub(super) fn open_file(&self, rel: &str) -> std::io::Result<File> {
        let (from, rel) = self.at(rel)?;
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
        Ok(open_beneath(from.as_fd(), rel, flags)?.into())
    }

    /// Directory `rel` (the root itself if empty) opened for reading its entries or fsyncing it,
    /// not through a symbolic link.
    pub(super) fn open_dir(&self, rel: &str) -> std::io::Result<OwnedFd> {
        let (from, rel) = self.at(rel)?;
        let rel = if rel.is_empty() { "." } else { rel };
        Ok(open_beneath(from.as_fd(), rel, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC)?)
    }

    /// What `rel` (the root itself if empty) is: symbolic links followed (`follow`), or not: then
    /// a link at its end is what it is, and one on the way to it an `ELOOP` error (see
    /// [`open_beneath`]).
    pub(super) fn stat(&self, rel: &str, follow: bool) -> std::io::Result<FileInfo> {
        let (from, rel) = self.at(rel)?;
        let rel = if rel.is_empty() { "." } else { rel };
        if follow {
            return Ok(FileInfo::of(&rustix::fs::statat(from, rel, AtFlags::empty())?));
        }
        let fd = open_beneath(from.as_fd(), rel, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC)?;
        Ok(FileInfo::of(&rustix::fs::fstat(&fd)?))
    }

    /// Whether `rel` is a directory (a symbolic link to one is not).
    pub(super) fn is_dir(&self, rel: &str) -> bool {
        self.stat(rel, false).is_ok_and(|i| i.kind == FileType::Directory)
    }

    /// Removes file `rel`, then the directories above it that this left empty, up to the root
    /// (as `LocalFileSystem` with automatic cleanup).
    pub(super) fn remove(&self, rel: &str) -> Result<()> {
        self.unlink(rel).map_err(|e| io_error("delete", &self.display(rel), e))?;
        let mut dir = rel;
        while let Some((up, _)) = dir.rsplit_once('/') {
            let removed = self.parent_of(up).and_then(|(from, up)| rustix::fs::unlinkat(from, up, AtFlags::REMOVEDIR));
            if removed.is_err() {
                break;
            }
            dir = up;
        }
        Ok(())
    }

    /// Removes directory `rel` (not the root) and its marker, if it holds nothing else: no
    /// object, no subdirectory, and none of what the bucket does not show (a socket, a link, a
    /// name that is not UTF-8, a directory under the marker's name), else `ENOTEMPTY` with
    /// nothing changed. A directory another program made has no marker to remove. The
    /// directories above it stay, empty or not, as `rmdir` leaves them.
    pub(super) fn remove_dir(&self, rel: &str) -> Result<()> {
        let fail = |what, e: std::io::Error| io_error(what, &self.display(rel), e);
        let fd = self.open_dir(rel).map_err(|e| fail("remove directory", e))?;
        let mut has_marker = false;
        for entry in Dir::read_from(&fd).map_err(|e| fail("list", e.into()))? {
            let entry = entry.map_err(|e| fail("list", e.into()))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let marker_file = name == DIR_MARKER.as_bytes()
                && rustix::fs::statat(&fd, DIR_MARKER, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile);
            if !marker_file {
                return Err(fail("remove directory", Errno::NOTEMPTY.into()));
            }
            has_marker = true;
        }
        // The marker is moved aside first, and back where the directory cannot go after all (an
        // entry made meanwhile): it keeps its mode, owner and times.
        // (Where it cannot be moved, to a staging directory that is gone or on another
        // filesystem, it is removed.)
        let aside = format!("{TMP_DIR}/rmdir-{:016x}", rand::random::<u64>());
        let moved = has_marker && rustix::fs::renameat(&fd, DIR_MARKER, &self.fd, &aside).is_ok();
        if has_marker && !moved {
            match rustix::fs::unlinkat(&fd, DIR_MARKER, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(fail("remove directory marker in", e.into())),
            }
        }
        let (from, name) = self.parent_of(rel).map_err(|e| fail("remove directory", e.into()))?;
        let removed = match rustix::fs::unlinkat(from, name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(fail("remove directory", e.into())),
        };
        if moved {
            let _ = match removed {
                Ok(()) => rustix::fs::unlinkat(&self.fd, &aside, AtFlags::empty()),
                Err(_) => rustix::fs::renameat(&self.fd, &aside, &fd, DIR_MARKER),
            };
        }
        removed
    }

    /// Runs `make` on a fresh path in the staging directory, recreating the directory if someone
    /// removed it.
    fn make_staged<R>(
        self: &Arc<Self>,
        prefix: &str,
        mut make: impl FnMut(&str) -> std::io::Result<R>,
    ) -> std::io::Result<(R, Staged)> {
        let mut recreated = false;
        let mut tries = 0;
        loop {
            let rel = format!("{TMP_DIR}/{prefix}{:016x}", rand::random::<u64>());
            match make(&rel) {
                Ok(made) => return Ok((made, Staged { root: self.clone(), rel, closed: false })),
                Err(e) if e.kind() == ErrorKind::AlreadyExists && tries < 100 => tries += 1,
                Err(e) if e.kind() == ErrorKind::NotFound && !recreated && !self.is_dir(TMP_DIR) => {
                    match rustix::fs::mkdirat(&self.fd, TMP_DIR, Mode::from_raw_mode(DIR_MODE)) {
                        Ok(()) | Err(Errno::EXIST) => recreated = true,
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A new empty staged file.
    pub(super) fn temp_file(self: &Arc<Self>, prefix: &str) -> Result<(File, Staged)> {
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC;
        let create = |rel: &str| Ok(rustix::fs::openat(&self.fd, rel, flags, Mode::from_raw_mode(FILE_MODE))?.into());
        self.make_staged(prefix, create).map_err(|e| io_error("create staged file in", &self.display(TMP_DIR), e))
    }

    /// A staged copy of `src`: a hard link where the filesystem has them, else a copy of the bytes.
    pub(super) fn copy_of(self: &Arc<Self>, src: &str) -> Result<Staged> {
        let link = |rel: &str| {
            let (from, src) = self.parent_of(src)?;
            Ok(rustix::fs::linkat(from, src, &self.fd, rel, AtFlags::empty())?)
        };
        match self.make_staged("cp-", link) {
            Ok(((), staged)) => return Ok(staged),
            Err(e) if e.kind() == ErrorKind::NotFound => return Err(io_error("copy", &self.display(src), e)),
            Err(_) => {}
        }
        let mut from = self.open_file(src).map_err(|e| io_error("copy", &self.display(src), e))?;
        let (mut file, staged) = self.temp_file("cp-")?;
        std::io::copy(&mut from, &mut file).map_err(|e| io_error("copy", &self.display(src), e))?;
        // A copy is a version of its own (a hard link is the same version under two names).
        super::mark_version(&file).map_err(|e| io_error("set the time of", &staged.display(), e))?;
        file.sync_all().map_err(|e| io_error("sync staged file", &staged.display(), e))?;
        Ok(staged)
    }

    /// Moves a staged file to `target` (refusing to replace an existing one if `noclobber`) and
    /// fsyncs the target's directory. Creates missing parent directories; on failure the staged
    /// file is removed.
    pub(super) fn place(&self, staged: Staged, target: &str, noclobber: bool) -> Result<()> {
        self.place_or_keep(staged, target, noclobber).map_err(|(e, _)| e)
    }

    /// `place`, handing the staged file back when it could not be moved (`None` once it was
    /// moved and only the directory fsync failed).
    pub(super) fn place_or_keep(
        &self,
        staged: Staged,
        target: &str,
        noclobber: bool,
    ) -> std::result::Result<(), (object_store::Error, Option<Staged>)> {
        let mut tries = 0;
        loop {
            if let Err(e) = self.create_parents(target) {
                return Err((e, Some(staged)));
            }
            let placed = self.parent_of(target).and_then(|(to, name)| match noclobber {
                true => self.rename_noreplace(&staged.rel, to.as_fd(), name),
                false => rustix::fs::renameat(&self.fd, &staged.rel, to, name),
            });
            match placed {
                Ok(()) => break,
                // A delete of the last object in the parent directory removed it in between.
                Err(Errno::NOENT) if tries < 3 => tries += 1,
                Err(Errno::EXIST) if noclobber => return Err((already_exists(self.display(target)), Some(staged))),
                Err(e) => return Err((io_error("move staged file to", &self.display(target), e.into()), Some(staged))),
            }
        }
        // Gone once renamed, unless the target was already this file (a copy of a copy: hard
        // links of one inode), where the rename does nothing and the staged name must go.
        drop(staged);
        self.sync_dir(parent(target)).map_err(|e| (e, None))
    }

    /// Moves directory `from` whole, with whatever it holds, to `to`, which must not exist
    /// (creating the directories above it), and syncs the directories both names are in.
    pub(super) fn move_dir(&self, from: &str, to: &str) -> Result<()> {
        let fail = |e: Errno| io_error("move directory", &self.display(from), e.into());
        self.create_parents(to)?;
        let (a, a_name) = self.parent_of(from).map_err(fail)?;
        let (b, b_name) = self.parent_of(to).map_err(fail)?;
        let moved = match rustix::fs::renameat_with(&a, a_name, &b, b_name, RenameFlags::NOREPLACE) {
            // A filesystem without that flag (NFS): the caller has made sure `to` is not there.
            Err(Errno::INVAL | Errno::NOSYS | Errno::NOTSUP) => rustix::fs::renameat(&a, a_name, &b, b_name),
            moved => moved,
        };
        match moved {
            Ok(()) => {}
            Err(Errno::EXIST | Errno::NOTEMPTY) => return Err(already_exists(self.display(to))),
            Err(e) => return Err(fail(e)),
        }
        self.sync_dir(parent(from))?;
        self.sync_dir(parent(to))
    }

    /// `renameat2(RENAME_NOREPLACE)`, or a hard link and an unlink where the filesystem has no
    /// such rename.
    fn rename_noreplace(&self, from: &str, dir: BorrowedFd<'_>, to: &str) -> rustix::io::Result<()> {
        match rustix::fs::renameat_with(&self.fd, from, dir, to, RenameFlags::NOREPLACE) {
            Err(Errno::INVAL | Errno::NOSYS | Errno::NOTSUP) => {
                rustix::fs::linkat(&self.fd, from, dir, to, AtFlags::empty())?;
                let _ = rustix::fs::unlinkat(&self.fd, from, AtFlags::empty());
                Ok(())
            }
            renamed => renamed,
        }
    }

    /// Creates the missing directories above `target`, one component at a time, fsyncing each
    /// one's parent so that the new entry survives a crash.
    fn create_parents(&self, target: &str) -> Result<()> {
        let Some((dir, _)) = target.rsplit_once('/') else { return Ok(()) };
        let mut missing = Vec::new();
        let mut dir = Some(dir);
        while let Some(d) = dir {
            if self.is_dir(d) {
                break;
            }
            missing.push(d);
            dir = d.rsplit_once('/').map(|(up, _)| up);
        }
        for d in missing.into_iter().rev() {
            let made = self
                .parent_of(d)
                .and_then(|(from, name)| rustix::fs::mkdirat(from, name, Mode::from_raw_mode(DIR_MODE)));
            match made {
                Ok(()) => self.sync_dir(parent(d))?,
                Err(Errno::EXIST) if self.is_dir(d) => {}
                Err(e) => return Err(io_error("create directory", &self.display(d), e.into())),
            }
        }
        Ok(())
    }

    /// fsyncs directory `rel` so that entries just added to it survive a crash.
    fn sync_dir(&self, rel: &str) -> Result<()> {
        match self.open_dir(rel).and_then(|d| Ok(rustix::fs::fsync(d)?)) {
            Ok(()) => Ok(()),
            // Some filesystems cannot fsync a directory; their renames are as durable as they get.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOTSUP)) => Ok(()),
            Err(e) => Err(io_error("sync directory", &self.display(rel), e)),
        }
    }

    /// Removes file `rel` (an object, or a staged file's leftover).
    pub(super) fn unlink(&self, rel: &str) -> std::io::Result<()> {
        let (from, rel) = self.parent_of(rel)?;
        Ok(rustix::fs::unlinkat(from, rel, AtFlags::empty())?)
    }
}

/// The directory part of `rel` ("" for the root).
fn parent(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(up, _)| up)
}

/// A file in the staging directory, removed when dropped (if still there).
#[derive(Debug)]
pub(super) struct Staged {
    root: Arc<Root>,
    /// Its path from the root.
    rel: String,
    /// Removed already.
    closed: bool,
}

impl Staged {
    /// Its absolute path, for messages.
    pub(super) fn display(&self) -> PathBuf {
        self.root.display(&self.rel)
    }

    /// Removes it now, saying why it could not be.
    pub(super) fn close(mut self) -> std::io::Result<()> {
        self.closed = true;
        self.root.unlink(&self.rel)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.closed {
            let _ = self.root.unlink(&self.rel);
        }
    }
}

/// What a file's `stat` says that an object's metadata is made of.
#[derive(Debug, Clone, Copy)]
pub(super) struct FileInfo {
    pub(super) kind: FileType,
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) size: u64,
    pub(super) mtime: SystemTime,
}

impl FileInfo {
    // The fields' types differ between targets (`c_ulong`, `u64`…).
    #[allow(clippy::unnecessary_cast)]
    pub(super) fn of(st: &Stat) -> FileInfo {
        let mtime = crate::stamp::time((st.st_mtime as i64, st.st_mtime_nsec as u32));
        FileInfo {
            kind: FileType::from_raw_mode(st.st_mode as _),
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            size: u64::try_from(st.st_size).unwrap_or(0),
            mtime,
        }
    }

    /// The `stat` of an open file.
    pub(super) fn of_file(file: &File) -> std::io::Result<FileInfo> {
        Ok(FileInfo::of(&rustix::fs::fstat(file)?))
    }

    /// `LocalFileSystem`'s ETag (local.rs `get_etag`): inode, mtime in µs and size, in hex.
    pub(super) fn e_tag(&self) -> String {
        let mtime = self.mtime.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_micros();
        format!("{:x}-{mtime:x}-{:x}", self.ino, self.size)
    }

    /// The object it is at `location`, as `LocalFileSystem` describes it.
    pub(super) fn meta(&self, location: Path) -> ObjectMeta {
        ObjectMeta {
            location,
            last_modified: self.mtime.into(),
            size: self.size,
            e_tag: Some(self.e_tag()),
            version: None,
        }
    }
}
