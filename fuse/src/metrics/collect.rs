//! Metrics read at scrape time rather than counted: the codec dispatcher's counters, the dirty
//! bytes of open files, the build and mount labels, and the process's CPU, memory, threads and
//! descriptors from `/proc/self`.

use std::fmt::Error as FmtError;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;

use super::names::*;

/// Reads the dirty bytes of a mount's open files.
pub type DirtySource = Box<dyn Fn() -> u64 + Send + Sync>;

/// The labels of the build and mount info metrics.
#[derive(Debug, Clone, Default)]
pub struct Labels {
    /// Version of the binary.
    pub version: String,
    /// Commit it was built from ("unknown" outside a git checkout).
    pub commit: String,
    /// What is mounted (`s3://bucket/prefix`, a directory).
    pub source: String,
    /// Where.
    pub mountpoint: String,
}

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> Result<(), FmtError> {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn counter_f(e: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> Result<(), FmtError> {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> Result<(), FmtError> {
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

/// The dirty bytes of open files, when a mount gave a source.
pub struct DirtyBytes(pub(super) Arc<OnceLock<DirtySource>>);

impl std::fmt::Debug for DirtyBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DirtyBytes(watched: {})", self.0.get().is_some())
    }
}

impl Collector for DirtyBytes {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), FmtError> {
        let v = self.0.get().map_or(0, |f| f());
        gauge(&mut e, DIRTY_BYTES, "Logical bytes written to open files and not yet stored", v as i64)
    }
}

/// The codec dispatcher's counters (zeros until a dispatcher is watched).
#[derive(Debug)]
pub struct CodecCounters(pub(super) Arc<OnceLock<Arc<shrinkfs_codec::dispatch::Counters>>>);

/// Label of the fallbacks counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

impl Collector for CodecCounters {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), FmtError> {
        let zero = shrinkfs_codec::dispatch::Counters::default();
        let c = self.0.get().map_or(&zero, |c| c.as_ref());
        let g = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
        counter(&mut e, CPU_FRAMES, "Frames the dispatcher encoded on the CPU", g(&c.cpu_frames))?;
        counter(&mut e, GPU_BATCHES, "GPU launches", g(&c.gpu_batches))?;
        counter(&mut e, GPU_FRAMES, "Frames compressed on the GPU and stored as it made them", g(&c.gpu_frames))?;
        counter(&mut e, GPU_DECODED_FRAMES, "Frames decoded on the GPU", g(&c.gpu_decoded_frames))?;
        let tries = "Tries of the GPU on a copy of a read batch, to measure it, however they ended";
        counter(&mut e, GPU_DECODE_TRIES, tries, g(&c.gpu_decode_tries))?;
        counter(&mut e, GPU_INPUT_BYTES, "Raw bytes sent to the GPU", g(&c.gpu_bytes_in))?;
        counter(&mut e, GPU_OUTPUT_BYTES, "Bytes the GPU gave back", g(&c.gpu_bytes_out))?;
        counter_f(&mut e, GPU_SECONDS, "Seconds spent in GPU launches", g(&c.gpu_nanos) as f64 / 1e9)?;
        let fallbacks: Family<Reason, prometheus_client::metrics::counter::Counter> = Family::default();
        for (reason, v) in [
            ("error", g(&c.fallback_error)),
            ("queue_full", g(&c.fallback_queue_full)),
            ("not_smaller", g(&c.fallback_not_smaller)),
            ("declined", g(&c.gpu_declined)),
            ("decode_error", g(&c.gpu_decode_fallback)),
        ] {
            fallbacks.get_or_create(&Reason { reason }).inc_by(v);
        }
        let enc =
            e.encode_descriptor(GPU_FALLBACKS, "Work sent back to the CPU, by reason", None, MetricType::Counter)?;
        fallbacks.encode(enc)
    }
}

/// Build and mount labels.
#[derive(Debug)]
pub struct InfoLabels(pub(super) Arc<OnceLock<Labels>>);

