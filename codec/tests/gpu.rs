//! GPU codecs on a real GPU: the conformance checks every codec runs, plus cross-decoding with
//! the CPU (standard formats both ways). Skips with a printed reason where there is no GPU.
//! With SHRINKFS_VECTORS_OUT=DIR it also writes the GPU's output for `vectors.rs` to check in CI.

#![cfg(feature = "gpu")]

use shrinkfs_codec::codec::decompress_cpu;

mod common;
use common::vector_input;
use shrinkfs_codec::dispatch::cpu_equivalent;
use shrinkfs_codec::gpu::Gpu;

#[test]
fn gpu_codecs_conform_and_cross_decode_with_the_cpu() {
    let gpu = match Gpu::probe() {
        Ok(g) => g,
        Err(why) => {
            println!("SKIPPED: no GPU here: {why}");
            return;
        }
    };
    println!("GPU: {}", gpu.describe);
    let out_dir = std::env::var_os("SHRINKFS_VECTORS_OUT").map(std::path::PathBuf::from);
    for codec in gpu.codecs() {
        let inputs: Vec<Vec<u8>> = (0..3).map(vector_input).chain([vec![7u8; 1 << 20], vec![1]]).collect();
        let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
        // 0: let shrinkfs choose nVCOMP's type hint (uint for Cascaded, uchar for Bitcomp).
        let dt = 0;
        let outs = gpu.compress_batch(codec, &refs, dt).unwrap_or_else(|e| panic!("{codec}: {e}"));
        assert_eq!(outs.len(), inputs.len());
        assert!(outs[0].is_some(), "{codec}: text did not compress");
        assert!(outs[3].is_some(), "{codec}: a run of 1 MiB did not compress");
        assert!(outs[4].is_none(), "{codec}: one byte cannot shrink");
        for (i, (raw, out)) in inputs.iter().zip(&outs).enumerate() {
            let Some(stored) = out else { continue };
            assert!(stored.len() < raw.len());
            let back =
                gpu.decompress_batch(codec, &[stored], &[raw.len()], dt).unwrap_or_else(|e| panic!("{codec}: {e}"));
            assert!(back[0] == *raw, "{codec} input {i}: GPU roundtrip differs");
            if !codec.gpu_only() {
                let mut cpu = Vec::new();
                decompress_cpu(codec, stored, raw.len(), None, &mut cpu)
                    .unwrap_or_else(|e| panic!("{codec} {i}: {e:?}"));
                assert!(cpu == *raw, "{codec} input {i}: CPU decode of GPU output differs");
            }
            if let (Some(dir), true) = (&out_dir, i < 3) {
                std::fs::create_dir_all(dir).unwrap();
                std::fs::write(dir.join(format!("{codec}-{i}.bin")), stored).unwrap();
            }
        }
        if !codec.gpu_only() {
            // CPU-written frames decode on the GPU.
            let cpu = cpu_equivalent(codec, 3);
            let mut stored = Vec::new();
            assert!(cpu.compress(&inputs[0], &mut stored));
            let back = gpu.decompress_batch(codec, &[&stored], &[inputs[0].len()], 0).unwrap();
            assert!(back[0] == inputs[0], "{codec}: GPU decode of CPU output differs");
        }
    }
}
