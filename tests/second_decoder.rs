//! A second decoder, written in Python from docs/FORMAT.md alone (tools/skf.py), against shrinkfs:
//! both decode every object of a matrix (CPU codecs × frame sizes × key × real inputs) byte for
//! byte, ranges included, and format version 2 objects (ctime and atime) sealed and not; the
//! Python decoder reads frames nVCOMP wrote on a GPU; shrinkfs unpacks what the Python encoder
//! writes, in both versions; and both refuse every malformed object (each rule of the spec broken
//! once), reading front to back and from the tail, naming the rule FORMAT.md gives it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use shrinkfs_codec::error::Rule;
use shrinkfs_codec::format::{FOOTER_LEN, FRAME_HEADER_LEN, HEADER_LEN, TAG_LEN, Version, checksum};
use shrinkfs_codec::seal::{MasterKey, ObjectKey};
use shrinkfs_codec::{CodecId, CodecParams, Dictionary, EncodeConfig, FileMeta, Layout, ObjectContext, ObjectWriter};

mod common;
#[path = "../codec/tests/common/mod.rs"]
mod vectors;

use common::repo;

fn python() -> PathBuf {
    common::python("zstandard, lz4, cryptography")
}

/// Which decoder a command runs.
#[derive(Clone, Copy, PartialEq)]
enum Tool {
    Shrinkfs,
    Skf,
}

/// One command: the tool, its arguments, and the file its standard output goes to.
struct Cmd {
    tool: Tool,
    args: Vec<String>,
    stdout: Option<PathBuf>,
}

fn cmd(tool: Tool, args: &[&str], key: Option<&Path>) -> Cmd {
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    if let Some(k) = key {
        args.extend(["--key-file".to_owned(), k.to_str().unwrap().to_owned()]);
    }
    Cmd { tool, args, stdout: None }
}

/// How a command ended: its exit code and what it printed on stderr.
struct Ran {
    code: i32,
    stderr: String,
}

/// Runs every command, a few at a time; outcomes in order. skf.py commands run in `skf.py batch`
/// processes (one per core), so Python starts a handful of times, not once per command.
fn run_all(cmds: &[Cmd]) -> Vec<Ran> {
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut out: Vec<Option<Ran>> = (0..cmds.len()).map(|_| None).collect();
    let skf: Vec<usize> = (0..cmds.len()).filter(|&i| cmds[i].tool == Tool::Skf).collect();
    let native: Mutex<std::vec::IntoIter<usize>> =
        Mutex::new((0..cmds.len()).filter(|&i| cmds[i].tool == Tool::Shrinkfs).collect::<Vec<_>>().into_iter());
    let results = Mutex::new(Vec::new());
    let python = if skf.is_empty() { PathBuf::new() } else { python() };
    std::thread::scope(|s| {
        for chunk in skf.chunks(skf.len().div_ceil(workers).max(1)) {
            let (python, results) = (&python, &results);
            s.spawn(move || {
                let mut child = Command::new(python)
                    .arg(repo().join("tools/skf.py"))
                    .arg("batch")
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("python runs");
                let mut stdin = child.stdin.take().unwrap();
                let lines: String = chunk
                    .iter()
                    .map(|&i| serde_json::json!({"args": cmds[i].args, "stdout": cmds[i].stdout}).to_string() + "\n")
                    .collect();
                let feeder = std::thread::spawn(move || stdin.write_all(lines.as_bytes()));
                let reply = child.wait_with_output().unwrap();
                feeder.join().unwrap().unwrap();
                let replies: Vec<serde_json::Value> = reply
                    .stdout
                    .split(|b| *b == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(|l| serde_json::from_slice(l).unwrap())
                    .collect();
                assert_eq!(replies.len(), chunk.len(), "skf.py batch stopped early");
                for (&i, r) in chunk.iter().zip(replies) {
                    let ran = Ran {
                        code: r["code"].as_i64().unwrap() as i32,
                        stderr: r["stderr"].as_str().unwrap().to_owned(),
                    };
                    results.lock().unwrap().push((i, ran));
                }
            });
        }
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let Some(i) = native.lock().unwrap().next() else { return };
                    let c = &cmds[i];
                    let stdout = match &c.stdout {
                        Some(p) => Stdio::from(std::fs::File::create(p).unwrap()),
                        None => Stdio::null(),
                    };
                    let o = Command::new(env!("CARGO_BIN_EXE_shrinkfs")).args(&c.args).stdout(stdout).output().unwrap();
                    let ran = Ran {
                        code: o.status.code().unwrap_or(-1),
                        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
                    };
                    results.lock().unwrap().push((i, ran));
                }
            });
        }
    });
    for (i, ran) in results.into_inner().unwrap() {
        out[i] = Some(ran);
    }
    out.into_iter().map(|r| r.expect("every command ran")).collect()
}

fn name(c: &Cmd) -> String {
    let tool = if c.tool == Tool::Skf { "skf.py" } else { "shrinkfs" };
    format!("{tool} {}", c.args.join(" "))
}

