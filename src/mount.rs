//! `shrinkfs mount` and `shrinkfs unmount`: check everything before mounting, mount, say when the
//! mount answers, serve until unmounted (by a signal, see `signals`, or from outside), store
//! what is pending and exit.

use std::sync::Arc;

use anyhow::{Context, bail};
use shrinkfs_fuse::connection::{self, Atime, KernelOptions};
use shrinkfs_fuse::diskcache::DiskCache;
use shrinkfs_fuse::session;
use shrinkfs_fuse::store::behind::DEFAULT_DELETES_BEHIND;
use shrinkfs_fuse::store::{self, Source};
use shrinkfs_fuse::{Fs, FsConfig, Services};

use crate::cli::{MountArgs, UnmountArgs};
use crate::daemon::Readiness;
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

/// The filesystem configuration the arguments describe, and the disk cache they name (opened
/// now, so a bad cache directory fails before the mount starts).
pub fn fs_config(a: &MountArgs) -> anyhow::Result<(FsConfig, Option<DiskCache>)> {
    let encode = a.codec.to_config()?;
    let dicts = crate::cli::load_dict(&a.codec.dict)?.into_iter().collect();
    let mut cfg = FsConfig { encode, dicts, read_only: a.read_only, ..FsConfig::default() };
    cfg.reader.allow_unsealed = a.allow_unsealed;
    cfg.writer.writeback_cache = a.writeback_cache;
    // Deletes run behind unlinks by default only where no one else writes the bucket.
    let own_bucket = a.metadata_ttl == std::time::Duration::MAX;
    cfg.deletes_behind = a.deletes_behind.unwrap_or(if own_bucket { DEFAULT_DELETES_BEHIND } else { 0 });
    let ns = &mut cfg.namespace;
    ns.uid = a.uid.unwrap_or(ns.uid);
    ns.gid = a.gid.unwrap_or(ns.gid);
    ns.file_mode = a.file_mode.unwrap_or(ns.file_mode);
    ns.dir_mode = a.dir_mode.unwrap_or(ns.dir_mode);
    ns.metadata_ttl = a.metadata_ttl;
    ns.negative_ttl = a.negative_metadata_ttl.unwrap_or(a.metadata_ttl);
    let own_listings = own_bucket && ns.negative_ttl == std::time::Duration::MAX;
    ns.listing_ttl = a.listing_ttl.unwrap_or(if own_listings { std::time::Duration::MAX } else { Default::default() });
    (cfg.reader.cache_bytes, cfg.io_budget) = memory_split(a.memory_limit, a.memory_cache_size)?;
    let mut disk_cache = None;
    if let Some(dir) = &a.cache_dir {
        if !(0.0..1.0).contains(&a.cache_min_free) {
            bail!(UsageError(format!("--cache-min-free must be between 0 and 1, not {}", a.cache_min_free)));
        }
        if dir.exists() && !dir.is_dir() {
            bail!(UsageError(format!("--cache-dir {}: not a directory", dir.display())));
        }
        let dc = shrinkfs_fuse::diskcache::DiskCacheConfig {
            dir: dir.clone(),
            max_bytes: a.cache_size,
            min_free: a.cache_min_free,
        };
        let cache = DiskCache::open(&dc).with_context(|| format!("cache directory {}", dir.display()))?;
        // A cache that cannot be written would keep nothing, silently.
        writable(dir, "cache directory")?;
        disk_cache = Some(cache);
    }
    if let Some(d) = &a.staging_dir {
        cfg.writer.staging_dir = d.clone();
    }
    writable(&cfg.writer.staging_dir, "staging directory")?;
    Ok((cfg, disk_cache))
}

/// Fails unless a file can be made in `dir` (the `what` of the mount).
fn writable(dir: &std::path::Path, what: &str) -> anyhow::Result<()> {
    tempfile::tempfile_in(dir).with_context(|| format!("{what} {} is not writable", dir.display()))?;
    Ok(())
}

