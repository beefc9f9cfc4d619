//! POSIX metadata through a real mount: owners, modes and all three times of every kind of entry
//! outlive the kernel's cache and the mount; new entries in a set-group-ID directory take
//! its group; set-user-ID and set-group-ID bits are cleared as the kernel would.

mod common;

use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::{mount, mount_unavailable};

macro_rules! require_root_fuse {
    () => {
        if let Some(why) = mount_unavailable() {
            eprintln!("skipped: {why}");
            return;
        }
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root (chown to other users)");
            return;
        }
    };
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn lchown(p: &Path, uid: u32, gid: u32) {
    // SAFETY: a valid path string.
    assert_eq!(unsafe { libc::lchown(c(p).as_ptr(), uid, gid) }, 0, "lchown {}", std::io::Error::last_os_error());
}

/// Sets the modification time of `p` itself (not what a link points to).
fn set_mtime_nofollow(p: &Path, secs: i64) {
    let times = [libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT }, libc::timespec { tv_sec: secs, tv_nsec: 0 }];
    // SAFETY: a valid path string and two timespecs.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c(p).as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    assert_eq!(rc, 0, "utimensat {}", std::io::Error::last_os_error());
}

/// Makes the kernel forget its cached inodes and dentries (they come back through lookups).
fn drop_kernel_caches() {
    let _ = fs::write("/proc/sys/vm/drop_caches", "2");
}

/// (mode, uid, gid, mtime) of `p` itself.
fn meta(p: &Path) -> (u32, u32, u32, i64) {
    let m = fs::symlink_metadata(p).unwrap();
    (m.mode(), m.uid(), m.gid(), m.mtime())
}

#[test]
fn directory_and_symlink_metadata_outlive_the_kernel_cache_and_a_remount() {
    require_root_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir_all(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--allow-other"], &[]);
    let (private, shared, link) = (mnt.join("private"), mnt.join("shared"), mnt.join("link"));
    fs::create_dir(&private).unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&private, Some(65534), Some(65534)).unwrap();
    set_mtime_nofollow(&private, 1_000_000_000);
    fs::create_dir(&shared).unwrap();
    fs::write(shared.join("f"), b"x").unwrap();
    std::os::unix::fs::symlink("shared/f", &link).unwrap();
    lchown(&link, 65534, 100);
    set_mtime_nofollow(&link, 1_100_000_000);
    let want_private = (libc::S_IFDIR | 0o700, 65534, 65534, 1_000_000_000);
    let want_link = (libc::S_IFLNK | 0o777, 65534, 100, 1_100_000_000);
    assert_eq!(meta(&private), want_private);
    assert_eq!(meta(&link), want_link);
    // As `tar x`, `cp -a` and `rsync -a` do: fill a directory, then set its mode and time.
    let tarred = mnt.join("tarred");
    fs::create_dir(&tarred).unwrap();
    fs::set_permissions(&tarred, fs::Permissions::from_mode(0o700)).unwrap();
    fs::write(tarred.join("f"), b"x").unwrap();
    fs::set_permissions(&tarred, fs::Permissions::from_mode(0o755)).unwrap();
    set_mtime_nofollow(&tarred, 1_200_000_000);
    let want_tarred = (libc::S_IFDIR | 0o755, 0, 0, 1_200_000_000);
    // fallocate(1): the file grows with zeros.
    let f = fs::OpenOptions::new().create(true).truncate(true).write(true).open(mnt.join("pre")).unwrap();
    // SAFETY: a descriptor open for writing; offsets within range.
    let r = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, 3 << 20) };
    assert_eq!(r, 0, "fallocate: {}", std::io::Error::last_os_error());
    drop(f);
    // The kernel forgets the inodes; lookups bring them back from the bucket.
    drop_kernel_caches();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(meta(&private), want_private, "after the kernel forgot the directory");
    assert_eq!(meta(&link), want_link, "after the kernel forgot the link");
    m.unmount();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--allow-other"], &[]);
    assert_eq!(meta(&private), want_private, "after a remount");
    assert_eq!(meta(&tarred), want_tarred, "filled, then changed: after a remount");
    assert!(fs::read(mnt.join("pre")).unwrap() == vec![0u8; 3 << 20], "fallocated: zeros");
    assert_eq!(meta(&link), want_link, "after a remount");
    assert_eq!(fs::read_link(&link).unwrap(), Path::new("shared/f"));
    assert_eq!(fs::read(&link).unwrap(), b"x");
    // A renamed directory keeps them too.
    fs::rename(&private, mnt.join("moved")).unwrap();
    assert_eq!(meta(&mnt.join("moved")), want_private, "after a rename");
    m.unmount();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--allow-other"], &[]);
    assert_eq!(meta(&mnt.join("moved")), want_private, "renamed, after a remount");
    m.unmount();
}

