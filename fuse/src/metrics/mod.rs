//! The telemetry of a mount: one `prometheus_client` registry holding every metric (names in
//! `names`), the codec dispatcher's counters and the process's figures as collectors read at
//! scrape time (`collect`), rendered as OpenMetrics or as Prometheus text (`text`). Each metric
//! listed in docs/OPERATING.md is moved by a test.

pub mod collect;
pub mod names;
pub mod text;

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use text::Format;

/// How a request or an operation ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Outcome {
    /// It did what was asked.
    Ok,
    /// It answered with a condition the caller asked about, not a failure: a lookup of a name
    /// that does not exist, a missing attribute, an object not found.
    Expected,
    /// It failed.
    Error,
}

impl Outcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Expected => "expected",
            Outcome::Error => "error",
        }
    }
}

impl EncodeLabelValue for Outcome {
    fn encode(&self, encoder: &mut prometheus_client::encoding::LabelValueEncoder) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.as_str(), encoder)
    }
}

/// Labels of a FUSE operation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    /// The operation (`lookup`, `read`, ...).
    pub op: &'static str,
    /// How it ended.
    pub outcome: Outcome,
}

/// Labels of a store request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The request (`get`, `put`, `list_page`, ...).
    pub kind: &'static str,
    /// How it ended.
    pub outcome: Outcome,
}

/// Label of a per-kind counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// The kind of request.
    pub kind: &'static str,
}

/// Label of the frames-encoded counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodecLabel {
    /// The codec a frame was stored with.
    pub codec: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Latency buckets: 100 µs to about 26 s, four per decade-and-a-bit.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 4.0, 10))
}

/// What the store stack records: requests, their failures and retries, bytes moved.
#[derive(Clone, Debug)]
pub struct StoreMetrics {
    requests: Histograms<RequestLabels>,
    errors: Family<KindLabel, Counter>,
    retries: Family<KindLabel, Counter>,
    in_flight: Gauge,
    deletes_behind: Gauge,
    read_bytes: Counter,
    written_bytes: Counter,
    /// Why the latest try that failed for a passing reason failed (not exported: the one line
    /// an error about a store that never answered can name).
    last_retried: Arc<Mutex<Option<String>>>,
}

impl StoreMetrics {
    /// Records a request of `kind` that ended with `outcome` after `took`.
    pub fn request(&self, kind: &'static str, outcome: Outcome, took: Duration) {
        self.requests.get_or_create(&RequestLabels { kind, outcome }).observe(took.as_secs_f64());
    }

    /// Counts a try of `kind` that failed.
    pub fn error(&self, kind: &'static str) {
        self.errors.get_or_create(&KindLabel { kind }).inc();
    }

    /// Counts a retry of `kind`, after a try that failed with `reason`.
    pub fn retry(&self, kind: &'static str, reason: &dyn std::fmt::Display) {
        self.retries.get_or_create(&KindLabel { kind }).inc();
        *self.last_retried.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason.to_string());
    }

    /// Why the latest try that was retried failed, if one was.
    pub fn last_retried(&self) -> Option<String> {
        self.last_retried.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Moves the in-flight gauge.
    pub fn in_flight(&self, delta: i64) {
        self.in_flight.inc_by(delta);
    }

    /// Moves the gauge of deletes queued behind their unlinks.
    pub fn deletes_behind(&self, delta: i64) {
        self.deletes_behind.inc_by(delta);
    }

    /// Counts body bytes read.
    pub fn read(&self, n: u64) {
        self.read_bytes.inc_by(n);
    }

    /// Counts bytes written.
    pub fn written(&self, n: u64) {
        self.written_bytes.inc_by(n);
    }
}

