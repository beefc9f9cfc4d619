//! Routing between the CPU workers and a batch back end, with stand-ins for the GPU of chosen
//! speeds and failures (CI has no GPU): whichever is free takes the next frame, a back end slower
//! than the cores is left alone, a fast one takes what the busy cores cannot, and every frame
//! comes back encoded in a standard payload whatever the back end does.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::channel;
use std::time::Duration;

use shrinkfs_codec::codec::{Codec, ZstdCodec};
use shrinkfs_codec::dispatch::{
    Backend, BatchBackend, BatchResult, DispatchConfig, Dispatcher, GpuPolicy, Start, StreamGuard, cpu_equivalent,
};
use shrinkfs_codec::{CodecId, EncodeConfig, ObjectContext, workers};

/// A stand-in GPU: each launch takes `delay`, then compresses with the CPU's zstd (so its output
/// is a real zstd payload), or fails, or says nothing got smaller.
struct Fake {
    delay: Duration,
    outcome: Outcome,
    launches: AtomicU64,
    frames: AtomicU64,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Outcome {
    Compress,
    Fail,
    NotSmaller,
}

impl Fake {
    fn new(delay: Duration, outcome: Outcome) -> Arc<Fake> {
        Arc::new(Fake { delay, outcome, launches: AtomicU64::new(0), frames: AtomicU64::new(0) })
    }
}

impl BatchBackend for Fake {
    fn compress_batch(&self, codec: CodecId, chunks: &[&[u8]], _data_type: i32) -> BatchResult {
        assert_eq!(codec, CodecId::Zstd);
        std::thread::sleep(self.delay);
        self.launches.fetch_add(1, Ordering::Relaxed);
        self.frames.fetch_add(chunks.len() as u64, Ordering::Relaxed);
        match self.outcome {
            Outcome::Fail => Err("the stand-in GPU failed".into()),
            Outcome::NotSmaller => Ok(vec![None; chunks.len()]),
            Outcome::Compress => Ok(zstd_on_the_cpu(chunks)),
        }
    }
}

/// What a stand-in returns for `chunks`: real zstd payloads (the CPU's), `None` where a chunk
/// would not shrink.
fn zstd_on_the_cpu(chunks: &[&[u8]]) -> Vec<Option<Vec<u8>>> {
    let z = ZstdCodec::new(1, None).unwrap();
    chunks
        .iter()
        .map(|c| {
            let mut out = Vec::new();
            z.compress(c, &mut out).then_some(out)
        })
        .collect()
}

/// A dispatcher sharing its queue with `fake` (`GpuPolicy::Auto`), or giving it every frame
/// (`On`).
fn dispatcher_with(fake: &Arc<Fake>, policy: GpuPolicy) -> Dispatcher {
    let cfg =
        DispatchConfig { policy, min_items: 4, batch_window: Duration::from_millis(2), ..DispatchConfig::default() };
    Dispatcher::with_backend(Backend::new(fake.clone(), vec![CodecId::Zstd], "stand-in"), cfg).unwrap()
}

fn dispatcher(fake: &Arc<Fake>) -> Dispatcher {
    dispatcher_with(fake, GpuPolicy::Auto)
}

/// Submits `n` frames of compressible text and checks each comes back decoding to its input;
/// returns the stored codec of each.
fn run(d: &Dispatcher, n: usize) -> Vec<CodecId> {
    let data: Vec<Vec<u8>> =
        (0..n).map(|i| format!("frame {i}: the quick brown fox ").repeat(8000).into_bytes()).collect();
    common::dispatch_and_check(d, &data)
}

fn count(d: &Dispatcher, name: &str) -> u64 {
    d.counters().snapshot().into_iter().find(|(n, _)| *n == name).unwrap().1
}

#[test]
fn a_back_end_slower_than_the_cores_holds_no_frame() {
    let fake = Fake::new(Duration::from_millis(400), Outcome::Compress);
    let d = dispatcher(&fake);
    // Unmeasured, it is tried on copies of a few frames (the frames go to the cores at once);
    // measured slower, it is only tried again seconds later.
    let codecs = [run(&d, 200), run(&d, 200)].concat();
    assert!(codecs.iter().all(|c| *c == CodecId::Zstd));
    let launches = fake.launches.load(Ordering::Relaxed);
    assert!(launches <= 2, "{launches} launches of a back end 400 ms a launch");
    assert_eq!(count(&d, "gpu_frames"), 0, "no frame waited for the slow back end");
    assert_eq!(count(&d, "cpu_frames"), 400, "the cores did every frame");
    assert!(count(&d, "gpu_tries") >= 1, "it was tried");
}

#[test]
fn a_fast_back_end_takes_what_busy_cores_cannot() {
    let fake = Fake::new(Duration::ZERO, Outcome::Compress);
    let d = dispatcher(&fake);
    // Every worker busy for a while: frames pile up and the back end takes them. (Its frames
    // are finished — header, checksum — on the workers too, so they come back after.)
    for _ in 0..workers::threads() {
        workers::spawn(|| std::thread::sleep(Duration::from_millis(500)));
    }
    let ctx: Arc<ObjectContext> = Arc::new(EncodeConfig::default().new_object());
    let frames: Vec<Vec<u8>> = (0..64u64).map(|i| format!("frame {i} ").repeat(20_000).into_bytes()).collect();
    let (tx, rx) = channel();
    for (i, raw) in (0..64u64).zip(frames) {
        let tx = tx.clone();
        d.submit(ctx.clone(), cpu_equivalent(CodecId::Zstd, 1), CodecId::Zstd, i, raw.into(), move |f| {
            tx.send((i, f.header.codec)).unwrap()
        });
    }
    drop(tx);
    let got: Vec<_> = rx.iter().collect();
    assert_eq!(got.len(), 64);
    assert!(got.iter().all(|(_, c)| *c == CodecId::Zstd));
    // (A last few frames, fewer than a launch is worth, may wait for the cores instead.)
    let on_gpu = fake.frames.load(Ordering::Relaxed);
    assert!(on_gpu > 64 - 4, "the back end took {on_gpu} of 64 frames");
    assert!(fake.launches.load(Ordering::Relaxed) >= 2, "a first small try, then the rest");
}

#[test]
fn a_failing_back_end_costs_no_frame() {
    let fake = Fake::new(Duration::ZERO, Outcome::Fail);
    let d = dispatcher_with(&fake, GpuPolicy::On);
    let codecs = run(&d, 100);
    assert!(codecs.iter().all(|c| *c == CodecId::Zstd), "the CPU compressed the frames the back end failed");
    assert_eq!(fake.frames.load(Ordering::Relaxed), 100, "with --gpu on the back end gets every frame");
    assert_eq!(count(&d, "fallback_error"), fake.frames.load(Ordering::Relaxed));
}

#[test]
fn frames_the_back_end_cannot_shrink_are_stored_as_they_are() {
    let fake = Fake::new(Duration::ZERO, Outcome::NotSmaller);
    let d = dispatcher_with(&fake, GpuPolicy::On);
    let codecs = run(&d, 100);
    assert_eq!(fake.frames.load(Ordering::Relaxed), 100, "with --gpu on the back end gets every frame");
    assert!(codecs.iter().all(|c| *c == CodecId::None), "stored as they are");
    assert_eq!(count(&d, "fallback_not_smaller"), 100);
}

#[test]
fn the_cores_take_every_frame_while_the_back_end_starts_and_if_it_cannot() {
    let fake = Fake::new(Duration::ZERO, Outcome::Compress);
    let cfg = DispatchConfig { min_items: 4, batch_window: Duration::from_millis(2), ..DispatchConfig::default() };
    let (go, held) = channel::<()>();
    let backend = Backend::new(fake.clone(), vec![CodecId::Zstd], "stand-in");
    let start: Start = Box::new(move || {
        held.recv().unwrap();
        Ok(backend)
    });
    let d = Dispatcher::starting(start, "starting", cfg.clone()).unwrap();
    assert_eq!((d.describe().as_str(), d.gpu_for(CodecId::Zstd)), ("starting", false));
    // Nothing waits for the start: the frames are the cores'.
    run(&d, 100);
    assert_eq!((count(&d, "cpu_frames"), fake.frames.load(Ordering::Relaxed)), (100, 0));
    go.send(()).unwrap();
    d.wait_started();
    assert_eq!((d.describe().as_str(), d.gpu_for(CodecId::Zstd)), ("stand-in", true));

    // A back end that cannot start leaves the cores every frame, and says why.
    let d = Dispatcher::starting(Box::new(|| Err("no device".into())), "starting", cfg).unwrap();
    d.wait_started();
    assert_eq!((d.describe().as_str(), d.gpu_for(CodecId::Zstd)), ("no device", false));
    run(&d, 50);
    assert_eq!(count(&d, "cpu_frames"), 50);
}

/// A back end whose warm-up takes `warm_up` and is counted, with the frames it warmed up for.
struct SlowWarmUp {
    warm_up: Duration,
    warmed: AtomicU64,
    frames: AtomicU64,
}

impl BatchBackend for SlowWarmUp {
    fn compress_batch(&self, _: CodecId, chunks: &[&[u8]], _: i32) -> BatchResult {
        Ok(vec![None; chunks.len()])
    }

