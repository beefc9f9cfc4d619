//! The dispatcher's CPU path and its fallback: with the GPU forced to fail (SHRINKFS_GPU_FAULT=1)
//! every frame still encodes, on the CPU, and the fallback counter moves. One test per process
//! (the variable is process-wide).

use std::sync::Arc;
use std::sync::mpsc::channel;

use shrinkfs_codec::dispatch::{DispatchConfig, Dispatcher, GpuPolicy, cpu_equivalent};
use shrinkfs_codec::{CodecId, EncodeConfig, decode_payload, format::FrameHeader};

#[test]
fn frames_encode_whatever_happens_to_the_gpu() {
    // SAFETY: set before any thread of this test process reads the environment.
    unsafe { std::env::set_var("SHRINKFS_GPU_FAULT", "1") };
    let d = match Dispatcher::new(DispatchConfig { policy: GpuPolicy::Auto, ..Default::default() }) {
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
    let ctx = Arc::new(EncodeConfig::default().new_object());
    let (tx, rx) = channel();
    let data: Vec<Vec<u8>> = (0..50).map(|i| format!("frame {i} ").repeat(3000).into_bytes()).collect();
    for (i, raw) in data.iter().enumerate() {
        let tx = tx.clone();
        d.submit(ctx.clone(), cpu_equivalent(CodecId::Zstd, 1), CodecId::Zstd, i as u64, raw.clone(), move |f| {
            tx.send((i, f)).unwrap()
        });
    }
    drop(tx);
    let mut got: Vec<_> = rx.iter().collect();
    got.sort_by_key(|g| g.0);
    assert_eq!(got.len(), 50);
    for (i, f) in got {
        let h = FrameHeader::parse(&f.bytes, i as u64, false).unwrap();
        assert_eq!(h.codec, CodecId::Zstd);
        let mut out = Vec::new();
        decode_payload(&ctx, i as u64, &h, &f.bytes[24..], None, &mut out).unwrap();
        assert_eq!(out, data[i]);
    }
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
