//! Local inputs and outputs of the CLI: `-` for stdin/stdout, outputs written under a temporary
//! name and renamed into place only when complete (a device, a FIFO or a link written through),
//! and progress bars on a terminal.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once, PoisonError};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::S3Args;
use crate::remote::{self, Remote, RemoteWriter};

/// An input stream and its length when known.
pub struct Input {
    /// The reader.
    pub reader: Box<dyn Read + Send>,
    /// Total bytes, when the input is a regular file or an object.
    pub len: Option<u64>,
    /// The file itself when the input is a regular file (read at offsets by `pack`).
    pub file: Option<File>,
    /// Keeps the runtime of a remote reader alive (dropped after `reader`).
    _remote: Option<Remote>,
}

/// Opens `path` for reading; `-` is stdin, `s3://bucket/key` an object.
pub fn open_input(path: &Path, s3: &S3Args) -> anyhow::Result<Input> {
    if path == Path::new("-") {
        return Ok(Input { reader: Box::new(io::stdin()), len: None, file: None, _remote: None });
    }
    let text = path.to_string_lossy();
    if remote::is_url(&text) {
        let r = remote::open(&text, s3)?;
        let (reader, len) = r.reader()?;
        return Ok(Input { reader: Box::new(reader), len: Some(len), file: None, _remote: Some(r) });
    }
    let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
    let file = len.and_then(|_| f.try_clone().ok());
    Ok(Input { reader: Box::new(f), len, file, _remote: None })
}

/// An output that appears under its real name only once `commit` succeeds.
pub struct Output {
    writer: Option<BufWriter<Box<dyn Write + Send>>>,
    /// The temporary file itself, for writing at offsets (`pack`); not mixed with `writer`.
    file: Option<File>,
    paths: Option<(PathBuf, PathBuf)>,
    remote: Option<(RemoteWriter, Remote)>,
    /// What the temporary file becomes when it takes the output's name.
    last: Option<Last>,
}

/// The mode, and the owner where a file is replaced, an output takes when complete.
struct Last {
    mode: u32,
    owner: Option<(u32, u32)>,
}

/// This process's umask, from `/proc/self/status` (reading it with `umask(2)` would set it
/// meanwhile); 0o022 where that line is missing.
fn umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        .unwrap_or(0o022)
}

impl Output {
    /// Creates `path` (through a temporary file beside it); `-` is stdout, `s3://bucket/key` an
    /// object (a multipart upload that `commit` completes).
    pub fn create(path: &Path, s3: &S3Args) -> anyhow::Result<Self> {
        if path == Path::new("-") {
            let w: Box<dyn Write + Send> = Box::new(io::stdout());
            return Ok(Output {
                writer: Some(BufWriter::with_capacity(1 << 20, w)),
                file: None,
                paths: None,
                remote: None,
                last: None,
            });
        }
        let text = path.to_string_lossy();
        if remote::is_url(&text) {
            let r = remote::open(&text, s3)?;
            let w = r.writer();
            return Ok(Output { writer: None, file: None, paths: None, remote: Some((w, r)), last: None });
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => Self::behind_link(path),
            // A device, a FIFO or a socket (`/dev/null`, a named pipe a reader waits on) is
            // written into, as a shell's redirection would: a file put in its place would
            // destroy it.
            Ok(m) if !m.is_file() && !m.is_dir() => Self::through(path),
            Ok(m) => Self::beside(path, Some(m)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Self::beside(path, None),
            Err(e) => Err(e).with_context(|| format!("cannot create {}", path.display())),
        }
    }

    /// An output named by a symbolic link: what it names. A regular file is replaced whole, as
    /// when named itself, except a descriptor of this process's (a link into `/proc`, as
    /// `/dev/stdout` and `/dev/fd/N` are: a file a shell opened for appending, say), which is
    /// written into at its end. A device or a FIFO is written into; a link to nothing is an
    /// error, not a file made where it points.
    fn behind_link(path: &Path) -> anyhow::Result<Self> {
        let target = match std::fs::metadata(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                anyhow::bail!("{} is a symbolic link to nothing: name the file to write", path.display())
            }
            Err(e) => return Err(e).with_context(|| format!("cannot open {}", path.display())),
        };
        let descriptor = std::fs::read_link(path).is_ok_and(|t| t.starts_with("/proc/"));
        if target.is_file() && !descriptor {
            let real = std::fs::canonicalize(path).with_context(|| format!("cannot open {}", path.display()))?;
            return Self::beside(&real, Some(target));
        }
        Self::through(path)
    }

