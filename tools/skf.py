#!/usr/bin/env python3
"""skf.py: a second decoder (and encoder) for the shrinkfs object format, written from
docs/FORMAT.md and standard codec and crypto packages, to show the format needs no shrinkfs.

    skf.py decode OBJ OUT [--key-file K] [--dict D]... [--allow-unsealed]   front to back
    skf.py range OBJ START LEN [--key-file K] [--dict D]... [--allow-unsealed]  from the tail
    skf.py info OBJ                                                          footer, index, metadata
    skf.py encode IN OUT [--codec C] [--level N] [--frame-size N] [--key-file K] [--times]
    skf.py batch < COMMANDS      many commands in one process (a test harness's loop; see below)

A malformed object exits 1 with one line on stderr, `error: <what> [<rule>]`, naming the rule of
FORMAT.md's conformance table; a wrong or missing key, or an unsealed object read with a key,
exits 4; a codec this host cannot decode (GPU only) exits 3; usage errors exit 2.
"""

import argparse
import bisect
import contextlib
import io
import json
import os
import struct
import sys
import tempfile
import time
import zlib

import cramjam
import crc32c
import lz4.block
import lz4.frame
import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

HEAD_MAGIC = b"\x89SHRKFS\n"
FOOT_MAGIC = b"\nSHRKFS\x89"
INDEX_MAGIC = b"SKIX"
HEADER_LEN, FRAME_HEADER_LEN, ENTRY_LEN, FOOTER_LEN, TAG_LEN = 64, 24, 32, 48, 16
MAX_RAW = 64 << 20
# Per format version: the file metadata block's length and its defined flag bits (mode, uid, gid,
# mtime; version 2 adds ctime and atime).
META_LEN = {1: 32, 2: 64}
META_FLAGS = {1: 0xF, 2: 0x3F}
NEWEST = max(META_LEN)


def index_fixed(version):
    """Bytes of the index before its entries: magic, count, header copy, file metadata."""
    return 8 + HEADER_LEN + META_LEN[version]


def min_object(version):
    """The smallest object of a version: an empty file's header, index and footer."""
    return HEADER_LEN + index_fixed(version) + FOOTER_LEN


SMALLEST_OBJECT = min(min_object(v) for v in META_LEN)
TAIL_FETCH = 64 << 10
CODECS = {0: "none", 1: "zstd", 2: "lz4-block", 3: "deflate", 4: "snappy", 5: "lz4",
          16: "gdeflate", 17: "cascaded", 18: "bitcomp", 19: "ans"}
CODEC_IDS = {v: k for k, v in CODECS.items()}


class Failure(Exception):
    """An error with the exit code it deserves and, for malformed objects, the rule broken."""

    def __init__(self, what, rule=None, code=1):
        super().__init__(what)
        self.what, self.rule, self.code = what, rule, code

    def line(self):
        return f"error: {self.what}" + (f" [{self.rule}]" if self.rule else "")


def bad(rule, what):
    return Failure(what, rule, 4 if rule in ("key-check", "sealed-only") else 1)


def crc(b):
    return crc32c.crc32c(b)


def u16(b, at):
    return struct.unpack_from("<H", b, at)[0]


def u32(b, at):
    return struct.unpack_from("<I", b, at)[0]


def u64(b, at):
    return struct.unpack_from("<Q", b, at)[0]


# ---- Structures -------------------------------------------------------------------------------

def parse_header(b):
    """Header rules, in the order FORMAT.md gives them."""
    if b[:8] != HEAD_MAGIC:
        raise bad("header-magic", "bad magic in header")
    if crc(b[:60]) != u32(b, 60):
        raise bad("header-crc", "header checksum mismatch")
    version = u16(b, 8)
    if version not in META_LEN:
        raise bad("header-version", f"unsupported format version {version} (this decoder reads 1 to {NEWEST})")
    flags = u16(b, 10)
    if flags & ~1:
        raise bad("header-flags", f"unknown header flags {flags:#x}")
    sealed = bool(flags & 1)
    if not sealed and any(b[32:40]):
        raise bad("header-reserved", "key check set in an unsealed header")
    if any(b[44:60]):
        raise bad("header-reserved", "reserved header bytes are not zero")
    return {"version": version, "sealed": sealed, "flags": flags, "frame_size": u32(b, 12), "object_id": bytes(b[16:32]),
            "key_check": bytes(b[32:40]), "dict_id": u32(b, 40), "raw": bytes(b[:64])}


