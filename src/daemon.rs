//! Running as a service: detaching (`--daemon`) from the caller's terminal, directory and
//! descriptors, and telling whoever waits — the `--daemon` parent, systemd's `NOTIFY_SOCKET` —
//! that the mount answers, or why it failed.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::Context;

/// Who is waiting for the mount to be ready.
#[derive(Debug, Default)]
pub struct Readiness {
    /// The `--daemon` parent's pipe.
    pipe: Option<OwnedFd>,
}

impl Readiness {
    /// Says the mount answers: the `--daemon` parent exits 0, systemd gets READY=1. In the
    /// background process the standard descriptors are then detached from the terminal, the log
    /// going to `log` (a file), else to the journal where there is one.
    pub fn ready(&mut self, log: Option<&std::fs::File>, mountpoint: &std::path::Path) {
        let _ = sd_notify::notify(&[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status(&format!("mounted at {}", mountpoint.display())),
        ]);
        if let Some(fd) = self.pipe.take() {
            let mut w = std::fs::File::from(fd);
            let _ = w.write_all(b"ok");
            drop(w);
            detach_stdio(log);
        }
    }

    /// Says the mount failed, with the error the parent prints and the exit code it exits with.
    /// Returns whether a `--daemon` parent was told (then this process must not print it again).
    pub fn failed(&mut self, e: &anyhow::Error) -> bool {
        let Some(fd) = self.pipe.take() else { return false };
        let mut w = std::fs::File::from(fd);
        let _ = write!(w, "{}:{}", crate::exit::code_for(e), crate::exit::message(e));
        true
    }
}

/// Tells systemd the mount is stopping (and why, as its status line).
pub fn stopping(why: &str) {
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping, sd_notify::NotifyState::Status(why)]);
}

/// Closes every descriptor above stderr: a daemon keeps nothing the caller had open (a pipe it
/// waits on, a lock, a socket). Called first, before this process opens anything of its own.
pub fn close_inherited() {
    // SAFETY: close_range on descriptors this process has not opened yet (only inherited ones).
    let rc = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if rc != 0 {
        // Kernels before 5.9: close one by one up to the descriptor limit.
        let max = max_fd();
        for fd in 3..max {
            // SAFETY: closing a descriptor number; EBADF for those not open is harmless.
            unsafe { libc::close(fd) };
        }
    }
}

fn max_fd() -> i32 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) };
    if n <= 0 { 1024 } else { n.min(1 << 16) as i32 }
}

/// Forks into the background: the parent waits until the child reports the mount ready (exit 0)
/// or failed (its message and exit code); the child starts a new session, works in `/` and
/// returns the [`Readiness`] that reports. Must run before any thread is started.
pub fn daemonize() -> anyhow::Result<Readiness> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("cannot create a pipe");
    }
    // SAFETY: no threads exist yet, so the child may continue running Rust code.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()).context("cannot fork"),
        0 => {
            // SAFETY: fds[0] is ours to close; setsid detaches from the terminal; chdir("/")
            // keeps the caller's directory (and its filesystem) from staying busy.
            unsafe {
                libc::close(fds[0]);
                libc::setsid();
                libc::chdir(c"/".as_ptr());
            }
            // SAFETY: fds[1] is an open descriptor owned from here on.
            Ok(Readiness { pipe: Some(unsafe { OwnedFd::from_raw_fd(fds[1]) }) })
        }
        _ => {
            // SAFETY: fds[1] is the child's; fds[0] is ours.
            unsafe { libc::close(fds[1]) };
            let mut r = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fds[0]) });
            let mut msg = String::new();
            let _ = r.read_to_string(&mut msg);
            if msg == "ok" {
                std::process::exit(0);
            }
            if msg.is_empty() {
                msg = "the background process exited before the mount was ready".into();
            }
            // The child sends "CODE:message" so the exit code is the one it would have had.
            let (code, msg) = match msg.split_once(':') {
                Some((c, m)) if c.parse::<i32>().is_ok() => (c.parse().unwrap_or(crate::exit::IO), m),
                _ => (crate::exit::IO, msg.as_str()),
            };
            eprintln!("shrinkfs: error: {msg}");
            std::process::exit(code);
        }
    }
}

/// Detaches the standard descriptors from the terminal: stdin and stdout to /dev/null, stderr
/// (where the log goes) to `log` when given, else to the journal, else to /dev/null.
fn detach_stdio(log: Option<&std::fs::File>) {
    let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") else { return };
    // SAFETY: dup2 onto the standard descriptors with valid open files.
    unsafe {
        libc::dup2(null.as_raw_fd(), 0);
        libc::dup2(null.as_raw_fd(), 1);
    }
    match log {
        // SAFETY: as above.
        Some(f) => unsafe {
            libc::dup2(f.as_raw_fd(), 2);
        },
        None => {
            if !crate::logging::to_journal() {
                // SAFETY: as above.
                unsafe { libc::dup2(null.as_raw_fd(), 2) };
            }
        }
    }
}
