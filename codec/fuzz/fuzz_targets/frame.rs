//! Fuzzes decoding of a whole unsealed object: every frame through the index.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(out) = shrinkfs_codec::decode_all(data, None, &[]) {
        // Anything that decodes without error is either the plain bytes or bounded by its index.
        assert!(out.len() as u64 <= (data.len() as u64).saturating_mul(70_000));
    }
});
