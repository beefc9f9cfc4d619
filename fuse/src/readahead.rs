//! Read-ahead of one handle: how many frames to fetch ahead of a reader, in a window that doubles
//! while its reads follow each other and closes at any jump; and what a sequential reader has
//! left behind it.

use std::ops::Range;

/// Where a handle's last read began and ended, its window now, and how far behind it the
/// reader has been told it passed (never past `last_start`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Readahead {
    last_start: u64,
    last_end: u64,
    window: usize,
    behind: u64,
}

/// What one read means for its handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Frames to fetch ahead of the read's end (0: none).
    pub window: usize,
    /// Logical bytes the reader has passed since the last step said so: everything before its
    /// previous read, one read late (the kernel sends reads ahead of each other, and one sent
    /// before the previous one may still be answered). Empty unless the read is sequential.
    pub passed: Range<u64>,
}

impl Readahead {
    /// Records a read of `offset..end` (`max`: the most frames fetched ahead).
    pub fn advance(&mut self, offset: u64, end: u64, max: usize) -> Step {
        let sequential = offset == self.last_end && offset > 0;
        let (window, passed, behind) = if sequential {
            ((self.window * 2).clamp(1, max), self.behind..self.last_start, self.last_start)
        } else {
            // After a jump, what lies before it is not this reader's to give up.
            (0, 0..0, offset)
        };
        *self = Readahead { last_start: offset, last_end: end, window, behind };
        Step { window, passed }
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
        let mut window = |offset, end, max| r.advance(offset, end, max).window;
        assert_eq!(window(0, 10, 16), 0, "a first read fetches nothing ahead");
        assert_eq!(window(10, 20, 16), 1);
        assert_eq!(window(20, 30, 16), 2);
        assert_eq!(window(30, 40, 3), 3, "capped");
        assert_eq!(window(100, 110, 16), 0, "a jump closes it");
        assert_eq!(max_frames(256 << 20, 1 << 20, 16), 16);
        assert_eq!(max_frames(4 << 20, 1 << 20, 16), 2);
        assert_eq!(max_frames(0, 1 << 20, 16), 1);
    }

    #[test]
    fn a_sequential_reader_passes_what_lies_before_its_previous_read_once_and_nothing_before_a_jump() {
        let mut r = Readahead::default();
        let mut passed = |offset, end| r.advance(offset, end, 16).passed;
        assert_eq!(passed(0, 10), 0..0);
        assert_eq!(passed(10, 30), 0..0, "the previous read began at 0");
        assert_eq!(passed(30, 35), 0..10);
        // Reads of other sizes: every byte is passed once, one read late.
        assert_eq!(passed(35, 100), 10..30);
        assert_eq!(passed(100, 101), 30..35);
        // A jump gives up nothing, and what lies before it stays the jump's.
        assert_eq!(passed(500, 600), 0..0);
        assert_eq!(passed(600, 700), 500..500);
        assert_eq!(passed(700, 800), 500..600);
        // Back to an earlier offset: nothing before it is given up again.
        assert_eq!(passed(50, 60), 0..0);
        assert_eq!(passed(60, 70), 50..50);
        assert_eq!(passed(70, 80), 50..60);
    }
}
