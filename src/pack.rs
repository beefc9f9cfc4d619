//! `pack` and `unpack` over byte streams: frames are encoded and decoded on every core, in order,
//! with a bounded number in flight so memory does not grow with the input.

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::mpsc::{SyncSender, sync_channel};

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

/// Runs `body` with a channel whose buffers a second thread writes to `output` in order, so
/// reading and writing overlap (as `zstd -T` does); returns once everything is written.
fn with_writer<T>(
    output: &mut (dyn Write + Send),
    body: impl FnOnce(&SyncSender<Vec<u8>>) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    std::thread::scope(|scope| {
        let (tx, rx) = sync_channel::<Vec<u8>>(16);
        let writer = scope.spawn(move || -> std::io::Result<()> {
            for buf in rx {
                output.write_all(&buf)?;
            }
            output.flush()
        });
        let result = body(&tx);
        drop(tx);
        let written = writer.join().map_err(|_| anyhow::anyhow!("the writer thread panicked"))?;
        // A write error explains a failed send better than the send does.
        written.context("cannot write output")?;
        result
    })
}

fn send(tx: &SyncSender<Vec<u8>>, buf: Vec<u8>) -> anyhow::Result<()> {
    tx.send(buf).map_err(|_| anyhow::anyhow!("the output writer stopped"))
}

/// Encodes everything `input` yields into one object written to `output`.
pub fn pack_stream(
    input: &mut dyn Read,
    output: &mut (dyn Write + Send),
    config: &EncodeConfig,
    dispatcher: &Dispatcher,
    on_progress: &dyn Fn(u64),
) -> anyhow::Result<Totals> {
    let codec: Arc<dyn Codec> = Arc::from(config.codec()?);
    let ctx = Arc::new(config.new_object());
    with_writer(output, |tx| {
        let mut writer = ObjectWriter::new(ctx.clone());
        send(tx, writer.header_bytes().to_vec())?;
        let mut pool: OrderedPool<EncodedFrame> = OrderedPool::new(dispatcher.frames_in_flight());
        let emit = |f: EncodedFrame, writer: &mut ObjectWriter| -> anyhow::Result<()> {
            writer.push(&f);
            on_progress(f.header.raw_len as u64);
            send(tx, f.bytes)
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
        let (raw, frames, body) = (writer.raw_len(), writer.next_frame(), writer.stored_len());
        let tail = writer.finish();
        let stored = body + tail.len() as u64;
        send(tx, tail)?;
        Ok(Totals { raw, stored, frames })
    })
}

/// The error a reader front to back meets first: a frame still decoding fails before the later
/// structure that `later` is about (FORMAT.md: frames are checked in stored order).
fn first_error(
    pool: &mut OrderedPool<shrinkfs_codec::Result<Vec<u8>>>,
    later: shrinkfs_codec::Error,
) -> shrinkfs_codec::Error {
    while let Some(done) = pool.wait_next() {
        if let Err(e) = done {
            return e;
        }
    }
    later
}

/// Decodes the object `input` yields (or copies plain bytes) to `output`, checking everything.
/// An error can come after some output was written; callers write to a temporary file.
pub fn unpack_stream(
    input: &mut dyn Read,
    output: &mut dyn Write,
    key: Option<MasterKey>,
    dicts: Vec<Arc<Dictionary>>,
    allow_unsealed: bool,
    on_progress: &dyn Fn(u64),
) -> anyhow::Result<Totals> {
    let mut dec = StreamDecoder::new(key, dicts).allow_unsealed(allow_unsealed);
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
        while let Some(item) = dec.next_item().map_err(|e| first_error(&mut pool, e))? {
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
    let rest = dec.finish().map_err(|e| first_error(&mut pool, e))?;
    write_out(&rest, &mut totals)?;
    output.flush().context("cannot write output")?;
    Ok(totals)
}
