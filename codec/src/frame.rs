//! Encoding one frame (detect, compress, fall back, seal, checksum) and decoding it back (verify,
//! open, decompress, verify). Pure functions of their inputs, safe to call from any thread.

use std::sync::Arc;

use bytes::Bytes;

use crate::codec::{Codec, CodecId, DecodeFailure, Dictionary, decompress_cpu};
use crate::detect;
use crate::error::{Error, Result, Rule};
use crate::format::{FRAME_FLAG_SEALED, FRAME_HEADER_LEN, FrameHeader, Header, IndexEntry, Version, checksum};
use crate::framebuf::FrameBuf;
use crate::seal::{MasterKey, ObjectKey};

/// What every frame of one object shares: its header, its key and its dictionary.
#[derive(Debug)]
pub struct ObjectContext {
    /// The object header.
    pub header: Header,
    key: Option<ObjectKey>,
    dict: Option<Arc<Dictionary>>,
}

impl ObjectContext {
    /// The context to read an object with this header. Checks the key against the header's key
    /// check, and picks the dictionary the object names from `dicts` (needed only by zstd frames:
    /// see `require_dict`).
    pub fn for_reading(header: Header, master: Option<&MasterKey>, dicts: &[Arc<Dictionary>]) -> Result<Self> {
        let key = if header.sealed() {
            let master = master.ok_or(Error::KeyRequired)?;
            let key = ObjectKey::derive(master, &header.object_id);
            if key.key_check() != header.key_check {
                return Err(Error::WrongKey);
            }
            Some(key)
        } else {
            None
        };
        let dict = match header.dict_id {
            0 => None,
            id => dicts.iter().find(|d| d.id() == id).cloned(),
        };
        Ok(ObjectContext { header, key, dict })
    }

    /// Whether frames of `codec` can be decoded: frames of a codec that takes a dictionary (the
    /// codec table says which: zstd), in an object that names one, need it.
    pub fn require_dict(&self, codec: CodecId) -> Result<()> {
        if codec.descriptor().dictionary && self.header.dict_id != 0 && self.dict.is_none() {
            return Err(Error::DictionaryRequired(self.header.dict_id));
        }
        Ok(())
    }

    /// The context to write a new object in format `version`: draws a fresh random object id.
    /// The version is fixed here because the header, which names it, is the object's first bytes;
    /// it must store the metadata the object will end with (`FileMeta::min_version`).
    pub fn for_writing(
        frame_size: u32,
        master: Option<&MasterKey>,
        dict: Option<Arc<Dictionary>>,
        version: Version,
    ) -> Self {
        let object_id: [u8; 16] = rand::random();
        let key = master.map(|m| ObjectKey::derive(m, &object_id));
        let header = Header {
            version,
            flags: if key.is_some() { crate::format::FLAG_SEALED } else { 0 },
            frame_size,
            object_id,
            key_check: key.as_ref().map_or([0; 8], |k| k.key_check()),
            dict_id: dict.as_ref().map_or(0, |d| d.id()),
        };
        ObjectContext { header, key, dict }
    }

    /// The object's key, when sealed.
    pub fn key(&self) -> Option<&ObjectKey> {
        self.key.as_ref()
    }

    /// The zstd dictionary the object uses, if any.
    pub fn dict(&self) -> Option<&Arc<Dictionary>> {
        self.dict.as_ref()
    }
}

/// One encoded frame as stored: its header, then its payload. The two are kept apart so a frame
/// stored as it is keeps the buffer its raw bytes came in (no copy behind a header); writers put
/// them down one after the other, or as two chunks of a part.
#[derive(Debug, Clone)]
pub struct EncodedFrame {
    /// The stored payload: compressed (or the raw bytes, in the buffer they were cut into), then
    /// the GCM tag when sealed.
    pub payload: Bytes,
    /// The frame header's fields.
    pub header: FrameHeader,
}

impl EncodedFrame {
    /// The index entry of this frame when placed at `stored_offset`, holding raw bytes from `raw_offset`.
    pub fn entry(&self, stored_offset: u64, raw_offset: u64) -> IndexEntry {
        IndexEntry {
            stored_offset,
            raw_offset,
            stored_len: self.header.stored_len,
            raw_len: self.header.raw_len,
            codec: self.header.codec,
            flags: self.header.flags,
            raw_crc: self.header.raw_crc,
        }
    }

    /// The frame header as stored, the bytes before the payload.
    pub fn head(&self) -> [u8; FRAME_HEADER_LEN] {
        self.header.to_bytes()
    }