/// The mount's metrics.
pub struct Metrics {
    registry: Registry,
    ops: Histograms<OpLabels>,
    store: StoreMetrics,
    logical_written: Counter,
    logical_read: Counter,
    cache_hits: Counter,
    cache_misses: Counter,
    frames_decoded: Counter,
    frames_prefetched: Counter,
    disk_hits: Counter,
    disk_misses: Counter,
    disk_bad: Counter,
    frames_encoded: Family<CodecLabel, Counter>,
    budget_used: Gauge,
    budget_limit: Gauge,
    budget_waits: Counter,
    prefetch_skipped: Counter,
    codec: Arc<OnceLock<Arc<shrinkfs_codec::dispatch::Counters>>>,
    labels: Arc<OnceLock<collect::Labels>>,
    dirty: Arc<OnceLock<collect::DirtySource>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        use names::*;
        let store = StoreMetrics {
            requests: Family::new_with_constructor(seconds),
            errors: Family::default(),
            retries: Family::default(),
            in_flight: Gauge::default(),
            deletes_behind: Gauge::default(),
            read_bytes: Counter::default(),
            written_bytes: Counter::default(),
            last_retried: Arc::default(),
        };
        let mut m = Metrics {
            registry: Registry::default(),
            ops: Family::new_with_constructor(seconds),
            store,
            logical_written: Counter::default(),
            logical_read: Counter::default(),
            cache_hits: Counter::default(),
            cache_misses: Counter::default(),
            frames_decoded: Counter::default(),
            frames_prefetched: Counter::default(),
            disk_hits: Counter::default(),
            disk_misses: Counter::default(),
            disk_bad: Counter::default(),
            frames_encoded: Family::default(),
            budget_used: Gauge::default(),
            budget_limit: Gauge::default(),
            budget_waits: Counter::default(),
            prefetch_skipped: Counter::default(),
            codec: Arc::default(),
            labels: Arc::default(),
            dirty: Arc::default(),
        };
        // Every kind's errors and retries from zero: a scraper sees a rate, not a missing series.
        for kind in STORE_KINDS {
            let _ = m.store.errors.get_or_create(&KindLabel { kind });
            let _ = m.store.retries.get_or_create(&KindLabel { kind });
        }
        let r = &mut m.registry;
        r.register(FUSE_OP_DURATION, "FUSE operations by op and outcome, seconds", m.ops.clone());
        let s = &m.store;
        r.register(
            STORE_REQUEST_DURATION,
            "Store requests by kind and outcome, retries included, seconds",
            s.requests.clone(),
        );
        r.register(STORE_ERRORS, "Store request tries that failed, by kind", s.errors.clone());
        r.register(STORE_RETRIES, "Store requests tried again after a passing failure, by kind", s.retries.clone());
        r.register(STORE_IN_FLIGHT, "Store requests in flight", s.in_flight.clone());
        r.register(DELETES_BEHIND, "Deletes queued behind their unlinks, not yet done", s.deletes_behind.clone());
        r.register(STORE_READ_BYTES, "Bytes read from the object store", s.read_bytes.clone());
        r.register(STORE_WRITTEN_BYTES, "Bytes written to the object store", s.written_bytes.clone());
        r.register(LOGICAL_WRITTEN_BYTES, "Logical (uncompressed) bytes of objects written", m.logical_written.clone());
        r.register(LOGICAL_READ_BYTES, "Logical (uncompressed) bytes read from objects", m.logical_read.clone());
        r.register(CACHE_HITS, "Frame cache hits", m.cache_hits.clone());
        r.register(CACHE_MISSES, "Frame cache misses", m.cache_misses.clone());
        r.register(DISK_CACHE_HITS, "Frames read from the disk cache", m.disk_hits.clone());
        r.register(DISK_CACHE_MISSES, "Frames not found in the disk cache", m.disk_misses.clone());
        r.register(DISK_CACHE_BAD, "Disk cache entries that failed their check", m.disk_bad.clone());
        r.register(FRAMES_DECODED, "Frames fetched and decoded", m.frames_decoded.clone());
        r.register(FRAMES_PREFETCHED, "Frames fetched ahead for sequential readers", m.frames_prefetched.clone());
        r.register(PREFETCH_SKIPPED, "Read-ahead frames skipped: memory budget full", m.prefetch_skipped.clone());
        r.register(FRAMES_ENCODED, "Frames encoded, by codec stored", m.frames_encoded.clone());
        r.register(
            BUDGET_USED,
            "Bytes of the memory budget held by writes, uploads and fetches",
            m.budget_used.clone(),
        );
        r.register(BUDGET_LIMIT, "Size of the memory budget for bytes in flight", m.budget_limit.clone());
        r.register(BUDGET_WAITS, "Times a write or read waited for room in the memory budget", m.budget_waits.clone());
        r.register_collector(Box::new(collect::DirtyBytes(m.dirty.clone())));
        r.register_collector(Box::new(collect::CodecCounters(m.codec.clone())));
        r.register_collector(Box::new(collect::InfoLabels(m.labels.clone())));
        r.register_collector(Box::new(collect::Process));
        m
    }

    /// What the store stack records into.
    pub fn store(&self) -> &StoreMetrics {
        &self.store
    }

    /// Records a FUSE operation.
    pub fn op(&self, op: &'static str, outcome: Outcome, took: Duration) {
        self.ops.get_or_create(&OpLabels { op, outcome }).observe(took.as_secs_f64());
    }

    /// Counts an object written: its logical bytes (the store layer counts the stored ones).
    pub fn object_written(&self, raw: u64) {
        self.logical_written.inc_by(raw);
    }

    /// Counts logical bytes read from objects.
    pub fn logical_read(&self, n: u64) {
        self.logical_read.inc_by(n);
    }

    /// Counts frame cache hits and misses.
    pub fn cache(&self, hits: usize, misses: usize) {
        self.cache_hits.inc_by(hits as u64);
        self.cache_misses.inc_by(misses as u64);
    }

    /// Counts a decoded frame.
    pub fn frame_decoded(&self) {
        self.frames_decoded.inc();
    }

    /// Counts disk cache hits and misses.
    pub fn disk_cache(&self, hits: usize, misses: usize) {
        self.disk_hits.inc_by(hits as u64);
        self.disk_misses.inc_by(misses as u64);
    }

    /// Counts a disk cache entry that failed its check.
    pub fn disk_cache_bad(&self) {
        self.disk_bad.inc();
    }

    /// Counts frames scheduled for read-ahead.
    pub fn prefetched(&self, n: usize) {
        self.frames_prefetched.inc_by(n as u64);
    }

    /// Counts an encoded frame by the codec it was stored with.
    pub fn frame_encoded(&self, codec: &'static str) {
        self.frames_encoded.get_or_create(&CodecLabel { codec }).inc();
    }

    /// Moves the budget gauge by `delta` bytes.
    pub fn budget_used(&self, delta: i64) {
        self.budget_used.inc_by(delta);
    }

    /// Sets the budget's size.
    pub fn budget_limit(&self, bytes: u64) {
        self.budget_limit.set(bytes as i64);
    }

    /// Counts a wait for room in the budget.
    pub fn budget_wait(&self) {
        self.budget_waits.inc();
    }

    /// Counts read-ahead frames skipped for want of budget.
    pub fn prefetch_skipped(&self, n: usize) {
        self.prefetch_skipped.inc_by(n as u64);
    }

    /// Exposes the codec dispatcher's counters (the first call wins).
    pub fn watch_codec(&self, counters: Arc<shrinkfs_codec::dispatch::Counters>) {
        let _ = self.codec.set(counters);
    }

    /// Exposes the dirty bytes of open files, read at scrape time (the first call wins).
    pub fn watch_dirty(&self, source: collect::DirtySource) {
        let _ = self.dirty.set(source);
    }

    /// Sets the build and mount labels (the first call wins).
    pub fn set_labels(&self, labels: collect::Labels) {
        let _ = self.labels.set(labels);
    }

    /// Every metric in format `format`.
    pub fn render(&self, format: Format) -> String {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &self.registry).expect("writing to a String");
        match format {
            Format::OpenMetrics => s,
            Format::Prometheus => text::to_prometheus(&s),
        }
    }

    /// Sum of the samples (Prometheus text) whose line starts with `line_prefix`, rounded down,
    /// for tests.
    pub fn value(&self, line_prefix: &str) -> u64 {
        text::sum(&self.render(Format::Prometheus), line_prefix) as u64
    }
}
