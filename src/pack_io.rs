//! Where `pack` reads its frames from and writes its object to: a regular file is read at frame
//! offsets by several threads at once (one thread reads 4 GB/s from the page cache, less than the
//! cores and the GPU compress), a stream (stdin, an object) front to back; the object is written
//! by a thread of its own, at offsets into a file (no copy through a buffer) or to a stream.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use crossbeam_channel::Sender;
use shrinkfs_codec::framebuf::FrameBuf;

use crate::fileio::{Input, Output, read_full};

/// Threads that read a regular file at once.
fn file_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4)
}

/// The input of a pack.
pub enum Source<'a> {
    /// A regular file of `len` bytes (its length when opened: later growth is not packed).
    File { file: &'a File, len: u64 },
    /// Anything else, read front to back.
    Stream(&'a mut (dyn Read + Send)),
}

impl<'a> Source<'a> {
    /// How to read `input` in frames of `frame_size`: at offsets when it is a regular file of at
    /// least four frames; front to back otherwise (stdin, an object, and small or pseudo files,
    /// whose reported size may be 0 or a page whatever they hold, as in /proc and /sys).
    pub fn of(input: &'a mut Input, frame_size: usize) -> Self {
        match (&input.file, input.len) {
            (Some(file), Some(len)) if len >= 4 * frame_size as u64 => Source::File { file, len },
            _ => Source::Stream(&mut input.reader),
        }
    }

    /// Calls `frame(k, bytes)` for every frame (a file's in buffers `new_buf` gives for a number
    /// of bytes) of `frame_size` bytes (the last may be shorter; an
    /// empty input has none), in order of `k` as far as one thread goes, on up to
    /// [`file_threads`] threads for a file. `slot()` is called before each frame is read and
    /// returns false to stop. Returns the number of frames once every one was handed over;
    /// `None` if it stopped, or failed: the error goes to `fail` at once, before the other threads
    /// have ended (they may be waiting in `slot()` for the frame that failed).
    pub fn frames(
        self,
        frame_size: usize,
        new_buf: &(dyn Fn(usize) -> FrameBuf + Sync),
        slot: &(dyn Fn() -> bool + Sync),
        frame: &(dyn Fn(u64, FrameBuf) + Sync),
        fail: &(dyn Fn(anyhow::Error) + Sync),
    ) -> Option<u64> {
        match self {
            Source::Stream(input) => {
                let mut k = 0u64;
                loop {
                    if !slot() {
                        return None;
                    }
                    let mut buf = Vec::new();
                    let n = match read_full(input, &mut buf, frame_size) {
                        Ok(n) => n,
                        Err(e) => {
                            fail(anyhow::Error::new(e).context("cannot read input"));
                            return None;
                        }
                    };
                    if n == 0 {
                        return Some(k);
                    }
                    frame(k, buf.into());
                    k += 1;
                    if n < frame_size {
                        return Some(k);
                    }
                }
            }
            Source::File { file, len } => {
                let frames = len.div_ceil(frame_size as u64);
                let (next, failed, stopped) = (AtomicU64::new(0), AtomicBool::new(false), AtomicBool::new(false));
                std::thread::scope(|s| {
                    for _ in 0..file_threads().min(frames.max(1) as usize) {
                        s.spawn(|| {
                            loop {
                                if !slot() {
                                    stopped.store(true, Ordering::Relaxed);
                                    return;
                                }
                                let k = next.fetch_add(1, Ordering::Relaxed);
                                if k >= frames || failed.load(Ordering::Relaxed) {
                                    return;
                                }
                                let at = k * frame_size as u64;
                                let n = (len - at).min(frame_size as u64) as usize;
                                let mut buf = new_buf(n);
                                buf.resize_zeroed(n);
                                if let Err(e) = file.read_exact_at(&mut buf, at) {
                                    if !failed.swap(true, Ordering::Relaxed) {
                                        fail(
                                            anyhow::Error::new(e)
                                                .context(format!("cannot read input at byte {at} (did it shrink?)")),
                                        );
                                    }
                                    return;
                                }
                                frame(k, buf);
                            }
                        });
                    }
                });
                if failed.into_inner() || stopped.into_inner() {
                    return None;
                }
                if file.read_at(&mut [0u8; 1], len).is_ok_and(|n| n > 0) {
                    tracing::warn!("the input grew while it was packed: the object holds its first {len} bytes");
                }
                Some(frames)
            }
        }
    }
}

/// The output of a pack.
pub enum Sink<'a> {
    /// A regular file, written at offsets.
    File(&'a File),
    /// Anything else, written front to back.
    Stream(&'a mut (dyn Write + Send)),
}

impl<'a> Sink<'a> {
    /// Where to write `output`: at offsets into its file when it is a local file, front to back
    /// otherwise (stdout, an object).
    pub fn of(output: &'a mut Output) -> Self {
        if output.file().is_some() { Sink::File(output.file().expect("checked")) } else { Sink::Stream(output) }
    }
}

/// Writes the buffers given to [`Writing::put`] in order of arrival, as one stream, on a thread
/// of its own, so the thread that puts them goes on at once.
pub struct Writing<'f> {
    tx: Option<Sender<(u64, Bytes)>>,
    at: u64,
    /// The writer's first error, once it has one: the body stops at its next `put` instead of
    /// encoding the rest.
    failed: &'f Mutex<Option<std::io::Error>>,
}

impl Writing<'_> {
    /// Runs `body` with a writer into `sink`; returns once everything is written, with the first
    /// write error if any (which explains a failure of `body` better than `body` does).
    pub fn run<T>(sink: Sink<'_>, body: impl FnOnce(&mut Writing<'_>) -> anyhow::Result<T>) -> anyhow::Result<T> {
        let failed: Mutex<Option<std::io::Error>> = Mutex::new(None);
        let result = std::thread::scope(|s| {
            // (A frame is two buffers, its header and its payload: 64 frames.)
            let (tx, rx) = crossbeam_channel::bounded::<(u64, Bytes)>(128);
            let fail = |e: std::io::Error| {
                failed.lock().expect("error slot").get_or_insert(e);
            };
            // One thread: writes to one file are serialised by the kernel anyway (measured: four
            // threads writing at offsets into one tmpfs file were slower than one).
            s.spawn(move || {
                let result = match sink {
                    Sink::File(file) => rx.iter().try_for_each(|(at, buf)| file.write_all_at(&buf, at)),
                    Sink::Stream(output) => {
                        rx.iter().try_for_each(|(_, buf)| output.write_all(&buf)).and_then(|()| output.flush())
                    }
                };
                if let Err(e) = result {
                    fail(e);
                    // Drained, so the body's next `put` sees the failure rather than a full channel.
                    rx.iter().for_each(drop);
                }
            });
            let mut w = Writing { tx: Some(tx), at: 0, failed: &failed };
            let result = body(&mut w);
            drop(w.tx.take());
            result
        });
        match failed.into_inner().expect("error slot") {
            Some(e) => Err(anyhow::Error::new(e).context("cannot write output")),
            None => result,
        }
    }

    /// Writes `buf` after everything put before it.
    pub fn put(&mut self, buf: impl Into<Bytes>) -> anyhow::Result<()> {
        let buf = buf.into();
        let len = buf.len() as u64;
        let tx = self.tx.as_ref().expect("open while the body runs");
        if self.failed.lock().expect("error slot").is_some() {
            anyhow::bail!("the output failed");
        }
        tx.send((self.at, buf)).map_err(|_| anyhow::anyhow!("the output writer stopped"))?;
        self.at += len;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shrinkfs_codec::framebuf::Buffers;
    use shrinkfs_codec::framebuf::testing::CountingPool;

    /// The frames `source` gives, a file's read into buffers lent by a pool of 8 (given back).
    fn collect(source: Source<'_>, frame_size: usize) -> Vec<(u64, Vec<u8>)> {
        let pool = std::sync::Arc::new(CountingPool::new(8, frame_size));
        let buffers = Buffers::from_pool(pool.clone());
        let got = Mutex::new(Vec::new());
        let fail = |e: anyhow::Error| panic!("{e:#}");
        let new_buf = |n| buffers.get(n);
        let frame = |k, b: FrameBuf| got.lock().unwrap().push((k, b.into_vec()));
        let n = source.frames(frame_size, &new_buf, &|| true, &frame, &fail).unwrap();
        assert_eq!(pool.out.load(std::sync::atomic::Ordering::SeqCst), 0, "every buffer given back");
        let mut got = got.into_inner().unwrap();
        got.sort();
        assert_eq!(got.len() as u64, n);
        got
    }

    #[test]
    fn a_file_and_a_stream_of_the_same_bytes_give_the_same_frames() {
        let dir = tempfile::tempdir().unwrap();
        for len in [0usize, 1, 4095, 4096, 4097, 40_000] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let path = dir.path().join(format!("in{len}"));
            std::fs::write(&path, &bytes).unwrap();
            let file = File::open(&path).unwrap();
            let from_file = collect(Source::File { file: &file, len: len as u64 }, 4096);
            let mut cursor = std::io::Cursor::new(bytes.clone());
            let from_stream = collect(Source::Stream(&mut cursor), 4096);
            assert_eq!(from_file, from_stream, "{len} bytes");
            assert_eq!(from_file.iter().flat_map(|(_, b)| b.clone()).collect::<Vec<u8>>(), bytes);
        }
    }

    #[test]
    fn a_file_that_shrank_since_it_was_measured_is_an_error_not_short_output() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in");
        std::fs::write(&path, vec![1u8; 10_000]).unwrap();
        let file = File::open(&path).unwrap();
        let failed = Mutex::new(Vec::new());
        let fail = |e: anyhow::Error| failed.lock().unwrap().push(format!("{e:#}"));
        assert_eq!(
            Source::File { file: &file, len: 20_000 }.frames(
                4096,
                &|n| Buffers::default().get(n),
                &|| true,
                &|_, _| {},
                &fail
            ),
            None
        );
        let failed = failed.into_inner().unwrap();
        assert_eq!(failed.len(), 1, "one error, said once: {failed:?}");
        assert!(failed[0].contains("did it shrink"), "{failed:?}");
    }

    #[test]
    fn buffers_land_in_the_order_they_were_put_in_a_file_and_in_a_stream() {
        let dir = tempfile::tempdir().unwrap();
        let bufs: Vec<Vec<u8>> = (0..300u32).map(|i| vec![(i % 256) as u8; (i as usize * 37) % 5000]).collect();
        let whole: Vec<u8> = bufs.concat();
        let path = dir.path().join("out");
        let file = File::create(&path).unwrap();
        Writing::run(Sink::File(&file), |w| bufs.iter().try_for_each(|b| w.put(b.clone()))).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), whole);
        let mut out = Vec::new();
        Writing::run(Sink::Stream(&mut out), |w| bufs.iter().try_for_each(|b| w.put(b.clone()))).unwrap();
        assert_eq!(out, whole);
    }

    #[test]
    fn a_write_error_is_reported_once_the_body_is_done() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::from_raw_os_error(28))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut puts = 0;
        let e = Writing::run(Sink::Stream(&mut Full), |w| {
            loop {
                w.put(vec![1; 10])?;
                puts += 1;
                if puts == 1_000_000 {
                    return Ok(());
                }
            }
        })
        .unwrap_err();
        assert!(format!("{e:#}").contains("cannot write output"), "{e:#}");
        assert!(puts < 1_000_000, "the body stops soon after the first failed write");
    }
}