def parse_footer(b, object_len):
    """Footer rules; `b` is the last 48 bytes of an object of `object_len` bytes."""
    if object_len < SMALLEST_OBJECT:
        raise bad("object-length", f"object of {object_len} bytes ends with the footer magic")
    if crc(b[:36]) != u32(b, 36):
        raise bad("footer-crc", "footer checksum mismatch")
    version = u16(b, 28)
    if version not in META_LEN:
        raise bad("footer-version", f"unsupported format version {version} (this decoder reads 1 to {NEWEST})")
    if object_len < min_object(version):
        raise bad("object-length", f"version {version} object of {object_len} bytes")
    flags = u16(b, 30)
    if flags & ~1:
        raise bad("footer-flags", f"unknown footer flags {flags:#x}")
    if u32(b, 32):
        raise bad("footer-reserved", "reserved footer bytes are not zero")
    f = {"version": version, "index_offset": u64(b, 0), "index_len": u32(b, 8), "frame_count": u32(b, 12),
         "logical_size": u64(b, 16), "index_crc": u32(b, 24), "flags": flags, "sealed": bool(flags & 1)}
    want_len = index_fixed(version) + ENTRY_LEN * f["frame_count"] + (TAG_LEN if f["sealed"] else 0)
    if (f["index_len"] != want_len or f["index_offset"] < HEADER_LEN
            or f["index_offset"] + f["index_len"] + FOOTER_LEN != object_len):
        raise bad("footer-fit", "footer does not fit the object's length")
    return f


def length_problem(raw_len, stored_len, sealed):
    if not 1 <= raw_len <= MAX_RAW:
        return f"raw length {raw_len} out of range"
    tag = TAG_LEN if sealed else 0
    if stored_len > raw_len + tag or stored_len < tag:
        return f"stored length {stored_len} does not fit raw length {raw_len}"
    return None


def parse_index(index, footer):
    """Index rules; `index` is the whole index, tag included."""
    if crc(index) != footer["index_crc"]:
        raise bad("index-crc", "index checksum mismatch")
    body = index[:len(index) - (TAG_LEN if footer["sealed"] else 0)]
    if body[:4] != INDEX_MAGIC:
        raise bad("index-magic", "bad magic in index")
    count = u32(body, 4)
    if count != footer["frame_count"]:
        raise bad("index-count", "index entry count differs from the footer's")
    header = parse_header(body[8:72])
    version = footer["version"]
    if header["version"] != version:
        raise bad("version-agree", f"footer says version {version}, the header copy {header['version']}")
    if header["flags"] != footer["flags"]:
        raise bad("flags-agree", "footer and header flags differ")
    fixed = index_fixed(version)
    meta = parse_meta(body[72:fixed], version)
    sealed = header["sealed"]
    entries = []
    stored, raw = HEADER_LEN, 0
    for i in range(count):
        e = body[fixed + ENTRY_LEN * i:fixed + ENTRY_LEN * (i + 1)]
        codec, flags = e[24], e[25]
        if codec not in CODECS:
            raise bad("entry-codec", f"index entry {i}: unknown codec id {codec}")
        if flags & ~1 or bool(flags & 1) != sealed:
            raise bad("entry-flags", f"index entry {i}: flags {flags:#x} do not fit the object")
        if u16(e, 26):
            raise bad("entry-reserved", f"index entry {i}: reserved bytes are not zero")
        ent = {"stored_offset": u64(e, 0), "raw_offset": u64(e, 8), "stored_len": u32(e, 16),
               "raw_len": u32(e, 20), "codec": codec, "flags": flags, "raw_crc": u32(e, 28)}
        problem = length_problem(ent["raw_len"], ent["stored_len"], sealed)
        if problem:
            raise bad("entry-length", f"index entry {i}: {problem}")
        if sealed and ent["raw_crc"]:
            raise bad("entry-sealed-crc", f"index entry {i}: sealed, yet raw checksum set")
        if ent["stored_offset"] != stored or ent["raw_offset"] != raw:
            raise bad("entry-tiling", f"index entry {i} is out of place")
        stored += FRAME_HEADER_LEN + ent["stored_len"]
        raw += ent["raw_len"]
        entries.append(ent)
    if stored != footer["index_offset"]:
        raise bad("index-end", "frames do not end where the index starts")
    if raw != footer["logical_size"]:
        raise bad("logical-size", "frame sizes do not add up to the logical size")
    return {"header": header, "meta": meta, "entries": entries, "body": body,
            "tag": index[len(body):]}