fn assert_none_failed(failures: Vec<String>, what: &str) {
    assert!(failures.is_empty(), "{} of the {what} failed:\n{}", failures.len(), failures.join("\n"));
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Real inputs (binaries, source, text, a lockfile), incompressible bytes, and the edge sizes.
fn inputs() -> Vec<(&'static str, Vec<u8>)> {
    let clip = |mut b: Vec<u8>, at: usize, n: usize| -> Vec<u8> {
        b.truncate(at + n);
        b.split_off(at.min(b.len()))
    };
    let exe = std::fs::read(env!("CARGO_BIN_EXE_shrinkfs")).unwrap();
    let libc = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("libc.so"))
        .map(|p| std::fs::read(p).unwrap())
        .expect("libc is mapped");
    let mut source = Vec::new();
    for dir in ["src", "codec/src", "fuse/src"] {
        let mut files: Vec<_> = std::fs::read_dir(repo().join(dir)).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files.into_iter().filter(|f| f.extension().is_some_and(|e| e == "rs")) {
            source.extend(std::fs::read(f).unwrap());
        }
    }
    let mut text = std::fs::read(repo().join("README.md")).unwrap();
    text.extend(std::fs::read(repo().join("docs/FORMAT.md")).unwrap());
    text.extend(std::fs::read(repo().join("BENCHMARKS.md")).unwrap());
    let mut noise = vec![0u8; 1 << 20];
    rand::fill(&mut noise[..]);
    noise.extend(std::iter::repeat_n(0u8, 100_000));
    vec![
        ("shrinkfs-elf", clip(exe, 4 << 20, 2 << 20)),
        ("libc", clip(libc, 0, 2 << 20)),
        ("rust-source", clip(source, 0, 2 << 20)),
        ("markdown", text),
        ("cargo-lock", std::fs::read(repo().join("Cargo.lock")).unwrap()),
        ("noise-then-zeros", noise),
        ("empty", Vec::new()),
        ("one-byte", vec![b'x']),
    ]
}

/// Every codec a CPU-only host reads, from the codec table: a new one is checked against the
/// second decoder as soon as the table has it.
fn codecs() -> Vec<&'static str> {
    CodecId::ALL.iter().filter(|c| !c.gpu_only()).map(|c| c.name()).collect()
}
const FRAME_SIZES: [(&str, u64); 4] = [("4K", 4 << 10), ("64K", 64 << 10), ("1M", 1 << 20), ("4M", 4 << 20)];

/// The frames a range read must fetch from an object cut into frames of `fs` bytes.
fn frames_for(start: u64, len: u64, size: u64, fs: u64) -> u64 {
    let end = (start + len).min(size);
    if start >= end { 0 } else { (end - 1) / fs - start / fs + 1 }
}

#[test]
fn both_decoders_agree_on_every_object_of_the_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = d.join("key");
    std::fs::write(&key, rand::random::<[u8; 32]>()).unwrap();
    let inputs = inputs();
    for (name, data) in &inputs {
        std::fs::write(d.join(name), data).unwrap();
    }
    struct Obj<'a> {
        tag: String,
        data: &'a [u8],
        frame_size: u64,
        key: Option<&'a Path>,
    }
    let mut objects = Vec::new();
    let mut packs = Vec::new();
    for (name, data) in &inputs {
        for codec in codecs() {
            for (fs_name, frame_size) in FRAME_SIZES {
                for sealed in [false, true] {
                    let tag = format!("{name}.{codec}.{fs_name}.{}", if sealed { "sealed" } else { "plain" });
                    let key = sealed.then_some(key.as_path());
                    let (src, obj) = (d.join(name), d.join(format!("{tag}.skf")));
                    packs.push(cmd(
                        Tool::Shrinkfs,
                        &["pack", "--codec", codec, "--frame-size", fs_name, p(&src), p(&obj)],
                        key,
                    ));
                    objects.push(Obj { tag, data, frame_size, key });
                }
            }
        }
    }
    assert_eq!(objects.len(), 384);
    let failures: Vec<String> = packs
        .iter()
        .zip(run_all(&packs))
        .filter(|(_, r)| r.code != 0)
        .map(|(c, r)| format!("{}: {}", name(c), r.stderr))
        .collect();
    assert_none_failed(failures, "packs");

    // Per object: whole, front to back, in both decoders; a range from the tail in both.
    let range_of = |data: &[u8]| (data.len() as u64 / 3, (data.len() as u64 / 2).min(300_000));
    let mut reads = Vec::new();
    for o in &objects {
        let obj = d.join(format!("{}.skf", o.tag));
        let (start, len) = range_of(o.data);
        let (start, len) = (start.to_string(), len.to_string());
        let range = format!("{start}:{len}");
        let mut c = [
            cmd(Tool::Shrinkfs, &["unpack", p(&obj), p(&d.join(format!("{}.rs", o.tag)))], o.key),
            cmd(Tool::Skf, &["decode", p(&obj), p(&d.join(format!("{}.py", o.tag)))], o.key),
            cmd(
                Tool::Shrinkfs,
                &["unpack", "--range", &range, p(&obj), p(&d.join(format!("{}.rs.range", o.tag)))],
                o.key,
            ),
            cmd(Tool::Skf, &["range", p(&obj), &start, &len], o.key),
        ];
        c[3].stdout = Some(d.join(format!("{}.py.range", o.tag)));
        reads.extend(c);
    }
    let ran = run_all(&reads);
    let mut failures = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        let (start, len) = range_of(o.data);
        let part = &o.data[start as usize..(start + len) as usize];
        let outputs = [
            (format!("{}.rs", o.tag), o.data),
            (format!("{}.py", o.tag), o.data),
            (format!("{}.rs.range", o.tag), part),
            (format!("{}.py.range", o.tag), part),
        ];
        for (k, (file, want)) in outputs.iter().enumerate() {
            let (c, r) = (&reads[4 * i + k], &ran[4 * i + k]);
            if r.code != 0 {
                failures.push(format!("{}: exit {}: {}", name(c), r.code, r.stderr.trim()));
            } else if std::fs::read(d.join(file)).unwrap() != *want {
                failures.push(format!("{}: different bytes", name(c)));
            }
        }
        // The Python reader from the tail says which frames it fetched: exactly those covering the range.
        let fetched = ran[4 * i + 3].stderr.lines().filter(|l| l.starts_with("fetched frame")).count() as u64;
        let covering = frames_for(start, len, o.data.len() as u64, o.frame_size);
        if fetched != covering {
            failures.push(format!("{}: fetched {fetched} frames, the range needs {covering}", name(&reads[4 * i + 3])));
        }
    }
    assert_none_failed(failures, "384 objects' reads");
}

