//! Fuzzes index parsing (footer, index body, tiling checks) and read planning on what parses.
#![no_main]
use libfuzzer_sys::fuzz_target;
use shrinkfs_codec::Layout;

fuzz_target!(|data: &[u8]| {
    if let Ok(layout) = Layout::parse(data, data.len() as u64) {
        let n = layout.logical_size();
        let _ = layout.plan(0..n, 1 << 20);
        let _ = layout.plan(n / 3..n / 2 + 1, 4096);
        let _ = layout.open(None, &[]);
    }
});
