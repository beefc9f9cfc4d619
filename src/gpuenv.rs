//! The GPU back end's settings from the environment: `SHRINKFS_NVCOMP_LIB` (where nVCOMP is) and
//! the `SHRINKFS_GPU_*` knobs kept for measuring, read once here into the codec library's typed
//! `GpuConfig` (the library reads no environment). A value that does not parse is left out with a
//! warning; the default stands.

use shrinkfs_codec::gpuconfig::GpuConfig;

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
    if let Some(n) = number("SHRINKFS_GPU_FRAME_BUFFERS", 0..=65536) {
        cfg.frame_buffers = n;
    }
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
        assert_eq!(with(&[]), GpuConfig::default());
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
        for (name, bad) in [("SHRINKFS_GPU_LANES", "9"), ("SHRINKFS_GPU_LANES", "many"), ("SHRINKFS_GPU_PART_MIB", "0")]
        {
            assert_eq!(with(&[(name, bad)]), GpuConfig::default(), "{name}={bad}");
        }
        assert_eq!(
            with(&[("SHRINKFS_GPU_FAULT", "0"), ("SHRINKFS_GPU_BATCH_COPY", "1"), ("SHRINKFS_NVCOMP_LIB", "")]),
            GpuConfig::default()
        );
    }
}
