//! Operating a mount as an operator does: fstab lines run through mount(8) and the
//! `mount.shrinkfs` helper, generic options, remounts, refusing a second mount, unmounting only
//! its own mount, the signals a mount answers, systemd's readiness notification and the exit
//! code of every kind of failure.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bin, mount, mount_unavailable};

macro_rules! require_fuse {
    () => {
        if let Some(why) = mount_unavailable() {
            eprintln!("skipped: {why}");
            return;
        }
    };
}

/// Root only (mount(8) helpers in /sbin, lazy unmounts): returns from the test otherwise.
macro_rules! require_root {
    () => {
        require_fuse!();
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
    };
}

/// The /proc/mounts line of `dir`, if mounted.
fn mount_line(dir: &Path) -> Option<String> {
    let want = dir.to_str().unwrap();
    fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .rev()
        .find(|l| l.split(' ').nth(1) == Some(want))
        .map(Into::into)
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(secs), "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Points /sbin/mount.shrinkfs and /sbin/mount.fuse.shrinkfs at the binary under test, as the
/// package installs them (replaced atomically: tests run in parallel).
fn install_helpers() {
    for name in ["mount.shrinkfs", "mount.fuse.shrinkfs"] {
        let tmp = PathBuf::from(format!("/sbin/.{name}.{}", std::process::id()));
        let _ = fs::remove_file(&tmp);
        std::os::unix::fs::symlink(bin(), &tmp).unwrap();
        fs::rename(&tmp, Path::new("/sbin").join(name)).unwrap();
    }
}

/// The pid of the process serving the mount at `dir`: the shrinkfs process (run as `shrinkfs
/// mount` or as the helper `mount.shrinkfs`) whose command line names it.
fn server_pid(dir: &Path) -> Option<i32> {
    let want = dir.to_str().unwrap();
    fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        let shrinkfs = args[0].ends_with(b"shrinkfs") && (args[0].ends_with(b"mount.shrinkfs") || args[1] == b"mount");
        (shrinkfs && args.contains(&want.as_bytes())).then_some(pid)
    })
}

fn alive(pid: i32) -> bool {
    // A zombie is gone for our purposes.
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: sending a signal to a process id.
    unsafe { libc::kill(pid, sig) };
}

