//! Fuzzes decoding of sealed objects with the key the seeds were written with.
#![no_main]
use libfuzzer_sys::fuzz_target;
use shrinkfs_codec::MasterKey;

fuzz_target!(|data: &[u8]| {
    let key = MasterKey::from_bytes(&[0x5a; 32]).expect("32 bytes");
    let _ = shrinkfs_codec::decode_all(data, Some(&key), &[]);
});