    fn warm_up(&self, _: usize, frames: usize) {
        std::thread::sleep(self.warm_up);
        self.frames.store(frames as u64, Ordering::SeqCst);
        self.warmed.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_dispatcher_dropped_while_its_back_end_starts_skips_the_warm_up() {
    let slow =
        Arc::new(SlowWarmUp { warm_up: Duration::from_secs(5), warmed: AtomicU64::new(0), frames: AtomicU64::new(0) });
    let backend = Backend::new(slow.clone(), vec![CodecId::Zstd], "stand-in");
    // The start outlasts the moment the test drops the dispatcher by far.
    let start: Start = Box::new(move || {
        std::thread::sleep(Duration::from_millis(500));
        Ok(backend)
    });
    let d = Dispatcher::starting(start, "starting", DispatchConfig::default()).unwrap();
    let t = std::time::Instant::now();
    drop(d);
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(400), "the drop waited for the start itself ({took:?})");
    assert!(took < Duration::from_secs(4), "but not for a warm-up no frame needs ({took:?})");
    assert_eq!(slow.warmed.load(Ordering::SeqCst), 0);

    // Kept, the back end warms up before it takes a frame.
    let slow = Arc::new(SlowWarmUp {
        warm_up: Duration::from_millis(10),
        warmed: AtomicU64::new(0),
        frames: AtomicU64::new(0),
    });
    let backend = Backend::new(slow.clone(), vec![CodecId::Zstd], "stand-in");
    let d = Dispatcher::starting(Box::new(move || Ok(backend)), "starting", DispatchConfig::default()).unwrap();
    d.wait_started();
    assert_eq!(slow.warmed.load(Ordering::SeqCst), 1);
}

#[test]
fn a_gpu_that_comes_first_warms_up_to_full_launches_and_one_that_must_earn_it_to_its_first_ones() {
    // One launching thread (the stand-in runs one launch at a time): a full launch is its share
    // of `batch_floor_bytes` in 1 MiB frames; the launches that measure the GPU take `min_items`.
    let full = (DispatchConfig::default().batch_floor_bytes >> 20) as u64;
    let first = DispatchConfig::default().min_items as u64;
    for (gpu_first, expected) in [(true, full), (false, first)] {
        let slow =
            Arc::new(SlowWarmUp { warm_up: Duration::ZERO, warmed: AtomicU64::new(0), frames: AtomicU64::new(0) });
        let backend = Backend::new(slow.clone(), vec![CodecId::Zstd], "stand-in");
        let cfg = DispatchConfig { policy: GpuPolicy::Auto, one_stream: true, gpu_first, ..DispatchConfig::default() };
        let d = Dispatcher::starting(Box::new(move || Ok(backend)), "starting", cfg).unwrap();
        d.wait_started();
        assert_eq!(slow.frames.load(Ordering::SeqCst), expected, "gpu_first: {gpu_first}");
    }
}

#[test]
fn auto_starts_no_gpu_for_less_work_than_the_cores_finish_before_it_would_be_up() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let least = shrinkfs_codec::dispatch::auto_min_bytes(cores);
    let cfg = |n| DispatchConfig { policy: GpuPolicy::Auto, expected_bytes: Some(n), ..DispatchConfig::default() };
    let d = Dispatcher::new(cfg(least - 1)).unwrap();
    d.wait_started();
    assert!(d.describe().contains("cores finish them before a GPU would start"), "{}", d.describe());
    assert!(!d.gpu_for(CodecId::Zstd));
    // From that much on, auto tries the GPU as before (here, without one, it says why not).
    let d = Dispatcher::new(cfg(least)).unwrap();
    d.wait_started();
    assert!(!d.describe().contains("cores finish them"), "{}", d.describe());
    let d = Dispatcher::new(DispatchConfig { policy: GpuPolicy::Auto, ..DispatchConfig::default() }).unwrap();
    d.wait_started();
    assert!(!d.describe().contains("cores finish them"), "{}", d.describe());
}

/// A stand-in that runs up to two launches at once, each taking `delay`, and records how many
/// overlapped and which launching thread sent each.
struct Overlapping {
    delay: Duration,
    running: AtomicU64,
    most_at_once: AtomicU64,
    slots: std::sync::Mutex<Vec<(usize, usize)>>,
}

impl BatchBackend for Overlapping {
    fn compress_batch(&self, _: CodecId, chunks: &[&[u8]], _: i32) -> BatchResult {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(zstd_on_the_cpu(chunks))
    }

