//! Fuzzes the sequential (pipe) decoder, feeding the input in pieces.
#![no_main]
use libfuzzer_sys::fuzz_target;
use shrinkfs_codec::MasterKey;
use shrinkfs_codec::stream::{Item, StreamDecoder};

fuzz_target!(|data: &[u8]| {
    let key = MasterKey::from_bytes(&[0x5a; 32]).expect("32 bytes");
    let mut d = StreamDecoder::new(Some(key), vec![]);
    let mut out = Vec::new();
    for piece in data.chunks(1 + data.len() % 997) {
        d.feed(piece);
        loop {
            match d.next_item() {
                Ok(Some(Item::Frame { frame, header, payload })) => {
                    let ctx = d.context().expect("header read").clone();
                    if shrinkfs_codec::decode_payload(&ctx, frame, &header, &payload, None, &mut out).is_err() {
                        return;
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    let _ = d.finish();
});
