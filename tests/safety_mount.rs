//! Data safety through a real mount (/dev/fuse), where the kernel's own behaviour is involved:
//! appenders, descriptors kept after unlink, long names, full disks, signals, crashes and a
//! restarting S3 server. Each case once lost data while the system call reported success.

mod common;

use std::fs;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{free_addr, mount, mount_unavailable, s3_server, text};

macro_rules! require_fuse {
    () => {
        if let Some(why) = mount_unavailable() {
            println!("SKIPPED: real mount not possible here: {why}");
            return;
        }
    };
}

/// Runs a Python program (exact system calls: pwrite, fsync, unlink of an open file).
fn py(program: &str, args: &[&str]) -> Output {
    Command::new("python3").arg("-c").arg(program).args(args).output().expect("python3")
}

fn ok(out: &Output) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "failed: {text}");
    text
}

fn sh(script: &str) -> Output {
    Command::new("bash").arg("-c").arg(script).output().unwrap()
}

fn unpack(object: &Path) -> Vec<u8> {
    let out = Command::new(common::bin()).args(["unpack", object.to_str().unwrap(), "-"]).output().unwrap();
    assert!(out.status.success(), "unpack: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// Random bytes (do not compress), reproducible.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

/// A tmpfs of `size` at `dir` (root only), unmounted on drop.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn new(dir: &Path, size: &str) -> Option<Tmpfs> {
        fs::create_dir_all(dir).unwrap();
        let st = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(dir).status();
        st.ok()?.success().then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A process rewriting `file` from its start with random bytes until killed. It closes nothing
/// before it ends (dd would: it moves its descriptor onto stdout, and that close publishes the
/// emptied file like any other close).
fn endless_rewrite(file: &Path) -> std::process::Child {
    Command::new("python3")
        .arg("-c")
        .arg("import os,sys\nfd=os.open(sys.argv[1],os.O_WRONLY|os.O_TRUNC)\nb=os.urandom(1<<20)\nwhile True: os.write(fd,b)")
        .arg(file)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits (at most a minute) until directory `dir` has an entry: an upload has started.
fn wait_for_an_entry(dir: &Path) {
    let start = Instant::now();
    while fs::read_dir(dir).map(|d| d.count()).unwrap_or(0) == 0 {
        assert!(start.elapsed() < Duration::from_secs(60), "no upload started in {}", dir.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn appending_one_line_per_open_from_a_shell_and_from_two_processes_loses_nothing() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    let shell = sh(&format!("cd {} && for i in $(seq 200); do echo \"line $i\" >> f; done", mnt.display()));
    assert!(shell.status.success() && shell.stderr.is_empty(), "{}", String::from_utf8_lossy(&shell.stderr));
    let two = sh(&format!(
        "cd {} && (for i in $(seq 600); do echo \"a $i\" >> g; done) & \
         (cd {} && for i in $(seq 600); do echo \"b $i\" >> g; done); wait",
        mnt.display(),
        mnt.display()
    ));
    assert!(two.status.success() && two.stderr.is_empty(), "{}", String::from_utf8_lossy(&two.stderr));
    m.unmount();
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    let f = fs::read_to_string(mnt.join("f")).unwrap();
    let want: String = (1..=200).map(|i| format!("line {i}\n")).collect();
    assert_eq!(f, want, "all 200 lines, in order, after a remount");
    let g = fs::read_to_string(mnt.join("g")).unwrap();
    let mut lines: Vec<&str> = g.lines().collect();
    assert_eq!(lines.len(), 1200, "every append from both processes");
    lines.sort_unstable();
    let mut expected: Vec<String> = (1..=600).flat_map(|i| [format!("a {i}"), format!("b {i}")]).collect();
    expected.sort_unstable();
    assert_eq!(lines, expected);
    drop(m);
}

#[test]
fn an_unlinked_open_file_keeps_its_bytes_and_long_names_work() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    // pjdfstest unlink/14.t: the descriptor outlives the name.
    let out = py(
        "import os,sys\n\
         p=sys.argv[1]\n\
         fd=os.open(p,os.O_RDWR|os.O_CREAT,0o644)\n\
         os.write(fd,b'Hello, World!')\n\
         os.unlink(p)\n\
         assert os.pread(fd,13,0)==b'Hello, World!', os.pread(fd,13,0)\n\
         assert os.fstat(fd).st_size==13\n\
         os.pwrite(fd,b'more',13)\n\
         assert os.pread(fd,100,0)==b'Hello, World!more'\n\
         os.close(fd)\n\
         assert not os.path.exists(p)\n",
        &[mnt.join("t").to_str().unwrap()],
    );
    ok(&out);
    // A stored file opened read-only, then unlinked: still readable.
    fs::write(mnt.join("s"), text(300_000)).unwrap();
    let out = py(
        "import os,sys\n\
         fd=os.open(sys.argv[1],os.O_RDONLY)\n\
         os.unlink(sys.argv[1])\n\
         assert len(os.pread(fd,400000,0))==300000\n",
        &[mnt.join("s").to_str().unwrap()],
    );
    ok(&out);
    assert!(!bucket.join("t").exists() && !bucket.join("s").exists());
    // Names of 254 and 255 bytes, and a path near 4 KiB, on a local-directory bucket.
    for n in [254, 255] {
        let name = "n".repeat(n);
        fs::write(mnt.join(&name), b"x\n").unwrap();
        std::thread::sleep(Duration::from_millis(1200));
        assert_eq!(fs::read(mnt.join(&name)).unwrap(), b"x\n", "{n}-byte name");
    }
    let mut deep = mnt.clone();
    for i in 0..15 {
        deep = deep.join(format!("{i:02}{}", "d".repeat(248)));
    }
    fs::create_dir_all(&deep).unwrap();
    fs::write(deep.join("leaf"), b"deep\n").unwrap();
    assert_eq!(fs::read(deep.join("leaf")).unwrap(), b"deep\n");
    m.unmount();
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    assert_eq!(fs::read(mnt.join("n".repeat(255))).unwrap(), b"x\n", "after a remount");
    assert_eq!(fs::read(deep.join("leaf")).unwrap(), b"deep\n");
    // rmdir of a directory holding an empty subdirectory: ENOTEMPTY.
    fs::create_dir_all(mnt.join("a/b")).unwrap();
    assert_eq!(fs::remove_dir(mnt.join("a")).unwrap_err().raw_os_error(), Some(libc::ENOTEMPTY));
    assert!(mnt.join("a/b").is_dir());
    drop(m);
}

#[test]
fn a_full_bucket_or_staging_disk_fails_one_call_and_a_retry_stores_every_byte() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt, staging) = (t.path().join("bucket"), t.path().join("mnt"), t.path().join("staging"));
    let Some(_bucket_fs) = Tmpfs::new(&bucket, "64m") else {
        println!("SKIPPED: cannot mount a tmpfs here");
        return;
    };
    let _staging_fs = Tmpfs::new(&staging, "20m").expect("second tmpfs");
    let filler = bucket.join("filler");
    fs::write(&filler, vec![0u8; 40 << 20]).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--codec", "none"], &[]);
    // 1. The bucket fills during a write (or at fsync): that call fails with ENOSPC having taken
    //    nothing; once room is made, writing on from the file's size and fsync store every byte.
    let data = noise(36 << 20, 1);
    let src = t.path().join("src");
    fs::write(&src, &data).unwrap();
    let out = py(
        "import os,sys,errno\n\
         src,dst,filler=sys.argv[1:4]\n\
         fd=os.open(dst,os.O_WRONLY|os.O_CREAT|os.O_TRUNC,0o644)\n\
         data=open(src,'rb').read()\n\
         failed=None\n\
         def full(e):\n    global failed\n    assert failed is None, 'failed twice'\n    failed=errno.errorcode[e.errno]; os.unlink(filler)\n\
         while os.fstat(fd).st_size<len(data):\n\
         \x20   at=os.fstat(fd).st_size\n\
         \x20   try:\n        os.pwrite(fd,data[at:at+(1<<20)],at)\n\
         \x20   except OSError as e:\n        full(e)\n\
         try:\n    os.fsync(fd)\n\
         except OSError as e:\n    full(e); os.fsync(fd)\n\
         print('first failure', failed)\n\
         os.close(fd)\n",
        &[src.to_str().unwrap(), mnt.join("big").to_str().unwrap(), filler.to_str().unwrap()],
    );
    let said = ok(&out);
    assert!(said.contains("first failure ENOSPC"), "the full bucket failed a call with ENOSPC: {said}");
    assert!(fs::read(mnt.join("big")).unwrap() == data);
    fs::remove_file(mnt.join("big")).unwrap();
    m.unmount();
    // 2. A header patched after 16 MiB with a 20 MiB staging disk: ENOSPC, and nothing lost.
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--staging-dir", staging.to_str().unwrap()], &[]);
    let data = text(16 << 20);
    fs::write(&src, &data).unwrap();
    let out = py(
        "import os,sys,errno\n\
         fd=os.open(sys.argv[2],os.O_WRONLY|os.O_CREAT|os.O_TRUNC,0o644)\n\
         os.write(fd,open(sys.argv[1],'rb').read())\n\
         try:\n    os.pwrite(fd,b'H'*512,0); print('PATCHED')\n\
         except OSError as e:\n    print('patch', errno.errorcode[e.errno])\n\
         assert os.fstat(fd).st_size==16<<20\n\
         os.close(fd)\n",
        &[src.to_str().unwrap(), mnt.join("tar").to_str().unwrap()],
    );
    let said = ok(&out);
    let mut want = data.clone();
    if said.contains("PATCHED") {
        want[..512].fill(b'H');
    } else {
        assert!(said.contains("patch ENOSPC"), "{said}");
    }
    assert!(fs::read(mnt.join("tar")).unwrap() == want, "{said}");
    m.unmount();
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    assert!(fs::read(mnt.join("tar")).unwrap() == want, "after a remount");
    drop(m);
}

/// A file whose last close failed (the bucket full) keeps its bytes: the mount still shows it,
/// stores it by itself once there is room, and the unmount finds nothing lost. The same for
/// bytes written through a mapping whose last release is the `munmap`. Found by a black-box
/// probe: the bytes were dropped at the last release, and the name vanished.
#[test]
fn a_file_whose_last_close_failed_is_kept_and_stored_by_the_mount_once_there_is_room() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    let Some(_bucket_fs) = Tmpfs::new(&bucket, "4m") else {
        println!("SKIPPED: cannot mount a tmpfs here");
        return;
    };
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--codec", "none"], &[]);
    let data = noise(6 << 20, 7);
    let src = t.path().join("src");
    fs::write(&src, &data).unwrap();
    let out = py(
        "import os,sys,mmap,errno\n\
         src,mnt=sys.argv[1:3]\n\
         data=open(src,'rb').read()\n\
         fd=os.open(mnt+'/closed',os.O_WRONLY|os.O_CREAT|os.O_TRUNC,0o644)\n\
         os.write(fd,data)\n\
         try:\n    os.close(fd); print('close 0')\n\
         except OSError as e:\n    print('close', errno.errorcode[e.errno])\n\
         print('size after', os.stat(mnt+'/closed').st_size)\n\
         fd=os.open(mnt+'/mapped',os.O_RDWR|os.O_CREAT|os.O_TRUNC,0o644)\n\
         os.ftruncate(fd,len(data))\n\
         m=mmap.mmap(fd,len(data),mmap.MAP_SHARED)\n\
         try:\n    os.close(fd)\n\
         except OSError as e:\n    print('close of the mapped file', errno.errorcode[e.errno])\n\
         m[:]=data\n\
         m.close()\n",
        &[src.to_str().unwrap(), mnt.to_str().unwrap()],
    );
    let said = ok(&out);
    assert!(said.contains("close ENOSPC"), "the full bucket failed the close: {said}");
    assert!(said.contains(&format!("size after {}", data.len())), "still shown as written: {said}");
    let shown = fs::read(mnt.join("mapped")).unwrap();
    assert!(shown == data, "bytes written through the mapping are read back here");
    assert!(Command::new("mount").args(["-o", "remount,size=64m"]).arg(&bucket).status().unwrap().success());
    // Stored by the mount itself: the tries come 1, 2, 4, 8 s after a failure.
    let start = Instant::now();
    while !(bucket.join("closed").exists() && bucket.join("mapped").exists()) {
        assert!(start.elapsed() < Duration::from_secs(40), "the mount did not store the kept files");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(unpack(&bucket.join("closed")) == data);
    assert!(unpack(&bucket.join("mapped")) == data);
    let mut m = m;
    assert!(Command::new(common::bin()).arg("unmount").arg(&mnt).status().unwrap().success());
    assert!(m.wait_exit(20), "the mount ends once unmounted: {}", m.log());
    assert!(m.status.unwrap().success(), "nothing was lost, so the mount exits 0: {}", m.log());
}

/// `shrinkfs unmount` waits for the mount's process to end and fails as it failed: a file whose
/// last close failed (the bucket full) and that the unmount's own try could not store either
/// makes both exit with code 3. It used to return 0 at once while the process exited 3.
#[test]
fn shrinkfs_unmount_waits_for_the_mount_and_reports_files_it_could_not_store() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    let Some(_bucket_fs) = Tmpfs::new(&bucket, "2m") else {
        println!("SKIPPED: cannot mount a tmpfs here");
        return;
    };
    let mut m = mount(bucket.to_str().unwrap(), &mnt, &["--codec", "none"], &[]);
    let out = py(
        "import os,sys,errno\n\
         fd=os.open(sys.argv[1],os.O_WRONLY|os.O_CREAT,0o644)\n\
         os.write(fd,os.urandom(4<<20))\n\
         try:\n    os.close(fd); print('close 0')\n\
         except OSError as e:\n    print('close', errno.errorcode[e.errno])\n",
        &[mnt.join("big").to_str().unwrap()],
    );
    assert!(ok(&out).contains("close ENOSPC"), "the full bucket failed the close: {}", ok(&out));
    let out = Command::new(common::bin()).arg("unmount").arg(&mnt).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "unmount: {said}");
    assert!(said.contains("could not be stored"), "unmount names the loss: {said}");
    // It returned once the process had ended (a zombie until this test reaps it).
    let pid = m.pid();
    let state = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(state.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')), "{state}");
    assert!(m.wait_exit(5), "{}", m.log());
    assert_eq!(m.status.unwrap().code(), Some(3), "{}", m.log());
}

/// A mount started under a low soft limit of open descriptors raises it to the hard limit, so
/// hundreds of files written at once all close (each holds a staging file until stored). Found
/// by a black-box probe: past the soft limit every close failed with `EMFILE`, and the mount
/// stayed broken.
#[test]
fn the_mount_raises_its_open_files_limit_and_many_files_written_at_once_all_close() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir(&bucket).unwrap();
    // Inherited by the mount (nextest runs each test in a process of its own).
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum.unwrap_or(4096).min(4096);
    let low = rustix::process::Rlimit { current: Some(128), maximum: Some(hard) };
    rustix::process::setrlimit(rustix::process::Resource::Nofile, low).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    // (The writer below gets room for its own descriptors back.)
    let room = rustix::process::Rlimit { current: Some(hard), maximum: Some(hard) };
    rustix::process::setrlimit(rustix::process::Resource::Nofile, room).unwrap();
    let limits = fs::read_to_string(format!("/proc/{}/limits", m.pid())).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap().to_owned();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[3], words[4], "soft limit raised to the hard one: {line}");
    let out = py(
        "import os,sys\n\
         d=sys.argv[1]\n\
         fds=[os.open(f'{d}/f{i}',os.O_WRONLY|os.O_CREAT,0o644) for i in range(300)]\n\
         [os.write(fd,(b'%d ' % i)*1000) for i,fd in enumerate(fds)]\n\
         [os.close(fd) for fd in fds]\n\
         print('closed', len(fds))\n",
        &[mnt.to_str().unwrap()],
    );
    assert!(ok(&out).contains("closed 300"), "{}", m.log());
    m.unmount();
    for i in [0, 150, 299] {
        assert_eq!(unpack(&bucket.join(format!("f{i}"))), format!("{i} ").repeat(1000).into_bytes());
    }
}

