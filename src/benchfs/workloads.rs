//! The workloads `bench fs` runs in a directory: each does real file I/O through the kernel and
//! returns what it measured (bytes, operations, seconds, per-operation latencies).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Size of one sequential read or write call.
pub const IO_SIZE: usize = 1 << 20;
/// Size of one random read.
pub const RANDOM_READ: usize = 4096;
/// Largest file the random reads run on.
pub const RANDOM_FILE_MAX: u64 = 256 << 20;

/// One measured row.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// What ran, e.g. "seq write 256M".
    pub name: String,
    /// Bytes moved.
    pub bytes: u64,
    /// Operations done.
    pub ops: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Seconds each operation took.
    pub latencies: Vec<f64>,
    /// Logical bytes this workload left in the target, and where (relative to the target root),
    /// so the bytes stored for them can be counted.
    pub left: Option<(u64, String)>,
    /// p50 and p99 in seconds when a tool reported them instead of samples (fio).
    pub reported: Option<(f64, f64)>,
}

impl Sample {
    fn new(name: impl Into<String>) -> Self {
        Sample { name: name.into(), ..Default::default() }
    }
}

/// Times `f`, recording its latency into `s`.
fn timed<T>(s: &mut Sample, f: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
    let t = Instant::now();
    let r = f()?;
    s.latencies.push(t.elapsed().as_secs_f64());
    s.ops += 1;
    Ok(r)
}

/// `size` bytes of `data`, cycled, as slices of at most `IO_SIZE` (the content of every large file
/// the workloads write, so the zstd reference sees the same bytes as the targets).
fn cycled(data: &[u8], size: u64) -> impl Iterator<Item = &[u8]> {
    cycled_from(data, size, 0)
}

/// Like [`cycled`], starting `shift` bytes into `data`.
fn cycled_from(data: &[u8], size: u64, shift: usize) -> impl Iterator<Item = &[u8]> {
    (0..size).step_by(IO_SIZE).map(move |at| {
        let n = ((size - at) as usize).min(IO_SIZE);
        let from = (at as usize + shift) % (data.len() - IO_SIZE + 1).max(1);
        &data[from..from + n]
    })
}

/// Writes `size` bytes of `data` (cycled) to `path` in 1 MiB calls, then fsync and close.
pub fn seq_write(path: &Path, rel: &str, size: u64, data: &[u8], label: &str) -> anyhow::Result<Sample> {
    seq_write_from(path, rel, size, data, 0, label)
}

/// Like [`seq_write`], the content starting `shift` bytes into `data`.
fn seq_write_from(path: &Path, rel: &str, size: u64, data: &[u8], shift: usize, label: &str) -> anyhow::Result<Sample> {
    let mut s = Sample::new(format!("seq write {label}"));
    let start = Instant::now();
    let mut f = File::create(path).with_context(|| format!("create {}", path.display()))?;
    for piece in cycled_from(data, size, shift) {
        timed(&mut s, || f.write_all(piece))?;
    }
    timed(&mut s, || f.sync_all())?;
    drop(f);
    s.seconds = start.elapsed().as_secs_f64();
    s.bytes = size;
    s.left = Some((size, rel.to_owned()));
    Ok(s)
}

/// Reads `path` to its end in 1 MiB calls.
pub fn seq_read(path: &Path, label: &str) -> anyhow::Result<Sample> {
    let mut s = Sample::new(format!("seq read {label}"));
    let mut buf = vec![0u8; IO_SIZE];
    let start = Instant::now();
    let mut f = File::open(path).with_context(|| format!("open {}", path.display()))?;
    loop {
        let n = timed(&mut s, || f.read(&mut buf))?;
        if n == 0 {
            break;
        }
        s.bytes += n as u64;
    }
    s.seconds = start.elapsed().as_secs_f64();
    Ok(s)
}

/// Path of parallel file `i` under `dir`.
pub fn par_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("p{i:03}.bin"))
}

