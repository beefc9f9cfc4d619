//! The GPU back end's settings from the environment: `SHRINKFS_NVCOMP_LIB` (where nVCOMP is) and
//! the `SHRINKFS_GPU_*` knobs kept for measuring, read once here into the codec library's typed
//! `GpuConfig` (the library reads no environment). A value that does not parse is left out with a
//! warning; the default stands.

use shrinkfs_codec::gpuconfig::GpuConfig;

/// Most page-locked frame buffers a mount lends its GPU (unless `SHRINKFS_GPU_FRAME_BUFFERS` says
/// otherwise), and never more than its budget of bytes in flight holds frames: they are
/// registered as frames first need them and kept. With 1024 on the H100 host, `--gpu on` with
/// 8 writers beside 16 busy loops moved 18-24% more at a fifth less CPU than with none
/// (BENCHMARKS.md §9, session 20). A `pack` lends none: registering them cost one `pack` more
/// than the staging they save.
pub const MOUNT_FRAME_BUFFERS: usize = 1024;

/// `GpuConfig` for a `pack` of `frame_size` frames: no page-locked frame buffers unless
/// `SHRINKFS_GPU_FRAME_BUFFERS` asks for them.
pub fn pack_config(frame_size: usize) -> GpuConfig {
    with_frame_buffers(frame_size, env().1.unwrap_or(0))
}

/// `GpuConfig` for a mount of `frame_size` frames with `in_flight` bytes of budget for them.
pub fn mount_config(frame_size: usize, in_flight: u64) -> GpuConfig {
    with_frame_buffers(frame_size, env().1.unwrap_or_else(|| mount_frame_buffers(frame_size, in_flight)))
}

/// `GpuConfig` from this process's environment, without page-locked frame buffers unless
/// `SHRINKFS_GPU_FRAME_BUFFERS` asks for them (of the default frame size).
pub fn gpu_config() -> GpuConfig {
    pack_config(shrinkfs_codec::DEFAULT_FRAME_SIZE as usize)
}

fn with_frame_buffers(frame_size: usize, n: usize) -> GpuConfig {
    let bytes = frame_size + shrinkfs_codec::format::TAG_LEN;
    let (cfg, _, at_start) = env();
    // All of them at the GPU's start unless told otherwise: registered later, on the threads that
    // cut frames, they held writers and launches back (BENCHMARKS.md §9, session 21).
    let frame_buffers_at_start = at_start.unwrap_or(n).min(n);
    GpuConfig { frame_buffers: n, frame_buffer_bytes: bytes, frame_buffers_at_start, ..cfg.clone() }
}

/// The default for a mount: [`MOUNT_FRAME_BUFFERS`], at most what its budget holds.
fn mount_frame_buffers(frame_size: usize, in_flight: u64) -> usize {
    let fit = in_flight / (frame_size + shrinkfs_codec::format::TAG_LEN) as u64;
    MOUNT_FRAME_BUFFERS.min(usize::try_from(fit).unwrap_or(usize::MAX))
}

/// The environment's settings, `SHRINKFS_GPU_FRAME_BUFFERS` and
/// `SHRINKFS_GPU_FRAME_BUFFERS_AT_START`, read (and warned about) once.
fn env() -> &'static (GpuConfig, Option<usize>, Option<usize>) {
    static CONFIG: std::sync::OnceLock<(GpuConfig, Option<usize>, Option<usize>)> = std::sync::OnceLock::new();
    CONFIG.get_or_init(|| from_vars(|name| std::env::var(name).ok()))
}

