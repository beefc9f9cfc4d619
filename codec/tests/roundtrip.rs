//! Property tests: every object the encoder writes decodes back identically, by index and by
//! stream, for any data, frame size, codec and key; any flipped byte is an error, never wrong bytes.

mod common;

use std::sync::Arc;

use proptest::prelude::*;
use shrinkfs_codec::format::{FOOTER_LEN, HEADER_LEN};
use shrinkfs_codec::{
    CodecId, CodecParams, EncodeConfig, Error, Layout, MasterKey, decode_all, decode_frame, encode_all,
};

fn config(codec: CodecId, level: i32, frame_size: u32, key: Option<[u8; 32]>) -> EncodeConfig {
    EncodeConfig {
        params: CodecParams { codec, level, dict: None },
        frame_size,
        key: key.map(|k| MasterKey::from_bytes(&k).unwrap()),
    }
}

/// Data that mixes compressible runs with noise, so frames take both the codec and the `none` path.
fn data_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..3000),
            (any::<u8>(), 1usize..20_000).prop_map(|(b, n)| vec![b; n]),
            (0usize..5000).prop_map(|n| {
                b"ts=2026-11-22 level=info msg=\"request served\" status=200\n"
                    .iter()
                    .cycle()
                    .take(n)
                    .copied()
                    .collect()
            }),
        ],
        0..8,
    )
    .prop_map(|parts| parts.concat())
}

fn codec_strategy() -> impl Strategy<Value = CodecId> {
    prop_oneof![Just(CodecId::None), Just(CodecId::Zstd), Just(CodecId::Lz4), Just(CodecId::Lz4Block)]
}

fn stream_decode(object: &[u8], key: Option<[u8; 32]>, piece: usize) -> Result<Vec<u8>, Error> {
    common::stream_decode(object, key.map(|k| MasterKey::from_bytes(&k).unwrap()), piece)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn roundtrip_by_index_and_by_stream(
        data in data_strategy(),
        codec in codec_strategy(),
        level in 1i32..6,
        frame_kib in 4u32..40,
        key in prop::option::of(any::<[u8; 32]>()),
        piece in 1usize..9000,
    ) {
        let cfg = config(codec, level, frame_kib * 1024, key);
        let object = encode_all(&cfg, &data).unwrap();
        let master = key.map(|k| MasterKey::from_bytes(&k).unwrap());
        prop_assert_eq!(&decode_all(&object, master.as_ref(), &[]).unwrap(), &data);
        prop_assert_eq!(&stream_decode(&object, key, piece).unwrap(), &data);
        // No frame is ever stored larger than its raw bytes (plus the seal tag).
        let layout = Layout::parse(&object, object.len() as u64).unwrap();
        for e in &layout.entries {
            let tag = if key.is_some() { 16 } else { 0 };
            prop_assert!(e.stored_len <= e.raw_len + tag);
        }
    }

    #[test]
    fn any_range_reads_back_through_the_plan(
        data in data_strategy(),
        frame_kib in 4u32..16,
        a in any::<prop::sample::Index>(),
        b in any::<prop::sample::Index>(),
        max_fetch in 1u64..200_000,
    ) {
        prop_assume!(!data.is_empty());
        let cfg = config(CodecId::Zstd, 1, frame_kib * 1024, None);
        let object = encode_all(&cfg, &data).unwrap();
        let layout = Layout::parse(&object, object.len() as u64).unwrap();
        let ctx = layout.open(None, &[]).unwrap();
        let (mut s, mut e) = (a.index(data.len()) as u64, b.index(data.len() + 1) as u64);
        if s > e { std::mem::swap(&mut s, &mut e); }
        let fetches = layout.plan(s..e, max_fetch);
        let mut got = Vec::new();
        let mut first_raw = None;
        let mut buf = Vec::new();
        for f in &fetches {
            let bytes = &object[f.range.start as usize..f.range.end as usize];
            for fr in f.frames.clone() {
                let entry = &layout.entries[fr];
                first_raw.get_or_insert(entry.raw_offset);
                let r = entry.stored_range();
                let at = (r.start - f.range.start) as usize;
                decode_frame(&ctx, fr as u64, &bytes[at..at + (r.end - r.start) as usize], Some(entry), &mut buf).unwrap();
                got.extend_from_slice(&buf);
            }
        }
        if s == e {
            prop_assert!(fetches.is_empty());
        } else {
            let off = (s - first_raw.unwrap()) as usize;
            prop_assert_eq!(&got[off..off + (e - s) as usize], &data[s as usize..e as usize]);
        }
    }
}

/// Flips every byte of small objects (each structure: header, frame headers, payloads, index,
/// tag, footer) and checks that decoding fails with an error, never returns other bytes.
#[test]
fn every_flipped_byte_is_an_error() {
    let data: Vec<u8> =
        (0..20_000u32).flat_map(|i| format!("line {} value {}\n", i % 97, i * 7).into_bytes()).take(20_000).collect();
    for key in [None, Some([5u8; 32])] {
        for codec in [CodecId::Zstd, CodecId::Lz4, CodecId::Lz4Block, CodecId::None] {
            let object = encode_all(&config(codec, 1, 8192, key), &data).unwrap();
            let master = key.map(|k| MasterKey::from_bytes(&k).unwrap());
            for i in 0..object.len() {
                for bit in [0x01u8, 0x80] {
                    let mut bad = object.clone();
                    bad[i] ^= bit;
                    match decode_all(&bad, master.as_ref(), &[]) {
                        Err(_) => {}
                        // Flipping the footer magic makes the object look plain: the reader must
                        // then refuse it because the head still says shrinkfs.
                        Ok(out) => panic!(
                            "flip {bit:#x} at {i}/{} ({codec}, key {}) decoded {} bytes",
                            object.len(),
                            key.is_some(),
                            out.len()
                        ),
                    }
                    assert!(stream_decode(&bad, key, 4096).is_err(), "stream: flip at {i} ({codec})");
                }
            }
        }
    }
}

