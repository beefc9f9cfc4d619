//! `shrinkfs bench fs`: the same workloads on every target directory, one after another in one run,
//! with the filesystem process's CPU time and peak memory and the bytes its backend stored; printed
//! as a table and written as JSON and a self-contained HTML report with plots.

mod probe;
mod report;
mod workloads;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::ValueEnum;
use serde::Serialize;

use crate::cli::BenchFsArgs;
use crate::exit::UsageError;
use workloads::Sample;

/// The workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
pub enum Workload {
    /// Write a large file sequentially (each --size), fsync, close.
    SeqWrite,
    /// Read it back sequentially, kernel caches dropped first.
    SeqRead,
    /// 4 KiB reads at random offsets: cold, then again with the filesystem's caches warm.
    RandRead,
    /// Create, stat, read and delete --files small files.
    SmallFiles,
    /// `ls -l` of the directory of --files small files.
    Ls,
    /// Several threads mixing random reads, appends and file creation.
    Mixed,
    /// --jobs writers at once, each writing its own file of each --size (aggregate throughput).
    ParWrite,
    /// --jobs readers at once, each reading its own file back, kernel caches dropped first.
    ParRead,
}

/// Parses `LABEL=DIR` or `DIR` (labelled by its last component).
pub fn labelled(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((l, d)) if !l.is_empty() && !d.is_empty() => Ok((l.to_owned(), PathBuf::from(d))),
        Some(_) => Err(format!("{s:?}: expected LABEL=DIR or DIR")),
        None => {
            let p = PathBuf::from(s);
            let label = p.file_name().map_or_else(|| s.to_owned(), |n| n.to_string_lossy().into_owned());
            Ok((label, p))
        }
    }
}

/// Parses `LABEL=PID`.
pub fn labelled_pid(s: &str) -> Result<(String, u32), String> {
    let (l, p) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected LABEL=PID"))?;
    Ok((l.to_owned(), p.parse().map_err(|_| format!("{p:?} is not a process id"))?))
}

/// One target as the report describes it.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// Its label.
    pub label: String,
    /// The directory.
    pub dir: PathBuf,
    /// Whether it is a FUSE mount.
    pub fuse: bool,
    /// The filesystem process, if one was found.
    pub pid: Option<u32>,
    /// Where its bytes are stored, if known.
    pub backend: Option<PathBuf>,
}

/// One measured row of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Target label.
    pub target: String,
    /// Workload row name, e.g. "seq write 256M".
    pub workload: String,
    /// Bytes moved.
    pub bytes: u64,
    /// Operations.
    pub ops: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// MB/s (10^6 bytes), when bytes moved.
    pub mb_per_s: Option<f64>,
    /// Operations per second.
    pub ops_per_s: f64,
    /// Median latency, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
    /// CPU seconds the filesystem process used during the workload.
    pub fs_cpu_s: Option<f64>,
    /// Peak resident memory of the filesystem process during the workload, MiB.
    pub fs_peak_mib: Option<f64>,
    /// Logical bytes the workload left.
    pub logical_bytes: Option<u64>,
    /// Bytes the backend stored for them.
    pub stored_bytes: Option<u64>,
    /// Dollars per month to store a TiB of such data at --price-per-gb-month.
    pub usd_per_tib_month: Option<f64>,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// When it ran (UTC, RFC 3339).
    pub date: String,
    /// The command line.
    pub command: String,
    /// Host facts.
    pub host: String,
    /// Corpus the files were made of.
    pub data: String,
    /// Targets in run order (the baseline first).
    pub targets: Vec<Target>,
    /// Caveats met while running.
    pub notes: Vec<String>,
    /// Every row.
    pub rows: Vec<Row>,
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn host() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_default();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().map(|l| l.split_whitespace().nth(1).unwrap_or("0").parse::<u64>().unwrap_or(0)))
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpus} CPUs ({model}), {} GiB RAM, Linux {}", mem >> 20, kernel.trim())
}

/// Runs one step against a target, measuring its filesystem process around it.
struct Runner<'a> {
    target: &'a Target,
    price: f64,
    rows: Vec<Row>,
    /// What is running, for error messages and the progress bar.
    what: String,
    /// Steps that failed on this target (one filesystem failing a workload does not stop the run).
    failures: Vec<String>,
}

