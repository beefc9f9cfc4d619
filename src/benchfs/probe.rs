//! What `bench fs` observes outside its own process: the filesystem process behind a mount point
//! (its CPU time and peak memory), the kernel's caches, and the bytes a backend directory holds.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The process serving a mount point: the one whose command line names it.
pub fn find_fs_process(mount_point: &Path) -> Option<u32> {
    let want = std::fs::canonicalize(mount_point).ok()?;
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let names_it = cmdline
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .filter_map(|a| std::str::from_utf8(a).ok())
            .any(|a| std::fs::canonicalize(a).is_ok_and(|p| p == want));
        if names_it && has_fuse_open(pid) {
            found.push(pid);
        }
    }
    found.into_iter().min()
}

fn has_fuse_open(pid: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == Path::new("/dev/fuse")))
}

/// Whether `dir` is a FUSE mount.
pub fn is_fuse(dir: &Path) -> bool {
    let Ok(canon) = std::fs::canonicalize(dir) else { return false };
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else { return false };
    mounts.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.len() > 2 && Path::new(&f[1].replace("\\040", " ")) == canon && f[2].starts_with("fuse")
    })
}

/// User plus system CPU seconds a process has used.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = shrinkfs_fuse::procstat::ProcStat::read(Some(pid))?;
    let (utime, stime) = (stat.number(14)? as f64, stat.number(15)? as f64);
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / ticks)
}

fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let v = status.lines().find_map(|l| l.strip_prefix(field))?;
    v.trim().trim_end_matches("kB").trim().parse::<u64>().ok().map(|kb| kb * 1024)
}

/// Watches a process's resident memory during one workload and reports its peak.
pub struct PeakMemory {
    pid: u32,
    reset: bool,
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    sampler: Option<std::thread::JoinHandle<()>>,
}

impl PeakMemory {
    /// Starts watching: resets the kernel's high-water mark where allowed (`clear_refs`), and
    /// samples the resident size every 10 ms in any case.
    pub fn start(pid: u32) -> Self {
        let reset = std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok();
        let (peak, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let sampler = {
            let (peak, stop) = (peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(rss) = status_kb(pid, "VmRSS:") {
                        peak.fetch_max(rss, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        PeakMemory { pid, reset, peak, stop, sampler: Some(sampler) }
    }

    /// Stops watching; the peak resident bytes seen.
    pub fn finish(mut self) -> Option<u64> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(s) = self.sampler.take() {
            let _ = s.join();
        }
        let sampled = self.peak.load(Ordering::Relaxed);
        let hwm = if self.reset { status_kb(self.pid, "VmHWM:").unwrap_or(0) } else { 0 };
        Some(sampled.max(hwm)).filter(|&p| p > 0)
    }
}

/// Writes dirty pages back and drops the kernel's page, dentry and inode caches. False (and
/// nothing dropped) without the privilege to do so.
pub fn drop_caches() -> bool {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// Drops the kernel's cached pages of one file (what a filesystem then serves comes from it).
pub fn drop_file_pages(path: &Path) {
    if let Ok(f) = std::fs::File::open(path) {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor; advice only.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// Bookkeeping files some S3 test servers keep beside each object; not the client's bytes.
fn is_server_bookkeeping(name: &str) -> bool {
    name.ends_with("._S3rver_metadata.json") || name.ends_with("._S3rver_object.md5")
}

/// Bytes of the files under `root` whose path relative to it starts with `rel` (a file name
/// prefix, so a backend's renamed objects — `f.bin._S3rver_object`, `f.bin.xyz.gz` — count too).
pub fn stored_bytes(root: &Path, rel: &str) -> u64 {
    let rel = Path::new(rel);
    let (dir, stem) = match (rel.parent(), rel.file_name()) {
        (Some(d), Some(f)) => (root.join(d), f.to_string_lossy().into_owned()),
        _ => (root.to_path_buf(), String::new()),
    };
    let Ok(entries) = std::fs::read_dir(&dir) else { return 0 };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&stem))
        .map(|e| tree_bytes(&e.path()))
        .sum()
}

fn tree_bytes(p: &PathBuf) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(p) else { return 0 };
    if meta.is_dir() {
        std::fs::read_dir(p).map(|es| es.flatten().map(|e| tree_bytes(&e.path())).sum()).unwrap_or(0)
    } else if meta.is_file() && !is_server_bookkeeping(&p.file_name().unwrap_or_default().to_string_lossy()) {
        meta.len()
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_bytes_counts_renamed_objects_and_skips_server_bookkeeping() {
        let t = tempfile::tempdir().unwrap();
        let w = t.path().join("work");
        std::fs::create_dir_all(w.join("small/sub")).unwrap();
        std::fs::write(w.join("seq.bin._S3rver_object"), vec![0; 100]).unwrap();
        std::fs::write(w.join("seq.bin._S3rver_metadata.json"), vec![0; 7]).unwrap();
        std::fs::write(w.join("other.bin"), vec![0; 50]).unwrap();
        std::fs::write(w.join("small/a"), vec![0; 10]).unwrap();
        std::fs::write(w.join("small/sub/b.gz"), vec![0; 5]).unwrap();
        assert_eq!(stored_bytes(t.path(), "work/seq.bin"), 100);
        assert_eq!(stored_bytes(t.path(), "work/small"), 15);
        assert_eq!(stored_bytes(t.path(), "work/missing"), 0);
    }

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let me = std::process::id();
        assert!(cpu_seconds(me).is_some());
        let watch = PeakMemory::start(me);
        std::thread::sleep(Duration::from_millis(30));
        assert!(watch.finish().unwrap() > 1 << 20);
    }
}
