//! Real mounts through /dev/fuse, on a local directory and on a local S3-compatible server: every
//! operation of docs/SEMANTICS.md, a remount, and `shrinkfs unpack` of what was stored.

mod common;

use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::{Mounted, metric, mount, mount_unavailable, mount_with_metrics, s3_server, scrape, text};

macro_rules! require_fuse {
    () => {
        if let Some(why) = mount_unavailable() {
            println!("SKIPPED: real mount not possible here: {why}");
            return;
        }
    };
}

fn unpack(object: &Path) -> Vec<u8> {
    let out = Command::new(common::bin()).args(["unpack", object.to_str().unwrap(), "-"]).output().unwrap();
    assert!(out.status.success(), "unpack: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// Runs every supported operation under `m`; `backing` is where the bucket's objects are files.
/// Names with characters object_store percent-encodes in the keys it builds itself.
const ODD_NAMES: [&str; 5] = ["notes~", "a [1].txt", "x#1", "50%", "q?*{}"];

fn exercise(m: &Path, backing: &Path) {
    // Odd names are keys as they are: the bucket shows them so, and so does a listing.
    fs::create_dir(m.join("odd~")).unwrap();
    for name in ODD_NAMES {
        fs::write(m.join("odd~").join(name), name).unwrap();
        assert!(backing.join("odd~").join(name).is_file(), "{name:?} stored under its own name");
    }
    let mut listed: Vec<String> =
        fs::read_dir(m.join("odd~")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    listed.sort();
    let mut want = ODD_NAMES.map(String::from).to_vec();
    want.sort();
    assert_eq!(listed, want);
    // create, write, read, stat with the logical size
    let small = b"hello shrinkfs\n";
    fs::write(m.join("small.txt"), small).unwrap();
    assert_eq!(fs::read(m.join("small.txt")).unwrap(), small);
    assert_eq!(fs::metadata(m.join("small.txt")).unwrap().len(), small.len() as u64);

    // a larger compressible file: stored smaller, readable through unpack
    let big = text(5 << 20);
    fs::write(m.join("big.log"), &big).unwrap();
    assert!(fs::read(m.join("big.log")).unwrap() == big);
    let stored = fs::metadata(backing.join("big.log")).unwrap().len();
    assert!(stored < big.len() as u64 / 3, "stored {stored} of {}", big.len());
    assert!(unpack(&backing.join("big.log")) == big);
    // du sees the stored size
    assert!(fs::metadata(m.join("big.log")).unwrap().blocks() * 512 < big.len() as u64 / 2);

    // writes at random offsets in an existing file, and read-your-writes
    let mut model = big[..100_000].to_vec();
    fs::write(m.join("rw.bin"), &model).unwrap();
    {
        let f = OpenOptions::new().read(true).write(true).open(m.join("rw.bin")).unwrap();
        for (off, byte) in [(5000u64, b'A'), (99_999, b'B'), (120_000, b'C'), (0, b'D')] {
            f.write_all_at(&[byte; 10], off).unwrap();
            let end = off as usize + 10;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].fill(byte);
        }
        let mut back = vec![0u8; 10];
        f.read_exact_at(&mut back, 5000).unwrap();
        assert_eq!(back, [b'A'; 10]);
        f.sync_all().unwrap();
        // fsync: the object is complete in the bucket before close
        assert!(unpack(&backing.join("rw.bin")) == model);
    }
    assert!(fs::read(m.join("rw.bin")).unwrap() == model);

    // append
    for i in 0..20 {
        let mut f = OpenOptions::new().append(true).create(true).open(m.join("app.log")).unwrap();
        writeln!(f, "line {i}").unwrap();
    }
    let log = fs::read_to_string(m.join("app.log")).unwrap();
    assert_eq!(log.lines().count(), 20);
    assert!(log.ends_with("line 19\n"));

    // truncate down and up
    let f = OpenOptions::new().write(true).open(m.join("rw.bin")).unwrap();
    f.set_len(1000).unwrap();
    drop(f);
    assert_eq!(fs::read(m.join("rw.bin")).unwrap(), model[..1000]);
    OpenOptions::new().write(true).open(m.join("rw.bin")).unwrap().set_len(3000).unwrap();
    let r = fs::read(m.join("rw.bin")).unwrap();
    assert_eq!((r.len(), &r[..1000], r[2999]), (3000, &model[..1000], 0));

    // directories
    fs::create_dir(m.join("d")).unwrap();
    fs::create_dir(m.join("d/sub")).unwrap();
    fs::write(m.join("d/sub/f1"), b"1").unwrap();
    fs::write(m.join("d/f2"), b"22").unwrap();
    fs::create_dir(m.join("empty")).unwrap();
    assert_eq!(errno_of(&fs::create_dir(m.join("d")).unwrap_err()), libc::EEXIST);
    let mut names: Vec<String> =
        fs::read_dir(m.join("d")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["f2", "sub"]);
    assert_eq!(errno_of(&fs::remove_dir(m.join("d")).unwrap_err()), libc::ENOTEMPTY);

    // renames: a file, then a directory with contents
    fs::rename(m.join("d/f2"), m.join("d/f2-renamed")).unwrap();
    fs::rename(m.join("d"), m.join("moved")).unwrap();
    assert!(!m.join("d").exists());
    assert_eq!(fs::read(m.join("moved/f2-renamed")).unwrap(), b"22");
    assert_eq!(fs::read(m.join("moved/sub/f1")).unwrap(), b"1");

    // symlinks
    std::os::unix::fs::symlink("moved/sub/f1", m.join("link")).unwrap();
    assert_eq!(fs::read_link(m.join("link")).unwrap(), Path::new("moved/sub/f1"));
    assert_eq!(fs::read(m.join("link")).unwrap(), b"1");
    assert!(fs::symlink_metadata(m.join("link")).unwrap().file_type().is_symlink());

    // chmod, chown, utimens
    fs::set_permissions(m.join("small.txt"), fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(m.join("small.txt"), Some(1234), Some(5678)).unwrap();
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
    fs::File::options().write(true).open(m.join("small.txt")).unwrap().set_modified(when).unwrap();
    let md = fs::metadata(m.join("small.txt")).unwrap();
    assert_eq!((md.mode() & 0o7777, md.uid(), md.gid()), (0o600, 1234, 5678));
    assert_eq!(md.modified().unwrap(), when);
    assert_eq!(fs::read(m.join("small.txt")).unwrap(), small, "metadata changes keep the bytes");

    // extended attributes
    let path = CString::new(m.join("big.log").to_str().unwrap()).unwrap();
    let name = CString::new("user.shrinkfs.codec").unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: valid C strings and buffer.
    let n = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n > 0, "getxattr: {}", std::io::Error::last_os_error());
    assert_eq!(&buf[..n as usize], b"zstd");

    // statfs
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let mp = CString::new(m.to_str().unwrap()).unwrap();
    // SAFETY: valid path and out-pointer.
    assert_eq!(unsafe { libc::statvfs(mp.as_ptr(), &mut st) }, 0);
    assert!(st.f_bavail > 0);

    // mmap for reading
    {
        let f = fs::File::open(m.join("big.log")).unwrap();
        use std::os::fd::AsRawFd;
        let len = big.len();
        // SAFETY: mapping a file we hold open, read-only, for its whole length.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, f.as_raw_fd(), 0) };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: p maps len readable bytes.
        let mapped = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
        assert!(mapped == big.as_slice());
        // SAFETY: unmapping what we mapped.
        unsafe { libc::munmap(p, len) };
    }

    // unsupported: hard links
    assert_eq!(errno_of(&fs::hard_link(m.join("small.txt"), m.join("hard")).unwrap_err()), libc::EPERM);
    // unsupported: O_TMPFILE (callers fall back to a named file)
    let tmpfile = OpenOptions::new().read(true).write(true).custom_flags(libc::O_TMPFILE).open(m);
    assert_eq!(errno_of(&tmpfile.unwrap_err()), libc::EOPNOTSUPP);

    // unlink and rmdir
    fs::remove_file(m.join("moved/sub/f1")).unwrap();
    assert_eq!(fs::metadata(m.join("moved/sub/f1")).unwrap_err().kind(), ErrorKind::NotFound);
    fs::remove_dir(m.join("empty")).unwrap();
    assert!(!m.join("empty").exists());
}

/// After a remount, what `exercise` left is still there.
fn verify_after_remount(m: &Path) {
    for name in ODD_NAMES {
        assert_eq!(fs::read_to_string(m.join("odd~").join(name)).unwrap(), name);
    }
    assert!(fs::read(m.join("big.log")).unwrap() == text(5 << 20));
    let md = fs::metadata(m.join("small.txt")).unwrap();
    assert_eq!((md.mode() & 0o7777, md.uid(), md.len()), (0o600, 1234, 15));
    assert_eq!(fs::read_to_string(m.join("app.log")).unwrap().lines().count(), 20);
    assert_eq!(fs::read(m.join("moved/f2-renamed")).unwrap(), b"22");
    assert_eq!(fs::read_link(m.join("link")).unwrap(), Path::new("moved/sub/f1"));
}

#[test]
fn every_operation_on_a_local_directory_bucket() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    exercise(&mnt, &bucket);
    m.unmount();
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    verify_after_remount(&mnt);
    m.unmount();
}

/// A local S3 server over a directory in `t`, with an empty bucket `bkt` whose objects are files
/// under the directory returned; None, having said why, where no server can run here.
fn s3_bucket(t: &Path) -> Option<(common::S3Server, PathBuf)> {
    let root = t.join("s3root");
    fs::create_dir_all(root.join("bkt")).unwrap();
    let server = s3_server(&root);
    if server.is_none() {
        println!("SKIPPED: no rclone for a local S3 server (scripts/setup.sh --test installs it)");
    }
    Some((server?, root.join("bkt")))
}

#[test]
fn every_operation_on_an_s3_compatible_server() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let Some((server, bkt)) = s3_bucket(t.path()) else { return };
    let mnt = t.path().join("mnt");
    let env = server.env();
    let args = ["--endpoint-url", server.endpoint.as_str()];
    let m = mount("s3://bkt", &mnt, &args, &env);
    exercise(&mnt, &bkt);
    m.unmount();
    // pack / unpack / inspect on object URLs, without a mount
    let cli = |a: &[&str]| Command::new(common::bin()).args(a).args(args).envs(env.iter().copied()).output().unwrap();
    let o = cli(&["inspect", "--json", "s3://bkt/big.log"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["format"].as_str(), v["logical_size"].as_u64()), (Some("shrinkfs"), Some(5 << 20)));
    let o = cli(&["unpack", "s3://bkt/big.log", "-"]);
    assert!(o.status.success() && o.stdout == text(5 << 20));
    let local = t.path().join("local.txt");
    fs::write(&local, text(300_000)).unwrap();
    let o = cli(&["pack", local.to_str().unwrap(), "s3://bkt/packed.txt"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = mount("s3://bkt", &mnt, &args, &env);
    verify_after_remount(&mnt);
    assert!(fs::read(mnt.join("packed.txt")).unwrap() == text(300_000));
    m.unmount();
}

/// Deletes behind unlinks (`--deletes-behind`) on an S3 server (paged listings): rmdir of a
/// directory that deletes still running emptied, a name written again right after its unlink, and
/// what the bucket holds once the mount is gone.
#[test]
fn removed_files_stay_removed_on_an_s3_compatible_server() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let Some((server, bkt)) = s3_bucket(t.path()) else { return };
    let mnt = t.path().join("mnt");
    let env = server.env();
    let args = ["--endpoint-url", server.endpoint.as_str(), "--deletes-behind", "64"];
    let m = mount("s3://bkt", &mnt, &args, &env);
    // The mount's first delete runs inside its unlink; the ones below are queued.
    fs::write(mnt.join("first"), "x").unwrap();
    fs::remove_file(mnt.join("first")).unwrap();
    let d = mnt.join("d");
    fs::create_dir(&d).unwrap();
    let name = |k: usize| d.join(format!("f{k:02}"));
    for k in 0..50 {
        fs::write(name(k), format!("file {k}")).unwrap();
    }
    for k in 0..49 {
        fs::remove_file(name(k)).unwrap();
    }
    let e = fs::remove_dir(&d).unwrap_err();
    assert_eq!(errno_of(&e), libc::ENOTEMPTY, "f49 is still there: {e}");
    fs::write(name(0), "again").unwrap();
    assert_eq!(fs::read_dir(&d).unwrap().count(), 2);
    fs::remove_file(name(49)).unwrap();
    fs::remove_file(name(0)).unwrap();
    fs::remove_dir(&d).unwrap();
    fs::write(mnt.join("kept"), "first").unwrap();
    fs::remove_file(mnt.join("kept")).unwrap();
    fs::write(mnt.join("kept"), "second").unwrap();
    m.unmount();
    // Left: the file written last, and the root directory's marker (its times).
    let root_marker = bkt.join(shrinkfs_fuse::fs::DIR_MARKER);
    let left: Vec<_> = walk(&bkt).into_iter().filter(|p| !p.ends_with("kept") && *p != root_marker).collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(unpack(&bkt.join("kept")), b"second");
}

/// Every file under `dir`, recursively.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn an_s3_mount_takes_credentials_and_s3_options_from_its_flags() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let Some((server, bkt)) = s3_bucket(t.path()) else { return };
    // Keys only in a profile file the flags name (what an fstab line gives a boot-time mount).
    let creds = t.path().join("credentials");
    fs::write(
        &creds,
        format!("[store]\naws_access_key_id={}\naws_secret_access_key={}\n", common::S3_KEY.0, common::S3_KEY.1),
    )
    .unwrap();
    let mnt = t.path().join("mnt");
    let args = [
        "--endpoint-url",
        server.endpoint.as_str(),
        "--credentials-file",
        creds.to_str().unwrap(),
        "--profile",
        "store",
        "--storage-class",
        "STANDARD_IA",
        "--retries",
        "5",
    ];
    let m = mount("s3://bkt/pre", &mnt, &args, &[("AWS_EC2_METADATA_DISABLED", "true")]);
    // Incompressible and large: a multipart upload, which a storage class starts through the store.
    let big = shrinkfs::corpus::generate(shrinkfs::corpus::CorpusKind::Random, 20 << 20, 5);
    fs::write(mnt.join("big.log"), &big).unwrap();
    fs::write(mnt.join("small.txt"), b"small").unwrap();
    m.unmount();
    assert!(unpack(&bkt.join("pre/big.log")) == big);
    let m = mount("s3://bkt/pre", &mnt, &args, &[("AWS_EC2_METADATA_DISABLED", "true")]);
    assert!(fs::read(mnt.join("big.log")).unwrap() == big);
    assert_eq!(fs::read(mnt.join("small.txt")).unwrap(), b"small");
    m.unmount();
}