    /// Stored bytes: header and payload.
    #[allow(clippy::len_without_is_empty)] // never empty: a frame always has its header
    pub fn len(&self) -> usize {
        FRAME_HEADER_LEN + self.payload.len()
    }

    /// Appends the frame as stored (header, then payload) to `out`.
    pub fn put_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head());
        out.extend_from_slice(&self.payload);
    }
}

/// Encodes frame number `frame` of an object: compresses with `codec` unless the bytes look
/// already compressed or do not shrink (then stores them), seals when the object has a key.
pub fn encode_frame(ctx: &ObjectContext, codec: &dyn Codec, frame: u64, raw: &[u8]) -> EncodedFrame {
    match compress(codec, raw) {
        Some((id, payload)) => finish_payload(ctx, frame, raw, id, payload),
        None => stored_as_is(ctx, frame, FrameBuf::from(raw.to_vec())),
    }
}

/// [`encode_frame`] of raw bytes it may keep: a frame stored as it is takes `raw` as its payload.
pub fn encode_frame_owned(ctx: &ObjectContext, codec: &dyn Codec, frame: u64, raw: FrameBuf) -> EncodedFrame {
    match compress(codec, &raw) {
        Some((id, payload)) => finish_payload(ctx, frame, &raw, id, payload),
        None => stored_as_is(ctx, frame, raw),
    }
}

/// The compressed payload of `raw`, unless it looks compressed already or does not shrink.
fn compress(codec: &dyn Codec, raw: &[u8]) -> Option<(CodecId, Vec<u8>)> {
    if codec.id() == CodecId::None || detect::looks_compressed(raw) {
        return None;
    }
    let mut payload = Vec::new();
    codec.compress(raw, &mut payload).then(|| (codec.id(), payload))
}

/// A frame storing `raw` as it is (sealed in place when the object has a key; a buffer from
/// `FrameCutter` has room for the tag, so sealing it does not move the bytes).
fn stored_as_is(ctx: &ObjectContext, frame: u64, raw: FrameBuf) -> EncodedFrame {
    let sealed = ctx.key.is_some();
    let raw_crc = if sealed { 0 } else { checksum(&raw) };
    let raw_len = raw.len();
    seal_and_head(ctx, frame, raw_len, raw_crc, CodecId::None, raw)
}

/// Completes a frame whose payload is `payload` (nothing before it), compressed with `codec_id`
/// from `raw`: seals it if the object is sealed, fills in the header. Other back ends (the GPU)
/// produce payloads and finish them here.
pub fn finish_payload(
    ctx: &ObjectContext,
    frame: u64,
    raw: &[u8],
    codec_id: CodecId,
    payload: Vec<u8>,
) -> EncodedFrame {
    let raw_crc = if ctx.key.is_some() { 0 } else { checksum(raw) };
    seal_and_head(ctx, frame, raw.len(), raw_crc, codec_id, FrameBuf::from(payload))
}

fn seal_and_head(
    ctx: &ObjectContext,
    frame: u64,
    raw_len: usize,
    raw_crc: u32,
    codec_id: CodecId,
    mut payload: FrameBuf,
) -> EncodedFrame {
    let sealed = ctx.key.is_some();
    let mut header = FrameHeader {
        codec: codec_id,
        flags: if sealed { FRAME_FLAG_SEALED } else { 0 },
        raw_len: raw_len as u32,
        stored_len: (payload.len() + if sealed { crate::format::TAG_LEN } else { 0 }) as u32,
        // A checksum of the plaintext would leak information about sealed data; the tag covers it.
        raw_crc,
        stored_crc: 0,
    };
    if let Some(key) = &ctx.key {
        key.seal_frame(&ctx.header.object_id, frame, &header.aad_bytes(), &mut payload);
    }
    // Stored as is and unsealed: the payload is the raw bytes, whose checksum is already known.
    header.stored_crc = if codec_id == CodecId::None && !sealed { raw_crc } else { checksum(&payload) };
    EncodedFrame { payload: payload.into_bytes(), header }
}

/// Decodes frame number `frame` from its stored bytes (header and payload) into `out`.
///
/// When `expected` is given (read through the index) the frame header must agree with it.
/// Every check runs before any byte is handed out: header CRC, payload CRC, GCM tag, codec, raw CRC.
pub fn decode_frame(
    ctx: &ObjectContext,
    frame: u64,
    stored: &[u8],
    expected: Option<&IndexEntry>,
    out: &mut Vec<u8>,
) -> Result<()> {
    let header = FrameHeader::parse(stored, frame, ctx.header.sealed())?;
    decode_payload(ctx, frame, &header, &stored[FRAME_HEADER_LEN..], expected, out)
}

