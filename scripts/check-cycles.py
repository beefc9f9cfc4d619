#!/usr/bin/env python3
"""Lists import cycles between the files of a Rust crate: file A refers to a module of file B
(`crate::b::...`, `super::b`, `use crate::{b, ...}`) and B, directly or through others, to A.
Prints each cycle (a strongly connected group of files) and exits 1 when there is one. A parent
module naming its own children by relative paths (`mod x; use x::Y;`) is not counted: a module
directory and its children are meant to know each other.

Usage: scripts/check-cycles.py CRATE_SRC_DIR [...]     e.g. scripts/check-cycles.py fuse/src codec/src
"""
import re
import sys
from pathlib import Path


def module_of(src: Path, f: Path) -> tuple:
    """The module path of file f under src: lib.rs/main.rs -> (), a/mod.rs -> ('a',), a/b.rs -> ('a','b')."""
    parts = list(f.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return tuple(parts)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//")[0] if not line.lstrip().startswith("//") else "" for line in text.splitlines())


def references(text: str, here: tuple) -> set:
    """Module paths a file's code names: crate::a::b..., super::x, and the lists of `use crate::{...}`."""
    refs = set()
    text = strip_comments(text)
    for m in re.finditer(r"\bcrate((?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
        refs.add(tuple(m.group(1).split("::")[1:]))
    for m in re.finditer(r"\buse\s+crate::\{([^;]*)\}", text, flags=re.S):
        for item in re.split(r",\s*", m.group(1)):
            path = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)", item)
            if path:
                refs.add(tuple(path.group(1).split("::")))
    for m in re.finditer(r"\b((?:super::)+)([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)", text):
        up = m.group(1).count("super::")
        if up <= len(here):
            refs.add(here[: len(here) - up] + tuple(m.group(2).split("::")))
    return refs


def tarjan(graph: dict) -> list:
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def check(src: Path) -> list:
    files = {module_of(src, f): f for f in src.rglob("*.rs")}
    graph = {}
    for mod, f in files.items():
        deps = set()
        for ref in references(f.read_text(), mod):
            # The longest module prefix of the reference that is a file of this crate.
            for k in range(len(ref), 0, -1):
                if ref[:k] in files:
                    if ref[:k] != mod:
                        deps.add(ref[:k])
                    break
        graph[mod] = deps
    return [[str(files[m].relative_to(src.parent)) for m in group] for group in tarjan(graph)]


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    found = False
    for arg in sys.argv[1:]:
        cycles = check(Path(arg))
        if not cycles:
            print(f"{arg}: no import cycles between files")
        for group in cycles:
            found = True
            print(f"{arg}: cycle: {' <-> '.join(group)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
