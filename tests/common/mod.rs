//! Helpers of the real-mount tests: mount the `shrinkfs` binary through /dev/fuse with a guard that
//! unmounts on drop, and a local S3-compatible server (rclone serve s3) on 127.0.0.1.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_shrinkfs"))
}

/// Why real mounts cannot run here, if they cannot.
pub fn mount_unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 && which("fusermount3").is_none() {
        return Some("not root and no fusermount3".into());
    }
    None
}

/// Path of an executable on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

fn is_mounted(dir: &Path) -> bool {
    let want = dir.to_str().unwrap();
    std::fs::read_to_string("/proc/mounts").unwrap_or_default().lines().any(|l| l.split(' ').nth(1) == Some(want))
}

/// A running mount; unmounted (and the process reaped) on drop.
pub struct Mounted {
    child: Option<Child>,
    /// The mount point.
    pub dir: PathBuf,
    log: PathBuf,
    /// How the process ended, once [`Mounted::wait_exit`] saw it end.
    pub status: Option<std::process::ExitStatus>,
}

/// Mounts `source` at `dir` with extra arguments and environment (and `--metadata-ttl 0` unless
/// `extra` sets it).
pub fn mount(source: &str, dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Mounted {
    std::fs::create_dir_all(dir).unwrap();
    let log = dir.with_extension("log");
    let mut cmd = Command::new(bin());
    cmd.arg("mount").arg(source).arg(dir).args(extra);
    if !extra.contains(&"--metadata-ttl") {
        cmd.args(["--metadata-ttl", "0"]);
    }
    // No settings file of the host (an installed /etc/shrinkfs/config.toml) changes the tests.
    cmd.env("SHRINKFS_CONFIG", "").envs(env.iter().copied()).env("RUST_LOG", "warn");
    cmd.stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap());
    let mut child = cmd.spawn().expect("start shrinkfs mount");
    let start = Instant::now();
    while !is_mounted(dir) {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("mount exited with {status}: {}", std::fs::read_to_string(&log).unwrap_or_default());
        }
        assert!(start.elapsed() < Duration::from_secs(20), "mount did not appear within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    Mounted { child: Some(child), dir: dir.to_path_buf(), log, status: None }
}

impl Mounted {
    /// Peak resident memory of the mount process so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let pid = self.child.as_ref().expect("still running").id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).expect("VmHWM line");
        kb.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap() * 1024
    }

    /// The mount process's id.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("still running").id() as i32
    }

    /// Waits up to `secs` for the mount process to exit by itself; whether it did.
    pub fn wait_exit(&mut self, secs: u64) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(secs) {
            if let Some(c) = self.child.as_mut()
                && let Some(status) = c.try_wait().unwrap()
            {
                self.child = None;
                self.status = Some(status);
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Kills the mount process with SIGKILL (a crash) and detaches the dead mount.
    pub fn crash(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }

    /// The mount's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Unmounts and waits for the process; panics if it failed.
    pub fn unmount(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let start = Instant::now();
        loop {
            let out = Command::new(bin()).arg("unmount").arg(&self.dir).output().unwrap();
            if out.status.success() || !is_mounted(&self.dir) {
                break;
            }
            if start.elapsed() > Duration::from_secs(10) {
                let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        assert!(!log.contains("panicked"), "the mount panicked: {log}");
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- mount log ---\n{}", std::fs::read_to_string(&self.log).unwrap_or_default());
            let _ = self.child.as_mut().map(|c| c.kill());
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
            return;
        }
        self.stop();
    }
}

/// A local S3-compatible server serving the buckets under `root` (each directory is a bucket).
pub struct S3Server {
    child: Option<Child>,
    /// Endpoint URL.
    pub endpoint: String,
    addr: String,
    root: PathBuf,
}

/// Credentials the test server accepts.
pub const S3_KEY: (&str, &str) = ("shrinkfstest", "shrinkfstestsecret");

/// Path of the rclone the test set-up installed, if any.
pub fn rclone() -> Option<PathBuf> {
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-tools/bin/rclone");
    if local.is_file() { Some(local) } else { which("rclone") }
}

fn start_rclone(addr: &str, root: &Path) -> Option<Child> {
    let child = Command::new(rclone()?)
        .args(["serve", "s3", "--addr", addr, "--auth-key", &format!("{},{}", S3_KEY.0, S3_KEY.1)])
        .args(["--config", "/dev/null", "--vfs-cache-mode", "off"])
        .arg(root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let start = Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(start.elapsed() < Duration::from_secs(20), "rclone serve s3 did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(child)
}

/// Starts `rclone serve s3` on a free loopback port.
pub fn s3_server(root: &Path) -> Option<S3Server> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let child = start_rclone(&addr, root)?;
    Some(S3Server { child: Some(child), endpoint: format!("http://{addr}"), addr, root: root.to_path_buf() })
}

impl S3Server {
    /// Environment for shrinkfs to reach this server.
    pub fn env(&self) -> Vec<(&'static str, &'static str)> {
        vec![("AWS_ACCESS_KEY_ID", S3_KEY.0), ("AWS_SECRET_ACCESS_KEY", S3_KEY.1), ("AWS_REGION", "us-east-1")]
    }
}

impl S3Server {
    /// Stops the server (an outage: connections are refused).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same address.
    pub fn restart(&mut self) {
        self.stop();
        self.child = start_rclone(&self.addr, &self.root);
        assert!(self.child.is_some(), "rclone restarted");
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Compressible test bytes.
pub fn text(n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 64);
    let mut i = 0u64;
    while out.len() < n {
        out.extend_from_slice(format!("{i} GET /api/items/{} 200 {}\n", i % 97, i * 31 % 5000).as_bytes());
        i += 1;
    }
    out.truncate(n);
    out
}

/// A free local address for `--metrics-addr`.
pub fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    format!("127.0.0.1:{port}")
}

/// (status, content type, body) of `METHOD PATH` at `addr`, asking for `accept`.
pub fn http(addr: &str, method: &str, path: &str, accept: Option<&str>) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let ctype = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-type: ").map(str::to_owned))
        .unwrap_or_default();
    (status, ctype, body.to_owned())
}

/// The body of the metrics endpoint at `addr` (Prometheus text).
pub fn scrape(addr: &str) -> String {
    http(addr, "GET", "/metrics", None).2
}

/// The sum of the samples in `body` whose line starts with `prefix`.
pub fn metric(body: &str, prefix: &str) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#') && l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The repository root.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The test tools' Python (scripts/setup.sh --test puts it in target/test-tools;
/// `SHRINKFS_PYTHON` overrides), checked to import `modules` (a comma-separated list).
pub fn python(modules: &str) -> PathBuf {
    let p = std::env::var_os("SHRINKFS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/test-tools/bin/python"));
    let ok = Command::new(&p).args(["-c", &format!("import {modules}")]).output().is_ok_and(|o| o.status.success());
    assert!(ok, "{}: needs tools/requirements.txt installed ({modules}): run scripts/setup.sh --test", p.display());
    p
}

/// Mounts a new local-directory bucket under `dir` with its metrics served and the GPU off (and
/// `extra`): the mount, the bucket, the mount point and the metrics address.
pub fn mount_with_metrics(dir: &Path, extra: &[&str]) -> (Mounted, PathBuf, PathBuf, String) {
    let (bucket, mnt) = (dir.join("bucket"), dir.join("mnt"));
    std::fs::create_dir(&bucket).unwrap();
    let addr = free_addr();
    let args: Vec<&str> =
        ["--metrics-addr", addr.as_str(), "--gpu", "off"].into_iter().chain(extra.iter().copied()).collect();
    let m = mount(bucket.to_str().unwrap(), &mnt, &args, &[]);
    (m, bucket, mnt, addr)
}
