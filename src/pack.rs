//! `pack` and `unpack` over byte streams: frames are encoded and decoded on every core, in order,
//! with a bounded number in flight so memory does not grow with the input.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use shrinkfs_codec::dispatch::Dispatcher;
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
/// file: several, at offsets) and hands each frame to the dispatcher; this thread puts the encoded
/// frames in order and gives them to the writers, so reading, encoding and writing all overlap
/// and none waits for another while frames are in flight.
pub fn pack_stream(
    source: Source<'_>,
    sink: Sink<'_>,
    config: &EncodeConfig,
    dispatcher: &Dispatcher,
    on_progress: &(dyn Fn(u64) + Sync),
) -> anyhow::Result<Totals> {
    let codec: Arc<dyn Codec> = Arc::from(config.codec()?);
    let ctx = Arc::new(config.new_object());
    let in_flight = dispatcher.stream_window(config.frame_size as usize);
    // A slot per frame in flight: taken before a frame is read, given back once it is written.
    let (slot_tx, slot_rx) = crossbeam_channel::bounded::<()>(in_flight);
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<(u64, Option<EncodedFrame>)>();
    // The reader's end: the number of frames, or its first error as soon as it has one.
    let (end_tx, end_rx) = crossbeam_channel::bounded::<anyhow::Result<u64>>(1);
    let began = Instant::now();
    Writing::run(sink, |out| {
        let mut writer = ObjectWriter::new(ctx.clone());
        out.put(writer.header_bytes().to_vec())?;
        std::thread::scope(|s| {
            let (ctx, codec, gpu_codec) = (&ctx, &codec, config.params.codec);
            s.spawn(move || {
                let slot = || slot_tx.send(()).is_ok();
                let frame = |k, raw| {
                    let reply = Reply { k, tx: Some(done_tx.clone()) };
                    dispatcher.submit(ctx.clone(), codec.clone(), gpu_codec, k, raw, move |f| reply.send(f));
                };
                let fail = |e| {
                    let _ = end_tx.try_send(Err(e));
                };
                if let Some(n) = source.frames(config.frame_size as usize, &slot, &frame, &fail) {
                    let _ = end_tx.send(Ok(n));
                }
            });
            // Leaving early (an error) drops `slot_rx`, which stops the readers.
            let slot_rx = slot_rx;
            let (mut next, mut total, mut early) = (0u64, None, BTreeMap::new());
            // The reading side's end, until it has said how many frames there are; the encoded
            // frames, until every sender is gone (the reader's and each frame's).
            let (mut end, mut done, mut all_done) = (end_rx, done_rx, false);
            while total != Some(next) {
                if let (true, Some(total)) = (all_done, total) {
                    anyhow::bail!("frame {next} of {total} never came back from the encoder");
                }
                crossbeam_channel::select! {
                    recv(done) -> got => match got {
                        Ok((k, Some(f))) => {
                            early.insert(k, f);
                        }
                        Ok((k, None)) => anyhow::bail!("frame {k} was lost: its encoder failed"),
                        Err(_) => (done, all_done) = (crossbeam_channel::never(), true),
                    },
                    recv(end) -> got => {
                        total = Some(got.map_err(|_| anyhow::anyhow!("the input reader stopped"))??);
                        end = crossbeam_channel::never();
                    }
                }
                while let Some(f) = early.remove(&next) {
                    writer.push(&f);
                    on_progress(f.header.raw_len as u64);
                    out.put(f.head().to_vec())?;
                    out.put(f.payload)?;
                    let _ = slot_rx.recv();
                    next += 1;
                }
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

/// Hands frame `k`'s encoding back to the ordering loop. Dropped unused (an encoder that failed
/// and let go of its callback), it says the frame was lost, so `pack` fails instead of waiting
/// for it forever.
struct Reply {
    k: u64,
    tx: Option<crossbeam_channel::Sender<(u64, Option<EncodedFrame>)>>,
}

impl Reply {
    fn send(mut self, f: EncodedFrame) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send((self.k, Some(f)));
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send((self.k, None));
        }
    }
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

    #[test]
    fn a_frame_whose_encoder_let_go_of_it_fails_the_pack() {
        let (tx, rx) = crossbeam_channel::unbounded();
        drop(Reply { k: 7, tx: Some(tx.clone()) });
        assert_eq!(rx.try_recv().map(|(k, f)| (k, f.is_none())), Ok((7, true)));
        let ctx = EncodeConfig::default().new_object();
        let codec = shrinkfs_codec::codec::NoneCodec;
        Reply { k: 8, tx: Some(tx) }.send(shrinkfs_codec::frame::encode_frame(&ctx, &codec, 8, b"x"));
        assert_eq!(rx.try_recv().map(|(k, f)| (k, f.is_some())), Ok((8, true)), "sent once, not again on drop");
        assert!(rx.try_recv().is_err());
    }
}
