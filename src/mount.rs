//! `shrinkfs mount` and `shrinkfs unmount`: check everything before mounting, optionally detach
//! once the mount is ready, upload what is dirty and unmount cleanly on SIGINT/SIGTERM.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

use anyhow::{Context, bail};
use shrinkfs_fuse::session::{MountOptions, mount, unmount};
use shrinkfs_fuse::store::{self, Source};
use shrinkfs_fuse::{Fs, FsConfig};

use crate::cli::{MountArgs, UnmountArgs};
use crate::exit::UsageError;

fn parse_mode(s: &str) -> Result<u16, String> {
    u16::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("{s:?} is not an octal mode from 0 to 7777, like 644"))
}

/// Parses an octal permission argument (clap value parser).
pub fn mode_arg(s: &str) -> Result<u16, String> {
    parse_mode(s)
}

/// Smallest --memory-limit: room for a multipart part and a few frames in flight.
pub const MIN_MEMORY_LIMIT: u64 = 32 << 20;

/// The default `--memory-limit`: 1 GiB, or a quarter of the host's memory on smaller hosts.
fn default_memory_limit() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().find_map(|l| l.strip_prefix("MemTotal:")).map(str::to_owned))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(u64::MAX, |kb| kb * 1024);
    (total / 4).clamp(MIN_MEMORY_LIMIT, 1 << 30)
}

/// Splits `--memory-limit` into the frame cache and the budget for bytes in flight.
fn memory_split(limit: Option<u64>, cache: Option<u64>) -> anyhow::Result<(u64, u64)> {
    use crate::size::human;
    let limit = limit.unwrap_or_else(default_memory_limit);
    if limit < MIN_MEMORY_LIMIT {
        bail!(UsageError(format!("--memory-limit must be at least {}", human(MIN_MEMORY_LIMIT))));
    }
    let cache = cache.unwrap_or(limit / 4);
    if cache > limit / 2 {
        bail!(UsageError(format!(
            "--memory-cache-size ({}) must be at most half of --memory-limit ({})",
            human(cache),
            human(limit)
        )));
    }
    Ok((cache, limit - cache))
}

/// The filesystem configuration the arguments describe.
pub fn fs_config(a: &MountArgs) -> anyhow::Result<FsConfig> {
    let encode = a.codec.to_config()?;
    let dicts = crate::cli::load_dict(&a.codec.dict)?.into_iter().collect();
    // The dispatcher (and its GPU thread) starts in `serve`, after a --daemon fork: threads and
    // CUDA contexts do not survive fork.
    let mut cfg = FsConfig { encode, dicts, read_only: a.read_only, ..FsConfig::default() };
    cfg.allow_unsealed = a.allow_unsealed;
    cfg.uid = a.uid.unwrap_or(cfg.uid);
    cfg.gid = a.gid.unwrap_or(cfg.gid);
    cfg.file_mode = a.file_mode.unwrap_or(cfg.file_mode);
    cfg.dir_mode = a.dir_mode.unwrap_or(cfg.dir_mode);
    cfg.metadata_ttl = a.metadata_ttl;
    (cfg.cache_bytes, cfg.io_budget) = memory_split(a.memory_limit, a.memory_cache_size)?;
    if let Some(dir) = &a.cache_dir {
        if !(0.0..1.0).contains(&a.cache_min_free) {
            bail!(UsageError(format!("--cache-min-free must be between 0 and 1, not {}", a.cache_min_free)));
        }
        let dc = shrinkfs_fuse::diskcache::DiskCacheConfig {
            dir: dir.clone(),
            max_bytes: a.cache_size,
            min_free: a.cache_min_free,
        };
        let cache = shrinkfs_fuse::diskcache::DiskCache::open(&dc)
            .with_context(|| format!("cache directory {}", dir.display()))?;
        cfg.disk_cache = Some(cache);
    }
    if let Some(d) = &a.staging_dir {
        cfg.staging_dir = d.clone();
    }
    let probe = tempfile::tempfile_in(&cfg.staging_dir)
        .with_context(|| format!("staging directory {} is not writable", cfg.staging_dir.display()))?;
    drop(probe);
    Ok(cfg)
}

