//! The fuser adapter: each kernel request is "instrument, call the core, reply" — nothing else.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig, LockOwner,
    OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::fs::{FileAttrs, Fs, SetAttr};
use crate::inode::Kind;
use crate::upload::Taken;
use shrinkfs_codec::format::{S_IFCHR, S_IFIFO, S_IFSOCK};

/// Readahead and write-back requests the kernel may have in flight at once (its default is 12).
pub const MAX_BACKGROUND: u16 = 64;

/// Serves a `Fs` to the kernel.
pub struct FuseAdapter {
    fs: Arc<Fs>,
    rt: tokio::runtime::Handle,
    /// How long the kernel may keep entries and attributes (the metadata TTL, at most a year).
    ttl: Duration,
    /// How long the kernel may keep a name as absent (the negative TTL, at most a year).
    negative_ttl: Duration,
    writeback_cache: bool,
    /// The kernel took `FUSE_DIRECT_IO_ALLOW_MMAP` (6.6 and later): only then do handles go
    /// around its page cache (`Fs::direct_io`), since on older kernels a shared mapping of such
    /// a handle fails.
    direct_io: bool,
}

/// The longest time the kernel is told to cache anything (an `indefinite` TTL): its timeouts
/// are counted in jiffies, which a larger number of seconds would overflow.
pub const KERNEL_TTL_MAX: Duration = Duration::from_secs(365 * 86_400);

impl std::fmt::Debug for FuseAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FuseAdapter({:?})", self.fs)
    }
}

fn kind(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Special(t) => match t {
            S_IFIFO => FileType::NamedPipe,
            S_IFSOCK => FileType::Socket,
            S_IFCHR => FileType::CharDevice,
            _ => FileType::BlockDevice,
        },
    }
}

fn attr(a: &FileAttrs) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.mtime,
        kind: kind(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: 128 * 1024,
        flags: 0,
    }
}

fn errno(e: &Error) -> Errno {
    Errno::from_i32(e.errno())
}

fn name(n: &OsStr) -> Result<&str> {
    n.to_str().ok_or(Error::NotUtf8("file names"))
}

impl FuseAdapter {
    /// An adapter running core futures on `rt`.
    pub fn new(fs: Arc<Fs>, rt: tokio::runtime::Handle) -> Self {
        let ns = &fs.config().namespace;
        let (ttl, negative_ttl) = (ns.metadata_ttl.min(KERNEL_TTL_MAX), ns.negative_ttl.min(KERNEL_TTL_MAX));
        FuseAdapter { fs, rt, ttl, negative_ttl, writeback_cache: false, direct_io: false }
    }

    /// Asks the kernel for write-back caching (`--writeback-cache`): see docs/SEMANTICS.md.
    pub fn with_writeback_cache(mut self, on: bool) -> Self {
        self.writeback_cache = on;
        self
    }

    /// Runs one operation of the core on inode `ino` inside a span, counting it and logging its
    /// failure (naming the file).
    fn run<T>(&self, op: &'static str, ino: u64, f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        self.run_at(op, ino, None, f)
    }

    /// Like [`Self::run`] for an operation on the entry `name` of directory `ino`: a failure names
    /// the entry.
    fn run_at<T>(
        &self,
        op: &'static str,
        ino: u64,
        name: Option<&OsStr>,
        f: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let span = tracing::debug_span!("fuse", op, ino);
        let start = std::time::Instant::now();
        let res = crate::blocking::on_request_thread(|| self.rt.block_on(f.instrument(span)));
        self.fs.metrics().op(op, Error::outcome(&res), start.elapsed());
        if let Err(e) = &res {
            self.fs.log_error(e, op, ino, name.map(|n| n.to_string_lossy()).as_deref());
        }
        res
    }

    /// Whether handle `fh`, just opened (`write_only`: for writing alone), goes around the page
    /// cache: a write-only handle alone on its file, and any handle opened beside one that does
    /// (`Fs::direct_io`); never where the kernel would refuse shared mappings of it. A write
    /// around the cache is one copy from the writer's buffer into the request, with no page
    /// cache to fill (one writer about 2x faster, BENCHMARKS.md §5 round 6).
    fn goes_direct(&self, fh: u64, write_only: bool) -> bool {
        self.direct_io && self.fs.direct_io(fh, write_only)
    }