    fn concurrency(&self) -> usize {
        2
    }

    fn compress_batch_in(&self, slot: (usize, usize), codec: CodecId, chunks: &[&[u8]], data_type: i32) -> BatchResult {
        self.slots.lock().unwrap().push(slot);
        self.compress_batch(codec, chunks, data_type)
    }
}

/// `GpuPolicy::On` with short batch windows and launches of at most 1.25 MiB each (two
/// launching threads share 2.5 MiB with `one_stream`): a few frames of 240 KB.
fn on(one_stream: bool) -> DispatchConfig {
    DispatchConfig {
        policy: GpuPolicy::On,
        min_items: 4,
        batch_window: Duration::from_millis(2),
        batch_floor_bytes: 2_560_000,
        one_stream,
        ..DispatchConfig::default()
    }
}

#[test]
fn one_long_stream_runs_launches_at_once_and_otherwise_one_at_a_time() {
    for one_stream in [true, false] {
        let fake = Arc::new(Overlapping {
            delay: Duration::from_millis(30),
            running: AtomicU64::new(0),
            most_at_once: AtomicU64::new(0),
            slots: Default::default(),
        });
        let d = Dispatcher::with_backend(Backend::new(fake.clone(), vec![CodecId::Zstd], "stand-in"), on(one_stream))
            .unwrap();
        let codecs = run(&d, 200);
        assert!(codecs.iter().all(|c| *c == CodecId::Zstd), "every frame came back compressed, in its place");
        let (most, slots) = (fake.most_at_once.load(Ordering::SeqCst), fake.slots.lock().unwrap().clone());
        if one_stream {
            assert_eq!(most, 2, "two launches ran at once");
            assert!(slots.contains(&(0, 2)) && slots.contains(&(1, 2)), "each thread has its own slot: {slots:?}");
        } else {
            assert_eq!(most, 1, "without one stream, launches run one at a time");
            assert!(slots.iter().all(|s| *s == (0, 1)), "{slots:?}");
        }
    }
}

#[test]
fn one_long_stream_keeps_room_for_launches_beside_the_cores() {
    let fake = Fake::new(Duration::ZERO, Outcome::Compress);
    let cores = 2 * workers::threads() + 1;
    let stream = DispatchConfig { one_stream: true, min_items: 4, ..DispatchConfig::default() };
    let d = Dispatcher::with_backend(Backend::new(fake.clone(), vec![CodecId::Zstd], "stand-in"), stream).unwrap();
    // The cores' share, and four launches of half the launch bytes in 1 MiB frames.
    assert_eq!(d.stream_window(1 << 20), cores + 4 * 128);
    // Counted in bytes: larger frames, fewer of them.
    assert_eq!(d.stream_window(64 << 20), cores + 8);
    assert_eq!(d.frames_in_flight(), cores.max(2 * 4), "a producer's window is not the stream's");
    let cpu = Dispatcher::cpu_only("no GPU");
    assert_eq!(cpu.stream_window(1 << 20), cpu.frames_in_flight(), "without a GPU, just the cores' share");
}

/// A stand-in that records the nice value of the thread each launch runs on.
struct Niceness(std::sync::Mutex<Vec<i32>>);

impl BatchBackend for Niceness {
    fn compress_batch(&self, _: CodecId, chunks: &[&[u8]], _: i32) -> BatchResult {
        self.0.lock().unwrap().push(rustix::process::getpriority_process(None).unwrap());
        Ok(zstd_on_the_cpu(chunks))
    }

