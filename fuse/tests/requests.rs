//! Store requests per operation, counted by kind at the top of the store stack, for the
//! operations docs/SEMANTICS.md ("Requests per operation") states a minimum for: create of a new
//! name, stat of a listed file, `ls -l` of a directory of 1,000 objects written by another mount.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use object_store::path::Path;
use shrinkfs_fuse::inode::ROOT;
use shrinkfs_fuse::store::Bucket;
use shrinkfs_fuse::{Fs, FsConfig, NamespaceConfig, Services};

/// A mount of `store` trusting metadata for `ttl`.
fn mount(store: &Arc<InMemory>, ttl: Duration) -> Fs {
    let cfg = FsConfig {
        namespace: NamespaceConfig { metadata_ttl: ttl, negative_ttl: ttl, ..NamespaceConfig::default() },
        ..FsConfig::default()
    };
    Fs::new(Bucket::new(store.clone(), Path::from("pre"), "memory"), cfg, Services::default())
}

/// Requests made so far, by kind (successful or not).
fn requests(fs: &Fs) -> BTreeMap<String, u64> {
    let text = fs.metrics().render(shrinkfs_fuse::metrics::Format::Prometheus);
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("shrinkfs_store_request_duration_seconds_count{kind=\"") else { continue };
        let kind = rest.split('"').next().unwrap_or_default().to_owned();
        let n: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        *out.entry(kind).or_default() += n as u64;
    }
    out
}

/// The requests `fs` made between `before` and now, as `kind=n` sorted by kind.
fn since(fs: &Fs, before: &BTreeMap<String, u64>) -> String {
    let now = requests(fs);
    let parts: Vec<String> = now
        .iter()
        .filter_map(|(k, n)| {
            let d = n - before.get(k).copied().unwrap_or(0);
            (d > 0).then(|| format!("{k}={d}"))
        })
        .collect();
    parts.join(" ")
}

async fn write(fs: &Fs, parent: u64, name: &str, data: &[u8]) {
    let (_, fh) = fs.create(parent, name, 0o640, 1000, 1000).await.unwrap();
    fs.write(fh, 0, data).await.unwrap();
    fs.flush(fh).await.unwrap();
    fs.release(fh).await.unwrap();
}