/// Detaches into the background; the parent exits once the child reports the mount ready (0) or
/// failed (its message, exit 1). Must run before any thread is started.
fn daemonize() -> anyhow::Result<OwnedFd> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error()).context("cannot create a pipe");
    }
    // SAFETY: no threads exist yet, so the child may continue running Rust code.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()).context("cannot fork"),
        0 => {
            // SAFETY: fds[0] is ours to close; setsid detaches from the terminal.
            unsafe {
                libc::close(fds[0]);
                libc::setsid();
            }
            // SAFETY: fds[1] is an open descriptor owned from here on.
            Ok(unsafe { OwnedFd::from_raw_fd(fds[1]) })
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
/// (where the log goes) to `log` when given, else to /dev/null.
fn silence_stdio(log: Option<&std::fs::File>) {
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        use std::os::fd::AsRawFd;
        let err = log.map_or(null.as_raw_fd(), |f| f.as_raw_fd());
        // SAFETY: dup2 onto the standard descriptors with valid open files.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(err, 2);
        }
    }
}

/// Opens `--log-file` for appending (before any fork, so a bad path fails in the foreground).
fn open_log(path: &Option<std::path::PathBuf>) -> anyhow::Result<Option<std::fs::File>> {
    path.as_ref()
        .map(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("cannot open log file {}", p.display()))
        })
        .transpose()
}

/// Runs `shrinkfs mount` until unmounted.
pub fn run_mount(a: MountArgs) -> anyhow::Result<()> {
    let source = Source::parse(&a.source).map_err(UsageError)?;
    // Option values first: a bad one is a usage error whatever the mount point.
    let cfg = fs_config(&a)?;
    let meta = std::fs::metadata(&a.mountpoint).with_context(|| format!("mount point {}", a.mountpoint.display()))?;
    if !meta.is_dir() {
        bail!(UsageError(format!("mount point {} is not a directory", a.mountpoint.display())));
    }
    let log = open_log(&a.log_file)?;
    let mut notify = if a.daemon { Some(daemonize()?) } else { None };
    if let Some(f) = &log {
        use std::os::fd::AsRawFd;
        // From here (in the background process, with --daemon) the log goes to the file; a
        // failure before the mount is ready still reaches the waiting parent through its pipe.
        // SAFETY: dup2 of a valid open file onto stderr.
        unsafe { libc::dup2(f.as_raw_fd(), 2) };
    }
    let result = serve(a, source, cfg, &mut notify, log.as_ref());
    if let (Some(fd), Err(e)) = (notify, &result) {
        let mut w = std::fs::File::from(fd);
        let _ = write!(w, "{}:{e:#}", crate::exit::code_for(e));
    }
    result
}

fn serve(
    a: MountArgs,
    source: Source,
    mut cfg: FsConfig,
    notify: &mut Option<OwnedFd>,
    log: Option<&std::fs::File>,
) -> anyhow::Result<()> {
    cfg.dispatcher = Arc::new(a.codec.dispatcher()?);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the runtime")?;
    let s3 = a.s3.options();
    let bucket = store::open(&source, &s3).map_err(|e| anyhow::anyhow!(e))?;
    rt.block_on(bucket.check_reachable()).map_err(|e| anyhow::anyhow!(e))?;
    if a.skip_key_check {
        tracing::warn!("--skip-key-check: the key is not compared with the bucket's sealed objects");
    } else {
        let check = rt
            .block_on(crate::keycheck::check_key(&bucket, cfg.encode.key.as_ref()))
            .with_context(|| format!("cannot mount {}", bucket.describe))?;
        if let Some(w) = &check.warning {
            tracing::warn!("{w}");
        }
    }
    if !a.read_only {
        match rt.block_on(clean_leftovers(&bucket, CLEANUP_AT_MOUNT)) {
            Ok(said) => tracing::info!("{said}"),
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "cleanup at mount failed"),
        }
    }
    let describe = bucket.describe.clone();
    let fs = Arc::new(Fs::new(bucket, cfg));
    if let Some(addr) = a.metrics_addr {
        let listener =
            std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr} for metrics"))?;
        listener.set_nonblocking(true).context("metrics socket")?;
        let fs = fs.clone();
        rt.spawn(async move {
            match tokio::net::TcpListener::from_std(listener) {
                Ok(l) => serve_metrics(l, fs).await,
                Err(e) => tracing::error!(error = %e, "metrics endpoint failed"),
            }
        });
    }
    let opts = MountOptions {
        fs_name: describe.clone(),
        read_only: a.read_only,
        allow_other: a.allow_other,
        threads: a.threads,
    };
    let session = mount(fs.clone(), rt.handle().clone(), &a.mountpoint, &opts)
        .with_context(|| format!("cannot mount {describe} at {}", a.mountpoint.display()))?;
    tracing::info!(source = %describe, mountpoint = %a.mountpoint.display(), "mounted");
    if let Err(e) = shrinkfs_fuse::session::set_readahead(&a.mountpoint, shrinkfs_fuse::session::READAHEAD_KIB) {
        tracing::debug!(error = %e, "kernel readahead left at its default (setting it needs root)");
    }
    if let Some(fd) = notify.take() {
        // Closing the pipe after "ok" lets the waiting parent exit.
        let mut w = std::fs::File::from(fd);
        let _ = w.write_all(b"ok");
        drop(w);
        silence_stdio(log);
    }
    let mountpoint = a.mountpoint.clone();
    let fs_sig = fs.clone();
    rt.spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("signal handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tracing::info!("signal received: unmounting");
        // A file still open for writing is never published half-written: the unmount waits for
        // its writer's close (which uploads it), trying again every second.
        let mut told = false;
        loop {
            if let Err(e) = fs_sig.flush_all().await {
                tracing::error!(error = %e, "some closed files could not be uploaded");
            }
            match unmount(&mountpoint) {
                Err(e) if e.contains(" is busy") => {
                    if !told {
                        tracing::warn!("mount busy: unmounting as soon as the last open file is closed");
                        told = true;
                    }
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                Err(e) => {
                    tracing::error!(error = %e, "unmount failed");
                    break;
                }
                Ok(()) => break,
            }
        }
    });
    session.run().context("the FUSE session ended with an error")?;
    let flushed = rt.block_on(fs.flush_all());
    let abandoned = rt.block_on(fs.abandon_open());
    if abandoned > 0 {
        tracing::warn!(files = abandoned, "files still open for writing when the mount ended were not stored");
    }
    flushed.context("uploading pending files at unmount")?;
    Ok(())
}