/// `GpuConfig` from the variables `var` gives, the number of frame buffers asked for, and how many
/// of them to register at the GPU's start.
fn from_vars(var: impl Fn(&str) -> Option<String>) -> (GpuConfig, Option<usize>, Option<usize>) {
    let mut cfg = GpuConfig {
        nvcomp_lib: var("SHRINKFS_NVCOMP_LIB").filter(|p| !p.is_empty()).map(Into::into),
        ..GpuConfig::default()
    };
    let number = |name: &str, range: std::ops::RangeInclusive<usize>| -> Option<usize> {
        let raw = var(name)?;
        match raw.trim().parse::<usize>() {
            Ok(n) if range.contains(&n) => Some(n),
            _ => {
                tracing::warn!("{name}={raw:?} is not a number from {} to {}; ignored", range.start(), range.end());
                None
            }
        }
    };
    // (Switches: "0" turns one off, "1" the fault on; anything else leaves the default.)
    let switch = |name: &str| var(name).map(|v| v.trim().to_owned());
    if let Some(n) = number("SHRINKFS_GPU_LANES", 1..=GpuConfig::MAX_LANES) {
        cfg.lanes = n;
    }
    if let Some(mib) = number("SHRINKFS_GPU_PART_MIB", 1..=4096) {
        cfg.part_bytes = mib << 20;
    }
    let frame_buffers = number("SHRINKFS_GPU_FRAME_BUFFERS", 0..=65536);
    let at_start = number("SHRINKFS_GPU_FRAME_BUFFERS_AT_START", 0..=65536);
    cfg.batch_copy = switch("SHRINKFS_GPU_BATCH_COPY").is_none_or(|v| v != "0");
    cfg.streaming_copy = switch("SHRINKFS_GPU_STREAMING_COPY").is_none_or(|v| v != "0");
    cfg.fail = switch("SHRINKFS_GPU_FAULT").is_some_and(|v| v == "1");
    (cfg, frame_buffers, at_start)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> (GpuConfig, Option<usize>, Option<usize>) {
        from_vars(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn each_variable_sets_its_field_and_a_bad_value_leaves_the_default() {
        assert_eq!(with(&[]), (GpuConfig::default(), None, None));
        let cfg = with(&[
            ("SHRINKFS_NVCOMP_LIB", "/opt/nv/libnvcomp.so.6"),
            ("SHRINKFS_GPU_LANES", "2"),
            ("SHRINKFS_GPU_PART_MIB", "4"),
            ("SHRINKFS_GPU_BATCH_COPY", "0"),
            ("SHRINKFS_GPU_STREAMING_COPY", "0"),
            ("SHRINKFS_GPU_FAULT", "1"),
            ("SHRINKFS_GPU_FRAME_BUFFERS", "0"),
            ("SHRINKFS_GPU_FRAME_BUFFERS_AT_START", "12"),
        ]);
        let want = GpuConfig {
            lanes: 2,
            part_bytes: 4 << 20,
            batch_copy: false,
            streaming_copy: false,
            fail: true,
            nvcomp_lib: Some("/opt/nv/libnvcomp.so.6".into()),
            ..GpuConfig::default()
        };
        assert_eq!(cfg, (want, Some(0), Some(12)));
        for (name, bad) in [
            ("SHRINKFS_GPU_LANES", "9"),
            ("SHRINKFS_GPU_LANES", "many"),
            ("SHRINKFS_GPU_PART_MIB", "0"),
            ("SHRINKFS_GPU_FRAME_BUFFERS", "-1"),
            ("SHRINKFS_GPU_FRAME_BUFFERS", "abc"),
            ("SHRINKFS_GPU_FRAME_BUFFERS_AT_START", "x"),
        ] {
            assert_eq!(with(&[(name, bad)]), (GpuConfig::default(), None, None), "{name}={bad}");
        }
        assert_eq!(
            with(&[("SHRINKFS_GPU_FAULT", "0"), ("SHRINKFS_GPU_BATCH_COPY", "1"), ("SHRINKFS_NVCOMP_LIB", "")]),
            (GpuConfig::default(), None, None)
        );
    }

    #[test]
    fn a_mount_lends_at_most_what_its_budget_holds_and_a_pack_none() {
        let frame = 1 << 20;
        assert_eq!(mount_frame_buffers(frame, 768 << 20), 767, "the default budget: 767 frames and tags");
        assert_eq!(mount_frame_buffers(frame, 64 << 30), MOUNT_FRAME_BUFFERS);
        assert_eq!(mount_frame_buffers(64 << 10, 768 << 20), MOUNT_FRAME_BUFFERS);
        assert_eq!(mount_frame_buffers(frame, 100), 0);
        // (Without SHRINKFS_GPU_FRAME_BUFFERS in the test's environment.)
        if std::env::var_os("SHRINKFS_GPU_FRAME_BUFFERS").is_none() {
            assert_eq!(pack_config(frame).frame_buffers, 0);
            let m = mount_config(4 << 20, 768 << 20);
            assert_eq!((m.frame_buffers, m.frame_buffer_bytes), (191, (4 << 20) + 16), "sized for the mount's frames");
            if std::env::var_os("SHRINKFS_GPU_FRAME_BUFFERS_AT_START").is_none() {
                assert_eq!(m.frame_buffers_at_start, 191, "a mount registers them all at the GPU's start");
                assert_eq!(pack_config(frame).frame_buffers_at_start, 0);
            }
        }
    }
}