#[test]
fn sealed_mounts_store_no_plaintext_and_need_the_key() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt, key) = (t.path().join("bucket"), t.path().join("mnt"), t.path().join("key"));
    fs::create_dir(&bucket).unwrap();
    fs::write(&key, [3u8; 32]).unwrap();
    let key_arg = format!("--key-file={}", key.display());
    let m = mount(bucket.to_str().unwrap(), &mnt, &[&key_arg], &[]);
    fs::write(mnt.join("secret.txt"), b"the launch code is 0000").unwrap();
    assert_eq!(fs::read(mnt.join("secret.txt")).unwrap(), b"the launch code is 0000");
    m.unmount();
    let raw = fs::read(bucket.join("secret.txt")).unwrap();
    assert!(!raw.windows(11).any(|w| w == b"launch code"));
    // Without the key the mount is refused, before it could write unsealed files beside sealed ones.
    let o = Command::new(common::bin()).args(["mount", bucket.to_str().unwrap(), mnt.to_str().unwrap()]).output();
    let o = o.unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("pass --key-file"));
    // Told to skip the check, it mounts, and serves nothing sealed.
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--skip-key-check"], &[]);
    let e = fs::read(mnt.join("secret.txt")).unwrap_err();
    assert_eq!(errno_of(&e), libc::EACCES, "{e}");
    m.unmount();
}

