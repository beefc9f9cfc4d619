//! The kernel side of a mount: mounting `/dev/fuse` at a directory (mount(2) as root, the
//! setuid `fusermount3` otherwise), knowing which mount is this process's own connection, and
//! unmounting only that one — never "whatever is mounted at this path now".

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};

/// The filesystem type in /proc/mounts (`findmnt -t fuse.shrinkfs`).
pub const FS_TYPE: &str = "fuse.shrinkfs";

/// The access-time option the mount is made with. shrinkfs stores access times but reads never
/// change them (that would rewrite objects), so `noatime` is the default and the truth; the
/// others are accepted for fstab lines that name them, with a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Atime {
    /// Only when older than the modification time or a day (the kernel's default elsewhere).
    Relatime,
    /// Never (shrinkfs's default).
    #[default]
    Noatime,
    /// On every access.
    Strictatime,
}

/// How the kernel should see the mount: the generic options of mount(8).
#[derive(Debug, Clone)]
pub struct KernelOptions {
    /// The source shown in /proc/mounts.
    pub fs_name: String,
    /// Read-only.
    pub read_only: bool,
    /// Let other users in (the kernel then checks permissions: `default_permissions`).
    pub allow_other: bool,
    /// Refuse to execute programs.
    pub noexec: bool,
    /// Ignore set-user-ID and set-group-ID bits (on unless `suid` is asked for, as root).
    pub nosuid: bool,
    /// Refuse device nodes (on unless `dev` is asked for, as root).
    pub nodev: bool,
    /// Access times.
    pub atime: Atime,
    /// No access times on directories.
    pub nodiratime: bool,
    /// Synchronous writes.
    pub sync: bool,
    /// Synchronous directory changes.
    pub dirsync: bool,
    /// The kernel caches writes (`FUSE_WRITEBACK_CACHE`).
    pub writeback_cache: bool,
}

impl KernelOptions {
    /// The safe defaults: read-write, `nosuid`, `nodev`, `noatime`, owner-only access.
    pub fn new(fs_name: &str) -> Self {
        KernelOptions {
            fs_name: fs_name.to_owned(),
            read_only: false,
            allow_other: false,
            noexec: false,
            nosuid: true,
            nodev: true,
            atime: Atime::Noatime,
            nodiratime: false,
            sync: false,
            dirsync: false,
            writeback_cache: false,
        }
    }

    /// The mount(2) flags.
    pub fn flags(&self) -> MsFlags {
        let mut f = MsFlags::empty();
        for (on, flag) in [
            (self.read_only, MsFlags::MS_RDONLY),
            (self.noexec, MsFlags::MS_NOEXEC),
            (self.nosuid, MsFlags::MS_NOSUID),
            (self.nodev, MsFlags::MS_NODEV),
            (self.atime == Atime::Noatime, MsFlags::MS_NOATIME),
            (self.atime == Atime::Strictatime, MsFlags::MS_STRICTATIME),
            (self.atime == Atime::Relatime, MsFlags::MS_RELATIME),
            (self.nodiratime, MsFlags::MS_NODIRATIME),
            (self.sync, MsFlags::MS_SYNCHRONOUS),
            (self.dirsync, MsFlags::MS_DIRSYNC),
        ] {
            if on {
                f |= flag;
            }
        }
        f
    }

    /// The same options as `fusermount3 -o` words.
    fn fusermount_words(&self) -> Vec<String> {
        let mut w = vec![
            format!("fsname={}", self.fs_name.replace(',', "\\,")),
            "subtype=shrinkfs".into(),
            "default_permissions".into(),
        ];
        let flags = [
            (self.read_only, "ro"),
            (!self.read_only, "rw"),
            (self.noexec, "noexec"),
            (self.nosuid, "nosuid"),
            (!self.nosuid, "suid"),
            (self.nodev, "nodev"),
            (!self.nodev, "dev"),
            (self.atime == Atime::Noatime, "noatime"),
            (self.atime == Atime::Strictatime, "strictatime"),
            (self.nodiratime, "nodiratime"),
            (self.sync, "sync"),
            (self.dirsync, "dirsync"),
            (self.allow_other, "allow_other"),
        ];
        w.extend(flags.iter().filter(|(on, _)| *on).map(|(_, s)| s.to_string()));
        w
    }
}