# (flag bit, offset, length, name) of each metadata field; a time is 8 bytes of signed seconds
# and 4 of nanoseconds. Version 2 adds the last two.
META_FIELDS = ((1, 0, 4, "mode"), (2, 4, 4, "uid"), (4, 8, 4, "gid"), (8, 16, 12, "mtime"),
               (16, 32, 12, "ctime"), (32, 44, 12, "atime"))
META_RESERVED = {1: ((28, 32),), 2: ((28, 32), (56, 64))}


def parse_meta(b, version):
    flags = u32(b, 12)
    if flags & ~META_FLAGS[version]:
        raise bad("meta-flags", f"unknown file metadata flags {flags:#x} in a version {version} object")
    fields = [f for f in META_FIELDS if f[1] + f[2] <= META_LEN[version]]
    for bit, at, n, name in fields:
        if not flags & bit and any(b[at:at + n]):
            raise bad("meta-absent", f"file metadata: absent {name} is not zero")
    for bit, at, n, name in fields:
        if n == 12 and u32(b, at + 8) >= 1_000_000_000:
            raise bad("meta-nanos", f"file metadata: {name} nanoseconds out of range")
    if any(any(b[lo:hi]) for lo, hi in META_RESERVED[version]):
        raise bad("meta-reserved", "file metadata reserved bytes are not zero")
    meta = {}
    for bit, at, n, name in fields:
        if flags & bit:
            meta[name] = u32(b, at) if n == 4 else [struct.unpack_from("<q", b, at)[0], u32(b, at + 8)]
    return meta


def parse_frame_header(b, i, sealed):
    """Frame rules up to (not including) the comparison with the index entry."""
    if crc(b[:20]) != u32(b, 20):
        raise bad("frame-crc", f"frame {i}: header checksum mismatch")
    if u16(b, 2):
        raise bad("frame-reserved", f"frame {i}: reserved bytes are not zero")
    flags = b[1]
    if flags & ~1 or bool(flags & 1) != sealed:
        raise bad("frame-flags", f"frame {i}: flags {flags:#x} do not fit the object")
    if b[0] not in CODECS:
        raise bad("frame-codec", f"frame {i}: unknown codec id {b[0]}")
    h = {"codec": b[0], "flags": flags, "raw_len": u32(b, 4), "stored_len": u32(b, 8),
         "raw_crc": u32(b, 12), "stored_crc": u32(b, 16)}
    problem = length_problem(h["raw_len"], h["stored_len"], sealed)
    if problem:
        raise bad("frame-length", f"frame {i}: {problem}")
    if sealed and h["raw_crc"]:
        raise bad("frame-sealed-crc", f"frame {i}: sealed, yet raw checksum set")
    return h


COMPARED = ("codec", "flags", "raw_len", "stored_len", "raw_crc")


# ---- Keys and seals ---------------------------------------------------------------------------

def hkdf(master, salt, info, n):
    return HKDF(algorithm=hashes.SHA256(), length=n, salt=salt, info=info).derive(master)


