//! The `shrinkfs` binary on local files: pack/unpack roundtrips on every corpus, sizes, and the
//! exit codes and messages for bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use shrinkfs::corpus::{CorpusKind, generate};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shrinkfs"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run shrinkfs")
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn assert_ok(o: &Output) {
    assert!(o.status.success(), "failed: {}", String::from_utf8_lossy(&o.stderr));
}

fn roundtrip(dir: &Path, data: &[u8], extra: &[&str], key: Option<&Path>) -> (u64, PathBuf) {
    let (input, packed, back) = (dir.join("in"), dir.join("in.skf"), dir.join("back"));
    std::fs::write(&input, data).unwrap();
    let mut args = vec!["pack"];
    args.extend_from_slice(extra);
    let key_arg = key.map(|k| format!("--key-file={}", p(k))).unwrap_or_default();
    if key.is_some() {
        args.push(&key_arg);
    }
    args.extend_from_slice(&[p(&input), p(&packed)]);
    assert_ok(&run(&args));
    let mut args = vec!["unpack"];
    if key.is_some() {
        args.push(&key_arg);
    }
    args.extend_from_slice(&[p(&packed), p(&back)]);
    assert_ok(&run(&args));
    assert!(std::fs::read(&back).unwrap() == data, "roundtrip differs ({extra:?}, key {})", key.is_some());
    (std::fs::metadata(&packed).unwrap().len(), packed)
}

#[test]
fn every_corpus_roundtrips_at_several_frame_sizes_with_and_without_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    write_key(&key, [9u8; 32]);
    for kind in CorpusKind::ALL {
        let data = generate(kind, 3 << 20 | 12345, 3);
        for frame in ["4K", "64K", "1M"] {
            for codec in ["zstd", "lz4", "none"] {
                let k = (frame == "64K").then_some(key.as_path());
                roundtrip(dir.path(), &data, &["--codec", codec, "--frame-size", frame], k);
            }
        }
    }
}

#[test]
fn pipes_work_both_ways() {
    let data = generate(CorpusKind::Json, 2 << 20, 1);
    let mut child = bin()
        .args(["pack", "-", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feed = data.clone();
    let t = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &feed));
    let packed = child.wait_with_output().unwrap();
    t.join().unwrap().unwrap();
    assert_ok(&packed);
    let mut child = bin()
        .args(["unpack", "-", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let t = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &packed.stdout));
    let back = child.wait_with_output().unwrap();
    t.join().unwrap().unwrap();
    assert_ok(&back);
    assert!(back.stdout == data);
}

#[test]
fn random_bytes_grow_by_at_most_a_tenth_of_a_percent_plus_64k() {
    let dir = tempfile::tempdir().unwrap();
    let data = generate(CorpusKind::Random, 64 << 20, 5);
    let (size, _) = roundtrip(dir.path(), &data, &[], None);
    let limit = data.len() as u64 + data.len() as u64 / 1000 + 64 * 1024;
    assert!(size <= limit, "{size} > {limit}");
}

#[test]
fn plain_files_unpack_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.txt");
    std::fs::write(&plain, b"written by another tool\n").unwrap();
    let out = dir.path().join("out");
    assert_ok(&run(&["unpack", p(&plain), p(&out)]));
    assert_eq!(std::fs::read(out).unwrap(), b"written by another tool\n");
    let o = run(&["inspect", p(&plain)]);
    assert_ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("plain bytes"));
}

#[test]
fn inspect_reports_sizes_and_codecs() {
    let dir = tempfile::tempdir().unwrap();
    let data = generate(CorpusKind::Logs, 3 << 20, 1);
    let (size, packed) = roundtrip(dir.path(), &data, &["--frame-size", "1M"], None);
    let o = run(&["inspect", "--json", p(&packed)]);
    assert_ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["format"], "shrinkfs");
    assert_eq!(v["frames"], 3);
    assert_eq!(v["logical_size"], data.len() as u64);
    assert_eq!(v["stored_size"], size);
    assert_eq!(v["codecs"][0]["codec"], "zstd");
}

/// Writes a key file readable by its owner alone, as a key should be (others' reading is warned of).
fn write_key(path: &std::path::Path, bytes: [u8; 32]) {
    std::fs::write(path, bytes).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
}