#[test]
fn bad_sources_fail_before_mounting_with_one_line() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let mnt = t.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let run = |args: &[&str]| Command::new(common::bin()).args(args).output().unwrap();
    let o = run(&["mount", "/nonexistent/bucket", mnt.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/nonexistent/bucket") && err.lines().count() == 1, "{err}");
    let o = run(&["mount", t.path().to_str().unwrap(), "/nonexistent/mnt"]);
    assert!(!o.status.success());
    // An endpoint nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let o = Command::new(common::bin())
        .args(["mount", "s3://b", mnt.to_str().unwrap(), "--endpoint-url", &format!("http://127.0.0.1:{port}")])
        .envs([("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "y")])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("shrinkfs: error:"));
    // Memory settings that cannot work are usage errors, named.
    let src = t.path().to_str().unwrap();
    for (args, says) in [
        (vec!["--memory-limit", "1M"], "'--memory-limit <MEMORY_LIMIT>': must be a size from 32M"),
        (vec!["--memory-limit", "64M", "--memory-cache-size", "40M"], "at most half of --memory-limit"),
    ] {
        let o = run(&[&["mount", src, mnt.to_str().unwrap()][..], &args].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(says) && err.lines().count() == 1, "{err}");
    }
    assert!(!std::fs::read_to_string("/proc/mounts").unwrap().contains(mnt.to_str().unwrap()));
}

#[test]
fn real_programs_copy_trees_extract_tars_run_a_database_and_append_logs() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("codec");
    let sh = |script: &str| {
        let o = Command::new("sh").arg("-c").arg(script).current_dir(&mnt).output().unwrap();
        assert!(
            o.status.success(),
            "{script}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    // cp -r and diff -r
    sh(&format!("cp -r {} tree && diff -r {} tree", src.join("src").display(), src.join("src").display()));
    // tar extraction
    let tarball = t.path().join("codec.tar");
    let o = Command::new("tar")
        .arg("-cf")
        .arg(&tarball)
        .arg("-C")
        .arg(&src)
        .args(["src", "tests", "Cargo.toml"])
        .output()
        .unwrap();
    assert!(o.status.success());
    sh(&format!(
        "mkdir x && tar -xf {} -C x && diff -r {} x/src && diff -r {} x/tests",
        tarball.display(),
        src.join("src").display(),
        src.join("tests").display()
    ));
    // a database that writes at random offsets and fsyncs
    if common::which("sqlite3").is_some() {
        let out = sh("sqlite3 app.db 'create table t(id integer primary key, v text); \
            with recursive c(x) as (select 1 union all select x+1 from c where x < 5000) insert into t(v) select printf(\"row %d payload payload payload\", x) from c; \
            update t set v = \"changed\" where id % 7 = 0; delete from t where id % 11 = 0; select count(*), sum(length(v)) from t;'");
        let expected = sh("sqlite3 :memory: 'create table t(id integer primary key, v text); \
            with recursive c(x) as (select 1 union all select x+1 from c where x < 5000) insert into t(v) select printf(\"row %d payload payload payload\", x) from c; \
            update t set v = \"changed\" where id % 7 = 0; delete from t where id % 11 = 0; select count(*), sum(length(v)) from t;'");
        assert_eq!(out, expected);
        assert_eq!(sh("sqlite3 app.db 'pragma integrity_check;'").trim(), "ok");
    } else {
        println!("SKIPPED: sqlite3 not installed; the database part did not run");
    }
    // appending logs from a shell loop
    sh("i=0; while [ $i -lt 300 ]; do echo \"$(date +%s) event $i\" >> service.log; i=$((i+1)); done");
    assert_eq!(sh("wc -l < service.log").trim(), "300");
    m.unmount();
    // All of it survives a remount.
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    sh(&format!("diff -r {} tree", src.join("src").display()));
    assert_eq!(sh("wc -l < service.log").trim(), "300");
    let mut f = fs::File::open(mnt.join("service.log")).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert!(s.contains("event 299"));
    drop(f);
    m.unmount();
}

#[test]
fn directories_another_program_made_in_a_local_bucket_are_removed_and_moved_as_made_here() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    for d in ["e1", "e2/y/z", "e3/sub", "e4", "rq/.shrinkfs.dir", "e5/sub", "n/inner/sub"] {
        fs::create_dir_all(bucket.join(d)).unwrap();
    }
    fs::write(bucket.join("rq/.shrinkfs.dir/inner"), "x").unwrap();
    let socket = std::os::unix::net::UnixListener::bind(bucket.join("e4/sock")).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    fs::remove_dir(mnt.join("e1")).unwrap();
    fs::remove_dir_all(mnt.join("e2")).unwrap();
    // Moved whole, with its empty subdirectory.
    fs::rename(mnt.join("e3"), mnt.join("e3new")).unwrap();
    assert!(mnt.join("e3new/sub").is_dir() && bucket.join("e3new/sub").is_dir());
    fs::rename(mnt.join("n/inner"), mnt.join("n/inner2")).unwrap();
    assert!(
        mnt.join("n/inner2/sub").is_dir() && bucket.join("n/inner2/sub").is_dir() && !bucket.join("n/inner").exists()
    );
    // A directory holding an empty subdirectory, or only what the mount does not show (a
    // socket), is not empty.
    for full in ["e4", "e5"] {
        let e = fs::remove_dir(mnt.join(full)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY), "{full}: {e}");
    }
    // A directory under the marker's name is not listed (no name here may take it).
    let names = |d: &Path| {
        let mut v: Vec<String> =
            fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    };
    assert!(names(&mnt.join("rq")).is_empty());
    for gone in ["e1", "e2", "e3"] {
        assert!(!bucket.join(gone).exists(), "{gone} is gone from the bucket");
    }
    assert!(bucket.join("e3new").is_dir() && bucket.join("e4/sock").exists());
    m.unmount();
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    assert_eq!(names(&mnt), ["e3new", "e4", "e5", "n", "rq"]);
    m.unmount();
    drop(socket);
}

#[test]
fn the_mount_helper_turns_fstab_options_into_flags() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir_all(&bucket).unwrap();
    fs::create_dir_all(&mnt).unwrap();
    fs::write(bucket.join("plain.txt"), b"from another tool").unwrap();
    // The binary is the helper when run as mount.shrinkfs (the package installs that link).
    use std::os::unix::process::CommandExt;
    let helper = || {
        let mut c = Command::new(common::bin());
        c.arg0("mount.shrinkfs");
        c
    };
    let o =
        helper().arg(&bucket).arg(&mnt).args(["-o", "ro,codec=lz4,frame_size=256K,_netdev,nofail"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let result = std::panic::catch_unwind(|| {
        assert_eq!(fs::read(mnt.join("plain.txt")).unwrap(), b"from another tool");
        assert_eq!(errno_of(&fs::write(mnt.join("new.txt"), b"x").unwrap_err()), libc::EROFS);
    });
    let u = Command::new(common::bin()).arg("unmount").arg(&mnt).output().unwrap();
    assert!(u.status.success(), "{}", String::from_utf8_lossy(&u.stderr));
    result.unwrap();
    let bad = helper().arg(&bucket).arg(&mnt).args(["-o", "bogus=1"]).output().unwrap();
    let said = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{said}");
    assert!(said.contains("-o bogus=1: unknown option"), "{said}");
}

#[test]
fn prometheus_metrics_count_what_the_mount_did() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (m, bucket, mnt, addr) = mount_with_metrics(t.path(), &[]);
    fs::write(mnt.join("f.log"), text(3 << 20)).unwrap();
    assert!(fs::read(mnt.join("f.log")).unwrap() == text(3 << 20));
    // 20 MiB that do not compress: written once, in place in the local bucket, in no parts.
    let noise = shrinkfs::corpus::generate(shrinkfs::corpus::CorpusKind::Random, 20 << 20, 3);
    fs::write(mnt.join("noise"), &noise).unwrap();
    assert!(fs::read(bucket.join("noise")).unwrap().len() > 20 << 20);
    let body = scrape(&addr);
    let value = |name: &str| metric(&body, name);
    assert!(value("shrinkfs_fuse_op_duration_seconds_count{op=\"write\"") >= 1.0, "{body}");
    assert_eq!(value("shrinkfs_logical_written_bytes_total"), (23 << 20) as f64, "{body}");
    assert!(value("shrinkfs_store_written_bytes_total") < (22 << 20) as f64, "{body}");
    assert!(value("shrinkfs_codec_cpu_frames_total") >= 3.0, "{body}");
    assert!(
        value("shrinkfs_store_request_duration_seconds_count{kind=\"put_in_place\",outcome=\"ok\"}") >= 1.0,
        "{body}"
    );
    assert_eq!(value("shrinkfs_store_request_duration_seconds_count{kind=\"put_part\""), 0.0, "{body}");
    m.unmount();
}

#[test]
fn with_the_writeback_cache_small_writes_arrive_as_large_requests_and_every_operation_works() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    // The kernel asks for attributes again after the TTL, and forgets then that a file has no
    // set-user-ID bit: with the default TTL that is once a second, not at every write.
    let args = ["--writeback-cache", "--metadata-ttl", "1"];
    let (m, bucket, mnt, addr) = mount_with_metrics(t.path(), &args);
    // 8 MiB in 4 KiB writes: the kernel gathers them, so far fewer requests reach the mount, and
    // (FUSE_HANDLE_KILLPRIV_V2) no `security.capability` lookup precedes each write.
    let data = text(8 << 20);
    {
        let mut f = fs::File::create(mnt.join("small-writes")).unwrap();
        for piece in data.chunks(4096) {
            f.write_all(piece).unwrap();
        }
        f.sync_all().unwrap();
    }
    // Stored once fsync returned, before any close.
    assert!(unpack(&bucket.join("small-writes")) == data);
    let body = scrape(&addr);
    let writes = metric(&body, "shrinkfs_fuse_op_duration_seconds_count{op=\"write\"");
    assert!((1.0..=256.0).contains(&writes), "{writes} write requests for 2,048 writes of 4 KiB");
    assert!(metric(&body, "shrinkfs_fuse_op_duration_seconds_count{op=\"getxattr\"") < 16.0, "{body}");
    exercise(&mnt, &bucket);
    m.unmount();
    let m = mount(bucket.to_str().unwrap(), &mnt, &args, &[]);
    verify_after_remount(&mnt);
    assert!(fs::read(mnt.join("small-writes")).unwrap() == data);
    m.unmount();
}

/// Block `k` of the memory test's file: text and random bytes alternate, so some frames shrink
/// and some are stored as they are.
fn mixed_block(k: u64, len: usize) -> Vec<u8> {
    if k.is_multiple_of(2) {
        let mut b = text(len);
        b[..8].copy_from_slice(&k.to_le_bytes());
        b
    } else {
        shrinkfs::corpus::generate(shrinkfs::corpus::CorpusKind::Random, len, k)
    }
}

#[test]
fn memory_stays_under_the_limit_writing_and_reading_a_file_ten_times_larger() {
    require_fuse!();
    const LIMIT: u64 = 64 << 20;
    const BLOCK: usize = 4 << 20;
    const BLOCKS: u64 = 10 * LIMIT / BLOCK as u64;
    // The binary, the runtime, thread stacks and allocator slack, measured idle at about 20 MiB.
    const OVERHEAD: u64 = 48 << 20;
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--memory-limit", "64M", "--gpu", "off"], &[]);
    let idle = m.peak_rss();
    {
        let mut f = fs::File::create(mnt.join("big.bin")).unwrap();
        for k in 0..BLOCKS {
            f.write_all(&mixed_block(k, BLOCK)).unwrap();
        }
        f.sync_all().unwrap();
    }
    let after_write = m.peak_rss();
    {
        let mut f = fs::File::open(mnt.join("big.bin")).unwrap();
        let mut got = vec![0u8; BLOCK];
        for k in 0..BLOCKS {
            f.read_exact(&mut got).unwrap();
            assert!(got == mixed_block(k, BLOCK), "block {k} differs");
        }
        assert_eq!(f.read(&mut got).unwrap(), 0, "file longer than written");
    }
    let after_read = m.peak_rss();
    println!("peak RSS: idle {idle}, after writing {after_write}, after reading {after_read} (limit {LIMIT})");
    assert_eq!(fs::metadata(mnt.join("big.bin")).unwrap().len(), BLOCKS * BLOCK as u64);
    assert!(after_write <= LIMIT + OVERHEAD, "writing peaked at {after_write} bytes");
    assert!(after_read <= LIMIT + OVERHEAD, "reading peaked at {after_read} bytes");
    m.unmount();
}

#[test]
fn a_file_left_open_after_writing_does_not_keep_other_writers_waiting_for_memory() {
    require_fuse!();
    // 24 MiB of budget; a frame of 16 MiB holds its size until its encoded bytes are in the
    // spill: the idle file's last frame leaves too little for the other writer's, until the
    // mount's upkeep takes it into the spill.
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir(&bucket).unwrap();
    let args = ["--memory-limit", "32M", "--frame-size", "16M", "--gpu", "off"];
    let m = mount(bucket.to_str().unwrap(), &mnt, &args, &[]);
    let idle_bytes: Vec<u8> = (0..16).flat_map(|k| mixed_block(k, 1 << 20)).collect();
    let mut idle = fs::File::create(mnt.join("idle")).unwrap();
    for block in idle_bytes.chunks(1 << 20) {
        idle.write_all(block).unwrap();
    }
    let other: Vec<u8> = (16..48).flat_map(|k| mixed_block(k, 1 << 20)).collect();
    let (path, data) = (mnt.join("other"), other.clone());
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let res = fs::File::create(&path).and_then(|mut f| f.write_all(&data).and_then(|()| f.sync_all()));
        let _ = done_tx.send(res.map_err(|e| e.to_string()));
    });
    let res = done_rx.recv_timeout(Duration::from_secs(30));
    assert_eq!(res, Ok(Ok(())), "the other writer finished while the idle file stayed open");
    drop(idle);
    assert!(fs::read(mnt.join("idle")).unwrap() == idle_bytes);
    assert!(fs::read(mnt.join("other")).unwrap() == other);
    m.unmount();
}

