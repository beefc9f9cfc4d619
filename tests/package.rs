//! The Debian package: scripts/package.sh packages the binary under test, and scripts/test-deb.sh
//! installs the .deb into a clean Debian 12 chroot with apt and mounts through it there
//! (`mount -t shrinkfs`, an fstab line, settings from /etc/shrinkfs/config.toml).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Why the package test cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (a chroot, mounts, namespaces)".into());
    }
    if let Some(why) = common::mount_unavailable() {
        return Some(why);
    }
    for tool in ["mmdebstrap", "unshare", "dpkg-deb", "dpkg-shlibdeps", "strip", "readelf"] {
        if common::which(tool).is_none() {
            return Some(format!("no {tool} (scripts/setup.sh --test installs it)"));
        }
    }
    // The script runs in its own mount and PID namespaces.
    let ns = Command::new("unshare").args(["--mount", "--pid", "--fork", "true"]).status();
    if !ns.is_ok_and(|s| s.success()) {
        return Some("unshare cannot make mount and PID namespaces here".into());
    }
    None
}

#[test]
fn the_deb_installs_in_a_clean_debian_12_chroot_and_mount_t_shrinkfs_works_from_it() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let built = Command::new(repo.join("scripts/package.sh"))
        .arg("--binary")
        .arg(common::bin())
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&built.stderr);
    assert!(built.status.success(), "scripts/package.sh: {said}");
    let deb = String::from_utf8(built.stdout).unwrap().lines().last().unwrap_or_default().to_owned();
    assert!(deb.ends_with(".deb") && Path::new(&deb).is_file(), "no .deb: {deb:?} {said}");
    eprintln!("{} built in {:.1} s", deb, started.elapsed().as_secs_f64());

    let started = Instant::now();
    let run = Command::new(repo.join("scripts/test-deb.sh")).arg(&deb).output().unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    eprintln!("{log}");
    assert!(run.status.success(), "scripts/test-deb.sh failed:\n{log}");
    assert!(log.contains("== ") && log.trim_end().ends_with("ok"), "{log}");
    eprintln!("installed and mounted in the chroot in {:.1} s", started.elapsed().as_secs_f64());
}
