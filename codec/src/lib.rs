//! shrinkfs-codec: the shrinkfs object format, frame codecs and sealing — bytes in, bytes out, no I/O.
//!
//! An object is a header, independently compressed (and optionally sealed) frames, an index and a
//! footer; docs/FORMAT.md specifies the bytes. Writing: [`writer::FrameCutter`] cuts a stream into
//! frames, [`frame::encode_frame`] encodes each (on any thread), [`writer::ObjectWriter`] lays them
//! out. Reading: [`reader::probe_tail`] and [`reader::Layout`] turn an object's tail into a frame
//! map and fetch plans, [`frame::decode_frame`] decodes what the caller fetched, and
//! [`stream::StreamDecoder`] reads front to back when seeking is impossible.

pub mod codec;
pub mod decoderoute;
pub mod detect;
pub mod dispatch;
pub mod error;
pub mod format;
pub mod frame;
pub mod framebuf;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod gpuconfig;
pub mod id;
pub mod lz4frame;
pub mod meta;
pub mod ordered;
pub mod pipeline;
pub mod pool;
pub mod reader;
pub mod seal;
pub mod stream;
pub mod workers;
pub mod writer;
pub mod zstdstored;

pub use codec::{Codec, CodecId, CodecParams, Dictionary};
pub use error::{Error, Result};
pub use format::{FileMeta, Version};
pub use frame::{
    EncodedFrame, ObjectContext, check_raw, decode_frame, decode_payload, encode_frame, encode_frame_owned,
    open_payload,
};
pub use reader::{Fetch, Layout, TailProbe, probe_tail};
pub use seal::MasterKey;
pub use writer::{DEFAULT_FRAME_SIZE, EncodeConfig, FrameCutter, ObjectWriter, encode_all, encode_all_with};

/// Decodes a whole in-memory object (or returns plain bytes as they are), checking everything.
pub fn decode_all(object: &[u8], master: Option<&MasterKey>, dicts: &[std::sync::Arc<Dictionary>]) -> Result<Vec<u8>> {
    let len = object.len() as u64;
    match probe_tail(object, len)? {
        TailProbe::Plain if format::Header::has_magic(object) => Err(Error::no_footer(len)),
        TailProbe::Plain => Ok(object.to_vec()),
        TailProbe::Shrinkfs { .. } => {
            let layout = Layout::parse(object, len)?;
            let ctx = layout.open(master, dicts)?;
            let copy = layout.footer.index_offset as usize + 8;
            if object[..format::HEADER_LEN] != object[copy..copy + format::HEADER_LEN] {
                return Err(Error::malformed(error::Rule::HeaderCopy, "header differs from its copy in the index"));
            }
            let mut out = Vec::with_capacity(layout.logical_size() as usize);
            let mut buf = Vec::new();
            for (i, e) in layout.entries.iter().enumerate() {
                let r = e.stored_range();
                decode_frame(&ctx, i as u64, &object[r.start as usize..r.end as usize], Some(e), &mut buf)?;
                out.extend_from_slice(&buf);
            }
            Ok(out)
        }
    }
}
