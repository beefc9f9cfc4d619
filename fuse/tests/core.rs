//! The filesystem core without a kernel, against object_store's in-memory store: every operation
//! of docs/SEMANTICS.md, remounts, and what lands in the bucket.

mod common;

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use shrinkfs_codec::{EncodeConfig, MasterKey};
use shrinkfs_fuse::inode::{Kind, ROOT};
use shrinkfs_fuse::store::Bucket;
use shrinkfs_fuse::{Error, Fs, FsConfig, NamespaceConfig, Services, SetAttr};

fn bucket(store: &Arc<InMemory>) -> Bucket {
    Bucket::new(store.clone(), Path::from("pre"), "memory")
}

fn fs_on(store: &Arc<InMemory>, cfg: FsConfig) -> Fs {
    Fs::new(bucket(store), cfg, Services::default())
}

/// A namespace trusting attributes for `metadata_ttl`.
fn namespace_ttl(metadata_ttl: std::time::Duration) -> NamespaceConfig {
    NamespaceConfig { metadata_ttl, ..NamespaceConfig::default() }
}

fn small_frames() -> FsConfig {
    FsConfig {
        encode: EncodeConfig { frame_size: 4096, ..Default::default() },
        namespace: namespace_ttl(std::time::Duration::ZERO),
        ..FsConfig::default()
    }
}

fn text(n: usize) -> Vec<u8> {
    (0..n).map(|i| b"abcdefghij klmnop\n"[i % 18] ^ ((i / 997) as u8 & 1)).collect()
}

async fn write_file(fs: &Fs, parent: u64, name: &str, data: &[u8], piece: usize) -> u64 {
    let (attr, fh) = fs.create(parent, name, 0o640, 1000, 1000).await.unwrap();
    let mut off = 0;
    for chunk in data.chunks(piece) {
        assert_eq!(fs.write(fh, off, chunk).await.unwrap() as usize, chunk.len());
        off += chunk.len() as u64;
    }
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
    attr.ino
}

async fn read_file(fs: &Fs, ino: u64) -> Vec<u8> {
    let fh = fs.open(ino, false, false).await.unwrap();
    let size = fs.getattr(ino).await.unwrap().size;
    let mut out = Vec::new();
    while (out.len() as u64) < size {
        let got = fs.read(fh, out.len() as u64, 100_000).await.unwrap();
        assert!(!got.is_empty());
        out.extend_from_slice(&got);
    }
    fs.release(fh).await.unwrap();
    out
}

