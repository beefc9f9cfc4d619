//! `pack` and `unpack` over byte streams: frames are encoded and decoded on every core, in order,
//! with a bounded number in flight so memory does not grow with the input.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use shrinkfs_codec::dispatch::Dispatcher;
use shrinkfs_codec::format::TAG_LEN;
use shrinkfs_codec::ordered::{Lost, Ordered};
use shrinkfs_codec::pipeline::EncodeStream;
use shrinkfs_codec::pool::OrderedPool;
use shrinkfs_codec::stream::{Item, StreamDecoder};
use shrinkfs_codec::{Codec, Dictionary, EncodeConfig, EncodedFrame, MasterKey, ObjectWriter, decode_payload};

use crate::fileio::read_full;
use crate::pack_io::{Sink, Source, Writing};

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

/// Encodes everything `source` yields into one object written to `sink`. One thread reads (a
/// file: several, at offsets) and hands each frame to the ordered encode pipeline; this thread
/// takes the encoded frames back in order and gives them to the writers, so reading, encoding and
/// writing all overlap and none waits for another while frames are in flight.
pub fn pack_stream(
    source: Source<'_>,
    sink: Sink<'_>,
    config: &EncodeConfig,
    dispatcher: &Dispatcher,
    on_progress: &(dyn Fn(u64) + Sync),
) -> anyhow::Result<Totals> {
    let codec: Arc<dyn Codec> = Arc::from(config.codec()?);
    let ctx = Arc::new(config.new_object());
    let stream = EncodeStream::new(ctx.clone(), codec, config.params.codec);
    let in_flight = dispatcher.stream_window(config.frame_size as usize);
    // A slot per frame in flight: taken before a frame is read, given back once it is written.
    let (slot_tx, slot_rx) = crossbeam_channel::bounded::<()>(in_flight);
    // The reader's end: the number of frames, or its first error.
    let (end_tx, end_rx) = crossbeam_channel::bounded::<anyhow::Result<u64>>(1);
    let began = Instant::now();
    Writing::run(sink, |out| {
        let mut writer = ObjectWriter::new(ctx);
        out.put(writer.header_bytes().to_vec())?;
        std::thread::scope(|s| {
            let stream = &stream;
            s.spawn(move || {
                // However the reading ends (a panic too), no frame is promised after it.
                let _closed = Closing(stream.frames());
                let slot = || slot_tx.send(()).is_ok();
                let frame = |k, raw| stream.submit(dispatcher, k, raw, ());
                // A failed read closes at once: the frames after it may be waiting for slots that
                // only the writing side, which waits for the failed frame, would give back.
                let fail = |e| {
                    let _ = end_tx.try_send(Err(e));
                    stream.frames().close();
                };
                // Each frame's buffer has room for a GCM tag, so a frame stored as it is is sealed in
                // place (from the GPU's page-locked pool where it lends one: not by default).
                let new_buf = |n| dispatcher.buffers().get(n + TAG_LEN);
                if let Some(n) = source.frames(config.frame_size as usize, &new_buf, &slot, &frame, &fail) {
                    let _ = end_tx.send(Ok(n));
                }
            });
            // Leaving early (an error) drops `slot_rx`, which stops the readers.
            let slot_rx = slot_rx;
            while let Some(f) = stream.frames().wait_next() {
                let f = f.map_err(|lost| anyhow::anyhow!("frame {} was lost: its encoder failed", lost.0))?;
                writer.push(&f);
                on_progress(f.header.raw_len as u64);
                out.put(f.head().to_vec())?;
                out.put(f.payload)?;
                let _ = slot_rx.recv();
            }
            // Every frame promised is written; the reading side has said how it ended.
            let next = stream.frames().next_number();
            match end_rx.try_recv() {
                Ok(Ok(total)) if total == next => {}
                Ok(Ok(total)) => anyhow::bail!("frame {next} of {total} never came back from the encoder"),
                Ok(Err(e)) => return Err(e),
                Err(_) => anyhow::bail!("the input reader stopped"),
            }
            tracing::debug!(frames = next, in_flight, ms = began.elapsed().as_millis() as u64, "frames encoded");
            let (raw, frames, body) = (writer.raw_len(), writer.next_frame(), writer.stored_len());
            let tail = writer.finish();
            let stored = body + tail.len() as u64;
            out.put(tail)?;
            Ok(Totals { raw, stored, frames })
        })
    })
}