/// What `ls -l DIR` asks of the core: open the directory, read it all with each entry's
/// attributes (READDIRPLUS), then the attributes of every entry (which the kernel has cached from
/// the listing; asked here to show they cost nothing). Returns the sizes seen.
async fn ls_l(fs: &Fs, dir: u64, cached: bool) -> Vec<u64> {
    let fh = fs.opendir(dir).await.unwrap();
    let mut sizes = Vec::new();
    let mut offset = 0;
    loop {
        let got = fs.readdirplus(fh, dir, offset).await.unwrap();
        let Some(last) = got.last() else { break };
        offset = last.0;
        for (_, e, a, trusted) in got {
            if e.name != "." && e.name != ".." {
                assert!(trusted || !cached, "{} listed without attributes the kernel may keep", e.name);
                assert_eq!(fs.getattr(e.ino).await.unwrap(), a);
                sizes.push(a.size);
            }
        }
    }
    fs.releasedir(fh);
    sizes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_per_operation_are_at_their_minimum() {
    let store = Arc::new(InMemory::new());
    let writer = mount(&store, Duration::from_secs(60));
    let d = writer.mkdir(ROOT, "d", 0o755, 0, 0).await.unwrap().ino;
    for k in 0..1000 {
        write(&writer, d, &format!("f{k:04}"), format!("file {k}\n").repeat(k % 7 + 1).as_bytes()).await;
    }
    let e = writer.mkdir(ROOT, "e", 0o755, 0, 0).await.unwrap().ino;
    write(&writer, e, "x", b"x").await;

    // Reading back a small file this mount wrote, while its version is confirmed current: the
    // layout and the one frame kept from the write serve it, with no request.
    let f3 = writer.lookup(d, "f0003").await.unwrap().ino;
    let before = requests(&writer);
    let fh = writer.open(f3, false, false).await.unwrap();
    let got = writer.read(fh, 0, 4096).await.unwrap();
    writer.release(fh).await.unwrap();
    assert_eq!(&got[..], "file 3\n".repeat(4).as_bytes());
    assert_eq!(since(&writer, &before), "", "read back of a small file written here");

    // `ls -l` of 1,000 objects another mount wrote: one listing, one HEAD per file (a listing
    // carries no user metadata), no footer.
    let reader = mount(&store, Duration::from_secs(60));
    let d2 = reader.lookup(ROOT, "d").await.unwrap().ino;
    let before = requests(&reader);
    let sizes = ls_l(&reader, d2, true).await;
    assert_eq!(sizes.len(), 1000);
    assert_eq!(sizes[3], "file 3\n".len() as u64 * 4);
    assert_eq!(since(&reader, &before), "head=1000 list_delimiter=1", "ls -l");

    // Create of a new name in a directory listed within the negative TTL: the kernel's lookup
    // is answered from the listing; create, write and close are one PUT.
    let before = requests(&reader);
    assert!(matches!(reader.lookup(d2, "new").await, Err(shrinkfs_fuse::Error::NotFound)));
    write(&reader, d2, "new", b"hello\n").await;
    assert_eq!(since(&reader, &before), "put=1", "create in a listed directory");

    // In a directory not listed here: a HEAD (no such object) and one listing of the directory
    // (no such subdirectory), which answers the next creates there too.
    let e2 = reader.lookup(ROOT, "e").await.unwrap().ino;
    let before = requests(&reader);
    assert!(reader.lookup(e2, "new").await.is_err());
    write(&reader, e2, "new", b"hello\n").await;
    assert_eq!(since(&reader, &before), "head=1 list_delimiter=1 put=1", "create in an unlisted directory");
    let before = requests(&reader);
    assert!(reader.lookup(e2, "new2").await.is_err());
    write(&reader, e2, "new2", b"hello\n").await;
    assert_eq!(since(&reader, &before), "put=1", "the next create there");

    // Stat of a listed file once its attributes are no longer trusted: one HEAD each for the
    // lookup and the getattr, never the footer.
    let stat = mount(&store, Duration::ZERO);
    let d3 = stat.lookup(ROOT, "d").await.unwrap().ino;
    let _ = ls_l(&stat, d3, false).await;
    let before = requests(&stat);
    let a = stat.lookup(d3, "f0005").await.unwrap();
    assert_eq!(since(&stat, &before), "head=1", "lookup after the TTL");
    let before = requests(&stat);
    assert_eq!(stat.getattr(a.ino).await.unwrap().size, "file 5\n".len() as u64 * 6);
    assert_eq!(since(&stat, &before), "head=1", "getattr after the TTL");

    // Reading a small file another mount wrote: one GET brings the whole object, index and
    // frames together (the lookup's HEAD is above).
    let before = requests(&stat);
    let fh = stat.open(a.ino, false, false).await.unwrap();
    let got = stat.read(fh, 0, 4096).await.unwrap();
    stat.release(fh).await.unwrap();
    assert_eq!(&got[..], "file 5\n".repeat(6).as_bytes());
    assert_eq!(since(&stat, &before), "get_range=1", "open and read of a small file");

    // `ls -l` again once the TTL has passed: the listing's ETags confirm what the HEADs said.
    let again = mount(&store, Duration::from_secs(1));
    let d4 = again.lookup(ROOT, "d").await.unwrap().ino;
    let _ = ls_l(&again, d4, true).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let before = requests(&again);
    assert_eq!(ls_l(&again, d4, true).await.len(), 1001);
    assert_eq!(since(&again, &before), "list_delimiter=1", "ls -l of unchanged files after the TTL");

    // `ls -l` with a listing TTL (`--listing-ttl`), within it: answered from the last listing
    // and the attributes it confirmed, with no request.
    let cached = Fs::new(
        Bucket::new(store.clone(), Path::from("pre"), "memory"),
        FsConfig {
            namespace: NamespaceConfig {
                metadata_ttl: Duration::from_secs(60),
                negative_ttl: Duration::from_secs(60),
                listing_ttl: Duration::from_secs(60),
                ..NamespaceConfig::default()
            },
            ..FsConfig::default()
        },
        Services::default(),
    );
    let d6 = cached.lookup(ROOT, "d").await.unwrap().ino;
    assert_eq!(ls_l(&cached, d6, true).await.len(), 1001);
    let before = requests(&cached);
    assert_eq!(ls_l(&cached, d6, true).await.len(), 1001);
    assert_eq!(since(&cached, &before), "", "ls -l within the listing TTL");

    // A burst of stats once the TTL has passed again (after a cache drop: lookups of names the
    // mount still knows): a HEAD for each of the first few (4 per page of the directory's
    // listing, less one: 1,001 names are two pages), then one listing confirms the rest.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let before = requests(&again);
    for k in 0..200 {
        assert_eq!(
            again.lookup(d4, &format!("f{k:04}")).await.unwrap().size,
            format!("file {k}\n").len() as u64 * (k % 7 + 1)
        );
    }
    assert_eq!(since(&again, &before), "head=7 list_delimiter=1", "a burst of stats after the TTL");

    // Removing a file just looked up (as `rm` does): the DELETE alone.
    let rm = mount(&store, Duration::from_secs(60));
    let d5 = rm.lookup(ROOT, "d").await.unwrap().ino;
    rm.lookup(d5, "f0007").await.unwrap();
    let before = requests(&rm);
    rm.unlink(d5, "f0007").await.unwrap();
    assert_eq!(since(&rm, &before), "delete=1", "unlink of a name just looked up");
    // The name is then known absent here: looking it up, and making it again, ask nothing more.
    let before = requests(&rm);
    assert!(matches!(rm.lookup(d5, "f0007").await, Err(shrinkfs_fuse::Error::NotFound)));
    let (_, fh) = rm.create(d5, "f0007", 0o644, 0, 0).await.unwrap();
    rm.write(fh, 0, b"again").await.unwrap();
    rm.flush(fh).await.unwrap();
    rm.release(fh).await.unwrap();
    assert_eq!(since(&rm, &before), "put=1", "a lookup and a create of a name just unlinked");
    // And the old name of a file just renamed.
    rm.lookup(d5, "f0008").await.unwrap();
    rm.rename(d5, "f0008", d5, "moved", false).await.unwrap();
    let before = requests(&rm);
    assert!(matches!(rm.lookup(d5, "f0008").await, Err(shrinkfs_fuse::Error::NotFound)));
    assert_eq!(since(&rm, &before), "", "a lookup of a name just renamed away");
}

/// Objects without a record (older versions, other tools) or with one that is not theirs are
/// described by their footer: the record never overrides it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_without_a_valid_record_are_described_by_their_footer() {
    use object_store::{ObjectStore, PutOptions};
    use shrinkfs_fuse::recorded::Recorded;
    let store = Arc::new(InMemory::new());
    let meta = shrinkfs_codec::FileMeta {
        mode: Some(0o100600),
        uid: Some(7),
        gid: Some(8),
        mtime: Some((1000, 0)),
        ..Default::default()
    };
    let obj = shrinkfs_codec::encode_all_with(&Default::default(), b"twelve bytes", &meta).unwrap();
    store.put(&Path::from("pre/old"), obj.clone().into()).await.unwrap();
    store.put(&Path::from("pre/plain"), b"from another tool".to_vec().into()).await.unwrap();
    // A record of another object (its stored size is not this one's), as a copy by a tool
    // that kept the metadata of the object it replaced would leave.
    let wrong = Recorded { size: 999, stored: obj.len() as u64 + 1, meta, rdev: 0, codec: "zstd".into() };
    let opts = PutOptions { attributes: wrong.attributes(), ..Default::default() };
    store.put_opts(&Path::from("pre/mismatch"), obj.into(), opts).await.unwrap();

    let fs = mount(&store, Duration::from_secs(60));
    for (name, size, uid) in [("old", 12, 7), ("plain", 17, nix::unistd::getuid().as_raw()), ("mismatch", 12, 7)] {
        let before = requests(&fs);
        let a = fs.lookup(ROOT, name).await.unwrap();
        assert_eq!((a.size, a.uid), (size, uid), "{name}");
        assert_eq!(since(&fs, &before), "get_range=1 head=1", "{name}: HEAD, then the footer");
    }
}

