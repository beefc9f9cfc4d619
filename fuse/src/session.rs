//! Mounting: the fuser session for a `Fs`, with the mount options an operator asks for.

use std::path::Path;
use std::sync::Arc;

use fuser::{Config, MountOption, Session, SessionACL};

use crate::adapter::FuseAdapter;
use crate::fs::Fs;

/// How the kernel should see the mount.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Name shown in /proc/mounts (the source).
    pub fs_name: String,
    /// Read-only mount.
    pub read_only: bool,
    /// Let other users access the mount (needs `user_allow_other` in /etc/fuse.conf for non-root).
    pub allow_other: bool,
    /// Threads reading kernel requests.
    pub threads: usize,
}

/// Mounts `fs` at `mountpoint`; the returned session serves requests when run.
pub fn mount(
    fs: Arc<Fs>,
    rt: tokio::runtime::Handle,
    mountpoint: &Path,
    opts: &MountOptions,
) -> std::io::Result<Session<FuseAdapter>> {
    let mut mount_options = vec![
        MountOption::FSName(opts.fs_name.clone()),
        MountOption::Subtype("shrinkfs".into()),
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    mount_options.push(if opts.read_only { MountOption::RO } else { MountOption::RW });
    let mut config = Config::default();
    config.mount_options = mount_options;
    config.acl = if opts.allow_other { SessionACL::All } else { SessionACL::Owner };
    config.n_threads = Some(opts.threads.max(1));
    config.clone_fd = true;
    Session::new(FuseAdapter::new(fs, rt), mountpoint, &config)
}

/// Readahead the kernel does for the mount, in KiB: as much as the mount allows per request
/// (`max_readahead`, 1 MiB), where the kernel's default for a FUSE mount is 128 KiB, so a
/// sequential reader sends a eighth of the requests.
pub const READAHEAD_KIB: u32 = 1024;

/// Sets the kernel's readahead for the FUSE mount at `mountpoint` (its bdi's `read_ahead_kb`,
/// found through /proc/self/mountinfo, so nothing asks the mount itself). Needs root.
pub fn set_readahead(mountpoint: &Path, kib: u32) -> std::io::Result<()> {
    let want = std::fs::canonicalize(mountpoint)?;
    let escaped: String = want
        .to_string_lossy()
        .chars()
        .map(|c| match c {
            ' ' | '\t' | '\n' | '\\' => format!("\\{:03o}", c as u32),
            c => c.to_string(),
        })
        .collect();
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    // The last entry for the path is the mount on top (the one just made).
    let dev = info
        .lines()
        .rev()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.get(4) == Some(&escaped.as_str())).then(|| f.get(2).map(|d| d.to_string())).flatten()
        })
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "mount not in /proc/self/mountinfo"))?;
    std::fs::write(format!("/sys/class/bdi/{dev}/read_ahead_kb"), kib.to_string())
}

/// Unmounts `mountpoint`: umount(2) as root, else `fusermount3 -u` / `fusermount -u`.
pub fn unmount(mountpoint: &Path) -> Result<(), String> {
    let c = std::ffi::CString::new(mountpoint.as_os_str().as_encoded_bytes()).map_err(|_| "bad path".to_string())?;
    // SAFETY: c is a valid NUL-terminated path.
    let rc = unsafe { libc::umount2(c.as_ptr(), 0) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EPERM) => {}
        Some(libc::EINVAL) => return Err(format!("{} is not a mount point", mountpoint.display())),
        Some(libc::EBUSY) => {
            return Err(format!("{} is busy (files open or a process inside it)", mountpoint.display()));
        }
        _ => return Err(format!("{}: {err}", mountpoint.display())),
    }
    for tool in ["fusermount3", "fusermount"] {
        if let Ok(out) = std::process::Command::new(tool).arg("-u").arg(mountpoint).output() {
            if out.status.success() {
                return Ok(());
            }
            return Err(crate::store::one_line(&String::from_utf8_lossy(&out.stderr)));
        }
    }
    Err(format!("{}: {err} (and no fusermount3 found)", mountpoint.display()))
}
