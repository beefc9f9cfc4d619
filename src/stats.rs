//! `shrinkfs stats MOUNTPOINT`: a running mount's throughput, ratio, cache hit rate, store latency
//! and errors, GPU share, memory and dirty bytes, read from the mount's own metrics endpoint (the
//! mount names its address in the root's extended attribute `user.shrinkfs.metrics_addr`).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;
use shrinkfs_fuse::fs::METRICS_ADDR_XATTR;

use crate::cli::StatsArgs;
use crate::exit::UsageError;
use crate::mount::Unavailable;

/// The samples of one scrape: `name{labels}` → value.
#[derive(Debug, Default, Clone)]
pub struct Scrape(BTreeMap<String, f64>);

impl Scrape {
    /// Parses Prometheus text: every sample line, comments skipped.
    pub fn parse(text: &str) -> Self {
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| {
                let (key, value) = l.rsplit_once(' ')?;
                Some((key.trim().to_owned(), value.parse::<f64>().ok()?))
            })
            .collect();
        Scrape(samples)
    }

    /// The sum of the samples of metric `name` whose labels contain every one of `labels`
    /// (`outcome="error"`, say).
    pub fn sum(&self, name: &str, labels: &[&str]) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| {
                let (metric, rest) = k.split_once('{').unwrap_or((k, ""));
                metric == name && labels.iter().all(|l| rest.contains(l))
            })
            .map(|(_, v)| v)
            .sum::<f64>()
            // (An empty sum is -0.0, which would print as "-0".)
            + 0.0
    }
}

/// One reading: totals at its end, and rates over its span.
#[derive(Debug, Serialize)]
pub struct Reading {
    /// Seconds between the two scrapes the rates come from.
    pub seconds: f64,
    /// Uncompressed bytes per second read by programs from objects.
    pub read_bytes_per_s: f64,
    /// Uncompressed bytes per second of objects written.
    pub written_bytes_per_s: f64,
    /// Bytes per second read from the store.
    pub store_read_bytes_per_s: f64,
    /// Bytes per second written to the store.
    pub store_written_bytes_per_s: f64,
    /// Uncompressed bytes written over stored bytes written, since the mount started.
    pub ratio: Option<f64>,
    /// Share of frame reads the memory cache answered, over the span (None: no reads).
    pub cache_hit_rate: Option<f64>,
    /// Store requests per second.
    pub store_requests_per_s: f64,
    /// Mean store request latency over the span, seconds (retries included).
    pub store_latency_s: Option<f64>,
    /// Store request tries that failed, and retries, since the mount started.
    pub store_errors: f64,
    /// Retries since the mount started.
    pub store_retries: f64,
    /// FUSE operations per second, and those that failed (not counting expected answers).
    pub fuse_ops_per_s: f64,
    /// FUSE operations that failed since the mount started.
    pub fuse_errors: f64,
    /// Share of frames encoded on the GPU, since the mount started (None: none encoded).
    pub gpu_share: Option<f64>,
    /// Resident memory of the mount process, bytes.
    pub resident_bytes: f64,
    /// Memory budget in use and its size, bytes.
    pub budget_used_bytes: f64,
    /// Size of the memory budget.
    pub budget_limit_bytes: f64,
    /// Bytes written to open files and not stored yet.
    pub dirty_bytes: f64,
}

const FUSE_OPS: &str = "shrinkfs_fuse_op_duration_seconds_count";
const STORE_REQS: &str = "shrinkfs_store_request_duration_seconds_count";
const STORE_SECS: &str = "shrinkfs_store_request_duration_seconds_sum";