    /// Writes into what `path` names (following a link): a device or a FIFO from its start, a
    /// file at its end.
    fn through(path: &Path) -> anyhow::Result<Self> {
        let file = std::fs::metadata(path).is_ok_and(|m| m.is_file());
        let f = std::fs::OpenOptions::new()
            .write(true)
            .append(file)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        // Written as a stream: nothing at offsets (with `O_APPEND` a write at an offset still
        // lands at the end).
        let w: Box<dyn Write + Send> = Box::new(f);
        Ok(Output {
            writer: Some(BufWriter::with_capacity(1 << 20, w)),
            file: None,
            paths: None,
            remote: None,
            last: None,
        })
    }

    /// Writes a temporary file beside `path`, moved into place by `commit`. It is readable by its
    /// owner only until then (what a `kill -9` leaves of decoded bytes is no one else's), and
    /// then takes the mode (and owner, where this process may set it) of the file it replaces
    /// (`existing`), or the mode a new file gets under the umask.
    fn beside(path: &Path, existing: Option<std::fs::Metadata>) -> anyhow::Result<Self> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let name = path.file_name().with_context(|| format!("{} is not a file name", path.display()))?;
        let tmp = path.with_file_name(format!(
            ".{}.shrinkfs-tmp.{}.{:08x}",
            name.to_string_lossy(),
            std::process::id(),
            rand::random::<u32>()
        ));
        stop_signals_remove_temporaries();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        let file = match f.try_clone() {
            Ok(file) => Some(file),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e).with_context(|| format!("cannot open {} again", tmp.display()));
            }
        };
        pending().push(tmp.clone());
        let w: Box<dyn Write + Send> = Box::new(f);
        let mode = existing.as_ref().map_or_else(|| 0o666 & !umask(), |m| m.mode() & 0o7777);
        let owner = existing.map(|m| (m.uid(), m.gid()));
        Ok(Output {
            writer: Some(BufWriter::with_capacity(1 << 20, w)),
            file,
            paths: Some((tmp, path.to_path_buf())),
            remote: None,
            last: Some(Last { mode, owner }),
        })
    }

    /// The output file, when it is a local file: written at offsets instead of through
    /// [`Write`] (never both for one output).
    pub fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }

    /// Flushes and moves the output into place.
    pub fn commit(mut self) -> anyhow::Result<()> {
        if let Some((w, _r)) = self.remote.take() {
            return w.commit();
        }
        let w = self.writer.take().expect("committed once");
        let inner = w.into_inner().map_err(|e| e.into_error()).context("cannot write output")?;
        drop(inner);
        if let (Some((tmp, _)), Some(last), Some(file)) = (&self.paths, &self.last, &self.file) {
            use std::os::unix::fs::PermissionsExt;
            // The owner first: a change of owner clears the set-user-ID bits a mode sets. A file
            // that cannot keep its owner does not keep those bits either.
            let mut mode = last.mode;
            if let Some((uid, gid)) = last.owner
                && std::os::unix::fs::fchown(file, Some(uid), Some(gid)).is_err()
            {
                mode &= !0o6000;
            }
            file.set_permissions(std::fs::Permissions::from_mode(mode))
                .with_context(|| format!("cannot set the mode of {}", tmp.display()))?;
        }
        if let Some((tmp, path)) = self.paths.take() {
            // Moved into place under the list's lock: a stop signal meanwhile waits for the move
            // and finds nothing to remove; one that came first removed the file and ends the
            // process, so nothing here may touch the old output.
            let mut listed = pending();
            let before = listed.len();
            listed.retain(|p| p != &tmp);
            anyhow::ensure!(listed.len() < before, "stopped by a signal before {} was complete", path.display());
            // An existing regular file is removed first, as `zstd -f` does: renaming over it would
            // make ext4 (auto_da_alloc) flush the whole new file synchronously at the rename, which
            // cost packing 512 MiB more than half its time. A crash between the two steps leaves
            // the finished temporary file and no output. There is no fsync, as `zstd` makes none:
            // a crash of the host soon after may leave the output with part of its bytes, which
            // a decoder then refuses (`truncated`).
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
                let _ = std::fs::remove_file(&path);
            }
            if let Err(e) = std::fs::rename(&tmp, &path) {
                let _ = std::fs::remove_file(&tmp);
                return Err(e).with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()));
            }
            drop(listed);
        }
        Ok(())
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.remote {
            Some((w, _)) => w.write(buf),
            None => self.writer.as_mut().expect("not committed").write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.remote {
            Some((w, _)) => w.flush(),
            None => self.writer.as_mut().expect("not committed").flush(),
        }
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        // Not committed: the partial output must not be mistaken for a complete one.
        if let Some((tmp, _)) = self.paths.take() {
            let _ = std::fs::remove_file(&tmp);
            forget_pending(&tmp);
        }
    }
}