    fn entry(&self, reply: ReplyEntry, r: Result<FileAttrs>) {
        match r {
            Ok(a) => reply.entry(&self.ttl, &attr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn empty(reply: ReplyEmpty, r: Result<()>) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

fn time(t: Option<TimeOrNow>) -> Option<SystemTime> {
    t.map(|t| match t {
        TimeOrNow::SpecificTime(t) => before_epoch_mended(t),
        TimeOrNow::Now => SystemTime::now(),
    })
}

/// The time the kernel sent, from the `SystemTime` fuser made of it. The kernel sends seconds and
/// nanoseconds (`-1, 250_000_000` for a quarter of a second after 23:59:59 on 31 December 1969);
/// fuser 0.18 subtracts both from the epoch for negative seconds (making it 1.25 s before the
/// epoch, not 0.75), so a time before the epoch with a fraction is mended here: the nanoseconds
/// it subtracted are added back instead.
fn before_epoch_mended(t: SystemTime) -> SystemTime {
    match std::time::UNIX_EPOCH.duration_since(t) {
        Ok(d) if d.subsec_nanos() > 0 => {
            std::time::UNIX_EPOCH - std::time::Duration::from_secs(d.as_secs())
                + std::time::Duration::from_nanos(u64::from(d.subsec_nanos()))
        }
        _ => t,
    }
}

impl Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Larger requests mean fewer round trips; the kernel caps them at what it supports.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_MAX_PAGES);
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        // The mount clears set-user-ID bits itself (`Fs::clear_suidgid`), so the kernel need not
        // ask for `security.capability` before every write.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        // Listings carry every entry's attributes (READDIRPLUS, always rather than "auto": `ls -l`
        // reads the whole directory before its first stat).
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_DO_READDIRPLUS);
        // Shared mappings of handles that go around the page cache (`Fs::direct_io`), which the
        // kernel (from 6.6) then keeps coherent with their writes; older kernels refuse them.
        self.direct_io = config.add_capabilities(fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP).is_ok();
        if !self.direct_io {
            tracing::info!(
                "the kernel keeps no shared mappings of direct handles: every write goes through its page cache"
            );
        }
        // Readahead and write-back requests the kernel keeps in flight at once.
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_congestion_threshold(MAX_BACKGROUND * 3 / 4);
        if self.writeback_cache {
            // write(2) returns once the kernel's page cache has the bytes; they reach the mount
            // as up to MAX_BACKGROUND requests at once, and close and fsync still wait for the store.
            let _ = config.add_capabilities(fuser::InitFlags::FUSE_WRITEBACK_CACHE);
        }
        Ok(())
    }

    fn destroy(&mut self) {
        let fs = self.fs.clone();
        if let Err(e) = self.rt.block_on(async { fs.flush_all().await }) {
            fs.log_error(&e, "destroy", 1, None);
        }
    }