/// Version 2 objects (ctime and atime recorded), sealed and unsealed, of every CPU codec: both
/// decoders read them whole, front to back, and by range from the tail, and `skf.py info` shows
/// the times shrinkfs recorded.
#[test]
fn both_decoders_read_version_2_objects() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key_bytes: [u8; 32] = rand::random();
    let key = d.join("key");
    std::fs::write(&key, key_bytes).unwrap();
    let inputs: Vec<_> = inputs()
        .into_iter()
        .filter(|(n, _)| ["rust-source", "noise-then-zeros", "empty", "one-byte"].contains(n))
        .collect();
    let metas = [
        FileMeta {
            mode: Some(0o100600),
            uid: Some(1000),
            gid: Some(1000),
            mtime: Some((1_700_000_000, 1)),
            ctime: Some((1_700_000_001, 999_999_999)),
            atime: Some((-1_000, 5)),
        },
        FileMeta { ctime: Some((i64::MIN, 0)), ..Default::default() },
        FileMeta { mode: Some(0o120777), atime: Some((i64::MAX, 0)), ..Default::default() },
    ];
    let mut objects = Vec::new();
    for (name, data) in &inputs {
        for codec in CodecId::ALL.iter().copied().filter(|c| !c.gpu_only()) {
            for sealed in [false, true] {
                let meta = metas[objects.len() % metas.len()];
                let config = EncodeConfig {
                    params: CodecParams { codec, level: 1, dict: None },
                    frame_size: 64 << 10,
                    key: sealed.then(|| MasterKey::from_bytes(&key_bytes).unwrap()),
                };
                let object = shrinkfs_codec::encode_all_with(&config, data, &meta).unwrap();
                let layout = Layout::parse(&object, object.len() as u64).unwrap();
                assert_eq!((layout.header.version, layout.footer.version), (Version::V2, Version::V2));
                let tag = format!("{name}.{codec}.{}", if sealed { "sealed" } else { "plain" });
                std::fs::write(d.join(format!("{tag}.skf")), &object).unwrap();
                objects.push((tag, &data[..], sealed.then_some(key.as_path()), meta));
            }
        }
    }
    assert_eq!(objects.len(), 48);
    let range_of = |data: &[u8]| (data.len() as u64 / 3, (data.len() as u64 / 2).min(300_000));
    let mut cmds = Vec::new();
    for (tag, data, key, _) in &objects {
        let obj = d.join(format!("{tag}.skf"));
        let (start, len) = range_of(data);
        let (start, len) = (start.to_string(), len.to_string());
        let range = format!("{start}:{len}");
        let mut c = [
            cmd(Tool::Shrinkfs, &["unpack", p(&obj), p(&d.join(format!("{tag}.rs")))], *key),
            cmd(Tool::Skf, &["decode", p(&obj), p(&d.join(format!("{tag}.py")))], *key),
            cmd(Tool::Shrinkfs, &["unpack", "--range", &range, p(&obj), p(&d.join(format!("{tag}.rs.range")))], *key),
            cmd(Tool::Skf, &["range", p(&obj), &start, &len], *key),
            cmd(Tool::Skf, &["info", p(&obj)], None),
        ];
        c[3].stdout = Some(d.join(format!("{tag}.py.range")));
        c[4].stdout = Some(d.join(format!("{tag}.info")));
        cmds.extend(c);
    }
    let ran = run_all(&cmds);
    let mut failures = Vec::new();
    for (i, (tag, data, _, meta)) in objects.iter().enumerate() {
        let (start, len) = range_of(data);
        let part = &data[start as usize..(start + len) as usize];
        let outputs = [("rs", *data), ("py", *data), ("rs.range", part), ("py.range", part)];
        for (k, (ext, want)) in outputs.iter().enumerate() {
            let (c, r) = (&cmds[5 * i + k], &ran[5 * i + k]);
            if r.code != 0 {
                failures.push(format!("{}: exit {}: {}", name(c), r.code, r.stderr.trim()));
            } else if std::fs::read(d.join(format!("{tag}.{ext}"))).unwrap() != *want {
                failures.push(format!("{}: different bytes", name(c)));
            }
        }
        let (c, r) = (&cmds[5 * i + 4], &ran[5 * i + 4]);
        if r.code != 0 {
            failures.push(format!("{}: exit {}: {}", name(c), r.code, r.stderr.trim()));
            continue;
        }
        let info: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join(format!("{tag}.info"))).unwrap()).unwrap();
        let time = |t: Option<(i64, u32)>| t.map_or(serde_json::Value::Null, |(s, ns)| serde_json::json!([s, ns]));
        let shown = (&info["meta"]["mtime"], &info["meta"]["ctime"], &info["meta"]["atime"]);
        if info["footer"]["version"] != 2
            || info["header"]["version"] != 2
            || shown != (&time(meta.mtime), &time(meta.ctime), &time(meta.atime))
        {
            failures.push(format!("{}: shows {} for {meta:?}", name(c), info["meta"]));
        }
    }
    assert_none_failed(failures, "48 version 2 objects' reads");
}