fn assert_fails_cleanly(o: &Output, code: i32, what: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{what}: stderr {err}");
    assert!(err.starts_with("shrinkfs: error: "), "{what}: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
}

#[test]
fn corruption_and_wrong_keys_exit_nonzero_with_a_message_and_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let wrong = dir.path().join("wrong");
    write_key(&key, [1u8; 32]);
    write_key(&wrong, [2u8; 32]);
    let data = generate(CorpusKind::Csv, 1 << 20, 2);
    for sealed in [false, true] {
        let k = sealed.then_some(key.as_path());
        let (_, packed) = roundtrip(dir.path(), &data, &["--frame-size", "64K"], k);
        let object = std::fs::read(&packed).unwrap();
        let bad = dir.path().join("bad.skf");
        let out = dir.path().join("bad.out");
        // A spread of positions: header, frames, index, footer.
        let mut x = 0x2545f4914f6cdd1du64;
        for _ in 0..40 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = (x % object.len() as u64) as usize;
            let mut b = object.clone();
            b[at] ^= 1 << (x % 8);
            std::fs::write(&bad, &b).unwrap();
            let mut args = vec!["unpack".to_string()];
            if sealed {
                args.push(format!("--key-file={}", p(&key)));
            }
            args.extend([p(&bad).to_string(), p(&out).to_string()]);
            let o = bin().args(&args).output().unwrap();
            assert_fails_cleanly(&o, 4, &format!("flip at {at}"));
            assert!(!out.exists(), "a failed unpack left output behind");
        }
        if sealed {
            let o = run(&["unpack", &format!("--key-file={}", p(&wrong)), p(&packed), p(&out)]);
            assert_fails_cleanly(&o, 4, "wrong key");
            assert!(String::from_utf8_lossy(&o.stderr).contains("wrong key"));
            let o = run(&["unpack", p(&packed), p(&out)]);
            assert_fails_cleanly(&o, 4, "missing key");
        }
    }
}

#[test]
fn bad_options_and_missing_files_have_distinct_codes() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let out = dir.path().join("o");
    assert_fails_cleanly(&run(&["pack", "--level", "40", p(&f), p(&out)]), 2, "bad level");
    assert_fails_cleanly(&run(&["pack", "--frame-size", "1K", p(&f), p(&out)]), 2, "bad frame size");
    let short_key = dir.path().join("k");
    std::fs::write(&short_key, b"short").unwrap();
    assert_fails_cleanly(&run(&["pack", &format!("--key-file={}", p(&short_key)), p(&f), p(&out)]), 2, "short key");
    // An endless file named as the key fails at once, not once memory runs out (found by a probe).
    let endless = run(&["pack", "--key-file=/dev/zero", p(&f), p(&out)]);
    assert_fails_cleanly(&endless, 2, "endless key file");
    assert!(String::from_utf8_lossy(&endless.stderr).contains("holds more"), "{endless:?}");
    // A key others can read works, and is warned about.
    let open_key = dir.path().join("open-key");
    std::fs::write(&open_key, [3u8; 32]).unwrap();
    std::fs::set_permissions(&open_key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let warned = run(&["pack", &format!("--key-file={}", p(&open_key)), p(&f), p(&out)]);
    assert!(warned.status.success(), "{warned:?}");
    assert!(String::from_utf8_lossy(&warned.stderr).contains("can be read by other users (mode 644)"), "{warned:?}");
    assert_fails_cleanly(&run(&["pack", "/nonexistent/input", p(&out)]), 3, "missing input");
    assert_fails_cleanly(&run(&["pack", p(&f), "/nonexistent/dir/out"]), 3, "unwritable output");
    assert_eq!(run(&["pack", "--codec", "brotli", p(&f), p(&out)]).status.code(), Some(2));
}