#[test]
fn an_fstab_line_mounts_with_its_options_remounts_read_only_and_a_second_mount_is_refused() {
    require_root!();
    install_helpers();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt, log) = (t.path().join("bucket"), t.path().join("mnt"), t.path().join("log"));
    fs::create_dir_all(&bucket).unwrap();
    fs::create_dir_all(&mnt).unwrap();
    let fstab = t.path().join("fstab");
    // `-` and `_` spellings, fstab-only words, generic options and an env. setting.
    fs::write(
        &fstab,
        format!(
            "{} {} shrinkfs noexec,noatime,_netdev,nofail,x-systemd.requires=network-online.target,memory_limit=64M,metadata-ttl=0,log_file={},codec=zstd,env.RUST_LOG=info,env.AWS_SECRET_ACCESS_KEY=not-for-ps-eyes 0 0\n",
            bucket.display(),
            mnt.display(),
            log.display()
        ),
    )
    .unwrap();
    let out = Command::new("mount").arg("-T").arg(&fstab).arg(&mnt).output().unwrap();
    assert!(out.status.success(), "mount -T: {}", String::from_utf8_lossy(&out.stderr));
    let line = mount_line(&mnt).expect("mounted");
    let fields: Vec<&str> = line.split(' ').collect();
    assert_eq!(fields[2], "fuse.shrinkfs", "{line}");
    assert!(fields[3].split(',').any(|o| o == "noexec") && fields[3].split(',').any(|o| o == "noatime"), "{line}");
    let pid = server_pid(&mnt).expect("the serving process");
    // The fstab options, credentials in env. settings among them, are not in the command line
    // every user's `ps` shows for the mount's life (the helper runs `shrinkfs mount` instead).
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let shown = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(!shown.contains("not-for-ps-eyes") && !shown.contains("env."), "{shown}");
    assert!(shown.starts_with("shrinkfs mount "), "{shown}");

    // noexec is honoured: a script on the mount is refused.
    let script = mnt.join("run.sh");
    fs::write(&script, "#!/bin/sh\necho ran\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let err = Command::new(&script).output().expect_err("executing on a noexec mount");
    assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{err}");

    // A second mount on the same directory is refused, the first one untouched.
    let out = Command::new("mount").arg("-T").arg(&fstab).arg(&mnt).output().unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("already a mount point"), "{said}");
    assert_eq!(mount_line(&mnt).as_deref(), Some(line.as_str()));
    assert!(fs::read(&script).is_ok());

    // remount,ro through mount(8) (which runs mount.fuse.shrinkfs for type fuse.shrinkfs):
    // writes fail, reads go on, noexec stays; then back to rw.
    let out = Command::new("mount").args(["-o", "remount,ro"]).arg(&mnt).output().unwrap();
    assert!(out.status.success(), "remount,ro: {}", String::from_utf8_lossy(&out.stderr));
    let ro = mount_line(&mnt).unwrap();
    assert!(ro.split(' ').nth(3).unwrap().starts_with("ro,") && ro.contains("noexec"), "{ro}");
    let e = fs::write(mnt.join("new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    assert_eq!(fs::read(&script).unwrap(), b"#!/bin/sh\necho ran\n");
    let out = Command::new("mount").args(["-o", "remount,rw"]).arg(&mnt).output().unwrap();
    assert!(out.status.success(), "remount,rw: {}", String::from_utf8_lossy(&out.stderr));
    fs::write(mnt.join("new"), b"x").unwrap();

    let out = Command::new("umount").arg(&mnt).output().unwrap();
    assert!(out.status.success(), "umount: {}", String::from_utf8_lossy(&out.stderr));
    wait_for("the mount process exits after umount", 20, || !alive(pid));
    assert!(bucket.join("run.sh").exists());
    let log = fs::read_to_string(&log).unwrap_or_default();
    assert!(!log.contains("panicked") && !log.contains('\x1b'), "no panic, no colour codes in a file: {log}");
    // env.RUST_LOG=info reached the mount: its info lines are in the log.
    assert!(log.contains("INFO") && log.contains("mounted"), "{log}");
}

#[test]
fn a_lazily_detached_mount_never_unmounts_the_mount_made_after_it() {
    require_root!();
    let t = tempfile::tempdir().unwrap();
    let (a, b, mnt) = (t.path().join("a"), t.path().join("b"), t.path().join("mnt"));
    fs::create_dir_all(&a).unwrap();
    fs::create_dir_all(&b).unwrap();
    fs::write(a.join("held"), b"A").unwrap();
    let mut first = mount(a.to_str().unwrap(), &mnt, &[], &[]);
    // A process keeps the first mount alive after `umount -l` detaches it.
    let mut holder =
        Command::new("sleep").arg("1000").stdin(fs::File::open(mnt.join("held")).unwrap()).spawn().unwrap();
    assert!(Command::new("umount").arg("-l").arg(&mnt).status().unwrap().success());
    let second = mount(b.to_str().unwrap(), &mnt, &[], &[]);
    fs::write(mnt.join("in-b"), b"B").unwrap();
    // SIGTERM to the first: its mount is detached, so it must not unmount what is at the path.
    signal(first.pid(), libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(mount_line(&mnt).is_some_and(|l| l.starts_with(b.to_str().unwrap())), "the second mount is still there");
    // Its last user goes: the first process ends by itself...
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(first.wait_exit(20), "the detached mount's process exits once unused: {}", first.log());
    std::thread::sleep(Duration::from_millis(500));
    // ...and the second mount still serves.
    assert!(mount_line(&mnt).is_some_and(|l| l.starts_with(b.to_str().unwrap())));
    assert_eq!(fs::read(mnt.join("in-b")).unwrap(), b"B");
    assert!(first.log().contains("detached"), "{}", first.log());
    second.unmount();
    assert!(b.join("in-b").exists());
}

#[test]
fn sighup_usr1_and_usr2_keep_the_mount_serving_and_are_logged() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt, log) = (t.path().join("bucket"), t.path().join("mnt"), t.path().join("mount.log"));
    fs::create_dir_all(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--log-file", log.to_str().unwrap(), "-v"], &[]);
    fs::write(mnt.join("before"), b"1").unwrap();
    // logrotate: move the file away, then SIGHUP makes the mount write to a new one.
    fs::rename(&log, t.path().join("mount.log.1")).unwrap();
    for sig in [libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2, libc::SIGUSR2] {
        signal(m.pid(), sig);
        std::thread::sleep(Duration::from_millis(300));
        assert!(mount_line(&mnt).is_some(), "still mounted after signal {sig}");
        fs::write(mnt.join(format!("after-{sig}")), b"2").unwrap();
    }
    let new_log = fs::read_to_string(&log).expect("SIGHUP reopened the log file");
    assert!(new_log.contains("SIGHUP: log file reopened"), "{new_log}");
    assert!(new_log.contains("SIGUSR1: bucket") && new_log.contains("open file(s)"), "{new_log}");
    assert!(new_log.contains("debug logging on") && new_log.contains("debug logging off"), "{new_log}");
    assert!(new_log.lines().all(|l| !l.contains('\x1b')), "no colour codes in a file");
    m.unmount();
    assert!(bucket.join("before").exists());
}

#[test]
fn a_second_sigterm_ends_a_busy_mount_keeping_every_closed_file_and_the_previous_version() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir_all(&bucket).unwrap();
    let mut m = mount(bucket.to_str().unwrap(), &mnt, &["--codec", "none"], &[]);
    let old = common::text(3 << 20);
    fs::write(mnt.join("big"), &old).unwrap();
    for i in 0..5 {
        fs::write(mnt.join(format!("closed-{i}")), format!("file {i}")).unwrap();
    }
    // A writer replaces `big` and is half way through when the signals come.
    let new = vec![b'N'; 16 << 20];
    let mut f = fs::File::create(mnt.join("big")).unwrap();
    use std::io::Write;
    f.write_all(&new[..8 << 20]).unwrap();
    signal(m.pid(), libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!m.wait_exit(0), "busy: the first SIGTERM waits for the writer");
    assert!(m.log().contains("mount busy"), "the busy unmount is reported: {}", m.log());
    signal(m.pid(), libc::SIGTERM);
    assert!(m.wait_exit(20), "a second SIGTERM ends the process: {}", m.log());
    assert_eq!(m.status.and_then(|s| s.code()), Some(1), "a forced stop exits 1, as documented");
    let _ = f.write_all(&new[8 << 20..]);
    drop(f);
    let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    // Every file closed before is intact; `big` is its previous version, whole.
    let unpack = |p: &Path| {
        let out = Command::new(bin()).arg("unpack").arg(p).arg("-").output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    for i in 0..5 {
        assert_eq!(unpack(&bucket.join(format!("closed-{i}"))), format!("file {i}").as_bytes());
    }
    assert!(unpack(&bucket.join("big")) == old, "the previous version of big stays, whole");
    assert!(m.log().contains("forcing"), "{}", m.log());
}

#[test]
fn systemd_hears_ready_only_once_the_mount_answers() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir_all(&bucket).unwrap();
    fs::create_dir_all(&mnt).unwrap();
    fs::write(bucket.join("hello"), b"world").unwrap();
    let sock_path = t.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let log = fs::File::create(t.path().join("log")).unwrap();
    let mut child = Command::new(bin())
        .arg("mount")
        .arg(&bucket)
        .arg(&mnt)
        .env("NOTIFY_SOCKET", &sock_path)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).expect("a notification within 30 s");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    // At the moment READY=1 arrives the mount answers: its files read back.
    let answered = fs::read(mnt.join("hello"));
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg}");
    assert!(msg.contains("STATUS=mounted at"), "{msg}");
    assert_eq!(answered.unwrap(), b"world");
    // SIGTERM: systemd hears STOPPING=1, then the process exits 0.
    signal(child.id() as i32, libc::SIGTERM);
    let n = sock.recv(&mut buf).expect("STOPPING notification");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"));
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(mount_line(&mnt).is_none());
}