class Opener:
    """What decoding an object's frames needs: its key (if sealed) and its dictionary (if any)."""

    def __init__(self, header, master, dicts, allow_unsealed):
        self.header = header
        self.aead = None
        if header["sealed"]:
            if master is None:
                raise Failure("object is encrypted; pass the key file it was written with", None, 4)
            if hkdf(master, header["object_id"], b"shrinkfs v1 key check", 8) != header["key_check"]:
                raise bad("key-check", "wrong key: this object was sealed with a different key")
            self.aead = AESGCM(hkdf(master, header["object_id"], b"shrinkfs v1 frame key", 32))
        elif master is not None and not allow_unsealed:
            raise bad("sealed-only", "object is not sealed, but a key was given")
        self.dicts = dicts

    def check_index_tag(self, body, tag):
        if self.aead is None:
            return
        try:
            self.aead.decrypt(b"\xff" * 12, bytes(tag), bytes(body))
        except InvalidTag:
            raise bad("index-tag", "index authentication failed") from None

    def dictionary(self):
        dict_id = self.header["dict_id"]
        if dict_id == 0:
            return None
        if dict_id not in self.dicts:
            raise bad("dictionary", f"object needs zstd dictionary id {dict_id}")
        return self.dicts[dict_id]

    def decode(self, i, frame_header_bytes, h, payload):
        """frame-payload-crc, frame-tag, dictionary, frame-decode, frame-raw-crc: the raw bytes."""
        if crc(payload) != h["stored_crc"]:
            raise bad("frame-payload-crc", f"frame {i}: stored bytes checksum mismatch")
        if self.aead is not None:
            nonce = struct.pack("<Q", i) + b"\0\0\0\0"
            aad = b"SKF1" + self.header["object_id"] + struct.pack("<Q", i) + bytes(frame_header_bytes[:12])
            try:
                payload = self.aead.decrypt(nonce, bytes(payload), aad)
            except InvalidTag:
                raise bad("frame-tag", f"frame {i}: decryption failed") from None
        name = CODECS[h["codec"]]
        if h["codec"] >= 16:
            raise Failure(f"frame {i} uses codec {name}, which needs nVCOMP on a GPU", None, 3)
        zdict = self.dictionary() if name == "zstd" else None
        raw = decompress(name, bytes(payload), h["raw_len"], zdict, i)
        if self.aead is None and crc(raw) != h["raw_crc"]:
            raise bad("frame-raw-crc", f"frame {i}: decoded bytes checksum mismatch")
        return raw


def decompress(name, payload, raw_len, zdict, i):
    def corrupt(detail):
        return bad("frame-decode", f"frame {i}: corrupt {name} data: {detail}")
    try:
        if name == "none":
            raw = payload
        elif name == "zstd":
            d = zstandard.ZstdDecompressor(dict_data=zdict).decompressobj(read_across_frames=True)
            raw = d.decompress(payload)
            if d.unused_data:
                raise corrupt("bytes after the last zstd frame")
        elif name == "lz4-block":
            raw = lz4.block.decompress(payload, uncompressed_size=raw_len)
        elif name == "deflate":
            d = zlib.decompressobj(-15)
            raw = d.decompress(payload, raw_len + 1)
            if not d.eof or d.unused_data or d.unconsumed_tail:
                raise corrupt("not one whole deflate stream")
        elif name == "snappy":
            raw = bytes(cramjam.snappy.decompress_raw(payload))
        elif name == "lz4":
            d = lz4.frame.LZ4FrameDecompressor()
            raw = d.decompress(payload)
            if not d.eof or d.unused_data:
                raise corrupt("not one whole LZ4 frame")
        else:
            raise corrupt("unknown codec")
    except Failure:
        raise
    except Exception as e:  # the codec libraries' own errors
        raise corrupt(str(e)) from None
    if len(raw) != raw_len:
        raise corrupt(f"decoded {len(raw)} bytes, expected {raw_len}")
    return raw


# ---- Readers ----------------------------------------------------------------------------------