/// A write past the end of a file that the full staging disk cuts short leaves no bytes where
/// the file then has a hole: once there is room, a write further out makes every byte between
/// the write's reported end and it read as zeros.
#[test]
fn a_write_the_full_staging_disk_cut_short_leaves_zeros_in_the_hole_after_it() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt, staging) = (t.path().join("bucket"), t.path().join("mnt"), t.path().join("staging"));
    fs::create_dir(&bucket).unwrap();
    let Some(_staging_fs) = Tmpfs::new(&staging, "8m") else {
        println!("SKIPPED: cannot mount a tmpfs here");
        return;
    };
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--staging-dir", staging.to_str().unwrap()], &[]);
    let out = py(
        "import os,sys,errno\n\
         path,filler=sys.argv[1:3]\n\
         MiB=1<<20\n\
         fd=os.open(path,os.O_WRONLY|os.O_CREAT|os.O_TRUNC,0o644)\n\
         head=bytes((i*7)%251 for i in range(MiB))\n\
         os.write(fd,head); os.pwrite(fd,b'P'*10,0)\n\
         f=os.open(filler,os.O_WRONLY|os.O_CREAT,0o644)\n\
         try:\n    while True: os.write(f,b'F'*65536)\n\
         except OSError as e:\n    assert e.errno==errno.ENOSPC\n\
         os.ftruncate(f,os.fstat(f).st_size-(3*MiB)//2)\n\
         try:\n    n=os.pwrite(fd,b'N'*(4*MiB),2*MiB)\n\
         except OSError as e:\n    assert e.errno==errno.ENOSPC; n=0\n\
         assert n<4*MiB, 'the staging disk did not fill'\n\
         os.close(f); os.unlink(filler)\n\
         os.pwrite(fd,b'Z',8*MiB); os.close(fd)\n\
         want=bytearray(b'P'*10+head[10:])+bytearray(MiB)+bytearray(b'N'*n)\n\
         want+=bytearray(8*MiB-len(want))+b'Z'\n\
         got=open(path,'rb').read()\n\
         bad=next((i for i in range(max(len(got),len(want))) if got[i:i+1]!=want[i:i+1]),None)\n\
         print('short write', n, 'first difference', bad)\n\
         assert bad is None\n",
        &[mnt.join("f").to_str().unwrap(), staging.join("filler").to_str().unwrap()],
    );
    println!("{}", ok(&out).trim_end());
    drop(m);
}