/// Temporary outputs being written, which a stop signal removes.
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn pending() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    PENDING.lock().unwrap_or_else(PoisonError::into_inner)
}

fn forget_pending(tmp: &Path) {
    pending().retain(|p| p != tmp);
}

/// From the first local output on, SIGINT, SIGTERM and SIGHUP remove the temporary outputs being
/// written (a `pack` stopped with Ctrl-C leaves no hidden partial file behind), then end the
/// process as the signal would have. The handlers are registered before this returns, so a
/// signal from then on is never missed. A signal the process was started ignoring (`nohup`, a
/// background job of a script) stays ignored.
fn stop_signals_remove_temporaries() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use tokio::signal::unix::{SignalKind, signal};
        let kinds: Vec<_> = [SignalKind::interrupt(), SignalKind::terminate(), SignalKind::hangup()]
            .into_iter()
            .filter(|k| !ignored(k.as_raw_value()))
            .collect();
        if kinds.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_io().build() else { return };
        let registered: io::Result<Vec<_>> = {
            let _entered = rt.enter();
            kinds.iter().map(|&k| signal(k).map(|s| (k, s))).collect()
        };
        let Ok(mut signals) = registered else { return };
        std::thread::spawn(move || {
            let kind = rt.block_on(async {
                let waits = signals.iter_mut().map(|(k, s)| Box::pin(async move { s.recv().await.map(|_| *k) }));
                futures::future::select_all(waits).await.0
            });
            for tmp in pending().drain(..) {
                let _ = std::fs::remove_file(tmp);
            }
            let sig = kind.map_or(libc::SIGTERM, |k| k.as_raw_value());
            // SAFETY: restores the signal's default action and raises it, so the process ends
            // with the status the signal gives (a shell sees it killed by SIGINT); both calls only
            // touch this process's signal state.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
            std::process::exit(128 + sig);
        });
    });
}

/// Whether signal `sig` is ignored (as `nohup` leaves SIGHUP).
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: with a null new action, sigaction only reads the current one into `old`, a plain
    // struct it fills.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// A progress bar on stderr; draws nothing when stderr is not a terminal.
pub fn progress(len: Option<u64>, what: &str) -> ProgressBar {
    let bar = match len {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::no_length(),
    };
    let style = if len.is_some() {
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
    } else {
        "{msg} {bytes} {bytes_per_sec} {elapsed}"
    };
    bar.set_style(ProgressStyle::with_template(style).expect("valid template").progress_chars("=> "));
    bar.set_message(what.to_string());
    bar
}

/// Reads until `buf` holds `want` bytes or the input ends; returns the bytes read.
pub fn read_full(r: &mut dyn Read, buf: &mut Vec<u8>, want: usize) -> io::Result<usize> {
    buf.clear();
    buf.reserve(want);
    let mut n = 0;
    while n < want {
        let got = r.take((want - n) as u64).read_to_end(buf)?;
        if got == 0 {
            break;
        }
        n += got;
    }
    Ok(n)
}
