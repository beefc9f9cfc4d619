//! pjdfstest (the Rust port, installed by `scripts/setup.sh --test`) through real mounts, with and
//! without `--allow-other`: every test passes but those listed in tests/pjdfstest/expected-*.txt,
//! each of which cites the docs/SEMANTICS.md row that makes it unsupported, and the lists are exact
//! (a listed test that passes fails this test too, so the lists shrink as support grows).

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
    run_suite(&["--allow-other"], &["expected-failures.txt"]);
}

/// Without `--allow-other` the kernel lets no other user into the mount: the tests that switch
/// users fail too, and only those (expected-failures-single-user.txt lists them).
#[test]
fn without_allow_other_only_tests_switching_users_fail_besides() {
    run_suite(&[], &["expected-failures.txt", "expected-failures-single-user.txt"]);
}

/// Tests listed in `lists` (in tests/pjdfstest), each line citing the docs/SEMANTICS.md row that
/// makes it fail.
fn expected_failures(here: &Path, lists: &[&str]) -> BTreeSet<String> {
    let semantics = fs::read_to_string(here.join("docs/SEMANTICS.md")).unwrap();
    let rows: BTreeSet<&str> =
        semantics.lines().filter_map(|l| l.strip_prefix("| ")?.split(" |").next()).map(str::trim).collect();
    let mut expected = BTreeSet::new();
    for list in lists {
        let listed = fs::read_to_string(here.join("tests/pjdfstest").join(list)).unwrap();
        for line in listed.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
            let (name, why) =
                line.split_once("SEMANTICS:").unwrap_or_else(|| panic!("{list}: no SEMANTICS citation: {line}"));
            let why = why.trim();
            assert!(rows.contains(why), "{list}: {line}: docs/SEMANTICS.md has no row {why:?}");
            assert!(expected.insert(name.trim().to_owned()), "{list}: {} is listed twice", name.trim());
        }
    }
    expected
}

/// Runs pjdfstest through a mount made with `extra` and checks its failures are exactly those
/// `lists` name.
fn run_suite(extra: &[&str], lists: &[&str]) {
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
    let expected = expected_failures(here, lists);

    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir_all(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, extra, &[]);
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
    assert!(unexpected.is_empty(), "{summary}\nfailed, not in {lists:?}: {unexpected:#?}");
    assert!(now_passing.is_empty(), "{summary}\npass now, remove from {lists:?}: {now_passing:#?}");
    eprintln!("{summary}");
}