/// One line of /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// The superblock's device number (major, minor): what identifies a FUSE connection.
    pub dev: (u32, u32),
    /// Where it is mounted.
    pub mountpoint: PathBuf,
    /// Filesystem type, e.g. `fuse.shrinkfs`.
    pub fstype: String,
    /// Source, e.g. the bucket.
    pub source: String,
    /// The mount's own options (`rw,nosuid,nodev,noexec,noatime`).
    pub options: Vec<String>,
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        if b[i] == b'\\'
            && let Some(d) = octal
        {
            out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8).wrapping_add(c - b'0')));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Parses mountinfo text; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let (major, minor) = f.get(2)?.split_once(':')?;
            let mut r = right.split(' ');
            let fstype = r.next()?.to_owned();
            let source = String::from_utf8_lossy(&unescape(r.next().unwrap_or_default())).into_owned();
            Some(MountEntry {
                dev: (major.parse().ok()?, minor.parse().ok()?),
                mountpoint: PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(f.get(4)?))),
                fstype,
                source,
                options: f.get(5)?.split(',').map(str::to_owned).collect(),
            })
        })
        .collect()
}

/// The mount on top at `path` (the last one mounted there), if any.
pub fn mount_at(path: &Path) -> io::Result<Option<MountEntry>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(parse_mountinfo(&text).into_iter().rev().find(|m| m.mountpoint == path))
}

/// `path` made absolute without asking the filesystem mounted there (a dead FUSE mount answers
/// every stat with ENOTCONN): its parent is resolved and its name appended.
pub fn absolute(path: &Path) -> io::Result<PathBuf> {
    match std::fs::canonicalize(path) {
        Ok(p) => Ok(p),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            let name = path.file_name().ok_or(e)?;
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            Ok(std::fs::canonicalize(parent)?.join(name))
        }
        Err(e) => Err(e),
    }
}

/// Why a directory cannot be mounted on.
#[derive(Debug, thiserror::Error)]
pub enum MountpointError {
    /// Something is mounted there already.
    #[error("{path} is already a mount point ({fstype} from {from}); unmount it first", path = .path.display())]
    Busy {
        /// The directory.
        path: PathBuf,
        /// Its mount's type.
        fstype: String,
        /// Its mount's source.
        from: String,
    },
    /// It cannot be looked at.
    #[error("mount point {}: {source}", path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// It is not a directory.
    #[error("mount point {} is not a directory", .0.display())]
    NotDir(PathBuf),
}

/// Checks that `path` is a directory nothing is mounted on, and returns it absolute. A dead FUSE
/// mount there (its server gone: every access fails with ENOTCONN, as after a crash) is detached
/// first, so a restarted service recovers by itself; a live mount of any kind is refused.
pub fn prepare(path: &Path) -> Result<PathBuf, MountpointError> {
    let io = |source| MountpointError::Io { path: path.to_owned(), source };
    let abs = absolute(path).map_err(io)?;
    if let Some(m) = mount_at(&abs).map_err(io)? {
        // (`statfs`, which the kernel always asks the filesystem: a `stat` may be answered from
        // attributes it still holds, for a while after the process died.)
        let dead = m.fstype.starts_with("fuse") && nix::sys::statvfs::statvfs(&abs) == Err(nix::errno::Errno::ENOTCONN);
        if !dead {
            return Err(MountpointError::Busy { path: abs, fstype: m.fstype, from: m.source });
        }
        tracing::warn!(mountpoint = %abs.display(), source = %m.source, "clearing a dead FUSE mount (its process is gone)");
        detach_path(&abs).map_err(io)?;
    }
    let meta = std::fs::metadata(&abs).map_err(io)?;
    if !meta.is_dir() {
        return Err(MountpointError::NotDir(abs));
    }
    Ok(abs)
}

