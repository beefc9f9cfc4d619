//! Read-ahead of one handle: how many frames to fetch ahead of a reader, in a window that doubles
//! while its reads follow each other and closes at any jump.

/// Where a handle's last read ended, and its window now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Readahead {
    last_end: u64,
    window: usize,
}

impl Readahead {
    /// Records a read of `offset..end`; returns the frames to fetch ahead of `end` (0: none).
    pub fn advance(&mut self, offset: u64, end: u64, max: usize) -> usize {
        let next = if offset == self.last_end && offset > 0 { (self.window * 2).clamp(1, max) } else { 0 };
        *self = Readahead { last_end: end, window: next };
        next
    }
}

/// Most frames fetched ahead of one reader: `cap`, fewer when a frame cache of `cache_bytes` could
/// not hold them all until they are read.
pub fn max_frames(cache_bytes: u64, frame_size: u32, cap: usize) -> usize {
    let fits = cache_bytes / (2 * u64::from(frame_size.max(1)));
    (fits as usize).clamp(1, cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_doubles_while_reads_follow_and_closes_at_a_jump() {
        let mut r = Readahead::default();
        assert_eq!(r.advance(0, 10, 16), 0, "a first read fetches nothing ahead");
        assert_eq!(r.advance(10, 20, 16), 1);
        assert_eq!(r.advance(20, 30, 16), 2);
        assert_eq!(r.advance(30, 40, 3), 3, "capped");
        assert_eq!(r.advance(100, 110, 16), 0, "a jump closes it");
        assert_eq!(max_frames(256 << 20, 1 << 20, 16), 16);
        assert_eq!(max_frames(4 << 20, 1 << 20, 16), 2);
        assert_eq!(max_frames(0, 1 << 20, 16), 1);
    }
}