impl Runner<'_> {
    /// Runs an untimed step (making files a workload needs); false, and a failure noted, if it failed.
    fn setup(&mut self, what: &str, step: impl FnOnce() -> anyhow::Result<()>) -> bool {
        match step() {
            Ok(()) => true,
            Err(e) => {
                self.fail(format!("{}: {what} failed: {e:#}", self.target.label));
                false
            }
        }
    }

    /// Runs a measured step; a failure is noted and the run goes on.
    fn measure(&mut self, step: impl FnOnce() -> anyhow::Result<Vec<Sample>>) {
        if let Err(e) = self.measure_inner(step) {
            self.fail(format!("{e:#}"));
        }
    }

    fn fail(&mut self, why: String) {
        eprintln!("shrinkfs: warning: {why}");
        self.failures.push(why);
    }

    fn measure_inner(&mut self, step: impl FnOnce() -> anyhow::Result<Vec<Sample>>) -> anyhow::Result<()> {
        let pid = self.target.pid;
        let cpu0 = pid.and_then(probe::cpu_seconds);
        let watch = pid.map(probe::PeakMemory::start);
        let samples = step().with_context(|| format!("target {}: {}", self.target.label, self.what));
        let peak = watch.and_then(|w| w.finish());
        let cpu1 = pid.and_then(probe::cpu_seconds);
        for mut s in samples? {
            s.latencies.sort_by(f64::total_cmp);
            let (p50, p99) = s.reported.unwrap_or((percentile(&s.latencies, 0.5), percentile(&s.latencies, 0.99)));
            let stored = match (&s.left, self.target.backend.as_deref()) {
                (Some((_, rel)), Some(root)) => Some(probe::stored_bytes(root, rel)),
                _ => None,
            };
            let logical = s.left.as_ref().map(|l| l.0);
            let cost = match (logical, stored) {
                (Some(l), Some(st)) if l > 0 => Some(st as f64 / l as f64 * 1024.0 * self.price),
                _ => None,
            };
            self.rows.push(Row {
                target: self.target.label.clone(),
                workload: s.name,
                bytes: s.bytes,
                ops: s.ops,
                seconds: s.seconds,
                mb_per_s: (s.bytes > 0).then(|| s.bytes as f64 / s.seconds.max(1e-9) / 1e6),
                ops_per_s: s.ops as f64 / s.seconds.max(1e-9),
                p50_ms: p50 * 1e3,
                p99_ms: p99 * 1e3,
                fs_cpu_s: cpu0.zip(cpu1).map(|(a, b)| b - a),
                fs_peak_mib: peak.map(|p| p as f64 / (1 << 20) as f64),
                logical_bytes: logical,
                stored_bytes: stored,
                usd_per_tib_month: cost,
            });
        }
        Ok(())
    }
}

fn size_label(n: u64) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{}G", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}M", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}K", n >> 10),
        n => n.to_string(),
    }
}