#[test]
fn a_stop_signal_the_moment_the_mount_appears_unmounts_it_cleanly() {
    require_fuse!();
    for _ in 0..3 {
        let t = tempfile::tempdir().unwrap();
        let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
        fs::create_dir_all(&bucket).unwrap();
        fs::create_dir_all(&mnt).unwrap();
        let log = fs::File::create(t.path().join("log")).unwrap();
        let mut child =
            Command::new(bin()).arg("mount").arg(&bucket).arg(&mnt).stdout(Stdio::null()).stderr(log).spawn().unwrap();
        // As soon as the kernel lists the mount, before it may even answer (systemd stopping a
        // unit that has just started).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while mount_line(&mnt).is_none() {
            assert!(std::time::Instant::now() < deadline, "no mount within 30 s");
            std::thread::yield_now();
        }
        signal(child.id() as i32, libc::SIGTERM);
        let status = child.wait().unwrap();
        let log = fs::read_to_string(t.path().join("log")).unwrap();
        assert!(status.success(), "{status}: the signal did not kill the mount half made\n{log}");
        assert!(mount_line(&mnt).is_none(), "no dead mount is left behind\n{log}");
    }
}

/// Runs shrinkfs with `args` and returns its exit code and stderr.
fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(bin()).args(args).stdin(Stdio::null()).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn every_mount_failure_exits_with_its_documented_code_and_one_line() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir_all(&bucket).unwrap();
    fs::create_dir_all(&mnt).unwrap();
    let (b, m) = (bucket.to_str().unwrap(), mnt.to_str().unwrap());
    let missing = t.path().join("missing");
    // A port where nothing listens: connections are refused at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let endpoint = format!("http://{closed}");
    let file = t.path().join("file");
    fs::write(&file, b"x").unwrap();
    // S3 credentials from flags (none are in the environment of a test, and without any the
    // instance metadata service would be asked); a profile without any for the credentials case.
    let creds = t.path().join("credentials");
    fs::write(&creds, "[t]\naws_access_key_id = x\naws_secret_access_key = y\n[empty]\nregion = eu-west-1\n").unwrap();
    let creds = creds.to_str().unwrap();
    // The mount point reached through a symbolic link, for paths inside it.
    let link = t.path().join("link");
    std::os::unix::fs::symlink(&mnt, &link).unwrap();
    let (log_inside, staging_inside) = (link.join("shrinkfs.log"), link.join("staging"));
    // A directory inside the bucket (a mount there would list itself).
    let in_bucket = bucket.join("mnt");
    fs::create_dir_all(&in_bucket).unwrap();
    let cases: Vec<(&str, Vec<&str>, i32, &str)> = vec![
        ("a bad flag", vec!["mount", b, m, "--threads", "0"], 2, "--threads"),
        (
            "a log file inside the mount point",
            vec!["mount", b, m, "--log-file", log_inside.to_str().unwrap()],
            2,
            "is inside the mount point",
        ),
        (
            "a staging directory inside the mount point",
            vec!["mount", b, m, "--staging-dir", staging_inside.to_str().unwrap()],
            2,
            "is inside the mount point",
        ),
        (
            "a cache directory inside the mount point",
            vec!["mount", b, m, "--cache-dir", staging_inside.to_str().unwrap()],
            2,
            "is inside the mount point",
        ),
        (
            "a mount point inside the bucket directory",
            vec!["mount", b, in_bucket.to_str().unwrap()],
            2,
            "is inside the bucket directory",
        ),
        (
            "a cache directory inside the bucket directory",
            vec!["mount", b, m, "--cache-dir", in_bucket.to_str().unwrap()],
            2,
            "is inside the bucket directory",
        ),
        ("an unknown -o word", vec!["mount", b, m, "-o", "colour"], 2, "not a generic mount option"),
        ("a mount point that is a file", vec!["mount", b, file.to_str().unwrap()], 2, "not a directory"),
        (
            "a cache directory that is a file",
            vec!["mount", b, m, "--cache-dir", file.to_str().unwrap()],
            2,
            "not a directory",
        ),
        ("a missing mount point", vec!["mount", b, missing.to_str().unwrap()], 3, "missing"),
        ("a missing bucket directory", vec!["mount", missing.to_str().unwrap(), m], 3, "bucket directory"),
        (
            "an endpoint that refuses connections",
            vec![
                "mount",
                "s3://bucket",
                m,
                "--endpoint-url",
                &endpoint,
                "--retry-timeout",
                "1",
                "--credentials-file",
                creds,
                "--profile",
                "t",
            ],
            3,
            "s3://bucket",
        ),
        (
            "no usable S3 credentials",
            vec![
                "mount",
                "s3://bucket",
                m,
                "--endpoint-url",
                &endpoint,
                "--credentials-file",
                creds,
                "--profile",
                "empty",
            ],
            2,
            "no usable AWS credentials",
        ),
        ("unmount of what is not mounted", vec!["unmount", m], 2, "no shrinkfs mount"),
    ];
    for (what, args, code, says) in cases {
        let (got, err) = run(&args);
        assert_eq!(got, Some(code), "{what}: {err}");
        assert!(err.contains(says), "{what}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{what}: one line: {err}");
    }
    // A bucket directory on a read-only filesystem: 3 for a read-write mount, which --read-only
    // mounts.
    let ro = t.path().join("ro");
    fs::create_dir_all(&ro).unwrap();
    let r = ro.to_str().unwrap();
    if Command::new("mount").args(["-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", r]).status().unwrap().success() {
        let (got, err) = run(&["mount", r, m, "--daemon"]);
        if got == Some(0) {
            run(&["unmount", m]);
            Command::new("umount").args(["-l", r]).status().unwrap();
        }
        assert_eq!(got, Some(3), "{err}");
        assert!(err.contains("cannot be written (mount it with --read-only)"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        // A cache directory there: 3 too (it would keep nothing, silently).
        let (got, err) = run(&["mount", b, m, "--cache-dir", r]);
        assert_eq!(got, Some(3), "{err}");
        assert!(err.contains("cache directory") && err.contains("is not writable"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        let (got, err) = run(&["mount", r, m, "--read-only", "--daemon"]);
        assert_eq!(got, Some(0), "{err}");
        assert_eq!(run(&["unmount", m]).0, Some(0));
        // Lazily: the mount's process may still hold the directory for a moment after it unmounted.
        assert!(Command::new("umount").args(["-l", r]).status().unwrap().success());
    } else {
        println!("SKIPPED the read-only bucket case: cannot mount a tmpfs here");
    }
    // --daemon: the same error once, from the waiting parent, with the same code.
    let (got, err) = run(&["mount", missing.to_str().unwrap(), m, "--daemon"]);
    assert_eq!(got, Some(3), "{err}");
    assert_eq!(err.matches("bucket directory").count(), 1, "printed once: {err}");
    // A mount point already mounted: 2; `shrinkfs unmount` of a non-shrinkfs mount: 2.
    let first = mount(b, &mnt, &[], &[]);
    let (got, err) = run(&["mount", b, m]);
    assert_eq!(got, Some(2), "{err}");
    assert!(err.contains("already a mount point"), "{err}");
    first.unmount();
    // Success: 0 (mounted as a daemon, unmounted by `shrinkfs unmount`).
    let (got, err) = run(&["mount", b, m, "--daemon"]);
    assert_eq!(got, Some(0), "{err}");
    let (got, err) = run(&["unmount", m]);
    assert_eq!(got, Some(0), "{err}");
}

#[test]
fn the_shipped_units_pass_systemd_analyze_verify() {
    let Some(analyze) = common::which("systemd-analyze") else {
        eprintln!("skipped: no systemd-analyze (scripts/setup.sh --test installs systemd)");
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging");
    // The template as an instance, pointing at the binary under test (verify checks that
    // ExecStart is executable).
    let unit = fs::read_to_string(root.join("shrinkfs-mount@.service")).unwrap();
    assert!(unit.contains("Type=notify") && unit.contains("ExecStart=/usr/bin/shrinkfs mount"), "{unit}");
    let service = t.path().join("shrinkfs-mount@mnt-data.service");
    fs::write(&service, unit.replace("/usr/bin/shrinkfs", bin().to_str().unwrap())).unwrap();
    let mount_unit = t.path().join("mnt-data.mount");
    fs::copy(root.join("mnt-data.mount"), &mount_unit).unwrap();
    let out = Command::new(analyze).args(["verify", "--man=no"]).arg(&service).arg(&mount_unit).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");
}

#[test]
fn a_daemon_works_in_the_root_directory_and_keeps_no_descriptor_of_its_caller() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir_all(&bucket).unwrap();
    fs::create_dir_all(&mnt).unwrap();
    // A descriptor the caller lets its children inherit (no close-on-exec), e.g. a lock file.
    let inherited = t.path().join("caller-lock");
    let f = fs::File::create(&inherited).unwrap();
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    let mut cmd = Command::new(bin());
    // A relative bucket path: resolved before the daemon leaves the caller's directory.
    cmd.current_dir(t.path()).args(["mount", "bucket"]).arg(&mnt).arg("--daemon");
    use std::os::unix::process::CommandExt;
    // SAFETY: only fcntl between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::fcntl(fd, libc::F_SETFD, 0);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pid = server_pid(&mnt).expect("the daemon");
    assert_eq!(fs::read_link(format!("/proc/{pid}/cwd")).unwrap(), Path::new("/"));
    let fds: Vec<PathBuf> = fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| fs::read_link(e.path()).ok())
        .collect();
    assert!(!fds.contains(&inherited), "the caller's descriptor was closed: {fds:?}");
    fs::write(mnt.join("x"), b"1").unwrap();
    assert!(bucket.join("x").exists(), "the relative bucket path was resolved before detaching");
    let (code, err) = run(&["unmount", mnt.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    wait_for("the daemon exits", 20, || !alive(pid));
    drop(f);
}

#[test]
fn a_failed_operation_is_logged_on_one_line_naming_the_file_and_its_key() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt, log) = (t.path().join("bucket"), t.path().join("mnt"), t.path().join("mount.log"));
    fs::create_dir_all(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--log-file", log.to_str().unwrap()], &[]);
    fs::create_dir(mnt.join("dir")).unwrap();
    fs::write(mnt.join("dir/good"), common::text(3 << 20)).unwrap();
    m.unmount();
    // Damage the stored object: a frame's bytes change, its checksum no longer matches.
    let mut stored = fs::read(bucket.join("dir/good")).unwrap();
    stored[100] ^= 0xff;
    fs::write(bucket.join("dir/bad"), &stored).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--log-file", log.to_str().unwrap()], &[]);
    let e = fs::read(mnt.join("dir/bad")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    // A lookup of a missing name is expected: not logged at the default level.
    assert!(fs::metadata(mnt.join("dir/missing")).is_err());
    m.unmount();
    let said = fs::read_to_string(&log).unwrap();
    let line = said.lines().find(|l| l.contains("corrupt")).unwrap_or_else(|| panic!("{said}"));
    assert!(line.contains("path=/dir/bad") && line.contains("key=dir/bad") && line.contains("op=\"read\""), "{line}");
    assert!(!said.contains("missing"), "{said}");
}

#[test]
fn a_mount_after_a_crash_clears_the_dead_mount_and_serves_again() {
    require_root!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir_all(&bucket).unwrap();
    let mut m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    fs::write(mnt.join("kept"), b"closed before the crash").unwrap();
    // SIGKILL: the kernel keeps a dead mount ("Transport endpoint is not connected").
    signal(m.pid(), libc::SIGKILL);
    assert!(m.wait_exit(10));
    let e = fs::metadata(&mnt).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTCONN), "{e}");
    // What systemd's Restart= does: mount again at the same place (mkdir -p fails there, so
    // the unit ignores it; the mount itself must cope).
    assert!(fs::create_dir_all(&mnt).is_err());
    let log = t.path().join("again.log");
    let (code, err) = run(&[
        "mount",
        bucket.to_str().unwrap(),
        mnt.to_str().unwrap(),
        "--daemon",
        "--log-file",
        log.to_str().unwrap(),
        "-v",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(fs::read(mnt.join("kept")).unwrap(), b"closed before the crash");
    let lines = fs::read_to_string("/proc/mounts").unwrap();
    assert_eq!(lines.lines().filter(|l| l.split(' ').nth(1) == mnt.to_str()).count(), 1, "the dead mount is gone");
    let said = fs::read_to_string(&log).unwrap();
    assert!(said.contains("clearing a dead FUSE mount"), "{said}");
    let pid = server_pid(&mnt).unwrap();
    let (code, err) = run(&["unmount", mnt.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    wait_for("the mount process exits", 20, || !alive(pid));
}

#[test]
fn an_fstab_mount_of_an_s3_bucket_finds_its_credentials_in_a_profile_file_without_home() {
    require_root!();
    install_helpers();
    let t = tempfile::tempdir().unwrap();
    fs::create_dir_all(t.path().join("s3root/bkt")).unwrap();
    let Some(server) = common::s3_server(&t.path().join("s3root")) else {
        eprintln!("skipped: no rclone for a local S3 server (scripts/setup.sh --test installs it)");
        return;
    };
    let (mnt, log, creds) = (t.path().join("mnt"), t.path().join("log"), t.path().join("aws-credentials"));
    fs::create_dir_all(&mnt).unwrap();
    fs::write(
        &creds,
        format!(
            "[boot]\naws_access_key_id = {}\naws_secret_access_key = {}\nregion = us-east-1\n",
            common::S3_KEY.0,
            common::S3_KEY.1
        ),
    )
    .unwrap();
    let fstab = t.path().join("fstab");
    fs::write(
        &fstab,
        format!(
            "s3://bkt/data {} shrinkfs endpoint_url={},credentials-file={},profile=boot,metadata_ttl=0,log-file={},_netdev,nofail 0 0\n",
            mnt.display(),
            server.endpoint,
            creds.display(),
            log.display()
        ),
    )
    .unwrap();
    // As at boot: no HOME, no PATH, no AWS_* variables (and no instance metadata to fall back on).
    let out = Command::new("/bin/mount")
        .arg("-T")
        .arg(&fstab)
        .arg(&mnt)
        .env_clear()
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mount: {}{}",
        String::from_utf8_lossy(&out.stderr),
        fs::read_to_string(&log).unwrap_or_default()
    );
    let pid = server_pid(&mnt).expect("the serving process");
    let data = common::text(12 << 20);
    fs::write(mnt.join("file"), &data).unwrap();
    assert!(fs::read(mnt.join("file")).unwrap() == data);
    let out = Command::new("umount").arg(&mnt).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_for("the mount process exits", 20, || !alive(pid));
    // The object is in the bucket under the prefix.
    assert!(t.path().join("s3root/bkt/data/file").exists());
    let said = fs::read_to_string(&log).unwrap_or_default();
    assert!(!said.contains(common::S3_KEY.1), "no secret in the log");
}

/// Each thread of `pid`: its name and nice value (field 19 of its stat line).
fn threads_and_nice(pid: u32) -> Vec<(String, i32)> {
    let mut threads = Vec::new();
    for task in fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let Ok(stat) = fs::read_to_string(task.path().join("stat")) else { continue };
        let name = fs::read_to_string(task.path().join("comm")).unwrap_or_default().trim().to_string();
        // After the command's closing parenthesis: state is field 3, nice field 19.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        threads.push((name, rest.split(' ').nth(16).unwrap().parse().unwrap()));
    }
    threads
}

#[test]
fn the_request_threads_run_at_the_priority_asked_for_and_every_other_thread_at_the_processs() {
    require_root!();
    let t = tempfile::tempdir().unwrap();
    let bucket = t.path().join("bucket");
    fs::create_dir_all(&bucket).unwrap();
    // SAFETY: getpriority has no memory effects. (Relative to this process's own nice value.)
    let own = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    // Whether a thread here may raise its priority (CAP_SYS_NICE, which root lacks in many
    // containers, or RLIMIT_NICE): tried on a thread of its own, which then ends.
    // SAFETY: setpriority of the calling thread only.
    let may_raise =
        std::thread::spawn(move || unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, own - 1) } == 0).join().unwrap();
    for (asked, by) in [(None, -10), (Some("-5"), -5), (Some("0"), 0)] {
        let expected = if may_raise { (own + by).clamp(-20, 19) } else { own };
        let mnt = t.path().join(format!("mnt{by}"));
        let mut extra = vec!["--threads", "3", "--gpu", "off"];
        if let Some(n) = asked {
            extra.extend(["--request-nice", n]);
        }
        let m = mount(bucket.to_str().unwrap(), &mnt, &extra, &[]);
        // Work that starts the CPU workers and grows the runtime's blocking pool from the
        // request threads: a file of several frames, written, read back and removed.
        let data = common::text(40 << 20); // (enough that the runtime's blocking pool grows)
        fs::write(mnt.join(format!("f{by}")), &data).unwrap();
        assert_eq!(fs::read(mnt.join(format!("f{by}"))).unwrap(), data);
        fs::remove_file(mnt.join(format!("f{by}"))).unwrap();
        let threads = threads_and_nice(m.pid() as u32);
        let requests: Vec<i32> = threads.iter().filter(|(n, _)| n.starts_with("fuser-")).map(|t| t.1).collect();
        assert_eq!(requests, vec![expected; 3], "{asked:?}");
        assert!(threads.iter().any(|(n, _)| n.starts_with("shrinkfs-cpu-")), "{threads:?}");
        // (The session's own thread, which started the request threads, only waits for them.)
        let others: Vec<_> = threads.iter().filter(|(n, _)| !n.starts_with("fuser-") && n != "fuse-session").collect();
        assert!(others.iter().all(|t| t.1 == own), "every other thread at the process's {own}: {others:?}");
        m.unmount();
    }
}

/// Two mounts started at the same moment on one mount point: one mounts, the other is refused
/// (exit 2), never both stacked there. Found by a black-box probe: the check of the mount point
/// and the mount were apart, and both passed the check within a few tries.
#[test]
fn two_mounts_started_at_once_on_one_mount_point_are_never_stacked() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (b1, b2, mnt) = (t.path().join("b1"), t.path().join("b2"), t.path().join("mnt"));
    for d in [&b1, &b2, &mnt] {
        fs::create_dir_all(d).unwrap();
    }
    let mounted_here = || {
        let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
        mounts.lines().filter(|l| l.split(' ').nth(1) == Some(mnt.to_str().unwrap())).count()
    };
    for round in 0..10 {
        let start = |b: &Path| {
            Command::new(bin())
                .args(["mount", b.to_str().unwrap(), mnt.to_str().unwrap(), "--daemon"])
                .env("SHRINKFS_CONFIG", "")
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (first, second) = (start(&b1), start(&b2));
        let (o1, o2) = (first.wait_with_output().unwrap(), second.wait_with_output().unwrap());
        let codes = [o1.status.code(), o2.status.code()];
        let stacked = mounted_here();
        for _ in 0..10 {
            if mounted_here() == 0 {
                break;
            }
            let _ = run(&["unmount", mnt.to_str().unwrap()]);
        }
        if mounted_here() > 0 {
            let _ = Command::new("umount").arg("-l").arg(&mnt).status();
            let _ = Command::new("umount").arg("-l").arg(&mnt).status();
        }
        assert_eq!(stacked, 1, "round {round}: {stacked} mounts at the mount point, exits {codes:?}");
        assert!(codes.contains(&Some(0)) && codes.contains(&Some(2)), "round {round}: exits {codes:?}");
    }
}