/// Like `decode_frame`, with the header already parsed and the payload separate.
pub fn decode_payload(
    ctx: &ObjectContext,
    frame: u64,
    header: &FrameHeader,
    payload: &[u8],
    expected: Option<&IndexEntry>,
    out: &mut Vec<u8>,
) -> Result<()> {
    let compressed = open_payload(ctx, frame, header, payload, expected)?;
    ctx.require_dict(header.codec)?;
    decompress_cpu(header.codec, &compressed, header.raw_len as usize, ctx.dict.as_deref(), out).map_err(
        |f| match f {
            DecodeFailure::Unavailable(why) => Error::CodecUnavailable { frame, codec: header.codec, why },
            DecodeFailure::Corrupt(detail) => Error::Corrupt { frame, codec: header.codec, detail },
        },
    )?;
    check_raw(frame, header, out)
}

/// Everything `decode_payload` checks before decompressing — index agreement, lengths, the stored
/// checksum, the seal — returning the codec's payload. A GPU decoder runs this on the CPU first,
/// since nVCOMP's decoders do not validate their input.
pub fn open_payload<'a>(
    ctx: &ObjectContext,
    frame: u64,
    header: &FrameHeader,
    payload: &'a [u8],
    expected: Option<&IndexEntry>,
) -> Result<std::borrow::Cow<'a, [u8]>> {
    if let Some(e) = expected
        && !e.matches(header)
    {
        return Err(Error::malformed(Rule::FrameEntry, format!("frame {frame}: header disagrees with the index")));
    }
    if payload.len() != header.stored_len as usize {
        return Err(Error::Truncated {
            what: "frame payload",
            expected: header.stored_len as u64,
            actual: payload.len() as u64,
        });
    }
    if checksum(payload) != header.stored_crc {
        return Err(Error::FrameChecksum { frame });
    }
    match &ctx.key {
        Some(key) => {
            let mut opened = payload.to_vec();
            key.open_frame(&ctx.header.object_id, frame, &header.aad_bytes(), &mut opened)?;
            Ok(std::borrow::Cow::Owned(opened))
        }
        None => Ok(std::borrow::Cow::Borrowed(payload)),
    }
}

/// The check after decompressing what `open_payload` returned for the same frame: the decoded
/// bytes match their checksum (unsealed frames; a sealed frame's tag already authenticated them).
/// A frame stored as it is decodes to the payload `open_payload` checked, so its two checksums
/// cover the same bytes: they must agree, and the bytes are not summed a second time.
pub fn check_raw(frame: u64, header: &FrameHeader, raw: &[u8]) -> Result<()> {
    if raw.len() != header.raw_len as usize {
        return Err(Error::Corrupt { frame, codec: header.codec, detail: format!("decoded {} bytes", raw.len()) });
    }
    let sum = || match header.codec {
        CodecId::None => header.stored_crc,
        _ => checksum(raw),
    };
    if !header.sealed() && sum() != header.raw_crc {
        return Err(Error::RawChecksum { frame });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::CodecParams;

    /// `frame` with its raw checksum replaced, and its header checksum made to agree.
    fn with_raw_crc(frame: &[u8], raw_crc: u32) -> Vec<u8> {
        let mut f = frame.to_vec();
        f[12..16].copy_from_slice(&raw_crc.to_le_bytes());
        let sum = checksum(&f[..20]);
        f[20..24].copy_from_slice(&sum.to_le_bytes());
        f
    }

    #[test]
    fn a_raw_checksum_that_disagrees_is_refused_for_frames_stored_as_they_are_too() {
        let ctx = ObjectContext::for_writing(1 << 16, None, None, Version::NEWEST);
        let text = b"frames stored as they are decode to their payload. ".repeat(400);
        let noise: Vec<u8> = (0..20_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for (codec, raw) in [(CodecId::None, &text), (CodecId::Zstd, &text), (CodecId::Zstd, &noise)] {
            let c = CodecParams { codec, level: 1, dict: None }.cpu_codec().unwrap();
            let mut frame = Vec::new();
            encode_frame(&ctx, c.as_ref(), 3, raw).put_into(&mut frame);
            let header = FrameHeader::parse(&frame, 3, false).unwrap();
            let mut out = Vec::new();
            decode_frame(&ctx, 3, &frame, None, &mut out).unwrap();
            assert_eq!(&out, raw, "{codec:?} decodes");
            let bad = with_raw_crc(&frame, header.raw_crc ^ 1);
            let e = decode_frame(&ctx, 3, &bad, None, &mut out).unwrap_err();
            assert!(matches!(e, Error::RawChecksum { frame: 3 }), "{codec:?} ({:?} stored): {e}", header.codec);
        }
    }
}
