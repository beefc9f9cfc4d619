//! GPU codecs on a real GPU: the conformance checks every codec runs, plus cross-decoding with
//! the CPU (standard formats both ways). Ignored by default (CI has no GPU, so they show as skipped);
//! run them on the GPU host with `--include-ignored`, where a missing GPU fails them.
//! With SHRINKFS_VECTORS_OUT=DIR it also writes the GPU's output for `vectors.rs` to check in CI.

#![cfg(feature = "gpu")]

use shrinkfs_codec::codec::decompress_cpu;

mod common;
use common::vector_input;
use shrinkfs_codec::dispatch::cpu_equivalent;
use shrinkfs_codec::gpu::{Gpu, GpuConfig};

/// The GPU, with nVCOMP where the device's set-up says (`SHRINKFS_NVCOMP_LIB`, as the binary
/// reads it); a missing GPU fails the test.
fn gpu() -> Gpu {
    let cfg = GpuConfig { nvcomp_lib: std::env::var_os("SHRINKFS_NVCOMP_LIB").map(Into::into), ..GpuConfig::default() };
    Gpu::probe(&cfg).unwrap_or_else(|why| panic!("this test needs a GPU and found none: {why}"))
}

#[test]
#[ignore = "needs a GPU: run with --run-ignored on the GPU host"]
fn gpu_codecs_conform_and_cross_decode_with_the_cpu() {
    let gpu = gpu();
    println!("GPU: {}", gpu.describe);
    let out_dir = std::env::var_os("SHRINKFS_VECTORS_OUT").map(std::path::PathBuf::from);
    for codec in gpu.codecs() {
        let inputs: Vec<Vec<u8>> = (0..4).map(vector_input).chain([vec![7u8; 1 << 20], vec![1]]).collect();
        let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
        // 0: let shrinkfs choose nVCOMP's type hint (uint for Cascaded, uchar for Bitcomp).
        let dt = 0;
        let outs = gpu.compress_batch(codec, &refs, dt).unwrap_or_else(|e| panic!("{codec}: {e}"));
        assert_eq!(outs.len(), inputs.len());
        assert!(outs[0].is_some(), "{codec}: text did not compress");
        assert!(outs[4].is_some(), "{codec}: a run of 1 MiB did not compress");
        assert!(outs[5].is_none(), "{codec}: one byte cannot shrink");
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
            if let (Some(dir), true) = (&out_dir, i < 4) {
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

#[test]
#[ignore = "needs a GPU: run with --run-ignored on the GPU host"]
fn large_batches_copied_in_parts_roundtrip() {
    let gpu = gpu();
    // 48 MiB in 1 MiB frames: text, numbers, and frames with a piece that cannot shrink, so
    // stored LZ4 blocks and stored zstd pieces sit inside GPU batches.
    let frames: Vec<Vec<u8>> = (0..48)
        .map(|i| {
            let base = vector_input(i % 4);
            base.iter().copied().cycle().skip(i * 977).take((1 << 20) - (i % 3) * 4097).collect()
        })
        .collect();
    let refs: Vec<&[u8]> = frames.iter().map(|v| v.as_slice()).collect();
    let lens: Vec<usize> = frames.iter().map(Vec::len).collect();
    for part_mib in [1, 4, 1024] {
        gpu.set_part_bytes(part_mib << 20);
        for codec in [shrinkfs_codec::CodecId::Zstd, shrinkfs_codec::CodecId::Lz4] {
            let outs = gpu.compress_batch(codec, &refs, 0).unwrap_or_else(|e| panic!("{codec}: {e}"));
            // Input 1 (numbers that repeat only every 80,000 bytes) has no match within LZ4's
            // 64 KiB window: it must come back as "does not shrink", not as a bigger frame.
            let (mut stored, mut idx) = (Vec::new(), Vec::new());
            for (i, o) in outs.iter().enumerate() {
                match o {
                    Some(o) => {
                        assert!(o.len() < lens[i]);
                        stored.push(o.as_slice());
                        idx.push(i);
                    }
                    None => assert!(
                        codec == shrinkfs_codec::CodecId::Lz4 && i % 4 == 1,
                        "{codec} frame {i} ({} bytes, parts of {part_mib} MiB) did not compress",
                        lens[i]
                    ),
                }
            }
            let want: Vec<usize> = idx.iter().map(|&i| lens[i]).collect();
            let back = gpu.decompress_batch(codec, &stored, &want, 0).unwrap_or_else(|e| panic!("{codec}: {e}"));
            assert_eq!(back.len(), idx.len());
            for (k, &i) in idx.iter().enumerate() {
                let (b, f) = (&back[k], &frames[i]);
                assert!(b == f, "{codec} frame {i}, parts of {part_mib} MiB: GPU roundtrip differs");
                let mut cpu = Vec::new();
                decompress_cpu(codec, stored[k], f.len(), None, &mut cpu).unwrap();
                assert!(cpu == *f, "{codec} frame {i}: CPU decode differs");
            }
        }
    }
}

#[test]
#[ignore = "needs a GPU: run with --run-ignored on the GPU host"]
fn launches_from_two_threads_at_once_use_their_own_lanes_and_decode_on_the_cpu() {
    let gpu = gpu();
    // Two launching threads, as a `pack` runs them, each with its own 64 frames of 1 MiB (split
    // over its lanes), several rounds at once: every output decodes to its own frame on the CPU.
    let frames: Vec<Vec<u8>> =
        (0..128).map(|i| vector_input(i % 4).iter().copied().cycle().skip(i * 131).take(1 << 20).collect()).collect();
    std::thread::scope(|s| {
        for slot in 0..2 {
            let (gpu, frames) = (&gpu, &frames);
            s.spawn(move || {
                let mine: Vec<&[u8]> = frames.iter().skip(slot).step_by(2).map(|f| f.as_slice()).collect();
                for round in 0..3 {
                    let outs = gpu
                        .compress_batch_in((slot, 2), shrinkfs_codec::CodecId::Zstd, &mine, 0)
                        .unwrap_or_else(|e| panic!("slot {slot} round {round}: {e}"));
                    assert_eq!(outs.len(), mine.len());
                    for (raw, out) in mine.iter().zip(&outs) {
                        let stored = out.as_ref().expect("text compresses");
                        let mut back = Vec::new();
                        decompress_cpu(shrinkfs_codec::CodecId::Zstd, stored, raw.len(), None, &mut back).unwrap();
                        assert!(back == *raw, "slot {slot} round {round}: a frame decoded to other bytes");
                    }
                }
            });
        }
    });
}

#[test]
#[ignore = "needs a GPU: run with --run-ignored on the GPU host"]
fn a_piece_that_cannot_shrink_is_stored_and_the_rest_of_its_frame_compressed() {
    let gpu = gpu();
    // 1 MiB frames whose first 64 KiB piece is noise and the rest text, 64 of them in one launch.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let frames: Vec<Vec<u8>> = (0..64)
        .map(|i| {
            let mut f: Vec<u8> = (0..64 << 10)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            f.extend(vector_input(i % 4).iter().copied().cycle().take((1 << 20) - (64 << 10)));
            f
        })
        .collect();
    let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
    let outs = gpu.compress_batch(shrinkfs_codec::CodecId::Zstd, &refs, 0).unwrap();
    for (i, (f, out)) in frames.iter().zip(&outs).enumerate() {
        let out = out.as_ref().unwrap_or_else(|| panic!("frame {i}: the text after the noise compresses"));
        // The payload starts with the noise piece in a zstd frame of raw blocks (single segment,
        // 4-byte content size of 64 KiB), then the compressed pieces.
        assert_eq!(&out[..5], &[0x28, 0xB5, 0x2F, 0xFD, 0xA0], "frame {i}: a stored first piece");
        assert_eq!(&out[5..9], &(64u32 << 10).to_le_bytes(), "frame {i}");
        assert!(out.len() > 64 << 10 && out.len() < f.len(), "frame {i}: {} bytes", out.len());
        let mut back = Vec::new();
        decompress_cpu(shrinkfs_codec::CodecId::Zstd, out, f.len(), None, &mut back).unwrap();
        assert!(back == *f, "frame {i}: the CPU decodes other bytes");
    }
    // The GPU decodes them too (a `--gpu on` mount's reads), stored pieces and all.
    let payloads: Vec<&[u8]> = outs.iter().map(|o| o.as_deref().unwrap()).collect();
    let lens: Vec<usize> = frames.iter().map(Vec::len).collect();
    let back = gpu.decompress_batch(shrinkfs_codec::CodecId::Zstd, &payloads, &lens, 0).unwrap();
    for (i, (b, f)) in back.iter().zip(&frames).enumerate() {
        assert!(b == f, "frame {i}: the GPU decodes other bytes");
    }
}

#[test]
#[ignore = "needs a GPU: run with --run-ignored on the GPU host"]
fn frames_in_the_gpus_page_locked_buffers_cross_without_staging_and_decode_on_the_cpu() {
    let cfg = GpuConfig {
        nvcomp_lib: std::env::var_os("SHRINKFS_NVCOMP_LIB").map(Into::into),
        frame_buffers: 64,
        frame_buffers_at_start: 32,
        ..GpuConfig::default()
    };
    let gpu = Gpu::probe(&cfg).unwrap_or_else(|why| panic!("this test needs a GPU and found none: {why}"));
    assert_eq!(gpu.frame_buffers_registered(), 0, "none before the start asks");
    gpu.register_frame_buffers();
    assert_eq!(gpu.frame_buffers_registered(), 32, "the buffers asked for at start");
    let buffers = gpu.frame_buffers();
    // 40 frames of up to 1 MiB in the GPU's own buffers (as a mount's cutter and `pack` fill
    // them), then the same bytes on the heap, then a launch mixing both (staged as before).
    let data: Vec<Vec<u8>> = (0..40)
        .map(|i| vector_input(i % 4).iter().copied().cycle().skip(i * 331).take((1 << 20) - (i % 5) * 999).collect())
        .collect();
    let lent: Vec<_> = data
        .iter()
        .map(|d| {
            let mut b = buffers.get(d.len() + shrinkfs_codec::format::TAG_LEN);
            assert!(b.is_lent(), "the GPU lends its page-locked buffers");
            b.extend_from_slice(d);
            b
        })
        .collect();
    assert_eq!(gpu.frame_buffers_registered(), 40, "32 at start, 8 as frames needed them");
    let beyond: Vec<_> = (0..30).map(|_| buffers.get(1 << 20)).collect();
    assert_eq!(beyond.iter().filter(|b| b.is_lent()).count(), 24, "no more than 64 lent");
    drop(beyond);
    let heap: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let pinned: Vec<&[u8]> = lent.iter().map(|b| &b[..]).collect();
    let mixed: Vec<&[u8]> = pinned.iter().zip(&heap).map(|(p, h)| if p.len() % 2 == 0 { *p } else { *h }).collect();
    for codec in [shrinkfs_codec::CodecId::Zstd, shrinkfs_codec::CodecId::Lz4] {
        let staged = gpu.compress_batch(codec, &heap, 0).unwrap_or_else(|e| panic!("{codec} heap: {e}"));
        assert!(staged.iter().filter(|o| o.is_some()).count() >= 20, "{codec}: most frames compress");
        for (i, (raw, out)) in data.iter().zip(&staged).enumerate() {
            let Some(stored) = out else { continue };
            let mut back = Vec::new();
            decompress_cpu(codec, stored, raw.len(), None, &mut back).unwrap();
            assert!(back == *raw, "{codec} frame {i}: the CPU decodes other bytes");
        }
        // The same bytes give the same output whichever way they crossed.
        for (name, chunks) in [("pinned", &pinned), ("mixed", &mixed)] {
            let outs = gpu.compress_batch(codec, chunks, 0).unwrap_or_else(|e| panic!("{codec} {name}: {e}"));
            assert!(outs == staged, "{codec}: {name} frames compress to other bytes than staged ones");
        }
    }
}