/// The kernel's view of the mount: `-o` words over the safe defaults.
pub fn kernel_options(
    words: &[String],
    fs_name: &str,
    read_only: bool,
    allow_other: bool,
) -> anyhow::Result<KernelOptions> {
    let mut k = KernelOptions::new(fs_name);
    k.read_only = read_only;
    k.allow_other = allow_other;
    for w in words.iter().map(|w| w.trim()).filter(|w| !w.is_empty()) {
        match w {
            "ro" => k.read_only = true,
            "rw" => k.read_only = read_only,
            "noexec" => k.noexec = true,
            "exec" => k.noexec = false,
            "nosuid" => k.nosuid = true,
            "suid" => k.nosuid = false,
            "nodev" => k.nodev = true,
            "dev" => k.nodev = false,
            "noatime" => k.atime = Atime::Noatime,
            "relatime" | "atime" => k.atime = Atime::Relatime,
            "strictatime" => k.atime = Atime::Strictatime,
            "nodiratime" => k.nodiratime = true,
            "diratime" => k.nodiratime = false,
            "sync" => k.sync = true,
            "async" => k.sync = false,
            "dirsync" => k.dirsync = true,
            other => bail!(UsageError(format!(
                "-o {other}: not a generic mount option (ro, rw, noexec, exec, nosuid, suid, nodev, dev, noatime, \
                 relatime, strictatime, nodiratime, sync, async, dirsync); shrinkfs settings are flags, e.g. --{}",
                other.split('=').next().unwrap_or(other).replace('_', "-")
            ))),
        }
    }
    if k.atime != Atime::Noatime {
        tracing::warn!(
            "-o relatime/strictatime: reads never update access times on shrinkfs (docs/SEMANTICS.md, atime)"
        );
    }
    Ok(k)
}

/// Every second while the mount lives: writes the markers of directories whose entries changed,
/// and tries again the files whose last close could not store them (each as often as its growing
/// wait allows).
/// It ends at its next tick once `stop` is notified, never in the middle of an upload (a commit cut
/// off halfway leaves work for the next one to redo).
async fn upkeep(fs: std::sync::Weak<Fs>, stop: Arc<tokio::sync::Notify>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.notified() => return,
        }
        let Some(fs) = fs.upgrade() else { return };
        match fs.write_dir_times().await {
            // Said once per run of failures, not every second.
            Err(e) if !failing => {
                tracing::warn!(error = %e, "directory times not stored yet; tried again every second");
                failing = true;
            }
            Err(e) => tracing::debug!(error = %e, "directory times still not stored"),
            Ok(()) => failing = false,
        }
        fs.retry_unstored(false).await;
    }
}

/// Every second while the mount lives: gives back the memory budget room of idle writers'
/// encoded frames. A task of its own: the upkeep's tries of kept files may wait for room that
/// only this frees. Stopped like the upkeep, between files (a collection cut off midway would
/// drop the frames it had taken).
async fn idle_room(fs: std::sync::Weak<Fs>, stop: Arc<tokio::sync::Notify>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.notified() => return,
        }
        let Some(fs) = fs.upgrade() else { return };
        fs.take_idle_encoded_frames().await;
    }
}

/// Makes the paths of `a` absolute: a `--daemon` works in `/`.
fn absolute_paths(a: &mut MountArgs) -> anyhow::Result<()> {
    let abs = |p: &mut std::path::PathBuf| -> anyhow::Result<()> {
        *p = std::path::absolute(&*p).with_context(|| format!("path {}", p.display()))?;
        Ok(())
    };
    let s3 = &mut a.s3;
    let s3_files = [&mut s3.credentials_file, &mut s3.aws_config_file, &mut s3.sse_c_key_file];
    for p in [&mut a.log_file, &mut a.cache_dir, &mut a.staging_dir].into_iter().chain(s3_files).flatten() {
        abs(p)?;
    }
    // The mount point too: since a dead mount is cleared after the log is open, it is prepared
    // in the daemon, whose working directory is `/`.
    abs(&mut a.mountpoint)?;
    if !a.source.contains("://") {
        let mut p = std::path::PathBuf::from(&a.source);
        abs(&mut p)?;
        a.source = p.to_string_lossy().into_owned();
    }
    Ok(())
}