def decode_front_to_back(data, master, dicts, allow_unsealed):
    """The sequential reader of FORMAT.md ("Front to back"); returns the file's bytes."""
    n = len(data)
    if data[:8] != HEAD_MAGIC:  # (an input shorter than the magic is plain too)
        if master is not None and not allow_unsealed:
            raise bad("sealed-only", "input is not sealed, but a key was given")
        if data.endswith(FOOT_MAGIC):
            raise bad("object-kind", "input ends with the footer magic but its header magic is damaged")
        return data
    if n < HEADER_LEN:
        raise bad("truncated", "input ends inside the header")
    header = parse_header(data[:HEADER_LEN])
    opener = Opener(header, master, dicts, allow_unsealed)
    sealed = header["sealed"]
    out, seen, pos, raw_at, i = [], [], HEADER_LEN, 0, 0
    while True:
        if n - pos < 4:
            raise bad("truncated", "input ends before the index")
        if data[pos:pos + 4] == INDEX_MAGIC:
            break
        if n - pos < FRAME_HEADER_LEN:
            raise bad("truncated", f"input ends inside frame {i}'s header")
        fh = data[pos:pos + FRAME_HEADER_LEN]
        h = parse_frame_header(fh, i, sealed)
        end = pos + FRAME_HEADER_LEN + h["stored_len"]
        if end > n:
            raise bad("truncated", f"input ends inside frame {i}")
        out.append(opener.decode(i, fh, h, data[pos + FRAME_HEADER_LEN:end]))
        seen.append(dict({k: h[k] for k in COMPARED}, stored_offset=pos, raw_offset=raw_at))
        raw_at += h["raw_len"]
        pos, i = end, i + 1
    # The header at offset 0 says which version, so how long index and footer are.
    need = index_fixed(header["version"]) + ENTRY_LEN * len(seen) + (TAG_LEN if sealed else 0) + FOOTER_LEN
    if n - pos < need:
        raise bad("truncated", "input ends inside the index or footer")
    tail = data[pos:pos + need]
    if tail[-8:] != FOOT_MAGIC:
        raise bad("stream-index", "index and footer do not fit the frames read")
    footer = parse_footer(tail[-FOOTER_LEN:], pos + need)
    index = parse_index(tail[:-FOOTER_LEN], footer)
    if index["header"]["raw"] != header["raw"]:
        raise bad("header-copy", "header differs from its copy in the index")
    opener.check_index_tag(index["body"], index["tag"])
    if any(CODECS[e["codec"]] == "zstd" for e in index["entries"]):
        opener.dictionary()
    listed = [{k: e[k] for k in COMPARED + ("stored_offset", "raw_offset")} for e in index["entries"]]
    if listed != seen:
        raise bad("stream-index", "frames read differ from the frames the index lists")
    if pos + need != n:
        raise bad("trailing-bytes", "bytes follow the footer")
    return b"".join(out)


class TailReader:
    """The reader from the tail of FORMAT.md: footer and index first, then only covering frames."""

    def __init__(self, f, size, master, dicts, allow_unsealed, open_frames=True):
        self.f, self.size = f, size
        tail = self.read(max(0, size - TAIL_FETCH), size)
        self.plain = not tail.endswith(FOOT_MAGIC)
        if self.plain:
            if self.read(0, min(8, size)) == HEAD_MAGIC:
                raise bad("truncated", "object starts like a shrinkfs object and has no footer")
            if master is not None and not allow_unsealed:
                raise bad("sealed-only", "object is not sealed, but a key was given")
            self.logical_size = size
            return
        self.footer = parse_footer(tail[-FOOTER_LEN:], size)
        tail_len = self.footer["index_len"] + FOOTER_LEN
        if tail_len > len(tail):
            tail = self.read(size - tail_len, size)
        self.index = parse_index(tail[len(tail) - tail_len:len(tail) - FOOTER_LEN], self.footer)
        header = self.index["header"]
        if not header["sealed"] and master is not None and not allow_unsealed:
            raise bad("sealed-only", "object is not sealed, but a key was given")
        self.logical_size = self.footer["logical_size"]
        if not open_frames:
            return
        self.opener = Opener(header, master, dicts, True)
        self.opener.check_index_tag(self.index["body"], self.index["tag"])
        if any(CODECS[e["codec"]] == "zstd" for e in self.index["entries"]):
            self.opener.dictionary()

    def read(self, a, b):
        self.f.seek(a)
        return self.f.read(b - a)

    def range(self, start, length, log):
        end = min(start + length, self.logical_size)
        if start >= end:
            return b""
        if self.plain:
            return self.read(start, end)
        entries = self.index["entries"]
        starts = [e["raw_offset"] for e in entries]
        first, last = bisect.bisect_right(starts, start) - 1, bisect.bisect_right(starts, end - 1) - 1
        sealed = self.index["header"]["sealed"]
        out = []
        for i in range(first, last + 1):
            e = entries[i]
            a, b = e["stored_offset"], e["stored_offset"] + FRAME_HEADER_LEN + e["stored_len"]
            log(f"fetched frame {i} stored {a}..{b}")
            stored = self.read(a, b)
            fh = stored[:FRAME_HEADER_LEN]
            h = parse_frame_header(fh, i, sealed)
            if any(h[k] != e[k] for k in COMPARED):
                raise bad("frame-entry", f"frame {i}: header disagrees with the index")
            raw = self.opener.decode(i, fh, h, stored[FRAME_HEADER_LEN:])
            lo, hi = max(start, e["raw_offset"]) - e["raw_offset"], min(end, e["raw_offset"] + e["raw_len"]) - e["raw_offset"]
            out.append(raw[lo:hi])
        return b"".join(out)


