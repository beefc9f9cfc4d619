//! Serving a mount: the fuser session over this process's own FUSE connection, the kernel's
//! readahead for it, and the notifications that make the kernel forget what it cached.

use std::path::Path;
use std::sync::Arc;

use fuser::{Config, Session, SessionACL};

use crate::adapter::FuseAdapter;
use crate::connection::{self, Connection, KernelOptions};
use crate::fs::Fs;

/// Mounts `fs` at `mountpoint` (absolute, checked by [`connection::prepare`]) and completes the
/// FUSE handshake; the returned session serves requests when run, and the connection is what
/// this process may unmount.
pub fn mount(
    fs: Arc<Fs>,
    rt: tokio::runtime::Handle,
    mountpoint: &Path,
    opts: &KernelOptions,
    threads: usize,
) -> std::io::Result<(Session<FuseAdapter>, Connection)> {
    let (fd, conn) = connection::mount(mountpoint, opts)?;
    let mut config = Config::default();
    config.acl = if opts.allow_other { SessionACL::All } else { SessionACL::Owner };
    config.n_threads = Some(threads.max(1));
    config.clone_fd = true;
    let adapter = FuseAdapter::new(fs.clone(), rt).with_writeback_cache(opts.writeback_cache);
    match Session::from_fd(adapter, fd, config.acl, config) {
        Ok(session) => {
            fs.set_kernel_cache(Arc::new(Kernel(session.notifier())));
            Ok((session, conn))
        }
        Err(e) => {
            // The kernel mount exists but nothing will serve it: take it away again.
            let _ = conn.detach();
            Err(e)
        }
    }
}

/// The kernel's caches of this mount, cleared through FUSE's notifications.
struct Kernel(fuser::Notifier);

impl crate::fs::KernelCache for Kernel {
    fn forget_entry(&self, parent: u64, name: &str) {
        match self.0.inval_entry(fuser::INodeNo(parent), std::ffi::OsStr::new(name)) {
            // Not known to the kernel: nothing to forget.
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => tracing::debug!(parent, name, error = %e, "the kernel was not told to forget a name"),
        }
    }
}

/// Readahead the kernel does for the mount, in KiB: as much as the mount allows per request
/// (`max_readahead`, 1 MiB), where the kernel's default for a FUSE mount is 128 KiB, so a
/// sequential reader sends a eighth of the requests.
pub const READAHEAD_KIB: u32 = 1024;

/// Sets the kernel's readahead for the mount `conn` (its bdi's `read_ahead_kb`, named by the
/// connection's device number, so nothing asks the mount itself). Needs root.
pub fn set_readahead(conn: &Connection, kib: u32) -> std::io::Result<()> {
    let (major, minor) = conn.dev();
    std::fs::write(format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb"), kib.to_string())
}
