//! What the codec's test files share: the inputs of the GPU tests (which write test vectors on the
//! GPU machine) and of the vector check in CI (which regenerates them to compare the CPU's
//! decoding with), a front-to-back decoder of whole objects, and a round of frames through a
//! dispatcher.

// Each test file that shares this module uses a part of it.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::mpsc::channel;

use shrinkfs_codec::dispatch::{Dispatcher, cpu_equivalent};
use shrinkfs_codec::format::FrameHeader;
use shrinkfs_codec::stream::{Item, StreamDecoder};
use shrinkfs_codec::{CodecId, EncodeConfig, Error, MasterKey, decode_payload};

/// Submits each of `data` as a frame of one object to `d` (zstd, on the GPU where it takes
/// them), checks that every frame comes back and decodes to its input, and returns the codec
/// each was stored with.
pub fn dispatch_and_check(d: &Dispatcher, data: &[Vec<u8>]) -> Vec<CodecId> {
    let ctx = Arc::new(EncodeConfig::default().new_object());
    let (tx, rx) = channel();
    for (i, raw) in data.iter().enumerate() {
        let tx = tx.clone();
        d.submit(
            ctx.clone(),
            cpu_equivalent(CodecId::Zstd, 1),
            CodecId::Zstd,
            i as u64,
            raw.clone().into(),
            move |f| tx.send((i, f)).unwrap(),
        );
    }
    drop(tx);
    let mut got: Vec<_> = rx.iter().collect();
    assert_eq!(got.len(), data.len(), "every frame came back");
    got.sort_by_key(|g| g.0);
    got.into_iter()
        .map(|(i, f)| {
            let h = FrameHeader::parse(&f.head(), i as u64, false).unwrap();
            let mut out = Vec::new();
            decode_payload(&ctx, i as u64, &h, &f.payload, None, &mut out).unwrap();
            assert!(out == data[i], "frame {i} decodes to its input");
            h.codec
        })
        .collect()
}

/// Reads an object front to back in pieces of `piece` bytes, as `unpack -` does.
pub fn stream_decode(object: &[u8], key: Option<MasterKey>, piece: usize) -> Result<Vec<u8>, Error> {
    let mut d = StreamDecoder::new(key, vec![]);
    let (mut out, mut buf) = (Vec::new(), Vec::new());
    for chunk in object.chunks(piece.max(1)) {
        d.feed(chunk);
        while let Some(item) = d.next_item()? {
            match item {
                Item::Plain(b) => out.extend_from_slice(&b),
                Item::Frame { frame, header, payload } => {
                    let ctx = d.context().expect("a frame comes after the header").clone();
                    decode_payload(&ctx, frame, &header, &payload, None, &mut buf)?;
                    out.extend_from_slice(&buf);
                }
                Item::End => {}
            }
        }
    }
    out.extend(d.finish()?);
    Ok(out)
}

/// Deterministic input number `i` of the GPU test vectors.
pub fn vector_input(i: usize) -> Vec<u8> {
    match i {
        0 => b"the quick brown fox jumps over the lazy dog\n".repeat(200),
        1 => (0..20_000u32).flat_map(|v| (v * 3).to_le_bytes()).collect(),
        // Text, then 64 KiB that does not compress, then text: a piece the GPU cannot shrink.
        // (A fixed xorshift, not a library generator: checked-in vectors depend on these bytes.)
        3 => {
            let mut x = 0x2545_F491_4F6C_DD1Du64;
            let noise = (0..65_536).map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            });
            let text = || b"GET /a/b 200 512\n".iter().copied().cycle().take(70_000);
            text().chain(noise).chain(text()).collect()
        }
        _ => (0..65_536u32).map(|v| (v % 251) as u8 ^ (v / 4096) as u8).collect(),
    }
}