/// `jobs` writers at once, each writing `size` bytes of `data` (cycled, from its own offset) to
/// its own file in `dir` in 1 MiB calls, then fsync and close: aggregate bytes over the wall time
/// of them all.
pub fn par_write(dir: &Path, rel: &str, jobs: usize, size: u64, data: &[u8], label: &str) -> anyhow::Result<Sample> {
    fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let start = Instant::now();
    let parts = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..jobs)
            .map(|i| {
                let path = par_path(dir, i);
                // Each writer starts elsewhere in the data, so no two files are the same bytes.
                let shift = (i * 7 * IO_SIZE) % data.len().max(1);
                scope.spawn(move || seq_write_from(&path, "", size, data, shift, ""))
            })
            .collect();
        writers.into_iter().map(|w| w.join().expect("writer thread")).collect::<anyhow::Result<Vec<_>>>()
    })?;
    let mut s = Sample::new(format!("par write {jobs}x{label}"));
    s.seconds = start.elapsed().as_secs_f64();
    for p in parts {
        s.ops += p.ops;
        s.latencies.extend(p.latencies);
    }
    s.bytes = size * jobs as u64;
    s.left = Some((s.bytes, rel.to_owned()));
    Ok(s)
}

/// `jobs` readers at once, each reading its own file of [`par_write`] to its end in 1 MiB calls.
pub fn par_read(dir: &Path, jobs: usize, label: &str) -> anyhow::Result<Sample> {
    let start = Instant::now();
    let parts = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..jobs).map(|i| scope.spawn(move || seq_read(&par_path(dir, i), ""))).collect();
        readers.into_iter().map(|r| r.join().expect("reader thread")).collect::<anyhow::Result<Vec<_>>>()
    })?;
    let mut s = Sample::new(format!("par read {jobs}x{label}"));
    s.seconds = start.elapsed().as_secs_f64();
    for p in parts {
        s.ops += p.ops;
        s.bytes += p.bytes;
        s.latencies.extend(p.latencies);
    }
    Ok(s)
}

/// Span of a file each random read has to itself, so every read of the cold pass is the first
/// touch of its region (larger than any filesystem's frame or block here).
pub const RANDOM_REGION: u64 = 1 << 20;

/// Up to `count` random 4 KiB-aligned offsets within a file of `len` bytes, in distinct 1 MiB
/// regions, in random order (the same every run).
pub fn random_offsets(len: u64, count: usize) -> Vec<u64> {
    use rand::seq::SliceRandom;
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let mut regions: Vec<u64> = (0..(len / RANDOM_REGION).max(1)).collect();
    regions.shuffle(&mut rng);
    let blocks = RANDOM_REGION.min(len) / RANDOM_READ as u64;
    regions
        .into_iter()
        .take(count)
        .map(|r| r * RANDOM_REGION + rng.random_range(0..blocks.max(1)) * RANDOM_READ as u64)
        .collect()
}

/// 4 KiB reads at `offsets`, with the kernel's read-ahead turned off for the file.
pub fn random_reads(path: &Path, offsets: &[u64], name: &str) -> anyhow::Result<Sample> {
    let mut s = Sample::new(name);
    let f = File::open(path).with_context(|| format!("open {}", path.display()))?;
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor; advice only.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    }
    let mut buf = vec![0u8; RANDOM_READ];
    let start = Instant::now();
    for &off in offsets {
        let n = timed(&mut s, || f.read_at(&mut buf, off))?;
        s.bytes += n as u64;
    }
    s.seconds = start.elapsed().as_secs_f64();
    Ok(s)
}

/// Path of small file `i` under `dir`.
pub fn small_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("f{i:06}.dat"))
}

/// Creates `count` files of `size` bytes (slices of `data`) in `dir`.
pub fn create_small(dir: &Path, rel: &str, count: usize, size: usize, data: &[u8]) -> anyhow::Result<Sample> {
    fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let mut s = Sample::new(format!("create {count} files"));
    let start = Instant::now();
    for i in 0..count {
        let from = (i * 7919 * 64) % (data.len() - size).max(1);
        timed(&mut s, || {
            let mut f = File::create(small_path(dir, i))?;
            f.write_all(&data[from..from + size])
        })?;
    }
    s.seconds = start.elapsed().as_secs_f64();
    s.bytes = (count * size) as u64;
    s.left = Some((s.bytes, rel.to_owned()));
    Ok(s)
}

/// `stat` of each small file.
pub fn stat_small(dir: &Path, count: usize) -> anyhow::Result<Sample> {
    let mut s = Sample::new(format!("stat {count} files"));
    let start = Instant::now();
    for i in 0..count {
        timed(&mut s, || fs::symlink_metadata(small_path(dir, i)))?;
    }
    s.seconds = start.elapsed().as_secs_f64();
    Ok(s)
}