/// `path` with its symbolic links and `..` resolved, as far as it exists (a file not made yet is
/// its resolved directory's entry); as given where even that cannot be resolved.
fn resolved(path: &std::path::Path) -> std::path::PathBuf {
    path.canonicalize()
        .ok()
        .or_else(|| Some(path.parent()?.canonicalize().ok()?.join(path.file_name()?)))
        .unwrap_or_else(|| path.to_path_buf())
}

/// Refuses a log file, staging directory or cache directory inside the mount point: once
/// mounted, each would be reached through the mount itself (a log SIGHUP reopens, staged files,
/// cached frames), and a request that waits on the mount from a request thread can leave no
/// thread to answer it: the mount hangs. The default staging directory ($TMPDIR) counts too.
fn refuse_paths_inside(a: &MountArgs) -> anyhow::Result<()> {
    let mountpoint = resolved(&a.mountpoint);
    let staging = a.staging_dir.clone().unwrap_or_else(std::env::temp_dir);
    let paths =
        [("--log-file", a.log_file.as_ref()), ("--staging-dir", Some(&staging)), ("--cache-dir", a.cache_dir.as_ref())];
    for (flag, path) in paths {
        if let Some(p) = path
            && resolved(p).starts_with(&mountpoint)
        {
            let default =
                if a.staging_dir.is_none() && flag == "--staging-dir" { " (the default, $TMPDIR)" } else { "" };
            bail!(UsageError(format!(
                "{flag} {}{default} is inside the mount point {}: put it outside the mount",
                p.display(),
                a.mountpoint.display()
            )));
        }
    }
    Ok(())
}

/// Refuses a mount point or a cache directory inside the local bucket directory `bucket` (the
/// bucket itself may be the mount point): listed as part of the bucket, a mount point inside it
/// is the mount itself, whose lookup from a request thread waits on the mount and hangs it, and
/// a cache's frame files would show as the bucket's files.
fn refuse_paths_in_bucket(a: &MountArgs, bucket: &std::path::Path) -> anyhow::Result<()> {
    let bucket = resolved(bucket);
    let mountpoint = resolved(&a.mountpoint);
    if mountpoint != bucket && mountpoint.starts_with(&bucket) {
        bail!(UsageError(format!(
            "the mount point {} is inside the bucket directory {}: the mount would list itself; put it outside",
            a.mountpoint.display(),
            bucket.display()
        )));
    }
    if let Some(cache) = &a.cache_dir
        && resolved(cache).starts_with(&bucket)
    {
        bail!(UsageError(format!(
            "--cache-dir {} is inside the bucket directory {}: its files would show as the bucket's; put it outside",
            cache.display(),
            bucket.display()
        )));
    }
    Ok(())
}