#[test]
fn bench_fs_finds_the_mount_process_and_counts_what_it_stored() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt, json) = (t.path().join("bucket"), t.path().join("mnt"), t.path().join("r.json"));
    fs::create_dir(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--gpu", "off"], &[]);
    let o = Command::new(common::bin())
        .args(["bench", "fs", "--target", &format!("shrinkfs={}", mnt.display())])
        .args(["--backend", &format!("shrinkfs={}", bucket.display())])
        .args(["--workloads", "seq-write,seq-read,small-files", "--size", "32M", "--files", "20"])
        .args(["--json", json.to_str().unwrap(), "--html", t.path().join("r.html").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["targets"][0]["fuse"], true);
    assert!(r["targets"][0]["pid"].as_u64().is_some(), "{}", r["targets"]);
    let seq = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["workload"] == "seq write 32M" && x["target"] == "shrinkfs")
        .unwrap()
        .clone();
    let (logical, stored) = (seq["logical_bytes"].as_u64().unwrap(), seq["stored_bytes"].as_u64().unwrap());
    assert_eq!(logical, 32 << 20);
    assert!(stored > 0 && stored < logical / 3, "logs compress: stored {stored}");
    assert!(seq["fs_cpu_s"].as_f64().unwrap() > 0.0, "encoding 32 MiB takes CPU: {seq}");
    assert!(seq["fs_peak_mib"].as_f64().unwrap() > 1.0, "{seq}");
    m.unmount();
}