/// Reads each small file whole.
pub fn read_small(dir: &Path, count: usize) -> anyhow::Result<Sample> {
    let mut s = Sample::new(format!("read {count} files"));
    let start = Instant::now();
    for i in 0..count {
        let got = timed(&mut s, || fs::read(small_path(dir, i)))?;
        s.bytes += got.len() as u64;
    }
    s.seconds = start.elapsed().as_secs_f64();
    Ok(s)
}

/// `ls -l` itself (coreutils, `LC_ALL=C`, output discarded): it lists the directory, `lstat`s every
/// entry and asks each for its ACL and SELinux label until the filesystem says it supports none.
/// A model of it (listing and `lstat` alone) missed those requests, which cost a FUSE mount a round
/// trip each. One operation.
pub fn ls_l(dir: &Path) -> anyhow::Result<Sample> {
    let mut s = Sample::new("ls -l");
    let start = Instant::now();
    let out =
        timed(&mut s, || std::process::Command::new("ls").arg("-l").arg("--").arg(dir).env("LC_ALL", "C").output())
            .context("cannot run ls -l")?;
    s.seconds = start.elapsed().as_secs_f64();
    anyhow::ensure!(out.status.success(), "ls -l failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    // Every line but the "total" one is an entry.
    let entries = out.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count().saturating_sub(1) as u64;
    s.name = format!("ls -l {entries} entries");
    // Entries listed count as the operations' throughput; the latency is the whole listing.
    s.ops = entries;
    Ok(s)
}

/// Deletes each small file.
pub fn delete_small(dir: &Path, count: usize) -> anyhow::Result<Sample> {
    let mut s = Sample::new(format!("delete {count} files"));
    let start = Instant::now();
    for i in 0..count {
        timed(&mut s, || fs::remove_file(small_path(dir, i)))?;
    }
    s.seconds = start.elapsed().as_secs_f64();
    let _ = fs::remove_dir(dir);
    Ok(s)
}

/// `threads` threads for `secs` seconds, each choosing at random: a 4 KiB read of `random_file`
/// (50%), a 64 KiB append to its own log (30%), or a new 4 KiB file (20%).
pub fn mixed(dir: &Path, random_file: &Path, threads: usize, secs: f64, data: &[u8]) -> anyhow::Result<Sample> {
    fs::create_dir_all(dir)?;
    let len = fs::metadata(random_file)?.len();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let results: Vec<anyhow::Result<Sample>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || -> anyhow::Result<Sample> {
                    let mut s = Sample::new("mixed");
                    let mut rng = ChaCha8Rng::seed_from_u64(t as u64);
                    let reader = File::open(random_file)?;
                    let mut log = OpenOptions::new().create(true).append(true).open(dir.join(format!("log{t}")))?;
                    let mut buf = vec![0u8; RANDOM_READ];
                    let mut made = 0usize;
                    while Instant::now() < deadline {
                        let dice = rng.random_range(0..10);
                        if dice < 5 {
                            let off = rng.random_range(0..(len / RANDOM_READ as u64).max(1)) * RANDOM_READ as u64;
                            s.bytes += timed(&mut s, || reader.read_at(&mut buf, off))? as u64;
                        } else if dice < 8 {
                            let from = rng.random_range(0..data.len() - (64 << 10));
                            timed(&mut s, || log.write_all(&data[from..from + (64 << 10)]))?;
                            s.bytes += 64 << 10;
                        } else {
                            let from = rng.random_range(0..data.len() - RANDOM_READ);
                            let p = dir.join(format!("t{t}-{made}"));
                            timed(&mut s, || fs::write(&p, &data[from..from + RANDOM_READ]))?;
                            made += 1;
                            s.bytes += RANDOM_READ as u64;
                        }
                    }
                    log.sync_all()?;
                    Ok(s)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|_| Err(anyhow::anyhow!("worker panicked")))).collect()
    });
    let mut total = Sample::new(format!("mixed, {threads} threads"));
    for r in results {
        let s = r?;
        total.bytes += s.bytes;
        total.ops += s.ops;
        total.latencies.extend(s.latencies);
    }
    total.seconds = start.elapsed().as_secs_f64();
    Ok(total)
}