/// Held while one process checks a mount point is free and mounts there: two mounts started at
/// once on one directory (a service and an fstab `mount -a`) would otherwise both find it free
/// and stack. An exclusive `flock` of the mount point's parent directory, which a mount on the
/// mount point does not cover; released when dropped.
pub struct MountpointLock(#[allow(dead_code)] Option<std::fs::File>);

/// Takes the [`MountpointLock`] of absolute mount point `path`, then checks nothing is mounted
/// there since [`prepare`] (a mount that raced this one). Where the parent cannot be locked
/// (no `flock` there), the check alone runs.
pub fn claim(path: &Path) -> Result<MountpointLock, MountpointError> {
    let io = |source| MountpointError::Io { path: path.to_owned(), source };
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("/"));
    let lock = std::fs::File::open(parent)
        .ok()
        .filter(|dir| rustix::fs::flock(dir, rustix::fs::FlockOperation::LockExclusive).is_ok());
    if let Some(m) = mount_at(path).map_err(io)? {
        return Err(MountpointError::Busy { path: path.to_owned(), fstype: m.fstype, from: m.source });
    }
    Ok(MountpointLock(lock))
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Lazily detaches whatever is at `path` (umount2 MNT_DETACH, or `fusermount3 -u -z`).
fn detach_path(path: &Path) -> io::Result<()> {
    match nix::mount::umount2(path, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EPERM) => fusermount(&["-u", "-z", "--"], path),
        Err(e) => Err(e.into()),
    }
}