/// A one-frame object around a payload some other encoder (nVCOMP) produced.
fn wrap_payload(codec: CodecId, raw: &[u8], payload: &[u8]) -> Vec<u8> {
    let ctx = Arc::new(ObjectContext::for_writing(raw.len() as u32, None, None, Version::V1));
    let mut w = ObjectWriter::new(ctx.clone());
    let frame = shrinkfs_codec::frame::finish_payload(&ctx, 0, raw, codec, payload.to_vec());
    w.push(&frame);
    let mut object = w.header_bytes().to_vec();
    frame.put_into(&mut object);
    object.extend(w.finish());
    object
}

#[test]
fn the_second_decoder_reads_frames_nvcomp_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let mut vectors = Vec::new();
    for entry in std::fs::read_dir(repo().join("codec/tests/vectors")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "bin") {
            continue;
        }
        let stem = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let (codec, i) = stem.rsplit_once('-').unwrap();
        let codec: CodecId = codec.parse().unwrap();
        let raw = vectors::vector_input(i.parse().unwrap());
        let payload = std::fs::read(&path).unwrap();
        if codec.gpu_only() || payload.len() >= raw.len() {
            continue; // No CPU decoder exists; or a writer would have stored the bytes as they are.
        }
        std::fs::write(dir.path().join(format!("{stem}.skf")), wrap_payload(codec, &raw, &payload)).unwrap();
        vectors.push((stem, codec, raw));
    }
    let cmds: Vec<Cmd> = vectors
        .iter()
        .flat_map(|(stem, _, _)| {
            let obj = dir.path().join(format!("{stem}.skf"));
            [
                cmd(Tool::Skf, &["decode", p(&obj), p(&dir.path().join(format!("{stem}.py")))], None),
                cmd(Tool::Shrinkfs, &["unpack", p(&obj), p(&dir.path().join(format!("{stem}.rs")))], None),
            ]
        })
        .collect();
    let ran = run_all(&cmds);
    for (k, (c, r)) in cmds.iter().zip(&ran).enumerate() {
        let (stem, _, raw) = &vectors[k / 2];
        assert_eq!(r.code, 0, "{}: {}", name(c), r.stderr);
        let out = dir.path().join(format!("{stem}.{}", if k % 2 == 0 { "py" } else { "rs" }));
        assert!(std::fs::read(out).unwrap() == *raw, "{}: decoded different bytes", name(c));
    }
    let codecs: std::collections::BTreeSet<&str> = vectors.iter().map(|v| v.1.name()).collect();
    assert_eq!(codecs.into_iter().collect::<Vec<_>>(), ["deflate", "lz4", "lz4-block", "snappy", "zstd"]);
}

#[test]
fn shrinkfs_unpacks_what_the_second_encoder_writes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = d.join("key");
    std::fs::write(&key, rand::random::<[u8; 32]>()).unwrap();
    let inputs: Vec<_> =
        inputs().into_iter().filter(|(n, _)| ["libc", "markdown", "noise-then-zeros", "empty"].contains(n)).collect();
    let (mut encodes, mut unpacks, mut wants) = (Vec::new(), Vec::new(), Vec::new());
    for (name, data) in &inputs {
        std::fs::write(d.join(name), data).unwrap();
        for codec in codecs() {
            for sealed in [false, true] {
                // With --times skf.py records ctime and atime: a version 2 object.
                for times in [false, true] {
                    let tag = format!(
                        "{name}.{codec}.{}.v{}",
                        if sealed { "sealed" } else { "plain" },
                        if times { 2 } else { 1 }
                    );
                    let (obj, out) = (d.join(format!("{tag}.skf")), d.join(format!("{tag}.out")));
                    let key = sealed.then_some(key.as_path());
                    let src = d.join(name);
                    let mut args = vec!["encode", p(&src), p(&obj), "--codec", codec, "--frame-size", "65536"];
                    if times {
                        args.push("--times");
                    }
                    encodes.push(cmd(Tool::Skf, &args, key));
                    unpacks.push(cmd(Tool::Shrinkfs, &["unpack", p(&obj), p(&out)], key));
                    wants.push((out, data, obj, times.then_some(src)));
                }
            }
        }
    }
    let mut failures = Vec::new();
    for (c, r) in encodes.iter().zip(run_all(&encodes)).chain(unpacks.iter().zip(run_all(&unpacks))) {
        if r.code != 0 {
            failures.push(format!("{}: exit {}: {}", name(c), r.code, r.stderr.trim()));
        }
    }
    for (c, (out, data, obj, times_of)) in unpacks.iter().zip(&wants) {
        if std::fs::read(out).is_ok_and(|got| got != **data) {
            failures.push(format!("{}: different bytes", name(c)));
        }
        // Version 2 exactly when the times are recorded, and the ctime is the input's.
        let Ok(b) = std::fs::read(obj) else { continue };
        let Ok(layout) = Layout::parse(&b, b.len() as u64) else { continue };
        let ctime = times_of.as_ref().map(|src| {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(src).unwrap();
            (m.ctime(), m.ctime_nsec() as u32)
        });
        let want = if ctime.is_some() { Version::V2 } else { Version::V1 };
        let meta = layout.meta;
        if layout.footer.version != want || meta.ctime != ctime || meta.atime.is_some() != ctime.is_some() {
            failures.push(format!("{}: version {} with {meta:?}, ctime {ctime:?}", p(obj), layout.footer.version));
        }
    }
    assert_none_failed(failures, &format!("{} objects", wants.len()));
}