    fn concurrency(&self) -> usize {
        2
    }
}

/// Whether this process may raise a thread's priority by 10, as the dispatcher asks: tried on a
/// thread of its own (CAP_SYS_NICE, or a high enough RLIMIT_NICE; root in a container may lack
/// both).
fn may_raise_priority() -> bool {
    let may = std::thread::spawn(|| {
        let now = rustix::process::getpriority_process(None).unwrap();
        now > -20 && rustix::process::setpriority_process(None, (now - 10).max(-20)).is_ok()
    })
    .join()
    .unwrap();
    println!("this process {} raise a thread's priority", if may { "may" } else { "may not" });
    may
}

#[test]
fn launches_run_at_the_priority_asked_for_where_the_process_may_raise_it() {
    let before = rustix::process::getpriority_process(None).unwrap();
    for one_stream in [false, true] {
        let fake = Arc::new(Niceness(Default::default()));
        let cfg = on(one_stream);
        assert_eq!(cfg.launch_nice, -10, "the default");
        let d = Dispatcher::with_backend(Backend::new(fake.clone(), vec![CodecId::Zstd], "stand-in"), cfg).unwrap();
        run(&d, 40);
        drop(d);
        let seen = fake.0.lock().unwrap().clone();
        assert!(!seen.is_empty(), "the stand-in launched");
        // Only root (or CAP_SYS_NICE) may raise a priority (CI runs as root): where this process
        // may not, the launching threads keep the priority they were started with.
        let want = if may_raise_priority() { (before - 10).max(-20) } else { before };
        assert!(seen.iter().all(|&n| n == want), "launches ran at {seen:?}, not {want}");
    }
    assert_eq!(rustix::process::getpriority_process(None).unwrap(), before, "the caller's own is untouched");
    // The CPU workers (started by the first dispatcher, not by its GPU thread) keep theirs.
    let (tx, rx) = channel();
    for _ in 0..workers::threads() * 2 {
        let tx = tx.clone();
        workers::spawn(move || tx.send(rustix::process::getpriority_process(None).unwrap()).unwrap());
    }
    drop(tx);
    assert!(rx.iter().all(|n| n == before), "a CPU worker runs at a raised priority");
}

/// A stand-in that shrinks nothing (so a launch costs only `delay_ms`, which a test changes),
/// runs two launches at once as the GPU does, and panics in every launch once told to.
#[derive(Default)]
struct Switchable {
    delay_ms: AtomicU64,
    panics: std::sync::atomic::AtomicBool,
    panicked: AtomicU64,
}

impl BatchBackend for Switchable {
    fn compress_batch(&self, _: CodecId, chunks: &[&[u8]], _: i32) -> BatchResult {
        if self.panics.load(Ordering::SeqCst) {
            self.panicked.fetch_add(1, Ordering::SeqCst);
            panic!("the stand-in's launch panics");
        }
        std::thread::sleep(Duration::from_millis(self.delay_ms.load(Ordering::SeqCst)));
        Ok(vec![None; chunks.len()])
    }

