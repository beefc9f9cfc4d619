//! Fuzzes footer parsing from an object's tail, at every claimed object length.
#![no_main]
use libfuzzer_sys::fuzz_target;
use shrinkfs_codec::probe_tail;

fuzz_target!(|data: &[u8]| {
    for extra in [0u64, 1, 1 << 20, u64::MAX - data.len() as u64] {
        let _ = probe_tail(data, data.len() as u64 + extra);
    }
});
