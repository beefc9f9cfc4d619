#!/usr/bin/env python3
"""Attribute each sample of `perf script` output to the first bucket (in rule order) whose regex
matches any frame of its stack. Prints % of samples and of CPU-seconds (period)."""
import re, sys, collections
sys.path.insert(0, __file__.rsplit('/', 1)[0])

PARK = r'^(futex_wait|futex_wake|do_futex|__x64_sys_futex|epoll_wait|do_epoll_wait|schedule|__schedule|finish_task_switch.*|try_to_wake_up|syscall)$|Parker|park_timeout|CachedParkThread::park|condvar|Condvar|Inner::park|Notify'
WRITE_RULES = [
    ('fsync/close: spill file teardown (tmpfs inode evict, 1 GiB of pages freed)', r'shmem_evict_inode|shmem_undo_range|^evict$'),
    ('/dev/fuse read: kernel copies each request (1 MiB) into the daemon buffer', r'fuse_dev_do_read'),
    ('/dev/fuse writev: replies', r'fuse_dev_do_write|fuse_dev_write'),
    ('spill append: pwrite of encoded frames into the spill file (tmpfs)', r'SpillBuf::append'),
    ('spill read-back: pread of 8 MiB into the part buffer', r'SpillBuf::read_exact_at'),
    ('part buffer: vec![0; 8 MiB] zeroing + page faults (unshipped)', r'Upload::unshipped'),
    ('bucket part write: LocalUpload::put_part pwrite into .shrinkfs-tmp (tmpfs)', r'put_part'),
    ('bucket complete / place / put', r'LocalStore.*put_opts|sync_and_etag|Dirs::place|complete'),
    ('FrameCutter::push: FUSE buffer -> frame buffer copy', r'FrameCutter::push'),
    ('encode: zstd compress', r'ZSTD_compress|ZstdCodec.*compress|ZSTD_.*[Cc]ompress|HIST_|FSE_|HUF_'),
    ('encode: looks_compressed sampling', r'looks_compressed|sample_entropy'),
    ('encode: crc32c', r'crc32c'),
    ('encode: payload copy into frame bytes / other', r'encode_frame|finish_frame'),
    ('rayon idle spin (wait_until_cold / sched_yield)', r'wait_until_cold|wait_until_out_of_work|do_sched_yield|sched_yield'),
    ('tokio park/unpark, futex, context switches', PARK),
    ('metrics / tracing', r'prometheus|^tracing::|Metrics::'),
    ('page faults (elsewhere)', r'asm_exc_page_fault'),
    ('fuser dispatch / request parse (other)', r'fuser::'),
]
READ_RULES = [
    ('/dev/fuse writev: reply data copied into the FUSE page cache', r'fuse_dev_do_write|fuse_dev_write'),
    ('/dev/fuse read: request receive', r'fuse_dev_do_read'),
    ('decode: zstd decompress', r'ZSTD_decompress|ZSTD_decode|ZSTD_exec|decompress_zstd|HUF_|ZSTD_buildFSE|BIT_|ZSTD_wildcopy'),
    ('decode: crc32c (stored + raw checksums)', r'crc32c'),
    ('decode: NoneCodec copy / other', r'decode_frame|decode_payload|decompress'),
    ('store get_range: LocalFileSystem open/stat/read into a Vec (spawn_blocking)', r'object_store::local|LocalFileSystem|read_range|get_opts|open_file|std::fs::File::open|read_to_end|Take<std::fs::File>'),
    ('Reader::read: copy of frame slices into the reply Vec (+ alloc)', r'Reader::read'),
    ('moka frame cache get/insert/maintenance', r'moka'),
    ('prefetch bookkeeping / spawn', r'prefetch|read_ahead'),
    ('rayon idle spin (wait_until_cold / sched_yield)', r'wait_until_cold|wait_until_out_of_work|do_sched_yield|sched_yield'),
    ('tokio park/unpark, futex, context switches', PARK),
    ('metrics / tracing', r'prometheus|^tracing::|Metrics::'),
    ('page faults (elsewhere)', r'asm_exc_page_fault'),
    ('[unknown] user code (no symbol; zstd asm decode loop)', r'^\[unknown\]$'),
    ('fuser dispatch / request parse (other)', r'fuser::'),
]
RULES = READ_RULES if '--read' in sys.argv else WRITE_RULES

def samples(path):
    comm = None; frames = []; period = 1
    for line in open(path, errors='replace'):
        if not line.strip():
            if comm is not None: yield comm, period, frames
            comm = None; frames = []; continue
        if not line[0].isspace():
            parts = line.split(); comm = parts[0]
            period = int(parts[-1]) if parts[-1].isdigit() else 1
            continue
        m = re.match(r'\s*([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$', line)
        if m: frames.append(re.sub(r'\+0x[0-9a-f]+$', '', m.group(2)))
    if comm is not None: yield comm, period, frames

def role(frames):
    s = ' '.join(frames[-12:])
    if 'rayon_core' in s: return 'rayon pool'
    if 'multi_thread::worker' in ' '.join(frames): return 'tokio async workers'
    if 'blocking::pool' in s: return 'tokio blocking pool (spawn_blocking)'
    if 'event_loop<' in s or 'fuser::session' in s: return 'fuser request threads'
    if 'tokio::runtime::scheduler' in s or 'multi_thread' in s: return 'tokio workers'
    return 'other/unknown (truncated stack)'

args = [x for x in sys.argv[1:] if not x.startswith('--')]
path = args[0]; cpu_s = float(args[1]) if len(args) > 1 else None
b = collections.Counter(); r = collections.Counter(); br = collections.defaultdict(collections.Counter); n = 0
for comm, period, frames in samples(path):
    n += 1
    name = 'other'
    for nm, rx in RULES:
        if any(re.search(rx, f) for f in frames): name = nm; break
    b[name] += 1; ro = role(frames); r[ro] += 1; br[name][ro] += 1
fmt = lambda k: f'{100*k/n:6.2f}%' + (f'  {cpu_s*k/n:5.2f} s' if cpu_s else '')
print(f'samples {n}' + (f', CPU {cpu_s} s' if cpu_s else ''))
print('\n== by thread role ==')
for k, v in r.most_common(): print(fmt(v), ' ', k)
print('\n== by activity (first matching rule) ==')
for k, v in b.most_common():
    roles = ', '.join(f'{ro} {100*c/n:.1f}%' for ro, c in br[k].most_common(3))
    print(fmt(v), ' ', k, f'   [{roles}]')