    fn concurrency(&self) -> usize {
        2
    }
}

/// `auto` sharing its queue with `fake` as a mount's does: the GPU first, one stream of launches
/// (two launching threads of 16 frames each, so the cores leave 32 frames to them).
fn auto_first(fake: &Arc<Switchable>) -> Dispatcher {
    let cfg = DispatchConfig {
        policy: GpuPolicy::Auto,
        min_items: 4,
        batch_window: Duration::from_millis(2),
        batch_floor_bytes: 32 << 20,
        one_stream: true,
        gpu_first: true,
        ..DispatchConfig::default()
    };
    Dispatcher::with_backend(Backend::new(fake.clone(), vec![CodecId::Zstd], "stand-in"), cfg).unwrap()
}

/// Frames the back end took in real launches (what it did not shrink is stored as it is).
fn launched(d: &Dispatcher) -> u64 {
    count(d, "fallback_not_smaller")
}

/// `count` bursts of `n` frames, the first while every worker is busy for a while: a backlog forms, so
/// the back end is tried and measured.
fn bursts(d: &Dispatcher, count: usize, n: usize) {
    for _ in 0..workers::threads() {
        workers::spawn(|| std::thread::sleep(Duration::from_millis(200)));
    }
    for _ in 0..count {
        run(d, n);
    }
}

#[test]
fn a_gpu_that_stops_coming_first_gives_back_every_frame_it_was_left() {
    let fake = Arc::new(Switchable::default());
    let d = Arc::new(auto_first(&fake));
    bursts(&d, 3, 400);
    assert!(launched(&d) > 0, "the fast back end came first");
    // Now each launch takes 400 ms: the first one shows it, and the frames the cores left to the
    // GPU go back to them at once. Every frame comes back within seconds (not only as the
    // GPU's tries hand a few to the cores every few seconds).
    fake.delay_ms.store(400, Ordering::SeqCst);
    let (tx, rx) = channel();
    let runner = {
        let d = d.clone();
        std::thread::spawn(move || {
            bursts(&d, 5, 40);
            tx.send(()).unwrap();
        })
    };
    rx.recv_timeout(Duration::from_secs(5)).expect("every frame came back within seconds");
    runner.join().unwrap();
}

/// Submits frames `range` of one object (text, 160 KiB each) and counts those that come back
/// before `within` has passed or every callback was called or dropped, whichever is first;
/// returns the count and the deadline.
fn submit_within(d: &Dispatcher, range: std::ops::Range<u64>, within: Duration) -> (usize, std::time::Instant) {
    submit_within_stream(d, None, range, within)
}

/// [`submit_within`] for frames of `stream`.
fn submit_within_stream(
    d: &Dispatcher,
    stream: Option<&StreamGuard>,
    range: std::ops::Range<u64>,
    within: Duration,
) -> (usize, std::time::Instant) {
    let ctx: Arc<ObjectContext> = Arc::new(EncodeConfig::default().new_object());
    let (tx, rx) = channel();
    for i in range {
        let tx = tx.clone();
        let raw = format!("frame {i} ").repeat(20_000).into_bytes();
        d.submit_in(stream, ctx.clone(), cpu_equivalent(CodecId::Zstd, 1), CodecId::Zstd, i, raw.into(), move |f| {
            tx.send(f.header.codec).unwrap()
        });
    }
    drop(tx);
    let deadline = std::time::Instant::now() + within;
    let mut back = 0;
    while rx.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())).is_ok() {
        back += 1;
    }
    (back, deadline)
}