impl Reading {
    /// What changed from `a` to `b`, `seconds` apart.
    pub fn between(a: &Scrape, b: &Scrape, seconds: f64) -> Self {
        let d = |name: &str, labels: &[&str]| (b.sum(name, labels) - a.sum(name, labels)).max(0.0);
        let rate = |name: &str| d(name, &[]) / seconds.max(1e-9);
        let ratio = |num: f64, den: f64| (den > 0.0).then(|| num / den);
        let (hits, misses) = (d("shrinkfs_cache_hits_total", &[]), d("shrinkfs_cache_misses_total", &[]));
        let (gpu, cpu) = (b.sum("shrinkfs_gpu_frames_total", &[]), b.sum("shrinkfs_codec_cpu_frames_total", &[]));
        Reading {
            seconds,
            read_bytes_per_s: rate("shrinkfs_logical_read_bytes_total"),
            written_bytes_per_s: rate("shrinkfs_logical_written_bytes_total"),
            store_read_bytes_per_s: rate("shrinkfs_store_read_bytes_total"),
            store_written_bytes_per_s: rate("shrinkfs_store_written_bytes_total"),
            ratio: ratio(
                b.sum("shrinkfs_logical_written_bytes_total", &[]),
                b.sum("shrinkfs_store_written_bytes_total", &[]),
            ),
            cache_hit_rate: ratio(hits, hits + misses),
            store_requests_per_s: rate(STORE_REQS),
            store_latency_s: ratio(d(STORE_SECS, &[]), d(STORE_REQS, &[])),
            store_errors: b.sum("shrinkfs_store_errors_total", &[]),
            store_retries: b.sum("shrinkfs_store_retries_total", &[]),
            fuse_ops_per_s: rate(FUSE_OPS),
            fuse_errors: b.sum(FUSE_OPS, &["outcome=\"error\""]),
            gpu_share: ratio(gpu, gpu + cpu),
            resident_bytes: b.sum("process_resident_memory_bytes", &[]),
            budget_used_bytes: b.sum("shrinkfs_memory_budget_used_bytes", &[]),
            budget_limit_bytes: b.sum("shrinkfs_memory_budget_limit_bytes", &[]),
            dirty_bytes: b.sum("shrinkfs_dirty_bytes", &[]),
        }
    }

    /// The reading as lines for a terminal.
    pub fn render(&self) -> String {
        let mb = |b: f64| format!("{:.1} MB/s", b / 1e6);
        let size = |b: f64| crate::size::human(b as u64);
        let pct = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| format!("{:.1}%", x * 100.0));
        let ms = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| format!("{:.1} ms", x * 1e3));
        format!(
            "programs   read {}  write {}\n\
             store      read {}  write {}  ratio {}\n\
             cache      hit rate {}\n\
             store      {:.0} requests/s  mean latency {}  errors {:.0}  retries {:.0}\n\
             fuse       {:.0} operations/s  errors {:.0}\n\
             gpu        share of frames {}\n\
             memory     resident {}  budget {} of {}  dirty {}\n",
            mb(self.read_bytes_per_s),
            mb(self.written_bytes_per_s),
            mb(self.store_read_bytes_per_s),
            mb(self.store_written_bytes_per_s),
            self.ratio.map_or_else(|| "-".into(), |r| format!("{r:.2}x")),
            pct(self.cache_hit_rate),
            self.store_requests_per_s,
            ms(self.store_latency_s),
            self.store_errors,
            self.store_retries,
            self.fuse_ops_per_s,
            self.fuse_errors,
            pct(self.gpu_share),
            size(self.resident_bytes),
            size(self.budget_used_bytes),
            size(self.budget_limit_bytes),
            size(self.dirty_bytes),
        )
    }
}