/// With the write-back cache, an overwrite the full bucket refuses shows, on the same mount,
/// either the previous version (bytes written back from the page cache were refused: the new
/// version is lost) or the new one (its store failed at close: kept, and tried again), never the
/// previous bytes at the new size, followed by zeros no one wrote (the kernel trusted its own
/// size of the dropped version). Found by a black-box probe.
#[test]
fn an_overwrite_the_full_bucket_refused_never_shows_bytes_no_one_wrote_with_the_writeback_cache() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    let Some(_bucket_fs) = Tmpfs::new(&bucket, "20m") else {
        println!("SKIPPED: cannot mount a tmpfs here");
        return;
    };
    let mut m = mount(bucket.to_str().unwrap(), &mnt, &["--writeback-cache"], &[]);
    let out = py(
        "import os,sys\n\
         os.chdir(sys.argv[1])\n\
         old=os.urandom(5<<20)\n\
         with open('keep','wb') as f: f.write(old)\n\
         new=os.urandom(30<<20)\n\
         fd=os.open('keep',os.O_WRONLY|os.O_TRUNC)\n\
         done=0\n\
         try:\n    while done<len(new): done+=os.write(fd,new[done:done+(1<<20)])\n\
         except OSError: pass\n\
         try:\n    os.close(fd); closed='ok'\n\
         except OSError as e: closed=e.strerror\n\
         assert closed!='ok', 'the bucket did not fill'\n\
         size=os.stat('keep').st_size\n\
         got=open('keep','rb').read()\n\
         print('close', closed, 'size', size, 'read', len(got))\n\
         assert size==len(got), 'the size is not what reads'\n\
         assert got==old or got==new[:done], 'neither the previous version nor the kept new one'\n",
        &[mnt.to_str().unwrap()],
    );
    println!("{}", ok(&out).trim_end());
    // The bucket still full: either way the new version is not stored, the unmount says so, and
    // the bucket holds the previous one.
    let out = Command::new(common::bin()).arg("unmount").arg(&mnt).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "unmount: {}", String::from_utf8_lossy(&out.stderr));
    assert!(m.wait_exit(20), "{}", m.log());
    assert_eq!(unpack(&bucket.join("keep")).len(), 5 << 20);
}