#[test]
fn launching_threads_that_die_leave_no_frame_behind() {
    let fake = Arc::new(Switchable::default());
    let d = auto_first(&fake);
    bursts(&d, 3, 400);
    assert!(launched(&d) > 0, "the fast back end came first");
    // Every launch now panics: both launching threads die, and the frames of their last launches
    // with them (their callers see the callback dropped). Every other frame still comes back,
    // within seconds, though the cores had been leaving frames to the GPU.
    fake.panics.store(true, Ordering::SeqCst);
    // (Every worker busy for a while first, so a backlog forms and the GPU launches: on a loaded
    // machine the cores could otherwise take every frame, and no launching thread would die.)
    for _ in 0..workers::threads() {
        workers::spawn(|| std::thread::sleep(Duration::from_millis(300)));
    }
    let (back, deadline) = submit_within(&d, 0..200, Duration::from_secs(5));
    // (At most two launches of 16 frames were lost, or one if a try took the first panic.)
    assert!(fake.panicked.load(Ordering::SeqCst) >= 1, "a launching thread died");
    assert!(back >= 200 - 2 * 16, "{back} of 200 frames came back within 5 s");
    assert!(std::time::Instant::now() < deadline, "the callbacks of every frame were called or dropped");
}

/// `auto` as a mount's, whose frames of `n` streams writing at once go to the GPU alone.
fn many_streams(n: usize) -> DispatchConfig {
    DispatchConfig {
        policy: GpuPolicy::Auto,
        batch_window: Duration::from_millis(2),
        one_stream: true,
        gpu_first: true,
        many_streams: n,
        ..DispatchConfig::default()
    }
}

/// A dispatcher of `cfg` sharing its frames with `backend`, started.
fn auto_streams(backend: Arc<dyn BatchBackend>, cfg: DispatchConfig) -> Dispatcher {
    Dispatcher::with_backend(Backend::new(backend, vec![CodecId::Zstd], "stand-in"), cfg).unwrap()
}

#[test]
fn with_many_streams_writing_auto_gives_the_gpu_their_frames_and_with_fewer_shares_as_measured() {
    // A back end measured far slower than the cores: sharing, `auto` leaves it every frame but a
    // try's copies.
    let fake = Fake::new(Duration::from_millis(100), Outcome::Compress);
    let d = auto_streams(fake.clone(), DispatchConfig { min_items: 4, ..many_streams(2) });
    let cores_window = d.frames_in_flight();
    let settle = || std::thread::sleep(Duration::from_millis(50));
    // Two streams open, one of them writing: the cores take every frame.
    let (one, two) = (d.stream(), d.stream());
    submit_within_stream(&d, Some(&one), 0..100, Duration::from_secs(10));
    assert_eq!(count(&d, "gpu_frames"), 0, "one stream writing: the cores took every frame");
    assert_eq!(d.stream_frames_in_flight(), cores_window);
    // Both write: their frames go to the back end alone, slow as it was measured, and their
    // writers may keep `on`'s window in flight; frames of no stream (a small file's), sent among
    // them, keep the sharing.
    submit_within_stream(&d, Some(&two), 0..1, Duration::from_secs(10));
    submit_within_stream(&d, Some(&one), 0..1, Duration::from_secs(10));
    settle();
    assert_eq!(d.stream_frames_in_flight(), cores_window.max(512));
    assert_eq!(d.frames_in_flight(), cores_window);
    let (gpu, cpu) = (count(&d, "gpu_frames"), count(&d, "cpu_frames"));
    // (Bounded: frames the back end never launched would not come back.)
    let d = &d;
    let back = std::thread::scope(|s| {
        let runs = [Some(&one), Some(&two), None]
            .map(|st| s.spawn(move || submit_within_stream(d, st, 0..60, Duration::from_secs(10)).0));
        runs.map(|r| r.join().unwrap())
    });
    assert_eq!(back, [60, 60, 60], "every frame came back within 10 s");
    // (The cores' count may miss a frame a launching thread handed them; on a loaded machine a
    // shared launch may take a few of the others.)
    assert!(count(d, "gpu_frames") - gpu >= 120, "many streams: the back end took the streams' frames");
    assert!(count(d, "cpu_frames") - cpu >= 50, "and the cores the others");
    // One stream ends: the cores share again.
    drop(two);
    settle();
    let gpu = count(d, "gpu_frames");
    submit_within_stream(d, Some(&one), 0..100, Duration::from_secs(10));
    assert_eq!(count(d, "gpu_frames"), gpu, "fewer streams: the cores took every frame again");
    assert_eq!(d.stream_frames_in_flight(), cores_window);
    // A stream left open but idle does not count either.
    let idle = d.stream();
    submit_within_stream(d, Some(&idle), 0..1, Duration::from_secs(10));
    std::thread::sleep(shrinkfs_codec::dispatch::STREAM_ACTIVE + Duration::from_millis(100));
    let gpu = count(d, "gpu_frames");
    submit_within_stream(d, Some(&one), 0..100, Duration::from_secs(10));
    assert_eq!(count(d, "gpu_frames"), gpu, "an idle stream: the cores took every frame");
}

