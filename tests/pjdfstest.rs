//! pjdfstest (the Rust port, installed by `scripts/setup.sh --test`) through a real mount with
//! `--allow-other`: every test passes but those listed in tests/pjdfstest/expected-failures.txt,
//! each of which cites the docs/SEMANTICS.md row that makes it unsupported, and the list is exact
//! (a listed test that passes fails this test too, so the list shrinks as support grows).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{mount, mount_unavailable};

/// The pjdfstest binary: the test tools' (scripts/setup.sh --test), else one on PATH.
fn pjdfstest() -> Option<PathBuf> {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-tools/bin/pjdfstest");
    if tools.is_file() { Some(tools) } else { common::which("pjdfstest") }
}

/// Outcome of each test in pjdfstest's report ("NAME   ok|FAILED|skipped" lines).
fn outcomes(report: &str) -> BTreeMap<String, String> {
    report
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let (name, outcome) = (words.next()?, words.next()?);
            (words.next().is_none() && name.contains("::") && matches!(outcome, "ok" | "FAILED" | "skipped"))
                .then(|| (name.to_owned(), outcome.to_owned()))
        })
        .collect()
}

#[test]
fn pjdfstest_passes_but_for_what_semantics_says_is_unsupported() {
    if let Some(why) = mount_unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: pjdfstest switches users, which needs root");
        return;
    }
    let Some(bin) = pjdfstest() else {
        eprintln!("skipped: no pjdfstest (scripts/setup.sh --test installs it)");
        return;
    };
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let semantics = fs::read_to_string(here.join("docs/SEMANTICS.md")).unwrap();
    let rows: BTreeSet<&str> =
        semantics.lines().filter_map(|l| l.strip_prefix("| ")?.split(" |").next()).map(str::trim).collect();
    let listed = fs::read_to_string(here.join("tests/pjdfstest/expected-failures.txt")).unwrap();
    let mut expected = BTreeSet::new();
    for line in listed.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        let (name, why) = line.split_once("SEMANTICS:").unwrap_or_else(|| panic!("no SEMANTICS citation: {line}"));
        let why = why.trim();
        assert!(rows.contains(why), "{line}: docs/SEMANTICS.md has no row {why:?}");
        expected.insert(name.trim().to_owned());
    }

    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir_all(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--allow-other"], &[]);
    // The users pjdfstest switches to must be able to reach the mount point.
    fs::set_permissions(t.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::new(&bin)
        .arg("-c")
        .arg(here.join("tests/pjdfstest/pjdfstest.toml"))
        .arg("-p")
        .arg(&mnt)
        .current_dir(&mnt)
        .output()
        .unwrap();
    m.unmount();
    let report = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let got = outcomes(&report);
    let summary = report.lines().find(|l| l.starts_with("Summary:")).unwrap_or("no summary").to_owned();
    assert!(got.len() > 300, "pjdfstest ran {} tests: {summary}", got.len());
    let failed: BTreeSet<String> = got.iter().filter(|(_, o)| *o == "FAILED").map(|(n, _)| n.clone()).collect();
    let unexpected: Vec<&String> = failed.difference(&expected).collect();
    let now_passing: Vec<&String> = expected.iter().filter(|n| got.get(*n).is_some_and(|o| o == "ok")).collect();
    assert!(unexpected.is_empty(), "{summary}\nfailed, not in expected-failures.txt: {unexpected:#?}");
    assert!(now_passing.is_empty(), "{summary}\npass now, remove from expected-failures.txt: {now_passing:#?}");
    eprintln!("{summary}");
}
