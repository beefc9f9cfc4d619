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
    units: u32,
    metrics: Arc<Metrics>,
}

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
        metrics.budget_limit(units as u64 * UNIT);
        Budget { sem: Arc::new(Semaphore::new(units as usize)), units, metrics }
    }

    /// Size of the budget.
    pub fn bytes(&self) -> u64 {
        self.units as u64 * UNIT
    }

    /// Bytes held now.
    pub fn in_use(&self) -> u64 {
        (self.units as u64).saturating_sub(self.sem.available_permits() as u64) * UNIT
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
    async fn a_request_bigger_than_the_budget_takes_all_of_it() {
        let b = Budget::new(4 * UNIT, Arc::new(Metrics::new()));
        let all = b.take(100 * UNIT).await;
        assert!(b.try_take(1).is_none());
        drop(all);
        assert!(b.try_take(4 * UNIT).is_some());
    }
}
