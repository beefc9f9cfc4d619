//! The dispatcher's CPU path and its fallback: with the GPU forced to fail (`GpuConfig::fail`)
//! every frame still encodes, on the CPU, and the fallback counter moves.

mod common;

use shrinkfs_codec::CodecId;
use shrinkfs_codec::dispatch::{DispatchConfig, Dispatcher, GpuPolicy};
use shrinkfs_codec::gpuconfig::GpuConfig;

#[test]
fn frames_encode_whatever_happens_to_the_gpu() {
    let gpu = GpuConfig {
        fail: true,
        nvcomp_lib: std::env::var_os("SHRINKFS_NVCOMP_LIB").map(Into::into),
        ..GpuConfig::default()
    };
    let d = match Dispatcher::new(DispatchConfig { policy: GpuPolicy::Auto, gpu, ..Default::default() }) {
        Ok(d) => d,
        Err(e) => panic!("auto never fails: {e}"),
    };
    // The GPU starts in the background; this test is about what it does once started.
    d.wait_started();
    println!("dispatcher: {}", d.describe());
    assert!(
        Dispatcher::new(DispatchConfig { policy: GpuPolicy::Off, ..Default::default() })
            .unwrap()
            .describe()
            .contains("off")
    );
    let data: Vec<Vec<u8>> = (0..50).map(|i| format!("frame {i} ").repeat(3000).into_bytes()).collect();
    assert!(common::dispatch_and_check(&d, &data).iter().all(|c| *c == CodecId::Zstd));
    let counts: std::collections::HashMap<_, _> = d.counters().snapshot().into_iter().collect();
    if d.gpu_for(CodecId::Zstd) {
        // (Idle cores take frames from the same queue; the failing GPU gives back the rest.)
        assert_eq!(counts["fallback_error"] + counts["cpu_frames"], 50, "{counts:?}");
        assert_eq!(counts["gpu_frames"], 0);
    } else {
        println!("no GPU here: the CPU path alone was exercised ({})", d.describe());
        assert_eq!(counts["cpu_frames"], 50, "{counts:?}");
    }
}
