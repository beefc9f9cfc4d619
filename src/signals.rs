//! The signals a running mount answers: SIGTERM, SIGINT and SIGQUIT store what is pending and
//! unmount (a second one forces), SIGHUP reopens the log file, SIGUSR1 logs the mount's state,
//! SIGUSR2 switches debug logging on and off. None of them leaves a dead mount behind.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use shrinkfs_fuse::Fs;
use shrinkfs_fuse::connection::{Connection, UnmountError};
use tokio::signal::unix::{Signal, SignalKind, signal};

/// How long a forced stop waits for files open for writing to let go of their uploads.
const ABANDON_WAIT: Duration = Duration::from_secs(10);
/// Exit code of a stop forced by a second signal (files open for writing were not stored).
pub const FORCED_EXIT: i32 = 1;

/// Set once a stop signal started the unmount (so the end of the session is not reported as an
/// unmount from outside).
pub static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The three signals that stop a mount.
struct Stops {
    term: Signal,
    int: Signal,
    quit: Signal,
}

impl Stops {
    fn new() -> std::io::Result<Self> {
        Ok(Stops {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            quit: signal(SignalKind::quit())?,
        })
    }

    /// The name of the next stop signal.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
            _ = self.quit.recv() => "SIGQUIT",
        }
    }
}

/// The signals a mount answers, installed before it mounts: one that arrives before the mount
/// is up (systemd stopping a unit that just started) waits here for [`watch`] instead of killing
/// the process with its default action and leaving a dead mount behind.
pub struct Handlers {
    stops: Stops,
    hup: Signal,
    usr1: Signal,
    usr2: Signal,
}

impl Handlers {
    /// Installs the handlers (with `rt`'s signal driver).
    pub fn install(rt: &tokio::runtime::Runtime) -> std::io::Result<Self> {
        let _in_runtime = rt.enter();
        Ok(Handlers {
            stops: Stops::new()?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }
}

/// Answers signals for the mount `conn` of `fs` until a stop signal has unmounted it (the FUSE
/// session then ends and the process exits) or a second one forced the process to exit.
pub async fn watch(fs: Arc<Fs>, conn: Connection, log_file: Option<PathBuf>, handlers: std::io::Result<Handlers>) {
    let Handlers { mut stops, mut hup, mut usr1, mut usr2 } = match handlers {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(error = %e, "cannot install signal handlers: signals will kill the mount");
            return;
        }
    };
    let first = loop {
        tokio::select! {
            s = stops.next() => break s,
            _ = hup.recv() => match &log_file {
                Some(p) => match crate::logging::reopen(p) {
                    Ok(()) => tracing::warn!(file = %p.display(), "SIGHUP: log file reopened"),
                    Err(e) => tracing::error!(file = %p.display(), error = %e, "SIGHUP: cannot reopen the log file"),
                },
                None => tracing::warn!("SIGHUP: no --log-file to reopen; still serving"),
            },
            // Asked for by the operator: logged at the default level.
            _ = usr1.recv() => tracing::warn!("SIGUSR1: {}", fs.state_line()),
            _ = usr2.recv() => {
                let on = crate::logging::toggle_debug();
                tracing::warn!("SIGUSR2: debug logging {}", if on { "on" } else { "off" });
            }
        }
    };
    STOPPING.store(true, std::sync::atomic::Ordering::Relaxed);
    let mp = conn.mountpoint().display().to_string();
    tracing::warn!(mountpoint = %mp, "{first}: storing pending files and unmounting (send it again to force)");
    crate::daemon::stopping(&format!("{first}: unmounting"));
    tokio::select! {
        () = unmount_when_free(&fs, &conn) => {}
        second = stops.next() => {
            tracing::warn!(mountpoint = %mp, "{second} again: forcing: the mount is detached; files still open for writing are not stored (their previous versions stay)");
            let _ = conn.detach();
            let queued = fs.deletes_queued();
            if queued > 0 {
                tracing::warn!(deletes = queued, "forced stop: deletes still queued behind their unlinks are dropped; those files stay in the bucket");
            }
            match tokio::time::timeout(ABANDON_WAIT, fs.abandon_open()).await {
                Ok(n) => tracing::warn!(files = n, "forced stop: exiting"),
                Err(_) => tracing::error!("forced stop: files open for writing did not let go in time; exiting"),
            }
            std::process::exit(FORCED_EXIT);
        }
    }
}

/// Stores what is pending and unmounts `conn`, trying again every second while it is busy (a
/// file open for writing is stored when its writer closes it, never half-written).
async fn unmount_when_free(fs: &Fs, conn: &Connection) {
    let mut told = None::<&'static str>;
    let mut say = |what: &'static str, msg: &str| {
        if told != Some(what) {
            tracing::warn!(mountpoint = %conn.mountpoint().display(), "{msg}");
            told = Some(what);
        }
    };
    let mut flush_told = false;
    loop {
        if let Err(e) = fs.flush_all().await
            && !std::mem::replace(&mut flush_told, true)
        {
            tracing::error!(error = %e, "storing closed files or deleting removed ones failed");
        }
        match conn.unmount() {
            Ok(()) => return,
            Err(UnmountError::Busy(_)) => {
                say("busy", "mount busy: unmounting once the last open file is closed (a second signal forces)");
            }
            Err(UnmountError::NotMounted(_)) => {
                // Detached (`umount -l`) or replaced: what is at the path now is someone else's.
                say("gone", "this mount was detached from its mount point: exiting once its last user lets go");
            }
            Err(e) => say("error", &format!("{e}; trying again (a second signal forces)")),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
