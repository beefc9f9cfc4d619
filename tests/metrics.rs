//! The metrics endpoint of a real mount (`--metrics-addr`): only `GET /metrics` is served, in the
//! format the `Accept` header asks for; both bodies parse with the prometheus-client package's
//! Prometheus and OpenMetrics parsers (tools/parse_metrics.py) with every documented metric's type
//! and help intact; expected answers (ENOENT on lookup, ENODATA on getxattr) are not errors; and
//! the metrics only a mount moves (FUSE operations, mount and build labels, dirty bytes, the
//! process) move.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{http, metric, mount, mount_unavailable, mount_with_metrics, repo, text};

macro_rules! require_fuse {
    () => {
        if let Some(why) = mount_unavailable() {
            println!("SKIPPED: real mount not possible here: {why}");
            return;
        }
    };
}

fn python() -> PathBuf {
    common::python("prometheus_client")
}

/// What a parser saw: family -> (type, help).
fn parse(kind: &str, body: &str) -> BTreeMap<String, (String, String)> {
    let t = tempfile::NamedTempFile::new().unwrap();
    fs::write(t.path(), body).unwrap();
    let out =
        Command::new(python()).arg(repo().join("tools/parse_metrics.py")).arg(kind).arg(t.path()).output().unwrap();
    assert!(out.status.success(), "{kind} parser: {}\n{body}", String::from_utf8_lossy(&out.stderr));
    let v: BTreeMap<String, (String, String, u64)> = serde_json::from_slice(&out.stdout).unwrap();
    v.into_iter().map(|(k, (t, h, _))| (k, (t, h))).collect()
}

/// (name, type) of each metric docs/OPERATING.md lists.
fn documented() -> Vec<(String, String)> {
    let doc = fs::read_to_string(repo().join("docs/OPERATING.md")).unwrap();
    let table = doc.split("## Metrics").nth(1).unwrap();
    table
        .lines()
        .filter_map(|l| {
            let mut cells = l.strip_prefix("| `")?.split('|');
            let name = cells.next()?.trim().trim_end_matches('`').to_owned();
            Some((name, cells.next()?.trim().to_owned()))
        })
        .collect()
}

