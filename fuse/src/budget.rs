//! The mount's one memory budget (`--memory-limit`, less the frame cache's share): bytes held by
//! write buffers, frames being encoded, parts being uploaded and frames being fetched or prefetched.
//! Writers and demand reads wait for room (backpressure); prefetch only takes room that is free.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::Metrics;

/// Accounting unit: permits are KiB so a `u32` count covers terabytes.
const UNIT: u64 = 1024;

/// Bytes that may be in flight at once, shared by every open file.
#[derive(Clone)]
pub struct Budget {
    sem: Arc<Semaphore>,
    /// The share set aside for bytes kept only to save work ([`Self::try_keep`]): never waited
    /// for, so holding it can never keep anyone waiting.
    keep: Arc<Semaphore>,
    units: u32,
    keep_units: u32,
    metrics: Arc<Metrics>,
}

/// The share of a budget set aside for [`Budget::try_keep`].
const KEEP_SHARE: u64 = 8;

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Budget({} bytes, {} free)", self.bytes(), self.sem.available_permits() as u64 * UNIT)
    }
}

/// Room held in the budget; given back when dropped.
#[derive(Debug)]
pub struct Held {
    _permit: Option<OwnedSemaphorePermit>,
    bytes: u64,
    metrics: Arc<Metrics>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.metrics.budget_used(-(self.bytes as i64));
    }
}

impl Budget {
    /// A budget of `bytes` (at least one unit).
    pub fn new(bytes: u64, metrics: Arc<Metrics>) -> Self {
        let units = (bytes / UNIT).clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize) as u64) as u32;
        let keep = units / KEEP_SHARE as u32;
        metrics.budget_limit(units as u64 * UNIT);
        Budget {
            sem: Arc::new(Semaphore::new((units - keep) as usize)),
            keep: Arc::new(Semaphore::new(keep as usize)),
            units: units - keep,
            keep_units: keep,
            metrics,
        }
    }

    /// Size of the budget (the share for [`Self::try_keep`] included).
    pub fn bytes(&self) -> u64 {
        (self.units as u64 + self.keep_units as u64) * UNIT
    }

    /// Bytes held now.
    pub fn in_use(&self) -> u64 {
        let held = (self.units as u64).saturating_sub(self.sem.available_permits() as u64);
        let kept = (self.keep_units as u64).saturating_sub(self.keep.available_permits() as u64);
        (held + kept) * UNIT
    }

    /// Whether `bytes` more would keep what takers hold (the share for kept bytes left out)
    /// within the first half of their share.
    pub fn within_half(&self, bytes: u64) -> bool {
        let held = (self.units as u64).saturating_sub(self.sem.available_permits() as u64) * UNIT;
        held + bytes <= self.units as u64 * UNIT / 2
    }

    /// Units for `bytes`; a request larger than the whole budget takes all of it rather than
    /// waiting forever.
    fn units_for(&self, bytes: u64) -> u32 {
        bytes.div_ceil(UNIT).clamp(1, self.units as u64) as u32
    }

    fn held(&self, permit: OwnedSemaphorePermit, units: u32) -> Held {
        let bytes = units as u64 * UNIT;
        self.metrics.budget_used(bytes as i64);
        Held { _permit: Some(permit), bytes, metrics: self.metrics.clone() }
    }

    /// Takes room for `bytes`, waiting until other holders give enough back.
    pub async fn take(&self, bytes: u64) -> Held {
        let units = self.units_for(bytes);
        let permit = match self.sem.clone().try_acquire_many_owned(units) {
            Ok(p) => p,
            Err(_) => {
                self.metrics.budget_wait();
                self.sem.clone().acquire_many_owned(units).await.expect("the budget's semaphore is never closed")
            }
        };
        self.held(permit, units)
    }

    /// Takes room for `bytes` only if it is free now.
    pub fn try_take(&self, bytes: u64) -> Option<Held> {
        let units = self.units_for(bytes);
        self.sem.clone().try_acquire_many_owned(units).ok().map(|p| self.held(p, units))
    }

    /// Room for `bytes` kept only to save work (encoded bytes kept in memory beside the spill
    /// file that also has them), from the budget's share set aside for that (an eighth), if it
    /// is free now. Nothing ever waits for this share.
    pub fn try_keep(&self, bytes: u64) -> Option<Held> {
        let units = bytes.div_ceil(UNIT).max(1);
        let units = u32::try_from(units).ok().filter(|&u| u <= self.keep_units)?;
        self.keep.clone().try_acquire_many_owned(units).ok().map(|p| self.held(p, units))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_until_room_is_given_back() {
        let m = Arc::new(Metrics::new());
        let b = Budget::new(10 * UNIT, m.clone());
        let first = b.take(8 * UNIT).await;
        assert!(b.try_take(4 * UNIT).is_none(), "only 2 units are free");
        assert_eq!(m.value("shrinkfs_memory_budget_used_bytes"), 8 * UNIT);
        let waiter = tokio::spawn({
            let b = b.clone();
            async move { b.take(4 * UNIT).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "the second taker must wait");
        drop(first);
        let second = waiter.await.unwrap();
        assert_eq!(m.value("shrinkfs_memory_budget_used_bytes"), 4 * UNIT);
        assert_eq!(m.value("shrinkfs_memory_budget_waits_total"), 1);
        drop(second);
        assert_eq!(m.value("shrinkfs_memory_budget_used_bytes"), 0);
    }

    #[tokio::test]
    async fn bytes_kept_to_save_work_use_their_own_eighth_and_never_keep_takers_waiting() {
        let m = Arc::new(Metrics::new());
        let b = Budget::new(64 * UNIT, m.clone());
        assert_eq!(b.bytes(), 64 * UNIT);
        let kept = b.try_keep(6 * UNIT).unwrap();
        assert!(b.try_keep(3 * UNIT).is_none(), "2 of its 8 units left");
        assert!(b.try_keep(100 * UNIT).is_none(), "more than the share: never");
        let all = b.try_take(56 * UNIT).expect("the takers' 56 units are all free");
        assert_eq!((b.in_use(), m.value("shrinkfs_memory_budget_used_bytes")), (62 * UNIT, 62 * UNIT));
        assert!(!b.within_half(1), "the takers' share is full");
        drop((kept, all));
        assert_eq!(b.in_use(), 0);
        let _kept = b.try_keep(8 * UNIT).unwrap();
        assert!(
            b.within_half(28 * UNIT) && !b.within_half(29 * UNIT),
            "half of the takers' 56 units, kept bytes aside"
        );
    }

    #[tokio::test]
    async fn a_request_bigger_than_the_budget_takes_all_of_it() {
        let b = Budget::new(4 * UNIT, Arc::new(Metrics::new()));
        let all = b.take(100 * UNIT).await;
        assert!(b.try_take(1).is_none());
        drop(all);
        assert!(b.try_take(4 * UNIT).is_some());
    }
}