fn fusermount(args: &[&str], path: &Path) -> io::Result<()> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "neither fusermount3 nor fusermount is installed");
    for tool in ["fusermount3", "fusermount"] {
        match std::process::Command::new(tool).args(args).arg(path).stdin(std::process::Stdio::null()).output() {
            Ok(out) if out.status.success() => return Ok(()),
            Ok(out) => {
                let msg = String::from_utf8_lossy(&out.stderr);
                let msg = msg.lines().next().unwrap_or("failed").trim().to_owned();
                let kind = if msg.contains("busy") { io::ErrorKind::ResourceBusy } else { io::ErrorKind::Other };
                return Err(io::Error::new(kind, format!("{tool}: {msg}")));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// This process's mount: where it is and which FUSE connection it is.
#[derive(Debug, Clone)]
pub struct Connection {
    mountpoint: PathBuf,
    dev: (u32, u32),
}

/// Why an unmount did not happen.
#[derive(Debug, thiserror::Error)]
pub enum UnmountError {
    /// Files are open or a process has its directory inside.
    #[error("{} is busy (files open or a process inside it)", .0.display())]
    Busy(PathBuf),
    /// The mount is no longer at the path (detached with `umount -l`, or unmounted).
    #[error("no shrinkfs mount of this process is at {}", .0.display())]
    NotMounted(PathBuf),
    /// What is mounted there is not a shrinkfs mount.
    #[error("{} is not a shrinkfs mount ({fstype}); use umount", path.display())]
    NotShrinkfs {
        /// The mount point.
        path: PathBuf,
        /// What is mounted there.
        fstype: String,
    },
    /// Anything else.
    #[error("cannot unmount {}: {source}", path.display())]
    Io {
        /// The mount point.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl Connection {
    /// Where it was mounted (absolute).
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The connection's device number (major, minor), as in /proc/self/mountinfo.
    pub fn dev(&self) -> (u32, u32) {
        self.dev
    }

    /// Whether the mount on top at the mount point is this connection.
    pub fn is_mounted(&self) -> bool {
        mount_at(&self.mountpoint).ok().flatten().is_some_and(|m| m.dev == self.dev)
    }

    /// Unmounts this connection if it is the mount on top at its mount point; never touches a
    /// mount made there by someone else. (Between the check and umount(2) another mount could be
    /// stacked on top in the same instant; nothing in the kernel's API closes that gap.)
    pub fn unmount(&self) -> Result<(), UnmountError> {
        if !self.is_mounted() {
            return Err(UnmountError::NotMounted(self.mountpoint.clone()));
        }
        let res = match nix::mount::umount2(&self.mountpoint, MntFlags::UMOUNT_NOFOLLOW) {
            Ok(()) => Ok(()),
            Err(nix::errno::Errno::EPERM) => fusermount(&["-u", "--"], &self.mountpoint),
            Err(e) => Err(e.into()),
        };
        res.map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY) => UnmountError::Busy(self.mountpoint.clone()),
            _ if e.kind() == io::ErrorKind::ResourceBusy => UnmountError::Busy(self.mountpoint.clone()),
            _ => UnmountError::Io { path: self.mountpoint.clone(), source: e },
        })
    }

    /// Detaches this connection from its mount point now, even while busy (processes inside keep
    /// what they have open until they let go); nothing when it is not ours.
    pub fn detach(&self) -> io::Result<()> {
        if self.is_mounted() { detach_path(&self.mountpoint) } else { Ok(()) }
    }
}

/// The shrinkfs mount on top at `path` (for `shrinkfs unmount`): anything else mounted there is
/// refused. Once unmounted, its process stores what is pending and exits.
pub fn shrinkfs_at(path: &Path) -> Result<Connection, UnmountError> {
    let abs = absolute(path).map_err(|source| UnmountError::Io { path: path.to_owned(), source })?;
    match mount_at(&abs).map_err(|source| UnmountError::Io { path: abs.clone(), source })? {
        None => Err(UnmountError::NotMounted(abs)),
        Some(m) if m.fstype != FS_TYPE => Err(UnmountError::NotShrinkfs { path: abs, fstype: m.fstype }),
        Some(m) => Ok(Connection { mountpoint: abs, dev: m.dev }),
    }
}

/// Opens `/dev/fuse` and mounts it at `mountpoint` (absolute, from [`prepare`]): with mount(2)
/// as root, type [`FS_TYPE`]; through `fusermount3` otherwise. Returns the device descriptor to
/// serve and the connection it is.
pub fn mount(mountpoint: &Path, opts: &KernelOptions) -> io::Result<(OwnedFd, Connection)> {
    let fd = match mount_syscall(mountpoint, opts) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => mount_fusermount(mountpoint, opts)?,
        other => other?,
    };
    // The entry just made is the one on top at the path.
    let entry = mount_at(mountpoint)?
        .filter(|m| m.fstype.starts_with("fuse"))
        .ok_or_else(|| io::Error::other("the new mount is not in /proc/self/mountinfo"))?;
    Ok((fd, Connection { mountpoint: mountpoint.to_owned(), dev: entry.dev }))
}

fn mount_syscall(mountpoint: &Path, opts: &KernelOptions) -> io::Result<OwnedFd> {
    let fd: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| io::Error::new(e.kind(), format!("/dev/fuse: {e} (is the fuse module loaded?)")))?
        .into();
    let mut data = format!(
        "fd={},rootmode=40000,user_id={},group_id={},default_permissions",
        fd.as_raw_fd(),
        nix::unistd::getuid(),
        nix::unistd::getgid()
    );
    if opts.allow_other {
        data.push_str(",allow_other");
    }
    let source = cpath(Path::new(&opts.fs_name)).unwrap_or_else(|_| c"shrinkfs".to_owned());
    nix::mount::mount(Some(source.as_c_str()), mountpoint, Some(FS_TYPE), opts.flags(), Some(data.as_str()))?;
    Ok(fd)
}