/// Runs every workload on every target and writes the reports.
pub fn run(a: BenchFsArgs) -> anyhow::Result<()> {
    let mut targets = Vec::new();
    for (label, dir) in a.baseline.iter().chain(&a.target) {
        if !dir.is_dir() {
            bail!(UsageError(format!("target {label}: {} is not a directory", dir.display())));
        }
        if targets.iter().any(|t: &Target| t.label == *label) {
            bail!(UsageError(format!("two targets are labelled {label:?}; use LABEL=DIR")));
        }
        let fuse = probe::is_fuse(dir);
        let pid = a
            .pid
            .iter()
            .find(|(l, _)| l == label)
            .map(|p| p.1)
            .or_else(|| fuse.then(|| probe::find_fs_process(dir)).flatten());
        let backend =
            a.backend.iter().find(|(l, _)| l == label).map(|b| b.1.clone()).or_else(|| (!fuse).then(|| dir.clone()));
        targets.push(Target { label: label.clone(), dir: dir.clone(), fuse, pid, backend });
    }
    for (l, _) in &a.backend {
        if !targets.iter().any(|t| &t.label == l) {
            bail!(UsageError(format!("--backend {l}=…: no target is labelled {l:?}")));
        }
    }
    let mut notes = Vec::new();
    for t in &targets {
        if t.fuse && t.pid.is_none() {
            notes.push(format!(
                "{}: filesystem process not found (give --pid {}=PID); no CPU or memory figures",
                t.label, t.label
            ));
        }
        if t.fuse && t.backend.is_none() {
            notes.push(format!("{}: no --backend given; stored bytes not counted", t.label));
        }
    }
    let biggest = a.size.iter().copied().max().unwrap_or(256 << 20);
    let data = match &a.data_file {
        Some(path) => read_data_file("--data-file", path, biggest, (workloads::IO_SIZE as u64).max(a.file_size))?,
        None => crate::corpus::generate(a.data, (biggest as usize).clamp(4 << 20, 64 << 20), 1),
    };
    let has = |w: Workload| a.workloads.contains(&w);
    let mut steps = 0u64;
    steps += if has(Workload::SeqWrite) { a.size.len() as u64 } else { 0 };
    steps += if has(Workload::SeqRead) { a.size.len() as u64 } else { 0 };
    steps += if has(Workload::ParWrite) { a.size.len() as u64 } else { 0 };
    steps += if has(Workload::ParRead) { a.size.len() as u64 } else { 0 };
    steps +=
        [Workload::RandRead, Workload::SmallFiles, Workload::Ls, Workload::Mixed].iter().filter(|w| has(**w)).count()
            as u64;
    steps += u64::from(a.fio);
    let bar = indicatif::ProgressBar::new(steps * targets.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let mut dropped_ok = true;
    let mut rows = Vec::new();
    if has(Workload::SeqWrite) && !a.no_reference && which("zstd") {
        // The zstd command line on the same bytes: the floor the sequential rows are held to.
        let scratch = tempfile::tempdir_in(&targets[0].dir).context("scratch directory for the zstd reference")?;
        let reference = Target {
            label: "zstd CLI".into(),
            dir: scratch.path().to_path_buf(),
            fuse: false,
            pid: None,
            backend: Some(scratch.path().to_path_buf()),
        };
        let mut r = Runner {
            target: &reference,
            price: a.price_per_gb_month,
            rows: Vec::new(),
            what: "zstd reference".into(),
            failures: Vec::new(),
        };
        for &size in &a.size {
            r.measure(|| workloads::zstd_reference(scratch.path(), size, &data, &size_label(size)));
        }
        rows.extend(r.rows);
        notes.extend(r.failures);
    }
    for t in &targets {
        let work = t.dir.join("shrinkfs-bench");
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work)
            .with_context(|| format!("target {}: cannot write {}", t.label, work.display()))?;
        let rel = |name: &str| format!("shrinkfs-bench/{name}");
        let mut r = Runner {
            target: t,
            price: a.price_per_gb_month,
            rows: Vec::new(),
            what: String::new(),
            failures: Vec::new(),
        };
        let step = |r: &mut Runner, what: &str| {
            r.what = what.to_owned();
            bar.set_message(format!("{}: {what}", t.label));
        };
        let mut drop_caches = || {
            dropped_ok &= probe::drop_caches();
        };
        for &size in &a.size {
            let (label, name) = (size_label(size), format!("seq-{}.bin", size_label(size)));
            let path = work.join(&name);
            if has(Workload::SeqWrite) || has(Workload::SeqRead) && !path.exists() {
                step(&mut r, &format!("seq write {label}"));
                let s = || Ok(vec![workloads::seq_write(&path, &rel(&name), size, &data, &label)?]);
                if has(Workload::SeqWrite) {
                    r.measure(s);
                    bar.inc(1);
                } else {
                    r.setup("writing the file to read", || s().map(drop));
                }
            }
            if has(Workload::SeqRead) {
                step(&mut r, &format!("seq read {label}"));
                drop_caches();
                r.measure(|| Ok(vec![workloads::seq_read(&path, &format!("{label} (cold)"))?]));
                bar.inc(1);
            }
        }
        for &size in &a.size {
            let label = size_label(size);
            let (dir, name) = (work.join(format!("par-{label}")), format!("par-{label}"));
            if has(Workload::ParWrite) || has(Workload::ParRead) && !dir.exists() {
                step(&mut r, &format!("{} writers of {label}", a.jobs));
                let w = || Ok(vec![workloads::par_write(&dir, &rel(&name), a.jobs, size, &data, &label)?]);
                if has(Workload::ParWrite) {
                    r.measure(w);
                    bar.inc(1);
                } else {
                    r.setup("writing the files to read", || w().map(drop));
                }
            }
            if has(Workload::ParRead) {
                step(&mut r, &format!("{} readers of {label}", a.jobs));
                drop_caches();
                r.measure(|| Ok(vec![workloads::par_read(&dir, a.jobs, &format!("{label} (cold)"))?]));
                bar.inc(1);
            }
        }
        let random_file = work.join("random.bin");
        if has(Workload::RandRead) || has(Workload::Mixed) {
            let len = biggest.min(workloads::RANDOM_FILE_MAX);
            r.setup("writing the random-read file", || {
                workloads::seq_write(&random_file, &rel("random.bin"), len, &data, "").map(drop)
            });
        }
        if has(Workload::RandRead) {
            step(&mut r, "random reads");
            let len = std::fs::metadata(&random_file).map_or(0, |m| m.len());
            let offsets = workloads::random_offsets(len, a.random_reads);
            drop_caches();
            r.measure(|| Ok(vec![workloads::random_reads(&random_file, &offsets, "rand read 4K (cold)")?]));
            // The kernel's copy of the pages goes, the filesystem's caches stay.
            probe::drop_file_pages(&random_file);
            r.measure(|| Ok(vec![workloads::random_reads(&random_file, &offsets, "rand read 4K (warm)")?]));
            bar.inc(1);
        }
        let small = work.join("small");
        if has(Workload::SmallFiles) || has(Workload::Ls) {
            step(&mut r, "small files");
            let create =
                || Ok(vec![workloads::create_small(&small, &rel("small"), a.files, a.file_size as usize, &data)?]);
            if has(Workload::SmallFiles) {
                r.measure(create);
                drop_caches();
                r.measure(|| Ok(vec![workloads::stat_small(&small, a.files)?]));
                drop_caches();
                r.measure(|| Ok(vec![workloads::read_small(&small, a.files)?]));
            } else {
                r.setup("creating the files to list", || create().map(drop));
            }
            if has(Workload::Ls) {
                step(&mut r, "ls -l");
                drop_caches();
                r.measure(|| Ok(vec![workloads::ls_l(&small)?]));
                bar.inc(1);
            }
            if has(Workload::SmallFiles) {
                r.measure(|| Ok(vec![workloads::delete_small(&small, a.files)?]));
                bar.inc(1);
            } else {
                let _ = std::fs::remove_dir_all(&small);
            }
        }
        if has(Workload::Mixed) {
            step(&mut r, "mixed");
            r.measure(|| {
                Ok(vec![workloads::mixed(&work.join("mixed"), &random_file, a.threads, a.mixed_seconds, &data)?])
            });
            bar.inc(1);
        }
        if a.fio {
            step(&mut r, "fio");
            if crate::benchfs::which("fio") {
                let fio_dir = work.join("fio");
                let _ = std::fs::create_dir_all(&fio_dir);
                r.measure(|| workloads::fio(&fio_dir, biggest, &size_label(biggest), a.random_reads));
            } else if !notes.iter().any(|n| n.starts_with("fio")) {
                notes.push("fio is not installed: fio jobs skipped".into());
            }
            bar.inc(1);
        }
        rows.extend(r.rows);
        notes.extend(r.failures);
        if !a.keep {
            let _ = std::fs::remove_dir_all(&work);
        }
    }
    bar.finish_and_clear();
    if !dropped_ok {
        notes.push("kernel caches could not be dropped (needs root): cold figures may be warm".into());
    }
    let report = Report {
        date: report::now_utc(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        host: host(),
        data: a.data_file.as_ref().map_or_else(|| a.data.name().into(), |p| p.display().to_string()),
        targets,
        notes,
        rows,
    };
    print!("{}", report::table(&report));
    std::fs::write(&a.json, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("cannot write {}", a.json.display()))?;
    std::fs::write(&a.html, report::html(&report)?).with_context(|| format!("cannot write {}", a.html.display()))?;
    println!("\nwrote {} and {}", a.json.display(), a.html.display());
    Ok(())
}

/// Whether a program is on the PATH.
pub fn which(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| is_executable(&d.join(name))))
}

