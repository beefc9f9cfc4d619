//! Format versions 1 and 2 side by side: which one a writer picks, that version 1 objects keep
//! their exact layout, that version 2 carries ctime and atime through every reader, sealed too, and
//! that each rule versions add or change refuses its malformed object by name.

mod common;

use shrinkfs_codec::error::Rule;
use shrinkfs_codec::format::{ENTRY_LEN, FOOTER_LEN, HEADER_LEN, TAG_LEN, checksum};
use shrinkfs_codec::seal::ObjectKey;
use shrinkfs_codec::{
    CodecId, CodecParams, EncodeConfig, Error, FileMeta, Layout, MasterKey, ObjectWriter, Version, decode_all,
    encode_all, encode_all_with,
};

const KEY: [u8; 32] = [9; 32];

fn config(sealed: bool) -> EncodeConfig {
    EncodeConfig {
        params: CodecParams { codec: CodecId::Zstd, level: 1, dict: None },
        frame_size: 4096,
        key: sealed.then(|| MasterKey::from_bytes(&KEY).unwrap()),
    }
}

fn master(sealed: bool) -> Option<MasterKey> {
    sealed.then(|| MasterKey::from_bytes(&KEY).unwrap())
}

fn data() -> Vec<u8> {
    (0..900).flat_map(|i| format!("line {i} of a file with times\n").into_bytes()).collect()
}

/// Metadata version 1 stores.
fn v1_meta() -> FileMeta {
    FileMeta {
        mode: Some(0o100640),
        uid: Some(1000),
        gid: Some(100),
        mtime: Some((1_700_000_000, 5)),
        ..Default::default()
    }
}

