#!/usr/bin/env python3
"""layers.py - the include graph of src/ between folders, checked against the layers.

    tools/layers.py              the folder graph (arrows with the number of includes)
    tools/layers.py --dot        the same as Graphviz dot
    tools/layers.py --src DIR    the graph of another tree's src/ (an earlier commit)
    tools/layers.py --check      exit 1 when an include goes from a lower layer to a higher
                                 one, or between folders of one layer, and is not one of
                                 the known exceptions below (each says why it is there)

Layers, lowest first; a folder may include its own files and those of lower layers:

    base       log, params, statuses, hashing, addresses, the syscall table, wire formats
    reduce     the per-element math and host reductions (the CUDA kernels share elem.h)
    algo, transport, cuda
               schedules and their cost, transports, CUDA
    core       the engine, executor, plans, bootstrap, topology, traces, agreement
    path       the ways a call runs (flat, sched) and the chooser
    api        the public calls (the stream-ordered ones and their CUDA IPC path too),
               comms, launchers, the quantized all-reduce
    compat     the NCCL library, on the public API

Known exceptions (an include that must cross the layers, with the reason) would go in
KNOWN below; there are none. The test fails on a new exception as on a stale one.
"""
import collections
import os
import re
import sys

LAYERS = [
    ('base',),
    ('reduce',),
    ('algo', 'transport', 'cuda'),
    ('core',),
    ('path',),
    ('api',),
    ('compat',),
]
RANK = {f: i for i, group in enumerate(LAYERS) for f in group}

# (from file, to file): why the arrow is still there
KNOWN = {
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def graph(src):
    files = {}
    for d, _, names in os.walk(src):
        for n in names:
            if n.endswith(('.c', '.h', '.cu')):
                p = os.path.join(d, n)
                files[os.path.relpath(p, src)] = p
    arrows = []
    for rel, path in sorted(files.items()):
        text = open(path, encoding='utf-8', errors='replace').read()
        for inc in INCLUDE.findall(text):
            target = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            if target not in files:
                target = os.path.normpath(inc)  # "core/exec.h" from the src/ include dir
            if target not in files:
                continue  # public or generated headers (coll.h, coll_config.h)
            arrows.append((rel, target))
    return arrows


def folder(rel):
    return rel.split('/', 1)[0] if '/' in rel else '.'


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    args = sys.argv[1:]
    src = os.path.join(here, '..', 'src')
    if '--src' in args:  # another tree's src/, e.g. an earlier commit's worktree
        src = args[args.index('--src') + 1]
    arrows = graph(src)
    counts = collections.Counter((folder(a), folder(b)) for a, b in arrows
                                 if folder(a) != folder(b))
    if '--dot' in args:
        print('digraph layers {\n  rankdir=BT;')
        for (a, b), n in sorted(counts.items()):
            bad = RANK.get(a, 99) <= RANK.get(b, 99)
            print(f'  "{a}" -> "{b}" [label="{n}"{", color=red" if bad else ""}];')
        print('}')
        return 0
    if '--check' not in args:
        for (a, b), n in sorted(counts.items()):
            up = RANK.get(a, 99) <= RANK.get(b, 99)
            print(f'{a:>10} -> {b:<10} {n:3d}{"   (upward or sideways)" if up else ""}')
        return 0
    bad, seen = [], set()
    for a, b in arrows:
        fa, fb = folder(a), folder(b)
        if fa == fb or RANK.get(fa, 99) > RANK.get(fb, 99):
            continue
        if (a, b) in KNOWN:
            seen.add((a, b))
            continue
        bad.append(f'{a} includes {b}: {fa} (layer {RANK.get(fa, "?")}) may not see '
                   f'{fb} (layer {RANK.get(fb, "?")})')
    stale = [f'{a} -> {b}' for a, b in KNOWN if (a, b) not in seen]
    for m in bad:
        print('layer violation:', m)
    for m in stale:
        print('stale exception (the include is gone: remove it from KNOWN):', m)
    print(f'{len(arrows)} includes, {len(seen)} known exceptions, {len(bad)} violations, '
          f'{len(stale)} stale')
    return 1 if bad or stale else 0


if __name__ == '__main__':
    sys.exit(main())