#[test]
fn bench_fs_measures_a_directory_and_writes_json_and_html() {
    let t = tempfile::tempdir().unwrap();
    let (dir, json, html) = (t.path().join("plain"), t.path().join("r.json"), t.path().join("r.html"));
    std::fs::create_dir(&dir).unwrap();
    let o = bin()
        .args(["bench", "fs", "--target", &format!("plain={}", dir.display())])
        .args(["--size", "4M", "--files", "50", "--random-reads", "20", "--mixed-seconds", "0.3", "--threads", "2"])
        .args(["--json", json.to_str().unwrap(), "--html", html.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("seq write 4M") && table.contains("ls -l 50 entries"), "{table}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = r["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|x| x["workload"].as_str().unwrap()).collect();
    for want in [
        "seq write 4M",
        "seq read 4M (cold)",
        "rand read 4K (cold)",
        "rand read 4K (warm)",
        "create 50 files",
        "stat 50 files",
        "read 50 files",
        "ls -l 50 entries",
        "delete 50 files",
        "mixed, 2 threads",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let seq = rows.iter().find(|x| x["workload"] == "seq write 4M" && x["target"] == "plain").unwrap();
    assert_eq!(seq["bytes"], 4 << 20);
    assert_eq!(seq["stored_bytes"], 4 << 20, "a plain directory stores what it is given");
    assert!(
        seq["mb_per_s"].as_f64().unwrap() > 0.0 && seq["p99_ms"].as_f64().unwrap() >= seq["p50_ms"].as_f64().unwrap()
    );
    // The zstd command line is measured on the same bytes as a floor (CI installs zstd).
    let zstd = rows.iter().find(|x| x["workload"] == "seq write 4M" && x["target"] != "plain").unwrap();
    assert!(zstd["stored_bytes"].as_u64().unwrap() < 4 << 20, "zstd -1 shrinks logs: {zstd}");
    let rand = rows.iter().find(|x| x["workload"] == "rand read 4K (cold)").unwrap();
    assert_eq!(rand["ops"], 4, "one read per MiB of a 4 MiB file");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.matches("<svg").count() >= 20 && page.contains("mixed, 2 threads"));
    assert!(!dir.join("shrinkfs-bench").exists(), "the work directory is removed");
    // Bad input is a usage error.
    let o = bin().args(["bench", "fs", "--target", "/nonexistent/dir"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    // Real content: the files are cut from any file (here this test's own executable).
    let exe = std::env::current_exe().unwrap();
    let o = bin()
        .args(["bench", "fs", "--target", &format!("plain={}", dir.display()), "--workloads", "seq-write"])
        .args(["--size", "2M", "--data-file", exe.to_str().unwrap(), "--json", json.to_str().unwrap()])
        .args(["--html", html.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["data"], exe.to_str().unwrap());
    // N writers and N readers at once, each its own file: one aggregate row each.
    let o = bin()
        .args(["bench", "fs", "--target", &format!("plain={}", dir.display()), "--workloads", "par-write,par-read"])
        .args(["--size", "3M", "--jobs", "3", "--no-reference", "--json", json.to_str().unwrap()])
        .args(["--html", html.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = r["rows"].as_array().unwrap();
    let row = |name: &str| rows.iter().find(|x| x["workload"] == name).unwrap_or_else(|| panic!("{name}: {r}"));
    let (w, rd) = (row("par write 3x3M"), row("par read 3x3M (cold)"));
    assert_eq!(
        (w["bytes"].as_u64(), w["stored_bytes"].as_u64(), w["ops"].as_u64()),
        (Some(9 << 20), Some(9 << 20), Some(12))
    );
    assert_eq!(
        (rd["bytes"].as_u64(), rd["ops"].as_u64()),
        (Some(9 << 20), Some(12)),
        "3 reads of 1 MiB and an end, each"
    );
    let small = t.path().join("small");
    std::fs::write(&small, b"too short").unwrap();
    let o = bin()
        .args(["bench", "fs", "--target", &format!("plain={}", dir.display()), "--data-file", small.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn an_existing_output_is_replaced_whole_and_no_temporary_file_is_left() {
    let d = tempfile::tempdir().unwrap();
    let (a, b, out, back) = (d.path().join("a"), d.path().join("b"), d.path().join("o.skf"), d.path().join("back"));
    std::fs::write(&a, generate(CorpusKind::Logs, 3 << 20, 1)).unwrap();
    std::fs::write(&b, b"short").unwrap();
    for (input, expect) in [(&a, std::fs::read(&a).unwrap()), (&b, b"short".to_vec())] {
        assert_ok(&bin().args(["pack", p(input), p(&out)]).output().unwrap());
        assert_ok(&bin().args(["unpack", p(&out), p(&back)]).output().unwrap());
        assert!(std::fs::read(&back).unwrap() == expect, "the second pack replaced the first output whole");
    }
    // An output that cannot take the name (a directory is there) fails and leaves nothing either.
    let dir = d.path().join("taken");
    std::fs::create_dir(&dir).unwrap();
    for cmd in [["pack", p(&a), p(&dir)], ["unpack", p(&out), p(&dir)]] {
        let o = bin().args(cmd).output().unwrap();
        assert_eq!(o.status.code(), Some(3), "{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let names: Vec<String> =
        std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(names.iter().all(|n| !n.contains("shrinkfs-tmp")), "{names:?}");
}

/// An output that is a FIFO, a device or a symbolic link is written through, never replaced by a
/// regular file; a replaced file keeps its mode and owner; a new one gets the umask's mode.
#[test]
fn special_outputs_are_written_through_and_replaced_files_keep_their_mode() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    let d = tempfile::tempdir().unwrap();
    let (input, obj) = (d.path().join("in"), d.path().join("in.skf"));
    std::fs::write(&input, b"through the pipe").unwrap();
    assert_ok(&run(&["pack", p(&input), p(&obj)]));
    // A FIFO with a reader waiting.
    let fifo = d.path().join("fifo");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0)
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let fifo = fifo.clone();
        std::thread::spawn(move || tx.send(std::fs::read(fifo).unwrap()));
    }
    assert_ok(&run(&["unpack", p(&obj), p(&fifo)]));
    let read = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("the FIFO's reader got its bytes");
    assert_eq!(read, b"through the pipe");
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    // A device (root only: CI runs as root).
    if rustix::process::geteuid().is_root() {
        let null = d.path().join("null");
        let dev = rustix::fs::makedev(1, 3);
        rustix::fs::mknodat(rustix::fs::CWD, &null, rustix::fs::FileType::CharacterDevice, 0o666.into(), dev).unwrap();
        assert_ok(&run(&["unpack", p(&obj), p(&null)]));
        assert_ok(&run(&["pack", p(&input), p(&null)]));
        assert_eq!(std::fs::symlink_metadata(&null).unwrap().rdev(), dev, "still the device");
    }
    // A link to a file: the file gets the bytes, the link stays a link.
    let (target, link) = (d.path().join("target"), d.path().join("link"));
    std::fs::write(&target, b"old").unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert_ok(&run(&["unpack", p(&obj), p(&link)]));
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), b"through the pipe");
    // `/dev/stdout` is this process's output, a file a shell opened for appending included.
    let stdout_kind = || std::fs::symlink_metadata("/dev/stdout").map(|m| m.file_type());
    if let Ok(before) = stdout_kind() {
        let log = d.path().join("log");
        std::fs::write(&log, b"earlier\n").unwrap();
        let script = format!("exec {} unpack {} /dev/stdout >> {}", env!("CARGO_BIN_EXE_shrinkfs"), p(&obj), p(&log));
        assert_ok(&Command::new("sh").arg("-c").arg(script).output().unwrap());
        assert_eq!(std::fs::read(&log).unwrap(), b"earlier\nthrough the pipe");
        assert_eq!(stdout_kind().unwrap(), before, "/dev/stdout is what it was");
    }
    // A failed unpack through the link leaves the file as it was.
    let bad = d.path().join("bad.skf");
    let mut damaged = std::fs::read(&obj).unwrap();
    let mid = damaged.len() / 3;
    damaged[mid] ^= 0xff;
    std::fs::write(&bad, &damaged).unwrap();
    assert!(!run(&["unpack", p(&bad), p(&link)]).status.success());
    assert_eq!(std::fs::read(&target).unwrap(), b"through the pipe", "untouched by the failure");
    // A link to nothing names no file to write.
    let dangling = d.path().join("dangling");
    std::os::unix::fs::symlink(d.path().join("nowhere"), &dangling).unwrap();
    assert!(!run(&["unpack", p(&obj), p(&dangling)]).status.success());
    assert!(!d.path().join("nowhere").exists());
    // A replaced file keeps its mode (and, where this process may set it, its owner); a new
    // one gets 0o666 less the umask (0o027 here).
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
    let root = rustix::process::geteuid().is_root();
    if root {
        std::os::unix::fs::chown(&target, Some(1234), Some(4321)).unwrap();
    }
    assert_ok(&run(&["unpack", p(&obj), p(&target)]));
    let m = std::fs::metadata(&target).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o640);
    if root {
        assert_eq!((m.uid(), m.gid()), (1234, 4321));
    }
    let new = d.path().join("new");
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("umask 027 && exec {} unpack {} {}", env!("CARGO_BIN_EXE_shrinkfs"), p(&obj), p(&new)))
        .output()
        .unwrap();
    assert_ok(&o);
    assert_eq!(std::fs::metadata(&new).unwrap().mode() & 0o7777, 0o640);
}

/// A `pack` stopped by SIGINT or SIGTERM while it writes removes its temporary output and ends
/// as the signal ends a process.
#[test]
fn a_pack_stopped_by_a_signal_leaves_no_temporary_file() {
    use std::io::Write;
    use std::os::unix::process::ExitStatusExt;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("o.skf");
        let mut child = bin().args(["pack", "-", p(&out)]).stdin(std::process::Stdio::piped()).spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&generate(CorpusKind::Logs, 3 << 20, 1)).unwrap();
        let temporary = || {
            std::fs::read_dir(d.path())
                .unwrap()
                .any(|e| e.unwrap().file_name().to_string_lossy().contains("shrinkfs-tmp"))
        };
        let started = std::time::Instant::now();
        while !temporary() && started.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(temporary(), "pack is writing its temporary output");
        // SAFETY: a signal to the child this test started.
        assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
        let status = child.wait().unwrap();
        drop(stdin);
        assert_eq!(status.signal(), Some(sig), "{status:?}");
        assert!(!temporary(), "signal {sig}: the temporary output is removed");
        assert!(!out.exists());
    }
    // Started ignoring SIGHUP (as under `nohup`), it goes on and finishes.
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("o.skf");
    let mut child = Command::new("nohup")
        .args([env!("CARGO_BIN_EXE_shrinkfs"), "pack", "-", p(&out)])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let data = generate(CorpusKind::Logs, 1 << 20, 2);
    stdin.write_all(&data).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: a signal to the child this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGHUP) }, 0);
    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert_ok(&bin().args(["unpack", p(&out), p(&d.path().join("back"))]).output().unwrap());
    assert!(std::fs::read(d.path().join("back")).unwrap() == data);
}