#[test]
fn the_endpoint_serves_both_formats_and_both_parsers_read_every_documented_metric() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    // A bucket path with a double quote and a backslash: label values the formats must escape.
    let (bucket, mnt, addr) = (t.path().join("bucket\"q\\x"), t.path().join("mnt"), common::free_addr());
    fs::create_dir(&bucket).unwrap();
    let m = mount(bucket.to_str().unwrap(), &mnt, &["--metrics-addr", &addr, "--gpu", "off"], &[]);
    fs::write(mnt.join("f"), text(1 << 20)).unwrap();
    assert!(fs::read(mnt.join("f")).unwrap() == text(1 << 20));
    // Expected answers: a missing name, a missing attribute.
    assert!(fs::metadata(mnt.join("missing")).is_err());
    let path = std::ffi::CString::new(mnt.join("f").to_str().unwrap()).unwrap();
    let mut buf = [0u8; 16];
    // SAFETY: a valid path, name and buffer.
    let got = unsafe { libc::getxattr(path.as_ptr(), c"user.none".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!((got, std::io::Error::last_os_error().raw_os_error()), (-1, Some(libc::ENODATA)));
    // A file open for writing, some bytes in it, not closed: dirty.
    let mut open = fs::File::create(mnt.join("open")).unwrap();
    open.write_all(&text(300_000)).unwrap();

    // A write is answered once its bytes are taken, before they are copied in; the gauge shows
    // them once the copy ends.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let (status, ctype, plain) = loop {
        let got = http(&addr, "GET", "/metrics", None);
        if metric(&got.2, "shrinkfs_dirty_bytes") >= 300_000.0 || std::time::Instant::now() > deadline {
            break got;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!((status, ctype.as_str()), (200, "text/plain; version=0.0.4; charset=utf-8"));
    let om_accept = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    let (status, ctype, om) = http(&addr, "GET", "/metrics", Some(om_accept));
    assert_eq!((status, ctype.as_str()), (200, "application/openmetrics-text; version=1.0.0; charset=utf-8"));
    assert!(om.ends_with("# EOF\n") && !plain.contains("# EOF"));
    assert_eq!(http(&addr, "GET", "/", None).0, 404);
    assert_eq!(http(&addr, "POST", "/metrics", None).0, 405);

    let (p, o) = (parse("prometheus", &plain), parse("openmetrics", &om));
    for (name, kind) in documented() {
        // The Python parsers name a counter's family without `_total`, an info's without `_info`
        // (OpenMetrics); Prometheus text has no info type: a gauge.
        let base = name.strip_suffix("_total").unwrap_or(&name);
        let (pn, pt) = if kind == "info" { (name.as_str(), "gauge") } else { (base, kind.as_str()) };
        let on = if kind == "info" { name.strip_suffix("_info").unwrap() } else { base };
        let (t1, h1) = p.get(pn).unwrap_or_else(|| panic!("{name}: not in the Prometheus parse: {p:?}"));
        let (t2, h2) = o.get(on).unwrap_or_else(|| panic!("{name}: not in the OpenMetrics parse: {o:?}"));
        assert_eq!((t1.as_str(), t2.as_str()), (pt, kind.as_str()), "{name}: types");
        assert!(!h1.is_empty() && h1 == h2, "{name}: help {h1:?} / {h2:?}");
    }

    // What only a mount moves.
    let ops = "shrinkfs_fuse_op_duration_seconds_count";
    assert!(metric(&plain, &format!("{ops}{{op=\"lookup\",outcome=\"expected\"}}")) >= 1.0, "{plain}");
    assert!(metric(&plain, &format!("{ops}{{op=\"getxattr\",outcome=\"expected\"}}")) >= 1.0, "{plain}");
    assert_eq!(metric(&plain, &format!("{ops}{{op=\"getxattr\",outcome=\"error\"}}")), 0.0, "{plain}");
    assert!(metric(&plain, &format!("{ops}{{op=\"write\",outcome=\"ok\"}}")) >= 1.0, "{plain}");
    assert!(metric(&plain, "shrinkfs_dirty_bytes") >= 300_000.0, "{plain}");
    let escaped = bucket.display().to_string().replace('\\', "\\\\").replace('"', "\\\"");
    let source = format!("source=\"{escaped}\"");
    assert!(plain.lines().any(|l| l.starts_with("shrinkfs_mount_info{") && l.contains(&source)), "{plain}");
    assert!(plain.lines().any(|l| l.starts_with("shrinkfs_build_info{") && l.contains("version=\"")), "{plain}");
    assert!(metric(&plain, "process_resident_memory_bytes") > 0.0 && metric(&plain, "process_cpu_seconds_total") > 0.0);
    drop(open);
    m.unmount();
}

/// `shrinkfs stats MOUNTPOINT --once --json`, as JSON.
fn stats(mnt: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(common::bin()).arg("stats").arg(mnt).args(["--once", "--interval", "1"]).args(extra).output().unwrap()
}

#[test]
fn shrinkfs_stats_finds_the_mount_endpoint_and_shows_what_moves() {
    require_fuse!();
    let t = tempfile::tempdir().unwrap();
    let (m, bucket, mnt, _) = mount_with_metrics(t.path(), &[]);
    // A writer during the reading: the rates move.
    let writer = {
        let f = mnt.join("f.log");
        std::thread::spawn(move || {
            for i in 0..20 {
                fs::write(&f, text((1 << 20) + i)).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(40));
            }
        })
    };
    let out = stats(&mnt, &["--json"]);
    writer.join().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["written_bytes_per_s"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["store_written_bytes_per_s"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["ratio"].as_f64().unwrap() > 2.0, "text compresses: {r}");
    assert!(r["fuse_ops_per_s"].as_f64().unwrap() > 0.0 && r["resident_bytes"].as_f64().unwrap() > 0.0, "{r}");
    assert_eq!((r["store_errors"].as_f64(), r["fuse_errors"].as_f64()), (Some(0.0), Some(0.0)), "{r}");
    // The view for people.
    let out = stats(&mnt, &[]);
    let view = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && view.contains("ratio") && view.contains("hit rate"), "{view}");
    m.unmount();

    // A mount without an endpoint: one line, exit 3.
    let m = mount(bucket.to_str().unwrap(), &mnt, &[], &[]);
    let out = stats(&mnt, &["--json"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(said.contains("serves no metrics") && said.trim().lines().count() == 1, "{said}");
    // An endpoint given by hand that answers in HTTP/1.0 (Python's file server): read as well.
    let served = t.path().join("served");
    fs::create_dir(&served).unwrap();
    fs::write(served.join("metrics"), "shrinkfs_fuse_op_duration_seconds_count{op=\"read\",outcome=\"ok\"} 7\n")
        .unwrap();
    let addr = common::free_addr();
    let port = addr.rsplit(':').next().unwrap();
    let mut server = Command::new("python3")
        .args(["-m", "http.server", "--bind", "127.0.0.1", "--directory", served.to_str().unwrap(), port])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() && start.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = stats(&mnt, &["--json", "--metrics-addr", &addr]);
    let _ = server.kill();
    let _ = server.wait();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    m.unmount();
}
