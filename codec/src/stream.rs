//! Reading an object front to back without seeking (a pipe, `unpack -`): bytes are fed in any
//! pieces, frames come out in order, and the index and footer at the end are checked against the
//! frames that were seen, so a dropped, truncated or reordered frame is an error.

use std::sync::Arc;

use crate::codec::Dictionary;
use crate::error::{Error, Result, Rule};
use crate::format::{FOOTER_LEN, FRAME_HEADER_LEN, FrameHeader, HEADER_LEN, Header, INDEX_MAGIC, IndexEntry};
use crate::frame::ObjectContext;
use crate::reader::Layout;
use crate::seal::MasterKey;

/// What the stream yields.
#[derive(Debug)]
pub enum Item {
    /// The input is not a shrinkfs object: these bytes (and all that follow) are plain data.
    Plain(Vec<u8>),
    /// One stored frame, to decode with `frame::decode_payload` and the stream's context.
    Frame {
        /// Frame number.
        frame: u64,
        /// Its parsed header.
        header: FrameHeader,
        /// Its payload as stored.
        payload: Vec<u8>,
    },
    /// Index and footer were read and agree with every frame: the object is complete.
    End,
}

#[derive(Debug, PartialEq)]
enum State {
    Header,
    Body,
    Plain,
    Done,
}

/// Sequential decoder state machine.
#[derive(Debug)]
pub struct StreamDecoder {
    master: Option<MasterKey>,
    dicts: Vec<Arc<Dictionary>>,
    buf: Vec<u8>,
    start: usize,
    consumed: u64,
    state: State,
    ctx: Option<Arc<ObjectContext>>,
    seen: Vec<IndexEntry>,
    raw: u64,
    /// Last bytes passed through as plain, to notice a shrinkfs footer behind a damaged header.
    plain_tail: Vec<u8>,
    /// With a key: refuse input that is not a sealed object (see `allow_unsealed`).
    require_sealed: bool,
    /// The header at offset 0, to compare with its copy in the index.
    head: Vec<u8>,
    /// The context of the one object expected (`of_object`): its header must be this one's.
    known: Option<Arc<ObjectContext>>,
}

impl StreamDecoder {
    /// A decoder that opens sealed objects with `master` and zstd dictionaries from `dicts`.
    pub fn new(master: Option<MasterKey>, dicts: Vec<Arc<Dictionary>>) -> Self {
        StreamDecoder {
            master,
            dicts,
            buf: Vec::new(),
            start: 0,
            consumed: 0,
            state: State::Header,
            ctx: None,
            seen: Vec::new(),
            raw: 0,
            plain_tail: Vec::new(),
            require_sealed: false,
            head: Vec::new(),
            known: None,
        }
    }

    /// A decoder of the object whose context `ctx` the caller already holds (its writer's, sealed
    /// or not, so no key is needed): input with any other header is an error.
    pub fn of_object(ctx: Arc<ObjectContext>) -> Self {
        StreamDecoder { known: Some(ctx), ..StreamDecoder::new(None, Vec::new()) }
    }

    /// Whether input that is not a sealed object (plain bytes, an unsealed shrinkfs object) is
    /// accepted although this decoder has a key. Refused by default: with a key, nothing unsealed
    /// is served.
    pub fn allow_unsealed(mut self, allow: bool) -> Self {
        self.require_sealed = !allow;
        self
    }

    fn check_sealed(&self, sealed: bool) -> Result<()> {
        if self.master.is_some() && self.require_sealed && !sealed { Err(Error::NotSealed) } else { Ok(()) }
    }