#[test]
fn bench_codecs_measures_the_chosen_codecs_and_refuses_unknown_ones() {
    let o = run(&[
        "bench",
        "codecs",
        "--corpora",
        "logs",
        "--size",
        "1M",
        "--frame-sizes",
        "64K",
        "--codecs",
        "lz4",
        "--runs",
        "1",
        "--small-count",
        "10",
    ]);
    assert_ok(&o);
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("| logs | 64K | cpu-lz4 |"), "{table}");
    assert!(!table.contains("cpu-zstd") && !table.contains("lz4-block"), "only the lz4 family: {table}");
    let o = run(&["bench", "codecs", "--codecs", "zsdt", "--size", "1M"]);
    assert_eq!(o.status.code(), Some(2), "a usage error");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown codec \"zsdt\"") && err.contains("lz4-block"), "{err}");
}

#[test]
fn bench_codecs_measures_real_files_beside_the_corpora_under_their_own_names() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text.log");
    let noise = dir.path().join("noise.bin");
    std::fs::write(&text, generate(CorpusKind::Logs, 1 << 20, 3)).unwrap();
    std::fs::write(&noise, generate(CorpusKind::Random, 1 << 20, 4)).unwrap();
    let (t, n) = (text.to_str().unwrap(), noise.to_str().unwrap());
    let args = ["bench", "codecs", "--corpora", "random", "--size", "512K", "--frame-sizes", "64K", "--codecs", "zstd"];
    let o = run(&[&args[..], &["--runs", "1", "--small-count", "10", "--input", t, n]].concat());
    assert_ok(&o);
    let table = String::from_utf8_lossy(&o.stdout);
    let ratio = |label: &str| -> f64 {
        let row =
            table.lines().find(|l| l.starts_with(&format!("| {label} | 64K | cpu-zstd-1 |"))).unwrap_or_else(|| {
                panic!("no row for {label}: {table}");
            });
        row.split('|').nth(4).unwrap().trim().parse().unwrap()
    };
    // The corpus still runs, and each file is measured on its own bytes: the log compresses, the
    // noise does not.
    assert!(ratio("random") < 1.01, "{table}");
    assert!(ratio("text.log") > 3.0, "{table}");
    assert!(ratio("noise.bin") < 1.01, "{table}");
    let missing = dir.path().join("missing");
    let o = run(&[&args[..], &["--input", missing.to_str().unwrap()]].concat());
    assert_fails_cleanly(&o, 3, "a missing --input");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--input") && err.contains("missing"), "{err}");
    assert!(
        o.stdout.is_empty(),
        "nothing measured before the missing file is found: {}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// Runs `args` and checks it is refused as a usage error: exit 2, one line on stderr starting
/// "shrinkfs: error: " and naming `flag`, no panic.
fn assert_usage_error(args: &[&str], flag: &str) {
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: stderr {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(err.starts_with("shrinkfs: error: ") && err.trim_end().lines().count() == 1, "{args:?}: {err}");
    assert!(err.contains(flag), "{args:?} does not name {flag}: {err}");
}

#[test]
fn absurd_values_of_every_flag_are_one_line_usage_errors_not_panics() {
    // Absurd for any number; the flags below add their own.
    const NUMBERS: &[&str] = &["-1", "inf", "-inf", "nan", "1e300", "99999999999999999999999", "", "x"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> { NUMBERS.iter().chain(extra).copied().collect() };
    let durations = with(&["601", "1e9"]);
    let cases: Vec<(&str, Vec<&str>)> = vec![
        // Codec and GPU flags (mount, pack).
        ("--codec", vec!["", "brotli"]),
        ("--level", with(&["0", "20", "2147483648"])),
        ("--frame-size", with(&["0", "1K", "1G"])),
        ("--dict", vec![""]),
        ("--key-file", vec![""]),
        ("--gpu", vec!["", "maybe"]),
        ("--gpu-min-frames", with(&["0", "1000001"])),
        ("--gpu-batch-max-items", with(&["0"])),
        ("--gpu-batch-window-ms", with(&["10001"])),
        ("--gpu-batch-floor-bytes", with(&["0", "1X", "16777216T"])),
        ("--gpu-many-streams", with(&["-1", "1000001", "many"])),
        ("--gpu-data-type", vec!["", "float"]),
        // S3 flags (mount, pack, unpack, inspect).
        (
            "--endpoint-url",
            vec!["", "not a url", "localhost:9000", "ftp://h", "http://", "http://h:99999", "http://u:p@h"],
        ),
        ("--region", vec!["", "US EAST 1", "a/b"]),
        ("--profile", vec!["", "a b", "[x]"]),
        ("--credentials-file", vec!["", "/nonexistent/credentials", "/"]),
        ("--aws-config-file", vec!["", "/nonexistent/config", "/"]),
        ("--storage-class", vec!["", "standard", "STANDARD IA", "GLACIER-IR"]),
        ("--sse", vec!["", "kms", "AES128", "sse-c"]),
        ("--sse-kms-key-id", vec!["", "a key"]),
        ("--sse-c-key-file", vec!["", "/nonexistent/key"]),
        ("--retries", with(&["1001"])),
        ("--retry-timeout", durations.clone()),
        ("--request-timeout", with(&["0", "3601"])),
        ("--connect-timeout", with(&["0", "301"])),
        ("--max-requests", with(&["0", "4097"])),
        // Mount flags.
        ("--uid", with(&["4294967295", "4294967296"])),
        ("--gid", with(&["4294967295"])),
        ("--file-mode", vec!["", "99999", "8", "-1", "0o99", "10000"]),
        ("--dir-mode", vec!["", "99999", "rwx"]),
        ("--log-file", vec![""]),
        ("--memory-limit", with(&["0", "1M", "17T"])),
        ("--memory-cache-size", with(&["9T"])),
        ("--cache-dir", vec![""]),
        ("--cache-size", with(&["0", "1M"])),
        ("--cache-min-free", with(&["1", "0.999"])),
        ("--metadata-ttl", with(&["86401"])),
        ("--staging-dir", vec![""]),
        ("--threads", with(&["0", "1025"])),
        ("--request-nice", vec!["-21", "1", "20", "inf", "nan", "1e300", "99999999999999999999999", "", "x", "1.5"]),
        ("--metrics-addr", vec!["", "x", "9464", "127.0.0.1:99999"]),
    ];
    for (flag, values) in &cases {
        for v in values {
            let arg = format!("{flag}={v}");
            // A mount point that does not exist: nothing can mount even if parsing let it through.
            assert_usage_error(&["mount", "memory://", "/nonexistent/mnt", &arg], flag);
        }
    }
    for v in ["", "gs://b", "s3://"] {
        assert_usage_error(&["mount", v, "/nonexistent/mnt"], "SOURCE");
    }
    // S3 settings that contradict each other, a bad SSE-C key file, and a storage class a mount
    // could not read back.
    let dir = tempfile::tempdir().unwrap();
    let (short, text) = (dir.path().join("short.key"), dir.path().join("text.key"));
    std::fs::write(&short, "QUFBQUFB\n").unwrap();
    std::fs::write(&text, "not base64 at all!\n").unwrap();
    let (short, text) = (format!("--sse-c-key-file={}", p(&short)), format!("--sse-c-key-file={}", p(&text)));
    for (args, flag) in [
        (&["--path-style", "--virtual-hosted-style"][..], "--virtual-hosted-style"),
        (&["--sse=AES256", "--sse-kms-key-id=k"], "--sse-kms-key-id"),
        (&["--sse=aws:kms", short.as_str()], "--sse-c-key-file"),
        (&[short.as_str()], "32 bytes"),
        (&[text.as_str()], "base64"),
        (&["--storage-class=GLACIER"], "--storage-class GLACIER"),
        (&["--storage-class=DEEP_ARCHIVE"], "--storage-class DEEP_ARCHIVE"),
    ] {
        assert_usage_error(&[&["mount", "memory://", "/nonexistent/mnt"][..], args].concat(), flag);
    }
    // The shared groups are checked on every subcommand that has them.
    for sub in [&["pack"][..], &["unpack"], &["inspect"]] {
        for (flag, v) in [
            ("--endpoint-url", "not a url"),
            ("--retry-timeout", "nan"),
            ("--request-timeout", "-1"),
            ("--retries", "-1"),
            ("--storage-class", "x"),
            ("--sse", "x"),
            ("--profile", ""),
            ("--credentials-file", "/nonexistent"),
        ] {
            let arg = format!("{flag}={v}");
            let mut args = sub.to_vec();
            args.extend([arg.as_str(), "/nonexistent/in", "/nonexistent/out"]);
            if sub[0] == "inspect" {
                args.pop();
            }
            assert_usage_error(&args, flag);
        }
    }
    for (flag, v) in [("--level", "1e300"), ("--frame-size", "-1"), ("--gpu-batch-window-ms", "inf")] {
        assert_usage_error(&["pack", &format!("{flag}={v}"), "/nonexistent/in", "/nonexistent/out"], flag);
    }
    let bench_codecs: Vec<(&str, Vec<&str>)> = vec![
        ("--size", with(&["0", "17G"])),
        ("--frame-sizes", with(&["0", "1K", "1G"])),
        ("--runs", with(&["0", "1001"])),
        ("--small-count", with(&["0"])),
        ("--small-size", with(&["0", "65M"])),
        ("--corpora", vec!["", "nope"]),
    ];
    for (flag, values) in &bench_codecs {
        for v in values {
            assert_usage_error(&["bench", "codecs", &format!("{flag}={v}")], flag);
        }
    }
    let bench_fs: Vec<(&str, Vec<&str>)> = vec![
        ("--target", vec!["", "=x", "a="]),
        ("--baseline", vec![""]),
        ("--backend", vec![""]),
        ("--pid", vec!["", "a=-1", "a=x", "a=99999999999"]),
        ("--workloads", vec!["", "nope"]),
        ("--size", with(&["0", "17G"])),
        ("--data", vec!["", "nope"]),
        ("--files", with(&["0"])),
        ("--file-size", with(&["0", "2G"])),
        ("--random-reads", with(&["0"])),
        ("--threads", with(&["0"])),
        ("--mixed-seconds", with(&["0"])),
        ("--price-per-gb-month", with(&["1001"])),
        ("--json", vec![""]),
        ("--html", vec![""]),
    ];
    for (flag, values) in &bench_fs {
        for v in values {
            let arg = format!("{flag}={v}");
            let mut args = vec!["bench", "fs", &arg];
            if *flag != "--target" {
                args.extend(["--target", "/nonexistent/dir"]);
            }
            assert_usage_error(&args, flag);
        }
    }
    // Together too large to hold in memory.
    assert_usage_error(&["bench", "codecs", "--small-count=1000000", "--small-size=64M"], "--small-count");
    for v in with(&["17G"]) {
        assert_usage_error(&["corpus", "logs", v, "/nonexistent/out"], "SIZE");
    }
    for v in ["-1", "nan", "99999999999999999999999", ""] {
        assert_usage_error(&["corpus", "logs", "1K", "/nonexistent/out", &format!("--seed={v}")], "--seed");
    }
    assert_usage_error(&["corpus", "nope", "1K", "/nonexistent/out"], "KIND");
    assert_usage_error(&["unmount", ""], "MOUNTPOINT");
}

#[test]
fn a_damaged_header_and_footer_never_unpack_as_plain_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let data = generate(CorpusKind::Csv, 300_000, 3);
    let (_, packed) = roundtrip(dir.path(), &data, &["--frame-size", "64K"], None);
    let object = std::fs::read(&packed).unwrap();
    let (bad, out) = (dir.path().join("bad.skf"), dir.path().join("bad.out"));
    // Header magic and one byte of the footer (before its final magic): the object still ends
    // with the footer magic, so it is a damaged shrinkfs object, not plain data.
    for footer_byte in [object.len() - 40, object.len() - 20, object.len() - 9] {
        let mut b = object.clone();
        b[0] ^= 0xff;
        b[footer_byte] ^= 0x01;
        std::fs::write(&bad, &b).unwrap();
        let o = run(&["unpack", p(&bad), p(&out)]);
        assert_fails_cleanly(&o, 4, &format!("header magic + footer byte {footer_byte}"));
        assert!(!out.exists());
    }
}

#[test]
fn with_a_key_unsealed_input_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    write_key(&key, [5u8; 32]);
    let data = generate(CorpusKind::Csv, 200_000, 4);
    let (_, unsealed) = roundtrip(dir.path(), &data, &[], None);
    let plain = dir.path().join("plain.txt");
    std::fs::write(&plain, &data).unwrap();
    let out = dir.path().join("out");
    let key_arg = format!("--key-file={}", p(&key));
    for input in [&unsealed, &plain] {
        let o = run(&["unpack", &key_arg, p(input), p(&out)]);
        assert_fails_cleanly(&o, 4, "unsealed input with a key");
        assert!(String::from_utf8_lossy(&o.stderr).contains("not sealed"));
        assert!(!out.exists());
        let o = run(&["unpack", &key_arg, "--allow-unsealed", p(input), p(&out)]);
        assert_ok(&o);
        assert!(std::fs::read(&out).unwrap() == data);
        std::fs::remove_file(&out).unwrap();
    }
}

/// scripts/check-cycles.py finds a cycle between files, through `crate::` and `super::` paths and
/// `use crate::{...}` lists, and none where references go one way.
#[test]
fn the_import_cycle_check_finds_cycles_between_files_and_passes_a_tree() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    std::fs::create_dir_all(src.join("store")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\npub mod store;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::{b::Thing, store};\n").unwrap();
    std::fs::write(src.join("b.rs"), "pub struct Thing;\n").unwrap();
    std::fs::write(src.join("store/mod.rs"), "pub mod leaf;\n// crate::a is only a comment\n").unwrap();
    std::fs::write(src.join("store/leaf.rs"), "fn f() { let _ = super::super::b::Thing; }\n").unwrap();
    let run = || {
        Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check-cycles.py"))
            .arg(&src)
            .output()
            .unwrap()
    };
    let o = run();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));
    std::fs::write(src.join("b.rs"), "pub struct Thing;\nfn g() { crate::store::leaf::f(); }\n").unwrap();
    std::fs::write(src.join("store/leaf.rs"), "pub fn f() { let _ = crate::a::X; }\n").unwrap();
    let o = run();
    let said = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(
        said.contains("cycle") && said.contains("a.rs") && said.contains("b.rs") && said.contains("leaf.rs"),
        "{said}"
    );
}
