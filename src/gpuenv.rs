//! The GPU back end's settings from the environment: `SHRINKFS_NVCOMP_LIB` (where nVCOMP is) and
//! the `SHRINKFS_GPU_*` knobs kept for measuring, read once here into the codec library's typed
//! `GpuConfig` (the library reads no environment). A value that does not parse is left out with a
//! warning; the default stands.

use shrinkfs_codec::gpuconfig::GpuConfig;

/// Page-locked frame buffers a mount lends its GPU unless `SHRINKFS_GPU_FRAME_BUFFERS` says
/// otherwise: registered as frames in flight first need them, so the memory budget (which
/// bounds those frames) bounds how many a mount ends up with. With 1024 on the H100 host, 8
/// writers under `--gpu auto` moved 1.3x more than with none (BENCHMARKS.md §9). A `pack` lends
/// none: registering them cost it more than the staging they save (`pack_config`).
pub const MOUNT_FRAME_BUFFERS: usize = 1024;

/// `GpuConfig` for a `pack`: as [`gpu_config`], without page-locked frame buffers unless
/// `SHRINKFS_GPU_FRAME_BUFFERS` asks for them.
pub fn pack_config() -> GpuConfig {
    let set = std::env::var("SHRINKFS_GPU_FRAME_BUFFERS").is_ok_and(|v| !v.trim().is_empty());
    GpuConfig { frame_buffers: if set { gpu_config().frame_buffers } else { 0 }, ..gpu_config() }
}

/// `GpuConfig` from this process's environment, read (and warned about) once.
pub fn gpu_config() -> GpuConfig {
    static CONFIG: std::sync::OnceLock<GpuConfig> = std::sync::OnceLock::new();
    CONFIG.get_or_init(|| from_vars(|name| std::env::var(name).ok())).clone()
}

/// `GpuConfig` from the variables `var` gives.
fn from_vars(var: impl Fn(&str) -> Option<String>) -> GpuConfig {
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
    cfg.frame_buffers = number("SHRINKFS_GPU_FRAME_BUFFERS", 0..=65536).unwrap_or(MOUNT_FRAME_BUFFERS);
    cfg.batch_copy = switch("SHRINKFS_GPU_BATCH_COPY").is_none_or(|v| v != "0");
    cfg.streaming_copy = switch("SHRINKFS_GPU_STREAMING_COPY").is_none_or(|v| v != "0");
    cfg.fail = switch("SHRINKFS_GPU_FAULT").is_some_and(|v| v == "1");
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> GpuConfig {
        from_vars(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn each_variable_sets_its_field_and_a_bad_value_leaves_the_default() {
        assert_eq!(with(&[]), GpuConfig { frame_buffers: MOUNT_FRAME_BUFFERS, ..GpuConfig::default() });
        let cfg = with(&[
            ("SHRINKFS_NVCOMP_LIB", "/opt/nv/libnvcomp.so.6"),
            ("SHRINKFS_GPU_LANES", "2"),
            ("SHRINKFS_GPU_PART_MIB", "4"),
            ("SHRINKFS_GPU_BATCH_COPY", "0"),
            ("SHRINKFS_GPU_STREAMING_COPY", "0"),
            ("SHRINKFS_GPU_FAULT", "1"),
            ("SHRINKFS_GPU_FRAME_BUFFERS", "0"),
        ]);
        assert_eq!(
            cfg,
            GpuConfig {
                lanes: 2,
                part_bytes: 4 << 20,
                batch_copy: false,
                streaming_copy: false,
                fail: true,
                nvcomp_lib: Some("/opt/nv/libnvcomp.so.6".into()),
                frame_buffers: 0,
                ..GpuConfig::default()
            }
        );
        let mount_default = GpuConfig { frame_buffers: MOUNT_FRAME_BUFFERS, ..GpuConfig::default() };
        for (name, bad) in [
            ("SHRINKFS_GPU_LANES", "9"),
            ("SHRINKFS_GPU_LANES", "many"),
            ("SHRINKFS_GPU_PART_MIB", "0"),
            ("SHRINKFS_GPU_FRAME_BUFFERS", "-1"),
        ] {
            assert_eq!(with(&[(name, bad)]), mount_default, "{name}={bad}");
        }
        assert_eq!(
            with(&[("SHRINKFS_GPU_FAULT", "0"), ("SHRINKFS_GPU_BATCH_COPY", "1"), ("SHRINKFS_NVCOMP_LIB", "")]),
            mount_default
        );
    }
}