#[test]
fn a_small_files_frames_come_back_before_a_flood_of_streams_frames() {
    // A fast back end that came first, then two streams flood its own queue: a small file's
    // frames, sent after them, come back long before the streams' (they keep the sharing, and
    // the cores take them). (Whether the cores had left the GPU a reserve of shared frames when
    // the flood came, whose turns a launching thread busy with its own queue gives back, is not
    // arranged here: the last shared decision of the bursts is usually to leave.)
    let fake = Arc::new(Switchable::default());
    let d = auto_streams(fake.clone(), DispatchConfig { min_items: 4, batch_floor_bytes: 32 << 20, ..many_streams(2) });
    bursts(&d, 3, 400);
    assert!(launched(&d) > 0, "the fast back end came first");
    fake.delay_ms.store(20, Ordering::SeqCst);
    let (one, two) = (d.stream(), d.stream());
    submit_within_stream(&d, Some(&one), 0..1, Duration::from_secs(10));
    submit_within_stream(&d, Some(&two), 0..1, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(50));
    let ctx: Arc<ObjectContext> = Arc::new(EncodeConfig::default().new_object());
    let (tx, rx) = channel();
    for i in 0..1200u64 {
        let tx = tx.clone();
        let stream = if i % 2 == 0 { &one } else { &two };
        let raw = format!("frame {i} ").repeat(2_000).into_bytes();
        d.submit_in(
            Some(stream),
            ctx.clone(),
            cpu_equivalent(CodecId::Zstd, 1),
            CodecId::Zstd,
            i,
            raw.into(),
            move |_| tx.send(false).unwrap(),
        );
    }
    for i in 0..3u64 {
        let tx = tx.clone();
        let raw = format!("small {i} ").repeat(2_000).into_bytes();
        d.submit(ctx.clone(), cpu_equivalent(CodecId::Zstd, 1), CodecId::Zstd, i, raw.into(), move |_| {
            tx.send(true).unwrap()
        });
    }
    drop(tx);
    let order: Vec<bool> = rx.iter().collect();
    assert_eq!(order.len(), 1203);
    let last_small = order.iter().rposition(|small| *small).unwrap();
    assert!(last_small < 900, "the small file's last frame came back {last_small}th of 1203");
}

#[test]
fn frames_of_streams_and_of_small_files_mixed_in_the_queue_all_come_back() {
    // A back end measured far slower than the cores, two streams (their frames to it alone) and
    // frames of no stream (each with its CPU turn) queued between theirs. A turn that takes a
    // stream's frame must not leave its own without a turn: once the streams end, the back end
    // (too slow, and too few frames waiting to be worth a launch) takes none of them.
    let fake = Fake::new(Duration::from_millis(30), Outcome::Compress);
    let cfg = DispatchConfig { min_items: 64, batch_max_items: 8, batch_floor_bytes: 8 << 20, ..many_streams(2) };
    let d = auto_streams(fake.clone(), cfg);
    for round in 0..5 {
        let (one, two) = (d.stream(), d.stream());
        let ctx: Arc<ObjectContext> = Arc::new(EncodeConfig::default().new_object());
        let (tx, rx) = channel();
        for i in 0..300u64 {
            let tx = tx.clone();
            let raw = format!("frame {i} ").repeat(4_000).into_bytes();
            let stream = match i % 3 {
                0 => Some(&one),
                1 => Some(&two),
                _ => None,
            };
            d.submit_in(
                stream,
                ctx.clone(),
                cpu_equivalent(CodecId::Zstd, 1),
                CodecId::Zstd,
                i,
                raw.into(),
                move |f| tx.send(f.header.codec).unwrap(),
            );
        }
        drop((one, two, tx));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut back = 0;
        while rx.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())).is_ok() {
            back += 1;
        }
        assert_eq!(back, 300, "round {round}: {back} of 300 frames came back within 10 s");
    }
}

#[test]
fn frames_sent_to_the_gpu_alone_come_back_when_its_launching_threads_die() {
    let fake = Arc::new(Switchable::default());
    fake.panics.store(true, Ordering::SeqCst);
    let d = auto_streams(fake.clone(), DispatchConfig { min_items: 4, batch_floor_bytes: 32 << 20, ..many_streams(1) });
    let stream = d.stream();
    // No frame has a CPU turn; both launching threads die at their first launch, and every
    // frame they did not hold goes to the cores.
    let (back, deadline) = submit_within_stream(&d, Some(&stream), 0..200, Duration::from_secs(5));
    assert!(fake.panicked.load(Ordering::SeqCst) >= 1, "a launching thread died");
    assert!(back >= 200 - 2 * 16, "{back} of 200 frames came back within 5 s");
    assert!(std::time::Instant::now() < deadline, "the callbacks of every frame were called or dropped");
}