# ---- Encoder ----------------------------------------------------------------------------------

def compress(name, raw, level):
    if name == "zstd":
        return zstandard.ZstdCompressor(level=level, write_content_size=True).compress(raw)
    if name == "lz4-block":
        return lz4.block.compress(raw, store_size=False)
    if name == "deflate":
        c = zlib.compressobj(min(max(level, 1), 9), zlib.DEFLATED, -15)
        return c.compress(raw) + c.flush()
    if name == "snappy":
        return bytes(cramjam.snappy.compress_raw(raw))
    if name == "lz4":
        return lz4.frame.compress(raw, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                                  content_checksum=False, store_size=True)
    return raw


def stamp(ns):
    """Nanoseconds since the epoch as FORMAT.md's (seconds, nanoseconds): seconds rounded down, so
    a time before the epoch has nanoseconds in 0..10^9 too."""
    return list(divmod(ns, 1_000_000_000))


def encode(data, codec, level, frame_size, master, mtime, times=None):
    """An object of `data`; `mtime` and `times` (ctime, atime) are (seconds, nanoseconds). With
    `times` it is version 2, as FORMAT.md has a writer pick; without, version 1."""
    version = 2 if times else 1
    object_id = os.urandom(16)
    sealed = master is not None
    aead, key_check = None, b"\0" * 8
    if sealed:
        key_check = hkdf(master, object_id, b"shrinkfs v1 key check", 8)
        aead = AESGCM(hkdf(master, object_id, b"shrinkfs v1 frame key", 32))
    head = bytearray(HEADER_LEN)
    head[:8] = HEAD_MAGIC
    struct.pack_into("<HHI", head, 8, version, int(sealed), frame_size)
    head[16:32], head[32:40] = object_id, key_check
    struct.pack_into("<I", head, 60, crc(head[:60]))
    parts, entries, stored_at, raw_at = [bytes(head)], [], HEADER_LEN, 0
    for i, at in enumerate(range(0, len(data), frame_size)):
        raw = data[at:at + frame_size]
        payload = compress(codec, raw, level)
        cid = CODEC_IDS[codec]
        if codec == "none" or len(payload) >= len(raw):
            payload, cid = raw, 0
        stored_len = len(payload) + (TAG_LEN if sealed else 0)
        fh = bytearray(FRAME_HEADER_LEN)
        raw_crc = 0 if sealed else crc(raw)
        struct.pack_into("<BBHIII", fh, 0, cid, int(sealed), 0, len(raw), stored_len, raw_crc)
        if sealed:
            aad = b"SKF1" + object_id + struct.pack("<Q", i) + bytes(fh[:12])
            payload = aead.encrypt(struct.pack("<Q", i) + b"\0\0\0\0", payload, aad)
        struct.pack_into("<I", fh, 16, crc(payload))
        struct.pack_into("<I", fh, 20, crc(fh[:20]))
        parts += [bytes(fh), payload]
        entries.append(struct.pack("<QQIIBBHI", stored_at, raw_at, stored_len, len(raw), cid, int(sealed), 0, raw_crc))
        stored_at += FRAME_HEADER_LEN + stored_len
        raw_at += len(raw)
    meta = struct.pack("<IIIIqII", 0o100644, 0, 0, 1 | 8 | (16 | 32 if times else 0), *mtime, 0)
    if times:
        meta += struct.pack("<qIqI", *times[0], *times[1]) + bytes(8)
    body = INDEX_MAGIC + struct.pack("<I", len(entries)) + bytes(head) + meta + b"".join(entries)
    tag = aead.encrypt(b"\xff" * 12, b"", body) if sealed else b""
    index = body + tag
    footer = bytearray(FOOTER_LEN)
    struct.pack_into("<QIIQIHHI", footer, 0, stored_at, len(index), len(entries), raw_at, crc(index), version,
                     int(sealed), 0)
    struct.pack_into("<I", footer, 36, crc(footer[:36]))
    footer[40:48] = FOOT_MAGIC
    return b"".join(parts) + index + bytes(footer)


# ---- Command line -----------------------------------------------------------------------------

def load_key(path):
    if path is None:
        return None
    key = open(path, "rb").read()
    if len(key) != 32:
        raise Failure(f"key file {path} holds {len(key)} bytes, not 32", None, 2)
    return key


