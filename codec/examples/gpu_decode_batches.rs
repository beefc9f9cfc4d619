//! Measures, on a GPU host, how long the GPU takes to decode a read's batch of 1 MiB frames against
//! the cores, by batch size and by how the frames were cut: one zstd frame per 1 MiB frame (what
//! the cores write) or 64 KiB zstd frames back to back (what the GPU writes, `gpu::PIECE`). Host
//! memory to host memory, as a read hands its batch over; the cores decode each batch's frames in
//! parallel on the rayon pool, as the read path's workers do. Every GPU output is compared with
//! the original bytes. A last pass runs 8 threads at once, each with its own frames, like 8 readers.
//! Run: `cargo run --release -p shrinkfs-codec --features gpu --example gpu_decode_batches -- FILE
//! [MiB]` (nVCOMP from `SHRINKFS_NVCOMP_LIB` or the places searched; BENCHMARKS.md §9, session 23).

use std::time::{Duration, Instant};

use rayon::prelude::*;
use shrinkfs_codec::CodecId;
use shrinkfs_codec::gpu::{Gpu, PIECE};
use shrinkfs_codec::gpuconfig::GpuConfig;

const FRAME: usize = 1 << 20;

/// One frame's payload: one zstd frame, or one per `PIECE` bytes back to back.
fn encode(frame: &[u8], piece: usize) -> Vec<u8> {
    frame.chunks(piece).flat_map(|p| zstd::bulk::compress(p, 1).expect("zstd level 1")).collect()
}

fn cpu_decode(payloads: &[&[u8]], lens: &[usize]) -> Vec<Vec<u8>> {
    payloads
        .par_iter()
        .zip(lens)
        .map(|(p, &n)| {
            let mut out = Vec::with_capacity(n);
            zstd::stream::copy_decode(*p, &mut out).expect("valid zstd");
            out
        })
        .collect()
}

fn gbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: gpu_decode_batches FILE [MiB]")?;
    let mib: usize = args.get(2).map_or(Ok(256), |s| s.parse())?;
    let data = std::fs::read(path)?;
    let data = &data[..data.len().min(mib << 20)];
    let frames: Vec<&[u8]> = data.chunks(FRAME).collect();
    let lens: Vec<usize> = frames.iter().map(|f| f.len()).collect();
    let cfg = GpuConfig { nvcomp_lib: std::env::var_os("SHRINKFS_NVCOMP_LIB").map(Into::into), ..Default::default() };
    let gpu = Gpu::probe(&cfg)?;
    println!("# {} frames of 1 MiB of {path}; {}; {} cores", frames.len(), gpu.describe, rayon::current_num_threads());
    println!("| cut | frames a batch | GPU GB/s | cores GB/s | GPU / cores | outputs identical |");
    println!("|---|---|---|---|---|---|");
    for (cut, piece) in [("one zstd frame a frame (cores)", FRAME), ("64 KiB zstd frames (GPU)", PIECE)] {
        let payloads: Vec<Vec<u8>> = frames.par_iter().map(|f| encode(f, piece)).collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        // Warm-up: buffers, kernels.
        gpu.decompress_batch(CodecId::Zstd, &refs[..8.min(refs.len())], &lens[..8.min(refs.len())], 0)?;
        for batch in [1usize, 2, 4, 8, 16, 32, 64, 128] {
            let (mut t_gpu, mut t_cpu, mut same) = (Duration::ZERO, Duration::ZERO, true);
            for (i, (p, n)) in refs.chunks(batch).zip(lens.chunks(batch)).enumerate() {
                let t = Instant::now();
                let out = gpu.decompress_batch(CodecId::Zstd, p, n, 0)?;
                t_gpu += t.elapsed();
                let want = &frames[i * batch..i * batch + p.len()];
                same &= out.len() == p.len() && out.iter().zip(want).all(|(o, f)| o.as_slice() == *f);
                let t = Instant::now();
                let back = cpu_decode(p, n);
                t_cpu += t.elapsed();
                same &= back.iter().zip(want).all(|(b, f)| b.as_slice() == *f);
            }
            let (g, c) = (gbps(data.len(), t_gpu), gbps(data.len(), t_cpu));
            println!("| {cut} | {batch} | {g:.2} | {c:.2} | {:.2}x | {same} |", g / c);
        }
        // 8 threads at once, each decoding its eighth in batches of 8 (GPU) or one frame at a time
        // on the pool (cores), like 8 sequential readers.
        let eighth = refs.len().div_ceil(8);
        let parts: Vec<(&[&[u8]], &[usize])> = refs.chunks(eighth).zip(lens.chunks(eighth)).collect();
        let t = Instant::now();
        let ok = std::thread::scope(|s| {
            let hs: Vec<_> = parts
                .iter()
                .map(|(p, n)| {
                    s.spawn(|| {
                        p.chunks(8).zip(n.chunks(8)).all(|(p, n)| gpu.decompress_batch(CodecId::Zstd, p, n, 0).is_ok())
                    })
                })
                .collect();
            hs.into_iter().all(|h| h.join().unwrap_or(false))
        });
        let t_gpu = t.elapsed();
        let t = Instant::now();
        std::thread::scope(|s| {
            for (p, n) in &parts {
                s.spawn(|| {
                    for (p, n) in p.chunks(1).zip(n.chunks(1)) {
                        cpu_decode(p, n);
                    }
                });
            }
        });
        let t_cpu = t.elapsed();
        let (g, c) = (gbps(data.len(), t_gpu), gbps(data.len(), t_cpu));
        println!("| {cut}, 8 threads | 8 (GPU), 1 (cores) | {g:.2} | {c:.2} | {:.2}x | {ok} (no error) |", g / c);
    }
    Ok(())
}
