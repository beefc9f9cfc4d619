#!/usr/bin/env python3
"""Leaf breakdown of samples whose stack matches REGEX: stacks.py-style, for sub-bucket detail.
Usage: leaves.py FILE REGEX [N]"""
import sys, re, collections
path, rx = sys.argv[1], sys.argv[2]; N = int(sys.argv[3]) if len(sys.argv) > 3 else 15
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
tot=0; hit=0; leaf=collections.Counter(); mid=collections.Counter()
for comm, fr in samples(path):
    tot+=1
    if any(re.search(rx,f) for f in fr):
        hit+=1; leaf[fr[0]]+=1
        # first kernel entry point or notable frame
        k=[f for f in fr if re.match(r'^(asm_exc_page_fault|shmem_file_read_iter|shmem_file_write_iter|__x64_sys_\w+|malloc|_int_malloc|__memcpy\w*|crc32c\S*|clear_page\w*|free|_int_free|__munmap|__mmap)', f)]
        mid[k[0] if k else '(user code)']+=1
print(f'{hit} of {tot} samples ({100*hit/tot:.1f}%) match /{rx}/')
print('-- leaves --')
for k,v in leaf.most_common(N): print(f'{100*v/tot:6.2f}%  {k[:120]}')
print('-- via --')
for k,v in mid.most_common(N): print(f'{100*v/tot:6.2f}%  {k[:120]}')