#[test]
fn wrong_and_missing_keys_are_named() {
    let object = encode_all(&config(CodecId::Zstd, 3, 4096, Some([1; 32])), b"secret data secret data").unwrap();
    let wrong = MasterKey::from_bytes(&[2; 32]).unwrap();
    assert!(matches!(decode_all(&object, Some(&wrong), &[]), Err(Error::WrongKey)));
    assert!(matches!(decode_all(&object, None, &[]), Err(Error::KeyRequired)));
    assert!(!object.windows(6).any(|w| w == b"secret"), "sealed object leaks plaintext");
}

#[test]
fn dropped_or_swapped_frames_are_detected_when_sealed() {
    let data = vec![7u8; 3 * 4096];
    let cfg = config(CodecId::None, 1, 4096, Some([3; 32]));
    let object = encode_all(&cfg, &data).unwrap();
    let layout = Layout::parse(&object, object.len() as u64).unwrap();
    let (f0, f1) = (layout.entries[0].stored_range(), layout.entries[1].stored_range());
    // Swap frames 0 and 1 (equal sizes) and leave index as is: frame 0's tag fails at position 0.
    let mut swapped = object.clone();
    let a = object[f0.start as usize..f0.end as usize].to_vec();
    let b = object[f1.start as usize..f1.end as usize].to_vec();
    swapped[f0.start as usize..f0.end as usize].copy_from_slice(&b);
    swapped[f1.start as usize..f1.end as usize].copy_from_slice(&a);
    let key = MasterKey::from_bytes(&[3; 32]).unwrap();
    assert!(matches!(decode_all(&swapped, Some(&key), &[]), Err(Error::Decrypt { frame: 0 })));
}

#[test]
fn plain_objects_read_as_they_are_and_truncated_ones_do_not() {
    for plain in [&b""[..], b"hello", b"\x89SH", &[0u8; 100_000]] {
        assert_eq!(decode_all(plain, None, &[]).unwrap(), plain);
        assert_eq!(stream_decode(plain, None, 7).unwrap(), plain);
    }
    let object = encode_all(&EncodeConfig::default(), &vec![1u8; 100_000]).unwrap();
    for cut in [HEADER_LEN, object.len() - FOOTER_LEN, object.len() - 1] {
        assert!(decode_all(&object[..cut], None, &[]).is_err(), "cut at {cut}");
        assert!(stream_decode(&object[..cut], None, 1000).is_err(), "stream cut at {cut}");
    }
}

#[test]
fn a_dictionary_is_required_and_used() {
    let samples: Vec<Vec<u8>> =
        (0..500).map(|i| format!("{{\"user\":{i},\"action\":\"login\",\"ok\":true}}").into_bytes()).collect();
    let dict = zstd::dict::from_samples(&samples, 4096).unwrap();
    let dict = Arc::new(shrinkfs_codec::Dictionary::new(dict).unwrap());
    let cfg = EncodeConfig {
        params: CodecParams { codec: CodecId::Zstd, level: 3, dict: Some(dict.clone()) },
        frame_size: 4096,
        key: None,
    };
    let data = samples.concat();
    let object = encode_all(&cfg, &data).unwrap();
    assert!(matches!(decode_all(&object, None, &[]), Err(Error::DictionaryRequired(id)) if id == dict.id()));
    assert_eq!(decode_all(&object, None, &[dict]).unwrap(), data);
}

#[test]
fn a_dictionary_is_needed_only_by_zstd_frames() {
    let samples: Vec<Vec<u8>> = (0..500).map(|i| format!("{{\"id\":{i},\"ok\":true}}").into_bytes()).collect();
    let dict = Arc::new(shrinkfs_codec::Dictionary::new(zstd::dict::from_samples(&samples, 4096).unwrap()).unwrap());
    // Noise does not compress: every frame is stored as `none`, though the header names the dictionary.
    let mut noise = vec![0u8; 64 * 1024];
    rand::fill(&mut noise[..]);
    let cfg = EncodeConfig {
        params: CodecParams { codec: CodecId::Zstd, level: 3, dict: Some(dict.clone()) },
        frame_size: 4096,
        key: None,
    };
    let object = encode_all(&cfg, &noise).unwrap();
    let layout = shrinkfs_codec::Layout::parse(&object, object.len() as u64).unwrap();
    assert_eq!(layout.header.dict_id, dict.id());
    assert!(layout.entries.iter().all(|e| e.codec == CodecId::None));
    assert_eq!(decode_all(&object, None, &[]).unwrap(), noise);
    assert_eq!(stream_decode(&object, None, 1000).unwrap(), noise);
}
