//! Measures, on a GPU host, the two ways decoded bytes can reach ordinary host buffers: through
//! pinned staging memory and a copy (what `gpu::Gpu` does), or by registering the destination
//! buffers with CUDA (`cuMemHostRegister`) so the GPU writes into them directly.
//! Run: `cargo run --release -p shrinkfs-codec --example gpu_register_cost` (BENCHMARKS.md §2).

use cudarc::driver::{CudaContext, result, sys};
use rayon::prelude::*;
use std::time::Instant;

#[allow(clippy::slow_vector_initialization)] // the pages must be resident before registering
fn resident(len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    v.resize(len, 0u8);
    v
}

fn main() -> Result<(), cudarc::driver::DriverError> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let cs = stream.cu_stream();
    let (total, span) = (64usize << 20, 1usize << 20);
    let n = total / span;
    // SAFETY: plain allocations of `total` bytes, freed when the process ends; all copies stay
    // within them and are synchronised before the host reads.
    let (d, pinned) = unsafe {
        let d = result::malloc_sync(total)?;
        result::memset_d8_sync(d, 7, total)?;
        let h: *mut u8 = result::malloc_host(total, 0)?.cast();
        (d, std::slice::from_raw_parts_mut(h, total))
    };
    for round in 0..4 {
        let t = Instant::now();
        // SAFETY: see above.
        unsafe {
            result::memcpy_dtoh_async(&mut pinned[..], d, cs)?;
            result::stream::synchronize(cs)?;
        }
        let staged: Vec<Vec<u8>> = (0..n).into_par_iter().map(|i| pinned[i * span..(i + 1) * span].to_vec()).collect();
        let t_staged = t.elapsed();
        drop(staged);
        let mut outs: Vec<Vec<u8>> = (0..n).into_par_iter().map(|_| resident(span)).collect();
        let t = Instant::now();
        // SAFETY: each buffer is live and `span` bytes long; it is unregistered before it is dropped.
        unsafe {
            for v in outs.iter_mut() {
                sys::cuMemHostRegister_v2(v.as_mut_ptr().cast(), span, 0).result()?;
            }
        }
        let t_register = t.elapsed();
        let t = Instant::now();
        // SAFETY: registered buffers of `span` bytes; the device buffer holds n * span.
        unsafe {
            for (i, v) in outs.iter_mut().enumerate() {
                result::memcpy_dtoh_async(&mut v[..], d + (i * span) as u64, cs)?;
            }
            result::stream::synchronize(cs)?;
        }
        let t_direct = t.elapsed();
        let t = Instant::now();
        // SAFETY: registered above.
        unsafe {
            for v in outs.iter_mut() {
                sys::cuMemHostUnregister(v.as_mut_ptr().cast()).result()?;
            }
        }
        let t_unregister = t.elapsed();
        println!(
            "round {round}, 64 MiB as 64 x 1 MiB: staged (copy to pinned + copy out) {:.2} ms; \
             registered: register {:.2} ms + direct copy {:.2} ms + unregister {:.2} ms",
            t_staged.as_secs_f64() * 1e3,
            t_register.as_secs_f64() * 1e3,
            t_direct.as_secs_f64() * 1e3,
            t_unregister.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
