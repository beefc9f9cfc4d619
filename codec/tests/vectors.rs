//! Frames produced by nVCOMP on a GPU (checked in under tests/vectors/, written by gpu.rs on the GPU
//! machine) decode byte-identical with the CPU decoders: GPU output is portable to CPU-only hosts.

use shrinkfs_codec::CodecId;
use shrinkfs_codec::codec::decompress_cpu;

mod common;
use common::vector_input;

#[test]
fn gpu_written_frames_decode_on_the_cpu() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let mut per_codec = std::collections::BTreeMap::<CodecId, usize>::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "bin") {
            continue;
        }
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let (codec, i) = name.rsplit_once('-').expect("codec-index.bin");
        let codec: CodecId = codec.parse().unwrap();
        let raw = vector_input(i.parse().unwrap());
        let stored = std::fs::read(&path).unwrap();
        let mut out = Vec::new();
        let res = decompress_cpu(codec, &stored, raw.len(), None, &mut out);
        if codec.gpu_only() {
            // A CPU-only host names what it would need instead of guessing.
            assert!(matches!(res, Err(shrinkfs_codec::codec::DecodeFailure::Unavailable(_))), "{name}");
            continue;
        }
        res.unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert!(out == raw, "{name}: CPU decode of the GPU's output differs");
        *per_codec.entry(codec).or_default() += 1;
    }
    // Produced by nVCOMP 6.0 on an H100 (codec/tests/gpu.rs with SHRINKFS_VECTORS_OUT).
    // Every codec of the table that both back ends run has vectors.
    let mut want: Vec<CodecId> =
        CodecId::ALL.iter().copied().filter(|c| !c.gpu_only() && c.descriptor().gpu.is_some()).collect();
    want.sort();
    assert_eq!(per_codec.keys().copied().collect::<Vec<_>>(), want, "{per_codec:?}");
}