/// Runs `shrinkfs mount` until unmounted.
pub fn run_mount(mut a: MountArgs) -> anyhow::Result<()> {
    if a.daemon {
        // Before this process opens anything: what the caller had open is not the daemon's.
        crate::daemon::close_inherited();
    }
    raise_open_files_limit();
    absolute_paths(&mut a)?;
    refuse_paths_inside(&a)?;
    let source = Source::parse(&a.source)?;
    // Option values first: a bad one is a usage error whatever the mount point.
    let (cfg, disk_cache) = fs_config(&a)?;
    let s3 = s3_options(&a)?;
    let mut kernel = kernel_options(&a.options, "", a.read_only, a.allow_other)?;
    kernel.writeback_cache = a.writeback_cache;
    if let Source::Local(dir) = &source {
        refuse_paths_in_bucket(&a, dir)?;
    }
    let log = open_log(&a.log_file)?;
    let mut ready = if a.daemon { crate::daemon::daemonize()? } else { Readiness::default() };
    if let Some(f) = &log {
        use std::os::fd::AsRawFd;
        // From here (in the background process, with --daemon) the log goes to the file; a
        // failure before the mount is ready still reaches the waiting parent through its pipe.
        // SAFETY: dup2 of a valid open file onto stderr.
        unsafe { libc::dup2(f.as_raw_fd(), 2) };
    }
    // After the log is in place: clearing a dead mount there is logged.
    let result = connection::prepare(&a.mountpoint)
        .map_err(anyhow::Error::from)
        .and_then(|mountpoint| serve(a, source, (cfg, disk_cache), s3, kernel, mountpoint, &mut ready, log.as_ref()));
    if let Err(e) = &result
        && ready.failed(e)
    {
        // The waiting parent prints it; here it goes only to the log file, if any.
        if log.is_some() {
            tracing::error!("{e:#}");
        }
        std::process::exit(crate::exit::code_for(e));
    }
    result
}

/// Raises this process's soft limit on open descriptors to its hard limit: a mount holds a
/// staging file, and during its upload a spill file, for each file open for writing (or kept
/// after a failed close), so the usual soft limit of 1,024 made every close fail with `EMFILE`
/// once about 1,000 files were written at once (found by a black-box probe). Programs that need
/// many descriptors do this themselves; the hard limit stays the operator's (`LimitNOFILE=`).
fn raise_open_files_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!(error = %e, "the open-files limit stays where it was");
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

/// The S3 options of a mount, checked: a storage class whose objects cannot be read without a
/// restore is refused (the mount reads what it writes).
fn s3_options(a: &MountArgs) -> anyhow::Result<store::S3Options> {
    let s3 = a.s3.options()?;
    if let Some(class @ ("GLACIER" | "DEEP_ARCHIVE")) = s3.storage_class.as_deref() {
        bail!(UsageError(format!(
            "--storage-class {class}: objects in it cannot be read without a restore, and a mount reads what it writes (pack can write it)"
        )));
    }
    Ok(s3)
}

