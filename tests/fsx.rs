//! fsx (the File System eXerciser, Rust port, installed by `scripts/setup.sh --test`) through a
//! real mount: 20,000 random reads, writes, mapped reads and writes, truncates, fsyncs and
//! close/reopens per seed, two seeds, every read checked against fsx's own model of the file;
//! then the file, remounted, reads back as it was before the unmount.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{mount, mount_unavailable};

/// Operations per seed.
const OPS: &str = "20000";

/// The fsx binary: the test tools' (scripts/setup.sh --test), else one on PATH.
fn fsx() -> Option<PathBuf> {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-tools/bin/fsx");
    if tools.is_file() { Some(tools) } else { common::which("fsx") }
}

#[test]
fn fsx_runs_twenty_thousand_operations_per_seed_without_a_wrong_byte() {
    if let Some(why) = mount_unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let Some(bin) = fsx() else {
        // CI installs it: there, a missing fsx is a failure, not a skip.
        assert!(std::env::var_os("CI").is_none(), "fsx is not installed (scripts/setup.sh --test installs it)");
        eprintln!("skipped: no fsx (scripts/setup.sh --test installs it)");
        return;
    };
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fsx/fsx.toml");
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt, artifacts) = (t.path().join("bucket"), t.path().join("mnt"), t.path().join("artifacts"));
    std::fs::create_dir_all(&bucket).unwrap();
    std::fs::create_dir_all(&artifacts).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    let mut finals = Vec::new();
    for seed in ["1", "2"] {
        let file = mnt.join(format!("fsx-{seed}"));
        let out = Command::new(&bin)
            .args(["-f", config.to_str().unwrap(), "-N", OPS, "-S", seed, "-P", artifacts.to_str().unwrap()])
            .arg(&file)
            .output()
            .expect("run fsx");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let ok = out.status.success() && text.contains("All operations completed A-OK!");
        assert!(ok, "seed {seed}: fsx {}: {text}\nmount log:\n{}", out.status, m.log());
        finals.push((file.clone(), std::fs::read(&file).unwrap()));
    }
    m.unmount();
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    for (file, bytes) in &finals {
        assert!(std::fs::read(file).unwrap() == *bytes, "{} changed across a remount", file.display());
    }
    m.unmount();
}