/// An object taken apart so one field can be broken while every checksum and tag that does not
/// check that field is made right again.
struct Parts {
    /// Length of the index's fixed part (magic, count, header copy, metadata) in this version.
    fixed: usize,
    head: Vec<u8>,
    frames: Vec<(Vec<u8>, Vec<u8>)>,
    index: Vec<u8>,
    tag: Vec<u8>,
    footer: Vec<u8>,
    key: Option<ObjectKey>,
}

impl Parts {
    fn split(b: &[u8], master: Option<&MasterKey>) -> Parts {
        let layout = Layout::parse(b, b.len() as u64).unwrap();
        let frames = layout
            .entries
            .iter()
            .map(|e| {
                let r = e.stored_range();
                let at = r.start as usize + FRAME_HEADER_LEN;
                (b[r.start as usize..at].to_vec(), b[at..r.end as usize].to_vec())
            })
            .collect();
        let ir = layout.footer.index_range();
        let tag_len = if layout.header.sealed() { TAG_LEN } else { 0 };
        let body_end = ir.end as usize - tag_len;
        Parts {
            fixed: layout.footer.version.index_fixed_len(),
            head: b[..HEADER_LEN].to_vec(),
            frames,
            index: b[ir.start as usize..body_end].to_vec(),
            tag: b[body_end..ir.end as usize].to_vec(),
            footer: b[b.len() - FOOTER_LEN..].to_vec(),
            key: master.map(|m| ObjectKey::derive(m, &layout.header.object_id)),
        }
    }

    fn copy(&mut self) -> &mut [u8] {
        &mut self.index[8..8 + HEADER_LEN]
    }

    fn meta(&mut self) -> &mut [u8] {
        &mut self.index[8 + HEADER_LEN..self.fixed]
    }

    fn entry(&mut self, i: usize) -> &mut [u8] {
        let at = self.fixed + 32 * i;
        &mut self.index[at..at + 32]
    }

    /// Recomputes every CRC and the index tag, innermost first.
    fn fix(&mut self) -> &mut Self {
        fn crc_at(b: &mut [u8], end: usize) {
            let c = checksum(&b[..end]);
            b[end..end + 4].copy_from_slice(&c.to_le_bytes());
        }
        crc_at(&mut self.head, 60);
        crc_at(self.copy(), 60);
        for (h, _) in &mut self.frames {
            crc_at(h, 20);
        }
        if let Some(k) = &self.key {
            self.tag = k.index_tag(&self.index).to_vec();
        }
        let whole: Vec<u8> = [&self.index[..], &self.tag[..]].concat();
        self.footer[24..28].copy_from_slice(&checksum(&whole).to_le_bytes());
        crc_at(&mut self.footer, 36);
        self
    }

    /// The payload's stored checksum made right again after the payload changed.
    fn fix_payload_crc(&mut self, i: usize) {
        let c = checksum(&self.frames[i].1);
        self.frames[i].0[16..20].copy_from_slice(&c.to_le_bytes());
    }

    fn bytes(&self) -> Vec<u8> {
        let mut b = self.head.clone();
        for (h, p) in &self.frames {
            b.extend_from_slice(h);
            b.extend_from_slice(p);
        }
        [b, self.index.clone(), self.tag.clone(), self.footer.clone()].concat()
    }
}

fn set_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Which key a malformed object is read with.
#[derive(Clone, Copy, PartialEq)]
enum ReadKey {
    /// Its own (sealed objects) or none.
    Own,
    /// Another key than the one it was sealed with, or a key for an unsealed object.
    Other,
}

/// One malformed object: the rule a reader front to back must name, and the one a reader from
/// the tail must name (`None`: the damage is outside what a tail reader reads, and it must
/// return the right bytes).
struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    read_key: ReadKey,
    sealed: bool,
    front: Rule,
    tail: Option<Rule>,
}