#[test]
fn a_daemon_mount_logs_to_its_log_file() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt, log) = (t.path().join("bucket"), t.path().join("mnt"), t.path().join("mount.log"));
    fs::create_dir_all(&bucket).unwrap();
    fs::create_dir_all(&mnt).unwrap();
    let o = Command::new(common::bin())
        .args(["-v", "mount", bucket.to_str().unwrap(), mnt.to_str().unwrap(), "--daemon", "--gpu", "off"])
        .args(["--log-file", log.to_str().unwrap()])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    fs::write(mnt.join("f"), b"x").unwrap();
    let unmounted = Command::new(common::bin()).arg("unmount").arg(&mnt).status().unwrap();
    assert!(unmounted.success());
    let text = fs::read_to_string(&log).unwrap();
    assert!(text.contains("mounted"), "{text}");
    // A log file that cannot be opened fails in the foreground, before mounting.
    let o = Command::new(common::bin())
        .args([
            "mount",
            bucket.to_str().unwrap(),
            mnt.to_str().unwrap(),
            "--daemon",
            "--log-file",
            "/nonexistent/dir/log",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("cannot open log file"), "{err}");
}

#[test]
fn the_kernel_reads_ahead_a_whole_request_for_the_mount() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--gpu", "off"], &[]);
    let escaped = fs::canonicalize(&mnt).unwrap().to_str().unwrap().replace(' ', "\\040");
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dev = info
        .lines()
        .rev()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f[4] == escaped)
        .map(|f| f[2].to_owned())
        .expect("the mount is listed");
    // (Set by the mount just after the kernel lists it: allowed a moment.)
    let want = shrinkfs_fuse::session::READAHEAD_KIB.to_string();
    let start = std::time::Instant::now();
    let mut kib = String::new();
    while start.elapsed() < std::time::Duration::from_secs(5) {
        kib = fs::read_to_string(format!("/sys/class/bdi/{dev}/read_ahead_kb")).unwrap();
        if kib.trim() == want {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(kib.trim(), want, "read_ahead_kb of {dev}");
    m.unmount();
}

/// A write-only writer alone on its file goes around the kernel's page cache: readers that open
/// beside it read around the cache too, and readers open before it keep it on the cache, so no
/// reader is served a page cached before a write that went around it (the appended bytes of a
/// partly cached last page read as they were written, not as zeros), and a shared mapping sees
/// the writer's writes. The kernels on which the mount goes around the cache (6.6 and later)
/// also drop a cached page on a direct write themselves (seen on 6.18 by hand), so this checks
/// the outcome; `handles::tests` checks the rule. Going around the cache where the kernel does
/// not take `FUSE_DIRECT_IO_ALLOW_MMAP` fails it (the mapping is refused).
#[test]
fn readers_beside_a_writer_that_goes_around_the_page_cache_read_every_byte_written() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir(&bucket).unwrap();
    // The default metadata TTL: attributes the kernel trusts for a second.
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--gpu", "off", "--metadata-ttl", "1"], &[]);
    let read_at = |f: &fs::File, at: u64, n: usize| {
        let mut buf = vec![0u8; n];
        let got = f.read_at(&mut buf, at).unwrap();
        buf.truncate(got);
        buf
    };
    // A reader that opens while the write-only writer is at work.
    let mut w = OpenOptions::new().write(true).create(true).truncate(true).open(mnt.join("after")).unwrap();
    w.write_all(b"abc").unwrap();
    let r = fs::File::open(mnt.join("after")).unwrap();
    assert_eq!(read_at(&r, 0, 4096), b"abc");
    w.write_all(b"def").unwrap();
    assert_eq!(read_at(&r, 0, 4096), b"abcdef", "a reader opened beside the writer");
    // A shared mapping of that reader sees the writer's later writes (the mount goes around
    // the page cache only where the kernel keeps such mappings coherent: 6.6 and later).
    // SAFETY: a fresh read-only mapping of 6 bytes of an open file, unmapped below.
    let map = unsafe { libc::mmap(std::ptr::null_mut(), 6, libc::PROT_READ, libc::MAP_SHARED, r.as_raw_fd(), 0) };
    assert!(map != libc::MAP_FAILED, "a shared mapping beside the writer: {}", std::io::Error::last_os_error());
    w.write_all_at(b"ABC", 0).unwrap();
    // SAFETY: the mapping is 6 bytes long and stays mapped until munmap.
    let seen = unsafe { std::slice::from_raw_parts(map as *const u8, 6) }.to_vec();
    // SAFETY: unmapping the mapping made above, once.
    unsafe { libc::munmap(map, 6) };
    assert_eq!(seen, b"ABCdef", "a shared mapping beside the writer");
    w.write_all_at(b"abc", 0).unwrap();
    drop((w, r));
    // A reader open (and its page cached) before the writer opens, and again before it writes.
    fs::write(mnt.join("before"), b"abc").unwrap();
    let r = fs::File::open(mnt.join("before")).unwrap();
    assert_eq!(read_at(&r, 0, 4096), b"abc");
    let mut w = OpenOptions::new().append(true).open(mnt.join("before")).unwrap();
    assert_eq!(read_at(&r, 0, 4096), b"abc");
    w.write_all(b"def").unwrap();
    assert_eq!(read_at(&r, 0, 4096), b"abcdef", "a reader opened before the writer");
    drop((w, r));
    assert_eq!(fs::read(mnt.join("after")).unwrap(), b"abcdef");
    assert_eq!(fs::read(mnt.join("before")).unwrap(), b"abcdef");
    m.unmount();
}