impl Collector for InfoLabels {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), FmtError> {
        let l = self.0.get().cloned().unwrap_or_default();
        let build = Info::new(vec![("version", escaped(&l.version)), ("commit", escaped(&l.commit))]);
        build.encode(e.encode_descriptor(BUILD, "Version and commit of the binary", None, MetricType::Info)?)?;
        let mount = Info::new(vec![("source", escaped(&l.source)), ("mountpoint", escaped(&l.mountpoint))]);
        mount.encode(e.encode_descriptor(MOUNT, "What is mounted where", None, MetricType::Info)?)
    }
}

/// A label value as both text formats write it: backslash, double quote and line feed escaped
/// (`prometheus_client` writes values as they are, and one path with a quote in it would make a
/// scraper refuse every metric of the mount).
fn escaped(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The process's figures, read from `/proc/self` at each scrape.
#[derive(Debug)]
pub struct Process;

/// What `/proc/self/stat` and friends say.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ProcessStat {
    /// User and system CPU seconds.
    pub cpu_seconds: f64,
    /// Resident bytes.
    pub resident: u64,
    /// Virtual bytes.
    pub virtual_bytes: u64,
    /// Threads.
    pub threads: u64,
    /// Start, seconds since the epoch.
    pub start_time: f64,
    /// Open descriptors.
    pub open_fds: u64,
}

impl ProcessStat {
    /// Reads this process's figures; `None` off Linux or when `/proc` is not mounted.
    pub fn read() -> Option<ProcessStat> {
        use nix::unistd::{SysconfVar, sysconf};
        let stat = crate::procstat::ProcStat::read(None)?;
        let field = |n: usize| stat.number(n);
        let ticks = sysconf(SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100) as f64;
        let page = sysconf(SysconfVar::PAGE_SIZE).ok().flatten().unwrap_or(4096) as u64;
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<u64>().ok())?;
        Some(ProcessStat {
            cpu_seconds: (field(14)? + field(15)?) as f64 / ticks,
            threads: field(20)?,
            start_time: boot as f64 + field(22)? as f64 / ticks,
            virtual_bytes: field(23)?,
            resident: field(24)? * page,
            open_fds: std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64),
        })
    }
}

impl Collector for Process {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), FmtError> {
        let Some(p) = ProcessStat::read() else { return Ok(()) };
        counter_f(&mut e, PROCESS_CPU_SECONDS, "User and system CPU time, seconds", p.cpu_seconds)?;
        gauge(&mut e, PROCESS_RESIDENT_BYTES, "Resident memory, bytes", p.resident as i64)?;
        gauge(&mut e, PROCESS_VIRTUAL_BYTES, "Virtual memory, bytes", p.virtual_bytes as i64)?;
        gauge(&mut e, PROCESS_OPEN_FDS, "Open file descriptors", p.open_fds as i64)?;
        gauge(&mut e, PROCESS_THREADS, "Threads", p.threads as i64)?;
        let start = ConstGauge::new(p.start_time);
        start.encode(e.encode_descriptor(
            PROCESS_START_TIME,
            "Start time, seconds since the epoch",
            None,
            start.metric_type(),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_as_the_text_formats_require() {
        assert_eq!(escaped("/b\"q\\x\ny"), "/b\\\"q\\\\x\\ny");
        assert_eq!(escaped("s3://plain/prefix"), "s3://plain/prefix");
    }

    #[test]
    fn the_process_reads_itself() {
        let a = ProcessStat::read().expect("/proc/self/stat");
        assert!(a.resident > 0 && a.virtual_bytes >= a.resident && a.threads >= 1 && a.open_fds >= 3, "{a:?}");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(a.start_time > now - 86_400.0 * 365.0 && a.start_time <= now + 1.0, "{a:?}");
        // Burn some CPU: the counter moves.
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(150) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        assert!(ProcessStat::read().unwrap().cpu_seconds > a.cpu_seconds);
    }
}