#[test]
fn sigterm_never_publishes_a_file_still_being_written_and_unmounts_once_it_is_closed() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir(&bucket).unwrap();
    let mut m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    let data = text(24 << 20);
    {
        use std::io::Write;
        let mut f = fs::File::create(mnt.join("open.txt")).unwrap();
        f.write_all(&data[..12 << 20]).unwrap();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(m.pid(), libc::SIGTERM) };
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!bucket.join("open.txt").exists(), "a prefix was published while the writer writes");
        f.write_all(&data[12 << 20..]).unwrap();
    }
    assert!(m.wait_exit(30), "the mount ends once its last file is closed: {}", m.log());
    assert!(unpack(&bucket.join("open.txt")) == data);
}

#[test]
fn kill_9_during_a_write_leaves_the_previous_object_and_cleanup_removes_the_leftovers() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--codec", "none"], &[]);
    let old = text(1 << 20);
    fs::write(mnt.join("f"), &old).unwrap();
    // A rewrite in progress: parts of a multipart upload are already in the bucket's temp area.
    let mut writer = endless_rewrite(&mnt.join("f"));
    let tmp = bucket.join(".shrinkfs-tmp");
    wait_for_an_entry(&tmp);
    m.crash();
    let _ = writer.kill();
    let _ = writer.wait();
    assert!(unpack(&bucket.join("f")) == old, "the key holds the previous object");
    assert!(fs::read_dir(&tmp).unwrap().count() > 0, "the crash left its temporary file");
    let out = Command::new(common::bin()).args(["cleanup", bucket.to_str().unwrap(), "--older-than", "0"]).output();
    let said = ok(&out.unwrap());
    assert!(said.contains("removed 1 "), "cleanup reports what it removed: {said}");
    assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0, "no leftover remains");
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    assert!(fs::read(mnt.join("f")).unwrap() == old);
    drop(m);
}