/// How old an interrupted write's leftovers must be before a mount removes them at start (younger
/// ones may belong to another mount of the same bucket still writing).
pub const CLEANUP_AT_MOUNT: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes leftovers of interrupted writes older than `older_than` and says what went.
pub async fn clean_leftovers(bucket: &store::Bucket, older_than: std::time::Duration) -> anyhow::Result<String> {
    let done = bucket.cleanup(older_than).with_context(|| format!("cleaning up {}", bucket.describe))?;
    let aborted = bucket
        .abort_stale_uploads(older_than)
        .await
        .with_context(|| format!("aborting interrupted uploads in {}", bucket.describe))?;
    Ok(format!(
        "{}: removed {} leftover file(s) of interrupted writes, {}; aborted {aborted} interrupted upload(s)",
        bucket.describe,
        done.files,
        crate::size::human(done.bytes)
    ))
}

/// Runs `shrinkfs cleanup`.
pub fn run_cleanup(a: crate::cli::CleanupArgs) -> anyhow::Result<()> {
    let source = Source::parse(&a.source).map_err(UsageError)?;
    let bucket = store::open(&source, &a.s3.options()).map_err(|e| anyhow::anyhow!(e))?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the runtime")?;
    println!("{}", rt.block_on(clean_leftovers(&bucket, a.older_than))?);
    Ok(())
}

/// Answers every HTTP request on `listener` with the Prometheus text of the mount's metrics.
async fn serve_metrics(listener: tokio::net::TcpListener, fs: Arc<Fs>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    while let Ok((mut sock, _)) = listener.accept().await {
        let body = fs.metrics_text();
        tokio::spawn(async move {
            let mut req = [0u8; 2048];
            let _ = sock.read(&mut req).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.write_all(body.as_bytes()).await;
        });
    }
}

/// Runs `shrinkfs unmount`.
pub fn run_unmount(a: UnmountArgs) -> anyhow::Result<()> {
    unmount(&a.mountpoint).map_err(|e| anyhow::anyhow!(e)).context("cannot unmount")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_limit_splits_into_cache_and_budget() {
        assert_eq!(memory_split(Some(64 << 20), None).unwrap(), (16 << 20, 48 << 20));
        assert_eq!(memory_split(Some(64 << 20), Some(32 << 20)).unwrap(), (32 << 20, 32 << 20));
        assert!(memory_split(Some(64 << 20), Some(33 << 20)).is_err());
        assert!(memory_split(Some(1 << 20), None).is_err());
        let auto = default_memory_limit();
        assert!((MIN_MEMORY_LIMIT..=1 << 30).contains(&auto), "{auto}");
        assert_eq!(memory_split(None, None).unwrap().0, auto / 4);
    }
}