/// Metadata that needs version 2: ctime and atime, one before the epoch.
fn v2_meta() -> FileMeta {
    FileMeta { ctime: Some((-86_400, 999_999_999)), atime: Some((1_800_000_000, 0)), ..v1_meta() }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Reads an object front to back in pieces of 1000 bytes, as `unpack -` does.
fn stream_decode(object: &[u8], key: Option<MasterKey>) -> Result<Vec<u8>, Error> {
    common::stream_decode(object, key, 1000)
}

/// The index body (tag excluded) of a whole object, and where it starts.
fn index_of(object: &[u8]) -> (usize, usize) {
    let footer = &object[object.len() - FOOTER_LEN..];
    let start = u64_at(footer, 0) as usize;
    let sealed = u16_at(footer, 30) & 1 != 0;
    (start, start + u32_at(footer, 8) as usize - if sealed { TAG_LEN } else { 0 })
}

/// Changes an object with `edit(head, index body, footer)`, then makes every checksum (and the
/// index tag, when `key`) right again, so only the rule about the changed field can fail.
fn edit(
    object: &[u8],
    key: Option<&MasterKey>,
    edit: impl FnOnce(&mut Vec<u8>, &mut Vec<u8>, &mut Vec<u8>),
) -> Vec<u8> {
    let (start, body_end) = index_of(object);
    let mut head = object[..HEADER_LEN].to_vec();
    let frames = object[HEADER_LEN..start].to_vec();
    let mut body = object[start..body_end].to_vec();
    let mut footer = object[object.len() - FOOTER_LEN..].to_vec();
    edit(&mut head, &mut body, &mut footer);
    let c = checksum(&head[..60]);
    head[60..64].copy_from_slice(&c.to_le_bytes());
    let c = checksum(&body[8..68]);
    body[68..72].copy_from_slice(&c.to_le_bytes());
    let tag = key.map_or(Vec::new(), |m| {
        let object_id: [u8; 16] = body[24..40].try_into().unwrap();
        ObjectKey::derive(m, &object_id).index_tag(&body).to_vec()
    });
    let index = [body, tag].concat();
    footer[24..28].copy_from_slice(&checksum(&index).to_le_bytes());
    let c = checksum(&footer[..36]);
    footer[36..40].copy_from_slice(&c.to_le_bytes());
    [head, frames, index, footer].concat()
}

/// Every reader refuses `object` naming `rule` (`stream`: the rule a reader front to back names).
fn refused(object: &[u8], sealed: bool, tail: Rule, stream: Rule) {
    let e = Layout::parse(object, object.len() as u64).unwrap_err();
    assert_eq!(e.rule(), Some(tail), "from the tail: {e}");
    let e = decode_all(object, master(sealed).as_ref(), &[]).unwrap_err();
    assert_eq!(e.rule(), Some(tail), "whole object: {e}");
    let e = stream_decode(object, master(sealed)).unwrap_err();
    assert_eq!(e.rule(), Some(stream), "front to back: {e}");
}

#[test]
fn objects_without_ctime_and_atime_are_version_1_with_version_1_layout() {
    let data = data();
    for sealed in [false, true] {
        for meta in [FileMeta::default(), v1_meta()] {
            let object = encode_all_with(&config(sealed), &data, &meta).unwrap();
            let layout = Layout::parse(&object, object.len() as u64).unwrap();
            assert_eq!((layout.header.version, layout.footer.version), (Version::V1, Version::V1));
            assert_eq!(u16_at(&object, 8), 1);
            assert_eq!(u16_at(&object, object.len() - FOOTER_LEN + 28), 1);
            let n = layout.entries.len();
            assert_eq!(layout.footer.index_len as usize, 104 + 32 * n + if sealed { TAG_LEN } else { 0 });
            // Byte for byte what a version 1 writer lays out: the metadata block of FORMAT.md's
            // version 1 table at index bytes 72..104, the entries from 104.
            let (start, _) = index_of(&object);
            let index = &object[start..];
            let mut want = [0u8; 32];
            let mut flags = 0;
            if let Some(m) = meta.mode {
                want[0..4].copy_from_slice(&m.to_le_bytes());
                flags |= 1;
            }
            if let Some(u) = meta.uid {
                want[4..8].copy_from_slice(&u.to_le_bytes());
                flags |= 2;
            }
            if let Some(g) = meta.gid {
                want[8..12].copy_from_slice(&g.to_le_bytes());
                flags |= 4;
            }
            if let Some((s, ns)) = meta.mtime {
                want[16..24].copy_from_slice(&s.to_le_bytes());
                want[24..28].copy_from_slice(&ns.to_le_bytes());
                flags |= 8;
            }
            want[12..16].copy_from_slice(&u32::to_le_bytes(flags));
            assert_eq!(index[72..104], want);
            assert_eq!(u64_at(index, 104), HEADER_LEN as u64, "entry 0 starts right after the metadata");
            assert_eq!(u64_at(index, 104 + ENTRY_LEN), layout.entries[1].stored_offset);
            assert_eq!(layout.meta, meta);
        }
    }
    // encode_all and a streaming writer started with new_object() write version 1 too.
    let object = encode_all(&config(false), b"x").unwrap();
    assert_eq!(object.len(), 64 + 24 + 1 + 104 + 32 + 48);
    assert_eq!(u16_at(&object, 8), 1);
    let w = ObjectWriter::new(std::sync::Arc::new(config(false).new_object()));
    assert_eq!([w.header_bytes().to_vec(), w.finish()].concat().len(), 216);
}

#[test]
fn ctime_and_atime_make_version_2_and_read_back_everywhere() {
    let data = data();
    let metas = [
        v2_meta(),
        FileMeta { ctime: Some((i64::MIN, 0)), ..Default::default() },
        FileMeta { atime: Some((-1, 1)), ..Default::default() },
        FileMeta {
            ctime: Some((0, 0)),
            atime: Some((i64::MAX, 999_999_999)),
            mode: Some(0o120777),
            ..Default::default()
        },
    ];
    for sealed in [false, true] {
        for meta in metas {
            for data in [&data[..], &[]] {
                let object = encode_all_with(&config(sealed), data, &meta).unwrap();
                let layout = Layout::parse(&object, object.len() as u64).unwrap();
                assert_eq!((layout.header.version, layout.footer.version), (Version::V2, Version::V2));
                assert_eq!(u16_at(&object, 8), 2);
                assert_eq!(u16_at(&object, object.len() - FOOTER_LEN + 28), 2);
                let n = layout.entries.len();
                assert_eq!(layout.footer.index_len as usize, 136 + 32 * n + if sealed { TAG_LEN } else { 0 });
                assert_eq!(layout.meta, meta);
                if data.is_empty() {
                    assert_eq!(object.len(), 248 + if sealed { TAG_LEN } else { 0 });
                }
                assert_eq!(decode_all(&object, master(sealed).as_ref(), &[]).unwrap(), data);
                assert_eq!(stream_decode(&object, master(sealed)).unwrap(), data);
                layout.open(master(sealed).as_ref(), &[]).unwrap();
            }
        }
    }
}

#[test]
fn a_streaming_writer_started_as_version_2_may_leave_the_times_out() {
    let ctx = std::sync::Arc::new(config(true).new_object_in(Version::V2));
    let w = ObjectWriter::new(ctx);
    let object = [w.header_bytes().to_vec(), w.finish_with(&v1_meta()).unwrap()].concat();
    let layout = Layout::parse(&object, object.len() as u64).unwrap();
    assert_eq!(layout.footer.version, Version::V2);
    assert_eq!(layout.meta, v1_meta());
    assert_eq!(stream_decode(&object, master(true)).unwrap(), b"");
    // One started as version 1 (the header went out saying so) cannot take them.
    let w = ObjectWriter::new(std::sync::Arc::new(config(true).new_object()));
    let e = w.finish_with(&v2_meta()).unwrap_err();
    assert!(matches!(e, Error::MetaNeedsVersion { needed: 2, started: 1 }), "{e}");
}

#[test]
fn a_sealed_index_authenticates_ctime_and_atime() {
    let object = encode_all_with(&config(true), &data(), &v2_meta()).unwrap();
    let key = master(true).unwrap();
    for at in [72 + 32, 72 + 40, 72 + 44, 72 + 52] {
        // Every checksum made right, the tag left as it was: only the tag can tell.
        let (start, body_end) = index_of(&object);
        let mut bad = object.clone();
        bad[start + at] ^= 1;
        let index_crc = checksum(&bad[start..body_end + TAG_LEN]);
        let n = bad.len();
        bad[n - FOOTER_LEN + 24..n - FOOTER_LEN + 28].copy_from_slice(&index_crc.to_le_bytes());
        let c = checksum(&bad[n - FOOTER_LEN..n - FOOTER_LEN + 36]);
        bad[n - FOOTER_LEN + 36..n - FOOTER_LEN + 40].copy_from_slice(&c.to_le_bytes());
        let layout = Layout::parse(&bad, n as u64).unwrap();
        assert!(matches!(layout.open(Some(&key), &[]), Err(Error::IndexAuth)), "byte {at}");
        assert!(matches!(decode_all(&bad, Some(&key), &[]), Err(Error::IndexAuth)), "byte {at}");
        assert!(matches!(stream_decode(&bad, Some(key.clone())), Err(Error::IndexAuth)), "byte {at}");
    }
}

#[test]
fn every_flipped_byte_of_a_version_2_object_is_an_error() {
    let data = &data()[..9000];
    for sealed in [false, true] {
        let object = encode_all_with(&config(sealed), data, &v2_meta()).unwrap();
        for i in 0..object.len() {
            let mut bad = object.clone();
            bad[i] ^= 0x10;
            assert!(decode_all(&bad, master(sealed).as_ref(), &[]).is_err(), "flip at {i}/{}", object.len());
            assert!(stream_decode(&bad, master(sealed)).is_err(), "stream: flip at {i}");
        }
    }
}

#[test]
fn header_and_footer_must_name_the_same_version() {
    let data = data();
    for sealed in [false, true] {
        let key = master(sealed);
        let v1 = encode_all_with(&config(sealed), &data, &v1_meta()).unwrap();
        let v2 = encode_all_with(&config(sealed), &data, &v2_meta()).unwrap();
        // A version 2 index and footer whose header copy (and header) say version 1.
        let b = edit(&v2, key.as_ref(), |head, body, _| {
            head[8] = 1;
            body[16] = 1;
        });
        refused(&b, sealed, Rule::VersionAgree, Rule::StreamIndex);
        // A version 1 index and footer whose header copy (and header) say version 2.
        let b = edit(&v1, key.as_ref(), |head, body, _| {
            head[8] = 2;
            body[16] = 2;
        });
        refused(&b, sealed, Rule::VersionAgree, Rule::Truncated);
        // The header copy agrees with the footer, the header at offset 0 does not.
        let b = edit(&v1, key.as_ref(), |head, _, _| head[8] = 2);
        let e = decode_all(&b, key.as_ref(), &[]).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::HeaderCopy), "{e}");
        assert_eq!(stream_decode(&b, key.clone()).unwrap_err().rule(), Some(Rule::Truncated));
        let b = edit(&v2, key.as_ref(), |head, _, _| head[8] = 1);
        assert_eq!(decode_all(&b, key.as_ref(), &[]).unwrap_err().rule(), Some(Rule::HeaderCopy));
        assert_eq!(stream_decode(&b, key.clone()).unwrap_err().rule(), Some(Rule::StreamIndex));
    }
}