/// The metrics address the mount at `mountpoint` names, or why there is none.
fn address_of(mountpoint: &std::path::Path) -> anyhow::Result<String> {
    let mut buf = vec![0u8; 256];
    match rustix::fs::getxattr(mountpoint, METRICS_ADDR_XATTR, &mut buf) {
        Ok(n) => Ok(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Err(rustix::io::Errno::NODATA) => bail!(Unavailable(format!(
            "{} serves no metrics: mount it with --metrics-addr, or give --metrics-addr here",
            mountpoint.display()
        ))),
        Err(e) => bail!(Unavailable(format!("{} is not a shrinkfs mount ({e})", mountpoint.display()))),
    }
}

/// The Prometheus text of the endpoint at `addr`.
fn scrape(addr: &str) -> anyhow::Result<Scrape> {
    let fail = |e: std::io::Error| {
        let why = match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => "no answer within 10 s".to_owned(),
            _ => e.to_string(),
        };
        Unavailable(format!("cannot read the metrics at {addr}: {why}"))
    };
    use std::net::ToSocketAddrs;
    let to = addr.to_socket_addrs().map_err(fail)?.next().ok_or_else(|| fail(std::io::ErrorKind::NotFound.into()))?;
    let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(10)).map_err(fail)?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(fail)?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").map_err(fail)?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).map_err(fail)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    // "HTTP/1.1 200 OK", or an HTTP/1.0 server's "HTTP/1.0 200 OK".
    let status = head.lines().next().unwrap_or_default();
    let mut words = status.split_whitespace();
    if !(words.next().is_some_and(|v| v.starts_with("HTTP/1.")) && words.next() == Some("200")) {
        bail!(Unavailable(format!("{addr} answered {}", head.lines().next().unwrap_or("nothing"))));
    }
    Ok(Scrape::parse(body))
}

/// Runs `shrinkfs stats`.
pub fn run(a: StatsArgs) -> anyhow::Result<()> {
    if !a.mountpoint.is_dir() {
        bail!(UsageError(format!("{}: not a directory", a.mountpoint.display())));
    }
    let addr = match a.metrics_addr {
        Some(addr) => addr.to_string(),
        None => address_of(&a.mountpoint)?,
    };
    let tty = std::io::stdout().is_terminal() && !a.json;
    let mut before = (Instant::now(), scrape(&addr)?);
    loop {
        std::thread::sleep(a.interval);
        let now = (Instant::now(), scrape(&addr)?);
        let reading = Reading::between(&before.1, &now.1, (now.0 - before.0).as_secs_f64());
        let mut out = std::io::stdout().lock();
        if a.json {
            writeln!(out, "{}", serde_json::to_string(&reading).context("JSON of a reading")?)?;
        } else {
            if tty {
                // Home and clear: the view is redrawn in place.
                write!(out, "\x1b[H\x1b[2J")?;
            }
            writeln!(out, "{} ({addr}), over {:.1} s", a.mountpoint.display(), reading.seconds)?;
            write!(out, "{}", reading.render())?;
        }
        out.flush()?;
        if a.once {
            return Ok(());
        }
        before = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_ratios_and_label_filters_come_from_two_scrapes() {
        let a = Scrape::parse(
            "# TYPE x counter\nshrinkfs_logical_written_bytes_total 0\nshrinkfs_store_written_bytes_total 0\n\
             shrinkfs_cache_hits_total 10\nshrinkfs_cache_misses_total 10\n\
             shrinkfs_fuse_op_duration_seconds_count{op=\"lookup\",outcome=\"expected\"} 5\n",
        );
        let b = Scrape::parse(
            "shrinkfs_logical_written_bytes_total 4000000\nshrinkfs_store_written_bytes_total 1000000\n\
             shrinkfs_cache_hits_total 40\nshrinkfs_cache_misses_total 20\n\
             shrinkfs_fuse_op_duration_seconds_count{op=\"lookup\",outcome=\"expected\"} 25\n\
             shrinkfs_fuse_op_duration_seconds_count{op=\"read\",outcome=\"error\"} 2\n\
             shrinkfs_gpu_frames_total 3\nshrinkfs_codec_cpu_frames_total 1\n",
        );
        let r = Reading::between(&a, &b, 2.0);
        assert_eq!(r.written_bytes_per_s, 2_000_000.0);
        assert_eq!(r.ratio, Some(4.0));
        assert_eq!(r.cache_hit_rate, Some(0.75), "30 hits of 40 reads in the span");
        assert_eq!(r.fuse_ops_per_s, 11.0);
        assert_eq!(r.fuse_errors, 2.0, "expected answers are not errors");
        assert_eq!(r.gpu_share, Some(0.75));
        assert_eq!(r.store_latency_s, None, "no store request in the span");
        assert!(r.store_errors.is_sign_positive(), "no samples: 0, not -0");
        assert!(r.render().contains("ratio 4.00x") && r.render().contains("hit rate 75.0%"));
    }
}