/// A store whose HEADs carry no records (a server that drops user metadata, a bucket written by
/// older versions or other tools) stops costing a HEAD before each footer: after 32 HEADs without
/// a record, a lookup is the footer's GET alone — and so it always is on a sealed mount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_read_the_footer_at_once_where_no_records_come_back() {
    use object_store::ObjectStore;
    let store = Arc::new(InMemory::new());
    for k in 0..40 {
        let obj = shrinkfs_codec::encode_all_with(&Default::default(), b"old", &Default::default()).unwrap();
        store.put(&Path::from(format!("pre/old{k}")), obj.into()).await.unwrap();
    }
    let fs = mount(&store, Duration::from_secs(60));
    for k in 0..32 {
        fs.lookup(ROOT, &format!("old{k}")).await.unwrap();
    }
    let before = requests(&fs);
    assert_eq!(fs.lookup(ROOT, "old32").await.unwrap().size, 3);
    assert_eq!(since(&fs, &before), "get_range=1");

    let key = shrinkfs_codec::MasterKey::from_bytes(&[7; 32]).unwrap();
    let cfg = FsConfig {
        encode: shrinkfs_codec::EncodeConfig { key: Some(key), ..Default::default() },
        reader: shrinkfs_fuse::ReaderConfig { allow_unsealed: true, ..Default::default() },
        ..FsConfig::default()
    };
    let sealed = Fs::new(Bucket::new(store.clone(), Path::from("pre"), "memory"), cfg, Services::default());
    let before = requests(&sealed);
    let old0 = sealed.lookup(ROOT, "old0").await.unwrap();
    assert_eq!(old0.size, 3);
    assert_eq!(since(&sealed, &before), "get_range=1", "a sealed mount believes no record");

    // That GET brought the small object whole: an open and read within the TTL ask nothing more.
    for (fs, ino) in [(&fs, fs.lookup(ROOT, "old32").await.unwrap().ino), (&sealed, old0.ino)] {
        let before = requests(fs);
        let fh = fs.open(ino, false, false).await.unwrap();
        assert_eq!(&fs.read(fh, 0, 4096).await.unwrap()[..], b"old");
        fs.release(fh).await.unwrap();
        assert_eq!(since(fs, &before), "", "open and read after a lookup that read the object whole");
    }
}