#[test]
fn a_ten_second_outage_of_the_s3_server_during_a_300_mib_write_is_ridden_out() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("s3");
    fs::create_dir_all(root.join("bkt")).unwrap();
    let Some(mut server) = s3_server(&root) else {
        println!("SKIPPED: no rclone for a local S3 server");
        return;
    };
    let mnt = t.path().join("mnt");
    let endpoint = server.endpoint.clone();
    let env = server.env();
    let addr = free_addr();
    let m = mount("s3://bkt", &mnt, &["--endpoint-url", &endpoint, "--metrics-addr", &addr], &env);
    let src = t.path().join("src");
    let mut data = text(300 << 20);
    for (i, chunk) in data.chunks_mut(1 << 20).enumerate().filter(|(i, _)| i % 3 == 0) {
        chunk[..4096].copy_from_slice(&noise(4096, i as u64));
    }
    fs::write(&src, &data).unwrap();
    let writer = Command::new("dd")
        .args([&format!("if={}", src.display()), &format!("of={}", mnt.join("big").display())])
        .args(["bs=1M", "conv=fsync"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut writer = writer;
    std::thread::sleep(Duration::from_millis(300));
    if let Some(st) = writer.try_wait().unwrap() {
        let out = writer.wait_with_output().unwrap();
        panic!("the write ended ({st}) before the server stopped: {}", String::from_utf8_lossy(&out.stderr));
    }
    server.stop();
    std::thread::sleep(Duration::from_secs(10));
    server.restart();
    let out = writer.wait_with_output().unwrap();
    assert!(out.status.success(), "the write failed: {}", String::from_utf8_lossy(&out.stderr));
    // The outage shows: failed tries and retries, in the metrics and in `shrinkfs stats`.
    let out = Command::new(common::bin())
        .arg("stats")
        .arg(&mnt)
        .args(["--once", "--json", "--interval", "0.2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["store_errors"].as_f64().unwrap() >= 1.0 && r["store_retries"].as_f64().unwrap() >= 1.0, "{r}");
    m.unmount();
    let m = mount("s3://bkt", &mnt, &["--endpoint-url", &endpoint], &env);
    assert!(fs::read(mnt.join("big")).unwrap() == data, "byte-identical after the outage");
    drop(m);
}

#[test]
fn a_sequential_write_needs_no_staging_space_for_the_whole_file() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt, staging) = (t.path().join("bucket"), t.path().join("mnt"), t.path().join("staging"));
    fs::create_dir(&bucket).unwrap();
    let Some(_staging_fs) = Tmpfs::new(&staging, "20m") else {
        println!("SKIPPED: cannot mount a tmpfs here");
        return;
    };
    let args = ["--codec", "none", "--staging-dir", staging.to_str().unwrap()];
    let m = mount(bucket.to_str().unwrap(), &mnt, &args, &[]);
    let data = noise(100 << 20, 7);
    let src = t.path().join("src");
    fs::write(&src, &data).unwrap();
    let out = Command::new("dd")
        .args([&format!("if={}", src.display()), &format!("of={}", mnt.join("big").display()), "bs=1M"])
        .args(["conv=fsync"])
        .output()
        .unwrap();
    assert!(out.status.success(), "100 MiB through a 20 MiB staging disk: {}", String::from_utf8_lossy(&out.stderr));
    m.unmount();
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    assert!(fs::read(mnt.join("big")).unwrap() == data);
    drop(m);
}

#[test]
fn kill_9_during_an_s3_write_leaves_a_marker_that_cleanup_aborts() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("s3");
    fs::create_dir_all(root.join("bkt")).unwrap();
    let Some(server) = s3_server(&root) else {
        println!("SKIPPED: no rclone for a local S3 server");
        return;
    };
    let (mnt, endpoint, env) = (t.path().join("mnt"), server.endpoint.clone(), server.env());
    let m = mount("s3://bkt", &mnt, &["--endpoint-url", &endpoint, "--codec", "none"], &env);
    let old = text(1 << 20);
    fs::write(mnt.join("f"), &old).unwrap();
    let mut writer = endless_rewrite(&mnt.join("f"));
    let markers = root.join("bkt/.shrinkfs-tmp/uploads");
    wait_for_an_entry(&markers);
    m.crash();
    let _ = writer.kill();
    let _ = writer.wait();
    assert!(unpack(&root.join("bkt/f")) == old, "the key holds the previous object");
    let out = Command::new(common::bin())
        .args(["cleanup", "s3://bkt", "--older-than", "0", "--endpoint-url", &endpoint])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let said = ok(&out);
    assert!(said.contains("aborted 1 interrupted upload"), "{said}");
    assert_eq!(fs::read_dir(&markers).map(|d| d.count()).unwrap_or(0), 0, "no marker remains");
    let m = mount("s3://bkt", &mnt, &["--endpoint-url", &endpoint], &env);
    assert!(fs::read(mnt.join("f")).unwrap() == old);
    assert!(!fs::read_dir(&mnt).unwrap().any(|e| e.unwrap().file_name() == ".shrinkfs-tmp"), "markers are hidden");
    drop(m);
}

