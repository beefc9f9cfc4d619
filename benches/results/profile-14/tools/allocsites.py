#!/usr/bin/env python3
"""Allocation call sites from `perf script` of uprobes on libc malloc/calloc/realloc: the first
three frames that are not allocator plumbing. Usage: allocsites.py FILE [N]"""
import re, sys, collections
def samples(path):
    comm=None; frames=[]
    for line in open(path, errors='replace'):
        if not line.strip():
            if comm is not None: yield comm, frames
            comm=None; frames=[]; continue
        if not line[0].isspace(): comm=line.split()[0]; continue
        m=re.match(r'\s*([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$', line)
        if m: frames.append(re.sub(r'\+0x[0-9a-f]+$','',m.group(2)))
    if comm is not None: yield comm, frames
SKIP=re.compile(r'malloc|calloc|realloc|alloc::|RawVec|raw_vec|alloc_impl|with_capacity|Vec<|to_owned|to_vec|clone|from_iter|__rust_|exchange_malloc|Box<|new_uninit|allocate|finish_grow|grow_|reserve|extend|String|spec_|try_allocate|do_reserve|::new$|^new$|<T as|inlined')
c=collections.Counter(); n=0
for comm, fr in samples(sys.argv[1]):
    n+=1; c[' <- '.join([f for f in fr if not SKIP.search(f)][:3])]+=1
print(n, 'allocation calls')
for k,v in c.most_common(int(sys.argv[2]) if len(sys.argv)>2 else 30): print(f'{v:7d}  {k[:230]}')