#[allow(clippy::too_many_arguments)]
fn serve(
    a: MountArgs,
    source: Source,
    (mut cfg, disk_cache): (FsConfig, Option<DiskCache>),
    s3: store::S3Options,
    mut kernel: KernelOptions,
    mountpoint: std::path::PathBuf,
    ready: &mut Readiness,
    log: Option<&std::fs::File>,
) -> anyhow::Result<()> {
    // The dispatcher (and its GPU thread) starts here, after a --daemon fork: threads and CUDA
    // contexts do not survive fork.
    let dispatcher = mount_dispatcher(&a.codec, kernel.read_only, cfg.io_budget)?;
    let services = Services { dispatcher: Arc::new(dispatcher), disk_cache };
    // The request threads run at `--request-nice` (below); the runtime's threads, which its
    // blocking pool starts on demand from whichever thread asks, and the CPU workers keep the
    // process's priority.
    let own_nice = rustix::process::getpriority_process(None).ok();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(move || {
            if let Some(n) = own_nice {
                // (A lower priority is always allowed, and `--request-nice` only raises.)
                let _ = rustix::process::setpriority_process(None, n);
            }
        })
        .build()
        .context("cannot start the runtime")?;
    let _ = shrinkfs_codec::workers::threads();
    let bucket = rt.block_on(store::open(&source, &s3))?;
    rt.block_on(bucket.check_reachable(std::time::Duration::from_secs(30)))?;
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
    if !kernel.read_only {
        bucket.check_writable()?;
        match rt.block_on(clean_leftovers(&bucket, CLEANUP_AT_MOUNT)) {
            Ok(said) => tracing::info!("{said}"),
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "cleanup at mount failed"),
        }
    }
    let describe = bucket.describe.clone();
    cfg.read_only = kernel.read_only;
    let fs = Arc::new(Fs::new(bucket, cfg, services));
    fs.metrics().set_labels(shrinkfs_fuse::metrics::collect::Labels {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        commit: option_env!("SHRINKFS_COMMIT").unwrap_or("unknown").to_owned(),
        source: describe.clone(),
        mountpoint: mountpoint.display().to_string(),
    });
    let weak = Arc::downgrade(&fs);
    fs.metrics().watch_dirty(Box::new(move || weak.upgrade().map_or(0, |fs| fs.dirty_bytes())));
    if let Some(addr) = a.metrics_addr {
        let listener =
            std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr} for metrics"))?;
        listener.set_nonblocking(true).context("metrics socket")?;
        fs.set_metrics_addr(listener.local_addr().map_or_else(|_| addr.to_string(), |a| a.to_string()));
        let metrics = fs.metrics().clone();
        rt.spawn(async move {
            match tokio::net::TcpListener::from_std(listener) {
                Ok(l) => crate::exporter::serve(l, metrics).await,
                Err(e) => tracing::error!(error = %e, "metrics endpoint failed"),
            }
        });
    }
    kernel.fs_name = describe.clone();
    // Before the mount exists: a stop signal from now on unmounts it cleanly.
    let handlers = crate::signals::Handlers::install(&rt);
    let claimed = connection::claim(&mountpoint)?;
    let (session, conn) = session::mount(fs.clone(), rt.handle().clone(), &mountpoint, &kernel, a.threads)
        .with_context(|| format!("cannot mount {describe} at {}", mountpoint.display()))?;
    drop(claimed);
    // (At once: the mount is visible from here on.)
    if let Err(e) = session::set_readahead(&conn, session::READAHEAD_KIB) {
        tracing::debug!(error = %e, "kernel readahead left at its default (setting it needs root)");
    }
    // Before anyone is told the mount is ready: `shrinkfs unmount` finds this process by it.
    let record = crate::runrecord::Record::create(conn.dev());
    let outcome = (|| {
        let request_nice = a.request_nice;
        let serving = std::thread::Builder::new()
            .name("fuse-session".into())
            .spawn(move || {
                // The session's request threads, started by `run`, inherit this thread's priority.
                shrinkfs_codec::dispatch::ask_priority(request_nice, "the FUSE request");
                session.run()
            })
            .context("cannot start the FUSE session")?;
        // Ready only once the mount answers a request (a stat of its root, served by the session).
        std::fs::metadata(&mountpoint)
            .with_context(|| format!("the mount at {} does not answer", mountpoint.display()))?;
        tracing::info!(source = %describe, mountpoint = %mountpoint.display(), "mounted");
        ready.ready(log, &mountpoint);
        let watcher = rt.spawn(crate::signals::watch(fs.clone(), conn.clone(), a.log_file.clone(), handlers));
        let stop_upkeep = Arc::new(tokio::sync::Notify::new());
        let upkeep = rt.spawn(upkeep(Arc::downgrade(&fs), stop_upkeep.clone()));
        let stop_idle_room = Arc::new(tokio::sync::Notify::new());
        let idle_room = rt.spawn(idle_room(Arc::downgrade(&fs), stop_idle_room.clone()));
        let ended = serving.join().map_err(|_| anyhow::anyhow!("the FUSE session panicked"))?;
        watcher.abort();
        // (Waited for, not aborted: a try of a kept file ends before the unmount's own.)
        stop_upkeep.notify_one();
        stop_idle_room.notify_one();
        let _ = rt.block_on(upkeep);
        let _ = rt.block_on(idle_room);
        if !crate::signals::STOPPING.load(std::sync::atomic::Ordering::Relaxed) {
            tracing::info!(mountpoint = %mountpoint.display(), "unmounted from outside (umount or fusermount -u); exiting");
        }
        crate::daemon::stopping("unmounted");
        ended.context("the FUSE session ended with an error")?;
        let flushed = rt.block_on(fs.flush_all());
        let abandoned = rt.block_on(fs.abandon_open());
        if abandoned > 0 {
            tracing::warn!(files = abandoned, "files still open for writing when the mount ended were not stored");
        }
        let lost = fs.files_lost();
        if lost > 0 {
            // The loss is what the caller must hear; the store's error is the reason.
            let why = flushed.err().map(|e| format!(" ({e})")).unwrap_or_default();
            return Err(std::io::Error::other(format!(
                "{lost} file(s) closed, or left open at unmount, with changes that could not be stored{why}: the log names them"
            )))
            .context("unmounted");
        }
        flushed.context("storing pending files or directory times, or deleting removed files, at unmount")?;
        tracing::info!(mountpoint = %mountpoint.display(), "unmounted");
        Ok(())
    })();
    if let Some(r) = record {
        r.ended(&outcome);
    }
    outcome
}