/// Two mounts, at `a` and `b` under `t`, of one local-directory bucket there, with the
/// metadata TTL at 1 s.
fn two_mounts(t: &tempfile::TempDir) -> (PathBuf, PathBuf, Mounted, Mounted) {
    let bucket = t.path().join("bucket");
    fs::create_dir(&bucket).unwrap();
    let (ma, mb) = (t.path().join("a"), t.path().join("b"));
    let ttl = ["--metadata-ttl", "1"];
    let (a, b) = (mount(bucket.to_str().unwrap(), &ma, &ttl, &[]), mount(bucket.to_str().unwrap(), &mb, &ttl, &[]));
    (ma, mb, a, b)
}

/// The kernel keeps a file's pages across opens of one version only: a rewrite of the same
/// length by another mount (which no size or page count would reveal), a rewrite here and a
/// shrink are all read back as they are.
#[test]
fn a_file_read_again_is_served_from_the_kernel_cache_only_while_unchanged() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (ma, mb, a, b) = two_mounts(&t);
    let past_ttl = || std::thread::sleep(Duration::from_millis(1300));
    let first: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(ma.join("f"), &first).unwrap();
    for _ in 0..3 {
        assert_eq!(fs::read(ma.join("f")).unwrap(), first);
    }
    let same_length: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
    fs::write(mb.join("f"), &same_length).unwrap();
    past_ttl();
    assert_eq!(fs::read(ma.join("f")).unwrap(), same_length, "another mount's rewrite of the same length");
    assert_eq!(fs::read(ma.join("f")).unwrap(), same_length);
    fs::write(ma.join("f"), b"here").unwrap();
    assert_eq!(fs::read(ma.join("f")).unwrap(), b"here", "a rewrite here");
    fs::write(mb.join("f"), &first).unwrap();
    past_ttl();
    assert_eq!(fs::read(ma.join("f")).unwrap(), first);
    fs::write(mb.join("f"), b"shrunk").unwrap();
    past_ttl();
    assert_eq!(fs::read(ma.join("f")).unwrap(), b"shrunk", "another mount's shrink");
    a.unmount();
    b.unmount();
}

