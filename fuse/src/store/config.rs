//! `StoreConfig`: the plain data the store stack is built from — how failed requests are retried,
//! how long a request and a connection may take, how many requests run at once.

use std::time::Duration;

/// Default [`RetryPolicy::timeout`]: rides out a server restart or a short network outage.
pub const DEFAULT_RETRY_TIMEOUT: Duration = Duration::from_secs(60);
/// Default [`StoreConfig::request_timeout`]: an 8 MiB multipart part still fits at 28 KB/s
/// (object_store's own default, 30 s, fails such a part below about 280 KB/s).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// Default [`StoreConfig::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait between two tries of a request: once a restarted server is back, requests
/// resume within this.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// First wait between tries; later waits double up to [`MAX_BACKOFF`].
pub const INIT_BACKOFF: Duration = Duration::from_millis(100);
/// Default [`StoreConfig::max_requests`]: enough to keep a fast link busy with 8 MiB ranges and
/// parts, few enough that a listing's attribute prefetch cannot open hundreds of connections.
pub const DEFAULT_MAX_REQUESTS: usize = 64;

/// How a request that failed for a passing reason (see `compat::is_transient`) is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Time after the first try past which no new try starts; zero: never retry.
    pub timeout: Duration,
    /// Most tries after the first (`None`: as many as fit in `timeout`).
    pub max_retries: Option<usize>,
    /// First wait between tries.
    pub init_backoff: Duration,
    /// Longest wait between tries.
    pub max_backoff: Duration,
}

impl RetryPolicy {
    /// No retries at all: every failure reaches the caller at once.
    pub const NONE: RetryPolicy = RetryPolicy {
        timeout: Duration::ZERO,
        max_retries: Some(0),
        init_backoff: INIT_BACKOFF,
        max_backoff: MAX_BACKOFF,
    };

    /// Whether try number `retry` (1 for the first retry), starting `elapsed` after the first
    /// try, may run.
    pub fn allows(&self, retry: usize, elapsed: Duration) -> bool {
        !self.timeout.is_zero() && elapsed < self.timeout && self.max_retries.is_none_or(|n| retry <= n)
    }

    /// The wait before retry number `retry` (1 for the first): doubling from `init_backoff`,
    /// capped at `max_backoff`.
    pub fn backoff(&self, retry: usize) -> Duration {
        let factor = 1u32.checked_shl(retry.saturating_sub(1).min(31) as u32).unwrap_or(u32::MAX);
        self.init_backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            timeout: DEFAULT_RETRY_TIMEOUT,
            max_retries: None,
            init_backoff: INIT_BACKOFF,
            max_backoff: MAX_BACKOFF,
        }
    }
}

/// The settings of a store stack, every backend alike (the timeouts reach only S3's HTTP client).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// Retries of requests that failed for a passing reason.
    pub retry: RetryPolicy,
    /// Most time one request may take, body included.
    pub request_timeout: Duration,
    /// Most time to wait for a TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// Requests in flight at once, over the whole mount.
    pub max_requests: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            retry: RetryPolicy::default(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_requests: DEFAULT_MAX_REQUESTS,
        }
    }
}

impl StoreConfig {
    /// The defaults without retries: for a store in memory, or one a test steers.
    pub fn unretried() -> Self {
        StoreConfig { retry: RetryPolicy::NONE, ..StoreConfig::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_are_bounded_by_time_and_by_count_when_given() {
        let p = RetryPolicy { timeout: Duration::from_secs(90), ..RetryPolicy::default() };
        assert!(p.allows(1_000, Duration::from_secs(89)), "without a count only the time counts");
        assert!(!p.allows(1, Duration::from_secs(90)));
        let three = RetryPolicy { max_retries: Some(3), ..p };
        assert!(three.allows(3, Duration::ZERO) && !three.allows(4, Duration::ZERO));
        assert!(!RetryPolicy::NONE.allows(1, Duration::ZERO));
        assert!(!RetryPolicy { timeout: Duration::ZERO, max_retries: None, ..p }.allows(1, Duration::ZERO));
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let p = RetryPolicy::default();
        let waits: Vec<_> = (1..=8).map(|n| p.backoff(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(p.backoff(10_000), MAX_BACKOFF);
    }
}