/// The bucket cannot be opened or reached (exit code 3, like any I/O failure).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// How old an interrupted write's leftovers must be before a mount removes them at start (younger
/// ones may belong to another mount of the same bucket still writing).
pub const CLEANUP_AT_MOUNT: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes leftovers of interrupted writes older than `older_than` and says what went.
pub async fn clean_leftovers(bucket: &store::Bucket, older_than: std::time::Duration) -> anyhow::Result<String> {
    let done = bucket.cleanup(older_than).with_context(|| format!("cleaning up {}", bucket.describe))?;
    let uploads = bucket
        .abort_stale_uploads(older_than)
        .await
        .with_context(|| format!("aborting interrupted uploads in {}", bucket.describe))?;
    let said = format!(
        "{}: removed {} leftover file(s) of interrupted writes, {}; aborted {} interrupted upload(s)",
        bucket.describe,
        done.files,
        crate::size::human(done.bytes),
        uploads.aborted,
    );
    match uploads.first_refusal {
        None => Ok(said),
        Some((key, reason)) => Err(std::io::Error::other(format!(
            "{said}; the store refused to abort {} more (first: {key}: {reason}); their markers stay for the next cleanup",
            uploads.refused
        ))
        .into()),
    }
}

/// Runs `shrinkfs cleanup`.
pub fn run_cleanup(a: crate::cli::CleanupArgs) -> anyhow::Result<()> {
    let source = Source::parse(&a.source)?;
    let s3 = a.s3.options()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the runtime")?;
    let bucket = rt.block_on(store::open(&source, &s3))?;
    println!("{}", rt.block_on(clean_leftovers(&bucket, a.older_than))?);
    Ok(())
}

/// `shrinkfs unmount`: unmounts, then waits for the mount's process to store what is pending and
/// end, and fails as it failed (files it could not store: exit code 3).
pub fn run_unmount(a: UnmountArgs) -> anyhow::Result<()> {
    let conn = connection::shrinkfs_at(&a.mountpoint)?;
    let serving = crate::runrecord::serving(conn.dev());
    conn.unmount()?;
    if let Some(s) = serving {
        s.wait(std::time::Duration::from_secs(2))?;
    }
    Ok(())
}

/// The GPU settings a mount starts its dispatcher with: a read-only mount (`--read-only`, or
/// `ro` among its options) writes no frame, and `--gpu auto` decodes a read's batch on the GPU
/// only where it is measured faster than the cores, which it was not for objects the cores wrote
/// on the one host measured (BENCHMARKS.md §9, session 22), so there it starts no GPU (whose
/// warm-up would hold pinned host and device memory for what may never pay).
fn mount_gpu(codec: &crate::cli::CodecArgs, read_only: bool) -> crate::cli::GpuArgs {
    let mut gpu = codec.gpu.clone();
    if read_only && gpu.gpu == crate::cli::GpuChoice::Auto {
        gpu.gpu = crate::cli::GpuChoice::Off;
    }
    gpu
}