/// The consistency model of docs/SEMANTICS.md through two real mounts of one local-directory
/// bucket with the default TTLs (1 s): a new name shows at once unless asked for and missed
/// (then within the negative TTL, the kernel's negative entry included), a change within the
/// metadata TTL, a listing shows what was closed before it, and the last close wins.
#[test]
fn two_mounts_of_one_bucket_see_each_other_as_the_consistency_model_says() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (ma, mb, a, b) = two_mounts(&t);
    let past_ttl = || std::thread::sleep(Duration::from_millis(1300));

    fs::write(ma.join("f"), b"one").unwrap();
    assert_eq!(fs::read(mb.join("f")).unwrap(), b"one", "never asked for: seen once close returned");

    assert_eq!(errno_of(&fs::metadata(mb.join("g")).unwrap_err()), libc::ENOENT);
    fs::write(ma.join("g"), b"gg").unwrap();
    assert_eq!(errno_of(&fs::metadata(mb.join("g")).unwrap_err()), libc::ENOENT, "absent for the negative TTL");
    past_ttl();
    assert_eq!(fs::metadata(mb.join("g")).unwrap().len(), 2);

    assert_eq!(fs::metadata(mb.join("f")).unwrap().len(), 3);
    fs::write(ma.join("f"), b"second version").unwrap();
    assert_eq!(fs::metadata(mb.join("f")).unwrap().len(), 3, "trusted for the metadata TTL");
    past_ttl();
    assert_eq!(fs::metadata(mb.join("f")).unwrap().len(), 14);
    assert_eq!(fs::read(mb.join("f")).unwrap(), b"second version");

    fs::write(ma.join("h"), b"hhhh").unwrap();
    let listed: Vec<(String, u64)> = fs::read_dir(&mb)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().into_string().unwrap(), e.metadata().unwrap().len())
        })
        .collect();
    assert!(listed.contains(&("h".into(), 4)), "a listing shows what was closed before it: {listed:?}");

    let mut wa = fs::File::create(ma.join("w")).unwrap();
    let mut wb = fs::File::create(mb.join("w")).unwrap();
    wa.write_all(&[b'a'; 5000]).unwrap();
    wb.write_all(&[b'b'; 3000]).unwrap();
    drop(wa);
    drop(wb);
    past_ttl();
    assert_eq!(fs::read(ma.join("w")).unwrap(), [b'b'; 3000], "the last close wins, whole");
    assert_eq!(fs::read(mb.join("w")).unwrap(), [b'b'; 3000]);

    // Line 5: a reader holds a log open on b while a replaces it; after the TTL an append on b
    // lands at the end of a's version (the open loads it, and the kernel, asked to look the file
    // up again, appends at its size), never on the reader's version.
    fs::write(ma.join("log"), b"one\n").unwrap();
    let mut held = fs::File::open(mb.join("log")).unwrap();
    let mut first = Vec::new();
    held.read_to_end(&mut first).unwrap();
    assert_eq!(first, b"one\n");
    fs::write(ma.join("log"), b"one\ntwo\n").unwrap();
    past_ttl();
    let mut app = fs::OpenOptions::new().append(true).open(mb.join("log")).unwrap();
    app.write_all(b"three\n").unwrap();
    drop(app);
    drop(held);
    past_ttl();
    assert_eq!(fs::read(ma.join("log")).unwrap(), b"one\ntwo\nthree\n", "appended to the newest version");

    // Line 5 again: past the TTL a new reader's open (and `stat`) on b beside a reader holding
    // the file shows a's version, while the held reader keeps reading its own.
    let old: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(ma.join("conf"), &old).unwrap();
    let mut held = fs::File::open(mb.join("conf")).unwrap();
    let mut head = vec![0u8; 1000];
    held.read_exact(&mut head).unwrap();
    fs::write(ma.join("conf"), b"short new version\n").unwrap();
    past_ttl();
    assert_eq!(fs::metadata(mb.join("conf")).unwrap().len(), 18, "stat: the new size");
    assert_eq!(fs::read(mb.join("conf")).unwrap(), b"short new version\n", "a new open: the new version");
    assert_eq!(held.metadata().unwrap().len(), old.len() as u64, "the held file keeps its size");
    let mut rest = Vec::new();
    match held.read_to_end(&mut rest) {
        Ok(_) => assert!(rest == old[1000..], "the held reader: its own version, whole"),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "or ESTALE, never a mix: {e}"),
    }
    drop(held);
    a.unmount();
    b.unmount();
}

