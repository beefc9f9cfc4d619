//! Times as objects record them: seconds and nanoseconds since the Unix epoch, before it too.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A recorded time: seconds since the Unix epoch (negative before it) and nanoseconds.
pub type Stamp = (i64, u32);

/// `t` as a stamp.
pub fn stamp(t: SystemTime) -> Stamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let (s, ns) = (d.as_secs() as i64, d.subsec_nanos());
            if ns == 0 { (-s, 0) } else { (-s - 1, 1_000_000_000 - ns) }
        }
    }
}

/// The time stamp `s` stands for.
pub fn time((s, ns): Stamp) -> SystemTime {
    if s >= 0 {
        UNIX_EPOCH + Duration::new(s as u64, ns)
    } else {
        UNIX_EPOCH - Duration::from_secs(s.unsigned_abs()) + Duration::from_nanos(u64::from(ns))
    }
}

/// Now, as a stamp.
pub fn now() -> Stamp {
    stamp(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_round_trip_on_both_sides_of_the_epoch() {
        for s in [(0, 0), (1, 5), (-1, 0), (-1, 999_999_999), (-5, 1), (4_102_444_800, 123), (i64::from(i32::MIN), 0)] {
            assert_eq!(stamp(time(s)), s, "{s:?}");
        }
        assert_eq!(time((-1, 500_000_000)), UNIX_EPOCH - Duration::from_millis(500));
    }
}