/// Closes the pipeline's frames to new promises when the reading side ends, however it ends.
struct Closing<'a>(&'a Ordered<EncodedFrame>);

impl Drop for Closing<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The error a reader front to back meets first: a frame still decoding fails before the later
/// structure that `later` is about (FORMAT.md: frames are checked in stored order).
fn first_error(
    pool: &mut OrderedPool<shrinkfs_codec::Result<Vec<u8>>>,
    later: shrinkfs_codec::Error,
) -> shrinkfs_codec::Error {
    while let Some(done) = pool.wait_next() {
        if let Err(e) = decoded(done) {
            return e;
        }
    }
    later
}

/// A decode's result as the pool hands it back: a decode whose worker stopped is an error too.
fn decoded(done: Result<shrinkfs_codec::Result<Vec<u8>>, Lost>) -> shrinkfs_codec::Result<Vec<u8>> {
    done?
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
                        write_out(&decoded(pool.wait_next().expect("pool is full"))?, &mut totals)?;
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
                write_out(&decoded(done)?, &mut totals)?;
            }
        }
        if n == 0 {
            break;
        }
    }
    while let Some(done) = pool.wait_next() {
        write_out(&decoded(done)?, &mut totals)?;
    }
    let rest = dec.finish().map_err(|e| first_error(&mut pool, e))?;
    write_out(&rest, &mut totals)?;
    output.flush().context("cannot write output")?;
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames larger than the dispatcher encodes inline, so they finish on the workers out of order.
    const FRAME: usize = 128 << 10;

    /// Packs `bytes` from a file and as a stream, into a file and into a stream, with 128 KiB
    /// frames, and unpacks each result.
    fn round_trips(bytes: &[u8]) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in");
        std::fs::write(&path, bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let config = EncodeConfig { frame_size: FRAME as u32, ..EncodeConfig::default() };
        let dispatcher = Dispatcher::cpu_only("test");
        for (way, from_file, to_file) in [(0, true, true), (1, true, false), (2, false, true), (3, false, false)] {
            let mut cursor = std::io::Cursor::new(bytes.to_vec());
            let source = if from_file {
                Source::File { file: &file, len: bytes.len() as u64 }
            } else {
                Source::Stream(&mut cursor)
            };
            let out_path = dir.path().join(format!("out{way}"));
            let out_file = std::fs::File::create(&out_path).unwrap();
            let mut packed = Vec::new();
            let sink = if to_file { Sink::File(&out_file) } else { Sink::Stream(&mut packed) };
            let t = pack_stream(source, sink, &config, &dispatcher, &|_| {}).unwrap();
            if to_file {
                packed = std::fs::read(&out_path).unwrap();
            }
            let frames = bytes.len().div_ceil(FRAME) as u64;
            assert_eq!((t.raw, t.frames, t.stored), (bytes.len() as u64, frames, packed.len() as u64), "way {way}");
            let mut back = Vec::new();
            unpack_stream(&mut &packed[..], &mut back, None, vec![], false, &|_| {}).unwrap();
            assert!(back == bytes, "{} bytes round trip, way {way}", bytes.len());
        }
    }

    #[test]
    fn every_frame_comes_back_in_order_whichever_way_the_input_is_read_and_written() {
        for len in [0, 1, FRAME, FRAME + 1, 40 * FRAME + 12_345] {
            let bytes: Vec<u8> = (0..len).map(|i| ((i / 3) % 251) as u8 ^ (i % 7) as u8).collect();
            round_trips(&bytes);
        }
    }

    #[test]
    fn an_input_that_shrank_fails_the_pack_and_does_not_hang_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in");
        std::fs::write(&path, vec![7u8; 20 * FRAME]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let config = EncodeConfig { frame_size: FRAME as u32, ..EncodeConfig::default() };
                let dispatcher = Dispatcher::cpu_only("test");
                // Said to be 200 frames long: the frames past 20 cannot be read.
                let source = Source::File { file: &file, len: 200 * FRAME as u64 };
                let r = pack_stream(source, Sink::Stream(&mut std::io::sink()), &config, &dispatcher, &|_| {});
                tx.send(r.map(|_| ()).map_err(|e| format!("{e:#}"))).unwrap();
            });
            let got = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("pack returned");
            let e = got.unwrap_err();
            assert!(e.contains("did it shrink"), "{e}");
        });
    }
}