    fn ioctl(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        // No ioctl is supported; programs probe some on every file (Python's open() asks whether
        // it is a terminal), so the answer "not a terminal/unsupported" is an expected one.
        tracing::debug!(ino = ino.0, cmd, "ioctl not supported");
        reply.error(errno(&Error::NoIoctl));
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEntry) {
        let r = self.run_at("lookup", parent.0, Some(n), async { self.fs.lookup(parent.0, name(n)?).await });
        match r {
            // A negative entry (inode 0): the kernel keeps the name as absent for the negative TTL.
            Err(Error::NotFound) if !self.negative_ttl.is_zero() => {
                let none = FileAttrs {
                    ino: 0,
                    kind: Kind::File,
                    size: 0,
                    blocks: 0,
                    mtime: SystemTime::UNIX_EPOCH,
                    ctime: SystemTime::UNIX_EPOCH,
                    atime: SystemTime::UNIX_EPOCH,
                    perm: 0,
                    uid: 0,
                    gid: 0,
                    rdev: 0,
                    nlink: 0,
                };
                reply.entry(&self.negative_ttl, &attr(&none), Generation(0))
            }
            r => self.entry(reply, r),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.run("getattr", ino.0, self.fs.getattr(ino.0)) {
            Ok(a) => reply.attr(&self.ttl, &attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // With FUSE_HANDLE_KILLPRIV_V2 the core clears set-user-ID bits itself, by who asks.
        let privileged = req.uid() == 0;
        let change = SetAttr { size, mode, uid, gid, atime: time(atime), mtime: time(mtime) };
        match self.run("setattr", ino.0, self.fs.setattr_as(ino.0, change, privileged)) {
            Ok(a) => reply.attr(&self.ttl, &attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.run("readlink", ino.0, self.fs.readlink(ino.0)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, n: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let (uid, gid) = (req.uid(), req.gid());
        let r = self.run_at("mkdir", parent.0, Some(n), async {
            self.fs.mkdir(parent.0, name(n)?, mode & !umask, uid, gid).await
        });
        self.entry(reply, r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        Self::empty(
            reply,
            self.run_at("unlink", parent.0, Some(n), async { self.fs.unlink(parent.0, name(n)?).await }),
        );
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        Self::empty(reply, self.run_at("rmdir", parent.0, Some(n), async { self.fs.rmdir(parent.0, name(n)?).await }));
    }

    fn symlink(&self, req: &Request, parent: INodeNo, n: &OsStr, target: &Path, reply: ReplyEntry) {
        let (uid, gid) = (req.uid(), req.gid());
        let r = self.run_at("symlink", parent.0, Some(n), async {
            use std::os::unix::ffi::OsStrExt;
            self.fs.symlink(parent.0, name(n)?, target.as_os_str().as_bytes(), uid, gid).await
        });
        self.entry(reply, r);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        n: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.run_at("rename", parent.0, Some(n), async {
            if flags.contains(RenameFlags::RENAME_EXCHANGE) || flags.contains(RenameFlags::RENAME_WHITEOUT) {
                return Err(Error::Unsupported("rename exchange/whiteout"));
            }
            let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
            self.fs.rename(parent.0, name(n)?, newparent.0, name(newname)?, no_replace).await
        });
        Self::empty(reply, r);
    }

    fn link(&self, _req: &Request, ino: INodeNo, _newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let r = self.run_at("link", ino.0, Some(newname), async { Err(Error::HardLink) });
        self.entry(reply, r);
    }

    fn mknod(&self, req: &Request, parent: INodeNo, n: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let (uid, gid) = (req.uid(), req.gid());
        let r = self.run_at("mknod", parent.0, Some(n), async {
            self.fs.mknod(parent.0, name(n)?, mode & !umask, rdev, uid, gid).await
        });
        self.entry(reply, r);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let write = flags.acc_mode() != OpenAccMode::O_RDONLY;
        let truncate = flags.0 & libc::O_TRUNC != 0;
        let fh = match self.run("open", ino.0, self.fs.open_as(ino.0, write, truncate, req.uid() == 0)) {
            Ok(fh) => fh,
            Err(e) => return reply.error(errno(&e)),
        };
        if flags.0 & libc::O_DIRECT != 0 {
            self.fs.opened_direct(fh);
        }
        let direct = self.goes_direct(fh, flags.acc_mode() == OpenAccMode::O_WRONLY);
        let mut open = if direct { FopenFlags::FOPEN_DIRECT_IO } else { FopenFlags::empty() };
        if write {
            self.fs.set_owner(fh, process_of(req.pid()));
        } else {
            // Only a writer's close publishes: the kernel need not send a reader's (no FLUSH
            // round trip per read-only close), nor is its opener asked of /proc.
            open |= FopenFlags::FOPEN_NOFLUSH;
            // A reader of the version the kernel cached keeps its pages (`crate::pagecache`).
            if !direct && self.fs.keeps_cache(fh) {
                open |= FopenFlags::FOPEN_KEEP_CACHE;
            }
        }
        reply.opened(FileHandle(fh), open)
    }

    fn create(&self, req: &Request, parent: INodeNo, n: &OsStr, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        let (uid, gid) = (req.uid(), req.gid());
        let r = self.run_at("create", parent.0, Some(n), async {
            self.fs.create(parent.0, name(n)?, mode & !umask, uid, gid).await
        });
        match r {
            Ok((a, fh)) => {
                self.fs.set_owner(fh, process_of(req.pid()));
                let direct = self.goes_direct(fh, flags & libc::O_ACCMODE == libc::O_WRONLY);
                let open = if direct { FopenFlags::FOPEN_DIRECT_IO } else { FopenFlags::empty() };
                reply.created(&self.ttl, &attr(&a), Generation(0), FileHandle(fh), open)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.run("read", ino.0, self.fs.read(fh.0, offset, size)) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        wf: WriteFlags,
        flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let kill = wf.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        // `O_SYNC`/`O_DSYNC`, or any write on a `sync` mount (the kernel flags those `O_DSYNC`
        // too): stored before it is answered. The kernel sends an fsync after such a write only
        // through its page cache, not for a handle that goes around it (a write-only one), so
        // the mount stores the file here; the kernel's fsync, where it comes, then finds nothing
        // left to store.
        let sync = flags.0 & libc::O_DSYNC != 0;
        // Otherwise a write into a streaming upload is answered as soon as its bytes are taken,
        // so the writer's next write travels while these are copied (see `Taken`).
        let n = data.len() as u32;
        let mut reply = Some(reply);
        let mut answer = || {
            if let Some(r) = reply.take() {
                r.written(n);
            }
        };
        // A write from the kernel's page cache: the writer's own call returned long ago, and the
        // kernel will not send these bytes again if they are refused.
        let cached = wf.contains(WriteFlags::FUSE_WRITE_CACHE);
        let r = self.run("write", ino.0, async {
            let r = async {
                if kill {
                    self.fs.clear_suidgid(ino.0).await?;
                }
                if sync {
                    let n = self.fs.write(fh.0, offset, data).await?;
                    self.fs.fsync(fh.0).await?;
                    return Ok(n);
                }
                self.fs.write_answering(fh.0, offset, data, &mut Taken::to(&mut answer)).await
            }
            .await;
            if let (Err(e), true) = (&r, cached) {
                self.fs.write_back_failed(fh.0, e).await;
            }
            r
        });
        // Already answered: nothing after that point fails a write (`Taken`; `run` logged any
        // error, which would be a bug).
        debug_assert!(reply.is_some() || r.is_ok(), "a write failed after it was answered: {r:?}");
        if let Some(reply) = reply {
            match r {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(errno(&e)),
            }
        }
    }

    fn flush(&self, req: &Request, ino: INodeNo, fh: FileHandle, _lock: LockOwner, reply: ReplyEmpty) {
        let by = || process_of(req.pid());
        Self::empty(reply, self.run("flush", ino.0, self.fs.flush_by(fh.0, by, process_alive)));
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        Self::empty(reply, self.run("release", ino.0, self.fs.release(fh.0)));
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        Self::empty(reply, self.run("fsync", ino.0, self.fs.fsync(fh.0)));
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        Self::empty(reply, self.run("fallocate", ino.0, self.fs.fallocate(fh.0, offset, length, mode)));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.run("opendir", ino.0, self.fs.opendir(ino.0)) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: fuser::ReplyDirectoryPlus,
    ) {
        match self.run("readdirplus", ino.0, self.fs.readdirplus(fh.0, ino.0, offset)) {
            Ok(entries) => {
                // Entries past a full buffer were counted as lookups the kernel never saw.
                let mut full = false;
                for (off, e, a, trusted) in entries {
                    if !full {
                        let ttl = if trusted { self.ttl } else { Duration::ZERO };
                        full = reply.add(INodeNo(e.ino), off, &e.name, &ttl, &attr(&a), Generation(0));
                    }
                    if full && e.name != "." && e.name != ".." {
                        self.fs.forget(e.ino, 1);
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        match self.run("readdir", ino.0, self.fs.readdir(fh.0, ino.0, offset)) {
            Ok(entries) => {
                for (next, e) in entries {
                    if reply.add(INodeNo(e.ino), next, kind(e.kind), &e.name) {
                        break;
                    }
                }
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.fs.releasedir(fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        Self::empty(reply, self.run("fsyncdir", ino.0, self.fs.fsyncdir(ino.0)));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.fs.statfs();
        reply.statfs(
            s.blocks,
            s.blocks_free,
            s.blocks_available,
            s.files,
            s.files_free,
            s.block_size,
            s.name_max,
            s.fragment_size,
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, n: &OsStr, size: u32, reply: ReplyXattr) {
        let r = self.run("getxattr", ino.0, async { self.fs.getxattr(ino.0, name(n)?).await });
        xattr_reply(reply, r, size);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        xattr_reply(reply, self.fs.listxattr(ino.0), size);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _n: &OsStr,
        _v: &[u8],
        _flags: i32,
        _pos: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(errno(&Error::Unsupported("setting extended attributes")));
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(errno(&Error::Unsupported("removing extended attributes")));
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        // Permissions are checked by the kernel (default_permissions).
        reply.ok();
    }
}

fn xattr_reply(reply: ReplyXattr, r: Result<Vec<u8>>, size: u32) {
    match r {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(errno(&Error::Range)),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(errno(&e)),
    }
}

/// The process (thread group) of the thread the kernel names in a request.
fn process_of(tid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|st| st.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(tid)
}

/// Whether a process still runs (a zombie does not count).
fn process_alive(pid: u32) -> bool {
    crate::procstat::ProcStat::read(Some(pid)).is_some_and(|s| s.running())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_before_the_epoch_with_a_fraction_are_the_kernels() {
        use std::time::{Duration, UNIX_EPOCH};
        // What fuser 0.18 makes of the kernel's (-1, 250_000_000): 1.25 s before the epoch.
        let from_fuser = UNIX_EPOCH - Duration::new(1, 250_000_000);
        assert_eq!(before_epoch_mended(from_fuser), UNIX_EPOCH - Duration::from_millis(750));
        for t in [UNIX_EPOCH - Duration::from_secs(3), UNIX_EPOCH, UNIX_EPOCH + Duration::new(5, 7)] {
            assert_eq!(before_epoch_mended(t), t, "whole seconds before the epoch, and later times, as they are");
        }
    }
}
