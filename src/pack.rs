//! `pack` and `unpack` over byte streams: frames are encoded and decoded on every core, in order,
//! with a bounded number in flight so memory does not grow with the input.

use std::io::{Read, Write};
use std::sync::Arc;

use anyhow::Context;
use shrinkfs_codec::dispatch::Dispatcher;
use shrinkfs_codec::pool::OrderedPool;
use shrinkfs_codec::stream::{Item, StreamDecoder};
use shrinkfs_codec::{Codec, Dictionary, EncodeConfig, EncodedFrame, MasterKey, ObjectWriter, decode_payload};

use crate::fileio::read_full;

/// Totals of one pack or unpack.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Logical (decoded) bytes.
    pub raw: u64,
    /// Stored (encoded) bytes.
    pub stored: u64,
    /// Frames.
    pub frames: u64,
}

/// Encodes everything `input` yields into one object written to `output`.
pub fn pack_stream(
    input: &mut dyn Read,
    output: &mut dyn Write,
    config: &EncodeConfig,
    dispatcher: &Dispatcher,
    on_progress: &dyn Fn(u64),
) -> anyhow::Result<Totals> {
    let codec: Arc<dyn Codec> = Arc::from(config.codec()?);
    let ctx = Arc::new(config.new_object());
    let mut writer = ObjectWriter::new(ctx.clone());
    output.write_all(&writer.header_bytes()).context("cannot write output")?;
    let mut pool: OrderedPool<EncodedFrame> = OrderedPool::new(dispatcher.frames_in_flight());
    let mut emit = |f: EncodedFrame, writer: &mut ObjectWriter| -> anyhow::Result<()> {
        writer.push(&f);
        output.write_all(&f.bytes).context("cannot write output")?;
        on_progress(f.header.raw_len as u64);
        Ok(())
    };
    let mut frame = 0u64;
    loop {
        let mut buf = Vec::new();
        let n = read_full(input, &mut buf, config.frame_size as usize).context("cannot read input")?;
        if n == 0 {
            break;
        }
        while pool.is_full() {
            let f = pool.wait_next().expect("pool is full");
            emit(f, &mut writer)?;
        }
        let (ctx, codec, gpu_codec) = (ctx.clone(), codec.clone(), config.params.codec);
        pool.submit_async(|done| dispatcher.submit(ctx, codec, gpu_codec, frame, buf, done));
        frame += 1;
        while let Some(f) = pool.ready() {
            emit(f, &mut writer)?;
        }
        if n < config.frame_size as usize {
            break;
        }
    }
    while let Some(f) = pool.wait_next() {
        emit(f, &mut writer)?;
    }
    let totals = Totals { raw: writer.raw_len(), stored: 0, frames: writer.next_frame() };
    let stored_before_tail = writer.stored_len();
    let tail = writer.finish();
    output.write_all(&tail).context("cannot write output")?;
    output.flush().context("cannot write output")?;
    Ok(Totals { stored: stored_before_tail + tail.len() as u64, ..totals })
}

/// Decodes the object `input` yields (or copies plain bytes) to `output`, checking everything.
/// An error can come after some output was written; callers write to a temporary file.
pub fn unpack_stream(
    input: &mut dyn Read,
    output: &mut dyn Write,
    key: Option<MasterKey>,
    dicts: Vec<Arc<Dictionary>>,
    on_progress: &dyn Fn(u64),
) -> anyhow::Result<Totals> {
    let mut dec = StreamDecoder::new(key, dicts);
    let mut pool: OrderedPool<shrinkfs_codec::Result<Vec<u8>>> = OrderedPool::for_this_machine();
    let mut totals = Totals::default();
    let mut write_out = |bytes: &[u8], totals: &mut Totals| -> anyhow::Result<()> {
        output.write_all(bytes).context("cannot write output")?;
        totals.raw += bytes.len() as u64;
        Ok(())
    };
    let mut chunk = Vec::with_capacity(4 << 20);
    loop {
        let n = read_full(input, &mut chunk, 4 << 20).context("cannot read input")?;
        totals.stored += n as u64;
        on_progress(n as u64);
        dec.feed(&chunk[..n]);
        while let Some(item) = dec.next_item()? {
            match item {
                Item::Plain(bytes) => write_out(&bytes, &mut totals)?,
                Item::Frame { frame, header, payload } => {
                    while pool.is_full() {
                        write_out(&pool.wait_next().expect("pool is full")?, &mut totals)?;
                    }
                    let ctx = dec.context().expect("frames follow the header").clone();
                    pool.submit(move || {
                        let mut out = Vec::new();
                        decode_payload(&ctx, frame, &header, &payload, None, &mut out).map(|()| out)
                    });
                    totals.frames += 1;
                }
                Item::End => {}
            }
            while let Some(done) = pool.ready() {
                write_out(&done?, &mut totals)?;
            }
        }
        if n == 0 {
            break;
        }
    }
    while let Some(done) = pool.wait_next() {
        write_out(&done?, &mut totals)?;
    }
    let rest = dec.finish()?;
    write_out(&rest, &mut totals)?;
    output.flush().context("cannot write output")?;
    Ok(totals)
}