/// A successful fsync, through any descriptor of the file, and every `O_SYNC`/`O_DSYNC` write
/// (or any write on a `sync` mount) leave the file in the bucket while its writer still has it
/// open: coreutils' `sync FILE` fsyncs a read-only descriptor, and a write-only handle goes around
/// the kernel's page cache, where the kernel sends no fsync after a synchronous write.
#[test]
fn an_fsync_through_any_descriptor_and_every_synchronous_write_store_the_file_before_close() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (bucket, mnt) = (t.path().join("bucket"), t.path().join("mnt"));
    fs::create_dir(&bucket).unwrap();
    // Each case writes with its writer still open, then the bucket's object is unpacked and
    // compared (by the program, before it closes anything).
    let program = "import os,sys,subprocess\n\
         shrinkfs,mnt,bucket,case=sys.argv[1:5]\n\
         data=bytes((i*31+7)%251 for i in range(300000))\n\
         def stored(name):\n    return subprocess.run([shrinkfs,'unpack',os.path.join(bucket,name),'-'],capture_output=True).stdout\n\
         p=os.path.join(mnt,case)\n\
         if case=='fsync-read-only':\n\
         \x20   w=os.open(p,os.O_WRONLY|os.O_CREAT|os.O_TRUNC,0o644); os.write(w,data)\n\
         \x20   r=os.open(p,os.O_RDONLY|os.O_NONBLOCK); os.fsync(r)\n\
         \x20   assert stored(case)==data, 'an fsync of a read-only descriptor stored nothing'\n\
         \x20   os.close(r); os.close(w)\n\
         else:\n\
         \x20   extra={'o-sync':os.O_SYNC,'o-dsync':os.O_DSYNC,'o-append-sync':os.O_APPEND|os.O_SYNC,'sync-mount':0}[case]\n\
         \x20   w=os.open(p,os.O_WRONLY|os.O_CREAT|os.O_TRUNC|extra,0o644)\n\
         \x20   os.write(w,data)\n\
         \x20   assert stored(case)==data, case+': the write returned before the file was stored'\n\
         \x20   os.write(w,data[:1000])\n\
         \x20   assert stored(case)==data+data[:1000], case+': the second write'\n\
         \x20   os.close(w)\n\
         print('ok', case)\n";
    let bin = common::bin();
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    for case in ["fsync-read-only", "o-sync", "o-dsync", "o-append-sync"] {
        let out = py(program, &[bin.to_str().unwrap(), mnt.to_str().unwrap(), bucket.to_str().unwrap(), case]);
        assert!(ok(&out).contains("ok"), "{case}");
    }
    m.unmount();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["-o", "sync"], &[]);
    let out = py(program, &[bin.to_str().unwrap(), mnt.to_str().unwrap(), bucket.to_str().unwrap(), "sync-mount"]);
    assert!(ok(&out).contains("ok"));
    drop(m);
}