/// The first `want` bytes of `path` (all of it if shorter, but at least `least`), as the content
/// of every file written; `flag` names the option that gave the path, for errors.
pub(crate) fn read_data_file(flag: &str, path: &std::path::Path, want: u64, least: u64) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {flag} {}", path.display()))?;
    let mut data = Vec::new();
    file.take(want.max(least))
        .read_to_end(&mut data)
        .with_context(|| format!("cannot read {flag} {}", path.display()))?;
    if (data.len() as u64) < least {
        anyhow::bail!(crate::exit::UsageError(format!(
            "{flag} {} holds {} bytes; it needs at least {least}",
            path.display(),
            data.len()
        )));
    }
    Ok(data)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_percentiles() {
        assert_eq!(labelled("fast=/mnt/a").unwrap(), ("fast".into(), PathBuf::from("/mnt/a")));
        assert_eq!(labelled("/mnt/b").unwrap(), ("b".into(), PathBuf::from("/mnt/b")));
        assert!(labelled("=x").is_err());
        assert_eq!(labelled_pid("s3fs=42").unwrap(), ("s3fs".into(), 42));
        assert!(labelled_pid("s3fs=x").is_err());
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!((percentile(&v, 0.5), percentile(&v, 0.99)), (50.0, 99.0));
        assert_eq!(size_label(256 << 20), "256M");
        assert_eq!(size_label(1 << 30), "1G");
    }
}
