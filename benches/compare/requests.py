#!/usr/bin/env python3
"""Store requests per small-file step, read from a shrinkfs mount's Prometheus metrics (issue 18).

Usage (root: it drops the kernel's caches before stat, read and ls -l, as bench fs does):
  shrinkfs mount BUCKET MNT --daemon --metrics-addr 127.0.0.1:9464
  benches/compare/requests.py MNT http://127.0.0.1:9464/metrics 2000
Creates, stats, reads, lists (ls -l) and deletes N 4 KiB files in MNT/small, then fsyncs the
directory (which waits for deletes still running behind their unlinks), printing the store
requests of each step by kind and the seconds they took (summed over concurrent requests).
With so few files that the stat step starts within a second of the last create, shrinkfs 282fa5a
fails it with ENOENT (the lookup bug in BENCHMARKS.md section 8).
"""
import os, sys, time, re, urllib.request
mnt, murl, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def scrape():
    txt = urllib.request.urlopen(murl).read().decode()
    c, s = {}, {}
    for m in re.finditer(r'shrinkfs_store_request_duration_seconds_(count|sum)\{kind="([a-z_]+)",outcome="([a-z]+)"\} ([0-9.e+-]+)', txt):
        d = c if m.group(1) == 'count' else s
        d[m.group(2)] = d.get(m.group(2), 0) + float(m.group(4))
    return c, s
def drop():
    os.sync(); open('/proc/sys/vm/drop_caches', 'w').write('3')
d = os.path.join(mnt, 'small'); os.makedirs(d, exist_ok=True)
data = (open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'BENCHMARKS.md'), 'rb').read() * 2)[:4096]
steps = [('create', lambda i: open(os.path.join(d, f'f{i:06}.dat'), 'wb').write(data)),
         ('stat', lambda i: os.lstat(os.path.join(d, f'f{i:06}.dat'))),
         ('read', lambda i: open(os.path.join(d, f'f{i:06}.dat'), 'rb').read()),
         ('ls -l', None),
         ('delete', lambda i: os.remove(os.path.join(d, f'f{i:06}.dat'))),
         ('fsync dir', None)]
for name, f in steps:
    if name in ('stat', 'read', 'ls -l'): drop()
    c0, s0 = scrape(); t = time.time()
    if name == 'fsync dir':
        # Waits for the deletes an S3 mount runs behind its unlinks (--deletes-behind).
        fd = os.open(d, os.O_RDONLY); os.fsync(fd); os.close(fd)
    elif f is None:
        for e in os.scandir(d): os.lstat(e.path)
    else:
        for i in range(n): f(i)
    el = time.time() - t; c1, s1 = scrape()
    diff = {k: int(c1[k] - c0.get(k, 0)) for k in c1 if c1[k] - c0.get(k, 0) > 0}
    secs = {k: round(s1[k] - s0.get(k, 0), 2) for k in diff}
    print(f'{name:7} {el:7.2f} s  requests {diff}  request-seconds {secs}', flush=True)
