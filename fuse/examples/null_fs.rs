//! A read-only FUSE filesystem of files of one repeated byte, with nothing behind them: the
//! ceiling of reads through FUSE on a host, asked for with the same kernel settings as a shrinkfs
//! mount (1 MiB requests, 1 MiB readahead, 64 background requests, one cloned descriptor per
//! thread). It prints its reads' count and mean size at unmount. Each thread answers from its
//! own written buffer: the kernel pins the pages a reply is copied from, and a buffer never
//! written (a fresh zeroed `Vec`) maps every page to the one shared zero page, whose pinning by
//! many threads at once made 8 readers slower than a real mount (BENCHMARKS.md §9, session 23).
//!
//! Usage: `null_fs MOUNTPOINT FILES SIZE_MIB THREADS` serves `f1` … `fFILES` of `SIZE_MIB` MiB
//! each until unmounted. Needs root (or fusermount3) like any mount; set the mount's
//! `read_ahead_kb` to 1024 as `shrinkfs mount` does before comparing (`scripts/device-s23f.sh`).

use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig,
    LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen, Request, Session,
};

const ROOT: u64 = 1;
const TTL: Duration = Duration::from_secs(3600);
/// The most bytes one read asks for (the kernel's requests are at most 1 MiB here).
const MOST: usize = 1 << 20;

thread_local! {
    /// This thread's reply buffer, written so its pages are its own.
    static REPLY: Vec<u8> = vec![0x5a; MOST];
}

struct Null {
    files: u64,
    size: u64,
    /// Read requests answered, and their bytes (printed at unmount: the kernel's request size).
    reads: AtomicU64,
    bytes: AtomicU64,
}

impl Null {
    fn attr(&self, ino: u64) -> FileAttr {
        let dir = ino == ROOT;
        FileAttr {
            ino: INodeNo(ino),
            size: if dir { 0 } else { self.size },
            blocks: if dir { 0 } else { self.size.div_ceil(512) },
            atime: SystemTime::UNIX_EPOCH,
            mtime: SystemTime::UNIX_EPOCH,
            ctime: SystemTime::UNIX_EPOCH,
            crtime: SystemTime::UNIX_EPOCH,
            kind: if dir { FileType::Directory } else { FileType::RegularFile },
            perm: if dir { 0o555 } else { 0o444 },
            nlink: if dir { 2 } else { 1 },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 128 * 1024,
            flags: 0,
        }
    }

    /// The inode of file `fK`, if K names one.
    fn file(&self, name: &OsStr) -> Option<u64> {
        let k: u64 = name.to_str()?.strip_prefix('f')?.parse().ok()?;
        (1..=self.files).contains(&k).then_some(ROOT + k)
    }

    fn exists(&self, ino: u64) -> bool {
        (ROOT..=ROOT + self.files).contains(&ino)
    }
}

impl Filesystem for Null {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_MAX_PAGES);
        let _ = config.set_max_readahead(1 << 20);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn destroy(&mut self) {
        let (reads, bytes) = (self.reads.load(Relaxed), self.bytes.load(Relaxed));
        eprintln!("null_fs: {reads} reads, {} KiB each on average", bytes / reads.max(1) / 1024);
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.file(name).filter(|_| parent.0 == ROOT) {
            Some(ino) => reply.entry(&TTL, &self.attr(ino), Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if self.exists(ino.0) { reply.attr(&TTL, &self.attr(ino.0)) } else { reply.error(Errno::ENOENT) }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.exists(ino.0) && ino.0 != ROOT {
            reply.opened(FileHandle(0), FopenFlags::empty())
        } else {
            reply.error(Errno::ENOENT)
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let n = self.size.saturating_sub(offset).min(size as u64).min(MOST as u64) as usize;
        self.reads.fetch_add(1, Relaxed);
        self.bytes.fetch_add(n as u64, Relaxed);
        REPLY.with(|buf| reply.data(&buf[..n]))
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if ino.0 != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        for k in offset..self.files {
            if reply.add(INodeNo(ROOT + 1 + k), k + 1, FileType::RegularFile, format!("f{}", k + 1)) {
                break;
            }
        }
        reply.ok()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, mountpoint, files, size_mib, threads] = &args[..] else {
        return Err("usage: null_fs MOUNTPOINT FILES SIZE_MIB THREADS".into());
    };
    let (files, size) = (files.parse()?, size_mib.parse::<u64>()? << 20);
    let fs = Null { files, size, reads: AtomicU64::new(0), bytes: AtomicU64::new(0) };
    let mut config = Config::default();
    config.mount_options = vec![MountOption::FSName("null_fs".into()), MountOption::RO];
    config.n_threads = Some(threads.parse::<usize>()?.max(1));
    config.clone_fd = true;
    Session::new(fs, mountpoint, &config)?.run()?;
    Ok(())
}