async fn stored(store: &Arc<InMemory>, key: &str) -> Option<Vec<u8>> {
    match store.get(&Path::from(key)).await {
        Ok(g) => Some(g.bytes().await.unwrap().to_vec()),
        Err(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn written_files_read_back_here_after_a_remount_and_through_unpack() {
    let store = Arc::new(InMemory::new());
    let fs = fs_on(&store, small_frames());
    let data = text(300_000);
    let ino = write_file(&fs, ROOT, "a.log", &data, 7000).await;
    assert_eq!(fs.getattr(ino).await.unwrap().size, data.len() as u64);
    assert_eq!(read_file(&fs, ino).await, data);
    let object = stored(&store, "pre/a.log").await.expect("object under the same key");
    assert!(object.len() < data.len() / 2, "not compressed: {}", object.len());
    assert_eq!(shrinkfs_codec::decode_all(&object, None, &[]).unwrap(), data);
    let fs2 = fs_on(&store, small_frames());
    let a = fs2.lookup(ROOT, "a.log").await.unwrap();
    assert_eq!((a.size, a.perm, a.uid), (data.len() as u64, 0o640, 1000));
    assert_eq!(read_file(&fs2, a.ino).await, data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_files_stream_as_multipart_and_nothing_is_visible_before_close() {
    let store = Arc::new(InMemory::new());
    let mut cfg = small_frames();
    cfg.encode.frame_size = 1 << 20;
    let fs = fs_on(&store, cfg);
    let mut big = vec![0u8; 20 << 20];
    let mut x = 1u64;
    for (i, b) in big.iter_mut().enumerate() {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *b = if i % 3 == 0 { (x >> 56) as u8 } else { b'x' };
    }
    let (attr, fh) = fs.create(ROOT, "big", 0o644, 0, 0).await.unwrap();
    for (i, chunk) in big.chunks(128 << 10).enumerate() {
        fs.write(fh, (i * (128 << 10)) as u64, chunk).await.unwrap();
        if i == 100 {
            assert!(stored(&store, "pre/big").await.is_none(), "partial object visible");
        }
    }
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
    assert!(
        fs.metrics().value("shrinkfs_store_request_duration_seconds_count{kind=\"multipart_complete\",outcome=\"ok\"}")
            >= 1
    );
    assert_eq!(read_file(&fs, attr.ino).await, big);
}

/// A lookup of a file open with unstored changes reports its live size and mode, as getattr does
/// (the stored ones would make the kernel shrink a file a program has mapped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_of_an_open_changed_file_reports_its_live_attributes() {
    let store = Arc::new(InMemory::new());
    let fs = fs_on(&store, small_frames());
    let ino = write_file(&fs, ROOT, "f", &text(10_000), 4096).await;
    let fh = fs.open(ino, true, false).await.unwrap();
    fs.write(fh, 10_000, &text(50_000)).await.unwrap();
    fs.setattr(ino, SetAttr { mode: Some(0o600), ..SetAttr::default() }).await.unwrap();
    let seen = fs.lookup(ROOT, "f").await.unwrap();
    assert_eq!((seen.size, seen.perm), (60_000, 0o600));
    assert_eq!(fs.getattr(ino).await.unwrap().size, 60_000);
    fs.release(fh).await.unwrap();
    assert_eq!(fs.lookup(ROOT, "f").await.unwrap().size, 60_000, "and once stored");
}

/// With the kernel's write-back cache, writes that reach the core out of order (it sends several
/// at once) keep the file streaming, and a hole nothing fills is held at once and stages the file
/// when it is closed; without it, a hole with no other write in progress stages it at once. The
/// staging directory is gone, so any staging fails: the first case passing shows the writes were
/// not staged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_slightly_out_of_order_keep_streaming_and_a_lone_gap_stages_at_once() {
    let store = Arc::new(InMemory::new());
    let staging = tempfile::tempdir().unwrap();
    let mut cfg = small_frames();
    cfg.encode.frame_size = 64 << 10;
    cfg.writer.staging_dir = staging.path().join("gone");
    cfg.writer.writeback_cache = true;
    let fs = Arc::new(fs_on(&store, cfg.clone()));
    let piece = 256 << 10;
    let data = text(16 * piece);
    let (attr, fh) = fs.create(ROOT, "f", 0o644, 0, 0).await.unwrap();
    // Each round: the later half is sent first, the earlier one a moment later.
    for round in 0..8 {
        let (early, late) = (2 * round * piece, (2 * round + 1) * piece);
        let first = {
            let (fs, chunk) = (fs.clone(), data[late..late + piece].to_vec());
            tokio::spawn(async move { fs.write(fh, late as u64, &chunk).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        fs.write(fh, early as u64, &data[early..early + piece]).await.unwrap();
        first.await.unwrap().unwrap();
    }
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
    assert!(stored(&store, "pre/f").await.is_some());
    assert_eq!(read_file(&fs, attr.ino).await, data);

    // A hole nothing fills: the write is held at once; the close stages the file (which cannot
    // work here) and says so.
    let (_, fh) = fs.create(ROOT, "g", 0o644, 0, 0).await.unwrap();
    fs.write(fh, 0, &data[..piece]).await.unwrap();
    let started = std::time::Instant::now();
    fs.write(fh, 2 * piece as u64, &data[..piece]).await.unwrap();
    let wait = shrinkfs_fuse::WriterConfig::default().reorder_wait;
    assert!(started.elapsed() < wait, "waited {:?}", started.elapsed());
    assert_eq!(fs.getattr(fh_ino(&fs, "g").await).await.unwrap().size, 3 * piece as u64);
    let e = fs.flush(fh).await.unwrap_err();
    assert!(matches!(e, Error::Local(_)), "{e}");
    let _ = fs.release(fh).await;

    // Without the write-back cache nothing else is in flight, so nothing is waited for.
    cfg.writer.writeback_cache = false;
    let fs = fs_on(&store, cfg);
    let (_, fh) = fs.create(ROOT, "h", 0o644, 0, 0).await.unwrap();
    fs.write(fh, 0, &data[..piece]).await.unwrap();
    let started = std::time::Instant::now();
    let e = fs.write(fh, 2 * piece as u64, &data[..piece]).await.unwrap_err();
    assert!(matches!(e, Error::Local(_)), "{e}");
    assert!(started.elapsed() < wait, "waited {:?}", started.elapsed());
    fs.release(fh).await.unwrap();
}

/// A truncation to zero drops the writes held past a gap with the rest of the file: nothing of
/// them comes back at the close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncation_to_zero_drops_writes_held_past_a_gap() {
    let store = Arc::new(InMemory::new());
    let staging = tempfile::tempdir().unwrap();
    let mut cfg = small_frames();
    cfg.writer.staging_dir = staging.path().to_path_buf();
    cfg.writer.writeback_cache = true;
    let fs = fs_on(&store, cfg);
    let data = text(3 * 4096);
    let (attr, fh) = fs.create(ROOT, "t", 0o644, 0, 0).await.unwrap();
    fs.write(fh, 0, &data[..4096]).await.unwrap();
    fs.write(fh, 2 * 4096, &data[2 * 4096..]).await.unwrap();
    assert_eq!(fs.getattr(attr.ino).await.unwrap().size, 3 * 4096, "the write past the gap is held");
    fs.setattr(attr.ino, SetAttr { size: Some(0), ..SetAttr::default() }).await.unwrap();
    assert_eq!(fs.getattr(attr.ino).await.unwrap().size, 0);
    fs.write(fh, 0, b"after").await.unwrap();
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
    assert_eq!(read_file(&fs, attr.ino).await, b"after");
    let other = fs_on(&store, small_frames());
    assert_eq!(read_file(&other, fh_ino(&other, "t").await).await, b"after");
}

/// Found by a black-box probe: `fallocate(1)` failed. The default mode extends a shorter file
/// with zeros and never shortens one; `FALLOC_FL_KEEP_SIZE` changes nothing; other modes are
/// not supported; a read-only handle may not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallocate_extends_with_zeros_and_never_shortens() {
    let store = Arc::new(InMemory::new());
    let fs = fs_on(&store, small_frames());
    let (attr, fh) = fs.create(ROOT, "pre", 0o644, 0, 0).await.unwrap();
    fs.write(fh, 0, b"head").await.unwrap();
    fs.fallocate(fh, 0, 2, 0).await.unwrap();
    assert_eq!(fs.getattr(attr.ino).await.unwrap().size, 4, "never shorter");
    fs.fallocate(fh, 10_000, 100, libc::FALLOC_FL_KEEP_SIZE).await.unwrap();
    assert_eq!(fs.getattr(attr.ino).await.unwrap().size, 4, "the size kept");
    fs.fallocate(fh, 1000, 9000, 0).await.unwrap();
    assert_eq!(fs.getattr(attr.ino).await.unwrap().size, 10_000);
    fs.write(fh, 5000, b"mid").await.unwrap();
    for mode in [libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, libc::FALLOC_FL_ZERO_RANGE] {
        assert_eq!(fs.fallocate(fh, 0, 10, mode).await.unwrap_err().errno(), libc::EOPNOTSUPP);
    }
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
    let mut want = vec![0u8; 10_000];
    want[..4].copy_from_slice(b"head");
    want[5000..5003].copy_from_slice(b"mid");
    let other = fs_on(&store, small_frames());
    assert!(read_file(&other, fh_ino(&other, "pre").await).await == want, "zeros up to the new size");
    let r = fs.open(attr.ino, false, false).await.unwrap();
    assert_eq!(fs.fallocate(r, 0, 20_000, 0).await.unwrap_err().errno(), libc::EBADF);
    fs.release(r).await.unwrap();
}

/// On a sealed mount, a write that moves a file's upload into a staging file (a write back over
/// bytes already sent) keeps every byte, sealed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_upload_moved_to_a_staging_file_keeps_its_bytes() {
    let store = Arc::new(InMemory::new());
    let staging = tempfile::tempdir().unwrap();
    let mut cfg = small_frames();
    cfg.writer.staging_dir = staging.path().to_path_buf();
    cfg.encode.key = Some(MasterKey::from_bytes(&[7; 32]).unwrap());
    let fs = fs_on(&store, cfg.clone());
    let mut want = text(20_000);
    let (attr, fh) = fs.create(ROOT, "s", 0o644, 0, 0).await.unwrap();
    fs.write(fh, 0, &want).await.unwrap();
    fs.write(fh, 100, b"rewritten").await.unwrap();
    want[100..109].copy_from_slice(b"rewritten");
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
    assert_eq!(read_file(&fs, attr.ino).await, want);
    let again = fs_on(&store, cfg);
    assert_eq!(read_file(&again, again.lookup(ROOT, "s").await.unwrap().ino).await, want);
    assert!(fs_on(&store, small_frames()).lookup(ROOT, "s").await.is_err(), "stored sealed");
}

/// Names with the characters object_store percent-encodes in parts it builds (`~ # % [ ] ? *`…)
/// are stored under exactly those names, listed as they are, found again after a remount and
/// after their directory's rename; an object another tool stored under such a key reads too. A
/// name with a control character is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_any_printable_character_are_keys_as_they_are() {
    let store = Arc::new(InMemory::new());
    let fs = fs_on(&store, small_frames());
    let d = fs.mkdir(ROOT, "d [1]~", 0o755, 0, 0).await.unwrap();
    let names = ["notes~", "#draft#", "100%", "a%7Eb", "q?*", "x#1", "{^`|\\<>\"}"];
    for (i, name) in names.iter().enumerate() {
        write_file(&fs, d.ino, name, format!("file {i}").as_bytes(), 4).await;
    }
    for name in names {
        let key = Path::parse(format!("pre/d [1]~/{name}")).unwrap();
        assert!(store.head(&key).await.is_ok(), "stored as {name:?}");
    }
    store.put(&Path::parse("pre/d [1]~/foreign~").unwrap(), b"from another tool".to_vec().into()).await.unwrap();
    let listed = |fs: Fs| async move {
        let d = fs.lookup(ROOT, "d [1]~").await.unwrap();
        let dh = fs.opendir(d.ino).await.unwrap();
        let mut got: Vec<String> = fs.readdir(dh, d.ino, 0).await.unwrap().into_iter().map(|(_, e)| e.name).collect();
        got.sort();
        for (i, name) in names.iter().enumerate() {
            let ino = fs.lookup(d.ino, name).await.unwrap().ino;
            assert_eq!(read_file(&fs, ino).await, format!("file {i}").as_bytes(), "{name:?}");
        }
        let ino = fs.lookup(d.ino, "foreign~").await.unwrap().ino;
        assert_eq!(read_file(&fs, ino).await, b"from another tool");
        got
    };
    let mut want: Vec<String> = [".", "..", "foreign~"].into_iter().chain(names).map(String::from).collect();
    want.sort();
    assert_eq!(listed(fs_on(&store, small_frames())).await, want);
    fs.rename(ROOT, "d [1]~", ROOT, "e~", false).await.unwrap();
    let moved = fs_on(&store, small_frames());
    let e = moved.lookup(ROOT, "e~").await.unwrap();
    for name in names {
        moved.lookup(e.ino, name).await.unwrap_or_else(|err| panic!("{name:?} after the rename: {err}"));
    }
    assert!(moved.lookup(ROOT, "d [1]~").await.is_err());
    let e = fs.create(ROOT, "new\nline", 0o644, 0, 0).await.unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
}

async fn fh_ino(fs: &Fs, name: &str) -> u64 {
    fs.lookup(ROOT, name).await.unwrap().ino
}

/// Writes that arrive out of order with the write-back cache on — several at once, some ahead of
/// the stream, some overlapping held ones, some leaving holes, some read back before the close —
/// give the same bytes as the same writes applied in order to a plain buffer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_held_out_of_order_give_the_bytes_written_in_every_case() {
    use rand::{Rng, SeedableRng};
    let store = Arc::new(InMemory::new());
    let staging = tempfile::tempdir().unwrap();
    let mut cfg = small_frames();
    cfg.encode.frame_size = 64 << 10;
    cfg.writer.staging_dir = staging.path().to_owned();
    cfg.writer.writeback_cache = true;
    let fs = Arc::new(fs_on(&store, cfg));
    for seed in 0..12u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let name = format!("f{seed}");
        let (attr, fh) = fs.create(ROOT, &name, 0o644, 0, 0).await.unwrap();
        let mut model: Vec<u8> = Vec::new();
        let piece = 32 << 10;
        // Pieces written whole; the first one missing is where the writes in order go next.
        let mut done = std::collections::BTreeSet::new();
        for step in 0..40 {
            let next = (0..).find(|k| !done.contains(k)).expect("some piece missing");
            // Mostly the next piece, a few ahead of it, now and then bytes over earlier ones.
            let (offset, len) = match rng.random_range(0..10) {
                0 => (rng.random_range(0..(next * piece).max(1)), rng.random_range(1..piece)),
                1 => {
                    let k = next + rng.random_range(1..4);
                    done.insert(k);
                    (k * piece, piece)
                }
                _ => {
                    done.insert(next);
                    (next * piece, piece)
                }
            };
            let bytes: Vec<u8> = (0..len).map(|k| (seed as usize * 31 + step * 7 + k) as u8).collect();
            fs.write(fh, offset as u64, &bytes).await.unwrap();
            if model.len() < offset + len {
                model.resize(offset + len, 0);
            }
            model[offset..offset + len].copy_from_slice(&bytes);
            if rng.random_range(0..20) == 0 {
                let at = rng.random_range(0..model.len());
                let got = fs.read(fh, at as u64, 4096).await.unwrap();
                assert!(got[..] == model[at..(at + 4096).min(model.len())], "seed {seed}: read at {at} differs");
            }
        }
        assert_eq!(fs.getattr(attr.ino).await.unwrap().size, model.len() as u64, "seed {seed}");
        fs.flush(fh).await.unwrap();
        fs.release(fh).await.unwrap();
        assert!(read_file(&fs, attr.ino).await == model, "seed {seed}: the file differs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_offsets_appends_and_truncates_are_staged_and_reencoded() {
    let store = Arc::new(InMemory::new());
    let fs = fs_on(&store, small_frames());
    let mut model = text(50_000);
    let ino = write_file(&fs, ROOT, "db", &model, 4096).await;
    // Reopen: write in the middle, past the end (a hole), and append.
    let fh = fs.open(ino, true, false).await.unwrap();
    for (off, len) in [(1000u64, 300usize), (49_990, 20), (60_000, 10), (0, 5)] {
        let patch = vec![b'Z'; len];
        fs.write(fh, off, &patch).await.unwrap();
        let end = off as usize + len;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[off as usize..end].copy_from_slice(&patch);
        // Read-your-writes on the same handle.
        assert_eq!(fs.read(fh, off, len as u32).await.unwrap(), patch);
    }
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
    assert_eq!(read_file(&fs, ino).await, model);
    // Truncate through setattr with no open handle.
    fs.setattr(ino, SetAttr { size: Some(12_345), ..SetAttr::default() }).await.unwrap();
    model.truncate(12_345);
    let fs2 = fs_on(&store, small_frames());
    let db = fs2.lookup(ROOT, "db").await.unwrap();
    assert_eq!(read_file(&fs2, db.ino).await, model);
    assert_eq!(read_file(&fs, ino).await, model);
    // O_TRUNC then rewrite.
    let fh = fs.open(ino, true, true).await.unwrap();
    fs.write(fh, 0, b"fresh").await.unwrap();
    fs.release(fh).await.unwrap();
    assert_eq!(read_file(&fs, ino).await, b"fresh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_renames_unlinks_and_symlinks() {
    let store = Arc::new(InMemory::new());
    let fs = fs_on(&store, small_frames());
    let d = fs.mkdir(ROOT, "d", 0o750, 0, 0).await.unwrap();
    assert!(matches!(fs.mkdir(ROOT, "d", 0o750, 0, 0).await, Err(Error::Exists)));
    let f = write_file(&fs, d.ino, "f.txt", b"inside", 4).await;
    assert!(matches!(fs.rmdir(ROOT, "d").await, Err(Error::NotEmpty)));
    // An empty directory survives a remount through its marker.
    fs.mkdir(d.ino, "empty", 0o755, 0, 0).await.unwrap();
    let fs2 = fs_on(&store, small_frames());
    let d2 = fs2.lookup(ROOT, "d").await.unwrap();
    let dh = fs2.opendir(d2.ino).await.unwrap();
    let names: Vec<String> = fs2.readdir(dh, d2.ino, 0).await.unwrap().into_iter().map(|(_, e)| e.name).collect();
    assert_eq!(names, [".", "..", "empty", "f.txt"]);
    // Rename a file, then the directory holding it.
    fs.rename(d.ino, "f.txt", ROOT, "g.txt", false).await.unwrap();
    assert!(stored(&store, "pre/d/f.txt").await.is_none());
    assert_eq!(read_file(&fs, f).await, b"inside");
    fs.rename(ROOT, "d", ROOT, "e", false).await.unwrap();
    assert!(fs.lookup(ROOT, "d").await.is_err());
    assert_eq!(fs.lookup(fs.lookup(ROOT, "e").await.unwrap().ino, "empty").await.unwrap().kind, Kind::Dir);
    assert!(matches!(fs.rename(ROOT, "g.txt", ROOT, "e", false).await, Err(Error::IsDir)));
    // Symlinks.
    let l = fs.symlink(ROOT, "link", "e/empty", 0, 0).await.unwrap();
    assert_eq!(fs.readlink(l.ino).await.unwrap(), b"e/empty");
    assert_eq!(fs_on(&store, small_frames()).lookup(ROOT, "link").await.unwrap().kind, Kind::Symlink);
    assert!(matches!(fs.rename(ROOT, "link", ROOT, "g.txt", true).await, Err(Error::Exists)));
    // Directory modes are kept in memory only.
    let e_ino = fs.lookup(ROOT, "e").await.unwrap().ino;
    assert_eq!(fs.setattr(e_ino, SetAttr { mode: Some(0o700), ..SetAttr::default() }).await.unwrap().perm, 0o700);
    assert_eq!(fs.getattr(e_ino).await.unwrap().perm, 0o700);
    // Unlink and rmdir.
    fs.unlink(ROOT, "g.txt").await.unwrap();
    assert!(matches!(fs.lookup(ROOT, "g.txt").await, Err(Error::NotFound)));
    assert!(matches!(fs.unlink(ROOT, "g.txt").await, Err(Error::NotFound)));
    let e = fs.lookup(ROOT, "e").await.unwrap();
    fs.rmdir(e.ino, "empty").await.unwrap();
    fs.rmdir(ROOT, "e").await.unwrap();
    assert!(fs.lookup(ROOT, "e").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chmod_chown_and_mtime_persist_with_the_object() {
    let store = Arc::new(InMemory::new());
    let fs = fs_on(&store, small_frames());
    let ino = write_file(&fs, ROOT, "f", b"data", 4).await;
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    let change = SetAttr { mode: Some(0o600), uid: Some(42), gid: Some(43), mtime: Some(t), ..SetAttr::default() };
    fs.setattr(ino, change).await.unwrap();
    let a = fs_on(&store, small_frames()).lookup(ROOT, "f").await.unwrap();
    assert_eq!((a.perm, a.uid, a.gid, a.mtime, a.size), (0o600, 42, 43, t, 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_objects_read_as_plain_bytes_and_xattrs_describe_objects() {
    let store = Arc::new(InMemory::new());
    store.put(&Path::from("pre/plain.csv"), b"a,b\n1,2\n".to_vec().into()).await.unwrap();
    let fs = fs_on(&store, small_frames());
    let p = fs.lookup(ROOT, "plain.csv").await.unwrap();
    assert_eq!(p.size, 8);
    assert_eq!(read_file(&fs, p.ino).await, b"a,b\n1,2\n");
    assert_eq!(fs.getxattr(p.ino, "user.shrinkfs.codec").await.unwrap(), b"plain");
    let ino = write_file(&fs, ROOT, "t", &text(40_000), 4096).await;
    assert_eq!(fs.getxattr(ino, "user.shrinkfs.codec").await.unwrap(), b"zstd");
    let ratio: f64 =
        String::from_utf8(fs.getxattr(ino, "user.shrinkfs.ratio").await.unwrap()).unwrap().parse().unwrap();
    assert!(ratio > 2.0, "{ratio}");
    assert!(matches!(fs.getxattr(ino, "user.other").await, Err(Error::NoXattr)));
    // Labels and ACLs: the mount keeps none, and says it does not support them (ENOTSUP, which
    // `ls -l` remembers for the mount), for files, directories and the root alike.
    for name in ["security.selinux", "system.posix_acl_access", "system.posix_acl_default", "trusted.x"] {
        for i in [ino, p.ino, ROOT] {
            let e = fs.getxattr(i, name).await.unwrap_err();
            assert!(matches!(e, Error::NoXattrSupport), "{name}: {e}");
            assert_eq!(e.disposition().errno, libc::ENOTSUP);
        }
    }
}

/// Another tool stored an object `conf` and an object `conf/inner`: the name is the file, whether
/// a listing or a lookup meets it first, and stays so while the listing is trusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_is_both_an_object_and_a_prefix_is_the_file_in_listings_and_lookups() {
    let store = Arc::new(InMemory::new());
    store.put(&Path::from("pre/conf"), b"the object".to_vec().into()).await.unwrap();
    store.put(&Path::from("pre/conf/inner"), b"inner".to_vec().into()).await.unwrap();
    store.put(&Path::from("pre/d/x"), b"x".to_vec().into()).await.unwrap();
    let cfg = || FsConfig { namespace: namespace_ttl(std::time::Duration::from_secs(60)), ..small_frames() };
    for listing_first in [true, false] {
        let fs = fs_on(&store, cfg());
        let list = || async {
            let dh = fs.opendir(ROOT).await.unwrap();
            let got: Vec<(String, Kind)> =
                fs.readdirplus(dh, ROOT, 0).await.unwrap().into_iter().map(|(_, e, _, _)| (e.name, e.kind)).collect();
            fs.releasedir(dh);
            got
        };
        if listing_first {
            let got = list().await;
            assert!(got.contains(&("conf".into(), Kind::File)) && got.contains(&("d".into(), Kind::Dir)), "{got:?}");
            assert_eq!(got.iter().filter(|(n, _)| n == "conf").count(), 1, "{got:?}");
        }
        let a = fs.lookup(ROOT, "conf").await.unwrap();
        assert_eq!(a.kind, Kind::File, "listing first: {listing_first}");
        assert_eq!(read_file(&fs, a.ino).await, b"the object");
        assert!(fs.lookup(a.ino, "inner").await.is_err(), "the prefix is not reachable");
        let got = list().await;
        assert!(got.contains(&("conf".into(), Kind::File)), "listing first: {listing_first}: {got:?}");
        assert_eq!(fs.lookup(ROOT, "conf").await.unwrap().kind, Kind::File);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_objects_and_wrong_keys_are_errors_not_data() {
    let store = Arc::new(InMemory::new());
    let mut sealed = small_frames();
    sealed.encode.key = Some(MasterKey::from_bytes(&[7; 32]).unwrap());
    let fs = fs_on(&store, sealed);
    write_file(&fs, ROOT, "secret", &text(20_000), 1000).await;
    let mut wrong = small_frames();
    wrong.encode.key = Some(MasterKey::from_bytes(&[8; 32]).unwrap());
    let e = fs_on(&store, wrong).lookup(ROOT, "secret").await.unwrap_err();
    assert_eq!(e.errno(), libc::EACCES, "{e}");
    // Flip a byte inside a frame: the read fails with EIO instead of returning bytes.
    let mut obj = stored(&store, "pre/secret").await.unwrap();
    obj[300] ^= 0x10;
    store.put(&Path::from("pre/secret"), obj.into()).await.unwrap();
    let mut right = small_frames();
    right.encode.key = Some(MasterKey::from_bytes(&[7; 32]).unwrap());
    let fs3 = fs_on(&store, right);
    let a = fs3.lookup(ROOT, "secret").await.unwrap();
    let fh = fs3.open(a.ino, false, false).await.unwrap();
    // Frames are independent: reads of intact frames succeed, the damaged one fails.
    let mut errors = 0;
    for off in (0..20_000).step_by(4096) {
        match fs3.read(fh, off, 4096).await {
            Ok(bytes) => assert_eq!(bytes, text(20_000)[off as usize..(off as usize + 4096).min(20_000)]),
            Err(e) => {
                assert_eq!(e.errno(), libc::EIO, "{e}");
                errors += 1;
            }
        }
    }
    assert_eq!(errors, 1, "exactly the damaged frame fails");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_never_mixes_two_versions_of_an_object() {
    let store = Arc::new(InMemory::new());
    let fs = fs_on(&store, small_frames());
    let ino = write_file(&fs, ROOT, "v", &vec![b'1'; 20_000], 4096).await;
    let fh = fs.open(ino, false, false).await.unwrap();
    assert_eq!(fs.read(fh, 0, 10).await.unwrap(), b"1111111111"[..]);
    // Another writer replaces the object.
    let other = fs_on(&store, small_frames());
    let ino2 = other.lookup(ROOT, "v").await.unwrap().ino;
    let wfh = other.open(ino2, true, true).await.unwrap();
    other.write(wfh, 0, &vec![b'2'; 20_000]).await.unwrap();
    other.release(wfh).await.unwrap();
    // The old handle reads a frame it has not cached yet: stale, not a mix.
    match fs.read(fh, 16_000, 10).await {
        Err(e) => assert_eq!(e.errno(), libc::ESTALE, "{e}"),
        Ok(bytes) => assert_eq!(bytes, b"1111111111"[..], "a pinned handle may only serve its own version"),
    }
    fs.release(fh).await.unwrap();
    assert_eq!(read_file(&fs, ino).await, vec![b'2'; 20_000]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_mounts_refuse_changes_and_unlinked_open_files_are_not_resurrected() {
    let store = Arc::new(InMemory::new());
    let fs = fs_on(&store, small_frames());
    let (_, fh) = fs.create(ROOT, "tmp", 0o600, 0, 0).await.unwrap();
    fs.write(fh, 0, b"scratch").await.unwrap();
    fs.unlink(ROOT, "tmp").await.unwrap();
    fs.release(fh).await.unwrap();
    assert!(stored(&store, "pre/tmp").await.is_none());
    let mut ro = small_frames();
    ro.read_only = true;
    let fs = fs_on(&store, ro);
    assert!(matches!(fs.create(ROOT, "x", 0o644, 0, 0).await, Err(Error::ReadOnly)));
    assert!(matches!(fs.mkdir(ROOT, "x", 0o755, 0, 0).await, Err(Error::ReadOnly)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_readers_get_read_ahead_and_random_readers_do_not() {
    let store = Arc::new(InMemory::new());
    let fs = fs_on(&store, small_frames());
    let data = text(400_000);
    write_file(&fs, ROOT, "seq", &data, 65_536).await;
    let fresh = fs_on(&store, small_frames());
    let ino_fresh = fresh.lookup(ROOT, "seq").await.unwrap().ino;
    let fh = fresh.open(ino_fresh, false, false).await.unwrap();
    let mut got = Vec::new();
    while got.len() < data.len() {
        got.extend(fresh.read(fh, got.len() as u64, 4096).await.unwrap());
        // A reader that consumes what it reads gives read-ahead time to land (as a real one does).
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert!(got == data);
    let m = fresh.metrics();
    assert!(
        m.value("shrinkfs_frames_prefetched_total") > 10,
        "{}",
        m.render(shrinkfs_fuse::metrics::Format::Prometheus)
    );
    assert!(m.value("shrinkfs_cache_hits_total") > 10, "{}", m.render(shrinkfs_fuse::metrics::Format::Prometheus));
    // Random offsets: no read-ahead.
    let other = fs_on(&store, small_frames());
    let ino_other = other.lookup(ROOT, "seq").await.unwrap().ino;
    let fh = other.open(ino_other, false, false).await.unwrap();
    let m = other.metrics();
    let counts = || {
        (
            m.value("shrinkfs_store_request_duration_seconds_count{kind=\"get_range\""),
            m.value("shrinkfs_frames_decoded_total"),
        )
    };
    for off in [300_000u64, 12_000, 250_000, 40_000, 390_000, 5_000] {
        let before = counts();
        assert_eq!(other.read(fh, off, 100).await.unwrap(), data[off as usize..off as usize + 100]);
        let after = counts();
        // (The object is under 64 KiB stored: the GET of its index at open brought all of it,
        // so a read asks nothing more of the store.)
        assert_eq!((after.0 - before.0, after.1 - before.1), (0, 1), "a cold small read: no request, one frame");
    }
    assert_eq!(other.metrics().value("shrinkfs_frames_prefetched_total"), 0);
}

/// Reads handle `fh`'s file of `len` bytes from start to end in reads of `piece` bytes, as a
/// consuming reader would.
async fn scan(fs: &Fs, fh: u64, len: usize, piece: u32) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < len {
        got.extend(fs.read(fh, got.len() as u64, piece).await.unwrap());
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    got
}

/// Frames `fs` has decoded, once its read-ahead has settled (none decoded for 50 ms).
async fn decoded_settled(fs: &Fs) -> u64 {
    let decoded = || fs.metrics().value("shrinkfs_frames_decoded_total");
    let mut last = decoded();
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let now = decoded();
        if now == last {
            return now;
        }
        last = now;
    }
}

/// Frames decoded to read 100 bytes at `off` through `fh` again (checked against `data`).
async fn decodes_again(fs: &Fs, fh: u64, off: u64, data: &[u8]) -> u64 {
    let before = decoded_settled(fs).await;
    assert_eq!(fs.read(fh, off, 100).await.unwrap(), data[off as usize..off as usize + 100]);
    decoded_settled(fs).await - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequential_reader_leaves_the_large_frames_it_has_passed_out_of_the_cache() {
    let store = Arc::new(InMemory::new());
    let cfg = |frame_size| FsConfig { encode: EncodeConfig { frame_size, ..Default::default() }, ..small_frames() };
    let data = text(1 << 20);
    // Frames of 128 KiB (8 in the file): larger than those that stay, in a file of more than
    // the 4 frames a small file keeps for its next open.
    write_file(&fs_on(&store, cfg(128 << 10)), ROOT, "scan", &data, 65_536).await;
    write_file(&fs_on(&store, cfg(16 << 10)), ROOT, "small frames", &data, 65_536).await;
    write_file(&fs_on(&store, cfg(128 << 10)), ROOT, "four frames", &data[..512 << 10], 65_536).await;
    // A new mount of the bucket, a file scanned through a new handle (`before` runs first, and
    // gives the handle to scan): the frames decoded to read its first bytes again.
    let first_frame_again = |name: &'static str, frame_size: u32, before: Opening| {
        let (store, data) = (store.clone(), &data);
        async move {
            let fs = fs_on(&store, cfg(frame_size));
            let ino = fs.lookup(ROOT, name).await.unwrap().ino;
            let len = fs.getattr(ino).await.unwrap().size as usize;
            let fh = fs.open(ino, false, false).await.unwrap();
            match before {
                Opening::Alone => {}
                Opening::Beside => {
                    fs.open(ino, false, false).await.unwrap();
                }
                Opening::Direct => fs.opened_direct(fh),
            }
            assert!(scan(&fs, fh, len, 32 << 10).await == data[..len]);
            (decodes_again(&fs, fh, 0, data).await, fs, fh)
        }
    };
    let (again, fs, fh) = first_frame_again("scan", 128 << 10, Opening::Alone).await;
    assert_eq!(again, 1, "the first frame left the cache");
    assert_eq!(decodes_again(&fs, fh, (1 << 20) - 100, &data).await, 0, "the last frame stayed");
    // Reads that jump keep what they decode.
    for off in [300_000u64, 12_000, 700_000] {
        assert!(decodes_again(&fs, fh, off, &data).await <= 1);
    }
    for off in [300_000u64, 12_000, 700_000] {
        assert_eq!(decodes_again(&fs, fh, off, &data).await, 0, "{off} is cached");
    }
    // The frames stay while another handle has the file open (it may still read them), for a
    // handle opened with O_DIRECT (the kernel keeps nothing for it), when they are of 64 KiB or
    // less, and when the file has no more than 4.
    assert_eq!(first_frame_again("scan", 128 << 10, Opening::Beside).await.0, 0, "another handle");
    assert_eq!(first_frame_again("scan", 128 << 10, Opening::Direct).await.0, 0, "O_DIRECT");
    assert_eq!(first_frame_again("small frames", 16 << 10, Opening::Alone).await.0, 0, "small frames");
    assert_eq!(first_frame_again("four frames", 128 << 10, Opening::Alone).await.0, 0, "four frames");
}

/// A reader that catches up with its read-ahead (every core busy decoding, or a slow store) waits
/// for the frames on their way instead of fetching and decoding them again, and read-ahead leaves
/// alone the frames a read is fetching: each frame is fetched and decoded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_catches_up_with_read_ahead_waits_for_its_frames_instead_of_fetching_them_again() {
    use shrinkfs_fuse::store::fault::{FaultControl, FaultStore, Op};
    use shrinkfs_fuse::store::{Backend, StoreConfig};
    let store = Arc::new(InMemory::new());
    let cfg = || FsConfig { encode: EncodeConfig { frame_size: 64 << 10, ..Default::default() }, ..small_frames() };
    // Bytes that do not compress, so frames are fetched by ranged GETs after the open's GET of
    // the index: 16 frames of 64 KiB (small enough to stay cached behind the reader).
    let data = common::data(1 << 20, 7, 1, b"-");
    write_file(&fs_on(&store, cfg()), ROOT, "f", &data, 65_536).await;
    let ctl = Arc::new(FaultControl::default());
    let backend = FaultStore::layer(Backend::plain(store.clone()), ctl.clone());
    let bucket = Bucket::stack(backend, &Path::from("pre"), "slow gets", &StoreConfig::unretried());
    let fs = Fs::new(bucket, cfg(), Services::default());
    let ino = fs.lookup(ROOT, "f").await.unwrap().ino;
    let fh = fs.open(ino, false, false).await.unwrap();
    ctl.delay(Op::Get, std::time::Duration::from_millis(100));
    let gets_before = ctl.calls(Op::Get);
    // Reads one after the other with no pause: each reaches frames read-ahead is still fetching.
    let mut got = Vec::new();
    while got.len() < data.len() {
        got.extend(fs.read(fh, got.len() as u64, 32 << 10).await.unwrap());
    }
    assert!(got == data);
    assert!(fs.metrics().value("shrinkfs_frames_prefetched_total") > 0, "read-ahead ran");
    assert_eq!(decoded_settled(&fs).await, 16, "each frame decoded once");
    let gets = ctl.calls(Op::Get) - gets_before;
    assert!(gets <= 16, "{gets} GETs for 16 frames");
}

/// What happens to a file before a handle of it is scanned.
enum Opening {
    /// Nothing.
    Alone,
    /// Another handle opens it, and stays open.
    Beside,
    /// The handle was opened with O_DIRECT.
    Direct,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_l_of_a_listed_directory_fetches_attributes_concurrently_not_one_by_one() {
    let store = Arc::new(InMemory::new());
    for i in 0..200 {
        store.put(&Path::from(format!("pre/dir/f{i:03}")), vec![b'x'; i].into()).await.unwrap();
    }
    let cfg = FsConfig { namespace: namespace_ttl(std::time::Duration::from_secs(60)), ..small_frames() };
    let fs = fs_on(&store, cfg);
    let d = fs.lookup(ROOT, "dir").await.unwrap();
    let fh = fs.opendir(d.ino).await.unwrap();
    assert_eq!(fs.readdir(fh, d.ino, 0).await.unwrap().len(), 202);
    let tails = || fs.metrics().value("shrinkfs_store_request_duration_seconds_count{kind=\"get_range\"");
    let before = tails();
    // The first lookup starts the prefetch of all 200; wait for it, as `ls -l` would overlap with it.
    assert_eq!(fs.lookup(d.ino, "f000").await.unwrap().size, 0);
    let start = std::time::Instant::now();
    while tails() < before + 201 && start.elapsed() < std::time::Duration::from_secs(10) {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let after_prefetch = tails();
    for i in 1..200 {
        assert_eq!(fs.lookup(d.ino, &format!("f{i:03}")).await.unwrap().size, i as u64);
    }
    assert_eq!(tails(), after_prefetch, "lookups after the prefetch must not ask the store again");
}

/// A sealed frame in the disk cache that passes its checks but is another object's (here a
/// bucket that starts again from nothing under the same cache names its objects' versions alike)
/// is dropped when it does not decode, and the frame read from the store: the read succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_frame_from_the_disk_cache_that_does_not_decode_is_fetched_again() {
    use shrinkfs_fuse::diskcache::{DiskCache, DiskCacheConfig};
    let dir = tempfile::tempdir().unwrap();
    let dc = DiskCacheConfig { dir: dir.path().join("cache"), max_bytes: 1 << 30, min_free: 0.0 };
    let with_cache = || Services { disk_cache: Some(DiskCache::open(&dc).unwrap()), ..Services::default() };
    let mut sealed = small_frames();
    sealed.encode.key = Some(MasterKey::from_bytes(&[7; 32]).unwrap());
    let (first, second) = (text(40_000), text(40_000).iter().map(|b| b ^ 1).collect::<Vec<u8>>());
    for (data, check) in [(&first, false), (&second, true)] {
        // A new empty bucket each time: its first object's version is named as the last one's.
        let store = Arc::new(InMemory::new());
        write_file(&fs_on(&store, sealed.clone()), ROOT, "f", data, 10_000).await;
        let fs = Fs::new(bucket(&store), sealed.clone(), with_cache());
        let a = fs.lookup(ROOT, "f").await.unwrap();
        assert_eq!(&read_file(&fs, a.ino).await, data);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await; // the disk writes run behind
        if check {
            assert!(fs.metrics().value("shrinkfs_disk_cache_bad_entries_total") >= 1, "the foreign entry was dropped");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_cache_survives_a_remount_and_never_serves_a_damaged_entry() {
    use shrinkfs_fuse::diskcache::{DiskCache, DiskCacheConfig};
    let store = Arc::new(InMemory::new());
    let dir = tempfile::tempdir().unwrap();
    let dc = DiskCacheConfig { dir: dir.path().join("cache"), max_bytes: 1 << 30, min_free: 0.0 };
    let with_cache = || Services { disk_cache: Some(DiskCache::open(&dc).unwrap()), ..Services::default() };
    let data = text(100_000);
    write_file(&fs_on(&store, small_frames()), ROOT, "f", &data, 10_000).await;
    // First mount: frames come from the store and land on disk.
    let fs = Fs::new(bucket(&store), small_frames(), with_cache());
    let a = fs.lookup(ROOT, "f").await.unwrap();
    assert_eq!(read_file(&fs, a.ino).await, data);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await; // the disk writes run in the background
    let entries: Vec<_> = std::fs::read_dir(&dc.dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(entries.len() >= 20, "{} frames cached", entries.len());
    // Damage one entry on disk.
    let victim = &entries[3];
    let mut bytes = std::fs::read(victim).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(victim, bytes).unwrap();
    // "Remount": a new filesystem over the same cache directory reads from disk, not the store.
    let fs2 = Fs::new(bucket(&store), small_frames(), with_cache());
    let a2 = fs2.lookup(ROOT, "f").await.unwrap();
    assert_eq!(read_file(&fs2, a2.ino).await, data, "a damaged entry must never be served");
    let m = fs2.metrics();
    assert!(
        m.value("shrinkfs_disk_cache_hits_total") >= 20,
        "{}",
        m.render(shrinkfs_fuse::metrics::Format::Prometheus)
    );
    assert_eq!(
        m.value("shrinkfs_disk_cache_bad_entries_total"),
        1,
        "{}",
        m.render(shrinkfs_fuse::metrics::Format::Prometheus)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interleaved_writers_under_a_tiny_memory_budget_wait_but_never_deadlock() {
    let store = Arc::new(InMemory::new());
    let budget = 9 << 20; // one 8 MiB part and a few frames
    let cfg = FsConfig {
        io_budget: budget,
        encode: EncodeConfig { frame_size: 64 << 10, ..Default::default() },
        ..small_frames()
    };
    // Parts take a while to upload, as they do over a network.
    let slow = object_store::throttle::ThrottledStore::new(
        store.clone() as Arc<dyn ObjectStore>,
        object_store::throttle::ThrottleConfig {
            wait_put_per_call: std::time::Duration::from_millis(20),
            ..Default::default()
        },
    );
    let fs = Fs::new(Bucket::new(Arc::new(slow), Path::from("pre"), "slow"), cfg, Services::default());
    // Incompressible, so parts fill as fast as frames arrive.
    let data: Vec<Vec<u8>> = (0..4u64)
        .map(|k| {
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ k;
            (0..20 << 20)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        })
        .collect();
    let work = async {
        let mut handles = Vec::new();
        for k in 0..4 {
            handles.push(fs.create(ROOT, &format!("f{k}"), 0o644, 0, 0).await.unwrap());
        }
        let piece = 128 << 10;
        for off in (0..20 << 20).step_by(piece) {
            for (k, (_, fh)) in handles.iter().enumerate() {
                fs.write(*fh, off as u64, &data[k][off..off + piece]).await.unwrap();
            }
        }
        for (_, fh) in &handles {
            fs.flush(*fh).await.unwrap();
            fs.release(*fh).await.unwrap();
        }
        handles
    };
    let handles = tokio::time::timeout(std::time::Duration::from_secs(120), work).await.expect("writers deadlocked");
    let m = fs.metrics();
    assert!(m.value("shrinkfs_memory_budget_waits_total") > 0, "a 9 MiB budget must make 4 writers wait");
    assert_eq!(m.value("shrinkfs_memory_budget_used_bytes"), 0, "all room given back");
    for (k, (attr, _)) in handles.iter().enumerate() {
        assert!(read_file(&fs, attr.ino).await == data[k], "file {k} differs");
    }
}

type Listed = Vec<(Path, Option<object_store::ObjectMeta>)>;

/// A store that lists directories in pages the way S3 does, counting the pages asked for.
#[derive(Debug)]
struct Paged {
    inner: Arc<InMemory>,
    pages: std::sync::atomic::AtomicUsize,
    /// Each directory's sorted entries, by prefix: a prefix (`None`) or an object.
    sorted: tokio::sync::Mutex<std::collections::HashMap<Option<String>, Listed>>,
}

#[async_trait::async_trait]
impl object_store::list::PaginatedListStore for Paged {
    async fn list_paginated(
        &self,
        prefix: Option<&str>,
        opts: object_store::list::PaginatedListOptions,
    ) -> object_store::Result<object_store::list::PaginatedListResult> {
        self.pages.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = prefix.map(|p| Path::from(p.trim_end_matches('/')));
        let mut sorted = self.sorted.lock().await;
        let keys = match sorted.entry(prefix.map(str::to_owned)) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let all = self.inner.list_with_delimiter(dir.as_ref()).await?;
                let mut keys: Vec<_> = all.common_prefixes.into_iter().map(|p| (p, None)).collect();
                keys.extend(all.objects.into_iter().map(|o| (o.location.clone(), Some(o))));
                keys.sort_by(|a, b| a.0.cmp(&b.0));
                v.insert(keys)
            }
        };
        let from: usize = opts.page_token.as_deref().map_or(0, |t| t.parse().unwrap());
        let to = (from + opts.max_keys.unwrap()).min(keys.len());
        let mut result = object_store::ListResult { common_prefixes: vec![], objects: vec![] };
        for (k, meta) in &keys[from..to] {
            match meta {
                None => result.common_prefixes.push(k.clone()),
                Some(m) => result.objects.push(m.clone()),
            }
        }
        let page_token = (to < keys.len()).then(|| to.to_string());
        Ok(object_store::list::PaginatedListResult { result, page_token })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_of_100k_entries_is_listed_page_by_page_as_readdir_reaches_it() {
    let store = Arc::new(InMemory::new());
    const N: usize = 100_000;
    for k in 0..N {
        store.put(&Path::from(format!("pre/big/f{k:06}")), vec![b'x'].into()).await.unwrap();
    }
    store.put(&Path::from("pre/big/sub/inner"), vec![b'y'].into()).await.unwrap();
    let paged = Arc::new(Paged { inner: store.clone(), pages: Default::default(), sorted: Default::default() });
    let backend = shrinkfs_fuse::store::Backend { store: store.clone(), pages: Some(paged.clone()), multipart: None };
    let cfg = shrinkfs_fuse::store::StoreConfig::unretried();
    let b = Bucket::stack(backend, &Path::from("pre"), "paged", &cfg);
    let fs = Fs::new(b, small_frames(), Services::default());
    let dir = fs.lookup(ROOT, "big").await.unwrap();
    let (_, writing) = fs.create(dir.ino, "zz-being-written", 0o644, 0, 0).await.unwrap();
    let before = paged.pages.load(std::sync::atomic::Ordering::SeqCst);
    let pages = || paged.pages.load(std::sync::atomic::Ordering::SeqCst) - before;
    let dh = fs.opendir(dir.ino).await.unwrap();
    assert_eq!(pages(), 1, "opening lists one page");
    let first = fs.readdir(dh, dir.ino, 0).await.unwrap();
    assert_eq!(pages(), 1, "the first batch comes from the first page");
    assert_eq!((first[0].1.name.as_str(), first[1].1.name.as_str(), first[2].1.name.as_str()), (".", "..", "f000000"));
    let mut names = Vec::new();
    let mut offset = 0;
    loop {
        let batch = fs.readdir(dh, dir.ino, offset).await.unwrap();
        let Some(last) = batch.last() else { break };
        offset = last.0;
        names.extend(batch.into_iter().map(|(_, e)| e.name).filter(|n| n != "." && n != ".."));
    }
    assert_eq!(pages(), (N + 1).div_ceil(1000), "one request per 1,000 entries");
    assert_eq!(names.len(), N + 2, "every object, the subdirectory and the file being written");
    assert_eq!(names.iter().collect::<std::collections::HashSet<_>>().len(), names.len(), "no duplicates");
    assert_eq!(&names[N..], ["sub", "zz-being-written"]);
    fs.releasedir(dh);
    fs.release(writing).await.unwrap();
}

/// A burst of creates in a directory of a few pages: the first miss lists it whole (one request
/// per page, `WHOLE_PAGES` at most), and the creates after it within the negative TTL ask for no
/// listing; in a larger directory each miss asks for one key under the name instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_creates_lists_a_directory_of_a_few_pages_once() {
    use std::sync::atomic::Ordering::SeqCst;
    let store = Arc::new(InMemory::new());
    let whole = shrinkfs_fuse::namespace::WHOLE_PAGES;
    let (mid, big): (usize, usize) = (2 * 1000 + 500, whole * 1000 + 1);
    for k in 0..mid {
        store.put(&Path::from(format!("pre/mid/f{k:05}")), vec![b'x'].into()).await.unwrap();
    }
    for k in 0..big {
        store.put(&Path::from(format!("pre/big/f{k:05}")), vec![b'x'].into()).await.unwrap();
    }
    let paged = Arc::new(Paged { inner: store.clone(), pages: Default::default(), sorted: Default::default() });
    let backend = shrinkfs_fuse::store::Backend { store: store.clone(), pages: Some(paged.clone()), multipart: None };
    let b = Bucket::stack(backend, &Path::from("pre"), "paged", &shrinkfs_fuse::store::StoreConfig::unretried());
    let ttl = std::time::Duration::from_secs(60);
    let fs = Fs::new(b, FsConfig { namespace: namespace_ttl(ttl), ..small_frames() }, Services::default());
    let create = |dir: u64, name: String| {
        let fs = &fs;
        async move {
            assert!(matches!(fs.lookup(dir, &name).await, Err(Error::NotFound)), "{name} is new");
            let (_, fh) = fs.create(dir, &name, 0o644, 0, 0).await.unwrap();
            fs.release(fh).await.unwrap();
        }
    };

    let d = fs.lookup(ROOT, "mid").await.unwrap().ino;
    let before = paged.pages.load(SeqCst);
    for k in 0..20 {
        create(d, format!("new{k}")).await;
    }
    assert_eq!(paged.pages.load(SeqCst) - before, mid.div_ceil(1000), "one listing of every page, once");

    let d = fs.lookup(ROOT, "big").await.unwrap().ino;
    let before = paged.pages.load(SeqCst);
    for k in 0..3 {
        create(d, format!("new{k}")).await;
    }
    assert_eq!(paged.pages.load(SeqCst) - before, whole + 3, "{whole} pages tried once, then one key per miss");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_by_other_writers_show_once_the_metadata_ttl_has_passed() {
    let store = Arc::new(InMemory::new());
    let ttl = std::time::Duration::from_millis(300);
    let here = fs_on(&store, FsConfig { namespace: namespace_ttl(ttl), ..small_frames() });
    let other = fs_on(&store, small_frames());
    write_file(&other, ROOT, "shared.log", &text(10_000), 4096).await;
    write_file(&other, ROOT, "doomed.log", b"bye", 4096).await;
    let seen = here.lookup(ROOT, "shared.log").await.unwrap();
    assert_eq!(seen.size, 10_000);
    here.lookup(ROOT, "doomed.log").await.unwrap();

    // Another mount rewrites one file, deletes one and adds one.
    let changed = text(25_000);
    write_file(&other, ROOT, "shared.log", &changed, 4096).await;
    let gone = other.lookup(ROOT, "doomed.log").await.unwrap();
    other.unlink(ROOT, "doomed.log").await.unwrap();
    other.forget(gone.ino, 1);
    write_file(&other, ROOT, "new.log", b"fresh", 4096).await;

    // Within the TTL this mount answers from what it knows...
    assert_eq!(here.getattr(seen.ino).await.unwrap().size, 10_000, "cached for the TTL");
    assert!(here.lookup(ROOT, "doomed.log").await.is_ok(), "cached for the TTL");
    // ...after it, from the store.
    tokio::time::sleep(ttl + std::time::Duration::from_millis(50)).await;
    assert_eq!(here.getattr(seen.ino).await.unwrap().size, 25_000);
    assert_eq!(read_file(&here, seen.ino).await, changed);
    assert!(matches!(here.lookup(ROOT, "doomed.log").await, Err(Error::NotFound)));
    let dh = here.opendir(ROOT).await.unwrap();
    let names: Vec<String> = here.readdir(dh, ROOT, 0).await.unwrap().into_iter().map(|(_, e)| e.name).collect();
    assert_eq!(names, [".", "..", "new.log", "shared.log"]);
    let new = here.lookup(ROOT, "new.log").await.unwrap();
    assert_eq!(read_file(&here, new.ino).await, b"fresh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_of_objects_this_mount_knows_needs_no_request_per_file() {
    let store = Arc::new(InMemory::new());
    let fs = fs_on(&store, FsConfig { namespace: namespace_ttl(std::time::Duration::from_secs(60)), ..small_frames() });
    let d = fs.mkdir(ROOT, "d", 0o755, 0, 0).await.unwrap();
    for k in 0..20 {
        write_file(&fs, d.ino, &format!("f{k}"), &text(5000 + k), 4096).await;
    }
    // The kernel forgot everything (cache drop); the mount still knows these object versions.
    for k in 0..20 {
        let a = fs.lookup(d.ino, &format!("f{k}")).await.unwrap();
        fs.forget(a.ino, 2);
    }
    let tails = || fs.metrics().value("shrinkfs_store_request_duration_seconds_count{kind=\"get_range\"");
    let before = tails();
    let dh = fs.opendir(d.ino).await.unwrap();
    assert_eq!(fs.readdir(dh, d.ino, 0).await.unwrap().len(), 22);
    for k in 0..20 {
        assert_eq!(fs.lookup(d.ino, &format!("f{k}")).await.unwrap().size, 5000 + k as u64);
    }
    assert_eq!(tails(), before, "sizes came from the listing and the layout cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_whose_marker_key_is_too_long_may_be_a_file_but_not_a_directory() {
    let store = Arc::new(InMemory::new());
    let fs = fs_on(&store, small_frames());
    fn too_long<T>(r: Result<T, Error>) -> bool {
        matches!(r, Err(Error::BadName))
    }
    // The bucket takes keys of up to 1,024 bytes, "pre/" included: d4's is 1,007, its marker's 1,021.
    let mut dir = ROOT;
    for i in 0..4 {
        dir = fs.mkdir(dir, &format!("{i}{}", "d".repeat(249)), 0o755, 1000, 1000).await.unwrap().ino;
    }
    // A 12-byte name there has a 1,020-byte key, and its marker would have 1,034 bytes.
    let name = "a".repeat(12);
    assert!(matches!(fs.lookup(dir, &name).await, Err(Error::NotFound)));
    assert!(too_long(fs.mkdir(dir, &name, 0o755, 1000, 1000).await));
    let ino = write_file(&fs, dir, &name, b"long", 10).await;
    assert_eq!(read_file(&fs, ino).await, b"long");
    assert_eq!(fs.lookup(dir, &name).await.unwrap().ino, ino);
    // 1,024 bytes is the most.
    fs.rename(dir, &name, dir, &"c".repeat(16), false).await.unwrap();
    assert!(too_long(fs.create(dir, &"b".repeat(17), 0o644, 1000, 1000).await));
    assert!(too_long(fs.rename(dir, &"c".repeat(16), dir, &"b".repeat(17), false).await));
    // A directory may not move to such a name; a file may.
    let up = fs.lookup(ROOT, &format!("0{}", "d".repeat(249))).await.unwrap().ino;
    let up = fs.lookup(up, &format!("1{}", "d".repeat(249))).await.unwrap().ino;
    let up = fs.lookup(up, &format!("2{}", "d".repeat(249))).await.unwrap().ino;
    fs.mkdir(up, "e", 0o755, 1000, 1000).await.unwrap();
    write_file(&fs, up, "f", b"f", 10).await;
    let far = "x".repeat(255);
    assert!(too_long(fs.rename(up, "e", up, &far, false).await));
    fs.rename(up, "f", up, &far, false).await.unwrap();
    // A directory whose own marker would fit under its new name, but not the keys of what it
    // holds: refused before anything is copied (it once moved, leaving keys the store refuses).
    let g = fs.mkdir(up, "g", 0o755, 1000, 1000).await.unwrap().ino;
    let inner = "i".repeat(200);
    let ino = write_file(&fs, g, &inner, b"deep", 10).await;
    let longer = "g".repeat(71);
    assert!(too_long(fs.rename(up, "g", up, &longer, false).await));
    assert!(matches!(fs.lookup(up, &longer).await, Err(Error::NotFound)), "nothing moved");
    // Onto an empty directory of that name: refused before it is replaced, so it stays.
    fs.mkdir(up, &longer, 0o700, 1000, 1000).await.unwrap();
    assert!(too_long(fs.rename(up, "g", up, &longer, false).await));
    assert_eq!(fs.lookup(up, &longer).await.unwrap().perm, 0o700, "the directory it would replace is still there");
    let again = fs_on(&store, small_frames());
    let up_again = {
        let mut d = ROOT;
        for i in 0..3 {
            d = again.lookup(d, &format!("{i}{}", "d".repeat(249))).await.unwrap().ino;
        }
        d
    };
    assert!(again.lookup(up_again, &longer).await.is_ok(), "and in the store");
    assert_eq!(read_file(&fs, ino).await, b"deep");
    let keys: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(store.list(None)).await.unwrap();
    assert!(keys.iter().all(|o| o.location.as_ref().len() <= 1024), "no key longer than the store takes");
}

/// Whether a read-only open of `ino` lets the kernel keep its cached pages (closed at once).
async fn keeps(fs: &Fs, ino: u64) -> bool {
    let fh = fs.open(ino, false, false).await.unwrap();
    let keep = fs.keeps_cache(fh);
    fs.release(fh).await.unwrap();
    keep
}

/// The kernel keeps a file's cached pages across opens only while they are the version it read
/// them from: a write here, a truncate, or a new version from another mount makes the next open
/// drop them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kernel_keeps_cached_pages_only_of_the_version_it_read() {
    let store = Arc::new(InMemory::new());
    let ttl = std::time::Duration::from_millis(300);
    let fs = fs_on(&store, FsConfig { namespace: namespace_ttl(ttl), ..small_frames() });
    let other = fs_on(&store, small_frames());
    let ino = write_file(&fs, ROOT, "f", &text(10_000), 4096).await;
    assert!(!keeps(&fs, ino).await, "the first read-only open: nothing read from this version yet");
    assert!(keeps(&fs, ino).await, "the same version again");

    // A handle open for writing may put bytes in the kernel's pages, stored or not.
    let fh = fs.open(ino, true, false).await.unwrap();
    fs.write(fh, 0, b"changed").await.unwrap();
    fs.release(fh).await.unwrap();
    assert!(!keeps(&fs, ino).await, "after a write here");
    assert!(keeps(&fs, ino).await);
    let fh = fs.open(ino, true, false).await.unwrap();
    fs.release(fh).await.unwrap();
    assert!(!keeps(&fs, ino).await, "after an open for writing, even with nothing written");

    // A truncate.
    assert!(keeps(&fs, ino).await);
    fs.setattr(ino, SetAttr { size: Some(100), ..Default::default() }).await.unwrap();
    assert!(!keeps(&fs, ino).await, "after a truncate");

    // A reader beside an open writer shares its state: the kernel is not told to keep anything.
    let w = fs.open(ino, true, false).await.unwrap();
    let fh = fs.open(ino, false, false).await.unwrap();
    assert!(!fs.keeps_cache(fh));
    fs.release(fh).await.unwrap();
    fs.release(w).await.unwrap();

    // Another mount's new version, seen once the TTL has passed.
    assert!(!keeps(&fs, ino).await);
    assert!(keeps(&fs, ino).await);
    let o = other.lookup(ROOT, "f").await.unwrap();
    let fh = other.open(o.ino, true, true).await.unwrap();
    other.write(fh, 0, b"from elsewhere").await.unwrap();
    other.release(fh).await.unwrap();
    tokio::time::sleep(ttl + std::time::Duration::from_millis(50)).await;
    fs.lookup(ROOT, "f").await.unwrap();
    assert!(!keeps(&fs, ino).await, "another mount's version");
    assert_eq!(read_file(&fs, ino).await, b"from elsewhere");
}