def load_dicts(paths):
    dicts = {}
    for p in paths or []:
        b = open(p, "rb").read()
        if b[:4] != b"\x37\xa4\x30\xec":
            raise Failure(f"{p} is not a zstd dictionary", None, 2)
        dicts[u32(b, 4)] = zstandard.ZstdCompressionDict(b)
    return dicts


def write_atomic(path, data):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".skf-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def batch(lines, out):
    """Runs one command per input line, a JSON object {"args": [...], "stdout": PATH or null}, and
    writes one JSON line per command: {"code": exit code, "stderr": what it printed}."""
    for line in lines:
        job = json.loads(line)
        err = io.StringIO()
        stdout = open(job["stdout"], "wb") if job.get("stdout") else open(os.devnull, "wb")
        with stdout, contextlib.redirect_stderr(err):
            try:
                code = main(job["args"], stdout)
            except SystemExit as e:  # argparse's usage errors
                code = e.code if isinstance(e.code, int) else 2
        out.write(json.dumps({"code": code, "stderr": err.getvalue()}) + "\n")
        out.flush()
    return 0


def main(argv, stdout=None):
    stdout = stdout or sys.stdout.buffer
    if argv[:1] == ["batch"]:
        return batch(sys.stdin, sys.stdout)
    p = argparse.ArgumentParser(prog="skf.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("decode", "range"):
        s = sub.add_parser(name)
        s.add_argument("object")
        if name == "decode":
            s.add_argument("output")
        else:
            s.add_argument("start", type=int)
            s.add_argument("length", type=int)
        s.add_argument("--key-file")
        s.add_argument("--dict", action="append")
        s.add_argument("--allow-unsealed", action="store_true")
    s = sub.add_parser("info")
    s.add_argument("object")
    s = sub.add_parser("encode")
    s.add_argument("input")
    s.add_argument("output")
    s.add_argument("--codec", default="zstd", choices=[c for c in CODEC_IDS if CODEC_IDS[c] < 16])
    s.add_argument("--level", type=int, default=1)
    s.add_argument("--frame-size", type=int, default=1 << 20)
    s.add_argument("--key-file")
    s.add_argument("--times", action="store_true", help="record ctime and atime too (a version 2 object)")
    a = p.parse_args(argv)
    try:
        if a.cmd == "decode":
            with open(a.object, "rb") as f:
                data = f.read()
            out = decode_front_to_back(data, load_key(a.key_file), load_dicts(a.dict), a.allow_unsealed)
            write_atomic(a.output, out)
        elif a.cmd == "range":
            with open(a.object, "rb") as f:
                r = TailReader(f, os.fstat(f.fileno()).st_size, load_key(a.key_file), load_dicts(a.dict), a.allow_unsealed)
                stdout.write(r.range(a.start, a.length, lambda line: print(line, file=sys.stderr)))
        elif a.cmd == "info":
            with open(a.object, "rb") as f:
                r = TailReader(f, os.fstat(f.fileno()).st_size, None, {}, True, open_frames=False)
            if r.plain:
                report = {"format": "plain", "size": r.size}
            else:
                hdr = {k: (v.hex() if isinstance(v, bytes) else v) for k, v in r.index["header"].items() if k != "raw"}
                entries = [dict(e, codec=CODECS[e["codec"]]) for e in r.index["entries"]]
                report = {"format": "shrinkfs", "footer": r.footer, "header": hdr, "meta": r.index["meta"],
                          "entries": entries}
            stdout.write((json.dumps(report, indent=1) + "\n").encode())
        else:
            if not 1 <= a.frame_size <= MAX_RAW:
                raise Failure(f"--frame-size must be 1 to {MAX_RAW}", None, 2)
            with open(a.input, "rb") as f:
                data = f.read()
            st = os.stat(a.input) if a.input != "-" else None
            now = time.time_ns()
            mtime = stamp(st.st_mtime_ns if st else now)
            times = (stamp(st.st_ctime_ns if st else now), stamp(st.st_atime_ns if st else now)) if a.times else None
            write_atomic(a.output, encode(data, a.codec, a.level, a.frame_size, load_key(a.key_file), mtime, times))
    except Failure as e:
        print(e.line(), file=sys.stderr)
        return e.code
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