#[test]
fn ls_l_asks_for_labels_and_acls_once_per_mount_not_once_per_file() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (m, _bucket, mnt, addr) = mount_with_metrics(t.path(), &[]);
    fs::create_dir(mnt.join("d")).unwrap();
    for i in 0..40 {
        fs::write(mnt.join("d").join(format!("f{i}")), b"x").unwrap();
    }
    let before = metric(&scrape(&addr), "shrinkfs_fuse_op_duration_seconds_count{op=\"getxattr\"");
    let out = Command::new("ls").arg("-l").arg(mnt.join("d")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 41, "a total line and 40 files");
    // `ls -l` asks each file for its SELinux label and its ACL unless told they are not supported
    // (ENOTSUP), which it remembers for the whole mount: 80 requests before, now a few.
    let asked = metric(&scrape(&addr), "shrinkfs_fuse_op_duration_seconds_count{op=\"getxattr\"") - before;
    assert!(asked <= 4.0, "{asked} getxattr requests for ls -l of 40 files");
    // Our own attributes still answer, and other user.* names say there is none.
    let path = CString::new(mnt.join("d/f0").to_str().unwrap()).unwrap();
    let mut buf = [0u8; 64];
    let get = |name: &std::ffi::CStr, buf: &mut [u8]| {
        // SAFETY: a valid path, name and buffer of buf.len() bytes.
        let n = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        (n, std::io::Error::last_os_error().raw_os_error())
    };
    assert!(get(c"user.shrinkfs.codec", &mut buf).0 > 0);
    assert_eq!(get(c"user.other", &mut buf), (-1, Some(libc::ENODATA)));
    assert_eq!(get(c"security.selinux", &mut buf), (-1, Some(libc::ENOTSUP)));
    assert_eq!(get(c"system.posix_acl_access", &mut buf), (-1, Some(libc::ENOTSUP)));
    m.unmount();
}