#[test]
fn version_3_is_refused_naming_the_versions_this_build_reads() {
    let v2 = encode_all_with(&config(false), &data(), &v2_meta()).unwrap();
    let b = edit(&v2, None, |_, _, footer| footer[28] = 3);
    let e = Layout::parse(&b, b.len() as u64).unwrap_err();
    assert!(matches!(e, Error::UnsupportedVersion { rule: Rule::FooterVersion, version: 3, supported: 2 }), "{e}");
    assert_eq!(e.to_string(), "unsupported format version 3 (this build reads versions 1 to 2) [footer-version]");
    let b = edit(&v2, None, |_, body, _| body[16] = 3);
    refused(&b, false, Rule::HeaderVersion, Rule::HeaderVersion);
    let b = edit(&v2, None, |head, _, _| head[8] = 3);
    let e = stream_decode(&b, None).unwrap_err();
    assert!(matches!(e, Error::UnsupportedVersion { rule: Rule::HeaderVersion, version: 3, .. }), "{e}");
}

#[test]
fn version_2_metadata_rules_refuse_their_malformed_objects() {
    let data = data();
    let v1 = encode_all_with(&config(false), &data, &v1_meta()).unwrap();
    let v2 = encode_all_with(&config(false), &data, &v2_meta()).unwrap();
    let only_mode = encode_all_with(
        &config(false),
        &data,
        &FileMeta { mode: Some(0o100600), ctime: Some((5, 5)), ..Default::default() },
    )
    .unwrap();
    let meta = 72;
    // meta-flags: ctime and atime bits are unknown in version 1; bit 6 and up in version 2.
    let b = edit(&v1, None, |_, body, _| body[meta + 12] |= 0x10);
    refused(&b, false, Rule::MetaFlags, Rule::MetaFlags);
    let b = edit(&v1, None, |_, body, _| body[meta + 12] |= 0x20);
    refused(&b, false, Rule::MetaFlags, Rule::MetaFlags);
    let b = edit(&v2, None, |_, body, _| body[meta + 12] |= 0x40);
    refused(&b, false, Rule::MetaFlags, Rule::MetaFlags);
    // meta-absent: an absent atime's bytes (seconds, then nanoseconds) are zero.
    for at in [44, 52] {
        let b = edit(&only_mode, None, |_, body, _| body[meta + at] = 1);
        refused(&b, false, Rule::MetaAbsent, Rule::MetaAbsent);
    }
    // meta-nanos: ctime's and atime's nanoseconds below 10^9.
    for at in [40, 52] {
        let b = edit(&v2, None, |_, body, _| {
            body[meta + at..meta + at + 4].copy_from_slice(&1_000_000_000u32.to_le_bytes())
        });
        refused(&b, false, Rule::MetaNanos, Rule::MetaNanos);
    }
    // meta-reserved: bytes 56..64 of the version 2 block.
    for at in [56, 63] {
        let b = edit(&v2, None, |_, body, _| body[meta + at] = 1);
        refused(&b, false, Rule::MetaReserved, Rule::MetaReserved);
    }
}

#[test]
fn a_version_2_object_shorter_than_248_bytes_breaks_object_length() {
    let empty = encode_all_with(&config(false), b"", &v2_meta()).unwrap();
    assert_eq!(empty.len(), 248);
    // Drop 8 bytes of the index (its metadata's reserved tail): the footer still verifies.
    let mut b = empty[..64 + 128].to_vec();
    b.extend_from_slice(&empty[empty.len() - FOOTER_LEN..]);
    assert_eq!(b.len(), 240);
    let e = Layout::parse(&b, b.len() as u64).unwrap_err();
    assert_eq!(e.rule(), Some(Rule::ObjectLength), "{e}");
    assert!(e.to_string().contains("a version 2 object has at least 248"), "{e}");
    // A version 1 object of 216 bytes is whole.
    let empty = encode_all(&config(false), b"").unwrap();
    assert_eq!(empty.len(), 216);
    assert_eq!(decode_all(&empty, None, &[]).unwrap(), b"");
}