#[test]
fn entries_of_a_set_group_id_directory_take_its_group_and_subdirectories_its_bit() {
    require_root_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir_all(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--allow-other"], &[]);
    let team = mnt.join("team");
    fs::create_dir(&team).unwrap();
    std::os::unix::fs::chown(&team, None, Some(4242)).unwrap();
    fs::set_permissions(&team, fs::Permissions::from_mode(0o2775)).unwrap();
    fs::write(team.join("file"), b"x").unwrap();
    fs::create_dir(team.join("sub")).unwrap();
    std::os::unix::fs::symlink("file", team.join("link")).unwrap();
    let check = |when: &str| {
        assert_eq!(fs::metadata(team.join("file")).unwrap().gid(), 4242, "file, {when}");
        let sub = fs::metadata(team.join("sub")).unwrap();
        assert_eq!((sub.gid(), sub.mode() & 0o2000), (4242, 0o2000), "subdirectory, {when}");
        assert_eq!(fs::symlink_metadata(team.join("link")).unwrap().gid(), 4242, "link, {when}");
    };
    check("just made");
    m.unmount();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--allow-other"], &[]);
    check("after a remount");
    m.unmount();
}

fn mknod(p: &Path, mode: u32, dev: libc::dev_t) {
    // SAFETY: a valid path string.
    let rc = unsafe { libc::mknod(c(p).as_ptr(), mode, dev) };
    assert_eq!(rc, 0, "mknod {}: {}", p.display(), std::io::Error::last_os_error());
}

#[test]
fn fifos_sockets_and_device_nodes_are_made_work_and_survive_a_remount() {
    require_root_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir_all(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--allow-other"], &[]);
    mknod(&mnt.join("fifo"), libc::S_IFIFO | 0o640, 0);
    mknod(&mnt.join("char"), libc::S_IFCHR | 0o600, libc::makedev(1, 7));
    mknod(&mnt.join("block"), libc::S_IFBLK | 0o640, libc::makedev(8, 3));
    let sock = std::os::unix::net::UnixListener::bind(mnt.join("sock")).unwrap();
    drop(sock);
    std::os::unix::fs::chown(mnt.join("char"), Some(65534), Some(65534)).unwrap();
    fs::set_permissions(mnt.join("fifo"), fs::Permissions::from_mode(0o600)).unwrap();
    // The FIFO works as one (the kernel runs it: the mount keeps only its name and metadata).
    let fifo = mnt.join("fifo");
    let writer = std::thread::spawn(move || fs::write(fifo, b"through the pipe").unwrap());
    assert_eq!(fs::read(mnt.join("fifo")).unwrap(), b"through the pipe");
    writer.join().unwrap();
    let want = |p: &str| {
        let m = fs::symlink_metadata(mnt.join(p)).unwrap();
        (m.mode(), m.uid(), m.gid(), m.rdev())
    };
    let expected = [
        ("fifo", (libc::S_IFIFO | 0o600, 0, 0, 0)),
        ("char", (libc::S_IFCHR | 0o600, 65534, 65534, libc::makedev(1, 7))),
        ("block", (libc::S_IFBLK | 0o640, 0, 0, libc::makedev(8, 3))),
    ];
    for (name, w) in expected {
        assert_eq!(want(name), w, "{name}");
    }
    assert_eq!(fs::symlink_metadata(mnt.join("sock")).unwrap().mode() & libc::S_IFMT, libc::S_IFSOCK);
    m.unmount();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--allow-other"], &[]);
    for (name, w) in expected {
        assert_eq!(want(name), w, "{name}, after a remount");
    }
    assert_eq!(fs::symlink_metadata(mnt.join("sock")).unwrap().mode() & libc::S_IFMT, libc::S_IFSOCK);
    // They rename and unlink like files.
    fs::rename(mnt.join("char"), mnt.join("char2")).unwrap();
    assert_eq!(want("char2"), (libc::S_IFCHR | 0o600, 65534, 65534, libc::makedev(1, 7)));
    for n in ["fifo", "char2", "block", "sock"] {
        fs::remove_file(mnt.join(n)).unwrap();
    }
    assert_eq!(fs::read_dir(&mnt).unwrap().count(), 0);
    m.unmount();
}

/// Sets the access and modification times of `p` itself, to the nanosecond.
fn set_times_nofollow(p: &Path, atime: (i64, i64), mtime: (i64, i64)) {
    let times =
        [libc::timespec { tv_sec: atime.0, tv_nsec: atime.1 }, libc::timespec { tv_sec: mtime.0, tv_nsec: mtime.1 }];
    // SAFETY: a valid path string and two timespecs.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c(p).as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    assert_eq!(rc, 0, "utimensat {}: {}", p.display(), std::io::Error::last_os_error());
}

/// Everything `lstat` says of `p` that the mount keeps: type and mode, owner, size, device number
/// and the three times to the nanosecond.
fn full_meta(p: &Path) -> [i64; 12] {
    let m = fs::symlink_metadata(p).unwrap();
    let u = |v: u32| i64::from(v);
    [
        u(m.mode()),
        u(m.uid()),
        u(m.gid()),
        m.size() as i64,
        m.rdev() as i64,
        m.atime(),
        m.atime_nsec(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
        i64::from(m.ctime() != m.mtime() || m.ctime_nsec() != m.mtime_nsec()),
    ]
}

#[test]
fn modes_owners_and_times_of_every_kind_of_entry_are_as_they_were_after_a_remount() {
    require_root_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir_all(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--allow-other"], &[]);
    fs::create_dir(mnt.join("dir")).unwrap();
    fs::write(mnt.join("file"), b"some bytes").unwrap();
    std::os::unix::fs::symlink("file", mnt.join("link")).unwrap();
    // A target is data, not a name: any bytes (Latin-1 here), as on Linux's own filesystems.
    let latin1 = std::ffi::OsStr::from_bytes(b"/srv/caf\xe9.txt");
    std::os::unix::fs::symlink(latin1, mnt.join("latin1")).unwrap();
    mknod(&mnt.join("fifo"), libc::S_IFIFO | 0o640, 0);
    mknod(&mnt.join("char"), libc::S_IFCHR | 0o600, libc::makedev(1, 7));
    let names = ["dir", "file", "link", "fifo", "char"];
    for (i, name) in names.iter().enumerate() {
        let p = mnt.join(name);
        if *name != "link" {
            fs::set_permissions(&p, fs::Permissions::from_mode(0o751 - i as u32)).unwrap();
        }
        lchown(&p, 65534, 100 + i as u32);
        // Access times before the epoch and modification times past 2038, to the nanosecond.
        set_times_nofollow(&p, (-1_000 - i as i64, 5), (4_102_444_800 + i as i64, 999_999_999 - i as i64));
    }
    // An entry made in the directory afterwards moves its modification and change times again.
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(mnt.join("dir/inside"), b"x").unwrap();
    let before: Vec<[i64; 12]> = names.iter().map(|n| full_meta(&mnt.join(n))).collect();
    for (name, b) in names.iter().zip(&before).filter(|(n, _)| matches!(**n, "fifo" | "char")) {
        assert_eq!(b[3], 0, "{name}: a node is 0 bytes long");
    }
    for (i, (name, b)) in names.iter().zip(&before).enumerate() {
        // (Before the epoch, with a fraction: fuser 0.18 read such a time 2 × 5 ns early.)
        assert_eq!((b[5], b[6]), (-1_000 - i as i64, 5), "{name}: the access time set");
        if *name != "dir" {
            assert_eq!((b[7], b[8]), (4_102_444_800 + i as i64, 999_999_999 - i as i64), "{name}: the mtime set");
            assert_eq!(b[11], 1, "{name}: ctime is the time of the last change, not the mtime set");
        }
    }
    let dir_mtime = fs::symlink_metadata(mnt.join("dir")).unwrap().modified().unwrap();
    assert!(dir_mtime.elapsed().unwrap() < std::time::Duration::from_secs(60), "the new entry set dir's mtime");
    drop_kernel_caches();
    std::thread::sleep(std::time::Duration::from_millis(300));
    for (name, b) in names.iter().zip(&before) {
        assert_eq!(&full_meta(&mnt.join(name)), b, "{name}, after the kernel forgot it");
    }
    m.unmount();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--allow-other"], &[]);
    for (name, b) in names.iter().zip(&before) {
        assert_eq!(&full_meta(&mnt.join(name)), b, "{name}, after a remount");
    }
    assert_eq!(fs::read_link(mnt.join("latin1")).unwrap().as_os_str(), latin1, "after a remount");
    m.unmount();
}

/// Runs `script` with `sh -c` as uid and gid 65534.
fn as_nobody(script: &str) {
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script])
        .output()
        .expect("setpriv");
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn set_user_and_group_id_bits_are_cleared_by_unprivileged_writes_and_truncates_and_by_chown() {
    require_root_fuse!();
    let t = tempfile::tempdir().unwrap();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir_all(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--allow-other"], &[]);
    fs::set_permissions(&mnt, fs::Permissions::from_mode(0o777)).unwrap();
    let made = |name: &str, mode: u32, owner: u32| {
        let p = mnt.join(name);
        fs::write(&p, b"data\n").unwrap();
        std::os::unix::fs::chown(&p, Some(owner), Some(owner)).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, mode, "{name} as made");
    };
    let mode = |name: &str| fs::metadata(mnt.join(name)).unwrap().mode() & 0o7777;
    made("written", 0o6775, 65534);
    made("no-group-exec", 0o6764, 65534);
    made("truncated", 0o4766, 65534);
    made("opened-trunc", 0o4766, 65534);
    made("chowned", 0o6755, 65534);
    made("by-root", 0o6755, 65534);
    let m_dir = mnt.display();
    as_nobody(&format!(
        "echo more >> {m_dir}/written && echo more >> {m_dir}/no-group-exec && truncate -s 2 {m_dir}/truncated \
         && echo new > {m_dir}/opened-trunc"
    ));
    std::os::unix::fs::chown(mnt.join("chowned"), Some(0), None).unwrap();
    fs::OpenOptions::new().append(true).open(mnt.join("by-root")).unwrap().write_all(b"root\n").unwrap();
    // A special node loses them on a change of owner too; a directory keeps them (as on ext4).
    mknod(&mnt.join("fifo"), libc::S_IFIFO | 0o644, 0);
    fs::set_permissions(mnt.join("fifo"), fs::Permissions::from_mode(0o6555)).unwrap();
    std::os::unix::fs::chown(mnt.join("fifo"), Some(65534), None).unwrap();
    fs::create_dir(mnt.join("dir")).unwrap();
    fs::set_permissions(mnt.join("dir"), fs::Permissions::from_mode(0o6755)).unwrap();
    std::os::unix::fs::chown(mnt.join("dir"), Some(65534), None).unwrap();
    let want = [
        ("written", 0o0775),
        ("no-group-exec", 0o2764),
        ("truncated", 0o0766),
        ("opened-trunc", 0o0766),
        ("chowned", 0o0755),
        ("by-root", 0o6755),
        ("fifo", 0o0555),
        ("dir", 0o6755),
    ];
    for (name, bits) in want {
        assert_eq!(mode(name), bits, "{name}");
    }
    assert_eq!(fs::read(mnt.join("written")).unwrap(), b"data\nmore\n");
    m.unmount();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--allow-other"], &[]);
    for (name, bits) in want {
        assert_eq!(mode(name), bits, "{name} after a remount");
    }
    m.unmount();
}
