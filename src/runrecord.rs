//! A running mount's record in the runtime directory (`/run/shrinkfs` for root, else
//! `$XDG_RUNTIME_DIR/shrinkfs`): which process serves a FUSE connection and, once it has ended,
//! with what exit code and error. `shrinkfs unmount` reads it to wait until that process has
//! stored what was pending, and to fail as it failed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where records live; none where there is no runtime directory (the unmount then does not wait).
fn dir() -> Option<PathBuf> {
    if rustix::process::geteuid().is_root() {
        return Some(PathBuf::from("/run/shrinkfs"));
    }
    std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()).map(|d| PathBuf::from(d).join("shrinkfs"))
}

/// The records of the connection with device number `dev` (as in /proc/self/mountinfo), one per
/// process that served it: a device number is free again once its mount is gone, while that
/// mount's process may still be storing what was pending, so a new mount can share it.
fn prefix(dev: (u32, u32)) -> String {
    format!("{}.{}.", dev.0, dev.1)
}

/// A process's start time (ticks since boot, field 22 of /proc/PID/stat), while it runs: with the
/// pid it names one process even once the pid is reused. None for a process that has ended,
/// zombies included (a parent that has not reaped it yet).
fn running_since(pid: u32) -> Option<u64> {
    let stat = shrinkfs_fuse::procstat::ProcStat::read(Some(pid))?;
    stat.running().then(|| stat.number(22)).flatten()
}

/// Writes `text` at `path` whole or not at all (a reader never sees half of it), through a
/// temporary name of this process's own.
fn write_whole(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Records left by processes that ended over an hour ago without anyone waiting for them
/// (unmounted by `umount`, `fusermount -u` or a signal) go when a mount starts.
fn remove_stale(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(3600));
        let pid = e.file_name().to_string_lossy().rsplit('.').next().and_then(|p| p.parse::<u32>().ok());
        if old && pid.is_some_and(|p| running_since(p).is_none()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// This process's record, written once the mount exists.
pub struct Record {
    path: PathBuf,
    first: String,
}

impl Record {
    /// Records this process as the one serving connection `dev`; None (said at debug level)
    /// where that cannot be written: `shrinkfs unmount` then returns without waiting.
    pub fn create(dev: (u32, u32)) -> Option<Record> {
        let dir = dir()?;
        let pid = std::process::id();
        let path = dir.join(format!("{}{pid}", prefix(dev)));
        let Some(since) = running_since(pid) else {
            tracing::debug!("no run record: this process's start time is unknown");
            return None;
        };
        // (With when the record was made, once the mount exists: a process may start long
        // before its mount, and the newest mount on a device number is the one there now.)
        let made = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let first = format!("{pid} {since} {made}\n");
        remove_stale(&dir);
        let written = std::fs::create_dir_all(&dir).and_then(|()| write_whole(&path, &first));
        match written {
            Ok(()) => Some(Record { path, first }),
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "no run record: `shrinkfs unmount` will not wait for this process");
                None
            }
        }
    }

    /// Adds how the mount ended: its exit code and, for a failure, the one-line error.
    pub fn ended(self, outcome: &anyhow::Result<()>) {
        let (code, message) = match outcome {
            Ok(()) => (crate::exit::OK, String::new()),
            Err(e) => (crate::exit::code_for(e), crate::exit::message(e)),
        };
        if let Err(e) = write_whole(&self.path, &format!("{}{code} {message}\n", self.first)) {
            tracing::debug!(path = %self.path.display(), error = %e, "cannot record how the mount ended");
        }
    }
}

/// The process serving a connection, as its record names it, while it runs.
pub struct Serving {
    pid: u32,
    since: u64,
    /// When the record was made (nanoseconds since the epoch).
    made: u128,
    path: PathBuf,
}

/// How a mount's process ended, as `shrinkfs unmount` reports it.
#[derive(Debug, thiserror::Error)]
pub enum Ended {
    /// It failed, with this exit code and error.
    #[error("the mount's process failed: {message}")]
    Failed {
        /// Its exit code.
        code: i32,
        /// Its error, one line.
        message: String,
    },
    /// It left no word (killed, or stopped by a second signal).
    #[error(
        "the mount's process (pid {0}) ended without saying how (killed, or forced by a second signal): its log says more"
    )]
    Unsaid(u32),
}

impl Ended {
    /// The exit code `shrinkfs unmount` gives for it.
    pub fn code(&self) -> i32 {
        match self {
            Ended::Failed { code, .. } => *code,
            Ended::Unsaid(_) => crate::exit::OTHER,
        }
    }
}

/// The process serving connection `dev`: of the records of that device number naming a process
/// that runs, the one made last (an earlier one's mount is gone, see [`prefix`]).
pub fn serving(dev: (u32, u32)) -> Option<Serving> {
    let prefix = prefix(dev);
    let running = std::fs::read_dir(dir()?).ok()?.flatten().filter_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid: u32 = name.strip_prefix(&prefix)?.parse().ok()?;
        let text = std::fs::read_to_string(e.path()).ok()?;
        let mut first = text.lines().next()?.split(' ');
        let (named, since): (u32, u64) = (first.next()?.parse().ok()?, first.next()?.parse().ok()?);
        let made: u128 = first.next()?.parse().ok()?;
        (named == pid && running_since(pid) == Some(since)).then(|| Serving { pid, since, made, path: e.path() })
    });
    running.max_by_key(|s| s.made)
}

impl Serving {
    /// Waits until the process has ended (saying so on standard error after `patience`), then
    /// returns how, and removes its record.
    pub fn wait(self, patience: Duration) -> Result<(), Ended> {
        let start = Instant::now();
        let mut told = false;
        while running_since(self.pid) == Some(self.since) {
            if !told && start.elapsed() >= patience {
                eprintln!("shrinkfs: waiting for the mount's process (pid {}) to store what is pending", self.pid);
                told = true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        let _ = std::fs::remove_file(&self.path);
        let last = text.lines().nth(1).ok_or(Ended::Unsaid(self.pid))?;
        let (code, message) = last.split_once(' ').unwrap_or((last, ""));
        match code.parse::<i32>() {
            Ok(crate::exit::OK) => Ok(()),
            Ok(code) => Err(Ended::Failed { code, message: message.to_owned() }),
            Err(_) => Err(Ended::Unsaid(self.pid)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_named_by_its_pid_and_start_time_while_it_runs() {
        let me = std::process::id();
        let since = running_since(me).expect("this process runs");
        assert_eq!(running_since(me), Some(since));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Ended but not reaped yet: a zombie counts as ended.
        let start = Instant::now();
        while running_since(pid).is_some() {
            assert!(start.elapsed() < Duration::from_secs(10), "`true` did not end");
            std::thread::sleep(Duration::from_millis(10));
        }
        child.wait().unwrap();
        assert_eq!(running_since(pid), None);
    }
}
