//! Prometheus metrics of a mount, one registry, all named `shrinkfs_*`. Every counter here is
//! incremented on a code path that tests exercise.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Label of a per-kind counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// The kind: an operation, a request type, a codec.
    pub kind: String,
}

/// The mount's counters.
pub struct Metrics {
    registry: Registry,
    ops: Family<KindLabel, Counter>,
    op_errors: Family<KindLabel, Counter>,
    store_requests: Family<KindLabel, Counter>,
    store_bytes_read: Counter,
    store_bytes_written: Counter,
    raw_bytes_written: Counter,
    cache_hits: Counter,
    cache_misses: Counter,
    frames_decoded: Counter,
    frames_prefetched: Counter,
    disk_hits: Counter,
    disk_misses: Counter,
    frames_encoded: Family<KindLabel, Counter>,
    budget_used: Gauge,
    budget_waits: Counter,
    prefetch_skipped: Counter,
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
    /// A fresh registry with every counter registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("shrinkfs");
        let m = Metrics {
            ops: Family::default(),
            op_errors: Family::default(),
            store_requests: Family::default(),
            store_bytes_read: Counter::default(),
            store_bytes_written: Counter::default(),
            raw_bytes_written: Counter::default(),
            cache_hits: Counter::default(),
            cache_misses: Counter::default(),
            frames_decoded: Counter::default(),
            frames_prefetched: Counter::default(),
            disk_hits: Counter::default(),
            disk_misses: Counter::default(),
            frames_encoded: Family::default(),
            budget_used: Gauge::default(),
            budget_waits: Counter::default(),
            prefetch_skipped: Counter::default(),
            registry: Registry::default(),
        };
        registry.register("fuse_ops", "Filesystem operations by kind", m.ops.clone());
        registry.register("fuse_op_errors", "Failed filesystem operations by kind", m.op_errors.clone());
        registry.register("store_requests", "Object store requests by kind", m.store_requests.clone());
        registry.register("store_read_bytes", "Bytes read from the object store", m.store_bytes_read.clone());
        registry.register("store_written_bytes", "Bytes written to the object store", m.store_bytes_written.clone());
        registry.register("logical_written_bytes", "Logical (uncompressed) bytes written", m.raw_bytes_written.clone());
        registry.register("cache_hits", "Frame cache hits", m.cache_hits.clone());
        registry.register("cache_misses", "Frame cache misses", m.cache_misses.clone());
        registry.register("disk_cache_hits", "Frames read from the disk cache", m.disk_hits.clone());
        registry.register("disk_cache_misses", "Frames not found in the disk cache", m.disk_misses.clone());
        registry.register("frames_decoded", "Frames fetched and decoded", m.frames_decoded.clone());
        registry.register(
            "frames_prefetched",
            "Frames fetched ahead for sequential readers",
            m.frames_prefetched.clone(),
        );
        registry.register("frames_encoded", "Frames encoded, by codec stored", m.frames_encoded.clone());
        registry.register(
            "memory_budget_used_bytes",
            "Bytes of the --memory-limit budget held by writes, uploads and fetches",
            m.budget_used.clone(),
        );
        registry.register(
            "memory_budget_waits",
            "Times a write or read waited for room in the memory budget",
            m.budget_waits.clone(),
        );
        registry.register(
            "prefetch_skipped",
            "Read-ahead frames not fetched because the memory budget was full",
            m.prefetch_skipped.clone(),
        );
        Metrics { registry, ..m }
    }

    fn label(kind: &str) -> KindLabel {
        KindLabel { kind: kind.to_owned() }
    }

    /// Counts a filesystem operation and, if it failed, its failure.
    pub fn op(&self, kind: &str, failed: bool) {
        self.ops.get_or_create(&Self::label(kind)).inc();
        if failed {
            self.op_errors.get_or_create(&Self::label(kind)).inc();
        }
    }

    /// Counts a store request.
    pub fn store_request(&self, kind: &str) {
        self.store_requests.get_or_create(&Self::label(kind)).inc();
    }

    /// Counts bytes read from the store.
    pub fn store_bytes(&self, n: u64) {
        self.store_bytes_read.inc_by(n);
    }

    /// Counts an object written: its logical and stored bytes.
    pub fn object_written(&self, raw: u64, stored: u64) {
        self.raw_bytes_written.inc_by(raw);
        self.store_bytes_written.inc_by(stored);
    }

    /// Counts frame cache hits and misses.
    pub fn cache(&self, hits: usize, misses: usize) {
        self.cache_hits.inc_by(hits as u64);
        self.cache_misses.inc_by(misses as u64);
    }

    /// Counts a decoded frame.
    pub fn frame_decoded(&self, _raw: u64) {
        self.frames_decoded.inc();
    }

    /// Counts disk cache hits and misses.
    pub fn disk_cache(&self, hits: usize, misses: usize) {
        self.disk_hits.inc_by(hits as u64);
        self.disk_misses.inc_by(misses as u64);
    }

    /// Counts frames scheduled for read-ahead.
    pub fn prefetched(&self, n: usize) {
        self.frames_prefetched.inc_by(n as u64);
    }

    /// Counts an encoded frame by the codec it was stored with.
    pub fn frame_encoded(&self, codec: &str) {
        self.frames_encoded.get_or_create(&Self::label(codec)).inc();
    }

    /// Moves the budget gauge by `delta` bytes.
    pub fn budget_used(&self, delta: i64) {
        self.budget_used.inc_by(delta);
    }

    /// Counts a wait for room in the budget.
    pub fn budget_wait(&self) {
        self.budget_waits.inc();
    }

    /// Counts read-ahead frames skipped for want of budget.
    pub fn prefetch_skipped(&self, n: usize) {
        self.prefetch_skipped.inc_by(n as u64);
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &self.registry).expect("writing to a String");
        s
    }

    /// Current value of a named counter family member, for tests and `shrinkfs stats`.
    pub fn value(&self, line_prefix: &str) -> u64 {
        self.render()
            .lines()
            .filter(|l| l.starts_with(line_prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v as u64)
            .sum()
    }
}