/// Mounts through the setuid `fusermount3`, which sends the opened `/dev/fuse` back over a
/// socket named by `_FUSE_COMMFD` (the protocol libfuse uses).
fn mount_fusermount(mountpoint: &Path, opts: &KernelOptions) -> io::Result<OwnedFd> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType};
    let (ours, theirs) = nix::sys::socket::socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::empty())?;
    nix::fcntl::fcntl(&ours, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))?;
    let words = opts.fusermount_words().join(",");
    let mut last = io::Error::new(io::ErrorKind::NotFound, "fusermount3 is not installed (apt-get install fuse3)");
    for tool in ["fusermount3", "fusermount"] {
        let child = std::process::Command::new(tool)
            .arg("-o")
            .arg(&words)
            .arg("--")
            .arg(mountpoint)
            .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                last = e;
                break;
            }
        };
        let out = child.wait_with_output()?;
        if !out.status.success() {
            let msg = String::from_utf8_lossy(&out.stderr);
            return Err(io::Error::other(format!("{tool}: {}", msg.lines().next().unwrap_or("failed").trim())));
        }
        return received_fd(&ours)?.ok_or_else(|| io::Error::other(format!("{tool} sent no /dev/fuse descriptor")));
    }
    Err(last)
}

/// The descriptor sent over `socket` (`SCM_RIGHTS`), if the message carried one. rustix hands it
/// over as an `OwnedFd`: no raw descriptor is adopted.
fn received_fd(socket: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut buf = [0u8; 8];
    let mut iov = [io::IoSliceMut::new(&mut buf)];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    rustix::net::recvmsg(socket, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)?;
    for c in control.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = c
            && let Some(fd) = fds.next()
        {
            return Ok(Some(fd));
        }
    }
    Ok(None)
}

/// Remounts `mountpoint` with the generic options of `opts` (`mount -o remount,ro`): the
/// kernel changes its flags, the serving process goes on.
pub fn remount(mountpoint: &Path, opts: &KernelOptions) -> io::Result<()> {
    nix::mount::mount(None::<&str>, mountpoint, None::<&str>, opts.flags() | MsFlags::MS_REMOUNT, None::<&str>)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_sent_over_the_socket_is_received_owned() {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType};
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        use std::io::{Read, Seek, Write};
        let (ours, theirs) =
            nix::sys::socket::socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::empty()).unwrap();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"sent").unwrap();
        let fds = [std::os::fd::AsFd::as_fd(&file)];
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
        rustix::net::sendmsg(&theirs, &[io::IoSlice::new(b"\0")], &mut control, SendFlags::empty()).unwrap();
        let mut got = std::fs::File::from(received_fd(&ours).unwrap().expect("a descriptor"));
        got.rewind().unwrap();
        let mut s = String::new();
        got.read_to_string(&mut s).unwrap();
        assert_eq!(s, "sent");
        // A message without one.
        rustix::net::sendmsg(
            &theirs,
            &[io::IoSlice::new(b"\0")],
            &mut SendAncillaryBuffer::default(),
            SendFlags::empty(),
        )
        .unwrap();
        assert!(received_fd(&ours).unwrap().is_none());
    }

    #[test]
    fn mountinfo_lines_parse_with_escapes() {
        let text = "36 35 98:0 /mnt1 /mnt/my\\040dir rw,noatime master:1 - ext3 /dev/root rw\n\
                    40 36 0:52 / /mnt/b rw,nosuid,nodev - fuse.shrinkfs s3://b/p rw,user_id=0\n\
                    garbage\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mountpoint, Path::new("/mnt/my dir"));
        assert_eq!(m[0].dev, (98, 0));
        assert_eq!(m[1].fstype, FS_TYPE);
        assert_eq!(m[1].source, "s3://b/p");
        assert_eq!(m[1].dev, (0, 52));
        assert_eq!(m[1].options, ["rw", "nosuid", "nodev"]);
    }

    #[test]
    fn generic_options_become_flags_and_fusermount_words() {
        let mut o = KernelOptions::new("s3://a,b");
        o.noexec = true;
        o.atime = Atime::Noatime;
        o.read_only = true;
        let f = o.flags();
        assert!(f.contains(MsFlags::MS_NOEXEC | MsFlags::MS_NOATIME | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID));
        assert!(!f.contains(MsFlags::MS_RELATIME));
        let w = o.fusermount_words();
        assert!(w.contains(&"fsname=s3://a\\,b".to_string()) && w.contains(&"noexec".to_string()), "{w:?}");
        assert!(w.contains(&"ro".to_string()) && !w.contains(&"rw".to_string()));
    }
}
