//! The conformance suite every `Codec` implementation runs: CPU codecs here; GPU codecs run the
//! same checks from the GPU back end's tests.

use shrinkfs_codec::codec::{
    Codec, DeflateCodec, Lz4BlockCodec, Lz4Codec, NoneCodec, SnappyCodec, ZstdCodec, decompress_cpu,
};

/// Inputs that exercise edge cases: empty, one byte, runs, text, incompressible noise, odd sizes.
pub fn inputs() -> Vec<Vec<u8>> {
    let mut noise = vec![0u8; 70_001];
    let mut x = 0x9e3779b97f4a7c15u64;
    for b in noise.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    vec![
        vec![],
        vec![42],
        vec![0; 65_536],
        b"the quick brown fox jumps over the lazy dog\n".repeat(3000),
        noise,
        (0..1_048_577u32).map(|i| (i % 251) as u8).collect(),
    ]
}

fn conform(codec: &dyn Codec) {
    for raw in inputs() {
        let mut stored = Vec::new();
        let shrank = codec.compress(&raw, &mut stored);
        if !shrank {
            continue;
        }
        assert!(stored.len() < raw.len(), "{}: 'smaller' output is not smaller", codec.id());
        let mut out = vec![1, 2, 3];
        codec.decompress(&stored, raw.len(), &mut out).unwrap();
        assert_eq!(out, raw, "{}: roundtrip", codec.id());
        // The CPU decoder for the same id reads it too: the format is the codec's, not the back end's.
        decompress_cpu(codec.id(), &stored, raw.len(), None, &mut out).unwrap();
        assert_eq!(out, raw);
        // A wrong expected length is an error, not a short or padded output.
        assert!(codec.decompress(&stored, raw.len() + 1, &mut out).is_err(), "{}: length check", codec.id());
        // Truncated input is an error.
        assert!(codec.decompress(&stored[..stored.len() / 2], raw.len(), &mut out).is_err());
    }
    // Compressible input must actually compress.
    let text = b"abcabcabc".repeat(10_000);
    let mut stored = Vec::new();
    assert_eq!(codec.compress(&text, &mut stored), codec.id() != shrinkfs_codec::CodecId::None);
}

#[test]
fn none_conforms() {
    conform(&NoneCodec);
}

#[test]
fn zstd_conforms_at_every_level() {
    for level in [1, 3, 9, 19] {
        conform(&ZstdCodec::new(level, None).unwrap());
    }
}

#[test]
fn lz4_conforms() {
    conform(&Lz4Codec);
    conform(&Lz4BlockCodec);
}

#[test]
fn deflate_conforms() {
    conform(&DeflateCodec::new(6));
}

#[test]
fn snappy_conforms() {
    conform(&SnappyCodec);
}

#[test]
fn every_cpu_back_end_of_the_codec_table_conforms() {
    for &id in shrinkfs_codec::CodecId::ALL {
        let d = id.descriptor();
        if d.cpu.is_none() {
            continue;
        }
        let (lo, hi) = d.levels.unwrap_or((1, 1));
        for level in [lo, hi] {
            let params = shrinkfs_codec::CodecParams { codec: id, level, dict: None };
            let codec = params.cpu_codec().unwrap();
            assert_eq!(codec.id(), id);
            conform(codec.as_ref());
        }
    }
}