    /// Adds input bytes.
    pub fn feed(&mut self, data: &[u8]) {
        if self.start > 0 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// The object's context, once its header has been read.
    pub fn context(&self) -> Option<&Arc<ObjectContext>> {
        self.ctx.as_ref()
    }

    fn avail(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn take(&mut self, n: usize) -> Vec<u8> {
        let v = self.buf[self.start..self.start + n].to_vec();
        self.start += n;
        self.consumed += n as u64;
        v
    }

    /// The next item, or `None` when more input is needed.
    pub fn next_item(&mut self) -> Result<Option<Item>> {
        match self.state {
            State::Done => Ok(None),
            State::Plain => {
                let n = self.avail().len();
                if n == 0 {
                    return Ok(None);
                }
                let bytes = self.take(n);
                self.plain_tail.extend_from_slice(&bytes[bytes.len().saturating_sub(FOOTER_LEN)..]);
                let excess = self.plain_tail.len().saturating_sub(FOOTER_LEN);
                self.plain_tail.drain(..excess);
                Ok(Some(Item::Plain(bytes)))
            }
            State::Header => {
                let a = self.avail();
                if a.len() < HEADER_LEN && a.iter().zip(crate::format::HEAD_MAGIC).all(|(x, y)| *x == y) {
                    return Ok(None);
                }
                if !Header::has_magic(a) {
                    if self.known.is_some() {
                        return Err(Error::malformed(Rule::HeaderMagic, "the object's header is missing"));
                    }
                    self.check_sealed(false)?;
                    self.state = State::Plain;
                    return self.next_item();
                }
                let header = Header::parse(&a[..HEADER_LEN])?;
                let ctx = match &self.known {
                    Some(known) if known.header.to_bytes()[..] == a[..HEADER_LEN] => known.clone(),
                    Some(_) => return Err(Error::malformed(Rule::HeaderCopy, "header differs from the object's")),
                    None => {
                        self.check_sealed(header.sealed())?;
                        Arc::new(ObjectContext::for_reading(header, self.master.as_ref(), &self.dicts)?)
                    }
                };
                self.head = self.take(HEADER_LEN);
                self.ctx = Some(ctx);
                self.state = State::Body;
                self.next_item()
            }
            State::Body => self.next_body_item(),
        }
    }

    fn next_body_item(&mut self) -> Result<Option<Item>> {
        let a = self.avail();
        if a.len() < 4 {
            return Ok(None);
        }
        if a[..4] == INDEX_MAGIC {
            // Index and footer are as long as the frames read and the header's version make them,
            // if the object is whole.
            let header = self.ctx.as_ref().expect("header read").header;
            let need = header.version.index_len(self.seen.len(), header.sealed()) + FOOTER_LEN;
            if a.len() < need {
                return Ok(None);
            }
            let index_offset = self.consumed;
            let tail = self.take(need);
            return self.finish_index(&tail, index_offset).map(|()| Some(Item::End));
        }
        if a.len() < FRAME_HEADER_LEN {
            return Ok(None);
        }
        let frame = self.seen.len() as u64;
        let sealed = self.ctx.as_ref().expect("header read").header.sealed();
        let header = FrameHeader::parse(&a[..FRAME_HEADER_LEN], frame, sealed)?;
        let total = FRAME_HEADER_LEN + header.stored_len as usize;
        if a.len() < total {
            return Ok(None);
        }
        let stored_offset = self.consumed;
        let mut bytes = self.take(total);
        let payload = bytes.split_off(FRAME_HEADER_LEN);
        self.seen.push(IndexEntry {
            stored_offset,
            raw_offset: self.raw,
            stored_len: header.stored_len,
            raw_len: header.raw_len,
            codec: header.codec,
            flags: header.flags,
            raw_crc: header.raw_crc,
        });
        self.raw += header.raw_len as u64;
        Ok(Some(Item::Frame { frame, header, payload }))
    }

    fn finish_index(&mut self, tail: &[u8], index_offset: u64) -> Result<()> {
        let object_len = index_offset + tail.len() as u64;
        if !crate::format::Footer::has_magic(tail) {
            return Err(Error::malformed(Rule::StreamIndex, "index and footer do not fit the frames read"));
        }
        let layout = Layout::parse(tail, object_len)?;
        if tail[8..8 + HEADER_LEN] != self.head {
            return Err(Error::malformed(Rule::HeaderCopy, "header differs from its copy in the index"));
        }
        layout.open(self.master.as_ref(), &self.dicts)?;
        if layout.entries != self.seen {
            return Err(Error::malformed(Rule::StreamIndex, "frames read differ from the frames the index lists"));
        }
        if !self.avail().is_empty() {
            return Err(Error::malformed(Rule::TrailingBytes, "bytes follow the footer"));
        }
        self.state = State::Done;
        Ok(())
    }

    /// Call at end of input. Returns bytes still held that turn out to be plain data (an input
    /// shorter than the header magic); an error if a shrinkfs object stopped before its footer.
    pub fn finish(&mut self) -> Result<Vec<u8>> {
        let left = self.avail().len();
        match self.state {
            State::Done if left > 0 => Err(Error::malformed(Rule::TrailingBytes, "bytes follow the footer")),
            // Bytes that end with the footer magic are a shrinkfs object: behind a damaged header
            // they are an error, never plain data (whether or not the footer itself verifies).
            State::Plain if crate::format::Footer::has_magic(&self.plain_tail) => Err(Error::malformed(
                Rule::ObjectKind,
                "input ends with the shrinkfs footer magic but does not start with the header magic",
            )),
            State::Done | State::Plain => Ok(Vec::new()),
            State::Header if left < crate::format::HEAD_MAGIC.len() => {
                self.check_sealed(false)?;
                Ok(self.take(left))
            }
            State::Header => Err(Error::Truncated { what: "header", expected: HEADER_LEN as u64, actual: left as u64 }),
            State::Body => {
                let fixed = self.ctx.as_ref().expect("header read").header.version.index_fixed_len();
                Err(Error::Truncated {
                    what: "object (it ends before its index and footer)",
                    expected: self.consumed + (left.max(fixed) + FOOTER_LEN) as u64,
                    actual: self.consumed + left as u64,
                })
            }
        }
    }
}