fn cases(master: &MasterKey, dict: &Arc<Dictionary>, data: &[u8]) -> Vec<Case> {
    let meta =
        FileMeta { mode: Some(0o100644), uid: None, gid: None, mtime: Some((1_700_000_000, 5)), ..Default::default() };
    // Version 2: a ctime before the epoch, no atime (so an absent atime can be broken).
    let meta2 = FileMeta { ctime: Some((-2, 999_999_999)), ..meta };
    let encode_with = |meta: &FileMeta, key: Option<MasterKey>, codec, dict| {
        let config = EncodeConfig { params: CodecParams { codec, level: 3, dict }, frame_size: 4096, key };
        shrinkfs_codec::encode_all_with(&config, data, meta).unwrap()
    };
    let encode = |key, codec, dict| encode_with(&meta, key, codec, dict);
    let plain = encode(None, CodecId::Zstd, None);
    let sealed = encode(Some(master.clone()), CodecId::Zstd, None);
    let plain2 = encode_with(&meta2, None, CodecId::Zstd, None);
    let sealed2 = encode_with(&meta2, Some(master.clone()), CodecId::Zstd, None);
    let p = || Parts::split(&plain, None);
    let s = || Parts::split(&sealed, Some(master));
    let p2 = || Parts::split(&plain2, None);
    let s2 = || Parts::split(&sealed2, Some(master));
    let mut out = Vec::new();
    let mut add = |name, bytes: Vec<u8>, read_key, sealed, front, tail| {
        out.push(Case { name, bytes, read_key, sealed, front, tail })
    };
    use ReadKey::{Other, Own};
    use Rule::*;

    // Which objects are shrinkfs objects.
    let mut b = p().fix().bytes();
    b[0] ^= 1;
    let n = b.len();
    b[n - FOOTER_LEN + 20] ^= 1;
    add("header magic and a footer byte", b, Own, false, ObjectKind, Some(FooterCrc));
    let mut b = p().fix().bytes();
    b[3] ^= 1;
    add("header magic", b, Own, false, ObjectKind, None);
    let mut b = vec![0u8; 150];
    b[142..].copy_from_slice(&p().footer[40..]);
    add("short object ending in the footer magic", b, Own, false, ObjectKind, Some(ObjectLength));
    let mut b = vec![0u8; 240];
    b[192..].copy_from_slice(&p2().footer);
    add("version 2 object shorter than 248 bytes", b, Own, false, ObjectKind, Some(ObjectLength));
    let b = p().fix().bytes();
    add("cut in half", b[..b.len() / 2].to_vec(), Own, false, Truncated, Some(Truncated));
    let mut b = p().fix().bytes();
    b.extend_from_slice(b"more");
    add("bytes after the footer", b, Own, false, TrailingBytes, Some(Truncated));

    // Footer.
    let mut b = p().fix().bytes();
    let n = b.len();
    b[n - FOOTER_LEN + 16] ^= 1;
    add("footer byte", b, Own, false, FooterCrc, Some(FooterCrc));
    let mut o = p();
    o.footer[28] = 3;
    add("footer version 3", o.fix().bytes(), Own, false, FooterVersion, Some(FooterVersion));
    let mut o = p();
    o.footer[28] = 2;
    add("footer version 2 over a version 1 index", o.fix().bytes(), Own, false, FooterFit, Some(FooterFit));
    let mut o = p();
    o.footer[30] |= 2;
    add("footer flags", o.fix().bytes(), Own, false, FooterFlags, Some(FooterFlags));
    let mut o = p();
    o.footer[33] = 1;
    add("footer reserved", o.fix().bytes(), Own, false, FooterReserved, Some(FooterReserved));
    let mut o = p();
    o.footer[0] ^= 1;
    add("footer index offset", o.fix().bytes(), Own, false, FooterFit, Some(FooterFit));
    let mut o = p();
    o.footer[16] ^= 1;
    add("footer logical size", o.fix().bytes(), Own, false, LogicalSize, Some(LogicalSize));
    let mut o = p();
    o.footer[30] |= 1;
    o.footer[8] += TAG_LEN as u8;
    o.tag = vec![0; TAG_LEN];
    add("footer says sealed", o.fix().bytes(), Own, false, StreamIndex, Some(FlagsAgree));

    // Index.
    let mut o = p();
    o.fix();
    o.meta()[0] ^= 1;
    add("index byte", o.bytes(), Own, false, IndexCrc, Some(IndexCrc));
    let mut o = p();
    o.index[3] = b'Y';
    add("index magic", o.fix().bytes(), Own, false, FrameCrc, Some(IndexMagic));
    let mut o = p();
    o.index[4] ^= 1;
    add("index count", o.fix().bytes(), Own, false, IndexCount, Some(IndexCount));
    let mut o = p();
    o.copy()[1] ^= 1;
    add("header copy magic", o.fix().bytes(), Own, false, HeaderMagic, Some(HeaderMagic));
    let mut o = p();
    o.fix();
    o.copy()[20] ^= 1;
    add("header copy byte", o.fix_index_only(), Own, false, HeaderCrc, Some(HeaderCrc));
    let mut o = p();
    o.copy()[8] = 3;
    add("header copy version 3", o.fix().bytes(), Own, false, HeaderVersion, Some(HeaderVersion));
    let mut o = p2();
    o.copy()[8] = 1;
    o.head[8] = 1;
    add("version 2 index and footer, header says 1", o.fix().bytes(), Own, false, StreamIndex, Some(VersionAgree));
    let mut o = s();
    o.copy()[8] = 2;
    o.head[8] = 2;
    add("version 1 index and footer, header says 2", o.fix().bytes(), Own, true, Truncated, Some(VersionAgree));
    let mut o = p();
    o.copy()[10] |= 4;
    add("header copy flags", o.fix().bytes(), Own, false, HeaderFlags, Some(HeaderFlags));
    let mut o = p();
    o.copy()[50] = 1;
    add("header copy reserved", o.fix().bytes(), Own, false, HeaderReserved, Some(HeaderReserved));
    let mut o = p();
    o.copy()[33] = 1;
    add("key check in an unsealed header copy", o.fix().bytes(), Own, false, HeaderReserved, Some(HeaderReserved));
    let mut o = p();
    o.meta()[12] |= 0x10;
    add("metadata flags", o.fix().bytes(), Own, false, MetaFlags, Some(MetaFlags));
    let mut o = p();
    o.meta()[5] = 1;
    add("absent uid not zero", o.fix().bytes(), Own, false, MetaAbsent, Some(MetaAbsent));
    let mut o = p();
    set_u32(o.meta(), 24, 1_000_000_000);
    add("nanoseconds", o.fix().bytes(), Own, false, MetaNanos, Some(MetaNanos));
    let mut o = p();
    o.meta()[30] = 1;
    add("metadata reserved", o.fix().bytes(), Own, false, MetaReserved, Some(MetaReserved));
    let mut o = p2();
    o.meta()[12] |= 0x40;
    add("version 2 metadata flags", o.fix().bytes(), Own, false, MetaFlags, Some(MetaFlags));
    let mut o = p2();
    o.meta()[46] = 1;
    add("absent atime not zero", o.fix().bytes(), Own, false, MetaAbsent, Some(MetaAbsent));
    let mut o = s2();
    set_u32(o.meta(), 40, 1_000_000_000);
    add("ctime nanoseconds", o.fix().bytes(), Own, true, MetaNanos, Some(MetaNanos));
    let mut o = p2();
    o.meta()[60] = 1;
    add("version 2 metadata reserved", o.fix().bytes(), Own, false, MetaReserved, Some(MetaReserved));
    let mut o = p();
    o.entry(1)[24] = 99;
    add("entry codec", o.fix().bytes(), Own, false, EntryCodec, Some(EntryCodec));
    let mut o = p();
    o.entry(1)[25] |= 2;
    add("entry flags", o.fix().bytes(), Own, false, EntryFlags, Some(EntryFlags));
    let mut o = p();
    o.entry(1)[27] = 1;
    add("entry reserved", o.fix().bytes(), Own, false, EntryReserved, Some(EntryReserved));
    let mut o = p();
    set_u32(o.entry(1), 20, 0);
    add("entry raw length 0", o.fix().bytes(), Own, false, EntryLength, Some(EntryLength));
    let mut o = s();
    set_u32(o.entry(1), 28, 7);
    add("sealed entry with a raw checksum", o.fix().bytes(), Own, true, EntrySealedCrc, Some(EntrySealedCrc));
    let mut o = p();
    o.entry(1)[0] ^= 1;
    add("entry offset", o.fix().bytes(), Own, false, EntryTiling, Some(EntryTiling));
    let mut o = p();
    let last = o.frames.len() - 1;
    o.frames[last].1.push(0);
    let index_offset = u64::from_le_bytes(o.footer[..8].try_into().unwrap());
    o.footer[..8].copy_from_slice(&(index_offset + 1).to_le_bytes());
    add("a byte between the frames and the index", o.fix().bytes(), Own, false, FrameCrc, Some(IndexEnd));
    let mut o = p();
    o.frames.pop();
    add("last frame dropped", o.fix().bytes(), Own, false, StreamIndex, Some(FooterFit));

    // Keys and seals.
    add("wrong key", s().fix().bytes(), Other, true, KeyCheck, Some(KeyCheck));
    let mut o = s();
    o.tag[0] ^= 1;
    add("index tag", o.fix_index_only(), Own, true, IndexTag, Some(IndexTag));
    let mut o = s2();
    o.fix();
    o.meta()[33] ^= 1;
    add("sealed ctime changed", o.fix_index_only(), Own, true, IndexTag, Some(IndexTag));
    add("unsealed object read with a key", p().fix().bytes(), Other, false, SealedOnly, Some(SealedOnly));
    add("plain bytes read with a key", data.to_vec(), Other, false, SealedOnly, Some(SealedOnly));
    let mut o = s();
    o.frames[1].1[0] ^= 1;
    o.fix_payload_crc(1);
    add("sealed payload", o.fix().bytes(), Own, true, FrameTag, Some(FrameTag));
    let with_dict = encode(None, CodecId::Zstd, Some(dict.clone()));
    add("no dictionary", with_dict, Own, false, Dictionary, Some(Dictionary));

    // Frames.
    let mut o = p();
    o.fix();
    o.frames[1].0[5] ^= 1;
    add("frame header byte", o.bytes(), Own, false, FrameCrc, Some(FrameCrc));
    let mut o = p();
    o.frames[1].0[2] = 1;
    add("frame reserved", o.fix().bytes(), Own, false, FrameReserved, Some(FrameReserved));
    let mut o = p();
    o.frames[1].0[1] |= 2;
    add("frame flags", o.fix().bytes(), Own, false, FrameFlags, Some(FrameFlags));
    let mut o = p();
    o.frames[1].0[0] = 99;
    add("frame codec", o.fix().bytes(), Own, false, FrameCodec, Some(FrameCodec));
    let mut o = p();
    set_u32(&mut o.frames[1].0, 4, 0);
    add("frame raw length 0", o.fix().bytes(), Own, false, FrameLength, Some(FrameLength));
    let mut o = s();
    set_u32(&mut o.frames[1].0, 12, 7);
    add("sealed frame with a raw checksum", o.fix().bytes(), Own, true, FrameSealedCrc, Some(FrameSealedCrc));
    let mut o = p();
    o.frames[1].0[12] ^= 1;
    add("frame raw checksum unlike its entry", o.fix().bytes(), Own, false, FrameRawCrc, Some(FrameEntry));
    let mut o = p();
    o.fix();
    o.frames[1].1[3] ^= 1;
    add("payload byte", o.bytes(), Own, false, FramePayloadCrc, Some(FramePayloadCrc));
    let mut o = p();
    o.frames[1].1.fill(0xAA);
    o.fix_payload_crc(1);
    add("payload that is not zstd", o.fix().bytes(), Own, false, FrameDecode, Some(FrameDecode));
    let mut o = p();
    o.frames[1].0[12] ^= 1;
    o.entry(1)[28] ^= 1;
    add("raw checksum", o.fix().bytes(), Own, false, FrameRawCrc, Some(FrameRawCrc));

    // The header at offset 0 (only whole-object readers read it).
    let mut o = p();
    o.head[12] ^= 1;
    add("header frame size unlike its copy", o.fix().bytes(), Own, false, HeaderCopy, None);
    let mut o = p();
    o.fix();
    o.head[20] ^= 1;
    add("header byte", o.bytes(), Own, false, HeaderCrc, None);
    let mut o = p();
    o.head[8] = 3;
    add("header version 3", o.fix().bytes(), Own, false, HeaderVersion, None);
    let mut o = p();
    o.head[8] = 2;
    add("header version 2 over a version 1 object", o.fix().bytes(), Own, false, Truncated, None);
    out
}