#[test]
fn frames_in_a_back_ends_lent_buffers_take_every_path_and_all_go_back() {
    use shrinkfs_codec::format::TAG_LEN;
    use shrinkfs_codec::framebuf::Buffers;
    use shrinkfs_codec::framebuf::testing::CountingPool;
    use shrinkfs_codec::{MasterKey, decode_payload};
    const FRAME: usize = 100_000;
    let compressible = |i: u64| format!("frame {i}: the quick brown fox ").repeat(FRAME / 30).into_bytes();
    // Bytes that look compressed (a CPU-encoded zstd payload): stored as they are, never launched.
    let incompressible = |i: u64| {
        let mut z = Vec::new();
        let noise: Vec<u8> = (0..FRAME * 2).map(|k| ((k as u64 * 2_654_435_761) ^ i).to_le_bytes()[3]).collect();
        ZstdCodec::new(19, None).unwrap().compress(&noise, &mut z);
        z.truncate(FRAME);
        z
    };
    for (outcome, sealed) in
        [(Outcome::Compress, false), (Outcome::Compress, true), (Outcome::NotSmaller, true), (Outcome::Fail, false)]
    {
        let pool = Arc::new(CountingPool::new(64, FRAME + TAG_LEN));
        let fake = Fake::new(Duration::ZERO, outcome);
        let mut backend = Backend::new(fake.clone(), vec![CodecId::Zstd], "stand-in");
        backend.buffers = Buffers::from_pool(pool.clone());
        let cfg = DispatchConfig {
            policy: GpuPolicy::On,
            min_items: 4,
            batch_window: Duration::from_millis(2),
            ..DispatchConfig::default()
        };
        let d = Dispatcher::with_backend(backend, cfg).unwrap();
        let config =
            EncodeConfig { key: sealed.then(|| MasterKey::from_bytes(&[9; 32]).unwrap()), ..EncodeConfig::default() };
        let ctx = Arc::new(config.new_object());
        let data: Vec<Vec<u8>> =
            (0..48u64).map(|i| if i % 3 == 0 { incompressible(i) } else { compressible(i) }).collect();
        let (tx, rx) = channel();
        for (i, bytes) in (0..48u64).zip(&data) {
            let mut raw = d.buffers().get(bytes.len() + TAG_LEN);
            assert!(raw.is_lent(), "the back end's pool lends the frame's buffer");
            raw.extend_from_slice(bytes);
            let tx = tx.clone();
            d.submit(ctx.clone(), cpu_equivalent(CodecId::Zstd, 1), CodecId::Zstd, i, raw, move |f| {
                tx.send((i, f)).unwrap()
            });
        }
        drop(tx);
        let mut got: Vec<_> = rx.iter().collect();
        assert_eq!(got.len(), 48);
        got.sort_by_key(|g| g.0);
        for (i, f) in &got {
            let mut out = Vec::new();
            decode_payload(&ctx, *i, &f.header, &f.payload, None, &mut out).unwrap();
            assert!(out == data[*i as usize], "frame {i} decodes to its input");
        }
        let stored_raw = got.iter().filter(|(_, f)| f.header.codec == CodecId::None).count();
        assert!(stored_raw >= 16, "the frames that look compressed are stored as they are");
        assert!(pool.out.load(Ordering::SeqCst) > 0, "frames stored as they are keep their buffers");
        drop(got);
        assert_eq!(pool.out.load(Ordering::SeqCst), 0, "every buffer went back ({outcome:?}, sealed {sealed})");
        assert_eq!(pool.lent.load(Ordering::SeqCst), 48);
    }
}

#[test]
fn with_the_gpu_required_frames_go_to_the_cores_once_its_launching_threads_died() {
    // `--gpu on`: the cores take no frame from the GPU's queue, so frames waiting there when the
    // last launching thread dies would wait for ever; they go to the cores instead, and so does
    // every frame after.
    let fake = Arc::new(Switchable::default());
    fake.panics.store(true, Ordering::SeqCst);
    let cfg = DispatchConfig {
        policy: GpuPolicy::On,
        min_items: 4,
        batch_window: Duration::from_millis(2),
        one_stream: true,
        ..DispatchConfig::default()
    };
    let d = Dispatcher::with_backend(Backend::new(fake.clone(), vec![CodecId::Zstd], "stand-in"), cfg).unwrap();
    let send = |range: std::ops::Range<u64>| {
        let (back, deadline) = submit_within(&d, range.clone(), Duration::from_secs(10));
        // Every callback was called or dropped (the frames of the launches that panicked).
        assert!(std::time::Instant::now() < deadline, "frames {range:?} still wait after 10 s");
        back
    };
    // (The frames of the two launches that panicked, up to 128 each, are lost with them: more
    // frames than that are sent, so some come back however the launches gathered.)
    let first = send(0..400);
    assert!(fake.panicked.load(Ordering::SeqCst) >= 2, "both launching threads died");
    assert!(first > 0, "the frames the dead launches did not hold came back");
    assert!(!d.gpu_for(CodecId::Zstd), "the GPU is no longer used");
    assert_eq!(send(400..500), 100, "every later frame is encoded on the cores");
}