/// The large-file workloads as fio jobs (fio's own data, 70% compressible).
pub fn fio(dir: &Path, size: u64, label: &str, random_reads: usize) -> anyhow::Result<Vec<Sample>> {
    let jobs = [
        ("write", "1M", format!("fio seq write {label}")),
        ("read", "1M", format!("fio seq read {label}")),
        ("randread", "4k", "fio rand read 4K".to_owned()),
    ];
    let mut out = Vec::new();
    for (rw, bs, name) in jobs {
        let mut cmd = std::process::Command::new("fio");
        cmd.args([
            "--name=shrinkfs-bench",
            "--ioengine=psync",
            "--output-format=json",
            "--buffer_compress_percentage=70",
        ])
        .arg(format!("--directory={}", dir.display()))
        .arg(format!("--size={size}"))
        .arg(format!("--rw={rw}"))
        .arg(format!("--bs={bs}"));
        if rw == "write" {
            cmd.arg("--end_fsync=1");
        }
        if rw == "randread" {
            cmd.arg(format!("--number_ios={random_reads}"));
        }
        let o = cmd.output().context("run fio")?;
        anyhow::ensure!(o.status.success(), "fio {rw}: {}", String::from_utf8_lossy(&o.stderr).trim());
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).context("fio's JSON output")?;
        let side = &v["jobs"][0][if rw == "write" { "write" } else { "read" }];
        let pct = |p: &str| side["clat_ns"]["percentile"][p].as_f64().unwrap_or(0.0) / 1e9;
        let runtime = side["runtime"].as_f64().unwrap_or(0.0) / 1e3;
        let mut s = Sample::new(name);
        s.bytes = side["io_bytes"].as_u64().unwrap_or(0);
        s.ops = side["total_ios"].as_u64().unwrap_or(0);
        s.seconds = runtime;
        s.reported = Some((pct("50.000000"), pct("99.000000")));
        out.push(s);
    }
    let _ = fs::remove_file(dir.join("shrinkfs-bench.0.0"));
    Ok(out)
}

/// The `zstd` command line on the same bytes, as a floor beside the sequential workloads:
/// `zstd -1 -T2` compressing `size` bytes of `data` (cycled, read from a file in `scratch`, hot in
/// the page cache) and `zstd -d` decompressing the result, both to /dev/null.
pub fn zstd_reference(scratch: &Path, size: u64, data: &[u8], label: &str) -> anyhow::Result<Vec<Sample>> {
    let raw = scratch.join(format!("zstd-ref-{label}.bin"));
    let packed = scratch.join(format!("zstd-ref-{label}.bin.zst"));
    let mut f = File::create(&raw)?;
    for piece in cycled(data, size) {
        f.write_all(piece)?;
    }
    drop(f);
    let run = |args: &[&str], input: &Path, output: &Path| -> anyhow::Result<f64> {
        let t = Instant::now();
        let st = std::process::Command::new("zstd").args(args).arg(input).arg("-o").arg(output).status()?;
        anyhow::ensure!(st.success(), "zstd {args:?} failed");
        Ok(t.elapsed().as_secs_f64())
    };
    let _ = fs::read(&raw)?; // into the page cache
    let tc = run(&["-q", "-f", "-1", "-T2"], &raw, &packed)?;
    let tc = tc.min(run(&["-q", "-f", "-1", "-T2"], &raw, Path::new("/dev/null"))?);
    let td = run(&["-q", "-f", "-d"], &packed, Path::new("/dev/null"))?;
    let mut out = Vec::new();
    for (name, secs) in [(format!("seq write {label}"), tc), (format!("seq read {label} (cold)"), td)] {
        let mut s = Sample::new(name);
        (s.bytes, s.ops, s.seconds) = (size, 1, secs);
        s.reported = Some((secs, secs));
        out.push(s);
    }
    out[0].left = Some((size, packed.file_name().unwrap_or_default().to_string_lossy().into_owned()));
    let _ = fs::remove_file(&raw);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_offsets_fall_in_distinct_regions_inside_the_file() {
        let offs = random_offsets(64 << 20, 1000);
        assert_eq!(offs.len(), 64, "one per 1 MiB region at most");
        let regions: std::collections::HashSet<u64> = offs.iter().map(|o| o / RANDOM_REGION).collect();
        assert_eq!(regions.len(), 64);
        assert!(offs.iter().all(|o| o % 4096 == 0 && o + 4096 <= 64 << 20));
        assert_eq!(offs, random_offsets(64 << 20, 1000), "the same every run");
        assert_eq!(random_offsets(8192, 5).len(), 1);
    }
}