/// A mount's dispatcher (see [`mount_gpu`]). A read-only mount encodes nothing, so it neither
/// waits for a GPU-only codec's GPU nor warns that such frames would be written as zstd.
fn mount_dispatcher(
    codec: &crate::cli::CodecArgs,
    read_only: bool,
    in_flight: u64,
) -> anyhow::Result<shrinkfs_codec::dispatch::Dispatcher> {
    if read_only {
        return mount_gpu(codec, true).dispatcher(None, codec.serves(Some(in_flight)));
    }
    codec.dispatcher(None, Some(in_flight))
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

    /// The arguments of a `shrinkfs mount` command line (words split at spaces).
    fn mount_args(line: &str) -> MountArgs {
        use clap::Parser;
        let crate::cli::Command::Mount(m) = crate::cli::Cli::try_parse_from(line.split(' ')).unwrap().command else {
            panic!("not a mount")
        };
        *m
    }

    #[test]
    fn deletes_run_behind_unlinks_by_default_only_on_a_bucket_the_mount_is_told_is_its_own() {
        let behind = |line: &str| fs_config(&mount_args(line)).unwrap().0.deletes_behind;
        assert_eq!(behind("shrinkfs mount memory:// /m"), 0);
        assert_eq!(behind("shrinkfs mount memory:// /m --metadata-ttl 60"), 0);
        assert_eq!(behind("shrinkfs mount memory:// /m --metadata-ttl indefinite"), DEFAULT_DELETES_BEHIND);
        assert_eq!(behind("shrinkfs mount memory:// /m --metadata-ttl indefinite --deletes-behind 0"), 0);
        assert_eq!(behind("shrinkfs mount memory:// /m --deletes-behind 100"), 100);
    }

    #[test]
    fn listings_are_kept_by_default_only_on_a_bucket_the_mount_is_told_is_its_own() {
        use std::time::Duration;
        let kept = |line: &str| fs_config(&mount_args(line)).unwrap().0.namespace.listing_ttl;
        assert_eq!(kept("shrinkfs mount memory:// /m"), Duration::ZERO);
        assert_eq!(kept("shrinkfs mount memory:// /m --metadata-ttl 300"), Duration::ZERO);
        assert_eq!(kept("shrinkfs mount memory:// /m --metadata-ttl indefinite"), Duration::MAX);
        let told = "shrinkfs mount memory:// /m --metadata-ttl indefinite --negative-metadata-ttl 5";
        assert_eq!(kept(told), Duration::ZERO, "other writers' new names are to show");
        assert_eq!(kept("shrinkfs mount memory:// /m --listing-ttl 300"), Duration::from_secs(300));
        assert_eq!(kept("shrinkfs mount memory:// /m --metadata-ttl indefinite --listing-ttl 0"), Duration::ZERO);
    }

    #[test]
    fn a_read_only_mount_starts_no_gpu_unless_told_to() {
        use crate::cli::GpuChoice;
        let gpu = |line: &str| {
            let a = mount_args(line);
            let read_only = kernel_options(&a.options, "", a.read_only, a.allow_other).unwrap().read_only;
            mount_gpu(&a.codec, read_only).gpu
        };
        assert_eq!(gpu("shrinkfs mount memory:// /m --read-only"), GpuChoice::Off);
        assert_eq!(gpu("shrinkfs mount memory:// /m -o ro"), GpuChoice::Off);
        assert_eq!(gpu("shrinkfs mount memory:// /m -o noatime,ro"), GpuChoice::Off);
        assert_eq!(gpu("shrinkfs mount memory:// /m"), GpuChoice::Auto);
        assert_eq!(gpu("shrinkfs mount memory:// /m -o rw"), GpuChoice::Auto);
        assert_eq!(gpu("shrinkfs mount memory:// /m --read-only --gpu on"), GpuChoice::On);
    }
}