impl Parts {
    /// Fixes the index CRC and footer only (the index's inner checksums and tag stay broken).
    fn fix_index_only(&mut self) -> Vec<u8> {
        let whole: Vec<u8> = [&self.index[..], &self.tag[..]].concat();
        self.footer[24..28].copy_from_slice(&checksum(&whole).to_le_bytes());
        let c = checksum(&self.footer[..36]);
        self.footer[36..40].copy_from_slice(&c.to_le_bytes());
        self.bytes()
    }
}

#[test]
fn both_decoders_refuse_every_malformed_object_naming_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let master_bytes: [u8; 32] = rand::random();
    let master = MasterKey::from_bytes(&master_bytes).unwrap();
    let (own, other) = (d.join("own.key"), d.join("other.key"));
    std::fs::write(&own, master_bytes).unwrap();
    std::fs::write(&other, rand::random::<[u8; 32]>()).unwrap();
    let data: Vec<u8> =
        (0..400).flat_map(|i| format!("line {i} of an object broken on purpose\n").into_bytes()).collect();
    let samples: Vec<Vec<u8>> =
        (0..200).map(|i| format!("sample {i}: GET /index.html 200 {}\n", i * 7).into_bytes()).collect();
    let dict = Arc::new(Dictionary::new(zstd::dict::from_samples(&samples, 2048).unwrap()).unwrap());
    let cases = cases(&master, &dict, &data);
    let broken: std::collections::HashSet<Rule> =
        cases.iter().flat_map(|c| [Some(c.front), c.tail]).flatten().collect();
    let untested: Vec<_> = Rule::ALL.iter().filter(|r| !broken.contains(r)).map(|r| r.name()).collect();
    assert!(untested.is_empty(), "rules no malformed object breaks: {untested:?}");
    let mut cmds = Vec::new();
    let len = data.len().to_string();
    let range = format!("0:{len}");
    for (i, c) in cases.iter().enumerate() {
        let obj = d.join(format!("case{i}.skf"));
        std::fs::write(&obj, &c.bytes).unwrap();
        let key = match (c.read_key, c.sealed) {
            (ReadKey::Own, true) => Some(own.as_path()),
            (ReadKey::Own, false) => None,
            (ReadKey::Other, _) => Some(other.as_path()),
        };
        let mut four = [
            cmd(Tool::Shrinkfs, &["unpack", p(&obj), p(&d.join(format!("case{i}.rs")))], key),
            cmd(Tool::Skf, &["decode", p(&obj), p(&d.join(format!("case{i}.py")))], key),
            cmd(Tool::Shrinkfs, &["unpack", "--range", &range, p(&obj), p(&d.join(format!("case{i}.rs.range")))], key),
            cmd(Tool::Skf, &["range", p(&obj), "0", &len], key),
        ];
        four[3].stdout = Some(d.join(format!("case{i}.py.range")));
        cmds.extend(four);
    }
    let ran = run_all(&cmds);
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let mut wrong = Vec::new();
        for (k, (rule, out)) in
            [(Some(c.front), "rs"), (Some(c.front), "py"), (c.tail, "rs.range"), (c.tail, "py.range")]
                .into_iter()
                .enumerate()
        {
            let (cm, r) = (&cmds[4 * i + k], &ran[4 * i + k]);
            let msg = r.stderr.trim();
            match rule {
                Some(rule) if r.code == 0 || !msg.contains(&format!("[{}]", rule.name())) => wrong.push(format!(
                    "{}: expected an error naming [{}], got exit {}: {msg}",
                    name(cm),
                    rule.name(),
                    r.code
                )),
                None if r.code != 0 => wrong.push(format!("{}: expected the file's bytes, got: {msg}", name(cm))),
                None if std::fs::read(d.join(format!("case{i}.{out}"))).unwrap() != data => {
                    wrong.push(format!("{}: returned different bytes", name(cm)))
                }
                _ => {}
            }
        }
        if !wrong.is_empty() {
            failures.push(format!("{}:\n    {}", c.name, wrong.join("\n    ")));
        }
    }
    assert_none_failed(failures, &format!("{} malformed objects", cases.len()));
}

#[test]
fn format_md_lists_exactly_the_rules_errors_name() {
    let spec = std::fs::read_to_string(repo().join("docs/FORMAT.md")).unwrap();
    let table = &spec[spec.find("## Conformance").expect("a conformance section")..];
    let listed: Vec<&str> =
        table.lines().filter_map(|l| l.strip_prefix("| `")?.split_once('`').map(|(name, _)| name)).collect();
    let names: Vec<&str> = Rule::ALL.iter().map(|r| r.name()).collect();
    assert_eq!(listed, names, "FORMAT.md's conformance table and the codec's rules differ");
}
