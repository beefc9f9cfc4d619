#!/usr/bin/env python3
"""Summarise `perf script -F comm,tid,period,ip,sym,dso` output: self and inclusive (children)
percentages by symbol, by thread group, and by user-defined buckets (first matching rule on the
stack, leaf to root). Usage: stacks.py FILE [--top N] [--comm REGEX] [--buckets]"""
import re, sys, collections, argparse

ap = argparse.ArgumentParser()
ap.add_argument('file'); ap.add_argument('--top', type=int, default=30)
ap.add_argument('--comm', default=None); ap.add_argument('--buckets', action='store_true')
ap.add_argument('--callers', default=None, help='regex: show the user-level callers of matching leaf symbols')
ap.add_argument('--depth', type=int, default=6)
a = ap.parse_args()

def samples(path):
    comm = None; frames = []; period = 1
    for line in open(path, errors='replace'):
        if not line.strip():
            if comm is not None: yield comm, period, frames
            comm = None; frames = []; continue
        if not line.startswith('\t') and not line.startswith(' '):
            parts = line.split()
            comm = parts[0]; period = int(parts[-1]) if parts[-1].isdigit() else 1
            continue
        m = re.match(r'\s*([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$', line)
        if m:
            sym = m.group(2)
            sym = re.sub(r'\+0x[0-9a-f]+$', '', sym)
            frames.append((sym, m.group(3)))
    if comm is not None: yield comm, period, frames

def group(comm):
    if comm.startswith('fuser-'): return 'fuser-* (FUSE request threads)'
    return comm

selfc = collections.Counter(); incl = collections.Counter(); groups = collections.Counter()
total = 0; all_samples = []
for comm, period, frames in samples(a.file):
    if a.comm and not re.search(a.comm, comm): continue
    total += 1
    groups[group(comm)] += 1
    if frames:
        s, d = frames[0]; selfc[('[k] ' if 'kernel' in d else '[.] ') + s] += 1
    seen = set()
    for s, d in frames:
        k = ('[k] ' if 'kernel' in d else '[.] ') + s
        if k not in seen: seen.add(k); incl[k] += 1
    all_samples.append((comm, frames))

print(f'samples: {total}')
print('\n== by thread group ==')
for g, n in groups.most_common(): print(f'{100*n/total:6.2f}%  {g}')
print(f'\n== self (no children), top {a.top} ==')
for k, n in selfc.most_common(a.top): print(f'{100*n/total:6.2f}%  {k[:150]}')
GENERIC = re.compile('|'.join([
    r'call_once', r'catch_unwind', r'do_call', r'closure_env', r'\{closure#', r'__rust_begin_short_backtrace', r'thread_start',
    r'start_thread', r'clone3', r'entry_SYSCALL', r'do_syscall_64', r'x64_sys_call', r'block_on', r'enter_runtime', r'with_budget',
    r'budget<', r'Instrumented', r'::poll$', r'^\[\.\] poll<', r'Harness', r'Core<T,S>::poll', r'with_mut<', r'set<', r'Scoped',
    r'run_worker', r'Inner::run', r'blocking::task', r'BlockingTask', r'event_loop', r'dispatch<', r'dispatch_req', r'run<',
    r'^\[\.\] (write|read|fsync|run|append|receive|receive_retrying|read_exact_at|main_loop|wait_until_cold|wait_until_out_of_work|read_buf|default_read_to_end|park|unpark|lock|get|insert)$',
    r'std::sys::fd::unix::FileDesc', r'std::sys::fs::unix::File>', r'ThreadBuilder::run', r'spawn_unchecked', r'<alloc::boxed::Box<dyn']))
print(f'\n== inclusive (children), top {a.top}, generic wrappers (thread start, closures, block_on, inlined shims) left out ==')
shown = 0
for k, n in incl.most_common():
    if GENERIC.search(k): continue
    print(f'{100*n/total:6.2f}%  {k[:150]}'); shown += 1
    if shown >= a.top: break

if a.callers:
    print(f'\n== callers of leaf /{a.callers}/ (first {a.depth} non-generic frames) ==')
    c = collections.Counter(); tot = 0
    for comm, frames in all_samples:
        if frames and re.search(a.callers, frames[0][0]):
            tot += 1
            chain = [f[0] for f in frames[1:] if not re.match(r'^(_raw_spin|__raw|entry_SYSCALL|do_syscall_64|x64_sys_call)', f[0])][:a.depth]
            c[' <- '.join(chain)] += 1
    for k, n in c.most_common(25): print(f'{100*n/total:6.2f}% ({n})  {k[:400]}')
